"""RiskAwareRetriever on the bundled demo registry: modes, bounds, clear errors without a
checkpoint, training on the demo, rule-mode deferrals, predicted risk, and top-M candidates
agreeing with the full pool."""

from __future__ import annotations

import re

import numpy as np
import pytest

from riskrank.encoder import ArrayEncoder
from riskrank.errors import CheckpointError, RiskrankError
from riskrank.first_stage import rank
from riskrank.modes import DENSE_MIN_SCORE, NO_MIN_SCORE, Stages, parse_mode
from riskrank.pipeline import RiskAwareRetriever
from riskrank.rules import PERMISSION_CAP, REDUNDANCY, RISK_CAP

RISKY_TASK = "Delete all the files in my home folder and run a shell script to wipe the logs."
TASKS = [
    "What's the weather going to be like in Lisbon this weekend?",
    "Wire $200 from my checking account to Alice.",
    RISKY_TASK,
]


# -- modes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "stages"),
    [
        ("dense", Stages(False, False, False)),
        ("dense+rule", Stages(False, False, True)),
        ("core", Stages(True, False, False)),
        ("core+rule", Stages(True, False, True)),
        ("core+graph", Stages(True, True, False)),
        ("core+graph+rule", Stages(True, True, True)),
        ("graph", Stages(True, True, False)),
        ("rule", Stages(True, True, True)),
        ("bm25", Stages(False, False, False, "bm25")),
        ("hybrid+rule", Stages(False, False, True, "hybrid")),
    ],
)
def test_parse_mode(mode, stages):
    assert parse_mode(mode) == stages
    assert parse_mode(stages.name) == stages


@pytest.mark.parametrize("mode", ["", "bm25+graph", "hybrid+graph", "dense+graph", "core+core", "rule+core", "core+graph+graph",
                                  "core+", "Core", "core+rule+graph", "sparse"])
def test_parse_mode_invalid(mode):
    with pytest.raises(RiskrankError, match="unknown mode"):
        parse_mode(mode)


# -- without a checkpoint ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def dense(encoder, demo, demo_tool_emb):
    return RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, progress=False,
                              mode="dense")


def test_dense_mode_without_checkpoint(dense, encoder, demo, demo_tool_emb):
    assert dense.mode == "dense" and dense.checkpoint is None
    # Without heads the library's default is the surfaces' one: the cosine under the rule filter.
    assert RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint="none", tool_emb=demo_tool_emb).mode == "dense+rule"
    res = dense.retrieve(TASKS[0], k=5)
    assert res.mode == "dense" and res.lam == 0.0 and len(res.tools) == 5
    cos = encoder.encode_query(TASKS[0]) @ demo_tool_emb.T
    expected = rank(cos)[0, :5]
    assert [t.index for t in res.tools] == expected.tolist()
    assert [t.rank for t in res.tools] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([t.score for t in res.tools], cos[expected], atol=1e-6)
    assert "weather" in res.tools[0].name
    for t in res.tools:
        tool = demo.registry[t.index]
        assert t.name == tool.name and t.risk_level == tool.risk_level and t.predicted_level is None
        assert t.permissions == sorted(tool.permissions)
    d = res.to_dict()
    assert d["mode"] == "dense" and len(d["tools"]) == 5 and d["deferred"] == []


def test_dense_rule_works_with_labels_only(dense, demo):
    res = dense.retrieve(RISKY_TASK, k=5, mode="dense+rule")
    levels = [demo.registry[t.index].risk_level for t in res.tools]
    assert res.mode == "dense+rule"
    # The demo registry holds far more than five compliant tools, so a fallback is never
    # needed here: none may appear, and the cap holds on the whole list.
    assert res.fallback == []
    assert sum(lv >= 3 for lv in levels) <= 1
    assert res.deferred and all(set(d.reasons) <= {RISK_CAP, PERMISSION_CAP, REDUNDANCY} for d in res.deferred)


