"""The gateway's state store, every test against SQLite and against PostgreSQL: round trips,
concurrent appends and deciders, compare-and-swap, the schema's versions and migrations, a
database that is down (at open, and mid-run), import and export, and ``riskrank state``."""

from __future__ import annotations

import csv
import io
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import postgres_support
from riskrank.cli import main
from riskrank.serving.gateway.auditlog import AuditLog
from riskrank.serving.gateway.store import (
    SCHEMA_VERSION,
    SchemaError,
    SQLiteStore,
    StoreError,
    connect,
    export_lines,
    import_audit_log,
    open_store,
)

THREADS = 8


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path) -> str:
    """Where a fresh store lives: a directory, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        return str(tmp_path / "state")
    url = request.getfixturevalue("postgres_url")
    name, scoped = postgres_support.fresh_schema(url)
    request.addfinalizer(lambda: postgres_support.drop_schema(url, name))
    return scoped


@pytest.fixture
def store(where):
    s = open_store(where)
    yield s
    s.close()


def record(i: int = 0, **extra) -> dict:
    """A line like the gateway's ``allowed`` ones."""
    return {"time": f"2026-01-01T00:00:{i % 60:02d}.000Z", "task": f"read the notes {i}", "tool": "fs/read_file",
            "level": 1, "decision": "allowed", "reason": None, "session": "s-1", "client": "alice", **extra}


def set_version(where: str, version: int) -> None:
    with connect(where) as s:
        s._do("test", lambda conn: s._ex(conn, "UPDATE riskrank_schema SET version = ?", (version,)))


