"""The context stage: expose a risky tool only when the task needs one.

Strict controls (a large lambda, the rule filter) also hold back the risky tools a task
genuinely needs (the paper's own limitation, Section 6 and Table 5). The training queries
carry the signal that decides it: whether a task's gold tools include one with r >= 3. Two
parts:

- the **need head** ``f_need(q)``: a logistic regression giving P(the task needs a tool with
  r >= 3). Its features are the query embedding (``emb``) and the predicted risk of the
  task's first-stage candidates (``cand``: the risk score's max over the top 1, 3 and 5 and
  its mean over the top 5 and 10). Candidate risk is registry-agnostic (a new registry's
  risky tools are found by the risk head), the embedding learns the phrasing of risky asks.
  It is trained and validated by :func:`riskrank.training.train_need_head`; here it only
  predicts (numpy, no torch, no sklearn at inference).
- the **policy** (:func:`apply_context`), per task: the risk penalty and the rule filter's
  risk cap depend on the need. A task whose need is below the threshold ``tau`` is ranked
  with the hold-back penalty ``lam_hold`` (the pipeline's lambda) and, with the rule filter, a
  risk cap of 0 (stricter than the rule filter's usual 1). A hard hold without the filter
  (every predicted-risky tool below every safe one) was measured and dropped: it also holds
  back the gold tools the risk head over-rates, and cost UltraTool 0.05 NDCG@5. A task at or
  above it is ranked with the lighter ``lam_need``, the risk cap ``cap_need`` (with the rule
  filter: 1, 2 or 3 risky tools in the top-k, a task may need more than one; without it,
  none), and its most relevant predicted-risky tool is
  admitted, with a slot of the top-k, when its relevance is at most ``margin`` logits below
  the best safe alternative's (a negative margin: when it beats it by that much; None:
  always).

tau, margin, the cap and both lambdas are chosen on validation queries by
:func:`riskrank.training.choose_context`; each decision is returned with its evidence
(:class:`ContextDecisions`), so a response can say why a risky tool was admitted or withheld.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riskrank.errors import CheckpointError

#: The feature groups a need head may read.
NEED_FEATURES = ("emb", "cand")
#: The first-stage depths the candidate-risk features read: max over the top 1, 3, 5; mean over 5, 10.
CANDIDATE_MAX = (1, 3, 5)
CANDIDATE_MEAN = (5, 10)
N_CANDIDATE_FEATURES = len(CANDIDATE_MAX) + len(CANDIDATE_MEAN)
#: The context pipelines (mode names) and their rule-free base.
CONTEXT_PIPELINES = ("core+graph+context", "core+graph+context+rule")


def candidate_features(first: np.ndarray, risk: np.ndarray) -> np.ndarray:
    """[Q, 5] candidate-risk features: ``risk`` ([L] or [Q, L], the predicted risk score of
    each scored tool) over the first-stage ranking of ``first`` [Q, L]."""
    from riskrank.first_stage import top_m

    first = np.atleast_2d(np.asarray(first, dtype=np.float32))
    depth = min(max(*CANDIDATE_MAX, *CANDIDATE_MEAN), first.shape[1])
    top = top_m(first, depth)
    risk = np.asarray(risk, dtype=np.float32)
    r = risk[top] if risk.ndim == 1 else np.take_along_axis(risk, top, axis=1)
    cols = [r[:, : min(k, depth)].max(axis=1) for k in CANDIDATE_MAX] + [r[:, : min(k, depth)].mean(axis=1) for k in CANDIDATE_MEAN]
    return np.stack(cols, axis=1).astype(np.float32)


def need_features(features: tuple[str, ...], query_emb: np.ndarray, first: np.ndarray, risk: np.ndarray) -> np.ndarray:
    """The need head's input [Q, F] for its feature groups, in :data:`NEED_FEATURES` order."""
    cols = []
    if "emb" in features:
        cols.append(np.atleast_2d(np.asarray(query_emb, dtype=np.float32)))
    if "cand" in features:
        cols.append(candidate_features(first, risk))
    return np.hstack(cols)


