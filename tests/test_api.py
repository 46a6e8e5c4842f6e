"""The public API: one import, loaded lazily, so `import riskrank` stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_one_import_gives_the_public_api():
    from riskrank import (
        Encoder,
        RiskAwareRetriever,
        ToolGuard,
        ToolRegistry,
        evaluate,
        load_benchmark,
    )
    from riskrank.adapters import ToolGuard as guard
    from riskrank.pipeline import RiskAwareRetriever as engine

    assert RiskAwareRetriever is engine and ToolGuard is guard
    assert callable(evaluate) and callable(load_benchmark) and Encoder.__name__ == "Encoder"
    assert ToolRegistry.__module__ == "riskrank.registry"


def test_import_riskrank_is_light():
    code = "import sys, riskrank; print(','.join(m for m in ('numpy', 'torch', 'riskrank.pipeline') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_unknown_name_and_dir():
    import riskrank

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        riskrank.nope  # noqa: B018
    assert {"RiskAwareRetriever", "ToolGuard", "evaluate", "__version__"} <= set(dir(riskrank))
    assert set(riskrank.__all__) == set(riskrank._EXPORTS) | {"__version__"}
    assert set(riskrank.__all__) >= {"RiskAwareRetriever", "ToolRegistry", "ToolGuard", "Encoder", "evaluate", "load_benchmark"}
