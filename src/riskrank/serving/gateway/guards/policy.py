"""``denied_by_policy``, ``above_max_level``, ``not_exposed``: the policy's call-time decision
(:func:`riskrank.serving.gateway.policy.decide`) at the tool's level *now*."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict
from riskrank.serving.gateway.policy import Decision, decide


def decision(ctx: CallContext) -> Decision:
    """The policy's decision for this call (a tool no catalogue rates is judged at level 5)."""
    return decide(ctx.policy, ctx.tool, ctx.level or 5, exposed=ctx.exposed, expired=ctx.expired, upstream=ctx.upstream,
                  own=(ctx.row or {}).get("original"))


def check(ctx: CallContext) -> Verdict | None:
    d = decision(ctx)
    return None if d.allowed else Verdict(REFUSE, d.code, d.reason)


GUARD = Guard("policy", check)
