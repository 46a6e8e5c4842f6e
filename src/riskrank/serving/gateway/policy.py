"""The call-time policy: what the server's operator allows, fixed when the server starts.

The agent writes the task text, so it can steer what ``find_tools`` ranks first; it cannot
change this. A tool is callable only if it is in the caller's latest ``find_tools`` result
(within ``exposure_ttl_s`` when set) and, at call time, with the level it has *then*:

1. ``denied_by_policy``: its public name matches a ``deny`` glob, or no ``allow`` glob;
2. ``above_max_level``: its risk level is above ``max_level``;
3. ``not_exposed``: not in the caller's latest result (or that result is older than the TTL);
4. ``confirmation_required``: its level is ``confirm_level`` or more, or its server is one
   the policy calls ``untrusted``: it runs only if the user confirms
   (:mod:`riskrank.serving.gateway.confirm`); ``denied`` when the user or the operator
   declines.

Rules 1 and 2 come first because they do not depend on the search: a tool they refuse is
never offered by ``find_tools`` (:meth:`Policy.refusal`), so telling the agent to search again
(``not_exposed``) would send it round in circles. ``not_exposed`` is left for a tool the agent
could see with the right search.

A level is read from the tool's description and annotations, which its server writes: a tool
that lies about what it does (a "tidy" tool that deletes, claiming ``readOnlyHint``) gets a
low level. For a server you do not trust, ``"preset": "untrusted"`` (every server) or
``"untrusted": ["NAME", ...]`` (those upstreams) asks for confirmation of every call.

The first rule that fails decides (:func:`decide`, pure and unit-tested).

The session guard (docs/session-guard.md) adds what one call cannot show: ``scope`` (a risky
tool outside what the session's task needs is confirmed, naming both texts), ``flow`` (a
sink whose arguments carry a value first seen in an untrusted result is confirmed or
refused) and ``confirm`` (``once_per_session``: a tool confirmed once in a session, inside its
scope, at ``cover_level`` or below, is not asked about again). :class:`Globs` names the servers and
tools the policy adds to, or takes out of, the untrusted sources and the sinks.

Nothing here imports the MCP SDK.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from riskrank.modes import MODES, RISK_SOURCES

NOT_EXPOSED = "not_exposed"
DENIED_BY_POLICY = "denied_by_policy"
#: The user or the operator declined the confirmation (or the approved arguments changed).
DENIED = "denied"
ABOVE_MAX_LEVEL = "above_max_level"
CONFIRMATION_REQUIRED = "confirmation_required"
#: The stable codes of :func:`decide` and of a confirmation that fails.
REFUSALS = (DENIED_BY_POLICY, ABOVE_MAX_LEVEL, NOT_EXPOSED, CONFIRMATION_REQUIRED, DENIED)
#: ``Policy.source`` of the policy a gateway runs when no ``--policy`` file is given.
DEFAULT_SOURCE = "the default policy"
#: What a client may be allowed to pick in ``find_tools`` (``client_choices``), and where
#: its allowed values come from.
CHOOSABLE = {"mode": MODES, "risk_source": RISK_SOURCES, "lambda": None}
#: The session guard's settings: ``scope``, ``flow`` and ``confirm`` (docs/session-guard.md).
SCOPE_ACTIONS = ("confirm", "off")
FLOW_ACTIONS = ("confirm", "refuse", "off")
CONFIRM_MODES = ("once_per_session", "once_per_task", "every_call")


@dataclass(frozen=True)
class Globs:
    """Upstream server names and public tool names (globs) a policy picks out: a tool matches
    when its name matches one of ``tools`` or its server one of ``servers``."""

    servers: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()

    def matches(self, tool: str, server: str | None, own: str | None = None) -> bool:
        """Whether the tool (its public name, or ``own``, its name at its server: pass it only
        for a rule that restricts) or its server matches."""
        return (any(fnmatch.fnmatchcase(n, g) for n in _names(tool, own) for g in self.tools)
                or (server is not None and any(fnmatch.fnmatchcase(server, g) for g in self.servers)))

    def to_dict(self) -> dict[str, list[str]]:
        return {"servers": list(self.servers), "tools": list(self.tools)}


def _names(name: str, own: str | None) -> tuple[str, ...]:
    """The names a tool's globs are matched against: the name it is offered under and its own
    name at its server. Two servers listing one name are offered as ``SERVER__NAME``, so a
    rule written for ``delete_repo`` would stop matching the day another server (any server:
    listing a tool is all it takes) lists a ``delete_repo`` too."""
    return (name,) if own is None or own == name else (name, own)


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
    learned_scan: bool = False
    """Whether the scan adds the learned detector's findings to the rules' (``riskrank.poison``;
    off by default: measured below its targets, with false positives on real servers,
    docs/trust.md)."""
    first_seen: str = "trust"
    """A server's tools on its first connect to a pin store: ``trust`` (pinned as they are) or
    ``quarantine`` (held until an operator approves them)."""
    scope: str = "confirm"
    """A tool that may not drift (a sink, ``confirm_level`` or more, or ``drift_level`` or more
    when its name does not say it only reads) outside the session's scope: its call is confirmed
    naming the session's task and the agent's words (``confirm``), or not checked (``off``)."""
    drift_level: int = 2
    """Outside the session's scope, a tool at this level or more is held unless its name says it
    only reads (``get_``, ``list_``): an agent turned by what it read reaches for tools that act,
    and a level read too low (a short description) must not wave one through."""
    flow: str = "confirm"
    """A sink call whose arguments carry a value first seen in an untrusted result, not in the
    session's task: ``confirm`` (with where the value came from), ``refuse`` or ``off``."""
    confirm: str = "once_per_session"
    """``once_per_session``: a tool confirmed once in a session is not asked about again while
    its calls stay inside the scope, carry no untrusted value and are at ``cover_level`` or below;
    ``once_per_task``: one approval of a call held for its level (inside the scope, or
    drifting out of it) covers every tool inside the scope on the same terms (the user approves the task's tools, not each one); ``every_call``: each
    call is asked about."""
    cover_level: int | None = None
    """The highest level an approval covers for later calls (``confirm`` above); None: one
    below ``max_level`` (3 by default: a level-4 call is asked about every time). Raising it to
    ``max_level`` lets one approval cover the task's level-4 tools too: fewer questions, and an
    agent turned without reading anything untrusted may then run them (docs/session-guard.md)."""
    sources: Globs = Globs()
    """Servers and tools whose results are untrusted, beside those the gateway finds
    (``openWorldHint``; a tool that reads messages, web pages, e-mail, tickets, posts)."""
    trusted_sources: Globs = Globs()
    """Servers and tools whose results are never untrusted (wins over ``sources``)."""
    sinks: Globs = Globs()
    """Servers and tools that send data out or act on the world, beside those the gateway finds."""
    trusted_sinks: Globs = Globs()
    """Servers and tools that are never sinks (wins over ``sinks``): their arguments are not checked."""
    source: str = DEFAULT_SOURCE
    """Where the policy comes from: the policy file (and its entry), or :data:`DEFAULT_SOURCE`."""

    def refusal(self, name: str, level: int, own: str | None = None) -> str | None:
        """The code that refuses ``name`` (``own``: its name at its server) at ``level`` whatever
        the exposure (``denied_by_policy``, ``above_max_level``): such a tool is never offered.
        None otherwise. A ``deny`` glob matching either name denies it; only an ``allow`` glob
        matching the name it is offered under allows it (a rule that grants must not reach
        another server's tool of the same name)."""
        if (any(fnmatch.fnmatchcase(n, g) for n in _names(name, own) for g in self.deny)
                or not any(fnmatch.fnmatchcase(name, g) for g in self.allow)):
            return DENIED_BY_POLICY
        if level > self.max_level:
            return ABOVE_MAX_LEVEL
        return None

    def needs_confirmation(self, level: int, upstream: str | None = None) -> bool:
        """Whether a call of a tool at ``level`` served by ``upstream`` (None: no upstream)
        must be confirmed: at ``confirm_level`` or above, or from an untrusted server."""
        return level >= self.confirm_level or self.untrusted_server(upstream)

    def untrusted_server(self, upstream: str | None) -> bool:
        """Whether every call of ``upstream``'s tools is confirmed (``untrusted``, ``preset``)."""
        return any(fnmatch.fnmatchcase(upstream or "", g) for g in self.untrusted)

    def call_timeout(self, name: str, default: float) -> float:
        """The seconds a call of ``name`` may take (``call_timeouts``' first match, else ``default``)."""
        return next((s for g, s in self.call_timeouts.items() if fnmatch.fnmatchcase(name, g)), default)

    @property
    def approval_ceiling(self) -> int:
        """The highest level an approval covers (``cover_level``, else one below ``max_level``)."""
        return self.cover_level if self.cover_level is not None else self.max_level - 1

    def pinned_level(self, name: str) -> int | None:
        """The level ``levels`` pins for ``name`` (the first matching glob, in file order)."""
        return next((lvl for g, lvl in self.levels.items() if fnmatch.fnmatchcase(name, g)), None)

    def floor_for(self, name: str, own: str | None) -> int | None:
        """The level a ``levels`` glob pins for a tool's own name at its server when the name it
        is offered under matches none (two servers list one name): a floor, never a lowering,
        since it may be another server's tool of that name."""
        if own is None or own == name or self.pinned_level(name) is not None:
            return None
        return self.pinned_level(own)

    def to_dict(self) -> dict[str, Any]:
        return {"max_level": self.max_level, "confirm_level": self.confirm_level, "allow": list(self.allow),
                "deny": list(self.deny), "exposure_ttl_s": self.exposure_ttl_s,
                "client_choices": {k: list(v) for k, v in self.client_choices.items()}, "levels": dict(self.levels),
                "untrusted": list(self.untrusted), "call_timeouts": dict(self.call_timeouts),
                "on_poisoned": self.on_poisoned, "on_suspicious": self.on_suspicious, "first_seen": self.first_seen,
                "learned_scan": self.learned_scan, "scope": self.scope, "drift_level": self.drift_level, "flow": self.flow, "confirm": self.confirm, "cover_level": self.approval_ceiling, "sources": self.sources.to_dict(),
                "trusted_sources": self.trusted_sources.to_dict(), "sinks": self.sinks.to_dict(),
                "trusted_sinks": self.trusted_sinks.to_dict()}


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
           upstream: str | None = None, own: str | None = None) -> Decision:
    """The call-time decision for ``name`` (``own``: its name at its server) at its current
    ``level`` (module docstring)."""
    code = policy.refusal(name, level, own)
    if code == DENIED_BY_POLICY:
        return Decision(DENIED_BY_POLICY, f"{name!r} is never offered to this client: the policy ({policy.source}) "
                                          "denies it; no search will return it")
    if code == ABOVE_MAX_LEVEL:
        return Decision(ABOVE_MAX_LEVEL, f"{name!r} is risk level {level} and is never offered to this client: the "
                                         f"policy ({policy.source}) allows at most level {policy.max_level}")
    if not exposed or expired:
        why = ("your latest find_tools result is older than the server's exposure TTL" if expired and exposed
               else "it is not in your latest find_tools result")
        return Decision(NOT_EXPOSED, f"{name!r} cannot be called: {why}; call find_tools for your task first")
    if level >= policy.confirm_level:
        return Decision("allowed", f"level {level} >= confirm_level {policy.confirm_level}", confirm=True)
    if policy.needs_confirmation(level, upstream):
        return Decision("allowed", f"its server {upstream!r} is untrusted by the policy: every call is confirmed", confirm=True)
    return Decision("allowed", f"level {level} < confirm_level {policy.confirm_level}")


def confirmation_refusal(policy: Policy, name: str, level: int) -> Decision:
    """The refusal when a confirmation-level call cannot be confirmed by this client: what the
    user can do (another client) and what the operator can change: the key, in the policy file
    the gateway runs, or ``--policy FILE`` when it runs the default policy."""
    head = (f"{name!r} is risk level {level} and needs the user's confirmation (confirm_level {policy.confirm_level}), "
            "but this client cannot ask its user (it declared no MCP elicitation). Use a client that supports elicitation, "
            "or let the operator approve calls in the console (riskrank mcp --console)")
    if level >= 5:  # no confirm_level lets a level-5 call run unconfirmed
        return Decision(CONFIRMATION_REQUIRED, head)
    key = f'"confirm_level": {level + 1}'
    where = (f"start the gateway with --policy FILE holding {key} (it runs the default policy)" if policy.source == DEFAULT_SOURCE
             else f"set {key} in the policy file given with --policy ({policy.source})")
    return Decision(CONFIRMATION_REQUIRED, f"{head}, or {where}")
