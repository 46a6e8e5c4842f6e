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
:func:`fit` is the whole procedure (split, fusion, heads, graph, choices) and :func:`fit_retriever`
a retriever from (task, gold tools) pairs; checkpoints, and :class:`TrainResult` they save, are
:mod:`riskrank.checkpoint`'s. This package stands on the engine (it imports the pipeline's stages
and never the reverse): serving a checkpoint imports none of it.

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

from riskrank.checkpoint import TrainResult
from riskrank.training.choices import (
    Validation,
    choose_fusion,
    choose_inference,
    choose_lambda,
    label_penalty_lambda,
    lambda_curve,
    relevance_floor,
)
from riskrank.training.config import (
    CANDIDATE_PIPELINES,
    DEFAULT_ALPHA_GRID,
    DEFAULT_LAM_GRID,
    DEFAULT_RESIDUAL_GRID,
    LOGIT_LAM_GRID,
    MIN_SCORE_QUANTILE,
    PAPER_LAM_GRID,
    PIPELINES,
    RELEVANCE,
    SAMPLING,
    TrainConfig,
    parse_selection,
    split_validation,
    validation_split,
)
from riskrank.training.context import (
    CONTEXT_CAP_NEED_GRID,
    CONTEXT_FOLDS,
    CONTEXT_LAM_HOLD_GRID,
    CONTEXT_LAM_NEED_GRID,
    CONTEXT_MARGIN_GRID,
    CONTEXT_RULE,
    CONTEXT_TAU_GRID,
    MIN_NEED_VALIDATION,
    NEED_C_GRID,
    NEED_FEATURE_SETS,
    PRIOR_NEED,
    ContextPart,
    choose_context,
    context_risky,
    context_rule_key,
    fit_context,
    need_labels,
    top5_metrics,
    train_need_head,
)
from riskrank.training.fitting import (
    crossfit_risk_levels,
    fit,
    fit_retriever,
    gold_fingerprint,
    predicted_levels_of,
)
from riskrank.training.relevance import (
    train_heads,
)
from riskrank.training.risk import (
    crossfit_risk,
    risk_auc,
    risk_quality,
    tool_folds,
    train_risk_head,
)

__all__ = [
    "CANDIDATE_PIPELINES",
    "CONTEXT_CAP_NEED_GRID",
    "CONTEXT_FOLDS",
    "CONTEXT_LAM_HOLD_GRID",
    "CONTEXT_LAM_NEED_GRID",
    "CONTEXT_MARGIN_GRID",
    "CONTEXT_RULE",
    "CONTEXT_TAU_GRID",
    "DEFAULT_ALPHA_GRID",
    "DEFAULT_LAM_GRID",
    "DEFAULT_RESIDUAL_GRID",
    "LOGIT_LAM_GRID",
    "MIN_NEED_VALIDATION",
    "MIN_SCORE_QUANTILE",
    "NEED_C_GRID",
    "NEED_FEATURE_SETS",
    "PAPER_LAM_GRID",
    "PIPELINES",
    "PRIOR_NEED",
    "RELEVANCE",
    "SAMPLING",
    "ContextPart",
    "TrainConfig",
    "TrainResult",
    "Validation",
    "choose_context",
    "choose_fusion",
    "choose_inference",
    "choose_lambda",
    "context_risky",
    "context_rule_key",
    "crossfit_risk",
    "crossfit_risk_levels",
    "fit",
    "fit_context",
    "fit_retriever",
    "gold_fingerprint",
    "label_penalty_lambda",
    "lambda_curve",
    "need_labels",
    "parse_selection",
    "predicted_levels_of",
    "relevance_floor",
    "risk_auc",
    "risk_quality",
    "split_validation",
    "tool_folds",
    "top5_metrics",
    "train_heads",
    "train_need_head",
    "train_risk_head",
    "validation_split",
]
