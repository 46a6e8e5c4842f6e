"""The offline risk audit (paper Section 4.2, Appendix A, Table 1) and its agreement statistics.

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

The label file has the shape of the paper's released files, name -> {risk_level, description},
plus ``votes``, ``span``, ``resolution``, ``evidence`` and ``provenance``, and keeps the tool's
``parameters`` and MCP ``annotations``, so every other command loads it as a registry.

Agreement: exact and within-one agreement and quadratically weighted Cohen's kappa per pair of
label sets (with bootstrap 95% intervals), Krippendorff's alpha (ordinal) over all raters
overall and on the tools with span <= 1, the span distribution (Table 1's columns) and the
confusion matrices (text, and a PNG heat map).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import click
import numpy as np

from riskrank import __version__
from riskrank.annotators import Annotator, Failure, Vote, make_annotator, tool_key
from riskrank.errors import RiskrankError
from riskrank.fileio import atomic_write_bytes, atomic_write_text
from riskrank.registry import REGISTRY_FORMATS, ToolRegistry
from riskrank.risk import ANNOTATION_PROMPT, RISK_LEVELS

VOTES_SUFFIX = ".votes.jsonl"
REVIEW_SUFFIX = ".review.jsonl"

#: Resolution of one tool's votes.
AGREED, MEDIAN, SINGLE = "agreed", "median", "single"
PENDING, REVIEWED, INCOMPLETE = "pending_review", "reviewed", "incomplete"
RULE = "span 0: keep; span 1: median; span >= 2: human review (paper Section 4.2)"


class AuditError(RiskrankError):
    """A vote log, label file or review file is unusable."""

    code = "audit_error"


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
            raise AuditError(f"{self.path}: another audit is writing this vote log; wait for it or use --votes") from None
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
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
        """Every well-formed record, in file order."""
        if not self.path.exists():
            return []
        out = []
        with self.path.open("rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # a torn tail (only when read without the lock)
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    self.skipped_lines += 1
                    continue
                if isinstance(rec, dict) and {"annotator", "config", "tool", "key"} <= rec.keys():
                    out.append(rec)
                else:
                    self.skipped_lines += 1
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
        self._fh.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        self._fh.flush()  # in the OS once written: a killed process loses nothing


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
        for ann in annotators:
            todo = []
            for i, t in enumerate(tools):
                rec = known.get((ann.name, ann.config, t.name, keys[i]))
                if rec is None:
                    todo.append(i)
                else:
                    run.votes[t.name][ann.name] = Vote(int(rec["level"]), str(rec.get("evidence", "")))
                    run.reused += 1
            if not todo:
                continue
            if echo:
                echo(f"{ann.name}: {len(todo)} tool(s) to annotate" + (f" ({len(tools) - len(todo)} from the vote log)" if len(todo) < len(tools) else ""))
            bar = None
            if progress and getattr(ann, "slow", False) and len(todo) > 20:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(todo), desc=ann.name, leave=False)
            results = ann.annotate([tools[i] for i in todo])
            try:
                for j, result in results:
                    i = todo[j]
                    t = tools[i]
                    rec = {"tool": t.name, "key": keys[i], "annotator": ann.name, "config": ann.config,
                           "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                    if isinstance(result, Failure):
                        log.append({**rec, "error": result.error})
                        run.failures.setdefault(t.name, {})[ann.name] = result.error
                    else:
                        log.append({**rec, "level": result.level, "evidence": result.evidence})
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
    return run


def _read_json_file(path: Path, what: str) -> Any:
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


def read_review(path: str | Path) -> list[dict[str, Any]]:
    """Review-queue entries; each line must name a tool, and ``risk_level`` (the reviewer's
    decision) must be null or an integer 1..5."""
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"{path}: no such review file")
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AuditError(f"{path}: line {lineno}: invalid JSON ({exc.msg})") from None
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
    file for the same tool and votes. An empty queue removes a stale file."""
    path = Path(path)
    if path.exists():
        try:
            old = {r["name"]: r for r in read_review(path)}
        except AuditError:
            old = {}
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


