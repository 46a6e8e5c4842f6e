"""The lexical evidence: the inverted-index name features and BM25 equal a scan of every name
(tests/naive.py) over the full pool and over candidate sets, on the demo and Seal-Tools
registries; the fusions against their formulas; named tools first; and bad input (no
indexable token, another script, a 4,000-character task, names only, names that are not
words) giving zeros, never NaN or an error."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import naive
from riskrank.errors import RiskrankError
from riskrank.first_stage import (
    LEXICAL_FEATURES,
    PRIOR_FUSION,
    BM25Retriever,
    Fusion,
    LexicalIndex,
    fusion_grid,
    normalise,
    parameter_names,
    pin_named,
    rank,
    relevance_inputs,
    task_words,
    union_candidates,
    words,
)
from riskrank.registry import Tool, ToolRegistry

TASKS = [
    "What's the weather going to be like in Lisbon this weekend?",
    "run delete_file on /tmp/old.log, then get_weather_forecast for Porto",
    "Please call getCurrentWeather and list_directory with path /home",
    "send an email to bob with the subject line Hello",
    "!!! ??? 🎉🎉🎉 ...",
    "删除我主目录中的所有文件",
    "Удалите все файлы в домашней папке",
    "wire money: transfer_funds(amount=200, to_account='alice')",
    "",
]
FIELDS = ("bm25", "ex", "fr", "fri", "frp")


def registry_lists(reg):
    return [t.name for t in reg], [t.description for t in reg], [parameter_names(t.parameters) for t in reg]


def check_equal(index: LexicalIndex, reg, texts):
    want = naive.lexical_evidence(texts, *registry_lists(reg))
    got = index.evidence(texts)
    for f in FIELDS:
        np.testing.assert_allclose(getattr(got, f), want[f], rtol=1e-5, atol=1e-6, err_msg=f)
        assert np.isfinite(getattr(got, f)).all()
    np.testing.assert_array_equal(got.named, (want["ex"] > 0) & index.identifier_like[None, :])
    rng = np.random.default_rng(0)
    cand = np.stack([rng.choice(len(reg), size=min(37, len(reg)), replace=False) for _ in texts])
    sub = index.evidence(texts, cand)
    for f in FIELDS:
        np.testing.assert_allclose(getattr(sub, f), np.take_along_axis(want[f], cand, 1), rtol=1e-5, atol=1e-6, err_msg=f)
    full_taken = got.take(cand)
    np.testing.assert_array_equal(sub.named, full_taken.named)


def test_name_features_equal_a_scan_of_every_name_on_the_demo(demo):
    index = LexicalIndex.from_registry(demo.registry)
    check_equal(index, demo.registry, TASKS + list(demo.train.texts[:20]))


def test_name_features_equal_a_scan_on_sealtools(data_dir):
    from riskrank.datasets import load_benchmark

    b = load_benchmark("sealtools", data_dir)
    reg = b.registry.subset(b.registry.names[:600])
    check_equal(LexicalIndex.from_registry(reg), reg, TASKS + list(b.splits["test_in"].texts[:15]))


def test_bm25_equals_bm25s_on_the_lexical_text(demo):
    index = LexicalIndex.from_registry(demo.registry)
    bm = index.bm25
    for task in TASKS:
        toks = [t for t in __import__("re").findall(r"(?u)\b\w\w+\b", bm._prep(task).lower()) if t in bm.vocab]
        want = bm.model.get_scores(toks) if toks else np.zeros(len(demo.registry))
        np.testing.assert_allclose(bm.score([task])[0], want, rtol=1e-5, atol=1e-6)
        top = bm.top(task, 5, depth=len(demo.registry))
        full = bm.score([task])[0]
        assert top.tolist() == [t for t in rank(full)[0, :5].tolist() if full[t] > 0]


def test_the_lexical_text_holds_parameter_names(demo):
    index = LexicalIndex.from_registry(demo.registry)
    # "max_bytes" is a parameter of read_file only; its words reach BM25 and frp
    ev = index.evidence(["max bytes of the path"])
    i = demo.registry.index_of("read_file")
    assert ev.bm25[0, i] > 0 and ev.frp[0, i] == 1.0


def test_words_of_names_that_are_not_words():
    assert words("getV2API") == ["get", "v2", "api"]
    assert words("x1") == ["x1"]
    assert words("delete_listed_files") == ["delete", "listed", "files"]
    assert words("HTTPServer.start-now") == ["http", "server", "start", "now"]
    assert words("🎉") == [] and task_words("!!! ...") == set()
    assert "getweather" in task_words("call getWeather") and "weather" in task_words("call getWeather")


def tools(*specs):
    """A registry built in memory: the loaders refuse an empty description, a caller's own
    Tool objects need not."""
    return ToolRegistry([Tool(n, d) for n, d in specs])


def test_bad_registries_give_zeros_not_errors():
    # names only, names that are not words, and one name with no indexable token at all
    reg = tools(("x1", ""), ("getV2API", ""), ("q", ""), ("delete_listed_files", ""), ("translate", ""))
    index = LexicalIndex.from_registry(reg)
    ev = index.evidence(["call getV2API now", "translate this", "x1", "🎉", "a" * 4000])
    for f in FIELDS:
        assert np.isfinite(getattr(ev, f)).all()
    assert ev.ex[0, 1] == 1 and ev.named[0, 1]  # an identifier named in the task
    assert ev.ex[1, 4] == 1 and not ev.named[1, 4]  # a plain word is not a name
    assert ev.ex[2, 0] == 0  # names under three characters never count as named
    assert not ev.bm25[3].any() and not ev.fr[3].any()
    check_equal(index, reg, ["call getV2API now", "translate x1 files", "delete listed files"])
    # nothing indexable in the whole registry: BM25 is empty, not an error
    empty = LexicalIndex.from_registry(tools(("a", ""), ("b", "")))
    assert empty.bm25.model is None and not empty.evidence(["anything at all"]).bm25.any()


def test_a_long_task_in_another_script_contributes_nothing(demo):
    index = LexicalIndex.from_registry(demo.registry)
    long_task = ("Ο καιρός αύριο " * 300)[:4000]
    assert len(long_task) == 4000
    ev = index.evidence([long_task, "删除我主目录中的所有文件", "!!! 🎉"])
    for f in FIELDS:
        assert not getattr(ev, f).any(), f
    cos = np.random.default_rng(1).random((3, len(demo.registry))).astype(np.float32)
    for fusion in (Fusion("convex", "minmax", 0.6), Fusion("convex", "z", 0.1), Fusion("rrf", None, 0.5, 20)):
        inp = relevance_inputs(cos, ev, fusion)
        assert np.isfinite(inp.f0).all() and all(np.isfinite(x).all() for x in inp.x)
        # the lexical part is zero: the fusion ranks like the cosine
        np.testing.assert_array_equal(rank(inp.f0), rank(cos))


# -- fusion ---------------------------------------------------------------------------------------
def test_normalisations_and_constant_rows():
    x = np.array([[1.0, 3.0, 2.0], [5.0, 5.0, 5.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(normalise(x, "minmax")[0], [0.0, 1.0, 0.5])
    z = normalise(x, "z")[0]
    np.testing.assert_allclose(z, (x[0] - x[0].mean()) / x[0].std(), rtol=1e-6)
    for how in ("minmax", "z"):
        out = normalise(x, how)
        assert np.isfinite(out).all() and not out[1:].any()
    with pytest.raises(RiskrankError, match="unknown normalisation"):
        normalise(x, "softmax")


def test_fusions_against_their_formulas():
    rng = np.random.default_rng(3)
    cos = rng.random((4, 30)).astype(np.float32)
    bm = np.where(rng.random((4, 30)) < 0.3, rng.random((4, 30)) * 9, 0).astype(np.float32)
    bm[3] = 0
    for w in (0.0, 0.3, 1.0):
        mm = lambda a: (a - a.min(1, keepdims=True)) / np.maximum(a.max(1, keepdims=True) - a.min(1, keepdims=True), 1e-6)  # noqa: E731
        np.testing.assert_allclose(Fusion("convex", "minmax", w)(cos, bm), (1 - w) * mm(cos) + w * mm(bm), atol=1e-6)
        k = 20
        got = Fusion("rrf", None, w, k)(cos, bm)
        for i in range(4):
            rc = np.argsort(np.argsort(-cos[i], kind="stable"), kind="stable") + 1
            rb = np.argsort(np.argsort(-bm[i], kind="stable"), kind="stable") + 1
            want = (1 - w) / (k + rc) + w * np.where(bm[i] > 0, 1.0 / (k + rb), 0.0)
            np.testing.assert_allclose(got[i], want, rtol=1e-6)
    assert Fusion("convex", "z", 0.3) == PRIOR_FUSION and PRIOR_FUSION.describe() == "convex z-score, w = 0.3"
    assert Fusion.from_dict(Fusion("rrf", None, 0.4, 30).to_dict()) == Fusion("rrf", None, 0.4, 30)
    grid = fusion_grid()
    assert len(grid) == 2 * 21 + 6 * 21 and len(set(grid)) == len(grid)
    for bad in ({"rule": "max"}, {"norm": None}, {"weight": 1.5}, {"rule": "rrf", "norm": None, "k": 0}):
        with pytest.raises(RiskrankError):
            Fusion(**{"rule": "convex", "norm": "z", "weight": 0.3, **bad})


def test_relevance_inputs_of_the_hybrid_head():
    rng = np.random.default_rng(4)
    idx = LexicalIndex(["get_weather", "delete_file", "send_email"], ["weather now", "remove a file", "mail"], [["city"], ["path"], []])
    ev = idx.evidence(["get_weather for the city", "nothing here"])
    cos = rng.random((2, 3)).astype(np.float32)
    inp = relevance_inputs(cos, ev, Fusion("convex", "minmax", 0.5))
    assert len(inp.x) == len(LEXICAL_FEATURES)
    np.testing.assert_allclose(inp.x[0], normalise(cos, "minmax"))
    assert inp.x[1][0, 0] == 1.0 and not inp.x[1][1].any()  # BM25 over the row's best, 0 without a match
    assert inp.x[2][0, 0] == 1.0 and inp.x[5][0, 0] == 1.0  # named, and its parameter "city" in the task
    assert inp.f0.min() >= 0 and inp.f0.max() <= 1
    assert relevance_inputs(cos).x == () and relevance_inputs(cos).f0 is not None
    with pytest.raises(RiskrankError, match="lexical evidence"):
        relevance_inputs(cos, None, PRIOR_FUSION)


# -- named tools first ---------------------------------------------------------------------------------
def test_pin_named_lifts_named_tools_and_keeps_their_order():
    s = np.array([[0.9, 0.1, 0.5, -2.0], [0.3, 0.2, 0.1, 0.0]], dtype=np.float32)
    named = np.array([[False, True, False, True], [False, False, False, False]])
    out = pin_named(s, named)
    assert rank(out)[0].tolist() == [1, 3, 0, 2]
    np.testing.assert_array_equal(out[1], s[1])
    assert pin_named(s, None) is s


def test_union_candidates():
    dense = np.array([[5, 4, 3, 2, 1, 0]])
    out = union_candidates(dense, [np.array([9, 3])], 5)
    assert out.tolist() == [[9, 3, 5, 4, 2]]
    with pytest.raises(RiskrankError, match="too few"):
        union_candidates(dense[:, :2], [np.array([], np.int64)], 5)


def test_bm25_of_candidates_equals_the_full_row():
    bm = BM25Retriever(["get weather city", "delete file", "weather radar map", "file reader"])
    cand = np.array([[2, 0], [3, 1]])
    full = bm.score(["weather", "file"])
    np.testing.assert_allclose(bm.score_candidates(["weather", "file"], cand), np.take_along_axis(full, cand, 1))


def test_bm25_top_from_impact_ordered_postings():
    texts = [f"weather city {'radar ' * (i % 3)}{'file ' * (i % 5)}" for i in range(60)]
    bm = BM25Retriever(texts)
    full = bm.score(["weather radar file"])[0]
    exact = [t for t in rank(full)[0, :10].tolist() if full[t] > 0]
    assert bm.top("weather radar file", 10, depth=60).tolist() == exact  # depth >= every posting list: exact
    shallow = bm.top("weather radar file", 10, depth=3)
    # each word's 3 best postings, scored exactly and ranked by the full score
    assert len(shallow) <= 9 and all(full[a] >= full[b] for a, b in itertools.pairwise(shallow))
    lists = set()
    for word in ("weather", "radar", "file"):
        s = bm.score([word])[0]
        lists |= set(rank(s)[0, :3].tolist())
    assert set(shallow.tolist()) <= lists


def test_building_an_index_logs_nothing_below_the_applications_level():
    """bm25s sets its logger to DEBUG on import: under a host's root handler every index
    build printed a debug line. The application's level decides."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        BM25Retriever(["read a file", "delete a file"])
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    assert not [r for r in records if r.name.startswith("bm25s") and r.levelno < logging.INFO]
