"""``session_unavailable``: the session's record (its anchor, scope, flow record and
confirmations) could not be read, so the session guard cannot judge the call: refused (fail
closed), unless the policy turned every part of the session guard off."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict

SESSION_UNAVAILABLE = "session_unavailable"


def check(ctx: CallContext) -> Verdict | None:
    if ctx.record_error is None:
        return None
    return Verdict(REFUSE, SESSION_UNAVAILABLE, f"{ctx.record_error}; a call the session guard cannot judge is refused "
                                                "(try again once the gateway's state store answers)")


def _used(ctx: CallContext) -> bool:
    p = ctx.policy
    return p.scope != "off" or p.flow != "off" or p.confirm != "every_call"


GUARD = Guard("session", check, enabled=_used)
