"""``riskrank evaluate``, ``retrieve``, ``train`` and ``graph stats``: the library's verbs."""

from __future__ import annotations

import json
from typing import Any

import click

from riskrank.cli.common import (
    STDOUT,
    echo,
    emit_json,
    fmt,
    json_option,
    level_model_option,
    mode_option,
    not_an_input,
    parse_seeds,
    print_table,
    trust_annotations_option,
)
from riskrank.datasets import DATASETS
from riskrank.errors import RiskrankError
from riskrank.modes import FIRST_STAGES, RISK_SOURCES

# -- evaluate -----------------------------------------------------------------------------------
CONTRACT_COLUMNS = ("ndcg@5", "mrr", "sndcg@5", "rvr@5", "srr@5")


@click.command()
@click.option("--dataset", type=click.Choice(DATASETS), default=None, help="A named benchmark (or --registry with --queries).")
@click.option("--registry", type=click.Path(dir_okay=False), default=None,
              help="Evaluate on this registry file (any format riskrank loads) instead of a benchmark.")
@click.option("--queries", type=click.Path(dir_okay=False), default=None, metavar="Q.jsonl",
              help='With --registry: the evaluation queries, one {"task": ..., "gold": [tool names]} per line.')
@click.option("--train-queries", type=click.Path(dir_okay=False), default=None, metavar="T.jsonl",
              help="With --registry: training queries (same format) the trained methods train on; without them they "
                   "are evaluated zero-shot from --checkpoint (default: the shipped base model).")
@click.option("--labels", type=click.Path(dir_okay=False), default=None, metavar="L.json",
              help="With --registry: audited risk levels ({name: {\"risk_level\": 1-5}}); tools without one take "
                   "predicted levels, reported as predicted.")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None,
              help="Evaluate this checkpoint's trained methods zero-shot (no training in the run) [default with --registry "
                   "and no --train-queries: the shipped base model; none: no heads, untrained methods only].")
@click.option("--allow-contaminated", is_flag=True,
              help="Run a checkpoint's methods even on queries it trained on, labelled contaminated (refused by default).")
@click.option("--name", default=None, help="The dataset name in the results [default: the registry file's stem].")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None, help="Data directory (a mirror directory works too).")
@click.option("--methods", default=None,
              help="Comma-separated: bm25, dense, hybrid, dense+rule, risk_label_penalty, mmr, rel_only, core, core+graph, "
                   "core+graph+rule, core+graph+rule_pred, paper_rel_only, paper_core, top100/core, ... "
                   "(variants: core@lam=2, core+graph[edges=co+sem], core[relevance=dense], ce:MODEL) "
                   "[default: bm25,dense; with --registry: bm25,dense,hybrid,dense+rule,core,core+graph,core+graph+rule].")
@click.option("--query-mode", type=click.Choice(["question", "plan"]), default="question", show_default=True,
              help="UltraTool query text: the question, or the plan steps that call a tool.")
