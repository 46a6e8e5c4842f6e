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

import contextlib
import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from riskrank.capabilities import ACT_VERBS, name_only_reads, name_reads
from riskrank.errors import RiskrankError
from riskrank.risk import normalise_text, split_name
from riskrank.serving.gateway.policy import Policy
from riskrank.serving.gateway.values import (
    KINDS,
    Value,
    candidates,
    folded_arguments,
    shape,
    strings_of,
    unescape,
    within,
)
from riskrank.serving.owned import OwnedTable

#: Values a session's flow record keeps; beyond it the oldest are forgotten (and counted).
MAX_FLOW_VALUES = 2000
#: Tools a scope holds at most (the anchor's ranking, the tools it names, those the user let in).
MAX_SCOPE = 256
#: Tools remembered as confirmed once in a session.
MAX_CONFIRMED = 512
#: Values the user approved in a held call (they count as the user's own from then on).
MAX_CLEARED = 512
#: Characters of the anchor (and of each user turn) kept (the longest task find_tools takes is shorter).
MAX_ANCHOR_CHARS = 8000
#: The user's own turns a session keeps (the latest ones; each widens the scope).
MAX_USER_TURNS = 64
#: Sessions kept in memory, records and exposures alike (the state store keeps every record
#: until it has been idle for a while).
MAX_SESSIONS = 4096
#: Where an anchor came from.
ANCHOR_SOURCES = ("find_tools", "header", "meta")

#: Capabilities (:data:`riskrank.capabilities.CAPABILITY_KEYS`) that make a tool a sink.
SINK_CAPABILITIES = frozenset({"outbound_send", "exfiltration", "financial", "destruction", "mass_destruction",
                               "permission_change", "credential_access", "credential_harvesting", "code_execution",
                               "host_execution"})
#: Words of a tool's name that make it a sink: it sends data out, pays, books or deletes.
SINK_VERBS = frozenset({"send", "post", "share", "upload", "publish", "forward", "reply", "email", "mail", "tweet",
                        "pay", "transfer", "withdraw", "purchase", "buy", "book",
                        "delete", "remove", "rm", "rmdir", "unlink", "drop", "destroy", "wipe", "erase", "purge"})
#: What a result of someone else's making is about: a tool that reads one of these is a source.
_OTHERS = (r"(?:messages?|inbox\w*|e ?mails?|mails?|mailbox\w*|chats?|conversations?|threads?|dms?|tweets?|posts?|"
           r"comments?|replies|mentions?|tickets?|issues?|reviews?|feeds?|notifications?|web ?pages?|pages?|websites?|"
           r"sites?|urls?|links?|html|internet|web|search results?|rss|articles?|news|documents?|attachments?|"
           r"shared (?:files?|folders?)|other (?:users?|people)\w*|"
           # a place search returns what businesses and directories write of themselves
           r"shops?|businesses|restaurants?|places|listings?)")
_READS = (r"(?:read\w*|get|gets|getting|fetch\w*|view\w*|list|lists|listing|search\w*|find|finds|finding|retriev\w*|brows\w*|show\w*|"
          r"display\w*|download\w*|open|opens|scrap\w*|receiv\w*|crawl\w*|load\w*|check\w*|inspect\w*|return\w*)")
#: A sentence that says the tool reads what others write: it starts with a read verb and names
#: such content within a few words ("Read the latest e-mails of the inbox", "Fetches a web page").
_READS_OTHERS = re.compile(rf"^{_READS}\b(?:\s+\S+){{0,6}}?\s+{_OTHERS}\b")
#: A file's text, anywhere in the description: a file can come from anywhere (a download, a
#: shared drive, a repository); a listing of names is not its text.
_FILE_TEXT = re.compile(r"\b(?:contents?|lines?|text|parts?) (?:of|in|from) (?:a |the |any |each |one |two |its )?"
                        r"(?:\w+ )?files?\b|\bfiles?'? contents?\b")
