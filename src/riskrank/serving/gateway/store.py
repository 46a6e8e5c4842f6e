"""The gateway's one state store: its audit log, the approvals waiting for an operator, the
pins, and each session's exposure and record (the session guard's), in one database that every replica of a gateway shares.

Why a database: a team runs several gateway replicas behind one address. An operator's
approval must reach the replica whose agent is waiting, a pin one replica took must hold on
the others, and the audit log must be one log. Files on one machine cannot give that; one
database can. Two backends, one schema, the same SQL where SQL allows it:

- **SQLite** (``--state DIR``): ``DIR/state.sqlite3``, one machine, no server. Appends are
  group-committed: callers hand their records to one writer thread, which commits whatever
  has queued up in one transaction (WAL, ``synchronous=FULL``: fsync'd at each commit) and
  only then releases each caller. One fsync serves many records, so the rate is not capped
  at one record per fsync, and nothing returns before it is on disk.
- **PostgreSQL** (``--state postgresql://...``, extra ``teams``): psycopg 3 with a connection
  pool that checks each connection before lending it, so a server that went away and came
  back costs the calls made while it was away (each a :class:`StoreError`, within a fraction
  of a second: a pool with nothing to lend asks the server directly whether it is down), not
  a restart.

The schema is versioned (:data:`SCHEMA_VERSION`). A database with no schema gets one when a
gateway first opens it; an older or newer one is refused (:class:`SchemaError`) until
``riskrank state migrate`` is run on purpose, so a rolling upgrade never changes the tables
under replicas that still run the old code. Two migrations at once serialise (SQLite's write
lock; PostgreSQL's advisory lock) and the second finds nothing to do.

Audit ids increase in the order appends are made. On PostgreSQL, records of two replicas
appending at the same moment may become visible out of id order (a sequence hands out ids
before commit); readers that page by id newest first (the console) are unaffected.
JSON is stored as text (PostgreSQL too): a record reads back, and exports, exactly as written.
"""

from __future__ import annotations

import abc
import contextlib
import csv
import hashlib
import io
import json
import os
import queue
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from riskrank.errors import RiskrankError
from riskrank.fileio import loads_strict, spreadsheet_cell

SCHEMA_VERSION = 3
#: The SQLite file inside a state directory.
DB_FILE = "state.sqlite3"
#: How long opening a PostgreSQL connection, or waiting for one from the pool, may take.
CONNECT_TIMEOUT_S = 5.0
#: How long the pool keeps retrying a lost connection before the next call starts afresh.
RECONNECT_S = 10.0
#: How long a call waits for a pooled connection before asking whether the server is down.
QUICK_S = 0.2
#: How long one answer to "is the server down?" serves every caller.
PROBE_EVERY_S = 1.0
#: How long :meth:`StateStore.health` waits for a connection (a readiness probe must answer).
HEALTH_TIMEOUT_S = 2.0
#: How long a SQLite write waits for another process's (the CLI's import beside a gateway).
BUSY_TIMEOUT_S = 10.0
#: The most records one group commit takes (a bound on how long one transaction holds the lock).
MAX_GROUP = 1024
#: Connections one store may hold open to PostgreSQL.
POOL_MAX = 8
#: Records per transaction of an import (SQLite: short enough that a live gateway's appends
#: never wait out their busy timeout behind it).
IMPORT_BATCH = 1000
PENDING = "pending"
#: How a request stops pending: an operator's decision, the timeout, its caller leaving
#: (``caller_gone``: the agent's connection or stdin closed) or its replica's heartbeat lapsing
#: (``replica_gone``, or a replica restarted under the same name).
ACTIONS = ("accept", "decline", "cancel", "timeout", "caller_gone", "replica_gone")
#: The key of the PostgreSQL advisory lock a migration holds (``"riskrank"`` in ASCII).
MIGRATE_LOCK = 0x7269736B72616E6B
#: The audit columns kept beside each record's JSON, for filtering without parsing it.
AUDIT_COLUMNS = ("time", "client", "session", "tool", "decision")


class StoreError(RiskrankError):
    """The state store cannot be used: unreachable, a failed write, a query error."""

    code = "state_store_failed"


#: The one refusal code of every call decided while the state store cannot be reached (the
#: audit line, the session's record, the exposure or the approval cannot be read or written):
#: the cause is the store, never the call, the client or the policy.
STATE_UNAVAILABLE = "state_unavailable"


def unavailable_message(url: str, why: str) -> str:
    """The refusal text of :data:`STATE_UNAVAILABLE`: the store (password masked) and why
    (the store's own name is said once)."""
    why = why.replace(f"the state store {mask_url(url)}: ", "").replace(f"the state store {url}: ", "")
    return (f"the gateway's state store {mask_url(url)} cannot be reached ({why}); nothing can be decided or recorded, so "
            "the call was not run. Nothing about the call, the client or the policy is wrong: call again once the store "
            "answers")


class StateUnavailable(StoreError):
    """A call refused because the state store cannot be reached (:data:`STATE_UNAVAILABLE`)."""

    code = STATE_UNAVAILABLE


class SchemaError(StoreError):
    """The database's schema is missing, older or newer than this riskrank's: refused until migrated."""

    code = "state_schema"


