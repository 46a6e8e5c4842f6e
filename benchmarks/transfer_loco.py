"""Leave one corpus out: riskrank-base built on five registries, evaluated zero-shot on the sixth.

The six registries are UltraTool and Seal-Tools (audited risk levels) and four corpora without
audited levels (BFCL, APIBench, API-Bank, ToolAlpaca: ``risk_level`` None). For each registry
held out in turn and each seed, the base model is built exactly as the shipped one
(:func:`riskrank.training.base_model.build_base` over :func:`load_sources` of the other five:
minimax fusion, the heads, the zero-shot form and its settings chosen on the sources'
validation queries) and ranks the held-out registry's queries (UltraTool ``test``, Seal-Tools
``test_in``, a corpus's ``all``) on a registry it never saw, in every mode of ``REPORT_MODES``
and both context modes (:mod:`transfer_lobo`'s).

Risk on a registry without audited levels: RVR@5 and the need labels (a gold tool has r >= 3)
read the keyword annotator's levels (:func:`riskrank.training.base_model.reference_levels`),
which no head produced; ``+rule`` reads what the retriever serves (the risk head's level with
the keyword evidence for an unaudited tool). Per run: NDCG@5, RVR@5 (and the context metrics)
per mode, the need head's AUC with the count of risky tasks, and lever (a): ``core+graph`` (and
``rel_only``, ``core+graph+rule``) with the relevance head's embedding residual kept, at the
in-domain residual weight and at weight 1, beside the shipped zero-shot form that drops it.

Caps (stated in the JSON): ``--max-queries`` training queries per source (evenly spaced over
them, as ``BaseConfig.max_queries`` cuts them) and ``--max-eval`` held-out queries (a sample seeded by
:data:`EVAL_SAMPLE_SEED`, the same for every training seed).

    python benchmarks/transfer_loco.py --seeds 42 --held-out bfcl --out benchmarks/results/loco_bfcl.json
    python benchmarks/transfer_loco.py --summarise benchmarks/results/loco_*.json --out benchmarks/results/loco.json

Per-run results are written as they finish (``--out``; a rerun skips the finished runs). Give
each process its own ``--out``; ``--summarise`` merges them, adds the summary and the markdown
tables (:func:`doc_tables`: what docs/base-model.md shows) and prints them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.fileio import atomic_write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transfer_lobo import CONTEXT_MODES, METRICS, _mean_std, context_record, need_auc

#: The six registries and the queries a held-out one is evaluated on.
REGISTRIES = {"ultratool": "test", "sealtools": "test_in", "bfcl": "all", "apibench": "all", "apibank": "all",
              "toolalpaca": "all"}
#: The targets (means over seeds): core+graph NDCG@5 >= 1.0 x max(bm25, dense) on every held-out
#: registry and >= 1.10 x on average; core+graph+rule >= 0.97 x at RVR@5 <= 0.8 x dense; the
#: need head's AUC >= 0.80 wherever there are at least 20 risky tasks.
CG_RATIO, CG_MEAN_RATIO, RULE_RATIO, RVR_RATIO, TARGET_AUC, MIN_RISKY = 1.0, 1.10, 0.97, 0.8, 0.80, 20
#: The held-out sample's seed (independent of the training seed: every seed sees the same queries).
EVAL_SAMPLE_SEED = 0
#: The caps: training queries per source, held-out queries evaluated. At 500 per source (about
#: 2,000 training queries over a union of 5,800-7,900 tools) a build had passed 8 minutes still
#: in the first of its two context-stage choices (their grid costs queries x tools), so 100.
MAX_QUERIES, MAX_EVAL = 100, 1000
#: The modes lever (a) evaluates with the embedding residual kept.
LEVER_MODES = ("rel_only", "core+graph", "core+graph+rule")


def eval_sample(n: int, cap: int | None) -> np.ndarray:
    """The held-out queries evaluated: all of them, or ``cap`` drawn without replacement by
    :data:`EVAL_SAMPLE_SEED`, in their order."""
    if cap is None or n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(EVAL_SAMPLE_SEED).choice(n, size=cap, replace=False))


def with_residual(ck: Any, residual_model: Any, weight: float | None) -> Any:
    """``ck`` with the heads as fitted (the embedding residual kept), at the in-domain residual
    weight (``weight`` None) or at ``weight``; every inference setting is the zero-shot one."""
    from riskrank.heads import HeadWeights

    model = residual_model
    if weight is not None:
        arrays = dict(model.arrays)
        arrays["relevance_head.residual_weight"] = np.full_like(arrays["relevance_head.residual_weight"], weight)
        model = HeadWeights(model.dim, model.design, model.hidden, model.rank, model.lexical, model.penalty, arrays)
    return dataclasses.replace(ck, model=model)


def code_state() -> dict:
    """The commit and a sha256 of the package's source files as this process read them (a
    working tree others edit: runs of different processes may differ)."""
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted((root / "src" / "riskrank").rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = None
    return {"commit": head, "source_sha256": h.hexdigest()}


def _complete(row: dict | None, modes: tuple[str, ...]) -> bool:
    return bool(row) and all(m in row["held_out"]["methods"] for m in modes) and "lever_a" in row["held_out"]


def finetuned_encoder(sources: list, held_out: str, seed: int, max_queries: int | None) -> tuple[Any, dict]:
    """Lever (b): MiniLM fine-tuned on the sources' queries that the build does not use
    (:func:`riskrank.training.base_model.finetune_triplets`), cached by its rows and settings
    under the cache directory (a rerun reuses it); the encoder and what to record of it."""
    import hashlib

    from riskrank.encoder import Encoder, default_cache_dir
    from riskrank.training.base_model import finetune_triplets
    from riskrank.training.finetune import FinetuneConfig, finetune_encoder, finetune_info

    t0 = time.perf_counter()
    rows = finetune_triplets(sources, max_queries, Encoder(progress=False), seed)
    cfg = FinetuneConfig(seed=seed)
    key = json.dumps([rows.fingerprint(), dataclasses.asdict(cfg)], sort_keys=True).encode()
    folder = default_cache_dir() / "finetuned" / f"loco-{held_out}-{seed}-{hashlib.sha256(key).hexdigest()[:12]}"
    reused = (folder / "riskrank_finetune.json").exists()
    if not reused:
        finetune_encoder(rows, folder, config=cfg)
    enc = Encoder(str(folder), progress=False)
    return enc, {"identity": enc.identity, "reused": reused, "seconds": round(time.perf_counter() - t0, 1),
                 **(finetune_info(folder) or {})}


def held_out_inputs(bench: Any, split: str, max_eval: int | None, enc: Any, query_enc: Any = None) -> tuple[
        list[str], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """What every evaluation here ranks on a held-out registry, built one way so the builds and
    the shipped model are judged on the same queries: the seeded sample of ``split`` (texts and
    gold), the registry's and the queries' embeddings under ``enc`` (the queries' under
    ``query_enc`` where given), and the levels risk is measured by (audited, else the keyword
    annotator's)."""
    from riskrank.training.base_model import reference_levels

    qs = bench.splits[split]
    keep = eval_sample(len(qs), max_eval)
    texts, gold = [qs.texts[i] for i in keep], [np.asarray(qs.gold[i]) for i in keep]
    reg = bench.registry
    return (texts, gold, enc.encode(reg.texts(), desc="tools"), (query_enc or enc).encode(texts, desc="queries"),
            reference_levels(reg))


def run(seeds: list[int], held_out: list[str], out: Path, epochs: int, max_queries: int | None, max_eval: int | None,
        registries: list[str], risk_choices: str = "all", finetune: bool = False) -> None:
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
        with_reference_levels,
    )

    torch.set_num_threads(1)
    code = code_state()
    modes = (*REPORT_MODES, *CONTEXT_MODES)
    done = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    done["caps"] = {"max_queries_per_source": max_queries, "max_eval_queries": max_eval, "eval_sample_seed": EVAL_SAMPLE_SEED,
                    "epochs": epochs, "registries": registries}
    if risk_choices != "all":
        done["caps"]["risk_choices"] = risk_choices
    if finetune:
        done["caps"]["encoder"] = "MiniLM fine-tuned per build on the sources' queries the build does not use"
    benches: dict[str, Any] = {}
    for seed in seeds:  # seed-major: every held-out registry of the first seed before the next seed
        for name in held_out:
            split = REGISTRIES.get(name, "test")
            tag = f"{name}|{seed}"
            if _complete(done["runs"].get(tag), modes):
                continue
            t0 = time.perf_counter()
            others = [r for r in registries if r != name]
            sources = load_sources(others)
            encoder, tuned = (finetuned_encoder(sources, name, seed, max_queries) if finetune else (None, None))
            build_t0 = time.perf_counter()
            built = build_base(sources, BaseConfig(seed=seed, epochs=epochs, max_queries=max_queries, risk_choices=risk_choices),
                               encoder=encoder)
            build_s = time.perf_counter() - build_t0
            enc, ck = built.encoder, built.retriever.checkpoint
            bench = benches[name] = benches.get(name) or load_benchmark(name)
            qs = bench.splits[split]
            reg = bench.registry
            texts, gold, emb, q_emb, ref = held_out_inputs(bench, split, max_eval, enc)
            audited = ref is reg.risk_levels
            pq = evaluate_modes(ck, reg, emb, q_emb, texts, gold, enc, modes=modes, reference_levels=ref)
            subsets = {k: int(np.isfinite(np.asarray(pq["core"][k], dtype=np.float64)).sum()) for k in ("safe_rvr@5", "needrisk_hit@5")}
            lever: dict[str, Any] = {"in_domain_residual_weight": float(built.residual_model.arrays["relevance_head.residual_weight"]),
                                     "zero_shot_residual_weight": ck.meta["inference"].get("residual_weight"),
                                     # 0: the fit kept its initial (zero) residual, e.g. early-stopped at epoch 0
                                     "residual_abs_sum": float(sum(np.abs(built.residual_model.arrays[k]).sum() for k in
                                                                   ("relevance_head.v.weight", "relevance_head.l2.weight"))),
                                     "best_epoch": built.retriever.training.validation.get("best_epoch")}
            for key, w in (("kept_in_domain_weight", None), ("kept_weight_1", 1.0)):
                lever[key] = summarise(evaluate_modes(with_residual(ck, built.residual_model, w), reg, emb, q_emb, texts, gold, enc,
                                                      modes=LEVER_MODES, reference_levels=ref))
            if audited:  # the same registry served as if nobody had audited it: its levels the level model's
                hidden = reg.with_risk_levels({t.name: None for t in reg})
                lever["served_unaudited"] = summarise(evaluate_modes(ck, hidden, emb, q_emb, texts, gold, enc, modes=LEVER_MODES,
                                                                     reference_levels=ref))
            row = {"held_out": {"name": name, "split": split, "n_queries": len(qs), "n_evaluated": len(texts),
                                "levels": "audited" if audited else "keyword annotator (no audited levels)",
                                "n_subsets": subsets, "methods": summarise(pq),
                                "need": need_auc(ck, reg, emb, q_emb, texts, gold, enc, levels=ref),
                                "risk": risk_agreement(ck, reg if audited else with_reference_levels(reg), emb),
                                "lever_a": lever},
                   "sources": [{"name": d["benchmark"], "split": d["split"], "n_queries": d["n_queries"], "n_tools": d["n_tools"],
                                "n_audited_tools": d["n_audited_tools"]} for d in built.card["training_data"]],
                   "seed": seed, "fusion": ck.meta["inference"]["fusion"], "pipelines": ck.meta["inference"]["pipelines"],
                   "context": context_record(built), "build_seconds": round(build_s, 1), "code": code}
            if tuned is not None:
                row["encoder"] = tuned
            row["seconds"] = round(time.perf_counter() - t0, 1)
            done["runs"][tag] = row
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out, json.dumps(done, indent=1))
            m = row["held_out"]["methods"]
            print(f"{tag}: " + ", ".join(f"{k} {v['ndcg@5']:.3f}/{v['rvr@5']:.3f}" for k, v in m.items())
                  + f"; need AUC {row['held_out']['need']['auc']} ({row['held_out']['need']['n_need']} risky); "
                  f"kept core+graph {lever['kept_weight_1']['core+graph']['ndcg@5']:.3f} ({row['seconds']}s)", flush=True)


