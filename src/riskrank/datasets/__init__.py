"""Benchmarks (UltraTool, Seal-Tools, the bundled demo), training corpora (BFCL, APIBench,
API-Bank, ToolAlpaca) and where their files live.

A benchmark is a tool registry plus named query splits whose gold tools are indices into
that registry. The corpora load the same way (``load_benchmark("bfcl")``) but are listed in
:data:`CORPORA`, not :data:`DATASETS`: they have no risk levels and no evaluation protocol of
their own (one split of all pairs, for leave-one-corpus-out), so the CLI's ``--dataset``
commands, which report exposure metrics, do not offer them. The data directory keeps the mirror's ``<owner>/<repo>/<path>`` layout, so a
mirror directory can be used directly as ``--data DIR`` and an optional file dropped into it
(UltraTool dev.json, Seal-Tools train.jsonl / test_out_domain.jsonl) is picked up as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from riskrank.datasets.base import (
    ENV_DATA,
    ENV_HOME,
    Benchmark,
    Negatives,
    QuerySet,
    build_gold,
    crossfit_folds,
    data_file,
    resolve_data_dir,
    riskrank_home,
)
from riskrank.datasets.corpora import CORPORA
from riskrank.errors import DataError, RiskrankError

DATASETS = ("ultratool", "sealtools", "demo")

__all__ = ["CORPORA", "DATASETS", "ENV_DATA", "ENV_HOME", "Benchmark", "Negatives", "QuerySet", "build_gold", "corpora_table",
           "crossfit_folds", "data_file", "load_benchmark", "load_corpora", "load_corpus", "resolve_data_dir", "riskrank_home"]


def load_benchmark(name: str, data: str | Path | None = None, **kwargs) -> Benchmark:
    """Load a benchmark by name (``ultratool``, ``sealtools``, ``demo``) or a corpus (:data:`CORPORA`)."""
    if name == "ultratool":
        from riskrank.datasets.ultratool import load_ultratool

        return load_ultratool(resolve_data_dir(data), **kwargs)
    if name == "sealtools":
        from riskrank.datasets.sealtools import load_sealtools

        return load_sealtools(resolve_data_dir(data), **kwargs)
    if name == "demo":
        from riskrank.datasets.demo import load_demo

        return load_demo(**kwargs)
    if name in CORPORA:
        if kwargs:
            raise DataError(f"the {name} corpus takes no options (got {', '.join(sorted(kwargs))})")
        return load_corpus(name, data)
    raise DataError(f"unknown dataset {name!r}; choose from {', '.join((*DATASETS, *CORPORA))}")


def load_corpus(name: str, data: str | Path | None = None) -> Benchmark:
    """Load one training corpus by name (:data:`CORPORA`)."""
    data_dir = resolve_data_dir(data)
    if name == "bfcl":
        from riskrank.datasets.bfcl import load_bfcl

        return load_bfcl(data_dir)
    if name == "apibench":
        from riskrank.datasets.apibench import load_apibench

        return load_apibench(data_dir)
    if name == "apibank":
        from riskrank.datasets.apibank import load_apibank

        return load_apibank(data_dir)
    if name == "toolalpaca":
        from riskrank.datasets.toolalpaca import load_toolalpaca

        return load_toolalpaca(data_dir)
    raise DataError(f"unknown corpus {name!r}; choose from {', '.join(CORPORA)}")


def load_corpora(names: Sequence[str] = CORPORA, data_dir: str | Path | None = None
                 ) -> tuple[dict[str, Benchmark], dict[str, str]]:
    """Load several corpora: the ones that load, and an error message for each that did not,
    so that one missing or broken corpus is reported while the others are still used."""
    loaded: dict[str, Benchmark] = {}
    errors: dict[str, str] = {}
    for name in names:
        try:
            loaded[name] = load_corpus(name, data_dir)
        except RiskrankError as exc:
            errors[name] = str(exc)
    return loaded, errors


def corpora_table(data_dir: str | Path | None = None) -> str:
    """The corpora riskrank-base's choices are judged on, as a Markdown table: each corpus's
    repository at its pinned commit, licence, mirrored files and bytes (the manifest), and the
    tools and (task, gold tool) pairs its loader forms from them (:func:`riskrank.datasets.load_corpus`)."""
    import json
    from importlib.resources import files

    manifest = json.loads(files("riskrank.datasets").joinpath("manifest.json").read_text(encoding="utf-8"))
    rows = ["| corpus | repository @ commit | licence | files (bytes) | tools | pairs |", "|---|---|---|---|---|---|"]
    for name in CORPORA:
        entries = [f for f in manifest["files"] if f.get("corpus") == name]
        repos = sorted({f"`{f['repo']}` @ `{f['commit'][:10]}`" for f in entries})
        licences = sorted({str(f.get("license")) for f in entries})
        bench = load_corpus(name, data_dir)
        rows.append(f"| {name} | {', '.join(repos)} | {'; '.join(licences)} | {len(entries)} "
                    f"({sum(f.get('bytes') or 0 for f in entries):,}) | {len(bench.registry):,} | "
                    f"{len(bench.splits['all'].texts):,} |")
    return "\n".join(rows)
