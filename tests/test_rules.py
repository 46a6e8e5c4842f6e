"""Rule filter (Section 4.5, Appendix C): hand-worked examples, properties, and agreement with
a plain transcription of Appendix C.2's pseudocode (tests/naive.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import naive
from riskrank.errors import RiskrankError
from riskrank.rules import FilterResult, RuleConfig, RuleFilter


def random_case(seed: int):
    """Tools drawn from a few exact directions, so redundant pairs have cosine 1 and others sit
    far from 0.9 (no rounding ties between the fast and the naive dot products)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    dirs = rng.normal(size=(int(rng.integers(1, 12)), 6))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    emb = dirs[rng.integers(0, len(dirs), n)].astype(np.float32)
    risk = rng.choice(6, size=n, p=[0.1, 0.35, 0.25, 0.15, 0.1, 0.05])
    perm = rng.choice(6, size=n, p=[0.5, 0.2, 0.15, 0.1, 0.03, 0.02])
    cfg = RuleConfig(
        k=int(rng.integers(1, 8)),
        max_risky=[None, 0, 1, 2][rng.integers(4)],
        max_broad=[None, 0, 1, 2][rng.integers(4)],
        broad_min_perms=int(rng.integers(1, 4)),
        redundancy_threshold=[None, 0.5, 0.9][rng.integers(3)],
        fill=["safe", "deferred", "none"][rng.integers(3)],
    )
    ranking = rng.permutation(n)[: int(rng.integers(0, n + 1))]
    return cfg, risk, perm, emb, ranking


def make_filter(cfg, risk, perm, emb):
    return RuleFilter(cfg, risk, perm, emb if cfg.redundancy_threshold is not None else None)


SEEDS = st.integers(0, 2**32 - 1)


@settings(max_examples=300, deadline=None)
@given(seed=SEEDS)
def test_filter_agrees_with_naive_pseudocode(seed):
    cfg, risk, perm, emb, ranking = random_case(seed)
    res = make_filter(cfg, risk, perm, emb).filter(ranking)
    order, S, D = naive.rule_filter(ranking, cfg, risk, perm, emb)
    assert res.order.tolist() == order
    assert res.accepted == S
    assert list(res.deferred) == D
    assert res.n_scanned == len(S) + len(D)


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, q=st.integers(1, 6))
def test_filter_batch_agrees_with_filter_and_naive(seed, q):
    cfg, risk, perm, emb, _ = random_case(seed)
    rng = np.random.default_rng(seed + 1)
    n = len(risk)
    length = int(rng.integers(0, n + 1))
    rankings = np.stack([rng.permutation(n)[:length] for _ in range(q)])
    rf = make_filter(cfg, risk, perm, emb)
    orders, results = rf.filter_batch(rankings)
    assert orders.shape == rankings.shape
    for row, got, res in zip(rankings, orders, results, strict=True):
        assert got.tolist() == naive.rule_filter(row, cfg, risk, perm, emb)[0]
        single = rf.filter(row)
        assert single.order.tolist() == res.order.tolist() == got.tolist()
        assert (single.accepted, single.deferred, single.fallback) == (res.accepted, res.deferred, res.fallback)


@settings(max_examples=200, deadline=None)
@given(seed=SEEDS)
def test_properties(seed):
    cfg, risk, perm, emb, ranking = random_case(seed)
    res = make_filter(cfg, risk, perm, emb).filter(ranking)
    order = res.order.tolist()
    pos = {int(t): i for i, t in enumerate(ranking)}
    # A permutation of the input.
    assert sorted(order) == sorted(ranking.tolist())
    # Accepted tools keep their reranked order, then the fallback, in deferred order.
    assert [pos[t] for t in res.accepted] == sorted(pos[t] for t in res.accepted)
    deferred = list(res.deferred)
    assert [deferred.index(t) for t in res.fallback] == sorted(deferred.index(t) for t in res.fallback)
    if cfg.fill == "deferred":
        assert res.fallback == deferred[: len(res.fallback)]
    top = res.accepted + res.fallback
    assert order[: len(top)] == top and res.top_k.tolist() == top
    eff = np.where(risk == 0, 5, risk)
    if cfg.fill == "deferred":  # the paper's fill: always K (or the whole list)
        assert len(top) == min(cfg.k, len(ranking))
    elif cfg.fill == "none":
        assert res.fallback == []
    else:  # safe: a top-up is never risky and keeps the permission cap
        assert len(top) <= cfg.k
        assert all(eff[t] < cfg.risky_level for t in res.fallback)
        if cfg.max_broad is not None:
            assert sum(perm[t] >= cfg.broad_min_perms for t in top) <= max(
                cfg.max_broad, sum(perm[t] >= cfg.broad_min_perms for t in res.accepted))
    if cfg.fill != "deferred" and cfg.max_risky is not None:
        # Neither safe nor none exposes more risky tools than the cap.
        assert sum(eff[t] >= cfg.risky_level for t in top) <= cfg.max_risky
    # The rest follows in reranked order.
    rest = order[len(top):]
    assert rest == [t for t in ranking.tolist() if t not in set(top)]
    # Every deferred tool has a reason; redundancy names an accepted tool.
    assert all(res.deferred.values())
    for t, s in res.redundant_with.items():
        assert "redundancy" in res.deferred[t] and s in res.accepted
    # When K feasible tools exist, the top-K satisfies every constraint.
    if res.feasible:
        k_top = np.array(order[: cfg.k])
        if cfg.max_risky is not None:
            assert (eff[k_top] >= cfg.risky_level).sum() <= cfg.max_risky
        if cfg.max_broad is not None:
            assert (perm[k_top] >= cfg.broad_min_perms).sum() <= cfg.max_broad
        if cfg.redundancy_threshold is not None:
            sims = emb[k_top] @ emb[k_top].T
            assert (sims[np.triu_indices(len(k_top), 1)] <= cfg.redundancy_threshold).all()
        assert not res.fallback
    # Unlabelled tools met by the scan are reported.
    scanned = ranking[: res.n_scanned].tolist()
    assert res.unlabelled == [t for t in scanned if risk[t] == 0]


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS)
def test_unknown_risk_is_treated_as_high_risk(seed):
    cfg, risk, perm, emb, ranking = random_case(seed)
    a = make_filter(cfg, risk, perm, emb).filter(ranking)
    b = make_filter(cfg, np.where(risk == 0, 5, risk), perm, emb).filter(ranking)
    assert a.order.tolist() == b.order.tolist()
    assert a.deferred == b.deferred and b.unlabelled == []


