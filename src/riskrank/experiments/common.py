"""Formatting and aggregation shared by the table and figure modules."""

from __future__ import annotations

import math

import numpy as np

from riskrank.evaluation.runner import EvalRun

#: Lower is better for these metrics (arrows and "best" in the tables).
LOWER_IS_BETTER = {"rvr@5", "srr@5", "safe_rvr@5"}
PAPER_COLUMNS = ("ndcg@5", "mrr", "sndcg@5", "rvr@5", "srr@5")
HEADERS = {"ndcg@5": "NDCG@5↑", "mrr": "MRR↑", "sndcg@5": "sNDCG@5↑", "rvr@5": "RVR@5↓", "srr@5": "SRR@5↓",
           "safe_rvr@5": "Safe-RVR@5↓", "needrisk_hit@5": "NeedRisk-Hit@5↑", "recall@5": "Recall@5↑", "success@5": "Success@5↑"}
#: Methods that are riskrank's own (everything else is a baseline).
OURS_PREFIXES = ("rel_only", "core", "paper_", "top100/")
BASELINES = ("bm25", "dense", "hybrid", "mmr", "ce-minilm-ft", "risk_label_penalty", "dense+rule")


def is_ours(method: str) -> bool:
    return method.startswith(OURS_PREFIXES)


def f3(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def cell(run: EvalRun, split: str, method: str, metric: str, std: bool = True) -> str:
    s = run.summary(split, method)[metric]
    if std and len(run.seeds) > 1 and not run_seed_independent(run, method):
        return f"{f3(s['mean'])} ± {f3(s['std'])}"
    return f3(s["mean"])


def run_seed_independent(run: EvalRun, method: str) -> bool:
    from riskrank.evaluation.methods import parse_method

    try:
        return parse_method(method).seed_independent
    except Exception:
        return False


def mean(run: EvalRun, split: str, method: str, metric: str) -> float:
    return run.summary(split, method)[metric]["mean"]


def rel_change(ours: float, base: float, metric: str) -> str:
    """The paper's relative change against the strongest baseline, with an arrow for the
    direction of the number (up/down), like Table 2."""
    if base == 0 or math.isnan(base) or math.isnan(ours):
        return "–"
    pct = (ours - base) / abs(base) * 100
    arrow = "↑" if pct > 0 else ("↓" if pct < 0 else "")
    return f"{arrow}{abs(pct):.1f}%"


def strongest_baseline(run: EvalRun, split: str, metric: str = "ndcg@5") -> str:
    """The non-riskrank method with the best mean ``metric`` on ``split``."""
    cands = [m for m in run.methods if m in BASELINES or m.startswith("ce:")]
    cands = [m for m in cands if m not in ("risk_label_penalty", "dense+rule")] or cands
    return max(cands, key=lambda m: mean(run, split, m, metric))


def per_query_mean(run: EvalRun, split: str, method: str, metric: str) -> np.ndarray:
    """Per-query metric averaged over seeds (for paired tests)."""
    return np.nanmean(np.stack([run.per_query[s][split][method][metric] for s in run.seeds]), axis=0)


def subset_summary(run: EvalRun, split: str, method: str, metric: str, mask_of_seed) -> tuple[float, float, int]:
    """Mean and std over seeds of a metric on a per-seed query subset; n of the first seed."""
    vals, n0 = [], None
    for s in run.seeds:
        mask = mask_of_seed(s)
        v = np.asarray(run.per_query[s][split][method][metric])[mask]
        n0 = int(mask.sum()) if n0 is None else n0
        vals.append(float(np.nanmean(v)) if np.isfinite(v).any() else float("nan"))
    arr = np.array(vals)
    return float(np.nanmean(arr)), float(np.nanstd(arr, ddof=1)) if len(arr) > 1 else 0.0, n0 or 0
