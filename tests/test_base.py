"""riskrank-base: the build (deterministic, through the normal fit/save path), the default
checkpoint of every surface, levels for unaudited tools with their provenance, and the bad
registries a new user brings (names only, five tools, Chinese descriptions, null hints)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import riskrank.base as base
from riskrank.cli import main as cli
from riskrank.errors import RegistryError
from riskrank.registry import ToolRegistry
from riskrank.risk import resolve_levels

ROOT = Path(__file__).resolve().parents[1]
MCP_LIST = ROOT / "examples" / "registries" / "mcp_filesystem_tools_list.json"
shipped = pytest.mark.skipif(base.default_checkpoint() is None, reason="no base model built (make base-model)")


# -- which checkpoint a surface loads -----------------------------------------------------------
def test_resolve_checkpoint(tmp_path, monkeypatch):
    assert base.resolve_checkpoint("runs/x") == ("runs/x", None)
    assert base.resolve_checkpoint("none") == (None, None)
    monkeypatch.setattr(base, "MODEL_DIR", tmp_path / "missing")
    ck, note = base.resolve_checkpoint(None)
    assert ck is None and "make base-model" in note
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "checkpoint.json").write_text(json.dumps({"encoder": {"identity": "enc-a"}}))
    monkeypatch.setattr(base, "MODEL_DIR", tmp_path / "model")
    assert base.resolve_checkpoint(None, "enc-a") == (str(tmp_path / "model"), None)
    ck, note = base.resolve_checkpoint(None, "enc-b")
    assert ck is None and "'enc-a'" in note and "dense, bm25 and hybrid" in note


# -- levels of unaudited tools ----------------------------------------------------------------
def _reg(records):
    return ToolRegistry.from_data(records, fmt="plain")


def test_resolve_levels_order_of_trust():
    reg = _reg([
        {"name": "wipe_disk", "description": "erase everything", "risk_level": 2},  # audited wins
        {"name": "get_weather", "description": "the forecast"},
        {"name": "remove_records", "description": "delete rows from a table"},
        {"name": "fetch_page", "description": "read a page", "annotations": {"destructiveHint": True}},
        {"name": "list_items", "description": "list things", "annotations": {"readOnlyHint": True}},
    ])
    head = np.array([5, 1, 2, 1, 4])
    levels, prov, ev = resolve_levels(reg, head, (head - 1) / 4)
    assert levels.tolist()[0] == 2 and prov[0] == "audited"
    assert levels[1] == 1 and prov[1] == "predicted" and ev[1][0].startswith("risk head: L1")
    assert levels[2] >= 4 and prov[2] == "keyword" and any("remove" in e for e in ev[2])
    assert levels[3] == 4 and prov[3] == "annotation" and "mcp: destructiveHint raises the level to L4" in ev[3]
    # an untrusted readOnlyHint never lowers what the head says
    assert levels[4] == 4 and prov[4] == "predicted" and any("not trusted" in e for e in ev[4])
    trusted, tprov, _ = resolve_levels(reg, head, (head - 1) / 4, trust_annotations=True)
    assert trusted[4] == 2 and tprov[4] == "annotation"


def test_read_only_hint_contradicted_is_ignored_even_when_trusted():
    reg = _reg([{"name": "purge_directory", "description": "remove every file older than N days",
                 "annotations": {"readOnlyHint": True}}])
    levels, _, ev = resolve_levels(reg, np.array([4]), np.array([0.8]), trust_annotations=True)
    assert levels[0] == 4 and any("contradicted" in e for e in ev[0])


def test_annotations_null_missing_and_non_boolean():
    ok = _reg([{"name": "a", "description": "x", "annotations": {"destructiveHint": None, "readOnlyHint": None}},
               {"name": "b", "description": "y"}])
    assert ok["a"].annotations is None and ok["b"].annotations is None
    with pytest.raises(RegistryError, match=r"record 0 \('a'\): annotation 'destructiveHint' must be true, false or null"):
        _reg([{"name": "a", "description": "x", "annotations": {"destructiveHint": "yes"}}])


def test_names_only_registry_and_labels_naming_unknown_tools():
    reg = ToolRegistry.from_data(["delete_old_logs", "listFiles", "get_weather"])
    assert [t.description for t in reg] == ["delete old logs", "list Files", "get weather"]
    with pytest.raises(RegistryError, match=r"the labels name 1 tool\(s\) not in the registry: 'no_such_tool'"):
        reg.with_risk_levels({"get_weather": 1, "no_such_tool": 4}, unknown="error")
    assert reg.with_risk_levels({"no_such_tool": 4})["get_weather"].risk_level is None  # default: ignored


# -- the build ---------------------------------------------------------------------------------
def _digests(folder: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())}


def test_reduced_build_is_deterministic_and_loads(tmp_path, monkeypatch, encoder, demo, torch_single_thread):
    """A reduced base model (the demo registry, 2 epochs) built twice: byte-identical files,
    a checkpoint every surface loads, the zero-shot form (no embedding residual) and a card."""
    from riskrank.checkpoint import load_checkpoint
    from riskrank.training.base_model import BaseConfig, Source, build_base, save_base

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764547200")
    src = Source("demo", demo.registry, list(demo.train.texts), list(demo.train.gold), "train")
    out = []
    for name in ("a", "b"):
        built = build_base([src], BaseConfig(seed=3, epochs=2), encoder=encoder)
        out.append(save_base(built, tmp_path / name))
    assert _digests(out[0]) == _digests(out[1])
    ck = load_checkpoint(out[0], encoder_identity=encoder.identity)
    arrays = ck.model.arrays
    assert not arrays["relevance_head.v.weight"].any() and not arrays["relevance_head.l2.weight"].any()
    card = json.loads((out[0] / base.CARD_JSON).read_text())
    assert card["name"] == "riskrank-base" and card["training_data"][0]["benchmark"] == "demo"
    assert "zero_shot_settings" in card["rules"] and set(card["inference"]["pipelines"]) >= {"core", "core+graph+rule"}
    assert card["files"]["heads.safetensors"] == ck.meta["weights_sha256"]
    assert (out[0] / base.CARD_MD).read_text().startswith("# riskrank-base")
    # The context stage's need head: the zero-shot one (candidate-risk features), in the saved
    # files and in the in-memory retriever the transfer study evaluates alike.
    assert built.retriever.checkpoint.need_head is built.retriever.training.need_head
    assert ck.need_head.features == ("cand",) and built.retriever.checkpoint.meta["need_head"]["features"] == ["cand"]
    assert np.allclose(ck.need_head.w, built.retriever.checkpoint.need_head.w)


def test_fixed_fusion_in_train_config(make_synthetic):
    from riskrank.errors import RiskrankError
    from riskrank.training import TrainConfig

    assert TrainConfig(fusion={"rule": "convex", "norm": "z", "weight": 0.3, "k": None}).resolved().fusion["weight"] == 0.3
    with pytest.raises(RiskrankError, match="fusion weight"):
        TrainConfig(fusion={"rule": "convex", "norm": "z", "weight": 3.0, "k": None}).resolved()


# -- the shipped model ----------------------------------------------------------------------------
@shipped
def test_shipped_card_and_size():
    folder = base.default_checkpoint()
    card = base.model_card()
    assert card["name"] == "riskrank-base"
    assert {d["benchmark"] for d in card["training_data"]} == {"ultratool", "sealtools"}
    assert all(f["sha256"] and f["commit"] for d in card["training_data"] for f in d["files"])
    assert any("contaminated" in n for d in card["training_data"] for n in d["notes"])
    assert sum(f.stat().st_size for f in folder.iterdir()) < 5 * 2**20
    assert card["files"] == {k: v for k, v in _digests(folder).items() if k in card["files"]}


@shipped
def test_retrieve_without_checkpoint_uses_the_base_model_with_provenance():
    res = CliRunner().invoke(cli, ["retrieve", "--registry", str(MCP_LIST), "delete the old log files", "--mode", "rule"])
    assert res.exit_code == 0, res.output
    assert "mode core+graph+rule" in res.output and "provenance" in res.output and "evidence:" in res.output
    assert "predicted" in res.output or "annotation" in res.output or "keyword" in res.output
    res = CliRunner().invoke(cli, ["retrieve", "--registry", str(MCP_LIST), "delete the old log files", "--json"])
    doc = json.loads(res.output)
    assert doc["mode"] == "core+graph+rule"
    assert all(t["risk_provenance"] in ("predicted", "keyword", "annotation") and t["risk_evidence"] for t in doc["tools"])
    delete = next((t for t in doc["tools"] if t["name"] == "delete_file"), None)
    assert delete is None or delete["effective_level"] >= 4  # destructiveHint only raises


@shipped
def test_other_encoder_keeps_encoder_only_modes(tmp_path):
    from riskrank.catalogue import ArtefactSpec, load_catalogue
    from test_server_support import HashEncoder

    cat = load_catalogue(ArtefactSpec(str(MCP_LIST)), HashEncoder())
    assert not cat.has_heads and cat.retriever.mode == "dense+rule" and "dense, bm25 and hybrid" in cat.notes[0]
    assert cat.retriever.retrieve("delete the old log files", k=3).tools


BAD_REGISTRIES = {
    "names only": ["delete_old_logs", "list_files", "read_file", "send_email", "get_weather"],
    "five tools": [{"name": f"tool_{i}", "description": d} for i, d in
                   enumerate(["list files", "delete a file", "send an email", "read a file", "run a shell command"])],
    "chinese and mixed scripts": [
        {"name": "shanchu_wenjian", "description": "永久删除指定的文件"},
        {"name": "liechu_mulu", "description": "列出目录中的所有文件"},
        {"name": "search_docs", "description": "搜索文档 search documents by keyword"},
        {"name": "тест_запуск", "description": "Запустить команду bash на сервере"},
        {"name": "get_weather", "description": "天気予報 weather forecast"},
    ],
    "null and missing hints": [
        {"name": "read_text_file", "description": "read a file", "annotations": {"readOnlyHint": True, "destructiveHint": None}},
        {"name": "delete_file", "description": "delete a file", "annotations": {"destructiveHint": True, "openWorldHint": None}},
        {"name": "list_directory", "description": "list a folder"},
    ],
}


@shipped
@pytest.mark.parametrize("kind", list(BAD_REGISTRIES))
def test_every_mode_on_registries_nobody_trained_on(kind, encoder):
    from riskrank.catalogue import ArtefactSpec, load_catalogue

    reg = ToolRegistry.from_data(BAD_REGISTRIES[kind])
    cat = load_catalogue(ArtefactSpec(f"<{kind}>"), encoder, registry=reg)
    assert cat.has_heads and cat.retriever.mode == "core+graph+rule"
    for mode in ("dense", "bm25", "hybrid", "core", "core+graph", "core+graph+rule", "core+graph+rule_pred".removesuffix("_pred")):
        res = cat.retriever.retrieve("delete the old files", k=3, mode=mode)
        assert len(res.tools) <= 3 and all(t.risk_provenance for t in res.tools)
    assert set(cat.provenance) <= {"predicted", "keyword", "annotation"}
    levels = dict(zip(reg.names, cat.effective_levels, strict=True))
    if "delete_file" in levels:
        assert levels["delete_file"] >= 4


def test_source_date_epoch_sets_the_sidecar_time(monkeypatch):
    from riskrank.checkpoint import _created

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert _created() == "1970-01-01T00:00:00Z"
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert _created() != "1970-01-01T00:00:00Z" or os.environ.get("SOURCE_DATE_EPOCH")


@shipped
@pytest.mark.slow
def test_100k_tool_registry_through_the_ann_path():
    """10^5 unaudited tools (random embeddings in the base model's space) with the base
    model's heads, the IVF first stage and the rule filter: a top-5 with provenance."""
    from riskrank.encoder import ArrayEncoder
    from riskrank.pipeline import RiskAwareRetriever

    rng = np.random.default_rng(0)
    n, dim = 100_000, 384
    verbs = ["list", "read", "delete", "upload", "run", "send", "search", "update"]
    records = [{"name": f"{verbs[i % 8]}_item_{i}", "description": f"{verbs[i % 8]} item number {i}"} for i in range(n)]
    reg = ToolRegistry.from_data(records)
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    task = "delete the old log files"
    enc = ArrayEncoder({task: rng.standard_normal(dim).astype(np.float32)}, identity=base.base_encoder_identity())
    r = RiskAwareRetriever(reg, encoder=enc, checkpoint=base.default_checkpoint(), tool_emb=emb, first_stage="ann",
                           mode="core+graph+rule", progress=False)
    res = r.retrieve(task, k=5)
    assert 1 <= len(res.tools) <= 5 and all(t.risk_provenance in ("predicted", "keyword") for t in res.tools)
    assert sum(t.effective_level >= 3 for t in res.tools) <= 1  # the rule filter's risk cap


@shipped
def test_shipped_model_was_built_by_this_code_and_data():
    """The shipped files' recorded fingerprint (without rebuilding): the training code of the
    base build, the level model's files and the mirrored data files hash as they did when the
    model was built, and the time stamp and thread count it was built with are the ones
    `make base-model` pins. A change to any of them fails here, naming it: rebuild with
    `make base-model` (and commit the files) in the same change."""
    from riskrank.training.base_model import BUILD_CODE, stale_files

    card = base.model_card()
    fp = card.get("fingerprint")
    assert fp, "the shipped card has no fingerprint: rebuild with `make base-model`"
    assert sorted(fp["code"]) == sorted(BUILD_CODE)
    assert stale_files(card) == [], "the shipped model predates these files: rebuild with `make base-model`"
    assert card["files"] == {k: v for k, v in _digests(base.MODEL_DIR).items() if k not in (base.CARD_JSON, base.CARD_MD)}
    pinned = dict(line.replace(" ", "").split("?=") for line in (ROOT / "Makefile").read_text().splitlines()
                  if line.startswith(("BASE_EPOCH", "BASE_THREADS")))
    assert fp["build"] == {"threads": int(pinned["BASE_THREADS"]), "source_date_epoch": pinned["BASE_EPOCH"]}
    assert len(fp["recorded"]["served_levels"]) == 64


def test_fingerprint_covers_the_training_code_not_the_engine():
    """What the fingerprint compares: the training code, not every module a build imports (a
    docstring edit in the pipeline or the CLI does not demand a rebuild; a change to the
    training code, the level model's files or the data does, and is named)."""
    from riskrank.training.base_model import BUILD_CODE, stale_files

    assert all(f.startswith("riskrank/training/") for f in BUILD_CODE)
    assert not {"riskrank/training/levels.py", "riskrank/training/poison.py"} & set(BUILD_CODE)
    now = {f: hashlib.sha256((ROOT / "src" / f).read_bytes()).hexdigest() for f in BUILD_CODE}
    card = {"fingerprint": {"code": {**now, "riskrank/training/choices.py": "0" * 64}, "level_model": {"levels.json": "2" * 64},
                            "data": {"no/such/file.json": "1" * 64}}}
    assert stale_files(card) == ["code:riskrank/training/choices.py", "data:no/such/file.json", "level_model:levels.json"]
    card["fingerprint"] = {"code": {k: v for k, v in now.items() if k != "riskrank/training/risk.py"}, "level_model": {}, "data": {}}
    assert stale_files(card) == ["code:riskrank/training/risk.py"]  # training code the card does not cover
    assert stale_files({}) == ["fingerprint"]


@shipped
def test_model_folder_that_does_not_match_its_card_is_refused(tmp_path, monkeypatch, capsys):
    """A card beside files of another build (or files beside another card): one line, exit 2."""
    import shutil

    from riskrank.checkpoint import CARD_FILE, load_checkpoint
    from riskrank.errors import CheckpointError

    assert CARD_FILE == base.CARD_JSON
    folder = shutil.copytree(base.MODEL_DIR, tmp_path / "model")
    load_checkpoint(folder)  # a copy of the shipped model loads
    card = json.loads((folder / CARD_FILE).read_text())
    card["files"]["heads.safetensors"] = "0" * 64
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match=r"heads.safetensors: does not match its model card \(card.json records sha256 "
                                              r"000000000000, the file is sha256 [0-9a-f]{12}\)"):
        load_checkpoint(folder)
    from riskrank.cli import run

    monkeypatch.setattr("sys.argv", ["riskrank", "retrieve", "--registry", str(MCP_LIST), "--checkpoint", str(folder),
                                     "delete the old log files"])
    assert run() == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not match its model card" in err and "Traceback" not in err
    card["files"] = {"../checkpoint.json": "0" * 64}
    (folder / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(CheckpointError, match="not a file name with a sha256"):
        load_checkpoint(folder)


@shipped
@pytest.mark.slow
def test_full_rebuild_matches_the_shipped_model(tmp_path, monkeypatch, data_dir):
    """`make base-model` again (its time stamp; the thread count the shipped card records),
    compared file by file with the shipped files' sha256."""
    import torch

    from riskrank.training.base_model import BaseConfig, build_base, load_sources, save_base

    card = base.model_card()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", card["fingerprint"]["build"]["source_date_epoch"])
    threads = torch.get_num_threads()
    torch.set_num_threads(card["fingerprint"]["build"]["threads"])
    try:
        built = build_base(load_sources(data_dir=data_dir), BaseConfig(seed=card["configuration"]["seed"]))
    finally:
        torch.set_num_threads(threads)
    out = save_base(built, tmp_path / "model", transfer=card.get("transfer"))
    assert {k: v for k, v in _digests(out).items() if k not in (base.CARD_JSON, base.CARD_MD)} == card["files"]


def test_graph_of_a_registry_without_training_queries_is_cached(encoder):
    from riskrank.pipeline import RiskAwareRetriever

    reg = ToolRegistry.from_data(BAD_REGISTRIES["five tools"])
    a = RiskAwareRetriever(reg, encoder=encoder, progress=False).graph
    b = RiskAwareRetriever(reg, encoder=encoder, progress=False).graph
    assert a is b and a.stats()["edges"].get("co", 0) == 0


@shipped
def test_audit_head_annotator_is_the_base_risk_head(encoder):
    from riskrank.annotators import make_annotator

    ann = make_annotator("head", encoder=encoder)
    reg = ToolRegistry.from_data(BAD_REGISTRIES["five tools"])
    votes = dict(ann.annotate(list(reg)))
    assert ann.name == "head" and len(votes) == 5 and all(1 <= v.level <= 5 for v in votes.values())
    assert votes[4].level >= 3  # "run a shell command"


def _transfer_lobo():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "transfer_lobo.py"
    spec = importlib.util.spec_from_file_location("transfer_lobo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_transfer_study_context_modes_and_verdicts(encoder, demo, torch_single_thread):
    """The leave-one-benchmark-out script on a reduced base model: the zero-shot build carries
    context settings (so the context modes rank) and the run keeps them; the summary carries
    Safe-RVR@5 and NeedRisk-Hit@5 with a verdict per target, "undefined" where a registry has
    no such queries."""
    from riskrank.training.base_model import (
        REPORT_MODES,
        BaseConfig,
        Source,
        build_base,
        evaluate_modes,
        risk_agreement,
        summarise,
    )

    lobo = _transfer_lobo()
    src = Source("demo", demo.registry, list(demo.train.texts), list(demo.train.gold), "train")
    built = build_base([src], BaseConfig(seed=3, epochs=2), encoder=encoder)
    ck = built.retriever.checkpoint
    ctx = lobo.context_record(built)
    assert set(ck.meta["inference"]["context"]) == set(lobo.CONTEXT_MODES) and ctx["settings"] == ck.meta["inference"]["context"]
    assert set(ctx["selected"]) == set(lobo.CONTEXT_MODES) and "val_auc" in ctx["need_head"]
    qs = demo.splits["test"]
    emb = encoder.encode(demo.registry.texts())
    pq = evaluate_modes(ck, demo.registry, emb, encoder.encode(qs.texts), qs.texts, qs.gold, encoder,
                        modes=(*REPORT_MODES, *lobo.CONTEXT_MODES))
    methods = summarise(pq)
    reg = {"methods": methods, "risk": risk_agreement(ck, demo.registry, emb), "n_subsets": {}}
    # a held-out registry without high-risk queries: NeedRisk-Hit@5 is undefined there
    blank = {"methods": {m: {**v, "needrisk_hit@5": None} for m, v in methods.items()}, "risk": reg["risk"], "n_subsets": {}}
    runs = {f"ultratool->sealtools|{s}": {"seed": s, "sealtools": blank, "demo": reg} for s in (1, 2)}
    summary = lobo.summarise_runs({"runs": runs})["ultratool->sealtools"]
    verdict = summary["demo"]["context"]["core+graph+context+rule"]
    assert set(verdict) == {"safe_rvr@5", "needrisk_hit@5", "ndcg@5", "met_all"}
    assert verdict["ndcg@5"]["bound"] == pytest.approx(methods["core+graph"]["ndcg@5"])
    assert summary["demo"]["methods"]["core+graph+context"]["ndcg@5"][1] == 0.0  # the same run twice: std 0
    assert summary["sealtools"]["context"]["core+graph+context"]["needrisk_hit@5"]["met"] is None
    assert summary["sealtools"]["best_within_rvr"] not in lobo.CONTEXT_MODES
    md = lobo.context_table_md({"ultratool->sealtools": summary})
    assert "undefined (no such queries)" in md and "core+graph+context+rule" in md
    # The frontier: every (mode, lambda); core at lambda 0 is rel_only; the best point is the
    # highest NDCG@5 within the RVR@5 limit, and 1.03x is reachable only when it gets there.
    fr = lobo.frontier(ck, demo.registry, emb, encoder.encode(qs.texts), list(qs.texts), list(qs.gold), encoder)
    assert len(fr) == len(lobo.FRONTIER_MODES) * len(lobo.FRONTIER_LAMS)
    assert fr["core|0"]["ndcg@5"] == pytest.approx(methods["rel_only"]["ndcg@5"], abs=1e-4)  # summarise rounds to 4 places
    limit = fr["core+graph+rule|0"]["rvr@5"]
    f = lobo.frontier_summary([fr, fr], base=0.5, limit=limit)
    within = [v["ndcg@5"] for v in fr.values() if v["rvr@5"] <= limit + 1e-12]
    assert f["best_ndcg"] == pytest.approx(max(within)) and f["best_rvr"] <= limit + 1e-12
    assert f["reachable"] == (max(within) >= 1.03 * 0.5)
    assert lobo.frontier_summary([fr], base=0.5, limit=-1.0)["best"] is None


def test_the_library_names_the_base_model(encoder):
    """``checkpoint="riskrank-base"`` loads the base model every surface uses by default; a rule
    mode without any checkpoint says how to get one."""
    from riskrank import RiskAwareRetriever
    from riskrank.base import default_checkpoint
    from riskrank.datasets.demo import demo_registry_path
    from riskrank.errors import RiskrankError

    if default_checkpoint() is None:
        pytest.skip("no base model in this checkout")
    reg = ToolRegistry.load(demo_registry_path())
    r = RiskAwareRetriever(reg, checkpoint="riskrank-base")
    res = r.retrieve("delete the old log files", k=3, mode="rule")
    assert res.tools and res.settings is not None and res.settings.mode == res.mode
    assert all(t.risk_level == r.tool_levels.levels[t.index] for t in res.tools)
    # Without checkpoint= the library loads the base model too, and runs the surfaces' default mode.
    default = RiskAwareRetriever(reg, encoder=r.encoder, tool_emb=r.tool_emb)
    assert default.checkpoint is not None and default.mode == "core+graph+rule" and default.checkpoint_note is None
    assert [t.name for t in default.retrieve("delete the old log files", k=3).tools] == [
        t.name for t in r.retrieve("delete the old log files", k=3, mode="core+graph+rule").tools]
    for none in (None, "none"):
        with pytest.raises(RiskrankError, match="riskrank-base"):
            RiskAwareRetriever(reg, encoder=r.encoder, checkpoint=none).retrieve("delete the old log files", mode="rule")


def test_union_renames_look_alike_names():
    """Two sources whose tool names differ only by case (``translate``, ``Translate``) make one
    union registry: the later source's name gets its source appended, as a shared name does."""
    from riskrank.training.base_model import Source, union_registry

    a = _reg([{"name": "translate", "description": "translate a text"}, {"name": "get_weather", "description": "the forecast"}])
    b = _reg([{"name": "Translate", "description": "translate words"}, {"name": "get_weather", "description": "weather"}])
    union, owner = union_registry([Source("a", a, [], [], "all"), Source("b", b, [], [], "all")])
    assert [t.name for t in union] == ["translate", "get_weather", "Translate@b", "get_weather@b"]
    assert owner.tolist() == [0, 0, 1, 1]


def test_a_source_without_audited_levels(tmp_path, encoder, demo, torch_single_thread):
    """A source whose tools nobody audited builds: its reference levels (what the choices
    read) are the keyword annotator's, never 0 (not risky in RVR, L5 in the rule filter); and
    the retriever in memory holds the zero-shot heads its saved files hold, while
    ``residual_model`` keeps the heads as fitted."""
    from riskrank.checkpoint import load_checkpoint
    from riskrank.risk import keyword_levels
    from riskrank.training.base_model import (
        BaseConfig,
        Source,
        build_base,
        reference_levels,
        save_base,
    )

    plain = demo.registry.with_risk_levels({t.name: None for t in demo.registry})
    assert plain.n_unlabelled == len(plain)
    ref = reference_levels(plain)
    assert (ref > 0).all() and np.array_equal(ref, keyword_levels(plain))
    assert reference_levels(demo.registry) is demo.registry.risk_levels
    texts, gold = list(demo.train.texts), list(demo.train.gold)
    built = build_base([Source("demo", demo.registry, texts, gold, "train"), Source("plain", plain, texts[:30], gold[:30], "all")],
                       BaseConfig(seed=3, epochs=2), encoder=encoder)
    assert built.card["training_data"][1]["n_audited_tools"] == 0
    out = save_base(built, tmp_path / "m")
    saved = load_checkpoint(out, encoder_identity=encoder.identity).model.arrays
    mem = built.retriever.checkpoint.model.arrays
    assert set(saved) == set(mem) and all(np.array_equal(saved[k], mem[k]) for k in saved)
    assert not mem["relevance_head.v.weight"].any()
    assert set(built.residual_model.arrays) == set(mem)


# -- the penalty on served levels ----------------------------------------------------------------
def test_level_penalty_reorders_only_across_the_risky_line():
    """lambda times [level >= 3]: a risky tool moves below the tools that are not; no order
    within either side changes, whatever lambda."""
    from riskrank.first_stage import rank
    from riskrank.heads import level_penalty

    levels = np.array([1, 2, 3, 5, 1, 4, 2])
    pen = level_penalty(levels)
    assert pen.dtype == np.float32 and pen.tolist() == [0, 0, 1, 1, 0, 1, 0]
    rel = np.random.default_rng(0).standard_normal((20, len(levels))).astype(np.float32)
    for lam in (0.25, 1.0, 8.0):
        order, plain = rank(rel - np.float32(lam) * pen), rank(rel)
        for side in (pen == 0, pen == 1):
            for a, b in zip(order, plain, strict=True):
                assert [int(t) for t in a if side[t]] == [int(t) for t in b if side[t]]


@shipped
def test_shipped_penalty_reads_the_served_levels(encoder):
    """The shipped model's lambda multiplies [served level >= 3] outside the context stage:
    the scores of a lambda are the lambda-0 scores minus lambda on the tools served risky."""
    from riskrank.heads import level_penalty
    from riskrank.pipeline import RiskAwareRetriever

    reg = ToolRegistry.load(MCP_LIST)
    r = RiskAwareRetriever(reg, encoder=encoder, progress=False)
    assert r.checkpoint.inference["penalty_source"] == r.penalty_source == "levels"
    texts = ["delete the old log files", "read a file"]
    q = encoder.encode(texts)
    pen = level_penalty(r.tool_levels.levels)
    assert pen.any() and not pen.all()
    a, b = r.rank_batch(q, mode="core", lam=0.0, texts=texts), r.rank_batch(q, mode="core", lam=2.0, texts=texts)
    for i in range(len(q)):
        sa = dict(zip(a.order[i].tolist(), a.score[i].tolist(), strict=True))
        sb = dict(zip(b.order[i].tolist(), b.score[i].tolist(), strict=True))
        assert all(abs(sb[t] - (sa[t] - 2.0 * pen[t])) < 1e-5 for t in sa)


@shipped
@pytest.mark.parametrize("unaudited", [False, True])
def test_demo_weather_question_shows_no_deployment_tool(unaudited):
    """The demo's weather question (demo-05) on the shipped model: what riskrank serves by
    default holds no tool served at L3 or above, deploy_to_production (L4) included, and puts
    the forecast first; plain relevance ranking (which may list it: the model built on
    2026-12-06 did, today's build does not) puts the forecast first too."""
    import riskrank.experiments.demo as demo_mod

    lists = demo_mod.run_demo(["demo-05"], echo=lambda s: None, unaudited=unaudited)["demo-05"]
    default = next(v for k, v in lists.items() if k.startswith("riskrank default"))
    assert default.tools[0].name == "get_weather_forecast"
    for name, shown in lists.items():  # every risk-aware column the demo prints (the default, the context stage)
        if not name.startswith("relevance only"):
            assert "deploy_to_production" not in [t.name for t in shown.tools], name
            assert all(t.effective_level < 3 for t in shown.tools), name
    plain = next(v for k, v in lists.items() if k.startswith("relevance only"))
    assert plain.tools[0].name == "get_weather_forecast"


def test_levels_table_applies_the_rule_fixed_before_the_runs():
    """benchmarks/transfer_loco.py's before/after table of the served-levels penalty: each run's
    verdict is `core+graph` >= 0.98 x `rel_only` with RVR@5 <= 0.8 x dense, on the after run."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import transfer_loco

    def run(cg: tuple[float, float], lam: float) -> dict:
        m = {"bm25": (0.5, 0.3), "dense": (0.6, 0.25), "rel_only": (0.65, 0.24), "core+graph": cg, "core+graph+rule": (0.6, 0.05)}
        return {"held_out": {"methods": {k: {"ndcg@5": a, "rvr@5": b} for k, (a, b) in m.items()}},
                "pipelines": {"core+graph": {"lam": lam}, "core+graph+rule": {"lam": 1.0}}}

    before = {"runs": {"apibank|42": run((0.55, 0.1), 5.0), "bfcl|42": run((0.55, 0.1), 2.0)}}
    after = {"runs": {"apibank|42": run((0.64, 0.19), 1.0), "bfcl|42": run((0.64, 0.21), 1.0), "toolalpaca|42": run((0.6, 0.1), 1.0)}}
    md, verdicts = transfer_loco.levels_table(before, after)
    assert verdicts == {"bfcl|42": False, "apibank|42": True}  # 0.21 > 0.8 x 0.25; only the shared runs
    assert "5 → 1" in md and "0.550 / 0.100 → 0.640 / 0.190" in md and md.count("\n") == 3


def test_levels_seed_table_counts_the_seeds_that_meet_the_rule():
    """The served-levels runs over their seeds: per registry, the seeds meeting the rule and each
    ratio's mean and range; the mean over registries of `core+graph` against the better baseline."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import transfer_loco

    def run(cg: tuple[float, float]) -> dict:
        m = {"bm25": (0.5, 0.3), "dense": (0.6, 0.25), "rel_only": (0.65, 0.24), "core+graph": cg}
        return {"held_out": {"methods": {k: {"ndcg@5": a, "rvr@5": b} for k, (a, b) in m.items()}}}

    after = {"runs": {"bfcl|42": run((0.64, 0.19)), "bfcl|123": run((0.60, 0.19)), "apibank|42": run((0.66, 0.21))}}
    md, met = transfer_loco.levels_seed_table(after)
    assert met == {"bfcl": [42], "apibank": []}  # 0.60 < 0.98 x 0.65; 0.21 > 0.8 x 0.25
    assert "| bfcl | 42, 123 | 1 of 2 |" in md and "1.033 (1.000–1.067) ×" in md
    assert "| mean over the registries | | | | 1.067 × (target 1.10 ×) | |" in md
