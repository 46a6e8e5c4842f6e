"""Risk audit (paper Section 4.2, Appendix A, Table 1): the span rule, the label file and
review queue, the keyword and learned-head annotators, agreement statistics against
sklearn / krippendorff, and the two commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from riskrank.agreement import (
    agreement,
    confusion,
    confusion_png,
    krippendorff_ordinal,
    load_ratings,
    pair_stats,
    quadratic_kappa,
)
from riskrank.annotators import (
    AnnotatorError,
    Failure,
    HeadAnnotator,
    KeywordAnnotator,
    Vote,
    make_annotator,
)
from riskrank.audit import (
    AGREED,
    INCOMPLETE,
    MEDIAN,
    PENDING,
    REVIEWED,
    SINGLE,
    AuditError,
    apply_review,
    build_labels,
    default_side_paths,
    read_review,
    resolve_votes,
    run_audit,
    write_review,
)
from riskrank.cli import run as cli_run
from riskrank.datasets.demo import demo_registry_path
from riskrank.encoder import ArrayEncoder
from riskrank.registry import ToolRegistry, make_tool
from riskrank.risk import level_from_score


class Fixed:
    """An annotator with fixed answers (name -> level, or a Failure message)."""

    def __init__(self, name: str, answers: dict[str, int | str]) -> None:
        self.name, self.config, self.answers, self.calls = name, "fixed", answers, []

    def annotate(self, tools: Sequence):
        for i, t in enumerate(tools):
            self.calls.append(t.name)
            a = self.answers[t.name]
            yield i, (Failure(a) if isinstance(a, str) else Vote(a, f"fixed {a}"))


def registry(n: int = 5) -> ToolRegistry:
    return ToolRegistry([make_tool(f"t{i}", f"tool number {i}", where="test") for i in range(n)])


@pytest.mark.parametrize(("votes", "n", "level", "span", "status"), [
    ([3, 3, 3], 3, 3, 0, AGREED),
    ([2, 3, 3], 3, 3, 1, MEDIAN),
    ([2, 2, 3], 3, 2, 1, MEDIAN),
    ([1, 2, 3], 3, None, 2, PENDING),
    ([1, 5, 5], 3, None, 4, PENDING),
    ([2, 3], 2, 3, 1, MEDIAN),  # even count: the upper median (conservative)
    ([4], 1, 4, 0, SINGLE),
    ([3, 3], 3, None, None, INCOMPLETE),
])
def test_span_rule(votes, n, level, span, status):
    r = resolve_votes(votes, n)
    assert (r.level, r.span, r.status) == (level, span, status)


def test_audit_labels_review_roundtrip(tmp_path):
    reg = registry(5)
    anns = [Fixed("a", {"t0": 1, "t1": 2, "t2": 1, "t3": 4, "t4": 2}),
            Fixed("b", {"t0": 1, "t1": 3, "t2": 3, "t3": 4, "t4": 2}),
            Fixed("c", {"t0": 1, "t1": 3, "t2": 4, "t3": 5, "t4": "boom"})]
    run = run_audit(reg, anns, tmp_path / "v.jsonl")
    labels, queue = build_labels(reg, run, source="test")
    assert [labels[f"t{i}"]["resolution"] for i in range(5)] == [AGREED, MEDIAN, PENDING, MEDIAN, INCOMPLETE]
    assert [labels[f"t{i}"]["risk_level"] for i in range(5)] == [1, 3, None, 4, None]
    assert labels["t2"]["votes"] == {"a": 1, "b": 3, "c": 4} and labels["t2"]["span"] == 3
    assert labels["t4"]["failures"] == {"c": "boom"}
    assert labels["t0"]["provenance"]["annotators"] == ["a", "b", "c"]
    assert [q["name"] for q in queue] == ["t2"] and queue[0]["median"] == 3 and queue[0]["risk_level"] is None

    out, review = tmp_path / "labels.json", tmp_path / "labels.review.jsonl"
    out.write_text(json.dumps(labels))
    write_review(review, queue)
    loaded = ToolRegistry.load(out)  # the label file is a registry like the released ones
    assert loaded.risk_levels.tolist() == [1, 3, 0, 4, 0] and loaded["t2"].extra["votes"] == {"a": 1, "b": 3, "c": 4}

    # Nothing decided yet: applying leaves it pending.
    assert apply_review(out, review) == (0, 1)
    # The reviewer decides; a rerun of the audit keeps the typed decision in the queue file.
    entry = read_review(review)[0]
    entry.update(risk_level=4, reviewer="qa", note="can overwrite user data")
    entry.pop("_line")
    review.write_text(json.dumps(entry) + "\n")
    write_review(review, build_labels(reg, run)[1])
    assert read_review(review)[0]["risk_level"] == 4
    assert apply_review(out, review) == (1, 0)
    rec = json.loads(out.read_text())["t2"]
    assert (rec["risk_level"], rec["resolution"], rec["reviewer"], rec["review_note"]) == (4, REVIEWED, "qa", "can overwrite user data")
    # A rerun keeps the applied decision while the votes are unchanged ...
    labels2, queue2 = build_labels(reg, run, previous=json.loads(out.read_text()))
    assert labels2["t2"]["risk_level"] == 4 and labels2["t2"]["resolution"] == REVIEWED and queue2 == []
    # ... and drops it when they change.
    run.votes["t2"]["a"] = Vote(2)
    labels3, queue3 = build_labels(reg, run, previous=json.loads(out.read_text()))
    assert labels3["t2"]["risk_level"] is None and [q["name"] for q in queue3] == ["t2"]


def test_review_file_errors(tmp_path):
    reg = registry(3)
    run = run_audit(reg, [Fixed("a", {"t0": 1, "t1": 1, "t2": 1}), Fixed("b", {"t0": 3, "t1": 1, "t2": 1})], tmp_path / "v.jsonl")
    labels, _ = build_labels(reg, run)
    out, review = tmp_path / "l.json", tmp_path / "r.jsonl"
    out.write_text(json.dumps(labels))
    for line, msg in [({"name": "t0", "risk_level": 7}, "integer 1-5"), ({"name": "nope", "risk_level": 2}, "no such tool"),
                      ({"name": "t0", "votes": {"a": 2, "b": 3}, "risk_level": 2}, "votes differ"), ("{oops", "invalid JSON")]:
        review.write_text((line if isinstance(line, str) else json.dumps(line)) + "\n")
        with pytest.raises(AuditError, match=msg):
            apply_review(out, review)


def test_rerun_reuses_votes_and_reannotates_changed_tools(tmp_path):
    log = tmp_path / "v.jsonl"
    reg = registry(4)
    a = Fixed("a", {f"t{i}": 2 for i in range(4)})
    run_audit(reg, [a], log)
    b = Fixed("a", {f"t{i}": 2 for i in range(4)})
    changed = ToolRegistry([*reg.tools[:3], make_tool("t3", "a new description", where="test")])
    run = run_audit(changed, [b], log)
    assert b.calls == ["t3"] and run.reused == 3 and run.new == 1
    c = Fixed("a", {f"t{i}": 2 for i in range(4)})
    c.config = "other"  # a changed annotator (prompt, keyword lists, checkpoint) votes again
    run_audit(changed, [c], log)
    assert len(c.calls) == 4
    with pytest.raises(AuditError, match="given twice"):
        run_audit(reg, [a, a], log)


def _log_lines(log):
    return [json.loads(x) for x in log.read_text().splitlines()]


def test_every_vote_line_carries_a_checksum(tmp_path):
    from riskrank.audit import line_checksum

    log = tmp_path / "v.jsonl"
    run_audit(registry(3), [Fixed("a", {"t0": 1, "t1": 2, "t2": 3})], log)
    lines = _log_lines(log)
    assert len(lines) == 3 and all(rec["sum"] == line_checksum(rec) for rec in lines)


def test_an_edited_or_forged_vote_is_asked_again(tmp_path):
    log = tmp_path / "v.jsonl"
    reg = registry(3)
    run_audit(reg, [Fixed("a", {"t0": 5, "t1": 2, "t2": 3})], log)
    lines = _log_lines(log)
    lines[0]["level"] = 1  # edited by hand: the checksum no longer holds
    forged = {**lines[1], "level": 1}
    forged.pop("sum")  # appended without a checksum (or by a riskrank that wrote none)
    log.write_text("".join(json.dumps(x) + "\n" for x in [*lines, forged]))
    notes = []
    again = Fixed("a", {"t0": 5, "t1": 2, "t2": 3})
    run = run_audit(reg, [again], log, echo=notes.append)
    assert sorted(again.calls) == ["t0"], "the edited line's vote is asked again; the forged one is ignored"
    assert run.votes["t0"]["a"].level == 5 and run.votes["t1"]["a"].level == 2
    assert any("1 line(s)" in n and "failed their checksum" in n for n in notes) or any("2 line(s)" in n for n in notes)


def test_deterministic_annotators_are_recomputed_not_trusted(tmp_path):
    """A forged keyword vote with a valid checksum: the keyword annotator is rerun on resume and
    its own vote wins (and the replacement is logged and reported)."""
    from riskrank.audit import line_checksum

    log = tmp_path / "v.jsonl"
    reg = ToolRegistry([make_tool("delete_storage_bucket", "Delete a storage bucket and every object in it.", where="t"),
                        make_tool("get_weather", "Weather for a city.", where="t")])
    first = run_audit(reg, [KeywordAnnotator()], log)
    assert first.votes["delete_storage_bucket"]["keyword"].level >= 4
    lines = _log_lines(log)
    for rec in lines:
        if rec["tool"] == "delete_storage_bucket":
            rec["level"] = 1
            rec["sum"] = line_checksum(rec)  # a careful forger recomputes the checksum
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    notes = []
    run = run_audit(reg, [KeywordAnnotator()], log, echo=notes.append)
    assert run.votes["delete_storage_bucket"]["keyword"].level >= 4 and run.recomputed_differed == 1
    assert any("differ from what keyword gives now" in n for n in notes)
    assert "recomputed: the log said L1" in log.read_text()
    # a log that agrees is confirmed without new lines
    size = log.stat().st_size
    run = run_audit(reg, [KeywordAnnotator()], log)
    assert run.new == 0 and run.recomputed_differed == 0 and log.stat().st_size == size


def test_vote_log_is_locked(tmp_path):
    from riskrank.audit import VoteLog

    with VoteLog(tmp_path / "v.jsonl"), pytest.raises(AuditError, match="another audit"), VoteLog(tmp_path / "v.jsonl"):
        pass


# Golden cases, written by hand from the rubric (Appendix A), not computed by the code under
# test: real tool shapes with the level a careful reader gives and the evidence that must show.
KEYWORD_GOLDEN = [
    ("read_file", "Read the complete contents of a file from the file system.", None, 1, 1, []),
    ("get_weather", "Get the weather forecast for a city.", None, 1, 1, []),
    ("list_contacts", "List my contacts.", None, 2, 2, ["L2: 'contacts'"]),
    ("send_email", "Send an email to a recipient.", None, 3, 3, ["L3: 'send'"]),
    ("delete_file", "Delete a file from the disk.", None, 4, 4, ["L4: 'delete'", "perm: file_write"]),
    ("drop_database_table", "Drop a table from the database.", None, 4, 5, ["L5: 'drop database'"]),
    ("purge_directory", "Deletes all files and subfolders in a directory recursively.", {"readOnlyHint": True}, 4, 4,
     ["L4: 'purge'", "mcp: readOnlyHint (not trusted: hints only raise a level)"]),
    ("wipe_disk", "Wipes the disk: overwrites every sector with zeros.", None, 5, 5, ["L5: 'wipe'"]),
    ("run_shell", "Run a shell command on the host.", None, 4, 5, ["perm: shell_execution"]),
    ("tidy_notes", "Tidy up the notebook layout.", {"destructiveHint": True}, 4, 5, ["mcp: destructiveHint"]),
]


@pytest.mark.parametrize(("name", "description", "annotations", "low", "high", "evidence"), KEYWORD_GOLDEN)
def test_keyword_annotator_golden_cases(name, description, annotations, low, high, evidence):
    tool = make_tool(name, description, where="golden", annotations=annotations)
    [(i, vote)] = list(KeywordAnnotator().annotate([tool]))
    assert i == 0 and low <= vote.level <= high, vote
    for piece in evidence:
        assert piece in vote.evidence.split("; "), (piece, vote.evidence)
    if not evidence:
        assert vote.evidence == "no risk keyword"


def test_make_annotator_specs():
    assert make_annotator("keyword").name == "keyword"
    oa = make_annotator("openai:gpt-x@http://127.0.0.1:1/v1", openai_options={"retries": 1})
    assert (oa.model, oa.base_url, oa.retries, oa.name) == ("gpt-x", "http://127.0.0.1:1/v1", 1, "openai:gpt-x@http://127.0.0.1:1/v1")
    for bad in ("nope", "openai:", "keyword:x", "head:"):
        with pytest.raises(AnnotatorError, match="unknown annotator"):
            make_annotator(bad)
    with pytest.raises(AnnotatorError, match="--dataset"):
        make_annotator("head:crossfit", encoder=ArrayEncoder({"x": np.ones(3)}))
    with pytest.raises(AnnotatorError, match="http"):
        make_annotator("openai:m@ftp://x")
    # a model name may hold '@' (Vertex-style versions): only a URL after the last '@' is the base URL
    assert make_annotator("openai:claude-3-5-sonnet@20240620").model == "claude-3-5-sonnet@20240620"


def _tiny_training(n_tools: int = 24, n_queries: int = 30, dim: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n_tools, dim)).astype(np.float32)
    tools = [make_tool(f"t{i}", f"tool {i}", where="test", risk_level=int(1 + i % 5)) for i in range(n_tools)]
    reg = ToolRegistry(tools)
    q_texts = [f"query {j}" for j in range(n_queries)]
    gold = [np.array([j % n_tools, (3 * j + 1) % n_tools]) for j in range(n_queries)]
    table = {t.text(): emb[i] for i, t in enumerate(tools)}
    table.update({q: emb[g].mean(0) + 0.1 * rng.normal(size=dim) for q, g in zip(q_texts, gold, strict=True)})
    return reg, q_texts, gold, ArrayEncoder(table)


def test_head_annotator_follows_the_checkpoint_on_disk(tmp_path):
    """Two checkpoints whose risk heads say opposite things: the annotator's levels follow the
    file it is given (not an in-memory model), and a separable risk is learned."""
    import torch

    from riskrank.checkpoint import save_checkpoint
    from riskrank.training import TrainConfig, train_heads

    reg, q_texts, gold, enc = _tiny_training()
    tool_emb = enc.encode(reg.texts())
    res = train_heads(tool_emb, enc.encode(q_texts), gold, reg.risk_levels, TrainConfig(epochs=2), progress=False)
    meta = {"encoder": {"identity": enc.identity, "name": "array", "dim": 8}, "registry_fingerprint": reg.fingerprint()}
    save_checkpoint(res, tmp_path / "low", **meta)
    with torch.no_grad():  # the other checkpoint: a risk head pinned to "critical" for every tool
        res.model.risk_head.l2.weight.zero_()
        res.model.risk_head.l2.bias.fill_(20.0)
    save_checkpoint(res, tmp_path / "high", **meta)
    high = dict(HeadAnnotator(tmp_path / "high", encoder=enc).annotate(reg.tools))
    assert {v.level for v in high.values()} == {5}
    low = dict(HeadAnnotator(tmp_path / "low", encoder=enc).annotate(reg.tools))
    assert {v.level for v in low.values()} != {5}
    assert all(v.evidence.startswith("f_risk=") for v in low.values())
    ann = HeadAnnotator(tmp_path / "low", encoder=enc)
    assert ann.name == f"head:{tmp_path / 'low'}" and len(ann.config) == 12 and ann.deterministic


def test_head_annotator_learns_a_separable_risk(tmp_path, torch_single_thread):
    """Risky and safe tools far apart in embedding space: the head's levels agree with the
    audited ones (Spearman > 0.8), so the annotator measures something."""
    from scipy.stats import spearmanr

    from riskrank.checkpoint import save_checkpoint
    from riskrank.training import TrainConfig, train_heads

    rng = np.random.default_rng(1)
    n, dim = 40, 8
    levels = np.array([1 + (i % 5) for i in range(n)])
    emb = rng.normal(scale=0.05, size=(n, dim)).astype(np.float32)
    emb[:, 0] += levels - 3.0  # the level is the direction in the plane of the first two axes
    emb[:, 1] += 1.0
    tools = [make_tool(f"t{i}", f"tool {i}", where="test", risk_level=int(levels[i])) for i in range(n)]
    reg = ToolRegistry(tools)
    q_texts = [f"query {j}" for j in range(200)]
    gold = [np.array([j % n]) for j in range(200)]
    table = {t.text(): emb[i] for i, t in enumerate(tools)}
    table.update({q: emb[g].mean(0) + 0.01 * rng.normal(size=dim) for q, g in zip(q_texts, gold, strict=True)})
    enc = ArrayEncoder(table)
    res = train_heads(enc.encode(reg.texts()), enc.encode(q_texts), gold, reg.risk_levels,
                      TrainConfig(epochs=20, seed=0, lr=1e-2), progress=False)
    save_checkpoint(res, tmp_path / "ck", encoder={"identity": enc.identity, "name": "array", "dim": dim},
                    registry_fingerprint=reg.fingerprint())
    got = dict(HeadAnnotator(tmp_path / "ck", encoder=enc).annotate(reg.tools))
    rho = spearmanr([got[i].level for i in range(n)], levels).statistic
    assert rho > 0.8, rho


def test_crossfit_hides_each_fold_labels(monkeypatch):
    import riskrank.training.fitting as training

    reg, q_texts, gold, enc = _tiny_training()
    seen = []
    real = training.train_heads

    def spy(tool_emb, query_emb, gold, risk_levels, config=None, **kw):
        seen.append(np.asarray(risk_levels).copy())
        return real(tool_emb, query_emb, gold, risk_levels, config, **kw)

    monkeypatch.setattr(training, "train_heads", spy)
    levels, f_risk, folds = training.crossfit_risk_levels(reg, q_texts, gold, encoder=enc, n_folds=3, seed=1,
                                                 config=training.TrainConfig(epochs=1), progress=False)
    assert len(seen) == 3 and sorted(set(folds.tolist())) == [0, 1, 2]
    for f, lv in enumerate(seen):
        assert (lv[folds == f] == 0).all() and (lv[folds != f] == reg.risk_levels[folds != f]).all()
    assert levels.tolist() == level_from_score(f_risk).tolist() and levels.min() >= 1


def test_quadratic_kappa_equals_sklearn():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 60))
        a = rng.integers(1, 6, n)
        b = np.clip(a + rng.integers(-2, 3, n), 1, 5) if rng.random() < 0.7 else rng.integers(1, 6, n)
        if len(set(a)) == 1 and len(set(b)) == 1:
            continue
        want = cohen_kappa_score(a, b, labels=[1, 2, 3, 4, 5], weights="quadratic")
        assert quadratic_kappa(confusion(a, b)) == pytest.approx(want, abs=1e-12)
        st = pair_stats("a", a, "b", b, bootstrap=0)
        assert st.kappa == pytest.approx(want) and st.exact == pytest.approx(np.mean(a == b))
        assert st.within_one == pytest.approx(np.mean(np.abs(a - b) <= 1)) and st.confusion.sum() == n


def test_krippendorff_and_span_table():
    a = np.array([1, 2, 3, 4, 5, 1, 2, 2])
    rep = agreement({"x": a, "y": a.copy()}, bootstrap=200)
    assert rep.alpha_all == pytest.approx(1.0) and rep.span_counts == {"0": 8, "1": 0, ">=2": 0}
    assert rep.pairs[0].kappa == pytest.approx(1.0) and rep.pairs[0].ci["exact"] == (1.0, 1.0)
    b = np.array([1, 3, 3, 2, 5, 4, 2, 1])
    c = np.array([2, 2, 3, 4, 4, 1, 2, 2])
    rep = agreement({"a": a, "b": b, "c": c}, bootstrap=200, seed=1)
    span = np.max([a, b, c], 0) - np.min([a, b, c], 0)
    assert rep.span_counts == {"0": int((span == 0).sum()), "1": int((span == 1).sum()), ">=2": int((span >= 2).sum())}
    assert [(p.a, p.b) for p in rep.pairs] == [("a", "b"), ("a", "c"), ("b", "c")]
    import krippendorff

    want = krippendorff.alpha(reliability_data=np.array([a, b, c], float), level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5])
    assert rep.alpha_all == pytest.approx(want)
    assert rep.alpha_span_le1 == pytest.approx(krippendorff_ordinal(np.array([a, b, c])[:, span <= 1]))
    lo, hi = rep.pairs[0].ci["kappa_quadratic"]
    assert lo <= rep.pairs[0].kappa <= hi
    text = rep.format()
    assert "alpha_span<=1" in text and "span>=2" in text and "confusion (a rows, b columns)" in text


def test_load_ratings_aligns_by_name(tmp_path):
    a = {"x": {"risk_level": 1, "description": "d"}, "y": {"risk_level": 3, "description": "d"},
         "z": {"risk_level": 2, "description": "d"}, "only_a": {"risk_level": 2, "description": "d"}}
    b = {"z": {"risk_level": 2, "description": "d"}, "y": {"risk_level": None, "description": "d"},
         "x": {"risk_level": 2, "description": "d"}}
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    ratings, sources, names, notes = load_ratings([pa, pb])
    assert names == ["x", "z"] and ratings["A"].tolist() == [1, 2] and ratings["B"].tolist() == [2, 2]
    assert sources == {"A": str(pa), "B": str(pb)} and len(notes) == 2
    with pytest.raises(AuditError, match="two or more"):
        load_ratings([pa])


def test_confusion_png(tmp_path):
    rep = agreement({"a": np.array([1, 2, 3, 4]), "b": np.array([1, 2, 4, 4])}, bootstrap=0)
    path = confusion_png(rep, tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["riskrank", *args])
    try:
        code = cli_run()
    except SystemExit as exc:
        code = int(exc.code)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_audit_and_agreement(tmp_path, monkeypatch, capsys):
    out = tmp_path / "demo.json"
    code, text, _ = _cli(monkeypatch, capsys, "audit", "--registry", str(demo_registry_path()), "-a", "keyword", "--out", str(out))
    assert code == 0 and "98 new vote(s)" in text
    assert default_side_paths(out)[0].exists()
    reg = ToolRegistry.load(out)
    assert reg.has_labels and reg["read_file"].parameters is not None
    code, text, _ = _cli(monkeypatch, capsys, "audit", "--registry", str(demo_registry_path()), "-a", "keyword", "--out", str(out))
    assert code == 0 and "0 new vote(s), 98 from" in text
    js, png = tmp_path / "agr.json", tmp_path / "agr.png"
    code, text, _ = _cli(monkeypatch, capsys, "agreement", str(demo_registry_path()), str(out), "--json", str(js),
                         "--png", str(png), "--bootstrap", "100")
    assert code == 0 and "A vs B" in text and png.exists()
    stats = json.loads(js.read_text())
    assert stats["n_tools"] == 98 and set(stats["pairs"][0]) >= {"exact", "within_one", "kappa_quadratic", "ci95", "confusion"}

    # A three-annotator audit of an MCP registry with a pending review, then --apply-review.
    mcp = tmp_path / "mcp.json"
    mcp.write_text(json.dumps({"tools": [
        {"name": "read_doc", "description": "Read a document", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
        {"name": "drop_table", "description": "Drop a database table", "inputSchema": {"type": "object"},
         "annotations": {"destructiveHint": True}}]}))
    votes = tmp_path / "mcp_labels.votes.jsonl"
    stamp = {"at": "2025-01-01T00:00:00Z"}
    lines = []
    from riskrank.annotators import tool_key
    from riskrank.audit import line_checksum

    for t in ToolRegistry.load(mcp):
        for ann, lv in (("openai:a", 1 if t.name == "read_doc" else 2), ("openai:b", 1 if t.name == "read_doc" else 5)):
            rec = {"tool": t.name, "key": tool_key(t), "annotator": ann, "config": "fixed", "level": lv, **stamp}
            lines.append({**rec, "sum": line_checksum(rec)})
    votes.write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.setattr("riskrank.annotators.make_annotator", lambda spec, **kw: _Logged(spec))
    labels = tmp_path / "mcp_labels.json"
    code, text, _ = _cli(monkeypatch, capsys, "audit", "--registry", str(mcp), "-a", "openai:a", "-a", "openai:b", "--out", str(labels))
    assert code == 0 and "1 tool(s) with span >= 2 await review" in text and "0 new vote(s), 4 from" in text
    rec = json.loads(labels.read_text())
    assert rec["drop_table"]["risk_level"] is None and rec["drop_table"]["annotations"] == {"destructiveHint": True}
    review = tmp_path / "mcp_labels.review.jsonl"
    entry = json.loads(review.read_text())
    entry["risk_level"] = 5
    review.write_text(json.dumps(entry) + "\n")
    code, text, _ = _cli(monkeypatch, capsys, "audit", "--apply-review", str(review), "--out", str(labels))
    assert code == 0 and "applied 1 review decision" in text
    assert ToolRegistry.load(labels).risk_levels.tolist() == [1, 5]
    code, text, _ = _cli(monkeypatch, capsys, "agreement", str(labels), "--bootstrap", "0")
    assert code == 0 and "openai:a vs openai:b" in text
    # Another registry audited into the same file would lose the reviewed decision: refused.
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"name": "read_doc", "description": "Read a document"}]))
    before = labels.read_text()
    code, _, err = _cli(monkeypatch, capsys, "audit", "--registry", str(other), "-a", "openai:a", "--out", str(labels))
    assert code == 2 and "holds 1 reviewed label(s) of tools this registry lacks ('drop_table')" in err
    assert labels.read_text() == before


class _Logged:
    """Stands for an annotator whose votes are all in the log already."""

    def __init__(self, name: str) -> None:
        self.name, self.config = name, "fixed"

    def annotate(self, tools):
        raise AssertionError(f"{self.name} should not be asked: {[t.name for t in tools]}")


@pytest.mark.parametrize(("args", "msg"), [
    (["audit", "--out", "x.json", "-a", "keyword"], "exactly one of --registry"),
    (["audit", "--registry", "REG", "--out", "x.json"], "at least one --annotator"),
    (["audit", "--registry", "REG", "--out", "x.json", "-a", "magic"], "unknown annotator 'magic'"),
    (["audit", "--registry", "REG", "--out", "x.json", "-a", "head:/no/such/ckpt"], "no such checkpoint"),
    (["audit", "--apply-review", "r.jsonl", "--out", "x.json", "-a", "keyword"], "--apply-review updates --out"),
    (["audit", "--apply-review", "missing.jsonl", "--out", "missing.json"], "no such label file"),
    (["agreement", "REG"], "two or more label files"),
    (["agreement", "REG", "missing.json"], "no such file"),
])
def test_cli_errors_are_one_line(tmp_path, monkeypatch, capsys, args, msg):
    monkeypatch.chdir(tmp_path)
    args = [str(demo_registry_path()) if a == "REG" else a for a in args]
    code, _, err = _cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith("error: ") and msg in err and len(err.strip().splitlines()) == 1


def test_cli_incomplete_audit_exits_1(tmp_path, monkeypatch, capsys):
    reg = tmp_path / "r.json"
    reg.write_text(json.dumps([{"name": "a", "description": "x"}, {"name": "b", "description": "y"}]))
    monkeypatch.setattr("riskrank.annotators.make_annotator", lambda spec, **kw: Fixed(spec, {"a": 2, "b": "HTTP 500 (gave up)"}))
    code, _, err = _cli(monkeypatch, capsys, "audit", "--registry", str(reg), "-a", "openai:m", "--out", str(tmp_path / "l.json"))
    assert code == 1 and "1 tool(s) lack a vote" in err
    assert json.loads((tmp_path / "l.json").read_text())["b"]["resolution"] == INCOMPLETE


def test_a_review_file_it_cannot_read_is_left_as_it_is_and_each_file_is_its_own(tmp_path, monkeypatch, capsys):
    """A typo in one decision of the review file: the rerun is refused with the line named, and
    the file (with every decision typed into it) is left as it was; --votes naming the input
    registry is refused before anything is written; a vote-log line too deep or with a number
    too long to read is skipped, not a traceback."""
    reg = tmp_path / "reg.json"
    reg.write_text(json.dumps({"tools": [{"name": f"t{i}", "description": d} for i, d in
                                         enumerate(["Delete every record of the database.", "Read a note.", "Send an email."])]}))
    code, _, err = _cli(monkeypatch, capsys, "audit", "--registry", str(reg), "-a", "keyword", "--votes", str(reg),
                        "--out", str(tmp_path / "l.json"))
    assert code == 2 and "--votes and --registry name one file" in err and json.loads(reg.read_text())["tools"]
    review = tmp_path / "l.review.jsonl"
    review.write_text('{"name": "t0", "risk_level": 6}\n')
    before = review.read_text()
    code, _, err = _cli(monkeypatch, capsys, "audit", "--registry", str(reg), "-a", "keyword", "--out", str(tmp_path / "l.json"))
    assert code == 2 and "line 1" in err and "left as it is" in err and review.read_text() == before
    review.unlink()
    log = next(tmp_path.glob("l.votes*"))
    with log.open("a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n" + "9" * 5000 + "\n")
    code, _, err = _cli(monkeypatch, capsys, "audit", "--registry", str(reg), "-a", "keyword", "--out", str(tmp_path / "l.json"))
    assert code == 0 and "Traceback" not in err, err


def test_a_file_that_is_not_a_vote_log_is_neither_appended_to_nor_cut(tmp_path):
    """--votes given another file (a queries file without a final newline): appending would
    break it and repairing its 'torn' last line would cut a record. Refused, untouched."""
    from riskrank.audit import VoteLog

    queries = tmp_path / "q.jsonl"
    queries.write_bytes(b'{"task": "read my notes", "gold": ["read_notes"]}\n{"task": "send it", "gold": ["send"]}')
    before = queries.read_bytes()
    with pytest.raises(AuditError, match="not a vote log"), VoteLog(queries):
        pass
    assert queries.read_bytes() == before
    torn = tmp_path / "v.jsonl"
    torn.write_bytes(b'{"annotator": "keyword", "config": "x", "to')  # the first vote, cut by a kill
    with VoteLog(torn) as log:
        assert log.repaired and torn.read_bytes() == b""