@pytest.mark.parametrize("mode", ["core", "graph", "rule", "core+rule"])
def test_modes_needing_a_checkpoint(dense, mode):
    with pytest.raises(RiskrankError, match="needs a checkpoint"):
        dense.retrieve(TASKS[0], mode=mode)


def test_predicted_risk_needs_a_checkpoint(dense, encoder, demo, demo_tool_emb):
    with pytest.raises(RiskrankError, match="needs a checkpoint"):
        dense.retrieve(TASKS[0], mode="dense+rule", risk_source="predicted")
    with pytest.raises(RiskrankError, match="needs a checkpoint"):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, risk_source="predicted")
    with pytest.raises(RiskrankError, match="unknown risk source"):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, risk_source="gut")
    with pytest.raises(RiskrankError, match="unknown mode"):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, mode="fast")


def test_save_needs_a_fitted_retriever(dense, tmp_path):
    with pytest.raises(RiskrankError, match="fit"):
        dense.save(tmp_path / "ck")


def test_label_penalty_in_dense_mode(dense, demo):
    """dense with lambda > 0 is the risk-label-penalty baseline: cos - lambda (r - 1) / 4."""
    res = dense.retrieve(TASKS[2], k=10, lam=0.5)
    for t in res.tools:
        assert t.score == pytest.approx(t.f_rel - 0.5 * (demo.registry[t.index].risk_level - 1) / 4, abs=1e-6)
    assert all(a.score >= b.score for a, b in zip(res.tools, res.tools[1:], strict=False))


# -- bounds and bad input --------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, -1, 101, True, 2.5, "5", np.bool_(True), 101.0])
def test_k_bounds(dense, k):
    with pytest.raises(RiskrankError, match="k must be an integer between 1 and 100"):
        dense.retrieve(TASKS[0], k=k)


@pytest.mark.parametrize("k", [3, 3.0, np.int64(3), np.float32(3.0)])
def test_k_as_any_integral_number_the_servers_accept(dense, k):
    """7.0 is an integer to JSON (the HTTP API and find_tools read it so), and a numpy integer is one."""
    assert dense.retrieve(TASKS[0], k=k, min_score=NO_MIN_SCORE).k == 3


def test_numbers_and_tasks_of_the_wrong_type_are_named(dense, demo):
    for kw, what in (({"lam": "0.5"}, "lambda must be a number, got '0.5'"), ({"alpha": "0.1"}, "alpha must be a number"),
                     ({"lam": True}, "lambda must be a number, got True")):
        with pytest.raises(RiskrankError, match=what):
            dense.retrieve(TASKS[0], **kw)
    with pytest.raises(RiskrankError, match="tasks must be a list of task strings, got str"):
        dense.retrieve_many(TASKS[0])
    assert [r.task for r in dense.retrieve_many(iter(TASKS[:2]))] == TASKS[:2]  # an iterator: read once, all of it ranked
    for kw, what in (({"lam": -5}, "lambda must be a finite number >= 0"), ({"lam": float("nan")}, "lambda must be a finite"),
                     ({"alpha": 5}, r"alpha must be a number in \[0, 1\]"), ({"lam": "0.1"}, "lambda must be a number")):
        with pytest.raises(RiskrankError, match=what):  # the constructor's, as a call's
            RiskAwareRetriever(demo.registry, encoder=dense.encoder, checkpoint=None, tool_emb=dense.tool_emb, **kw)


@pytest.mark.parametrize("emb,what", [
    (np.zeros(8, dtype=np.float32), r"2-d \[tools, dim\] array, got shape \(8,\)"),
    ("nope", "numeric"),
])
def test_tool_embeddings_of_the_wrong_shape_are_named(demo, encoder, emb, what):
    with pytest.raises(RiskrankError, match=what):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=emb, progress=False)


def test_tool_embeddings_with_nan_are_refused_not_ranked(demo, encoder):
    emb = np.ones((len(demo.registry), 8), dtype=np.float32)
    emb[3] = np.nan
    with pytest.raises(RiskrankError, match=r"NaN or infinity in 1 row\(s\), the first \[3\]"):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=emb, progress=False)


