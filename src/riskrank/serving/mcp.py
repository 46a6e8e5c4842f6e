"""The MCP server: ``riskrank mcp``, risk-aware tool search for MCP clients.

It exposes one tool, ``find_tools(task, k, mode)``, that returns the risk-aware top-k tool
specs of a catalogue (name, description, input schema, risk level and the evidence for it,
and the rule filter's reasons): the "tool search" pattern, where an agent sees one search
tool instead of hundreds of tool definitions, with risky tools pushed down or withheld.

The catalogue is a registry file (``--registry``), or, in proxy mode (``--upstream CMD``),
another MCP server: riskrank starts it, reads its ``tools/list`` (all pages), audits every
tool with the keyword annotator, which reads the MCP annotations (``readOnlyHint``,
``destructiveHint``, ``openWorldHint``) as evidence, and serves ``find_tools`` over it. With
``--forward`` it also exposes ``call_tool(name, arguments)``, which forwards a call to the
upstream server only for a tool that ``find_tools`` has returned (so the agent can call only
what the risk-aware search exposed).

Transports: stdio (default) and streamable HTTP (``--transport streamable-http``, behind the
same bearer-token gate as ``riskrank serve``). Scoring is :class:`RiskAwareRetriever`'s,
through :class:`riskrank.catalogue.Catalogue`; nothing is scored here. The SDK (1.x or 2.x)
is reached through :mod:`riskrank.serving.mcp_compat` only, and imported when a server is
built (it takes seconds to import).

No ``from __future__ import annotations``: the SDK builds the tools' input schemas from the
real annotations of local functions.
"""

import dataclasses
import os
import shlex
from collections.abc import Callable
from typing import Annotated, Any

from riskrank._version import __version__
from riskrank.catalogue import ArtefactSpec, Catalogue, load_catalogue
from riskrank.errors import RiskrankError, error_body
from riskrank.modes import MODES
from riskrank.registry import ToolRegistry
from riskrank.risk import split_name
from riskrank.serving import mcp_compat
from riskrank.serving.auth import Gate
from riskrank.serving.listen import uvicorn_server
from riskrank.serving.requests import ApiError, Limits, check_k, check_mode, check_task

FIND_TOOLS_DESCRIPTION = (
    "Find the tools for a task in a large tool catalogue. Returns at most k tool specs (name, "
    "description, input_schema), ranked by relevance to the task with operationally risky tools "
    "pushed down, each with its risk level (1 safe .. 5 critical), the evidence for that level, and "
    "the reasons when a safety rule admitted or withheld a tool. Call it before acting, and use only "
    "the tools it returns."
)
CALL_TOOL_DESCRIPTION = (
    "Call a tool of the upstream server by name with its arguments. Only tools that find_tools has "
    "returned can be called; call find_tools first."
)
INSTRUCTIONS = (
    "This server searches a tool catalogue with risk-aware ranking. Describe the task to find_tools "
    "and act only with the tools it returns; risky tools are ranked down or withheld."
)


