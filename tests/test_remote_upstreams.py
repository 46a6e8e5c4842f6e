"""Remote upstreams: a team's shared MCP servers reached over the network, SSE and streamable
HTTP, each behind a bearer-token check (tests/remote_upstream.py, the SDK's own server apps
under uvicorn on 127.0.0.1). The token reaches the gateway through its environment
(``headersFromEnv``), never the servers file; it shows in no log line, error, audit line or
repr. https is verified by default (a self-signed server is refused in one line) and a
private CA is trusted with ``tls.ca_file``; a remote server that is killed is marked down,
its tools leave the catalogue, and it is reconnected with the usual backoff when it is back.

Every wait polls with a generous deadline; no assertion is about time. The servers and the
gateway run on whichever SDK major is installed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from riskrank.catalogue import ArtefactSpec
from riskrank.encoder import make_encoder
from riskrank.serving import mcp_compat
from riskrank.serving.gateway.auditlog import AuditLog
from riskrank.serving.gateway.config import ConfigError, load_servers, remote_warnings
from riskrank.serving.gateway.core import Gateway, _Catalogues
from riskrank.serving.gateway.policy import Policy
from riskrank.serving.gateway.upstreams import UpstreamError, UpstreamManager, leaf
from test_server_support import HashEncoder

pytestmark = [pytest.mark.mcp_sdk]
HERE = Path(__file__).resolve().parent
GUARD_S = 60
SERVER_TOKEN = "remote-secret-0123456789abcdef"
#: The gateway's environment variable that holds the Authorization header's value.
AUTH_VAR = "RISKRANK_TEST_REMOTE_AUTH"
SECRETS = frozenset({"RISKRANK_TOKEN", "RISKRANK_ADMIN_TOKEN"})
PATHS = {"sse": "/sse", "http": "/mcp"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Remote:
    """One remote server in a subprocess (``kind`` sse or http), restartable on its port."""

    def __init__(self, kind: str, tls: tuple[Path, Path] | None = None) -> None:
        self.kind, self.tls, self.port = kind, tls, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{PATHS[self.kind]}"

    def start(self) -> Remote:
        argv = [sys.executable, str(HERE / "remote_upstream.py"), self.kind, str(self.port)]
        argv += [str(p) for p in self.tls] if self.tls else []
        env = {**os.environ, "REMOTE_TEST_TOKEN": SERVER_TOKEN, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        end = time.monotonic() + GUARD_S
        while time.monotonic() < end:  # a hang guard only
            assert self.proc.poll() is None, f"the {self.kind} server exited with {self.proc.returncode}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"the {self.kind} server never listened on {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=GUARD_S)


@pytest.fixture(scope="module")
def remotes() -> Iterator[dict[str, Remote]]:
    """An SSE and a streamable-HTTP server, both requiring the bearer token (plain http on loopback)."""
    started = {kind: Remote(kind).start() for kind in ("sse", "http")}
    yield started
    for r in started.values():
        r.kill()


def write_servers(tmp_path: Path, servers: dict[str, Any], name: str = "servers.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def remote_entry(remote: Remote, var: str = AUTH_VAR, **extra: Any) -> dict[str, Any]:
    return {"type": "sse" if remote.kind == "sse" else "http", "url": remote.url,
            "headers": {"X-Team": "ops"}, "headersFromEnv": {"Authorization": var}, **extra}


async def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` (in the event loop) until it holds; a hang guard, not a timing assertion."""
    with anyio.move_on_after(GUARD_S):
        while not check():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"{what}: not within {GUARD_S} s")


class _Call:
    """The caller of find_tools / call_tool (one session; nothing to confirm)."""

    session_key = "remote-test"
    progress_token = None
    wants_progress = False

    async def confirm(self, message: str, bind: str, details: str | None = None) -> str:  # pragma: no cover
        return "decline"


def structured(result: Any) -> dict[str, Any]:
    return mcp_compat.wire(result).get("structuredContent") or {}


def text(result: Any) -> tuple[str, bool]:
    out = mcp_compat.wire(result)
    return " ".join(c.get("text", "") for c in out.get("content", [])), bool(out.get("isError"))


