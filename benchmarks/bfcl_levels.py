"""Served levels against three annotators on a registry the level model never read.

    python benchmarks/bfcl_levels.py --json benchmarks/results/bfcl_levels.json
    python benchmarks/bfcl_levels.py --from-votes A.json B.json C.json --reviews R.json   # writes the labels file

**The registry.** BFCL v4's multi-turn tools (``multi_turn_func_doc``: 128 tools of eight
back-ends: a file system, math, messages, posts, tickets, trading, travel, vehicle control),
exactly as ``benchmarks/session_replay.py`` serves them through ``riskrank mcp``. None of them is
among the tools the level model trains on (two of its 300 BFCL tools share a name, ``add`` and
``get_current_time``, with other descriptions).

**The labels.** ``corpora/rubric-levels/bfcl-multi-turn.jsonl``: three annotators, each an
independent session that read every definition under docs/audit.md's anchors and never saw
another's votes or riskrank's levels; the span rule resolves them (a unanimous level kept, the
median at span 1, a written review at span >= 2). No script assigned a label.

**What it reports.** The annotators' agreement per pair (the ceiling); the levels riskrank
serves for these tools (the level model, as ``find_tools`` and the gateway serve them) against
the resolved labels: weighted κ, exact and within-one agreement, the default policy's two
errors (tools rated L1-L2 that would be asked about, tools rated L4-L5 that would run without a
question), per back-end and pooled, and the confusion matrix. These labels are never used to
train or tune anything: they judge.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.agreement import pair_stats
from riskrank.errors import DataError
from riskrank.fileio import write_json
from riskrank.registry import ToolRegistry, make_tool
from riskrank.training.levels import agreement_row, confusion

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _bfcl_upstream as upstream  # noqa: E402

BFCL = "ShishirPatil/gorilla/berkeley-function-call-leaderboard"
LABELS = HERE.parent / "corpora" / "rubric-levels" / "bfcl-multi-turn.jsonl"


def description_digest(text: str) -> str:
    """How a label names its tool's description: the first 16 hex digits of its sha256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    """The labelled tools, one record per line (:data:`LABELS`)."""
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


def labelled_tools(data: Path, rows: list[dict[str, Any]]) -> tuple[list[Any], list[str], dict[str, dict[str, Any]]]:
    """The served definitions in label order, each tool's back-end, and the labels by name;
    a label whose description digest differs from the data's is an error (the data moved)."""
    records, owner = upstream.definitions(data / BFCL)
    by_name = {r["name"]: r for r in records}
    tools, envs, labels = [], [], {}
    for row in rows:
        rec = by_name.get(row["name"])
        if rec is None:
            raise DataError(f"{LABELS}: {row['name']!r} is not among BFCL's multi-turn tools")
        if description_digest(rec["description"]) != row["description_sha256"]:
            raise DataError(f"{LABELS}: {row['name']!r}: its description differs from the one the annotators read")
        tools.append(make_tool(rec["name"], rec["description"], parameters=rec["inputSchema"], where=f"{BFCL}: {rec['name']}"))
        envs.append(owner[rec["name"]])
        labels[rec["name"]] = row
    missing = sorted(set(by_name) - set(labels))
    if missing:
        raise DataError(f"{LABELS}: no label for {len(missing)} tools ({', '.join(missing[:5])} ...)")
    return tools, envs, labels


def retriever_of(tools: list[Any]) -> Any:
    """The base model's retriever over the registry: what ``find_tools`` and the gateway read."""
    from riskrank.pipeline import RiskAwareRetriever

    return RiskAwareRetriever(ToolRegistry(tools))


def served_levels(retriever: Any) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """The level riskrank serves each tool of ``retriever`` (:func:`retriever_of`) and its evidence."""
    levels = retriever.tool_levels
    return np.asarray(levels.levels, dtype=np.int64), list(levels.evidence)


