"""Latency of ``POST /v1/retrieve`` over loopback: p50/p95 at 1 and 8 concurrent clients.

    python benchmarks/bench_serve.py --data data [--checkpoint DIR] [--json out.json]

Starts ``riskrank serve`` as a subprocess (the UltraTool registry, 2,032 tools, the default
encoder unless ``--encoder``), waits for /readyz, then sends requests from 1 and from 8
client threads (each with its own keep-alive connection). Every request carries a query text
the embedding cache has never seen (an UltraTool test question, respaced at random: see
:func:`queries`), so the latency includes encoding the query. Latency is measured at the
client, from sending the request to reading the whole response; "server p50" is the handler's
own time (the Server-Timing header) and "server CPU ms/req" the server process's CPU time per
request (all threads, from /proc), which a busy machine inflates far less than wall time.
Target: p50 <= 30 ms at 1 client. Without ``--checkpoint`` the server runs the shipped base
model (riskrank-base); its target, in ``core+graph+rule``, is p50 <= 35 ms at 1 client:

    python benchmarks/bench_serve.py --data data --mode core+graph+rule --clients 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from riskrank.fileio import write_json
from riskrank.tables import text_table

ULTRATOOL_LABELS = "qli447/risk-aware-tool-retrieval-release/data/ultratool/ultratool_risk_labels_resolved.json"
ULTRATOOL_TEST = "JoeYing1019/UltraTool/data/English-dataset/test.json"
FALLBACK_TASKS = [
    "Book a table for two at an Italian restaurant tonight", "What's the weather in Tokyo this weekend",
    "Delete all the photos I took last year", "Transfer 50 dollars to my landlord", "Find flights from Paris to Rome",
    "Remind me to call my mother at 6 pm", "Translate this paragraph into Spanish", "Show my recent bank transactions",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def queries(data: Path | None, n: int, seed: int, source: str = "ultratool") -> list[str]:
    """n query texts the embedding cache has never seen, each token for token an UltraTool
    test question: the cache keys on the exact text, the tokenizer ignores runs of spaces, so
    a per-run random pattern of single and double spaces makes every text new while the
    encoder does exactly the work of the question itself."""
    base: list[str] = []
    test = data / ULTRATOOL_TEST if data else None
    if source == "demo":  # short agent tasks (about 12 tokens), the bundled demo's
        from riskrank.datasets.demo import demo_tasks_path

        base = [t["task"] for t in json.loads(demo_tasks_path().read_text(encoding="utf-8"))]
    elif test and test.exists():
        from riskrank.fileio import read_jsonl

        base = [rec["question"] for _, rec in read_jsonl(test)]
    base = base or FALLBACK_TASKS
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        words = base[len(out) % len(base)].split()
        text = "".join(w + rng.choice((" ", "  ")) for w in words[:-1]) + words[-1] + " " * rng.randrange(3)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), all its threads."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_level(url: str, texts: list[str], clients: int, body: dict, pid: int | None = None) -> dict:
    latencies: list[float] = []
    server_ms: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    it = iter(texts)
    start = threading.Barrier(clients)

    def worker() -> None:
        # TCP_NODELAY, as curl and most HTTP clients set it (httpx does not by default).
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        with httpx.Client(base_url=url, timeout=60, transport=transport) as c:
            c.get("/readyz")  # open the keep-alive connection before timing
            start.wait()
            while True:
                with lock:
                    text = next(it, None)
                if text is None:
                    return
                t0 = time.perf_counter()
                r = c.post("/v1/retrieve", json={**body, "task": text})
                r.read()
                dt = (time.perf_counter() - t0) * 1000
                with lock:
                    if r.status_code == 200:
                        latencies.append(dt)
                        server_ms.append(float(r.headers["server-timing"].split("dur=")[1]))
                    else:
                        errors.append(f"{r.status_code} {r.text[:100]}")

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    cpu0 = cpu_seconds(pid) if pid else None
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds(pid) if pid else None
    return {
        "server_cpu_ms_per_request": (cpu1 - cpu0) * 1000 / max(len(latencies), 1) if cpu0 is not None and cpu1 is not None else None,
        "clients": clients, "requests": len(latencies), "errors": len(errors), "error_samples": errors[:3],
        "p50_ms": percentile(latencies, 0.5), "p95_ms": percentile(latencies, 0.95), "p99_ms": percentile(latencies, 0.99),
        "mean_ms": statistics.fmean(latencies), "max_ms": max(latencies), "throughput_rps": len(latencies) / wall,
        "server_p50_ms": percentile(server_ms, 0.5),
    }


def doc_table(out: dict) -> str:
    """The docs' concurrency table of one run (docs/benchmarks.md; a test renders it again
    from the committed artefact)."""
    env = out["environment"]
    lines = [f"`POST /v1/retrieve`, {out['n_tools']:,} tools, `{out['mode']}`, k {out['k']}, every query new to the cache; "
             f"server ready (warm cache) in {env['server_startup_s']} s; {env['cpus']} CPUs, load average "
             f"{env['load_avg_before'][0]} before, {env['load_avg_after'][0]} after.", "",
             "| clients | requests | errors | p50 ms | p95 ms | p99 ms | req/s | server CPU ms/req |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in out["results"]:
        cpu = "-" if r["server_cpu_ms_per_request"] is None else f"{r['server_cpu_ms_per_request']:.1f}"
        lines.append(f"| {r['clients']} | {r['requests']} | {r['errors']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['throughput_rps']:.1f} | {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.environ.get("RISKRANK_DATA"), help="Data directory / mirror (<owner>/<repo>/<path> layout).")
    p.add_argument("--registry", default=None, help="Registry file [default: UltraTool's, from --data].")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--mode", default=None, help="Server default mode [default: the server's: core+graph+rule with heads, else dense+rule].")
    p.add_argument("--request-mode", default=None, help="Mode each request asks for [default: the server's].")
    p.add_argument("--encoder", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch threads in the server.")
    p.add_argument("--encoder-backend", default=None, choices=["auto", "numpy", "torch", "onnx"],
                   help="The server's encoder forward pass [default: the server's, auto].")
    p.add_argument("--query-weights", default=None, choices=["int8", "float32"],
                   help="The weights the server encodes tasks with [default: the server's, int8].")
    p.add_argument("--clients", default="1,8", help="Comma-separated concurrency levels.")
    p.add_argument("--requests", type=int, default=200, help="Timed requests per level.")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--queries", choices=["ultratool", "demo"], default="ultratool",
                   help="Query texts: UltraTool test questions (48 tokens median) or the demo's short agent tasks.")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--json", default=None, help="Write the results to this JSON file.")
    args = p.parse_args(argv)

    data = Path(args.data) if args.data else None
    registry = args.registry or (str(data / ULTRATOOL_LABELS) if data else None)
    if not registry or not Path(registry).exists():
        sys.exit("give --registry FILE or --data DIR holding " + ULTRATOOL_LABELS)
    levels = [int(c) for c in args.clients.split(",")]
    texts = queries(data, args.warmup + args.requests * len(levels), uuid.uuid4().int, args.queries)

    port = free_port()
    cmd = [sys.executable, "-c", "from riskrank.cli import entry; entry()", "serve", "--registry", registry,
           "--host", "127.0.0.1", "--port", str(port), "--insecure", "--log-level", "warning"]
    for flag, value in (("--checkpoint", args.checkpoint), ("--mode", args.mode), ("--encoder", args.encoder), ("--threads", args.threads),
                        ("--encoder-backend", args.encoder_backend), ("--query-weights", args.query_weights)):
        if value is not None:
            cmd += [flag, str(value)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("RISKRANK_TOKEN", None)
    url = f"http://127.0.0.1:{port}"
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    server = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while True:
            if server.poll() is not None:
                sys.exit(f"riskrank serve exited: {server.stderr.read()}")
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                sys.exit("riskrank serve did not become ready in 600 s")
            time.sleep(0.2)
        startup = time.perf_counter() - t_start
        info = httpx.get(url + "/v1/info").json()
        body: dict = {"k": args.k}
        if args.request_mode:
            body["mode"] = args.request_mode
        run_level(url, texts[: args.warmup], 1, body)
        results, pos = [], args.warmup
        for c in levels:
            results.append(run_level(url, texts[pos : pos + args.requests], c, body, server.pid))
            pos += args.requests
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()

    env_info = {
        "cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "load_avg_before": [round(x, 2) for x in load_before], "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "server_startup_s": round(startup, 2), "torch_threads": args.threads, "encoder_backend": args.encoder_backend or "auto",
    }
    out = {"registry": registry, "n_tools": info["n_tools"], "mode": args.request_mode or info["mode"], "queries": args.queries,
           "checkpoint": info.get("checkpoint"), "base_model": info.get("base_model"),
           "encoder": info["encoder"], "query_encoder": info.get("query_encoder"), "k": args.k, "environment": env_info, "results": results}
    print(f"POST /v1/retrieve over loopback: {info['n_tools']} tools, mode {out['mode']}, k {args.k}, encoder {info['encoder']}"
          + (f", tasks by {info['query_encoder']}" if info.get("query_encoder") not in (None, info["encoder"]) else "")
          + (", the base model" if info.get("base_model") else f", checkpoint {info.get('checkpoint')}" if info.get("checkpoint") else ""))
    print(f"{env_info['cpus']} CPUs, load average {env_info['load_avg_before'][0]} -> {env_info['load_avg_after'][0]}; "
          f"server ready in {env_info['server_startup_s']} s; queries: {args.queries} texts, each new to the cache")
    header = ["clients", "requests", "errors", "p50 ms", "p95 ms", "p99 ms", "mean ms", "req/s", "server p50 ms", "server CPU ms/req"]
    rows = [[str(r["clients"]), str(r["requests"]), str(r["errors"]), f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}",
             f"{r['p99_ms']:.1f}", f"{r['mean_ms']:.1f}", f"{r['throughput_rps']:.1f}", f"{r['server_p50_ms']:.1f}",
             "-" if r["server_cpu_ms_per_request"] is None else f"{r['server_cpu_ms_per_request']:.1f}"] for r in results]
    print(text_table(header, rows))
    if args.json:
        write_json(args.json, out)
        print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    main()
