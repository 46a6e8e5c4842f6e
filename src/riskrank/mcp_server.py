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
through :class:`riskrank.server.Catalogue`; nothing is scored here.

The official ``mcp`` SDK is imported inside the functions that need it (it takes seconds to
import), so the ``riskrank`` CLI starts without it. No ``from __future__ import annotations``:
the SDK builds the tools' input schemas from the real annotations of local functions.
"""

import dataclasses
import json
import os
import shlex
from collections.abc import Callable
from typing import Any

import click

from riskrank.catalogue import ArtefactSpec, Catalogue, load_catalogue
from riskrank.encoder import make_encoder
from riskrank.errors import RiskrankError, error_body
from riskrank.modes import MAX_K, MODES
from riskrank.server import (
    ApiError,
    Gate,
    Limits,
    bind_socket,
    catalogue_options,
    check_bind,
    read_token,
    token_options,
    uvicorn_server,
)

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

    ``catalogue`` is a :class:`~riskrank.server.Catalogue` or a callable returning the active
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
        lim = self.limits
        if not isinstance(task, str):
            raise ApiError(422, "invalid_request", "task: must be a string")
        if not task.strip():
            raise ApiError(422, "task_empty", "task: the task text is empty")
        if len(task) > lim.max_task_chars:
            raise ApiError(422, "task_too_long", f"task: at most {lim.max_task_chars} characters")
        k = self.default_k if k is None else k
        if isinstance(k, bool) or not isinstance(k, int):
            raise ApiError(422, "invalid_request", "k: must be an integer")
        if not 1 <= k <= lim.max_k:
            raise ApiError(422, "k_out_of_range", f"k: must be between 1 and {lim.max_k}, got {k}")
        if mode is not None and mode not in MODES:
            raise ApiError(422, "invalid_mode", f"mode: must be one of {', '.join(MODES)}")
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


def _result(payload: dict[str, Any], is_error: bool = False) -> Any:
    from mcp_types import CallToolResult, TextContent

    text = json.dumps(payload, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=payload, is_error=is_error)


def _error_result(exc: BaseException) -> Any:
    return _result(error_body(exc), is_error=True)


def build_server(finder: ToolFinder, *, name: str = "riskrank", upstream: Any = None) -> Any:
    """An :class:`mcp.server.mcpserver.MCPServer` exposing ``find_tools`` (and, with an
    ``upstream`` client, ``call_tool``)."""
    from typing import Annotated

    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, ToolAnnotations
    from pydantic import Field

    from riskrank import __version__

    server = MCPServer(name, title="riskrank tool search", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

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
            return _result(finder.find(task, k, mode))
        except (ApiError, RiskrankError) as exc:
            return _error_result(exc)

    server.add_tool(
        find_tools, name="find_tools", title="Find tools (risk-aware)", description=FIND_TOOLS_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False),
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

        server.add_tool(
            call_tool, name="call_tool", title="Call an upstream tool", description=CALL_TOOL_DESCRIPTION,
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True),
        )
    return server


# -- proxy mode --------------------------------------------------------------------------------------
async def upstream_tools(client: Any, max_pages: int = 1000) -> list[dict[str, Any]]:
    """Every tool of an MCP server (all ``tools/list`` pages) as ``tools/list`` JSON records.
    A tool without a description gets its title or its name (MCP makes description optional;
    riskrank ranks on it)."""
    from riskrank.risk import split_name

    records, cursor = [], None
    for _ in range(max_pages):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            rec = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
            if not str(rec.get("description") or "").strip():
                rec["description"] = rec.get("title") or (rec.get("annotations") or {}).get("title") or split_name(rec["name"])
            records.append(rec)
        cursor = page.next_cursor
        if not cursor:
            return records
    raise RiskrankError(f"the upstream server returned more than {max_pages} pages of tools")


def _leaf_message(exc: BaseException) -> str:
    """The first innermost error of an exception group (anyio task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def upstream_registry(records: list[dict[str, Any]], source: str) -> Any:
    from riskrank.registry import ToolRegistry

    if not records:
        raise RiskrankError(f"{source}: the upstream server lists no tools")
    return ToolRegistry.from_data({"tools": records}, fmt="mcp", source=source)


def upstream_params(command: str) -> Any:
    """StdioServerParameters for ``--upstream CMD``: split like a shell would, with this
    process's environment (the upstream runs as if the user had started it)."""
    from mcp import StdioServerParameters

    argv = shlex.split(command)
    if not argv:
        raise RiskrankError("--upstream needs a command, e.g. --upstream 'npx -y @modelcontextprotocol/server-filesystem /tmp'")
    return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))


