"""What the four training corpora (BFCL, APIBench, API-Bank, ToolAlpaca) share: their files
in the manifest, strict reading, one tool pool per corpus and one query set of all pairs.

None of them has audited risk levels, and none has a train/test split that riskrank uses:
each corpus is a whole registry with all of its (query, gold tools) pairs, so that it can be
held out in leave-one-corpus-out or serve as training data for the others. That is why they
are not in :data:`riskrank.datasets.DATASETS` (the benchmarks the CLI evaluates, whose
exposure metrics need risk levels); ``riskrank.datasets.load_corpora`` loads them side by side.

A pool keeps each distinct tool once. Upstream corpora reuse one name for tools with other
descriptions (BFCL's live entries); those are distinct tools, and a query's gold must point at
the one it was shown, so every later variant gets the readable registry name
``NAME (variant K)`` (K = 2, 3, ... in first-seen order) and keeps the upstream name and K in
``Tool.extra``. A registry has no display name apart from its key, so the suffix does reach
the encoder text (``get weather (variant 2): ...``); a hash would reach it too, and say less.
Names that look alike (the same after case folding and Unicode's confusables, which a registry
refuses as two tools) are numbered the same way.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.datasets.base import (
    Benchmark,
    Negatives,
    QuerySet,
    build_gold,
    data_file,
)
from riskrank.errors import DataError, RiskrankError
from riskrank.fileio import loads_strict, read_jsonl
from riskrank.names import skeleton
from riskrank.registry import Tool, ToolRegistry, make_tool

CORPORA = ("bfcl", "apibench", "apibank", "toolalpaca")
PROTOCOL = "all pairs; a corpus is a held-out registry in leave-one-corpus-out or training data for the others"


def corpus_paths(corpus: str, prefix: str = "") -> list[str]:
    """Relative paths (``<owner>/<repo>/<path>``) of the packaged manifest's files of
    ``corpus`` whose path inside the repo starts with ``prefix``, in manifest order: the
    manifest is the list of what a complete corpus holds, so a file missing from the data
    directory is an error rather than a silently smaller corpus."""
    from riskrank.datasets.fetch import load_manifest

    return [e.rel_path for e in load_manifest() if e.corpus == corpus and e.path.startswith(prefix)]


def corpus_file(data_dir: Path, rel: str) -> Path:
    """A required corpus file (a missing one says to run ``riskrank data fetch``)."""
    path = data_file(data_dir, rel)
    assert path is not None  # required=True never returns None
    return path


def read_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of a JSONL file's non-empty lines; a garbled line or bytes that
    are not UTF-8 are a DataError naming the file (and the line)."""
    try:
        yield from read_jsonl(path, DataError)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_json(path: Path) -> Any:
    """A whole JSON file, read strictly; errors name the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return loads_strict(text, str(path), DataError)


def text_field(rec: Any, key: str, where: str) -> str:
    """``rec[key]`` as a string, or a DataError saying which record lacks it."""
    value = rec.get(key) if isinstance(rec, Mapping) else None
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a string field {key!r}, got {type(value).__name__}")
    return value


class ToolPool:
    """The tools of one corpus in first-seen order, each distinct tool once.

    A tool's identity is ``key`` (by default its name and cleaned description); a repeated
    key returns the name the first one got. A new key whose name is taken (or looks like a
    taken one) becomes ``NAME (variant K)`` (the module docstring).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._tools: list[Tool] = []
        self._by_key: dict[Hashable, str] = {}
        self._groups: dict[str, int] = {}  # skeleton of an upstream name -> the last K given in its group
        self._taken: set[str] = set()  # skeletons of the registry names given out
        self.upstream_names: set[str] = set()
        self.n_repeats = 0
        """Definitions that were already in the pool (merged into the first)."""
        self.n_variants = 0
        """Tools renamed ``NAME (variant K)``: the same name as an earlier tool, another identity."""
        self.n_look_alike = 0
        """Of those, the ones whose upstream name differs from the earlier one's (case, confusables)."""

    def __len__(self) -> int:
        return len(self._tools)

    def add(self, name: Any, description: Any, *, where: str, key: Hashable | None = None,
            extra: Mapping[str, Any] | None = None) -> str:
        """Pool one tool definition and return its registry name; ``where`` names the
        record in errors (``FILE: line 12``)."""
        try:
            tool = make_tool(name, description, where=where, extra=extra)
        except RiskrankError as exc:  # RegistryError: a name or description the registry refuses
            raise DataError(str(exc)) from None
        ident = (tool.name, tool.description) if key is None else key
        if ident in self._by_key:
            self.n_repeats += 1
            return self._by_key[ident]
        base = tool.name
        group = skeleton(base)
        k = self._groups.get(group, 0) + 1
        reg_name = base
        if k > 1 or skeleton(reg_name) in self._taken:
            k = max(k, 2)
            while skeleton(reg_name := f"{base} (variant {k})") in self._taken:
                k += 1
            self.n_variants += 1
            self.n_look_alike += base not in self.upstream_names
            tool = make_tool(reg_name, tool.description, where=where,
                             extra={**(extra or {}), "upstream_name": base, "variant": k})
        self._groups[group] = k
        self._taken.add(skeleton(reg_name))
        self.upstream_names.add(base)
        self._tools.append(tool)
        self._by_key[ident] = reg_name
        return reg_name

    def registry(self) -> ToolRegistry:
        try:
            return ToolRegistry(self._tools, self.source)
        except RiskrankError as exc:
            raise DataError(str(exc)) from None

    def notes(self) -> list[str]:
        """What pooling did, one line each (nothing when it did nothing)."""
        out = []
        if self.n_repeats:
            out.append(f"{self.n_repeats:,} repeated tool definitions merged into their first ({len(self):,} distinct tools)")
        if self.n_variants:
            alike = f", {self.n_look_alike} of them because the name looks like another's (case, look-alike letters)" if self.n_look_alike else ""
            out.append(f"{len(self):,} tools from {len(self.upstream_names):,} names: {self.n_variants:,} later variants "
                       f"(a name already used, another description) are named 'NAME (variant K)'{alike}")
        return out


