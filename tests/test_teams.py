"""One gateway for many agents: the clients file, named policies, and a client's policy at
every step (find_tools, the call-time check, confirmation, the audit line).

The end-to-end tests run ``riskrank mcp`` over streamable HTTP as a team would (the bundled
encoder, a real FastMCP upstream over stdio, the SDK's own client), with the clients file and
a policy file of three named policies."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from riskrank.serving.gateway import clients as clients_mod
from riskrank.serving.gateway.clients import ClientBook, add_client, parse_clients, token_digest
from riskrank.serving.gateway.config import ConfigError, Policies, load_policies
from riskrank.serving.gateway.policy import Policy
from team_support import (
    GUARD_S,
    HERE,
    POLICIES,
    ROLES,
    TOKENS,
    gateway_env,
    run_as,
    start_gateway,
    write_files,
)

BEARER = "shared-bearer-0123456789abcdef"


def _policies() -> Policies:
    return Policies({n: Policy() for n in POLICIES["policies"]}, "read-only")


def _digest(name: str) -> str:
    return token_digest(TOKENS[name])


# -- the files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("data", "message"), [
    ({"clients": {"a": {"token_sha256": "abc", "policy": "read-only"}}}, "is not \"sha256:\" and 64"),
    ({"clients": {"a": {"token": "x" * 20, "policy": "read-only"}}}, "never written in clear"),
    ({"clients": {"a": {"token_sha256": token_digest("changeme"), "policy": "read-only"}}}, "well-known weak"),
    ({"clients": {"a": {"token_sha256": token_digest(TOKENS["alice"]), "policy": "read-only"},
                  "b": {"token_sha256": token_digest(TOKENS["alice"]), "policy": "on-call"}}}, "same token as client 'a'"),
    ({"clients": {"a": {"token_sha256": token_digest(BEARER), "policy": "read-only"}}}, "same token as the bearer token"),
    ({"clients": {"a": {"token_sha256": token_digest(TOKENS["alice"]), "policy": "root"}}}, "no policy named 'root'"),
    ({"clients": {"a b": {"token_sha256": token_digest(TOKENS["alice"]), "policy": "read-only"}}}, "a client name is"),
    ({"clients": {}, "extra": 1}, "unknown key(s) ['extra']"),
    ({"oauth": {"issuer": "x", "default_policy": "root"}}, "oauth.default_policy"),
])
def test_a_clients_file_that_cannot_be_trusted_is_refused(data, message):
    with pytest.raises(ConfigError, match=None) as err:
        parse_clients(data, "clients.json", _policies(), reserved={token_digest(BEARER): "bearer token"})
    assert message in str(err.value) and str(err.value).startswith("clients.json")


def test_duplicate_client_names_are_refused_at_start(tmp_path):
    path = tmp_path / "clients.json"
    entry = json.dumps({"token_sha256": _digest("alice"), "policy": "read-only"})
    path.write_text('{"clients": {"a": ' + entry + ', "a": ' + entry + "}}")
    with pytest.raises(ConfigError, match="duplicate"):
        ClientBook(path, _policies())


def test_named_policies_are_read_strictly(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(POLICIES))
    got = load_policies(path)
    assert got.default == "read-only" and got.get("on-call").confirm_level == 3 and got.get(None).max_level == 2
    assert "policy 'operator'" in got.get("operator").source
    with pytest.raises(ConfigError, match="no policy named 'root'"):
        got.get("root")
    for bad, message in [({**POLICIES, "default": "root"}, "default: must name one of the policies"),
                         ({"policies": {"a": {"max_level": 9}}, "default": "a"}, "policy 'a'"),
                         ({"policies": {"a": {}, "b": {"first_seen": "quarantine"}}, "default": "a"}, "apply to the whole gateway"),
                         ({"policies": {}, "default": "a"}, "non-empty"),
                         ({"policies": {"a": {}}, "default": "a", "max_level": 2}, "unknown key(s) ['max_level']")]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=None) as err:
            load_policies(path)
        assert message in str(err.value), (bad, str(err.value))
    path.write_text(json.dumps({"max_level": 3}))  # one flat policy, as before
    assert load_policies(path).default_policy.max_level == 3


def test_tokens_rotate_and_are_revoked_without_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(clients_mod, "RELOAD_EVERY_S", 0.0)
    path = tmp_path / "clients.json"
    old = add_client(path, "pager", "on-call", policies=_policies())
    assert len(old) >= 32 and old not in path.read_text() and token_digest(old) in path.read_text()
    lines: list[str] = []
    book = ClientBook(path, _policies(), log=lines.append)
    assert book.lookup(old).name == "pager" and book.lookup(old).policy == "on-call"
    assert book.lookup("pager-token-guess-0123456789") is None
    new = add_client(path, "pager", "", rotate=True, policies=_policies())
    assert book.lookup(old) is not None and book.lookup(new).name == "pager"  # both during the rotation
    data = json.loads(path.read_text())
    data["clients"]["pager"]["token_sha256"] = [token_digest(new)]  # the old one revoked
    path.write_text(json.dumps(data, indent=1))
    assert book.lookup(old) is None and book.lookup(new) is not None
    path.write_text("{ not json")  # a broken file is not half-trusted: nothing passes until it is fixed
    assert book.lookup(new) is None and any("every client token is refused" in x for x in lines)
    path.write_text(json.dumps(data))
    assert book.lookup(new) is not None
    with pytest.raises(ConfigError, match="exists; --rotate"):
        add_client(path, "pager", "on-call")
    with pytest.raises(ConfigError, match="at least 16"):
        add_client(path, "bob", "on-call", token="short")
    with pytest.raises(ConfigError, match="low-variety"):
        add_client(path, "bob", "on-call", token="ab" * 12)
    # a name the file cannot hold, or another file given as the clients file: refused, nothing written
    for bad in ("", "a b/../"):
        with pytest.raises(ConfigError, match="a client name is 1 to 64"):
            add_client(path, bad, "on-call")
    servers = tmp_path / "servers.json"
    servers.write_text('{"mcpServers": {"x": {"command": "echo"}}}')
    before = servers.read_bytes()
    with pytest.raises(ConfigError, match=r"not a clients file .*mcpServers.*nothing was written"):
        add_client(servers, "eve", "std")
    assert servers.read_bytes() == before


def test_the_clients_command_adds_and_lists(tmp_path):
    from click.testing import CliRunner

    from riskrank.cli import main

    path, pol = tmp_path / "clients.json", tmp_path / "policy.json"
    pol.write_text(json.dumps(POLICIES))
    runner = CliRunner()
    out = runner.invoke(main, ["clients", "add", "ci-bot", "--clients", str(path), "--policy", "read-only", "--policies", str(pol)])
    assert out.exit_code == 0, out.output
    token = out.stdout.strip().splitlines()[-1]
    assert token_digest(token) in path.read_text()
    bad = subprocess.run([sys.executable, "-c", "from riskrank.cli import entry; entry()", "clients", "add", "x", "--clients",
                          str(path), "--policy", "root", "--policies", str(pol)], capture_output=True, text=True, timeout=GUARD_S)
    assert bad.returncode == 2 and "no policy named 'root'" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    out = runner.invoke(main, ["clients", "list", "--clients", str(path), "--policies", str(pol)])
    assert out.exit_code == 0 and "ci-bot\tread-only\t1 token(s)" in out.output


# -- one gateway, three clients -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def team(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("team")
    write_files(tmp)
    audit = tmp / "audit.jsonl"
    proc, url, _ = start_gateway(tmp, "--audit-log", str(audit), env=gateway_env(RISKRANK_TOKEN=BEARER))
    yield url, audit, tmp
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=GUARD_S)


@pytest.mark.mcp_sdk
def test_each_client_gets_its_own_policy_at_every_step(team):
    url, audit, _ = team
    task = {"task": "restart the api service, or drop its database", "k": 5}
    calls = [("find_tools", task), ("call_tool", {"name": "restart_service", "arguments": {"service": "api"}}),
             ("call_tool", {"name": "drop_database", "arguments": {"name": "api"}}),
             ("call_tool", {"name": "list_services", "arguments": {}})]
    seen = {n: run_as(url, TOKENS[n], calls) for n in ("ci-bot", "pager", "alice")}
    shown = {n: {t["name"]: t["risk_level"] for t in out[0]["tools"]} for n, out in seen.items()}
    for n, out in seen.items():
        assert out[0]["policy"]["name"] == ROLES[n]
        assert all(lvl <= POLICIES["policies"][ROLES[n]]["max_level"] for lvl in shown[n].values()), (n, shown[n])
    assert "restart_service" not in shown["ci-bot"] and "drop_database" not in shown["pager"]
    # the read-only bot and the pager cannot call what their policy never offers
    # (and the refusal says so: no search would show them)
    assert seen["ci-bot"][1]["error"].startswith("above_max_level: 'restart_service' is risk level 3 and is never offered")
    assert seen["pager"][2]["error"].startswith("above_max_level: 'drop_database'")
    assert seen["pager"][1] == {"text": "api restarted"}  # confirmed (elicitation), then run
    # the operator's policy (max 5) offers the drop when the rule filter ranks it; whatever it is shown, it can call
    if "drop_database" in shown["alice"]:
        assert "error" not in seen["alice"][2]
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    mine = [r for r in lines if r.get("client")]
    assert {r["client"] for r in mine} == set(seen)
    for r in mine:  # every line names the client and the policy it was decided under
        assert r["policy"] == ROLES[r["client"]] and r["session"].startswith(r["client"] + "/")
        if r["decision"] == "allowed":
            assert r["level"] <= POLICIES["policies"][r["policy"]]["max_level"]
    confirmed = [r for r in mine if r["decision"] == "allowed" and r["tool"] == "restart_service"]
    assert [r["client"] for r in confirmed] == ["pager"] and confirmed[0]["confirmed"] == "elicitation"


@pytest.mark.mcp_sdk
def test_the_shared_bearer_token_is_the_default_policy_and_strangers_get_401(team):
    url, _, _ = team
    out = run_as(url, BEARER, [("find_tools", {"task": "restart the api service", "k": 5})])
    assert out[0]["policy"]["name"] == "read-only"
    assert all(t["risk_level"] <= 2 for t in out[0]["tools"])
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    for auth in (None, "Bearer pager-token-0123456789abcdeX", "Basic " + TOKENS["pager"], f"Bearer {TOKENS['pager']}x"):
        headers = {"Accept": "application/json, text/event-stream", **({"Authorization": auth} if auth else {})}
        r = httpx.post(url, json=init, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", auth


@pytest.mark.mcp_sdk
def test_a_client_may_not_pick_a_policy_or_call_through_another_clients_session(team):
    """No request names a policy: an unknown find_tools argument is refused, and a session id
    presented with another client's token is that client's own (empty) exposure."""
    url, _, _ = team
    out = run_as(url, TOKENS["ci-bot"], [("find_tools", {"task": "restart the api", "policy": "operator"})])
    assert out[0]["error"].startswith("invalid_request") and "unknown argument(s) ['policy']" in out[0]["error"]


def _open_session(url: str, token: str) -> str:
    """An MCP session opened over plain HTTP by the client holding ``token``: its id."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    r = httpx.post(url, json=init, headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"},
                   follow_redirects=True)  # the 1.x SDK mounts the endpoint at /mcp/
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    done = httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                      headers=_headers(token, sid), follow_redirects=True)
    assert done.status_code == 202, done.text
    return sid


