"""The token-level readers' study (benchmarks/level_readers.py): its artefact judged every MCP
server once per split, with the choice the one-score level model shipped then carried, and
every reader in the same rows."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTEFACT = ROOT / "benchmarks" / "results" / "level_readers.json"


def test_the_study_read_the_shipped_choice_and_every_server_once():
    doc = json.loads(ARTEFACT.read_text(encoding="utf-8"))
    # run with the choice of the one-score model shipped then (its run kept as risk_levels_proportional.json)
    then = json.loads((ROOT / "benchmarks" / "results" / "risk_levels_proportional.json").read_text(encoding="utf-8"))["choice"]
    assert doc["choice"] == then
    groups = doc["server_groups"]["groups"]
    servers = [s for g in groups for s in g]
    assert len(groups) == 6 and len(servers) == len(set(servers)) == 23
    assert set(doc["leave_one_server_out"]) == {"shipped", "attention"}
    assert set(doc["server_groups"]["readers"]) == {"shipped", "attention", "last layer"}
    for split in (doc["leave_one_server_out"], doc["server_groups"]["readers"]):
        for row in split.values():
            assert row["n"] == doc["n_tools"]["mcp"] == 1298 and 0 < row["kappa_quadratic"] < 1
