"""The four training corpora (BFCL, APIBench, API-Bank, ToolAlpaca) on the real files: every count
is computed again here from the raw files, the same-name variants and the gold that points at the
offered one; then bad input on small temporary copies (a missing file, a wrong sha256 at fetch, a
garbled line, a name reused with another description, gold that is not a tool)."""

from __future__ import annotations

import csv
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from riskrank.datasets import CORPORA, DATASETS, load_benchmark, load_corpora
from riskrank.datasets.apibank import APIS, gloss_type
from riskrank.datasets.apibench import DOCS, SPLITS, instruction, split_file
from riskrank.datasets.bfcl import CATEGORIES, IRRELEVANCE, RELEVANCE, answer_file, question_file
from riskrank.datasets.corpora import PROTOCOL, ToolPool
from riskrank.datasets.fetch import ManifestEntry, fetch, load_manifest
from riskrank.datasets.toolalpaca import FILES as TA_FILES
from riskrank.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = load_manifest()


def corpus_entries(corpus: str) -> list[ManifestEntry]:
    return [e for e in MANIFEST if e.corpus == corpus]


def _find_corpus_dir() -> Path | None:
    """$RISKRANK_DATA, else the checkout's data/, else $RISKRANK_MIRROR: the first holding every corpus file."""
    for c in (os.environ.get("RISKRANK_DATA"), ROOT / "data", os.environ.get("RISKRANK_MIRROR")):
        if c and all((Path(c) / e.rel_path).is_file() for e in MANIFEST if e.corpus):
            return Path(c)
    return None


CORPUS_DIR = _find_corpus_dir()
needs_corpora = pytest.mark.skipif(
    CORPUS_DIR is None, reason="corpus files not found (run `riskrank data fetch --source MIRROR --dest DIR`, set RISKRANK_DATA)")


@pytest.fixture(scope="module")
def cdir() -> Path:
    assert CORPUS_DIR is not None
    return CORPUS_DIR


@pytest.fixture(scope="module")
def corpora(cdir):
    loaded, errors = load_corpora(CORPORA, cdir)
    assert errors == {}
    return loaded


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def norm(text: str) -> str:
    return " ".join(text.split())


def upstream(tool) -> str:
    return tool.extra.get("upstream_name", tool.name)


def copy_corpus(src: Path, dst: Path, corpus: str) -> Path:
    """A writable copy of one corpus's files (the shared mirror is read-only)."""
    for e in corpus_entries(corpus):
        target = dst / e.rel_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / e.rel_path, target)
    return dst


# -- the manifest -----------------------------------------------------------------------------------
def test_manifest_tags_the_corpus_files():
    counts = Counter(e.corpus for e in MANIFEST)
    assert counts == {None: 11, "bfcl": 24, "apibench": 7, "apibank": 266, "toolalpaca": 3,
                      "attack": 836, "bfcl-multi-turn": 29, "bipia": 5}
    assert all(e.mirrored and e.sha256 and e.license for e in MANIFEST if e.corpus)
    assert all(e.license is None for e in MANIFEST if e.corpus is None)
    paths = {e.rel_path for e in MANIFEST if e.corpus}
    for lic in ("ShishirPatil/gorilla/LICENSE", "AlibabaResearch/DAMO-ConvAI/api-bank/LICENSE", "tangqiaoyu/ToolAlpaca/LICENSE",
                "mitre/cti/LICENSE.txt", "microsoft/BIPIA/LICENSE"):
        assert lic in paths  # the licenses travel with the data
    assert DATASETS == ("ultratool", "sealtools", "demo") and CORPORA == ("bfcl", "apibench", "apibank", "toolalpaca")


