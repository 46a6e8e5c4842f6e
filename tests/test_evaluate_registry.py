"""`riskrank evaluate --registry R --queries Q`: evaluation on any registry (the bundled demo's
tools and tasks, as a user would bring them), the contamination check of a checkpoint's
training queries (named benchmarks and registries), and bad input -> one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from riskrank.cli import main
from riskrank.contamination import normalise_task, query_digests, seen_mask, task_digest
from riskrank.datasets.demo import demo_registry_path, demo_tasks_path
from test_cli import assert_clean_error, run_entry  # the CLI tests' error-policy helpers

TASKS = json.loads(demo_tasks_path().read_text(encoding="utf-8"))
UNSEEN = [  # tasks written for this test: none is a demo task
    {"task": "Show the free space left on my main disk.", "gold": ["list_directory"]},
    {"task": "Read the notes file in my home folder and tell me what it says.", "gold": ["read_file"]},
]


@pytest.fixture(scope="module", autouse=True)
def warm_cache(encoder, demo):
    encoder.encode(demo.registry.texts())
    encoder.encode(demo.splits["test"].texts)
    encoder.encode([t["task"] for t in UNSEEN])


@pytest.fixture(scope="module")
def user_files(tmp_path_factory) -> dict[str, Path]:
    """The demo registry as a user's unaudited tool list (levels moved to a labels file),
    its tasks as the queries file."""
    d = tmp_path_factory.mktemp("user")
    reg = json.loads(demo_registry_path().read_text(encoding="utf-8"))
    labels = {t["name"]: {"risk_level": t.pop("risk_level")} for t in reg}
    for t in reg:
        t.pop("reason", None)
    (d / "my_tools.json").write_text(json.dumps(reg))
    (d / "labels.json").write_text(json.dumps(labels))
    write_queries(d / "queries.jsonl", [{"task": t["task"], "gold": t["gold"]} for t in TASKS])
    write_queries(d / "unseen.jsonl", UNSEEN)
    return {"registry": d / "my_tools.json", "labels": d / "labels.json", "queries": d / "queries.jsonl",
            "unseen": d / "unseen.jsonl", "dir": d}


@pytest.fixture(scope="module")
def demo_checkpoint(demo_fitted, tmp_path_factory) -> Path:
    """A checkpoint written by the normal fit/save path, trained on every demo task."""
    return demo_fitted.save(tmp_path_factory.mktemp("ck") / "demo")


def write_queries(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


# -- the registry path, end to end ------------------------------------------------------------------
def test_unaudited_registry_zero_shot_on_the_base_model(user_files, tmp_path):
    """No labels, no checkpoint, no training queries: the shipped base model's methods run zero-shot
    beside the untrained ones, and the predicted levels are its risk head's (with the keywords)."""
    out = tmp_path / "res.json"
    res = invoke("evaluate", "--registry", user_files["registry"], "--queries", user_files["queries"], "--quiet", "--json", out)
    assert res.exit_code == 0, res.output
    assert "riskrank/base/model" in res.output and "PREDICTED risk levels: 98 of 98 tools" in res.output
    doc = json.loads(out.read_text())
    assert set(doc["splits"]["test"]["methods"]) == {"bm25", "dense", "hybrid", "dense+rule", "core", "core+graph", "core+graph+rule"}
    assert doc["levels"]["predicted_by"] == "head" and "skipped_methods" not in doc
    base = doc["splits"]["test"]["methods"]
    assert base["core+graph+rule"]["rvr@5"]["mean"] < base["dense"]["rvr@5"]["mean"]


def test_unaudited_registry_without_heads(user_files, tmp_path):
    """No labels, --checkpoint none, no training queries: the untrained methods run, the exposure
    metrics read predicted levels and say so, the trained methods are named as not run."""
    out = tmp_path / "res.json"
    res = invoke("evaluate", "--registry", user_files["registry"], "--queries", user_files["queries"], "--checkpoint", "none",
                 "--quiet", "--json", out)
    assert res.exit_code == 0, res.output
    assert "PREDICTED risk levels: 98 of 98 tools" in res.output
    assert "not run: core, core+graph, core+graph+rule (trained methods need --checkpoint or --train-queries)" in res.output
    doc = json.loads(out.read_text())
    assert doc["dataset"] == "my_tools" and doc["seeds"] == [42]
    assert set(doc["splits"]["test"]["methods"]) == {"bm25", "dense", "hybrid", "dense+rule"}
    assert doc["splits"]["test"]["n_queries"] == len(TASKS)
    assert doc["levels"] == {"audited": 0, "predicted": 98, "source": "predicted", "predicted_by": "keyword"}
    assert doc["skipped_methods"] == ["core", "core+graph", "core+graph+rule"]
    assert any(n.startswith("PREDICTED") for n in doc["notes"])
    for vals in doc["splits"]["test"]["methods"].values():
        assert set(vals) >= {"ndcg@5", "mrr", "sndcg@5", "rvr@5", "srr@5", "safe_rvr@5", "needrisk_hit@5", "recall@5", "success@5"}


