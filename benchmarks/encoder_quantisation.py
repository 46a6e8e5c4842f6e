"""What int8 quantisation of the encoder's graph would buy, and what it would change.

    python benchmarks/encoder_quantisation.py [--json benchmarks/results/encoder_quantisation.json]

The served encoder (``riskrank.numpy_encoder.OnnxBertEncoder``: ONNX Runtime on the graph
riskrank builds from all-MiniLM-L6-v2's weights) against the same graph with its MatMuls
quantised to int8 by ONNX Runtime's dynamic quantiser, in one run on this machine:

- **speed**: one query (an UltraTool-length task, ~48 tokens) and a batch of 8, p50 over
  repeated calls, at one and at the session's default threads, for every MatMul quantised
  (``int8``) and for the weights only, per channel, with the attention products left in
  float32 (``int8 weights``);
- **fidelity**: the cosine between each text's float32 and int8 embedding over the demo
  registry's 98 tool texts and its tasks, and how many of each task's dense top-5 tools stay
  the same.

No benchmark query is read (no test split is looked at), and nothing is shipped from it: the
heads were trained on float32 embeddings, so an int8 encoder would have to be judged by the
leave-one-corpus-out study before it could serve.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from riskrank.datasets.demo import load_demo
from riskrank.encoder import _bundled_path, model_identity, resolve_model
from riskrank.fileio import write_json
from riskrank.numpy_encoder import OnnxBertEncoder

QUERY = ("I need to book a flight from New York to San Francisco next Tuesday morning and then reserve a hotel near "
         "the conference center for three nights, also check the weather")


def p50_ms(fn, n: int) -> float:
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=40)
    ns = ap.parse_args()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = _bundled_path()
    identity = model_identity(*resolve_model(None))
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = OnnxBertEncoder(folder, identity, tmp)
        q_path, w_path = Path(tmp) / "int8.onnx", Path(tmp) / "int8-weights.onnx"
        quantize_dynamic(str(fp32.path), str(q_path), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
        # the attention products (activation x activation) kept in float32, the weights per channel
        attention = [f"l{i}.{n}" for i in range(fp32.layers_n) for n in ("qk", "ctx")]
        quantize_dynamic(str(fp32.path), str(w_path), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                         per_channel=True, nodes_to_exclude=attention)
        int8 = OnnxBertEncoder(folder, identity, tmp)
        int8.path = q_path
        int8w = OnnxBertEncoder(folder, identity, tmp)
        int8w.path = w_path
        rows = {}
        for threads in (1, None):
            label = "1 thread" if threads == 1 else f"{min(4, os.cpu_count() or 1)} threads (the default)"
            for name, enc in (("float32", fp32), ("int8", int8), ("int8 weights", int8w)):
                enc.session = enc._session(threads)
                rows[f"{name}, {label}"] = {
                    "query_p50_ms": p50_ms(lambda e=enc: e.encode([QUERY]), ns.repeats),
                    "batch8_p50_ms": p50_ms(lambda e=enc: e.encode([f"{QUERY} {j}" for j in range(8)]), ns.repeats // 4)}
        demo = load_demo()
        tools = demo.registry.texts()
        tasks = list(demo.train.texts)
        t32, q32 = fp32.encode(tools), fp32.encode(tasks)
        top32 = np.argsort(-(q32 @ t32.T), axis=1)[:, :5]
        fidelity = {}
        for name, enc in (("int8", int8), ("int8 weights", int8w)):
            t8, q8 = enc.encode(tools), enc.encode(tasks)
            cos_tools, cos_tasks = (t32 * t8).sum(1), (q32 * q8).sum(1)
            top8 = np.argsort(-(q8 @ t8.T), axis=1)[:, :5]
            same = [len(set(a) & set(b)) / 5 for a, b in zip(top32, top8, strict=True)]
            fidelity[name] = {
                "tool_cosine_min": float(cos_tools.min()), "tool_cosine_mean": float(cos_tools.mean()),
                "task_cosine_min": float(cos_tasks.min()), "task_cosine_mean": float(cos_tasks.mean()),
                "dense_top5_overlap_mean": float(np.mean(same)), "tasks_with_identical_top5": int(sum(x == 1.0 for x in same)),
                "tasks": len(tasks), "tools": len(tools)}
        size = {"float32_mb": fp32.path.stat().st_size / 1e6, "int8_mb": q_path.stat().st_size / 1e6,
                "int8_weights_mb": w_path.stat().st_size / 1e6}
    out = {"speed": rows, "fidelity": fidelity["int8"], "fidelity_int8_weights": fidelity["int8 weights"], "graph_size": size,
           "cpus": os.cpu_count(), "load_average": list(os.getloadavg())}
    for k, v in rows.items():
        print(f"{k:32s} query p50 {v['query_p50_ms']:6.2f} ms   batch of 8 p50 {v['batch8_p50_ms']:7.2f} ms")
    for name, f in (("int8", out["fidelity"]), ("int8 weights", out["fidelity_int8_weights"])):
        print(f"cosine float32 vs {name}: tools min {f['tool_cosine_min']:.4f} mean {f['tool_cosine_mean']:.4f}; tasks min "
              f"{f['task_cosine_min']:.4f} mean {f['task_cosine_mean']:.4f}; dense top-5 overlap "
              f"{f['dense_top5_overlap_mean']:.3f} ({f['tasks_with_identical_top5']}/{f['tasks']} tasks identical)")
    print(f"graph size: float32 {size['float32_mb']:.1f} MB, int8 {size['int8_mb']:.1f} MB, int8 weights "
          f"{size['int8_weights_mb']:.1f} MB; load average {out['load_average'][0]:.2f}")
    if ns.json:
        write_json(ns.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
