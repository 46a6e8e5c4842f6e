"""The whole procedure (:func:`fit`: split, fusion, heads, graph, choices), and :func:`fit_retriever`,
a ready :class:`~riskrank.pipeline.RiskAwareRetriever` from (task, gold tools) pairs.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from riskrank.checkpoint import TrainResult
from riskrank.contamination import query_digests
from riskrank.encoder import Encoder
from riskrank.errors import RiskrankError
from riskrank.first_stage import (
    Fusion,
    LexicalEvidence,
    LexicalIndex,
)
from riskrank.graph import NORMALISATIONS, GraphConfig, ToolGraph
from riskrank.heads import HeadScorer
from riskrank.pipeline import RiskAwareRetriever
from riskrank.registry import DEFAULT_TOOL_TEMPLATE, ToolRegistry
from riskrank.risk import level_from_score
from riskrank.training.choices import choose_inference
from riskrank.training.config import DEFAULT_ALPHA_GRID, TrainConfig, validation_split
from riskrank.training.context import fit_context
from riskrank.training.relevance import train_heads


# -- the whole fit -------------------------------------------------------------------------------
def fit(
    tool_emb: np.ndarray, query_emb: np.ndarray, gold: Sequence[np.ndarray], registry: ToolRegistry, cfg: TrainConfig,
    graph_config: GraphConfig | None = None, *, alpha_grid: Sequence[float] = DEFAULT_ALPHA_GRID,
    normalisations: Sequence[str] = NORMALISATIONS, progress: bool = True, lexical: LexicalEvidence | None = None,
    choice_registry: ToolRegistry | None = None,
) -> tuple[TrainResult, ToolGraph, dict[str, Any]]:
    """Fusion, heads, ToolGraph and every validation choice on precomputed embeddings (and
    the queries' lexical evidence, for the hybrid head): the queries are split by query
    (:func:`validation_split`); the fusion is chosen on all of them (it has no trained
    parameter); the heads train on the training part (early-stopped on the validation part);
    the graph is built from the training part's gold tools only; and
    :func:`choose_inference` makes every other choice on the validation part.

    ``choice_registry``: the same tools with the levels the choices measure risk with (RVR@5,
    the rule filter, the need labels, the graph's risk edges) where ``registry`` leaves tools
    unaudited (level 0: the heads train on the audited tools only, and a choice reading 0 would
    count the tool as not risky in RVR and as L5 in the rule filter); default ``registry``.

    Returns (the heads with their lambda, the graph, the inference settings: fusion, alpha,
    normalisation, pipelines, ...)."""
    creg = registry if choice_registry is None else choice_registry
    if len(creg) != len(registry):
        raise RiskrankError(f"choice_registry has {len(creg)} tools, the registry {len(registry)}")
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
    graph = ToolGraph.build(tool_emb, [gold[i] for i in tr], creg.risk_levels, registry.permissions, graph_config)
    choice: dict[str, Any] = {"alpha": 0.1, "normalisation": graph_config.normalisation}
    if fusion is not None:
        choice["fusion"] = fusion.to_dict()
    if len(va):
        chosen = choose_inference(query_emb[va], [gold[i] for i in va], tool_emb, creg.risk_levels, cfg,
                                  model=result.model, graph=graph, alpha_grid=alpha_grid, normalisations=normalisations,
                                  record=result.validation, lexical=lexical.rows(va) if lexical is not None else None,
                                  fusion=fusion, perm_counts=registry.perm_counts,
                                  predicted_levels=predicted_levels_of(result, registry))
        result.lam = chosen["lam"]
        choice.update({"alpha": chosen["alpha"], "normalisation": chosen["normalisation"], "pipelines": chosen["pipelines"],
                       "min_score": chosen["min_score"]})
        if "residual_weight" in chosen:
            choice["residual_weight"] = chosen["residual_weight"]
        fit_context(result, graph, choice, tool_emb, query_emb, gold, tr, va, creg, cfg, lexical=lexical, fusion=fusion)
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


# -- training data ------------------------------------------------------------------------------
def gold_fingerprint(texts: list[str], gold: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for t, g in zip(texts, gold, strict=True):
        h.update(t.encode())
        h.update(np.asarray(g, dtype=np.int64).tobytes())
    return h.hexdigest()


def fit_retriever(
    registry: ToolRegistry,
    texts: Sequence[str],
    gold: Sequence[np.ndarray],
    *,
    encoder: Encoder | str | None = None,
    train_config: TrainConfig | None = None,
    graph_config: GraphConfig | None = None,
    alpha_grid: Sequence[float] = DEFAULT_ALPHA_GRID,
    normalisations: Sequence[str] = NORMALISATIONS,
    tool_template: str = DEFAULT_TOOL_TEMPLATE,
    progress: bool = True,
    choice_registry: ToolRegistry | None = None,
) -> RiskAwareRetriever:
    """Encode (texts, gold) of ``registry``, compute their lexical evidence, and :func:`fit` on
    them: the fusion, the heads, the ToolGraph of the training part, lambda and alpha per
    pipeline and the graph normalisation chosen on a validation slice of the queries. The
    retriever carries ``training`` (:class:`~riskrank.checkpoint.TrainResult`) and saves with
    :meth:`~riskrank.pipeline.RiskAwareRetriever.save`."""
    cfg = (train_config or TrainConfig()).resolved(has_lexical=True)
    enc = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
    tool_emb = enc.encode(registry.texts(tool_template), desc="encoding tools")
    query_emb = enc.encode(list(texts), desc="encoding queries")
    gold = [np.asarray(g, dtype=np.int64) for g in gold]
    index = LexicalIndex.from_registry(registry)
    result, graph, choice = fit(tool_emb, query_emb, gold, registry, cfg, graph_config, alpha_grid=alpha_grid,
                                normalisations=normalisations, progress=progress, lexical=index.evidence(list(texts)),
                                choice_registry=choice_registry)
    data = {"queries_fingerprint": gold_fingerprint(list(texts), gold), "n_queries": len(texts),
            "query_sha256": query_digests(texts)}
    return RiskAwareRetriever.from_training(registry, enc, tool_emb, result, graph, choice, training_data=data,
                                            tool_template=tool_template, lexical=index)


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
