"""Table 6: candidate exposure without execution. The agent sees only the query and the top-5
candidates; RVR@5 and SRR@5 measure the risk of that candidate set."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import HEADERS, PAPER_COLUMNS, cell
from riskrank.tables import markdown_table

ROWS = (("BM25", "bm25"), ("dense encoder", "dense"), ("dense + fine-tuned MiniLM cross-encoder (top-20 rescored)", "ce-minilm-ft"),
        ("dense + rule filter", "dense+rule"), ("riskrank core (validated lambda)", "core"),
        ("riskrank core + graph + rule filter", "core+graph+rule"))
METHODS = tuple(m for _, m in ROWS)


def build(run: EvalRun, split: str) -> str:
    rows = [[label, f"`{m}`", *[cell(run, split, m, c) for c in PAPER_COLUMNS]] for label, m in ROWS if m in run.methods]
    return markdown_table(["method", "name", *[HEADERS[c] for c in PAPER_COLUMNS]], rows)