def _headers(token: str, sid: str) -> dict[str, str]:
    return {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}", "mcp-session-id": sid,
            "mcp-protocol-version": "2025-06-18"}


@pytest.mark.mcp_sdk
def test_another_clients_session_id_ends_takes_or_reaches_nothing(team):
    """The SDK keys a session by its id alone: a client holding another's id could end it,
    take its stream or call through it. It is answered as a session that does not exist."""
    url, _, _ = team
    sid = _open_session(url, TOKENS["bob"])
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    for method in ("DELETE", "GET", "POST"):
        r = httpx.request(method, url, headers=_headers(TOKENS["alice"], sid), json=ping if method == "POST" else None,
                          follow_redirects=True)
        assert r.status_code == 404 and r.json()["error"]["message"] == "Session not found", (method, r.text)
    r = httpx.post(url, json=ping, headers=_headers(TOKENS["bob"], sid), follow_redirects=True)
    assert r.status_code == 200, r.text  # the owner's session goes on
    assert httpx.delete(url, headers=_headers(TOKENS["bob"], sid), follow_redirects=True).status_code == 200


@pytest.mark.mcp_sdk
@pytest.mark.parametrize(("body", "status", "code", "message"), [
    ({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "x"}, 400, -32600,
     "tools/call: params must be a JSON object, got a string"),
    ({"jsonrpc": "2.0", "method": "notifications/x", "params": [1]}, 400, -32600, "params must be a JSON object, got an array"),
    ({"jsonrpc": "2.0", "id": {}, "method": "tools/list"}, 400, -32600, "id must be a string or an integer, got an object"),
    ({"jsonrpc": "1.0", "id": 5, "method": "tools/list"}, 400, -32600, 'jsonrpc must be "2.0"'),
    ({"jsonrpc": "2.0", "id": 6, "method": 5}, 400, -32600, "method must be a string"),
    ([{"jsonrpc": "2.0", "id": 7, "method": "ping"}], 400, -32600, "one JSON-RPC message (a JSON object), got an array"),
    ({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"arguments": {}}}, 200, -32602,
     "tools/call: params.name must be a string (the tool's name), got nothing"),
    ({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "find_tools", "arguments": "x"}}, 200, -32602,
     "tools/call: params.arguments must be a JSON object, got a string"),
    ({"jsonrpc": "2.0", "id": 10, "method": "resources/read", "params": {"uri": 5}}, 200, -32602,
     "resources/read: params.uri must be a string"),
    ({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "find_tools", "_meta": [1]}}, 200, -32602,
     "tools/call: params._meta must be a JSON object, got an array"),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "error": {"code": 1, "message": "x"}}, 400, -32600,
     "a response's id must be a string or an integer, got an object"),
])
def test_a_malformed_message_is_named_not_answered_with_the_sdks_validation_dump(team, body, status, code, message):
    """The SDKs answer a message they cannot validate with their validation library's whole
    report (every union member tried, with links) or "Invalid request parameters" and nothing
    more: the gateway names the field instead, and the session goes on."""
    url, _, _ = team
    sid = _open_session(url, TOKENS["alice"])
    r = httpx.post(url, json=body, headers=_headers(TOKENS["alice"], sid), follow_redirects=True)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and message in error["message"] and "pydantic" not in r.text, r.text
    assert r.json()["id"] == (body.get("id") if isinstance(body, dict) and isinstance(body.get("id"), int) else None)
    ping = httpx.post(url, json={"jsonrpc": "2.0", "id": 11, "method": "ping"}, headers=_headers(TOKENS["alice"], sid),
                      follow_redirects=True)
    assert ping.status_code == 200, ping.text


