"""Leave one benchmark out: riskrank-base built on one benchmark, evaluated zero-shot on the other.

For each seed and direction, the base model is built exactly as the shipped one
(:func:`riskrank.base.build.build_base`: minimax fusion, the heads, the zero-shot form and
its settings chosen on the source's validation queries) but on the source benchmark alone,
then ranks the held-out benchmark's test queries (UltraTool test, Seal-Tools test_in) on a
registry it never saw: its ToolGraph has semantic and permission edges only, ``+rule`` reads
the held-out registry's audited levels, ``_pred`` the source risk head's predictions. The
risk heads are scored on the held-out registry's tools: AUC (r >= 3 vs < 3) of P(r >= 3) and
of the level head, and the quadratic kappa of the predicted levels. The bundled demo
registry (98 tools, 56 tasks) is a third registry neither model saw.

    python benchmarks/transfer_lobo.py --seeds 42,123,777 --out benchmarks/results/transfer_lobo.json
    python benchmarks/transfer_lobo.py --summarise FILE... --out benchmarks/results/transfer_lobo.json

Per-seed results are written as they finish (``--out``), so an interrupted run keeps them;
``--direction`` runs one direction (two processes can share the file's directory).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

DIRECTIONS = {"sealtools->ultratool": ("sealtools", "ultratool", "test"),
              "ultratool->sealtools": ("ultratool", "sealtools", "test_in")}
TARGET_RATIO, RVR_RATIO, TARGET_AUC = 1.03, 0.8, 0.80


def run(seeds: list[int], directions: list[str], out: Path, epochs: int, max_queries: int | None = None) -> None:
    import torch

    from riskrank.base.build import (
        BaseConfig,
        build_base,
        evaluate_modes,
        load_sources,
        risk_agreement,
        summarise,
    )
    from riskrank.datasets import load_benchmark

    torch.set_num_threads(1)
    done = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    for key in directions:
        src, tgt, split = DIRECTIONS[key]
        target = load_benchmark(tgt)
        demo = load_benchmark("demo")
        for seed in seeds:
            tag = f"{key}|{seed}"
            if tag in done["runs"]:
                continue
            t0 = time.perf_counter()
            built = build_base(load_sources([src]), BaseConfig(seed=seed, epochs=epochs, max_queries=max_queries))
            enc, ck = built.encoder, built.retriever.checkpoint
            row = {"source": src, "target": tgt, "split": split, "seed": seed, "fusion": ck.meta["inference"]["fusion"],
                   "pipelines": ck.meta["inference"]["pipelines"]}
            for name, bench, sp in ((tgt, target, split), ("demo", demo, "test")):
                qs = bench.splits[sp]
                emb = enc.encode(bench.registry.texts(), desc="tools")
                pq = evaluate_modes(ck, bench.registry, emb, enc.encode(qs.texts, desc="queries"), qs.texts, qs.gold, enc)
                row[name] = {"n_queries": len(qs), "methods": summarise(pq), "risk": risk_agreement(ck, bench.registry, emb)}
            row["seconds"] = round(time.perf_counter() - t0, 1)
            done["runs"][tag] = row
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(done, indent=1))
            tmp.replace(out)
            m = row[tgt]["methods"]
            print(f"{tag}: " + ", ".join(f"{k} {v['ndcg@5']:.3f}/{v['rvr@5']:.3f}" for k, v in m.items())
                  + f"; AUC {row[tgt]['risk']['auc_p_risky']:.3f} ({row['seconds']}s)", flush=True)


def summarise_runs(doc: dict) -> dict:
    """Mean and std over seeds, and each direction's verdict against the targets."""
    out: dict = {}
    for key, (_, tgt, split) in DIRECTIONS.items():
        runs = [r for t, r in doc["runs"].items() if t.startswith(key + "|")]
        if not runs:
            continue
        block: dict = {"seeds": sorted(r["seed"] for r in runs), "split": split}
        for reg in (tgt, "demo"):
            methods = runs[0][reg]["methods"].keys()
            agg = {m: {k: (float(np.mean([r[reg]["methods"][m][k] for r in runs])), float(np.std([r[reg]["methods"][m][k] for r in runs],
                                                                                                   ddof=1)) if len(runs) > 1 else 0.0)
                       for k in ("ndcg@5", "rvr@5")} for m in methods}
            base = max(agg["bm25"]["ndcg@5"][0], agg["dense"]["ndcg@5"][0])
            limit = RVR_RATIO * agg["dense"]["rvr@5"][0]
            ok = [m for m in agg if m not in ("bm25", "dense", "hybrid") and agg[m]["rvr@5"][0] <= limit + 1e-12]
            best = max(ok, key=lambda m: agg[m]["ndcg@5"][0]) if ok else None
            risk = {k: (float(np.mean([r[reg]["risk"][k] for r in runs])), float(np.min([r[reg]["risk"][k] for r in runs])))
                    for k in ("auc_p_risky", "auc_level", "kappa_quadratic")}
            block[reg] = {"methods": agg, "baseline": base, "rvr_limit": limit, "best_within_rvr": best,
                          "best_ratio": agg[best]["ndcg@5"][0] / base if best else None,
                          "met_relevance": bool(best and agg[best]["ndcg@5"][0] >= TARGET_RATIO * base),
                          "rel_only_ratio": agg["rel_only"]["ndcg@5"][0] / base,
                          "risk": risk, "met_auc": risk["auc_p_risky"][0] >= TARGET_AUC}
        out[key] = block
    return out


