"""The call-time policy: what the server's operator allows, fixed when the server starts.

The agent writes the task text, so it can steer what ``find_tools`` ranks first; it cannot
change this. A tool is callable only if it is in the caller's latest ``find_tools`` result
(within ``exposure_ttl_s`` when set) and, at call time, with the level it has *then*:

1. ``not_exposed``: not in the caller's latest result (or that result is older than the TTL);
2. ``denied``: its public name matches a ``deny`` glob, or no ``allow`` glob;
3. ``above_max_level``: its risk level is above ``max_level``;
4. ``confirmation_required``: its level is ``confirm_level`` or more, or its server is one
   the policy calls ``untrusted``: it runs only if the user confirms
   (:mod:`riskrank.serving.gateway.confirm`).

A level is read from the tool's description and annotations, which its server writes: a tool
that lies about what it does (a "tidy" tool that deletes, claiming ``readOnlyHint``) gets a
low level. For a server you do not trust, ``"preset": "untrusted"`` (every server) or
``"untrusted": ["NAME", ...]`` (those upstreams) asks for confirmation of every call.

The first rule that fails decides (:func:`decide`, pure and unit-tested). Tools that rules 2
and 3 refuse are never offered by ``find_tools`` either (:meth:`Policy.refusal`).

Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from riskrank.modes import MODES, RISK_SOURCES

NOT_EXPOSED = "not_exposed"
DENIED = "denied"
ABOVE_MAX_LEVEL = "above_max_level"
CONFIRMATION_REQUIRED = "confirmation_required"
#: The stable codes a refused call's text starts with.
REFUSALS = (NOT_EXPOSED, DENIED, ABOVE_MAX_LEVEL, CONFIRMATION_REQUIRED)
#: What a client may be allowed to pick in ``find_tools`` (``client_choices``), and where
#: its allowed values come from.
CHOOSABLE = {"mode": MODES, "risk_source": RISK_SOURCES, "lambda": None}


@dataclass(frozen=True)
class Policy:
    """One server's policy (the policy file; defaults when there is none).

    ``levels`` pins the level of matching tools (an operator's audit: provenance
    ``audited``), for tools whose own description or annotations understate them."""

    max_level: int = 4
    confirm_level: int = 3
    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    exposure_ttl_s: float | None = None
    client_choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    levels: dict[str, int] = field(default_factory=dict)
    untrusted: tuple[str, ...] = ()
    """Globs over upstream server names whose every tool needs confirmation (``*``: all)."""
    call_timeouts: dict[str, float] = field(default_factory=dict)
    """Per tool-name glob, the seconds a call may take (the first match, in file order);
    others get the gateway's ``--call-timeout``."""
    on_poisoned: str = "withhold"
    """What a tool the scan finds ``poisoned`` gets: ``withhold`` (neither offered nor
    callable), ``confirm`` (every call confirmed) or ``allow``."""
    on_suspicious: str = "confirm"
    """The same for a ``suspicious`` tool (default: every call confirmed)."""
    first_seen: str = "trust"
    """A server's tools on its first connect to a pin store: ``trust`` (pinned as they are) or
    ``quarantine`` (held until an operator approves them)."""
    source: str = "the default policy"

    def refusal(self, name: str, level: int) -> str | None:
        """The code that refuses ``name`` at ``level`` whatever the exposure (``denied``,
        ``above_max_level``), or None."""
        if any(fnmatch.fnmatchcase(name, g) for g in self.deny) or not any(fnmatch.fnmatchcase(name, g) for g in self.allow):
            return DENIED
        if level > self.max_level:
            return ABOVE_MAX_LEVEL
        return None

    def needs_confirmation(self, level: int, upstream: str | None = None) -> bool:
        """Whether a call of a tool at ``level`` served by ``upstream`` (None: no upstream)
        must be confirmed: at ``confirm_level`` or above, or from an untrusted server."""
        return level >= self.confirm_level or any(fnmatch.fnmatchcase(upstream or "", g) for g in self.untrusted)

    def call_timeout(self, name: str, default: float) -> float:
        """The seconds a call of ``name`` may take (``call_timeouts``' first match, else ``default``)."""
        return next((s for g, s in self.call_timeouts.items() if fnmatch.fnmatchcase(name, g)), default)

    def pinned_level(self, name: str) -> int | None:
        """The level ``levels`` pins for ``name`` (the first matching glob, in file order)."""
        return next((lvl for g, lvl in self.levels.items() if fnmatch.fnmatchcase(name, g)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"max_level": self.max_level, "confirm_level": self.confirm_level, "allow": list(self.allow),
                "deny": list(self.deny), "exposure_ttl_s": self.exposure_ttl_s,
                "client_choices": {k: list(v) for k, v in self.client_choices.items()}, "levels": dict(self.levels),
                "untrusted": list(self.untrusted), "call_timeouts": dict(self.call_timeouts),
                "on_poisoned": self.on_poisoned, "on_suspicious": self.on_suspicious, "first_seen": self.first_seen}


@dataclass(frozen=True)
class Decision:
    """The outcome of one call-time check: ``code`` is ``allowed`` or a refusal code;
    ``confirm`` means the call may run only once the user confirms."""

    code: str
    reason: str
    confirm: bool = False

    @property
    def allowed(self) -> bool:
        return self.code == "allowed"


def decide(policy: Policy, name: str, level: int, *, exposed: bool, expired: bool = False,
           upstream: str | None = None) -> Decision:
    """The call-time decision for ``name`` at its current ``level`` (module docstring)."""
    if not exposed or expired:
        why = ("your latest find_tools result is older than the server's exposure TTL" if expired and exposed
               else "it is not in your latest find_tools result")
        return Decision(NOT_EXPOSED, f"{name!r} cannot be called: {why}; call find_tools for your task first")
    code = policy.refusal(name, level)
    if code == DENIED:
        return Decision(DENIED, f"the server's policy ({policy.source}) does not allow {name!r}")
    if code == ABOVE_MAX_LEVEL:
        return Decision(ABOVE_MAX_LEVEL, f"{name!r} is risk level {level}; the server's policy ({policy.source}) "
                                         f"allows at most level {policy.max_level}")
    if level >= policy.confirm_level:
        return Decision("allowed", f"level {level} >= confirm_level {policy.confirm_level}", confirm=True)
    if policy.needs_confirmation(level, upstream):
        return Decision("allowed", f"its server {upstream!r} is untrusted by the policy: every call is confirmed", confirm=True)
    return Decision("allowed", f"level {level} < confirm_level {policy.confirm_level}")


def confirmation_refusal(policy: Policy, name: str, level: int) -> Decision:
    """The refusal when a confirmation-level call cannot be confirmed by this client."""
    return Decision(CONFIRMATION_REQUIRED, (
        f"{name!r} is risk level {level} and needs the user's confirmation (confirm_level {policy.confirm_level}), "
        "but this client cannot ask its user (it declared no MCP elicitation). Use a client that supports "
        f"elicitation, or let the operator raise confirm_level above {level} in the policy file ({policy.source})"))

