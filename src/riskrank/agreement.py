"""Agreement between risk labels (paper Table 1): the statistics, the report and its plot.

Exact and within-one agreement and quadratically weighted Cohen's kappa per pair of label
sets (with percentile-bootstrap 95% intervals over tools), Krippendorff's alpha (ordinal)
over all raters, overall and on the tools with span <= 1, the span distribution (Table 1's
columns) and the confusion matrices (text, and a PNG heat map). The raters are label files,
or the annotators of one audit file (its ``votes``, see :mod:`riskrank.audit`).
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import AuditError
from riskrank.extras import requires
from riskrank.fileio import atomic_write_bytes
from riskrank.registry import ToolRegistry
from riskrank.risk import RISK_LEVELS
from riskrank.tables import text_table

_K = len(RISK_LEVELS)
_W = (np.subtract.outer(np.arange(_K), np.arange(_K)) ** 2).astype(np.float64)  # quadratic disagreement weights


def confusion(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """5 x 5 counts: rows a's level, columns b's level."""
    return np.bincount((np.asarray(a) - 1) * _K + (np.asarray(b) - 1), minlength=_K * _K).reshape(_K, _K)


def quadratic_kappa(conf: np.ndarray) -> np.ndarray:
    """Quadratically weighted Cohen's kappa from confusion matrices [..., 5, 5] (vectorised
    for the bootstrap; equal to sklearn's ``cohen_kappa_score(weights="quadratic")``)."""
    conf = np.asarray(conf, dtype=np.float64)
    n = conf.sum(axis=(-2, -1), keepdims=True)
    expected = conf.sum(axis=-1, keepdims=True) * conf.sum(axis=-2, keepdims=True) / np.where(n > 0, n, 1)
    num = (conf * _W).sum(axis=(-2, -1))
    den = (expected * _W).sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1.0 - num / den, np.nan)


@dataclass
class PairStats:
    a: str
    b: str
    n: int
    exact: float
    within_one: float
    kappa: float
    confusion: np.ndarray
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "n": self.n, "exact": self.exact, "within_one": self.within_one,
                "kappa_quadratic": self.kappa, "ci95": {k: list(v) for k, v in self.ci.items()},
                "confusion": self.confusion.tolist()}


def pair_stats(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray, *, bootstrap: int = 1000, seed: int = 0) -> PairStats:
    """Exact, within-one and quadratic kappa (sklearn) for one pair, with percentile
    bootstrap 95% intervals over tools."""
    from sklearn.metrics import cohen_kappa_score

    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    n = len(a)
    conf = confusion(a, b)
    if n == 0:
        return PairStats(name_a, name_b, 0, math.nan, math.nan, math.nan, conf)
    diff = np.abs(a - b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant rater makes kappa undefined (nan)
        kappa = float(cohen_kappa_score(a, b, labels=list(RISK_LEVELS), weights="quadratic"))
    st = PairStats(name_a, name_b, n, float((diff == 0).mean()), float((diff <= 1).mean()), kappa, conf)
    if bootstrap and n > 1:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(bootstrap, n))
        cells = (a[idx] - 1) * _K + (b[idx] - 1) + (np.arange(bootstrap) * _K * _K)[:, None]
        confs = np.bincount(cells.ravel(), minlength=bootstrap * _K * _K).reshape(bootstrap, _K, _K)
        d = diff[idx]
        for key, vals in (("exact", (d == 0).mean(1)), ("within_one", (d <= 1).mean(1)), ("kappa_quadratic", quadratic_kappa(confs))):
            vals = vals[np.isfinite(vals)]
            if len(vals):
                st.ci[key] = (float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5)))
    return st


