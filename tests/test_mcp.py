"""The MCP server in process: find_tools through the official SDK's client (the locked 2.x),
the policy the agent cannot widen, MCP tool annotations as risk evidence, and the gateway's
call-time decisions against a stub upstream (exposure, policy, confirmation, audit, errors)."""

from __future__ import annotations

import json
import time

import anyio
import pytest
from mcp import Client

from riskrank.catalogue import ArtefactSpec
from riskrank.datasets.demo import demo_registry_path
from riskrank.encoder import make_encoder
from riskrank.registry import ToolRegistry
from riskrank.risk import RISKY_LEVEL, resolve_tool_levels
from riskrank.serving import mcp_compat
from riskrank.serving.gateway.auditlog import AuditLog
from riskrank.serving.gateway.config import UpstreamConfig
from riskrank.serving.gateway.core import Exposure, Gateway, View, build_view, pipeline_sentence
from riskrank.serving.gateway.policy import Policy
from riskrank.serving.gateway.upstreams import UpstreamManager
from riskrank.serving.mcp import build_server
from test_server_support import MCP_TOOLS, HashEncoder, make_checkpoint, write_mcp_registry

DEMO = str(demo_registry_path())


@pytest.fixture(scope="module")
def encoder():
    return make_encoder(HashEncoder())


def view_of(spec: ArtefactSpec, encoder, policy: Policy | None = None, registry: ToolRegistry | None = None) -> View:
    return build_view(registry or ToolRegistry.load(spec.registry), spec, encoder, policy or Policy(), 1)


@pytest.fixture(scope="module")
def rule_view(tmp_path_factory, encoder):
    ck = make_checkpoint(tmp_path_factory.mktemp("ck") / "ck")
    return view_of(ArtefactSpec(DEMO, str(ck)), encoder)


@pytest.fixture(scope="module")
def dense_view(encoder):
    return view_of(ArtefactSpec(DEMO), encoder)


def call(server, name: str, args: dict):
    async def go():
        async with Client(server) as c:
            return await c.call_tool(name, args)

    return anyio.run(go)


def payload(result) -> dict:
    """The structured content, checked equal to the JSON text an LLM reads."""
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error_code(result) -> str:
    """A refusal: isError, text starting with the code, the same code in structured content."""
    assert result.is_error
    code = result.structured_content["error"]["code"]
    assert result.content[0].text.startswith(f"{code}: ")
    return code


def test_find_tools_is_listed_with_a_fixed_policy(dense_view):
    async def go():
        async with Client(build_server(Gateway(dense_view))) as c:
            return (await c.list_tools()).tools

    tools = anyio.run(go)
    assert [t.name for t in tools] == ["find_tools"]  # a registry: search only, nothing to call
    t = tools[0]
    assert t.input_schema["required"] == ["task"] and set(t.input_schema["properties"]) == {"task", "k"}
    assert t.input_schema["additionalProperties"] is False and t.input_schema["properties"]["k"]["maximum"] == 100
    assert t.annotations.read_only_hint is True and t.annotations.destructive_hint is False
    # The description says what runs: the safe default (dense+rule without a checkpoint), and
    # that risky tools are withheld, not "pushed down".
    assert pipeline_sentence("dense+rule", "safe", None) in t.description
    assert "never tops the list up with a risky tool" in t.description and "pushed down" not in t.description


def test_find_tools_returns_the_pipelines_ranking(rule_view):
    task = "delete the old log files and free disk space"
    out = payload(call(build_server(Gateway(rule_view)), "find_tools", {"task": task, "k": 5}))
    direct = rule_view.catalogue.retriever.retrieve(task, k=5)
    assert out["mode"] == "core+graph+rule" and out["fill"] == "safe"
    # The default policy (max_level 4) never offers the demo's five L5 tools.
    assert out["catalogue"]["n_tools"] == 98 - len(rule_view.not_offered) == 93
    assert [t["name"] for t in out["tools"]] == [t.name for t in direct.tools]
    for t in out["tools"]:
        assert {"name", "description", "input_schema", "risk_level", "risk_provenance", "risk_evidence", "needs_confirmation"} <= set(t)
        assert t["input_schema"]["type"] == "object" and 1 <= t["risk_level"] <= 5
        assert t["needs_confirmation"] == (t["risk_level"] >= 3)
    # The cap holds for the whole list: the safe fill never tops it up with a risky tool.
    assert sum(t["risk_level"] >= RISKY_LEVEL for t in out["tools"]) <= 1
    fallback = [t for t in out["tools"] if t["reasons"]]
    assert all(t["risk_level"] < RISKY_LEVEL for t in fallback)
    returned = {t["name"] for t in out["tools"]}
    assert [w["name"] for w in out["withheld"]] == [d.name for d in direct.deferred if d.name not in returned]
    assert all(w["reasons"] for w in out["withheld"])


