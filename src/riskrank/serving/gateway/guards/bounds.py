"""``arguments_too_large``: arguments deeper, wider or bigger than the gateway forwards,
checked before anything else reads them (:func:`riskrank.serving.gateway.limits.check_arguments`)."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict
from riskrank.serving.gateway.limits import LimitError, check_arguments


def check(ctx: CallContext) -> Verdict | None:
    try:
        check_arguments(ctx.tool, dict(ctx.arguments), ctx.limits)
    except LimitError as exc:
        return Verdict(REFUSE, exc.code, str(exc))
    return None


GUARD = Guard("bounds", check, freezes=True)
