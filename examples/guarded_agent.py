"""Guard an agent loop with riskrank: the model only ever sees the risk-aware top-k tools.

    python examples/guarded_agent.py

Offline: the "LLM" is a stand-in that calls the first tool it is shown (the guard ranks the
most relevant first; a real model would read the descriptions), and the tools are fakes. The guard is real: for each task, ToolGuard ranks the agent's
OpenAI-style function specs by relevance and risk, applies the rule filter (at most one
tool of risk level >= 3 in the top-k, deferred tools reported with the reason), and the
agent loop passes only the kept specs to the model, and refuses any call to a tool it did
not show. The first run loads the bundled MiniLM encoder (a few seconds).
"""

from __future__ import annotations

from typing import Any

from riskrank import ToolGuard


def fn(name: str, description: str, **params: str) -> dict[str, Any]:
    """An OpenAI chat-completions tool spec with string parameters."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
                       "required": list(params)},
    }}


TOOLS = [
    fn("list_directory", "List the files in a folder with their sizes.", path="Folder to list."),
    fn("read_file", "Read a text file and return its contents (read-only).", path="File to read."),
    fn("delete_file", "Permanently delete a file from disk.", path="File to delete."),
    fn("run_shell_command", "Run an arbitrary shell command on the host and return its output.", command="The command line."),
    fn("get_weather", "Get the current weather forecast for a city.", city="City name."),
    fn("search_web", "Search the web and return the top result snippets.", query="Search terms."),
    fn("send_email", "Send an email message to a recipient.", to="Recipient address.", body="Message text."),
    fn("get_account_balance", "Show the balance of a bank account (read-only).", account="Account name."),
    fn("transfer_funds", "Transfer money from one bank account to another.", source="From account.", target="To account."),
    fn("create_calendar_event", "Add an event to the user's calendar.", title="Event title.", when="Date and time."),
    fn("reset_user_password", "Reset a user's password and email them a reset link.", user="User name."),
    fn("summarize_text", "Summarise a piece of text in a few sentences.", text="Text to summarise."),
]



def fake_tool(name: str):
    """What a tool would return; nothing real happens."""

    def run(**arguments: str) -> str:
        return f"<{name} ran>"

    return run


IMPLEMENTATIONS = {spec["function"]["name"]: fake_tool(spec["function"]["name"]) for spec in TOOLS}

TASKS = [
    "What is the weather in Lisbon tomorrow?",
    "Delete the old installer files in my downloads folder.",
    "How much money is left in my savings account?",
    "Transfer 200 euros from my checking account to savings.",
]


def fake_llm(task: str, visible: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Stands in for the model: call the first tool shown (riskrank's most relevant for the
    task), with every required argument filled with the task text. (A stand-in that picked
    the tool sharing the most words with the task called transfer_funds for "How much money
    is left in my savings account?": "money" and "account" are in its description.)"""
    if not visible:
        return None
    best = visible[0]["function"]
    return {"name": best["name"], "arguments": {p: task for p in best["parameters"]["required"]}}


def run_agent(task: str, guard: ToolGuard, echo=print) -> dict[str, Any]:
    """One turn of a tool-using agent, guarded: rank, show the kept tools, execute only those."""
    visible = guard.select(task, TOOLS)  # the same spec dicts, filtered and ranked
    shown = [spec["function"]["name"] for spec in visible]
    echo(f"task: {task}")
    echo(f"  model sees {len(shown)} of {len(TOOLS)} tools: {', '.join(shown)}")
    withheld = [d for d in guard.rank(task, TOOLS)["deferred"] if d["name"] not in shown]
    if withheld:  # the rule filter's deferrals, in ranked order, with the rule each broke
        echo("  withheld: " + ", ".join(f"{d['name']} ({', '.join(d['reasons'])})" for d in withheld[:3]))
    call = fake_llm(task, visible)
    if call is None:
        echo("  model answers without a tool")
        return {"task": task, "shown": shown, "called": None}
    if call["name"] not in shown:  # defence in depth: never execute a tool the guard did not show
        raise PermissionError(f"the model called {call['name']}, which was not shown to it")
    echo(f"  model calls {call['name']} -> {IMPLEMENTATIONS[call['name']](**call['arguments'])}")
    return {"task": task, "shown": shown, "called": call["name"]}


def main(guard: ToolGuard | None = None, echo=print) -> list[dict[str, Any]]:
    guard = guard or ToolGuard(k=3, mode="dense+rule")
    return [run_agent(task, guard, echo) for task in TASKS]


if __name__ == "__main__":
    main()
