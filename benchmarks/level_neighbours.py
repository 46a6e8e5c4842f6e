"""What the rated tools nearest a tool say of its level: a screen for the level model.

    python benchmarks/level_neighbours.py --json benchmarks/results/level_neighbours.json

The level model is linear in a tool's embedding, its capability flags, its text facts and its
words. A tool's nearest rated tools (by cosine of the same embeddings) are evidence a linear
score cannot express: a region of the space where most tools are L2 is L2 whatever direction
the weights point. This screen appends, for every tool, the similarity-weighted share of its
``k`` nearest rated tools above each level boundary (four columns, P(level > 1..4) among the
neighbours, times ``scale``) and fits the shipped form with them.

Nothing leaks across a fold: the neighbours of a held-out tool are the fold's training tools
rated under the anchors (the benchmarks' paper labels never vote), and a training tool's
neighbours exclude the tools of its own group (its MCP server, corpus or set), so that the fit
reads the column as it will be read for a server it has never seen.

Judged like ``benchmarks/level_forms.py``, with the choice of the model shipped then fixed (the
partial form without neighbours: its shrink, thresholds, hint floors and weights, read from its
run, ``benchmarks/results/risk_levels_partial.json``)
and nothing tuned per variant: each of the 23 MCP servers held out in turn, then each corpus and
the attack set. This is a screen on held-out figures: a variant taken from this table is a
choice made after they were seen, and it ships only through the whole procedure
(``benchmarks/risk_levels.py``, its inner split choosing ``k`` and ``scale``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from level_forms import Extra, judge, judged_table, n_tools
from level_readers import json_and_data
from risk_levels import UNREAD_SERVERS
from riskrank.fileio import write_json
from riskrank.training.levels import Choice, LevelData, neighbour_columns

CHOICE_FROM = Path(__file__).with_name("results") / "risk_levels_partial.json"
#: (k, scale) per variant; None: the input of the model shipped then alone.
VARIANTS: dict[str, tuple[int, float] | None] = {"shipped input": None, "k 10, scale 1": (10, 1.0), "k 10, scale 3": (10, 3.0),
                                                 "k 20, scale 1": (20, 1.0), "k 20, scale 3": (20, 3.0)}

#: How the table names a variant where its artefact key has aged: the screen ran before the
#: neighbours shipped, when its first row was the shipped model's input.
SHOWN = {"shipped input": "no neighbours (the model shipped then)"}


def extra_for(data: LevelData, k: int, scale: float) -> Extra:
    """The screen's columns for a fold (:func:`riskrank.training.levels.neighbour_columns` at ``k``),
    ``scale`` times; a training tool's own group never votes for it."""

    def extra(train: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tr = data.subset(np.isin(np.arange(len(data.y)), train))
        te = data.subset(np.isin(np.arange(len(data.y)), held))
        return (scale * neighbour_columns(tr, tr, own_group_votes=False, k=k),
                scale * neighbour_columns(te, tr, own_group_votes=True, k=k))

    return extra


def main() -> None:
    t0 = time.time()
    out_path, enc, data = json_and_data(__doc__)
    choice = Choice.from_dict(json.loads(CHOICE_FROM.read_text(encoding="utf-8"))["choice"])
    form = "proportional" if choice.shrink is None else f"partial shrink {choice.shrink:g}"
    dim = enc.dim
    out = {name: judge(form, data, choice, None if v is None else extra_for(data, v[0], v[1]), label=name)
           for name, v in VARIANTS.items()}
    doc = {"date": time.strftime("%Y-%m-%d"), "encoder": enc.identity, "choice": choice.to_dict(), "choice_from": CHOICE_FROM.name,
           "form": form, "n_tools": n_tools(data), "embedding_dim": dim, "unread_servers": list(UNREAD_SERVERS),
           "variants": {name: {"k": None if v is None else v[0], "scale": None if v is None else v[1], **out[name]}
                        for name, v in VARIANTS.items()},
           "seconds": round(time.time() - t0, 1)}
    if out_path:
        write_json(out_path, doc)


def table_md(doc: dict) -> str:
    """docs/base-model.md's table of the screen, rendered from the artefact."""
    return judged_table({SHOWN.get(k, k): v for k, v in doc["variants"].items()}, "input", exact=True)

if __name__ == "__main__":
    main()
