"""The only module that knows the MCP Python SDK, for both of its majors (1.x from 1.30, 2.x).

riskrank runs on mcp 1.x and 2.x, so that installing it next to a package that needs
``mcp<2`` does not break its MCP server. The layer talks to both generations through the
parts whose signatures agree, and builds everything else from *wire dicts* (the camelCase
JSON the protocol writes), validated with ``model_validate`` and read back with
``model_dump(by_alias=True, mode="json", exclude_none=True)``: the wire shape is the same in
both, where the models' attribute names are not (``isError`` in 1.x, ``is_error`` in 2.x).
What differs, and where it is handled:

=========================  ==========================================  ==========================================
                           mcp 1.x                                     mcp 2.x
=========================  ==========================================  ==========================================
server                     low-level ``Server``, raw handlers keyed    low-level ``Server(on_call_tool=...)``,
                           by request class (:func:`_build_v1`)        handlers ``(ctx, params)`` (:func:`_build_v2`)
streamable HTTP app        session manager + Starlette, by hand        ``Server.streamable_http_app``
caller's progress token    ``request_context.meta.progressToken``      ``params.meta["progress_token"]``
client capabilities        ``session.client_params.capabilities``      ``session.client_capabilities``
confirmation               ``elicit_form`` mid-call                    the same on handshake-era connections; on
                                                                       2026-07-28 an ``InputRequiredResult`` the
                                                                       client answers by retrying the call
server capabilities        ``get_server_capabilities()``               ``server_capabilities`` property
=========================  ==========================================  ==========================================

Common to both and used as is: ``mcp.types``, ``ClientSession`` over ``stdio_client``,
``streamable_http_client`` or ``sse_client`` (with an HTTP client of the SDK's own httpx
flavour, built here so that it carries the upstream's TLS choice),
``session.call_tool(..., progress_callback=)``, the list and read calls, ``stdio_server``.
Traps the SDKs set, and what this module does about them:

- ``CallToolResult(content=[], is_error=True)`` is accepted by 1.x and leaves
  ``isError=False``: every result here is built from wire names.
- 1.x kills only the direct child when its stdio shutdown runs cancelled (a startup
  timeout), orphaning grandchildren such as npx's ``sh`` and ``node``: :func:`open_session`
  kills the child's whole process group after the SDK's own shutdown.
- Both ``stdio_server()`` read stdin in a worker thread a cancel cannot interrupt, so a
  signal handler could not stop the server: :func:`serve_stdio` reads a
  :class:`CancellableStdin`.
- Both log a traceback for every non-JSON-RPC line a child prints on stdout:
  :func:`quiet_stdio_parse_errors` drops it, :func:`bad_line` recovers the line for one
  clear error.
- ``get_default_environment()`` (HOME, LOGNAME, PATH, SHELL, TERM, USER) is what a child
  gets; the caller adds only what the server needs (never this process's environment).

The SDK is imported when a function needs it (it takes seconds), through
:func:`sdk_major`, so a missing SDK is the extra's one-line error.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from riskrank.extras import requires

FEATURE = "the MCP server (riskrank mcp)"
Json = dict[str, Any]
#: The protocol versions without a back-channel for server-initiated requests (2.x only).
MODERN_PROTOCOLS = ("2026-07-28",)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@cache
def sdk_major() -> int:
    """The installed SDK's major version (1 or 2)."""
    from importlib.metadata import PackageNotFoundError, version

    with requires("mcp", FEATURE):
        import mcp  # noqa: F401  (a missing SDK is the extra's one-line error)
    try:
        major = int(version("mcp").split(".")[0])
    except (PackageNotFoundError, ValueError):
        major = 2
    return major


def types() -> Any:
    """``mcp.types`` (the protocol models, in both majors)."""
    sdk_major()
    import mcp.types

    return mcp.types


