"""Who confirms a call at or above the policy's ``confirm_level``: a confirmation broker.

The gateway hands a :class:`ConfirmationRequest` to its broker and waits for an
:class:`Answer`: ``accept`` (the call runs), ``decline`` or ``cancel`` (refused as
``denied``), ``unsupported`` (nobody can be asked: refused as ``confirmation_required``, with
a message that says how to allow it) or ``timeout`` (nobody answered in time: refused as
``confirmation_required`` too). Two brokers implement the one method:

- :class:`ElicitationBroker` asks the MCP client's user through elicitation, which the
  client must declare. It is answered by the *client*: a headless harness that accepts
  everything makes it no human check.
- :class:`OperatorBroker` keeps the request pending until an operator approves or denies it
  (the console's approvals page), or until its timeout; the answer names who decided. The
  agent's call waits meanwhile. Where a person must decide, use this one.

Standard library and anyio only (no MCP SDK, no web framework): the console reads the
pending requests and calls :meth:`OperatorBroker.decide`; the broker knows nothing of pages.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from riskrank.errors import RiskrankError

ACCEPT, DECLINE, CANCEL, UNSUPPORTED, TIMEOUT = "accept", "decline", "cancel", "unsupported", "timeout"
#: The caller left while its call was held (its connection or stdin closed): withdrawn, never run.
CALLER_GONE = "caller_gone"
#: The replica holding the call stopped beating in the state store (or restarted): withdrawn.
REPLICA_GONE = "replica_gone"
#: The state store could not take the request: refused as ``state_unavailable``.
UNAVAILABLE = "state_unavailable"
#: How long a replica's heartbeat may be silent before its held calls are "replica gone".
REPLICA_LAPSE_S = 15.0
#: How many decided requests the broker remembers (the console's "recently decided").
RECENT = 50
#: A value longer than this (as JSON) is shown by its head, its tail, its length and its
#: digest; the rest of it is on the console's approvals page.
SHOWN_CHARS = 160
#: More arguments than this cannot be shown for a confirmation: such a call is refused.
MAX_SHOWN_ARGUMENTS = 40


class UnshowableCall(RiskrankError):
    """A call whose arguments are too many to put in front of the person who confirms it."""

    code = "confirmation_required"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def call_digest(tool: str, arguments: dict[str, Any]) -> str:
    """The sha256 of exactly this call (tool name and arguments, canonical JSON): what an
    approval is bound to, and what the call that runs must still hash to."""
    return hashlib.sha256(_json([tool, arguments]).encode()).hexdigest()


def shown_value(value: Any) -> str:
    """One argument's value as the person who confirms reads it: in full when short; else its
    head and tail with its length and digest, so nothing is hidden without saying so."""
    text = _json(value)
    if len(text) <= SHOWN_CHARS:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return (f"{text[:SHOWN_CHARS - 40]} … {text[-40:]} [{len(text):,} characters, sha256 {digest}…; "
            "the whole value is shown beside this question]")


def confirmation_text(tool: str, level: int, provenance: str | None, task: str | None, arguments: dict[str, Any],
                      reasons: Sequence[str] = ()) -> str:
    """The question put to whoever confirms a call: why it is asked beyond its level
    (``reasons``, one line each: the session guard's), every argument on a line of its own
    (long ones by head, tail, length and digest: see :func:`shown_value`), and the call's
    digest. A call with more than :data:`MAX_SHOWN_ARGUMENTS` arguments raises
    :class:`UnshowableCall` instead of being shown in part."""
    if len(arguments) > MAX_SHOWN_ARGUMENTS:
        raise UnshowableCall(f"{tool!r} was called with {len(arguments):,} arguments; at most {MAX_SHOWN_ARGUMENTS} can be "
                             "shown to whoever confirms a call, so it is refused rather than approved unseen")
    lines = [f"The agent wants to call {tool} (risk level {level}, {provenance or 'unlabelled'})"
             + (f" for the task {shown_value(task)}" if task else "") + "."]
    lines += list(reasons)
    lines.append(f"Arguments ({len(arguments)}):" if arguments else "No arguments.")
    lines += [f"  {shown_value(k) if len(k) > 60 else k} = {shown_value(v)}" for k, v in sorted(arguments.items())]
    lines.append(f"Call digest sha256 {call_digest(tool, arguments)[:16]}: this approval runs this call, with exactly these arguments.")
    lines.append("Allow this call?")
    return "\n".join(lines)


@dataclass(frozen=True)
class ConfirmationRequest:
    """What is to be confirmed: who asks (``session``), for which task, which tool at which
    level (with its provenance and the evidence for it), with which arguments; ``bind``
    identifies exactly this call (session, tool and an arguments digest), so an answer
    cannot be reused for another."""

    session: str
    task: str | None
    tool: str
    level: int
    arguments: dict[str, Any]
    message: str
    bind: str
    provenance: str | None = None
    evidence: tuple[str, ...] = ()
    upstream: str | None = None
    client: str | None = None
    """The client's name (the clients file or its OAuth token), when the caller has one."""
    policy: str | None = None
    """The named policy the call is judged under (with ``client``, on every line about it)."""

    def who(self) -> dict[str, Any]:
        """The caller's name and policy as audit fields (none for an unnamed caller)."""
        return {k: v for k, v in (("client", self.client), ("policy", self.policy)) if v}

    @property
    def digest(self) -> str:
        """The digest of the call this request is for (:func:`call_digest`)."""
        return call_digest(self.tool, self.arguments)

    def reasons(self) -> list[str]:
        """Why the call is held beyond its level, as the question says it (:func:`confirmation_text`:
        the lines between its first and its arguments): the session's task beside the agent's
        words, a drift from it, a value an untrusted result brought, an untrusted server. Empty:
        held for its level alone."""
        out = []
        for line in self.message.split("\n")[1:]:
            if line.startswith("Arguments (") or line == "No arguments.":
                break
            out.append(line)
        return out

    def shown_arguments(self) -> list[tuple[str, str, int]]:
        """Each argument as (name, full value as JSON, its length): the console shows all of it."""
        return [(k, json.dumps(v, indent=2, ensure_ascii=False, sort_keys=True, default=str), len(_json(v)))
                for k, v in sorted(self.arguments.items())]


@dataclass(frozen=True)
class Answer:
    """A broker's answer: the ``action``, and who decided (``by``; None when unknown, as for
    an elicitation the client answered) with their ``note``."""

    action: str
    by: str | None = None
    note: str | None = None


class ConfirmationBroker(Protocol):
    """Answers :class:`ConfirmationRequest`\\ s (``name`` goes into the audit log)."""

    name: str

    async def confirm(self, request: ConfirmationRequest, call: Any) -> Answer:
        """The answer for ``request``; ``call`` is the MCP call (a
        :class:`riskrank.serving.mcp_compat.CallCtx`)."""
        ...


class ElicitationBroker:
    """Asks the MCP client's user (form elicitation: one ``approve`` checkbox)."""

    name = "elicitation"

    async def confirm(self, request: ConfirmationRequest, call: Any) -> Answer:
        # The whole arguments travel as a read-only field of the form, one field away.
        return Answer(await call.confirm(request.message, request.bind,
                                         details=json.dumps(request.arguments, indent=2, ensure_ascii=False, sort_keys=True)))


@dataclass
class Pending:
    """One request waiting for an operator: ``id`` names it in the console's forms."""

    id: str
    request: ConfirmationRequest
    asked_at: float
    deadline: float
    event: Any
    answer: Answer | None = None
    decided_at: float | None = None
    replica: str | None = None
    """The replica whose agent's call waits (a shared state store; None: this process)."""
    gone: str | None = None
    """Why it can no longer be approved though still listed (its replica stopped beating)."""

    @property
    def waiting_s(self) -> float:
        return max(0.0, (self.decided_at or time.time()) - self.asked_at)


def _link(call: Any) -> Any:
    """The caller's link (:class:`riskrank.serving.mcp_compat.CallerLink`), if anything watches it."""
    return getattr(call, "link", None)


async def _first(events: Sequence[Any], timeout: float) -> None:
    """Wait until one of ``events`` is set, or ``timeout`` seconds."""
    import anyio

    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tg:
            async def wait(event: Any) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(wait, event)


def _tell(notifier: Any, kind: str, item: Pending) -> None:
    """Queue a webhook event (:mod:`.notify`) for ``item``; never waits, never fails the call."""
    if notifier is not None:
        from riskrank.serving.gateway.notify import event_of

        notifier.notify(event_of(kind, item))


def refusal_text(item: Pending) -> str:
    """Why a request can no longer be decided (the console's 409): its caller left, its
    replica is gone, or someone (or the timeout) decided it first."""
    answer = item.answer
    if answer is None:
        return item.gone or "that request is still pending"
    if answer.action in (CALLER_GONE, REPLICA_GONE):
        return f"{answer.action.replace('_', ' ')}: nothing was run and nothing can be: {answer.note}"
    if answer.action == TIMEOUT:
        return f"that request timed out ({answer.note})"
    return f"that request was already decided ({answer.action} by {answer.by or 'nobody'})"


@dataclass
class OperatorBroker:
    """Confirmation by an operator: each request waits (the agent's call with it) until
    :meth:`decide` answers it or ``timeout_s`` passes.

    Everything runs on the event loop that serves the gateway and the console, so the
    pending table needs no lock; :meth:`decide` must be called from that loop. With an
    ``audit`` log (:class:`~riskrank.serving.gateway.auditlog.AuditLog`) each request's
    arrival is a ``pending`` line; the gateway logs the decision, with who took it."""

    timeout_s: float = 120.0
    audit: Any = None
    name: str = "console"
    pending: dict[str, Pending] = field(default_factory=dict)
    notifier: Any = None
    """Webhooks (:class:`~riskrank.serving.gateway.notify.Notifier`): each hold and decision."""
    recent: collections.deque[Pending] = field(default_factory=lambda: collections.deque(maxlen=RECENT))

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"the confirmation timeout must be > 0 seconds, got {self.timeout_s}")

    async def confirm(self, request: ConfirmationRequest, call: Any) -> Answer:
        import anyio

        now = time.time()
        item = Pending(secrets.token_urlsafe(9), request, now, now + self.timeout_s, anyio.Event())
        self.pending[item.id] = item
        if self.audit is not None:
            with contextlib.suppress(RiskrankError):  # the decision itself is logged, or the call refused
                await self.audit.append(
                    task=request.task, tool=request.tool, level=request.level, provenance=request.provenance,
                    session=request.session, arguments=request.arguments, upstream=request.upstream, request=item.id,
                    **request.who(), decision="pending", code="awaiting_operator", held_because=request.reasons(),
                    reason=f"waiting up to {self.timeout_s:g} s for an operator to approve or deny it at the console")
        link = _link(call)
        _tell(self.notifier, "hold", item)
        try:
            await _first([item.event] + ([link.event] if link is not None else []), self.timeout_s)
        finally:
            # Decided, timed out, or the caller went away (cancelled): no longer pending.
            self.pending.pop(item.id, None)
            if item.answer is None and link is not None and link.gone:
                item.answer = Answer(CALLER_GONE, note=link.describe())
                item.decided_at = link.left_at
                self.recent.appendleft(item)
                _tell(self.notifier, "withdrawn", item)
            elif item.answer is None and time.time() < item.deadline:  # the request itself was cancelled
                item.answer = Answer(CALLER_GONE, note=CANCELLED_WHILE_HELD)
                item.decided_at = time.time()
                self.recent.appendleft(item)
                _tell(self.notifier, "withdrawn", item)
        if link is not None and link.gone:
            return Answer(CALLER_GONE, note=link.describe())  # nothing runs for a caller who left, approved or not
        if item.answer is None:
            item.answer = Answer(TIMEOUT, note=f"no operator decided within {self.timeout_s:g} s")
            item.decided_at = time.time()
            self.recent.appendleft(item)
            _tell(self.notifier, "withdrawn", item)
        return item.answer

    def decide(self, request_id: str, approve: bool, by: str, note: str | None = None) -> Pending | None:
        """Answer a pending request (``approve``: accept, else decline) on behalf of ``by``;
        None when it is no longer pending (decided, timed out, or its caller went away)."""
        item = self.pending.pop(request_id, None)
        if item is None or item.answer is not None:
            return None
        item.answer = Answer(ACCEPT if approve else DECLINE, by=by, note=note or None)
        item.decided_at = time.time()
        self.recent.appendleft(item)
        item.event.set()
        _tell(self.notifier, "decided", item)
        return item

    def waiting(self) -> list[Pending]:
        """The pending requests, oldest first."""
        return sorted(self.pending.values(), key=lambda p: p.asked_at)

    def find_recent(self, request_id: str) -> Pending | None:
        return next((p for p in self.recent if p.id == request_id), None)

    def why_not(self, request_id: str) -> str | None:
        """Why ``request_id`` cannot be decided; None when no request has that id."""
        item = self.pending.get(request_id) or self.find_recent(request_id)
        return None if item is None else refusal_text(item)