def _migration_1(id_column: str) -> list[str]:
    return [
        "CREATE TABLE IF NOT EXISTS riskrank_schema (version INTEGER NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS riskrank_audit (id {id_column}, time TEXT, client TEXT, session TEXT, tool TEXT, "
        "decision TEXT, line_sha256 TEXT UNIQUE, record TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS riskrank_audit_time ON riskrank_audit (time)",
        "CREATE TABLE IF NOT EXISTS riskrank_approvals (id TEXT PRIMARY KEY, status TEXT NOT NULL, request TEXT NOT NULL, "
        "replica TEXT NOT NULL, client TEXT, asked_at DOUBLE PRECISION NOT NULL, deadline DOUBLE PRECISION NOT NULL, "
        "decided_at DOUBLE PRECISION, decided_by TEXT, note TEXT)",
        "CREATE INDEX IF NOT EXISTS riskrank_approvals_status ON riskrank_approvals (status, asked_at)",
        "CREATE INDEX IF NOT EXISTS riskrank_approvals_decided ON riskrank_approvals (decided_at)",
        "CREATE TABLE IF NOT EXISTS riskrank_docs (kind TEXT NOT NULL, name TEXT NOT NULL, version BIGINT NOT NULL, "
        "value TEXT NOT NULL, PRIMARY KEY (kind, name))",
        "CREATE TABLE IF NOT EXISTS riskrank_exposure (session_key TEXT PRIMARY KEY, task TEXT NOT NULL, names TEXT NOT NULL, "
        "at DOUBLE PRECISION NOT NULL)",
    ]


def _migration_2(id_column: str) -> list[str]:
    """Version 2: each session's record (the session guard's anchor, scope and confirmations),
    written by compare-and-swap with the time of its last write (idle records are removed),
    and its flow record's values, one row each, numbered in the order they were seen (a new
    untrusted answer adds rows instead of rewriting the record)."""
    return [
        "CREATE TABLE IF NOT EXISTS riskrank_sessions (session_key TEXT PRIMARY KEY, version BIGINT NOT NULL, "
        "at DOUBLE PRECISION NOT NULL, record TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS riskrank_sessions_at ON riskrank_sessions (at)",
        "CREATE TABLE IF NOT EXISTS riskrank_session_values (session_key TEXT NOT NULL, seq BIGINT NOT NULL, "
        "value TEXT NOT NULL, PRIMARY KEY (session_key, seq))",
    ]


def _migration_3(id_column: str) -> list[str]:
    """Version 3: each replica's heartbeat, written with the store's own clock (``beat_at``),
    so whether a replica is alive is judged by one clock, never by a replica's; ``instance``
    tells a restarted replica of the same name from its predecessor."""
    return [
        "CREATE TABLE IF NOT EXISTS riskrank_replicas (name TEXT PRIMARY KEY, instance TEXT NOT NULL, "
        "started_at DOUBLE PRECISION NOT NULL, beat_at DOUBLE PRECISION NOT NULL)",
    ]


#: version -> the statements that bring the schema from the version before to it (each
#: idempotent, so a database left at an older version with some tables already there upgrades).
MIGRATIONS: dict[int, Callable[[str], list[str]]] = {1: _migration_1, 2: _migration_2, 3: _migration_3}

_INSERT_AUDIT = ("INSERT INTO riskrank_audit (time, client, session, tool, decision, line_sha256, record) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)")
_APPROVAL_COLUMNS = "id, status, request, replica, client, asked_at, deadline, decided_at, decided_by, note"


