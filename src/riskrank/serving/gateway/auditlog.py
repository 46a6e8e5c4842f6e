"""The gateway's decision log: one JSON object per line, appended, never rewritten.

Every decision (a ``find_tools`` result, a call allowed, refused or confirmed, an upstream
connecting or going down) is one line with at least ``time``, ``task``, ``tool``, ``level``,
``decision`` and ``reason`` (null where they do not apply), written with a single
``write(2)`` to a descriptor opened with ``O_APPEND`` and then ``fsync``-ed: after a crash,
even ``kill -9``, a line is in the file whole or not at all, and lines from concurrent
writers never interleave. The file is created ``0600`` (it holds tasks and arguments).

A decision that cannot be logged is not taken: the gateway refuses the call
(:class:`AuditLogError`). ``watchers`` see each record once it is written, and each failure
(the gateway's metrics, :mod:`.metrics`, count the log's own records). :func:`read_records` reads a log back (the console's call log),
newest first without reading the whole file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError

#: A line longer than this has its long fields cut (a runaway argument must not make one
#: write so large that appends stop being atomic, or the log unreadable).
MAX_LINE_BYTES = 32 * 1024
MAX_FIELD_CHARS = 2000


class AuditLogError(RiskrankError):
    """The audit log cannot be written."""

    code = "audit_failed"


class StoreAuditLogError(AuditLogError):
    """The state store cannot take the audit line: the store's cause, the store's one code
    (:data:`riskrank.serving.gateway.store.STATE_UNAVAILABLE`)."""

    code = "state_unavailable"


def now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def cut_field(value: Any) -> Any:
    """A field as an audit line keeps it: whole, or past MAX_FIELD_CHARS its head and its length."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    if len(text) <= MAX_FIELD_CHARS:
        return value
    return text[:MAX_FIELD_CHARS] + f"... ({len(text)} characters)"


