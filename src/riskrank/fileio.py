"""Files: every artefact riskrank writes, and the JSON and JSONL it reads.

Writes are atomic: a reader (or a crash) never sees a half-written file, and a failed write
never damages the file that was there. Every file gets one permission policy, that of an
ordinary ``open()``: ``0o666`` less the process umask (``0o644`` under the usual 022), so a
checkpoint, a graph or a report written here reads like any other file; a temporary file's
own ``0o600`` never survives the rename.

Reads are strict (:func:`loads_strict`): JSON as RFC 8259 defines it and nothing a permissive
parser would quietly resolve. A duplicate key (Python's parser keeps the last value, so a tool
given ``"risk_level": 5`` and then ``1`` would be served as L1), ``NaN``/``Infinity`` and
numbers that overflow to infinity (they make scores NaN and responses unserialisable), numbers
of more than :data:`MAX_NUMBER_CHARS` characters (Python refuses to convert integers of over
4,300 digits with an exception of its own) and nesting the parser cannot recurse through are
each one error naming the file. :func:`decode_json_bytes` accepts what RFC 8259 allows a reader
to accept: UTF-8 with or without a BOM, and UTF-16/32 (with a BOM or detected).

Kept free of heavy imports (numpy is only recognised, never imported), so commands that only
write JSON stay fast.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import math
import os
import stat
import tempfile
import time
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from riskrank.errors import RiskrankError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Read once at import (reading the umask means setting it, which is not thread-safe).
FILE_MODE = 0o666 & ~_umask()
DIR_MODE = 0o777 & ~_umask()


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, suffix: str = ".tmp", mode: int | None = None,
                  exclusive: bool = False) -> Iterator[IO[bytes]]:
    """A binary file handle whose contents replace ``path`` when the block ends without an
    error (fsync, then ``os.replace``); on any error, including one raised by the caller to
    reject what it wrote, the temporary file (``.NAME.*SUFFIX`` beside ``path``) is removed
    and ``path`` is untouched. ``mode``: the file's permissions instead of :data:`FILE_MODE`
    (a user's file rewritten in place keeps its own; a file holding secrets gets ``0o600``).
    ``exclusive``: create ``path``, never replace it (``FileExistsError`` if someone created it
    meanwhile: the new file is linked in, not renamed over)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    except OSError as exc:  # named as the file asked for, not as the temporary one beside it
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), FILE_MODE if mode is None else mode)
        if exclusive:
            os.link(tmp, path)
            Path(tmp).unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> None:
    with atomic_writer(path, mode=mode) as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None, exclusive: bool = False) -> None:
    """``text`` as UTF-8; a lone surrogate (a file name that is not UTF-8, quoted in what is
    written) becomes its ``\\udcff`` escape, which JSON reads back as the same character."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
    with atomic_writer(path, mode=mode, exclusive=exclusive) as fh:
        fh.write(data)


def replace_if_unchanged(path: str | os.PathLike[str], expected: bytes, new: bytes, mode: int, changed: Exception,
                         *, max_bytes: int = 64 * 1024 * 1024) -> None:
    """Replace a user's file (through a symlink, its target) with ``new``, atomically, only if
    it still holds ``expected`` (else raise ``changed``: whoever saved it meanwhile keeps their
    save); its owner is kept where this process may keep it."""
    real = Path(path).resolve()
    st = os.stat(real)
    if read_regular_file(real, max_bytes=max_bytes, timeout_s=10) != expected:
        raise changed
    atomic_write_bytes(real, new, mode=mode)
    if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(OSError):  # only root may give a file away; anyone else wrote their own file
            os.chown(real, st.st_uid, st.st_gid)


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int | None = None, timeout_s: float | None = None) -> bytes:
    """The bytes of a regular file, refusing anything that could block or never end: the file
    is opened non-blocking (a FIFO nobody writes to cannot wedge the reader), must be a regular
    file (not a device such as ``/dev/zero``, a FIFO, a socket or a directory), is refused over
    ``max_bytes`` before a byte is read and again if it grows while being read, and the read
    stops after ``timeout_s``. Raises :class:`OSError` (``FileNotFoundError``,
    ``PermissionError``, ...) for what ``open`` refuses and :class:`UnsafeFileError` for the rest."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError("not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise UnsafeFileError(f"{info.st_size:,} bytes, over the limit of {max_bytes:,}")
        os.set_blocking(fd, True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise UnsafeFileError(f"over the limit of {max_bytes:,} bytes")
            if deadline is not None and time.monotonic() > deadline:
                raise UnsafeFileError(f"not read within {timeout_s:g} s")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class UnsafeFileError(RiskrankError):
    """A file :func:`read_regular_file` refuses to read (not regular, too large, too slow)."""


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays (duck-typed: no numpy import)."""
    if hasattr(o, "tolist") and hasattr(o, "dtype"):
        return o.tolist()  # numpy arrays and scalars: Python ints, floats, bools, nested lists
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def dumps(obj: Any, *, indent: int | None = 2, **kwargs: Any) -> str:
    """JSON text of ``obj``, numpy values included."""
    return json.dumps(obj, indent=indent, default=json_default, **kwargs)


def write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2, **kwargs: Any) -> None:
    """Write ``obj`` as JSON (numpy values included, a final newline), atomically."""
    atomic_write_text(path, dumps(obj, indent=indent, **kwargs) + "\n")


# -- strict JSON ----------------------------------------------------------------------------------
#: The longest number literal a strict read accepts: no registry, benchmark, sidecar or request
#: needs more, and Python's ``int()`` refuses over 4,300 digits with an exception of its own.
MAX_NUMBER_CHARS = 100
#: The longest piece of a bad value an error message shows (messages are one line, <= 300 chars).
SHOW_CHARS = 40


# Set while reading a file whose contents must not reach the caller (a server's reload).
_REDACT: contextvars.ContextVar[bool] = contextvars.ContextVar("riskrank_redact_values", default=False)


@contextlib.contextmanager
def redacted_values(on: bool = True) -> Iterator[None]:
    """Within the block, :func:`show` (and so every strict-read message) names a bad value's
    type only: for reading a file on behalf of a caller who must not learn its contents."""
    token = _REDACT.set(on or _REDACT.get())
    try:
        yield
    finally:
        _REDACT.reset(token)


def values_redacted() -> bool:
    """True inside :func:`redacted_values`."""
    return _REDACT.get()


def show(value: Any, limit: int = SHOW_CHARS) -> str:
    """A bad value as an error message may show it: ``repr`` with control, invisible and
    surrogate characters escaped, at most ``limit`` characters, containers by type and size
    only (a message must never echo a 600,000-character list, nor file contents at length).
    Inside :func:`redacted_values`, only the type."""
    if _REDACT.get():
        return f"a value of type {type(value).__name__}"
    if isinstance(value, dict):
        return f"an object of {len(value):,} key(s)"
    if isinstance(value, list | tuple):
        return f"a list of {len(value):,} item(s)"
    if isinstance(value, str):
        text = repr(value)  # escapes control characters, lone surrogates and non-printable ones
        if len(text) > limit:
            return f"{text[: limit - 1]}…' ({len(value):,} characters)"
        return text
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text):,} characters)"


#: The Unicode categories a terminal must not receive raw: controls, format characters,
#: surrogates, line and paragraph separators.
_UNSHOWN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def terminal_safe(text: str) -> str:
    """``text`` as a terminal may be shown it: every control character but the line feed and
    the tab, every format character (bidi overrides and isolates, zero-width characters, tag
    characters, the BOM), the line and paragraph separators and lone surrogates become
    ``\\uXXXX`` (a character beyond the BMP as its surrogate pair). A name cannot reorder,
    hide, recolour or overwrite what the CLI prints around it, and the escape is JSON's own,
    so a JSON document printed through it still reads back to the same values."""
    if text.isascii() and text.isprintable():
        return text
    out = []
    for c in text:
        if c in "\n\t" or unicodedata.category(c) not in _UNSHOWN:
            out.append(c)
        elif ord(c) > 0xFFFF:
            v = ord(c) - 0x10000
            out.append(f"\\u{0xD800 + (v >> 10):04x}\\u{0xDC00 + (v & 0x3FF):04x}")
        else:
            out.append(f"\\u{ord(c):04x}")
    return "".join(out)


#: What a spreadsheet reads as the start of a formula (after NFKC: the full-width and small
#: forms of these signs are the same sign to it).
_FORMULA_SIGNS = ("=", "+", "-", "@")


def spreadsheet_cell(value: Any) -> str:
    """A CSV cell a spreadsheet shows as text and never runs (CSV injection): None is empty,
    a non-string is its compact JSON, and a cell that starts with a formula sign (``=``,
    ``+``, ``-``, ``@``, in any Unicode form that NFKC folds to one: the full-width ``＝``),
    with whitespace of any kind (a space, a tab, a line break, an ideographic space: some
    spreadsheets strip it, then read the formula), or with another control character gets a
    leading ``'``. Line breaks inside a cell are the CSV writer's to quote."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if not isinstance(value, str) and not _utf8(text):  # a lone surrogate: kept as its escape
        text = json.dumps(value, separators=(",", ":"), default=str)
    first = text[:1]
    if first and (first.isspace() or not first.isprintable()
                  or unicodedata.normalize("NFKC", first)[:1] in _FORMULA_SIGNS):
        return "'" + text
    return text


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Refused(Exception):
    """Raised by the parser hooks; turned into the caller's error class with the source."""


class RefusedNumber:
    """A number :func:`loads_strict` refused (``NaN``, an infinity, an overflowing or runaway
    literal), left in place by ``mark_numbers=True`` so that a caller validating records can
    name the record and the field it sits in; :func:`check_json_values` refuses it."""

    __slots__ = ("text", "why")

    def __init__(self, text: str, why: str) -> None:
        self.text, self.why = text, why

    def __repr__(self) -> str:
        return self.text if len(self.text) <= 24 else f"a number of {len(self.text):,} characters"


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {show(key)} in one JSON object (which value counts would be a guess)")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})")
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"a number out of range (not finite){'' if _REDACT.get() else ': ' + show(text, 24)[1:-1]}")
    return value


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number of {len(text):,} digits (at most {MAX_NUMBER_CHARS})")
    return int(text)


