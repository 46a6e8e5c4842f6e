"""What the command modules share: number formatting, the table printer, seeds, log lines."""

from __future__ import annotations

import math

import click


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def print_table(rows: list[list[str]], header: list[str]) -> None:
    from riskrank.tables import text_table

    click.echo(text_table(header, rows))


def parse_seeds(value: str) -> list[int]:
    try:
        seeds = [int(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"seeds must be comma-separated integers, got {value!r}") from None
    if not seeds:
        raise click.BadParameter("give at least one seed")
    return seeds


def log(msg: str) -> None:
    """A server's log line: stderr (stdout may be a protocol, as for MCP over stdio)."""
    click.echo(f"riskrank: {msg}", err=True)


def demo_registry(announce: bool = False) -> str:
    """The bundled demo registry, the default of every command that takes --registry."""
    from riskrank.datasets.demo import demo_registry_path

    if announce:
        log("no --registry: serving the bundled demo registry")
    return str(demo_registry_path())