def run_threads(n: int, target) -> list:
    """``target(i)`` in ``n`` threads released together; their results (an exception re-raised)."""
    barrier, results, errors = threading.Barrier(n), [None] * n, []

    def one(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# -- round trips ----------------------------------------------------------------------------------------
def test_audit_round_trip(store):
    assert store.count() == 0 and store.records() == []
    first = store.append(record(1))
    more = store.append_many([record(2), record(3, note="ünïcode ✓")])
    assert first < more[0] < more[1]
    assert store.append_many([]) == []
    assert store.count() == 3
    got = store.records()
    assert [r["id"] for r in got] == [first, *more]
    assert got[2] == {**record(3, note="ünïcode ✓"), "id": more[1]}
    assert [r["id"] for r in store.records(newest_first=True)] == [more[1], more[0], first]
    assert [r["id"] for r in store.records(newest_first=True, limit=2)] == [more[1], more[0]]
    assert [r["id"] for r in store.records(before=more[1])] == [first, more[0]]
    assert [r["id"] for r in store.records(after=first, limit=1)] == [more[0]]
    assert store.records(after=more[1]) == []
    odd = record(4, session="s\x00\ud800", task="\ud83d lone half")  # a NUL and lone surrogates from a client
    odd_id = store.append(odd)
    assert store.records(after=odd_id - 1) == [{**odd, "id": odd_id}]
    with pytest.raises(StoreError, match="own 'id'"):
        store.append({"id": 3, "time": "x"})
    with pytest.raises(StoreError, match="JSON"):
        store.append({"x": float("nan")})


def test_approvals_round_trip(store):
    assert store.approval("nope") is None and store.pending() == [] and store.decided() == []
    store.put_pending("b", {"tool": "fs/write", "arguments": {"p": 1}}, replica="r2", client=None, asked_at=20.0, deadline=80.0)
    store.put_pending("a", {"tool": "fs/delete"}, replica="r1", client="alice", asked_at=10.0, deadline=70.0)
    assert [p["id"] for p in store.pending()] == ["a", "b"]  # oldest first
    assert store.approval("a") == {"id": "a", "status": "pending", "request": {"tool": "fs/delete"}, "replica": "r1",
                                   "client": "alice", "asked_at": 10.0, "deadline": 70.0, "decided_at": None, "by": None,
                                   "note": None}
    assert store.decide("a", "accept", by="op", note="fine", at=30.0) is True
    assert store.decide("a", "decline", by="op2", note=None, at=31.0) is False  # already decided
    assert store.decide("missing", "accept", by="op", note=None, at=31.0) is False
    assert store.decide("b", "timeout", by=None, note="nobody", at=90.0) is True
    a = store.approval("a")
    assert (a["status"], a["by"], a["note"], a["decided_at"]) == ("accept", "op", "fine", 30.0)
    assert store.pending() == []
    assert [d["id"] for d in store.decided()] == ["b", "a"]  # newest decided first
    assert [d["id"] for d in store.decided(limit=1)] == ["b"]
    with pytest.raises(ValueError, match="unknown action"):
        store.decide("a", "maybe", by=None, note=None, at=1.0)
    with pytest.raises(StoreError):
        store.put_pending("a", {}, replica="r1", client=None, asked_at=1.0, deadline=2.0)  # the id is taken


def test_docs_and_exposure_round_trip(store):
    assert store.get_doc("pins", "servers") is None
    assert store.put_doc("pins", "servers", {"fs": {"tools": {}}}, expect=None) == 1
    assert store.put_doc("pins", "servers", {"other": 1}, expect=None) is None  # exists already
    assert store.get_doc("pins", "servers") == (1, {"fs": {"tools": {}}})
    assert store.put_doc("pins", "servers", {"fs": {"tools": {"a": 1}}}, expect=1) == 2
    assert store.put_doc("pins", "servers", {"stale": True}, expect=1) is None  # the version moved
    assert store.get_doc("pins", "servers") == (2, {"fs": {"tools": {"a": 1}}})
    assert store.put_doc("pins", "other", [1, 2], expect=None) == 1  # kinds and keys are separate documents
    assert store.exposure("s1") is None
    store.put_exposure("s1", "read notes", ["fs/read", "fs/list"], 5.0)
    assert store.exposure("s1") == ("read notes", ["fs/read", "fs/list"], 5.0)
    store.put_exposure("s1", "write notes", [], 6.0)  # the latest find_tools replaces the one before
    assert store.exposure("s1") == ("write notes", [], 6.0)


def test_health_and_url(store, where):
    h = store.health()
    assert h == {"ok": True, "backend": store.backend, "url": store.url, "schema": SCHEMA_VERSION, "error": None}
    assert store.backend == ("postgresql" if where.startswith("postgresql://") else "sqlite")
    store.close()
    h = store.health()  # never raises
    assert h["ok"] is False and h["error"]
    with pytest.raises(StoreError):
        store.count()


# -- concurrency -------------------------------------------------------------------------------------------
def test_appends_from_8_threads_are_durable_and_ordered(store, where):
    per = 25
    with open_store(where) as other:  # another connection (another replica): sees what append() returned
        def writer(t: int) -> list[int]:
            ids = []
            for n in range(per):
                i = store.append(record(n, thread=t, n=n))
                seen = other.records(after=i - 1, limit=1)
                assert seen and seen[0]["id"] == i and seen[0]["thread"] == t and seen[0]["n"] == n
                ids.append(i)
            return ids

        results = run_threads(THREADS, writer)
    every = [i for ids in results for i in ids]
    assert len(set(every)) == THREADS * per == store.count()
    for ids in results:
        assert ids == sorted(ids)  # each writer's ids increase
    rows = store.records()
    assert [r["id"] for r in rows] == sorted(every)
    for t in range(THREADS):  # and each writer's records read back in the order it wrote them
        assert [r["n"] for r in rows if r["thread"] == t] == list(range(per))


def test_sqlite_group_commit_commits_concurrent_callers_together(tmp_path, monkeypatch):
    """While one transaction is being committed, the callers that arrive meanwhile are
    committed together in the next one, and each returns only after its own commit."""
    s = open_store(tmp_path / "state")
    batches: list[int] = []
    real = SQLiteStore._commit

    def commit(conn, batch):
        batches.append(len(batch))
        if len(batches) == 1:  # hold the first commit until every other caller has queued up
            deadline = time.monotonic() + 30
            while s._queue.qsize() < THREADS - len(batch) and time.monotonic() < deadline:
                time.sleep(0.001)
        real(conn, batch)

    monkeypatch.setattr(SQLiteStore, "_commit", staticmethod(commit))
    ids = run_threads(THREADS, lambda i: s.append(record(i, k=i)))
    assert sorted(ids) == list(range(1, THREADS + 1))
    assert sum(batches) == THREADS and len(batches) <= 2  # eight callers, at most two fsync'd commits
    assert {r["k"]: r["id"] for r in s.records()} == dict(enumerate(ids))
    s.close()


def test_decide_is_exactly_once(where):
    """Eight deciders race for each request, over two store objects (two replicas)."""
    stores = [open_store(where), open_store(where)]
    actions = ["accept", "decline", "cancel", "timeout"] * 2
    try:
        for k in range(5):
            stores[0].put_pending(f"r{k}", {"tool": "t"}, replica="r1", client=None, asked_at=float(k), deadline=99.0)
            won = run_threads(THREADS, lambda i, k=k: stores[i % 2].decide(f"r{k}", actions[i], by=f"op{i}", note=None,
                                                                        at=100.0 + i))
            assert won.count(True) == 1
            winner = won.index(True)
            a = stores[1].approval(f"r{k}")
            assert (a["status"], a["by"], a["decided_at"]) == (actions[winner], f"op{winner}", 100.0 + winner)
    finally:
        for s in stores:
            s.close()


def test_put_doc_cas_has_one_winner(where):
    stores = [open_store(where), open_store(where)]
    try:
        made = run_threads(THREADS, lambda i: stores[i % 2].put_doc("pins", "servers", {"by": i}, expect=None))
        assert sorted(made, key=str) == [1] + [None] * (THREADS - 1)
        version, _ = stores[1].get_doc("pins", "servers")
        moved = run_threads(THREADS, lambda i: stores[i % 2].put_doc("pins", "servers", {"by": i}, expect=version))
        assert sorted(moved, key=str) == [version + 1] + [None] * (THREADS - 1)
        winner = moved.index(version + 1)
        assert stores[0].get_doc("pins", "servers") == (version + 1, {"by": winner})
    finally:
        for s in stores:
            s.close()


# -- the schema ----------------------------------------------------------------------------------------------
def test_fresh_store_gets_the_schema(where):
    with connect(where) as s:
        assert s.health()["schema"] is None
        with pytest.raises(SchemaError, match="not created") as err:
            s.check()
        assert "riskrank state migrate --state" in str(err.value)
    with pytest.raises(SchemaError, match="not created"):
        open_store(where, create=False)
    with open_store(where) as s:
        s.check()
        assert s.health()["schema"] == SCHEMA_VERSION
        assert s.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)


