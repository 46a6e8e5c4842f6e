"""The heads' training (:func:`train_heads`): the relevance head on its first stage with hard negatives and
early stopping on validation NDCG@5, the risk heads beside it, the paper design's joint loss.
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from riskrank.checkpoint import TrainResult
from riskrank.errors import RiskrankError
from riskrank.first_stage import (
    LEXICAL_FEATURES,
    Fusion,
    LexicalEvidence,
    relevance_inputs,
    top_m,
)
from riskrank.risk import normalised_risk
from riskrank.training.choices import _val_ndcg, choose_fusion, choose_inference
from riskrank.training.config import TrainConfig, split_validation
from riskrank.training.modules import DualHead
from riskrank.training.risk import _score, crossfit_risk, risk_quality, train_risk_head


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


# -- the relevance head -----------------------------------------------------------------------------
@dataclass
class _Split:
    """The training and validation queries :func:`train_heads` works on, checked and split:
    embeddings, gold, lexical evidence and the relevance inputs of each side."""

    tool_emb: np.ndarray
    query_emb: np.ndarray
    gold: list[np.ndarray]
    lexical: LexicalEvidence | None
    val_query_emb: np.ndarray | None
    val_gold: list[np.ndarray] | None
    val_lexical: LexicalEvidence | None
    fusion: Fusion | None
    inputs_tr: Any
    inputs_va: Any
    n_skipped: int
    n_unlabelled: int

    @property
    def has_val(self) -> bool:
        return self.val_query_emb is not None and self.val_gold is not None and len(self.val_gold) > 0


def _split(tool_emb: np.ndarray, query_emb: np.ndarray, gold: list[np.ndarray], risk_levels: np.ndarray, cfg: TrainConfig,
           val_query_emb: np.ndarray | None, val_gold: list[np.ndarray] | None, lexical: LexicalEvidence | None,
           val_lexical: LexicalEvidence | None, fusion: Fusion | None, notes: list[str]) -> _Split:
    """Check the inputs (finite, one dimension, lexical evidence where the hybrid head needs
    it, at least one labelled tool), skip queries without gold, hold out the validation
    queries when none are given, and choose the hybrid fusion when none is given."""
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
        warnings.warn(notes[-1], stacklevel=3)
    if not labelled.any():
        raise RiskrankError("no tool in the registry has a risk label; the risk head cannot be trained")
    if hybrid and fusion is None:
        both = np.concatenate([query_emb, val_query_emb]) if has_val else query_emb
        lex_both = _concat_evidence(lexical, val_lexical) if has_val else lexical
        fusion = choose_fusion(both @ tool_emb.T, lex_both, gold + (list(val_gold) if has_val else []))
    inputs_tr = relevance_inputs(query_emb @ tool_emb.T, lexical, fusion if hybrid else None)
    inputs_va = relevance_inputs(val_query_emb @ tool_emb.T, val_lexical, fusion if hybrid else None) if has_val else None
    return _Split(tool_emb, query_emb, gold, lexical, val_query_emb, val_gold, val_lexical, fusion if hybrid else None,
                  inputs_tr, inputs_va, n_skipped, n_unlabelled)


def _optimiser(model: DualHead, cfg: TrainConfig, hybrid: bool) -> torch.optim.Optimizer:
    """Adam over what the design trains: for the hybrid head two groups (scale, bias and
    lexical weights at ``lexical_lr``, the residual at ``lr``); the paper design both heads."""
    rel_head = model.relevance_head
    if hybrid:
        lin = [rel_head.log_scale, rel_head.bias, rel_head.lex_w]
        rest = [p for n, p in rel_head.named_parameters() if n not in ("log_scale", "bias", "lex_w")]
        return torch.optim.Adam([{"params": lin, "lr": cfg.lexical_lr}, {"params": rest, "lr": cfg.lr}])
    if cfg.design == "residual":
        return torch.optim.Adam(rel_head.parameters(), lr=cfg.lr)
    return torch.optim.Adam(model.parameters(), lr=cfg.lr)  # the paper's joint loss: both heads in one optimiser


def _train_relevance(model: DualHead, d: _Split, risk_levels: np.ndarray, cfg: TrainConfig, rng: np.random.Generator,
                     progress: bool) -> tuple[list[dict[str, float]], int, int]:
    """The margin-loss epochs (with the paper design's risk MSE), early-stopped on validation
    NDCG@5 with epoch 0 (the first stage itself) a candidate; the best state is loaded back.
    Returns (history, best epoch, positive pairs)."""
    hybrid = cfg.relevance == "hybrid"
    pair_q, pair_t = _pairs(d.gold)
    rel_head = model.relevance_head
    if cfg.design == "residual":
        # Centre the sigmoid on the mean first-stage score of the training positives.
        center = float(d.inputs_tr.f0[pair_q, pair_t].mean())
        with torch.no_grad():
            rel_head.bias.fill_(-float(rel_head.log_scale.exp()) * center)
    opt = _optimiser(model, cfg, hybrid)
    hard = _hard_pool(d.inputs_tr.f0, d.gold, cfg.hard_pool) if cfg.sampling != "random" else None
    labelled = risk_levels > 0
    T = torch.from_numpy(d.tool_emb)
    Qe = torch.from_numpy(d.query_emb)
    F0 = torch.from_numpy(np.ascontiguousarray(d.inputs_tr.f0, dtype=np.float32))
    X = torch.from_numpy(np.ascontiguousarray(np.stack(d.inputs_tr.x, axis=-1), dtype=np.float32)) if hybrid else None
    target = torch.from_numpy(normalised_risk(np.where(labelled, risk_levels, 1)))
    lab_t = torch.from_numpy(labelled)
    tool_weight = torch.from_numpy(_level_weights(risk_levels, cfg.risk_weighting))

    def head_logit(qi: torch.Tensor, ti: torch.Tensor) -> torch.Tensor:
        if cfg.design == "paper":
            return rel_head.logit(Qe[qi], T[ti])
        return rel_head.logit(Qe[qi], T[ti], F0[qi, ti], X[qi, ti] if X is not None else None)

    def val_ndcg() -> float:
        return _val_ndcg(model, d.tool_emb, d.val_query_emb, d.val_gold, d.inputs_va)

    history: list[dict[str, float]] = []
    best_state, best_val, best_epoch = None, -1.0, -1
    if d.has_val and cfg.early_stopping:
        best_val, best_epoch = val_ndcg(), 0
        best_state = copy.deepcopy(rel_head.state_dict())
        history.append({"epoch": 0, "loss": float("nan"), "val_ndcg@5": best_val})
    bar = tqdm(range(1, cfg.epochs + 1), desc=f"train {cfg.design} seed {cfg.seed}", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        neg = _sample_negatives(rng, pair_q, d.gold, hard, len(d.tool_emb), cfg.negatives, cfg.sampling)
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
        if d.has_val:
            row["val_ndcg@5"] = val_ndcg()
            if cfg.early_stopping and row["val_ndcg@5"] > best_val:
                best_val, best_epoch, best_state = row["val_ndcg@5"], epoch, copy.deepcopy(rel_head.state_dict())
        history.append(row)
        bar.set_postfix({k: f"{v:.4f}" for k, v in row.items() if k != "epoch"})
    if best_state is not None:
        rel_head.load_state_dict(best_state)
    model.eval()
    return history, best_epoch, len(pair_q)


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
    risk_levels = np.asarray(risk_levels)
    d = _split(tool_emb, query_emb, gold, risk_levels, cfg, val_query_emb, val_gold, lexical, val_lexical, fusion, notes)
    hybrid = cfg.relevance == "hybrid"
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = DualHead(d.tool_emb.shape[1], cfg.design, cfg.hidden, cfg.rank, lexical=LEXICAL_FEATURES if hybrid else (),
                     penalty=cfg.penalty)
    history, best_epoch, n_pairs = _train_relevance(model, d, risk_levels, cfg, rng, progress)
    if relevance_only:
        return TrainResult(model, cfg, 0.0, history, {"best_epoch": best_epoch}, {"train_queries": len(d.gold)},
                           time.perf_counter() - t0, notes, d.fusion)
    # The risk heads: the residual design trains them on their own, over every labelled tool.
    penalty = cfg.penalty == "p_risky"
    if cfg.design == "residual":
        model.risk_head.load_state_dict(train_risk_head(d.tool_emb, risk_levels, "levels", cfg).state_dict())
        if penalty:
            model.penalty_head.load_state_dict(train_risk_head(d.tool_emb, risk_levels, "risky", cfg).state_dict())
    crossfit = crossfit_risk(d.tool_emb, risk_levels, cfg, penalty=penalty)
    quality = risk_quality(risk_levels, _score(model.risk_head, d.tool_emb), crossfit, cfg)
    if not quality["learned"]:
        notes.append(f"the risk head has not learned ({quality['reason']}): predicted levels will be the keyword annotator's")
    validation: dict[str, Any] = {"n_queries": len(d.val_gold) if d.has_val else 0, "best_epoch": best_epoch}
    if hybrid:
        rel_head = model.relevance_head
        validation["lexical_weights"] = dict(zip(LEXICAL_FEATURES, rel_head.lex_w.detach().numpy().round(4).tolist(), strict=True))
        validation["scale"] = round(float(rel_head.log_scale.detach().exp()), 4)
    lam = 0.1
    if d.has_val and choose:
        lam = choose_inference(d.val_query_emb, d.val_gold, d.tool_emb, risk_levels, cfg, model=model, record=validation,
                               lexical=d.val_lexical, fusion=d.fusion, perm_counts=perm_counts,
                               predicted_levels=crossfit["levels"] if quality["learned"] else None)["lam"]
    elif not d.has_val:
        notes.append("no validation queries: lambda defaults to 0.1, no early stopping")
    counts = {"train_queries": len(d.gold), "val_queries": validation["n_queries"], "positive_pairs": n_pairs,
              "skipped_queries": d.n_skipped, "unlabelled_tools": d.n_unlabelled}
    return TrainResult(model, cfg, float(lam), history, validation, counts, time.perf_counter() - t0, notes,
                       d.fusion, quality, crossfit)


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
