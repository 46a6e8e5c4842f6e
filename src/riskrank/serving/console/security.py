"""Who may use the console, and what protects its pages: sessions, CSRF, the headers.

The rules, the same as the rest of riskrank's servers:

- **Without an admin token** the console is for loopback only: it is served only on a
  loopback address (the CLI refuses another), and it answers only requests whose ``Host`` is
  a loopback name, so a web page cannot reach it through DNS rebinding. It asks for a name
  (recorded with every decision), not a token.
- **With an admin token** (``RISKRANK_ADMIN_TOKEN`` or ``--admin-token-file``; it must pass
  the rule every token meets, :func:`riskrank.serving.auth.check_token_strength`) the login
  form asks for it. The token is never taken from a URL and never put in one: the form posts
  it, and the answer is a session cookie (``HttpOnly``, ``SameSite=Strict``,
  ``Path=/console``; ``Secure`` over HTTPS) holding a random session id, never the token.
- **Guessing is throttled** (:class:`LoginThrottle`): after :data:`LOGIN_FAILURES_PER_ADDRESS`
  wrong tokens from one address within :data:`LOGIN_WINDOW_S`, or
  :data:`LOGIN_FAILURES_OVERALL` from all addresses, the login answers 429 with
  ``Retry-After`` without looking at the token (the right one too: a throttle that checked
  it would still answer the guess) until the oldest of those failures is a minute old.
- **Every form** carries its session's CSRF token, compared in constant time; a POST whose
  ``Origin`` is another site's is refused before that. The login form, which has no session
  yet, uses a double-submit cookie.
- **Every response** carries a strict Content-Security-Policy (scripts, styles and images from
  the console itself only; no inline script or style; no framing), ``nosniff``,
  ``no-store`` and ``Referrer-Policy: same-origin``. Templates escape everything they print.

Standard library only.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from riskrank.serving.auth import check_token_strength, is_loopback

#: Cookie names take the port: cookies do not tell ports apart, and two consoles on one host
#: must not log each other out.
SESSION_COOKIE = "riskrank_console"
LOGIN_COOKIE = "riskrank_console_login"
#: A session ends after this much idle time, and after MAX_S whatever happens.
IDLE_S = 8 * 3600
MAX_S = 24 * 3600
MAX_SESSIONS = 256
MAX_NAME_CHARS = 64
#: Wrong admin tokens one address may send within LOGIN_WINDOW_S before it is answered 429.
LOGIN_FAILURES_PER_ADDRESS = 5
#: Wrong admin tokens from all addresses together within LOGIN_WINDOW_S before every login
#: is answered 429 (many addresses guessing at once; a real operator waits a minute).
LOGIN_FAILURES_OVERALL = 30
LOGIN_WINDOW_S = 60.0
#: Addresses whose failures are remembered at most (the oldest are forgotten first).
MAX_TRACKED_ADDRESSES = 10_000

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


@dataclass
class Session:
    """A logged-in operator: the name recorded with their decisions, and their forms' CSRF token."""

    name: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    flash: str = ""
    """A message for the next page this operator sees (what their last form did)."""
    flash_kind: str = "done"
    """How the message is shown: ``done`` (it went through) or ``refused`` (a denial)."""
    created: float = field(default_factory=time.monotonic)
    seen: float = field(default_factory=time.monotonic)


def _key(session_id: str) -> str:
    # The table holds digests, so nothing in memory is a working cookie.
    return hashlib.sha256(session_id.encode()).hexdigest()


