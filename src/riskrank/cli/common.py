"""What the command modules share: number formatting, the table printer, seeds, log lines, and
the options every command spells the same way (``--json [FILE]``, ``--mode``,
``--trust-annotations``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

from riskrank.errors import RiskrankError
from riskrank.modes import MODES

#: ``--json`` given without a file: the JSON goes to stdout.
STDOUT = "-"


def json_option(what: str) -> Callable:
    """``--json [FILE]``, the same in every command: write ``what`` as JSON to FILE, or to
    stdout when no file is given (stdout then holds the JSON document only)."""
    return click.option("--json", "json_out", is_flag=False, flag_value=STDOUT, default=None, metavar="[FILE]",
                        type=click.Path(dir_okay=False, allow_dash=True),
                        help=f"Write {what} as JSON to FILE, or to stdout when no FILE is given.")


def emit_json(obj: Any, json_out: str | None) -> None:
    """Where ``--json`` asked for it: stdout (the document alone) or a file (atomically, then
    a "wrote FILE" line)."""
    from riskrank.fileio import dumps, write_json

    if json_out is None:
        return
    if json_out == STDOUT:
        echo(dumps(obj))
        return
    write_json(json_out, obj)
    echo(f"wrote {json_out}")


def not_an_input(outputs: dict[str, str | None], inputs: Any) -> None:
    """Refuse, before any work, an output (option -> path) that names one of the command's
    input files (``inputs``: paths, None skipped): writing it would replace what the user
    gave with what the command made of it."""
    import os

    def same(a: str, b: str) -> bool:
        try:
            return os.path.samefile(a, b)
        except OSError:  # one of them does not exist (yet): the same only if the names resolve alike
            return os.path.realpath(a) == os.path.realpath(b)

    given = [str(i) for i in inputs if i]
    for option, out in outputs.items():
        if out in (None, STDOUT):
            continue
        for inp in given:
            if same(str(out), inp):
                raise RiskrankError(f"{option} {out} is one of this command's input files; write it to another file")


def mode_option(help_text: str) -> Callable:
    """``--mode``: one of :data:`riskrank.modes.MODES`, validated alike by every command (and
    by the HTTP and MCP request schemas, which list the same names)."""
    return click.option("--mode", type=click.Choice(MODES), default=None, help=help_text)


def trust_annotations_option(f: Callable) -> Callable:
    return click.option(
        "--trust-annotations", is_flag=True,
        help="Let MCP readOnlyHint annotations lower an unlabelled tool's level (to at most L2, unless its description "
             "contradicts the hint). By default hints only raise a level: servers mislabel tools.",
    )(f)


def level_model_option(f: Callable) -> Callable:
    return click.option(
        "--level-model", default="auto", show_default=True, metavar="auto|none|DIR",
        help="What serves the level of a tool nobody audited: auto = the shipped level model (with the base model; "
             "docs/base-model.md), none = the risk head with the keyword rule (the higher of the two), DIR = a level "
             "model of your own (riskrank.training.levels).",
    )(f)


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def print_table(rows: list[list[str]], header: list[str]) -> None:
    from riskrank.tables import text_table

    echo(text_table(header, rows))


def parse_seeds(value: str) -> list[int]:
    try:
        seeds = [int(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"seeds must be comma-separated integers, got {value!r}") from None
    if not seeds:
        raise click.BadParameter("give at least one seed")
    return seeds


def echo(message: Any = "", *, err: bool = False, nl: bool = True) -> None:
    """What every command prints, through :func:`riskrank.fileio.terminal_safe`: a tool name,
    a description or a server's message holding a control or bidi character reaches the
    terminal escaped, never raw (it could reorder, hide or recolour the line around it)."""
    from riskrank.fileio import terminal_safe

    try:
        click.echo(terminal_safe(str(message)), err=err, nl=nl)
    except BrokenPipeError:  # click would exit 1, which scan's callers read as "poisoned"
        raise ReaderGone from None


class Declined(Exception):
    """The user answered "no" to a question the command asked (exit 1, nothing written): an
    answer, not an interrupt (130) nor an error (2)."""


class ReaderGone(Exception):
    """The reader of the output went away (``riskrank scan x | head -1``): the command stops
    and exits 141, as a process a broken pipe kills does, not with one of its own codes."""


def log(msg: str) -> None:
    """A server's log line: stderr (stdout may be a protocol, as for MCP over stdio)."""
    echo(f"riskrank: {msg}", err=True)


def demo_registry(announce: bool = False) -> str:
    """The bundled demo registry, the default of every command that takes --registry."""
    from riskrank.datasets.demo import demo_registry_path

    if announce:
        log("no --registry: serving the bundled demo registry")
    return str(demo_registry_path())


def read_user_file(path: str | Any, *, max_bytes: int, encoding: str = "utf-8", timeout_s: float | None = None) -> tuple[bytes, str]:
    """(the bytes, the text) of a file a user named, read as a regular file (a FIFO or a device
    is refused, not waited on) of at most ``max_bytes``; what cannot be read or decoded is one
    :class:`~riskrank.errors.RiskrankError` line naming the file."""
    from riskrank.errors import RiskrankError
    from riskrank.fileio import UnsafeFileError, read_regular_file

    try:
        raw = read_regular_file(path, max_bytes=max_bytes, timeout_s=timeout_s)
    except OSError as exc:
        raise RiskrankError(f"{path}: {exc.strerror or exc}") from None
    except UnsafeFileError as exc:
        raise RiskrankError(f"{path}: {exc}") from None
    try:
        return raw, raw.decode(encoding)
    except UnicodeDecodeError:
        raise RiskrankError(f"{path}: not UTF-8 text") from None
