"""The dense relevance floor (``modes.DENSE_MIN_SCORE``): where it comes from, and what it costs.

    python benchmarks/min_score.py --data data [--encoder NAME] [--quantile 0.01] [--json out.json]

The floor is chosen on validation queries only: the Seal-Tools training split (``dev.jsonl``
here; ``train.jsonl`` where present) and the demo tasks. For each, the cosine of every
(query, gold tool) pair under the encoder; the floor is the lower of the two sets'
``--quantile`` points (:func:`riskrank.training.relevance_floor`), so at most that fraction of
either set's gold tools score below it. The test splits (UltraTool test, Seal-Tools
test_in) are then only *evaluated*: the share of their gold tools under the floor, and how
many of the dense top-5 it removes (tools an agent would otherwise be shown), gold or not.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from riskrank.datasets import load_benchmark
from riskrank.encoder import Encoder
from riskrank.fileio import write_json
from riskrank.first_stage import top_m
from riskrank.tables import text_table
from riskrank.training import MIN_SCORE_QUANTILE, relevance_floor

QUANTILES = (0.005, 0.01, 0.02, 0.05)


def gold_scores(cos: np.ndarray, gold: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([cos[i, np.asarray(g, dtype=np.int64)] for i, g in enumerate(gold)])


def effect(cos: np.ndarray, gold: list[np.ndarray], floor: float) -> dict[str, float]:
    """What the floor does to the dense top-5 of these queries."""
    top = top_m(cos, 5)
    scores = np.take_along_axis(cos, top, axis=1)
    is_gold = np.array([[t in set(np.asarray(g).tolist()) for t in row] for row, g in zip(top, gold, strict=True)])
    cut = scores < floor
    g = gold_scores(cos, gold)
    return {
        "gold_below_floor": float((g < floor).mean()),
        "top5_removed": float(cut.mean()),
        "top5_gold_removed": float((cut & is_gold).sum() / max(1, is_gold.sum())),
        "top5_non_gold_removed": float((cut & ~is_gold).sum() / max(1, (~is_gold).sum())),
        "queries_with_a_tool_removed": float(cut.any(axis=1).mean()),
    }


NAMES = {"sealtools/train": "Seal-Tools dev (its training split here)", "demo/train": "demo tasks"}


def doc_table(out: dict) -> str:
    """docs/serving.md's table of the validation sets' gold-score quantiles (a test renders it
    again from ``benchmarks/results/min_score.json``)."""
    lines = ["| validation set | queries | gold pairs | " + " | ".join(f"q {100 * p:g}%" for p in QUANTILES) + " |",
             "|---|---:|---:|" + "---:|" * len(QUANTILES)]
    for label, v in out["validation"].items():
        lines.append(f"| {NAMES.get(label, label)} | {v['n_queries']:,} | {v['n_gold_pairs']:,} | "
                     + " | ".join(f"{v[f'q{100 * p:g}%']:.4f}" for p in QUANTILES) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="data directory [default: $RISKRANK_DATA]")
    ap.add_argument("--encoder", default=None, help="encoder name or folder [default: the bundled MiniLM]")
    ap.add_argument("--quantile", type=float, default=MIN_SCORE_QUANTILE)
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    ns = ap.parse_args()
    enc = Encoder(ns.encoder, progress=False)
    out: dict = {"encoder": enc.identity, "quantile": ns.quantile, "validation": {}, "test": {}}
    sets = {}
    for name in ("sealtools", "demo", "ultratool"):
        b = load_benchmark(name, ns.data)
        tool_emb = enc.encode(b.registry.texts(), desc=f"{name} tools")
        if b.train is not None:
            q = b.train
            sets[("validation", f"{name}/train")] = (enc.encode(q.texts) @ tool_emb.T, q.gold)
        for split, q in b.splits.items():
            if name != "demo":  # the demo's tasks are its training tasks
                sets[("test", f"{name}/{split}")] = (enc.encode(q.texts) @ tool_emb.T, q.gold)
    rows = []
    floors = []
    for (kind, label), (cos, gold) in sets.items():
        if kind != "validation":
            continue
        g = gold_scores(cos, gold)
        qs = {f"q{100 * p:g}%": float(np.quantile(g, p, method="lower")) for p in QUANTILES}
        floor = relevance_floor(cos, gold, ns.quantile)
        floors.append(floor)
        out["validation"][label] = {"n_queries": len(gold), "n_gold_pairs": int(g.size), "floor": floor, **qs}
        rows.append([label, str(len(gold)), str(g.size), *(f"{v:.4f}" for v in qs.values()), f"{floor:.4f}"])
    print(text_table(["validation set", "queries", "gold pairs", *(f"q {100 * p:g}%" for p in QUANTILES), "floor"], rows))
    floor = min(floors)
    out["floor"] = floor
    print(f"\nfloor = min over the validation sets = {floor:.4f} (encoder {enc.identity})\n")
    rows = []
    for (kind, label), (cos, gold) in sets.items():
        e = effect(cos, gold, floor)
        out[kind].setdefault(label, {}).update(e)  # a validation set keeps its quantiles beside the effect
        rows.append([f"{label} ({kind})", *(f"{100 * v:.1f}%" for v in e.values())])
    print(text_table(["queries", "gold < floor", "top-5 removed", "gold of top-5 removed", "non-gold of top-5 removed",
                      "queries losing a tool"], rows))
    if ns.json:
        write_json(ns.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
