"""The OpenAI-compatible annotator against a loopback server that answers like
``/v1/chat/completions``: well-formed and malformed answers (one re-ask), 429 and 500 (retry
with backoff), hard errors, rate limiting, and a killed audit that resumes from its vote log.

The server (:class:`FakeEndpoint`) is also a script, for trying the audit end to end without
an LLM: ``python tests/test_audit_endpoint.py --port 8765 --faults`` serves three model
"personas" (``strict``, ``lenient``, ``noisy``) whose answers are derived from the keyword
annotator, so their levels say nothing about LLM quality; they only exercise the plumbing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from riskrank.annotators import (
    REASK_PROMPT,
    AnnotatorError,
    Failure,
    OpenAIAnnotator,
    Vote,
    annotation_prompt,
    parse_level,
)
from riskrank.audit import VoteLog, run_audit
from riskrank.registry import ToolRegistry, make_tool
from riskrank.risk import keyword_level

_PROMPT = re.compile(r"Tool name: (.*?)\n\nDescription: (.*)", re.S)


def persona_level(model: str, name: str, description: str) -> int:
    """Deterministic answers per model name: ``strict`` = the keyword level, ``lenient`` =
    one lower from L3 up, ``noisy`` = the keyword level moved by -1/0/+1 (hash of the name)."""
    level, _ = keyword_level(name, description)
    if model.startswith("lenient") and level >= 3:
        level -= 1
    elif model.startswith("noisy"):
        level += int(hashlib.sha256(name.encode()).hexdigest(), 16) % 3 - 1
    return max(1, min(5, level))


class FakeEndpoint:
    """A chat-completions server on 127.0.0.1 (port 0 = any free port), in a thread.

    ``script`` maps a tool name to a list of actions consumed one per request for that tool:
    an int status (429, 500, 401 ...), ``"garbage"`` (a malformed answer), ``"badjson"`` (200
    with a body that is not a completion), ``"sleep:S"``, ``"hold"`` (answer only once the same
    tool is asked again: the client has timed out and retried), or a literal answer ``"text:..."``.
    Without a scripted action the persona's level is answered. ``fault_every`` injects a 429
    (``Retry-After: 0``) or a 500 into every n-th request, and a malformed first answer into
    every n-th tool, for the script mode. ``delay`` slows every request down.
    """

    def __init__(self, script: dict[str, list] | None = None, *, delay: float = 0.0, api_key: str | None = None,
                 fault_every: int = 0, port: int = 0) -> None:
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.delay, self.api_key, self.fault_every = delay, api_key, fault_every
        self.requests: list[dict] = []
        self.injected: dict[str, int] = {}
        self.lock = threading.Lock()
        self.released = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                endpoint.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> FakeEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def tools_asked(self) -> list[str]:
        with self.lock:
            return [r["tool"] for r in self.requests]

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length", 0))))
        if h.path != "/v1/chat/completions":
            return self._send(h, 404, b'{"error": {"message": "not found"}}')
        if self.api_key and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._send(h, 401, b'{"error": {"message": "invalid api key"}}')
        m = _PROMPT.search(body["messages"][0]["content"])
        name, desc = (m.group(1), m.group(2)) if m else ("?", "?")
        with self.lock:
            n = len(self.requests)
            self.requests.append({"tool": name, "model": body.get("model"), "messages": body["messages"],
                                  "temperature": body.get("temperature"), "auth": h.headers.get("Authorization")})
            actions = self.script.get(name)
            action = actions.pop(0) if actions else None
            if sum(r["tool"] == name for r in self.requests) > 1:
                self.released.set()
            n_tool = len({(r["model"], r["tool"]) for r in self.requests})
        if self.delay:
            time.sleep(self.delay)
        if action is None and self.fault_every and n % self.fault_every == 1:
            action = 429 if (n // self.fault_every) % 2 == 0 else 500
        if action is None and self.fault_every and len(body["messages"]) == 1 and n_tool % self.fault_every == 3:
            action = "garbage"
        if action is not None:
            with self.lock:
                self.injected[str(action)] = self.injected.get(str(action), 0) + 1
        if isinstance(action, str) and action.startswith("sleep:"):
            time.sleep(float(action[6:]))
            action = None
        if action == "hold":  # answer only once the same tool has been asked again (a retry)
            self.released.wait(timeout=60)
            action = None
        if isinstance(action, int):
            headers = {"Retry-After": "0"} if action == 429 else {}
            return self._send(h, action, json.dumps({"error": {"message": f"scripted {action}"}}).encode(), headers)
        if action == "badjson":
            return self._send(h, 200, b"<html>gateway hiccup</html>")
        if action == "garbage":
            content = "I would say this is probably a 3 or a 4."
        elif isinstance(action, str) and action.startswith("text:"):
            content = action[5:]
        else:
            content = str(persona_level(str(body.get("model")), name, desc))
        reply = {"id": f"fake-{n}", "object": "chat.completion", "model": body.get("model"),
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
        return self._send(h, 200, json.dumps(reply).encode())


def _tools(n: int = 6):
    descs = ["Read a file and return its text", "Delete a file from disk", "Send an email to a contact",
             "Get the weather forecast", "Execute a shell command", "Update a calendar event",
             "Look up a word in a dictionary", "Transfer funds between bank accounts"]
    return [make_tool(f"tool_{i}", descs[i % len(descs)], where="test") for i in range(n)]


def _annotator(url: str, **kw) -> OpenAIAnnotator:
    opts = {"model": "strict", "base_url": url, "api_key": "k", "backoff": 0.001, "max_backoff": 0.01, "timeout": 5.0, "workers": 2}
    opts.update(kw)
    return OpenAIAnnotator(**opts)


@pytest.mark.parametrize(("text", "level"), [
    ("3", 3), (" 4\n", 4), ("L2", 2), ("'5'", 5), ("**1**", 1), ("2.", 2), ("`3`", 3),
    ("6", None), ("0", None), ("3 or 4", None), ("Level: 3", None), ("", None), (None, None), ("34", None), ("3.5", None),
])
def test_parse_level_is_strict(text, level):
    assert parse_level(text) == level


def test_answers_and_request_shape():
    tools = _tools(4)
    with FakeEndpoint() as ep:
        ann = _annotator(ep.url)
        got = dict(ann.annotate(tools))
    assert {i: v.level for i, v in got.items()} == {i: persona_level("strict", t.name, t.description) for i, t in enumerate(tools)}
    req = ep.requests[0]
    assert req["model"] == "strict" and req["temperature"] == 0.0 and req["auth"] == "Bearer k"
    prompts = {r["messages"][0]["content"] for r in ep.requests}
    assert prompts == {annotation_prompt(t) for t in tools}
    assert "Return only one integer in {1,2,3,4,5}." in next(iter(prompts))  # Appendix A, verbatim


def test_malformed_answer_is_reasked_once():
    tools = _tools(3)
    script = {"tool_0": ["garbage"], "tool_1": ["garbage", "text:still not sure"], "tool_2": ["text:L4"]}
    with FakeEndpoint(script) as ep:
        ann = _annotator(ep.url)
        got = dict(ann.annotate(tools))
    assert isinstance(got[0], Vote) and got[0].level == persona_level("strict", "tool_0", tools[0].description)
    assert isinstance(got[1], Failure) and "malformed" in got[1].error
    assert isinstance(got[2], Vote) and got[2].level == 4
    asked = ep.tools_asked()
    assert asked.count("tool_0") == 2 and asked.count("tool_1") == 2 and asked.count("tool_2") == 1
    reask = next(r for r in ep.requests if r["tool"] == "tool_0" and len(r["messages"]) == 3)
    assert reask["messages"][1]["role"] == "assistant" and reask["messages"][2]["content"] == REASK_PROMPT
    assert ann.stats["reasks"] == 2 and ann.stats["failures"] == 1


def test_429_and_500_are_retried_with_backoff():
    tools = _tools(3)
    script = {"tool_0": [429, 429], "tool_1": [500, "badjson", 503], "tool_2": [500] * 10}
    with FakeEndpoint(script) as ep:
        ann = _annotator(ep.url, retries=3)
        got = dict(ann.annotate(tools))
    assert isinstance(got[0], Vote) and isinstance(got[1], Vote)
    assert isinstance(got[2], Failure) and "HTTP 500" in got[2].error and "4 attempts" in got[2].error
    asked = ep.tools_asked()
    assert asked.count("tool_0") == 3 and asked.count("tool_1") == 4 and asked.count("tool_2") == 4
    assert ann.stats["retries"] == 2 + 3 + 3


def test_backoff_doubles_and_honours_retry_after():
    ann = OpenAIAnnotator(model="m", base_url="http://127.0.0.1:9", backoff=1.0, max_backoff=60.0)
    assert 1.0 <= ann._delay(0, None) <= 1.25 and 4.0 <= ann._delay(2, None) <= 5.0
    assert ann._delay(6, None) == 60.0
    assert ann._delay(3, "2") == 2.0 and ann._delay(0, "600") == 60.0


def test_timeout_is_retried():
    """The first request is held until the client has given up and asked again (the retry
    releases it), so the timeout fires for certain and the retry is answered at once."""
    tools = _tools(1)
    with FakeEndpoint({"tool_0": ["hold"]}) as ep:
        ann = _annotator(ep.url, timeout=1.0, retries=2)
        got = dict(ann.annotate(tools))
    assert isinstance(got[0], Vote) and ann.stats["retries"] == 1
    assert ep.tools_asked() == ["tool_0", "tool_0"]


def test_hard_errors_stop_the_run():
    with FakeEndpoint(api_key="right") as ep:
        ann = _annotator(ep.url, api_key="wrong")
        with pytest.raises(AnnotatorError, match=r"HTTP 401.*api-key"):
            list(ann.annotate(_tools(3)))
    with FakeEndpoint() as ep:
        ann = _annotator(ep.url.removesuffix("/v1") + "/nope")
        with pytest.raises(AnnotatorError, match="HTTP 404"):
            list(ann.annotate(_tools(1)))


def test_connection_refused_is_a_failure_not_a_crash():
    ann = OpenAIAnnotator(model="m", base_url="http://127.0.0.1:9/v1", retries=1, backoff=0.001, timeout=1.0)
    (_, res), = list(ann.annotate(_tools(1)))
    assert isinstance(res, Failure) and "connection error" in res.error


def test_rate_limit_spaces_request_starts():
    """On a fake clock (advanced only by the limiter's own sleeps): starts 0.1 s apart."""
    from riskrank.annotators import _RateLimiter

    now = [100.0]
    limiter = _RateLimiter(600.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    starts = [limiter.wait() for _ in range(5)]
    assert starts == pytest.approx([100.0, 100.1, 100.2, 100.3, 100.4])
    now[0] += 10.0  # idle for a while: the next request starts at once
    assert limiter.wait() == pytest.approx(now[0])


def test_rate_limit_gates_every_request():
    with FakeEndpoint() as ep:
        ann = _annotator(ep.url, rate_limit=6000.0, workers=3)
        calls = []
        real = ann._limiter.wait
        ann._limiter.wait = lambda: calls.append(1) or real()
        list(ann.annotate(_tools(5)))
    assert len(calls) == len(ep.requests) == 5


def test_interrupted_audit_keeps_finished_votes(tmp_path):
    """Ctrl-C in the middle: the votes logged so far survive and are not asked again."""
    reg = ToolRegistry(_tools(8))

    class Interrupting(OpenAIAnnotator):
        def annotate(self, tools):
            inner = super().annotate(tools)
            try:
                for k, item in enumerate(inner):
                    if k == 3:
                        raise KeyboardInterrupt
                    yield item
            finally:
                inner.close()

    log = tmp_path / "votes.jsonl"
    with FakeEndpoint() as ep:
        with pytest.raises(KeyboardInterrupt):
            run_audit(reg, [Interrupting(**_ann_kwargs(ep.url), spec="openai:strict")], log)
        done = {r["tool"] for r in VoteLog(log).records()}
        assert len(done) == 3
        n_before = len(ep.requests)
        run = run_audit(reg, [_annotator(ep.url, spec="openai:strict")], log)
    assert run.reused == 3 and run.new == 5
    assert not done & set(ep.tools_asked()[n_before:])
    assert len(VoteLog(log).votes()) == 8


def _ann_kwargs(url: str) -> dict:
    return {"model": "strict", "base_url": url, "api_key": "k", "backoff": 0.001, "max_backoff": 0.01, "workers": 1}


def test_killed_audit_resumes_without_redoing_votes(tmp_path):
    """SIGKILL the `riskrank audit` process mid-run; the rerun asks only for missing votes."""
    tools = _tools(8)
    reg_path = tmp_path / "registry.json"
    reg_path.write_text(json.dumps([{"name": t.name, "description": t.description} for t in tools]))
    out = tmp_path / "labels.json"
    log = tmp_path / "labels.votes.jsonl"
    env = {**os.environ, "OPENAI_API_KEY": "k"}
    with FakeEndpoint(delay=0.15) as ep:
        cmd = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "audit", "--registry", str(reg_path),
               "-a", f"openai:strict@{ep.url}", "--out", str(out), "--workers", "1", "--quiet"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while time.time() < deadline and (not log.exists() or log.read_bytes().count(b"\n") < 3):
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not out.exists()
        with log.open("ab") as fh:  # as if killed in the middle of writing a line
            fh.write(b'{"tool": "tool_7", "key": "tr')
        first = {r["tool"] for r in VoteLog(log).records()}
        assert 3 <= len(first) < 8
        n_before = len(ep.requests)
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "torn last line repaired" in res.stdout
    again = ep.tools_asked()[n_before:]
    assert not first & set(again), "finished votes were asked again"
    assert sorted(again) == sorted(t.name for t in tools if t.name not in first)
    recs = VoteLog(log).records()
    assert sorted(r["tool"] for r in recs) == sorted(t.name for t in tools)
    labels = json.loads(out.read_text())
    assert all(labels[t.name]["risk_level"] == persona_level("strict", t.name, t.description) for t in tools)


# -- the script mode: a background endpoint for trying the audit by hand --------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description="A fake OpenAI-compatible chat-completions endpoint on 127.0.0.1.")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--faults", action="store_true", help="Inject 429/500 responses and malformed first answers.")
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    ep = FakeEndpoint(delay=args.delay, fault_every=7 if args.faults else 0, port=args.port)
    print(f"serving {ep.url} (models: strict, lenient, noisy)", flush=True)

    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        ep.server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        print(f"{len(ep.requests)} requests served; injected: {ep.injected or 'nothing'}", flush=True)


if __name__ == "__main__":
    main()


def test_a_hostile_answer_is_bounded_and_cannot_crash_the_run():
    """An answer with a lone surrogate is re-asked as sendable text (it crashed the re-ask),
    and a huge one is kept as evidence in part, its length said (it made the label file too
    big to load)."""
    tools = _tools(2)
    script = {"tool_0": ["text:\ud800 2", "text:2"], "tool_1": ["text:" + "x" * 100_000, "text:3"]}
    with FakeEndpoint(script) as ep:
        got = dict(_annotator(ep.url).annotate(tools))
    assert isinstance(got[0], Vote) and got[0].level == 2
    assert isinstance(got[1], Vote) and got[1].level == 3
    assert len(got[1].evidence) < 1000 and "100,000 characters" in got[1].evidence
