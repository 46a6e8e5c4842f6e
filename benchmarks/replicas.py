"""Two gateway replicas on one PostgreSQL, eight agents with three policies, calls decided at
the other replica's console, and a replica killed mid-run.

    python benchmarks/replicas.py [--postgres URL] [--calls 2000] [--out benchmarks/results/replicas.json]

**The team run.** Replicas A and B (``riskrank mcp`` over streamable HTTP, ``--state
postgresql://...``, ``--console``, the clients file and the three named policies of
tests/team_support.py, the FastMCP upstream tests/team_upstream.py). Eight agents, four per
replica, each its own MCP session: three read-only CI bots, three on-call pagers, two
operators. Each agent runs ``find_tools`` once, then its share of ``--calls`` ``call_tool``s:
reads (``read_service_logs`` with an argument unique to the call), and, for the pagers, 5 % of
all calls are ``restart_service`` (level 3 = on-call's ``confirm_level``), each held until an
operator approves it at the *other* replica's console (two operator threads, one per console,
each deciding only what the other replica holds). The CI bots also try ``restart_service`` and
``drop_database`` now and then (never shown to them: refused). Counted from the one audit log
in PostgreSQL: lines lost or duplicated (every call's unique argument once, and only once),
decisions attributed to the right client and operator, calls allowed above the caller's
policy (widenings), and every call the upstream ran having its committed ``allowed`` line.

**The kill run.** Both replicas again; one agent sends 20 calls to A, which is killed with
SIGKILL after the upstream ran the 8th; then every call the upstream ran must have its
committed decision, and B must still serve a find and a call.

**The latency run.** What the store adds to a call: one agent's 300 sequential reads through
one gateway with its audit log in a JSONL file (``O_APPEND`` + fsync), then in PostgreSQL over
loopback; the difference of the p50s, in three rounds (their median and range).

Without ``--postgres`` (or ``$RISKRANK_TEST_POSTGRES``) a throwaway cluster is started with
``.ci/postgres.sh``. Writes the counts to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import postgres_support  # noqa: E402
import team_support as ts  # noqa: E402
from riskrank.fileio import write_json  # noqa: E402
from riskrank.serving.gateway.store import open_store  # noqa: E402

AGENTS = [("ci-bot", "A"), ("ci-lint", "B"), ("ci-docs", "A"), ("pager", "B"), ("pager-2", "A"), ("pager-3", "B"),
          ("alice", "A"), ("bob", "B")]
TASK = {"read-only": "read the logs of a service", "on-call": "restart a service or read its logs",
        "operator": "restart a service or read its logs"}


#: The refusals of a call the caller was never shown: outside its latest find_tools result, or
#: never offered to it by its policy.
NEVER_SHOWN = ("not_exposed", "denied_by_policy", "above_max_level")

def plan(calls: int) -> dict[str, list[tuple[str, dict]]]:
    """Each agent's call_tools: reads with unique arguments; the pagers' restarts (5 % of all
    calls); the bots' attempts at tools their policy never shows them."""
    per = calls // len(AGENTS)
    confirms = round(calls * 0.05)
    pagers = [n for n, _ in AGENTS if ts.ROLES[n] == "on-call"]
    out: dict[str, list[tuple[str, dict]]] = {}
    for name, _ in AGENTS:
        role = ts.ROLES[name]
        n_restart = confirms // len(pagers) + (1 if pagers.index(name) < confirms % len(pagers) else 0) if role == "on-call" else 0
        steps = []
        for i in range(per):
            tag = f"{name}-{i}"
            if role == "on-call" and i % (per // max(1, n_restart)) == 0 and sum(s[0] == "restart_service" for s in steps) < n_restart:
                steps.append(("restart_service", {"service": tag}))
            elif role == "read-only" and i % 25 == 7:
                steps.append(("restart_service" if i % 50 == 7 else "drop_database", {"service": tag} if i % 50 == 7 else {"name": tag}))
            else:
                steps.append(("read_service_logs", {"service": tag}))
        out[name] = steps
    return out


def operator(console: ts.Console, me: str, stop: threading.Event, decided: list[tuple[str, str]]) -> None:
    """Decide, at ``me``'s console, every request held at the other replica."""
    while not stop.is_set():
        for rid, _tool, replica in console.held():
            if replica and replica != me:
                r = console.decide(rid, note=f"approved at {me}")
                if r.status_code in (200, 303):
                    decided.append((rid, me))
        time.sleep(0.05)


def team_run(root: Path, url: str, calls: int) -> dict:
    ts.write_files(root, root / "ran.txt")
    reps = {name: ts.start_gateway(root, "--state", url, "--replica", name, "--console", "--admin-token-file",
                                   str(root / "admin"), "--confirm-timeout", "120") for name in ("A", "B")}
    urls = {name: u for name, (_, u, _) in reps.items()}
    steps = plan(calls)
    latencies: list[float] = []
    results: dict[str, list[dict]] = {}
    decided: list[tuple[str, str]] = []
    stop = threading.Event()
    consoles = {name: ts.Console(u.rsplit("/mcp", 1)[0], f"op-{name}") for name, u in urls.items()}
    ops = [threading.Thread(target=operator, args=(consoles[n], n, stop, decided), daemon=True) for n in consoles]
    for t in ops:
        t.start()

    async def agent(name: str, replica: str) -> None:
        target = ts.mcp_compat.ServerTarget(url=urls[replica], headers={"Authorization": f"Bearer {ts.TOKENS[name]}"})
        async with ts.mcp_compat.open_session(target) as s:
            found = ts.payload(await s.call_tool("find_tools", {"task": TASK[ts.ROLES[name]], "k": 5}))
            assert found.get("tools"), (name, found)
            out = []
            for tool, args in steps[name]:
                t0 = time.perf_counter()
                got = ts.payload(await s.call_tool("call_tool", {"name": tool, "arguments": args}))
                latencies.append(time.perf_counter() - t0)
                out.append(got)
            results[name] = out

    async def everyone() -> None:
        async with anyio.create_task_group() as tg:
            for name, replica in AGENTS:
                tg.start_soon(agent, name, replica)

    t0 = time.perf_counter()
    anyio.run(everyone)
    wall = time.perf_counter() - t0
    stop.set()
    for t in ops:
        t.join(10)
    for c in consoles.values():
        c.close()
    for proc, _, _ in reps.values():
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    with open_store(url, create=False) as store:
        lines = store.records()
    return check_team(lines, steps, results, decided, (root / "ran.txt").read_text().splitlines(), wall, latencies)


def _arg(rec: dict) -> str | None:
    args = rec.get("arguments") or {}
    return args.get("service") or args.get("name")


def check_team(lines, steps, results, decided, ran, wall, latencies) -> dict:
    calls = [r for r in lines if r.get("tool") not in (None, "find_tools") and r.get("decision") in ("allowed", "refused")]
    issued = {(name, args.get("service") or args.get("name")) for name, st in steps.items() for _, args in st}
    logged = [(r.get("client"), _arg(r)) for r in calls]
    lost = issued - set(logged)
    duplicated = len(logged) - len(set(logged))
    policy_of = {n: ts.POLICIES["policies"][ts.ROLES[n]] for n in ts.ROLES}
    widenings = [r for r in calls if r["decision"] == "allowed" and (
        r["level"] > policy_of[r["client"]]["max_level"] or r.get("policy") != ts.ROLES[r["client"]])]
    misattributed = [r for r in calls if not _arg(r) or not _arg(r).startswith(r["client"] + "-")]
    confirmed = [r for r in calls if r.get("confirmed")]
    pending = {r["request"]: r for r in lines if r.get("decision") == "pending"}
    replica_of = {name: rep for name, rep in AGENTS}
    wrong_operator = [r for r in confirmed if r.get("decided_by") != f"op-{'B' if replica_of[r['client']] == 'A' else 'A'}"]
    held_where = {rid: p.get("replica") for rid, p in pending.items()}
    decided_at_other = sum(1 for rid, me in decided if held_where.get(rid) not in (None, me))
    allowed_args = {_arg(r) for r in calls if r["decision"] == "allowed"}
    ran_args = [line.split(" ", 1)[1] for line in ran]
    ran_without_decision = [a for a in ran_args if a not in allowed_args]
    agent_errors = sum(1 for out in results.values() for o in out if "error" in o and not o["error"].startswith(NEVER_SHOWN))
    return {
        "calls_issued": len(issued), "call_lines": len(calls), "lost": len(lost), "duplicated": duplicated,
        "confirmations": len(confirmed), "decided_at_the_other_replica": decided_at_other,
        "confirmations_with_the_wrong_operator": len(wrong_operator), "misattributed": len(misattributed),
        "policy_widenings": len(widenings), "refused_never_shown": sum(1 for r in calls if r.get("code") in NEVER_SHOWN),
        "upstream_ran": len(ran_args), "ran_without_a_committed_decision": len(ran_without_decision),
        "unexpected_agent_errors": agent_errors, "wall_s": round(wall, 1),
        "call_latency_ms": {"p50": round(1000 * statistics.median(latencies), 1),
                            "p95": round(1000 * statistics.quantiles(latencies, n=20)[-1], 1)},
    }


def kill_run(root: Path, url: str) -> dict:
    ts.write_files(root, root / "ran.txt")
    reps = {name: ts.start_gateway(root, "--state", url, "--replica", name) for name in ("A", "B")}
    answered: list[str] = []

    async def calls() -> None:
        target = ts.mcp_compat.ServerTarget(url=reps["A"][1], headers={"Authorization": f"Bearer {ts.TOKENS['alice']}"})
        async with ts.mcp_compat.open_session(target) as s:
            await s.call_tool("find_tools", {"task": "read the logs of a service", "k": 5})
            for i in range(20):
                got = ts.payload(await s.call_tool("call_tool", {"name": "read_service_logs",
                                                                 "arguments": {"service": f"kill-{i}"}}))
                if "text" in got:
                    answered.append(f"kill-{i}")

    def agent() -> None:
        with contextlib.suppress(BaseException):  # the replica dies under the agent
            anyio.run(calls)

    t = threading.Thread(target=agent)
    t.start()
    ran_file = root / "ran.txt"
    deadline = time.time() + 120
    while time.time() < deadline and len(ran_file.read_text().splitlines() if ran_file.exists() else []) < 8:
        time.sleep(0.01)
    reps["A"][0].send_signal(signal.SIGKILL)
    reps["A"][0].wait(timeout=60)
    t.join(120)
    after = ts.run_as(reps["B"][1], ts.TOKENS["alice"], [("find_tools", {"task": "read the logs of a service", "k": 5}),
                                                         ("call_tool", {"name": "read_service_logs",
                                                                        "arguments": {"service": "after-kill"}})])
    reps["B"][0].send_signal(signal.SIGTERM)
    reps["B"][0].wait(timeout=120)
    ran = [line.split(" ", 1)[1] for line in ran_file.read_text().splitlines()]
    with open_store(url, create=False) as store:
        allowed = [_arg(r) for r in store.records() if r.get("decision") == "allowed" and r.get("tool") == "read_service_logs"]
    kill_ran = [a for a in ran if a.startswith("kill-")]
    return {"calls_sent": 20, "upstream_ran_before_the_kill": len(kill_ran), "answered_to_the_agent": len(answered),
            "decisions_committed": sum(1 for a in allowed if a.startswith("kill-")),
            "ran_without_a_committed_decision": sum(1 for a in kill_ran if a not in allowed),
            "duplicated": len(allowed) - len(set(allowed)),
            "other_replica_served_after": after[1].get("text") == "after-kill: all quiet"}


def latency_run(root: Path, url: str, calls: int = 300, rounds: int = 3) -> dict:
    """What the store adds to a call: one agent's sequential reads through one gateway, with
    the audit log as a JSONL file, then in the PostgreSQL store (p50 and p95 of each), in
    ``rounds`` rounds (the order alternating): the added p50 of each round, their median and
    range (this machine is shared: one round is not a measurement)."""
    ts.write_files(root)
    runs: list[dict] = []
    for r in range(rounds):
        got: dict = {}
        order = [("jsonl", ("--audit-log", str(root / f"audit-{r}.jsonl"))), ("postgresql", ("--state", url))]
        for backend, flags in order if r % 2 == 0 else order[::-1]:
            proc, mcp, _ = ts.start_gateway(root, *flags)
            lat: list[float] = []

            async def go(mcp: str = mcp, lat: list[float] = lat, r: int = r) -> None:
                target = ts.mcp_compat.ServerTarget(url=mcp, headers={"Authorization": f"Bearer {ts.TOKENS['alice']}"})
                async with ts.mcp_compat.open_session(target) as s:
                    await s.call_tool("find_tools", {"task": "read the logs of a service", "k": 5})
                    for i in range(calls + 20):
                        t0 = time.perf_counter()
                        await s.call_tool("call_tool", {"name": "read_service_logs", "arguments": {"service": f"lat-{r}-{i}"}})
                        if i >= 20:  # the first calls warm the connections
                            lat.append(time.perf_counter() - t0)

            anyio.run(go)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
            got[backend] = {"p50_ms": round(1000 * statistics.median(lat), 2),
                            "p95_ms": round(1000 * statistics.quantiles(lat, n=20)[-1], 2)}
        got["added_p50_ms"] = round(got["postgresql"]["p50_ms"] - got["jsonl"]["p50_ms"], 2)
        runs.append(got)
    added = [g["added_p50_ms"] for g in runs]
    return {"calls": calls, "rounds": runs, "added_p50_ms": round(statistics.median(added), 2),
            "added_p50_range_ms": [min(added), max(added)],
            "jsonl_p50_ms": round(statistics.median(g["jsonl"]["p50_ms"] for g in runs), 2),
            "postgresql_p50_ms": round(statistics.median(g["postgresql"]["p50_ms"] for g in runs), 2)}


def doc_table(store: dict, replicas: dict) -> str:
    """docs/benchmarks.md's "Teams" figures from the two artefacts (state_store.json, replicas.json)."""
    sq, pg = store["sqlite"], store["postgresql"]
    team, kill, lat = replicas["team"], replicas["kill"], replicas["latency"]
    rows = [
        ("SQLite audit appends, 8 writers, fsync'd group commits", f"{sq['eight_writers']['lines_per_s']:,.0f} lines/s "
         f"(p50 {sq['eight_writers']['append_p50_ms']} ms, p99 {sq['eight_writers']['append_p99_ms']} ms)", "≥ 1,000 lines/s"),
        ("SQLite audit appends, 1 writer", f"{sq['one_writer']['lines_per_s']:,.0f} lines/s", ""),
        ("PostgreSQL append over loopback (store alone)", f"p50 {pg['append_p50_ms']} ms, p99 {pg['append_p99_ms']} ms", ""),
        ("PostgreSQL pending + decide (store alone)", f"p50 {pg['pending_decide_p50_ms']} ms", ""),
        (f"a call through the gateway, JSONL audit log ({lat['calls']} sequential, median of {len(lat['rounds'])} rounds)",
         f"p50 {lat['jsonl_p50_ms']} ms", ""),
        ("the same, audit log in PostgreSQL", f"p50 {lat['postgresql_p50_ms']} ms; added per round: median "
         f"{lat['added_p50_ms']} ms, range {lat['added_p50_range_ms'][0]} to {lat['added_p50_range_ms'][1]} ms", "≤ 3 ms added"),
        (f"two replicas, {replicas['agents']} agents, calls", f"{team['calls_issued']:,} ({team['call_lines']:,} call lines "
         f"in the one log) in {team['wall_s']} s", "2,000"),
        ("audit lines lost / duplicated", f"{team['lost']} / {team['duplicated']}", "0 / 0"),
        ("confirmations decided at the other replica's console", f"{team['decided_at_the_other_replica']} of "
         f"{team['confirmations']}", "5 %"),
        ("decisions with the wrong client / operator", f"{team['misattributed']} / {team['confirmations_with_the_wrong_operator']}",
         "0 / 0"),
        ("calls allowed above the caller's policy", str(team["policy_widenings"]), "0"),
        # (runs before the refusal codes were split counted not_exposed alone: every such refusal was one)
        ("calls refused as never shown (the bots' attempts)", str(team.get("refused_never_shown", team.get("refused_not_exposed"))), ""),
        ("calls the upstream ran without a committed decision", str(team["ran_without_a_committed_decision"]), "0"),
        ("kill -9 of a replica during 20 calls: ran before the kill / decisions committed",
         f"{kill['upstream_ran_before_the_kill']} / {kill['decisions_committed']}", "every one"),
        ("… calls run without a committed decision; duplicated lines", f"{kill['ran_without_a_committed_decision']}; "
         f"{kill['duplicated']}", "0"),
        ("… the other replica served a find and a call after it", "yes" if kill["other_replica_served_after"] else "no", "yes"),
    ]
    lines = ["| measured | figure | target |", "| --- | --- | --- |"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--postgres", default=os.environ.get(postgres_support.ENV_URL))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replicas.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cluster = None
    if not args.postgres:
        cluster = postgres_support.Cluster()
        args.postgres = cluster.start()
    try:
        out = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "agents": len(AGENTS),
               "replicas": 2, "backend": "postgresql"}
        for what, fn in (("team", lambda r, u: team_run(r, u, args.calls)), ("kill", kill_run), ("latency", latency_run)):
            name, url = postgres_support.fresh_schema(args.postgres)
            with tempfile.TemporaryDirectory() as tmp:
                out[what] = fn(Path(tmp), url)
            postgres_support.drop_schema(args.postgres, name)
            print(what, json.dumps(out[what], indent=1), flush=True)
        write_json(args.out, out)
        print(f"wrote {args.out}")
    finally:
        if cluster is not None:
            cluster.remove()


if __name__ == "__main__":
    main()
