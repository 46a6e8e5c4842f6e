"""``riskrank pins`` (the operator's side of the pin store), ``riskrank scan`` (the poisoning
checks over a registry, a ``tools/list`` dump, or the servers of an ``mcpServers`` file, which
it starts only without ``--no-start``; docs/trust.md) and ``riskrank clients``."""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import click

from riskrank.cli.common import echo
from riskrank.errors import RiskrankError
from riskrank.fileio import show

STATE_DIR = click.option("--state-dir", type=click.Path(file_okay=False, exists=True), required=True,
                         help="The gateway's --state-dir.")
PIN_KEY = click.option("--pin-key", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                       help="The gateway's --pin-key [default: $RISKRANK_PIN_KEY, else the store's own key].")


@click.group("pins")
def pins_group() -> None:
    """The pins of upstream tool definitions a gateway keeps in --state-dir: list what is held,
    show a change, approve it, or forget a server's pins. Works while the gateway runs: it
    re-reads the pins on the next list."""


def _store(state_dir: str, pin_key: str | None):
    from riskrank.serving.gateway.pins import PinStore

    return PinStore(state_dir, lock=False, key=pin_key)


@pins_group.command("list")
@STATE_DIR
@PIN_KEY
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pins_list(state_dir: str, pin_key: str | None, as_json: bool) -> None:
    """Each server's pinned tools and the tools awaiting approval."""
    store = _store(state_dir, pin_key)
    rows = store.summary()
    if as_json:
        echo(json.dumps({"pins": str(store.path), "key": str(store.key.path), "trusted": store.broken is None,
                         "broken": store.broken, "alerts": store.alerts, "servers": rows,
                         "awaiting": [c.to_dict() for c in store.changes()]}, indent=2))
    if store.broken:  # an unreadable store is bad input: exit 2, after the document when one was asked for
        raise RiskrankError(f"the pin store is not trusted ({store.broken}): every upstream tool is quarantined until "
                            "`riskrank pins reset`")
    if as_json:
        return
    for alert in store.alerts:
        if not alert.get("reported"):
            echo(f"ALERT: {alert.get('what')}")
    for r in rows:
        echo(f"{r['upstream']}: {r['pinned']} pinned" + (f"; awaiting approval: {', '.join(r['awaiting'])}"
                                                               if r["awaiting"] else ""))
    if not rows:
        echo(f"no pins yet in {store.path}")


@pins_group.command("diff")
@STATE_DIR
@PIN_KEY
@click.argument("upstream")
@click.argument("tool", required=False)
def pins_diff(state_dir: str, pin_key: str | None, upstream: str, tool: str | None) -> None:
    """The change of each held tool of UPSTREAM (or of TOOL): the pinned definition against
    the one the server lists now."""
    store = _store(state_dir, pin_key)
    if store.broken:  # its contents cannot be read as pinned: "nothing awaits approval" would not be true
        raise RiskrankError(f"the pin store is not trusted ({store.broken}): check it, then `riskrank pins reset`")
    changes = [c for c in store.changes(upstream) if tool is None or c.name == tool]
    if not changes:
        raise RiskrankError(f"nothing of {upstream!r}{' ' + repr(tool) if tool else ''} awaits approval")
    for c in changes:
        echo(f"# {c.kind}: {c.upstream}/{c.name}")
        echo(c.diff() if c.pinned else json.dumps(c.seen, indent=2, sort_keys=True, ensure_ascii=False))


@pins_group.command("approve")
@STATE_DIR
@PIN_KEY
@click.argument("upstream")
@click.argument("tool", required=False)
def pins_approve(state_dir: str, pin_key: str | None, upstream: str, tool: str | None) -> None:
    """Pin what UPSTREAM lists now for TOOL (every held tool of UPSTREAM without TOOL)."""
    store = _store(state_dir, pin_key)
    if store.broken:
        raise RiskrankError(f"the pin store is not trusted ({store.broken}): check it, then `riskrank pins reset`")
    names = store.approve(upstream, tool)
    echo(f"approved {', '.join(names) if names else 'nothing (no tool awaited approval)'} of {upstream!r}")


