"""``riskrank wrap`` / ``unwrap`` on real configuration files of each client's documented
format, in a temporary home directory (never the real one): found where each client keeps
them, rewritten so their servers run behind ``riskrank mcp``, and restored byte for byte.

Also: wrapping twice changes nothing; comments and trailing commas (VS Code's JSONC) are read
and kept; a file that cannot be read is left untouched with the reason; a read-only file is
one error that writes nothing; a file its client saved since wrap gets its servers back and
keeps the save; the table of paths per OS is the one docs/wrap.md shows. The last test starts
a wrapped Claude Desktop file's riskrank entry against the npm reference servers and lists the
same tools through the gateway as the servers list directly."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from riskrank.cli import run
from riskrank.serving import wrap

ROOT = Path(__file__).resolve().parents[1]

CLAUDE_DESKTOP = """{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/me/Desktop",
        "/Users/me/Downloads"
      ]
    },
    "memory": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-memory"],
      "env": {"MEMORY_FILE_PATH": "/Users/me/memory.jsonl"}
    }
  },
  "globalShortcut": "Ctrl+Space"
}
"""
# Cursor: stdio and remote servers; ${env:...} interpolation is Cursor's, not riskrank's.
CURSOR = """{
  "mcpServers": {
    "sqlite": {"command": "uvx", "args": ["mcp-server-sqlite", "--db-path", "/home/me/test.db"]},
    "remote": {"url": "http://localhost:3001/mcp", "headers": {"X-Team": "ops"}},
    "github": {"command": "docker", "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${env:GITHUB_TOKEN}"}}
  }
}
"""
# VS Code user settings (JSONC): comments, trailing commas, the `mcp` key with inputs.
VSCODE_SETTINGS = """// VS Code user settings
{
    "editor.fontSize": 14, // big
    /* MCP servers for Copilot's agent mode */
    "mcp": {
        "inputs": [
            {"type": "promptString", "id": "token", "description": "API token", "password": true},
        ],
        "servers": {
            "fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"]},
            "api": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer ${input:token}"}},
        },
    },
    "files.trimTrailingWhitespace": true,
}
"""
VSCODE_WORKSPACE = """{
\t// the project's servers
\t"servers": {
\t\t"time": {
\t\t\t"type": "stdio",
\t\t\t"command": "uvx",
\t\t\t"args": ["mcp-server-time", "--local-timezone=Europe/Lisbon"], // trailing comma next
\t\t},
\t},
}
"""
# Windsurf: a remote server's URL is `serverUrl`.
WINDSURF = """{
  "mcpServers": {
    "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "/home/me/repo"]},
    "docs": {"serverUrl": "https://docs.example.com/mcp"}
  }
}
"""
CLAUDE_CODE_PROJECT = """{
  "mcpServers": {
    "puppeteer": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-puppeteer"], "env": {}}
  }
}
"""


def claude_json(project: Path) -> str:
    """~/.claude.json as Claude Code writes it: user servers at the top, local ones per project,
    and its own state beside them."""
    return json.dumps({
        "numStartups": 12, "autoUpdates": True,
        "mcpServers": {"sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp"}},
        "projects": {str(project): {"allowedTools": [], "mcpServers": {
            "pg": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-postgres", "postgresql://localhost/db"]}}},
            "/elsewhere": {"allowedTools": ["Bash"]}},
    }, indent=2) + "\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A home directory of its own (HOME; XDG and APPDATA unset) and a project as the current directory."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in ("XDG_CONFIG_HOME", "APPDATA", "USERPROFILE"):
        monkeypatch.delenv(var, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    assert Path.home() == h
    return h


def write(path: Path, text: str | bytes, mode: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    if mode is not None:
        path.chmod(mode)
    return path


def every_client(home: Path) -> dict[str, Path]:
    """One file of each client's documented format where that client keeps it on Linux."""
    project = Path.cwd()
    return {
        "claude-desktop": write(home / ".config/Claude/claude_desktop_config.json", CLAUDE_DESKTOP),
        "cursor": write(home / ".cursor/mcp.json", CURSOR),
        "vscode-settings": write(home / ".config/Code/User/settings.json", VSCODE_SETTINGS),
        "vscode-workspace": write(project / ".vscode/mcp.json", VSCODE_WORKSPACE),
        "windsurf": write(home / ".codeium/windsurf/mcp_config.json", WINDSURF),
        "claude-code-project": write(project / ".mcp.json", CLAUDE_CODE_PROJECT),
        "claude-code-user": write(home / ".claude.json", claude_json(project), mode=0o600),
    }


