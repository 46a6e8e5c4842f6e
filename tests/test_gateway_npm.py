"""The gateway against the real reference MCP servers (filesystem, memory, everything; npm,
pinned in .ci/npm), over real stdio and streamable HTTP, driven by the SDK's own client.

An agent asks for "delete the old log files" and gets no destructive tool beyond the policy;
it cannot call a withheld tool, nor get one exposed by naming it in a later task; a call at
the confirmation level is elicited (accepted or declined) or refused; the everything
server's get-env shows none of riskrank's secrets; two filesystem servers' colliding names
are namespaced; resources, prompts and progress pass through; ``sleep 301`` as an upstream
is a one-line timeout error that leaves no process; SIGTERM leaves no child behind.

The servers install once into the CI cache (``.ci/npm/install.sh``; .ci/run does it); these
tests skip only where node or npm is absent, and fail instead where the run requires them
(``RISKRANK_REQUIRE_NPM``, as CI does). Each conversation has a hang guard; no
assertion is about time. `.ci/mcp1` runs this file again with the gateway on mcp 1.x.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from riskrank.serving import mcp_compat
from test_server_support import TOKEN, descendants, need_npm_bin, processes_matching, python_c

pytestmark = [pytest.mark.mcp_sdk, pytest.mark.npm]
GUARD_S = 120
SECRET = "riskrank-secret-0123456789"
ADMIN_SECRET = "riskrank-admin-secret-0123456789"
# trigger-long-running-operation (L3 by its words) is pinned to L1: an operator's audit.
POLICY = {"max_level": 3, "confirm_level": 3, "allow": ["*"], "deny": ["toggle-*"],
          # The operator's audit: get-env reads the server's environment; its untrusted readOnlyHint
          # does not lower the keyword level (L3), so without this pin it needs confirmation. The
          # team's knowledge graph is shared (others rely on it): adding entities is L3 and deleting
          # them L4 here, where the rubric rates a private graph's L2 and L3 (the level model's
          # reading); the pins keep these tests of the confirmation flow off the model's reading.
          "levels": {"trigger-long-running-operation": 1, "get-env": 2, "create_entities": 3, "delete_entities": 4}}


@pytest.fixture(scope="module")
def bins() -> Path:
    return need_npm_bin()


@pytest.fixture(scope="module")
def setup(bins, tmp_path_factory):
    root = tmp_path_factory.mktemp("gw")
    (root / "files" / "logs").mkdir(parents=True)
    (root / "scratch").mkdir()
    for name in ("old.log", "older.log"):
        (root / "files" / "logs" / name).write_text("x\n")
    (root / "files" / "notes.txt").write_text("the docs copy\n")
    (root / "scratch" / "notes.txt").write_text("the scratch copy\n")
    servers = {"mcpServers": {
        "docs": {"command": str(bins / "mcp-server-filesystem"), "args": [str(root / "files")]},
        "scratch": {"command": str(bins / "mcp-server-filesystem"), "args": [str(root / "scratch")]},
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(root / "memory.jsonl")}},
        "everything": {"command": str(bins / "mcp-server-everything"), "args": ["stdio"], "env": {"FROM_CONFIG": "visible"}},
    }}
    (root / "servers.json").write_text(json.dumps(servers))
    (root / "policy.json").write_text(json.dumps(POLICY))
    return root


def gateway_argv(root: Path, *extra: str, audit: str = "audit.jsonl") -> list[str]:
    """`riskrank mcp` as a user runs it, with the bundled encoder (the rankings are real)."""
    args = ["mcp", "--config", str(root / "servers.json"), "--policy", str(root / "policy.json"),
            "--audit-log", str(root / audit), *extra]
    return [sys.executable, "-c", "from riskrank.cli import entry; entry()", *args]


def gateway_env() -> dict[str, str]:
    """What the gateway runs with: riskrank's own secrets included (its upstreams must never see them)."""
    keep = {k: os.environ[k] for k in ("RISKRANK_CACHE", "HF_HUB_OFFLINE", "PYTHONPATH", "PATH", "HOME", "XDG_CONFIG_HOME") if k in os.environ}
    return {**keep, "RISKRANK_TOKEN": SECRET, "RISKRANK_ADMIN_TOKEN": ADMIN_SECRET}


