"""Plain, obviously-correct versions of riskrank's fast stages: the references the equality
tests hold the fast paths to, and the "naive" column of benchmarks/bench_scale.py (the
reference implementation's way of doing each stage: no factorisation, dense matrices, every
pair visited). One module, shared by tests and benchmarks, so a fast path and its benchmark
are measured against the same thing.

- heads: the relevance head on every concatenated pair [e_q; e_t] (O(N * 2d * hidden) per
  query), the risk heads on every tool (paper Eq. 6);
- lexical evidence: every tool name scanned for every task (the exact name with its word
  bounds as a regex, the shared words counted one name at a time), BM25 from bm25s's own
  ``get_scores``;
- graph: Appendix B's edge weights one pair at a time, the three normalisations cell by cell,
  Eq. 9's smoothing as a dense product;
- rules: Appendix C.2's scan as written, over a ranking.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import torch

from riskrank.first_stage import BM25Retriever, lexical_text, task_words, words
from riskrank.graph import GraphConfig, ToolGraph
from riskrank.rules import UNKNOWN_RISK_AS, RuleConfig
from riskrank.training.modules import DualHead


# -- heads --------------------------------------------------------------------------------------
def head_scores(model: DualHead, query_emb: np.ndarray, tool_emb: np.ndarray, lam: float, inputs=None) -> np.ndarray:
    """s = f_rel - lambda * f_risk (the paper's penalty) or logit - lambda * p_risky [Q, N],
    running the heads on every (q, t) pair; ``inputs`` (f0 and the lexical features over
    the full pool) for a hybrid head."""
    model = model.eval()
    q = torch.from_numpy(np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32))
    t = torch.from_numpy(np.ascontiguousarray(tool_emb, dtype=np.float32))
    out = np.empty((q.shape[0], t.shape[0]), dtype=np.float32)
    with torch.no_grad():
        penalty = model.penalty_scores(t)
        for i in range(q.shape[0]):
            f0 = x = None
            if inputs is not None and model.lexical:
                f0 = torch.from_numpy(np.asarray(inputs.f0[i], dtype=np.float32))
                x = torch.from_numpy(np.stack([a[i] for a in inputs.x], axis=-1).astype(np.float32))
            z = model.relevance_head.logit(q[i].expand(t.shape[0], -1), t, f0, x)
            rel = z if model.penalty == "p_risky" else torch.sigmoid(z)
            out[i] = (rel - lam * penalty).numpy()
    return out


# -- lexical evidence -----------------------------------------------------------------------------
def lexical_evidence(texts, names, descriptions, parameters) -> dict[str, np.ndarray]:
    """BM25 and the four name features [Q, N] (first_stage.LEXICAL_FEATURES), every name
    visited for every task."""
    n = len(names)
    name_words = [words(nm) for nm in names]
    param_words = [list(dict.fromkeys(w for p in ps for w in words(p))) for ps in parameters]
    df: dict[str, int] = {}
    for ws in name_words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log1p(n / c) for w, c in df.items()}
    bm = BM25Retriever([lexical_text(a, b, c) for a, b, c in zip(names, descriptions, parameters, strict=True)])
    out = {k: np.zeros((len(texts), n), np.float32) for k in ("bm25", "ex", "fr", "fri", "frp")}
    for qi, task in enumerate(texts):
        tw, low = task_words(task), task.lower()
        toks = [t for t in re.findall(r"(?u)\b\w\w+\b", bm._prep(task).lower()) if t in bm.vocab]
        if toks and bm.model is not None:
            out["bm25"][qi] = bm.model.get_scores(toks)
        for i in range(n):
            nm = names[i].lower()
            if len(nm) >= 3 and re.search(r"(?<![a-z0-9_])" + re.escape(nm) + r"(?![a-z0-9_])", low):
                out["ex"][qi, i] = 1.0
            ws = name_words[i]
            if ws:
                out["fr"][qi, i] = sum(w in tw for w in ws) / len(ws)
                out["fri"][qi, i] = sum(idf[w] for w in ws if w in tw) / sum(idf[w] for w in ws)
            if param_words[i]:
                out["frp"][qi, i] = sum(w in tw for w in param_words[i]) / len(param_words[i])
    return out


# -- graph --------------------------------------------------------------------------------------
def graph_weights(emb, gold, risk, perms, cfg: GraphConfig) -> np.ndarray:
    """Appendix B, Table 10, one pair at a time; Eq. 8's normalisation by the largest pair."""
    n = len(emb)
    sets = [set(map(int, g)) for g in gold]
    c = np.zeros((n, n))
    for i, j in itertools.permutations(range(n), 2):
        c[i, j] = sum(1 for g in sets if i in g and j in g)
    c_max = c.max()
    raw = np.zeros((n, n))
    for i, j in itertools.permutations(range(n), 2):
        w = 0.0
        if "co" in cfg.edge_types and c[i, j] >= cfg.min_cooccur:
            w += cfg.co_weight * c[i, j] / c_max
        cos = float(np.dot(emb[i], emb[j]))
        if "sem" in cfg.edge_types and cos > cfg.sem_threshold:
            w += cfg.sem_weight * cos
        if "perm" in cfg.edge_types:
            w += cfg.perm_weight * int(np.sum(perms[i] & perms[j])) / 5
        if (
            "risk" in cfg.edge_types
            and risk[i] >= cfg.risky_level
            and risk[j] >= cfg.risky_level
            and c[i, j] >= 1
        ):
            w += cfg.risk_weight
        raw[i, j] = w
    return raw / raw.max() if raw.max() > 0 else raw


def normalise(W: np.ndarray, norm: str) -> np.ndarray:
    """Â cell by cell: ``row`` (an isolated tool keeps itself), ``sym`` (D^-1/2 W D^-1/2, the
    reference's), ``sym_self`` (with self loops)."""
    n = len(W)
    d = W.sum(axis=1)
    A = np.zeros((n, n))
    for i, j in itertools.product(range(n), range(n)):
        if norm == "row":
            A[i, j] = W[i, j] / d[i] if d[i] > 0 else float(i == j)
        elif norm == "sym":
            A[i, j] = W[i, j] / np.sqrt(d[i] * d[j]) if d[i] > 0 and d[j] > 0 else 0.0
        else:
            A[i, j] = (W[i, j] + (i == j)) / np.sqrt((d[i] + 1) * (d[j] + 1))
    return A


def dense_adjacency(graph: ToolGraph, normalisation: str) -> np.ndarray:
    """Â of a built graph as a dense float32 N x N matrix (the reference keeps it this way)."""
    return graph.dense_adjacency(normalisation).astype(np.float32)


def smooth(scores: np.ndarray, adjacency: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 9 with a dense Â, for one query [N] or many [Q, N]: s' = (s + (1 - alpha) s + alpha s Â^T) / 2."""
    h1 = (1.0 - alpha) * scores + alpha * (scores @ adjacency.T)
    return (scores + h1) / 2.0


# -- rules --------------------------------------------------------------------------------------
def rule_filter(ranking, cfg: RuleConfig, risk, perm, emb, *, scan_all: bool = False) -> tuple[list[int], list[int], list[int]]:
    """Appendix C.2 as written: S, D; scan in order; stop at |S| = K; fill from D (under
    ``cfg.fill``: all of D for ``deferred``, its tools below the risky level that keep the
    permission cap for ``safe``, nothing for ``none``); the rest of the list in reranked order.
    Unknown risk (0) counts as r = 5. Returns (order, S, D).

    ``scan_all``: keep visiting every position after K tools are accepted, checking every
    constraint (the reference implementation's way, for the benchmark's timing); the order is
    the same."""
    def level(t: int) -> int:
        return UNKNOWN_RISK_AS if risk[t] == 0 else risk[t]

    S: list[int] = []
    D: list[int] = []
    for t in ranking:
        if len(S) == cfg.k and not scan_all:
            break
        ok = True
        if cfg.max_risky is not None and level(t) >= cfg.risky_level:
            ok &= sum(1 for s in S if level(s) >= cfg.risky_level) < cfg.max_risky
        if cfg.max_broad is not None and perm[t] >= cfg.broad_min_perms:
            ok &= sum(1 for s in S if perm[s] >= cfg.broad_min_perms) < cfg.max_broad
        if cfg.redundancy_threshold is not None:
            ok &= all(float(np.dot(emb[t], emb[s])) <= cfg.redundancy_threshold for s in S)
        (S if ok and len(S) < cfg.k else D).append(int(t))
    room = max(0, cfg.k - len(S))
    if cfg.fill == "deferred":  # step 4 as written: fill from D
        fill = D[:room]
    elif cfg.fill == "none":
        fill = []
    else:  # safe: below the risky level, and the permission cap holds for the whole list
        fill = []
        for t in D:
            broad = sum(1 for s in S + fill if perm[s] >= cfg.broad_min_perms)
            if len(fill) < room and level(t) < cfg.risky_level and not (
                    cfg.max_broad is not None and perm[t] >= cfg.broad_min_perms and broad >= cfg.max_broad):
                fill.append(t)
    top = S + fill
    placed = set(top)
    return top + [int(t) for t in ranking if t not in placed], S, D


def context_policy(need_scores, hold_scores, rel, risky, need, tau, margin, k):
    """The context stage as written, one task at a time: below the threshold the task is
    ranked by its hold-back scores; at or above it by its need scores, and its most relevant
    risky tool is admitted when its relevance trails the best safe tool's by at most
    ``margin`` (None: always), and then ranks at least k-th. Returns (ranking [L], admitted or -1)."""
    needs = need >= tau
    scores = np.asarray(need_scores if needs else hold_scores, dtype=np.float64)
    order = sorted(range(len(scores)), key=lambda t: (-scores[t], t))
    risky_tools = [t for t in range(len(scores)) if risky[t]]
    safe_tools = [t for t in range(len(scores)) if not risky[t]]
    admitted = -1
    if needs and risky_tools:
        best_r = max(risky_tools, key=lambda t: (rel[t], -t))
        best_s = max(safe_tools, key=lambda t: (rel[t], -t)) if safe_tools else None
        if margin is None or best_s is None or rel[best_r] - rel[best_s] >= -margin:
            admitted = best_r
    if admitted >= 0 and order.index(admitted) >= k:
        order.remove(admitted)
        order.insert(k - 1, admitted)
    return order, admitted
