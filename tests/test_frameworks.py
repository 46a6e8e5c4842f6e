"""ToolGuard with the real agent-framework packages (the ``frameworks`` extra: fastmcp, the
OpenAI Agents SDK, LangChain, LangGraph): every tool shape they hold, the Agents SDK hooks
over the real filesystem MCP server with a scripted model (no LLM, no network), and the
LangChain/LangGraph recipes, each as docs/serving.md writes it."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from riskrank.adapters import ToolGuard, task_of, tool_name, tool_record
from test_server_support import HashEncoder, need_npm_bin

pytest.importorskip("fastmcp")
pytest.importorskip("agents")
pytest.importorskip("langchain")
pytest.importorskip("langgraph")


@pytest.fixture(scope="module")
def guard():
    return ToolGuard(k=3, encoder=HashEncoder())


# -- fastmcp ------------------------------------------------------------------------------------------
def test_fastmcp_server_tools(guard):
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    server = FastMCP("demo")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def delete_file(path: str) -> str:
        """Delete a file from disk."""
        return "ok"

    @server.tool
    def read_file(path: str) -> str:
        """Read a text file."""
        return "..."

    tools = asyncio.run(server.list_tools())
    rec = tool_record(next(t for t in tools if t.name == "delete_file"))  # was PydanticSerializationError
    assert rec["description"] == "Delete a file from disk." and rec["annotations"]["destructiveHint"] is True
    assert rec["parameters"]["properties"]["path"]["type"] == "string"
    kept = guard.select("read the text file", tools)
    assert kept and all(any(k is t for t in tools) for k in kept) and tool_name(kept[0]) == "read_file"
    levels = {t["name"]: t["risk_level"] for t in guard.rank("delete the file", tools)["tools"]}
    assert levels.get("delete_file", 5) >= 4


# -- LangChain -------------------------------------------------------------------------------------------
def test_langchain_tools(guard):
    from langchain_core.tools import StructuredTool, tool

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a recipient."""
        return "sent"

    schema = {"type": "object", "properties": {"entityNames": {"type": "array", "items": {"type": "string"}}}}
    adapters_style = StructuredTool(name="delete_entities", description="Delete entities from the knowledge graph.",
                                    args_schema=schema, coroutine=None, func=lambda **kw: "ok",
                                    metadata={"readOnlyHint": False, "destructiveHint": True, "title": None})
    langchain_mcp_style = StructuredTool(name="read_graph", description="Read the whole knowledge graph.", args_schema={
        "type": "object", "properties": {}}, func=lambda **kw: "{}", metadata={"mcp": {"tool": {"annotations": {
            "read_only_hint": True, "destructive_hint": False}}, "server": {"name": "memory"}}})
    assert tool_record(send_email)["parameters"]["required"] == ["to", "body"]
    assert tool_record(adapters_style)["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert tool_record(langchain_mcp_style)["annotations"] == {"readOnlyHint": True, "destructiveHint": False}
    tools = [send_email, adapters_style, langchain_mcp_style]
    kept = guard.select("read the whole knowledge graph", tools)
    assert kept[0] is langchain_mcp_style
    ranked = guard.rank("delete entities from the knowledge graph", tools)
    assert {t["name"]: t["risk_level"] for t in ranked["tools"]}["delete_entities"] >= 4


# -- OpenAI Agents SDK -------------------------------------------------------------------------------------
def test_agents_function_tools(guard):
    from agents import function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather forecast for a city."""
        return "sunny"

    @function_tool
    def transfer_funds(to: str, amount: float) -> str:
        """Transfer money from the bank account to a recipient."""
        return "done"

    rec = tool_record(get_weather)
    assert rec["name"] == "get_weather" and rec["parameters"]["properties"]["city"]["type"] == "string"
    assert guard.select("what is the weather in Lisbon", [get_weather, transfer_funds])[0] is get_weather


class ScriptedModel:
    """An Agents SDK Model that records the tools the Runner offers and answers a message."""

    def __new__(cls):
        from agents.items import ModelResponse
        from agents.models.interface import Model
        from agents.usage import Usage
        from openai.types.responses import ResponseOutputMessage, ResponseOutputText

        class _Model(Model):
            seen: list[list[str]]

            async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                                   tracing, *, previous_response_id=None, conversation_id=None, prompt=None, **kw):
                self.seen.append([t.name for t in tools])
                msg = ResponseOutputMessage(id="m1", type="message", role="assistant", status="completed",
                                            content=[ResponseOutputText(type="output_text", text="done", annotations=[])])
                return ModelResponse(output=[msg], usage=Usage(), response_id=None)

            def stream_response(self, *a, **kw):  # pragma: no cover
                raise NotImplementedError

        model = _Model()
        model.seen = []
        return model


@pytest.fixture(scope="module")
def fs_params(tmp_path_factory):
    bins = need_npm_bin()
    root = tmp_path_factory.mktemp("fs")
    return {"command": str(bins / "mcp-server-filesystem"), "args": [str(root)]}


def run_agent(server, task: str | None, context):
    from agents import Agent, Runner

    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    model = ScriptedModel()

    async def go():
        async with server:
            agent = Agent(name="a", instructions="x", model=model, mcp_servers=[server])
            await Runner.run(agent, task or "hello", context=context)
            raw = (await server.session.list_tools()).tools
        return model.seen[-1], raw

    return asyncio.run(go())


def test_agents_mcp_server_keeps_riskranks_order(guard, fs_params, caplog):
    from agents.mcp import MCPServerStdio

    task = "move the report into the archive folder"
    server = guard.agents_mcp_server(MCPServerStdio(params=fs_params, name="fs", cache_tools_list=False))
    offered, raw = run_agent(server, task, {"task": task})
    assert offered == guard.names(task, raw) and 1 <= len(offered) <= 3
    levels = {t["name"]: t["risk_level"] for t in guard.rank(task, raw)["tools"]}
    assert sum(lvl >= 3 for lvl in levels.values()) <= 1  # move_file, write_file, edit_file: one at most
    # Without context the task is the run's latest user message.
    offered, _ = run_agent(guard.agents_mcp_server(MCPServerStdio(params=fs_params, name="fs2")), "read the notes file", None)
    assert offered == guard.names("read the notes file", raw)


def test_agents_tool_filter_fetches_the_list_and_warns_once(guard, fs_params, caplog):
    from agents.mcp import MCPServerStdio

    task = "list the files in the directory"
    server = MCPServerStdio(params=fs_params, name="fs", tool_filter=guard.agents_tool_filter(), cache_tools_list=False)
    offered, raw = run_agent(server, task, {"task": task})
    assert sorted(offered) == sorted(guard.names(task, raw))
    # No task anywhere (an empty run context): no tools, and one warning, not one per tool.
    from agents import Agent, RunContextWrapper

    async def no_task():
        async with server:
            return await server.list_tools(RunContextWrapper(context=None), Agent(name="b", mcp_servers=[server]))

    with caplog.at_level(logging.WARNING, logger="riskrank.adapters"):
        assert asyncio.run(no_task()) == []
        assert asyncio.run(no_task()) == []
    warnings = [r for r in caplog.records if r.name == "riskrank.adapters"]
    assert len(warnings) == 1 and "no task for MCP server 'fs'" in warnings[0].getMessage()


def test_task_of():
    from agents import RunContextWrapper

    assert task_of(RunContextWrapper(context={"task": "a"})) == "a"
    rc = RunContextWrapper(context=None)
    rc.turn_input = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"},
                     {"role": "user", "content": [{"type": "input_text", "text": "second"}]}]
    assert task_of(rc) == "second" and task_of(None) is None


# -- LangChain / LangGraph ----------------------------------------------------------------------------------
def lc_tools(called: list[str]):
    from langchain_core.tools import tool

    @tool
    def list_logs(folder: str) -> str:
        """List the log files in a folder."""
        called.append("list_logs")
        return "old.log older.log"

    @tool
    def read_log(name: str) -> str:
        """Read a log file."""
        called.append("read_log")
        return "..."

    @tool
    def purge_disk(confirm: bool) -> str:
        """Irreversibly erase every file on the disk with a shell command."""
        called.append("purge_disk")
        return "erased"

    return [list_logs, read_log, purge_disk]


def scripted(messages, offered: list):
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kw):
            offered.append([getattr(t, "name", None) for t in tools])
            return self

    return Scripted(messages=iter(messages))


def test_langchain_middleware_create_agent():
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage

    guard = ToolGuard(k=2, encoder=HashEncoder())
    called: list[str] = []
    tools = lc_tools(called)
    offered: list = []
    model = scripted([
        AIMessage("", tool_calls=[{"name": "list_logs", "args": {"folder": "/var/log"}, "id": "c1"}]),
        AIMessage("", tool_calls=[{"name": "purge_disk", "args": {"confirm": True}, "id": "c2"}]),  # never shown
        AIMessage("done"),
    ], offered)
    agent = create_agent(model, tools, middleware=[guard.langchain_middleware()])
    task = "list the log files in the folder"
    out = agent.invoke({"messages": [("user", task)]})
    expected = guard.names(task, tools)
    assert offered and all(o == expected for o in offered) and "purge_disk" not in expected
    replies = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert called == ["list_logs"] and replies[0] == "old.log older.log"
    assert replies[1].startswith("not_exposed: 'purge_disk' was not among the tools shown")


def test_langgraph_tool_node_wrappers_run_async_only_tools_under_ainvoke():
    """MCP tools are async only: a graph run with ``ainvoke`` must run the allowed one (the
    sync wrapper alone made LangGraph call it synchronously: NotImplementedError)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    called: list[str] = []

    def async_only(name: str, description: str, reply: str) -> StructuredTool:
        async def run(**kwargs) -> str:
            called.append(name)
            return reply
        return StructuredTool.from_function(coroutine=run, name=name, description=description,
                                            args_schema={"type": "object", "properties": {"name": {"type": "string"}}})

    tools = [async_only("read_log", "Read a log file.", "..."), async_only("list_logs", "List the log files in a folder.", "a"),
             async_only("purge_disk", "Irreversibly erase every file on the disk with a shell command.", "erased")]
    guard = ToolGuard(k=2, encoder=HashEncoder())
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode(tools, **guard.tool_node_wrappers(tools)))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    state = {"messages": [HumanMessage("read the log file old.log"),
                          AIMessage("", tool_calls=[{"name": "read_log", "args": {"name": "old.log"}, "id": "a"},
                                                    {"name": "purge_disk", "args": {}, "id": "b"}])]}
    out = asyncio.run(graph.compile().ainvoke(state))
    replies = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    assert called == ["read_log"] and replies["a"] == "..." and replies["b"].startswith("not_exposed: 'purge_disk'")


def test_langgraph_tool_node_guard():
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    guard = ToolGuard(k=2, encoder=HashEncoder())
    called: list[str] = []
    tools = lc_tools(called)
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode(tools, wrap_tool_call=guard.tool_node_guard(tools)))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    state = {"messages": [HumanMessage("read the log file old.log"),
                          AIMessage("", tool_calls=[{"name": "read_log", "args": {"name": "old.log"}, "id": "a"},
                                                    {"name": "purge_disk", "args": {"confirm": True}, "id": "b"}])]}
    out = graph.compile().invoke(state)
    replies = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    assert "read_log" in guard.names("read the log file old.log", tools)
    assert called == ["read_log"] and replies["a"] == "..." and replies["b"].startswith("not_exposed: 'purge_disk'")
