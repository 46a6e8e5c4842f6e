"""The console's pictures, drawn on the server as PNG: the catalogue's level distribution,
the decisions over time from the audit log, and the audit's agreement heat map (the plot
``riskrank agreement --png`` draws, :func:`riskrank.agreement.confusion_png_bytes`).

matplotlib (extra ``console`` or ``repro``) draws on :class:`matplotlib.figure.Figure`
objects, never through pyplot's global state, so the console draws in worker threads.
"""

from __future__ import annotations

import calendar
import collections
import io
import time
from collections.abc import Iterable
from typing import Any

from riskrank.extras import requires
from riskrank.risk import RISK_LEVELS

LEVEL_NAMES = {1: "Safe", 2: "Low", 3: "Medium", 4: "High", 5: "Critical"}
#: One colour per provenance the catalogue reports (:data:`riskrank.risk.PROVENANCE`), so the
#: legend uses the catalogue's words; a test holds the two key sets equal.
PROVENANCE_COLOURS = {"policy": "#5b2c6f", "audited": "#1f4e79", "predicted": "#2e86c1", "keyword": "#4f8fc0",
                      "annotation": "#a9c6e0", "unlabelled": "#b0b0b0"}
DECISION_COLOURS = {"allowed": "#2e7d32", "refused": "#c62828", "pending": "#f9a825", "found": "#90a4ae",
                    "failed": "#6a1b9a", "other": "#cfd8dc"}
#: Bucket widths for the decisions-over-time chart, smallest first; the first giving at most
#: MAX_BUCKETS buckets is used.
BUCKETS_S = (1, 5, 15, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 48
#: The chart shows at least this many buckets (empty ones after the last), so that a short
#: burst of decisions is a few narrow bars, not one wide block.
MIN_BUCKETS = 12


def _figure(width: float, height: float) -> Any:
    with requires("repro", "the console's pictures"):
        from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    fig.patch.set_facecolor("white")
    return fig


def _png(fig: Any) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _tidy(ax: Any) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)


def level_counts(tools: Iterable[dict[str, Any]]) -> dict[str, list[int]]:
    """provenance -> count per level 1..5 (the chart's data, and its text alternative)."""
    counts: dict[str, list[int]] = collections.OrderedDict((p, [0] * len(RISK_LEVELS)) for p in PROVENANCE_COLOURS)
    for t in tools:
        prov = t.get("provenance") if t.get("provenance") in counts else "unlabelled"
        counts[prov][int(t["level"]) - 1] += 1
    return {p: c for p, c in counts.items() if any(c)}


def levels_png(tools: list[dict[str, Any]]) -> bytes:
    """Tools per risk level, stacked by where the level comes from."""
    counts = level_counts(tools)
    fig = _figure(6.4, 3.4)
    ax = fig.subplots()
    x = list(RISK_LEVELS)
    bottom = [0] * len(x)
    for prov, c in counts.items():
        ax.bar(x, c, bottom=bottom, color=PROVENANCE_COLOURS[prov], label=prov, width=0.65)
        bottom = [b + v for b, v in zip(bottom, c, strict=True)]
    for xi, total in zip(x, bottom, strict=True):
        if total:
            ax.text(xi, total, str(total), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [f"L{lvl}\n{LEVEL_NAMES[lvl]}" for lvl in x])
    ax.set_ylabel("tools")
    ax.set_ylim(0, max([*bottom, 1]) * 1.18)
    ax.legend(title="level from", fontsize=8, title_fontsize=8, frameon=False, loc="upper right")
    _tidy(ax)
    return _png(fig)


def _epoch(stamp: Any) -> float | None:
    """An audit-log time (``2026-12-01T10:52:11.700Z``) as seconds since the epoch."""
    if not isinstance(stamp, str) or len(stamp) < 19:
        return None
    try:
        return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def decision_buckets(records: Iterable[dict[str, Any]]) -> tuple[int, list[float], dict[str, list[int]]]:
    """(bucket width in s, bucket starts, decision -> count per bucket) of the audit records."""
    seen: list[tuple[float, str]] = []
    for rec in records:
        t = _epoch(rec.get("time"))
        if t is not None:
            d = rec.get("decision")
            seen.append((t, d if d in DECISION_COLOURS else "other"))
    if not seen:
        return BUCKETS_S[0], [], {}
    lo, hi = min(t for t, _ in seen), max(t for t, _ in seen)
    width = next((w for w in BUCKETS_S if (hi // w - lo // w) + 1 <= MAX_BUCKETS), BUCKETS_S[-1])
    first = lo // width * width
    n = int((hi - first) // width) + 1
    counts: dict[str, list[int]] = {d: [0] * n for d in DECISION_COLOURS}
    for t, d in seen:
        counts[d][int((t - first) // width)] += 1
    return width, [first + i * width for i in range(n)], {d: c for d, c in counts.items() if any(c)}


def _label(start: float, width: int) -> str:
    fmt = "%H:%M:%S" if width < 60 else "%H:%M" if width < 86400 else "%m-%d"
    return time.strftime(fmt, time.gmtime(start))


def decisions_png(records: Iterable[dict[str, Any]]) -> bytes:
    """The gateway's decisions per time bucket (UTC), stacked by decision."""
    width, starts, counts = decision_buckets(records)
    fig = _figure(6.4, 3.4)
    ax = fig.subplots()
    if not starts:
        ax.text(0.5, 0.5, "no decisions logged yet", ha="center", va="center", transform=ax.transAxes, color="#666")
        ax.set_axis_off()
        return _png(fig)
    x = list(range(len(starts)))
    bottom = [0] * len(x)
    for d, c in counts.items():
        ax.bar(x, c, bottom=bottom, color=DECISION_COLOURS[d], label=d, width=0.8)
        bottom = [b + v for b, v in zip(bottom, c, strict=True)]
    slots = max(len(x), MIN_BUCKETS)
    ax.set_xlim(-0.6, slots - 0.4)
    ticks = list(range(0, slots, -(-slots // 6)))  # at most six labels
    ax.set_xticks(ticks, [_label(starts[0] + i * width, width) for i in ticks])
    what = {1: "second", 5: "5 s", 15: "15 s", 60: "minute", 300: "5 minutes", 900: "15 minutes", 3600: "hour",
            21600: "6 hours", 86400: "day", 604800: "week"}[width]
    ax.set_ylabel(f"decisions per {what}")
    ax.set_xlabel("time (UTC), from " + time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(starts[0])), fontsize=9)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _tidy(ax)
    return _png(fig)
