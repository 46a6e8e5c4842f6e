"""The upstream MCP servers of a gateway: started together, watched, restarted, merged.

:class:`UpstreamManager` runs one supervisor task per server:

- **start**: the connection (a child process over stdio, or a URL over streamable HTTP or
  SSE, with its headers and TLS choice), ``initialize`` and the listing of its tools,
  resources, resource templates and prompts must finish within ``startup_timeout`` seconds,
  else one line says which server did not answer (the first start of every server must
  succeed: a gateway never serves with a server silently missing). A child's stderr goes
  into a small ring buffer, never onto this process's stdio (the stdio transport), and its
  last line explains a failed start.
- **watch**: a ping every ``ping_interval`` seconds; ``notifications/*/list_changed`` from the
  server re-lists it at once.
- **restart**: a server that stops answering is marked down (its tools leave the catalogue
  at once) and restarted after 0.5 s, doubling up to 30 s (back to 0.5 s after 60 s up). A
  URL server is the same: a remote server that goes away (its event stream closes, a ping
  cannot connect) is down, and reconnected on the same schedule until it answers again.
- **stop**: cancelling the manager's task shuts every session down through the SDK and then
  kills what is left of each child's process group (no orphans, npx's grandchildren
  included).

Names: a tool (or prompt) keeps its own name unless another server lists the same one, or the
name is outside MCP's tool-name alphabet (:data:`MCP_NAME`: 1-128 ASCII letters, digits, ``_``,
``-`` and ``.``); then it is offered as ``SERVER__NAME`` (:func:`public_name`, cleaned and
hashed where needed), a safe alias, and its own name is kept in its route for the operator (the
console shows it; the agent never sees it). Collisions are computed over every tool a server
has ever listed, so names do not change while a server restarts.
Resources keep their URIs (the first server in the file wins a shared URI).
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.serving import mcp_compat
from riskrank.serving.gateway.config import UpstreamConfig, remote_warnings
from riskrank.timeline import mark

_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")
#: A tool name as MCP's specification lets a client rely on it (what an agent may be shown as is).
MCP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MAX_PUBLIC_NAME = 64
BACKOFF_START_S, BACKOFF_MAX_S, HEALTHY_RESET_S = 0.5, 30.0, 60.0
STDERR_LINES = 20


class UpstreamError(RiskrankError):
    """An upstream server that did not start (the gateway's one-line start-up error)."""

    code = "upstream_failed"


class _Lost(Exception):
    """A started upstream stopped answering (restart it)."""


def public_name(server: str, name: str) -> str:
    """``server__name``; outside the OpenAI function-name alphabet or over 64 characters, a
    cleaned, cut form with a hash of the full name (so it stays unique)."""
    raw = f"{server}__{name}"
    if len(raw) <= MAX_PUBLIC_NAME and not _NOT_NAME.search(raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return _NOT_NAME.sub("_", raw)[: MAX_PUBLIC_NAME - 9] + "_" + digest


def public_names(listed: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], str]:
    """(server, name) -> the name a gateway offers, for the names each server lists: its own
    when no other server lists it and it is within :data:`MCP_NAME`, else :func:`public_name`."""
    lists = {server: list(dict.fromkeys(names)) for server, names in listed.items()}
    count = collections.Counter(n for names in lists.values() for n in names)
    return {(server, n): (n if count[n] == 1 and MCP_NAME.match(n) else public_name(server, n))
            for server, names in lists.items() for n in names}


def leaf(exc: BaseException) -> BaseException:
    """The first innermost exception of an exception group (the SDKs' task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """One line for a transport failure, the same words for both SDK majors."""
    import anyio

    exc = leaf(exc)
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | EOFError) \
            or str(exc) == "Connection closed":
        return "the connection closed (did the process exit?)"
    if type(exc).__name__ == "ValidationError":  # pydantic: a message that is not JSON-RPC, or an answer off MCP's schema
        first = next(iter(getattr(exc, "errors", list)() or []), {})
        where = ".".join(str(p) for p in first.get("loc", ()))
        if "JSONRPC" not in str(getattr(exc, "title", "JSONRPC")) and where:
            return (f"it answered in JSON-RPC, but not in MCP's schema: {getattr(exc, 'title', 'the result')} "
                    f"{where}: {str(first.get('msg', 'invalid'))[:120]}")
        return "its stdout is not MCP JSON-RPC (is it an MCP server?)"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if type(exc).__name__ == "HTTPStatusError" and isinstance(status, int):
        # The status, not httpx's sentence: that one names the full URL (a query can hold a token).
        return refused(status, str(getattr(exc.response, "reason_phrase", "") or ""))  # type: ignore[attr-defined]
    text = (str(exc) or type(exc).__name__).strip().splitlines()
    line = text[0][:200] if text else type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in line:
        line += " (its certificate is not trusted: tls.ca_file names a private CA's certificates)"
    return line


#: What 2.x's streamable HTTP client makes of an HTTP error status it has no JSON-RPC error for.
_HTTP_STAND_IN = "Server returned an error response"


def refused(status: int, reason: str) -> str:
    """One line for a remote server's HTTP refusal; a 401 or 403 points at the credentials."""
    hint = " (are its headers or headersFromEnv right?)" if status in (401, 403) else ""
    return f"the server answered HTTP {status} {reason}".rstrip() + hint


@dataclass
class Upstream:
    """One upstream server's live state."""

    config: UpstreamConfig
    session: Any = None
    state: str = "starting"
    """``starting``, ``up`` or ``down``."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    known_tools: set[str] = field(default_factory=set)
    known_prompts: set[str] = field(default_factory=set)
    restarts: int = 0
    last_error: str = ""
    up_since: float = 0.0
    down_since: float = 0.0
    """When it last went down (monotonic; 0 when it never did): the log says how long it was away."""
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=STDERR_LINES))
    bad_stdout: str | None = None
    pids: list[int] = field(default_factory=list)
    http: mcp_compat.HttpTrace = field(default_factory=mcp_compat.HttpTrace)
    """A URL server's last HTTP status, which explains a failure the SDK reports without it."""

    @property
    def name(self) -> str:
        return self.config.name


class UpstreamManager:
    """Supervises the upstream servers (module docstring). ``log(line)`` receives one line
    per event; ``on_change()`` is called whenever the set of live tools may have changed."""

    def __init__(self, configs: list[UpstreamConfig], *, startup_timeout: float = 30.0, ping_interval: float = 2.0,
                 log: Callable[[str], None] = print, on_change: Callable[[], None] = lambda: None,
                 left_out: Iterable[str] = ()) -> None:
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise UpstreamError(f"two upstream servers are named {sorted({n for n in names if names.count(n) > 1})[0]!r}")
        self.upstreams = {c.name: Upstream(c) for c in configs}
        #: The servers file's entries the gateway left out at start (a bad entry: the start-up
        #: warning says why): ``find_tools`` names them, so the agent knows they are missing.
        self.left_out = sorted(set(left_out))
        self.startup_timeout, self.ping_interval = startup_timeout, ping_interval
        self.log, self.on_change = log, on_change
        self.generation = 0
        mcp_compat.quiet_stdio_parse_errors()
        mcp_compat.quiet_http_transport_errors()

    # -- lifecycle ----------------------------------------------------------------------------
    async def run(self, *, task_status: Any = None) -> None:
        """Start every server in parallel; ``task_status.started()`` once each is up or has
        failed to start (when every one failed, :class:`UpstreamError` with the first reason;
        otherwise the failed ones are logged and retried with backoff); then supervise until
        cancelled."""
        import anyio

        for up in self.upstreams.values():  # an exposed remote server is said once, at start
            for line in remote_warnings(up.config):
                self.log(line)
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as starting:
                for up in self.upstreams.values():
                    starting.start_soon(tg.start, self._supervise, up)
            failed = [u for u in self.upstreams.values() if u.state != "up"]
            if len(failed) == len(self.upstreams):  # nothing to serve: the first reason, as one error
                raise UpstreamError(failed[0].last_error)
            for u in failed:  # one bad server does not deny the others
                self.log(f"warning: {u.last_error}; the gateway starts without it and retries it with backoff")
            if task_status is not None:
                task_status.started()

    def _changed(self) -> None:
        self.generation += 1
        self.on_change()

    async def _supervise(self, up: Upstream, *, task_status: Any) -> None:
        import anyio

        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        backoff = BACKOFF_START_S
        while True:
            try:
                await self._connect_once(up, ready)
            except BaseException as group:
                exc = leaf(group)
                if not isinstance(exc, UpstreamError | _Lost):
                    raise
                up.down_since = up.down_since or time.monotonic()
                if not started:  # the first start failed: run() decides whether the others serve
                    up.state, up.session, up.last_error = "down", None, str(exc)
                    ready()
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
                was_up = up.state == "up"
                up.state, up.session, up.last_error = "down", None, str(exc)
                if was_up:
                    self._changed()
                if up.up_since and time.monotonic() - up.up_since > HEALTHY_RESET_S:
                    backoff = BACKOFF_START_S
                up.up_since = 0.0
                up.restarts += 1
                self.log(f"{exc}; restart {up.restarts} in {backoff:g} s")
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _connect_once(self, up: Upstream, ready: Callable[[], None]) -> None:
        """One life of an upstream: connect and list within the start-up timeout, then answer
        pings until it stops. The deadline is a cancel scope around the whole life, disarmed
        once listed (a timeout around entering the session alone would leave a cancel scope
        while the SDK's task groups inside it are open)."""
        import anyio

        what = up.config.target.describe()
        changed = anyio.Event()
        box = [changed]
        up.bad_stdout = None
        up.stderr_tail.clear()
        up.http = mcp_compat.HttpTrace()

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):
                up.bad_stdout = up.bad_stdout or mcp_compat.bad_line(message)
                return
            method = mcp_compat.notification_method(message)
            if method in ("notifications/tools/list_changed", "notifications/resources/list_changed",
                          "notifications/prompts/list_changed"):
                box[0].set()

        def why(exc: BaseException) -> str:
            status = up.http.status
            if str(leaf(exc)) == _HTTP_STAND_IN and status is not None and status >= 400:
                return refused(status, up.http.reason)
            text = (f"it printed {up.bad_stdout!r}, which is not MCP JSON-RPC (is it an MCP server?)"
                    if up.bad_stdout else describe(exc))
            return text + (f"; its stderr ends: {up.stderr_tail[-1][:160]!r}" if up.stderr_tail else "")

        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w", buffering=1)
        up.pids = []
        # What ended this life, decided inside the scopes and raised outside them (an exception
        # raised inside a cancelled scope can be lost on the way out).
        failure: BaseException | None = None
        started = False
        try:
            async with anyio.create_task_group() as io:
                io.start_soon(self._read_stderr, read_fd, up)
                with anyio.CancelScope(deadline=anyio.current_time() + self.startup_timeout) as deadline:
                    try:
                        async with mcp_compat.open_session(up.config.target, errlog=errlog, message_handler=on_message,
                                                           children=up.pids, http_trace=up.http) as session:
                            await self._list(up, session)
                            deadline.deadline = float("inf")  # started: the rest of its life is unbounded
                            started = True
                            up.session, up.state, up.last_error, up.up_since = session, "up", "", time.monotonic()
                            self._changed()
                            away = f", back {time.monotonic() - up.down_since:.1f} s after it went down" if up.down_since else ""
                            up.down_since = 0.0
                            self.log(f"upstream {up.name!r}: up, {len(up.tools)} tools, {len(up.resources)} resources, "
                                     f"{len(up.prompts)} prompts{away}")
                            mark(f"upstream {up.name!r} spawned, initialized and listed its tools", once=True)
                            ready()
                            failure = await self._watch(up, session, changed_box=box, why=why)
                    except Exception as exc:  # one line for any failure to start or to answer
                        inner = leaf(exc)
                        failure = _Lost(f"upstream {up.name!r} stopped answering: {why(inner)}") if started else \
                            UpstreamError(f"upstream {up.name!r} ({what}) failed to start: {why(inner)}")
                io.cancel_scope.cancel()
        finally:
            errlog.close()
            os.close(read_fd)
        if deadline.cancelled_caught and not started:  # the timeout, whatever the SDK said while cancelled
            failure = UpstreamError(f"upstream {up.name!r} ({what}) did not answer initialize within {self.startup_timeout:g} s")
        if failure is not None:
            raise failure

    async def _watch(self, up: Upstream, session: Any, *, changed_box: list[Any], why: Callable[[BaseException], str]) -> _Lost:
        """Ping the upstream (and re-list it when it says its lists changed) until it stops
        answering; returns why it stopped."""
        import anyio

        while True:
            with anyio.move_on_after(self.ping_interval):
                await changed_box[0].wait()
            try:
                with anyio.fail_after(max(10.0, self.ping_interval)):
                    await session.send_ping()
                    if changed_box[0].is_set():
                        changed_box[0] = anyio.Event()
                        await self._list(up, session)
                        self._changed()
                        self.log(f"upstream {up.name!r}: lists changed, now {len(up.tools)} tools")
            except Exception as exc:  # any failure: it is down
                return _Lost(f"upstream {up.name!r} stopped answering: {why(exc)}")

    async def _read_stderr(self, fd: int, up: Upstream) -> None:
        """Keep the last lines of a child's stderr (bounded memory whatever it prints)."""
        import anyio

        os.set_blocking(fd, False)
        buf = b""
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            buf = buf[-4096:]
            up.stderr_tail.extend(ln.decode("utf-8", "replace").strip() for ln in lines if ln.strip())

    async def _list(self, up: Upstream, session: Any) -> None:
        caps = mcp_compat.server_capabilities(session)
        tools = await mcp_compat.list_all(session, "tools") if caps.get("tools") is not None else []
        has_resources, has_prompts = caps.get("resources") is not None, caps.get("prompts") is not None
        up.tools = tools
        up.resources = await mcp_compat.list_all(session, "resources") if has_resources else []
        up.templates = await mcp_compat.list_all(session, "resourceTemplates") if has_resources else []
        up.prompts = await mcp_compat.list_all(session, "prompts") if has_prompts else []
        up.known_tools |= {t["name"] for t in tools}
        up.known_prompts |= {p["name"] for p in up.prompts}

    # -- the merged view --------------------------------------------------------------------------
    def live(self) -> list[Upstream]:
        return [u for u in self.upstreams.values() if u.state == "up"]

    def down(self) -> list[str]:
        """The servers that are not up, once started (or failed to): a restart, a failed start."""
        return [u.name for u in self.upstreams.values() if u.state not in ("up", "starting")]

    def kill_starting(self) -> None:
        """SIGKILL the process group of every server still in its first start (the gateway is
        stopping): the SDK's graceful stop would wait seconds for a child that never answered."""
        mcp_compat.kill_process_groups([p for u in self.upstreams.values() if u.state == "starting" for p in u.pids])

    def starting(self) -> list[str]:
        """The servers still in their first start (the gateway serves before they are up)."""
        return [u.name for u in self.upstreams.values() if u.state == "starting"]

    def _names(self, attr: str) -> dict[tuple[str, str], str]:
        """(server, name) -> public name (:func:`public_names`), over every name each server has ever listed."""
        return public_names({u.name: getattr(u, attr) for u in self.upstreams.values()})

    def tools(self) -> list[tuple[str, Upstream, dict[str, Any]]]:
        """(public name, upstream, tools/list record) of every live tool, in config order."""
        names = self._names("known_tools")
        return [(names[u.name, t["name"]], u, t) for u in self.live() for t in u.tools]

    def prompts(self) -> list[tuple[str, Upstream, dict[str, Any]]]:
        names = self._names("known_prompts")
        return [(names[u.name, p["name"]], u, p) for u in self.live() for p in u.prompts]

    def resource_owner(self, uri: str) -> Upstream | None:
        """The live server that lists ``uri`` (exactly, else by a template's fixed prefix)."""
        live = self.live()
        for u in live:
            if any(r.get("uri") == uri for r in u.resources):
                return u
        for u in live:
            for tm in u.templates:
                prefix = str(tm.get("uriTemplate", "")).split("{", 1)[0]
                if prefix and uri.startswith(prefix):
                    return u
        return None

    def resources(self) -> list[dict[str, Any]]:
        seen: set[str] = set()
        out = []
        for u in self.live():
            for r in u.resources:
                if r.get("uri") not in seen:
                    seen.add(r.get("uri"))
                    out.append(r)
        return out

    def templates(self) -> list[dict[str, Any]]:
        return [t for u in self.live() for t in u.templates]

    def summary(self) -> dict[str, Any]:
        return {u.name: {"state": u.state, "tools": len(u.tools), "restarts": u.restarts,
                         **({"last_error": u.last_error} if u.last_error else {})} for u in self.upstreams.values()}
