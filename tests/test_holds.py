"""A hold belongs to a live caller on a live replica.

A call held for an operator is withdrawn (``caller_gone``) the moment its caller leaves (its
HTTP connection closes, a write to it fails, stdin ends), at every replica's console; one
held at a replica whose heartbeat in the state store lapsed is "replica gone" and cannot be
approved; a replica restarted under the same name withdraws its predecessor's holds. Nothing
ever runs for a caller who cannot receive the result. The end-to-end tests run two
``riskrank mcp`` replicas on one store (SQLite, and a real PostgreSQL: tests/postgres_support.py)
with a client whose connection simply drops."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from riskrank.serving import mcp_compat
from riskrank.serving.gateway.confirm import (
    ACCEPT,
    CALLER_GONE,
    REPLICA_GONE,
    ConfirmationRequest,
    OperatorBroker,
    StoreBroker,
)
from riskrank.serving.gateway.store import open_store
from team_support import (
    GUARD_S,
    TOKENS,
    Console,
    base_url,
    start_gateway,
    start_replica,
    stop_all,
    write_files,
)

PROTOCOL = "2025-06-18"


def _request(**kw) -> ConfirmationRequest:
    return ConfirmationRequest(**{"session": "pager/http-1", "task": "restart the api", "tool": "restart_service",
                                  "level": 3, "arguments": {"service": "api"}, "message": "Allow?", "bind": "b",
                                  "client": "pager", "policy": "on-call", **kw})


class _Call:
    """What a broker reads of a call: its caller's link."""

    def __init__(self) -> None:
        self.link = mcp_compat.CallerLink("its HTTP connection closed")


# -- the brokers (fast) ------------------------------------------------------------------------------------
def test_a_caller_who_leaves_takes_its_hold_with_it_in_one_process():
    async def go():
        broker, call = OperatorBroker(30), _Call()
        answers = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _answer(broker, call, answers))
            while not broker.waiting():
                await anyio.sleep(0.01)
            (item,) = broker.waiting()
            call.link.leave()
            await anyio.sleep(0.05)
            assert broker.waiting() == [] and broker.decide(item.id, True, "lead") is None
        return answers[0], broker.why_not(item.id)

    answer, why = anyio.run(go)
    assert answer.action == CALLER_GONE and "the agent disconnected at" in answer.note
    assert "nothing was run" in why and "disconnected at" in why


async def _answer(broker, call, answers):
    answers.append(await broker.confirm(_request(), call))


def test_a_caller_gone_replica_gone_and_a_restarted_replica_on_one_store(state):
    with open_store(state) as store:
        at_b, console_a, call = StoreBroker(store, 30, replica="B", lapse_s=2), StoreBroker(store, 30, replica="A"), _Call()

        async def caller_leaves():
            answers: list = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _answer(at_b, call, answers))
                with anyio.fail_after(GUARD_S):
                    while not console_a.waiting():
                        await anyio.sleep(0.02)
                (item,) = console_a.waiting()
                call.link.leave()
            return answers[0], item

        answer, item = anyio.run(caller_leaves)
        assert answer.action == CALLER_GONE and console_a.waiting() == []
        assert console_a.decide(item.id, True, "lead") is None  # the store says so too: no second decision
        assert store.approval(item.id)["status"] == CALLER_GONE and "disconnected at" in console_a.why_not(item.id)

        async def replica_restarts():
            answers: list = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _answer(at_b, _Call(), answers))
                with anyio.fail_after(GUARD_S):
                    while not console_a.waiting():
                        await anyio.sleep(0.02)
                await StoreBroker(store, 30, replica="B").start()  # B again, a new process under the same name
            return answers[0]

        assert anyio.run(replica_restarts).action == REPLICA_GONE
        assert next(r.answer.action for r in console_a.recent) == REPLICA_GONE

        # A replica that stops beating: its hold is shown gone at once past the window, cannot be
        # approved, and the next sweep (by any replica) withdraws it.
        silent = StoreBroker(store, 30, replica="C", lapse_s=1)

        async def replica_stops():
            answers: list = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _answer(silent, _Call(), answers))
                with anyio.fail_after(GUARD_S):
                    while not console_a.waiting():
                        await anyio.sleep(0.02)
                await anyio.sleep(1.5)  # C's heartbeat (written once, at its start) lapses
                (held,) = StoreBroker(store, 30, replica="A", lapse_s=1).waiting()
                assert held.gone and held.gone.startswith("replica gone: C stopped answering")
                assert StoreBroker(store, 30, replica="A", lapse_s=1).decide(held.id, True, "lead") is None
                assert [r["id"] for r in store.sweep_lapsed(1)] == [held.id]
                assert store.sweep_lapsed(1) == []  # withdrawn once
            return answers[0]

        gone = anyio.run(replica_stops)
        assert gone.action == REPLICA_GONE and "no heartbeat" in gone.note


