"""How long the gateway takes to start, to give up on a dead upstream, and to stop.

    python benchmarks/bench_gateway.py [--servers-bin DIR] [--runs 3] [--json out.json]

Each run starts ``riskrank mcp --config servers.json`` (the filesystem and memory reference
servers, the bundled encoder) as a user would and measures, from the spawn:

- **ready**: until the gateway logs that it serves (both upstreams up and audited, the
  catalogue built, the encoder warm);
- **first find_tools**: one MCP ``initialize`` + ``find_tools`` round trip after that;
- **timeout**: ``--upstream 'sleep 301' --startup-timeout 2`` until the process exits (2 s plus
  the SDK's bounded shutdown), and whether a ``sleep 301`` is left;
- **SIGTERM**: from the signal to the exit, and how many of its descendants are left.

The servers: ``--servers-bin`` (their ``node_modules/.bin``), else riskrank's CI cache.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from riskrank.fileio import write_json
from riskrank.tables import text_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_server_support import descendants  # the process-tree reader the tests use

ENTRY = [sys.executable, "-c", "from riskrank.cli import entry; entry()"]


def alive(pids: set[int]) -> set[int]:
    left = set()
    for p in pids:
        try:
            if (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z":
                left.add(p)
        except OSError:
            pass
    return left


def one_run(root: Path) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([*ENTRY, "mcp", "--config", str(root / "servers.json")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in proc.stderr:
        if "find_tools over" in line:
            break
    ready = time.perf_counter() - t0
    t1 = time.perf_counter()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "find_tools", "arguments": {"task": "list the files in the logs folder", "k": 5}}}
    for msg in (init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call):
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
    for line in proc.stdout:
        if '"id":2' in line.replace(" ", ""):
            break
    first = time.perf_counter() - t1
    kids = descendants(proc.pid)
    t2 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    stop = time.perf_counter() - t2
    time.sleep(0.2)
    left = len(alive(kids))
    t3 = time.perf_counter()
    out = subprocess.run([*ENTRY, "mcp", "--upstream", "sleep 301", "--startup-timeout", "2"], capture_output=True, text=True,
                         env=env, stdin=subprocess.DEVNULL, timeout=120)
    timeout = time.perf_counter() - t3
    sleeps = subprocess.run(["pgrep", "-x", "-f", "sleep 301"], capture_output=True, text=True).stdout.split()
    return {"ready_s": ready, "first_find_s": first, "sigterm_exit_s": stop, "children_left": left,
            "timeout_exit_s": timeout, "timeout_rc": out.returncode, "sleep_left": len(sleeps),
            "timeout_line": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers-bin", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ns = ap.parse_args()
    bins = Path(ns.servers_bin or Path(os.environ.get("RISKRANK_CI_CACHE") or Path.home() / ".cache" / "riskrank-ci")
                / "npm" / "node_modules" / ".bin")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "files").mkdir()
        servers = {"mcpServers": {
            "filesystem": {"command": str(bins / "mcp-server-filesystem"), "args": [str(root / "files")]},
            "memory": {"command": str(bins / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(root / "m.jsonl")}}}}
        (root / "servers.json").write_text(json.dumps(servers))
        runs = [one_run(root) for _ in range(ns.runs)]
    keys = ["ready_s", "first_find_s", "sigterm_exit_s", "timeout_exit_s"]
    rows = [[k, *(f"{r[k]:.2f}" for r in runs), f"{statistics.median(r[k] for r in runs):.2f}"] for k in keys]
    rows += [[k, *(str(r[k]) for r in runs), ""] for k in ("children_left", "timeout_rc", "sleep_left")]
    print(text_table(["measure", *(f"run {i + 1}" for i in range(len(runs))), "median"], rows))
    print(f"timeout line: {runs[0]['timeout_line']}")
    if ns.json:
        write_json(ns.json, {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