def riskrank(monkeypatch, capfd, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["riskrank", *argv])
    code = run()
    out, err = capfd.readouterr()
    return code, out, err


def snapshot(*roots: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for r in roots for p in sorted(r.rglob("*")) if p.is_file()}


CMD = ["--command", "riskrank"]


def test_round_trip_is_byte_identical(home, monkeypatch, capfd):
    files = every_client(home)
    before = snapshot(home, Path.cwd())
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD)
    assert code == 0, err
    servers_dir = home / ".config/riskrank/wrapped"
    # Every file changed, and each client's servers object now holds what riskrank cannot run and one riskrank entry.
    for name, path in files.items():
        assert path.read_bytes() != before[str(path)][0], name
    desktop = json.loads(files["claude-desktop"].read_text())
    assert list(desktop["mcpServers"]) == ["riskrank"] and desktop["globalShortcut"] == "Ctrl+Space"
    entry = desktop["mcpServers"]["riskrank"]
    assert entry["command"] == "riskrank" and entry["args"][:2] == ["mcp", "--config"]
    servers_file = Path(entry["args"][2])
    assert servers_file.parent == servers_dir and entry["args"][3:] == ["--policy", str(home / ".config/riskrank/policy.json")]
    assert json.loads(servers_file.read_text()) == {"mcpServers": json.loads(CLAUDE_DESKTOP)["mcpServers"]}
    assert stat.S_IMODE(servers_file.stat().st_mode) == 0o600  # it may hold credentials
    # Cursor: the ${env:...} server stays in Cursor, with the reason on the way.
    cursor = json.loads(files["cursor"].read_text())["mcpServers"]
    assert list(cursor) == ["github", "riskrank"] and cursor["github"] == json.loads(CURSOR)["mcpServers"]["github"]
    assert "github stays in Cursor: mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: variable substitution" in out
    # Windsurf's serverUrl is riskrank's url; Claude Code's user and local servers each move to their own file.
    wind = Path(json.loads(files["windsurf"].read_text())["mcpServers"]["riskrank"]["args"][2])
    assert json.loads(wind.read_text())["mcpServers"]["docs"] == {"url": "https://docs.example.com/mcp"}
    code_user = json.loads(files["claude-code-user"].read_text())
    assert code_user["numStartups"] == 12 and code_user["projects"]["/elsewhere"] == {"allowedTools": ["Bash"]}
    local = code_user["projects"][str(Path.cwd())]["mcpServers"]
    assert list(local) == ["riskrank"] and local["riskrank"]["type"] == "stdio"
    assert local["riskrank"]["args"][2] != code_user["mcpServers"]["riskrank"]["args"][2]
    assert stat.S_IMODE(files["claude-code-user"].stat().st_mode) == 0o600  # its own mode kept
    assert json.loads((home / ".config/riskrank/policy.json").read_text())["max_level"] == 4  # the default policy, written

    code, out, err = riskrank(monkeypatch, capfd, "unwrap", "--yes")
    assert code == 0, err
    assert out.count("unwrapped ") == len(files)
    after = snapshot(home, Path.cwd())
    for path in files.values():
        assert after[str(path)] == before[str(path)], path  # bytes and mode
    assert not list(servers_dir.iterdir())  # servers files, backups and records gone
    assert riskrank(monkeypatch, capfd, "unwrap", "--yes")[1].startswith("nothing is wrapped")


def test_wrapping_twice_changes_nothing(home, monkeypatch, capfd):
    every_client(home)
    assert riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD)[0] == 0
    once = snapshot(home, Path.cwd())
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD)
    assert code == 0, err
    assert out.count("already wrapped") == 7 and "nothing to wrap" in out
    assert snapshot(home, Path.cwd()) == once
    # A client someone put behind riskrank by hand is recognised too (no record of riskrank's).
    hand = write(home / ".cursor/mcp.json", json.dumps({"mcpServers": {"gw": {"command": "/opt/bin/riskrank",
                                                                                "args": ["mcp", "--config", "/etc/s.json"]}}}))
    for record in (home / ".config/riskrank/wrapped").glob("cursor-*"):
        record.unlink()
    raw = hand.read_bytes()
    code, out, _ = riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "cursor", *CMD)
    assert code == 0 and "already behind riskrank mcp (mcpServers.gw)" in out and hand.read_bytes() == raw