def test_older_schema_is_refused_until_migrated(where):
    open_store(where).close()
    set_version(where, 0)
    for create in (True, False):  # never upgraded implicitly
        with pytest.raises(SchemaError) as err:
            open_store(where, create=create)
        msg = str(err.value)
        assert "version 0" in msg and f"riskrank's {SCHEMA_VERSION}" in msg and "older" in msg
        assert f"riskrank state migrate --state {store_url(where)}" in msg
    with connect(where) as s:
        h = s.health()
        assert (h["ok"], h["schema"]) == (False, 0) and "older" in h["error"]
        assert s.migrate() == (0, SCHEMA_VERSION)
    with open_store(where) as s:
        assert s.health()["ok"]


def test_newer_schema_is_refused(where):
    open_store(where).close()
    set_version(where, SCHEMA_VERSION + 1)
    with pytest.raises(SchemaError, match=f"version {SCHEMA_VERSION + 1}, newer") as err:
        open_store(where)
    assert "riskrank state migrate" in str(err.value)
    with connect(where) as s, pytest.raises(SchemaError, match="newer"):
        s.migrate()  # never downgrades


def test_two_migrations_at_once_one_waits(where):
    stores = [connect(where), connect(where)]
    try:
        results = run_threads(2, lambda i: stores[i].migrate())
    finally:
        for s in stores:
            s.close()
    assert sorted(results) == [(0, SCHEMA_VERSION), (SCHEMA_VERSION, SCHEMA_VERSION)]
    with open_store(where, create=False) as s:
        assert s.health()["schema"] == SCHEMA_VERSION


def store_url(where: str) -> str:
    with connect(where) as s:
        return s.url


# -- a database that is down --------------------------------------------------------------------------------------
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_postgres_down_at_open_names_the_url_not_the_password(monkeypatch, capsys):
    postgres_support.need_psycopg()
    port = closed_port()
    url = f"postgresql://alice:s3cret-pw@127.0.0.1:{port}/team?application_name=gw"
    with pytest.raises(StoreError) as err:
        open_store(url)
    msg = str(err.value)
    assert msg.startswith(f"cannot reach the state store postgresql://alice@127.0.0.1:{port}/team")
    assert "s3cret" not in msg and "\n" not in msg
    with pytest.raises(StoreError, match="cannot reach") as err:
        open_store(f"postgresql://bob@127.0.0.1:{port}/db?password=other-secret")
    assert "other-secret" not in str(err.value)
    code, err = run_cli(["status", "--state", url], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: cannot reach the state store postgresql://alice@") and "s3cret" not in err


def test_sqlite_that_cannot_be_created(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot create the state store"):
        open_store(tmp_path / "file" / "state")
    with pytest.raises(StoreError, match="no state store there"):
        open_store(tmp_path / "missing", create=False)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "state.sqlite3").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="state store"):
        open_store(tmp_path / "junk")


