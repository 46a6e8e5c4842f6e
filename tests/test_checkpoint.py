"""Checkpoint integrity: the directory commits as a whole, the manifest catches every torn,
mixed or edited file, the sidecar is checked against its schema (types, ranges, known keys,
namespaced extensions), and every problem is one CheckpointError naming the file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import riskrank.checkpoint as ckmod
from riskrank.checkpoint import (
    GRAPH_FILE,
    SIDECAR,
    SIDECAR_SCHEMA,
    WEIGHTS,
    Key,
    load_checkpoint,
    save_checkpoint,
    validate_sidecar,
)
from riskrank.errors import CheckpointError
from riskrank.graph import GraphConfig, ToolGraph
from riskrank.training import TrainConfig, train_heads

ENC = {"identity": "toy-encoder@abc", "name": "toy", "dim": 16}
FP = "f" * 64


@pytest.fixture(scope="module")
def trained(make_synthetic_module):
    tools, queries, gold, risk = make_synthetic_module
    import torch

    torch.set_num_threads(1)
    res = train_heads(tools, queries, gold, risk, TrainConfig(epochs=2, seed=3), progress=False)
    perms = np.zeros((len(tools), 5), dtype=bool)
    perms[::3, 1] = True
    graph = ToolGraph.build(tools, gold, risk, perms, GraphConfig())
    return res, graph


@pytest.fixture(scope="module")
def make_synthetic_module():
    from conftest import synthetic

    return synthetic(seed=5)


def save(res, graph, path, **kw):
    return save_checkpoint(res, path, encoder=ENC, registry_fingerprint=FP, inference={"alpha": 0.2, "normalisation": "row"},
                           graph=graph, **kw)


def edit_sidecar(path, fn):
    meta = json.loads((path / SIDECAR).read_text())
    fn(meta)
    (path / SIDECAR).write_text(json.dumps(meta))


def test_round_trip_with_a_manifest(tmp_path, trained):
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    assert sorted(p.name for p in path.iterdir()) == sorted([WEIGHTS, SIDECAR, GRAPH_FILE])
    meta = json.loads((path / SIDECAR).read_text())
    assert meta["format"] == "riskrank-heads/2"
    for name in (WEIGHTS, GRAPH_FILE):
        assert meta["files"][name] == hashlib.sha256((path / name).read_bytes()).hexdigest()
    ck = load_checkpoint(path)
    g = ck.graph_for(FP, graph.n_tools)
    assert g is not None and (g.explicit != graph.explicit).nnz == 0
    assert ck.graph_for("another registry") is None
    assert not list(tmp_path.glob(".ck.*")), "no staging left behind"
    # strict JSON on disk: NaN in the training records became null
    json.loads((path / SIDECAR).read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the sidecar"))


def test_a_mixed_directory_is_refused(tmp_path, trained):
    """Heads and sidecar of one run beside the graph of another: the manifest says no."""
    res, graph = trained
    a = save(res, graph, tmp_path / "a")
    tools = _small()[0]
    other = ToolGraph.build(tools[::-1].copy(), [], np.ones(graph.n_tools, np.int8), np.zeros((graph.n_tools, 5), bool), GraphConfig())
    b = save(res, other, tmp_path / "b")
    shutil.copy(b / GRAPH_FILE, a / GRAPH_FILE)
    with pytest.raises(CheckpointError, match=r"graph\.npz: does not match the sidecar's sha256"):
        load_checkpoint(a)
    (a / GRAPH_FILE).unlink()
    with pytest.raises(CheckpointError, match="missing, but the sidecar's manifest lists it"):
        load_checkpoint(a)
    c = save(res, None, tmp_path / "c")  # no graph: a graph dropped in later is not part of it
    shutil.copy(b / GRAPH_FILE, c / GRAPH_FILE)
    with pytest.raises(CheckpointError, match="not part of this checkpoint"):
        load_checkpoint(c)


def test_replacing_a_checkpoint_is_one_step(tmp_path, trained):
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    first = json.loads((path / SIDECAR).read_text())["files"]
    res2 = train_heads(*_small(), TrainConfig(epochs=1, seed=9), progress=False)
    save(res2, None, path)
    meta = json.loads((path / SIDECAR).read_text())
    assert meta["files"][WEIGHTS] != first[WEIGHTS] and GRAPH_FILE not in meta["files"]
    assert sorted(p.name for p in path.iterdir()) == sorted([WEIGHTS, SIDECAR])
    load_checkpoint(path)
    assert not list(tmp_path.glob(".ck.*"))


def test_the_two_rename_fallback_and_its_recovery_message(tmp_path, trained, monkeypatch):
    """Where no atomic exchange exists, the old checkpoint moves aside first; a crash between
    the renames leaves it whole, and loading says where it is."""
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    monkeypatch.setattr(ckmod, "_exchange", lambda a, b: False)
    real_replace = os.replace
    calls = []

    def crash_on_second_dir_rename(src, dst):
        if os.path.isdir(src):
            calls.append((src, dst))
            if len(calls) == 2:
                raise KeyboardInterrupt("killed between the renames")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_second_dir_rename)
    with pytest.raises(KeyboardInterrupt):
        save(res, None, path)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not path.exists()
    with pytest.raises(CheckpointError, match=r"interrupted save left the previous checkpoint at .*\.ck\.old-"):
        load_checkpoint(path)
    (old,) = tmp_path.glob(".ck.old-*")
    load_checkpoint(old)  # whole
    # the next save succeeds, and cleans the leftovers once a checkpoint is in place
    save(res, graph, path)
    save(res, graph, path)
    assert not list(tmp_path.glob(".ck.*"))


def test_save_into_a_directory_of_other_files_is_refused(tmp_path, trained):
    res, graph = trained
    d = tmp_path / "notes"
    d.mkdir()
    (d / "todo.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="holding other files"):
        save(res, graph, d)
    assert (d / "todo.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    load_checkpoint(save(res, graph, empty))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["inference"].__setitem__("lam", -5), r"inference\.lam must be in \[0, 100\], got -5"),
    (lambda m: m["inference"].__setitem__("lam", 1e6), r"inference\.lam must be in \[0, 100\]"),
    (lambda m: m["inference"].__setitem__("lam", "abc"), r"inference\.lam must be a number, got 'abc'"),
    (lambda m: m["inference"].__setitem__("lam", "0.5"), r"inference\.lam must be a number"),
    (lambda m: m["inference"].__setitem__("lam", True), r"inference\.lam must be a number, got True"),
    (lambda m: m["inference"].__setitem__("lam", None), r"inference\.lam must not be null"),
    (lambda m: m["inference"].__setitem__("alpha", -1), r"inference\.alpha must be in \[0, 1\]"),
    (lambda m: m["inference"].__setitem__("alpha", 2), r"inference\.alpha must be in \[0, 1\]"),
    (lambda m: m["inference"].__setitem__("normalisation", "xyz"), r"inference\.normalisation must be one of row, sym, sym_self"),
    (lambda m: m["inference"].__setitem__("lamda", 0.5), r"unknown key 'inference\.lamda'"),
    (lambda m: m.pop("inference"), "missing inference"),
    (lambda m: m["inference"].pop("lam"), r"missing inference\.lam"),
    (lambda m: m.pop("training_data"), "missing training_data"),
    (lambda m: m.pop("encoder"), "missing encoder"),
    (lambda m: m["head"].__setitem__("hidden", 0), r"head\.hidden must be >= 1"),
    (lambda m: m["head"].__setitem__("design", "magic"), r"head\.design must be one of residual, paper"),
    (lambda m: m.pop("weights_sha256"), "missing weights_sha256"),
    (lambda m: m.pop("files"), "missing files"),
    (lambda m: m.__setitem__("format", 2), "unknown format 2"),
    (lambda m: m["head"].__setitem__("penalty", "cubic"), r"head\.penalty must be one of p_risky, paper"),
    (lambda m: m["head"].__setitem__("lexical", ["bm25", "magic"]), r"head\.lexical may only hold cos, bm25"),
    (lambda m: m["head"].__setitem__("lexical", ["bm25", "cos", "ex", "fr", "fri", "frp"]), r"head\.lexical must be \[\] or cos, bm25"),
    (lambda m: m["inference"].__setitem__("fusion", {"rule": "max", "norm": "z", "weight": 0.3}), r"inference\.fusion\.rule must be one of"),
    (lambda m: m["inference"].__setitem__("fusion", {"rule": "convex", "norm": "z", "weight": 3}), r"inference\.fusion\.weight must be in \[0, 1\]"),
    (lambda m: m["inference"].__setitem__("fusion", {"rule": "convex", "norm": "z"}), r"missing inference\.fusion\.weight"),
    (lambda m: m["inference"].__setitem__("pipelines", {"core": {"lam": -1, "alpha": 0, "normalisation": "row"}}),
     r"inference\.pipelines core\.lam must be in \[0, 100\]"),
    (lambda m: m["inference"].__setitem__("pipelines", {"core+magic": {"lam": 1, "alpha": 0, "normalisation": "row"}}),
     r"inference\.pipelines has an unknown entry 'core\+magic'"),
    (lambda m: m["inference"].__setitem__("pipelines", {"top100/core": {"lam": 1, "alpha": 0, "normalisation": "row", "beta": 1}}),
     r"top100/core has an unknown key 'beta'"),
    (lambda m: m["risk_head"].__setitem__("learned", "yes"), r"risk_head\.learned must be true or false"),
    (lambda m: m["risk_head"].__setitem__("heldout_auc", 1.5), r"risk_head\.heldout_auc must be in \[0, 1\]"),
])
def test_sidecar_values_are_checked(tmp_path, trained, edit, message):
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    edit_sidecar(path, edit)
    with pytest.raises(CheckpointError, match=message) as exc:
        load_checkpoint(path)
    assert str(path / SIDECAR) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text", ["[1, 2]", "null", "5", '{"format": "riskrank-heads/2", "format": "x"}', "{\"lam\": NaN", ""])
def test_sidecar_shapes(tmp_path, trained, text):
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    (path / SIDECAR).write_text(text)
    with pytest.raises(CheckpointError, match=str(path / SIDECAR)):
        load_checkpoint(path)


def test_namespaced_extension_keys_pass_and_known_ones_are_checked(tmp_path, trained, monkeypatch):
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    edit_sidecar(path, lambda m: m["inference"].update({"lexical:weight": 0.3, "quality:flags": ["collapsed"]}))
    edit_sidecar(path, lambda m: m.update({"future:model_card": {"anything": 1}}))
    assert load_checkpoint(path).inference["lexical:weight"] == 0.3  # kept, not validated: this version does not know it
    # a version that knows the key checks it: one line in the schema
    monkeypatch.setitem(SIDECAR_SCHEMA, "inference.lexical:weight", Key("number", required=False, low=0.0, high=1.0))
    edit_sidecar(path, lambda m: m["inference"].__setitem__("lexical:weight", 7))
    with pytest.raises(CheckpointError, match=r"inference\.lexical:weight must be in \[0, 1\]"):
        load_checkpoint(path)


def test_validate_sidecar_rejects_bad_blocks():
    with pytest.raises(CheckpointError, match="must be a JSON object, got list"):
        validate_sidecar([], "x.json")
    base = {"format": "riskrank-heads/1", "encoder": {"identity": "e"}, "head": {"design": "paper", "dim": 4, "hidden": 2, "rank": 2},
            "inference": {"lam": 0.1}, "training_data": {"registry_fingerprint": "r"}, "weights_sha256": "0" * 64}
    validate_sidecar(base, "x.json")  # format /1: no manifest needed
    with pytest.raises(CheckpointError, match=r"x\.json: inference must be a JSON object"):
        validate_sidecar({**base, "inference": [0.1]}, "x.json")


@pytest.mark.parametrize("damage", ["empty", "half", "tail", "flip", "random", "text", "nan"])
def test_damaged_graph_is_one_line(tmp_path, trained, damage):
    """With the manifest each damage is a sha256 mismatch; without it (a format /1 checkpoint,
    or a graph loaded on its own) the loader itself refuses, naming the file."""
    res, graph = trained
    path = save(res, graph, tmp_path / "ck")
    g = path / GRAPH_FILE
    data = g.read_bytes()
    rng = np.random.default_rng(0)
    if damage == "nan":
        bad = ToolGraph(graph.explicit.copy(), graph.permissions, graph.perm_coef, graph.config, max_raw=graph.max_raw,
                        type_counts=graph.type_counts)
        bad.explicit.data[:] = np.nan
        bad.to_npz(tmp_path / "nan.npz")
        new = (tmp_path / "nan.npz").read_bytes()
    else:
        new = {"empty": b"", "half": data[: len(data) // 2], "tail": data[-22:],
               "flip": data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:],
               "random": rng.bytes(4096), "text": b"hello"}[damage]
    g.write_bytes(new)
    with pytest.raises(CheckpointError, match=r"graph\.npz: does not match the sidecar's sha256"):
        load_checkpoint(path)
    from riskrank.errors import RiskrankError

    with pytest.raises(RiskrankError, match=r"graph\.npz: (not a riskrank graph file|.*NaN)") as exc:
        ToolGraph.from_npz(g)
    assert "allow_pickle" not in str(exc.value) and "\n" not in str(exc.value)


def test_a_graph_for_another_size_is_refused(tmp_path, trained):
    res, graph = trained
    ck = load_checkpoint(save(res, graph, tmp_path / "ck"))
    with pytest.raises(CheckpointError, match=f"the graph is for {graph.n_tools} tools, the registry has {graph.n_tools + 1}"):
        ck.graph_for(FP, graph.n_tools + 1)


def _small():
    from conftest import synthetic

    tools, queries, gold, risk = synthetic(seed=5)
    return tools, queries, gold, risk
