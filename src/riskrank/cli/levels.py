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
import stat
from typing import Any

import click

from riskrank.cli.common import (
    echo,
    level_model_option,
    not_an_input,
    read_user_file,
    trust_annotations_option,
)
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


def served_registry(path: str, tools: list[dict], from_servers: bool
                    ) -> tuple[Any, dict[str, str | None], dict[str, str], dict[str, str]]:
    """(the registry as the gateway would serve PATH's tools, name -> its server or None, tools
    left out with why, the name listed -> the name served). An mcpServers file's ``server/tool`` listing is served as the gateway
    serves it (:func:`riskrank.serving.gateway.upstreams.public_names`, a missing description
    filled, each record checked on its own); a static file is read as a registry (its audited
    levels are audited)."""
    from riskrank.registry import ToolRegistry

    if not from_servers:
        registry = ToolRegistry.load(path)
        return registry, {t.name: None for t in registry}, {}, {t.name: t.name for t in registry}
    from riskrank.serving.gateway.upstreams import public_names
    from riskrank.serving.gateway.view import record_registry, served_record

    split = [tuple(t["name"].split("/", 1)) for t in tools]
    listed: dict[str, list[str]] = {}
    for server, name in split:
        listed.setdefault(server, []).append(name)
    names = public_names(listed)
    records = [served_record({**t, "name": name}, names[server, name]) for (server, name), t in zip(split, tools, strict=True)]
    registry, skipped = record_registry(records, path)
    if registry is None:
        raise RiskrankError(f"{path}: no tool could be served ({'; '.join(f'{n}: {why}' for n, why in skipped.items())})")
    return registry, {names[k]: k[0] for k in split}, skipped, {f"{k[0]}/{k[1]}": names[k] for k in split}


