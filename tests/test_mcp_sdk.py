"""riskrank's MCP server against the installed MCP SDK, whichever major (1.x or 2.x): `riskrank
mcp` as a subprocess over stdio, driven by the SDK's own client, in registry mode and in proxy
mode (an upstream MCP server, audited and forwarded to).

The default suite runs these with the locked SDK (2.x). `.ci/run` runs this file again in a
venv with mcp 1.x, with RISKRANK_EXPECT_MCP=1 so a run on the wrong SDK fails instead of
passing quietly. Everything here reads the wire shape (``model_dump(by_alias=True)``), which
both majors share.
"""

from __future__ import annotations

import json
import os
import shlex

import anyio
import pytest

from riskrank.datasets.demo import demo_registry_path
from riskrank.serving import mcp_compat
from test_server_support import python_c

pytestmark = pytest.mark.mcp_sdk
DEMO = str(demo_registry_path())


def wire(model) -> dict:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def payload(result) -> dict:
    """The structured content, checked equal to the JSON text an LLM reads."""
    out = wire(result)
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    return out["structuredContent"]


def session(argv: list[str]):
    return mcp_compat.connect_stdio(mcp_compat.stdio_params(argv, env=dict(os.environ)))


def test_the_expected_sdk_is_installed():
    expected = os.environ.get("RISKRANK_EXPECT_MCP")
    major = mcp_compat.sdk_major()
    assert major in (1, 2)
    if expected:
        assert major == int(expected), f"expected mcp {expected}.x, found {major}.x"


def test_find_tools_over_stdio():
    argv = python_c(f"s.run_cli_with_hash_encoder(['mcp', '--registry', {DEMO!r}, '--mode', 'dense+rule', '-k', '3'])")

    async def go():
        async with session(argv) as client:
            tools, _ = await client.list_tools_page(None)
            res = await client.call_tool("find_tools", {"task": "transfer money from my bank account"})
            bad = await client.call_tool("find_tools", {"task": "x", "k": 500})
            return tools, res, bad

    tools, res, bad = anyio.run(go)
    assert [t["name"] for t in tools] == ["find_tools"]
    schema = tools[0]["inputSchema"]
    assert schema["required"] == ["task"] and schema["properties"]["k"]["maximum"] == 100
    assert "rule" in schema["properties"]["mode"]["enum"]
    assert tools[0]["annotations"]["readOnlyHint"] is True and tools[0]["annotations"]["destructiveHint"] is False
    out = payload(res)
    assert len(out["tools"]) == 3 and out["mode"] == "dense+rule" and out["catalogue"]["n_tools"] == 98
    assert sum(t["risk_level"] >= 3 for t in out["tools"]) <= 1 or any(t["reasons"] for t in out["tools"])
    assert wire(bad)["isError"] is True and payload(bad)["error"]["code"] == "k_out_of_range"


def test_proxy_audits_and_forwards_over_stdio():
    upstream = shlex.join(python_c("s.run_fake_upstream(page_size=2)"))
    argv = python_c(f"s.run_cli_with_hash_encoder(['mcp', '--upstream', {upstream!r}, '--forward', '--mode', 'dense+rule'])")

    async def go():
        async with session(argv) as client:
            tools, _ = await client.list_tools_page(None)
            before = await client.call_tool("call_tool", {"name": "purge_notes", "arguments": {"notebook": "work"}})
            found = await client.call_tool("find_tools", {"task": "permanently remove every note in a notebook", "k": 3})
            exposed = payload(found)["tools"][0]["name"]
            after = await client.call_tool("call_tool", {"name": exposed, "arguments": {"x": 1}})
            return [t["name"] for t in tools], before, found, exposed, after

    names, before, found, exposed, after = anyio.run(go)
    assert names == ["find_tools", "call_tool"]
    assert wire(before)["isError"] is True and payload(before)["error"]["code"] == "not_exposed"
    out = payload(found)
    assert out["catalogue"]["n_tools"] == 5  # all pages of the upstream tools/list
    assert {t["risk_provenance"] for t in out["tools"]} == {"keyword"}
    assert sum(t["risk_level"] >= 3 for t in out["tools"]) <= 1
    assert any("risk_cap" in w["reasons"] for w in out["withheld"])
    forwarded = wire(after)
    assert not forwarded.get("isError") and json.loads(forwarded["content"][0]["text"]) == {"called": exposed, "arguments": {"x": 1}}


def test_streamable_http_app_behind_the_gate():
    """The SDK's streamable-HTTP app, built through the compat layer, behind riskrank's token
    gate: refused without the token, an MCP initialize answered with it."""
    import httpx

    from riskrank.catalogue import ArtefactSpec, load_catalogue
    from riskrank.encoder import make_encoder
    from riskrank.serving.auth import Gate
    from riskrank.serving.mcp import ToolFinder, build_server
    from test_server_support import TOKEN, HashEncoder, ServerThread

    cat = load_catalogue(ArtefactSpec(DEMO, mode="dense+rule"), make_encoder(HashEncoder()))
    server = build_server(ToolFinder(cat), host="127.0.0.1")
    app = Gate(mcp_compat.streamable_http_app(server, "127.0.0.1"), token=TOKEN)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    with ServerThread(app, lifespan="on") as s:
        r = httpx.post(s.url + "/mcp", json=init)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = httpx.post(s.url + "/mcp", json=init, timeout=30, headers={
            "Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    assert '"serverInfo"' in r.text and '"riskrank"' in r.text
