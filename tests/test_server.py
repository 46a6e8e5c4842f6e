"""The HTTP service over real HTTP on loopback (uvicorn in a thread of the test process):
auth, every limit, malformed input, concurrency, hot swap under load, the OpenAPI document.

The retriever runs on HashEncoder (tests/test_server_support.py), so these tests measure the
service, not a model; tests/test_server_cli.py runs `riskrank serve` with the real encoder."""

from __future__ import annotations

import collections
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from riskrank.catalogue import ArtefactSpec, LiveCatalogue
from riskrank.datasets.demo import demo_registry_path
from riskrank.encoder import BatchingEncoder
from riskrank.errors import RiskrankError
from riskrank.fileio import show
from riskrank.serving.auth import check_bind, read_token
from riskrank.serving.http import create_app, openapi_schema
from riskrank.serving.requests import Limits
from test_server_support import (
    ADMIN_TOKEN,
    TOKEN,
    HashEncoder,
    ServerThread,
    make_checkpoint,
    write_mcp_registry,
)

DEMO = str(demo_registry_path())
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return str(make_checkpoint(tmp_path_factory.mktemp("ck") / "ck"))


@pytest.fixture(scope="module")
def service(checkpoint) -> LiveCatalogue:
    return LiveCatalogue.from_spec(ArtefactSpec(DEMO, checkpoint, mode="rule"), HashEncoder())


