"""Figures in the docs equal the artefacts they come from: each generated block is rendered
again from its artefact in the repository and must match the doc byte for byte."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz_registries  # noqa: E402  (the harness renders its own table)


def test_the_hardening_registries_table_is_its_artefact():
    artefact = json.loads((ROOT / "benchmarks/results/fuzz_registries.json").read_text())
    doc = (ROOT / "docs/hardening.md").read_text()
    table = fuzz_registries.doc_table(artefact)
    assert table in doc, "docs/hardening.md's registries table differs from its artefact: regenerate it (--write-doc)"
    figures = re.findall(r"\b\d[\d,]*\b", table.split("\n", 1)[1])
    print(f"docs/hardening.md: {len(figures)} figures checked against benchmarks/results/fuzz_registries.json")
    assert len(figures) > 200


def test_the_hostile_gateway_table_is_its_artefact():
    import hostile_gateway

    artefact = json.loads((ROOT / "benchmarks/results/hostile_gateway.json").read_text())
    assert hostile_gateway.doc_table(artefact) in (ROOT / "docs/hardening.md").read_text(), (
        "docs/hardening.md's gateway table differs from benchmarks/results/hostile_gateway.json")
    assert artefact["held"] == sum(r["outcome"] == "held" for r in artefact["rows"]) == artefact["tried"]
