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

The store is one JSON file in ``--state-dir`` (``pins.json``), written atomically, and signed:
an HMAC-SHA256 over the whole document, and one over each pin (server, tool, digest), with a
key that lives *outside* the state directory (:class:`PinKey`: ``--pin-key FILE``,
``$RISKRANK_PIN_KEY``, or a key of its own under ``$XDG_CONFIG_HOME/riskrank/pin-keys/``).
Whoever can write the state directory but not read the key cannot approve a held tool by
editing the file and recomputing a plain sha256. A document whose MAC fails was changed outside
riskrank: the pins whose own MAC still holds stay, every other pin goes back to quarantine
(kind ``tampered``), a server the file no longer names is quarantined on first sight from then
on, and the finding is an alert the gateway writes to its audit log as one line
(:meth:`PinStore.take_alerts`). A file that is not JSON or names another format, or a signed
file whose key is missing, is not trusted at all: every tool of every server is quarantined
until ``riskrank pins reset`` (fail closed; nothing is re-trusted silently). One gateway holds
the directory's lock (``pins.lock``) for its life; a second gets a clear error.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.fileio import atomic_write_bytes

FORMAT = "riskrank-pins/2"
#: The unsigned format before keys (a plain sha256 anyone could recompute): adopted, signed,
#: once, when no key exists yet for its store; with a key it reads as a file changed outside riskrank.
LEGACY_FORMAT = "riskrank-pins/1"
PINS_FILE = "pins.json"
#: The key file of the pins' MACs, when not given as --pin-key.
KEY_ENV = "RISKRANK_PIN_KEY"
#: The shortest key a key file may hold (bytes, as written).
MIN_KEY_BYTES = 32
#: Tamper alerts a document keeps (the newest).
MAX_ALERTS = 20
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
        forms: dict[Any, int] = {}
        for k in value:
            forms[_nfc(k)] = forms.get(_nfc(k), 0) + 1
        # two keys that are one after NFC are two parameters the model sees: each is kept under
        # its own raw form (in any order the server lists them), so the object differs from one
        # that held either alone
        return {("\0" + json.dumps(k, ensure_ascii=True)) if forms[_nfc(k)] > 1 else _nfc(k): _nfc(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_nfc(v) for v in value]
    return value


def canonical(tool: dict[str, Any]) -> dict[str, Any]:
    """The pinned part of a definition, NFC-normalised: a server that re-sends the same text
    in another Unicode normal form has not changed it (but one whose object gains a key that is
    another form of a key it has, two parameters where there was one, has)."""
    return {k: _nfc(tool[k]) for k in PINNED_KEYS if tool.get(k) is not None}


def digest(tool: dict[str, Any]) -> str:
    text = json.dumps(canonical(tool), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _checksum(servers: dict[str, Any]) -> str:
    """The unsigned format's checksum (read only, to adopt a store written before keys)."""
    return hashlib.sha256(json.dumps(servers, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def default_key_path(store_id: str) -> Path:
    """Where a store's own key lives when none is given: ``$XDG_CONFIG_HOME/riskrank/pin-keys/``
    (``~/.config`` without it), named by a digest of the store's identity (the state
    directory's real path, or the state store's URL)."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "riskrank" / "pin-keys" / (hashlib.sha256(store_id.encode()).hexdigest()[:32] + ".key")


class PinKey:
    """The secret of a pin store's MACs, in a file outside the state directory.

    ``own``: the key is the store's own (the default path, made by riskrank with the store's
    first document), so a key without a document means the document was removed; a key given
    by ``--pin-key`` or ``$RISKRANK_PIN_KEY`` may be shared (replicas on one database) or
    made before the store, so there a missing document is a new store."""

    def __init__(self, path: Path, *, own: bool) -> None:
        self.path, self.own = path, own

    @classmethod
    def resolve(cls, store_id: str, given: str | Path | None = None, *, state_dir: Path | None = None) -> PinKey:
        """``given`` (``--pin-key``), else ``$RISKRANK_PIN_KEY``, else the store's own key;
        refused when it lies inside ``state_dir`` (whoever edits the pins could read it)."""
        chosen = given or os.environ.get(KEY_ENV) or None
        key = cls(Path(chosen).expanduser(), own=False) if chosen else cls(default_key_path(store_id), own=True)
        if state_dir is not None:
            try:
                inside = key.path.resolve().is_relative_to(Path(state_dir).resolve())
            except OSError:
                inside = False
            if inside:
                raise PinError(f"the pin key {key.path} lies inside the state directory {state_dir}: whoever can edit the "
                               "pins could read it; keep it outside (--pin-key FILE)")
        return key

    def read(self) -> bytes | None:
        """The key, or None when there is no key file; :class:`PinError` for one that cannot be used."""
        try:
            data = self.path.read_bytes().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PinError(f"the pin key {self.path} cannot be read ({exc.strerror or exc})") from None
        if len(data) < MIN_KEY_BYTES:
            raise PinError(f"the pin key {self.path} holds fewer than {MIN_KEY_BYTES} bytes (make one: "
                           "`openssl rand -hex 32 > FILE`)")
        return data

    def create(self) -> bytes:
        """A new random key, written 0600 in a 0700 directory (never over an existing file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = secrets.token_hex(32).encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self.read() or key
        except OSError as exc:
            raise PinError(f"the pin key {self.path} cannot be created ({exc.strerror or exc})") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(key + b"\n")
        return key


def _mac(key: bytes, value: Any) -> str:
    return hmac.new(key, _canonical_json(value), hashlib.sha256).hexdigest()


def _pin_mac(key: bytes, upstream: str, name: str, sha256: str) -> str:
    """The MAC of one pin: it binds the digest to its server and tool, so a pin cannot be
    edited, or moved from one tool to another, without the key."""
    return _mac(key, ["pin", upstream, name, sha256])


@dataclass
class Change:
    """A tool held for review: ``kind`` is ``new``, ``changed``, or ``tampered`` (its pin was
    edited outside riskrank); ``pinned`` the definition it had (None when new or tampered),
    ``seen`` the one the server lists now (for a tampered pin, until the next list: the
    definition the edited file claimed)."""

    upstream: str
    name: str
    kind: str
    seen: dict[str, Any]
    pinned: dict[str, Any] | None = None
    at: float = field(default_factory=time.time)

    def reason(self) -> str:
        if self.kind == "tampered":
            return (f"quarantined: the pin of {self.name!r} of {self.upstream!r} was changed outside riskrank (the pin "
                    "file failed its MAC); an operator must approve the tool again (riskrank pins approve)")
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
    until :meth:`close`; the CLI reads and writes without holding it between commands.
    ``key``: the MACs' key file (``--pin-key``; see :class:`PinKey` for the default)."""

    def __init__(self, state_dir: str | Path, *, lock: bool = True, key: str | Path | None = None) -> None:
        self.dir = Path(state_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PinError(f"--state-dir {self.dir}: cannot create it ({exc.strerror})") from None
        self.path = self.dir / PINS_FILE
        self.key = PinKey.resolve(str(self.dir.resolve()), key, state_dir=self.dir)
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
        self._init_state()
        self.servers: dict[str, dict[str, Any]] = self._load()

    def _init_state(self) -> None:
        #: Why the store is not trusted at all (corrupt, another format, its key missing), or None.
        self.broken: str | None = None
        self._stamp: Any = None
        #: Tamper findings (newest last): ``{"at", "what", "reported"}``; kept in the document.
        self.alerts: list[dict[str, Any]] = []
        #: Set once the document was found changed outside riskrank: a server it does not name
        #: may have been removed from it, so a server seen "for the first time" waits for an operator.
        self.quarantine_unknown = False
        #: The document in memory differs from the one on disk (a repair, an alert reported): written at the next write.
        self._dirty = False
        #: How many documents this store has written (under the document's MAC; with the store's
        #: own key, also kept beside the key, outside the state directory): an older copy put
        #: back whole has a lower one.
        self.generation = self._high_water()

    def _high_water_path(self) -> Path | None:
        """Where the store's own key keeps the highest generation written (None with a key given
        by --pin-key: it may be shared by replicas, each writing)."""
        return self.key.path.with_name(self.key.path.stem + ".generation") if self.key.own else None

    def _high_water(self) -> int:
        path = self._high_water_path()
        try:
            text = path.read_text().strip() if path is not None else ""
        except OSError:
            return 0
        return int(text) if text.isdigit() else 0

    def _wrote(self) -> None:
        """One more document written: its generation is the store's, and beside its own key."""
        self.generation += 1
        path = self._high_water_path()
        if path is not None:
            with contextlib.suppress(OSError):  # a key directory that cannot be written loses only the rollback check
                atomic_write_bytes(path, f"{self.generation}\n".encode())

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
        self._init_state()
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

    def _read_doc(self) -> Any:
        """The stored document (None: there is none); :class:`ValueError` when unreadable."""
        self._stamp = self.stamp()
        if not self.path.exists():
            return None
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.path} cannot be read ({exc})") from None

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = self._read_doc()
            key = self.key.read()
        except (ValueError, PinError) as exc:
            self.broken = str(exc)
            return {}
        if data is None:
            if key is not None and self.key.own:
                # The store's own key is made with its first document: a key without one means the
                # document was removed, which would re-trust every server on first sight.
                self._alert(f"{self.path} is gone but its key {self.key.path} is there: the pin file was removed outside "
                            "riskrank; every server waits for an operator on first sight (riskrank pins reset starts afresh)",
                            "pins_removed")
                self.quarantine_unknown = True
            return {}
        return self._servers(data, key)

    def _alert(self, what: str, code: str = "pins_tampered") -> None:
        self.alerts = [*self.alerts, {"at": time.time(), "code": code, "what": what, "reported": False}][-MAX_ALERTS:]
        self._dirty = True

    def _servers(self, data: Any, key: bytes | None) -> dict[str, dict[str, Any]]:
        """The servers of a pin document, checked against its key: a document that is not one
        (another format, unreadable, a key that is gone) sets :attr:`broken` and trusts
        nothing; a signed one whose MAC fails keeps only the pins whose own MAC holds
        (:meth:`_repair`)."""
        fmt = data.get("format") if isinstance(data, dict) else type(data).__name__
        if not isinstance(data, dict) or fmt not in (FORMAT, LEGACY_FORMAT):
            self.broken = f"{self.path} is not a {FORMAT} pin store (format {fmt!r})"
            return {}
        servers = data.get("servers")
        if not isinstance(servers, dict) or not all(isinstance(e, dict) for e in servers.values()):
            self.broken = f"{self.path} holds no servers object"
            return {}
        if fmt == LEGACY_FORMAT and key is None:
            if data.get("sha256") != _checksum(servers):
                self.broken = f"{self.path} fails its checksum (edited by hand, or damaged)"
                return {}
            self._alert(f"{self.path} was written before pin files were signed: its pins are kept as they are and signed "
                        f"with the key {self.key.path} at the next write", "pins_signed")
            return servers
        if key is None:
            self.broken = (f"the key of {self.path} ({self.key.path}) is missing: its MACs cannot be checked "
                           "(give --pin-key, or riskrank pins reset after checking the file)")
            return {}
        alerts = data.get("alerts") if isinstance(data.get("alerts"), list) else []
        body = {"servers": servers, "alerts": alerts, "quarantine_unknown": data.get("quarantine_unknown") is True}
        if "generation" in data:  # documents written before generations were counted have none
            body["generation"] = data["generation"]
        if fmt == FORMAT and hmac.compare_digest(str(data.get("mac", "")), _mac(key, body)):
            self.alerts, self.quarantine_unknown = [a for a in alerts if isinstance(a, dict)], body["quarantine_unknown"]
            written = data.get("generation") if isinstance(data.get("generation"), int) else 0
            if written < self.generation:
                # An older copy, signed by the same key, put back whole: the approvals and
                # quarantines made since are gone, and a server added since would be trusted on
                # first sight (a rug pull waiting for approval pinned as it is).
                self._alert(f"{self.path} is an older copy of the pins (generation {written}; this store has written "
                            f"{self.generation}): put back outside riskrank; a server it does not name waits for an "
                            "operator on first sight, and a definition that changed since its pins is quarantined again",
                            "pins_rolled_back")
                self.quarantine_unknown = True
            self.generation = max(self.generation, written)
            return servers
        # Changed outside riskrank. Only an alert this process can vouch for is kept (the
        # document's own ones may be forged); what its pins' MACs still vouch for stays.
        return self._repair(servers, key)

    def _repair(self, servers: dict[str, dict[str, Any]], key: bytes) -> dict[str, dict[str, Any]]:
        """A document changed outside riskrank: every pin whose own MAC (or digest) fails goes
        back to quarantine as ``tampered``, every pending change that does not match its
        digest is dropped (the next list finds it again), and from now on a server the
        document does not name waits for an operator. One alert says what changed."""
        out: dict[str, dict[str, Any]] = {}
        back, dropped = [], 0
        for up, entry in servers.items():
            tools = entry.get("tools") if isinstance(entry.get("tools"), dict) else {}
            pending = entry.get("pending") if isinstance(entry.get("pending"), dict) else {}
            kept, held = {}, {}
            for name, pin in tools.items():
                ok = (isinstance(pin, dict) and isinstance(pin.get("sha256"), str) and isinstance(pin.get("definition"), dict)
                      and digest(pin["definition"]) == pin["sha256"]
                      and hmac.compare_digest(str(pin.get("mac", "")), _pin_mac(key, up, name, pin["sha256"])))
                if ok:
                    kept[name] = pin
                else:
                    seen = pin.get("definition") if isinstance(pin, dict) and isinstance(pin.get("definition"), dict) else {}
                    change = Change(up, name, "tampered", canonical({**seen, "name": name}) if seen else {"name": name})
                    held[name] = {"sha256": digest(change.seen), **change.to_dict()}
                    back.append(f"{up}/{name}")
            for name, p in pending.items():
                if isinstance(p, dict) and isinstance(p.get("seen"), dict) and digest(p["seen"]) == p.get("sha256") \
                        and p.get("kind") in ("new", "changed", "tampered"):
                    held.setdefault(name, p)
                else:
                    dropped += 1
            out[up] = {"tools": kept, "pending": held}
        shown = ", ".join(back[:5]) + (f" and {len(back) - 5} more" if len(back) > 5 else "")
        self._alert(f"{self.path} was changed outside riskrank (its MAC does not match): "
                    + (f"{len(back)} pin(s) back in quarantine ({shown})" if back else "every pin still holds its own MAC")
                    + (f", {dropped} pending change(s) dropped" if dropped else "")
                    + "; a server it does not name waits for an operator on first sight")
        self.quarantine_unknown = True
        return out

    def _document(self, key: bytes) -> dict[str, Any]:
        for up, entry in self.servers.items():
            for name, pin in entry.get("tools", {}).items():
                pin["mac"] = _pin_mac(key, up, name, pin["sha256"])
        body = {"servers": self.servers, "alerts": self.alerts, "quarantine_unknown": self.quarantine_unknown,
                "generation": self.generation + 1}
        return {"format": FORMAT, **body, "mac": _mac(key, body)}

    def _signing_key(self) -> bytes:
        return self.key.read() or self.key.create()

    def save(self) -> None:
        if self.broken is not None:
            return  # never overwrite a store that is not trusted: reset it explicitly
        doc = self._document(self._signing_key())
        atomic_write_bytes(self.path, (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode())
        self._stamp = self.stamp()
        self._dirty = False
        self._wrote()

    def take_alerts(self) -> list[tuple[str, str]]:
        """(code, what) of each finding not yet reported, once (the gateway writes each as one
        audit line): ``pins_tampered``, ``pins_removed`` or ``pins_signed``; marked reported
        in the document at the next write."""
        out = [(str(a.get("code", "pins_tampered")), str(a.get("what"))) for a in self.alerts if not a.get("reported")]
        if out:
            self.alerts = [{**a, "reported": True} for a in self.alerts]
            self._dirty = True
        return out

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
            if first_seen == "trust" and not self.quarantine_unknown:
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
            old = pending.get(name)
            kind = "tampered" if (old or {}).get("kind") == "tampered" else "new" if pin is None else "changed"
            change = Change(upstream, name, kind, canonical(tool), None if pin is None else pin["definition"])
            if old is None or old.get("sha256") != digest(tool):
                pending[name] = {"sha256": digest(tool), **change.to_dict()}
                events.append(change.reason())
            held[name] = change.reason()
        for name in sorted(set(entry["tools"]) - set(now)):
            del entry["tools"][name]
            events.append(f"{upstream!r} no longer lists {name!r}: its pin is dropped (listed again, it is new)")
        for name in sorted(set(pending) - set(now)):
            del pending[name]
        if json.dumps(entry, sort_keys=True) != before or self._dirty:
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
            # The digest of what is shown (the definition the operator read), never a stored one.
            entry["tools"][n] = {"sha256": digest(p["seen"]), "definition": p["seen"], "at": time.time()}
        self.save()
        return names

    def reset(self, upstream: str | None = None) -> None:
        """Forget the pins of ``upstream`` (every server when None; a broken or tampered store
        is replaced, and its key made again if it is gone): the next list pins afresh under
        the policy's ``first_seen``."""
        with self._writing():
            self._reset(upstream)

    def _reset(self, upstream: str | None) -> None:
        if upstream is None:
            self.servers, self.broken, self.quarantine_unknown, self.alerts = {}, None, False, []
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
    by every replica on one database: the same signed document as ``pins.json``, written by
    compare-and-swap on its version (every replica needs the same ``--pin-key``). A write that
    loses the race to another replica re-reads and redoes its review, so a pin approved at one
    replica holds at every replica, and no replica writes back a stale copy over another's
    first-sight pins. A store that cannot be reached mid-run is treated as unchanged until it
    answers again."""

    def __init__(self, store: Any, *, key: str | Path | None = None) -> None:
        self.store = store
        self.dir = None  # type: ignore[assignment]
        self.path = f"{store.url} (pins)"  # type: ignore[assignment]
        self.key = PinKey.resolve(str(store.url), key)
        self._lock_fd = None
        self._init_state()
        self.servers = self._load()

    def stamp(self) -> Any:
        from riskrank.serving.gateway.store import StoreError

        try:
            got = self.store.get_doc(STORE_KIND, STORE_KEY)
        except StoreError:
            return self._stamp
        return None if got is None else got[0]

    def _read_doc(self) -> Any:
        got = self.store.get_doc(STORE_KIND, STORE_KEY)
        self._stamp = None if got is None else got[0]
        return None if got is None else got[1]

    def save(self) -> None:
        if self.broken is not None:
            return
        version = self.store.put_doc(STORE_KIND, STORE_KEY, self._document(self._signing_key()), expect=self._stamp)
        if version is None:
            raise _LostRace
        self._stamp = version
        self._dirty = False
        self._wrote()

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
