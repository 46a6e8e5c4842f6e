"""Training the dual-head model, and every choice made on validation queries.

Two designs (:mod:`riskrank.heads`). The ``paper`` design trains as the paper prints it:
triplets (q, t+, t-), ``L = L_rel + mu * L_risk`` with the pairwise margin loss on f_rel and
the MSE of f_risk against (r - 1) / 4 over the labelled tools of the batch (Eq. 3-5). The
``residual`` design (riskrank's) trains its parts separately:

* the relevance head on its first stage (the hybrid fusion, or the cosine for the dense head):
  pairwise margin loss on sigmoid(logit), 10 negatives per positive, all from the first
  stage's top-100 minus gold (random when that pool is empty), early-stopped on validation
  NDCG@5 with epoch 0 (= the first stage itself) a candidate. Adam in two parameter groups:
  the scale, bias and lexical weights at ``lexical_lr`` (0.1; at 1e-3 they barely move in the
  few hundred steps a benchmark gives: Seal-Tools rel_only 0.842 vs 0.873), the embedding
  residuals at ``lr``;
* the risk heads on every labelled tool, 10 epochs: f_risk regressed on (r - 1) / 4 (the
  predicted levels) and, for the ``p_risky`` penalty, a classifier of r >= 3; both weighted by
  inverse class (level) frequency, because 1.8% of Seal-Tools tools are at r >= 3;
* the same risk heads cross-fitted over the tools (``risk_folds`` folds, stratified by level):
  each tool's held-out score comes from heads that never saw its label. They give the
  held-out AUC (r >= 3 vs < 3) that says whether the risk head learned anything, and the
  honest predicted levels of the experiments' ``_pred`` rows.

Validation is split by query, never by triplet. :func:`choose_inference`, the one function
that chooses anything, picks (on validation queries only; test queries never choose
anything): the fusion of the hybrid first stage, the residual weight beta, lambda and alpha
per pipeline, the relevance floor ``min_score``, and the risk-label-penalty baseline's lambda.
:func:`fit` is the whole procedure (split, fusion, heads, graph, choices); checkpoints are
:mod:`riskrank.checkpoint`'s.

Lambda rules (``TrainConfig.selection`` for the pipelines without the rule filter,
``rule_selection`` for those with it), on validation queries only:

* ``budget:R``: an exposure budget relative to the dense first stage. Among the lambdas whose
  RVR@5 is at most R times the RVR@5 of the dense ranking of the same validation queries,
  take the best NDCG@5; if none meets the budget, the lambda with the lowest RVR@5. "Show the
  agent at most R of the risky tools plain retrieval would" is a policy an operator can state;
  the relevance cost is then measured. Defaults: R = 0.65 without the rule filter, 0.40 with
  it (the rule filter at lambda = 0 already sits near the looser budget, so one R for all
  pipelines leaves the rule pipeline at lambda = 0).
* ``ucb:R``: the same budget on the upper one-standard-error bound of validation RVR@5
  (validation sets with few risky slots are weak evidence that a lambda meets the budget);
  stricter per seed, at a relevance cost (docs/benchmarks.md).
* ``utility:W``: maximise NDCG@5 - W * RVR@5.

Differences the validation queries cannot resolve are not taken as evidence: the
one-standard-error rule (Breiman et al., 1984) picks the largest lambda (the most
conservative setting) whose score is within one paired standard error of the best, and keeps
graph smoothing (alpha > 0) only when its paired NDCG@5 gain over alpha = 0 exceeds one
standard error. ``tolerance`` may instead give a fixed relative tolerance for lambda.

Every random source (torch init, negative sampling, batch order, validation split, tool
folds) is seeded, so one seed reproduces bit for bit on CPU. Training reads precomputed
embeddings and lexical evidence: each distinct text is encoded once.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from riskrank.errors import RiskrankError
from riskrank.first_stage import (
    LEXICAL_FEATURES,
    Fusion,
    LexicalEvidence,
    RelevanceInputs,
    fusion_grid,
    normalise,
    pin_named,
    rank,
    ranks,
    relevance_inputs,
    top_m,
)
from riskrank.graph import NORMALISATIONS, GraphConfig, ToolGraph
from riskrank.heads import DESIGNS, PENALTIES, DualHead, HeadScorer, RiskHead
from riskrank.metrics import ndcg_at_k, rvr_at_k
from riskrank.registry import ToolRegistry
from riskrank.risk import RISKY_LEVEL, label_risk, level_from_score, normalised_risk
from riskrank.rules import FILL_POLICIES, PAPER_FILL, RuleConfig, RuleFilter

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


@dataclass
class TrainResult:
    model: DualHead
    config: TrainConfig
    lam: float
    history: list[dict[str, float]]
    validation: dict[str, Any]
    counts: dict[str, int]
    seconds: float
    warnings: list[str] = field(default_factory=list)
    fusion: Fusion | None = None
    risk_quality: dict[str, Any] = field(default_factory=dict)
    """The risk head's held-out check (:func:`risk_quality`)."""
    crossfit: dict[str, np.ndarray] = field(default_factory=dict)
    """Per tool, from risk heads that never saw its label: ``level_score``, ``p_risky`` (the
    penalty, p_risky penalty only), ``levels`` and ``fold``."""
    need_head: Any = None
    """The need head (:class:`riskrank.context.NeedHead`), trained by :func:`fit` when it has
    validation queries; None otherwise."""


def split_validation(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, validation positions): a seeded split by query."""
    order = np.random.default_rng(seed + 7919).permutation(n)
    n_val = round(n * fraction) if fraction > 0 else 0
    if fraction > 0 and n >= 10:
        n_val = max(n_val, 1)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _pairs(gold: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    q = np.concatenate([np.full(len(g), i) for i, g in enumerate(gold)]).astype(np.int64)
    t = np.concatenate(gold).astype(np.int64)
    return q, t


def _sample_negatives(
    rng: np.random.Generator, pair_q: np.ndarray, gold: list[np.ndarray], hard: np.ndarray | None,
    n_tools: int, k: int, sampling: str,
) -> np.ndarray:
    """[P, k] negatives per positive; never a gold tool of the pair's query.
    ``hard`` is the first-stage top-pool per query with gold removed (-1 padded)."""
    n_pairs = len(pair_q)
    neg = rng.integers(0, n_tools, size=(n_pairs, k))
    if sampling != "random" and hard is not None:
        pool = hard[pair_q]  # [P, pool]
        sizes = (pool >= 0).sum(axis=1)
        pick = (rng.random((n_pairs, k)) * np.maximum(sizes, 1)[:, None]).astype(np.int64)
        hard_neg = np.take_along_axis(pool, pick, axis=1)
        use_hard = sizes[:, None] > 0
        if sampling == "mixed":
            use_hard = use_hard & (rng.random((n_pairs, k)) < 0.5)
        neg = np.where(use_hard & (hard_neg >= 0), hard_neg, neg)
    # Resample the (rare) random negatives that hit a gold tool.
    for _ in range(100):
        bad = np.array([np.isin(neg[i], gold[pair_q[i]]).any() for i in range(n_pairs)])
        if not bad.any():
            break
        rows = np.flatnonzero(bad)
        for i in rows:
            m = np.isin(neg[i], gold[pair_q[i]])
            neg[i, m] = rng.integers(0, n_tools, size=int(m.sum()))
    return neg


def _hard_pool(first_stage: np.ndarray, gold: list[np.ndarray], pool: int) -> np.ndarray:
    """The first stage's top-``pool`` per query (scores [Q, N]) with gold removed, -1 padded."""
    idx = top_m(first_stage, pool)
    out = np.full_like(idx, -1)
    for i, g in enumerate(gold):
        keep = idx[i][~np.isin(idx[i], g)]
        out[i, : len(keep)] = keep
    return out


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


def _se(v: np.ndarray | None) -> float:
    return float(np.std(v, ddof=1) / np.sqrt(len(v))) if v is not None and len(v) > 1 else 0.0


