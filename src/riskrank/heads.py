"""The dual-head model (paper Section 4.3, Appendix D) and its factorised full-pool scoring.

Two heads sit on a frozen encoder:

* ``f_risk(t) = MLP(e_t)`` (d -> 64 -> 1, ReLU, sigmoid), trained on (r - 1) / 4;
* ``f_rel(q, t)`` in one of two designs:

  - ``paper``: ``MLP([e_q; e_t])`` (2d -> 64 -> 1, ReLU, sigmoid), exactly as the paper.
    With MiniLM this head collapses on Seal-Tools (a concatenation MLP cannot learn a dot
    product from a few hundred queries), so it is kept as a reported variant;
  - ``residual`` (default): ``sigmoid(gamma * cos(q, t) + beta * [(U e_q).(V e_t) +
    MLP_add(e_q, e_t)] + b)``. The cosine is the encoder's own ranking; the low-rank
    bilinear term and the additive MLP are residuals whose output layers start at zero, so
    an untrained head ranks exactly like the encoder, and ``beta`` (the residual weight) is
    chosen on validation queries: without validation evidence that the residual helps,
    ``beta = 0`` and the head cannot fall below the encoder.

Combined score (Eq. 6): ``s(q, t) = f_rel(q, t) - lambda * f_risk(t)``.

Factorised scoring: the first layer of any head on ``[e_q; e_t]`` is ``W = [W_q | W_t]``, so
``h = ReLU(W_q e_q + W_t e_t + b)``. :class:`HeadScorer` precomputes ``E_t W_t^T`` (N x 64),
``E_t V^T`` (N x r) and ``f_risk`` once per registry; a query then costs O(N * 64) plus the
cosine the first stage computes anyway, instead of O(N * 2d * 64). Over the full pool the
cosine and the bilinear term are one product, ``(scale e_q + beta V^T U e_q) . e_t``, and the
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

DESIGNS = ("residual", "paper")


class RiskHead(nn.Module):
    """f_risk(t) = sigmoid(MLP(e_t)), d -> hidden -> 1."""

    def __init__(self, dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.l1 = nn.Linear(dim, hidden)
        self.l2 = nn.Linear(hidden, 1)

    def forward(self, e_t: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.l2(torch.relu(self.l1(e_t)))).squeeze(-1)


class PaperRelevanceHead(nn.Module):
    """f_rel(q, t) = sigmoid(MLP([e_q; e_t])), 2d -> hidden -> 1 (Eq. 1)."""

    design = "paper"

    def __init__(self, dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.l1 = nn.Linear(2 * dim, hidden)
        self.l2 = nn.Linear(hidden, 1)

    def forward(self, e_q: torch.Tensor, e_t: torch.Tensor) -> torch.Tensor:
        x = torch.cat([e_q, e_t], dim=-1)
        return torch.sigmoid(self.l2(torch.relu(self.l1(x)))).squeeze(-1)


class ResidualRelevanceHead(nn.Module):
    """Learned-scale cosine plus zero-initialised residuals (see the module docstring)."""

    design = "residual"

    def __init__(self, dim: int, hidden: int = 64, rank: int = 64, init_scale: float = 10.0, init_center: float = 0.5) -> None:
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(math.log(init_scale)))
        # Centre the sigmoid on a typical positive cosine so the margin loss has gradient.
        self.bias = nn.Parameter(torch.tensor(-init_scale * init_center))
        self.u = nn.Linear(dim, rank, bias=False)
        self.v = nn.Linear(dim, rank, bias=False)
        nn.init.zeros_(self.v.weight)
        self.l1 = nn.Linear(2 * dim, hidden)
        self.l2 = nn.Linear(hidden, 1)
        nn.init.zeros_(self.l2.weight)
        nn.init.zeros_(self.l2.bias)
        # beta: 1 while training; set from validation afterwards (0 = the encoder's ranking).
        self.register_buffer("residual_weight", torch.tensor(1.0))

    def logit(self, e_q: torch.Tensor, e_t: torch.Tensor) -> torch.Tensor:
        cos = (e_q * e_t).sum(-1)
        bil = (self.u(e_q) * self.v(e_t)).sum(-1)
        mlp = self.l2(torch.relu(self.l1(torch.cat([e_q, e_t], dim=-1)))).squeeze(-1)
        return self.log_scale.exp() * cos + self.residual_weight * (bil + mlp) + self.bias

    def forward(self, e_q: torch.Tensor, e_t: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logit(e_q, e_t))


class DualHead(nn.Module):
    """The relevance head and the risk head, trained jointly (L = L_rel + mu * L_risk)."""

    def __init__(self, dim: int, design: str = "residual", hidden: int = 64, rank: int = 64) -> None:
        super().__init__()
        if design not in DESIGNS:
            raise ValueError(f"unknown head design {design!r}; choose from {', '.join(DESIGNS)}")
        self.dim, self.design, self.hidden, self.rank = dim, design, hidden, rank
        self.relevance_head: nn.Module = (
            ResidualRelevanceHead(dim, hidden, rank) if design == "residual" else PaperRelevanceHead(dim, hidden)
        )
        self.risk_head = RiskHead(dim, hidden)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, e_q: torch.Tensor, e_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.relevance_head(e_q, e_t), self.risk_head(e_t)


@dataclass
class _Weights:
    """Head weights as float32 torch tensors, detached, for inference."""

    l1_q: torch.Tensor
    l1_b: torch.Tensor
    l2_w: torch.Tensor
    l2_b: torch.Tensor


class HeadScorer:
    """Factorised full-pool scoring of a :class:`DualHead` over one registry.

    ``relevance(Q)`` returns f_rel [Q, N] (or [Q, M] over per-query candidates) and
    ``f_risk`` [N] is computed once. The tool-side projections cost one pass over the
    registry; per query the work is O(N * (hidden + rank)) plus the cosine.
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
        model = model.eval()
        with torch.no_grad():
            self.tool_emb = torch.from_numpy(np.ascontiguousarray(tool_emb, dtype=np.float32))
            rel = model.relevance_head
            d = model.dim
            w1 = rel.l1.weight.detach().float()
            self.w = _Weights(w1[:, :d].contiguous(), rel.l1.bias.detach().float(), rel.l2.weight.detach().float()[0], rel.l2.bias.detach().float()[0])
            self.tool_hidden = (self.tool_emb @ w1[:, d:].T).contiguous()  # E_t W_t^T, [N, hidden]
            self.f_risk = model.risk_head(self.tool_emb).numpy().astype(np.float32)
            if self.design == "residual":
                self.scale = float(rel.log_scale.exp())
                self.bias = float(rel.bias)
                self.beta = float(rel.residual_weight)
                self.u = rel.u.weight.detach().float()  # [r, d]
                self.v = rel.v.weight.detach().float()  # [r, d]
                self.tool_v = (self.tool_emb @ self.v.T).contiguous()  # [N, r]
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

    def logits(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None) -> np.ndarray:
        """Pre-sigmoid relevance [Q, N] (or [Q, M] over ``candidates``). ``cos`` may pass
        the first stage's cosine matrix in the same shape to avoid recomputing it."""
        q = np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32)
        if cos is not None:
            cos = np.atleast_2d(np.asarray(cos, dtype=np.float32))
        # numpy (BLAS) for the small query-side products: torch's CPU matmul is slower here.
        hq = q @ self.w.l1_q.numpy().T + self.w.l1_b.numpy()  # W_q e_q + b, [Q, H]
        uq = q @ self.u.numpy().T if self.design == "residual" else None  # U e_q, [Q, r]
        with torch.no_grad():
            if candidates is None:
                return self._logits_full(q, hq, uq, cos)
            return self._logits_candidates(q, hq, uq, np.asarray(candidates), cos)

    def _combine(self, out: np.ndarray, bil: np.ndarray | None, cs: np.ndarray | None) -> None:
        """out (the MLP term, without b2) -> scale * cos + beta * (bilinear + MLP) + bias."""
        out += np.float32(self.w.l2_b)
        if self.design == "residual":
            out += bil
            out *= np.float32(self.beta)
            out += np.float32(self.scale) * cs
            out += np.float32(self.bias)

    def _logits_full(self, q: np.ndarray, hq: np.ndarray, uq: np.ndarray | None, cos: np.ndarray | None) -> np.ndarray:
        n, hidden = self.tool_hidden.shape
        out = np.empty((q.shape[0], n), dtype=np.float32)
        fold = None
        if self.design == "residual" and cos is None:
            # scale * q.e + beta * (U q).(V e) = (scale * q + beta * V^T U q) . e: the cosine
            # and the bilinear term are one product with the tool embeddings, so E_t V^T is
            # not read at all (a quarter less memory traffic per query at d = 384).
            fold = np.float32(self.scale) * q + np.float32(self.beta) * (uq @ self.v.numpy())
        step = max(1, min(n, self.block_elems // hidden))
        workers = max(1, min(int(self.workers), -(-n // step)))
        if workers == 1 or n < self.parallel_min_tools:
            self._logits_range(0, n, step, out, hq, uq, cos, fold)
            return out
        # Contiguous tool ranges, one per thread: no synchronisation inside a call, so a busy
        # machine slows it down gracefully (per-op thread barriers do not).
        cuts = [min(n, round(n * k / workers / step) * step) for k in range(workers + 1)]
        cuts[-1] = n
        pool = self._pool(workers)
        jobs = [pool.submit(self._logits_range, a, b, step, out, hq, uq, cos, fold) for a, b in itertools.pairwise(cuts) if b > a]
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

    def _logits_range(
        self, lo: int, hi: int, step: int, out: np.ndarray, hq: np.ndarray, uq: np.ndarray | None,
        cos: np.ndarray | None, fold: np.ndarray | None,
    ) -> None:
        """Logits of tools [lo, hi) into out[:, lo:hi]."""
        hidden = self.tool_hidden.shape[1]
        th, w2 = self.tool_hidden, self.w.l2_w.numpy()
        buf_t = self._work_buffer(step, hidden)
        buf = buf_t.numpy()
        residual = self.design == "residual"
        te = self.tool_emb.numpy()
        tv = self.tool_v.numpy() if residual else None
        # Tool blocks outermost, so each block of E_t (and E_t W_t^T, E_t V^T) is read from
        # memory once for the whole batch: the linear terms as one matrix product per block
        # over all queries, the MLP per query on the block while it sits in cache. torch for
        # the elementwise add/ReLU (several times faster than numpy's maximum here), BLAS for
        # the products.
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
                elif residual:
                    self._combine(blk, uq @ tv[c:e].T, cos[:, c:e])
                else:
                    self._combine(blk, None, None)

    def _logits_candidates(self, q: np.ndarray, hq: np.ndarray, uq: np.ndarray | None, cand: np.ndarray, cos: np.ndarray | None) -> np.ndarray:
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
                bil = cs = None
                if residual:
                    bil = np.einsum("qmr,qr->qm", self.tool_v.numpy()[idx], uq[a:b])
                    cs = np.einsum("qmd,qd->qm", self.tool_emb.numpy()[idx], q[a:b]) if cos is None else cos[a:b, c:e]
                self._combine(o, bil, cs)
        return out

    def relevance(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None) -> np.ndarray:
        """f_rel in (0, 1): [Q, N], or [Q, M] over per-query ``candidates``."""
        z = self.logits(query_emb, candidates, cos=cos)
        # 1 / (1 + exp(-z)) in place: a million-tool row allocates nothing more. exp overflows
        # to inf for z < -88, and 1 / inf = 0 is the right limit.
        np.negative(z, out=z)
        with np.errstate(over="ignore"):
            np.exp(z, out=z)
        z += np.float32(1.0)
        return np.reciprocal(z, out=z)

    def risk(self, candidates: np.ndarray | None = None) -> np.ndarray:
        return self.f_risk if candidates is None else self.f_risk[candidates]

    def scores(self, query_emb: np.ndarray, lam: float, candidates: np.ndarray | None = None) -> np.ndarray:
        """s = f_rel - lambda * f_risk (Eq. 6)."""
        return self.relevance(query_emb, candidates) - np.float32(lam) * self.risk(candidates)
