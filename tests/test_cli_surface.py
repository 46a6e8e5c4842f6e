"""What every command spells the same way: ``--json [FILE]`` (stdout when no file), ``--mode``
from the same choices as the servers, ``--trust-annotations``; error lines capped at 300
characters; and the two commands a new user meets first, ``riskrank demo`` and
``riskrank graph stats``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from riskrank.cli import MAX_ERROR_CHARS, main, run
from riskrank.datasets.demo import demo_registry_path
from riskrank.modes import MODES

TASK = "Delete the old log files and run a cleanup shell script."
DEMO = str(demo_registry_path())


@pytest.fixture(scope="module", autouse=True)
def warm_cache(encoder, demo):
    encoder.encode(demo.registry.texts())
    encoder.encode(demo.splits["test"].texts)
    encoder.encode([TASK, "read my notes", "remove every note in my notebook"])


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_entry(args, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["riskrank", *args])
    code = run()
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# -- --json [FILE] -----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["retrieve", TASK, "--json"],
    ["retrieve", "--json", TASK],          # the word after --json is the task when no other is given
    ["retrieve", TASK, "-k", "3", "--json", "-"],
    ["evaluate", "--dataset", "demo", "--methods", "bm25", "--quiet", "--json"],
    ["graph", "stats", "--registry", DEMO, "--json"],
    ["agreement", DEMO, "{copy}", "--bootstrap", "0", "--json"],  # two files (one given twice is refused)
])
def test_json_without_a_file_is_the_document_on_stdout(argv, tmp_path):
    copy = tmp_path / "copy.json"
    copy.write_bytes(Path(DEMO).read_bytes())
    res = invoke(*[a.replace("{copy}", str(copy)) for a in argv])
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)  # stdout holds the document and nothing else


@pytest.mark.parametrize("argv", [
    ["retrieve", TASK, "--json", "{out}"],
    ["evaluate", "--dataset", "demo", "--methods", "bm25", "--quiet", "--json", "{out}"],
    ["graph", "stats", "--registry", DEMO, "--json", "{out}"],
    ["agreement", DEMO, "{copy}", "--bootstrap", "0", "--json", "{out}"],
])
def test_json_with_a_file_writes_it_and_prints_the_table(tmp_path, argv):
    out, copy = tmp_path / "out.json", tmp_path / "copy.json"
    copy.write_bytes(Path(DEMO).read_bytes())
    res = invoke(*[a.replace("{out}", str(out)).replace("{copy}", str(copy)) for a in argv])
    assert res.exit_code == 0, res.output
    json.loads(out.read_text())
    assert f"wrote {out}" in res.stdout and not res.stdout.lstrip().startswith("{")


def test_retrieve_json_matches_the_table():
    doc = json.loads(invoke("retrieve", TASK, "--mode", "dense+rule", "--json").stdout)
    table = invoke("retrieve", TASK, "--mode", "dense+rule").stdout
    assert doc["mode"] == "dense+rule" and all(t["name"] in table for t in doc["tools"])


def test_retrieve_level_columns_have_a_legend_and_are_the_json_levels():
    """One enforced level per tool (``level``, with its provenance), the registry's audit and
    the risk head's prediction beside it, and a legend that says which is which."""
    from riskrank.cli.library import LEVEL_LEGEND

    doc = json.loads(invoke("retrieve", TASK, "--json").stdout)
    lines = invoke("retrieve", TASK).stdout.splitlines()
    header = next(x for x in lines if x.lstrip().startswith("#"))
    cols = header.split()
    assert cols[5:9] == ["level", "provenance", "audited", "predicted"]
    assert "\n".join(lines).count(LEVEL_LEGEND) == 1
    rows = {x.split()[1]: x.split() for x in lines if x.split() and x.split()[0].isdigit()}
    for t in doc["tools"]:
        row = rows[t["name"]]
        assert row[5] == f"L{t['risk_level']}" and row[6] == t["risk_provenance"]
        assert row[7] == (f"L{t['audited_level']}" if t["audited_level"] else "-")
        assert row[8] == (f"L{t['predicted_level']}" if t["predicted_level"] else "-")