@pins_group.command("reset")
@STATE_DIR
@PIN_KEY
@click.argument("upstream", required=False)
def pins_reset(state_dir: str, pin_key: str | None, upstream: str | None) -> None:
    """Forget the pins of UPSTREAM (every server, and a store that is not trusted, without it):
    the next list pins afresh under the policy's first_seen."""
    store = _store(state_dir, pin_key)
    if store.broken and upstream is not None:  # one server's pins cannot be told apart in a store not trusted
        raise RiskrankError(f"the pin store is not trusted ({store.broken}): `riskrank pins reset` without a server "
                            "forgets every pin")
    store.reset(upstream)
    echo(f"reset the pins of {upstream!r}" if upstream else "reset every pin")


def _definitions(data: Any, path: str) -> list[dict]:
    """The tool definitions a static file holds (nothing runs): a registry's ``tools``, a
    ``tools/list`` result (or its JSON-RPC answer), a list of records (plain, MCP, or OpenAI
    function specs), the label-file shape (name -> record) or one tool's definition. Anything else, an empty list,
    or a record that is not an object with a name is one error (exit 2)."""
    from riskrank.registry import servers_not_tools

    tools: Any = data
    if isinstance(data, dict):
        if isinstance(data.get("result"), dict):
            tools = data["result"].get("tools")
        elif "tools" in data:
            tools = data["tools"]
        elif data and all(isinstance(v, dict) for v in data.values()):
            servers_not_tools(data, path)
            tools = [{"name": k, **v} for k, v in data.items()]
        elif isinstance(data.get("name"), str):  # one tool's definition, as the registry loader reads it too
            tools = [data]
    if not isinstance(tools, list):
        raise RiskrankError(f"{path}: no tool definitions (a registry's \"tools\", a tools/list result, a list of tools) "
                            "and no servers (\"mcpServers\")")
    if not tools:
        raise RiskrankError(f"{path}: holds no tool definitions: nothing to check")
    out = []
    for i, rec in enumerate(tools):
        rec = rec.get("function") if isinstance(rec, dict) and isinstance(rec.get("function"), dict) else rec
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str) or not rec["name"]:
            raise RiskrankError(f"{path}: tools[{i}]: a tool definition is an object with a \"name\" string, "
                                f"not {show(rec)}")
        out.append(rec)
    return out


def _list_server(up: Any, startup_timeout: float) -> list[dict]:
    """The tools of one server, started (or connected to) as the gateway does: the same
    child environment, its stderr discarded, its process group killed once listed; each
    tool named ``server/tool``. Raises :class:`RiskrankError` with one line on any failure."""
    import anyio

    from riskrank.serving import mcp_compat
    from riskrank.serving.gateway.upstreams import describe, leaf

    printed: list[str] = []

    async def note(message: Any) -> None:  # a child that prints what is not JSON-RPC: said once, plainly
        if isinstance(message, Exception) and not printed:
            printed.append(mcp_compat.bad_line(message) or "")

    async def one(errlog: Any) -> list[dict]:
        with anyio.fail_after(startup_timeout):
            async with mcp_compat.open_session(up.target, errlog=errlog, message_handler=note) as session:
                return [{**t, "name": f"{up.name}/{t.get('name')}"} for t in await mcp_compat.list_all(session, "tools")]

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:  # kept for a failure's line only
        try:
            return anyio.run(one, errlog)
        except Exception as exc:  # every failure of an untrusted server is one line
            inner = leaf(exc)
            why = (f"it did not list its tools within {startup_timeout:g} s (--startup-timeout)" if isinstance(inner, TimeoutError)
                   else f"it printed {printed[0]!r}, which is not MCP JSON-RPC" if printed and printed[0]
                   else describe(inner))
            errlog.seek(0)
            said = [ln.strip() for ln in errlog.read(1 << 20).splitlines() if ln.strip()]
            tail = f"; its stderr ends: {said[-1][:160]!r}" if said else ""
            raise RiskrankError(f"{up.name!r} could not be listed: {why}{tail}") from None


