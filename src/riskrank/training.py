"""Training the dual-head model, and every choice made on validation queries.

Triplets (q, t+, t-) with ``negatives`` negatives per positive; negatives come from the
corpus at random, from the first-stage (dense) top-100 minus gold (the paper's text), or a
mix. Loss (Eq. 3-5): ``L = L_rel + mu * L_risk`` with the pairwise margin loss on f_rel and
the MSE of f_risk against (r - 1) / 4 over the labelled tools of the batch.

Validation is split by query, never by triplet. It early-stops the residual head (epoch 0 =
the encoder's own ranking is a candidate); then :func:`choose_inference`, the one function
that chooses anything, picks the residual weight beta, lambda, the graph's alpha and
normalisation, the relevance floor ``min_score``, and the risk-label-penalty baseline's lambda. :func:`fit` is the whole
procedure (split, heads, graph, choices); checkpoints are :mod:`riskrank.checkpoint`'s.
Two lambda rules (``TrainConfig.selection``), both on validation queries only:

* ``budget:R`` (default R = 0.75): an exposure budget relative to the first stage. Among the
  lambdas whose RVR@5 is at most R times the RVR@5 of the first-stage (dense) ranking of the
  same validation queries, take the best NDCG@5; if none meets the budget, the lambda with
  the lowest RVR@5. "Show the agent at most 3/4 of the risky tools plain retrieval would" is
  a policy an operator can state; the relevance cost is then measured.
* ``utility:W``: maximise NDCG@5 - W * RVR@5.

Under both rules, differences the validation queries cannot resolve are not taken as
evidence: the one-standard-error rule (Breiman et al., 1984) picks the largest lambda (the
most conservative setting) whose score is within one paired standard error of the best.
This matters where validation queries expose almost no risky tool (Seal-Tools dev: 2 risky
slots of 700 for dense), so every lambda meets the budget and noise would otherwise pick
lambda = 0. ``tolerance`` may instead give a fixed relative tolerance.

The risk head's MSE can weight each tool by the inverse frequency of its level
(``risk_weighting="balanced"``, the default for the residual design): with 1.8% of Seal-Tools
tools at r >= 3, the unweighted loss barely separates L2 from L3 (held-out AUC for r >= 3:
0.85 unweighted, 0.90 balanced, 5-fold over tools, measured with MiniLM). The paper design
keeps the paper's unweighted loss.

Every random source (torch init, negative sampling, batch order, validation split) is seeded,
so one seed reproduces bit for bit on CPU. Training reads precomputed embeddings: each
distinct text is encoded once (the reference implementation re-encodes three texts per
triplet).
"""

from __future__ import annotations

import copy
import hashlib
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from riskrank.errors import RiskrankError
from riskrank.first_stage import rank, top_m
from riskrank.graph import NORMALISATIONS, GraphConfig, ToolGraph
from riskrank.heads import DESIGNS, DualHead, HeadScorer
from riskrank.metrics import ndcg_at_k, rvr_at_k
from riskrank.registry import ToolRegistry
from riskrank.risk import label_risk, level_from_score, normalised_risk

SAMPLING = ("random", "hard", "mixed")
# Wide enough for the residual head, whose sigmoid is sharper than the paper head's.
DEFAULT_LAM_GRID = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
PAPER_LAM_GRID = (0.0, 0.05, 0.1, 0.2)
DEFAULT_RESIDUAL_GRID = (0.0, 0.25, 0.5, 1.0)
DEFAULT_ALPHA_GRID = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
#: The relevance floor leaves out at most this fraction of validation gold tools.
MIN_SCORE_QUANTILE = 0.01


