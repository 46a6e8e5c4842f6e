"""`riskrank serve` as a user starts it: a subprocess, the bundled MiniLM encoder, a token
from the environment, real HTTP. Slow (loads the model): run with -m slow."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from test_server_support import TOKEN

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_end_to_end(tmp_path):
    port = free_port()
    env = {**os.environ, "RISKRANK_TOKEN": TOKEN, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "serve", "--port", str(port), "--mode", "dense+rule"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "server did not start"
            time.sleep(0.2)
        body = {"task": "delete every file in my home folder", "k": 5}
        r = httpx.post(url + "/v1/retrieve", json=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = httpx.post(url + "/v1/retrieve", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text
        out = r.json()
        assert len(out["tools"]) == 5 and out["mode"] == "dense+rule"
        assert out["fallback"] == []  # the demo registry has enough compliant tools: no top-up needed
        assert sum(t["effective_level"] >= 3 for t in out["tools"]) <= 1
        assert "retrieve;dur=" in r.headers["server-timing"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    err = proc.stderr.read()
    assert "listening on http://127.0.0.1" in err and "Traceback" not in err
