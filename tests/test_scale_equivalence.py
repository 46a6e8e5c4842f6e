"""The fast paths the scale benchmark relies on, each against a plain, obviously-correct
version: blocked factorised heads vs the concatenated-pair MLP, partial top-m vs the full
stable sort, the rule filter from scores vs filtering the fully sorted list, and the ToolGraph
built from ANN neighbour pairs vs the all-pairs build."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import naive
from riskrank.ann import ANNRetriever
from riskrank.first_stage import LEXICAL_FEATURES, RelevanceInputs, rank, top_m
from riskrank.graph import NORMALISATIONS, GraphConfig, ToolGraph
from riskrank.heads import HeadScorer
from riskrank.rules import RuleConfig, RuleFilter
from riskrank.training.modules import DualHead

SEEDS = st.integers(0, 2**32 - 1)


def unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


VARIANTS = {
    "paper": {"design": "paper"},
    "residual": {"design": "residual"},
    "hybrid": {"design": "residual", "lexical": LEXICAL_FEATURES, "penalty": "p_risky"},
}
DESIGNS = tuple(VARIANTS)


def lexical_inputs(model: DualHead, n_q: int, n: int, seed: int = 0) -> RelevanceInputs | None:
    if not model.lexical:
        return None
    rng = np.random.default_rng(seed)
    x = tuple(np.where(rng.random((n_q, n)) < 0.2, rng.random((n_q, n)), 0).astype(np.float32) for _ in model.lexical)
    return RelevanceInputs(rng.random((n_q, n)).astype(np.float32), x)


def random_heads(design: str, dim: int, seed: int) -> DualHead:
    torch.manual_seed(seed)
    model = DualHead(dim, hidden=16, rank=8, **VARIANTS[design])
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3) if not name.endswith("log_scale") else p.fill_(2.0)
        if design != "paper":
            model.relevance_head.residual_weight.fill_(0.6)
    return model.eval()


# ---------------------------------------------------------------- heads


@pytest.mark.usefixtures("torch_single_thread")
@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("block_elems", [16, 16 * 7, 1 << 18])
def test_blocked_heads_equal_pair_mlp(design, block_elems, monkeypatch):
    """Many tool blocks (a ragged last one), several queries, cosine given or not."""
    monkeypatch.setattr(HeadScorer, "block_elems", block_elems)
    rng = np.random.default_rng(7)
    T, Q = unit(rng, 301, 20), unit(rng, 11, 20)
    model = random_heads(design, 20, 3)
    inp = lexical_inputs(model, 11, 301)
    scorer = HeadScorer(model, T)
    want = naive.head_scores(model, Q, T, 0.25, inp)
    np.testing.assert_allclose(scorer.scores(Q, 0.25, inputs=inp), want, atol=1e-5, rtol=0)
    cos = Q @ T.T
    before = cos.copy()
    rel = scorer.relevance_score(Q, cos=cos, inputs=inp)
    np.testing.assert_array_equal(cos, before)  # the first stage's matrix is read, not reused
    np.testing.assert_allclose(rel - 0.25 * scorer.f_risk, want, atol=1e-5, rtol=0)
    for i in (0, 5, 10):  # one query at a time (the latency path) = the batch
        one = inp.rows(slice(i, i + 1)) if inp is not None else None
        np.testing.assert_allclose(scorer.relevance_score(Q[i], cos=cos[i], inputs=one), rel[i : i + 1], atol=1e-5)
    cand = np.stack([rng.choice(301, size=40, replace=False) for _ in range(11)])
    cinp = inp.take(cand) if inp is not None else None
    np.testing.assert_allclose(scorer.scores(Q, 0.25, cand, inputs=cinp), np.take_along_axis(want, cand, 1), atol=1e-5, rtol=0)


def test_scratch_buffers_are_per_thread():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(8)
    T, Q = unit(rng, 500, 16), unit(rng, 24, 16)
    scorer = HeadScorer(random_heads("residual", 16, 1), T)
    want = scorer.relevance(Q)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: scorer.relevance(Q[i]), range(24)))
    np.testing.assert_allclose(np.concatenate(got), want, atol=1e-6)


# ---------------------------------------------------------------- top-m


@settings(max_examples=150, deadline=None)
@given(seed=SEEDS, n=st.integers(1, 400), m=st.integers(0, 450), levels=st.sampled_from([3, 50, None]))
def test_top_m_is_the_prefix_of_the_stable_sort(seed, n, m, levels):
    rng = np.random.default_rng(seed)
    scores = rng.random((3, n)).astype(np.float32)
    if levels:  # few distinct values: ties across the m-th position
        scores = np.floor(scores * levels).astype(np.float32)
    np.testing.assert_array_equal(top_m(scores, m), rank(scores)[:, : min(m, n)])


def test_top_m_with_nan_scores():
    scores = np.array([[0.5, np.nan, 0.9, 0.1, np.nan, 0.7, 0.2, 0.3]], dtype=np.float32)
    for m in range(1, 9):
        np.testing.assert_array_equal(top_m(scores, m), rank(scores)[:, :m])


# ---------------------------------------------------------------- rule filter


def rule_case(seed: int, n: int):
    rng = np.random.default_rng(seed)
    risk = rng.choice(6, size=n, p=[0.05, 0.3, 0.2, 0.25, 0.15, 0.05])
    perm = rng.choice(4, size=n, p=[0.5, 0.2, 0.2, 0.1])
    dirs = unit(rng, max(2, n // 4), 8)
    emb = dirs[rng.integers(0, len(dirs), n)]  # exact duplicates: redundancy fires
    scores = np.floor(rng.random((4, n)) * 40).astype(np.float32)  # ties
    return risk, perm, emb, scores


@settings(max_examples=80, deadline=None)
@given(seed=SEEDS, n=st.integers(1, 300), length=st.integers(1, 120), k=st.integers(1, 8))
def test_filter_scores_equals_filtering_the_full_ranking(seed, n, length, k):
    risk, perm, emb, scores = rule_case(seed, n)
    rf = RuleFilter(RuleConfig(k=k), risk, perm, emb)
    orders, results = rf.filter_scores(scores, length=length)
    full_orders, full_results = rf.filter_batch(rank(scores))
    np.testing.assert_array_equal(orders, full_orders[:, : min(length, n)])
    for got, want in zip(results, full_results, strict=True):
        assert (got.accepted, got.deferred, got.fallback) == (want.accepted, want.deferred, want.fallback)
        assert (got.redundant_with, got.unlabelled, got.n_scanned) == (want.redundant_with, want.unlabelled, want.n_scanned)
        np.testing.assert_array_equal(got.order, want.order[: min(length, n)])


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS)
def test_filter_scores_over_candidates(seed):
    rng = np.random.default_rng(seed)
    risk, perm, emb, _ = rule_case(seed, 200)
    cand = np.stack([rng.choice(200, size=60, replace=False) for _ in range(4)])
    scores = np.floor(rng.random((4, 60)) * 20).astype(np.float32)
    rf = RuleFilter(RuleConfig(), risk, perm, emb)
    orders, _ = rf.filter_scores(scores, cand, length=60)
    want, _ = rf.filter_batch(np.take_along_axis(cand, rank(scores), axis=1))
    np.testing.assert_array_equal(orders, want)


def test_filter_scores_grows_the_prefix_when_the_scan_needs_it():
    # The 500 best tools are all risky: the risk cap defers them and the scan must reach
    # the safe tools far below the first prefix.
    n = 2000
    risk = np.ones(n, dtype=int)
    risk[:500] = 4
    scores = -np.arange(n, dtype=np.float32)[None, :]
    rf = RuleFilter(RuleConfig(k=5, redundancy_threshold=None), risk, np.zeros(n, int))
    orders, (res,) = rf.filter_scores(scores, length=10)
    assert res.accepted == [0, 500, 501, 502, 503] and res.n_scanned == 504
    np.testing.assert_array_equal(orders[0], rf.filter_batch(rank(scores))[0][0, :10])


# ---------------------------------------------------------------- ToolGraph via ANN


def graph_registry(seed: int, n: int = 400, d: int = 16):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n // 8, d))
    emb = centres[rng.integers(0, len(centres), n)] + 0.45 * rng.normal(size=(n, d))
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    gold = [rng.choice(n, size=3, replace=False) for _ in range(150)]
    return emb, gold, rng.integers(0, 6, n), rng.random((n, 5)) < 0.2


@pytest.mark.parametrize("sem_knn", [None, 6])
def test_graph_from_exhaustive_ann_equals_all_pairs_build(sem_knn):
    emb, gold, risk, perms = graph_registry(0)
    cfg = GraphConfig(sem_threshold=0.6, sem_knn=sem_knn)
    exact = ToolGraph.build(emb, gold, risk, perms, cfg)
    ann = ANNRetriever(emb, kind="ivf", nlist=8)
    ann.graph_probe = 8  # compare every cell with every cell: no approximation left
    fast = ToolGraph.build(emb, gold, risk, perms, cfg, semantic_index=ann)
    assert exact.type_counts == fast.type_counts and exact.type_counts["sem"] > 0
    np.testing.assert_allclose(fast.weights_dense(), exact.weights_dense(), atol=1e-6)
    s = np.random.default_rng(1).random((3, len(emb))).astype(np.float32)
    for norm in NORMALISATIONS:
        np.testing.assert_allclose(fast.smooth(s, 0.3, normalisation=norm), exact.smooth(s, 0.3, normalisation=norm), atol=1e-6)


def test_graph_from_default_ann_keeps_most_semantic_edges():
    emb, _, _, _ = graph_registry(2, n=3000, d=32)
    n = len(emb)
    args = ([], np.ones(n, int), np.zeros((n, 5), bool))
    for knn in (8, None):
        cfg = GraphConfig(sem_threshold=0.6, sem_knn=knn, edge_types=("sem",))
        a = ToolGraph.build(emb, *args, cfg).explicit > 0
        b = ToolGraph.build(emb, *args, cfg, semantic_index=ANNRetriever(emb)).explicit > 0
        found = a.multiply(b).nnz
        assert found / a.nnz >= 0.9  # edge recall at the default probe
        # Threshold edges found are all true edges; a k-nearest list missing a true
        # neighbour may take the next one instead.
        assert found / b.nnz >= (1.0 if knn is None else 0.95)


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("workers", [2, 3])
def test_heads_split_across_worker_threads_are_unchanged(design, workers, monkeypatch):
    monkeypatch.setattr(HeadScorer, "block_elems", 16 * 5)  # 5 tools per block: ragged ranges
    monkeypatch.setattr(HeadScorer, "parallel_min_tools", 1)
    rng = np.random.default_rng(9)
    T, Q = unit(rng, 233, 12), unit(rng, 6, 12)
    model = random_heads(design, 12, 4)
    inp = lexical_inputs(model, 6, 233, seed=1)
    want = HeadScorer(model, T).relevance(Q, inputs=inp)
    monkeypatch.setattr(HeadScorer, "workers", workers)
    scorer = HeadScorer(model, T)
    np.testing.assert_array_equal(scorer.relevance(Q, inputs=inp), want)  # same blocks, same arithmetic
    one = inp.rows(slice(2, 3)) if inp is not None else None
    np.testing.assert_allclose(scorer.relevance(Q[2], inputs=one), want[2:3], atol=1e-6)  # BLAS: gemv vs gemm rounding
    np.testing.assert_allclose(scorer.scores(Q, 0.3, inputs=inp), naive.head_scores(model, Q, T, 0.3, inp), atol=1e-5, rtol=0)