#: A tool that talks to someone returns what they say: "Contact customer support", "chat with
#: an agent", "ask an expert" (the user is not someone else: a tool that asks the user is not it).
_TALKS_TO = re.compile(r"\b(?:contact\w*|call|calls|calling|chat\w*|talk\w*|speak\w*|ask|asks|asking|consult\w*)\b"
                       r"(?:\s+\S+){0,4}?\s+(?:customer (?:support|service|care)|support|agents?|representatives?|help ?desk|"
                       r"operators?|humans?|staff|advisors?|experts?|concierge)\b")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def _reads_others(name: str, description: str) -> str | None:
    """Why a tool's words say its results are written by others (None: they do not)."""
    words = normalise_text(split_name(name))
    if set(words.split()) & ACT_VERBS:
        return None  # a tool that acts is judged by what it does (a sink or not), not read for values
    if name_reads(name) and (m := re.search(rf"\b{_OTHERS}\b", words)):
        return f"its name reads {m.group(0)!r}"
    for sentence in [x for x in _SENTENCES.split((description or "")[:4000].strip()) if x.strip()][:2]:
        if m := _READS_OTHERS.search(normalise_text(sentence)):
            return f"it reads what others write ({m.group(0)!r})"
    if m := _FILE_TEXT.search(normalise_text((description or "")[:4000])):
        return f"it returns a file's text ({m.group(0)!r})"
    if m := _TALKS_TO.search(words) or _TALKS_TO.search(normalise_text((description or "")[:400])):
        return f"it talks to someone else and returns what they say ({m.group(0)!r})"
    return None


def tool_roles(name: str, description: str, schema: Mapping[str, Any] | None, annotations: Mapping[str, Any] | None,
               capabilities: Iterable[str], upstream: str | None, policy: Policy,
               own: str | None = None) -> tuple[str | None, str | None]:
    """(why the tool is an untrusted source, why it is a sink); None where it is not one.

    A source: ``openWorldHint`` true; or, when its name does not act, its name reads what
    others write (``get_tweet``, ``search_messages``), one of its first two sentences starts with
    a read verb and names such content (messages, e-mail, posts, tickets, web pages, documents),
    its description says it returns a file's text, or it talks to someone else (contacts
    support, chats with an agent, asks an expert: their answer is theirs). A sink: a capability of
    :data:`SINK_CAPABILITIES`, or a word of :data:`SINK_VERBS` in its name. The policy's
    ``sources``/``sinks`` add tools and servers; ``trusted_sources``/``trusted_sinks`` take them out."""
    source = sink = None
    if policy.trusted_sources.matches(name, upstream):
        source = None
    elif policy.sources.matches(name, upstream, own):
        source = "the policy lists it among the untrusted sources"
    elif (annotations or {}).get("openWorldHint") is True:
        source = "openWorldHint: it reads an open world"
    else:
        source = _reads_others(name, description)
    caps = [c for c in capabilities if c in SINK_CAPABILITIES]
    # a name that reads (get_order_details, list_bookings) uses these words as nouns
    verbs = [] if name_only_reads(name) else sorted(set(normalise_text(split_name(name)).split()) & SINK_VERBS)
    if policy.trusted_sinks.matches(name, upstream):
        sink = None
    elif policy.sinks.matches(name, upstream, own):
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


#: The kind an approval of a call inside the scope also records under ``"confirm":
#: "once_per_task"``: the task's tools approved, not one tool.
TASK_KIND = "@task"
#: The longest kind of a confirmation (:func:`confirmation_kind`) kept whole.
MAX_KIND_CHARS = 300