def run_shipped(held_out: list[str], out: Path, max_eval: int | None, enc: Any = None, query_enc: Any = None) -> None:
    """The shipped riskrank-base (trained on UltraTool and Seal-Tools only) on the held-out
    registries, as served (its level model for unaudited tools), on the same queries and
    metrics as the leave-one-corpus-out builds: the model a union build would replace. On
    UltraTool and Seal-Tools it is not held out (it trained on their queries). ``enc``: the
    encoder it runs on (another forward pass of the same model; default: the served one);
    ``query_enc``: the queries' forward pass where it is not ``enc``'s."""
    from riskrank.base import default_checkpoint
    from riskrank.checkpoint import load_checkpoint
    from riskrank.datasets import load_benchmark
    from riskrank.encoder import Encoder
    from riskrank.training.base_model import REPORT_MODES, evaluate_modes, summarise

    enc = enc or Encoder(progress=False)
    ck = load_checkpoint(default_checkpoint(), encoder_identity=enc.identity)
    done = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    done["caps"] = {"max_eval_queries": max_eval, "eval_sample_seed": EVAL_SAMPLE_SEED, "model": "riskrank-base as shipped",
                    "code": code_state()}
    for name in held_out:
        t0 = time.perf_counter()
        bench = load_benchmark(name)
        reg = bench.registry
        texts, gold, emb, q_emb, ref = held_out_inputs(bench, REGISTRIES.get(name, "test"), max_eval, enc, query_enc)
        pq = evaluate_modes(ck, reg, emb, q_emb, texts, gold, enc, modes=(*REPORT_MODES, *CONTEXT_MODES), reference_levels=ref)
        done["runs"][f"{name}|shipped"] = {"held_out": {"name": name, "n_evaluated": len(texts), "methods": summarise(pq),
                                                        "need": need_auc(ck, reg, emb, q_emb, texts, gold, enc, levels=ref)},
                                           "seconds": round(time.perf_counter() - t0, 1)}
        atomic_write_text(out, json.dumps(done, indent=1))
        m = done["runs"][f"{name}|shipped"]["held_out"]["methods"]
        print(f"{name}|shipped: " + ", ".join(f"{k} {v['ndcg@5']:.3f}/{v['rvr@5']:.3f}" for k, v in m.items()), flush=True)


