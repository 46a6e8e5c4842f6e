"""Approximate first stage for large registries: a FAISS index behind the interface of
:meth:`riskrank.first_stage.DenseRetriever.search`.

Exact dense search reads every tool embedding for every query (1.5 GB per query at a million
384-d tools); an approximate index reads a few percent of them. Two index kinds:

- ``"ivf"`` (default): an inverted file (spherical k-means cells) over 8-bit scalar-quantised
  vectors, a quarter of the registry's size. A query scans the ``nprobe`` nearest cells, takes
  ``refine * m`` candidates by their 8-bit scores and re-scores those exactly from the float32
  embeddings. Quick to build, and :meth:`ANNRetriever.neighbours` finds the ToolGraph's
  semantic edges cell by cell with one matrix product per pair of nearby cells.
- ``"hnsw"``: a graph index (HNSW over the float32 vectors); no training and fewer distance
  computations per query, but slow to build on two cores (minutes per 10^5 tools).

Either way the returned scores are true cosines; only the candidate set is approximate. Rows
are ordered best first with ties broken by tool index, as in
:func:`riskrank.first_stage.rank`. :func:`recall_at_k` measures the candidate sets against
exact search; the scale benchmark reports it next to the speed-up.

``faiss`` is imported lazily: the rest of riskrank works without it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.extras import requires
from riskrank.first_stage import DEFAULT_TOP_M, DenseRetriever, top_m

KINDS = ("hnsw", "ivf")
# k-means training points per IVF cell (FAISS warns below 39).
_TRAIN_PER_CELL = 40


def default_nlist(n: int) -> int:
    """IVF cells: the power of two nearest sqrt(N), with at least 39 tools per cell."""
    nlist = 1 << max(0, round(math.log2(max(1.0, math.sqrt(n)))))
    return max(1, min(nlist, n // 39))


def _faiss() -> Any:
    with requires("ann", "the approximate first stage (--first-stage ann)"):
        import faiss
    return faiss


def _unit_rows(x: np.ndarray, what: str) -> np.ndarray:
    x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    if x.ndim != 2:
        raise RiskrankError(f"{what} must be [n, d], got shape {x.shape}")
    return x


class ANNRetriever:
    """Approximate top-m cosine search over unit-norm tool embeddings [N, d].

    >>> ann = ANNRetriever(tool_emb)                # IVF; kind="hnsw" for a graph index
    >>> idx, scores = ann.search(query_emb, 100)   # like DenseRetriever.search

    ``nlist``/``nprobe`` are the IVF cell count (default: the power of two nearest sqrt(N))
    and the cells probed per query, ``refine`` the candidates re-scored exactly per result;
    ``hnsw_m``/``ef_construction``/``ef_search`` are HNSW's graph degree and beam widths
    (``ef_search`` is raised to m when a search asks for more). More probes and wider beams
    trade speed for recall. The float32 embeddings are referenced, not copied: keep them
    unchanged while the index is in use.
    """

    def __init__(
        self,
        tool_emb: np.ndarray,
        *,
        kind: str = "ivf",
        nlist: int | None = None,
        nprobe: int = 32,
        refine: int = 2,
        hnsw_m: int = 32,
        ef_construction: int = 64,
        ef_search: int = 128,
        train_size: int | None = None,
        seed: int = 0,
    ) -> None:
        if kind not in KINDS:
            raise RiskrankError(f"unknown ANN index kind {kind!r}; choose from {KINDS}")
        if refine < 1:
            raise RiskrankError(f"refine must be >= 1, got {refine}")
        faiss = _faiss()
        emb = _unit_rows(tool_emb, "tool embeddings")
        n, d = emb.shape
        if n == 0:
            raise RiskrankError("cannot index an empty registry")
        self.kind, self.n_tools, self.dim = kind, n, d
        # A reference, not a copy (the caller holds these for the heads anyway): candidates
        # are re-scored, exact fallback rows and neighbour blocks are read from here.
        self.tool_emb = emb
        self.ef_search, self.nprobe, self.refine = int(ef_search), int(nprobe), int(refine)
        if kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, int(hnsw_m), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = int(ef_construction)
            index.add(emb)
            self.nlist = 0
        else:
            self.nlist = int(nlist or default_nlist(n))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFScalarQuantizer(
                quantizer, d, self.nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
            )
            rng = np.random.default_rng(seed)
            size = min(n, train_size or _TRAIN_PER_CELL * self.nlist)
            sample = emb if size >= n else emb[np.sort(rng.choice(n, size, replace=False))]
            index.cp.seed = seed
            index.cp.niter = 10
            index.cp.spherical = True  # unit vectors: centroids on the sphere, assignment by cosine
            index.train(sample)
            index.add(emb)
        self.index = index

    # ------------------------------------------------------------------ search

    def _raw_search(self, x: np.ndarray, k: int, *, ef: int | None = None, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        faiss = _faiss()
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(int(ef or self.ef_search), k))
        else:
            params = faiss.SearchParametersIVF(nprobe=min(self.nlist, int(nprobe or self.nprobe)))
        scores, idx = self.index.search(x, k, params=params)
        return idx, scores

    def search(
        self, query_emb: np.ndarray, m: int = DEFAULT_TOP_M, *, ef_search: int | None = None, nprobe: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate top-m: (indices [Q, m] int64, cosines [Q, m] float32), best first,
        ties by tool index. A row the index cannot fill (an IVF probe that reaches fewer
        than m tools) falls back to exact search, so every row holds m distinct tools."""
        q = _unit_rows(query_emb, "query embeddings")
        if q.shape[1] != self.dim:
            raise RiskrankError(f"query embeddings have dimension {q.shape[1]}, the index {self.dim}")
        m = min(int(m), self.n_tools)
        if m < 1:
            raise RiskrankError(f"m must be >= 1, got {m}")
        if self.kind == "hnsw":
            idx, scores = self._raw_search(q, m, ef=ef_search)
        else:
            idx, _ = self._raw_search(q, min(self.n_tools, self.refine * m), nprobe=nprobe)
            scores = self._rescore(q, idx)
        short = np.flatnonzero((idx[:, :m] < 0).any(axis=1) if self.kind == "hnsw" else (idx >= 0).sum(axis=1) < m)
        if short.size:
            fill_idx, fill_scores = self._exact(q[short], m)
            idx, scores = idx.copy(), scores.copy()
            idx[short, :m], scores[short, :m] = fill_idx, fill_scores
            idx[short, m:], scores[short, m:] = -1, -np.inf
        order = np.lexsort((np.where(idx < 0, self.n_tools, idx), -scores), axis=1)[:, :m]
        return np.take_along_axis(idx, order, 1).astype(np.int64), np.take_along_axis(scores, order, 1)

    def _rescore(self, q: np.ndarray, idx: np.ndarray, chunk: int = 64) -> np.ndarray:
        """Exact cosines of the candidates [Q, k] (-inf where the index found none)."""
        out = np.full(idx.shape, -np.inf, dtype=np.float32)
        for a in range(0, q.shape[0], chunk):
            block = idx[a : a + chunk]
            cand = self.tool_emb[np.maximum(block, 0)]  # [q, k, d]
            sims = np.matmul(cand, q[a : a + chunk, :, None])[..., 0]
            out[a : a + chunk] = np.where(block >= 0, sims, -np.inf)
        return out

    def _exact(self, q: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        return DenseRetriever(self.tool_emb).search(q, m)

    # ------------------------------------------------------------------ neighbours

    def neighbours(
        self, k: int | None, *, threshold: float | None = None, probe: int | None = None, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each indexed tool's approximate k most similar other tools (all of them above
        ``threshold`` when ``k`` is None), as directed pairs (rows [P], cols [P], cosines [P]),
        with ``cos > threshold`` when one is given and self matches dropped: the ToolGraph's
        semantic edges without an all-pairs pass.

        IVF compares each cell's tools with the tools of the ``probe`` cells whose centroids
        are nearest to that cell's (one matrix product per cell, so the whole registry costs
        N x probe x N / nlist dot products at BLAS speed); ``probe = nlist`` is exact.
        HNSW runs a k-nearest-neighbour search per tool and needs ``k``."""
        if k is not None and k < 1:
            raise RiskrankError(f"k must be >= 1 or None, got {k}")
        if k is None and threshold is None:
            raise RiskrankError("neighbours() needs k, threshold, or both")
        if self.kind == "ivf":
            return self._cell_neighbours(k, threshold, int(probe or self.graph_probe), progress)
        if k is None:
            raise RiskrankError("an HNSW index finds k nearest neighbours; give k (GraphConfig.sem_knn)")
        return self._search_neighbours(k, threshold, progress)

    #: Cells compared with each cell by :meth:`neighbours` (IVF). Semantic neighbours above
    #: a threshold are close: 4 cells found 95% of them at 10^5 tools and 98% at 10^6 in
    #: the scale benchmark.
    graph_probe = 4

    def _cells(self) -> list[np.ndarray]:
        """Each IVF cell's tool ids, from FAISS's inverted lists."""
        faiss = _faiss()
        inv = self.index.invlists
        return [
            faiss.rev_swig_ptr(inv.get_ids(c), inv.list_size(c)).astype(np.int64) if inv.list_size(c) else np.zeros(0, np.int64)
            for c in range(self.nlist)
        ]

    def _cell_neighbours(self, k: int | None, threshold: float | None, probe: int, progress: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = self._cells()
        emb = self.tool_emb
        cent = self.index.quantizer.reconstruct_n(0, self.nlist)
        probe = max(1, min(probe, self.nlist))
        sim = cent @ cent.T
        np.fill_diagonal(sim, np.inf)  # a cell always compares with itself
        near = top_m(sim, probe)
        rows_l, cols_l, vals_l = [], [], []
        for c in _maybe_progress(range(self.nlist), progress, "semantic neighbours"):
            own = ids[c]
            if own.size == 0:
                continue
            x = emb[own]
            blocks = []
            for j in near[c]:
                if ids[j].size == 0:
                    continue
                sims = x @ (x if j == c else emb[ids[j]]).T  # one BLAS product per pair of cells
                if j == c:
                    np.fill_diagonal(sims, -np.inf)  # same order on both sides: the tool itself
                blocks.append((j, sims))
            if threshold is None:  # plain k nearest: rank all candidates of the row
                sims = np.concatenate([b for _, b in blocks], axis=1)
                cand = np.concatenate([ids[j] for j, _ in blocks])
                kk = min(int(k), cand.size - 1)
                if kk < 1:
                    continue
                top = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
                val = np.take_along_axis(sims, top, axis=1)
                r, t = np.nonzero(val > -np.inf)
                r, col, v = r, cand[top[r, t]], val[r, t]
            else:  # threshold first: only the (few) pairs above it are ranked
                parts = []
                for j, sims in blocks:
                    r, t = np.divmod(np.flatnonzero(sims > threshold), sims.shape[1])
                    parts.append((r, ids[j][t], sims[r, t]))
                r = np.concatenate([p[0] for p in parts])
                col = np.concatenate([p[1] for p in parts])
                v = np.concatenate([p[2] for p in parts])
                if k is not None and r.size:
                    order = np.lexsort((-v, r))  # per row, most similar first
                    r, col, v = r[order], col[order], v[order]
                    start = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
                    within = np.arange(r.size) - np.repeat(start, np.diff(np.r_[start, r.size]))
                    keep = within < k
                    r, col, v = r[keep], col[keep], v[keep]
            rows_l.append(own[r])
            cols_l.append(col)
            vals_l.append(v)
        return _concat(rows_l, cols_l, vals_l)

    def _search_neighbours(self, k: int, threshold: float | None, progress: bool, block: int = 16384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = min(int(k), self.n_tools - 1)
        rows_l, cols_l, vals_l = [], [], []
        if k < 1:
            return _concat(rows_l, cols_l, vals_l)
        emb = self.tool_emb
        for start in _maybe_progress(range(0, self.n_tools, block), progress, "semantic neighbours"):
            stop = min(self.n_tools, start + block)
            # k + 1: the tool itself is (almost always) its own best match.
            idx, sims = self._raw_search(emb[start:stop], k + 1)
            keep = (idx >= 0) & (idx != np.arange(start, stop)[:, None])
            keep &= np.cumsum(keep, axis=1) <= k  # a row whose self match was missed keeps k
            if threshold is not None:
                keep &= sims > threshold
            r, c = np.nonzero(keep)
            rows_l.append(r + start)
            cols_l.append(idx[r, c])
            vals_l.append(sims[r, c])
        return _concat(rows_l, cols_l, vals_l)


def _concat(rows: list, cols: list, vals: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return (np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64),
            np.concatenate(vals).astype(np.float32))


def _maybe_progress(iterable: Any, enabled: bool, desc: str) -> Any:
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, desc=desc)


def recall_at_k(exact_idx: np.ndarray, approx_idx: np.ndarray, k: int | None = None) -> float:
    """Mean over queries of |approx top-k ∩ exact top-k| / k (the ANN literature's recall@k)."""
    exact_idx, approx_idx = np.atleast_2d(exact_idx), np.atleast_2d(approx_idx)
    k = int(k or exact_idx.shape[1])
    if exact_idx.shape[0] != approx_idx.shape[0]:
        raise RiskrankError("exact and approximate results must have the same number of queries")
    hits = [np.intersect1d(e[:k], a[:k]).size for e, a in zip(exact_idx, approx_idx, strict=True)]
    return float(np.mean(hits) / k) if hits else 1.0