def table_md(summary: dict) -> str:
    cols = ("bm25", "dense", "hybrid", "rel_only", "core", "core+graph", "core+graph+rule", "core+graph+rule_pred")
    lines = ["| direction | registry | " + " | ".join(cols) + " | best mode within RVR@5 <= 0.8 x dense | risk AUC (r>=3) / kappa |",
             "|---|---|" + "---|" * len(cols) + "---|---|"]
    for key, block in summary.items():
        for reg in (block_target(key), "demo"):
            b = block[reg]
            cells = [f"{b['methods'][c]['ndcg@5'][0]:.3f} / {b['methods'][c]['rvr@5'][0]:.3f}" for c in cols]
            best = (f"{b['best_within_rvr']} {b['best_ratio']:.3f}x: {'met' if b['met_relevance'] else 'missed'}"
                    if b["best_within_rvr"] else "none within the limit: missed")
            r = b["risk"]
            auc = f"{r['auc_p_risky'][0]:.3f} (min {r['auc_p_risky'][1]:.3f}) / {r['kappa_quadratic'][0]:.3f}: " \
                  f"{'met' if b['met_auc'] else 'missed'}"
            lines.append(f"| {key} (seeds {','.join(map(str, block['seeds']))}) | {reg} | " + " | ".join(cells) + f" | {best} | {auc} |")
    return "\n".join(lines)


def block_target(key: str) -> str:
    return DIRECTIONS[key][1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="42,123,777")
    ap.add_argument("--direction", choices=list(DIRECTIONS), action="append")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--max-queries", type=int, default=None, help="A reduced build (smoke runs).")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/transfer_lobo.json"))
    ap.add_argument("--summarise", type=Path, nargs="+", default=None,
                    help="Merge these results files into --out, add the summary and the table, print the table.")
    ap.add_argument("--card", type=Path, default=None, help="With --summarise: a base-model folder whose card gets the table.")
    a = ap.parse_args()
    if a.summarise:
        doc = {"runs": {}}
        for f in a.summarise:
            doc["runs"].update(json.loads(f.read_text())["runs"])
        s = summarise_runs(doc)
        md = table_md(s)
        print(md)
        doc["summary"] = s
        doc["table_md"] = md
        a.out.write_text(json.dumps(doc, indent=1))
        if a.card:
            from riskrank.base.build import attach_transfer

            attach_transfer(a.card, {"summary": s, "table_md": md, "command": "make transfer", "results": str(a.out)})
            print(f"wrote the transfer block of {a.card}/card.json")
        return
    run([int(s) for s in a.seeds.split(",")], a.direction or list(DIRECTIONS), a.out, a.epochs, a.max_queries)


if __name__ == "__main__":
    sys.exit(main())