#: Why a held request closed before anyone decided it, when its caller is still connected: the
#: request itself was cancelled (the client's own timeout or cancel, or the gateway stopping).
CANCELLED_WHILE_HELD = "its request was cancelled while it waited (by the agent, or the gateway stopping)"

#: How often a call held for an operator looks for a decision taken at another replica: the
#: bound on how long after an approval (at any replica's console) the call runs.
POLL_S = 0.2


def request_to_dict(request: ConfirmationRequest) -> dict[str, Any]:
    """A request as the state store keeps it (JSON): every field, evidence as a list."""
    return {**{f: getattr(request, f) for f in ConfirmationRequest.__dataclass_fields__}, "evidence": list(request.evidence)}


def request_from_dict(data: dict[str, Any]) -> ConfirmationRequest:
    known = {k: v for k, v in data.items() if k in ConfirmationRequest.__dataclass_fields__}
    return ConfirmationRequest(**{**known, "evidence": tuple(known.get("evidence") or ())})


def _pending_of(row: dict[str, Any]) -> Pending:
    status = row["status"]
    answer = None if status == "pending" else Answer(status, by=row.get("by"), note=row.get("note"))
    return Pending(row["id"], request_from_dict(row["request"]), row["asked_at"], row["deadline"], None, answer,
                   row.get("decided_at"), row.get("replica"))