def krippendorff_ordinal(ratings: np.ndarray) -> float:
    """Krippendorff's alpha, ordinal, over raters x units (nan where undefined)."""
    import krippendorff

    ratings = np.asarray(ratings, dtype=np.float64)
    if ratings.shape[1] == 0 or len(np.unique(ratings[np.isfinite(ratings)])) < 2:
        return math.nan
    try:
        return float(krippendorff.alpha(reliability_data=ratings, level_of_measurement="ordinal",
                                        value_domain=list(RISK_LEVELS)))
    except (ValueError, ZeroDivisionError):
        return math.nan


@dataclass
class AgreementReport:
    raters: list[str]
    sources: dict[str, str]
    n: int
    pairs: list[PairStats]
    alpha_all: float
    alpha_span_le1: float
    span_counts: dict[str, int]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"raters": self.raters, "sources": self.sources, "n_tools": self.n,
                "pairs": [p.to_dict() for p in self.pairs],
                "krippendorff_alpha_ordinal": {"all": self.alpha_all, "span<=1": self.alpha_span_le1},
                "span": self.span_counts, "notes": self.notes}

    def format(self) -> str:
        def f(x: float, d: int = 3) -> str:
            return "-" if x is None or not np.isfinite(x) else f"{x:.{d}f}"

        def ci(p: PairStats, k: str) -> str:
            return f" [{f(p.ci[k][0])}, {f(p.ci[k][1])}]" if k in p.ci else ""

        lines = [f"{r}: {self.sources[r]}" for r in self.raters]
        lines.append(f"{self.n} tools rated by all {len(self.raters)}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("")
        rows = [[f"{p.a} vs {p.b}", str(p.n), f(p.exact) + ci(p, "exact"), f(p.within_one) + ci(p, "within_one"),
                 f(p.kappa) + ci(p, "kappa_quadratic")] for p in self.pairs]
        lines += text_table(["pair", "n", "exact [95% CI]", "within one [95% CI]", "kappa_qw [95% CI]"], rows).split("\n")
        lines.append("")
        sc, n = self.span_counts, max(self.n, 1)
        lines.append("Table 1 (span = max - min over the raters; alpha = Krippendorff, ordinal):")
        lines += text_table(["alpha_all", "alpha_span<=1", "span=0", "span=1", "span>=2"],
                            [[f(self.alpha_all), f(self.alpha_span_le1)] + [f"{sc[k]} ({100 * sc[k] / n:.1f}%)" for k in ("0", "1", ">=2")]]).split("\n")
        for p in self.pairs:
            lines.append("")
            lines.append(f"confusion ({p.a} rows, {p.b} columns):")
            lines += text_table(["", *(f"L{j + 1}" for j in range(_K))], [[f"L{i + 1}", *map(str, p.confusion[i])] for i in range(_K)]).split("\n")
        return "\n".join(lines)


def agreement(ratings: dict[str, np.ndarray], sources: dict[str, str] | None = None, *, bootstrap: int = 1000,
              seed: int = 0, notes: Iterable[str] = ()) -> AgreementReport:
    """All statistics for aligned ratings (rater -> levels 1..5 over the same tools)."""
    raters = list(ratings)
    if len(raters) < 2:
        raise AuditError("agreement needs at least two raters")
    mat = np.stack([np.asarray(ratings[r], dtype=np.int64) for r in raters])
    if mat.size and (mat.min() < 1 or mat.max() > 5):
        raise AuditError("ratings must be levels 1-5")
    n = mat.shape[1]
    pairs = [pair_stats(a, ratings[a], b, ratings[b], bootstrap=bootstrap, seed=seed) for a, b in combinations(raters, 2)]
    span = mat.max(axis=0) - mat.min(axis=0) if n else np.zeros(0, dtype=np.int64)
    counts = {"0": int((span == 0).sum()), "1": int((span == 1).sum()), ">=2": int((span >= 2).sum())}
    return AgreementReport(raters, sources or {r: r for r in raters}, n, pairs, krippendorff_ordinal(mat),
                           krippendorff_ordinal(mat[:, span <= 1]), counts, list(notes))


def load_ratings(paths: Sequence[str | Path]) -> tuple[dict[str, np.ndarray], dict[str, str], list[str], list[str]]:
    """Aligned ratings from label files (any registry format with risk levels). Two or more
    files: one rater per file (A, B, C ...). One audit file: one rater per annotator, from
    its ``votes``. Returns (ratings, sources, tool names, notes)."""
    notes: list[str] = []
    regs = [ToolRegistry.load(p) for p in paths]
    if len(regs) == 1:
        reg = regs[0]
        annots: list[str] = []
        for t in reg:
            for a in (t.extra.get("votes") or {}):
                if a not in annots:
                    annots.append(a)
        if len(annots) < 2:
            raise AuditError(f"{paths[0]}: give two or more label files, or one audit file with votes of two or more annotators")
        names = [t.name for t in reg if all(_valid_level((t.extra.get("votes") or {}).get(a)) for a in annots)]
        if len(names) < len(reg):
            notes.append(f"{len(reg) - len(names)} tools lack a vote from some annotator: excluded")
        ratings = {a: np.array([reg[n].extra["votes"][a] for n in names], dtype=np.int64) for a in annots}
        return ratings, {a: f"votes in {paths[0]}" for a in annots}, names, notes
    letters = [chr(ord("A") + i) for i in range(len(regs))]
    common = [n for n in regs[0].names if all(n in r for r in regs[1:])]
    for letter, r in zip(letters, regs, strict=True):
        extra = len(r) - len(common)
        if extra:
            notes.append(f"{extra} tools of {letter} are missing from another file: excluded")
    names = [n for n in common if all(r[n].risk_level for r in regs)]
    if len(names) < len(common):
        notes.append(f"{len(common) - len(names)} common tools are unlabelled (risk_level null) in some file: excluded")
    if not names:
        raise AuditError("the label files share no labelled tool")
    ratings = {letter: np.array([r[n].risk_level for n in names], dtype=np.int64) for letter, r in zip(letters, regs, strict=True)}
    return ratings, {letter: str(p) for letter, p in zip(letters, paths, strict=True)}, names, notes


def _valid_level(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 5


def _axis_label(rater: str, sources: dict[str, str]) -> str:
    src = sources.get(rater, rater)
    return rater if src == rater or src.startswith("votes in") else f"{rater}: {Path(src).name}"


def confusion_png_bytes(report: AgreementReport) -> bytes:
    """Confusion matrices as heat maps, one panel per pair (colour: row-normalised share;
    text: counts), as PNG bytes. Drawn on a :class:`matplotlib.figure.Figure` without pyplot,
    so a server can draw it in a worker thread."""
    with requires("repro", "the confusion heat map (--png)"):
        from matplotlib.figure import Figure

    pairs = report.pairs
    fig = Figure(figsize=(4.2 * len(pairs), 4.0))
    axes = fig.subplots(1, len(pairs), squeeze=False)
    for ax, p in zip(axes[0], pairs, strict=True):
        conf = p.confusion.astype(np.float64)
        share = conf / np.maximum(conf.sum(axis=1, keepdims=True), 1)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
        for i in range(_K):
            for j in range(_K):
                ax.text(j, i, str(int(conf[i, j])), ha="center", va="center", fontsize=9,
                        color="white" if share[i, j] > 0.6 else "black")
        ticks = [f"L{k}" for k in RISK_LEVELS]
        ax.set_xticks(range(_K), ticks)
        ax.set_yticks(range(_K), ticks)
        ax.set_xlabel(_axis_label(p.b, report.sources))
        ax.set_ylabel(_axis_label(p.a, report.sources))
        ax.set_title(f"{p.a} vs {p.b}: exact {p.exact:.2f}, κ {p.kappa:.2f}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    return buf.getvalue()


def confusion_png(report: AgreementReport, path: str | Path) -> Path:
    """:func:`confusion_png_bytes`, written to ``path`` atomically."""
    atomic_write_bytes(Path(path), confusion_png_bytes(report))
    return Path(path)