def apply_review(labels_path: str | Path, review_path: str | Path) -> tuple[int, int]:
    """Apply the reviewer's levels from the review file to the label file (in place,
    atomically); returns (applied, still pending)."""
    labels_path = Path(labels_path)
    labels = _read_json_file(labels_path, "label file")
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
    atomic_write_text(labels_path, json.dumps(labels, indent=2, ensure_ascii=False) + "\n")
    return applied, pending


# -- the cross-fitted learned risk head ----------------------------------------------------------------
def crossfit_risk_levels(
    registry: ToolRegistry, query_texts: Sequence[str], gold: Sequence[np.ndarray], *, encoder: Any = None,
    n_folds: int = 5, seed: int = 42, config: Any = None, progress: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levels from the learned risk head, cross-fitted over tools: the tools are cut into
    ``n_folds`` folds; for each fold the dual head is trained on the training queries with
    that fold's labels hidden (level 0: excluded from L_risk), and scores the fold's tools.
    Returns (levels [N], f_risk [N], fold per tool)."""
    from riskrank.datasets import crossfit_folds
    from riskrank.encoder import Encoder
    from riskrank.heads import HeadScorer
    from riskrank.risk import level_from_score
    from riskrank.training import TrainConfig, train_heads

    if not registry.has_labels:
        raise AuditError(f"cross-fitting the risk head needs a fully labelled registry ({registry.n_unlabelled} tools unlabelled)")
    enc = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
    tool_emb = enc.encode(registry.texts(), desc="encoding tools")
    query_emb = enc.encode(list(query_texts), desc="encoding queries")
    folds = crossfit_folds(len(registry), n_folds, seed)
    f_risk = np.empty(len(registry), dtype=np.float32)
    cfg = config or TrainConfig(seed=seed)
    for f in range(n_folds):
        held = folds == f
        levels = registry.risk_levels.copy()
        levels[held] = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "N tools have no risk label": that is the point
            res = train_heads(tool_emb, query_emb, list(gold), levels, cfg, progress=progress)
        f_risk[held] = HeadScorer(res.model, tool_emb[held]).f_risk
    return level_from_score(f_risk), f_risk, folds


# -- agreement statistics -----------------------------------------------------------------------------
_K = len(RISK_LEVELS)
_W = (np.subtract.outer(np.arange(_K), np.arange(_K)) ** 2).astype(np.float64)  # quadratic disagreement weights


def confusion(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """5 x 5 counts: rows a's level, columns b's level."""
    return np.bincount((np.asarray(a) - 1) * _K + (np.asarray(b) - 1), minlength=_K * _K).reshape(_K, _K)


def quadratic_kappa(conf: np.ndarray) -> np.ndarray:
    """Quadratically weighted Cohen's kappa from confusion matrices [..., 5, 5] (vectorised
    for the bootstrap; equal to sklearn's ``cohen_kappa_score(weights="quadratic")``)."""
    conf = np.asarray(conf, dtype=np.float64)
    n = conf.sum(axis=(-2, -1), keepdims=True)
    expected = conf.sum(axis=-1, keepdims=True) * conf.sum(axis=-2, keepdims=True) / np.where(n > 0, n, 1)
    num = (conf * _W).sum(axis=(-2, -1))
    den = (expected * _W).sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 1.0 - num / den, np.nan)


@dataclass
class PairStats:
    a: str
    b: str
    n: int
    exact: float
    within_one: float
    kappa: float
    confusion: np.ndarray
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "n": self.n, "exact": self.exact, "within_one": self.within_one,
                "kappa_quadratic": self.kappa, "ci95": {k: list(v) for k, v in self.ci.items()},
                "confusion": self.confusion.tolist()}