class ToolFinder:
    """``find_tools`` independent of any transport: validation, retrieval, the response.

    ``catalogue`` is a :class:`~riskrank.catalogue.Catalogue` or a callable returning the active
    one. ``exposed`` collects every tool name ``find_tools`` has returned (the set
    ``call_tool`` forwards to)."""

    def __init__(self, catalogue: Catalogue | Callable[[], Catalogue], *, default_k: int = 5,
                 limits: Limits | None = None) -> None:
        self._get = catalogue if callable(catalogue) else (lambda: catalogue)
        self.limits = limits or Limits()
        if not 1 <= default_k <= self.limits.max_k:
            raise RiskrankError(f"k must be between 1 and {self.limits.max_k}, got {default_k}")
        self.default_k = default_k
        self.exposed: set[str] = set()

    @property
    def catalogue(self) -> Catalogue:
        return self._get()

    def find(self, task: Any, k: Any = None, mode: Any = None) -> dict[str, Any]:
        """The risk-aware top-k as a JSON-ready dict; :class:`ApiError` on bad input (the
        same codes as the HTTP API)."""
        check_task(task, self.limits)
        k = check_k(self.default_k if k is None else k, self.limits)
        check_mode(mode)
        cat = self.catalogue
        cat.check_request(mode, None)
        res = cat.retriever.retrieve(task, k=k, mode=mode)
        fallback = set(res.fallback)
        broke = {d.name: d for d in res.deferred}
        tools = []
        for t in res.tools:
            spec = cat.tool_spec(t.index)
            reasons = []
            if t.name in fallback and t.name in broke:
                reasons.append(f"admitted as fallback (fewer than K tools met every rule) although it breaks: {', '.join(broke[t.name].reasons)}")
            tools.append({
                "rank": t.rank, "name": spec["name"], "description": spec["description"], "input_schema": spec["input_schema"],
                "risk_level": spec["effective_level"], "risk_provenance": spec["risk_provenance"],
                "risk_evidence": spec["risk_evidence"], "permissions": spec["permissions"], "annotations": spec["annotations"],
                "score": round(t.score, 6), "f_rel": round(t.f_rel, 6), "f_risk": round(t.f_risk, 6), "reasons": reasons,
            })
        returned = {t["name"] for t in tools}
        self.exposed |= returned
        withheld = [{"name": d.name, "reasons": d.reasons, "redundant_with": d.redundant_with}
                    for d in res.deferred if d.name not in returned]
        return {
            "task": task, "mode": res.mode, "lambda": res.lam, "tools": tools, "withheld": withheld,
            "unlabelled": res.unlabelled,
            "catalogue": {"source": cat.spec.registry, "n_tools": len(cat.registry), "generation": cat.generation},
        }


def _error_result(exc: BaseException) -> Any:
    return mcp_compat.text_result(error_body(exc), is_error=True)


def build_server(finder: ToolFinder, *, name: str = "riskrank", upstream: mcp_compat.Upstream | None = None,
                 host: str = "127.0.0.1") -> Any:
    """An MCP server (the SDK's high-level server class) exposing ``find_tools`` (and, with
    an ``upstream`` client, ``call_tool``); ``host``: where a streamable-HTTP app of it will
    listen."""
    CallToolResult = mcp_compat.types().CallToolResult  # first: a missing SDK is the extra's one-line error
    from pydantic import Field

    server = mcp_compat.new_server(name, title="riskrank tool search", version=__version__, instructions=INSTRUCTIONS,
                                   host=host)

    # The parameters are typed Any for the SDK's validator and described in full by their JSON
    # schema: ToolFinder.find checks them, so a bad argument gets the same error codes as HTTP.
    lim = finder.limits

    def find_tools(
        task: Annotated[Any, Field(description="The task the agent has to do, in natural language.",
                                   json_schema_extra={"type": "string", "minLength": 1, "maxLength": lim.max_task_chars})],
        k: Annotated[Any, Field(description="How many tools to return.",
                                json_schema_extra={"type": "integer", "minimum": 1, "maximum": lim.max_k})] = finder.default_k,
        mode: Annotated[Any, Field(description="Ranking pipeline [default: the server's].",
                                   json_schema_extra={"type": ["string", "null"], "enum": [*MODES, None]})] = None,
    ) -> CallToolResult:
        try:
            return mcp_compat.text_result(finder.find(task, k, mode))
        except RiskrankError as exc:
            return _error_result(exc)

    mcp_compat.add_tool(
        server, find_tools, name="find_tools", title="Find tools (risk-aware)", description=FIND_TOOLS_DESCRIPTION,
        annotations=mcp_compat.tool_annotations(read_only=True, destructive=False, idempotent=True, open_world=False),
    )
    if upstream is not None:
        async def call_tool(
            name: Annotated[str, Field(description="A tool name that find_tools returned.")],
            arguments: Annotated[dict[str, Any] | None, Field(description="The tool's arguments (its input_schema).")] = None,
        ) -> CallToolResult:
            if name not in finder.exposed:
                return _error_result(ApiError(403, "not_exposed", f"tool {name!r} has not been returned by find_tools; call find_tools first"))
            try:
                return await upstream.call_tool(name, arguments or {})
            except Exception as exc:
                return _error_result(ApiError(502, "upstream_error", f"the upstream server failed on {name!r}: {_leaf_message(exc)}"))

        mcp_compat.add_tool(
            server, call_tool, name="call_tool", title="Call an upstream tool", description=CALL_TOOL_DESCRIPTION,
            annotations=mcp_compat.tool_annotations(read_only=False, destructive=True, idempotent=False, open_world=True),
        )
    return server


