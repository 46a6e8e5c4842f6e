"""The ``riskrank`` command.

Every command is a thin shell over the library (datasets, RiskAwareRetriever, the
experiments, the audit, the servers); nothing is scored here, and no library module imports
this package. Commands import what they run when they run, so ``riskrank --help`` and a
missing optional extra cost nothing. User mistakes (bad files, unknown names, bad values, a
missing extra) print one ``error:`` line and exit with status 2; no traceback.

One module per group of commands: :mod:`.data`, :mod:`.library` (evaluate, retrieve, train,
graph stats), :mod:`.experiments` (reproduce, demo), :mod:`.audit` (audit, agreement) and
:mod:`.serving` (serve, mcp), :mod:`.wrap` (wrap, unwrap, policy check); :mod:`.common` holds
what they share.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

import click

from riskrank.cli import audit, data, experiments, levels, library, serving, state, trust, wrap
from riskrank.cli.common import Declined, ReaderGone, echo
from riskrank.errors import RiskrankError

EXIT_USAGE = 2
#: The reader of the output went away (a broken pipe): 128 + SIGPIPE, as a shell reports a process it killed.
EXIT_READER_GONE = 141
#: The longest error line the CLI prints (a message that echoes a bad value is cut here).
MAX_ERROR_CHARS = 300


def one_line(message: str) -> str:
    """An error message as one printable line of at most :data:`MAX_ERROR_CHARS` characters:
    line breaks become spaces, other unprintable characters are escaped (a terminal never
    receives an escape sequence from a file), and the tail is cut."""
    text = " ".join(message.split("\n"))
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}" for c in text)
    limit = MAX_ERROR_CHARS - len("error: ")
    return text if len(text) <= limit else text[: limit - 1] + "…"

# Quiet third-party chatter before anything heavy is imported.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="riskrank")
def main() -> None:
    """riskrank: risk-aware tool retrieval for LLM agents.

    Ranks a tool registry for a task by relevance and operational risk, with a knob
    (lambda) between them, a strict exposure policy (the rule filter), and retrieval-time
    safety metrics (RVR, SRR, sNDCG, ...).
    """


for _command in (data.data, library.evaluate, library.compare, library.retrieve, library.train, library.graph, experiments.reproduce,
                 experiments.demo, audit.audit_command, audit.agreement_command, serving.serve_command,
                 serving.mcp_command, trust.pins_group, trust.scan_command, trust.clients_group, wrap.wrap_command,
                 wrap.unwrap_command, wrap.policy_group, levels.levels_group):
    main.add_command(_command)
main.add_command(state.state_group)


def _quiet_child_watcher(record: logging.LogRecord) -> bool:
    """asyncio's child watcher warns "Unknown child process pid N" when a child (an upstream
    server that fails at once) exits before it is registered; the failure itself is reported
    in riskrank's own one line, so that race's second line is dropped."""
    return not str(record.msg).startswith("Unknown child process pid")


def run() -> int:
    """Entry point with the error policy: RiskrankError -> one line, exit 2."""
    logging.getLogger("asyncio").addFilter(_quiet_child_watcher)
    # psycopg's pool logs each failed reconnect (with a traceback) while a state store's
    # database is away; the gateway says so in one line of its own (StoreAuditLog).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        main.main(standalone_mode=False)
    except Declined as exc:
        echo(str(exc), err=True)
        return 1
    except click.exceptions.Abort:
        echo("aborted", err=True)
        return 130
    except click.exceptions.NoArgsIsHelpError as exc:  # `riskrank`, `riskrank pins`: the help, as click would show it
        echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message(), err=True)
        return EXIT_USAGE
    except click.UsageError as exc:
        # One line, like every other user error (click's own form is four: usage, a hint, a
        # blank line, the error); the command's --help is named for the rest.
        where = exc.ctx.command_path if exc.ctx is not None else "riskrank"
        what = exc.format_message().rstrip(".")
        takes_task = exc.ctx is not None and any(p.name == "task" for p in exc.ctx.command.params)
        if takes_task and what.startswith("Got unexpected extra argument"):  # `riskrank retrieve list files`
            what += "; a task of several words is one argument: quote it"
        echo(f"error: {one_line(f'{where}: {what} (see {where} --help)')}", err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        echo(f"error: {one_line(exc.format_message())}", err=True)
        return EXIT_USAGE
    except RiskrankError as exc:
        echo(f"error: {one_line(str(exc))}", err=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        return 130
    except (BrokenPipeError, ReaderGone):
        # the reader went away: nothing more can be said, and the exit flush must not fail again
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE
    except OSError as exc:
        # Disk full, permission denied, ...: name the file, no traceback.
        echo(f"error: {one_line(str(exc))}", err=True)
        return EXIT_USAGE
    return 0


def entry() -> None:
    sys.exit(run())
