"""Metrics (docs/results-contract.md): hand-worked examples for each, NDCG@5 and MRR cross-checked against
ranx on random rankings, and sanity checks of the paired test and bootstrap intervals."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from riskrank.metrics import (
    METRICS,
    bootstrap_ci,
    evaluate,
    max_gold_risk,
    mean_metrics,
    mrr,
    ndcg_at_k,
    needrisk_hit_at_k,
    paired_test,
    query_subsets,
    recall_at_k,
    rvr_at_k,
    safe_rvr_at_k,
    sndcg_at_k,
    srr_at_k,
    success_at_k,
    tool_query_counts,
)

L2 = math.log2
# Ten tools; levels by index (0 = never used as unknown here).
RISK = np.array([1, 4, 1, 3, 5, 2, 1, 3, 1, 2])
RANK = np.array([[3, 1, 4, 0, 2, 5, 6, 7, 8, 9]])


def g(*idx):
    return [np.array(idx, dtype=np.int64)]


# -- NDCG, MRR ------------------------------------------------------------------------------
def test_ndcg_hand_worked():
    # gold {1, 2} at ranks 2 and 5
    expected = (1 / L2(3) + 1 / L2(6)) / (1 + 1 / L2(3))
    assert ndcg_at_k(RANK, g(1, 2))[0] == pytest.approx(expected)
    assert ndcg_at_k(RANK, g(3))[0] == pytest.approx(1.0)
    assert ndcg_at_k(RANK, g(9))[0] == 0.0  # outside the top-5
    # IDCG over min(k, |gold|): six gold tools, the top-5 all gold -> 1
    assert ndcg_at_k(RANK, g(3, 1, 4, 0, 2, 9))[0] == pytest.approx(1.0)
    assert ndcg_at_k(RANK, g(0))[0] == pytest.approx(1 / L2(5))


def test_ndcg_k_and_short_lists():
    assert ndcg_at_k(RANK, g(1), k=1)[0] == 0.0
    assert ndcg_at_k(RANK, g(3), k=1)[0] == 1.0
    short = np.array([[2, 1]])
    assert ndcg_at_k(short, g(1, 7))[0] == pytest.approx((1 / L2(3)) / (1 + 1 / L2(3)))


def test_mrr_hand_worked():
    assert mrr(RANK, g(1, 2))[0] == pytest.approx(0.5)
    assert mrr(RANK, g(9))[0] == pytest.approx(0.1)  # over the whole list, not the top-5
    assert mrr(RANK[:, :5], g(9))[0] == 0.0
    assert mrr(RANK, g(3))[0] == 1.0


# -- safety-adjusted and exposure metrics ---------------------------------------------------
def test_sndcg_hand_worked():
    # gold {1 (L4, severe), 2 (L1)}: tool 1 gets no gain; IDCG over the one safe gold tool.
    assert sndcg_at_k(RANK, g(1, 2), RISK)[0] == pytest.approx(1 / L2(6))
    # gold {3 (L3), 2 (L1)}: L3 is not severe -> plain NDCG
    assert sndcg_at_k(RANK, g(3, 2), RISK)[0] == pytest.approx(ndcg_at_k(RANK, g(3, 2))[0])
    # all gold severe -> 0 even when ranked first
    assert sndcg_at_k(RANK, g(1, 4), RISK)[0] == 0.0
    assert sndcg_at_k(np.array([[1, 4, 0]]), g(1, 4), RISK)[0] == 0.0


def test_rvr_srr_hand_worked():
    # top-5 = tools 3, 1, 4, 0, 2 with levels 3, 4, 5, 1, 1
    assert rvr_at_k(RANK, RISK)[0] == pytest.approx(3 / 5)
    assert srr_at_k(RANK, RISK)[0] == pytest.approx(2 / 5)
    assert rvr_at_k(RANK, RISK, k=1)[0] == 1.0
    assert srr_at_k(RANK, RISK, k=1)[0] == 0.0
    safe = np.array([[0, 2, 6, 8, 5, 9, 1]])
    assert rvr_at_k(safe, RISK)[0] == 0.0 and srr_at_k(safe, RISK)[0] == 0.0


def test_safe_rvr_hand_worked():
    rankings = np.vstack([RANK, RANK, RANK])
    gold = [np.array([0, 2]), np.array([3]), np.array([5, 6])]  # safe, risky, safe
    out = safe_rvr_at_k(rankings, gold, RISK)
    assert out[0] == pytest.approx(0.6) and out[2] == pytest.approx(0.6)
    assert np.isnan(out[1])  # off the subset
    assert mean_metrics({"safe_rvr@5": out})["safe_rvr@5"] == pytest.approx(0.6)


def test_needrisk_hit_hand_worked():
    rankings = np.vstack([RANK, RANK, RANK, RANK])
    gold = [
        np.array([1, 2]),  # needs L4 tool 1, ranked 2nd -> hit
        np.array([7, 0]),  # needs L3 tool 7, ranked 8th -> miss (tool 0 present does not count)
        np.array([0, 2]),  # no risky gold -> NaN
        np.array([9, 4]),  # needs tools 4 (L5, ranked 3rd) -> hit
    ]
    out = needrisk_hit_at_k(rankings, gold, RISK)
    assert out[0] == 1.0 and out[1] == 0.0 and np.isnan(out[2]) and out[3] == 1.0


def test_recall_and_success():
    assert recall_at_k(RANK, g(1, 2))[0] == 1.0
    assert recall_at_k(RANK, g(1, 9))[0] == 0.5
    assert success_at_k(RANK, g(1, 2))[0] == 1.0
    assert success_at_k(RANK, g(1, 9))[0] == 0.0
    assert recall_at_k(RANK, g(8, 9))[0] == 0.0


def test_evaluate_returns_every_contract_metric():
    rankings = np.vstack([RANK, RANK[:, ::-1]])
    gold = [np.array([1, 2]), np.array([0])]
    out = evaluate(rankings, gold, RISK)
    assert tuple(out) == METRICS
    assert all(v.shape == (2,) for v in out.values())
    assert out["ndcg@5"][0] == pytest.approx(ndcg_at_k(RANK, g(1, 2))[0])
    means = mean_metrics(out)
    assert means["mrr"] == pytest.approx((0.5 + 1 / 7) / 2)
    assert math.isnan(mean_metrics({"x": np.array([np.nan, np.nan])})["x"])


def test_gold_count_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 rankings but 1 gold sets"):
        ndcg_at_k(np.vstack([RANK, RANK]), g(1))


# -- cross-check against ranx ------------------------------------------------------------------
_RANX = """
import json, sys
from ranx import Qrels, Run, evaluate
d = json.load(sys.stdin)
res = evaluate(Qrels(d["qrels"]), Run(d["run"]), ["ndcg@5", "mrr"], return_mean=False, make_comparable=True)
print(json.dumps({k: [float(x) for x in v] for k, v in res.items()}))
"""


@pytest.mark.skipif(importlib.util.find_spec("ranx") is None, reason="ranx (dev extra) is not installed")
def test_ndcg_and_mrr_agree_with_ranx():
    """ranx runs in a child process with numba's JIT off: the same code, interpreted, so a
    fresh environment does not spend a minute compiling kernels for 60 queries."""
    rng = np.random.default_rng(7)
    n_q, n_t = 60, 40
    rankings = np.stack([rng.permutation(n_t) for _ in range(n_q)])
    gold = [rng.choice(n_t, size=int(rng.integers(1, 7)), replace=False) for _ in range(n_q)]
    qids = [f"q{i:03d}" for i in range(n_q)]
    qrels = {q: {f"d{t}": 1 for t in gl} for q, gl in zip(qids, gold, strict=True)}
    run = {q: {f"d{t}": float(n_t - pos) for pos, t in enumerate(r)} for q, r in zip(qids, rankings, strict=True)}
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    proc = subprocess.run([sys.executable, "-c", _RANX], input=json.dumps({"qrels": qrels, "run": run}),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ref = json.loads(proc.stdout.strip().splitlines()[-1])
    # ranx sorts query ids; ours are zero-padded so the order is the same
    np.testing.assert_allclose(ndcg_at_k(rankings, gold), ref["ndcg@5"], atol=1e-9)
    np.testing.assert_allclose(mrr(rankings, gold), ref["mrr"], atol=1e-9)


# -- subsets --------------------------------------------------------------------------------------
def test_query_subsets():
    gold = [np.array([0, 2]), np.array([3]), np.array([5, 1]), np.array([6])]
    counts = np.array([10, 1, 3, 0, 0, 2, 6, 0, 0, 0])
    sub = query_subsets(gold, RISK, counts)
    assert sub["high_risk"].tolist() == [False, True, True, False]
    assert sub["low_risk"].tolist() == [True, False, False, True]
    # long tail: every gold tool in <= 5 training queries
    assert sub["long_tail"].tolist() == [False, True, True, False]
    assert query_subsets(gold, RISK, counts, long_tail_max=6)["long_tail"].tolist() == [False, True, True, True]
    # per-query counts (cross-fitting: each query's own training folds)
    per_q = [counts, counts, counts, np.zeros(10, dtype=int)]
    assert query_subsets(gold, RISK, per_q)["long_tail"].tolist() == [False, True, True, True]
    assert "long_tail" not in query_subsets(gold, RISK)
    assert max_gold_risk(gold, RISK).tolist() == [1, 3, 4, 1]


def test_tool_query_counts():
    counts = tool_query_counts([np.array([0, 2]), np.array([2]), np.array([2, 2, 3])], 5)
    assert counts.tolist() == [1, 0, 3, 1, 0]


# -- uncertainty --------------------------------------------------------------------------------
def test_paired_test_identical_inputs():
    a = np.random.default_rng(0).random(200)
    res = paired_test(a, a.copy(), n_resamples=2000)
    assert res["diff"] == 0.0 and res["ci_low"] == 0.0 and res["ci_high"] == 0.0
    assert res["p_value"] == pytest.approx(1.0) and res["n"] == 200


def test_paired_test_clear_shift():
    rng = np.random.default_rng(1)
    b = rng.random(200)
    a = b + 0.1 + rng.normal(scale=0.05, size=200)
    res = paired_test(a, b, n_resamples=2000)
    assert res["diff"] == pytest.approx(0.1, abs=0.02)
    assert res["ci_low"] > 0 and res["ci_high"] > res["ci_low"]
    assert res["p_value"] < 0.01
    rev = paired_test(b, a, n_resamples=2000)
    assert rev["diff"] == pytest.approx(-res["diff"]) and rev["ci_high"] < 0


def test_paired_test_drops_nan_pairs_and_is_seeded():
    a = np.array([0.1, np.nan, 0.5, 0.7, 0.2])
    b = np.array([0.0, 0.3, np.nan, 0.6, 0.1])
    res = paired_test(a, b, n_resamples=500)
    assert res["n"] == 3 and res["diff"] == pytest.approx(0.1)
    assert paired_test(a, b, n_resamples=500) == res
    assert math.isnan(paired_test(np.array([np.nan]), np.array([1.0]))["diff"])


def test_bootstrap_ci():
    v = np.random.default_rng(2).random(300)
    lo, hi = bootstrap_ci(v, n_resamples=2000)
    assert lo < v.mean() < hi and hi - lo < 0.15
    assert bootstrap_ci(np.full(10, 0.3), n_resamples=200) == pytest.approx((0.3, 0.3))
    assert bootstrap_ci(np.array([0.2, np.nan, 0.4]), n_resamples=500)[0] >= 0.2
    assert all(math.isnan(x) for x in bootstrap_ci(np.array([np.nan])))
    lo90, hi90 = bootstrap_ci(v, n_resamples=2000, level=0.9)
    assert lo <= lo90 and hi90 <= hi


@pytest.mark.parametrize(("ranking", "gold", "risk", "says"), [
    ([[0, -1]], [[1]], [1, 2], "tool index -1, outside the 2 tools"),
    ([[0, 1]], [[]], [1, 2], "gold[0] must be a non-empty list"),
    ([[0, 1]], [[5]], [1, 2], "gold[0] holds tool index 5"),
    ([[0, 1]], [[1]], [0, 9], "risk levels must be 0 (unknown) to 5"),
    ([[0, 1]], [[1], [0]], [1, 2], "1 rankings but 2 gold sets"),
    ([[0, 0, 0]], [[0]], [1, 2], "ranking[0] lists tool 0 more than once"),  # it lifted NDCG to 2.9, recall to 3
    ([[0, 1], [1, 1, 0]], [[0], [1]], [1, 2], "ranking[1] lists tool 1 more than once"),
    ([[0, 1], [2]], [[0], [1]], [1, 2], "tool index 2, outside the 2 tools"),
])
def test_evaluate_names_bad_inputs(ranking, gold, risk, says):
    from riskrank.errors import RiskrankError

    with pytest.raises(RiskrankError, match=re.escape(says)):
        evaluate(ranking, gold, risk)
    assert evaluate([[0, 1]], [[1]], [1, 2])["success@5"].tolist() == [1.0]  # plain lists are read


def test_rankings_of_different_lengths_score_the_missing_places_as_no_tool():
    """A rule filter's or a relevance floor's list can be shorter than k, or empty: scored as
    the places it left empty, not refused by numpy; a tool a plan calls twice is one gold tool."""
    risk = [1, 4, 1, 5, 2]
    ragged = evaluate([[0, 1, 3], [2], []], [[0], [2], [4]], risk)
    assert ragged["ndcg@5"].tolist() == [1.0, 1.0, 0.0] and ragged["mrr"].tolist() == [1.0, 1.0, 0.0]
    assert ragged["rvr@5"].tolist() == pytest.approx([0.4, 0.0, 0.0])  # two risky tools of five places
    alone = evaluate([[0, 1, 3]], [[0]], risk)  # the same query scored by itself: the same figures
    assert {k: v[0] for k, v in alone.items() if not np.isnan(v[0])} == {k: v[0] for k, v in ragged.items() if not np.isnan(v[0])}
    twice = evaluate([[0, 1, 2, 3, 4]], [[0, 0]], risk)
    assert twice["recall@5"].tolist() == [1.0] and twice["success@5"].tolist() == [1.0]