def _dump(value: Any) -> str:
    """Compact JSON, as the audit log writes it; a lone surrogate (which UTF-8 cannot hold) is
    kept as its escape rather than failing the write."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"a value the state store cannot keep as JSON: {exc}") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return text


def _audit_row(record: dict[str, Any], text: str, digest: str | None) -> tuple[Any, ...]:
    if not isinstance(record, dict):
        raise StoreError(f"an audit record must be a JSON object, not {type(record).__name__}")
    if "id" in record:
        raise StoreError("an audit record may not carry its own 'id': the state store numbers records")
    return (*(_column(record.get(k)) for k in AUDIT_COLUMNS), digest, text)


def _column(value: Any) -> str | None:
    """A filter column's text: what neither database can hold (a NUL, a lone surrogate) is
    dropped or replaced, so a client's odd session id cannot fail its call's audit line."""
    if value is None:
        return None
    text = value if isinstance(value, str) else _dump(value)
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _approval(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": row[0], "status": row[1], "request": json.loads(row[2]), "replica": row[3], "client": row[4],
            "asked_at": row[5], "deadline": row[6], "decided_at": row[7], "by": row[8], "note": row[9]}


def mask_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` parameter): what
    messages, ``/readyz`` and logs show."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _password(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.password:
        return unquote(parts.password)
    return next((v for k, v in parse_qsl(parts.query) if k == "password"), None)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class StateStore(abc.ABC):
    """What the gateway keeps: the audit log, approvals, versioned documents, exposure.

    The methods are written once, here, in SQL both backends run (``?`` parameters; the
    PostgreSQL store rewrites them). A backend supplies connections and transactions
    (:meth:`_session`), the few statements that differ, and what its driver's errors say.
    Every method but :meth:`health` raises :class:`StoreError` when the database fails."""

    backend: str
    url: str
    #: The audit table's id column (the one DDL that differs).
    _id_column: str
    #: The driver's exceptions, turned into :class:`StoreError` by :meth:`_do`.
    _errors: tuple[type[BaseException], ...] = ()

    # -- what a backend supplies ------------------------------------------------------------------
    @abc.abstractmethod
    def _session(self, *, tx: bool) -> contextlib.AbstractContextManager[Any]:
        """A connection (autocommit: each statement its own transaction), or with ``tx`` one
        write transaction, committed when the block ends and rolled back on an error."""

    @abc.abstractmethod
    def _table_exists(self, conn: Any, name: str) -> bool: ...

    @abc.abstractmethod
    def _insert_id(self, conn: Any, sql: str, params: tuple[Any, ...]) -> int:
        """Run an INSERT into the audit table; the new row's id."""

    @abc.abstractmethod
    def _probe(self) -> int | None:
        """The schema version in one query (None: no schema): :meth:`health`'s probe."""

    @abc.abstractmethod
    def _migrate_lock(self, conn: Any) -> None:
        """Serialise migrations: a second one waits here until the first committed."""

    def _q(self, sql: str) -> str:
        return sql

    def _reason(self, exc: BaseException) -> str:
        return _one_line(str(exc)) or type(exc).__name__

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- shared plumbing ----------------------------------------------------------------------------
    def _ex(self, conn: Any, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        return conn.execute(self._q(sql), params)

    def _do(self, what: str, fn: Callable[[Any], Any], *, tx: bool = False) -> Any:
        """``fn(connection)``, its driver errors as one :class:`StoreError` naming the store."""
        try:
            with self._session(tx=tx) as conn:
                return fn(conn)
        except RiskrankError:
            raise
        except (*self._errors, UnicodeError) as exc:  # UnicodeError: a lone surrogate in a parameter
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"the state store {self.url}: {what} failed: {self._reason(exc)}")

    def _version(self, conn: Any) -> int | None:
        if not self._table_exists(conn, "riskrank_schema"):
            return None
        row = self._ex(conn, "SELECT version FROM riskrank_schema").fetchone()
        return 0 if row is None else int(row[0])

    def _schema_problem(self, version: int | None) -> str | None:
        """Why a store at ``version`` cannot be used (None: it can)."""
        hint = f"riskrank state migrate --state {self.url}"
        if version is None:
            return f"the state store {self.url} has no schema (not created): run `{hint}`"
        if version < SCHEMA_VERSION:
            return (f"the state store {self.url} is at schema version {version}, older than this riskrank's "
                    f"{SCHEMA_VERSION}: run `{hint}` (once, from one machine) before starting gateways on it")
        if version > SCHEMA_VERSION:
            return (f"the state store {self.url} is at schema version {version}, newer than this riskrank's "
                    f"{SCHEMA_VERSION}: upgrade riskrank here (`{hint}` never downgrades)")
        return None

    # -- schema ---------------------------------------------------------------------------------------
    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the schema to :data:`SCHEMA_VERSION`: (version before, after).
        Run in one transaction under a lock, so a second migration waits for the first and
        then finds nothing to do; a newer schema is refused, never downgraded."""
        def run(conn: Any) -> tuple[int, int]:
            self._migrate_lock(conn)
            found = self._version(conn)
            before = found or 0
            if before > SCHEMA_VERSION:
                raise SchemaError(self._schema_problem(before) or "")
            for version in range(before + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version](self._id_column):
                    self._ex(conn, statement)
            if found != SCHEMA_VERSION:
                self._ex(conn, "DELETE FROM riskrank_schema")
                self._ex(conn, "INSERT INTO riskrank_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            return before, SCHEMA_VERSION

        return self._do("migrating the schema", run, tx=True)

    def check(self) -> None:
        """Refuse a schema other than :data:`SCHEMA_VERSION` (:class:`SchemaError`, with the
        command that fixes it); :class:`StoreError` when the database cannot be reached."""
        problem = self._schema_problem(self._do("reading the schema version", self._version))
        if problem:
            raise SchemaError(problem)

    def health(self) -> dict[str, Any]:
        """``{"ok", "backend", "url", "schema", "error"}`` for a readiness probe: one query,
        never raises (a probe that throws says less than one that answers "no, because")."""
        out: dict[str, Any] = {"ok": False, "backend": self.backend, "url": self.url, "schema": None, "error": None}
        try:
            out["schema"] = self._probe()
            out["error"] = self._schema_problem(out["schema"])
            out["ok"] = out["error"] is None
        except Exception as exc:  # a probe reports every failure instead of raising
            out["error"] = str(exc) if isinstance(exc, RiskrankError) else self._error("the health check", exc).args[0]
        return out

    # -- the audit log --------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> int:
        """Append one record, committed (and fsync'd) before this returns; its id."""
        return self.append_many([record])[0]

    def append_many(self, records: list[dict[str, Any]]) -> list[int]:
        """Append ``records`` in one transaction; their ids, in order."""
        rows = [_audit_row(r, _dump(r), None) for r in records]
        if not rows:
            return []
        return self._do("appending to the audit log",
                        lambda conn: [self._insert_id(conn, _INSERT_AUDIT, row) for row in rows], tx=len(rows) > 1)

    def _audit_texts(self, *, newest_first: bool = False, before: int | None = None, after: int | None = None,
                     limit: int | None = None) -> list[tuple[int, str]]:
        where, params = [], []
        if before is not None:
            where.append("id < ?")
            params.append(before)
        if after is not None:
            where.append("id > ?")
            params.append(after)
        sql = "SELECT id, record FROM riskrank_audit" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))
        return self._do("reading the audit log", lambda conn: [(int(i), t) for i, t in self._ex(conn, sql, params).fetchall()])

    def records(self, *, newest_first: bool = False, before: int | None = None, after: int | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        """Audit records by id (oldest first, or newest), with ids below ``before`` / above
        ``after``, at most ``limit``; each with its ``id``."""
        return [{**json.loads(text), "id": i}
                for i, text in self._audit_texts(newest_first=newest_first, before=before, after=after, limit=limit)]

    def count(self) -> int:
        return self._do("counting the audit log", lambda conn: int(self._ex(conn, "SELECT COUNT(*) FROM riskrank_audit").fetchone()[0]))

    def _import_rows(self, rows: list[tuple[Any, ...]]) -> int:
        """Insert imported rows (each with its line digest) in one transaction, skipping
        digests already there; how many were new."""
        sql = _INSERT_AUDIT + " ON CONFLICT (line_sha256) DO NOTHING"
        return self._do("importing into the audit log", lambda conn: self._executemany(conn, sql, rows), tx=True)

    def _executemany(self, conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> int:
        cur = conn.cursor()
        cur.executemany(self._q(sql), rows)
        return max(0, cur.rowcount)

    # -- approvals ------------------------------------------------------------------------------------
    def put_pending(self, id: str, request: dict[str, Any], *, replica: str, client: str | None, asked_at: float,
                    deadline: float) -> None:
        """Record a confirmation request waiting for an operator (any replica may decide it)."""
        self._do("recording a pending approval", lambda conn: self._ex(
            conn, f"INSERT INTO riskrank_approvals ({_APPROVAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
            (id, PENDING, _dump(request), replica, client, asked_at, deadline)))

    def decide(self, id: str, action: str, *, by: str | None, note: str | None, at: float) -> bool:
        """Decide a pending request; True only for the one call that did (a single conditional
        UPDATE: of two operators, or an operator and the timeout, exactly one wins)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
        cur = self._do("deciding an approval", lambda conn: self._ex(
            conn, "UPDATE riskrank_approvals SET status = ?, decided_at = ?, decided_by = ?, note = ? "
            "WHERE id = ? AND status = ?", (action, at, by, note, id, PENDING)))
        return cur.rowcount == 1

    def decide_live(self, id: str, *, by: str, note: str | None, action: str, lapse_s: float) -> bool:
        """Decide a pending request only while the replica holding it is alive: its heartbeat
        is at most ``lapse_s`` old by the store's clock, judged in the same statement as the
        update (an approval can never reach a replica that stopped beating)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
        now = self._now_sql
        cur = self._do("deciding an approval", lambda conn: self._ex(
            conn, "UPDATE riskrank_approvals SET status = ?, decided_at = " + now + ", decided_by = ?, note = ? "
            "WHERE id = ? AND status = ? AND EXISTS (SELECT 1 FROM riskrank_replicas r WHERE "
            "r.name = riskrank_approvals.replica AND r.beat_at >= " + now + " - ?)",
            (action, by, note, id, PENDING, lapse_s)))
        return cur.rowcount == 1

    # -- replicas -------------------------------------------------------------------------------------
    #: The store's clock in seconds since the epoch, as SQL (each backend sets its own).
    _now_sql: str

    def start_replica(self, name: str, instance: str) -> list[dict[str, Any]]:
        """Register replica ``name`` (this process: ``instance``) and withdraw every request a
        predecessor of the same name still held (its calls died with it): those requests."""
        now = self._now_sql
        note = f"the replica {name} restarted; the call held there ended with it and nothing ran"

        def start(conn: Any) -> list[dict[str, Any]]:
            held = self._ex(conn, f"SELECT {_APPROVAL_COLUMNS} FROM riskrank_approvals WHERE replica = ? AND status = ?",
                            (name, PENDING)).fetchall()
            self._ex(conn, "UPDATE riskrank_approvals SET status = ?, decided_at = " + now + ", note = ? "
                     "WHERE replica = ? AND status = ?", ("replica_gone", note, name, PENDING))
            self._ex(conn, "INSERT INTO riskrank_replicas (name, instance, started_at, beat_at) VALUES (?, ?, " + now + ", "
                     + now + ") ON CONFLICT (name) DO UPDATE SET instance = excluded.instance, "
                     "started_at = excluded.started_at, beat_at = excluded.beat_at", (name, instance))
            return [{**_approval(r), "status": "replica_gone", "note": note} for r in held]
        return list(self._do("registering a replica", start, tx=True))

    def heartbeat(self, name: str, instance: str) -> bool:
        """Replica ``name`` is alive (the store's clock stamps it); False when another process
        took the name since (this one must not act for it)."""
        now = self._now_sql
        cur = self._do("writing a heartbeat", lambda conn: self._ex(
            conn, "UPDATE riskrank_replicas SET beat_at = " + now + " WHERE name = ? AND instance = ?", (name, instance)))
        return cur.rowcount == 1

    def replicas(self) -> dict[str, float]:
        """Each replica's heartbeat age in seconds, by the store's clock."""
        rows = self._do("reading replicas", lambda conn: self._ex(
            conn, "SELECT name, " + self._now_sql + " - beat_at FROM riskrank_replicas").fetchall())
        return {r[0]: float(r[1]) for r in rows}

    def sweep_lapsed(self, lapse_s: float) -> list[dict[str, Any]]:
        """Withdraw the pending requests of every replica whose heartbeat is over ``lapse_s``
        old (status ``replica_gone``): the requests withdrawn now (one caller wins each)."""
        now = self._now_sql

        def sweep(conn: Any) -> list[dict[str, Any]]:
            gone = self._ex(conn, f"SELECT {_APPROVAL_COLUMNS} FROM riskrank_approvals WHERE status = ? AND replica NOT IN "
                            "(SELECT name FROM riskrank_replicas WHERE beat_at >= " + now + " - ?)",
                            (PENDING, lapse_s)).fetchall()
            taken = []
            for row in gone:
                note = f"the replica {row[3]} stopped answering (no heartbeat for over {lapse_s:g} s); nothing ran"
                cur = self._ex(conn, "UPDATE riskrank_approvals SET status = ?, decided_at = " + now + ", note = ? "
                               "WHERE id = ? AND status = ?", ("replica_gone", note, row[0], PENDING))
                if cur.rowcount == 1:
                    taken.append({**_approval(row), "status": "replica_gone", "note": note})
            return taken
        return list(self._do("withdrawing a lapsed replica's requests", sweep, tx=True))

    def approval(self, id: str) -> dict[str, Any] | None:
        row = self._do("reading an approval", lambda conn: self._ex(
            conn, f"SELECT {_APPROVAL_COLUMNS} FROM riskrank_approvals WHERE id = ?", (id,)).fetchone())
        return None if row is None else _approval(row)

    def pending(self) -> list[dict[str, Any]]:
        """The requests still pending, oldest first."""
        return [_approval(r) for r in self._do("reading pending approvals", lambda conn: self._ex(
            conn, f"SELECT {_APPROVAL_COLUMNS} FROM riskrank_approvals WHERE status = ? ORDER BY asked_at, id",
            (PENDING,)).fetchall())]

    def decided(self, limit: int = 50) -> list[dict[str, Any]]:
        """The ``limit`` latest decided requests, newest first."""
        return [_approval(r) for r in self._do("reading decided approvals", lambda conn: self._ex(
            conn, f"SELECT {_APPROVAL_COLUMNS} FROM riskrank_approvals WHERE decided_at IS NOT NULL "
            "ORDER BY decided_at DESC, id LIMIT ?", (max(0, limit),)).fetchall())]

    def _all_approvals(self) -> list[dict[str, Any]]:
        return [_approval(r) for r in self._do("reading approvals", lambda conn: self._ex(
            conn, f"SELECT {_APPROVAL_COLUMNS} FROM riskrank_approvals ORDER BY asked_at, id").fetchall())]

    # -- documents (compare and swap) ----------------------------------------------------------------
    def get_doc(self, kind: str, key: str) -> tuple[int, Any] | None:
        """(version, value) of a document, None when there is none."""
        row = self._do("reading a document", lambda conn: self._ex(
            conn, "SELECT version, value FROM riskrank_docs WHERE kind = ? AND name = ?", (kind, key)).fetchone())
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def put_doc(self, kind: str, key: str, value: Any, *, expect: int | None) -> int | None:
        """Write a document only if it is still at version ``expect`` (None: only if it does
        not exist yet): the new version, or None when another writer moved it first (read it
        again and redo the change: a read-modify-write never overwrites a change it did not see)."""
        text = _dump(value)
        if expect is None:
            cur = self._do("writing a document", lambda conn: self._ex(
                conn, "INSERT INTO riskrank_docs (kind, name, version, value) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (kind, name) DO NOTHING", (kind, key, text)))
            return 1 if cur.rowcount == 1 else None
        cur = self._do("writing a document", lambda conn: self._ex(
            conn, "UPDATE riskrank_docs SET version = version + 1, value = ? WHERE kind = ? AND name = ? AND version = ?",
            (text, kind, key, expect)))
        return expect + 1 if cur.rowcount == 1 else None

    # -- exposure -------------------------------------------------------------------------------------
    def put_exposure(self, key: str, task: str, names: list[str], at: float) -> None:
        """A caller's latest ``find_tools`` result (replaces the one before)."""
        self._do("recording exposure", lambda conn: self._ex(
            conn, "INSERT INTO riskrank_exposure (session_key, task, names, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (session_key) DO UPDATE SET task = excluded.task, names = excluded.names, at = excluded.at",
            (key, task, _dump(list(names)), at)))

    def exposure(self, key: str) -> tuple[str, list[str], float] | None:
        row = self._do("reading exposure", lambda conn: self._ex(
            conn, "SELECT task, names, at FROM riskrank_exposure WHERE session_key = ?", (key,)).fetchone())
        return None if row is None else (row[0], json.loads(row[1]), float(row[2]))

    # -- session records ------------------------------------------------------------------------------
    def session_version(self, key: str) -> int | None:
        """The version of a session's record (None: there is none): one cheap query, so a
        replica re-reads the record only when another wrote it."""
        row = self._do("reading a session record", lambda conn: self._ex(
            conn, "SELECT version FROM riskrank_sessions WHERE session_key = ?", (key,)).fetchone())
        return None if row is None else int(row[0])

    def session(self, key: str, *, after: int = -1) -> tuple[int, Any, list[tuple[int, Any]]] | None:
        """(version, record, values) of a session (:mod:`riskrank.serving.gateway.session`):
        its flow values numbered above ``after`` (seq, value), oldest first; None when there is
        no record."""
        def read(conn: Any) -> tuple[int, Any, list[tuple[int, Any]]] | None:
            row = self._ex(conn, "SELECT version, record FROM riskrank_sessions WHERE session_key = ?", (key,)).fetchone()
            if row is None:
                return None
            values = self._ex(conn, "SELECT seq, value FROM riskrank_session_values WHERE session_key = ? AND seq > ? "
                              "ORDER BY seq", (key, after)).fetchall()
            return int(row[0]), json.loads(row[1]), [(int(q), json.loads(v)) for q, v in values]

        return self._do("reading a session record", read, tx=True)

    def put_session(self, key: str, record: Any, *, expect: int | None, at: float,
                    values: Sequence[tuple[int, Any]] = (), drop_below: int | None = None) -> int | None:
        """Write a session's record only if it is still at version ``expect`` (None: only if
        there is none yet), with its new flow ``values`` (seq, value) and without those numbered
        below ``drop_below``, in one transaction: the new version, or None when another replica
        wrote it first (nothing is written then)."""
        text = _dump(record)
        rows = [(key, seq, _dump(v)) for seq, v in values]

        def write(conn: Any) -> int | None:
            if expect is None:
                cur = self._ex(conn, "INSERT INTO riskrank_sessions (session_key, version, at, record) VALUES (?, 1, ?, ?) "
                               "ON CONFLICT (session_key) DO NOTHING", (key, at, text))
                version = 1
            else:
                cur = self._ex(conn, "UPDATE riskrank_sessions SET version = version + 1, at = ?, record = ? "
                               "WHERE session_key = ? AND version = ?", (at, text, key, expect))
                version = expect + 1
            if cur.rowcount != 1:
                return None
            if expect is None:  # a record made afresh (its earlier one pruned): no values of it stay
                self._ex(conn, "DELETE FROM riskrank_session_values WHERE session_key = ?", (key,))
            if rows:
                self._executemany(conn, "INSERT INTO riskrank_session_values (session_key, seq, value) VALUES (?, ?, ?) "
                                  "ON CONFLICT (session_key, seq) DO NOTHING", rows)
            if drop_below is not None:
                self._ex(conn, "DELETE FROM riskrank_session_values WHERE session_key = ? AND seq < ?", (key, drop_below))
            return version

        return self._do("writing a session record", write, tx=True)

    def prune_sessions(self, before: float) -> int:
        """Remove the session records (and their values) last written before ``before`` (epoch
        seconds): how many records."""
        def prune(conn: Any) -> int:
            self._ex(conn, "DELETE FROM riskrank_session_values WHERE session_key IN "
                     "(SELECT session_key FROM riskrank_sessions WHERE at < ?)", (before,))
            return max(0, self._ex(conn, "DELETE FROM riskrank_sessions WHERE at < ?", (before,)).rowcount)

        return self._do("removing idle session records", prune, tx=True)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- SQLite ---------------------------------------------------------------------------------------------
class _Batch:
    """One caller's records waiting for the group commit."""

    __slots__ = ("done", "error", "ids", "rows")

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows, self.ids, self.error, self.done = rows, [], None, threading.Event()


class SQLiteStore(StateStore):
    """``DIR/state.sqlite3`` (directory ``0700``, file ``0600``: it holds tasks and arguments)."""

    backend = "sqlite"
    _now_sql = "((julianday('now') - 2440587.5) * 86400.0)"
    _id_column = "INTEGER PRIMARY KEY AUTOINCREMENT"  # AUTOINCREMENT: an id is never reused
    _errors = (sqlite3.Error, OSError)

    def __init__(self, directory: str | Path, *, create: bool = True) -> None:
        self.dir = Path(directory).expanduser()
        self.path = self.dir / DB_FILE
        self.url = str(self.dir)
        if create:
            try:
                self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            except OSError as exc:
                raise StoreError(f"--state {self.dir}: cannot create the state store there ({exc.strerror or exc})") from None
        elif not self.path.is_file():
            raise StoreError(f"--state {self.dir}: no state store there (no {DB_FILE}); "
                             f"`riskrank state migrate --state {self.dir}` creates one")
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._closed = False
        try:
            self._db: sqlite3.Connection | None = self._connect()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the state store {self.path}: {self._reason(exc)}") from None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot use write-ahead logging here (journal mode {mode})")
            conn.execute("PRAGMA synchronous=FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def _session(self, *, tx: bool) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db is None:
                raise StoreError(f"the state store {self.url} is closed")
            conn = self._db
            if not tx:
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _table_exists(self, conn: Any, name: str) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None

    def _insert_id(self, conn: Any, sql: str, params: tuple[Any, ...]) -> int:
        return int(conn.execute(sql, params).lastrowid)

    def _migrate_lock(self, conn: Any) -> None:
        """Nothing to take: the migration's BEGIN IMMEDIATE holds the database's write lock."""

    def _probe(self) -> int | None:
        def read(conn: sqlite3.Connection) -> int | None:
            try:
                row = conn.execute("SELECT version FROM riskrank_schema").fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
            return 0 if row is None else int(row[0])

        return self._do("the health check", read)

    # -- group commit -------------------------------------------------------------------------------
    def append_many(self, records: list[dict[str, Any]]) -> list[int]:
        """Hand the records to the writer thread and wait until the transaction holding them
        (with whatever else queued meanwhile) has committed."""
        rows = [_audit_row(r, _dump(r), None) for r in records]
        if not rows:
            return []
        item = _Batch(rows)
        with self._lock:
            if self._closed:
                raise StoreError(f"the state store {self.url} is closed")
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="riskrank-state-writer", daemon=True)
                self._writer.start()
            self._queue.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.ids

    def _write_loop(self) -> None:
        conn: sqlite3.Connection | None = None
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch, size = [first], len(first.rows)
            while size < MAX_GROUP:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
                size += len(nxt.rows)
            try:
                if conn is None:
                    conn = self._connect()
                self._commit(conn, batch)
            except Exception as exc:  # whatever failed, every waiting caller must hear of it
                error = self._error("appending to the audit log", exc)
                for item in batch:
                    item.ids, item.error = [], error
                with contextlib.suppress(sqlite3.Error):
                    if conn is not None:
                        conn.close()
                conn = None  # a fresh connection for the next batch
            for item in batch:
                item.done.set()
        if conn is not None:
            conn.close()

    @staticmethod
    def _commit(conn: sqlite3.Connection, batch: list[_Batch]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for item in batch:
                item.ids = [int(conn.execute(_INSERT_AUDIT, row).lastrowid) for row in item.rows]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Commit what is queued, stop the writer, close the connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            writer = self._writer
            if writer is not None:
                self._queue.put(None)
        if writer is not None:
            writer.join()
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


# -- PostgreSQL -----------------------------------------------------------------------------------------
class _Unreachable(Exception):
    """The server refused a direct connection while the pool had none to lend."""


class PostgresStore(StateStore):
    """A PostgreSQL database shared by every replica (extra ``teams``: psycopg 3 and its pool)."""

    backend = "postgresql"
    _now_sql = "extract(epoch from clock_timestamp())::double precision"
    _id_column = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    def __init__(self, url: str) -> None:
        from riskrank.extras import requires

        with requires("teams", "a PostgreSQL state store"):
            import psycopg
            import psycopg_pool
        self._psycopg, self._pool_mod = psycopg, psycopg_pool
        self._errors = (psycopg.Error, _Unreachable)
        self._probe_lock = threading.Lock()
        self._probed_at, self._why_down = -PROBE_EVERY_S, None
        self._conninfo = url
        self._secret = _password(url)
        self.url = mask_url(url)
        # One connection first, so that a server that is down says why (the pool would only
        # say that it timed out).
        try:
            psycopg.connect(url, connect_timeout=int(CONNECT_TIMEOUT_S), autocommit=True).close()
        except psycopg.Error as exc:
            raise StoreError(f"cannot reach the state store {self.url}: {self._reason(exc)}") from None
        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=POOL_MAX, open=False, name="riskrank-state", timeout=CONNECT_TIMEOUT_S,
            kwargs={"autocommit": True, "connect_timeout": int(CONNECT_TIMEOUT_S)},
            # checked before each loan: a connection the server dropped is replaced, not lent
            check=psycopg_pool.ConnectionPool.check_connection,
            # a reconnection backs off (1, 2, 4 s ...) and then gives up, so that the next call
            # tries afresh: after a long outage the first call once the server is back connects
            # at once instead of waiting out a backoff grown to minutes
            reconnect_timeout=RECONNECT_S)
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            self._pool.close()
            raise StoreError(f"cannot reach the state store {self.url}: {self._reason(exc)}") from None

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, _Unreachable):
            text = f"cannot reach it: {exc}"
        elif isinstance(exc, self._pool_mod.PoolClosed):
            text = "the store is closed"
        elif isinstance(exc, self._pool_mod.PoolTimeout):
            down = self._down()
            text = f"cannot reach it: {down}" if down else f"no free connection within {CONNECT_TIMEOUT_S:g} s"
        else:
            text = super()._reason(exc).removeprefix("connection failed: ")
        return text.replace(self._secret, "***") if self._secret else text

    def _down(self) -> str | None:
        """Why the server cannot be reached now (None: it can), from one direct connection
        attempt that every caller shares for :data:`PROBE_EVERY_S` (a pool only knows that it
        waited, and a herd of callers must not each open a connection to find out)."""
        with self._probe_lock:
            if time.monotonic() - self._probed_at > PROBE_EVERY_S:
                try:
                    self._psycopg.connect(self._conninfo, connect_timeout=int(HEALTH_TIMEOUT_S), autocommit=True).close()
                    self._why_down = None
                except self._psycopg.Error as exc:
                    self._why_down = super()._reason(exc).removeprefix("connection failed: ")
                self._probed_at = time.monotonic()
            return self._why_down

    def _lend(self, timeout: float) -> Any:
        """A pooled connection. When none comes at once, a server that is down fails the call
        now (:class:`_Unreachable`) rather than after the whole ``timeout``; a server that is up
        means a busy pool, worth the rest of the wait."""
        try:
            return self._pool.getconn(timeout=min(QUICK_S, timeout))
        except self._pool_mod.PoolTimeout:
            down = self._down()
            if down:
                raise _Unreachable(down) from None
            return self._pool.getconn(timeout=max(0.01, timeout - QUICK_S))

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s")

    @contextlib.contextmanager
    def _session(self, *, tx: bool, timeout: float | None = None) -> Iterator[Any]:
        conn = self._lend(CONNECT_TIMEOUT_S if timeout is None else timeout)
        try:
            if tx:
                with conn.transaction():
                    yield conn
            else:
                yield conn
        finally:
            self._pool.putconn(conn)  # a connection left broken is replaced by the pool

    def _table_exists(self, conn: Any, name: str) -> bool:
        return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0])

    def _migrate_lock(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))

    def _insert_id(self, conn: Any, sql: str, params: tuple[Any, ...]) -> int:
        return int(conn.execute(self._q(sql) + " RETURNING id", params).fetchone()[0])

    def _probe(self) -> int | None:
        try:
            with self._session(tx=False, timeout=HEALTH_TIMEOUT_S) as conn:
                try:
                    row = conn.execute("SELECT version FROM riskrank_schema").fetchone()
                except self._psycopg.errors.UndefinedTable:
                    return None
        except (self._psycopg.Error, _Unreachable) as exc:
            raise self._error("the health check", exc) from None
        return 0 if row is None else int(row[0])

    def close(self) -> None:
        self._pool.close()


