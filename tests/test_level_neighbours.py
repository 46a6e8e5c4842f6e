"""The neighbours' screen (benchmarks/level_neighbours.py): its artefact judged every variant
with the choice of the model shipped then (the partial form without neighbours), on every rated tool (the columns themselves are tested in
tests/test_levels.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import level_neighbours  # noqa: E402

ARTEFACT = ROOT / "benchmarks" / "results" / "level_neighbours.json"


def test_every_variant_was_judged_with_the_choice_of_the_model_shipped_then():
    doc = json.loads(ARTEFACT.read_text(encoding="utf-8"))
    then = json.loads((ROOT / "benchmarks" / "results" / "risk_levels_partial.json").read_text(encoding="utf-8"))["choice"]
    assert doc["choice"] == then
    assert list(doc["variants"]) == list(level_neighbours.VARIANTS)
    for r in doc["variants"].values():
        assert r["servers"]["n"] == doc["n_tools"]["mcp"] == 1298
        assert r["sets"]["n"] == doc["n_tools"]["sets"]
        assert 0 < r["servers"]["kappa_quadratic"] < 1