@click.option("--seeds", default="42,123,777", show_default=True, help="Seeds for trained methods.")
@click.option("--encoder", default=None, help="sentence-transformers model name or folder [default: bundled all-MiniLM-L6-v2].")
@click.option("--selection", default=None, help="Lambda rule on validation without the rule filter: budget:R (default budget:0.65), ucb:R or utility:W.")
@click.option("--rule-selection", default=None, help="The same for the pipelines with the rule filter (default budget:0.4).")
@json_option("the results-contract document")
@click.option("--all-metrics", is_flag=True, help="Print every metric, not only the paper's five.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def evaluate(dataset: str | None, registry: str | None, queries: str | None, train_queries: str | None, labels: str | None,
             checkpoint: str | None, allow_contaminated: bool, name: str | None, data_dir: str | None, methods: str | None,
             query_mode: str, seeds: str, encoder: str | None, selection: str | None, rule_selection: str | None,
             json_out: str | None, all_metrics: bool, quiet: bool) -> None:
    """Evaluate retrieval methods on a benchmark (--dataset) or on any registry (--registry
    with --queries) and print NDCG@5, MRR, sNDCG@5, RVR@5, SRR@5."""
    from riskrank.evaluation.methods import parse_methods

    if methods is not None:
        parse_methods(methods)  # fail on a bad method name before any data is read
    not_an_input({"--json": json_out}, (registry, queries, train_queries, labels))
    if bool(dataset) == bool(registry):
        raise RiskrankError("give --dataset NAME, or --registry FILE with --queries FILE")
    overrides = {k: v for k, v in (("selection", selection), ("rule_selection", rule_selection)) if v}
    from riskrank.training.config import parse_selection

    for option, rule in (("--selection", selection), ("--rule-selection", rule_selection)):
        if rule:  # checked whether or not a run trains: a bad rule never passes unread
            try:
                parse_selection(rule)
            except RiskrankError as exc:
                raise RiskrankError(f"{option}: {exc}") from None
    if registry and (selection or rule_selection) and not train_queries:
        raise RiskrankError("--selection and --rule-selection choose lambda when a run trains: add --train-queries "
                            "(without it nothing is trained, and they would be ignored)")
    if registry:
        if query_mode != "question":
            raise RiskrankError("--query-mode applies to UltraTool only")
        if not queries:
            raise RiskrankError("--registry needs --queries (JSONL of {\"task\": ..., \"gold\": [tool names]})")
        from riskrank.evaluation.registry_eval import evaluate_registry

        ev = evaluate_registry(registry, queries, train_queries=train_queries, labels=labels, checkpoint=checkpoint,
                               methods=methods, seeds=parse_seeds(seeds), encoder=encoder, name=name,
                               allow_contaminated=allow_contaminated, train_overrides=overrides, progress=not quiet)
        run, res, notes = ev.run, ev.results_json(), list(ev.run.notes)
    else:
        given = [f"--{o}" for o, v in (("queries", queries), ("train-queries", train_queries), ("labels", labels), ("name", name)) if v]
        if given:
            raise RiskrankError(f"{', '.join(given)} go with --registry, not --dataset")
        from riskrank.datasets import load_benchmark
        from riskrank.evaluation.runner import run_evaluation

        kwargs = {"query_mode": query_mode} if dataset == "ultratool" else {}
        if dataset != "ultratool" and query_mode != "question":
            raise RiskrankError("--query-mode applies to UltraTool only")
        bench = load_benchmark(dataset, data_dir, **kwargs)  # type: ignore[arg-type]
        run = run_evaluation(bench, methods or "bm25,dense", seeds=parse_seeds(seeds), encoder=encoder, train_overrides=overrides,
                             progress=not quiet, checkpoint=checkpoint, allow_contaminated=allow_contaminated)
        res, notes = run.results_json(), list(run.notes)
        res["query_mode"] = query_mode
    if json_out == STDOUT:  # stdout is the document; notes go to stderr
        for note in notes:
            echo(f"note: {note}", err=True)
        emit_json(res, json_out)
        return
    show_evaluation(run, res, notes, all_metrics)
    if json_out:
        echo("")
        emit_json(res, json_out)


def show_evaluation(run: Any, res: dict[str, Any], notes: list[str], all_metrics: bool = False) -> None:
    """The evaluation as text: protocol, notes, one table per split (a method scored on
    queries its checkpoint trained on is marked contaminated)."""
    from riskrank.evaluation.methods import parse_method
    from riskrank.metrics import METRICS

    echo(f"{res['dataset']}: {res['protocol']}; encoder {run.encoder}; seeds {','.join(map(str, run.seeds))}")
    for note in notes:
        echo(f"note: {note}")
    contaminated = set((res.get("contaminated") or {}).get("methods") or [])
    cols = METRICS if all_metrics else CONTRACT_COLUMNS
    for split, block in res["splits"].items():
        echo(f"\n[{split}] {block['n_queries']} queries")
        rows = []
        for m, vals in block["methods"].items():
            spread = len(run.seeds) > 1 and not parse_method(m).seed_independent
            label = m + (" (contaminated)" if m in contaminated else "")
            rows.append([label, *[fmt(vals[c]["mean"]) + (f"±{fmt(vals[c]['std'])}" if spread else "") for c in cols]])
        print_table(rows, ["method", *cols])