@dataclass
class TrainConfig:
    """Hyperparameters; defaults are the paper's (Section 5.1) where it gives them."""

    design: str = "residual"
    hidden: int = 64
    rank: int = 64
    negatives: int = 5
    sampling: str | None = None
    """None = the design's default: ``mixed`` for residual, ``hard`` for paper (its text)."""
    hard_pool: int = 100
    margin: float = 0.1
    mu: float = 0.5
    lr: float = 1e-3
    batch_size: int = 64
    epochs: int = 10
    seed: int = 42
    early_stopping: bool | None = None
    """None = on for residual (epoch 0 included), off for paper (trained 10 epochs as printed)."""
    val_fraction: float = 0.2
    lam_grid: tuple[float, ...] = DEFAULT_LAM_GRID
    residual_grid: tuple[float, ...] = DEFAULT_RESIDUAL_GRID
    selection: str = "budget:0.75"
    """How lambda is chosen on validation: ``budget:R`` or ``utility:W`` (module docstring)."""
    tolerance: float | str = "1se"
    """``1se`` (one-standard-error rule) or a relative score difference treated as a tie;
    ties go to the larger lambda."""
    risk_weighting: str | None = None
    """``none`` (paper) or ``balanced`` (inverse level frequency); None = balanced for the
    residual design, none for paper."""

    def resolved(self) -> TrainConfig:
        cfg = copy.copy(self)
        if cfg.design not in DESIGNS:
            raise RiskrankError(f"unknown head design {cfg.design!r}; choose from {', '.join(DESIGNS)}")
        if cfg.sampling is None:
            cfg.sampling = "mixed" if cfg.design == "residual" else "hard"
        if cfg.sampling not in SAMPLING:
            raise RiskrankError(f"unknown negative sampling {cfg.sampling!r}; choose from {', '.join(SAMPLING)}")
        if cfg.early_stopping is None:
            cfg.early_stopping = cfg.design == "residual"
        if cfg.risk_weighting is None:
            cfg.risk_weighting = "balanced" if cfg.design == "residual" else "none"
        if cfg.risk_weighting not in ("none", "balanced"):
            raise RiskrankError(f"unknown risk weighting {cfg.risk_weighting!r}; choose none or balanced")
        if cfg.tolerance != "1se" and not (isinstance(cfg.tolerance, int | float) and 0.0 <= cfg.tolerance < 1.0):
            raise RiskrankError(f"tolerance must be '1se' or a number in [0, 1), got {cfg.tolerance!r}")
        for name in ("negatives", "batch_size", "epochs", "hidden", "rank", "hard_pool"):
            if getattr(cfg, name) < (0 if name == "epochs" else 1):
                raise RiskrankError(f"{name} must be positive, got {getattr(cfg, name)}")
        if not 0.0 <= cfg.val_fraction < 1.0:
            raise RiskrankError(f"val_fraction must be in [0, 1), got {cfg.val_fraction}")
        parse_selection(cfg.selection)
        if any(lam < 0 for lam in cfg.lam_grid):
            raise RiskrankError("lambda values must be >= 0")
        return cfg


@dataclass
class TrainResult:
    model: DualHead
    config: TrainConfig
    lam: float
    history: list[dict[str, float]]
    validation: dict[str, Any]
    counts: dict[str, int]
    seconds: float
    warnings: list[str] = field(default_factory=list)


def split_validation(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, validation positions): a seeded split by query."""
    order = np.random.default_rng(seed + 7919).permutation(n)
    n_val = round(n * fraction) if fraction > 0 else 0
    if fraction > 0 and n >= 10:
        n_val = max(n_val, 1)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _pairs(gold: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    q = np.concatenate([np.full(len(g), i) for i, g in enumerate(gold)]).astype(np.int64)
    t = np.concatenate(gold).astype(np.int64)
    return q, t


def _sample_negatives(
    rng: np.random.Generator, pair_q: np.ndarray, gold: list[np.ndarray], hard: np.ndarray | None,
    n_tools: int, k: int, sampling: str,
) -> np.ndarray:
    """[P, k] negatives per positive pair; never a gold tool of the pair's query.
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


def _hard_pool(query_emb: np.ndarray, tool_emb: np.ndarray, gold: list[np.ndarray], pool: int) -> np.ndarray:
    """First-stage (dense) top-``pool`` per query with gold removed, -1 padded."""
    idx = top_m(query_emb @ tool_emb.T, pool)
    out = np.full_like(idx, -1)
    for i, g in enumerate(gold):
        keep = idx[i][~np.isin(idx[i], g)]
        out[i, : len(keep)] = keep
    return out


def parse_selection(rule: str) -> tuple[str, float]:
    """``budget:0.75`` -> ("budget", 0.75); ``utility:1`` -> ("utility", 1.0)."""
    kind, _, value = str(rule).partition(":")
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if kind not in ("budget", "utility") or not np.isfinite(x) or x < 0:
        raise RiskrankError(f"invalid lambda selection rule {rule!r}; use budget:R (e.g. budget:0.75) or utility:W (e.g. utility:1)")
    return kind, x