# -- opening ------------------------------------------------------------------------------------------------
def is_postgres_url(where: str | Path) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


def connect(where: str | Path, *, create: bool = True) -> StateStore:
    """The store at ``where`` without touching or checking its schema (``riskrank state
    migrate`` and ``status`` need to open an old one). ``create``: a SQLite directory and file
    are created when missing; otherwise a missing one is a :class:`StoreError`."""
    if is_postgres_url(where):
        return PostgresStore(str(where))
    return SQLiteStore(where, create=create)


def open_store(where: str | Path, *, create: bool = True) -> StateStore:
    """The store a gateway (or a command) works on: ``postgresql://...`` or
    ``postgres://...`` is PostgreSQL, anything else a directory (SQLite). With ``create`` a
    database with no schema gets it (a first start; a directory is created); without, nothing
    is created. Either way an older or newer schema is refused (:class:`SchemaError`) until
    ``riskrank state migrate``; it is never upgraded implicitly."""
    store = connect(where, create=create)
    try:
        if create and store._do("reading the schema version", store._version) is None:
            store.migrate()
        store.check()
    except BaseException:
        store.close()
        raise
    return store


# -- import and export -------------------------------------------------------------------------------------
def _audit_lines(path: Path) -> Iterator[tuple[int, str, dict[str, Any], str]]:
    """(line number, the line's text, its record, its digest) for each non-blank line, read
    strictly (a bad line is a :class:`StoreError` naming the file and line). The digest is the
    line's sha256, with the count of identical lines before it folded in for a repeat: the
    same file imports to the same digests (so twice inserts nothing twice) while two
    identical lines in it stay two records."""
    source = str(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"--audit-log {source}: not a regular file")
        fh = path.open("rb")
    except OSError as exc:
        raise StoreError(f"--audit-log {source}: {exc.strerror or exc}") from None
    seen: dict[bytes, int] = {}
    with fh:
        for lineno, raw in enumerate(fh, 1):
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise StoreError(f"{source}: line {lineno}: not UTF-8 text") from None
            record = loads_strict(text, source, StoreError, line=lineno)
            if not isinstance(record, dict):
                raise StoreError(f"{source}: line {lineno}: not a JSON object (an audit record is one)")
            if "id" in record:
                raise StoreError(f"{source}: line {lineno}: a record with its own 'id' (the state store numbers records)")
            if not isinstance(record.get("time"), str) or "decision" not in record:
                # every line the gateway writes has both (AuditLog.REQUIRED): another JSONL file is not imported
                raise StoreError(f"{source}: line {lineno}: not an audit record (no 'time' and 'decision'); is this the "
                                 "gateway's --audit-log file?")
            n = seen[raw] = seen.get(raw, 0) + 1
            digest = hashlib.sha256(raw if n == 1 else raw + b"\n#%d" % n).hexdigest()
            yield lineno, text, record, digest


