"""A policy dry run on recorded traffic: re-decide every ``find_tools`` and call of an audit log
under a new policy and say what would change.

Each call line (``allowed``, ``refused``) is re-decided with the gateway's own
decision code: the policy guard's :func:`~.policy.decide` (deny and allow globs, ``max_level``,
the exposure and its TTL, ``confirm_level``, untrusted servers) at the tool's level (the new
policy's pinned level where it pins one, else the level on the line); the line's ``guards``
(the chain's record) say what every other guard did:

- a refusal by a guard before the policy (bounds, trust, withdrawn, upstream, unknown) stands:
  no policy changes it;
- the exposure is what the line's policy guard found (a tool the old policy refused as never
  offered was in no result: under the new policy it is ``not_exposed`` until a search returns
  it); its age is the time since the session's latest ``find_tools`` in the same log, judged
  against the new ``exposure_ttl_s``;
- after the policy, a refusal (schema, session) stands; a drift hold stands unless the new
  policy turns ``scope`` off; a flow hold or refusal follows the new ``flow`` (``off``: none,
  ``refuse``: ``untrusted_value``, ``confirm``: a hold); the confirm guard holds when
  :func:`~.policy.decide` says the level or the server needs a confirmation (a call the old
  policy let through unasked because its kind was already confirmed in the session, which the
  line's ``reason`` shows, stays unasked under ``once_per_session``; under ``every_call`` it
  is asked).

What a log cannot show is said, not guessed: a session guard that was off when the line was
written is taken as passing; a new ``cover_level`` is not re-decided (a call an approval covered
stays unasked, whatever level the new policy lets approvals cover); a new ``drift_level`` is not re-decided (whether the tool was
inside the session's scope is not on the line: the line's scope verdict stands); a call that newly needs a confirmation is counted every time,
though ``once_per_session`` asks only the first call of its kind (so "newly confirmed" is an
upper bound); a scan verdict that confirmed a tool is read as a level hold. ``find_tools``
lines are re-decided tool by tool (:meth:`~.policy.Policy.refusal`: a returned tool the new
policy never offers). A search under the new policy may return another list (a tool it no
longer offers leaves room for the next; a tool it newly offers may push one out: the
upstreams' ``upstream_up`` lines say which tools the old policy did not offer), and the log
does not hold the ranking beyond what was returned: a call whose outcome turns on such an
exposure is ``uncertain`` (``search_would_differ``), never guessed. Lines of an older gateway (a call without ``guards``, a ``find_tools``
without ``returned``) are skipped and counted.
"""

from __future__ import annotations

import calendar
import collections
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.serving.gateway.config import Policies
from riskrank.serving.gateway.policy import NOT_EXPOSED, Policy, decide

#: Guards whose refusal no policy changes (they run before the policy guard).
BEFORE_POLICY = ("bounds", "trust", "withdrawn", "upstream", "unknown")
#: The refusals of a confirmation that did not come (the call was held, then not approved, or
#: withdrawn because its caller or the replica holding it went away before an answer).
HELD_REFUSALS = ("confirmation_required", "denied", "caller_gone", "replica_gone")
ALLOWED, CONFIRMED = "allowed", "confirmed"
#: A call whose exposure the new policy may change: its search would return another list.
UNCERTAIN = "uncertain"
#: The kinds of change, in the order the report lists them.
CHANGES = ("newly_refused", "newly_confirmed", "no_longer_confirmed", "newly_allowed", "refused_otherwise",
           "no_longer_offered", "newly_offered", "search_would_differ")
EXAMPLES = 3


@dataclass
class Row:
    """One (change, client, tool): how many calls, and the first few as examples."""

    change: str
    client: str
    tool: str
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Replay:
    """What the replay saw: ``calls`` and ``finds`` re-decided, ``rows`` of changes,
    ``skipped`` (reason -> lines), ``before``/``after`` (outcome -> calls)."""

    calls: int = 0
    finds: int = 0
    records: int = 0
    """Lines that were JSON objects (a record of some kind)."""
    rows: dict[tuple[str, str, str], Row] = field(default_factory=dict)
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    before: collections.Counter[str] = field(default_factory=collections.Counter)
    after: collections.Counter[str] = field(default_factory=collections.Counter)
    predictions: list[tuple[int, str, str]] = field(default_factory=list)
    """(line number, recorded outcome, predicted outcome) of each call re-decided."""

    def add(self, change: str, client: str, tool: str, example: dict[str, Any]) -> None:
        row = self.rows.setdefault((change, client, tool), Row(change, client, tool))
        row.count += 1
        if len(row.examples) < EXAMPLES:
            row.examples.append(example)

    def table(self) -> list[Row]:
        order = {c: i for i, c in enumerate(CHANGES)}
        return sorted(self.rows.values(), key=lambda r: (order[r.change], -r.count, r.client, r.tool))

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "find_tools": self.finds, "before": dict(self.before), "after": dict(self.after),
                "skipped": dict(self.skipped),
                "changes": [{"change": r.change, "client": r.client, "tool": r.tool, "count": r.count,
                             "examples": r.examples} for r in self.table()]}