def choose_lambda(
    rows: list[dict[str, float]], rule: str, reference_rvr: float, tolerance: float | str = "1se",
    per_query: dict[float, tuple[np.ndarray, np.ndarray]] | None = None,
) -> float:
    """Apply a selection rule to per-lambda validation rows (keys lam, ndcg@5, rvr@5); see
    the module docstring. ``per_query`` maps lambda -> (NDCG@5 [Q], RVR@5 [Q]) for the
    one-standard-error rule; without it ``1se`` degrades to exact ties."""
    kind, x = parse_selection(rule)

    def value(r: dict[str, float]) -> float:
        return r["ndcg@5"] - x * r["rvr@5"] if kind == "utility" else r["ndcg@5"]

    def per_q(lam: float) -> np.ndarray | None:
        if per_query is None or lam not in per_query:
            return None
        nd, rv = per_query[lam]
        return nd - x * rv if kind == "utility" else nd

    pool = rows
    if kind == "budget":
        pool = [r for r in rows if r["rvr@5"] <= x * reference_rvr + 1e-12]
        if not pool:
            return min(rows, key=lambda r: (round(r["rvr@5"], 10), -r["ndcg@5"], r["lam"]))["lam"]
    best = max(pool, key=lambda r: (round(value(r), 10), -r["lam"]))
    chosen = best["lam"]
    for r in pool:
        if r["lam"] <= chosen:
            continue
        if tolerance == "1se":
            a, b = per_q(r["lam"]), per_q(best["lam"])
            slack = float(np.std(a - b, ddof=1) / np.sqrt(len(a))) if a is not None and len(a) > 1 else 0.0
        else:
            slack = float(tolerance) * abs(value(best))
        if value(r) >= value(best) - slack - 1e-12:
            chosen = r["lam"]
    return float(chosen)


