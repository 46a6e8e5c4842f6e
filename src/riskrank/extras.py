"""Optional dependencies: which extra brings each, and the one error a missing one gives.

The base install (``pip install riskrank``) retrieves, trains, evaluates and audits. The
surfaces and backends beyond that come with extras, imported only where they are used:

==============  ==========================================  ====================================
extra           brings                                      for
==============  ==========================================  ====================================
``serve``       fastapi, uvicorn, pydantic, anyio           ``riskrank serve`` (the HTTP API)
``mcp``         mcp (1.x or 2.x), uvicorn, pydantic, anyio  ``riskrank mcp`` (find_tools, gateway)
``onnx``        onnxruntime, onnx                           the ONNX Runtime encoder backend
``ann``         faiss-cpu                                   ``--first-stage ann`` (IVF index)
``repro``       matplotlib                                  figures of ``reproduce``, heat maps
``console``     starlette, jinja2, uvicorn, matplotlib      ``--console`` (the operator's pages)
``teams``       psycopg (binary, pool), pyjwt (crypto)      ``--state postgresql://``, JWT clients
``ops``         prometheus-client, opentelemetry-api/sdk    the gateway's ``/metrics`` and traces
``all``         all of the above
``frameworks``  fastmcp, openai-agents, langchain,          ToolGuard's LangChain hooks, and the
                langgraph (with mcp 2.x)                    tests of every framework hook
==============  ==========================================  ====================================

Every optional import goes through :func:`requires`, so a missing package is one line that
names the exact command to run, never a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from riskrank.errors import RiskrankError

EXTRAS = ("serve", "mcp", "onnx", "ann", "repro", "console", "teams", "ops", "frameworks")


class MissingExtraError(RiskrankError):
    """An optional dependency is not installed."""

    code = "missing_extra"


def install_hint(extra: str) -> str:
    return f"pip install 'riskrank[{extra}]'"


@contextlib.contextmanager
def requires(extra: str, feature: str) -> Iterator[None]:
    """Run the imports of an optional feature; a missing package becomes a
    :class:`MissingExtraError` naming ``pip install 'riskrank[EXTRA]'``.

    >>> with requires("ann", "the ANN first stage"):
    ...     import faiss
    """
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}")
    try:
        yield
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise MissingExtraError(f"{feature} needs {missing}, which is not installed: {install_hint(extra)}") from None
