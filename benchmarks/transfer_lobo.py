"""Leave one benchmark out: riskrank-base built on one benchmark, evaluated zero-shot on the other.

For each seed and direction, the base model is built exactly as the shipped one
(:func:`riskrank.training.base_model.build_base`: minimax fusion, the heads, the zero-shot form and
its settings chosen on the source's validation queries) but on the source benchmark alone,
then ranks the held-out benchmark's test queries (UltraTool test, Seal-Tools test_in) on a
registry it never saw: its ToolGraph has semantic and permission edges only, ``+rule`` reads
the held-out registry's audited levels, ``_pred`` the source risk head's predictions. The
risk heads are scored on the held-out registry's tools: AUC (r >= 3 vs < 3) of P(r >= 3) and
of the level head, and the quadratic kappa of the predicted levels. The bundled demo
registry (98 tools, 56 tasks) is a third registry neither model saw.

The context modes (``core+graph+context``, ``core+graph+context+rule``) run beside the report
modes, with the need head and settings the build chose for them (cross-validated over the
source's queries, in the zero-shot form; :func:`context_record` keeps them with each run); the summary scores them against their targets: Safe-RVR@5 <= ``core+graph+rule``'s,
NeedRisk-Hit@5 >= 0.9 x ``rel_only``'s, NDCG@5 >= ``core+graph``'s (means over seeds, with the
distance and the seeds that meet each), and the need head's AUC on the held-out queries.

    python benchmarks/transfer_lobo.py --seeds 42,123,777 --out benchmarks/results/transfer_lobo.json
    python benchmarks/transfer_lobo.py --summarise FILE... --out benchmarks/results/transfer_lobo.json

The **frontier** (a diagnostic, never a choice): each run also ranks the held-out test with
every risk-aware mode at every lambda of :data:`FRONTIER_LAMS`; the summary reports the best
NDCG@5 any (mode, lambda) reaches within RVR@5 <= 0.8 x dense, averaged over seeds. That
lambda is picked on the test queries themselves, so it is an upper bound on what a better
zero-shot lambda could do for the target, not a result of the model.

Per-seed results are written as they finish (``--out``), so an interrupted run keeps them;
``--direction`` runs one direction (two processes can share the file's directory).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.fileio import atomic_write_text

DIRECTIONS = {"sealtools->ultratool": ("sealtools", "ultratool", "test"),
              "ultratool->sealtools": ("ultratool", "sealtools", "test_in")}
TARGET_RATIO, RVR_RATIO, TARGET_AUC = 1.03, 0.8, 0.80
#: The context modes, evaluated beside the report modes.
CONTEXT_MODES = ("core+graph+context", "core+graph+context+rule")
#: The context targets: Safe-RVR@5 <= core+graph+rule's, NeedRisk-Hit@5 >= 0.9 x rel_only's,
#: NDCG@5 >= core+graph's.
NEED_RATIO = 0.9
#: The metrics aggregated over seeds; Safe-RVR@5 and NeedRisk-Hit@5 are means over the
#: low-risk and high-risk queries only (None on a registry without such queries).
METRICS = ("ndcg@5", "rvr@5", "safe_rvr@5", "needrisk_hit@5")
#: The frontier's modes and lambdas (module docstring).
FRONTIER_MODES = ("core", "core+graph", "core+graph+rule", *CONTEXT_MODES)
FRONTIER_LAMS = (0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def frontier(ck: Any, registry: Any, emb: np.ndarray, q_emb: np.ndarray, texts: list[str], gold: list, encoder: Any) -> dict:
    """Mean metrics of every (mode, lambda) of the frontier on one registry's queries."""
    from riskrank.metrics import evaluate
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.rules import PAPER_FILL

    r = RiskAwareRetriever(registry, encoder=encoder, checkpoint=ck, tool_emb=emb, progress=False)
    lexical = r.lexical_index.evidence(texts)
    out: dict = {}
    for mode in FRONTIER_MODES:
        for lam in FRONTIER_LAMS:
            m = evaluate(r.rank_batch(q_emb, mode=mode, lam=lam, fill=PAPER_FILL, lexical=lexical).order, list(gold), registry.risk_levels)
            out[f"{mode}|{lam:g}"] = {k: float(np.nanmean(m[k])) if np.isfinite(m[k]).any() else None for k in METRICS}
    return out


