"""Slow and idle clients against the real uvicorn server riskrank serves with: a connection
that sends nothing, or its request one byte at a time, is cut off at the read deadline; a
normal client, keep-alive included, is served; a long answer is not cut."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from riskrank.serving.listen import bind_socket, uvicorn_server

DEADLINE_S = 1.0
GUARD_S = 15.0  # how long the test waits before calling a connection held (not a speed target)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/slow":  # the server's own time does not count against the client
        await asyncio.sleep(DEADLINE_S * 2)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def server():
    sock = bind_socket("127.0.0.1", 0)
    srv = uvicorn_server(app, sock, "error", read_timeout_s=DEADLINE_S)
    srv.install_signal_handlers = lambda: None  # uvicorn < 0.29
    thread = threading.Thread(target=lambda: asyncio.run(srv.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.02)
    yield sock.getsockname()[:2]
    srv.should_exit = True
    thread.join(10)


def held_for(addr, trickle: bytes = b"") -> float:
    """Seconds until the server closes a connection that sends ``trickle`` a byte every 0.2 s
    (nothing when empty); GUARD_S when it never does."""
    start = time.monotonic()
    with socket.create_connection(addr) as c:
        c.settimeout(0.2)
        i = 0
        while time.monotonic() - start < GUARD_S:
            if i < len(trickle):
                try:
                    c.sendall(trickle[i:i + 1])
                except OSError:
                    break
                i += 1
            try:
                if c.recv(65536) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
    return time.monotonic() - start


def request(c: socket.socket, path: str = "/") -> bytes:
    c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while not data.endswith(b"ok"):
        chunk = c.recv(65536)
        assert chunk, data
        data += chunk
    return data


def test_an_idle_connection_is_cut_off(server):
    assert held_for(server) < GUARD_S


def test_a_slowloris_head_or_body_is_cut_off(server):
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    assert held_for(server, head) < GUARD_S
    body = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"b" * 100
    assert held_for(server, body) < GUARD_S


def test_normal_clients_keep_alive_and_slow_answers_are_served(server):
    with socket.create_connection(server, timeout=GUARD_S) as c:
        assert request(c).startswith(b"HTTP/1.1 200")
        assert request(c).startswith(b"HTTP/1.1 200")  # the same connection, the next request
        assert request(c, "/slow").startswith(b"HTTP/1.1 200")  # longer than the read deadline


def test_a_flood_of_posts_is_refused_at_once_not_queued():
    """Gate's max_inflight (the MCP endpoint's bound): of 40 concurrent POSTs at a limit of 8,
    8 reach the app and the rest are answered 503 overloaded with Retry-After at once."""
    import anyio
    import httpx

    from riskrank.serving.auth import Gate

    entered = 0
    release = anyio.Event()

    async def slow(scope, receive, send):
        nonlocal entered
        entered += 1
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    gate = Gate(slow, token=None, max_inflight=8)

    async def main() -> list[httpx.Response]:
        out: list[httpx.Response] = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gate), base_url="http://x") as c:
            async def one() -> None:
                out.append(await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}))

            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(one)
                with anyio.fail_after(30):
                    while len(out) < 32:  # the refusals come back while 8 are held
                        await anyio.sleep(0.01)
                release.set()
        return out

    responses = anyio.run(main)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 8 + [503] * 32 and entered == 8 and gate.inflight == 0
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers["retry-after"] == "1" and refused.json()["error"]["code"] == "overloaded"