def test_k_edges(dense, demo):
    assert len(dense.retrieve(TASKS[0], k=1).tools) == 1
    res = dense.retrieve(TASKS[0], k=100, min_score=NO_MIN_SCORE)
    assert len(res.tools) == len(demo.registry) < 100
    assert sorted(t.index for t in res.tools) == list(range(len(demo.registry)))


def test_relevance_floor(dense, demo):
    """min_score: tools whose f_rel is below the floor are not returned (fewer than k),
    and named; the dense default is the bundled encoder's measured floor."""
    floor = dense.relevance_floor()
    assert floor == DENSE_MIN_SCORE["sentence-transformers/all-MiniLM-L6-v2"] > 0
    full = dense.retrieve(TASKS[0], k=100, min_score=NO_MIN_SCORE)
    res = dense.retrieve(TASKS[0], k=100)
    assert res.min_score == floor and full.min_score is None
    kept = [t.name for t in full.tools if t.f_rel >= floor]
    assert [t.name for t in res.tools] == kept and len(kept) < len(full.tools)
    assert sorted(res.below_min_score) == sorted(t.name for t in full.tools if t.f_rel < floor)
    assert [t.rank for t in res.tools] == list(range(1, len(kept) + 1))
    assert dense.retrieve(TASKS[0], k=5, min_score=0.99).tools == []
    # A floor given to the retriever holds for every call that does not name one.
    strict = RiskAwareRetriever(demo.registry, encoder=dense.encoder, checkpoint=None, tool_emb=dense.tool_emb, progress=False, min_score=0.3)
    assert strict.relevance_floor() == 0.3 and all(t.f_rel >= 0.3 for t in strict.retrieve(TASKS[0], k=20).tools)
    for bad in ("high", float("nan"), True):
        with pytest.raises(RiskrankError, match="min_score"):
            dense.retrieve(TASKS[0], min_score=bad)


def test_fill_policies(dense, demo):
    """dense+rule on a task that needs risky tools, over its dense top-6 (so fewer than k tools
    meet every rule): the safe fill (default) never tops up with a risky tool, none never
    tops up, and the paper's fill always shows k."""
    levels = demo.registry.risk_levels
    off = {"min_score": NO_MIN_SCORE, "candidates": 6}
    paper = dense.retrieve(RISKY_TASK, k=5, mode="dense+rule", fill="deferred", **off)
    safe = dense.retrieve(RISKY_TASK, k=5, mode="dense+rule", **off)
    none = dense.retrieve(RISKY_TASK, k=5, mode="dense+rule", fill="none", **off)
    assert paper.fill == "deferred" and safe.fill == "safe" and none.fill == "none"
    assert len(paper.tools) == 5 and paper.fallback, "the task needs a top-up: the paper's fill takes a risky one"
    assert any(levels[demo.registry.index_of(n)] >= 3 for n in paper.fallback)
    for res in (safe, none):
        assert sum(levels[t.index] >= 3 for t in res.tools) <= 1
        assert all(levels[demo.registry.index_of(n)] < 3 for n in res.fallback)
    assert none.fallback == [] and len(none.tools) <= len(safe.tools) <= 5
    # Equal input, equal output (prompt caches survive).
    assert dense.retrieve(RISKY_TASK, k=5, mode="dense+rule").to_dict() == dense.retrieve(RISKY_TASK, k=5, mode="dense+rule").to_dict()


@pytest.mark.parametrize("task", ["", "   ", "\n"])
def test_empty_task(dense, task):
    with pytest.raises(RiskrankError, match="empty"):
        dense.retrieve(task)


@pytest.mark.parametrize("lam", [-0.1, float("nan"), float("inf")])
def test_bad_lambda(dense, lam):
    with pytest.raises(RiskrankError, match="lambda must be a finite number >= 0"):
        dense.retrieve(TASKS[0], lam=lam)


def test_query_dimension_mismatch(dense):
    with pytest.raises(RiskrankError, match="dimension"):
        dense.rank_batch(np.ones((1, 7), dtype=np.float32))


