"""The dual head: factorised full-pool / candidate scoring equals running the heads on every
concatenated pair, for the paper head, the dense residual head (either penalty) and the
hybrid head; the paper head's parameter count; an untrained residual head is its first
stage's own ranking (the cosine, or the fusion)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import naive
from riskrank.errors import RiskrankError
from riskrank.first_stage import LEXICAL_FEATURES, RelevanceInputs, rank
from riskrank.heads import HeadScorer
from riskrank.training.modules import DualHead

pytestmark = pytest.mark.usefixtures("torch_single_thread")

#: The heads riskrank scores: the paper's, the dense residual head under either penalty, the
#: hybrid head (lexical features, riskrank's default).
VARIANTS = {
    "paper": {"design": "paper"},
    "residual": {"design": "residual"},
    "residual-p_risky": {"design": "residual", "penalty": "p_risky"},
    "hybrid": {"design": "residual", "lexical": LEXICAL_FEATURES, "penalty": "p_risky"},
}
DESIGNS = tuple(VARIANTS)


def unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def inputs_for(model: DualHead, Q: np.ndarray, T: np.ndarray, seed: int = 0) -> RelevanceInputs | None:
    """Random first-stage scores and sparse lexical features for a hybrid head (None else)."""
    if not model.lexical:
        return None
    rng = np.random.default_rng(seed)
    shape = (Q.shape[0], T.shape[0])
    x = tuple(np.where(rng.random(shape) < 0.3, rng.random(shape), 0).astype(np.float32) for _ in model.lexical)
    return RelevanceInputs(rng.random(shape).astype(np.float32), x)


def trained_ish(design: str, dim: int, seed: int, residual_weight: float = 0.7) -> DualHead:
    """Random weights everywhere (including the zero-initialised residual parts), as after
    some training."""
    torch.manual_seed(seed)
    model = DualHead(dim, hidden=16, rank=8, **VARIANTS[design])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("log_scale"):
                p.fill_(float(np.log(7.0)))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
        if design != "paper":
            model.relevance_head.residual_weight.fill_(residual_weight)
    return model.eval()


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_factorised_equals_naive_full_pool(design, lam):
    rng = np.random.default_rng(1)
    T, Q = unit(rng, 120, 24), unit(rng, 9, 24)
    model = trained_ish(design, 24, seed=3)
    inp = inputs_for(model, Q, T)
    scorer = HeadScorer(model, T)
    want = naive.head_scores(model, Q, T, lam, inp)
    np.testing.assert_allclose(scorer.scores(Q, lam, inputs=inp), want, atol=1e-5, rtol=0)
    # single query vector, and the first stage's cosine passed in
    one = inp.rows(slice(0, 1)) if inp is not None else None
    np.testing.assert_allclose(scorer.scores(Q[0], lam, inputs=one), want[:1], atol=1e-5, rtol=0)
    np.testing.assert_allclose(scorer.relevance(Q, cos=Q @ T.T, inputs=inp), scorer.relevance(Q, inputs=inp), atol=1e-6)
    assert scorer.space == ("logit" if model.penalty == "p_risky" else "probability")


@pytest.mark.parametrize("design", DESIGNS)
def test_factorised_equals_naive_on_candidates(design):
    rng = np.random.default_rng(2)
    T, Q = unit(rng, 150, 24), unit(rng, 7, 24)
    model = trained_ish(design, 24, seed=5)
    inp = inputs_for(model, Q, T, seed=1)
    scorer = HeadScorer(model, T)
    full = naive.head_scores(model, Q, T, 0.2, inp)
    cand = np.stack([rng.choice(150, size=30, replace=False) for _ in range(7)])
    cinp = inp.take(cand) if inp is not None else None
    got = scorer.scores(Q, 0.2, cand, inputs=cinp)
    assert got.shape == (7, 30)
    np.testing.assert_allclose(got, np.take_along_axis(full, cand, 1), atol=1e-5, rtol=0)
    np.testing.assert_allclose(scorer.risk(cand), scorer.f_risk[cand])
    cos = np.take_along_axis(Q @ T.T, cand, 1)
    np.testing.assert_allclose(scorer.relevance(Q, cand, cos=cos, inputs=cinp), scorer.relevance(Q, cand, inputs=cinp), atol=1e-6)


@pytest.mark.parametrize("design", DESIGNS)
def test_small_blocks_give_the_same_scores(design, monkeypatch):
    """Memory blocking over queries and tools must not change a single score."""
    rng = np.random.default_rng(3)
    T, Q = unit(rng, 64, 12), unit(rng, 5, 12)
    model = trained_ish(design, 12, seed=7)
    inp = inputs_for(model, Q, T, seed=2)
    big = HeadScorer(model, T)
    ref_full = big.scores(Q, 0.1, inputs=inp)
    cand = np.stack([rng.permutation(64)[:20] for _ in range(5)])
    cinp = inp.take(cand) if inp is not None else None
    ref_cand = big.scores(Q, 0.1, cand, inputs=cinp)
    monkeypatch.setattr(HeadScorer, "block_elems", 40)  # fewer than one query row at a time
    small = HeadScorer(model, T)
    np.testing.assert_allclose(small.scores(Q, 0.1, inputs=inp), ref_full, atol=1e-6)
    np.testing.assert_allclose(small.scores(Q, 0.1, cand, inputs=cinp), ref_cand, atol=1e-6)


def test_hybrid_head_needs_its_inputs():
    rng = np.random.default_rng(4)
    T, Q = unit(rng, 40, 8), unit(rng, 2, 8)
    scorer = HeadScorer(trained_ish("hybrid", 8, seed=1), T)
    with pytest.raises(RiskrankError, match="reads lexical evidence"):
        scorer.relevance(Q)
    with pytest.raises(RiskrankError, match="shape"):
        scorer.relevance(Q, inputs=inputs_for(scorer_model := trained_ish("hybrid", 8, seed=1), Q[:1], T))
    assert scorer_model.lexical == LEXICAL_FEATURES


def test_untrained_hybrid_head_ranks_like_its_fusion():
    """Epoch 0 of the hybrid head is its first stage: w, V and the MLP output start at zero,
    so the logit is scale * f0 + bias whatever the lexical features say."""
    rng = np.random.default_rng(8)
    T, Q = unit(rng, 200, 16), unit(rng, 5, 16)
    torch.manual_seed(0)
    model = DualHead(16, "residual", lexical=LEXICAL_FEATURES, penalty="p_risky")
    inp = inputs_for(model, Q, T, seed=3)
    scorer = HeadScorer(model, T)
    z = scorer.logits(Q, inputs=inp)
    np.testing.assert_allclose(z, scorer.scale * inp.f0 + scorer.bias, atol=1e-5)
    np.testing.assert_array_equal(rank(z), rank(inp.f0))


def test_penalties_differ_in_what_lambda_multiplies():
    rng = np.random.default_rng(9)
    T, Q = unit(rng, 30, 8), unit(rng, 3, 8)
    m = trained_ish("residual-p_risky", 8, seed=4)
    sc = HeadScorer(m, T)
    with torch.no_grad():
        t = torch.from_numpy(T)
        np.testing.assert_allclose(sc.f_risk, m.penalty_head(t).numpy(), atol=1e-6)
        np.testing.assert_allclose(sc.level_score, m.risk_head(t).numpy(), atol=1e-6)
    np.testing.assert_allclose(sc.scores(Q, 2.0), sc.logits(Q) - 2.0 * sc.f_risk, atol=1e-5)
    p = HeadScorer(trained_ish("residual", 8, seed=4), T)
    np.testing.assert_array_equal(p.f_risk, p.level_score)
    np.testing.assert_allclose(p.scores(Q, 0.5), p.relevance(Q) - 0.5 * p.f_risk, atol=1e-6)


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
    with pytest.raises(ValueError, match="paper design"):
        DualHead(dim, "paper", penalty="p_risky")


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
