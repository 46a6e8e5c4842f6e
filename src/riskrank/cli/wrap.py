"""``riskrank wrap`` / ``riskrank unwrap`` (the MCP clients of this machine put behind the
gateway, and back; :mod:`riskrank.serving.wrap`) and ``riskrank policy check`` and ``replay``."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from riskrank.cli.common import Declined, echo, print_table
from riskrank.errors import RiskrankError
from riskrank.serving.wrap import CLIENTS as CLIENT_TITLES

CLIENT_CHOICE = click.Choice(list(CLIENT_TITLES))
SERVERS_DIR = click.option(
    "--servers-dir", type=click.Path(), default=None, metavar="DIR",
    help="Where the servers files, backups and records of wrapped clients live [default: "
         "$XDG_CONFIG_HOME/riskrank/wrapped, ~/.config/riskrank/wrapped; Windows: %APPDATA%\\riskrank\\wrapped].")
CLIENTS = click.option("--client", "clients", type=CLIENT_CHOICE, multiple=True,
                       help="Only this client's files (repeatable) [default: every client].")
DRY_RUN = click.option("--dry-run", is_flag=True, help="Print the changes as a unified diff; write nothing.")
YES = click.option("--yes", "-y", is_flag=True, help="Do it without asking.")


def _servers_dir(value: str | None) -> Path:
    from riskrank.serving.wrap import WrapError, config_dir

    path = Path(value) if value else config_dir() / "wrapped"
    if path.exists() and not path.is_dir():
        raise WrapError(f"--servers-dir {path}: not a directory")
    return path


def default_command() -> list[str]:
    """How a client starts this riskrank: the ``riskrank`` script that is running (or the one
    on PATH) by its absolute path, else this interpreter with ``-m riskrank``. A client's own
    PATH is often shorter than a shell's, so the path is written out."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name in ("riskrank", "riskrank.exe") and argv0.is_file():
        return [str(argv0.absolute())]
    found = shutil.which("riskrank")
    return [os.path.abspath(found)] if found else [sys.executable, "-m", "riskrank"]



def _asked(question: str) -> bool:
    """The user's yes to ``question``; a closed standard input (``< /dev/null``, a pipe that
    ended) is no answer, so a no: nothing is written, exit 1, as for a typed "n" (Ctrl-C stays
    an abort)."""
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort as exc:
        if isinstance(exc.__context__, EOFError):  # click raises Abort "from None" for both
            echo("(no answer: standard input is closed; --yes does not ask)", err=True)
            return False
        raise

@click.command("wrap")
@CLIENTS
@click.option("--project", type=click.Path(file_okay=False, exists=True), default=None, metavar="DIR",
              help="The project whose files (.vscode/mcp.json, .cursor/mcp.json, .mcp.json) count [default: the "
                   "current directory].")
@SERVERS_DIR
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), default=None, metavar="POLICY.json",
              help="The policy the wrapped clients' gateway runs (checked first; written with the defaults when "
                   "missing) [default: policy.json in riskrank's configuration directory].")
@click.option("--command", "command_line", default=None, metavar="CMD",
              help="How the clients start riskrank, a command line [default: this riskrank's absolute path].")