def recorded_outcome(rec: dict[str, Any]) -> str | None:
    """What a call line says happened: ``allowed``, ``confirmed`` (held: approved, declined or
    timed out) or ``refused:<code>``; None for a line that is no decision about a call (a
    ``failed`` line follows its ``allowed`` one; a ``pending`` one precedes the line of the
    operator's decision, or the call the client repeats with its user's answer)."""
    decision = rec.get("decision")
    if decision == "allowed":
        return CONFIRMED if rec.get("confirmed") else ALLOWED
    if decision == "refused":
        guards = [g for g in rec.get("guards") or [] if isinstance(g, list) and len(g) > 1]
        held = any(g[1] == "hold" for g in guards)
        # held and refused by no guard: refused after the hold (not approved, withdrawn, or changed
        # while it waited), so a confirmed call under the policy, whatever the answer
        if held and (rec.get("code") in HELD_REFUSALS or not any(g[1] == "refuse" for g in guards)):
            return CONFIRMED
        return f"refused:{rec.get('code')}"
    return None


def _seconds(stamp: Any) -> float | None:
    """An audit line's ``time`` (``YYYY-MM-DDTHH:MM:SS.mmmZ``) as epoch seconds."""
    if not isinstance(stamp, str) or len(stamp) < 19:
        return None
    try:
        whole = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    frac = stamp[19:].rstrip("Z")
    return whole + (float(frac) if frac.startswith(".") and frac[1:].isdigit() else 0.0)


def redecide(policy: Policy, rec: dict[str, Any], age_s: float | None, unsure: str | None = None) -> str:
    """The outcome of the call on line ``rec`` under ``policy`` (module docstring): ``allowed``,
    ``confirmed``, ``refused:<code>``, or ``uncertain`` when it turns on an exposure the new
    policy may change. ``age_s``: seconds since the session's latest find_tools; ``unsure``:
    ``dropped`` (that search returned a tool the new policy never offers: others would take its
    place, so a call of a tool it did not return may now find it), ``widened`` (the new policy
    offers tools the old one did not: any search may return another list), or None."""
    guards = [g for g in rec["guards"] if isinstance(g, list) and g]
    verdicts = {g[0]: g for g in guards}
    for g in guards:
        if g[0] == "policy":
            break
        if g[0] in BEFORE_POLICY and len(g) > 2 and g[1] == "refuse":
            return f"refused:{g[2]}"
    tool = str(rec.get("tool"))
    own = rec.get("original") if isinstance(rec.get("original"), str) else None  # offered as SERVER__NAME
    recorded_level = rec.get("level")
    level = policy.pinned_level(tool) or (recorded_level if isinstance(recorded_level, int) else 5)
    level = max(level, policy.floor_for(tool, own) or 0)  # as the gateway reads a pin of the own name: a floor
    old = verdicts.get("policy")
    exposed = old is not None and old[1] == "pass"
    expired = exposed and policy.exposure_ttl_s is not None and age_s is not None and age_s > policy.exposure_ttl_s
    d = decide(policy, tool, level, exposed=exposed, expired=expired, upstream=rec.get("upstream"), own=own)
    if policy.refusal(tool, level, own) is None and (
            unsure == "widened" or (unsure == "dropped" and not exposed)):
        return UNCERTAIN
    if not d.allowed:
        return f"refused:{d.code}"
    if old is not None and old[1] == "refuse" and old[2] != NOT_EXPOSED:  # never offered before: in no result
        return f"refused:{NOT_EXPOSED}"
    held = False
    for g in guards[guards.index(old) + 1:] if old is not None else []:
        name, verdict = g[0], g[1] if len(g) > 1 else "pass"
        if name == "scope":
            held |= verdict == "hold" and policy.scope != "off"
        elif name == "flow":
            if verdict in ("hold", "refuse") and policy.flow != "off":
                if policy.flow == "refuse":
                    return "refused:untrusted_value"
                held = True
        elif name == "confirm":
            if d.confirm:
                already = verdict == "pass" and _asked_before(rec) and policy.confirm == "once_per_session"
                held |= not already
        elif verdict == "refuse" and len(g) > 2:
            return f"refused:{g[2]}"
    return CONFIRMED if held else ALLOWED


def _asked_before(rec: dict[str, Any]) -> bool:
    """Whether the old policy's decision on an ``allowed`` line asked for a confirmation (its
    ``reason`` is :func:`~.policy.decide`'s): a confirm guard that passed such a call found the
    call's kind already confirmed in its session."""
    reason = str(rec.get("reason") or "")
    return ">= confirm_level" in reason or "untrusted by the policy" in reason