def test_the_heartbeat_is_judged_by_the_stores_clock(state, monkeypatch):
    """A replica whose own clock is an hour off is alive all the same: the store stamps and judges."""
    with open_store(state) as store:
        skewed = StoreBroker(store, 30, replica="skewed")
        monkeypatch.setattr(time, "time", lambda real=time.time: real() + 3600)
        anyio.run(skewed.start)
        assert store.heartbeat("skewed", skewed.instance)
        assert abs(store.replicas()["skewed"]) < 5
        assert not store.heartbeat("skewed", "another-process")  # the name belongs to the latest process


# -- two replicas, a client whose connection drops -------------------------------------------------------------
def _replica(root: Path, state: str, name: str):
    return start_replica(root, state, name, "--replica-lapse", "3")


def _rpc(http: httpx.Client, url: str, headers: dict, body: dict) -> tuple[dict | None, httpx.Response]:
    r = http.post(url, headers=headers, json=body)
    for line in r.text.splitlines():
        if line.startswith("data:"):
            return json.loads(line[5:]), r
    return (r.json() if r.headers.get("content-type", "").startswith("application/json") else None), r


def _held_call_then_drop(url: str, token: str, console: Console, tool: str, arguments: dict) -> socket.socket:
    """An agent's session (initialize, find_tools), then ``tool`` sent over a raw socket; the
    socket is returned once the call is held (the caller drops it by closing it)."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=30) as http:
        _, r = _rpc(http, url, headers, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "dropper", "version": "1"}}})
        headers = {**headers, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL}
        http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        found, _ = _rpc(http, url, headers, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "find_tools", "arguments": {"task": "restart the api service", "k": 5}}})
        assert "restart_service" in json.dumps(found)
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "call_tool", "arguments": {"name": tool, "arguments": arguments}}}).encode()
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port))
    head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Host": parts.netloc, "Content-Type": "application/json",
                                                  "Content-Length": str(len(body))}.items())
    sock.sendall(f"POST {parts.path} HTTP/1.1\r\n{head}\r\n".encode() + body)
    deadline = time.time() + GUARD_S
    while not console.pending() and time.time() < deadline:
        time.sleep(0.05)
    assert console.pending(), "the call was never held"
    return sock


@pytest.mark.mcp_sdk
def test_a_dropped_connection_withdraws_the_hold_at_both_replicas_and_nothing_runs(tmp_path, state):
    write_files(tmp_path, tmp_path / "ran.txt")
    a, url_a, _ = _replica(tmp_path, state, "gw-a")
    b, url_b, _ = _replica(tmp_path, state, "gw-b")
    try:
        at_a, at_b = Console(base_url(url_a), "lead"), Console(base_url(url_b), "other")
        sock = _held_call_then_drop(url_b, TOKENS["pager"], at_a, "restart_service", {"service": "api"})
        (rid,) = at_a.pending()
        assert at_b.pending() == [rid]
        left = time.monotonic()
        sock.close()  # no cancellation, no session DELETE: the connection just goes
        deadline = left + GUARD_S
        while (at_a.pending() or at_b.pending()) and time.monotonic() < deadline:
            time.sleep(0.02)
        gone_after = time.monotonic() - left
        assert at_a.pending() == [] and at_b.pending() == [], "the hold outlived its caller"
        print(f"withdrawn at both replicas {gone_after:.2f} s after the connection closed")
        r = at_a.decide_id(rid)
        assert r.status_code == 409 and "the agent disconnected at" in r.text, r.text[:400]
        assert "caller gone" in at_b.http.get("/console/approvals").text
        at_a.close()
        at_b.close()
        from team_support import run_as

        bot = run_as(url_a, TOKENS["ci-bot"], [("find_tools", {"task": "list the services", "k": 3}),
                                               ("call_tool", {"name": "list_services", "arguments": {}}),
                                               ("call_tool", {"name": "drop_database", "arguments": {"name": "x"}})])
        assert bot[2]["error"].startswith("above_max_level")
    finally:
        stop_all(a, b)
    assert "restart_service" not in (tmp_path / "ran.txt").read_text()
    with open_store(state, create=False) as store:
        everything = store.records()
        lines = [r for r in everything if r.get("tool") == "restart_service"]
        assert store.approval(rid)["status"] == CALLER_GONE
    # every line about a named client's session names the client and its policy, whatever its kind
    kinds = {(r["decision"], r.get("code")) for r in everything if r.get("session")}
    assert {("found", "found"), ("allowed", "allowed"), ("refused", "above_max_level"), ("pending", "awaiting_operator"),
            ("refused", "caller_gone")} <= kinds, kinds
    assert [r for r in everything if r.get("session") and not (r.get("client") and r.get("policy"))] == []
    assert [(r["decision"], r.get("code"), r["replica"]) for r in lines] == [
        ("pending", "awaiting_operator", "gw-b"), ("refused", "caller_gone", "gw-b")]
    assert all((r["client"], r["policy"]) == ("pager", "on-call") for r in lines)
    assert "the agent disconnected at" in lines[1]["reason"] and lines[1]["session"] == lines[0]["session"]


@pytest.mark.mcp_sdk
def test_a_killed_replicas_hold_is_replica_gone_and_cannot_be_approved(tmp_path, state):
    write_files(tmp_path, tmp_path / "ran.txt")
    a, url_a, _ = _replica(tmp_path, state, "gw-a")
    b, url_b, _ = _replica(tmp_path, state, "gw-b")
    try:
        at_a = Console(base_url(url_a), "lead")
        sock = _held_call_then_drop(url_b, TOKENS["pager"], at_a, "restart_service", {"service": "api"})
        (rid,) = at_a.pending()
        b.send_signal(signal.SIGKILL)
        b.wait(timeout=GUARD_S)
        deadline = time.time() + GUARD_S
        while 'data-gone="replica"' not in at_a.http.get("/console/approvals").text and rid in at_a.pending() \
                and time.time() < deadline:
            time.sleep(0.1)
        r = at_a.decide_id(rid)
        assert r.status_code == 409 and "replica gone" in r.text.lower() and "gw-b" in r.text, r.text[:400]
        while rid in at_a.pending() and time.time() < deadline:
            time.sleep(0.1)
        assert at_a.pending() == []
        sock.close()
        at_a.close()
    finally:
        stop_all(a, b)
    assert not (tmp_path / "ran.txt").exists() or "restart_service" not in (tmp_path / "ran.txt").read_text()
    with open_store(state, create=False) as store:
        row = store.approval(rid)
        gone = [r for r in store.records() if r.get("code") == REPLICA_GONE]
    assert row["status"] == REPLICA_GONE and row["by"] is None and ACCEPT not in str(row["note"])
    assert [(g["client"], g["policy"], g["held_at"], g["replica"]) for g in gone] == [("pager", "on-call", "gw-b", "gw-a")]


# -- the JSON approvals API ------------------------------------------------------------------------------------
OPERATORS = {"lead": "lead-operator-token-0123456789abcdef", "oncall": "oncall-operator-token-0123456789abcd"}


def _operators(root: Path) -> Path:
    import hashlib

    path = root / "operators.json"
    path.write_text(json.dumps({"operators": {n: {"token_sha256": "sha256:" + hashlib.sha256(t.encode()).hexdigest()}
                                              for n, t in OPERATORS.items()}}))
    return path


def _api(base: str, operator: str | None, body, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or OPERATORS[operator]}"} if (operator or token) else {}
    if isinstance(body, bytes):
        return httpx.post(base + "/console/api/decide", headers={**headers, "Content-Type": "application/json"},
                          content=body, timeout=30)
    return httpx.post(base + "/console/api/decide", headers=headers, json=body, timeout=30)


@pytest.mark.mcp_sdk
def test_the_approvals_api_decides_once_with_a_named_operators_token(tmp_path, state):
    """401/409/409/404/422 and one decision; the hold and the decision reach a webhook, signed."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from riskrank.serving.gateway.confirm import call_digest
    from riskrank.serving.gateway.notify import verify
    from team_support import run_as

    write_files(tmp_path, tmp_path / "ran.txt")
    ops = _operators(tmp_path)
    hooks: list[tuple[bool, dict]] = []  # what a team's receiver got: (signature verified, event)

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hooks.append((verify(b"w" * 16 + b"0123456789abcdef", body, self.headers["X-Riskrank-Timestamp"],
                                 self.headers["X-Riskrank-Signature"]), json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    (tmp_path / "hook.key").write_bytes(b"w" * 16 + b"0123456789abcdef")
    extra = ("--operators", str(ops), "--notify", f"http://127.0.0.1:{receiver.server_address[1]}/hook",
             "--notify-secret-file", str(tmp_path / "hook.key"))
    a, url_a, _ = start_gateway(tmp_path, "--state", state, "--replica", "gw-a", "--console", "--admin-token-file",
                                str(tmp_path / "admin"), "--confirm-timeout", "60", *extra)
    b, url_b, _ = start_gateway(tmp_path, "--state", state, "--replica", "gw-b", "--console", "--admin-token-file",
                                str(tmp_path / "admin"), "--confirm-timeout", "60", *extra)
    base_a, base_b = base_url(url_a), base_url(url_b)
    try:
        out: dict = {}
        agent = threading.Thread(target=lambda: out.setdefault("steps", run_as(url_b, TOKENS["pager"], [
            ("find_tools", {"task": "restart the api service", "k": 5}),
            ("call_tool", {"name": "restart_service", "arguments": {"service": "api"}})])))
        agent.start()
        deadline = time.time() + GUARD_S
        while not (holds := httpx.get(base_a + "/console/api/pending", headers={
                "Authorization": f"Bearer {OPERATORS['lead']}"}).json()["holds"]) and time.time() < deadline:
            time.sleep(0.1)
        (hold,) = holds
        digest = call_digest("restart_service", {"service": "api"})
        assert (hold["tool"], hold["client"], hold["policy"], hold["replica"], hold["digest"]) == (
            "restart_service", "pager", "on-call", "gw-b", digest)
        rid = hold["id"]
        good = {"id": rid, "digest": digest, "action": "approve", "note": "deploy window"}
        assert _api(base_a, None, good, token="not-an-operator-token-0123456789").status_code == 401
        assert _api(base_a, None, good).status_code == 401
        assert httpx.get(base_a + "/console/api/pending", headers={"Authorization": "Bearer wrong"}).status_code == 401
        stale = _api(base_a, "lead", {**good, "digest": call_digest("restart_service", {"service": "db"})})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "digest_mismatch"
        assert _api(base_a, "lead", {**good, "id": "no-such-request"}).status_code == 404
        for bad in ({**good, "extra": 1}, {**good, "action": "maybe"}, {**good, "id": 7}, [good]):
            r = _api(base_a, "lead", bad)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
        assert _api(base_a, "lead", b"{not json").status_code == 400
        # two operators at two replicas, the same moment: one decision
        answers: dict = {}
        start = threading.Barrier(2)

        def decide(name, base):
            start.wait()
            answers[name] = _api(base, name, good)

        both = [threading.Thread(target=decide, args=("lead", base_a)), threading.Thread(target=decide, args=("oncall", base_b))]
        for t in both:
            t.start()
        for t in both:
            t.join(GUARD_S)
        codes = sorted(r.status_code for r in answers.values())
        assert codes == [200, 409], {k: r.text for k, r in answers.items()}
        winner = next(n for n, r in answers.items() if r.status_code == 200)
        assert answers[winner].json()["decided_by"] == winner
        agent.join(GUARD_S)
        assert out["steps"][1] == {"text": "api restarted"}
        again = _api(base_a, "lead", good)
        assert again.status_code == 409 and "already decided" in again.json()["error"]["message"]
        deadline = time.time() + GUARD_S
        while len(hooks) < 2 and time.time() < deadline:
            time.sleep(0.1)
        # the hold (posted by gw-b, which holds it) and the decision (by the replica that took it), signed
        assert sorted((e["event"], e["id"]) for _, e in hooks) == [("decided", rid), ("hold", rid)]
        assert all(ok for ok, _ in hooks) and {e["client"] for _, e in hooks} == {"pager"}
        assert next(e for _, e in hooks if e["event"] == "decided")["decided_by"] == winner
    finally:
        receiver.shutdown()
        stop_all(a, b)
    assert (tmp_path / "ran.txt").read_text().splitlines() == ["restart_service api"]  # never a second run
    with open_store(state, create=False) as store:
        everything = store.records()
        run = [r for r in everything if r.get("tool") == "restart_service" and r["decision"] == "allowed"]
    assert [(r["decided_by"], r["client"], r["policy"]) for r in run] == [(winner, "pager", "on-call")]
    assert [r for r in everything if r.get("session") and not (r.get("client") and r.get("policy"))] == []


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not JSON"),
    ('{"operators": {}}', "at least one operator"),
    ('{"operators": {"lead": {"token": "x"}}}', "an entry is"),
    ('{"operators": {"lead": {"token_sha256": "abc"}}}', "64 lower-case hex"),
    ('{"operators": {"a": {"token_sha256": "sha256:' + "0" * 64 + '"}, "b": {"token_sha256": "sha256:' + "0" * 64 + '"}}}',
     "same token as operator 'a'"),
])
def test_an_operators_file_that_cannot_be_trusted_is_one_line(tmp_path, content, message):
    from riskrank.errors import RiskrankError
    from riskrank.serving.console.security import read_operators

    path = tmp_path / "operators.json"
    path.write_text(content)
    with pytest.raises(RiskrankError, match=None) as err:
        read_operators(path)
    assert message in str(err.value) and str(err.value).startswith("--operators ") and "\n" not in str(err.value)


