"""What the gateway remembers of a session: its task, the tools that task needs, where values
came from, and what the user already confirmed (the session guard, docs/session-guard.md).

A call alone cannot show that an agent was turned against its user: the attack arrives in a
tool's *result* (a message, a page, a ticket that says "send the report to x@evil.example"),
and the agent's next call looks like any other. What can show it is the session: the task it
started with (the **anchor**), the tools riskrank's own ranking gives for that task (the
**scope**), and the values that came in through results the user does not control (the
**flow record**). :class:`SessionRecord` holds them, bounded (:data:`MAX_FLOW_VALUES` values,
:data:`MAX_SCOPE` tools); :class:`SessionBook` keeps one per session key, in memory or in the
gateway's state store (so a session moved to another replica keeps its record).

:func:`tool_roles` says which tools are **untrusted sources** (their results are read for
values) and which are **sinks** (their arguments are checked): from MCP's ``openWorldHint``,
riskrank's capabilities (:mod:`riskrank.capabilities`) and the tool's words, then the policy's
``sources``/``sinks`` and their ``trusted_`` opposites.

Standard library only (and the capability vocabulary).
"""

from __future__ import annotations

import collections
import contextlib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from riskrank.capabilities import name_reads, scoped_text
from riskrank.errors import RiskrankError
from riskrank.risk import normalise_text, split_name
from riskrank.serving.gateway.policy import Policy
from riskrank.serving.gateway.values import KINDS, Value, fold

#: Values a session's flow record keeps; beyond it the oldest are forgotten (and counted).
MAX_FLOW_VALUES = 2000
#: Tools a scope holds at most (the anchor's ranking, the tools it names, those the user let in).
MAX_SCOPE = 256
#: Tools remembered as confirmed once in a session.
MAX_CONFIRMED = 512
#: Values the user approved in a held call (they count as the user's own from then on).
MAX_CLEARED = 512
#: Characters of the anchor kept (the longest task find_tools takes is shorter).
MAX_ANCHOR_CHARS = 8000
#: Sessions kept in memory (the state store keeps every one until it has been idle for a while).
MAX_SESSIONS = 4096
#: Where an anchor came from.
ANCHOR_SOURCES = ("find_tools", "header", "meta")

#: Capabilities (:data:`riskrank.capabilities.CAPABILITY_KEYS`) that make a tool a sink.
SINK_CAPABILITIES = frozenset({"outbound_send", "exfiltration", "financial", "destruction", "mass_destruction",
                               "permission_change", "credential_access", "credential_harvesting", "code_execution",
                               "host_execution"})
#: Words of a tool's name that make it a sink: it sends data out, pays, books or deletes.
SINK_VERBS = frozenset({"send", "post", "share", "upload", "publish", "forward", "reply", "email", "mail", "tweet",
                        "pay", "transfer", "withdraw", "purchase", "buy", "book", "order",
                        "delete", "remove", "rm", "rmdir", "unlink", "drop", "destroy", "wipe", "erase", "purge"})
#: What a result of someone else's making is about: a tool that reads one of these is a source.
_OTHERS = (r"(?:messages?|inbox\w*|e ?mails?|mails?|mailbox\w*|chats?|conversations?|threads?|dms?|tweets?|posts?|"
           r"comments?|replies|mentions?|tickets?|issues?|reviews?|feeds?|notifications?|web ?pages?|pages?|websites?|"
           r"sites?|urls?|links?|html|internet|web|search results?|rss|articles?|news|documents? shared|shared "
           r"(?:files?|documents?|folders?)|other (?:users?|people)\w*)")
_READS = (r"(?:read\w*|get|gets|getting|fetch\w*|view\w*|list|lists|listing|search\w*|retriev\w*|brows\w*|show\w*|"
          r"display\w*|download\w*|open|opens|scrap\w*|receiv\w*|crawl\w*|load\w*|check\w*|inspect\w*)")
_SOURCE = re.compile(rf"\b{_READS}\b(?:\s+\S+){{0,5}}?\s+{_OTHERS}\b|\b{_OTHERS}\b(?:\s+\S+){{0,2}}?\s+{_READS}\b")
_OTHERS_WORD = re.compile(rf"\b{_OTHERS}\b")


