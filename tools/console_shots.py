"""Screenshots of every console page, for docs/console/ (`make console-shots`).

    python tools/console_shots.py [OUT_DIR]        # default: docs/console
    python tools/console_shots.py [OUT_DIR] --replicas   # replicas.png alone

Runs what an operator runs: ``riskrank mcp --config servers.json --policy policy.json
--audit-log audit.jsonl --console --labels labels.json`` over stdio in front of the reference
filesystem and memory MCP servers (npm, from riskrank's CI cache; installed there from .ci/npm
if missing), with the bundled encoder. A scripted agent (the official MCP client, no LLM)
finds and calls tools; an operator in headless Chromium (Debian's chromium and
chromium-driver) approves one waiting call, denies another and approves a third held as
drift, reviews a tool of the audit, and each page is photographed, the approvals page while a
fourth call waits on it. The Changes
page is photographed in a second run, a rug pull: tests/trust_upstream.py pinned in one
session, serving a changed tool in the next. ``replicas.png``: two replicas on one state store,
a call held at one on the approvals page of the other's console.

The audit behind the review queue is of the same servers' tools, voted by three scripted
annotators (tests/console_support.py's personas, derived from the keyword annotator): their
votes exercise the page and say nothing about any LLM.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from console_support import (  # noqa: E402 - the tests' helpers, on the path just above
    GUARD_S,
    Browser,
    browser_missing,
    console_url,
    persona_audit,
    python_env,
    riskrank_argv,
    write_policy,
)
from riskrank.registry import ToolRegistry  # noqa: E402
from riskrank.serving import mcp_compat  # noqa: E402
from test_server_support import npm_bin  # noqa: E402

OPERATOR = "Dana (ops)"
#: The reviewer's decisions in the review shot: (tool, level, reason).
REVIEWS = (("search_files", 1, "lists file names under a folder; reads no contents, changes nothing"),
           ("get_file_metadata", 2, "reads owner and permissions: mildly sensitive, changes nothing"))


def workspace(root: Path, bins: Path) -> dict[str, Path]:
    if root.exists():
        shutil.rmtree(root)
    (root / "files" / "logs").mkdir(parents=True)
    (root / "files" / "logs" / "old.log").write_text("2026-11-30 12:00:01 disk 91% full\n")
    (root / "files" / "logs" / "older.log").write_text("2026-11-01 08:00:00 started\n")
    (root / "files" / "notes.txt").write_text("call the vendor about the renewal\n")
    servers = {"mcpServers": {
        "filesystem": {"command": str(bins / "mcp-server-filesystem"), "args": [str(root / "files")]},
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(root / "memory.jsonl")}},
    }}
    (root / "servers.json").write_text(json.dumps(servers, indent=2))
    # the team's knowledge graph is shared: its operator pins writing entities at L3 and deleting them
    # at L4 (the level model reads a private graph's L2 and L3), so the approvals page has a call to
    # show and the log a refusal above max_level
    write_policy(root / "policy.json", max_level=3, deny=["*move_file"], levels={"create_entities": 3, "delete_entities": 4})
    return {"root": root, "servers": root / "servers.json", "policy": root / "policy.json", "audit": root / "audit.jsonl",
            "labels": root / "labels.json"}


def text(result) -> str:
    out = mcp_compat.wire(result)
    return " ".join(c.get("text", "") for c in out.get("content", []))


async def session(paths: dict[str, Path], out: Path, browser: Browser) -> None:
    argv = riskrank_argv("mcp", "--config", str(paths["servers"]), "--policy", str(paths["policy"]), "--audit-log",
                         str(paths["audit"]), "--console", "--console-port", "0", "--labels", str(paths["labels"]),
                         "--confirm-timeout", "900")
    errlog = paths["root"] / "gateway.err"
    root = paths["root"]
    target = mcp_compat.ServerTarget(command=argv[0], args=tuple(argv[1:]), env=python_env())
    with anyio.fail_after(GUARD_S * 5), errlog.open("w") as err:
        async with mcp_compat.open_session(target, errlog=err) as s:
            url = await anyio.to_thread.run_sync(console_url, errlog)

            async def find(task: str, k: int = 5) -> dict:
                return mcp_compat.wire(await s.call_tool("find_tools", {"task": task, "k": k}))["structuredContent"]

            async def call(name: str, arguments: dict) -> str:
                return text(await s.call_tool("call_tool", {"name": name, "arguments": arguments}))

            async def call_with_operator(name: str, arguments: dict, operate) -> str:
                out: list[str] = []
                async with anyio.create_task_group() as tg:
                    async def agent() -> None:
                        out.append(await call(name, arguments))

                    tg.start_soon(agent)
                    await anyio.to_thread.run_sync(operate)
                return out[0]

            def decide(tool: str, action: str, note: str, shoot: str | None = None) -> None:
                card = browser.wait_for(url + "/approvals", f'article.pending[data-tool="{tool}"]')
                if shoot:
                    browser.shot(out / shoot)
                    card = browser.css(f'article.pending[data-tool="{tool}"]')
                card.find_element("css selector", "textarea[name=note]").send_keys(note)
                browser.submit(card.find_element("css selector", f"button[value={action}]"))

            await anyio.to_thread.run_sync(browser.login, url, OPERATOR)
            # What an agent does: search, call, get refused, wait for the operator.
            await find("delete the old log files")
            await call("edit_file", {"path": f"{root}/files/logs/old.log", "edits": []})
            await find("list the files in the logs folder")
            await call("list_directory", {"path": f"{root}/files/logs"})
            await find("read the log file old.log")
            await call("read_text_file", {"path": f"{root}/files/logs/old.log"})
            await find("create an entity for Alice in the knowledge graph")
            alice = {"entities": [{"name": "Alice", "entityType": "person", "observations": ["prefers tea"]}]}
            await call_with_operator("create_entities", alice,
                                     lambda: decide("create_entities", "approve", "asked for by the support ticket"))
            await find("create a new directory named archive for the old logs")
            await call_with_operator("create_directory", {"path": f"{root}/files/archive"},
                                     lambda: decide("create_directory", "deny", "logs are rotated by logrotate, no new folders"))
            await find("open the knowledge graph node for Alice")
            # the session started with deleting log files: reading the graph (L2) drifts, and is asked
            await call_with_operator("open_nodes", {"names": ["Alice"]},
                                     lambda: decide("open_nodes", "approve", "reading the team's graph is fine"))
            await find("delete the entity Alice from the knowledge graph with delete_entities")
            await call("delete_entities", {"entityNames": ["Alice"]})
            await find("create an entity for Bob in the knowledge graph")
            bob = {"entities": [{"name": "Bob", "entityType": "person", "observations": ["prefers coffee", "on call this week"]}]}
            await call_with_operator("create_entities", bob,
                                     lambda: decide("create_entities", "approve", "fine", shoot="approvals.png"))

            def pages() -> None:
                browser.get(url + "/log")
                browser.shot(out / "log.png")
                browser.get(url + "/catalogue")
                browser.css("#task").send_keys("create an entity for Carol in the knowledge graph")
                browser.submit(browser.css("#search"))
                browser.shot(out / "catalogue.png", max_height=1700)
                for tool, level, reason in REVIEWS:
                    browser.get(url + "/review")
                    card = browser.css(f'article.review[data-tool="{tool}"]')
                    card.find_element("css selector", f"input[name=level][value='{level}']").click()
                    card.find_element("css selector", "input[name=reason]").send_keys(reason)
                    browser.submit(card.find_element("css selector", "button.save"))
                browser.shot(out / "review.png", max_height=2000)
                browser.get(url + "/pictures")
                browser.images_loaded()
                browser.shot(out / "pictures.png")
                browser.driver.delete_all_cookies()
                browser.get(url + "/login")
                browser.shot(out / "login.png", full_page=False)

            await anyio.to_thread.run_sync(pages)


async def changes(root: Path, out: Path, browser: Browser) -> None:
    """The Changes page of a rug pull: tests/trust_upstream.py (a FastMCP notes server) pinned
    in one session, then serving a changed ``summarise`` in the next; photographed while the
    change waits for approval."""
    import os


    def argv(variant: str) -> list[str]:
        servers = {"mcpServers": {"notes": {"command": sys.executable, "args": [str(ROOT / "tests" / "trust_upstream.py")],
                                            "env": {"TRUST_VARIANT": variant, "PYTHONPATH": os.pathsep.join(sys.path)}}}}
        (root / "servers.json").write_text(json.dumps(servers))
        return riskrank_argv("mcp", "--config", str(root / "servers.json"), "--policy", str(write_policy(root / "policy.json")),
                             "--state-dir", str(root / "state"), "--audit-log", str(root / "audit.jsonl"), "--console",
                             "--console-port", "0")

    for variant in ("honest", "changed"):
        cmd = argv(variant)
        errlog = root / f"gateway-{variant}.err"
        target = mcp_compat.ServerTarget(command=cmd[0], args=tuple(cmd[1:]), env=python_env())
        with anyio.fail_after(GUARD_S * 2), errlog.open("w") as err:
            async with mcp_compat.open_session(target, errlog=err) as s:
                await s.call_tool("find_tools", {"task": "summarise my note"})
                if variant == "changed":
                    url = await anyio.to_thread.run_sync(console_url, errlog)

                    def shoot(url: str) -> None:
                        browser.login(url, OPERATOR)
                        browser.wait_for(url + "/changes", "article.change")
                        browser.shot(out / "changes.png", max_height=1400)

                    await anyio.to_thread.run_sync(shoot, url)


def replicas(root: Path, out: Path, browser: Browser) -> None:
    """Two replicas on one state store (SQLite in one directory; tests/team_support.py's
    clients, policies and upstream): the on-call pager's restart held at replica B, on the
    approvals page of replica A's console, photographed, then approved there."""
    import threading

    import team_support as ts

    # a fresh folder each run: the pins' key outlives a removed pin file (by design, a removal
    # outside riskrank holds every server for an operator), so a reused path would start held
    ts.write_files(root)
    state = str(root / "state")
    procs = [ts.start_gateway(root, "--state", state, "--replica", name, "--console", "--admin-token-file",
                              str(root / "admin"), "--confirm-timeout", "300") for name in ("gw-a", "gw-b")]
    url_a, url_b = procs[0][1], procs[1][1]
    held: dict = {}
    agent = threading.Thread(target=lambda: held.update(out=ts.run_as(url_b, ts.TOKENS["pager"], [
        ("find_tools", {"task": "restart the api service, it stopped answering", "k": 5}),
        ("call_tool", {"name": "restart_service", "arguments": {"service": "api"}})])))
    try:
        agent.start()
        base = url_a.rsplit("/mcp", 1)[0] + "/console"
        browser.login(base, OPERATOR, ts.ADMIN)
        browser.wait_for(base + "/approvals", "article.pending")
        browser.shot(out / "replicas.png", max_height=1400)
        browser.submit(browser.css("article.pending button.approve"))
        agent.join(GUARD_S)
        assert held["out"][1] == {"text": "api restarted"}, held
    finally:
        for proc, _, _ in procs:
            proc.terminate()
            proc.wait(timeout=GUARD_S)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "console"
    why = browser_missing()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    if "--replicas" in argv:  # that picture alone (no npm servers needed)
        out = Path(argv[1]) if len(argv) > 2 else ROOT / "docs" / "console"
        out.mkdir(parents=True, exist_ok=True)
        with Browser(width=1360, height=900) as browser:
            replicas(Path(tempfile.mkdtemp(prefix="riskrank-console-replicas-")), out, browser)
        print(f"wrote {out / 'replicas.png'}")
        return 0
    bins = npm_bin()
    if bins is None:
        print("error: node and npm are needed for the reference MCP servers (.ci/npm/install.sh)", file=sys.stderr)
        return 2
    paths = workspace(Path(tempfile.gettempdir()) / "riskrank-console-demo", bins)
    # The review queue: an audit of the bundled demo registry (98 tools; 20 of them span two
    # levels or more under the scripted annotators). The servers' own 23 tools leave one.
    from riskrank.datasets.demo import demo_registry_path

    persona_audit(ToolRegistry.load(demo_registry_path()), paths["labels"])
    out.mkdir(parents=True, exist_ok=True)
    with Browser(width=1360, height=900) as browser:
        anyio.run(session, paths, out, browser)
    with Browser(width=1360, height=900) as browser:
        anyio.run(changes, Path(tempfile.mkdtemp(prefix="riskrank-console-changes-")), out, browser)
    with Browser(width=1360, height=900) as browser:
        replicas(Path(tempfile.mkdtemp(prefix="riskrank-console-replicas-")), out, browser)
    for png in sorted(out.glob("*.png")):
        print(f"wrote {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
