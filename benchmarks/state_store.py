"""How fast the gateway's state store keeps its audit log and its approvals.

    python benchmarks/state_store.py [--seconds 10] [--postgres URL] [--out benchmarks/results/state_store.json]

- **SQLite, sustained**: 8 writer threads append audit records (about 400 bytes each, like
  the gateway's ``allowed`` lines) for ``--seconds``; every append returns only once its group
  commit is fsync'd (WAL, ``synchronous=FULL``). Lines per second, p50/p99 of one append, and
  how many records one commit carried. The same with 1 writer, for the one-fsync-per-record
  rate group commit is there to beat.
- **PostgreSQL over loopback**: p50/p99 of one ``append`` (1,000 in a row) and of one
  ``put_pending`` + ``decide`` pair, with a plain ``SELECT 1`` through psycopg beside them (the
  round trip every call pays anyway). The server: ``--postgres``, else
  ``$RISKRANK_TEST_POSTGRES``, else a throwaway cluster started here (tests/postgres_support.py)
  with PostgreSQL's defaults (fsync on, synchronous_commit on).

Targets: SQLite >= 1,000 lines/s sustained on a 2-core machine; PostgreSQL p50 <= 3 ms per call.
The SQLite files live in a temporary directory in the checkout's ``.cache`` (on its disk, not
a RAM disk, where an fsync costs nothing); the PostgreSQL tables in a schema of their own,
dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from riskrank.fileio import write_json
from riskrank.serving.gateway.auditlog import AuditLog
from riskrank.serving.gateway.store import SQLiteStore, open_store
from riskrank.tables import text_table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import postgres_support  # noqa: E402 - the tests' throwaway cluster

SQLITE_TARGET_LINES_S = 1000
POSTGRES_TARGET_P50_MS = 3.0


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def allowed_line(i: int) -> dict:
    """A record shaped like the gateway's ``allowed`` line for a filesystem read."""
    raw = AuditLog(None).line(
        task=f"summarise the notes in the project folder and list what changed since yesterday (#{i})",
        tool="filesystem/read_text_file", level=1, provenance="policy", decision="allowed", code=None,
        reason="allowed: level 1 <= max_level 3; exposed by find_tools in this session",
        session=f"s-{i % 64:04d}-8f3a2c", client="alice@example.org", upstream="filesystem",
        arguments={"path": f"/srv/projects/notes/{i % 500:04d}.md", "head": 200}, elapsed_ms=3.2)
    return json.loads(raw)


def sqlite_sustained(root: Path, threads: int, seconds: float) -> dict:
    store = open_store(root / f"sqlite-{threads}")
    commits: list[int] = []
    real = SQLiteStore._commit

    def counted(conn: sqlite3.Connection, batch: list) -> None:
        real(conn, batch)
        commits.append(sum(len(b.rows) for b in batch))

    SQLiteStore._commit = staticmethod(counted)  # type: ignore[method-assign]
    latencies: list[list[float]] = [[] for _ in range(threads)]
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(threads + 1)

    def writer(t: int) -> None:
        mine, i = latencies[t], t
        barrier.wait()
        while time.perf_counter() < stop:
            rec = allowed_line(i)
            t0 = time.perf_counter()
            store.append(rec)
            mine.append(time.perf_counter() - t0)
            i += threads

    pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in pool:
        th.join()
    wall = time.perf_counter() - t0
    SQLiteStore._commit = staticmethod(real)  # type: ignore[method-assign]
    lines = store.count()
    store.close()
    every = [x for xs in latencies for x in xs]
    return {"threads": threads, "seconds": round(wall, 2), "lines": lines, "lines_per_s": round(lines / wall, 1),
            "append_p50_ms": round(pct(every, 50) * 1e3, 3), "append_p99_ms": round(pct(every, 99) * 1e3, 3),
            "commits": len(commits), "records_per_commit": round(lines / max(1, len(commits)), 2)}