def pair_stats(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray, *, bootstrap: int = 1000, seed: int = 0) -> PairStats:
    """Exact, within-one and quadratic kappa (sklearn) for one pair, with percentile
    bootstrap 95% intervals over tools."""
    from sklearn.metrics import cohen_kappa_score

    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    n = len(a)
    conf = confusion(a, b)
    if n == 0:
        return PairStats(name_a, name_b, 0, math.nan, math.nan, math.nan, conf)
    diff = np.abs(a - b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant rater makes kappa undefined (nan)
        kappa = float(cohen_kappa_score(a, b, labels=list(RISK_LEVELS), weights="quadratic"))
    st = PairStats(name_a, name_b, n, float((diff == 0).mean()), float((diff <= 1).mean()), kappa, conf)
    if bootstrap and n > 1:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(bootstrap, n))
        cells = (a[idx] - 1) * _K + (b[idx] - 1) + (np.arange(bootstrap) * _K * _K)[:, None]
        confs = np.bincount(cells.ravel(), minlength=bootstrap * _K * _K).reshape(bootstrap, _K, _K)
        d = diff[idx]
        for key, vals in (("exact", (d == 0).mean(1)), ("within_one", (d <= 1).mean(1)), ("kappa_quadratic", quadratic_kappa(confs))):
            vals = vals[np.isfinite(vals)]
            if len(vals):
                st.ci[key] = (float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5)))
    return st


def krippendorff_ordinal(ratings: np.ndarray) -> float:
    """Krippendorff's alpha, ordinal, over raters x units (nan where undefined)."""
    import krippendorff

    ratings = np.asarray(ratings, dtype=np.float64)
    if ratings.shape[1] == 0 or len(np.unique(ratings[np.isfinite(ratings)])) < 2:
        return math.nan
    try:
        return float(krippendorff.alpha(reliability_data=ratings, level_of_measurement="ordinal",
                                        value_domain=list(RISK_LEVELS)))
    except (ValueError, ZeroDivisionError):
        return math.nan


