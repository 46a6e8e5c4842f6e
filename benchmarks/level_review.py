"""What an operator's review buys on registries nobody on the project trained on: the served
levels with the most doubtful tools checked first (``riskrank levels review``).

    python benchmarks/level_review.py --json benchmarks/results/level_review.json

On the two rated registries the level model never read (twelve MCP servers from npm, and BFCL's
multi-turn tools: ``npm_levels.py``, ``bfcl_levels.py``), each tool's served level, its doubt
(:meth:`riskrank.risk.ToolLevels.doubt` at the default confirm_level) and the annotators'
level. A review of the first 10, 20 and 30 % of the tools in ``review_order`` is simulated by
pinning those tools at the annotators' level (what ``riskrank levels pin`` does with the
decisions); the default policy's two errors (tools rated L1-L2 asked about, tools rated L4-L5
run without a question) are counted after it, beside a review of as many tools drawn at random
(the mean of 200 draws, seed 0). The order (the doubt, most doubtful first) was fixed before
this was first run; nothing here tunes anything. The command also leaves out the tools the
policy never offers: here only ``firecrawl_scrape``, served L5 above the default max_level 4,
131st of the npm order, past every fraction simulated.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np

import _rated_registry as rated
import bfcl_levels
import npm_levels
from riskrank.fileio import write_json
from riskrank.tables import markdown_table

FRACTIONS = (0.1, 0.2, 0.3)
RANDOM_DRAWS, SEED = 200, 0
CONFIRM_LEVEL = 3


def errors(gold: np.ndarray, served: np.ndarray) -> tuple[int, int]:
    """(tools rated L1-L2 asked about, tools rated L4-L5 run unasked) under confirm_level 3."""
    return int(((gold <= 2) & (served >= CONFIRM_LEVEL)).sum()), int(((gold >= 4) & (served < CONFIRM_LEVEL)).sum())


def reviewed(gold: np.ndarray, served: np.ndarray, order: list[int], n: int) -> np.ndarray:
    """The served levels after the first ``n`` tools of ``order`` are pinned at their label."""
    out = served.copy()
    idx = np.asarray(order[:n], dtype=np.int64)
    out[idx] = gold[idx]
    return out


def simulate(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The review table of one registry from its per-tool records (key, label, served, doubt):
    what the artefact's figures are recomputed from."""
    gold = np.asarray([t["label"] for t in tools], dtype=np.int64)
    served = np.asarray([t["served"] for t in tools], dtype=np.int64)
    order = review_order(tools)
    rng = np.random.default_rng(SEED)
    draws = [rng.permutation(len(tools)).tolist() for _ in range(RANDOM_DRAWS)]
    low0, high0 = errors(gold, served)
    rows = [{"reviewed": 0, "fraction": 0.0, "low_asked": low0, "high_unasked": high0, "random_low_asked": float(low0),
             "random_high_unasked": float(high0)}]
    for f in FRACTIONS:
        n = round(f * len(tools))
        low, high = errors(gold, reviewed(gold, served, order, n))
        rand = np.asarray([errors(gold, reviewed(gold, served, d, n)) for d in draws], dtype=np.float64).mean(axis=0)
        rows.append({"reviewed": n, "fraction": f, "low_asked": low, "high_unasked": high,
                     "random_low_asked": round(float(rand[0]), 1), "random_high_unasked": round(float(rand[1]), 1)})
    missed = [order.index(i) + 1 if i in order else None for i in np.flatnonzero((gold >= 4) & (served < CONFIRM_LEVEL))]
    return {"n_tools": len(tools), "n_low": int((gold <= 2).sum()), "n_high": int((gold >= 4).sum()), "rows": rows,
            "unasked_high_ranks": missed}