def postgres_latency(url: str, n: int) -> dict:
    import psycopg

    schema, scoped = postgres_support.fresh_schema(url)  # tables of its own, dropped afterwards
    with psycopg.connect(url, autocommit=True) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        fsync = conn.execute("SHOW fsync").fetchone()[0]
        sync_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]
        ping = []
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            ping.append(time.perf_counter() - t0)
    store = open_store(scoped)
    for i in range(20):  # warm the pool and the server's caches
        store.append(allowed_line(i))
    appends, pairs = [], []
    for i in range(n):
        rec = allowed_line(i)
        t0 = time.perf_counter()
        store.append(rec)
        appends.append(time.perf_counter() - t0)
    for i in range(n // 2):
        now = time.time()
        t0 = time.perf_counter()
        store.put_pending(f"bench-{i}", {"tool": "filesystem/write_file", "arguments": {"path": f"/tmp/{i}"}},
                          replica="bench", client="alice", asked_at=now, deadline=now + 120)
        store.decide(f"bench-{i}", "accept", by="operator", note=None, at=now)
        pairs.append(time.perf_counter() - t0)
    store.close()
    postgres_support.drop_schema(url, schema)

    def ms(xs: list[float], q: int) -> float:
        return round(pct(xs, q) * 1e3, 3)

    return {"server": server, "fsync": fsync, "synchronous_commit": sync_commit, "n": n,
            "select1_p50_ms": ms(ping, 50), "select1_p99_ms": ms(ping, 99),
            "append_p50_ms": ms(appends, 50), "append_p99_ms": ms(appends, 99),
            "pending_decide_p50_ms": ms(pairs, 50), "pending_decide_p99_ms": ms(pairs, 99),
            "per_call_p50_ms": round(max(pct(appends, 50), pct(pairs, 50) / 2) * 1e3, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="How long the SQLite writers run.")
    ap.add_argument("--postgres", help="A PostgreSQL URL (default: $RISKRANK_TEST_POSTGRES, else a throwaway cluster).")
    ap.add_argument("--n", type=int, default=1000, help="Sequential PostgreSQL appends timed.")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "state_store.json"))
    args = ap.parse_args()

    import psycopg

    (ROOT / ".cache").mkdir(exist_ok=True)  # git-ignored, and on the checkout's disk
    root = Path(tempfile.mkdtemp(prefix="state-bench-", dir=ROOT / ".cache"))
    cluster = None
    try:
        record_bytes = len(json.dumps(allowed_line(0), separators=(",", ":")).encode())
        one = sqlite_sustained(root, 1, min(3.0, args.seconds))
        eight = sqlite_sustained(root, 8, args.seconds)
        url = args.postgres or os.environ.get(postgres_support.ENV_URL)
        where = "given"
        if not url:
            cluster = postgres_support.Cluster()
            url = cluster.start()
            where = "throwaway cluster (tests/postgres_support.py, PostgreSQL defaults)"
        pg = {**postgres_latency(url, args.n), "where": where}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if cluster is not None:
            cluster.remove()
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "sqlite": sqlite3.sqlite_version, "psycopg": psycopg.__version__,
                    "load_avg": [round(x, 2) for x in os.getloadavg()]},
        "record_bytes": record_bytes,
        "sqlite": {"one_writer": one, "eight_writers": eight},
        "postgresql": pg,
        "targets": {"sqlite_lines_per_s": SQLITE_TARGET_LINES_S, "postgresql_p50_ms_per_call": POSTGRES_TARGET_P50_MS},
        "met": {"sqlite": eight["lines_per_s"] >= SQLITE_TARGET_LINES_S,
                "postgresql": pg["per_call_p50_ms"] <= POSTGRES_TARGET_P50_MS},
    }
    write_json(args.out, result)
    print(f"records of {record_bytes} bytes; {os.cpu_count()} CPUs; SQLite {sqlite3.sqlite_version}; "
          f"PostgreSQL {pg['server']} (fsync {pg['fsync']}, synchronous_commit {pg['synchronous_commit']})")
    print(text_table(["SQLite appends (fsync'd group commits)", "lines/s", "p50 ms", "p99 ms", "records/commit"],
                     [[f"{r['threads']} writer(s), {r['seconds']} s", f"{r['lines_per_s']:,.0f}", r["append_p50_ms"],
                       r["append_p99_ms"], r["records_per_commit"]] for r in (one, eight)]))
    print()
    print(text_table(["PostgreSQL over loopback", "p50 ms", "p99 ms"],
                     [["SELECT 1 (psycopg, for reference)", pg["select1_p50_ms"], pg["select1_p99_ms"]],
                      [f"append ({pg['n']:,} in a row)", pg["append_p50_ms"], pg["append_p99_ms"]],
                      [f"put_pending + decide ({pg['n'] // 2:,} pairs)", pg["pending_decide_p50_ms"],
                       pg["pending_decide_p99_ms"]]]))
    print()
    print(f"target SQLite >= {SQLITE_TARGET_LINES_S:,} lines/s: {eight['lines_per_s']:,.0f} "
          f"({'met' if result['met']['sqlite'] else 'NOT met'}); "
          f"target PostgreSQL p50 <= {POSTGRES_TARGET_P50_MS:g} ms per call: {pg['per_call_p50_ms']} ms "
          f"({'met' if result['met']['postgresql'] else 'NOT met'})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
