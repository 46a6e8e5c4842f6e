"""The `riskrank` command: data fetch from a local mirror, evaluate (results-contract JSON),
retrieve, train then retrieve --checkpoint, and bad input -> exit 2, one line, no traceback,
nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from riskrank.cli import main, run
from riskrank.datasets.demo import demo_registry_path

WEATHER = "What's the weather going to be like in Lisbon this weekend?"
RISKY = "Delete the old log files and run a cleanup shell script."


@pytest.fixture(scope="module", autouse=True)
def warm_cache(encoder, demo):
    """Each CLI call builds its own Encoder; with the texts already in the shared cache none
    of them has to load the model."""
    encoder.encode(demo.registry.texts())
    encoder.encode(demo.splits["test"].texts)
    encoder.encode([WEATHER, RISKY])


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def run_entry(args, monkeypatch, capsys):
    """The console script's error policy (riskrank.cli.run), in process."""
    monkeypatch.setattr(sys, "argv", ["riskrank", *args])
    code = run()
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_clean_error(code: int, err: str, pattern: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    error_lines = [x for x in lines if x.startswith(("error:", "Error:"))]
    assert len(error_lines) == 1, err
    assert pattern in error_lines[0], err


# -- data fetch -------------------------------------------------------------------------------
def test_data_fetch_from_a_local_mirror(data_dir, tmp_path):
    dest = tmp_path / "data"
    res = invoke("data", "fetch", "--source", str(data_dir), "--dest", str(dest), "--quiet")
    assert res.exit_code == 0, res.output
    assert "fetched" in res.output
    if not (data_dir / "JoeYing1019/UltraTool/data/English-dataset/dev.json").exists():
        assert "UltraTool dev.json absent" in res.output  # optional files are reported
    assert (dest / "JoeYing1019/UltraTool/data/English-dataset/test.json").is_file()
    res = invoke("data", "fetch", "--source", str(data_dir), "--dest", str(dest), "--quiet")
    assert res.exit_code == 0, res.output
    assert "0 fetched" in res.output and "present" in res.output  # valid files are skipped


def test_data_fetch_bad_source(tmp_path, monkeypatch, capsys):
    code, _, err = run_entry(["data", "fetch", "--source", str(tmp_path / "nope"), "--dest", str(tmp_path / "d")],
                             monkeypatch, capsys)
    assert_clean_error(code, err, "not a directory")
    assert not (tmp_path / "d").exists()


# -- evaluate ----------------------------------------------------------------------------------
def test_evaluate_demo_json(tmp_path):
    out = tmp_path / "res.json"
    res = invoke("evaluate", "--dataset", "demo", "--methods", "bm25,dense", "--json", str(out), "--quiet")
    assert res.exit_code == 0, res.output
    assert "ndcg@5" in res.output and "bm25" in res.output and "dense" in res.output
    data = json.loads(out.read_text())
    for key in ("dataset", "protocol", "encoder", "seeds", "splits", "timing"):
        assert key in data
    assert data["dataset"] == "demo" and isinstance(data["seeds"], list) and isinstance(data["timing"], dict)
    assert "all-MiniLM-L6-v2" in data["encoder"]
    split = data["splits"]["test"]
    assert split["n_queries"] >= 30
    assert set(split["methods"]) == {"bm25", "dense"}
    for method in split["methods"].values():
        assert {"ndcg@5", "mrr", "sndcg@5", "rvr@5", "srr@5"} <= set(method)
        for metric, v in method.items():
            assert set(v) == {"mean", "std"}, metric
    nd = split["methods"]["dense"]["ndcg@5"]["mean"]
    assert 0.0 < nd <= 1.0 and split["methods"]["dense"]["ndcg@5"]["std"] == 0.0


# -- retrieve ----------------------------------------------------------------------------------
def test_a_tiny_registry_gets_no_default_floor_and_the_table_names_what_a_floor_cut(tmp_path):
    """The heads read scores normalised over the task's tools: over one tool they say nothing,
    and that tool fell below the default floor whatever the task. Five or more get the floor,
    and what it cut is named under the table, not only in the JSON."""
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{"name": "delete_files", "description": "Delete files"}]))
    data = json.loads(invoke("retrieve", "delete logs", "--registry", str(one), "--json").output)
    assert [t["name"] for t in data["tools"]] == ["delete_files"] and data["min_score"] is None
    assert any("no relevance floor" in n for n in data["notes"])
    five = tmp_path / "five.json"
    five.write_text(json.dumps([{"name": n, "description": d} for n, d in (
        ("send_email", "Send an e-mail."), ("get_weather", "Weather forecast for a city."), ("read_file", "Read a file."),
        ("list_files", "List files."), ("translate", "Translate text."))]))
    res = invoke("retrieve", "send an email to bob", "--registry", str(five))
    data = json.loads(invoke("retrieve", "send an email to bob", "--registry", str(five), "--json").output)
    assert data["below_min_score"] and all(n in res.output for n in data["below_min_score"])
    assert "not shown, below the relevance floor" in res.output


