"""riskrank: risk-aware reranking for agent tool retrieval.

Retrieval is the first safety boundary of a tool-using agent: the model can only call the
tools it is shown. riskrank ranks a registry of tools for a task by relevance *and*
operational risk, exposes a knob (lambda) between the two, can enforce a strict exposure
policy (the rule filter), and measures how much risky capability each ranking exposes.

The public API is one import::

    from riskrank import RiskAwareRetriever, ToolRegistry, ToolGuard, Encoder, evaluate, load_benchmark

Names load on first use (module ``__getattr__``), so ``import riskrank`` imports neither
numpy nor torch; each name's home module says the rest (docs/architecture.md maps them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from riskrank._version import __version__

#: Public name -> the module that defines it.
_EXPORTS = {
    "RiskAwareRetriever": "riskrank.pipeline",
    "ToolRegistry": "riskrank.registry",
    "Tool": "riskrank.registry",
    "ToolGuard": "riskrank.adapters",
    "Encoder": "riskrank.encoder",
    "evaluate": "riskrank.metrics",
    "load_benchmark": "riskrank.datasets",
    "RetrievalResult": "riskrank.modes",
    "RiskrankError": "riskrank.errors",
    "fit_retriever": "riskrank.training",
}

__all__ = ["Encoder", "RetrievalResult", "RiskAwareRetriever", "RiskrankError", "Tool", "ToolGuard", "ToolRegistry",
           "__version__", "evaluate", "fit_retriever", "load_benchmark"]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from riskrank.adapters import ToolGuard
    from riskrank.datasets import load_benchmark
    from riskrank.encoder import Encoder
    from riskrank.errors import RiskrankError
    from riskrank.metrics import evaluate
    from riskrank.modes import RetrievalResult
    from riskrank.pipeline import RiskAwareRetriever
    from riskrank.registry import Tool, ToolRegistry
    from riskrank.training import fit_retriever


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'riskrank' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
