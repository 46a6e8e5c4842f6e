"""Benchmark loaders on the real files: corpus sizes, label distributions (the released label files'), query
modes, the splits and the optional files picked up when dropped into a data directory."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from riskrank.datasets import DATASETS, QuerySet, crossfit_folds, load_benchmark, resolve_data_dir
from riskrank.datasets.sealtools import SPLIT_FILES
from riskrank.datasets.ultratool import DEV, TEST
from riskrank.errors import DataError, RiskrankError


def distribution(reg) -> list[int]:
    return [int((reg.risk_levels == k).sum()) for k in range(1, 6)]


# -- UltraTool ----------------------------------------------------------------------------------
def test_ultratool(ultratool):
    b = ultratool
    assert b.name == "ultratool" and len(b.registry) == 2032
    assert distribution(b.registry) == [958, 799, 155, 115, 5] and b.registry.has_labels
    test = b.splits["test"]
    assert list(b.splits) == ["test"] and len(test) == 1000 and test.n_skipped == 0
    if b.train is None:  # the mirror has no dev.json: the cross-fitting protocol
        assert "cross-fitting" in b.protocol
        assert any("dev.json is absent" in n for n in b.notes)
    else:
        assert b.protocol.startswith("paper") and b.train.name == "train"
    assert all(len(g) >= 1 and g.dtype == np.int64 and (np.diff(g) > 0).all() for g in test.gold)
    assert len(set(test.ids)) == 1000


def test_ultratool_question_mode_is_the_question(ultratool, data_dir):
    lines = (data_dir / TEST).read_text(encoding="utf-8").splitlines()
    recs = [json.loads(x) for x in lines if x.strip()]
    test = ultratool.splits["test"]
    assert test.texts == [r["question"].strip() for r in recs]
    reg = ultratool.registry
    for rec, g in zip(recs[:50], test.gold, strict=False):
        assert {reg[int(i)].name for i in g} == {t["name"] for t in rec["tools"]}


def test_ultratool_plan_mode_never_shows_the_call(data_dir):
    b = load_benchmark("ultratool", data_dir, query_mode="plan")
    test = b.splits["test"]
    assert len(test) == 1000
    recs = [json.loads(x) for x in (data_dir / TEST).read_text(encoding="utf-8").splitlines() if x.strip()]
    n_plan = 0
    for rec, text, g in zip(recs, test.texts, test.gold, strict=True):
        assert text.strip()
        calls = [s["tool"] for s in rec.get("plan", []) if str(s.get("tool", "")).strip().lower()
                 not in ("", "null", "none", "no tool required")]
        for call in calls:
            assert call not in text
        for i in g:
            assert f"{b.registry[int(i)].name}(" not in text
        if text != rec["question"].strip():
            n_plan += 1
            assert not text[:1].isdigit()  # step numbers stripped
    assert n_plan > 900  # almost every query has tool-calling steps


def test_ultratool_unknown_query_mode(data_dir):
    with pytest.raises(DataError, match="unknown UltraTool query mode 'steps'"):
        load_benchmark("ultratool", data_dir, query_mode="steps")


def copy_mirror(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("MANIFEST.json"))
    for p in dst.rglob("*"):  # the shared mirror is read-only
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_ultratool_dev_json_is_picked_up(data_dir, tmp_path):
    d = copy_mirror(data_dir, tmp_path / "data")
    lines = (d / TEST).read_text(encoding="utf-8").splitlines()[:30]
    (d / DEV).write_text("\n".join(lines) + "\n", encoding="utf-8")
    b = load_benchmark("ultratool", d)
    assert b.train is not None and len(b.train) == 30 and b.train.name == "train"
    assert b.protocol.startswith("paper")


def test_ultratool_corrupt_record(data_dir, tmp_path):
    d = copy_mirror(data_dir, tmp_path / "data")
    lines = (d / TEST).read_text(encoding="utf-8").splitlines()
    lines[4] = '{"question": "no tools here"}'
    (d / TEST).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"test.json: line 5: not an UltraTool record"):
        load_benchmark("ultratool", d)


# -- Seal-Tools -----------------------------------------------------------------------------------
def test_sealtools(data_dir):
    b = load_benchmark("sealtools", data_dir)
    assert b.name == "sealtools" and len(b.registry) == 4076
    assert distribution(b.registry) == [2807, 1197, 51, 20, 1] and b.registry.has_labels
    assert next(iter(b.splits)) == "test_in" and len(b.splits["test_in"]) == 700
    if not (data_dir / SPLIT_FILES["train"]).exists():  # the mirror: dev.jsonl trains
        assert b.train is not None and b.train.name == "dev" and len(b.train) == 700
        assert "dev.jsonl" in b.protocol
    if not (data_dir / SPLIT_FILES["test_out"]).exists():
        assert list(b.splits) == ["test_in"]
        assert any("test_out_domain.jsonl is absent" in n for n in b.notes)
    else:
        assert list(b.splits) == ["test_in", "test_out"]
    t = b.splits["test_in"]
    assert t.ids[0] == "test_in_domain-easy-0" and t.texts[0] == "Retrieve information about postmodern theory."
    assert [b.registry[int(i)].name for i in t.gold[0]] == ["getPostmodernTheory"]


def test_sealtools_gold_is_distinct_apis(data_dir):
    b = load_benchmark("sealtools", data_dir)
    path = data_dir / SPLIT_FILES["test_in"]
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    t = b.splits["test_in"]
    for rec, g in zip(recs, t.gold, strict=True):
        assert sorted(b.registry[int(i)].name for i in g) == sorted({c["api"] for c in rec["calling"]})


def test_sealtools_optional_files_are_picked_up(data_dir, tmp_path):
    d = copy_mirror(data_dir, tmp_path / "mirror")
    for rel in (SPLIT_FILES["train"], SPLIT_FILES["test_out"]):
        (d / rel).unlink(missing_ok=True)
    tools = [json.loads(x)["api_name"] for x in (d / "fairyshine/Seal-Tools/Seal-Tools_Dataset/tool.jsonl").read_text().splitlines()[:3]]
    out = [
        {"id": "ood-0", "query": "first out-of-domain task", "calling": [{"api": tools[0], "parameters": {}}]},
        {"id": "ood-1", "query": "second", "calling": [{"api": tools[1]}, {"api": tools[2]}, {"api": tools[1]}]},
        {"id": "ood-2", "query": "no known tool", "calling": [{"api": "notARealApi"}]},
    ]
    (d / SPLIT_FILES["test_out"]).write_text("\n".join(json.dumps(r) for r in out) + "\n", encoding="utf-8")
    b = load_benchmark("sealtools", d)
    assert list(b.splits) == ["test_in", "test_out"]
    o = b.splits["test_out"]
    assert len(o) == 2 and o.n_skipped == 1 and o.ids == ["ood-0", "ood-1"]
    assert [sorted(b.registry[int(i)].name for i in g) for g in o.gold] == [[tools[0]], sorted(tools[1:3])]
    assert "test_out" in b.protocol
    assert any("test_out: 1 queries skipped" in n for n in b.notes)
    # train.jsonl dropped in: the paper protocol
    (d / SPLIT_FILES["train"]).write_text("\n".join(json.dumps(r) for r in out[:2]) + "\n", encoding="utf-8")
    b = load_benchmark("sealtools", d)
    assert b.train.name == "train" and len(b.train) == 2 and b.protocol.startswith("paper")


def test_sealtools_unlabelled_tool_is_an_error(data_dir, tmp_path):
    d = copy_mirror(data_dir, tmp_path / "mirror")
    tool_file = d / "fairyshine/Seal-Tools/Seal-Tools_Dataset/tool.jsonl"
    with tool_file.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"api_name": "brandNewTool", "api_description": "Not in the label file."}) + "\n")
    with pytest.raises(RiskrankError, match="no risk level given for tool 'brandNewTool'"):
        load_benchmark("sealtools", d)


# -- demo ------------------------------------------------------------------------------------------
def test_demo_benchmark(demo):
    assert len(demo.registry) >= 60 and demo.registry.has_labels
    assert len(demo.splits["test"]) >= 30 and demo.splits["test"].n_skipped == 0
    assert demo.train is demo.splits["test"]
    assert all(t.reason for t in demo.registry)


# -- folds, errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(("n", "k"), [(1000, 5), (17, 5), (250, 2), (5, 5)])
def test_crossfit_folds(n, k):
    a = crossfit_folds(n, k, seed=42)
    assert np.array_equal(a, crossfit_folds(n, k, seed=42))
    sizes = Counter(a.tolist())
    assert sorted(sizes) == list(range(k)) and max(sizes.values()) - min(sizes.values()) <= 1
    if n > k:
        assert not np.array_equal(a, crossfit_folds(n, k, seed=123))


def test_crossfit_folds_errors():
    with pytest.raises(ValueError, match="at least 2 folds"):
        crossfit_folds(10, 1, 0)
    with pytest.raises(DataError, match="cannot cross-fit 3 queries into 5 folds"):
        crossfit_folds(3, 5, 0)


@pytest.mark.parametrize("name", ["ultratool", "sealtools"])
def test_missing_data_dir(tmp_path, name):
    with pytest.raises(DataError, match=r"does not exist; run `riskrank data fetch"):
        load_benchmark(name, tmp_path / "nowhere")


def test_missing_file_in_data_dir(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match=r"missing benchmark file"):
        load_benchmark("ultratool", tmp_path / "data")


def test_unknown_dataset():
    with pytest.raises(DataError, match="unknown dataset 'toolbench'"):
        load_benchmark("toolbench")
    assert DATASETS == ("ultratool", "sealtools", "demo")


def test_resolve_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("RISKRANK_DATA", str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("RISKRANK_DATA")
    monkeypatch.setenv("RISKRANK_HOME", str(tmp_path / "home"))
    assert resolve_data_dir() == tmp_path / "home" / "data"


def test_query_subset():
    qs = QuerySet("s", ["a", "b", "c"], ["ta", "tb", "tc"], [np.array([0]), np.array([1]), np.array([2])], [{}, {}, {}])
    sub = qs.subset([2, 0], name="t")
    assert sub.name == "t" and sub.ids == ["c", "a"] and sub.texts == ["tc", "ta"] and len(sub) == 2
    assert [g.tolist() for g in sub.gold] == [[2], [0]]
