"""Pins: trust on first use of what each upstream server declares.

A server can change a tool after the user started trusting it (a "rug pull", often through
``notifications/tools/list_changed``). The pin store keeps, per upstream, a canonical hash of
each tool's name, title, description, input schema and annotations (strings NFC-normalised,
keys sorted), with the definition itself so a change can be shown as a diff. On every list:

- a server never seen is pinned as it is (or, with the policy's ``first_seen: quarantine``,
  every tool waits for an operator);
- a tool that is new to a pinned server, or whose definition differs from its pin, is
  quarantined: never offered, refused at call time with a reason that names the change,
  until an operator approves it (``riskrank pins approve``, or the console);
- a tool the server no longer lists is dropped from the pins (recorded; it would be new again).

The store is one JSON file in ``--state-dir`` (``pins.json``: a format tag, the servers, and a
sha256 over them), written atomically. A file that is not valid JSON, names another format or
fails its checksum (a hand edit) is not trusted: every tool of every server is quarantined
until ``riskrank pins reset`` (fail closed; nothing is re-trusted silently). One gateway holds
the directory's lock (``pins.lock``) for its life; a second gets a clear error.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.fileio import atomic_write_bytes

FORMAT = "riskrank-pins/1"
PINS_FILE = "pins.json"
LOCK_FILE = "pins.lock"
#: Held for each read-modify-write of the pin file, by the gateway and by the CLI alike.
WRITE_LOCK_FILE = "pins.write.lock"
#: How long a write waits for another process's write (each takes milliseconds).
WRITE_LOCK_WAIT_S = 10.0
#: The parts of a definition a pin covers (what the model reads, and what the gateway rates).
PINNED_KEYS = ("name", "title", "description", "inputSchema", "annotations")


class PinError(RiskrankError):
    """A pin store that cannot be used (locked by another gateway, unreadable directory)."""


def _nfc(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {_nfc(k): _nfc(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nfc(v) for v in value]
    return value


def canonical(tool: dict[str, Any]) -> dict[str, Any]:
    """The pinned part of a definition, NFC-normalised: a server that re-sends the same text
    in another Unicode normal form has not changed it."""
    return {k: _nfc(tool[k]) for k in PINNED_KEYS if tool.get(k) is not None}


def digest(tool: dict[str, Any]) -> str:
    text = json.dumps(canonical(tool), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _checksum(servers: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(servers, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass
class Change:
    """A tool held for review: ``kind`` is ``new`` or ``changed``; ``pinned`` the definition
    it had (None when new), ``seen`` the one the server lists now."""

    upstream: str
    name: str
    kind: str
    seen: dict[str, Any]
    pinned: dict[str, Any] | None = None
    at: float = field(default_factory=time.time)

    def reason(self) -> str:
        if self.kind == "new":
            return (f"quarantined: {self.upstream!r} listed a new tool {self.name!r} after its tools were pinned; "
                    "an operator must approve it (riskrank pins approve)")
        fields = sorted(k for k in PINNED_KEYS if (self.pinned or {}).get(k) != self.seen.get(k))
        what = f"changed: {', '.join(fields)}" if fields else "its definition changed"
        return (f"quarantined: {self.upstream!r} changed its tool {self.name!r} since it was pinned ({what}); "
                "an operator must approve the change (riskrank pins approve)")

    def diff(self) -> str:
        """A unified diff of the pinned definition against the one listed now."""
        def lines(d: dict[str, Any] | None) -> list[str]:
            return json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False).splitlines(keepends=True) if d else []
        return "".join(difflib.unified_diff(lines(self.pinned), lines(self.seen), f"{self.upstream}/{self.name} (pinned)",
                                            f"{self.upstream}/{self.name} (listed now)"))

    def to_dict(self) -> dict[str, Any]:
        return {"upstream": self.upstream, "name": self.name, "kind": self.kind, "seen": self.seen,
                "pinned": self.pinned, "at": self.at}


class PinStore:
    """The pins of one state directory. ``lock=True`` (the gateway) holds the directory's lock
    until :meth:`close`; the CLI reads and writes without holding it between commands."""

    def __init__(self, state_dir: str | Path, *, lock: bool = True) -> None:
        self.dir = Path(state_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PinError(f"--state-dir {self.dir}: cannot create it ({exc.strerror})") from None
        self.path = self.dir / PINS_FILE
        self._lock_fd: int | None = None
        if lock:
            fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise PinError(f"--state-dir {self.dir}: another gateway holds its pin store (give each gateway its own "
                               "state directory)") from None
            self._lock_fd = fd
        #: Why the store is not trusted (corrupt, another format, a hand edit), or None.
        self.broken: str | None = None
        self._stamp: tuple[int, int] | None = None
        self.servers: dict[str, dict[str, Any]] = self._load()

    def stamp(self) -> tuple[int, int] | None:
        """The file's (mtime_ns, size), or None without a file: what :meth:`refresh` compares."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def changed_on_disk(self) -> bool:
        """Whether another process wrote the file since this store last read or wrote it."""
        return self.stamp() != self._stamp

    def refresh(self) -> bool:
        """Re-read the file when another process (``riskrank pins approve``) wrote it; returns
        whether it changed."""
        if not self.changed_on_disk():
            return False
        self.broken = None
        self.servers = self._load()
        return True

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One read-modify-write at a time across processes (the gateway's review, the
        operator's approve and reset): the file is re-read under the lock, so neither side
        writes back a stale copy over the other's change (a lost first-sight pin would let the
        next list be trusted as if first seen)."""
        fd = os.open(self.dir / WRITE_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + WRITE_LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise PinError(f"{self.path}: another process has been writing it for {WRITE_LOCK_WAIT_S:g} s") from None
                    time.sleep(0.01)
            self.refresh()
            yield
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load(self) -> dict[str, dict[str, Any]]:
        self._stamp = self.stamp()
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.broken = f"{self.path} cannot be read ({exc})"
            return {}
        return self._servers(data)

    def _servers(self, data: Any) -> dict[str, dict[str, Any]]:
        """The servers of a pin document, or {} with :attr:`broken` set when it is not one
        (another format, a failed checksum): such a store is never trusted."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            self.broken = f"{self.path} is not a {FORMAT} pin store (format {found!r})"
            return {}
        servers = data.get("servers")
        if not isinstance(servers, dict) or data.get("sha256") != _checksum(servers):
            self.broken = f"{self.path} fails its checksum (edited by hand, or damaged)"
            return {}
        return servers

    def save(self) -> None:
        if self.broken is not None:
            return  # never overwrite a store that is not trusted: reset it explicitly
        doc = {"format": FORMAT, "servers": self.servers, "sha256": _checksum(self.servers)}
        atomic_write_bytes(self.path, (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode())
        self._stamp = self.stamp()

    # -- the gateway's side --------------------------------------------------------------------------
    def review(self, upstream: str, tools: list[dict[str, Any]], *, first_seen: str = "trust") -> tuple[dict[str, str], list[str]]:
        """Compare ``upstream``'s listed ``tools`` (its own names) with the pins: returns
        (held: own name -> reason, events: one line per pin decision for the audit log)."""
        with self._writing():
            return self._review(upstream, tools, first_seen)

    def _review(self, upstream: str, tools: list[dict[str, Any]], first_seen: str) -> tuple[dict[str, str], list[str]]:
        if self.broken is not None:
            why = f"quarantined: the pin store is not trusted ({self.broken}); run riskrank pins reset after checking it"
            return {str(t.get("name")): why for t in tools}, []
        entry = self.servers.get(upstream)
        events: list[str] = []
        now = {str(t.get("name")): t for t in tools}
        if entry is None:
            entry = {"tools": {}, "pending": {}}
            self.servers[upstream] = entry
            if first_seen == "trust":
                entry["tools"] = {n: {"sha256": digest(t), "definition": canonical(t), "at": time.time()} for n, t in now.items()}
                events.append(f"pinned {len(now)} tools of {upstream!r} on first sight")
                self.save()
                return {}, events
        held: dict[str, str] = {}
        before = json.dumps(entry, sort_keys=True)
        pending = entry.setdefault("pending", {})
        for name, tool in now.items():
            pin = entry["tools"].get(name)
            if pin is not None and pin["sha256"] == digest(tool):
                pending.pop(name, None)
                continue
            change = Change(upstream, name, "new" if pin is None else "changed", canonical(tool),
                            None if pin is None else pin["definition"])
            old = pending.get(name)
            if old is None or old.get("sha256") != digest(tool):
                pending[name] = {"sha256": digest(tool), **change.to_dict()}
                events.append(change.reason())
            held[name] = change.reason()
        for name in sorted(set(entry["tools"]) - set(now)):
            del entry["tools"][name]
            events.append(f"{upstream!r} no longer lists {name!r}: its pin is dropped (listed again, it is new)")
        for name in sorted(set(pending) - set(now)):
            del pending[name]
        if json.dumps(entry, sort_keys=True) != before:
            self.save()
        return held, events

    # -- the operator's side ---------------------------------------------------------------------------
    def changes(self, upstream: str | None = None) -> list[Change]:
        out = []
        for up, entry in sorted(self.servers.items()):
            if upstream is not None and up != upstream:
                continue
            for name, p in sorted(entry.get("pending", {}).items()):
                out.append(Change(up, name, p["kind"], p["seen"], p.get("pinned"), p.get("at", 0.0)))
        return out

    def approve(self, upstream: str, name: str | None = None) -> list[str]:
        """Pin what ``upstream`` lists now for ``name`` (every held tool when None); returns
        the names approved."""
        with self._writing():
            return self._approve(upstream, name)

    def _approve(self, upstream: str, name: str | None) -> list[str]:
        entry = self.servers.get(upstream)
        if entry is None:
            raise PinError(f"no server {upstream!r} in {self.path} (servers: {', '.join(sorted(self.servers)) or 'none'})")
        pending = entry.get("pending", {})
        names = sorted(pending) if name is None else [name]
        for n in names:
            if n not in pending:
                raise PinError(f"{upstream!r} has no tool {n!r} awaiting approval (awaiting: {', '.join(sorted(pending)) or 'none'})")
            p = pending.pop(n)
            entry["tools"][n] = {"sha256": p["sha256"], "definition": p["seen"], "at": time.time()}
        self.save()
        return names

    def reset(self, upstream: str | None = None) -> None:
        """Forget the pins of ``upstream`` (every server when None; a broken store is replaced):
        the next list pins afresh under the policy's ``first_seen``."""
        with self._writing():
            self._reset(upstream)

    def _reset(self, upstream: str | None) -> None:
        if upstream is None:
            self.servers, self.broken = {}, None
        elif upstream in self.servers:
            del self.servers[upstream]
        else:
            raise PinError(f"no server {upstream!r} in {self.path}")
        self.save()

    def summary(self) -> list[dict[str, Any]]:
        return [{"upstream": up, "pinned": len(e.get("tools", {})), "awaiting": sorted(e.get("pending", {}))}
                for up, e in sorted(self.servers.items())]


#: Where the pins live in a state store (one document).
STORE_KIND, STORE_KEY = "pins", "servers"


class _LostRace(Exception):
    """Another replica wrote the pins between this one's read and its write."""


class StorePinStore(PinStore):
    """The pins in the gateway's state store (:mod:`riskrank.serving.gateway.store`), shared
    by every replica on one database: the same document (format tag, servers, checksum) as
    ``pins.json``, written by compare-and-swap on its version. A write that loses the race to
    another replica re-reads and redoes its review, so a pin approved at one replica holds at
    every replica, and no replica writes back a stale copy over another's first-sight pins. A
    store that cannot be reached mid-run is treated as unchanged until it answers again."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.dir = None  # type: ignore[assignment]
        self.path = f"{store.url} (pins)"  # type: ignore[assignment]
        self._lock_fd = None
        self.broken = None
        self._stamp = None
        self.servers = self._load()

    def stamp(self) -> Any:
        from riskrank.serving.gateway.store import StoreError

        try:
            got = self.store.get_doc(STORE_KIND, STORE_KEY)
        except StoreError:
            return self._stamp
        return None if got is None else got[0]

    def _load(self) -> dict[str, dict[str, Any]]:
        got = self.store.get_doc(STORE_KIND, STORE_KEY)
        self._stamp = None if got is None else got[0]
        return {} if got is None else self._servers(got[1])

    def save(self) -> None:
        if self.broken is not None:
            return
        doc = {"format": FORMAT, "servers": self.servers, "sha256": _checksum(self.servers)}
        version = self.store.put_doc(STORE_KIND, STORE_KEY, doc, expect=self._stamp)
        if version is None:
            raise _LostRace
        self._stamp = version

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        self.refresh()
        yield

    def _retry(self, step: Any) -> Any:
        for _ in range(50):
            try:
                with self._writing():
                    return step()
            except _LostRace:
                continue
        raise PinError(f"{self.path}: the pins kept changing under this replica's write; try again")

    def review(self, upstream: str, tools: list[dict[str, Any]], *, first_seen: str = "trust") -> tuple[dict[str, str], list[str]]:
        return self._retry(lambda: self._review(upstream, tools, first_seen))

    def approve(self, upstream: str, name: str | None = None) -> list[str]:
        return self._retry(lambda: self._approve(upstream, name))

    def reset(self, upstream: str | None = None) -> None:
        self._retry(lambda: self._reset(upstream))