class _StorePending:
    """``broker.pending`` of a :class:`StoreBroker`: the store's pending requests by id (what
    the console looks an id up in), whichever replica holds the call."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, request_id: str, default: Any = None) -> Pending | None:
        row = self.store.approval(request_id) if request_id else None
        return _pending_of(row) if row is not None and row["status"] == "pending" else default

    def __len__(self) -> int:
        return len(self.store.pending())


@dataclass
class StoreBroker:
    """:class:`OperatorBroker` over the gateway's state store, for replicas on one database:
    a request is committed as pending before the call waits; any replica's console lists it
    and decides it (an atomic update, so two operators cannot both decide it); the call held
    here sees the decision within :data:`POLL_S` and runs only if it was ``accept``. A store
    that cannot be reached refuses the confirmation (fail closed): the call does not run.

    A hold belongs to a live caller on a live replica: when the caller leaves, the request is
    closed at once as ``caller_gone``; each replica beats in the store (:meth:`beat`), a
    request of a replica silent for ``lapse_s`` by the store's clock cannot be approved and is
    withdrawn as ``replica_gone``, and a replica restarted under the same name withdraws its
    predecessor's requests when it starts."""

    store: Any
    timeout_s: float = 120.0
    audit: Any = None
    replica: str = "gateway"
    name: str = "console"
    lapse_s: float = REPLICA_LAPSE_S
    instance: str = field(default_factory=lambda: secrets.token_hex(8))
    started: bool = False
    notifier: Any = None
    """Webhooks (:class:`~riskrank.serving.gateway.notify.Notifier`): each hold and decision."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"the confirmation timeout must be > 0 seconds, got {self.timeout_s}")
        if not self.lapse_s > 0:
            raise ValueError(f"the replica heartbeat window must be > 0 seconds, got {self.lapse_s}")
        self.pending = _StorePending(self.store)

    @property
    def recent(self) -> list[Pending]:
        return [_pending_of(r) for r in self.store.decided(RECENT)]

    async def _withdrawn(self, rows: list[dict[str, Any]]) -> None:
        """One ``refused`` audit line per request withdrawn because its replica is gone."""
        for row in rows:
            _tell(self.notifier, "withdrawn", _pending_of(row))
        if self.audit is None:
            return
        for row in rows:
            req = request_from_dict(row["request"])
            with contextlib.suppress(RiskrankError):
                await self.audit.append(
                    task=req.task, tool=req.tool, level=req.level, provenance=req.provenance, session=req.session,
                    arguments=req.arguments, upstream=req.upstream, request=row["id"], **req.who(), replica=self.replica,
                    held_at=row["replica"], decision="refused", code=REPLICA_GONE, reason=row["note"])

    async def start(self) -> None:
        """Register this replica; a predecessor's requests under the same name are withdrawn."""
        import anyio.to_thread

        rows = await anyio.to_thread.run_sync(self.store.start_replica, self.replica, self.instance)
        self.started = True
        await self._withdrawn(rows)

    async def beat(self, log: Any = None) -> None:
        """Beat every ``lapse_s / 5`` seconds and withdraw the requests of replicas whose
        heartbeat lapsed (whichever replica sweeps first writes their lines); runs until cancelled."""
        import anyio
        import anyio.to_thread

        from riskrank.serving.gateway.store import StoreError

        taken_over = False
        beating_since: float | None = None
        while True:
            try:
                mine = await anyio.to_thread.run_sync(self.store.heartbeat, self.replica, self.instance)
                if not mine and not taken_over and log is not None:
                    log(f"state: another process started as replica {self.replica!r}; this one's held calls are withdrawn")
                taken_over = not mine
                beating_since = time.monotonic() if beating_since is None else beating_since
                # Sweep only after beating for a whole window: when the store comes back from an
                # outage every replica's heartbeat is old, and each must have had time to beat again.
                if time.monotonic() - beating_since >= self.lapse_s:
                    await self._withdrawn(await anyio.to_thread.run_sync(self.store.sweep_lapsed, self.lapse_s))
            except StoreError:
                beating_since = None  # the store is away: calls are refused meanwhile; beat again when it is back
            await anyio.sleep(self.lapse_s / 5)

    async def confirm(self, request: ConfirmationRequest, call: Any) -> Answer:
        import anyio
        import anyio.to_thread

        from riskrank.serving.gateway.store import StoreError

        link = _link(call)
        try:
            if not self.started:
                await self.start()
            now = time.time()
            rid = secrets.token_urlsafe(9)
            await anyio.to_thread.run_sync(lambda: self.store.put_pending(
                rid, request_to_dict(request), replica=self.replica, client=request.client, asked_at=now,
                deadline=now + self.timeout_s))
        except StoreError as exc:
            return Answer(UNAVAILABLE, note=str(exc))
        _tell(self.notifier, "hold", Pending(rid, request, now, now + self.timeout_s, None, replica=self.replica))
        if self.audit is not None:
            with contextlib.suppress(RiskrankError):
                await self.audit.append(
                    task=request.task, tool=request.tool, level=request.level, provenance=request.provenance,
                    session=request.session, arguments=request.arguments, upstream=request.upstream, request=rid,
                    **request.who(), replica=self.replica, decision="pending", code="awaiting_operator",
                    held_because=request.reasons(),
                    reason=f"waiting up to {self.timeout_s:g} s for an operator to approve or deny it at a console")
        deadline = now + self.timeout_s
        decided = False

        def close(action: str, note: str) -> bool:
            return bool(self.store.decide(rid, action, by=None, note=note, at=time.time()))

        try:
            while True:
                if link is not None and link.gone:
                    break
                try:
                    row = await anyio.to_thread.run_sync(self.store.approval, rid)
                except StoreError:
                    row = None  # the store is away for now: keep waiting until the deadline
                if row is not None and row["status"] != "pending":
                    decided = True
                    if link is not None and link.gone:
                        break
                    return Answer(row["status"], by=row.get("by"), note=row.get("note"))
                if time.time() >= deadline:
                    break
                wait = min(POLL_S, max(0.0, deadline - time.time()))
                await (_first([link.event], wait) if link is not None else anyio.sleep(wait))
        finally:
            # Timed out, or the caller went away: close the request unless someone decided it.
            if not decided:
                gone = link is not None and link.gone
                action, note = ((CALLER_GONE, link.describe()) if gone
                                else (TIMEOUT, f"no operator decided within {self.timeout_s:g} s") if time.time() >= deadline
                                else (CALLER_GONE, CANCELLED_WHILE_HELD))
                with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                    if await anyio.to_thread.run_sync(close, action, note):
                        _tell(self.notifier, "withdrawn", Pending(rid, request, now, deadline, None, Answer(action, note=note),
                                                                  time.time(), self.replica))
        if link is not None and link.gone:
            return Answer(CALLER_GONE, note=link.describe())  # nothing runs for a caller who left, approved or not
        try:
            row = await anyio.to_thread.run_sync(self.store.approval, rid)
        except StoreError as exc:
            return Answer(TIMEOUT, note=f"the state store could not be read ({exc})")
        if row is not None and row["status"] not in ("pending", TIMEOUT):
            return Answer(row["status"], by=row.get("by"), note=row.get("note"))  # decided at the last moment
        return Answer(TIMEOUT, note=f"no operator decided within {self.timeout_s:g} s")

    def decide(self, request_id: str, approve: bool, by: str, note: str | None = None) -> Pending | None:
        """Decide a pending request held at a live replica (committed before this returns);
        None when it is no longer pending or its replica's heartbeat lapsed (:meth:`why_not`)."""
        if not self.store.decide_live(request_id, by=by, note=note or None, action=ACCEPT if approve else DECLINE,
                                      lapse_s=self.lapse_s):
            return None
        row = self.store.approval(request_id)
        item = _pending_of(row) if row is not None else None
        if item is not None:
            _tell(self.notifier, "decided", item)
        return item

    def why_not(self, request_id: str) -> str | None:
        """Why ``request_id`` cannot be decided; None when no request has that id."""
        row = self.store.approval(request_id)
        if row is None:
            return None
        item = _pending_of(row)
        if item.answer is None:
            item.gone = self._gone(item.replica, self.store.replicas())
        return refusal_text(item)

    def _gone(self, replica: str | None, ages: dict[str, float]) -> str | None:
        age = ages.get(replica or "")
        if age is not None and age <= self.lapse_s:
            return None
        last = "it never beat" if age is None else f"its last heartbeat was {age:.0f} s ago by the store's clock"
        return f"replica gone: {replica} stopped answering ({last}); nothing can run there"

    def waiting(self) -> list[Pending]:
        """Every replica's pending requests, oldest first; those of a replica whose heartbeat
        lapsed say so (``gone``) and cannot be approved."""
        items = [_pending_of(r) for r in self.store.pending()]
        if items:
            ages = self.store.replicas()
            for item in items:
                item.gone = self._gone(item.replica, ages)
        return items

    def find_recent(self, request_id: str) -> Pending | None:
        row = self.store.approval(request_id)
        return _pending_of(row) if row is not None and row["status"] != "pending" else None