def confirmation_kind(tool: str, arguments: Mapping[str, Any], schema: Mapping[str, Any] | None) -> str:
    """What one approval covers under ``"confirm": "once_per_session"``: the tool with the
    values of its switches, the arguments that choose what the call does rather than what it
    works on: a boolean, or a value the tool's schema lists as a choice (an ``enum`` or a
    ``const``, of strings or numbers, directly, through a ``$ref`` to the schema's own
    definitions, or among the options of ``anyOf``/``oneOf``, as pydantic writes an ``Enum`` or
    an ``Optional[Literal]``), in a nested object too, and a list of such choices. Approving
    ``lockDoors(unlock=false)`` is not approving ``unlock=true``, nor ``ls`` approving
    ``ls(a=true)``; the paths, texts and amounts a call works on are the flow guard's (values
    first seen in an untrusted result are asked about whatever was approved). Keys are quoted
    when they are not plain names, and a kind longer than :data:`MAX_KIND_CHARS` ends in the
    sha256 of the whole, so two different choices never read as one."""
    root = schema if isinstance(schema, Mapping) else {}
    switches: list[tuple[str, Any]] = []
    _switches(arguments, root, root, "", switches, 0)
    if not switches:
        return tool
    parts = ", ".join(f"{k if _PLAIN_KEY.match(k) else json.dumps(k, ensure_ascii=False)}={json.dumps(v, ensure_ascii=False)}"
                      for k, v in sorted(switches, key=lambda kv: kv[0]))
    kind = f"{tool}({parts})"
    if len(kind) > MAX_KIND_CHARS:
        kind = kind[: MAX_KIND_CHARS - 18] + "…#" + hashlib.sha256(kind.encode("utf-8", "replace")).hexdigest()[:16]
    return kind


_PLAIN_KEY = re.compile(r"^[A-Za-z_][\w.-]{0,63}$")


def _resolved(spec: Any, root: Mapping[str, Any], depth: int = 0) -> Mapping[str, Any]:
    """A property's schema with a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``) followed."""
    while isinstance(spec, Mapping) and isinstance(spec.get("$ref"), str) and depth < 8:
        ref = spec["$ref"]
        node: Any = root
        for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else [None]:
            node = node.get(part) if isinstance(node, Mapping) and part is not None else None
        spec, depth = node, depth + 1
    return spec if isinstance(spec, Mapping) else {}


def _choices(spec: Mapping[str, Any], root: Mapping[str, Any], depth: int = 0) -> list[Any]:
    """The values a schema lists as choices (``enum``, ``const``, and those of its options)."""
    out = list(spec["enum"]) if isinstance(spec.get("enum"), list) else []
    if "const" in spec:
        out.append(spec["const"])
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(spec.get(key), list) and depth < 4:
            for option in spec[key]:
                out += _choices(_resolved(option, root), root, depth + 1)
    return out


