"""The cost of reading a registry's levels at connect, per tool, beyond the embedding.

    python benchmarks/level_cost.py --json benchmarks/results/level_cost.json

What a gateway or a library pipeline pays once per catalogue for every tool on top of encoding
it: finding the registry's shared openings, the capabilities, the four text facts, the word
vector and the ordinal model (:func:`riskrank.pipeline.served_level_prediction`
minus the encoder), and then each tool's served level with its evidence read from that
(:func:`riskrank.risk.resolve_tool_levels`: ``resolve_*``, written apart, and in ``total_*``;
it once rebuilt an array over every tool at each tool's read, 2.3 ms a tool here, and the
model's figure alone hid it). Timed over the 1,298 real MCP tools of mcp-annotated with the shipped level
model, as the best and the median of ``--repeats`` passes (CPU time of this process, which a
busy machine inflates far less than wall time; both are written). The target is 1 ms per tool.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from riskrank.base import default_level_model_dir
from riskrank.datasets.rubric import load_mcp_set
from riskrank.encoder import Encoder
from riskrank.fileio import write_json
from riskrank.levels import ToolEvidence, load_level_model, own_texts
from riskrank.risk import resolve_tool_levels

TARGET_MS = 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    folder = default_level_model_dir()
    if folder is None:
        raise SystemExit("level_cost: no shipped level model in this tree")
    model = load_level_model(folder)
    tools = load_mcp_set().tools
    emb = Encoder(progress=False).encode([t.text() for t in tools])
    cpu, wall, resolve_cpu, total_cpu = [], [], [], []
    for _ in range(a.repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        read, openings = own_texts(tools)
        prediction = model.predict(emb, read, ToolEvidence.of(read, openings))
        c1 = time.process_time()
        cpu.append((c1 - c0) / len(tools) * 1000)
        wall.append((time.perf_counter() - w0) / len(tools) * 1000)
        resolve_tool_levels(tools, prediction=prediction)
        resolve_cpu.append((time.process_time() - c1) / len(tools) * 1000)
        total_cpu.append(cpu[-1] + resolve_cpu[-1])
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()}-core {platform.machine()} (load {os.getloadavg()[0]:.2f} at the end)",
           "tools": len(tools), "repeats": a.repeats, "target_ms_per_tool": TARGET_MS,
           "cpu_ms_per_tool": {"best": round(min(cpu), 4), "median": round(statistics.median(cpu), 4)},
           "wall_ms_per_tool": {"best": round(min(wall), 4), "median": round(statistics.median(wall), 4)},
           "resolve_cpu_ms_per_tool": {"best": round(min(resolve_cpu), 4), "median": round(statistics.median(resolve_cpu), 4)},
           "total_cpu_ms_per_tool": {"best": round(min(total_cpu), 4), "median": round(statistics.median(total_cpu), 4)},
           # which level model was timed (its form costs: a partial model reads four scores, not one)
           "level_model": {"weights_sha256": model.meta.get("weights_sha256"), "form": model.meta.get("form", "proportional")}}
    print(f"{len(tools)} tools: CPU {doc['cpu_ms_per_tool']['median']:.3f} ms per tool (median of {a.repeats}; best "
          f"{doc['cpu_ms_per_tool']['best']:.3f}), wall {doc['wall_ms_per_tool']['median']:.3f}; the levels resolved "
          f"{doc['resolve_cpu_ms_per_tool']['median']:.3f} more, {doc['total_cpu_ms_per_tool']['median']:.3f} in all; "
          f"target {TARGET_MS} ms; {doc['machine']}")
    if a.json:
        if os.path.isfile(a.json):  # earlier measurements are kept: the cost moves with the machine's load
            with open(a.json, encoding="utf-8") as f:
                before = json.load(f)
            doc["earlier"] = [{k: v for k, v in before.items() if k != "earlier"}, *before.get("earlier", [])]
        write_json(a.json, doc)


if __name__ == "__main__":
    main()
