"""`riskrank reproduce` machinery on the bundled demo (small, fast): the results contract,
every report section, the figures, significance, and --reuse rebuilding without retraining."""

from __future__ import annotations

import json

import pytest

from riskrank.experiments import reproduce as rep
from riskrank.experiments.runner import Runner
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
