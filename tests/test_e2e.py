"""End to end on real data: the method beats its own encoder on UltraTool through the same
runner `riskrank evaluate` uses. The default suite runs a small cross-fitted subset; the full
protocol (1,000 queries, 3 seeds, 5 folds) and its targets are behind `-m slow`."""

from __future__ import annotations

import json

import pytest

from riskrank.datasets import Benchmark
from riskrank.experiments.runner import run_evaluation
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
    qs = ultratool.splits["test"].subset(range(250))
    bench = Benchmark("ultratool", ultratool.registry, {"test": qs}, None, "2-fold cross-fitting over the first 250 test queries")
    methods = ["dense", "rel_only", "core"]
    run = run_evaluation(bench, methods, seeds=[42], encoder=encoder, n_folds=2, progress=False)
    res = run.results_json()
    check_contract(res, methods, 250, [42])
    m = res["splits"]["test"]["methods"]
    dense, rel, core = (m[k]["ndcg@5"]["mean"] for k in methods)
    assert core > dense and rel > dense
    # the risk term does its job: core exposes fewer risky tools than relevance-only
    assert m["core"]["rvr@5"]["mean"] <= m["rel_only"]["rvr@5"]["mean"]
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