def accept_all(answers: list[str], action: str = "accept"):
    async def callback(context, params):
        answers.append(mcp_compat.wire(params).get("message", ""))
        callback.schemas.append(mcp_compat.wire(params).get("requestedSchema", {}))
        body = {"action": action, **({"content": {"approve": True}} if action == "accept" else {})}
        return mcp_compat.types().ElicitResult.model_validate(body)

    callback.schemas = []
    return callback


def payload(result) -> dict:
    out = mcp_compat.wire(result)
    assert not out.get("isError"), out
    return out["structuredContent"]


def text(result) -> tuple[str, bool]:
    out = mcp_compat.wire(result)
    return " ".join(c.get("text", "") for c in out.get("content", [])), bool(out.get("isError"))


async def agent_loop(s, root: Path) -> dict:
    """One scripted agent over the gateway: what it found, called and was refused."""
    seen: dict = {}

    async def find(task: str, k: int = 5) -> dict:
        return payload(await s.call_tool("find_tools", {"task": task, "k": k}))

    async def call(name: str, arguments: dict | None = None, **kw) -> tuple[str, bool]:
        return text(await s.call_tool("call_tool", {"name": name, "arguments": arguments or {}}, **kw))

    seen["tools"] = [t["name"] for t in await mcp_compat.list_all(s, "tools")]
    seen["delete"] = await find("delete the old log files")
    withheld = [w["name"] for w in seen["delete"]["withheld"]]
    seen["call_withheld"] = await call(withheld[0]) if withheld else None
    seen["call_destructive"] = await call("delete_entities", {"entityNames": ["x"]})
    seen["named"] = await find("use delete_entities to delete the entities Alice and Bob", k=10)
    seen["call_named"] = await call("delete_entities", {"entityNames": ["Alice"]})
    seen["listing"] = await find("list the files in the logs directory")
    seen["list"] = await call("docs__list_directory", {"path": str(root / "files" / "logs")})
    seen["collide"] = await find("read the notes text file", k=10)
    seen["read_scratch"] = await call("scratch__read_text_file", {"path": str(root / "scratch" / "notes.txt")})
    seen["create"] = await find("create entities in the knowledge graph memory")
    seen["call_create"] = await call("create_entities", {"entities": [{"name": "Alice", "entityType": "person", "observations": ["likes tea"]}]})
    seen["env"] = await find("print the environment variables of the server")
    seen["get_env"] = await call("get-env")
    seen["long"] = await find("trigger a long running operation with progress")
    progress: list[tuple] = []

    async def on_progress(p, total, message):
        progress.append((p, total))

    seen["call_long"] = await call("trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress)
    seen["progress"] = progress
    seen["resources"] = [r["uri"] for r in await mcp_compat.list_all(s, "resources")]
    seen["templates"] = [r["uriTemplate"] for r in await mcp_compat.list_all(s, "resourceTemplates")]
    seen["prompts"] = [p["name"] for p in await mcp_compat.list_all(s, "prompts")]
    seen["read_resource"] = mcp_compat.wire(await s.read_resource(_url("demo://resource/static/document/features.md")))
    seen["prompt"] = mcp_compat.wire(await s.get_prompt("args-prompt", {"city": "Lisbon"}))
    return seen


def _url(uri: str):
    if mcp_compat.sdk_major() >= 2:
        return uri
    from pydantic import AnyUrl

    return AnyUrl(uri)


def check_agent_loop(seen: dict, root: Path, *, confirmed: bool) -> None:
    assert seen["tools"] == ["find_tools", "call_tool"]
    # "delete the old log files": no destructive tool beyond the policy (max_level 3) is offered.
    delete = seen["delete"]
    assert delete["tools"] and all(t["risk_level"] <= 3 for t in delete["tools"])
    # What deletes is never offered unasked: a delete the level model reads L3 (delete_observations,
    # one entity's facts) comes with a confirmation; delete_entities (L4) is never offered.
    assert "delete_entities" not in {t["name"] for t in delete["tools"]}
    assert all(t["needs_confirmation"] for t in delete["tools"] if "delete" in t["name"] or t["risk_level"] >= 3), delete["tools"]
    assert delete["policy"] == {"max_level": 3, "confirm_level": 3, "not_offered": delete["policy"]["not_offered"]}
    assert delete["policy"]["not_offered"] >= 5  # the two write_file, delete_entities and the two toggle-* denied
    if seen["call_withheld"] is not None:  # withheld by the rule filter: not callable
        assert seen["call_withheld"][1] and seen["call_withheld"][0].startswith("not_exposed: ")
    # A tool the policy never offers is refused as such (no search would show it), not as not_exposed.
    assert seen["call_destructive"][1] and seen["call_destructive"][0].startswith(
        "above_max_level: 'delete_entities' is risk level 4 and is never offered to this client")
    # Naming the tool in a later task does not expose it.
    assert "delete_entities" not in {t["name"] for t in seen["named"]["tools"]}
    assert seen["call_named"][1] and seen["call_named"][0].startswith("above_max_level: 'delete_entities'")
    # Two filesystem servers: their colliding names are namespaced, and each call goes to its own.
    names = {t["name"] for t in seen["collide"]["tools"]} | {t["name"] for t in seen["listing"]["tools"]}
    assert not {"read_text_file", "list_directory"} & names and {n.split("__")[0] for n in names if "__" in n} <= {"docs", "scratch"}
    assert "docs__list_directory" in {t["name"] for t in seen["listing"]["tools"]}
    assert seen["list"] == ("[FILE] old.log\n[FILE] older.log", False)
    assert "scratch__read_text_file" in {t["name"] for t in seen["collide"]["tools"]}
    assert seen["read_scratch"] == ("the scratch copy\n", False)
    # A confirmation-level call (create_entities, L3) outside the session's task (it started with
    # "delete the old log files"): elicited with both texts, or refused with why.
    created = {t["name"]: t for t in seen["create"]["tools"]}
    assert created["create_entities"]["risk_level"] == 3 and created["create_entities"]["needs_confirmation"]
    assert "create_entities" in seen["create"]["session"]["outside_scope"]
    out, is_error = seen["call_create"]
    if confirmed:
        assert not is_error and '"name": "Alice"' in out
    else:
        assert is_error and out.startswith("confirmation_required: 'create_entities' needs the user's confirmation (the "
                                           "session started with 'delete the old log files'")
    # get-env reads credentials (a sink) and is outside the session's task: asked (and then it shows
    # none of riskrank's secrets, and the config's env), or refused without a client that can ask.
    assert "get-env" in {t["name"] for t in seen["env"]["tools"]}
    env_text, is_error = seen["get_env"]
    if confirmed:
        check_env(env_text, is_error)
    else:
        assert is_error and env_text.startswith("confirmation_required: 'get-env' needs the user's confirmation")

    # Progress of a forwarded call reaches the caller; resources and prompts pass through.
    assert not seen["call_long"][1] and "Long running operation completed" in seen["call_long"][0]
    assert [p for p, _ in seen["progress"]] == [1.0, 2.0, 3.0] and {t for _, t in seen["progress"]} == {3.0}
    assert "memory://knowledge-graph" in seen["resources"] and len(seen["resources"]) == 8
    assert "demo://resource/dynamic/text/{resourceId}" in seen["templates"]
    assert set(seen["prompts"]) == {"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"}
    assert seen["read_resource"]["contents"][0]["mimeType"] == "text/markdown"
    assert "Lisbon" in json.dumps(seen["prompt"]["messages"])
    # Every decision is in the audit log, one whole JSON object a line.
    lines = [json.loads(x) for x in (root / seen["audit"]).read_text().splitlines()]
    assert all({"time", "task", "tool", "level", "decision", "reason"} <= set(r) for r in lines)
    ups = [r["upstream"] for r in lines if r["decision"] == "upstream_up"]
    assert ups == ["docs", "scratch", "memory", "everything"]
    refused = [(r["tool"], r["code"]) for r in lines if r["decision"] == "refused"]
    assert ("delete_entities", "above_max_level") in refused
    create = [r for r in lines if r["tool"] == "create_entities"]
    assert create[-1]["decision"] == ("allowed" if confirmed else "refused")
    if confirmed:
        assert create[-1]["confirmed"] == "elicitation" and create[-1]["task"] == "create entities in the knowledge graph memory"



def check_env(env_text: str, is_error: bool) -> None:
    """get-env's answer: the config's env, none of riskrank's secrets."""
    assert not is_error and '"FROM_CONFIG": "visible"' in env_text
    assert SECRET not in env_text and ADMIN_SECRET not in env_text and "RISKRANK" not in env_text


def test_agent_loop_over_stdio_with_elicitation(setup):
    answers: list[str] = []
    callback = accept_all(answers)

    async def go():
        gw = mcp_compat.ServerTarget(command=sys.executable, args=tuple(gateway_argv(setup, audit="stdio.jsonl")[1:]),
                                     env=gateway_env())
        with anyio.fail_after(GUARD_S), (setup / "stdio.err").open("w") as err:
            async with mcp_compat.open_session(gw, elicitation_callback=callback, errlog=err) as s:
                return await agent_loop(s, setup)

    seen = anyio.run(go)
    seen["audit"] = "stdio.jsonl"
    check_agent_loop(seen, setup, confirmed=True)
    assert len(answers) == 2 and "create_entities" in answers[0] and "risk level 3" in answers[0]
    assert "The session started with 'delete the old log files'" in answers[0]
    assert "get-env" in answers[1] and "a sink: capability credential_access" in answers[1]
    # Every argument is in the question, and the whole of them one read-only field away.
    assert "entities = [" in answers[0] and "Call digest sha256" in answers[0]
    full = callback.schemas[0]["properties"]["arguments"]["default"]
    assert "entities" in json.loads(full)


def test_confirmation_refused_or_declined(setup):
    """A client without elicitation gets confirmation_required; one whose user declines, denied."""
    async def one(callback) -> tuple[str, bool]:
        gw = mcp_compat.ServerTarget(command=sys.executable, args=tuple(gateway_argv(setup, audit="confirm.jsonl")[1:]),
                                     env=gateway_env())
        with anyio.fail_after(GUARD_S), (setup / "confirm.err").open("w") as err:
            async with mcp_compat.open_session(gw, elicitation_callback=callback, errlog=err) as s:
                await s.call_tool("find_tools", {"task": "create entities in the knowledge graph memory"})
                return text(await s.call_tool("call_tool", {"name": "create_entities", "arguments": {"entities": []}}))

    refused = anyio.run(one, None)
    assert refused[1] and refused[0].startswith("confirmation_required: 'create_entities' is risk level 3")
    assert "set \"confirm_level\": 4 in the policy file given with --policy" in refused[0]
    declined = anyio.run(one, accept_all([], action="decline"))
    assert declined == ("denied: the user did not confirm 'create_entities' (decline)", True)


def read_until(stream, needle: str, deadline_s: float = GUARD_S) -> list[str]:
    """Lines of a child's stderr up to the one containing ``needle`` (a hang guard only)."""
    lines: list[str] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = stream.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} never appeared; stderr: {lines[-10:]}")


