"""Confirmation: a tool at ``confirm_level`` or more, of a server the policy marks untrusted,
or whose definition the scan found and the policy confirms, is held for the user's (or the
operator's) confirmation. With ``"confirm": "once_per_session"`` (the default) a call of a kind
already confirmed in the session (the tool with the same switches, booleans and enum values:
:func:`~riskrank.serving.gateway.session.confirmation_kind`) is not asked about again while the call stays inside the scope, at
``cover_level`` or below (one below ``max_level`` unless the policy says), confirmed for its level alone (an untrusted server's and a scan's are asked every
call), its arguments carry no value first seen in an untrusted result (for any tool, sink or
not: the user approved the tool, not what a result put into it), and the session has read no
untrusted result since the approval (a result may have turned the agent: the next call is
asked again, once). With ``"confirm": "once_per_task"`` an approval of a call held for its
level, inside the scope or for drift as well, covers every tool inside the scope on the same terms: the user
approves the task's tools once, not each tool."""

from __future__ import annotations

from riskrank.serving.gateway.guards.chain import HOLD, CallContext, Guard, Verdict
from riskrank.serving.gateway.session import TASK_KIND, confirmation_kind

CONFIRM = "confirm"


def check(ctx: CallContext) -> Verdict | None:
    if not ctx.view.needs_confirmation(ctx.tool):
        return None
    row, level, policy = ctx.row, ctx.level, ctx.policy
    every = bool(row.get("confirm_every_call", True))
    in_scope = policy.scope == "off" or ctx.record.in_scope(ctx.tool)
    approved = policy.confirm != "every_call" and (
        ctx.record.confirmed_since_read(confirmation_kind(ctx.tool, ctx.arguments, ctx.view.schemas.get(ctx.tool)))
        or (policy.confirm == "once_per_task" and ctx.record.confirmed_since_read(TASK_KIND)))
    if (approved and not every and in_scope and level is not None and level <= policy.approval_ceiling
            and not (ctx.record.flows and ctx.record.flow_hits(dict(ctx.arguments)))):
        return None
    if policy.untrusted_server(ctx.upstream):
        why = f"its server {ctx.upstream!r} is untrusted by the policy: every call is confirmed"
    elif every:
        why = f"its definition is {row['scan']} (the scan's findings are in its evidence) and the policy confirms such tools"
    else:
        why = ""  # its level: the question itself says it
    return Verdict(HOLD, CONFIRM, why)


GUARD = Guard("confirm", check)
