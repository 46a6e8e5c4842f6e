"""The rated tools of twelve MCP servers from npm: the labels file follows the span rule and
carries what the annotators read, its data card states what the votes give, and the committed
artefact holds the levels riskrank serves today for those definitions (a real end-to-end run
of the base model over 156 real tools: no npm or network needed)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _rated_registry as rated  # noqa: E402
import npm_levels  # noqa: E402
from riskrank.errors import DataError  # noqa: E402

ARTEFACT = ROOT / "benchmarks" / "results" / "npm_levels.json"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return npm_levels.load_labels()


def test_the_labels_follow_the_span_rule_and_carry_the_definitions(rows):
    assert len(rows) == 156 and len({r["id"] for r in rows}) == 156
    assert {r["server"] for r in rows} == set(npm_levels.SERVERS)
    for r in rows:
        assert r["id"] == f"{r['server']}::{r['name']}" and r["version"] == npm_levels.SERVERS[r["server"]][0]
        assert isinstance(r["description"], str) and isinstance(r["inputSchema"], dict)
    assert [(r["id"], p) for r in rows if (p := rated.span_rule_problem(r))] == []


def test_the_data_card_states_what_the_votes_give(rows):
    card = " ".join((ROOT / "corpora" / "rubric-levels" / "README.md").read_text(encoding="utf-8").split())
    assert [x for x in rated.card_statements(rows) if x not in card] == []


def test_a_tool_two_servers_share_is_offered_under_its_server(rows):
    names = npm_levels.served_names(rows)
    assert len(set(names)) == len(names)
    by_id = dict(zip((r["id"] for r in rows), names, strict=True))
    assert by_id["@modelcontextprotocol/server-github::create_issue"] == "github__create_issue"
    assert by_id["@modelcontextprotocol/server-gitlab::create_issue"] == "gitlab__create_issue"
    assert by_id["firecrawl-mcp::firecrawl_search"] == "firecrawl_search"


def test_the_served_levels_are_todays(rows):
    result = json.loads(ARTEFACT.read_text(encoding="utf-8"))
    assert {k: v["label"] for k, v in result["levels"].items()} == {r["id"]: r["risk_level"] for r in rows}
    fresh = npm_levels.report(rows)
    assert {k: v["served"] for k, v in fresh["levels"].items()} == {k: v["served"] for k, v in result["levels"].items()}
    assert fresh["agreement"] == result["agreement"] and fresh["confusion"] == result["confusion"]
    assert fresh["capability_floors"] == result["capability_floors"]


def test_a_missing_vote_or_an_unreviewed_wide_span_is_named(tmp_path, rows):
    votes = []
    for n, levels in enumerate(((1, 1), (1, 4), (1, 1))):
        path = tmp_path / f"A{n}.json"
        path.write_text(json.dumps({r["id"]: {"level": levels[i], "why": "x"} for i, r in enumerate(rows[:2])}), encoding="utf-8")
        votes.append(path)
    with pytest.raises(DataError, match="span 3 needs a written review"):
        npm_levels.labels_from_votes(rows[:2], votes, {})
    with pytest.raises(DataError, match="gave no level"):
        npm_levels.labels_from_votes([rows[0], rows[2]], votes, {})


def test_bad_labels_files_are_named_in_one_line(tmp_path, rows):
    path = tmp_path / "labels.jsonl"
    cases = {"": "no labelled tools", "[1, 2]\n": "labels.jsonl: line 1: not a JSON object",
             json.dumps({**rows[0], "server": "left-pad"}) + "\n": "'left-pad' is not among the servers",
             json.dumps(rows[0]) + "\n" + json.dumps(rows[0]) + "\n": "appears twice",
             json.dumps({k: v for k, v in rows[0].items() if k != "votes"}) + "\n": "labels.jsonl: line 1: no votes",
             json.dumps({**rows[0], "risk_level": 7}) + "\n": "risk_level 7 is not a level 1-5"}
    for text, message in cases.items():
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=re.escape(message)):
            npm_levels.load_labels(path)


def test_a_vote_out_of_range_or_without_its_reason_is_refused(tmp_path, rows):
    files = []
    for n, (level, why) in enumerate(((1, "a"), (9, "b"), (1, ""))):
        path = tmp_path / f"A{n}.json"
        path.write_text(json.dumps({rows[0]["id"]: {"level": level, "why": why}}), encoding="utf-8")
        files.append(path)
    with pytest.raises(DataError, match="without its reason"):
        npm_levels.labels_from_votes(rows[:1], files, {})
    files[2].write_text(json.dumps({rows[0]["id"]: {"level": 1, "why": "c"}}), encoding="utf-8")
    with pytest.raises(DataError, match="level 9 is not a level 1-5"):
        npm_levels.labels_from_votes(rows[:1], files, {})


def test_the_span_rule_check_names_a_record_that_breaks_it(rows):
    row = dict(rows[0])
    assert rated.span_rule_problem(row) is None
    assert rated.span_rule_problem({**row, "span": row["span"] + 2}).startswith("span ")
    assert rated.span_rule_problem({**row, "risk_level": row["risk_level"] % 5 + 1}) == "its level is not the votes' resolution"
    assert rated.span_rule_problem({**row, "votes": {"A": 1, "B": 1}}).startswith("votes ")
    assert rated.span_rule_problem({**row, "why": {**row["why"], "B": " "}}) == "a vote without its reason"
