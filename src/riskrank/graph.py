"""ToolGraph: the four-edge-type tool graph and one-hop score smoothing (paper Section 4.4,
Appendix B).

Edges (Table 10), summed per pair (Eq. 7/15) and divided by the largest raw pair weight
(Eq. 8/16):

- co-occurrence   ``co_weight * c_ij / c_max`` if the pair co-occurs in >= ``min_cooccur``
  training queries;
- semantic        ``sem_weight * cos(d_i, d_j)`` if ``cos > sem_threshold``;
- permission      ``perm_weight * m_ij / 5`` for ``m_ij`` shared permission categories;
- risk co-occur.  ``risk_weight`` if both tools have ``r >= risky_level`` and co-occur in at
  least one training query.

Only training queries build edges, so a test query never leaks its own gold set into the graph.

Scale: the explicit part (co + sem + risk) is a sparse symmetric CSR matrix. Permission edges are
kept factored as ``c * (P P^T - diag)`` with ``P`` the [N, 5] category matrix: one category shared
by 100k tools would otherwise be 10^10 explicit edges. Degrees, the normalising maximum and edge
counts are all computed from the factored form (category-pattern group sizes), never from an
N x N matrix. Smoothing a query over the full pool costs O(nnz + 5 N).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import numpy as np
import scipy.sparse as sp

from riskrank.errors import RiskrankError
from riskrank.fileio import atomic_writer
from riskrank.risk import PERMISSION_CATEGORIES, RISKY_LEVEL

EDGE_TYPES = ("co", "sem", "perm", "risk")
NORMALISATIONS = ("row", "sym", "sym_self")
_N_CATEGORIES = len(PERMISSION_CATEGORIES)
_FORMAT = "riskrank.ToolGraph/1"
# Upper bound on float32 elements of one similarity block (256 MiB), so a million-tool
# registry is processed in small row blocks instead of 2048 x 10^6 at once.
_BLOCK_ELEMENTS = 1 << 26
_DEFAULT_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)


@dataclass(frozen=True)
class GraphConfig:
    """Edge definitions of Appendix B, Table 10, plus the choice of normalised adjacency.

    ``edge_types`` may be any subset of ``("co", "sem", "perm", "risk")`` (Table 4 ablation);
    disabled types contribute nothing, including to the normalising maximum.

    ``normalisation``:
      - ``"sym"``: D^-1/2 A D^-1/2, no self loops, as in the reference implementation. An
        isolated tool has an all-zero row, so Eq. 9 scales its score by (1 - alpha/2): tools
        without neighbours sink relative to connected ones with the same score.
      - ``"sym_self"``: D'^-1/2 (A + I) D'^-1/2 with D' = D + I (GCN style).
      - ``"row"`` (default): D^-1 A, a weighted mean of the neighbours' scores; a tool with no
        neighbour keeps its own score (its row of Â is the identity row), avoiding that trap.

    ``sem_knn`` caps each tool's semantic neighbours at its k most similar above the threshold
    (edge kept if either end picked the other), for registries where a low threshold would give
    a near-dense graph.
    """

    co_weight: float = 0.4
    min_cooccur: int = 2
    sem_weight: float = 0.3
    sem_threshold: float = 0.65
    perm_weight: float = 0.15
    risk_weight: float = 0.15
    risky_level: int = RISKY_LEVEL
    edge_types: tuple[str, ...] = field(default=EDGE_TYPES)
    normalisation: str = "row"
    sem_knn: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "edge_types", tuple(self.edge_types))
        unknown = set(self.edge_types) - set(EDGE_TYPES)
        if unknown:
            raise RiskrankError(f"unknown edge types {sorted(unknown)}; choose from {EDGE_TYPES}")
        _check_normalisation(self.normalisation)
        for name in ("co_weight", "sem_weight", "perm_weight", "risk_weight"):
            if getattr(self, name) < 0:
                raise RiskrankError(f"GraphConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.sem_threshold < 1.0:
            raise RiskrankError(f"sem_threshold must be in [0, 1), got {self.sem_threshold}")
        if self.min_cooccur < 1:
            raise RiskrankError(f"min_cooccur must be >= 1, got {self.min_cooccur}")
        if self.sem_knn is not None and self.sem_knn < 1:
            raise RiskrankError(f"sem_knn must be >= 1 or None, got {self.sem_knn}")


def _check_normalisation(name: str) -> None:
    if name not in NORMALISATIONS:
        raise RiskrankError(f"unknown normalisation {name!r}; choose from {NORMALISATIONS}")


def _block_rows(n_cols: int, block_rows: int | None) -> int:
    if block_rows is not None:
        return max(1, int(block_rows))
    return max(1, min(2048, _BLOCK_ELEMENTS // max(n_cols, 1)))


def _progress(iterable: Any, enabled: bool, desc: str) -> Any:
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress is a nicety; never a reason to fail
        return iterable
    return tqdm(iterable, desc=desc)


def _check_embeddings(tool_emb: np.ndarray) -> np.ndarray:
    emb = np.ascontiguousarray(tool_emb, dtype=np.float32)
    if emb.ndim != 2:
        raise RiskrankError(f"tool embeddings must be [N, d], got shape {emb.shape}")
    if emb.shape[0]:
        norms = np.linalg.norm(emb, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1.0) > 1e-3)
        if bad.size:
            raise RiskrankError(
                f"tool embeddings must be unit-norm (cosine = dot product); tool {bad[0]} has "
                f"norm {norms[bad[0]]:.4f} ({bad.size} such tools)"
            )
    return emb


def _pattern_codes(P: np.ndarray) -> np.ndarray:
    """Each tool's set of permission categories as a bit pattern (0..31)."""
    return (P.astype(np.int64) << np.arange(P.shape[1], dtype=np.int64)).sum(axis=1)


