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
cosine the first stage computes anyway, instead of O(N * 2d * 64).
"""

from __future__ import annotations

import math
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

    # Elements of the [q, n, hidden] activation block processed at once (bounds memory).
    block_elems = 1 << 22

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
                self.tool_v = (self.tool_emb @ rel.v.weight.detach().float().T).contiguous()  # [N, r]

    @property
    def n_tools(self) -> int:
        return int(self.tool_emb.shape[0])

    def _mlp(self, hq: torch.Tensor, th: torch.Tensor) -> torch.Tensor:
        """sum_h w2_h * ReLU(hq_h + th_h) + b2, for hq [q, H] and th [q, n, H] or [n, H]."""
        if th.dim() == 2:
            th = th.unsqueeze(0)
        return torch.relu(th + hq[:, None, :]) @ self.w.l2_w + self.w.l2_b

    def logits(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None) -> np.ndarray:
        """Pre-sigmoid relevance [Q, N] (or [Q, M] over ``candidates``). ``cos`` may pass
        the first stage's cosine matrix in the same shape to avoid recomputing it."""
        q = torch.from_numpy(np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32))
        n_q = q.shape[0]
        width = self.n_tools if candidates is None else candidates.shape[1]
        out = torch.empty((n_q, width), dtype=torch.float32)
        hq = q @ self.w.l1_q.T + self.w.l1_b  # [Q, H]
        uq = q @ self.u.T if self.design == "residual" else None
        hidden = self.tool_hidden.shape[1]
        q_step = max(1, min(n_q, self.block_elems // max(1, width * hidden)))
        n_step = width if q_step > 1 else max(1, self.block_elems // hidden)
        cand_t = None if candidates is None else torch.from_numpy(np.ascontiguousarray(candidates, dtype=np.int64))
        with torch.no_grad():
            for a in range(0, n_q, q_step):
                b = min(n_q, a + q_step)
                for c in range(0, width, n_step):
                    e = min(width, c + n_step)
                    if cand_t is None:
                        th = self.tool_hidden[c:e]
                        blk = self._mlp(hq[a:b], th)
                        if self.design == "residual":
                            tv = self.tool_v[c:e]
                            bil = uq[a:b] @ tv.T
                            cs = q[a:b] @ self.tool_emb[c:e].T if cos is None else torch.from_numpy(np.ascontiguousarray(cos[a:b, c:e], dtype=np.float32))
                    else:
                        idx = cand_t[a:b, c:e]
                        blk = self._mlp(hq[a:b], self.tool_hidden[idx])
                        if self.design == "residual":
                            bil = (self.tool_v[idx] * uq[a:b, None, :]).sum(-1)
                            cs = (self.tool_emb[idx] * q[a:b, None, :]).sum(-1) if cos is None else torch.from_numpy(np.ascontiguousarray(cos[a:b, c:e], dtype=np.float32))
                    if self.design == "residual":
                        blk = self.scale * cs + self.beta * (bil + blk) + self.bias
                    out[a:b, c:e] = blk
        return out.numpy()

    def relevance(self, query_emb: np.ndarray, candidates: np.ndarray | None = None, *, cos: np.ndarray | None = None) -> np.ndarray:
        """f_rel in (0, 1): [Q, N], or [Q, M] over per-query ``candidates``."""
        z = self.logits(query_emb, candidates, cos=cos)
        return (1.0 / (1.0 + np.exp(-z, dtype=np.float32))).astype(np.float32)

    def risk(self, candidates: np.ndarray | None = None) -> np.ndarray:
        return self.f_risk if candidates is None else self.f_risk[candidates]

    def scores(self, query_emb: np.ndarray, lam: float, candidates: np.ndarray | None = None) -> np.ndarray:
        """s = f_rel - lambda * f_risk (Eq. 6)."""
        return self.relevance(query_emb, candidates) - np.float32(lam) * self.risk(candidates)


def naive_scores(model: DualHead, query_emb: np.ndarray, tool_emb: np.ndarray, lam: float) -> np.ndarray:
    """The reference implementation's way: run the heads on every concatenated (q, t) pair.
    O(Q * N * 2d * hidden); kept for equality tests and the scale benchmark."""
    model = model.eval()
    q = torch.from_numpy(np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32))
    t = torch.from_numpy(np.ascontiguousarray(tool_emb, dtype=np.float32))
    out = np.empty((q.shape[0], t.shape[0]), dtype=np.float32)
    with torch.no_grad():
        risk = model.risk_head(t)
        for i in range(q.shape[0]):
            rel = model.relevance_head(q[i].expand(t.shape[0], -1), t)
            out[i] = (rel - lam * risk).numpy()
    return out
