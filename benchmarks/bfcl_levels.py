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
import os
import sys
from pathlib import Path
from typing import Any

from riskrank.errors import DataError
from riskrank.registry import make_tool

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _bfcl_upstream as upstream  # noqa: E402
import _rated_registry as rated  # noqa: E402
from _rated_registry import description_digest  # noqa: E402

BFCL = "ShishirPatil/gorilla/berkeley-function-call-leaderboard"
LABELS = HERE.parent / "corpora" / "rubric-levels" / "bfcl-multi-turn.jsonl"
GROUP_KEY = "per_environment"


def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    """The labelled tools, one record per line (:data:`LABELS`)."""
    return rated.load_labels(path, ("name", "description_sha256"))


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


def labels_from_votes(data: Path, vote_files: list[Path], reviews: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The labels file's records from three annotators' files (``{name: {"level", "why"}}``,
    annotators A, B, C in the order given) by the span rule (:func:`_rated_registry.resolved`)."""
    records, _ = upstream.definitions(data / BFCL)
    files = rated.read_votes(vote_files)
    rated.check_unique([rec["name"] for rec in records], f"{BFCL} multi_turn_func_doc")
    return [{"id": n, "source": "bfcl_multi_turn", "name": rec["name"], "description_sha256": description_digest(rec["description"]),
             **rated.resolved(rec["name"], files, reviews)} for n, rec in enumerate(records)]


def report(data: Path) -> dict[str, Any]:
    rows = load_labels()
    tools, envs, labels = labelled_tools(data, rows)
    names = [t.name for t in tools]
    return rated.judge(tools, names, envs, [labels[n] for n in names], registry=f"{BFCL} multi_turn_func_doc",
                       labels_path=str(LABELS.relative_to(HERE.parent)), group_key=GROUP_KEY)


def doc_table(result: dict[str, Any]) -> str:
    """docs/base-model.md's tables for this registry, from the artefact."""
    return rated.doc_table(result, GROUP_KEY)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA", "data"), help="the data directory (riskrank data fetch)")
    ap.add_argument("--json", default=None, help="write the artefact here")
    ap.add_argument("--from-votes", nargs=3, type=Path, default=None, help="three annotators' files: write the labels file")
    ap.add_argument("--reviews", type=Path, default=None, help="written reviews of the tools at span >= 2")
    args = ap.parse_args()
    try:
        if args.from_votes:
            reviews = rated.read_json(args.reviews) if args.reviews else {}
            print(rated.write_labels(LABELS, labels_from_votes(Path(args.data), args.from_votes, reviews)))
            return
        out = report(Path(args.data))
    except DataError as exc:
        raise SystemExit(f"bfcl_levels: {exc}") from None
    rated.print_report(out, doc_table(out), args.json)

if __name__ == "__main__":
    main()