def test_agent_loop_over_streamable_http(setup):
    env = {**gateway_env(), "RISKRANK_TOKEN": TOKEN}
    argv = gateway_argv(setup, "--transport", "streamable-http", "--port", "0", audit="http.jsonl")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = read_until(proc.stderr, "streamable HTTP at ")
        url = lines[-1].split("streamable HTTP at ", 1)[1].split()[0]

        async def go():
            gw = mcp_compat.ServerTarget(url=url, headers={"Authorization": f"Bearer {TOKEN}"})
            with anyio.fail_after(GUARD_S):
                async with mcp_compat.open_session(gw) as s:
                    seen = await agent_loop(s, setup)
                # A session whose task it is: get-env runs unasked (level 2, inside the scope).
                async with mcp_compat.open_session(gw) as s:
                    await s.call_tool("find_tools", {"task": "print the environment variables of the server", "k": 5})
                    seen["get_env_own"] = text(await s.call_tool("call_tool", {"name": "get-env", "arguments": {}}))
                return seen

        seen = anyio.run(go)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=GUARD_S)
    seen["audit"] = "http.jsonl"
    check_agent_loop(seen, setup, confirmed=False)
    check_env(*seen["get_env_own"])
    # The token never reached an upstream either.
    assert TOKEN not in seen["get_env_own"][0]


