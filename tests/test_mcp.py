"""The MCP server: find_tools through the official SDK's client, in process and end to end
over stdio (`riskrank mcp` as a subprocess, with and without an upstream MCP server), and
MCP tool annotations as risk evidence."""

from __future__ import annotations

import json
import os
import shlex

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from riskrank.catalogue import ArtefactSpec, label_provenance, load_catalogue
from riskrank.datasets.demo import demo_registry_path
from riskrank.encoder import make_encoder
from riskrank.registry import ToolRegistry
from riskrank.serving.auth import Gate
from riskrank.serving.mcp import ToolFinder, build_server
from test_server_support import (
    MCP_TOOLS,
    TOKEN,
    HashEncoder,
    ServerThread,
    make_checkpoint,
    python_c,
    write_mcp_registry,
)

DEMO = str(demo_registry_path())


@pytest.fixture(scope="module")
def encoder():
    return make_encoder(HashEncoder())


@pytest.fixture(scope="module")
def rule_catalogue(tmp_path_factory, encoder):
    ck = make_checkpoint(tmp_path_factory.mktemp("ck") / "ck")
    return load_catalogue(ArtefactSpec(DEMO, str(ck), mode="rule"), encoder)


@pytest.fixture(scope="module")
def dense_catalogue(encoder):
    return load_catalogue(ArtefactSpec(DEMO, mode="dense+rule"), encoder)


def call(server, name: str, args: dict):
    async def go():
        async with Client(server) as c:
            return await c.call_tool(name, args)

    return anyio.run(go)


def payload(result) -> dict:
    """The structured content, checked equal to the JSON text an LLM reads."""
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def test_find_tools_is_listed_with_schema_and_annotations(dense_catalogue):
    async def go():
        async with Client(build_server(ToolFinder(dense_catalogue))) as c:
            return (await c.list_tools()).tools

    tools = anyio.run(go)
    assert [t.name for t in tools] == ["find_tools"]
    t = tools[0]
    props = t.input_schema["properties"]
    assert t.input_schema["required"] == ["task"]
    assert props["task"]["type"] == "string" and props["k"]["maximum"] == 100 and "rule" in props["mode"]["enum"]
    assert t.annotations.read_only_hint is True and t.annotations.destructive_hint is False


def test_find_tools_returns_the_pipelines_ranking(rule_catalogue):
    task = "delete the old log files and free disk space"
    out = payload(call(build_server(ToolFinder(rule_catalogue)), "find_tools", {"task": task, "k": 5}))
    direct = rule_catalogue.retriever.retrieve(task, k=5)
    assert [t["name"] for t in out["tools"]] == [t.name for t in direct.tools]
    assert out["mode"] == "core+graph+rule" and out["catalogue"]["n_tools"] == 98
    for t in out["tools"]:
        assert {"name", "description", "input_schema", "risk_level", "risk_provenance", "risk_evidence", "reasons"} <= set(t)
        assert t["input_schema"]["type"] == "object" and 1 <= t["risk_level"] <= 5
    assert sum(t["risk_level"] >= 3 for t in out["tools"]) <= 1 or any(t["reasons"] for t in out["tools"])
    returned = {t["name"] for t in out["tools"]}
    assert [w["name"] for w in out["withheld"]] == [d.name for d in direct.deferred if d.name not in returned]
    assert all(w["reasons"] for w in out["withheld"])
    fallback = {t["name"] for t in out["tools"] if t["reasons"]}
    assert fallback == set(direct.fallback) & returned


@pytest.mark.parametrize("args,code", [
    ({"task": "   "}, "task_empty"),
    ({"task": "x" * 4001}, "task_too_long"),
    ({"task": 5}, "invalid_request"),
    ({"task": "ok", "k": 0}, "k_out_of_range"),
    ({"task": "ok", "k": 101}, "k_out_of_range"),
    ({"task": "ok", "k": "many"}, "invalid_request"),
    ({"task": "ok", "mode": "yolo"}, "invalid_mode"),
    ({"task": "ok", "mode": "core"}, "mode_unavailable"),
])
def test_find_tools_errors_are_json(dense_catalogue, args, code):
    res = call(build_server(ToolFinder(dense_catalogue)), "find_tools", args)
    assert res.is_error
    assert payload(res)["error"]["code"] == code


