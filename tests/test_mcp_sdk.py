"""riskrank's MCP server against the installed MCP SDK, whichever major (1.x or 2.x): `riskrank
mcp` as a subprocess over stdio, driven by the SDK's own client session, as a search server
over a registry and as a gateway in front of an upstream MCP server; its streamable-HTTP app
behind the token gate; and its start-up errors (one line, no traceback).

The default suite runs these with the locked SDK (2.x). `.ci/run` runs this file again in a
venv with mcp 1.x, with RISKRANK_EXPECT_MCP=1 so a run on the wrong SDK fails instead of
passing quietly. Everything here reads the wire shape, which both majors share.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import anyio
import pytest

from riskrank.datasets.demo import demo_registry_path
from riskrank.risk import RISKY_LEVEL
from riskrank.serving import mcp_compat
from test_server_support import python_c

pytestmark = pytest.mark.mcp_sdk
DEMO = str(demo_registry_path())
#: A hang guard around each conversation (the tests assert outcomes, never durations).
GUARD_S = 120


def payload(result) -> dict:
    """The structured content, checked equal to the JSON text an LLM reads."""
    out = mcp_compat.wire(result)
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"]
    return out["structuredContent"]


def refusal(result) -> str:
    """The text of an isError result (it starts with the stable code)."""
    out = mcp_compat.wire(result)
    assert out.get("isError") is True, out
    return out["content"][0]["text"]


def target(argv: list[str]) -> mcp_compat.ServerTarget:
    return mcp_compat.ServerTarget(command=argv[0], args=tuple(argv[1:]), env={"HF_HUB_OFFLINE": "1", **_cache_env()})


def _cache_env() -> dict[str, str]:
    return {k: os.environ[k] for k in ("RISKRANK_CACHE", "PYTHONPATH") if k in os.environ}


def cli(*args: str) -> list[str]:
    return python_c(f"s.run_cli_with_hash_encoder({list(args)!r})")


def test_the_expected_sdk_is_installed():
    expected = os.environ.get("RISKRANK_EXPECT_MCP")
    major = mcp_compat.sdk_major()
    assert major in (1, 2)
    if expected:
        assert major == int(expected), f"expected mcp {expected}.x, found {major}.x"


def test_find_tools_over_stdio():
    async def go():
        with anyio.fail_after(GUARD_S):
            async with mcp_compat.open_session(target(cli("mcp", "--registry", DEMO, "-k", "3"))) as s:
                tools = await mcp_compat.list_all(s, "tools")
                res = await s.call_tool("find_tools", {"task": "transfer money from my bank account"})
                bad = await s.call_tool("find_tools", {"task": "x", "k": 500})
                widen = await s.call_tool("find_tools", {"task": "x", "mode": "dense", "k": 100})
                return tools, res, bad, widen

    tools, res, bad, widen = anyio.run(go)
    assert [t["name"] for t in tools] == ["find_tools"]
    schema = tools[0]["inputSchema"]
    assert schema["required"] == ["task"] and set(schema["properties"]) == {"task", "k"}
    assert tools[0]["annotations"]["readOnlyHint"] is True and tools[0]["annotations"]["destructiveHint"] is False
    assert "cosine relevance (no risk term)" in tools[0]["description"]
    assert "never tops the list up with a risky tool" in tools[0]["description"]
    out = payload(res)
    assert out["mode"] == "dense+rule" and out["fill"] == "safe" and 1 <= len(out["tools"]) <= 3
    assert sum(t["risk_level"] >= RISKY_LEVEL for t in out["tools"]) <= 1
    assert refusal(bad).startswith("k_out_of_range: ")
    assert refusal(widen).startswith("invalid_request: unknown argument(s) ['mode']")


def test_gateway_over_stdio(tmp_path):
    """An upstream server (pages of tools, annotations) behind the gateway: audited, only the
    latest result callable, every decision in the audit log."""
    upstream = shlex.join(python_c("s.run_fake_upstream(page_size=2)"))
    audit = tmp_path / "audit.jsonl"
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"max_level": 5, "confirm_level": 5}))
    argv = cli("mcp", "--upstream", upstream, "--policy", str(policy), "--audit-log", str(audit))

    async def go():
        with anyio.fail_after(GUARD_S):
            async with mcp_compat.open_session(target(argv)) as s:
                names = [t["name"] for t in await mcp_compat.list_all(s, "tools")]
                before = await s.call_tool("call_tool", {"name": "read_notes", "arguments": {"title": "x"}})
                found = await s.call_tool("find_tools", {"task": "return the text of a saved note", "k": 2})
                exposed = payload(found)["tools"][0]["name"]
                after = await s.call_tool("call_tool", {"name": exposed, "arguments": {"title": "x"}})
                other = await s.call_tool("find_tools", {"task": "count the words in a piece of text", "k": 1})
                again = await s.call_tool("call_tool", {"name": exposed, "arguments": {}})
                return names, before, payload(found), exposed, after, payload(other), again

    names, before, found, exposed, after, other, again = anyio.run(go)
    assert names == ["find_tools", "call_tool"]
    assert refusal(before).startswith("not_exposed: 'read_notes'")
    assert found["catalogue"]["n_tools"] == 5  # every page of the upstream's tools/list
    assert {t["risk_provenance"] for t in found["tools"]} == {"keyword"} and exposed == "read_notes"
    forwarded = mcp_compat.wire(after)
    assert not forwarded.get("isError") and json.loads(forwarded["content"][0]["text"]) == {"called": "read_notes", "arguments": {"title": "x"}}
    assert [t["name"] for t in other["tools"]] == ["count_words"]
    assert refusal(again).startswith("not_exposed: 'read_notes'")  # the later result replaced the exposure
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    assert [(r["tool"], r["decision"]) for r in lines] == [
        (None, "upstream_up"), ("read_notes", "refused"), ("find_tools", "found"), ("read_notes", "allowed"),
        ("find_tools", "found"), ("read_notes", "refused")]
    # the keyword level ("saved": L3); an untrusted readOnlyHint does not lower it
    assert lines[3]["task"] == "return the text of a saved note" and lines[3]["level"] == 3


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=GUARD_S, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("upstream", "message"), [
    ("", "error: --upstream needs a command"),
    ("definitely-not-a-command --flag", "error: --upstream: 'definitely-not-a-command' is not an executable file"),
    ("echo hi", "error: upstream 'upstream' (echo hi) failed to start: it printed 'hi', which is not MCP JSON-RPC"),
    (shlex.join([sys.executable, "-c", "import sys; print('boom: no config', file=sys.stderr); sys.exit(3)"]),
     "failed to start: the connection closed (did the process exit?); its stderr ends: 'boom: no config'"),
])
def test_upstream_failures_are_one_line_errors(upstream, message):
    out = run_cli("mcp", "--upstream", upstream, "--startup-timeout", "60")
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_streamable_http_app_behind_the_gate(tmp_path):
    """The gateway's low-level server over streamable HTTP, built through the compat layer,
    behind riskrank's token gate: refused without the token; a whole session with it."""
    import httpx

    from riskrank.catalogue import ArtefactSpec
    from riskrank.encoder import make_encoder
    from riskrank.registry import ToolRegistry
    from riskrank.serving.auth import Gate
    from riskrank.serving.gateway.core import Gateway, build_view
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.mcp import build_server
    from test_server_support import TOKEN, HashEncoder, ServerThread

    view = build_view(ToolRegistry.load(DEMO), ArtefactSpec(DEMO), make_encoder(HashEncoder()), Policy(), 1)
    app = Gate(mcp_compat.streamable_http_app(build_server(Gateway(view)), "127.0.0.1"), token=TOKEN)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    with ServerThread(app, lifespan="on") as srv:
        r = httpx.post(srv.url + "/mcp", json=init)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"

        async def go():
            http = mcp_compat.ServerTarget(url=srv.url + "/mcp", headers={"Authorization": f"Bearer {TOKEN}"})
            with anyio.fail_after(GUARD_S):
                async with mcp_compat.open_session(http) as s:
                    return await s.call_tool("find_tools", {"task": "what is the weather in Paris", "k": 2})

        res = anyio.run(go)
    out = payload(res)
    assert 1 <= len(out["tools"]) <= 2 and out["mode"] == "dense+rule"
