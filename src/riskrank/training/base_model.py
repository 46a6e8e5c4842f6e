"""Building riskrank-base: heads trained on several benchmarks, in the form that transfers.

One command builds it (``riskrank train --base --out DIR``, ``make base-model``), through
the normal :func:`riskrank.training.fit_retriever` / ``save`` path, so the base
model's sidecar has every key any checkpoint has. The steps, each chosen by a stated rule on
training or validation queries only (never on a test split):

1. **Data.** The benchmarks' registries become one registry (tools in order, UltraTool's
   first) and their training queries one query set. UltraTool has no training split here
   (dev.json is not mirrored), so its 1,000 test.json queries train the base model: the
   card says so, and the base model evaluated on them is contaminated.
2. **Fusion** (no trained parameter, so on all the training queries): over
   :func:`riskrank.first_stage.fusion_grid`, on each benchmark's own registry, the fusion
   whose worst ratio NDCG@5 / max(bm25, dense) across the benchmarks is highest (minimax).
   The best fusion of the pooled queries is the best of whichever benchmark dominates them,
   and the lexical weight is what transfers least between registries.
3. **Heads.** :func:`riskrank.training.fit` on the union: the risk heads on every audited
   tool, the relevance head on the training part (early-stopped on the validation part).
4. **Zero-shot form.** The embedding residual of the relevance head (its bilinear and MLP
   terms) is set to zero: trained on a registry, it scores the tools it saw, and on a
   registry it never saw it lowers NDCG (the transfer study in docs/base-model.md). The
   learned scale, bias and lexical weights stay.
5. **Zero-shot settings.** :func:`riskrank.training.choose_inference` again, on the same
   validation queries, with the head in its zero-shot form and a ToolGraph of semantic and
   permission edges only (what any registry without training queries gets): the residual
   weight, lambda and alpha per pipeline, the relevance floor. These are the shipped
   inference settings; the in-domain ones stay in the card. The context stage (the need head,
   then tau, margin and both lambdas of each context pipeline) is chosen the same way, with a
   need head that reads only the candidate-risk features (:data:`BASE_NEED_FEATURES`).

A build is deterministic: every random source is seeded, and the sidecar's time stamp comes
from ``SOURCE_DATE_EPOCH`` when it is set (the reproducible-builds convention; the make target
sets it), so the same versions give the same sha256 for every file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from riskrank.base import CARD_JSON, CARD_MD, NAME
from riskrank.errors import RiskrankError
from riskrank.fileio import atomic_write_bytes, dumps
from riskrank.first_stage import Fusion, LexicalIndex, fusion_grid, top_m
from riskrank.graph import GraphConfig, ToolGraph
from riskrank.heads import level_penalty
from riskrank.metrics import evaluate, ndcg_at_k
from riskrank.registry import Tool, ToolRegistry
from riskrank.risk import RISKY_LEVEL, level_from_score
from riskrank.rules import PAPER_FILL

#: The benchmarks the shipped base model trains on.
BENCHMARKS = ("ultratool", "sealtools")
#: The modes the card and the transfer study report (``rel_only``: core at lambda = 0).
REPORT_MODES = ("bm25", "dense", "hybrid", "rel_only", "core", "core+graph", "core+graph+rule", "core+graph+rule_pred")


@dataclass
class Source:
    """One benchmark's contribution: its registry, the queries the base model trains on, and
    where the files came from (repository, commit, path, sha256)."""

    name: str
    registry: ToolRegistry
    texts: list[str]
    gold: list[np.ndarray]
    split: str
    files: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


#: The base model's need head reads the risk of the first stage's candidates only: the query
#: embedding learns the phrasing of one benchmark's risky asks, and in the leave-one-benchmark-
#: out study an embedding need head scored AUC 0.48-0.50 on the held-out benchmark, against
#: 0.82 for the candidate-risk one (docs/base-model.md).
BASE_NEED_FEATURES = (("cand",),)


#: :attr:`BaseConfig.risk_choices`' values.
RISK_CHOICES = ("all", "audited")


@dataclass
class BaseConfig:
    """What a base-model build varies: the seed, the epochs, and (tests) a cap on the
    training queries per benchmark."""

    seed: int = 42
    epochs: int = 10
    max_queries: int | None = None
    risk_choices: str = "all"
    """Which validation queries the zero-shot lambda choices measure exposure (RVR@5) on:
    ``all``, or ``audited``: only those of the sources whose every tool is audited (an
    unaudited registry's RVR reads keyword levels, which rate far more tools risky than the
    audits do). NDCG@5 is measured on all of them either way."""

    def __post_init__(self) -> None:
        if self.risk_choices not in RISK_CHOICES:
            raise RiskrankError(f"risk_choices must be one of {', '.join(RISK_CHOICES)}, got {self.risk_choices!r}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seed": self.seed, "epochs": self.epochs, "max_queries": self.max_queries}
        if self.risk_choices != "all":  # the shipped card (built with "all") keeps its form
            out["risk_choices"] = self.risk_choices
        return out


# -- 1. data ------------------------------------------------------------------------------
def _manifest_files(name: str) -> list[dict[str, Any]]:
    """The mirrored files (repository, commit, path, sha256) of benchmark ``name``: the
    manifest entries tagged with its name (``corpus``: one repository can hold two corpora),
    else those of its repositories (:data:`_REPOS`; of the risk-label repository, its
    benchmark's folder only)."""
    from importlib.resources import files

    manifest = json.loads(files("riskrank.datasets").joinpath("manifest.json").read_text(encoding="utf-8"))
    out = []
    for f in manifest["files"]:
        if not (f.get("mirrored") and f.get("sha256")):
            continue
        if "corpus" in f:
            ok = f["corpus"] == name
        else:
            ok = f["repo"] in _REPOS.get(name, ()) and (not f["repo"].startswith("qli447") or f["path"].startswith(_LABELS[name]))
        if ok:
            out.append({k: f[k] for k in ("repo", "commit", "path", "sha256")})
    return out


#: The repositories the audited benchmarks' files come from (registry, queries, risk labels);
#: the corpora without audited levels (bfcl, apibench, apibank, toolalpaca) are found by the
#: ``corpus`` tag of their manifest entries.
_REPOS = {"ultratool": ("JoeYing1019/UltraTool", "qli447/risk-aware-tool-retrieval-release"),
          "sealtools": ("fairyshine/Seal-Tools", "qli447/risk-aware-tool-retrieval-release")}
_LABELS = {"ultratool": "data/ultratool/", "sealtools": "data/sealtools/"}


def load_sources(benchmarks: Sequence[str] = BENCHMARKS, data_dir: str | Path | None = None) -> list[Source]:
    """The training data of each benchmark: its training split, or (UltraTool without
    dev.json) its evaluation queries, said in the notes."""
    from riskrank.datasets import load_benchmark

    out = []
    for name in benchmarks:
        b = load_benchmark(name, data_dir)
        notes = []
        if b.train is not None:
            qs = b.train
        else:
            split = next(iter(b.splits))
            qs = b.splits[split]
            notes.append(f"{name} has no training split in this data directory: the base model trains on its {split} "
                         f"queries ({len(qs)}); an evaluation of the base model on them is contaminated")
        files = _manifest_files(name)
        if b.registry.n_unlabelled:
            notes.append(f"{b.registry.n_unlabelled} of its {len(b.registry)} tools have no audited risk level: the risk heads "
                         "do not train on them, and the build's choices read the keyword annotator's level for them")
        out.append(Source(name, b.registry, list(qs.texts), [np.asarray(g, np.int64) for g in qs.gold], qs.name, files, notes))
    return out


def union_registry(sources: Sequence[Source]) -> tuple[ToolRegistry, np.ndarray]:
    """One registry of every source's tools, in order, and each tool's source index. A name
    two sources share, or one that looks like an earlier source's (``translate`` and
    ``Translate``: :func:`riskrank.names.skeleton`, as the registry compares names), keeps its
    text (the embedding and the lexical evidence are of the text) and gets the source's name
    appended, so the union has unique names."""
    from riskrank.names import skeleton

    tools: list[Tool] = []
    owner: list[int] = []
    seen: set[str] = set()
    for s, src in enumerate(sources):
        for t in src.registry:
            name = t.name if skeleton(t.name) not in seen else f"{t.name}@{src.name}"
            seen.add(skeleton(name))
            tools.append(t if name == t.name else Tool(name, t.description, t.parameters, t.risk_level, t.permissions,
                                                       t.annotations, t.reason, dict(t.extra)))
            owner.append(s)
    return ToolRegistry(tools, source="+".join(s.name for s in sources)), np.asarray(owner)


# -- 2. fusion -------------------------------------------------------------------------------
def choose_fusion_minimax(parts: Sequence[tuple[np.ndarray, Any, Sequence[np.ndarray]]],
                          record: dict[str, Any] | None = None) -> Fusion:
    """The fusion of :func:`fusion_grid` whose worst NDCG@5 ratio to max(bm25, dense) over
    ``parts`` (cosine [Q, N], lexical evidence and gold of each registry) is highest; ties go
    to the smaller lexical weight, then the grid's order (as :func:`training.choose_fusion`)."""
    from riskrank.training import choose_fusion

    grids, bases = [], []
    for cos, lexical, gold in parts:
        rec: dict[str, Any] = {}
        choose_fusion(cos, lexical, gold, rec)
        grids.append([r["ndcg@5"] for r in rec["fusion_grid"]])
        bases.append(max(float(ndcg_at_k(top_m(cos, 5), gold).mean()), float(ndcg_at_k(top_m(lexical.bm25, 5), gold).mean())))
    grid = fusion_grid()
    worst = [min(g[i] / max(b, 1e-12) for g, b in zip(grids, bases, strict=True)) for i in range(len(grid))]
    best = max(range(len(grid)), key=lambda i: (round(worst[i], 10), -grid[i].weight, -i))
    if record is not None:
        record["fusion_rule"] = "minimax over the benchmarks of NDCG@5 / max(bm25, dense), on all training queries"
        record["fusion_baselines"] = [round(b, 4) for b in bases]
        record["fusion_worst_ratio"] = round(worst[best], 4)
        record["fusion"] = grid[best].to_dict()
    return grid[best]


# -- 4. the zero-shot form ----------------------------------------------------------------------
def drop_embedding_residual(model: Any) -> None:
    """Zero the relevance head's bilinear and MLP residual terms in place; the scale, bias and
    lexical weights (what transfers between registries) stay."""
    head = model.relevance_head
    with torch.no_grad():
        head.v.weight.zero_()
        head.l2.weight.zero_()
        head.l2.bias.zero_()


# -- evaluation on one registry (the card and the transfer study) -------------------------------
def evaluate_modes(checkpoint: Any, registry: ToolRegistry, tool_emb: np.ndarray, query_emb: np.ndarray,
                   texts: Sequence[str], gold: Sequence[np.ndarray], encoder: Any,
                   modes: Sequence[str] = REPORT_MODES, reference_levels: np.ndarray | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Per-query metrics of each mode of ``checkpoint`` on a registry it may never have seen
    (its ToolGraph: semantic and permission edges only; the penalty and the rule filter read the
    levels the retriever serves with the base model: the registry's audited ones, the shipped
    level model's for an unaudited tool; ``_pred`` the risk head's predictions), with the
    paper's fill policy as the experiments use it. The metrics' risk levels are the registry's
    audited ones, or ``reference_levels`` [N] (:func:`reference_levels` for a registry without
    audits)."""
    from riskrank.base import default_level_model_dir
    from riskrank.levels import load_level_model
    from riskrank.pipeline import RiskAwareRetriever

    folder = default_level_model_dir()
    level_model = load_level_model(folder) if folder is not None else None
    if level_model is not None and level_model.encoder_identity not in (None, encoder.identity):
        level_model = None  # another encoder's embeddings: the risk head with the keyword rule, as served
    r = RiskAwareRetriever(registry, encoder=encoder, checkpoint=checkpoint, tool_emb=tool_emb, progress=False,
                           level_model=level_model)
    out = {}
    lexical = r.lexical_index.evidence(list(texts))
    for mode in modes:
        kw: dict[str, Any] = {"fill": PAPER_FILL, "lexical": lexical}
        name = mode
        if mode == "rel_only":
            name, kw["lam"] = "core", 0.0
        if mode.endswith("_pred"):
            name, kw["risk_source"] = mode.removesuffix("_pred"), "predicted"
        b = r.rank_batch(query_emb, mode=name, **kw)
        out[mode] = evaluate(b.order, list(gold), registry.risk_levels if reference_levels is None else reference_levels)
    return out


def reference_levels(registry: ToolRegistry) -> np.ndarray:
    """The levels a metric or a choice measures risk with [N]: the audited level of each
    audited tool, the keyword annotator's (:func:`riskrank.risk.keyword_levels`, independent of
    any risk head) of each unaudited one. An unaudited level 0 would otherwise count as "not
    risky" in RVR and the need labels, and as L5 (fail closed) in the rule filter."""
    from riskrank.risk import keyword_levels

    levels = registry.risk_levels
    if not (levels == 0).any():
        return levels
    return np.where(levels > 0, levels, keyword_levels(registry)).astype(levels.dtype)


def served_levels(registry: ToolRegistry, tool_emb: np.ndarray, encoder: Any) -> np.ndarray:
    """The levels riskrank serves for ``registry`` [N] (:func:`riskrank.risk.resolve_tool_levels`):
    the audited level of each audited tool, the shipped level model's reading
    (:func:`riskrank.pipeline.served_level_prediction`, raised to its capability floors and MCP
    hints) of each unaudited one, as a retriever with the base model serves them; the keyword
    annotator's where this installation has no level model for ``encoder``. What the build's
    choices (lambda, the rule filter, the need labels) read: the settings are chosen with the
    levels they will act on."""
    from riskrank.base import default_level_model_dir
    from riskrank.levels import load_level_model
    from riskrank.pipeline import served_level_prediction
    from riskrank.risk import resolve_tool_levels

    levels = registry.risk_levels
    if not (levels == 0).any():
        return levels
    folder = default_level_model_dir()
    model = load_level_model(folder) if folder is not None else None
    if model is None or model.encoder_identity not in (None, encoder.identity):
        return reference_levels(registry)
    prediction = served_level_prediction(model, encoder, np.asarray(tool_emb, dtype=np.float32), list(registry))
    return resolve_tool_levels(registry, prediction=prediction).levels.astype(levels.dtype)


def with_levels(registry: ToolRegistry, levels: np.ndarray) -> ToolRegistry:
    """``registry`` with ``levels`` [N] as the levels of its unaudited tools (itself when every
    tool is audited): what the build's choices read, never what a risk head trains on."""
    if not (registry.risk_levels == 0).any():
        return registry
    return registry.with_risk_levels({t.name: int(lv) for t, lv in zip(registry, levels, strict=True) if t.risk_level is None})


def with_reference_levels(registry: ToolRegistry) -> ToolRegistry:
    """``registry`` with :func:`reference_levels` as its levels (itself when every tool is
    audited): what the build's choices read, never what a risk head trains on."""
    levels = reference_levels(registry)
    if levels is registry.risk_levels:
        return registry
    return registry.with_risk_levels({t.name: int(lv) for t, lv in zip(registry, levels, strict=True) if t.risk_level is None})


def risk_agreement(checkpoint: Any, registry: ToolRegistry, tool_emb: np.ndarray) -> dict[str, Any]:
    """The risk heads on a registry's audited tools: AUC (r >= 3 vs < 3) of the penalty
    (p_risky) and of the level regression, and quadratic kappa of the predicted levels."""
    from riskrank.agreement import confusion, quadratic_kappa
    from riskrank.heads import HeadScorer
    from riskrank.training import risk_auc

    sc = HeadScorer(checkpoint.model, tool_emb)
    lab = registry.risk_levels > 0
    pred = level_from_score(sc.level_score)
    kappa = float(quadratic_kappa(confusion(registry.risk_levels[lab], pred[lab])))
    return {"auc_p_risky": risk_auc(registry.risk_levels, sc.f_risk), "auc_level": risk_auc(registry.risk_levels, sc.level_score),
            "kappa_quadratic": kappa, "n_tools": int(lab.sum()), "n_risky": int((registry.risk_levels >= RISKY_LEVEL).sum())}


def summarise(per_query: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, float | None]]:
    """Means over the queries each metric is defined on (NaN rows: Safe-RVR and NeedRisk-Hit
    outside their subsets); None when it is defined on none."""
    def mean(v: np.ndarray) -> float | None:
        v = np.asarray(v, dtype=np.float64)
        return round(float(np.nanmean(v)), 4) if np.isfinite(v).any() else None

    return {m: {k: mean(v) for k, v in ms.items()} for m, ms in per_query.items()}


