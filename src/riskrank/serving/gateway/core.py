"""The gateway's core, independent of the transport: ``find_tools`` and ``call_tool``
(:class:`Gateway`: exposure, the session's anchor and scope, the chain of guards
(:mod:`.guards`), confirmation, the audit line, the forward, the flow record), and the keeper
that rebuilds the view (:mod:`.view`) when an upstream re-lists (:class:`_Catalogues`:
per-server validation, pins and the definition scan). :mod:`riskrank.serving.mcp` serves it
over MCP; the console reads it through its host seam.
"""

from __future__ import annotations

import collections
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from riskrank.catalogue import ArtefactSpec, Catalogue
from riskrank.errors import RegistryError, RiskrankError, error_body
from riskrank.modes import parse_mode
from riskrank.risk import RISKY_LEVEL
from riskrank.scan import (
    DEFAULT,
    Finding,
    Scan,
    cross_server_findings,
    scan_definitions,
    scan_result,
    with_findings,
)
from riskrank.serving import mcp_compat
from riskrank.serving.gateway import tracing
from riskrank.serving.gateway.auditlog import AuditLog, AuditLogError
from riskrank.serving.gateway.config import Policies
from riskrank.serving.gateway.confirm import (
    ACCEPT,
    CALLER_GONE,
    CANCELLED_WHILE_HELD,
    REPLICA_GONE,
    TIMEOUT,
    UNAVAILABLE,
    UNSUPPORTED,
    ConfirmationBroker,
    ConfirmationRequest,
    ElicitationBroker,
    UnshowableCall,
    call_digest,
    confirmation_text,
)
from riskrank.serving.gateway.guards import (
    ORDER,
    CallContext,
    Chain,
    Outcome,
)
from riskrank.serving.gateway.guards import bounds as bounds_guard
from riskrank.serving.gateway.guards import policy as policy_guard
from riskrank.serving.gateway.guards.confirm import CONFIRM
from riskrank.serving.gateway.guards.flow import FLOW
from riskrank.serving.gateway.guards.schema import INVALID_ARGUMENTS, argument_problem
from riskrank.serving.gateway.guards.scope import DRIFT, quoted, risky
from riskrank.serving.gateway.guards.unknown import UNKNOWN_TOOL
from riskrank.serving.gateway.guards.upstream import UPSTREAM_DOWN
from riskrank.serving.gateway.limits import CALL_TIMEOUT, CallLimits, LimitError, check_result
from riskrank.serving.gateway.pins import PinStore
from riskrank.serving.gateway.policy import (
    CONFIRMATION_REQUIRED,
    DENIED,
    Decision,
    Policy,
    confirmation_refusal,
)
from riskrank.serving.gateway.session import (
    MAX_FLOW_VALUES,
    MAX_SESSIONS,
    Exposure,
    SessionBook,
    SessionError,
    SessionRecord,
    StoreSessionError,
    confirmation_kind,
    session_owner,
)
from riskrank.serving.gateway.store import STATE_UNAVAILABLE, StateUnavailable, unavailable_message
from riskrank.serving.gateway.upstreams import UpstreamManager, describe
from riskrank.serving.gateway.values import bounded, candidates, result_text, unencodable
from riskrank.serving.gateway.view import (
    View,
    build_view,
    build_views,
    record_registry,
    upstream_records,
    withdrawn_view,
)
from riskrank.serving.owned import OwnedTable
from riskrank.serving.requests import ApiError, Limits, check_k, check_lambda, check_task
from riskrank.timeline import mark

__all__ = ["INSTRUCTIONS", "INVALID_ARGUMENTS", "SCAN_RESULTS", "UNKNOWN_TOOL", "Exposure", "Gateway", "View",
           "argument_problem", "build_view", "build_views", "pipeline_sentence", "record_registry", "upstream_records",
           "withdrawn_view"]

INSTRUCTIONS = (
    "This server searches a tool catalogue with risk-aware ranking. Describe your task to find_tools and act only "
    "with the tools it returns; call them through call_tool. Each find_tools replaces the tools you may call."
)
#: The guard whose refusal means nothing read the arguments (they stay out of the audit line).
BOUNDS = bounds_guard.GUARD.name
#: A result longer than this (characters) is read for values in a worker thread.
THREAD_SCAN_CHARS = 64 * 1024


def pipeline_sentence(mode: str, fill: str | None, floor: float | None) -> str:
    """What ``mode`` runs, in the words a tool description needs (it must say what runs)."""
    stages = parse_mode(mode)
    if stages.heads:
        what = "relevance from riskrank's dual head minus lambda x the tool's learned risk"
        if stages.graph:
            what += ", smoothed over the tool graph"
    else:
        what = "cosine relevance (no risk term)"
    if stages.context:
        what += ("; then a need estimate per task: a task that does not need a risky tool sees none, one that does sees its "
                 "most relevant risky tool when that tool is nearly as relevant as the best safe one")
    if stages.rule:
        what += (f"; then a rule filter admits at most one tool of risk level {RISKY_LEVEL} or more and at most two "
                 "tools with broad permissions, and drops near-duplicates")
        what += {"safe": "; it never tops the list up with a risky tool, so fewer than k may come back",
                 "none": "; it never tops the list up, so fewer than k may come back",
                 "deferred": "; when too few tools meet every rule it tops the list up with the withheld ones"}.get(fill or "", "")
    if floor is not None:
        what += f"; tools whose relevance is below {floor:g} are left out"
    return what


def _caller(call: Any) -> dict[str, Any] | None:
    """The gate's identity of the caller of ``call`` (None over stdio, or from a test's stub)."""
    return getattr(call, "client", None)


def _who(client: dict[str, Any] | None) -> dict[str, Any]:
    """The caller's whole identity (a clients-file name, or ``ISSUER#SUBJECT``), how it
    authenticated and its policy on its audit lines (nothing for an unnamed caller)."""
    if not client or not client.get("name"):
        return {}
    return {"client": client["name"], "via": client.get("via"), "policy": client.get("policy")}


def _refusal(code: str, message: str) -> Any:
    """An ``isError`` result whose text starts with the stable code."""
    return mcp_compat.tool_result(f"{code}: {message}", is_error=True, structured={"error": {"code": code, "message": message}})


def _error_text(wired: dict[str, Any]) -> str:
    """The text of a tool's error answer, cut for an audit line."""
    text = " ".join(str(c.get("text", "")) for c in wired.get("content") or [] if isinstance(c, dict)).strip()
    return text[:300] or "the tool answered with an error (no text)"


def _source(cat: Catalogue, view: View) -> str:
    """What a catalogue serves, in words: the upstreams its tools come from (a gateway), else
    the registry file."""
    names = sorted({view.routes[t.name][0] for t in cat.registry if t.name in view.routes})
    return "upstreams: " + ", ".join(names) if names else str(cat.spec.registry)


def _error(exc: BaseException) -> Any:
    body = error_body(exc)["error"]
    return _refusal(body["code"], body["message"])



#: What ``--scan-results`` does with an answer that holds text addressed to the model.
SCAN_RESULTS = ("off", "flag", "redact")