# -- how a caller's leaving is heard -----------------------------------------------------------------------
def test_an_asgi_disconnect_or_a_failed_write_marks_the_caller_gone():
    async def go():
        links = []

        async def app(scope, receive, send):  # reads its body, then waits as a held call does
            links.append(scope["riskrank.link"])
            await receive()
            await scope["riskrank.link"].event.wait()

        gone = anyio.Event()
        messages = [{"type": "http.request", "body": b"{}", "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            return None

        watched = mcp_compat.watch_callers(app)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watched, {"type": "http", "path": "/mcp"}, receive, send)
            await anyio.sleep(0.05)
            assert not links[0].gone
            gone.set()  # the connection closes
        assert links[0].gone and "its HTTP connection closed" in links[0].describe()

        async def writes(scope, receive, send):
            links.append(scope["riskrank.link"])
            await send({"type": "http.response.start", "status": 200, "headers": []})

        async def broken(message):
            raise OSError("broken pipe")

        with pytest.raises(OSError):
            await mcp_compat.watch_callers(writes)({"type": "http", "path": "/mcp"}, receive, broken)
        assert links[1].gone and "a write to its stream failed" in links[1].describe()

        async def answers(scope, receive, send):  # a finished answer: the disconnect after it is no leaving
            links.append(scope["riskrank.link"])
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            await anyio.sleep(0.05)

        messages.append({"type": "http.request", "body": b"{}", "more_body": False})
        await mcp_compat.watch_callers(answers)({"type": "http", "path": "/mcp"}, receive, send)
        assert not links[2].gone

    anyio.run(go)


def test_stdin_ending_marks_the_stdio_caller_gone():
    import os

    read_fd, write_fd = os.pipe()
    mcp_compat._STDIO_LINK[:] = [mcp_compat.CallerLink("its stdin closed")]
    try:
        stdin = mcp_compat.CancellableStdin(read_fd)

        async def go():
            os.write(write_fd, b'{"jsonrpc": "2.0"}\n')
            assert (await stdin.__anext__()).startswith("{")
            assert not mcp_compat._stdio_link().gone
            os.close(write_fd)
            with pytest.raises(StopAsyncIteration):
                await stdin.__anext__()

        anyio.run(go)
        assert mcp_compat._stdio_link().gone and "its stdin closed" in mcp_compat._stdio_link().describe()
        assert mcp_compat._link(None) is mcp_compat._stdio_link()
    finally:
        mcp_compat._STDIO_LINK.clear()
        os.close(read_fd)


def test_after_a_store_outage_no_replica_sweeps_before_the_others_could_beat_again():
    from riskrank.serving.gateway.store import StoreError

    class Store:
        """Down for the first beats, then up: when did this replica sweep?"""

        def __init__(self) -> None:
            self.beats, self.sweeps, self.t0 = 0, [], time.monotonic()

        def heartbeat(self, name, instance):
            self.beats += 1
            if self.beats <= 3:
                raise StoreError("the state store is away")
            self.up_at = getattr(self, "up_at", time.monotonic())
            return True

        def sweep_lapsed(self, lapse_s):
            self.sweeps.append(time.monotonic())
            return []

    store = Store()
    broker = StoreBroker(store, 30, replica="A", lapse_s=0.5)

    async def go():
        with anyio.move_on_after(2.0):
            await broker.beat()

    anyio.run(go)
    assert store.sweeps, "a live replica never swept"
    assert store.sweeps[0] - store.up_at >= 0.5  # a whole window of beats first: the others had time to beat again