@dataclass
class NeedHead:
    """f_need(q) = sigmoid(((x - mean) / scale) . w + b) over :func:`need_features`.
    ``info`` holds how it was chosen (the C, the feature set, validation AUC, counts)."""

    features: tuple[str, ...]
    w: np.ndarray
    b: float
    mean: np.ndarray
    scale: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.w = np.asarray(self.w, dtype=np.float32).reshape(-1)
        self.mean = np.asarray(self.mean, dtype=np.float32).reshape(-1)
        self.scale = np.asarray(self.scale, dtype=np.float32).reshape(-1)
        if not self.features or set(self.features) - set(NEED_FEATURES):
            raise CheckpointError(f"need head features must be from {', '.join(NEED_FEATURES)}, got {list(self.features)}")
        if not (self.w.shape == self.mean.shape == self.scale.shape):
            raise CheckpointError(f"need head weights have shapes {self.w.shape}, {self.mean.shape}, {self.scale.shape}")
        if not (np.isfinite(self.w).all() and np.isfinite(self.mean).all() and np.isfinite(self.scale).all()
                and np.isfinite(self.b)) or (self.scale <= 0).any():
            raise CheckpointError("need head weights are not finite (or a scale is not positive)")

    def input_dim(self, emb_dim: int) -> int:
        return (emb_dim if "emb" in self.features else 0) + (N_CANDIDATE_FEATURES if "cand" in self.features else 0)

    def predict_features(self, x: np.ndarray) -> np.ndarray:
        z = ((np.asarray(x, dtype=np.float32) - self.mean) / self.scale) @ self.w + np.float32(self.b)
        return (1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))).astype(np.float32)

    def predict(self, query_emb: np.ndarray, first: np.ndarray, risk: np.ndarray) -> np.ndarray:
        """P(needs a risky tool) [Q]."""
        x = need_features(self.features, query_emb, first, risk)
        if x.shape[1] != self.w.shape[0]:
            raise CheckpointError(f"the need head expects {self.w.shape[0]} features, got {x.shape[1]} (another encoder?)")
        return self.predict_features(x)

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights as named arrays (``need.safetensors``)."""
        return {"w": self.w, "b": np.array([self.b], np.float32), "mean": self.mean, "scale": self.scale}

    @classmethod
    def from_arrays(cls, features: tuple[str, ...], arrays: dict[str, np.ndarray], info: dict[str, Any] | None = None) -> NeedHead:
        missing = {"w", "b", "mean", "scale"} - set(arrays)
        if missing:
            raise CheckpointError(f"need head weights lack {', '.join(sorted(missing))}")
        return cls(tuple(features), arrays["w"], float(np.asarray(arrays["b"]).reshape(-1)[0]), arrays["mean"], arrays["scale"],
                   dict(info or {}))


@dataclass
class ContextDecisions:
    """What the context stage decided per task, in the scored set's column order:
    ``need`` [Q]; ``needs_risk`` [Q] (need >= tau); ``admitted`` [Q] (the admitted risky
    tool's column, -1: none); ``best_risky`` / ``best_safe`` [Q] (the most relevant
    predicted-risky and safe tools' columns, -1: none); ``gap`` [Q] (their relevance
    difference, logits; NaN without both); ``lam`` [Q] the penalty each task ran with."""

    need: np.ndarray
    needs_risk: np.ndarray
    admitted: np.ndarray
    best_risky: np.ndarray
    best_safe: np.ndarray
    gap: np.ndarray
    lam: np.ndarray
    tau: float
    margin: float | None
    cap_need: int | None = None
    k: int = 5

    @property
    def risk_cap(self) -> np.ndarray:
        """The rule filter's risk cap per task: ``cap_need`` for a task that needs a risky tool,
        else 0 (``cap_need`` None, the pipeline without the filter: k, no cap, for a task that needs one)."""
        cap = self.k if self.cap_need is None else self.cap_need
        return np.where(self.needs_risk, cap, 0).astype(np.int64)

    def cap_text(self, q: int) -> str:
        return "no risk cap" if self.cap_need is None else f"risk cap {int(self.risk_cap[q])}"

    def why(self, q: int, admitted: bool) -> str:
        """One line: why task ``q``'s risky tool was admitted, or why a risky tool was withheld."""
        need, tau = float(self.need[q]), self.tau
        margin = "none" if self.margin is None else f"{self.margin:g}"
        lam = float(self.lam[q])
        if not self.needs_risk[q]:
            cap = ", risk cap 0" if self.cap_need is not None else ""
            return f"need {need:.2f} < threshold {tau:.2f}: the task does not need a risky tool (penalty lambda {lam:g}{cap})"
        gap = float(self.gap[q])
        gap_text = "no safe alternative" if not np.isfinite(gap) else f"relevance {gap:+.2f} logits vs the best safe tool"
        if admitted:
            return f"need {need:.2f} >= threshold {tau:.2f}; {gap_text} (margin {margin}): admitted ({self.cap_text(q)})"
        if self.admitted[q] >= 0:
            return (f"need {need:.2f} >= threshold {tau:.2f}; another risky tool was admitted "
                    f"(penalty lambda {lam:g}, {self.cap_text(q)})")
        return (f"need {need:.2f} >= threshold {tau:.2f}; {gap_text} trails by more than the margin {margin}: "
                f"not admitted (penalty lambda {lam:g}, {self.cap_text(q)})")

    def take(self, q: int) -> dict[str, Any]:
        return {"need": float(self.need[q]), "needs_risk": bool(self.needs_risk[q]), "threshold": self.tau, "margin": self.margin,
                "lambda": float(self.lam[q]),
                "risk_cap": None if self.cap_need is None else int(self.risk_cap[q]),
                "relevance_gap": None if not np.isfinite(self.gap[q]) else round(float(self.gap[q]), 4)}


