"""The gateway run like infrastructure: ``/metrics`` (counters equal to the audit log's counts
after a scripted session of 200 calls, parsed with Prometheus' own parser; the admin token),
the OpenTelemetry spans (one trace per find_tools and call, a span per guard, the caller's
``traceparent`` continued and a malformed one ignored, no argument in any span), and
``riskrank policy replay`` (its predictions equal what the gateway then does under the new
policy on the same calls; older lines skipped and counted; bad input in one line)."""

from __future__ import annotations

import collections
import json
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from riskrank.serving.gateway import tracing
from riskrank.serving.gateway.config import load_policies
from riskrank.serving.gateway.replay import read_lines, recorded_outcome, render, replay
from test_session_guard import Agent, call, find, mail_gateway

prometheus_client = pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from riskrank.serving.gateway.metrics import make_metrics  # noqa: E402

EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_PROVIDER)  # once per process: OpenTelemetry keeps the first provider

TASKS = ["archive_email: archive the e-mails of my inbox", "summarise the e-mails in my inbox",
         "translate a text into French", "what is the weather in Paris"]
CALLS = [("archive_email", {"n": 1}), ("read_inbox", {}), ("summarise_text", {"text": "hi"}), ("send_email", {"to": "a"}),
         ("translate_text", {}), ("get_weather", {"city": "Paris"}), ("list_files", {}), ("no_such_tool", {}),
         ("summarise_text", {"text": 3})]


