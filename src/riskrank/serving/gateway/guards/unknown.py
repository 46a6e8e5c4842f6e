"""``unknown_tool``: no tool of that name is in the catalogue now and the caller was not shown
one, so no search can return it (the agent is not sent searching)."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import REFUSE, CallContext, Guard, Verdict

UNKNOWN_TOOL = "unknown_tool"


def check(ctx: CallContext) -> Verdict | None:
    if ctx.level is None and not ctx.exposed:
        skipped = ctx.view.skipped.get(ctx.tool)
        if skipped is not None:  # its server lists it, but its definition could not be served
            return Verdict(REFUSE, UNKNOWN_TOOL, (
                f"{ctx.tool!r} is listed by its server but not in the catalogue: the gateway skipped its definition "
                f"({skipped}); call find_tools for your task and use a name it returns"))
        return Verdict(REFUSE, UNKNOWN_TOOL, (
            f"no tool named {ctx.tool!r} is in the catalogue now (a server that is down lists none); call find_tools for "
            "your task and use a name it returns"))
    return None


GUARD = Guard("unknown", check)