def _object_properties(spec: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    props = spec.get("properties")
    if isinstance(props, Mapping):
        return props
    for key in ("anyOf", "oneOf", "allOf"):
        for option in spec.get(key) or []:
            found = _resolved(option, root).get("properties")
            if isinstance(found, Mapping):
                return found
    return {}


def _switches(arguments: Mapping[str, Any], spec: Mapping[str, Any], root: Mapping[str, Any], prefix: str,
              out: list[tuple[str, Any]], depth: int) -> None:
    """The switches among ``arguments`` (an object the schema ``spec`` describes), dotted keys."""
    props = _object_properties(spec, root)
    for k, v in arguments.items():
        key, prop = prefix + str(k), _resolved(props.get(k), root)
        choices = _choices(prop, root) if prop else []
        if isinstance(v, bool) or _listed(v, choices):
            out.append((key, v))
        elif isinstance(v, Mapping) and depth < 4:
            _switches(v, prop, root, key + ".", out, depth + 1)
        elif isinstance(v, list) and v and prop:
            items = _resolved(prop.get("items"), root)
            item_choices = _choices(items, root) if items else []
            if all(isinstance(x, bool) or _listed(x, item_choices) for x in v):
                out.append((key, v))


def _listed(x: Any, choices: list[Any]) -> bool:
    """Whether ``x`` (a string or a number, not a boolean) is one of ``choices``."""
    if isinstance(x, bool) or not isinstance(x, str | int | float):
        return False
    return any(not isinstance(c, bool) and isinstance(c, str) == isinstance(x, str) and c == x for c in choices)


#: Kinds of value whose punctuation and spacing are only how they are set out: the same
#: letters and digits are the same phone number, account or street address (``+1 (555)
#: 123-4567`` is ``+15551234567``). An e-mail address, URL, domain, path, handle, identifier
#: (``bob_smith42`` is not ``bobsmith42``) or recipient with a dot, a dash or an underscore
#: moved is another one.
FORMATTED_KINDS = frozenset({"phone", "iban", "address"})


@functools.lru_cache(maxsize=1024)
def _users_own(words: tuple[str, ...]) -> tuple[dict[str, frozenset[str]], str]:
    """(each folded value of the user's own words -> the forms the user wrote it in, in
    :func:`~.values.shape`'s form, or ``{""}`` where the user wrote it as a kind whose setting
    out does not matter (:data:`FORMATTED_KINDS`); those words unescaped and case-folded):
    read once per session's words, not at every call."""
    own: dict[str, set[str]] = {}
    for t in words:
        for v in candidates(t):
            own.setdefault(v.folded, set()).add("" if v.kind in FORMATTED_KINDS else shape(v.shown))
    return {k: frozenset(v) for k, v in own.items()}, "\n".join(unescape(t).casefold() for t in words)


def flow_to_list(f: Flow) -> list[Any]:
    return [f.folded, f.shown, f.kind, f.tool, f.at]


def flow_from_list(item: Any) -> Flow:
    folded, shown, kind, tool, at = item
    return Flow(str(folded), str(shown), str(kind), str(tool), float(at))


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
    confirmed: tuple[tuple[str, int], ...] = ()
    """(the call's kind, :func:`confirmation_kind`; :attr:`reads` when the user approved it): an
    approval holds until the session reads another untrusted result (the agent may have been
    turned by it)."""
    cleared: tuple[str, ...] = ()
    """Folded values the user approved in a held call: the user's own from then on."""
    task_attempts: int = 0
    """Later attempts to set the task, each ignored (the first stands)."""
    user_turns: tuple[str, ...] = ()
    """What the host said the user wrote after the task (``riskrank/user``): the tools each
    needs join the scope, and its values are the user's own."""
    reads: int = 0
    """Untrusted results the session has read."""

    # -- reading ------------------------------------------------------------------------------------
    @property
    def anchored(self) -> bool:
        return self.anchor is not None

    def in_scope(self, tool: str) -> bool:
        """Whether ``tool`` is inside the scope (or the session has no anchor: nothing to drift from)."""
        return self.anchor is None or tool in self.scope or tool in self.widened

    def flow_hits(self, arguments: dict[str, Any]) -> list[Flow]:
        """The recorded values a call's ``arguments`` carry (matched in
        :func:`~.values.folded_arguments`' form) that neither the user's own words (the anchor,
        the user's turns) nor the user's approvals hold, first seen first. A value that folds
        like one of the user's is the user's only where the arguments write it as the user did
        (:func:`~.values.shape`): ``bobsmith@outlook.com`` folds like the user's
        ``bob.smith@outlook.com`` but is another mailbox (a phone number, an account, a street
        address or an identifier set out otherwise is the same one: :data:`FORMATTED_KINDS`)."""
        if not self.flows or not arguments:
            return []
        folded = folded_arguments(arguments)
        present = [f for f in self.flows if f.folded in folded]
        if not present:
            return []
        own_values, own_text = _users_own(tuple(t for t in (self.anchor or "", *self.user_turns) if t))
        shaped: str | None = None

        def users_own(f: Flow) -> bool:
            nonlocal shaped
            if f.folded in own_values:
                forms = own_values[f.folded]
                if "" in forms:  # the user wrote it as a number whose setting out does not matter
                    return True
                if shaped is None:
                    shaped = "|".join(shape(x) for x in strings_of(arguments))
                # each place the arguments carry the value must be written as the user wrote it
                return folded.count(f.folded) <= sum(shaped.count(form) for form in forms)
            return within(f.shown, own_text)

        hits = [f for f in present if not users_own(f)]
        # a host found inside an address or a URL the call carries says nothing more than it:
        # the whole value is the hit (or the user's approval), not its domain
        cleared = set(self.cleared)

        def inside_longer(f: Flow) -> bool:  # every place it occurs is inside a longer recorded value the call carries
            longer = [g for g in present if f.folded in g.folded and len(g.folded) > len(f.folded)]
            return bool(longer) and folded.count(f.folded) <= sum(folded.count(g.folded) for g in longer)

        return [f for f in hits if f.folded not in cleared and not inside_longer(f)]

    def confirmed_since_read(self, kind: str) -> bool:
        """Whether the user approved a call of ``kind`` (:func:`confirmation_kind`; a tool's
        name when it has no switches) in this session after its latest untrusted read."""
        return (kind, self.reads) in self.confirmed

    # -- changes (each returns a new record) ---------------------------------------------------------
    def with_anchor(self, task: str, source: str, scope: Iterable[str], at: float) -> SessionRecord:
        """The record anchored to ``task`` (from ``source``: :data:`ANCHOR_SOURCES`) with its
        ``scope``; a record already anchored only counts the attempt (the first task stands)."""
        if self.anchor is not None:
            return replace(self, task_attempts=self.task_attempts + 1)
        return replace(self, anchor=task[:MAX_ANCHOR_CHARS], anchor_from=source, anchor_at=at,
                       scope=tuple(sorted(set(scope)))[:MAX_SCOPE])

    @functools.cached_property
    def _known(self) -> frozenset[str]:
        """The folded values of :attr:`flows`: built once for a record read from the store, then
        handed from each record to the next by :meth:`with_values` (a set's copy with the new
        values, not a pass over every recorded value at each untrusted read)."""
        return frozenset(f.folded for f in self.flows)

    def with_values(self, values: Iterable[Value], tool: str, at: float) -> SessionRecord:
        """The record after one untrusted result of ``tool`` was read: its ``values`` added (a
        value already recorded keeps its first provenance; the oldest are forgotten beyond
        :data:`MAX_FLOW_VALUES`), and one more read (earlier approvals stop holding)."""
        known = self._known
        new = {v.folded: Flow(v.folded, v.shown, v.kind, tool, at) for v in values if v.folded not in known}
        flows = self.flows + tuple(new.values()) if new else self.flows
        over = max(0, len(flows) - MAX_FLOW_VALUES)
        out = replace(self, flows=flows[over:] if over else flows, forgotten=self.forgotten + over, reads=self.reads + 1)
        if len(known) == len(self.flows):  # no value twice (always, but for a record stored so): the set is exact
            kept = known.union(new) if new else known
            # cached_property's own slot (the record is frozen; the set is too, so sharing it is safe)
            out.__dict__["_known"] = kept.difference(f.folded for f in flows[:over]) if over else kept
        return out

    def with_user_turn(self, text: str, scope: Iterable[str]) -> SessionRecord:
        """The record with one more of the user's own turns (the host's word for it) and the
        tools it needs in the scope; a turn already kept changes nothing."""
        if text in self.user_turns:
            return self
        return replace(self, user_turns=(*self.user_turns, text[:MAX_ANCHOR_CHARS])[-MAX_USER_TURNS:],
                       scope=tuple(sorted({*self.scope, *scope}))[:MAX_SCOPE])

    def with_scope(self, tools: Iterable[str]) -> SessionRecord:
        """The record with ``tools`` inside the scope: what the user's own words (the anchor, a
        turn) need under a catalogue that changed since the scope was taken."""
        return replace(self, scope=tuple(sorted({*self.scope, *tools}))[:MAX_SCOPE])

    def with_confirmation(self, tool: str, *, widen: bool, cleared: Iterable[str] = (), kind: str | None = None,
                          task: bool = False) -> SessionRecord:
        """The record after the user approved a call of ``tool``: its ``kind`` (the tool with its
        switches, :func:`confirmation_kind`; the tool's name by default) confirmed until the next
        untrusted read, and with ``task`` the task's tools too (:data:`TASK_KIND`: an approval of
        a call that was held for its level alone, inside the scope); the tool inside the scope
        from now on when ``widen`` (a held drift); ``cleared`` values the user's own."""
        kind = kind or tool
        kinds = {kind, TASK_KIND} if task else {kind}
        confirmed = (*(c for c in self.confirmed if c[0] not in kinds), *((k, self.reads) for k in sorted(kinds)))[-MAX_CONFIRMED:]
        widened = (*self.widened, tool)[-MAX_SCOPE:] if widen and tool not in self.widened else self.widened
        cleared_ = tuple(dict.fromkeys((*self.cleared, *cleared)))[-MAX_CLEARED:]
        return replace(self, confirmed=confirmed, widened=widened, cleared=cleared_)

    # -- the stored form ------------------------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        """The number the next recorded value gets (values ever recorded: kept and forgotten)."""
        return self.forgotten + len(self.flows)

    def to_dict(self, *, flows: bool = True) -> dict[str, Any]:
        """The record as JSON; without ``flows`` (the state store keeps them a row each) it
        says how many values were ever recorded (``next_seq``)."""
        out = {"v": 1, "anchor": self.anchor, "anchor_from": self.anchor_from, "anchor_at": self.anchor_at,
               "scope": list(self.scope), "widened": list(self.widened), "forgotten": self.forgotten,
               "next_seq": self.next_seq, "confirmed": [list(c) for c in self.confirmed], "cleared": list(self.cleared),
               "task_attempts": self.task_attempts, "user_turns": list(self.user_turns), "reads": self.reads}
        if flows:
            out["flows"] = [flow_to_list(f) for f in self.flows]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], flows: Iterable[Any] | None = None) -> SessionRecord:
        """A stored record (``flows``: its values, when they are not in ``data``); one this
        code cannot read raises :class:`SessionError` (the call is refused: a record that
        cannot be read guards nothing)."""
        try:
            if data.get("v") != 1:
                raise ValueError(f"record version {data.get('v')!r}")
            return cls(anchor=data.get("anchor"), anchor_from=data.get("anchor_from"), anchor_at=data.get("anchor_at"),
                       scope=tuple(map(str, data.get("scope") or ()))[:MAX_SCOPE],
                       widened=tuple(map(str, data.get("widened") or ()))[:MAX_SCOPE],
                       flows=tuple(flow_from_list(f) for f in (data.get("flows") or () if flows is None else flows))
                       [-MAX_FLOW_VALUES:],
                       forgotten=int(data.get("forgotten") or 0),
                       confirmed=tuple((str(t), int(n)) for t, n in (data.get("confirmed") or ()))[-MAX_CONFIRMED:],
                       cleared=tuple(map(str, data.get("cleared") or ()))[-MAX_CLEARED:],
                       task_attempts=int(data.get("task_attempts") or 0),
                       user_turns=tuple(map(str, data.get("user_turns") or ()))[-MAX_USER_TURNS:],
                       reads=int(data.get("reads") or 0))
        except (TypeError, ValueError, AttributeError) as exc:
            raise SessionError(f"a session record this gateway cannot read ({exc})") from None