def context_record(built: Any) -> dict:
    """What the build chose for the context stage in its zero-shot form (the need head, then
    tau, margin and both lambdas per context pipeline, cross-validated over the source's queries)."""
    settings = built.retriever.checkpoint.meta["inference"].get("context")
    rec = built.retriever.training.validation.get("context", {})
    return {"settings": settings, "rule": rec.get("rule"), "reference": rec.get("reference"),
            "selected": {p: dict(rec[p]) for p in CONTEXT_MODES if p in rec},
            "need_head": {k: v for k, v in rec.get("need_head", {}).items() if k != "grid"}}


def need_auc(ck: Any, registry: Any, emb: np.ndarray, q_emb: np.ndarray, texts: list[str], gold: list, encoder: Any,
             levels: np.ndarray | None = None) -> dict:
    """The need head on held-out queries: AUC of its need against "a gold tool has r >= 3"
    (``levels``: the reference levels of r; default the registry's audited ones)."""
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.rules import PAPER_FILL
    from riskrank.training import need_labels

    r = RiskAwareRetriever(registry, encoder=encoder, checkpoint=ck, tool_emb=emb, progress=False)
    b = r.rank_batch(q_emb, mode=CONTEXT_MODES[0], fill=PAPER_FILL, lexical=r.lexical_index.evidence(texts), top=5)
    keep = [i for i, g in enumerate(gold) if len(g)]
    y = need_labels([gold[i] for i in keep], registry.risk_levels if levels is None else levels)
    need = np.asarray(b.context.need)[keep]
    tau = float(b.context.tau)
    out: dict = {"n": len(keep), "n_need": int(y.sum()), "tau": tau, "flagged": float((need >= tau).mean()),
                 "recall_at_tau": float((need[y] >= tau).mean()) if y.any() else None}
    if y.any() and not y.all():
        from sklearn.metrics import roc_auc_score

        out["auc"] = float(roc_auc_score(y, need))
    else:
        out["auc"] = None
    return out


