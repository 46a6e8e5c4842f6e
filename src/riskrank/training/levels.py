"""Fit the level model (:mod:`riskrank.levels`) and judge it by leaving data out.

The judge is the level actually served, with the declared hints stripped from the input:

* leave one MCP server out: for each of the annotated servers in turn, the model is fitted on
  the audited benchmark tools and the other servers' tools, and the held-out server's tools
  are scored; AUC of the served level, destructive vs read-only and not-read-only vs
  read-only, pooled over the held-out scores and per server;
* leave one benchmark out: fitted on one benchmark's audited tools and every annotated tool,
  AUC (r >= 3 vs < 3) of the served level on the other benchmark's audited tools.

Beside it, on the same folds, the rule it replaces (the higher of the shipped risk head's level
and the keyword level), the keywords alone and the shipped head alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from riskrank.levels import LevelModel
from riskrank.risk import RISKY_LEVEL, level_from_score, rubric_floor


def fit_level_model(aud_emb: np.ndarray, aud_levels: np.ndarray, mcp_emb: np.ndarray, weak: np.ndarray, *,
                    seed: int = 42, meta: dict[str, Any] | None = None) -> LevelModel:
    """The three heads on audited tools (levels 1..5, 0 = unaudited and skipped) and annotated
    tools (weak labels of :mod:`riskrank.datasets.mcp_annotated`)."""
    from sklearn.linear_model import LogisticRegression

    from riskrank.datasets.mcp_annotated import DESTRUCTIVE, READ_ONLY, WRITES
    from riskrank.training.config import TrainConfig
    from riskrank.training.risk import train_risk_head

    weak = np.asarray(weak)
    # the risk weighting the residual design resolves to: each level weighs the same
    cfg = TrainConfig(seed=seed, risk_weighting="balanced")
    head = train_risk_head(np.vstack([aud_emb, mcp_emb]), np.concatenate([aud_levels, weak]), "levels", cfg)
    state = {k: v.detach().numpy().astype(np.float32) for k, v in head.state_dict().items()}

    def logistic(mask: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced").fit(mcp_emb[mask], target[mask])
        return m.coef_[0].astype(np.float32), m.intercept_.astype(np.float32)

    ro = weak == READ_ONLY
    changes = (weak == WRITES) | (weak == DESTRUCTIVE)
    w_w, w_b = logistic(ro | changes, changes)
    d_w, d_b = logistic(ro | (weak == DESTRUCTIVE), weak == DESTRUCTIVE)
    arrays = {"risk.l1.weight": state["l1.weight"], "risk.l1.bias": state["l1.bias"], "risk.l2.weight": state["l2.weight"],
              "risk.l2.bias": state["l2.bias"], "writes.weight": w_w, "writes.bias": w_b, "destructive.weight": d_w,
              "destructive.bias": d_b}
    info = {"seed": seed, "n_audited": int((np.asarray(aud_levels) > 0).sum()), "n_annotated": int((weak > 0).sum()),
            "n_changes_state": int(changes.sum()), "n_read_only": int(ro.sum())}
    return LevelModel(arrays, {**info, **(meta or {})})


def served_levels(score: np.ndarray, tools: Sequence[Any]) -> np.ndarray:
    """The level served for a level score (before hints): its rubric level, raised to the
    rubric's floor for tools that run commands or code (:func:`riskrank.risk.rubric_floor`)."""
    floors = np.asarray([rubric_floor(t.name, t.description)[0] for t in tools])
    return np.maximum(level_from_score(score), floors).astype(np.float32)


def auc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """ROC AUC of scores ``pos`` above ``neg`` (ties count half); None without both classes."""
    from sklearn.metrics import roc_auc_score

    if not len(pos) or not len(neg):
        return None
    return float(roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg]))


def hint_aucs(score: np.ndarray, read_only: np.ndarray, not_read_only: np.ndarray, destructive: np.ndarray) -> dict[str, float | None]:
    return {"destructive_vs_read_only": auc(score[destructive], score[read_only]),
            "not_read_only_vs_read_only": auc(score[not_read_only], score[read_only]),
            "n_read_only": int(read_only.sum()), "n_not_read_only": int(not_read_only.sum()), "n_destructive": int(destructive.sum())}


