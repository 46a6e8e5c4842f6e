"""The reference implementation's way of doing each stage, for the scale benchmark's
"naive" column: no factorisation, dense matrices, no early stop.

- heads: the relevance MLP on every concatenated pair [e_q; e_t] (O(N * 2d * hidden) per
  query), the risk head on every tool (:func:`riskrank.heads.naive_scores`);
- graph: a dense N x N normalised adjacency (built once), smoothing as a dense product;
- rules: a full stable sort, then a per-position loop over the whole list, checking every
  constraint (pairwise dot products for redundancy) for every tool, and the list rebuilt in
  Python.
"""

from __future__ import annotations

import numpy as np

from riskrank.graph import ToolGraph
from riskrank.heads import naive_scores
from riskrank.rules import UNKNOWN_RISK_AS, RuleConfig

#: Largest registry whose dense float32 adjacency the naive graph may hold (2 GiB).
DENSE_GRAPH_MAX_N = 23_000
#: Largest registry for the naive heads ([N, 2d] float32 pairs per query: 300 MB at 100k).
PAIR_MLP_MAX_N = 200_000


def dense_adjacency(graph: ToolGraph, normalisation: str) -> np.ndarray:
    """Â as a dense float32 N x N matrix (the reference keeps it this way)."""
    return graph.dense_adjacency(normalisation).astype(np.float32)


def heads(model, query_emb: np.ndarray, tool_emb: np.ndarray, lam: float) -> np.ndarray:
    return naive_scores(model, query_emb, tool_emb, lam)


def smooth(scores: np.ndarray, adjacency: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 9 with a dense Â: s' = (s + (1 - alpha) s + alpha s Â^T) / 2."""
    h1 = (1.0 - alpha) * scores + alpha * (scores @ adjacency.T)
    return ((scores + h1) / 2.0).astype(np.float32)


def rule_filter(scores: np.ndarray, cfg: RuleConfig, risk: np.ndarray, perm: np.ndarray, emb: np.ndarray) -> list[int]:
    """Filtered ranking of one query's scores [N]: sort everything, then visit every position."""
    order = np.argsort(-scores, kind="stable").tolist()
    eff = np.where(risk == 0, UNKNOWN_RISK_AS, risk)
    S: list[int] = []
    D: list[int] = []
    n_risky = n_broad = 0
    for t in order:
        risky = bool(eff[t] >= cfg.risky_level)
        broad = bool(perm[t] >= cfg.broad_min_perms)
        ok = True
        if cfg.max_risky is not None and risky and n_risky >= cfg.max_risky:
            ok = False
        if cfg.max_broad is not None and broad and n_broad >= cfg.max_broad:
            ok = False
        if cfg.redundancy_threshold is not None:
            for s in S:
                if float(emb[t] @ emb[s]) > cfg.redundancy_threshold:
                    ok = False
        if ok and len(S) < cfg.k:
            S.append(t)
            n_risky += risky
            n_broad += broad
        else:
            D.append(t)
    top = S + D[: cfg.k - len(S)]
    placed = set(top)
    return top + [t for t in order if t not in placed]