@dataclass
class AgreementReport:
    raters: list[str]
    sources: dict[str, str]
    n: int
    pairs: list[PairStats]
    alpha_all: float
    alpha_span_le1: float
    span_counts: dict[str, int]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"raters": self.raters, "sources": self.sources, "n_tools": self.n,
                "pairs": [p.to_dict() for p in self.pairs],
                "krippendorff_alpha_ordinal": {"all": self.alpha_all, "span<=1": self.alpha_span_le1},
                "span": self.span_counts, "notes": self.notes}

    def format(self) -> str:
        def f(x: float, d: int = 3) -> str:
            return "-" if x is None or not np.isfinite(x) else f"{x:.{d}f}"

        def ci(p: PairStats, k: str) -> str:
            return f" [{f(p.ci[k][0])}, {f(p.ci[k][1])}]" if k in p.ci else ""

        lines = [f"{r}: {self.sources[r]}" for r in self.raters]
        lines.append(f"{self.n} tools rated by all {len(self.raters)}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("")
        rows = [[f"{p.a} vs {p.b}", str(p.n), f(p.exact) + ci(p, "exact"), f(p.within_one) + ci(p, "within_one"),
                 f(p.kappa) + ci(p, "kappa_quadratic")] for p in self.pairs]
        lines += _table(rows, ["pair", "n", "exact [95% CI]", "within one [95% CI]", "kappa_qw [95% CI]"])
        lines.append("")
        sc, n = self.span_counts, max(self.n, 1)
        lines.append("Table 1 (span = max - min over the raters; alpha = Krippendorff, ordinal):")
        lines += _table([[f(self.alpha_all), f(self.alpha_span_le1)] + [f"{sc[k]} ({100 * sc[k] / n:.1f}%)" for k in ("0", "1", ">=2")]],
                        ["alpha_all", "alpha_span<=1", "span=0", "span=1", "span>=2"])
        for p in self.pairs:
            lines.append("")
            lines.append(f"confusion ({p.a} rows, {p.b} columns):")
            lines += _table([[f"L{i + 1}", *map(str, p.confusion[i])] for i in range(_K)], ["", *(f"L{j + 1}" for j in range(_K))])
        return "\n".join(lines)


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    head = line(header)
    return [head, "-" * len(head), *(line(r) for r in rows)]


def agreement(ratings: dict[str, np.ndarray], sources: dict[str, str] | None = None, *, bootstrap: int = 1000,
              seed: int = 0, notes: Iterable[str] = ()) -> AgreementReport:
    """All statistics for aligned ratings (rater -> levels 1..5 over the same tools)."""
    raters = list(ratings)
    if len(raters) < 2:
        raise AuditError("agreement needs at least two raters")
    mat = np.stack([np.asarray(ratings[r], dtype=np.int64) for r in raters])
    if mat.size and (mat.min() < 1 or mat.max() > 5):
        raise AuditError("ratings must be levels 1-5")
    n = mat.shape[1]
    pairs = [pair_stats(a, ratings[a], b, ratings[b], bootstrap=bootstrap, seed=seed) for a, b in combinations(raters, 2)]
    span = mat.max(axis=0) - mat.min(axis=0) if n else np.zeros(0, dtype=np.int64)
    counts = {"0": int((span == 0).sum()), "1": int((span == 1).sum()), ">=2": int((span >= 2).sum())}
    return AgreementReport(raters, sources or {r: r for r in raters}, n, pairs, krippendorff_ordinal(mat),
                           krippendorff_ordinal(mat[:, span <= 1]), counts, list(notes))


def load_ratings(paths: Sequence[str | Path]) -> tuple[dict[str, np.ndarray], dict[str, str], list[str], list[str]]:
    """Aligned ratings from label files (any registry format with risk levels). Two or more
    files: one rater per file (A, B, C ...). One audit file: one rater per annotator, from
    its ``votes``. Returns (ratings, sources, tool names, notes)."""
    notes: list[str] = []
    regs = [ToolRegistry.load(p) for p in paths]
    if len(regs) == 1:
        reg = regs[0]
        annots: list[str] = []
        for t in reg:
            for a in (t.extra.get("votes") or {}):
                if a not in annots:
                    annots.append(a)
        if len(annots) < 2:
            raise AuditError(f"{paths[0]}: give two or more label files, or one audit file with votes of two or more annotators")
        names = [t.name for t in reg if all(_valid_level((t.extra.get("votes") or {}).get(a)) for a in annots)]
        if len(names) < len(reg):
            notes.append(f"{len(reg) - len(names)} tools lack a vote from some annotator: excluded")
        ratings = {a: np.array([reg[n].extra["votes"][a] for n in names], dtype=np.int64) for a in annots}
        return ratings, {a: f"votes in {paths[0]}" for a in annots}, names, notes
    letters = [chr(ord("A") + i) for i in range(len(regs))]
    common = [n for n in regs[0].names if all(n in r for r in regs[1:])]
    for letter, r in zip(letters, regs, strict=True):
        extra = len(r) - len(common)
        if extra:
            notes.append(f"{extra} tools of {letter} are missing from another file: excluded")
    names = [n for n in common if all(r[n].risk_level for r in regs)]
    if len(names) < len(common):
        notes.append(f"{len(common) - len(names)} common tools are unlabelled (risk_level null) in some file: excluded")
    if not names:
        raise AuditError("the label files share no labelled tool")
    ratings = {letter: np.array([r[n].risk_level for n in names], dtype=np.int64) for letter, r in zip(letters, regs, strict=True)}
    return ratings, {letter: str(p) for letter, p in zip(letters, paths, strict=True)}, names, notes


def _valid_level(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 5


def _axis_label(rater: str, sources: dict[str, str]) -> str:
    src = sources.get(rater, rater)
    return rater if src == rater or src.startswith("votes in") else f"{rater}: {Path(src).name}"


def confusion_png(report: AgreementReport, path: str | Path) -> Path:
    """Confusion matrices as heat maps, one panel per pair (colour: row-normalised share;
    text: counts)."""
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    pairs = report.pairs
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 4.0), squeeze=False)
    for ax, p in zip(axes[0], pairs, strict=True):
        conf = p.confusion.astype(np.float64)
        share = conf / np.maximum(conf.sum(axis=1, keepdims=True), 1)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
        for i in range(_K):
            for j in range(_K):
                ax.text(j, i, str(int(conf[i, j])), ha="center", va="center", fontsize=9,
                        color="white" if share[i, j] > 0.6 else "black")
        ticks = [f"L{k}" for k in RISK_LEVELS]
        ax.set_xticks(range(_K), ticks)
        ax.set_yticks(range(_K), ticks)
        ax.set_xlabel(_axis_label(p.b, report.sources))
        ax.set_ylabel(_axis_label(p.a, report.sources))
        ax.set_title(f"{p.a} vs {p.b}: exact {p.exact:.2f}, κ {p.kappa:.2f}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


# -- commands --------------------------------------------------------------------------------------
@click.command("audit")
@click.option("--registry", type=click.Path(dir_okay=False), default=None, help="Tool registry to annotate (any format).")
@click.option("--format", "fmt", type=click.Choice(REGISTRY_FORMATS), default="auto", show_default=True, help="Registry format.")
@click.option("--dataset", type=click.Choice(["ultratool", "sealtools", "demo"]), default=None,
              help="Annotate a benchmark's registry instead (needed by head:crossfit).")
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None, help="Data directory for --dataset.")
@click.option("--annotator", "-a", "annotators", multiple=True,
              help="openai:<model>[@<base-url>], keyword, head:<checkpoint>, head:crossfit; repeat for several (the paper: three).")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Label file to write (or to update, with --apply-review).")