@pytest.fixture(scope="module")
def server(service):
    with ServerThread(create_app(service, token=TOKEN, admin_token=ADMIN_TOKEN)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def wait_for(cond, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "timed out waiting"
        time.sleep(0.01)


def error(resp: httpx.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code, body
    assert "Traceback" not in resp.text
    return body["error"]


# -- probes and auth --------------------------------------------------------------------------------
def test_probes_and_schema_are_public(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready", "generation": 1}
    assert client.get("/openapi.json").json()["info"]["title"] == "riskrank"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": TOKEN}, {"Authorization": f"Bearer {TOKEN}x"}])
@pytest.mark.parametrize("method,path", [("POST", "/v1/retrieve"), ("GET", "/v1/tools/read_file"), ("GET", "/v1/tools/no_such_tool"),
                                         ("GET", "/v1/info"), ("GET", "/v1/no/such/path"), ("POST", "/v1/admin/reload")])
def test_missing_or_wrong_token_is_401_everywhere(client, headers, method, path):
    resp = client.request(method, path, headers=headers, json={"task": "delete my files"})
    err = error(resp, 401, "unauthorized")
    assert resp.headers["www-authenticate"].startswith("Bearer")
    # The same answer for an existing tool, a missing one and a missing path: nothing leaks.
    assert err["message"] == "missing or invalid bearer token"
    assert "read_file" not in resp.text


def test_admin_endpoints_need_the_admin_token(client):
    error(client.post("/v1/admin/reload", headers=AUTH, json={}), 401, "unauthorized")
    error(client.get("/v1/admin/reload", headers=AUTH), 401, "unauthorized")
    assert client.get("/v1/admin/reload", headers=ADMIN).status_code == 200
    # and the admin token opens only the admin endpoints
    error(client.post("/v1/retrieve", headers=ADMIN, json={"task": "read a file"}), 401, "unauthorized")


def test_without_an_admin_token_there_are_no_admin_endpoints():
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    with ServerThread(create_app(svc, token=TOKEN)) as s, httpx.Client(base_url=s.url) as c:
        for method in ("GET", "POST"):
            error(c.request(method, "/v1/admin/reload", headers=AUTH, json={}), 404, "not_found")
        assert c.get("/v1/info", headers=AUTH).json()["generation"] == 1  # nothing was swapped
        assert "/v1/admin/reload" not in c.get("/openapi.json").json()["paths"]


def test_an_admin_token_equal_to_the_bearer_token_is_refused(monkeypatch, capsys):
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    with pytest.raises(RiskrankError, match="equals the bearer token"):
        create_app(svc, token=TOKEN, admin_token=TOKEN)
    from riskrank.cli import run

    monkeypatch.setenv("RISKRANK_TOKEN", TOKEN)
    monkeypatch.setenv("RISKRANK_ADMIN_TOKEN", TOKEN)
    monkeypatch.setattr("sys.argv", ["riskrank", "serve", "--port", "0"])
    assert run() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "equals the bearer token" in err


def test_bind_rules(tmp_path, monkeypatch):
    check_bind("127.0.0.1", None, True)
    check_bind("::1", None, True)
    check_bind("localhost", None, True)
    check_bind("0.0.0.0", TOKEN, False)
    with pytest.raises(RiskrankError, match="loopback"):
        check_bind("0.0.0.0", None, True)
    with pytest.raises(RiskrankError, match="loopback"):
        check_bind("192.168.1.5", TOKEN, True)
    with pytest.raises(RiskrankError, match="no bearer token"):
        check_bind("127.0.0.1", None, False)
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    assert read_token(str(f), None) == TOKEN
    f.write_text("short")
    with pytest.raises(RiskrankError, match="at least 16"):
        read_token(str(f), None)
    monkeypatch.setenv("RR_TEST_TOKEN", TOKEN)
    assert read_token(None, "RR_TEST_TOKEN") == TOKEN
    monkeypatch.delenv("RR_TEST_TOKEN")
    assert read_token(None, "RR_TEST_TOKEN") is None
    with pytest.raises(RiskrankError, match="cannot read"):
        read_token(str(tmp_path / "missing"), None)


def test_cli_refuses_unsafe_binds(monkeypatch, capsys):
    from riskrank.cli import run

    monkeypatch.delenv("RISKRANK_TOKEN", raising=False)
    for argv, msg in [(["serve", "--host", "0.0.0.0", "--insecure"], "only on a loopback"),
                      (["serve", "--port", "0"], "no bearer token")]:
        monkeypatch.setattr("sys.argv", ["riskrank", *argv])
        assert run() == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err


# -- retrieval ------------------------------------------------------------------------------------------
def test_retrieve_matches_the_pipeline(client, service):
    resp = client.post("/v1/retrieve", headers=AUTH, json={"task": "delete the old log files on the server", "k": 5})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    direct = service.active.retriever.retrieve("delete the old log files on the server", k=5)
    assert [t["name"] for t in body["tools"]] == [t.name for t in direct.tools]
    assert body["mode"] == "core+graph+rule" and body["generation"] == 1
    for t in body["tools"]:
        assert {"score", "f_rel", "f_risk", "risk_level", "effective_level", "risk_provenance", "permissions", "description"} <= set(t)
        assert t["risk_provenance"] == "audited"
    assert body["deferred"] and all(d["reasons"] for d in body["deferred"])
    # The demo registry holds far more than k compliant tools: no fallback is needed, so none
    # may appear, and the risk cap holds on the whole list.
    assert body["fallback"] == []
    assert sum(t["effective_level"] >= 3 for t in body["tools"]) <= 1


@pytest.mark.parametrize("req,mode", [({"mode": "dense"}, "dense"), ({"mode": "dense+rule"}, "dense+rule"), ({"mode": "core"}, "core"),
                                      ({"mode": "graph", "alpha": 0.3}, "core+graph"), ({"mode": "rule", "risk_source": "predicted"}, "core+graph+rule")])
def test_retrieve_modes(client, req, mode):
    resp = client.post("/v1/retrieve", headers=AUTH, json={"task": "send an email to my team", "k": 3, "lambda": 0.5, **req})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["mode"] == mode and body["lambda"] == 0.5
    if req.get("risk_source") == "predicted":
        # The untrained head predicts most tools risky: the safe fill does not top the list
        # up with them, so fewer than k come back, with at most one risky tool.
        assert body["fill"] == "safe" and 1 <= len(body["tools"]) <= 3
        assert sum(t["predicted_level"] >= 3 for t in body["tools"]) <= 1
    else:
        assert len(body["tools"]) == 3
    if "alpha" in req:
        assert body["alpha"] == 0.3


def test_tool_spec(client):
    spec = client.get("/v1/tools/delete_file", headers=AUTH).json()
    assert spec["name"] == "delete_file" and spec["risk_level"] >= 3 and spec["risk_provenance"] == "audited"
    assert spec["input_schema"]["type"] == "object" and spec["predicted_level"] in range(1, 6)
    error(client.get("/v1/tools/no_such_tool", headers=AUTH), 404, "unknown_tool")
    info = client.get("/v1/info", headers=AUTH).json()
    assert info["n_tools"] == 98 and "rule" in info["modes"] and info["limits"]["max_k"] == 100


def test_info_counts_the_served_levels_by_provenance(tmp_path):
    """/v1/info counts the level every response serves (not only audited ones), per provenance:
    an unaudited MCP registry with keyword levels and one audited tool."""
    from test_server_support import write_mcp_registry

    path = write_mcp_registry(tmp_path / "tools.json")
    data = json.loads(path.read_text())
    data["tools"][0]["risk_level"] = 2  # one audited tool among unaudited ones
    path.write_text(json.dumps(data))
    svc = LiveCatalogue.from_spec(ArtefactSpec(str(path), mode="dense+rule", fill_levels="keyword"), HashEncoder())
    with ServerThread(create_app(svc, token=TOKEN)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        info = c.get("/v1/info", headers=AUTH).json()
        specs = [c.get(f"/v1/tools/{t['name']}", headers=AUTH).json() for t in data["tools"]]
    served = collections.Counter(f"L{t['risk_level']}" for t in specs)
    assert info["risk_levels"] == {f"L{k}": served[f"L{k}"] for k in range(1, 6)} and sum(info["risk_levels"].values()) == len(specs)
    by = collections.defaultdict(collections.Counter)
    for t in specs:
        by[t["risk_provenance"]][f"L{t['risk_level']}"] += 1
    assert set(info["risk_levels_by_provenance"]) == set(by) == {"audited", "keyword"}
    for prov, counts in info["risk_levels_by_provenance"].items():
        assert counts == {f"L{k}": by[prov][f"L{k}"] for k in range(1, 6)}
    assert info["risk_provenance"] == {p: sum(c.values()) for p, c in by.items()}


# -- limits and malformed input ---------------------------------------------------------------------------
@pytest.mark.parametrize("body,status,code", [
    ({"task": "x" * 4001}, 422, "task_too_long"),
    ({"task": "   "}, 422, "task_empty"),
    ({"task": ""}, 422, "task_empty"),
    ({"task": "\u200b\u200b"}, 422, "task_empty"),
    ({"task": "\u0000"}, 422, "task_empty"),
    ({}, 422, "invalid_request"),
    ({"task": 42}, 422, "invalid_request"),
    ({"task": "ok", "k": 0}, 422, "k_out_of_range"),
    ({"task": "ok", "k": 101}, 422, "k_out_of_range"),
    ({"task": "ok", "k": "5"}, 422, "invalid_request"),
    ({"task": "ok", "k": 2.5}, 422, "invalid_request"),
    ({"task": "ok", "k": True}, 422, "invalid_request"),
    ({"task": "ok", "lambda": -0.1}, 422, "lambda_out_of_range"),
    ({"task": "ok", "lambda": 10.5}, 422, "lambda_out_of_range"),
    ({"task": "ok", "lambda": "0.1"}, 422, "invalid_request"),
    ({"task": "ok", "alpha": 1.5}, 422, "alpha_out_of_range"),
    ({"task": "ok", "mode": "yolo"}, 422, "invalid_mode"),
    ({"task": "ok", "risk_source": "vibes"}, 422, "invalid_risk_source"),
    ({"task": "ok", "top_k": 3}, 422, "unknown_field"),
])
def test_request_limits(client, body, status, code):
    error(client.post("/v1/retrieve", headers=AUTH, json=body), status, code)


@pytest.mark.parametrize("raw,ctype,status,code", [
    (b'{"task": "x",', "application/json", 400, "malformed_json"),
    (b"not json at all", "application/json", 400, "malformed_json"),
    (b'{"task": "x", "lambda": NaN}', "application/json", 422, "lambda_out_of_range"),
    (b'["task"]', "application/json", 400, "malformed_json"),
    (b'"task"', "application/json", 400, "malformed_json"),
    (b"", "application/json", 400, "malformed_json"),
    (b"task=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    (b'{"task": "x"}', "text/plain", 415, "unsupported_media_type"),
    (b'{"task": "x", "lambda": 1e999}', "application/json", 422, "lambda_out_of_range"),
    (b'{"task": "x", "k": NaN}', "application/json", 422, "k_out_of_range"),
    (b'{"task": "x", "k": Infinity}', "application/json", 422, "k_out_of_range"),
])
def test_malformed_bodies(client, raw, ctype, status, code):
    error(client.post("/v1/retrieve", headers={**AUTH, "content-type": ctype}, content=raw), status, code)


def test_body_size_limit(client, server):
    big = json.dumps({"task": "x" * 70_000}).encode()
    error(client.post("/v1/retrieve", headers={**AUTH, "content-type": "application/json"}, content=big), 413, "body_too_large")

    # Chunked, no Content-Length: the limit holds while the body streams in.
    def chunks():
        for _ in range(20):
            yield b" " * 8192

    resp = client.post("/v1/retrieve", headers={**AUTH, "content-type": "application/json"}, content=chunks())
    error(resp, 413, "body_too_large")
    # A raw request that lies about its length is refused before the body is read.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(f"POST /v1/retrieve HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 999999999\r\n\r\n{".encode())
        s.settimeout(10)
        raw = b""
        while b"body_too_large" not in raw:
            chunk = s.recv(4096)
            if not chunk:
                break
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 413") and b"body_too_large" in raw


def test_routing_errors_are_json(client):
    error(client.get("/v1/retrieve", headers=AUTH), 405, "method_not_allowed")
    error(client.get("/v1/nothing/here", headers=AUTH), 404, "not_found")


@pytest.mark.parametrize("mode", ["core+graph+context", "core+graph+context+rule"])
def test_context_modes_explain_the_need(tmp_path, mode):
    ck = make_checkpoint(tmp_path / "ck", need=True)
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO, str(ck), mode="rule"), HashEncoder())
    with ServerThread(create_app(svc, token=TOKEN)) as s, httpx.Client(base_url=s.url) as c:
        resp = c.post("/v1/retrieve", headers=AUTH, json={"task": "delete the old log files", "k": 5, "mode": mode})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["mode"] == mode and 0 <= body["need"] <= 1
        assert set(body["context"]) >= {"need", "threshold", "margin", "lambda", "risk_cap", "admitted", "best_safe"}
        risky = [t for t in body["tools"] if t["predicted_level"] >= 3]
        cap = body["context"]["risk_cap"]  # None: no rule filter, no cap
        assert (cap is not None and len(risky) <= cap) or all(t["context"] for t in risky)
        assert all(d["context"] for d in body["deferred"] if "context" in d["reasons"])


def test_context_modes_unavailable_without_a_need_head(checkpoint):
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO, checkpoint, mode="rule"), HashEncoder())
    assert "core+graph+context" not in svc.active.modes()
    with ServerThread(create_app(svc, token=TOKEN)) as s, httpx.Client(base_url=s.url) as c:
        error(c.post("/v1/retrieve", headers=AUTH, json={"task": "x", "mode": "core+graph+context"}), 422, "mode_unavailable")
        assert c.post("/v1/retrieve", headers=AUTH, json={"task": "x", "mode": "core+graph+rule"}).status_code == 200


def test_mode_unavailable_without_checkpoint():
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    with ServerThread(create_app(svc, token=TOKEN)) as s, httpx.Client(base_url=s.url) as c:
        assert c.post("/v1/retrieve", headers=AUTH, json={"task": "delete a file", "mode": "dense+rule"}).status_code == 200
        for body in ({"task": "x", "mode": "core"}, {"task": "x", "mode": "rule"}, {"task": "x", "risk_source": "predicted"}):
            error(c.post("/v1/retrieve", headers=AUTH, json=body), 422, "mode_unavailable")


def test_timeout_gives_504():
    """A request held in the encoder (a gate nobody opens) outlives the timeout: a 504,
    deterministically, however fast the machine."""
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    inner = svc.encoder.inner
    with ServerThread(create_app(svc, limits=Limits(timeout_s=0.3), token=TOKEN)) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        inner.gate = threading.Event()
        try:
            error(c.post("/v1/retrieve", headers=AUTH, json={"task": "slow one"}), 504, "timeout")
        finally:
            inner.gate.set()  # the abandoned worker thread finishes


def test_overload_gives_503_with_retry_after():
    limits = Limits(timeout_s=60, max_inflight=2)
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    inner = svc.encoder.inner
    app = create_app(svc, limits=limits, token=TOKEN)
    state = app.fastapi.state.riskrank
    with ServerThread(app) as s, httpx.Client(base_url=s.url, timeout=60) as c, ThreadPoolExecutor(2) as pool:
        inner.gate = threading.Event()
        held = [pool.submit(c.post, "/v1/retrieve", headers=AUTH, json={"task": f"held {i}"}) for i in range(2)]
        wait_for(lambda: state.inflight == 2)
        resp = c.post("/v1/retrieve", headers=AUTH, json={"task": "one too many"})
        error(resp, 503, "overloaded")
        assert resp.headers["retry-after"] == "1"
        inner.gate.set()
        assert [f.result().status_code for f in held] == [200, 200]
        assert state.inflight == 0
        assert c.post("/v1/retrieve", headers=AUTH, json={"task": "after"}).status_code == 200


def test_internal_errors_hide_their_details():
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    with ServerThread(create_app(svc, token=TOKEN)) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        def boom(*a, **kw):
            raise RuntimeError("secret internal detail")

        svc.active.retriever.retrieve_many = boom  # what the server calls (batched)
        resp = c.post("/v1/retrieve", headers=AUTH, json={"task": "anything"})
        err = error(resp, 500, "internal_error")
        assert "secret" not in err["message"]


# -- concurrency and hot swap ---------------------------------------------------------------------------
def test_50_concurrent_clients(server, service):
    tasks = [f"task {i}: " + ["delete old files", "check the weather", "send money to alice", "run a shell script"][i % 4] for i in range(50)]
    expected = {t: [x.name for x in service.active.retriever.retrieve(t, k=5).tools] for t in tasks}
    barrier = threading.Barrier(50)

    def one(task: str) -> list:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            barrier.wait()
            out = []
            for _ in range(2):
                r = c.post("/v1/retrieve", headers=AUTH, json={"task": task, "k": 5})
                out.append((r.status_code, [t["name"] for t in r.json()["tools"]] if r.status_code == 200 else r.text))
            return out

    with ThreadPoolExecutor(50) as pool:
        results = dict(zip(tasks, pool.map(one, tasks), strict=True))
    for task, outs in results.items():
        for status, names in outs:
            assert status == 200, names
            assert names == expected[task]


def test_reload_during_load(checkpoint, tmp_path):
    reg_b = write_mcp_registry(tmp_path / "b.json")
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO, checkpoint, mode="rule"), HashEncoder(), reload_dirs=(str(tmp_path),))
    names_a = set(svc.active.registry.names)
    names_b = {t["name"] for t in json.loads(reg_b.read_text())["tools"]}
    stop = threading.Event()
    seen: list[tuple[int, int, set]] = []

    def hammer(url: str, i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            while not stop.is_set():
                r = c.post("/v1/retrieve", headers=AUTH, json={"task": f"remove notes {i} {time.time()}", "k": 3})
                body = r.json()
                seen.append((r.status_code, body.get("generation", -1), {t["name"] for t in body.get("tools", [])}))

    with ServerThread(create_app(svc, token=TOKEN, admin_token=ADMIN_TOKEN)) as s, httpx.Client(base_url=s.url, timeout=60) as c:
        workers = [threading.Thread(target=hammer, args=(s.url, i)) for i in range(12)]
        for w in workers:
            w.start()
        wait_for(lambda: len(seen) >= 20)
        r = c.post("/v1/admin/reload", headers=ADMIN, json={"registry": str(reg_b), "checkpoint": None, "mode": "dense+rule", "fill_levels": "keyword"})
        assert r.status_code == 200, r.text
        assert r.json()["generation"] == 2 and r.json()["n_tools"] == 5
        n = len(seen)
        wait_for(lambda: len(seen) >= n + 20)
        # Bad artefacts: the error comes back, generation 2 keeps serving.
        bad = tmp_path / "bad.json"
        bad.write_text('{"tools": [{"name": "x", "description": 3}]}')
        err = error(c.post("/v1/admin/reload", headers=ADMIN, json={"registry": str(bad)}), 422, "invalid_registry")
        assert "generation 2 still serving" in err["message"]
        error(c.post("/v1/admin/reload", headers=ADMIN, json={"checkpoint": str(tmp_path)}), 422, "invalid_checkpoint")
        error(c.post("/v1/admin/reload", headers=ADMIN, json={"mode": "rule"}), 422, "invalid_input")
        error(c.post("/v1/admin/reload", headers=ADMIN, json={"registry": 5}), 422, "invalid_request")
        n = len(seen)
        wait_for(lambda: len(seen) >= n + 20)
        stop.set()
        for w in workers:
            w.join()
        assert c.get("/readyz").json()["generation"] == 2
        status = c.get("/v1/admin/reload", headers=ADMIN).json()
        assert status["state"] == "failed" and status["error"]["code"] == "invalid_input"
    assert len(seen) >= 60
    assert all(code == 200 for code, _, _ in seen), {code for code, _, _ in seen}
    gens = [g for _, g, _ in seen]
    assert 1 in gens and 2 in gens
    # Every answer comes whole from one generation: never a mix of old and new tools.
    for _, gen, names in seen:
        assert names <= (names_a if gen == 1 else names_b)


def test_reload_in_background_and_conflict(tmp_path):
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    inner = svc.encoder.inner
    with ServerThread(create_app(svc, token=TOKEN, admin_token=ADMIN_TOKEN)) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.post("/v1/admin/reload", headers=ADMIN).json()["generation"] == 2  # no body: re-read the same files
        inner.gate = threading.Event()  # the reload's probe query waits until the test opens the gate
        before = inner.entered
        r = c.post("/v1/admin/reload", headers=ADMIN, json={"wait": False})
        assert r.status_code == 202 and r.json()["status"] == "loading"
        wait_for(lambda: inner.entered > before)  # the reload is in its probe query now
        assert c.get("/v1/admin/reload", headers=ADMIN).json()["state"] == "loading"
        error(c.post("/v1/admin/reload", headers=ADMIN, json={}), 409, "reload_in_progress")
        inner.gate.set()
        wait_for(lambda: c.get("/v1/admin/reload", headers=ADMIN).json()["state"] == "succeeded")
        assert c.get("/readyz").json()["generation"] == 3


# -- pieces -------------------------------------------------------------------------------------------
def test_batching_encoder_matches_and_isolates_errors():
    inner = HashEncoder()
    enc = BatchingEncoder(inner)
    texts = [f"query number {i}" for i in range(40)]
    with ThreadPoolExecutor(20) as pool:
        got = list(pool.map(lambda t: enc.encode([t])[0], texts))
    for t, v in zip(texts, got, strict=True):
        assert (v == inner.encode([t])[0]).all()

    class Picky(HashEncoder):
        def encode(self, texts, *, desc=""):
            if any("bad" in t for t in texts):
                raise RiskrankError("bad text")
            return super().encode(texts)

    enc = BatchingEncoder(Picky())
    with ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(enc.encode, [t]) for t in ["a good one", "bad", "another good one", "fine"] * 4]
    outcomes = [f.exception() is None for f in futs]
    assert outcomes == [True, False, True, True] * 4


