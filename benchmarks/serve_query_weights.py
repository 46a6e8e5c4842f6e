"""``riskrank serve`` with tasks encoded by int8 weights against float32, run after run.

    python benchmarks/serve_query_weights.py --data data --rounds 3 --json benchmarks/results/serve_query_weights.json

Each round starts ``riskrank serve`` twice over UltraTool's 2,032 tools in ``core+graph+rule``
(:mod:`bench_serve`: a warm embedding cache, every task new to it, the client threads on the
same cores as the server), once with ``--query-weights float32`` and once with ``int8`` (the
default), in alternating order, so both see the same machine. The tools are encoded in float32
either way: only the tasks' forward pass differs (docs/serving.md). The table gives, per
number of clients, the median and the range of each run's p50 over the rounds, beside the
serving targets (p50 <= 12 ms at 1 client, <= 60 ms at 8).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_serve
from riskrank.fileio import write_json

WEIGHTS = ("float32", "int8")
TARGETS = {1: 12.0, 8: 60.0}


def doc_table(result: dict[str, Any]) -> str:
    """Per clients and weights: p50 median (min-max) over the rounds, req/s and server CPU."""
    rounds = result["rounds"]
    lines = [f"`POST /v1/retrieve`, 2,032 tools, `core+graph+rule`, k 5, {len(rounds)} rounds of both weights in "
             f"alternating order; {result['machine']}, {result['date']}.", "",
             "| clients | tasks encoded by | p50 ms, median (min–max) | p95 ms, median | req/s, median | server CPU ms/req, median | target p50 |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    clients = [r["clients"] for r in rounds[0]["float32"]["results"]]
    for i, c in enumerate(clients):
        for w in WEIGHTS:
            rows = [r[w]["results"][i] for r in rounds]
            p50 = [x["p50_ms"] for x in rows]
            med = {k: statistics.median(x[k] for x in rows) for k in ("p95_ms", "throughput_rps", "server_cpu_ms_per_request")}
            target = f"<= {TARGETS[c]:.0f} ms" if c in TARGETS else ""
            lines.append(f"| {c} | {w} | {statistics.median(p50):.1f} ({min(p50):.1f}–{max(p50):.1f}) | {med['p95_ms']:.1f} | "
                         f"{med['throughput_rps']:.1f} | {med['server_cpu_ms_per_request']:.1f} | {target} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"),
                              "machine": f"{os.cpu_count()}-core {platform.machine()} machine (load {os.getloadavg()[0]:.2f} at the start)",
                              "rounds": []}
    for n in range(a.rounds):
        row = {}
        for w in (WEIGHTS if n % 2 == 0 else WEIGHTS[::-1]):
            row[w] = bench_serve.main(["--data", a.data, "--mode", "core+graph+rule", "--clients", a.clients,
                                       "--requests", str(a.requests), "--query-weights", w])
        result["rounds"].append(row)
    result["load_at_the_end"] = round(os.getloadavg()[0], 2)
    print(doc_table(result))
    if a.json:
        write_json(a.json, result)


if __name__ == "__main__":
    main()
