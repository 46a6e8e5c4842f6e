"""``quarantined`` or ``poisoned``: a tool trust holds back (a pin change awaiting an operator's
approval, a definition the scan found speaking to the model) is refused with its reason,
whether or not the caller's ``find_tools`` showed it."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict


def check(ctx: CallContext) -> Verdict | None:
    code = ctx.view.held.get(ctx.tool)
    if code is None:
        return None
    return Verdict(REFUSE, code, ctx.view.withdrawn.get(ctx.tool) or code)


GUARD = Guard("trust", check)