# -- the servers file -----------------------------------------------------------------------------
def test_remote_entries_read_the_header_from_the_environment(tmp_path, monkeypatch):
    import certifi  # httpx's own trust store: any PEM bundle will do here

    monkeypatch.setenv(AUTH_VAR, f"Bearer {SERVER_TOKEN}")
    ca = certifi.where()
    path = write_servers(tmp_path, {
        "ops": {"type": "sse", "url": "https://user:pw@mcp.ops.example/sse?key=k", "headers": {"X-Team": "ops"},
                "headersFromEnv": {"Authorization": AUTH_VAR}, "tls": {"ca_file": str(ca)}},
        "docs": {"url": "https://docs.example/mcp", "tls": {"verify": False}},
        "plain": {"url": "http://10.1.2.3:8080/mcp"},
        "local": {"type": "streamable-http", "url": "http://localhost:3001/mcp"}})
    ops, docs, plain, local = load_servers(path, secret_names=SECRETS)
    assert ops.target.transport == "sse" and docs.target.transport == local.target.transport == "streamable-http"
    assert dict(ops.target.headers) == {"X-Team": "ops", "Authorization": f"Bearer {SERVER_TOKEN}"}
    assert (ops.target.verify, ops.target.ca_file, docs.target.verify, docs.target.ca_file) == (True, ca, False, None)
    assert local.target.verify and local.target.ca_file is None
    # The value never shows: not in repr (a traceback, a log line), not in what errors name.
    assert SERVER_TOKEN not in repr(ops) and SERVER_TOKEN not in ops.target.describe()
    assert ops.target.describe() == "sse https://mcp.ops.example/sse"  # no userinfo, no query
    # The start-up warnings: verification off, and plain http beyond loopback; none otherwise.
    assert remote_warnings(ops) == [] and remote_warnings(local) == []
    (off,) = remote_warnings(docs)
    assert off.startswith("warning: upstream 'docs': TLS verification is off (tls.verify false)")
    (clear,) = remote_warnings(plain)
    assert clear.startswith("warning: upstream 'plain': http://10.1.2.3 is not encrypted") and "\n" not in clear


@pytest.mark.parametrize(("entry", "env", "message"), [
    ({"headersFromEnv": {"Authorization": AUTH_VAR}}, {},
     f"mcpServers.ops.headersFromEnv.Authorization: the environment variable {AUTH_VAR} is not set or is empty"),
    ({"headersFromEnv": {"Authorization": AUTH_VAR}}, {AUTH_VAR: "  "}, f"the environment variable {AUTH_VAR} is not set"),
    ({"headersFromEnv": {"Authorization": AUTH_VAR}}, {AUTH_VAR: "Bearer abc\r\nX-Evil: 1"},
     f"headersFromEnv.Authorization: the value of {AUTH_VAR} cannot be an HTTP header"),
    ({"headers": {"authorization": "Bearer x"}, "headersFromEnv": {"Authorization": AUTH_VAR}}, {AUTH_VAR: "Bearer abc"},
     "headersFromEnv.Authorization: the header is given twice"),
    ({"headersFromEnv": {"Authorization": "RISKRANK_TOKEN"}}, {"RISKRANK_TOKEN": "riskrank-own-0123456789"},
     "RISKRANK_TOKEN is riskrank's own secret"),
    ({"headersFromEnv": {"Bad Header": AUTH_VAR}}, {AUTH_VAR: "Bearer abc"}, "'Bad Header' is not an HTTP header name"),
    ({"headersFromEnv": {"Authorization": "${OPS}"}}, {}, "'${OPS}' is not an environment variable name"),
    ({"headersFromEnv": ["Authorization"]}, {}, "headersFromEnv: must be an object of header name -> environment variable"),
    ({"tls": {"verify": "no"}}, {}, "mcpServers.ops.tls.verify: must be true or false"),
    ({"tls": {"verify": False, "ca_file": "/etc/hosts"}}, {}, "tls: give ca_file or verify false, not both"),
    ({"tls": {"ca_file": "/no/such/ca.pem"}}, {}, "tls.ca_file: must be an existing file"),
    ({"tls": {"ca_file": "NOT_PEM"}}, {}, "not-pem.txt: cannot load CA certificates from it"),
    ({"tls": {"pin": "x"}}, {}, "mcpServers.ops.tls: unknown key(s) ['pin']"),
    ({"url": "http://h/sse", "tls": {"verify": False}}, {}, "tls: the url is not https"),
    ({"url": None}, {}, "mcpServers.ops.url: an sse server needs a url"),
    ({"command": "sh"}, {}, "mcpServers.ops.command: not used by an sse server"),
    ({"type": "websocket"}, {}, "mcpServers.ops.type: must be 'stdio', 'http' or 'sse', got 'websocket'"),
])
def test_remote_entry_errors_are_one_line_and_never_show_the_value(tmp_path, monkeypatch, entry, env, message):
    monkeypatch.delenv(AUTH_VAR, raising=False)
    if entry.get("tls", {}).get("ca_file") == "NOT_PEM":
        (tmp_path / "not-pem.txt").write_text("not a certificate\n")
        entry = {"tls": {"ca_file": str(tmp_path / "not-pem.txt")}}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    body = {"type": "sse", "url": "https://mcp.ops.example/sse", **entry}
    path = write_servers(tmp_path, {"ops": {k: v for k, v in body.items() if v is not None}})
    with pytest.raises(ConfigError) as err:
        load_servers(path, secret_names=SECRETS)
    said = str(err.value)
    assert said.startswith(str(path)) and message in said and "\n" not in said, said
    for value in env.values():  # never the variable's value
        assert not value.strip() or value.strip() not in said


