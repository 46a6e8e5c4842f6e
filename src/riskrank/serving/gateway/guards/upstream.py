"""``upstream_down``: the caller was shown the tool, but its server is not running now
(restarting): try again later."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict

UPSTREAM_DOWN = "upstream_down"


def check(ctx: CallContext) -> Verdict | None:
    if ctx.exposed and not ctx.expired and not ctx.upstream_live:
        return Verdict(REFUSE, UPSTREAM_DOWN, f"the server of {ctx.tool!r} is not running; try again later")
    return None


GUARD = Guard("upstream", check)
