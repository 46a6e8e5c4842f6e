"""``riskrank levels``: the levels riskrank would serve for an operator's own tools, the most
doubtful first, and the operator's decisions written into the gateway's policy as pins.

The level model is right about most tools of a server it has never read and unsure about some
(docs/base-model.md). Nobody can read every tool of every server, so ``review`` orders them by
the model's own doubt about the one decision a level makes under the policy (asked about or
not: :meth:`riskrank.risk.ToolLevels.doubt`) and writes a review file; ``pin`` turns the levels
a person decided into the policy's ``levels`` pins (provenance ``policy``), which every
surface then serves."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from riskrank.cli.common import echo
from riskrank.errors import RiskrankError
from riskrank.fileio import show

#: Characters of a description a review line carries (enough to decide; the full text is the server's).
REVIEW_CHARS = 400
_GLOB = frozenset("*?[")


@click.group("levels")
def levels_group() -> None:
    """The levels served for your own tools: review the most doubtful, pin what you decide.

    \b
      riskrank levels review servers.json --policy policy.json --out levels.review.jsonl
      (set "risk_level" on the lines you have checked)
      riskrank levels pin levels.review.jsonl --policy policy.json
    """


def _served_names(tools: list[dict], from_servers: bool) -> list[str]:
    """The names a gateway offers (:func:`riskrank.serving.gateway.upstreams.public_names`) for
    an mcpServers file's ``server/tool`` listing; a static file's names as they are."""
    if not from_servers:
        return [t["name"] for t in tools]
    from riskrank.serving.gateway.upstreams import public_names

    split = [tuple(t["name"].split("/", 1)) for t in tools]
    listed: dict[str, list[str]] = {}
    for server, name in split:
        listed.setdefault(server, []).append(name)
    names = public_names(listed)
    return [names[server, name] for server, name in split]


def review_rows(tools: list[dict], names: list[str], policy: Any) -> list[dict[str, Any]]:
    """One review row per tool whose level is the level model's, most doubtful first: the
    name served, the level, whether a call would be asked about, the doubt, the model's
    distribution, the evidence, and ``risk_level: null`` for the operator to set. Levels are
    resolved as the gateway resolves them (the policy's pins first; the base model)."""
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.registry import ToolRegistry, make_tool

    made = []
    for name, t in zip(names, tools, strict=True):
        schema = t.get("inputSchema") if isinstance(t.get("inputSchema"), dict) else t.get("parameters")
        made.append(make_tool(name, t.get("description") or "", parameters=schema,
                              annotations=t.get("annotations") if isinstance(t.get("annotations"), dict) else None,
                              where=f"tool {show(name)}"))
    registry = ToolRegistry(made)
    pins = {t.name: lvl for t in registry if (lvl := policy.pinned_level(t.name)) is not None}
    levels = RiskAwareRetriever(registry, level_pins=pins, progress=False).tool_levels
    if levels.distribution is None:
        raise RiskrankError("no level model is installed with this riskrank, so there is no doubt to order the review by")
    doubt = levels.doubt(policy.confirm_level)
    rows = []
    for i in levels.review_order(policy.confirm_level):
        t = registry.tools[i]
        rows.append({"name": t.name, "served_level": int(levels.levels[i]), "provenance": levels.provenance[i],
                     "asked": bool(policy.needs_confirmation(int(levels.levels[i]))), "doubt": round(float(doubt[i]), 3),
                     "distribution": [round(float(p), 3) for p in levels.distribution[i]],
                     "capabilities": levels.capabilities_of(i), "evidence": list(levels.evidence[i]),
                     "description": (t.description or "")[:REVIEW_CHARS], "risk_level": None, "note": None})
    return rows


@levels_group.command("review")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The gateway's policy file: its pins are kept out of the review and its confirm_level decides "
                   "what 'asked' means [default: the default policy].")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the review file (JSON lines, most doubtful first; every tool the model levelled).")
