"""The shipped model on the int8 encoder: what serving it would change, before any head is
retrained on its embeddings.

    python benchmarks/int8_encoder.py --json benchmarks/results/int8_encoder.json

The int8 encoder is the served ONNX graph with its weight MatMuls quantised to int8 per channel
and the attention products kept in float32 (``encoder_quantisation.py``'s ``int8 weights``:
3.5 ms against 9.9 ms per query there). The shipped heads, level model and choices were all
made on float32 embeddings and are kept as they are; only the forward pass changes. Measured in
one run, float32 and int8 side by side, nothing cached across them:

- **relevance and exposure** on the four registries the shipped model never trained on (BFCL,
  APIBench, API-Bank, ToolAlpaca), the leave-one-corpus-out protocol's held-out queries and
  metrics (``transfer_loco.run_shipped``): NDCG@5 and RVR@5 per mode, and the need head's AUC;
- **levels**: the levels served with each encoder for the 1,298 rated MCP tools, the twelve npm
  servers' 156 and BFCL's 128 multi-turn tools, how many move, and the weighted kappa against
  the annotators with each (the MCP tools trained the level model, so theirs is in-sample:
  only the difference is read).

A third arm, ``int8 queries``, encodes the queries with int8 weights and the tools in float32,
as a server does with ``--query-weights int8`` (the tools' embeddings, which the heads, the level
model and the rule filter's levels read, are encoded once; a query is encoded at every request):
its levels are the float32 arm's by construction. It was added after the first run's table
(below) showed the levels' moves to be what failed the rule.

The rule that would make int8 the serving default is fixed before the run: no registry's
``core+graph`` or ``core+graph+rule`` NDCG@5 moves by more than 1 %, and neither the served
levels' weighted kappa against the annotators on any rated registry nor the read-only vs
destructive AUCs of the MCP tools' served levels fall by more than 0.005. Heads retrained on
the int8 embeddings (the full leave-one-corpus-out study) are not part of this run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from riskrank.encoder import Encoder
from riskrank.fileio import write_json
from riskrank.training.levels import agreement_row

HELD_OUT = ("bfcl", "apibench", "apibank", "toolalpaca")
MODES = ("core+graph", "core+graph+rule")
MAX_NDCG_MOVE, MAX_KAPPA_LOSS = 0.01, 0.005


def int8_encoder(tmp: Path) -> Encoder:
    """The served encoder with its ONNX graph's weight MatMuls quantised to int8 (per channel,
    attention products in float32), no embedding cache (the cache is keyed by the model, not
    the forward pass)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    enc = Encoder(progress=False, use_cache=False, backend="onnx")
    fwd = enc.torch_free_backend()
    path = tmp / "int8-weights.onnx"
    attention = [f"l{i}.{n}" for i in range(fwd.layers_n) for n in ("qk", "ctx")]
    quantize_dynamic(str(fwd.path), str(path), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                     per_channel=True, nodes_to_exclude=attention)
    fwd.path = path
    fwd.session = fwd._session(None)
    return enc


def rated_levels(enc: Encoder, data: Path) -> dict[str, dict[str, Any]]:
    """Per rated registry: the annotators' levels and the levels served on ``enc``."""
    import bfcl_levels
    import npm_levels
    from risk_levels import hint_aucs
    from riskrank.datasets.rubric import load_mcp_set
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.registry import ToolRegistry

    out = {}
    rows = npm_levels.load_labels()
    tools = npm_levels.labelled_tools(rows)
    registries = {"npm": (tools, [r["risk_level"] for r in rows])}
    btools, _, blabels = bfcl_levels.labelled_tools(data, bfcl_levels.load_labels())
    registries["bfcl"] = (btools, [blabels[t.name]["risk_level"] for t in btools])
    for name, (tools, labels) in registries.items():
        levels = RiskAwareRetriever(ToolRegistry(tools), encoder=enc, progress=False).tool_levels.levels
        out[name] = {"labels": [int(x) for x in labels], "served": [int(x) for x in levels]}
    mcp = load_mcp_set()  # each server its own registry (names repeat across servers), as each is served
    served = np.zeros(len(mcp), dtype=np.int64)
    for group in sorted(set(mcp.groups)):
        idx = [i for i, g in enumerate(mcp.groups) if g == group]
        lv = RiskAwareRetriever(ToolRegistry([mcp.tools[i] for i in idx]), encoder=enc, progress=False).tool_levels.levels
        served[idx] = lv
    out["mcp (in-sample, hints not applied)"] = {"labels": [int(x) for x in mcp.levels], "served": [int(x) for x in served]}
    out["mcp (in-sample, hints not applied)"]["hint_aucs"] = hint_aucs(
        np.asarray(out["mcp (in-sample, hints not applied)"]["served"], dtype=float), mcp.hints)
    return out


def query_encoder() -> Encoder:
    """The int8 query encoder a server runs with ``--query-weights int8`` (its own identity:
    nothing cached is shared with the float32 pass)."""
    return Encoder(progress=False, use_cache=False, backend="onnx", weights="int8")


