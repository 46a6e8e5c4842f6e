"""A team's gateway as its operators run it, for the team and replica tests and the replica
benchmark (no tests here): ``riskrank mcp`` over streamable HTTP with a clients file, three
named policies, a FastMCP upstream (tests/team_upstream.py) and, with a state store, the
console where an operator decides the calls held at any replica."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx

from riskrank.serving import mcp_compat
from riskrank.serving.gateway.clients import token_digest

HERE = Path(__file__).parent
GUARD_S = 120
LEVELS = {"list_services": 1, "read_service_logs": 2, "restart_service": 3, "drop_database": 5}
POLICIES = {"default": "read-only", "policies": {
    "read-only": {"max_level": 2, "levels": LEVELS},
    "on-call": {"max_level": 4, "confirm_level": 3, "levels": LEVELS},
    "operator": {"max_level": 5, "confirm_level": 5, "levels": LEVELS}}}
#: Eight agents: two of each policy, and two more on-call pagers.
TOKENS = {"ci-bot": "ci-bot-token-0123456789abcdef", "pager": "pager-token-0123456789abcdef",
          "alice": "alice-token-0123456789abcdef", "ci-lint": "ci-lint-token-0123456789abcd",
          "pager-2": "pager2-token-0123456789abcdef", "bob": "bob-token-0123456789abcdefgh",
          "pager-3": "pager3-token-0123456789abcdef", "ci-docs": "ci-docs-token-0123456789abcd"}
ROLES = {"ci-bot": "read-only", "pager": "on-call", "alice": "operator", "ci-lint": "read-only",
         "pager-2": "on-call", "bob": "operator", "pager-3": "on-call", "ci-docs": "read-only"}
ADMIN = "admin-token-team-0123456789abcdef"


def write_files(root: Path, calls_log: Path | None = None) -> None:
    """servers.json, policy.json, clients.json and the console's admin token under ``root``."""
    env = {"TEAM_CALLS": str(calls_log)} if calls_log else {}
    servers = {"mcpServers": {"ops": {"command": sys.executable, "args": [str(HERE / "team_upstream.py")], "env": env}}}
    (root / "servers.json").write_text(json.dumps(servers))
    (root / "policy.json").write_text(json.dumps(POLICIES))
    (root / "clients.json").write_text(json.dumps({"clients": {
        n: {"token_sha256": token_digest(t), "policy": ROLES[n]} for n, t in TOKENS.items()}}))
    (root / "admin").write_text(ADMIN)


def gateway_env(**extra: str) -> dict[str, str]:
    keep = {k: os.environ[k] for k in ("RISKRANK_CACHE", "HF_HUB_OFFLINE", "PYTHONPATH", "PATH", "HOME", "XDG_CONFIG_HOME") if k in os.environ}
    return {**keep, **extra}


def start_gateway(root: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, list[str]]:
    """``riskrank mcp`` over streamable HTTP on a free port: (process, its MCP URL, its log
    lines so far). ``extra``: more flags (``--state URL --replica A --console ...``)."""
    argv = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "mcp", "--config", str(root / "servers.json"),
            "--policy", str(root / "policy.json"), "--clients", str(root / "clients.json"),
            "--transport", "streamable-http", "--port", "0", *extra]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env or gateway_env())
    lines: list[str] = []
    while True:
        line = proc.stderr.readline()
        if not line:
            proc.wait(timeout=GUARD_S)
            raise AssertionError(f"the gateway stopped ({proc.returncode}): {''.join(lines[-10:])}")
        lines.append(line)
        if "streamable HTTP at " in line:
            url = line.split("streamable HTTP at ", 1)[1].split()[0]
            return proc, url, lines


def payload(result: Any) -> dict[str, Any]:
    """A tool result as the agent reads it: find_tools' JSON, a tool's own text, or the error."""
    wired = mcp_compat.wire(result)
    text = wired["content"][0]["text"]
    if wired.get("isError"):
        return {"error": text}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"text": text}


async def accept(context: Any, params: Any) -> Any:
    return mcp_compat.types().ElicitResult.model_validate({"action": "accept", "content": {"approve": True}})


async def session_steps(url: str, token: str, steps: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One agent's session: each (tool, arguments) in turn, the payloads back."""
    target = mcp_compat.ServerTarget(url=url, headers={"Authorization": f"Bearer {token}"})
    async with mcp_compat.open_session(target, elicitation_callback=accept) as s:
        return [payload(await s.call_tool(name, args)) for name, args in steps]


def run_as(url: str, token: str, steps: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        with anyio.fail_after(GUARD_S):
            return await session_steps(url, token, steps)

    return anyio.run(go)


class Console:
    """An operator logged in at one replica's console (its approvals page, over HTTP)."""

    def __init__(self, base: str, name: str, token: str = ADMIN) -> None:
        self.http = httpx.Client(base_url=base, timeout=30)
        page = self.http.get("/console/login")
        form = {"csrf": re.search(r'name="csrf" value="([^"]+)"', page.text).group(1), "name": name, "token": token}
        r = self.http.post("/console/login", data=form)
        assert r.status_code in (200, 303) and "Wrong" not in r.text, r.text[:300]

    def pending(self) -> list[str]:
        return self.http.get("/console/api/pending").json()["pending"]

    def held(self) -> list[tuple[str, str, str]]:
        """(id, tool, replica) of each request the approvals page lists, oldest first."""
        page = self.http.get("/console/approvals").text
        return re.findall(r'id="req-([^"]+)" data-tool="([^"]*)" data-replica="([^"]*)"', page)

    def decide(self, request_id: str, approve: bool = True, note: str = "") -> httpx.Response:
        page = self.http.get("/console/approvals").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        block = page[page.index(f'value="{request_id}"'):]
        digest = re.search(r'name="digest" value="([^"]+)"', block).group(1)
        return self.http.post("/console/approvals/decide", data={"csrf": csrf, "id": request_id, "digest": digest,
                                                                  "action": "approve" if approve else "deny", "note": note})

    def decide_id(self, request_id: str, digest: str | None = None, approve: bool = True) -> httpx.Response:
        """Decide ``request_id`` whether or not the page still lists it (``digest``: of the
        arguments the operator saw; by default the restart_service call of these tests)."""
        from riskrank.serving.gateway.confirm import call_digest

        page = self.http.get("/console/approvals").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        if csrf is None:  # no form on the page (nothing waiting): the session's token from another page
            csrf = re.search(r'name="csrf" value="([^"]+)"', self.http.get("/console/catalogue").text)
        return self.http.post("/console/approvals/decide", data={
            "csrf": csrf.group(1), "id": request_id, "digest": digest or call_digest("restart_service", {"service": "api"}),
            "action": "approve" if approve else "deny", "note": ""})

    def close(self) -> None:
        self.http.close()


def start_replica(root: Path, state: str, name: str, *extra: str):
    """One replica of a team on the state store ``state``, with its console (the admin token file)."""
    return start_gateway(root, "--state", state, "--replica", name, "--console", "--admin-token-file", str(root / "admin"),
                         "--confirm-timeout", "60", *extra)


def stop_all(*procs) -> None:
    """SIGTERM each process, then wait for each (killed when it will not stop)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=GUARD_S)
        except Exception:
            p.kill()


def base_url(url: str) -> str:
    """The gateway's root URL from its MCP URL."""
    return url.rsplit("/mcp", 1)[0]