def apply_context(
    need_scores: np.ndarray, hold_scores: np.ndarray, rel: np.ndarray, risky: np.ndarray, need: np.ndarray, tau: float,
    margin: float | None, k: int, lam_need: float = 0.0, lam_hold: float = 0.0, cap_need: int | None = None,
) -> tuple[np.ndarray, ContextDecisions]:
    """The policy over one batch (module docstring). ``need_scores`` / ``hold_scores`` [Q, L]:
    the pipeline's scores (after the graph) with the penalty of a task that needs a risky
    tool (``lam_need``) and of one that does not (``lam_hold``); ``rel`` [Q, L]: the
    relevance (logits, no penalty) the admission compares; ``risky`` [L] or [Q, L]:
    predicted-risky flags; ``need`` [Q]; ``cap_need`` the risk cap of a task that needs a
    risky tool (None: none; the rule filter enforces it, :attr:`ContextDecisions.risk_cap`).
    Returns each task's scores (an admitted tool raised, when it must, just above the k-th
    other tool) and the decisions."""
    need_scores = np.atleast_2d(np.asarray(need_scores, dtype=np.float32))
    hold_scores = np.atleast_2d(np.asarray(hold_scores, dtype=np.float32))
    rel = np.atleast_2d(np.asarray(rel, dtype=np.float32))
    q, n = need_scores.shape
    risky = np.broadcast_to(np.asarray(risky, dtype=bool), (q, n))
    need = np.asarray(need, dtype=np.float32).reshape(q)
    needs = need >= np.float32(tau)
    rows = np.arange(q)
    r_rel = np.where(risky, rel, -np.inf)
    s_rel = np.where(risky, -np.inf, rel)
    best_risky = np.where(risky.any(axis=1), r_rel.argmax(axis=1), -1)
    best_safe = np.where((~risky).any(axis=1), s_rel.argmax(axis=1), -1)
    with np.errstate(invalid="ignore"):
        gap = np.where((best_risky >= 0) & (best_safe >= 0), r_rel[rows, best_risky] - s_rel[rows, best_safe], np.nan)
    ok_gap = np.ones(q, bool) if margin is None else ~(gap < -np.float32(margin))  # NaN (no safe tool) admits
    admitted = np.where(needs & (best_risky >= 0) & ok_gap, best_risky, -1)
    out = np.where(needs[:, None], need_scores, hold_scores)
    has = admitted >= 0
    if has.any() and n > k:
        # The admitted tool takes a slot: just above the k-th best of the other tools.
        others = np.where(np.arange(n)[None, :] == admitted[:, None], -np.inf, out)
        kth = -np.partition(-others, k - 1, axis=1)[:, k - 1]
        lift = kth + np.float32(1e-4) * (1.0 + np.abs(kth))
        cur = out[rows, np.maximum(admitted, 0)]
        raise_to = np.where(has & (cur <= kth), lift, cur)
        out[rows[has], admitted[has]] = raise_to[has]
    lam = np.where(needs, np.float32(lam_need), np.float32(lam_hold)).astype(np.float32)
    return out, ContextDecisions(need, needs, admitted, best_risky, best_safe, gap, lam, float(tau), margin,
                                 None if cap_need is None else int(cap_need), int(k))
