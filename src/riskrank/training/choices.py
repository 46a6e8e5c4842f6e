"""Every choice made on validation queries (:func:`choose_inference`): the fusion, the residual weight,
lambda and alpha per pipeline, the relevance floor; the same stages, in the same order, as the engine
ranks with (:func:`riskrank.pipeline.final_order`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.first_stage import (
    Fusion,
    LexicalEvidence,
    RelevanceInputs,
    fusion_grid,
    normalise,
    rank,
    ranks,
    relevance_inputs,
    top_m,
)
from riskrank.graph import NORMALISATIONS, ToolGraph
from riskrank.heads import HeadScorer
from riskrank.metrics import ndcg_at_k, rvr_at_k
from riskrank.pipeline import final_order
from riskrank.risk import label_risk
from riskrank.rules import RuleConfig, RuleFilter
from riskrank.training.config import (
    CANDIDATE_PIPELINES,
    DEFAULT_ALPHA_GRID,
    DEFAULT_LAM_GRID,
    MIN_SCORE_QUANTILE,
    PIPELINES,
    TrainConfig,
    parse_selection,
    validation_split,
)
from riskrank.training.modules import DualHead


def _rows(values: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """``values`` [Q] on the masked queries only (all without a mask)."""
    return values if rows is None else values[rows]


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
    predicted_levels: np.ndarray | None = None, risk_rows: np.ndarray | None = None, penalty: np.ndarray | None = None,
) -> dict[str, Any]:
    """Every inference setting riskrank chooses, chosen here and only here, on the given
    (validation) queries only, in this order (``risk_rows``, a boolean mask over the queries:
    the exposure side of the lambda choices, RVR@5 of each lambda and of the first stage, is
    measured on those queries only, NDCG@5 on all; None: all):

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

    ``penalty`` [N] is what lambda multiplies in step 2 (default the risk head's, ``f_risk``;
    :func:`riskrank.heads.level_penalty` of the served levels for a checkpoint whose
    ``inference.penalty_source`` is ``levels``).

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
        dense_rvr = float(_rows(rvr_at_k(top_m(cos, 5), risk_levels), risk_rows).mean())
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
            got = _choose_pipelines(rel, scorer.f_risk if penalty is None else penalty, cand, named, val_gold, risk_levels, cfg, graph, alpha_grid,
                                    normalisations, filters, dense_rvr, only=CANDIDATE_PIPELINES if prefix else PIPELINES,
                                    risk_rows=risk_rows)
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
    filters: dict[str, RuleFilter], dense_rvr: float, only: Sequence[str], risk_rows: np.ndarray | None = None,
) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each pipeline's (choice, per-lambda rows) over one scored set (the full pool, or
    ``cand`` [Q, M]); see :func:`choose_inference`, step 2."""
    if cand is not None:
        rel = np.take_along_axis(rel, cand, axis=1)
        penalty = penalty[cand]
        named = np.take_along_axis(named, cand, axis=1) if named is not None else None

    def top5(s: np.ndarray, rule_filter: RuleFilter | None = None) -> np.ndarray:
        return final_order(s, named=named, candidates=cand, rule_filter=rule_filter, top=5)[0]

    def metrics(order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ndcg_at_k(order, gold), _rows(rvr_at_k(order, risk), risk_rows)

    for rule in (cfg.selection, cfg.rule_selection):
        if risk_rows is not None and parse_selection(rule)[0] == "utility":
            raise RiskrankError(f"lambda selection {rule!r} weighs NDCG against RVR per query: it cannot measure RVR "
                                "on a subset of the queries (risk_rows); use budget:R or ucb:R")

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
                per[name][lam] = metrics(top5(ranked, filters[source]))
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


def _val_ndcg(model: DualHead, tool_emb: np.ndarray, q: np.ndarray, gold: list[np.ndarray], inputs: RelevanceInputs | None) -> float:
    scorer = HeadScorer(model, tool_emb)
    return float(ndcg_at_k(top_m(scorer.relevance(q, inputs=inputs), 5), gold).mean())