@pytest.mark.parametrize("args,code", [
    ({"task": "   "}, "task_empty"),
    ({"task": "x" * 4001}, "task_too_long"),
    ({"task": 5}, "invalid_request"),
    ({"task": "ok", "k": 0}, "k_out_of_range"),
    ({"task": "ok", "k": 101}, "k_out_of_range"),
    ({"task": "ok", "k": "many"}, "invalid_request"),
    ({"task": "ok", "k": 7.5}, "invalid_request"),
    ({"task": "ok", "k": True}, "invalid_request"),
    ({"task": "ok", "k": 101.0}, "k_out_of_range"),
    # The agent cannot widen the policy: no mode, lambda or risk source unless the policy lists them.
    ({"task": "ok", "mode": "dense", "k": 100}, "invalid_request"),
    ({"task": "ok", "lambda": 0}, "invalid_request"),
    ({"task": "ok", "risk_source": "predicted"}, "invalid_request"),
])
def test_find_tools_errors(dense_view, args, code):
    res = call(build_server(Gateway(dense_view)), "find_tools", args)
    assert error_code(res) == code


def test_find_tools_reads_an_integral_number_as_k(dense_view):
    """``7.0`` is an integer to JSON Schema (and to /v1/retrieve): find_tools reads it as 7."""
    out = payload(call(build_server(Gateway(dense_view)), "find_tools", {"task": "send an email", "k": 7.0}))
    assert out["k"] == 7 and isinstance(out["k"], int) and len(out["tools"]) <= 7


def test_client_choices_from_the_policy(dense_view, encoder):
    policy = Policy(client_choices={"mode": ("dense", "dense+rule")})
    gw = Gateway(dense_view, policy=policy)
    schema = anyio.run(gw.list_tools)[0]["inputSchema"]
    assert schema["properties"]["mode"]["enum"] == ["dense", "dense+rule"] and "lambda" not in schema["properties"]
    server = build_server(gw)
    assert payload(call(server, "find_tools", {"task": "send an email", "mode": "dense"}))["mode"] == "dense"
    assert error_code(call(server, "find_tools", {"task": "send an email", "mode": "core"})) == "invalid_mode"
    assert error_code(call(server, "find_tools", {"task": "send an email", "lambda": 0.5})) == "invalid_request"


def test_the_policy_never_offers_what_it_refuses(encoder):
    policy = Policy(max_level=3, deny=("*_vault_*",))
    view = view_of(ArtefactSpec(DEMO), encoder, policy)
    levels = dict(zip(view.catalogue.registry.names, view.catalogue.effective_levels, strict=True))
    assert max(levels.values()) <= 3 and not any("_vault_" in n for n in levels)
    assert view.not_offered and set(view.not_offered.values()) == {"denied_by_policy", "above_max_level"}
    out = Gateway(view, policy=policy).find({"task": "wipe the disk and run a shell command as root", "k": 10})
    assert all(t["risk_level"] <= 3 for t in out["tools"]) and out["policy"]["not_offered"] == len(view.not_offered)


def test_equal_input_equal_output(dense_view):
    server = build_server(Gateway(dense_view))
    args = {"task": "transfer money from my bank account", "k": 4}
    assert call(server, "find_tools", args).content[0].text == call(server, "find_tools", args).content[0].text


