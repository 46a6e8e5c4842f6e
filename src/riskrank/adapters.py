"""Agent-framework integration: show the model only the risk-aware top-k of its tools.

:class:`ToolGuard` takes a task and the tools an agent could use, in the shapes agent code
already holds them, and returns the same objects, filtered to the risk-aware top-k and
ranked. Accepted tool shapes:

- OpenAI chat-completions tools ``{"type": "function", "function": {name, description, parameters}}``,
  Responses-API function tools ``{"type": "function", "name", "description", "parameters"}``
  and legacy functions ``{"name", "description", "parameters"}``;
- MCP tools, as ``tools/list`` dicts (``inputSchema``, ``annotations``) or ``mcp.types.Tool``
  objects (anything with ``model_dump``);
- fastmcp server-side tools (``await server.list_tools()``; read through ``to_mcp_tool()``);
- LangChain tools (``@tool``, ``StructuredTool``, MCP tools loaded by langchain-mcp-adapters
  or ``langchain.mcp``, whose MCP annotations sit in ``metadata``);
- objects with ``name``/``description`` attributes (for example an OpenAI Agents SDK
  ``FunctionTool``, whose ``params_json_schema`` is read).

Framework hooks, each built on :meth:`ToolGuard.names` (docs/serving.md has a recipe each):
:meth:`ToolGuard.agents_mcp_server` (an OpenAI Agents SDK MCP server whose tool list is
riskrank's top-k, in riskrank's order), :meth:`ToolGuard.agents_tool_filter` (its async
``tool_filter``), :meth:`ToolGuard.langchain_middleware` (LangChain/LangGraph
``create_agent``), :meth:`ToolGuard.tool_node_guard` (a LangGraph ``ToolNode`` that refuses a
tool it did not show) and :meth:`ToolGuard.tool_filter` (a plain ``(context, tool) -> bool``).
Rankings run off the event loop in the async hooks (the encoder loads on first use).

Two backends, one interface:

- in-process (default): a :class:`~riskrank.pipeline.RiskAwareRetriever` over the tools
  (or over ``registry``, a file of audited tools); unlabelled tools get the keyword
  annotator's level, which reads MCP annotations (docs/serving.md says exactly how);
- remote (``url=``): a ``riskrank serve`` instance, over HTTP with the standard library.

This module imports nothing outside the standard library and :mod:`riskrank.errors` when it
is imported; the retriever (numpy, torch, the encoder) loads on the first ranking.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from riskrank.errors import RiskrankError, check_task
from riskrank.modes import MAX_K

__all__ = ["ToolGuard", "task_of", "tool_name", "tool_record"]
log = logging.getLogger("riskrank.adapters")
MCP_HINTS = {"read_only_hint": "readOnlyHint", "destructive_hint": "destructiveHint",
             "idempotent_hint": "idempotentHint", "open_world_hint": "openWorldHint"}


class GuardError(RiskrankError):
    """A tool spec the guard cannot read, or a failed call to a remote riskrank server."""

    code = "guard_error"


# -- reading tool specs ------------------------------------------------------------------------------
def _is_langchain(tool: Any) -> bool:
    return any(c.__module__.startswith("langchain_core.") and c.__name__ == "BaseTool" for c in type(tool).__mro__)


def _langchain_record(tool: Any) -> dict[str, Any]:
    """A LangChain tool as a tools/list-shaped dict. ``convert_to_openai_tool`` reads both a
    pydantic and a dict (MCP) ``args_schema``; MCP annotations sit in ``metadata``, at the top
    (langchain-mcp-adapters, camelCase) or under ``mcp.tool.annotations`` (langchain.mcp,
    snake_case)."""
    # Importable: the tool is LangChain's.
    from langchain_core.utils.function_calling import convert_to_openai_tool

    fn = convert_to_openai_tool(tool)["function"]
    meta = tool.metadata if isinstance(getattr(tool, "metadata", None), Mapping) else {}
    nested = ((meta.get("mcp") or {}).get("tool") or {}).get("annotations") if isinstance(meta.get("mcp"), Mapping) else None
    raw = nested if isinstance(nested, Mapping) else meta
    hints = {MCP_HINTS.get(k, k): v for k, v in raw.items() if MCP_HINTS.get(k, k) in MCP_HINTS.values() and v is not None}
    rec: dict[str, Any] = {"name": fn["name"], "description": fn.get("description") or "", "parameters": fn.get("parameters")}
    if hints:
        rec["annotations"] = hints
    return rec


def _as_mapping(tool: Any) -> Mapping[str, Any] | None:
    if isinstance(tool, Mapping):
        return tool
    to_mcp = getattr(tool, "to_mcp_tool", None)  # fastmcp server tools: their own MCP form (no callables)
    if callable(to_mcp):
        with contextlib.suppress(Exception):
            return to_mcp().model_dump(by_alias=True, exclude_none=True, mode="json")
    if _is_langchain(tool):
        return _langchain_record(tool)
    dump = getattr(tool, "model_dump", None)  # pydantic models: mcp.types.Tool and friends
    if callable(dump):
        try:
            return dump(by_alias=True, exclude_none=True, mode="json")
        except (TypeError, ValueError):  # PydanticSerializationError (a field holds a function): read attributes
            return None
    return None


def tool_list(tools: Any) -> Sequence[Any]:
    """``tools`` as the guard takes them: a list (or tuple, or other sequence) of tools in any
    accepted shape, not one tool, a ``{"tools": [...]}`` document or a string."""
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        hint = " (a {\"tools\": [...]} document: pass its list)" if isinstance(tools, Mapping) and "tools" in tools else ""
        raise GuardError(f"tools must be a list of tools, got {type(tools).__name__}{hint}")
    return tools


def tool_name(tool: Any) -> str:
    """The name of a tool in any accepted shape."""
    m = _as_mapping(tool)
    if m is not None:
        fn = m.get("function") if isinstance(m.get("function"), Mapping) else m
        name = fn.get("name")
    else:
        name = getattr(tool, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise GuardError(f"cannot read a tool name from {type(tool).__name__} {str(tool)[:80]!r}")
    return name.strip()


def tool_record(tool: Any) -> dict[str, Any]:
    """One tool as a riskrank registry record: name, description, parameters (JSON schema),
    annotations (MCP hints) and risk_level when the spec carries one."""
    m = _as_mapping(tool)
    if m is not None:
        fn = m.get("function") if isinstance(m.get("function"), Mapping) else m
        description = fn.get("description")
        params = next((fn[k] for k in ("parameters", "inputSchema", "input_schema", "params_json_schema") if fn.get(k) is not None), None)
        annotations = m.get("annotations", fn.get("annotations"))
        risk = m.get("risk_level", fn.get("risk_level"))
        title = m.get("title") or (annotations.get("title") if isinstance(annotations, Mapping) else None)
    else:
        description = getattr(tool, "description", None)
        params = next((getattr(tool, k) for k in ("params_json_schema", "parameters", "inputSchema", "input_schema")
                       if getattr(tool, k, None) is not None), None)
        annotations = _as_mapping(getattr(tool, "annotations", None)) if getattr(tool, "annotations", None) is not None else None
        risk, title = getattr(tool, "risk_level", None), getattr(tool, "title", None)
    name = tool_name(tool)
    if not isinstance(description, str) or not description.strip():
        # MCP makes description optional; rank on the title, else on the name's words.
        description = title if isinstance(title, str) and title.strip() else name.replace("_", " ").replace("-", " ")
    rec: dict[str, Any] = {"name": name, "description": description}
    if isinstance(params, Mapping):
        rec["parameters"] = dict(params)
    if isinstance(annotations, Mapping) and annotations:
        rec["annotations"] = {MCP_HINTS.get(k, k): v for k, v in annotations.items() if v is not None}
    if risk is not None:
        rec["risk_level"] = risk
    return rec


# -- the guard ---------------------------------------------------------------------------------------
class ToolGuard:
    """Filter an agent's tools to the risk-aware top-k for each task.

    >>> guard = ToolGuard(k=3)   # core+graph+rule on the shipped base model
    >>> visible = guard.select("delete the old log files", openai_tools)   # same dicts, at most 3

    ``registry``: a registry file (or :class:`~riskrank.registry.ToolRegistry`) of audited
    tools. Without ``tools``, the guard ranks the whole registry; with ``tools``, it ranks the
    agent's tools, taking descriptions and audited levels from the registry where it knows
    the name. ``mode`` defaults to the strongest safe one available
    (:func:`riskrank.modes.safe_default_mode`): ``core+graph+rule`` with heads (a ``checkpoint``,
    or the shipped base model when none is named; ``checkpoint="none"``: no heads),
    else ``dense+rule`` (cosine relevance plus the rule filter). ``fill`` is the rule
    filter's fill policy: ``safe`` (default) never tops the list up with a risky tool, so
    fewer than ``k`` tools may come back; ``min_score`` a relevance floor (None: the score
    scale's measured default; ``float("-inf")``: none). ``fill_levels="keyword"`` (default)
    gives unlabelled tools the keyword annotator's level; ``"none"`` leaves them to the rule
    filter's fail-closed path. ``url``/``token``: use a ``riskrank serve`` instance instead;
    its registry decides, and the agent's tools outside its top-k are not shown.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        checkpoint: str | None = None,
        k: int = 5,
        mode: str | None = None,
        lam: float | None = None,
        encoder: Any = None,
        fill_levels: str = "keyword",
        fill: str = "safe",
        min_score: float | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 10.0,
        cache_size: int = 16,
    ) -> None:
        if url and (registry is not None or checkpoint):
            raise GuardError("give either url (a riskrank server) or registry/checkpoint (in-process), not both")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise GuardError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
        self.registry, self.checkpoint, self.k, self.lam, self.encoder_spec = registry, checkpoint, k, lam, encoder
        # None: the catalogue's strongest safe mode (the base model's heads when no checkpoint is named).
        self.mode = mode
        self.fill_levels, self.fill, self.min_score = fill_levels, fill, min_score
        self.url, self.token, self.timeout = (url.rstrip("/") if url else None), token, timeout
        self._encoder: Any = None
        self._catalogues: OrderedDict[str, Any] = OrderedDict()
        self._allowed: OrderedDict[str, list[str]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    # -- public surface ------------------------------------------------------------------------
    def select(self, task: str, tools: Sequence[Any] | None = None) -> list[Any]:
        """The agent's tools (the same objects) that the risk-aware top-k keeps, best first.
        Without ``tools``: the ranked entries of the registry's (or server's) top-k, as dicts."""
        if tools is None:
            return self.rank(task)["tools"]
        by_name = {tool_name(t): t for t in tool_list(tools)}
        return [by_name[n] for n in self.names(task, tools)]

    def names(self, task: str, tools: Sequence[Any] | None = None) -> list[str]:
        """Names of the kept tools, best first."""
        names = [t["name"] for t in self.rank(task, tools)["tools"]]
        if tools is not None and self.url:  # the server ranked its registry: keep what the agent has
            have = {tool_name(t) for t in tools}
            names = [n for n in names if n in have]
        return names[: self.k]

    def rank(self, task: str, tools: Sequence[Any] | None = None) -> dict[str, Any]:
        """The full retrieval result (scores, f_rel, f_risk, levels and their provenance, and
        in rule modes the deferred tools with reasons), as ``POST /v1/retrieve`` returns it."""
        check_task(task, GuardError)
        if self.url:
            return self._remote(task)
        cat = self._catalogue(tools)
        res = cat.retriever.retrieve(task, k=min(self.k, len(cat.registry)), mode=self.mode, lam=self.lam)
        return cat.result_dict(res)

    def tool_filter(self, task: str | Callable[[Any], str], tools: Sequence[Any] | None = None) -> Callable[[Any, Any], bool]:
        """A per-tool predicate ``(context, tool) -> bool`` in the shape of the OpenAI Agents
        SDK's MCP ``tool_filter``: True for the tools in the risk-aware top-k for the task.
        ``task`` is a string or a function of the context (e.g. ``lambda ctx:
        ctx.run_context.context["task"]``). A per-tool hook never sees the whole list, so the
        candidates are ``tools``, else the registry (or the remote server's)."""
        if tools is None and self.registry is None and not self.url:
            raise GuardError("tool_filter needs the candidate tools: pass tools=, or build the guard with registry= or url=")

        def allowed(context: Any, tool: Any) -> bool:
            text = task(context) if callable(task) else task
            return tool_name(tool) in self._allowed_names(text, tools)

        return allowed

    # -- async forms and framework hooks -------------------------------------------------------
    async def anames(self, task: str, tools: Sequence[Any] | None = None) -> list[str]:
        """:meth:`names` in a worker thread: the encoder (loaded on first use) and the ranking
        never block an event loop."""
        return await asyncio.to_thread(self._allowed_names, task, list(tools) if tools is not None else None)

    async def aselect(self, task: str, tools: Sequence[Any]) -> list[Any]:
        """:meth:`select` in a worker thread."""
        by_name = {tool_name(t): t for t in tool_list(tools)}
        return [by_name[n] for n in await self.anames(task, tools)]

    def _no_task(self, where: str, warned: set[str], hint: str) -> None:
        if where not in warned:  # once per server or agent, not once per tool
            warned.add(where)
            log.warning("riskrank: no task for %s, so no tools are shown; %s", where, hint)

    def agents_mcp_server(self, server: Any, task: str | Callable[[Any], str | None] | None = None) -> Any:
        """An OpenAI Agents SDK MCP server (``MCPServerStdio``, ``MCPServerStreamableHttp``)
        whose tool list is riskrank's top-k for the run's task, in riskrank's order (a
        ``tool_filter`` sees one tool at a time and cannot reorder). The task is ``task`` (a
        string, or a function of the run context), else the run context's ``task``, else the
        run's latest user message (:func:`task_of`); without one, no tools, and one warning.
        Returns ``server``, its ``list_tools`` wrapped."""
        original = server.list_tools
        warned: set[str] = set()

        async def list_tools(run_context: Any = None, agent: Any = None) -> list[Any]:
            tools = await original(run_context, agent)
            text = task(run_context) if callable(task) else task or task_of(run_context)
            if not text:
                self._no_task(f"MCP server {getattr(server, 'name', '?')!r}", warned,
                              "pass Runner.run(..., context={'task': ...}) or a user message")
                return []
            return await self.aselect(text, tools)

        server.list_tools = list_tools
        return server

    def agents_tool_filter(self, task: str | Callable[[Any], str | None] | None = None) -> Callable[[Any, Any], Any]:
        """An async ``tool_filter`` for the OpenAI Agents SDK's MCP servers: it fetches the
        server's whole tool list itself (once per task and list), ranks it off the event loop,
        and keeps the tools of riskrank's top-k (in the server's order: use
        :meth:`agents_mcp_server` for riskrank's). The task as in :meth:`agents_mcp_server`;
        without one, no tools and one warning per server."""
        warned: set[str] = set()
        locks: dict[str, asyncio.Lock] = {}
        chosen: OrderedDict[tuple[str, str], set[str]] = OrderedDict()

        async def tool_filter(ctx: Any, tool: Any) -> bool:
            run_context = getattr(ctx, "run_context", None)
            text = task(run_context) if callable(task) else task or task_of(run_context)
            server_name = str(getattr(ctx, "server_name", "?"))
            if not text:
                self._no_task(f"MCP server {server_name!r}", warned, "pass Runner.run(..., context={'task': ...}) or a user message")
                return False
            key = (server_name, text)
            async with locks.setdefault(server_name, asyncio.Lock()):
                if key not in chosen:
                    server = next((s for s in getattr(ctx.agent, "mcp_servers", []) if s.name == server_name), None)
                    if server is None or getattr(server, "session", None) is None:
                        raise GuardError(f"MCP server {server_name!r} is not connected: its tools cannot be ranked")
                    listing = (await server.session.list_tools()).tools
                    chosen[key] = set(await self.anames(text, listing))
                    while len(chosen) > self._cache_size:
                        chosen.popitem(last=False)
            return tool_name(tool) in chosen[key]

        return tool_filter

    def langchain_middleware(self, task: str | Callable[[Any], str | None] | None = None) -> Any:
        """A LangChain ``AgentMiddleware`` for ``create_agent`` (a LangGraph graph): each model
        call sees only riskrank's top-k of the agent's tools, in riskrank's order, and a call
        to a tool it was not shown is answered with a ``not_exposed`` tool message instead of
        running. The task is ``task`` (a string, or a function of the agent state), else the
        latest human message. Needs ``langchain`` (``pip install 'riskrank[frameworks]'``)."""
        from riskrank.extras import requires

        with requires("frameworks", "ToolGuard.langchain_middleware"):
            from langchain.agents.middleware import AgentMiddleware
            from langchain_core.messages import ToolMessage
        guard = self
        warned: set[str] = set()

        def task_for(state: Any) -> str | None:
            text = task(state) if callable(task) else task or _last_human(state)
            if not text:
                guard._no_task("the LangChain agent", warned, "give the agent a human message or pass task=")
            return text

        def refusal(request: Any, shown: list[str]) -> Any:
            name = request.tool_call["name"]
            return ToolMessage(f"not_exposed: {name!r} was not among the tools shown for this task ({', '.join(shown) or 'none'})",
                               tool_call_id=request.tool_call["id"], status="error")

        class RiskRankToolSelection(AgentMiddleware):
            """Shows the model riskrank's top-k tools for the task; refuses the others."""

            def __init__(self) -> None:
                super().__init__()
                self.tools_seen: list[Any] = []

            def _tools(self, request: Any) -> list[Any]:
                tools = [t for t in request.tools if not isinstance(t, dict)]
                self.tools_seen = tools  # the agent's tool set (fixed per agent): what a tool call is checked against
                return tools

            def wrap_model_call(self, request: Any, handler: Any) -> Any:
                text, tools = task_for(request.state), self._tools(request)
                return handler(request.override(tools=guard.select(text, tools) if text and tools else []))

            async def awrap_model_call(self, request: Any, handler: Any) -> Any:
                text, tools = task_for(request.state), self._tools(request)
                return await handler(request.override(tools=await guard.aselect(text, tools) if text and tools else []))

            def _shown(self, request: Any) -> list[str]:
                text = task_for(request.state)
                return guard._allowed_names(text, self.tools_seen) if text and self.tools_seen else []

            def wrap_tool_call(self, request: Any, handler: Any) -> Any:
                shown = self._shown(request)
                return handler(request) if request.tool_call["name"] in shown else refusal(request, shown)

            async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
                shown = await asyncio.to_thread(self._shown, request)
                return await handler(request) if request.tool_call["name"] in shown else refusal(request, shown)

        return RiskRankToolSelection()

    def tool_node_guard(self, tools: Sequence[Any], task: str | Callable[[Any], str | None] | None = None) -> Callable[[Any, Any], Any]:
        """``wrap_tool_call`` for a LangGraph ``ToolNode`` over ``tools`` run synchronously; a
        graph run with ``ainvoke`` (MCP tools are async only) needs :meth:`tool_node_wrappers`."""
        return self.tool_node_wrappers(tools, task)["wrap_tool_call"]

    def tool_node_wrappers(self, tools: Sequence[Any], task: str | Callable[[Any], str | None] | None = None
                           ) -> dict[str, Callable[[Any, Any], Any]]:
        """``wrap_tool_call`` and ``awrap_tool_call`` for a LangGraph ``ToolNode`` over ``tools``
        (``ToolNode(tools, **guard.tool_node_wrappers(tools))``; a hand-built graph binds
        ``guard.select(task, tools)`` to its model): a call runs only if the tool is in
        riskrank's top-k for the task (``task``, else the latest human message), else the node
        answers a ``not_exposed`` tool message. Both: without the async one, a graph run with
        ``ainvoke`` calls the sync one, which cannot run a tool that is async only (an MCP
        tool) and ranks on the event loop; the async one ranks in a worker thread."""
        from riskrank.extras import requires

        with requires("frameworks", "ToolGuard.tool_node_wrappers"):
            from langchain_core.messages import ToolMessage
        tools = list(tools)

        def shown_for(request: Any) -> list[str]:
            state = request.state
            text = task(state) if callable(task) else task or _last_human(state)
            return self._allowed_names(text, tools) if text else []

        def refusal(request: Any, shown: list[str]) -> Any:
            name = request.tool_call["name"]
            return ToolMessage(f"not_exposed: {name!r} was not among the tools shown for this task ({', '.join(shown) or 'none'})",
                               tool_call_id=request.tool_call["id"], status="error")

        def guard_call(request: Any, execute: Any) -> Any:
            shown = shown_for(request)
            return execute(request) if request.tool_call["name"] in shown else refusal(request, shown)

        async def aguard_call(request: Any, execute: Any) -> Any:
            shown = await asyncio.to_thread(shown_for, request)
            return await execute(request) if request.tool_call["name"] in shown else refusal(request, shown)

        return {"wrap_tool_call": guard_call, "awrap_tool_call": aguard_call}

    # -- internals -----------------------------------------------------------------------------
    def _allowed_names(self, task: str, tools: Sequence[Any] | None) -> list[str]:
        key = task + "\x00" + (",".join(sorted(tool_name(t) for t in tools)) if tools is not None else "")
        with self._lock:
            if key in self._allowed:
                self._allowed.move_to_end(key)
                return self._allowed[key]
        names = self.names(task, tools)
        with self._lock:
            self._allowed[key] = names
            while len(self._allowed) > self._cache_size:
                self._allowed.popitem(last=False)
        return names

    def _records(self, tools: Sequence[Any] | None, known: Any) -> list[dict[str, Any]]:
        records = []
        for t in tools or ():
            rec = tool_record(t)
            if known is not None and rec["name"] in known:
                rec = {**known[rec["name"]].to_dict(), **{k: v for k, v in rec.items() if k == "annotations"}}
            records.append(rec)
        if not records:
            raise GuardError("no tools to choose from")
        names = [r["name"] for r in records]
        if len(set(names)) != len(names):
            raise GuardError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
        return records

    def _base_registry(self) -> Any:
        from riskrank.registry import ToolRegistry

        if self.registry is None or isinstance(self.registry, ToolRegistry):
            return self.registry
        self.registry = ToolRegistry.load(self.registry)
        return self.registry

    def _catalogue(self, tools: Sequence[Any] | None) -> Any:
        """The catalogue for a tool set, built once per distinct set (an agent's tool list is
        usually the same from one turn to the next)."""
        from riskrank.catalogue import ArtefactSpec, load_catalogue
        from riskrank.encoder import make_encoder
        from riskrank.registry import ToolRegistry

        base = self._base_registry()
        if tools is not None:
            tool_list(tools)
        if tools is None:
            if base is None:
                raise GuardError("no tools given and no registry: pass tools= or build the guard with registry=")
            key, source, reg = "registry", base.source, base
        else:
            records = self._records(tools, base)
            key = hashlib.sha256(json.dumps(records, sort_keys=True, default=str).encode()).hexdigest()
            source, reg = "<agent tools>", None
        with self._lock:
            if key in self._catalogues:
                self._catalogues.move_to_end(key)
                return self._catalogues[key]
            if self._encoder is None:
                self._encoder = make_encoder(self.encoder_spec)
        if reg is None:
            reg = ToolRegistry.from_data(records, fmt="plain", source=source)
        spec = ArtefactSpec(source, self.checkpoint, self.mode, "labels", self.fill_levels, fill=self.fill, min_score=self.min_score)
        cat = load_catalogue(spec, self._encoder, registry=reg)
        with self._lock:
            self._catalogues[key] = cat
            while len(self._catalogues) > self._cache_size:
                self._catalogues.popitem(last=False)
        return cat

    def _remote(self, task: str) -> dict[str, Any]:
        body: dict[str, Any] = {"task": task, "k": self.k, "mode": self.mode}
        if self.lam is not None:
            body["lambda"] = self.lam
        req = urllib.request.Request(
            self.url + "/v1/retrieve", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {self.token}"} if self.token else {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read())["error"]
                raise GuardError(f"riskrank server: {err['code']}: {err['message']}") from None
            except (ValueError, KeyError, TypeError):
                raise GuardError(f"riskrank server answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise GuardError(f"cannot reach the riskrank server at {self.url}: {getattr(exc, 'reason', exc)}") from None


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content]
        return " ".join(p for p in parts if p) or None
    return None


def _last_human(state: Any) -> str | None:
    """The latest human message of a LangChain/LangGraph agent state (``messages``)."""
    messages = state.get("messages", []) if isinstance(state, Mapping) else getattr(state, "messages", [])
    for m in reversed(list(messages or [])):
        role = getattr(m, "type", None) or (m.get("role") if isinstance(m, Mapping) else None)
        if role in ("human", "user"):
            return _content_text(getattr(m, "content", None) if not isinstance(m, Mapping) else m.get("content"))
        if isinstance(m, tuple) and len(m) == 2 and m[0] in ("user", "human"):
            return _content_text(m[1])
    return None


def task_of(run_context: Any) -> str | None:
    """The task of an OpenAI Agents SDK run: the app's ``context["task"]`` (or
    ``context.task``), else the run's latest user message (``turn_input``, which the Runner
    sets before it lists tools); None when there is neither."""
    if run_context is None:
        return None
    ctx = getattr(run_context, "context", None)
    value = ctx.get("task") if isinstance(ctx, Mapping) else getattr(ctx, "task", None)
    if isinstance(value, str) and value.strip():
        return value
    for item in reversed(list(getattr(run_context, "turn_input", None) or [])):
        if isinstance(item, Mapping) and item.get("role") == "user":
            return _content_text(item.get("content"))
    return None
