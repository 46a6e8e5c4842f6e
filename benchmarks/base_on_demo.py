"""The shipped base model on the bundled demo registry (98 tools, 56 tasks), which it never saw.

    python benchmarks/base_on_demo.py [--json FILE]

Every mode of docs/base-model.md's table, zero-shot (the rule filter reads the demo's audited
levels, ``_pred`` the base risk head's), and the risk head's AUC and kappa on the demo tools.
"""

from __future__ import annotations

import argparse
import json

from riskrank.base import default_checkpoint
from riskrank.checkpoint import load_checkpoint
from riskrank.datasets import load_benchmark
from riskrank.encoder import Encoder
from riskrank.training.base_model import evaluate_modes, risk_agreement, summarise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    enc = Encoder(progress=False)
    ck = load_checkpoint(default_checkpoint(), encoder_identity=enc.identity)
    bench = load_benchmark("demo")
    qs = bench.splits["test"]
    emb = enc.encode(bench.registry.texts())
    m = summarise(evaluate_modes(ck, bench.registry, emb, enc.encode(qs.texts), qs.texts, qs.gold, enc))
    risk = risk_agreement(ck, bench.registry, emb)
    base = max(m["bm25"]["ndcg@5"], m["dense"]["ndcg@5"])
    print(f"riskrank-base on the demo registry ({len(bench.registry)} tools, {len(qs)} tasks), zero-shot")
    for name, v in m.items():
        print(f"  {name:22s} NDCG@5 {v['ndcg@5']:.3f} ({v['ndcg@5'] / base:.3f}x max(bm25, dense))  RVR@5 {v['rvr@5']:.3f}")
    print(f"  risk head: AUC (r >= 3) {risk['auc_p_risky']:.3f}, level AUC {risk['auc_level']:.3f}, quadratic kappa {risk['kappa_quadratic']:.3f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"methods": m, "risk": risk, "n_tasks": len(qs)}, fh, indent=1)


if __name__ == "__main__":
    main()
