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


def load_labels(path: Path) -> list[dict[str, Any]]:
    """The labelled tools of a labels file, one record per line."""
    if not path.is_file():
        raise DataError(f"{path}: missing (a source checkout carries it)")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return rows


def read_votes(vote_files: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Three annotators' files (``{key: {"level", "why"}}``) as annotators A, B, C in the order given."""
    return {chr(ord("A") + i): json.loads(Path(f).read_text(encoding="utf-8")) for i, f in enumerate(vote_files)}


def resolved(key: str, files: dict[str, dict[str, Any]], reviews: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One tool's votes, reasons and level by the span rule (:func:`riskrank.audit.resolve_votes`);
    a tool at span >= 2 takes its level from ``reviews`` (``{key: {"level", "reviewer", "note"}}``,
    written by a person who read the tool and the three reasons)."""
    from riskrank.audit import resolve_votes

    missing = [a for a, v in files.items() if key not in v]
    if missing:
        raise DataError(f"{key!r}: annotator {', '.join(missing)} gave no level")
    votes = {a: int(v[key]["level"]) for a, v in files.items()}
    res = resolve_votes(list(votes.values()), len(files))
    row: dict[str, Any] = {"votes": votes, "why": {a: str(v[key]["why"]) for a, v in files.items()}, "span": res.span,
                           "resolution": res.status, "risk_level": res.level}
    if res.level is None:
        review = reviews.get(key)
        if review is None:
            raise DataError(f"{key!r}: span {res.span} needs a written review (--reviews)")
        row.update(resolution="reviewed", risk_level=int(review["level"]), review={"reviewer": review["reviewer"], "note": review["note"]})
    return row


def retriever_of(tools: list[Any]) -> Any:
    """The base model's retriever over the registry: what ``find_tools`` and the gateway read."""
    from riskrank.pipeline import RiskAwareRetriever

    return RiskAwareRetriever(ToolRegistry(tools))


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


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    """Floats to four places; an undefined one (κ of a group whose tools all share one level) None."""
    return {k: ((round(v, 4) if np.isfinite(v) else None) if isinstance(v, float) else v) for k, v in row.items()}


def judge(tools: list[Any], keys: list[str], groups: list[str], labels: list[dict[str, Any]], *, registry: str, labels_path: str,
          group_key: str) -> dict[str, Any]:
    """The report on one rated registry: ``tools`` with their ``keys`` (unique), ``groups`` (a
    back-end, a server) and labels records, all in one order. The annotators' agreement per pair
    (the ceiling), the served levels against the resolved labels pooled and per group
    (``group_key`` names that table), with the shared openings read as each tool's, the
    confusion matrix, the fifteen furthest apart with their evidence, and every tool's pair."""
    votes = {a: np.asarray([r["votes"][a] for r in labels]) for a in sorted(labels[0]["votes"])}
    gold = np.asarray([r["risk_level"] for r in labels], dtype=np.int64)
    retriever = retriever_of(tools)
    pred, evidence = served_levels(retriever)
    pairs = [pair_stats(a, votes[a], b, votes[b], bootstrap=0).to_dict() for i, a in enumerate(votes) for b in list(votes)[i + 1:]]
    per_group = {g: _rounded(agreement_row(gold[m], pred[m])) for g in sorted(set(groups))
                 for m in [np.asarray([x == g for x in groups])]}
    moved = sorted(range(len(keys)), key=lambda i: (-abs(int(pred[i]) - int(gold[i])), keys[i]))[:15]
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
    pairs = ", ".join(f"{p['a']}–{p['b']} {p['kappa_quadratic']:.3f}" for p in ann["pairs"])
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
    return [f"{result['n_tools']} tools; annotators: " + ", ".join(f"{p['a']}-{p['b']} κ {p['kappa_quadratic']:.3f}"
                                                                    for p in result["annotators"]["pairs"]),
            f"served vs labels: κ {a['kappa_quadratic']:.3f}, exact {a['exact']:.3f}, within one {a['within_one']:.3f}, "
            f"L1-L2 asked {a['low_asked']}, L4-L5 unasked {a['high_unasked']}"]