@click.option("--force", is_flag=True, help="Replace an existing --out file (its decisions are lost).")
@click.option("--top", type=click.IntRange(0), default=20, show_default=True, help="Lines printed (0: none).")
@click.option("--startup-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="For an mcpServers file: seconds each server has to start and list its tools.")
@click.option("--allow-unreachable", is_flag=True,
              help="A server that could not be listed is a warning and the others are reviewed; without it, an error.")
def review_command(path: str, policy_file: str | None, out: str | None, force: bool, top: int, startup_timeout: float,
                   allow_unreachable: bool) -> None:
    """The levels riskrank would serve for PATH's tools, the most doubtful first.

    PATH is an mcpServers file, whose servers this command STARTS as the gateway does (each
    command printed on stderr before it runs; read a file you do not trust first, with
    ``riskrank scan --no-start``), or a registry file or tools/list dump (nothing runs). Each
    tool's doubt is the level model's probability that its rubric level lies on the other side
    of the policy's confirm_level from the level served: a call that would be asked about but
    probably should not be, or one that would run unasked but probably should be asked about.
    Checking the most doubtful first fixes the most wrong questions per tool read; a confident
    mistake has little doubt and is found by reading, not by this order. Pinned and audited
    tools are left out."""
    from riskrank.cli.trust import listed_definitions
    from riskrank.fileio import atomic_write_text
    from riskrank.serving.gateway.config import load_policy

    if out is not None and os.path.exists(out) and not force:
        raise RiskrankError(f"{out}: exists (a review file's decisions would be lost); pin it first, or pass --force")
    policy = load_policy(policy_file)
    tools, servers, unchecked = listed_definitions(path, startup_timeout, command="levels review")
    if unchecked and not allow_unreachable:
        raise RiskrankError(f"{'; '.join(unchecked)}; {'its' if len(unchecked) == 1 else 'their'} tools are not reviewed "
                            "(--allow-unreachable reviews the others)")
    for line in unchecked:
        echo(f"warning: {line}; not reviewed (--allow-unreachable)", err=True)
    if not tools:
        raise RiskrankError(f"{path}: no tools were listed: nothing to review")
    rows = review_rows(tools, _served_names(tools, bool(servers)), policy)
    if out is not None:
        atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    asked = sum(r["asked"] for r in rows)
    for n, r in enumerate(rows[:top], 1):
        caps = f"  [{', '.join(r['capabilities'])}]" if r["capabilities"] else ""
        echo(f"{n:>3}. {r['name']}  L{r['served_level']} {'asked' if r['asked'] else 'unasked'}  doubt {r['doubt']:.2f}  "
             f"P(L1..L5) {' '.join(f'{p:.2f}' for p in r['distribution'])}{caps}")
        echo(f"     {(r['description'] or '(no description)').splitlines()[0][:110]}")
    echo(f"{len(tools)} tools; {len(rows)} levelled by the model ({asked} asked about at confirm_level "
         f"{policy.confirm_level}), {len(tools) - len(rows)} pinned or audited"
         + (f"; review file {out}: set \"risk_level\" (1-5) on the lines you check, then riskrank levels pin {out} "
            "--policy POLICY" if out else ""))


def read_decisions(path: str) -> tuple[dict[str, int], int]:
    """(name -> the level decided, lines left undecided) of a review file; a line that is not
    an object with a ``name`` and a ``risk_level`` of null or 1-5, or a name given twice with
    two levels, is an error naming its line."""
    from riskrank.fileio import loads_strict, read_regular_file

    try:
        text = read_regular_file(path, max_bytes=64 * 1024 * 1024).decode("utf-8")
    except OSError as exc:
        raise RiskrankError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RiskrankError(f"{path}: not UTF-8 text") from None
    decided: dict[str, int] = {}
    undecided = 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rec = loads_strict(line, f"{path}:{n}", RiskrankError)
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str) or not rec["name"] or "risk_level" not in rec:
            raise RiskrankError(f"{path}:{n}: a review line is an object with a \"name\" and a \"risk_level\", not {show(rec)}")
        level = rec["risk_level"]
        if level is None:
            undecided += 1
            continue
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 5:
            raise RiskrankError(f"{path}:{n}: {rec['name']}: risk_level must be 1-5 or null, not {show(level)}")
        if _GLOB & set(rec["name"]):
            raise RiskrankError(f"{path}:{n}: {rec['name']!r} holds a glob character (* ? [): pin it in the policy by hand")
        if decided.get(rec["name"], level) != level:
            raise RiskrankError(f"{path}:{n}: {rec['name']} is decided twice, at L{decided[rec['name']]} and L{level}")
        decided[rec["name"]] = level
    return decided, undecided