@pytest.mark.mcp_sdk
def test_a_malformed_call_without_a_session_is_the_sdks_to_answer(team):
    """Params are judged within a session only: without one the SDK's "Missing session ID"
    (400) stands; valid messages and responses to the server are the SDK's to read."""
    from riskrank.serving.mcp_compat import envelope_error

    url, _, _ = team
    bad = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"arguments": {}}}
    r = httpx.post(url, json=bad, headers={"Accept": "application/json, text/event-stream",
                                           "Authorization": f"Bearer {TOKENS['alice']}"}, follow_redirects=True)
    assert r.status_code == 400 and "session" in r.json()["error"]["message"].lower(), r.text
    # on 2026-07-28 there is no session id to miss: the field is named there too
    modern = httpx.post(url, json=bad, headers={"Accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
                                                "Authorization": f"Bearer {TOKENS['alice']}"}, follow_redirects=True)
    assert modern.json()["error"]["message"].startswith("tools/call: params.name must be a string"), modern.text
    assert envelope_error({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}) is None
    assert envelope_error({"jsonrpc": "2.0", "id": 1, "result": {}}) is None  # a response to the server
    assert envelope_error({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": None}) is None  # null is absent
    assert envelope_error({"jsonrpc": "2.0", "id": True, "method": "ping"})[0] == 400
    assert envelope_error({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None


@pytest.mark.mcp_sdk
def test_a_request_under_the_argument_bound_is_read_not_refused_as_too_large(team):
    """The documented bound is --max-argument-bytes (1 MiB): the HTTP gate must read a request
    holding arguments under it (it once stopped every request at 64 KiB)."""
    url, _, _ = team
    sid = _open_session(url, TOKENS["alice"])
    big = {"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"_meta": {"pad": "x" * 200_000}}}
    r = httpx.post(url, json=big, headers=_headers(TOKENS["alice"], sid), follow_redirects=True)
    assert r.status_code == 200, r.text[:300]

@pytest.mark.parametrize(("extra", "message"), [
    (("--insecure",), "--insecure and --clients contradict"),
])
def test_clients_flags_that_contradict_are_one_line_errors(tmp_path, extra, message):
    servers = {"mcpServers": {"ops": {"command": sys.executable, "args": [str(HERE / "team_upstream.py")]}}}
    (tmp_path / "servers.json").write_text(json.dumps(servers))
    (tmp_path / "clients.json").write_text(json.dumps({"clients": {}}))
    argv = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "mcp", "--config", str(tmp_path / "servers.json"),
            "--clients", str(tmp_path / "clients.json"), "--transport", "streamable-http", "--port", "0", *extra]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=GUARD_S)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    argv = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "mcp", "--config", str(tmp_path / "servers.json"),
            "--clients", str(tmp_path / "clients.json")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=GUARD_S)
    assert out.returncode == 2 and "add --transport streamable-http" in out.stderr, out.stderr


def test_oauth_tokens_name_the_client_and_bad_ones_are_401_with_one_log_line(tmp_path):
    """The resource-server role: an issuer's JWT names the client (its ``sub``) and its policy
    (a claim, else the default); expired, wrong-audience and unknown-policy tokens are 401s
    with one log line each; the protected-resource metadata says where to get a token."""
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from riskrank.serving.auth import Gate
    from test_server_support import ServerThread

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]}))
    issuer, audience = "https://id.example.com", "https://gw.example.com/mcp"
    (tmp_path / "clients.json").write_text(json.dumps({"clients": {}, "oauth": {
        "issuer": issuer, "audience": audience, "jwks": str(tmp_path / "jwks.json"), "policy_claim": "riskrank_policy",
        "default_policy": "read-only"}}))
    lines: list[str] = []
    book = ClientBook(tmp_path / "clients.json", _policies(), log=lines.append)
    identity = f"{issuer}#deploy-bot"

    async def echo(scope, receive, send):
        body = json.dumps(scope.get("riskrank.client")).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    def token(**over):
        claims = {"sub": "deploy-bot", "iss": issuer, "aud": audience, "exp": int(time.time()) + 300, **over}
        return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="RS256", headers={"kid": "k1"})

    with ServerThread(Gate(echo, token=None, clients=book, log=lines.append)) as srv:
        def get(tok):
            return httpx.get(srv.url + "/mcp", headers={"Authorization": f"Bearer {tok}"})

        assert get(token(riskrank_policy="on-call")).json() == {"name": identity, "policy": "on-call", "via": "oauth"}
        assert get(token()).json()["policy"] == "read-only"
        for bad, why in [(token(exp=int(time.time()) - 600), "expired"), (token(aud="https://other.example.com"), "audience"),
                         (token(riskrank_policy="root"), "'root'"), (token(iss="https://evil.example.com"), "issuer")]:
            before = len(lines)
            r = get(bad)
            assert r.status_code == 401 and 'resource_metadata="' in r.headers["www-authenticate"]
            assert len(lines) == before + 1 and "OAuth token refused" in lines[-1] and why in lines[-1], lines[-1]
            assert bad not in lines[-1]
        meta = httpx.get(srv.url + "/.well-known/oauth-protected-resource").json()
        assert meta["authorization_servers"] == [issuer] and meta["resource"].endswith("/mcp")


