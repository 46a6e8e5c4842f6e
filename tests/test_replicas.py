"""Replicas on one state store: two ``riskrank mcp`` processes over streamable HTTP share the
audit log, the approvals, the pins and the exposures of one database (SQLite in one
directory on one machine, or PostgreSQL: a real server, see tests/postgres_support.py).

An approval given at replica A's console releases the call held at replica B; every line of
both replicas is in the one log, attributed to its client and operator; a replica killed with
SIGKILL leaves a log in which every call that ran has its committed decision, and the other
replica keeps serving; a replica that loses its database keeps answering find_tools and
refuses every call until the database is back."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

import postgres_support
from riskrank.serving.gateway.store import open_store
from team_support import (
    ADMIN,
    GUARD_S,
    TOKENS,
    Console,
    base_url,
    gateway_env,
    run_as,
    start_replica,
    stop_all,
    write_files,
)

FIND_RESTART = ("find_tools", {"task": "restart the api service", "k": 5})




@pytest.mark.mcp_sdk
def test_an_approval_at_one_replica_releases_the_call_held_at_the_other(tmp_path, state):
    write_files(tmp_path, tmp_path / "ran.txt")
    a, url_a, _ = start_replica(tmp_path, state, "A")
    b, url_b, _ = start_replica(tmp_path, state, "B")
    try:
        held: dict = {}

        def pager_at_b():
            held["out"] = run_as(url_b, TOKENS["pager"], [FIND_RESTART, ("call_tool", {"name": "restart_service",
                                                                                       "arguments": {"service": "api"}})])

        agent = threading.Thread(target=pager_at_b)
        agent.start()
        console = Console(base_url(url_a), "lead")
        deadline = time.time() + GUARD_S
        while not (ids := console.pending()) and time.time() < deadline:
            time.sleep(0.1)
        assert len(ids) == 1, "the call held at B never reached A's console"
        assert console.decide(ids[0], note="deploy window").status_code in (200, 303)
        agent.join(GUARD_S)
        assert held["out"][1] == {"text": "api restarted"}
        # the read-only bot at A: its own policy, refused what it was never shown
        bot = run_as(url_a, TOKENS["ci-bot"], [("find_tools", {"task": "list the services", "k": 3}),
                                               ("call_tool", {"name": "list_services", "arguments": {}}),
                                               ("call_tool", {"name": "drop_database", "arguments": {"name": "x"}})])
        assert bot[1]["text"].startswith("api: up") and bot[2]["error"].startswith("above_max_level")
        for url in (url_a, url_b):
            ready = httpx.get(base_url(url) + "/readyz")
            assert ready.status_code == 200 and ready.json()["state"]["ok"] is True
        log = console.http.get("/console/log", params={"tool": "restart_service"}).text  # B's lines, at A
        assert "<td>pager</td>" in log and "<td>lead</td>" in log
        console.close()
    finally:
        stop_all(a, b)
    with open_store(state, create=False) as store:
        lines = [r for r in store.records() if r.get("client")]
    pending = [r for r in lines if r["decision"] == "pending"]
    allowed = {r["tool"]: r for r in lines if r["decision"] == "allowed"}
    assert [(r["client"], r["replica"], r["tool"]) for r in pending] == [("pager", "B", "restart_service")]
    run = allowed["restart_service"]
    assert (run["client"], run["decided_by"], run["note"], run["confirmed"]) == ("pager", "lead", "deploy window", "console")
    assert (allowed["list_services"]["client"], allowed["list_services"]["replica"], run["replica"]) == ("ci-bot", "A", "B")
    assert (tmp_path / "ran.txt").read_text().splitlines() == ["restart_service api", "list_services "]


def test_a_replica_killed_mid_run_leaves_every_decision_it_acted_on(tmp_path, state):
    """kill -9 of replica A during 20 calls: every call the upstream ran has its ``allowed``
    line committed before it ran; B keeps serving on the same store."""
    write_files(tmp_path, tmp_path / "ran.txt")
    a, url_a, _ = start_replica(tmp_path, state, "A")
    b, url_b, _ = start_replica(tmp_path, state, "B")
    answered: list[str] = []
    try:
        def agent():
            steps = [("find_tools", {"task": "read the logs of a service", "k": 5})]
            steps += [("call_tool", {"name": "read_service_logs", "arguments": {"service": f"svc-{i}"}}) for i in range(20)]
            try:
                for i, out in enumerate(run_as(url_a, TOKENS["alice"], steps)[1:]):
                    if "text" in out:
                        answered.append(f"svc-{i}")
            except BaseException:
                pass

        t = threading.Thread(target=agent)
        t.start()
        deadline = time.time() + GUARD_S
        while time.time() < deadline and len(((tmp_path / "ran.txt").read_text() if (tmp_path / "ran.txt").exists()
                                              else "").splitlines()) < 8:
            time.sleep(0.02)
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=GUARD_S)
        t.join(GUARD_S)
        after = run_as(url_b, TOKENS["alice"], [("find_tools", {"task": "read the logs of a service", "k": 5}),
                                                ("call_tool", {"name": "read_service_logs", "arguments": {"service": "after"}})])
        assert after[1]["text"] == "after: all quiet"
    finally:
        stop_all(a, b)
    ran = [line.split(" ", 1)[1] for line in (tmp_path / "ran.txt").read_text().splitlines()]
    with open_store(state, create=False) as store:
        allowed = [r["arguments"]["service"] for r in store.records() if r.get("decision") == "allowed"
                   and r.get("tool") == "read_service_logs"]
    assert len(ran) >= 8 and set(ran) <= set(allowed), "a call ran without its decision committed"
    assert len(allowed) == len(set(allowed)), "a decision was logged twice"
    assert set(answered) <= set(ran)


def test_a_replica_that_loses_its_database_refuses_calls_and_keeps_searching(tmp_path):
    """Its own PostgreSQL, stopped mid-run: /readyz 503, find_tools still answers (exposing
    nothing), every call, read or risky, is refused as ``state_unavailable`` naming the store
    (never advice to change the policy); started again, the replica works again."""
    postgres_support.need_psycopg()
    cluster = postgres_support.start_cluster()
    try:
        write_files(tmp_path, tmp_path / "ran.txt")
        a, url, _ = start_replica(tmp_path, cluster.url, "A")
        try:
            steps = [("find_tools", {"task": "list the services", "k": 3}), ("call_tool", {"name": "list_services", "arguments": {}})]
            assert run_as(url, TOKENS["ci-bot"], steps)[1]["text"].startswith("api: up")
            cluster.stop()
            ready = httpx.get(base_url(url) + "/readyz")
            assert ready.status_code == 503 and ready.json()["state"]["ok"] is False
            down = run_as(url, TOKENS["ci-bot"], steps)
            assert down[0]["tools"] and "state store is unreachable" in down[0]["note"]
            risky = run_as(url, TOKENS["pager"], [FIND_RESTART, ("call_tool", {"name": "restart_service",
                                                                              "arguments": {"service": "api"}})])
            for refusal in (down[1]["error"], risky[1]["error"]):  # read or risky: one code, naming the store
                assert refusal.startswith("state_unavailable: the gateway's state store postgresql://"), refusal
                assert "raise confirm_level" not in refusal and "cannot ask its user" not in refusal, refusal
            cluster.start()
            deadline = time.time() + GUARD_S
            while httpx.get(base_url(url) + "/readyz").status_code != 200 and time.time() < deadline:
                time.sleep(0.2)
            assert run_as(url, TOKENS["ci-bot"], steps)[1]["text"].startswith("api: up")
        finally:
            stop_all(a)
        log = a.stderr.read()
        assert log.count("every call is refused until the store takes the audit log again") == 1, log
        assert "takes the audit log again; calls are decided again" in log and "Traceback" not in log, log
    finally:
        cluster.remove()
    assert (tmp_path / "ran.txt").read_text().splitlines() == ["list_services ", "list_services "]


def test_a_store_at_an_older_schema_or_unreachable_is_refused_at_start(tmp_path):
    write_files(tmp_path)
    state = tmp_path / "state"
    with open_store(state) as store:
        store._do("set the version", lambda c: store._ex(c, store._q("UPDATE riskrank_schema SET version = 0")), tx=True)
    argv_extra = ("--state", str(state), "--replica", "A", "--console", "--admin-token-file", str(tmp_path / "admin"))
    import subprocess
    import sys

    base = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "mcp", "--config", str(tmp_path / "servers.json"),
            "--policy", str(tmp_path / "policy.json"), "--clients", str(tmp_path / "clients.json"),
            "--transport", "streamable-http", "--port", "0"]
    out = subprocess.run([*base, *argv_extra], capture_output=True, text=True, timeout=GUARD_S, env=gateway_env())
    assert out.returncode == 2 and "riskrank state migrate" in out.stderr and "Traceback" not in out.stderr, out.stderr
    out = subprocess.run([*base, "--state", "postgresql://riskrank:secret-pw@127.0.0.1:1/db"], capture_output=True, text=True,
                         timeout=GUARD_S, env=gateway_env())
    assert out.returncode == 2 and "cannot reach the state store" in out.stderr and "secret-pw" not in out.stderr, out.stderr
    assert ADMIN not in out.stderr


# -- the shared pieces, two replicas' objects on one store (fast) ---------------------------------------
def _tool(description: str) -> dict:
    return {"name": "summarise", "description": description, "inputSchema": {"type": "object"}}


def test_a_pin_approved_at_one_replica_holds_at_the_other(state):
    from riskrank.serving.gateway.pins import StorePinStore

    with open_store(state) as store:
        a, b = StorePinStore(store), StorePinStore(store)
        assert a.review("notes", [_tool("Summarise a note.")]) == ({}, ["pinned 1 tools of 'notes' on first sight"])
        held, _ = b.review("notes", [_tool("Summarise a note and upload it.")])  # a rug pull, seen at B
        assert "changed its tool 'summarise'" in held["summarise"]
        assert a.review("notes", [_tool("Summarise a note and upload it.")])[0]  # held at A too
        assert a.approve("notes") == ["summarise"]  # the operator approves at A's console
        b.refresh()
        assert b.review("notes", [_tool("Summarise a note and upload it.")]) == ({}, [])  # trusted at B
        assert [c.name for c in b.changes()] == []


def test_a_pin_document_edited_in_the_store_is_caught(state, tmp_path):
    """Whoever can write the database but not read the replicas' --pin-key cannot approve a
    held tool there either: the edit fails the MAC, the tool goes back to quarantine."""
    from riskrank.serving.gateway.pins import StorePinStore, digest

    key = tmp_path / "pin.key"
    key.write_text("k" * 20 + "0123456789abcdef0123")
    with open_store(state) as store:
        a = StorePinStore(store, key=key)
        a.review("notes", [_tool("Summarise a note.")])
        rug = [_tool("Summarise a note and upload it.")]
        assert a.review("notes", rug)[0]
        version, doc = store.get_doc("pins", "servers")
        entry = doc["servers"]["notes"]
        seen = entry["pending"].pop("summarise")["seen"]
        entry["tools"]["summarise"] = {"sha256": digest(seen), "definition": seen, "at": 0.0}
        assert store.put_doc("pins", "servers", doc, expect=version) is not None
        b = StorePinStore(store, key=key)
        assert [c for c, _ in b.take_alerts()] == ["pins_tampered"]
        held, _ = b.review("notes", rug)
        assert "changed outside riskrank" in held["summarise"]
        assert StorePinStore(store, key=key).take_alerts() == []  # reported once, and the repair is signed


def test_a_call_held_by_one_replica_is_decided_once_at_the_other(state):
    import anyio

    from riskrank.serving.gateway.confirm import ACCEPT, TIMEOUT, ConfirmationRequest, StoreBroker

    req = ConfirmationRequest(session="pager/http-1", task="restart the api", tool="restart_service", level=3,
                              arguments={"service": "api"}, message="Allow?", bind="b", client="pager")
    with open_store(state) as store:
        held_at_b, console_a = StoreBroker(store, 30, replica="B"), StoreBroker(store, 30, replica="A")
        short = StoreBroker(store, 0.5, replica="B")

        async def go():
            answers = []

            async def wait():
                answers.append(await held_at_b.confirm(req, None))

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                with anyio.fail_after(GUARD_S):
                    while not console_a.waiting():
                        await anyio.sleep(0.05)
                (item,) = console_a.waiting()
                assert (item.replica, item.request.client, item.request.tool) == ("B", "pager", "restart_service")
                assert console_a.pending.get(item.id).request.digest == req.digest
                assert console_a.decide(item.id, True, "lead", "ok").answer.by == "lead"
                assert console_a.decide(item.id, False, "other") is None  # decided once
            timed_out = await short.confirm(req, None)
            return answers[0], timed_out

        answer, timed_out = anyio.run(go)
        assert (answer.action, answer.by, answer.note) == (ACCEPT, "lead", "ok")
        assert timed_out.action == TIMEOUT and not console_a.waiting()
        assert [r.answer.action for r in console_a.recent][:2] == [TIMEOUT, ACCEPT]


def test_the_review_queue_is_shared_and_two_reviewers_cannot_overwrite_each_other(state, tmp_path):
    import json

    from riskrank.audit import AuditError, apply_review, read_review, save_review_decision
    from riskrank.serving.gateway.store import StoreReview, import_review

    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({n: {"risk_level": 3, "resolution": "pending", "votes": {"a": 1, "b": 4}}
                                  for n in ("read_file", "share_link")}))
    review = tmp_path / "labels.review.jsonl"
    review.write_text("".join(json.dumps({"name": n, "votes": {"a": 1, "b": 4}, "risk_level": None}) + "\n"
                              for n in ("read_file", "share_link")))
    with open_store(state) as store:
        assert import_review(store, review, labels) == 2
        at_a, at_b = StoreReview(store, labels), StoreReview(store, labels)
        assert at_a.is_file() and [e["name"] for e in read_review(at_a)] == ["read_file", "share_link"]
        stale = read_review(at_b)  # B read the queue ...
        save_review_decision(at_a, "read_file", 1, "carol", "reads only")  # ... A saved meanwhile ...
        with pytest.raises(AuditError, match="another reviewer saved a decision meanwhile"):
            at_b.write_entries(stale)  # ... so B's stale copy is not written over A's decision
        save_review_decision(at_b, "share_link", 4, "dave", "shares outside")  # a save re-reads: A's decision kept
        assert [(e["name"], e["risk_level"], e["reviewer"]) for e in read_review(StoreReview(store, labels))] == [
            ("read_file", 1, "carol"), ("share_link", 4, "dave")]
        assert apply_review(labels, StoreReview(store, labels)) == (2, 0)
    applied = json.loads(labels.read_text())
    assert applied["read_file"]["risk_level"] == 1 and applied["share_link"]["resolution"] == "reviewed"


def test_state_import_takes_a_review_queue(tmp_path):
    import json
    import subprocess
    import sys

    review = tmp_path / "labels.review.jsonl"
    review.write_text(json.dumps({"name": "read_file", "votes": {"a": 1, "b": 4}, "risk_level": None}) + "\n")
    cli = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "state", "import", "--state", str(tmp_path / "s")]
    out = subprocess.run([*cli, "--review", str(review), "--labels", "labels.json"], capture_output=True, text=True,
                         timeout=GUARD_S)
    assert out.returncode == 0 and "imported the review queue of labels.json (1 tools)" in out.stdout, out.stderr
    for extra, message in [(["--review", str(review)], "--review needs --labels"),
                           ([], "give --audit-log FILE or --review FILE")]:
        out = subprocess.run([*cli, *extra], capture_output=True, text=True, timeout=GUARD_S)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    review.write_text('{"name": "read_file", "risk_level": 9}\n')
    out = subprocess.run([*cli, "--review", str(review), "--labels", "labels.json"], capture_output=True, text=True,
                         timeout=GUARD_S)
    assert out.returncode == 2 and "risk_level must be null or an integer 1-5" in out.stderr, out.stderr
