"""The container image's entry point (deploy/entrypoint.sh), run outside a container: the
image's build and smoke test need a container runtime and its base images, which CI here does
not have (docs/serving.md#a-container says what was run where). The script is the same file
the Dockerfile copies; ``riskrank`` on its PATH is this checkout's.

Its default, ``gateway``: the files of $RISKRANK_CONFIG_DIR, the state store migrated first,
the console with an admin token, serving a team's agents over streamable HTTP; a missing
servers file is one error line; any other command goes to riskrank as it is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from team_support import ADMIN, GUARD_S, TOKENS, gateway_env, run_as, write_files

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A ``riskrank`` command on PATH, as the image has one: this checkout's, under this interpreter."""
    d = tmp_path / "bin"
    d.mkdir()
    script = d / "riskrank"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -c "from riskrank.cli import entry; entry()" "$@"\n')
    script.chmod(0o755)
    return d


def env_with(bin_dir: Path, **extra: str) -> dict[str, str]:
    env = gateway_env(**extra)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', os.defpath)}"
    return env


def test_the_image_runs_this_script_as_its_entry_point():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY deploy/entrypoint.sh /usr/local/bin/riskrank-entrypoint" in dockerfile
    assert 'ENTRYPOINT ["riskrank-entrypoint"]' in dockerfile and 'CMD ["gateway"]' in dockerfile
    assert "USER riskrank" in dockerfile and os.access(ENTRYPOINT, os.X_OK)


def test_no_servers_file_is_one_error_line(tmp_path, bin_dir):
    out = subprocess.run(["sh", str(ENTRYPOINT)], env=env_with(bin_dir, RISKRANK_CONFIG_DIR=str(tmp_path)),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and not out.stdout
    assert out.stderr == (f"error: {tmp_path}/servers.json: no such file: mount the gateway's servers file there "
                          "(or set RISKRANK_CONFIG_DIR)\n")


def test_other_commands_go_to_riskrank(tmp_path, bin_dir):
    (tmp_path / "policy.json").write_text('{"max_level": 3}')
    out = subprocess.run(["sh", str(ENTRYPOINT), "policy", "check", str(tmp_path / "policy.json")],
                         env=env_with(bin_dir), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["policies"]["default"]["max_level"] == 3
    bad = subprocess.run(["sh", str(ENTRYPOINT), "policy", "check", str(tmp_path / "nowhere.json")],
                         env=env_with(bin_dir), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "no such policy file" in bad.stderr


@pytest.mark.mcp_sdk
def test_the_gateway_serves_a_team_from_the_config_dir(tmp_path, bin_dir):
    conf = tmp_path / "etc"
    conf.mkdir()
    write_files(conf)
    state = tmp_path / "state"
    env = env_with(bin_dir, RISKRANK_CONFIG_DIR=str(conf), RISKRANK_STATE=str(state), RISKRANK_HOST="127.0.0.1",
                   RISKRANK_PORT="0", RISKRANK_ADMIN_TOKEN_FILE=str(conf / "admin"))
    proc = subprocess.Popen(["sh", str(ENTRYPOINT)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        while not any("streamable HTTP at " in x for x in lines):
            line = proc.stderr.readline()
            assert line, f"the gateway stopped ({proc.wait(timeout=GUARD_S)}): {''.join(lines[-10:])}"
            lines.append(line)
        url = next(x for x in lines if "streamable HTTP at " in x).split("streamable HTTP at ", 1)[1].split()[0]
        base = url.rsplit("/mcp", 1)[0]
        # The store was migrated before the gateway started, and the gateway runs on it.
        assert any(f"{state}" in x and "schema" in x for x in lines[:3]), lines[:3]
        found, listed = run_as(url, TOKENS["pager"], [("find_tools", {"task": "list the services in the cluster"}),
                                                      ("call_tool", {"name": "list_services", "arguments": {}})])
        assert "list_services" in {t["name"] for t in found["tools"]} and "error" not in listed
        assert httpx.get(f"{base}/readyz", timeout=30).status_code == 200  # the catalogue and the store
        # A read-only client is under its own named policy (clients.json): drop_database is never offered.
        assert run_as(url, TOKENS["ci-bot"], [("call_tool", {"name": "drop_database", "arguments": {"name": "x"}})])[0][
            "error"].startswith("above_max_level:")
        # The console is on (the admin token file), and asks for a login.
        assert httpx.get(f"{base}/console/login", timeout=30).status_code == 200
        assert ADMIN not in "".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=GUARD_S)
        proc.stderr.close()
    assert code == 0
    exported = tmp_path / "audit.jsonl"
    out = subprocess.run(["riskrank", "state", "export", "--state", str(state), "--what", "audit", "--out", str(exported)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    audit = [json.loads(x) for x in exported.read_text().splitlines()]
    assert {(r.get("client"), r["decision"]) for r in audit} >= {("pager", "found"), ("pager", "allowed"), ("ci-bot", "refused")}