def test_openapi_document_is_current():
    """docs/openapi.json is the served schema (regenerate: riskrank serve --write-openapi docs/openapi.json)."""
    assert json.loads(DOCS.read_text()) == json.loads(json.dumps(openapi_schema()))


def test_modes_import_without_torch():
    """The names every surface shares load without the engine (one copy, no torch)."""
    import subprocess
    import sys

    code = "import sys, riskrank.modes; print(','.join(m for m in ('torch', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_importing_the_cli_does_not_import_the_servers_dependencies():
    import subprocess
    import sys

    code = ("import sys, riskrank.cli; heavy = [m for m in ('fastapi', 'uvicorn', 'mcp', 'pydantic') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}, check=True)
    assert out.stdout.strip() == ""


def test_a_servers_own_limits_are_enforced_and_stated():
    """The request models hold no per-server number: limits given at start are checked with the
    same codes and written into that server's OpenAPI document."""
    limits = Limits(max_task_chars=20, max_k=8, max_lambda=1.0)
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    with ServerThread(create_app(svc, limits=limits, token=TOKEN)) as s, httpx.Client(base_url=s.url) as c:
        error(c.post("/v1/retrieve", headers=AUTH, json={"task": "x" * 21}), 422, "task_too_long")
        error(c.post("/v1/retrieve", headers=AUTH, json={"task": "ok", "k": 9}), 422, "k_out_of_range")
        error(c.post("/v1/retrieve", headers=AUTH, json={"task": "ok", "lambda": 1.5}), 422, "lambda_out_of_range")
        assert c.post("/v1/retrieve", headers=AUTH, json={"task": "x" * 20, "k": 8, "lambda": 1.0}).status_code == 200
    props = openapi_schema(limits)["components"]["schemas"]["RetrieveRequest"]["properties"]
    assert props["task"]["maxLength"] == 20 and props["k"]["maximum"] == 8
    assert {"type": "number", "minimum": 0.0, "maximum": 1.0} in props["lambda"]["anyOf"]


# -- the reload path: an allow-list, regular files, a size cap, no file contents in errors ---------------
SECRET = "hunter2-SECRET-PASSWORD"


@pytest.fixture
def reload_server(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder(), reload_dirs=(str(allowed),), max_registry_bytes=50_000)
    with ServerThread(create_app(svc, token=TOKEN, admin_token=ADMIN_TOKEN)) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        yield c, allowed, tmp_path


def _reload(c, path) -> dict:
    return c.post("/v1/admin/reload", headers=ADMIN, json={"registry": str(path)})


def test_reload_reads_only_regular_files_under_the_allowed_directories(reload_server):
    c, allowed, tmp = reload_server
    outside = write_mcp_registry(tmp / "outside.json")  # a valid registry, but not under --reload-dir
    (allowed / "sub").mkdir()
    fifo = allowed / "tools.fifo"
    os.mkfifo(fifo)
    link = allowed / "escape.json"
    link.symlink_to(outside)
    messages = set()
    for path in (outside, tmp / "missing.json", allowed / "missing.json", allowed / "sub", fifo, link,
                 "/dev/zero", "/proc/self/environ", "/etc", "../../../../etc/passwd", str(allowed / "x") + "\x00"):
        err = error(_reload(c, path), 422, "reload_not_allowed")
        messages.add(err["message"].replace(show(str(path)), "PATH"))
    # one message for all of them: a caller cannot tell which paths exist
    assert len(messages) == 1, messages
    # the path is shown escaped and cut (it goes to the log): it cannot forge a log line
    err = error(_reload(c, "x\nWARNING forged line\x00" + "y" * 5000), 422, "reload_not_allowed")
    assert "\n" not in err["message"] and "\x00" not in err["message"] and len(err["message"]) < 400
    assert c.get("/readyz").json()["generation"] == 1
    # a later reload is not wedged by the FIFO
    good = write_mcp_registry(allowed / "good.json")
    assert _reload(c, good).json()["generation"] == 2


def test_a_checkpoint_whose_file_links_out_of_the_allowed_folders_is_refused_and_null_drops_heads(reload_server):
    """A checkpoint folder under --reload-dir whose file is a link to a file outside it is not
    read (the same refusal as a path outside); "checkpoint": null serves no heads, as documented."""
    c, allowed, tmp = reload_server
    (tmp / "secret.json").write_text('{"a": 1}')
    ck = allowed / "ck"
    ck.mkdir()
    (ck / "checkpoint.json").symlink_to(tmp / "secret.json")
    err = error(c.post("/v1/admin/reload", headers=ADMIN, json={"checkpoint": str(ck)}), 422, "reload_not_allowed")
    assert "secret" not in err["message"] and '"a"' not in err["message"]
    r = c.post("/v1/admin/reload", headers=ADMIN, json={"registry": str(write_mcp_registry(allowed / "r.json")), "checkpoint": None})
    assert r.status_code == 200, r.text
    assert c.get("/v1/info", headers=AUTH).json()["checkpoint"] is None


def test_reload_size_cap_and_no_contents_in_errors(reload_server):
    c, allowed, _ = reload_server
    big = allowed / "big.json"
    big.write_text(" " * 60_000 + "[]")
    err = error(_reload(c, big), 422, "reload_not_allowed")
    assert "over the limit of 50,000" in err["message"]
    shapes = {
        "name": [{"name": SECRET, "description": 5}],
        "risk": [{"name": "db", "description": "Reads.", "risk_level": SECRET}],
        "annotation": {"tools": [{"name": "db", "description": "Reads.", "annotations": {"readOnlyHint": SECRET}}]},
        "dup": {SECRET: {"risk_level": 1, "description": "a"}, "x": {"risk_level": 2, "description": "b"}, "x ": {}},
        "control": [{"name": SECRET + "\u001b", "description": "Reads."}],
    }
    for label, doc in shapes.items():
        f = allowed / f"secret_{label}.json"
        f.write_text(json.dumps(doc))
        resp = _reload(c, f)
        assert resp.status_code == 422, resp.text
        assert SECRET not in resp.text, (label, resp.text)
        assert "record" in resp.json()["error"]["message"] or "entry" in resp.json()["error"]["message"], resp.text
    status = c.get("/v1/admin/reload", headers=ADMIN).json()
    assert status["state"] == "failed" and SECRET not in json.dumps(status)


# -- protocol details ---------------------------------------------------------------------------------------
def test_405_carries_allow_and_head_answers_on_get_routes(client):
    for method, path, allow in [("DELETE", "/v1/retrieve", "POST"), ("GET", "/v1/retrieve", "POST"), ("PUT", "/healthz", "GET"),
                                ("DELETE", "/v1/tools/read_file", "GET")]:
        resp = client.request(method, path, headers=AUTH)
        error(resp, 405, "method_not_allowed")
        assert allow in resp.headers["allow"], (method, path, resp.headers)
    for path in ("/healthz", "/readyz", "/v1/info", "/v1/tools/read_file", "/openapi.json"):
        get, head = client.get(path, headers=AUTH), client.head(path, headers=AUTH)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]