# -- proxy mode --------------------------------------------------------------------------------------
async def upstream_tools(client: mcp_compat.Upstream, max_pages: int = 1000) -> list[dict[str, Any]]:
    """Every tool of an MCP server (all ``tools/list`` pages) as ``tools/list`` JSON records.
    A tool without a description gets its title or its name (MCP makes description optional;
    riskrank ranks on it)."""
    records, cursor = [], None
    for _ in range(max_pages):
        page, cursor = await client.list_tools_page(cursor)
        for rec in page:
            if not str(rec.get("description") or "").strip():
                rec["description"] = rec.get("title") or (rec.get("annotations") or {}).get("title") or split_name(rec["name"])
            records.append(rec)
        if not cursor:
            return records
    raise RiskrankError(f"the upstream server returned more than {max_pages} pages of tools")


def _leaf_message(exc: BaseException) -> str:
    """The first innermost error of an exception group (anyio task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def upstream_registry(records: list[dict[str, Any]], source: str) -> ToolRegistry:
    if not records:
        raise RiskrankError(f"{source}: the upstream server lists no tools")
    return ToolRegistry.from_data({"tools": records}, fmt="mcp", source=source)


def upstream_params(command: str) -> Any:
    """StdioServerParameters for ``--upstream CMD``: split like a shell would, with this
    process's environment (the upstream runs as if the user had started it)."""
    argv = shlex.split(command)
    if not argv:
        raise RiskrankError("--upstream needs a command, e.g. --upstream 'npx -y @modelcontextprotocol/server-filesystem /tmp'")
    return mcp_compat.stdio_params(argv, env=dict(os.environ))


async def run(spec: ArtefactSpec, encoder: Any, *, upstream: str | None = None, forward: bool = False, k: int = 5,
              transport: str = "stdio", sock: Any = None, token: str | None = None, echo: Callable[[str], None] = print) -> None:
    """Load the catalogue (from the registry, or from the upstream server), then serve."""
    from contextlib import AsyncExitStack

    mcp_compat.sdk_major()  # a missing SDK is the extra's one-line error, before anything starts
    import anyio.to_thread

    async with AsyncExitStack() as stack:
        client, registry = None, None
        if upstream:
            try:
                client = await stack.enter_async_context(mcp_compat.connect_stdio(upstream_params(upstream)))
                records = await upstream_tools(client)
            except RiskrankError:
                raise
            except BaseException as exc:
                if not isinstance(exc, Exception | BaseExceptionGroup):
                    raise
                raise RiskrankError(f"the upstream server {upstream!r} failed: {_leaf_message(exc)}") from None
            source = f"upstream: {upstream}"
            registry = upstream_registry(records, source)
            spec = dataclasses.replace(spec, registry=source, fill_levels="keyword")
        catalogue = await anyio.to_thread.run_sync(lambda: load_catalogue(spec, encoder, registry=registry))
        if hasattr(encoder, "warm"):
            await anyio.to_thread.run_sync(encoder.warm)  # the first find_tools must not wait for the model
        s = catalogue.summary()
        echo(f"find_tools over {s['n_tools']} tools from {spec.registry} (mode {s['mode']}; levels: "
             + ", ".join(f"{n} {p}" for p, n in s["risk_provenance"].items()) + ")")
        host = sock.getsockname()[0] if sock is not None else "127.0.0.1"
        server = build_server(ToolFinder(catalogue, default_k=k), upstream=client if forward else None, host=host)
        if transport == "stdio":
            await server.run_stdio_async()
            return
        port = sock.getsockname()[1]
        app = Gate(mcp_compat.streamable_http_app(server, host), token=token)
        echo(f"streamable HTTP at http://{host}:{port}/mcp  auth: {'bearer token' if token else 'none (--insecure, loopback)'}")
        await uvicorn_server(app, sock, "warning", lifespan="on", extra="mcp").serve(sockets=[sock])
