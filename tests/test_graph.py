"""ToolGraph (Section 4.4, Appendix B): the sparse/factored build and smoothing are checked
against plain pair-loop constructions (tests/naive.py) on small random registries."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import naive
from riskrank.errors import RiskrankError
from riskrank.graph import (
    EDGE_TYPES,
    NORMALISATIONS,
    GraphConfig,
    ToolGraph,
    _max_pair_overlap,
    semantic_threshold_table,
)

SEEDS = st.integers(0, 2**32 - 1)


def random_registry(seed: int, n: int | None = None, d: int = 6):
    """A small registry with clustered embeddings (so semantic edges exist), a few training
    queries, risk levels 0..5 and sparse permissions."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 13)) if n is None else n
    centres = rng.normal(size=(max(1, n // 3), d))
    emb = centres[rng.integers(0, len(centres), n)] + rng.normal(scale=0.6, size=(n, d))
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    gold = [rng.choice(n, size=int(rng.integers(0, min(n, 4) + 1)), replace=False) for _ in range(12)]
    risk = rng.integers(0, 6, n)
    perms = rng.random((n, 5)) < 0.3
    return emb, gold, risk, perms


CONFIGS = [
    GraphConfig(),
    GraphConfig(edge_types=("co",)),
    GraphConfig(edge_types=("sem",)),
    GraphConfig(edge_types=("perm",)),
    GraphConfig(edge_types=("risk", "perm")),
    GraphConfig(edge_types=("co", "sem", "risk")),
    GraphConfig(min_cooccur=1, sem_threshold=0.3, risk_weight=0.5),
]


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, cfg=st.sampled_from(CONFIGS))
def test_build_matches_pair_loops(seed, cfg):
    emb, gold, risk, perms = random_registry(seed)
    g = ToolGraph.build(emb, gold, risk, perms, cfg, block_rows=int(seed % 4) + 1)
    np.testing.assert_allclose(g.weights_dense(), naive.graph_weights(emb, gold, risk, perms, cfg), atol=1e-6)
    W = g.weights_dense()
    np.testing.assert_allclose(g.degree, W.sum(axis=1), atol=1e-6)
    for norm in NORMALISATIONS:
        np.testing.assert_allclose(g.dense_adjacency(norm), naive.normalise(W, norm), atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, norm=st.sampled_from(NORMALISATIONS), alpha=st.sampled_from([0.02, 0.2, 0.5, 1.0]))
def test_smooth_full_pool_matches_naive(seed, norm, alpha):
    emb, gold, risk, perms = random_registry(seed)
    g = ToolGraph.build(emb, gold, risk, perms, GraphConfig(normalisation=norm))
    rng = np.random.default_rng(seed + 1)
    scores = rng.random((3, len(emb))).astype(np.float32)
    A = naive.normalise(naive.graph_weights(emb, gold, risk, perms, g.config), norm)
    expected = np.stack([naive.smooth(s.astype(np.float64), A, alpha) for s in scores])
    out = g.smooth(scores, alpha)
    assert out.dtype == np.float32 and out.shape == scores.shape
    np.testing.assert_allclose(out, expected, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, norm=st.sampled_from(NORMALISATIONS), alpha=st.sampled_from([0.02, 0.2, 1.0]))
def test_smooth_candidate_subgraph_matches_naive(seed, norm, alpha):
    """Appendix E.2: Â_q is the subgraph induced by each row's candidates, normalised there."""
    emb, gold, risk, perms = random_registry(seed, n=12)
    g = ToolGraph.build(emb, gold, risk, perms, GraphConfig(normalisation=norm))
    W = naive.graph_weights(emb, gold, risk, perms, g.config)
    rng = np.random.default_rng(seed + 2)
    m = int(rng.integers(1, 8))
    cand = np.stack([rng.choice(12, size=m, replace=False) for _ in range(4)])
    scores = rng.random(cand.shape).astype(np.float32)
    expected = np.stack([
        naive.smooth(s.astype(np.float64), naive.normalise(W[np.ix_(c, c)], norm), alpha)
        for s, c in zip(scores, cand, strict=True)
    ])
    np.testing.assert_allclose(g.smooth(scores, alpha, candidates=cand), expected, atol=1e-5)


def test_candidates_equal_to_full_pool_agree_with_full_path():
    emb, gold, risk, perms = random_registry(7, n=10)
    g = ToolGraph.build(emb, gold, risk, perms)
    rng = np.random.default_rng(0)
    scores = rng.random((2, 10)).astype(np.float32)
    perm = np.stack([rng.permutation(10) for _ in range(2)])
    sub = g.smooth(np.take_along_axis(scores, perm, 1), 0.3, candidates=perm)
    full = np.take_along_axis(g.smooth(scores, 0.3), perm, 1)
    np.testing.assert_allclose(sub, full, atol=1e-6)


def test_alpha_zero_returns_input_unchanged():
    emb, gold, risk, perms = random_registry(3, n=8)
    g = ToolGraph.build(emb, gold, risk, perms)
    scores = np.random.default_rng(0).random((2, 8)).astype(np.float32)
    out = g.smooth(scores, 0.0)
    np.testing.assert_array_equal(out, scores)
    assert out is not scores
    cand = np.array([[0, 3, 5], [1, 2, 7]])
    np.testing.assert_array_equal(g.smooth(scores[:, :3], 0.0, candidates=cand), scores[:, :3])


def test_one_dimensional_scores():
    emb, gold, risk, perms = random_registry(4, n=8)
    g = ToolGraph.build(emb, gold, risk, perms)
    s = np.linspace(0, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(g.smooth(s, 0.2), g.smooth(s[None], 0.2)[0])


def test_sym_normalisation_sinks_isolated_tools_row_keeps_them():
    """The reference trap: under D^-1/2 A D^-1/2 an isolated tool's score is scaled by
    (1 - alpha/2), so it falls below a connected tool with the same score whose neighbours
    score the same; "row" keeps both at their score."""
    emb = np.eye(3, dtype=np.float32)  # no semantic edges
    gold = [np.array([0, 1]), np.array([0, 1])]  # tools 0, 1 co-occur twice; tool 2 is alone
    risk = np.array([1, 1, 1])
    perms = np.zeros((3, 5), bool)
    s = np.array([[0.8, 0.8, 0.8]], dtype=np.float32)
    alpha = 0.2
    sym = ToolGraph.build(emb, gold, risk, perms, GraphConfig(normalisation="sym"))
    out = sym.smooth(s, alpha)[0]
    np.testing.assert_allclose(out[:2], 0.8, rtol=1e-6)
    np.testing.assert_allclose(out[2], (1 - alpha / 2) * 0.8, rtol=1e-6)
    assert out[2] < out[0]
    row = sym.smooth(s, alpha, normalisation="row")[0]
    np.testing.assert_allclose(row, 0.8, rtol=1e-6)
    assert sym.stats()["degree"]["isolated"] == 1


def test_normalising_maximum_counts_permission_only_pairs():
    # Tools 0,1: risky and co-occurring, no shared category (raw 0.1).
    # Tools 2,3: share all five categories and nothing else (raw 0.15): the largest pair.
    emb = np.eye(4, dtype=np.float32)
    gold = [np.array([0, 1])]
    risk = np.array([3, 4, 1, 1])
    perms = np.array([[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    cfg = GraphConfig(risk_weight=0.1)
    g = ToolGraph.build(emb, gold, risk, perms, cfg)
    assert g.max_raw == pytest.approx(0.15)
    W = g.weights_dense()
    assert W[2, 3] == pytest.approx(1.0) and W[0, 1] == pytest.approx(0.1 / 0.15)
    # Now the risky pair also shares four categories: 0.1 + 0.12 beats the permission-only pair.
    perms[0, :4] = perms[1, :4] = True
    g = ToolGraph.build(emb, gold, risk, perms, cfg)
    assert g.max_raw == pytest.approx(0.22)
    assert g.explicit.nnz == 2  # permission edges never become explicit entries


def test_max_pair_overlap_ignores_self_pairs():
    P = np.array([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
    assert _max_pair_overlap(P) == 1
    assert _max_pair_overlap(np.vstack([P, P[:1]])) == 5
    assert _max_pair_overlap(np.zeros((1, 5), bool)) == 0


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, cfg=st.sampled_from(CONFIGS))
def test_stats_match_pair_counts(seed, cfg):
    emb, gold, risk, perms = random_registry(seed)
    g = ToolGraph.build(emb, gold, risk, perms, cfg)
    n = len(emb)
    one = {t: GraphConfig(**{**cfg.__dict__, "edge_types": (t,)}) for t in EDGE_TYPES}
    stats = g.stats()
    for t in EDGE_TYPES:
        expected = 0
        if t in cfg.edge_types:
            Wt = naive.graph_weights(emb, gold, risk, perms, one[t])
            expected = int(np.count_nonzero(np.triu(Wt, 1)))
        assert stats["edges"][t] == expected, t
    W = g.weights_dense()
    assert stats["edges"]["total"] == np.count_nonzero(np.triu(W, 1))
    nb = np.count_nonzero(W, axis=1)
    assert stats["degree"]["isolated"] == int((nb == 0).sum())
    if n:
        assert stats["degree"]["max"] == pytest.approx(W.sum(1).max())
        assert stats["neighbours"]["mean"] == pytest.approx(nb.mean())


def test_permission_edges_stay_factored_at_scale():
    """One category shared by 20k tools is 2e8 pairs: counted and smoothed without them."""
    n = 20_000
    emb = np.zeros((n, 4), np.float32)
    emb[np.arange(n), np.arange(n) % 4] = 1.0
    perms = np.zeros((n, 5), bool)
    perms[:, 2] = True
    cfg = GraphConfig(edge_types=("perm",))
    g = ToolGraph.build(emb, [], np.ones(n, int), perms, cfg)
    assert g.explicit.nnz == 0
    assert g.stats()["edges"]["perm"] == n * (n - 1) // 2
    s = np.random.default_rng(0).random((2, n)).astype(np.float32)
    out = g.smooth(s, 0.5)
    mean_others = (s.sum(1, keepdims=True) - s) / (n - 1)  # row-normalised: mean of the rest
    np.testing.assert_allclose(out, 0.75 * s + 0.25 * mean_others, atol=1e-5)


def test_semantic_knn_caps_neighbours():
    emb, gold, risk, perms = random_registry(11, n=12)
    cfg = GraphConfig(edge_types=("sem",), sem_threshold=0.0, sem_knn=2)
    g = ToolGraph.build(emb, gold, risk, perms, cfg)
    sims = emb @ emb.T
    np.fill_diagonal(sims, -np.inf)
    picks = np.zeros((12, 12), bool)
    for i in range(12):
        for j in np.argsort(-sims[i])[:2]:
            picks[i, j] = sims[i, j] > 0.0
    W = g.weights_dense()
    np.testing.assert_array_equal(W > 0, picks | picks.T)
    full = ToolGraph.build(emb, gold, risk, perms, GraphConfig(edge_types=("sem",), sem_threshold=0.0))
    Wf = full.weights_dense() * full.max_raw
    np.testing.assert_allclose((W * g.max_raw)[W > 0], Wf[W > 0], rtol=1e-6)


def test_npz_round_trip(tmp_path):
    emb, gold, risk, perms = random_registry(5, n=10)
    g = ToolGraph.build(emb, gold, risk, perms, GraphConfig(normalisation="sym", edge_types=("co", "perm", "sem")))
    path = tmp_path / "sub" / "graph.npz"
    g.to_npz(path)
    assert os.listdir(path.parent) == ["graph.npz"]  # the temp file was renamed, not left behind
    h = ToolGraph.from_npz(path)
    assert h.config == g.config and h.stats() == g.stats()
    s = np.random.default_rng(0).random((2, 10)).astype(np.float32)
    np.testing.assert_array_equal(h.smooth(s, 0.2), g.smooth(s, 0.2))
    with np.load(path, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)


def test_from_npz_rejects_other_files(tmp_path):
    bad = tmp_path / "x.npz"
    np.savez(bad, a=np.zeros(3))
    with pytest.raises(RiskrankError):
        ToolGraph.from_npz(bad)


def test_semantic_threshold_table_exact_and_sampled():
    emb, *_ = random_registry(9, n=40, d=8)
    thresholds = (0.0, 0.5, 0.65, 0.9)
    table = semantic_threshold_table(emb, thresholds, block_rows=7)
    sims = (emb @ emb.T)[np.triu_indices(40, 1)]
    assert table["exact"] and table["n_pairs"] == 780
    for t in thresholds:
        assert table["counts"][t] == int((sims > t).sum())
    assert table["quantiles"][0.5] == pytest.approx(np.median(sims), abs=1e-6)
    sampled = semantic_threshold_table(emb, thresholds, max_exact_pairs=10, sample_pairs=50_000)
    assert not sampled["exact"]
    for t in thresholds:
        assert sampled["fractions"][t] == pytest.approx((sims > t).mean(), abs=0.02)
    assert ToolGraph.semantic_threshold_table(emb, thresholds, block_rows=7) == table


def test_threshold_and_blocks_do_not_change_semantic_edges():
    emb, gold, risk, perms = random_registry(2, n=12)
    a = ToolGraph.build(emb, gold, risk, perms, block_rows=1)
    b = ToolGraph.build(emb, gold, risk, perms, block_rows=5000)
    # Different block shapes may round the float32 dot products differently, nothing more.
    np.testing.assert_allclose(a.weights_dense(), b.weights_dense(), atol=1e-6)
    np.testing.assert_array_equal(a.weights_dense() > 0, b.weights_dense() > 0)


def test_input_validation():
    emb, gold, risk, perms = random_registry(1, n=5)
    with pytest.raises(RiskrankError, match="unit-norm"):
        ToolGraph.build(emb * 2, gold, risk, perms)
    with pytest.raises(RiskrankError):
        ToolGraph.build(emb, gold, risk[:4], perms)
    with pytest.raises(RiskrankError):
        ToolGraph.build(emb, [np.array([0, 9])], risk, perms)
    with pytest.raises(RiskrankError):
        GraphConfig(edge_types=("co", "bogus"))
    with pytest.raises(RiskrankError):
        GraphConfig(normalisation="laplacian")
    g = ToolGraph.build(emb, gold, risk, perms)
    s = np.zeros((1, 5), np.float32)
    with pytest.raises(RiskrankError):
        g.smooth(s[:, :4], 0.2)
    with pytest.raises(RiskrankError):
        g.smooth(s, 1.5)
    with pytest.raises(RiskrankError, match="distinct"):
        g.smooth(s[:, :3], 0.2, candidates=np.array([[0, 1, 1]]))
    with pytest.raises(RiskrankError):
        g.smooth(s[:, :3], 0.2, candidates=np.array([[0, 1, 7]]))
