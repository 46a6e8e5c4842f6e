"""The gateway's Prometheus metrics, fed by the audit log's own records.

Every decision the gateway takes is an audit record (:mod:`.auditlog`); :class:`GatewayMetrics`
watches the log and counts each record it writes, so ``riskrank_gateway_decisions_total``
equals the audit log's counts by construction (a record that cannot be written is counted by
``riskrank_gateway_audit_failures_total`` instead: the call it recorded was refused). Beside
them: the latency of ``find_tools`` and of calls (the chain, the confirmation and the upstream),
the upstream call alone, the confirmations pending and their wait, and, read at each scrape,
the upstreams up or down with their restarts and the tools trust withholds.

Labels stay bounded: ``client`` is a name of the clients file (another caller, an OAuth
subject say, is ``other``; none is ``""``), ``upstream`` a server of the configuration
(``other`` otherwise), ``decision`` and ``code`` the audit log's fixed vocabulary (the refusal
codes of :mod:`.policy` and the guards; a code outside :data:`MAX_CODES` distinct ones is
``other``). No tool name is a label: a catalogue of thousands would be thousands of series.

``prometheus_client`` is optional (the ``ops`` extra): :func:`make_metrics` says what to install.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from riskrank.extras import requires

#: Latency buckets (seconds) for find_tools, calls and the upstream: 1 ms to 2 min.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: At most this many distinct ``code`` values per ``decision`` (the vocabulary is fixed; a bug
#: that puts free text there must not grow the series without end).
MAX_CODES = 64
#: What a confirmation's answer may be labelled with (:mod:`.confirm`'s actions).
ANSWERS = ("accept", "decline", "cancel", "timeout", "unsupported", "caller_gone", "replica_gone")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class GatewayMetrics:
    """The metrics of one gateway process, in a registry of their own (two gateways in one
    process, as in the tests, never share a series).

    ``clients``: the clients file's names (the ``client`` label's values); ``upstreams``: the
    configured servers' names. ``manager`` and ``view`` (callables) are read at each scrape."""

    def __init__(self, clients: Iterable[str] = (), upstreams: Iterable[str] = (),
                 manager: Callable[[], Any] | None = None, view: Callable[[], Any] | None = None) -> None:
        with requires("ops", "the gateway's /metrics"):
            import prometheus_client as prom
        self._prom = prom
        self.clients = frozenset(clients)
        self.upstreams = frozenset(upstreams)
        self._codes: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.registry = prom.CollectorRegistry(auto_describe=True)
        r = self.registry
        self.decisions = prom.Counter("riskrank_gateway_decisions", "Audit records written, by decision and code",
                                      ["decision", "code", "client", "upstream"], registry=r)
        self.audit_failures = prom.Counter("riskrank_gateway_audit_failures",
                                           "Audit records that could not be written (the call they record was refused)",
                                           ["where"], registry=r)
        self.find_seconds = prom.Histogram("riskrank_gateway_find_tools_seconds", "find_tools latency", ["client"],
                                           buckets=BUCKETS, registry=r)
        self.call_seconds = prom.Histogram("riskrank_gateway_call_seconds",
                                           "call_tool latency: the guards, a confirmation and the upstream",
                                           ["client", "outcome"], buckets=BUCKETS, registry=r)
        self.upstream_seconds = prom.Histogram("riskrank_gateway_upstream_call_seconds", "The upstream's own call latency",
                                               ["upstream"], buckets=BUCKETS, registry=r)
        self.pending = prom.Gauge("riskrank_gateway_confirmations_pending", "Calls waiting for a confirmation", registry=r)
        self.confirm_wait = prom.Histogram("riskrank_gateway_confirmation_wait_seconds", "Time a held call waited for its answer",
                                           ["answer"], buckets=BUCKETS, registry=r)
        if manager is not None or view is not None:
            r.register(_StateCollector(prom, manager, view, self.upstream))

    # -- the labels --------------------------------------------------------------------------------
    def client(self, name: Any) -> str:
        if not name:
            return ""
        return name if name in self.clients else "other"

    def upstream(self, name: Any) -> str:
        if not name:
            return ""
        return name if name in self.upstreams else "other"

    def _code(self, decision: str, code: Any) -> str:
        code = "" if code is None else str(code)
        seen = self._codes.setdefault(decision, set())
        if code in seen:
            return code
        with self._lock:
            if len(seen) >= MAX_CODES:
                return "other"
            seen.add(code)
        return code

    # -- fed by the audit log ----------------------------------------------------------------------
    def recorded(self, rec: dict[str, Any]) -> None:
        """One audit record written (:class:`~.auditlog.AuditLog`'s watcher)."""
        decision = str(rec.get("decision") or "")
        self.decisions.labels(decision, self._code(decision, rec.get("code")), self.client(rec.get("client")),
                              self.upstream(rec.get("upstream"))).inc()

    def failed(self, where: str) -> None:
        """An audit record that could not be written (``file`` or ``state``)."""
        self.audit_failures.labels(where).inc()

    # -- fed by the gateway ------------------------------------------------------------------------
    def found(self, client: Any, seconds: float) -> None:
        self.find_seconds.labels(self.client(client)).observe(seconds)

    def called(self, client: Any, outcome: str, seconds: float) -> None:
        self.call_seconds.labels(self.client(client), outcome).observe(seconds)

    def upstream_call(self, upstream: Any, seconds: float) -> None:
        self.upstream_seconds.labels(self.upstream(upstream)).observe(seconds)

    def confirmation(self, answer: str, seconds: float) -> None:
        self.confirm_wait.labels(answer if answer in ANSWERS else "other").observe(seconds)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return self._prom.generate_latest(self.registry)