def test_registry_with_labels_equals_the_benchmark(user_files, tmp_path):
    """The demo's tools and tasks brought as a user's files, with the audited labels, give
    the numbers `evaluate --dataset demo` gives for the same methods."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    res = invoke("evaluate", "--registry", user_files["registry"], "--queries", user_files["queries"], "--labels",
                 user_files["labels"], "--methods", "bm25,dense,dense+rule", "--name", "mine", "--quiet", "--json", a)
    assert res.exit_code == 0, res.output
    assert "PREDICTED" not in res.output
    res = invoke("evaluate", "--dataset", "demo", "--methods", "bm25,dense,dense+rule", "--quiet", "--json", b)
    assert res.exit_code == 0, res.output
    mine, bench = json.loads(a.read_text()), json.loads(b.read_text())
    assert mine["dataset"] == "mine" and mine["levels"]["source"] == "audited"
    for m in ("bm25", "dense", "dense+rule"):
        for metric, v in bench["splits"]["test"]["methods"][m].items():
            assert mine["splits"]["test"]["methods"][m][metric]["mean"] == pytest.approx(v["mean"], abs=1e-9), (m, metric)


def test_gold_names_not_in_the_registry_are_counted(user_files, tmp_path):
    q = write_queries(tmp_path / "q.jsonl", [
        {"task": "Show me what's in my Downloads folder.", "gold": ["list_directory", "ls_v2"]},
        {"task": "Print the quarterly report.", "gold": ["printer_queue"]},
        {"task": "Read my todo file.", "gold": ["read_file"]},
    ])
    out = tmp_path / "res.json"
    res = invoke("evaluate", "--registry", user_files["registry"], "--queries", q, "--labels", user_files["labels"],
                 "--methods", "dense", "--quiet", "--json", out)
    assert res.exit_code == 0, res.output
    assert "2 gold name(s) not in the registry (2 distinct: 'ls_v2', 'printer_queue')" in res.output
    assert "1 of 3 queries have no gold tool left and are excluded" in res.output
    doc = json.loads(out.read_text())
    assert doc["splits"]["test"]["n_queries"] == 2
    assert doc["queries"]["test"]["gold_not_in_registry"] == 2 and doc["queries"]["test"]["excluded_queries"] == 1


def test_labels_naming_other_tools_are_reported(user_files, tmp_path):
    labels = json.loads(user_files["labels"].read_text())
    labels["ghost_tool"] = {"risk_level": 4}
    del labels["read_file"]
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(labels))
    res = invoke("evaluate", "--registry", user_files["registry"], "--queries", user_files["unseen"], "--labels", path,
                 "--methods", "dense", "--quiet")
    assert res.exit_code == 0, res.output
    assert "1 labelled tool(s) not in the registry, ignored ('ghost_tool')" in res.output
    assert "PREDICTED risk levels: 1 of 98 tools" in res.output  # read_file lost its label


def test_a_registry_of_five_tools(user_files, tmp_path):
    reg = json.loads(user_files["registry"].read_text())[:5]
    path = tmp_path / "five.json"
    path.write_text(json.dumps(reg))
    names = [t["name"] for t in reg]
    q = write_queries(tmp_path / "q.jsonl", [{"task": f"use the {n.replace('_', ' ')} tool", "gold": [n]} for n in names])
    out = tmp_path / "res.json"
    res = invoke("evaluate", "--registry", path, "--queries", q, "--methods", "bm25,dense,hybrid,dense+rule", "--quiet", "--json", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["splits"]["test"]["n_queries"] == 5
    assert all(v["recall@5"]["mean"] == 1.0 for v in doc["splits"]["test"]["methods"].values())  # 5 tools: all in the top 5


# -- contamination -------------------------------------------------------------------------------
def test_digests_normalise_whitespace_and_case():
    assert normalise_task("  Delete\tthe  OLD logs \n") == "delete the old logs"
    assert task_digest("Delete the old logs") == task_digest("delete   the old LOGS")
    assert len(task_digest("x")) == 16
    d = query_digests(["b", "a", "A"])
    assert d == sorted(d) and len(d) == 2
    assert seen_mask(["A", "c"], d) == [True, False]


def test_checkpoints_record_their_training_queries(demo_checkpoint, demo):
    side = json.loads((demo_checkpoint / "checkpoint.json").read_text())
    assert side["training_data"]["query_sha256"] == query_digests(demo.train.texts)


def test_sidecar_digests_are_checked(demo_checkpoint, tmp_path):
    import shutil

    from riskrank.checkpoint import load_checkpoint
    from riskrank.errors import CheckpointError

    ck = tmp_path / "ck"
    shutil.copytree(demo_checkpoint, ck)
    side = json.loads((ck / "checkpoint.json").read_text())
    side["training_data"]["query_sha256"] = ["not-a-digest"]
    (ck / "checkpoint.json").write_text(json.dumps(side))
    with pytest.raises(CheckpointError, match="query_sha256 may only hold 16-hex-digit task digests"):
        load_checkpoint(ck)
    del side["training_data"]["query_sha256"]  # an older checkpoint: loads
    (ck / "checkpoint.json").write_text(json.dumps(side))
    assert "query_sha256" not in load_checkpoint(ck).meta["training_data"]


def test_benchmark_evaluation_refuses_a_checkpoints_training_queries(demo_checkpoint, tmp_path, monkeypatch, capsys):
    out = tmp_path / "res.json"
    code, _, err = run_entry(["evaluate", "--dataset", "demo", "--checkpoint", demo_checkpoint, "--methods", "dense,core",
                              "--quiet", "--json", out], monkeypatch, capsys)
    assert_clean_error(code, err, f"trained on {len(TASKS)} of the {len(TASKS)} evaluation queries (test {len(TASKS)})")
    assert "--allow-contaminated" in err and not out.exists()
    res = invoke("evaluate", "--dataset", "demo", "--checkpoint", demo_checkpoint, "--methods", "dense,core", "--allow-contaminated",
                 "--quiet", "--json", out)
    assert res.exit_code == 0, res.output
    assert "core (contaminated)" in res.output and "dense (contaminated)" not in res.output
    doc = json.loads(out.read_text())
    assert doc["contaminated"] == {"checkpoint": str(demo_checkpoint), "checked": True, "splits": {"test": len(TASKS)},
                                   "methods": ["core"]}
    assert any(n.startswith("CONTAMINATED") for n in doc["notes"])
    assert doc["protocol"].startswith("zero-shot: heads and every validated setting from the checkpoint")


def test_registry_evaluation_checks_contamination(demo_checkpoint, user_files, tmp_path, monkeypatch, capsys):
    some = write_queries(tmp_path / "some.jsonl", [*UNSEEN, {"task": "  " + TASKS[3]["task"].upper(), "gold": TASKS[3]["gold"]}])
    code, _, err = run_entry(["evaluate", "--registry", user_files["registry"], "--queries", some, "--labels", user_files["labels"],
                              "--checkpoint", demo_checkpoint, "--quiet"], monkeypatch, capsys)
    assert_clean_error(code, err, "trained on 1 of the 3 evaluation queries")
    out = tmp_path / "res.json"
    res = invoke("evaluate", "--registry", user_files["registry"], "--queries", user_files["unseen"], "--labels",
                 user_files["labels"], "--checkpoint", demo_checkpoint, "--methods",
                 "bm25,dense,hybrid,core,core+graph,core+graph+rule,core+graph+rule_pred", "--quiet", "--json", out)
    assert res.exit_code == 0, res.output
    assert "risk head trained on this registry's labels" in res.output  # the same tools as the checkpoint's
    doc = json.loads(out.read_text())
    assert doc["contaminated"]["methods"] == [] and doc["contaminated"]["splits"] == {"test": 0}
    assert {"core", "core+graph", "core+graph+rule", "bm25"} <= set(doc["splits"]["test"]["methods"])
    assert "contaminated" not in res.output.split("[test]")[1]


# -- bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("queries", "extra", "pattern"),
    [
        (None, [], "no such file"),
        ("", [], "no queries (the file is empty"),
        ('{"gold": ["read_file"]}\n', [], 'line 1: expected {"task": "...", "gold"'),
        ('{"task": "read my notes"}\n', [], "line 1: expected"),
        ('{"task": "read my notes", "gold": "read_file"}\n', [], "line 1: 'gold' must be a list of tool names"),
        ('{"task": "", "gold": ["read_file"]}\n', [], "line 1: 'task' must be a non-empty string"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n{"task": "Read  my NOTES", "gold": ["read_file"]}\n', [],
         "line 2: duplicate task (the same as line 1"),
        ('{"task": "read my notes", "gold": ["nope_a", "nope_b"]}\n', [], "none of the 1 queries has a gold tool in the registry"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n{"task": "x",\n', [], "line 2"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n', ["--methods", "dense,warp"], "unknown method 'warp'"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n', ["--methods", "core", "--checkpoint", "none"], "core: trained methods need a checkpoint"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n', ["--labels", "{bad_labels}"], "'read_file': risk_level must be an integer 1-5"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n', ["--train-queries", "{overlap}"],
         "1 of the 1 queries in"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n', ["--train-queries", "{overlap}", "--checkpoint", "{tmp}"],
         "not both"),
        ('{"task": "read my notes", "gold": ["read_file"]}\n', ["--dataset", "demo"], "give --dataset NAME, or --registry"),
    ],
)
def test_bad_input(user_files, tmp_path, monkeypatch, capsys, queries, extra, pattern):
    q = tmp_path / "q.jsonl"
    if queries is not None:
        q.write_text(queries)
    (tmp_path / "bad_labels.json").write_text(json.dumps({"read_file": {"risk_level": 7}}))
    write_queries(tmp_path / "overlap.jsonl", [{"task": "READ my notes", "gold": ["read_file"]}])
    subst = {"{bad_labels}": str(tmp_path / "bad_labels.json"), "{overlap}": str(tmp_path / "overlap.jsonl"), "{tmp}": str(tmp_path)}
    extra = [subst.get(a, a) for a in extra]
    out = tmp_path / "res.json"
    code, _, err = run_entry(["evaluate", "--registry", user_files["registry"], "--queries", q, *extra, "--quiet", "--json", out],
                             monkeypatch, capsys)
    assert_clean_error(code, err, pattern)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--registry", "{reg}"], "--registry needs --queries"),
        (["--dataset", "demo", "--queries", "{tmp}/q.jsonl"], "--queries go with --registry"),
        (["--registry", "{tmp}/nowhere.json", "--queries", "{tmp}/q.jsonl"], "no such file"),
    ],
)
def test_bad_option_combinations(user_files, tmp_path, monkeypatch, capsys, args, pattern):
    argv = [a.replace("{reg}", str(user_files["registry"])).replace("{tmp}", str(tmp_path)) for a in args]
    code, _, err = run_entry(["evaluate", *argv, "--quiet"], monkeypatch, capsys)
    assert_clean_error(code, err, pattern)


def test_zero_shot_checkpoint_on_another_registry(demo_checkpoint, user_files, tmp_path):
    """A checkpoint on tools it was not trained on: its risk head predicts the unaudited
    levels, its graph is rebuilt from semantic and permission edges, every mode runs; --json
    alone puts the document on stdout and the notes on stderr."""
    reg = json.loads(user_files["registry"].read_text())
    keep = [t for t in reg if t["name"] not in ("get_file_metadata", "search_files")]
    path = tmp_path / "other.json"
    path.write_text(json.dumps(keep))
    res = CliRunner().invoke(main, ["evaluate", "--registry", str(path), "--queries", str(user_files["unseen"]), "--checkpoint",
                                    str(demo_checkpoint), "--methods", "dense,core,core+graph,core+graph+rule_pred", "--quiet",
                                    "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["dataset"] == "other" and doc["protocol"].endswith("of another registry")
    assert doc["levels"] == {"audited": 0, "predicted": len(keep), "source": "predicted", "predicted_by": "head"}
    assert set(doc["splits"]["test"]["methods"]) == {"dense", "core", "core+graph", "core+graph+rule_pred"}
    assert "note: PREDICTED risk levels" in res.stderr