def _issuer(tmp_path, clients: dict):
    """A JWKS file, a clients file with ``clients`` and an issuer, and a token minter."""
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]}))
    issuer, audience = "https://id.example.com", "https://gw.example.com/mcp"
    (tmp_path / "clients.json").write_text(json.dumps({"clients": clients, "oauth": {
        "issuer": issuer, "audience": audience, "jwks": str(tmp_path / "jwks.json"), "default_policy": "read-only"}}))

    def token(sub: str) -> str:
        claims = {"sub": sub, "iss": issuer, "aud": audience, "exp": int(time.time()) + 300}
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})

    return issuer, token


def test_an_oauth_subject_that_shadows_a_client_is_refused_and_audited(tmp_path):
    """``sub: "ci"`` beside a clients-file ``ci`` (or one that reads as it: ``CI``, a Cyrillic
    ``с``): 401, one log line, and one audit line with the address, issuer and subject, never
    the token. The client's own token still works, as itself."""
    from riskrank.serving.auth import Gate
    from riskrank.serving.gateway.auditlog import AuditLog
    from test_server_support import ServerThread

    issuer, token = _issuer(tmp_path, {"ci": {"token_sha256": _digest("ci-bot"), "policy": "read-only"}})
    lines: list[str] = []
    audit = AuditLog(tmp_path / "audit.jsonl")
    book = ClientBook(tmp_path / "clients.json", _policies(), log=lines.append)

    async def echo(scope, receive, send):
        body = json.dumps(scope.get("riskrank.client")).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    with ServerThread(Gate(echo, token=None, clients=book, log=lines.append, audit=audit)) as srv:
        def get(tok):
            return httpx.get(srv.url + "/mcp", headers={"Authorization": f"Bearer {tok}"})

        for sub in ("ci", "CI", "\u0441i", "ci ", "\u3000ci", "cI"):  # blanks around it, a capital I for an i
            r = get(token(sub))
            assert r.status_code == 401, (sub, r.text)
        assert get(TOKENS["ci-bot"]).json() == {"name": "ci", "policy": "read-only", "via": "client"}
        assert get(token("deploy-bot")).json()["name"] == f"{issuer}#deploy-bot"
    audit.close()
    refused = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [r["subject"] for r in refused] == ["ci", "CI", "\u0441i", "ci ", "\u3000ci", "cI"]
    first = refused[0]
    assert (first["decision"], first["code"], first["issuer"], first["shadows"], first["address"]) == (
        "auth_refused", "identity_collision", issuer, "ci", "127.0.0.1")
    assert "reads as the clients-file client 'ci'" in first["reason"] and first["time"]
    assert not any(token("ci")[:40] in x for x in (tmp_path / "audit.jsonl").read_text().splitlines())
    assert sum("OAuth token refused" in x and "reads as the clients-file client" in x for x in lines) == 6


