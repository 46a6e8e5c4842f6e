"""The automatic annotators against the benchmarks' released risk labels: docs/audit.md's
"Results on the benchmarks" table.

    python benchmarks/audit_agreement.py --json benchmarks/results/audit_agreement.json [--doc]

For UltraTool and Seal-Tools (all tools) and both pooled: the ``keyword`` annotator and
``head:crossfit`` (the residual design's risk head in 5 folds over tools, seed 42, each tool
scored by the heads that never saw its label) each against the released labels, and a
constant L1 rater as the reference a skewed label set needs: exact and within-one agreement
and quadratic kappa with percentile bootstrap 95% intervals over tools (1,000 resamples, seed
0: ``riskrank agreement``'s defaults), and each confusion matrix. The same numbers as
``riskrank audit --dataset D -a keyword|head:crossfit`` followed by ``riskrank agreement``
(the commands docs/audit.md lists), computed in one process. ``--doc`` prints the table the
doc quotes; :func:`doc_table` renders it (a test compares it with the doc).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ("ultratool", "sealtools")
ANNOTATORS = ("keyword", "head:crossfit")
NAMES = {"ultratool": "UltraTool", "sealtools": "Seal-Tools", "pooled": "both, pooled"}
BOOTSTRAP, SEED, FOLDS, HEAD_SEED = 1000, 0, 5, 42


def levels_of(dataset: str, data_dir: str | None = None) -> dict[str, np.ndarray]:
    """Released levels and each annotator's, over the benchmark's tools (same order)."""
    from riskrank.annotators import make_annotator
    from riskrank.datasets import load_benchmark

    bench = load_benchmark(dataset, data_dir)
    tools = list(bench.registry)
    out = {"released": np.asarray(bench.registry.risk_levels, dtype=np.int64)}
    for spec in ANNOTATORS:
        ann = make_annotator(spec, benchmark=bench, crossfit={"n_folds": FOLDS, "seed": HEAD_SEED, "progress": False})
        votes = dict(ann.annotate(tools))
        out[spec] = np.asarray([votes[i].level for i in range(len(tools))], dtype=np.int64)
    out["constant L1"] = np.ones(len(tools), dtype=np.int64)
    return out


def measure(data_dir: str | None = None) -> dict[str, Any]:
    from riskrank.agreement import pair_stats

    per = {ds: levels_of(ds, data_dir) for ds in DATASETS}
    per["pooled"] = {k: np.concatenate([per[ds][k] for ds in DATASETS]) for k in per[DATASETS[0]]}
    rows: dict[str, Any] = {}
    for name, lv in per.items():
        assert (lv["released"] > 0).all(), f"{name}: unlabelled tools in the released labels"
        rows[name] = {"n_tools": len(lv["released"]),
                      "annotators": {a: pair_stats("released", lv["released"], a, lv[a], bootstrap=BOOTSTRAP, seed=SEED).to_dict()
                                     for a in (*ANNOTATORS, "constant L1")}}
    return {"command": "python benchmarks/audit_agreement.py --json benchmarks/results/audit_agreement.json",
            "settings": {"bootstrap": BOOTSTRAP, "bootstrap_seed": SEED, "crossfit_folds": FOLDS, "crossfit_seed": HEAD_SEED},
            "rows": rows}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _ci(p: dict[str, Any], key: str, pct: bool) -> str:
    lo, hi = p["ci95"][key]
    return f" [{100 * lo:.1f}, {100 * hi:.1f}]" if pct else f" [{lo:.3f}, {hi:.3f}]"


def doc_table(artefact: dict[str, Any], paper: dict[str, Any]) -> str:
    """docs/audit.md's agreement table: the annotators' rows from the artefact, the paper's
    human audit (its figures, ``docs/paper-figures.json``) with binomial 95% half-widths."""
    lines = ["| registry (tools) | annotator | exact | within one | κ (quadratic) |", "|---|---|---|---|---|"]
    for name, row in artefact["rows"].items():
        label = f"{NAMES[name]} ({row['n_tools']:,})"
        for i, (ann, p) in enumerate(row["annotators"].items()):
            who = "constant L1 (reference)" if ann == "constant L1" else f"`{ann}`"
            if ann == "constant L1":  # no interval: a constant rater's figures are the label shares
                cells = [_pct(p["exact"]), _pct(p["within_one"]), f"{p['kappa_quadratic']:.0f}"]
            else:
                cells = [_pct(p["exact"]) + _ci(p, "exact", True), _pct(p["within_one"]) + _ci(p, "within_one", True),
                         f"{p['kappa_quadratic']:.3f}" + _ci(p, "kappa_quadratic", False)]
            lines.append(f"| {label} | {who} | " if i == 0 else f"| | {who} | ")
            lines[-1] += " | ".join(cells) + " |"
    h = paper["human_audit"]
    half = {k: 100 * 1.96 * (h[k] * (1 - h[k]) / h["n"]) ** 0.5 for k in ("exact", "within_one")}
    lines.append(f"| paper: human audit ({h['n']} pooled) | | {_pct(h['exact'])} (± {half['exact']:.1f}) | "
                 f"{_pct(h['within_one'])} (± {half['within_one']:.1f}) | {h['kappa_quadratic']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--data", default=None)
    ap.add_argument("--doc", action="store_true", help="print the doc's table")
    args = ap.parse_args()
    from riskrank.fileio import write_json

    t0 = time.perf_counter()
    out = measure(args.data)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    for name, row in out["rows"].items():
        for ann, p in row["annotators"].items():
            print(f"{name:<10} {ann:<14} exact {p['exact']:.3f} within one {p['within_one']:.3f} kappa {p['kappa_quadratic']:.3f}")
    if args.json_out:
        write_json(args.json_out, out)
        print(f"wrote {args.json_out}")
    if args.doc:
        print(doc_table(out, json.loads((ROOT / "docs" / "paper-figures.json").read_text())))


if __name__ == "__main__":
    main()
