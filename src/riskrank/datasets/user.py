"""A user's own evaluation data: queries as JSONL ``{"task": ..., "gold": [tool names]}`` and
audited risk labels, read against a registry.

Read strictly (:func:`riskrank.fileio.jsonl_records`), with one line-numbered error for a
malformed record. What is not an error is counted and said, never dropped silently: gold
names that are not in the registry (a renamed or removed tool), the queries left with no gold
tool (excluded from the metrics), and label entries for tools the registry does not hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.contamination import normalise_task
from riskrank.datasets.base import QuerySet
from riskrank.errors import DataError
from riskrank.fileio import decode_json_bytes, jsonl_records, loads_strict, read_regular_file, show
from riskrank.registry import ToolRegistry

#: How many unknown names a note or an error message lists.
SHOW_NAMES = 5
#: The largest queries or labels file read (a million queries is a few hundred MB).
MAX_FILE_BYTES = 1 << 30
_RECORD = 'expected {"task": "...", "gold": ["tool name", ...]}'


@dataclass
class QueryFile:
    """The queries of one file with gold tools as registry indices, and what did not map."""

    path: str
    queries: QuerySet
    n_records: int
    unknown: dict[str, int] = field(default_factory=dict)
    """Gold names not in the registry -> how many queries name them (first-seen order)."""
    n_excluded: int = 0
    """Queries left with no gold tool in the registry (not evaluated)."""
    unknown_lines: dict[str, int] = field(default_factory=dict)
    """Gold names not in the registry -> the first line naming them."""

    def refuse_unknown(self) -> None:
        """A :class:`DataError` on the first line that names a tool the registry lacks (for
        training data, where a wrong name is a mistake to fix, not a count to report)."""
        if self.unknown:
            line = min(self.unknown_lines.values())
            names = [n for n, ln in self.unknown_lines.items() if ln == line]
            raise DataError(f"{self.path}: line {line}: unknown tool(s) {', '.join(map(show, names))} (not in the registry)")

    @property
    def texts(self) -> list[str]:
        return self.queries.texts

    def note(self) -> str | None:
        """One line on what did not map, or None when everything did."""
        if not self.unknown and not self.n_excluded:
            return None
        names = list(self.unknown)
        shown = ", ".join(map(show, names[:SHOW_NAMES])) + (f", ... ({len(names) - SHOW_NAMES} more)" if len(names) > SHOW_NAMES else "")
        text = f"{self.path}: {sum(self.unknown.values())} gold name(s) not in the registry ({len(names)} distinct: {shown})"
        if self.n_excluded:
            text += f"; {self.n_excluded} of {self.n_records} queries have no gold tool left and are excluded"
        return text

    def summary(self) -> dict[str, Any]:
        return {"file": self.path, "n_records": self.n_records, "n_queries": len(self.queries),
                "gold_not_in_registry": sum(self.unknown.values()), "unknown_names": list(self.unknown)[:SHOW_NAMES],
                "n_unknown_names": len(self.unknown), "excluded_queries": self.n_excluded}


def _read_text(path: str | Path, what: str) -> str:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{what} {p}: no such file")
    if p.is_dir():
        raise DataError(f"{what} {p}: is a directory, expected a file")
    try:
        data = read_regular_file(p, max_bytes=MAX_FILE_BYTES)
    except OSError as exc:
        raise DataError(f"{what} {p}: cannot read it ({exc.strerror or exc})") from None
    except DataError:
        raise
    except Exception as exc:  # UnsafeFileError: a FIFO, a device, too large
        raise DataError(f"{what} {p}: {exc}") from None
    return decode_json_bytes(data, str(p), DataError)


def read_queries(path: str | Path, registry: ToolRegistry, *, what: str = "queries", name: str = "test") -> QueryFile:
    """The queries of a JSONL file against ``registry`` (module docstring); ``name`` names the
    split. A missing or empty file, a record without ``task`` or ``gold``, a ``gold`` that is
    not a list of names, or the same task twice (after collapsing whitespace and case) is a
    :class:`DataError` naming the file and the line."""
    text = _read_text(path, what)
    source = str(path)
    ids, texts, gold, lines = [], [], [], []
    unknown: dict[str, int] = {}
    unknown_lines: dict[str, int] = {}
    first_line: dict[str, int] = {}
    n_records = n_excluded = 0
    for lineno, rec in jsonl_records(text.splitlines(), source, DataError):
        n_records += 1
        if not isinstance(rec, dict) or "task" not in rec or "gold" not in rec:
            raise DataError(f"{source}: line {lineno}: {_RECORD}")
        task, names = rec["task"], rec["gold"]
        if not isinstance(task, str) or not task.strip():
            raise DataError(f"{source}: line {lineno}: 'task' must be a non-empty string, got {show(task)}")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DataError(f"{source}: line {lineno}: 'gold' must be a list of tool names (strings), got {show(names)}")
        if not names:
            raise DataError(f"{source}: line {lineno}: 'gold' is empty (a query is scored against the tools it needs: name "
                            "at least one)")
        key = normalise_task(task)
        if key in first_line:
            raise DataError(f"{source}: line {lineno}: duplicate task (the same as line {first_line[key]}, "
                            "ignoring whitespace and case)")
        first_line[key] = lineno
        for n in dict.fromkeys(names):
            if n not in registry:
                unknown[n] = unknown.get(n, 0) + 1
                unknown_lines.setdefault(n, lineno)
        idx = sorted({registry.index_of(n) for n in names if n in registry})
        if not idx:
            n_excluded += 1
            continue
        ids.append(str(rec.get("id", f"line-{lineno}")))
        texts.append(task)
        gold.append(np.asarray(idx, dtype=np.int64))
        lines.append(lineno)
    if not n_records:
        raise DataError(f"{what} {source}: no queries (the file is empty; one JSON object per line: {_RECORD})")
    qf = QueryFile(source, QuerySet(name, ids, texts, gold, meta=[{"line": ln} for ln in lines], n_skipped=n_excluded),
                   n_records, unknown, n_excluded, unknown_lines)
    if not texts:
        raise DataError(f"{what} {source}: none of the {n_records} queries has a gold tool in the registry ({qf.note()})")
    return qf


@dataclass
class Labels:
    """Audited levels read from a labels file: name -> level (None: not decided, as a pending
    review in an audit), and the names that are not in the registry."""

    path: str
    levels: dict[str, int | None]
    unknown: list[str]

    def note(self) -> str | None:
        if not self.unknown:
            return None
        shown = ", ".join(map(show, self.unknown[:SHOW_NAMES])) + (" ..." if len(self.unknown) > SHOW_NAMES else "")
        return f"{self.path}: {len(self.unknown)} labelled tool(s) not in the registry, ignored ({shown})"


def _level(value: Any, where: str) -> int | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and float(value).is_integer()
    if not ok or not 1 <= value <= 5:
        raise DataError(f"{where}: risk_level must be an integer 1-5 (or null), got {show(value)}")
    return int(value)


def read_labels(path: str | Path, registry: ToolRegistry) -> Labels:
    """A labels file: a JSON object mapping tool name to ``{"risk_level": 1-5 or null, ...}``
    (``riskrank audit``'s label file, the paper's released files) or to a bare level. A
    level out of 1..5 is a :class:`DataError` naming the file and the tool; names the
    registry does not hold are kept in ``unknown`` (reported, not fatal)."""
    source = str(path)
    data = loads_strict(_read_text(path, "labels"), source, DataError)
    if not isinstance(data, dict):
        raise DataError(f"{source}: a labels file must be a JSON object mapping tool name -> {{\"risk_level\": 1-5}}, "
                        f"got {type(data).__name__}")
    levels: dict[str, int | None] = {}
    unknown: list[str] = []
    for name, rec in data.items():
        where = f"{source}: {show(name)}"
        value = rec.get("risk_level") if isinstance(rec, dict) else rec
        if isinstance(rec, dict) and "risk_level" not in rec:
            raise DataError(f"{where}: missing risk_level")
        level = _level(value, where)
        if name in registry:
            levels[name] = level
        else:
            unknown.append(name)
    return Labels(source, levels, unknown)