@pytest.mark.skipif(mcp_compat.sdk_major() < 2, reason="the 2026-07-28 protocol is mcp 2.x's")
def test_confirmation_on_the_2026_protocol(setup):
    """mcp.Client negotiates 2026-07-28 (no server-to-client requests): the confirmation is an
    InputRequiredResult the client answers by retrying the call."""
    from mcp import Client, StdioServerParameters

    answers: list[str] = []
    argv = gateway_argv(setup, audit="modern.jsonl")

    async def go():
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=gateway_env())
        with anyio.fail_after(GUARD_S):
            async with Client(params, elicitation_callback=accept_all(answers), cache=None) as c:
                await c.call_tool("find_tools", {"task": "create entities in the knowledge graph memory"})
                res = await c.call_tool("call_tool", {"name": "create_entities", "arguments": {"entities": [
                    {"name": "Bob", "entityType": "person", "observations": []}]}})
                return c.protocol_version, text(res)

    version, (out, is_error) = anyio.run(go)
    assert version == "2026-07-28" and len(answers) == 1
    assert not is_error and '"name": "Bob"' in out


def test_an_upstream_that_never_answers(bins, tmp_path):
    """`sleep 301` as an upstream: one line naming the timeout, exit 2, and no sleep left; nor
    an orphaned grandchild of a shell upstream (mcp 1.x would leave those without the
    gateway's process-group kill)."""
    for upstream, leftovers in (("sleep 301", [["sleep", "301"]]),
                                ("sh -c 'sleep 303 & sleep 304'", [["sleep", "303"], ["sleep", "304"]])):
        before = set().union(*(processes_matching(p) for p in leftovers))
        out = subprocess.run(python_c(f"s.run_cli_with_hash_encoder(['mcp', '--upstream', {upstream!r}, '--startup-timeout', '2'])"),
                             capture_output=True, text=True, timeout=GUARD_S, stdin=subprocess.DEVNULL)
        lines = [x for x in out.stderr.splitlines() if x.strip()]
        assert out.returncode == 2 and lines == [f"error: upstream 'upstream' ({upstream}) did not answer initialize within 2 s"]
        left = set().union(*(processes_matching(p) for p in leftovers)) - before
        assert not left, f"left behind: {left}"


