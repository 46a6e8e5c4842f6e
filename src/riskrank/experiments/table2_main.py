"""Table 2: main results. Baselines (BM25, dense, their validated hybrid fusion, MMR, the
cross-encoder, the risk-label penalty), the paper's literal head (paper_core), and riskrank's
Core+Graph, +Rule filter (audited labels) and +Rule filter (predicted levels, cross-fitted
over tools), with the relative change against the strongest non-riskrank baseline, as the
paper prints it."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import (
    HEADERS,
    PAPER_COLUMNS,
    cell,
    is_ours,
    mean,
    rel_change,
    strongest_baseline,
)
from riskrank.tables import markdown_table

BASELINE_ROWS = ("bm25", "dense", "hybrid", "mmr", "ce-minilm-ft", "risk_label_penalty")
OURS_ROWS = ("paper_core", "core+graph", "core+graph+rule", "core+graph+rule_pred")
METHODS = (*BASELINE_ROWS, *OURS_ROWS)


def build(run: EvalRun, split: str) -> str:
    base = strongest_baseline(run, split)
    rows = []
    extra = [m for m in run.methods if m.startswith("ce:")]
    for m in [*BASELINE_ROWS, *extra, *OURS_ROWS]:
        if m not in run.methods:
            continue
        row = [f"`{m}`"]
        for c in PAPER_COLUMNS:
            txt = cell(run, split, m, c)
            if is_ours(m):
                txt += f" ({rel_change(mean(run, split, m, c), mean(run, split, base, c), c)})"
            row.append(txt)
        rows.append(row)
    caption = (f"Relative changes of riskrank's rows are against the strongest non-riskrank baseline by NDCG@5, "
               f"`{base}`. Means ± std over seeds {', '.join(map(str, run.seeds))} for trained methods.")
    return caption + "\n\n" + markdown_table(["method", *[HEADERS[c] for c in PAPER_COLUMNS]], rows)