def choose_lambda(
    rows: list[dict[str, float]], rule: str, reference_rvr: float, tolerance: float | str = "1se",
    per_query: dict[float, tuple[np.ndarray, np.ndarray]] | None = None,
) -> float:
    """Apply a selection rule to per-lambda validation rows (keys lam, ndcg@5, rvr@5); see
    the module docstring. ``per_query`` maps lambda -> (NDCG@5 [Q], RVR@5 [Q]) for the
    one-standard-error rule (and the ``ucb`` bound); without it ``1se`` degrades to exact
    ties."""
    kind, x = parse_selection(rule)

    def value(r: dict[str, float]) -> float:
        return r["ndcg@5"] - x * r["rvr@5"] if kind == "utility" else r["ndcg@5"]

    def per_q(lam: float) -> np.ndarray | None:
        if per_query is None or lam not in per_query:
            return None
        nd, rv = per_query[lam]
        return nd - x * rv if kind == "utility" else nd

    def exposure(r: dict[str, float]) -> float:
        if kind != "ucb":
            return r["rvr@5"]
        return r["rvr@5"] + _se(per_query[r["lam"]][1] if per_query and r["lam"] in per_query else None)

    pool = rows
    if kind in ("budget", "ucb"):
        pool = [r for r in rows if exposure(r) <= x * reference_rvr + 1e-12]
        if not pool:
            return float(min(rows, key=lambda r: (round(exposure(r), 10), -r["ndcg@5"], r["lam"]))["lam"])
    best = max(pool, key=lambda r: (round(value(r), 10), -r["lam"]))
    chosen = best["lam"]
    for r in pool:
        if r["lam"] <= chosen:
            continue
        if tolerance == "1se":
            a, b = per_q(r["lam"]), per_q(best["lam"])
            slack = _se(a - b) if a is not None and b is not None else 0.0
        else:
            slack = float(tolerance) * abs(value(best))
        if value(r) >= value(best) - slack - 1e-12:
            chosen = r["lam"]
    return float(chosen)


