"""The rated BFCL multi-turn tools: the labels file follows the span rule, its data card states
what the votes give, the committed artefact reads the same labels, and (with the data) every
label names the description the annotators read and the served levels are today's."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _rated_registry as rated  # noqa: E402
import bfcl_levels  # noqa: E402
from riskrank.errors import DataError  # noqa: E402

ARTEFACT = ROOT / "benchmarks" / "results" / "bfcl_levels.json"


def test_the_labels_follow_the_span_rule():
    rows = bfcl_levels.load_labels()
    assert len(rows) == 128 and len({r["name"] for r in rows}) == 128
    assert [(r["name"], p) for r in rows if (p := rated.span_rule_problem(r))] == []


def test_the_data_card_states_what_the_votes_give():
    card = " ".join((ROOT / "corpora" / "rubric-levels" / "README.md").read_text(encoding="utf-8").split())
    assert [x for x in rated.card_statements(bfcl_levels.load_labels()) if x not in card] == []


def test_the_artefact_reads_these_labels():
    result = json.loads(ARTEFACT.read_text(encoding="utf-8"))
    labels = {r["name"]: r["risk_level"] for r in bfcl_levels.load_labels()}
    assert {n: v["label"] for n, v in result["levels"].items()} == labels
    gold = np.asarray([v["label"] for v in result["levels"].values()])
    pred = np.asarray([v["served"] for v in result["levels"].values()])
    assert result["agreement"]["exact"] == round(float((gold == pred).mean()), 4)
    assert sum(map(sum, result["confusion"])) == len(labels)


def test_a_moved_description_or_a_bad_line_is_named(tmp_path):
    bad = tmp_path / "labels.jsonl"
    bad.write_text(json.dumps(bfcl_levels.load_labels()[0]) + "\nnot json\n", encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{bad}: line 2: invalid JSON")):
        bfcl_levels.load_labels(bad)
    bad.write_text('{"name": "cd"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{bad}: line 1: no votes")):
        bfcl_levels.load_labels(bad)
    with pytest.raises(DataError, match="missing"):
        bfcl_levels.load_labels(tmp_path / "absent.jsonl")


@pytest.fixture(scope="module")
def bfcl(data_dir) -> Path:
    if not (data_dir / bfcl_levels.BFCL / "bfcl_eval/data/multi_turn_func_doc").is_dir():
        pytest.skip(f"{data_dir} lacks BFCL's multi-turn tools: run `riskrank data fetch`")
    return data_dir


def test_every_label_names_the_description_read_and_the_served_levels_are_todays(bfcl):
    tools, envs, _labels = bfcl_levels.labelled_tools(bfcl, bfcl_levels.load_labels())
    assert len(tools) == 128 and len(set(envs)) == 8
    served, _ = rated.served_levels(rated.retriever_of(tools, envs))
    result = json.loads(ARTEFACT.read_text(encoding="utf-8"))
    assert {t.name: int(s) for t, s in zip(tools, served, strict=True)} == {n: v["served"] for n, v in result["levels"].items()}