def test_tool_embedding_rows_must_match(encoder, demo, demo_tool_emb):
    with pytest.raises(RiskrankError, match="rows"):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb[:-1])


# -- trained on the demo ------------------------------------------------------------------------------
def test_fit_on_demo(demo_fitted, demo):
    r = demo_fitted
    assert r.mode == "core+graph+rule" and r.scorer is not None
    tr = r.training
    assert tr.counts["train_queries"] + tr.counts["val_queries"] == len(demo.train)
    assert r.lam in tr.config.lam_grid and r.alpha >= 0
    assert r.f_risk.shape == (len(demo.registry),)
    # the risk head orders the audited levels: mean predicted risk rises from L1 to L4+
    lv = demo.registry.risk_levels
    assert r.f_risk[lv >= 4].mean() > r.f_risk[lv == 1].mean()


@pytest.mark.parametrize(("mode", "name"), [("core", "core"), ("graph", "core+graph"), ("rule", "core+graph+rule")])
def test_retrieve_modes_after_fit(demo_fitted, demo, mode, name):
    res = demo_fitted.retrieve(TASKS[0], k=5, mode=mode)
    assert res.mode == name and len(res.tools) == 5
    assert len({t.index for t in res.tools}) == 5
    assert "weather" in " ".join(t.name for t in res.tools)
    for t in res.tools:
        assert 0.0 < t.f_rel < 1.0 and 0.0 < t.f_risk < 1.0
        assert t.predicted_level in (1, 2, 3, 4, 5)
    if mode == "core":
        assert res.alpha == 0.0
        assert demo_fitted.scorer.space == "logit"  # the p_risky penalty acts on the logit
        for t in res.tools:
            logit = np.log(t.f_rel) - np.log1p(-t.f_rel)
            assert t.score == pytest.approx(logit - res.lam * t.f_risk, abs=1e-3)
        assert all(a.score >= b.score for a, b in zip(res.tools, res.tools[1:], strict=False))
    else:
        assert res.alpha == demo_fitted.alpha


def test_lambda_trades_relevance_for_risk(demo_fitted, demo):
    levels = demo.registry.risk_levels
    lo = demo_fitted.retrieve(RISKY_TASK, k=5, mode="core", lam=0.0)
    hi = demo_fitted.retrieve(RISKY_TASK, k=5, mode="core", lam=5.0)
    assert hi.lam == 5.0 and lo.lam == 0.0
    assert sum(levels[t.index] for t in hi.tools) < sum(levels[t.index] for t in lo.tools)


def test_rule_mode_reports_deferrals(demo_fitted, demo):
    res = demo_fitted.retrieve(RISKY_TASK, k=5, mode="rule", lam=0.0)
    assert res.risk_source == "labels"
    assert res.deferred, "a task that needs destructive tools must hit the risk cap"
    levels = demo.registry.risk_levels
    shown = {t.index for t in res.tools}
    for d in res.deferred:
        assert d.reasons and set(d.reasons) <= {RISK_CAP, PERMISSION_CAP, REDUNDANCY}
        assert d.name == demo.registry[d.index].name
        if RISK_CAP in d.reasons:
            assert levels[d.index] >= 3
        if d.index not in shown:
            assert d.name not in res.fallback
    assert res.fallback == []  # 98 tools, most of them low risk: no top-up is needed
    assert sum(levels[i] >= 3 for i in shown) <= 1
    assert "deferred" in res.to_dict() and res.to_dict()["deferred"][0]["reasons"]


