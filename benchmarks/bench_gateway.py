"""How fast the gateway starts, what it adds to a call, how it holds up under many agents.

    python benchmarks/bench_gateway.py [--servers-bin DIR] [--runs 3] [--json out.json]

Over the filesystem, memory and everything reference servers (npm), as an MCP client (Claude
Desktop, Cursor) starts it, with the SDK's own client, in one run:

- **upstreams alone**: the three servers spawned in parallel, each ``initialize`` +
  ``tools/list``: what any gateway over them waits for at least;
- **cold start** (an empty ``$RISKRANK_CACHE``) and **warm start** (the same cache again),
  from the spawn of ``riskrank mcp --config servers.json`` to the answers to ``initialize``,
  ``tools/list`` and a first ``find_tools``; the gateway's own ``--verbose`` start-up timeline
  of one warm start;
- **call overhead**: ``call_tool`` of the memory server's ``read_graph`` through the gateway
  against the same call on a direct session to the same server (p50 of each, and the
  difference);
- **concurrency**: the gateway over streamable HTTP, 1, 4, 8 and 16 clients, each with its own
  session, each sending ``find_tools`` back to back: p50/p95 latency and errors;
- **``riskrank retrieve``** on the filesystem server's ``tools/list`` dump, warm: wall seconds;
- **give up and stop**: ``--upstream 'sleep 301' --startup-timeout 2`` to the exit (code, and
  whether a ``sleep`` is left), SIGTERM to the exit (children left).

The machine's load average is recorded before and after. The servers: ``--servers-bin``
(their ``node_modules/.bin``), else riskrank's CI cache.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from riskrank.fileio import write_json
from riskrank.serving import mcp_compat
from riskrank.tables import text_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_server_support import descendants  # the process-tree reader the tests use

ENTRY = ["-c", "from riskrank.cli import entry; entry()"]
TASK = "list the files in the logs folder"


def servers_file(root: Path, bins: Path) -> Path:
    (root / "files" / "logs").mkdir(parents=True, exist_ok=True)
    servers = {"mcpServers": {
        "filesystem": {"command": str(bins / "mcp-server-filesystem"), "args": [str(root / "files")]},
        "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(root / "m.jsonl")}},
        "everything": {"command": str(bins / "mcp-server-everything"), "args": ["stdio"]}}}
    path = root / "servers.json"
    path.write_text(json.dumps(servers))
    return path


def gateway_env(cache: Path) -> dict[str, str]:
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "RISKRANK_DATA") if k in os.environ}
    return {**keep, "HF_HUB_OFFLINE": "1", "RISKRANK_CACHE": str(cache)}


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


async def upstreams_alone(config: Path) -> float:
    """Seconds until all three servers, spawned in parallel, have listed their tools."""
    spec = json.loads(config.read_text())["mcpServers"]
    t0 = time.perf_counter()

    async def one(entry: dict) -> None:
        target = mcp_compat.ServerTarget(command=entry["command"], args=tuple(entry.get("args", ())), env=entry.get("env", {}))
        with open(os.devnull, "w") as err:
            async with mcp_compat.open_session(target, errlog=err) as s:
                await mcp_compat.list_all(s, "tools")

    async with anyio.create_task_group() as tg:
        for entry in spec.values():
            tg.start_soon(one, entry)
    return time.perf_counter() - t0


async def gateway_start(config: Path, cache: Path, err_path: Path, *extra: str) -> dict[str, float]:
    """Spawn to initialize, tools/list and a first find_tools, as a client sees them."""
    target = mcp_compat.ServerTarget(command=sys.executable, args=(*ENTRY, "mcp", "--config", str(config), *extra),
                                     env=gateway_env(cache))
    t0 = time.perf_counter()
    with err_path.open("w") as err:
        async with mcp_compat.open_session(target, errlog=err) as s:
            t_init = time.perf_counter() - t0
            await mcp_compat.list_all(s, "tools")
            t_list = time.perf_counter() - t0
            out = mcp_compat.wire(await s.call_tool("find_tools", {"task": TASK, "k": 5}))
            t_find = time.perf_counter() - t0
    assert not out.get("isError") and out["structuredContent"]["tools"], out
    return {"initialize_s": t_init, "tools_list_s": t_list, "first_find_tools_s": t_find}


async def call_overhead(config: Path, cache: Path, n: int) -> dict[str, float]:
    """p50 of read_graph through the gateway and on a direct session to the memory server."""
    entry = json.loads(config.read_text())["mcpServers"]["memory"]
    direct = mcp_compat.ServerTarget(command=entry["command"], env=entry["env"])
    gw = mcp_compat.ServerTarget(command=sys.executable, args=(*ENTRY, "mcp", "--config", str(config)), env=gateway_env(cache))

    async def timed(call) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            res = mcp_compat.wire(await call())
            out.append(time.perf_counter() - t)
            assert not res.get("isError"), res
        return out

    with open(os.devnull, "w") as err:
        async with mcp_compat.open_session(direct, errlog=err) as s:
            d = await timed(lambda: s.call_tool("read_graph", {}))
        async with mcp_compat.open_session(gw, errlog=err) as s:
            found = mcp_compat.wire(await s.call_tool("find_tools", {"task": "read the whole knowledge graph", "k": 5}))
            names = [t["name"] for t in found["structuredContent"]["tools"]]
            assert "read_graph" in names, names
            g = await timed(lambda: s.call_tool("call_tool", {"name": "read_graph", "arguments": {}}))
    return {"direct_p50_ms": 1e3 * statistics.median(d), "gateway_p50_ms": 1e3 * statistics.median(g),
            "overhead_p50_ms": 1e3 * (statistics.median(g) - statistics.median(d)), "calls": n}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def concurrency(config: Path, cache: Path, clients: list[int], per_client: int) -> list[dict[str, float]]:
    """find_tools latency with N concurrent clients over streamable HTTP, one gateway."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, *ENTRY, "mcp", "--config", str(config), "--transport", "streamable-http",
                             "--host", "127.0.0.1", "--port", str(port), "--insecure"], env=gateway_env(cache),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "find_tools over" in line:
                break
        target = mcp_compat.ServerTarget(url=f"http://127.0.0.1:{port}/mcp")
        rows = []
        for n in clients:
            lat: list[float] = []
            errs: list[bool] = []

            async def client(i: int, lat: list[float] = lat, errs: list[bool] = errs) -> None:
                async with mcp_compat.open_session(target) as s:
                    await s.call_tool("find_tools", {"task": TASK, "k": 5})  # the session's first call: not timed
                    for j in range(per_client):
                        t = time.perf_counter()
                        out = mcp_compat.wire(await s.call_tool("find_tools", {"task": f"{TASK} number {i}-{j}", "k": 5}))
                        lat.append(time.perf_counter() - t)
                        errs.append(bool(out.get("isError")))

            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(client, i)
            errors = sum(errs)
            rows.append({"clients": n, "requests": len(lat), "p50_ms": 1e3 * statistics.median(lat),
                         "p95_ms": 1e3 * pct(lat, 95), "errors": errors})
        return rows
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def give_up_and_stop(config: Path, cache: Path) -> dict[str, float]:
    env = gateway_env(cache)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, *ENTRY, "mcp", "--upstream", "sleep 301", "--startup-timeout", "2"],
                         capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    timeout_s = time.perf_counter() - t
    sleeps = subprocess.run(["pgrep", "-x", "-f", "sleep 301"], capture_output=True, text=True).stdout.split()
    proc = subprocess.Popen([sys.executable, *ENTRY, "mcp", "--config", str(config)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "find_tools over" in line:
            break
    kids = descendants(proc.pid)
    t = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    stop_s = time.perf_counter() - t
    time.sleep(0.2)
    left = [p for p in kids if Path(f"/proc/{p}").exists()
            and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    return {"timeout_exit_s": timeout_s, "timeout_rc": out.returncode, "sleep_left": len(sleeps),
            "timeout_line": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "",
            "sigterm_exit_s": stop_s, "children_left": len(left)}


def retrieve_wall(cache: Path, runs: int) -> list[float]:
    """Wall seconds of ``riskrank retrieve`` on the filesystem server's tools/list dump (warm)."""
    registry = Path(__file__).resolve().parents[1] / "examples" / "registries" / "mcp_filesystem_tools_list.json"
    argv = [sys.executable, *ENTRY, "retrieve", "--registry", str(registry), "show me the size and permissions of notes.txt",
            "--mode", "rule"]
    subprocess.run(argv, env=gateway_env(cache), capture_output=True, check=True, timeout=300)  # warms the cache
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, env=gateway_env(cache), capture_output=True, check=True, timeout=300)
        out.append(time.perf_counter() - t)
    return out


def timeline(err_path: Path) -> list[list]:
    """(seconds, stage) from a --verbose start's stderr."""
    out = []
    for line in err_path.read_text().splitlines():
        if "start-up" in line and " s (+" in line:
            head, stage = line.split(") ", 1)
            out.append([float(head.split("start-up", 1)[1].split(" s")[0]), stage])
    return out


async def bench(ns: argparse.Namespace, root: Path) -> dict:
    config = servers_file(root, ns.bins)
    alone = [await upstreams_alone(config) for _ in range(ns.runs)]
    cold, warm = [], []
    for i in range(ns.runs):
        cold.append(await gateway_start(config, root / f"cache-cold-{i}", root / "cold.err"))
    cache = root / "cache"
    await gateway_start(config, cache, root / "fill.err")  # fills the cache
    for _ in range(ns.runs):
        warm.append(await gateway_start(config, cache, root / "warm.err", "--verbose"))
    tl = timeline(root / "warm.err")
    overhead = await call_overhead(config, cache, ns.calls)
    conc = await concurrency(config, cache, [1, 4, 8, 16], ns.per_client)
    return {"upstreams_alone_s": alone, "cold": cold, "warm": warm, "timeline_warm": tl, "call_overhead": overhead,
            "concurrency": conc, "stop": give_up_and_stop(config, cache), "retrieve_wall_s": retrieve_wall(cache, ns.runs)}


def _span(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def doc_table(res: dict) -> str:
    """The docs' start-up, overhead and concurrency tables of one run (docs/benchmarks.md; a
    test renders them again from the committed artefact)."""
    alone = res["upstreams_alone_s"]
    lines = [f"Start, spawn to answer, seconds: median (min–max) of {res['runs']} runs; {res['cpus']} CPUs, load average "
             f"{res['load_average']['before'][0]:.2f} before, {res['load_average']['after'][0]:.2f} after.", "",
             "| | `initialize` | `tools/list` | first `find_tools` |", "|---|---:|---:|---:|",
             f"| the three upstreams alone (spawned in parallel, each `initialize` + `tools/list`) | | {_span(alone)} | |"]
    for kind, what in (("cold", "gateway, cold (empty cache)"), ("warm", "gateway, warm (same cache)")):
        r = res[kind]
        lines.append(f"| {what} | {_span([x['initialize_s'] for x in r])} | {_span([x['tools_list_s'] for x in r])} | "
                     f"{_span([x['first_find_tools_s'] for x in r])} |")
    lines += ["", "The gateway's own timeline of the last warm start (`--verbose`):", "", "| s | stage |", "|---:|---|"]
    lines += [f"| {t:.2f} | {stage} |" for t, stage in res["timeline_warm"]]
    o = res["call_overhead"]
    lines += ["", f"Call overhead, `read_graph` of the memory server, {o['calls']} calls each: direct p50 "
                  f"{o['direct_p50_ms']:.2f} ms, through the gateway {o['gateway_p50_ms']:.2f} ms: "
                  f"**{o['overhead_p50_ms']:.2f} ms** added.", "",
              "| clients (streamable HTTP, one session each) | `find_tools` | p50 ms | p95 ms | errors |",
              "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['clients']} | {r['requests']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['errors']} |"
              for r in res["concurrency"]]
    lines += ["", f"`riskrank retrieve --registry examples/registries/mcp_filesystem_tools_list.json \"show me the size and "
                  f"permissions of notes.txt\" --mode rule`, warm cache, wall: {_span(res['retrieve_wall_s'])} s."]
    st = res["stop"]
    lines += ["", f"`--upstream 'sleep 301' --startup-timeout 2`: exit {st['timeout_rc']} after {st['timeout_exit_s']:.2f} s, "
                  f"{st['sleep_left']} `sleep` left; SIGTERM: exit after {st['sigterm_exit_s']:.2f} s, "
                  f"{st['children_left']} children left."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers-bin", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--calls", type=int, default=50, help="calls per side for the overhead")
    ap.add_argument("--per-client", type=int, default=20, help="find_tools per client in the concurrency test")
    ap.add_argument("--json", default=None)
    ap.add_argument("--doc", action="store_true", help="also print the docs' markdown tables")
    ns = ap.parse_args()
    ns.bins = Path(ns.servers_bin or Path(os.environ.get("RISKRANK_CI_CACHE") or Path.home() / ".cache" / "riskrank-ci")
                   / "npm" / "node_modules" / ".bin")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        res = anyio.run(bench, ns, Path(tmp))
    res["load_average"] = {"before": list(load_before), "after": list(os.getloadavg())}
    res["cpus"] = os.cpu_count()
    res["runs"] = ns.runs
    med = statistics.median
    alone = med(res["upstreams_alone_s"])
    rows = [["upstreams alone (3 servers, parallel)", "", f"{alone:.2f}", "", ""]]
    for kind in ("cold", "warm"):
        r = res[kind]
        rows.append([f"gateway, {kind} cache", f"{med(x['initialize_s'] for x in r):.2f}", f"{med(x['tools_list_s'] for x in r):.2f}",
                     f"{med(x['first_find_tools_s'] for x in r):.2f}", f"{med(x['tools_list_s'] for x in r) / alone:.2f}"])
    print(text_table(["start (median of runs, s)", "initialize", "tools/list", "first find_tools", "tools/list / alone"], rows))
    print("\nwarm start-up timeline (--verbose):")
    for t, stage in res["timeline_warm"]:
        print(f"  {t:6.2f} s  {stage}")
    o = res["call_overhead"]
    print(f"\ncall overhead (read_graph, {o['calls']} calls each): direct p50 {o['direct_p50_ms']:.2f} ms, "
          f"gateway p50 {o['gateway_p50_ms']:.2f} ms, overhead {o['overhead_p50_ms']:.2f} ms")
    print("\n" + text_table(["clients", "requests", "p50 ms", "p95 ms", "errors"],
                            [[r["clients"], r["requests"], f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", r["errors"]]
                             for r in res["concurrency"]]))
    s = res["stop"]
    print(f"\n--upstream 'sleep 301' --startup-timeout 2: exit {s['timeout_rc']} after {s['timeout_exit_s']:.2f} s, "
          f"{s['sleep_left']} sleep left ({s['timeout_line']}); SIGTERM: exit after {s['sigterm_exit_s']:.2f} s, "
          f"{s['children_left']} children left")
    print(f"load average before {res['load_average']['before'][0]:.2f}, after {res['load_average']['after'][0]:.2f} "
          f"({res['cpus']} CPUs)")
    if ns.json:
        write_json(ns.json, res)
    if ns.doc:
        print("\n" + doc_table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
