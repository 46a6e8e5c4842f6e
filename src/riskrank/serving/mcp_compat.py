"""The few places where riskrank's MCP code meets the MCP Python SDK, for both majors.

riskrank runs on mcp 1.x (1.30 and later) and 2.x, so that installing it next to a package
that needs ``mcp<2`` does not break its MCP server. What differs, and what stays the same:

=======================  ============================================  ===================================
                         mcp 1.x                                       mcp 2.x
=======================  ============================================  ===================================
high-level server        ``mcp.server.fastmcp.FastMCP`` (no title or   ``mcp.server.mcpserver.MCPServer``
                         version; the host is set at construction)
streamable HTTP app      ``server.streamable_http_app()``              ``server.streamable_http_app(host=)``
client                   ``ClientSession`` over ``stdio_client``       ``mcp.Client(StdioServerParameters)``
model fields             camelCase (``isError``, ``nextCursor``)       snake_case, camelCase aliases
=======================  ============================================  ===================================

Common to both, and used as is: ``mcp.types`` (models are built with their camelCase wire
names, which both accept), ``StdioServerParameters``, ``add_tool`` and
``run_stdio_async``, and a tool function returning a ``CallToolResult`` (passed through).
Records are read with ``model_dump(by_alias=True)``: the wire shape, the same in both.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from functools import cache
from typing import Any

from riskrank.extras import requires

FEATURE = "the MCP server (riskrank mcp)"


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


def text_result(payload: dict[str, Any], *, is_error: bool = False) -> Any:
    """A ``CallToolResult`` whose text is the JSON of ``payload`` and whose structured content
    is ``payload`` itself (what an LLM reads and what a program reads agree)."""
    t = types()
    text = json.dumps(payload, separators=(",", ":"))
    return t.CallToolResult(content=[t.TextContent(type="text", text=text)], structuredContent=payload, isError=is_error)


def tool_annotations(*, read_only: bool, destructive: bool, idempotent: bool, open_world: bool) -> Any:
    return types().ToolAnnotations(readOnlyHint=read_only, destructiveHint=destructive, idempotentHint=idempotent,
                                   openWorldHint=open_world)


def new_server(name: str, *, title: str, version: str, instructions: str, host: str = "127.0.0.1") -> Any:
    """A high-level server object (``add_tool``, ``run_stdio_async``); ``host`` is where a
    streamable-HTTP app will listen (the SDK's DNS-rebinding protection reads it)."""
    if sdk_major() >= 2:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer(name, title=title, version=version, instructions=instructions, log_level="WARNING")
    else:
        from mcp.server.fastmcp import FastMCP

        server = FastMCP(name, instructions=instructions, log_level="WARNING", host=host)
    return server


def add_tool(server: Any, fn: Callable[..., Any], *, name: str, title: str, description: str, annotations: Any) -> None:
    server.add_tool(fn, name=name, title=title, description=description, annotations=annotations)


def streamable_http_app(server: Any, host: str = "127.0.0.1") -> Any:
    """The server's streamable-HTTP ASGI app (``/mcp``); ``host`` as given to :func:`new_server`
    (mcp 1.x reads it there)."""
    if sdk_major() >= 2:
        return server.streamable_http_app(host=host)
    return server.streamable_http_app()


def stdio_params(argv: Sequence[str], env: dict[str, str] | None = None) -> Any:
    """StdioServerParameters for a command line (``env``: the child's environment)."""
    sdk_major()
    from mcp import StdioServerParameters

    return StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env)


class Upstream:
    """A connected MCP client, the same two calls in both majors."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def list_tools_page(self, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """One ``tools/list`` page: (tools as wire-shaped dicts, next cursor or None)."""
        if sdk_major() >= 2:
            page = await self._client.list_tools(cursor=cursor)
        else:
            page = await self._client.list_tools(params=types().PaginatedRequestParams(cursor=cursor))
        wire = page.model_dump(by_alias=True, exclude_none=True, mode="json")
        return wire.get("tools", []), wire.get("nextCursor")

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The upstream's ``CallToolResult``, unchanged."""
        return await self._client.call_tool(name, arguments)


@contextlib.asynccontextmanager
async def connect_stdio(params: Any) -> AsyncIterator[Upstream]:
    """Start an MCP server as a child process (``params``: :func:`stdio_params`) and yield an
    initialised :class:`Upstream` client for it."""
    if sdk_major() >= 2:
        from mcp import Client

        async with Client(params) as client:
            yield Upstream(client)
    else:
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield Upstream(session)
