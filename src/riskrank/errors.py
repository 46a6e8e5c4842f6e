"""User-facing errors.

Every mistake a user can make (bad file, bad record, wrong dimension, unknown tool ...)
raises a subclass of :class:`RiskrankError` whose message names the thing and what is
wrong. The CLI turns these into a one-line message (exit code 2), the HTTP and MCP servers
into the body of :func:`error_body`; never a traceback.
"""

from __future__ import annotations


class RiskrankError(Exception):
    """Base class for errors caused by input, configuration or data, not by a bug."""

    code = "invalid_input"


class RegistryError(RiskrankError):
    """A tool registry file or record is malformed."""

    code = "invalid_registry"


class DataError(RiskrankError):
    """A benchmark file is missing, corrupt or in an unexpected shape."""

    code = "data_error"


class CheckpointError(RiskrankError):
    """A checkpoint is missing, corrupt or does not match the encoder/registry."""

    code = "invalid_checkpoint"


class UnknownToolError(RiskrankError):
    """A tool name is not in the registry."""

    code = "unknown_tool"


class AuditError(RiskrankError):
    """A vote log, label file or review file is unusable (the audit and the agreement report)."""

    code = "audit_error"


def error_body(exc: BaseException) -> dict[str, dict[str, str]]:
    """The one response body every surface (HTTP, MCP, a reload's status) gives for an error:
    ``{"error": {"code", "message"}}``. A :class:`RiskrankError` keeps its stable code and
    message; an OS error is ``io_error``; anything else is a bug, and its message (which
    may hold internals) is not shown."""
    if isinstance(exc, RiskrankError):
        return {"error": {"code": exc.code, "message": str(exc)}}
    if isinstance(exc, OSError):
        return {"error": {"code": "io_error", "message": str(exc)}}
    return {"error": {"code": "internal_error", "message": "internal error; see the server log"}}


def check_task(task: object, error: type[RiskrankError] = RiskrankError) -> str:
    """A task text as retrieval takes it, or ``error`` naming what is wrong: not a string (bytes,
    a list, None), empty or white space, or holding a lone surrogate (not Unicode: what a
    command-line argument that is not UTF-8 becomes), which no encoder can read."""
    if not isinstance(task, str):
        raise error(f"the task must be a string, got {type(task).__name__}")
    if not task.strip():
        raise error("the task text is empty")
    try:
        task.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"the task text holds a lone surrogate at character {exc.start} (it is not valid Unicode; "
                    "a command-line argument that is not UTF-8 arrives so)") from None
    return task

