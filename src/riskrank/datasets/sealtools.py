"""Seal-Tools (Wu et al., 2024) as used by the paper.

Corpus: the 4,076 tools of ``tool.jsonl`` (api_name, api_description) with the released risk
labels. Queries: ``query``; gold = the distinct ``calling[].api``. Training on
``train.jsonl`` when present, else ``dev.jsonl``; evaluation on ``test_in_domain.jsonl`` and,
whenever its file is present, ``test_out_domain.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

from riskrank.datasets.base import Benchmark, QuerySet, build_gold, data_file
from riskrank.errors import DataError
from riskrank.fileio import read_jsonl
from riskrank.registry import ToolRegistry

ROOT = "fairyshine/Seal-Tools/Seal-Tools_Dataset"
TOOLS = f"{ROOT}/tool.jsonl"
LABELS = "qli447/risk-aware-tool-retrieval-release/data/sealtools/sealtools_risk_labels_resolved.json"
SPLIT_FILES = {
    "train": f"{ROOT}/train.jsonl",
    "dev": f"{ROOT}/dev.jsonl",
    "test_in": f"{ROOT}/test_in_domain.jsonl",
    "test_out": f"{ROOT}/test_out_domain.jsonl",
}


def _read_queries(path: Path, registry: ToolRegistry, split: str) -> QuerySet:
    ids, texts, names = [], [], []
    for lineno, rec in read_jsonl(path, DataError):
        try:
            apis = [c["api"] for c in rec["calling"]]
            text = rec["query"].strip()
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"{path}: line {lineno}: not a Seal-Tools record ({exc})") from None
        ids.append(str(rec.get("id", f"{split}-{lineno - 1}")))
        texts.append(text)
        names.append(apis)
    gold, kept = build_gold(names, registry)
    return QuerySet(
        name=split,
        ids=[ids[i] for i in kept],
        texts=[texts[i] for i in kept],
        gold=gold,
        meta=[{} for _ in kept],
        n_skipped=len(texts) - len(kept),
    )


def load_registry(data_dir: Path) -> ToolRegistry:
    """tool.jsonl with the released labels joined by name (every tool must be labelled)."""
    tools = ToolRegistry.load(data_file(data_dir, TOOLS), fmt="sealtools")
    labels_path = data_file(data_dir, LABELS)
    try:
        labels = json.loads(labels_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{labels_path}: invalid JSON ({exc.msg})") from None
    return tools.with_risk_levels({k: v.get("risk_level") for k, v in labels.items()}, strict=True)


def load_sealtools(data_dir: Path) -> Benchmark:
    registry = load_registry(data_dir)
    splits = {"test_in": _read_queries(data_file(data_dir, SPLIT_FILES["test_in"]), registry, "test_in")}
    notes = []
    out_path = data_file(data_dir, SPLIT_FILES["test_out"], required=False)
    if out_path is not None:
        splits["test_out"] = _read_queries(out_path, registry, "test_out")
    else:
        notes.append("Seal-Tools test_out_domain.jsonl is absent: no out-of-domain split.")
    train_path = data_file(data_dir, SPLIT_FILES["train"], required=False)
    if train_path is not None:
        train = _read_queries(train_path, registry, "train")
        protocol = "paper: train on train.jsonl"
    else:
        train = _read_queries(data_file(data_dir, SPLIT_FILES["dev"]), registry, "dev")
        protocol = "train on dev.jsonl (train.jsonl absent)"
        notes.append("Seal-Tools train.jsonl is absent: the heads train on dev.jsonl (700 queries).")
    for qs in [*splits.values(), train]:
        if qs.n_skipped:
            notes.append(f"{qs.name}: {qs.n_skipped} queries skipped (no gold tool in the corpus)")
    return Benchmark("sealtools", registry, splits, train, protocol + "; evaluate on " + ", ".join(splits), notes)
