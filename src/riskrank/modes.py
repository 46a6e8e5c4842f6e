"""The names every surface shares: the mode grammar, the shared constants and the result types.

Standard library only (no numpy, no torch), so the CLI, the servers and the agent adapters
can validate a request and describe a result without loading the engine.

Modes are ``+``-separated stages. The first names the relevance scores: ``dense`` (cosine;
with lambda > 0 and audited labels it is the paper's risk-label-penalty baseline), ``bm25``,
``hybrid`` (the fusion of the two: the checkpoint's validated one, else
:data:`riskrank.first_stage.PRIOR_FUSION`) or ``core`` (the dual head, which reads its own
first stage: the checkpoint's). ``core+graph`` adds ToolGraph smoothing, and any of them may
end in ``+rule`` (the rule filter). ``graph`` and ``rule`` are short for ``core+graph`` and
``core+graph+rule``. ``core+graph+context`` and ``core+graph+context+rule`` add the context
stage (:mod:`riskrank.context`): the checkpoint's need head decides per task whether a risky
tool is exposed at all (and, with ``+rule``, the rule filter's risk cap). How the scored set is found (every tool, or a top-M from an exact or an
approximate search) is a separate setting, the first-stage search (:data:`FIRST_STAGES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from riskrank.errors import RiskrankError

MODE_ALIASES = {"graph": "core+graph", "rule": "core+graph+rule"}
#: Every mode string :func:`parse_mode` accepts, spelled out (CLI choices, API schemas).
MODES = ("dense", "dense+rule", "bm25", "bm25+rule", "hybrid", "hybrid+rule", "core", "core+rule", "core+graph",
         "core+graph+rule", "core+graph+context", "core+graph+context+rule", "graph", "rule")
#: The modes with the context stage (they need a checkpoint with a need head).
CONTEXT_MODES = ("core+graph+context", "core+graph+context+rule")
#: The relevance scores of a mode without heads.
RELEVANCE_SOURCES = ("dense", "bm25", "hybrid")
#: Which risk levels the rule filter reads: the audited labels, or the risk head's predictions.
RISK_SOURCES = ("labels", "predicted")
#: How the top-M scored set is found: "exact" (the mode's first-stage scores over every tool) or
#: "ann" (an IVF index's cosine top-M, joined by BM25's best; large registries).
FIRST_STAGES = ("exact", "ann")
#: The longest list one retrieval returns.
MAX_K = 100
#: The largest risk weight lambda a checkpoint may carry (training grids stay far below it; a
#: larger value is an edited or corrupt sidecar).
MAX_LAMBDA = 100.0
#: The relevance floor of the dense cosine scale, per encoder (the model name, without the
#: weights fingerprint): at most 1% of the (query, gold tool) pairs of each validation set
#: (Seal-Tools dev, the demo tasks) score below it. Measured with ``python
#: benchmarks/min_score.py`` (docs/serving.md gives the numbers). MiniLM gives some gold tools
#: a cosine near 0.02, so its floor is low: it drops tools unrelated to the task, it cannot
#: tell a weak match from an off-topic one. An encoder not listed gets no dense floor.
DENSE_MIN_SCORE: dict[str, float] = {"sentence-transformers/all-MiniLM-L6-v2": 0.0214}

#: ``min_score`` that switches the relevance floor off.
NO_MIN_SCORE = float("-inf")


def safe_default_mode(has_heads: bool) -> str:
    """The strongest safe mode available: what every surface (``riskrank serve``, ``riskrank
    mcp``, :class:`~riskrank.adapters.ToolGuard`) runs when no mode is given. With the dual
    head (a checkpoint) the full pipeline, else cosine relevance under the rule filter; the
    rule filter is in both, so no default exposes more than its caps allow."""
    return "core+graph+rule" if has_heads else "dense+rule"


def default_min_score(heads: bool, encoder_identity: str, inference: dict[str, Any], relevance: str = "dense") -> float | None:
    """The relevance floor of a score scale when none is given: the checkpoint's own (chosen
    on its validation queries at training time) for the heads, the encoder's measured one
    (:data:`DENSE_MIN_SCORE`) for dense cosine; None where neither is known (no floor: BM25
    and the fusion have none measured)."""
    if heads:
        value = inference.get("min_score")
        return None if value is None else float(value)
    if relevance != "dense":
        return None
    return DENSE_MIN_SCORE.get(encoder_identity.split("@", 1)[0])


@dataclass(frozen=True)
class Stages:
    """Which stages a mode runs; ``relevance`` is the first stage of a mode without heads
    (:data:`RELEVANCE_SOURCES`; the heads read their checkpoint's)."""

    heads: bool
    graph: bool
    rule: bool
    relevance: str = "dense"
    context: bool = False

    @property
    def name(self) -> str:
        return "+".join(["core" if self.heads else self.relevance, *(["graph"] if self.graph else []),
                         *(["context"] if self.context else []), *(["rule"] if self.rule else [])])

    @property
    def lexical(self) -> bool:
        """Whether the mode's own scores read the lexical evidence (BM25 or the fusion)."""
        return not self.heads and self.relevance != "dense"


def parse_mode(mode: str) -> Stages:
    """``core+graph+rule`` -> Stages(heads, graph, rule); clear error on anything else."""
    full = MODE_ALIASES.get(mode, mode) if isinstance(mode, str) else ""
    if full in CONTEXT_MODES:
        return Stages(heads=True, graph=True, rule=full.endswith("+rule"), context=True)
    parts = full.split("+")
    head = parts[0]
    valid = head in ("core", *RELEVANCE_SOURCES) and all(p in ("graph", "rule") for p in parts[1:]) and len(set(parts)) == len(parts)
    if not valid or (head != "core" and "graph" in parts) or (parts[1:] and parts[1:] not in (["rule"], ["graph"], ["graph", "rule"])):
        raise RiskrankError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return Stages(heads=head == "core", graph="graph" in parts, rule="rule" in parts, relevance="dense" if head == "core" else head)


@dataclass(frozen=True)
class CallSettings:
    """What one retrieval call runs with, resolved once from the call's overrides, the
    retriever's settings and the checkpoint's validated choices; every stage reads it and
    every result reports it (``settings``). ``fill`` is None outside rule modes; ``min_score``
    None: no relevance floor; ``candidates``: the scored set's size (the registry's: the
    full pool)."""

    mode: str
    k: int
    lam: float
    alpha: float
    normalisation: str
    risk_source: str
    fill: str | None
    min_score: float | None
    candidates: int

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["lambda"] = out.pop("lam")
        return out


@dataclass
class RankedTool:
    """One tool of a returned ranking, with the evidence behind its place."""

    rank: int
    name: str
    index: int
    score: float
    f_rel: float
    f_risk: float
    risk_level: int | None
    """The tool's one level (1..5): what the rule filter reads under ``risk_source="labels"``,
    what a gateway checks a call at and asks confirmation for, what the console shows."""
    predicted_level: int | None
    permissions: list[str]
    description: str
    named: bool = False
    """The task names this tool (its identifier occurs in the task): it ranks first."""
    audited_level: int | None = None
    """The registry's audited level (None: unaudited); ``risk_level`` differs from it only
    where the operator's policy pins another."""
    risk_provenance: str | None = None
    """Where ``risk_level`` comes from: ``policy`` (pinned), ``audited``, ``predicted`` (the
    risk head), ``keyword``, ``annotation`` (an MCP hint moved it) or ``unlabelled`` (fail closed)."""
    risk_evidence: list[str] = field(default_factory=list)
    """Why: the head's level and score, the keyword hits, the annotation."""
    context: str | None = None
    """Context modes: why this risky tool was admitted (need, relevance margin, risk cap)."""
    reasons: list[str] = field(default_factory=list)
    """Why it is shown where a rule would have held it back (a fallback), and ``context``."""

    @property
    def effective_level(self) -> int | None:
        """Deprecated name of :attr:`risk_level`."""
        return self.risk_level

    def to_dict(self) -> dict[str, Any]:
        # ``effective_level``: the deprecated name of risk_level, kept on the wire.
        return {**self.__dict__, "reasons": self.reasons + ([self.context] if self.context else []),
                "effective_level": self.risk_level}


@dataclass
class Deferral:
    """A tool the rule filter pushed out of the top-k, and why (``named``: the task named
    it, and the caps deferred it all the same). In context modes a risky tool the context
    stage withheld has the reason ``context`` and, in ``context``, why (need, margin, cap)."""

    name: str
    index: int
    reasons: list[str]
    redundant_with: str | None = None
    named: bool = False
    context: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RetrievalResult:
    """The risk-aware top-k for one task: the ranked tools and, in rule modes, what the rule
    filter deferred, admitted as fallback, or treated as high risk for want of a label; the
    fill policy that ran (rule modes), the relevance floor applied and the tools it cut;
    in context modes ``need`` (the need head's P(the task needs a risky tool)) and
    ``context`` (threshold, margin, the risk cap it set, the relevance gap); ``notes`` say where the result departs from what was asked (predicted levels that are
    the keyword annotator's because the risk head has not learned)."""

    task: str
    mode: str
    lam: float
    alpha: float
    risk_source: str
    tools: list[RankedTool]
    deferred: list[Deferral] = field(default_factory=list)
    fallback: list[str] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)
    fill: str | None = None
    min_score: float | None = None
    below_min_score: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    need: float | None = None
    context: dict[str, Any] | None = None
    k: int | None = None
    """How many tools were asked for (``tools`` may hold fewer: a floor, a fill policy)."""
    settings: CallSettings | None = None
    """Everything the call ran with (:class:`CallSettings`)."""

    @property
    def withheld(self) -> list[Deferral]:
        """What was held back and is not shown (the rule filter's deferrals, the context
        stage's): ``deferred`` less the tools shown as fallback."""
        shown = {t.name for t in self.tools}
        return [d for d in self.deferred if d.name not in shown]

    def to_dict(self) -> dict[str, Any]:
        """The one wire shape of a result: the library, ``POST /v1/retrieve`` and ``find_tools``
        all serialise this (they add what only they know: the catalogue's generation, a
        tool's input schema, the gateway's policy). ``deferred`` is deprecated: every
        deferral, including the tools shown as fallback; read ``withheld`` and ``fallback``."""
        return {
            "task": self.task, "mode": self.mode, "lambda": self.lam, "alpha": self.alpha,
            "risk_source": self.risk_source, "k": self.k, "tools": [t.to_dict() for t in self.tools],
            "withheld": [d.to_dict() for d in self.withheld],
            "deferred": [d.to_dict() for d in self.deferred], "fallback": self.fallback,
            "unlabelled": self.unlabelled, "fill": self.fill, "min_score": self.min_score,
            "below_min_score": self.below_min_score, "notes": self.notes, "need": self.need, "context": self.context,
            "settings": self.settings.to_dict() if self.settings is not None else None,
        }