# -- BFCL ------------------------------------------------------------------------------------------
@needs_corpora
def test_bfcl_counts(corpora, cdir):
    b = corpora["bfcl"]
    qs = b.splits["all"]
    assert list(b.splits) == ["all"] and b.train is qs and b.protocol == PROTOCOL
    names, variants, pairs = set(), set(), Counter()
    for cat in CATEGORIES:
        for rec in jsonl(cdir / question_file(cat)):
            for fn in rec["function"]:
                names.add(fn["name"])
                variants.add((fn["name"], norm(fn["description"])))
            pairs[cat] += cat != IRRELEVANCE
    assert len(names) == 1647 and len(variants) == 2486 and len(b.registry) == len(variants)
    assert len({upstream(t) for t in b.registry}) == len(names)
    assert {(upstream(t), t.description) for t in b.registry} == variants
    assert len(qs) == sum(pairs.values()) == 2517 and qs.n_skipped == 0
    assert Counter(m["category"] for m in qs.meta) == +pairs and pairs[RELEVANCE] == 16
    assert b.negatives is not None and len(b.negatives) == 884 and b.negatives.name == IRRELEVANCE
    assert sum(len(g) == 1 for g in qs.gold) == 2299 and round(float(np.mean([len(g) for g in qs.gold])), 2) == 1.14
    assert len({upstream(b.registry[int(i)]) for g in qs.gold for i in g}) == 1154
    assert all(t.risk_level is None for t in b.registry) and len(set(qs.ids)) == len(qs)
    assert any("841 later variants" in n for n in b.notes) and any("884 negative" in n for n in b.notes)


@needs_corpora
def test_bfcl_gold_is_the_offered_variant(corpora, cdir):
    b = corpora["bfcl"]
    qs = b.splits["all"]
    reg = b.registry
    by_id = dict(zip(qs.ids, zip(qs.gold, qs.meta, strict=True), strict=True))
    n_live_variant_gold = 0
    for cat in CATEGORIES:
        if cat == IRRELEVANCE:
            continue
        answers = {} if cat == RELEVANCE else {r["id"]: r["ground_truth"] for r in jsonl(cdir / answer_file(cat))}
        for rec in jsonl(cdir / question_file(cat)):
            gold, meta = by_id[rec["id"]]
            offered = {fn["name"]: norm(fn["description"]) for fn in rec["function"]}
            cands = [reg[n] for n in meta["candidates"]]
            assert [(upstream(t), t.description) for t in cands] == list(offered.items())
            want = set(offered) if cat == RELEVANCE else {k for call in answers[rec["id"]] for k in call}
            tools = [reg[int(i)] for i in gold]
            assert {upstream(t) for t in tools} == want
            for t in tools:  # the very variant this entry showed, not another of the same name
                assert t.description == offered[upstream(t)] and t.name in meta["candidates"]
                n_live_variant_gold += t.name != upstream(t)
    assert n_live_variant_gold > 100  # many gold tools are later variants: naming by name alone would be wrong


@needs_corpora
def test_bfcl_variant_names(corpora):
    reg = corpora["bfcl"].registry
    groups: dict[str, list] = {}
    for t in reg:
        groups.setdefault(upstream(t), []).append(t)
    for name, tools in groups.items():
        for t in tools:
            if t.name != name:
                assert t.name == f"{name} (variant {t.extra['variant']})" and t.extra["variant"] >= 2
    math_gcd = [t.name for t in groups["math.gcd"]]
    assert math_gcd[0] == "math.gcd" and math_gcd[1:] == [f"math.gcd (variant {k})" for k in range(2, len(math_gcd) + 1)]
    # names that differ only in case are two tools the registry would refuse as one name: numbered too
    # (one numbering per look-alike group, so no two registry names look alike either)
    assert [t.name for t in groups["calculate_BMI"]] == ["calculate_BMI (variant 2)"]
    assert [t.name for t in groups["calculate_bmi"]] == ["calculate_bmi", *(f"calculate_bmi (variant {k})" for k in (3, 4, 5))]
    assert "calculate BMI (variant 2): " in reg["calculate_BMI (variant 2)"].text()


