"""The late-interaction study's scorer: MaxSim over a token store, chunked, equals the naive
per-tool computation, and a rerank scores its candidates as the full scan does."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import late_interaction


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)


def test_maxsim_in_chunks_is_the_mean_of_each_query_tokens_best_cosine(monkeypatch):
    rng = np.random.default_rng(0)
    tools = [_unit(rng.normal(size=(int(n), 8))) for n in rng.integers(1, 6, size=11)]
    query = _unit(rng.normal(size=(4, 8)))
    naive = np.asarray([(query.astype(np.float32) @ t.astype(np.float32).T).max(axis=1).mean() for t in tools])
    monkeypatch.setattr(late_interaction, "CHUNK", 3)  # tools split over four chunks, one of two tools
    store = late_interaction.TokenStore.of(tools)
    assert np.allclose(store.maxsim(query), naive, atol=1e-5)
    picked = np.asarray([7, 0, 10])
    assert np.allclose(store.maxsim(query, picked), naive[picked], atol=1e-5)


def test_minmax_keeps_a_constant_row_at_zero():
    out = late_interaction.minmax(np.asarray([[1.0, 3.0, 2.0], [5.0, 5.0, 5.0]]))
    assert np.allclose(out, [[0.0, 1.0, 0.5], [0.0, 0.0, 0.0]])


def test_the_training_batch_maxsim_ignores_padding_and_equals_the_store():
    import torch

    rng = np.random.default_rng(1)
    queries = [_unit(rng.normal(size=(int(n), 8))) for n in (2, 5)]
    tools = [_unit(rng.normal(size=(int(n), 8))) for n in (1, 4, 3)]
    q, qm = late_interaction.padded(queries, cap=64)
    t, tm = late_interaction.padded(tools, cap=64)
    got = late_interaction.batch_maxsim(q, qm, t, tm).numpy()
    store = late_interaction.TokenStore.of(tools)
    want = np.stack([store.maxsim(x) for x in queries])
    assert got.shape == (2, 3) and np.allclose(got, want, atol=1e-3)
    assert late_interaction.padded(tools, cap=2)[0].shape == (3, 2, 8)  # longer texts cut at the cap
    assert isinstance(got, np.ndarray) and torch.is_tensor(q)


def test_the_shipping_rule_wants_a_higher_mean_and_no_registry_far_below_the_hybrid():
    def regs(fused: list[float]) -> dict:
        return {f"r{i}": {"methods": {"dense+bm25+maxsim, trained": {"ndcg@5": f}, "hybrid (today's)": {"ndcg@5": 0.5}}}
                for i, f in enumerate(fused)}

    assert late_interaction.ship_verdict(regs([0.52, 0.50]))["ships"]
    assert not late_interaction.ship_verdict(regs([0.60, 0.48]))["ships"]  # mean higher, one registry 4 % below
    assert not late_interaction.ship_verdict(regs([0.50, 0.49]))["ships"]
