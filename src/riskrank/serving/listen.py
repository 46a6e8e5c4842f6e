"""A listening socket and the uvicorn server on it (the HTTP API, MCP's streamable HTTP).

The socket is bound first, so a port conflict is a one-line error before anything loads,
and port 0 gives a free port that ``getsockname`` reads back.
"""

from __future__ import annotations

import socket
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.extras import requires


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket (port 0: a free port, read back with ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only when it does, and
    # without it a keep-alive response (headers, then body) waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise RiskrankError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def uvicorn_server(app: Any, sock: socket.socket, log_level: str = "warning", lifespan: str = "off", *,
                   extra: str = "serve") -> Any:
    """A uvicorn server for ``app`` on ``sock`` (start it with ``run(sockets=[sock])``)."""
    with requires(extra, "serving over HTTP"):
        import uvicorn

    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=log_level == "debug",
                            server_header=False, timeout_graceful_shutdown=10, lifespan=lifespan)
    return uvicorn.Server(config)