def tool_roles(name: str, description: str, schema: Mapping[str, Any] | None, annotations: Mapping[str, Any] | None,
               capabilities: Iterable[str], upstream: str | None, policy: Policy) -> tuple[str | None, str | None]:
    """(why the tool is an untrusted source, why it is a sink); None where it is not one.

    A source: ``openWorldHint`` true, or its name and first sentences say it reads what other
    people write (messages, e-mail, posts, tickets, web pages). A sink: a capability of
    :data:`SINK_CAPABILITIES`, or a word of :data:`SINK_VERBS` in its name. The policy's
    ``sources``/``sinks`` add tools and servers; ``trusted_sources``/``trusted_sinks`` take them out."""
    source = sink = None
    if policy.trusted_sources.matches(name, upstream):
        source = None
    elif policy.sources.matches(name, upstream):
        source = "the policy lists it among the untrusted sources"
    elif (annotations or {}).get("openWorldHint") is True:
        source = "openWorldHint: it reads an open world"
    else:
        text = scoped_text(name, description or "", schema)
        words = normalise_text(split_name(name))
        m = _SOURCE.search(text) or (_OTHERS_WORD.search(words) if name_reads(name) else None)
        if m is not None:
            source = f"it reads what others write ({m.group(0).strip()!r})"
    caps = [c for c in capabilities if c in SINK_CAPABILITIES]
    verbs = sorted(set(normalise_text(split_name(name)).split()) & SINK_VERBS)
    if policy.trusted_sinks.matches(name, upstream):
        sink = None
    elif policy.sinks.matches(name, upstream):
        sink = "the policy lists it among the sinks"
    elif caps:
        sink = "capability " + ", ".join(caps)
    elif verbs:
        sink = f"its name says {verbs[0]!r}"
    return source, sink


@dataclass
class Exposure:
    """A caller's latest ``find_tools`` result: the only tools it may call (``at``: this
    process's monotonic clock)."""

    task: str
    names: frozenset[str]
    at: float


@dataclass(frozen=True)
class Flow:
    """One value first seen in an untrusted result: folded, as written, its kind, the tool
    whose result carried it and when (epoch seconds)."""

    folded: str
    shown: str
    kind: str
    tool: str
    at: float

    def provenance(self) -> str:
        """``recipient 'x@evil.example' first appeared in the result of read_inbox, 12:03:11 UTC``."""
        when = time.strftime("%H:%M:%S", time.gmtime(self.at))
        return f"{KINDS.get(self.kind, self.kind)} {self.shown!r} first appeared in the result of {self.tool}, {when} UTC"


@dataclass(frozen=True)
class SessionRecord:
    """One session's anchor, scope, flow record and confirmations (module docstring). Frozen:
    every change is a new record (the state store writes it by compare-and-swap)."""

    anchor: str | None = None
    anchor_from: str | None = None
    anchor_at: float | None = None
    scope: tuple[str, ...] = ()
    widened: tuple[str, ...] = ()
    """Tools outside the scope the user confirmed: inside it from then on."""
    flows: tuple[Flow, ...] = ()
    forgotten: int = 0
    """Values the flow record dropped, oldest first, to stay within :data:`MAX_FLOW_VALUES`."""
    confirmed: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()
    """Folded values the user approved in a held call: the user's own from then on."""
    task_attempts: int = 0
    """Later attempts to set the task, each ignored (the first stands)."""

    # -- reading ------------------------------------------------------------------------------------
    @property
    def anchored(self) -> bool:
        return self.anchor is not None

    def in_scope(self, tool: str) -> bool:
        """Whether ``tool`` is inside the scope (or the session has no anchor: nothing to drift from)."""
        return self.anchor is None or tool in self.scope or tool in self.widened

    def flow_hits(self, folded_arguments: str) -> list[Flow]:
        """The recorded values ``folded_arguments`` (:func:`~.values.folded_arguments`) carry
        that neither the anchor nor the user's approvals hold, first seen first."""
        if not self.flows or not folded_arguments:
            return []
        own = fold(self.anchor or "")
        cleared = set(self.cleared)
        return [f for f in self.flows if f.folded in folded_arguments and f.folded not in own and f.folded not in cleared]

    # -- changes (each returns a new record) ---------------------------------------------------------
    def with_anchor(self, task: str, source: str, scope: Iterable[str], at: float) -> SessionRecord:
        """The record anchored to ``task`` (from ``source``: :data:`ANCHOR_SOURCES`) with its
        ``scope``; a record already anchored only counts the attempt (the first task stands)."""
        if self.anchor is not None:
            return replace(self, task_attempts=self.task_attempts + 1)
        return replace(self, anchor=task[:MAX_ANCHOR_CHARS], anchor_from=source, anchor_at=at,
                       scope=tuple(sorted(set(scope)))[:MAX_SCOPE])

    def with_values(self, values: Iterable[Value], tool: str, at: float) -> SessionRecord:
        """The record with ``values`` of one untrusted result added (a value already recorded
        keeps its first provenance); the oldest are forgotten beyond :data:`MAX_FLOW_VALUES`."""
        known = {f.folded for f in self.flows}
        new = [Flow(v.folded, v.shown, v.kind, tool, at) for v in values if v.folded not in known]
        if not new:
            return self
        flows = [*self.flows, *{f.folded: f for f in new}.values()]
        over = max(0, len(flows) - MAX_FLOW_VALUES)
        return replace(self, flows=tuple(flows[over:]), forgotten=self.forgotten + over)

    def with_confirmation(self, tool: str, *, widen: bool, cleared: Iterable[str] = ()) -> SessionRecord:
        """The record after the user approved a call of ``tool``: confirmed once; inside the
        scope from now on when ``widen`` (a held drift); ``cleared`` values the user's own."""
        confirmed = self.confirmed if tool in self.confirmed else (*self.confirmed, tool)[-MAX_CONFIRMED:]
        widened = (*self.widened, tool)[-MAX_SCOPE:] if widen and tool not in self.widened else self.widened
        cleared_ = tuple(dict.fromkeys((*self.cleared, *cleared)))[-MAX_CLEARED:]
        return replace(self, confirmed=confirmed, widened=widened, cleared=cleared_)

    # -- the stored form ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"v": 1, "anchor": self.anchor, "anchor_from": self.anchor_from, "anchor_at": self.anchor_at,
                "scope": list(self.scope), "widened": list(self.widened),
                "flows": [[f.folded, f.shown, f.kind, f.tool, f.at] for f in self.flows], "forgotten": self.forgotten,
                "confirmed": list(self.confirmed), "cleared": list(self.cleared), "task_attempts": self.task_attempts}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionRecord:
        """A stored record; one this code cannot read raises :class:`SessionError` (the call is
        refused: a record that cannot be read guards nothing)."""
        try:
            if data.get("v") != 1:
                raise ValueError(f"record version {data.get('v')!r}")
            return cls(anchor=data.get("anchor"), anchor_from=data.get("anchor_from"), anchor_at=data.get("anchor_at"),
                       scope=tuple(map(str, data.get("scope") or ()))[:MAX_SCOPE],
                       widened=tuple(map(str, data.get("widened") or ()))[:MAX_SCOPE],
                       flows=tuple(Flow(str(a), str(b), str(c), str(d), float(e))
                                   for a, b, c, d, e in (data.get("flows") or ()))[-MAX_FLOW_VALUES:],
                       forgotten=int(data.get("forgotten") or 0),
                       confirmed=tuple(map(str, data.get("confirmed") or ()))[-MAX_CONFIRMED:],
                       cleared=tuple(map(str, data.get("cleared") or ()))[-MAX_CLEARED:],
                       task_attempts=int(data.get("task_attempts") or 0))
        except (TypeError, ValueError, AttributeError) as exc:
            raise SessionError(f"a session record this gateway cannot read ({exc})") from None

    def summary(self) -> dict[str, Any]:
        """What an audit line or the console says of the record (not its values)."""
        return {"anchor_from": self.anchor_from, "scope": len(self.scope) + len(self.widened), "values": len(self.flows),
                "forgotten": self.forgotten, "confirmed": len(self.confirmed)}


