"""`riskrank reproduce` machinery on the bundled demo (small, fast): the results contract,
every report section, the figures, significance, and --reuse rebuilding without retraining."""

from __future__ import annotations

import json

import pytest

from riskrank.evaluation.runner import Runner
from riskrank.experiments import reproduce as rep
from riskrank.metrics import METRICS


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory, encoder):
    out = tmp_path_factory.mktemp("rep")
    res = rep.reproduce("demo", out, seeds=[42, 123], cross_encoders=False, progress=False, echo=lambda *_: None,
                        encoder=encoder)
    return out, res


def test_results_contract(demo_out):
    out, _ = demo_out
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["dataset"] == "demo" and on_disk["seeds"] == [42, 123]
    assert {"protocol", "encoder", "splits", "timing"} <= set(on_disk)
    block = on_disk["splits"]["test"]
    assert block["n_queries"] == 56
    for m in ("bm25", "dense", "dense+rule", "risk_label_penalty", "mmr", "paper_rel_only", "paper_core", "rel_only",
              "core", "core+graph", "core+graph+rule", "core+graph+rule_pred", "top100/core", "top100/core+graph",
              "top100/core+graph+rule"):
        assert set(block["methods"][m]) == set(METRICS), m
        assert set(block["methods"][m]["ndcg@5"]) == {"mean", "std"}
    assert on_disk["timing"]["total_s"] > 0


def test_report_sections_and_figures(demo_out):
    out, res = demo_out
    text = (out / "report.md").read_text()
    for heading in ("Table 2", "Table 3", "Table 4", "Figure 3", "Table 5", "Table 6", "Appendix E.2", "Table 7",
                    "Table 8", "Significance", "Protocol", "Timing"):
        assert heading in text, heading
    for name in res["figures"]:
        assert (out / name).stat().st_size > 10_000
    sig = res["tables"]["significance"]["test"]
    assert sig["n_resamples"] == 10_000 and "core+graph+rule" in sig["tests"]


def test_reuse_rebuilds_without_training(demo_out, monkeypatch, encoder):
    out, res = demo_out
    monkeypatch.setattr(Runner, "run", lambda self: pytest.fail("--reuse must not retrain"))
    again = rep.reproduce("demo", out, seeds=[42, 123], cross_encoders=False, reuse=True, progress=False,
                          echo=lambda *_: None, encoder=encoder)
    assert again["splits"]["test"]["methods"]["core"] == res["splits"]["test"]["methods"]["core"]


def _tables_by_section(text: str) -> dict[tuple[str, str], list[list[str]]]:
    """(split, section heading) -> the rows (cells) of the first markdown table under it."""
    out: dict[tuple[str, str], list[list[str]]] = {}
    split = section = ""
    in_table = False
    for line in text.splitlines():
        if line.startswith("## Split `"):
            split = line.split("`")[1]
        elif line.startswith("### "):
            section = line[4:].strip()
        is_row = line.startswith("|")
        key = (split, section)
        if is_row and (key not in out or in_table):
            in_table = True
            if not set(line) <= set("|- "):  # skip the |---| separator
                out.setdefault(key, []).append([c.strip() for c in line.strip("|").split("|")])
        elif not is_row:
            in_table = False
    return out


def test_report_tables_equal_results_json(demo_out):
    """Every number of Tables 2-4 is the results.json value of that method and metric, as the
    report formats it (mean, and ± std for trained methods): a report whose tables are wrong,
    empty or stale fails here, not only one whose headings are missing."""
    from riskrank.experiments.common import HEADERS, f3

    out, _ = demo_out
    results = json.loads((out / "results.json").read_text())
    tables = _tables_by_section((out / "report.md").read_text())
    metric_of = {v: k for k, v in HEADERS.items()}
    checked = 0
    for (split, section), rows in tables.items():
        if not section.startswith(("Table 2", "Table 3", "Table 4")):
            continue
        header, body = rows[0], rows[1:]
        assert body, (split, section)
        for row in body:
            method = next(c.strip("`") for c in row if c.startswith("`"))
            vals = results["splits"][split]["methods"][method]
            for name, cell in zip(header, row, strict=True):
                metric = metric_of.get(name)
                if metric is None:
                    continue
                mean_txt, _, rest = cell.partition(" ± ")
                assert mean_txt.split(" (")[0] == f3(vals[metric]["mean"]), (section, method, metric, cell)
                if rest:
                    assert rest.split(" (")[0] == f3(vals[metric]["std"]), (section, method, metric, cell)
                checked += 1
    assert checked >= 100, checked


def test_context_report_on_the_demo(tmp_path, encoder, monkeypatch):
    from riskrank.experiments import context_report as ctx

    res = ctx.context_report("demo", tmp_path, seeds=[42], progress=False, echo=lambda *_: None, encoder=encoder)
    text = (tmp_path / "context.md").read_text()
    for heading in ("Table 5, extended", "Targets", "The need head", "Stress sets", "wider rule", "Table 7's rule",
                    "Chosen settings", "5-fold cross-validated", "maximise NeedRisk-Hit@5"):
        assert heading in text, heading
    split = res["context"]["splits"]["test"]
    assert set(split["table5"]) == set(ctx.METHODS)
    assert split["table5"]["core+graph+context"]["safe_rvr@5"]["ci95"][0] <= split["table5"]["core+graph+context"]["safe_rvr@5"]["mean"]
    assert {"core+graph+context", "core+graph+context+rule"} <= set(split["targets"])
    assert 0.0 <= split["need_auc"]["test"]["42"] <= 1.0
    assert (tmp_path / res["figures"][0]).stat().st_size > 10_000
    assert "need" in res["splits"]["test"]["methods"]["core+graph+context"]
    monkeypatch.setattr(Runner, "run", lambda self: pytest.fail("--reuse must not retrain"))
    again = ctx.context_report("demo", tmp_path, seeds=[42], reuse=True, progress=False, echo=lambda *_: None, encoder=encoder)
    assert again["context"]["splits"]["test"]["table5"] == split["table5"]
