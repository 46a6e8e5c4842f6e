"""Outgoing webhooks: each new hold and each decision, where a team already is (a chat channel,
a pager, a ticket), signed so the receiver can tell it came from this gateway.

``--notify URL`` (repeatable) posts one JSON body per event: ``hold`` (a call waits for an
operator), ``decided`` (an operator approved or denied it) and ``withdrawn`` (it timed out, its
caller left, its replica is gone). The body is signed with HMAC-SHA256 under
``--notify-secret-file``: the headers ``X-Riskrank-Timestamp`` (Unix seconds) and
``X-Riskrank-Signature: sha256=HEX`` where ``HEX = HMAC(secret, TIMESTAMP + "." + BODY)``
(:func:`sign`, :func:`verify`). ``--notify-format slack`` sends ``{"text": ...}`` that a
Slack (or Mattermost) incoming webhook posts as it is.

Delivery never slows a call: :meth:`Notifier.notify` only appends to a bounded queue per URL
(full: the event is dropped and counted); one worker per URL posts with a timeout, retries a
failure with exponential backoff, never follows a redirect, never reads more than a few bytes
of an answer, and counts what it could not deliver. The console shows the counts.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from riskrank.errors import RiskrankError

#: Events a URL's queue holds before new ones are dropped (and counted).
QUEUE_MAX = 1000
#: Seconds one POST may take (connect, send, the answer's status line).
TIMEOUT_S = 5.0
#: Tries per event (the first and its retries), the first backoff (doubled each retry) and
#: the longest: about a minute of a receiver's outage before the event at its head is dropped
#: (the events behind it wait in its queue meanwhile, and are delivered once it answers).
TRIES = 8
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
FORMATS = ("json", "slack")
SIGNATURE_HEADER = "X-Riskrank-Signature"
TIMESTAMP_HEADER = "X-Riskrank-Timestamp"
#: A signature older (or newer) than this is refused by :func:`verify`: a replayed body fails.
TOLERANCE_S = 300


class NotifyError(RiskrankError):
    """A webhook that cannot be used (refused at start, one line)."""

    code = "invalid_notify"


def check_url(url: str, resolve: Any = socket.getaddrinfo) -> str:
    """``url`` if it is an ``http(s)://`` URL whose host resolves, else :class:`NotifyError`
    naming the problem (a redirect is refused when it happens: one is never followed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise NotifyError(f"--notify {url}: only http:// and https:// URLs can receive webhooks "
                          f"(not {parts.scheme + ':' if parts.scheme else 'a relative path'})")
    if not parts.hostname:
        raise NotifyError(f"--notify {url}: the URL names no host")
    if parts.username or parts.password:
        raise NotifyError(f"--notify {url}: put no credentials in the URL (the body is signed instead)")
    try:
        resolve(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError) as exc:
        raise NotifyError(f"--notify {url}: the host {parts.hostname!r} does not resolve ({exc})") from None
    return url


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    return "sha256=" + hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, timestamp: str, signature: str, now: float | None = None) -> bool:
    """What a receiver runs: the signature matches this body and timestamp, and the timestamp
    is within :data:`TOLERANCE_S` of ``now`` (a replay of an old body fails)."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - ts) > TOLERANCE_S:
        return False
    return hmac.compare_digest(sign(secret, body, ts), signature)


def slack_text(event: dict[str, Any]) -> str:
    """The one message a chat channel shows for ``event``."""
    args = ", ".join(f"{k}={v}" for k, v in (event.get("arguments") or {}).items()) or "no arguments"
    who = f"{event.get('client') or 'an agent'}" + (f" (policy {event['policy']})" if event.get("policy") else "")
    head = {"hold": f":raised_hand: {who} wants to call `{event['tool']}` (risk level {event.get('level')})",
            "decided": f":white_check_mark: `{event['tool']}` {event.get('action')} by {event.get('decided_by')}",
            "withdrawn": f":x: `{event['tool']}` withdrawn ({event.get('action')})"}[event["event"]]
    lines = [head, f"Task: {event.get('task') or '(none)'}", f"Arguments: {args}"]
    if event.get("note"):
        lines.append(f"Note: {event['note']}")
    if event.get("console"):
        lines.append(f"<{event['console']}|Open the approvals page>")
    return "\n".join(lines)


@dataclass
class Target:
    """One receiver: its queue and what became of its events."""

    url: str
    queue: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque())
    delivered: int = 0
    dropped: int = 0
    last_error: str | None = None
    wake: Any = None


@dataclass
class Notifier:
    """Posts events to every URL (one worker each: :meth:`run`); :meth:`notify` never waits."""

    urls: Sequence[str]
    secret: bytes
    format: str = "json"
    console_url: str | None = None
    queue_max: int = QUEUE_MAX
    timeout_s: float = TIMEOUT_S
    tries: int = TRIES
    backoff_s: float = BACKOFF_S
    targets: list[Target] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise NotifyError(f"--notify-format {self.format}: one of {', '.join(FORMATS)}")
        if len(self.secret) < 16:
            raise NotifyError("--notify-secret-file: the secret must be at least 16 bytes")
        self.targets = [Target(u) for u in self.urls]

    def notify(self, event: dict[str, Any]) -> None:
        """Queue ``event`` for every receiver; a full queue drops it (counted). Call on the loop."""
        if self.console_url and "console" not in event:
            event = {**event, "console": self.console_url}
        for t in self.targets:
            if len(t.queue) >= self.queue_max:
                t.dropped += 1
                t.last_error = f"queue full ({self.queue_max} events waiting)"
                continue
            t.queue.append(event)
            if t.wake is not None:
                t.wake.set()

    def body(self, event: dict[str, Any]) -> bytes:
        data = {"text": slack_text(event)} if self.format == "slack" else event
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str).encode()

    def stats(self) -> list[dict[str, Any]]:
        """Per receiver: delivered, dropped, waiting, the last error (the console shows them)."""
        return [{"url": t.url, "delivered": t.delivered, "dropped": t.dropped, "waiting": len(t.queue),
                 "last_error": t.last_error} for t in self.targets]

    async def run(self) -> None:
        """Deliver until cancelled (one worker per receiver: a slow one delays only itself)."""
        import anyio
        import anyio.to_thread
        import httpx

        # made in a worker thread: loading the TLS trust store takes a while and must not stall the calls
        made = await anyio.to_thread.run_sync(lambda: httpx.AsyncClient(follow_redirects=False, timeout=self.timeout_s))
        async with made as client, anyio.create_task_group() as tg:
            for t in self.targets:
                tg.start_soon(self._deliver, client, t)

    async def _deliver(self, client: Any, target: Target) -> None:
        import anyio

        while True:
            while not target.queue:
                target.wake = anyio.Event()
                await target.wake.wait()
            event = target.queue[0]
            body = self.body(event)
            error = None
            for attempt in range(self.tries):
                error = await self._post(client, target.url, body)
                if error is None:
                    break
                if attempt + 1 < self.tries:
                    await anyio.sleep(min(MAX_BACKOFF_S, self.backoff_s * 2 ** attempt))
            target.queue.popleft()
            if error is None:
                target.delivered += 1
            else:
                target.dropped += 1
                target.last_error = error

    async def _post(self, client: Any, url: str, body: bytes) -> str | None:
        """One POST: None when the receiver answered 2xx, else why not (its answer is not read)."""
        import anyio

        ts = int(time.time())
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: str(ts), SIGNATURE_HEADER: sign(self.secret, body, ts),
                   "User-Agent": "riskrank-webhook"}
        try:
            with anyio.fail_after(self.timeout_s):
                async with client.stream("POST", url, content=body, headers=headers) as answer:
                    status = answer.status_code
        except TimeoutError:
            return f"no answer within {self.timeout_s:g} s"
        except Exception as exc:  # the receiver is down or refused the connection: retried, then counted
            return f"{type(exc).__name__}: {exc}"[:300]
        if 300 <= status < 400:
            return f"answered {status} (a redirect: webhooks never follow one)"
        return None if 200 <= status < 300 else f"answered {status}"


def event_of(kind: str, item: Any, action: str | None = None) -> dict[str, Any]:
    """The event for a held request ``item`` (a :class:`~.confirm.Pending`): what it asks, and
    for ``decided``/``withdrawn`` the answer. Arguments are cut as the audit log cuts a field."""
    from riskrank.serving.gateway.auditlog import cut_field

    req = item.request
    answer = item.answer
    return {"event": kind, "id": item.id, "tool": req.tool, "level": req.level, "task": req.task, "client": req.client,
            "policy": req.policy, "session": req.session, "replica": item.replica, "digest": req.digest,
            "arguments": {k: cut_field(v) for k, v in req.arguments.items()},
            "action": action or (answer.action if answer is not None else None),
            "decided_by": answer.by if answer is not None else None, "note": answer.note if answer is not None else None,
            "at": time.time()}