def check_audit_log(path: str | Path) -> int:
    """Read a JSONL audit log through, strictly: its number of records (a bad line raises)."""
    return sum(1 for _ in _audit_lines(Path(path)))


def import_audit_log(store: StateStore, path: str | Path, *, checked: int | None = None) -> tuple[int, int]:
    """Import a JSONL audit log (the gateway's file format): (imported, already there).
    The whole file is read and checked first (:func:`check_audit_log`; ``checked``: its
    count, when the caller checked it before opening the store), so a bad line imports
    nothing; then it goes in in batches of :data:`IMPORT_BATCH` lines, each one transaction."""
    path = Path(path)
    total = check_audit_log(path) if checked is None else checked
    imported, read, batch = 0, 0, []
    for _, text, record, digest in _audit_lines(path):
        if read == total:  # lines appended since the check: not checked, not imported
            break
        read += 1
        batch.append(_audit_row(record, text, digest))
        if len(batch) == IMPORT_BATCH:
            imported += store._import_rows(batch)
            batch = []
    if batch:
        imported += store._import_rows(batch)
    return imported, read - imported


#: The CSV columns of an audit export (the console's call-log columns, the client, and the
#: record itself, so nothing is lost).
AUDIT_CSV = ("id", "time", "task", "tool", "level", "decision", "code", "reason", "decided_by", "note", "upstream",
             "session", "client", "record")