def test_postgres_down_mid_run_then_back():
    """Only against a cluster this test started itself: it is stopped under the store."""
    postgres_support.need_psycopg()
    cluster = postgres_support.start_cluster()
    try:
        s = open_store(cluster.url)
        first = s.append(record(1))
        cluster.stop()
        for call in (lambda: s.append(record(2)), s.count, s.pending, lambda: s.get_doc("pins", "servers"),
                     lambda: s.decide("x", "accept", by=None, note=None, at=1.0)):
            with pytest.raises(StoreError, match=re.escape("state store postgresql://postgres@127.0.0.1")):
                call()
        h = s.health()
        assert h["ok"] is False and "cannot reach" in h["error"]
        cluster.start()
        # the pool reconnects on its own; a call may meet its backoff once
        for _ in range(20):
            try:
                second = s.append(record(3))
                break
            except StoreError:
                time.sleep(0.5)
        else:
            pytest.fail("the store did not reconnect after the server came back")
        assert second > first and s.count() == 2 and s.health()["ok"]
        s.close()
    finally:
        cluster.remove()


# -- import and export -----------------------------------------------------------------------------------------------
def gateway_log(path: Path, n: int = 5) -> Path:
    log = AuditLog(path)
    for i in range(n):
        log.write(task=f"task {i}", tool="fs/read_file", level=1, decision="allowed", reason=None, session="s-1")
    log.write(task="task 0", tool="fs/read_file", level=1, decision="allowed", reason=None, session="s-1")
    log.write(task=None, tool="fs/delete", level=4, decision="refused", code="denied", reason="=cmd|' /C calc'!A0")
    log.close()
    return path


def test_import_is_idempotent(store, tmp_path):
    path = gateway_log(tmp_path / "audit.jsonl")
    lines = path.read_text().splitlines()
    assert import_audit_log(store, path) == (len(lines), 0)
    assert import_audit_log(store, path) == (0, len(lines))
    assert [json.dumps({k: v for k, v in r.items() if k != "id"}, separators=(",", ":"), ensure_ascii=False)
            for r in store.records()] == lines
    with path.open("a") as fh:  # the log grew: only the new lines go in
        fh.write(lines[0] + "\n")  # a repeat of an existing line is a record of its own
    assert import_audit_log(store, path) == (1, len(lines))
    assert store.count() == len(lines) + 1


def test_import_refuses_a_bad_file_whole(store, tmp_path):
    path = gateway_log(tmp_path / "audit.jsonl")
    with path.open("a") as fh:
        fh.write('{"time": "t", "tool": "x", "tool": "y"}\n')
    with pytest.raises(StoreError, match=r"audit.jsonl: line 8: duplicate key"):
        import_audit_log(store, path)
    assert store.count() == 0  # checked before anything went in
    path.write_text('{"time": "t", "decision": "allowed"}\n[1, 2]\n')
    with pytest.raises(StoreError, match="line 2: not a JSON object"):
        import_audit_log(store, path)
    path.write_text('{"task": "read my notes", "gold": ["read_notes"]}\n')  # another JSONL file: not imported as records
    with pytest.raises(StoreError, match="line 1: not an audit record"):
        import_audit_log(store, path)
    with pytest.raises(StoreError, match=re.escape("missing.jsonl: No such file")):
        import_audit_log(store, tmp_path / "missing.jsonl")


def test_export_round_trips(store, tmp_path):
    path = gateway_log(tmp_path / "audit.jsonl")
    import_audit_log(store, path)
    ids = store.append_many([record(1, task="\uff1dcmd()"), record(2, reason="-starts with a dash")])
    jsonl = b"".join(export_lines(store, "audit", "jsonl"))
    original = path.read_bytes()
    assert jsonl.startswith(original)  # imported lines export as they were written
    assert [json.loads(x) for x in jsonl.decode().splitlines()] == [{k: v for k, v in r.items() if k != "id"}
                                                                   for r in store.records()]
    rows = list(csv.DictReader(io.StringIO(b"".join(export_lines(store, "audit", "csv")).decode())))
    assert [int(r["id"]) for r in rows] == [r["id"] for r in store.records()]
    assert [json.loads(r["record"]) for r in rows] == [json.loads(x) for x in jsonl.decode().splitlines()]
    assert rows[-1]["reason"] == "'-starts with a dash" and rows[-2]["tool"] == "fs/read_file"
    assert rows[-2]["task"] == "'\uff1dcmd()"  # a full-width formula sign is one to a spreadsheet
    assert rows[-3]["reason"].startswith("'=")  # no formula reaches a spreadsheet
    assert int(rows[-1]["id"]) == ids[1]
    store.put_pending("p1", {"tool": "t", "arguments": {"x": [1]}}, replica="r", client="c", asked_at=1.0, deadline=2.0)
    store.decide("p1", "decline", by="op", note="no", at=1.5)
    (got,) = [json.loads(x) for x in b"".join(export_lines(store, "approvals", "jsonl")).decode().splitlines()]
    assert got == store.approval("p1")
    (row,) = csv.DictReader(io.StringIO(b"".join(export_lines(store, "approvals", "csv")).decode()))
    assert (row["status"], row["by"], json.loads(row["request"])) == ("decline", "op", {"tool": "t", "arguments": {"x": [1]}})


