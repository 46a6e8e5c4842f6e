"""Fill a data directory with the benchmark files, from a local mirror or from upstream.

The data directory keeps the ``<owner>/<repo>/<path>`` layout of the mirror, so any mirror
directory can be passed straight to ``--data``. Fetching exists so that a user with internet
needs no mirror and CI can copy from one; either way every file is checked against the
manifest's sha256 before it lands, because a silently truncated or changed benchmark file
would change every reported number.

Files are written to a temporary file in the destination directory and moved into place
with :func:`os.replace` only after verification, so an interrupted or corrupt transfer never
leaves a half-written file or damages a good one already there.

Optional files (``mirrored: false`` in the manifest: UltraTool ``dev.json``, Seal-Tools
``train.jsonl`` and ``test_out_domain.jsonl``) may be missing at the source; the protocols
have a documented fallback for each, which :meth:`FetchReport.format` spells out.

Two of them (UltraTool ``dev.json``, Seal-Tools ``train.jsonl``) have no sha256 in the
manifest: they were never mirrored here, so no copy could be hashed, and a hash is not
guessed. Such a file is not installed (status ``unverified``, one line saying so) unless the
caller passes ``allow_unverified`` (``riskrank data fetch --allow-unverified``), because an
unchecked file would change every number computed from it without a trace.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from riskrank.errors import DataError
from riskrank.fileio import atomic_writer

#: The packaged copy of the mirror's ``MANIFEST.json`` (upstream repo, commit, sha256 per file).
MANIFEST_PATH = Path(__file__).parent / "manifest.json"

#: Upstream raw-file address; fields ``repo`` (owner/name), ``commit`` and ``path``.
UPSTREAM_RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"

#: Environment variable overriding :data:`UPSTREAM_RAW_URL` (tests, proxies, private mirrors).
UPSTREAM_URL_ENV = "RISKRANK_UPSTREAM_URL"

#: Value of ``source`` that means "download from upstream" rather than "copy from a directory".
UPSTREAM = "upstream"

Status = Literal["fetched", "present", "absent", "unverified", "error"]

_CHUNK = 1 << 20

#: What a missing optional file means for the protocols, keyed by (repo, path).
_ABSENT_CONSEQUENCE: dict[tuple[str, str], str] = {
    ("JoeYing1019/UltraTool", "data/English-dataset/dev.json"): (
        "UltraTool dev.json absent: the UltraTool protocol falls back to 5-fold "
        "cross-fitting over test.json"
    ),
    ("fairyshine/Seal-Tools", "Seal-Tools_Dataset/train.jsonl"): (
        "Seal-Tools train.jsonl absent: Seal-Tools training uses dev.jsonl"
    ),
    ("fairyshine/Seal-Tools", "Seal-Tools_Dataset/test_out_domain.jsonl"): (
        "Seal-Tools test_out_domain.jsonl absent: no out-of-domain Seal-Tools split is evaluated"
    ),
}


@dataclass(frozen=True)
class ManifestEntry:
    """One benchmark file: where it comes from and how to recognise a good copy.

    ``sha256`` and ``bytes`` are ``None`` when the hash/size is not pinned (files too large
    to mirror whose exact upstream copy was never hashed here). ``corpus`` names the
    training corpus a file belongs to (``bfcl``, ``apibench``, ``apibank``, ``toolalpaca``),
    or the reference set (``attack``: MITRE ATT&CK Enterprise, the vocabulary of the level
    model's capabilities; ``bfcl-multi-turn``: multi-step tasks with their ground truth and
    API simulators; ``bipia``: indirect prompt-injection instructions); None for the benchmark
    files, so a loader can list its files from the manifest;
    ``license`` is the upstream license as stated there.
    """

    repo: str
    commit: str
    path: str
    bytes: int | None
    sha256: str | None
    mirrored: bool
    note: str | None = None
    corpus: str | None = None
    license: str | None = None

    @property
    def rel_path(self) -> str:
        """Path inside a data directory or mirror: ``<owner>/<repo>/<path>``."""
        return f"{self.repo}/{self.path}"

    @property
    def optional(self) -> bool:
        """Optional files are the ones not mirrored: the protocols work without them."""
        return not self.mirrored

    @property
    def upstream_url(self) -> str:
        """The raw upstream address of this file at the pinned commit."""
        return self.url(UPSTREAM_RAW_URL)

    def url(self, template: str) -> str:
        """Fill a URL template with ``{repo}``, ``{commit}`` and ``{path}``."""
        return template.format(repo=self.repo, commit=self.commit, path=self.path)


def load_manifest(path: str | Path | None = None) -> list[ManifestEntry]:
    """Read a manifest (default: the packaged one) into entries, rejecting unsafe paths.

    Paths are checked because they are joined onto the user's data directory: an absolute
    path or ``..`` in a hand-edited manifest must not write outside it.
    """
    mpath = Path(path) if path is not None else MANIFEST_PATH
    try:
        raw = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"manifest {mpath}: file not found") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"manifest {mpath}: cannot read JSON ({exc})") from None
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, list):
        raise DataError(f"manifest {mpath}: expected an object with a 'files' list")
    entries: list[ManifestEntry] = []
    for i, rec in enumerate(files):
        try:
            entry = ManifestEntry(
                repo=str(rec["repo"]),
                commit=str(rec["commit"]),
                path=str(rec["path"]),
                bytes=None if rec.get("bytes") is None else int(rec["bytes"]),
                sha256=None if rec.get("sha256") is None else str(rec["sha256"]).lower(),
                mirrored=bool(rec.get("mirrored", True)),
                note=rec.get("note"),
                corpus=None if rec.get("corpus") is None else str(rec["corpus"]),
                license=None if rec.get("license") is None else str(rec["license"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"manifest {mpath}: files[{i}] is malformed ({exc!r})") from None
        rel = PurePosixPath(entry.rel_path)
        if rel.is_absolute() or ".." in rel.parts or len(entry.repo.split("/")) != 2:
            raise DataError(f"manifest {mpath}: files[{i}] has an unsafe path {entry.rel_path!r}")
        entries.append(entry)
    return entries


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in chunks so large files never sit in memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class FetchReport:
    """What :func:`fetch` did to each file, for the CLI to print and tests to check."""

    items: list[tuple[str, Status]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # rel_path -> absent consequence

    @property
    def ok(self) -> bool:
        """True when no file failed (absent optional files are not failures)."""
        return not self.errors

    def status(self, rel_path: str) -> Status | None:
        """Status of one file, or ``None`` if it was not considered."""
        return next((s for p, s in self.items if p == rel_path), None)

    def with_status(self, status: Status) -> list[str]:
        """Relative paths of the files that ended with ``status``."""
        return [p for p, s in self.items if s == status]

    def format(self) -> str:
        """Human-readable lines: one per file, then what each absent optional file means."""
        lines = [f"{status:>8}  {rel}" for rel, status in self.items]
        counts = {s: len(self.with_status(s)) for s in ("fetched", "present", "absent", "unverified", "error")}
        lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "unverified"))
        lines.extend(self.notes[rel] for rel in [*self.with_status("absent"), *self.with_status("unverified"), *self.with_status("fetched")]
                     if rel in self.notes)
        lines.extend(f"  failed: {msg}" for msg in self.errors)
        return "\n".join(lines)


def fetch(
    source: str | Path,
    dest: str | Path,
    *,
    manifest: Sequence[ManifestEntry] | None = None,
    timeout: float = 60.0,
    progress: bool = True,
    include_optional: bool = True,
    upstream_url_template: str | None = None,
    allow_unverified: bool = False,
) -> FetchReport:
    """Make ``dest`` hold a verified copy of every manifest file available at ``source``.

    ``source`` is ``"upstream"`` (download; the URL template is ``upstream_url_template``,
    else ``$RISKRANK_UPSTREAM_URL``, else GitHub raw) or a mirror directory in the
    ``<owner>/<repo>/<path>`` layout. Files already in ``dest`` and matching the manifest are
    left alone, so re-running is cheap. With ``include_optional=False`` optional files are not
    transferred, only reported (present or absent).

    A file the manifest gives no sha256 is not transferred unless ``allow_unverified`` (the
    module docstring); then it is installed with a note saying it was not verified.

    Every file is attempted before giving up, so one run reports all problems. Raises
    :class:`DataError` (with the report on ``exc.report``) if a required file failed;
    failures of optional files are only recorded, leaving ``report.ok`` false.
    """
    entries = list(manifest) if manifest is not None else load_manifest()
    dest = Path(dest)
    template: str | None = None
    src_dir: Path | None = None
    if isinstance(source, str) and source == UPSTREAM:
        template = upstream_url_template or os.environ.get(UPSTREAM_URL_ENV) or UPSTREAM_RAW_URL
    else:
        src_dir = Path(source)
        if not src_dir.is_dir():
            raise DataError(f"data source {src_dir}: not a directory (nor 'upstream')")

    report = FetchReport()
    failed_required: list[str] = []
    client = _http_client(timeout) if template is not None else None
    try:
        for entry in entries:
            target = dest / entry.rel_path
            if _is_good(target, entry):
                status: Status = "present"
            elif entry.optional and not include_optional:
                status = "absent"
            elif entry.sha256 is None and not allow_unverified and not (src_dir is not None and not (src_dir / entry.rel_path).is_file()):
                status = "unverified"
                consequence = _ABSENT_CONSEQUENCE.get((entry.repo, entry.path))
                report.notes[entry.rel_path] = (f"{entry.rel_path}: no sha256 is pinned for it, so it is not installed "
                                                "(pass --allow-unverified to install it without verification)"
                                                + (f"; {consequence}" if consequence else ""))
                if not entry.optional:
                    report.errors.append(report.notes[entry.rel_path])
                    failed_required.append(entry.rel_path)
            else:
                where = str(src_dir / entry.rel_path) if src_dir else entry.url(str(template))
                try:
                    if src_dir is not None:
                        found = _copy_local(Path(where), target, entry)
                    else:
                        found = _download(client, where, target, entry, progress)
                    if found:
                        status = "fetched"
                        if entry.sha256 is None:
                            report.notes[entry.rel_path] = f"{entry.rel_path}: installed WITHOUT verification (no sha256 pinned)"
                    elif entry.optional:
                        status = "absent"
                    else:
                        raise DataError(f"{entry.rel_path}: required file not found at {where}")
                except _Unreachable as exc:
                    raise DataError(f"data fetch into {dest}: {exc}") from None
                except DataError as exc:
                    status = "error"
                    report.errors.append(str(exc))
                    if not entry.optional:
                        failed_required.append(entry.rel_path)
            report.items.append((entry.rel_path, status))
            if status == "absent":
                report.notes[entry.rel_path] = _ABSENT_CONSEQUENCE.get(
                    (entry.repo, entry.path),
                    f"{entry.rel_path} absent (optional)"
                    + (f": {entry.note}" if entry.note else ""),
                )
    finally:
        if client is not None:
            client.close()

    if failed_required:
        exc = DataError(
            f"data fetch into {dest} failed for {len(failed_required)} required file(s): "
            + "; ".join(report.errors)
        )
        exc.report = report  # type: ignore[attr-defined]
        raise exc
    return report


# --- helpers -----------------------------------------------------------------------------


def _is_good(path: Path, entry: ManifestEntry) -> bool:
    """Whether an existing file matches the manifest (hash if known, else size, else non-empty)."""
    if not path.is_file():
        return False
    size = path.stat().st_size
    if entry.bytes is not None and size != entry.bytes:
        return False
    if entry.sha256 is not None:
        return sha256_file(path) == entry.sha256
    return size > 0


def _copy_local(src: Path, target: Path, entry: ManifestEntry) -> bool:
    """Copy one file from a mirror; ``False`` if the mirror lacks it."""
    if not src.is_file():
        return False
    try:
        with open(src, "rb") as f:
            _write_verified(target, entry, iter(lambda: f.read(_CHUNK), b""), origin=str(src))
    except OSError as exc:
        raise DataError(f"{entry.rel_path}: cannot copy from {src} ({exc})") from None
    return True


def _http_client(timeout: float) -> Any:
    """An httpx client; imported lazily so the CLI starts fast when nothing is downloaded."""
    import httpx

    return httpx.Client(timeout=timeout, follow_redirects=True)


class _Unreachable(DataError):
    """The download host cannot be reached at all: the fetch stops at the first file (it went on
    through every file of the manifest, printing the same failure for each)."""


def _download(client: Any, url: str, target: Path, entry: ManifestEntry, progress: bool) -> bool:
    """Download one file; ``False`` on HTTP 404 (missing upstream), DataError on anything else."""
    import httpx
    from tqdm import tqdm

    try:
        with client.stream("GET", url) as resp:
            if resp.status_code == 404:
                return False
            if resp.status_code != 200:
                raise DataError(f"{entry.rel_path}: HTTP {resp.status_code} from {url}")
            length = resp.headers.get("content-length")
            total = int(length) if length and length.isdigit() else entry.bytes
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=PurePosixPath(entry.path).name,
                disable=not progress,
                leave=False,
                file=sys.stderr,
            ) as bar:
                _write_verified(target, entry, _counted(resp.iter_bytes(_CHUNK), bar), origin=url)
    except httpx.ConnectError as exc:  # no route, no name: every other file would fail the same way
        raise _Unreachable(f"cannot reach {httpx.URL(url).host}: download from {url} failed ({exc}); nothing more was "
                           "tried: check the network, or fetch from a local copy (riskrank data fetch --help)") from None
    except httpx.HTTPError as exc:
        raise DataError(f"{entry.rel_path}: download from {url} failed ({exc!r})") from None
    except OSError as exc:
        raise DataError(f"{entry.rel_path}: cannot write {target} ({exc})") from None
    return True


def _counted(chunks: Iterable[bytes], bar: Any) -> Iterator[bytes]:
    """Pass chunks through while advancing a progress bar."""
    for chunk in chunks:
        bar.update(len(chunk))
        yield chunk


def _write_verified(
    target: Path, entry: ManifestEntry, chunks: Iterable[bytes], origin: str
) -> None:
    """Write chunks to a temp file beside ``target``, verify, then atomically move into place.

    Verifying before :func:`os.replace` is the point: on a mismatch or any exception the temp
    file is removed and whatever was at ``target`` before is untouched.
    """
    h = hashlib.sha256()
    size = 0
    with atomic_writer(target, suffix=".part") as fh:  # an exception below discards the partial file
        for chunk in chunks:
            h.update(chunk)
            size += len(chunk)
            if entry.bytes is not None and size > entry.bytes:  # a mirror sending more than the file: stop, do not fill the disk
                raise DataError(f"{entry.rel_path}: {origin} sent more than the manifest's {entry.bytes:,} bytes; not written")
            fh.write(chunk)
        digest = h.hexdigest()
        if entry.sha256 is not None and digest != entry.sha256:
            raise DataError(
                f"{entry.rel_path}: sha256 mismatch from {origin} "
                f"(expected {entry.sha256}, got {digest}); not written"
            )
        if entry.bytes is not None and size != entry.bytes:
            raise DataError(
                f"{entry.rel_path}: size mismatch from {origin} "
                f"(expected {entry.bytes} bytes, got {size}); not written"
            )
        if size == 0 and entry.sha256 is None:
            # an empty file is refused unless the manifest pins it empty (its sha256 matched
            # above: one API-Bank dialogue file is empty upstream)
            raise DataError(f"{entry.rel_path}: empty file from {origin}; not written")


__all__ = [
    "MANIFEST_PATH",
    "UPSTREAM",
    "UPSTREAM_RAW_URL",
    "UPSTREAM_URL_ENV",
    "FetchReport",
    "ManifestEntry",
    "fetch",
    "load_manifest",
    "sha256_file",
]