# -- the build ----------------------------------------------------------------------------------
@dataclass
class Built:
    """A base model in memory: the retriever (``save`` writes it), the card, and what the
    transfer study reuses (per-source embeddings)."""

    retriever: Any
    card: dict[str, Any]
    encoder: Any
    tool_emb: dict[str, np.ndarray]
    #: The heads before step 4 (the embedding residual kept, with the in-domain residual
    #: weight): what the zero-shot form is measured against; never saved.
    residual_model: Any = None


def build_base(sources: Sequence[Source], cfg: BaseConfig | None = None, *, encoder: Any = None, progress: bool = False) -> Built:
    """Steps 1-5 of the module docstring over ``sources``; returns the base model in memory."""
    from riskrank.encoder import Encoder
    from riskrank.training import (
        TrainConfig,
        choose_inference,
        fit_context,
        fit_retriever,
        predicted_levels_of,
        validation_split,
    )

    cfg = cfg or BaseConfig()
    if not sources:
        raise RiskrankError("the base model needs at least one benchmark")
    enc = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
    sources = [_capped(s, cfg.max_queries) for s in sources]
    # 2. the fusion, on each benchmark's own registry
    record: dict[str, Any] = {}
    parts, tool_emb = [], {}
    for s in sources:
        tool_emb[s.name] = enc.encode(s.registry.texts(), desc=f"encoding {s.name} tools")
        q = enc.encode(s.texts, desc=f"encoding {s.name} queries")
        parts.append((q @ tool_emb[s.name].T, LexicalIndex.from_registry(s.registry).evidence(s.texts), s.gold))
    fusion = choose_fusion_minimax(parts, record)
    # 1 + 3. the union and the normal fit
    union, _owner = union_registry(sources)
    offsets = np.cumsum([0] + [len(s.registry) for s in sources])
    texts = [t for s in sources for t in s.texts]
    gold = [g + offsets[i] for i, s in enumerate(sources) for g in s.gold]
    tcfg = TrainConfig(seed=cfg.seed, epochs=cfg.epochs, fusion=fusion.to_dict())
    # The choices measure risk (RVR@5, the rule filter, the need labels) with the levels riskrank
    # serves: an unaudited tool's is the level model's (served_levels). The risk heads train on
    # the audited tools only (an unaudited level 0 is excluded from their losses).
    # Each registry is read on its own, as it is served (its shared openings are its own).
    u_emb = np.vstack([tool_emb[s.name] for s in sources])
    choice_union = with_levels(union, np.concatenate([served_levels(s.registry, tool_emb[s.name], enc) for s in sources]))
    r = fit_retriever(union, texts, gold, encoder=enc, train_config=tcfg, progress=progress, choice_registry=choice_union)
    result = r.training
    in_domain = {k: v for k, v in r.checkpoint.meta["inference"].items()}
    residual_model = r.checkpoint.model  # a copy of the heads as fitted (the checkpoint's weights)
    # 4 + 5. the zero-shot form and its settings, on the same validation queries
    drop_embedding_residual(result.model)
    rcfg = result.config
    _, va = validation_split(len(gold), rcfg)
    q_emb = enc.encode(texts, desc="encoding queries")
    graph0 = ToolGraph.build(u_emb, [], choice_union.risk_levels, union.permissions, GraphConfig())
    zs_record: dict[str, Any] = {}
    risk_rows = None
    if cfg.risk_choices == "audited":
        owner = np.concatenate([np.full(len(s.texts), i) for i, s in enumerate(sources)])
        audited = [i for i, s in enumerate(sources) if (s.registry.risk_levels > 0).all()]
        risk_rows = np.isin(owner[va], audited)
        zs_record["risk_rows"] = {"sources": [sources[i].name for i in audited], "queries": int(risk_rows.sum())}
        if not risk_rows.any():
            raise RiskrankError("risk_choices='audited': no source of this build has every tool audited")
    chosen = choose_inference(q_emb[va], [gold[i] for i in va], u_emb, choice_union.risk_levels, rcfg, model=result.model,
                              graph=graph0, record=zs_record, lexical=r.lexical_index.evidence([texts[i] for i in va]),
                              fusion=fusion, perm_counts=union.perm_counts, predicted_levels=predicted_levels_of(result, union),
                              risk_rows=risk_rows, penalty=level_penalty(choice_union.risk_levels))
    # the context stage in the same zero-shot form: need head, then tau/margin/lambdas per context pipeline
    zs_choice: dict[str, Any] = {"alpha": chosen["alpha"], "normalisation": chosen["normalisation"],
                                 "pipelines": dict(chosen["pipelines"])}
    tr, _ = validation_split(len(gold), rcfg)
    fit_context(result, graph0, zs_choice, u_emb, q_emb, gold, tr, va, choice_union, rcfg, lexical=r.lexical_index.evidence(texts),
                fusion=fusion, prepare=drop_embedding_residual, graph_gold=False, need_feature_sets=BASE_NEED_FEATURES)
    # The retriever's checkpoint was made by the normal fit, with the in-domain need head: the
    # zero-shot one replaces it, as it does in the saved files (``result`` is what is saved).
    from riskrank.checkpoint import need_info

    r.checkpoint.need_head = result.need_head
    # Likewise the heads: the retriever's checkpoint holds a copy of the weights as fitted;
    # the zero-shot ones (what ``save`` writes) replace them, so the retriever in memory ranks
    # as the saved files do.
    from riskrank.heads import HeadScorer, as_weights

    r.checkpoint.model = as_weights(result.model)
    r.scorer = HeadScorer(r.checkpoint.model, r.tool_emb)
    if result.need_head is not None:
        r.checkpoint.meta["need_head"] = need_info(result.need_head)
    inference = {"fusion": fusion.to_dict(), "lam": chosen["lam"], "alpha": chosen["alpha"],
                 "normalisation": chosen["normalisation"], "pipelines": zs_choice["pipelines"], "min_score": chosen["min_score"],
                 "residual_weight": chosen["residual_weight"], "penalty_source": "levels"}
    if "context" in zs_choice:
        inference["context"] = zs_choice["context"]
    r.checkpoint.meta["inference"] = inference
    result.lam = chosen["lam"]
    result.validation["zero_shot"] = {k: zs_record[k] for k in ("residual_grid", "selected", "first_stage_rvr@5", "risk_rows")
                                      if k in zs_record}
    result.validation.update(record)
    # Timings are not reproducible; a build's sha256 must be.
    result.seconds = 0.0
    r.checkpoint.meta["train_seconds"] = 0.0
    # validation metrics on each benchmark's own registry (its validation queries only)
    from riskrank.checkpoint import in_memory

    ck = in_memory(result, encoder=r.checkpoint.meta["encoder"], registry_fingerprint=union.fingerprint(), inference=inference)
    val_metrics = validation_metrics(ck, sources, va, q_emb, tool_emb, enc)
    card = _card(sources, cfg, result, inference, in_domain, record, val_metrics, r.checkpoint.meta["encoder"])
    card["fingerprint"] = build_fingerprint(cfg, sources, choice_union.risk_levels)
    return Built(r, card, enc, tool_emb, residual_model)