def test_an_integral_k_is_an_integer(client):
    resp = client.post("/v1/retrieve", headers=AUTH, json={"task": "read a file", "k": 7.0})
    assert resp.status_code == 200 and len(resp.json()["tools"]) == 7
    error(client.post("/v1/retrieve", headers=AUTH, json={"task": "read a file", "k": 7.5}), 422, "invalid_request")


@pytest.mark.parametrize("raw", [
    b'{"task": "read a file", "k": 3, "t\xff": 1}',                  # invalid UTF-8
    b"[" * 20_000 + b"]" * 20_000,                                  # nesting no parser should recurse through
    b'{"task": "read a file", "k": ' + b"9" * 5000 + b"}",          # a 5,000-digit number
    b'{"task": "read a file", "lambda": 0.' + b"1" * 5000 + b"}",
    b'{"task": "read a file", "task": "delete every file"}',       # which task? a guess either way
])
def test_bodies_that_are_not_strict_json(client, raw):
    err = error(client.post("/v1/retrieve", headers={**AUTH, "content-type": "application/json"}, content=raw), 400, "malformed_json")
    assert len(err["message"]) < 300


def test_openapi_declares_every_status_with_a_typed_body():
    schema = openapi_schema()
    ops = {(path, method): op for path, item in schema["paths"].items() for method, op in item.items()}
    assert {op["operationId"] for op in ops.values()} == {
        "healthz", "readyz", "retrieve", "get_tool", "get_info", "reload", "get_reload_status"}
    expected = {
        ("/v1/retrieve", "post"): {"200", "400", "401", "413", "415", "422", "500", "503", "504"},
        ("/v1/tools/{name}", "get"): {"200", "401", "404", "422", "500", "503"},
        ("/v1/info", "get"): {"200", "401", "500", "503"},
        ("/v1/admin/reload", "post"): {"200", "202", "400", "401", "409", "413", "415", "422", "500", "503"},
        ("/v1/admin/reload", "get"): {"200", "401", "500"},
        ("/healthz", "get"): {"200", "500"},
        ("/readyz", "get"): {"200", "500", "503"},
    }
    for key, statuses in expected.items():
        responses = ops[key]["responses"]
        assert set(responses) == statuses, (key, set(responses))
        for status, resp in responses.items():
            body = resp["content"]["application/json"]["schema"]
            assert body.get("$ref") or body.get("anyOf"), (key, status, body)  # a named model, never {}
            if status not in ("200", "202"):
                assert body == {"$ref": "#/components/schemas/ErrorBody"}, (key, status)
    info = schema["components"]["schemas"]["Info"]
    assert {"n_tools", "mode", "modes", "lambda", "limits", "trust_annotations"} <= set(info["properties"])
    assert ops[("/v1/admin/reload", "post")]["security"] == [{"admin": []}]