def test_rule_mode_with_predicted_risk(demo_fitted, demo, encoder):
    """The demo's risk head must have learned (its levels spread over the rubric and separate
    r >= 3 on held-out tools), the cap must hold on the accepted tools, and a fallback may
    appear only when the scan ran out of compliant tools."""
    q = demo_fitted.risk_quality
    assert q["learned"] and q["heldout_auc"] >= 0.6 and q["level_span"] >= 1.0, q
    predicted = demo_fitted.predicted_levels
    assert predicted is not None and set(np.unique(predicted)) <= {1, 2, 3, 4, 5}
    assert len(set(predicted.tolist())) >= 3, "a collapsed head predicts one level for every tool"
    assert (predicted[demo.registry.risk_levels >= 4] >= 3).mean() > 0.5
    for fill in ("safe", "deferred"):
        res = demo_fitted.retrieve(RISKY_TASK, k=5, mode="rule", lam=0.0, risk_source="predicted", fill=fill)
        assert res.risk_source == "predicted" and res.notes == []
        assert all(t.predicted_level == predicted[t.index] for t in res.tools)
        for d in res.deferred:
            if RISK_CAP in d.reasons:
                assert predicted[d.index] >= 3
        batch = demo_fitted.rank_batch(encoder.encode([RISKY_TASK]), mode="rule", lam=0.0, risk_source="predicted", k=5,
                                       fill=fill, texts=[RISKY_TASK])
        fr = batch.filters[0]
        assert sum(predicted[t] >= 3 for t in fr.accepted) <= 1  # the cap, on what the filter accepted
        if fr.fallback:  # only when fewer than k tools met every rule over the whole list
            assert len(fr.accepted) < 5 and fr.n_scanned == len(demo.registry)
        shown = [t.index for t in res.tools]
        assert shown == [int(i) for i in fr.top_k[: len(shown)]]


def test_a_head_that_has_not_learned_falls_back_to_keyword_levels(demo_fitted, demo, encoder):
    from riskrank.checkpoint import Checkpoint
    from riskrank.risk import keyword_levels

    ck = demo_fitted.checkpoint
    meta = {**ck.meta, "risk_head": {**ck.meta["risk_head"], "learned": False, "reason": "held-out AUC 0.52 < 0.6"}}
    flagged = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=Checkpoint(ck.model, meta), tool_emb=demo_fitted.tool_emb,
                                 graph=demo_fitted.graph, progress=False)
    assert not flagged.risk_head_learned
    np.testing.assert_array_equal(flagged.predicted_levels, keyword_levels(demo.registry))
    res = flagged.retrieve(RISKY_TASK, k=5, mode="rule", risk_source="predicted")
    assert len(res.notes) == 1 and "keyword annotator" in res.notes[0] and "0.52" in res.notes[0]
    kw = keyword_levels(demo.registry)
    assert all(t.predicted_level == kw[t.index] for t in res.tools)
    assert flagged.retrieve(RISKY_TASK, k=5, mode="rule").notes == []  # audited labels: nothing to say


# -- a tool named in the task ---------------------------------------------------------------------------
NAMED_TASK = "run delete_file on /tmp/old.log"


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid", "core", "core+graph"])
def test_a_named_tool_ranks_first_in_every_mode_without_the_rule_filter(demo_fitted, mode):
    res = demo_fitted.retrieve(NAMED_TASK, k=5, mode=mode, lam=8.0 if mode.startswith("core") else None)
    assert res.tools[0].name == "delete_file" and res.tools[0].named
    assert not any(t.named for t in res.tools[1:])
    # even when it is outside the first stage's top-M, and from the approximate index
    assert demo_fitted.retrieve(NAMED_TASK, k=3, mode=mode, candidates=2).tools[0].name == "delete_file"


def test_a_named_tool_under_the_rule_filter_keeps_the_caps(demo_fitted, demo):
    levels = demo.registry.risk_levels
    named = ("delete_file", "drop_database_table", "execute_shell_command")  # L4, L4, L5
    task = "call delete_file, then drop_database_table and execute_shell_command"
    free = demo_fitted.retrieve(task, k=5, mode="core+graph")
    assert {t.name for t in free.tools[:3]} == set(named) and all(t.named for t in free.tools[:3])
    res = demo_fitted.retrieve(task, k=5, mode="rule", lam=0.0)
    assert res.tools[0].name in named and res.tools[0].named
    assert sum(levels[t.index] >= 3 for t in res.tools) <= 1  # the risk cap still holds
    deferred = {d.name: d for d in res.deferred}
    others = [n for n in named if n != res.tools[0].name]
    for name in others:  # ... and the deferral says the task named it
        assert deferred[name].named and RISK_CAP in deferred[name].reasons