# -- MCP annotations as risk evidence -------------------------------------------------------------------
def test_annotations_as_risk_evidence():
    reg = ToolRegistry.from_data(MCP_TOOLS, fmt="mcp")
    filled, prov, evidence = label_provenance(reg, fill=True)
    level = {t.name: t.risk_level for t in filled}
    ev = dict(zip(reg.names, evidence, strict=True))
    assert set(prov) == {"keyword"}
    # destructiveHint is never low risk, even with a harmless description.
    assert level["tidy_notes"] >= 4 and "mcp: destructiveHint" in ev["tidy_notes"]
    assert level["purge_notes"] >= 4
    # By default hints only raise: read_notes keeps its keyword level ('saved' note: L3);
    # openWorldHint is at least L2.
    assert level["read_notes"] == 3 and "mcp: readOnlyHint (not trusted: hints only raise a level)" in ev["read_notes"]
    assert level["search_web"] == 2 and "mcp: openWorldHint" in ev["search_web"]
    assert level["count_words"] == 1
    # Trusted, an uncontradicted readOnlyHint lowers to at most L2.
    trusted, _, tev = label_provenance(reg, fill=True, trust_annotations=True)
    assert {t.name: t.risk_level for t in trusted}["read_notes"] <= 2 and "mcp: readOnlyHint" in tev[0]

    # Without filling: the rule filter's fail-closed path reads the hints that raise a level.
    _, prov, _ = label_provenance(reg, fill=False)
    assert dict(zip(reg.names, prov, strict=True)) == {
        "read_notes": "unlabelled", "purge_notes": "annotation", "tidy_notes": "annotation",
        "search_web": "unlabelled", "count_words": "unlabelled"}
    _, prov, _ = label_provenance(reg, fill=False, trust_annotations=True)
    assert dict(zip(reg.names, prov, strict=True))["read_notes"] == "annotation"


def test_unlabelled_tools_fail_closed_in_rule_mode(tmp_path, encoder):
    cat = load_catalogue(ArtefactSpec(str(write_mcp_registry(tmp_path / "t.json")), mode="dense+rule"), encoder)
    eff = dict(zip(cat.registry.names, cat.effective_levels, strict=True))
    # hints only raise: the read-only tools stay fail-closed like any unlabelled tool
    assert eff == {"read_notes": 5, "purge_notes": 5, "tidy_notes": 5, "search_web": 5, "count_words": 5}
    trusting = load_catalogue(ArtefactSpec(str(write_mcp_registry(tmp_path / "t.json")), mode="dense+rule", trust_annotations=True),
                              encoder)
    assert dict(zip(trusting.registry.names, trusting.effective_levels, strict=True)) == {
        "read_notes": 2, "purge_notes": 5, "tidy_notes": 5, "search_web": 2, "count_words": 5}
    out = ToolFinder(cat).find("remove every note in my notebook", k=3)
    assert sum(t["risk_level"] >= 3 for t in out["tools"]) <= 1 or any(t["reasons"] for t in out["tools"])
    assert "count_words" in out["unlabelled"] or "count_words" not in {t["name"] for t in out["tools"]}


# -- end to end over stdio ---------------------------------------------------------------------------------
def stdio(argv: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))


@pytest.mark.slow
def test_stdio_end_to_end():
    """Registry mode over stdio (the proxy test below covers stdio in the default run)."""
    argv = python_c(f"s.run_cli_with_hash_encoder(['mcp', '--registry', {DEMO!r}, '--mode', 'dense+rule', '-k', '3'])")

    async def go():
        async with Client(stdio(argv)) as c:
            tools = (await c.list_tools()).tools
            res = await c.call_tool("find_tools", {"task": "transfer money from my bank account"})
            bad = await c.call_tool("find_tools", {"task": "x", "k": 500})
            return tools, res, bad

    tools, res, bad = anyio.run(go)
    assert [t.name for t in tools] == ["find_tools"]
    out = payload(res)
    assert len(out["tools"]) == 3 and out["mode"] == "dense+rule"
    assert bad.is_error and payload(bad)["error"]["code"] == "k_out_of_range"