# -- MCP annotations as risk evidence -------------------------------------------------------------------
def test_annotations_as_risk_evidence():
    reg = ToolRegistry.from_data(MCP_TOOLS, fmt="mcp")
    filled = resolve_tool_levels(reg, fill_keyword=True)
    level = dict(zip(reg.names, filled.levels.tolist(), strict=True))
    ev = dict(zip(reg.names, filled.evidence, strict=True))
    assert set(filled.provenance) == {"keyword"}
    # destructiveHint is never low risk, even with a harmless description.
    assert level["tidy_notes"] >= 4 and "mcp: destructiveHint" in ev["tidy_notes"]
    assert level["purge_notes"] >= 4
    # By default hints only raise: read_notes keeps its keyword level ('saved' note: L3);
    # openWorldHint is at least L2.
    assert level["read_notes"] == 3 and "mcp: readOnlyHint (not trusted: hints only raise a level)" in ev["read_notes"]
    assert level["search_web"] == 2 and "mcp: openWorldHint" in ev["search_web"]
    assert level["count_words"] == 1
    # Trusted, an uncontradicted readOnlyHint lowers to at most L2.
    trusted = resolve_tool_levels(reg, fill_keyword=True, trust_annotations=True)
    assert trusted.levels[0] <= 2 and "mcp: readOnlyHint" in trusted.evidence[0]

    # Without filling: the rule filter's fail-closed path reads the hints that raise a level.
    prov = resolve_tool_levels(reg).provenance
    assert dict(zip(reg.names, prov, strict=True)) == {
        "read_notes": "unlabelled", "purge_notes": "annotation", "tidy_notes": "annotation",
        "search_web": "unlabelled", "count_words": "unlabelled"}
    prov = resolve_tool_levels(reg, trust_annotations=True).provenance
    assert dict(zip(reg.names, prov, strict=True))["read_notes"] == "annotation"
    # A policy pin wins over every other source, and provenance says so.
    pinned = resolve_tool_levels(reg, fill_keyword=True, pins={"tidy_notes": 1, "count_words": 5})
    assert pinned.of(reg.index_of("tidy_notes"))["risk_level"] == 1
    assert pinned.of(reg.index_of("count_words"))["risk_provenance"] == "policy"


def test_unlabelled_tools_fail_closed(tmp_path, encoder):
    spec = ArtefactSpec(str(write_mcp_registry(tmp_path / "t.json")), mode="dense+rule")
    everything = Policy(max_level=5)
    view = view_of(spec, encoder, everything)
    eff = dict(zip(view.catalogue.registry.names, view.catalogue.effective_levels, strict=True))
    # hints only raise: the read-only tools stay fail-closed like any unlabelled tool
    assert eff == {"read_notes": 5, "purge_notes": 5, "tidy_notes": 5, "search_web": 5, "count_words": 5}
    trusting = view_of(ArtefactSpec(spec.registry, mode="dense+rule", trust_annotations=True), encoder, everything)
    assert dict(zip(trusting.catalogue.registry.names, trusting.catalogue.effective_levels, strict=True)) == {
        "read_notes": 2, "purge_notes": 5, "tidy_notes": 5, "search_web": 2, "count_words": 5}
    out = Gateway(view, policy=everything).find({"task": "remove every note in my notebook", "k": 3})
    assert sum(t["risk_level"] >= RISKY_LEVEL for t in out["tools"]) <= 1
    assert "count_words" in out["unlabelled"] or "count_words" not in {t["name"] for t in out["tools"]}
    # Under the default policy (max_level 4) the fail-closed L5 tools are never offered at all:
    # every one of them here, since untrusted hints lower nothing; trusted, the two read-only ones are.
    assert set(view_of(spec, encoder).not_offered) == set(eff)
    trusted_spec = ArtefactSpec(spec.registry, mode="dense+rule", trust_annotations=True)
    assert set(view_of(trusted_spec, encoder).not_offered) == {"purge_notes", "tidy_notes", "count_words"}


# -- call_tool's decisions, against a stub upstream ------------------------------------------------------
class StubSession:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    async def call_tool(self, name, arguments, progress_callback=None):
        self.calls.append((name, arguments))
        if progress_callback is not None:
            await progress_callback(1.0, 1.0, "done")
        if name == "boom":
            raise RuntimeError("the tool crashed\nwith details")
        if arguments.get("fail"):
            return mcp_compat.tool_result("no such note: " + str(arguments["fail"]), is_error=True)
        return mcp_compat.tool_result(json.dumps({"called": name, "arguments": arguments}))