def run(seeds: list[int], directions: list[str], out: Path, epochs: int, max_queries: int | None = None) -> None:
    import torch

    from riskrank.datasets import load_benchmark
    from riskrank.training.base_model import (
        REPORT_MODES,
        BaseConfig,
        build_base,
        evaluate_modes,
        load_sources,
        risk_agreement,
        summarise,
    )

    torch.set_num_threads(1)
    modes = (*REPORT_MODES, *CONTEXT_MODES)
    done = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    for key in directions:
        src, tgt, split = DIRECTIONS[key]
        target = load_benchmark(tgt)
        demo = load_benchmark("demo")
        for seed in seeds:
            tag = f"{key}|{seed}"
            if tag in done["runs"] and all(m in done["runs"][tag][tgt]["methods"] for m in modes) and "frontier" in done["runs"][tag][tgt]:
                continue
            t0 = time.perf_counter()
            built = build_base(load_sources([src]), BaseConfig(seed=seed, epochs=epochs, max_queries=max_queries))
            context = context_record(built)
            enc, ck = built.encoder, built.retriever.checkpoint
            row = {"source": src, "target": tgt, "split": split, "seed": seed, "fusion": ck.meta["inference"]["fusion"],
                   "pipelines": ck.meta["inference"]["pipelines"], "context": context}
            for name, bench, sp in ((tgt, target, split), ("demo", demo, "test")):
                qs = bench.splits[sp]
                emb = enc.encode(bench.registry.texts(), desc="tools")
                q_emb = enc.encode(qs.texts, desc="queries")
                pq = evaluate_modes(ck, bench.registry, emb, q_emb, qs.texts, qs.gold, enc, modes=modes)
                subsets = {k: int(np.isfinite(np.asarray(pq["core"][k], dtype=np.float64)).sum()) for k in ("safe_rvr@5", "needrisk_hit@5")}
                row[name] = {"n_queries": len(qs), "n_subsets": subsets, "methods": summarise(pq),
                             "risk": risk_agreement(ck, bench.registry, emb),
                             "need": need_auc(ck, bench.registry, emb, q_emb, list(qs.texts), list(qs.gold), enc)}
                if name == tgt:
                    row[name]["frontier"] = frontier(ck, bench.registry, emb, q_emb, list(qs.texts), list(qs.gold), enc)
            row["seconds"] = round(time.perf_counter() - t0, 1)
            done["runs"][tag] = row
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out, json.dumps(done, indent=1))
            m = row[tgt]["methods"]
            print(f"{tag}: " + ", ".join(f"{k} {v['ndcg@5']:.3f}/{v['rvr@5']:.3f}" for k, v in m.items())
                  + f"; AUC {row[tgt]['risk']['auc_p_risky']:.3f} ({row['seconds']}s)", flush=True)


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and std (ddof 1) over the seeds where a metric is defined (None: a registry
    without the metric's query subset, Safe-RVR@5's low-risk or NeedRisk-Hit@5's high-risk
    queries); (None, None) when it is defined on none."""
    v = [float(x) for x in values if x is not None and np.isfinite(x)]
    if not v:
        return None, None
    return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def context_verdict(agg: dict, per_seed: list[dict]) -> dict:
    """Each context mode against the three targets (means over seeds): Safe-RVR@5 <=
    core+graph+rule's, NeedRisk-Hit@5 >= 0.9 x rel_only's, NDCG@5 >= core+graph's, with the
    distance (mode minus bound: <= 0 meets the Safe-RVR target, >= 0 the other two) and how
    many seeds meet each on their own."""
    refs = {"safe_rvr@5": ("core+graph+rule", 1.0, "le"), "needrisk_hit@5": ("rel_only", NEED_RATIO, "ge"),
            "ndcg@5": ("core+graph", 1.0, "ge")}
    out: dict = {}
    for mode in CONTEXT_MODES:
        if mode not in agg:
            continue
        v: dict = {}
        for metric, (ref, factor, op) in refs.items():
            x, r = agg[mode][metric][0], agg[ref][metric][0]
            if x is None or r is None:
                v[metric] = {"value": x, "bound": None, "reference": ref, "distance": None, "met": None, "seeds_met": None}
                continue
            bound = factor * r
            met = x <= bound + 1e-12 if op == "le" else x >= bound - 1e-12
            seeds = [(s[mode][metric], factor * s[ref][metric]) for s in per_seed
                     if s[mode][metric] is not None and s[ref][metric] is not None]
            seeds_met = sum(1 for a, b in seeds if (a <= b + 1e-12 if op == "le" else a >= b - 1e-12))
            v[metric] = {"value": x, "bound": bound, "reference": ref, "factor": factor, "op": op, "distance": x - bound,
                         "ratio": x / r if r else None, "met": bool(met), "seeds_met": f"{seeds_met}/{len(seeds)}"}
        v["met_all"] = all(t["met"] for t in v.values() if isinstance(t, dict)) if all(
            t["met"] is not None for t in v.values() if isinstance(t, dict)) else None
        out[mode] = v
    return out


def summarise_runs(doc: dict) -> dict:
    """Mean and std over seeds, and each direction's verdict against the targets."""
    out: dict = {}
    for key, (_, tgt, split) in DIRECTIONS.items():
        runs = [r for t, r in doc["runs"].items() if t.startswith(key + "|")]
        if not runs:
            continue
        block: dict = {"seeds": sorted(r["seed"] for r in runs), "split": split}
        for reg in (tgt, "demo"):
            methods = [m for m in runs[0][reg]["methods"] if all(m in r[reg]["methods"] for r in runs)]
            agg = {m: {k: _mean_std([r[reg]["methods"][m].get(k) for r in runs]) for k in METRICS} for m in methods}
            base = max(agg["bm25"]["ndcg@5"][0], agg["dense"]["ndcg@5"][0])
            limit = RVR_RATIO * agg["dense"]["rvr@5"][0]
            # The relevance verdict is over the report modes, as before the context modes existed.
            ok = [m for m in agg if m not in ("bm25", "dense", "hybrid", *CONTEXT_MODES) and agg[m]["rvr@5"][0] <= limit + 1e-12]
            ok_ctx = [m for m in agg if m in CONTEXT_MODES and agg[m]["rvr@5"][0] <= limit + 1e-12]
            best = max(ok, key=lambda m: agg[m]["ndcg@5"][0]) if ok else None
            risk = {k: (float(np.mean([r[reg]["risk"][k] for r in runs])), float(np.min([r[reg]["risk"][k] for r in runs])))
                    for k in ("auc_p_risky", "auc_level", "kappa_quadratic")}
            block[reg] = {"methods": agg, "baseline": base, "rvr_limit": limit, "best_within_rvr": best,
                          "best_ratio": agg[best]["ndcg@5"][0] / base if best else None,
                          "met_relevance": bool(best and agg[best]["ndcg@5"][0] >= TARGET_RATIO * base),
                          "rel_only_ratio": agg["rel_only"]["ndcg@5"][0] / base,
                          "risk": risk, "met_auc": risk["auc_p_risky"][0] >= TARGET_AUC}
            if any(m in agg for m in CONTEXT_MODES):
                block[reg]["n_subsets"] = runs[0][reg].get("n_subsets")
                block[reg]["context"] = context_verdict(agg, [r[reg]["methods"] for r in runs])
                block[reg]["context_within_rvr"] = {m: {"ndcg_ratio": agg[m]["ndcg@5"][0] / base,
                                                        "met_relevance": agg[m]["ndcg@5"][0] >= TARGET_RATIO * base} for m in ok_ctx}
                needs = [r[reg].get("need") for r in runs if r[reg].get("need")]
                if needs:
                    block[reg]["need_head"] = {k: _mean_std([n.get(k) for n in needs]) for k in ("auc", "flagged", "recall_at_tau")}
                    block[reg]["need_head"]["tau"] = [n["tau"] for n in needs]
                block[reg]["context_settings"] = [r.get("context", {}).get("settings") for r in runs]
            if all("frontier" in r[reg] for r in runs):
                block[reg]["frontier"] = frontier_summary([r[reg]["frontier"] for r in runs], base, limit)
        out[key] = block
    return out