async def run(spec: ArtefactSpec, encoder: Any, *, upstream: str | None = None, forward: bool = False, k: int = 5,
              transport: str = "stdio", sock: Any = None, token: str | None = None, echo: Callable[[str], None] = print) -> None:
    """Load the catalogue (from the registry, or from the upstream server), then serve."""
    from contextlib import AsyncExitStack

    import anyio.to_thread

    async with AsyncExitStack() as stack:
        client, registry = None, None
        if upstream:
            from mcp import Client

            try:
                client = await stack.enter_async_context(Client(upstream_params(upstream)))
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
        server = build_server(ToolFinder(catalogue, default_k=k), upstream=client if forward else None)
        if transport == "stdio":
            await server.run_stdio_async()
            return
        host, port = sock.getsockname()[:2]
        app = Gate(server.streamable_http_app(host=host), token=token)
        echo(f"streamable HTTP at http://{host}:{port}/mcp  auth: {'bearer token' if token else 'none (--insecure, loopback)'}")
        await uvicorn_server(app, sock, "warning", lifespan="on").serve(sockets=[sock])


@click.command("mcp")
@catalogue_options
@click.option("--upstream", default=None, metavar="CMD",
              help="Proxy mode: start this MCP server (a command line), audit its tools/list, serve find_tools over it.")
@click.option("--forward", is_flag=True, help="Proxy mode: also expose call_tool, forwarding calls to tools find_tools returned.")
@click.option("-k", "k", type=click.IntRange(1, MAX_K), default=5, show_default=True, help="Default k of find_tools.")
@click.option("--transport", type=click.Choice(["stdio", "streamable-http"]), default="stdio", show_default=True)
@token_options
def mcp_command(registry: str | None, checkpoint: str | None, mode: str | None, risk_source: str, fill_levels: str,
                encoder: str | None, device: str, encoder_backend: str, threads: int | None, candidates: int | None, first_stage: str, upstream: str | None, forward: bool, k: int,
                transport: str, host: str, port: int, token_file: str | None, token_env: str, insecure: bool) -> None:
    """Serve find_tools (risk-aware tool search) over MCP: stdio, or streamable HTTP.

    The catalogue is --registry (default: the bundled demo registry) or, with --upstream CMD,
    the tools of another MCP server, audited by the keyword annotator and their MCP
    annotations. Log lines go to stderr; stdout is the protocol."""
    import anyio

    from riskrank.server import _demo_registry, _echo

    if upstream and registry:
        raise RiskrankError("give --registry or --upstream, not both")
    if forward and not upstream:
        raise RiskrankError("--forward needs --upstream")
    sock, token = None, None
    if transport == "streamable-http":
        token = read_token(token_file, token_env)
        check_bind(host, token, insecure)
        sock = bind_socket(host, port)
    spec = ArtefactSpec(registry or ("" if upstream else _demo_registry()), checkpoint, mode, risk_source, fill_levels,
                        candidates, first_stage)
    enc = make_encoder(encoder, device=device, threads=threads, backend=encoder_backend)
    anyio.run(lambda: run(spec, enc, upstream=upstream, forward=forward, k=k, transport=transport, sock=sock,
                          token=token, echo=_echo))
