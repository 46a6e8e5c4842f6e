"""What every benchmark is made of: query splits with gold tools as registry indices, the
benchmark itself, the data directory and its files, and cross-fitting folds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from riskrank.errors import DataError
from riskrank.registry import ToolRegistry

ENV_DATA = "RISKRANK_DATA"
ENV_HOME = "RISKRANK_HOME"

def riskrank_home() -> Path:
    """Root for riskrank's per-user files (data, embedding cache, runs)."""
    return Path(os.environ.get(ENV_HOME) or Path.home() / ".cache" / "riskrank")


def resolve_data_dir(data: str | Path | None = None) -> Path:
    """The data directory: ``data`` if given, else $RISKRANK_DATA, else ~/.cache/riskrank/data."""
    if data is not None:
        return Path(data)
    if os.environ.get(ENV_DATA):
        return Path(os.environ[ENV_DATA])
    return riskrank_home() / "data"


def data_file(data_dir: Path, rel: str, *, required: bool = True) -> Path | None:
    """Path of a benchmark file inside the data directory; a missing required file is a
    clear error that says how to get it."""
    path = Path(data_dir) / rel
    if path.is_file():
        return path
    if not required:
        return None
    if not Path(data_dir).is_dir():
        raise DataError(
            f"data directory {data_dir} does not exist; run `riskrank data fetch --dest {data_dir}` "
            "(add `--source DIR` to copy from a local mirror)"
        )
    raise DataError(f"{path}: missing benchmark file; run `riskrank data fetch --dest {data_dir}`")


@dataclass
class QuerySet:
    """Queries of one split with gold tools as registry indices."""

    name: str
    ids: list[str]
    texts: list[str]
    gold: list[np.ndarray]
    meta: list[dict] = field(default_factory=list)
    n_skipped: int = 0
    """Queries dropped because none of their gold tools is in the corpus (or they are empty)."""

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, idx: np.ndarray | list[int], name: str | None = None) -> QuerySet:
        idx = [int(i) for i in idx]
        return QuerySet(
            name=name or self.name,
            ids=[self.ids[i] for i in idx],
            texts=[self.texts[i] for i in idx],
            gold=[self.gold[i] for i in idx],
            meta=[self.meta[i] for i in idx] if self.meta else [],
        )


@dataclass
class Negatives:
    """Queries that no tool of the registry answers (BFCL's irrelevance entries): data for
    abstention ("expose nothing"), kept apart from the splits because a QuerySet holds only
    queries with at least one gold tool and every metric assumes one."""

    name: str
    ids: list[str]
    texts: list[str]
    meta: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class Benchmark:
    """A registry, its evaluation splits and (when it exists) a separate training split.

    ``train`` is None when the training split is absent (UltraTool without dev.json): the
    protocol is then k-fold cross-fitting over the evaluation queries. ``negatives`` holds
    the queries without a fitting tool, where a corpus has them (None elsewhere).
    """

    name: str
    registry: ToolRegistry
    splits: dict[str, QuerySet]
    train: QuerySet | None
    protocol: str
    notes: list[str] = field(default_factory=list)
    negatives: Negatives | None = None

    @property
    def eval_splits(self) -> list[str]:
        return list(self.splits)


def crossfit_folds(n: int, n_folds: int, seed: int) -> np.ndarray:
    """Fold id per query for k-fold cross-fitting: a seeded permutation cut into
    ``n_folds`` near-equal parts (deterministic per seed)."""
    if n_folds < 2:
        raise ValueError("cross-fitting needs at least 2 folds")
    if n < n_folds:
        raise DataError(f"cannot cross-fit {n} queries into {n_folds} folds")
    order = np.random.default_rng(seed).permutation(n)
    folds = np.empty(n, dtype=np.int64)
    folds[order] = np.arange(n) % n_folds
    return folds


def build_gold(names: list[list[str]], registry: ToolRegistry) -> tuple[list[np.ndarray], list[int]]:
    """Map gold tool names to registry indices; returns gold arrays and the positions of
    queries kept (those with at least one gold tool in the corpus)."""
    gold, kept = [], []
    for i, ns in enumerate(names):
        idx = sorted({registry.index_of(n) for n in ns if n in registry})
        if idx:
            gold.append(np.asarray(idx, dtype=np.int64))
            kept.append(i)
    return gold, kept
