"""What a release of riskrank served for the rubric-rated tools: the "before" of benchmarks/risk_levels.py.

    PYTHONPATH=/path/to/checkout-of-that-release/src python benchmarks/levels_before.py \
        --label 3e3fee1 --out benchmarks/results/levels_before.json

Run with the release's own code on the path (a ``git worktree`` of the commit): it builds one
registry per MCP server from ``corpora/mcp-annotated/tools.json`` (with the hints each server
declares) and one of the attack set, and records the level the release's default retriever
serves each tool (``RiskAwareRetriever(...).tool_levels``), keyed ``mcp:<id>`` / ``attack:<id>``.
The previous level model was fitted on these servers' declared hints, so its figures on them
are in-sample for the hints (they flatter it); the rubric levels it is compared with are new.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", required=True, help="the release's commit, recorded in the file")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import riskrank
    from riskrank.encoder import Encoder
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.registry import ToolRegistry, make_tool

    enc = Encoder(progress=False)
    levels: dict[str, int] = {}
    records = json.loads((ROOT / "corpora/mcp-annotated/tools.json").read_text())["tools"]
    by_server: dict[str, list[int]] = collections.defaultdict(list)
    for i, t in enumerate(records):
        by_server[t["server"]].append(i)
    for ids in by_server.values():
        seen, tools, keep = set(), [], []
        for i in ids:
            t = records[i]
            if t["name"] in seen:
                continue
            seen.add(t["name"])
            ann = {k: v for k, v in (t.get("annotations") or {}).items() if v is not None}
            tools.append(make_tool(t["name"], t["description"], annotations=ann or None, parameters=t.get("inputSchema"), where="before"))
            keep.append(i)
        served = RiskAwareRetriever(ToolRegistry(tools), encoder=enc, progress=False).tool_levels.levels
        levels.update({f"mcp:{i}": int(lv) for i, lv in zip(keep, served, strict=True)})
    attack = json.loads((ROOT / "corpora/rubric-levels/attack.json").read_text())["tools"]
    tools = [make_tool(t["name"], t["description"], parameters=t.get("inputSchema"), where="before") for t in attack]
    served = RiskAwareRetriever(ToolRegistry(tools), encoder=enc, progress=False).tool_levels.levels
    levels.update({f"attack:{t['id']}": int(lv) for t, lv in zip(attack, served, strict=True)})
    doc = {"release": a.label, "riskrank_version": getattr(riskrank, "__version__", None), "encoder": enc.identity,
           "counts": dict(sorted(collections.Counter(levels.values()).items())), "levels": levels}
    Path(a.out).write_text(json.dumps(doc, indent=0) + "\n")
    print(f"{len(levels)} tools: {doc['counts']}")


if __name__ == "__main__":
    main()
