"""``riskrank reproduce``: the paper's whole evaluation on one dataset, in one command.

Runs every method the tables and figures need (one :class:`Runner` pass, so each model is
trained once per seed and fold), caches the per-query results (``--reuse`` rebuilds the
report without retraining), and writes OUT/results.json (docs/results-contract.md plus the
table data), OUT/report.md and the figures as PNG.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.datasets import load_benchmark
from riskrank.evaluation.runner import DEFAULT_SEEDS, EvalRun, Runner
from riskrank.experiments import (
    appendix_e2_top100,
    figure3_lambda,
    figure4_subsets,
    significance,
    table2_main,
    table3_ablation,
    table4_edges,
    table5_context,
    table6_exposure,
    table7_stress,
    table8_qualitative,
)
from riskrank.experiments.common import f3, mean
from riskrank.extras import requires
from riskrank.fileio import atomic_write_bytes, write_json
from riskrank.first_stage import Fusion
from riskrank.tables import markdown_table
from riskrank.training.config import CHOSEN_AFTER_TEST

RUN_CACHE = "cache/run"


def reproduction_methods(dataset: str, cross_encoders: bool = True, extra_cross_encoders: Sequence[str] = ()) -> list[str]:
    """Every method any table or figure reads, in a stable order, without duplicates."""
    ms: list[str] = []
    groups = [
        ["bm25", "dense", "hybrid", "mmr", "dense+rule", "risk_label_penalty"],
        ["ce-minilm-ft"] if cross_encoders else [],
        [f"ce:{m}" for m in extra_cross_encoders],
        list(table2_main.METHODS), list(table3_ablation.METHODS), [m for _, m in table4_edges.methods(dataset)],
        figure3_lambda.methods(), list(table5_context.METHODS), list(table6_exposure.METHODS),
        list(appendix_e2_top100.METHODS), list(table7_stress.METHODS), list(figure4_subsets.METHODS),
        ["rel_only", "core+rule"],
    ]
    for g in groups:
        for m in g:
            if m not in ms and (cross_encoders or m != "ce-minilm-ft"):
                ms.append(m)
    return ms


def _targets(run: EvalRun) -> list[str]:
    """riskrank's targets for this run, every ratio against a baseline measured in the same run
    (the encoder differs from the paper's, so ratios are compared, not absolute values): the
    3-seed means, and how many seeds meet each on their own."""
    lines = []

    def seed_ratio(m: str, metric: str, split: str, base: str | None) -> np.ndarray:
        own = run.seed_means(split, m)[metric]
        if base is None:
            return own
        return own / run.seed_means(split, base)[metric]

    def mark(ok: np.ndarray, mean_ok: bool) -> str:
        return f"{'met' if mean_ok else '**missed**'} ({int(ok.sum())}/{ok.size} seeds)"

    def check(label: str, m: str, metric: str, split: str, base: str | None, op: str, bound: float) -> str:
        per = seed_ratio(m, metric, split, base)
        mean_value = mean(run, split, m, metric) / (mean(run, split, base, metric) if base else 1.0)
        ok = per >= bound - 1e-12 if op == ">=" else per <= bound + 1e-12
        mean_ok = mean_value >= bound - 1e-12 if op == ">=" else mean_value <= bound + 1e-12
        unit = f"× {base}" if base else ""
        return f"{label} = {mean_value:.3f}{unit} ({op} {bound:g}{unit}): {mark(ok, mean_ok)}"

    if run.dataset == "ultratool":
        sp = "test"
        lines.append("- " + check("core+graph NDCG@5", "core+graph", "ndcg@5", sp, "dense", ">=", 2.05) + "; "
                     + check("RVR@5", "core+graph", "rvr@5", sp, "dense", "<=", 0.65))
        lines.append("- " + check("core+graph+rule NDCG@5", "core+graph+rule", "ndcg@5", sp, None, ">=", 0.62) + "; "
                     + check("RVR@5", "core+graph+rule", "rvr@5", sp, "dense", "<=", 0.40))
    else:
        for sp in run.splits:
            lines.append(f"- {sp}: " + check("core+graph NDCG@5", "core+graph", "ndcg@5", sp, "bm25", ">=", 1.04) + "; "
                         + check("RVR@5", "core+graph", "rvr@5", sp, "dense", "<=", 1.0))
            lines.append(f"- {sp}: " + check("core+graph+rule NDCG@5", "core+graph+rule", "ndcg@5", sp, "bm25", ">=", 1.0) + "; "
                         + check("RVR@5", "core+graph+rule", "rvr@5", sp, "dense", "<=", 0.6))
    return lines


def _head_choices(run: EvalRun, key: str = "residual") -> list[dict]:
    return [f[key] for s in run.seeds for f in run.choices[s] if key in f]


def _protocol_text(run: EvalRun, bench) -> str:
    heads = _head_choices(run)
    fusions = [f["fusion"] for s in run.seeds for f in run.choices[s] if "fusion" in f]
    lines = [
        f"- Protocol: {run.protocol}.",
        f"- Encoder (frozen): `{run.encoder}`. Registry: {len(bench.registry)} tools with the released risk labels.",
        f"- Seeds: {', '.join(map(str, run.seeds))}; trained rows are mean ± std over seeds (std ddof=1); "
        "deterministic baselines and the cross-encoder (trained once per training split, one seed) have no std.",
        "- Every choice is made on the training queries of each fold, never on test queries: the hybrid fusion on all of "
        "them (it has no trained parameter), everything else on a validation slice (20%, by query): early stopping and "
        "the residual weight of the head, then per pipeline alpha (best validation NDCG@5, kept only when its gain over "
        "alpha = 0 exceeds one standard error) and lambda (exposure budget: the best validation NDCG@5 among the "
        "lambdas whose validation RVR@5 is at most R × the dense ranking's, R = 0.65 without the rule filter and 0.40 "
        "with it, one-standard-error rule toward the larger lambda). Not every default was chosen before the test "
        "figures: " + "; ".join(c.note for c in CHOSEN_AFTER_TEST) + ".",
        "- riskrank's head: the validated fusion as its first stage, the lexical features beside the cosine, and the "
        "penalty s = logit − λ · P(r ≥ 3) (docs/architecture.md); `core+graph+rule_pred` reads risk levels cross-fitted "
        "over tools (5 folds: no tool's level comes from a head that saw its label).",
    ]
    if fusions:
        counts: dict[str, int] = {}
        for fu in fusions:
            d = Fusion.from_dict(fu).describe()
            counts[d] = counts.get(d, 0) + 1
        lines.append("- Validated fusion (per fold and seed): " + "; ".join(f"{d} ({n}/{len(fusions)})" for d, n in counts.items()) + ".")
    if heads:
        betas = [f.get("residual_weight") for f in heads]
        epochs = [f.get("best_epoch") for f in heads]
        lines.append(f"- Residual weight per fold/seed: {', '.join(f'{x:g}' for x in betas if x is not None)}; best epoch: "
                     f"{', '.join(str(x) for x in epochs)}.")
        aucs = [f["risk_head"].get("heldout_auc") for f in heads if f.get("risk_head")]
        aucs_p = [f["risk_head"].get("heldout_auc_p_risky") for f in heads if f.get("risk_head")]
        if aucs:
            lines.append(f"- Risk heads, held-out-tool AUC (r ≥ 3 vs < 3, 5 folds over tools): levels head "
                         f"{min(aucs):.3f}–{max(aucs):.3f}, P(r ≥ 3) classifier {min(aucs_p):.3f}–{max(aucs_p):.3f}; "
                         f"flagged as not learned: {sum(not f['risk_head'].get('learned', True) for f in heads)}/{len(heads)}.")
    for n in run.notes:
        lines.append(f"- Note: {n}")
    return "\n".join(lines)


def _choices_table(run: EvalRun) -> str:
    """lambda (alpha when > 0) per pipeline, per seed (and fold)."""
    rows = []
    names = []
    for f in _head_choices(run):
        for name in (f.get("pipelines") or {}):
            if name not in names:
                names.append(name)
    for name in names:
        cells = []
        for s in run.seeds:
            vals = []
            for f in run.choices[s]:
                p = (f.get("residual") or {}).get("pipelines", {}).get(name)
                if p is not None:
                    vals.append(f"{p['lam']:g}" + (f" (α {p['alpha']:g})" if p["alpha"] else ""))
            cells.append(", ".join(vals))
        rows.append([f"`{name}`", *cells])
    return markdown_table(["pipeline", *[f"seed {s}" for s in run.seeds]], rows)


def open_report(dataset: str, out: str | Path, data: str | Path | None, what: str) -> tuple[Path, Any]:
    """What every report does first: check the figure extra (before the evaluation, not after
    it), create the output folder and load the benchmark. Returns (out, benchmark)."""
    with requires("repro", f"{what} (its figures)"):
        import matplotlib  # noqa: F401
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return out, load_benchmark(dataset, data)


def run_or_reuse(
    bench: Any, methods: Sequence[str], cache: Path, *, seeds: Sequence[int], encoder: Any, reuse: bool, progress: bool,
    echo: Callable[[str], None],
) -> tuple[EvalRun, bool]:
    """The evaluation of ``methods`` on ``bench``: the run cached in ``cache`` when ``reuse``
    and it holds these seeds, methods and dataset, else a new run (saved there). Returns
    (run, whether it was reused)."""
    if reuse:
        try:
            cached = EvalRun.load(cache)
        except Exception:
            cached = None
        if cached is None:
            echo(f"--reuse: no cached run in {cache}; running the evaluation")
        elif cached.seeds != [int(s) for s in seeds] or not set(methods) <= set(cached.methods) or cached.dataset != bench.name:
            echo("--reuse: the cached run has other seeds, methods or dataset; running the evaluation")
        else:
            echo(f"--reuse: rebuilding the report from {cache}")
            return cached, True
    run = Runner(bench, list(methods), seeds=seeds, encoder=encoder, progress=progress).run()
    run.save(cache)
    return run, False


def reproduce(
    dataset: str, out: str | Path, *, data: str | Path | None = None, encoder: Any = None,
    seeds: Sequence[int] = DEFAULT_SEEDS, reuse: bool = False, cross_encoders: bool = True,
    extra_cross_encoders: Sequence[str] = (), progress: bool = True, echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or reuse) the evaluation and write results.json, report.md and the figures."""
    t_start = time.perf_counter()
    out, bench = open_report(dataset, out, data, "riskrank reproduce")
    methods = reproduction_methods(dataset, cross_encoders, extra_cross_encoders)
    run, reused = run_or_reuse(bench, methods, out / RUN_CACHE, seeds=seeds, encoder=encoder, reuse=reuse,
                               progress=progress, echo=echo)
    t_report = time.perf_counter()
    figures: list[Path] = []
    sections = [f"# riskrank reproduction: {dataset}\n", "## Protocol\n", _protocol_text(run, bench), ""]
    extra: dict[str, Any] = {"significance": {}, "table7": {}, "figure4": {}}
    sections += ["## Targets, against the baselines of this run\n", *_targets(run), ""]
    if _head_choices(run):
        sections += ["## Lambda per pipeline (validated; alpha when the graph is kept)\n", _choices_table(run), ""]
    for split in run.splits:
        qs = bench.splits[split]
        sections.append(f"## Split `{split}` ({run.splits[split]} queries)\n")
        sections += ["### Table 2: main results\n", table2_main.build(run, split), ""]
        sections += ["### Table 3: ablation\n", table3_ablation.build(run, split), ""]
        sections += ["### Predicted risk levels: in-sample vs cross-fitted\n", table3_ablation.build_levels(run, split), ""]
        sections += ["### Table 4: edge-type ablation\n", table4_edges.build(run, split), ""]
        figures += figure3_lambda.plot(run, split, out)
        sections += ["### Figure 3: lambda\n", f"![Figure 3]({figures[-1].name})\n",
                     _lambda_table(run, split), ""]
        sections += ["### Table 5: context-aware safety\n", table5_context.build(run, split), ""]
        t4, d4 = figure4_subsets.table(run, split)
        extra["figure4"][split] = d4
        if d4:
            figures += figure4_subsets.plot(d4, run, split, out)
            sections += ["### Figure 4: query subsets\n", f"![Figure 4]({figures[-1].name})\n", t4, ""]
        sections += ["### Table 6: candidate exposure\n", table6_exposure.build(run, split), ""]
        sections += ["### Appendix E.2: candidate-matched top-100\n", appendix_e2_top100.build(run, split), ""]
        t7, d7 = table7_stress.build(run, split, qs.gold, bench.registry.risk_levels)
        extra["table7"][split] = d7
        sections += ["### Table 7: stress test\n", t7, ""]
        sections += ["### Table 8: qualitative inspection\n", table8_qualitative.build(run, split, qs, bench.registry), ""]
        sig = significance.compute(run, split)
        extra["significance"][split] = sig
        sections += ["### Significance\n", significance.build(sig), ""]
    timing = dict(run.timing)
    timing["report_s"] = time.perf_counter() - t_report
    if not reused:
        timing["total_s"] = time.perf_counter() - t_start
    else:
        timing["report_rebuild_s"] = time.perf_counter() - t_start
    run.timing = timing
    sections += ["## Timing\n", "| stage | seconds |", "|---|---|", *[f"| {k} | {v:.1f} |" for k, v in timing.items()], ""]
    sections.append("Figures: " + ", ".join(f"`{p.name}`" for p in figures))
    results = run.results_json()
    results["tables"] = extra
    results["figures"] = [p.name for p in figures]
    write_json(out / "results.json", results)
    atomic_write_bytes(out / "report.md", ("\n".join(sections) + "\n").encode())
    return results


def _lambda_table(run: EvalRun, split: str) -> str:
    rows = []
    for cfg, label in figure3_lambda.CONFIGS:
        for lam in figure3_lambda.LAMBDAS:
            m = f"{cfg}@lam={lam:g}"
            if m in run.methods:
                s = run.summary(split, m)
                rows.append([label, f"{lam:g}", f"{f3(s['ndcg@5']['mean'])} ± {f3(s['ndcg@5']['std'])}",
                             f"{f3(s['rvr@5']['mean'])} ± {f3(s['rvr@5']['std'])}"])
    return markdown_table(["configuration", "lambda", "NDCG@5", "RVR@5"], rows)

