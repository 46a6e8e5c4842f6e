"""Sanity checks on the bundled demo data (registry.json, tasks.json).

Deliberately uses only json/pathlib so that it does not depend on the riskrank modules.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DEMO_DIR = Path(__file__).parents[1] / "src/riskrank/datasets/demo"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


@pytest.fixture(scope="module")
def tools() -> list[dict]:
    data = json.loads((DEMO_DIR / "registry.json").read_text(encoding="utf-8"))
    assert isinstance(data, list)
    assert all(isinstance(t, dict) for t in data)
    return data


@pytest.fixture(scope="module")
def tasks() -> list[dict]:
    data = json.loads((DEMO_DIR / "tasks.json").read_text(encoding="utf-8"))
    assert isinstance(data, list)
    assert all(isinstance(t, dict) for t in data)
    return data


def test_registry_size(tools: list[dict]) -> None:
    assert len(tools) >= 60


def test_names_unique_snake_case(tools: list[dict]) -> None:
    names = [t.get("name") for t in tools]
    bad = [n for n in names if not isinstance(n, str) or not SNAKE.match(n)]
    assert not bad, f"names not snake_case: {bad}"
    dups = sorted({n for n in names if names.count(n) > 1})
    assert not dups, f"duplicate names: {dups}"


def test_tool_fields(tools: list[dict]) -> None:
    for t in tools:
        name = t["name"]
        assert isinstance(t.get("description"), str) and t["description"].strip(), name
        level = t.get("risk_level")
        assert isinstance(level, int) and not isinstance(level, bool), name
        assert 1 <= level <= 5, name
        assert isinstance(t.get("reason"), str) and t["reason"].strip(), name


def test_parameters_are_object_schemas(tools: list[dict]) -> None:
    for t in tools:
        params = t.get("parameters")
        assert isinstance(params, dict), t["name"]
        assert params.get("type") == "object", t["name"]
        props = params.get("properties", {})
        assert isinstance(props, dict), t["name"]
        required = params.get("required", [])
        assert isinstance(required, list), t["name"]
        assert set(required) <= set(props), f"{t['name']}: required names not in properties"


def test_all_levels_present(tools: list[dict]) -> None:
    levels = {t["risk_level"] for t in tools}
    assert levels == {1, 2, 3, 4, 5}
    assert sum(t["risk_level"] == 5 for t in tools) >= 3


def test_tasks(tasks: list[dict], tools: list[dict]) -> None:
    assert len(tasks) >= 30
    names = {t["name"] for t in tools}
    ids = [t.get("id") for t in tasks]
    assert len(ids) == len(set(ids)), "duplicate task ids"
    for task in tasks:
        assert isinstance(task.get("id"), str) and task["id"], task
        assert isinstance(task.get("task"), str) and task["task"].strip(), task["id"]
        gold = task.get("gold")
        assert isinstance(gold, list) and len(gold) >= 1, task["id"]
        missing = [g for g in gold if g not in names]
        assert not missing, f"{task['id']}: unknown gold tools {missing}"


def test_tasks_mix_safe_and_risky(tasks: list[dict], tools: list[dict]) -> None:
    level = {t["name"]: t["risk_level"] for t in tools}
    worst = [max(level[g] for g in task["gold"]) for task in tasks]
    assert any(w < 3 for w in worst), "no task is answerable with safe tools only"
    assert any(w >= 3 for w in worst), "no task needs a risky tool"