@DRY_RUN
@YES
def wrap_command(clients: tuple[str, ...], project: str | None, servers_dir: str | None, policy_file: str | None,
                 command_line: str | None, dry_run: bool, yes: bool) -> None:
    """Put riskrank in front of the MCP clients on this machine: Claude Desktop, Cursor, VS Code,
    Windsurf and Claude Code (docs/wrap.md lists their files on each OS).

    Shows what it found, then, once confirmed, moves each file's servers into a servers file of
    riskrank's and leaves the client one entry that runs `riskrank mcp` on it under the policy.
    The original bytes are kept; `riskrank unwrap` restores them. A file it cannot read is left
    as it is, with the reason; a server riskrank cannot run as written stays in the client."""
    from riskrank.fileio import write_json
    from riskrank.serving.gateway.config import load_policies
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.wrap import (
        WrapError,
        config_dir,
        diff,
        discover,
        plan_wrap,
        servers_file_bytes,
    )

    sdir = _servers_dir(servers_dir)
    policy = Path(policy_file) if policy_file else config_dir() / "policy.json"
    if policy.exists():
        load_policies(policy)  # a bad policy is one line now, not a client whose server fails to start
    try:
        command = shlex.split(command_line) if command_line is not None else default_command()
    except ValueError as exc:
        raise RiskrankError(f"--command: cannot split the command line: {exc}") from None
    if not command:
        raise RiskrankError("--command needs a command line, e.g. --command riskrank")
    found = discover(clients=clients, project=Path(project) if project else None, servers_dir=sdir)
    if not found:
        echo("no MCP client configuration found (docs/wrap.md lists where each client keeps it)")
        return
    plans = [plan_wrap(f, servers_dir=sdir, policy=policy.absolute(), command=command) for f in found if f.state == "wrap"]
    rows = []
    for f in found:
        plan = next((p for p in plans if p.found is f), None)
        if plan is None:
            what = f"left as it is: {f.why}"
        elif not plan.sections:
            what = "left as it is: no server riskrank can run as written"
        else:
            what = "wrap: " + "; ".join(f"{', '.join(sp.moved)} to riskrank" for sp in plan.sections)
        rows.append([f.client, f.spec.scope, str(f.path), str(f.servers), what])
    print_table(rows, ["client", "scope", "file", "servers", "what wrap does"])
    for plan in plans:
        for sp in plan.sections:
            for name, why in sp.kept.items():
                echo(f"  {plan.found.path}: {name} stays in {plan.found.client}: {why}")
        for section, why in plan.skipped.items():
            echo(f"  {plan.found.path}: {section} stays as it is: {why}")
    blocked = [f for f in found if f.state == "read-only"]
    if blocked:
        raise WrapError(f"{blocked[0].path}: {blocked[0].why}: riskrank wrap changes nothing; make it writable, or leave "
                        f"its client out (--client)")
    plans = [p for p in plans if p.sections]
    if not plans:
        echo("nothing to wrap")
        return
    if dry_run or not yes:  # what would change, before it is asked about (or instead of doing it)
        if not policy.exists():
            echo(f"(would write the default policy to {policy})")
        for plan in plans:
            echo(diff(plan.found.path, plan.found.raw, plan.new_raw), nl=False)
            for sp in plan.sections:
                echo(diff(sp.servers_file, b"", servers_file_bytes(sp)), nl=False)
    if dry_run:
        return
    if not yes and not _asked(f"Wrap {len(plans)} file(s)?"):
        raise Declined("not wrapped: nothing was written")
    if not policy.exists():
        write_json(policy, Policy().to_dict())
        echo(f"wrote the default policy to {policy} (edit it: docs/serving.md#the-policy-file)")
    from riskrank.serving.wrap import apply_wrap

    for plan in plans:
        apply_wrap(plan, policy.absolute())
        moved = sum(len(sp.moved) for sp in plan.sections)
        echo(f"wrapped {plan.found.path}: {moved} server(s) now run behind riskrank "
             f"({', '.join(str(sp.servers_file) for sp in plan.sections)}); restart {plan.found.client} to use it")


@click.command("unwrap")
@CLIENTS
@SERVERS_DIR
@DRY_RUN
@YES
def unwrap_command(clients: tuple[str, ...], servers_dir: str | None, dry_run: bool, yes: bool) -> None:
    """Undo riskrank wrap: each wrapped file gets its original bytes back (a file its client has
    saved since gets its servers back and keeps its other changes), and the servers files,
    backups and records wrap made are removed (a servers file edited since is kept)."""
    from riskrank.serving.wrap import WrapError, apply_unwrap, diff, plan_unwrap, records

    sdir = _servers_dir(servers_dir)
    found = records(sdir, clients)
    if not found:
        echo(f"nothing is wrapped (no wrap records in {sdir})")
        return
    plans, failed = [], []
    for path, record in found:
        try:
            plans.append(plan_unwrap(path, record))
        except WrapError as exc:
            failed.append(str(exc))
    rows = [[CLIENT_TITLES.get(p.record["client"], p.record["client"]), p.record["scope"], str(p.config), "restore its original bytes" if p.exact else p.note]
            for p in plans]
    if rows:
        print_table(rows, ["client", "scope", "file", "what unwrap does"])
    if dry_run:
        for p in plans:
            echo(diff(p.config, p.current, p.new_raw), nl=False)
    elif plans:
        if not yes and not _asked(f"Unwrap {len(plans)} file(s)?"):
            raise Declined("not unwrapped: nothing was written")
        for p in plans:
            try:
                kept = apply_unwrap(p)
            except WrapError as exc:
                failed.append(str(exc))
                continue
            echo(f"unwrapped {p.config}" + ("" if p.exact else f" ({p.note})")
                 + "".join(f"; kept {k} (changed since wrap)" for k in kept if k.suffix == ".json"))
    if failed:
        raise WrapError(failed[0] + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""))