def pinned_policy(data: dict[str, Any], decided: dict[str, int], policy_name: str | None, where: str) -> tuple[dict[str, Any], int]:
    """The policy document with ``decided`` pinned (exact names, ahead of the policy's own
    globs: the first matching pin wins), and how many existing pins they replace."""
    doc = json.loads(json.dumps(data))
    if "policies" in doc:
        name = policy_name or doc.get("default")
        body = doc["policies"].get(name) if isinstance(doc["policies"], dict) else None
        if not isinstance(body, dict):
            raise RiskrankError(f"{where}: no policy {name!r} among its policies")
    else:
        if policy_name not in (None, "default"):
            raise RiskrankError(f"{where}: holds one policy (no \"policies\"), so --policy-name {policy_name!r} names nothing")
        body = doc
    old = body.get("levels", {})
    if not isinstance(old, dict):
        raise RiskrankError(f"{where}: levels: must be an object of tool-name glob -> risk level")
    replaced = sum(name in old for name in decided)
    body["levels"] = {**decided, **{g: v for g, v in old.items() if g not in decided}}
    return doc, replaced


@levels_group.command("pin")
@click.argument("review_file", type=click.Path(dir_okay=False, exists=True))
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), required=True,
              help="The gateway's policy file to pin the decided levels in (created when missing).")
@click.option("--policy-name", default=None, help="In a file of named policies, the one to pin in [default: its default].")
def pin_command(review_file: str, policy_file: str, policy_name: str | None) -> None:
    """Pin the levels decided in REVIEW_FILE (``riskrank levels review --out``) in the policy.

    Each line whose ``risk_level`` is set (1-5) becomes a pin of that exact tool name in the
    policy's ``levels``, ahead of the policy's own globs (the first match wins); the gateway
    serves it with provenance ``policy`` from its next start or reload. Lines left null are
    skipped. The policy file is checked as the gateway reads it before it replaces the old
    one (written atomically); nothing is written when it would not load."""
    from riskrank.fileio import atomic_write_text, loads_strict, read_regular_file
    from riskrank.serving.gateway.config import load_policies, policies_from

    decided, undecided = read_decisions(review_file)
    if not decided:
        raise RiskrankError(f"{review_file}: no line has a risk_level set (1-5): nothing to pin")
    data: dict[str, Any] = {}
    mode = None
    if os.path.exists(policy_file):
        load_policies(policy_file)  # a file the gateway would refuse is said as it is, before anything changes
        data = loads_strict(read_regular_file(policy_file).decode("utf-8-sig"), policy_file, RiskrankError)
        mode = os.stat(policy_file).st_mode & 0o777
    doc, replaced = pinned_policy(data, decided, policy_name, policy_file)
    policies_from(doc, policy_file)  # the new document as the gateway will read it; nothing is written if it would not load
    atomic_write_text(policy_file, json.dumps(doc, indent=2, ensure_ascii=False) + "\n", mode=mode)
    echo(f"pinned {len(decided)} tool level(s) in {policy_file}" + (f" ({replaced} replaced an earlier pin)" if replaced else "")
         + (f"; {undecided} line(s) of {review_file} left undecided" if undecided else ""))