def frontier_summary(per_seed: list[dict], base: float, limit: float) -> dict:
    """The frontier over seeds: each (mode, lambda)'s mean NDCG@5 and RVR@5, and the best NDCG@5
    within the RVR@5 limit (the lambda chosen on the test itself: an upper bound)."""
    points = {key: {k: float(np.mean([s[key][k] for s in per_seed])) for k in ("ndcg@5", "rvr@5")} for key in per_seed[0]}
    ok = {key: v for key, v in points.items() if v["rvr@5"] <= limit + 1e-12}
    best = max(ok, key=lambda key: ok[key]["ndcg@5"]) if ok else None
    return {"points": points, "best": best, "best_ndcg": ok[best]["ndcg@5"] if best else None,
            "best_rvr": ok[best]["rvr@5"] if best else None, "best_ratio": ok[best]["ndcg@5"] / base if best else None,
            "reachable": bool(best and ok[best]["ndcg@5"] >= TARGET_RATIO * base)}


def frontier_md(summary: dict) -> str:
    """One line per direction: the frontier's best point within the RVR@5 limit."""
    lines = ["| direction | max(bm25, dense) | RVR@5 limit (0.8 x dense) | best (mode, lambda) on the test itself | NDCG@5 / RVR@5 "
             "| ratio | 1.03x reachable by a lambda |", "|---|---|---|---|---|---|---|"]
    for key, block in summary.items():
        b = block[block_target(key)]
        f = b.get("frontier")
        if not f:
            continue
        cell = f"{f['best_ndcg']:.3f} / {f['best_rvr']:.3f}" if f["best"] else "none"
        ratio = f"{f['best_ratio']:.3f}x" if f["best"] else "n/a"
        where = "none" if not f["best"] else "{}, lambda {}".format(*f["best"].split("|"))
        lines.append(f"| {key} | {b['baseline']:.3f} | {b['rvr_limit']:.3f} | {where} | {cell} | {ratio} | "
                     f"{'yes' if f['reachable'] else 'no'} |")
    return "\n".join(lines)


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