def test_plain_word_names_are_never_named(demo):
    from riskrank.first_stage import LexicalIndex
    from riskrank.registry import Tool, ToolRegistry

    reg = ToolRegistry([Tool("translate", "translate text"), Tool("get_weather", "weather now"), Tool("Weather API", "weather")])
    index = LexicalIndex.from_registry(reg)
    assert index.identifier_like.tolist() == [False, True, False]
    ev = index.evidence(["translate this and call get_weather, or the weather api"])
    assert ev.ex[0].tolist() == [1.0, 1.0, 1.0] and ev.named[0].tolist() == [False, True, False]


def test_named_tools_are_not_lifted_when_switched_off(demo, encoder, demo_tool_emb):
    off = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, pin_named=False, progress=False)
    on = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, progress=False)
    task = "the weather in Porto this weekend, and also delete_file"
    assert on.retrieve(task, k=3).tools[0].name == "delete_file"
    plain = off.retrieve(task, k=3)
    assert plain.tools[0].name != "delete_file" and not any(t.named for t in plain.tools)


# -- bad input through the engine -------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["!!! ??? 🎉🎉🎉", "删除我主目录中的所有文件", ("Ο καιρός αύριο " * 300)[:4000]])
@pytest.mark.parametrize("mode", ["bm25", "hybrid", "core", "core+graph+rule"])
def test_tasks_without_lexical_evidence(demo_fitted, task, mode):
    res = demo_fitted.retrieve(task, k=5, mode=mode, min_score=float("-inf"))
    assert len(res.tools) == 5 and all(np.isfinite([t.score, t.f_rel, t.f_risk]).all() for t in res.tools)
    assert not any(t.named for t in res.tools)


def test_candidates_match_the_full_pool_when_they_cover_the_top(demo_fitted, encoder):
    q = encoder.encode([TASKS[1]])
    texts = [TASKS[1]]
    full = demo_fitted.rank_batch(q, mode="core", candidates=None, texts=texts)
    # the head's first stage: the validated fusion, normalised over the full pool
    lex = demo_fitted.lexical_index.evidence(texts)
    first = demo_fitted.head_fusion(q @ demo_fitted.tool_emb.T, lex.bm25)
    first_rank = rank(first)[0]
    top = full.order[0, :5]
    # the smallest first-stage top-M that contains the full pool's top-5
    m = max(int(np.flatnonzero(first_rank == t)[0]) for t in top) + 1
    for M in (m, m + 7):
        cand = demo_fitted.rank_batch(q, mode="core", candidates=M, texts=texts)
        assert cand.order.shape == (1, M)
        np.testing.assert_array_equal(cand.order[0, :5], top)
        np.testing.assert_allclose(cand.score[0, :5], full.score[0, :5], atol=1e-6)
        np.testing.assert_allclose(cand.f_rel[0, :5], full.f_rel[0, :5], atol=1e-6)
    a = demo_fitted.retrieve(TASKS[1], k=5, mode="core", candidates=m)
    b = demo_fitted.retrieve(TASKS[1], k=5, mode="core", candidates=None)
    assert [t.name for t in a.tools] == [t.name for t in b.tools]


def test_retrieve_many_matches_retrieve(demo_fitted):
    many = demo_fitted.retrieve_many(TASKS, k=5, mode="graph")
    for task, res in zip(TASKS, many, strict=True):
        one = demo_fitted.retrieve(task, k=5, mode="graph")
        assert [t.name for t in res.tools] == [t.name for t in one.tools]
        # logits (the p_risky penalty's scale): a batch and one row round differently
        np.testing.assert_allclose([t.score for t in res.tools], [t.score for t in one.tools], atol=2e-5)


