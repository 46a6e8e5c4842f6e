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

from riskrank.datasets import load_benchmark
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
from riskrank.experiments.runner import DEFAULT_SEEDS, EvalRun, Runner
from riskrank.extras import requires
from riskrank.fileio import atomic_write_bytes, write_json
from riskrank.tables import markdown_table

RUN_CACHE = "cache/run"


def reproduction_methods(dataset: str, cross_encoders: bool = True, extra_cross_encoders: Sequence[str] = ()) -> list[str]:
    """Every method any table or figure reads, in a stable order, without duplicates."""
    ms: list[str] = []
    groups = [
        ["bm25", "dense", "mmr", "dense+rule", "risk_label_penalty"],
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
    """The reproduction's targets, ratios against dense in the same run (the encoder differs from
    the paper's, so ratios are compared, not absolute values)."""
    lines = []

    def ratio(m: str, metric: str, split: str) -> float:
        d = mean(run, split, "dense", metric)
        return mean(run, split, m, metric) / d if d else float("nan")

    def mark(ok: bool) -> str:
        return "met" if ok else "**missed**"

    if run.dataset == "ultratool":
        sp = "test"
        a, b = ratio("core+graph", "ndcg@5", sp), ratio("core+graph", "rvr@5", sp)
        lines.append(f"- core+graph NDCG@5 = {a:.2f}× dense (≥ 1.6×) and RVR@5 = {b:.2f}× dense (≤ 0.75×): {mark(a >= 1.6 and b <= 0.75)}")
        c, d, e = ratio("core+graph+rule", "rvr@5", sp), ratio("core+graph+rule", "srr@5", sp), ratio("core+graph+rule", "ndcg@5", sp)
        lines.append(f"- core+graph+rule RVR@5 = {c:.2f}× dense (≤ 0.5×), SRR@5 = {d:.2f}× (≤ 0.35×), NDCG@5 = {e:.2f}× (> 1×): {mark(c <= 0.5 and d <= 0.35 and e > 1)}")
    else:
        for sp in run.splits:
            a = ratio("core+graph", "ndcg@5", sp)
            c = ratio("core+graph+rule", "rvr@5", sp)
            lines.append(f"- {sp}: core+graph NDCG@5 = {a:.3f}× dense (≥ 0.98×): {mark(a >= 0.98)}; "
                         f"core+graph+rule RVR@5 = {c:.2f}× dense (< 1×): {mark(c < 1)}")
    return lines


def _protocol_text(run: EvalRun, bench) -> str:
    choices = [f for s in run.seeds for f in run.choices[s]]
    lams = [f["residual"]["lam"] for f in choices if "residual" in f]
    alphas = [f["residual"]["alpha"] for f in choices if "residual" in f]
    norms = sorted({f["residual"]["normalisation"] for f in choices if "residual" in f})
    betas = [f["residual"]["residual_weight"] for f in choices if "residual" in f]
    lines = [
        f"- Protocol: {run.protocol}.",
        f"- Encoder (frozen): `{run.encoder}`. Registry: {len(bench.registry)} tools with the released risk labels.",
        f"- Seeds: {', '.join(map(str, run.seeds))}; trained rows are mean ± std over seeds (std ddof=1); "
        "deterministic baselines and the cross-encoder (trained once per training split, one seed) have no std.",
        "- Every choice is made on a validation slice (20%, by query) of each training split, never on test queries: "
        "early stopping and the residual weight of the head, lambda (exposure budget: best validation NDCG@5 among "
        "lambdas whose validation RVR@5 is ≤ 0.75× the dense ranking's, one-standard-error rule toward larger lambda), "
        "alpha and the graph normalisation (best validation NDCG@5).",
    ]
    if lams:
        lines.append(f"- Validated lambda per fold/seed: {', '.join(f'{x:g}' for x in lams)}; alpha: {', '.join(f'{x:g}' for x in alphas)}; "
                     f"normalisations chosen: {', '.join(norms)}; residual weight: {', '.join(f'{x:g}' for x in betas)}.")
    for n in run.notes:
        lines.append(f"- Note: {n}")
    return "\n".join(lines)


def reproduce(
    dataset: str, out: str | Path, *, data: str | Path | None = None, encoder: Any = None,
    seeds: Sequence[int] = DEFAULT_SEEDS, reuse: bool = False, cross_encoders: bool = True,
    extra_cross_encoders: Sequence[str] = (), progress: bool = True, echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or reuse) the evaluation and write results.json, report.md and the figures."""
    with requires("repro", "riskrank reproduce (its figures)"):
        import matplotlib  # noqa: F401  (checked before the evaluation, not after it)
    t_start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    bench = load_benchmark(dataset, data)
    methods = reproduction_methods(dataset, cross_encoders, extra_cross_encoders)
    cache = out / RUN_CACHE
    run, reused = None, False
    if reuse:
        try:
            cached = EvalRun.load(cache)
        except Exception:
            cached = None
        if cached is None:
            echo(f"--reuse: no cached run in {cache}; running the evaluation")
        elif cached.seeds != [int(s) for s in seeds] or not set(methods) <= set(cached.methods) or cached.dataset != dataset:
            echo("--reuse: the cached run has other seeds, methods or dataset; running the evaluation")
        else:
            run = cached
            reused = True
            echo(f"--reuse: rebuilding the report from {cache}")
    if run is None:
        run = Runner(bench, methods, seeds=seeds, encoder=encoder, progress=progress).run()
        run.save(cache)
    t_report = time.perf_counter()
    figures: list[Path] = []
    sections = [f"# riskrank reproduction: {dataset}\n", "## Protocol\n", _protocol_text(run, bench), ""]
    extra: dict[str, Any] = {"significance": {}, "table7": {}, "figure4": {}}
    sections += ["## Targets, measured against dense in this run\n", *_targets(run), ""]
    for split in run.splits:
        qs = bench.splits[split]
        sections.append(f"## Split `{split}` ({run.splits[split]} queries)\n")
        sections += ["### Table 2: main results\n", table2_main.build(run, split), ""]
        sections += ["### Table 3: ablation\n", table3_ablation.build(run, split), ""]
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