# -- riskrank state ----------------------------------------------------------------------------------------------------
def cli(*args: str):
    return CliRunner().invoke(main, ["state", *args])


def test_cli_migrate_status_import_export(where, tmp_path):
    url = store_url(where)
    res = cli("migrate", "--state", where)
    assert res.exit_code == 0 and f"schema 0 -> {SCHEMA_VERSION}" in res.output, res.output
    res = cli("migrate", "--state", where)
    assert res.exit_code == 0 and f"already at {SCHEMA_VERSION}" in res.output
    log = gateway_log(tmp_path / "audit.jsonl")
    res = cli("import", "--state", where, "--audit-log", str(log))
    assert res.exit_code == 0 and "imported 7 records" in res.output and "(0 were already there)" in res.output, res.output
    res = cli("import", "--state", where, "--audit-log", str(log))
    assert "imported 0 records" in res.output and "(7 were already there)" in res.output
    res = cli("status", "--state", where)
    assert res.exit_code == 0, res.output
    assert f"url      {url}" in res.output and "audit    7 lines" in res.output and "pending  0 approvals" in res.output
    status = json.loads(cli("status", "--state", where, "--json").output)
    assert status["ok"] and status["schema"] == SCHEMA_VERSION and status["counts"] == {"audit": 7, "pending": 0}
    out = tmp_path / "out.jsonl"
    res = cli("export", "--state", where, "--what", "audit", "--out", str(out))
    assert res.exit_code == 0 and out.read_bytes() == log.read_bytes(), res.output
    res = cli("export", "--state", where, "--what", "audit", "--format", "csv", "--out", str(out))
    assert res.exit_code != 0 and "exists; pass --force" in str(res.exception or res.output)
    res = cli("export", "--state", where, "--what", "audit", "--format", "csv", "--out", str(out), "--force")
    assert res.exit_code == 0 and out.read_text().startswith("id,time,task")
    res = cli("export", "--state", where, "--what", "approvals", "--out", str(tmp_path / "a.jsonl"))
    assert res.exit_code == 0 and (tmp_path / "a.jsonl").read_text() == ""


def test_cli_status_of_an_old_schema_says_migrate(where):
    cli("migrate", "--state", where)
    set_version(where, 0)
    res = cli("status", "--state", where)
    assert res.exit_code == 1 and "schema   0 (" in res.output and "riskrank state migrate" in res.output


def run_cli(args, monkeypatch, capsys) -> tuple[int, str]:
    """Through the real entry point: the error policy (one line, exit 2)."""
    import sys

    from riskrank.cli import run

    monkeypatch.setattr(sys, "argv", ["riskrank", "state", *args])
    code = run()
    cap = capsys.readouterr()
    return code, cap.err


def test_cli_bad_input_is_one_line(tmp_path, monkeypatch, capsys):
    state = str(tmp_path / "state")
    code, err = run_cli(["import", "--state", state, "--audit-log", str(tmp_path / "missing.jsonl")], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: --audit-log") and "No such file" in err and "Traceback" not in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"time": "t", "decision": "allowed"}\n{"broken": \n')
    code, err = run_cli(["import", "--state", state, "--audit-log", str(bad)], monkeypatch, capsys)
    assert code == 2 and "bad.jsonl: line 2: invalid JSON" in err and err.count("\n") == 1
    assert not Path(state).exists()  # checked before the store was opened: nothing created
    code, err = run_cli(["export", "--state", state, "--what", "pins", "--out", str(tmp_path / "x")], monkeypatch, capsys)
    assert code == 2 and "'pins' is not one of 'audit', 'approvals'" in err
    code, err = run_cli(["status", "--state", str(tmp_path / "nowhere")], monkeypatch, capsys)
    assert code == 2 and "no state store there" in err
    assert not (tmp_path / "nowhere").exists()  # status creates nothing
    code, err = run_cli(["export", "--state", str(tmp_path / "nowhere"), "--what", "audit", "--out", str(tmp_path / "x")],
                        monkeypatch, capsys)
    assert code == 2 and "no state store there" in err and not (tmp_path / "x").exists()
