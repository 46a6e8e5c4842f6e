"""An agent loop over two real MCP servers at once, through riskrank's gateway.

    python examples/gateway_agent.py [--servers-bin DIR] [--keep DIR]

Starts ``riskrank mcp --config servers.json --policy policy.json --audit-log audit.jsonl``
over stdio in front of the reference filesystem and memory servers (npm), and drives it with
a scripted agent (no LLM: each step names the tool a model would pick) through the official
MCP client. It shows what an agent meets: ``find_tools`` offers only what the policy allows,
ranked risk-aware; ``call_tool`` refuses a tool outside the latest result (``not_exposed``);
a call at the policy's ``confirm_level`` is put to the user through MCP elicitation (this
script plays the user: it declines the call for Bob and approves every other); every decision is a line of the
audit log, printed at the end.

The servers: ``--servers-bin`` (their ``node_modules/.bin``), else riskrank's CI cache
(``~/.cache/riskrank-ci/npm``), installed there from ``.ci/npm`` if missing (needs npm).
The gateway runs the bundled encoder (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import anyio

from riskrank.serving import mcp_compat

HERE = Path(__file__).resolve().parent
#: The team's knowledge graph is shared (others rely on what it holds), so its operator pins
#: writing entities at L3 and deleting them at L4, above the level model's reading for a private
#: graph (L2 and L3): every other level is the model's.
POLICY = {"max_level": 3, "confirm_level": 3, "allow": ["*"], "deny": ["*move_file"], "exposure_ttl_s": 600,
          "levels": {"create_entities": 3, "delete_entities": 4}}
#: The scripted agent: (task, the tools it would use, best first, with their arguments). It
#: calls the first of them that find_tools offered, else the first one anyway (as a model
#: that ignores the list would). {root} is the workspace.
STEPS = [
    ("delete the old log files", [("write_file", {"path": "{root}/files/logs/old.log", "content": ""}),
                                  ("move_file", {"source": "{root}/files/logs/old.log", "destination": "/dev/null"})]),
    ("list the files in the logs folder", [("list_directory", {"path": "{root}/files/logs"})]),
    ("read the log file old.log", [("read_text_file", {"path": "{root}/files/logs/old.log"})]),
    ("create an entity for Alice in the knowledge graph",
     [("create_entities", {"entities": [{"name": "Alice", "entityType": "person", "observations": ["prefers tea"]}]})]),
    ("create an entity for Bob in the knowledge graph",
     [("create_entities", {"entities": [{"name": "Bob", "entityType": "person", "observations": ["prefers coffee"]}]})]),
    ("open the knowledge graph node for Alice", [("open_nodes", {"names": ["Alice"]})]),
    ("open the knowledge graph node for Carol",
     [("create_entities", {"entities": [{"name": "Carol", "entityType": "person", "observations": []}]})]),
    ("delete the entity Alice from the knowledge graph with delete_entities", [("delete_entities", {"entityNames": ["Alice"]})]),
]


def servers_bin(given: str | None) -> Path:
    if given:
        return Path(given)
    cache = Path(os.environ.get("RISKRANK_CI_CACHE") or Path.home() / ".cache" / "riskrank-ci") / "npm"
    out = subprocess.run(["bash", str(HERE.parent / ".ci" / "npm" / "install.sh"), str(cache)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"cannot install the reference MCP servers (needs npm): {out.stderr.strip()[-300:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def workspace(root: Path, bins: Path) -> tuple[Path, Path, Path]:
    (root / "files" / "logs").mkdir(parents=True, exist_ok=True)
    (root / "files" / "logs" / "old.log").write_text("2026-11-30 12:00:01 disk 91% full\n")
    (root / "files" / "logs" / "older.log").write_text("2026-11-01 08:00:00 started\n")
    servers = {"mcpServers": {
        "filesystem": {"command": str(bins / "mcp-server-filesystem"), "args": [str(root / "files")]},
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(root / "memory.jsonl")}},
    }}
    (root / "servers.json").write_text(json.dumps(servers, indent=2))
    (root / "policy.json").write_text(json.dumps(POLICY, indent=2))
    audit = root / "audit.jsonl"
    audit.unlink(missing_ok=True)
    (root / "memory.jsonl").unlink(missing_ok=True)  # a fresh knowledge graph each run
    return root / "servers.json", root / "policy.json", audit


def show(text: str, width: int = 100) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 3] + "..."


async def run(root: Path, bins: Path, echo=print) -> list[dict]:
    servers, policy, audit = workspace(root, bins)
    argv = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "mcp", "--config", str(servers),
            "--policy", str(policy), "--audit-log", str(audit)]
    env = {"HF_HUB_OFFLINE": "1", **{k: os.environ[k] for k in ("RISKRANK_CACHE", "RISKRANK_HOME") if k in os.environ}}
    async def user(context, params):  # the person behind the client, asked through elicitation
        question = mcp_compat.wire(params)["message"]
        answer = "decline" if "for Bob" in question else "accept"
        echo(f"    user is asked: {show(question, 140)}\n    user answers: {answer}")
        body = {"action": "accept", "content": {"approve": True}} if answer == "accept" else {"action": "decline"}
        return mcp_compat.types().ElicitResult.model_validate(body)

    echo(f"$ riskrank mcp --config servers.json --policy policy.json --audit-log audit.jsonl\npolicy.json: {json.dumps(POLICY)}")
    target = mcp_compat.ServerTarget(command=argv[0], args=tuple(argv[1:]), env=env)
    transcript = []
    with (root / "gateway.log").open("w") as log:
        async with mcp_compat.open_session(target, elicitation_callback=user, errlog=log) as s:
            tools = await mcp_compat.list_all(s, "tools")
            echo(f"tools/list: {[t['name'] for t in tools]}")
            echo(f"find_tools description: {show(tools[0]['description'], 400)}")
            for task, wanted in STEPS:
                echo(f"\nagent task: {task!r}")
                found = mcp_compat.wire(await s.call_tool("find_tools", {"task": task, "k": 4}))["structuredContent"]
                names = {t["name"] for t in found["tools"]}
                tool, args = next(((n, a) for n, a in wanted if n in names), wanted[0])
                args = json.loads(json.dumps(args).replace("{root}", str(root)))
                offered = [f"{t['name']} (L{t['risk_level']}{', confirm' if t['needs_confirmation'] else ''})" for t in found["tools"]]
                echo(f"  find_tools -> {', '.join(offered) or 'nothing'}")
                if found["withheld"]:
                    echo("  withheld by the rule filter: " + ", ".join(f"{w['name']} ({', '.join(w['reasons'])})" for w in found["withheld"]))
                echo(f"  call_tool {tool} {show(json.dumps(args), 80)}")
                res = mcp_compat.wire(await s.call_tool("call_tool", {"name": tool, "arguments": args}))
                out = " ".join(c.get("text", "") for c in res.get("content", []))
                echo(f"  -> {'REFUSED ' if res.get('isError') else ''}{show(out, 160)}")
                transcript.append({"task": task, "offered": [t["name"] for t in found["tools"]], "tool": tool,
                                   "error": bool(res.get("isError")), "result": out})
    echo(f"\ngateway log (stderr):\n{textwrap.indent((root / 'gateway.log').read_text().strip(), '  ')}")
    echo("\naudit.jsonl (each line a JSON object; shown: its first fields, the reason cut to 70 characters):")
    for line in audit.read_text().splitlines():
        rec = json.loads(line)
        keep = {k: rec[k] for k in ("time", "task", "tool", "level", "decision", "code", "confirmed") if k in rec}
        keep["reason"] = show(rec["reason"], 70)
        echo("  " + json.dumps(keep))
    return transcript


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers-bin", default=None, help="node_modules/.bin of the reference MCP servers")
    ap.add_argument("--keep", default=None, help="workspace directory to keep (default: a temporary one)")
    ns = ap.parse_args(argv)
    bins = servers_bin(ns.servers_bin)
    if ns.keep:
        anyio.run(run, Path(ns.keep).resolve(), bins)
    else:
        with tempfile.TemporaryDirectory(prefix="riskrank-gateway-") as tmp:
            anyio.run(run, Path(tmp), bins)
    return 0


if __name__ == "__main__":
    sys.exit(main())
