"""Figure 4: NDCG@5 and RVR@5 on query subsets: high-risk (max gold r >= 3), low-risk
(< 3), long-tail (every gold tool in <= 5 training queries of the scoring model's own
training split) and out-of-domain (Seal-Tools test_out, when present), as grouped bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import f3, subset_summary
from riskrank.extras import requires
from riskrank.tables import markdown_table

METHODS = ("dense", "rel_only", "core", "core+graph", "core+graph+rule")
SUBSETS = ("high_risk", "low_risk", "long_tail")


def table(run: EvalRun, split: str) -> tuple[str, dict]:
    rows, data = [], {}
    groups = [(name, split, lambda s, name=name: run.subsets[s][split][name]) for name in SUBSETS if name in run.subsets[run.seeds[0]][split]]
    if "test_out" in run.splits and split != "test_out":
        groups.append(("out_of_domain", "test_out", lambda s: np.ones(run.splits["test_out"], dtype=bool)))
    for name, sp, mask in groups:
        for m in METHODS:
            if m not in run.methods:
                continue
            nd = subset_summary(run, sp, m, "ndcg@5", mask)
            rv = subset_summary(run, sp, m, "rvr@5", mask)
            data.setdefault(name, {})[m] = {"n": nd[2], "ndcg@5": {"mean": nd[0], "std": nd[1]}, "rvr@5": {"mean": rv[0], "std": rv[1]}}
            rows.append([name, str(nd[2]), f"`{m}`", f"{f3(nd[0])} ± {f3(nd[1])}", f"{f3(rv[0])} ± {f3(rv[1])}"])
    return markdown_table(["subset", "n", "method", "NDCG@5↑", "RVR@5↓"], rows), data


def plot(data: dict, run: EvalRun, split: str, out_dir: Path) -> list[Path]:
    with requires("repro", "the figures of riskrank reproduce"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    subsets = list(data)
    methods = [m for m in METHODS if any(m in data[s] for s in subsets)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(subsets))
    for ax, metric in zip(axes, ("ndcg@5", "rvr@5"), strict=True):
        for j, m in enumerate(methods):
            mu = [data[s].get(m, {}).get(metric, {}).get("mean", np.nan) for s in subsets]
            sd = [data[s].get(m, {}).get(metric, {}).get("std", 0.0) for s in subsets]
            ax.bar(x + (j - (len(methods) - 1) / 2) * width, mu, width, yerr=sd, capsize=2, label=m)
        ax.set_xticks(x, [f"{s}\n(n={next(iter(data[s].values()))['n']})" for s in subsets])
        ax.set_ylabel(metric.upper())
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{metric.upper()} by query subset")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{run.dataset} {split}: subsets (bars: mean over seeds, whiskers: ±1 std)")
    fig.tight_layout()
    path = out_dir / f"figure4_subsets_{split}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