@click.option("--review", type=click.Path(dir_okay=False), default=None, help="Review queue JSONL [default: OUT's name + .review.jsonl].")
@click.option("--votes", "votes_path", type=click.Path(dir_okay=False), default=None, help="Vote log JSONL [default: OUT's name + .votes.jsonl].")
@click.option("--apply-review", "apply_path", type=click.Path(dir_okay=False), default=None,
              help="Apply the reviewer's levels from this review file to --out, then exit.")
@click.option("--base-url", default=None, help="OpenAI-compatible base URL [default: $OPENAI_BASE_URL or https://api.openai.com/v1].")
@click.option("--api-key", default=None, help="API key [default: $OPENAI_API_KEY].")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per request.")
@click.option("--retries", type=int, default=5, show_default=True, help="Retries per request on 429, 5xx, timeouts.")
@click.option("--backoff", type=float, default=1.0, show_default=True, help="First retry delay in seconds (doubles each time).")
@click.option("--rate-limit", type=float, default=None, help="At most this many requests per minute per annotator.")
@click.option("--workers", type=int, default=4, show_default=True, help="Concurrent requests per annotator.")
@click.option("--encoder", default=None, help="Encoder for head annotators [default: the checkpoint's].")
@click.option("--folds", type=int, default=5, show_default=True, help="head:crossfit: folds over tools.")
@click.option("--seed", type=int, default=42, show_default=True, help="head:crossfit: fold and training seed.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def audit_command(registry: str | None, fmt: str, dataset: str | None, data_dir: str | None, annotators: tuple[str, ...],
                  out: str, review: str | None, votes_path: str | None, apply_path: str | None, base_url: str | None,
                  api_key: str | None, timeout: float, retries: int, backoff: float, rate_limit: float | None, workers: int,
                  encoder: str | None, folds: int, seed: int, quiet: bool) -> None:
    """Annotate every tool of a registry with risk levels 1-5 (paper Section 4.2, Appendix A).

    Each annotator votes on each tool; votes are resolved by their span (0: keep, 1: median,
    >= 2: written to the review queue and left unresolved). Every vote is appended to a vote
    log, so an interrupted run continues where it stopped. After review, apply the decisions
    with `riskrank audit --apply-review REVIEW.jsonl --out LABELS.json`.
    """
    out_path = Path(out)
    if apply_path:
        if registry or dataset or annotators:
            raise RiskrankError("--apply-review updates --out in place; do not give --registry, --dataset or --annotator with it")
        applied, pending = apply_review(out_path, apply_path)
        click.echo(f"applied {applied} review decision(s) to {out_path}" + (f"; {pending} tool(s) still await review" if pending else ""))
        return
    if bool(registry) == bool(dataset):
        raise RiskrankError("give exactly one of --registry FILE or --dataset NAME")
    if not annotators:
        raise RiskrankError("give at least one --annotator (the paper uses three)")
    bench = None
    if dataset:
        from riskrank.datasets import load_benchmark

        bench = load_benchmark(dataset, data_dir)
        reg, source = bench.registry, f"{dataset} ({bench.registry.source})"
    else:
        if out_path.exists() and Path(registry).resolve() == out_path.resolve():
            raise RiskrankError(f"--out {out} is the input registry; write the labels to another file")
        reg, source = ToolRegistry.load(registry, fmt=fmt), str(registry)
    log_default, review_default = default_side_paths(out_path)
    log_path = Path(votes_path) if votes_path else log_default
    review_path = Path(review) if review else review_default
    opts = {"base_url": base_url, "api_key": api_key, "timeout": timeout, "retries": retries, "backoff": backoff,
            "rate_limit": rate_limit, "workers": workers}
    anns = [make_annotator(a, benchmark=bench, encoder=encoder, openai_options=opts,
                           crossfit={"n_folds": folds, "seed": seed, "progress": not quiet}) for a in annotators]
    try:
        run = run_audit(reg, anns, log_path, progress=not quiet, echo=click.echo)
    except KeyboardInterrupt:
        click.echo(f"interrupted: the finished votes are in {log_path}; rerun the same command to continue", err=True)
        raise
    previous = None
    if out_path.is_file():
        with contextlib.suppress(AuditError):
            previous = _read_json_file(out_path, "label file")
    labels, queue = build_labels(reg, run, previous=previous if isinstance(previous, dict) else None, source=source)
    atomic_write_text(out_path, json.dumps(labels, indent=2, ensure_ascii=False) + "\n")
    write_review(review_path, queue)

    n = len(labels)
    by = {s: sum(1 for r in labels.values() if r["resolution"] == s) for s in (SINGLE, AGREED, MEDIAN, REVIEWED, PENDING, INCOMPLETE)}
    click.echo(f"{source}: {n} tools, annotators {', '.join(run.annotators)}; {run.new} new vote(s), {run.reused} from {log_path}"
               + (" (torn last line repaired)" if run.log_repaired else ""))
    if len(anns) > 1:
        spans = [r["span"] for r in labels.values() if r["span"] is not None]
        sc = {"0": sum(s == 0 for s in spans), "1": sum(s == 1 for s in spans), ">= 2": sum(s >= 2 for s in spans)}
        click.echo(", ".join(f"span {k}: {v} ({100 * v / max(len(spans), 1):.1f}%)" for k, v in sc.items()))
    levels = [r["risk_level"] for r in labels.values() if r["risk_level"]]
    click.echo("resolved: " + ", ".join(f"{k} {v}" for k, v in by.items() if v and k not in (PENDING, INCOMPLETE))
               + "; levels " + " ".join(f"L{k} {levels.count(k)}" for k in RISK_LEVELS))
    for a in anns:
        st = getattr(a, "stats", None)
        if st and st.get("requests"):
            click.echo(f"{a.name}: {st['requests']} request(s), {st['retries']} retried, {st['reasks']} re-asked, {st['failures']} failed")
    click.echo(f"wrote {out_path}")
    if queue:
        click.echo(f"{len(queue)} tool(s) with span >= 2 await review in {review_path}: set each risk_level, then run "
                   f"`riskrank audit --apply-review {review_path} --out {out_path}`")
    if by[INCOMPLETE]:
        failed = sorted({a for r in labels.values() for a in r.get("failures", {})})
        click.echo(f"{by[INCOMPLETE]} tool(s) lack a vote ({', '.join(failed) or 'interrupted'}); they are unlabelled. "
                   "Rerun the same command to retry them.", err=True)
        raise SystemExit(1)


