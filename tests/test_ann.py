"""The approximate first stage: same interface and, searched exhaustively, the same answers
as exact dense search; high recall on clustered data at its defaults; neighbour pairs for the
ToolGraph equal to an all-pairs pass when every cell is compared."""

from __future__ import annotations

import numpy as np
import pytest

from riskrank.ann import KINDS, ANNRetriever, default_nlist, recall_at_k
from riskrank.errors import RiskrankError
from riskrank.first_stage import DenseRetriever


def clustered(seed: int, n: int, d: int = 32, n_centres: int = 60, noise: float = 0.5):
    """Unit vectors around random centres (embeddings have cluster structure; uniformly random
    high-dimensional vectors are all nearly orthogonal and no index can beat a scan on them)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_centres, d))
    x = centres[rng.integers(0, n_centres, n)] + noise * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    tools = clustered(0, 3000)
    queries = clustered(1, 40)
    return tools, queries


@pytest.fixture(scope="module")
def indexes(data):
    tools, _ = data
    return {kind: ANNRetriever(tools, kind=kind) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_recall_against_exact_search(data, indexes, kind):
    tools, queries = data
    exact, _ = DenseRetriever(tools).search(queries, 50)
    approx, _ = indexes[kind].search(queries, 50)
    assert recall_at_k(exact, approx) >= 0.9


@pytest.mark.parametrize("kind", KINDS)
def test_same_interface_as_dense_search(data, indexes, kind):
    tools, queries = data
    idx, scores = indexes[kind].search(queries, 20)
    ref_idx, ref_scores = DenseRetriever(tools).search(queries, 20)
    assert idx.shape == ref_idx.shape == (40, 20) and scores.shape == ref_scores.shape
    assert idx.dtype == ref_idx.dtype == np.int64 and scores.dtype == ref_scores.dtype == np.float32
    # scores are the true cosines of the returned tools, best first, each tool once
    np.testing.assert_allclose(scores, np.einsum("qd,qmd->qm", queries, tools[idx]), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all()
    assert all(len(set(row)) == 20 for row in idx.tolist())
    # a single query vector, like DenseRetriever
    one, _ = indexes[kind].search(queries[0], 20)
    assert one.shape == (1, 20)
    np.testing.assert_array_equal(one[0], idx[0])


def test_exhaustive_search_equals_exact(data):
    tools, queries = data
    ann = ANNRetriever(tools, kind="ivf", nlist=16)
    idx, scores = ann.search(queries, 30, nprobe=16)  # every cell: an exact scan
    ref_idx, ref_scores = DenseRetriever(tools).search(queries, 30)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-6)
    hnsw = ANNRetriever(tools[:300], kind="hnsw")
    idx, _ = hnsw.search(queries, 30, ef_search=300)  # a beam as wide as the registry
    np.testing.assert_array_equal(idx, DenseRetriever(tools[:300]).search(queries, 30)[0])


def test_ties_are_broken_by_tool_index():
    base = clustered(2, 50, d=8)
    tools = np.concatenate([base, base, base])  # every vector three times
    for kind in KINDS:
        ann = ANNRetriever(tools, kind=kind, nlist=1)
        idx, scores = ann.search(base[:5], 6, nprobe=1, ef_search=150)
        ref, _ = DenseRetriever(tools).search(base[:5], 6)
        np.testing.assert_array_equal(idx, ref)
        assert (idx[:, :3] % 50 == np.arange(5)[:, None]).all()
        np.testing.assert_allclose(scores[:, :3], 1.0, atol=1e-6)


def test_rows_the_index_cannot_fill_fall_back_to_exact(data):
    tools, queries = data
    ann = ANNRetriever(tools, kind="ivf", nlist=64)
    idx, _scores = ann.search(queries, 1000, nprobe=1)  # one cell holds far fewer than 1000
    assert idx.shape == (40, 1000)
    assert (idx >= 0).all() and all(len(set(r)) == 1000 for r in idx.tolist())
    np.testing.assert_array_equal(idx, DenseRetriever(tools).search(queries, 1000)[0])


def test_m_is_capped_and_validated(data):
    tools, queries = data
    ann = ANNRetriever(tools[:100], kind="ivf")
    idx, _ = ann.search(queries[:2], 500)
    assert idx.shape == (2, 100)
    with pytest.raises(RiskrankError):
        ann.search(queries[:2], 0)
    with pytest.raises(RiskrankError, match="dimension"):
        ann.search(queries[:2, :8], 5)
    with pytest.raises(RiskrankError, match="kind"):
        ANNRetriever(tools, kind="lsh")


def exact_pairs(tools, k, threshold):
    sims = tools @ tools.T
    np.fill_diagonal(sims, -np.inf)
    pairs = set()
    for i, row in enumerate(sims):
        cols = np.argsort(-row, kind="stable")[:k] if k else np.arange(len(row))
        pairs |= {(i, int(j)) for j in cols if row[j] > (-np.inf if threshold is None else threshold)}
    return pairs


@pytest.mark.parametrize(("k", "threshold"), [(5, None), (5, 0.6), (None, 0.7)])
def test_neighbours_with_every_cell_compared_are_exact(data, k, threshold):
    tools = data[0][:800]
    ann = ANNRetriever(tools, kind="ivf", nlist=8)
    r, c, v = ann.neighbours(k, threshold=threshold, probe=8)
    assert set(zip(r.tolist(), c.tolist(), strict=True)) == exact_pairs(tools, k, threshold)
    np.testing.assert_allclose(v, np.einsum("pd,pd->p", tools[r], tools[c]), atol=1e-6)


def test_neighbours_recall_at_default_probe_and_hnsw(data):
    tools = data[0]
    want = exact_pairs(tools, 8, 0.5)
    for kind in KINDS:
        r, c, _ = ANNRetriever(tools, kind=kind).neighbours(8, threshold=0.5)
        got = set(zip(r.tolist(), c.tolist(), strict=True))
        assert len(got & want) / len(want) >= 0.9, kind
        assert all(i != j for i, j in got)
    with pytest.raises(RiskrankError, match="give k"):
        ANNRetriever(tools[:200], kind="hnsw").neighbours(None, threshold=0.5)


def test_recall_at_k_and_default_nlist():
    assert recall_at_k(np.array([[1, 2, 3, 4]]), np.array([[4, 3, 9, 8]])) == 0.5
    assert recall_at_k(np.array([[1, 2], [5, 6]]), np.array([[2, 1], [7, 8]])) == 0.5
    assert default_nlist(1_000_000) == 1024 and default_nlist(100_000) == 256
    assert default_nlist(100) == 2 and default_nlist(10) == 1