def lambda_curve(
    relevance: np.ndarray, f_risk: np.ndarray, gold: list[np.ndarray], risk_levels: np.ndarray, lam_grid: tuple[float, ...],
    per_query: dict[float, tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[dict[str, float]]:
    """NDCG@5 and RVR@5 of s = relevance - lambda * f_risk for each lambda of the grid;
    per-query values go into ``per_query`` when a dict is given."""
    rows = []
    for lam in lam_grid:
        ranking = rank(relevance - np.float32(lam) * f_risk)[:, :5]
        nd, rv = ndcg_at_k(ranking, gold), rvr_at_k(ranking, risk_levels)
        if per_query is not None:
            per_query[float(lam)] = (nd, rv)
        rows.append({"lam": float(lam), "ndcg@5": float(nd.mean()), "rvr@5": float(rv.mean())})
    return rows


# -- validation choices -------------------------------------------------------------------------------
@dataclass
class Validation:
    """The validation queries of one fit: embeddings, gold and (for the hybrid head and the
    named-tool rule) their lexical evidence over the full pool."""

    query_emb: np.ndarray
    gold: list[np.ndarray]
    lexical: LexicalEvidence | None = None


def choose_fusion(cos: np.ndarray, lexical: LexicalEvidence, gold: Sequence[np.ndarray],
                  record: dict[str, Any] | None = None) -> Fusion:
    """The hybrid first stage's rule and weight: the best mean NDCG@5 over
    :func:`riskrank.first_stage.fusion_grid` on the given queries (ties to the smaller lexical
    weight, then the grid's order: convex min-max, convex z, RRF by k). The same arithmetic as
    :class:`riskrank.first_stage.Fusion`, with the normalisations and ranks computed once."""
    gold = list(gold)
    bm = lexical.bm25
    rows = []
    normed = {n: (normalise(cos, n), normalise(bm, n)) for n in ("minmax", "z")}
    rc, rb = ranks(cos), ranks(bm)
    has_lex = bm > 0
    for i, fu in enumerate(fusion_grid()):
        w = np.float32(fu.weight)
        if fu.rule == "convex":
            c, b = normed[fu.norm]
            h = (1 - w) * c + w * b
        else:
            k = np.float32(fu.k)
            h = (1 - w) / (k + rc) + w * np.where(has_lex, 1.0 / (k + rb), 0.0)
        rows.append((float(ndcg_at_k(top_m(h, 5), gold).mean()), fu, i))
    best = max(rows, key=lambda r: (round(r[0], 10), -r[1].weight, -r[2]))
    if record is not None:
        record["fusion_grid"] = [{**fu.to_dict(), "ndcg@5": nd} for nd, fu, _ in rows]
        record["fusion"] = {**best[1].to_dict(), "ndcg@5": best[0], "n_queries": len(gold)}
    return best[1]


def choose_inference(
    val_query_emb: np.ndarray, val_gold: list[np.ndarray], tool_emb: np.ndarray, risk_levels: np.ndarray, cfg: TrainConfig,
    *, model: DualHead | None = None, graph: ToolGraph | None = None, alpha_grid: Sequence[float] = DEFAULT_ALPHA_GRID,
    normalisations: Sequence[str] = NORMALISATIONS, label_risk: np.ndarray | None = None,
    record: dict[str, Any] | None = None, lexical: LexicalEvidence | None = None, fusion: Fusion | None = None,
    choose_fusion_on: LexicalEvidence | None = None, perm_counts: np.ndarray | None = None,
    predicted_levels: np.ndarray | None = None,
) -> dict[str, Any]:
    """Every inference setting riskrank chooses, chosen here and only here, on the given
    (validation) queries only, in this order:

    0. ``fusion`` (with ``choose_fusion_on``, their lexical evidence): the hybrid first
       stage's rule and weight (:func:`choose_fusion`). The fusion has no trained parameter,
       so :func:`fit` calls this step before training, on all the training queries.
    1. ``residual_weight`` (residual design, with ``model``): the beta of the best validation
       NDCG@5; ties go to the smaller beta. It is set on the model.
    2. per pipeline (with ``model``; :data:`PIPELINES`, and :data:`CANDIDATE_PIPELINES` over
       each top-M of ``cfg.candidate_pipelines``), on s = relevance - lambda * penalty with
       every tool a task names first: for each lambda of ``cfg.lam_grid``, alpha and the
       graph normalisation of the best NDCG@5 (with ``graph``; kept only when its paired gain
       over alpha = 0 exceeds one standard error); then lambda by ``cfg.selection`` (without
       the rule filter) or ``cfg.rule_selection`` (with it; the rule filter needs
       ``perm_counts``, and ``core+graph+rule_pred`` reads ``predicted_levels``), against the
       dense RVR@5 of the same queries. ``lam``, ``alpha`` and ``normalisation`` are those of
       ``core`` and ``core+graph`` (the retriever's defaults), ``pipelines`` all of them.
    3. ``min_score`` (with ``model``): the relevance floor on f_rel,
       :func:`relevance_floor` of the validation gold tools' f_rel.
    4. ``label_lam`` (with ``label_risk``): the ``cfg.selection`` rule for the dense
       risk-label-penalty baseline, cos - lambda * label_risk, against lambda = 0.

    Returns the chosen values; every grid goes into ``record`` (a TrainResult's
    ``validation``) so a checkpoint or a report can show why."""
    record = record if record is not None else {}
    chosen: dict[str, Any] = {}
    cos = np.atleast_2d(val_query_emb) @ np.asarray(tool_emb, dtype=np.float32).T
    if choose_fusion_on is not None:
        chosen["fusion"] = choose_fusion(cos, choose_fusion_on, val_gold, record)
    if model is not None:
        inputs = relevance_inputs(cos, lexical, fusion) if model.lexical else relevance_inputs(cos)
        if model.design == "residual":
            grid = []
            for beta in cfg.residual_grid:
                model.relevance_head.residual_weight.fill_(beta)
                grid.append({"beta": float(beta), "ndcg@5": _val_ndcg(model, tool_emb, val_query_emb, val_gold, inputs)})
            best = max(grid, key=lambda r: (round(r["ndcg@5"], 10), -r["beta"]))
            model.relevance_head.residual_weight.fill_(best["beta"])
            record["residual_grid"] = grid
            record["residual_weight"] = chosen["residual_weight"] = best["beta"]
        scorer = HeadScorer(model, tool_emb)
        rel = scorer.relevance_score(val_query_emb, inputs=inputs)
        dense_rvr = float(rvr_at_k(top_m(cos, 5), risk_levels).mean())
        record["first_stage_rvr@5"] = dense_rvr
        record["selection"] = {"without_rule": cfg.selection, "with_rule": cfg.rule_selection}
        named = lexical.named if lexical is not None else None
        sets: list[tuple[str, np.ndarray | None]] = [("", None)]
        first = inputs.f0
        for m in cfg.candidate_pipelines:
            if m < scorer.n_tools:
                sets.append((f"top{m}/", top_m(first, m)))
        filters: dict[str, RuleFilter] = {}
        if perm_counts is not None:
            rc = RuleConfig(fill=cfg.rule_fill)
            filters["labels"] = RuleFilter(rc, risk_levels, perm_counts, tool_emb)
            if predicted_levels is not None:
                filters["predicted"] = RuleFilter(rc, predicted_levels, perm_counts, tool_emb)
        pipelines: dict[str, dict[str, Any]] = {}
        record["pipelines"] = {}
        for prefix, cand in sets:
            got = _choose_pipelines(rel, scorer.f_risk, cand, named, val_gold, risk_levels, cfg, graph, alpha_grid,
                                    normalisations, filters, dense_rvr, only=CANDIDATE_PIPELINES if prefix else PIPELINES)
            for name, (choice, rows) in got.items():
                pipelines[prefix + name] = choice
                record["pipelines"][prefix + name] = rows
        chosen["pipelines"] = pipelines
        chosen["lam"] = pipelines["core"]["lam"]
        record["lam_grid"] = record["pipelines"]["core"]
        record["selected"] = next(r for r in record["lam_grid"] if r["lam"] == chosen["lam"])
        g = pipelines.get("core+graph")
        if g is not None:
            chosen["alpha"], chosen["normalisation"] = g["alpha"], g["normalisation"]
        f_rel = scorer.relevance(val_query_emb, inputs=inputs)
        chosen["min_score"] = record["min_score"] = relevance_floor(f_rel, val_gold)
    if label_risk is not None:
        pq: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        rows = lambda_curve(cos, label_risk, val_gold, risk_levels, (0.0, *DEFAULT_LAM_GRID), pq)
        chosen["label_lam"] = choose_lambda(rows[1:], cfg.selection, rows[0]["rvr@5"], cfg.tolerance, pq)
    return chosen


def _choose_pipelines(
    rel: np.ndarray, penalty: np.ndarray, cand: np.ndarray | None, named: np.ndarray | None, gold: list[np.ndarray],
    risk: np.ndarray, cfg: TrainConfig, graph: ToolGraph | None, alpha_grid: Sequence[float], normalisations: Sequence[str],
    filters: dict[str, RuleFilter], dense_rvr: float, only: Sequence[str],
) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each pipeline's (choice, per-lambda rows) over one scored set (the full pool, or
    ``cand`` [Q, M]); see :func:`choose_inference`, step 2."""
    if cand is not None:
        rel = np.take_along_axis(rel, cand, axis=1)
        penalty = penalty[cand]
        named = np.take_along_axis(named, cand, axis=1) if named is not None else None

    def tools(local: np.ndarray) -> np.ndarray:
        return local if cand is None else np.take_along_axis(cand, local, axis=1)

    def top5(s: np.ndarray) -> np.ndarray:
        return tools(top_m(pin_named(s, named), 5))

    def metrics(order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ndcg_at_k(order, gold), rvr_at_k(order, risk)

    per: dict[str, dict[float, tuple[np.ndarray, np.ndarray]]] = {p: {} for p in only}
    graph_choice: dict[float, tuple[float, str]] = {}
    graph_rows: dict[float, dict[str, Any]] = {}
    for lam in cfg.lam_grid:
        s = rel - np.float32(lam) * penalty
        base = metrics(top5(s))
        if "core" in per:
            per["core"][lam] = base
        smoothed = s
        if graph is not None and any("graph" in p for p in only):
            best = (base, 0.0, normalisations[0], s)
            best_key = (round(float(base[0].mean()), 10), 0.0)
            for norm in normalisations:
                for a in alpha_grid:
                    if a <= 0:
                        continue
                    sm = graph.smooth(s, a, cand, normalisation=norm)
                    m = metrics(top5(sm))
                    key = (round(float(m[0].mean()), 10), -a)
                    if key > best_key:
                        best, best_key = (m, a, norm, sm), key
            gain = best[0][0] - base[0]
            if best[1] > 0 and not gain.mean() > _se(gain) + 1e-12:  # one standard error toward no smoothing
                best = (base, 0.0, normalisations[0], s)
            graph_choice[lam] = (best[1], best[2])
            graph_rows[lam] = {"alpha": best[1], "normalisation": best[2]}
            if "core+graph" in per:
                per["core+graph"][lam] = best[0]
            smoothed = best[3]
        else:
            graph_choice[lam] = (0.0, normalisations[0])
        for name, source, ranked in (("core+rule", "labels", s), ("core+graph+rule", "labels", smoothed),
                                     ("core+graph+rule_pred", "predicted", smoothed)):
            if name in per and source in filters:
                order, _ = filters[source].filter_scores(pin_named(ranked, named), cand, length=5)
                per[name][lam] = metrics(order)
    out: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for name, pq in per.items():
        if not pq:
            continue
        rows = [{"lam": lam, "ndcg@5": float(nd.mean()), "rvr@5": float(rv.mean()),
                 **(graph_rows.get(lam, {}) if "graph" in name else {})} for lam, (nd, rv) in pq.items()]
        rule = cfg.rule_selection if "rule" in name else cfg.selection
        lam = choose_lambda(rows, rule, dense_rvr, cfg.tolerance, pq)
        alpha, norm = graph_choice[lam] if "graph" in name else (0.0, normalisations[0])
        choice = {"lam": lam, "alpha": alpha, "normalisation": norm}
        out[name] = (choice, rows)
    return out


def relevance_floor(f_rel: np.ndarray, gold: Sequence[np.ndarray], quantile: float = MIN_SCORE_QUANTILE) -> float | None:
    """The score below which only ``quantile`` of the (query, gold tool) pairs fall: the
    relevance floor of a score scale (f_rel [Q, N] of validation queries; dense cosine or a
    relevance head). Rounded down to 4 decimals so it is a stable, printable setting; None
    without gold pairs."""
    rows = np.concatenate([np.full(len(g), i) for i, g in enumerate(gold)]) if len(gold) else np.zeros(0, int)
    cols = np.concatenate([np.asarray(g, dtype=np.int64) for g in gold]) if len(gold) else np.zeros(0, int)
    if not rows.size:
        return None
    value = float(np.quantile(f_rel[rows.astype(np.int64), cols], quantile, method="lower"))
    return float(np.floor(value * 1e4) / 1e4)


def _val_ndcg(model: DualHead, tool_emb: np.ndarray, q: np.ndarray, gold: list[np.ndarray], inputs: RelevanceInputs | None) -> float:
    scorer = HeadScorer(model, tool_emb)
    return float(ndcg_at_k(top_m(scorer.relevance(q, inputs=inputs), 5), gold).mean())


# -- the risk heads --------------------------------------------------------------------------------
def _risk_target(levels: np.ndarray, target: str) -> np.ndarray:
    if target == "levels":
        return normalised_risk(levels)
    return (levels >= RISKY_LEVEL).astype(np.float32)


def train_risk_head(tool_emb: np.ndarray, levels: np.ndarray, target: str, cfg: TrainConfig, *, seed: int | None = None) -> RiskHead:
    """A risk head trained on the labelled tools only: ``target="levels"`` regresses (r - 1)
    / 4 (MSE), ``"risky"`` classifies r >= 3 (BCE); ``cfg.risk_weighting="balanced"`` weights
    each tool by the inverse frequency of its level (its class), normalised to mean 1."""
    seed = cfg.seed if seed is None else seed
    torch.manual_seed(seed + (0 if target == "levels" else 1))
    rng = np.random.default_rng(seed + 101)
    levels = np.asarray(levels)
    idx = np.flatnonzero(levels > 0)
    head = RiskHead(tool_emb.shape[1], cfg.hidden)
    if not idx.size:
        raise RiskrankError("no tool in the registry has a risk label; the risk head cannot be trained")
    lv = levels[idx].astype(np.int64)
    key = lv if target == "levels" else (lv >= RISKY_LEVEL).astype(np.int64)
    weight = np.ones(idx.size, np.float32)
    if cfg.risk_weighting == "balanced":
        cnt = np.bincount(key, minlength=6).astype(np.float32)
        weight = 1.0 / np.maximum(cnt[key], 1.0)
        weight = (weight / weight.mean()).astype(np.float32)
    T = torch.from_numpy(np.ascontiguousarray(tool_emb[idx], dtype=np.float32))
    y = torch.from_numpy(_risk_target(lv, target))
    w = torch.from_numpy(weight)
    opt = torch.optim.Adam(head.parameters(), lr=cfg.lr)
    per_epoch = math.ceil(idx.size / cfg.batch_size)
    epochs = max(cfg.risk_epochs, math.ceil(cfg.risk_min_steps / per_epoch)) if cfg.risk_epochs else 0
    bce = torch.nn.functional.binary_cross_entropy
    for _ in range(epochs):
        order = rng.permutation(idx.size)
        for s in range(0, idx.size, cfg.batch_size):
            b = torch.from_numpy(order[s : s + cfg.batch_size])
            p = head(T[b])
            err = (p - y[b]) ** 2 if target == "levels" else bce(p, y[b], reduction="none")
            loss = (w[b] * err).sum() / w[b].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return head.eval()


def _score(head: RiskHead, tool_emb: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return head(torch.from_numpy(np.ascontiguousarray(tool_emb, dtype=np.float32))).numpy().astype(np.float32)


def tool_folds(levels: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """A fold per labelled tool, stratified by level and seeded; -1 for unlabelled tools."""
    rng = np.random.default_rng(seed + 11)
    levels = np.asarray(levels)
    fold = np.full(levels.shape, -1, dtype=np.int64)
    for lv in np.unique(levels[levels > 0]):
        ids = np.flatnonzero(levels == lv)
        rng.shuffle(ids)
        fold[ids] = (np.arange(ids.size) + rng.integers(n_folds)) % n_folds
    return fold


def crossfit_risk(tool_emb: np.ndarray, levels: np.ndarray, cfg: TrainConfig, *, penalty: bool = True) -> dict[str, np.ndarray]:
    """The risk heads cross-fitted over tools (:func:`tool_folds`): each labelled tool's
    ``level_score`` (and ``p_risky`` with ``penalty``) from heads trained with its fold's
    labels hidden; an unlabelled tool's from heads trained on every label. Also its
    ``levels`` and ``fold``."""
    levels = np.asarray(levels)
    fold = tool_folds(levels, cfg.risk_folds, cfg.seed)
    out = {"level_score": np.empty(len(levels), np.float32), "fold": fold}
    if penalty:
        out["p_risky"] = np.empty(len(levels), np.float32)
    targets = [("level_score", "levels"), *([("p_risky", "risky")] if penalty else [])]
    groups = [(f, fold == f, np.where(fold == f, 0, levels)) for f in range(cfg.risk_folds)]
    groups.append((-1, fold < 0, levels))
    for f, held, train_levels in groups:
        if not held.any():
            continue
        if not (train_levels > 0).any():
            raise RiskrankError("too few labelled tools to cross-fit the risk head")
        for key, target in targets:
            out[key][held] = _score(train_risk_head(tool_emb, train_levels, target, cfg, seed=cfg.seed + 17 * (f + 2)), tool_emb[held])
    out["levels"] = level_from_score(out["level_score"])
    return out


def risk_auc(levels: np.ndarray, score: np.ndarray) -> float | None:
    """ROC AUC of ``score`` for r >= 3 vs r < 3 over the labelled tools; None when a class
    is empty."""
    levels = np.asarray(levels)
    lab = levels > 0
    y = levels[lab] >= RISKY_LEVEL
    if y.all() or not y.any():
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, np.asarray(score)[lab]))


def risk_quality(levels: np.ndarray, level_score: np.ndarray, crossfit: dict[str, np.ndarray], cfg: TrainConfig) -> dict[str, Any]:
    """Whether the risk head learned: held-out AUC (r >= 3 vs < 3) of the cross-fitted level
    head (and of p_risky), and the span of the trained head's predictions over the labelled
    tools, in levels. ``learned`` is false below ``cfg.min_risk_auc`` or
    ``cfg.min_level_span`` (or when no AUC can be measured), with the reason."""
    levels = np.asarray(levels)
    lab = levels > 0
    auc = risk_auc(levels, crossfit["level_score"])
    auc_p = risk_auc(levels, crossfit["p_risky"]) if "p_risky" in crossfit else None
    span = float(4.0 * (level_score[lab].max() - level_score[lab].min())) if lab.any() else 0.0
    reasons = []
    if auc is None:
        reasons.append("no held-out AUC: every labelled tool is on one side of level 3")
    elif auc < cfg.min_risk_auc:
        reasons.append(f"held-out AUC {auc:.2f} < {cfg.min_risk_auc:g}")
    if span < cfg.min_level_span:
        reasons.append(f"its predictions span {span:.2f} levels (< {cfg.min_level_span:g})")
    return {"heldout_auc": auc, "heldout_auc_p_risky": auc_p, "level_span": round(span, 4), "folds": cfg.risk_folds,
            "learned": not reasons, "reason": "; ".join(reasons) or None}


# -- the relevance head -----------------------------------------------------------------------------
def train_heads(
    tool_emb: np.ndarray,
    query_emb: np.ndarray,
    gold: list[np.ndarray],
    risk_levels: np.ndarray,
    config: TrainConfig | None = None,
    *,
    val_query_emb: np.ndarray | None = None,
    val_gold: list[np.ndarray] | None = None,
    progress: bool = True,
    choose: bool = True,
    lexical: LexicalEvidence | None = None,
    val_lexical: LexicalEvidence | None = None,
    fusion: Fusion | None = None,
    perm_counts: np.ndarray | None = None,
    relevance_only: bool = False,
) -> TrainResult:
    """Train the dual head on precomputed embeddings (and, for the hybrid head, the lexical
    evidence of the same queries over the registry).

    ``gold`` holds each training query's gold tool indices; ``risk_levels`` the audited level
    per tool (0 = unlabelled: such tools are excluded from the risk losses and counted).
    Without an explicit validation set, ``config.val_fraction`` of the training queries (by
    query) is held out for early stopping and, with ``choose``, for :func:`choose_inference`
    (:func:`fit` passes ``choose=False`` and makes every choice at once). The hybrid head
    needs a ``fusion``; without one it is chosen here on all the training queries.
    ``relevance_only``: stop after the relevance head (the residual design's risk heads, their
    cross-fit and the risk check are skipped: :func:`fit_context`'s fold heads are only read
    for relevance, the risk side is the fit's own).
    """
    cfg = (config or TrainConfig()).resolved(has_lexical=lexical is not None)
    t0 = time.perf_counter()
    notes: list[str] = []
    tool_emb = np.ascontiguousarray(tool_emb, dtype=np.float32)
    query_emb = np.ascontiguousarray(query_emb, dtype=np.float32)
    for name, arr in (("tool", tool_emb), ("query", query_emb)):
        if not np.isfinite(arr).all():
            raise RiskrankError(f"{name} embeddings contain NaN/inf; refusing to train")
    if query_emb.shape[1] != tool_emb.shape[1]:
        raise RiskrankError(f"query embeddings have dimension {query_emb.shape[1]}, tool embeddings {tool_emb.shape[1]}")
    hybrid = cfg.relevance == "hybrid"
    if hybrid and lexical is None:
        raise RiskrankError("the hybrid relevance head needs the training queries' lexical evidence (their texts)")
    n_tools, dim = tool_emb.shape
    risk_levels = np.asarray(risk_levels)
    keep = [i for i, g in enumerate(gold) if len(g)]
    n_skipped = len(gold) - len(keep)
    if n_skipped:
        notes.append(f"{n_skipped} training queries have no gold tool in the corpus and were skipped")
    if not keep:
        raise RiskrankError("the training split is empty (no query with a gold tool in the corpus)")
    gold = [np.asarray(gold[i], dtype=np.int64) for i in keep]
    query_emb = query_emb[keep]
    lexical = lexical.rows(keep) if lexical is not None else None
    if val_query_emb is None and cfg.val_fraction > 0:
        tr, va = split_validation(len(gold), cfg.val_fraction, cfg.seed)
        if len(tr) == 0:
            raise RiskrankError("too few training queries to hold out a validation split")
        val_query_emb, val_gold = query_emb[va], [gold[i] for i in va]
        val_lexical = lexical.rows(va) if lexical is not None else None
        query_emb, gold = query_emb[tr], [gold[i] for i in tr]
        lexical = lexical.rows(tr) if lexical is not None else None
    has_val = val_query_emb is not None and val_gold is not None and len(val_gold) > 0
    if hybrid and has_val and val_lexical is None:
        raise RiskrankError("the hybrid relevance head needs the validation queries' lexical evidence")
    labelled = risk_levels > 0
    n_unlabelled = int((~labelled).sum())
    if n_unlabelled:
        notes.append(f"{n_unlabelled} tools have no risk label: excluded from the risk losses")
        warnings.warn(notes[-1], stacklevel=2)
    if not labelled.any():
        raise RiskrankError("no tool in the registry has a risk label; the risk head cannot be trained")

    cos_tr = query_emb @ tool_emb.T
    if hybrid and fusion is None:
        both = np.concatenate([query_emb, val_query_emb]) if has_val else query_emb
        lex_both = _concat_evidence(lexical, val_lexical) if has_val else lexical
        fusion = choose_fusion(both @ tool_emb.T, lex_both, gold + (list(val_gold) if has_val else []))
    inputs_tr = relevance_inputs(cos_tr, lexical, fusion if hybrid else None)
    inputs_va = relevance_inputs(val_query_emb @ tool_emb.T, val_lexical, fusion if hybrid else None) if has_val else None

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = DualHead(dim, cfg.design, cfg.hidden, cfg.rank, lexical=LEXICAL_FEATURES if hybrid else (), penalty=cfg.penalty)
    pair_q, pair_t = _pairs(gold)
    rel_head = model.relevance_head
    if cfg.design == "residual":
        # Centre the sigmoid on the mean first-stage score of the training positives.
        center = float(inputs_tr.f0[pair_q, pair_t].mean())
        with torch.no_grad():
            rel_head.bias.fill_(-float(rel_head.log_scale.exp()) * center)
    if hybrid:
        lin = [rel_head.log_scale, rel_head.bias, rel_head.lex_w]
        rest = [p for n, p in rel_head.named_parameters() if n not in ("log_scale", "bias", "lex_w")]
        opt = torch.optim.Adam([{"params": lin, "lr": cfg.lexical_lr}, {"params": rest, "lr": cfg.lr}])
    elif cfg.design == "residual":
        opt = torch.optim.Adam(rel_head.parameters(), lr=cfg.lr)
    else:  # the paper's joint loss: both heads in one optimiser
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    hard = _hard_pool(inputs_tr.f0, gold, cfg.hard_pool) if cfg.sampling != "random" else None
    T = torch.from_numpy(tool_emb)
    Qe = torch.from_numpy(query_emb)
    F0 = torch.from_numpy(np.ascontiguousarray(inputs_tr.f0, dtype=np.float32))
    X = torch.from_numpy(np.ascontiguousarray(np.stack(inputs_tr.x, axis=-1), dtype=np.float32)) if hybrid else None
    target = torch.from_numpy(normalised_risk(np.where(labelled, risk_levels, 1)))
    lab_t = torch.from_numpy(labelled)
    tool_weight = torch.from_numpy(_level_weights(risk_levels, cfg.risk_weighting))

    def head_logit(qi: torch.Tensor, ti: torch.Tensor) -> torch.Tensor:
        if cfg.design == "paper":
            return rel_head.logit(Qe[qi], T[ti])
        return rel_head.logit(Qe[qi], T[ti], F0[qi, ti], X[qi, ti] if X is not None else None)

    history: list[dict[str, float]] = []
    best_state, best_val, best_epoch = None, -1.0, -1
    if has_val and cfg.early_stopping:
        best_val, best_epoch = _val_ndcg(model, tool_emb, val_query_emb, val_gold, inputs_va), 0
        best_state = copy.deepcopy(rel_head.state_dict())
        history.append({"epoch": 0, "loss": float("nan"), "val_ndcg@5": best_val})
    bar = tqdm(range(1, cfg.epochs + 1), desc=f"train {cfg.design} seed {cfg.seed}", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        neg = _sample_negatives(rng, pair_q, gold, hard, n_tools, cfg.negatives, cfg.sampling)
        order = rng.permutation(len(pair_q))
        tot, nb = 0.0, 0
        for s in range(0, len(order), cfg.batch_size):
            b = order[s : s + cfg.batch_size]
            qb = torch.from_numpy(pair_q[b])
            pos = torch.from_numpy(pair_t[b])
            ng = torch.from_numpy(neg[b])
            k = ng.shape[1]
            f_pos = torch.sigmoid(head_logit(qb, pos))
            f_neg = torch.sigmoid(head_logit(qb.repeat_interleave(k), ng.reshape(-1))).view(-1, k)
            loss = torch.relu(cfg.margin - f_pos[:, None] + f_neg).mean()
            if cfg.design == "paper":
                tools = torch.unique(torch.cat([pos, ng.reshape(-1)]))
                tools = tools[lab_t[tools]]
                if len(tools):
                    w = tool_weight[tools]
                    loss = loss + cfg.mu * (w * (model.risk_head(T[tools]) - target[tools]) ** 2).sum() / w.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach())
            nb += 1
        row = {"epoch": epoch, "loss": tot / max(nb, 1)}
        if has_val:
            row["val_ndcg@5"] = _val_ndcg(model, tool_emb, val_query_emb, val_gold, inputs_va)
            if cfg.early_stopping and row["val_ndcg@5"] > best_val:
                best_val, best_epoch, best_state = row["val_ndcg@5"], epoch, copy.deepcopy(rel_head.state_dict())
        history.append(row)
        bar.set_postfix({k: f"{v:.4f}" for k, v in row.items() if k != "epoch"})
    if best_state is not None:
        rel_head.load_state_dict(best_state)
    model.eval()

    if relevance_only:
        return TrainResult(model, cfg, 0.0, history, {"best_epoch": best_epoch}, {"train_queries": len(gold)},
                           time.perf_counter() - t0, notes, fusion if hybrid else None)
    # The risk heads: the residual design trains them on their own, over every labelled tool.
    penalty = cfg.penalty == "p_risky"
    if cfg.design == "residual":
        model.risk_head.load_state_dict(train_risk_head(tool_emb, risk_levels, "levels", cfg).state_dict())
        if penalty:
            model.penalty_head.load_state_dict(train_risk_head(tool_emb, risk_levels, "risky", cfg).state_dict())
    crossfit = crossfit_risk(tool_emb, risk_levels, cfg, penalty=penalty)
    quality = risk_quality(risk_levels, _score(model.risk_head, tool_emb), crossfit, cfg)
    if not quality["learned"]:
        notes.append(f"the risk head has not learned ({quality['reason']}): predicted levels will be the keyword annotator's")
    validation: dict[str, Any] = {"n_queries": len(val_gold) if has_val else 0, "best_epoch": best_epoch}
    if hybrid:
        validation["lexical_weights"] = dict(zip(LEXICAL_FEATURES, rel_head.lex_w.detach().numpy().round(4).tolist(), strict=True))
        validation["scale"] = round(float(rel_head.log_scale.detach().exp()), 4)
    lam = 0.1
    if has_val:
        if choose:
            lam = choose_inference(val_query_emb, val_gold, tool_emb, risk_levels, cfg, model=model, record=validation,
                                   lexical=val_lexical, fusion=fusion if hybrid else None, perm_counts=perm_counts,
                                   predicted_levels=crossfit["levels"] if quality["learned"] else None)["lam"]
    else:
        notes.append("no validation queries: lambda defaults to 0.1, no early stopping")
    counts = {
        "train_queries": len(gold), "val_queries": validation["n_queries"], "positive_pairs": len(pair_q),
        "skipped_queries": n_skipped, "unlabelled_tools": n_unlabelled,
    }
    return TrainResult(model, cfg, float(lam), history, validation, counts, time.perf_counter() - t0, notes,
                       fusion if hybrid else None, quality, crossfit)


def _level_weights(levels: np.ndarray, weighting: str) -> np.ndarray:
    """The paper design's per-tool weight in L_risk: 1, or the inverse frequency of its level."""
    labelled = levels > 0
    level_weight = np.ones(6, dtype=np.float32)
    if weighting == "balanced":
        counts = np.bincount(levels[labelled].astype(np.int64), minlength=6).astype(np.float32)
        level_weight = np.where(counts > 0, 1.0 / np.maximum(counts, 1.0), 0.0).astype(np.float32)
        level_weight /= level_weight[levels[labelled].astype(np.int64)].mean()
    return level_weight[np.where(labelled, levels, 0).astype(np.int64)]


def _concat_evidence(a: LexicalEvidence | None, b: LexicalEvidence | None) -> LexicalEvidence:
    from dataclasses import fields

    assert a is not None and b is not None
    return LexicalEvidence(**{f.name: np.concatenate([getattr(a, f.name), getattr(b, f.name)]) for f in fields(a)})


# -- the whole fit -------------------------------------------------------------------------------
def fit(
    tool_emb: np.ndarray, query_emb: np.ndarray, gold: Sequence[np.ndarray], registry: ToolRegistry, cfg: TrainConfig,
    graph_config: GraphConfig | None = None, *, alpha_grid: Sequence[float] = DEFAULT_ALPHA_GRID,
    normalisations: Sequence[str] = NORMALISATIONS, progress: bool = True, lexical: LexicalEvidence | None = None,
) -> tuple[TrainResult, ToolGraph, dict[str, Any]]:
    """Fusion, heads, ToolGraph and every validation choice on precomputed embeddings (and
    the queries' lexical evidence, for the hybrid head): the queries are split by query
    (:func:`validation_split`); the fusion is chosen on all of them (it has no trained
    parameter); the heads train on the training part (early-stopped on the validation part);
    the graph is built from the training part's gold tools only; and
    :func:`choose_inference` makes every other choice on the validation part.

    Returns (the heads with their lambda, the graph, the inference settings: fusion, alpha,
    normalisation, pipelines, ...)."""
    cfg = cfg.resolved(has_lexical=lexical is not None)
    graph_config = graph_config or GraphConfig()
    t0 = time.perf_counter()
    gold = [np.asarray(g, dtype=np.int64) for g in gold]
    tr, va = validation_split(len(gold), cfg)
    fusion = None
    record: dict[str, Any] = {}
    if cfg.relevance == "hybrid" and cfg.fusion is not None:
        fusion = Fusion.from_dict(cfg.fusion)
        record["fusion"] = {**fusion.to_dict(), "fixed": True}
    elif cfg.relevance == "hybrid":
        assert lexical is not None
        keep = [i for i, g in enumerate(gold) if len(g)]
        fusion = choose_inference(query_emb[keep], [gold[i] for i in keep], tool_emb, registry.risk_levels, cfg,
                                  choose_fusion_on=lexical.rows(keep), record=record)["fusion"]
    result = train_heads(
        tool_emb, query_emb[tr], [gold[i] for i in tr], registry.risk_levels, cfg,
        val_query_emb=query_emb[va] if len(va) else None, val_gold=[gold[i] for i in va] if len(va) else None,
        progress=progress, choose=False, lexical=lexical.rows(tr) if lexical is not None else None,
        val_lexical=lexical.rows(va) if lexical is not None and len(va) else None, fusion=fusion,
    )
    result.validation.update(record)
    graph = ToolGraph.build(tool_emb, [gold[i] for i in tr], registry.risk_levels, registry.permissions, graph_config)
    choice: dict[str, Any] = {"alpha": 0.1, "normalisation": graph_config.normalisation}
    if fusion is not None:
        choice["fusion"] = fusion.to_dict()
    if len(va):
        chosen = choose_inference(query_emb[va], [gold[i] for i in va], tool_emb, registry.risk_levels, cfg,
                                  model=result.model, graph=graph, alpha_grid=alpha_grid, normalisations=normalisations,
                                  record=result.validation, lexical=lexical.rows(va) if lexical is not None else None,
                                  fusion=fusion, perm_counts=registry.perm_counts,
                                  predicted_levels=predicted_levels_of(result, registry))
        result.lam = chosen["lam"]
        choice.update({"alpha": chosen["alpha"], "normalisation": chosen["normalisation"], "pipelines": chosen["pipelines"],
                       "min_score": chosen["min_score"]})
        if "residual_weight" in chosen:
            choice["residual_weight"] = chosen["residual_weight"]
        fit_context(result, graph, choice, tool_emb, query_emb, gold, tr, va, registry, cfg, lexical=lexical, fusion=fusion)
    result.validation["graph_choice"] = {"alpha": choice["alpha"], "normalisation": choice["normalisation"]}
    result.seconds = time.perf_counter() - t0
    return result, graph, choice


def predicted_levels_of(result: TrainResult, registry: ToolRegistry) -> np.ndarray:
    """The levels a ``_pred`` pipeline of this training run reads, on its own registry: the
    cross-fitted ones (no tool's level comes from a head that saw its label), or the keyword
    annotator's when the risk head has not learned."""
    from riskrank.risk import keyword_levels

    if not result.risk_quality.get("learned", True):
        return keyword_levels(registry)
    return result.crossfit["levels"]


def validation_split(n_queries: int, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The validation split every fit of ``cfg`` uses: ``cfg.val_fraction`` of the queries,
    by query, seeded by ``cfg.seed`` (:func:`split_validation`)."""
    return split_validation(n_queries, cfg.val_fraction, cfg.seed)


def label_penalty_lambda(tool_emb: np.ndarray, query_emb: np.ndarray, gold: Sequence[np.ndarray], risk_levels: np.ndarray,
                         cfg: TrainConfig) -> float:
    """The dense risk-label-penalty baseline's lambda, chosen on the validation split that
    :func:`fit` uses for the same queries and config (0 without validation queries)."""
    cfg = cfg.resolved()
    gold = [np.asarray(g, dtype=np.int64) for g in gold]
    _, va = validation_split(len(gold), cfg)
    if not len(va):
        return 0.0
    return choose_inference(query_emb[va], [gold[i] for i in va], tool_emb, risk_levels, cfg,
                            label_risk=label_risk(risk_levels))["label_lam"]


# -- cross-fitted risk levels ------------------------------------------------------------------
def crossfit_risk_levels(
    registry: ToolRegistry, query_texts: Sequence[str], gold: Sequence[np.ndarray], *, encoder: Any = None,
    n_folds: int = 5, seed: int = 42, config: Any = None, progress: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levels from the learned risk head, cross-fitted over tools: the tools are cut into
    ``n_folds`` folds; for each fold the dual head is trained on the training queries with
    that fold's labels hidden (level 0: excluded from the risk losses), and scores the fold's
    tools. Returns (levels [N], the level head's scores [N], fold per tool)."""
    from riskrank.datasets.base import crossfit_folds
    from riskrank.encoder import Encoder

    if not registry.has_labels:
        raise RiskrankError(f"cross-fitting the risk head needs a fully labelled registry ({registry.n_unlabelled} tools unlabelled)")
    enc = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
    tool_emb = enc.encode(registry.texts(), desc="encoding tools")
    query_emb = enc.encode(list(query_texts), desc="encoding queries")
    folds = crossfit_folds(len(registry), n_folds, seed)
    f_risk = np.empty(len(registry), dtype=np.float32)
    cfg = config or TrainConfig(seed=seed)
    for f in range(n_folds):
        held = folds == f
        levels = registry.risk_levels.copy()
        levels[held] = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "N tools have no risk label": that is the point
            res = train_heads(tool_emb, query_emb, list(gold), levels, cfg, progress=progress)
        f_risk[held] = HeadScorer(res.model, tool_emb[held]).level_score
    return level_from_score(f_risk), f_risk, folds


# -- training data ------------------------------------------------------------------------------
def gold_fingerprint(texts: list[str], gold: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for t, g in zip(texts, gold, strict=True):
        h.update(t.encode())
        h.update(np.asarray(g, dtype=np.int64).tobytes())
    return h.hexdigest()


# -- the context stage: the need head and its thresholds ------------------------------------------
#: The context stage is chosen on out-of-fold predictions over every query of the fit (its
#: training and validation parts), cut into this many folds: one 20 % validation slice holds
#: 1-5 high-risk queries on Seal-Tools, too few to choose a threshold by.
CONTEXT_FOLDS = 5
#: The need head's inverse regularisation strengths, chosen on cross-validated AUC.
NEED_C_GRID = (0.01, 0.1, 1.0, 10.0)
#: The feature sets cross-validation chooses among (:data:`riskrank.context.NEED_FEATURES`),
#: simplest first: the five candidate-risk features read any registry; the query embedding
#: (384 features) learns the phrasing of one benchmark's risky asks. Random query folds
#: overrate it where queries share their risky tool (Seal-Tools: 43 % of its dev set's
#: high-risk queries do, while 68 % of test_in's risky gold tools are absent from dev), so
#: :func:`train_need_head` takes the simplest option within one standard error of the best.
NEED_FEATURE_SETS = (("cand",), ("emb",), ("emb", "cand"))
#: With fewer queries than this on either side of the label, the cross-validated AUC cannot
#: choose a feature set or C: the need head is then the simplest one, the candidate-risk
#: features at C = 1, and its AUC is reported, not used.
MIN_NEED_VALIDATION = 20
PRIOR_NEED = (("cand",), 1.0)
#: The context stage's grids (module :mod:`riskrank.context`): need threshold, relevance
#: margin in logits (negative: the risky tool must beat the best safe one by that much; None:
#: no margin), the penalty of a task that needs a risky tool and of one that does not.
#: (Widened after the first 3-seed runs, whose validation choices sat on the edges of
#: tau 0.2-0.8, margin -1, need lambda 0-1 and hold-back lambda 2-8.)
CONTEXT_TAU_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
CONTEXT_MARGIN_GRID = (-2.0, -1.0, 0.0, 1.0, 2.0, 4.0, None)
CONTEXT_LAM_NEED_GRID = (0.0, 1.0, 2.0)
CONTEXT_LAM_HOLD_GRID = (0.5, 1.0, 2.0, 4.0, 8.0)
#: The rule pipeline's risk cap for a task that needs a risky tool (the rule filter's own is 1;
#: a task's gold tools may hold more than one risky tool).
CONTEXT_CAP_NEED_GRID = (1, 2, 3)
CONTEXT_RULE = (f"over the fit's training and validation queries, {CONTEXT_FOLDS}-fold cross-validated (each fold ranked by a "
                "relevance head, ToolGraph and need head trained on the other folds): maximise NeedRisk-Hit@5 subject to "
                "Safe-RVR@5 <= that of core+graph+rule and NDCG@5 >= that of core+graph minus one paired standard error "
                "(same queries, same fold heads); ties to the higher NDCG@5, then to the setting "
                "that exposes a needed risky tool most readily: the lower threshold, the larger margin, the larger "
                "hold-back lambda, the smaller need lambda, the smaller risk cap; when nothing meets both constraints, "
                "the same among those that meet the Safe-RVR@5 one alone, and when none does, the lowest Safe-RVR@5")


def need_labels(gold: Sequence[np.ndarray], risk_levels: np.ndarray) -> np.ndarray:
    """The need head's label per query: a gold tool has r >= 3."""
    risk_levels = np.asarray(risk_levels)
    return np.array([bool(len(g)) and int(risk_levels[np.asarray(g, dtype=np.int64)].max()) >= RISKY_LEVEL for g in gold], bool)


def _auc(y: np.ndarray, p: np.ndarray) -> float | None:
    if y.all() or not y.any():
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def _need_fit(x: np.ndarray, y: np.ndarray, feats: tuple[str, ...], c: float, seed: int) -> Any:
    """One need head: a class-balanced logistic regression on standardised features."""
    from sklearn.linear_model import LogisticRegression

    from riskrank.context import NeedHead

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-6, scale, 1.0)
    if y.all() or not y.any():  # one class only: a constant need
        w, b = np.zeros(x.shape[1], np.float32), (8.0 if y.all() else -8.0)
    else:
        lr = LogisticRegression(C=c, max_iter=2000, class_weight="balanced", random_state=seed)
        lr.fit((x - mean) / scale, y)
        w, b = lr.coef_[0], float(lr.intercept_[0])
    return NeedHead(feats, w, b, mean, scale)


def train_need_head(
    query_emb: np.ndarray, first: np.ndarray, risk_score: np.ndarray, y: np.ndarray, folds: np.ndarray, seed: int = 42,
    feature_sets: Sequence[tuple[str, ...]] = NEED_FEATURE_SETS,
) -> tuple[Any, np.ndarray]:
    """The need head (:class:`riskrank.context.NeedHead`) and its out-of-fold predictions [Q]:
    for each feature set and C, a head per fold trained on the other folds predicts that fold;
    the simplest option (:data:`NEED_FEATURE_SETS` order, then the smaller C) whose pooled
    out-of-fold AUC is within one standard error (Hanley-McNeil) of the best is trained again
    on every query (the head the checkpoint keeps). :data:`PRIOR_NEED` when the queries cannot choose
    (:data:`MIN_NEED_VALIDATION`). ``first``: first-stage scores [Q, N]; ``risk_score`` [N]:
    the risk head's penalty per tool; ``y``: :func:`need_labels`; ``folds`` [Q]: fold ids."""
    from riskrank.context import need_features

    y, folds = np.asarray(y, bool), np.asarray(folds)
    n_folds = int(folds.max()) + 1
    can_choose = min(int(y.sum()), int((~y).sum())) >= MIN_NEED_VALIDATION
    options = [(tuple(f), c) for f in feature_sets for c in NEED_C_GRID] if can_choose else [PRIOR_NEED]
    info: dict[str, Any] = {"n_train": int(y.size), "train_positives": int(y.sum()), "n_val": int(y.size),
                            "val_positives": int(y.sum()), "folds": n_folds,
                            "chosen_by": f"{n_folds}-fold cross-validated AUC" if can_choose else (
                                f"prior (fewer than {MIN_NEED_VALIDATION} queries on one side of the label)")}
    grid, oofs = [], []
    for feats, c in options:
        x = need_features(feats, query_emb, first, risk_score)
        oof = np.empty(len(y), np.float32)
        for f in range(n_folds):
            a = folds != f
            oof[~a] = _need_fit(x[a], y[a], feats, c, seed).predict_features(x[~a])
        grid.append({"features": list(feats), "C": c, "val_auc": _auc(y, oof)})
        oofs.append(oof)
    aucs = [-1.0 if g["val_auc"] is None else g["val_auc"] for g in grid]
    top = int(np.argmax(aucs))
    floor = aucs[top] - _auc_se(aucs[top], int(y.sum()), int((~y).sum()))
    pick = next(i for i, a in enumerate(aucs) if a >= floor - 1e-12)
    feats, c = options[pick]
    head = _need_fit(need_features(feats, query_emb, first, risk_score), y, feats, c, seed)
    head.info = {**info, "features": list(feats), "C": c, "val_auc": grid[pick]["val_auc"], "best_val_auc": grid[top]["val_auc"],
                 "grid": grid}
    return head, oofs[pick]


def _auc_se(auc: float, n_pos: int, n_neg: int) -> float:
    """The standard error of an AUC (Hanley and McNeil, 1982); 0 when it is undefined."""
    if auc < 0 or not n_pos or not n_neg:
        return 0.0
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc**2) + (n_neg - 1) * (q2 - auc**2)) / (n_pos * n_neg)
    return float(np.sqrt(max(var, 0.0)))


def context_risky(result: TrainResult, registry: ToolRegistry, tool_emb: np.ndarray) -> np.ndarray:
    """The tools the context stage treats as risky [N]: predicted level >= 3, from the risk
    head (the keyword annotator's when it has not learned), as the retriever reads them."""
    from riskrank.risk import keyword_levels

    if not result.risk_quality.get("learned", True):
        return keyword_levels(registry) >= RISKY_LEVEL
    return level_from_score(HeadScorer(result.model, tool_emb).level_score) >= RISKY_LEVEL


@dataclass
class ContextPart:
    """One fold's queries as :func:`choose_context` scores them: ``rel`` [Q, N] the relevance of
    a head that never trained on them (the penalty's space), ``need`` [Q] out-of-fold need,
    ``named`` [Q, N] or None, ``gold``, and ``graph`` the ToolGraph of the other folds."""

    rel: np.ndarray
    need: np.ndarray
    named: np.ndarray | None
    gold: list[np.ndarray]
    graph: ToolGraph | None


def fit_context(
    result: TrainResult, graph: ToolGraph, choice: dict[str, Any], tool_emb: np.ndarray, query_emb: np.ndarray,
    gold: list[np.ndarray], tr: np.ndarray, va: np.ndarray, registry: ToolRegistry, cfg: TrainConfig, *,
    lexical: LexicalEvidence | None, fusion: Fusion | None, prepare: Any = None, graph_gold: bool = True,
    need_feature_sets: Sequence[tuple[str, ...]] = NEED_FEATURE_SETS,
) -> None:
    """:func:`fit`'s context step, cross-validated over every query of the fit (``tr`` and
    ``va``, cut into :data:`CONTEXT_FOLDS` folds): the need head (:func:`train_need_head`);
    per fold a relevance head trained on the other folds (the fit's config, its early-stopped
    epoch count, no early stopping) and their ToolGraph (``graph``'s config; no gold edges
    when ``graph_gold`` is False, as the zero-shot form); then :func:`choose_context` on the
    pooled folds. ``prepare(model)``: applied to each fold head, as to the fit's (the base
    model's zero-shot form); ``need_feature_sets``: the need head's options (the base model
    keeps the registry-agnostic ones). The risk side (penalty, predicted-risky flags) is the fit's own:
    it is trained on tool labels, not on queries. Writes ``result.need_head``,
    ``choice["context"]`` and the context pipelines into ``choice["pipelines"]``."""
    from riskrank.datasets.base import crossfit_folds

    rows = np.asarray(sorted(i for i in (*tr, *va) if len(gold[i])), dtype=np.int64)
    if len(rows) < 2 * CONTEXT_FOLDS or "pipelines" not in choice:
        return
    folds = crossfit_folds(len(rows), CONTEXT_FOLDS, cfg.seed)
    scorer = HeadScorer(result.model, tool_emb)
    hybrid = bool(result.model.lexical)

    def first_and_inputs(sub: np.ndarray) -> tuple[np.ndarray, Any]:
        cos = query_emb[sub] @ tool_emb.T
        if hybrid:
            assert lexical is not None
            inputs = relevance_inputs(cos, lexical.rows(sub), fusion)
            return inputs.f0, inputs
        return cos, relevance_inputs(cos)

    risk_levels = registry.risk_levels
    first, _ = first_and_inputs(rows)
    head, need = train_need_head(query_emb[rows], first, scorer.f_risk, need_labels([gold[i] for i in rows], risk_levels),
                                 folds, seed=cfg.seed, feature_sets=need_feature_sets)
    result.need_head = head
    epochs = int(result.validation.get("best_epoch", -1))
    fold_cfg = replace(cfg, epochs=epochs if epochs >= 0 else cfg.epochs, early_stopping=False, val_fraction=0.0)
    parts = []
    for f in range(CONTEXT_FOLDS):
        a, b = rows[folds != f], rows[folds == f]
        g_a = [gold[i] for i in a]
        fr = train_heads(tool_emb, query_emb[a], g_a, risk_levels, fold_cfg, progress=False, choose=False,
                         lexical=lexical.rows(a) if lexical is not None else None, fusion=fusion, relevance_only=True)
        if prepare is not None:
            prepare(fr.model)
        _, inputs_b = first_and_inputs(b)
        rel = HeadScorer(fr.model, tool_emb).relevance_score(query_emb[b], inputs=inputs_b)
        g = ToolGraph.build(tool_emb, g_a, risk_levels, registry.permissions, graph.config) if graph_gold else graph
        parts.append(ContextPart(rel, need[folds == f], lexical.rows(b).named if lexical is not None else None,
                                 [gold[i] for i in b], g))
    record: dict[str, Any] = {"need_head": {k: v for k, v in head.info.items()}, "folds": CONTEXT_FOLDS,
                              "n_queries": len(rows)}
    chosen = choose_context(parts, scorer.f_risk, context_risky(result, registry, tool_emb), risk_levels, choice["pipelines"],
                            RuleFilter(RuleConfig(fill=cfg.rule_fill), risk_levels, registry.perm_counts, tool_emb), record)
    choice["pipelines"].update({p: c["pipeline"] for p, c in chosen.items()})
    choice["context"] = {p: {"tau": c["tau"], "margin": c["margin"], "lam_need": c["lam_need"],
                             **({"cap_need": c["cap_need"]} if c.get("cap_need") is not None else {})} for p, c in chosen.items()}
    result.validation["context"] = record


def top5_metrics(gold: Sequence[np.ndarray], risk_levels: np.ndarray, n_tools: int, k: int = 5) -> Any:
    """A function of a top-k order [Q, k] -> per query (NDCG@k, Safe-RVR@k: NaN unless the
    query is low-risk, NeedRisk-Hit@k: NaN unless it is high-risk), with the gold masks built
    once: what a grid of thousands of settings evaluates (``tests/test_context.py`` checks it
    equals :mod:`riskrank.metrics`)."""
    risk_levels = np.asarray(risk_levels)
    q = len(gold)
    is_gold = np.zeros((q, n_tools), bool)
    for i, g in enumerate(gold):
        is_gold[i, np.asarray(g, dtype=np.int64)] = True
    risky_tool = risk_levels >= RISKY_LEVEL
    risky_gold = is_gold & risky_tool[None, :]
    high = risky_gold.any(axis=1)
    low = ~high & is_gold.any(axis=1)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    idcg = np.array([disc[: min(k, int(n))].sum() for n in is_gold.sum(axis=1)])

    def measure(order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = order[:, :k]
        gains = np.take_along_axis(is_gold, order, axis=1)
        nd = np.where(idcg > 0, (gains * disc[None, : order.shape[1]]).sum(axis=1) / np.where(idcg > 0, idcg, 1.0), 0.0)
        rv = np.where(low, risky_tool[order].mean(axis=1), np.nan)
        hit = np.where(high, np.take_along_axis(risky_gold, order, axis=1).any(axis=1), np.nan)
        return nd, rv, hit

    return measure


def context_rule_key(r: dict[str, Any]) -> tuple:
    """:data:`CONTEXT_RULE`'s order among the settings that meet its constraints (the largest
    wins): NeedRisk-Hit@5, NDCG@5, then the setting that exposes a needed risky tool most readily."""
    return (round(r["needrisk_hit@5"], 10), round(r["ndcg@5"], 10), -r["tau"], np.inf if r["margin"] is None else r["margin"],
            r["lam"], -r["lam_need"], -(r["cap_need"] or 0))


def choose_context(
    parts: Sequence[ContextPart], penalty: np.ndarray, risky: np.ndarray, risk_levels: np.ndarray,
    pipelines: dict[str, dict[str, Any]], rule_filter: RuleFilter, record: dict[str, Any] | None = None, *, k: int = 5,
    tau_grid: Sequence[float] = CONTEXT_TAU_GRID, margin_grid: Sequence[float | None] = CONTEXT_MARGIN_GRID,
    lam_need_grid: Sequence[float] = CONTEXT_LAM_NEED_GRID, lam_hold_grid: Sequence[float] = CONTEXT_LAM_HOLD_GRID,
    cap_need_grid: Sequence[int] = CONTEXT_CAP_NEED_GRID, rows_out: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, dict[str, Any]]:
    """tau, margin, the two lambdas (and the rule pipeline's cap) of each context pipeline, by
    :data:`CONTEXT_RULE`, over the pooled queries of ``parts`` (each smoothed by its own
    graph); the graph setting is ``core+graph``'s. ``penalty`` [N] the risk penalty,
    ``risky`` [N] the context stage's flags (:func:`context_risky`); the references are
    ``pipelines``' own core+graph and core+graph+rule settings, scored on the same queries.
    ``rows_out``: filled with every setting's metrics per pipeline (the frontier benchmark)."""
    from riskrank.context import CONTEXT_PIPELINES, apply_context
    from riskrank.metrics import safe_rvr_at_k

    record = record if record is not None else {}
    cg = pipelines["core+graph"]
    cgr = pipelines.get("core+graph+rule", cg)
    alpha, norm = float(cg["alpha"]), cg["normalisation"]
    keys = [(lam_n, lam_h, tau, margin) for lam_n in lam_need_grid for lam_h in lam_hold_grid if lam_h >= lam_n
            for tau in tau_grid for margin in margin_grid]
    per: dict[tuple, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    ref_nd_parts, ref_safe_parts = [], []
    for part in parts:
        rel = np.asarray(part.rel, dtype=np.float32)

        def smooth(x: np.ndarray, a: float = alpha, nm: str = norm, g: ToolGraph | None = part.graph) -> np.ndarray:
            return g.smooth(x, a, None, normalisation=nm) if g is not None and a > 0 else x

        named = part.named
        measure = top5_metrics(part.gold, risk_levels, rel.shape[1], k)
        # Smoothing is linear: smooth(rel - lam * p) = smooth(rel) - lam * smooth(p), so once each.
        s_rel = smooth(rel)
        s_pen = smooth(np.ascontiguousarray(np.broadcast_to(penalty, rel.shape), dtype=np.float32))
        ref_nd_parts.append(ndcg_at_k(top_m(pin_named(s_rel - np.float32(cg["lam"]) * s_pen, named), k), part.gold))
        ref_scores = smooth(rel - np.float32(cgr["lam"]) * penalty, float(cgr["alpha"]), cgr["normalisation"])
        order, _ = rule_filter.filter_scores(pin_named(ref_scores, named), None, length=k)
        ref_safe_parts.append(safe_rvr_at_k(order, part.gold, risk_levels))
        by_lam: dict[float, np.ndarray] = {}
        for lam_n, lam_h, tau, margin in keys:
            need_scores = by_lam.setdefault(lam_n, s_rel - np.float32(lam_n) * s_pen)
            hold_scores = by_lam.setdefault(lam_h, s_rel - np.float32(lam_h) * s_pen)
            final, dec = apply_context(need_scores, hold_scores, rel, risky, part.need, tau, margin, k, lam_n, lam_h)
            ranked = pin_named(final, named)
            for p in CONTEXT_PIPELINES:
                for cap in (cap_need_grid if p.endswith("+rule") else (None,)):
                    if cap is None:
                        order = top_m(ranked, k)
                    else:
                        order, _ = rule_filter.filter_scores(ranked, None, length=k, max_risky=replace(dec, cap_need=cap).risk_cap)
                    per.setdefault((p, lam_n, lam_h, tau, margin, cap), []).append(tuple(x.astype(np.float32) for x in measure(order)))
    ref_nd = np.concatenate(ref_nd_parts)
    ref_safe_q = np.concatenate(ref_safe_parts)
    ref_safe = float(np.nanmean(ref_safe_q)) if np.isfinite(ref_safe_q).any() else 0.0

    def mean(v: np.ndarray) -> float:
        return float(np.nanmean(v)) if np.isfinite(v).any() else 0.0

    record.update({"rule": CONTEXT_RULE, "reference": {"core+graph ndcg@5": float(ref_nd.mean()), "core+graph+rule safe_rvr@5": ref_safe}})
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in CONTEXT_PIPELINES}
    for (p, lam_n, lam_h, tau, margin, cap), ms in per.items():
        nd, sr, nh = (np.concatenate([m[j] for m in ms]) for j in range(3))
        rows[p].append({"lam_need": float(lam_n), "lam": float(lam_h), "tau": float(tau), "margin": margin, "cap_need": cap,
                        "ndcg@5": float(nd.mean()), "safe_rvr@5": mean(sr), "needrisk_hit@5": mean(nh),
                        "ndcg_se": _se(nd - ref_nd)})
    if rows_out is not None:
        rows_out.update(rows)
    out: dict[str, dict[str, Any]] = {}
    # How many settings each grid held and met both constraints (the rows themselves, thousands
    # per pipeline, are not kept: they doubled the base model's size and nothing reads them).
    record["grids"] = {}
    for p, grid in rows.items():
        safe = [r for r in grid if r["safe_rvr@5"] <= ref_safe + 1e-12]
        ok = [r for r in safe if r["ndcg@5"] >= float(ref_nd.mean()) - r["ndcg_se"] - 1e-12]
        if ok or safe:  # the NDCG@5 constraint is the one given up first
            best = max(ok or safe, key=context_rule_key)
        else:
            best = min(grid, key=lambda r: (round(r["safe_rvr@5"], 10), -r["ndcg@5"]))
        out[p] = {"tau": best["tau"], "margin": best["margin"], "lam_need": best["lam_need"], "cap_need": best["cap_need"],
                  "feasible": bool(ok),
                  "pipeline": {"lam": best["lam"], "alpha": alpha, "normalisation": norm}}
        record["grids"][p] = {"settings": len(grid), "feasible": len(ok), "safe": len(safe)}
        record[p] = {**best, "feasible": bool(ok)}
    return out
