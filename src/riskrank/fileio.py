"""Files: every artefact riskrank writes, and the JSONL it reads.

Writes are atomic: a reader (or a crash) never sees a half-written file, and a failed write
never damages the file that was there. Every file gets one permission policy, that of an
ordinary ``open()``: ``0o666`` less the process umask (``0o644`` under the usual 022), so a
checkpoint, a graph or a report written here reads like any other file; a temporary file's
own ``0o600`` never survives the rename.

Kept free of heavy imports (numpy is only recognised, never imported), so commands that only
write JSON stay fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
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
def atomic_writer(path: str | os.PathLike[str], *, suffix: str = ".tmp") -> Iterator[IO[bytes]]:
    """A binary file handle whose contents replace ``path`` when the block ends without an
    error (fsync, then ``os.replace``); on any error, including one raised by the caller to
    reject what it wrote, the temporary file (``.NAME.*SUFFIX`` beside ``path``) is removed
    and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_writer(path) as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


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


def jsonl_records(lines: Iterable[str], source: str, error: type[RiskrankError] = RiskrankError) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-empty line; a line that is not JSON raises
    ``error("SOURCE: line N: invalid JSON (...)")``."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{source}: line {lineno}: invalid JSON ({exc.msg})") from None
        yield lineno, value


def read_jsonl(path: str | os.PathLike[str], error: type[RiskrankError] = RiskrankError) -> Iterator[tuple[int, Any]]:
    """:func:`jsonl_records` of a file (UTF-8), read line by line."""
    with Path(path).open(encoding="utf-8") as fh:
        yield from jsonl_records(fh, str(path), error)