class Gateway:
    """``find_tools``, ``call_tool`` and the pass-through, independent of the transport.

    ``view`` is the current :class:`View` (replaced whole when upstreams change);
    ``manager`` the upstream servers (None: a registry, search only). ``forward``: expose
    ``call_tool`` (needs ``manager``)."""

    def __init__(self, view: View, *, policy: Policy | None = None, manager: UpstreamManager | None = None,
                 audit: AuditLog | None = None, broker: ConfirmationBroker | None = None, limits: Limits | None = None,
                 default_k: int = 5, forward: bool = True, call_limits: CallLimits | None = None,
                 scan_results: str = "off", announced: tuple[str, str, float | None] | None = None,
                 ready_wait_s: float = 30.0, policies: Policies | None = None, state: Any = None) -> None:
        #: (mode, fill, floor) of the spec (:meth:`ArtefactSpec.announced`): what ``tools/list``
        #: describes before the first catalogue exists (the upstreams still starting).
        self.announced = announced
        #: How long a ``find_tools`` during start-up waits for the first catalogue.
        self.ready_wait_s = ready_wait_s
        self.is_ready = True
        self._ready_event: Any = None
        self._view = view
        self.call_limits = call_limits or CallLimits()
        if scan_results not in SCAN_RESULTS:
            raise RiskrankError(f"scan_results must be one of {', '.join(SCAN_RESULTS)}, got {scan_results!r}")
        #: ``--scan-results``: ``off``, ``flag`` (audit line) or ``redact`` (and a notice instead of a poisoned answer).
        self.scan_results = scan_results
        #: The named policies (a client's is looked up here by the name the gate found);
        #: ``policy`` is the default one, what stdio and the shared bearer token get.
        self.policies = policies or Policies({"default": policy or Policy()})
        self.policy = self.policies.default_policy
        self.manager = manager
        self.audit = audit or AuditLog(None)
        self.broker = broker or ElicitationBroker()
        self.limits = limits or Limits()
        if not 1 <= default_k <= self.limits.max_k:
            raise RiskrankError(f"k must be between 1 and {self.limits.max_k}, got {default_k}")
        self.default_k = default_k
        self.forward = forward and manager is not None
        self.exposure = OwnedTable(MAX_SESSIONS, session_owner)
        #: The state store (``--state``): exposures are written through to it, so a caller's
        #: find_tools at one replica exposes its tools at every replica (a session-less client
        #: behind a load balancer); None: this process's memory only.
        self.state = state
        #: Each session's record (anchor, scope, flow record, confirmations): in the state
        #: store when there is one, so a session moved to another replica keeps it.
        self.sessions = SessionBook(state)
        #: The call path: every decision about a call_tool, in order (:mod:`.guards`).
        self.chain = Chain(ORDER)
        #: The Prometheus metrics (:func:`.metrics.make_metrics`; None: not kept).
        self.metrics: Any = None
        self._described_by_catalogue = False
        self._announce()

    @property
    def view(self) -> View:
        """The current :class:`View`; replaced whole (the first one with a catalogue fixes the
        mode and the descriptions ``tools/list`` gives)."""
        return self._view

    @view.setter
    def view(self, view: View) -> None:
        self._view = view
        if view.catalogue is not None and not self._described_by_catalogue:
            self._announce()

    def _announce(self) -> None:
        """The pipeline the gateway describes (``mode``, ``fill``, ``floor``): the catalogue's
        once there is one, the spec's before; and the descriptions built from it."""
        cat = self._view.catalogue
        if cat is not None:
            self.mode, self.fill, self.floor = cat.retriever.mode, cat.retriever.rule_config.fill, cat.retriever.relevance_floor()
            self._described_by_catalogue = True
        else:
            self.mode, self.fill, self.floor = self.announced if self.announced else ("dense+rule", "safe", None)
        self._descriptions = self._describe()

    def starting(self) -> None:
        """Serve before the first catalogue: ``find_tools`` waits for :meth:`set_ready` (at
        most ``ready_wait_s``), ``initialize`` and ``tools/list`` do not."""
        self.is_ready = False

    def set_ready(self) -> None:
        self.is_ready = True
        if self._ready_event is not None:
            self._ready_event.set()

    async def wait_ready(self) -> None:
        import anyio

        if self.is_ready:
            return
        if self._ready_event is None:
            self._ready_event = anyio.Event()
        with anyio.move_on_after(self.ready_wait_s):
            await self._ready_event.wait()

    def served(self, client: dict[str, Any] | None) -> tuple[str, Policy, View]:
        """(policy name, policy, view) of a caller the gate identified (None: the default's).
        A policy name the file lacks raises (the clients file was checked against it)."""
        name = (client or {}).get("policy") or self.policies.default
        return name, self.policies.get(name), self.view.under(name, self.policies.default)

    # -- the two tools -----------------------------------------------------------------------------
    def _describe(self) -> tuple[str, str]:
        p = self.policy
        find = (
            "Find the tools for a task in a large tool catalogue; call it before acting, and use only the tools it "
            f"returns. Returns at most k tools ranked by: {pipeline_sentence(self.mode, self.fill, self.floor)}. Each tool comes "
            "with its input_schema and its risk level (1 safe .. 5 critical) with the evidence for it. Tools the "
            f"server's policy never allows (above risk level {p.max_level}, or denied) are never offered"
            + (f"; tools of level {p.confirm_level} or more need the user's confirmation when called" if p.confirm_level <= 5 else "")
            + "."
        )
        ttl = f" (for {p.exposure_ttl_s:g} s)" if p.exposure_ttl_s else ""
        call = (
            "Call a tool with its arguments. Only a tool in your latest find_tools result can be called"
            f"{ttl}: each find_tools replaces the tools you may call. The server checks the tool's risk level "
            "against its policy at call time; a refusal is an error whose text starts with its code: not_exposed (search "
            "for your task first), denied_by_policy or above_max_level (never offered: do not retry), "
            "confirmation_required, denied (the user declined), invalid_arguments (fix them to the tool's input_schema) "
            "or unknown_tool."
        )
        return find, call

    def _find_schema(self) -> dict[str, Any]:
        lim = self.limits
        props: dict[str, Any] = {
            "task": {"type": "string", "minLength": 1, "maxLength": lim.max_task_chars,
                     "description": "The task you have to do, in natural language."},
            "k": {"type": "integer", "minimum": 1, "maximum": lim.max_k, "default": self.default_k,
                  "description": "How many tools to return at most."},
        }
        for key, values in self.policy.client_choices.items():
            props[key] = {"enum": list(values), "description": f"The {key} to rank with [default: the server's]."}
        return {"type": "object", "properties": props, "required": ["task"], "additionalProperties": False}

    async def list_tools(self) -> list[dict[str, Any]]:
        mark("first tools/list answered", once=True)
        find, call = self._descriptions
        tools = [{"name": "find_tools", "title": "Find tools (risk-aware)", "description": find,
                  "inputSchema": self._find_schema(),
                  "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                                  "openWorldHint": False}}]
        if self.forward:
            tools.append({"name": "call_tool", "title": "Call a tool find_tools returned", "description": call,
                          "inputSchema": {"type": "object", "properties": {
                              "name": {"type": "string", "description": "A tool name from your latest find_tools result."},
                              "arguments": {"type": "object", "description": "The tool's arguments (its input_schema)."}},
                              "required": ["name"], "additionalProperties": False},
                          "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False,
                                          "openWorldHint": True}})
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], call: Any) -> Any:
        if name == "find_tools":
            return await self.find_tools(arguments, call)
        if name == "call_tool" and self.forward:
            await self.wait_ready()  # during start-up: decided against the first catalogue, as find_tools
            return await self.forward_call(arguments, call)
        return _refusal("unknown_tool", f"this server has {' and '.join(t['name'] for t in await self.list_tools())}, not {name!r}")

    # -- find_tools ---------------------------------------------------------------------------------
    def find(self, arguments: dict[str, Any], client: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``find_tools`` payload for these arguments, under the policy of ``client`` (the
        gate's identity; None: the default policy); :class:`ApiError` on bad input (the HTTP
        API's codes)."""
        policy_name, pol, view = self.served(client)
        allowed = {"task", "k", *pol.client_choices}
        extra = sorted(set(arguments) - allowed)
        if extra:
            raise ApiError(422, "invalid_request", f"unknown argument(s) {extra}: the server's policy fixes the ranking "
                                                   f"(mode {self.mode}); find_tools takes {', '.join(sorted(allowed))}")
        task = check_task(arguments.get("task"), self.limits)
        k = check_k(arguments.get("k", self.default_k), self.limits)
        choice = {key: arguments[key] for key in pol.client_choices if arguments.get(key) is not None}
        for key, value in choice.items():
            if value not in pol.client_choices[key]:
                raise ApiError(422, f"invalid_{key}", f"{key}: this server allows {', '.join(map(str, pol.client_choices[key]))}")
        if "lambda" in choice:
            check_lambda(choice["lambda"], self.limits)
        cat = view.catalogue
        policy = {"max_level": pol.max_level, "confirm_level": pol.confirm_level, "not_offered": len(view.not_offered)}
        if len(self.policies.named) > 1:
            policy["name"] = policy_name
        starting = self.manager.starting() if self.manager is not None else []
        if cat is None:
            why = ("the upstream servers are still starting: " + ", ".join(starting) if starting and not self.manager.live()
                   else "every upstream server is down" if self.manager and not self.manager.live()
                   else next(iter(view.withdrawn.values())) if view.withdrawn
                   else "the policy offers none of the catalogue's tools")
            return {"task": task, "mode": self.mode, "k": k, "tools": [], "withheld": [], "policy": policy,
                    "note": "no tool is available: " + why, "catalogue": {"n_tools": 0, "generation": view.generation},
                    **({"upstreams_down": self.manager.down()} if self.manager is not None else {}),
                    **({"upstreams_starting": starting} if starting else {}),
                    **({"upstreams_left_out": self.manager.left_out} if self.manager and self.manager.left_out else {})}
        cat.check_request(choice.get("mode"), choice.get("risk_source"))
        res = cat.retrieve(task, k=min(k, len(cat.registry)), mode=choice.get("mode"), lam=choice.get("lambda"),
                                     risk_source=choice.get("risk_source"))
        out = cat.result_dict(res, view.needs_confirmation)
        out["policy"] = policy
        out["catalogue"] = {"source": _source(cat, view), "n_tools": len(cat.registry), "generation": view.generation}
        if self.manager is not None:
            out["upstreams_down"] = self.manager.down()
            if starting:
                out["upstreams_starting"] = starting
            if self.manager.left_out:
                out["upstreams_left_out"] = self.manager.left_out
        return out

    async def find_tools(self, arguments: dict[str, Any], call: Any) -> Any:
        """One ``find_tools``: its trace (a ``ranking`` child) and its latency metric around
        :meth:`_find_tools`."""
        started = time.perf_counter()
        client = (_caller(call) or {}).get("name")
        task = arguments.get("task")
        if unencodable(arguments):
            return _refusal("invalid_request", _UNENCODABLE.format(what="find_tools"))
        with tracing.root("find_tools", getattr(call, "traceparent", None), **{
                "riskrank.client": client, "riskrank.tool": "find_tools",
                "riskrank.task.bytes": len(task.encode()) if isinstance(task, str) else None}) as span:
            result = await self._find_tools(arguments, call, span)
            code = mcp_compat.error_code(result)
            span.set_attribute("riskrank.decision", "found" if code is None else "refused")
            if code is not None:
                span.set_attribute("riskrank.code", code)
        if self.metrics is not None:
            self.metrics.found(client, time.perf_counter() - started)
        return result

    async def _find_tools(self, arguments: dict[str, Any], call: Any, span: Any) -> Any:
        import anyio.to_thread

        await self.wait_ready()  # during start-up: the first catalogue, or what is up after ready_wait_s
        try:
            self._host_text(call, "host_task"), self._host_text(call, "host_user")  # the host's words checked first
            with tracing.stage("ranking"):
                out = await anyio.to_thread.run_sync(lambda: self.find(arguments, _caller(call)))
        except RiskrankError as exc:
            return _error(exc)
        returned = [t["name"] for t in out["tools"]]
        span.set_attributes({"riskrank.returned": len(returned), "riskrank.withheld": len(out["withheld"])})
        exposure = Exposure(out["task"], frozenset(returned), time.monotonic())
        self._expose(call.session_key, exposure)
        _, policy, view = self.served(_caller(call))
        # The session's anchor: the host's task, else this find_tools' own (its result is the
        # scope when it was asked with the defaults); a record that cannot be kept is said in
        # the answer, and the calls it would guard are refused.
        reuse = ([*returned, *(d["name"] for d in out.get("deferred", []))]
                 if out.get("k") == self.default_k and not set(arguments) - {"task", "k"} else None)
        try:
            record, ignored = await self._anchor(call, view, out["task"], reuse)
        except ApiError as exc:
            return _error(exc)
        except SessionError as exc:
            record, ignored = None, None
            out["note"] = f"{exc}; calls will be refused until it can be kept"
        if record is not None and record.anchored:
            outside = [t["name"] for t in out["tools"] if not record.in_scope(t["name"])
                       and risky(view, policy, t["name"])] if policy.scope != "off" else []
            out["session"] = {"task": record.anchor, "task_from": record.anchor_from, "outside_scope": outside,
                              **({"task_ignored": ignored} if ignored is not None else {})}
        try:
            if ignored is not None:
                await self.audit.append(task=out["task"], tool="find_tools", decision="session", code="task_ignored",
                                        reason=ignored, session=call.session_key, anchor=record.anchor if record else None,
                                        **_who(_caller(call)))
            await self.audit.append(
                task=out["task"], tool="find_tools", decision="found", code="found",
                reason=f"{len(returned)} returned, {len(out['withheld'])} withheld by the rule filter",
                session=call.session_key, mode=out["mode"], **_who(_caller(call)),
                **({"anchor": record.anchor} if record is not None and record.anchored else {}),
                **({"outside_scope": out["session"]["outside_scope"]} if out.get("session", {}).get("outside_scope") else {}),
                returned=[[t["name"], t["risk_level"]] for t in out["tools"]],
                withheld=[[w["name"], w["reasons"]] for w in out["withheld"]])
        except AuditLogError as exc:
            self._expose(call.session_key, Exposure(out["task"], frozenset(), time.monotonic()))
            if self.state is None:
                return _error(exc)
            # A replica whose store is away still ranks (searching changes nothing), but
            # exposes nothing: no call runs on a result that is not on record.
            out["note"] = (f"the gateway's state store is unreachable ({exc}); these tools cannot be called until it is "
                           "back: call find_tools again then")
            return mcp_compat.tool_result(json.dumps(out, separators=(",", ":")), structured=out)
        if self.state is not None:
            await self._share_exposure(call.session_key, exposure)
        mark("first find_tools answered", once=True)
        return mcp_compat.tool_result(json.dumps(out, separators=(",", ":")), structured=out)

    # -- the session record ---------------------------------------------------------------------------
    def scope_of(self, view: View, task: str) -> list[str]:
        """The tools ``task`` needs under ``view``'s policy: riskrank's own ranking of it at the
        ``find_tools`` default k, the tools returned and those the rule filter ranked there but
        withheld (a cap on risky tools per list is not a judgement that the task does not need
        them), and the tools it names (blocking)."""
        cat = view.catalogue
        if cat is None:
            return []
        res = cat.retrieve(task, k=min(self.default_k, len(cat.registry)))
        return [t.name for t in res.tools] + [d.name for d in res.deferred] + self.scope_of_named(view, task)

    async def _record(self, key: str) -> SessionRecord:
        """The session's record (memory: at once; the state store: in a worker thread)."""
        if self.state is None:
            return self.sessions.get(key)
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.sessions.get, key)

    async def _update(self, key: str, change: Callable[[SessionRecord], SessionRecord]) -> SessionRecord:
        if self.state is None:
            return self.sessions.update(key, change)
        import anyio.to_thread

        return await anyio.to_thread.run_sync(lambda: self.sessions.update(key, change))

    async def _anchor(self, call: Any, view: View, task: str | None, scope: list[str] | None = None
                      ) -> tuple[SessionRecord, str | None]:
        """The session's record, anchored if it was not: to the host's task (``call.host_task``:
        the ``X-Riskrank-Task`` header or ``_meta`` ``riskrank/task``), else to ``task`` (a
        ``find_tools``; None: a call, which anchors only a host's task), with the user's turn
        the host passed (``call.host_user``) kept; while no catalogue serves (the upstreams
        starting) nothing is anchored, since nothing could rank the task. ``scope``: the tools
        already ranked for ``task`` with the defaults. Also: why a later attempt to set the task
        was ignored (None when there was none)."""
        import anyio.to_thread

        key = call.session_key
        host, user = self._host_text(call, "host_task"), self._host_text(call, "host_user")
        record = await self._record(key)
        ignored = None
        overridden = self._host_text(call, "host_task_meta") if host is not None and host[1] == "header" else None
        if overridden is not None and overridden[0] != host[0]:  # one request, two tasks: the header's is read
            ignored = (f"the _meta {mcp_compat.TASK_META} {quoted(overridden[0])} is ignored: the "
                       f"{mcp_compat.TASK_HEADER} header's {quoted(host[0])} is read before it")
        if record.anchored:
            if host is not None and host[0] != record.anchor:
                record = await self._update(key, lambda r: r.with_anchor(host[0], host[1], (), time.time()))
                ignored = (f"the session's task was set by {record.anchor_from} to {quoted(record.anchor)}; the "
                           f"{host[1]}'s {quoted(host[0])} is ignored (the first task stands)")
            if task is not None and view.catalogue is not None and (task == record.anchor or task in record.user_turns):
                # the user's own words ranked again under today's catalogue (a tool approved or
                # back since the scope was taken): what they need is inside the scope
                if scope is None:
                    scope = await anyio.to_thread.run_sync(lambda: self.scope_of(view, task))
                fresh = [n for n in scope if not record.in_scope(n)]
                if fresh:
                    record = await self._update(key, lambda r: r.with_scope(fresh))
        elif view.catalogue is not None:  # no catalogue yet (upstreams starting): nothing could rank the task
            text, source = host if host is not None else (task, "find_tools")
            if text is not None:
                if scope is None or text != task:
                    scope = await anyio.to_thread.run_sync(lambda: self.scope_of(view, text))
                else:
                    scope = scope + await anyio.to_thread.run_sync(lambda: self.scope_of_named(view, text))
                now = time.time()
                record = await self._update(key, lambda r: r.with_anchor(text, source, scope, now))
        if user is not None and user[0] not in record.user_turns and view.catalogue is not None:
            turn = user[0]
            needs = await anyio.to_thread.run_sync(lambda: self.scope_of(view, turn))
            record = await self._update(key, lambda r: r.with_user_turn(turn, needs))
        return record, ignored

    def _host_text(self, call: Any, which: str) -> tuple[str, str] | None:
        """The host's task (``which`` ``host_task``) or the user's turn (``host_user``) on
        ``call``: (text, ``header`` or ``meta``), checked like a ``find_tools`` task
        (:class:`ApiError` naming where it came from)."""
        host = getattr(call, which, None)
        if host is None:
            return None
        what, header, meta = (("the host's task", mcp_compat.TASK_HEADER, mcp_compat.TASK_META) if which.startswith("host_task")
                              else ("the user's turn", mcp_compat.USER_HEADER, mcp_compat.USER_META))
        where = f"{what} ({header} header)" if host[1] == "header" else f"{what} (_meta {meta})"
        try:
            return check_task(host[0], self.limits).strip(), host[1]
        except ApiError as exc:
            raise ApiError(exc.status, exc.code, f"{where}: {exc.message}") from None

    def scope_of_named(self, view: View, task: str) -> list[str]:
        """The tools ``task`` names (identifier-like names between identifier bounds)."""
        cat = view.catalogue
        if cat is None:
            return []
        index = cat.retriever.lexical_index
        return [cat.registry[i].name for i in index.exact(task) if index.identifier_like[i]]

    async def _share_exposure(self, key: str, exposure: Exposure) -> None:
        """Write ``exposure`` through to the state store (best effort: this replica has it)."""
        import anyio.to_thread

        with contextlib.suppress(RiskrankError):
            await anyio.to_thread.run_sync(lambda: self.state.put_exposure(key, exposure.task, sorted(exposure.names),
                                                                           time.time()))

    async def _exposure(self, key: str) -> Exposure | None:
        """The caller's latest result: this replica's, else the store's (made at another
        replica), its age carried over to this process's clock."""
        got = self.exposure.get(key)
        if got is not None or self.state is None:
            return got
        import anyio.to_thread

        try:
            row = await anyio.to_thread.run_sync(self.state.exposure, key)
        except RiskrankError as exc:
            raise StateUnavailable(unavailable_message(self.state.url, f"the caller's latest find_tools cannot be read: {exc}")
                                   ) from None
        if row is None:
            return None
        task, names, at = row
        return Exposure(task, frozenset(names), time.monotonic() - max(0.0, time.time() - at))

    def _expose(self, key: str, exposure: Exposure) -> None:
        # Replace, never accumulate: a tool returned once is not callable after a later
        # result withholds it.
        self.exposure.put(key, exposure)

    # -- call_tool ----------------------------------------------------------------------------------
    async def forward_call(self, arguments: dict[str, Any], call: Any) -> Any:
        """One ``call_tool``: its trace (a span per guard, the confirmation, the upstream) and
        its latency metric around :meth:`_forward_call`."""
        started = time.perf_counter()
        client = (_caller(call) or {}).get("name")
        name = arguments.get("name")
        outcome = "pending"  # a question the client answers in a later request (InputRequired)
        with tracing.root("call_tool", getattr(call, "traceparent", None), **{
                "riskrank.client": client, "riskrank.tool": name if isinstance(name, str) else None}) as span:
            try:
                result = await self._forward_call(arguments, call, span)
                code = mcp_compat.error_code(result)
                outcome = "allowed" if code is None else code
                if code is not None:
                    span.set_attribute("riskrank.code", code)
            finally:
                if self.metrics is not None:
                    self.metrics.called(client, outcome, time.perf_counter() - started)
        return result

    async def _forward_call(self, arguments: dict[str, Any], call: Any, span: Any) -> Any:
        """One ``call_tool``: build the call's context, run the chain of guards (:mod:`.guards`),
        then refuse, ask (the holds' reasons in one question) or forward; every outcome is an
        audit line with the chain's record (``guards``)."""
        import anyio

        extra = sorted(set(arguments) - {"name", "arguments"})
        name, args = arguments.get("name"), arguments.get("arguments")
        if extra or not isinstance(name, str) or not (args is None or isinstance(args, dict)):
            why = f"unknown argument(s) {extra}" if extra else "name must be a string and arguments an object"
            return _refusal("invalid_request", f"call_tool takes name (a string) and arguments (an object): {why}")
        if unencodable(arguments):
            return _refusal("invalid_request", _UNENCODABLE.format(what="call_tool"))
        key = call.session_key
        _, policy, view = self.served(_caller(call))
        try:
            exposure = await self._exposure(key)
        except StateUnavailable as exc:
            return await self._refuse(Decision(STATE_UNAVAILABLE, str(exc)), {"tool": name, "session": key, **_who(_caller(call))})
        record, record_error = SessionRecord(), None
        try:
            record, ignored = await self._anchor(call, view, None)
            if ignored is not None:
                with contextlib.suppress(AuditLogError):
                    await self.audit.append(task=exposure.task if exposure else None, tool=name, decision="session",
                                            code="task_ignored", reason=ignored, session=key, anchor=record.anchor,
                                            **_who(_caller(call)))
        except ApiError as exc:
            return _error(exc)
        except StoreSessionError as exc:
            return await self._refuse(Decision(STATE_UNAVAILABLE, unavailable_message(self.state.url, str(exc))),
                                      {"tool": name, "session": key, **_who(_caller(call))})
        except SessionError as exc:
            record_error = str(exc)
        route = view.routes.get(name)
        up = self.manager.upstreams.get(route[0]) if self.manager is not None and route is not None else None
        session = up.session if up is not None else None  # held: the upstream may go down meanwhile
        outcome = self.chain.run(CallContext(
            tool=name, arguments=args or {}, session=key, client=_caller(call), policy=policy, view=view, exposure=exposure,
            record=record, limits=self.call_limits, upstream_live=session is not None, monotonic=time.monotonic(),
            now=time.time(), record_error=record_error), stage=tracing.stage if span.is_recording() else None)
        guards = outcome.audit()
        if outcome.refusal is not None and outcome.record[-1][0] == BOUNDS:
            # nothing read the arguments: neither they nor the rest of the call go into the line
            return await self._refuse(Decision(outcome.refusal.code, outcome.refusal.message),
                                      {"tool": name, "session": key, **_who(_caller(call))}, guards=guards)
        ctx = outcome.context
        args = dict(ctx.arguments)
        level, provenance = ctx.level, ctx.provenance
        digest = call_digest(name, args)
        if span.is_recording():  # sizes and digests only, and only when a span keeps them
            span.set_attributes({"riskrank.arguments.sha256": digest,
                                 "riskrank.arguments.bytes": len(json.dumps(args, separators=(",", ":"), default=str)),
                                 **({"riskrank.level": level} if level is not None else {})})
        rec: dict[str, Any] = {"task": exposure.task if exposure else None, "tool": name, "level": level,
                               "provenance": provenance, "capabilities": (view.tools.get(name) or {}).get("capabilities") or None,
                               "session": key, **_who(_caller(call)), "arguments": args}
        if record.anchored:
            rec["anchor"] = record.anchor
        if (original := (view.tools.get(name) or {}).get("original")) is not None:
            rec["original"] = original  # its own name at its server (offered as SERVER__NAME): policy replay reads it
        if outcome.refusal is not None:
            return await self._refuse(Decision(outcome.refusal.code, outcome.refusal.message), rec, guards=guards)
        upstream_name, tool = route
        rec["upstream"] = upstream_name
        span.set_attribute("riskrank.upstream", upstream_name)
        if outcome.holds:
            span.set_attribute("riskrank.held", ",".join(h.code for h in outcome.holds))
            refused = await self._confirm(outcome, call, rec, digest, guards)
            if refused is not None:
                return refused
            span.set_attribute("riskrank.confirmed", rec.get("confirmed") or "")
            up = self.manager.upstreams.get(upstream_name) if self.manager is not None else None
            session = up.session if up is not None else None  # its server may have restarted while the user read
            if session is None:
                return await self._refuse(Decision(UPSTREAM_DOWN, f"the server of {name!r} stopped while its call was held; "
                                                                  "it was not run: try again later"), rec, guards=guards)
        link = getattr(call, "link", None)
        if link is not None and link.gone:  # nothing runs for a caller who cannot receive the result
            return await self._refuse(Decision(CALLER_GONE, f"{link.describe()}; {name!r} was not run"), rec, guards=guards)
        try:
            await self.audit.append(**rec, decision="allowed", code="allowed", reason=self._allowed_reason(outcome),
                                    digest=digest, guards=guards)
        except AuditLogError as exc:
            span.set_attribute("riskrank.decision", "refused")
            return _error(exc)
        span.set_attribute("riskrank.decision", "allowed")
        progress = call.progress if call.wants_progress else None
        timeout = policy.call_timeout(name, self.call_limits.timeout_s)
        started = time.monotonic()
        try:
            with tracing.stage("upstream") as up_span:
                up_span.set_attributes({"riskrank.upstream": upstream_name, "riskrank.upstream.tool": tool})
                try:
                    with anyio.fail_after(timeout):
                        result = await session.call_tool(tool, args, progress_callback=progress)
                finally:
                    if self.metrics is not None:
                        self.metrics.upstream_call(upstream_name, time.monotonic() - started)
                wired = result if isinstance(result, dict) else mcp_compat.wire(result)
                if up_span.is_recording():
                    up_span.set_attribute("riskrank.result.bytes", len(json.dumps(wired, separators=(",", ":"), default=str)))
            check_result(name, wired, self.call_limits)
            if wired.get("isError"):  # the tool answered with an error: the call ran and failed
                with contextlib.suppress(AuditLogError):
                    await self.audit.append(**rec, decision="failed", code="tool_error",
                                            reason=_error_text(wired), elapsed_s=round(time.monotonic() - started, 3))
            if self.scan_results != "off":
                wired = await self._screen_result(name, wired, rec)
            if ctx.row.get("source") and policy.flow != "off":
                await self._record_flow(key, name, wired, rec)
        except TimeoutError:
            message = (f"the upstream server {upstream_name!r} did not answer {tool!r} within {timeout:g} s "
                       "(--call-timeout, or the policy's call_timeouts); the call was abandoned")
            with contextlib.suppress(AuditLogError):
                await self.audit.append(**rec, decision="failed", code=CALL_TIMEOUT, reason=message)
            return _refusal(CALL_TIMEOUT, message)
        except LimitError as exc:
            with contextlib.suppress(AuditLogError):
                await self.audit.append(**rec, decision="failed", code=exc.code, reason=str(exc))
            return _refusal(exc.code, str(exc))
        except SessionError as exc:  # the result ran but its values cannot be recorded: not handed on
            message = (f"{name!r} ran, but the values of its result (an untrusted source) cannot be recorded ({exc}); its "
                       "answer is not handed on")
            with contextlib.suppress(AuditLogError):
                await self.audit.append(**rec, decision="failed", code="session_unavailable", reason=message)
            return _refusal("session_unavailable", message)
        except Exception as exc:  # the upstream's failure, reported to the agent without internals
            internal = isinstance(exc, AttributeError | TypeError | KeyError | IndexError | NameError | AssertionError)
            message = (f"the upstream server {upstream_name!r} failed on {tool!r}: {describe(exc)}" if not internal
                       else f"the upstream server {upstream_name!r} failed on {tool!r} (it stopped or the connection broke)")
            if not internal and ctx.row.get("source") and policy.flow != "off":
                # An untrusted source's error text reaches the agent as its answer would: read it too.
                try:
                    await self._record_flow(key, name, {"content": [{"type": "text", "text": message}]}, rec)
                except SessionError:
                    message = f"the upstream server {upstream_name!r} failed on {tool!r}"
            with contextlib.suppress(AuditLogError):
                await self.audit.append(**rec, decision="failed", code="upstream_error", reason=message,
                                        detail=describe(exc), elapsed_s=round(time.monotonic() - started, 3))
            return _refusal("upstream_error", message)
        return mcp_compat.as_call_result(wired)

    def _changed_while_held(self, call: Any, view: View, name: str, route: tuple[str, str] | None) -> Decision | None:
        """Why an approved call must not run after all: while it was held (a question can wait
        minutes) its tool was quarantined, withdrawn or withheld by the policy, moved to
        another server, or its definition changed. The user approved the tool as it was."""
        _, _, now = self.served(_caller(call))
        if now is view:
            return None
        code = now.held.get(name) or ("withdrawn" if name in now.withdrawn else None) or now.not_offered.get(name)
        if code is not None:
            why = now.withdrawn.get(name) or f"the policy no longer offers it ({code})"
            return Decision(code, f"{name!r} was approved, then changed while its call was held: {why}; it was not run")
        before, after = view.tools.get(name) or {}, now.tools.get(name) or {}
        if (now.routes.get(name) != route or before.get("description") != after.get("description")
                or view.schemas.get(name) != now.schemas.get(name)):
            return Decision("withdrawn", f"{name!r} was approved, then its server listed it otherwise while its call was "
                                         "held (another server, description or input schema); it was not run: call it again "
                                         "to be asked about it as it is now")
        return None

    async def _confirm(self, outcome: Outcome, call: Any, rec: dict[str, Any], digest: str, guards: list[list[str]]) -> Any:
        """Ask whoever confirms (the broker) about a held call, with every hold's reason; None
        when it was approved (``rec`` then says by whom, and the session remembers: the tool is
        confirmed once, inside the scope if it drifted, its flagged values the user's own),
        else the refusal to answer with."""
        ctx = outcome.context
        name, args, level, policy = ctx.tool, dict(ctx.arguments), int(ctx.level or 5), ctx.policy
        try:
            message = confirmation_text(name, level, ctx.provenance, rec["task"], args, reasons=self._reasons(outcome))
        except UnshowableCall as exc:
            return await self._refuse(Decision(CONFIRMATION_REQUIRED, str(exc)), rec, guards=guards)
        request = ConfirmationRequest(
            session=ctx.session, task=rec["task"], tool=name, level=level, arguments=args, bind=f"{ctx.session}:{digest}",
            message=message, provenance=ctx.provenance, evidence=tuple(ctx.row.get("evidence", ())), upstream=rec["upstream"],
            client=(ctx.client or {}).get("name"), policy=(ctx.client or {}).get("policy"))
        link = getattr(call, "link", None)
        waited = time.perf_counter()
        answer = None
        if self.metrics is not None:
            self.metrics.pending.inc()
        try:
            with tracing.stage("confirmation") as wait_span:
                wait_span.set_attribute("riskrank.broker", self.broker.name)
                answer = await self.broker.confirm(request, call)
                wait_span.set_attribute("riskrank.answer", answer.action)
        except mcp_compat.InputRequired:
            with contextlib.suppress(AuditLogError):
                await self.audit.append(**rec, decision="pending", code="confirmation_requested",
                                        reason=f"asked the user through {self.broker.name}", digest=digest, guards=guards)
            raise
        except BaseException as exc:
            import anyio

            if link is not None and link.gone:  # cancelled because the caller left (stdin closed): on record even so
                with anyio.CancelScope(shield=True):
                    await self._refuse(self._gone(name, link.describe()), rec, confirmation=CALLER_GONE, guards=guards)
            elif isinstance(exc, anyio.get_cancelled_exc_class()):  # the request cancelled while it waited: on record too
                with anyio.CancelScope(shield=True):
                    await self._refuse(self._gone(name, CANCELLED_WHILE_HELD), rec, confirmation=CALLER_GONE, guards=guards)
            raise
        finally:
            if self.metrics is not None:
                self.metrics.pending.dec()
                if answer is not None:
                    self.metrics.confirmation(answer.action, time.perf_counter() - waited)
        who = {"decided_by": answer.by} if answer.by else {}
        if answer.note:
            who["note"] = answer.note
        if answer.action == UNSUPPORTED:
            return await self._refuse(self._unconfirmable(outcome), rec, guards=guards)
        if answer.action == UNAVAILABLE:
            return await self._refuse(Decision(STATE_UNAVAILABLE, unavailable_message(
                self.state.url if self.state is not None else "", f"the approval cannot be held: {answer.note}")),
                rec, guards=guards)
        if answer.action in (CALLER_GONE, REPLICA_GONE):
            decision = (self._gone(name, answer.note or "the agent disconnected") if answer.action == CALLER_GONE else
                        Decision(REPLICA_GONE, f"{name!r} was held for an operator's approval, but {answer.note}"))
            return await self._refuse(decision, rec, confirmation=answer.action, guards=guards, **who)
        session_holds = [h.message for h in outcome.holds if h.message]
        if answer.action == TIMEOUT:
            needs = (f"is risk level {level} and needs an operator's approval (confirm_level {policy.confirm_level})"
                     if not session_holds else f"needs an operator's approval ({'; '.join(session_holds)})")
            return await self._refuse(Decision(CONFIRMATION_REQUIRED, (
                f"{name!r} {needs}, but {answer.note or 'no operator decided in time'}; ask the operator "
                "to watch the console's approvals page, then call it again")), rec, confirmation=TIMEOUT, guards=guards)
        if answer.action != ACCEPT:
            whom = f"the operator {answer.by!r}" if answer.by else "the user"
            held = {"held_because": session_holds} if session_holds else {}  # on record, not told to the agent
            return await self._refuse(Decision(DENIED, f"{whom} did not confirm {name!r} ({answer.action})"
                                               + (f": {answer.note}" if answer.note else "")),
                                      rec, confirmation=answer.action, guards=guards, digest=digest, **held, **who)
        if call_digest(name, args) != request.digest:  # what runs is what was approved, or nothing
            return await self._refuse(Decision(DENIED, f"the arguments of {name!r} changed after they were approved"), rec,
                                      guards=guards)
        changed = self._changed_while_held(call, ctx.view, name, ctx.view.routes.get(name))
        if changed is not None:  # what was approved is not what would run now: refused, and not remembered
            return await self._refuse(changed, rec, confirmation=answer.action, guards=guards, **who)
        rec["confirmed"] = self.broker.name
        rec.update(who)
        codes = {h.code for h in outcome.holds}
        cleared = [v for h in outcome.holds for v in h.values]
        task = self._covers_task(outcome)
        with contextlib.suppress(SessionError):  # not remembered: the next call is asked again
            await self._update(ctx.session, lambda r: r.with_confirmation(
                name, widen=DRIFT in codes, cleared=cleared, kind=confirmation_kind(name, args, ctx.view.schemas.get(name)),
                task=task))
        return None

    @staticmethod
    def _covers_task(outcome: Outcome) -> bool:
        """Whether approving this held call approves the task's tools (``once_per_task``): a call
        held for its level, inside the scope or also for drift (the question names the task and
        the agent's words, and the approval puts the tool in the scope). A call held because its
        server is untrusted or its definition's scan verdict is confirmed is asked every time,
        and its approval covers nothing else either; nor does one held for an untrusted value."""
        ctx = outcome.context
        codes = {h.code for h in outcome.holds}
        return (ctx.policy.confirm == "once_per_task" and CONFIRM in codes and codes <= {CONFIRM, DRIFT}
                and not ctx.row.get("confirm_every_call", True) and (ctx.record.in_scope(ctx.tool) or DRIFT in codes))

    @staticmethod
    def _gone(name: str, when: str) -> Decision:
        """The refusal of a held call whose caller left: withdrawn, never run."""
        return Decision(CALLER_GONE, f"{name!r} was held for an operator's approval, but {when}: the request was "
                                     "withdrawn and the call was not run")

    @staticmethod
    def _allowed_reason(outcome: Outcome) -> str:
        """Why a call that runs was or was not asked about: the policy's level decision, and the
        session's holds that put it to the user (drift, a value from an untrusted result). A call
        asked for drift alone says so, not "level 2 < confirm_level 3"."""
        ctx = outcome.context
        level = policy_guard.decision(ctx).reason
        held = [h.message for h in outcome.holds if h.message]
        if ctx.view.needs_confirmation(ctx.tool) and not any(h.code == CONFIRM for h in outcome.holds):
            level += (f"; not asked: an approval earlier in this session covers it (confirm: {ctx.policy.confirm}; the "
                      "approved call's line has the user's or operator's answer)")
        if not held:
            return level
        return "; ".join([level, *held] if any(h.code == CONFIRM for h in outcome.holds) else held)

    @staticmethod
    def _reasons(outcome: Outcome) -> list[str]:
        """The lines a question adds for its holds (a level alone adds none: the question says
        it), and the session's task beside the agent's words when they differ."""
        ctx = outcome.context
        lines = [h.message[0].upper() + h.message[1:] + "." for h in outcome.holds if h.message]
        record = ctx.record
        if record.anchored and record.anchor != ctx.task and not any(h.code == DRIFT for h in outcome.holds):
            lines.insert(0, f"The session started with {quoted(record.anchor)}.")
        if Gateway._covers_task(outcome):
            lines.append("Approving it also lets the other tools this task needs run without asking, while their arguments "
                         "carry nothing first seen in an untrusted result, until the session reads one.")
        elif Gateway._covers_kind(outcome):
            lines.append(f"Approving it also lets later calls of {ctx.tool} with other arguments (the same switches) run "
                         "without asking in this session, while they carry nothing first seen in an untrusted result, until "
                         "the session reads one.")
        return lines

    @staticmethod
    def _covers_kind(outcome: Outcome) -> bool:
        """Whether approving this held call lets later calls of its kind run unasked (``confirm``
        not ``every_call``; the confirm guard's terms): the question says so, since the operator
        sees this call's arguments only."""
        ctx = outcome.context
        return (ctx.policy.confirm != "every_call" and any(h.code == CONFIRM for h in outcome.holds)
                and not ctx.row.get("confirm_every_call", True) and ctx.level is not None
                and ctx.level <= ctx.policy.approval_ceiling)

    @staticmethod
    def _unconfirmable(outcome: Outcome) -> Decision:
        """The refusal when nobody can be asked: the policy's level text, or the session
        guard's reasons when it held the call."""
        ctx = outcome.context
        session = [h.message for h in outcome.holds if h.code in (DRIFT, FLOW)]
        if not session:
            return confirmation_refusal(ctx.policy, ctx.tool, int(ctx.level or 5))
        return Decision(CONFIRMATION_REQUIRED, (
            f"{ctx.tool!r} needs the user's confirmation ({'; '.join(session)}), but this client cannot ask its user (it "
            "declared no MCP elicitation). Use a client that supports elicitation, or let the operator approve calls in the "
            "console (riskrank mcp --console)"))

    async def _record_flow(self, key: str, name: str, wired: dict[str, Any], rec: dict[str, Any]) -> None:
        """Record the candidate values of an untrusted source's answer in the session's flow
        record (a bounded digest: values, never the text); :class:`SessionError` when it cannot
        be written (the answer is then not handed on)."""
        import anyio.to_thread

        text = result_text(wired)

        def read() -> tuple[list[Any], int]:
            return bounded(candidates(text.text))

        values, dropped = (await anyio.to_thread.run_sync(read)) if len(text.text) > THREAD_SCAN_CHARS else read()
        now = time.time()  # one more untrusted read, with or without values: earlier approvals stop holding
        forgot = 0

        def add(r: SessionRecord) -> SessionRecord:
            nonlocal forgot
            out = r.with_values(values, name, now)
            forgot = out.forgotten - r.forgotten  # the record as written (an update may be tried again)
            return out

        await self._update(key, add)
        if text.cut or dropped or text.binary or forgot:
            with contextlib.suppress(AuditLogError):
                await self.audit.append(**{k: v for k, v in rec.items() if k != "arguments"}, decision="recorded",
                                        code="flow_bounded", reason=(
                                            f"{len(values)} values of the answer recorded; {dropped} more left out, "
                                            f"{text.binary} binary items not read" + (
                                                f", {text.chars:,} characters read by their head and tail" if text.cut else "")
                                            + (f"; {forgot} of the session's oldest values forgotten (it keeps its latest "
                                               f"{MAX_FLOW_VALUES:,})" if forgot else "")),
                                        sha256=text.sha256)

    async def _screen_result(self, name: str, wired: dict[str, Any], rec: dict[str, Any],
                             resource: str | None = None) -> dict[str, Any]:
        """``--scan-results``: an answer (or the ``resource`` read) holding text addressed to
        the model is flagged in the audit log; with ``redact`` (and a poisoned finding) the
        agent gets a notice saying what was removed instead of it."""
        import anyio.to_thread

        found = await anyio.to_thread.run_sync(scan_result, wired)
        if not found:
            return wired
        poisoned = [f for f in found if f.verdict == "poisoned"]
        redact = self.scan_results == "redact" and bool(poisoned)
        reason = "; ".join(f"{f.kind} in {f.field}: {f.evidence!r}" for f in (poisoned or found)[:3])
        with contextlib.suppress(AuditLogError):
            await self.audit.append(**{k: v for k, v in rec.items() if k != "arguments"}, decision="result_flagged",
                                    code="result_injection", reason=reason, redacted=redact,
                                    findings=[f.to_dict() for f in found[:20]])
        if not redact:
            return wired
        if resource is not None:
            notice = (f"riskrank removed the resource {resource!r}: it holds text addressed to the model ({reason}). "
                      "The user can read it at the source.")
            return {"contents": [{"uri": resource, "mimeType": "text/plain", "text": notice}]}
        notice = (f"riskrank removed the answer of {name!r}: it holds text addressed to the model ({reason}). "
                  "The call ran; the user can read its result at the source.")
        return {"content": [{"type": "text", "text": notice}], "isError": False}

    async def _refuse(self, decision: Decision, rec: dict[str, Any], **extra: Any) -> Any:
        tracing.current().set_attributes({"riskrank.decision": "refused", "riskrank.code": decision.code})
        with contextlib.suppress(AuditLogError):  # a refusal stands even if it cannot be logged
            await self.audit.append(**rec, **extra, decision="refused", code=decision.code, reason=decision.reason)
        return _refusal(decision.code, decision.reason)

    # -- pass-through ---------------------------------------------------------------------------------
    # A client lists resources and prompts once, at connect (the gateway does not announce a
    # change of them): during start-up the lists wait for the first catalogue, as find_tools does.
    async def list_resources(self) -> list[dict[str, Any]]:
        await self.wait_ready()
        return self.manager.resources() if self.manager else []

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        await self.wait_ready()
        return self.manager.templates() if self.manager else []

    async def read_resource(self, uri: str, session_key: str = "stdio", client: dict[str, Any] | None = None) -> dict[str, Any]:
        """A resource of an upstream, passed through; its text is an untrusted read of the
        session like a source tool's answer (its values join the flow record and earlier
        approvals stop holding), unless the caller's policy (``client``'s, as the gate
        identified it) trusts that server's sources; ``--scan-results`` reads it as it reads
        an answer."""
        await self.wait_ready()
        up = self.manager.resource_owner(uri) if self.manager else None
        if up is None or up.session is None:
            raise LookupError(f"unknown resource {uri!r} (no running upstream server lists it)")
        _name, policy, _view = self.served(client)
        rec = {"tool": "resources/read", "upstream": up.name, "session": session_key}
        with contextlib.suppress(AuditLogError):
            await self.audit.append(**rec, decision="allowed", code="passthrough", reason=uri)
        result = await up.session.read_resource(_any_url(uri))
        wired = result if isinstance(result, dict) else mcp_compat.wire(result)
        if self.scan_results != "off":
            wired = await self._screen_result(f"resources/read {uri}"[:200], wired, rec, resource=uri)
        items = [c for c in wired.get("contents") or [] if isinstance(c, dict)]
        await self._read_passthrough(policy, "resources/read", up.name, f"resource {uri!r}", f"resources/read {uri}",
                                     [{"type": "text", "text": str(c["text"])} if "text" in c else {"type": "blob"}
                                      for c in items], session_key, rec)
        return wired

    async def _read_passthrough(self, policy: Policy, kind: str, upstream: str, what: str, label: str,
                                content: list[dict[str, Any]], session_key: str, rec: dict[str, Any]) -> None:
        """A resource or a prompt handed through is an untrusted read of the session, as a
        source's answer is (unless the caller's policy trusts that server's sources); one whose
        values cannot be recorded is not handed on (:class:`LookupError`, naming ``what``)."""
        if policy.flow == "off" or policy.trusted_sources.matches(kind, upstream):
            return
        try:
            await self._record_flow(session_key, label[:200], {"content": content}, rec)
        except SessionError as exc:
            raise LookupError(f"{what} was read but the session's record cannot be written ({exc})") from None

    async def list_prompts(self) -> list[dict[str, Any]]:
        await self.wait_ready()
        if not self.manager:
            return []
        return [{**p, "name": public} for public, _, p in self.manager.prompts()]

    async def get_prompt(self, name: str, arguments: dict[str, str] | None, session_key: str = "stdio",
                         client: dict[str, Any] | None = None) -> dict[str, Any]:
        """A prompt of an upstream, passed through; its messages are an untrusted read of the
        session as a resource's text is (a server's prompt can carry what it fetched: the
        latest e-mail, a web page), unless the caller's policy trusts that server's sources."""
        await self.wait_ready()
        for public, up, prompt in self.manager.prompts() if self.manager else []:
            if public == name and up.session is not None:
                _name, policy, _view = self.served(client)
                rec = {"tool": "prompts/get", "upstream": up.name, "session": session_key}
                with contextlib.suppress(AuditLogError):
                    await self.audit.append(**rec, decision="allowed", code="passthrough", reason=name)
                result = await up.session.get_prompt(prompt["name"], arguments)
                wired = result if isinstance(result, dict) else mcp_compat.wire(result)
                content = [m.get("content") for m in wired.get("messages") or [] if isinstance(m, dict)]
                await self._read_passthrough(policy, "prompts/get", up.name, f"prompt {name!r}", f"prompts/get {name}",
                                             [c for c in content if isinstance(c, dict)], session_key, rec)
                return wired
        raise LookupError(f"unknown prompt {name!r}")

    def handlers(self) -> mcp_compat.Handlers:
        h = mcp_compat.Handlers(self.list_tools, self.call_tool)
        if self.manager is not None:
            h.list_resources, h.list_resource_templates, h.read_resource = (
                self.list_resources, self.list_resource_templates, self.read_resource)
            h.list_prompts, h.get_prompt = self.list_prompts, self.get_prompt
        return h


_UNENCODABLE = ("{what}: a string in the request holds a lone surrogate (\\ud800-\\udfff alone), which is not Unicode "
                "text; nothing was done")


# -- running it ---------------------------------------------------------------------------------------------
def _level_summary(view: View, names: list[str]) -> str:
    counts = collections.Counter(view.levels[n][0] for n in names if n in view.levels)
    return ", ".join(f"L{lvl} {counts[lvl]}" for lvl in sorted(counts))


class _Catalogues:
    """Keeps the gateway's view in step with its upstreams: a rebuild (in a worker thread)
    whenever the manager reports a change; the new view replaces the old one whole."""

    def __init__(self, gateway: Gateway | None, manager: UpstreamManager, spec: ArtefactSpec, encoder: Any,
                 policy: Policy, audit: AuditLog, echo: Callable[[str], None], pins: PinStore | None = None,
                 policies: Policies | None = None) -> None:
        import anyio

        self.gateway, self.manager, self.spec, self.encoder = gateway, manager, spec, encoder
        self.policies = policies or Policies({"default": policy})
        #: The default policy: its trust settings (first_seen, on_poisoned, on_suspicious) are the gateway's.
        self.policy = self.policies.default_policy
        self.audit, self.echo, self.pins = audit, echo, pins
        self.dirty = anyio.Event()
        self.seen: dict[str, str] = {}
        self.scan_seen: dict[str, str] = {}
        self.scans: dict[str, Scan] = {}

    def _scan(self, record: dict[str, Any]) -> Scan:
        """The scan of one definition, remembered: a re-list of unchanged tools costs no scan."""
        return self._scan_many([record])[0]

    def _scan_many(self, records: list[dict[str, Any]]) -> list[Scan]:
        """The scans of definitions, remembered; those not seen yet are scanned in one batch
        (the learned detector's cost is per span, not per call). The rules alone unless the
        policy's ``learned_scan`` adds the detector (a scan is remembered under that choice)."""
        learned = self.policy.learned_scan
        keys = [("learned:" if learned else "rules:") + json.dumps(r, sort_keys=True, default=str) for r in records]
        # read from a local map: the catalogue's build scans in a worker thread while a call may scan one record
        known = {k: got for k in keys if (got := self.scans.get(k)) is not None}
        todo = {k: r for k, r in zip(keys, records, strict=True) if k not in known}
        if todo:
            fresh = dict(zip(todo, scan_definitions(list(todo.values()), DEFAULT if learned else None), strict=True))
            if len(self.scans) + len(fresh) > 20_000:
                self.scans.clear()
            self.scans.update(fresh)
            known.update(fresh)
        return [known[k] for k in keys]

    def trust(self, up_name: str, mine: list[dict[str, Any]], routes: dict[str, tuple[str, str]],
              cross: dict[tuple[str, str], list[Finding]] | None = None) -> tuple[dict[str, tuple[str, str]], dict[str, Scan]]:
        """One server's list against its pins and the scan: (public name -> (code, why)) for
        the tools held back, and every tool's scan (with ``cross``, the findings across servers,
        keyed by (server, the server's own name)). Pin decisions and new findings are audited."""
        held: dict[str, tuple[str, str]] = {}
        if self.pins is not None:
            for code, what in self.pins.take_alerts():  # a pin file changed outside riskrank: one line each
                self.echo(f"pins: {what}")
                self.audit.write(tool=None, decision="pins", code=code, reason=what)
            own = [{**r, "name": routes[r["name"]][1]} for r in mine]
            public = {routes[r["name"]][1]: r["name"] for r in mine}
            quarantined, events = self.pins.review(up_name, own, first_seen=self.policy.first_seen)
            for line in events:
                self.echo(f"pins: {line}")
                self.audit.write(tool=None, decision="pins", code="pin_change", reason=line, upstream=up_name)
            # the refusal is "quarantined: <why>": the code is not said twice
            held.update({public[n]: ("quarantined", why.removeprefix("quarantined: ")) for n, why in quarantined.items()
                         if n in public})
        scans = {r["name"]: with_findings(self._scan({**r, "name": routes[r["name"]][1]}),
                                          (cross or {}).get((up_name, routes[r["name"]][1]), [])) for r in mine}
        for name, sc in scans.items():
            mark = sc.verdict + ":" + sc.reason()
            if sc.verdict != "clean" and self.scan_seen.get(name) != mark:
                self.scan_seen[name] = mark
                action = self.policy.on_poisoned if sc.verdict == "poisoned" else self.policy.on_suspicious
                self.echo(f"scan: {name!r} of {up_name!r} is {sc.verdict} ({sc.reason()}): {action}")
                self.audit.write(tool=name, decision="scan", code=sc.verdict, reason=sc.reason(), upstream=up_name,
                                 action=action, findings=[f.to_dict() for f in sc.findings])
            action = {"poisoned": self.policy.on_poisoned, "suspicious": self.policy.on_suspicious}.get(sc.verdict)
            if action == "withhold" and name not in held:
                held[name] = (sc.verdict, f"the definition of {name!r} speaks to the model ({sc.reason()}); "
                                          "withheld by the policy")
        return held, scans

    def changed(self) -> None:
        self.dirty.set()

    async def build(self) -> View:
        import anyio.to_thread

        generation = self.manager.generation
        records, routes = upstream_records(self.manager)
        # One snapshot of the live servers for the whole build: the scan below yields the event
        # loop, and a server that drops out meanwhile must not leave tools that skipped its checks.
        live = list(self.manager.live())
        names = {up.name for up in live}
        records = [r for r in records if routes[r["name"]][0] in names]
        # Each server's list is checked on its own: one that cannot be built (two tools with
        # one name, say) withdraws that server's tools, not the others'.
        withdrawn: dict[str, str] = {}
        for up in live:
            mine = [r for r in records if routes[r["name"]][0] == up.name]
            try:
                record_registry(mine, up.name)
            except RegistryError as exc:
                why = (f"the server {up.name!r} listed its tools in a form that cannot be served ({exc}); its tools are "
                       "withdrawn until it lists them correctly")
                withdrawn.update({r["name"]: why for r in mine})
        held: dict[str, str] = {}
        scans: dict[str, Scan] = {}
        # Across servers: a look-alike of another server's tool name, a text naming another
        # server's tool (the definitions' own scans are remembered, so this costs no re-scan).
        served = {up.name: [{**r, "name": routes[r["name"]][1]} for r in records
                            if routes[r["name"]][0] == up.name and r["name"] not in withdrawn] for up in live}
        flat = [(s, r) for s, rs in served.items() for r in rs]
        # in a worker thread: a long listing, or the learned detector, does not hold up the event loop
        first = await anyio.to_thread.run_sync(self._scan_many, [r for _, r in flat])
        cross = cross_server_findings(served, {(s, r["name"]): sc for (s, r), sc in zip(flat, first, strict=True)})
        for up in live:
            mine = [r for r in records if routes[r["name"]][0] == up.name and r["name"] not in withdrawn]
            kept, up_scans = self.trust(up.name, mine, routes, cross)
            scans.update(up_scans)
            for name, (code, why) in kept.items():
                withdrawn[name], held[name] = why, code
        withheld_records = {r["name"]: r for r in records if r["name"] in withdrawn}
        records = [r for r in records if r["name"] not in withdrawn]
        source = "upstreams: " + ", ".join(u.name for u in live)
        registry, skipped = record_registry(records, source)
        return await anyio.to_thread.run_sync(lambda: build_views(registry, self.spec, self.encoder, self.policies, generation,
                                                                 routes=routes, skipped=skipped, withdrawn=withdrawn,
                                                                 held=held, scans=scans,
                                                                 withheld_records=withheld_records))

    def audit_upstreams(self, view: View) -> None:
        """An audit line (and a log line) for each upstream whose tools or state changed, once
        ``view`` serves: each is audited on connect, and what it offers is on record."""
        for up in self.manager.upstreams.values():
            names = sorted(p for p, (u, _) in view.routes.items() if u == up.name)
            mark = up.state + ":" + ",".join(f"{n}={view.levels[n][0]}" for n in names if n in view.levels)
            if self.seen.get(up.name) == mark:
                continue
            self.seen[up.name] = mark
            if up.state == "up":
                # what is offered is what is served: a tool the policy never offers, one that
                # trust withholds (quarantined, poisoned) and one whose definition was skipped
                # are each counted and named apart
                skipped = {n: why for n, why in view.skipped.items() if n in names}
                withheld = {n: view.held.get(n, "withdrawn") for n in names if n in view.withdrawn and n not in skipped}
                never = [n for n in names if n in view.not_offered and n not in withheld and n not in skipped]
                offered = [n for n in names if n not in view.not_offered and n not in withheld and n not in skipped]
                reason = (f"{len(names)} tools audited ({_level_summary(view, names)}); {len(offered)} offered, "
                          f"{len(never)} never offered by the policy")
                if withheld:
                    kinds = collections.Counter(withheld.values())
                    reason += f", {len(withheld)} withheld (" + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")"
                if skipped:
                    reason += f", {len(skipped)} skipped: " + "; ".join(f"{n} ({why})" for n, why in sorted(skipped.items()))
                self.echo(f"upstream {up.name!r}: {reason}")
                self.audit.write(tool=None, decision="upstream_up", code="audited", reason=reason, upstream=up.name,
                                 levels={n: view.levels[n][0] for n in names if n in view.levels},
                                 not_offered={n: c for n, c in view.not_offered.items() if n in names},
                                 withheld=withheld, skipped=skipped)
            else:
                self.audit.write(tool=None, decision="upstream_down", code=up.state, reason=up.last_error or up.state,
                                 upstream=up.name)

    async def watch_pins(self, every_s: float = 1.0) -> None:
        """Rebuild when the pin file changes under the gateway (an operator's ``riskrank pins
        approve``): an approved tool is offered again within about ``every_s``."""
        import anyio

        if self.pins is None:
            return
        while True:
            await anyio.sleep(every_s)
            if self.pins.refresh():
                self.changed()

    async def keep(self) -> None:
        import anyio

        while True:
            await self.dirty.wait()
            self.dirty = anyio.Event()
            await anyio.sleep(0.05)  # several upstreams changing at once: one rebuild
            try:
                view = await self.build()
            except (RiskrankError, OSError) as exc:
                # Fail closed: the previous catalogue rated lists that are no longer current.
                why = f"the catalogue could not be rebuilt from the servers' new lists ({exc})"
                self.echo(f"{why}; every upstream tool is withdrawn until a list builds")
                self.audit.write(tool=None, decision="withdrawn", code="catalogue_rebuild_failed", reason=why)
                if self.gateway is not None:
                    self.gateway.view = withdrawn_view(self.gateway.view, self.manager.generation, why)
                continue
            if self.gateway is not None:
                self.gateway.view = view
            self.audit_upstreams(view)


def _any_url(uri: str) -> Any:
    """A resource URI as both SDKs' ``read_resource`` takes it (1.x wants an AnyUrl)."""
    if mcp_compat.sdk_major() >= 2:
        return uri
    from pydantic import AnyUrl

    return AnyUrl(uri)
