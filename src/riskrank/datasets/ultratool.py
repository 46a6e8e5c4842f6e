"""UltraTool (Huang et al., 2024) as used by the paper.

Corpus: the 2,032 tools of the released label file (name, description, risk_level).
Queries: the 1,000 lines of ``test.json``; gold = the names in ``tools[]``. Training:
``dev.json`` (4,824 queries, same format) when present; otherwise 5-fold cross-fitting
over the 1,000 test queries, each scored by models that never trained on it.
"""

from __future__ import annotations

import re
from pathlib import Path

from riskrank.datasets.base import Benchmark, QuerySet, build_gold, data_file
from riskrank.errors import DataError
from riskrank.fileio import read_jsonl
from riskrank.registry import ToolRegistry

REPO = "JoeYing1019/UltraTool"
LABELS = "qli447/risk-aware-tool-retrieval-release/data/ultratool/ultratool_risk_labels_resolved.json"
TEST = f"{REPO}/data/English-dataset/test.json"
DEV = f"{REPO}/data/English-dataset/dev.json"

QUERY_MODES = ("question", "plan")
_STEP_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)*\.?\s*")
_NO_TOOL = {"", "null", "none", "no tool required"}


def _plan_text(plan: list[dict]) -> str:
    """The plan steps that call a tool, joined: the reference implementation's evaluation
    input. Only the step descriptions are used, never the call strings (they name the tool)."""
    steps = [
        _STEP_NUMBER.sub("", s.get("step", "")).strip()
        for s in plan
        if isinstance(s, dict) and str(s.get("tool", "")).strip().lower() not in _NO_TOOL
    ]
    return " ".join(s for s in steps if s)


def _read_queries(path: Path, registry: ToolRegistry, split: str, query_mode: str) -> QuerySet:
    ids, texts, names, meta = [], [], [], []
    for lineno, rec in read_jsonl(path, DataError):
        try:
            tools = [t["name"] for t in rec["tools"]]
            question = rec["question"].strip()
            plan = rec.get("plan", [])
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"{path}: line {lineno}: not an UltraTool record ({exc})") from None
        text = question if query_mode == "question" else (_plan_text(plan) or question)
        ids.append(f"{split}-{lineno - 1}")
        texts.append(text)
        names.append(tools)
        meta.append({"domain": rec.get("domain"), "question": question})
    gold, kept = build_gold(names, registry)
    dropped = len(texts) - len(kept)
    return QuerySet(
        name=split,
        ids=[ids[i] for i in kept],
        texts=[texts[i] for i in kept],
        gold=gold,
        meta=[meta[i] for i in kept],
        n_skipped=dropped,
    )


def load_ultratool(data_dir: Path, query_mode: str = "question") -> Benchmark:
    if query_mode not in QUERY_MODES:
        raise DataError(f"unknown UltraTool query mode {query_mode!r}; choose from {', '.join(QUERY_MODES)}")
    registry = ToolRegistry.load(data_file(data_dir, LABELS), fmt="labels")
    test = _read_queries(data_file(data_dir, TEST), registry, "test", query_mode)
    dev_path = data_file(data_dir, DEV, required=False)
    notes = []
    if dev_path is not None:
        train = _read_queries(dev_path, registry, "train", query_mode)
        protocol = "paper: train on dev.json, evaluate on test.json"
    else:
        train = None
        protocol = "5-fold cross-fitting over test.json (dev.json absent)"
        notes.append("UltraTool dev.json is absent: each test query is scored by models that never trained on it (5-fold cross-fitting).")
    for qs in (test, train):
        if qs is not None and qs.n_skipped:
            notes.append(f"{qs.name}: {qs.n_skipped} queries skipped (no gold tool in the corpus)")
    return Benchmark("ultratool", registry, {"test": test}, train, protocol, notes)