@needs_corpora
def test_bfcl_negatives(corpora, cdir):
    b = corpora["bfcl"]
    neg = b.negatives
    raw = jsonl(cdir / question_file(IRRELEVANCE))
    assert neg.ids == [r["id"] for r in raw] and not set(neg.ids) & set(b.splits["all"].ids)
    assert all(m["category"] == IRRELEVANCE and all(c in b.registry for c in m["candidates"]) for m in neg.meta)
    assert [len(m["candidates"]) for m in neg.meta] == [len(r["function"]) for r in raw]  # 4 entries offer none
    first = raw[0]
    assert neg.texts[0] == "\n".join(t["content"] for c in first["question"] for t in c if t["role"] == "user")


# -- APIBench ---------------------------------------------------------------------------------------
@needs_corpora
def test_apibench_counts(corpora, cdir):
    b = corpora["apibench"]
    qs = b.splits["all"]
    doc_keys = {(r["framework"], r["api_call"]) for rel in DOCS for r in jsonl(cdir / rel)}
    lines = {s: jsonl(cdir / split_file(s)) for s in SPLITS}
    gold_keys = {(r["api_data"]["framework"], r["api_data"]["api_call"]) for rs in lines.values() for r in rs}
    assert len(doc_keys) == 1074 and len(gold_keys) == 724 and len(gold_keys - doc_keys) == 50
    assert len(b.registry) == len(doc_keys | gold_keys) == 1124  # the 50 gold calls without a doc line are tools too
    assert {(t.extra["framework"], upstream(t)) for t in b.registry} == doc_keys | gold_keys
    assert [len(v) for v in lines.values()] == [911, 688, 186, 837]
    assert len(qs) == 2622 and qs.n_skipped == 0 and Counter(m["split"] for m in qs.meta) == {s: len(v) for s, v in lines.items()}
    rows = [r for rs in lines.values() for r in rs]
    for rec, g, text in zip(rows, qs.gold, qs.texts, strict=True):
        (t,) = [b.registry[int(i)] for i in g]
        assert (t.extra["framework"], upstream(t)) == (rec["api_data"]["framework"], rec["api_data"]["api_call"])
        assert text and "Instruction" not in text[:20] and "###Output" not in text and "'Output':" not in text
    assert len({int(g[0]) for g in qs.gold}) == 724
    assert sum("###Input:" in t for t in qs.texts) == 96  # the instruction's example input is part of it


def test_apibench_instruction_layouts():
    assert instruction("###Instruction: Find a model.\n###Output: {'api_call': 'x'}") == "Find a model."
    assert instruction("### Instruction: No output marker here") == "No output marker here"
    assert instruction("{'Instruction': \"Quoted, with a comma\", 'Output': {'domain': 'x'}}") == "Quoted, with a comma"
    assert instruction("{'Instruction': Unquoted text., 'Output': {}}") == "Unquoted text."
    assert instruction("no instruction") is None and instruction("###Instruction:   \n###Output: x") is None


# -- API-Bank --------------------------------------------------------------------------------------
@needs_corpora
def test_apibank_counts(corpora, cdir):
    b = corpora["apibank"]
    qs = b.splits["all"]
    with (cdir / APIS).open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(b.registry) == 101 and b.registry.names == [r["类名"] for r in rows]
    dialogues = [e for e in corpus_entries("apibank") if "/lv1-lv2-samples/" in e.rel_path]
    assert len(dialogues) == 264 and len(qs) == 261 and qs.n_skipped == 3
    assert Counter(m["level"] for m in qs.meta) == {1: 212, 2: 49}
    gold = [{b.registry[int(i)].name for i in g} for g in qs.gold]
    assert len(set().union(*gold)) == 49 and "ToolSearcher" not in b.registry
    assert round(float(np.mean([len(g) for g in gold])), 2) == 1.72
    for qid, g in zip(qs.ids, gold, strict=True):
        turns = jsonl(cdir / f"AlibabaResearch/DAMO-ConvAI/api-bank/lv1-lv2-samples/{qid}.jsonl")
        assert g == {t["api_name"] for t in turns if t["role"] == "API"} - {"ToolSearcher"}
    types = Counter(t.extra["type_en"] for t in b.registry)
    assert types["get information - database query"] == 30 and types["other AI model"] == 11
    assert types["external effect - database operation - delete"] == 12
    delete = b.registry["DeleteAccount"]
    assert delete.extra["type"] == "对外影响 - 数据库操作 - 删" and delete.extra["scenario_en"] == "account management"
    assert delete.description.startswith("Delete account API") and delete.risk_level is None
    assert b.registry["ImageCaption"].description == "Image Caption"  # its api_info is "." upstream
    assert any("ImageCaption" in n for n in b.notes)


