"""Table 7: stress test. Test queries whose gold tools are all r < 3 while the dense top-5
holds at least two tools with r >= 3: the task-relevant tool is safe, but semantically similar
risky tools are retrieved. Selected automatically and deterministically; all that qualify."""

from __future__ import annotations

import numpy as np

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import HEADERS, f3
from riskrank.metrics import max_gold_risk
from riskrank.risk import RISKY_LEVEL
from riskrank.tables import markdown_table

ROWS = (("dense encoder", "dense"), ("+ core + graph smoothing", "core+graph"), ("+ rule filter", "core+graph+rule"))
METHODS = tuple(m for _, m in ROWS)
RULE = ("queries with max gold risk < 3 whose dense top-5 contains >= 2 tools with r >= 3 "
        "(dense ranking of the frozen encoder; no seed involved)")


def select(run: EvalRun, split: str, gold: list[np.ndarray], risk: np.ndarray) -> np.ndarray:
    top = run.top[run.seeds[0]][split]["dense"][:, :5]
    risky_in_top = (risk[top] >= RISKY_LEVEL).sum(axis=1)
    return (max_gold_risk(gold, risk) < RISKY_LEVEL) & (risky_in_top >= 2)


def build(run: EvalRun, split: str, gold: list[np.ndarray], risk: np.ndarray) -> tuple[str, dict]:
    mask = select(run, split, gold, risk)
    rows, data = [], {"n": int(mask.sum()), "rule": RULE, "methods": {}}
    for label, m in ROWS:
        if m not in run.methods:
            continue
        vals = {}
        for c in ("ndcg@5", "rvr@5", "srr@5"):
            per_seed = [float(np.nanmean(np.asarray(run.per_query[s][split][m][c])[mask])) if mask.any() else float("nan") for s in run.seeds]
            vals[c] = (float(np.mean(per_seed)), float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0)
        data["methods"][m] = {c: {"mean": v[0], "std": v[1]} for c, v in vals.items()}
        rows.append([label, f"`{m}`", *[f"{f3(v[0])} ± {f3(v[1])}" if m != "dense" else f3(v[0]) for v in vals.values()]])
    text = f"Selection rule: {RULE}; n = {int(mask.sum())} of {len(gold)} queries.\n\n"
    return text + markdown_table(["method", "name", HEADERS["ndcg@5"], HEADERS["rvr@5"], HEADERS["srr@5"]], rows), data