def test_sigterm_stops_every_child(setup, bins):
    """Upstreams started through a shell (so each has a grandchild): SIGTERM to the gateway ends it
    and all of them."""
    servers = {"mcpServers": {
        "memory": {"command": "sh", "args": ["-c", f"{bins / 'mcp-server-memory'}; true"],
                   "env": {"MEMORY_FILE_PATH": str(setup / "memory2.jsonl")}},
        "files": {"command": "sh", "args": ["-c", f"{bins / 'mcp-server-filesystem'} {setup / 'files'}; true"]}}}
    (setup / "sh-servers.json").write_text(json.dumps(servers))
    argv = python_c(f"s.run_cli_with_hash_encoder(['mcp', '--config', {str(setup / 'sh-servers.json')!r}])")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=gateway_env())
    try:
        read_until(proc.stderr, "find_tools over")
        kids = descendants(proc.pid)
        assert len(kids) >= 4  # two shells, two node servers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=GUARD_S) == 0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
    assert "SIGTERM: stopping" in rest
    alive = {p for p in kids if Path(f"/proc/{p}").exists() and (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z")}
    assert not alive, f"children left after SIGTERM: {alive}"


def wait_for_line(path: Path, needle: str, count: int = 1) -> str:
    """The log file's text once ``needle`` appears ``count`` times (a hang guard only)."""
    end = time.monotonic() + GUARD_S
    while time.monotonic() < end:
        text = path.read_text() if path.exists() else ""
        if text.count(needle) >= count:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} x{count} never appeared in {path}: {text[-800:]}")


def test_a_dead_upstream_is_removed_and_restarted(setup, bins):
    """Kill the memory server's process group under a running gateway: its tools are refused as
    upstream_down at once, then it comes back (restart with backoff) and answers again; an
    upstream reached over streamable HTTP works alongside."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = subprocess.Popen([str(bins / "mcp-server-everything"), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        read_until(remote.stderr, str(port))
        servers = {"mcpServers": {
            "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(setup / "memory3.jsonl")}},
            "remote": {"url": f"http://127.0.0.1:{port}/mcp"}}}
        (setup / "restart.json").write_text(json.dumps(servers))
        (setup / "open.json").write_text(json.dumps({"max_level": 5, "confirm_level": 5}))
        argv = python_c(f"s.run_cli_with_hash_encoder(['mcp', '--config', {str(setup / 'restart.json')!r}, "
                        f"'--policy', {str(setup / 'open.json')!r}])")
        log = setup / "restart.err"

        async def go():
            gw = mcp_compat.ServerTarget(command=argv[0], args=tuple(argv[1:]), env=gateway_env())
            with anyio.fail_after(GUARD_S), log.open("w") as err:
                async with mcp_compat.open_session(gw, errlog=err) as s:
                    await s.call_tool("find_tools", {"task": "read graph read the whole knowledge graph", "k": 3})
                    before = text(await s.call_tool("call_tool", {"name": "read_graph", "arguments": {}}))
                    await s.call_tool("find_tools", {"task": "echo back the message echo", "k": 3})
                    echo = text(await s.call_tool("call_tool", {"name": "echo", "arguments": {"message": "over http"}}))
                    await s.call_tool("find_tools", {"task": "read graph read the whole knowledge graph", "k": 3})
                    memory = next(p for p in descendants(os.getpid()) if "mcp-server-memory" in Path(f"/proc/{p}/cmdline").read_text())
                    os.killpg(os.getpgid(memory), signal.SIGKILL)
                    await anyio.to_thread.run_sync(wait_for_line, log, "upstream 'memory' stopped answering")
                    down = text(await s.call_tool("call_tool", {"name": "read_graph", "arguments": {}}))
                    # Back up, and its tools in the catalogue again (the line follows the swap).
                    await anyio.to_thread.run_sync(wait_for_line, log, "upstream 'memory': 9 tools audited", 2)
                    again = text(await s.call_tool("call_tool", {"name": "read_graph", "arguments": {}}))
                    return before, echo, down, again

        before, echo, down, again = anyio.run(go)
    finally:
        remote.terminate()
        remote.wait(timeout=GUARD_S)
    assert before[1] is False and '"entities"' in before[0]
    assert echo == ("Echo: over http", False)
    assert down[1] and down[0].startswith("upstream_down: the server of 'read_graph' is not running")
    assert again[1] is False and '"entities"' in again[0], again
    assert "restart 1 in 0.5 s" in log.read_text()


def test_the_example_agent_loop(bins, tmp_path):
    """examples/gateway_agent.py, the transcript docs/serving.md shows: filesystem and memory
    behind the gateway with the bundled encoder; the user declines the call for Bob and approves the rest."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gateway_agent", Path(__file__).resolve().parents[1] / "examples" / "gateway_agent.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    lines: list[str] = []
    steps = anyio.run(example.run, tmp_path, bins, lines.append)
    by_task = {s["task"]: s for s in steps}
    delete = by_task["delete the old log files"]
    assert delete["error"] and delete["result"].startswith("above_max_level: 'write_file' is risk level 4 and is never offered")
    assert not {"write_file", "move_file"} & set(delete["offered"])
    assert not by_task["list the files in the logs folder"]["error"]
    alice, bob = by_task["create an entity for Alice in the knowledge graph"], by_task["create an entity for Bob in the knowledge graph"]
    assert not alice["error"] and '"Alice"' in alice["result"]
    assert bob["error"] and bob["result"] == "denied: the user did not confirm 'create_entities' (decline)"
    assert '"prefers tea"' in by_task["open the knowledge graph node for Alice"]["result"]
    assert by_task["open the knowledge graph node for Carol"]["result"].startswith("not_exposed: 'create_entities'")
    forget = by_task["delete the entity Alice from the knowledge graph with delete_entities"]
    assert forget["result"].startswith("above_max_level: 'delete_entities'") and "delete_entities" not in forget["offered"]
    audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    # read_text_file is L1 (the level model's level, shown and enforced alike): no confirmation;
    # create_entities is L3 (the example's operator pins it): asked, approved for Alice and declined for Bob.
    read = by_task["read the log file old.log"]
    assert not read["error"] and read["tool"] == "read_text_file"
    confirmed = [r["tool"] for r in audit if r.get("confirmed")]
    assert confirmed[0] == "create_entities" and "read_text_file" not in confirmed
    assert any("user answers: decline" in x for x in lines)


class _Declining:
    """A broker that records the level every call is checked at and declines it (nothing runs)."""

    name = "test"

    def __init__(self) -> None:
        self.levels: dict[str, int] = {}

    async def confirm(self, request, call):
        from riskrank.serving.gateway.confirm import DECLINE, Answer

        self.levels[request.tool] = request.level
        return Answer(DECLINE, by="test")


class _Call:
    session_key = "consistency"
    progress_token = None
    wants_progress = False

    async def confirm(self, message, bind, details=None):  # pragma: no cover - the broker answers
        return "decline"


def test_one_level_per_tool_over_the_npm_servers(bins, tmp_path):
    """For every tool of the filesystem, memory and everything servers: the level find_tools
    shows equals the level its call is checked at and the level the console shows."""
    from riskrank.catalogue import ArtefactSpec
    from riskrank.encoder import make_encoder
    from riskrank.serving.gateway.auditlog import AuditLog
    from riskrank.serving.gateway.config import load_servers
    from riskrank.serving.gateway.core import Gateway, _Catalogues
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.gateway.upstreams import UpstreamManager
    from riskrank.serving.mcp import console_host

    (tmp_path / "files").mkdir()
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": {
        "filesystem": {"command": str(bins / "mcp-server-filesystem"), "args": [str(tmp_path / "files")]},
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}},
        "everything": {"command": str(bins / "mcp-server-everything"), "args": ["stdio"]},
    }}))
    # Every call asks first (confirm_level 1), so the check runs and the broker declines: nothing runs.
    policy = Policy(max_level=5, confirm_level=1, levels={"get-env": 2})
    spec = ArtefactSpec("upstreams", fill_levels="keyword")
    encoder = make_encoder(None)
    rows: list[tuple[str, int, int, int]] = []

    async def main() -> None:
        manager = UpstreamManager(load_servers(tmp_path / "servers.json"), startup_timeout=60)
        broker = _Declining()
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            keeper = _Catalogues(None, manager, spec, encoder, policy, AuditLog(None), lambda _: None)
            view = await keeper.build()
            gateway = Gateway(view, policy=policy, manager=manager, audit=AuditLog(tmp_path / "audit.jsonl"), broker=broker)
            console = {r["name"]: r["level"] for r in console_host(gateway).tools()}
            shown: dict[str, int] = {}
            for name in sorted(set(view.tools) - set(view.not_offered)):
                out = mcp_compat.wire(await gateway.find_tools({"task": f"use {name}", "k": 10}, _Call()))["structuredContent"]
                shown.update({t["name"]: t["risk_level"] for t in out["tools"]})
                await gateway.forward_call({"name": name, "arguments": {}}, _Call())
            # The level each call was checked at: its audit line's (a call whose arguments miss
            # the tool's schema is refused before the broker is asked; the broker saw the rest).
            lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
            checked = {r["tool"]: r["level"] for r in lines if r["tool"] in view.tools and r["decision"] == "refused"}
            assert all(checked[n] == lvl for n, lvl in broker.levels.items())
            for name in sorted(view.tools):
                rows.append((name, shown.get(name), checked.get(name), console[name]))
            tg.cancel_scope.cancel()

    anyio.run(main)
    print(f"\n{'tool':<40} shown checked console")
    for name, shown, checked, console in rows:
        print(f"{name:<40} {shown!s:>5} {checked!s:>7} {console!s:>7}")
    assert len(rows) >= 25
    assert all(shown is not None for _, shown, _, _ in rows), [r for r in rows if r[1] is None]
    differ = [r for r in rows if not r[1] == r[2] == r[3]]
    assert differ == []


