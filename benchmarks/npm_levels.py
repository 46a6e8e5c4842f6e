"""Served levels against three annotators on twelve real MCP servers from npm that nobody rated before.

    python benchmarks/npm_levels.py --json benchmarks/results/npm_levels.json
    python benchmarks/npm_levels.py --list-tools /tmp/npm --definitions defs.json     # npm install + tools/list
    python benchmarks/npm_levels.py --from-votes A.json B.json C.json --definitions defs.json [--reviews R.json]

**The registry.** The tools twelve MCP servers published on npm declare (:data:`SERVERS`,
versions pinned: GitHub, GitLab, Slack, PostgreSQL, Google Maps, Brave Search, Puppeteer,
Notion, Firecrawl, Sentry, CircleCI, HubSpot), as each answers ``tools/list`` through the real
``mcp`` client over stdio, with placeholder credentials (no call is made). None of these
servers is among the 23 the level model trains on, and no one on the project had read their
tools before the annotators rated them; their definitions, annotations included, are kept in
the labels file, so the report needs neither npm nor a network.

**The labels.** ``corpora/rubric-levels/npm-servers.jsonl``: three annotators, each an
independent session that read every definition (name, description, parameters; not the
declared hints) under docs/audit.md's anchors and never saw another's votes or riskrank's
levels; the span rule resolves them. No script assigned a label.

**What it reports** (:func:`_rated_registry.judge`): the annotators' agreement per pair; the
levels riskrank serves these tools (the level model and the declared hints, as ``find_tools``
and the gateway serve them) against the labels, pooled and per server; the confusion matrix.
The labels never train or tune anything: they judge.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from riskrank.errors import DataError
from riskrank.fileio import write_json
from riskrank.registry import make_tool

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _rated_registry as rated  # noqa: E402

LABELS = HERE.parent / "corpora" / "rubric-levels" / "npm-servers.jsonl"
GROUP_KEY = "per_server"
#: package -> (version, its executable, arguments, the upstream name a gateway config gives it):
#: what ``--list-tools`` installs and starts.
SERVERS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "@modelcontextprotocol/server-github": ("2025.4.8", "mcp-server-github", (), "github"),
    "@modelcontextprotocol/server-gitlab": ("2025.4.25", "mcp-server-gitlab", (), "gitlab"),
    "@modelcontextprotocol/server-slack": ("2025.4.25", "mcp-server-slack", (), "slack"),
    "@modelcontextprotocol/server-postgres": ("0.6.2", "mcp-server-postgres", ("postgresql://localhost/placeholder",), "postgres"),
    "@modelcontextprotocol/server-google-maps": ("0.6.2", "mcp-server-google-maps", (), "google-maps"),
    "@modelcontextprotocol/server-brave-search": ("0.6.2", "mcp-server-brave-search", (), "brave-search"),
    "@modelcontextprotocol/server-puppeteer": ("2025.5.12", "mcp-server-puppeteer", (), "puppeteer"),
    "@notionhq/notion-mcp-server": ("2.5.2", "notion-mcp-server", (), "notion"),
    "firecrawl-mcp": ("3.26.0", "firecrawl-mcp", (), "firecrawl"),
    "@sentry/mcp-server": ("0.39.0", "sentry-mcp", ("--access-token=placeholder",), "sentry"),
    "@circleci/mcp-server-circleci": ("0.20.0", "mcp-server-circleci", (), "circleci"),
    "@hubspot/mcp-server": ("0.4.0", "mcp-hubspot", (), "hubspot"),
}
#: Placeholder credentials: the servers refuse to start without them; nothing is called.
PLACEHOLDER_ENV = {"GITHUB_PERSONAL_ACCESS_TOKEN": "placeholder", "GITLAB_PERSONAL_ACCESS_TOKEN": "placeholder",
                   "SLACK_BOT_TOKEN": "xoxb-placeholder", "SLACK_TEAM_ID": "T0", "GOOGLE_MAPS_API_KEY": "placeholder",
                   "BRAVE_API_KEY": "placeholder", "FIRECRAWL_API_KEY": "fc-placeholder", "CIRCLECI_TOKEN": "placeholder",
                   "PRIVATE_APP_ACCESS_TOKEN": "placeholder", "NOTION_TOKEN": "placeholder", "OPENAPI_MCP_HEADERS": "{}"}


def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    """The labelled tools, one record per line (:data:`LABELS`), each with its definition."""
    rows = rated.load_labels(path, ("id", "server", "name", "description", "inputSchema"))
    unknown = sorted({r["server"] for r in rows} - set(SERVERS))
    if unknown:
        raise DataError(f"{path}: server {unknown[0]!r} is not among the servers this benchmark lists (SERVERS)")
    rated.check_unique([r["id"] for r in rows], str(path))
    return rows


def list_tools(folder: Path, timeout: float = 90.0) -> list[dict[str, Any]]:
    """Install :data:`SERVERS` into ``folder`` (npm, pinned, no install scripts) and ask each for
    its tools over stdio with the real ``mcp`` client: one record per tool, ``id``
    "<package>::<name>"."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    folder.mkdir(parents=True, exist_ok=True)
    specs = [f"{p}@{v}" for p, (v, *_) in SERVERS.items()]
    subprocess.run(["npm", "install", "--prefix", str(folder), "--ignore-scripts", "--no-audit", "--no-fund", *specs], check=True,
                   stdout=subprocess.DEVNULL)

    # the servers are third-party code: they get a path, a home and the placeholders, not this shell's secrets
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")} | PLACEHOLDER_ENV

    async def one(package: str, errlog: Any) -> list[dict[str, Any]]:
        version, exe, args, _ = SERVERS[package]
        params = StdioServerParameters(command=str(folder / "node_modules" / ".bin" / exe), args=list(args), env=env)
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
        wire = [t.model_dump(exclude_none=True, by_alias=True) for t in tools]  # the names MCP's JSON uses
        return [{"id": f"{package}::{t['name']}", "server": package, "version": version, "name": t["name"],
                 **({"title": t["title"]} if t.get("title") else {}), "description": t.get("description", ""), "inputSchema": t.get("inputSchema", {}),
                 "annotations": t.get("annotations", {})} for t in wire]

    async def every() -> list[dict[str, Any]]:
        import tempfile

        out = []
        for package in SERVERS:
            with tempfile.TemporaryFile("w+") as errlog:
                try:
                    out += await asyncio.wait_for(one(package, errlog), timeout)
                except BaseException as exc:  # a server that does not start or list: named, with what it said
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    errlog.seek(0)
                    said = " | ".join(errlog.read().strip().splitlines()[-3:])
                    raise DataError(f"{package}@{SERVERS[package][0]}: no tools/list answer ({type(exc).__name__})"
                                    + (f"; it said: {said[:300]}" if said else "")) from None
        return out

    return asyncio.run(every())


