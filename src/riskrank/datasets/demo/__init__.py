"""The bundled demo: a hand-written registry of agent tools with audited risk levels and a
one-line reason each, plus example tasks with gold tools. It needs no download, so
``riskrank demo`` works on a fresh install."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from riskrank.datasets.base import Benchmark, QuerySet, build_gold
from riskrank.registry import ToolRegistry


def demo_registry_path() -> Path:
    return Path(str(resources.files(__package__).joinpath("registry.json")))


def demo_tasks_path() -> Path:
    return Path(str(resources.files(__package__).joinpath("tasks.json")))


def load_demo_registry() -> ToolRegistry:
    return ToolRegistry.load(demo_registry_path())


def load_demo() -> Benchmark:
    registry = load_demo_registry()
    tasks = json.loads(demo_tasks_path().read_text(encoding="utf-8"))
    gold, kept = build_gold([t["gold"] for t in tasks], registry)
    queries = QuerySet(
        name="test",
        ids=[tasks[i]["id"] for i in kept],
        texts=[tasks[i]["task"] for i in kept],
        gold=gold,
        meta=[{} for _ in kept],
        n_skipped=len(tasks) - len(kept),
    )
    return Benchmark(
        "demo",
        registry,
        {"test": queries},
        train=queries,
        protocol="demo: the heads train on the demo tasks themselves (in-sample; a demonstration, not an evaluation)",
    )
