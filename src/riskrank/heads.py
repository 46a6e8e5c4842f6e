"""The dual-head model (paper Section 4.3, Appendix D) and its factorised full-pool scoring.

Heads sit on a frozen encoder:

* ``f_risk(t) = MLP(e_t)`` (d -> 64 -> 1, ReLU, sigmoid), regressed on (r - 1) / 4 (the
  paper's risk head; riskrank reads predicted levels from it);
* optionally ``p_risky(t) = MLP(e_t)``, the same shape trained as a class-balanced classifier
  of r >= 3 (riskrank's default penalty, below);
* ``f_rel(q, t)`` in one of two designs:

  - ``paper``: ``MLP([e_q; e_t])`` (2d -> 64 -> 1, ReLU, sigmoid), exactly as the paper.
    With MiniLM this head collapses on Seal-Tools (a concatenation MLP cannot learn a dot
    product from a few hundred queries), so it is kept as a reported variant;
  - ``residual`` (default): ``f_rel = sigmoid(logit)`` with
    ``logit = s * f0 + b + beta * (w . x + (U e_q).(V e_t) + MLP_add(e_q, e_t))``, where
    ``f0`` is the first stage's score and ``x`` the lexical evidence
    (:data:`riskrank.first_stage.LEXICAL_FEATURES`). For the hybrid head ``f0`` is the
    validated fusion of BM25 and the cosine, rescaled to [0, 1] per query; for the dense head
    (``lexical=()``) it is the cosine and there is no ``w . x``. ``w``, ``V`` and the MLP's
    output layer start at zero, so an untrained head ranks exactly like its first stage, and
    ``beta`` (the residual weight) is chosen on validation queries: without validation
    evidence that the residual helps, ``beta = 0`` and the head cannot fall below its first
    stage.

The combined score (Eq. 6) under the two penalties (``HeadWeights.penalty``):

* ``paper``: ``s(q, t) = f_rel(q, t) - lambda * f_risk(t)``;
* ``p_risky`` (riskrank's default): ``s(q, t) = logit(q, t) - lambda * p_risky(t)``. A penalty
  in probability space cannot move a confident head's scores (f_rel saturates near 1 for the
  gold tool and its risky neighbours alike); in logit space lambda is a margin in the units
  the head ranks by.

Factorised scoring: the first layer of any head on ``[e_q; e_t]`` is ``W = [W_q | W_t]``, so
``h = ReLU(W_q e_q + W_t e_t + b)``. :class:`HeadScorer` precomputes ``E_t W_t^T`` (N x 64),
``E_t V^T`` (N x r) and the risk scores once per registry; a query then costs O(N * 64) plus
the first stage's scores, instead of O(N * 2d * 64). Over the full pool the bilinear term (and,
for the dense head, the cosine) is one product, ``(s e_q + beta V^T U e_q) . e_t``, and the
tools are processed in cache-sized blocks (docs/benchmarks.md has the measurements).
``tests/naive.py`` runs the heads on every concatenated pair; the tests hold this to it.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.first_stage import RelevanceInputs

DESIGNS = ("residual", "paper")
#: What lambda multiplies (module docstring): the classifier p(r >= 3) in logit space
#: (riskrank's default), or the paper's regression head in probability space.
PENALTIES = ("p_risky", "paper")
#: Where the penalty's per-tool value comes from at inference (a checkpoint's
#: ``inference.penalty_source``): ``head``, the risk head's penalty above (every checkpoint
#: before this setting existed), or ``levels``, :func:`level_penalty` of the levels the
#: retriever serves.
PENALTY_SOURCES = ("head", "levels")


def level_penalty(levels: np.ndarray, risky: int = 3) -> np.ndarray:
    """1 for a tool served at level ``risky`` or above, else 0 [N] (float32): a penalty that
    moves a risky tool below the tools that are not, and changes no order among tools on the
    same side of the line RVR@5 counts, so it costs relevance only where the candidates differ
    in risk (a continuous risk score reorders tools of one level too, and spends relevance
    there for no fewer risky tools shown)."""
    return (np.asarray(levels) >= risky).astype(np.float32)


def state_shapes(dim: int, design: str, hidden: int, rank: int, n_lex: int, penalty: str) -> dict[str, tuple[int, ...]]:
    """The heads' arrays by state-dict name and shape: what a checkpoint's weights file holds
    (and all it may hold) for this head block."""
    if design not in DESIGNS:
        raise ValueError(f"unknown head design {design!r}; choose from {', '.join(DESIGNS)}")
    if penalty not in PENALTIES:
        raise ValueError(f"unknown risk penalty {penalty!r}; choose from {', '.join(PENALTIES)}")
    if design == "paper" and (n_lex or penalty != "paper"):
        raise ValueError("the paper design reads no lexical evidence and keeps the paper's penalty")
    out: dict[str, tuple[int, ...]] = {}
    if design == "residual":
        out.update({"relevance_head.log_scale": (), "relevance_head.bias": (), "relevance_head.u.weight": (rank, dim),
                    "relevance_head.v.weight": (rank, dim)})
        if n_lex:
            out["relevance_head.lex_w"] = (n_lex,)
        out["relevance_head.residual_weight"] = ()
    out.update({"relevance_head.l1.weight": (hidden, 2 * dim), "relevance_head.l1.bias": (hidden,),
                "relevance_head.l2.weight": (1, hidden), "relevance_head.l2.bias": (1,)})
    for head in ("risk_head", "penalty_head") if penalty == "p_risky" else ("risk_head",):
        out.update({f"{head}.l1.weight": (hidden, dim), f"{head}.l1.bias": (hidden,), f"{head}.l2.weight": (1, hidden),
                    f"{head}.l2.bias": (1,)})
    return out


@dataclass(frozen=True)
class HeadWeights:
    """The dual head's weights as float32 NumPy arrays (under the training modules'
    state-dict names) and the head block that shapes them: all inference needs, with no
    PyTorch (training builds these from :class:`riskrank.training.modules.DualHead`)."""

    dim: int
    design: str
    hidden: int
    rank: int
    lexical: tuple[str, ...]
    penalty: str
    arrays: dict[str, np.ndarray] = field(repr=False)

    @classmethod
    def from_state(cls, dim: int, design: str, hidden: int, rank: int, lexical: tuple[str, ...] | list[str], penalty: str,
                   arrays: dict[str, np.ndarray]) -> HeadWeights:
        """Strict: every array the head block implies, of its shape, and nothing else
        (ValueError naming the first difference)."""
        want = state_shapes(int(dim), design, int(hidden), int(rank), len(lexical), penalty)
        missing, extra = sorted(set(want) - set(arrays)), sorted(set(arrays) - set(want))
        if missing or extra:
            raise ValueError("missing key(s): " + ", ".join(missing) if missing else "unexpected key(s): " + ", ".join(extra))
        out = {}
        for k, shape in want.items():
            a = np.asarray(arrays[k])
            if a.shape != shape:
                raise ValueError(f"size mismatch for {k}: the weights have shape {a.shape}, the head block {shape}")
            if not np.issubdtype(a.dtype, np.floating):
                raise ValueError(f"{k}: dtype {a.dtype}, not floating point")
            out[k] = np.array(a, dtype=np.float32, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        return cls(int(dim), design, int(hidden), int(rank), tuple(lexical), penalty, out)

    def weights(self) -> HeadWeights:
        return self

    def n_parameters(self) -> int:
        return int(sum(a.size for a in self.arrays.values()))

    def mlp(self, head: str, e_t: np.ndarray) -> np.ndarray:
        """sigmoid(MLP(e_t)) of ``risk_head`` (f_risk, the (r - 1) / 4 regression) or
        ``penalty_head`` (p_risky), [N]."""
        a = self.arrays
        h = e_t @ a[f"{head}.l1.weight"].T
        h += a[f"{head}.l1.bias"]
        np.maximum(h, 0, out=h)
        z = (h @ a[f"{head}.l2.weight"][0] + a[f"{head}.l2.bias"][0]).astype(np.float32)
        return sigmoid_(z)


def as_weights(model: Any) -> HeadWeights:
    """:class:`HeadWeights` of a :class:`HeadWeights` or of a training module (anything with
    ``weights()``)."""
    return model if isinstance(model, HeadWeights) else model.weights()


class HeadScorer:
    """Factorised full-pool scoring of the dual head (:class:`HeadWeights`, or a training
    module) over one registry, in NumPy.

    ``relevance(Q)`` returns f_rel [Q, N] (or [Q, M] over per-query candidates);
    ``f_risk`` [N], what lambda multiplies (p_risky, or the paper's f_risk), and
    ``level_score`` [N], the (r - 1) / 4 regression the predicted levels come from, are
    computed once. The tool-side projections cost one pass over the registry; per query the
    work is O(N * (hidden + rank)) plus the first stage's scores. A hybrid head also reads
    ``inputs`` (:func:`riskrank.first_stage.relevance_inputs` over the same scored set).
    """

    # Elements of the [n, hidden] activation block processed at once: small enough to stay in
    # the CPU cache (a block of tool-side projections is read from memory once and reused by
    # every query of a batch), large enough that per-block Python overhead is noise.
    block_elems = 1 << 18
    #: Threads that split a full-pool call's tools into contiguous ranges (from
    #: ``parallel_min_tools`` tools on). Each runs single-threaded kernels, so keep BLAS at
    #: one thread when raising it: on two cores this doubles full-pool
    #: throughput at 10^5-10^6 tools, where intra-op threading of these many small kernels
    #: does not (and collapses when the other core is busy).
    workers = 1
    parallel_min_tools = 1 << 16

    def __init__(self, model: Any, tool_emb: np.ndarray) -> None:
        w = as_weights(model)
        a = w.arrays
        self.design, self.lexical, self.penalty = w.design, w.lexical, w.penalty
        self.tool_emb = np.ascontiguousarray(tool_emb, dtype=np.float32)
        d = w.dim
        w1 = a["relevance_head.l1.weight"]
        self.l1_q = np.ascontiguousarray(w1[:, :d])  # W_q, [hidden, d]
        self.l1_b = a["relevance_head.l1.bias"]
        self.l2_w = np.ascontiguousarray(a["relevance_head.l2.weight"][0])
        self.l2_b = np.float32(a["relevance_head.l2.bias"][0])
        self.tool_hidden = np.ascontiguousarray(self.tool_emb @ w1[:, d:].T)  # E_t W_t^T, [N, hidden]
        self.level_score = w.mlp("risk_head", self.tool_emb)
        self.f_risk = w.mlp("penalty_head", self.tool_emb) if self.penalty == "p_risky" else self.level_score
        if self.design == "residual":
            self.scale = float(np.exp(a["relevance_head.log_scale"]))
            self.bias = float(a["relevance_head.bias"])
            self.beta = float(a["relevance_head.residual_weight"])
            self.u = a["relevance_head.u.weight"]  # [r, d]
            self.v = a["relevance_head.v.weight"]  # [r, d]
            self.tool_v = np.ascontiguousarray(self.tool_emb @ self.v.T)  # [N, r]
            self.lex_w = a["relevance_head.lex_w"].copy() if self.lexical else np.zeros(0, np.float32)
        self._local = threading.local()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_size = 0

    def _work_buffer(self, rows: int, cols: int) -> np.ndarray:
        """A per-thread scratch block, reused across calls: a fresh megabyte per query costs
        more in page faults than the arithmetic done in it (and threads must not share it)."""
        buf = getattr(self._local, "buf", None)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols:
            buf = self._local.buf = np.empty((rows, cols), dtype=np.float32)
        return buf[:rows]

    @property
    def n_tools(self) -> int:
        return int(self.tool_emb.shape[0])

    @property
    def space(self) -> str:
        """Where lambda acts: ``logit`` (the p_risky penalty) or ``probability`` (the paper's)."""
        return "logit" if self.penalty == "p_risky" else "probability"

    def _dense_term(self, inputs: RelevanceInputs | None, cos: np.ndarray | None, width: int, n_q: int) -> np.ndarray | None:
        """The part of the logit that is elementwise in the scored set: s * f0 + beta * w . x
        for the hybrid head; s * cos for the dense head when the cosine is given."""
        if self.design != "residual":
            return None
        if self.lexical:
            if inputs is None or len(inputs.x) != len(self.lexical):
                raise RiskrankError("this checkpoint's relevance head reads lexical evidence: pass the task texts")
            f0 = np.atleast_2d(inputs.f0)
            if f0.shape != (n_q, width):
                raise RiskrankError(f"relevance inputs have shape {f0.shape}, expected {(n_q, width)}")
            out = np.float32(self.scale) * f0.astype(np.float32)
            for w, x in zip(self.lex_w, inputs.x, strict=True):
                if w:
                    out += np.float32(self.beta * w) * x
            return out
        if inputs is not None and cos is None:
            cos = inputs.f0
        return None if cos is None else np.float32(self.scale) * np.atleast_2d(np.asarray(cos, dtype=np.float32))

    def logits(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None,
               inputs: RelevanceInputs | None = None) -> np.ndarray:
        """Pre-sigmoid relevance [Q, N] (or [Q, M] over ``candidates``). ``cos`` may pass
        the first stage's cosine matrix in the same shape to avoid recomputing it; a hybrid
        head needs ``inputs`` in that shape."""
        q = np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32)
        width = self.n_tools if candidates is None else np.atleast_2d(candidates).shape[1]
        dense = self._dense_term(inputs, cos, width, q.shape[0])
        hq = q @ self.l1_q.T + self.l1_b  # W_q e_q + b, [Q, H]
        uq = q @ self.u.T if self.design == "residual" else None  # U e_q, [Q, r]
        if candidates is None:
            return self._logits_full(q, hq, uq, dense)
        return self._logits_candidates(q, hq, uq, np.asarray(candidates), dense)

    def _combine(self, out: np.ndarray, bil: np.ndarray | None, dense: np.ndarray | None) -> None:
        """out (the MLP term, without b2) -> dense + beta * (bilinear + MLP) + bias."""
        out += self.l2_b
        if self.design == "residual":
            out += bil
            out *= np.float32(self.beta)
            out += dense
            out += np.float32(self.bias)

    def _logits_full(self, q: np.ndarray, hq: np.ndarray, uq: np.ndarray | None, dense: np.ndarray | None) -> np.ndarray:
        n, hidden = self.tool_hidden.shape
        out = np.empty((q.shape[0], n), dtype=np.float32)
        fold = None
        if self.design == "residual":
            # beta * (U q).(V e) = (beta * V^T U q) . e: the bilinear term is one product with
            # the tool embeddings, so E_t V^T is not read at all (a quarter less memory traffic
            # per query at d = 384); the dense head folds its scaled cosine into it too.
            fold = np.float32(self.beta) * (uq @ self.v)
            if dense is None:
                fold += np.float32(self.scale) * q
        step = max(1, min(n, self.block_elems // hidden))
        workers = max(1, min(int(self.workers), -(-n // step)))
        if workers == 1 or n < self.parallel_min_tools:
            self._logits_range(0, n, step, out, hq, fold, dense)
            return out
        # Contiguous tool ranges, one per thread: no synchronisation inside a call, so a busy
        # machine slows it down gracefully (per-op thread barriers do not).
        cuts = [min(n, round(n * k / workers / step) * step) for k in range(workers + 1)]
        cuts[-1] = n
        pool = self._pool(workers)
        jobs = [pool.submit(self._logits_range, a, b, step, out, hq, fold, dense) for a, b in itertools.pairwise(cuts) if b > a]
        for job in jobs:
            job.result()
        return out

    def _pool(self, workers: int) -> ThreadPoolExecutor:
        if self._executor is None or self._executor_size != workers:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
            self._executor = ThreadPoolExecutor(workers, thread_name_prefix="riskrank-heads")
            self._executor_size = workers
        return self._executor

    def _logits_range(self, lo: int, hi: int, step: int, out: np.ndarray, hq: np.ndarray, fold: np.ndarray | None,
                      dense: np.ndarray | None) -> None:
        """Logits of tools [lo, hi) into out[:, lo:hi]."""
        hidden = self.tool_hidden.shape[1]
        th, w2, te = self.tool_hidden, self.l2_w, self.tool_emb
        buf = self._work_buffer(step, hidden)
        # Tool blocks outermost, so each block of E_t (and E_t W_t^T) is read from memory once
        # for the whole batch: the linear terms as one matrix product per block over all
        # queries, the MLP per query on the block while it sits in cache (in place, into one
        # reused buffer), BLAS for the products.
        for c in range(lo, hi, step):
            e = min(hi, c + step)
            b = buf[: e - c]
            for i in range(hq.shape[0]):
                np.add(th[c:e], hq[i], out=b)
                np.maximum(b, 0, out=b)
                np.matmul(b, w2, out=out[i, c:e])
            blk = out[:, c:e]
            if fold is not None:
                blk += self.l2_b
                blk *= np.float32(self.beta)
                blk += fold @ te[c:e].T
                blk += np.float32(self.bias)
                if dense is not None:
                    blk += dense[:, c:e]
            else:
                self._combine(blk, None, None)

    def _logits_candidates(self, q: np.ndarray, hq: np.ndarray, uq: np.ndarray | None, cand: np.ndarray,
                           dense: np.ndarray | None) -> np.ndarray:
        n_q, width = cand.shape
        hidden = self.tool_hidden.shape[1]
        out = np.empty((n_q, width), dtype=np.float32)
        th, w2 = self.tool_hidden, self.l2_w
        residual = self.design == "residual"
        q_step = max(1, min(n_q, self.block_elems // max(1, width * hidden)))
        n_step = width if q_step > 1 else max(1, self.block_elems // hidden)
        for a in range(0, n_q, q_step):
            b = min(n_q, a + q_step)
            for c in range(0, width, n_step):
                e = min(width, c + n_step)
                idx = cand[a:b, c:e]
                h = th[idx]  # gathered E_t W_t^T rows, [q, m, H]
                h += hq[a:b, None, :]
                np.maximum(h, 0, out=h)
                o = out[a:b, c:e]
                np.matmul(h, w2, out=o)
                bil = ds = None
                if residual:
                    bil = np.einsum("qmr,qr->qm", self.tool_v[idx], uq[a:b])
                    if dense is None:
                        ds = np.float32(self.scale) * np.einsum("qmd,qd->qm", self.tool_emb[idx], q[a:b])
                    else:
                        ds = dense[a:b, c:e]
                self._combine(o, bil, ds)
        return out

    def relevance(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None,
                  inputs: RelevanceInputs | None = None) -> np.ndarray:
        """f_rel in (0, 1): [Q, N], or [Q, M] over per-query ``candidates``."""
        return sigmoid_(self.logits(query_emb, candidates, cos=cos, inputs=inputs))

    def relevance_score(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None,
                        inputs: RelevanceInputs | None = None) -> np.ndarray:
        """The relevance term of s: the logit (``p_risky`` penalty) or f_rel (``paper``)."""
        z = self.logits(query_emb, candidates, cos=cos, inputs=inputs)
        return z if self.space == "logit" else sigmoid_(z)

    def risk(self, candidates: np.ndarray | None = None) -> np.ndarray:
        return self.f_risk if candidates is None else self.f_risk[candidates]

    def scores(self, query_emb: np.ndarray, lam: float, candidates: np.ndarray | None = None, *,
               inputs: RelevanceInputs | None = None) -> np.ndarray:
        """s = relevance term - lambda * penalty (Eq. 6, module docstring)."""
        return self.relevance_score(query_emb, candidates, inputs=inputs) - np.float32(lam) * self.risk(candidates)


def sigmoid_(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) in place: a million-tool row allocates nothing more. exp overflows to
    inf for z < -88, and 1 / inf = 0 is the right limit."""
    np.negative(z, out=z)
    with np.errstate(over="ignore"):
        np.exp(z, out=z)
    z += np.float32(1.0)
    return np.reciprocal(z, out=z)