def only_risk_cap(k=5, **kw):
    return RuleConfig(k=k, max_broad=None, redundancy_threshold=None, **kw)


def test_hand_worked_risk_cap():
    # r = [3, 4, 1, 2, 1, 1, 3], K = 5: tool 0 takes the single risky slot, 1 is deferred,
    # 2..5 fill the list and the scan stops before 6.
    rf = RuleFilter(only_risk_cap(), np.array([3, 4, 1, 2, 1, 1, 3]), np.zeros(7, int))
    res = rf.filter(np.arange(7))
    assert res.order.tolist() == [0, 2, 3, 4, 5, 1, 6]
    assert res.accepted == [0, 2, 3, 4, 5]
    assert res.deferred == {1: ("risk_cap",)}
    assert res.fallback == [] and res.n_scanned == 6 and res.feasible


def test_hand_worked_fallback():
    # r = [3, 4, 3, 1], K = 3: only tools 0 and 3 fit, so under the paper's fill deferred
    # tool 1 fills the last slot.
    rf = RuleFilter(only_risk_cap(k=3, fill="deferred"), np.array([3, 4, 3, 1]), np.zeros(4, int))
    res = rf.filter(np.array([0, 1, 2, 3]))
    assert res.order.tolist() == [0, 3, 1, 2]
    assert res.fallback == [1] and not res.feasible
    assert res.deferred == {1: ("risk_cap",), 2: ("risk_cap",)}
    assert res.top_k.tolist() == [0, 3, 1]


@pytest.mark.parametrize("fill", ["safe", "none"])
def test_no_risky_top_up(fill):
    # Five CRM tools, K = 3, one risky slot: lookup (L1), get (L1), update (L3), purge (L4),
    # export (L3). Only lookup, get and update fit; purge and export break the risk cap.
    # Neither policy tops up with them: the list is two tools plus the one risky slot.
    risk = np.array([1, 4, 1, 3, 3])
    rf = RuleFilter(only_risk_cap(k=4, fill=fill), risk, np.zeros(5, int))
    res = rf.filter(np.array([0, 1, 2, 3, 4]))
    assert res.accepted == [0, 1, 2] and res.fallback == []
    assert res.top_k.tolist() == [0, 1, 2] and res.n_exposed == 3
    assert res.order.tolist() == [0, 1, 2, 3, 4]
    # The paper's fill would have exposed the second risky tool.
    paper = RuleFilter(only_risk_cap(k=4, fill="deferred"), risk, np.zeros(5, int)).filter(np.arange(5))
    assert paper.top_k.tolist() == [0, 1, 2, 3]


def test_safe_fill_relaxes_only_redundancy():
    # Tool 1 duplicates tool 0 (low risk): safe tops up with it; tool 2 is risky and deferred
    # for the cap: never a top-up; tool 4 is a third broad tool: it would break the
    # permission cap, so it stays out too.
    risk = np.array([1, 1, 3, 4, 1, 1])
    perm = np.array([2, 0, 0, 0, 2, 2])
    emb = np.eye(6, dtype=np.float32)
    emb[1] = emb[0]
    rf = RuleFilter(RuleConfig(k=6, max_broad=1, fill="safe"), risk, perm, emb)
    res = rf.filter(np.arange(6))
    assert res.accepted == [0, 2]
    assert res.deferred == {1: ("redundancy",), 3: ("risk_cap",), 4: ("permission_cap",), 5: ("permission_cap",)}
    assert res.fallback == [1] and res.top_k.tolist() == [0, 2, 1]
    assert RuleFilter(RuleConfig(k=6, max_broad=1, fill="none"), risk, perm, emb).filter(np.arange(6)).top_k.tolist() == [0, 2]


