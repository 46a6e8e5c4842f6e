"""First-stage retrieval over the full pool: BM25 and dense cosine, top-M candidates.

Scores are float32 arrays [Q, N] aligned with the registry. Rankings break ties by tool
index (stable sorts) so every run of every method is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from riskrank.risk import split_name

DEFAULT_TOP_M = 100
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


class BM25Retriever:
    """Okapi BM25 (bm25s, Lucene variant, k1=1.5, b=0.75) over tool texts."""

    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        self._bm25s = bm25s
        self.n = len(texts)
        self.model = bm25s.BM25(k1=k1, b=b)
        tokens = bm25s.tokenize([self._prep(t) for t in texts], stopwords="en", show_progress=False)
        self.model.index(tokens, show_progress=False)
        self.vocab = tokens.vocab

    @staticmethod
    def _prep(text: str) -> str:
        # Split camelCase / snake_case identifiers so "getWeather" matches "weather".
        return split_name(text)

    def score(self, queries: Sequence[str]) -> np.ndarray:
        """BM25 scores [Q, N]; a query with no known token scores 0 everywhere."""
        out = np.zeros((len(queries), self.n), dtype=np.float32)
        for i, q in enumerate(queries):
            toks = [t for t in _TOKEN.findall(self._prep(q).lower()) if t in self.vocab]
            if toks:
                out[i] = self.model.get_scores(toks)
        return out


class DenseRetriever:
    """Cosine similarity between unit-norm query and tool embeddings (one matmul)."""

    def __init__(self, tool_emb: np.ndarray) -> None:
        self.tool_emb = np.ascontiguousarray(tool_emb, dtype=np.float32)

    def score(self, query_emb: np.ndarray) -> np.ndarray:
        return np.asarray(np.atleast_2d(query_emb), dtype=np.float32) @ self.tool_emb.T

    def search(self, query_emb: np.ndarray, m: int = DEFAULT_TOP_M) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-m: (indices [Q, m], scores [Q, m]), best first."""
        scores = self.score(query_emb)
        idx = top_m(scores, m)
        return idx, np.take_along_axis(scores, idx, axis=1)


def rank(scores: np.ndarray) -> np.ndarray:
    """Full ranking [Q, N] best first, ties by tool index."""
    scores = np.atleast_2d(scores)
    return np.argsort(-scores, axis=1, kind="stable")


def top_m(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the m best tools per row, best first, equal to ``rank(scores)[:, :m]``
    (ties broken by tool index) without sorting the pool: a partial partition finds each
    row's m-th best value, and only the tools at or above it are sorted. At a million tools
    that is ~2 ms per row instead of ~160 ms for the full stable sort."""
    scores = np.atleast_2d(scores)
    n_q, n = scores.shape
    m = max(0, min(int(m), n))
    if m == 0:
        return np.zeros((n_q, 0), dtype=np.int64)
    if m >= n // 2:
        return rank(scores)[:, :m]
    out = np.empty((n_q, m), dtype=np.int64)
    for i in range(n_q):
        row = scores[i]
        cut = np.partition(row, n - m)[n - m]  # the m-th largest value
        # Every tool tied with the m-th score is kept, so index tie-breaking stays exact.
        cand = np.flatnonzero(row >= cut)
        if cand.size < m:  # NaN scores: let the full sort place them (last)
            out[i] = rank(row)[0, :m]
            continue
        order = np.lexsort((cand, -row[cand]))
        out[i] = cand[order[:m]]
    return out
