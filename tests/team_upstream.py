"""A small MCP server (stdio) for the team tests: an on-call team's service tools, from a
read-only listing to a destructive drop, on the SDK's own server (MCPServer in 2.x, FastMCP in
1.x: the team tests run under both majors). The policies of the tests pin their levels, so what
each client may call does not depend on the level model. With ``TEAM_CALLS`` set, every call
that runs is appended to that file first (one line: tool and argument), so a test can check
that nothing ran without a decision on record."""

import os

try:  # 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("ops")


def _ran(tool: str, arg: str = "") -> None:
    path = os.environ.get("TEAM_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{tool} {arg}\n")
            fh.flush()
            os.fsync(fh.fileno())


@server.tool()
def list_services() -> str:
    """List the services running in the cluster with their status."""
    _ran("list_services")
    return "api: up, worker: up, db: up"


@server.tool()
def read_service_logs(service: str) -> str:
    """Read the latest log lines of a service."""
    _ran("read_service_logs", service)
    return f"{service}: all quiet"


@server.tool()
def restart_service(service: str) -> str:
    """Restart a service in the cluster (its requests fail for a few seconds)."""
    _ran("restart_service", service)
    return f"{service} restarted"


@server.tool()
def drop_database(name: str) -> str:
    """Drop a database and every table in it, irrecoverably."""
    _ran("drop_database", name)
    return f"{name} dropped"


if __name__ == "__main__":
    server.run("stdio")
