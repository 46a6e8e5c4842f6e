"""A small remote MCP server for tests/test_remote_upstreams.py: the SDK's own FastMCP (1.x) or
MCPServer (2.x) app over SSE or streamable HTTP, served by uvicorn on 127.0.0.1, behind a
check that every request carries ``Authorization: Bearer $REMOTE_TEST_TOKEN`` (401 otherwise),
as a team's shared server behind a gateway would be.

    python remote_upstream.py sse|http PORT [CERTFILE KEYFILE]

Its one tool is ``<kind>_echo`` (``sse_echo``, ``http_echo``), so two of them behind one
gateway keep their own names. With a certificate and key it serves https.
"""

from __future__ import annotations

import os
import sys
from typing import Any

try:  # 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # 1.x
    from mcp.server.fastmcp import FastMCP as Server


def build(kind: str) -> Any:
    """The SDK's app for ``kind`` (``sse`` or ``http``), with one echo tool."""
    server = Server(f"remote-{kind}")

    label = "SSE" if kind == "sse" else "streamable HTTP"

    @server.tool(name=f"{kind}_echo", description=f"Echo a message back through the {label} server.")
    def echo(message: str) -> str:
        return f"{kind}: {message}"

    return server.sse_app() if kind == "sse" else server.streamable_http_app()


def require_token(app: Any, token: str) -> Any:
    """Every HTTP request must carry the bearer token: the check a team's server makes."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope.get("headers", ())).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    import uvicorn

    kind, port = sys.argv[1], int(sys.argv[2])
    tls = {"ssl_certfile": sys.argv[3], "ssl_keyfile": sys.argv[4]} if len(sys.argv) > 4 else {}
    uvicorn.run(require_token(build(kind), os.environ["REMOTE_TEST_TOKEN"]), host="127.0.0.1", port=port,
                log_level="warning", lifespan="on", **tls)
