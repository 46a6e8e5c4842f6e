"""The level model judged by leaving data out (riskrank.training.levels), and the shipped one built.

    python benchmarks/risk_levels.py --json benchmarks/results/risk_levels.json [--save src/riskrank/base/levels]

Leave one MCP server out over the annotated tools (hints stripped from the input): AUC of the
served level, destructive vs read-only and not-read-only vs read-only, pooled and per server,
beside the rule it replaces (the higher of the shipped risk head's level and the keywords),
the keywords alone and the shipped head alone. Leave one benchmark out on the audited
UltraTool / Seal-Tools tools: AUC (r >= 3) of the served level. ``--save`` fits the model on
everything and writes it (what the package ships).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from riskrank.base import default_checkpoint
from riskrank.checkpoint import load_checkpoint
from riskrank.datasets import load_benchmark
from riskrank.datasets.mcp_annotated import load_annotated
from riskrank.encoder import Encoder
from riskrank.heads import HeadScorer
from riskrank.risk import keyword_level, level_from_score
from riskrank.training.levels import fit_level_model, leave_one_benchmark_out, leave_one_server_out

TARGETS = {"destructive_vs_read_only": 0.97, "not_read_only_vs_read_only": 0.90, "benchmark_auc": 0.85}


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def table_md(doc: dict) -> str:
    """The three tables of docs/base-model.md, rendered from the artefact."""
    loso, lobo = doc["leave_one_server_out"], doc["leave_one_benchmark_out"]
    p = loso["pooled"]
    n = p["served level"]
    lines = [f"Leave one server out, pooled over the {doc['n_servers']} held-out servers ({n['n_read_only']} read-only, "
             f"{n['n_not_read_only']} not read-only, {n['n_destructive']} destructive tools; hints stripped from the input):", "",
             "| level | destructive vs read-only | not-read-only vs read-only |", "|---|---|---|"]
    for name, v in p.items():
        lines.append(f"| {name} | {_f(v['destructive_vs_read_only'])} | {_f(v['not_read_only_vs_read_only'])} |")
    lines += ["", "Per held-out server, the served level (and the rule it replaced):", "",
              "| server | read-only / not / destructive | destructive vs read-only | not-read-only vs read-only |", "|---|---|---|---|"]
    for srv, v in loso["per_server"].items():
        a, b = v["served level"], v["higher of head and keywords (before)"]
        lines.append(f"| {srv} | {a['n_read_only']} / {a['n_not_read_only']} / {a['n_destructive']} | "
                     f"{_f(a['destructive_vs_read_only'])} ({_f(b['destructive_vs_read_only'])}) | "
                     f"{_f(a['not_read_only_vs_read_only'])} ({_f(b['not_read_only_vs_read_only'])}) |")
    lines += ["", "Leave one benchmark out, AUC (r >= 3 vs < 3) on the held-out benchmark's audited tools:", "",
              "| held out | tools (risky) | served level | level score | before (higher of head and keywords) |", "|---|---|---|---|---|"]
    for name, v in lobo.items():
        lines.append(f"| {name} | {v['n_tools']:,} ({v['n_risky']}) | {_f(v['served_level_auc'])} | {_f(v['level_score_auc'])} | "
                     f"{_f(v['before_auc'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--save", default=None, help="fit on everything and write the level model here")
    ap.add_argument("--data", default=None)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    t0 = time.time()
    enc = Encoder(progress=False)
    data = load_annotated()
    mcp_emb = enc.encode(data.texts())
    benches = []
    for name in ("ultratool", "sealtools"):
        reg = load_benchmark(name, a.data).registry
        benches.append((name, enc.encode(reg.texts()), np.asarray(reg.risk_levels), list(reg)))
    aud_emb, aud_lv = np.vstack([b[1] for b in benches]), np.concatenate([b[2] for b in benches])
    # the shipped checkpoint's risk head and the rule it served with, on the annotated tools
    ck = load_checkpoint(default_checkpoint(), encoder_identity=enc.identity)
    head = level_from_score(HeadScorer(ck.model, mcp_emb).level_score).astype(np.float32)
    kw = np.asarray([keyword_level(t.name, t.description, None)[0] for t in data.tools], dtype=np.float32)
    baselines = {"higher of head and keywords (before)": np.maximum(head, kw), "keywords alone": kw, "shipped head alone": head}
    loso = leave_one_server_out(aud_emb, aud_lv, data, mcp_emb, baselines, seed=a.seed, progress=True)
    lobo = leave_one_benchmark_out(benches, mcp_emb, data.weak, seed=a.seed)
    doc = {"seed": a.seed, "notes": data.notes, "n_servers": len(set(data.servers)), "leave_one_server_out": loso,
           "leave_one_benchmark_out": lobo, "targets": TARGETS, "encoder": enc.identity}
    for name, v in loso["pooled"].items():
        print(f"{name:40s} destructive vs read-only {v['destructive_vs_read_only']:.3f}   "
              f"not-read-only vs read-only {v['not_read_only_vs_read_only']:.3f}")
    for name, v in lobo.items():
        print(f"held-out {name}: served level AUC (r >= 3) {v['served_level_auc']:.3f} (score {v['level_score_auc']:.3f}, "
              f"before {v['before_auc']:.3f})")
    if a.save:
        model = fit_level_model(aud_emb, aud_lv, mcp_emb, data.weak, seed=a.seed,
                                meta={"encoder": enc.identity, "trained_on": ["ultratool", "sealtools", "mcp-annotated"]})
        model.save(a.save)
        doc["saved"] = {"folder": a.save, **{k: v for k, v in model.meta.items() if k != "encoder"}}
        print(f"saved the level model to {a.save}")
    doc["seconds"] = round(time.time() - t0, 1)
    if a.json:
        from riskrank.fileio import atomic_write_text

        atomic_write_text(a.json, json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