def test_a_stdio_server_takes_no_url_keys(tmp_path):
    path = write_servers(tmp_path, {"a": {"command": "sh", "headersFromEnv": {"Authorization": AUTH_VAR}}})
    with pytest.raises(ConfigError, match=r"mcpServers\.a\.headersFromEnv: not used by a stdio server"):
        load_servers(path)


# -- the gateway against live remote servers ---------------------------------------------------------
def test_sse_and_http_upstreams_with_auth_from_the_environment(remotes, tmp_path, monkeypatch):
    """Both transports behind one gateway, the token from its environment: tools listed, a
    call forwarded to each, and the token nowhere in the log or the audit log."""
    monkeypatch.setenv(AUTH_VAR, f"Bearer {SERVER_TOKEN}")
    configs = load_servers(write_servers(tmp_path, {k: remote_entry(r) for k, r in remotes.items()}), secret_names=SECRETS)
    logged: list[str] = []
    audit_path = tmp_path / "audit.jsonl"
    policy = Policy(max_level=5, confirm_level=5)

    async def main() -> dict[str, Any]:
        manager = UpstreamManager(configs, startup_timeout=GUARD_S, log=logged.append)
        audit = AuditLog(audit_path)
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            keeper = _Catalogues(None, manager, ArtefactSpec("remote", fill_levels="keyword"), make_encoder(HashEncoder()),
                                 policy, audit, logged.append)
            view = await keeper.build()
            keeper.audit_upstreams(view)
            gateway = Gateway(view, policy=policy, manager=manager, audit=audit)
            found = structured(await gateway.find_tools({"task": "echo a message back", "k": 5}, _Call()))
            calls = {}
            for kind, label in (("sse", "SSE"), ("http", "streamable HTTP")):
                await gateway.find_tools({"task": f"echo a message back through the {label} server", "k": 1}, _Call())
                calls[kind] = text(await gateway.forward_call({"name": f"{kind}_echo", "arguments": {"message": "hi"}}, _Call()))
            tg.cancel_scope.cancel()
        audit.close()
        return {"states": {n: u.state for n, u in manager.upstreams.items()}, "found": found, "calls": calls}

    out = anyio.run(main)
    assert out["states"] == {"sse": "up", "http": "up"}
    assert {t["name"] for t in out["found"]["tools"]} == {"sse_echo", "http_echo"}
    assert out["calls"] == {"sse": ("sse: hi", False), "http": ("http: hi", False)}
    assert any(line.startswith("upstream 'sse': up, 1 tools") for line in logged), logged
    assert not any(line.startswith("warning:") for line in logged), logged  # loopback http: nothing to warn about
    record = audit_path.read_text()
    assert '"sse_echo"' in record
    for where in (record, "\n".join(logged)):
        assert SERVER_TOKEN not in where


