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
