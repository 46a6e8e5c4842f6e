"""What the console is shown by the process that serves it: the seam between the console and
the surface it runs inside.

The console imports no other surface (not the HTTP API, not the MCP server). The surface
that mounts it (``riskrank serve`` or ``riskrank mcp``) hands it a :class:`ConsoleHost`: a
few callables over its own catalogue, and, on a gateway, its operator broker and audit log.
So the console's search box runs the surface's own code, the code ``find_tools`` (or
``POST /v1/retrieve``) runs, never a copy of it.

Standard library only: a surface can build a host without the console's web packages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ConsoleHost:
    """The surface's side of the console.

    - ``kind``: what serves the console, in words (``gateway``, ``search server``, ``HTTP API``).
    - ``describe()``: a flat dict of what runs (mode, policy, source, tool count, generation), shown on every page.
    - ``tools()``: every tool, offered or not, as a dict with ``name``, ``description``,
      ``level``, ``provenance``, ``evidence`` (list of str), ``permissions`` (list),
      ``annotations``, ``upstream`` (or None), ``not_offered`` (a refusal code, or None),
      ``needs_confirmation``, and optionally ``original`` (the tool's own name at its server
      when it is offered under an alias) and ``withheld`` with ``why`` (a tool trust holds
      back: ``quarantined``, ``poisoned``, ``suspicious`` or ``withdrawn``; its ``level`` is None).
    - ``search(task, k)``: the surface's own retrieval for a task, in the shape of a
      ``find_tools`` result: ``tools`` (each with ``rank``, ``name``, ``risk_level``,
      ``risk_provenance``, ``score``, ``f_rel``, ``f_risk``, ``reasons``), ``withheld``
      (``name``, ``reasons``, ``redundant_with``), ``below_min_score``, ``mode``, ``fill``,
      ``min_score``. Raises :class:`riskrank.errors.RiskrankError` for a bad task or k.
      Blocking: the console calls it in a worker thread.
    - ``baseline(task, k)``: the relevance-only ranking of the same tools (no risk term, no
      rule filter), for the side-by-side view; None when the surface has none.
    - ``broker``: the :class:`~riskrank.serving.gateway.confirm.OperatorBroker` whose
      requests the approvals page answers (None: no approvals page).
    - ``audit_log``: the decision log the call-log page reads (None: no call-log page).
    - ``audit``: the writer of that log (:class:`~riskrank.serving.gateway.auditlog.AuditLog`):
      the console's own decisions (a pin approval) go there too. None: not recorded.
    """

    kind: str
    describe: Callable[[], dict[str, Any]]
    tools: Callable[[], list[dict[str, Any]]]
    search: Callable[[str, int], dict[str, Any]]
    baseline: Callable[[str, int], list[dict[str, Any]]] | None = None
    broker: Any = None
    audit_log: Path | None = None
    max_k: int = 100
    audit: Any = None


@dataclass(frozen=True)
class ConsoleOptions:
    """How the console is served: the admin token (None: loopback only, no token), the audit
    files it reviews (``labels``: the label file of ``riskrank audit``; ``review``: its review
    queue, by default beside it), and the call log's page size."""

    admin_token: str | None = None
    labels: Path | None = None
    review: Path | None = None
    page_size: int = 50
    state_dir: Path | None = None
    """The gateway's ``--state-dir`` (its pin store): the Changes page reads and approves there."""
    state_store: Any = None
    """The gateway's state store (``--state``), when it keeps its state there: the pins, the
    approvals and the call log are read from it (every replica's)."""
    pin_key: str | None = None
    """The gateway's ``--pin-key`` (None: the pin store's default key): the Changes page signs with it."""
    operators: dict[str, str] = field(default_factory=dict)
    """``--operators``: token digest -> operator name, for the JSON approvals API (bearer tokens)."""
