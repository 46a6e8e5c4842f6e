"""What running the gateway like infrastructure costs: the metrics per call, and a policy replay.

    python benchmarks/gateway_ops.py --json benchmarks/results/gateway_ops.json

**Metrics.** ``call_tool`` in process over a stub upstream that answers at once (no audit
file: its fsync would drown the difference), the same allowed call timed with and without
:func:`~riskrank.serving.gateway.metrics.make_metrics` (the decision counter fed by the audit
record, the call and upstream histograms), in alternating blocks so a busy machine's drift
falls on both; the added cost is the difference of the medians. The spans are timed the same
way with OpenTelemetry's SDK recording every span into its in-memory exporter (the cost an
operator who traces pays), and with the API alone (no provider: OpenTelemetry's no-op).
Target: metrics add at most 0.2 ms per call.

**Replay.** ``riskrank policy replay``'s code over an audit log of 10,000 lines: a recorded
session of the gateway (find_tools and calls allowed, confirmed and refused, written by the
gateway itself), repeated with fresh session keys up to 10,000 lines, replayed under a tighter
policy. Target: at most 5 s on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from riskrank.serving import mcp_compat

TOOLS = [{"name": "read_inbox", "description": "Read the latest e-mails in the user's inbox.",
          "inputSchema": {"type": "object", "properties": {}}},
         {"name": "send_email", "description": "Send an e-mail to a recipient.",
          "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}}},
         {"name": "archive_email", "description": "Archive an e-mail of the inbox.", "inputSchema": {"type": "object"}},
         {"name": "summarise_text", "description": "Summarise a text in three sentences.",
          "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
LEVELS = {"read_inbox": 2, "send_email": 2, "archive_email": 3, "summarise_text": 1}


class Instant:
    async def call_tool(self, name: str, arguments: dict, progress_callback: Any = None) -> Any:
        return mcp_compat.tool_result(json.dumps({"called": name}))


class Caller:
    session_key, host_task, host_user, progress_token, wants_progress, client, traceparent = (
        "bench", None, None, None, False, None, None)

    async def confirm(self, message: str, bind: str, details: str | None = None) -> str:
        return "accept"


def gateway(audit_path: Path | None = None, **policy_kw: Any) -> Any:
    from riskrank.catalogue import ArtefactSpec
    from riskrank.encoder import make_encoder
    from riskrank.serving.gateway.auditlog import AuditLog
    from riskrank.serving.gateway.config import UpstreamConfig
    from riskrank.serving.gateway.core import Gateway, build_view, record_registry, upstream_records
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.gateway.upstreams import UpstreamManager

    manager = UpstreamManager([UpstreamConfig("mail", mcp_compat.ServerTarget(command="sh"))])
    up = manager.upstreams["mail"]
    up.state, up.tools, up.known_tools, up.session = "up", TOOLS, {t["name"] for t in TOOLS}, Instant()
    records, routes = upstream_records(manager)
    registry, skipped = record_registry(records, "bench")
    policy = Policy(levels=LEVELS, **policy_kw)
    view = build_view(registry, ArtefactSpec("bench", fill_levels="keyword"), make_encoder(None), policy, 1, routes=routes,
                      skipped=skipped)
    return Gateway(view, policy=policy, manager=manager, audit=AuditLog(audit_path), default_k=3)


def _block(gw: Any, calls: int) -> list[float]:
    from riskrank.serving.gateway.session import Exposure

    gw._expose("bench", Exposure("summarise my inbox", frozenset(LEVELS), time.monotonic()))
    times: list[float] = []
    args = {"to": "boss@corp.example", "body": "the Q3 numbers"}

    async def go() -> None:
        for _ in range(calls):
            t0 = time.perf_counter()
            res = await gw.forward_call({"name": "send_email", "arguments": args}, Caller())
            times.append(time.perf_counter() - t0)
            if mcp_compat.error_code(res) is not None:
                raise RuntimeError(mcp_compat.wire(res)["content"][0]["text"])

    anyio.run(go)
    return times


def per_call(blocks: int = 10, calls: int = 300) -> dict[str, Any]:
    """Median seconds per allowed call: plain, with metrics, with metrics and recorded spans."""
    from riskrank.serving.gateway.metrics import make_metrics

    plain = gateway(scope="off", flow="off")
    metered = gateway(scope="off", flow="off")
    make_metrics(metered)
    times: dict[str, list[float]] = {"plain": [], "metrics": []}
    for _ in range(blocks):
        times["plain"] += _block(plain, calls)
        times["metrics"] += _block(metered, calls)
    out = {k: round(1000 * statistics.median(v), 4) for k, v in times.items()}
    traced: list[float] = []
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        out["traced"] = None
    else:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        base: list[float] = []
        for _ in range(blocks):
            base += _block(plain, calls)  # the API with a provider, before the spans: same process state
            traced += _block(metered, calls)
            exporter.clear()
        out["traced"] = round(1000 * statistics.median(traced), 4)
    out["added_metrics_ms"] = round(out["metrics"] - out["plain"], 4)
    out["added_traced_ms"] = round(out["traced"] - out["metrics"], 4) if out.get("traced") is not None else None
    out["calls_per_variant"] = blocks * calls
    return out


def replay_log(lines: int = 10_000) -> dict[str, Any]:
    """``policy replay`` over ``lines`` audit lines (module docstring)."""
    from riskrank.serving.gateway.config import Policies
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.gateway.replay import read_lines, replay
    from riskrank.serving.gateway.session import Exposure

    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed.jsonl"
        gw = gateway(seed, confirm="every_call")
        calls = [("send_email", {"to": "a@b.example"}), ("archive_email", {}), ("read_inbox", {}), ("summarise_text", {}),
                 ("delete_everything", {})]

        async def go() -> None:
            for i in range(100):
                caller = Caller()
                caller.session_key = f"s{i}"
                await gw.find_tools({"task": "archive the e-mails of my inbox", "k": 2}, caller)
                if i % 2:
                    gw._expose(caller.session_key, Exposure("x", frozenset(LEVELS), time.monotonic()))
                for name, args in calls:
                    await gw.forward_call({"name": name, "arguments": args}, caller)

        anyio.run(go)
        gw.audit.close()
        recorded = seed.read_text().splitlines()
        big = Path(tmp) / "audit.jsonl"
        with big.open("w") as fh:
            n, copy = 0, 0
            while n < lines:
                for line in recorded:
                    if n >= lines:
                        break
                    rec = json.loads(line)
                    if isinstance(rec.get("session"), str):
                        rec["session"] = f"{rec['session']}-{copy}"
                    fh.write(json.dumps(rec) + "\n")
                    n += 1
                copy += 1
        new = Policies({"default": Policy(levels=LEVELS, max_level=2, confirm_level=2, deny=("read_*",))})
        t0 = time.perf_counter()
        result = replay(read_lines(big), new)
        seconds = time.perf_counter() - t0
    return {"lines": lines, "recorded_session_lines": len(recorded), "seconds": round(seconds, 3), "calls": result.calls,
            "find_tools": result.finds, "changes": len(result.rows), "after": dict(result.after)}


def doc_table(result: dict[str, Any]) -> str:
    """The table of docs/serving.md ("Metrics, traces and policy dry runs"), from the artefact."""
    c, r = result["per_call_ms"], result["replay"]
    ok = {True: "met", False: "missed"}
    rows = [
        ("an allowed call, no metrics (median)", f"{c['plain']:.3f} ms", ""),
        ("the same call with /metrics kept (median)", f"{c['metrics']:.3f} ms",
         f"added {c['added_metrics_ms']:.3f} ms (target ≤ 0.2 ms: {ok[c['added_metrics_ms'] <= 0.2]})"),
        ("the same call with every span recorded (SDK, in-memory exporter)", f"{c['traced']:.3f} ms",
         f"added {c['added_traced_ms']:.3f} ms (no target)"),
        (f"policy replay of {r['lines']:,} audit lines", f"{r['seconds']:.2f} s",
         f"{r['calls']:,} calls, {r['find_tools']:,} find_tools (target ≤ 5 s: {ok[r['seconds'] <= 5.0]})"),
    ]
    return ("| | measured | |\n|---|---:|---|\n" + "".join(f"| {a} | {b} | {x} |\n" for a, b, x in rows)).rstrip("\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="Write the result here.")
    parser.add_argument("--lines", type=int, default=10_000)
    args = parser.parse_args(argv)
    out = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                      f"load {os.getloadavg()[0]:.1f}", "date": time.strftime("%Y-%m-%d"),
           "per_call_ms": per_call(), "replay": replay_log(args.lines)}
    out["targets"] = {"metrics_added_ms_le_0.2": out["per_call_ms"]["added_metrics_ms"] <= 0.2,
                      "replay_10000_lines_le_5s": out["replay"]["seconds"] <= 5.0}
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
