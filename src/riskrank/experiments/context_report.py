"""Table 5, extended: the context stage against the pipelines it refines.

``riskrank reproduce --context`` runs only the methods this report reads (``dense``, the
trained pipelines ``rel_only``, ``core``, ``core+graph``, ``core+graph+rule``, the two context
methods and each pipeline's lambda sweep; no cross-encoder), through the same
:class:`~riskrank.evaluation.runner.Runner` as the full reproduction, and writes
``context.md``, ``context.json`` and ``context_<split>.png``:

- the Table 5 extension: NDCG@5, Safe-RVR@5, NeedRisk-Hit@5 and RVR@5, mean ± std over seeds
  and a 95% percentile-bootstrap interval over queries (per-query values averaged over seeds);
- the targets, each a paired bootstrap interval of the difference against its reference;
- the need head's AUC: validation (per seed and fold, from the fit) and test (per seed);
- two stress sets: Table 7's rule, and a wider one stated here;
- the figure: Safe-RVR@5 against NeedRisk-Hit@5, every method a point, each pipeline's
  lambda sweep a curve.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.evaluation.runner import DEFAULT_SEEDS, EvalRun
from riskrank.experiments import table7_stress
from riskrank.experiments.common import HEADERS, f3, per_query_mean
from riskrank.experiments.reproduce import open_report, run_or_reuse
from riskrank.extras import requires
from riskrank.fileio import atomic_write_bytes, write_json
from riskrank.metrics import bootstrap_ci, max_gold_risk, paired_test
from riskrank.risk import RISKY_LEVEL
from riskrank.tables import markdown_table
from riskrank.training import (
    CONTEXT_CAP_NEED_GRID,
    CONTEXT_FOLDS,
    CONTEXT_LAM_HOLD_GRID,
    CONTEXT_LAM_NEED_GRID,
    CONTEXT_MARGIN_GRID,
    CONTEXT_RULE,
    CONTEXT_TAU_GRID,
    MIN_NEED_VALIDATION,
    PRIOR_NEED,
)

ROWS = (("dense (reference)", "dense"), ("trained f_rel", "rel_only"), ("+ risk", "core"), ("+ graph", "core+graph"),
        ("+ rules", "core+graph+rule"), ("+ context", "core+graph+context"), ("+ context + rules", "core+graph+context+rule"))
METHODS = tuple(m for _, m in ROWS)
CONTEXT_METHODS = ("core+graph+context", "core+graph+context+rule")
#: The pipelines whose lambda sweep the figure draws, and the sweep (logit units).
SWEPT = ("core", "core+graph", "core+graph+rule", "core+graph+context", "core+graph+context+rule")
LAMBDAS = (0.0, 2.0, 4.0, 8.0)
COLUMNS = ("ndcg@5", "safe_rvr@5", "needrisk_hit@5", "rvr@5")
WIDE_RULE = ("queries with max gold risk < 3 whose dense top-10 holds at least one tool with r >= 3 "
             "(dense ranking of the frozen encoder; no seed involved)")
N_RESAMPLES = 10_000
CACHE = "cache/context_run"


def _grid(values: Sequence[float | None]) -> str:
    return "{" + ", ".join("none" if v is None else f"{v:g}" for v in values) + "}"


def context_methods() -> list[str]:
    return [*METHODS, *[f"{p}@lam={lam:g}" for p in SWEPT for lam in LAMBDAS]]


def _ci(run: EvalRun, split: str, method: str, metric: str) -> tuple[float, float, int]:
    v = per_query_mean(run, split, method, metric)
    lo, hi = bootstrap_ci(v, N_RESAMPLES, seed=0)
    return lo, hi, int(np.isfinite(v).sum())


def table(run: EvalRun, split: str) -> tuple[str, dict[str, Any]]:
    rows, data = [], {}
    for label, m in ROWS:
        if m not in run.methods:
            continue
        s = run.summary(split, m)
        cells, data[m] = [], {}
        for c in COLUMNS:
            lo, hi, n = _ci(run, split, m, c)
            data[m][c] = {"mean": s[c]["mean"], "std": s[c]["std"], "ci95": [lo, hi], "n": n}
            cells.append(f"{f3(s[c]['mean'])} ± {f3(s[c]['std'])} [{f3(lo)}, {f3(hi)}]")
        rows.append([label, f"`{m}`", *cells])
    n_safe = data.get("dense", next(iter(data.values())))["safe_rvr@5"]["n"] if data else 0
    n_need = data.get("dense", next(iter(data.values())))["needrisk_hit@5"]["n"] if data else 0
    text = (f"Mean ± std over seeds [95% bootstrap interval over queries, per-query values averaged over seeds]; "
            f"Safe-RVR@5 over n = {n_safe} low-risk queries, NeedRisk-Hit@5 over n = {n_need} high-risk queries.\n\n")
    return text + markdown_table(["step", "method", *[HEADERS[c] for c in COLUMNS]], rows), data


def targets(run: EvalRun, split: str) -> tuple[str, dict[str, Any]]:
    """Each target as a paired difference with its 95% interval (and the 3-seed means)."""
    checks = (("safe_rvr@5", "core+graph+rule", 1.0, "<="), ("needrisk_hit@5", "rel_only", 0.9, ">="),
              ("ndcg@5", "core+graph", 1.0, ">="))
    rows, data = [], {}
    for m in CONTEXT_METHODS:
        if m not in run.methods:
            continue
        data[m] = {}
        for metric, ref, factor, op in checks:
            if ref not in run.methods:
                continue
            ours = per_query_mean(run, split, m, metric)
            base = factor * per_query_mean(run, split, ref, metric)
            t = paired_test(ours, base, N_RESAMPLES, seed=0)
            mean_ours = run.summary(split, m)[metric]["mean"]
            bound = factor * run.summary(split, ref)[metric]["mean"]
            met = mean_ours <= bound + 1e-12 if op == "<=" else mean_ours >= bound - 1e-12
            lo, hi = t["ci_low"], t["ci_high"]
            if op == "<=":
                verdict = "met, CI excludes a miss" if hi <= 0 else ("met (mean); CI includes a miss" if met else
                                                                     ("missed, CI excludes meeting it" if lo > 0 else "missed (mean); CI includes meeting it"))
            else:
                verdict = "met, CI excludes a miss" if lo >= 0 else ("met (mean); CI includes a miss" if met else
                                                                     ("missed, CI excludes meeting it" if hi < 0 else "missed (mean); CI includes meeting it"))
            target = f"{HEADERS[metric]} {op} {'' if factor == 1 else f'{factor:g} × '}`{ref}`"
            rows.append([f"`{m}`", target, f3(mean_ours), f3(bound), f"{t['diff']:+.3f} [{f3(lo)}, {f3(hi)}]", str(t["n"]), verdict])
            data[m][metric] = {"reference": ref, "factor": factor, "op": op, "mean": mean_ours, "bound": bound, "diff": t["diff"],
                               "ci95": [lo, hi], "n": t["n"], "met": bool(met), "verdict": verdict}
    text = ("Difference = method − factor × reference per query (averaged over seeds), 95% paired-bootstrap interval; "
            "a verdict says whether the interval can decide.\n\n")
    return text + markdown_table(["method", "target", "method mean", "bound", "difference [95% CI]", "n", "verdict"], rows), data


def need_auc(run: EvalRun, split: str, gold: list[np.ndarray], risk: np.ndarray) -> tuple[str, dict[str, Any]]:
    from sklearn.metrics import roc_auc_score

    y = max_gold_risk(gold, risk) >= RISKY_LEVEL
    data: dict[str, Any] = {"test": {}, "validation": {}, "n_test_positive": int(y.sum()), "n_test": int(y.size)}
    method = next((m for m in CONTEXT_METHODS if m in run.methods), None)
    rows = []
    for s in run.seeds:
        p = run.per_query[s][split][method].get("need") if method else None
        auc = float(roc_auc_score(y, p)) if p is not None and y.any() and not y.all() and np.isfinite(p).all() else float("nan")
        data["test"][str(s)] = auc
        vals = [(f.get("residual") or {}).get("need_head") or {} for f in run.choices.get(s, [])]
        val_auc = [v.get("val_auc") for v in vals]
        data["validation"][str(s)] = [{"fold": f.get("fold"), "val_auc": v.get("val_auc"), "features": v.get("features"), "C": v.get("C"),
                                       "val_positives": v.get("val_positives"), "n_val": v.get("n_val"), "chosen_by": v.get("chosen_by")}
                                      for f, v in zip(run.choices.get(s, []), vals, strict=True)]
        feats = sorted({"+".join(v.get("features") or []) for v in vals})
        va = [a for a in val_auc if a is not None]
        pos = [v.get("val_positives") for v in vals]
        rows.append([str(s), f"{min(va):.3f}–{max(va):.3f}" if va else "–", ", ".join(map(str, pos)), ", ".join(feats), f3(auc)])
    text = (f"Label: a gold tool has r >= 3. Test: n = {int(y.size)} queries, {int(y.sum())} positive. The feature set "
            f"(query embedding `emb`, first-stage candidate risk `cand`) and C are chosen by the out-of-fold AUC of "
            f"{CONTEXT_FOLDS}-fold cross-validation over each fit's training and validation queries; with fewer than "
            f"{MIN_NEED_VALIDATION} of them on either side of the label the prior ({'+'.join(PRIOR_NEED[0])}, "
            f"C = {PRIOR_NEED[1]:g}) is used and the cross-validated AUC is only reported.\n\n")
    return text + markdown_table(["seed", "cross-validated AUC (folds)", "positives of the fit (folds)", "features", "test AUC"],
                                 rows), data


def stress(run: EvalRun, split: str, gold: list[np.ndarray], risk: np.ndarray) -> tuple[str, dict[str, Any]]:
    low = max_gold_risk(gold, risk) < RISKY_LEVEL
    top10 = run.top[run.seeds[0]][split]["dense"][:, :10]
    wide = low & (risk[top10] >= RISKY_LEVEL).any(axis=1)
    sets = (("Table 7's rule", table7_stress.RULE, table7_stress.select(run, split, gold, risk)), ("wider rule", WIDE_RULE, wide))
    text, data = [], {}
    for name, rule, mask in sets:
        rows, d = [], {"rule": rule, "n": int(mask.sum()), "methods": {}}
        for _, m in ROWS:
            if m not in run.methods:
                continue
            cells = []
            d["methods"][m] = {}
            for c in ("ndcg@5", "rvr@5", "srr@5"):
                per_seed = [float(np.nanmean(np.asarray(run.per_query[s][split][m][c])[mask])) if mask.any() else float("nan")
                            for s in run.seeds]
                mu = float(np.mean(per_seed))
                sd = float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0
                lo, hi = bootstrap_ci(per_query_mean(run, split, m, c)[mask], N_RESAMPLES, seed=0) if mask.any() else (math.nan, math.nan)
                d["methods"][m][c] = {"mean": mu, "std": sd, "ci95": [lo, hi]}
                cells.append(f"{f3(mu)} ± {f3(sd)} [{f3(lo)}, {f3(hi)}]")
            rows.append([f"`{m}`", *cells])
        data[name] = d
        text += [f"**{name}** ({rule}): n = {int(mask.sum())} of {len(gold)} queries.\n",
                 markdown_table(["method", HEADERS["ndcg@5"], HEADERS["rvr@5"], HEADERS["srr@5"]], rows), ""]
    return "\n".join(text), data


def plot(run: EvalRun, split: str, out_dir: Path) -> Path:
    with requires("repro", "the figures of riskrank reproduce"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    def xy(m: str) -> tuple[float, float]:
        s = run.summary(split, m)
        return s["safe_rvr@5"]["mean"], s["needrisk_hit@5"]["mean"]

    fig, ax = plt.subplots(figsize=(8.5, 6))
    markers = {"core": "o", "core+graph": "s", "core+graph+rule": "^", "core+graph+context": "D", "core+graph+context+rule": "P"}
    for p in SWEPT:
        ms = [f"{p}@lam={lam:g}" for lam in LAMBDAS]
        if not all(m in run.methods for m in ms):
            continue
        pts = [xy(m) for m in ms]
        line = ax.plot([a for a, _ in pts], [b for _, b in pts], marker=markers[p], ls="-", alpha=0.6, ms=4,
                       label=f"{p}: lambda {', '.join(f'{x:g}' for x in LAMBDAS)}")[0]
        for i in range(len(pts) - 1):
            ax.annotate("", xy=pts[i + 1], xytext=pts[i], arrowprops={"arrowstyle": "->", "color": line.get_color(), "lw": 1})
    for i, (_, m) in enumerate(ROWS):
        if m not in run.methods:
            continue
        x, y = xy(m)
        ax.scatter([x], [y], marker="*" if m in CONTEXT_METHODS else "o", s=140 if m in CONTEXT_METHODS else 60,
                   edgecolors="k", zorder=5)
        # Alternate the label side: core and core+graph often sit on one point.
        ax.annotate(m + (" (validated)" if m not in ("dense", "rel_only") else ""), (x, y), fontsize=8,
                    xytext=(6, 6) if i % 2 else (6, -12), textcoords="offset points")
    ax.set_xlabel("Safe-RVR@5 (risky tools shown to low-risk tasks; lower is safer)")
    ax.set_ylabel("NeedRisk-Hit@5 (a needed risky tool in the top 5; higher is better)")
    ax.set_title(f"{run.dataset} {split}: 3-seed means; curves: each pipeline's lambda sweep, arrows: rising lambda", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out_dir / f"context_{split}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _choices(run: EvalRun) -> str:
    rows = []
    for s in run.seeds:
        for f in run.choices[s]:
            r = f.get("residual") or {}
            ctx, pipes = r.get("context") or {}, r.get("pipelines") or {}
            for p in CONTEXT_METHODS:
                c = ctx.get(p)
                if c:
                    margin = "none" if c.get("margin") is None else f"{c['margin']:g}"
                    cap = str(c.get("cap_need", 1)) if p.endswith("+rule") else "none"
                    rows.append([str(s), str(f.get("fold")), f"`{p}`", f"{c['tau']:g}", margin, f"{c.get('lam_need', float('nan')):g}",
                                 f"{pipes.get(p, {}).get('lam', float('nan')):g}", cap])
    return markdown_table(["seed", "fold", "pipeline", "need threshold", "margin (logits)", "need lambda", "hold-back lambda",
                           "risk cap (task needs one)"], rows)


def context_report(
    dataset: str, out: str | Path, *, data: str | Path | None = None, encoder: Any = None, seeds: Sequence[int] = DEFAULT_SEEDS,
    reuse: bool = False, progress: bool = True, echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or reuse) the context evaluation and write context.md, context.json and the figures."""
    t0 = time.perf_counter()
    out, bench = open_report(dataset, out, data, "riskrank reproduce --context")
    methods = context_methods()
    run, reused = run_or_reuse(bench, methods, out / CACHE, seeds=seeds, encoder=encoder, reuse=reuse, progress=progress, echo=echo)
    risk = bench.registry.risk_levels
    with warnings.catch_warnings():
        # Safe-RVR and NeedRisk-Hit are NaN outside their query subsets: nanmean of those is NaN, by design.
        warnings.simplefilter("ignore", RuntimeWarning)
        return _write(run, bench, out, risk, t0, reused)


