"""Table 3: ablation, one component at a time: dense -> risk-label penalty -> the hybrid
fusion (the head's first stage) -> trained f_rel -> + trained risk penalty -> + graph
smoothing -> + rule filter; the same chain for the cosine-only residual head
(``[relevance=dense]``: no lexical evidence) and for the paper's literal concatenation head;
and, once, the rule filter on predicted levels fitted in-sample beside cross-fitted ones."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import HEADERS, cell
from riskrank.tables import markdown_table

CHAIN = (
    ("dense (encoder)", "dense"), ("risk-label penalty", "risk_label_penalty"), ("hybrid fusion (BM25 + dense)", "hybrid"),
    ("trained f_rel", "rel_only"), ("+ trained risk penalty", "core"), ("+ graph smoothing", "core+graph"),
    ("+ rule filter", "core+graph+rule"),
)
DENSE_CHAIN = (
    ("cosine-only head: + trained risk penalty", "core[relevance=dense]"), ("+ graph smoothing", "core+graph[relevance=dense]"),
    ("+ rule filter", "core+graph+rule[relevance=dense]"),
)
PAPER_CHAIN = (
    ("paper head: trained f_rel", "paper_rel_only"), ("+ trained f_risk", "paper_core"),
    ("+ graph smoothing", "paper_core+graph"), ("+ rule filter", "paper_core+graph+rule"),
)
LEVELS = (("levels fitted on every tool's label (in-sample)", "core+graph+rule_pred[levels=in_sample]"),
          ("levels cross-fitted over tools (each from a head that never saw its label)", "core+graph+rule_pred"))
METHODS = tuple(m for _, m in CHAIN + DENSE_CHAIN + PAPER_CHAIN + LEVELS)
COLUMNS = ("ndcg@5", "sndcg@5", "mrr", "rvr@5", "srr@5")


def build(run: EvalRun, split: str) -> str:
    rows = []
    for label, m in CHAIN + DENSE_CHAIN + PAPER_CHAIN:
        if m in run.methods:
            rows.append([label, f"`{m}`", *[cell(run, split, m, c) for c in COLUMNS]])
    return markdown_table(["step", "method", *[HEADERS[c] for c in COLUMNS]], rows)


def build_levels(run: EvalRun, split: str) -> str:
    """The rule filter on predicted levels, in-sample beside cross-fitted (same lambda)."""
    cols = (*COLUMNS, "needrisk_hit@5")
    rows = [[label, f"`{m}`", *[cell(run, split, m, c) for c in cols]] for label, m in LEVELS if m in run.methods]
    return markdown_table(["predicted levels", "method", *[HEADERS[c] for c in cols]], rows)
