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
    lines.append(f"Call digest sha256 {call_digest(tool, arguments)[:16]}: the approval holds for exactly these arguments.")
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

    @property
    def digest(self) -> str:
        """The digest of the call this request is for (:func:`call_digest`)."""
        return call_digest(self.tool, self.arguments)

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

    @property
    def waiting_s(self) -> float:
        return max(0.0, (self.decided_at or time.time()) - self.asked_at)


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
                    **({"client": request.client} if request.client else {}),
                    decision="pending", code="awaiting_operator",
                    reason=f"waiting up to {self.timeout_s:g} s for an operator to approve or deny it at the console")
        try:
            with anyio.move_on_after(self.timeout_s):
                await item.event.wait()
        finally:
            # Decided, timed out, or the caller went away (cancelled): no longer pending.
            self.pending.pop(item.id, None)
        if item.answer is None:
            item.answer = Answer(TIMEOUT, note=f"no operator decided within {self.timeout_s:g} s")
            item.decided_at = time.time()
            self.recent.appendleft(item)
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
        return item

    def waiting(self) -> list[Pending]:
        """The pending requests, oldest first."""
        return sorted(self.pending.values(), key=lambda p: p.asked_at)

    def find_recent(self, request_id: str) -> Pending | None:
        return next((p for p in self.recent if p.id == request_id), None)


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
    that cannot be reached refuses the confirmation (fail closed): the call does not run."""

    store: Any
    timeout_s: float = 120.0
    audit: Any = None
    replica: str = "gateway"
    name: str = "console"

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"the confirmation timeout must be > 0 seconds, got {self.timeout_s}")
        self.pending = _StorePending(self.store)

    @property
    def recent(self) -> list[Pending]:
        return [_pending_of(r) for r in self.store.decided(RECENT)]

    async def confirm(self, request: ConfirmationRequest, call: Any) -> Answer:
        import anyio
        import anyio.to_thread

        from riskrank.serving.gateway.store import StoreError

        now = time.time()
        rid = secrets.token_urlsafe(9)
        try:
            await anyio.to_thread.run_sync(lambda: self.store.put_pending(
                rid, request_to_dict(request), replica=self.replica, client=request.client, asked_at=now,
                deadline=now + self.timeout_s))
        except StoreError as exc:
            return Answer(UNSUPPORTED, note=f"the state store cannot hold the request ({exc})")
        if self.audit is not None:
            with contextlib.suppress(RiskrankError):
                await self.audit.append(
                    task=request.task, tool=request.tool, level=request.level, provenance=request.provenance,
                    session=request.session, arguments=request.arguments, upstream=request.upstream, request=rid,
                    **({"client": request.client} if request.client else {}), replica=self.replica,
                    decision="pending", code="awaiting_operator",
                    reason=f"waiting up to {self.timeout_s:g} s for an operator to approve or deny it at a console")
        deadline = now + self.timeout_s
        decided = False
        try:
            while True:
                try:
                    row = await anyio.to_thread.run_sync(self.store.approval, rid)
                except StoreError:
                    row = None  # the store is away for now: keep waiting until the deadline
                if row is not None and row["status"] != "pending":
                    decided = True
                    return Answer(row["status"], by=row.get("by"), note=row.get("note"))
                if time.time() >= deadline:
                    break
                await anyio.sleep(min(POLL_S, max(0.0, deadline - time.time())))
        finally:
            # Timed out, or the caller went away: close the request unless someone decided it.
            if not decided:
                with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                    await anyio.to_thread.run_sync(lambda: self.store.decide(
                        rid, TIMEOUT, by=None, note=f"no operator decided within {self.timeout_s:g} s", at=time.time()))
        try:
            row = await anyio.to_thread.run_sync(self.store.approval, rid)
        except StoreError as exc:
            return Answer(TIMEOUT, note=f"the state store could not be read ({exc})")
        if row is not None and row["status"] not in ("pending", TIMEOUT):
            return Answer(row["status"], by=row.get("by"), note=row.get("note"))  # decided at the last moment
        return Answer(TIMEOUT, note=f"no operator decided within {self.timeout_s:g} s")

    def decide(self, request_id: str, approve: bool, by: str, note: str | None = None) -> Pending | None:
        """Decide a pending request held at any replica (committed before this returns); None
        when it is no longer pending."""
        if not self.store.decide(request_id, ACCEPT if approve else DECLINE, by=by, note=note or None, at=time.time()):
            return None
        row = self.store.approval(request_id)
        return _pending_of(row) if row is not None else None

    def waiting(self) -> list[Pending]:
        """Every replica's pending requests, oldest first."""
        return [_pending_of(r) for r in self.store.pending()]

    def find_recent(self, request_id: str) -> Pending | None:
        row = self.store.approval(request_id)
        return _pending_of(row) if row is not None and row["status"] != "pending" else None