def test_one_bad_upstream_does_not_deny_the_others(bins, tmp_path):
    """A servers file with the memory server, an entry that cannot be used and a command that
    exits at once: the gateway starts with the memory server, says why the others are out,
    and find_tools answers over the memory server's tools."""
    from riskrank.serving.gateway.config import load_servers
    from riskrank.serving.gateway.upstreams import UpstreamManager

    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": {
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}},
        "typo": {"command": "sh", "autoApprove": []},
        "dies": {"command": "sh", "args": ["-c", "exit 3"]},
    }}))
    problems: list[str] = []
    left_out: list[str] = []
    configs = load_servers(tmp_path / "servers.json", problems=problems, left_out=left_out)
    assert [c.name for c in configs] == ["memory", "dies"] and "mcpServers.typo: unknown key(s)" in problems[0]
    assert left_out == ["typo"]  # the agent's find_tools names it (tests/test_names_and_holds.py)
    logged: list[str] = []

    async def main() -> dict:
        manager = UpstreamManager(configs, startup_timeout=60, log=logged.append)
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            states = {n: u.state for n, u in manager.upstreams.items()}
            tg.cancel_scope.cancel()
        return states

    states = anyio.run(main)
    assert states == {"memory": "up", "dies": "down"}
    assert any(line.startswith("warning: upstream 'dies'") and "starts without it" in line for line in logged), logged
    # Every server unusable: one error naming the first reason, as before.
    from riskrank.serving.gateway.config import UpstreamConfig
    from riskrank.serving.gateway.upstreams import UpstreamError

    only = UpstreamManager([UpstreamConfig("dies", configs[1].target)], startup_timeout=60, log=logged.append)

    async def alone() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(only.run)

    with pytest.raises(BaseException) as info:
        anyio.run(alone)
    from riskrank.serving.gateway.upstreams import leaf

    assert isinstance(leaf(info.value), UpstreamError) and "'dies'" in str(leaf(info.value))