def wire(model: Any) -> Json:
    """A protocol model as its wire dict (camelCase, no nulls): the same in 1.x and 2.x."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def error_code(result: Any) -> str | None:
    """The stable code of a ``CallToolResult`` (either SDK's model, or a wire dict) that is an
    error: its ``structuredContent.error.code``, else ``tool_error`` (a tool's own error
    answer); None when it is no error. Reads two fields, never the whole result."""
    if isinstance(result, dict):
        failed, structured = result.get("isError"), result.get("structuredContent")
    else:  # 1.x names the fields as on the wire, 2.x in snake case
        failed = getattr(result, "isError", None) or getattr(result, "is_error", None)
        structured = getattr(result, "structuredContent", None) or getattr(result, "structured_content", None)
    if not failed:
        return None
    error = structured.get("error") if isinstance(structured, dict) else None
    return str(error["code"]) if isinstance(error, dict) and error.get("code") else "tool_error"


def tool_result(text: str, *, is_error: bool = False, structured: Json | None = None) -> Any:
    """A ``CallToolResult`` with one text block (and structured content), from wire names."""
    body: Json = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        body["structuredContent"] = structured
    return types().CallToolResult.model_validate(body)


def as_call_result(value: Any) -> Any:
    """A ``CallToolResult`` of this SDK from a result of either (an upstream's) or a wire dict."""
    cls = types().CallToolResult
    if isinstance(value, cls):
        return value
    return cls.model_validate(value if isinstance(value, Mapping) else wire(value))


# -- client side: talking to upstream servers ------------------------------------------------------
#: ``ServerTarget.transport`` of a URL: the streamable HTTP transport, or the older HTTP+SSE one.
URL_TRANSPORTS = ("streamable-http", "sse")


@dataclass(frozen=True)
class ServerTarget:
    """How to reach one MCP server: a command (stdio) or a URL (streamable HTTP or SSE)."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the SDK's safe default environment; the only other variables the child sees."""
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Sent with every request. Values may be credentials (read from the environment), so they
    are left out of ``repr`` and :meth:`describe`: a log line or a traceback never shows them."""
    transport: str = "streamable-http"
    """For a URL: one of :data:`URL_TRANSPORTS`."""
    verify: bool = True
    """For https: check the server's certificate (off only by an explicit, logged opt-out)."""
    ca_file: str | None = None
    """For https: trust this PEM bundle (a private CA) instead of the default trust store."""

    def describe(self) -> str:
        """What error lines name: the command line, or the URL without userinfo, query or
        fragment (which can carry credentials)."""
        import shlex

        if self.url:
            from urllib.parse import urlsplit

            parts = urlsplit(self.url)
            host = parts.netloc.rpartition("@")[2]
            return ("sse " if self.transport == "sse" else "") + f"{parts.scheme}://{host}{parts.path}"
        return shlex.join([self.command or "", *self.args])


@dataclass
class HttpTrace:
    """The last HTTP response a remote server sent (status and reason): 2.x's streamable HTTP
    client turns a 401 into a JSON-RPC error that says only "Server returned an error
    response", so the status is taken from the wire, where both majors see it."""

    status: int | None = None
    reason: str = ""


def _http_client_factory(target: ServerTarget, trace: HttpTrace | None = None) -> Callable[..., Any]:
    """An ``httpx_client_factory`` for the SDK's HTTP transports that is the SDK's own
    ``create_mcp_http_client`` (its timeouts, its httpx flavour: ``httpx`` in 1.x, ``httpx2``
    in 2.x) plus the target's TLS choice, which that function does not take: the default
    trust store, a private CA's bundle (``ca_file``), or no verification (``verify=False``).
    Every response's status is noted in ``trace``."""
    import ssl

    from mcp.shared import _httpx_utils as sdk_http

    httpx = getattr(sdk_http, "httpx2", None) or sdk_http.httpx
    verify: Any = True
    if not target.verify:
        verify = False
    elif target.ca_file:
        verify = ssl.create_default_context(cafile=target.ca_file)

    def factory(headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None) -> Any:
        if timeout is None:
            timeout = httpx.Timeout(sdk_http.MCP_DEFAULT_TIMEOUT, read=sdk_http.MCP_DEFAULT_SSE_READ_TIMEOUT)
        kwargs: Json = {"timeout": timeout, "verify": verify}
        if trace is not None:
            async def note(response: Any) -> None:
                trace.status, trace.reason = response.status_code, str(getattr(response, "reason_phrase", "") or "")

            kwargs["event_hooks"] = {"response": [note]}
        if headers is not None:
            kwargs["headers"] = headers
        if auth is not None:
            kwargs["auth"] = auth
        return httpx.AsyncClient(**kwargs)

    return factory


def default_environment() -> dict[str, str]:
    """The SDK's safe default environment for a child server (HOME, PATH, ... only)."""
    sdk_major()
    from mcp.client.stdio import get_default_environment

    return dict(get_default_environment())


_SPAWN_LOCK: Any = None


def _spawn_lock() -> Any:
    """Serialises spawns, so the before/after difference of this process's children names
    exactly the new child."""
    global _SPAWN_LOCK
    if _SPAWN_LOCK is None:
        import anyio

        _SPAWN_LOCK = anyio.Lock()
    return _SPAWN_LOCK


def _children() -> set[int]:
    """Direct children of this process (Linux /proc; empty elsewhere)."""
    out: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                out.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return out


def kill_process_groups(pids: list[int]) -> None:
    """SIGKILL the process group of each child. Both SDKs start a stdio child as a session
    leader (its group id is its pid), and a group outlives its leader while any member
    lives, so this reaches orphaned grandchildren too."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@asynccontextmanager
async def open_session(
    target: ServerTarget, *, elicitation_callback: Any = None,
    message_handler: Callable[[Any], Awaitable[None]] | None = None, errlog: Any = None,
    children: list[int] | None = None, http_trace: HttpTrace | None = None,
) -> AsyncIterator[Any]:
    """An initialised ``ClientSession`` to one server, over stdio, streamable HTTP or SSE, with
    the handshake both majors and every server speak. A stdio child runs with
    :func:`default_environment` plus ``target.env`` (the SDK merges them); its stderr goes to
    ``errlog`` (a file with a descriptor); its pid is appended to ``children``. A URL
    server's last HTTP status goes to ``http_trace`` (what a failure was answered with).
    Both SDKs hand server notifications *and* transport errors (an unparseable stdout line)
    to ``message_handler``."""
    sdk_major()
    from mcp import ClientSession

    async with AsyncExitStack() as stack:
        if target.url and target.transport == "sse":
            # sse_client takes the same arguments in both majors; the factory brings the TLS choice.
            from mcp.client.sse import sse_client
            from mcp.shared._httpx_utils import MCP_DEFAULT_TIMEOUT

            read, write = await stack.enter_async_context(sse_client(
                target.url, headers=dict(target.headers), timeout=MCP_DEFAULT_TIMEOUT,
                httpx_client_factory=_http_client_factory(target, http_trace)))
        elif target.url:
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(_http_client_factory(target, http_trace)(headers=dict(target.headers)))
            streams = await stack.enter_async_context(streamable_http_client(target.url, http_client=http))
            read, write = streams[0], streams[1]  # 1.x yields a third value (the session id getter)
        else:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            params = StdioServerParameters(command=target.command or "", args=list(target.args),
                                           env=dict(target.env) or None, cwd=target.cwd)
            pids: list[int] = children if children is not None else []
            # Registered before stdio_client (exit stacks unwind LIFO): it runs after the SDK's
            # own shutdown and kills whatever is left of the child's process group.
            stack.callback(kill_process_groups, pids)
            async with _spawn_lock():
                before = _children()
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog or sys.stderr))
                pids.extend(sorted(_children() - before))
        kwargs: Json = {}
        if elicitation_callback is not None:
            kwargs["elicitation_callback"] = elicitation_callback
        if message_handler is not None:
            kwargs["message_handler"] = message_handler
        session = await stack.enter_async_context(ClientSession(read, write, **kwargs))
        await session.initialize()
        yield session


def quiet_stdio_parse_errors() -> None:
    """Drop the SDKs' traceback for a child's non-JSON-RPC stdout line (the caller reports it
    once, from the session's message handler)."""
    import logging

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not record.getMessage().startswith("Failed to parse JSONRPC message")

    logger = logging.getLogger("mcp.client.stdio")
    if not any(type(f).__name__ == "_Drop" for f in logger.filters):
        logger.addFilter(_Drop())


#: What the SDKs' HTTP client transports log, with a traceback, when a remote server goes away
#: (both majors): the gateway says it once, in one line, when the session fails.
_HTTP_TRANSPORT_NOISE = ("Error in sse_reader", "Error in post_writer", "Encountered SSE exception",
                         "Session termination failed")


def quiet_http_transport_errors() -> None:
    """Drop the SDKs' tracebacks for a remote server that went away or refused a request (a
    killed server, a 401): they would reach this process's stderr through logging's
    last-resort handler, once per task, while the caller already reports the failure."""
    import logging

    class _DropHttp(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not record.getMessage().startswith(_HTTP_TRANSPORT_NOISE)

    for name in ("mcp.client.sse", "mcp.client.streamable_http"):
        logger = logging.getLogger(name)
        if not any(type(f).__name__ == "_DropHttp" for f in logger.filters):
            logger.addFilter(_DropHttp())


def bad_line(exc: BaseException) -> str | None:
    """The offending stdout line of a child, from the parse error the SDK delivers."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return str(errors()[0].get("input"))[:80]
        except Exception:  # any shape: no line to show
            return None
    return None


def server_capabilities(session: Any) -> Json:
    """The server's capabilities as a wire dict."""
    caps = session.server_capabilities if sdk_major() >= 2 else session.get_server_capabilities()
    return wire(caps) if caps is not None else {}


LIST_KINDS = ("tools", "resources", "resourceTemplates", "prompts")


async def list_all(session: Any, kind: str, max_pages: int = 1000) -> list[Json]:
    """Every item of ``tools``/``resources``/``resourceTemplates``/``prompts``, all pages,
    as wire dicts."""
    meth = {"tools": session.list_tools, "resources": session.list_resources,
            "resourceTemplates": session.list_resource_templates, "prompts": session.list_prompts}[kind]
    t = types()
    out: list[Json] = []
    cursor = None
    for _ in range(max_pages):
        page = wire(await meth(params=t.PaginatedRequestParams(cursor=cursor) if cursor else None))
        out.extend(page.get(kind, []))
        cursor = page.get("nextCursor")
        if not cursor:
            return out
    raise RuntimeError(f"the server returned more than {max_pages} pages of {kind}")


def notification_method(message: Any) -> str | None:
    """The method of a server notification delivered to a message handler (else None)."""
    try:
        data = wire(message)
    except Exception:  # requests and errors are not notifications
        return None
    return data.get("method") if isinstance(data, dict) else None


# -- server side ----------------------------------------------------------------------------------
@dataclass
class Handlers:
    """What a server answers, in wire dicts, independent of the SDK's major.
    ``call_tool(name, arguments, call)`` gets a :class:`CallCtx`; a handler left None is not
    advertised. ``read_resource(uri, session_key, client)`` and ``get_prompt(name, arguments,
    session_key, client)`` are told whose read it is (the session, and the client the gate
    identified: its policy judges the read); both raise :class:`LookupError` for an unknown
    URI or name."""

    list_tools: Callable[[], Awaitable[list[Json]]]
    call_tool: Callable[[str, Json, CallCtx], Awaitable[Any]]
    list_resources: Callable[[], Awaitable[list[Json]]] | None = None
    list_resource_templates: Callable[[], Awaitable[list[Json]]] | None = None
    read_resource: Callable[[str, str, Json | None], Awaitable[Json]] | None = None
    list_prompts: Callable[[], Awaitable[list[Json]]] | None = None
    get_prompt: Callable[[str, dict[str, str] | None, str, Json | None], Awaitable[Json]] | None = None


CONFIRM_KEY = "riskrank/confirm"
CONFIRM_SCHEMA: Json = {"type": "object", "properties": {"approve": {"type": "boolean", "title": "Approve this call"}},
                        "required": ["approve"]}


class InputRequired(Exception):
    """Raised by :meth:`CallCtx.confirm` on a 2026-07-28 connection: the handler answers an
    ``InputRequiredResult``; the client asks its user and retries the same call."""

    def __init__(self, result: Any) -> None:
        super().__init__("input required")
        self.result = result


class _ConfirmTokens:
    """The ``request_state`` of a 2026-07-28 confirmation: a nonce, an expiry and an HMAC over
    both and what is being confirmed. A retry counts only with a state this process signed
    for that very call, before it expired, and once: a client cannot pre-seed "accept" for a
    question it was never asked, nor replay an answer for a later identical call."""

    def __init__(self, ttl_s: float = 300.0) -> None:
        self.key = secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self.used: dict[str, float] = {}

    def _mac(self, bind: str, nonce: str, expires: int) -> str:
        return hmac.new(self.key, f"{bind}\x00{nonce}\x00{expires}".encode(), hashlib.sha256).hexdigest()

    def issue(self, bind: str) -> str:
        nonce, expires = secrets.token_hex(12), int(time.time() + self.ttl_s)
        return f"{nonce}.{expires}.{self._mac(bind, nonce, expires)}"

    def redeem(self, bind: str, state: Any) -> bool:
        if not isinstance(state, str) or state.count(".") != 2:
            return False
        nonce, expires_s, mac = state.split(".")
        try:
            expires = int(expires_s)
        except ValueError:
            return False
        now = time.time()
        self.used = {n: t for n, t in self.used.items() if t > now}
        if expires < now or nonce in self.used or not hmac.compare_digest(mac, self._mac(bind, nonce, expires)):
            return False
        self.used[nonce] = expires
        return True


_TOKENS = _ConfirmTokens()


class CallerLink:
    """Whether the caller of one request can still receive its answer: left (``left_at``,
    ``how``) once its HTTP connection closed (the ASGI disconnect), a write to it failed, or
    stdin reached its end. A call held for confirmation waits on :attr:`event` beside the
    decision, so a gone caller's hold is withdrawn at once rather than run for nobody."""

    def __init__(self, how: str) -> None:
        import anyio

        self.how = how
        self.left_at: float | None = None
        self.event = anyio.Event()

    @property
    def gone(self) -> bool:
        return self.left_at is not None

    def leave(self, how: str | None = None) -> None:
        if self.left_at is None:
            self.left_at = time.time()
            self.how = how or self.how
            self.event.set()

    def describe(self) -> str:
        """``the agent disconnected at 2026-12-06T03:40:12Z (its HTTP connection closed)``."""
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.left_at or time.time()))
        return f"the agent disconnected at {at} ({self.how})"


#: The one caller of a stdio server: gone when stdin reaches its end.
_STDIO_LINK: list[CallerLink] = []


def _stdio_link() -> CallerLink | None:
    return _STDIO_LINK[0] if _STDIO_LINK else None


def watch_callers(app: Any) -> Any:
    """``app`` with a :class:`CallerLink` on each HTTP request's scope (``riskrank.link``).
    Once the request's body is read, the real ``receive`` is watched here for the
    disconnect (the app's later reads wait for it too), and a ``send`` that fails marks the
    caller gone; a disconnect after the response ended is no leaving."""
    import anyio

    async def watched(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        link = CallerLink("its HTTP connection closed")
        scope["riskrank.link"] = link
        state = {"read": False, "done": False}

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not state["done"]:
                        link.leave()
                    return

        async def app_receive() -> dict:
            if state["read"]:
                await link.event.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                link.leave()
            elif not message.get("more_body", False):
                state["read"] = True
                tg.start_soon(watch)
            return message

        async def app_send(message: dict) -> None:
            try:
                await send(message)
            except Exception:
                link.leave("a write to its stream failed")
                raise
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                state["done"] = True

        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            try:
                await app(scope, app_receive, app_send)
            except Exception as exc:  # raised as the app raised it, not wrapped in the task group's group
                failed = exc
            finally:
                tg.cancel_scope.cancel()
        if failed is not None:
            raise failed

    return watched


class CallCtx:
    """What a tool handler needs of the call, from either SDK's request context: who is
    calling (``session_key``), a progress sender for the caller's token, and a confirmation
    through MCP elicitation."""

    def __init__(self, session: Any, request_id: Any, progress_token: Any, capabilities: Any, *,
                 protocol_version: str | None = None, params: Any = None, session_key: str = "stdio",
                 client: dict[str, Any] | None = None, host_task: tuple[Any, str] | None = None,
                 host_user: tuple[Any, str] | None = None, link: CallerLink | None = None,
                 traceparent: str | None = None, host_task_meta: tuple[Any, str] | None = None) -> None:
        self.session, self.request_id, self.progress_token = session, request_id, progress_token
        #: Whether the caller can still receive this call's answer (None: nothing watches it).
        self.link = link
        self.capabilities, self.protocol_version, self.params = capabilities, protocol_version, params
        self.session_key = session_key
        #: Who the gate found the caller to be (``name``, ``policy``, ``via``; see
        #: :mod:`riskrank.serving.auth`); None over stdio.
        self.client = client
        #: The session's task as the host application set it, and where from (``header``:
        #: :data:`TASK_HEADER`; ``meta``: :data:`TASK_META` of this request's or the
        #: ``initialize`` request's ``_meta``); None when the host set none. The value is what
        #: was sent (the gateway checks it).
        self.host_task = host_task
        #: The ``_meta`` task of the request (or of ``initialize``) when the header set
        #: :attr:`host_task`: read only to say that it was ignored.
        self.host_task_meta = host_task_meta
        #: The user's latest turn as the host passed it with this request (:data:`USER_HEADER`,
        #: :data:`USER_META`), and where from; None when it passed none.
        self.host_user = host_user
        #: The caller's W3C trace context (:data:`TRACEPARENT`), as sent: the gateway's spans
        #: continue its trace when it is well formed, and ignore it otherwise.
        self.traceparent = traceparent

    @property
    def wants_progress(self) -> bool:
        return self.progress_token is not None

    @property
    def can_elicit(self) -> bool:
        caps = self.capabilities
        return caps is not None and getattr(caps, "elicitation", None) is not None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send one progress step to the caller (nothing when it sent no token)."""
        if self.progress_token is None:
            return
        if sdk_major() >= 2:  # request-scoped: the SDK stamps the caller's token itself
            await self.session.report_progress(progress, total, message)
        else:
            await self.session.send_progress_notification(
                self.progress_token, progress, total, message, related_request_id=self.request_id)

    async def confirm(self, message: str, bind: str, details: str | None = None) -> str:
        """Ask the client's user; ``accept``, ``decline``, ``cancel`` or ``unsupported`` (the
        client declared no elicitation). ``bind`` names what is confirmed (session, tool,
        arguments): on 2026-07-28 an answer counts only with the state signed for it.
        ``details`` (the call's arguments in full) is a read-only text field of the form;
        what the user types into it is ignored."""
        if not self.can_elicit:
            return "unsupported"
        schema = CONFIRM_SCHEMA
        if details is not None:
            schema = {**CONFIRM_SCHEMA, "properties": {**CONFIRM_SCHEMA["properties"], "arguments": {
                "type": "string", "title": "The call's arguments in full (read only)", "default": details}}}
        if self.protocol_version in MODERN_PROTOCOLS:
            answers = getattr(self.params, "input_responses", None) or {}
            if CONFIRM_KEY in answers and _TOKENS.redeem(bind, getattr(self.params, "request_state", None)):
                answer = wire(answers[CONFIRM_KEY])
            else:
                req = {"method": "elicitation/create",
                       "params": {"mode": "form", "message": message, "requestedSchema": schema}}
                raise InputRequired(types().InputRequiredResult.model_validate(
                    {"resultType": "input_required", "inputRequests": {CONFIRM_KEY: req}, "requestState": _TOKENS.issue(bind)}))
        else:
            # Positional schema: the keyword is requestedSchema in 1.x, requested_schema in 2.x.
            answer = wire(await self.session.elicit_form(message, schema, related_request_id=self.request_id))
        action = answer.get("action", "cancel")
        if action == "accept" and (answer.get("content") or {}).get("approve") is not True:
            return "decline"
        return str(action)


def _header(request: Any, name: str) -> str | None:
    headers = getattr(request, "headers", None)
    return headers.get(name) if headers is not None else None


#: The HTTP header (streamable HTTP) a host application sets the session's task with; its
#: value is percent-decoded (UTF-8), so any text fits an ASCII header.
TASK_HEADER = "x-riskrank-task"
#: The ``_meta`` key of a request (or of ``initialize``) that does the same on any transport.
TASK_META = "riskrank/task"
#: The header and the ``_meta`` key (of one request) a host passes the user's latest turn with:
#: the user's own words after the task (the tools they need join the session's scope).
USER_HEADER = "x-riskrank-user"
USER_META = "riskrank/user"


#: The header and the ``_meta`` key a host names a conversation with on the 2026-07-28 protocol,
#: which has no MCP sessions: each name is a session of its own (its anchor, scope, flow record
#: and approvals) within the caller's token. Without one, every conversation of one token is
#: one session.
SESSION_HEADER = "x-riskrank-session"
SESSION_META = "riskrank/session"


#: The W3C trace-context header (and ``_meta`` key) an agent framework continues its trace with.
TRACEPARENT = "traceparent"


def _meta_value(meta: Any, key: str) -> Any:
    """``key`` of a request's ``_meta``: a dict in 2.x, a pydantic model with extra fields in 1.x."""
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get(key)
    return (getattr(meta, "model_extra", None) or {}).get(key)


def host_task(request: Any, params: Any, session: Any, *, header: str = TASK_HEADER, key: str = TASK_META,
              initialize: bool = True) -> tuple[Any, str] | None:
    """The task a host application set for the session: the :data:`TASK_HEADER` header, else
    :data:`TASK_META` in this request's ``_meta``, else in the ``initialize`` request's
    (``header``, ``key``, ``initialize``: the same for the user's turn, which only a request carries)."""
    found = _header(request, header) if request is not None else None
    if found is not None:
        from urllib.parse import unquote

        return unquote(found, errors="surrogateescape"), "header"  # bytes that are not UTF-8 stay visible, and are refused
    value = _meta_value(getattr(params, "meta", None), key)
    if value is None and initialize:
        init = getattr(session, "client_params", None)
        value = _meta_value(getattr(init, "meta", None), key)
    return (value, "meta") if value is not None else None


def host_user(request: Any, params: Any) -> tuple[Any, str] | None:
    """The user's latest turn a host passed with this request (:data:`USER_HEADER`, :data:`USER_META`)."""
    return host_task(request, params, None, header=USER_HEADER, key=USER_META, initialize=False)


def traceparent(request: Any, params: Any) -> str | None:
    """The caller's ``traceparent``: the HTTP header, else this request's ``_meta`` (any
    transport); a value that is not a string is none."""
    found = _header(request, TRACEPARENT) if request is not None else None
    if found is None:
        found = _meta_value(getattr(params, "meta", None), TRACEPARENT)
    return found if isinstance(found, str) else None


def _client(request: Any) -> dict[str, Any] | None:
    """The identity the gate put on the request's ASGI scope (None over stdio)."""
    scope = getattr(request, "scope", None)
    return scope.get("riskrank.client") if isinstance(scope, dict) else None


def _link(request: Any) -> CallerLink | None:
    """The caller's :class:`CallerLink`: the HTTP request's (:func:`watch_callers`), else stdio's."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        return scope.get("riskrank.link")
    return _stdio_link() if request is None else None


def _session_key(request: Any, modern: bool, params: Any = None) -> str:
    """Whose call: one client per process over stdio (no HTTP request); over streamable HTTP
    the MCP session id, and on 2026-07-28 (no sessions) the bearer token's digest, with the
    conversation the host names (:data:`SESSION_HEADER` or :data:`SESSION_META`) when it
    names one. A named client's key starts with its whole identity (a clients-file name, or
    an OAuth ``ISSUER#SUBJECT``, which can never be one): a session id presented with another
    client's token is another key (one client cannot call through what another's find_tools
    exposed), and a conversation name is one within its token's key."""
    if request is None:
        return "stdio"
    who = (_client(request) or {}).get("name")
    prefix = f"{who}/" if who else ""
    sid = _header(request, "mcp-session-id")
    if sid and not modern:
        return f"{prefix}http-{sid}"
    auth = _header(request, "authorization")
    key = prefix + ("token-" + hashlib.sha256(auth.encode()).hexdigest()[:16] if auth else "http-anonymous")
    conversation = _header(request, SESSION_HEADER)
    if conversation is None:
        conversation = _meta_value(getattr(params, "meta", None), SESSION_META)
    if conversation is None:
        return key
    named = conversation if isinstance(conversation, str) else json.dumps(conversation, sort_keys=True, default=str)
    return f"{key}/conv-{hashlib.sha256(named.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def build_server(name: str, version: str, instructions: str | None, handlers: Handlers, *, title: str | None = None) -> Any:
    """A low-level ``mcp.server.lowlevel.Server`` answering ``handlers``, for either major."""
    if sdk_major() >= 2:
        return _build_v2(name, version, instructions, handlers, title)
    return _build_v1(name, version, instructions, handlers)


def _not_found(exc: LookupError) -> Exception:
    """The protocol error (invalid params) for an unknown resource URI or prompt name."""
    t = types()
    text = str(exc.args[0]) if exc.args else str(exc)
    if sdk_major() >= 2:
        from mcp.shared.exceptions import MCPError

        return MCPError(t.INVALID_PARAMS, text)
    from mcp.shared.exceptions import McpError

    return McpError(t.ErrorData(code=t.INVALID_PARAMS, message=text))


#: The pass-through requests that are a session's reads (told whose call it is: what they bring
#: the agent is an untrusted read, judged under the caller's policy).
_READS = ("read_resource", "get_prompt")


def _passthrough(h: Handlers) -> list[tuple[str, Any, Any, Any]]:
    """(kind, handler, result model, how to call it) for each pass-through handler given: a
    listing answers ``{key: items}``, a lookup takes arguments read from the request params."""
    t = types()
    table = [
        ("list_resources", h.list_resources, t.ListResourcesResult, "resources"),
        ("list_resource_templates", h.list_resource_templates, t.ListResourceTemplatesResult, "resourceTemplates"),
        ("read_resource", h.read_resource, t.ReadResourceResult, lambda p: (str(p.uri),)),
        ("list_prompts", h.list_prompts, t.ListPromptsResult, "prompts"),
        ("get_prompt", h.get_prompt, t.GetPromptResult, lambda p: (p.name, p.arguments)),
    ]
    return [row for row in table if row[1] is not None]


def _handler(fn: Any, res_cls: Any, how: Any, params_of: Callable[[Any], Any],
             caller_of: Callable[[Any, Any], tuple[str, Json | None]] | None = None) -> Any:
    """A ``(ctx, request) -> result`` handler for one pass-through row of :func:`_passthrough`
    (``params_of`` reads the params from what the SDK hands over; ``caller_of``, where given,
    whose call it is (:func:`_session_key` and the client the gate identified), passed last: a
    resource read or a prompt is a session's read, judged under its client's policy)."""
    async def handler(ctx: Any, request: Any) -> Any:
        if isinstance(how, str):
            return res_cls.model_validate({how: await fn()})
        try:
            params = params_of(request)
            args = how(params) + (caller_of(ctx, params) if caller_of is not None else ())
            return res_cls.model_validate(await fn(*args))
        except LookupError as exc:
            raise _not_found(exc) from None
    return handler


def _build_v2(name: str, version: str, instructions: str | None, h: Handlers, title: str | None) -> Any:
    from mcp.server.lowlevel import Server

    t = types()

    def token(params: Any) -> Any:
        meta = getattr(params, "meta", None)  # a TypedDict keyed by python names in 2.x
        return meta.get("progress_token") if meta else None

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return t.ListToolsResult.model_validate({"tools": await h.list_tools()})

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        modern = ctx.protocol_version in MODERN_PROTOCOLS
        call = CallCtx(ctx.session, ctx.request_id, token(params), ctx.session.client_capabilities,
                       protocol_version=ctx.protocol_version, params=params, session_key=_session_key(ctx.request, modern, params),
                       client=_client(ctx.request), host_task=host_task(ctx.request, params, ctx.session),
                       host_user=host_user(ctx.request, params), link=_link(ctx.request),
                       traceparent=traceparent(ctx.request, params), host_task_meta=host_task(None, params, ctx.session))
        try:
            return as_call_result(await h.call_tool(params.name, params.arguments or {}, call))
        except InputRequired as ir:
            return ir.result

    kw: Json = {"on_list_tools": on_list_tools, "on_call_tool": on_call_tool}
    def caller_v2(ctx: Any, params: Any) -> tuple[str, Json | None]:
        return _session_key(ctx.request, ctx.protocol_version in MODERN_PROTOCOLS, params), _client(ctx.request)

    for kind, fn, res_cls, how in _passthrough(h):
        kw[f"on_{kind}"] = _handler(fn, res_cls, how, lambda params: params, caller_v2 if kind in _READS else None)
    return Server(name, version=version, title=title, instructions=instructions, **kw)


def _build_v1(name: str, version: str, instructions: str | None, h: Handlers) -> Any:
    from mcp.server.lowlevel import Server

    t = types()
    server = Server(name, version=version, instructions=instructions)
    # Raw handlers: the request model in, a ServerResult out, nothing reshaped (the decorator
    # forms would drop blobs and _meta of passed-through resources). 1.x advertises resources
    # and prompts exactly when their request classes are keys here.
    R = server.request_handlers

    async def list_tools(req: Any) -> Any:
        return t.ServerResult(t.ListToolsResult.model_validate({"tools": await h.list_tools()}))

    async def call_tool(req: Any) -> Any:
        rc = server.request_context
        token = getattr(rc.meta, "progressToken", None) if rc.meta is not None else None
        caps = rc.session.client_params.capabilities if rc.session.client_params else None
        call = CallCtx(rc.session, rc.request_id, token, caps, params=req.params,
                       session_key=_session_key(rc.request, False, req.params), client=_client(rc.request),
                       host_task=host_task(rc.request, req.params, rc.session), host_user=host_user(rc.request, req.params),
                       link=_link(rc.request), traceparent=traceparent(rc.request, req.params),
                       host_task_meta=host_task(None, req.params, rc.session))
        return t.ServerResult(as_call_result(await h.call_tool(req.params.name, req.params.arguments or {}, call)))

    R[t.ListToolsRequest] = list_tools
    R[t.CallToolRequest] = call_tool

    requests = {"list_resources": t.ListResourcesRequest, "list_resource_templates": t.ListResourceTemplatesRequest,
                "read_resource": t.ReadResourceRequest, "list_prompts": t.ListPromptsRequest, "get_prompt": t.GetPromptRequest}
    def caller_v1(ctx: Any, params: Any) -> tuple[str, Json | None]:
        request = server.request_context.request
        return _session_key(request, False, params), _client(request)

    for kind, fn, res_cls, how in _passthrough(h):
        handler = _handler(fn, res_cls, how, lambda req: req.params, caller_v1 if kind in _READS else None)

        async def wrapped(req: Any, handler: Any = handler) -> Any:
            return t.ServerResult(await handler(None, req))

        R[requests[kind]] = wrapped
    return server


class CancellableStdin:
    """Lines of a file descriptor read with ``wait_readable`` + ``os.read``, so a cancel (a
    signal handler stopping the server) ends the read; ``stdio_server(stdin=...)`` takes any
    async iterator of lines in both majors."""

    def __init__(self, fd: int = 0) -> None:
        self.fd, self.buf = fd, b""
        os.set_blocking(fd, False)

    def __aiter__(self) -> CancellableStdin:
        return self

    async def __anext__(self) -> str:
        import anyio

        while b"\n" not in self.buf:
            await anyio.wait_readable(self.fd)
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                if (link := _stdio_link()) is not None:
                    link.leave("its stdin closed")
                if self.buf:
                    line, self.buf = self.buf, b""
                    return line.decode("utf-8", "replace")
                raise StopAsyncIteration
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"


def _pollable(fd: int) -> bool:
    import stat

    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


async def serve_stdio(server: Any) -> None:
    """Serve ``server`` on this process's stdin/stdout until the client closes stdin or the
    task is cancelled."""
    from mcp.server.stdio import stdio_server

    _STDIO_LINK[:] = [CallerLink("its stdin closed")]
    stdin = CancellableStdin() if _pollable(0) else None
    try:
        async with stdio_server(stdin=stdin) as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        _STDIO_LINK[0].leave()


#: What each method's ``params`` must hold, checked before the SDK reads a request: (field, a
#: description of it) for the fields that must be strings, and those that must be objects
#: when present.
_PARAM_STRINGS = {"tools/call": ("name", "the tool's name"), "resources/read": ("uri", "the resource's URI"),
                  "prompts/get": ("name", "the prompt's name")}
_PARAM_OBJECTS = {"tools/call": "arguments", "prompts/get": "arguments"}


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def envelope_error(message: Any) -> tuple[int, str] | None:
    """What is wrong with one JSON-RPC request's ``params`` (HTTP status, message), or None.
    The SDKs answer such a request with their validation library's whole report (every union
    member it tried, with links) or with "Invalid request parameters" and nothing to say which;
    this names the field. A well-formed response to a request of the server's is left to the
    SDK, and so is a body that is not JSON (its "Parse error" names the place)."""
    if not isinstance(message, dict):
        return 400, f"the body must be one JSON-RPC message (a JSON object), got {_json_kind(message)}"
    if "method" not in message and ("result" in message or "error" in message):  # a response to the server's request
        rid = message.get("id")
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            return 400, f"a response's id must be a string or an integer, got {_json_kind(rid) if 'id' in message else 'nothing'}"
        return None
    if message.get("jsonrpc") != "2.0":
        return 400, 'jsonrpc must be "2.0"'
    if not isinstance(message.get("method"), str):
        return 400, f"method must be a string (the request's name), got {_json_kind(message.get('method')) if 'method' in message else 'nothing'}"
    if "id" in message and (isinstance(message["id"], bool) or not isinstance(message["id"], (str, int))):
        return 400, f"{message['method']}: id must be a string or an integer, got {_json_kind(message['id'])}"
    method, params = message["method"], message.get("params")
    if params is not None and not isinstance(params, dict):  # null is absent, as the SDK reads it
        return 400, f"{method}: params must be a JSON object, got {_json_kind(params)}"
    if not isinstance(params, dict):
        return None
    if params.get("_meta") is not None and not isinstance(params["_meta"], dict):
        return 200, f"{method}: params._meta must be a JSON object, got {_json_kind(params['_meta'])}"
    if method in _PARAM_STRINGS:
        key, what = _PARAM_STRINGS[method]
        if not isinstance(params.get(key), str):
            got = "nothing" if key not in params else _json_kind(params[key])
            return 200, f"{method}: params.{key} must be a string ({what}), got {got}"
    key = _PARAM_OBJECTS.get(method)
    if key is not None and params.get(key) is not None and not isinstance(params[key], dict):
        return 200, f"{method}: params.{key} must be a JSON object, got {_json_kind(params[key])}"
    return None


def checked_envelopes(app: Any) -> Any:
    """``app`` (the streamable HTTP endpoint) behind :func:`envelope_error`: a POSTed body that
    is no JSON-RPC message (-32600, "invalid request", HTTP 400), or a request whose ``params``
    are malformed (-32602, "invalid params"), is answered here with an error naming the field,
    and never reaches the SDK. The body, already bounded by the
    gate, is read once and replayed to ``app`` unchanged."""
    import json

    async def checked(scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope.get("method") != "POST" or (path != "/mcp" and not path.startswith("/mcp/")):
            await app(scope, receive, send)
            return
        chunks, first = [], None
        while True:
            first = await receive()
            if first["type"] != "http.request":
                break
            chunks.append(first.get("body", b""))
            if not first.get("more_body", False):
                break
        body = b"".join(chunks)
        problem, rid = None, None
        parsed: Any = None
        try:
            parsed = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):
            body_is_json = False
        else:
            body_is_json = bool(body.strip())
        if body_is_json:  # not JSON: the SDK's own "Parse error" names the place
            problem, rid = envelope_error(parsed), parsed.get("id") if isinstance(parsed, dict) else None
        # a body the SDK cannot read as a message is answered (as the SDK answers it, 400, before
        # it looks for a session); a request with bad params only within a session (without
        # one, on the earlier protocols, the SDK's "Missing session ID" stands), and a
        # notification not at all (its 202)
        headers = {bytes(k).lower(): bytes(v) for k, v in scope.get("headers") or ()}
        version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
        # within a session, or on a protocol that has none (2026-07-28: no session id to miss)
        in_session = b"mcp-session-id" in headers or version in MODERN_PROTOCOLS
        if problem is not None and (problem[0] == 400 or (in_session and isinstance(parsed, dict) and "id" in parsed)):
            status, text = problem
            payload = json.dumps({"jsonrpc": "2.0", "id": rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None,
                                  "error": {"code": -32600 if status == 400 else -32602, "message": text}}).encode()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False} if first["type"] == "http.request" else first
            return await receive()

        await app(scope, replay, send)

    return checked


def streamable_http_app(server: Any, host: str = "127.0.0.1", path: str = "/mcp") -> Any:
    """``server`` over streamable HTTP at ``path`` (an ASGI app with its session manager in the
    lifespan); DNS-rebinding protection on for loopback hosts, as the SDK does."""
    if sdk_major() >= 2:
        return server.streamable_http_app(streamable_http_path=path, host=host)
    import contextlib

    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Mount

    security = None
    if host in LOOPBACK:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    manager = StreamableHTTPSessionManager(app=server, security_settings=security)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Mount(path, app=manager.handle_request)], lifespan=lifespan)
