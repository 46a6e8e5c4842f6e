"""A registry rated by three annotators, judged against the levels riskrank serves it.

What ``bfcl_levels.py`` and ``npm_levels.py`` share: the labels file (one JSON record per
line), the span rule over three annotators' files, the levels the base model's retriever serves
(what ``find_tools`` and the gateway read), and the report and its markdown table. The labels
judge: nothing trains or tunes on them.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.agreement import pair_stats
from riskrank.errors import DataError
from riskrank.registry import ToolRegistry
from riskrank.training.levels import agreement_row, confusion


def description_digest(text: str) -> str:
    """How a label names its tool's description: the first 16 hex digits of its sha256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: What every labels record carries (a registry's own module checks its definition fields).
LABEL_KEYS = ("votes", "why", "span", "resolution", "risk_level")


def load_labels(path: Path, keys: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The labelled tools of a labels file, one JSON object per line, each with
    :data:`LABEL_KEYS` and ``keys``, a level 1-5; a bad line is named by its number."""
    from riskrank.fileio import loads_strict

    if not path.is_file():
        raise DataError(f"{path}: missing (a source checkout carries it)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = loads_strict(line, str(path), DataError, line=n)
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {n}: not a JSON object")
        missing = [k for k in (*LABEL_KEYS, *keys) if k not in row]
        if missing:
            raise DataError(f"{path}: line {n}: no {', '.join(missing)}")
        if row["risk_level"] not in (1, 2, 3, 4, 5):
            raise DataError(f"{path}: line {n}: risk_level {row['risk_level']!r} is not a level 1-5")
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no labelled tools")
    return rows


def write_labels(path: Path, rows: list[dict[str, Any]]) -> str:
    """Write a labels file atomically; the line to print about it."""
    from riskrank.fileio import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return f"{path}: {len(rows)} tools, " + ", ".join(f"{k} {v}" for k, v in Counter(r["resolution"] for r in rows).items())


def read_json(path: Path) -> Any:
    """A votes, reviews or definitions file (a key given twice is an error, not the last one kept)."""
    from riskrank.fileio import loads_strict

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    return loads_strict(text, str(path), DataError)


def read_votes(vote_files: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Three annotators' files (``{key: {"level", "why"}}``) as annotators A, B, C in the order given."""
    files = {chr(ord("A") + i): read_json(f) for i, f in enumerate(vote_files)}
    for a, f in files.items():
        if not isinstance(f, dict):
            raise DataError(f"{vote_files[ord(a) - ord('A')]}: not a JSON object of key -> {{level, why}}")
    return files


def _level(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise DataError(f"{where}: level {value!r} is not a level 1-5")
    return value


def resolved(key: str, files: dict[str, dict[str, Any]], reviews: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One tool's votes, reasons and level by the span rule (:func:`riskrank.audit.resolve_votes`);
    a tool at span >= 2 takes its level from ``reviews`` (``{key: {"level", "reviewer", "note"}}``,
    written by a person who read the tool and the three reasons)."""
    from riskrank.audit import resolve_votes

    missing = [a for a, v in files.items() if not isinstance(v.get(key), dict)]
    if missing:
        raise DataError(f"{key!r}: annotator {', '.join(missing)} gave no level")
    if any(not str(v[key].get("why", "")).strip() for v in files.values()):
        raise DataError(f"{key!r}: a vote without its reason ('why')")
    votes = {a: _level(v[key].get("level"), f"{key!r}, annotator {a}") for a, v in files.items()}
    res = resolve_votes(list(votes.values()), len(files))
    row: dict[str, Any] = {"votes": votes, "why": {a: str(v[key]["why"]) for a, v in files.items()}, "span": res.span,
                           "resolution": res.status, "risk_level": res.level}
    if res.level is None:
        review = reviews.get(key)
        if review is None:
            raise DataError(f"{key!r}: span {res.span} needs a written review (--reviews)")
        if not all(str(review.get(k, "")).strip() for k in ("reviewer", "note")):
            raise DataError(f"{key!r}: a review names its reviewer and says why (reviewer, note)")
        row.update(resolution="reviewed", risk_level=_level(review.get("level"), f"{key!r}, review"),
                   review={"reviewer": review["reviewer"], "note": review["note"]})
    return row


def check_unique(keys: Sequence[str], where: str) -> None:
    """Each tool once: a key given twice is named."""
    twice = sorted(k for k, n in Counter(keys).items() if n > 1)
    if twice:
        raise DataError(f"{where}: {twice[0]!r} appears twice" + (f" (and {len(twice) - 1} more)" if len(twice) > 1 else ""))


def span_rule_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a labels record against the span rule (three annotators A-C, levels
    1-5, each with its reason; span and level as :func:`riskrank.audit.resolve_votes` gives
    them, a written review at span >= 2), None when nothing is."""
    from riskrank.audit import resolve_votes

    votes = list(row["votes"].values())
    if sorted(row["votes"]) != ["A", "B", "C"] or not all(1 <= v <= 5 for v in votes):
        return f"votes {row['votes']!r} are not three levels 1-5 from A, B and C"
    if not all(str(row["why"].get(a, "")).strip() for a in row["votes"]):
        return "a vote without its reason"
    res = resolve_votes(votes, 3)
    if row["span"] != res.span:
        return f"span {row['span']} where the votes give {res.span}"
    if res.level is None:
        return None if row["resolution"] == "reviewed" and str(row.get("review", {}).get("note", "")).strip() else "span >= 2 without a review"
    return None if (row["resolution"], row["risk_level"]) == (res.status, res.level) else "its level is not the votes' resolution"


def card_statements(rows: list[dict[str, Any]]) -> list[str]:
    """What a labels file's data card says of its votes (corpora/rubric-levels/README.md): the
    pairwise κ, the spans and the resolved levels."""
    votes = {a: np.asarray([r["votes"][a] for r in rows]) for a in "ABC"}
    kappas = sorted(round(pair_stats(a, votes[a], b, votes[b], bootstrap=0).kappa, 3) for a, b in ("AB", "AC", "BC"))
    counts = ", ".join(f"L{k} {sum(r['risk_level'] == k for r in rows)}" for k in range(1, 6))
    return [f"Pairwise weighted κ {kappas[0]:.3f}, {kappas[1]:.3f} and {kappas[2]:.3f}",
            f"{sum(r['span'] == 0 for r in rows)} unanimous, {sum(r['span'] == 1 for r in rows)} at span 1",
            f"Resolved levels: {counts}."]


def print_report(result: dict[str, Any], table: str, json_path: str | None) -> None:
    """Print a report's two summary lines and its table; write the artefact to ``json_path``."""
    from riskrank.fileio import write_json

    print("\n".join(summary_lines(result)))
    print(table)
    if json_path:
        write_json(json_path, result)


def retriever_of(tools: list[Any], groups: list[str] | None = None) -> Any:
    """The base model's retriever over the registry: what ``find_tools`` and the gateway read
    (``groups``: each tool's server, as a gateway over them counts shared openings)."""
    from riskrank.pipeline import RiskAwareRetriever

    return RiskAwareRetriever(ToolRegistry(tools), tool_groups=groups)


def served_levels(retriever: Any) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """The level riskrank serves each tool of ``retriever`` (:func:`retriever_of`) and its evidence."""
    levels = retriever.tool_levels
    return np.asarray(levels.levels, dtype=np.int64), list(levels.evidence)


def levels_with_openings(retriever: Any) -> np.ndarray:
    """The levels the level model gives the tools of ``retriever`` when it reads each whole
    description, the registry's shared opening included (what it served before openings were
    read as the registry's: the choice is measured here, not made)."""
    from riskrank.levels import ToolEvidence

    tools = list(retriever.registry)
    return np.asarray(retriever.level_model.predict(retriever.tool_emb, tools, ToolEvidence.of(tools)).levels, dtype=np.int64)


def capability_floors(retriever: Any) -> np.ndarray:
    """Each tool's capability floor as the served reading computes it (1: no dangerous capability)."""
    from riskrank.levels import ToolEvidence, own_texts

    read, openings = own_texts(list(retriever.registry), retriever.tool_groups)
    return np.asarray(ToolEvidence.of(read, openings).floors, dtype=np.int64)


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    """Floats to four places; an undefined one None."""
    return {k: ((round(v, 4) if np.isfinite(v) else None) if isinstance(v, float) else v) for k, v in row.items()}


def _group_row(gold: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    """A group's agreement row; its κ None where the labels hold a single level (κ then
    measures nothing: every disagreement reads as none at all)."""
    row = _rounded(agreement_row(gold, pred))
    if len(set(gold.tolist())) < 2:
        row["kappa_quadratic"] = None
    return row


def judge(tools: list[Any], keys: list[str], groups: list[str], labels: list[dict[str, Any]], *, registry: str, labels_path: str,
          group_key: str) -> dict[str, Any]:
    """The report on one rated registry: ``tools`` with their ``keys`` (unique), ``groups`` (a
    back-end, a server) and labels records, all in one order. The annotators' agreement per pair
    (the ceiling), the served levels against the resolved labels pooled and per group
    (``group_key`` names that table), with the shared openings read as each tool's, the
    confusion matrix, the capability floors against the labels (how many tools have one, how
    many of those the labels reach, and each floor above its tool's label: a capability read
    where the annotators see none), the fifteen furthest apart with their evidence, and every
    tool's pair."""
    votes = {a: np.asarray([r["votes"][a] for r in labels]) for a in sorted(labels[0]["votes"])}
    gold = np.asarray([r["risk_level"] for r in labels], dtype=np.int64)
    retriever = retriever_of(tools, groups)
    pred, evidence = served_levels(retriever)
    pairs = [pair_stats(a, votes[a], b, votes[b], bootstrap=0).to_dict() for i, a in enumerate(votes) for b in list(votes)[i + 1:]]
    per_group = {g: _group_row(gold[m], pred[m]) for g in sorted(set(groups))
                 for m in [np.asarray([x == g for x in groups])]}
    moved = sorted(range(len(keys)), key=lambda i: (-abs(int(pred[i]) - int(gold[i])), keys[i]))[:15]
    floors = capability_floors(retriever)
    caps = retriever.tool_levels.capabilities
    return {
        "registry": registry, "n_tools": len(keys), "labels": labels_path,
        "annotators": {"pairs": [_rounded({k: v for k, v in p.items() if k != "confusion"}) for p in pairs],
                       "unanimous": int(sum(r["span"] == 0 for r in labels)),
                       "span": dict(sorted(Counter(int(r["span"]) for r in labels).items())),
                       "resolved": dict(sorted(Counter(int(g) for g in gold).items()))},
        "served": dict(sorted(Counter(int(p) for p in pred).items())),
        "agreement": _rounded(agreement_row(gold, pred)),
        "agreement_with_openings": _rounded(agreement_row(gold, levels_with_openings(retriever))),
        group_key: per_group,
        "confusion": confusion(gold, pred),
        "capability_floors": {
            "tools_with_a_floor": int((floors > 1).sum()),
            "floor_within_label": int(((floors > 1) & (floors <= gold)).sum()),
            "floor_above_label": [{"tool": keys[i], "label": int(gold[i]), "floor": int(floors[i]), "capabilities": list(caps[i])}
                                  for i in np.flatnonzero(floors > gold)]},
        "furthest": [{"tool": keys[i], "label": int(gold[i]), "served": int(pred[i]), "evidence": list(evidence[i])} for i in moved],
        "levels": {k: {"label": int(g), "served": int(p)} for k, g, p in zip(keys, gold, pred, strict=True)},
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def doc_table(result: dict[str, Any], group_key: str) -> str:
    """The markdown tables docs/base-model.md shows for a rated registry, from its artefact."""
    ann = result["annotators"]
    pairs = ", ".join(f"{p['a']}–{p['b']} {_num(p['kappa_quadratic'])}" for p in ann["pairs"])
    lines = [f"{result['n_tools']} tools; the annotators' weighted κ per pair {pairs}; {ann['unanimous']} unanimous, "
             f"no span over {max(int(k) for k in ann['span'])}; levels L1–L5 "
             + " / ".join(str(ann["resolved"].get(str(k), ann["resolved"].get(k, 0))) for k in range(1, 6)) + ".", "",
             "| tools | n | weighted κ | exact | within one | L1–L2 asked | L4–L5 run unasked |", "|---|---:|---:|---:|---:|---:|---:|"]
    rows = [("all", result["agreement"]), ("all, read with the shared openings", result["agreement_with_openings"])]
    rows += sorted(result[group_key].items())
    for name, r in rows:
        lines.append(f"| {name} | {r['n']} | {_num(r['kappa_quadratic'])} | {_pct(r['exact'])} | {_pct(r['within_one'])} | "
                     f"{_pct(r['low_asked'])} ({r['n_low']}) | {_pct(r['high_unasked'])} ({r['n_high']}) |")
    lines += ["", "Rows the annotators' level, columns the served one:", "", "| | L1 | L2 | L3 | L4 | L5 |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| L{i + 1} | " + " | ".join(str(c) for c in row) + " |" for i, row in enumerate(result["confusion"])]
    return "\n".join(lines) + "\n"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Two printed lines: the annotators' κ per pair, the served levels against the labels."""
    a = result["agreement"]
    return [f"{result['n_tools']} tools; annotators: " + ", ".join(f"{p['a']}-{p['b']} κ {_num(p['kappa_quadratic'])}"
                                                                    for p in result["annotators"]["pairs"]),
            f"served vs labels: κ {_num(a['kappa_quadratic'])}, exact {_pct(a['exact'])}, within one {_pct(a['within_one'])}, "
            f"L1-L2 asked {_pct(a['low_asked'])}, L4-L5 unasked {_pct(a['high_unasked'])}"]
