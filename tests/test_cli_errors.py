"""Every command over its bad-input table: exit 2, one ``error:`` line naming the problem, no
traceback and nothing else on stderr but riskrank's own progress lines (no SDK noise).

The table's kinds: a file that cannot be read (a directory, bytes that are not JSON, a path
that does not exist), a file of the wrong JSON shape, an empty file or config, and for the
gateway a server that does not start or is not an MCP server. Run in process with the file
descriptors captured, so a child process's or a library's stray output would show too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from riskrank.cli import MAX_ERROR_CHARS, run
from riskrank.datasets.demo import demo_registry_path

DEMO = str(demo_registry_path())

FILES = {
    "list.json": "[1, 2]",
    "str.json": '"just a string"',
    "strings.json": '["a", "b"]',
    "empty.json": "",
    "binary.json": b"\xff\xfe\x00 not json",
    "q.jsonl": '{"task": "read my notes", "gold": ["read_file"]}\n',
    "reg.json": '[{"name": "read_file", "description": "Read a file."}]',
    "nogold.jsonl": '{"task": "read my notes", "gold": []}\n',
    "cmdint.json": '{"mcpServers": {"fs": {"command": 5}}}',
    "noservers.json": '{"mcpServers": {}}',
    "notmcp.json": '{"mcpServers": {"chatty": {"command": "sh", "args": ["-c", "echo hello; sleep 30"]}}}',
    "nostart.json": '{"mcpServers": {"gone": {"command": "/nonexistent/bin/server"}}}',
    "exits.json": '{"mcpServers": {"quits": {"command": "sh", "args": ["-c", "exit 3"]}}}',
    "sh.json": '{"mcpServers": {"x": {"command": "sh"}}}',
    "servers_misnamed.json": '{"mcpServer": {"fs": {"command": "sh"}}}',
    "policy.json": '{"max_level": 3}',
    "lab.json": '{"read_file": {"risk_level": 2, "description": "Read a file."}}',
    "state/pins.json": "{ not json",
    "home/.cursor/mcp.json": '{"mcpServers": {"a": {"command": "x"}}}',
}

# (command, kind, argv, what the error line must name)
TABLE = [
    ("retrieve", "unreadable", ["retrieve", "x", "--registry", "adir"], "is a directory"),
    ("retrieve", "unreadable", ["retrieve", "x", "--registry", "binary.json"], "binary.json: invalid JSON at line 1"),
    ("retrieve", "missing", ["retrieve", "x", "--registry", "nowhere.json"], "nowhere.json: no such file"),
    ("retrieve", "wrong shape", ["retrieve", "x", "--registry", "list.json"], "record 0 must be a JSON object"),
    ("retrieve", "wrong shape", ["retrieve", "x", "--registry", "str.json"], "expected a JSON list or object of tools"),
    ("retrieve", "empty", ["retrieve", "x", "--registry", "empty.json"], "empty.json: file is empty"),
    ("retrieve", "task unquoted", ["retrieve", "--registry", "reg.json", "list", "files"],
     "Got unexpected extra argument (files); a task of several words is one argument: quote it"),
    ("retrieve", "servers, not tools", ["retrieve", "x", "--registry", "servers_misnamed.json"],
     "'mcpServer.fs' is an MCP server (a command or url), not a tool definition"),
    ("retrieve", "over an input", ["retrieve", "x", "--registry", "reg.json", "--json", "reg.json"],
     "--json reg.json is one of this command's input files"),
    ("retrieve", "unwritable", ["retrieve", "x", "--registry", "reg.json", "--json", "reg.json/out.json"],
     ": 'reg.json/out.json'"),  # the file asked for, not the temporary one beside it
    ("retrieve", "wrong value", ["retrieve", "delete \udcff logs", "--registry", "reg.json"],
     "the task text holds a lone surrogate at character 7"),
    ("retrieve", "wrong value", ["retrieve", "x", "--registry", "reg.json", "--alpha", "-1"], "alpha must be a number in [0, 1]"),
    ("retrieve", "wrong value", ["retrieve", "x", "--registry", "reg.json", "--alpha", "nan"], "got nan"),
    ("graph stats", "over an input", ["graph", "stats", "--registry", "reg.json", "--json", "./reg.json"],
     "--json ./reg.json is one of this command's input files"),
    ("evaluate", "over an input", ["evaluate", "--registry", "reg.json", "--queries", "q.jsonl", "--json", "q.jsonl"],
     "--json q.jsonl is one of this command's input files"),
    ("agreement", "over an input", ["agreement", "reg.json", "q.jsonl", "--png", "reg.json"], "--png reg.json is one of"),
    ("agreement", "wrong value", ["agreement", "lab.json", "./lab.json"], "lab.json is given twice"),
    ("audit", "over an input", ["audit", "--registry", "reg.json", "-a", "keyword", "--out", "q.jsonl"],
     "--out q.jsonl exists and is not a label file"),
    ("graph stats", "wrong shape", ["graph", "stats", "--registry", "list.json"], "record 0 must be a JSON object"),
    ("graph stats", "empty", ["graph", "stats", "--registry", "empty.json"], "file is empty"),
    ("evaluate", "wrong shape", ["evaluate", "--registry", "list.json", "--queries", "q.jsonl"], "record 0 must be"),
    ("evaluate", "wrong shape", ["evaluate", "--registry", DEMO, "--queries", "list.json"], "line 1: expected {\"task\""),
    ("evaluate", "wrong shape", ["evaluate", "--registry", DEMO, "--queries", "q.jsonl", "--labels", "strings.json"],
     "a labels file must be a JSON object"),
    ("evaluate", "empty", ["evaluate", "--registry", DEMO, "--queries", "empty.json"], "no queries (the file is empty"),
    ("evaluate", "wrong value", ["evaluate", "--registry", DEMO, "--queries", "q.jsonl", "--selection", "foo"],
     "--selection: invalid lambda selection rule 'foo'"),
    ("evaluate", "wrong value", ["evaluate", "--registry", DEMO, "--queries", "q.jsonl", "--selection", "budget:0.5"],
     "choose lambda when a run trains: add --train-queries"),
    ("reproduce", "missing", ["reproduce", "--dataset", "sealtools", "--out", "runs", "--cross-encoder", "/nonexistent/ce"],
     "--cross-encoder: cross-encoder folder /nonexistent/ce does not exist"),  # before the training, not after it
    ("compare", "unreadable", ["compare", "adir", "adir"], "is a directory"),
    ("compare", "wrong shape", ["compare", "strings.json", "list.json"], "not a results file"),
    ("compare", "empty", ["compare", "empty.json", "empty.json"], "not a results file"),
    ("train", "wrong shape", ["train", "--registry", "list.json", "--queries", "q.jsonl", "--out", "ck"], "record 0 must be"),
    ("train", "wrong shape", ["train", "--registry", DEMO, "--queries", "list.json", "--out", "ck"], "line 1: expected"),
    ("train", "empty", ["train", "--registry", DEMO, "--queries", "empty.json", "--out", "ck"], "no queries"),
    ("agreement", "unreadable", ["agreement", "binary.json", "binary.json"], "invalid JSON at line 1"),
    ("agreement", "wrong shape", ["agreement", "strings.json", "list.json"], "list.json: record 0 must be a JSON object"),
    ("agreement", "empty", ["agreement", "empty.json", "empty.json"], "file is empty"),
    ("audit", "wrong shape", ["audit", "--registry", "list.json", "-a", "keyword", "--out", "labels.json"], "record 0 must be"),
    ("audit", "missing", ["audit", "--apply-review", "list.json", "--out", "labels.json"], "labels.json: no such label file"),
    ("demo", "wrong value", ["demo", "--tasks", "nosuch"], "unknown demo task id(s): nosuch"),
    ("demo", "wrong value", ["demo", "--tasks", "demo-01, nosuch"], "unknown demo task id(s): nosuch;"),
    ("demo", "wrong value", ["demo", "--checkpoint", "none"], "the demo compares the heads' modes side by side"),
    ("retrieve", "missing", ["retrieve", "x", "--registry", "reg.json", "--level-model", "nowhere"],
     "nowhere: no such level model folder"),
    ("retrieve", "wrong shape", ["retrieve", "x", "--registry", "reg.json", "--level-model", "reg.json"],
     "a level model is a folder (holding levels.json and levels.safetensors), not a file"),
    ("evaluate", "wrong value", ["evaluate", "--registry", "reg.json", "--queries", "nogold.jsonl"], "line 1: 'gold' is empty"),
    ("mcp", "wrong shape", ["mcp", "--config", "cmdint.json"], "command: must be a string (the program to run), got int"),
    ("demo", "unreadable", ["demo", "--checkpoint", "adir"], "missing checkpoint.json"),
    ("reproduce", "empty", ["reproduce", "--dataset", "ultratool", "--data", "adir", "--out", "out"], "missing benchmark file"),
    ("data fetch", "missing", ["data", "fetch", "--source", "nowhere", "--dest", "dd", "--quiet"], "not a directory"),
    ("data fetch", "empty", ["data", "fetch", "--source", "adir", "--dest", "dd", "--quiet", "--no-optional"],
     "required file(s)"),
    ("serve", "wrong shape", ["serve", "--registry", "list.json", "--insecure"], "record 0 must be a JSON object"),
    ("serve", "empty", ["serve", "--registry", "empty.json", "--insecure"], "file is empty"),
    ("serve", "unreadable", ["serve", "--checkpoint", "adir", "--insecure"], "missing checkpoint.json"),
    ("mcp", "wrong shape", ["mcp", "--registry", "list.json"], "record 0 must be a JSON object"),
    ("mcp", "empty", ["mcp", "--config", "empty.json"], "empty.json: invalid JSON at line 1"),
    ("mcp", "empty", ["mcp", "--config", "noservers.json"], "mcpServers: must be a non-empty object of servers"),
    ("mcp", "wrong shape", ["mcp", "--config", "list.json"], "the servers file must hold a JSON object"),
    ("mcp", "wrong shape", ["mcp", "--config", "sh.json", "--policy", "list.json"], "the policy file must hold a JSON object"),
    ("mcp", "not MCP", ["mcp", "--config", "notmcp.json", "--startup-timeout", "2"], "did not answer initialize within 2 s"),
    ("mcp", "does not start", ["mcp", "--config", "nostart.json"], "is not an executable file or a command on PATH"),
    ("mcp", "does not start", ["mcp", "--config", "exits.json", "--startup-timeout", "10"], "failed to start"),
    ("mcp", "does not start", ["mcp", "--upstream", "/nonexistent/bin/server"], "is not an executable file"),
    ("pins list", "unreadable", ["pins", "list", "--state-dir", "state"], "the pin store is not trusted"),
    ("pins list", "missing", ["pins", "list", "--state-dir", "nowhere"], "does not exist"),
    ("pins diff", "wrong value", ["pins", "diff", "--state-dir", "state"], "Missing argument 'UPSTREAM'"),
    ("pins approve", "unreadable", ["pins", "approve", "up", "--state-dir", "state"], "the pin store is not trusted"),
    ("pins reset", "unreadable", ["pins", "reset", "up", "--state-dir", "state"],
     "without a server forgets every pin"),
    ("pins diff", "unreadable", ["pins", "diff", "up", "--state-dir", "state"], "the pin store is not trusted"),
    ("clients add", "wrong shape", ["clients", "add", "bot", "--clients", "list.json", "--policy", "x"],
     "the clients file must hold a JSON object"),
    ("clients add", "empty", ["clients", "add", "bot", "--clients", "empty.json", "--policy", "x"], "invalid JSON"),
    ("clients add", "wrong shape", ["clients", "add", "bot", "--clients", "c.json", "--policy", "x", "--policies", "list.json"],
     "the policy file must hold a JSON object"),
    ("clients list", "wrong shape", ["clients", "list", "--clients", "list.json"], "the clients file must hold a JSON object"),
    ("state status", "missing", ["state", "status", "--state", "strings.json"], "no state store there"),
    ("state migrate", "wrong shape", ["state", "migrate", "--state", "list.json"], "cannot create the state store there"),
    ("state import", "wrong shape", ["state", "import", "--state", "st2", "--audit-log", "list.json"], "not a JSON object"),
    ("state import", "unreadable", ["state", "import", "--state", "st2", "--audit-log", "binary.json"], "not UTF-8 text"),
    ("state export", "missing", ["state", "export", "--state", "nowhere", "--what", "audit", "--out", "a.jsonl"],
     "no state store there"),
    ("policy check", "unreadable", ["policy", "check", "binary.json"], "binary.json: cannot read the policy file"),
    ("policy check", "unreadable", ["policy", "check", "adir"], "is a directory"),
    ("policy check", "missing", ["policy", "check", "nowhere.json"], "nowhere.json: no such policy file"),
    ("policy check", "wrong shape", ["policy", "check", "list.json"], "the policy file must hold a JSON object"),
    ("policy check", "empty", ["policy", "check", "empty.json"], "empty.json: invalid JSON at line 1"),
    ("policy check", "wrong value", ["policy", "check", "str.json"], "the policy file must hold a JSON object"),
    ("policy replay", "missing", ["policy", "replay", "--audit", "nowhere.jsonl", "--policy", "policy.json"],
     "--audit nowhere.jsonl: no such audit log"),
    ("policy replay", "unreadable", ["policy", "replay", "--audit", "binary.json", "--policy", "policy.json"],
     "--audit binary.json: none of its 1 lines is an audit record"),
    ("policy replay", "wrong shape", ["policy", "replay", "--audit", "adir", "--policy", "policy.json"],
     "--audit adir: no state store there"),
    ("policy replay", "empty", ["policy", "replay", "--audit", "q.jsonl", "--policy", "empty.json"],
     "empty.json: invalid JSON at line 1"),
    ("policy replay", "missing", ["policy", "replay", "--audit", "q.jsonl", "--policy", "nowhere.json"],
     "nowhere.json: no such policy file"),
    ("wrap", "wrong shape", ["wrap", "--yes", "--policy", "list.json"], "the policy file must hold a JSON object"),
    ("wrap", "unreadable", ["wrap", "--yes", "--servers-dir", "list.json"], "list.json: not a directory"),
    ("wrap", "read-only", ["wrap", "--yes", "--command", "riskrank"], "home/.cursor/mcp.json: read-only (mode 0444)"),
    ("wrap", "wrong value", ["wrap", "--client", "nosuch"], "'nosuch' is not one of"),
    ("unwrap", "unreadable", ["unwrap", "--yes", "--servers-dir", "list.json"], "list.json: not a directory"),
    ("unwrap", "wrong shape", ["unwrap", "--yes", "--servers-dir", "records"], "not a wrap record of this riskrank"),
    ("levels review", "wrong shape", ["levels", "review", "strings.json"], "tools[0]: a tool definition is an object"),
    ("levels review", "empty", ["levels", "review", "empty.json"], "empty.json"),
    ("levels review", "unreadable", ["levels", "review", "binary.json"], "binary.json: not UTF-8 text"),
    ("levels review", "wrong value", ["levels", "review", DEMO, "--out", "policy.json"], "policy.json: exists"),
    ("levels review", "wrong shape", ["levels", "review", DEMO, "--policy", "list.json"], "the policy file must hold a JSON object"),
    ("levels pin", "wrong shape", ["levels", "pin", "list.json", "--policy", "policy.json"], "list.json:1: a review line is an object"),
    ("levels pin", "empty", ["levels", "pin", "empty.json", "--policy", "policy.json"], "nothing to pin"),
    ("levels pin", "unreadable", ["levels", "pin", "binary.json", "--policy", "policy.json"], "binary.json: not UTF-8 text"),
    ("levels pin", "missing", ["levels", "pin", "nowhere.jsonl", "--policy", "policy.json"], "does not exist"),
    # an output named over an input is refused even with --force (a servers file, a policy file,
    # the store's own database, the registry served, the gateway's config)
    ("levels review", "over an input", ["levels", "review", "reg.json", "--out", "reg.json", "--force"],
     "--out reg.json is one of this command's input files"),
    ("levels review", "over an input", ["levels", "review", "reg.json", "--policy", "policy.json", "--out", "policy.json",
                                        "--force"], "--out policy.json is one of this command's input files"),
    ("serve", "wrong value", ["serve", "--insecure", "--port", "99999"], "is not in the range 0<=x<=65535"),
    ("mcp", "wrong value", ["mcp", "--transport", "streamable-http", "--insecure", "--port", "-5"], "is not in the range"),
    ("serve", "over an input", ["serve", "--registry", "reg.json", "--write-openapi", "reg.json"],
     "--write-openapi reg.json is one of this command's input files"),
    ("mcp", "over an input", ["mcp", "--config", "sh.json", "--audit-log", "sh.json"],
     "--audit-log sh.json is one of this command's input files"),
    ("mcp", "over an input", ["mcp", "--registry", "reg.json", "--policy", "policy.json", "--audit-log", "policy.json"],
     "--audit-log policy.json is one of this command's input files"),
    ("state export", "over an input", ["state", "export", "--state", "state", "--what", "audit", "--out", "state/pins.json", "--force"],
     "is inside the state store state"),
    ("audit", "over an input", ["audit", "--registry", "reg.json", "-a", "keyword", "--out", "labels.json", "--votes", "q.jsonl"],
     "q.jsonl: not a vote log"),
    ("clients add", "over an input", ["clients", "add", "eve", "--policy", "std", "--clients", "sh.json"],
     "sh.json: not a clients file"),
]


@pytest.fixture
def bad_inputs(tmp_path: Path, monkeypatch) -> Path:
    for name, content in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "adir").mkdir()
    (tmp_path / "home/.cursor/mcp.json").chmod(0o444)
    (tmp_path / "records").mkdir()
    (tmp_path / "records/x.wrap.json").write_text('{"version": 0}')
    # wrap and unwrap look in the home directory: this one, never the real one
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("XDG_CONFIG_HOME", "APPDATA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_command_has_rows():
    """The table covers every command the CLI has (scan's exit codes are checked in its own tests)."""
    from riskrank.cli import main

    def leaves(group, prefix=()):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from leaves(cmd, (*prefix, name))
            else:
                yield " ".join((*prefix, name))

    covered = {row[0] for row in TABLE}
    missing = sorted(set(leaves(main)) - covered - {"scan"})
    assert not missing, f"commands without a bad-input row: {missing}"


#: Rows whose command serves MCP on stdio while its upstreams start: run as a child process with
#: a client's open stdin, as a client would start it.
CHILD = ("not MCP", "does not start")


@pytest.mark.parametrize(("command", "kind", "argv", "names"), TABLE, ids=[f"{r[0]}: {r[1]}: {' '.join(r[2][1:])[:40]}" for r in TABLE])
def test_bad_input_is_one_error_line_and_exit_2(command, kind, argv, names, bad_inputs, monkeypatch, capfd):
    if kind in CHILD:
        proc = subprocess.Popen([sys.executable, "-c", "from riskrank.cli import entry; entry()", *argv], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:  # stdin stays open (a client that waits): the error must come from the upstreams, not an EOF
            code = proc.wait(timeout=120)
            out, err = proc.stdout.read(), proc.stderr.read()
        finally:
            proc.kill()
            for f in (proc.stdin, proc.stdout, proc.stderr):
                f.close()
    else:
        monkeypatch.setattr(sys, "argv", ["riskrank", *argv])
        code = run()
        out, err = capfd.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error: ")]
    assert code == 2, (code, err)
    assert "Traceback" not in err + out and len(errors) == 1, err
    assert names in errors[0], errors[0]
    assert len(errors[0]) <= MAX_ERROR_CHARS
    # Nothing else on stderr but riskrank's own progress and warnings: no SDK or library noise.
    assert all(x.startswith(("riskrank: ", "warning: ", "error: ")) for x in lines), err
    assert not (bad_inputs / "ck").exists() and not (bad_inputs / "labels.json").exists()
    for name in ("reg.json", "q.jsonl", "policy.json", "sh.json", "state/pins.json"):  # an input named as an output is refused, not written over
        assert (bad_inputs / name).read_text() == FILES[name]


def test_a_task_that_is_not_text_names_what_it_is():
    from riskrank.errors import RiskrankError, check_task

    for bad, says in ((b"delete logs", "must be a string, got bytes"), (["x"], "got list"), (None, "got NoneType"),
                      ("  ", "the task text is empty"), ("a\ud800b", "lone surrogate at character 1")):
        with pytest.raises(RiskrankError, match=says):
            check_task(bad)
    assert check_task("delete the logs") == "delete the logs"


def test_a_registry_path_that_is_not_utf8_is_audited(tmp_path, monkeypatch, capfd):
    import json
    import os

    reg = tmp_path / os.fsdecode(b"r\xff.json")
    reg.write_text('[{"name": "read_file", "description": "Read a file."}]')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["riskrank", "audit", "--registry", str(reg), "-a", "keyword", "--out", "lab.json",
                                      "--quiet"])
    code = run()
    _out, err = capfd.readouterr()
    assert code in (0, None) and "Traceback" not in err, err
    assert set(json.loads((tmp_path / "lab.json").read_text())) == {"read_file"}


def test_a_reader_that_goes_away_is_exit_141_not_a_verdict(tmp_path):
    """``riskrank scan x | head -c 0``: the scan's own codes (1: poisoned) must not be what a
    closed pipe reads as; 141 is what a shell reports for a process a broken pipe ends."""
    reg = tmp_path / "clean.json"
    reg.write_text('[{"name": "read_file", "description": "Read a file."}]')
    proc = subprocess.Popen([sys.executable, "-c", "from riskrank.cli import entry; entry()", "scan", str(reg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line
    try:
        code = proc.wait(timeout=120)
        err = proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.stderr.close()
    assert code == 141 and "Traceback" not in err and "Exception ignored" not in err, (code, err)



def test_the_start_up_line_names_the_pass_that_runs():
    """Not "PyTorch" for an encoder whose pass was not loaded yet (``auto``)."""
    from types import SimpleNamespace

    from riskrank.cli.serving import _backends

    query, tools = SimpleNamespace(backend="onnx"), SimpleNamespace(backend="auto")
    assert _backends(SimpleNamespace(query=query, inner=tools), int8=True) == (
        " (tasks on ONNX Runtime, int8 weights; tools from the embedding cache, their pass loaded when a new tool comes)")
    same = SimpleNamespace(backend="numpy")
    assert _backends(SimpleNamespace(query=same, inner=same), int8=False) == " (tasks on NumPy)"
    assert _backends(SimpleNamespace(query=SimpleNamespace(backend="auto"), inner=tools), int8=False) == ""