def test_jsonc_is_read_and_stays_valid_for_vs_code(home, monkeypatch, capfd):
    files = every_client(home)
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "vscode", *CMD)
    assert code == 0, err
    settings = files["vscode-settings"].read_text()
    # Comments and trailing commas outside the servers object are kept as they were...
    for kept in ("// VS Code user settings", '"editor.fontSize": 14, // big', "/* MCP servers for Copilot's agent mode */",
                 '"password": true},\n        ],', '"files.trimTrailingWhitespace": true,\n}'):
        assert kept in settings
    # ... and the file reads, as VS Code reads it (JSONC), to the same settings but the servers.
    spec = next(s for s in wrap.CLIENT_FILES if s.scope == "user settings")
    value = wrap.parse(settings.encode(), spec, "settings.json").value
    assert value["editor.fontSize"] == 14 and value["mcp"]["inputs"][0]["id"] == "token"
    assert list(value["mcp"]["servers"]) == ["api", "riskrank"]  # ${input:token} stays in VS Code
    assert value["mcp"]["servers"]["riskrank"]["type"] == "stdio"
    assert "api stays in VS Code: mcp.servers.api.headers.Authorization: variable substitution" in out
    # The workspace file is indented with tabs: the entry riskrank writes is too.
    workspace = files["vscode-workspace"].read_text()
    assert '\t\t"riskrank": {\n\t\t\t"type": "stdio",' in workspace and "\t// the project's servers" in workspace
    # A strict-JSON client does not read comments: its file is left as it is, and says why.
    commented = write(home / ".cursor/mcp.json", '{"mcpServers": {"a": {"command": "x"}}, // mine\n}')
    code, out, _ = riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "cursor", *CMD)
    assert code == 0 and "it has comments or trailing commas, which Cursor does not read" in out
    assert commented.read_text() == '{"mcpServers": {"a": {"command": "x"}}, // mine\n}'


def test_unparseable_files_are_left_untouched_with_one_line_each(home, monkeypatch, capfd):
    files = every_client(home)
    broken = {
        "claude-desktop": b'{"mcpServers": {"a": {"command": "x"}}',
        "cursor": b'{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}',
        "windsurf": b"\xff\xfe not text",
        "claude-code-project": b'{"mcpServers": ["not", "an", "object"]}',
    }
    for name, raw in broken.items():
        files[name].write_bytes(raw)
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD)
    assert code == 0, err
    for name, raw in broken.items():
        assert files[name].read_bytes() == raw, name
    assert "left as it is: invalid JSON at line 1: Expecting ',' delimiter" in out
    assert "left as it is: duplicate key 'a' in one JSON object" in out
    assert "left as it is: not UTF-8 text" in out
    assert "left as it is: mcpServers is not an object of servers" in out
    assert out.count("wrapped ") == 3  # the others are wrapped all the same


def test_read_only_file_is_one_error_and_nothing_is_written(home, monkeypatch, capfd):
    files = every_client(home)
    files["cursor"].chmod(0o444)
    before = snapshot(home, Path.cwd())
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD)
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert code == 2 and len(errors) == 1, err
    assert errors[0] == (f"error: {files['cursor']}: read-only (mode 0444): riskrank wrap changes nothing; make it "
                         "writable, or leave its client out (--client)")
    assert snapshot(home, Path.cwd()) == before and not (home / ".config/riskrank").exists()
    # Leaving that client out wraps the rest.
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD, *[a for c in ("claude-desktop", "windsurf")
                                                                           for a in ("--client", c)])
    assert code == 0 and out.count("wrapped ") == 2, err


def test_dry_run_prints_a_diff_and_writes_nothing(home, monkeypatch, capfd):
    files = every_client(home)
    before = snapshot(home, Path.cwd())
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--dry-run", "--client", "claude-desktop", *CMD)
    assert code == 0, err
    assert snapshot(home, Path.cwd()) == before
    path = files["claude-desktop"]
    assert f"--- {path}\n+++ {path}\n" in out and '+    "riskrank": {\n+      "command": "riskrank",' in out
    assert '-    "filesystem": {' in out and "--- /dev/null\n+++ " in out and '+    "filesystem": {' in out
    assert "(would write the default policy to " in out