def test_retrieve_demo_registry():
    # no --checkpoint: the shipped base model, in the strongest safe mode
    res = invoke("retrieve", WEATHER, "-k", "3")
    assert res.exit_code == 0, res.output
    assert "get_weather_forecast" in res.output and "mode core+graph+rule" in res.output and "audited" in res.output
    res = invoke("retrieve", WEATHER, "-k", "3", "--json", "--registry", str(demo_registry_path()), "--checkpoint", "none")
    data = json.loads(res.output)
    assert data["mode"] == "dense+rule" and len(data["tools"]) == 3
    res = invoke("retrieve", WEATHER, "-k", "3", "--json", "--checkpoint", "none", "--mode", "dense")
    data = json.loads(res.output)
    assert data["mode"] == "dense" and len(data["tools"]) == 3
    assert data["tools"][0]["name"] == "get_weather_forecast"
    assert {"name", "score", "risk_level", "permissions", "f_rel", "f_risk"} <= set(data["tools"][0])


def test_train_then_retrieve_with_checkpoint(tmp_path, monkeypatch, capsys, torch_single_thread):
    ck = tmp_path / "ck"
    res = invoke("train", "--dataset", "demo", "--out", str(ck), "--epochs", "2", "--seed", "1")
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and (ck / "checkpoint.json").is_file() and (ck / "heads.safetensors").is_file()
    res = invoke("retrieve", RISKY, "--checkpoint", str(ck), "--mode", "rule", "--json", "--lam", "0")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    # five tools pass the filter; the checkpoint's relevance floor may cut the weakest of them
    assert data["mode"] == "core+graph+rule" and data["lambda"] == 0.0 and data["min_score"] is not None
    assert 1 <= len(data["tools"]) <= 5 and len(data["tools"]) + len(data["below_min_score"]) == 5
    assert all(t["predicted_level"] in (1, 2, 3, 4, 5) for t in data["tools"])
    res = invoke("retrieve", RISKY, "--checkpoint", str(ck), "--mode", "rule", "--lam", "0")
    assert "deferred by the rule filter" in res.output and "risk_cap" in res.output
    assert "need head:" in invoke("train", "--dataset", "demo", "--out", str(tmp_path / "ck2"), "--epochs", "1").output
    res = invoke("retrieve", RISKY, "--checkpoint", str(ck), "--mode", "core+graph+context+rule")
    assert res.exit_code == 0 and "need " in res.output and "threshold" in res.output, res.output
    # an existing checkpoint is not overwritten without --force
    before = (ck / "heads.safetensors").read_bytes()
    code, _, err = run_entry(["train", "--dataset", "demo", "--out", str(ck), "--epochs", "1"], monkeypatch, capsys)
    assert_clean_error(code, err, "already holds a checkpoint")
    assert (ck / "heads.safetensors").read_bytes() == before


