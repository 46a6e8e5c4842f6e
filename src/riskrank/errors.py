"""User-facing errors.

Every mistake a user can make (bad file, bad record, wrong dimension, unknown tool ...)
raises a subclass of :class:`RiskrankError` whose message names the thing and what is
wrong. The CLI, the HTTP server and the MCP server turn these into a one-line message
(exit code 2 / JSON error) instead of a traceback.
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