# -- compare ------------------------------------------------------------------------------------
@click.command()
@click.argument("before", type=click.Path(dir_okay=False))
@click.argument("after", type=click.Path(dir_okay=False))
@click.option("--metrics", default="ndcg@5,rvr@5,srr@5", show_default=True, help="Comma-separated metrics to show (all: all).")
@click.option("--json", "as_json", is_flag=True, help="Print every row as JSON.")
def compare(before: str, after: str, metrics: str, as_json: bool) -> None:
    """Compare two results files (riskrank evaluate --json, riskrank reproduce): per split,
    method and metric the two means, their difference, and whether it lies within the seed
    spread (max of the two stds). Exit 0; the last line counts the rows outside."""
    from riskrank.evaluation.compare import compare as compare_files
    from riskrank.tables import text_table

    rows, notes = compare_files(before, after)
    if metrics != "all":
        wanted = [m.strip() for m in metrics.split(",") if m.strip()]
        known = sorted({r.metric for r in rows})
        unknown = [m for m in wanted if m not in known]
        if unknown:  # a typo must not compare nothing and report "0 outside the seed spread"
            raise RiskrankError(f"--metrics: {', '.join(map(repr, unknown))} is in neither file; they hold "
                                + ", ".join(known))
        rows = [r for r in rows if r.metric in wanted]
    if as_json:
        echo(json.dumps({"rows": [r.to_dict() for r in rows], "notes": notes}, indent=2))
        return
    for n in notes:
        echo(f"note: {n}")
    echo(text_table(["split", "method", "metric", "before", "after", "diff", "seed spread", "within"],
                          [[r.split, r.method, r.metric, f"{r.before:.4f}", f"{r.after:.4f}", f"{r.diff:+.4f}",
                            f"{r.spread:.4f}", "yes" if r.within else "NO"] for r in rows]))
    outside = sum(not r.within for r in rows)
    echo(f"{len(rows)} figures compared; {outside} outside the seed spread")


# -- retrieve -----------------------------------------------------------------------------------
@click.command()
@click.argument("task", required=False)
@click.option("--registry", type=click.Path(dir_okay=False), default=None, help="Tool registry file [default: the bundled demo registry].")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None,
              help="Checkpoint directory from `riskrank train` [default: the shipped base model, riskrank-base; `none`: no heads].")
@click.option("-k", "k", type=int, default=5, show_default=True)
@mode_option("Pipeline stages (the first names the relevance: dense, bm25, hybrid or core); graph = core+graph, "
             "rule = core+graph+rule [default: the strongest safe mode: core+graph+rule with heads, else dense+rule].")
@click.option("--lam", "lam", type=float, default=None, help="Risk weight lambda [default: the checkpoint's validated value; 0 for dense].")
@click.option("--alpha", type=float, default=None, help="Graph smoothing alpha [default: the checkpoint's].")
@click.option("--risk-source", type=click.Choice(RISK_SOURCES), default="labels", show_default=True,
              help="Risk levels the rule filter reads: audited labels, or the risk head's predictions.")
@click.option("--encoder", default=None, help="Encoder name or folder (must match the checkpoint's).")
@click.option("--candidates", type=click.IntRange(1), default=None,
              help="Rerank the first stage's top-M tools instead of the full pool [default: full pool].")
@click.option("--first-stage", type=click.Choice(FIRST_STAGES), default="exact", show_default=True,
              help="How the top-M is found: exact (the mode's first-stage scores over every tool), or an approximate IVF "
                   "index joined by BM25's best (10^5+ tools; M = 100 unless --candidates).")
