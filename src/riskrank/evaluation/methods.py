"""Method names of the results contract and what each one runs.

A method is a :class:`MethodSpec`: which relevance scores (BM25, dense cosine, their hybrid
fusion, the trained heads of one design), which lambda (0, a number, or the one chosen on
validation for that pipeline), graph smoothing (which edge types, which alpha), the rule
filter (audited or predicted levels) and the scored set (full pool or the first stage's
top-M). Suffixes make variants without new code: ``core@lam=0.05``, ``core+graph@alpha=0.2``,
``core+graph[edges=co+sem]``, ``core[relevance=dense]`` (the cosine-only head: its first
stage is the dense cosine and it reads no lexical evidence), and
``core+graph+rule_pred[levels=in_sample]`` (predicted levels from the head trained on every
tool's label, instead of the cross-fitted ones: shown once, for comparison).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from riskrank.errors import RiskrankError
from riskrank.graph import EDGE_TYPES


@dataclass(frozen=True)
class MethodSpec:
    name: str
    relevance: str  # "bm25" | "dense" | "hybrid" | "heads" | "mmr" | "cross-encoder"
    head: str | None = None  # "residual" | "paper" for relevance == "heads"
    evidence: str = "hybrid"  # what the residual head reads: "hybrid" | "dense"
    levels: str = "crossfit"  # predicted levels of the rule filter: "crossfit" | "in_sample"
    lam: float | str = 0.0  # a number, or "selected" (chosen on validation queries)
    graph: bool = False
    alpha: float | str = "selected"
    edge_types: tuple[str, ...] = EDGE_TYPES
    rule: str | None = None  # None | "labels" | "predicted"
    candidates: int | None = None  # None = full pool; M = rerank the dense top-M
    mmr_lambda: float = 0.7
    model: str | None = None  # cross-encoder name or folder, or "ce-minilm-ft"
    context: bool = False  # the context stage (the need head decides per task)

    @property
    def trained(self) -> bool:
        return self.relevance == "heads"

    @property
    def head_key(self) -> str:
        """Which trained heads the method reads: one training run per key and fold."""
        return f"{self.head}:dense" if self.head == "residual" and self.evidence == "dense" else str(self.head)

    @property
    def seed_independent(self) -> bool:
        """Computed once (first seed) and shared: deterministic baselines, and cross-encoders,
        which are trained once per training split with one seed."""
        return self.relevance in ("bm25", "mmr", "cross-encoder") or (
            self.relevance == "dense" and self.lam != "selected"
        )


def _heads(name: str, head: str, **kw) -> MethodSpec:
    return MethodSpec(name, "heads", head=head, **kw)


BASE_METHODS: dict[str, MethodSpec] = {
    "bm25": MethodSpec("bm25", "bm25"),
    "dense": MethodSpec("dense", "dense"),
    "hybrid": MethodSpec("hybrid", "hybrid"),
    "dense+rule": MethodSpec("dense+rule", "dense", rule="labels"),
    "risk_label_penalty": MethodSpec("risk_label_penalty", "dense", lam="selected"),
    "mmr": MethodSpec("mmr", "mmr", candidates=100),
    "ce-minilm-ft": MethodSpec("ce-minilm-ft", "cross-encoder", candidates=100, model="ce-minilm-ft"),
    "rel_only": _heads("rel_only", "residual"),
    "core": _heads("core", "residual", lam="selected"),
    "core+graph": _heads("core+graph", "residual", lam="selected", graph=True),
    "core+rule": _heads("core+rule", "residual", lam="selected", rule="labels"),
    "core+graph+rule": _heads("core+graph+rule", "residual", lam="selected", graph=True, rule="labels"),
    "core+graph+rule_pred": _heads("core+graph+rule_pred", "residual", lam="selected", graph=True, rule="predicted"),
    "core+graph+context": _heads("core+graph+context", "residual", lam="selected", graph=True, context=True),
    "core+graph+context+rule": _heads("core+graph+context+rule", "residual", lam="selected", graph=True, rule="labels",
                                      context=True),
    "paper_rel_only": _heads("paper_rel_only", "paper", evidence="dense"),
    "paper_core": _heads("paper_core", "paper", lam="selected", evidence="dense"),
    "paper_core+graph": _heads("paper_core+graph", "paper", lam="selected", graph=True, evidence="dense"),
    "paper_core+graph+rule": _heads("paper_core+graph+rule", "paper", lam="selected", graph=True, rule="labels", evidence="dense"),
    "top100/core": _heads("top100/core", "residual", lam="selected", candidates=100),
    "top100/core+graph": _heads("top100/core+graph", "residual", lam="selected", graph=True, candidates=100),
    "top100/core+graph+rule": _heads("top100/core+graph+rule", "residual", lam="selected", graph=True, rule="labels", candidates=100),
}

_SUFFIX = re.compile(r"^(?P<base>[^@\[]+)(?P<mods>(?:@[a-z_]+=[^@\[]+|\[[a-z]+=[a-z_+]*\])*)$")
_MOD = re.compile(r"@(?P<key>[a-z_]+)=(?P<val>[^@\[]+)|\[(?P<bkey>[a-z]+)=(?P<bval>[a-z_+]*)\]")


def parse_method(name: str) -> MethodSpec:
    """A contract name (``core+graph``) or a variant (``core@lam=0.05``,
    ``core+graph[edges=co+sem]``, ``core[relevance=dense]``, ``core+graph+rule_pred[levels=in_sample]``,
    ``ce:PATH`` for a cross-encoder rescoring the top-20 of the dense top-100)."""
    name = name.strip()
    if name.startswith("ce:") or name.startswith("cross-encoder:"):
        model = name.split(":", 1)[1]
        if not model:
            raise RiskrankError("a cross-encoder method needs a model: ce:NAME_OR_FOLDER")
        return MethodSpec(name, "cross-encoder", candidates=100, model=model)
    m = _SUFFIX.match(name)
    if not m or m.group("base") not in BASE_METHODS:
        raise RiskrankError(f"unknown method {name!r}; choose from {', '.join(BASE_METHODS)} (variants: NAME@lam=X, NAME@alpha=X, "
                            "NAME[edges=co+sem], NAME[relevance=dense], NAME[levels=in_sample], ce:MODEL)")
    spec = replace(BASE_METHODS[m.group("base")], name=name)
    for mod in _MOD.finditer(m.group("mods")):
        bkey, bval = mod.group("bkey"), mod.group("bval")
        if bkey == "edges":
            edges = tuple(e for e in bval.split("+") if e)
            bad = set(edges) - set(EDGE_TYPES)
            if bad or not spec.graph:
                raise RiskrankError(f"{name!r}: edges must be '+'-joined names from {', '.join(EDGE_TYPES)} on a graph method")
            spec = replace(spec, edge_types=edges)
            continue
        if bkey == "relevance":
            if spec.head != "residual" or bval not in ("dense", "hybrid"):
                raise RiskrankError(f"{name!r}: relevance must be dense or hybrid, on a method of the residual head")
            spec = replace(spec, evidence=bval)
            continue
        if bkey == "levels":
            if spec.rule != "predicted" or bval not in ("crossfit", "in_sample"):
                raise RiskrankError(f"{name!r}: levels must be crossfit or in_sample, on a method with predicted levels")
            spec = replace(spec, levels=bval)
            continue
        if bkey is not None:
            raise RiskrankError(f"{name!r}: unknown modifier [{bkey}=...] (edges, relevance, levels)")
        key, val = mod.group("key"), mod.group("val")
        try:
            x = float(val)
        except ValueError:
            raise RiskrankError(f"{name!r}: {key} must be a number, got {val!r}") from None
        if key == "lam":
            spec = replace(spec, lam=x)
        elif key == "alpha":
            spec = replace(spec, alpha=x)
        elif key == "top":
            spec = replace(spec, candidates=int(x))
        elif key == "mmr":
            spec = replace(spec, mmr_lambda=x)
        else:
            raise RiskrankError(f"{name!r}: unknown modifier {key!r} (lam, alpha, top, mmr)")
    return spec


def parse_methods(names: str | list[str]) -> list[MethodSpec]:
    items = [n for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not items:
        raise RiskrankError("no methods given")
    specs = [parse_method(n) for n in items]
    seen = set()
    for s in specs:
        if s.name in seen:
            raise RiskrankError(f"method {s.name!r} given twice")
        seen.add(s.name)
    return specs
