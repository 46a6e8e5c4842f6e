"""``riskrank pins`` (the operator's side of the pin store) and ``riskrank scan`` (the
poisoning checks, offline, over a registry or a ``tools/list`` dump; docs/trust.md)."""

from __future__ import annotations

import json
import os
import sys

import click

from riskrank.errors import RiskrankError

STATE_DIR = click.option("--state-dir", type=click.Path(file_okay=False, exists=True), required=True,
                         help="The gateway's --state-dir.")


@click.group("pins")
def pins_group() -> None:
    """The pins of upstream tool definitions a gateway keeps in --state-dir: list what is held,
    show a change, approve it, or forget a server's pins. Works while the gateway runs: it
    re-reads the pins on the next list."""


def _store(state_dir: str):
    from riskrank.serving.gateway.pins import PinStore

    store = PinStore(state_dir, lock=False)
    return store


@pins_group.command("list")
@STATE_DIR
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pins_list(state_dir: str, as_json: bool) -> None:
    """Each server's pinned tools and the tools awaiting approval."""
    store = _store(state_dir)
    rows = store.summary()
    if as_json:
        click.echo(json.dumps({"pins": str(store.path), "trusted": store.broken is None, "broken": store.broken,
                               "servers": rows, "awaiting": [c.to_dict() for c in store.changes()]}, indent=2))
    if store.broken:  # an unreadable store is bad input: exit 2, after the document when one was asked for
        raise RiskrankError(f"the pin store is not trusted ({store.broken}): every upstream tool is quarantined until "
                            "`riskrank pins reset`")
    if as_json:
        return
    for r in rows:
        click.echo(f"{r['upstream']}: {r['pinned']} pinned" + (f"; awaiting approval: {', '.join(r['awaiting'])}"
                                                               if r["awaiting"] else ""))
    if not rows:
        click.echo(f"no pins yet in {store.path}")


@pins_group.command("diff")
@STATE_DIR
@click.argument("upstream")
@click.argument("tool", required=False)
def pins_diff(state_dir: str, upstream: str, tool: str | None) -> None:
    """The change of each held tool of UPSTREAM (or of TOOL): the pinned definition against
    the one the server lists now."""
    changes = [c for c in _store(state_dir).changes(upstream) if tool is None or c.name == tool]
    if not changes:
        raise RiskrankError(f"nothing of {upstream!r}{' ' + repr(tool) if tool else ''} awaits approval")
    for c in changes:
        click.echo(f"# {c.kind}: {c.upstream}/{c.name}")
        click.echo(c.diff() if c.pinned else json.dumps(c.seen, indent=2, sort_keys=True, ensure_ascii=False))


@pins_group.command("approve")
@STATE_DIR
@click.argument("upstream")
@click.argument("tool", required=False)
def pins_approve(state_dir: str, upstream: str, tool: str | None) -> None:
    """Pin what UPSTREAM lists now for TOOL (every held tool of UPSTREAM without TOOL)."""
    store = _store(state_dir)
    if store.broken:
        raise RiskrankError(f"the pin store is not trusted ({store.broken}): check it, then `riskrank pins reset`")
    names = store.approve(upstream, tool)
    click.echo(f"approved {', '.join(names) if names else 'nothing (no tool awaited approval)'} of {upstream!r}")


@pins_group.command("reset")
@STATE_DIR
@click.argument("upstream", required=False)
def pins_reset(state_dir: str, upstream: str | None) -> None:
    """Forget the pins of UPSTREAM (every server, and a store that is not trusted, without it):
    the next list pins afresh under the policy's first_seen."""
    _store(state_dir).reset(upstream)
    click.echo(f"reset the pins of {upstream!r}" if upstream else "reset every pin")


def _listed(path: str, startup_timeout: float) -> list[dict]:
    """The tools of every server of an ``mcpServers`` file, each started as the gateway starts
    it (the same checks of the file, the same child environment) and stopped once listed;
    each tool named ``server/tool``."""
    import anyio

    from riskrank.serving import mcp_compat
    from riskrank.serving.gateway.config import load_servers

    problems: list[str] = []
    servers = load_servers(path, problems=problems)
    for p in problems:
        click.echo(f"warning: {p}; that server is not scanned", err=True)

    async def one(up) -> list[dict]:
        with anyio.fail_after(startup_timeout), open(os.devnull, "w") as quiet:
            async with mcp_compat.open_session(up.target, errlog=quiet) as session:
                return [{**t, "name": f"{up.name}/{t.get('name')}"} for t in await mcp_compat.list_all(session, "tools")]

    out: list[dict] = []
    for up in servers:
        try:
            out += anyio.run(one, up)
        except Exception as exc:  # one server that will not start is reported, the others scanned
            click.echo(f"warning: {up.name!r} did not list its tools ({type(exc).__name__}: {exc}); not scanned", err=True)
    return out


