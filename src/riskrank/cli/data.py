"""``riskrank data``: the benchmark files."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from riskrank.cli.common import echo
from riskrank.errors import RiskrankError


@click.group()
def data() -> None:
    """Benchmark data: fetch UltraTool, Seal-Tools, the released risk labels and the training
    corpora (BFCL, APIBench, API-Bank, ToolAlpaca)."""


@data.command("fetch")
@click.option("--source", default="upstream", show_default=True,
              help="'upstream' (GitHub raw files at pinned commits) or a local mirror directory in <owner>/<repo>/<path> layout.")
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              help="Data directory [default: $RISKRANK_DATA or ~/.cache/riskrank/data].")
@click.option("--no-optional", is_flag=True, help="Skip the optional files (UltraTool dev.json, Seal-Tools train/test_out).")
@click.option("--allow-unverified", is_flag=True,
              help="Also install the files the manifest pins no sha256 for (UltraTool dev.json, Seal-Tools train.jsonl), unverified.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def data_fetch(source: str, dest: str | None, no_optional: bool, allow_unverified: bool, quiet: bool) -> None:
    """Copy or download the benchmark files, verifying sha256; files already present and
    valid are skipped; writes are atomic."""
    from riskrank.datasets import resolve_data_dir
    from riskrank.datasets.fetch import fetch
    from riskrank.errors import DataError

    target = resolve_data_dir(dest)
    if source != "upstream" and not Path(source).is_dir():
        raise RiskrankError(f"--source {source}: not a directory (use 'upstream' or a mirror directory)")
    try:
        report = fetch(source, target, progress=not quiet, include_optional=not no_optional, allow_unverified=allow_unverified)
    except DataError as exc:
        rep = getattr(exc, "report", None)
        if rep is not None:  # what was checked, on stdout; the one error line follows on stderr
            echo(rep.format())
        raise
    echo(report.format())
    echo(f"data directory: {target}")
    if not report.ok:
        sys.exit(1)