def test_oauth_identities_and_client_names_are_one_namespace_that_never_collides(tmp_path):
    """An OAuth identity is ISSUER#SUBJECT: no clients-file name can be one (the file refuses
    ':' and '/'), and every key that follows a caller carries the whole identity, so a
    session id presented under an OAuth token is never a client's session."""
    from riskrank.serving.gateway.clients import oauth_identity
    from riskrank.serving.mcp_compat import _session_key

    issuer, token = _issuer(tmp_path, {"deploy": {"token_sha256": _digest("ci-bot"), "policy": "read-only"}})
    book = ClientBook(tmp_path / "clients.json", _policies())
    ident = book.validate_jwt(token("deploy-bot"))
    assert (ident.name, ident.via) == (oauth_identity(issuer, "deploy-bot"), "oauth")
    with pytest.raises(ConfigError, match="a client name is"):
        parse_clients({"clients": {ident.name: {"token_sha256": _digest("alice"), "policy": "read-only"}}}, "c.json",
                      _policies())

    class Request:
        def __init__(self, who: dict, sid: str) -> None:
            self.scope, self.headers = {"riskrank.client": who}, {"mcp-session-id": sid}

    client = {"name": "deploy", "policy": "read-only", "via": "client"}
    keys = {_session_key(Request(w, "s-1"), False) for w in (client, ident.to_scope())}
    assert keys == {"deploy/http-s-1", f"{issuer}#deploy-bot/http-s-1"}