class SessionError(RiskrankError):
    """A session record that cannot be read or written: the call it guards is refused."""

    code = "session_unavailable"


class StoreSessionError(SessionError):
    """The session's record cannot be read or written because the state store cannot be
    reached: the call is refused for the store's sake (``state_unavailable``)."""


#: How many times a compare-and-swap write is retried before it fails.
CAS_TRIES = 8
#: A session record idle longer than this is removed from the state store (on a later write).
IDLE_S = 7 * 24 * 3600.0
#: How often (at most) a gateway removes idle records from the store.
PRUNE_EVERY_S = 3600.0


class SessionBook:
    """The gateway's session records: in this process's memory (the latest
    :data:`MAX_SESSIONS`), or in the state store (``store``: every replica reads and writes the
    same record by compare-and-swap; the flow values are rows of their own, so recording new
    ones adds rows, and a replica keeps what it read and re-reads only what changed).
    Blocking: the gateway calls it from a worker thread."""

    def __init__(self, store: Any = None) -> None:
        self.store = store
        #: memory mode: the records; with a store: what this replica last read or wrote, by version
        self._memory = OwnedTable(MAX_SESSIONS, session_owner)
        self._seen = OwnedTable(MAX_SESSIONS, session_owner)
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
            self._memory.put(key, new)
            return new
        from riskrank.serving.gateway.store import StoreError

        try:
            for _ in range(CAS_TRIES):
                got = self._read(key)
                old = got[1] if got is not None else SessionRecord()
                new = change(old)
                if new is old:
                    return old
                added = min(len(new.flows), new.next_seq - old.next_seq)
                fresh = new.flows[len(new.flows) - added:] if added > 0 else ()
                values = [(new.next_seq - added + i, flow_to_list(f)) for i, f in enumerate(fresh)]
                version = self.store.put_session(key, new.to_dict(flows=False), expect=None if got is None else got[0],
                                                 at=time.time(), values=values,
                                                 drop_below=new.forgotten if new.forgotten > old.forgotten else None)
                if version is not None:
                    self._seen.put(key, (version, new))
                    self._prune()
                    return new
        except StoreError as exc:
            raise StoreSessionError(f"the session record cannot be written ({exc})") from None
        raise SessionError(f"the session record of {key!r} kept changing under this write ({CAS_TRIES} tries)")

    def _read(self, key: str) -> tuple[int, SessionRecord] | None:
        """(version, record) from the store: what this replica holds when the version is the
        same, else what changed (the values numbered past what it holds), else all of it."""
        from riskrank.serving.gateway.store import StoreError

        try:
            version = self.store.session_version(key)
            seen = self._seen.get(key)
            if version is None:
                self._seen.pop(key, None)
                return None
            if seen is not None and seen[0] == version:
                return seen
            got = self.store.session(key, after=seen[1].next_seq - 1 if seen is not None else -1)
            record = _merged(got, seen) if got is not None else None
            if got is not None and record is None:  # what it held does not join what changed: all of it again
                got = self.store.session(key)
                record = _merged(got, None) if got is not None else None
        except StoreError as exc:
            raise StoreSessionError(f"the session record cannot be read ({exc})") from None
        if got is None or record is None:
            self._seen.pop(key, None)
            return None
        self._seen.put(key, (got[0], record))
        return got[0], record

    def _prune(self) -> None:
        now = time.time()
        if now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        from riskrank.serving.gateway.store import StoreError

        with contextlib.suppress(StoreError):  # housekeeping: the next write tries again in an hour
            self.store.prune_sessions(now - IDLE_S)