def leave_one_server_out(aud_emb: np.ndarray, aud_levels: np.ndarray, data: Any, mcp_emb: np.ndarray,
                         baselines: dict[str, np.ndarray], *, seed: int = 42, progress: bool = False) -> dict[str, Any]:
    """The served level of every annotated tool from a model that never saw its server; the
    AUCs of it and of each ``baselines`` score (name -> [N]), pooled and per server."""
    from tqdm import tqdm

    servers = np.asarray(data.servers)
    score = np.zeros(len(servers), dtype=np.float32)
    for srv in tqdm(sorted(set(data.servers)), desc="leave one server out", disable=not progress):
        tr, te = servers != srv, servers == srv
        model = fit_level_model(aud_emb, aud_levels, mcp_emb[tr], data.weak[tr], seed=seed)
        score[te] = model.parts(mcp_emb[te]).score
    served = served_levels(score, data.tools)
    ro, nro, de = data.read_only, data.not_read_only, data.destructive
    scores = {"served level": served, "level score": score, "served level without the rubric floor": level_from_score(score).astype(np.float32),
              **baselines}
    pooled = {name: hint_aucs(s, ro, nro, de) for name, s in scores.items()}
    per_server = {}
    for srv in sorted(set(data.servers)):
        m = servers == srv
        per_server[srv] = {name: hint_aucs(s[m], ro[m], nro[m], de[m]) for name, s in scores.items()}
    levels = {str(lv): int((served == lv).sum()) for lv in range(1, 6)}
    return {"pooled": pooled, "per_server": per_server, "served_levels": levels}


def _rule_before(aud_emb: np.ndarray, aud_levels: np.ndarray, emb: np.ndarray, tools: Sequence[Any], seed: int) -> np.ndarray:
    """The rule the level model replaced: the higher of a risk head's level (trained on the
    audited tools only, as a base build trains it) and the keyword level."""
    from riskrank.risk import keyword_level
    from riskrank.training.config import TrainConfig
    from riskrank.training.risk import _score, train_risk_head

    head = train_risk_head(aud_emb, aud_levels, "levels", TrainConfig(seed=seed, risk_weighting="balanced"))
    kw = np.asarray([keyword_level(t.name, t.description, None)[0] for t in tools])
    return np.maximum(level_from_score(_score(head, emb)), kw).astype(np.float32)


def leave_one_benchmark_out(benchmarks: Sequence[tuple[str, np.ndarray, np.ndarray, Sequence[Any]]], mcp_emb: np.ndarray, weak: np.ndarray,
                            *, seed: int = 42) -> dict[str, Any]:
    """For each (name, tool embeddings, audited levels, tools) held out: fitted on the others and
    every annotated tool, the served level's AUC (r >= 3 vs < 3) on its audited tools."""
    out = {}
    for i, (name, emb, lv, tools) in enumerate(benchmarks):
        others = [b for j, b in enumerate(benchmarks) if j != i]
        model = fit_level_model(np.vstack([b[1] for b in others]), np.concatenate([b[2] for b in others]), mcp_emb, weak, seed=seed)
        s = model.parts(emb).score
        lab = lv > 0
        risky = lv >= RISKY_LEVEL
        served = served_levels(s, tools)
        before = _rule_before(np.vstack([b[1] for b in others]), np.concatenate([b[2] for b in others]), emb, tools, seed)
        out[name] = {"served_level_auc": auc(served[lab & risky], served[lab & ~risky]),
                     "level_score_auc": auc(s[lab & risky], s[lab & ~risky]),
                     "before_auc": auc(before[lab & risky], before[lab & ~risky]),
                     "n_tools": int(lab.sum()), "n_risky": int((lab & risky).sum()),
                     "trained_on": [b[0] for b in others] + ["mcp-annotated"]}
    return out
