"""The heads as PyTorch modules, for training (:mod:`riskrank.heads` has the design and the
NumPy inference every served path uses; a trained :class:`DualHead` becomes
:class:`riskrank.heads.HeadWeights` by :meth:`DualHead.weights`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from riskrank.heads import HeadWeights, state_shapes


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
    (:data:`riskrank.heads.PENALTIES`; ``p_risky`` adds the classifier head)."""

    def __init__(self, dim: int, design: str = "residual", hidden: int = 64, rank: int = 64, *,
                 lexical: tuple[str, ...] = (), penalty: str = "paper") -> None:
        super().__init__()
        state_shapes(dim, design, hidden, rank, len(lexical), penalty)  # the head block's checks, in one place
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

    def weights(self) -> HeadWeights:
        """The weights as NumPy arrays (a copy), under the state dict's names: what inference
        and the checkpoint read."""
        arrays = {k: v.detach().float().cpu().numpy().copy() for k, v in self.state_dict().items()}
        return HeadWeights.from_state(self.dim, self.design, self.hidden, self.rank, self.lexical, self.penalty, arrays)