def review_rows(registry: Any, servers: dict[str, str | None], policy: Any, *, verdicts: dict[str, str] | None = None,
                trust_annotations: bool = False, level_model: str = "auto",
                own: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(one review row per tool whose level is the level model's and decides a question, most
    doubtful first: the name served, the level, whether a call would be asked about (or, for a
    tool above ``max_level``, whether it would be offered at all), the doubt, the model's
    distribution, the evidence, and ``risk_level: null`` for the operator to set; what was
    left out, counted: pinned or audited, denied by the policy's globs, withheld or always
    asked by the definition scan (``verdicts``, name -> verdict), on a server whose every call
    is asked). Levels are resolved as a gateway started with ``trust_annotations`` and
    ``level_model`` resolves them (:func:`riskrank.catalogue.audit_tools`: the policy's pins
    first; the base model)."""
    from riskrank.catalogue import ArtefactSpec, audit_tools
    from riskrank.serving.gateway.policy import ABOVE_MAX_LEVEL

    own = own or {}  # the name served -> the tool's own name at its server (the policy's globs read both)
    pins = {t.name: lvl for t in registry if (lvl := policy.pinned_level(t.name)) is not None}
    spec = ArtefactSpec(registry.source, trust_annotations=trust_annotations, level_model=level_model)
    levels = audit_tools(spec, None, registry, pins, [servers.get(t.name) or "" for t in registry]).levels
    if levels.distribution is None:
        raise RiskrankError("no level model serves these levels (none installed, or --level-model none), so there is no "
                            "doubt to order the review by")
    # the question a level decides: asked or not (confirm_level); above max_level, offered or not
    doubt = levels.doubt(policy.confirm_level)
    offered_doubt = levels.doubt(policy.max_level + 1) if policy.max_level < 5 else doubt
    left = {"pinned or audited": 0, "denied by the policy": 0, "withheld by the scan": 0,
            "every call asked (scan finding)": 0, "on a server whose every call is asked": 0}
    verdicts = verdicts or {}
    rows = []
    for i in levels.review_order(policy.confirm_level):
        t, level = registry.tools[i], int(levels.levels[i])
        refused = policy.refusal(t.name, level, own.get(t.name))
        verdict = verdicts.get(t.name, "clean")
        action = {"poisoned": policy.on_poisoned, "suspicious": policy.on_suspicious}.get(verdict, "allow")
        if refused is not None and refused != ABOVE_MAX_LEVEL:
            left["denied by the policy"] += 1
        elif action == "withhold":
            left["withheld by the scan"] += 1
        elif action == "confirm":
            left["every call asked (scan finding)"] += 1
        elif policy.untrusted_server(servers.get(t.name)):
            left["on a server whose every call is asked"] += 1
        else:
            above = refused == ABOVE_MAX_LEVEL
            rows.append({"name": t.name, "server": servers.get(t.name), "served_level": level, "provenance": levels.provenance[i],
                         "asked": bool(policy.needs_confirmation(level, servers.get(t.name))), "offered": not above,
                         "doubt": round(float((offered_doubt if above else doubt)[i]), 3),
                         "distribution": [round(float(p), 3) for p in levels.distribution[i]],
                         "capabilities": levels.capabilities_of(i), "evidence": list(levels.evidence[i]),
                         "description": (t.description or "")[:REVIEW_CHARS], "risk_level": None, "note": None})
    left["pinned or audited"] = sum(p in ("policy", "audited") for p in levels.provenance)
    rows.sort(key=lambda r: -r["doubt"])
    return rows, left


@levels_group.command("review")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The gateway's policy file: its pins are kept out of the review and its confirm_level decides "
                   "what 'asked' means [default: the default policy].")
@click.option("--policy-name", default=None, help="In a file of named policies, the one to review under [default: its default].")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the review file (JSON lines, most doubtful first; every tool reviewed, not only the --top "
                   "printed).")
@click.option("--force", is_flag=True, help="Replace an existing --out file (through a symlink, its target; its decisions "
                                            "are lost).")
@trust_annotations_option
@level_model_option
@click.option("--top", type=click.IntRange(0), default=20, show_default=True, help="Lines printed (0: none).")
@click.option("--startup-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="For an mcpServers file: seconds each server has to start and list its tools.")
@click.option("--allow-unreachable", is_flag=True,
              help="A server that could not be listed is a warning and the others are reviewed; without it, an error.")
def review_command(path: str, policy_file: str | None, policy_name: str | None, out: str | None, force: bool,
                   trust_annotations: bool, level_model: str, top: int, startup_timeout: float, allow_unreachable: bool) -> None:
    """The levels riskrank would serve for PATH's tools, the most doubtful first.

    PATH is an mcpServers file, whose servers this command STARTS as the gateway does (each
    command printed on stderr before it runs; read a file you do not trust first, with
    ``riskrank scan --no-start``), or a registry file or tools/list dump (nothing runs). Each
    tool's doubt is the level model's probability that its rubric level lies on the other side
    of the policy's confirm_level from the level served: a call that would be asked about but
    probably should not be, or one that would run unasked but probably should be asked about.
    Checking the most doubtful first fixes the most wrong questions per tool read; a confident
    mistake has little doubt and is found by reading, not by this order. A tool served above
    the policy's max_level is never offered: its doubt is that its rubric level is max_level or
    below. Left out: pinned and audited tools, tools the policy denies by name, tools the
    definition scan has the gateway withhold or always confirm (on_poisoned, on_suspicious; the
    learned detector too where the policy sets learned_scan), and the tools of a server whose
    every call is asked (``untrusted``): their level decides no question. Give the options
    the gateway runs with (--trust-annotations, --level-model): they change the levels."""
    from pathlib import Path

    from riskrank.cli.trust import listed_definitions, scan_listed
    from riskrank.fileio import atomic_write_text
    from riskrank.serving.gateway.config import load_policies

    not_an_input({"--out": out}, (path, policy_file))  # --force replaces a review file, never an input
    if out is not None and os.path.lexists(out) and not force:
        raise RiskrankError(f"{out}: exists (a review file's decisions would be lost); write to another file, or pass "
                            "--force once its decisions are pinned (riskrank levels pin)")
    if out is not None and not Path(out).parent.is_dir():
        raise RiskrankError(f"{out}: no such directory {str(Path(out).parent)!r}; nothing was written")
    policy = load_policies(_regular(policy_file)).get(policy_name) if policy_file else load_policies(None).get(policy_name)
    tools, servers, unchecked = listed_definitions(path, startup_timeout, command="levels review")
    if unchecked and not allow_unreachable:
        raise RiskrankError(f"{'; '.join(unchecked)}; {'its' if len(unchecked) == 1 else 'their'} tools are not reviewed "
                            "(--allow-unreachable reviews the others)")
    if unchecked and out is not None:
        raise RiskrankError(f"{'; '.join(unchecked)}: a review file written without its tools could name the others as the "
                            "gateway will not (a name two servers list is offered as server__name); review without --out, or "
                            "when every server lists")
    for line in unchecked:
        echo(f"warning: {line}; not reviewed (--allow-unreachable)", err=True)
    if not tools:
        raise RiskrankError(f"{path}: no tools were listed: nothing to review")
    registry, by_server, skipped, public = served_registry(path, tools, bool(servers))
    for name, why in skipped.items():
        echo(f"warning: {name}: not served, not reviewed ({why})", err=True)
    verdicts = {public[sc.name]: sc.verdict for sc in scan_listed(tools, bool(servers), policy.learned_scan) if sc.name in public}
    own = {v: k.split("/", 1)[1] for k, v in public.items()} if servers else None  # a static file's names are their own
    rows, left = review_rows(registry, by_server, policy, own=own,
                             verdicts=verdicts, trust_annotations=trust_annotations,
                             level_model=level_model)
    if out is not None:
        atomic_write_text(Path(out).resolve() if os.path.islink(out) else out,
                          "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    if policy.confirm_level <= 1:
        echo("note: confirm_level is 1, so every call is asked about and no level decides a question: every doubt is 0",
             err=True)
    asked = sum(r["asked"] and r["offered"] for r in rows)
    never = sum(not r["offered"] for r in rows)
    for n, r in enumerate(rows[:top], 1):
        caps = f"  [{', '.join(r['capabilities'])}]" if r["capabilities"] else ""
        said = "never offered (above max_level)" if not r["offered"] else "asked" if r["asked"] else "unasked"
        echo(f"{n:>3}. {r['name']}  L{r['served_level']} {said}  doubt {r['doubt']:.2f}  "
             f"P(L1..L5) {' '.join(f'{p:.2f}' for p in r['distribution'])}{caps}")
        lines = (r["description"] or "").strip().splitlines()
        echo(f"     {lines[0][:110] if lines else '(no description)'}")
    echo(f"{len(registry)} tools; {len(rows)} to review ({asked} asked about at confirm_level {policy.confirm_level}"
         + (f", {never} never offered above max_level {policy.max_level}" if never else "") + "); left out: "
         + ", ".join(f"{n} {what}" for what, n in left.items())
         + (f"; review file {out}: set \"risk_level\" (1-5) on the lines you check, then riskrank levels pin {out} "
            "--policy POLICY" if out else ""))


def _regular(path: str) -> str:
    """``path`` when it is a regular file (a FIFO or a device as a policy would block or never end)."""
    if not os.path.isfile(path):
        raise RiskrankError(f"{path}: not a regular file")
    return path


def _pinnable(name: str) -> bool:
    """Whether the policy's ``levels`` take ``name`` as a tool-name glob (the policy's own check)."""
    from riskrank.serving.gateway.config import check_glob

    try:
        check_glob(name, "levels")
    except RiskrankError:
        return False
    return True


def read_decisions(path: str) -> tuple[dict[str, int], int]:
    """(name -> the level decided, lines left undecided) of a review file; a line that is not
    an object with a ``name`` and a ``risk_level`` of null or 1-5, or a name given twice with
    two levels, is an error naming its line."""
    from riskrank.fileio import loads_strict

    text = read_user_file(path, max_bytes=64 * 1024 * 1024, encoding="utf-8-sig")[1]
    decided: dict[str, int] = {}
    undecided = 0
    for n, line in enumerate(text.split("\n"), 1):  # JSON lines end in \n alone; U+2028 inside a value is text
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
        if _GLOB & set(rec["name"]) or not _pinnable(rec["name"]):
            raise RiskrankError(f"{path}:{n}: {show(rec['name'])} cannot be pinned by its exact name (a glob character * ? [, "
                                "a space or a character that is not printable): pin it in the policy by hand with a glob")
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


def lowered_floors(data: dict[str, Any], decided: dict[str, int], policy_name: str | None) -> list[str]:
    """The decisions that would pin a tool below the level the policy pins it at now (the
    first of its pins that matches: a glob such as ``*delete*: 5``, or an exact pin set by
    hand or by an earlier review): a floor someone set, which a new exact pin would override."""
    import fnmatch

    if "policies" in data:
        body = (data.get("policies") or {}).get(policy_name or data.get("default")) or {}
    else:
        body = data
    pins = dict(body.get("levels") or {})
    out = []
    for name, level in decided.items():
        floor = next(((g, v) for g, v in pins.items() if fnmatch.fnmatchcase(name, g)), None)
        if floor is not None and isinstance(floor[1], int) and level < floor[1]:
            out.append(f"{name} at L{level}, where the policy's {floor[0]!r} pins L{floor[1]}")
    return out


@levels_group.command("pin")
@click.argument("review_file", type=click.Path(dir_okay=False, exists=True))
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False), required=True,
              help="The gateway's policy file to pin the decided levels in (created when missing).")
@click.option("--policy-name", default=None, help="In a file of named policies, the one to pin in [default: its default].")
@click.option("--override", is_flag=True,
              help="Pin a decided level even below what one of the policy's own globs pins that tool at.")
def pin_command(review_file: str, policy_file: str, policy_name: str | None, override: bool) -> None:
    """Pin the levels decided in REVIEW_FILE (``riskrank levels review --out``) in the policy.

    Each line whose ``risk_level`` is set (1-5) becomes a pin of that exact tool name in the
    policy's ``levels``, ahead of the policy's own globs (the first match wins); a gateway
    started with the policy serves it with provenance ``policy`` (one already running reads
    its policy file when it starts: restart it). Lines left null are
    skipped. A decision below the level one of the policy's own globs pins (``"*delete*": 5``:
    a floor you set) is refused unless --override. The policy file (through a symlink, its
    target) is checked as the gateway reads it before it replaces the old one, atomically,
    with its mode and owner kept, and only if nobody changed it meanwhile; nothing is written
    when it would not load. A policy file that does not exist is created (and said)."""
    from pathlib import Path

    from riskrank.fileio import (
        atomic_write_text,
        loads_strict,
        replace_if_unchanged,
    )
    from riskrank.serving.gateway.config import policies_from

    decided, undecided = read_decisions(review_file)
    if not decided:
        raise RiskrankError(f"{review_file}: no line has a risk_level set (1-5): nothing to pin")
    target = Path(policy_file)
    exists = os.path.lexists(target)
    data: dict[str, Any] = {}
    raw = b""
    if exists:
        try:
            real = target.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # a dangling symlink, a symlink loop
            raise RiskrankError(f"{policy_file}: a symlink that leads to no file ({exc.__class__.__name__}: "
                                f"{getattr(exc, 'strerror', None) or exc}); nothing was written") from None
        if not real.is_file():
            raise RiskrankError(f"{policy_file}: not a regular file (a policy file is a JSON object in a file)")
        mode = stat.S_IMODE(real.stat().st_mode)
        if not mode & 0o222 or not os.access(real, os.W_OK):  # a file made read-only stays so, even for root
            raise RiskrankError(f"{policy_file}: read-only (mode {mode:04o}) or not writable by this user; nothing was changed")
        raw, current = read_user_file(policy_file, max_bytes=16 * 1024 * 1024, encoding="utf-8-sig", timeout_s=10)
        data = loads_strict(current, policy_file, RiskrankError)
        if not isinstance(data, dict):
            raise RiskrankError(f"{policy_file}: the policy file must hold a JSON object")
        policies_from(data, policy_file)  # a file the gateway would refuse is said as it is, before anything changes
    elif not target.parent.is_dir():
        raise RiskrankError(f"{policy_file}: no such directory {str(target.parent)!r}; nothing was written")
    elif policy_name not in (None, "default"):
        raise RiskrankError(f"{policy_file}: does not exist, and the file this command creates holds one policy; drop "
                            f"--policy-name {policy_name!r}, or create the named policies first")
    lowered = lowered_floors(data, decided, policy_name)
    if lowered and not override:
        raise RiskrankError(f"{policy_file}: would lower a level the policy pins now: {'; '.join(lowered[:3])}"
                            + (f" (and {len(lowered) - 3} more)" if len(lowered) > 3 else "")
                            + "; nothing was written (--override pins them anyway)")
    doc, replaced = pinned_policy(data, decided, policy_name, policy_file)
    checked = policies_from(doc, policy_file)  # the new document as the gateway will read it; nothing is written if it would not load
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if exists:
        new = (b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b"") + text.encode("utf-8")  # a byte-order mark stays
        replace_if_unchanged(target, raw, new, mode,
                             RiskrankError(f"{policy_file}: changed while riskrank was writing; nothing of it was changed, run "
                                           "the command again"))
    else:
        try:
            atomic_write_text(target, text, exclusive=True)
        except FileExistsError:
            raise RiskrankError(f"{policy_file}: created by someone else while riskrank was writing; nothing of it was "
                                "changed, run the command again") from None
        echo(f"created {policy_file}")
    max_level = checked.get(policy_name).max_level
    for name, level in sorted(decided.items()):
        if level > max_level:
            echo(f"note: {name} is pinned at L{level}, above the policy's max_level {max_level}: the gateway never offers it",
                 err=True)
    echo(f"pinned {len(decided)} tool level(s) in {policy_file}" + (f" ({replaced} replaced an earlier pin)" if replaced else "")
         + (f"; {undecided} line(s) of {review_file} left undecided" if undecided else ""))
