"""Flow: a call of a sink, or of any tool whose name does not say it only reads (``get_``,
``list_``; the policy's ``trusted_sinks`` are never checked), whose arguments carry a value
first seen in an untrusted result (an
e-mail address, a URL, an account number, a path, a recipient ...), and not in the session's
task or among the values the user approved, is held for confirmation with where the value
came from ("recipient 'x@evil.example' first appeared in the result of read_inbox, 12:03:11
UTC"), or refused (``"flow": "refuse"``: ``untrusted_value``). Off with ``"flow": "off"``.
Values are matched in :func:`riskrank.serving.gateway.values.fold`'s form."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import HOLD, REFUSE, CallContext, Guard, Verdict

FLOW = "flow"
#: The refusal of a sink call that carries an untrusted value, under ``"flow": "refuse"``.
UNTRUSTED_VALUE = "untrusted_value"
#: Provenances a message names at most (the rest are counted).
SHOWN = 3


def check(ctx: CallContext) -> Verdict | None:
    if not ctx.row.get("flow_checked", bool(ctx.row.get("sink"))):
        return None
    hits = ctx.record.flow_hits(dict(ctx.arguments))
    if not hits:
        return None
    said = "; ".join(h.provenance() for h in hits[:SHOWN]) + (f" (and {len(hits) - SHOWN} more)" if len(hits) > SHOWN else "")
    said += f"; {'it is' if len(hits) == 1 else 'they are'} not in the session's task"
    if ctx.policy.flow == "refuse":
        what = f"is a sink ({ctx.row['sink']})" if ctx.row.get("sink") else "may act (its name does not say it only reads)"
        return Verdict(REFUSE, UNTRUSTED_VALUE, f"{ctx.tool!r} {what} and its arguments carry "
                                               f"untrusted values: {said}; the policy refuses such calls (flow: refuse)")
    return Verdict(HOLD, FLOW, f"its arguments carry untrusted values: {said}", values=tuple(h.folded for h in hits))


GUARD = Guard("flow", check, enabled=lambda ctx: ctx.policy.flow != "off")