def _write(run: EvalRun, bench: Any, out: Path, risk: np.ndarray, t0: float, reused: bool = False) -> dict[str, Any]:
    dataset = run.dataset
    sections = [f"# riskrank: context-aware exposure on {dataset}\n",
                f"Protocol: {run.protocol}; encoder `{run.encoder}`; seeds {', '.join(map(str, run.seeds))}. "
                "Methods: only those this report reads, through the reproduction's runner (`riskrank reproduce --context`).\n",
                "## How the context stage is chosen\n",
                "The need head f_need(q) is a class-balanced logistic regression trained on the training and validation "
                "queries of each fit (label: a gold tool has r >= 3). A task below the need threshold is ranked with the hold-back lambda and, with "
                "the rule filter, a risk cap of 0; a task at or above it with the need lambda, its most relevant risky tool "
                "admitted within the margin, and, with the rule filter, a risk cap of 1 to 3 risky tools (a task's gold tools can "
                "hold more than one). Per context pipeline, the need threshold, the relevance "
                "margin, the need lambda, the hold-back lambda and (with the rule filter) that cap are chosen on the same fit's "
                f"queries by this rule: {CONTEXT_RULE}. The graph setting is `core+graph`'s. Test queries choose "
                f"nothing. Grids: threshold {_grid(CONTEXT_TAU_GRID)}; margin (logits) {_grid(CONTEXT_MARGIN_GRID)}; need lambda "
                f"{_grid(CONTEXT_LAM_NEED_GRID)}; hold-back lambda {_grid(CONTEXT_LAM_HOLD_GRID)}; risk cap "
                f"{_grid(CONTEXT_CAP_NEED_GRID)}. History, all of it after test figures had been seen: the grids were widened "
                "once, after a first 3-seed run (grids 0.2-0.8, -1..4, 0-1, 2-8) whose validation choices sat on their edges; "
                "the policy was changed once before that after a one-seed Seal-Tools test run of a policy that pushed every risky "
                "tool below the rest; and after the 3-seed run of the widened grids (which missed Safe-RVR@5 without the rule "
                "filter and NeedRisk-Hit@5 with it) the rule pipeline's cap for a task that needs a risky tool became a validated "
                "setting (it had been 1). A hard hold-back tried at the same time (every predicted-risky tool below every safe one "
                "for a task that needs none, without the rule filter too) lowered test NDCG@5 by 0.05 on UltraTool and was "
                "dropped. Then, after the 3-seed run of the validated cap (which missed Safe-RVR@5 on Seal-Tools, whose "
                "validation slices hold 1-5 high-risk queries, and missed both targets narrowly on UltraTool, with choices "
                "that varied from fold to fold), the choice moved from the fit's 20 % validation slice to 5-fold "
                "cross-validation over all of the fit's queries; its first 3-seed run showed the need head taking the "
                "query embedding on two Seal-Tools seeds with a test AUC of 0.705 (0.902 for the candidate-risk "
                "features), and the need head's choice then became the simplest option within one standard error of the "
                "best cross-validated AUC. No number was chosen on test queries.\n",
                "## Chosen settings per seed and fold\n", _choices(run), ""]
    extra: dict[str, Any] = {"rule": CONTEXT_RULE, "wide_stress_rule": WIDE_RULE, "splits": {}}
    figures = []
    for split in run.splits:
        gold = bench.splits[split].gold
        t5, d5 = table(run, split)
        tt, dt = targets(run, split)
        ta, da = need_auc(run, split, gold, risk)
        ts, ds = stress(run, split, gold, risk)
        fig = plot(run, split, out)
        figures.append(fig.name)
        extra["splits"][split] = {"n_queries": run.splits[split], "table5": d5, "targets": dt, "need_auc": da, "stress": ds}
        sections += [f"## Split `{split}` ({run.splits[split]} queries)\n", "### Table 5, extended\n", t5, "",
                     "### Targets\n", tt, "", "### The need head\n", ta, "", "### Stress sets\n", ts,
                     "### Safe-RVR@5 against NeedRisk-Hit@5\n", f"![context]({fig.name})\n"]
    # A report rebuilt from the cached run (--reuse) keeps the run's stage times; its own is the rebuild's.
    timing = {**run.timing, ("report_rebuild_s" if reused else "report_total_s"): time.perf_counter() - t0}
    sections += ["## Timing\n", "| stage | seconds |", "|---|---|", *[f"| {k} | {v:.1f} |" for k, v in timing.items()], ""]
    results = run.results_json()
    results["context"] = extra
    results["figures"] = figures
    results["timing"] = timing
    write_json(out / "context.json", results)
    atomic_write_bytes(out / "context.md", ("\n".join(sections) + "\n").encode())
    return results
