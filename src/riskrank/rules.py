"""The optional rule filter: a strict exposure policy applied after reranking (paper Section
4.5, Appendix C).

Greedy pass in reranked order (Appendix C.2): accept a tool if the top-K would still satisfy

- the risk cap        at most ``max_risky`` tools with ``r >= risky_level`` (Eq. 17),
- the permission cap  at most ``max_broad`` tools with ``perm >= broad_min_perms`` (Eq. 18),
- redundancy          cosine <= ``redundancy_threshold`` with every accepted tool (Eq. 19),

else defer it; stop once K tools are accepted. If fewer than K were accepted, the fill policy
says what tops the list up (``RuleConfig.fill``):

- ``safe`` (the default): deferred tools below the risky level, in reranked order, as long as
  the permission cap still holds; otherwise the list stays shorter than K. Only the redundancy
  rule is relaxed, so no top-up ever exposes a risky tool.
- ``deferred``: the paper's step 4, every deferred tool in reranked order until K, whatever it
  broke (kept for reproducing the paper: the experiments use it).
- ``none``: no top-up; only the accepted tools are exposed.

The exposed prefix is ``accepted`` then ``fallback``; the rest of the list follows in reranked
order, so MRR can be computed on the full filtered list.

Unknown risk (level 0) fails closed: an unaudited tool counts as r = 5 for the risk cap, and the
result names the unlabelled tools the scan met, so a deployment sees where its audit has gaps.
The filter reads audited labels by design (Section 4.5 assumes an audited registry); the core
reranker never does.

Cost: Python work is O(scanned * K) per query (the scan stops at K accepted, Appendix C.3);
the rest of the list is the input past the scanned prefix, copied by numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.first_stage import top_m
from riskrank.risk import RISKY_LEVEL

RISK_CAP = "risk_cap"
PERMISSION_CAP = "permission_cap"
REDUNDANCY = "redundancy"
#: Risk level an unlabelled tool (0) is treated as: fail closed.
UNKNOWN_RISK_AS = 5
#: What tops the list up when fewer than K tools meet every rule (module docstring).
FILL_POLICIES = ("safe", "deferred", "none")
#: The paper's fill (Appendix C.2 step 4), which the reproduction keeps.
PAPER_FILL = "deferred"


@dataclass(frozen=True)
class RuleConfig:
    """Appendix C.1's constraints; any of the three can be disabled with ``None``."""

    k: int = 5
    max_risky: int | None = 1
    risky_level: int = RISKY_LEVEL
    max_broad: int | None = 2
    broad_min_perms: int = 2
    redundancy_threshold: float | None = 0.9
    fill: str = "safe"

    def __post_init__(self) -> None:
        def integer(name: str, low: int, high: int | None = None, none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and none:
                return
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low or (high is not None and v > high):
                bound = f">= {low}" if high is None else f"between {low} and {high}"
                raise RiskrankError(f"RuleConfig.{name} must be an integer {bound}{' or None' if none else ''}, got {v!r}")

        integer("k", 1)
        if self.fill not in FILL_POLICIES:
            raise RiskrankError(f"RuleConfig.fill must be one of {', '.join(FILL_POLICIES)}, got {self.fill!r}")
        integer("max_risky", 0, none=True)
        integer("max_broad", 0, none=True)
        integer("risky_level", 1, 5)
        integer("broad_min_perms", 1)
        t = self.redundancy_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0):
            # a cosine above 1 never happens: a threshold of 5 would silently disable the check
            raise RiskrankError(f"RuleConfig.redundancy_threshold must be a cosine in [0, 1] or None, got {t!r}")


