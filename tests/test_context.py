"""The context stage: the policy against its plain version, the need head in the checkpoint,
the modes on every surface, and the bad input the issue names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from naive import context_policy
from riskrank.context import NeedHead, apply_context, candidate_features
from riskrank.errors import CheckpointError, RiskrankError
from riskrank.first_stage import rank
from riskrank.modes import CONTEXT_MODES, MODES, parse_mode
from riskrank.risk import RISKY_LEVEL
from riskrank.rules import RuleConfig, RuleFilter


@pytest.mark.parametrize("seed", range(6))
def test_apply_context_equals_the_plain_policy(seed):
    rng = np.random.default_rng(seed)
    q, n, k = 7, 40, 5
    rel = rng.normal(size=(q, n)).astype(np.float32)
    p = rng.random(n).astype(np.float32)
    risky = p > 0.7
    need = rng.random(q).astype(np.float32)
    for tau, margin in ((0.5, 1.0), (0.3, None), (0.9, 0.0), (0.4, -1.0)):
        need_scores, hold_scores = rel - 0.5 * p, rel - 4.0 * p
        final, dec = apply_context(need_scores, hold_scores, rel, risky, need, tau, margin, k, 0.5, 4.0)
        for i in range(q):
            want, admitted = context_policy(need_scores[i], hold_scores[i], rel[i], risky, need[i], tau, margin, k)
            assert int(dec.admitted[i]) == admitted
            assert rank(final[i : i + 1])[0].tolist() == want
            assert dec.risk_cap[i] == (k if need[i] >= tau else 0)  # no cap without the rule filter's
            assert dec.lam[i] == (0.5 if need[i] >= tau else 4.0)


def test_the_penalty_and_the_cap_follow_the_need():
    rel = np.array([[3.0, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0]], np.float32)
    p = np.array([1.0, 1.0, 0, 0, 0, 0, 0], np.float32)
    risky = p > 0.5
    final, dec = apply_context(rel, rel - 8 * p, rel, risky, np.array([0.1]), 0.5, 1.0, 3, 0.0, 8.0)
    assert rank(final)[0, :3].tolist() == [2, 3, 4]
    assert dec.risk_cap.tolist() == [0] and "does not need" in dec.why(0, False)
    final, dec = apply_context(rel - 8 * p, rel - 8 * p, rel, risky, np.array([0.9]), 0.5, 1.0, 3, 8.0, 8.0)
    assert rank(final)[0, :3].tolist() == [2, 3, 0] and dec.admitted.tolist() == [0]  # a slot for the admitted tool
    assert "admitted" in dec.why(0, True)
    # With the rule filter, the cap of a task that needs a risky tool is the validated one.
    two = np.vstack([rel, rel])
    _, dec = apply_context(two, two, two, risky, np.array([0.9, 0.1]), 0.5, None, 3, 0.0, 0.0, cap_need=2)
    assert dec.risk_cap.tolist() == [2, 0] and "risk cap 2" in dec.why(0, True) and dec.take(1)["risk_cap"] == 0
    # The rule filter reads the per-task cap: 0 defers every risky tool.
    rf = RuleFilter(RuleConfig(k=3, redundancy_threshold=None, fill="safe"), np.array([4, 4, 1, 1, 1, 1, 1]), np.zeros(7, int))
    order, res = rf.filter_scores(rel, length=3, max_risky=np.array([0]))
    assert order[0].tolist() == [2, 3, 4] and set(res[0].deferred) == {0, 1}


def test_candidate_features_read_the_first_stage_top():
    first = np.array([[0.9, 0.1, 0.8, 0.0]], np.float32)
    risk = np.array([0.2, 1.0, 0.6, 0.0], np.float32)
    f = candidate_features(first, risk)
    assert f.shape == (1, 5)
    assert f[0, 0] == pytest.approx(0.2) and f[0, 1] == pytest.approx(1.0) and f[0, 3] == pytest.approx(0.45)


def test_need_head_refuses_bad_weights():
    with pytest.raises(CheckpointError, match="features"):
        NeedHead(("magic",), np.zeros(2), 0.0, np.zeros(2), np.ones(2))
    with pytest.raises(CheckpointError, match="not finite"):
        NeedHead(("cand",), np.array([np.nan] * 5), 0.0, np.zeros(5), np.ones(5))


def test_modes_grammar():
    assert set(CONTEXT_MODES) <= set(MODES)
    st = parse_mode("core+graph+context+rule")
    assert st.context and st.rule and st.graph and st.heads and st.name == "core+graph+context+rule"
    with pytest.raises(RiskrankError, match="unknown mode"):
        parse_mode("dense+context")


# -- with a trained retriever (the demo, seconds) --------------------------------------------------
def _risky_exposed_without_reason(res) -> list[str]:
    return [t.name for t in res.tools if (t.risk_level or 0) >= RISKY_LEVEL and t.predicted_level and t.predicted_level >= RISKY_LEVEL
            and not t.context and not t.named]


def test_fit_trains_a_need_head_and_chooses_its_settings(demo_fitted):
    r = demo_fitted
    assert r.need_head is not None and r.need_head.info["val_auc"] is not None
    ctx = r.checkpoint.inference["context"]
    for m in CONTEXT_MODES:
        assert 0 <= ctx[m]["tau"] <= 1 and m in r.checkpoint.inference["pipelines"]
        assert ctx[m]["lam_need"] <= r.checkpoint.inference["pipelines"][m]["lam"]


@pytest.mark.parametrize("mode", CONTEXT_MODES)
def test_bad_input_mixed_negated_and_foreign_tasks(demo_fitted, mode):
    r = demo_fitted
    mixed = r.retrieve("read the config, then delete the cache", mode=mode)
    negated = r.retrieve("without deleting anything, list the files", mode=mode)
    foreign = r.retrieve("lösche alle temporären Dateien im Ordner", mode=mode)
    for res in (mixed, negated, foreign):
        assert 0.0 <= res.need <= 1.0 and res.context["threshold"] == r.context_settings(parse_mode(mode))["tau"]
        cap = res.context["risk_cap"]
        if not mode.endswith("+rule"):  # no rule filter, no cap: the penalty alone
            assert cap is None
        else:  # 0, or the validated cap of a task that needs a risky tool
            assert cap == 0 if not res.context["needs_risk"] else cap in (1, 2, 3)
        # Every predicted-risky tool shown says why (admitted, or shown by its score).
        assert not _risky_exposed_without_reason(res)
        for d in res.deferred:
            if "context" in d.reasons:
                assert d.context and "need" in d.context
        json.dumps(res.to_dict())
    # A task that mixes a safe and a risky need is one that needs risk; the negated one is not.
    assert mixed.context["needs_risk"] and mixed.need > negated.need
    assert not negated.context["needs_risk"]
    if mode.endswith("+rule"):  # risk cap 0
        assert not any((t.risk_level or 0) >= RISKY_LEVEL for t in negated.tools)


def test_checkpoint_round_trip_and_an_older_checkpoint(demo_fitted, demo, encoder, tmp_path):
    from riskrank.checkpoint import NEED_FILE, SIDECAR
    from riskrank.pipeline import RiskAwareRetriever

    path = demo_fitted.save(tmp_path / "ck")
    assert (path / NEED_FILE).is_file()
    r = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=path, progress=False)
    task = "delete the old log files"
    a = r.retrieve(task, mode="core+graph+context")
    b = demo_fitted.retrieve(task, mode="core+graph+context")
    assert a.need == pytest.approx(b.need, abs=1e-5) and [t.name for t in a.tools] == [t.name for t in b.tools]
    # An older checkpoint: no need head, no context settings (and no manifest entry).
    meta = json.loads((path / SIDECAR).read_text())
    meta.pop("need_head")
    meta["inference"].pop("context")
    meta["files"].pop(NEED_FILE)
    (path / NEED_FILE).unlink()
    (path / SIDECAR).write_text(json.dumps(meta))
    old = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match=r"needs a checkpoint with a need head; this checkpoint .* has none") as err:
        old.retrieve(task, mode="core+graph+context+rule")
    assert "\n" not in str(err.value)
    assert old.retrieve(task, mode="core+graph+rule").tools  # every other mode still works


def test_a_tampered_need_head_is_refused(demo_fitted, tmp_path):
    from riskrank.checkpoint import NEED_FILE, load_checkpoint

    path = demo_fitted.save(tmp_path / "ck")
    blob = bytearray((path / NEED_FILE).read_bytes())
    blob[-1] ^= 1
    (path / NEED_FILE).write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match=r"need\.safetensors: does not match"):
        load_checkpoint(path)


def test_the_runner_reports_need_and_the_context_methods(demo, encoder):
    from riskrank.evaluation.methods import parse_method

    spec = parse_method("core+graph+context+rule@lam=2")
    assert spec.context and spec.rule == "labels" and spec.lam == 2.0


def test_the_grid_metrics_equal_the_metrics_module():
    from riskrank.metrics import ndcg_at_k, needrisk_hit_at_k, safe_rvr_at_k
    from riskrank.training import top5_metrics

    rng = np.random.default_rng(0)
    n, q = 30, 25
    risk = rng.integers(1, 6, n)
    gold = [rng.choice(n, size=rng.integers(1, 4), replace=False) for _ in range(q)]
    order = np.stack([rng.permutation(n)[:5] for _ in range(q)])
    nd, sr, nh = top5_metrics(gold, risk, n)(order)
    assert np.allclose(nd, ndcg_at_k(order, gold))
    assert np.allclose(sr, safe_rvr_at_k(order, gold, risk), equal_nan=True)
    assert np.allclose(nh, needrisk_hit_at_k(order, gold, risk), equal_nan=True)
    assert np.isfinite(sr).any() and np.isfinite(nh).any()
