"""Webhooks: signed bodies a receiver can verify, URLs refused at start in one line, and
receivers that are slow, fail, redirect or answer with junk cost the call nothing and are
counted."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest

from riskrank.serving.gateway.confirm import ConfirmationRequest, OperatorBroker
from riskrank.serving.gateway.notify import (
    Notifier,
    NotifyError,
    check_url,
    sign,
    slack_text,
    verify,
)

SECRET = b"test-webhook-secret-0123456789"


@pytest.mark.parametrize(("url", "message"), [
    ("file:///etc/passwd", "only http:// and https://"),
    ("ftp://example.org/x", "only http:// and https://"),
    ("/relative/path", "a relative path"),
    ("http://user:pw@example.org/", "no credentials"),
    ("http:///nohost", "names no host"),
    ("https://no-such-host.invalid/hook", "does not resolve"),
])
def test_a_webhook_url_that_cannot_be_used_is_one_line(url, message):
    def resolve(host, port):
        raise socket.gaierror("Name or service not known")

    with pytest.raises(NotifyError, match=None) as err:
        check_url(url, resolve=resolve)
    assert message in str(err.value) and str(err.value).startswith(f"--notify {url}") and "\n" not in str(err.value)


def test_a_signature_verifies_only_for_its_body_and_time():
    body = b'{"event":"hold"}'
    now = 1_800_000_000
    header = sign(SECRET, body, now)
    assert header.startswith("sha256=") and verify(SECRET, body, str(now), header, now=now + 10)
    assert not verify(SECRET, body + b" ", str(now), header, now=now)  # another body
    assert not verify(b"another-secret-0123456789", body, str(now), header, now=now)
    assert not verify(SECRET, body, str(now), header, now=now + 3600)  # a replay an hour later
    assert not verify(SECRET, body, "soon", header, now=now)


class _Receiver:
    """A loopback receiver answering by ``mode``: ok, redirect, junk (a huge non-JSON body), error."""

    def __init__(self, mode: str) -> None:
        self.mode, self.bodies = mode, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append((body, self.headers["X-Riskrank-Timestamp"], self.headers["X-Riskrank-Signature"]))
                if outer.mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "http://127.0.0.1:1/elsewhere")
                    self.end_headers()
                elif outer.mode == "error":
                    self.send_response(500)
                    self.end_headers()
                else:
                    junk = b"<html>" + b"x" * (8 << 20) if outer.mode == "junk" else b""
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(junk)))
                    self.end_headers()
                    self.wfile.write(junk)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _run(mode: str, fmt: str = "json") -> tuple[Notifier, _Receiver]:
    receiver = _Receiver(mode)
    notifier = Notifier([receiver.url], SECRET, fmt, console_url="http://gw/console/approvals", tries=2, backoff_s=0.05)
    broker = OperatorBroker(30, notifier=notifier)
    request = ConfirmationRequest(session="pager/1", task="restart the api", tool="restart_service", level=3,
                                  arguments={"service": "api", "reason": "x" * 5000}, message="Allow?", bind="b",
                                  client="pager", policy="on-call")

    async def go():
        async with anyio.create_task_group() as tg:
            tg.start_soon(notifier.run)
            answers = []

            async def ask():
                answers.append(await broker.confirm(request, None))

            tg.start_soon(ask)
            while not broker.pending:
                await anyio.sleep(0.01)
            broker.decide(next(iter(broker.pending)), True, "lead", "go")
            with anyio.fail_after(30):
                while notifier.stats()[0]["waiting"] or (notifier.stats()[0]["delivered"] + notifier.stats()[0]["dropped"]) < 2:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        return answers[0]

    assert anyio.run(go).action == "accept"
    receiver.close()
    return notifier, receiver


def test_each_hold_and_decision_is_posted_signed_and_verifiable():
    notifier, receiver = _run("ok")
    assert notifier.stats()[0]["delivered"] == 2 and notifier.stats()[0]["dropped"] == 0
    events = []
    for body, ts, signature in receiver.bodies:
        assert verify(SECRET, body, ts, signature)
        events.append(json.loads(body))
    hold, decided = events
    assert (hold["event"], hold["tool"], hold["client"], hold["policy"], hold["level"]) == (
        "hold", "restart_service", "pager", "on-call", 3)
    assert hold["arguments"]["service"] == "api" and hold["arguments"]["reason"].endswith("(5000 characters)")
    assert (decided["event"], decided["action"], decided["decided_by"], decided["note"]) == ("decided", "accept", "lead", "go")
    assert hold["console"] == "http://gw/console/approvals" and hold["digest"] == decided["digest"]


def test_the_slack_format_is_one_text():
    _, receiver = _run("ok", "slack")
    texts = [json.loads(b)["text"] for b, _, _ in receiver.bodies]
    assert set(json.loads(receiver.bodies[0][0])) == {"text"}
    assert "pager (policy on-call) wants to call `restart_service` (risk level 3)" in texts[0]
    assert "Task: restart the api" in texts[0] and "<http://gw/console/approvals|Open the approvals page>" in texts[0]
    assert "accept by lead" in texts[1]
    assert slack_text({"event": "withdrawn", "tool": "t", "action": "caller_gone"}).startswith(":x: `t` withdrawn")


@pytest.mark.parametrize(("mode", "error"), [("redirect", "a redirect"), ("error", "answered 500")])
def test_a_receiver_that_redirects_or_fails_is_counted_not_followed(mode, error):
    notifier, receiver = _run(mode)
    stats = notifier.stats()[0]
    assert stats["dropped"] == 2 and stats["delivered"] == 0 and error in stats["last_error"]
    assert len(receiver.bodies) == 4  # two tries each, and nothing sent to the redirect's target


def test_a_huge_non_json_answer_is_not_read():
    """An 8 MB HTML answer: a 2xx is a delivery whatever its body (nothing parses it)."""
    notifier, _ = _run("junk")
    assert notifier.stats()[0]["delivered"] == 2


def test_a_full_queue_drops_and_counts():
    notifier = Notifier(["http://127.0.0.1:9/hook"], SECRET, queue_max=3)
    for i in range(5):
        notifier.notify({"event": "hold", "tool": "t", "id": str(i)})
    stats = notifier.stats()[0]
    assert (stats["waiting"], stats["dropped"]) == (3, 2) and "queue full" in stats["last_error"]
    with pytest.raises(NotifyError, match="at least 16 bytes"):
        Notifier(["http://x/"], b"short")


@pytest.mark.parametrize(("args", "message"), [
    (["--notify", "file:///etc/passwd", "--notify-secret-file", "secret"], "--notify file:///etc/passwd: only http://"),
    (["--notify", "http://127.0.0.1:9/hook"], "--notify URL and --notify-secret-file FILE go together"),
    (["--notify", "http://127.0.0.1:9/hook", "--notify-secret-file", "missing"], "--notify-secret-file missing: cannot read"),
    (["--notify", "https://no-such-host.invalid/hook", "--notify-secret-file", "secret"], "does not resolve"),
    (["--operators", "operators.json"], "--operators operators.json: cannot read it"),
])
def test_bad_notify_and_operators_flags_are_one_line_at_start(args, message, monkeypatch, capsys, tmp_path):
    import sys

    from riskrank.cli import run

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RISKRANK_ADMIN_TOKEN", raising=False)
    (tmp_path / "secret").write_text("s" * 8 + "0123456789abcdef")
    monkeypatch.setattr(sys, "argv", ["riskrank", "mcp", "--upstream", "true", "--console", "--audit-log", "a.jsonl", *args])
    code = run()
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