def validation_metrics(ck: Any, sources: Sequence[Source], va: np.ndarray, q_emb: np.ndarray, tool_emb: dict[str, np.ndarray],
                       encoder: Any) -> dict[str, Any]:
    """Each mode on each benchmark's validation queries (positions ``va`` of the union's
    queries), ranked over that benchmark's own registry."""
    owner = np.concatenate([np.full(len(s.texts), i) for i, s in enumerate(sources)])
    out = {}
    for i, s in enumerate(sources):
        start = sum(len(x.texts) for x in sources[:i])
        rows = [int(j) for j in va if owner[j] == i]
        if not rows:
            continue
        local = [j - start for j in rows]
        ref = reference_levels(s.registry)
        pq = evaluate_modes(ck, s.registry, tool_emb[s.name], q_emb[rows], [s.texts[j] for j in local], [s.gold[j] for j in local], encoder,
                            reference_levels=ref)
        out[s.name] = {"n_queries": len(local), "methods": summarise(pq)}
        if ref is not s.registry.risk_levels:
            out[s.name]["levels"] = "unaudited tools: the keyword annotator's levels"
    return out


def capped_rows(n_queries: int, n: int | None) -> np.ndarray:
    """The rows of a source's queries a build with ``max_queries=n`` trains on: all of them,
    or ``n`` evenly spaced over them (a corpus's queries come grouped by file or category, so
    the first ``n`` would be one group's)."""
    if n is None or n_queries <= n:
        return np.arange(n_queries)
    return np.unique(np.linspace(0, n_queries - 1, n).round().astype(np.int64))