def _float_any(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})")
    return float(text)


def _marking(hook: Any) -> Any:
    def mark(text: str) -> Any:
        try:
            return hook(text)
        except _Refused as exc:
            return RefusedNumber(text, str(exc))

    return mark


def loads_strict(text: str, source: str, error: type[RiskrankError] = RiskrankError, *, line: int | None = None,
                 non_finite: bool = False, mark_numbers: bool = False) -> Any:
    """``json.loads`` that refuses what RFC 8259 leaves undefined or Python would accept
    silently (see the module docstring); each refusal is ``error("SOURCE: why")``, one line.
    ``line``: the text is that line of a JSONL file (messages say ``SOURCE: line N: ...``).
    ``non_finite``: let NaN, Infinity and overflowing numbers through as floats, for a
    caller whose schema then names the field that is out of range (an HTTP request).
    ``mark_numbers``: leave a :class:`RefusedNumber` where a number is refused, for a caller
    that validates field by field (a registry) and so can say where it was."""
    where = source if line is None else f"{source}: line {line}"
    hooks: dict[str, Any] = {"parse_float": _float_any} if non_finite else {"parse_constant": _constant, "parse_float": _float}
    hooks["parse_int"] = _int
    if mark_numbers:
        hooks = {k: _marking(v) for k, v in hooks.items()}
    try:
        return json.loads(text, object_pairs_hook=_object, **hooks)
    except _Refused as exc:
        raise error(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        if line is not None:
            raise error(f"{where}: invalid JSON ({exc.msg})") from None
        raise error(f"{where}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply to read") from None


def decode_json_bytes(data: bytes, source: str, error: type[RiskrankError] = RiskrankError) -> str:
    """The text of a JSON/JSONL file: UTF-8 (a BOM is allowed and dropped) or UTF-16/32 (by
    BOM, or by the zero bytes of ASCII text, as :func:`json.detect_encoding` reads them)."""
    encoding = json.detect_encoding(data)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise error(f"{source}: not UTF-8 text (nor UTF-16/32)") from None


def check_json_values(value: Any, source: str, error: type[RiskrankError] = RiskrankError, *, max_depth: int = 64,
                      max_string: int | None = None) -> None:
    """Walk an already-parsed JSON value once: every string and key must be valid Unicode
    (no lone surrogate: it cannot be written back as UTF-8, so a response holding it fails),
    at most ``max_string`` characters when given, every float finite (data built in Python,
    not read by :func:`loads_strict`, can hold NaN), and nesting at most ``max_depth`` deep
    (serving recurses through it)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        v, where, depth = stack.pop()
        if depth > max_depth:
            raise error(f"{source}: nested more than {max_depth} levels deep{_at(where)}")
        if isinstance(v, str):
            if max_string is not None and len(v) > max_string:
                raise error(f"{source}: a string of {len(v):,} characters; at most {max_string:,} are accepted{_at(where)}")
            _check_text(v, source, where, error)
        elif isinstance(v, RefusedNumber):
            raise error(f"{source}: {v.why}{_at(where)}")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise error(f"{source}: {v} is not a JSON number{_at(where)}")
        elif isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str):
                    _check_text(k, source, where, error)
                stack.append((item, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k!r}]", depth + 1))
        elif isinstance(v, list | tuple):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(v))


def _at(where: str) -> str:
    if not where:
        return ""
    if _REDACT.get():  # the path holds the file's own keys: keep only the leading index
        head = where.split(".")[0].split("]")[0] + "]" if where.startswith("[") else ""
        return f" (at {head})" if head else ""
    return f" (at {show(where.lstrip('.'), 60)[1:-1]})"


def _check_text(s: str, source: str, where: str, error: type[RiskrankError]) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{source}: invalid Unicode (a lone surrogate){'' if _REDACT.get() else ' in ' + show(s)}{_at(where)}") from None


def jsonl_records(lines: Iterable[str], source: str, error: type[RiskrankError] = RiskrankError, *,
                  mark_numbers: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-empty line, parsed by :func:`loads_strict`; a bad
    line raises ``error("SOURCE: line N: ...")``."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        yield lineno, loads_strict(line, source, error, line=lineno, mark_numbers=mark_numbers)


def read_jsonl(path: str | os.PathLike[str], error: type[RiskrankError] = RiskrankError) -> Iterator[tuple[int, Any]]:
    """:func:`jsonl_records` of a file (UTF-8), read line by line."""
    with Path(path).open(encoding="utf-8") as fh:
        yield from jsonl_records(fh, str(path), error)


def write_weights_folder(folder: str | Path, arrays: dict[str, Any], meta: dict[str, Any], weights: str, sidecar: str,
                         *, ensure_ascii: bool = True) -> Path:
    """Write ``arrays`` as safetensors and ``meta`` (with the weights' sha256) as the JSON
    sidecar, each atomically: the one form of riskrank's small NumPy models (the level model,
    the poisoning detector)."""
    from safetensors.numpy import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    blob = save(arrays)
    atomic_write_bytes(folder / weights, blob)
    meta = {**meta, "weights_sha256": hashlib.sha256(blob).hexdigest()}
    atomic_write_bytes(folder / sidecar, (json.dumps(meta, indent=1, sort_keys=True, ensure_ascii=ensure_ascii) + "\n").encode())
    return folder


def read_weights_folder(folder: str | Path, weights: str, sidecar: str, fmt: str, what: str,
                        error: type[RiskrankError], rebuild: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """The sidecar and the arrays of a folder :func:`write_weights_folder` wrote, checked: a
    missing file, a corrupt sidecar, another format, weights whose sha256 is not the sidecar's
    or that safetensors cannot load are each ``error`` naming the file. ``rebuild``: what to
    say after a wrong format."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    folder = Path(folder)
    side, blob_path = folder / sidecar, folder / weights
    if not folder.exists():
        raise error(f"{folder}: no such {what} folder")
    if not folder.is_dir():
        raise error(f"{folder}: a {what} is a folder (holding {sidecar} and {weights}), not a file")
    for f in (side, blob_path):
        if not f.is_file():
            raise error(f"{folder}: missing {f.name}; not a {what}")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{side}: corrupt {what} sidecar ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise error(f"{side}: not a {fmt} sidecar" + (f" (found {found!r}; {rebuild})" if rebuild else ""))
    blob = blob_path.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("weights_sha256"):
        raise error(f"{blob_path}: does not match the sidecar's sha256 (corrupt, partially written, or of another run)")
    try:
        arrays = load(blob)
    except (SafetensorError, ValueError) as exc:
        raise error(f"{blob_path}: cannot load ({str(exc).splitlines()[0][:160]})") from None
    return meta, arrays
