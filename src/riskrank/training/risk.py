"""The risk heads alone: trained on every labelled tool, and cross-fitted over tool folds so each tool's
held-out score comes from heads that never saw its label (the held-out AUC, the honest predicted levels).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from riskrank.errors import RiskrankError
from riskrank.risk import RISKY_LEVEL, level_from_score, normalised_risk
from riskrank.training.config import TrainConfig
from riskrank.training.modules import RiskHead


# -- the risk heads --------------------------------------------------------------------------------
def _risk_target(levels: np.ndarray, target: str) -> np.ndarray:
    if target == "levels":
        return normalised_risk(levels)
    return (levels >= RISKY_LEVEL).astype(np.float32)


def train_risk_head(tool_emb: np.ndarray, levels: np.ndarray, target: str, cfg: TrainConfig, *, seed: int | None = None) -> RiskHead:
    """A risk head trained on the labelled tools only: ``target="levels"`` regresses (r - 1)
    / 4 (MSE), ``"risky"`` classifies r >= 3 (BCE); ``cfg.risk_weighting="balanced"`` weights
    each tool by the inverse frequency of its level (its class), normalised to mean 1."""
    seed = cfg.seed if seed is None else seed
    torch.manual_seed(seed + (0 if target == "levels" else 1))
    rng = np.random.default_rng(seed + 101)
    levels = np.asarray(levels)
    idx = np.flatnonzero(levels > 0)
    head = RiskHead(tool_emb.shape[1], cfg.hidden)
    if not idx.size:
        raise RiskrankError("no tool in the registry has a risk label; the risk head cannot be trained")
    lv = levels[idx].astype(np.int64)
    key = lv if target == "levels" else (lv >= RISKY_LEVEL).astype(np.int64)
    weight = np.ones(idx.size, np.float32)
    if cfg.risk_weighting == "balanced":
        cnt = np.bincount(key, minlength=6).astype(np.float32)
        weight = 1.0 / np.maximum(cnt[key], 1.0)
        weight = (weight / weight.mean()).astype(np.float32)
    T = torch.from_numpy(np.ascontiguousarray(tool_emb[idx], dtype=np.float32))
    y = torch.from_numpy(_risk_target(lv, target))
    w = torch.from_numpy(weight)
    opt = torch.optim.Adam(head.parameters(), lr=cfg.lr)
    per_epoch = math.ceil(idx.size / cfg.batch_size)
    epochs = max(cfg.risk_epochs, math.ceil(cfg.risk_min_steps / per_epoch)) if cfg.risk_epochs else 0
    bce = torch.nn.functional.binary_cross_entropy
    for _ in range(epochs):
        order = rng.permutation(idx.size)
        for s in range(0, idx.size, cfg.batch_size):
            b = torch.from_numpy(order[s : s + cfg.batch_size])
            p = head(T[b])
            err = (p - y[b]) ** 2 if target == "levels" else bce(p, y[b], reduction="none")
            loss = (w[b] * err).sum() / w[b].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return head.eval()


def _score(head: RiskHead, tool_emb: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return head(torch.from_numpy(np.ascontiguousarray(tool_emb, dtype=np.float32))).numpy().astype(np.float32)


def tool_folds(levels: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """A fold per labelled tool, stratified by level and seeded; -1 for unlabelled tools."""
    rng = np.random.default_rng(seed + 11)
    levels = np.asarray(levels)
    fold = np.full(levels.shape, -1, dtype=np.int64)
    for lv in np.unique(levels[levels > 0]):
        ids = np.flatnonzero(levels == lv)
        rng.shuffle(ids)
        fold[ids] = (np.arange(ids.size) + rng.integers(n_folds)) % n_folds
    return fold


def crossfit_risk(tool_emb: np.ndarray, levels: np.ndarray, cfg: TrainConfig, *, penalty: bool = True) -> dict[str, np.ndarray]:
    """The risk heads cross-fitted over tools (:func:`tool_folds`): each labelled tool's
    ``level_score`` (and ``p_risky`` with ``penalty``) from heads trained with its fold's
    labels hidden; an unlabelled tool's from heads trained on every label. Also its
    ``levels`` and ``fold``."""
    levels = np.asarray(levels)
    fold = tool_folds(levels, cfg.risk_folds, cfg.seed)
    out = {"level_score": np.empty(len(levels), np.float32), "fold": fold}
    if penalty:
        out["p_risky"] = np.empty(len(levels), np.float32)
    targets = [("level_score", "levels"), *([("p_risky", "risky")] if penalty else [])]
    groups = [(f, fold == f, np.where(fold == f, 0, levels)) for f in range(cfg.risk_folds)]
    groups.append((-1, fold < 0, levels))
    for f, held, train_levels in groups:
        if not held.any():
            continue
        if not (train_levels > 0).any():
            raise RiskrankError("too few labelled tools to cross-fit the risk head")
        for key, target in targets:
            out[key][held] = _score(train_risk_head(tool_emb, train_levels, target, cfg, seed=cfg.seed + 17 * (f + 2)), tool_emb[held])
    out["levels"] = level_from_score(out["level_score"])
    return out


def risk_auc(levels: np.ndarray, score: np.ndarray) -> float | None:
    """ROC AUC of ``score`` for r >= 3 vs r < 3 over the labelled tools; None when a class
    is empty."""
    levels = np.asarray(levels)
    lab = levels > 0
    y = levels[lab] >= RISKY_LEVEL
    if y.all() or not y.any():
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, np.asarray(score)[lab]))


def risk_quality(levels: np.ndarray, level_score: np.ndarray, crossfit: dict[str, np.ndarray], cfg: TrainConfig) -> dict[str, Any]:
    """Whether the risk head learned: held-out AUC (r >= 3 vs < 3) of the cross-fitted level
    head (and of p_risky), and the span of the trained head's predictions over the labelled
    tools, in levels. ``learned`` is false below ``cfg.min_risk_auc`` or
    ``cfg.min_level_span`` (or when no AUC can be measured), with the reason."""
    levels = np.asarray(levels)
    lab = levels > 0
    auc = risk_auc(levels, crossfit["level_score"])
    auc_p = risk_auc(levels, crossfit["p_risky"]) if "p_risky" in crossfit else None
    span = float(4.0 * (level_score[lab].max() - level_score[lab].min())) if lab.any() else 0.0
    reasons = []
    if auc is None:
        reasons.append("no held-out AUC: every labelled tool is on one side of level 3")
    elif auc < cfg.min_risk_auc:
        reasons.append(f"held-out AUC {auc:.2f} < {cfg.min_risk_auc:g}")
    if span < cfg.min_level_span:
        reasons.append(f"its predictions span {span:.2f} levels (< {cfg.min_level_span:g})")
    return {"heldout_auc": auc, "heldout_auc_p_risky": auc_p, "level_span": round(span, 4), "folds": cfg.risk_folds,
            "learned": not reasons, "reason": "; ".join(reasons) or None}