def finetune_triplets(sources: Sequence[Source], max_queries: int | None, encoder: Any, seed: int = 42) -> Any:
    """The encoder fine-tuning's rows for a build over ``sources`` with ``max_queries``
    (:func:`riskrank.training.finetune.mine_triplets` on each source's own registry): every
    source's queries except the ones the build itself trains and validates on
    (:func:`capped_rows`), so that the heads and every zero-shot choice are made on queries the
    fine-tuned encoder never saw."""
    from riskrank.training.finetune import Triplets, mine_triplets

    if max_queries is None:
        raise RiskrankError("an encoder fine-tuned for a build needs the build's query cap (max_queries): without one the "
                            "build's validation queries would be the encoder's training queries")
    out = Triplets([], [], [])
    for i, s in enumerate(sources):
        rest = np.setdiff1d(np.arange(len(s.texts)), capped_rows(len(s.texts), max_queries))
        if not len(rest):
            continue
        part = mine_triplets(s.registry, [s.texts[j] for j in rest], [s.gold[j] for j in rest], encoder, seed=seed + i)
        out.tasks += part.tasks
        out.positives += part.positives
        out.negatives += part.negatives
    return out


def _capped(s: Source, n: int | None) -> Source:
    """At most ``n`` of the source's queries (:func:`capped_rows`)."""
    if n is None or len(s.texts) <= n:
        return s
    keep = capped_rows(len(s.texts), n)
    return Source(s.name, s.registry, [s.texts[i] for i in keep], [s.gold[i] for i in keep], s.split, s.files,
                  [*s.notes, f"capped at {len(keep)} of its {len(s.texts)} queries, evenly spaced"])


