"""The session replay, small and real: a handful of BFCL's multi-turn tasks replayed through
the real gateway (``riskrank mcp`` over streamable HTTP, BFCL's simulators behind a real MCP
server), clean and with an attacker's instruction planted in one result, in every column;
the whole replay (200 tasks) behind the ``slow`` marker, against the committed artefact."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import session_replay  # noqa: E402

NEEDED = (f"{session_replay.BFCL}/bfcl_eval/data/BFCL_v4_multi_turn_base.json",
          f"{session_replay.BFCL}/bfcl_eval/data/possible_answer/BFCL_v4_multi_turn_base.json",
          f"{session_replay.BFCL}/bfcl_eval/eval_checker/multi_turn_eval/func_source_code/gorilla_file_system.py",
          f"{session_replay.BIPIA}/text_attack_test.json")


@pytest.fixture(scope="module")
def bfcl(data_dir) -> Path:
    missing = [f for f in NEEDED if not (data_dir / f).is_file()]
    if missing:
        pytest.skip(f"{data_dir} lacks BFCL's multi-turn tasks or BIPIA ({missing[0]}): run `riskrank data fetch`")
    return data_dir


def test_the_ground_truth_parses_and_every_task_has_an_attack(bfcl):
    sys.path.insert(0, str(bfcl / session_replay.BFCL))
    tasks = session_replay.load_tasks(bfcl)
    assert len(tasks) == 200 and all(len(t.turns) == len(t.calls) for t in tasks)
    assert tasks[0].calls[0][0] == ("cd", {"folder": "document"})
    assert ("sort", {"file_name": "final_report.pdf"}) in tasks[0].calls[2]  # a positional argument, named
    payloads = session_replay.bipia_texts(bfcl)
    attacks = [session_replay.attack_of(i, t, payloads) for i, t in enumerate(tasks)]
    assert all(a is not None and a[0].cls in t.classes for a, t in zip(attacks, tasks, strict=True))
    with pytest.raises(ValueError, match="not a call"):
        session_replay.parse_call("import os", {})


def test_a_handful_of_tasks_replayed(bfcl):
    out = session_replay.replay(bfcl, 3, echo=lambda m: None)
    s = out["summary"]
    assert all(s[c]["mismatch"] == 0 for c in session_replay.COLUMNS)  # what a column says ran is what the upstream ran
    assert s["passthrough"]["utility"] == 1.0 and s["passthrough"]["attack_success"] == 1.0
    assert s["passthrough"]["confirmations_per_task"] == 0
    # the guard asks, it never refuses the user's own calls: the same tasks complete as under today's policy
    assert s["session_guard"]["utility"] == s["per_call"]["utility"]
    assert s["session_guard"]["attack_success"] <= s["per_call"]["attack_success"]
    assert s["once_per_task"]["confirmations_per_task"] <= s["session_guard"]["confirmations_per_task"]
    assert s["once_per_task_cover4"]["confirmations_per_task"] <= s["once_per_task"]["confirmations_per_task"]
    held = out["columns"]["session_guard"]["asked_texts"]
    assert held and all("The session started with" in t or "the session started with" in t for t in held)
    for row in out["columns"]["session_guard"]["rows"]:
        assert row["clean"]["calls"] == row["clean"]["ran"] + len(row["clean"]["not_run"])
    for column in ("per_call", "session_guard", "once_per_task"):  # the audit's questions are the ones the agent answered
        q = s[column]["questions"]
        assert q["total"] == sum(r["clean"]["asked"] for r in out["columns"][column]["rows"]) == sum(q["by_level"].values())
        assert q["total"] == q["first_of_session"] + q["another_tool"] + q["same_tool_again"]


def test_an_audited_column_pins_every_tool_to_the_annotators_level():
    import bfcl_levels

    labels = {r["name"]: r["risk_level"] for r in bfcl_levels.load_labels()}
    for column, base in session_replay.AUDITED.items():
        policy = session_replay.column_policy(column)
        assert policy["levels"] == labels
        assert {k: v for k, v in policy.items() if k != "levels"} == (session_replay.POLICIES[base] or {})
    assert session_replay.column_policy("session_guard") is None  # the defaults: no policy file


def test_a_reviewed_column_pins_the_first_fifth_of_the_review_order(bfcl):
    """What an operator who read the most doubtful fifth of BFCL's tools would pin: those tools,
    each at the annotators' level, and nothing else; the rest of the policy is its column's."""
    import level_review

    recs = level_review.bfcl_records(bfcl)
    order = level_review.review_order(recs)
    for column, base in session_replay.REVIEWED.items():
        policy = session_replay.column_policy(column, bfcl)
        assert len(policy["levels"]) == round(session_replay.REVIEW_FRACTION * len(recs)) == 26
        assert policy["levels"] == {recs[i]["tool"]: recs[i]["label"] for i in order[:26]}
        assert {k: v for k, v in policy.items() if k != "levels"} == (session_replay.POLICIES[base] or {})
    with pytest.raises(ValueError, match="data directory"):
        session_replay.column_policy("per_call_reviewed")


@pytest.mark.slow
def test_the_whole_replay_reproduces_the_committed_figures(bfcl):
    out = session_replay.replay(bfcl, None, session_replay.ALL_COLUMNS, echo=lambda m: None)
    committed = json.loads((ROOT / "benchmarks/results/session_replay.json").read_text())
    assert out["summary"] == committed["summary"]


def test_the_docs_held_attack_is_the_committed_runs():
    committed = json.loads((ROOT / "benchmarks/results/session_replay.json").read_text())
    doc = (ROOT / "docs/session-guard.md").read_text(encoding="utf-8")
    assert committed["columns"]["session_guard"]["asked_texts"][0] in doc