APPROVALS_CSV = ("id", "status", "replica", "client", "asked_at", "deadline", "decided_at", "by", "note", "request")
EXPORTS = ("audit", "approvals")
FORMATS = ("jsonl", "csv")


def export_lines(store: StateStore, what: str, fmt: str) -> Iterator[bytes]:
    """The audit log (oldest first, each line as written; CSV with the whole record in its
    last column) or the approvals (oldest first), as JSONL or CSV, in pieces."""
    if what not in EXPORTS or fmt not in FORMATS:
        raise StoreError(f"cannot export {what!r} as {fmt!r} (what: {', '.join(EXPORTS)}; format: {', '.join(FORMATS)})")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")

    def row(cells: list[Any]) -> bytes:
        writer.writerow([spreadsheet_cell(c) for c in cells])
        data = buf.getvalue().encode("utf-8")
        buf.seek(0)
        buf.truncate()
        return data

    if fmt == "csv":
        yield row(list(AUDIT_CSV if what == "audit" else APPROVALS_CSV))
    if what == "approvals":
        for a in store._all_approvals():
            yield (_dump(a) + "\n").encode("utf-8") if fmt == "jsonl" else row([a[c] for c in APPROVALS_CSV[:-1]] + [_dump(a["request"])])
        return
    after = None
    while page := store._audit_texts(after=after, limit=IMPORT_BATCH):
        for i, text in page:
            if fmt == "jsonl":
                yield (text + "\n").encode("utf-8")
            else:
                rec = json.loads(text)
                yield row([i, *(rec.get(c) for c in AUDIT_CSV[1:-1]), text])
        after = page[-1][0]