#: What the validation slice is, said plainly: UltraTool has no training split in this data, so
#: its "training queries" are its test queries and a base-model figure on them is contaminated.
ZERO_SHOT_SPLIT_NOTE = ("For Seal-Tools the training queries are its dev split; UltraTool has no training split "
                        "here, so its training (and validation) queries are its test queries: no base-model figure "
                        "on UltraTool's test queries is held out (the leave-one-benchmark-out study is the held-out one)")
#: Choices of the build made after held-out figures had been seen (docs/base-model.md).
HISTORY = (
    "the zero-shot form (the embedding residual dropped) was adopted after the leave-one-benchmark-out figures "
    "of the full head had been seen",
    "the need head reads the candidate-risk features only since a leave-one-benchmark-out run showed the "
    "query-embedding need head at AUC 0.48-0.50 on the held-out benchmark: decided after seeing those figures",
    "lambda multiplies the served levels' penalty (1 for a tool served at L3 or above) and the zero-shot choices read "
    "the levels riskrank serves (the level model's for an unaudited tool, not the keyword annotator's): adopted after "
    "the leave-one-corpus-out figures of the risk head's penalty (core+graph below rel_only on UltraTool, Seal-Tools "
    "and API-Bank) had been seen",
)


def _card(sources: Sequence[Source], cfg: BaseConfig, result: Any, inference: dict[str, Any], in_domain: dict[str, Any],
          record: dict[str, Any], val_metrics: dict[str, Any], encoder: dict[str, Any]) -> dict[str, Any]:
    q = result.risk_quality
    return {
        "name": NAME,
        "encoder": encoder,
        "training_data": [{"benchmark": s.name, "split": s.split, "n_queries": len(s.texts), "n_tools": len(s.registry),
                           "n_audited_tools": int((s.registry.risk_levels > 0).sum()), "files": s.files, "notes": s.notes}
                          for s in sources],
        "configuration": {**cfg.to_dict(), "design": result.config.design, "relevance": result.config.relevance,
                          "penalty": result.config.penalty, "selection": result.config.selection,
                          "rule_selection": result.config.rule_selection, "val_fraction": result.config.val_fraction},
        "rules": {
            "fusion": record.get("fusion_rule"),
            "zero_shot_head": "the embedding residual (bilinear and MLP terms) is dropped: it does not transfer to a registry "
                              "without training queries; scale, bias and lexical weights stay",
            "penalty": "s = relevance logit - lambda * [served level >= 3] (riskrank.heads.level_penalty) in every "
                       "pipeline but the context stage's (which keeps the risk head's p_risky): it moves a risky tool "
                       "below the tools that are not and no tool within either side; the build's choices read the "
                       "levels riskrank serves (audited, else the level model's)",
            "zero_shot_settings": "residual weight, lambda and alpha per pipeline and the relevance floor chosen by "
                                  "choose_inference on the validation slice of the training queries, with the head in its "
                                  "zero-shot form and a ToolGraph of semantic and permission edges only. " + ZERO_SHOT_SPLIT_NOTE,
        },
        "history": list(HISTORY),
        "inference": inference,
        "in_domain_inference": {k: in_domain[k] for k in ("lam", "alpha", "normalisation", "residual_weight") if k in in_domain},
        "fusion_choice": {k: record[k] for k in ("fusion_baselines", "fusion_worst_ratio") if k in record},
        "risk_head": {"heldout_auc": q.get("heldout_auc"), "heldout_auc_p_risky": q.get("heldout_auc_p_risky"),
                      "learned": q.get("learned"), "folds": q.get("folds"),
                      "note": "cross-fitted over the union's tools (each tool scored by heads that never saw its label)"},
        "validation": val_metrics,
        "transfer": None,
    }