def test_a_client_opening_many_sessions_forgets_its_own_and_unknown_ids_fail_closed(monkeypatch):
    """The gate's table of who opened which MCP session is bounded: a flood of initializes
    pushes out the flooding client's own oldest, and an id the gate does not know (forgotten,
    or never opened through it) is answered as unknown, not passed to the SDK (which would
    serve whoever holds it)."""
    from riskrank.serving import auth

    monkeypatch.setattr(auth, "MAX_SESSION_OWNERS", 3)
    gate = auth.Gate(lambda *a: None, token=None)
    gate._note_session([(b"mcp-session-id", b"alice-1")], "alice")
    for i in range(10):
        gate._note_session([(b"mcp-session-id", f"bot-{i}".encode())], "ci-bot")
    assert gate._session_owner(b"alice-1", "alice") and not gate._session_owner(b"alice-1", "ci-bot")
    assert gate._session_owner(b"bot-9", "ci-bot") and not gate._session_owner(b"bot-0", "ci-bot")  # its own went
    assert not gate._session_owner(b"never-opened", "ci-bot") and gate._session_owner(None, "ci-bot")
    gate._forget_session(b"alice-1")
    assert not gate._session_owner(b"alice-1", "alice") and len(gate.session_owners) == 2


@pytest.mark.mcp_sdk
def test_sessions_the_gate_forgets_are_closed_in_the_sdk_too(monkeypatch):
    """A session pushed out of the gate's owners' table is unreachable (404), and the SDK is
    told to end it: it used to keep every one until it idled for 30 minutes (770 MB after
    4,100 initializes, and the SDK's own cap of 10,000 sessions then refuses every client)."""
    import asyncio
    import gc
    import threading
    import time

    from mcp.server.streamable_http import StreamableHTTPServerTransport

    from riskrank.serving import auth, mcp_compat
    from riskrank.serving.listen import bind_socket, uvicorn_server

    async def no_tools():
        return []

    async def no_call(name, arguments, call):
        raise LookupError(name)

    monkeypatch.setattr(auth, "MAX_SESSION_OWNERS", 3)
    server = mcp_compat.build_server("t", "0", None, mcp_compat.Handlers(list_tools=no_tools, call_tool=no_call))
    app = auth.Gate(mcp_compat.watch_callers(mcp_compat.checked_envelopes(mcp_compat.streamable_http_app(server, "127.0.0.1"))),
                    token=None)
    sock = bind_socket("127.0.0.1", 0)
    srv = uvicorn_server(app, sock, "error", lifespan="on")
    srv.install_signal_handlers = lambda: None  # uvicorn < 0.29
    thread = threading.Thread(target=lambda: asyncio.run(srv.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.02)

    def live() -> int:
        gc.collect()
        return sum(isinstance(o, StreamableHTTPServerTransport) and not o.is_terminated for o in gc.get_objects())

    try:
        url = "http://{}:{}/mcp".format(*sock.getsockname()[:2])
        sids = [_open_session(url, "x") for _ in range(8)]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        held = [httpx.post(url, json=ping, headers=_headers("x", s), follow_redirects=True).status_code for s in sids]
        assert held == [404] * 5 + [200] * 3, held  # the oldest five are forgotten; the newest three answer
        deadline = time.monotonic() + GUARD_S
        while live() > 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live() == 3
    finally:
        srv.should_exit = True
        thread.join(10)


def test_a_forgotten_session_with_a_request_in_flight_is_closed_when_it_ends(monkeypatch):
    """Closing a forgotten session under a call in progress (or a held question, or an open
    event stream) would cancel that caller's work, not only refuse its next request: the
    close waits until its last request ends."""
    import anyio

    from riskrank.serving import auth

    monkeypatch.setattr(auth, "MAX_SESSION_OWNERS", 1)
    deletes: list[bytes] = []
    release = anyio.Event()
    opened = iter([b"s-1", b"s-2"])

    async def app(scope, receive, send):
        sid = dict(scope["headers"]).get(b"mcp-session-id")
        if scope["method"] == "DELETE":
            deletes.append(sid)
        elif sid is None:
            headers = [(b"mcp-session-id", next(opened))]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        elif sid == b"s-1":
            await release.wait()  # a long call of the first session
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    gate = auth.Gate(app, token=None)

    async def request(sid: bytes | None) -> None:
        headers = [(b"content-type", b"application/json"), *([(b"mcp-session-id", sid)] if sid else [])]
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
        messages = iter([{"type": "http.request", "body": b"{}", "more_body": False}])

        async def receive():
            return next(messages, {"type": "http.disconnect"})

        async def send(message):
            return None

        await gate(scope, receive, send)

    async def main() -> None:
        await request(None)  # opens s-1
        async with anyio.create_task_group() as tg:
            tg.start_soon(request, b"s-1")  # in flight
            await anyio.sleep(0.05)
            await request(None)  # opens s-2: s-1 is forgotten, but busy
            assert deletes == []
            release.set()
        assert deletes == [b"s-1"]  # closed once its call ended

    anyio.run(main)