# -- modes: the same choices everywhere ---------------------------------------------------------------------
@pytest.mark.parametrize("command", [["retrieve", TASK], ["serve", "--write-openapi", "x.json"], ["mcp"]])
def test_mode_is_validated_the_same_way_everywhere(command, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_entry([*command, "--mode", "warp"], monkeypatch, capsys)
    assert code == 2 and "Invalid value for '--mode': 'warp' is not one of" in err
    assert all(f"'{m}'" in err for m in MODES)


# -- --trust-annotations ----------------------------------------------------------------------------------
def test_trust_annotations_lets_read_only_hints_lower(tmp_path):
    from test_server_support import write_mcp_registry

    reg = str(write_mcp_registry(tmp_path / "mcp.json"))
    # without a risk head (--checkpoint none) unaudited tools take the fail-closed path
    base = ["retrieve", "read my notes", "--registry", reg, "--mode", "dense+rule", "-k", "5", "--json", "--checkpoint", "none"]
    default = json.loads(invoke(*base).stdout)
    trusted = json.loads(invoke(*base, "--trust-annotations").stdout)
    # hints only raise by default: every unlabelled tool is fail-closed ...
    assert set(default["unlabelled"]) == {"read_notes", "search_web", "count_words"}
    # ... trusted, the read-only tools get their hinted level and are no longer unlabelled
    assert set(trusted["unlabelled"]) == {"count_words"}


# -- error lines --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["x" * 200_000, [1] * 100_000])
def test_error_lines_are_capped(tmp_path, monkeypatch, capsys, value):
    p = tmp_path / ("d" * 150) / "reg.json"  # a long path, too
    p.parent.mkdir()
    p.write_text(json.dumps([{"name": "a", "description": "b", "risk_level": value}]))
    code, out, err = run_entry(["retrieve", "--registry", str(p), "delete a file"], monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and len(lines[0]) <= MAX_ERROR_CHARS
    assert lines[0].startswith("error: ")


def test_error_lines_escape_control_characters(tmp_path, monkeypatch, capsys):
    d = tmp_path / "di\x1b[2Jr"
    d.mkdir()
    (d / "reg.json").write_text("[")
    code, _, err = run_entry(["retrieve", "--registry", str(d / "reg.json"), "delete a file"], monkeypatch, capsys)
    assert code == 2 and "\x1b" not in err and "\\u001b" in err


# -- riskrank demo, riskrank graph stats -----------------------------------------------------------------------
def test_demo_command(monkeypatch, capsys, demo_fitted):
    """The README's first command, on the shipped base model (no training): per task the
    relevance-only top-5 beside what riskrank serves by default (and the context stage), each
    column naming its mode, each tool with its level's provenance; the default keeps at most
    one risky tool, and risk awareness changes at least one list (demo-02 has risky
    near-duplicates of the balance lookup). Without a base model it trains on the demo (the
    session's demo_fitted)."""
    import riskrank.base as base
    import riskrank.experiments.demo as demo_mod

    monkeypatch.setattr(demo_mod, "fit_retriever", lambda *a, **kw: demo_fitted)
    res = invoke("demo", "--tasks", "demo-02,demo-09")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "relevance only (core, lambda 0)" in out and "riskrank default (core+graph+rule)" in out
    assert out.count("RVR@5") >= 4 and "demo-02:" in out and "demo-09:" in out and " audited" in out
    shown = demo_mod.run_demo(["demo-02", "demo-09"], echo=lambda s: None)
    levels = {t.name: t.risk_level for t in demo_fitted.registry}
    col = lambda lists, prefix: next(v for k, v in lists.items() if k.startswith(prefix))  # noqa: E731
    for lists in shown.values():
        default = col(lists, "riskrank default")
        assert default.mode == "core+graph+rule" and sum(levels[t.name] >= 3 for t in default.tools) <= 1
        assert all(t.risk_provenance == "audited" for lst in lists.values() for t in lst.tools)
    assert any([t.name for t in col(lst, "relevance only").tools] != [t.name for t in col(lst, "riskrank default").tools]
               for lst in shown.values())
    if base.default_checkpoint() is not None:
        hidden = demo_mod.run_demo(["demo-02"], echo=lambda s: None, unaudited=True)["demo-02"]
        assert {t.risk_provenance for lst in hidden.values() for t in lst.tools} <= {"predicted", "keyword", "annotation"}


def test_demo_command_refuses_an_unknown_task(monkeypatch, capsys, demo_fitted):
    import riskrank.experiments.demo as demo_mod

    monkeypatch.setattr(demo_mod, "fit_retriever", lambda *a, **kw: demo_fitted)
    code, _, err = run_entry(["demo", "--tasks", "demo-01,demo-99"], monkeypatch, capsys)
    assert code == 2 and "unknown demo task id(s): demo-99" in err


def test_graph_stats_command(tmp_path, monkeypatch, capsys):
    res = invoke("graph", "stats", "--registry", DEMO, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    edges = doc["stats"]["edges"]
    assert edges["co"] == 0 and edges["risk"] == 0, "no training queries, so no co-occurrence edges"
    assert edges["perm"] > 0 and edges["sem"] >= 0
    assert "no training queries (no co-occurrence edges)" in invoke("graph", "stats", "--registry", DEMO).stdout
    table = invoke("graph", "stats", "--dataset", "demo")
    assert table.exit_code == 0 and "edge type" in table.stdout and "demo: training queries = " in table.stdout
    assert "semantic edges per cosine threshold" in table.stdout
    for argv in (["graph", "stats"], ["graph", "stats", "--registry", DEMO, "--dataset", "demo"]):
        code, _, err = run_entry(argv, monkeypatch, capsys)
        assert code == 2 and "exactly one of --dataset or --registry" in err


# -- what reaches the terminal -----------------------------------------------------------------------------
def test_every_command_prints_through_the_escaping_echo():
    """Control, bidi, zero-width and tag characters reach the terminal as JSON escapes: one
    function prints for every command (no module of the CLI calls click.echo itself)."""
    from pathlib import Path

    from riskrank.fileio import terminal_safe

    raw = "a\u202eb\x1b[31mc\u200bd\U000e0041e\r\u2028f\tg\nh é"
    assert terminal_safe(raw) == "a\\u202eb\\u001b[31mc\\u200bd\\udb40\\udc41e\\u000d\\u2028f\tg\nh é"
    assert json.loads(terminal_safe(json.dumps({"k": raw}, ensure_ascii=False))) == {"k": raw}
    cli = Path(__import__("riskrank.cli").cli.__file__).parent
    direct = [f.name for f in cli.glob("*.py") if f.name != "common.py" and "click.echo" in f.read_text()]
    assert direct == [], direct