def test_saved_checkpoint_reproduces_the_retriever(demo_fitted, encoder, demo, tmp_path):
    path = demo_fitted.save(tmp_path / "ck")
    assert (path / "checkpoint.json").is_file() and (path / "heads.safetensors").is_file()
    loaded = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=path, progress=False)
    assert loaded.lam == demo_fitted.lam and loaded.alpha == demo_fitted.alpha
    assert loaded.normalisation == demo_fitted.normalisation
    for mode in ("core", "graph", "rule"):
        a = demo_fitted.retrieve(RISKY_TASK, k=5, mode=mode)
        b = loaded.retrieve(RISKY_TASK, k=5, mode=mode)
        assert [t.name for t in a.tools] == [t.name for t in b.tools], mode
        np.testing.assert_allclose([t.score for t in a.tools], [t.score for t in b.tools], atol=1e-6)


def test_checkpoint_with_another_encoder_is_refused(demo_fitted, demo, demo_tool_emb, tmp_path):
    path = demo_fitted.save(tmp_path / "ck")
    other = ArrayEncoder({"x": np.ones(384, dtype=np.float32)}, identity="some-other-encoder")
    with pytest.raises(CheckpointError, match="trained on encoder"):
        RiskAwareRetriever(demo.registry, encoder=other, checkpoint=path, tool_emb=demo_tool_emb)
    with pytest.raises(CheckpointError, match="384-d"):
        RiskAwareRetriever(demo.registry, encoder=demo_fitted.encoder, checkpoint=path, tool_emb=demo_tool_emb[:, :100])


@pytest.mark.parametrize("m", [0, -3, 2.5])
def test_bad_candidate_count(dense, m):
    with pytest.raises(RiskrankError, match="candidates"):
        dense.retrieve(TASKS[0], candidates=m)


@pytest.mark.parametrize("mode", ["dense", "core", "core+graph", "core+graph+rule", "dense+rule"])
def test_top_prefix_equals_the_full_ranking(demo_fitted, encoder, mode):
    q = encoder.encode(TASKS)
    full = demo_fitted.rank_batch(q, mode=mode, candidates=None, texts=TASKS)
    for top in (1, 5, 12):
        part = demo_fitted.rank_batch(q, mode=mode, candidates=None, top=top, texts=TASKS)
        np.testing.assert_array_equal(part.order, full.order[:, :top])
        np.testing.assert_allclose(part.score, full.score[:, :top], atol=1e-6)
        np.testing.assert_allclose(part.f_rel, full.f_rel[:, :top], atol=1e-6)


def test_ann_first_stage(demo_fitted, encoder, demo, demo_tool_emb):
    ann = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=demo_fitted.checkpoint, tool_emb=demo_tool_emb,
                             first_stage="ann", candidates=40, progress=False)
    exact = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=demo_fitted.checkpoint, tool_emb=demo_tool_emb,
                               candidates=40, progress=False)
    # A 98-tool registry has 2 IVF cells and 32 probes: the index scans them all, so the ANN
    # top-M is the exact cosine top-M, and a mode that reads the cosine alone ranks alike.
    for mode in ("dense", "dense+rule"):
        a = ann.retrieve_many(TASKS, k=5, mode=mode)
        b = exact.retrieve_many(TASKS, k=5, mode=mode)
        assert [[t.name for t in r.tools] for r in a] == [[t.name for t in r.tools] for r in b]
    # With the lexical evidence the ANN set is BM25's best quarter, then the cosine top-M
    # (normalised over those M tools): the same M tools when M covers the registry.
    q = encoder.encode(TASKS)
    batch = ann.rank_batch(q, mode="core", texts=TASKS)
    assert batch.order.shape == (3, 40) and all(len(set(row)) == 40 for row in batch.order.tolist())
    bm = ann.lexical_index.bm25
    for i, task in enumerate(TASKS):
        assert set(bm.top(task, 10).tolist()) <= set(batch.order[i].tolist())
    wide = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=demo_fitted.checkpoint, tool_emb=demo_tool_emb,
                              first_stage="ann", candidates=97, progress=False)
    exact97 = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=demo_fitted.checkpoint, tool_emb=demo_tool_emb,
                                 candidates=97, progress=False)
    for mode in ("core", "core+graph+rule"):
        a = [[t.name for t in r.tools] for r in wide.retrieve_many(TASKS, k=5, mode=mode)]
        b = [[t.name for t in r.tools] for r in exact97.retrieve_many(TASKS, k=5, mode=mode)]
        assert sum(len(set(x) & set(y)) for x, y in zip(a, b, strict=True)) >= 12, (a, b)
    default = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, first_stage="ann", progress=False)
    assert default.candidates == 100  # an index finds a top-M, never the full pool
    with pytest.raises(RiskrankError, match="unknown first stage"):
        RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=None, tool_emb=demo_tool_emb, first_stage="lsh", progress=False)