def first_states(configs: list, logged: list[str]) -> dict[str, tuple[str, str]]:
    """Each upstream's (state, last error) once the manager's first start is over."""
    async def main() -> dict[str, tuple[str, str]]:
        manager = UpstreamManager(configs, startup_timeout=GUARD_S, log=logged.append)
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            out = {n: (u.state, u.last_error) for n, u in manager.upstreams.items()}
            tg.cancel_scope.cancel()
        return out

    return anyio.run(main)


def test_a_wrong_header_leaves_the_upstream_down_with_the_reason(remotes, tmp_path, monkeypatch):
    """A server that refuses the credentials (401) is down, and says why in one line that names
    the server and the status, not the value; the others serve."""
    monkeypatch.setenv(AUTH_VAR, f"Bearer {SERVER_TOKEN}")
    monkeypatch.setenv("RISKRANK_TEST_WRONG_AUTH", "Bearer wrong-0123456789")
    configs = load_servers(write_servers(tmp_path, {
        "good": remote_entry(remotes["http"]),
        "sse_bad": remote_entry(remotes["sse"], "RISKRANK_TEST_WRONG_AUTH"),
        "http_bad": remote_entry(remotes["http"], "RISKRANK_TEST_WRONG_AUTH")}))
    logged: list[str] = []
    states = first_states(configs, logged)
    assert states["good"] == ("up", "")
    for name in ("sse_bad", "http_bad"):
        state, why = states[name]
        assert state == "down" and why.startswith(f"upstream {name!r} (") and "\n" not in why, why
        assert "failed to start: the server answered HTTP 401 Unauthorized (are its headers or headersFromEnv right?)" in why
        assert any(line.startswith(f"warning: upstream {name!r}") for line in logged), logged
    assert not any("wrong-0123456789" in line or SERVER_TOKEN in line for line in logged)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    import datetime
    import ipaddress

    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "riskrank test upstream")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.parametrize("kind", ["sse", "http"])
def test_https_is_verified_and_a_private_ca_is_trusted_with_ca_file(tmp_path, monkeypatch, kind):
    """A self-signed https server: refused by default (one line: the verification failure),
    accepted with ``tls.ca_file`` naming its certificate."""
    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv(AUTH_VAR, f"Bearer {SERVER_TOKEN}")
    remote = Remote(kind, tls=(cert, key)).start()
    try:
        configs = load_servers(write_servers(tmp_path, {
            "default": remote_entry(remote), "private": remote_entry(remote, tls={"ca_file": str(cert)})}))
        logged: list[str] = []
        states = first_states(configs, logged)
    finally:
        remote.kill()
    assert states["private"] == ("up", "")
    state, why = states["default"]
    assert state == "down" and "\n" not in why and "CERTIFICATE_VERIFY_FAILED" in why, why
    prefix = "sse " if kind == "sse" else ""
    assert why.startswith(f"upstream 'default' ({prefix}https://127.0.0.1:") and "tls.ca_file" in why, why
    assert not any(SERVER_TOKEN in line for line in logged)