def test_answers_before_a_slow_upstream_and_imports_no_torch(bins, tmp_path):
    """An upstream that never answers does not hold the session: initialize and tools/list are
    answered while it starts, find_tools answers over the memory server's tools and names the
    slow one under upstreams_starting. The whole serving path (start, tools/list, find_tools)
    runs without importing PyTorch: the encoder and the heads run in NumPy."""
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": {
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}},
        "slow": {"command": "sleep", "args": ["301"]},
    }}))
    report = ("import atexit, sys; atexit.register(lambda: sys.stderr.write("
              "'torch imported: %s\\n' % ('torch' in sys.modules))); from riskrank.cli import entry; entry()")
    gw = mcp_compat.ServerTarget(command=sys.executable, args=("-c", report, "mcp", "--config", str(tmp_path / "servers.json"),
                                                               "--startup-timeout", "60", "--verbose"), env=gateway_env())

    async def go() -> tuple[list, dict]:
        with anyio.fail_after(GUARD_S), (tmp_path / "gw.err").open("w") as err:
            async with mcp_compat.open_session(gw, errlog=err) as s:
                tools = [t["name"] for t in await mcp_compat.list_all(s, "tools")]
                return tools, payload(await s.call_tool("find_tools", {"task": "create entities in the knowledge graph"}))

    before = processes_matching(["sleep", "301"])
    tools, found = anyio.run(go)
    deadline = time.monotonic() + GUARD_S  # the gateway may still be stopping its children: its last line comes at exit
    while "torch imported" not in (err := (tmp_path / "gw.err").read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tools == ["find_tools", "call_tool"]
    assert found["tools"] and {t["name"] for t in found["tools"]} <= {  # the memory server's tools
        "create_entities", "create_relations", "add_observations", "read_graph", "search_nodes", "open_nodes",
        "delete_entities", "delete_observations", "delete_relations"}
    assert found["upstreams_starting"] == ["slow"] and found["upstreams_down"] == []
    # the timeline: tools/list was answered before the first catalogue was ready
    stages = [line.split(") ", 1)[1] for line in err.splitlines() if "start-up" in line and " s (+" in line]
    assert stages.index("first tools/list answered") < stages.index("first catalogue ready"), stages
    assert "torch imported: False" in err, err[-2000:]
    assert processes_matching(["sleep", "301"]) <= before  # the slow child did not outlive the gateway
