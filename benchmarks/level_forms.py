"""One score for every level boundary, or one each? The level model's forms compared.

    python benchmarks/level_forms.py --json benchmarks/results/level_forms.json

The level model reads P(level > k) for the four boundaries of the rubric's five levels. Until
2026-12-07 it drew all four from one score against four thresholds (``proportional``,
:func:`riskrank.training.levels.fit_ordinal`). What tells L1 from L2 (metadata or a business's
content) need not be what tells L3 from L4 (can it be undone), so two more forms are compared:
a weight vector per boundary alone (``boundaries``, :func:`~riskrank.training.levels.fit_boundaries`)
and a shared weight vector plus one per boundary penalised ``shrink`` times as much
(``partial shrink S``, :func:`~riskrank.training.levels.fit_partial`).

Judged like ``benchmarks/level_curve.py``, with nothing tuned per form: one fixed choice (the
one the inner split made for the one-score model shipped until 2026-12-07, read from
``benchmarks/results/risk_levels_proportional.json``: thresholds, hint floors, word weight) for
every form; each of the 23 MCP servers held out in turn (pooled, and over the 8 servers never
read while the capability patterns were written), then each corpus of the rated sample and the
attack set held out in turn (pooled, and the attack set alone). The served level's weighted κ,
exact and within-one agreement and the default policy's two errors against the annotators.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from level_readers import json_and_data
from risk_levels import UNREAD_SERVERS
from riskrank.fileio import write_json
from riskrank.levels import LevelModel
from riskrank.training.levels import (
    Choice,
    LevelData,
    agreement_row,
    fit_arrays,
    fit_partial,
    sample_weights,
    served,
    with_words,
    word_vectors,
)

CHOICE_FROM = Path(__file__).with_name("results") / "risk_levels_proportional.json"
FORMS = ("proportional", "boundaries", "partial shrink 1", "partial shrink 3", "partial shrink 10", "partial shrink 30")
SETS = {"apibank": ["apibank"], "toolalpaca": ["toolalpaca"], "bfcl": ["bfcl"], "ultratool": ["ultratool"],
        "sealtools": ["sealtools"], "attack set": ["attack", "lookalike"]}


def fixed_choice() -> Choice:
    c = json.loads(CHOICE_FROM.read_text(encoding="utf-8"))["choice"]
    return Choice.from_dict(c)


def _arrays(form: str, x: Any, y: np.ndarray, w: np.ndarray, penalty: float) -> dict[str, np.ndarray]:
    if form.startswith("partial shrink "):
        weight, th = fit_partial(x, y, w, penalty=penalty, shrink=float(form.rsplit(" ", 1)[1]))
        return {"ordinal.weight": weight, "ordinal.thresholds": th}
    return fit_arrays(x, y, w, penalty=penalty, form=form)


#: Columns a screen adds to the model's input: (training rows, held-out rows) -> their columns.
Extra = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def held_out(form: str, data: LevelData, units: dict[str, list[str]], choice: Choice, extra: Extra | None = None) -> np.ndarray:
    """The served level of every row of ``units``, each unit's by the form fitted without it (0
    elsewhere); ``extra`` appends columns computed from the fold's own training rows."""
    import scipy.sparse as sp

    pred = np.zeros(len(data.y), dtype=np.int64)
    for groups in units.values():
        held = np.isin(data.server, groups)
        train, test = data.subset(~held), data.subset(held)
        words = word_vectors(train, choice.word_scale)
        x_tr, x_te = with_words(train, words), with_words(test, words)
        if extra is not None:
            e_tr, e_te = extra(np.flatnonzero(~held), np.flatnonzero(held))
            x_tr, x_te = (sp.hstack([sp.csr_matrix(a), sp.csr_matrix(b)], format="csr") for a, b in ((x_tr, e_tr), (x_te, e_te)))
        arrays = _arrays(form, x_tr, train.y, sample_weights(train, choice.corpus_weight), choice.penalty)
        cum = LevelModel(arrays).cumulative(x_te)
        pred[held] = served(cum, test, choice.tau, choice.tau_cautious, choice.hint_floors)
    return pred


def _row(data: LevelData, pred: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in agreement_row(data.y[mask], pred[mask]).items()}


def n_tools(data: LevelData) -> dict[str, int]:
    """How many rated tools the two judgements read: the MCP servers', and the sets'."""
    return {"mcp": int((data.source == "mcp").sum()), "sets": int(np.isin(data.server, [g for gs in SETS.values() for g in gs]).sum())}


def judge(form: str, data: LevelData, choice: Choice, extra: Extra | None = None, label: str | None = None) -> dict[str, Any]:
    """The form judged twice: each of the 23 MCP servers held out in turn (pooled, and over the
    servers never read), and each corpus and the attack set held out in turn (pooled, and the
    attack set alone)."""
    t = time.time()
    mcp = data.source == "mcp"
    servers = {s: [s] for s in sorted(set(data.server[mcp]))}
    in_sets = np.isin(data.server, [g for gs in SETS.values() for g in gs])
    on_servers, on_sets = held_out(form, data, servers, choice, extra), held_out(form, data, SETS, choice, extra)
    out = {"servers": _row(data, on_servers, mcp), "servers never read": _row(data, on_servers, mcp & np.isin(data.server, UNREAD_SERVERS)),
           "sets": _row(data, on_sets, in_sets), "attack set": _row(data, on_sets, np.isin(data.server, SETS["attack set"])),
           "seconds": round(time.time() - t, 1)}
    r, s = out["servers"], out["sets"]
    print(f"{label or form:18s} servers κ {r['kappa_quadratic']:.3f} asked {r['low_asked']:.3f} unasked {r['high_unasked']:.3f} | "
          f"sets κ {s['kappa_quadratic']:.3f} asked {s['low_asked']:.3f} unasked {s['high_unasked']:.3f}", flush=True)
    return out


def main() -> None:
    t0 = time.time()
    out_path, enc, data = json_and_data(__doc__)
    choice = fixed_choice()
    out = {form: judge(form, data, choice) for form in FORMS}
    doc = {"date": time.strftime("%Y-%m-%d"), "encoder": enc.identity, "choice": choice.to_dict(), "choice_from": CHOICE_FROM.name,
           "n_tools": n_tools(data), "unread_servers": list(UNREAD_SERVERS), "forms": out, "seconds": round(time.time() - t0, 1)}
    if out_path:
        write_json(out_path, doc)


def judged_table(rows: dict[str, dict[str, Any]], head: str, *, exact: bool = False) -> str:
    """A table of :func:`judge`'s rows, one per name (``exact``: with the servers' exact agreement)."""
    cols = ["MCP servers: weighted κ", *(["exact"] if exact else []), "within one", "L1–L2 asked", "L4–L5 unasked",
            "never-read servers: κ", "corpora and attack set: κ", "L4–L5 unasked", "attack set: L4–L5 unasked"]
    lines = [f"| {head} | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731 - a one-line format
    for name, r in rows.items():
        s, n, t, at = r["servers"], r["servers never read"], r["sets"], r["attack set"]
        cells = [f"{s['kappa_quadratic']:.3f}", *([pct(s["exact"])] if exact else []), pct(s["within_one"]), pct(s["low_asked"]),
                 pct(s["high_unasked"]), f"{n['kappa_quadratic']:.3f}", f"{t['kappa_quadratic']:.3f}", pct(t["high_unasked"]),
                 pct(at["high_unasked"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table_md(doc: dict) -> str:
    """docs/base-model.md's table of the forms, rendered from the artefact."""
    return judged_table(doc["forms"], "form")

if __name__ == "__main__":
    main()
