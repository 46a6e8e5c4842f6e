"""The memory and time of reading a large registry's levels with the shipped level model.

    python benchmarks/level_memory.py --json benchmarks/results/level_memory.json [--sizes 10000,50000,100000]

A registry of N tools is read whole at connect (:meth:`riskrank.levels.LevelModel.predict`):
the capabilities, text facts, words, the nearest rated tools and the ordinal model. The word
vectors are dense (5,000 columns) and the nearest rated tools compare every tool with the 2,453
the model carries, so the model reads a registry in blocks (:data:`riskrank.levels.ROW_BLOCK`
tools): neither is ever held for all N tools at once. The
tools are the 1,298 real MCP tools of mcp-annotated repeated to N (each copy its own name), with
random unit embeddings (the cost does not depend on what they say). Peak memory is what NumPy
and Python allocate during the call (tracemalloc), beside the inputs; time is wall time, which
tracemalloc slows (benchmarks/level_cost.py times the reading without it). A run appends to
the artefact: the runs before it stay under ``earlier``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np

from riskrank.base import default_level_model_dir
from riskrank.datasets.rubric import load_mcp_set
from riskrank.fileio import write_json
from riskrank.levels import ToolEvidence, load_level_model, neighbour_shares


def measure(model, tools, n: int) -> dict:
    """Peak MiB and seconds of the neighbour step alone and of the whole reading, at ``n`` tools."""
    batch = [replace(tools[i % len(tools)], name=f"{tools[i % len(tools)].name}_{i // len(tools)}") for i in range(n)]
    emb = np.random.default_rng(0).normal(size=(n, model.dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ref, levels, k, _ = model.neighbours
    out = {"n_tools": n}
    for name, run in (("neighbours", lambda: neighbour_shares(emb, ref, levels, k)),
                      ("whole reading", lambda: model.predict(emb, batch, ToolEvidence.of(batch)))):
        tracemalloc.start()
        t0 = time.perf_counter()
        run()
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out[name] = {"peak_mib": round(peak / 2**20, 1), "seconds": round(seconds, 2)}
        print(f"{n:>9,} tools  {name:<14s} peak {peak / 2**20:8,.1f} MiB  {seconds:6.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--sizes", default="10000,50000,100000")
    ap.add_argument("--commit", default=None, help="the code measured, as recorded in the artefact (e.g. git rev-parse --short HEAD)")
    a = ap.parse_args()
    folder = default_level_model_dir()
    if folder is None:
        raise SystemExit("level_memory: no shipped level model in this tree")
    model = load_level_model(folder)
    if model.neighbours is None:
        raise SystemExit("level_memory: the shipped level model reads no neighbours")
    tools = load_mcp_set().tools
    rows = [measure(model, tools, int(n)) for n in a.sizes.split(",") if n.strip()]
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()}-core {platform.machine()} "
           f"(load {os.getloadavg()[0]:.2f} at the end)", "commit": a.commit, "rated_tools": int(model.neighbours[0].shape[0]),
           "rows": rows}
    if a.json:
        path = Path(a.json)
        if path.is_file():  # the runs before this one stay, newest first
            before = json.loads(path.read_text(encoding="utf-8"))
            doc["earlier"] = [{k: v for k, v in before.items() if k != "earlier"}, *before.get("earlier", [])]
        write_json(path, doc)


if __name__ == "__main__":
    main()