class AuditLog:
    """Append-only JSONL at ``path`` (``None``: decisions are not logged)."""

    REQUIRED = ("time", "task", "tool", "level", "decision", "reason")

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._fd: int | None = None
        #: Told of each record written (``recorded(rec)``) and each failure (``failed(where)``).
        self.watchers: list[Any] = []
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise AuditLogError(f"--audit-log {self.path}: cannot open it for appending: {exc.strerror or exc}") from None

    def record(self, **fields: Any) -> dict[str, Any]:
        """One record: the required fields first, then the rest; long fields cut when the
        whole would exceed :data:`MAX_LINE_BYTES`. JSON values only (what a line holds)."""
        rec = {"time": now_iso(), **{k: fields.pop(k, None) for k in self.REQUIRED[1:]}}
        if "code" in fields:
            rec["code"] = fields.pop("code")
        rec.update(fields)
        data = json.dumps(rec, separators=(",", ":"), ensure_ascii=False, default=str)
        if len(data.encode()) > MAX_LINE_BYTES:
            rec = {k: (cut_field(v) if k not in self.REQUIRED else v) for k, v in rec.items()}
            data = json.dumps(rec, separators=(",", ":"), ensure_ascii=False, default=str)
        return json.loads(data)

    def line(self, **fields: Any) -> bytes:
        """One record as its line."""
        return (json.dumps(self.record(**fields), separators=(",", ":"), ensure_ascii=False) + "\n").encode()

    def write(self, **fields: Any) -> None:
        """Append one record, durably (blocking: a write and an fsync)."""
        if self._fd is None:
            if self.watchers:  # no log file: the decision still counts
                self._tell(self.record(**fields))
            return
        rec = self.record(**fields)
        data = (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        with self._lock:
            try:
                n = os.write(self._fd, data)
                if n != len(data):
                    raise OSError(f"short write ({n} of {len(data)} bytes)")
                os.fsync(self._fd)
            except OSError as exc:
                for w in self.watchers:
                    w.failed("file")
                raise AuditLogError(f"cannot append to the audit log {self.path}: {exc}") from None
        self._tell(rec)

    def _tell(self, rec: dict[str, Any]) -> None:
        for w in self.watchers:
            w.recorded(rec)

    async def append(self, **fields: Any) -> None:
        """:meth:`write` off the event loop (an fsync costs milliseconds)."""
        if self._fd is None:
            self.write(**fields)  # nothing to write: only the watchers, at once
            return
        import anyio.to_thread

        await anyio.to_thread.run_sync(lambda: self.write(**fields))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StoreAuditLog(AuditLog):
    """The audit log in the gateway's state store (:mod:`riskrank.serving.gateway.store`):
    the same records, each committed (durably, before :meth:`write` returns) as one row, so
    every replica on one database writes one log and an operator's console reads all of it.
    A store that cannot take a record raises :class:`AuditLogError`: the call it records is
    refused (fail closed)."""

    def __init__(self, store: Any, log: Any = None, replica: str | None = None) -> None:
        super().__init__(None)
        self.store = store
        #: The replica that writes (``--replica``): on every line, so a shared log says which one decided.
        self.replica = replica
        #: One line when the store stops taking records, one when it takes them again.
        self.log = log or (lambda line: None)
        self.down: str | None = None

    def write(self, **fields: Any) -> None:
        from riskrank.serving.gateway.store import StoreError, unavailable_message

        if self.replica is not None:
            fields.setdefault("replica", self.replica)
        rec = self.record(**fields)
        try:
            self.store.append(rec)
        except StoreError as exc:
            if self.down is None:
                self.log(f"state: {exc}; every call is refused until the store takes the audit log again")
            self.down = str(exc)
            for w in self.watchers:
                w.failed("state")
            raise StoreAuditLogError(unavailable_message(self.store.url, f"the audit line cannot be written: {exc}")) from None
        if self.down is not None:
            self.down = None
            self.log(f"state: {self.store.url} takes the audit log again; calls are decided again")
        self._tell(rec)

    async def append(self, **fields: Any) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(lambda: self.write(**fields))

    def close(self) -> None:
        return  # the store is closed by whoever opened it


#: Records read per query when a store's log is read (the console pages through it).
STORE_PAGE = 500


def _store_records(store: Any, newest_first: bool) -> Iterator[dict[str, Any]]:
    cursor: int | None = None
    while True:
        rows = (store.records(newest_first=True, before=cursor, limit=STORE_PAGE) if newest_first
                else store.records(after=cursor, limit=STORE_PAGE))
        if not rows:
            return
        for row in rows:
            yield {k: v for k, v in row.items() if k != "id"}
        cursor = rows[-1]["id"]


#: Bytes read per step when a log is read from its end.
READ_BLOCK = 64 * 1024


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def read_records(path: Any, *, newest_first: bool = False) -> Iterator[dict[str, Any]]:
    """The log's records, oldest first or (``newest_first``) read backwards from the end in
    blocks, so a page of the latest decisions costs what the page holds, not the whole file.
    ``path`` may be a state store too (its rows, paged by id the same way).

    Only whole lines count: a last line without its newline (a writer is appending it) is
    left out, and so is a line that is not a JSON object (nothing here writes one). A
    missing file has no records."""
    if hasattr(path, "records"):
        yield from _store_records(path, newest_first)
        return
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed in the finally below, across yields
    except FileNotFoundError:
        return
    try:
        if not newest_first:
            for line in fh:
                if line.endswith(b"\n") and (rec := _record(line)) is not None:
                    yield rec
            return
        pos = fh.seek(0, os.SEEK_END)
        carry = b""
        final = True  # still inside the text after the last newline (empty, or a torn line)
        while pos > 0:
            start = max(0, pos - READ_BLOCK)
            fh.seek(start)
            parts = (fh.read(pos - start) + carry).split(b"\n")
            pos = start
            if final:
                if len(parts) == 1:
                    carry = b""
                    continue
                parts.pop()
                final = False
            # parts[0] may begin before this block: whole only at the start of the file
            carry = parts[0] if start > 0 else b""
            for line in reversed(parts[1:] if start > 0 else parts):
                if line and (rec := _record(line)) is not None:
                    yield rec
    finally:
        fh.close()