@dataclass
class Pairs:
    """The (query, gold tool names) pairs a loader reads, in its order, with each pair's meta
    and how many of its gold names the loader itself could not map (see :func:`pairs_benchmark`)."""

    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    gold: list[list[str]] = field(default_factory=list)
    meta: list[dict] = field(default_factory=list)
    unresolved: list[int] = field(default_factory=list)

    def add(self, pair_id: str, text: str, gold: list[str], meta: dict, unresolved: int = 0) -> None:
        self.ids.append(pair_id)
        self.texts.append(text)
        self.gold.append(gold)
        self.meta.append(meta)
        self.unresolved.append(unresolved)


def pairs_benchmark(name: str, pool: ToolPool, pairs: Pairs, notes: list[str], *,
                    negatives: Negatives | None = None) -> Benchmark:
    """The corpus as a Benchmark: one query set ``all`` of every pair, also its training set.

    Gold names are mapped by :func:`build_gold`. ``pairs.unresolved[i]`` counts the gold names of
    query ``i`` that the loader could not map to a tool itself (a BFCL function its entry did
    not offer, an undocumented ToolAlpaca action); they and every name not in the registry are
    dropped and counted, never replaced by a guess, and a query left with no gold tool is
    skipped and counted (apart from the ones upstream gives no gold at all, which the loader's
    notes describe).
    """
    registry = pool.registry()
    ids, texts, gold_names, meta, unresolved = pairs.ids, pairs.texts, pairs.gold, pairs.meta, pairs.unresolved
    gold, kept = build_gold(gold_names, registry)
    qs = QuerySet("all", [ids[i] for i in kept], [texts[i] for i in kept], gold, [meta[i] for i in kept],
                  n_skipped=len(texts) - len(kept))
    n_no_gold = sum(1 for ns, u in zip(gold_names, unresolved, strict=True) if not ns and not u)
    missing = sum(unresolved) + sum(1 for ns in gold_names for n in ns if n not in registry)
    out = [*pool.notes(), *notes]
    if missing:
        out.append(f"{missing:,} gold names are not tools of the registry: dropped from their query's gold")
    if qs.n_skipped - n_no_gold:
        out.append(f"{qs.n_skipped - n_no_gold:,} queries skipped: none of their gold tools is in the registry")
    if negatives is not None:
        out.append(f"{len(negatives):,} negative queries (no offered tool fits) in Benchmark.negatives")
    return Benchmark(name, registry, {"all": qs}, qs, PROTOCOL, out, negatives=negatives)