# -- the audit's review queue -------------------------------------------------------------------------------
REVIEW_KIND = "review"


class StoreReview:
    """The review queue of one label file (``riskrank audit``'s tools awaiting a reviewer), in
    the state store: every replica's console reads and writes the same queue. Keyed by the
    label file's name; brought in with ``riskrank state import --review FILE --labels
    LABELS.json``. A decision is written only if nobody wrote the queue since the page read it
    (compare-and-swap): two reviewers at two consoles cannot overwrite each other.
    :func:`riskrank.audit.read_review` and ``save_review_decision`` take it in place of a path."""

    def __init__(self, store: StateStore, labels: str | Path) -> None:
        self.store, self.key = store, Path(labels).name
        self._version: int | None = None

    @property
    def name(self) -> str:
        return f"the review queue of {self.key}"

    def __str__(self) -> str:
        return f"{self.store.url} (review queue of {self.key})"

    def is_file(self) -> bool:
        """Whether the store holds this queue (the console's "is there a queue" question)."""
        return self.store.get_doc(REVIEW_KIND, self.key) is not None

    def read_entries(self) -> list[dict[str, Any]]:
        from riskrank.audit import AuditError

        got = self.store.get_doc(REVIEW_KIND, self.key)
        if got is None:
            raise AuditError(f"{self}: no review queue in the store (riskrank state import --review FILE --labels {self.key})")
        self._version, entries = got
        return [{**e, "_line": i} for i, e in enumerate(entries, 1)]

    def write_entries(self, entries: list[dict[str, Any]]) -> None:
        from riskrank.audit import AuditError

        clean = [{k: v for k, v in e.items() if k != "_line"} for e in entries]
        if self.store.put_doc(REVIEW_KIND, self.key, clean, expect=self._version) is None:
            raise AuditError(f"{self}: another reviewer saved a decision meanwhile; reload the review queue")


def import_review(store: StateStore, review: str | Path, labels: str | Path) -> int:
    """Put a review file (``riskrank audit``'s JSONL queue, read strictly) into the store as
    the queue of ``labels``, replacing the store's; returns the entries."""
    from riskrank.audit import read_review

    entries = [{k: v for k, v in e.items() if k != "_line"} for e in read_review(review)]
    queue = StoreReview(store, labels)
    got = store.get_doc(REVIEW_KIND, queue.key)
    if store.put_doc(REVIEW_KIND, queue.key, entries, expect=None if got is None else got[0]) is None:
        raise StoreError(f"{queue}: written by someone else meanwhile; import again")
    return len(entries)
