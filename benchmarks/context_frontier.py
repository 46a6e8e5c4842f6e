"""The context stage's frontier: what its grid could reach if it were chosen on the test queries.

A diagnostic, never a choice. For each seed (and each fold, on a benchmark without a training
split) the fit is the reproduction's (:func:`riskrank.training.fit` on that fold's training
queries, as ``riskrank reproduce --context`` runs it); the fit's own heads, need head and
ToolGraph then score the test queries, and every setting of the context grid is measured on
them (:func:`riskrank.training.choose_context` with ``rows_out``). Per seed the folds are
pooled (query-weighted), and per context pipeline the summary says:

- how many settings meet Safe-RVR@5 <= ``core+graph+rule``'s and NDCG@5 >= ``core+graph``'s
  minus one standard error on the test queries, and how many also meet NeedRisk-Hit@5 >= 0.9 x
  ``rel_only``'s (all three targets);
- the setting the context rule would pick on the test queries (an upper bound on what a better
  selection could do), and the best NeedRisk-Hit@5 among settings within the other two;
- the setting the fit chose (cross-validated over its own queries), as measured here, which
  must equal the reproduction's figure for the same seed.

The settings are one per seed across its folds (the reproduction's choice is per fold).

    python benchmarks/context_frontier.py --dataset sealtools --out benchmarks/results/context_frontier_sealtools.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

NEED_RATIO = 0.9
PIPELINES = ("core+graph+context", "core+graph+context+rule")


def run_fold(r: Any, seed: int, train_q: Any, train_emb: np.ndarray, train_lex: Any, split: str, pos: np.ndarray) -> dict:
    """One fit and the grid on its test queries: per pipeline the rows, plus the counts and
    references that pooling over folds needs."""
    from riskrank import training
    from riskrank.first_stage import pin_named, relevance_inputs, top_m
    from riskrank.heads import HeadScorer
    from riskrank.metrics import needrisk_hit_at_k
    from riskrank.risk import RISKY_LEVEL
    from riskrank.rules import RuleConfig, RuleFilter

    key = r.heads_needed[0]
    design, _, evidence = key.partition(":")
    cfg = training.TrainConfig(design=design, seed=seed, relevance=evidence or None,
                               candidate_pipelines=r.top_m).resolved(has_lexical=True)
    gold = [np.asarray(g) for g in train_q.gold]
    res, graph, ch = training.fit(r.tool_emb, train_emb, gold, r.registry, cfg, r.graph_config, progress=False, lexical=train_lex)
    qs = r.bench.splits[split]
    pos = np.asarray([i for i in pos if len(qs.gold[i])], dtype=np.int64)
    q = r.split_emb[split][pos]
    lex = r.split_lex[split].rows(pos)
    gold_t = [np.asarray(qs.gold[i]) for i in pos]
    cos = q @ r.tool_emb.T
    inputs = relevance_inputs(cos, lex, res.fusion) if res.model.lexical else relevance_inputs(cos)
    scorer = HeadScorer(res.model, r.tool_emb)
    rel = scorer.relevance_score(q, inputs=inputs)
    need = res.need_head.predict(q, inputs.f0, scorer.f_risk)
    rows: dict[str, list[dict[str, Any]]] = {}
    rec: dict[str, Any] = {}
    levels = r.registry.risk_levels
    training.choose_context([training.ContextPart(rel, need, lex.named, gold_t, graph)], scorer.f_risk,
                            training.context_risky(res, r.registry, r.tool_emb), levels, ch["pipelines"],
                            RuleFilter(RuleConfig(fill=cfg.rule_fill), levels, r.registry.perm_counts, r.tool_emb), rec, rows_out=rows)
    high = np.array([levels[g].max() >= RISKY_LEVEL for g in gold_t])
    rel_hit = needrisk_hit_at_k(top_m(pin_named(rel, lex.named), 5), gold_t, levels)
    return {"rows": rows, "n": len(pos), "n_low": int((~high).sum()), "n_high": int(high.sum()), "reference": rec["reference"],
            "rel_only_hits": float(np.nansum(rel_hit)),
            "chosen": {p: {**c, "lam": ch["pipelines"][p]["lam"]} for p, c in ch.get("context", {}).items()},
            "need_head": {k: v for k, v in res.need_head.info.items() if k != "grid"}}


def pool(folds: list[dict]) -> dict:
    """One seed: the folds' rows and references, query-weighted."""
    from riskrank.training import context_rule_key

    n = sum(f["n"] for f in folds)
    n_low = sum(f["n_low"] for f in folds)
    n_high = sum(f["n_high"] for f in folds)
    ref_nd = sum(f["reference"]["core+graph ndcg@5"] * f["n"] for f in folds) / n
    ref_safe = sum(f["reference"]["core+graph+rule safe_rvr@5"] * f["n_low"] for f in folds) / max(n_low, 1)
    rel_hit = sum(f["rel_only_hits"] for f in folds) / max(n_high, 1)
    out: dict[str, Any] = {"n": n, "n_low": n_low, "n_high": n_high, "core+graph ndcg@5": ref_nd,
                           "core+graph+rule safe_rvr@5": ref_safe, "rel_only needrisk_hit@5": rel_hit,
                           "needrisk bound": NEED_RATIO * rel_hit, "pipelines": {}}

    def weighted(rows: list[dict]) -> dict[str, float]:
        """One row per fold -> the seed's metrics, each fold weighted by its queries of that metric."""
        return {m: sum(x[m] * f[w] for x, f in zip(rows, folds, strict=True)) / max(sum(f[w] for f in folds), 1)
                for m, w in (("ndcg@5", "n"), ("safe_rvr@5", "n_low"), ("needrisk_hit@5", "n_high"))}
    for p in PIPELINES:
        pooled = []
        for j, r0 in enumerate(folds[0]["rows"][p]):
            parts = [f["rows"][p][j] for f in folds]
            pooled.append({**{k: r0[k] for k in ("lam_need", "lam", "tau", "margin", "cap_need")}, **weighted(parts),
                           "ndcg_se": float(np.sqrt(sum((x["ndcg_se"] * f["n"]) ** 2 for x, f in zip(parts, folds, strict=True)))) / n})
        safe = [x for x in pooled if x["safe_rvr@5"] <= ref_safe + 1e-12]
        ok = [x for x in safe if x["ndcg@5"] >= ref_nd - x["ndcg_se"] - 1e-12]
        all3 = [x for x in ok if x["needrisk_hit@5"] >= NEED_RATIO * rel_hit - 1e-12]
        nd_ok = [x for x in pooled if x["ndcg@5"] >= ref_nd - x["ndcg_se"] - 1e-12]
        need_ok = [x for x in nd_ok if x["needrisk_hit@5"] >= NEED_RATIO * rel_hit - 1e-12]

        chosen = [f["chosen"].get(p) for f in folds]
        picked = []
        for f, c in zip(folds, chosen, strict=True):
            picked.append(next((x for x in f["rows"][p] if c and x["tau"] == c["tau"] and x["margin"] == c["margin"]
                                and x["lam_need"] == c["lam_need"] and x["cap_need"] == c.get("cap_need") and x["lam"] == c["lam"]), None))
        deployed = None if None in picked else weighted(picked)
        out["pipelines"][p] = {
            "settings": len(pooled), "meet_safe_and_ndcg": len(ok), "meet_all_three": len(all3),
            "rule_on_test": max(ok, key=context_rule_key) if ok else None,
            "lowest_safe_rvr_at_the_need_bound": min(need_ok, key=lambda x: x["safe_rvr@5"]) if need_ok else None,
            "chosen_by_the_fit": chosen,
        }
        if deployed is not None:
            out["pipelines"][p]["chosen_measured"] = deployed
    return out