@pytest.mark.parametrize(("kind", "other"), [("sse", "http"), ("http", "sse")])
def test_a_killed_remote_server_is_down_and_reconnected_when_it_is_back(tmp_path, monkeypatch, caplog, kind, other):
    """Kill one remote server (SSE, then streamable HTTP) under a running gateway: it is marked
    down and its tools leave the catalogue (a call is refused) while the other server's stay;
    started again on the same port, it is reconnected by the backoff loop and answers again.
    The SDK's tracebacks for the dropped connection are not logged (the gateway's one line
    says it)."""
    monkeypatch.setenv(AUTH_VAR, f"Bearer {SERVER_TOKEN}")
    remote, beside = Remote(kind).start(), Remote(other).start()
    label = {"sse": "SSE", "http": "streamable HTTP"}[kind]
    tool = f"{kind}_echo"
    logged: list[str] = []
    policy = Policy(max_level=5, confirm_level=5)
    try:
        configs = load_servers(write_servers(tmp_path, {kind: remote_entry(remote), other: remote_entry(beside)}))

        async def main() -> dict[str, Any]:
            manager = UpstreamManager(configs, startup_timeout=GUARD_S, ping_interval=0.2, log=logged.append)
            up = manager.upstreams[kind]
            async with anyio.create_task_group() as tg:
                await tg.start(manager.run)
                keeper = _Catalogues(None, manager, ArtefactSpec("remote", fill_levels="keyword"),
                                     make_encoder(HashEncoder()), policy, AuditLog(None), logged.append)
                gateway = Gateway(await keeper.build(), policy=policy, manager=manager, audit=AuditLog(None))
                keeper.gateway, manager.on_change = gateway, keeper.changed  # as riskrank mcp wires them
                tg.start_soon(keeper.keep)

                async def call() -> tuple[str, bool]:
                    await gateway.find_tools({"task": f"echo a message back through the {label} server", "k": 1}, _Call())
                    return text(await gateway.forward_call({"name": tool, "arguments": {"message": "hi"}}, _Call()))

                seen: dict[str, Any] = {"before": await call()}
                await anyio.to_thread.run_sync(remote.kill)
                await wait_until(lambda: up.state == "down", f"the {kind} server marked down")
                seen["down_error"] = up.last_error
                seen["tools_down"] = sorted(name for name, _, _ in manager.tools())
                await wait_until(lambda: tool not in gateway.view.tools, "its tools out of the catalogue")
                seen["down"] = text(await gateway.forward_call({"name": tool, "arguments": {"message": "x"}}, _Call()))
                await anyio.to_thread.run_sync(remote.start)
                await wait_until(lambda: up.state == "up" and tool in gateway.view.tools, f"the {kind} server back")
                seen["again"] = await call()
                seen["restarts"] = up.restarts
                tg.cancel_scope.cancel()
            return seen

        seen = anyio.run(main)
    finally:
        remote.kill()
        beside.kill()
    assert seen["before"] == (f"{kind}: hi", False)
    assert seen["down_error"].startswith(f"upstream {kind!r} stopped answering: ") and "\n" not in seen["down_error"]
    assert seen["tools_down"] == [f"{other}_echo"]  # the other server's tools stay
    assert seen["down"][1] and seen["down"][0].startswith(("upstream_down", "not_exposed")), seen["down"]
    assert seen["again"] == (f"{kind}: hi", False)
    assert seen["restarts"] >= 1
    assert any(line.startswith(f"upstream {kind!r} stopped answering") and "restart 1 in 0.5 s" in line
               for line in logged), logged
    assert any(line.startswith(f"upstream {kind!r}: up, 1 tools") and "back" in line for line in logged), logged
    assert not any(SERVER_TOKEN in line for line in logged)
    noisy = [r.getMessage() for r in caplog.records if r.name.startswith("mcp.client") and r.levelno >= logging.WARNING]
    assert noisy == []


def test_every_remote_server_refusing_is_one_start_up_error(remotes, tmp_path, monkeypatch):
    """With nothing to serve, the gateway's start-up error is the first server's one line."""
    monkeypatch.setenv(AUTH_VAR, "Bearer not-the-token")
    configs = load_servers(write_servers(tmp_path, {"only": remote_entry(remotes["sse"])}))

    async def alone() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(UpstreamManager(configs, startup_timeout=GUARD_S, log=lambda _: None).run)

    with pytest.raises(BaseException) as info:
        anyio.run(alone)
    exc = leaf(info.value)
    assert isinstance(exc, UpstreamError) and "'only'" in str(exc) and "HTTP 401" in str(exc) and "not-the-token" not in str(exc)