# -- bad input ---------------------------------------------------------------------------------------
def bad_registry(tmp_path: Path) -> Path:
    p = tmp_path / "bad.json"
    p.write_text('[\n  {"name": "a", "description": "x"},\n  {"name": "b" "description": "y"}\n]\n')
    return p


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["evaluate", "--dataset", "demo", "--methods", "bm25,magic", "--json", "{out}"], "unknown method 'magic'"),
        (["evaluate", "--dataset", "toolbench", "--json", "{out}"], "Invalid value for '--dataset'"),
        (["evaluate", "--dataset", "demo", "--seeds", "4,two", "--json", "{out}"], "seeds must be comma-separated integers"),
        (["evaluate", "--dataset", "demo", "--seeds", ",", "--json", "{out}"], "give at least one seed"),
        (["evaluate", "--dataset", "ultratool", "--data", "{tmp}/nowhere", "--json", "{out}"], "does not exist"),
        (["evaluate", "--dataset", "sealtools", "--query-mode", "plan", "--json", "{out}"], "UltraTool only"),
        (["retrieve", "task", "--registry", "{tmp}/missing.json"], "no such file"),
        (["retrieve", "task", "--registry", "{bad}"], "invalid JSON at line 3"),
        (["retrieve", WEATHER, "-k", "0"], "k must be an integer between 1 and 100"),
        (["retrieve", WEATHER, "--mode", "core", "--checkpoint", "none"], "needs a checkpoint"),
        (["retrieve", WEATHER, "--mode", "warp"], "Invalid value for '--mode': 'warp' is not one of"),
        (["retrieve", WEATHER, "--lam", "-1"], "lambda must be a finite number >= 0"),
        (["retrieve", "   "], "empty"),
        (["retrieve", WEATHER, "--checkpoint", "{tmp}/no_ck"], "no such checkpoint directory"),
        (["train", "--registry", "{bad}", "--queries", "{tmp}/q.jsonl", "--out", "{tmp}/ck"], "invalid JSON at line 3"),
        (["train", "--out", "{tmp}/ck"], "give --dataset, or --registry and --queries"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, args, pattern):
    out = tmp_path / "res.json"
    subst = {"{out}": str(out), "{tmp}": str(tmp_path), "{bad}": str(bad_registry(tmp_path))}
    argv = []
    for a in args:
        for k, v in subst.items():
            a = a.replace(k, v)
        argv.append(a)
    code, _, err = run_entry(argv, monkeypatch, capsys)
    assert_clean_error(code, err, pattern)
    assert not out.exists(), "nothing may be written on failure"
    assert not (tmp_path / "ck").exists()


def test_train_queries_file_errors(tmp_path, monkeypatch, capsys):
    reg = demo_registry_path()
    q = tmp_path / "q.jsonl"
    q.write_text('{"task": "read my notes", "gold": ["read_file"]}\n{"task": "x", "gold": ["no_such_tool"]}\n')
    code, _, err = run_entry(["train", "--registry", str(reg), "--queries", str(q), "--out", str(tmp_path / "ck")], monkeypatch, capsys)
    assert_clean_error(code, err, "line 2: unknown tool(s) 'no_such_tool'")
    q.write_text('{"task": "read my notes"}\n')
    code, _, err = run_entry(["train", "--registry", str(reg), "--queries", str(q), "--out", str(tmp_path / "ck")], monkeypatch, capsys)
    assert_clean_error(code, err, "line 1: expected")
    assert not (tmp_path / "ck").exists()


def test_json_target_survives_a_failed_run(tmp_path, monkeypatch, capsys):
    out = tmp_path / "res.json"
    out.write_text('{"previous": true}')
    code, _, err = run_entry(["evaluate", "--dataset", "demo", "--methods", "nope", "--json", str(out)], monkeypatch, capsys)
    assert_clean_error(code, err, "unknown method")
    assert json.loads(out.read_text()) == {"previous": True}


def test_console_script_error_policy(tmp_path):
    """The installed `riskrank` entry point: exit code 2, one error line, no traceback."""
    exe = shutil.which("riskrank", path=str(Path(sys.executable).parent)) or shutil.which("riskrank")
    assert exe, "the riskrank console script is not installed"
    bad = bad_registry(tmp_path)
    proc = subprocess.run([exe, "retrieve", "--registry", str(bad), "delete a file"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0] and "line 3" in lines[0]


@pytest.mark.parametrize("argv", [[], ["pins"], ["levels"]])
def test_a_group_without_a_command_shows_its_help(argv, monkeypatch, capfd):
    """`riskrank` alone (or a group alone) prints the help, not the help squashed into one
    cut-off error line."""
    monkeypatch.setattr(sys, "argv", ["riskrank", *argv])
    code = run()
    _, err = capfd.readouterr()
    assert code == 2 and err.startswith("Usage: ") and f"riskrank{' ' + argv[0] if argv else ''} [OPTIONS] COMMAND" in err
    assert "\nCommands:\n" in err and "error:" not in err
