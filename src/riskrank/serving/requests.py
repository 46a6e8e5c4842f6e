"""The request contract the HTTP API and the MCP server share: the per-request limits, the
checks that enforce them (the same stable codes on both surfaces), and :class:`ApiError`,
an error that carries its HTTP status.

Standard library only: the CLI reads the limits' defaults for its options without loading a
server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.modes import MAX_K


class ApiError(RiskrankError):
    """An error response: HTTP status, stable code, message (and response headers)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


@dataclass(frozen=True)
class Limits:
    """Per-request limits; the OpenAPI schema and the MCP tool schema state them."""

    max_body_bytes: int = 64 * 1024
    max_task_chars: int = 4000
    max_k: int = MAX_K
    max_lambda: float = 10.0
    timeout_s: float = 10.0
    max_inflight: int = 256

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_task_chars", "max_k", "max_inflight"):
            if getattr(self, name) < 1:
                raise RiskrankError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_k > MAX_K:
            raise RiskrankError(f"max_k cannot exceed the retriever's limit {MAX_K}")
        if not self.max_lambda >= 0 or not self.timeout_s > 0:
            raise RiskrankError("max_lambda must be >= 0 and timeout_s > 0")


def check_task(task: Any, limits: Limits) -> str:
    if task is None:
        raise ApiError(422, "invalid_request", "task: missing (give the task's text)")
    if not isinstance(task, str):
        raise ApiError(422, "invalid_request", f"task: must be a string, got {type(task).__name__}")
    if any("\ud800" <= c <= "\udfff" for c in task):  # a header's bytes that are not UTF-8, or a lone surrogate
        raise ApiError(422, "invalid_request", "task: not valid Unicode text (bytes that are not UTF-8, or a lone surrogate)")
    if len(task) > limits.max_task_chars:
        raise ApiError(422, "task_too_long", f"task: at most {limits.max_task_chars} characters")
    if not any(c.isprintable() and not c.isspace() for c in task):  # blank, or only invisible or control characters
        raise ApiError(422, "task_empty", "task: the task text is empty")
    return task


def check_k(k: Any, limits: Limits) -> int:
    """``k`` as an int: an integral JSON number (``7.0``) is one, as JSON Schema's ``integer``
    and the HTTP API's ``/v1/retrieve`` read it; a bool, a string or ``7.5`` is not."""
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int):
        raise ApiError(422, "invalid_request", "k: must be an integer")
    if not 1 <= k <= limits.max_k:
        raise ApiError(422, "k_out_of_range", f"k: must be between 1 and {limits.max_k}, got {k}")
    return k


def check_lambda(lam: float | None, limits: Limits) -> float | None:
    if lam is not None and not 0 <= lam <= limits.max_lambda:
        raise ApiError(422, "lambda_out_of_range", f"lambda: must be between 0 and {limits.max_lambda:g}, got {lam:g}")
    return lam