def _ms(v: tuple[float | None, float | None]) -> str:
    return "n/a" if v[0] is None else f"{v[0]:.3f} ± {v[1]:.3f}"


def context_table_md(summary: dict) -> str:
    """Safe-RVR@5, NeedRisk-Hit@5 and NDCG@5 (mean ± std over seeds) of the context modes and
    their references, then each context mode's verdict per target with the distance."""
    cols = ("rel_only", "core", "core+graph", "core+graph+rule", *CONTEXT_MODES)
    lines = ["| direction | registry (n low-risk / high-risk) | metric | " + " | ".join(cols) + " |",
             "|---|---|---|" + "---|" * len(cols)]
    verdicts = ["| direction | registry | mode | Safe-RVR@5 <= core+graph+rule | NeedRisk-Hit@5 >= 0.9 x rel_only "
                "| NDCG@5 >= core+graph | all three |", "|---|---|---|---|---|---|---|"]
    for key, block in summary.items():
        for reg in (block_target(key), "demo"):
            b = block[reg]
            if "context" not in b:
                continue
            n = b.get("n_subsets") or {}
            where = f"{reg} ({n.get('safe_rvr@5', '?')} / {n.get('needrisk_hit@5', '?')})"
            for metric in ("safe_rvr@5", "needrisk_hit@5", "ndcg@5"):
                lines.append(f"| {key} | {where} | {metric} | " + " | ".join(_ms(b["methods"][c][metric]) for c in cols) + " |")
            for mode, v in b["context"].items():
                cells = []
                for metric in ("safe_rvr@5", "needrisk_hit@5", "ndcg@5"):
                    t = v[metric]
                    if t["met"] is None:
                        cells.append("undefined (no such queries)")
                        continue
                    cells.append(f"{t['value']:.3f} vs {t['bound']:.3f} ({t['distance']:+.3f}; seeds {t['seeds_met']}): "
                                 f"{'met' if t['met'] else 'missed'}")
                all3 = "n/a" if v["met_all"] is None else ("met" if v["met_all"] else "missed")
                verdicts.append(f"| {key} | {reg} | {mode} | " + " | ".join(cells) + f" | {all3} |")
    return "\n".join(lines) + "\n\n" + "\n".join(verdicts)


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
        cmd = context_table_md(s)
        fmd = frontier_md(s)
        print(md + "\n\n" + cmd + "\n\n" + fmd)
        doc["summary"] = s
        doc["table_md"] = md
        doc["context_table_md"] = cmd
        doc["frontier_md"] = fmd
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(a.out)
        if a.card:
            from riskrank.training.base_model import attach_transfer

            attach_transfer(a.card, {"summary": s, "table_md": md + "\n\n" + cmd + "\n\n" + fmd, "command": "make transfer",
                                     "results": str(a.out)})
            print(f"wrote the transfer block of {a.card}/card.json")
        return
    run([int(s) for s in a.seeds.split(",")], a.direction or list(DIRECTIONS), a.out, a.epochs, a.max_queries)


if __name__ == "__main__":
    sys.exit(main())


# -- the same tables as docs/base-model.md lays them out (a test renders them again) -----------------------
DOC_DIRECTION = {"sealtools->ultratool": "Seal-Tools → UltraTool", "ultratool->sealtools": "UltraTool → Seal-Tools"}
DOC_REGISTRY = {"ultratool": "UltraTool test", "sealtools": "Seal-Tools test_in", "demo": "demo"}


def _n(doc: dict, key: str, reg: str) -> int:
    """The queries a run scored on ``reg`` (every seed scores the same ones)."""
    return next(r[reg]["n_queries"] for t, r in doc["runs"].items() if t.split("|")[0] == key)


