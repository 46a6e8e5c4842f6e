"""Run the installed ``riskrank`` console script with a fault hook: ``kill -9`` itself at a
chosen write. Used by ``fault_injection.py``:

    RR_KILL=replace:before:3 python benchmarks/_kill_hook.py train --dataset demo --out DIR

Kill points (``RR_KILL``, one at a time; the process sends itself SIGKILL, so no ``finally``,
``atexit`` or buffered write runs, as with a power cut after the OS has the data):

- ``replace:before:N`` / ``replace:after:N``: the N-th ``os.replace`` call (every atomic write
  in riskrank ends in one: heads.safetensors, checkpoint.json, graph.npz, label files);
- ``votes:after:N``: right after the N-th flush of a file opened for appending whose name ends
  in ``.votes.jsonl`` (the audit vote log; the line is in the OS); ``votes:torn:N``: write
  half of the N-th record, flush it, die (a torn line);
- ``sql:STMT:N``: when SQLite starts the N-th statement that begins with STMT (``INSERT``,
  ``COMMIT``, ...) on any connection (the embedding cache): mid-transaction for INSERT.

``RR_TRACE=FILE`` appends one line per write point reached (``replace DST``, ``votes-flush
PATH``, ``sql STATEMENT``), so a clean traced run enumerates the kill points.

Only standard-library names are hooked (``os.replace``, ``builtins.open``,
``sqlite3.connect``), never riskrank's own modules.
"""

from __future__ import annotations

import builtins
import os
import signal
import sqlite3
import sys
from importlib.metadata import entry_points

_open = builtins.open
_replace = os.replace
_connect = sqlite3.connect
KILL = os.environ.get("RR_KILL", "")
TRACE = os.environ.get("RR_TRACE")
_counts: dict[str, int] = {}


def _trace(msg: str) -> None:
    if TRACE:
        with _open(TRACE, "a", encoding="utf-8") as fh:
            fh.write(msg.replace("\n", " ")[:300] + "\n")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _hit(kind: str) -> int:
    _counts[kind] = _counts.get(kind, 0) + 1
    return _counts[kind]


def _parse() -> tuple[str, str, int]:
    if not KILL:
        return "", "", 0
    parts = KILL.split(":")
    return parts[0], parts[1], int(parts[2])


KIND, WHEN, NTH = _parse()


def replace(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
    n = _hit("replace")
    _trace(f"replace {os.fspath(dst)}")
    if KIND == "replace" and WHEN == "before" and n == NTH:
        _die()
    out = _replace(src, dst, *args, **kwargs)
    if KIND == "replace" and WHEN == "after" and n == NTH:
        _die()
    return out


class _VoteFile:
    """Proxy of an append-mode vote log handle: counts flushes, can tear a record."""

    def __init__(self, fh, path: str) -> None:
        self._fh, self._path = fh, path

    def write(self, data):  # type: ignore[no-untyped-def]
        if KIND == "votes" and WHEN == "torn" and _counts.get("votes", 0) + 1 == NTH:
            self._fh.write(data[: max(1, len(data) // 2)])
            self._fh.flush()
            _trace(f"votes-torn {self._path}")
            _die()
        return self._fh.write(data)

    def flush(self):  # type: ignore[no-untyped-def]
        out = self._fh.flush()
        n = _hit("votes")
        _trace(f"votes-flush {self._path}")
        if KIND == "votes" and WHEN == "after" and n == NTH:
            _die()
        return out

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        return self._fh.__exit__(*exc)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self._fh, name)


def open_(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
    fh = _open(file, mode, *args, **kwargs)
    if isinstance(file, str | os.PathLike) and os.fspath(file).endswith(".votes.jsonl") and ("a" in mode):
        return _VoteFile(fh, os.fspath(file))
    return fh


def connect(*args, **kwargs):  # type: ignore[no-untyped-def]
    conn = _connect(*args, **kwargs)

    def on_statement(stmt: str) -> None:
        word = stmt.lstrip().split(" ", 1)[0].upper() if stmt.strip() else ""
        n = _hit("sql:" + word)
        if word in ("INSERT", "COMMIT", "BEGIN", "UPDATE", "DELETE", "CREATE"):
            _trace(f"sql {word} #{n}")
        if KIND == "sql" and WHEN.upper() == word and n == NTH:
            _die()

    conn.set_trace_callback(on_statement)
    return conn


os.replace = replace
builtins.open = open_
sqlite3.connect = connect


def main() -> None:
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "riskrank"]
    sys.argv = ["riskrank", *sys.argv[1:]]
    ep.load()()


if __name__ == "__main__":
    main()
