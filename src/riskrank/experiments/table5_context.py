"""Table 5: context-aware safety. Safe-RVR@5 on low-risk queries (all gold r < 3) and
NeedRisk-Hit@5 on high-risk queries (a gold tool r >= 3)."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import HEADERS, cell
from riskrank.tables import markdown_table

ROWS = (("trained f_rel", "rel_only"), ("+ risk", "core"), ("+ graph", "core+graph"), ("+ rules", "core+graph+rule"),
        ("dense (reference)", "dense"))
METHODS = tuple(m for _, m in ROWS)


def build(run: EvalRun, split: str) -> str:
    rows = [[label, f"`{m}`", cell(run, split, m, "safe_rvr@5"), cell(run, split, m, "needrisk_hit@5")]
            for label, m in ROWS if m in run.methods]
    return markdown_table(["step", "method", HEADERS["safe_rvr@5"], HEADERS["needrisk_hit@5"]], rows)