def main() -> None:
    from riskrank.datasets import load_benchmark
    from riskrank.evaluation.runner import DEFAULT_SEEDS, Runner

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, choices=["ultratool", "sealtools"])
    ap.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)))
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    bench = load_benchmark(a.dataset)
    seeds = [int(s) for s in a.seeds.split(",")]
    r = Runner(bench, ["core+graph+context+rule"], seeds=seeds, progress=False)
    doc: dict[str, Any] = {"dataset": a.dataset, "command": " ".join(["python", *sys.argv]), "seeds": {}}
    t0 = time.perf_counter()
    for seed in seeds:
        folds = []
        for fold, train_q, train_emb, train_lex, evals in r._folds(seed):
            for split, pos in evals:
                folds.append(run_fold(r, seed, train_q, train_emb, train_lex, split, pos))
            print(f"seed {seed} fold {fold}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        doc["seeds"][str(seed)] = pool(folds)
    summary: dict[str, Any] = {}
    per = list(doc["seeds"].values())
    for p in PIPELINES:
        picks = [s["pipelines"][p]["rule_on_test"] for s in per]
        summary[p] = {"seeds_with_a_setting_meeting_all_three": sum(s["pipelines"][p]["meet_all_three"] > 0 for s in per),
                      "rule_on_test_mean": None if None in picks else
                      {k: float(np.mean([x[k] for x in picks])) for k in ("ndcg@5", "safe_rvr@5", "needrisk_hit@5")}}
    summary["reference_mean"] = {k: float(np.mean([s[k] for s in per]))
                                 for k in ("core+graph ndcg@5", "core+graph+rule safe_rvr@5", "needrisk bound")}
    doc["summary"] = summary
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(a.out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