def test_a_file_its_client_saved_since_wrap_gets_its_servers_back(home, monkeypatch, capfd):
    """Claude Code rewrites ~/.claude.json all the time (JSON.stringify, two spaces): unwrap
    puts the servers back and keeps the other changes; a servers object changed since is an
    error that changes nothing."""
    files = every_client(home)
    path = files["claude-code-user"]
    original = json.loads(path.read_text())
    assert riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "claude-code", *CMD)[0] == 0
    saved = json.loads(path.read_text())
    saved["numStartups"] = 13
    path.write_text(json.dumps(saved, indent=2))
    code, out, err = riskrank(monkeypatch, capfd, "unwrap", "--yes")
    assert code == 0, err
    assert "changed since wrap: its servers are restored, its other changes kept" in out
    assert json.loads(path.read_text()) == {**original, "numStartups": 13}
    assert files["claude-code-project"].read_text() == CLAUDE_CODE_PROJECT  # unchanged since wrap: byte for byte

    assert riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "claude-code", *CMD)[0] == 0
    edited = json.loads(path.read_text())
    edited["mcpServers"]["extra"] = {"command": "x"}
    path.write_text(json.dumps(edited))
    raw = path.read_bytes()
    code, out, err = riskrank(monkeypatch, capfd, "unwrap", "--yes")
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and "its servers (mcpServers) changed since wrap; restore them by hand from" in errors[0]
    assert path.read_bytes() == raw


def test_bom_and_crlf_are_kept(home, monkeypatch, capfd):
    text = CLAUDE_DESKTOP.replace("\n", "\r\n")
    path = write(home / ".config/Claude/claude_desktop_config.json", b"\xef\xbb\xbf" + text.encode())
    raw = path.read_bytes()
    assert riskrank(monkeypatch, capfd, "wrap", "--yes", *CMD)[0] == 0
    wrapped = path.read_bytes()
    assert wrapped.startswith(b"\xef\xbb\xbf{\r\n") and b"\n" not in wrapped.replace(b"\r\n", b"")
    assert riskrank(monkeypatch, capfd, "unwrap", "--yes")[0] == 0
    assert path.read_bytes() == raw


def test_the_paths_per_os_are_those_docs_wrap_md_shows(tmp_path):
    home = tmp_path / "h"
    project = tmp_path / "p"
    env = {"APPDATA": str(home / "AppData" / "Roaming")}
    got = {(s.client, s.scope, p): wrap.expand(s.paths[p], home=home, project=project, env=env)
           for s in wrap.CLIENT_FILES for p in ("darwin", "linux", "win32")}
    assert got[("claude-desktop", "user", "darwin")] == home / "Library/Application Support/Claude/claude_desktop_config.json"
    assert got[("claude-desktop", "user", "linux")] == home / ".config/Claude/claude_desktop_config.json"
    assert got[("claude-desktop", "user", "win32")] == home / "AppData/Roaming/Claude/claude_desktop_config.json"
    assert got[("vscode", "user settings", "win32")] == home / "AppData/Roaming/Code/User/settings.json"
    assert got[("cursor", "user", "win32")] == home / ".cursor/mcp.json"
    assert got[("claude-code", "user", "darwin")] == home / ".claude.json"
    assert got[("vscode", "workspace", "linux")] == project / ".vscode/mcp.json"
    assert wrap.expand("$XDG_CONFIG_HOME/Code/User/mcp.json", home=home, project=project,
                       env={"XDG_CONFIG_HOME": "/x"}) == Path("/x/Code/User/mcp.json")
    assert wrap.config_dir(home=home, platform="win32", env=env) == home / "AppData/Roaming/riskrank"
    doc = (ROOT / "docs" / "wrap.md").read_text()
    for spec in wrap.CLIENT_FILES:
        for template in spec.paths.values():
            assert f"`{template}`" in doc, template


def test_jsonc_blanking_keeps_offsets_and_strings():
    text = '{"a": "// not a comment", /* c */ "b": [1, 2,], // end\n "c": "/* no */",}'
    blanked = wrap.blank_jsonc(text)
    assert len(blanked) == len(text) and json.loads(blanked) == {"a": "// not a comment", "b": [1, 2], "c": "/* no */"}
    assert wrap.find_span(blanked, ("b",)) == (text.index("[1"), text.index("],") + 1)
    with pytest.raises(ValueError, match="line 2 is not closed"):
        wrap.blank_jsonc('{\n/* open')