def lambda_curve(
    relevance: np.ndarray, f_risk: np.ndarray, gold: list[np.ndarray], risk_levels: np.ndarray, lam_grid: tuple[float, ...],
    per_query: dict[float, tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[dict[str, float]]:
    """NDCG@5 and RVR@5 of s = f_rel - lambda * f_risk for each lambda of the grid; per-query
    values go into ``per_query`` when a dict is given."""
    rows = []
    for lam in lam_grid:
        ranking = rank(relevance - np.float32(lam) * f_risk)[:, :5]
        nd, rv = ndcg_at_k(ranking, gold), rvr_at_k(ranking, risk_levels)
        if per_query is not None:
            per_query[float(lam)] = (nd, rv)
        rows.append({"lam": float(lam), "ndcg@5": float(nd.mean()), "rvr@5": float(rv.mean())})
    return rows


def choose_inference(
    val_query_emb: np.ndarray, val_gold: list[np.ndarray], tool_emb: np.ndarray, risk_levels: np.ndarray, cfg: TrainConfig,
    *, model: DualHead | None = None, graph: ToolGraph | None = None, alpha_grid: Sequence[float] = DEFAULT_ALPHA_GRID,
    normalisations: Sequence[str] = NORMALISATIONS, label_risk: np.ndarray | None = None,
    record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every inference setting riskrank chooses, chosen here and only here, on validation
    queries only (test queries never choose anything), in this order:

    1. ``residual_weight`` (residual design, with ``model``): the beta of the best validation
       NDCG@5; ties go to the smaller beta. It is set on the model.
    2. ``lam`` (with ``model``): ``cfg.selection`` over ``cfg.lam_grid`` (module docstring),
       against the first-stage (dense) RVR@5 of the same queries.
    3. ``alpha`` and ``normalisation`` (with ``model`` and ``graph``): the best NDCG@5 of the
       smoothed s = f_rel - lambda * f_risk over ``alpha_grid`` x ``normalisations``; ties go to
       the smaller alpha, then to the order of ``normalisations``.
    4. ``min_score`` (with ``model``): the relevance floor on f_rel,
       :func:`relevance_floor` of the validation gold tools' f_rel.
    5. ``label_lam`` (with ``label_risk``): the same rule as 2 for the dense risk-label-penalty
       baseline, cos - lambda * label_risk, against lambda = 0.

    Returns the chosen values; every grid goes into ``record`` (a TrainResult's
    ``validation``) so a checkpoint or a report can show why."""
    record = record if record is not None else {}
    chosen: dict[str, Any] = {}
    if model is not None:
        if model.design == "residual":
            grid = []
            for beta in cfg.residual_grid:
                model.relevance_head.residual_weight.fill_(beta)
                grid.append({"beta": float(beta), "ndcg@5": _val_ndcg(model, tool_emb, val_query_emb, val_gold)})
            best = max(grid, key=lambda r: (round(r["ndcg@5"], 10), -r["beta"]))
            model.relevance_head.residual_weight.fill_(best["beta"])
            record["residual_grid"] = grid
            record["residual_weight"] = chosen["residual_weight"] = best["beta"]
        scorer = HeadScorer(model, tool_emb)
        pq: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        rows = lambda_curve(scorer.relevance(val_query_emb), scorer.f_risk, val_gold, risk_levels, cfg.lam_grid, pq)
        dense_rvr = float(rvr_at_k(rank(val_query_emb @ scorer.tool_emb.numpy().T)[:, :5], risk_levels).mean())
        lam = choose_lambda(rows, cfg.selection, dense_rvr, cfg.tolerance, pq)
        record["lam_grid"] = rows
        record["first_stage_rvr@5"] = dense_rvr
        record["selection"] = cfg.selection
        record["selected"] = next(r for r in rows if r["lam"] == lam)
        chosen["lam"] = lam
        if graph is not None:
            s = scorer.relevance(val_query_emb) - np.float32(lam) * scorer.f_risk
            grid = []
            for norm in normalisations:
                for a in alpha_grid:
                    sm = graph.smooth(s, a, normalisation=norm) if a > 0 else s
                    grid.append({"normalisation": norm, "alpha": float(a), "ndcg@5": float(ndcg_at_k(rank(sm)[:, :5], val_gold).mean())})
            best = max(grid, key=lambda r: (round(r["ndcg@5"], 10), -r["alpha"], -list(normalisations).index(r["normalisation"])))
            record["alpha_grid"] = grid
            chosen["alpha"], chosen["normalisation"] = best["alpha"], best["normalisation"]
        chosen["min_score"] = record["min_score"] = relevance_floor(scorer.relevance(val_query_emb), val_gold)
    if label_risk is not None:
        cos = val_query_emb @ tool_emb.T
        pq = {}
        rows = lambda_curve(cos, label_risk, val_gold, risk_levels, (0.0, *cfg.lam_grid), pq)
        chosen["label_lam"] = choose_lambda(rows[1:], cfg.selection, rows[0]["rvr@5"], cfg.tolerance, pq)
    return chosen


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


def _val_ndcg(model: DualHead, tool_emb: np.ndarray, q: np.ndarray, gold: list[np.ndarray]) -> float:
    scorer = HeadScorer(model, tool_emb)
    return float(ndcg_at_k(rank(scorer.relevance(q))[:, :5], gold).mean())


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
) -> TrainResult:
    """Train the dual head on precomputed embeddings.

    ``gold`` holds each training query's gold tool indices; ``risk_levels`` the audited level
    per tool (0 = unlabelled: such tools are excluded from L_risk and counted). Without an
    explicit validation set, ``config.val_fraction`` of the training queries (by query) is
    held out for early stopping and, with ``choose``, for :func:`choose_inference`'s beta and
    lambda (:func:`fit` passes ``choose=False`` and makes every choice at once).
    """
    cfg = (config or TrainConfig()).resolved()
    t0 = time.perf_counter()
    notes: list[str] = []
    tool_emb = np.ascontiguousarray(tool_emb, dtype=np.float32)
    query_emb = np.ascontiguousarray(query_emb, dtype=np.float32)
    for name, arr in (("tool", tool_emb), ("query", query_emb)):
        if not np.isfinite(arr).all():
            raise RiskrankError(f"{name} embeddings contain NaN/inf; refusing to train")
    if query_emb.shape[1] != tool_emb.shape[1]:
        raise RiskrankError(f"query embeddings have dimension {query_emb.shape[1]}, tool embeddings {tool_emb.shape[1]}")
    n_tools, dim = tool_emb.shape
    risk_levels = np.asarray(risk_levels)
    keep = [i for i, g in enumerate(gold) if len(g)]
    n_skipped = len(gold) - len(keep)
    if n_skipped:
        notes.append(f"{n_skipped} training queries have no gold tool in the corpus and were skipped")
    if not keep:
        raise RiskrankError("the training split is empty (no query with a gold tool in the corpus)")
    gold = [np.asarray(gold[i], dtype=np.int64) for i in keep]
    query_emb = query_emb[keep]
    if val_query_emb is None and cfg.val_fraction > 0:
        tr, va = split_validation(len(gold), cfg.val_fraction, cfg.seed)
        if len(tr) == 0:
            raise RiskrankError("too few training queries to hold out a validation split")
        val_query_emb, val_gold = query_emb[va], [gold[i] for i in va]
        query_emb, gold = query_emb[tr], [gold[i] for i in tr]
    has_val = val_query_emb is not None and val_gold is not None and len(val_gold) > 0
    labelled = risk_levels > 0
    n_unlabelled = int((~labelled).sum())
    if n_unlabelled:
        notes.append(f"{n_unlabelled} tools have no risk label: excluded from L_risk")
        warnings.warn(notes[-1], stacklevel=2)
    if not labelled.any():
        raise RiskrankError("no tool in the registry has a risk label; the risk head cannot be trained")

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = DualHead(dim, cfg.design, cfg.hidden, cfg.rank)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    pair_q, pair_t = _pairs(gold)
    hard = _hard_pool(query_emb, tool_emb, gold, cfg.hard_pool) if cfg.sampling != "random" else None
    T = torch.from_numpy(tool_emb)
    Qe = torch.from_numpy(query_emb)
    target = torch.from_numpy(normalised_risk(np.where(labelled, risk_levels, 1)))
    lab_t = torch.from_numpy(labelled)
    level_weight = np.ones(6, dtype=np.float32)
    if cfg.risk_weighting == "balanced":
        counts = np.bincount(risk_levels[labelled].astype(np.int64), minlength=6).astype(np.float32)
        level_weight = np.where(counts > 0, 1.0 / np.maximum(counts, 1.0), 0.0).astype(np.float32)
        level_weight /= level_weight[risk_levels[labelled].astype(np.int64)].mean()
    tool_weight = torch.from_numpy(level_weight[np.where(labelled, risk_levels, 0).astype(np.int64)])

    history: list[dict[str, float]] = []
    best_state, best_val, best_epoch = None, -1.0, -1
    if has_val and cfg.early_stopping:
        best_val, best_epoch = _val_ndcg(model, tool_emb, val_query_emb, val_gold), 0
        best_state = copy.deepcopy(model.relevance_head.state_dict())
        history.append({"epoch": 0, "loss": float("nan"), "val_ndcg@5": best_val})
    bar = tqdm(range(1, cfg.epochs + 1), desc=f"train {cfg.design} seed {cfg.seed}", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        neg = _sample_negatives(rng, pair_q, gold, hard, n_tools, cfg.negatives, cfg.sampling)
        order = rng.permutation(len(pair_q))
        tot, nb = 0.0, 0
        for s in range(0, len(order), cfg.batch_size):
            b = order[s : s + cfg.batch_size]
            eq = Qe[pair_q[b]]
            pos = torch.from_numpy(pair_t[b])
            ng = torch.from_numpy(neg[b])
            f_pos = model.relevance_head(eq, T[pos])
            k = ng.shape[1]
            f_neg = model.relevance_head(eq.repeat_interleave(k, 0), T[ng.reshape(-1)]).view(-1, k)
            l_rel = torch.relu(cfg.margin - f_pos[:, None] + f_neg).mean()
            tools = torch.unique(torch.cat([pos, ng.reshape(-1)]))
            tools = tools[lab_t[tools]]
            if len(tools):
                w = tool_weight[tools]
                l_risk = (w * (model.risk_head(T[tools]) - target[tools]) ** 2).sum() / w.sum()
            else:
                l_risk = torch.zeros(())
            loss = l_rel + cfg.mu * l_risk
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach())
            nb += 1
        row = {"epoch": epoch, "loss": tot / max(nb, 1)}
        if has_val:
            row["val_ndcg@5"] = _val_ndcg(model, tool_emb, val_query_emb, val_gold)
            if cfg.early_stopping and row["val_ndcg@5"] > best_val:
                best_val, best_epoch, best_state = row["val_ndcg@5"], epoch, copy.deepcopy(model.relevance_head.state_dict())
        history.append(row)
        bar.set_postfix({k: f"{v:.4f}" for k, v in row.items() if k != "epoch"})
    if best_state is not None:
        # Early stopping picks the relevance head's epoch; the risk head keeps training to the
        # end (its loss does not depend on the queries, so validation NDCG says nothing of it).
        model.relevance_head.load_state_dict(best_state)

    validation: dict[str, Any] = {"n_queries": len(val_gold) if has_val else 0, "best_epoch": best_epoch}
    lam = 0.1
    if has_val:
        if choose:
            lam = choose_inference(val_query_emb, val_gold, tool_emb, risk_levels, cfg, model=model, record=validation)["lam"]
    else:
        notes.append("no validation queries: lambda defaults to the paper's 0.1, no early stopping")
    model.eval()
    counts = {
        "train_queries": len(gold), "val_queries": validation["n_queries"], "positive_pairs": len(pair_q),
        "skipped_queries": n_skipped, "unlabelled_tools": n_unlabelled,
    }
    return TrainResult(model, cfg, float(lam), history, validation, counts, time.perf_counter() - t0, notes)


# -- the whole fit -------------------------------------------------------------------------------
def fit(
    tool_emb: np.ndarray, query_emb: np.ndarray, gold: Sequence[np.ndarray], registry: ToolRegistry, cfg: TrainConfig,
    graph_config: GraphConfig | None = None, *, alpha_grid: Sequence[float] = DEFAULT_ALPHA_GRID,
    normalisations: Sequence[str] = NORMALISATIONS, progress: bool = True,
) -> tuple[TrainResult, ToolGraph, dict[str, Any]]:
    """Heads, ToolGraph and every validation choice on precomputed embeddings: the queries
    are split by query (:func:`validation_split`), the heads train on the training part
    (early-stopped on the validation part), the graph is built from the training part's gold
    tools only, and :func:`choose_inference` makes every choice on the validation part.

    Returns (the heads with their lambda, the graph, {"alpha", "normalisation"})."""
    cfg = cfg.resolved()
    graph_config = graph_config or GraphConfig()
    t0 = time.perf_counter()
    gold = [np.asarray(g, dtype=np.int64) for g in gold]
    tr, va = validation_split(len(gold), cfg)
    result = train_heads(
        tool_emb, query_emb[tr], [gold[i] for i in tr], registry.risk_levels, cfg,
        val_query_emb=query_emb[va] if len(va) else None, val_gold=[gold[i] for i in va] if len(va) else None,
        progress=progress, choose=False,
    )
    graph = ToolGraph.build(tool_emb, [gold[i] for i in tr], registry.risk_levels, registry.permissions, graph_config)
    choice: dict[str, Any] = {"alpha": 0.1, "normalisation": graph_config.normalisation}
    if len(va):
        chosen = choose_inference(query_emb[va], [gold[i] for i in va], tool_emb, registry.risk_levels, cfg,
                                  model=result.model, graph=graph, alpha_grid=alpha_grid, normalisations=normalisations,
                                  record=result.validation)
        result.lam = chosen["lam"]
        choice = {"alpha": chosen["alpha"], "normalisation": chosen["normalisation"]}
    result.validation["graph_choice"] = choice
    result.seconds = time.perf_counter() - t0
    return result, graph, choice


def validation_split(n_queries: int, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The validation split every fit of ``cfg`` uses: ``cfg.val_fraction`` of the queries,
    by query, seeded by ``cfg.seed`` (:func:`split_validation`)."""
    return split_validation(n_queries, cfg.val_fraction, cfg.seed)


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


# -- cross-fitted risk levels ------------------------------------------------------------------
def crossfit_risk_levels(
    registry: ToolRegistry, query_texts: Sequence[str], gold: Sequence[np.ndarray], *, encoder: Any = None,
    n_folds: int = 5, seed: int = 42, config: Any = None, progress: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levels from the learned risk head, cross-fitted over tools: the tools are cut into
    ``n_folds`` folds; for each fold the dual head is trained on the training queries with
    that fold's labels hidden (level 0: excluded from L_risk), and scores the fold's tools.
    Returns (levels [N], f_risk [N], fold per tool)."""
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
        f_risk[held] = HeadScorer(res.model, tool_emb[held]).f_risk
    return level_from_score(f_risk), f_risk, folds


# -- training data ------------------------------------------------------------------------------
def gold_fingerprint(texts: list[str], gold: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for t, g in zip(texts, gold, strict=True):
        h.update(t.encode())
        h.update(np.asarray(g, dtype=np.int64).tobytes())
    return h.hexdigest()
