"""Bounds on one forwarded call: how long it may take and how much it may carry.

An agent that is manipulated, or an upstream that misbehaves, must not be able to hold a
call open for ever, make the gateway buffer and log an unbounded argument, or hand the agent
an unbounded answer. :class:`CallLimits` holds the gateway's bounds (``--call-timeout``,
``--max-argument-bytes``, ``--max-result-bytes``; the policy's ``call_timeouts`` overrides
the timeout per tool); :func:`check_arguments` measures arguments without recursion (a
deeply nested value cannot blow the stack) before anything else reads them.

Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from riskrank.errors import RiskrankError

ARGUMENTS_TOO_LARGE = "arguments_too_large"
RESULT_TOO_LARGE = "result_too_large"
CALL_TIMEOUT = "call_timeout"


class LimitError(RiskrankError):
    """A call over one of the gateway's bounds; ``code`` names which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class CallLimits:
    """The gateway's bounds on a forwarded call (see the module docstring)."""

    timeout_s: float = 60.0
    max_argument_bytes: int = 1024 * 1024
    max_result_bytes: int = 16 * 1024 * 1024
    max_depth: int = 32
    max_items: int = 10_000

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= 86400:
            raise RiskrankError(f"the call timeout must be more than 0 and at most 86400 seconds, got {self.timeout_s}")
        for name in ("max_argument_bytes", "max_result_bytes", "max_depth", "max_items"):
            if getattr(self, name) < 1:
                raise RiskrankError(f"{name} must be >= 1, got {getattr(self, name)}")


def _size(value: Any, limits: CallLimits, what: str) -> int:
    """The JSON size of ``value`` after checking, without recursion, its depth and its number of
    items (objects' keys and arrays' elements together)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    items = 0
    while stack:
        node, depth = stack.pop()
        if depth > limits.max_depth:
            raise LimitError(ARGUMENTS_TOO_LARGE, f"{what} are nested deeper than {limits.max_depth} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            items += 1
            if items > limits.max_items:
                raise LimitError(ARGUMENTS_TOO_LARGE, f"{what} hold more than {limits.max_items:,} keys and elements")
            stack.append((child, depth + 1))
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


def check_arguments(tool: str, arguments: dict[str, Any], limits: CallLimits) -> None:
    """Raise :class:`LimitError` (``arguments_too_large``) when ``arguments`` are deeper, wider
    or bigger than ``limits`` allow."""
    size = _size(arguments, limits, f"the arguments of {tool!r}")
    if size > limits.max_argument_bytes:
        raise LimitError(ARGUMENTS_TOO_LARGE, f"the arguments of {tool!r} are {size:,} bytes; this gateway forwards "
                                              f"at most {limits.max_argument_bytes:,} (--max-argument-bytes)")


def check_result(tool: str, result: dict[str, Any], limits: CallLimits) -> None:
    """Raise :class:`LimitError` (``result_too_large``) when an upstream's answer, as JSON, is
    bigger than ``limits.max_result_bytes``: the agent is told, not handed all of it."""
    size = len(json.dumps(result, ensure_ascii=False, default=str).encode())
    if size > limits.max_result_bytes:
        raise LimitError(RESULT_TOO_LARGE, f"the answer of {tool!r} is {size:,} bytes; this gateway passes on at most "
                                           f"{limits.max_result_bytes:,} (--max-result-bytes)")