@trust_annotations_option
@level_model_option
@json_option("the result (the table is not printed when it goes to stdout)")
def retrieve(task: str | None, registry: str | None, checkpoint: str | None, k: int, mode: str | None, lam: float | None,
             alpha: float | None, risk_source: str, encoder: str | None, candidates: int | None, first_stage: str,
             trust_annotations: bool, level_model: str, json_out: str | None) -> None:
    """Rank a registry's tools for TASK and show the top-k with scores, risk levels and
    permission categories (and, in rule modes, what was deferred and why).

    `--json` right before TASK (`retrieve --json "delete the logs"`) reads TASK as the task,
    not as a file name: with no other TASK, the word after `--json` is the task and the JSON
    goes to stdout."""
    from riskrank.base import resolve_checkpoint
    from riskrank.catalogue import level_model_arg
    from riskrank.datasets.demo import demo_registry_path
    from riskrank.encoder import Encoder
    from riskrank.modes import safe_default_mode
    from riskrank.pipeline import RiskAwareRetriever

    if task is None and json_out not in (None, STDOUT):
        task, json_out = json_out, STDOUT
    if task is None:
        raise click.UsageError("Missing argument 'TASK'.")
    not_an_input({"--json": json_out}, (registry,))
    enc = Encoder(encoder, progress=False)
    checkpoint, note = resolve_checkpoint(checkpoint, enc.identity)
    if note:
        echo(f"note: {note}", err=True)
    retriever = RiskAwareRetriever.from_paths(registry or demo_registry_path(), checkpoint, encoder=enc,
                                              mode=mode or safe_default_mode(checkpoint is not None), risk_source=risk_source, progress=False,
                                              candidates=candidates, first_stage=first_stage,
                                              trust_annotations=trust_annotations, level_model=level_model_arg(level_model))
    res = retriever.retrieve(task, k=k, lam=lam, alpha=alpha)
    if json_out != STDOUT:
        show_result(res)
    emit_json(res.to_dict(), json_out)


#: What the level columns of :func:`show_result` mean (they may differ: only ``level`` is enforced).
LEVEL_LEGEND = ("levels: level = the tool's one level, what the rule filter enforces and a gateway with no pins for it "
                "(provenance: its source; a policy's pins come first: riskrank levels review shows them);\n"
                "        audited = the registry's own; predicted = the risk head's (the keywords' where it has not learned), "
                "evidence only; - = none")


def show_result(res: Any, title: str | None = None) -> None:
    from riskrank.metrics import rvr_at_k, srr_at_k

    echo(title or f"task: {res.task}")
    echo(f"mode {res.mode}, lambda {res.lam:g}" + (f", alpha {res.alpha:g}" if "graph" in res.mode else "")
               + (f", risk source {res.risk_source}" if "rule" in res.mode else ""))
    rows = []
    for t in res.tools:
        audited = getattr(t, "audited_level", None)
        name = t.name + (" (named)" if getattr(t, "named", False) else "")
        rows.append([str(t.rank), name, fmt(t.score), fmt(t.f_rel), fmt(t.f_risk), f"L{t.risk_level}" if t.risk_level else "?",
                     getattr(t, "risk_provenance", None) or "-", f"L{audited}" if audited else "-",
                     f"L{t.predicted_level}" if t.predicted_level else "-", ",".join(t.permissions) or "-"])
    print_table(rows, ["#", "tool", "score", "f_rel", "f_risk", "level", "provenance", "audited", "predicted", "permissions"])
    echo(LEVEL_LEGEND)
    if any(getattr(t, "risk_evidence", None) and t.risk_provenance != "audited" for t in res.tools):
        echo("evidence:")
        for t in res.tools:
            if t.risk_evidence and t.risk_provenance != "audited":
                echo(f"  {t.name}: {'; '.join(t.risk_evidence)}")
    levels = [t.risk_level or 0 for t in res.tools]
    if levels and all(levels):
        import numpy as np

        arr = np.array([list(range(len(levels)))])
        lv = np.array(levels)
        echo(f"RVR@{len(levels)} {fmt(float(rvr_at_k(arr, lv, len(levels))[0]), 2)}   SRR@{len(levels)} {fmt(float(srr_at_k(arr, lv, len(levels))[0]), 2)}")
    context = getattr(res, "context", None)
    if context is not None:
        echo(f"need {context['need']:.2f} (threshold {context['threshold']:g}): "
                   + ("the task needs a risky tool" if context["needs_risk"] else "the task does not need a risky tool")
                   + f"; lambda {context['lambda']:g}, risk cap {context['risk_cap']}"
                   + (f"; admitted {context['admitted']}" if context.get("admitted") else ""))
        for t in res.tools:
            if getattr(t, "context", None):
                echo(f"  {t.name}: {t.context}")
    if res.deferred:
        echo("deferred by the rule filter:" if context is None else "deferred (rule filter or context stage):")
        for d in res.deferred:
            extra = f" (redundant with {d.redundant_with})" if d.redundant_with else ""
            named = " (named in the task; the caps still apply)" if getattr(d, "named", False) else ""
            why = f" ({d.context})" if getattr(d, "context", None) else ""
            echo(f"  {d.name}: {', '.join(d.reasons)}{extra}{named}{why}")
    if res.fallback:
        echo(f"fallback (too few tools met every rule): {', '.join(res.fallback)}")
    if res.unlabelled:
        echo(f"unlabelled tools treated as high risk (fail closed): {', '.join(res.unlabelled)}")
    below = getattr(res, "below_min_score", None)
    if below:
        echo(f"not shown, below the relevance floor (f_rel < {res.min_score:g}): {', '.join(below)}")
    for note in getattr(res, "notes", []):
        echo(f"note: {note}")


