"""RiskAwareRetriever: the inference engine, the one object that composes the stages.

registry -> embeddings (+ the lexical index) -> first stage (dense cosine, BM25 or their
fusion; optional top-M candidates) -> dual-head scores s = relevance - lambda * penalty ->
ToolGraph smoothing -> the context stage (context modes) -> named tools first -> rule filter
-> ranking.

The CLI, the servers and the experiments all call this object, so no stage is implemented
twice. Three verbs: :meth:`~RiskAwareRetriever.retrieve` (one task),
:meth:`~RiskAwareRetriever.retrieve_many` (several) and :meth:`~RiskAwareRetriever.rank_batch`
(encoded queries, arrays out: experiments and benchmarks). It only infers: training and every
choice made on validation are :mod:`riskrank.training`'s, the checkpoint directory is
:mod:`riskrank.checkpoint`'s; ``from_training`` and :meth:`~RiskAwareRetriever.save` are thin
delegates to the latter. The engine never imports training (it stands above the engine:
:func:`riskrank.training.fit_retriever` trains one), so serving loads no training code.

The scored set is the first stage's top-M, ``candidates`` (always an int): the full pool is
the registry size, and any M at least that large scores every tool (the default of the exact
first stage). The exact first stage's top-M is the mode's own first-stage ranking over every
tool (the cosine, BM25, or the fusion), so a top-M that covers the full pool's top ranks them
alike; the approximate one (``first_stage="ann"``, M = 100 by default) joins BM25's best
quarter of M to the IVF index's cosine top-M, and normalises the first-stage scores over
those M tools only. A tool the task names is always in the scored set.

Lambda and alpha: every pipeline (``core``, ``core+graph+rule``, the ``_pred`` variant, the
top-M ones) has its own, chosen on validation and stored in the checkpoint; a value given to
the constructor or a call overrides them.

A tool the task names exactly (an identifier-like name, ``delete_listed_files``, occurring in
the task between identifier bounds) ranks first in every mode; under the rule filter the
caps still apply to it, and a deferral says it was named. The text is needed for that (and
for BM25): :meth:`rank_batch` without ``texts`` or ``lexical`` ranks by embeddings alone.

The mode grammar and the result types live in :mod:`riskrank.modes` (no torch), so every
surface can name a mode or read a result without importing this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.ann import ANNRetriever
from riskrank.base import AUTO as BASE_AUTO
from riskrank.base import NAME as BASE_NAME
from riskrank.base import (
    NO_CHECKPOINT,
    default_checkpoint,
    default_level_model_dir,
    is_base_checkpoint,
    resolve_checkpoint,
)
from riskrank.checkpoint import Checkpoint, TrainResult, in_memory, load_checkpoint, save_checkpoint
from riskrank.context import ContextDecisions, NeedHead, apply_context
from riskrank.encoder import Encoder, encode_tools
from riskrank.errors import CheckpointError, RiskrankError, check_task
from riskrank.first_stage import (
    DEFAULT_TOP_M,
    PRIOR_FUSION,
    Fusion,
    LexicalEvidence,
    LexicalIndex,
    pin_named,
    rank,
    relevance_inputs,
    top_m,
    union_candidates,
)
from riskrank.graph import NORMALISATIONS, GraphConfig, ToolGraph
from riskrank.heads import PENALTY_SOURCES, HeadScorer, level_penalty, sigmoid_
from riskrank.levels import LevelModel, LevelPrediction, ToolEvidence, load_level_model, own_texts
from riskrank.modes import (
    FIRST_STAGES,
    MAX_K,
    RISK_SOURCES,
    CallSettings,
    Deferral,
    RankedTool,
    RetrievalResult,
    Stages,
    default_min_score,
    parse_mode,
    safe_default_mode,
)
from riskrank.registry import DEFAULT_TOOL_TEMPLATE, Tool, ToolRegistry
from riskrank.risk import (
    FILL_LEVELS,
    RISKY_LEVEL,
    ToolLevels,
    keyword_levels,
    label_risk,
    level_from_score,
    resolve_tool_levels,
)
from riskrank.rules import FILL_POLICIES, FilterResult, RuleConfig, RuleFilter

#: The approximate first stage joins BM25's best M // LEXICAL_SHARE tools to the index's
#: cosine top-M (a task whose words match a tool's is rarely served by the cosine alone).
LEXICAL_SHARE = 4
#: ToolGraphs of registries without training queries (semantic and permission edges only),
#: by registry fingerprint, tool embeddings, graph configuration and first stage: a reload, or a
#: guard's next catalogue of the same tools, reuses the graph instead of rebuilding it.
_GRAPH_CACHE: OrderedDict[tuple[str, str, str, str], ToolGraph] = OrderedDict()
GRAPH_CACHE_SIZE = 8
_GRAPH_LOCK = threading.Lock()


def final_order(
    scores: np.ndarray, *, named: np.ndarray | None, candidates: np.ndarray | None, rule_filter: RuleFilter | None,
    top: int | None, caps: np.ndarray | None = None,
) -> tuple[np.ndarray, list[FilterResult] | None]:
    """The last stages, in their one order: tools the task names first, then the rule filter
    (its caps, or the per-query ``caps``) or the plain ranking, mapped from the scored set's
    columns to tool indices. The engine ranks with it and validation (the lambda, alpha and
    fill choices of :mod:`riskrank.training`) scores the same order, so what is chosen is what
    runs. Returns (order [Q, L], the filter's per-query results or None)."""
    ranked = pin_named(scores, named)
    if rule_filter is not None and top is not None:
        return rule_filter.filter_scores(ranked, candidates, length=top, max_risky=caps)
    local = rank(ranked) if top is None else top_m(ranked, top)
    order = local if candidates is None else np.take_along_axis(candidates, local, axis=1)
    if rule_filter is not None:
        return rule_filter.filter_batch(order, caps)
    return order, None


#: A registry of fewer tools gets no default relevance floor (:meth:`RiskAwareRetriever.relevance_floor`).
MIN_FLOOR_TOOLS = 5


@dataclass
class BatchRanking:
    """Rankings of many queries: ``order`` [Q, L] tool indices best first and, aligned with
    it, the final score, f_rel and f_risk, and whether the task names the tool. ``filters``
    holds the rule filter's per-query results in rule modes."""

    order: np.ndarray
    score: np.ndarray
    f_rel: np.ndarray
    f_risk: np.ndarray
    filters: list[FilterResult] | None = None
    named: np.ndarray | None = None
    context: ContextDecisions | None = None
    """Context modes: the context stage's decisions, in the scored set's column order."""
    scored: np.ndarray | None = None
    """The scored set [Q, M] of tool indices (None: the full pool), to read ``context`` by tool."""
    withheld: list[np.ndarray] | None = None
    """Context modes: per query, the risky tools the context stage held back from the top-k."""

    def context_tool(self, q: int, col: int) -> int:
        """The tool index of column ``col`` of query ``q``'s scored set."""
        return int(col) if self.scored is None else int(self.scored[q, col])


def served_level_prediction(level_model: LevelModel, encoder: Encoder, tool_emb: np.ndarray, tools: Sequence[Tool],
                            tool_template: str = DEFAULT_TOOL_TEMPLATE, groups: Sequence[str] | None = None) -> LevelPrediction:
    """The level model's reading of a registry's ``tools`` as riskrank serves it, each tool
    without the opening sentences it shares with others (:func:`riskrank.levels.own_texts`; only
    those tools are encoded again; ``groups``: each tool's server, where an opening is counted):
    what a retriever's levels and the base build's choices read."""
    read, openings = own_texts(list(tools), groups)
    emb = tool_emb
    changed = [i for i, o in enumerate(openings) if o is not None]
    if changed:
        emb = np.array(emb, copy=True)
        emb[changed] = encode_tools(encoder, [read[i].text(tool_template) for i in changed])
    return level_model.predict(emb, read, ToolEvidence.of(read, openings))


def checked_k(k: Any) -> int:
    """``k`` as an int between 1 and :data:`MAX_K`: an int, a numpy integer or an integral float
    (``7.0``, as the HTTP API and ``find_tools`` read JSON's numbers); a bool, a string or
    ``7.5`` is refused."""
    if isinstance(k, (float, np.floating)) and float(k).is_integer():
        k = int(k)
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
        raise RiskrankError(f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    return int(k)


def _number(name: str, value: Any) -> float:
    """``value`` as a float, or an error naming ``name``: a number (not a bool, not a string:
    ``"0.5"`` is refused here as the HTTP API refuses it)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise RiskrankError(f"{name} must be a number, got {value!r}")
    return float(value)


def _checked_pins(pins: Any, registry: ToolRegistry) -> dict[str, int]:
    """The operator's level pins (name -> level 1..5), each naming a tool of ``registry``: a
    misspelt name pinned nothing without a word, a level out of range failed at the first
    retrieve without naming the pin."""
    if pins is None:
        return {}
    if not isinstance(pins, Mapping):
        raise RiskrankError(f"level_pins must be a mapping of tool name to level 1..5, got {type(pins).__name__}")
    unknown = [n for n in pins if n not in registry]
    if unknown:
        raise RiskrankError(f"level_pins names {len(unknown)} tool(s) the registry does not hold: "
                            + ", ".join(map(repr, unknown[:5])))
    bad = {n: v for n, v in pins.items() if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 5}
    if bad:
        name, value = next(iter(bad.items()))
        raise RiskrankError(f"level_pins[{name!r}] must be a level 1..5, got {value!r}")
    return {n: int(v) for n, v in pins.items()}


def _checked_embeddings(tool_emb: Any) -> np.ndarray:
    """Tool embeddings as a float32 [tools, dim] array, or an error naming what is wrong: not
    2-d (one vector, a batch of matrices), or holding NaN or infinity (every score they touch
    would be NaN, and a ranking of NaNs is no ranking)."""
    try:
        arr = np.ascontiguousarray(tool_emb, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise RiskrankError(f"tool embeddings must be a numeric [tools, dim] array: {exc}") from None
    if arr.ndim != 2:
        raise RiskrankError(f"tool embeddings must be a 2-d [tools, dim] array, got shape {tuple(arr.shape)}")
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise RiskrankError(f"tool embeddings hold NaN or infinity in {len(rows)} row(s), the first {rows[:5].tolist()}")
    return arr


class RiskAwareRetriever:
    """Risk-aware retrieval over one registry.

    >>> r = RiskAwareRetriever(registry)  # the base model, as every surface uses it
    >>> r.retrieve("delete the old log files", k=5).tools

    ``checkpoint``: omitted, the base model where the encoder is its encoder (else no heads,
    and :attr:`checkpoint_note` says why); ``"riskrank-base"`` the base model or an error; a
    path or :class:`~riskrank.checkpoint.Checkpoint` that one; None or ``"none"`` no heads
    (the encoder-only modes). ``tool_groups``: each tool's server, where the registry merges
    several (a gateway's): an opening its descriptions share is counted within one server.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        encoder: Encoder | str | None = None,
        checkpoint: Checkpoint | str | Path | None = BASE_AUTO,
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
        fusion: Fusion | None = None,
        predicted_levels: np.ndarray | None = None,
        pin_named: bool = True,
        fill_levels: str = "none",
        level_pins: dict[str, int] | None = None,
        tool_groups: Sequence[str] | None = None,
        tool_levels: ToolLevels | None = None,
        level_model: LevelModel | str | None = BASE_AUTO,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            hint = (f": a file is read with ToolRegistry.load({str(registry)!r}), or RiskAwareRetriever.from_paths"
                    if isinstance(registry, (str, Path)) else "")
            raise RiskrankError(f"registry must be a ToolRegistry, got {type(registry).__name__}{hint}")
        self.registry = registry
        # MCP hints only raise an unlabelled tool's level unless the operator trusts its servers.
        self.trust_annotations = bool(trust_annotations)
        self.cache_queries = cache_queries
        if encoder is not None and not isinstance(encoder, str) and not callable(getattr(encoder, "encode", None)):
            raise RiskrankError(f"encoder must be an encoder name, an Encoder or an object with encode(), got {type(encoder).__name__}")
        self.encoder = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
        self.tool_template = tool_template
        #: Why no checkpoint was loaded by default (no base model here, or another encoder), or None.
        self.checkpoint_note: str | None = None
        if isinstance(checkpoint, str) and checkpoint == BASE_AUTO:
            path, self.checkpoint_note = resolve_checkpoint(None, self.encoder.identity)
            checkpoint = Path(path) if path is not None else None
        elif isinstance(checkpoint, str) and checkpoint == NO_CHECKPOINT:
            checkpoint = None
        if isinstance(checkpoint, str) and checkpoint == BASE_NAME:
            # The base model by name, as every surface loads it without --checkpoint.
            base = default_checkpoint()
            if base is None:
                raise CheckpointError(f"no {BASE_NAME} in this installation (build it with `make base-model`)")
            checkpoint = base
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            checkpoint = load_checkpoint(checkpoint, encoder_identity=self.encoder.identity)
        self.checkpoint = checkpoint
        if tool_emb is None:
            tool_emb = encode_tools(self.encoder, registry.texts(tool_template))
        tool_emb = _checked_embeddings(tool_emb)
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
        self._lexical: LexicalIndex | None = None
        self.scorer = HeadScorer(checkpoint.model, tool_emb) if checkpoint is not None else None
        inference = checkpoint.inference if checkpoint is not None else {}
        #: The fusion the hybrid head was trained on (its f0), from the checkpoint.
        self.head_fusion = Fusion.from_dict(inference["fusion"]) if inference.get("fusion") else None
        if self.scorer is not None and self.scorer.lexical and self.head_fusion is None:
            raise CheckpointError("the checkpoint's relevance head reads lexical evidence but its sidecar has no inference.fusion")
        #: The fusion of the ``hybrid`` modes: given, else the checkpoint's, else the prior.
        self.fusion = fusion or self.head_fusion or PRIOR_FUSION
        #: What lambda multiplies outside the context stage (:data:`riskrank.heads.PENALTY_SOURCES`):
        #: the risk head's penalty, or the served levels' (:func:`riskrank.heads.level_penalty`).
        self.penalty_source = str(inference.get("penalty_source", PENALTY_SOURCES[0]))
        self._level_penalty: np.ndarray | None = None
        #: lambda / alpha / normalisation per pipeline, chosen on validation (the checkpoint's).
        self.pipelines: dict[str, dict[str, Any]] = dict(inference.get("pipelines") or {})
        self._given = {"lam": lam is not None, "alpha": alpha is not None, "normalisation": normalisation is not None}
        self.lam = _number("lambda", lam) if lam is not None else float(inference.get("lam", 0.1))
        self.alpha = _number("alpha", alpha) if alpha is not None else float(inference.get("alpha", 0.1))
        if not (np.isfinite(self.lam) and self.lam >= 0):  # as a call's own lambda and alpha are checked
            raise RiskrankError(f"lambda must be a finite number >= 0, got {self.lam}")
        if not 0.0 <= self.alpha <= 1.0:
            raise RiskrankError(f"alpha must be a number in [0, 1], got {self.alpha}")
        self.normalisation = normalisation or inference.get("normalisation") or (graph.config.normalisation if graph else "row")
        if self.normalisation not in NORMALISATIONS:
            raise RiskrankError(f"unknown normalisation {self.normalisation!r}; choose from {NORMALISATIONS}")
        self.pin_named = bool(pin_named)
        self.mode = mode or safe_default_mode(checkpoint is not None)  # as every surface
        parse_mode(self.mode)
        self.min_score = self._check_min_score(min_score)
        #: The risk head's held-out check from the checkpoint (an empty dict before it existed).
        self.risk_quality: dict[str, Any] = dict(checkpoint.meta.get("risk_head") or {}) if checkpoint is not None else {}
        if predicted_levels is not None:
            predicted_levels = np.asarray(predicted_levels)
            if predicted_levels.shape != (len(registry),) or predicted_levels.min() < 1 or predicted_levels.max() > 5:
                raise RiskrankError(f"predicted_levels must be [{len(registry)}] levels 1..5")
        self._predicted_override = predicted_levels
        self._predicted_cache: np.ndarray | None = None
        if fill_levels not in FILL_LEVELS:
            raise RiskrankError(f"fill_levels must be one of {', '.join(FILL_LEVELS)}, got {fill_levels!r}")
        self.fill_levels = fill_levels
        self.level_pins = _checked_pins(level_pins, registry)
        if tool_groups is not None and len(tool_groups) != len(self.registry):
            raise RiskrankError(f"tool_groups names {len(tool_groups)} groups for {len(self.registry)} tools")
        self.tool_groups = list(tool_groups) if tool_groups is not None else None
        if tool_levels is not None and len(tool_levels) != len(registry):
            raise RiskrankError(f"tool_levels has {len(tool_levels)} entries for {len(registry)} tools")
        self._tool_levels: ToolLevels | None = tool_levels
        self.level_model = self._resolve_level_model(level_model)
        self.risk_source = self._check_risk_source(risk_source)
        self.rule_config = rule_config or RuleConfig()
        self.graph_config = graph_config or GraphConfig(normalisation=self.normalisation)
        if graph is None and checkpoint is not None:
            graph = checkpoint.graph_for(registry.fingerprint(), len(registry))
        self._graph = graph
        self._filters: dict[tuple[str, int, str], RuleFilter] = {}
        # Audited risk as a score, for the dense risk-label-penalty baseline.
        self.label_risk = label_risk(registry.risk_levels)

    # -- construction helpers --------------------------------------------------------------
    def _resolve_level_model(self, level_model: LevelModel | str | None) -> LevelModel | None:
        """The level model unaudited tools are served at: given, or (``auto``) the shipped one
        beside the shipped base model on its encoder; None keeps the checkpoint's risk head
        with the keyword rule (a checkpoint trained on a user's own audited tools)."""
        if level_model is None or isinstance(level_model, LevelModel):
            model = level_model
        elif level_model == BASE_AUTO:
            folder = default_level_model_dir()
            if folder is None or self.checkpoint is None or not is_base_checkpoint(self.checkpoint.path):
                return None
            model = load_level_model(folder)
        else:
            model = load_level_model(level_model)
        if model is not None:
            if model.encoder_identity and model.encoder_identity != self.encoder.identity:
                if level_model == BASE_AUTO:
                    return None
                raise CheckpointError(f"the level model was trained on encoder {model.encoder_identity!r}, not {self.encoder.identity!r}")
            if model.dim != self.tool_emb.shape[1]:
                raise CheckpointError(f"the level model expects {model.dim}-d embeddings, got {self.tool_emb.shape[1]}-d")
        return model

    @classmethod
    def from_paths(cls, registry: str | Path, checkpoint: str | Path | None = BASE_AUTO, **kwargs: Any) -> RiskAwareRetriever:
        """Load a registry file and a checkpoint: omitted, the base model as the constructor
        loads it (None or ``"none"``: no heads); a path, that checkpoint directory."""
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
        for dense cosine; :func:`riskrank.modes.default_min_score`), which a registry of fewer
        than :data:`MIN_FLOOR_TOOLS` tools does not get: the heads read scores normalised over
        the task's tools, which say nothing over one or two (a one-tool registry's only tool
        fell below it, whatever the task). None: no floor."""
        value = self._check_min_score(min_score)
        if value is None:
            value = self.min_score
        if value is None and len(self.registry) < MIN_FLOOR_TOOLS:
            return None  # the default floor reads per-task normalised scores, degenerate over so few tools
        if value is None:
            stages = parse_mode(mode or self.mode)
            inference = self.checkpoint.inference if self.checkpoint is not None else {}
            value = default_min_score(stages.heads, self.encoder.identity, inference, stages.relevance)
        return None if value is None or value == float("-inf") else value

    def _check_risk_source(self, source: str) -> str:
        if source not in RISK_SOURCES:
            raise RiskrankError(f"unknown risk source {source!r}; choose from {', '.join(RISK_SOURCES)}")
        if source == "predicted" and self.scorer is None and self._predicted_override is None:
            raise RiskrankError("risk_source='predicted' needs a checkpoint (the learned risk head)")
        return source

    @property
    def graph(self) -> ToolGraph:
        """The ToolGraph; built on first use from the registry alone (semantic and permission
        edges; no training queries, so no co-occurrence edges) when none was given, and
        cached by registry fingerprint (with the encoder, graph configuration and first stage)."""
        if self._graph is None:
            # the embeddings' digest, not the encoder's name: a caller may pass its own tool_emb
            digest = hashlib.blake2b(np.ascontiguousarray(self.tool_emb).tobytes(), digest_size=16).hexdigest()
            key = (self.registry.fingerprint(), digest, repr(self.graph_config), self.first_stage)
            with _GRAPH_LOCK:
                cached = _GRAPH_CACHE.get(key)
                if cached is not None:
                    _GRAPH_CACHE.move_to_end(key)
            if cached is None:
                # With the approximate first stage, semantic edges come from the same index (no
                # all-pairs similarity over a large registry).
                index = self._ann_index() if self.first_stage == "ann" else None
                cached = ToolGraph.build(self.tool_emb, [], self.registry.risk_levels, self.registry.permissions,
                                         self.graph_config, semantic_index=index)
                with _GRAPH_LOCK:
                    _GRAPH_CACHE[key] = cached
                    while len(_GRAPH_CACHE) > GRAPH_CACHE_SIZE:
                        _GRAPH_CACHE.popitem(last=False)
            self._graph = cached
        return self._graph

    @property
    def lexical_index(self) -> LexicalIndex:
        """BM25 and the name index of the registry, built on first use."""
        if self._lexical is None:
            self._lexical = LexicalIndex.from_registry(self.registry)
        return self._lexical

    @property
    def f_risk(self) -> np.ndarray:
        """What lambda multiplies [N]: the risk head's penalty (p_risky, or the paper's
        f_risk), or the audited-label risk without a checkpoint."""
        return self.scorer.f_risk if self.scorer is not None else self.label_risk

    def penalty(self, stages: Stages, f_risk: np.ndarray, candidates: np.ndarray | None) -> np.ndarray:
        """What lambda multiplies for the scored set: the served levels' penalty where the
        checkpoint chose it (every pipeline but the context stage's, whose need head and
        lambdas were chosen on the risk head's penalty), else ``f_risk``."""
        if self.penalty_source != "levels" or stages.context or not stages.heads:
            return f_risk
        if self._level_penalty is None:
            self._level_penalty = level_penalty(self.tool_levels.levels)
        return self._level_penalty if candidates is None else self._level_penalty[candidates]

    @property
    def risk_head_learned(self) -> bool:
        """False when the checkpoint says its risk head has not learned (held-out check)."""
        return bool(self.risk_quality.get("learned", True))

    @property
    def predicted_levels(self) -> np.ndarray | None:
        """The levels ``risk_source="predicted"`` reads: the ones given to the constructor,
        else the risk head's, else (a head that has not learned) the keyword annotator's."""
        if self._predicted_override is not None:
            return self._predicted_override
        if self.scorer is None:
            return None
        if self._predicted_cache is None:
            if not self.risk_head_learned:
                self._predicted_cache = keyword_levels(self.registry, trust_annotations=self.trust_annotations)
            else:
                self._predicted_cache = level_from_score(self.scorer.level_score)
        return self._predicted_cache

    @property
    def tool_levels(self) -> ToolLevels:
        """Every tool's level, provenance and evidence (:func:`riskrank.risk.resolve_tool_levels`),
        resolved once: policy pins, audited levels, then the learned risk head combined with
        keywords and MCP annotations (else the keyword fill, else fail closed). What the rule
        filter reads under ``risk_source="labels"``, what every result shows as
        ``risk_level``, and what a gateway checks a call at."""
        if self._tool_levels is None:
            # the level model's reading, else a risk head that has learned, else no learned level
            prediction = (served_level_prediction(self.level_model, self.encoder, self.tool_emb, list(self.registry),
                                                  self.tool_template, self.tool_groups) if self.level_model is not None else None)
            score = self.scorer.level_score if prediction is None and self.scorer is not None and self.risk_head_learned else None
            self._tool_levels = resolve_tool_levels(
                self.registry, head_levels=level_from_score(score) if score is not None else None, head_scores=score,
                fill_keyword=self.fill_levels == "keyword", trust_annotations=self.trust_annotations, pins=self.level_pins,
                prediction=prediction)
        return self._tool_levels

    def level_note(self) -> str | None:
        """Why predicted levels are not the risk head's, when they are not."""
        if self._predicted_override is None and self.scorer is not None and not self.risk_head_learned:
            return (f"the risk head has not learned ({self.risk_quality.get('reason') or 'flagged at training'}): "
                    "predicted levels are the keyword annotator's")
        return None

    def _rule_filter(self, risk_source: str, k: int | None = None, fill: str | None = None) -> RuleFilter:
        """The rule filter for a risk source; ``k`` (the list length exposed) replaces the
        configured K, so the caps hold for the whole list an agent sees; ``fill`` replaces the
        configured fill policy."""
        k = self.rule_config.k if k is None else int(k)
        fill = self.rule_config.fill if fill is None else fill
        key = (risk_source, k, fill)
        if key not in self._filters:
            if risk_source == "labels":
                # Policy pins, audits, the risk head with keywords and MCP hints; unlabelled tools fail closed.
                levels = self.tool_levels.filter_levels
            else:
                levels = self.predicted_levels
            config = dataclasses.replace(self.rule_config, k=k, fill=fill)
            self._filters[key] = RuleFilter(config, levels, self.registry.perm_counts, self.tool_emb)
        return self._filters[key]

    # -- per-pipeline settings -----------------------------------------------------------------
    def pipeline_key(self, stages: Stages, risk_source: str | None = None, candidates: int | None = None) -> str:
        """The name of a pipeline's validated settings (``core+graph+rule_pred``,
        ``top100/core``): the mode, ``_pred`` for the rule filter on predicted levels, and
        ``topM/`` for a top-M scored set."""
        key = stages.name + ("_pred" if stages.rule and (risk_source or self.risk_source) == "predicted" else "")
        m = self.candidates if candidates is None else candidates
        return f"top{m}/{key}" if m < len(self.registry) else key

    def settings(self, mode: str | None = None, *, risk_source: str | None = None, candidates: int | None = None,
                 lam: float | None = None, alpha: float | None = None) -> dict[str, Any]:
        """The lambda, alpha and normalisation a call runs with: the call's, else the
        constructor's, else the checkpoint's for this pipeline (its top-M one when there is
        one, else the full pool's), else the checkpoint's defaults (0 for lambda without heads)."""
        stages = parse_mode(mode or self.mode)
        key = self.pipeline_key(stages, risk_source, candidates)
        chosen = self.pipelines.get(key) or self.pipelines.get(key.split("/", 1)[-1]) or {}
        out = {
            "lam": self.lam if self._given["lam"] or "lam" not in chosen else float(chosen["lam"]),
            "alpha": self.alpha if self._given["alpha"] or "alpha" not in chosen else float(chosen["alpha"]),
            "normalisation": self.normalisation if self._given["normalisation"] or "normalisation" not in chosen else chosen["normalisation"],
        }
        if not stages.heads:
            out["lam"] = 0.0
        if lam is not None:
            lam = _number("lambda", lam)
            if not np.isfinite(lam) or lam < 0:
                raise RiskrankError(f"lambda must be a finite number >= 0, got {lam}")
            out["lam"] = lam
        if alpha is not None:
            alpha = _number("alpha", alpha)
            if not 0.0 <= alpha <= 1.0:  # NaN fails too: it would smooth nothing and be reported as asked
                raise RiskrankError(f"alpha must be a number in [0, 1], got {alpha}")
            out["alpha"] = alpha
        if not stages.graph:
            out["alpha"] = 0.0
        return out

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

    def _first_stage(
        self, query_emb: np.ndarray, stages: Stages, m: int, texts: Sequence[str] | None, lexical: LexicalEvidence | None,
        pin: bool,
    ) -> tuple[np.ndarray | None, np.ndarray | None, LexicalEvidence | None, Any]:
        """(candidates [Q, M] or None for the full pool, cosine over the scored set or None,
        lexical evidence over the scored set or None, head inputs or None)."""
        n = len(self.registry)
        heads = stages.heads and self.scorer is not None
        hybrid_head = heads and bool(self.scorer.lexical)
        need_lex = stages.lexical or hybrid_head
        if need_lex and lexical is None and texts is None:
            what = "the checkpoint's relevance head" if hybrid_head else f"mode {stages.name!r}"
            raise RiskrankError(f"{what} reads lexical evidence: pass the task texts")
        have_text = lexical is not None or texts is not None
        use_lex = need_lex or (pin and have_text)
        approx = m < n and self.first_stage == "ann"
        if use_lex and lexical is None and not approx:
            lexical = self.lexical_index.evidence(list(texts))
        if m >= n:  # the full pool
            fold = heads and self.scorer.design == "residual" and not hybrid_head
            cos = None if fold else query_emb @ self.tool_emb.T
            inputs = relevance_inputs(cos, lexical, self.head_fusion) if hybrid_head else None
            return None, cos, lexical if use_lex else None, inputs
        if not approx:
            cos = query_emb @ self.tool_emb.T
            inputs = relevance_inputs(cos, lexical, self.head_fusion) if hybrid_head else None
            first = self._first_scores(stages, cos, lexical, inputs)
            cand = top_m(pin_named(first, lexical.named if use_lex and pin else None), m)
            take = lambda a: np.take_along_axis(a, cand, axis=1)  # noqa: E731
            return (cand, take(cos), lexical.take(cand) if use_lex else None, inputs.take(cand) if inputs is not None else None)
        ann_idx, _ = self._ann_index().search(query_emb, m)
        if use_lex:
            index = self.lexical_index
            extra = []
            for i in range(query_emb.shape[0]):
                if lexical is not None:
                    row = lexical.bm25[i]
                    best = top_m(row, max(1, m // LEXICAL_SHARE))[0]
                    best = best[row[best] > 0]
                    named = np.flatnonzero(lexical.named[i]) if pin else np.zeros(0, np.int64)
                else:
                    best = index.bm25.top(texts[i], max(1, m // LEXICAL_SHARE))
                    named = np.asarray([t for t in index.exact(texts[i]) if index.identifier_like[t]], np.int64) if pin else np.zeros(0, np.int64)
                extra.append(np.concatenate([named, best[~np.isin(best, named)]]))
            cand = union_candidates(ann_idx, extra, ann_idx.shape[1])
        else:
            cand = ann_idx
        cos = np.einsum("qmd,qd->qm", self.tool_emb[cand], query_emb)
        if use_lex:
            lexical = lexical.take(cand) if lexical is not None else self.lexical_index.evidence(list(texts), cand)
        inputs = relevance_inputs(cos, lexical, self.head_fusion) if hybrid_head else None
        return cand, cos, lexical if use_lex else None, inputs

    def _first_scores(self, stages: Stages, cos: np.ndarray, lexical: LexicalEvidence | None, inputs: Any) -> np.ndarray:
        """The scores the exact first stage takes its top-M by: the mode's own relevance (the
        head's f0 for a hybrid head, the cosine for a dense one)."""
        if stages.heads:
            return inputs.f0 if inputs is not None else cos
        if stages.relevance == "bm25":
            return lexical.bm25
        if stages.relevance == "hybrid":
            return self.fusion(cos, lexical.bm25)
        return cos

    def _no_heads(self, stages: Stages) -> RiskrankError:
        """The error of a mode that needs heads on a retriever without a checkpoint, with the
        reason the default did not load the base model when there was one."""
        why = f" (no checkpoint was loaded: {self.checkpoint_note})" if self.checkpoint_note else ""
        return RiskrankError(f"mode {stages.name!r} needs a checkpoint{why}: checkpoint=\"riskrank-base\" "
                             "(the base model every surface uses), or one of `riskrank train`")

    def _components(
        self, query_emb: np.ndarray, stages: Stages, candidates: np.ndarray | None, cos: np.ndarray | None,
        lexical: LexicalEvidence | None, inputs: Any,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(relevance term of s [Q, L], f_rel [Q, L], penalty [L] or [Q, L]) for the scored set."""
        if stages.heads:
            if self.scorer is None:
                raise self._no_heads(stages)
            z = self.scorer.logits(query_emb, candidates, cos=cos, inputs=inputs)
            f_rel = sigmoid_(z.copy()) if self.scorer.space == "logit" else sigmoid_(z)
            return (z if self.scorer.space == "logit" else f_rel), f_rel, self.scorer.risk(candidates)
        penalty = self.label_risk if candidates is None else self.label_risk[candidates]
        if stages.relevance == "bm25":
            return lexical.bm25, lexical.bm25, penalty
        if cos is None:
            cos = query_emb @ self.tool_emb.T
        if stages.relevance == "hybrid":
            h = self.fusion(cos, lexical.bm25)
            return h, h, penalty
        return cos, cos, penalty

    def _rank_scores(
        self, scores: np.ndarray, stages: Stages, *, candidates: np.ndarray | None = None, alpha: float | None = None,
        risk_source: str | None = None, normalisation: str | None = None, graph: ToolGraph | None = None,
        k: int | None = None, top: int | None = None, fill: str | None = None, named: np.ndarray | None = None,
        adjust: Any = None,
    ) -> tuple[np.ndarray, list[FilterResult] | None, np.ndarray, Any]:
        """Graph smoothing, named tools first, ranking and rule filter of precomputed scores
        [Q, N] (or [Q, M] over ``candidates``). Returns (order [Q, L] of tool indices, filter
        results or None, final scores [Q, L] in the scored set's column order, as smoothed,
        before named tools are lifted, the context stage's decisions or None). ``graph`` overrides the retriever's graph (edge-type
        ablations). ``top`` keeps only the first ``top`` positions of the order, found
        without sorting the whole pool (the same positions as the full ranking's prefix).
        ``adjust`` (the context stage) maps the smoothed scores to (scores, per-query risk
        caps of the rule filter or None, its decisions)."""
        alpha = self.alpha if alpha is None else alpha
        if stages.graph and alpha > 0:
            g = graph if graph is not None else self.graph
            scores = g.smooth(scores, alpha, candidates, normalisation=normalisation or self.normalisation)
        caps, decided = None, None
        if adjust is not None:
            def smooth(x: np.ndarray) -> np.ndarray:
                if not (stages.graph and alpha > 0):
                    return x
                g = graph if graph is not None else self.graph
                return g.smooth(x, alpha, candidates, normalisation=normalisation or self.normalisation)

            scores, caps, decided = adjust(scores, smooth)
        rf = self._rule_filter(self._check_risk_source(risk_source or self.risk_source), k, fill) if stages.rule else None
        order, results = final_order(scores, named=named, candidates=candidates, rule_filter=rf, top=top, caps=caps)
        return order, results, scores, decided

    def rank_batch(
        self, query_emb: np.ndarray, *, mode: str | None = None, lam: float | None = None, alpha: float | None = None,
        candidates: int | None = None, risk_source: str | None = None, k: int | None = None,
        top: int | None = None, graph: ToolGraph | None = None, fill: str | None = None,
        texts: Sequence[str] | None = None, lexical: LexicalEvidence | None = None, pin: bool | None = None,
        call: CallSettings | None = None,
    ) -> BatchRanking:
        """Rank the registry for many encoded queries at once (the first ``top`` positions
        only when given: what a caller needing the top-k asks for at scale).

        Every argument left None is the retriever's own setting (``lam``, ``alpha``: the
        pipeline's validated ones, 0 for lambda without heads; ``candidates``: its top-M, the
        registry size for the full pool). ``k`` is the list length the rule filter's caps
        hold for; ``fill`` its fill policy (:data:`riskrank.rules.FILL_POLICIES`; the
        experiments pass the paper's); ``graph`` replaces the retriever's ToolGraph (edge-type
        ablations). ``texts`` (the tasks) or ``lexical`` (their full-pool evidence,
        :meth:`riskrank.first_stage.LexicalIndex.evidence`) bring the lexical evidence: BM25
        and the hybrid head need it, and named tools come first only with it (``pin``:
        default the retriever's ``pin_named``). ``call``: settings already resolved
        (:meth:`resolve_call`), read instead of the other arguments' mode, lambda, alpha,
        risk source and candidates."""
        if call is None:
            call = self.resolve_call(k or self.rule_config.k, lam=lam, mode=mode, alpha=alpha, risk_source=risk_source,
                                     candidates=candidates)
        stages = parse_mode(call.mode)
        m, source = call.candidates, call.risk_source
        setting = {"lam": call.lam, "alpha": call.alpha, "normalisation": call.normalisation}
        query_emb = np.atleast_2d(np.asarray(query_emb, dtype=np.float32))
        if query_emb.shape[1] != self.tool_emb.shape[1]:
            raise RiskrankError(f"query embeddings have dimension {query_emb.shape[1]}, tools {self.tool_emb.shape[1]}")
        if texts is not None and len(texts) != query_emb.shape[0]:
            raise RiskrankError(f"{len(texts)} texts for {query_emb.shape[0]} query embeddings")
        if lexical is not None and lexical.bm25.shape != (query_emb.shape[0], len(self.registry)):
            raise RiskrankError(f"lexical evidence has shape {lexical.bm25.shape}, expected {(query_emb.shape[0], len(self.registry))}")
        pin = self.pin_named if pin is None else bool(pin)
        cand, cos, lex, inputs = self._first_stage(query_emb, stages, m, texts, lexical, pin)
        rel, f_rel, f_risk = self._components(query_emb, stages, cand, cos, lex, inputs)
        scores = rel - np.float32(setting["lam"]) * self.penalty(stages, f_risk, cand) if setting["lam"] else rel
        named = lex.named if lex is not None and pin else None
        adjust = None
        if stages.context:
            adjust = self._context_adjust(stages, query_emb, cand, cos, inputs, rel, f_risk, m, k, float(setting["lam"]))
        order, results, final, decided = self._rank_scores(scores, stages, candidates=cand, alpha=setting["alpha"], risk_source=source,
                                                  normalisation=setting["normalisation"], graph=graph, k=k, top=top, fill=fill,
                                                  named=named, adjust=adjust)
        # Align per-tool values with the returned order.
        if cand is None:
            pos = order
        else:
            lookup = np.full((order.shape[0], len(self.registry)), -1, dtype=np.int64)
            np.put_along_axis(lookup, cand, np.arange(cand.shape[1])[None, :].repeat(cand.shape[0], 0), axis=1)
            pos = np.take_along_axis(lookup, order, axis=1)
        f_risk_2d = np.broadcast_to(f_risk, f_rel.shape)
        take = lambda a: np.take_along_axis(a, pos, axis=1)  # noqa: E731
        out = BatchRanking(order, take(final), take(f_rel), take(np.ascontiguousarray(f_risk_2d)), results,
                           take(named) if named is not None else None)
        if stages.context:
            dec, withheld = decided
            out.context, out.scored = dec, cand
            out.withheld = [np.array([out.context_tool(q, c) for c in cols], dtype=np.int64) for q, cols in enumerate(withheld)]
        return out

    # -- the context stage --------------------------------------------------------------------
    @property
    def need_head(self) -> NeedHead | None:
        """The checkpoint's need head (the context modes); None without one."""
        return self.checkpoint.need_head if self.checkpoint is not None else None

    def context_settings(self, stages: Stages, candidates: int | None = None) -> dict[str, Any]:
        """The need threshold ``tau`` and relevance ``margin`` of a context pipeline, chosen
        on validation (the checkpoint's ``inference.context``)."""
        if self.checkpoint is None:
            raise self._no_heads(stages)
        where = f" ({self.checkpoint.path})" if self.checkpoint.path is not None else ""
        if self.need_head is None:
            raise CheckpointError(f"mode {stages.name!r} needs a checkpoint with a need head; this checkpoint{where} has none "
                                  "(trained before the context stage, or without validation queries): retrain it with `riskrank train`")
        table = self.checkpoint.inference.get("context") or {}
        key = self.pipeline_key(stages, "labels", candidates)
        chosen = table.get(key) or table.get(key.split("/", 1)[-1])
        if chosen is None:
            raise CheckpointError(f"mode {stages.name!r}: the checkpoint{where} has a need head but no inference.context "
                                  f"settings for {key!r}: retrain it with `riskrank train`")
        # The rule pipeline's cap for a task that needs a risky tool (1 in checkpoints from
        # before it was chosen); none without the rule filter.
        cap = int(chosen.get("cap_need", 1)) if stages.rule else None
        return {"tau": float(chosen["tau"]), "margin": None if chosen.get("margin") is None else float(chosen["margin"]),
                "lam_need": float(chosen["lam_need"]), "cap_need": cap}

    def _context_adjust(self, stages: Stages, query_emb: np.ndarray, cand: np.ndarray | None, cos: np.ndarray | None,
                        inputs: Any, rel: np.ndarray, f_risk: np.ndarray, m: int, k: int | None, lam_hold: float) -> Any:
        """The context stage as a hook of :meth:`_rank_scores`: the need head on the first
        stage and the risk head, then :func:`riskrank.context.apply_context`. The hook returns
        (scores, the rule filter's per-query caps, (its decisions, per query the risky columns
        it withheld from the top-k))."""
        setting = self.context_settings(stages, m)
        head = self.need_head
        assert head is not None and self.scorer is not None
        if inputs is not None:
            first = inputs.f0
        elif cos is not None:
            first = cos
        else:
            first = query_emb @ self.tool_emb.T
        need = head.predict(query_emb, first, f_risk)
        levels = self.predicted_levels
        risky_all = (levels if levels is not None else np.full(len(self.registry), 5)) >= RISKY_LEVEL
        risky = risky_all if cand is None else risky_all[cand]
        slot = self.rule_config.k if k is None else int(k)
        lam_need = min(setting["lam_need"], lam_hold)

        def adjust(smoothed: np.ndarray, smooth: Any) -> tuple[np.ndarray, np.ndarray | None, Any]:
            need_scores = smooth(rel - np.float32(lam_need) * f_risk) if lam_need != lam_hold else smoothed
            final, dec = apply_context(need_scores, smoothed, rel, risky, need, setting["tau"], setting["margin"], slot,
                                       lam_need, lam_hold, setting["cap_need"])
            # What the stage withheld: the risky tools a task that needs one would see in its top-k.
            width = min(slot, final.shape[1])
            pre, now = top_m(need_scores, width), top_m(final, width)
            withheld = [[int(c) for c in pre[q] if risky_q(q, c) and c not in set(now[q].tolist())] for q in range(pre.shape[0])]
            return final, (dec.risk_cap if stages.rule else None), (dec, withheld)

        def risky_q(q: int, c: int) -> bool:
            return bool(risky[c] if risky.ndim == 1 else risky[q, c])

        return adjust

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
        ``float("-inf")``: none). Those are named in ``below_min_score``. A tool the task
        names is never cut by the floor."""
        return self.retrieve_many([task], k, lam=lam, mode=mode, alpha=alpha, risk_source=risk_source, candidates=candidates,
                                  fill=fill, min_score=min_score)[0]

    def resolve_call(
        self, k: int = 5, *, lam: float | None = None, mode: str | None = None, alpha: float | None = None,
        risk_source: str | None = None, candidates: int | None = None, fill: str | None = None,
        min_score: float | None = None,
    ) -> CallSettings:
        """What a call with these overrides runs with, resolved once (the mode parsed, lambda
        and alpha from the checkpoint's validated choice for that pipeline unless given, the
        fill policy, the relevance floor, the scored set): the object every stage reads and
        every result reports. With no overrides: what a plain :meth:`retrieve` runs."""
        stages = parse_mode(mode or self.mode)
        source = self._check_risk_source(risk_source or self.risk_source)
        m = self.candidates if candidates is None else self._check_candidates(candidates)
        setting = self.settings(stages.name, risk_source=source, candidates=m, lam=lam, alpha=alpha)
        fill = self.rule_config.fill if fill is None else fill
        if fill not in FILL_POLICIES:  # checked in every mode, not only where a rule stage reads it
            raise RiskrankError(f"fill must be one of {', '.join(FILL_POLICIES)}, got {fill!r}")
        return CallSettings(stages.name, int(k), setting["lam"], setting["alpha"], setting["normalisation"], source,
                            fill if stages.rule else None, self.relevance_floor(stages.name, min_score), m)

    def retrieve_many(
        self, tasks: Sequence[str], k: int = 5, *, lam: float | None = None, mode: str | None = None,
        alpha: float | None = None, risk_source: str | None = None, candidates: int | None = None,
        fill: str | None = None, min_score: float | None = None,
    ) -> list[RetrievalResult]:
        """:meth:`retrieve` for several tasks, encoded and ranked in one batch."""
        k = checked_k(k)
        if isinstance(tasks, (str, bytes)):
            raise RiskrankError(f"tasks must be a list of task strings, got {type(tasks).__name__} (retrieve takes one task)")
        try:
            tasks = list(tasks)  # an iterator is read once: checked, then ranked
        except TypeError:
            raise RiskrankError(f"tasks must be a list of task strings, got {type(tasks).__name__}") from None
        for t in tasks:
            check_task(t)
        call = self.resolve_call(k, lam=lam, mode=mode, alpha=alpha, risk_source=risk_source, candidates=candidates,
                                 fill=fill, min_score=min_score)
        stages = parse_mode(call.mode)
        mode_name, source, floor = call.mode, call.risk_source, call.min_score
        batch = self.rank_batch(self._encode_queries(tasks), k=max(k, self.rule_config.k), top=k, fill=call.fill,
                                texts=list(tasks), call=call)
        predicted = self.predicted_levels
        resolved = self.tool_levels
        note = self.level_note() if stages.rule and source == "predicted" else None
        # a smoothing weight asked for where no graph stage runs: said, not silently dropped
        ignored = f"alpha {alpha:g} was asked, but mode {mode_name} has no graph stage: ignored" \
            if alpha is not None and not stages.graph else None
        out = []
        for qi, task in enumerate(tasks):
            tools, below = [], []
            named_row = batch.named[qi] if batch.named is not None else None
            # In rule modes only the filter's exposed prefix is shown (fewer than k when its
            # fill policy does not top up).
            n = min(k, batch.filters[qi].n_exposed) if batch.filters is not None else k
            for r, idx in enumerate(batch.order[qi, :n]):
                t = self.registry[int(idx)]
                named = bool(named_row[r]) if named_row is not None else False
                if floor is not None and batch.f_rel[qi, r] < floor and not named:
                    below.append(t.name)
                    continue
                tools.append(RankedTool(
                    rank=len(tools) + 1, name=t.name, index=int(idx), score=float(batch.score[qi, r]), f_rel=float(batch.f_rel[qi, r]),
                    f_risk=float(batch.f_risk[qi, r]), audited_level=t.risk_level,
                    predicted_level=int(predicted[idx]) if predicted is not None else None,
                    permissions=sorted(t.permissions), description=t.description, named=named,
                    **resolved.of(int(idx)),
                ))
            res = RetrievalResult(task, mode_name, call.lam, call.alpha, source, tools,
                                  fill=call.fill, min_score=floor, below_min_score=below, k=k, settings=call)
            if note:
                res.notes.append(note)
            if ignored:
                res.notes.append(ignored)
            if floor is None and min_score is None and self.min_score is None and len(self.registry) < MIN_FLOOR_TOOLS:
                res.notes.append(f"no relevance floor: the default floor is not applied to a registry of fewer than "
                                 f"{MIN_FLOOR_TOOLS} tools (min_score sets one)")
            if batch.filters is not None:
                fr = batch.filters[qi]
                top = set(int(i) for i in fr.top_k[:k])
                names = self.registry.names
                index = self.lexical_index
                named_tools = {t for t in index.exact(task) if index.identifier_like[t]} if self.pin_named else set()
                res.deferred = [
                    Deferral(names[i], int(i), list(reasons), names[fr.redundant_with[i]] if i in fr.redundant_with else None,
                             named=int(i) in named_tools)
                    for i, reasons in fr.deferred.items() if int(i) not in top or reasons
                ]
                res.fallback = [names[i] for i in fr.fallback if int(i) in top]
                broke = {d.name: d.reasons for d in res.deferred}
                for t in res.tools:
                    if t.name in res.fallback and broke.get(t.name):
                        t.reasons.append("admitted as fallback (fewer than k tools met every rule) although it breaks: "
                                         + ", ".join(broke[t.name]))
                res.unlabelled = [names[i] for i in fr.unlabelled]
            if batch.context is not None:
                self._explain_context(res, batch, qi)
            out.append(res)
        return out

    def _explain_context(self, res: RetrievalResult, batch: BatchRanking, q: int) -> None:
        """The estimated need and, per admitted or withheld risky tool, why (need, margin, cap)."""
        dec = batch.context
        assert dec is not None and batch.withheld is not None
        names = self.registry.names
        res.need = round(float(dec.need[q]), 4)
        admitted = batch.context_tool(q, dec.admitted[q]) if dec.admitted[q] >= 0 else None
        info = dec.take(q)
        info["admitted"] = names[admitted] if admitted is not None else None
        info["best_safe"] = names[batch.context_tool(q, dec.best_safe[q])] if dec.best_safe[q] >= 0 else None
        info["best_risky"] = names[batch.context_tool(q, dec.best_risky[q])] if dec.best_risky[q] >= 0 else None
        res.context = info
        for t in res.tools:
            if t.index == admitted:
                t.context = dec.why(q, True)
            elif t.predicted_level is not None and t.predicted_level >= RISKY_LEVEL:  # shown by its score, not admitted
                why = dec.why(q, False)
                if not dec.needs_risk[q]:
                    t.context = why + "; shown by its score all the same"
                else:
                    t.context = why.replace("not admitted", "not admitted; shown by its score") if "not admitted" in why else (
                        why + "; shown by its score")
        shown = {t.index for t in res.tools}
        seen = {d.index for d in res.deferred}
        for i in batch.withheld[q]:
            if int(i) in shown:
                continue
            why = dec.why(q, False)
            if int(i) in seen:
                for d in res.deferred:
                    if d.index == int(i):
                        d.reasons = sorted({*d.reasons, "context"})
                        d.context = why
            else:
                res.deferred.append(Deferral(names[i], int(i), ["context"], context=why))

    # -- checkpoints: thin delegates (training is riskrank.training.fit_retriever) -----------------
    @classmethod
    def fit(cls, *args: Any, **kwargs: Any) -> RiskAwareRetriever:
        """Moved: training is not part of the engine. Use :func:`riskrank.fit_retriever` (the
        same arguments); this name stays only to say so."""
        raise RiskrankError("RiskAwareRetriever.fit moved to riskrank.fit_retriever(registry, texts, gold, ...) "
                            "(the same arguments): training is a package above the engine")

    @classmethod
    def from_training(
        cls, registry: ToolRegistry, encoder: Encoder, tool_emb: np.ndarray, result: TrainResult, graph: ToolGraph,
        choice: dict[str, Any], *, training_data: dict[str, Any] | None = None, tool_template: str = DEFAULT_TOOL_TEMPLATE,
        lexical: LexicalIndex | None = None,
    ) -> RiskAwareRetriever:
        """A retriever around freshly trained components (no files involved): what
        :func:`riskrank.training.fit_retriever` returns."""
        ck = in_memory(result, encoder={"identity": encoder.identity, "name": encoder.display_name, "dim": int(tool_emb.shape[1])},
                       registry_fingerprint=registry.fingerprint(), inference=choice,
                       training_data={"tool_template": tool_template, **(training_data or {})})
        self = cls(registry, encoder=encoder, checkpoint=ck, graph=graph, tool_emb=tool_emb, tool_template=tool_template, progress=False)
        self.training = result
        self._lexical = lexical  # the index training already built, or None (built on first use)
        return self

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint directory (:func:`riskrank.checkpoint.save_checkpoint`)."""
        if self.checkpoint is None or not hasattr(self, "training"):
            raise RiskrankError("only a retriever built by riskrank.training.fit_retriever() can be saved")
        meta = self.checkpoint.meta
        data = dict(meta["training_data"])
        fingerprint = data.pop("registry_fingerprint")
        return save_checkpoint(self.training, path, encoder=meta["encoder"], registry_fingerprint=fingerprint,
                               training_data=data, inference=meta["inference"], graph=self.graph)
