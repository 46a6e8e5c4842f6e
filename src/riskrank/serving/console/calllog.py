"""The call log: the gateway's audit log filtered, paged newest first, and exported.

The records are :func:`riskrank.serving.gateway.auditlog.read_records`'s: a page reads the
file backwards and stops once it has the page, so the newest decisions cost the same in a
log of a hundred lines or a million. Exports stream every matching line in the file's own
order (oldest first): JSONL as written, or CSV whose cells a spreadsheet will not run.

Standard library only.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from riskrank.fileio import spreadsheet_cell
from riskrank.serving.gateway.auditlog import read_records

#: The table's columns, and the CSV's (the audit log's required fields first; ``anchor``: the
#: task the session started with; ``guards``: the chain's verdicts, :func:`guards_text`;
#: ``held_because``: why a held call was put to the user or the operator, one reason per line).
COLUMNS = ("time", "task", "tool", "level", "decision", "code", "reason", "decided_by", "note", "upstream", "session",
           "client", "anchor", "guards", "held_because")
#: Decisions the gateway writes (the filter's choices; others are shown as they come).
DECISIONS = ("found", "allowed", "refused", "pending", "failed", "upstream_up", "upstream_down", "pins", "scan",
             "login_failed", "auth_refused", "session", "recorded")


def _lines(value: Any) -> Any:
    """A list of reasons as one cell, a reason a line; anything else as it is."""
    return "\n".join(str(w) for w in value) if isinstance(value, list) else value


def guards_text(rec: Mapping[str, Any]) -> str:
    """A call's chain of guards in one line (``bounds pass, ..., scope hold drift, ...``);
    empty for a line without one."""
    entries = rec.get("guards")
    if not isinstance(entries, list):
        return ""
    return ", ".join(" ".join(str(x) for x in e) for e in entries if isinstance(e, list))


def guard_marks(rec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The chain's verdicts as the call log shows them: (guard, verdict, code) of every guard
    that held, refused or was off; the passes are summed up by the page."""
    entries = rec.get("guards")
    if not isinstance(entries, list):
        return []
    return [(str(e[0]), str(e[1]), str(e[2]) if len(e) > 2 else "") for e in entries
            if isinstance(e, list) and len(e) >= 2 and e[1] != "pass"]
MAX_QUERY_CHARS = 200


@dataclass(frozen=True)
class Filter:
    """What the table shows: ``q`` (a substring of task, tool, reason, code, who decided, or why
    a call was held, case-insensitive), ``decision``, ``tool`` (exact), ``level`` (exact)."""

    q: str = ""
    decision: str = ""
    tool: str = ""
    level: int | None = None

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> Filter:
        level = params.get("level", "")
        return cls(q=params.get("q", "").strip()[:MAX_QUERY_CHARS], decision=params.get("decision", "").strip()[:40],
                   tool=params.get("tool", "").strip()[:MAX_QUERY_CHARS],
                   level=int(level) if level.isdigit() and 1 <= int(level) <= 5 else None)

    def matches(self, rec: dict[str, Any]) -> bool:
        if self.decision and rec.get("decision") != self.decision:
            return False
        if self.tool and rec.get("tool") != self.tool:
            return False
        if self.level is not None and rec.get("level") != self.level:
            return False
        if self.q:
            held = rec.get("held_because")
            hay = " ".join([*(str(rec.get(k) or "") for k in ("task", "tool", "reason", "code", "decided_by", "note", "upstream")),
                            *(str(w) for w in (held if isinstance(held, list) else [held] if held else []))])
            if self.q.lower() not in hay.lower():
                return False
        return True

    def query(self, **extra: Any) -> str:
        """This filter (and ``extra``) as a query string, for links that keep it."""
        params = {"q": self.q, "decision": self.decision, "tool": self.tool, "level": self.level or "", **extra}
        return urlencode({k: v for k, v in params.items() if v not in ("", None)})


def page(path: Path, flt: Filter, number: int, size: int) -> tuple[list[dict[str, Any]], bool]:
    """The ``number``-th page (1-based) of matching records, newest first (each with every
    column, None where the record has none), and whether an older page exists."""
    skip, rows = (number - 1) * size, []
    for rec in read_records(path, newest_first=True):
        if not flt.matches(rec):
            continue
        if skip:
            skip -= 1
            continue
        if len(rows) == size:
            return rows, True
        rows.append({**dict.fromkeys(COLUMNS), **rec, "guard_marks": guard_marks(rec),
                     "guards_passed": sum(1 for e in rec.get("guards") or [] if isinstance(e, list) and e[1:2] == ["pass"])})
    return rows, False


def jsonl(path: Path, flt: Filter) -> Iterator[bytes]:
    for rec in read_records(path):
        if flt.matches(rec):
            yield (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def csv_lines(path: Path, flt: Filter) -> Iterator[bytes]:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")

    def flush() -> bytes:
        data = buf.getvalue().encode()
        buf.seek(0)
        buf.truncate()
        return data

    writer.writerow(COLUMNS)
    yield flush()
    for rec in read_records(path):
        if flt.matches(rec):
            writer.writerow([spreadsheet_cell(guards_text(rec) if c == "guards" else _lines(rec.get(c)) if c == "held_because"
                                              else rec.get(c)) for c in COLUMNS])
            yield flush()
