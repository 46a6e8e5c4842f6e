"""Real MCP tools with the hints their authors declared, as weak risk labels.

The repository carries the file (``corpora/mcp-annotated/tools.json``, with its attribution):
it was compiled from 23 public servers' source at pinned commits and has no single upstream
to fetch. Each tool keeps its server, name, description and declared ``annotations``; the
hints become weak labels (read-only, changes state, destructive) and are stripped from what
a model reads, so that a model is judged on what it infers, not on what it is told.

A tool that declares ``readOnlyHint`` and ``destructiveHint`` both true contradicts itself:
it is counted and gets no label. Within a server, a name seen twice keeps its first record
(counted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from riskrank.errors import DataError
from riskrank.registry import Tool, make_tool

#: The copy carried by the repository (a source checkout); pass ``path`` elsewhere.
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "corpora" / "mcp-annotated" / "tools.json"

#: Weak label per tool: 0 none (no usable hint), 1 read-only, 3 changes state, 5 destructive.
#: They are also the risk head's weak level targets (read-only L1, state change L3,
#: destructive L5), on the rubric's scale.
NONE, READ_ONLY, WRITES, DESTRUCTIVE = 0, 1, 3, 5


@dataclass
class AnnotatedTools:
    """The annotated tools, hints stripped from ``tools``, with their weak labels."""

    tools: list[Tool]
    servers: list[str]
    hints: list[dict[str, bool]]
    weak: np.ndarray
    notes: list[str] = field(default_factory=list)
    #: each tool's index in the file (the key of its rubric levels, :func:`load_levels`)
    ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tools)

    @property
    def read_only(self) -> np.ndarray:
        return np.asarray([h.get("readOnlyHint") is True and h.get("destructiveHint") is not True for h in self.hints])

    @property
    def not_read_only(self) -> np.ndarray:
        return np.asarray([h.get("readOnlyHint") is False for h in self.hints])

    @property
    def destructive(self) -> np.ndarray:
        return np.asarray([h.get("destructiveHint") is True and h.get("readOnlyHint") is not True for h in self.hints])

    def texts(self) -> list[str]:
        return [t.text() for t in self.tools]


def weak_label(hints: dict[str, bool]) -> int:
    """The weak label of one tool's declared hints (see the module docstring)."""
    ro, de = hints.get("readOnlyHint"), hints.get("destructiveHint")
    if ro is True and de is True:
        return NONE
    if de is True:
        return DESTRUCTIVE
    if ro is True:
        return READ_ONLY
    if ro is False:
        return WRITES
    return NONE


def load_annotated(path: str | Path | None = None) -> AnnotatedTools:
    """Read the annotated tools (``path`` defaults to the repository's copy)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    if not path.is_file():
        raise DataError(f"{path}: missing annotated MCP tools file (a source checkout carries corpora/mcp-annotated/tools.json)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        records = doc["tools"]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    except (KeyError, TypeError):
        raise DataError(f"{path}: no 'tools' list") from None
    tools, servers, hints, seen, ids = [], [], [], set(), []
    dup = contradictory = 0
    for i, rec in enumerate(records):
        try:
            server, name, desc = str(rec["server"]), str(rec["name"]), str(rec.get("description") or "")
            ann = rec.get("annotations") or {}
        except (KeyError, TypeError):
            raise DataError(f"{path}: tools[{i}] is not a {{server, name, description, annotations}} record") from None
        if not isinstance(ann, dict) or any(v is not None and not isinstance(v, bool) for v in ann.values()):
            raise DataError(f"{path}: tools[{i}] ({server}/{name}): annotations must be booleans")
        if (server, name) in seen:
            dup += 1
            continue
        seen.add((server, name))
        h = {k: bool(v) for k, v in ann.items() if v is not None}
        contradictory += h.get("readOnlyHint") is True and h.get("destructiveHint") is True
        schema = rec.get("inputSchema")
        tools.append(make_tool(name, desc, where=f"{path}: tools[{i}] ({server})", parameters=schema if isinstance(schema, dict) else None))
        servers.append(server)
        hints.append(h)
        ids.append(i)
    weak = np.asarray([weak_label(h) for h in hints], dtype=np.int64)
    notes = [f"{len(tools)} tools from {len(set(servers))} servers; {int((weak > 0).sum())} with a usable hint"]
    if dup:
        notes.append(f"{dup} records repeat a name within their server: the first is kept")
    if contradictory:
        notes.append(f"{contradictory} tools declare readOnlyHint and destructiveHint both true: no label")
    return AnnotatedTools(tools, servers, hints, weak, notes, ids)



#: The rubric levels three annotators gave the same tools (``corpora/mcp-annotated/levels.jsonl``).
LEVELS_PATH = DEFAULT_PATH.with_name("levels.jsonl")


@dataclass(frozen=True)
class RubricLabel:
    """One tool's rubric votes and the level the span rule resolves them to."""

    id: int
    server: str
    name: str
    votes: dict[str, int]
    why: dict[str, str]
    level: int
    resolution: str


def load_levels(path: str | Path | None = None, tools_path: str | Path | None = None) -> dict[int, RubricLabel]:
    """The annotators' levels by tool id (its index in ``tools.json``), each resolved again by
    the span rule (:func:`riskrank.audit.resolve_votes`) and checked against the file's own
    resolution and against the tool it names (server, name and description digest)."""
    import hashlib

    from riskrank.audit import resolve_votes

    path = Path(path) if path is not None else LEVELS_PATH
    tools_path = Path(tools_path) if tools_path is not None else DEFAULT_PATH
    if not path.is_file():
        raise DataError(f"{path}: missing rubric levels file (a source checkout carries corpora/mcp-annotated/levels.jsonl)")
    records = json.loads(tools_path.read_text(encoding="utf-8"))["tools"]
    out: dict[int, RubricLabel] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            i, votes = int(rec["id"]), {str(k): int(v) for k, v in rec["votes"].items()}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise DataError(f"{path}:{n}: not a rubric label line ({{id, votes, ...}})") from None
        if not 0 <= i < len(records):
            raise DataError(f"{path}:{n}: id {i} is not a tool of {tools_path.name}")
        tool = records[i]
        digest = hashlib.sha256(str(tool.get("description") or "").encode()).hexdigest()[:16]
        if (rec.get("server"), rec.get("name"), rec.get("description_sha256")) != (tool["server"], tool["name"], digest):
            raise DataError(f"{path}:{n}: id {i} names {rec.get('server')}/{rec.get('name')}, which is not the tool in {tools_path.name} "
                            "(the tools file changed since the labels were made)")
        res = resolve_votes(list(votes.values()), 3)
        if res.level is None or res.level != rec.get("risk_level") or res.status != rec.get("resolution"):
            reviewed = rec.get("resolution") == "reviewed" and isinstance(rec.get("risk_level"), int)
            if not reviewed:
                raise DataError(f"{path}:{n}: votes {votes} resolve to {res.level} ({res.status}), the line says "
                                f"{rec.get('risk_level')} ({rec.get('resolution')})")
        level = int(rec["risk_level"])
        out[i] = RubricLabel(i, tool["server"], tool["name"], votes, dict(rec.get("why") or {}), level, str(rec["resolution"]))
    return out