# -- the fingerprint ----------------------------------------------------------------------------
#: The training code of the base build, the code a fingerprint compares: this module and the
#: training modules it runs (fit, choices, context stage, heads' training, triplet mining). The
#: engine modules the build also calls (heads, graph, first stage, pipeline, risk, levels, the
#: encoder) are left out on purpose: they are edited for serving far more often than they change
#: a build's bytes, and a fingerprint over every imported file would demand a rebuild for a
#: docstring. A change there that does change the built files is caught by rebuilding
#: (`make base-model` and the sha256 of the card's ``files``; the slow full-rebuild test).
BUILD_CODE = tuple(f"riskrank/training/{m}.py" for m in (
    "__init__", "base_model", "choices", "config", "context", "finetune", "fitting", "modules", "relevance", "risk"))


def _file_sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def fingerprint_files(fingerprint: dict[str, Any]) -> dict[str, str | None]:
    """What the files a fingerprint names hash to now (``code``: package files; ``level_model``:
    the shipped level model's files), None for a file that is gone; keyed as the fingerprint."""
    from riskrank.base import LEVELS_DIR

    root = Path(__file__).resolve().parents[2]
    now = {f"code:{f}": _file_sha256(root / f) for f in fingerprint.get("code", {})}
    now.update({f"level_model:{f}": _file_sha256(LEVELS_DIR / f) for f in fingerprint.get("level_model", {})})
    return now