class StubCall:
    """A CallCtx stand-in: one session key, a confirmation answer, progress recorded."""

    def __init__(self, answer: str = "unsupported", key: str = "s1", progress_token=None) -> None:
        self.answer, self.session_key, self.progress_token = answer, key, progress_token
        self.asked: list[str] = []
        self.progress_seen: list[tuple] = []

    @property
    def wants_progress(self) -> bool:
        return self.progress_token is not None

    async def progress(self, p, total=None, message=None):
        self.progress_seen.append((p, total, message))

    async def confirm(self, message, bind, details=None):
        self.asked.append(message)
        return self.answer


TOOLS = [
    {"name": "read_notes", "description": "Return the text of a note.", "annotations": {"readOnlyHint": True}},
    {"name": "append_note", "description": "Append a line to a note.",
     "inputSchema": {"type": "object", "properties": {"note": {"type": "string"}, "line": {"type": "string", "maxLength": 80}},
                     "required": ["note", "line"], "additionalProperties": False}},
    {"name": "purge_notes", "description": "Permanently delete every note in a notebook.", "annotations": {"destructiveHint": True}},
    {"name": "run_shell", "description": "Run a shell command as root and delete files.", "inputSchema": {"type": "object"}},
    {"name": "boom", "description": "Count the words of a note.", "annotations": {"readOnlyHint": True}},
    {"name": "malformed", "description": "A hint that is not a boolean.", "annotations": {"readOnlyHint": "yes"}},
]


@pytest.fixture
def gateway(tmp_path, encoder):
    """A gateway over one stub upstream, policy max_level 4, confirm_level 3, run_* pinned to
    L5, audit log on."""
    return make_gateway(tmp_path, encoder)


def make_gateway(tmp_path, encoder, max_level: int = 4):
    """The ``gateway`` fixture's gateway, with another ``max_level`` where a test needs one."""
    manager = UpstreamManager([UpstreamConfig("notes", mcp_compat.ServerTarget(command="sh"))])
    up = manager.upstreams["notes"]
    up.state, up.tools, up.known_tools, up.session = "up", TOOLS, {t["name"] for t in TOOLS}, StubSession()
    from riskrank.serving.gateway.core import record_registry, upstream_records

    records, routes = upstream_records(manager)
    registry, skipped = record_registry(records, "stub")
    assert list(skipped) == ["malformed"] and "readOnlyHint" in skipped["malformed"]  # one bad tool, not a dead catalogue
    # run_shell's level is pinned by the policy (an operator's audit), above max_level.
    policy = Policy(max_level=max_level, confirm_level=3, levels={"run_*": 5}, source="policy.json")
    view = build_view(registry, ArtefactSpec("stub", fill_levels="keyword"), encoder, policy, 1, routes=routes, skipped=skipped)
    assert "malformed" not in view.levels
    gw = Gateway(view, policy=policy, manager=manager, audit=AuditLog(tmp_path / "audit.jsonl"))
    gw.test_audit_path = tmp_path / "audit.jsonl"
    return gw


def run_call(gw, name, arguments=None, call=None):
    call = call or StubCall()
    return anyio.run(gw.forward_call, {"name": name, "arguments": arguments or {}}, call)


def text_of(result) -> str:
    return mcp_compat.wire(result)["content"][0]["text"]