def test_a_token_file_is_read_by_its_first_line(tmp_path):
    """A token file may carry notes after the token (a rotation date, say): its first line is the token."""
    from riskrank.serving.auth import read_token

    f = tmp_path / "tok"
    f.write_text(TOKEN + "\n# rotated 2026-12-06\n")
    assert read_token(str(f), None) == TOKEN


def test_a_request_that_timed_out_keeps_its_slot_until_its_work_ends():
    """--max-inflight counts work, not waiting requests: a request that timed out leaves its
    thread running in the encoder, and that thread holds its slot until it finishes."""
    svc = LiveCatalogue.from_spec(ArtefactSpec(DEMO), HashEncoder())
    inner = svc.encoder.inner
    app = create_app(svc, limits=Limits(timeout_s=0.3, max_inflight=1), token=TOKEN)
    state = app.fastapi.state.riskrank
    with ServerThread(app) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        inner.gate = threading.Event()
        try:
            error(c.post("/v1/retrieve", headers=AUTH, json={"task": "slow one"}), 504, "timeout")
            assert state.inflight == 1  # its thread still works
            error(c.post("/v1/retrieve", headers=AUTH, json={"task": "another"}), 503, "overloaded")
        finally:
            inner.gate.set()
        wait_for(lambda: state.inflight == 0)
        assert c.post("/v1/retrieve", headers=AUTH, json={"task": "after"}).status_code == 200


def test_an_alpha_no_stage_reads_is_said_in_the_notes(client):
    """alpha asked for in a mode without the graph stage: the result says it was ignored."""
    body = client.post("/v1/retrieve", headers=AUTH, json={"task": "read a file", "mode": "dense", "alpha": 0.5}).json()
    assert any("alpha 0.5 was asked" in n for n in body["notes"]), body["notes"]
    plain = client.post("/v1/retrieve", headers=AUTH, json={"task": "read a file", "mode": "dense"}).json()
    assert not any("alpha" in n for n in plain["notes"])
