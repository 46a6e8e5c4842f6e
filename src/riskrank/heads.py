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

The combined score (Eq. 6) under the two penalties (``DualHead.penalty``):

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
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from riskrank.errors import RiskrankError
from riskrank.first_stage import RelevanceInputs

DESIGNS = ("residual", "paper")
#: What lambda multiplies (module docstring): the classifier p(r >= 3) in logit space
#: (riskrank's default), or the paper's regression head in probability space.
PENALTIES = ("p_risky", "paper")


class RiskHead(nn.Module):
    """sigmoid(MLP(e_t)), d -> hidden -> 1: f_risk (trained on (r - 1) / 4) or p_risky
    (trained on r >= 3)."""

    def __init__(self, dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.l1 = nn.Linear(dim, hidden)
        self.l2 = nn.Linear(hidden, 1)

    def forward(self, e_t: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.l2(torch.relu(self.l1(e_t)))).squeeze(-1)


class PaperRelevanceHead(nn.Module):
    """f_rel(q, t) = sigmoid(MLP([e_q; e_t])), 2d -> hidden -> 1 (Eq. 1)."""

    design = "paper"
    n_lex = 0

    def __init__(self, dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.l1 = nn.Linear(2 * dim, hidden)
        self.l2 = nn.Linear(hidden, 1)

    def logit(self, e_q: torch.Tensor, e_t: torch.Tensor, f0: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(torch.cat([e_q, e_t], dim=-1)))).squeeze(-1)

    def forward(self, e_q: torch.Tensor, e_t: torch.Tensor, f0: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sigmoid(self.logit(e_q, e_t))


class ResidualRelevanceHead(nn.Module):
    """The first stage's score at a learned scale plus zero-initialised residuals (see the
    module docstring). ``n_lex`` lexical features (0: the dense head, whose f0 is the cosine)."""

    design = "residual"

    def __init__(self, dim: int, hidden: int = 64, rank: int = 64, n_lex: int = 0, init_scale: float = 10.0,
                 init_center: float = 0.5) -> None:
        super().__init__()
        self.n_lex = int(n_lex)
        self.log_scale = nn.Parameter(torch.tensor(math.log(init_scale)))
        # Centre the sigmoid on a typical positive f0 so the margin loss has gradient.
        self.bias = nn.Parameter(torch.tensor(-init_scale * init_center))
        self.u = nn.Linear(dim, rank, bias=False)
        self.v = nn.Linear(dim, rank, bias=False)
        nn.init.zeros_(self.v.weight)
        self.l1 = nn.Linear(2 * dim, hidden)
        self.l2 = nn.Linear(hidden, 1)
        nn.init.zeros_(self.l2.weight)
        nn.init.zeros_(self.l2.bias)
        if self.n_lex:
            self.lex_w = nn.Parameter(torch.zeros(self.n_lex))
        # beta: 1 while training; set from validation afterwards (0 = the first stage's ranking).
        self.register_buffer("residual_weight", torch.tensor(1.0))

    def logit(self, e_q: torch.Tensor, e_t: torch.Tensor, f0: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        """``f0`` [B] (default: the cosine, for the dense head) and ``x`` [B, n_lex]."""
        if f0 is None:
            if self.n_lex:
                raise ValueError("the hybrid head needs f0 and x (riskrank.first_stage.relevance_inputs)")
            f0 = (e_q * e_t).sum(-1)
        res = (self.u(e_q) * self.v(e_t)).sum(-1) + self.l2(torch.relu(self.l1(torch.cat([e_q, e_t], dim=-1)))).squeeze(-1)
        if self.n_lex:
            res = res + (x * self.lex_w).sum(-1)
        return self.log_scale.exp() * f0 + self.bias + self.residual_weight * res

    def forward(self, e_q: torch.Tensor, e_t: torch.Tensor, f0: torch.Tensor | None = None, x: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sigmoid(self.logit(e_q, e_t, f0, x))


class DualHead(nn.Module):
    """The relevance head and the risk heads. ``lexical`` names the lexical features the
    residual head reads (empty: the dense head); ``penalty`` is what lambda multiplies
    (:data:`PENALTIES`; ``p_risky`` adds the classifier head)."""

    def __init__(self, dim: int, design: str = "residual", hidden: int = 64, rank: int = 64, *,
                 lexical: tuple[str, ...] = (), penalty: str = "paper") -> None:
        super().__init__()
        if design not in DESIGNS:
            raise ValueError(f"unknown head design {design!r}; choose from {', '.join(DESIGNS)}")
        if penalty not in PENALTIES:
            raise ValueError(f"unknown risk penalty {penalty!r}; choose from {', '.join(PENALTIES)}")
        if design == "paper" and (lexical or penalty != "paper"):
            raise ValueError("the paper design reads no lexical evidence and keeps the paper's penalty")
        self.dim, self.design, self.hidden, self.rank = dim, design, hidden, rank
        self.lexical, self.penalty = tuple(lexical), penalty
        self.relevance_head: nn.Module = (
            ResidualRelevanceHead(dim, hidden, rank, len(self.lexical)) if design == "residual" else PaperRelevanceHead(dim, hidden)
        )
        self.risk_head = RiskHead(dim, hidden)
        if penalty == "p_risky":
            self.penalty_head = RiskHead(dim, hidden)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, e_q: torch.Tensor, e_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.relevance_head(e_q, e_t), self.risk_head(e_t)

    def penalty_scores(self, e_t: torch.Tensor) -> torch.Tensor:
        """What lambda multiplies for each tool: p_risky, or the paper's f_risk."""
        return self.penalty_head(e_t) if self.penalty == "p_risky" else self.risk_head(e_t)


@dataclass
class _Weights:
    """Head weights as float32 torch tensors, detached, for inference."""

    l1_q: torch.Tensor
    l1_b: torch.Tensor
    l2_w: torch.Tensor
    l2_b: torch.Tensor


class HeadScorer:
    """Factorised full-pool scoring of a :class:`DualHead` over one registry.

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
    #: ``parallel_min_tools`` tools on). Each runs single-threaded kernels, so keep BLAS and
    #: torch at one intra-op thread when raising it: on two cores this doubles full-pool
    #: throughput at 10^5-10^6 tools, where intra-op threading of these many small kernels
    #: does not (and collapses when the other core is busy).
    workers = 1
    parallel_min_tools = 1 << 16

    def __init__(self, model: DualHead, tool_emb: np.ndarray) -> None:
        self.design = model.design
        self.lexical = tuple(getattr(model, "lexical", ()))
        self.penalty = getattr(model, "penalty", "paper")
        model = model.eval()
        with torch.no_grad():
            self.tool_emb = torch.from_numpy(np.ascontiguousarray(tool_emb, dtype=np.float32))
            rel = model.relevance_head
            d = model.dim
            w1 = rel.l1.weight.detach().float()
            self.w = _Weights(w1[:, :d].contiguous(), rel.l1.bias.detach().float(), rel.l2.weight.detach().float()[0], rel.l2.bias.detach().float()[0])
            self.tool_hidden = (self.tool_emb @ w1[:, d:].T).contiguous()  # E_t W_t^T, [N, hidden]
            self.level_score = model.risk_head(self.tool_emb).numpy().astype(np.float32)
            self.f_risk = model.penalty_scores(self.tool_emb).numpy().astype(np.float32) if self.penalty == "p_risky" else self.level_score
            if self.design == "residual":
                self.scale = float(rel.log_scale.exp())
                self.bias = float(rel.bias)
                self.beta = float(rel.residual_weight)
                self.u = rel.u.weight.detach().float()  # [r, d]
                self.v = rel.v.weight.detach().float()  # [r, d]
                self.tool_v = (self.tool_emb @ self.v.T).contiguous()  # [N, r]
                self.lex_w = rel.lex_w.detach().numpy().astype(np.float32).copy() if self.lexical else np.zeros(0, np.float32)
        self._local = threading.local()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_size = 0

    def _work_buffer(self, rows: int, cols: int) -> torch.Tensor:
        """A per-thread scratch block, reused across calls: a fresh megabyte per query costs
        more in page faults than the arithmetic done in it (and threads must not share it)."""
        buf = getattr(self._local, "buf", None)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols:
            buf = self._local.buf = torch.empty((rows, cols), dtype=torch.float32)
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
        # numpy (BLAS) for the small query-side products: torch's CPU matmul is slower here.
        hq = q @ self.w.l1_q.numpy().T + self.w.l1_b.numpy()  # W_q e_q + b, [Q, H]
        uq = q @ self.u.numpy().T if self.design == "residual" else None  # U e_q, [Q, r]
        with torch.no_grad():
            if candidates is None:
                return self._logits_full(q, hq, uq, dense)
            return self._logits_candidates(q, hq, uq, np.asarray(candidates), dense)

    def _combine(self, out: np.ndarray, bil: np.ndarray | None, dense: np.ndarray | None) -> None:
        """out (the MLP term, without b2) -> dense + beta * (bilinear + MLP) + bias."""
        out += np.float32(self.w.l2_b)
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
            fold = np.float32(self.beta) * (uq @ self.v.numpy())
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
        th, w2 = self.tool_hidden, self.w.l2_w.numpy()
        buf_t = self._work_buffer(step, hidden)
        buf = buf_t.numpy()
        te = self.tool_emb.numpy()
        # Tool blocks outermost, so each block of E_t (and E_t W_t^T) is read from memory once
        # for the whole batch: the linear terms as one matrix product per block over all
        # queries, the MLP per query on the block while it sits in cache. torch for the
        # elementwise add/ReLU (several times faster than numpy's maximum here), BLAS for the
        # products.
        with torch.no_grad():
            for c in range(lo, hi, step):
                e = min(hi, c + step)
                b_t, b = buf_t[: e - c], buf[: e - c]
                for i in range(hq.shape[0]):
                    torch.add(th[c:e], torch.from_numpy(hq[i]), out=b_t)
                    torch.relu_(b_t)
                    np.matmul(b, w2, out=out[i, c:e])
                blk = out[:, c:e]
                if fold is not None:
                    blk += np.float32(self.w.l2_b)
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
        th, w2 = self.tool_hidden.numpy(), self.w.l2_w.numpy()
        residual = self.design == "residual"
        q_step = max(1, min(n_q, self.block_elems // max(1, width * hidden)))
        n_step = width if q_step > 1 else max(1, self.block_elems // hidden)
        for a in range(0, n_q, q_step):
            b = min(n_q, a + q_step)
            for c in range(0, width, n_step):
                e = min(width, c + n_step)
                idx = cand[a:b, c:e]
                h = torch.from_numpy(th[idx])  # gathered E_t W_t^T rows, [q, m, H]
                h += torch.from_numpy(hq[a:b, None, :])
                torch.relu_(h)
                o = out[a:b, c:e]
                np.matmul(h.numpy(), w2, out=o)
                bil = ds = None
                if residual:
                    bil = np.einsum("qmr,qr->qm", self.tool_v.numpy()[idx], uq[a:b])
                    if dense is None:
                        ds = np.float32(self.scale) * np.einsum("qmd,qd->qm", self.tool_emb.numpy()[idx], q[a:b])
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