def shipped_table(summary: dict, shipped: dict) -> tuple[str, str]:
    """The shipped model (two benchmarks) against the leave-one-corpus-out builds (five
    registries, mean over seeds) on each held-out registry the shipped model never trained
    on: NDCG@5 / RVR@5 of ``core+graph``, ``core+graph+rule`` and ``core+graph+context+rule``,
    and the need head's AUC. Returns the markdown and one line of ``core+graph`` ratios (five
    registries / shipped) with their mean: what training on more registries bought."""
    modes = ("core+graph", "core+graph+rule", "core+graph+context+rule")
    rows = ["| held out | max(bm25, dense) | " + " | ".join(f"`{m}` shipped → five registries" for m in modes)
            + " | need AUC shipped → five registries |", "|---|---|" + "---|" * (len(modes) + 1)]
    ratios: dict[str, float] = {}
    for tag, run in shipped["runs"].items():
        name = tag.split("|")[0]
        b = summary["held_out"].get(name)
        if b is None or name in ("ultratool", "sealtools"):
            continue
        m = run["held_out"]["methods"]
        cells = [f"{m[x]['ndcg@5']:.3f} / {m[x]['rvr@5']:.3f} → {_cell(b['methods'][x]['ndcg@5'])} / "
                 f"{_cell(b['methods'][x]['rvr@5'])}" for x in modes]
        cells.append(f"{run['held_out']['need']['auc']:.3f} → {_cell(b['need_head']['auc'])}")
        ratios[name] = b["methods"]["core+graph"]["ndcg@5"][0] / m["core+graph"]["ndcg@5"]
        rows.append(f"| {name} | {b['baseline']:.3f} | " + " | ".join(cells) + " |")
    line = ("`core+graph` NDCG@5, five registries / shipped: " + ", ".join(f"{n} {r:.3f}" for n, r in ratios.items())
            + f"; mean {np.mean(list(ratios.values())):.3f}")
    return "\n".join(rows), line