def registry_records(tools: list[Any], keys: list[str], labels: list[int], groups: list[str]) -> list[dict[str, Any]]:
    """Each tool's key, label, served level and doubt, as riskrank serves the registry (``groups``:
    each tool's server)."""
    levels = rated.retriever_of(tools, groups).tool_levels
    doubt = levels.doubt(CONFIRM_LEVEL)
    return [{"tool": k, "label": int(g), "served": int(levels.levels[i]),
             "doubt": None if not np.isfinite(doubt[i]) else round(float(doubt[i]), 4)}
            for i, (k, g) in enumerate(zip(keys, labels, strict=True))]


def bfcl_records(data: Path) -> list[dict[str, Any]]:
    """BFCL's multi-turn tools (``data``: the data directory) as :func:`registry_records`."""
    tools, envs, labels = bfcl_levels.labelled_tools(data, bfcl_levels.load_labels())
    return registry_records(tools, [t.name for t in tools], [labels[t.name]["risk_level"] for t in tools], envs)


def review_order(records: list[dict[str, Any]]) -> list[int]:
    """The records the model levelled, most doubtful first (ties in order): ``riskrank levels
    review``'s order (:meth:`riskrank.risk.ToolLevels.review_order`) from the records' doubts."""
    doubt = np.asarray([np.nan if t["doubt"] is None else t["doubt"] for t in records], dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(doubt))
    return [int(i) for i in finite[np.argsort(-doubt[finite], kind="stable")]]


def reviewed_pins(data: Path, fraction: float) -> dict[str, int]:
    """name -> the annotators' level for the first ``fraction`` of BFCL's tools in the review
    order: the pins an operator who read that many would write (``riskrank levels pin``)."""
    recs = bfcl_records(data)
    return {recs[i]["tool"]: recs[i]["label"] for i in review_order(recs)[:round(fraction * len(recs))]}


def measure(data: Path) -> dict[str, Any]:
    rows = npm_levels.load_labels()
    npm = registry_records(npm_levels.labelled_tools(rows), [r["id"] for r in rows], [r["risk_level"] for r in rows],
                           [r["server"] for r in rows])
    bfcl = bfcl_records(data)
    out: dict[str, Any] = {"confirm_level": CONFIRM_LEVEL, "random_draws": RANDOM_DRAWS, "seed": SEED, "registries": {}}
    for name, recs in (("npm", npm), ("bfcl", bfcl)):
        out["registries"][name] = {**simulate(recs), "tools": recs}
    return out


NAMES = {"npm": "twelve MCP servers from npm", "bfcl": "BFCL multi-turn"}


def doc_table(result: dict[str, Any]) -> str:
    """docs/base-model.md's table, from the artefact."""
    body = []
    for key, reg in result["registries"].items():
        for r in reg["rows"]:
            body.append([NAMES[key] if r["reviewed"] == 0 else "", f"{r['reviewed']} ({100 * r['fraction']:.0f} %)",
                         f"{r['low_asked']} of {reg['n_low']}", f"{r['high_unasked']} of {reg['n_high']}",
                         "" if r["reviewed"] == 0 else f"{r['random_low_asked']:.1f}",
                         "" if r["reviewed"] == 0 else f"{r['random_high_unasked']:.1f}"])
    table = markdown_table(["registry", "tools reviewed, most doubtful first", "L1–L2 asked", "L4–L5 run unasked",
                       "L1–L2 asked, a random review", "L4–L5 unasked, a random review"], body)
    ranks = [f"{', '.join(map(str, sorted(r['unasked_high_ranks'])))} of {r['n_tools']} ({NAMES[k]})"
             for k, r in result["registries"].items()]
    return table + "\n\nIn the review order, the tools rated L4–L5 that are served unasked come at ranks " + " and ".join(ranks) + "."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"), help="the data directory (riskrank data fetch)")
    ap.add_argument("--json", default=None, help="write the artefact here")
    args = ap.parse_args()
    out = measure(Path(args.data))
    print(doc_table(out))
    if args.json:
        write_json(args.json, out)


if __name__ == "__main__":
    main()