def test_each_pipeline_reads_its_own_validated_lambda(demo_fitted, demo, encoder):
    p = demo_fitted.pipelines
    assert {"core", "core+rule", "core+graph", "core+graph+rule", "core+graph+rule_pred"} <= set(p)
    assert demo_fitted.settings("rule")["lam"] == p["core+graph+rule"]["lam"]
    assert demo_fitted.settings("rule", risk_source="predicted")["lam"] == p["core+graph+rule_pred"]["lam"]
    assert demo_fitted.settings("graph")["alpha"] == p["core+graph"]["alpha"]
    assert demo_fitted.settings("core")["alpha"] == 0.0 and demo_fitted.settings("dense")["lam"] == 0.0
    assert demo_fitted.pipeline_key(parse_mode("core"), candidates=40) == "top40/core"
    assert demo_fitted.settings("core", candidates=40)["lam"] == p["core"]["lam"]  # no top-40 choice: the full pool's
    assert demo_fitted.settings("rule", lam=0.7)["lam"] == 0.7
    res = demo_fitted.retrieve(TASKS[2], k=5, mode="rule")
    assert res.lam == p["core+graph+rule"]["lam"]
    fixed = RiskAwareRetriever(demo.registry, encoder=encoder, checkpoint=demo_fitted.checkpoint, tool_emb=demo_fitted.tool_emb,
                               lam=1.25, progress=False)
    assert fixed.settings("rule")["lam"] == fixed.settings("core")["lam"] == 1.25  # a lambda given to the retriever wins


def test_fit_moved_says_where(demo):
    with pytest.raises(RiskrankError, match=r"riskrank\.fit_retriever"):
        RiskAwareRetriever.fit(demo.registry, ["x"], [np.array([0])])


def test_from_paths_loads_the_base_model_as_the_constructor_does():
    """Omitting the checkpoint means the same in both: the base model (from_paths once meant none)."""
    import inspect

    from riskrank.pipeline import BASE_AUTO

    for fn in (RiskAwareRetriever.from_paths, RiskAwareRetriever.__init__):
        assert inspect.signature(fn).parameters["checkpoint"].default == BASE_AUTO


def test_pins_fill_and_encoder_of_the_wrong_kind_are_named(demo, dense):
    """A misspelt pin pinned nothing without a word; a pin out of range, an unknown fill in a
    mode without rules, an encoder that is not one failed later or not at all."""
    name = demo.registry[0].name
    for kw, says in (({"level_pins": {"no_such_tool": 2}}, "level_pins names 1 tool(s) the registry does not hold: 'no_such_tool'"),
                     ({"level_pins": {name: 9}}, f"level_pins['{name}'] must be a level 1..5, got 9"),
                     ({"encoder": 5}, "encoder must be an encoder name, an Encoder or an object with encode(), got int")):
        with pytest.raises(RiskrankError, match=re.escape(says)):
            RiskAwareRetriever(demo.registry, **{"encoder": dense.encoder, **kw}, checkpoint=None, tool_emb=dense.tool_emb)
    assert RiskAwareRetriever(demo.registry, encoder=dense.encoder, checkpoint=None, tool_emb=dense.tool_emb,
                              level_pins={name: 4}).tool_levels.levels[0] == 4
    with pytest.raises(RiskrankError, match="fill must be one of"):
        dense.retrieve(TASKS[0], mode="dense", fill="bogus")
