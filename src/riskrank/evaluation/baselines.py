"""Reranking baselines beyond BM25 and dense: maximal marginal relevance (Carbonell and
Goldstein, 1998) on the dense top-M."""

from __future__ import annotations

import numpy as np


def mmr_rerank(query_emb: np.ndarray, tool_emb: np.ndarray, candidates: np.ndarray, mmr_lambda: float = 0.7) -> np.ndarray:
    """Greedy MMR over each row's candidates: pick argmax of
    ``lambda * cos(q, t) - (1 - lambda) * max_{s in S} cos(t, s)``. Returns [Q, M] tool indices."""
    q = np.atleast_2d(query_emb)
    out = np.empty_like(candidates)
    for i in range(q.shape[0]):
        cand = candidates[i]
        e = tool_emb[cand]
        rel = e @ q[i]
        sim = e @ e.T
        chosen = np.zeros(len(cand), dtype=bool)
        max_sim = np.full(len(cand), -np.inf, dtype=np.float32)
        for r in range(len(cand)):
            gain = mmr_lambda * rel - (1.0 - mmr_lambda) * np.where(np.isfinite(max_sim), max_sim, 0.0)
            gain[chosen] = -np.inf
            j = int(np.argmax(gain))
            out[i, r] = cand[j]
            chosen[j] = True
            max_sim = np.maximum(max_sim, sim[j])
    return out