def levels_digest(levels: np.ndarray) -> str:
    """sha256 of a level vector (int8 bytes): the served levels a build's choices read."""
    return hashlib.sha256(np.asarray(levels, dtype=np.int8).tobytes()).hexdigest()


def build_fingerprint(cfg: BaseConfig, sources: Sequence[Source], choice_levels: np.ndarray) -> dict[str, Any]:
    """What decides a build's files, to compare the shipped files with without rebuilding:
    the sha256 of the training code (:data:`BUILD_CODE`), of the shipped level model's weight
    files (the choices read its levels), of each mirrored data file (the manifest's), the
    build's choices (:class:`BaseConfig`), and the thread count and time stamp it ran with
    (``build``; ``make base-model`` pins both). Recorded, not compared (the comparison would
    need the encoder): the digest of the served levels the choices read (``served_levels``)
    and the versions. ``sha256`` is one digest of the compared parts."""
    import platform

    from riskrank.base import LEVELS_DIR

    root = Path(__file__).resolve().parents[2]
    code = {f: _file_sha256(root / f) for f in BUILD_CODE}
    levels = {f.name: _file_sha256(f) for f in sorted(LEVELS_DIR.iterdir()) if f.is_file()} if LEVELS_DIR.is_dir() else {}
    data = {f"{f['repo']}/{f['path']}": f["sha256"] for s in sources for f in s.files}
    build = {"threads": torch.get_num_threads(), "source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH")}
    compared = {"code": code, "level_model": levels, "data": data, "config": cfg.to_dict(), "build": build}
    record = {"served_levels": levels_digest(choice_levels), "python": platform.python_version(), "numpy": np.__version__,
              "torch": torch.__version__.split("+")[0]}
    return {**compared, "recorded": record, "sha256": hashlib.sha256(dumps(compared, sort_keys=True).encode()).hexdigest()}