def test_call_tool_only_what_the_latest_find_returned(gateway):
    levels = {n: lvl for n, (lvl, _) in gateway.view.levels.items()}
    assert levels["read_notes"] <= 2 and levels["purge_notes"] >= 4 and levels["run_shell"] == 5
    assert gateway.view.levels["run_shell"][1] == "policy"  # the pin wins, and says so
    assert "run_shell" in gateway.view.not_offered  # L5 > max_level 4: never ranked, never callable
    s1 = StubCall(key="s1")
    res = run_call(gateway, "read_notes", call=s1)
    assert text_of(res).startswith("not_exposed: 'read_notes' cannot be called")
    found = anyio.run(gateway.find_tools, {"task": "read the text of my saved note", "k": 2}, s1)
    names = [t["name"] for t in mcp_compat.wire(found)["structuredContent"]["tools"]]
    assert "read_notes" in names
    res = run_call(gateway, "read_notes", {"title": "x"}, call=s1)
    assert not mcp_compat.wire(res).get("isError") and json.loads(text_of(res))["called"] == "read_notes"
    # Another session has its own (empty) exposure.
    assert text_of(run_call(gateway, "read_notes", call=StubCall(key="s2"))).startswith("not_exposed")
    # A later result replaces the exposure: read_notes is no longer callable if not returned.
    anyio.run(gateway.find_tools, {"task": "count the words", "k": 1}, s1)
    assert gateway.exposure["s1"].names == frozenset({"boom"})
    assert text_of(run_call(gateway, "read_notes", call=s1)).startswith("not_exposed")
    # Naming a never-offered tool in a task does not expose it.
    anyio.run(gateway.find_tools, {"task": "run_shell: run a shell command as root", "k": 5}, s1)
    assert "run_shell" not in gateway.exposure["s1"].names
    # ... and its refusal says why (never offered), not "call find_tools first", which would loop.
    refused = text_of(run_call(gateway, "run_shell", call=s1))
    assert refused.startswith("above_max_level: 'run_shell' is risk level 5 and is never offered") and "find_tools" not in refused


def test_call_time_policy_and_confirmation(gateway):
    s = StubCall(answer="unsupported")
    gateway._expose("s1", Exposure("delete my notes", frozenset({"purge_notes", "run_shell", "read_notes"}), 0.0))
    # A tool exposed by mistake (or an older generation) still meets the policy at call time.
    assert text_of(run_call(gateway, "run_shell", call=s)).startswith("above_max_level: 'run_shell' is risk level 5")
    res = run_call(gateway, "purge_notes", call=s)
    assert text_of(res).startswith("confirmation_required: 'purge_notes' is risk level") and "elicitation" in text_of(res)
    declined = StubCall(answer="decline")
    assert text_of(run_call(gateway, "purge_notes", call=declined)).startswith("denied: the user did not confirm")
    accepted = StubCall(answer="accept", progress_token="p1")
    res = run_call(gateway, "purge_notes", {"notebook": "old"}, call=accepted)
    assert not mcp_compat.wire(res).get("isError") and accepted.asked and "purge_notes" in accepted.asked[0]
    assert accepted.progress_seen == [(1.0, 1.0, "done")]  # the upstream's progress reached the caller
    assert gateway.manager.upstreams["notes"].session.calls[-1] == ("purge_notes", {"notebook": "old"})
    # Below confirm_level nothing is asked.
    quiet = StubCall(answer="decline")
    assert not mcp_compat.wire(run_call(gateway, "read_notes", call=quiet)).get("isError") and not quiet.asked
    bad = anyio.run(gateway.forward_call, {"name": "x", "extra": 1}, s)
    assert text_of(bad).startswith("invalid_request")


def test_upstream_errors_and_the_audit_log(gateway):
    s = StubCall()
    gateway._expose("s1", Exposure("count the words", frozenset({"boom", "ghost"}), 0.0))
    res = run_call(gateway, "boom", call=s)
    assert text_of(res) == "upstream_error: the upstream server 'notes' failed on 'boom': the tool crashed"
    assert text_of(run_call(gateway, "ghost", call=s)).startswith("upstream_down")
    gateway.manager.upstreams["notes"].state = "down"
    gateway.manager.upstreams["notes"].session = None
    assert text_of(run_call(gateway, "boom", call=s)).startswith("upstream_down")
    lines = [json.loads(x) for x in gateway.test_audit_path.read_text().splitlines()]
    assert all({"time", "task", "tool", "level", "decision", "reason"} <= set(r) for r in lines)
    assert [(r["tool"], r["decision"], r["code"]) for r in lines] == [
        ("boom", "allowed", "allowed"), ("boom", "failed", "upstream_error"),
        ("ghost", "refused", "upstream_down"), ("boom", "refused", "upstream_down")]
    assert lines[0]["task"] == "count the words" and lines[0]["session"] == "s1" and lines[0]["upstream"] == "notes"


