"""The gateway's OpenTelemetry spans: one trace per ``find_tools`` and per ``call_tool``.

A ``find_tools`` span has a ``ranking`` child; a ``call_tool`` span has one child per guard of
the chain (``guard.<name>``, with its verdict), the ``confirmation`` wait when a guard held the
call, and the ``upstream`` call. Attributes: ``riskrank.decision``, ``riskrank.code``,
``riskrank.level``, ``riskrank.client``, ``riskrank.tool`` (and the upstream). Arguments and
results never go into a span: only their sizes and SHA-256 digests
(``riskrank.arguments.bytes``, ``riskrank.arguments.sha256``, ``riskrank.result.bytes``).

The caller's ``traceparent`` (the W3C header, or ``_meta`` over any transport) makes the span a
child of the agent framework's own; a malformed one is ignored (a new trace starts), never an
error for the agent. Spans go to the process's tracer provider: without
``opentelemetry-api`` every function here is a no-op, and with the API but no SDK (or no
provider configured) OpenTelemetry's own no-op tracer runs. The operator configures the SDK
and its exporter (OTLP, say) as for any Python service.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

#: W3C trace context, version 00: ``00-<32 hex trace id>-<16 hex span id>-<2 hex flags>``.
TRACEPARENT_RE = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
TRACER_NAME = "riskrank.gateway"

try:
    from opentelemetry import trace as _trace
except ImportError:  # the ops extra is not installed: no spans
    _trace = None  # type: ignore[assignment]


class _NoSpan:
    """What a span is without OpenTelemetry: attributes go nowhere."""

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()


def parent_context(traceparent: str | None) -> Any:
    """The OpenTelemetry context a well-formed ``traceparent`` names; None (a new trace) for a
    missing or malformed one, or an all-zero id (the standard's invalid ids)."""
    if _trace is None or not traceparent:
        return None
    m = TRACEPARENT_RE.fullmatch(traceparent.strip().lower())
    if m is None or set(m.group(1)) == {"0"} or set(m.group(2)) == {"0"}:
        return None
    sc = _trace.SpanContext(trace_id=int(m.group(1), 16), span_id=int(m.group(2), 16), is_remote=True,
                            trace_flags=_trace.TraceFlags(int(m.group(3), 16) & 1))
    return _trace.set_span_in_context(_trace.NonRecordingSpan(sc))


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


def root(name: str, traceparent: str | None = None, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """The span of one ``find_tools`` or ``call_tool``: a new trace, or the caller's continued.
    Never a child of whatever span happens to be current in the server (one trace per request)."""
    if _trace is None:
        return contextlib.nullcontext(NO_SPAN)
    ctx = parent_context(traceparent)
    if ctx is None:
        from opentelemetry.context import Context

        ctx = Context()
    tracer = _trace.get_tracer(TRACER_NAME)
    return tracer.start_as_current_span(name, context=ctx, attributes=_clean(attributes), record_exception=False,
                                        set_status_on_exception=False)


def stage(name: str) -> contextlib.AbstractContextManager[Any]:
    """A child span of the current one (a guard, the ranking, the confirmation, the upstream)."""
    if _trace is None:
        return contextlib.nullcontext(NO_SPAN)
    return _trace.get_tracer(TRACER_NAME).start_as_current_span(name, record_exception=False,
                                                                set_status_on_exception=False)


def current() -> Any:
    """The current span (a no-op one when there is none): what a step adds attributes to."""
    return _trace.get_current_span() if _trace is not None else NO_SPAN
