"""A listening socket and the uvicorn server on it (the HTTP API, MCP's streamable HTTP).

The socket is bound first, so a port conflict is a one-line error before anything loads,
and port 0 gives a free port that ``getsockname`` reads back.

Slow and idle clients are cut off: a request's head and body must arrive within
:data:`READ_TIMEOUT_S` of the connection opening (or of the previous response ending), so
a client that sends one byte a second, or nothing at all, holds a connection for at most
that long; an idle keep-alive connection closes after :data:`KEEP_ALIVE_S`; past
:data:`MAX_CONNECTIONS` open connections and tasks, uvicorn answers 503. A response that
streams for long (an MCP event stream) is not cut: the bound is on what the client sends.
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


READ_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5.0
MAX_CONNECTIONS = 512


def bounded_h11(read_timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline on what the client sends (module docstring)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11(H11Protocol):  # type: ignore[misc]
        _deadline: Any = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
                self._disarm()  # the whole request is in: the rest is the server's time

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return BoundedH11


def uvicorn_server(app: Any, sock: socket.socket, log_level: str = "warning", lifespan: str = "off", *,
                   extra: str = "serve", read_timeout_s: float = READ_TIMEOUT_S) -> Any:
    """A uvicorn server for ``app`` on ``sock`` (start it with ``run(sockets=[sock])``), with
    slow and idle clients cut off (module docstring)."""
    with requires(extra, "serving over HTTP"):
        import uvicorn

    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=log_level == "debug",
                            server_header=False, timeout_graceful_shutdown=10, lifespan=lifespan,
                            http=bounded_h11(read_timeout_s), timeout_keep_alive=KEEP_ALIVE_S,
                            limit_concurrency=MAX_CONNECTIONS)
    return uvicorn.Server(config)