def stale_files(card: dict[str, Any]) -> list[str]:
    """The parts of a card's fingerprint that differ now (``code:riskrank/training/choices.py``,
    ``level_model:levels.json``, ``data:<repo>/<path>`` against the package's data manifest),
    empty when the training code, level model and data that built the model are the ones
    installed (what :data:`BUILD_CODE` leaves out is not looked at); a card without a
    fingerprint is all stale (``fingerprint``)."""
    from importlib.resources import files

    fp = card.get("fingerprint")
    if not fp:
        return ["fingerprint"]
    want = {f"code:{k}": v for k, v in fp["code"].items()}
    want.update({f"level_model:{k}": v for k, v in fp["level_model"].items()})
    now = fingerprint_files(fp)
    out = [k for k, v in want.items() if now.get(k) != v]
    out += [f"code:{f}" for f in BUILD_CODE if f not in fp["code"]]
    manifest = json.loads(files("riskrank.datasets").joinpath("manifest.json").read_text(encoding="utf-8"))
    mirrored = {f"{f['repo']}/{f['path']}": f.get("sha256") for f in manifest["files"]}
    out += [f"data:{k}" for k, v in fp["data"].items() if mirrored.get(k) != v]
    return sorted(out)


# -- writing ------------------------------------------------------------------------------------
def save_base(built: Built, out: str | Path, *, transfer: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint (the normal save path), then the card (JSON and markdown) beside
    its files, with the sha256 of each."""
    out = Path(built.retriever.save(out))
    card = dict(built.card)
    if transfer is not None:
        card["transfer"] = transfer
    card["files"] = {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in sorted(os.listdir(out))
                     if f not in (CARD_JSON, CARD_MD) and not f.startswith(".")}
    atomic_write_bytes(out / CARD_JSON, (dumps(card, indent=1) + "\n").encode())
    atomic_write_bytes(out / CARD_MD, card_markdown(card).encode())
    return out


def attach_transfer(folder: str | Path, transfer: dict[str, Any]) -> dict[str, Any]:
    """Put the leave-one-benchmark-out results into an existing card (JSON and markdown);
    the checkpoint's files, and so their sha256s, do not change."""
    folder = Path(folder)
    card = json.loads((folder / CARD_JSON).read_text(encoding="utf-8"))
    card["transfer"] = transfer
    atomic_write_bytes(folder / CARD_JSON, (dumps(card, indent=1) + "\n").encode())
    atomic_write_bytes(folder / CARD_MD, card_markdown(card).encode())
    return card


def card_markdown(card: dict[str, Any]) -> str:
    """The short human-readable model card."""
    lines = [f"# {card['name']}", "",
             f"Encoder: `{card['encoder']['identity']}` ({card['encoder'].get('dim')}-d, frozen; not stored).", "",
             "## Training data", ""]
    for d in card["training_data"]:
        lines.append(f"- {d['benchmark']}: {d['n_queries']} `{d['split']}` queries, {d['n_tools']} tools "
                     f"({d['n_audited_tools']} audited)")
        lines += [f"  - `{f['repo']}@{f['commit'][:12]}` `{f['path']}` sha256 `{f['sha256'][:16]}…`" for f in d["files"]]
        lines += [f"  - note: {n}" for n in d["notes"]]
    c = card["configuration"]
    lines += ["", "## Configuration", "",
              f"seed {c['seed']}, {c['epochs']} epochs, {c['design']} head ({c['relevance']} relevance, {c['penalty']} penalty), "
              f"lambda rules {c['selection']} / {c['rule_selection']} (with the rule filter).", ""]
    lines += [f"- {k}: {v}" for k, v in card["rules"].items()]
    if card.get("history"):
        lines += ["", "History (choices made after held-out figures had been seen):", ""]
        lines += [f"- {h}" for h in card["history"]]
    f = card["inference"]["fusion"]
    lines += ["", f"Fusion: convex {f['norm']}-score, w = {f['weight']:g}" if f["rule"] == "convex" else f"Fusion: {f}",
              "Per pipeline (zero-shot): " + "; ".join(f"{k} lambda {v['lam']:g}, alpha {v['alpha']:g}"
                                                      for k, v in card["inference"]["pipelines"].items()), "",
              "## Validation (each benchmark's validation queries, on its own registry)", "",
              "| benchmark | method | NDCG@5 | RVR@5 |", "|---|---|---|---|"]
    for b, block in card["validation"].items():
        for m, v in block["methods"].items():
            lines.append(f"| {b} ({block['n_queries']}) | {m} | {v['ndcg@5']:.3f} | {v['rvr@5']:.3f} |")
    rh = card["risk_head"]
    lines += ["", f"Risk head: held-out AUC (r >= 3) {rh['heldout_auc']}, p_risky {rh['heldout_auc_p_risky']} ({rh['note']}).", ""]
    if card.get("transfer"):
        lines += ["## Transfer (leave one benchmark out, zero-shot)", "", card["transfer"].get("table_md", ""), ""]
    lines += ["Files (sha256):", ""] + [f"- `{k}` `{v}`" for k, v in card.get("files", {}).items()] + [""]
    return "\n".join(lines)