def _change(before: str, after: str) -> str | None:
    if before == after:
        return None
    if after == UNCERTAIN:
        return "search_would_differ"
    if after.startswith("refused:"):
        return "refused_otherwise" if before.startswith("refused:") else "newly_refused"
    if before.startswith("refused:"):
        return "newly_allowed"
    return "newly_confirmed" if after == CONFIRMED else "no_longer_confirmed"


def read_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number, record) of each line of a JSONL audit log; None for a line that is not a
    JSON object (counted, never fatal)."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                yield n, None
                continue
            yield n, rec if isinstance(rec, dict) else None


def replay(records: Iterable[tuple[int, dict[str, Any] | None]], policies: Policies) -> Replay:
    """Re-decide every ``find_tools`` and call of ``records`` under ``policies`` (a client's
    named policy by the ``policy`` on its lines; the default one for the rest)."""
    out = Replay()
    latest_find: dict[str, float] = {}
    dropped: dict[str, bool] = {}  # session -> its latest search returned a tool the new policy never offers
    widened = False  # the new policy offers a tool the old one did not (an upstream's line says which)
    for n, rec in records:
        if rec is None:
            out.skipped["not a JSON object"] += 1
            continue
        out.records += 1
        tool = rec.get("tool")
        if rec.get("decision") == "upstream_up" and isinstance(rec.get("not_offered"), dict):
            levels = rec.get("levels") if isinstance(rec.get("levels"), dict) else {}
            default = policies.default_policy
            widened |= any(default.refusal(t, default.pinned_level(t) or (lv if isinstance(lv, int) else 5)) is None
                           for t, lv in levels.items() if t in rec["not_offered"])
            continue
        if not isinstance(tool, str) or tool in ("resources/read", "prompts/get"):
            continue
        name = rec.get("policy") or policies.default
        policy = policies.named.get(name)
        client = str(rec.get("client") or "")
        when = _seconds(rec.get("time"))
        if policy is None:
            out.skipped[f"policy {name!r} is not in the new file"] += 1
            continue
        if tool == "find_tools":
            if rec.get("decision") != "found":
                continue
            if when is not None and isinstance(rec.get("session"), str):
                latest_find[rec["session"]] = when
            returned = rec.get("returned")
            if not isinstance(returned, list):
                out.skipped["find_tools line without returned (an older gateway)"] += 1
                continue
            out.finds += 1
            if isinstance(rec.get("session"), str):
                dropped[rec["session"]] = False
            for item in returned:
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                    continue
                level = policy.pinned_level(item[0]) or (item[1] if isinstance(item[1], int) else 5)
                code = policy.refusal(item[0], level)
                if code is not None:
                    if isinstance(rec.get("session"), str):
                        dropped[rec["session"]] = True
                    out.add("no_longer_offered", client, item[0], {"line": n, "time": rec.get("time"),
                                                                   "task": rec.get("task"), "after": code})
            continue
        before = recorded_outcome(rec)
        if before is None:
            continue
        if not isinstance(rec.get("guards"), list):
            out.skipped["call line without guards (an older gateway)"] += 1
            continue
        session = rec.get("session")
        found = latest_find.get(session) if isinstance(session, str) else None
        age = when - found if when is not None and found is not None else None
        unsure = "widened" if widened else "dropped" if isinstance(session, str) and dropped.get(session) else None
        after = redecide(policy, rec, age, unsure)
        out.calls += 1
        out.before[before] += 1
        out.after[after] += 1
        out.predictions.append((n, before, after))
        change = _change(before, after)
        if change is not None:
            out.add(change, client, tool, {"line": n, "time": rec.get("time"), "session": session,
                                           "before": before, "after": after})
    return out


def render(result: Replay, limit: int = 40) -> str:
    """The replay as a table: one row per (change, client, tool) with its count and an example."""
    lines = [f"{result.calls} calls and {result.finds} find_tools re-decided"
             + ("; skipped: " + ", ".join(f"{k}: {v}" for k, v in sorted(result.skipped.items())) if result.skipped else "")]
    lines.append("before: " + ", ".join(f"{k} {v}" for k, v in sorted(result.before.items())))
    lines.append("after:  " + ", ".join(f"{k} {v}" for k, v in sorted(result.after.items())))
    lines.append("(confirmed: held for a confirmation, whatever the answer: approved, declined or timed out)")
    rows = result.table()
    if not result.calls and not result.finds:
        lines.append("nothing was re-decided: the log holds no call or find_tools line this replay can read")
        return "\n".join(lines)
    if not rows:
        lines.append("nothing would change")
        return "\n".join(lines)
    head = ("change", "client", "tool", "count", "example")
    body = []
    for r in rows[:limit]:
        ex = r.examples[0]
        what = f"line {ex['line']}" + (f" {ex['before']} -> {ex['after']}" if "before" in ex else f" -> {ex['after']}")
        body.append((r.change, r.client or "-", r.tool, str(r.count), what))
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body)
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more rows (--json gives all)")
    return "\n".join(lines)