def test_apibank_type_gloss():
    assert gloss_type("对外影响 - 数据库操作 - 改") == "external effect - database operation - modify"
    assert gloss_type("获取信息 - 外界信息查询") == "get information - external information query"
    assert gloss_type("其他AI模型") == "other AI model" and gloss_type("新类型") == "新类型"


# -- ToolAlpaca -------------------------------------------------------------------------------------
@needs_corpora
def test_toolalpaca_counts(corpora, cdir):
    b = corpora["toolalpaca"]
    qs = b.splits["all"]
    entries = [e for rel in TA_FILES.values() for e in json.loads((cdir / rel).read_text(encoding="utf-8"))]
    funcs = [f"{e['Name']}.{f}" for e in entries for f in e["Function_Description"]]
    assert len(entries) == 21 and len(funcs) == 115  # 21 of them are 'components' (output types, not functions)
    assert b.registry.names == [f for f in funcs if not f.endswith(".components")] and len(b.registry) == 94
    n_instr = sum(len(e["Instructions"]) for e in entries)
    assert n_instr == 214 and len(qs) + qs.n_skipped == n_instr and qs.n_skipped == 5
    assert len({int(i) for g in qs.gold for i in g}) == 88
    assert b.registry["Nager.Date.CountryCountryInfo"].description == "Get country info for the given country"
    assert any("getDetails" in n for n in b.notes) and any("5 queries skipped" in n for n in b.notes)


# -- load_benchmark / load_corpora -----------------------------------------------------------------
@needs_corpora
def test_load_benchmark_knows_the_corpora(cdir):
    b = load_benchmark("toolalpaca", cdir)
    assert b.name == "toolalpaca" and len(b.registry) == 94
    with pytest.raises(DataError, match="takes no options"):
        load_benchmark("apibank", cdir, query_mode="plan")
    with pytest.raises(DataError, match=r"unknown dataset 'toolbench'; choose from .*bfcl"):
        load_benchmark("toolbench", cdir)


# -- bad input -------------------------------------------------------------------------------------
@needs_corpora
def test_missing_file_names_it_and_the_others_still_load(cdir, tmp_path):
    d = copy_corpus(cdir, tmp_path / "data", "toolalpaca")
    copy_corpus(cdir, d, "apibank")
    (d / TA_FILES["simulated"]).unlink()
    loaded, errors = load_corpora(["toolalpaca", "apibank", "nonesuch"], d)
    assert list(loaded) == ["apibank"] and len(loaded["apibank"].splits["all"]) == 261
    assert "eval_simulated.json: missing benchmark file; run `riskrank data fetch" in errors["toolalpaca"]
    assert "unknown corpus 'nonesuch'" in errors["nonesuch"]
    with pytest.raises(DataError, match=r"does not exist; run `riskrank data fetch"):
        load_benchmark("bfcl", tmp_path / "nowhere")


