"""``riskrank audit`` and ``riskrank agreement``: label a registry, measure label agreement."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

import riskrank.annotators as annotator_kinds  # module access: tests replace make_annotator
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
    read_json_file,
    run_audit,
    write_review,
)
from riskrank.cli.common import STDOUT, echo, emit_json, json_option, not_an_input
from riskrank.datasets import DATASETS
from riskrank.errors import RiskrankError
from riskrank.fileio import write_json
from riskrank.registry import REGISTRY_FORMATS, ToolRegistry
from riskrank.risk import RISK_LEVELS


@click.command("audit")
@click.option("--registry", type=click.Path(dir_okay=False), default=None, help="Tool registry to annotate (any format).")
@click.option("--format", "fmt", type=click.Choice(REGISTRY_FORMATS), default="auto", show_default=True, help="Registry format.")
@click.option("--dataset", type=click.Choice(DATASETS), default=None,
              help="Annotate a benchmark's registry instead (needed by head:crossfit).")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None, help="Data directory for --dataset.")
@click.option("--annotator", "-a", "annotators", multiple=True,
              help="openai:<model>[@<base-url>], keyword, head (the base model's risk head), head:<checkpoint>, head:crossfit; "
                   "repeat for several (the paper: three).")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Label file to write (or to update, with --apply-review).")
@click.option("--review", type=click.Path(dir_okay=False), default=None, help="Review queue JSONL [default: OUT's name + .review.jsonl].")
@click.option("--votes", "votes_path", type=click.Path(dir_okay=False), default=None, help="Vote log JSONL [default: OUT's name + .votes.jsonl].")
@click.option("--apply-review", "apply_path", type=click.Path(dir_okay=False), default=None,
              help="Apply the reviewer's levels from this review file to --out, then exit.")
@click.option("--base-url", default=None, help="OpenAI-compatible base URL [default: $OPENAI_BASE_URL or https://api.openai.com/v1].")
@click.option("--api-key", default=None, help="API key [default: $OPENAI_API_KEY].")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per request.")
@click.option("--retries", type=int, default=5, show_default=True, help="Retries per request on 429, 5xx, timeouts.")
@click.option("--backoff", type=float, default=1.0, show_default=True, help="First retry delay in seconds (doubles each time).")
@click.option("--rate-limit", type=float, default=None, help="At most this many requests per minute per annotator.")
@click.option("--workers", type=int, default=4, show_default=True, help="Concurrent requests per annotator.")
@click.option("--encoder", default=None, help="Encoder for head annotators [default: the checkpoint's].")
@click.option("--folds", type=int, default=5, show_default=True, help="head:crossfit: folds over tools.")
@click.option("--seed", type=int, default=42, show_default=True, help="head:crossfit: fold and training seed.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def audit_command(registry: str | None, fmt: str, dataset: str | None, data_dir: str | None, annotators: tuple[str, ...],
                  out: str, review: str | None, votes_path: str | None, apply_path: str | None, base_url: str | None,
                  api_key: str | None, timeout: float, retries: int, backoff: float, rate_limit: float | None, workers: int,
                  encoder: str | None, folds: int, seed: int, quiet: bool) -> None:
    """Annotate every tool of a registry with risk levels 1-5 (paper Section 4.2, Appendix A).

    Each annotator votes on each tool; votes are resolved by their span (0: keep, 1: median,
    >= 2: written to the review queue and left unresolved). Every vote is appended to a vote
    log, so an interrupted run continues where it stopped. After review, apply the decisions
    with `riskrank audit --apply-review REVIEW.jsonl --out LABELS.json`.
    """
    out_path = Path(out)
    if apply_path:
        if registry or dataset or annotators:
            raise RiskrankError("--apply-review updates --out in place; do not give --registry, --dataset or --annotator with it")
        applied, pending = apply_review(out_path, apply_path)
        echo(f"applied {applied} review decision(s) to {out_path}" + (f"; {pending} tool(s) still await review" if pending else ""))
        return
    if bool(registry) == bool(dataset):
        raise RiskrankError("give exactly one of --registry FILE or --dataset NAME")
    if not annotators:
        raise RiskrankError("give at least one --annotator (the paper uses three)")
    bench = None
    if dataset:
        from riskrank.datasets import load_benchmark

        bench = load_benchmark(dataset, data_dir)
        reg, source = bench.registry, f"{dataset} ({bench.registry.source})"
    else:
        if out_path.exists() and Path(registry).resolve() == out_path.resolve():
            raise RiskrankError(f"--out {out} is the input registry; write the labels to another file")
        reg, source = ToolRegistry.load(registry, fmt=fmt), str(registry)
    log_default, review_default = default_side_paths(out_path)
    log_path = Path(votes_path) if votes_path else log_default
    review_path = Path(review) if review else review_default
    # each file the audit writes is its own: the vote log, the review file, the labels, the input
    given = {"--votes": log_path, "--review": review_path, "--out": out_path, **({"--registry": Path(registry)} if registry else {})}
    real = {flag: os.path.realpath(p) for flag, p in given.items()}
    for i, (a, ra) in enumerate(real.items()):
        for b, rb in list(real.items())[i + 1:]:
            if ra == rb:
                raise RiskrankError(f"{a} and {b} name one file ({given[a]}); the audit writes each to a file of its own")
    previous = _previous_labels(out_path, reg)  # before any vote is asked for: a file it would lose is refused first
    opts = {"base_url": base_url, "api_key": api_key, "timeout": timeout, "retries": retries, "backoff": backoff,
            "rate_limit": rate_limit, "workers": workers}
    anns = [annotator_kinds.make_annotator(a, benchmark=bench, encoder=encoder, openai_options=opts,
                           crossfit={"n_folds": folds, "seed": seed, "progress": not quiet}) for a in annotators]
    try:
        run = run_audit(reg, anns, log_path, progress=not quiet, echo=echo)
    except KeyboardInterrupt:
        echo(f"interrupted: the finished votes are in {log_path}; rerun the same command to continue", err=True)
        raise
    labels, queue = build_labels(reg, run, previous=previous, source=source)
    write_review(review_path, queue)  # first: a review file it cannot read is refused before anything is written
    write_json(out_path, labels, ensure_ascii=False)

    n = len(labels)
    by = {s: sum(1 for r in labels.values() if r["resolution"] == s) for s in (SINGLE, AGREED, MEDIAN, REVIEWED, PENDING, INCOMPLETE)}
    echo(f"{source}: {n} tools, annotators {', '.join(run.annotators)}; {run.new} new vote(s), {run.reused} from {log_path}"
               + (" (torn last line repaired)" if run.log_repaired else ""))
    if len(anns) > 1:
        spans = [r["span"] for r in labels.values() if r["span"] is not None]
        sc = {"0": sum(s == 0 for s in spans), "1": sum(s == 1 for s in spans), ">= 2": sum(s >= 2 for s in spans)}
        echo(", ".join(f"span {k}: {v} ({100 * v / max(len(spans), 1):.1f}%)" for k, v in sc.items()))
    levels = [r["risk_level"] for r in labels.values() if r["risk_level"]]
    echo("resolved: " + ", ".join(f"{k} {v}" for k, v in by.items() if v and k not in (PENDING, INCOMPLETE))
               + "; levels " + " ".join(f"L{k} {levels.count(k)}" for k in RISK_LEVELS))
    for a in anns:
        st = getattr(a, "stats", None)
        if st and st.get("requests"):
            echo(f"{a.name}: {st['requests']} request(s), {st['retries']} retried, {st['reasks']} re-asked, {st['failures']} failed")
    echo(f"wrote {out_path}")
    if queue:
        echo(f"{len(queue)} tool(s) with span >= 2 await review in {review_path}: set each risk_level, then run "
                   f"`riskrank audit --apply-review {review_path} --out {out_path}`")
    if by[INCOMPLETE]:
        failed = sorted({a for r in labels.values() for a in r.get("failures", {})})
        echo(f"{by[INCOMPLETE]} tool(s) lack a vote ({', '.join(failed) or 'interrupted'}); they are unlabelled. "
                   "Rerun the same command to retry them.", err=True)
        raise SystemExit(1)


def _previous_labels(out_path: Path, reg: ToolRegistry) -> dict[str, Any] | None:
    """The label file ``--out`` already holds (its reviewed decisions are kept), or None. A file
    there that is not a label file, or one whose reviewed decisions name tools this registry
    lacks (another registry's labels), is refused: the audit would write over it."""
    if not out_path.exists():
        return None
    try:
        previous = read_json_file(out_path, "label file")
    except AuditError as exc:
        raise RiskrankError(f"--out {out_path} exists and is not a label file ({exc}); write the labels to another "
                            "file, or move it away") from None
    if not (isinstance(previous, dict) and all(isinstance(r, dict) and "resolution" in r for r in previous.values())):
        raise RiskrankError(f"--out {out_path} exists and is not a label file of riskrank audit; write the labels to another "
                            "file, or move it away")
    have = set(reg.names)
    lost = [n for n, r in previous.items() if r.get("resolution") == REVIEWED and n not in have]
    if lost:
        raise RiskrankError(f"--out {out_path} holds {len(lost)} reviewed label(s) of tools this registry lacks "
                            f"({', '.join(map(repr, lost[:3]))}{', ...' if len(lost) > 3 else ''}): it is another "
                            "registry's label file; write these labels to another file")
    return previous


@click.command("agreement")
@click.argument("labels", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--png", type=click.Path(dir_okay=False), default=None, help="Write the confusion matrices as a PNG heat map.")
@json_option("the statistics")
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for the 95% intervals (0: none).")
@click.option("--seed", type=int, default=0, show_default=True)
def agreement_command(labels: tuple[str, ...], png: str | None, json_out: str | None, bootstrap: int, seed: int) -> None:
    """Agreement between label files LABELS_A LABELS_B [LABELS_C ...] (or among the annotators
    of one audit file): exact and within-one agreement, quadratic Cohen's kappa per pair,
    Krippendorff's alpha (ordinal) overall and on span <= 1, the span distribution of the
    paper's Table 1, and confusion matrices."""
    from riskrank.agreement import agreement, confusion_png, load_ratings

    if bootstrap < 0:
        raise RiskrankError("--bootstrap must be >= 0")
    not_an_input({"--json": json_out, "--png": png}, labels)
    if png and json_out not in (None, STDOUT) and Path(png).resolve() == Path(json_out).resolve():
        raise RiskrankError(f"--png and --json both name {png}; give each its own file")
    ratings, sources, _names, notes = load_ratings(labels)
    resolved = [os.path.realpath(p) for p in labels]
    twice = next((p for p, r in zip(labels, resolved, strict=True) if resolved.count(r) > 1), None)
    if twice is not None:  # a file against itself agrees perfectly, which says nothing
        raise RiskrankError(f"{twice} is given twice: agreement compares different annotators' files")
    report = agreement(ratings, sources, bootstrap=bootstrap, seed=seed, notes=notes)
    if json_out == STDOUT:
        if png:
            confusion_png(report, png)
        emit_json(report.to_dict(), json_out)
        return
    echo(report.format())
    if png:
        confusion_png(report, png)
        echo(f"\nwrote {png}")
    emit_json(report.to_dict(), json_out)