@click.command("scan")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print {\"tools\": [{name, verdict, findings}], \"counts\": {...}}.")
@click.option("--startup-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="For an mcpServers file: seconds each server has to start and list its tools.")
def scan_command(path: str, as_json: bool, startup_timeout: float) -> None:
    """Check the tool definitions of PATH (a registry file, an MCP tools/list dump, or an
    mcpServers file, whose servers are started and listed as the gateway does) for text
    addressed to the model: instructions, things hidden from the user, exfiltration cues,
    claims over other tools, invisible text. Exit 0 when no tool is poisoned, 1 when one is,
    2 on bad input."""
    from riskrank.fileio import loads_strict, read_regular_file
    from riskrank.scan import VERDICTS, scan_tools

    try:
        data = loads_strict(read_regular_file(path, max_bytes=256 * 1024 * 1024).decode("utf-8"), path, RiskrankError)
    except OSError as exc:
        raise RiskrankError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RiskrankError(f"{path}: not UTF-8 text") from None
    if isinstance(data, dict) and isinstance(data.get("mcpServers"), dict):
        tools = _listed(path, startup_timeout)
    else:
        tools = data.get("tools") if isinstance(data, dict) else data
        if isinstance(data, dict) and isinstance(data.get("result"), dict):
            tools = data["result"].get("tools")
        if not isinstance(tools, list):
            raise RiskrankError(f"{path}: no list of tools (a registry's \"tools\", a tools/list result, or mcpServers)")
    scans = scan_tools(tools)
    counts = {v: sum(s.verdict == v for s in scans) for v in VERDICTS}
    if as_json:
        click.echo(json.dumps({"source": path, "tools": [s.to_dict() for s in scans], "counts": counts}, indent=2,
                              ensure_ascii=False))
    else:
        for s in scans:
            if s.verdict != "clean":
                click.echo(f"{s.verdict:<10} {s.name}: {s.reason()}")
        click.echo(f"{len(scans)} tools: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS))
    sys.exit(1 if counts["poisoned"] else 0)


@click.group("clients")
def clients_group() -> None:
    """The clients file of a streamable-HTTP gateway (--clients): each client's token digest and
    the named policy it gets. A running gateway re-reads the file when it changes."""


@clients_group.command("add")
@click.argument("name")
@click.option("--clients", "clients_file", type=click.Path(dir_okay=False), required=True, metavar="CLIENTS.json",
              help="The clients file (created if missing; written atomically).")
@click.option("--policy", "policy_name", default=None, help="The named policy the client gets (with --rotate: kept).")
@click.option("--policies", "policy_file", type=click.Path(dir_okay=False, exists=True), default=None, metavar="POLICY.json",
              help="Check the policy name against the gateway's policy file.")
@click.option("--rotate", is_flag=True, help="Give an existing client a second token (remove the old digest later).")
@click.option("--token-stdin", is_flag=True, help="Read the token from stdin instead of making one (16+ characters).")
def clients_add(name: str, clients_file: str, policy_name: str | None, policy_file: str | None, rotate: bool,
                token_stdin: bool) -> None:
    """Add client NAME with a new token (printed once on stdout; only its sha256 is kept)."""
    from pathlib import Path

    from riskrank.serving.gateway.clients import add_client
    from riskrank.serving.gateway.config import load_policies

    if not rotate and not policy_name:
        raise RiskrankError("give --policy NAME: the named policy of the gateway's policy file this client gets")
    token = sys.stdin.readline().strip() if token_stdin else None
    policies = load_policies(policy_file) if policy_file else None
    made = add_client(Path(clients_file), name, policy_name or "", token=token, rotate=rotate, policies=policies)
    click.echo(f"{'rotated' if rotate else 'added'} {name!r} in {clients_file}; its token (shown once):", err=True)
    if token is None:
        click.echo(made)


@clients_group.command("list")
@click.option("--clients", "clients_file", type=click.Path(dir_okay=False, exists=True), required=True, metavar="CLIENTS.json")
@click.option("--policies", "policy_file", type=click.Path(dir_okay=False, exists=True), default=None, metavar="POLICY.json",
              help="Check every client's policy against the gateway's policy file.")
def clients_list(clients_file: str, policy_file: str | None) -> None:
    """Each client, its policy and how many tokens it has (a rotation in progress has two)."""
    from pathlib import Path

    from riskrank.fileio import loads_strict
    from riskrank.serving.gateway.clients import read_clients_file
    from riskrank.serving.gateway.config import ConfigError, Policies, load_policies
    from riskrank.serving.gateway.policy import Policy

    policies = load_policies(policy_file) if policy_file else None
    if policies is None:  # no policy file to check against: accept every name the file uses
        data = loads_strict(Path(clients_file).read_text(encoding="utf-8-sig"), clients_file, ConfigError)
        raw = data.get("clients", {}) if isinstance(data, dict) else {}
        names = {str(e.get("policy")) for e in raw.values() if isinstance(e, dict)} if isinstance(raw, dict) else set()
        names = names or {"default"}
        policies = Policies({n: Policy() for n in names}, next(iter(sorted(names))))
    clients, oauth = read_clients_file(Path(clients_file), policies, {})
    for c in clients.values():
        click.echo(f"{c.name}\t{c.policy}\t{len(c.digests)} token(s)")
    if oauth is not None:
        click.echo(f"oauth\t{oauth.get('issuer')}\tdefault policy {oauth.get('default_policy', policies.default)}")
