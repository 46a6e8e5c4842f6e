"""Training: bit-for-bit seeds on CPU, validation by query, bad inputs, the lambda rules on
hand-made rows, and safetensors checkpoints that refuse corrupt or mismatched files."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
import torch

from riskrank.checkpoint import SIDECAR, WEIGHTS, load_checkpoint, save_checkpoint
from riskrank.errors import CheckpointError, RiskrankError
from riskrank.heads import HeadScorer, as_weights
from riskrank.training import (
    TrainConfig,
    choose_lambda,
    lambda_curve,
    parse_selection,
    split_validation,
    train_heads,
)
from riskrank.training.relevance import _sample_negatives

FAST = {"epochs": 3, "batch_size": 16}
pytestmark = pytest.mark.usefixtures("torch_single_thread")


def train(data, **kw):
    tools, queries, gold, risk = data
    cfg = TrainConfig(**{**FAST, **kw})
    return train_heads(tools, queries, gold, risk, cfg, progress=False)


def states_equal(a, b) -> bool:
    """The same arrays under the same names (a training module or the loaded HeadWeights)."""
    sa, sb = as_weights(a).arrays, as_weights(b).arrays
    return sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)


# -- seeds -----------------------------------------------------------------------------------
@pytest.mark.parametrize("design", ["residual", "paper"])
def test_same_seed_is_bit_identical(make_synthetic, design):
    data = make_synthetic()
    a = train(data, design=design, seed=5)
    b = train(data, design=design, seed=5)
    assert states_equal(a.model, b.model)
    assert a.lam == b.lam
    assert json.dumps(a.history) == json.dumps(b.history)  # NaN-aware: the epoch-0 loss is NaN


def test_different_seeds_differ(make_synthetic):
    data = make_synthetic()
    a, b = train(data, seed=1), train(data, seed=2)
    assert not states_equal(a.model, b.model)


def test_negatives_never_hit_gold_and_are_seeded(make_synthetic):
    gold = make_synthetic(n_tools=12, n_queries=20)[2]
    pair_q = np.concatenate([np.full(len(g), i) for i, g in enumerate(gold)])
    for sampling in ("random", "mixed", "hard"):
        hard = np.tile(np.arange(12), (20, 1))  # a pool that includes gold on purpose ...
        for i, g in enumerate(gold):  # ... minus gold, -1 padded, as _hard_pool builds it
            keep = hard[i][~np.isin(hard[i], g)]
            hard[i] = -1
            hard[i, : len(keep)] = keep
        n1 = _sample_negatives(np.random.default_rng(3), pair_q, gold, hard, 12, 5, sampling)
        n2 = _sample_negatives(np.random.default_rng(3), pair_q, gold, hard, 12, 5, sampling)
        assert np.array_equal(n1, n2) and n1.shape == (len(pair_q), 5)
        assert not any(np.isin(n1[p], gold[q]).any() for p, q in enumerate(pair_q))


# -- validation split ---------------------------------------------------------------------------
def test_split_validation_is_by_query():
    tr, va = split_validation(50, 0.2, seed=42)
    assert len(va) == 10 and len(tr) == 40
    assert set(tr).isdisjoint(va) and sorted([*tr, *va]) == list(range(50))
    tr2, va2 = split_validation(50, 0.2, seed=42)
    assert np.array_equal(tr, tr2) and np.array_equal(va, va2)
    assert not np.array_equal(va, split_validation(50, 0.2, seed=43)[1])
    assert len(split_validation(50, 0.0, 1)[1]) == 0
    assert len(split_validation(12, 0.01, 1)[1]) == 1  # at least one validation query from 10 up


def test_training_holds_out_whole_queries(make_synthetic):
    tools, queries, gold, risk = make_synthetic(n_queries=50)
    res = train((tools, queries, gold, risk), seed=9)
    tr, va = split_validation(50, 0.2, 9)
    assert res.counts["train_queries"] == len(tr) and res.counts["val_queries"] == len(va) == 10
    # every positive pair of a training query, none of a validation query
    assert res.counts["positive_pairs"] == sum(len(gold[i]) for i in tr)
    assert res.validation["n_queries"] == 10 and "lam_grid" in res.validation
    assert res.lam in TrainConfig().resolved().lam_grid


def test_explicit_validation_set(make_synthetic):
    tools, queries, gold, risk = make_synthetic(n_queries=40)
    cfg = TrainConfig(**FAST)
    res = train_heads(tools, queries[:30], gold[:30], risk, cfg, val_query_emb=queries[30:], val_gold=gold[30:], progress=False)
    assert res.counts["train_queries"] == 30 and res.counts["val_queries"] == 10


def test_no_validation_uses_the_paper_lambda(make_synthetic):
    res = train(make_synthetic(), val_fraction=0.0)
    assert res.lam == 0.1 and res.validation["n_queries"] == 0
    assert any("no validation" in n for n in res.warnings)


# -- bad input ------------------------------------------------------------------------------------
def test_empty_training_split(make_synthetic):
    tools, queries, gold, risk = make_synthetic()
    empty = [np.array([], dtype=np.int64) for _ in gold]
    with pytest.raises(RiskrankError, match="training split is empty"):
        train_heads(tools, queries, empty, risk, TrainConfig(**FAST), progress=False)


def test_queries_without_gold_are_skipped_and_counted(make_synthetic):
    tools, queries, gold, risk = make_synthetic(n_queries=40)
    gold = [g if i % 4 else np.array([], dtype=np.int64) for i, g in enumerate(gold)]
    res = train_heads(tools, queries, gold, risk, TrainConfig(**FAST), progress=False)
    assert res.counts["skipped_queries"] == 10
    assert any("10 training queries have no gold tool" in n for n in res.warnings)


@pytest.mark.parametrize("which", ["tool", "query"])
def test_nan_embeddings(make_synthetic, which):
    tools, queries, gold, risk = make_synthetic()
    (tools if which == "tool" else queries)[3, 2] = np.nan
    with pytest.raises(RiskrankError, match=f"{which} embeddings contain NaN"):
        train_heads(tools, queries, gold, risk, TrainConfig(**FAST), progress=False)


def test_dimension_mismatch(make_synthetic):
    tools, queries, gold, risk = make_synthetic()
    with pytest.raises(RiskrankError, match="dimension"):
        train_heads(tools, queries[:, :8], gold, risk, TrainConfig(**FAST), progress=False)


def test_unlabelled_tools_are_warned_excluded_and_counted(make_synthetic):
    tools, queries, gold, _ = make_synthetic(n_tools=40, n_queries=60)
    unl = np.arange(20, 40)
    risk_unl = np.full(40, 5)
    risk_unl[unl] = 0
    risk_l1 = risk_unl.copy()
    risk_l1[unl] = 1
    kw = {"epochs": 25, "batch_size": 8, "risk_weighting": "none", "design": "paper", "sampling": "random"}
    with pytest.warns(UserWarning, match="20 tools have no risk label: excluded from the risk losses"):
        a = train((tools, queries, gold, risk_unl), **kw)
    assert a.counts["unlabelled_tools"] == 20
    b = train((tools, queries, gold, risk_l1), **kw)
    assert b.counts["unlabelled_tools"] == 0
    # Excluded: the risk head never sees a low target for them, so they stay far riskier
    # than when the same tools are labelled L1.
    fa, fb = HeadScorer(a.model, tools).f_risk, HeadScorer(b.model, tools).f_risk
    assert fa[unl].mean() > fb[unl].mean() + 0.1


def test_no_label_at_all(make_synthetic):
    tools, queries, gold, _ = make_synthetic()
    with pytest.warns(UserWarning), pytest.raises(RiskrankError, match="no tool in the registry has a risk label"):
        train_heads(tools, queries, gold, np.zeros(len(tools), dtype=int), TrainConfig(**FAST), progress=False)


@pytest.mark.parametrize(
    ("kw", "pattern"),
    [
        ({"design": "mlp"}, "unknown head design"),
        ({"sampling": "smart"}, "unknown negative sampling"),
        ({"selection": "best"}, "invalid lambda selection rule"),
        ({"selection": "budget:-1"}, "invalid lambda selection rule"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"negatives": 0}, "negatives must be positive"),
        ({"lam_grid": (0.0, -0.1)}, "lambda values must be >= 0"),
        ({"tolerance": 2.0}, "tolerance"),
        ({"relevance": "sparse"}, "unknown relevance"),
        ({"penalty": "cubic"}, "unknown risk penalty"),
        ({"design": "paper", "penalty": "p_risky"}, "paper design keeps"),
        ({"design": "paper", "relevance": "hybrid"}, "paper design reads"),
        ({"rule_selection": "budget"}, "invalid lambda selection rule"),
        ({"rule_fill": "all"}, "unknown fill policy"),
        ({"candidate_pipelines": (0,)}, "candidate_pipelines"),
    ],
)
def test_bad_config(kw, pattern):
    with pytest.raises(RiskrankError, match=pattern):
        TrainConfig(**kw).resolved()


def test_design_defaults():
    r, p = TrainConfig().resolved(has_lexical=True), TrainConfig(design="paper").resolved(has_lexical=True)
    assert (r.sampling, r.early_stopping, r.risk_weighting, r.negatives) == ("hard", True, "balanced", 10)
    assert (r.relevance, r.penalty, r.lam_grid[-1], r.lexical_lr) == ("hybrid", "p_risky", 8.0, 0.1)
    assert (p.sampling, p.early_stopping, p.risk_weighting, p.negatives) == ("hard", False, "none", 5)
    assert (p.relevance, p.penalty, p.lam_grid[-1]) == ("dense", "paper", 2.0)
    assert (p.margin, p.mu, p.lr, p.batch_size, p.epochs) == (0.1, 0.5, 1e-3, 64, 10)
    # without texts (embeddings only) the residual head reads the cosine only
    assert TrainConfig().resolved().relevance == "dense"
    assert (r.selection, r.rule_selection) == ("budget:0.65", "budget:0.4")


# -- lambda rules ----------------------------------------------------------------------------------
ROWS = [
    {"lam": 0.0, "ndcg@5": 0.60, "rvr@5": 0.20},
    {"lam": 0.1, "ndcg@5": 0.58, "rvr@5": 0.15},
    {"lam": 0.2, "ndcg@5": 0.50, "rvr@5": 0.10},
    {"lam": 0.5, "ndcg@5": 0.30, "rvr@5": 0.05},
]


def test_parse_selection():
    assert parse_selection("budget:0.75") == ("budget", 0.75)
    assert parse_selection("ucb:0.4") == ("ucb", 0.4)
    assert parse_selection("utility:1") == ("utility", 1.0)
    for bad in ("budget", "utility:x", "max:1", "budget:nan"):
        with pytest.raises(RiskrankError):
            parse_selection(bad)


def test_budget_rule():
    # budget 0.75 x 0.2 = 0.15: lambdas 0.1, 0.2, 0.5 qualify; best NDCG among them is 0.1
    assert choose_lambda(ROWS, "budget:0.75", 0.2, tolerance=0.0) == 0.1
    # a looser budget admits lambda 0
    assert choose_lambda(ROWS, "budget:1.0", 0.2, tolerance=0.0) == 0.0
    # a tight one: only 0.5
    assert choose_lambda(ROWS, "budget:0.3", 0.2, tolerance=0.0) == 0.5
    # nobody meets it: the lowest RVR
    assert choose_lambda(ROWS, "budget:0.1", 0.2, tolerance=0.0) == 0.5
    assert choose_lambda(ROWS[:2], "budget:0.1", 0.2, tolerance=0.0) == 0.1


def test_utility_rule():
    # NDCG - 1 x RVR: 0.40, 0.43, 0.40, 0.25
    assert choose_lambda(ROWS, "utility:1", 0.2, tolerance=0.0) == 0.1
    # W = 0: plain NDCG
    assert choose_lambda(ROWS, "utility:0", 0.2, tolerance=0.0) == 0.0
    # W = 10: 0.4-2=-1.4, 0.58-1.5=-0.92, 0.5-1=-0.5, 0.3-0.5=-0.2
    assert choose_lambda(ROWS, "utility:10", 0.2, tolerance=0.0) == 0.5


def test_relative_tolerance_takes_the_largest_lambda_within_it():
    # NDCG 0.60 best; 0.58 is within 5% of it -> the more conservative 0.1
    assert choose_lambda(ROWS, "budget:1.0", 0.2, tolerance=0.05) == 0.1
    assert choose_lambda(ROWS, "budget:1.0", 0.2, tolerance=0.2) == 0.2


def test_exact_ties_go_to_the_larger_lambda():
    rows = [{"lam": lam, "ndcg@5": 0.5, "rvr@5": 0.1} for lam in (0.0, 0.05, 0.1)]
    assert choose_lambda(rows, "budget:1.0", 0.1) == 0.1  # 1se without per-query data: exact ties


def test_one_standard_error_rule():
    rng = np.random.default_rng(0)
    n = 40
    base = rng.random(n)
    rv = np.zeros(n)
    noise = rng.normal(scale=0.2, size=n)
    noisy = base - 0.01 + (noise - noise.mean())  # worse by exactly 0.01 on average, very noisy
    clear = base - 0.3  # worse on every query
    pq = {0.0: (base, rv), 0.1: (noisy, rv), 0.2: (clear, rv)}
    rows = [{"lam": lam, "ndcg@5": float(v[0].mean()), "rvr@5": 0.0} for lam, v in pq.items()]
    assert rows[1]["ndcg@5"] < rows[0]["ndcg@5"]
    se = np.std(noisy - base, ddof=1) / np.sqrt(n)
    assert rows[0]["ndcg@5"] - rows[1]["ndcg@5"] < se  # within one standard error
    assert choose_lambda(rows, "budget:1.0", 1.0, "1se", pq) == 0.1
    # without per-query values the same rows pick the best mean
    assert choose_lambda(rows, "budget:1.0", 1.0, "1se") == 0.0
    # a clearly worse lambda is never taken
    assert choose_lambda([rows[0], rows[2]], "budget:1.0", 1.0, "1se", {0.0: pq[0.0], 0.2: pq[0.2]}) == 0.0


def test_lambda_curve_hand_made():
    # two tools: 0 relevant but risky, 1 safe; lambda large enough flips the order
    rel = np.array([[0.9, 0.8] + [0.0] * 4], dtype=np.float32)
    risk = np.array([1.0, 0.0, 0, 0, 0, 0], dtype=np.float32)
    levels = np.array([5, 1, 1, 1, 1, 1])
    pq: dict = {}
    rows = lambda_curve(rel, risk, [np.array([0])], levels, (0.0, 0.2), pq)
    assert rows[0] == {"lam": 0.0, "ndcg@5": 1.0, "rvr@5": 0.2}
    assert rows[1]["ndcg@5"] == pytest.approx(1 / np.log2(3)) and rows[1]["rvr@5"] == pytest.approx(0.2)
    assert set(pq) == {0.0, 0.2}


# -- checkpoints -----------------------------------------------------------------------------------
ENC = {"identity": "toy-encoder@abc", "name": "toy", "dim": 16}


@pytest.fixture
def trained(make_synthetic, torch_single_thread):
    data = make_synthetic(seed=11)
    return data, train(data, seed=3)


def test_checkpoint_round_trip(tmp_path, trained):
    (tools, queries, _, _), res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="f" * 64,
                           training_data={"n_queries": 60}, inference={"alpha": 0.05})
    assert sorted(p.name for p in path.iterdir()) == sorted([WEIGHTS, SIDECAR])
    ck = load_checkpoint(path, encoder_identity=ENC["identity"], dim=16)
    assert states_equal(ck.model, res.model)
    assert ck.lam == res.lam and ck.encoder_identity == ENC["identity"]
    meta = json.loads((path / SIDECAR).read_text())
    assert meta["head"]["design"] == "residual" and meta["head"]["dim"] == 16
    assert meta["inference"]["alpha"] == 0.05 and meta["training_data"]["registry_fingerprint"] == "f" * 64
    assert meta["hyperparameters"]["seed"] == 3 and "validation" in meta and "riskrank_version" in meta
    a = HeadScorer(res.model, tools).scores(queries, 0.3)
    b = HeadScorer(ck.model, tools).scores(queries, 0.3)
    np.testing.assert_array_equal(a, b)


def test_checkpoint_is_safetensors_and_never_unpickled(tmp_path, trained, monkeypatch):
    _, res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="x")
    blob = (path / WEIGHTS).read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])  # safetensors: u64 header length, then a JSON header
    header = json.loads(blob[8 : 8 + n])
    assert "relevance_head.log_scale" in header and "risk_head.l1.weight" in header
    assert not blob.startswith(b"\x80") and b"PK\x03\x04" not in blob[:4]  # no pickle, no torch zip

    def forbidden(*a, **k):
        raise AssertionError("unpickling is forbidden")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    load_checkpoint(path)


def test_corrupt_weights(tmp_path, trained):
    _, res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="x")
    blob = bytearray((path / WEIGHTS).read_bytes())
    for i in (len(blob) // 2, len(blob) - 3):
        blob[i] ^= 0xFF
    (path / WEIGHTS).write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="do not match the sidecar's sha256"):
        load_checkpoint(path)


def test_truncated_weights_with_matching_hash_still_fail_cleanly(tmp_path, trained):
    """A sidecar edited to match garbage weights: safetensors refuses, as a CheckpointError."""
    import hashlib

    _, res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="x")
    garbage = (path / WEIGHTS).read_bytes()[:100]
    (path / WEIGHTS).write_bytes(garbage)
    meta = json.loads((path / SIDECAR).read_text())
    meta["weights_sha256"] = meta["files"][WEIGHTS] = hashlib.sha256(garbage).hexdigest()
    (path / SIDECAR).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="cannot load head weights"):
        load_checkpoint(path)


def test_missing_files(tmp_path, trained):
    _, res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="x")
    (path / SIDECAR).unlink()
    with pytest.raises(CheckpointError, match=f"missing {SIDECAR}"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_checkpoint(tmp_path / "nowhere")
    path2 = save_checkpoint(res, tmp_path / "ck2", encoder=ENC, registry_fingerprint="x")
    (path2 / WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match=f"missing {WEIGHTS}"):
        load_checkpoint(path2)


def test_corrupt_sidecar(tmp_path, trained):
    _, res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="x")
    (path / SIDECAR).write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt checkpoint sidecar"):
        load_checkpoint(path)
    (path / SIDECAR).write_text(json.dumps({"format": "other/9"}))
    with pytest.raises(CheckpointError, match="unknown format"):
        load_checkpoint(path)


def test_mismatched_encoder_and_dimension(tmp_path, trained):
    _, res = trained
    path = save_checkpoint(res, tmp_path / "ck", encoder=ENC, registry_fingerprint="x")
    with pytest.raises(CheckpointError, match=r"trained on encoder 'toy-encoder@abc', not 'other-model'"):
        load_checkpoint(path, encoder_identity="other-model")
    with pytest.raises(CheckpointError, match="expect 16-d embeddings but the encoder gives 384-d"):
        load_checkpoint(path, dim=384)


def test_save_refuses_a_file_target(tmp_path, trained):
    _, res = trained
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        save_checkpoint(res, f, encoder=ENC, registry_fingerprint="x")
    assert f.read_text() == "x"


# -- the ucb rule, the risk heads, the hybrid head ----------------------------------------------------
def test_ucb_budget_needs_the_upper_bound_to_fit():
    n = 20
    rv_noisy = np.zeros(n)
    rv_noisy[:2] = 1.0  # mean 0.1, but two risky queries only: a wide interval
    nd = np.full(n, 0.5)
    pq = {0.0: (nd + 0.1, rv_noisy), 1.0: (nd, np.zeros(n))}
    rows = [{"lam": lam, "ndcg@5": float(v[0].mean()), "rvr@5": float(v[1].mean())} for lam, v in pq.items()]
    assert choose_lambda(rows, "budget:1.0", 0.12, 0.0, pq) == 0.0  # 0.10 <= 0.12
    assert choose_lambda(rows, "ucb:1.0", 0.12, 0.0, pq) == 1.0  # 0.10 + SE > 0.12


def _risk_data(seed: int = 0, n: int = 200, dim: int = 12, learnable: bool = True):
    rng = np.random.default_rng(seed)
    T = rng.normal(size=(n, dim)).astype(np.float32)
    T /= np.linalg.norm(T, axis=1, keepdims=True)
    if learnable:
        levels = np.clip(np.digitize(T[:, 0], [-0.3, -0.1, 0.1, 0.3]) + 1, 1, 5)
    else:
        levels = rng.integers(1, 6, size=n)
    return T, levels.astype(np.int64)


def test_a_risk_head_that_learned_and_one_that_did_not():
    from riskrank.training import crossfit_risk, risk_quality, train_risk_head

    cfg = TrainConfig(seed=1, risk_epochs=10).resolved()
    for learnable in (True, False):
        T, levels = _risk_data(learnable=learnable)
        cf = crossfit_risk(T, levels, cfg)
        head = train_risk_head(T, levels, "levels", cfg)
        with torch.no_grad():
            score = head(torch.from_numpy(T)).numpy()
        q = risk_quality(levels, score, cf, cfg)
        if learnable:
            assert q["learned"] and q["heldout_auc"] > 0.8 and q["heldout_auc_p_risky"] > 0.8, q
        else:
            assert not q["learned"] and q["heldout_auc"] < 0.65 and "AUC" in q["reason"], q
    # a collapsed head (every prediction the same level) is flagged by its span
    flat = np.full(len(levels), 0.5, np.float32)
    q = risk_quality(levels, flat, {"level_score": np.random.default_rng(0).random(len(levels))}, cfg)
    assert not q["learned"] and "span" in q["reason"]


def test_crossfit_risk_hides_each_folds_labels(monkeypatch):
    import riskrank.training.risk as training

    T, levels = _risk_data(n=60)
    levels[:5] = 0  # unlabelled: scored by heads trained on every label
    seen = []
    real = training.train_risk_head

    def spy(tool_emb, lv, target, cfg, **kw):
        seen.append(np.asarray(lv).copy())
        return real(tool_emb, lv, target, cfg, **kw)

    monkeypatch.setattr(training, "train_risk_head", spy)
    cfg = TrainConfig(seed=2, risk_folds=3, risk_epochs=1, risk_min_steps=1).resolved()
    out = training.crossfit_risk(T, levels, cfg)
    fold = out["fold"]
    assert (fold[:5] == -1).all() and sorted(set(fold[5:].tolist())) == [0, 1, 2]
    assert len(seen) == 2 * 4  # two heads, three folds and the unlabelled group
    for f in range(3):
        for lv in seen[2 * f : 2 * f + 2]:
            assert (lv[fold == f] == 0).all() and (lv[(fold != f) & (fold >= 0)] == levels[(fold != f) & (fold >= 0)]).all()
    # stratified: every level is spread over the folds
    for lv in (1, 2, 3, 4, 5):
        assert len(set(fold[levels == lv].tolist())) == min(3, int((levels == lv).sum()))
    assert out["levels"].min() >= 1 and np.isfinite(out["level_score"]).all()


def test_hybrid_training_on_the_demo_starts_at_the_fusion(demo, encoder, torch_single_thread):
    from riskrank.first_stage import LEXICAL_FEATURES, LexicalIndex, relevance_inputs, top_m
    from riskrank.metrics import ndcg_at_k
    from riskrank.training import choose_fusion

    reg = demo.registry
    T = encoder.encode(reg.texts())
    Q = encoder.encode(demo.train.texts)
    lex = LexicalIndex.from_registry(reg).evidence(demo.train.texts)
    fusion = choose_fusion(Q @ T.T, lex, demo.train.gold)
    # An explicit validation split (the last 12 queries), so the fusion's own NDCG@5 on it is known.
    n = len(demo.train.gold) - 12
    Qv, gold_v = Q[n:], demo.train.gold[n:]
    lex_v = LexicalIndex.from_registry(reg).evidence(demo.train.texts[n:])
    res = train_heads(T, Q[:n], demo.train.gold[:n], reg.risk_levels, TrainConfig(seed=3, epochs=3),
                      lexical=LexicalIndex.from_registry(reg).evidence(demo.train.texts[:n]), fusion=fusion,
                      val_query_emb=Qv, val_gold=gold_v, val_lexical=lex_v, perm_counts=reg.perm_counts, progress=False)
    assert res.config.relevance == "hybrid" and res.model.lexical == LEXICAL_FEATURES and res.fusion == fusion
    hist = [h["val_ndcg@5"] for h in res.history]
    # Epoch 0 is the fusion itself (the residual starts at zero and the rest is monotone), and
    # early stopping keeps the best epoch, epoch 0 included.
    fused = relevance_inputs(Qv @ T.T, lex_v, fusion).f0
    assert res.history[0]["epoch"] == 0 and hist[0] == pytest.approx(float(ndcg_at_k(top_m(fused, 5), gold_v).mean()), abs=1e-9)
    assert res.validation["best_epoch"] == int(np.argmax(hist))
    assert set(res.validation["lexical_weights"]) == set(LEXICAL_FEATURES)
    assert {"core", "core+rule", "core+graph+rule", "core+graph+rule_pred"} <= set(res.validation["pipelines"])
    with pytest.raises(RiskrankError, match="lexical evidence"):
        train_heads(T, Q, demo.train.gold, reg.risk_levels, TrainConfig(seed=3, epochs=1, relevance="hybrid"), progress=False)


def test_risk_rows_measure_exposure_on_a_subset_of_the_validation_queries(trained):
    """``risk_rows``: RVR@5 of every lambda (and of the first stage) on the masked queries
    only, NDCG@5 on all; an all-true mask is no mask; ``utility`` cannot take one."""
    from riskrank.training import choose_inference

    (tools, queries, gold, risk), res = trained
    cfg = res.config

    def choose(rows=None):
        record: dict = {}
        chosen = choose_inference(queries, gold, tools, risk, cfg, model=res.model, record=record, risk_rows=rows)
        return chosen, record

    plain, rec_plain = choose()
    everyone, rec_all = choose(np.ones(len(gold), dtype=bool))
    assert plain["pipelines"] == everyone["pipelines"] and rec_plain["pipelines"] == rec_all["pipelines"]
    half = np.arange(len(gold)) < len(gold) // 2
    _, rec_half = choose(half)
    from riskrank.metrics import rvr_at_k

    cos = queries @ tools.T
    top = np.argsort(-cos, axis=1, kind="stable")[:, :5]
    assert rec_half["first_stage_rvr@5"] == pytest.approx(float(rvr_at_k(top, risk)[half].mean()))
    assert [r["ndcg@5"] for r in rec_half["pipelines"]["core"]] == [r["ndcg@5"] for r in rec_plain["pipelines"]["core"]]
    with pytest.raises(RiskrankError, match="cannot measure RVR on a subset"):
        choose_inference(queries, gold, tools, risk, TrainConfig(**{**FAST, "selection": "utility:1"}), model=res.model,
                         risk_rows=half)