class LoginThrottle:
    """Failed logins over a sliding window, per address and overall: :meth:`wait` says how
    long an address must wait before its next try is even checked (0: it may try now).
    :meth:`throttled` counts the tries refused meanwhile and says when one is due on the
    audit log (the first of a window, then at most one a window per address, with the
    count), and :meth:`flush` gives the rest once the address may try again, so a flood is
    on record, counted, without writing a line per request. Memory is bounded:
    a deque of at most the limit per address, and at most :data:`MAX_TRACKED_ADDRESSES`."""

    def __init__(self, per_address: int = LOGIN_FAILURES_PER_ADDRESS, overall: int = LOGIN_FAILURES_OVERALL,
                 window_s: float = LOGIN_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_address, self.overall, self.window_s, self.clock = per_address, overall, window_s, clock
        self._by_address: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()
        self._all: collections.deque[float] = collections.deque(maxlen=overall)
        self._refused: dict[str, tuple[float, int]] = {}

    def wait(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: now)."""
        now = self.clock()
        waits = [0.0]
        mine = self._by_address.get(address)
        if mine is not None and len(mine) >= self.per_address:
            waits.append(mine[0] + self.window_s - now)
        if len(self._all) >= self.overall:
            waits.append(self._all[0] + self.window_s - now)
        return max(waits)

    def failed(self, address: str) -> None:
        now = self.clock()
        mine = self._by_address.pop(address, None) or collections.deque(maxlen=self.per_address)
        mine.append(now)
        self._by_address[address] = mine  # most recent last
        while len(self._by_address) > MAX_TRACKED_ADDRESSES:
            self._by_address.popitem(last=False)
        self._all.append(now)

    def succeeded(self, address: str) -> None:
        self._by_address.pop(address, None)

    def scope(self, address: str) -> str:
        """Whom a throttle holds back: ``address``, or ``*`` when the overall limit does."""
        mine = self._by_address.get(address)
        now = self.clock()
        return address if mine is not None and len(mine) >= self.per_address and mine[0] + self.window_s > now else "*"

    def throttled(self, address: str) -> int:
        """Count one try refused by the throttle; the number refused since the last audit
        line when one is due now (0: not yet)."""
        key, now = self.scope(address), self.clock()
        since, count = self._refused.get(key, (-math.inf, 0))
        count += 1
        if now - since >= self.window_s:
            self._refused[key] = (now, 0)
            if len(self._refused) > MAX_TRACKED_ADDRESSES:
                self._refused.pop(next(iter(self._refused)))
            return count
        self._refused[key] = (since, count)
        return 0

    def flush(self, address: str) -> int:
        """The tries refused since the last audit line for ``address`` (and for everyone),
        once the throttle lets it try again: what the line that closes a block says."""
        total = 0
        for key in (address, "*"):
            since, count = self._refused.get(key, (0.0, 0))
            if count:
                self._refused[key] = (since, 0)
                total += count
        return total


class Sessions:
    """The console's sessions, in memory (a restart logs everyone out)."""

    def __init__(self, admin_token: str | None) -> None:
        if admin_token is not None:
            check_token_strength(admin_token, "the console's admin token")
        self.admin_token = admin_token.encode() if admin_token else None
        self._table: dict[str, Session] = {}

    @property
    def needs_token(self) -> bool:
        return self.admin_token is not None

    def token_ok(self, given: str) -> bool:
        if self.admin_token is None:
            return True
        return hmac.compare_digest(given.encode(), self.admin_token)

    def create(self, name: str) -> tuple[str, Session]:
        now = time.monotonic()
        for k in [k for k, s in self._table.items() if self._expired(s, now)]:
            del self._table[k]
        while len(self._table) >= MAX_SESSIONS:
            del self._table[min(self._table, key=lambda k: self._table[k].seen)]
        sid = secrets.token_urlsafe(32)
        session = Session(name)
        self._table[_key(sid)] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        session = self._table.get(_key(sid))
        now = time.monotonic()
        if session is None or self._expired(session, now):
            self._table.pop(_key(sid), None)
            return None
        session.seen = now
        return session

    def drop(self, sid: str | None) -> None:
        if sid:
            self._table.pop(_key(sid), None)

    @staticmethod
    def _expired(s: Session, now: float) -> bool:
        return now - s.seen > IDLE_S or now - s.created > MAX_S


def check_name(name: str) -> str | None:
    """The operator's name as it goes into the audit log, or None when unusable."""
    name = " ".join(name.split())
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        return None
    return name


def same_value(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


def cookies(header: str | None) -> dict[str, str]:
    """``Cookie`` header -> name: value (the first of a repeated name wins)."""
    out: dict[str, str] = {}
    for part in (header or "").split(";"):
        name, sep, value = part.strip().partition("=")
        name = name.strip()
        if sep and name and name not in out:
            out[name] = value.strip()
    return out


def set_cookie(name: str, value: str, *, secure: bool, max_age: int | None = None) -> str:
    """A ``Set-Cookie`` value for the console: HttpOnly, SameSite=Strict, Path=/console."""
    parts = [f"{name}={value}", "Path=/console", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def host_is_loopback(host_header: str | None) -> bool:
    """True when the request's ``Host`` names a loopback address (``127.0.0.1:8790``,
    ``localhost``, ``[::1]:80``)."""
    if not host_header:
        return False
    host = host_header.strip()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return is_loopback(host.lower())


def origin_ok(origin: str | None, scheme: str, host_header: str | None) -> bool:
    """A POST's ``Origin`` is this console's own (absent: left to the CSRF token; browsers
    send it on every cross-site POST)."""
    if origin is None:
        return True
    if origin == "null" or not host_header:
        return False
    parts = urlsplit(origin)
    return parts.scheme == scheme and parts.netloc.lower() == host_header.strip().lower()


#: The keys of an operators file's entry.
OPERATOR_KEYS = {"token_sha256"}


def read_operators(path: str | Path) -> dict[str, str]:
    """The named operators of ``--operators FILE``: token digest -> operator name. The file is
    ``{"operators": {"NAME": {"token_sha256": "sha256:HEX" or [...]}}}``, digests only (a
    token is never written in clear), one operator per token; whoever presents one decides
    through ``POST /console/api/decide`` as that name. Any problem is one
    :class:`~riskrank.errors.RiskrankError` line naming the file."""
    import json
    import re

    from riskrank.errors import RiskrankError

    where = f"--operators {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RiskrankError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RiskrankError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"operators"} or not isinstance(data["operators"], dict) \
            or not data["operators"]:
        raise RiskrankError(f'{where}: must be {{"operators": {{"NAME": {{"token_sha256": "sha256:..."}}}}}} with at '
                            "least one operator")
    out: dict[str, str] = {}
    for name, entry in data["operators"].items():
        if check_name(name) != name:
            raise RiskrankError(f"{where}: operator {name!r}: a name is 1-{MAX_NAME_CHARS} printable characters")
        if not isinstance(entry, dict) or set(entry) - OPERATOR_KEYS or "token_sha256" not in entry:
            raise RiskrankError(f"{where}: operator {name!r}: an entry is {{\"token_sha256\": \"sha256:...\"}} (a list for "
                                "a rotation)")
        digests = entry["token_sha256"] if isinstance(entry["token_sha256"], list) else [entry["token_sha256"]]
        for digest in digests:
            if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                raise RiskrankError(f'{where}: operator {name!r}: token_sha256 is "sha256:" and 64 lower-case hex '
                                    "characters (printf %s TOKEN | sha256sum)")
            if digest in out:
                raise RiskrankError(f"{where}: operator {name!r} has the same token as operator {out[digest]!r}")
            out[digest] = name
    return out


def operator_of(authorization: str | None, operators: dict[str, str]) -> str | None:
    """The operator a ``Authorization: Bearer TOKEN`` header names (None: none, or unknown)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    digest = "sha256:" + hashlib.sha256(token.strip().encode()).hexdigest()
    for known, name in operators.items():  # compared in constant time, every entry
        if hmac.compare_digest(known, digest):
            return name
    return None
