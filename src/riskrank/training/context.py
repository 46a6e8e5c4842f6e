"""The context stage's training: need labels, the need head, and the context choices on validation queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from riskrank.checkpoint import TrainResult
from riskrank.first_stage import (
    Fusion,
    LexicalEvidence,
    pin_named,
    relevance_inputs,
    top_m,
)
from riskrank.graph import ToolGraph
from riskrank.heads import HeadScorer
from riskrank.metrics import ndcg_at_k
from riskrank.registry import ToolRegistry
from riskrank.risk import RISKY_LEVEL, level_from_score
from riskrank.rules import RuleConfig, RuleFilter
from riskrank.training.choices import _se
from riskrank.training.config import TrainConfig
from riskrank.training.relevance import train_heads

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