def session_owner(key: str) -> str:
    """Who a session key belongs to, for bounding what one caller may keep: a named client
    (``alice/...``) or a token (``token-<digest>[/conv-...]``) is its own; the sessions of
    callers with no identity of their own (the shared bearer token's MCP sessions, stdio)
    are one."""
    for marker in ("/http-", "/token-"):  # a named client's whole identity (an OAuth one, ISSUER#SUBJECT, holds '/')
        at = key.rfind(marker)
        if at > 0:
            return key[:at]
    return key.split("/", 1)[0] if key.startswith("token-") else ""


def _merged(got: tuple[int, Any, list[tuple[int, Any]]], seen: tuple[int, SessionRecord] | None) -> SessionRecord | None:
    """The record a store read gives, its values joined to those of ``seen`` (what this
    replica held); None when they do not join into the numbered run the record says it has."""
    _, data, values = got
    if not isinstance(data, dict):
        raise SessionError("a session record this gateway cannot read (not an object)")
    forgotten, end = int(data.get("forgotten") or 0), int(data.get("next_seq") or 0)
    have: dict[int, Any] = {}
    if seen is not None:
        have = {seen[1].forgotten + i: flow_to_list(f) for i, f in enumerate(seen[1].flows)}
    have.update(dict(values))
    run = [have.get(q) for q in range(forgotten, end)]
    if any(v is None for v in run):
        return None
    return SessionRecord.from_dict(data, run)
