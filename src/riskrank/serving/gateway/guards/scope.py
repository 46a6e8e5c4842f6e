"""Drift: a tool that acts (a sink, ``confirm_level`` or more, or ``drift_level`` or more when its
name does not say it only reads) outside the session's scope (the
tools riskrank's ranking gives for the task the session started with, those that task names,
and those the user already let in) is held for confirmation, naming both texts: "the session
started with 'summarise my inbox'; the agent now asks for 'send money'". Low-risk tools flow
as before; a session without an anchor has nothing to drift from. Off with ``"scope": "off"``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from riskrank.capabilities import name_only_reads
from riskrank.fileio import terminal_safe
from riskrank.serving.gateway.guards.chain import HOLD, CallContext, Guard, Verdict

if TYPE_CHECKING:
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.gateway.view import View

DRIFT = "drift"


def risky(view: View, policy: Policy, tool: str) -> bool:
    """What may not drift outside the scope unasked: a sink, a tool at ``confirm_level`` or more,
    or one at ``drift_level`` or more whose name does not say it only reads."""
    level = view.levels.get(tool, (None, None))[0]
    if bool(view.tools.get(tool, {}).get("sink")) or (level is not None and level >= policy.confirm_level):
        return True
    return level is not None and level >= policy.drift_level and not name_only_reads(tool)


def quoted(text: str | None, limit: int = 200) -> str:
    """A task as a confirmation quotes it: in single quotes, cut with an ellipsis; a quote or a
    backslash inside it escaped and invisible or bidi characters shown as ``\\uXXXX``, so the
    agent's words cannot close the quote and write the rest of the question themselves."""
    text = " ".join((text or "").split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return "'" + terminal_safe(text.replace("\\", "\\\\").replace("'", "\\'")) + "'"


def check(ctx: CallContext) -> Verdict | None:
    record = ctx.record
    if not record.anchored or record.in_scope(ctx.tool) or not risky(ctx.view, ctx.policy, ctx.tool):
        return None
    what = f"risk level {ctx.level}" + (f", a sink: {ctx.row['sink']}" if ctx.row.get("sink") else "")
    return Verdict(HOLD, DRIFT, f"the session started with {quoted(record.anchor)}; the agent now asks for "
                                f"{quoted(ctx.task)}, and {ctx.tool} ({what}) is not among the tools that task needs")


GUARD = Guard("scope", check, enabled=lambda ctx: ctx.policy.scope != "off")