class SessionError(RiskrankError):
    """A session record that cannot be read or written: the call it guards is refused."""

    code = "session_unavailable"


#: How many times a compare-and-swap write is retried before it fails.
CAS_TRIES = 8
#: A session record idle longer than this is removed from the state store (on a later write).
IDLE_S = 7 * 24 * 3600.0
#: How often (at most) a gateway removes idle records from the store.
PRUNE_EVERY_S = 3600.0


class SessionBook:
    """The gateway's session records: in this process's memory (the latest
    :data:`MAX_SESSIONS`), or in the state store (``store``: every replica reads and writes the
    same record, compare-and-swap). Blocking: the gateway calls it from a worker thread."""

    def __init__(self, store: Any = None) -> None:
        self.store = store
        self._memory: collections.OrderedDict[str, SessionRecord] = collections.OrderedDict()
        self._pruned_at = 0.0

    def get(self, key: str) -> SessionRecord:
        """The record of ``key`` (an empty one for a session not seen yet)."""
        if self.store is None:
            return self._memory.get(key) or SessionRecord()
        got = self._read(key)
        return got[1] if got is not None else SessionRecord()

    def update(self, key: str, change: Callable[[SessionRecord], SessionRecord]) -> SessionRecord:
        """Apply ``change`` to the record of ``key`` and keep the result; in the store by
        compare-and-swap (a write another replica made meanwhile is read and ``change``
        applied to it again, never written over)."""
        if self.store is None:
            new = change(self._memory.get(key) or SessionRecord())
            self._memory[key] = new
            self._memory.move_to_end(key)
            while len(self._memory) > MAX_SESSIONS:
                self._memory.popitem(last=False)
            return new
        from riskrank.serving.gateway.store import StoreError

        try:
            for _ in range(CAS_TRIES):
                got = self._read(key)
                old = got[1] if got is not None else SessionRecord()
                new = change(old)
                if new is old:
                    return old
                if self.store.put_session(key, new.to_dict(), expect=None if got is None else got[0], at=time.time()) is not None:
                    self._prune()
                    return new
        except StoreError as exc:
            raise SessionError(f"the session record cannot be written ({exc})") from None
        raise SessionError(f"the session record of {key!r} kept changing under this write ({CAS_TRIES} tries)")

    def _read(self, key: str) -> tuple[int, SessionRecord] | None:
        from riskrank.serving.gateway.store import StoreError

        try:
            got = self.store.session(key)
        except StoreError as exc:
            raise SessionError(f"the session record cannot be read ({exc})") from None
        return None if got is None else (got[0], SessionRecord.from_dict(got[1]))

    def _prune(self) -> None:
        now = time.time()
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        from riskrank.serving.gateway.store import StoreError

        with contextlib.suppress(StoreError):  # housekeeping: the next write tries again in an hour
            self.store.prune_sessions(now - IDLE_S)
