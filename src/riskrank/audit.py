"""The offline risk audit (paper Section 4.2, Appendix A): votes, their resolution, review.

Protocol: every annotator gives every tool one level 1..5 under Appendix A's rubric; the votes
are resolved by their span (max - min): span 0 keeps the level, span 1 takes the median, span
>= 2 goes to a human review queue and stays unresolved (``risk_level: null``, which the rule
filter treats as high risk: fail closed) until ``riskrank audit --apply-review``. The paper
uses three annotators; with an even number the median of a span-1 pair is the higher vote
(the conservative side), and a single annotator's vote is kept as is.

Resumability: every vote is appended to a JSONL vote log the moment it exists (one line,
flushed), keyed by (annotator, annotator config, tool name, hash of name + description). A
crash, a kill or Ctrl-C loses no finished vote; a rerun reads the log and asks only for the
votes it lacks. A torn last line (killed mid-write) is cut off on open. An exclusive lock on
the log stops two audits from writing it at once.

The log is not trusted as written: each line carries ``sum``, a checksum over the rest of
the line, and a line whose checksum fails (edited by hand, damaged, or written by a riskrank
without checksums) is ignored with a note, so its vote is asked again. Deterministic
annotators (keyword, a checkpoint's head) are cheap to rerun, so their logged votes are
recomputed on resume and a vote that differs from the annotator's own is replaced (and
reported), however well its line was forged. The checksum catches accidents and edits, not
someone who recomputes it; an LLM's vote cannot be recomputed, only re-asked.

The label file has the shape of the paper's released files, name -> {risk_level, description},
plus ``votes``, ``span``, ``resolution``, ``evidence`` and ``provenance``, and keeps the tool's
``parameters`` and MCP ``annotations``, so every other command loads it as a registry.

The annotators are :mod:`riskrank.annotators`; the agreement statistics of Table 1 are
:mod:`riskrank.agreement`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank._version import __version__
from riskrank.annotators import Annotator, Failure, Vote, tool_key
from riskrank.errors import AuditError
from riskrank.fileio import atomic_write_text, read_jsonl, write_json
from riskrank.registry import ToolRegistry
from riskrank.risk import ANNOTATION_PROMPT

VOTES_SUFFIX = ".votes.jsonl"
REVIEW_SUFFIX = ".review.jsonl"

#: Resolution of one tool's votes.
AGREED, MEDIAN, SINGLE = "agreed", "median", "single"
PENDING, REVIEWED, INCOMPLETE = "pending_review", "reviewed", "incomplete"
RULE = "span 0: keep; span 1: median; span >= 2: human review (paper Section 4.2)"


def default_side_paths(out: str | Path) -> tuple[Path, Path]:
    """(vote log, review queue) next to the label file: ``x.json`` -> ``x.votes.jsonl``,
    ``x.review.jsonl``."""
    out = Path(out)
    stem = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(stem + VOTES_SUFFIX), out.with_name(stem + REVIEW_SUFFIX)


# -- the vote log --------------------------------------------------------------------------------
class VoteLog:
    """Append-only JSONL of votes and failures; use as a context manager (takes the lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh = None
        self.skipped_lines = 0
        self.unverified_lines = 0
        self.repaired = False

    def __enter__(self) -> VoteLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+b")  # held for the run, closed in __exit__
        try:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover - no advisory locks on this platform
            pass
        except OSError:
            fh.close()
            raise AuditError(f"{self.path}: another audit is writing this vote log; wait for it, or give this run its own --out (its vote log and review file follow it)") from None
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size and not _holds_a_vote(fh):
            # another file given as the vote log (a queries file, a registry): appending would
            # break it, and cutting its "torn" last line would lose one of its records
            fh.close()
            raise AuditError(f"{self.path}: not a vote log (none of its lines is a vote); give --votes a vote log of "
                             "riskrank audit, or a new file; nothing was written")
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                # Killed mid-line: cut the torn record so the next append starts clean.
                fh.seek(0)
                data = fh.read()
                fh.truncate(data.rfind(b"\n") + 1)
                fh.flush()
                os.fsync(fh.fileno())
                self.repaired = True
        fh.seek(0, os.SEEK_END)
        self._fh = fh
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.flush()
            with contextlib.suppress(OSError):
                os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None

    def records(self) -> list[dict[str, Any]]:
        """Every well-formed record whose checksum holds, in file order (the others are
        counted in ``skipped_lines`` and ``unverified_lines``)."""
        if not self.path.exists():
            return []
        out = []
        with self.path.open("rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # a torn tail (only when read without the lock)
                try:
                    rec = json.loads(line)
                except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, too deep, a number too long
                    self.skipped_lines += 1
                    continue
                if not (isinstance(rec, dict) and {"annotator", "config", "tool", "key"} <= rec.keys()):
                    self.skipped_lines += 1
                elif rec.get("sum") != line_checksum(rec):
                    self.unverified_lines += 1
                else:
                    out.append(rec)
        return out

    def votes(self) -> dict[tuple[str, str, str, str], dict[str, Any]]:
        """(annotator, config, tool, key) -> the latest vote record (failures excluded)."""
        out = {}
        for rec in self.records():
            lvl = rec.get("level")
            if isinstance(lvl, int) and not isinstance(lvl, bool) and 1 <= lvl <= 5:
                out[(rec["annotator"], rec["config"], rec["tool"], rec["key"])] = rec
        return out

    def append(self, record: dict[str, Any]) -> None:
        assert self._fh is not None, "use VoteLog as a context manager"
        record = {**{k: v for k, v in record.items() if k != "sum"}}
        record["sum"] = line_checksum(record)
        self._fh.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        self._fh.flush()  # in the OS once written: a killed process loses nothing


def _holds_a_vote(fh: Any) -> bool:
    """Whether a file opened for the vote log holds at least one line shaped as a vote record."""
    fh.seek(0)
    for line in fh:
        try:
            rec = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            if not line.endswith(b"\n") and b'"annotator"' in line:
                return True  # the first vote, torn by a kill: repaired as any torn last line
            continue
        if isinstance(rec, dict) and {"annotator", "config", "tool", "key"} <= rec.keys():
            return True
    return False


def line_checksum(record: dict[str, Any]) -> str:
    """The ``sum`` of a vote-log line: sha256 over the canonical JSON of the rest of it."""
    rest = {k: v for k, v in record.items() if k != "sum"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


# -- span resolution -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Resolution:
    level: int | None
    span: int | None
    status: str
    median: int | None = None


def resolve_votes(levels: Sequence[int], n_annotators: int) -> Resolution:
    """The span rule. ``levels`` are the votes present; fewer than ``n_annotators`` is
    :data:`INCOMPLETE` (no label). The median of an even number of votes is rounded up."""
    if len(levels) < n_annotators or not levels:
        return Resolution(None, None, INCOMPLETE)
    lv = sorted(int(v) for v in levels)
    span = lv[-1] - lv[0]
    median = lv[len(lv) // 2]  # upper median: the conservative side for even counts
    if len(lv) == 1:
        return Resolution(lv[0], 0, SINGLE, lv[0])
    if span == 0:
        return Resolution(lv[0], 0, AGREED, median)
    if span == 1:
        return Resolution(median, 1, MEDIAN, median)
    return Resolution(None, span, PENDING, median)


# -- running an audit -----------------------------------------------------------------------------
@dataclass
class AuditRun:
    """Votes per tool (name -> annotator -> Vote), failures, and how many votes were new."""

    annotators: list[str]
    votes: dict[str, dict[str, Vote]]
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    new: int = 0
    reused: int = 0
    log_repaired: bool = False
    recomputed_differed: int = 0
    """Logged votes of deterministic annotators that their rerun contradicted."""


def run_audit(
    registry: ToolRegistry, annotators: Sequence[Annotator], log_path: str | Path, *,
    progress: bool = False, echo: Callable[[str], None] | None = None,
) -> AuditRun:
    """Collect every annotator's vote for every tool, reusing the votes in the log and
    appending each new one as soon as it exists."""
    names = [a.name for a in annotators]
    if len(set(names)) != len(names):
        raise AuditError(f"annotator given twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    tools = list(registry)
    keys = [tool_key(t) for t in tools]
    run = AuditRun(names, {t.name: {} for t in tools})
    with VoteLog(log_path) as log:
        run.log_repaired = log.repaired
        known = log.votes()
        if log.skipped_lines and echo:
            echo(f"note: {log.skipped_lines} unreadable line(s) in {log_path} ignored")
        if log.unverified_lines and echo:
            echo(f"note: {log.unverified_lines} line(s) in {log_path} failed their checksum (edited, damaged, or written "
                 "by an older riskrank); ignored, so their votes are asked again")
        for ann in annotators:
            # A deterministic annotator is rerun on every tool: its logged votes are checked, not trusted.
            recompute = bool(getattr(ann, "deterministic", False))
            todo, logged = [], {}
            for i, t in enumerate(tools):
                rec = known.get((ann.name, ann.config, t.name, keys[i]))
                if rec is not None and not recompute:
                    run.votes[t.name][ann.name] = Vote(int(rec["level"]), str(rec.get("evidence", "")))
                    run.reused += 1
                    continue
                todo.append(i)
                if rec is not None:
                    logged[i] = rec
            if not todo:
                continue
            missing = len(todo) - len(logged)
            if echo and missing:
                echo(f"{ann.name}: {missing} tool(s) to annotate" + (f" ({len(tools) - missing} from the vote log)" if missing < len(tools) else ""))
            bar = None
            if progress and getattr(ann, "slow", False) and len(todo) > 20:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(todo), desc=ann.name, leave=False)
            results = ann.annotate([tools[i] for i in todo])
            differed = 0
            try:
                for j, result in results:
                    i = todo[j]
                    t = tools[i]
                    prev = logged.get(i)
                    if prev is not None and isinstance(result, Vote) and int(prev["level"]) == result.level:
                        run.votes[t.name][ann.name] = result  # the logged vote, confirmed
                        run.reused += 1
                        continue
                    differed += prev is not None
                    rec = {"tool": t.name, "key": keys[i], "annotator": ann.name, "config": ann.config,
                           "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                    if isinstance(result, Failure):
                        log.append({**rec, "error": result.error})
                        run.failures.setdefault(t.name, {})[ann.name] = result.error
                    else:
                        log.append({**rec, "level": result.level, "evidence": result.evidence,
                                    **({"note": f"recomputed: the log said L{prev['level']}"} if prev is not None else {})})
                        run.votes[t.name][ann.name] = result
                        run.new += 1
                    if bar is not None:
                        bar.update(1)
            finally:
                # Close the generator now (not at garbage collection): its requests stop.
                with contextlib.suppress(Exception):
                    results.close()
                if bar is not None:
                    bar.close()
                close = getattr(ann, "close", None)
                if close is not None:
                    close()
            run.recomputed_differed += differed
            if differed and echo:
                echo(f"note: {differed} logged {ann.name} vote(s) differ from what {ann.name} gives now (an edited log?); "
                     "replaced by the recomputed votes")
    return run


def read_json_file(path: Path, what: str) -> Any:
    """A JSON file the audit reads (a label file); an unreadable one is an :class:`AuditError`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AuditError(f"{path}: no such {what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AuditError(f"{path}: not a JSON {what} ({exc})") from None


def build_labels(
    registry: ToolRegistry, run: AuditRun, *, previous: dict[str, Any] | None = None, source: str | None = None,
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(label records in registry order, review-queue entries). Decisions already applied
    with ``--apply-review`` (in ``previous``, the old label file) are kept while the tool's
    description and votes are unchanged."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    provenance = {
        "tool": f"riskrank {__version__} audit", "at": stamp, "rule": RULE, "annotators": run.annotators,
        "prompt_sha256": hashlib.sha256(ANNOTATION_PROMPT.encode()).hexdigest()[:12],
    }
    if source:
        provenance["registry"] = source
    labels: dict[str, dict[str, Any]] = {}
    queue: list[dict[str, Any]] = []
    previous = previous or {}
    for t in registry:
        got = run.votes.get(t.name, {})
        votes = {a: got[a].level for a in run.annotators if a in got}
        res = resolve_votes(list(votes.values()), len(run.annotators))
        rec: dict[str, Any] = {"risk_level": res.level, "description": t.description, "votes": votes,
                               "span": res.span, "resolution": res.status}
        evidence = {a: got[a].evidence for a in run.annotators if a in got and got[a].evidence}
        if evidence:
            rec["evidence"] = evidence
        if t.name in run.failures:
            rec["failures"] = run.failures[t.name]
        if res.status == PENDING:
            old = previous.get(t.name)
            if (isinstance(old, dict) and old.get("resolution") == REVIEWED and old.get("votes") == votes
                    and old.get("description") == t.description):
                rec.update(risk_level=old.get("risk_level"), resolution=REVIEWED)
                for k in ("reviewer", "review_note"):
                    if old.get(k):
                        rec[k] = old[k]
            else:
                queue.append({"name": t.name, "description": t.description, "votes": votes, "span": res.span,
                              "median": res.median, "risk_level": None, "reviewer": None, "note": None})
        rec["provenance"] = provenance
        if t.parameters is not None:
            rec["parameters"] = dict(t.parameters)
        if t.annotations:
            rec["annotations"] = dict(t.annotations)
        labels[t.name] = rec
    return labels, queue


def read_review(path: Any) -> list[dict[str, Any]]:
    """Review-queue entries; each line must name a tool, and ``risk_level`` (the reviewer's
    decision) must be null or an integer 1..5. ``path`` may be a queue kept elsewhere (the
    gateway's state store: an object with ``read_entries``)."""
    if hasattr(path, "read_entries"):
        return path.read_entries()
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"{path}: no such review file")
    out = []
    for lineno, rec in read_jsonl(path, AuditError):
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str):
            raise AuditError(f"{path}: line {lineno}: expected an object with the tool's 'name'")
        lvl = rec.get("risk_level")
        if lvl is not None and (isinstance(lvl, bool) or not isinstance(lvl, int) or not 1 <= lvl <= 5):
            raise AuditError(f"{path}: line {lineno} ({rec['name']!r}): risk_level must be null or an integer 1-5, got {lvl!r}")
        rec["_line"] = lineno
        out.append(rec)
    return out


def write_review(path: str | Path, queue: list[dict[str, Any]]) -> None:
    """Write the review queue, keeping decisions a reviewer already typed into the existing
    file for the same tool and votes. An empty queue removes a stale file. An existing file
    that cannot be read (a typo in a decision) is refused, not overwritten: the decisions
    typed into it would be lost."""
    path = Path(path)
    if path.exists():
        try:
            old = {r["name"]: r for r in read_review(path)}
        except AuditError as exc:
            raise AuditError(f"{exc}; the review file is left as it is (correct the line, then run again)") from None
        for entry in queue:
            prev = old.get(entry["name"])
            if prev and prev.get("votes") == entry["votes"]:
                for k in ("risk_level", "reviewer", "note"):
                    if prev.get(k) is not None:
                        entry[k] = prev[k]
    if not queue:
        path.unlink(missing_ok=True)
        return
    atomic_write_text(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in queue))


def save_review_decision(path: Any, name: str, level: int, reviewer: str, note: str, *,
                         votes: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Record one reviewer's decision (``risk_level``, ``reviewer``, ``note``) for the tool
    ``name`` in the review file, atomically, keeping every other line as it was; returns
    the entries as written. ``votes``: the votes the reviewer saw, refused if the file now
    holds others (the audit was rerun meanwhile)."""
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 5:
        raise AuditError(f"{name!r}: the level must be an integer 1-5, got {level!r}")
    if not reviewer.strip() or not note.strip():
        raise AuditError(f"{name!r}: a review decision needs the reviewer's name and a reason")
    entries = read_review(path)
    entry = next((e for e in entries if e["name"] == name), None)
    if entry is None:
        raise AuditError(f"{path}: no tool {name!r} awaits review")
    if votes is not None and entry.get("votes") != votes:
        raise AuditError(f"{path}: the votes of {name!r} changed since the page was shown (the audit was rerun); "
                         "reload the review queue")
    entry.update(risk_level=level, reviewer=reviewer.strip(), note=note.strip())
    for e in entries:
        e.pop("_line", None)
    if hasattr(path, "write_entries"):  # a queue in the state store: written if nobody wrote it since the read
        path.write_entries(entries)
    else:
        atomic_write_text(path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
    return entries


def apply_review(labels_path: str | Path, review_path: str | Path) -> tuple[int, int]:
    """Apply the reviewer's levels from the review file to the label file (in place,
    atomically); returns (applied, still pending)."""
    labels_path = Path(labels_path)
    labels = read_json_file(labels_path, "label file")
    if not isinstance(labels, dict) or not all(isinstance(v, dict) for v in labels.values()):
        raise AuditError(f"{labels_path}: not a label file (a name -> record object)")
    applied = pending = 0
    for rec in read_review(review_path):
        name, where = rec["name"], f"{review_path}: line {rec['_line']} ({rec['name']!r})"
        if name not in labels:
            raise AuditError(f"{where}: no such tool in {labels_path}")
        lab = labels[name]
        if "votes" in rec and lab.get("votes") is not None and rec["votes"] != lab["votes"]:
            raise AuditError(f"{where}: the votes differ from {labels_path} (the audit changed since this queue was "
                             "written); rerun `riskrank audit` to refresh the queue")
        if rec.get("risk_level") is None:
            if lab.get("resolution") != REVIEWED:
                pending += 1
            continue
        lab["risk_level"] = int(rec["risk_level"])
        lab["resolution"] = REVIEWED
        for src, dst in (("reviewer", "reviewer"), ("note", "review_note")):
            if rec.get(src):
                lab[dst] = rec[src]
        applied += 1
    write_json(labels_path, labels, ensure_ascii=False)
    return applied, pending