def labels_from_votes(data: Path, vote_files: list[Path], reviews: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The labels file's records from three annotators' files (``{name: {"level", "why"}}``,
    annotators A, B, C in the order given) by the span rule (:func:`riskrank.audit.resolve_votes`);
    a tool at span >= 2 takes its level from ``reviews`` (``{name: {"level", "reviewer",
    "note"}}``, written by a person who read the tool and the three reasons)."""
    from riskrank.audit import resolve_votes

    records, _ = upstream.definitions(data / BFCL)
    files = {chr(ord("A") + i): json.loads(Path(f).read_text(encoding="utf-8")) for i, f in enumerate(vote_files)}
    out = []
    for n, rec in enumerate(records):
        name = rec["name"]
        votes = {a: int(v[name]["level"]) for a, v in files.items()}
        res = resolve_votes(list(votes.values()), len(files))
        row = {"id": n, "source": "bfcl_multi_turn", "name": name, "description_sha256": description_digest(rec["description"]),
               "votes": votes, "why": {a: str(v[name]["why"]) for a, v in files.items()}, "span": res.span,
               "resolution": res.status, "risk_level": res.level}
        if res.level is None:
            review = reviews.get(name)
            if review is None:
                raise DataError(f"{name!r}: span {res.span} needs a written review (--reviews)")
            row.update(resolution="reviewed", risk_level=int(review["level"]),
                       review={"reviewer": review["reviewer"], "note": review["note"]})
        out.append(row)
    return out


def levels_with_openings(retriever: Any) -> np.ndarray:
    """The levels the level model gives the tools of ``retriever`` when it reads each whole
    description, the registry's shared opening included (what it served before openings were
    read as the registry's: the choice is measured here, not made)."""
    from riskrank.levels import ToolEvidence

    tools = list(retriever.registry)
    return np.asarray(retriever.level_model.predict(retriever.tool_emb, tools, ToolEvidence.of(tools)).levels, dtype=np.int64)


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    """Floats to four places; an undefined one (κ of a back-end whose tools all share one level) None."""
    return {k: ((round(v, 4) if np.isfinite(v) else None) if isinstance(v, float) else v) for k, v in row.items()}


def report(data: Path) -> dict[str, Any]:
    rows = load_labels()
    tools, envs, labels = labelled_tools(data, rows)
    names = [t.name for t in tools]
    votes = {a: np.asarray([labels[n]["votes"][a] for n in names]) for a in sorted(rows[0]["votes"])}
    gold = np.asarray([labels[n]["risk_level"] for n in names], dtype=np.int64)
    retriever = retriever_of(tools)
    pred, evidence = served_levels(retriever)
    pairs = [pair_stats(a, votes[a], b, votes[b], bootstrap=0).to_dict() for i, a in enumerate(votes) for b in list(votes)[i + 1:]]
    per_env = {e: _rounded(agreement_row(gold[m], pred[m])) for e in sorted(set(envs))
               for m in [np.asarray([x == e for x in envs])]}
    moved = sorted(range(len(names)), key=lambda i: (-abs(int(pred[i]) - int(gold[i])), names[i]))[:15]
    return {
        "registry": f"{BFCL} multi_turn_func_doc", "n_tools": len(names), "labels": str(LABELS.relative_to(HERE.parent)),
        "annotators": {"pairs": [_rounded({k: v for k, v in p.items() if k != "confusion"}) for p in pairs],
                       "unanimous": int(sum(labels[n]["span"] == 0 for n in names)),
                       "span": dict(sorted(Counter(int(labels[n]["span"]) for n in names).items())),
                       "resolved": dict(sorted(Counter(int(g) for g in gold).items()))},
        "served": dict(sorted(Counter(int(p) for p in pred).items())),
        "agreement": _rounded(agreement_row(gold, pred)),
        "agreement_with_openings": _rounded(agreement_row(gold, levels_with_openings(retriever))),
        "per_environment": per_env,
        "confusion": confusion(gold, pred),
        "furthest": [{"tool": names[i], "label": int(gold[i]), "served": int(pred[i]), "evidence": list(evidence[i])} for i in moved],
        "levels": {n: {"label": int(g), "served": int(p)} for n, g, p in zip(names, gold, pred, strict=True)},
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def doc_table(result: dict[str, Any]) -> str:
    """docs/base-model.md's tables for this registry, from the artefact."""
    ann = result["annotators"]
    pairs = ", ".join(f"{p['a']}–{p['b']} {p['kappa_quadratic']:.3f}" for p in ann["pairs"])
    lines = [f"{result['n_tools']} tools; the annotators' weighted κ per pair {pairs}; {ann['unanimous']} unanimous, "
             f"no span over {max(int(k) for k in ann['span'])}; levels L1–L5 "
             + " / ".join(str(ann["resolved"].get(str(k), ann["resolved"].get(k, 0))) for k in range(1, 6)) + ".", "",
             "| tools | n | weighted κ | exact | within one | L1–L2 asked | L4–L5 run unasked |", "|---|---:|---:|---:|---:|---:|---:|"]
    rows = [("all", result["agreement"]), ("all, read with the shared openings", result["agreement_with_openings"])]
    rows += sorted(result["per_environment"].items())
    for name, r in rows:
        lines.append(f"| {name} | {r['n']} | {_num(r['kappa_quadratic'])} | {_pct(r['exact'])} | {_pct(r['within_one'])} | "
                     f"{_pct(r['low_asked'])} ({r['n_low']}) | {_pct(r['high_unasked'])} ({r['n_high']}) |")
    lines += ["", "Rows the annotators' level, columns the served one:", "", "| | L1 | L2 | L3 | L4 | L5 |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| L{i + 1} | " + " | ".join(str(c) for c in row) + " |" for i, row in enumerate(result["confusion"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"), help="the data directory (riskrank data fetch)")
    ap.add_argument("--json", default=None, help="write the artefact here")
    ap.add_argument("--from-votes", nargs=3, type=Path, default=None, help="three annotators' files: write the labels file")
    ap.add_argument("--reviews", type=Path, default=None, help="written reviews of the tools at span >= 2")
    args = ap.parse_args()
    if args.from_votes:
        reviews = json.loads(args.reviews.read_text(encoding="utf-8")) if args.reviews else {}
        rows = labels_from_votes(Path(args.data), args.from_votes, reviews)
        from riskrank.fileio import atomic_write_text

        atomic_write_text(LABELS, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{LABELS}: {len(rows)} tools, " + ", ".join(f"{k} {v}" for k, v in Counter(r["resolution"] for r in rows).items()))
        return
    out = report(Path(args.data))
    a = out["agreement"]
    print(f"{out['n_tools']} tools; annotators: " + ", ".join(f"{p['a']}-{p['b']} κ {p['kappa_quadratic']:.3f}"
                                                              for p in out["annotators"]["pairs"]))
    print(f"served vs labels: κ {a['kappa_quadratic']:.3f}, exact {a['exact']:.3f}, within one {a['within_one']:.3f}, "
          f"L1-L2 asked {a['low_asked']}, L4-L5 unasked {a['high_unasked']}")
    print(doc_table(out))
    if args.json:
        write_json(args.json, out)


if __name__ == "__main__":
    main()
