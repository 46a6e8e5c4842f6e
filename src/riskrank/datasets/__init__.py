"""Benchmarks (UltraTool, Seal-Tools, the bundled demo) and where their files live.

A benchmark is a tool registry plus named query splits whose gold tools are indices into
that registry. The data directory keeps the mirror's ``<owner>/<repo>/<path>`` layout, so a
mirror directory can be used directly as ``--data DIR`` and an optional file dropped into it
(UltraTool dev.json, Seal-Tools train.jsonl / test_out_domain.jsonl) is picked up as is.
"""

from __future__ import annotations

from pathlib import Path

from riskrank.datasets.base import (
    ENV_DATA,
    ENV_HOME,
    Benchmark,
    QuerySet,
    build_gold,
    crossfit_folds,
    data_file,
    resolve_data_dir,
    riskrank_home,
)
from riskrank.errors import DataError

DATASETS = ("ultratool", "sealtools", "demo")

__all__ = ["DATASETS", "ENV_DATA", "ENV_HOME", "Benchmark", "QuerySet", "build_gold", "crossfit_folds", "data_file",
           "load_benchmark", "resolve_data_dir", "riskrank_home"]


def load_benchmark(name: str, data: str | Path | None = None, **kwargs) -> Benchmark:
    """Load a benchmark by name (``ultratool``, ``sealtools``, ``demo``)."""
    if name == "ultratool":
        from riskrank.datasets.ultratool import load_ultratool

        return load_ultratool(resolve_data_dir(data), **kwargs)
    if name == "sealtools":
        from riskrank.datasets.sealtools import load_sealtools

        return load_sealtools(resolve_data_dir(data), **kwargs)
    if name == "demo":
        from riskrank.datasets.demo import load_demo

        return load_demo(**kwargs)
    raise DataError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
