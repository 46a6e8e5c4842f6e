"""``riskrank evaluate``, ``retrieve``, ``train`` and ``graph stats``: the library's verbs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from riskrank.cli.common import (
    STDOUT,
    emit_json,
    fmt,
    json_option,
    mode_option,
    parse_seeds,
    print_table,
    trust_annotations_option,
)
from riskrank.datasets import DATASETS
from riskrank.errors import RiskrankError
from riskrank.fileio import read_jsonl
from riskrank.modes import FIRST_STAGES, RISK_SOURCES

# -- evaluate -----------------------------------------------------------------------------------
CONTRACT_COLUMNS = ("ndcg@5", "mrr", "sndcg@5", "rvr@5", "srr@5")


@click.command()
@click.option("--dataset", type=click.Choice(DATASETS), required=True)
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None, help="Data directory (a mirror directory works too).")
@click.option("--methods", default="bm25,dense", show_default=True,
              help="Comma-separated: bm25, dense, hybrid, dense+rule, risk_label_penalty, mmr, rel_only, core, core+graph, "
                   "core+graph+rule, core+graph+rule_pred, paper_rel_only, paper_core, top100/core, ... "
                   "(variants: core@lam=2, core+graph[edges=co+sem], core[relevance=dense], ce:MODEL).")
@click.option("--query-mode", type=click.Choice(["question", "plan"]), default="question", show_default=True,
              help="UltraTool query text: the question, or the plan steps that call a tool.")
@click.option("--seeds", default="42,123,777", show_default=True, help="Seeds for trained methods.")
@click.option("--encoder", default=None, help="sentence-transformers model name or folder [default: bundled all-MiniLM-L6-v2].")
@click.option("--selection", default=None, help="Lambda rule on validation without the rule filter: budget:R (default budget:0.65), ucb:R or utility:W.")
@click.option("--rule-selection", default=None, help="The same for the pipelines with the rule filter (default budget:0.4).")
@json_option("the results-contract document")
@click.option("--all-metrics", is_flag=True, help="Print every metric, not only the paper's five.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def evaluate(dataset: str, data_dir: str | None, methods: str, query_mode: str, seeds: str, encoder: str | None,
             selection: str | None, rule_selection: str | None, json_out: str | None, all_metrics: bool, quiet: bool) -> None:
    """Evaluate retrieval methods on a benchmark and print NDCG@5, MRR, sNDCG@5, RVR@5, SRR@5."""
    from riskrank.datasets import load_benchmark
    from riskrank.experiments.methods import parse_methods
    from riskrank.experiments.runner import run_evaluation
    from riskrank.metrics import METRICS

    parse_methods(methods)  # fail on a bad method name before any data is read
    kwargs = {"query_mode": query_mode} if dataset == "ultratool" else {}
    if dataset != "ultratool" and query_mode != "question":
        raise RiskrankError("--query-mode applies to UltraTool only")
    bench = load_benchmark(dataset, data_dir, **kwargs)
    overrides = {k: v for k, v in (("selection", selection), ("rule_selection", rule_selection)) if v}
    run = run_evaluation(bench, methods, seeds=parse_seeds(seeds), encoder=encoder, train_overrides=overrides, progress=not quiet)
    res = run.results_json()
    res["query_mode"] = query_mode
    if json_out == STDOUT:  # stdout is the document; notes go to stderr
        for note in bench.notes:
            click.echo(f"note: {note}", err=True)
        emit_json(res, json_out)
        return
    click.echo(f"{bench.name}: {bench.protocol}; encoder {run.encoder}; seeds {','.join(map(str, run.seeds))}")
    for note in bench.notes:
        click.echo(f"note: {note}")
    cols = METRICS if all_metrics else CONTRACT_COLUMNS
    trained = any(m in methods for m in ("core", "rel_only"))
    for split, block in res["splits"].items():
        click.echo(f"\n[{split}] {block['n_queries']} queries")
        rows = []
        for m, vals in block["methods"].items():
            rows.append([m, *[fmt(vals[c]["mean"]) + (f"±{fmt(vals[c]['std'])}" if trained and len(run.seeds) > 1 else "") for c in cols]])
        print_table(rows, ["method", *cols])
    if json_out:
        click.echo("")
        emit_json(res, json_out)


# -- retrieve -----------------------------------------------------------------------------------
@click.command()
@click.argument("task", required=False)
@click.option("--registry", type=click.Path(dir_okay=False), default=None, help="Tool registry file [default: the bundled demo registry].")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None, help="Checkpoint directory from `riskrank train`.")
@click.option("-k", "k", type=int, default=5, show_default=True)
@mode_option("Pipeline stages (the first names the relevance: dense, bm25, hybrid or core); graph = core+graph, "
             "rule = core+graph+rule [default: core with a checkpoint, else dense].")
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
@json_option("the result (the table is not printed when it goes to stdout)")
def retrieve(task: str | None, registry: str | None, checkpoint: str | None, k: int, mode: str | None, lam: float | None,
             alpha: float | None, risk_source: str, encoder: str | None, candidates: int | None, first_stage: str,
             trust_annotations: bool, json_out: str | None) -> None:
    """Rank a registry's tools for TASK and show the top-k with scores, risk levels and
    permission categories (and, in rule modes, what was deferred and why).

    `--json` right before TASK (`retrieve --json "delete the logs"`) reads TASK as the task,
    not as a file name: with no other TASK, the word after `--json` is the task and the JSON
    goes to stdout."""
    from riskrank.datasets.demo import demo_registry_path
    from riskrank.pipeline import RiskAwareRetriever

    if task is None and json_out not in (None, STDOUT):
        task, json_out = json_out, STDOUT
    if task is None:
        raise click.UsageError("Missing argument 'TASK'.")
    retriever = RiskAwareRetriever.from_paths(registry or demo_registry_path(), checkpoint, encoder=encoder,
                                              mode=mode, risk_source=risk_source, progress=False,
                                              candidates=candidates, first_stage=first_stage,
                                              trust_annotations=trust_annotations)
    res = retriever.retrieve(task, k=k, lam=lam, alpha=alpha)
    if json_out != STDOUT:
        show_result(res)
    emit_json(res.to_dict(), json_out)


def show_result(res: Any, title: str | None = None) -> None:
    from riskrank.metrics import rvr_at_k, srr_at_k

    click.echo(title or f"task: {res.task}")
    click.echo(f"mode {res.mode}, lambda {res.lam:g}" + (f", alpha {res.alpha:g}" if "graph" in res.mode else "")
               + (f", risk source {res.risk_source}" if "rule" in res.mode else ""))
    rows = []
    for t in res.tools:
        level = f"L{t.risk_level}" if t.risk_level else "?"
        pred = f"L{t.predicted_level}" if t.predicted_level else "-"
        name = t.name + (" (named)" if getattr(t, "named", False) else "")
        rows.append([str(t.rank), name, fmt(t.score), fmt(t.f_rel), fmt(t.f_risk), level, pred, ",".join(t.permissions) or "-"])
    print_table(rows, ["#", "tool", "score", "f_rel", "f_risk", "risk", "pred", "permissions"])
    levels = [t.risk_level or 0 for t in res.tools]
    if levels and all(levels):
        import numpy as np

        arr = np.array([list(range(len(levels)))])
        lv = np.array(levels)
        click.echo(f"RVR@{len(levels)} {fmt(float(rvr_at_k(arr, lv, len(levels))[0]), 2)}   SRR@{len(levels)} {fmt(float(srr_at_k(arr, lv, len(levels))[0]), 2)}")
    context = getattr(res, "context", None)
    if context is not None:
        click.echo(f"need {context['need']:.2f} (threshold {context['threshold']:g}): "
                   + ("the task needs a risky tool" if context["needs_risk"] else "the task does not need a risky tool")
                   + f"; lambda {context['lambda']:g}, risk cap {context['risk_cap']}"
                   + (f"; admitted {context['admitted']}" if context.get("admitted") else ""))
        for t in res.tools:
            if getattr(t, "context", None):
                click.echo(f"  {t.name}: {t.context}")
    if res.deferred:
        click.echo("deferred by the rule filter:" if context is None else "deferred (rule filter or context stage):")
        for d in res.deferred:
            extra = f" (redundant with {d.redundant_with})" if d.redundant_with else ""
            named = " (named in the task; the caps still apply)" if getattr(d, "named", False) else ""
            why = f" ({d.context})" if getattr(d, "context", None) else ""
            click.echo(f"  {d.name}: {', '.join(d.reasons)}{extra}{named}{why}")
    if res.fallback:
        click.echo(f"fallback (too few tools met every rule): {', '.join(res.fallback)}")
    if res.unlabelled:
        click.echo(f"unlabelled tools treated as high risk (fail closed): {', '.join(res.unlabelled)}")
    for note in getattr(res, "notes", []):
        click.echo(f"note: {note}")


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
@click.option("--epochs", type=int, default=10, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--selection", default="budget:0.65", show_default=True, help="Lambda rule without the rule filter: budget:R, ucb:R or utility:W.")
@click.option("--rule-selection", default="budget:0.4", show_default=True, help="Lambda rule of the pipelines with the rule filter.")
@click.option("--encoder", default=None)
@click.option("--force", is_flag=True, help="Overwrite an existing checkpoint directory.")
def train(dataset: str | None, registry: str | None, queries: str | None, data_dir: str | None, out: str, design: str,
          relevance: str | None, penalty: str | None, sampling: str | None, epochs: int, seed: int, selection: str,
          rule_selection: str, encoder: str | None, force: bool) -> None:
    """Train the dual-head reranker and write a checkpoint (heads, ToolGraph, the fusion and
    lambda/alpha per pipeline, all chosen on validation queries)."""
    from riskrank.checkpoint import is_checkpoint_dir
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.training import TrainConfig

    if is_checkpoint_dir(out) and not force:
        raise RiskrankError(f"{out} already holds a checkpoint; pass --force to overwrite it")
    reg, texts, gold = _training_data(dataset, registry, queries, data_dir)
    cfg = TrainConfig(design=design, relevance=relevance, penalty=penalty, sampling=sampling, epochs=epochs, seed=seed,
                      selection=selection, rule_selection=rule_selection)
    r = RiskAwareRetriever.fit(reg, texts, gold, encoder=encoder, train_config=cfg)
    r.save(out)
    tr = r.training
    click.echo(f"trained {design} heads ({tr.config.relevance} relevance, {tr.config.penalty} penalty) on {tr.counts['train_queries']} "
               f"queries (+{tr.counts['val_queries']} validation) in {tr.seconds:.1f}s")
    if tr.fusion is not None:
        click.echo(f"hybrid first stage: {tr.fusion.describe()} (chosen on the {tr.counts['train_queries'] + tr.counts['val_queries']} training queries)")
    sel = tr.validation.get("selected", {})
    click.echo(f"lambda {r.lam:g} (validation NDCG@5 {fmt(sel.get('ndcg@5'))}, RVR@5 {fmt(sel.get('rvr@5'))}), alpha {r.alpha:g}, "
               f"normalisation {r.normalisation}" + (f", residual weight {tr.validation['residual_weight']:g}" if "residual_weight" in tr.validation else ""))
    if r.pipelines:
        click.echo("per pipeline: " + "; ".join(f"{k} lambda {v['lam']:g}" + (f" alpha {v['alpha']:g}" if v["alpha"] else "")
                                             for k, v in r.pipelines.items()))
    q = tr.risk_quality
    if q:
        auc = "n/a" if q.get("heldout_auc") is None else f"{q['heldout_auc']:.3f}"
        click.echo(f"risk head: held-out AUC {auc}, predictions span {q['level_span']:.2f} levels"
                   + ("" if q["learned"] else f"; NOT LEARNED ({q['reason']}): predicted levels will be the keyword annotator's"))
    if tr.need_head is not None:
        n = tr.need_head.info
        auc = "n/a" if n.get("val_auc") is None else f"{n['val_auc']:.3f}"
        ctx = r.checkpoint.inference.get("context") or {}
        click.echo(f"need head: {'+'.join(n['features'])}, C {n['C']:g}, validation AUC {auc} ({n['val_positives']} of {n['n_val']} "
                   f"validation queries need a risky tool; chosen by {n['chosen_by']}); "
                   + "; ".join(f"{k} threshold {v['tau']:g} margin {'none' if v['margin'] is None else format(v['margin'], 'g')}"
                               for k, v in ctx.items()))
    for note in tr.warnings:
        click.echo(f"note: {note}")
    click.echo(f"wrote {out}")


def _training_data(dataset: str | None, registry: str | None, queries: str | None, data_dir: str | None):
    import numpy as np

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
    reg = ToolRegistry.load(registry)
    texts, gold = [], []
    if not Path(queries).is_file():
        raise RiskrankError(f"{queries}: no such file")
    for lineno, rec in read_jsonl(queries):
        try:
            task, names = rec["task"], rec["gold"]
        except (KeyError, TypeError):
            raise RiskrankError(f"{queries}: line {lineno}: expected {{\"task\": str, \"gold\": [tool names]}}") from None
        if not isinstance(task, str) or not task.strip() or not isinstance(names, list):
            raise RiskrankError(f"{queries}: line {lineno}: 'task' must be a non-empty string and 'gold' a list")
        idx = sorted({reg.index_of(n) for n in names if n in reg})
        unknown = [n for n in names if n not in reg]
        if unknown:
            raise RiskrankError(f"{queries}: line {lineno}: unknown tool(s) {', '.join(map(repr, unknown))} (not in {registry})")
        if not idx:
            continue
        texts.append(task)
        gold.append(np.asarray(idx))
    if not texts:
        raise RiskrankError(f"{queries}: no training queries")
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
    click.echo(f"{source}; {len(reg)} tools; encoder {enc.identity}")
    print_table([[k, str(v)] for k, v in st["edges"].items()], ["edge type", "edges"])
    click.echo("")
    print_table([[k, fmt(float(v), 2)] for k, v in st["degree"].items()], ["degree", "value"])
    click.echo("\nsemantic edges per cosine threshold (this encoder):")
    print_table([[f"> {t}", str(c), fmt(table["mean_neighbours"][t], 2)] for t, c in table["counts"].items()],
                ["threshold", "pairs", "neighbours/tool"])
    q = table["quantiles"]
    click.echo("pairwise cosine quantiles: " + ", ".join(f"{k} {fmt(float(v))}" for k, v in q.items()))
    emit_json(doc, json_out)