def script(gw, n_calls: int = 200) -> list[tuple[str, bool]]:
    """A scripted session: find_tools every few calls, then calls allowed, confirmed (accepted
    or declined), refused for every reason the stub can give."""
    out = []
    agents = [Agent(key="s-accept"), Agent(answer="decline", key="s-decline")]
    for i in range(n_calls):
        agent = agents[(i // 9) % 2]
        if i % 9 == 0:
            find(gw, TASKS[(i // 9) % len(TASKS)], agent)
        name, args = CALLS[i % len(CALLS)]
        out.append(call(gw, name, {**args, "i": i} if name in ("archive_email", "get_weather") else args, agent))
    return out


def audit_lines(gw) -> list[dict]:
    return [json.loads(x) for x in gw.test_audit.read_text().splitlines()]


@pytest.fixture(scope="module")
def encoder():
    from riskrank.encoder import make_encoder
    from test_server_support import HashEncoder

    return make_encoder(HashEncoder())


# -- metrics ----------------------------------------------------------------------------------------------
def samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_equal_the_audit_logs_counts_after_200_calls(tmp_path, encoder):
    gw = mail_gateway(tmp_path, encoder, scope="off")
    metrics = make_metrics(gw, clients=["ci"])
    script(gw, 200)
    parsed = samples(metrics.exposition().decode())
    counted = collections.Counter()
    for s in parsed["riskrank_gateway_decisions"]:
        if s.name.endswith("_total"):
            counted[(s.labels["decision"], s.labels["code"])] += int(s.value)
    logged = collections.Counter((r["decision"], r.get("code") or "") for r in audit_lines(gw))
    assert counted == logged and sum(logged.values()) > 200
    assert {d for d, _ in logged} >= {"found", "allowed", "refused"}
    assert {c for _, c in logged} >= {"not_exposed", "unknown_tool", "invalid_arguments", "denied", "allowed"}
    calls = {s.labels["outcome"]: s.value for s in parsed["riskrank_gateway_call_seconds"] if s.name.endswith("_count")}
    assert sum(calls.values()) == 200 and calls["allowed"] > 0 and calls["not_exposed"] > 0 and calls["denied"] > 0, calls
    finds = [s.value for s in parsed["riskrank_gateway_find_tools_seconds"] if s.name.endswith("_count")]
    assert finds == [sum(1 for r in audit_lines(gw) if r["tool"] == "find_tools")]
    waits = {s.labels["answer"]: s.value for s in parsed["riskrank_gateway_confirmation_wait_seconds"]
             if s.name.endswith("_count")}
    assert waits["accept"] > 0 and waits["decline"] > 0
    assert [s.value for s in parsed["riskrank_gateway_confirmations_pending"]] == [0.0]
    up = {s.labels["upstream"]: s.value for s in parsed["riskrank_gateway_upstream_up"]}
    assert up == {"mail": 1.0}
    assert {s.labels["why"]: s.value for s in parsed["riskrank_gateway_tools_withheld"]}["quarantined"] == 0.0
    upstream_calls = [s.value for s in parsed["riskrank_gateway_upstream_call_seconds"] if s.name.endswith("_count")]
    assert upstream_calls == [sum(1 for r in audit_lines(gw) if r["decision"] == "allowed")]


def test_metric_labels_stay_bounded(tmp_path, encoder):
    gw = mail_gateway(tmp_path, encoder)
    metrics = make_metrics(gw, clients=["ci"])
    for who in ("ci", "https://issuer#alice", "https://issuer#bob", None):
        metrics.recorded({"decision": "refused", "code": "not_exposed", "client": who, "upstream": "elsewhere"})
    for i in range(200):
        metrics.recorded({"decision": "oops", "code": f"free text {i}"})
    parsed = samples(metrics.exposition().decode())
    rows = [s for s in parsed["riskrank_gateway_decisions"] if s.name.endswith("_total")]
    assert {s.labels["client"] for s in rows} == {"ci", "other", ""}
    assert {s.labels["upstream"] for s in rows} == {"other", ""}
    assert len({s.labels["code"] for s in rows if s.labels["decision"] == "oops"}) <= 65
    failed = metrics.audit_failures
    metrics.failed("state")
    assert failed.labels("state")._value.get() == 1


def test_metrics_endpoint_needs_the_admin_token(tmp_path, encoder):
    from riskrank.serving.mcp import with_metrics

    gw = mail_gateway(tmp_path, encoder)
    metrics = make_metrics(gw)

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def get(app, headers=(), client=("203.0.113.9", 5000), path="/metrics"):
        sent = []

        async def send(msg):
            sent.append(msg)

        async def receive():
            return {"type": "http.request", "body": b""}

        scope = {"type": "http", "method": "GET", "path": path, "headers": list(headers), "client": client}
        anyio.run(app, scope, receive, send)
        return sent[0]["status"], sent[1]["body"] if len(sent) > 1 else b""

    app = with_metrics(inner, metrics, "s3cret")
    assert get(app)[0] == 401
    assert get(app, [(b"authorization", b"Bearer wrong")])[0] == 401
    status, body = get(app, [(b"authorization", b"Bearer s3cret")])
    assert status == 200 and b"riskrank_gateway_upstream_up" in body
    assert get(app, path="/mcp")[0] == 404  # everything else goes on
    loopback_only = with_metrics(inner, metrics, None)
    assert get(loopback_only)[0] == 401 and get(loopback_only, client=("127.0.0.1", 1))[0] == 200
    # wrong tokens are throttled per address, as the console's logins: the endpoint is no faster
    # oracle for the admin token (2,000 guesses were answered in 1.4 s), and each goes on record
    audited = gw.audit
    guarded = with_metrics(inner, metrics, "s3cret", audited)
    statuses = [get(guarded, [(b"authorization", f"Bearer guess-{i}".encode())])[0] for i in range(8)]
    assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}
    assert get(guarded, [(b"authorization", b"Bearer s3cret")])[0] == 429  # not even compared while held
    assert get(guarded, [(b"authorization", b"Bearer s3cret")], client=("198.51.100.7", 1))[0] == 200  # another address
    lines = [json.loads(x) for x in gw.test_audit.read_text().splitlines()]
    codes = [r["code"] for r in lines if r.get("decision") == "auth_refused"]
    assert codes.count("wrong_token") == 5 and "metrics_throttled" in codes and not any("s3cret" in x or "guess" in x
                                                                                    for x in gw.test_audit.read_text().split())


# -- traces -----------------------------------------------------------------------------------------------
def test_one_trace_per_call_with_a_span_per_guard_and_no_arguments(tmp_path, encoder):
    gw = mail_gateway(tmp_path, encoder)
    agent = Agent(key="traced")
    agent.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    EXPORTER.clear()
    find(gw, "archive_email: archive the e-mails of my inbox", agent)
    secret = "the-password-is-hunter2"
    assert call(gw, "archive_email", {"note": secret}, agent)[1] is False
    spans = EXPORTER.get_finished_spans()
    by_name = collections.defaultdict(list)
    for s in spans:
        by_name[s.name].append(s)
    root = by_name["call_tool"][0]
    assert root.context.trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736 and root.parent.span_id == 0x00f067aa0ba902b7
    assert root.attributes["riskrank.tool"] == "archive_email" and root.attributes["riskrank.level"] == 3
    assert root.attributes["riskrank.decision"] == "allowed" and root.attributes["riskrank.confirmed"] == "elicitation"
    assert len(root.attributes["riskrank.arguments.sha256"]) == 64
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    assert [s.name for s in children] == [f"guard.{g}" for g in gw.chain.names] + ["confirmation", "upstream"]
    assert dict(children[len(gw.chain.names) - 1].attributes) == {"riskrank.verdict": "hold", "riskrank.code": "confirm"}
    ranking = by_name["ranking"][0]
    assert ranking.parent.span_id == by_name["find_tools"][0].context.span_id
    everything = json.dumps([dict(s.attributes) for s in spans])
    assert secret not in everything and "archive the e-mails" not in everything  # sizes and digests only


@pytest.mark.parametrize("bad", ["garbage", "00-xyz-00f067aa0ba902b7-01", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                                 "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "", None])
def test_a_malformed_traceparent_is_ignored(tmp_path, encoder, bad):
    gw = mail_gateway(tmp_path, encoder)
    agent = Agent(key="bad")
    agent.traceparent = bad
    EXPORTER.clear()
    find(gw, "what is the weather in Paris", agent)
    text, err = call(gw, "get_weather", {}, agent)
    assert not err, text
    roots = [s for s in EXPORTER.get_finished_spans() if s.name in ("find_tools", "call_tool")]
    assert len(roots) == 2 and all(s.parent is None for s in roots)
    assert roots[0].context.trace_id != roots[1].context.trace_id  # one trace per request
    assert tracing.parent_context(bad) is None


def test_the_traceparent_header_and_meta_are_read():
    from types import SimpleNamespace

    from riskrank.serving.mcp_compat import traceparent

    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert traceparent(SimpleNamespace(headers={"traceparent": tp}), None) == tp
    assert traceparent(None, SimpleNamespace(meta={"traceparent": tp})) == tp
    assert traceparent(None, SimpleNamespace(meta={"traceparent": 7})) is None


# -- policy replay --------------------------------------------------------------------------------------
def outcomes(gw) -> list[str]:
    return [o for r in audit_lines(gw) if r["tool"] != "find_tools" and (o := recorded_outcome(r)) is not None]


POLICY_A = {"scope": "off", "confirm": "every_call"}
TIGHTER = {"scope": "off", "confirm": "every_call", "confirm_level": 2, "deny": ["translate_*"], "max_level": 2}
LOOSER = {"scope": "off", "confirm": "every_call", "confirm_level": 4}


@pytest.mark.parametrize("new", [TIGHTER, LOOSER, {**TIGHTER, "exposure_ttl_s": 3600}])
def test_replay_predicts_what_the_gateway_then_does(tmp_path, encoder, new):
    from riskrank.serving.gateway.policy import DEFAULT_SOURCE
    from test_session_guard import LEVELS

    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir(), new_dir.mkdir()
    old = mail_gateway(old_dir, encoder, **POLICY_A)
    script(old, 120)
    path = tmp_path / "new.json"
    path.write_text(json.dumps({**new, "levels": LEVELS}))
    predicted = replay(read_lines(old.test_audit), load_policies(path))
    assert predicted.calls == 120 and not predicted.skipped
    then = mail_gateway(new_dir, encoder, **{k: tuple(v) if isinstance(v, list) else v for k, v in new.items()})
    assert then.policy == replace(load_policies(path).default_policy, source=DEFAULT_SOURCE)  # the very policy replayed
    script(then, 120)
    actual = outcomes(then)
    assert len(actual) == len(predicted.predictions)
    sure = [(p[2], a) for p, a in zip(predicted.predictions, actual, strict=True) if p[2] != "uncertain"]
    assert [p for p, _ in sure] == [a for _, a in sure]
    assert len(sure) >= 0.6 * len(actual), predicted.after  # what a log cannot say stays a minority
    assert predicted.rows and any(r.change != "search_would_differ" for r in predicted.rows.values())
    table = render(predicted)
    assert "change" in table.splitlines()[4] and "\n" in table


def test_the_docs_replay_transcript_is_what_the_command_prints(tmp_path, encoder):
    """docs/serving.md shows ``policy replay`` after this file's scripted session under the
    defaults, replayed under a tighter policy: the transcript is what the code prints today."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    prompt = "$ riskrank policy replay --audit audit.jsonl --policy tighter.json\n"
    shown = doc[doc.index(prompt) + len(prompt):doc.index("```", doc.index(prompt))].rstrip("\n")
    gw = mail_gateway(tmp_path, encoder)
    script(gw, 200)
    tighter = tmp_path / "tighter.json"
    tighter.write_text(json.dumps({"max_level": 2, "confirm_level": 2, "deny": ["translate_*"]}))
    assert render(replay(read_lines(gw.test_audit), load_policies(tighter))) == shown


def test_replay_skips_older_lines_with_a_count(tmp_path):
    log = tmp_path / "audit.jsonl"
    log.write_text("\n".join([
        json.dumps({"time": "2026-01-01T00:00:00.000Z", "task": "t", "tool": "x", "level": 3, "decision": "allowed",
                    "reason": "ok"}),  # no guards: a gateway before the chain
        json.dumps({"time": "2026-01-01T00:00:00.000Z", "task": "t", "tool": "find_tools", "level": None,
                    "decision": "found", "reason": "1 returned"}),
        "{torn",
        json.dumps({"time": "2026-01-01T00:00:01.000Z", "task": "t", "tool": "x", "level": 3, "decision": "allowed",
                    "reason": "level 3 < confirm_level 4", "guards": [["policy", "pass"], ["confirm", "pass"]],
                    "upstream": "u", "session": "s"}),
    ]) + "\n")
    out = replay(read_lines(log), load_policies(None))
    assert out.calls == 1 and out.after == {"confirmed": 1}
    assert out.skipped == {"call line without guards (an older gateway)": 1,
                           "find_tools line without returned (an older gateway)": 1, "not a JSON object": 1}


def test_a_held_call_whose_caller_left_was_confirmed_not_refused(tmp_path):
    """A call held, then withdrawn because its agent disconnected (``caller_gone``) or its
    replica stopped, was a confirmed call under the policy: replayed under the same policy it
    changes nothing (it had been reported newly allowed)."""
    guards = [["policy", "pass"], ["confirm", "hold", "confirm"]]
    log = tmp_path / "audit.jsonl"
    log.write_text("".join(json.dumps({"time": f"2026-01-01T00:00:0{i}.000Z", "task": "t", "tool": "archive_email", "level": 3,
                                       "decision": "refused", "code": code, "reason": "r", "session": "s", "upstream": "mail",
                                       "guards": guards}) + "\n"
                       for i, code in enumerate(("caller_gone", "replica_gone", "quarantined", "upstream_down"))))
    out = replay(read_lines(log), load_policies(None))  # the last two: the tool changed, or its server stopped, meanwhile
    assert out.before == {"confirmed": 4} and out.after == {"confirmed": 4} and out.table() == []


def test_replay_reads_a_renamed_tools_own_name_as_the_gateway_does(tmp_path):
    """A tool two servers list is offered as SERVER__NAME; its call line keeps its own name
    (``original``), so a deny written for the name is replayed as the gateway decides it."""
    guards = [["policy", "pass"], ["confirm", "pass"]]
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps({"time": "2026-01-01T00:00:01.000Z", "task": "t", "tool": "github__delete_repo",
                               "original": "delete_repo", "level": 3, "decision": "allowed", "code": "allowed",
                               "reason": "r", "session": "s", "upstream": "github", "guards": guards}) + "\n")
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"max_level": 5, "confirm_level": 5, "deny": ["delete_repo"]}))
    out = replay(read_lines(log), load_policies(new))
    assert out.after == {"refused:denied_by_policy": 1}, out.after


def test_replay_reads_a_state_store_and_counts_an_operators_call_once(tmp_path):
    from riskrank.serving.gateway.store import open_store

    guards = [["policy", "pass"], ["confirm", "hold", "confirm"]]
    base = {"task": "t", "tool": "archive_email", "level": 3, "session": "s", "upstream": "mail", "guards": guards}
    lines = [{"time": "2026-01-01T00:00:00.000Z", "tool": "find_tools", "decision": "found", "session": "s",
              "returned": [["archive_email", 3]], "task": "t", "level": None, "reason": "1 returned"},
             {**base, "time": "2026-01-01T00:00:01.000Z", "decision": "pending", "code": "awaiting_operator", "reason": "r"},
             {**base, "time": "2026-01-01T00:00:02.000Z", "decision": "allowed", "code": "allowed", "confirmed": "console",
              "reason": "level 3 >= confirm_level 3"}]
    with open_store(tmp_path / "state") as store:
        for rec in lines:
            store.append(rec)
    log = tmp_path / "audit.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in lines))
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"confirm_level": 4}))
    from riskrank.serving.gateway.auditlog import read_records

    with open_store(tmp_path / "state", create=False) as store:
        from_store = replay(enumerate(read_records(store), 1), load_policies(new))
    from_file = replay(read_lines(log), load_policies(new))
    for out in (from_store, from_file):
        assert out.calls == 1 and out.before == {"confirmed": 1} and out.after == {"allowed": 1}
        assert [r.change for r in out.table()] == ["no_longer_confirmed"]


def test_policy_replay_command(tmp_path, encoder, monkeypatch, capfd):
    import sys

    from riskrank.cli import run

    def replay_cli(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["riskrank", "policy", "replay", *args])
        code = run()
        out, err = capfd.readouterr()
        return code, out, err

    gw = mail_gateway(tmp_path, encoder, **POLICY_A)
    script(gw, 40)
    new = tmp_path / "new.json"
    new.write_text(json.dumps(TIGHTER))
    code, out, _ = replay_cli("--audit", str(gw.test_audit), "--policy", str(new))
    assert code == 0 and out.startswith("40 calls and ") and "newly_refused" in out and "above_max_level" in out
    assert "confirmed: held for a confirmation, whatever the answer" in out
    code, out, _ = replay_cli("--audit", str(gw.test_audit), "--policy", str(new), "--json")
    assert code == 0 and json.loads(out)["calls"] == 40
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for args, message in ((["--audit", str(gw.test_audit), "--policy", str(bad)], "invalid JSON"),
                          (["--audit", str(tmp_path / "none.jsonl"), "--policy", str(new)], "no such audit log")):
        code, _, err = replay_cli(*args)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    # Nothing re-decided is said as such, never as "nothing would change": a window no line falls
    # in, and a log whose every line is an older gateway's.
    older = tmp_path / "older.jsonl"
    older.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k not in ("guards", "returned")}) + "\n"
                             for line in gw.test_audit.read_text().splitlines() if line.strip()))
    for args, message in ((["--audit", str(gw.test_audit), "--policy", str(new), "--since", "2099-01-01"],
                           "no call or find_tools line between --since 2099-01-01 to re-decide"),
                          (["--audit", str(older), "--policy", str(new)], "an older gateway")):
        code, out, err = replay_cli(*args)
        assert code == 2 and message in err and "nothing was checked" in err and "would change" not in out + err