def labels_from_votes(definitions: list[dict[str, Any]], vote_files: list[Path], reviews: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The labels file's records: each definition with three annotators' votes (``{id: {"level",
    "why"}}``, A, B, C in the order given) resolved by the span rule."""
    files = rated.read_votes(vote_files)
    rated.check_unique([d["id"] for d in definitions], "the definitions")
    return [{**d, **rated.resolved(d["id"], files, reviews)} for d in definitions]


def served_names(rows: list[dict[str, Any]]) -> list[str]:
    """Each tool's name as one gateway over the twelve servers offers it, their upstreams named
    as :data:`SERVERS` names them (:func:`riskrank.serving.gateway.upstreams.public_names`:
    its own where no other server lists it, else ``<upstream>__<name>``)."""
    from riskrank.serving.gateway.upstreams import public_names

    alias = {p: spec[3] for p, spec in SERVERS.items()}
    listed: dict[str, list[str]] = {}
    for r in rows:
        listed.setdefault(alias[r["server"]], []).append(r["name"])
    names = public_names(listed)
    return [names[alias[r["server"]], r["name"]] for r in rows]


def labelled_tools(rows: list[dict[str, Any]]) -> list[Any]:
    """The labelled definitions as the gateway serves them (:func:`served_names`; declared hints
    kept: the gateway applies them)."""
    return [make_tool(name, r["description"], parameters=r["inputSchema"], annotations=r.get("annotations") or None,
                      where=f"{LABELS.name}: {r['id']}") for name, r in zip(served_names(rows), rows, strict=True)]


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ids = [r["id"] for r in rows]
    rated.check_unique(ids, str(LABELS))
    return rated.judge(labelled_tools(rows), ids, [r["server"] for r in rows], rows,
                       registry="twelve MCP servers from npm (" + ", ".join(f"{p}@{v}" for p, (v, *_) in SERVERS.items()) + ")",
                       labels_path=str(LABELS.relative_to(HERE.parent)), group_key=GROUP_KEY)


def doc_table(result: dict[str, Any]) -> str:
    """docs/base-model.md's tables for this registry, from the artefact."""
    return rated.doc_table(result, GROUP_KEY)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the artefact here")
    ap.add_argument("--list-tools", type=Path, default=None, metavar="DIR", help="install the servers here and write --definitions")
    ap.add_argument("--definitions", type=Path, default=None, help="the servers' tools (written by --list-tools, read by --from-votes)")
    ap.add_argument("--from-votes", nargs=3, type=Path, default=None, help="three annotators' files: write the labels file")
    ap.add_argument("--reviews", type=Path, default=None, help="written reviews of the tools at span >= 2")
    args = ap.parse_args()
    if (args.list_tools or args.from_votes) and args.definitions is None:
        ap.error("--list-tools and --from-votes need --definitions (the tools the annotators read)")
    try:
        if args.list_tools:
            defs = list_tools(args.list_tools)
            write_json(args.definitions, defs)
            print(f"{args.definitions}: {len(defs)} tools; " + ", ".join(f"{k} {v}" for k, v in Counter(d["server"] for d in defs).items()))
            return
        if args.from_votes:
            reviews = rated.read_json(args.reviews) if args.reviews else {}
            print(rated.write_labels(LABELS, labels_from_votes(rated.read_json(args.definitions), args.from_votes, reviews)))
            return
        out = report(load_labels())
    except DataError as exc:
        raise SystemExit(f"npm_levels: {exc}") from None
    rated.print_report(out, doc_table(out), args.json)

if __name__ == "__main__":
    main()