@dataclass
class FilterResult:
    """One query's filtered ranking and why it differs from the input.

    ``order`` is a permutation of the input ranking: ``accepted`` (reranked order), then
    ``fallback`` (the deferred tools the fill policy admitted, in deferred order, at most K in
    all), then every other tool in reranked order. Only ``accepted`` + ``fallback`` are
    exposed, which under the ``safe`` and ``none`` policies can be fewer than K. ``deferred`` maps each deferred tool, in scan order, to the constraints it
    broke; ``redundant_with`` names the accepted tool most similar to a redundant one."""

    order: np.ndarray
    k: int
    accepted: list[int] = field(default_factory=list)
    deferred: dict[int, tuple[str, ...]] = field(default_factory=dict)
    redundant_with: dict[int, int] = field(default_factory=dict)
    fallback: list[int] = field(default_factory=list)
    unlabelled: list[int] = field(default_factory=list)
    n_scanned: int = 0

    @property
    def n_exposed(self) -> int:
        """How many tools the filter exposes: the accepted ones and the admitted fallback."""
        return len(self.accepted) + len(self.fallback)

    @property
    def top_k(self) -> np.ndarray:
        """The tools exposed to the agent, at most K (Appendix C.2: only this prefix is
        evaluated; under the paper's fill it is the first K of ``order``)."""
        return self.order[: self.n_exposed]

    @property
    def feasible(self) -> bool:
        """True when K tools satisfied every constraint, i.e. no fallback was needed."""
        return len(self.accepted) == self.k


