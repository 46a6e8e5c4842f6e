"""The int8-encoder study's artefact: its comparison and verdict follow from its own runs (the
NDCG@5 of each mode per registry, the levels served with each encoder), and the rule reads
both the ranking's moves and the levels' agreement."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import int8_encoder  # noqa: E402


def test_the_comparison_follows_from_the_runs():
    doc = json.loads((ROOT / "benchmarks" / "results" / "int8_encoder.json").read_text(encoding="utf-8"))
    fresh = int8_encoder.compare(doc["runs"]["float32"], doc["runs"]["int8"], doc["levels"]["float32"], doc["levels"]["int8"])
    assert fresh == doc["comparison"]
    moves = [r["move"] for r in fresh["ndcg"]]
    assert fresh["worst_ndcg_move"] == max(moves) and fresh["ships"] is False


def test_a_level_loss_alone_fails_the_rule():
    run = {"runs": {f"{n}|shipped": {"held_out": {"methods": {m: {"ndcg@5": 0.5, "rvr@5": 0.2} for m in int8_encoder.MODES},
                                                  "need": 0.8}} for n in int8_encoder.HELD_OUT}}
    same = {"r": {"labels": [1, 2, 3, 4, 1, 2], "served": [1, 2, 3, 4, 1, 2]}}
    worse = {"r": {"labels": [1, 2, 3, 4, 1, 2], "served": [1, 2, 3, 3, 2, 2]}}
    assert int8_encoder.compare(run, run, same, same)["ships"]
    out = int8_encoder.compare(run, run, same, worse)
    assert out["worst_ndcg_move"] == 0 and out["worst_level_loss"] > int8_encoder.MAX_KAPPA_LOSS and not out["ships"]