def doc_main_table(doc: dict, shipped_on_demo: dict) -> str:
    """docs/base-model.md's NDCG@5 / RVR@5 table: both directions on the held-out benchmark and
    the demo, then the shipped model on the demo (``benchmarks/results/base_on_demo.json``)."""
    cols = ("bm25", "dense", "hybrid", "rel_only", "core", "core+graph", "core+graph+rule", "core+graph+rule_pred")
    lines = ["| direction | registry | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for key, block in doc["summary"].items():
        for reg in (block_target(key), "demo"):
            m = block[reg]["methods"]
            lines.append(f"| {DOC_DIRECTION[key]} | {DOC_REGISTRY[reg]} ({_n(doc, key, reg):,}) | "
                         + " | ".join(f"{m[c]['ndcg@5'][0]:.3f} / {m[c]['rvr@5'][0]:.3f}" for c in cols) + " |")
    m = shipped_on_demo["methods"]
    n_demo = _n(doc, next(iter(doc["summary"])), "demo")
    lines.append(f"| both (shipped) → demo | demo ({n_demo:,}) | "
                 + " | ".join(f"{m[c]['ndcg@5']:.3f} / {m[c]['rvr@5']:.3f}" for c in cols) + " |")
    return "\n".join(lines)


def doc_frontier_table(summary: dict) -> str:
    """docs/base-model.md's frontier table (one line per direction)."""
    lines = ["| direction | max(bm25, dense) | RVR@5 limit | best (mode, λ) chosen on the test itself | NDCG@5 / RVR@5 | ratio "
             "| 1.03 × reachable by a λ |", "|---|---|---|---|---|---|---|"]
    for key, block in summary.items():
        b = block[block_target(key)]
        f = b["frontier"]
        mode, lam = f["best"].split("|")
        lines.append(f"| {DOC_DIRECTION[key]} | {b['baseline']:.3f} | {b['rvr_limit']:.3f} | `{mode}`, λ {lam} | "
                     f"{f['best_ndcg']:.3f} / {f['best_rvr']:.3f} | {f['best_ratio']:.3f} × | {'yes' if f['reachable'] else 'no'} |")
    return "\n".join(lines)


DOC_METRIC = {"safe_rvr@5": "Safe-RVR@5", "needrisk_hit@5": "NeedRisk-Hit@5", "ndcg@5": "NDCG@5"}


def doc_context_tables(summary: dict) -> tuple[str, str]:
    """docs/base-model.md's two context tables: the metrics (mean ± std over seeds), and each
    context mode against its three targets."""
    cols = ("rel_only", "core+graph", "core+graph+rule", *CONTEXT_MODES)
    lines = ["| direction | registry (low-risk / high-risk queries) | metric | " + " | ".join(f"`{c}`" for c in cols) + " |",
             "|---|---|---|" + "---|" * len(cols)]
    for key, block in summary.items():
        for reg in (block_target(key), "demo"):
            b = block[reg]
            n = b["n_subsets"]
            where = f"{DOC_REGISTRY[reg]} ({n['safe_rvr@5']} / {n['needrisk_hit@5']})"
            for metric in ("safe_rvr@5", "needrisk_hit@5", "ndcg@5"):
                lines.append(f"| {DOC_DIRECTION[key]} | {where} | {DOC_METRIC[metric]} | "
                             + " | ".join(_ms(b["methods"][c][metric]) for c in cols) + " |")
    verdicts = ["| direction | registry | mode | Safe-RVR@5 ≤ `core+graph+rule` | NeedRisk-Hit@5 ≥ 0.9 × `rel_only` "
                "| NDCG@5 ≥ `core+graph` |", "|---|---|---|---|---|---|"]
    for key, block in summary.items():
        for reg in (block_target(key), "demo"):
            for mode, v in block[reg]["context"].items():
                cells = [f"{t['value']:.3f} vs {t['bound']:.3f} ({t['distance']:+.3f}, {t['seeds_met']}): "
                         f"**{'met' if t['met'] else 'missed'}**".replace("-", "−")
                         for t in (v[m] for m in ("safe_rvr@5", "needrisk_hit@5", "ndcg@5"))]
                verdicts.append(f"| {DOC_DIRECTION[key]} | {DOC_REGISTRY[reg]} | `{mode}` | " + " | ".join(cells) + " |")
    return "\n".join(lines), "\n".join(verdicts)