def summarise_runs(doc: dict) -> dict:
    """Per held-out registry, means (and std) over seeds, and the verdicts against the targets;
    then the mean core+graph ratio over the held-out registries."""
    out: dict = {"held_out": {}}
    names = [n for n in REGISTRIES if any(t.startswith(n + "|") for t in doc["runs"])]
    names += sorted({t.split("|")[0] for t in doc["runs"]} - set(names))
    for name in names:
        runs = [r for t, r in sorted(doc["runs"].items()) if t.split("|")[0] == name]
        h = [r["held_out"] for r in runs]
        methods = [m for m in h[0]["methods"] if all(m in x["methods"] for x in h)]
        agg = {m: {k: _mean_std([x["methods"][m].get(k) for x in h]) for k in METRICS} for m in methods}
        base_mode = max(("bm25", "dense"), key=lambda m: agg[m]["ndcg@5"][0])
        base = agg[base_mode]["ndcg@5"][0]
        limit = RVR_RATIO * agg["dense"]["rvr@5"][0]
        cg, rule = agg["core+graph"], agg["core+graph+rule"]
        need = {k: _mean_std([x["need"].get(k) for x in h]) for k in ("auc", "flagged", "recall_at_tau")}
        n_need = [x["need"]["n_need"] for x in h]
        lever = {}
        for key in ("kept_in_domain_weight", "kept_weight_1"):
            lever[key] = {m: {k: _mean_std([x["lever_a"][key][m].get(k) for x in h]) for k in ("ndcg@5", "rvr@5")} for m in LEVER_MODES}
        lever["in_domain_residual_weight"] = [x["lever_a"]["in_domain_residual_weight"] for x in h]
        auc = need["auc"][0]
        out["held_out"][name] = {
            "seeds": sorted(r["seed"] for r in runs), "split": h[0]["split"], "n_queries": h[0]["n_queries"],
            "n_evaluated": h[0]["n_evaluated"], "levels": h[0]["levels"], "n_subsets": h[0]["n_subsets"],
            "methods": agg, "baseline": base, "baseline_mode": base_mode, "rvr_limit": limit,
            "core_graph_ratio": cg["ndcg@5"][0] / base, "met_core_graph": cg["ndcg@5"][0] >= CG_RATIO * base - 1e-12,
            "rule_ratio": rule["ndcg@5"][0] / base,
            "met_rule": rule["ndcg@5"][0] >= RULE_RATIO * base - 1e-12 and rule["rvr@5"][0] <= limit + 1e-12,
            "need_head": {**need, "auc_min": min((x["need"]["auc"] for x in h if x["need"]["auc"] is not None), default=None),
                          "n_need": n_need, "n": [x["need"]["n"] for x in h],
                          "applies": min(n_need) >= MIN_RISKY,
                          "met": (auc is not None and auc >= TARGET_AUC) if min(n_need) >= MIN_RISKY else None},
            "risk": {k: _mean_std([x["risk"].get(k) for x in h]) for k in ("auc_p_risky", "auc_level", "kappa_quadratic")},
            "lever_a": lever,
            "seconds": [r["seconds"] for r in runs], "build_seconds": [r["build_seconds"] for r in runs],
            "sources": runs[0]["sources"],
        }
    ratios = [b["core_graph_ratio"] for b in out["held_out"].values()]
    out["mean_core_graph_ratio"] = float(np.mean(ratios)) if ratios else None
    out["met_core_graph_mean"] = bool(ratios) and float(np.mean(ratios)) >= CG_MEAN_RATIO - 1e-12
    out["met_core_graph_every"] = bool(ratios) and all(b["met_core_graph"] for b in out["held_out"].values())
    out["caps"] = doc.get("caps")
    return out


