"""``riskrank state``: the gateway's state store (``--state DIR`` for SQLite, or a
``postgresql://`` URL): migrate its schema, show where it stands, export it, and import a
JSONL audit log written before there was a store.

Migration is a command of its own, never a side effect of starting a gateway: with several
replicas on one database, the schema changes once, on purpose, from one place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from riskrank.cli.common import echo
from riskrank.errors import RiskrankError

STATE = click.option("--state", "where", required=True, metavar="URL|DIR",
                     help="The gateway's state: a directory (SQLite, state.sqlite3 in it) or a postgresql:// URL.")


@click.group("state")
def state_group() -> None:
    """The gateway's state store: the audit log, approvals, pins and exposure that every
    replica of a gateway shares (SQLite in a directory, or PostgreSQL)."""


@state_group.command("migrate")
@STATE
def state_migrate(where: str) -> None:
    """Create the schema, or upgrade it to this riskrank's version (gateways refuse a store
    whose schema is not theirs). Safe to run twice, or from two machines at once."""
    from riskrank.serving.gateway.store import connect

    with connect(where, create=True) as store:
        before, after = store.migrate()
    echo(f"{store.url}: schema {before} -> {after}" if before != after else f"{store.url}: already at {after}")


@state_group.command("status")
@STATE
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def state_status(where: str, as_json: bool) -> None:
    """Backend, URL, schema version and counts. Exit 0 when gateways can use the store, 1 when
    its schema needs `riskrank state migrate`, 2 when it cannot be reached."""
    from riskrank.serving.gateway.store import connect

    with connect(where, create=False) as store:
        health = store.health()
        if health["schema"] is None and health["error"] and "no schema" not in health["error"]:
            raise RiskrankError(health["error"])
        counts = {"audit": store.count(), "pending": len(store.pending())} if health["ok"] else None
    if as_json:
        echo(json.dumps({**health, "counts": counts}, indent=2))
    else:
        echo(f"backend  {health['backend']}")
        echo(f"url      {health['url']}")
        echo(f"schema   {health['schema'] if health['schema'] is not None else 'none'}"
                   + ("" if health["ok"] else f" ({health['error']})"))
        if counts is not None:
            echo(f"audit    {counts['audit']:,} lines")
            echo(f"pending  {counts['pending']:,} approvals")
    sys.exit(0 if health["ok"] else 1)


@state_group.command("export")
@STATE
@click.option("--what", type=click.Choice(["audit", "approvals"]), required=True, help="The audit log, or the approvals.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True,
              help="JSONL (audit lines as the gateway wrote them) or CSV (the record whole in its last column).")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="The file to write (atomically).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def state_export(where: str, what: str, fmt: str, out: str, force: bool) -> None:
    """Write the audit log or the approvals to a file, oldest first."""
    from riskrank.fileio import atomic_writer
    from riskrank.serving.gateway.store import export_lines, open_store

    if "://" not in where and Path(where).is_dir() and Path(out).resolve().parent == Path(where).resolve():
        # the store's own files (its database, its journal) are there: --force must not replace one
        raise RiskrankError(f"--out {out} is inside the state store {where}; write the export elsewhere")
    if Path(out).exists() and not force:
        raise RiskrankError(f"--out {out} exists; pass --force to replace it")
    n = -1 if fmt == "csv" else 0
    with open_store(where, create=False) as store, atomic_writer(out) as fh:
        for piece in export_lines(store, what, fmt):
            fh.write(piece)
            n += 1
    echo(f"wrote {n:,} {'records' if what == 'audit' else 'approvals'} to {out}")


@state_group.command("import")
@STATE
@click.option("--audit-log", "audit_log", type=click.Path(dir_okay=False), default=None,
              help="A JSONL audit log (the gateway's --audit-log file).")
@click.option("--review", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A review queue (riskrank audit's JSONL), kept in the store for every replica's console; with --labels.")
@click.option("--labels", type=click.Path(dir_okay=False), default=None,
              help="The label file the --review queue belongs to (the console's --labels).")
def state_import(where: str, audit_log: str | None, review: str | None, labels: str | None) -> None:
    """Import a JSONL audit log into the store (every line is checked first: a bad one
    imports nothing; importing the same file again adds nothing twice), or a review queue
    (it replaces the store's queue of that label file)."""
    from riskrank.serving.gateway.store import (
        check_audit_log,
        import_audit_log,
        import_review,
        open_store,
    )

    if (audit_log is None) == (review is None):
        raise RiskrankError("give --audit-log FILE or --review FILE --labels LABELS.json (one of them)")
    if review is not None:
        if labels is None:
            raise RiskrankError("--review needs --labels LABELS.json: the label file whose queue it is")
        from riskrank.audit import read_review

        read_review(review)  # before the store is opened: bad input creates nothing
        with open_store(where, create=True) as store:
            n = import_review(store, review, labels)
        echo(f"imported the review queue of {Path(labels).name} ({n:,} tools) from {review}")
        return
    checked = check_audit_log(audit_log)  # before the store is opened: bad input creates nothing
    with open_store(where, create=True) as store:
        imported, there = import_audit_log(store, audit_log, checked=checked)
    echo(f"imported {imported:,} records from {audit_log} ({there:,} were already there)")
