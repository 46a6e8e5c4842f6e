"""Who confirms a call at or above the policy's ``confirm_level``: a confirmation broker.

The gateway hands a :class:`ConfirmationRequest` to its broker and waits for the answer:
``accept`` (the call runs), ``decline`` or ``cancel`` (refused as ``denied``), or
``unsupported`` (nobody can be asked: refused as ``confirmation_required``, with a message
that says how to allow it). :class:`ElicitationBroker` asks the MCP client's user through
elicitation, which the client must declare; another broker (an operator's console where
pending requests wait for approval) implements the same one method.

An elicitation is answered by the *client*: a headless harness that accepts everything makes
it no human check. Where that matters, use a broker whose answer comes from a person.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

ACCEPT, DECLINE, CANCEL, UNSUPPORTED = "accept", "decline", "cancel", "unsupported"


@dataclass(frozen=True)
class ConfirmationRequest:
    """What is to be confirmed: who asks (``session``), for which task, which tool at which
    level, with which arguments; ``bind`` identifies exactly this call (session, tool and an
    arguments digest), so an answer cannot be reused for another."""

    session: str
    task: str | None
    tool: str
    level: int
    arguments: dict[str, Any]
    message: str
    bind: str


class ConfirmationBroker(Protocol):
    """Answers :class:`ConfirmationRequest`\\ s (``name`` goes into the audit log)."""

    name: str

    async def confirm(self, request: ConfirmationRequest, call: Any) -> str:
        """``accept``, ``decline``, ``cancel`` or ``unsupported``; ``call`` is the MCP call
        (a :class:`riskrank.serving.mcp_compat.CallCtx`)."""
        ...


class ElicitationBroker:
    """Asks the MCP client's user (form elicitation: one ``approve`` checkbox)."""

    name = "elicitation"

    async def confirm(self, request: ConfirmationRequest, call: Any) -> str:
        return await call.confirm(request.message, request.bind)