def listed_definitions(path: str, startup_timeout: float, *, command: str, no_start: bool = False,
                       quiet: bool = False) -> tuple[list[dict], list[dict[str, Any]], list[str]]:
    """(the tool definitions PATH holds or its servers list, each server's row, the servers
    not listed with why). PATH is a static definitions file (:func:`_definitions`: nothing
    runs) or an mcpServers file, whose servers are STARTED as the gateway starts them (each
    plan printed on stderr first) and named ``server/tool``; with ``no_start`` nothing runs and
    each plan is printed instead (on stdout unless ``quiet``)."""
    from riskrank.cli.common import read_user_file
    from riskrank.fileio import loads_strict
    from riskrank.serving.gateway.config import load_servers

    data = loads_strict(read_user_file(path, max_bytes=256 * 1024 * 1024, encoding="utf-8-sig")[1], path, RiskrankError)
    servers: list[dict[str, Any]] = []
    unchecked: list[str] = []
    if not (isinstance(data, dict) and ("mcpServers" in data or "servers" in data)):
        return _definitions(data, path), servers, unchecked
    tools: list[dict] = []
    if not no_start:
        from riskrank.serving import mcp_compat

        mcp_compat.sdk_major()  # a missing extra is its own one line, before anything starts
        mcp_compat.quiet_stdio_parse_errors()  # the SDKs' tracebacks for what a child prints: said once, here
        mcp_compat.quiet_http_transport_errors()
    for up in load_servers(path, offline=no_start):
        row: dict[str, Any] = {**up.shown(), "started": not no_start}
        servers.append(row)
        if no_start:
            unchecked.append(f"{up.name!r} (--no-start)")
            if not quiet:
                echo(f"would {up.plan()}")
            continue
        echo(f"riskrank {command}: {up.plan()}", err=True)  # before it runs: what runs is on screen
        try:
            tools += _list_server(up, startup_timeout)
        except RiskrankError as exc:
            row["error"] = str(exc)
            unchecked.append(str(exc))
    return tools, servers, unchecked


def scan_listed(tools: list[dict], from_servers: bool, learned: bool) -> list:
    """Each listed definition's scan (:class:`riskrank.scan.Scan`, named as listed), the
    servers read against each other too: an mcpServers file's tools are ``server/tool``; a
    static file's records may name their ``server``, else they are one server's."""
    from collections import Counter
    from dataclasses import replace

    from riskrank.scan import DEFAULT, Finding, scan_catalogue, with_findings

    def split(t: dict) -> tuple[str, str]:
        return tuple(t["name"].split("/", 1)) if from_servers else (str(t.get("server") or ""), t["name"])  # type: ignore[return-value]

    catalogue: dict[str, list[dict]] = {}
    for t in tools:
        server, own = split(t)
        catalogue.setdefault(server, []).append({**t, "name": own})
    scanned = {server: iter(found) for server, found in scan_catalogue(catalogue, DEFAULT if learned else None).items()}
    # a server that lists one name twice has its whole list withdrawn by a gateway (which of the two is meant cannot be known)
    keys = [split(t) for t in tools]
    twice = Counter(keys)
    return [with_findings(replace(next(scanned[key[0]]), name=t["name"]),
                          [Finding("duplicate", "suspicious", "name",
                                   f"its server lists {key[1]!r} {twice[key]} times: a gateway withdraws that "
                                   "server's whole list")] if twice[key] > 1 else [])
            for t, key in zip(tools, keys, strict=True)]


@click.command("scan")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--no-start", is_flag=True,
              help="Run nothing: check the static definitions, and list each server command (or URL) the file "
                   "would start (or connect to) instead of starting it.")
@click.option("--allow-unreachable", is_flag=True,
              help="A server that could not be listed (or, with --no-start, was not started) is a warning, and the "
                   "exit status is that of the tools checked; without it, it is an error (exit 2).")
@click.option("--json", "as_json", is_flag=True,
              help="Print {\"tools\": [{name, verdict, findings, capabilities}], \"counts\": {...}, \"servers\": [...]}.")