@click.command("agreement")
@click.argument("labels", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--png", type=click.Path(dir_okay=False), default=None, help="Write the confusion matrices as a PNG heat map.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None, help="Write the statistics as JSON.")
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for the 95% intervals (0: none).")
@click.option("--seed", type=int, default=0, show_default=True)
def agreement_command(labels: tuple[str, ...], png: str | None, json_out: str | None, bootstrap: int, seed: int) -> None:
    """Agreement between label files LABELS_A LABELS_B [LABELS_C ...] (or among the annotators
    of one audit file): exact and within-one agreement, quadratic Cohen's kappa per pair,
    Krippendorff's alpha (ordinal) overall and on span <= 1, the span distribution of the
    paper's Table 1, and confusion matrices."""
    if bootstrap < 0:
        raise RiskrankError("--bootstrap must be >= 0")
    ratings, sources, _names, notes = load_ratings(labels)
    report = agreement(ratings, sources, bootstrap=bootstrap, seed=seed, notes=notes)
    click.echo(report.format())
    if png:
        confusion_png(report, png)
        click.echo(f"\nwrote {png}")
    if json_out:
        atomic_write_text(Path(json_out), json.dumps(report.to_dict(), indent=2, default=float) + "\n")
        click.echo(f"wrote {json_out}")