class _StateCollector:
    """What is read at scrape time: each upstream up (1) or not, its restarts, and the tools
    trust withholds by why (``quarantined``, ``poisoned``, ``suspicious``, ``withdrawn``)."""

    def __init__(self, prom: Any, manager: Callable[[], Any] | None, view: Callable[[], Any] | None,
                 label: Callable[[Any], str]) -> None:
        self.prom, self.manager, self.view, self.label = prom, manager, view, label

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        manager = self.manager() if self.manager is not None else None
        if manager is not None:
            up = GaugeMetricFamily("riskrank_gateway_upstream_up", "1 when the upstream server is up", labels=["upstream"])
            restarts = CounterMetricFamily("riskrank_gateway_upstream_restarts", "Restarts of the upstream server",
                                           labels=["upstream"])
            for name, u in manager.upstreams.items():
                up.add_metric([self.label(name)], 1.0 if u.state == "up" else 0.0)
                restarts.add_metric([self.label(name)], float(u.restarts))
            yield up
            yield restarts
        view = self.view() if self.view is not None else None
        if view is not None:
            held = GaugeMetricFamily("riskrank_gateway_tools_withheld", "Tools neither offered nor callable, by why",
                                     labels=["why"])
            counts: dict[str, int] = {}
            for row in view.withheld_tools.values():
                why = str(row.get("withheld") or "withdrawn")
                counts[why] = counts.get(why, 0) + 1
            for why in ("quarantined", "poisoned", "suspicious", "withdrawn"):
                held.add_metric([why], float(counts.pop(why, 0)))
            if counts:
                held.add_metric(["other"], float(sum(counts.values())))
            yield held


def make_metrics(gateway: Any, clients: Iterable[str] = ()) -> GatewayMetrics:
    """The metrics of ``gateway``: its audit log feeds the decision counters; its upstreams and
    its view are read at each scrape."""
    manager = gateway.manager
    metrics = GatewayMetrics(clients=clients, upstreams=list(manager.upstreams) if manager is not None else (),
                             manager=(lambda: gateway.manager) if manager is not None else None,
                             view=lambda: gateway.view)
    gateway.metrics = metrics
    gateway.audit.watchers.append(metrics)
    return metrics