@pytest.mark.mcp_sdk
@pytest.mark.npm
def test_a_wrapped_claude_desktop_config_starts_and_lists_the_same_tools(home, monkeypatch, capfd):
    """The client's entry, started as Claude Desktop would start it, is a gateway over the
    same servers: every tool the servers list directly is in its catalogue."""
    import anyio

    from riskrank.serving import mcp_compat
    from riskrank.serving.mcp_compat import ServerTarget
    from test_server_support import need_npm_bin

    bins = need_npm_bin()
    files = home / "files"
    files.mkdir()
    (files / "notes.txt").write_text("hello\n")
    config = write(home / ".config/Claude/claude_desktop_config.json", json.dumps({
        "mcpServers": {"filesystem": {"command": str(bins / "mcp-server-filesystem"), "args": [str(files)]},
                       "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(home / "m.jsonl")}}},
        "globalShortcut": ""}, indent=2))
    policy = write(home / "policy.json", json.dumps({"max_level": 5, "confirm_level": 5, "client_choices": {"mode": ["dense"]}}))
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "RISKRANK_CACHE", "HF_HUB_OFFLINE", "RISKRANK_DATA") if k in os.environ}

    async def direct() -> set[str]:
        names: set[str] = set()
        for entry in json.loads(config.read_text())["mcpServers"].values():
            target = ServerTarget(command=entry["command"], args=tuple(entry.get("args", [])), env=entry.get("env", {}))
            async with mcp_compat.open_session(target) as s:
                names |= {t["name"] for t in await mcp_compat.list_all(s, "tools")}
        return names

    async def through(entry: dict) -> tuple[list[str], dict]:
        target = ServerTarget(command=entry["command"], args=tuple(entry["args"]), env={**env, **entry.get("env", {})})
        with open(home / "gateway.err", "w") as errlog, anyio.fail_after(180):
            async with mcp_compat.open_session(target, errlog=errlog) as s:
                listed = [t["name"] for t in await mcp_compat.list_all(s, "tools")]
                found = mcp_compat.wire(await s.call_tool("find_tools", {"task": "files and memory", "k": 100, "mode": "dense"}))
                return listed, found["structuredContent"]

    before = anyio.run(direct)
    assert len(before) >= 20 and {"read_text_file", "create_entities"} <= before
    code, _, err = riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "claude-desktop", "--policy", str(policy),
                              "--command", f"{sys.executable} -m riskrank")
    assert code == 0, err
    entry = json.loads(config.read_text())["mcpServers"]["riskrank"]
    assert entry["command"] == sys.executable and entry["args"][:3] == ["-m", "riskrank", "mcp"]
    listed, found = anyio.run(through, entry)
    assert listed == ["find_tools", "call_tool"]
    catalogue = {t["name"] for t in found["tools"]} | {w["name"] for w in found["withheld"]} | set(found["below_min_score"])
    assert found["catalogue"]["n_tools"] == len(before) and found["policy"]["not_offered"] == 0
    assert catalogue == before, (catalogue ^ before)


def test_a_client_that_saves_while_wrap_writes_keeps_its_save(home, monkeypatch, capfd):
    """The client file is written last, only if it still holds what was read; otherwise nothing
    of that wrap stays behind (no record calls the file wrapped)."""
    files = every_client(home)
    real = wrap.read_regular_file

    def client_saves_meanwhile(path, **kw):
        if Path(path) == files["claude-desktop"].resolve() and (home / ".config/riskrank/wrapped").exists():
            files["claude-desktop"].write_text(CLAUDE_DESKTOP + " ")  # the client saves after wrap read the file
        return real(path, **kw)

    from riskrank import fileio

    monkeypatch.setattr(wrap, "read_regular_file", client_saves_meanwhile)
    monkeypatch.setattr(fileio, "read_regular_file", client_saves_meanwhile)  # the check before the replace reads there
    code, _, err = riskrank(monkeypatch, capfd, "wrap", "--yes", "--client", "claude-desktop", *CMD)
    assert code == 2 and "changed while riskrank was writing; nothing of it was changed" in err
    assert files["claude-desktop"].read_text() == CLAUDE_DESKTOP + " "
    assert not list((home / ".config/riskrank/wrapped").iterdir())


def test_wrap_shows_the_diff_before_it_asks(home, monkeypatch, capfd):
    """Without --yes, what would change is shown before the question (a "no" writes nothing)."""
    files = every_client(home)
    before = snapshot(home, Path.cwd())
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--client", "claude-desktop", *CMD)
    path = files["claude-desktop"]
    assert code == 1 and "not wrapped: nothing was written" in err and f"--- {path}\n+++ {path}\n" in out
    assert snapshot(home, Path.cwd()) == before
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no answer at all (< /dev/null): a no, not an abort (130)
    code, out, err = riskrank(monkeypatch, capfd, "wrap", "--client", "claude-desktop", *CMD)
    assert code == 1 and "standard input is closed" in err and "not wrapped: nothing was written" in err, err
    assert snapshot(home, Path.cwd()) == before
