"""RiskAwareRetriever: the inference engine, the one object that composes the stages.

registry -> embeddings -> first stage (dense cosine, optional top-M candidates) -> dual-head
scores s = f_rel - lambda * f_risk -> ToolGraph smoothing -> rule filter -> ranking.

The CLI, the servers and the experiments all call this object, so no stage is implemented
twice. Three verbs: :meth:`~RiskAwareRetriever.retrieve` (one task),
:meth:`~RiskAwareRetriever.retrieve_many` (several) and :meth:`~RiskAwareRetriever.rank_batch`
(encoded queries, arrays out: experiments and benchmarks). It only infers: training and every
choice made on validation are :mod:`riskrank.training`'s, the checkpoint directory is
:mod:`riskrank.checkpoint`'s; :meth:`~RiskAwareRetriever.fit`, ``from_training`` and
:meth:`~RiskAwareRetriever.save` are thin delegates to them.

The scored set is the first stage's top-M, ``candidates`` (always an int): the full pool is
the registry size, and any M at least that large scores every tool (the default of the exact
first stage). The approximate first stage defaults to M = 100.

The mode grammar and the result types live in :mod:`riskrank.modes` (no torch), so every
surface can name a mode or read a result without importing this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import riskrank.training as training
from riskrank.ann import ANNRetriever
from riskrank.checkpoint import Checkpoint, in_memory, load_checkpoint, save_checkpoint
from riskrank.encoder import Encoder
from riskrank.errors import CheckpointError, RiskrankError
from riskrank.first_stage import DEFAULT_TOP_M, DenseRetriever, rank, top_m
from riskrank.graph import NORMALISATIONS, GraphConfig, ToolGraph
from riskrank.heads import HeadScorer
from riskrank.modes import (
    FIRST_STAGES,
    MAX_K,
    RISK_SOURCES,
    Deferral,
    RankedTool,
    RetrievalResult,
    Stages,
    default_min_score,
    parse_mode,
)
from riskrank.registry import DEFAULT_TOOL_TEMPLATE, ToolRegistry
from riskrank.risk import fail_closed_levels, label_risk, level_from_score
from riskrank.rules import FilterResult, RuleConfig, RuleFilter
from riskrank.training import DEFAULT_ALPHA_GRID, TrainConfig, TrainResult


@dataclass
class BatchRanking:
    """Rankings of many queries: ``order`` [Q, L] tool indices best first and, aligned with
    it, the final score, f_rel and f_risk. ``filters`` holds the rule filter's per-query
    results in rule modes."""

    order: np.ndarray
    score: np.ndarray
    f_rel: np.ndarray
    f_risk: np.ndarray
    filters: list[FilterResult] | None = None


class RiskAwareRetriever:
    """Risk-aware retrieval over one registry.

    >>> r = RiskAwareRetriever(registry, checkpoint="runs/demo")
    >>> r.retrieve("delete the old log files", k=5, mode="rule").tools
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        encoder: Encoder | str | None = None,
        checkpoint: Checkpoint | str | Path | None = None,
        graph: ToolGraph | None = None,
        lam: float | None = None,
        alpha: float | None = None,
        normalisation: str | None = None,
        mode: str | None = None,
        candidates: int | None = None,
        risk_source: str = "labels",
        rule_config: RuleConfig | None = None,
        graph_config: GraphConfig | None = None,
        tool_template: str = DEFAULT_TOOL_TEMPLATE,
        tool_emb: np.ndarray | None = None,
        progress: bool = True,
        cache_queries: bool = True,
        first_stage: str = "exact",
        trust_annotations: bool = False,
        min_score: float | None = None,
    ) -> None:
        self.registry = registry
        # MCP hints only raise an unlabelled tool's level unless the operator trusts its servers.
        self.trust_annotations = bool(trust_annotations)
        self.cache_queries = cache_queries
        self.encoder = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
        self.tool_template = tool_template
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            checkpoint = load_checkpoint(checkpoint, encoder_identity=self.encoder.identity)
        self.checkpoint = checkpoint
        if tool_emb is None:
            tool_emb = self.encoder.encode(registry.texts(tool_template), desc="encoding tools")
        tool_emb = np.ascontiguousarray(tool_emb, dtype=np.float32)
        if tool_emb.shape[0] != len(registry):
            raise RiskrankError(f"tool embeddings have {tool_emb.shape[0]} rows for {len(registry)} tools")
        if checkpoint is not None and tool_emb.shape[1] != checkpoint.model.dim:
            raise CheckpointError(f"checkpoint heads expect {checkpoint.model.dim}-d embeddings, got {tool_emb.shape[1]}-d")
        self.tool_emb = tool_emb
        if first_stage not in FIRST_STAGES:
            raise RiskrankError(f"unknown first stage {first_stage!r}; choose from {', '.join(FIRST_STAGES)}")
        self.first_stage = first_stage
        if candidates is None:
            # An approximate index only finds a top-M; the exact first stage scores every tool.
            candidates = DEFAULT_TOP_M if first_stage == "ann" else len(registry)
        self.candidates: int = self._check_candidates(candidates)
        # The approximate index (large registries) finds the top-M candidates; built lazily.
        self._ann: ANNRetriever | None = None
        self.scorer = HeadScorer(checkpoint.model, tool_emb) if checkpoint is not None else None
        inference = checkpoint.inference if checkpoint is not None else {}
        self.lam = float(lam if lam is not None else inference.get("lam", 0.1))
        self.alpha = float(alpha if alpha is not None else inference.get("alpha", 0.1))
        self.normalisation = normalisation or inference.get("normalisation") or (graph.config.normalisation if graph else "row")
        if self.normalisation not in NORMALISATIONS:
            raise RiskrankError(f"unknown normalisation {self.normalisation!r}; choose from {NORMALISATIONS}")
        self.mode = mode or ("core" if checkpoint is not None else "dense")
        parse_mode(self.mode)
        self.min_score = self._check_min_score(min_score)
        self.risk_source = self._check_risk_source(risk_source)
        self.rule_config = rule_config or RuleConfig()
        self.graph_config = graph_config or GraphConfig(normalisation=self.normalisation)
        if graph is None and checkpoint is not None:
            graph = checkpoint.graph_for(registry.fingerprint(), len(registry))
        self._graph = graph
        self._filters: dict[tuple[str, int], RuleFilter] = {}
        # Audited risk as a score, for the dense risk-label-penalty baseline.
        self.label_risk = label_risk(registry.risk_levels)

    # -- construction helpers --------------------------------------------------------------
    @classmethod
    def from_paths(cls, registry: str | Path, checkpoint: str | Path | None = None, **kwargs: Any) -> RiskAwareRetriever:
        """Load a registry file and (optionally) a checkpoint directory."""
        return cls(ToolRegistry.load(registry), checkpoint=checkpoint, **kwargs)

    @property
    def full_pool(self) -> bool:
        """True when every tool is scored (``candidates`` is at least the registry size)."""
        return self.candidates >= len(self.registry)

    def _check_candidates(self, m: Any) -> int:
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise RiskrankError(f"candidates must be a positive integer (top-M; the registry size or more: the full pool), got {m!r}")
        return int(m)

    def _check_min_score(self, value: float | None) -> float | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or np.isnan(value)):
            raise RiskrankError(f"min_score must be a number (-inf: no floor), got {value!r}")
        return None if value is None else float(value)

    def relevance_floor(self, mode: str | None = None, min_score: float | None = None) -> float | None:
        """The relevance floor :meth:`retrieve` applies to f_rel in ``mode``: ``min_score`` if
        given, else the retriever's own, else the default of that score scale (the
        checkpoint's, chosen on validation queries, for the heads; the encoder's measured one
        for dense cosine; :func:`riskrank.modes.default_min_score`). None: no floor."""
        value = self._check_min_score(min_score)
        if value is None:
            value = self.min_score
        if value is None:
            heads = parse_mode(mode or self.mode).heads
            inference = self.checkpoint.inference if self.checkpoint is not None else {}
            value = default_min_score(heads, self.encoder.identity, inference)
        return None if value is None or value == float("-inf") else value

    def _check_risk_source(self, source: str) -> str:
        if source not in RISK_SOURCES:
            raise RiskrankError(f"unknown risk source {source!r}; choose from {', '.join(RISK_SOURCES)}")
        if source == "predicted" and self.scorer is None:
            raise RiskrankError("risk_source='predicted' needs a checkpoint (the learned risk head)")
        return source

    @property
    def graph(self) -> ToolGraph:
        """The ToolGraph; built on first use from the registry alone (semantic and permission
        edges; no training queries, so no co-occurrence edges) when none was given."""
        if self._graph is None:
            # With the approximate first stage, semantic edges come from the same index (no
            # all-pairs similarity over a large registry).
            index = self._ann_index() if self.first_stage == "ann" else None
            self._graph = ToolGraph.build(self.tool_emb, [], self.registry.risk_levels, self.registry.permissions,
                                          self.graph_config, semantic_index=index)
        return self._graph

    @property
    def f_risk(self) -> np.ndarray:
        """Learned tool risk [N] (the risk head), or the audited-label risk without a checkpoint."""
        return self.scorer.f_risk if self.scorer is not None else self.label_risk

    @property
    def predicted_levels(self) -> np.ndarray | None:
        return level_from_score(self.scorer.f_risk) if self.scorer is not None else None

    def _rule_filter(self, risk_source: str, k: int | None = None, fill: str | None = None) -> RuleFilter:
        """The rule filter for a risk source; ``k`` (the list length exposed) replaces the
        configured K, so the caps hold for the whole list an agent sees; ``fill`` replaces the
        configured fill policy."""
        k = self.rule_config.k if k is None else int(k)
        fill = self.rule_config.fill if fill is None else fill
        key = (risk_source, k, fill)
        if key not in self._filters:
            if risk_source == "labels":
                # Unlabelled tools fail closed; MCP hints raise them (and lower them only if trusted).
                levels = fail_closed_levels(self.registry, trust_annotations=self.trust_annotations)
            else:
                levels = self.predicted_levels
            config = dataclasses.replace(self.rule_config, k=k, fill=fill)
            self._filters[key] = RuleFilter(config, levels, self.registry.perm_counts, self.tool_emb)
        return self._filters[key]

    # -- the stages --------------------------------------------------------------------------
    def _encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query embeddings; cached for benchmark queries, not stored for live traffic
        (``cache_queries=False``)."""
        if self.cache_queries:
            return self.encoder.encode(list(texts), desc="encoding queries")
        return self.encoder.encode(list(texts), desc="encoding queries", store=False)

    def _ann_index(self) -> ANNRetriever:
        """The approximate first-stage index (IVF), built on first use."""
        if self._ann is None:
            self._ann = ANNRetriever(self.tool_emb)
        return self._ann

    def _candidate_set(self, query_emb: np.ndarray, m: int, *, need_cos: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(candidates [Q, M] or None for the full pool, cosine [Q, N or M]). Over the full
        pool the cosine is skipped when ``need_cos`` is false (the residual head folds it
        into its own product with the tool embeddings)."""
        query_emb = np.atleast_2d(query_emb)
        if m >= len(self.registry):
            return None, (query_emb @ self.tool_emb.T if need_cos else None)
        return (self._ann_index() if self.first_stage == "ann" else DenseRetriever(self.tool_emb)).search(query_emb, m)

    def _components(self, query_emb: np.ndarray, stages: Stages, candidates: np.ndarray | None, cos: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(f_rel [Q, L], f_risk [Q, L] or [L]) for the scored set."""
        if cos is None and not stages.heads:
            cos = self._candidate_set(query_emb, len(self.registry))[1] if candidates is None else np.einsum("qmd,qd->qm", self.tool_emb[candidates], np.atleast_2d(query_emb))
        if stages.heads:
            if self.scorer is None:
                raise RiskrankError(f"mode {stages.name!r} needs a checkpoint (train one with `riskrank train`)")
            return self.scorer.relevance(query_emb, candidates, cos=cos), self.scorer.risk(candidates)
        return cos, (self.label_risk if candidates is None else self.label_risk[candidates])

    def _rank_scores(
        self, scores: np.ndarray, stages: Stages, *, candidates: np.ndarray | None = None, alpha: float | None = None,
        risk_source: str | None = None, normalisation: str | None = None, graph: ToolGraph | None = None,
        k: int | None = None, top: int | None = None, fill: str | None = None,
    ) -> tuple[np.ndarray, list[FilterResult] | None, np.ndarray]:
        """Graph smoothing, ranking and rule filter of precomputed scores [Q, N] (or [Q, M]
        over ``candidates``). Returns (order [Q, L] of tool indices, filter results or None,
        final scores [Q, L] in the scored set's column order). ``graph`` overrides the
        retriever's graph (edge-type ablations). ``top`` keeps only the first ``top``
        positions of the order, found without sorting the whole pool (the same positions as
        the full ranking's prefix)."""
        alpha = self.alpha if alpha is None else alpha
        if stages.graph and alpha > 0:
            g = graph if graph is not None else self.graph
            scores = g.smooth(scores, alpha, candidates, normalisation=normalisation or self.normalisation)
        results = None
        if stages.rule:
            rf = self._rule_filter(self._check_risk_source(risk_source or self.risk_source), k, fill)
            if top is not None:
                order, results = rf.filter_scores(scores, candidates, length=top)
                return order, results, scores
        local = rank(scores) if top is None else top_m(scores, top)
        order = local if candidates is None else np.take_along_axis(candidates, local, axis=1)
        if stages.rule:
            order, results = rf.filter_batch(order)
        return order, results, scores

    def rank_batch(
        self, query_emb: np.ndarray, *, mode: str | None = None, lam: float | None = None, alpha: float | None = None,
        candidates: int | None = None, risk_source: str | None = None, k: int | None = None,
        top: int | None = None, graph: ToolGraph | None = None, fill: str | None = None,
    ) -> BatchRanking:
        """Rank the registry for many encoded queries at once (the first ``top`` positions
        only when given: what a caller needing the top-k asks for at scale).

        Every argument left None is the retriever's own setting (``lam``: the checkpoint's
        for the heads, 0 for dense; ``candidates``: its top-M, the registry size for the full
        pool). ``k`` is the list length the rule filter's caps hold for; ``fill`` its fill
        policy (:data:`riskrank.rules.FILL_POLICIES`; the experiments pass the paper's);
        ``graph`` replaces the retriever's ToolGraph (edge-type ablations)."""
        stages = parse_mode(mode or self.mode)
        lam = self._effective_lambda(stages, lam)
        m = self.candidates if candidates is None else self._check_candidates(candidates)
        query_emb = np.atleast_2d(np.asarray(query_emb, dtype=np.float32))
        if query_emb.shape[1] != self.tool_emb.shape[1]:
            raise RiskrankError(f"query embeddings have dimension {query_emb.shape[1]}, tools {self.tool_emb.shape[1]}")
        fold = stages.heads and self.scorer is not None and self.scorer.design == "residual"
        cand, cos = self._candidate_set(query_emb, m, need_cos=not fold)
        f_rel, f_risk = self._components(query_emb, stages, cand, cos)
        scores = f_rel - np.float32(lam) * f_risk
        order, results, final = self._rank_scores(scores, stages, candidates=cand, alpha=alpha, risk_source=risk_source,
                                                  graph=graph, k=k, top=top, fill=fill)
        # Align per-tool values with the returned order.
        if cand is None:
            pos = order
        else:
            lookup = np.full((order.shape[0], len(self.registry)), -1, dtype=np.int64)
            np.put_along_axis(lookup, cand, np.arange(cand.shape[1])[None, :].repeat(cand.shape[0], 0), axis=1)
            pos = np.take_along_axis(lookup, order, axis=1)
        f_risk_2d = np.broadcast_to(f_risk, f_rel.shape)
        take = lambda a: np.take_along_axis(a, pos, axis=1)  # noqa: E731
        return BatchRanking(order, take(final), take(f_rel), take(np.ascontiguousarray(f_risk_2d)), results)

    def _effective_lambda(self, stages: Stages, lam: float | None) -> float:
        """lambda as given; else the checkpoint's for the heads, and 0 for dense (the dense
        mode with lambda > 0 is the risk-label-penalty baseline, only when asked for)."""
        if lam is None:
            return self.lam if stages.heads else 0.0
        lam = float(lam)
        if not np.isfinite(lam) or lam < 0:
            raise RiskrankError(f"lambda must be a finite number >= 0, got {lam}")
        return lam

    # -- one task (CLI, servers) -------------------------------------------------------------
    def retrieve(
        self, task: str, k: int = 5, *, lam: float | None = None, mode: str | None = None, alpha: float | None = None,
        risk_source: str | None = None, candidates: int | None = None, fill: str | None = None,
        min_score: float | None = None,
    ) -> RetrievalResult:
        """The risk-aware top-k for one task, with f_rel, f_risk, levels and permissions, and in
        rule modes the deferred tools with the constraint that deferred each.

        At most k tools: fewer when the rule filter's fill policy (``fill``, default the
        retriever's: ``safe``) will not top the list up with risky tools, or when tools fall
        below the relevance floor (``min_score`` on f_rel, default :meth:`relevance_floor`;
        ``float("-inf")``: none). Those are named in ``below_min_score``."""
        return self.retrieve_many([task], k, lam=lam, mode=mode, alpha=alpha, risk_source=risk_source, candidates=candidates,
                                  fill=fill, min_score=min_score)[0]

    def retrieve_many(
        self, tasks: Sequence[str], k: int = 5, *, lam: float | None = None, mode: str | None = None,
        alpha: float | None = None, risk_source: str | None = None, candidates: int | None = None,
        fill: str | None = None, min_score: float | None = None,
    ) -> list[RetrievalResult]:
        """:meth:`retrieve` for several tasks, encoded and ranked in one batch."""
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            raise RiskrankError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
        for t in tasks:
            if not isinstance(t, str) or not t.strip():
                raise RiskrankError("the task text is empty")
        stages = parse_mode(mode or self.mode)
        mode_name = stages.name
        source = self._check_risk_source(risk_source or self.risk_source)
        fill = self.rule_config.fill if fill is None else fill
        floor = self.relevance_floor(mode_name, min_score)
        batch = self.rank_batch(self._encode_queries(tasks), mode=mode, lam=lam, alpha=alpha, candidates=candidates,
                                risk_source=source, k=max(k, self.rule_config.k), top=k, fill=fill)
        predicted = self.predicted_levels
        eff_lam = self._effective_lambda(parse_mode(mode_name), lam)
        out = []
        for qi, task in enumerate(tasks):
            tools, below = [], []
            # In rule modes only the filter's exposed prefix is shown (fewer than k when its
            # fill policy does not top up).
            n = min(k, batch.filters[qi].n_exposed) if batch.filters is not None else k
            for r, idx in enumerate(batch.order[qi, :n]):
                t = self.registry[int(idx)]
                if floor is not None and batch.f_rel[qi, r] < floor:
                    below.append(t.name)
                    continue
                tools.append(RankedTool(
                    rank=len(tools) + 1, name=t.name, index=int(idx), score=float(batch.score[qi, r]), f_rel=float(batch.f_rel[qi, r]),
                    f_risk=float(batch.f_risk[qi, r]), risk_level=t.risk_level,
                    predicted_level=int(predicted[idx]) if predicted is not None else None,
                    permissions=sorted(t.permissions), description=t.description,
                ))
            eff_alpha = (self.alpha if alpha is None else float(alpha)) if parse_mode(mode_name).graph else 0.0
            res = RetrievalResult(task, mode_name, eff_lam, eff_alpha, source, tools,
                                  fill=fill if stages.rule else None, min_score=floor, below_min_score=below)
            if batch.filters is not None:
                fr = batch.filters[qi]
                top = set(int(i) for i in fr.top_k[:k])
                names = self.registry.names
                res.deferred = [
                    Deferral(names[i], int(i), list(reasons), names[fr.redundant_with[i]] if i in fr.redundant_with else None)
                    for i, reasons in fr.deferred.items() if int(i) not in top or reasons
                ]
                res.fallback = [names[i] for i in fr.fallback if int(i) in top]
                res.unlabelled = [names[i] for i in fr.unlabelled]
            out.append(res)
        return out

    # -- training and checkpoints: thin delegates ------------------------------------------------
    @classmethod
    def fit(
        cls,
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
    ) -> RiskAwareRetriever:
        """Encode (texts, gold) of ``registry`` and :func:`riskrank.training.fit` on them: the
        heads, the ToolGraph of the training part, lambda, alpha and the graph normalisation
        chosen on a validation slice of the queries. The result carries ``training``
        (TrainResult)."""
        cfg = (train_config or TrainConfig()).resolved()
        enc = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
        tool_emb = enc.encode(registry.texts(tool_template), desc="encoding tools")
        query_emb = enc.encode(list(texts), desc="encoding queries")
        gold = [np.asarray(g, dtype=np.int64) for g in gold]
        result, graph, choice = training.fit(tool_emb, query_emb, gold, registry, cfg, graph_config, alpha_grid=alpha_grid,
                                             normalisations=normalisations, progress=progress)
        data = {"queries_fingerprint": training.gold_fingerprint(list(texts), gold), "n_queries": len(texts)}
        return cls.from_training(registry, enc, tool_emb, result, graph, choice, training_data=data, tool_template=tool_template)

    @classmethod
    def from_training(
        cls, registry: ToolRegistry, encoder: Encoder, tool_emb: np.ndarray, result: TrainResult, graph: ToolGraph,
        choice: dict[str, Any], *, training_data: dict[str, Any] | None = None, tool_template: str = DEFAULT_TOOL_TEMPLATE,
    ) -> RiskAwareRetriever:
        """A retriever around freshly trained components (no files involved)."""
        ck = in_memory(result, encoder={"identity": encoder.identity, "name": encoder.display_name, "dim": int(tool_emb.shape[1])},
                       registry_fingerprint=registry.fingerprint(), inference=choice,
                       training_data={"tool_template": tool_template, **(training_data or {})})
        self = cls(registry, encoder=encoder, checkpoint=ck, graph=graph, tool_emb=tool_emb, tool_template=tool_template, progress=False)
        self.training = result
        return self

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint directory (:func:`riskrank.checkpoint.save_checkpoint`)."""
        if self.checkpoint is None or not hasattr(self, "training"):
            raise RiskrankError("only a retriever built by fit() can be saved")
        meta = self.checkpoint.meta
        data = dict(meta["training_data"])
        fingerprint = data.pop("registry_fingerprint")
        return save_checkpoint(self.training, path, encoder=meta["encoder"], registry_fingerprint=fingerprint,
                               training_data=data, inference=meta["inference"], graph=self.graph)