def _cell(v: tuple[float | None, float | None]) -> str:
    return "n/a" if v[0] is None else f"{v[0]:.3f}"


def _met(x: bool | None) -> str:
    return "n/a" if x is None else ("**met**" if x else "**missed**")


def doc_tables(summary: dict) -> str:
    """The markdown of docs/base-model.md's "Leave one corpus out": every mode per held-out
    registry (NDCG@5 / RVR@5), the targets, lever (a) and the need head."""
    modes = ("bm25", "dense", "hybrid", "rel_only", "core", "core+graph", "core+graph+rule", "core+graph+rule_pred", *CONTEXT_MODES)
    hs = summary["held_out"]
    lines = ["| held out (queries evaluated; levels; seeds) | " + " | ".join(f"`{m}`" for m in modes) + " |",
             "|---|" + "---|" * len(modes)]
    for name, b in hs.items():
        where = f"{name} `{b['split']}` ({b['n_evaluated']:,}; {'audited' if b['levels'] == 'audited' else 'keyword'}; " \
                f"{','.join(map(str, b['seeds']))})"
        lines.append(f"| {where} | " + " | ".join(f"{_cell(b['methods'][m]['ndcg@5'])} / {_cell(b['methods'][m]['rvr@5'])}"
                                                 for m in modes) + " |")
    t = ["| held out | max(bm25, dense) | `core+graph` ≥ 1.0 × | `core+graph+rule` ≥ 0.97 × at RVR@5 ≤ 0.8 × dense "
         "| need AUC ≥ 0.80 (risky tasks) |", "|---|---|---|---|---|"]
    for name, b in hs.items():
        m = b["methods"]
        rule = m["core+graph+rule"]
        nh = b["need_head"]
        risky = "/".join(str(n) for n in sorted(set(nh["n_need"])))
        need = "n/a" if nh["auc"][0] is None else f"{nh['auc'][0]:.3f} (min {nh['auc_min']:.3f}; {risky} risky)"
        need += ": " + (_met(nh["met"]) if nh["applies"] else "under 20 risky tasks")
        t.append(f"| {name} | {b['baseline']:.3f} ({b['baseline_mode']}) | {m['core+graph']['ndcg@5'][0]:.3f} = "
                 f"{b['core_graph_ratio']:.3f} ×: {_met(b['met_core_graph'])} | {rule['ndcg@5'][0]:.3f} = {b['rule_ratio']:.3f} ×, "
                 f"RVR@5 {rule['rvr@5'][0]:.3f} vs {b['rvr_limit']:.3f}: {_met(b['met_rule'])} | {need} |")
    mean = summary["mean_core_graph_ratio"]
    t.append(f"| mean over the held-out registries | | {mean:.3f} × (target ≥ 1.10 ×): {_met(summary['met_core_graph_mean'])} | | |")
    lv = ["| held out | `core+graph` zero-shot (residual dropped, shipped) | residual kept, in-domain weight | residual kept, weight 1 "
          "| kept (weight 1) − dropped |", "|---|---|---|---|---|"]
    for name, b in hs.items():
        z = b["methods"]["core+graph"]["ndcg@5"][0]
        ki = b["lever_a"]["kept_in_domain_weight"]["core+graph"]["ndcg@5"][0]
        k1 = b["lever_a"]["kept_weight_1"]["core+graph"]["ndcg@5"][0]
        w = "/".join(f"{x:g}" for x in sorted(set(b["lever_a"]["in_domain_residual_weight"])))
        lv.append(f"| {name} | {z:.3f} | {ki:.3f} (weight {w}) | {k1:.3f} | {k1 - z:+.3f} |")
    return "\n".join(lines) + "\n\n" + "\n".join(t) + "\n\n" + "\n".join(lv)


