"""Table 3: ablation, one component at a time: dense -> risk-label penalty -> trained f_rel ->
+ trained f_risk -> + graph smoothing -> + rule filter; the same chain for the paper's literal
concatenation head."""

from __future__ import annotations

from riskrank.experiments.common import HEADERS, cell
from riskrank.experiments.runner import EvalRun
from riskrank.tables import markdown_table

CHAIN = (
    ("dense (encoder)", "dense"), ("risk-label penalty", "risk_label_penalty"),
    ("trained f_rel", "rel_only"), ("+ trained f_risk", "core"), ("+ graph smoothing", "core+graph"),
    ("+ rule filter", "core+graph+rule"),
)
PAPER_CHAIN = (
    ("paper head: trained f_rel", "paper_rel_only"), ("+ trained f_risk", "paper_core"),
    ("+ graph smoothing", "paper_core+graph"), ("+ rule filter", "paper_core+graph+rule"),
)
METHODS = tuple(m for _, m in CHAIN + PAPER_CHAIN)
COLUMNS = ("ndcg@5", "sndcg@5", "mrr", "rvr@5", "srr@5")


def build(run: EvalRun, split: str) -> str:
    rows = []
    for label, m in CHAIN + PAPER_CHAIN:
        if m in run.methods:
            rows.append([label, f"`{m}`", *[cell(run, split, m, c) for c in COLUMNS]])
    return markdown_table(["step", "method", *[HEADERS[c] for c in COLUMNS]], rows)
