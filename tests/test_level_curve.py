"""The learning curve and the four extra inputs (benchmarks/level_curve.py): its artefact
judged every MCP server once per row, with the choice the one-score level model shipped then carried, and its
split by the servers read and never read adds up to the whole."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import level_curve  # noqa: E402

ARTEFACT = ROOT / "benchmarks" / "results" / "level_curve.json"


def test_every_row_judged_every_server_with_the_shipped_choice():
    doc = json.loads(ARTEFACT.read_text(encoding="utf-8"))
    # run with the choice of the one-score model shipped then (its run kept as risk_levels_proportional.json)
    then = json.loads((ROOT / "benchmarks" / "results" / "risk_levels_proportional.json").read_text(encoding="utf-8"))["choice"]
    assert doc["choice"] == then
    assert set(doc["variants"]) == set(level_curve.VARIANTS)
    assert sorted({(r["fraction"], r["seed"]) for r in doc["curve"]}) == sorted(
        (f, s) for f in level_curve.FRACTIONS for s in range(level_curve.DRAWS if f < 1 else 1))
    rows = [r for r in doc["curve"]] + list(doc["variants"].values())
    for r in rows:
        assert r["all"]["n"] == doc["n_tools"]["mcp"] == 1298
        assert r["read"]["n"] + r["never read"]["n"] == r["all"]["n"]
        assert 0 < r["all"]["kappa_quadratic"] < 1
    full = next(r for r in doc["curve"] if r["fraction"] == 1.0)
    assert full["all"] == doc["variants"]["shipped"]["all"]  # the same fit, twice


def test_a_name_is_read_as_its_words():
    assert level_curve._name_words("getUserKeys") == "get user keys"
    assert level_curve._name_words("kubectl_get-pods") == "kubectl get pods"
