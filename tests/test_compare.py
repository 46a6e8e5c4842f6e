"""riskrank compare: two results files, figure by figure, against the seed spread."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from riskrank.cli import main
from riskrank.evaluation.compare import compare

COMMITTED = Path(__file__).resolve().parent.parent / "docs/reproduction/sealtools/results.json"


def test_a_file_against_itself_and_against_a_moved_figure(tmp_path):
    rows, notes = compare(COMMITTED, COMMITTED)
    assert rows and notes == [] and all(r.within and r.diff == 0 for r in rows)
    moved = json.loads(COMMITTED.read_text())
    cell = moved["splits"]["test_in"]["methods"]["core+graph+rule"]["ndcg@5"]
    cell["mean"] += 3 * max(cell["std"], 0.001)
    del moved["splits"]["test_in"]["methods"]["bm25"]
    (tmp_path / "after.json").write_text(json.dumps(moved))
    rows, notes = compare(COMMITTED, tmp_path / "after.json")
    outside = [r for r in rows if not r.within]
    assert [(r.method, r.metric) for r in outside] == [("core+graph+rule", "ndcg@5")]
    assert notes == ["test_in: only in one file: bm25"]
    res = CliRunner().invoke(main, ["compare", str(COMMITTED), str(tmp_path / "after.json")])
    assert res.exit_code == 0 and "1 outside the seed spread" in res.output and " NO" in res.output


def test_bad_files_are_one_line_errors(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    for path, why in ((tmp_path / "none.json", "no such results file"), (tmp_path / "x.json", "not a results file")):
        res = CliRunner().invoke(main, ["compare", str(path), str(COMMITTED)])
        assert res.exit_code != 0 and why in str(res.exception)


def test_a_metric_neither_file_holds_is_named_not_compared_as_nothing():
    """A typo in --metrics compared nothing and said "0 outside the seed spread", exit 0: a CI
    gate on that line passed. Now it is an error naming the metrics the files hold."""
    res = CliRunner().invoke(main, ["compare", str(COMMITTED), str(COMMITTED), "--metrics", "ndcg5"])
    assert res.exit_code != 0 and "'ndcg5' is in neither file" in str(res.exception) and "ndcg@5" in str(res.exception)
    ok = CliRunner().invoke(main, ["compare", str(COMMITTED), str(COMMITTED), "--metrics", "ndcg@5"])
    assert ok.exit_code == 0 and "0 outside the seed spread" in ok.output
