"""The dual head: factorised full-pool / candidate scoring equals running the heads on every
concatenated pair; the paper head's parameter count; an untrained residual head is the
encoder's own ranking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import naive
from riskrank.first_stage import rank
from riskrank.heads import DESIGNS, DualHead, HeadScorer

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def trained_ish(design: str, dim: int, seed: int, residual_weight: float = 0.7) -> DualHead:
    """Random weights everywhere (including the zero-initialised residual parts), as after
    some training."""
    torch.manual_seed(seed)
    model = DualHead(dim, design, hidden=16, rank=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("log_scale"):
                p.fill_(float(np.log(7.0)))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
        if design == "residual":
            model.relevance_head.residual_weight.fill_(residual_weight)
    return model.eval()


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_factorised_equals_naive_full_pool(design, lam):
    rng = np.random.default_rng(1)
    T, Q = unit(rng, 120, 24), unit(rng, 9, 24)
    model = trained_ish(design, 24, seed=3)
    scorer = HeadScorer(model, T)
    np.testing.assert_allclose(scorer.scores(Q, lam), naive.head_scores(model, Q, T, lam), atol=1e-5, rtol=0)
    # single query vector, and the first stage's cosine passed in
    np.testing.assert_allclose(scorer.scores(Q[0], lam), naive.head_scores(model, Q[:1], T, lam), atol=1e-5, rtol=0)
    np.testing.assert_allclose(scorer.relevance(Q, cos=Q @ T.T), scorer.relevance(Q), atol=1e-6)


@pytest.mark.parametrize("design", DESIGNS)
def test_factorised_equals_naive_on_candidates(design):
    rng = np.random.default_rng(2)
    T, Q = unit(rng, 150, 24), unit(rng, 7, 24)
    model = trained_ish(design, 24, seed=5)
    scorer = HeadScorer(model, T)
    full = naive.head_scores(model, Q, T, 0.2)
    cand = np.stack([rng.choice(150, size=30, replace=False) for _ in range(7)])
    got = scorer.scores(Q, 0.2, cand)
    assert got.shape == (7, 30)
    np.testing.assert_allclose(got, np.take_along_axis(full, cand, 1), atol=1e-5, rtol=0)
    np.testing.assert_allclose(scorer.risk(cand), scorer.f_risk[cand])
    cos = np.take_along_axis(Q @ T.T, cand, 1)
    np.testing.assert_allclose(scorer.relevance(Q, cand, cos=cos), scorer.relevance(Q, cand), atol=1e-6)


@pytest.mark.parametrize("design", DESIGNS)
def test_small_blocks_give_the_same_scores(design, monkeypatch):
    """Memory blocking over queries and tools must not change a single score."""
    rng = np.random.default_rng(3)
    T, Q = unit(rng, 64, 12), unit(rng, 5, 12)
    model = trained_ish(design, 12, seed=7)
    big = HeadScorer(model, T)
    ref_full, ref_cand = big.scores(Q, 0.1), None
    cand = np.stack([rng.permutation(64)[:20] for _ in range(5)])
    ref_cand = big.scores(Q, 0.1, cand)
    monkeypatch.setattr(HeadScorer, "block_elems", 40)  # fewer than one query row at a time
    small = HeadScorer(model, T)
    np.testing.assert_allclose(small.scores(Q, 0.1), ref_full, atol=1e-6)
    np.testing.assert_allclose(small.scores(Q, 0.1, cand), ref_cand, atol=1e-6)


def test_risk_is_computed_once_per_registry():
    rng = np.random.default_rng(4)
    T = unit(rng, 30, 10)
    model = trained_ish("paper", 10, seed=1)
    scorer = HeadScorer(model, T)
    with torch.no_grad():
        expected = model.risk_head(torch.from_numpy(T)).numpy()
    np.testing.assert_allclose(scorer.f_risk, expected, atol=1e-6)
    assert scorer.f_risk.shape == (30,) and scorer.n_tools == 30
    assert ((scorer.f_risk > 0) & (scorer.f_risk < 1)).all()


@pytest.mark.parametrize(("dim", "expected"), [(384, 73_986), (1024, 196_866)])
def test_paper_head_parameter_count(dim, expected):
    assert DualHead(dim, "paper").n_parameters() == expected


def test_untrained_residual_head_ranks_like_cosine():
    rng = np.random.default_rng(5)
    T, Q = unit(rng, 300, 32), unit(rng, 12, 32)
    torch.manual_seed(0)
    model = DualHead(32, "residual")
    scorer = HeadScorer(model, T)
    cos = Q @ T.T
    np.testing.assert_array_equal(rank(scorer.relevance(Q)), rank(cos))
    np.testing.assert_array_equal(rank(scorer.logits(Q)), rank(cos))
    # the logit is an affine map of the cosine: scale * cos + bias
    z = scorer.logits(Q)
    np.testing.assert_allclose(z, scorer.scale * cos + scorer.bias, atol=1e-5)


def test_residual_weight_zero_is_the_encoder_ranking_even_after_training():
    rng = np.random.default_rng(6)
    T, Q = unit(rng, 200, 16), unit(rng, 6, 16)
    model = trained_ish("residual", 16, seed=2, residual_weight=0.0)
    np.testing.assert_array_equal(rank(HeadScorer(model, T).relevance(Q)), rank(Q @ T.T))


def test_unknown_design():
    with pytest.raises(ValueError, match="unknown head design 'mlp'"):
        DualHead(8, "mlp")
