"""The agent-framework adapter: tool shapes, the guard in process and against a server, the
per-tool filter hook, and the README example (examples/guarded_agent.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from riskrank.adapters import GuardError, ToolGuard, tool_name, tool_record
from riskrank.catalogue import ArtefactSpec, LiveCatalogue
from riskrank.datasets.demo import demo_registry_path
from riskrank.serving.http import create_app
from test_server_support import MCP_TOOLS, TOKEN, HashEncoder, ServerThread

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "guarded_agent.py"


def load_example():
    spec = importlib.util.spec_from_file_location("guarded_agent", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def example():
    return load_example()


@pytest.fixture(scope="module")
def guard():
    return ToolGuard(k=3, mode="dense+rule", encoder=HashEncoder())


def test_import_is_dependency_free():
    code = ("import sys, riskrank.adapters; "
            "print(','.join(m for m in ('fastapi', 'uvicorn', 'mcp', 'pydantic', 'httpx', 'torch', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_tool_shapes():
    import mcp_types

    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    shapes = [
        {"type": "function", "function": {"name": "rm", "description": "Delete a file.", "parameters": schema}},
        {"type": "function", "name": "rm", "description": "Delete a file.", "parameters": schema},
        {"name": "rm", "description": "Delete a file.", "parameters": schema},
        {"name": "rm", "description": "Delete a file.", "inputSchema": schema, "annotations": {"destructiveHint": True}},
        mcp_types.Tool(name="rm", description="Delete a file.", input_schema=schema,
                       annotations=mcp_types.ToolAnnotations(destructive_hint=True)),
        type("FunctionTool", (), {"name": "rm", "description": "Delete a file.", "params_json_schema": schema})(),
    ]
    for tool in shapes:
        rec = tool_record(tool)
        assert tool_name(tool) == rec["name"] == "rm"
        assert rec["description"] == "Delete a file." and rec["parameters"] == schema
    assert tool_record(shapes[4])["annotations"] == {"destructiveHint": True}
    assert tool_record({"name": "get_the_time", "inputSchema": schema})["description"] == "get the time"
    assert tool_record({"name": "t", "title": "The time", "inputSchema": schema})["description"] == "The time"
    with pytest.raises(GuardError):
        tool_name({"description": "no name"})


def test_select_keeps_the_same_objects_ranked(guard, example):
    tools = example.TOOLS
    task = "delete the old installer files in my downloads folder"
    kept = guard.select(task, tools)
    assert 1 <= len(kept) <= 3 and all(any(k is t for t in tools) for k in kept)
    ranked = guard.rank(task, tools)
    assert [tool_name(t) for t in kept] == [t["name"] for t in ranked["tools"]][:3]
    # Unlabelled specs get the keyword annotator's level; the rule filter holds them to one
    # risky tool, and its safe fill never tops the list up with another.
    assert {t["risk_provenance"] for t in ranked["tools"]} == {"keyword"}
    assert ranked["mode"] == "dense+rule" and ranked["fill"] == "safe"
    assert sum(t["risk_level"] >= 3 for t in ranked["tools"]) <= 1
    assert all(t["risk_level"] < 3 for t in ranked["tools"] if t["name"] in ranked["fallback"])
    assert guard.names(task, tools) == [tool_name(t) for t in kept]
    # The catalogue is built once per tool set.
    assert guard._catalogue(tools) is guard._catalogue(list(tools))


def test_mcp_tools_and_annotations(guard):
    import mcp_types

    tools = [mcp_types.Tool.model_validate(t) for t in MCP_TOOLS["tools"]]
    # every tool ranked (k = all of them), so each level below is checked, not only the top 3's
    everything = ToolGuard(k=len(tools), mode="dense", encoder=HashEncoder()).rank("remove every note in my notebook", tools)
    levels = {t["name"]: t["risk_level"] for t in everything["tools"]}
    assert set(levels) == {t.name for t in tools}
    assert levels["tidy_notes"] >= 4 and levels["purge_notes"] >= 4  # destructiveHint: never low risk
    assert levels["count_words"] == 1 and levels["search_web"] == 2  # openWorldHint: at least L2
    task = "tidy up the notebook layout"
    ranked = guard.rank(task, tools)
    levels = {t["name"]: t["risk_level"] for t in ranked["tools"]}
    # destructiveHint: never low risk, whatever the description; it takes the one risky slot
    # and the other destructive tool is withheld, not topped up.
    assert levels["tidy_notes"] >= 4 and "purge_notes" not in levels
    assert {d["name"]: d["reasons"] for d in ranked["deferred"]}["purge_notes"] == ["risk_cap"]
    kept = guard.select(task, tools)
    assert [t.name for t in kept] == list(levels) and all(isinstance(t, mcp_types.Tool) for t in kept)


def test_registry_supplies_audited_levels():
    guard = ToolGuard(str(demo_registry_path()), k=3, mode="dense+rule", encoder=HashEncoder())
    agent_tools = [{"name": "delete_file", "description": "remove a file"}, {"name": "read_file", "description": "read"},
                   {"name": "brand_new_tool", "description": "Wipe the whole disk."}]
    cat = guard._catalogue(agent_tools)
    prov = dict(zip(cat.registry.names, cat.provenance, strict=True))
    assert prov == {"delete_file": "audited", "read_file": "audited", "brand_new_tool": "keyword"}
    ranked = guard.rank("wipe the disk", agent_tools)
    assert {t["risk_provenance"] for t in ranked["tools"]} <= {"audited", "keyword"} and ranked["tools"]
    # Without tools, the whole registry is the candidate set.
    assert len(guard.select("check the weather in Paris")) == 3


def test_tool_filter_hook(guard, example):
    tools = example.TOOLS
    allowed = guard.tool_filter(lambda ctx: ctx["task"], tools=tools)
    ctx = {"task": "what is the weather in Lisbon"}
    kept = {t for t in (tool_name(x) for x in tools) if allowed(ctx, {"name": t})}
    assert kept == set(guard.names(ctx["task"], tools))
    with pytest.raises(GuardError, match="candidate tools"):
        ToolGuard(encoder=HashEncoder()).tool_filter("task")


def test_errors(guard, example):
    with pytest.raises(GuardError, match="empty"):
        guard.select("  ", example.TOOLS)
    with pytest.raises(GuardError, match="duplicate"):
        guard.select("x", [example.TOOLS[0], example.TOOLS[0]])
    with pytest.raises(GuardError, match="no tools"):
        guard.select("x", [])
    with pytest.raises(GuardError):
        ToolGuard(k=0)
    with pytest.raises(GuardError, match="not both"):
        ToolGuard("reg.json", url="http://127.0.0.1:1")
    with pytest.raises(GuardError, match=r"tools must be a list of tools, got dict \(a \{"):
        guard.select("x", {"tools": example.TOOLS})
    with pytest.raises(GuardError, match="got str"):
        guard.names("x", "read_file")
    with pytest.raises(GuardError, match="must be a string, got bytes"):
        guard.select(b"x", example.TOOLS)


def test_a_registry_path_where_a_registry_goes_names_the_loader():
    from riskrank.errors import RiskrankError
    from riskrank.pipeline import RiskAwareRetriever

    with pytest.raises(RiskrankError, match=r"got str: a file is read with ToolRegistry.load\('tools.json'\)"):
        RiskAwareRetriever("tools.json")


def test_remote_backend_matches_the_server():
    svc = LiveCatalogue.from_spec(ArtefactSpec(str(demo_registry_path()), mode="dense+rule"), HashEncoder())
    with ServerThread(create_app(svc, token=TOKEN)) as s:
        remote = ToolGuard(url=s.url, token=TOKEN, k=4)
        task = "send an email to my boss"
        names = remote.names(task)
        direct = [t.name for t in svc.active.retriever.retrieve(task, k=4, mode="dense+rule").tools]
        assert names == direct
        agent_tools = [{"name": n, "description": "x"} for n in [direct[1], direct[3], "not_in_registry"]]
        assert remote.names(task, agent_tools) == [direct[1], direct[3]]
        with pytest.raises(GuardError, match="unauthorized"):
            ToolGuard(url=s.url, token="wrong-token-0123456789").names(task)
        with pytest.raises(GuardError, match="task_too_long"):
            remote.names("x" * 5000)
    with pytest.raises(GuardError, match="cannot reach"):
        ToolGuard(url=s.url, token=TOKEN, timeout=2).names("x")


def test_example_agent_loop(example, guard):
    """The README example, with the fast encoder: the model only ever calls a tool it was shown."""
    lines: list[str] = []
    runs = example.main(guard, echo=lines.append)
    assert len(runs) == len(example.TASKS)
    for run in runs:
        assert len(run["shown"]) <= 3
        assert run["called"] is None or run["called"] in run["shown"]
    assert any("model sees 3 of 12 tools" in line for line in lines)


@pytest.mark.slow
def test_example_script_with_the_default_encoder():
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=600, check=True)
    calls = [line.split("model calls ")[1].split(" ")[0] for line in out.stdout.splitlines() if "model calls " in line]
    assert calls == ["get_weather", "delete_file", "get_account_balance", "transfer_funds"], out.stdout
