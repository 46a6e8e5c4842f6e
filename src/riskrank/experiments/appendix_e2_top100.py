"""Appendix E.2: top-100 evaluation. The baseline rerankers receive the dense top-100;
riskrank's ``top100/*`` rerank the top-100 of their own first stage (the validated hybrid
fusion, the scored set a deployment with ``--candidates 100`` uses), each pipeline with its
own validated lambda; graph smoothing runs on the candidate-induced subgraph."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import HEADERS, PAPER_COLUMNS, cell
from riskrank.tables import markdown_table

ROWS = ("mmr", "ce-minilm-ft", "top100/core", "top100/core+graph", "top100/core+graph+rule", "core", "core+graph", "core+graph+rule")
METHODS = ROWS


def build(run: EvalRun, split: str) -> str:
    def scored(m: str) -> str:
        if m == "ce-minilm-ft" or m.startswith("ce:"):
            return "top-20 of the dense top-100"
        if m.startswith("top100/"):
            return "hybrid top-100"
        return "dense top-100" if m == "mmr" else "full pool"

    rows = [[f"`{m}`", scored(m),
             *[cell(run, split, m, c) for c in PAPER_COLUMNS]] for m in ROWS if m in run.methods]
    return markdown_table(["method", "scored set", *[HEADERS[c] for c in PAPER_COLUMNS]], rows)