def compare(f32: dict[str, Any], i8: dict[str, Any], lv32: dict[str, Any], lv8: dict[str, Any]) -> dict[str, Any]:
    """The table's rows and the rule's verdict."""
    rows, worst_move, worst_kappa = [], 0.0, 0.0
    for name in HELD_OUT:
        a, b = f32["runs"][f"{name}|shipped"]["held_out"], i8["runs"][f"{name}|shipped"]["held_out"]
        for m in MODES:
            n32, n8 = a["methods"][m]["ndcg@5"], b["methods"][m]["ndcg@5"]
            move = abs(n8 - n32) / n32
            worst_move = max(worst_move, move)
            rows.append({"registry": name, "mode": m, "ndcg@5": [round(n32, 4), round(n8, 4)],
                         "rvr@5": [round(a["methods"][m]["rvr@5"], 4), round(b["methods"][m]["rvr@5"], 4)],
                         "move": round(move, 4)})
    levels = {}
    for name in lv32:
        y, s32, s8 = (np.asarray(lv32[name][k] if k != "i8" else lv8[name]["served"]) for k in ("labels", "served", "i8"))
        k32, k8 = agreement_row(y, s32)["kappa_quadratic"], agreement_row(y, s8)["kappa_quadratic"]
        worst_kappa = max(worst_kappa, k32 - k8)
        levels[name] = {"tools": len(y), "moved": int((s32 != s8).sum()), "kappa": [round(k32, 4), round(k8, 4)]}
        if "hint_aucs" in lv32[name]:
            levels[name]["hint_aucs"] = {k: [round(lv32[name]["hint_aucs"][k], 4), round(lv8[name]["hint_aucs"][k], 4)]
                                         for k in lv32[name]["hint_aucs"]}
            worst_auc = max(lv32[name]["hint_aucs"][k] - lv8[name]["hint_aucs"][k] for k in lv32[name]["hint_aucs"])
            worst_kappa = max(worst_kappa, worst_auc)
    need = {n: [f32["runs"][f"{n}|shipped"]["held_out"]["need"], i8["runs"][f"{n}|shipped"]["held_out"]["need"]] for n in HELD_OUT}
    ships = worst_move <= MAX_NDCG_MOVE and worst_kappa <= MAX_KAPPA_LOSS
    return {"ndcg": rows, "levels": levels, "need": need, "worst_ndcg_move": round(worst_move, 4),
            "worst_level_loss": round(worst_kappa, 4), "ships": ships}


def doc_table(result: dict[str, Any], key: str = "comparison") -> str:
    """docs' table: NDCG@5 / RVR@5 per held-out registry and mode, float32 -> int8; the levels
    (``key``: ``comparison``, every text int8, or ``comparison_int8_queries``)."""
    c = result[key]
    lines = ["| held out | mode | NDCG@5 float32 → int8 | RVR@5 float32 → int8 | NDCG@5 moved |", "|---|---|---|---|---:|"]
    for r in c["ndcg"]:
        lines.append(f"| {r['registry']} | `{r['mode']}` | {r['ndcg@5'][0]:.3f} → {r['ndcg@5'][1]:.3f} | "
                     f"{r['rvr@5'][0]:.3f} → {r['rvr@5'][1]:.3f} | {100 * r['move']:.1f} % |")
    lines += ["", "| rated tools | tools | served level moved | weighted κ float32 → int8 |", "|---|---:|---:|---|"]
    for name, v in c["levels"].items():
        lines.append(f"| {name} | {v['tools']:,} | {v['moved']} | {v['kappa'][0]:.3f} → {v['kappa'][1]:.3f} |")
    for name, v in c["levels"].items():
        for k, (x, y) in v.get("hint_aucs", {}).items():
            lines.append(f"\n{name}: AUC of the served level, {k.replace('_', ' ')}, {x:.3f} → {y:.3f}.")
    verdict = "met" if c["ships"] else "not met"
    return ("\n".join(lines) + f"\n\nLargest NDCG@5 move {100 * c['worst_ndcg_move']:.1f} % (the rule: at most "
            f"{100 * MAX_NDCG_MOVE:.0f} %), largest loss of weighted κ or of a hint AUC {c['worst_level_loss']:.3f} (at most {MAX_KAPPA_LOSS}): "
            f"the rule fixed before the run is {verdict} ({result['machine']}, {result['date']}).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    from transfer_loco import MAX_EVAL, run_shipped

    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"),
                              "machine": f"{os.cpu_count()}-core {platform.machine()} machine (load {os.getloadavg()[0]:.2f} at the start)",
                              "held_out": list(HELD_OUT), "max_eval": MAX_EVAL}
    with tempfile.TemporaryDirectory() as tmp:
        f32_enc = Encoder(progress=False, use_cache=False, backend="onnx")
        arms = (("float32", f32_enc, None), ("int8", int8_encoder(Path(tmp)), None), ("int8 queries", f32_enc, query_encoder()))
        runs = {}
        for label, enc, q_enc in arms:
            t0 = time.perf_counter()
            out = Path(tmp) / f"{label}.json"
            run_shipped(list(HELD_OUT), out, MAX_EVAL, enc=enc, query_enc=q_enc)
            runs[label] = json.loads(out.read_text())
            # the tools are encoded by ``enc``: the int8-queries arm serves the float32 arm's levels
            runs[label]["levels"] = rated_levels(enc, Path(a.data)) if q_enc is None else runs["float32"]["levels"]
            result[f"{label.replace(' ', '_')}_seconds"] = round(time.perf_counter() - t0, 1)
            print(label, result[f"{label.replace(' ', '_')}_seconds"], "s", flush=True)
    result["runs"] = {k: {"runs": v["runs"]} for k, v in runs.items()}
    result["comparison"] = compare(runs["float32"], runs["int8"], runs["float32"]["levels"], runs["int8"]["levels"])
    result["comparison_int8_queries"] = compare(runs["float32"], runs["int8 queries"], runs["float32"]["levels"],
                                                runs["int8 queries"]["levels"])
    result["levels"] = {k: v["levels"] for k, v in runs.items() if k != "int8 queries"}
    print(doc_table(result))
    print(doc_table(result, "comparison_int8_queries"))
    if a.json:
        write_json(a.json, result)


if __name__ == "__main__":
    main()