def lever_table(base: dict, variant: dict) -> str:
    """The runs two studies share (held-out registry and seed), side by side: ``base`` (the
    shipped choices) against ``variant`` (``--risk-choices audited``): the lambda each build
    chose for ``core+graph`` and ``core+graph+rule``, and NDCG@5 / RVR@5 of those modes, with
    max(bm25, dense) beside them."""
    rows = ["| held out, seed | max(bm25, dense) | `core+graph` λ: all → audited | `core+graph` all → audited "
            "| `core+graph+rule` λ: all → audited | `core+graph+rule` all → audited |", "|---|---|---|---|---|---|"]
    shared = [t for t in variant["runs"] if t in base["runs"]]
    order = {name: i for i, name in enumerate(REGISTRIES)}
    for tag in sorted(shared, key=lambda t: (order.get(t.split("|")[0], 99), int(t.split("|")[1]))):
        a, b = base["runs"][tag], variant["runs"][tag]
        ma, mb = a["held_out"]["methods"], b["held_out"]["methods"]
        ref = max(ma["bm25"]["ndcg@5"], ma["dense"]["ndcg@5"])

        def pair(m: dict, mode: str) -> str:
            return f"{m[mode]['ndcg@5']:.3f} / {m[mode]['rvr@5']:.3f}"

        cells = [tag.replace("|", ", seed "), f"{ref:.3f}"]
        for mode in ("core+graph", "core+graph+rule"):
            cells.append(f"{a['pipelines'][mode]['lam']:g} → {b['pipelines'][mode]['lam']:g}")
            cells.append(f"{pair(ma, mode)} → {pair(mb, mode)}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


#: The served-levels penalty's rule, fixed before its runs: on every held-out registry
#: `core+graph` loses at most 2 % NDCG@5 against `rel_only` of the same build while its RVR@5 is
#: at most 0.8 x dense's.
LEVELS_MAX_LOSS = 0.02


def levels_table(before: dict, after: dict) -> tuple[str, dict]:
    """The runs (held-out registry, seed) both studies have: ``before`` (the risk head's penalty,
    lambda chosen on keyword levels) against ``after`` (the served levels' penalty, lambda chosen
    on the served levels): the lambda of `core+graph` and `core+graph+rule`, NDCG@5 / RVR@5 of
    `rel_only`, `core+graph` and `core+graph+rule`, and per run the verdict of
    :data:`LEVELS_MAX_LOSS`'s rule on ``after``. Returns the markdown and the verdicts."""
    order = {name: i for i, name in enumerate(REGISTRIES)}
    shared = sorted((t for t in after["runs"] if t in before["runs"]),
                    key=lambda t: (order.get(t.split("|")[0], 99), t.split("|")[0], int(t.split("|")[1])))
    rows = ["| held out, seed | max(bm25, dense); dense RVR@5 | `rel_only` | `core+graph` λ | `core+graph` | "
            "`core+graph+rule` λ | `core+graph+rule` | rule: `core+graph` ≥ 0.98 × `rel_only`, RVR@5 ≤ 0.8 × dense |",
            "|---|---|---|---|---|---|---|---|"]
    verdicts: dict[str, bool] = {}
    for tag in shared:
        a, b = before["runs"][tag], after["runs"][tag]
        ma, mb = a["held_out"]["methods"], b["held_out"]["methods"]
        ref = max(mb["bm25"]["ndcg@5"], mb["dense"]["ndcg@5"])

        def pair(m: dict, mode: str) -> str:
            return f"{m[mode]['ndcg@5']:.3f} / {m[mode]['rvr@5']:.3f}"

        cg, rel, dense = mb["core+graph"], mb["rel_only"], mb["dense"]
        ok = cg["ndcg@5"] >= (1 - LEVELS_MAX_LOSS) * rel["ndcg@5"] - 1e-12 and cg["rvr@5"] <= RVR_RATIO * dense["rvr@5"] + 1e-12
        verdicts[tag] = bool(ok)
        rows.append(f"| {tag.replace('|', ', seed ')} | {ref:.3f}; {dense['rvr@5']:.3f} | {pair(mb, 'rel_only')} | "
                    f"{a['pipelines']['core+graph']['lam']:g} → {b['pipelines']['core+graph']['lam']:g} | "
                    f"{pair(ma, 'core+graph')} → {pair(mb, 'core+graph')} | "
                    f"{a['pipelines']['core+graph+rule']['lam']:g} → {b['pipelines']['core+graph+rule']['lam']:g} | "
                    f"{pair(ma, 'core+graph+rule')} → {pair(mb, 'core+graph+rule')} | "
                    f"{cg['ndcg@5'] / rel['ndcg@5']:.3f} ×, {cg['rvr@5']:.3f} vs {RVR_RATIO * dense['rvr@5']:.3f}: {_met(ok)} |")
    return "\n".join(rows), verdicts


def levels_seed_table(after: dict) -> tuple[str, dict]:
    """The served-levels runs over their seeds, per held-out registry: how many seeds meet
    :data:`LEVELS_MAX_LOSS`'s rule, `core+graph` NDCG@5 against `rel_only` and against the better
    of BM25 and the cosine (the 1.0x target on every registry, 1.10x on their mean), and
    `core+graph` RVR@5 against 0.8 x dense, each as the mean and the range over the seeds.
    Returns the markdown and, per registry, the seeds meeting the rule."""
    order = {name: i for i, name in enumerate(REGISTRIES)}
    names = sorted({t.split("|")[0] for t in after["runs"]}, key=lambda n: (order.get(n, 99), n))
    rows = ["| held out | seeds | rule met | `core+graph` / `rel_only` | `core+graph` / max(bm25, dense) | "
            "`core+graph` RVR@5 / (0.8 × dense) |", "|---|---|---|---|---|---|"]
    met: dict[str, list[int]] = {}
    means = []

    def span(v: list[float]) -> str:
        return f"{np.mean(v):.3f} ({min(v):.3f}–{max(v):.3f})"

    for name in names:
        runs = sorted(((int(t.split("|")[1]), r) for t, r in after["runs"].items() if t.split("|")[0] == name))
        rel, base, rvr, ok = [], [], [], []
        for seed, r in runs:
            m = r["held_out"]["methods"]
            cg = m["core+graph"]
            rel.append(cg["ndcg@5"] / m["rel_only"]["ndcg@5"])
            base.append(cg["ndcg@5"] / max(m["bm25"]["ndcg@5"], m["dense"]["ndcg@5"]))
            rvr.append(cg["rvr@5"] / (RVR_RATIO * m["dense"]["rvr@5"]) if m["dense"]["rvr@5"] > 0 else float("inf"))
            if cg["ndcg@5"] >= (1 - LEVELS_MAX_LOSS) * m["rel_only"]["ndcg@5"] - 1e-12 and cg["rvr@5"] <= RVR_RATIO * m["dense"]["rvr@5"] + 1e-12:
                ok.append(seed)
        met[name] = ok
        means.append(float(np.mean(base)))
        rows.append(f"| {name} | {', '.join(str(s) for s, _ in runs)} | {len(ok)} of {len(runs)} | {span(rel)} × | {span(base)} × | {span(rvr)} × |")
    rows.append(f"| mean over the registries | | | | {np.mean(means):.3f} × (target 1.10 ×) | |")
    return "\n".join(rows), met


#: Lever (b)'s rule, fixed before its runs: the fine-tuned encoder ships only if, on the four
#: corpora (the held-out registries whose queries are no test split), `core+graph` NDCG@5 with it
#: is higher than with MiniLM on the mean of the per-corpus ratios and more than 2 % lower on none.
FINETUNE_CORPORA, FINETUNE_MAX_LOSS = ("bfcl", "apibench", "apibank", "toolalpaca"), 0.02
FINETUNE_MODES = ("bm25", "dense", "hybrid", "core+graph", "core+graph+rule")


def finetune_table(base: dict, tuned: dict) -> tuple[str, dict]:
    """Lever (b) against the frozen MiniLM, over the runs (held-out registry, seed) both
    studies have: NDCG@5 / RVR@5 of :data:`FINETUNE_MODES`, MiniLM → fine-tuned, and the
    verdict of :data:`FINETUNE_CORPORA`'s rule. Returns the markdown and the verdict."""
    order = {name: i for i, name in enumerate(REGISTRIES)}
    shared = sorted((t for t in tuned["runs"] if t in base["runs"]), key=lambda t: (order.get(t.split("|")[0], 99), t))
    rows = ["| held out, seed | " + " | ".join(f"`{m}` MiniLM → fine-tuned" for m in FINETUNE_MODES)
            + " | `core+graph` ratio | fine-tune (rows, steps, s; reused: an interrupted run's folder) |", "|---|" + "---|" * (len(FINETUNE_MODES) + 2)]
    ratios: dict[str, list[float]] = {}
    for tag in shared:
        ma, mb = base["runs"][tag]["held_out"]["methods"], tuned["runs"][tag]["held_out"]["methods"]
        ratio = mb["core+graph"]["ndcg@5"] / ma["core+graph"]["ndcg@5"]
        ratios.setdefault(tag.split("|")[0], []).append(ratio)
        enc = tuned["runs"][tag].get("encoder", {})
        cells = [f"{ma[m]['ndcg@5']:.3f} / {ma[m]['rvr@5']:.3f} → {mb[m]['ndcg@5']:.3f} / {mb[m]['rvr@5']:.3f}"
                 for m in FINETUNE_MODES]
        rows.append(f"| {tag.replace('|', ', seed ')} | " + " | ".join(cells) + f" | {ratio:.3f} | "
                    f"{enc.get('rows', '?')}, {enc.get('steps', '?')}, "
                    + ("reused |" if enc.get("reused") else f"{enc.get('seconds', '?')} |"))
    judged = {n: float(np.mean(ratios[n])) for n in FINETUNE_CORPORA if n in ratios}
    verdict = {"corpora": judged, "complete": len(judged) == len(FINETUNE_CORPORA),
               "mean_ratio": float(np.mean(list(judged.values()))) if judged else None}
    verdict["ships"] = bool(verdict["complete"] and verdict["mean_ratio"] > 1.0
                            and min(judged.values()) >= 1.0 - FINETUNE_MAX_LOSS)
    return "\n".join(rows), verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="42,123,777")
    ap.add_argument("--held-out", choices=[*REGISTRIES, "demo"], action="append",
                    help="Run these held-out registries (default: all six).")
    ap.add_argument("--registries", default=",".join(REGISTRIES),
                    help="The registries of the study (smoke runs: a subset, e.g. ultratool,sealtools,demo).")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--max-queries", type=int, default=MAX_QUERIES, help="Training queries per source (evenly spaced).")
    ap.add_argument("--max-eval", type=int, default=MAX_EVAL, help="Held-out queries evaluated (a seeded sample).")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/loco.json"))
    ap.add_argument("--risk-choices", choices=["all", "audited"], default="all",
                    help="Which validation queries the zero-shot lambda choices measure RVR@5 on: all, or only those of "
                         "the sources whose every tool is audited (BaseConfig.risk_choices).")
    ap.add_argument("--finetune-encoder", action="store_true",
                    help="Lever (b): each build runs on MiniLM fine-tuned on its sources' queries beyond the cap "
                         "(riskrank.training.finetune), not on the frozen MiniLM.")
    ap.add_argument("--shipped", action="store_true",
                    help="Evaluate the shipped riskrank-base on the --held-out registries instead of building (--out).")
    ap.add_argument("--summarise", type=Path, nargs="+", default=None,
                    help="Merge these per-run files into --out, add the summary and the tables, print the tables.")
    a = ap.parse_args()
    if a.summarise:
        doc: dict = {"runs": {}}
        for f in a.summarise:
            part = json.loads(f.read_text())
            doc["runs"].update(part["runs"])
            doc.setdefault("caps", part.get("caps"))
        s = summarise_runs(doc)
        md = doc_tables(s)
        print(md)
        doc["summary"] = s
        doc["table_md"] = md
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(a.out)
        return
    registries = a.registries.split(",")
    if a.shipped:
        run_shipped(a.held_out or [r for r in registries if r not in ("ultratool", "sealtools")], a.out, a.max_eval)
        return
    run([int(s) for s in a.seeds.split(",")], a.held_out or registries, a.out, a.epochs, a.max_queries, a.max_eval, registries,
        a.risk_choices, a.finetune_encoder)


if __name__ == "__main__":
    sys.exit(main())
