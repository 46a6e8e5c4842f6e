"""``withdrawn``: the tool's server listed its tools in a form that cannot be served, or the
catalogue could not be rebuilt; its tools are withdrawn (not kept at their old levels) until a
list builds. Checked for a tool the caller was shown (and whose exposure is current), and for
one no catalogue holds now."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict


def check(ctx: CallContext) -> Verdict | None:
    why = ctx.view.withdrawn.get(ctx.tool)
    if why is None:
        return None
    shown = ctx.exposed and not ctx.expired
    if shown or (ctx.level is None and not ctx.exposed):
        return Verdict(REFUSE, "withdrawn", why)
    return None


GUARD = Guard("withdrawn", check)