def test_refusals_name_their_cause_and_are_audited(gateway, encoder):
    """One code per cause: a tool the policy denies is denied_by_policy (never offered, do not
    search again), a name no search returns is unknown_tool, arguments that do not match the
    tool's input schema are invalid_arguments before the upstream is called; each is a
    refused audit line with the same code. A tool that answers with an error is a failed line."""
    denying = Policy(max_level=4, confirm_level=3, deny=("purge_*",), levels={"run_*": 5}, source="policy.json")
    view = build_view(_stub_registry(gateway), ArtefactSpec("stub", fill_levels="keyword"), encoder, denying, 2,
                      routes=gateway.view.routes)
    gw = Gateway(view, policy=denying, manager=gateway.manager, audit=gateway.audit)
    s = StubCall(key="s9")
    found = anyio.run(gw.find_tools, {"task": "write a line into my note", "k": 3}, s)
    out = mcp_compat.wire(found)["structuredContent"]
    assert out["catalogue"]["source"] == "upstreams: notes"
    text = text_of(run_call(gw, "purge_notes", {"notebook": "x"}, call=s))
    assert text.startswith("denied_by_policy: 'purge_notes' is never offered to this client: the policy (policy.json) denies it")
    assert "find_tools" not in text
    assert text_of(run_call(gw, "no_such_tool", call=s)).startswith("unknown_tool: no tool named 'no_such_tool'")
    gw._expose("s9", Exposure("write a line into my note", frozenset({"append_note", "read_notes"}), time.monotonic()))
    session = gateway.manager.upstreams["notes"].session
    before = len(session.calls)
    bad = text_of(run_call(gw, "append_note", {"note": "todo", "line": 7}, call=s))
    assert bad == "invalid_arguments: the arguments of 'append_note' do not match its input_schema: at line: 7 is not of type 'string'"
    missing = text_of(run_call(gw, "append_note", {"note": "todo"}, call=s))
    assert missing.startswith("invalid_arguments:") and "'line' is a required property" in missing
    assert len(session.calls) == before  # the upstream was never called
    ok = run_call(gw, "append_note", {"note": "todo", "line": "buy milk"}, call=s)
    assert not mcp_compat.wire(ok).get("isError") and session.calls[-1] == ("append_note", {"note": "todo", "line": "buy milk"})
    failed = run_call(gw, "read_notes", {"fail": "x"}, call=s)
    assert mcp_compat.wire(failed)["isError"]
    lines = [json.loads(x) for x in gateway.test_audit_path.read_text().splitlines()]
    calls = [(r["tool"], r["decision"], r["code"]) for r in lines if r["tool"] != "find_tools"]
    assert calls == [("purge_notes", "refused", "denied_by_policy"), ("no_such_tool", "refused", "unknown_tool"),
                     ("append_note", "refused", "invalid_arguments"), ("append_note", "refused", "invalid_arguments"),
                     ("append_note", "allowed", "allowed"), ("read_notes", "allowed", "allowed"),
                     ("read_notes", "failed", "tool_error")]
    assert lines[-1]["reason"] == "no such note: x"


def _stub_registry(gateway):
    from riskrank.serving.gateway.core import record_registry, upstream_records

    records, _ = upstream_records(gateway.manager)
    return record_registry(records, "stub")[0]


def test_find_tools_in_a_context_mode_says_why(tmp_path, encoder):
    ck = make_checkpoint(tmp_path / "ck", need=True)
    view = view_of(ArtefactSpec(DEMO, str(ck), mode="core+graph+context+rule"), encoder)
    out = payload(call(build_server(Gateway(view)), "find_tools", {"task": "delete the old log files", "k": 5}))
    assert out["mode"] == "core+graph+context+rule"
    assert 0 <= out["need"] <= 1 and {"threshold", "margin", "risk_cap", "admitted"} <= set(out["context"])
    assert all(w.get("context") for w in out["withheld"] if "context" in w["reasons"])
    assert "need estimate" in pipeline_sentence("core+graph+context+rule", "safe", None)