@click.group("policy")
def policy_group() -> None:
    """The gateway's policy file (riskrank mcp --policy)."""


@policy_group.command("check")
@click.argument("policy_file", type=click.Path(dir_okay=False), metavar="POLICY.json")
def policy_check(policy_file: str) -> None:
    """Check POLICY.json as the gateway reads it and print it resolved: every named policy (a
    file of one policy is the policy named default) with every default filled in, as JSON
    that reads back to the same policies. A mistake is one line naming the file and field."""
    from riskrank.fileio import dumps
    from riskrank.serving.gateway.config import load_policies

    echo(dumps(load_policies(policy_file).to_dict()))


@policy_group.command("replay")
@click.option("--audit", "audit", required=True, metavar="FILE|STORE",
              help="The audit log to replay: the gateway's --audit-log JSONL, or its --state store (a postgresql:// URL "
                   "or a SQLite directory).")
@click.option("--policy", "policy_file", required=True, type=click.Path(dir_okay=False), metavar="NEW.json",
              help="The policy to try (checked as the gateway reads it).")
@click.option("--since", default=None, metavar="TIME", help="Only lines at or after TIME (an ISO prefix: 2026-12-06T04).")
@click.option("--until", default=None, metavar="TIME", help="Only lines before TIME (an ISO prefix).")
@click.option("--json", "as_json", is_flag=True, help="Print every change with its examples as JSON.")
def policy_replay(audit: str, policy_file: str, since: str | None, until: str | None, as_json: bool) -> None:
    """Re-decide every recorded find_tools and call of an audit log under NEW.json with the
    gateway's own decision code, and print what would change (newly refused, newly confirmed,
    no longer confirmed, no longer offered) by client and tool, with counts and an example.
    What a log cannot show (docs/serving.md, "Policy dry run") is said, not guessed."""
    from riskrank.fileio import dumps
    from riskrank.serving.gateway.config import load_policies
    from riskrank.serving.gateway.replay import read_lines, render, replay

    policies = load_policies(policy_file)
    path = Path(audit)
    store = None
    if path.is_file():
        lines = read_lines(path)
    elif "://" in audit or path.is_dir():
        from riskrank.serving.gateway.auditlog import read_records
        from riskrank.serving.gateway.store import open_store

        try:
            store = open_store(audit, create=False)
        except RiskrankError as exc:  # the store's own words name --state: here it is --audit
            raise type(exc)(str(exc).replace("--state ", "--audit ", 1)) from None
        lines = enumerate(read_records(store), 1)  # type: ignore[assignment]
    else:
        raise RiskrankError(f"--audit {audit}: no such audit log (a JSONL file, a state directory or a postgresql:// URL)")

    def window(items):  # type: ignore[no-untyped-def]
        for n, rec in items:
            stamp = str((rec or {}).get("time") or "")
            if rec is not None and ((since and stamp < since) or (until and stamp >= until)):
                continue
            yield n, rec

    try:
        result = replay(window(lines), policies)
    except OSError as exc:
        raise RiskrankError(f"--audit {audit}: cannot read it: {exc.strerror or exc}") from None
    finally:
        if store is not None:
            store.close()
    if result.records == 0 and result.skipped:
        raise RiskrankError(f"--audit {audit}: none of its {sum(result.skipped.values())} lines is an audit record "
                            "(a JSON object per line)")
    if not result.calls and not result.finds:  # "nothing would change" would claim what was never checked
        bounds = [f"--since {since}"] * bool(since) + [f"--until {until}"] * bool(until)
        window_text = f" between {' and '.join(bounds)}" if bounds else ""
        why = ("; skipped: " + ", ".join(f"{k}: {v}" for k, v in sorted(result.skipped.items()))) if result.skipped else ""
        raise RiskrankError(f"--audit {audit}: no call or find_tools line{window_text} to re-decide "
                            f"({result.records} audit records read{why}): nothing was checked")
    echo(dumps(result.to_dict()) if as_json else render(result))