@click.option("--startup-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="For an mcpServers file: seconds each server has to start and list its tools.")
@click.option("--learned", is_flag=True,
              help="Add the learned detector's findings to the rules' (off by default, as in the gateway: it is below "
                   "its targets and flags some real tools; docs/trust.md).")
def scan_command(path: str, no_start: bool, allow_unreachable: bool, as_json: bool, startup_timeout: float,
                 learned: bool) -> None:
    """Check tool definitions for poisoning; an mcpServers file's servers are STARTED (--no-start runs nothing).

    PATH is an mcpServers file, whose servers this command STARTS as the gateway does (each
    command runs, each URL is connected to with the headers the file names) to list their
    tools; each is printed on stderr before it starts. On a file you do not trust use
    --no-start: nothing runs, and each command (or URL) the file would start is listed
    instead. PATH may also be a registry file or a tools/list dump, read as it is (nothing
    runs).

    Each definition is read for text addressed to the model, by the rules (instructions, things
    hidden from the user, exfiltration cues, claims over other tools, invisible text) and, with
    --learned, by the learned detector (a "directive" finding: the span, its score and why in
    words); base64 or hex blobs are decoded once and read too. The servers of an mcpServers
    file (or the records of a file that name their "server") are also read against each other:
    a name that looks like another server's tool's, a text that names another server's tool.
    Each is also read for what it can do whatever it says (runs commands, reads secrets,
    deletes, sends data out, ...: each a ``capability`` line with its rubric floor and ATT&CK
    technique, which does not change the exit status). Exit 0 when every definition was
    checked and none is poisoned, 1 when one is poisoned, 2 on bad input or when a server
    could not be checked (it failed to list, or --no-start left it unstarted) unless
    --allow-unreachable."""
    from types import SimpleNamespace

    from riskrank.levels import own_capabilities
    from riskrank.scan import VERDICTS

    tools, servers, unchecked = listed_definitions(path, startup_timeout, command="scan", no_start=no_start, quiet=as_json)
    if unchecked and not allow_unreachable and not no_start:
        raise RiskrankError(f"{'; '.join(unchecked)}; {'its' if len(unchecked) == 1 else 'their'} tools are not checked "
                            "(--allow-unreachable scans the others)")
    for line in unchecked if not no_start else []:
        echo(f"warning: {line}; not checked (--allow-unreachable)", err=True)
    scans = scan_listed(tools, bool(servers), learned)
    counts = {v: sum(s.verdict == v for s in scans) for v in VERDICTS}
    # what each tool can do, whatever its text says to the model: evidence for its level, not a verdict
    # read per server, each tool by its own words (an opening the server's tools share is the server's)
    shaped = [SimpleNamespace(name=str(t.get("name") or ""), description=str(t.get("description") or ""),
                              parameters=t.get("inputSchema") if isinstance(t.get("inputSchema"), dict) else t.get("parameters"))
              for t in tools]
    caps = own_capabilities(shaped, [t["name"].split("/", 1)[0] if servers else str(t.get("server") or "") for t in tools])
    if as_json:
        rows = [{**s.to_dict(), "capabilities": [h.to_dict() for h in hits]} for s, hits in zip(scans, caps, strict=True)]
        echo(json.dumps({"source": path, "tools": rows, "counts": counts,
                         **({"servers": servers} if servers else {})}, indent=2, ensure_ascii=False))
    else:
        for s, hits in zip(scans, caps, strict=True):
            if s.verdict != "clean":
                echo(f"{s.verdict:<10} {s.name}: {s.reason()}")
            for h in hits:
                echo(f"{'capability':<10} {s.name}: {h.evidence()}")
        echo(f"{len(scans)} tools: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
             + (f"; {len(unchecked)} server(s) not checked" if unchecked else ""))
    if unchecked and not allow_unreachable:  # --no-start: the listing above is the answer, and nothing was checked
        raise RiskrankError(f"{len(unchecked)} server(s) not started (--no-start), so their tools are not checked; "
                            "read the commands listed, then scan without --no-start, or add --allow-unreachable")
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
    echo(f"{'rotated' if rotate else 'added'} {name!r} in {clients_file}; its token (shown once):", err=True)
    if token is None:
        echo(made)


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
        echo(f"{c.name}\t{c.policy}\t{len(c.digests)} token(s)")
    if oauth is not None:
        echo(f"oauth\t{oauth.get('issuer')}\tdefault policy {oauth.get('default_policy', policies.default)}")