@needs_corpora
def test_fetch_refuses_a_wrong_sha256_and_lands_the_rest(cdir, tmp_path):
    entries = corpus_entries("toolalpaca") + [e for e in corpus_entries("apibank") if e.bytes == 0]
    mirror = copy_corpus(cdir, tmp_path / "mirror", "toolalpaca")
    empty = mirror / entries[-1].rel_path
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"")  # pinned empty upstream: fetched like any other file
    bad = mirror / TA_FILES["real"]
    bad.write_bytes(bad.read_bytes().replace(b"Nager.Date", b"Nager.Data", 1))
    dest = tmp_path / "data"
    with pytest.raises(DataError, match=r"eval_real\.json: sha256 mismatch") as ei:
        fetch(mirror, dest, manifest=entries, progress=False)
    report = ei.value.report  # type: ignore[attr-defined]
    assert report.status(TA_FILES["real"]) == "error"
    assert sorted(report.with_status("fetched")) == sorted(e.rel_path for e in entries if e.rel_path != TA_FILES["real"])
    assert not (dest / TA_FILES["real"]).exists() and (dest / TA_FILES["simulated"]).is_file()
    assert (dest / entries[-1].rel_path).read_bytes() == b""


@needs_corpora
def test_garbled_and_empty_lines(cdir, tmp_path):
    d = copy_corpus(cdir, tmp_path / "data", "apibank")
    dialogue = next(d / e.rel_path for e in corpus_entries("apibank") if e.rel_path.endswith("AddAgenda-level-1-1.jsonl"))
    lines = dialogue.read_text(encoding="utf-8").splitlines()
    dialogue.write_text("\n\n".join(lines) + "\n\n", encoding="utf-8")  # empty lines are skipped
    assert len(load_benchmark("apibank", d).splits["all"]) == 261
    dialogue.write_text("\n".join([lines[0], '{"role": "User", "text": "cut off', *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"AddAgenda-level-1-1\.jsonl: line 2: invalid JSON"):
        load_benchmark("apibank", d)
    dialogue.write_text("\n".join([lines[0], '{"role": "Robot"}']) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"AddAgenda-level-1-1\.jsonl: line 2: not an API-Bank turn"):
        load_benchmark("apibank", d)
    dialogue.write_bytes(b'{"role": "User", "text": "\xff"}\n')
    with pytest.raises(DataError, match=r"AddAgenda-level-1-1\.jsonl: not UTF-8"):
        load_benchmark("apibank", d)


@needs_corpora
def test_api_info_is_parsed_never_run(cdir, tmp_path):
    d = copy_corpus(cdir, tmp_path / "data", "apibank")
    path = d / APIS
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)
    marker = tmp_path / "ran"
    rows[2]["api_info"] = f"description = open({str(marker)!r}, 'w').write('x')"

    def write() -> None:
        with path.open("w", encoding="utf-8", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)

    write()
    with pytest.raises(DataError, match=r"all_apis\.csv: row 3 \(line \d+\) \(\w+\): api_info has no description"):
        load_benchmark("apibank", d)
    assert not marker.exists()
    rows[2]["api_info"] = 'description = "unclosed'
    write()
    with pytest.raises(DataError, match=r"row 3 .*api_info is not a Python snippet"):
        load_benchmark("apibank", d)


@pytest.fixture
def alpaca(tmp_path):
    """A writable ToolAlpaca copy and a function to rewrite its simulated set."""
    assert CORPUS_DIR is not None
    d = copy_corpus(CORPUS_DIR, tmp_path / "data", "toolalpaca")
    path = d / TA_FILES["simulated"]
    entries = json.loads(path.read_text(encoding="utf-8"))

    def rewrite(new: list[dict]) -> None:
        path.write_text(json.dumps(new), encoding="utf-8")

    return d, entries, rewrite


@needs_corpora
def test_same_name_other_description_is_a_variant_and_gold_follows_it(alpaca):
    d, entries, rewrite = alpaca
    base = load_benchmark("toolalpaca", d)
    first = entries[0]
    fn, doc = next(iter(first["Function_Description"].items()))
    other = {"Name": first["Name"], "Category": "x",
             "Function_Description": {fn: "Another text for the same name\nParameters: {}", "components": ""},
             "Instructions": ["use the other one"], "Golden_Answers": [[{"Action": fn, "Action_Input": "{}"}]]}
    same = {**other, "Function_Description": {fn: doc}, "Instructions": ["use the first one"]}
    rewrite([*entries, other, same])
    b = load_benchmark("toolalpaca", d)
    qs = b.splits["all"]
    name = f"{first['Name']}.{fn}"
    assert len(b.registry) == len(base.registry) + 1 and f"{name} (variant 2)" in b.registry
    variant = b.registry[f"{name} (variant 2)"]
    assert variant.description == "Another text for the same name" and variant.extra["upstream_name"] == name
    assert [b.registry[int(i)].name for i in qs.gold[-2]] == [f"{name} (variant 2)"]
    assert [b.registry[int(i)].name for i in qs.gold[-1]] == [name]  # identical definition: merged into the first
    assert any("1 later variants" in n for n in b.notes) and any("repeated tool definitions merged" in n for n in b.notes)


@needs_corpora
def test_gold_not_in_registry_is_counted_not_patched(alpaca):
    d, entries, rewrite = alpaca
    e = dict(entries[0])
    fn = next(iter(e["Function_Description"]))
    e["Instructions"] = ["only an unknown action", "one known, one unknown"]
    e["Golden_Answers"] = [[{"Action": "noSuchAction", "Action_Input": "{}"}],
                           [{"Action": fn, "Action_Input": "{}"}, {"Action": "alsoMissing", "Action_Input": "{}"}]]
    rewrite([e])
    b = load_benchmark("toolalpaca", d)
    qs = b.splits["all"]
    sim = [m["set"] == "simulated" for m in qs.meta]
    assert sum(sim) == 1 and qs.n_skipped == 5 + 1
    assert [b.registry[int(i)].name for i in qs.gold[sim.index(True)]] == [f"{e['Name']}.{fn}"]
    assert any("8 gold names are not tools" in n for n in b.notes) and any("6 queries skipped" in n for n in b.notes)


@needs_corpora
def test_python_literal_fields(alpaca):
    d, entries, rewrite = alpaca
    e = dict(entries[0])
    e["Instructions"] = repr(e["Instructions"])
    e["Golden_Answers"] = repr(e["Golden_Answers"])
    e["Function_Description"] = repr(e["Function_Description"])
    rewrite([e])
    assert len(load_benchmark("toolalpaca", d).splits["all"]) == 114 + len(entries[0]["Instructions"]) - 5
    e["Instructions"] = "['unterminated"
    rewrite([e])
    with pytest.raises(DataError, match=r"eval_simulated\.json: entry 0 \(.+\): Instructions: not a Python literal"):
        load_benchmark("toolalpaca", d)
    e["Instructions"] = "__import__('os').getcwd()"
    rewrite([e])
    with pytest.raises(DataError, match="Instructions: not a Python literal"):
        load_benchmark("toolalpaca", d)


# -- the pool on its own ----------------------------------------------------------------------------
def test_tool_pool_naming():
    pool = ToolPool("mem")
    assert pool.add("get_weather", "Weather now.", where="r0") == "get_weather"
    assert pool.add("get_weather", "  Weather   now. ", where="r1") == "get_weather"  # same text once cleaned
    assert pool.add("get_weather", "Forecast.", where="r2") == "get_weather (variant 2)"
    assert pool.add("Get_Weather", "Other.", where="r3") == "Get_Weather (variant 3)"
    assert pool.add("get_weather (variant 2)", "A real tool with that name.", where="r4") == "get_weather (variant 2) (variant 2)"
    assert pool.add("x", "one", where="r5", key=("fw1", "x")) == "x"
    assert pool.add("x", "one", where="r6", key=("fw2", "x")) == "x (variant 2)"  # identity by key, not by text
    reg = pool.registry()
    assert len(reg) == 6 and pool.n_repeats == 1 and pool.n_variants == 4 and pool.n_look_alike == 2
    with pytest.raises(DataError, match=r"r7.*'name' must be a non-empty string"):
        pool.add("", "x", where="r7")
