"""End to end on real data: the method beats its own encoder on UltraTool through the same
runner `riskrank evaluate` uses. The default suite runs a small cross-fitted subset; the full
protocol (1,000 queries, 3 seeds, 5 folds) and its targets are behind `-m slow`."""

from __future__ import annotations

import json

import pytest

from riskrank.datasets import Benchmark
from riskrank.evaluation.runner import run_evaluation
from riskrank.metrics import METRICS


def check_contract(res: dict, methods: list[str], n_queries: int, seeds: list[int]) -> None:
    assert {"dataset", "protocol", "encoder", "seeds", "splits", "timing"} <= set(res)
    assert res["dataset"] == "ultratool" and res["seeds"] == seeds
    assert set(res["splits"]) == {"test"}
    block = res["splits"]["test"]
    assert block["n_queries"] == n_queries
    assert list(block["methods"]) == methods
    for m in methods:
        assert set(block["methods"][m]) == set(METRICS)
        for v in block["methods"][m].values():
            assert set(v) == {"mean", "std"}
    json.dumps(res)  # serialisable as is


def test_core_beats_dense_on_an_ultratool_subset(ultratool, encoder, torch_single_thread):
    """The targets in a reduced configuration (the first 250 test queries, 2 folds, one seed),
    so the default suite checks them on every run: core NDCG@5 >= 1.6x dense; the rule
    filter's RVR@5 <= 0.5x and SRR@5 <= 0.35x dense at an NDCG@5 above dense. (Measured
    here: 2.96x; 0.43x, 0.18x at 2.55x.) Core's own RVR@5 target (<= 0.75x) holds on the full
    protocol only (`-m slow`): this subset is risk-heavy (dense RVR@5 0.39 vs 0.14 overall)."""
    qs = ultratool.splits["test"].subset(range(250))
    bench = Benchmark("ultratool", ultratool.registry, {"test": qs}, None, "2-fold cross-fitting over the first 250 test queries")
    methods = ["dense", "rel_only", "core", "core+graph+rule"]
    run = run_evaluation(bench, methods, seeds=[42], encoder=encoder, n_folds=2, progress=False)
    res = run.results_json()
    check_contract(res, methods, 250, [42])
    m = {k: {metric: v["mean"] for metric, v in vals.items()} for k, vals in res["splits"]["test"]["methods"].items()}
    dense = m["dense"]
    assert m["rel_only"]["ndcg@5"] > dense["ndcg@5"]
    assert m["core"]["ndcg@5"] >= 1.6 * dense["ndcg@5"], m
    # the risk term does its job: core exposes fewer risky tools than relevance-only
    assert m["core"]["rvr@5"] <= m["rel_only"]["rvr@5"]
    rule = m["core+graph+rule"]
    assert rule["rvr@5"] <= 0.5 * dense["rvr@5"] and rule["srr@5"] <= 0.35 * dense["srr@5"], m
    assert rule["ndcg@5"] > dense["ndcg@5"], m
    assert len(run.choices[42]) == 2  # one training run per fold


@pytest.mark.slow
def test_ultratool_targets_full_protocol(ultratool, encoder, torch_single_thread):
    """The targets, 3 seeds against dense in the same run: core NDCG@5 >= 1.6x dense and
    RVR@5 <= 0.75x dense."""
    methods = ["dense", "rel_only", "core"]
    run = run_evaluation(ultratool, methods, seeds=[42, 123, 777], encoder=encoder, progress=False)
    res = run.results_json()
    check_contract(res, methods, 1000, [42, 123, 777])
    m = res["splits"]["test"]["methods"]
    dense_nd, dense_rvr = m["dense"]["ndcg@5"]["mean"], m["dense"]["rvr@5"]["mean"]
    assert m["core"]["ndcg@5"]["mean"] >= 1.6 * dense_nd, m
    assert m["core"]["rvr@5"]["mean"] <= 0.75 * dense_rvr, m
    assert m["core"]["ndcg@5"]["std"] > 0 or m["core"]["rvr@5"]["std"] > 0  # seeds really differ
