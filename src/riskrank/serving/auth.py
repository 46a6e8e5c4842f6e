"""Who may reach a listening server: bearer tokens, the bind rules, and :class:`Gate`, the
ASGI middleware in front of the HTTP API and of MCP's streamable-HTTP transport.

- a missing or wrong bearer token is a 401 before routing, so an unauthenticated caller
  cannot learn which tools or paths exist;
- ``/v1/admin/*`` takes the admin token and only the admin token, which must differ from
  the bearer token (a client of the API must not be able to swap what every other client is
  served); a server started without an admin token has no admin endpoints at all;
- only a loopback bind with ``--insecure`` runs without a token;
- with a clients file (:mod:`riskrank.serving.gateway.clients`) each client's own token, or
  an OAuth JWT, names it and its policy (``scope["riskrank.client"]``); the shared bearer
  token still works, as the default policy's caller;
- bodies are limited in size (and must be JSON) before any application code reads them.

Standard library only: the gate wraps any ASGI app.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.serving.owned import OwnedTable
from riskrank.serving.requests import ApiError

TOKEN_ENV = "RISKRANK_TOKEN"
ADMIN_TOKEN_ENV = "RISKRANK_ADMIN_TOKEN"
#: The shortest token any role takes (bearer, admin, a client's).
MIN_TOKEN_CHARS = 16
#: Tokens people type when they mean "later": refused by their digest, in every role.
WEAK_TOKENS = ("", "token", "secret", "password", "changeme", "change-me", "admin", "test", "default", "letmein",
               "0123456789abcdef", "abcdefghijklmnop", "passwordpassword", "changemechangeme", "1234567890123456",
               "secretsecretsecret", "xxxxxxxxxxxxxxxx", "aaaaaaaaaaaaaaaa")
WEAK_DIGESTS = frozenset(hashlib.sha256(t.encode()).hexdigest() for t in WEAK_TOKENS)
#: A token of fewer distinct characters than this is a pattern, not a secret.
MIN_DISTINCT_CHARS = 6
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
ADMIN_PREFIX = "/v1/admin/"
#: How many MCP sessions' owners the gate remembers (the gateway keeps at most this many sessions' records too).
MAX_SESSION_OWNERS = 4096
#: Where an OAuth client finds this resource's authorization server (RFC 9728), when the
#: clients file takes OAuth tokens.
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token_strength(token: str, where: str = "the token", error: type[RiskrankError] = RiskrankError,
                         hint: str = "make a random one, e.g. `openssl rand -base64 32`") -> None:
    """The one rule every token meets, whatever its role (the bearer token, the admin token,
    a client's): at least :data:`MIN_TOKEN_CHARS` printable ASCII characters without spaces,
    not a well-known weak one, and at least :data:`MIN_DISTINCT_CHARS` distinct characters
    (``aaaaaaaaaaaaaaaa`` is sixteen characters and no secret)."""
    if len(token) < MIN_TOKEN_CHARS or not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise error(f"{where} must be at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces")
    if hashlib.sha256(token.encode()).hexdigest() in WEAK_DIGESTS or len(set(token)) < MIN_DISTINCT_CHARS:
        raise error(f"{where} is a well-known or low-variety token; {hint}")


def read_token(token_file: str | None, env: str | None) -> str | None:
    """The bearer token from a file (first line) or an environment variable; None if neither
    is set. Tokens are never taken from the command line (visible in ``ps``), and each must
    pass :func:`check_token_strength` (a weak one stops the server at start, in one line)."""
    value: str | None = None
    source = ""
    if token_file:
        path = Path(token_file)
        try:
            lines = path.read_text(encoding="utf-8-sig").strip().splitlines()
            value = lines[0].strip() if lines else ""  # the first line: a file may carry notes after it
        except (OSError, UnicodeDecodeError) as exc:
            raise RiskrankError(f"cannot read the token file {path}: {exc}") from None
        source = str(path)
    elif env and os.environ.get(env):
        value, source = os.environ[env].strip(), f"${env}"
    if value is None:
        return None
    check_token_strength(value, f"the token in {source}")
    return value


def check_bind(host: str, token: str | None, insecure: bool, *, clients: bool = False) -> None:
    """A token is required unless the server is bound to loopback and ``--insecure`` is given
    (a clients file counts: each client then has a token of its own)."""
    if insecure and not is_loopback(host):
        raise RiskrankError(f"--insecure is allowed only on a loopback address (127.0.0.1, ::1, localhost), not {host!r}")
    if insecure and clients:
        raise RiskrankError("--insecure and --clients contradict each other: with a clients file every caller has a token")
    if token is None and not insecure and not clients:
        raise RiskrankError(
            f"no bearer token: set ${TOKEN_ENV} or pass --token-file FILE "
            "(or, on a loopback address only, --insecure to run without one)"
        )


def check_distinct_tokens(token: str | None, admin_token: str | None) -> None:
    """The admin token must not be the bearer token: every client holds the latter."""
    if token and admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        raise RiskrankError(f"the admin token (${ADMIN_TOKEN_ENV} or --admin-token-file) equals the bearer token; "
                            "give the admin endpoints a token of their own")


class Gate:
    """ASGI middleware in front of everything: bearer auth, then the body-size limit.

    Auth runs before routing, so a caller without the token gets the same 401 for every
    path, existing or not. Bodies are buffered up to the limit, then replayed to the app.
    ``max_inflight``: at most this many POSTs at once (the MCP endpoint's calls); one more is
    answered 503 ``overloaded`` with ``Retry-After: 1`` at once, so a flood queues nothing."""

    def __init__(self, app: Any, *, token: str | None, admin_token: str | None = None, max_body_bytes: int = 64 * 1024,
                 max_inflight: int | None = None, clients: Any = None, log: Callable[[str], None] | None = None,
                 audit: Any = None) -> None:
        check_distinct_tokens(token, admin_token)
        self.app = app
        #: The audit log (an ``append(**fields)`` coroutine): an OAuth token refused for
        #: shadowing a clients-file name is a line there, with the address, issuer and subject.
        self.audit = audit
        #: The clients file (:class:`riskrank.serving.gateway.clients.ClientBook`): a
        #: client's own token (or OAuth JWT) names it and its policy; None: the bearer token only.
        self.clients = clients
        self.log = log or (lambda line: None)
        self.max_inflight = max_inflight
        self.inflight = 0
        self.token = token.encode() if token else None
        self.admin_token = admin_token.encode() if admin_token else None
        self.max_body = max_body_bytes
        #: MCP session id -> the client that opened it (at most :data:`MAX_SESSION_OWNERS`; past
        #: it the oldest session of the client holding the most is forgotten, and a session id
        #: this gate does not know is answered as unknown, never passed on):
        #: the SDK keys a session by its id alone, so a client holding another's id could end
        #: it (DELETE), take its stream (GET) or call through it; here it is answered as an
        #: unknown session, as the SDK answers one, and nothing reaches the session.
        self.session_owners = OwnedTable(MAX_SESSION_OWNERS)
        #: Requests in flight per MCP session id, and the forgotten sessions whose close waits for
        #: theirs to end (a call in progress, a held question, an open event stream: closing the
        #: session under them would cancel another caller's work, not only its next request).
        self._busy: collections.Counter[bytes] = collections.Counter()
        self._close_when_idle: set[bytes] = set()

    def _session_owner(self, sid: bytes | None, who: str | None) -> bool:
        """Whether a request naming session ``sid`` comes from the client that opened it, or
        names none (a new session, or the 2026-07-28 protocol); an id this gate has not seen
        opened, or has forgotten, is no one's."""
        if sid is None:
            return True
        # An id this gate did not see opened, or has forgotten, fails closed: passed on, the
        # SDK would serve whoever holds it (a client that opened 4,096 sessions of its own
        # used to push another's out of the table, then use, read and end it).
        return sid in self.session_owners and self.session_owners[sid] == who

    def _forget_session(self, sid: bytes) -> None:
        self.session_owners.pop(sid)

    def _note_session(self, headers: Any, who: str | None) -> list[bytes]:
        """Record the session a response opened as ``who``'s; the ids pushed out to make room."""
        for key, value in headers or ():
            if bytes(key).lower() == b"mcp-session-id" and bytes(value) not in self.session_owners:
                return self.session_owners.put(bytes(value), who, owner=who)  # the flooding client's own go first
        return []

    async def _close_sessions(self, scope: dict, sids: list[bytes]) -> None:
        """End in the SDK the sessions this gate has forgotten, by the protocol's own DELETE.
        No one can reach them any more (an id the gate does not know is answered 404), but the
        SDK keeps a session until it is deleted or has idled for 30 minutes: a client opening
        sessions without closing them held 770 MB after 4,100 ``initialize`` calls, and could
        fill the SDK's own cap (10,000 sessions, then 503 for every client)."""
        import anyio

        keep = [(k, v) for k, v in scope.get("headers", ())
                if k.lower() not in (b"mcp-session-id", b"content-length", b"content-type", b"transfer-encoding")]
        for sid in sids:
            sent = False

            async def receive() -> dict:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": b"", "more_body": False}
                await anyio.sleep_forever()
                raise AssertionError  # unreachable: the request ends first

            async def discard(message: dict) -> None:
                return None

            try:
                await self.app({**scope, "method": "DELETE", "headers": [*keep, (b"mcp-session-id", sid)]}, receive, discard)
            except Exception as exc:  # the caller's response is sent; a failed close is the SDK's idle timeout's
                self.log(f"could not close forgotten MCP session {sid[:12].decode('latin-1')}...: {exc}")

    def _authorised(self, scope: dict, path: str) -> bool:
        # Without an admin token the admin paths do not exist (the app answers 404 to a caller
        # holding the bearer token), so the bearer token is the gate there as everywhere.
        required = self.admin_token if (self.admin_token and path.startswith(ADMIN_PREFIX)) else self.token
        if required is None:
            return True
        return hmac.compare_digest(_bearer(scope), required)

    async def _identify(self, scope: dict, path: str) -> dict[str, Any] | None:
        """Who the request is (``scope["riskrank.client"]``), or None (a 401): a client's own
        token, then the shared bearer token, then an OAuth JWT (validated off the loop: the
        issuer's keys may be fetched). The admin paths take the admin token only."""
        if self.clients is None or (self.admin_token and path.startswith(ADMIN_PREFIX)):
            ok = self._authorised(scope, path)
            return {"name": None, "policy": None, "via": "bearer" if self.token else "none"} if ok else None
        given = _bearer(scope)
        try:
            text = given.decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if text and (ident := self.clients.lookup(text)) is not None:
            return ident.to_scope()
        if self.token is not None and hmac.compare_digest(given, self.token):
            return {"name": None, "policy": None, "via": "bearer"}
        if text and self.clients.oauth is not None and text.count(".") == 2:
            import anyio.to_thread

            try:
                ident = await anyio.to_thread.run_sync(self.clients.validate_jwt, text)
            except RiskrankError as exc:
                self.log(f"401 {scope.get('method', '')} {path}: OAuth token refused: {exc}")
                if getattr(exc, "reason", None) == "identity_collision" and self.audit is not None:
                    with contextlib.suppress(RiskrankError):  # the 401 stands whether or not it is logged
                        await self.audit.append(tool=None, decision="auth_refused", code="identity_collision",
                                                reason=str(exc), address=(scope.get("client") or ("?",))[0],
                                                issuer=exc.issuer, subject=exc.subject, shadows=exc.client)  # type: ignore[attr-defined]
                return None
            return ident.to_scope()
        self.log(f"401 {scope.get('method', '')} {path}: " + ("no bearer token" if not given else "unknown token"))
        return None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        oauth = self.clients.oauth if self.clients is not None else None
        if path == RESOURCE_METADATA_PATH and oauth is not None:
            await _send_json(send, 200, oauth.resource_metadata(_origin(scope) + "/mcp"))
            return
        if path not in PUBLIC_PATHS:
            ident = await self._identify(scope, path)
            if ident is None:
                challenge = 'Bearer realm="riskrank"' + (
                    f', resource_metadata="{_origin(scope)}{RESOURCE_METADATA_PATH}"' if oauth is not None else "")
                await _send_json(send, 401, ApiError(401, "unauthorized", "missing or invalid bearer token").body(),
                                 {"www-authenticate": challenge})
                return
            scope["riskrank.client"] = ident
        headers = dict(scope.get("headers", ()))
        who = (scope.get("riskrank.client") or {}).get("name")
        sid = headers.get(b"mcp-session-id") if path == "/mcp" or path.startswith("/mcp/") else None
        if not self._session_owner(sid, who):
            await _send_json(send, 404, {"jsonrpc": "2.0", "id": "server-error",
                                         "error": {"code": -32600, "message": "Session not found"}})
            return
        forgotten: list[bytes] = []  # sessions pushed out of the owners' table by the one this request opens
        as_received = dict(scope)  # the routers below rewrite the scope in place (a mount's root path)
        if sid is not None:
            self._busy[sid] += 1
        try:
            await self._pass(scope, receive, send, sid, who, forgotten)
        finally:
            if sid is not None:
                self._busy[sid] -= 1
                if self._busy[sid] <= 0:
                    del self._busy[sid]
                    if sid in self._close_when_idle:
                        forgotten.append(sid)
            closing = [f for f in forgotten if not self._busy.get(f)]
            self._close_when_idle.difference_update(closing)
            self._close_when_idle.update(f for f in forgotten if self._busy.get(f))
            if closing:
                await self._close_sessions(as_received, closing)

    async def _pass(self, scope: dict, receive: Callable, send: Callable, sid: bytes | None, who: str | None,
                    forgotten: list[bytes]) -> None:
        """The request past the gate's identity and session checks: its body bounded, then the
        app; ``forgotten`` gets the sessions pushed out of the owners' table by one it opens."""
        headers = dict(scope.get("headers", ()))
        if sid is None or scope.get("method") == "DELETE":
            inner_send = send

            async def send(message: dict) -> None:  # the session this request opens (or ends) is its client's
                if message.get("type") == "http.response.start":
                    if sid is None:
                        forgotten.extend(self._note_session(message.get("headers"), who))
                    elif message.get("status", 500) < 300:
                        self._forget_session(sid)
                await inner_send(message)
        length = headers.get(b"content-length")
        has_body = length not in (None, b"0") or b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if has_body and scope.get("method") in ("POST", "PUT", "PATCH") and not _is_json(headers.get(b"content-type")):
            await _send_json(send, 415, ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json").body())
            return
        if length is not None:
            try:
                too_big = int(length) > self.max_body
            except ValueError:
                await _send_json(send, 400, ApiError(400, "malformed_request", "invalid Content-Length").body())
                return
            if too_big:
                await _send_json(send, 413, _too_large(self.max_body))
                return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send_json(send, 413, _too_large(self.max_body))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if self.max_inflight is None or scope.get("method") != "POST":
            await self.app(scope, replay, send)
        elif self.inflight >= self.max_inflight:
            await _send_json(send, 503, ApiError(503, "overloaded", f"more than {self.max_inflight} requests in flight; "
                                                                    "retry later").body(), {"retry-after": "1"})
            return
        else:
            self.inflight += 1
            try:
                await self.app(scope, replay, send)
            finally:
                self.inflight -= 1


def _bearer(scope: dict) -> bytes:
    """The credential of the request's ``Authorization: Bearer`` header (empty without one)."""
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            scheme, _, cred = value.partition(b" ")
            return cred.strip() if scheme.lower() == b"bearer" else b""
    return b""


def _origin(scope: dict) -> str:
    """The origin a client reached this server at (its Host header), for the OAuth metadata."""
    host = dict(scope.get("headers", ())).get(b"host", b"").decode("latin-1") or "localhost"
    return f"{scope.get('scheme', 'http')}://{host}"


def _is_json(content_type: bytes | None) -> bool:
    media = (content_type or b"").split(b";")[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _too_large(limit: int) -> dict[str, Any]:
    return ApiError(413, "body_too_large", f"request body exceeds {limit} bytes").body()


async def _send_json(send: Callable, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body, separators=(",", ":")).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": raw})