# -- train ----------------------------------------------------------------------------------------
@click.command()
@click.option("--dataset", type=click.Choice(DATASETS), default=None,
              help="Train on a benchmark's training split (UltraTool without dev.json: all test.json queries).")
@click.option("--registry", type=click.Path(dir_okay=False), default=None, help="A registry file (with --queries).")
@click.option("--queries", type=click.Path(dir_okay=False), default=None,
              help="JSONL of {\"task\": ..., \"gold\": [tool names]} for --registry.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None)
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Checkpoint directory to write.")
@click.option("--design", type=click.Choice(["residual", "paper"]), default="residual", show_default=True)
@click.option("--relevance", type=click.Choice(["hybrid", "dense"]), default=None,
              help="What the residual head reads: BM25 and the cosine (hybrid), or the cosine only [default: hybrid; paper: dense].")
@click.option("--penalty", type=click.Choice(["p_risky", "paper"]), default=None,
              help="What lambda multiplies: P(r >= 3) in logit space, or the paper's (r - 1) / 4 head [default: p_risky; paper: paper].")
@click.option("--sampling", type=click.Choice(["random", "hard", "mixed"]), default=None, help="Negatives [default: hard].")
@click.option("--epochs", type=click.IntRange(1), default=10, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--selection", default="budget:0.65", show_default=True, help="Lambda rule without the rule filter: budget:R, ucb:R or utility:W.")
@click.option("--rule-selection", default="budget:0.4", show_default=True, help="Lambda rule of the pipelines with the rule filter.")
@click.option("--encoder", default=None)
@click.option("--force", is_flag=True, help="Overwrite an existing checkpoint directory.")
@click.option("--base", is_flag=True, help="Build riskrank-base: heads on every benchmark of --benchmarks, in the zero-shot form "
                                           "(docs/base-model.md), with its model card.")
@click.option("--benchmarks", default="ultratool,sealtools", show_default=True, help="With --base: the benchmarks it trains on.")
@click.option("--max-queries", type=click.IntRange(1), default=None, help="With --base: at most N training queries per benchmark (a reduced build).")
@click.option("--transfer", "transfer_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --base: the leave-one-benchmark-out results (benchmarks/transfer_lobo.py) to put into the card.")
def train(dataset: str | None, registry: str | None, queries: str | None, data_dir: str | None, out: str, design: str,
          relevance: str | None, penalty: str | None, sampling: str | None, epochs: int, seed: int, selection: str,
          rule_selection: str, encoder: str | None, force: bool, base: bool, benchmarks: str, max_queries: int | None,
          transfer_file: str | None) -> None:
    """Train the dual-head reranker and write a checkpoint (heads, ToolGraph, the fusion and
    lambda/alpha per pipeline, all chosen on validation queries); with --base, the base model."""
    from riskrank.checkpoint import is_checkpoint_dir
    from riskrank.training import TrainConfig, fit_retriever

    if is_checkpoint_dir(out) and not force:
        raise RiskrankError(f"{out} already holds a checkpoint; pass --force to overwrite it")
    if base:
        _train_base(out, data_dir, benchmarks, seed, epochs, max_queries, encoder, transfer_file)
        return
    reg, texts, gold = _training_data(dataset, registry, queries, data_dir)
    cfg = TrainConfig(design=design, relevance=relevance, penalty=penalty, sampling=sampling, epochs=epochs, seed=seed,
                      selection=selection, rule_selection=rule_selection)
    r = fit_retriever(reg, texts, gold, encoder=encoder, train_config=cfg)
    r.save(out)
    tr = r.training
    echo(f"trained {design} heads ({tr.config.relevance} relevance, {tr.config.penalty} penalty) on {tr.counts['train_queries']} "
               f"queries (+{tr.counts['val_queries']} validation) in {tr.seconds:.1f}s")
    if tr.fusion is not None:
        echo(f"hybrid first stage: {tr.fusion.describe()} (chosen on the {tr.counts['train_queries'] + tr.counts['val_queries']} training queries)")
    sel = tr.validation.get("selected", {})
    echo(f"lambda {r.lam:g} (validation NDCG@5 {fmt(sel.get('ndcg@5'))}, RVR@5 {fmt(sel.get('rvr@5'))}), alpha {r.alpha:g}, "
               f"normalisation {r.normalisation}" + (f", residual weight {tr.validation['residual_weight']:g}" if "residual_weight" in tr.validation else ""))
    if r.pipelines:
        echo("per pipeline: " + "; ".join(f"{k} lambda {v['lam']:g}" + (f" alpha {v['alpha']:g}" if v["alpha"] else "")
                                             for k, v in r.pipelines.items()))
    q = tr.risk_quality
    if q:
        auc = "n/a" if q.get("heldout_auc") is None else f"{q['heldout_auc']:.3f}"
        echo(f"risk head: held-out AUC {auc}, predictions span {q['level_span']:.2f} levels"
                   + ("" if q["learned"] else f"; NOT LEARNED ({q['reason']}): predicted levels will be the keyword annotator's"))
    if tr.need_head is not None:
        n = tr.need_head.info
        auc = "n/a" if n.get("val_auc") is None else f"{n['val_auc']:.3f}"
        ctx = r.checkpoint.inference.get("context") or {}
        echo(f"need head: {'+'.join(n['features'])}, C {n['C']:g}, cross-validated AUC {auc} ({n['val_positives']} of "
                   f"{n['n_val']} queries need a risky tool; chosen by {n['chosen_by']}); "
                   + "; ".join(f"{k} threshold {v['tau']:g} margin {'none' if v['margin'] is None else format(v['margin'], 'g')}"
                               for k, v in ctx.items()))
    for note in tr.warnings:
        echo(f"note: {note}")
    echo(f"wrote {out}")


def _train_base(out: str, data_dir: str | None, benchmarks: str, seed: int, epochs: int, max_queries: int | None,
                encoder: str | None, transfer_file: str | None) -> None:
    from riskrank.datasets import DATASETS
    from riskrank.fileio import decode_json_bytes, loads_strict, read_regular_file
    from riskrank.training.base_model import BaseConfig, build_base, load_sources, save_base

    names = [b.strip() for b in benchmarks.split(",") if b.strip()]
    bad = [b for b in names if b not in DATASETS or b == "demo"]
    if bad or not names:
        raise RiskrankError(f"--benchmarks: unknown benchmark(s) {', '.join(bad) or '(none)'}; choose from ultratool, sealtools")
    transfer = None
    if transfer_file:
        doc = loads_strict(decode_json_bytes(read_regular_file(transfer_file), transfer_file), transfer_file)
        if not isinstance(doc, dict) or "summary" not in doc or "table_md" not in doc:
            raise RiskrankError(f"--transfer {transfer_file}: not a summarised transfer_lobo.py result (no summary / table_md)")
        # the same block benchmarks/transfer_lobo.py --card writes
        tables = "\n\n".join(str(doc[k]) for k in ("table_md", "context_table_md", "frontier_md") if doc.get(k))
        transfer = {"summary": doc["summary"], "table_md": tables, "command": "make transfer", "results": transfer_file}
    built = build_base(load_sources(names, data_dir), BaseConfig(seed=seed, epochs=epochs, max_queries=max_queries), encoder=encoder)
    path = save_base(built, out, transfer=transfer)
    card = built.card
    parts = [f"{d['benchmark']} ({d['n_queries']} {d['split']} queries)" for d in card["training_data"]]
    echo(f"riskrank-base on {', '.join(parts)}")
    echo(f"fusion {card['inference']['fusion']} (worst ratio to max(bm25, dense) {card['fusion_choice'].get('fusion_worst_ratio')})")
    echo("zero-shot pipelines: " + "; ".join(f"{k} lambda {v['lam']:g} alpha {v['alpha']:g}" for k, v in card["inference"]["pipelines"].items()))
    echo(f"risk head held-out AUC {card['risk_head']['heldout_auc']}")
    for d in card["training_data"]:
        for n in d["notes"]:
            echo(f"note: {n}")
    echo(f"wrote {path}")


def _training_data(dataset: str | None, registry: str | None, queries: str | None, data_dir: str | None):
    from riskrank.registry import ToolRegistry

    if dataset and (registry or queries):
        raise RiskrankError("give either --dataset or --registry with --queries, not both")
    if dataset:
        from riskrank.datasets import load_benchmark

        b = load_benchmark(dataset, data_dir)
        qs = b.train if b.train is not None else next(iter(b.splits.values()))
        return b.registry, qs.texts, qs.gold
    if not (registry and queries):
        raise RiskrankError("give --dataset, or --registry and --queries")
    from riskrank.datasets.user import read_queries

    reg = ToolRegistry.load(registry)
    qf = read_queries(queries, reg, what="training queries", name="train")
    qf.refuse_unknown()
    texts, gold = qf.texts, qf.queries.gold
    return reg, texts, gold


# -- graph ---------------------------------------------------------------------------------------
@click.group()
def graph() -> None:
    """ToolGraph inspection."""


@graph.command("stats")
@click.option("--dataset", type=click.Choice(DATASETS), default=None)
@click.option("--registry", type=click.Path(dir_okay=False), default=None)
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None)
@click.option("--threshold", type=float, default=0.65, show_default=True, help="Semantic edge threshold.")
@click.option("--edges", default="co,sem,perm,risk", show_default=True, help="Edge types to build.")
@click.option("--encoder", default=None)
@json_option("the statistics")
def graph_stats(dataset: str | None, registry: str | None, data_dir: str | None, threshold: float, edges: str,
                encoder: str | None, json_out: str | None) -> None:
    """Edge counts per type, degree statistics, and how many semantic edges each threshold
    would give under this encoder (co-occurrence edges use the training queries only)."""
    from riskrank.encoder import Encoder
    from riskrank.graph import GraphConfig, ToolGraph, semantic_threshold_table
    from riskrank.registry import ToolRegistry

    if bool(dataset) == bool(registry):
        raise RiskrankError("give exactly one of --dataset or --registry")
    not_an_input({"--json": json_out}, (registry,))
    train_gold: list = []
    if dataset:
        from riskrank.datasets import load_benchmark

        b = load_benchmark(dataset, data_dir)
        reg = b.registry
        qs = b.train if b.train is not None else next(iter(b.splits.values()))
        train_gold = qs.gold
        source = f"{dataset}: training queries = {qs.name} ({len(qs)})"
    else:
        reg = ToolRegistry.load(registry)
        source = f"{registry}: no training queries (no co-occurrence edges)"
    enc = Encoder(encoder, progress=True)
    emb = enc.encode(reg.texts(), desc="encoding tools")
    cfg = GraphConfig(sem_threshold=threshold, edge_types=tuple(e.strip() for e in edges.split(",") if e.strip()))
    g = ToolGraph.build(emb, train_gold, reg.risk_levels, reg.permissions, cfg)
    st = g.stats()
    table = semantic_threshold_table(emb)
    doc = {"stats": st, "semantic_thresholds": table, "encoder": enc.identity}
    if json_out == STDOUT:
        emit_json(doc, json_out)
        return
    echo(f"{source}; {len(reg)} tools; encoder {enc.identity}")
    print_table([[k, str(v)] for k, v in st["edges"].items()], ["edge type", "edges"])
    echo("")
    print_table([[k, fmt(float(v), 2)] for k, v in st["degree"].items()], ["degree", "value"])
    echo("\nsemantic edges per cosine threshold (this encoder):")
    print_table([[f"> {t}", str(c), fmt(table["mean_neighbours"][t], 2)] for t, c in table["counts"].items()],
                ["threshold", "pairs", "neighbours/tool"])
    q = table["quantiles"]
    echo("pairwise cosine quantiles: " + ", ".join(f"{k} {fmt(float(v))}" for k, v in q.items()))
    emit_json(doc, json_out)
