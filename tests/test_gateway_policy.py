"""The gateway's files and decisions, without any server: the mcpServers and policy files
(one-line errors naming the file and the field), the call-time decision, public names on
collision, and the audit log (whole lines, 0600, after kill -9 too)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from riskrank.serving.gateway.auditlog import AuditLog
from riskrank.serving.gateway.config import (
    ConfigError,
    load_policy,
    load_servers,
    upstream_from_command,
)
from riskrank.serving.gateway.policy import Policy, confirmation_refusal, decide
from riskrank.serving.gateway.upstreams import (
    UpstreamError,
    UpstreamManager,
    public_name,
    public_names,
)
from riskrank.serving.mcp_compat import ServerTarget

SECRETS = frozenset({"RISKRANK_TOKEN", "RISKRANK_ADMIN_TOKEN"})


def write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


# -- the servers file -------------------------------------------------------------------------------
def test_servers_file_formats(tmp_path):
    path = write(tmp_path, "servers.json", {"mcpServers": {
        "fs": {"command": sys.executable, "args": ["-m", "x"], "env": {"A": "1"}, "cwd": str(tmp_path)},
        "remote": {"url": "http://127.0.0.1:3001/mcp", "headers": {"X-Team": "ops"}},
        "typed": {"type": "stdio", "command": "sh"},
        "old": {"command": "no-such-command-anywhere", "disabled": True}}})
    ups = load_servers(path)
    assert [u.name for u in ups] == ["fs", "remote", "typed"]  # the disabled one is not even checked
    assert ups[0].target == ServerTarget(command=sys.executable, args=("-m", "x"), env={"A": "1"}, cwd=str(tmp_path))
    assert ups[1].target.url == "http://127.0.0.1:3001/mcp" and dict(ups[1].target.headers) == {"X-Team": "ops"}
    vscode = write(tmp_path, "vscode.json", {"servers": {"a": {"type": "http", "url": "https://example.org/mcp"}}})
    assert load_servers(vscode)[0].target.url == "https://example.org/mcp"
    # a tool whose schema holds a url or a command of its own is a tool, not a server
    from riskrank.registry import ToolRegistry

    labels = {"fetch": {"description": "Fetch a page.", "inputSchema": {"type": "object", "default": {"url": "https://example.com"}}},
              "run": {"description": "Run a check.", "parameters": {"default": {"command": "uptime"}}}}
    assert ToolRegistry.from_data(labels).names == ["fetch", "run"]
    # a client's own file holds its other settings beside the servers: read as it is
    desktop = write(tmp_path, "claude_desktop_config.json", {"globalShortcut": "Ctrl+Space", "mcpServers": {"a": {"command": "sh"}}})
    assert [u.name for u in load_servers(desktop)] == ["a"]


@pytest.mark.parametrize(("data", "message"), [
    ("{not json", "invalid JSON at line 1: Expecting property name"),
    ('{"mcpServers": {"a": {"command": "sh"}, "a": {"command": "sh"}}}', "duplicate key 'a'"),
    ({"servers": {"a": {"command": "sh"}}, "mcpServers": {"b": {"command": "sh"}}}, "(it has both)"),
    ({"mcpServer": {"a": {"command": "sh"}}}, "(it has ['mcpServer'])"),
    ({"mcpServers": {}}, "mcpServers: must be a non-empty object"),
    ({"mcpServers": {"a": {"command": "sh", "autoApprove": []}}}, "mcpServers.a: unknown key(s) ['autoApprove']"),
    ({"mcpServers": {"a": {"args": ["x"]}}}, "mcpServers.a.command: a stdio server needs a command"),
    ({"mcpServers": {"a": {"command": "no-such-command-anywhere"}}}, "mcpServers.a.command: 'no-such-command-anywhere' is not"),
    ({"mcpServers": {"a": {"command": "sh", "args": "x"}}}, "mcpServers.a.args: must be a list of strings"),
    ({"mcpServers": {"a": {"command": "sh", "env": {"A": 1}}}}, "mcpServers.a.env: must be an object of strings"),
    ({"mcpServers": {"a": {"command": "sh", "env": {"A": "${env:HOME}"}}}}, "mcpServers.a.env.A: variable substitution"),
    ({"mcpServers": {"a": {"command": "sh", "args": ["-c", "${HOME}/x"]}}}, "mcpServers.a.args[1]: variable substitution"),
    ({"mcpServers": {"a": {"command": "${TOOLS}/server"}}}, "mcpServers.a.command: variable substitution"),
    ({"mcpServers": {"a": {"url": "http://h/${TEAM}/mcp"}}}, "mcpServers.a.url: variable substitution"),
    ({"mcpServers": {"a": {"command": "sh", "env": {"RISKRANK_TOKEN": "x"}}}}, "env.RISKRANK_TOKEN: riskrank's own secret"),
    ({"mcpServers": {"a": {"type": "websocket", "url": "ws://h/mcp"}}}, "mcpServers.a.type: must be 'stdio', 'http' or 'sse'"),
    ({"mcpServers": {"a": {"url": "ftp://h"}}}, "mcpServers.a.url: an http server needs a url"),
    ({"mcpServers": {"a b": {"command": "sh"}}}, "mcpServers.a b: a server name is"),
    ({"mcpServers": {"a": {"command": "sh", "disabled": True}}}, "every server is disabled"),
    ([1, 2], "must hold a JSON object"),
])
def test_servers_file_errors_name_the_file_and_field(tmp_path, data, message):
    path = write(tmp_path, "servers.json", data)
    with pytest.raises(ConfigError) as err:
        load_servers(path, secret_names=SECRETS)
    text = str(err.value)
    assert text.startswith(path) and message in text and "\n" not in text


def test_a_missing_file_and_the_upstream_option(tmp_path):
    with pytest.raises(ConfigError, match="no such servers file"):
        load_servers(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="--upstream needs a command"):
        upstream_from_command("  ")
    with pytest.raises(ConfigError, match="--upstream: 'no-such-command-anywhere' is not"):
        upstream_from_command("no-such-command-anywhere --x")
    with pytest.raises(ConfigError, match="cannot split"):
        upstream_from_command("sh -c 'unclosed")
    up = upstream_from_command("sh -c 'echo hi'")
    assert up.name == "upstream" and up.target.args == ("-c", "echo hi") and not up.target.env


# -- the policy file --------------------------------------------------------------------------------
def test_policy_file(tmp_path):
    path = write(tmp_path, "policy.json", {"max_level": 3, "confirm_level": 2, "allow": ["*"], "deny": ["*__move_file", "run_*"],
                                           "exposure_ttl_s": 600, "client_choices": {"mode": ["dense+rule"], "lambda": [0, 0.5]},
                                           "levels": {"get-env": 4}})
    p = load_policy(path)
    assert (p.max_level, p.confirm_level, p.deny, p.exposure_ttl_s) == (3, 2, ("*__move_file", "run_*"), 600.0)
    assert p.client_choices == {"mode": ("dense+rule",), "lambda": (0.0, 0.5)} and p.pinned_level("get-env") == 4
    assert p.source == path
    d = load_policy(None)
    assert (d.max_level, d.confirm_level, d.allow, d.deny, d.client_choices) == (4, 3, ("*",), (), {})


@pytest.mark.parametrize(("data", "message"), [
    ({"max_level": 3, "mode": "dense"}, "unknown key(s) ['mode']"),
    ({"max_level": 6}, "max_level: must be a risk level"),
    ({"confirm_level": True}, "confirm_level: must be a risk level"),
    ({"allow": "*"}, "allow: must be a list of globs"),
    ({"deny": ["run_["]}, "deny[0]: 'run_[': a '[' is not closed"),
    ({"deny": ["has space"]}, "deny[0]: 'has space' is not a tool-name glob"),
    ({"deny": [""]}, "deny[0]: '' is not a tool-name glob"),
    ({"exposure_ttl_s": -1}, "exposure_ttl_s: must be a positive number"),
    ({"client_choices": {"k": [1]}}, "client_choices.k: a client may be allowed to pick mode, risk_source, lambda"),
    ({"client_choices": {"mode": ["yolo"]}}, "client_choices.mode: 'yolo' is not one of"),
    ({"client_choices": {"lambda": [11]}}, "client_choices.lambda: lambdas are numbers from 0 to 10"),
    ({"levels": {"get-env": 0}}, "levels.get-env: must be a risk level"),
    ('{"max_level": NaN}', "NaN is not a JSON number"),
])
def test_policy_errors_name_the_file_and_field(tmp_path, data, message):
    path = write(tmp_path, "policy.json", data)
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    assert str(err.value).startswith(path) and message in str(err.value)


# -- the decision -------------------------------------------------------------------------------------
POLICY = Policy(max_level=3, confirm_level=2, deny=("*__move_file",), source="p.json")


@pytest.mark.parametrize(("name", "level", "exposed", "expired", "code", "confirm"), [
    ("read_file", 1, True, False, "allowed", False),
    ("read_file", 1, False, False, "not_exposed", False),
    ("read_file", 1, True, True, "not_exposed", False),
    ("docs__move_file", 1, True, False, "denied_by_policy", False),
    ("write_file", 4, True, False, "above_max_level", False),
    ("create_entities", 2, True, False, "allowed", True),
    ("create_entities", 3, True, False, "allowed", True),
    # What the policy never offers is refused as such, shown or not: no search would return it,
    # so not_exposed ("call find_tools first") would send the agent round in circles.
    ("wire_money", 5, False, False, "above_max_level", False),
    ("docs__move_file", 1, False, False, "denied_by_policy", False),
])
def test_decide(name, level, exposed, expired, code, confirm):
    d = decide(POLICY, name, level, exposed=exposed, expired=expired)
    assert (d.code, d.confirm) == (code, confirm) and d.reason


def test_refusal_messages_say_how_to_allow_it():
    assert "p.json" in decide(POLICY, "write_file", 4, exposed=True).reason
    denied = decide(POLICY, "docs__move_file", 1, exposed=False).reason
    assert "never offered to this client: the policy (p.json) denies it" in denied and "find_tools" not in denied
    assert "find_tools for your task first" in decide(POLICY, "read_file", 1, exposed=False).reason
    msg = confirmation_refusal(POLICY, "create_entities", 2).reason
    assert msg.startswith("'create_entities' is risk level 2") and "elicitation" in msg
    assert '"confirm_level": 3' in msg and "policy file given with --policy (p.json)" in msg
    default = confirmation_refusal(Policy(), "create_entities", 3).reason
    assert 'start the gateway with --policy FILE holding "confirm_level": 4' in default and "the default policy" in default
    assert "confirm_level" not in confirmation_refusal(Policy(max_level=5), "wire_money", 5).reason.split("(confirm_level 3)")[1]
    only = Policy(allow=("read_*",))
    assert only.refusal("read_file", 1) is None and only.refusal("write_file", 1) == "denied_by_policy"


# -- names on collision --------------------------------------------------------------------------------
def test_public_names():
    assert public_name("docs", "read_file") == "docs__read_file"
    long = public_name("my.very-long_server_name_with_dots", "x" * 60)
    assert len(long) == 64 and long.startswith("my_very-long") and long != public_name("my.very-long_server_name_with_dots", "x" * 61)
    assert public_name("a", "get.thing") != public_name("a", "get_thing")  # cleaned names stay unique
    names = public_names({"docs": ["read_file", "search", "read_file"], "scratch": ["read_file", "has space"]})
    assert names == {("docs", "read_file"): "docs__read_file", ("docs", "search"): "search",
                     ("scratch", "read_file"): "scratch__read_file", ("scratch", "has space"): public_name("scratch", "has space")}


def test_collisions_are_namespaced_and_stable():
    ups = [load for load in (upstream_from_command("sh"), upstream_from_command("sh"))]
    with pytest.raises(UpstreamError, match="two upstream servers are named 'upstream'"):
        UpstreamManager(ups)
    from riskrank.serving.gateway.config import UpstreamConfig

    m = UpstreamManager([UpstreamConfig("docs", ServerTarget(command="sh")), UpstreamConfig("scratch", ServerTarget(command="sh"))])
    docs, scratch = m.upstreams["docs"], m.upstreams["scratch"]
    for up, names in ((docs, ["read_file", "only_docs"]), (scratch, ["read_file"])):
        up.state, up.tools = "up", [{"name": n} for n in names]
        up.known_tools = set(names)
    assert [p for p, _, _ in m.tools()] == ["docs__read_file", "only_docs", "scratch__read_file"]
    scratch.state, scratch.tools = "down", []  # while it restarts, the names do not change
    assert [p for p, _, _ in m.tools()] == ["docs__read_file", "only_docs"]


# -- the audit log --------------------------------------------------------------------------------------
def test_audit_log_lines(tmp_path):
    path = tmp_path / "sub" / "audit.jsonl"
    log = AuditLog(path)
    log.write(task="t", tool="read_file", level=1, decision="allowed", reason="ok", code="allowed", arguments={"x": "y" * 50_000})
    log.write(tool=None, decision="upstream_up", reason="audited")
    log.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    lines = path.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert list(recs[0])[:7] == ["time", "task", "tool", "level", "decision", "reason", "code"]
    assert recs[1]["task"] is None and recs[1]["level"] is None and recs[1]["decision"] == "upstream_up"
    assert recs[0]["arguments"].endswith("characters)") and len(lines[0]) < 8000  # a runaway argument is cut
    AuditLog(None).write(task="nothing is written")


def test_audit_log_survives_kill_9(tmp_path):
    """Two writers appending as fast as they can, both killed with SIGKILL: every line in the
    file is whole JSON and each writer's sequence has no gap."""
    path = tmp_path / "audit.jsonl"
    code = ("import sys; from riskrank.serving.gateway.auditlog import AuditLog; log = AuditLog(sys.argv[1])\n"
            "i = 0\nwhile True:\n    log.write(task='t' * 300, tool=sys.argv[2], decision='allowed', reason=str(i), seq=i); i += 1\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), name]) for name in ("a", "b")]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until both have written a good number of lines
            text = path.read_text() if path.exists() else ""
            if text.count('"tool":"a"') > 50 and text.count('"tool":"b"') > 50:
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    recs = [json.loads(line) for line in raw.decode().splitlines()]
    for name in ("a", "b"):
        seq = [r["seq"] for r in recs if r["tool"] == name]
        assert len(seq) > 50 and seq == list(range(len(seq)))
