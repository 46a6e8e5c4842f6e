"""What webhooks add to the call path: 100 held calls, each approved at once, through the
console's broker with no webhook, with a receiver that sleeps 5 s before answering, and with
one that answers 500; then a receiver that is down while 100 more holds and decisions happen
and comes back: every event is delivered or counted as dropped.

    python benchmarks/notify_latency.py [--holds 100] [--out benchmarks/results/notify_latency.json]

The latency is a call's, from asking the broker to its answer (the approval is given as soon as
the hold is listed), so the webhook's cost is the difference between the columns: queueing an
event is all the call does; the receiver is a worker's business.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio

from riskrank.serving.gateway.confirm import ConfirmationRequest, OperatorBroker
from riskrank.serving.gateway.notify import Notifier, verify

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"bench-webhook-secret-0123456789"
#: How long the slow receiver sleeps before answering, and how long the receiver is down.
SLOW_S = 5
OUTAGE_S = 3


MODES = {"ok": 0, "slow": 1, "error": 2}


def _serve(port: int, mode: object, verified: object, bad: object) -> None:
    """The receiver's process: answers by ``mode`` and counts the bodies whose signature verifies."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            now = mode.value
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if now == MODES["slow"]:
                time.sleep(SLOW_S)
            elif now == MODES["error"]:
                self.send_response(500)
                self.end_headers()
                return
            if verify(SECRET, body, self.headers["X-Riskrank-Timestamp"], self.headers["X-Riskrank-Signature"]):
                if now == MODES["ok"]:
                    with verified.get_lock():
                        verified.value += 1
            else:
                with bad.get_lock():
                    bad.value += 1
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


class Receiver:
    """A webhook receiver in its own process on a free loopback port: ok, slow (5 s), error (500) or down."""

    def __init__(self) -> None:
        self.mode, self.verified, self.bad = mp.Value("i", 0), mp.Value("i", 0), mp.Value("i", 0)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: mp.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def set(self, mode: str) -> None:
        self.mode.value = MODES[mode]

    def up(self) -> None:
        self.proc = mp.Process(target=_serve, args=(self.port, self.mode, self.verified, self.bad), daemon=True)
        self.proc.start()
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)

    def down(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.join()
            self.proc = None


def _request(i: int) -> ConfirmationRequest:
    return ConfirmationRequest(session=f"bench/{i}", task="restart the api", tool="restart_service", level=3,
                               arguments={"service": f"api-{i}"}, message="Allow?", bind=f"b{i}", client="pager",
                               policy="on-call")


async def _holds(broker: OperatorBroker, n: int) -> list[float]:
    """n held calls one after another, each approved as soon as it is listed: each call's seconds."""
    took: list[float] = []

    async def ask(i: int, t0: float) -> None:
        await broker.confirm(_request(i), None)
        took.append(time.perf_counter() - t0)

    for i in range(n):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, i, time.perf_counter())
            while not broker.pending:
                await anyio.sleep(0)
            broker.decide(next(iter(broker.pending)), True, "lead")
    return took


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


class TimedNotifier(Notifier):
    """A notifier that times what the call path spends in :meth:`notify` (queueing one event)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.spent: list[float] = []

    def notify(self, event: dict) -> None:
        t0 = time.perf_counter()
        super().notify(event)
        self.spent.append(time.perf_counter() - t0)


async def _column(mode: str | None, receiver: Receiver, n: int) -> dict:
    notifier = TimedNotifier([receiver.url], SECRET) if mode else None
    broker = OperatorBroker(60, notifier=notifier)
    receiver.set(mode or "ok")
    async with anyio.create_task_group() as tg:
        if notifier is not None:
            tg.start_soon(notifier.run)
            await anyio.sleep(1.0)  # the worker's start (its HTTP client) is the gateway's start, not a call's
        took = await _holds(broker, n)
        tg.cancel_scope.cancel()
    out = {"receiver": mode or "no webhook", "calls": n, "p50_ms": round(_q(took, 0.5) * 1e3, 3),
           "p99_ms": round(_q(took, 0.99) * 1e3, 3), "max_ms": round(max(took) * 1e3, 3)}
    if notifier is not None:
        out["notify_p99_us"] = round(_q(notifier.spent, 0.99) * 1e6, 1)
        out["webhook"] = notifier.stats()[0]
    return out


async def _recovery(receiver: Receiver, n: int, outage_s: float) -> dict:
    notifier = Notifier([receiver.url], SECRET, backoff_s=0.2)
    broker = OperatorBroker(60, notifier=notifier)
    receiver.down()
    receiver.set("ok")
    receiver.verified.value = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(notifier.run)
        await _holds(broker, n)
        await anyio.sleep(outage_s)
        receiver.up()
        t0 = time.monotonic()
        while notifier.stats()[0]["waiting"] and time.monotonic() - t0 < 120:
            await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    stats = notifier.stats()[0]
    return {"events": 2 * n, "outage_s": outage_s, "delivered": stats["delivered"], "dropped": stats["dropped"],
            "received_and_verified": receiver.verified.value, "bad_signatures": receiver.bad.value,
            "every_event_accounted": stats["delivered"] + stats["dropped"] == 2 * n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--holds", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "notify_latency.json"))
    args = ap.parse_args()
    receiver = Receiver()
    receiver.up()
    columns = [anyio.run(_column, mode, receiver, args.holds) for mode in (None, "slow", "error")]
    base = columns[0]["p99_ms"]
    for c in columns[1:]:
        c["added_p99_ms"] = round(c["p99_ms"] - base, 3)
    recovery = anyio.run(_recovery, receiver, args.holds, OUTAGE_S)
    receiver.down()
    result = {"machine": socket.gethostname(), "date": time.strftime("%Y-%m-%d"), "columns": columns, "recovery": recovery}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for c in columns:
        print(f"{c['receiver']:>11}: p50 {c['p50_ms']:.3f} ms  p99 {c['p99_ms']:.3f} ms  max {c['max_ms']:.3f} ms"
              + (f"  added p99 {c['added_p99_ms']:+.3f} ms  notify() p99 {c['notify_p99_us']} us  webhook {c['webhook']}"
                 if "added_p99_ms" in c else ""))
    print(f"receiver down {recovery['outage_s']:g} s, then up: {recovery}")


if __name__ == "__main__":
    main()
