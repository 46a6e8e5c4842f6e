"""Tools rated under the rubric's anchors (docs/audit.md) by three annotators each.

Three sets, each carried by the repository with its votes, the span rule's resolution and, for
span >= 2, a written review:

* ``mcp``: the 1,302 real MCP tools of ``corpora/mcp-annotated/tools.json``
  (``levels.jsonl`` beside it; :func:`riskrank.datasets.mcp_annotated.load_levels`);
* the corpora sample (``corpora/rubric-levels/corpora.jsonl``): 895 tools drawn from API-Bank,
  ToolAlpaca, BFCL, UltraTool and Seal-Tools, named by corpus, name and a digest of the
  description (the definitions themselves come from the data directory, as every corpus does);
* ``attack`` (``corpora/rubric-levels/attack.json``): 260 definitions written for riskrank,
  160 giving an agent an attacker's capability (ATT&CK techniques, in riskrank's words) and 100
  benign look-alikes.

:func:`load_rubric_sets` returns each as a :class:`RubricSet`: tools, levels, a group per tool
(the MCP server, the corpus, or attack/look-alike) to hold out together, and declared hints.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.datasets.mcp_annotated import DEFAULT_PATH as MCP_TOOLS
from riskrank.datasets.mcp_annotated import load_annotated, load_levels
from riskrank.errors import DataError
from riskrank.registry import Tool, make_tool

RUBRIC_DIR = MCP_TOOLS.parents[1] / "rubric-levels"
CORPORA_LABELS = RUBRIC_DIR / "corpora.jsonl"
ATTACK_SET = RUBRIC_DIR / "attack.json"
#: The corpora the sample was drawn from, and the loader of each.
SAMPLE_SOURCES = ("apibank", "toolalpaca", "bfcl", "ultratool", "sealtools")


@dataclass
class RubricSet:
    """One rated set: tools (with parameters and, for MCP tools, hints stripped), their
    resolved levels 1..5, the group each belongs to, the hints the server declared, and the
    annotators' votes [N, 3]."""

    name: str
    tools: list[Tool]
    levels: np.ndarray
    groups: list[str]
    hints: list[dict[str, bool]]
    votes: np.ndarray
    extra: dict[str, list[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tools)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_mcp_set() -> RubricSet:
    """The MCP tools with their rubric levels (a name repeated within its server is dropped,
    as :func:`load_annotated` drops it)."""
    data = load_annotated()
    labels = load_levels()
    lv = np.asarray([labels[i].level for i in data.ids], dtype=np.int64)
    votes = np.asarray([[labels[i].votes[a] for a in sorted(labels[i].votes)] for i in data.ids], dtype=np.int64)
    return RubricSet("mcp", data.tools, lv, list(data.servers), list(data.hints), votes, {"id": list(data.ids)})


def load_corpora_set(data_dir: str | Path | None = None) -> RubricSet:
    """The corpora sample, its definitions read from the corpora in ``data_dir``."""
    from riskrank.datasets import load_benchmark, load_corpus

    if not CORPORA_LABELS.is_file():
        raise DataError(f"{CORPORA_LABELS}: missing (a source checkout carries it)")
    pools: dict[str, dict[tuple[str, str], Tool]] = {}
    for src in SAMPLE_SOURCES:
        reg = (load_benchmark(src, data_dir) if src in ("ultratool", "sealtools") else load_corpus(src, data_dir)).registry
        pools[src] = {(t.name, _digest(t.description)): t for t in reg}
    tools, levels, groups, votes, paper = [], [], [], [], []
    for n, line in enumerate(CORPORA_LABELS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        key = (rec["name"], rec["description_sha256"])
        tool = pools.get(rec["source"], {}).get(key)
        if tool is None:
            raise DataError(f"{CORPORA_LABELS}:{n}: {rec['source']} has no tool {rec['name']!r} with that description "
                            "(a different corpus version?)")
        tools.append(make_tool(tool.name, tool.description, parameters=tool.parameters, where=f"{CORPORA_LABELS}:{n}"))
        levels.append(int(rec["risk_level"]))
        groups.append(rec["source"])
        votes.append([rec["votes"][a] for a in sorted(rec["votes"])])
        paper.append(tool.risk_level)
    return RubricSet("corpora", tools, np.asarray(levels), groups, [{} for _ in tools], np.asarray(votes), {"paper_level": paper})


def load_attack_set() -> RubricSet:
    """The attack and look-alike definitions, grouped by kind."""
    if not ATTACK_SET.is_file():
        raise DataError(f"{ATTACK_SET}: missing (a source checkout carries it)")
    doc = json.loads(ATTACK_SET.read_text(encoding="utf-8"))
    tools, levels, groups, votes, techniques = [], [], [], [], []
    for i, rec in enumerate(doc["tools"]):
        tools.append(make_tool(rec["name"], rec["description"], parameters=rec.get("inputSchema"), where=f"{ATTACK_SET}: tools[{i}]"))
        levels.append(int(rec["risk_level"]))
        groups.append(str(rec["kind"]))
        votes.append([rec["votes"][a] for a in sorted(rec["votes"])])
        techniques.append(rec.get("technique"))
    return RubricSet("attack", tools, np.asarray(levels), groups, [{} for _ in tools], np.asarray(votes), {"technique": techniques})


def load_rubric_sets(data_dir: str | Path | None = None) -> list[RubricSet]:
    """All three sets (the corpora sample needs the corpora in ``data_dir``)."""
    return [load_mcp_set(), load_corpora_set(data_dir), load_attack_set()]
