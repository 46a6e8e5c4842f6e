"""The level model: the annotated MCP tools as weak labels, the model's files, and the level it
serves (instead of the higher of the risk head and the keywords)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from riskrank.base import default_level_model_dir
from riskrank.datasets.mcp_annotated import (
    DESTRUCTIVE,
    NONE,
    READ_ONLY,
    WRITES,
    load_annotated,
    weak_label,
)
from riskrank.errors import CheckpointError, DataError
from riskrank.levels import SIDECAR, WEIGHTS, LevelModel, load_level_model
from riskrank.registry import ToolRegistry
from riskrank.risk import rubric_floor

FILESYSTEM = "examples/registries/mcp_filesystem_tools_list.json"


def test_the_annotated_tools_load_with_weak_labels() -> None:
    data = load_annotated()
    assert len(data) == 1298 and len(set(data.servers)) == 23
    assert int(data.read_only.sum()) == 805 and int(data.not_read_only.sum()) == 421 and int(data.destructive.sum()) == 296
    assert all(t.annotations is None or not t.annotations for t in data.tools)  # hints stripped from the input
    assert "repeat a name" in " ".join(data.notes)


@pytest.mark.parametrize(("hints", "label"), [
    ({"readOnlyHint": True}, READ_ONLY), ({"readOnlyHint": False}, WRITES), ({"destructiveHint": True}, DESTRUCTIVE),
    ({"readOnlyHint": True, "destructiveHint": True}, NONE), ({}, NONE), ({"openWorldHint": True}, NONE),
])
def test_weak_labels(hints: dict, label: int) -> None:
    assert weak_label(hints) == label


def test_bad_annotated_files_are_one_clear_error(tmp_path) -> None:
    with pytest.raises(DataError, match="missing annotated"):
        load_annotated(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tools": [{"server": "s", "name": "t", "description": "d", "annotations": {"readOnlyHint": "yes"}}]}))
    with pytest.raises(DataError, match=r"tools\[0\] \(s/t\): annotations must be booleans"):
        load_annotated(bad)
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"tools": [
        {"server": "s", "name": "t", "description": "reads a thing", "annotations": {"readOnlyHint": True, "destructiveHint": True}},
        {"server": "s", "name": "u", "description": "reads another", "annotations": {"readOnlyHint": True}}]}))
    data = load_annotated(both)
    assert data.weak.tolist() == [NONE, READ_ONLY]
    assert "1 tools declare readOnlyHint and destructiveHint both true" in " ".join(data.notes)
    (tmp_path / "garbled.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        load_annotated(tmp_path / "garbled.json")


def _tiny(dim: int = 8) -> LevelModel:
    rng = np.random.default_rng(0)
    arrays = {"risk.l1.weight": rng.normal(size=(4, dim)), "risk.l1.bias": np.zeros(4), "risk.l2.weight": rng.normal(size=(1, 4)),
              "risk.l2.bias": np.zeros(1), "writes.weight": rng.normal(size=dim), "writes.bias": np.zeros(1),
              "destructive.weight": rng.normal(size=dim), "destructive.bias": np.zeros(1)}
    return LevelModel({k: v.astype(np.float32) for k, v in arrays.items()}, {"seed": 0})


def test_a_level_model_round_trips_and_refuses_damage(tmp_path) -> None:
    m = _tiny()
    m.save(tmp_path / "lv")
    back = load_level_model(tmp_path / "lv")
    e = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32)
    np.testing.assert_array_equal(back.parts(e).score, m.parts(e).score)
    assert ((m.parts(e).score >= 0) & (m.parts(e).score <= 1)).all()
    with pytest.raises(CheckpointError, match="expects 8-d embeddings"):
        back.parts(e[:, :4])
    blob = bytearray((tmp_path / "lv" / WEIGHTS).read_bytes())
    blob[-1] ^= 1
    (tmp_path / "lv" / WEIGHTS).write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="does not match the sidecar's sha256"):
        load_level_model(tmp_path / "lv")
    (tmp_path / "lv" / SIDECAR).unlink()
    with pytest.raises(CheckpointError, match=r"missing levels\.json"):
        load_level_model(tmp_path / "lv")


def test_commands_and_code_keep_their_rubric_floor() -> None:
    assert rubric_floor("run_shell_command", "Run a shell command and return its output")[0] == 4
    assert rubric_floor("exec_in_pod", "Execute a command in a pod")[0] == 4
    assert rubric_floor("get_file_info", "Retrieve size, creation time and permissions")[0] == 1
    assert rubric_floor("group_list", "This command lists the resource groups")[0] == 1  # documentation, not running


@pytest.mark.skipif(default_level_model_dir() is None, reason="no shipped level model in this tree")
def test_the_served_level_is_the_level_model_s(encoder) -> None:
    from riskrank.pipeline import RiskAwareRetriever

    reg = ToolRegistry.load(FILESYSTEM)
    r = RiskAwareRetriever(reg, encoder=encoder, progress=False)
    assert r.level_model is not None
    lv = {t.name: int(r.tool_levels.levels[i]) for i, t in enumerate(reg)}
    ev = {t.name: r.tool_levels.evidence[i] for i, t in enumerate(reg)}
    # "permissions" is a keyword, but a tool that reports them is a read: served low
    assert lv["get_file_info"] <= 2 and lv["list_directory"] <= 2
    assert lv["delete_file"] >= 4 and lv["write_file"] >= 3
    assert lv["run_shell_command"] >= 4 and any("system-level permission" in e for e in ev["run_shell_command"])
    assert any("does not set the level" in e for e in ev["get_file_info"])
    # without the level model the checkpoint's head and the keyword rule serve, as before
    old = RiskAwareRetriever(reg, encoder=encoder, progress=False, level_model=None)
    assert int(old.tool_levels.levels[reg.index_of("get_file_info")]) == 4


@pytest.mark.skipif(default_level_model_dir() is None, reason="no shipped level model in this tree")
def test_level_model_is_a_choice_of_every_surface(encoder, tmp_path) -> None:
    """``--level-model auto|none|DIR`` (ArtefactSpec.level_model): the served level of the
    same tool under each, from the catalogue every surface loads; a directory that holds no
    level model is one clear error."""
    from riskrank.catalogue import ArtefactSpec, audit_tools
    from riskrank.errors import RiskrankError

    reg = ToolRegistry.load(FILESYSTEM)
    i = reg.index_of("get_file_info")

    def level(value: str) -> tuple[int, str]:
        got = audit_tools(ArtefactSpec(FILESYSTEM, level_model=value), encoder, reg).levels
        return int(got.levels[i]), got.provenance[i]

    assert level("auto") == (1, "predicted")  # docs/base-model.md quotes both
    assert level("none") == (4, "keyword")  # the higher of head and keywords: "permissions"
    assert level(str(default_level_model_dir()))[0] == level("auto")[0]
    with pytest.raises(RiskrankError) as err:
        level(str(tmp_path))
    assert str(tmp_path) in str(err.value) and "Traceback" not in str(err.value)