def test_stdio_proxy_audits_and_forwards():
    upstream = shlex.join(python_c("s.run_fake_upstream(page_size=2)"))
    argv = python_c(f"s.run_cli_with_hash_encoder(['mcp', '--upstream', {upstream!r}, '--forward', '--mode', 'dense+rule'])")

    async def go():
        async with Client(stdio(argv)) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            before = await c.call_tool("call_tool", {"name": "purge_notes", "arguments": {"notebook": "work"}})
            found = await c.call_tool("find_tools", {"task": "permanently remove every note in a notebook", "k": 3})
            exposed = payload(found)["tools"][0]["name"]
            after = await c.call_tool("call_tool", {"name": exposed, "arguments": {"x": 1}})
            return names, before, found, exposed, after

    names, before, found, exposed, after = anyio.run(go)
    assert names == ["find_tools", "call_tool"]
    assert before.is_error and payload(before)["error"]["code"] == "not_exposed"
    out = payload(found)
    assert out["catalogue"]["n_tools"] == 5  # all pages of the upstream tools/list
    tools = {t["name"]: t for t in out["tools"]}
    for t in tools.values():
        assert t["risk_provenance"] == "keyword"
    if "purge_notes" in tools:
        assert tools["purge_notes"]["risk_level"] >= 4 and "mcp: destructiveHint" in tools["purge_notes"]["risk_evidence"]
    # At most one risky tool shown (rule filter); the other destructive one is withheld with a reason.
    assert sum(t["risk_level"] >= 3 for t in tools.values()) <= 1
    assert any("risk_cap" in w["reasons"] for w in out["withheld"])
    assert not after.is_error and json.loads(after.content[0].text) == {"called": exposed, "arguments": {"x": 1}}


def test_streamable_http_behind_the_token_gate(dense_catalogue):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = build_server(ToolFinder(dense_catalogue))
    app = Gate(server.streamable_http_app(host="127.0.0.1"), token=TOKEN)
    with ServerThread(app, lifespan="on") as s:
        r = httpx.post(s.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"

        async def go():
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http, \
                    Client(streamable_http_client(s.url + "/mcp", http_client=http)) as c:
                return await c.call_tool("find_tools", {"task": "what is the weather in Paris", "k": 2})

        res = anyio.run(go)
    assert not res.is_error and len(payload(res)["tools"]) == 2


@pytest.mark.slow
def test_real_cli_with_the_default_encoder():
    """`riskrank mcp` as a user starts it: the bundled MiniLM encoder, stdio."""
    import sys

    argv = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "mcp", "--mode", "dense+rule"]

    async def go():
        async with Client(stdio(argv)) as c:
            return await c.call_tool("find_tools", {"task": "delete all the files in my home folder", "k": 5})

    out = payload(anyio.run(go))
    assert len(out["tools"]) == 5
    assert sum(t["risk_level"] >= 3 for t in out["tools"]) <= 1 or any(t["reasons"] for t in out["tools"])


def test_upstream_failures_are_one_line_errors(monkeypatch, capsys):
    import sys

    from riskrank.cli import run
    from riskrank.encoder import BatchingEncoder

    monkeypatch.setattr("riskrank.encoder.make_encoder", lambda *a, **k: BatchingEncoder(HashEncoder()))
    for cmd, msg in [("definitely-not-a-command --flag", "No such file"),
                     (shlex.join([sys.executable, "-c", "import sys; sys.exit(3)"]), "failed")]:
        monkeypatch.setattr("sys.argv", ["riskrank", "mcp", "--upstream", cmd])
        assert run() == 2
        err = capsys.readouterr().err
        assert "error: the upstream server" in err and msg in err and "Traceback" not in err
