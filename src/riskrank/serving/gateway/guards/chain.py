"""The call context every guard reads, the verdict a guard gives, and the chain that runs them.

A guard is a small pure function over one frozen :class:`CallContext`: ``None`` lets the call
through, a :class:`Verdict` refuses it (a stable code and the message the agent reads) or
holds it for confirmation (the text to show whoever confirms). :class:`Chain` runs the guards
in a fixed order: the first refusal ends the run; holds add up (one question names every
reason). The chain's record, one entry per guard, is the audit line's ``guards``.

Standard library only; the types of the view, the policy and the session record are read, not imported at run time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from riskrank.serving.gateway.limits import CallLimits
    from riskrank.serving.gateway.policy import Policy
    from riskrank.serving.gateway.session import Exposure, SessionRecord
    from riskrank.serving.gateway.view import View

REFUSE, HOLD = "refuse", "hold"


@dataclass(frozen=True)
class Verdict:
    """A guard's verdict: ``refuse`` (``code`` is the stable refusal code the agent's error
    starts with, ``message`` its text) or ``hold`` (``code`` names why, ``message`` is the line
    shown to whoever confirms; ``values``: the folded values a flow hold is about, the user's
    own once approved)."""

    action: str
    code: str
    message: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class CallContext:
    """Everything a call is judged on, fixed before the first guard runs: who calls
    (``session``, ``client``), under which ``policy`` and ``view``, with which exposure and
    session ``record``, which tool with which ``arguments`` (a frozen JSON copy once the
    bounds guard passed), whether its server is up, the bounds, and the time
    (``monotonic`` for the exposure's age, ``now`` for the record)."""

    tool: str
    arguments: Mapping[str, Any]
    session: str
    client: Mapping[str, Any] | None
    policy: Policy
    view: View
    exposure: Exposure | None
    record: SessionRecord
    limits: CallLimits
    upstream_live: bool
    monotonic: float
    now: float
    record_error: str | None = None
    """Why the session's record could not be read (the session guard then refuses)."""

    @property
    def level(self) -> int | None:
        return self.view.levels.get(self.tool, (None, None))[0]

    @property
    def provenance(self) -> str | None:
        return self.view.levels.get(self.tool, (None, None))[1]

    @property
    def upstream(self) -> str | None:
        route = self.view.routes.get(self.tool)
        return route[0] if route is not None else None

    @property
    def row(self) -> Mapping[str, Any]:
        """The tool as the view rated it (level, evidence, capabilities, source, sink ...)."""
        return self.view.tools.get(self.tool, {})

    @property
    def exposed(self) -> bool:
        return self.exposure is not None and self.tool in self.exposure.names

    @property
    def expired(self) -> bool:
        ttl = self.policy.exposure_ttl_s
        return self.exposed and ttl is not None and self.monotonic - self.exposure.at > ttl  # type: ignore[union-attr]

    @property
    def task(self) -> str | None:
        """The agent's current words: the task of the caller's latest ``find_tools``."""
        return self.exposure.task if self.exposure is not None else None


@dataclass(frozen=True)
class Guard:
    """One guard: its ``name`` (in the audit line), its ``check``, and ``enabled`` (the policy
    may turn a session-guard check off; the record then says ``off``)."""

    name: str
    check: Callable[[CallContext], Verdict | None]
    enabled: Callable[[CallContext], bool] | None = None
    freezes: bool = False
    """Once this guard passes, the arguments are frozen (the bounds guard: nothing reads an
    unbounded value)."""


@dataclass(frozen=True)
class Outcome:
    """What the chain decided: the ``context`` the later guards read (arguments frozen), the
    ``refusal`` that ended it (None: none), the ``holds`` that ask for confirmation, and the
    ``record`` of every guard that ran."""

    context: CallContext
    refusal: Verdict | None
    holds: tuple[Verdict, ...]
    record: tuple[tuple[str, ...], ...]

    def audit(self) -> list[list[str]]:
        """The audit line's ``guards``: ``[name, "pass"]``, ``[name, "off"]``, ``[name, "hold", code]``
        or ``[name, "refuse", code]``, in the order they ran."""
        return [list(r) for r in self.record]


def freeze(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """One JSON copy of bounded arguments: what is shown, approved, logged and sent."""
    return json.loads(json.dumps(dict(arguments), default=str))


class Chain:
    """The guards in their order; :meth:`run` applies them to one call. The first guard bounds
    the arguments; once it passes, the chain freezes them (:func:`freeze`, ``Guard.freezes``),
    so every later guard reads what will be shown, approved, logged and sent."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        names = [g.name for g in guards]
        if len(set(names)) != len(names):
            raise ValueError(f"two guards share a name: {names}")
        self.guards = tuple(guards)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.guards)

    def run(self, ctx: CallContext, stage: Callable[[str], AbstractContextManager[Any]] | None = None) -> Outcome:
        """``stage``: a context each guard runs in (the gateway's trace span ``guard.<name>``,
        told the verdict by ``set_attribute``); None: none."""
        record: list[tuple[str, ...]] = []
        holds: list[Verdict] = []
        for guard in self.guards:
            if guard.enabled is not None and not guard.enabled(ctx):
                record.append((guard.name, "off"))
                continue
            if stage is None:
                verdict = guard.check(ctx)
            else:
                with stage("guard." + guard.name) as span:
                    verdict = guard.check(ctx)
                    span.set_attribute("riskrank.verdict", "pass" if verdict is None else verdict.action)
                    if verdict is not None:
                        span.set_attribute("riskrank.code", verdict.code)
            if verdict is None:
                record.append((guard.name, "pass"))
            elif verdict.action == REFUSE:
                record.append((guard.name, REFUSE, verdict.code))
                return Outcome(ctx, verdict, tuple(holds), tuple(record))
            else:
                record.append((guard.name, HOLD, verdict.code))
                holds.append(verdict)
            if guard.freezes:
                ctx = replace(ctx, arguments=freeze(ctx.arguments))
        return Outcome(ctx, None, tuple(holds), tuple(record))
