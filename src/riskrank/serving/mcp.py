"""The MCP server: ``riskrank mcp``, risk-aware tool search and a gateway for MCP clients.

The agent sees two tools instead of hundreds. ``find_tools(task, k)`` returns the risk-aware
top-k of a catalogue (name, description, input schema, risk level with its provenance and
evidence), ranked by the server's mode (the strongest safe one by default,
:func:`riskrank.modes.safe_default_mode`). ``call_tool(name, arguments)`` (with upstream
servers) forwards a call, but only to a tool in the caller's *latest* ``find_tools`` result,
and only if the server's policy allows the tool at its current level, after the user's
confirmation where the policy asks for one (:mod:`riskrank.serving.gateway.policy`).

The catalogue is a registry file (``--registry``), or the tools of upstream MCP servers
(``--config SERVERS.json``, ``--upstream CMD``), audited by the keyword annotator (which
reads their MCP annotations as evidence) whenever a server connects or changes. Tools the
policy never allows (denied, above ``max_level``) are not ranked at all. The agent cannot
widen any of this: ``find_tools`` takes no mode, lambda or risk source unless the policy
file lists the ones a client may pick. Resources and prompts of the upstream servers pass
through; progress notifications of forwarded calls reach the caller. Every decision goes to
the audit log (:mod:`riskrank.serving.gateway.auditlog`).

The gateway itself (the view, ``find_tools``, ``call_tool``, the keeper of the catalogue) is
:mod:`riskrank.serving.gateway.core`; this module serves it over MCP and runs it.

Transports: stdio (default) and streamable HTTP (behind the same bearer-token gate as
``riskrank serve``). Scoring is :class:`~riskrank.pipeline.RiskAwareRetriever`'s, through
:class:`~riskrank.catalogue.Catalogue`; nothing is scored here. The SDK (1.x or 2.x) is
reached through :mod:`riskrank.serving.mcp_compat` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from collections.abc import Callable, Sequence
from typing import Any

from riskrank._version import __version__
from riskrank.catalogue import (
    ArtefactSpec,
)
from riskrank.errors import RiskrankError
from riskrank.modes import NO_MIN_SCORE
from riskrank.registry import ToolRegistry
from riskrank.serving import mcp_compat
from riskrank.serving.auth import Gate
from riskrank.serving.console.host import ConsoleHost, ConsoleOptions
from riskrank.serving.gateway.auditlog import AuditLog, StoreAuditLog
from riskrank.serving.gateway.config import Policies, UpstreamConfig
from riskrank.serving.gateway.confirm import (
    REPLICA_LAPSE_S,
    ConfirmationBroker,
    ElicitationBroker,
    OperatorBroker,
    StoreBroker,
)
from riskrank.serving.gateway.core import (
    INSTRUCTIONS,
    Gateway,
    View,
    _Catalogues,
    build_views,
    pipeline_sentence,
)
from riskrank.serving.gateway.limits import (
    CallLimits,
)
from riskrank.serving.gateway.pins import PinStore
from riskrank.serving.gateway.policy import (
    Policy,
)
from riskrank.serving.gateway.upstreams import UpstreamManager
from riskrank.serving.listen import uvicorn_server
from riskrank.serving.requests import Limits
from riskrank.timeline import mark


def request_body_limit(limits: CallLimits) -> int:
    """The largest HTTP request the gateway reads: room for arguments of ``--max-argument-bytes``
    (counted as compact JSON, so a request may spell them twice as long: escapes, spacing) and
    the JSON-RPC envelope. Past it the gate answers 413 before parsing; below it a call with
    arguments over the bound is refused as ``arguments_too_large``, the documented error."""
    return 2 * limits.max_argument_bytes + 64 * 1024


def build_server(gateway: Gateway) -> Any:
    """The SDK's low-level server answering ``gateway``'s handlers."""
    return mcp_compat.build_server("riskrank", __version__, INSTRUCTIONS, gateway.handlers(), title="riskrank tool search")


# -- the console's view of a gateway ------------------------------------------------------------------------
def console_host(gateway: Gateway, audit_log: Any = None) -> ConsoleHost:
    """What the console shows of ``gateway``: its tools (offered or not), ``find_tools``'s own
    payload for the search box (:meth:`Gateway.find`: the same code, no exposure, no audit
    line), the relevance-only ranking beside it, its operator broker and its audit log."""
    from pathlib import Path

    def describe() -> dict[str, Any]:
        view, p = gateway.view, gateway.policy
        out: dict[str, Any] = {
            "source": view.catalogue.registry.source if view.catalogue is not None else "no tool offered",
            "mode": gateway.mode, "tools": len(view.tools) + len(view.withheld_tools),
            "offered": len(view.tools) - len(view.not_offered), "withheld by trust": len(view.withheld_tools),
            "policy": p.source, "max_level": p.max_level, "confirm_level": p.confirm_level, "generation": view.generation}
        if len(gateway.policies.named) > 1:  # the figures above are the default policy's
            out["named policies"] = ", ".join(f"{n} (max {q.max_level}, confirm {q.confirm_level})"
                                              for n, q in gateway.policies.named.items())
        if gateway.manager is not None:
            out["upstreams down"] = ", ".join(gateway.manager.down()) or "none"
        return out

    def tools() -> list[dict[str, Any]]:
        view = gateway.view  # the withheld ones too (quarantined, poisoned, withdrawn), with why
        return [dict(row) for row in [*view.tools.values(), *view.withheld_tools.values()]]

    def search(task: str, k: int) -> dict[str, Any]:
        return gateway.find({"task": task, "k": k})

    def baseline(task: str, k: int) -> list[dict[str, Any]]:
        view = gateway.view
        cat = view.catalogue
        if cat is None:
            return []
        res = cat.retriever.retrieve(task, k=min(k, len(cat.registry)), mode="dense", min_score=NO_MIN_SCORE)
        return [{"rank": t.rank, "name": t.name, "score": t.score, "risk_level": view.levels.get(t.name, (None,))[0]}
                for t in res.tools]

    kind = "gateway" if gateway.manager is not None else "search server"
    broker = gateway.broker if isinstance(gateway.broker, OperatorBroker | StoreBroker) else None
    return ConsoleHost(kind, describe, tools, search, baseline, broker=broker,
                       audit_log=Path(audit_log) if isinstance(audit_log, str) else audit_log, max_k=gateway.limits.max_k,
                       audit=gateway.audit)


def with_probes(app: Any, gateway: Gateway, store: Any = None) -> Any:
    """``app`` with ``GET /healthz`` (the process answers) and ``GET /readyz`` (200 once the
    first catalogue serves and, with a state store, the store answers at its schema; else 503
    with the reason): what a load balancer in front of replicas polls. A replica whose store
    is away still serves find_tools, and refuses every call (its decision cannot be logged)."""
    import json

    async def probed(scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path") if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") else None
        if path not in ("/healthz", "/readyz"):
            await app(scope, receive, send)
            return
        body: dict[str, Any] = {"status": "ok"}
        status = 200
        if path == "/readyz":
            import anyio.to_thread

            health = await anyio.to_thread.run_sync(store.health) if store is not None else None
            ready = gateway.is_ready and (health is None or health.get("ok"))
            status = 200 if ready else 503
            body = {"status": "ready" if ready else "not_ready", "catalogue": gateway.is_ready,
                    **({"state": health} if health is not None else {})}
        raw = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]})
        await send({"type": "http.response.body", "body": raw})

    return probed


def with_metrics(app: Any, metrics: Any, admin_token: str | None, audit: Any = None) -> Any:
    """``app`` with ``GET /metrics`` (:mod:`.gateway.metrics`, the Prometheus text format):
    for ``Authorization: Bearer <admin token>`` only, or, when there is no admin token, for a
    loopback caller only (the command refuses a wider bind without one); 401 otherwise. Wrong
    tokens are throttled per address as the console's logins are (429 with ``Retry-After``,
    the token not even compared meanwhile) and go on the audit log (``auth_refused``), so the
    endpoint is no faster oracle for the admin token than the console's login."""
    import contextlib
    import hmac
    import math

    from riskrank.serving.auth import is_loopback
    from riskrank.serving.console.security import LoginThrottle
    from riskrank.serving.gateway.metrics import CONTENT_TYPE

    expected = f"Bearer {admin_token}".encode() if admin_token else None
    throttle = LoginThrottle()

    async def note(code: str, address: str, reason: str) -> None:
        if audit is not None:
            with contextlib.suppress(RiskrankError):  # the refusal stands whether or not it is logged
                await audit.append(tool=None, decision="auth_refused", code=code, reason=reason, address=address)

    async def answer(send: Any, status: int, body: bytes, kind: str, head: bool, extra: list[Any] | None = None) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode()), *(extra or [])]})
        await send({"type": "http.response.body", "body": b"" if head else body})

    async def metered(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != "/metrics" or scope.get("method") not in ("GET", "HEAD"):
            await app(scope, receive, send)
            return
        head, address = scope.get("method") == "HEAD", (scope.get("client") or ("",))[0] or ""
        plain = "text/plain; charset=utf-8"
        if expected is not None:
            wait = throttle.wait(address)
            if wait > 0:  # the token is not looked at: a throttle that checked it would still answer the guess
                refused = throttle.throttled(address)
                if refused:
                    await note("metrics_throttled", address, f"{refused} request(s) to /metrics refused without a check "
                                                             f"after {throttle.per_address} wrong admin tokens")
                await answer(send, 429, b"too many wrong tokens: try again later\n", plain, head,
                             [(b"retry-after", str(max(1, math.ceil(wait))).encode())])
                return
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            allowed = hmac.compare_digest(given, expected)
            if allowed:
                throttle.succeeded(address)
            else:
                throttle.failed(address)
                await note("wrong_token", address, "/metrics: no or a wrong admin token")
        else:
            allowed = is_loopback(address)
        if allowed:
            await answer(send, 200, metrics.exposition(), CONTENT_TYPE, head)
        else:
            await answer(send, 401, b"/metrics needs the admin token (Authorization: Bearer ...)\n", plain, head)

    return metered


#: Beyond ``--startup-timeout``: how long a ``find_tools`` during start-up waits for the first
#: catalogue (the upstreams' start, then levels, embeddings and indexes).
FIRST_CATALOGUE_GRACE_S = 30.0
#: The first catalogue waits this long for every upstream; a slower one joins it when it is up.
FIRST_CATALOGUE_WAIT_S = 5.0


async def start_upstreams(tg: Any, manager: UpstreamManager, keeper: _Catalogues, gateway: Gateway, encoder: Any,
                          echo: Callable[[str], None], audit_log: str | None) -> None:
    """Start the upstreams while the gateway already answers: the first catalogue is built
    once every server is up or has failed its first start, or after
    :data:`FIRST_CATALOGUE_WAIT_S` from what is up then (a slow server joins through the
    keeper when it is up; ``find_tools`` lists it under ``upstreams_starting`` meanwhile). When
    every server fails its first start, the gateway exits with the first reason, as before."""
    import anyio
    import anyio.to_thread

    all_started = anyio.Event()

    async def start_all() -> None:
        await tg.start(manager.run)
        mark("upstreams up")
        all_started.set()

    tg.start_soon(start_all)
    with anyio.move_on_after(FIRST_CATALOGUE_WAIT_S):
        await all_started.wait()
    if not manager.live():
        await all_started.wait()  # none up yet: the first one, or every failure (run() raises)
    keeper.dirty = anyio.Event()  # what is up now is in this build; later changes mark it again
    view = await keeper.build()
    gateway.view = view
    if hasattr(encoder, "warm"):
        await anyio.to_thread.run_sync(encoder.warm)  # the first find_tools must not wait for the model
        mark("encoder loaded")
    keeper.audit_upstreams(view)
    tg.start_soon(keeper.keep)
    tg.start_soon(keeper.watch_pins)
    gateway.set_ready()
    mark("first catalogue ready")
    echo(_serving_line(gateway, manager, audit_log))


def _serving_line(gateway: Gateway, manager: UpstreamManager | None, audit_log: str | None) -> str:
    view = gateway.view
    n_tools = len(view.catalogue.registry) if view.catalogue is not None else 0
    policy = gateway.policy
    return (f"find_tools over {n_tools} tools ({len(view.not_offered)} never offered by {policy.source}: "
            f"max_level {policy.max_level}, confirm_level {policy.confirm_level}); mode {gateway.mode}: "
            f"{pipeline_sentence(gateway.mode, gateway.fill, gateway.floor)}"
            + ("; call_tool forwards to " + ", ".join(repr(u) for u in manager.upstreams) if gateway.forward and manager else "")
            + (f"; audit log {audit_log}" if audit_log else "")
            + (f"; starting: {', '.join(manager.starting())}" if manager and manager.starting() else ""))


async def run(spec: ArtefactSpec, encoder: Any, *, upstreams: list[UpstreamConfig] | None = None,
              left_out: Sequence[str] = (), policy: Policy | None = None, policies: Policies | None = None, clients: Any = None,
              audit_log: str | None = None, forward: bool = True, k: int = 5,
              transport: str = "stdio", sock: Any = None, token: str | None = None, startup_timeout: float = 30.0,
              limits: Limits | None = None, echo: Callable[[str], None] = print, console: ConsoleOptions | None = None,
              console_sock: Any = None, confirm_by: str = "elicitation", confirm_timeout: float = 120.0,
              call_limits: CallLimits | None = None, pins: PinStore | None = None, scan_results: str = "off",
              store: Any = None, replica: str = "gateway", replica_lapse: float = REPLICA_LAPSE_S,
              notifier: Any = None, metrics: bool = False, metrics_token: str | None = None) -> None:
    """Load the catalogue (a registry, or the upstream servers), then serve until the client
    goes away or SIGTERM/SIGINT (which stop every upstream child first).

    ``left_out``: the servers file's entries left out at start (each named in a warning), which
    ``find_tools`` names to the agent.

    ``pins``: the pin store of the upstreams' definitions (:mod:`.gateway.pins`, opened on
    ``--state-dir``): a changed or new tool of a pinned server is quarantined until an
    operator approves it.

    ``store``: the state store (:mod:`.gateway.store`, ``--state``): the audit log, the
    approvals (any replica's console decides a call held at any other), the pins and the
    exposures live there, shared by every replica on one database; ``replica`` names this
    process on its lines and beats in the store every ``replica_lapse / 5`` seconds (a replica
    silent for ``replica_lapse`` is gone: the calls it held cannot be approved). The caller
    opens and closes it.

    ``metrics``: serve ``GET /metrics`` (streamable HTTP) behind ``metrics_token`` (the admin
    token; None: loopback callers only).

    ``console``: serve the operator's console too, at ``/console`` of the streamable-HTTP app,
    or (over stdio) on a loopback listener of its own, ``console_sock``. ``confirm_by``:
    who confirms a call at ``confirm_level``: ``elicitation`` (the MCP client's user) or
    ``console`` (an operator, who has ``confirm_timeout`` seconds). ``notifier``: webhooks
    (:mod:`.gateway.notify`) told of each held call and decision, delivered beside the calls."""
    import anyio
    import anyio.to_thread

    mcp_compat.sdk_major()  # a missing SDK is the extra's one-line error, before anything starts
    policies = policies or Policies({"default": policy or Policy()})
    policy = policies.default_policy
    audit = AuditLog(audit_log) if store is None else StoreAuditLog(store, log=echo, replica=replica)
    broker: ConfirmationBroker
    if confirm_by == "console":
        broker = (OperatorBroker(confirm_timeout, audit=audit) if store is None
                  else StoreBroker(store, confirm_timeout, audit=audit, replica=replica, lapse_s=replica_lapse))
    else:
        broker = ElicitationBroker()
    console_app = None
    if console is not None:
        # first: a missing extra fails before anything starts
        from riskrank.serving.console.app import create_console

        log_source = store if store is not None else audit_log
        make_console: Callable[[Gateway], Any] = lambda gw: create_console(console_host(gw, log_source), console)  # noqa: E731
    try:
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            graceful: list[bool] = []  # set once uvicorn serves: a signal then lets it shut down itself
            tg.start_soon(_on_signal, tg.cancel_scope, stop, echo, graceful)
            if notifier is not None and isinstance(broker, OperatorBroker | StoreBroker):
                broker.notifier = notifier
                if transport != "stdio":
                    notifier.console_url = f"{_url(sock)}/console/approvals"
                tg.start_soon(notifier.run)
            if isinstance(broker, StoreBroker):
                await broker.start()  # a predecessor of this name: the calls it held are withdrawn first
                tg.start_soon(broker.beat, echo)
            manager, keeper = None, None
            gw_kw = dict(policies=policies, audit=audit, broker=broker, default_k=k, forward=forward, limits=limits,
                         call_limits=call_limits, scan_results=scan_results, state=store)
            if upstreams:
                spec = dataclasses.replace(spec, fill_levels="keyword")
                keeper_ref: list[_Catalogues] = []
                manager = UpstreamManager(upstreams, startup_timeout=startup_timeout, log=echo, left_out=left_out,
                                          on_change=lambda: keeper_ref[0].changed() if keeper_ref else None)
                if pins is not None:
                    echo(f"pins: {pins.path}" + (f" is NOT trusted ({pins.broken}): every upstream tool is quarantined"
                                                 if pins.broken else ""))
                keeper = _Catalogues(None, manager, spec, encoder, policy, audit, echo, pins, policies)
                keeper_ref.append(keeper)
                # Answer early: initialize and tools/list (find_tools, call_tool) do not wait for
                # the upstreams; find_tools waits for the first catalogue (start_upstreams).
                announced = await anyio.to_thread.run_sync(lambda: spec.announced(getattr(encoder, "identity", None)))
                gateway = Gateway(View(None, 0), manager=manager, announced=announced,
                                  ready_wait_s=startup_timeout + FIRST_CATALOGUE_GRACE_S, **gw_kw)
                gateway.starting()
                keeper.gateway = gateway
                tg.start_soon(start_upstreams, tg, manager, keeper, gateway, encoder, echo, audit_log)
            else:
                registry = await anyio.to_thread.run_sync(lambda: ToolRegistry.load(spec.registry))
                view = await anyio.to_thread.run_sync(lambda: build_views(registry, spec, encoder, policies, 1))
                if hasattr(encoder, "warm"):
                    await anyio.to_thread.run_sync(encoder.warm)  # the first find_tools must not wait for the model
                    mark("encoder loaded")
                gateway = Gateway(view, **gw_kw)
                echo(_serving_line(gateway, None, audit_log))
            if console is not None:
                console_app = make_console(gateway)
            gauges = None
            if metrics:
                from riskrank.serving.gateway.metrics import make_metrics

                gauges = make_metrics(gateway, clients=[c.name for c in clients.clients] if clients is not None else ())
            server = build_server(gateway)
            mark("serving")
            if transport == "stdio":
                if console_app is not None:
                    console_sock.listen(128)  # connections wait in the backlog until the server runs
                    echo(f"console at {_url(console_sock)}/console  {_console_auth(console)}")
                    console_http = uvicorn_server(console_app, console_sock, "warning", extra="console")
                    console_http.capture_signals = contextlib.nullcontext
                    tg.start_soon(_stop_http, console_http, stop)
                    tg.start_soon(lambda: console_http.serve(sockets=[console_sock]))
                await mcp_compat.serve_stdio(server)
                # The client left during start-up: finish it first, so a server that fails its
                # first start is still reported (one line, exit 2) rather than a silent exit.
                await gateway.wait_ready()
            else:
                host, port = sock.getsockname()[:2]
                sock.listen(128)  # before the URL is announced: a client connecting at once waits in the backlog
                app = Gate(with_probes(mcp_compat.watch_callers(mcp_compat.checked_envelopes(mcp_compat.streamable_http_app(server, host))),
                                       gateway, store),
                           token=token, max_body_bytes=request_body_limit(call_limits or CallLimits()),
                           max_inflight=(limits or Limits()).max_inflight, clients=clients, log=echo, audit=audit)
                auth = ", ".join([*(["bearer token"] if token else []), *(["clients file"] if clients is not None else [])])
                echo(f"streamable HTTP at http://{host}:{port}/mcp  auth: {auth or 'none (--insecure, loopback)'}")
                if gauges is not None:
                    app = with_metrics(app, gauges, metrics_token, audit)
                    echo(f"metrics at {_url(sock)}/metrics  auth: " + ("the admin token" if metrics_token else "none (loopback only)"))
                if console_app is not None:
                    from riskrank.serving.console.app import with_console

                    app = with_console(app, console_app)
                    echo(f"console at {_url(sock)}/console  {_console_auth(console)}")
                http = uvicorn_server(app, sock, "warning", lifespan="on", extra="mcp")
                http.capture_signals = contextlib.nullcontext  # signals are _on_signal's: it stops the upstreams too
                tg.start_soon(_stop_http, http, stop)
                graceful.append(True)
                await http.serve(sockets=[sock])
            if manager is not None:
                manager.kill_starting()  # a server still in its first start holds nothing worth a graceful stop
            tg.cancel_scope.cancel()
    except BaseException as group:
        exc = _leaf(group)
        if isinstance(exc, RiskrankError) and exc is not group:
            raise exc from None
        raise
    finally:
        audit.close()


def _url(sock: Any) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _console_auth(options: ConsoleOptions) -> str:
    return ("auth: the admin token (log in at the page)" if options.admin_token
            else "auth: none (no admin token: loopback only)")


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _on_signal(scope: Any, stop: Any, echo: Callable[[str], None], graceful: list[bool]) -> None:
    """SIGTERM/SIGINT: stop. Over streamable HTTP, once uvicorn serves, it shuts down first
    (idle keep-alive connections closed, requests in flight finished or cut after its
    graceful timeout, the app's lifespan ended), and ``run`` then cancels the rest; cancelled
    mid-shutdown, its lifespan task would die with a traceback in the log."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for sig in signals:
            echo(f"{signal.Signals(sig).name}: stopping")
            stop.set()
            if not graceful:
                scope.cancel()
            return


async def _stop_http(http: Any, stop: Any) -> None:
    await stop.wait()
    http.should_exit = True
