"""riskrank: risk-aware reranking for agent tool retrieval.

Retrieval is the first safety boundary of a tool-using agent: the model can only call the
tools it is shown. riskrank ranks a registry of tools for a task by relevance *and*
operational risk, exposes a knob (lambda) between the two, can enforce a strict exposure
policy (the rule filter), and measures how much risky capability each ranking exposes.
"""

from riskrank.errors import RiskrankError
from riskrank.registry import Tool, ToolRegistry

__version__ = "0.1.0"

__all__ = ["RiskrankError", "Tool", "ToolRegistry", "__version__"]