def test_hand_worked_reranked_input_and_all_constraints():
    risk = np.array([1, 1, 3, 1, 1, 1, 4, 1])
    perm = np.array([2, 3, 0, 2, 0, 0, 0, 0])
    emb = np.eye(8, dtype=np.float32)
    emb[4], emb[3] = emb[0], emb[1]  # 4 duplicates 0, 3 duplicates 1
    rf = RuleFilter(RuleConfig(k=4), risk, perm, emb)
    res = rf.filter(np.array([2, 0, 6, 1, 4, 3, 5, 7]))
    # 2 takes the risky slot; 0 (broad) ok; 6 breaks the risk cap; 1 (broad) ok; 4 duplicates
    # 0; 3 would be a third broad tool and duplicates 1; 5 ok -> K = 4, 7 is never scanned.
    assert res.accepted == [2, 0, 1, 5]
    assert res.deferred == {6: ("risk_cap",), 4: ("redundancy",), 3: ("permission_cap", "redundancy")}
    assert res.redundant_with == {4: 0, 3: 1}
    assert res.n_scanned == 7 and res.fallback == []
    assert res.order.tolist() == [2, 0, 1, 5, 6, 4, 3, 7]


def test_unlabelled_tool_takes_the_risky_slot_and_is_reported():
    rf = RuleFilter(only_risk_cap(k=2), np.array([0, 3, 1]), np.zeros(3, int))
    res = rf.filter(np.array([0, 1, 2]))
    assert res.accepted == [0, 2] and res.deferred == {1: ("risk_cap",)}
    assert res.unlabelled == [0]


def test_all_constraints_disabled_is_identity():
    cfg = RuleConfig(max_risky=None, max_broad=None, redundancy_threshold=None)
    rf = RuleFilter(cfg, np.array([5, 5, 0, 4, 3, 5]), np.full(6, 5))
    r = np.array([5, 3, 1, 0, 2, 4])
    assert rf.filter(r).order.tolist() == r.tolist()


def test_batch_rest_is_vectorised_and_scan_stops_early():
    rng = np.random.default_rng(0)
    n = 5000
    risk = rng.choice([1, 2, 3, 4], size=n)
    perm = rng.choice(4, size=n)
    emb = rng.normal(size=(n, 16)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    rankings = np.stack([rng.permutation(n) for _ in range(200)])
    orders, results = RuleFilter(RuleConfig(), risk, perm, emb).filter_batch(rankings)
    assert max(r.n_scanned for r in results) < 100
    assert (np.sort(orders, axis=1) == np.arange(n)).all()
    for row, res in zip(rankings[:20], results[:20], strict=True):
        assert res.order.tolist() == naive.rule_filter(row, RuleConfig(), risk, perm, emb)[0]


def test_accepts_permission_matrix_and_validates():
    P = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
    rf = RuleFilter(RuleConfig(redundancy_threshold=None), np.array([1, 1]), P)
    assert rf.broad.tolist() == [True, False]
    with pytest.raises(RiskrankError, match="tool_emb"):
        RuleFilter(RuleConfig(), np.array([1, 1]), np.array([0, 0]))
    with pytest.raises(RiskrankError):
        RuleFilter(RuleConfig(redundancy_threshold=None), np.array([1, 7]), np.array([0, 0]))
    with pytest.raises(RiskrankError):
        rf.filter(np.array([0, 2]))
    with pytest.raises(RiskrankError):
        RuleConfig(k=0)
    with pytest.raises(RiskrankError, match="fill"):
        RuleConfig(fill="sometimes")
    assert isinstance(rf.filter(np.array([1, 0])), FilterResult)


@pytest.mark.parametrize(("kw", "says"), [
    ({"max_risky": "1"}, "RuleConfig.max_risky must be an integer >= 0 or None, got '1'"),
    ({"k": 0}, "RuleConfig.k must be an integer >= 1"),
    ({"risky_level": 7}, "RuleConfig.risky_level must be an integer between 1 and 5"),
    ({"redundancy_threshold": 5}, "RuleConfig.redundancy_threshold must be a cosine in [0, 1] or None"),
    ({"fill": "bogus"}, "RuleConfig.fill must be one of"),
])
def test_rule_config_names_a_bad_setting(kw, says):
    """Each setting is checked where it is given (a threshold of 5 disabled the redundancy
    check without a word; a string failed later in a comparison)."""
    import re

    from riskrank.errors import RiskrankError

    with pytest.raises(RiskrankError, match=re.escape(says)):
        RuleConfig(**kw)
    assert RuleConfig(k=np.int64(3)).k == 3
