"""``riskrank reproduce`` and ``riskrank demo``."""

from __future__ import annotations

import click

from riskrank.cli.common import echo, parse_seeds
from riskrank.cli.library import show_result
from riskrank.errors import RiskrankError


# -- reproduce -----------------------------------------------------------------------------------
@click.command()
@click.option("--dataset", type=click.Choice(["ultratool", "sealtools"]), required=True)
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None)
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Output directory (report.md, results.json, figures).")
@click.option("--encoder", default=None)
@click.option("--seeds", default="42,123,777", show_default=True)
@click.option("--reuse", is_flag=True, help="Rebuild the report from OUT/cache without retraining when it matches.")
@click.option("--no-cross-encoders", is_flag=True, help="Skip the fine-tuned cross-encoder baseline (ce-minilm-ft).")
@click.option("--cross-encoder", "extra_ce", multiple=True, help="Also rerank the dense top-100 with this CrossEncoder (name or folder).")
@click.option("--context", "context_only", is_flag=True,
              help="Only the context-aware exposure report (Table 5 extended): OUT/context.md, OUT/context.json, PNGs.")
@click.option("--quiet", is_flag=True)
def reproduce(dataset: str, data_dir: str | None, out: str, encoder: str | None, seeds: str, reuse: bool,
              no_cross_encoders: bool, extra_ce: tuple[str, ...], context_only: bool, quiet: bool) -> None:
    """Reproduce the paper's tables and figures on one dataset: OUT/report.md, OUT/results.json, PNGs."""
    import time

    if context_only:
        from riskrank.experiments.context_report import context_report

        t0 = time.perf_counter()
        res = context_report(dataset, out, data=data_dir, encoder=encoder, seeds=parse_seeds(seeds), reuse=reuse,
                             progress=not quiet, echo=echo)
        echo(f"wrote {out}/context.md, {out}/context.json and {len(res['figures'])} figures in {time.perf_counter() - t0:.0f}s")
        return
    from riskrank.evaluation.cross_encoder import cross_encoder_target
    from riskrank.experiments.reproduce import reproduce as run_reproduce

    for name in extra_ce:  # before the training, not after it
        try:
            cross_encoder_target(name)
        except RiskrankError as exc:
            raise RiskrankError(f"--cross-encoder: {exc}") from None
    t0 = time.perf_counter()
    res = run_reproduce(dataset, out, data=data_dir, encoder=encoder, seeds=parse_seeds(seeds), reuse=reuse,
                        cross_encoders=not no_cross_encoders, extra_cross_encoders=extra_ce, progress=not quiet, echo=echo)
    echo(f"wrote {out}/report.md, {out}/results.json and {len(res['figures'])} figures in {time.perf_counter() - t0:.0f}s")


# -- demo ----------------------------------------------------------------------------------------
@click.command()
@click.option("--tasks", default=None, help="Comma-separated demo task ids to show [default: a fixed selection].")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None, help="A checkpoint instead of the base model.")
@click.option("--unaudited", is_flag=True, help="Hide the registry's audited levels: levels come from the risk head, keywords and annotations.")
def demo(tasks: str | None, checkpoint: str | None, unaudited: bool) -> None:
    """Show the base model's relevance-only vs risk-aware vs rule-filtered top-5 lists on the
    bundled demo registry, with each tool's level and its provenance, RVR and SRR (the paper's
    Figure 1)."""
    from riskrank.experiments.demo import run_demo

    if checkpoint == "none":
        raise RiskrankError("the demo compares the heads' modes side by side, so it needs heads: leave --checkpoint out "
                            "for the base model, or name a checkpoint folder (riskrank retrieve --checkpoint none ranks "
                            "without them)")
    run_demo(tasks.split(",") if tasks else None, echo=echo, show=show_result, checkpoint=checkpoint, unaudited=unaudited)
