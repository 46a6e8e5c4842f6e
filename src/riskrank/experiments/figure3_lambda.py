"""Figure 3: the effect of lambda. (a) NDCG@5 and (b) RVR@5 against lambda for core,
core+graph and core+graph+rule, shaded +-1 std over seeds, dashed line at the median
validated lambda; (c) every baseline and riskrank's operating points on the NDCG@5-RVR@5
plane, arrows for rising lambda."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from riskrank.evaluation.runner import EvalRun
from riskrank.experiments.common import BASELINES, mean
from riskrank.extras import requires

#: lambda in logit units (the p_risky penalty of riskrank's head: docs/architecture.md); the
#: paper's {0, 0.05, 0.1, 0.2} in probability units does not move it.
LAMBDAS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)
CONFIGS = (("core", "core"), ("core+graph", "+ graph"), ("core+graph+rule", "+ rule filter"))
STYLES = {"core": ("o", "-"), "core+graph": ("s", "--"), "core+graph+rule": ("^", ":")}


def methods() -> list[str]:
    return [f"{c}@lam={lam:g}" for c, _ in CONFIGS for lam in LAMBDAS]


def selected_lambdas(run: EvalRun, pipeline: str = "core") -> list[float]:
    """The lambda validation chose for a pipeline, per seed and fold."""
    out = []
    for s in run.seeds:
        for f in run.choices[s]:
            r = f.get("residual")
            if r:
                out.append(float((r.get("pipelines") or {}).get(pipeline, {}).get("lam", r["lam"])))
    return out


def plot(run: EvalRun, split: str, out_dir: Path) -> list[Path]:
    with requires("repro", "the figures of riskrank reproduce"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    lams = np.array(LAMBDAS)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    sel = selected_lambdas(run)
    for metric, ax, title in (("ndcg@5", axes[0], "(a) NDCG@5 vs lambda"), ("rvr@5", axes[1], "(b) RVR@5 vs lambda")):
        for cfg, label in CONFIGS:
            ms = [f"{cfg}@lam={lam:g}" for lam in LAMBDAS]
            if not all(m in run.methods for m in ms):
                continue
            mu = np.array([run.summary(split, m)[metric]["mean"] for m in ms])
            sd = np.array([run.summary(split, m)[metric]["std"] for m in ms])
            marker, ls = STYLES[cfg]
            ax.plot(lams, mu, marker=marker, ls=ls, label=label)
            ax.fill_between(lams, mu - sd, mu + sd, alpha=0.2)
        if "dense" in run.methods:
            ax.axhline(mean(run, split, "dense", metric), color="grey", ls=":", label="dense encoder")
        if sel:
            ax.axvline(float(np.median(sel)), color="k", ls="--", lw=1, label=f"median validated lambda ({np.median(sel):g})")
        ax.set_xlabel("lambda")
        ax.set_ylabel(metric.upper())
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    floor = 0.5 * mean(run, split, "dense", "ndcg@5") if "dense" in run.methods else 0.0
    off_scale = []
    for m in run.methods:
        if m in BASELINES or m.startswith("ce:") or m in ("paper_core",):
            x, y = mean(run, split, m, "rvr@5"), mean(run, split, m, "ndcg@5")
            if y < floor:  # e.g. the collapsed literal head: listed, not plotted, to keep the scale readable
                off_scale.append(f"{m}: NDCG@5 {y:.3f}, RVR@5 {x:.3f}")
                continue
            ax.scatter([x], [y], marker="s", s=40)
            ax.annotate(m, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if off_scale:
        ax.text(0.02, 0.02, "off scale: " + "; ".join(off_scale), transform=ax.transAxes, fontsize=7, va="bottom")
    for cfg, label in CONFIGS:
        ms = [f"{cfg}@lam={lam:g}" for lam in LAMBDAS]
        if not all(m in run.methods for m in ms):
            continue
        xs = [mean(run, split, m, "rvr@5") for m in ms]
        ys = [mean(run, split, m, "ndcg@5") for m in ms]
        marker, ls = STYLES[cfg]
        line = ax.plot(xs, ys, marker=marker, ls=ls, label=label)[0]
        for i in range(len(xs) - 1):
            ax.annotate("", xy=(xs[i + 1], ys[i + 1]), xytext=(xs[i], ys[i]),
                        arrowprops={"arrowstyle": "->", "color": line.get_color(), "lw": 1.2})
    ax.set_xlabel("RVR@5 (lower is safer)")
    ax.set_ylabel("NDCG@5")
    ax.set_title("(c) operating points; arrows: rising lambda")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"{run.dataset} {split}: lambda in {{{', '.join(f'{x:g}' for x in LAMBDAS)}}}")
    fig.tight_layout()
    path = out_dir / f"figure3_lambda_{split}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