def _pattern_tables(P: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group sizes per category pattern and the shared-category count between patterns.

    Two tools' m_ij depends only on their patterns, so 32 x 32 tables give the permission
    edge count, neighbour counts and the largest m_ij exactly in O(N)."""
    n_pat = 1 << P.shape[1]
    codes = _pattern_codes(P)
    sizes = np.bincount(codes, minlength=n_pat).astype(np.int64)
    pats = np.arange(n_pat)
    both = pats[:, None] & pats[None, :]
    shared = np.array([bin(int(x)).count("1") for x in both.ravel()]).reshape(both.shape)
    return codes, sizes, shared


def _max_explicit_weight(raw: sp.csr_matrix, P: np.ndarray, perm_raw: float, chunk: int = 1 << 22) -> float:
    """max over explicit pairs of raw_ij + perm_raw * m_ij. m_ij from the pattern table of
    :func:`_pattern_tables`, a chunk of rows at a time: two [nnz, 5] float gathers would take
    gigabytes at a million tools."""
    if raw.nnz == 0:
        return 0.0
    codes, _, table = _pattern_tables(P)
    rows = np.repeat(np.arange(raw.shape[0], dtype=np.int32), np.diff(raw.indptr))
    best = -np.inf
    for a in range(0, raw.nnz, chunk):
        b = min(raw.nnz, a + chunk)
        shared = table[codes[rows[a:b]], codes[raw.indices[a:b]]]
        best = max(best, float((raw.data[a:b] + perm_raw * shared).max()))
    return best


def _max_pair_overlap(P: np.ndarray) -> int:
    """max over pairs i != j of m_ij, from pattern group sizes."""
    _, sizes, shared = _pattern_tables(P)
    present = sizes > 0
    ok = present[:, None] & present[None, :]
    np.fill_diagonal(ok, sizes >= 2)  # a pattern pairs with itself only if two tools share it
    return int(shared[ok].max()) if ok.any() else 0


class ToolGraph:
    """Undirected weighted tool graph (Section 4.4) with sparse explicit edges and factored
    permission edges; :meth:`smooth` applies Eq. 9 over the full pool or a candidate subgraph.

    Build with :meth:`ToolGraph.build`; the constructor takes already-normalised parts.
    Weights ``w_ij = A_explicit[i, j] + perm_coef * (P_i . P_j)`` for i != j.
    """

    def __init__(
        self,
        explicit: sp.csr_matrix,
        permissions: np.ndarray,
        perm_coef: float,
        config: GraphConfig,
        *,
        max_raw: float,
        type_counts: dict[str, int],
    ) -> None:
        A = sp.csr_matrix(explicit, dtype=np.float32)
        A.sum_duplicates()
        A.sort_indices()
        n = A.shape[0]
        P = np.ascontiguousarray(permissions, dtype=np.float32)
        if A.shape != (n, n) or P.shape != (n, _N_CATEGORIES):
            raise RiskrankError(
                f"inconsistent graph parts: explicit {A.shape}, permissions {P.shape}"
            )
        self.explicit = A
        self.permissions = P
        self.perm_coef = float(perm_coef)
        self.config = config
        self.max_raw = float(max_raw)
        self.type_counts = {k: int(v) for k, v in type_counts.items()}
        self._perm_self = (P * P).sum(axis=1)  # diag of P P^T; a tool is not its own neighbour
        # Degrees from the factored form: row sums of A + c (P P^T - diag(|P_i|)).
        deg_explicit = np.asarray(A.sum(axis=1), dtype=np.float64).ravel()
        deg_perm = P.astype(np.float64) @ P.sum(axis=0, dtype=np.float64) - self._perm_self
        self.degree = deg_explicit + self.perm_coef * deg_perm
        # Full-pool smoothing reads the permission factor through each category's member
        # list (O(tools with that category)), not through the dense [N, 5] matrix.
        self._perm_members = [np.flatnonzero(P[:, k]) for k in range(_N_CATEGORIES)]
        self._perm_any = np.flatnonzero(self._perm_self)
        self._full_scaling: dict[str, tuple[np.ndarray | None, np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        tool_emb: np.ndarray,
        train_gold: Sequence[np.ndarray],
        risk_levels: np.ndarray,
        permissions: np.ndarray,
        config: GraphConfig | None = None,
        progress: bool = False,
        *,
        block_rows: int | None = None,
        semantic_index: Any | None = None,
    ) -> ToolGraph:
        """Build the graph of Appendix B from description embeddings [N, d] (unit-norm),
        the gold tool sets of the TRAINING queries only, audited risk levels [N] (0 = unknown;
        unknown is not risky here: the graph smooths, the rule filter is the safety control)
        and the boolean permission matrix [N, 5].

        ``semantic_index`` (an :class:`riskrank.ann.ANNRetriever` over the same embeddings)
        finds the semantic edges approximately instead of comparing all N^2 / 2 pairs: the
        way to build a graph over 10^5-10^6 tools (with ``GraphConfig.sem_knn`` set, since an
        encoder's similarity threshold connects ever more pairs as a registry grows)."""
        config = config or GraphConfig()
        emb = _check_embeddings(tool_emb)
        n = emb.shape[0]
        risk = np.asarray(risk_levels)
        perms = np.asarray(permissions)
        if risk.shape != (n,):
            raise RiskrankError(f"risk_levels must have shape ({n},), got {risk.shape}")
        if perms.shape != (n, _N_CATEGORIES):
            raise RiskrankError(
                f"permissions must have shape ({n}, {_N_CATEGORIES}), got {perms.shape}"
            )
        perms = perms.astype(bool)
        types = set(config.edge_types)

        parts: dict[str, sp.csr_matrix] = {}
        if types & {"co", "risk"}:
            counts = _cooccurrence(train_gold, n)
            c_max = float(counts.max()) if counts.nnz else 0.0
            if "co" in types and c_max > 0:
                co = counts.multiply(counts >= config.min_cooccur).tocsr()
                parts["co"] = (co * (config.co_weight / c_max)).tocsr()
            if "risk" in types:
                risky = (risk >= config.risky_level).astype(np.float64)
                both = sp.diags(risky) @ (counts > 0).astype(np.float64) @ sp.diags(risky)
                parts["risk"] = (both * config.risk_weight).tocsr()
        if "sem" in types:
            if semantic_index is not None:
                cos = _semantic_edges_ann(semantic_index, n, config.sem_threshold, config.sem_knn, progress)
            else:
                cos = _semantic_edges(emb, config.sem_threshold, config.sem_knn, block_rows, progress)
            parts["sem"] = (cos * config.sem_weight).tocsr()

        type_counts = {}
        for name in ("co", "sem", "risk"):
            part = parts.get(name)
            if part is None:
                type_counts[name] = 0
            else:
                part.eliminate_zeros()
                type_counts[name] = part.nnz // 2
        raw = sp.csr_matrix((n, n), dtype=np.float64)
        for name in list(parts):
            raw = raw + parts.pop(name)  # drop each part once added: tens of millions of pairs at 10^6 tools
        raw = sp.csr_matrix(raw)
        raw.eliminate_zeros()

        P = perms.astype(np.float64) if "perm" in types else np.zeros((n, _N_CATEGORIES))
        perm_raw = config.perm_weight / _N_CATEGORIES  # per shared category (Table 10)
        # Eq. 8's maximum over all pairs, exactly: explicit pairs carry their permission part
        # too; a permission-only pair can be no heavier than the largest m_ij overall.
        max_explicit = _max_explicit_weight(raw, P > 0, perm_raw)
        max_perm = perm_raw * _max_pair_overlap(P) if perm_raw > 0 else 0.0
        max_raw = max(max_explicit, max_perm)
        scale = 1.0 / max_raw if max_raw > 0 else 0.0
        raw.data *= scale
        return cls(raw, P, perm_raw * scale, config, max_raw=max_raw, type_counts=type_counts)

    # ------------------------------------------------------------------ smoothing

    @property
    def n_tools(self) -> int:
        return self.explicit.shape[0]

    def smooth(
        self,
        scores: np.ndarray,
        alpha: float,
        candidates: np.ndarray | None = None,
        *,
        normalisation: str | None = None,
        chunk: int = 256,
    ) -> np.ndarray:
        """One-hop smoothing, Eq. 9: h1 = (1-alpha) s + alpha s Â^T, s' = (s + h1) / 2.

        ``scores`` is [Q, N] over the full pool, or [Q, M] with ``candidates`` [Q, M] giving
        each row's tool indices; then Â is the adjacency of the subgraph induced by that row's
        candidate set, normalised within it (Section 4.4; Appendix E.2). A 1-D score vector is
        treated as one query. ``normalisation`` overrides the config's (degrees do not depend
        on it, so sweeping it needs no rebuild). Returns float32 of the input's shape.
        """
        norm = normalisation or self.config.normalisation
        _check_normalisation(norm)
        if not 0.0 <= alpha <= 1.0:
            raise RiskrankError(f"alpha must be in [0, 1], got {alpha}")
        s = np.asarray(scores, dtype=np.float32)
        one_d = s.ndim == 1
        s2 = s[None, :] if one_d else s
        if s2.ndim != 2:
            raise RiskrankError(f"scores must be [Q, N] or [Q, M], got shape {s.shape}")
        if candidates is None:
            if s2.shape[1] != self.n_tools:
                raise RiskrankError(
                    f"scores have {s2.shape[1]} columns but the graph has {self.n_tools} tools; "
                    "pass candidates=[Q, M] for a candidate subgraph"
                )
            propagate = self._propagate_full
            cand2 = None
        else:
            cand = np.asarray(candidates)
            cand2 = cand[None, :] if cand.ndim == 1 else cand
            self._check_candidates(cand2, s2.shape)
            propagate = self._propagate_sub
        if alpha == 0.0:
            return np.array(s, dtype=np.float32, copy=True)
        out = np.empty(s2.shape, dtype=np.float32)
        for start in range(0, s2.shape[0], max(1, chunk)):
            rows = slice(start, start + max(1, chunk))
            block = s2[rows]
            prop = propagate(block, norm) if cand2 is None else propagate(block, cand2[rows], norm)
            # (h0 + h1) / 2 = (1 - alpha/2) s + (alpha/2) s Â^T
            prop *= np.float32(alpha / 2.0)
            prop += np.float32(1.0 - alpha / 2.0) * block
            out[rows] = prop
        return out[0] if one_d else out

    def _check_candidates(self, cand: np.ndarray, shape: tuple[int, ...]) -> None:
        if cand.shape != shape:
            raise RiskrankError(f"candidates shape {cand.shape} != scores shape {shape}")
        if not np.issubdtype(cand.dtype, np.integer):
            raise RiskrankError(f"candidates must be integer tool indices, got {cand.dtype}")
        if cand.size and (cand.min() < 0 or cand.max() >= self.n_tools):
            raise RiskrankError(f"candidate indices must be in [0, {self.n_tools})")
        srt = np.sort(cand, axis=1)
        if cand.shape[1] > 1 and (srt[:, 1:] == srt[:, :-1]).any():
            raise RiskrankError("each row of candidates must list distinct tools")

    def _perm_product(self, x: np.ndarray, P: np.ndarray, p_self: np.ndarray) -> np.ndarray:
        """x (P P^T - diag|P|) over the last axis, batched: the factored permission part."""
        if self.perm_coef == 0.0:
            return np.zeros_like(x)
        if P.ndim == 2:
            return self.perm_coef * ((x @ P) @ P.T - x * p_self)
        return self.perm_coef * (np.einsum("qk,qmk->qm", np.einsum("qm,qmk->qk", x, P), P) - x * p_self)

    def _normalise(
        self, x: np.ndarray, deg: np.ndarray, norm: str, adj_times: Any
    ) -> np.ndarray:
        """x Â^T for the chosen normalisation, given ``adj_times(y) = y A`` (A symmetric)."""
        if norm == "row":
            with np.errstate(divide="ignore", invalid="ignore"):
                out = adj_times(x) / deg
            return np.where(deg > 0, out, x).astype(np.float32)
        if norm == "sym":
            dinv = np.zeros_like(deg)
            np.divide(1.0, np.sqrt(deg), out=dinv, where=deg > 0)
            return (adj_times(x * dinv) * dinv).astype(np.float32)
        dinv = 1.0 / np.sqrt(deg + 1.0)  # sym_self: A + I, D + I
        y = x * dinv
        return ((adj_times(y) + y) * dinv).astype(np.float32)

    def _scaling(self, norm: str) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(pre, post, isolated) with x Â^T = post * ((pre * x) A [+ pre * x for sym_self]),
        cached per normalisation; ``isolated`` lists the tools whose row of Â is the identity
        (row normalisation, degree 0)."""
        if norm not in self._full_scaling:
            deg = self.degree
            none = np.zeros(0, dtype=np.int64)
            with np.errstate(divide="ignore"):
                if norm == "row":
                    post = np.where(deg > 0, 1.0 / deg, 0.0).astype(np.float32)
                    self._full_scaling[norm] = (None, post, np.flatnonzero(deg <= 0))
                elif norm == "sym":
                    d = np.where(deg > 0, 1.0 / np.sqrt(deg), 0.0).astype(np.float32)
                    self._full_scaling[norm] = (d, d, none)
                else:
                    d = (1.0 / np.sqrt(deg + 1.0)).astype(np.float32)
                    self._full_scaling[norm] = (d, d, none)
        return self._full_scaling[norm]

    def _propagate_full(self, s: np.ndarray, norm: str) -> np.ndarray:
        """s Â^T over the full pool: one sparse product for the explicit edges, the
        permission edges through per-category sums, then the normalisation's scaling."""
        pre, post, isolated = self._scaling(norm)
        y = np.ascontiguousarray(s if pre is None else s * pre, dtype=np.float32)
        out = np.ascontiguousarray((self.explicit @ y.T).T, dtype=np.float32)
        c = self.perm_coef
        if c != 0.0:
            P = self.permissions
            for k, members in enumerate(self._perm_members):
                if members.size:
                    w = P[members, k]
                    total = (y[:, members] @ w.astype(np.float64)) * c  # sum_j P_jk y_j, [Q]
                    out[:, members] += (total[:, None] * w).astype(np.float32)
            idx = self._perm_any  # minus the diagonal of P P^T: a tool is not its own neighbour
            out[:, idx] -= (c * self._perm_self[idx]) * y[:, idx]
        if norm == "sym_self":
            out += y
        out *= post
        if isolated.size:
            out[:, isolated] = s[:, isolated]
        return out

    def _propagate_sub(self, s: np.ndarray, cand: np.ndarray, norm: str) -> np.ndarray:
        """Subgraph induced by each row's candidates: explicit entries are found by looking up
        the candidates' CSR rows (O(sum of their degrees)), permissions stay factored."""
        q, m = cand.shape
        n = self.n_tools
        flat = cand.ravel().astype(np.int64)
        rows = self.explicit[flat]
        row_of = np.repeat(np.arange(q * m), np.diff(rows.indptr))
        keys = (np.arange(q, dtype=np.int64)[:, None] * n + cand).ravel()
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        look = (row_of // m) * n + rows.indices
        pos = np.minimum(np.searchsorted(sorted_keys, look), max(sorted_keys.size - 1, 0))
        hit = sorted_keys[pos] == look if sorted_keys.size else np.zeros(0, bool)
        src, dst, w = row_of[hit], order[pos[hit]], rows.data[hit].astype(np.float64)

        Pc = self.permissions[cand]  # [Q, M, 5]
        pc_self = self._perm_self[cand]
        deg = np.bincount(src, weights=w, minlength=q * m).reshape(q, m)
        deg = deg + self._perm_product(np.ones((q, m)), Pc, pc_self)

        def adj_times(y: np.ndarray) -> np.ndarray:
            yf = np.asarray(y, dtype=np.float64)
            explicit = np.bincount(src, weights=w * yf.ravel()[dst], minlength=q * m)
            return explicit.reshape(q, m) + self._perm_product(yf, Pc, pc_self)

        return self._normalise(s.astype(np.float64), deg, norm, adj_times)

    # ------------------------------------------------------------------ inspection

    def weights_dense(self) -> np.ndarray:
        """Normalised symmetric weights w_ij (Eq. 8) as a dense N x N float64 matrix, zero
        diagonal. For tests and small registries only."""
        n = self.n_tools
        if n * n > 10**8:
            raise RiskrankError(f"refusing a dense {n} x {n} matrix; use smooth() instead")
        P = self.permissions.astype(np.float64)
        W = self.explicit.toarray().astype(np.float64) + self.perm_coef * (P @ P.T)
        np.fill_diagonal(W, 0.0)
        return W

    def dense_adjacency(self, normalisation: str | None = None) -> np.ndarray:
        """The normalised adjacency Â (N x N, float64), built the plain way from the dense
        weights: the obviously-correct counterpart of :meth:`smooth` for tests."""
        norm = normalisation or self.config.normalisation
        _check_normalisation(norm)
        return normalise_dense(self.weights_dense(), norm)

    def stats(self) -> dict[str, Any]:
        """Edge counts per type, total edges, and degree statistics (Appendix B's graph
        statistics). Permission counts come from category-pattern group sizes, not N^2 pairs."""
        n = self.n_tools
        P = self.permissions > 0
        codes, sizes, shared = _pattern_tables(P)
        share = shared > 0
        perm_pairs = int((sizes @ share @ sizes - (np.diag(share) * sizes).sum()) // 2)
        perm_nb = (share @ sizes - np.diag(share))[codes]  # tools sharing a category, minus self
        coo = sp.triu(self.explicit, k=1).tocoo()
        overlap = (P[coo.row] & P[coo.col]).any(axis=1)
        explicit_only = int(coo.nnz - overlap.sum())
        both = np.bincount(coo.row[overlap], minlength=n) + np.bincount(coo.col[overlap], minlength=n)
        neighbours = np.diff(self.explicit.indptr) + perm_nb - both

        def summary(x: np.ndarray) -> dict[str, float]:
            if x.size == 0:
                return {"min": 0.0, "median": 0.0, "mean": 0.0, "max": 0.0}
            return {
                "min": float(x.min()),
                "median": float(np.median(x)),
                "mean": float(x.mean()),
                "max": float(x.max()),
            }

        return {
            "n_tools": n,
            "edges": {**self.type_counts, "perm": perm_pairs, "total": perm_pairs + explicit_only},
            "degree": {**summary(self.degree), "isolated": int((neighbours == 0).sum())},
            "neighbours": summary(neighbours.astype(np.float64)),
            "max_raw_weight": self.max_raw,
            "normalisation": self.config.normalisation,
            "edge_types": list(self.config.edge_types),
        }

    @staticmethod
    def semantic_threshold_table(
        tool_emb: np.ndarray, thresholds: Sequence[float] = _DEFAULT_THRESHOLDS, **kwargs: Any
    ) -> dict[str, Any]:
        """See the module-level :func:`semantic_threshold_table`."""
        return semantic_threshold_table(tool_emb, thresholds, **kwargs)

    # ------------------------------------------------------------------ persistence

    def to_npz(self, path: str | os.PathLike[str]) -> None:
        """Save without pickle, atomically (:func:`riskrank.fileio.atomic_writer`), so readers
        never see a half-written graph."""
        A = self.explicit
        arrays = {
            "format": np.array(_FORMAT),
            "config": np.array(json.dumps(asdict(self.config))),
            "type_counts": np.array(json.dumps(self.type_counts)),
            "shape": np.array(A.shape, dtype=np.int64),
            "data": A.data,
            "indices": A.indices,
            "indptr": A.indptr,
            "permissions": self.permissions,
            "perm_coef": np.array(self.perm_coef),
            "max_raw": np.array(self.max_raw),
        }
        with atomic_writer(path) as fh:
            np.savez(fh, **arrays)

    @classmethod
    def from_npz(cls, path: str | os.PathLike[str] | IO[bytes], *, source: str | None = None) -> ToolGraph:
        """Load a graph saved by :meth:`to_npz` (a path, or an open binary file named by
        ``source``). Never unpickles; anything that is not a whole, finite riskrank graph is one
        :class:`RiskrankError` naming the file: a torn or bit-flipped archive as much as NaN
        weights or parts that do not fit together."""
        where = source or str(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["format"]) != _FORMAT:
                    raise RiskrankError(f"{where}: not a riskrank graph file (format {str(z['format'])[:40]!r})")
                cfg = json.loads(str(z["config"]))
                cfg["edge_types"] = tuple(cfg["edge_types"])
                config = GraphConfig(**cfg)
                parts = {k: z[k] for k in ("data", "indices", "indptr", "permissions", "perm_coef", "max_raw", "shape")}
                type_counts = json.loads(str(z["type_counts"]))
        except RiskrankError:
            raise
        except Exception as exc:  # zipfile.BadZipFile, EOFError, OSError, KeyError, ValueError, TypeError, ...
            detail = "a member is missing" if isinstance(exc, KeyError) else type(exc).__name__
            raise RiskrankError(f"{where}: not a riskrank graph file, or a damaged one ({detail})") from None
        for name in ("data", "permissions", "perm_coef", "max_raw"):
            if not np.all(np.isfinite(parts[name])):
                raise RiskrankError(f"{where}: {name} holds NaN or infinite values")
        if (parts["data"] < 0).any() or float(parts["max_raw"]) <= 0 or float(parts["perm_coef"]) < 0:
            raise RiskrankError(f"{where}: negative or zero edge weights")
        try:
            A = sp.csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=tuple(int(v) for v in parts["shape"].tolist()))
            return cls(A, parts["permissions"], float(parts["perm_coef"]), config, max_raw=float(parts["max_raw"]), type_counts=type_counts)
        except (ValueError, TypeError, RiskrankError) as exc:
            raise RiskrankError(f"{where}: the graph's parts do not fit together ({str(exc)[:120]})") from None

def normalise_dense(W: np.ndarray, normalisation: str) -> np.ndarray:
    """Plain dense normalisation of a symmetric weight matrix (zero diagonal); see
    :class:`GraphConfig` for the three choices."""
    _check_normalisation(normalisation)
    W = np.asarray(W, dtype=np.float64)
    deg = W.sum(axis=1)
    if normalisation == "row":
        out = np.divide(W, deg[:, None], out=np.zeros_like(W), where=deg[:, None] > 0)
        isolated = deg == 0
        out[isolated, isolated] = 1.0
        return out
    if normalisation == "sym":
        dinv = np.divide(1.0, np.sqrt(deg), out=np.zeros_like(deg), where=deg > 0)
        return dinv[:, None] * W * dinv[None, :]
    Ws = W + np.eye(W.shape[0])
    dinv = 1.0 / np.sqrt(Ws.sum(axis=1))
    return dinv[:, None] * Ws * dinv[None, :]


def _cooccurrence(train_gold: Sequence[np.ndarray], n: int) -> sp.csr_matrix:
    """c_ij = number of training queries whose gold set holds both i and j (zero diagonal)."""
    golds = [np.unique(np.asarray(g, dtype=np.int64).ravel()) for g in train_gold]
    lens = np.array([g.size for g in golds], dtype=np.int64)
    cols = np.concatenate(golds) if golds else np.zeros(0, np.int64)
    if cols.size and (cols.min() < 0 or cols.max() >= n):
        raise RiskrankError(f"training gold tool indices must be in [0, {n})")
    rows = np.repeat(np.arange(len(golds)), lens)
    B = sp.csr_matrix((np.ones(cols.size), (rows, cols)), shape=(len(golds), n))
    C = (B.T @ B).tocsr()
    C.setdiag(0)
    C.eliminate_zeros()
    return C


def _semantic_edges(
    emb: np.ndarray,
    threshold: float,
    knn: int | None,
    block_rows: int | None,
    progress: bool,
) -> sp.csr_matrix:
    """Symmetric CSR of cos(d_i, d_j) for pairs above the threshold, computed in row blocks
    so no N x N similarity matrix ever exists."""
    n = emb.shape[0]
    step = _block_rows(n, block_rows)
    rows_l, cols_l, vals_l = [], [], []
    for start in _progress(range(0, n, step), progress, "semantic edges"):
        stop = min(start + step, n)
        if knn is None:
            # Upper triangle only (j > i), mirrored below: half the work, exact symmetry.
            sims = emb[start:stop] @ emb[start:].T
            # 1-D flatnonzero + divmod is several times faster than 2-D nonzero here.
            r, c = np.divmod(np.flatnonzero(sims > threshold), sims.shape[1])
            keep = c > r  # column c is tool start + c, row r is tool start + r
            r, c = r[keep], c[keep]
            rows_l.append(r + start)
            cols_l.append(c + start)
            vals_l.append(sims[r, c])
        else:
            sims = emb[start:stop] @ emb.T
            sims[np.arange(stop - start), np.arange(start, stop)] = -np.inf
            k = min(knn, n - 1)
            if k <= 0:
                continue
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            val = np.take_along_axis(sims, top, axis=1)
            r, j = np.nonzero(val > threshold)
            rows_l.append(r + start)
            cols_l.append(top[r, j])
            vals_l.append(val[r, j])
    if not rows_l:
        return sp.csr_matrix((n, n), dtype=np.float64)
    r = np.concatenate(rows_l)
    c = np.concatenate(cols_l)
    v = np.concatenate(vals_l).astype(np.float64)
    M = sp.csr_matrix((v, (r, c)), shape=(n, n))
    # kNN picks are directed: keep an edge if either end picked the other.
    return (M + M.T).tocsr() if knn is None else M.maximum(M.T).tocsr()


def _semantic_edges_ann(index: Any, n: int, threshold: float, knn: int | None, progress: bool) -> sp.csr_matrix:
    """Semantic edges from an ANN index's directed neighbour pairs (``index.neighbours``),
    made symmetric like :func:`_semantic_edges`: an edge exists if either end found the other
    (the larger of the two cosines where both did, as ``M.maximum(M.T)``, without holding
    both matrices: at a million tools the pairs are tens of millions)."""
    if getattr(index, "n_tools", n) != n:
        raise RiskrankError(f"semantic_index covers {index.n_tools} tools, the registry {n}")
    r, c, v = index.neighbours(knn, threshold=threshold, progress=progress)
    keep = r != c
    key = np.minimum(r, c)[keep] * np.int64(n) + np.maximum(r, c)[keep]
    v = v[keep]
    del r, c, keep
    order = np.lexsort((-v, key))  # each pair's largest cosine first
    key, v = key[order], v[order]
    del order
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    lo, hi = np.divmod(key[first], np.int64(n))
    lo, hi = lo.astype(np.int32), hi.astype(np.int32)
    v = v[first].astype(np.float64)
    del key, first
    return sp.csr_matrix((np.concatenate([v, v]), (np.concatenate([lo, hi]), np.concatenate([hi, lo]))), shape=(n, n))


def semantic_threshold_table(
    tool_emb: np.ndarray,
    thresholds: Sequence[float] = _DEFAULT_THRESHOLDS,
    *,
    max_exact_pairs: int = 20_000_000,
    sample_pairs: int = 1_000_000,
    seed: int = 0,
    block_rows: int | None = None,
) -> dict[str, Any]:
    """How many tool pairs each semantic threshold would connect, and the quantiles of all
    pairwise cosines: the paper's 0.65 is a ToolRet-BGE figure, and encoders differ widely in
    their similarity scale (Appendix B; the paper's 0.65 is a BGE figure). Exact for up to ``max_exact_pairs`` pairs,
    else estimated from ``sample_pairs`` random pairs (``"exact": False``)."""
    emb = _check_embeddings(tool_emb)
    n = emb.shape[0]
    n_pairs = n * (n - 1) // 2
    thr = np.asarray(list(thresholds), dtype=np.float64)
    if n_pairs == 0:
        sims = np.zeros(0, dtype=np.float32)
        exact = True
    elif n_pairs <= max_exact_pairs:
        step = _block_rows(n, block_rows)
        chunks = []
        for start in range(0, n, step):
            stop = min(start + step, n)
            block = emb[start:stop] @ emb.T
            r, c = np.triu_indices(stop - start, k=1, m=n - start)
            chunks.append(block[r, c + start])
        sims = np.concatenate(chunks)
        exact = True
    else:
        rng = np.random.default_rng(seed)
        i = rng.integers(0, n, sample_pairs)
        j = rng.integers(0, n - 1, sample_pairs)
        j = j + (j >= i)  # uniform over j != i
        sims = np.einsum("pd,pd->p", emb[i], emb[j])
        exact = False
    sims_sorted = np.sort(sims)
    above = sims_sorted.size - np.searchsorted(sims_sorted, thr, side="right")
    frac = above / max(sims_sorted.size, 1)
    counts = above if exact else np.rint(frac * n_pairs).astype(np.int64)
    qs = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999, 1.0)
    quant = np.quantile(sims_sorted, qs) if sims_sorted.size else np.zeros(len(qs))
    return {
        "n_tools": n,
        "n_pairs": n_pairs,
        "exact": exact,
        "n_pairs_measured": int(sims_sorted.size),
        "counts": {float(t): int(c) for t, c in zip(thr, counts, strict=True)},
        "fractions": {float(t): float(f) for t, f in zip(thr, frac, strict=True)},
        "mean_neighbours": {
            float(t): (2.0 * int(c) / n if n else 0.0) for t, c in zip(thr, counts, strict=True)
        },
        "quantiles": {float(q): float(v) for q, v in zip(qs, quant, strict=True)},
    }