class RuleFilter:
    """The rule filter of Section 4.5 over a registry of N tools.

    ``risk_levels`` [N] audited levels 1..5, 0 = unknown; ``perm_counts`` [N] number of
    permission categories matched (a boolean [N, 5] permission matrix is also accepted);
    ``tool_emb`` [N, d] unit-norm embeddings, needed only for the redundancy constraint.
    """

    def __init__(
        self,
        config: RuleConfig | None = None,
        risk_levels: np.ndarray | None = None,
        perm_counts: np.ndarray | None = None,
        tool_emb: np.ndarray | None = None,
    ) -> None:
        self.config = config = config or RuleConfig()
        if risk_levels is None or perm_counts is None:
            raise RiskrankError("RuleFilter needs risk_levels and perm_counts")
        risk = np.asarray(risk_levels)
        if risk.ndim != 1:
            raise RiskrankError(f"risk_levels must be [N], got shape {risk.shape}")
        if risk.size and (risk.min() < 0 or risk.max() > 5):
            raise RiskrankError("risk levels must be 1..5, or 0 for unknown")
        n = risk.shape[0]
        perm = np.asarray(perm_counts)
        if perm.ndim == 2:
            perm = perm.astype(np.int64).sum(axis=1)
        if perm.shape != (n,):
            raise RiskrankError(f"perm_counts must have shape ({n},), got {perm.shape}")
        self.n_tools = n
        self.unlabelled = risk == 0
        effective = np.where(self.unlabelled, UNKNOWN_RISK_AS, risk)
        self.risky = effective >= config.risky_level
        self.broad = perm >= config.broad_min_perms
        self.emb: np.ndarray | None = None
        if config.redundancy_threshold is not None:
            if tool_emb is None:
                raise RiskrankError(
                    "the redundancy constraint needs tool_emb; pass embeddings or set "
                    "RuleConfig(redundancy_threshold=None)"
                )
            emb = np.ascontiguousarray(tool_emb, dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] != n:
                raise RiskrankError(f"tool_emb must be [{n}, d], got shape {emb.shape}")
            self.emb = emb

    def filter(self, ranking: np.ndarray) -> FilterResult:
        """Filter one reranked list [L] of tool indices (best first)."""
        ranking = np.asarray(ranking)
        if ranking.ndim != 1:
            raise RiskrankError(f"ranking must be [L], got shape {ranking.shape}")
        _, results = self.filter_batch(ranking[None, :])
        return results[0]

    def filter_batch(self, rankings: np.ndarray, max_risky: np.ndarray | None = None) -> tuple[np.ndarray, list[FilterResult]]:
        """Filter Q reranked lists [Q, L]; returns the filtered orders [Q, L] and one
        :class:`FilterResult` per query (whose ``order`` is a view of that row).
        ``max_risky`` [Q] replaces the configured risk cap per query (the context stage's
        per-task cap)."""
        rankings = np.asarray(rankings)
        if rankings.ndim != 2:
            raise RiskrankError(f"rankings must be [Q, L], got shape {rankings.shape}")
        if not np.issubdtype(rankings.dtype, np.integer):
            raise RiskrankError(f"rankings must hold integer tool indices, got {rankings.dtype}")
        if rankings.size and (rankings.min() < 0 or rankings.max() >= self.n_tools):
            raise RiskrankError(f"tool indices must be in [0, {self.n_tools})")
        q = rankings.shape[0]
        caps = [None] * q if max_risky is None else [int(c) for c in np.asarray(max_risky).reshape(q)]
        results = [self._scan(row, cap) for row, cap in zip(rankings, caps, strict=True)]
        # results[i].order temporarily holds the placed positions (accepted then fallback).
        # All of them lie in the scanned prefix, so every column past the longest scan is the
        # input unchanged: only a [Q, scanned] head is rearranged.
        n_placed = np.array([r.order.size for r in results], dtype=np.int64)
        width = max((r.n_scanned for r in results), default=0)
        rows = np.repeat(np.arange(q), n_placed)
        pos = np.concatenate([r.order for r in results]) if q else np.zeros(0, np.int64)
        placed = np.zeros((q, width), dtype=bool)
        placed[rows, pos] = True
        head = rankings[:, :width]
        new_head = np.empty_like(head)
        cols = np.arange(width)[None, :]
        # Row-major boolean indexing keeps each row's elements in order, and row q receives
        # exactly width - n_placed[q] of them: the unplaced tools, in reranked order.
        new_head[cols >= n_placed[:, None]] = head[~placed]
        new_head[cols < n_placed[:, None]] = rankings[rows, pos]
        orders = rankings.copy()
        orders[:, :width] = new_head
        for i, r in enumerate(results):
            r.order = orders[i]
        return orders, results

    def filter_scores(
        self, scores: np.ndarray, candidates: np.ndarray | None = None, *, length: int | None = None,
        max_risky: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[FilterResult]]:
        """The rule filter straight from scores, without sorting the pool: the first
        ``length`` (default K) positions of ``filter_batch(ranking)``, where ``ranking`` is the
        stable descending order of ``scores`` [Q, L] (over the full pool, or over per-query
        ``candidates`` [Q, L] of tool indices).

        Only a prefix of each ranking is selected (:func:`riskrank.first_stage.top_m`), and a
        row whose scan runs off the prefix before K tools are accepted is redone with a
        prefix four times longer, so the result equals the full sort's exactly. Returns the
        filtered orders [Q, length] and one :class:`FilterResult` per query (``order`` is the
        filtered prefix; accepted, deferred, fallback and reasons are those of the full list).
        ``max_risky`` [Q]: a risk cap per query, as in :meth:`filter_batch`.
        """
        scores = np.atleast_2d(np.asarray(scores))
        if scores.ndim != 2:
            raise RiskrankError(f"scores must be [Q, L], got shape {scores.shape}")
        width = scores.shape[1]
        if candidates is not None:
            candidates = np.atleast_2d(np.asarray(candidates))
            if candidates.shape != scores.shape:
                raise RiskrankError(f"candidates shape {candidates.shape} != scores shape {scores.shape}")
        length = self.config.k if length is None else int(length)
        if length < 1:
            raise RiskrankError(f"length must be >= 1, got {length}")
        length = min(length, width)
        # Appendix C.2's scan rarely reads past a few K; start there and grow when it does.
        prefix = min(width, max(length, 8 * self.config.k + 8))

        def ranking(rows: np.ndarray | slice, m: int) -> np.ndarray:
            local = top_m(scores[rows], m)
            return local if candidates is None else np.take_along_axis(candidates[rows], local, axis=1)

        caps = None if max_risky is None else np.asarray(max_risky).reshape(-1)
        orders, results = self.filter_batch(ranking(slice(None), prefix), caps)
        orders = orders[:, :length].copy()
        for i, res in enumerate(results):
            m = prefix
            while len(res.accepted) < self.config.k and res.n_scanned >= m and m < width:
                m = min(width, 4 * m)
                row_orders, (res,) = self.filter_batch(ranking(slice(i, i + 1), m), None if caps is None else caps[i : i + 1])
                orders[i] = row_orders[0, :length]
            results[i] = res
            res.order = orders[i]
        return orders, results

    def _scan(self, ranking: np.ndarray, cap: int | None = None) -> FilterResult:
        """Appendix C.2's greedy pass over the prefix it needs; placed positions go in
        ``order`` for :meth:`filter_batch` to assemble. ``cap`` replaces the risk cap."""
        cfg = self.config
        k = cfg.k
        max_risky = cfg.max_risky if cap is None else cap
        max_broad = cfg.max_broad
        thr = cfg.redundancy_threshold
        emb = self.emb
        res = FilterResult(order=np.zeros(0, np.int64), k=k)
        acc_pos: list[int] = []
        def_pos: list[int] = []
        acc_emb = np.empty((k, emb.shape[1]), np.float32) if emb is not None else None
        n_risky = n_broad = 0
        length = ranking.shape[0]
        start, step = 0, 4 * k + 4
        while start < length and len(acc_pos) < k:
            # Read flags a chunk at a time so no per-tool numpy indexing, and nothing past the
            # scanned prefix is touched.
            stop = min(length, start + step)
            step *= 2
            tools = ranking[start:stop]
            chunk = zip(
                tools.tolist(),
                self.risky[tools].tolist(),
                self.broad[tools].tolist(),
                self.unlabelled[tools].tolist(),
                strict=True,
            )
            for off, (t, risky, broad, unlabelled) in enumerate(chunk):
                if unlabelled:
                    res.unlabelled.append(t)
                why: list[str] = []
                if max_risky is not None and risky and n_risky >= max_risky:
                    why.append(RISK_CAP)
                if max_broad is not None and broad and n_broad >= max_broad:
                    why.append(PERMISSION_CAP)
                if acc_emb is not None and acc_pos:
                    sims = acc_emb[: len(acc_pos)] @ emb[t]
                    best = int(np.argmax(sims))
                    if sims[best] > thr:
                        why.append(REDUNDANCY)
                        res.redundant_with[t] = res.accepted[best]
                if why:
                    def_pos.append(start + off)
                    res.deferred[t] = tuple(why)
                    continue
                if acc_emb is not None:
                    acc_emb[len(acc_pos)] = emb[t]
                acc_pos.append(start + off)
                res.accepted.append(t)
                n_risky += risky
                n_broad += broad
                if len(acc_pos) == k:  # Appendix C.2 step 3: stop at |S| = K
                    res.n_scanned = start + off + 1
                    break
            else:
                res.n_scanned = stop
            start = stop
        fb_pos = self._fill(ranking, def_pos, k - len(acc_pos), n_broad)
        res.fallback = [int(ranking[p]) for p in fb_pos]
        res.order = np.asarray(acc_pos + fb_pos, dtype=np.int64)
        return res

    def _fill(self, ranking: np.ndarray, def_pos: list[int], room: int, n_broad: int) -> list[int]:
        """Positions of the deferred tools the fill policy admits (Appendix C.2 step 4 under
        ``deferred``), in deferred order, at most ``room``."""
        cfg = self.config
        if room <= 0 or cfg.fill == "none":
            return []
        if cfg.fill == "deferred":
            return def_pos[:room]
        picked: list[int] = []
        for p in def_pos:
            if len(picked) == room:
                break
            t = ranking[p]
            if self.risky[t]:
                continue
            if cfg.max_broad is not None and self.broad[t]:
                if n_broad >= cfg.max_broad:
                    continue
                n_broad += 1
            picked.append(p)
        return picked
