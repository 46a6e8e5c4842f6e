"""Paired significance of every riskrank method against the strongest baseline: per-query
metrics (averaged over seeds) compared with a paired bootstrap (95% interval of the mean
difference) and a paired randomisation (sign-flip) test, 10,000 resamples each."""

from __future__ import annotations

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import f3, is_ours, per_query_mean, strongest_baseline
from riskrank.metrics import paired_test
from riskrank.tables import markdown_table

METRICS = ("ndcg@5", "mrr", "rvr@5", "srr@5")
N_RESAMPLES = 10_000


def compute(run: EvalRun, split: str, methods: list[str] | None = None) -> dict:
    base = strongest_baseline(run, split)
    out = {"baseline": base, "n_resamples": N_RESAMPLES, "tests": {}}
    for m in methods or [m for m in run.methods if is_ours(m) and "@" not in m and "[" not in m]:
        out["tests"][m] = {
            c: paired_test(per_query_mean(run, split, m, c), per_query_mean(run, split, base, c), N_RESAMPLES, seed=0)
            for c in METRICS
        }
    return out


def build(result: dict) -> str:
    rows = []
    for m, tests in result["tests"].items():
        row = [f"`{m}`"]
        for c in METRICS:
            t = tests[c]
            row.append(f"{t['diff']:+.3f} [{f3(t['ci_low'])}, {f3(t['ci_high'])}] p={t['p_value']:.4f}")
        rows.append(row)
    return (f"Difference (method − `{result['baseline']}`), 95% paired-bootstrap interval, randomisation p-value; "
            f"{result['n_resamples']:,} resamples; per-query metrics averaged over seeds.\n\n"
            + markdown_table(["method", *[f"Δ{c}" for c in METRICS]], rows))
