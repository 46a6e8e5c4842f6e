"""The level model judged by leaving data out (riskrank.training.levels), and the shipped one built.

    python benchmarks/risk_levels.py --json benchmarks/results/risk_levels.json [--save src/riskrank/base/levels]

What it measures, against the rubric levels three annotators gave (riskrank.datasets.rubric):

* the annotators' own agreement (per pair, pooled and per MCP server): the ceiling;
* leave one MCP server out: each of the 23 servers' tools served by a model fitted and tuned
  without that server, with its declared hints applied as the gateway applies them; weighted κ,
  exact and within-one agreement, and the default policy's two errors (tools rated L1-L2 that
  would be asked about, tools rated L4-L5 that would run without a question), per server and
  pooled; the confusion matrix; the read-only vs destructive AUCs of the served level;
* the same with each corpus of the rated sample, and the attack set, held out in turn;
* the paper's own labels of UltraTool and Seal-Tools, each benchmark held out;
* before: what the previous release served for the same tools
  (``benchmarks/results/levels_before.json``, made by ``benchmarks/levels_before.py`` run on a
  checkout of that release);
* the cost of reading a registry's levels (capabilities, text facts, the model) per tool.

``--save`` fits the model on everything with the choice the inner split makes over all servers
and writes it (what the package ships). ``--shrinks 1,3,10`` lets every inner split choose the
partial form at those shrinks beside the one-score form (default: the training code's
``PARTIAL_SHRINKS``); ``--neighbours 1,3`` lets it choose the neighbour columns at those weights
beside none (default: ``NEIGHBOUR_SCALES``, 1 and 3; ``--neighbours ''``: none); ``--workers 2`` holds the units out in two
processes (the same figures). ``--fit-from ARTEFACT --save FOLDER`` skips the held-out runs and
fits on everything with the choice an earlier run of this script recorded (what ``--save`` at
the end of that run would have written, without the hour). ``--tau-low 0.2`` also offers 0.2 to
the L2/L3 and L3/L4 thresholds the inner split chooses (``TAU_LOW``; off by default, measured in
``risk_levels_lowtau.json``). ``--frontier-of ARTEFACT`` adds an earlier run's two-threshold
re-read of its held-out probabilities (``frontier_boundaries``: τ₂ and τ₃ together, nothing
refitted) to that artefact; every run writes it too.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from riskrank.agreement import agreement
from riskrank.datasets import load_benchmark
from riskrank.datasets.rubric import load_rubric_sets
from riskrank.encoder import Encoder
from riskrank.levels import ToolEvidence
from riskrank.training.levels import (
    NEIGHBOUR_SCALES,
    PARTIAL_SHRINKS,
    Choice,
    LevelData,
    agreement_row,
    build_data,
    choose,
    confusion,
    fit_level_model,
    leave_groups_out,
    paper_agreement,
)

BEFORE = Path(__file__).with_name("results") / "levels_before.json"
#: The half of the attack set read while the capability patterns were extended (seeded; the
#: other half was never read): the first 130 ids of this permutation.
ATTACK_READ_SEED, ATTACK_READ_N = 20261206, 130
#: The MCP servers whose tools were not read while the capability patterns were written (drawn
#: at random, seed 20261205, before any level of them was seen); the other 15 were read.
UNREAD_SERVERS = ("ChromeDevTools/chrome-devtools-mcp", "cloudflare/mcp-server-cloudflare", "hashicorp/vault-mcp-server",
                  "korotovsky/slack-mcp-server", "microsoft/mcp", "sooperset/mcp-atlassian", "stripe/agent-toolkit",
                  "wonderwhy-er/DesktopCommanderMCP")
TARGETS = {"kappa_quadratic": 0.85, "within_one": 0.97, "low_asked": 0.10, "high_unasked": 0.01, "ms_per_tool": 1.0}


def _f(v: float | None, d: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.{d}f}"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def annotator_agreement(sets: list) -> dict:
    """Pairwise agreement of the three annotators on each set, and per MCP server."""
    out = {}
    for s in sets:
        ratings = {a: s.votes[:, j] for j, a in enumerate("ABC")}
        rep = agreement(ratings, bootstrap=1000)
        out[s.name] = rep.to_dict()
        if s.name == "mcp":
            per = {}
            groups = np.asarray(s.groups)
            for g in sorted(set(s.groups)):
                m = groups == g
                sub = agreement({a: s.votes[m, j] for j, a in enumerate("ABC")}, bootstrap=0)
                per[g] = {"n": int(m.sum()), "kappa": {f"{p.a}-{p.b}": p.kappa for p in sub.pairs},
                          "span0": sub.span_counts["0"]}
            out["mcp_per_server"] = per
    return out


def hint_aucs(levels: np.ndarray, hints: list[dict]) -> dict:
    from sklearn.metrics import roc_auc_score

    ro = np.asarray([h.get("readOnlyHint") is True and h.get("destructiveHint") is not True for h in hints])
    de = np.asarray([h.get("destructiveHint") is True and h.get("readOnlyHint") is not True for h in hints])
    nro = np.asarray([h.get("readOnlyHint") is False for h in hints])

    def auc(pos: np.ndarray, neg: np.ndarray) -> float:
        return float(roc_auc_score(np.r_[np.ones(pos.sum()), np.zeros(neg.sum())], np.r_[levels[pos], levels[neg]]))

    return {"destructive_vs_read_only": auc(de, ro), "not_read_only_vs_read_only": auc(nro, ro)}


def calibration(cum: np.ndarray, gold: np.ndarray, bins: int = 10) -> dict:
    """Expected calibration error of P(level >= k) for k = 2..5 (10 equal-width bins)."""
    out = {}
    for k in range(4):
        p, y = cum[:, k], (gold > k + 1).astype(float)
        idx = np.minimum((p * bins).astype(int), bins - 1)
        ece = sum(abs(p[idx == b].mean() - y[idx == b].mean()) * (idx == b).mean() for b in range(bins) if (idx == b).any())
        out[f"P(L>={k + 2})"] = float(ece)
    return out


def policy_table(gold: np.ndarray, pred: np.ndarray, confirm_level: int = 3) -> dict:
    """Per rubric level: tools, asked about (served >= confirm_level), run without a question."""
    return {str(lv): {"n": int((gold == lv).sum()), "asked": int(((gold == lv) & (pred >= confirm_level)).sum()),
                      "unasked": int(((gold == lv) & (pred < confirm_level)).sum())} for lv in range(1, 6)}


def _reread(doc: dict, data: LevelData) -> tuple[np.ndarray, Callable[[float | None, float | None], np.ndarray]]:
    """The leave-one-server-out run's gold levels, and its held-out probabilities served again at
    another L2/L3 (``t2``) and L3/L4 (``t3``) threshold (None: as each fold chose it), every other
    threshold and hint floor as each fold chose them. Nothing refitted."""
    from riskrank.training.levels import served

    loso = doc["leave_one_server_out"]
    rows = np.asarray(loso["predictions"]["rows"])
    cum = np.asarray(loso["predictions"]["cumulative"])
    units = {u: np.flatnonzero(data.server[rows] == u) for u in loso["choices"]}
    subsets = {u: data.subset(np.isin(np.arange(len(data.y)), rows[pos])) for u, pos in units.items()}

    def at(t2: float | None, t3: float | None) -> np.ndarray:
        pred = np.zeros(len(rows), dtype=np.int64)
        for u, pos in units.items():
            ch = loso["choices"][u]
            tau = (ch["tau"][0], ch["tau"][1] if t2 is None else t2, ch["tau"][2] if t3 is None else t3, ch["tau"][3])
            pred[pos] = served(cum[pos], subsets[u], tau, ch["tau_cautious"], tuple(ch["hint_floors"]))
        return pred

    return data.y[rows], at


def frontier(doc: dict, data: LevelData) -> list[dict]:
    """What the default policy would do at other values of the L2/L3 threshold tau_2 (the rest of
    the choice as made): the leave-one-server-out probabilities re-read, nothing refitted. An
    operator's view of the trade-off; the shipped tau_2 was chosen by the inner split."""
    gold, at = _reread(doc, data)
    return [{"tau_2": t2, **agreement_row(gold, at(t2, None))} for t2 in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)]


#: The thresholds the two-boundary re-read crosses: the L2/L3 one (asked or not) and the L3/L4 one.
FRONTIER_TAU_2 = (0.3, 0.4, 0.5, 0.6)
FRONTIER_TAU_3 = (0.2, 0.3, 0.4, 0.5, 0.6)


def frontier_boundaries(doc: dict, data: LevelData) -> list[dict]:
    """The same re-read as :func:`frontier` over the L2/L3 and the L3/L4 thresholds together (the
    outer two as each fold chose them): whether a model that asks less at L2/L3 keeps the likely
    L4 tools above the line when L3/L4 is read lower. Nothing refitted, nothing chosen."""
    gold, at = _reread(doc, data)
    return [{"tau_2": t2, "tau_3": t3, **agreement_row(gold, at(t2, t3))} for t2 in FRONTIER_TAU_2 for t3 in FRONTIER_TAU_3]


def read_split(doc: dict, data: LevelData) -> dict:
    """Leave one server out, pooled separately over the servers read while the patterns were
    written and those never read (the honest judge of the patterns)."""
    loso = doc["leave_one_server_out"]
    rows = np.asarray(loso["predictions"]["rows"])
    pred = np.asarray(loso["predictions"]["served"])
    unread = np.isin(data.server[rows], UNREAD_SERVERS)
    return {"never read": agreement_row(data.y[rows][unread], pred[unread]), "read": agreement_row(data.y[rows][~unread], pred[~unread])}


def trusting(doc: dict, data: LevelData, tools: list) -> dict:
    """Leave one server out as ``--trust-annotations`` would serve it: each held-out tool's served
    level, capped by its own uncontradicted ``readOnlyHint`` (never below its capability floor;
    ignored beside a ``destructiveHint``), as the gateway does when an operator trusts the
    servers' hints. Nothing refitted: the levels of the default run, re-read."""
    from riskrank.risk import trusted_read_only_level

    loso = doc["leave_one_server_out"]
    rows = np.asarray(loso["predictions"]["rows"])
    pred = np.asarray(loso["predictions"]["served"]).copy()
    mcp_rows = np.flatnonzero(data.source == "mcp")
    tool_of = {int(r): t for r, t in zip(mcp_rows, tools, strict=True)}
    for k, r in enumerate(rows):
        h = data.hints[r]
        if h.get("readOnlyHint") is True and h.get("destructiveHint") is not True:
            pred[k] = trusted_read_only_level(tool_of[int(r)], int(pred[k]), int(data.floors[r]))
    gold = data.y[rows]
    return {**agreement_row(gold, pred), "policy": policy_table(gold, pred),
            "read_only_hints": int(sum(data.hints[r].get("readOnlyHint") is True for r in rows))}


def table_md(doc: dict) -> str:
    """The tables of docs/base-model.md's level-model section, rendered from the artefact."""
    ag = doc["annotators"]["mcp"]
    lines = ["Annotators (three, apart; the ceiling), on the 1,298 MCP tools:", "",
             "| pair | exact | within one | weighted κ |", "|---|---|---|---|"]
    for p in ag["pairs"]:
        lines.append(f"| {p['a']}–{p['b']} | {_f(p['exact'])} | {_f(p['within_one'])} | {_f(p['kappa_quadratic'])} |")
    sp = ag["span"]
    lines += ["", f"Unanimous {sp['0']:,}, span 1 {sp['1']:,}, span ≥ 2 {sp['>=2']:,}; Krippendorff's α (ordinal) "
              f"{_f(ag['krippendorff_alpha_ordinal']['all'])}.", ""]
    loso = doc["leave_one_server_out"]
    lines += ["Leave one MCP server out (23 servers, 1,298 tools; hints applied as served):", "",
              "| levels | weighted κ | exact | within one | L1–L2 asked | L4–L5 unasked |", "|---|---|---|---|---|---|"]
    for name, r in loso["pooled"].items():
        lines.append(f"| {name} | {_f(r['kappa_quadratic'])} | {_f(r['exact'])} | {_f(r['within_one'])} | "
                     f"{_pct(r['low_asked'])} | {_pct(r['high_unasked'])} |")
    if doc.get("trust_annotations"):
        r = doc["trust_annotations"]
        lines.append(f"| served level with `--trust-annotations` (an uncontradicted `readOnlyHint` caps at L2) | "
                     f"{_f(r['kappa_quadratic'])} | {_f(r['exact'])} | {_f(r['within_one'])} | {_pct(r['low_asked'])} | "
                     f"{_pct(r['high_unasked'])} |")
    if doc.get("read_split"):
        for name in ("read", "never read"):
            r = doc["read_split"][name]
            lines.append(f"| served level, the {r['n']} tools of the servers {name} while the patterns were written | "
                         f"{_f(r['kappa_quadratic'])} | {_f(r['exact'])} | {_f(r['within_one'])} | {_pct(r['low_asked'])} | "
                         f"{_pct(r['high_unasked'])} |")
    lines += ["", "Per held-out server (served level; before in brackets):", "",
              "| server | tools | annotators' κ (mean) | weighted κ | within one | L1–L2 asked | L4–L5 unasked |",
              "|---|---|---|---|---|---|---|"]
    for srv, v in loso["per_unit"].items():
        a, b = v["served level"], v.get("before", {})
        ann = doc["annotators"]["mcp_per_server"][srv]["kappa"]
        ak = np.nanmean([x for x in ann.values() if x is not None]) if ann else float("nan")
        lines.append(f"| {srv} | {a['n']} | {_f(float(ak))} | {_f(a['kappa_quadratic'])} ({_f(b.get('kappa_quadratic'))}) | "
                     f"{_f(a['within_one'])} | {_pct(a['low_asked'])} ({_pct(b.get('low_asked'))}) | "
                     f"{_pct(a['high_unasked'])} ({_pct(b.get('high_unasked'))}) |")
    other = doc["leave_one_set_out"]
    lines += ["", "Each corpus of the rated sample, and the attack set, held out in turn:", "",
              "| held out | tools | weighted κ | exact | within one | L1–L2 asked | L4–L5 unasked |", "|---|---|---|---|---|---|---|"]
    for unit, v in other["per_unit"].items():
        r = v["served level"]
        lines.append(f"| {unit} | {r['n']} | {_f(r['kappa_quadratic'])} | {_f(r['exact'])} | {_f(r['within_one'])} | "
                     f"{_pct(r['low_asked'])} | {_pct(r['high_unasked'])} |")
    un = doc.get("attack_unread_half")
    if un:
        r, b = un["served level"], un.get("before", {})
        lines += ["", f"The half of the attack set never read while the capability patterns were written ({r['n']} tools, "
                  f"{r['n_high']} rated L4–L5, {r['n_low']} rated L1–L2), the whole set held out: weighted κ {_f(r['kappa_quadratic'])} "
                  f"(before {_f(b.get('kappa_quadratic'))}), L4–L5 run without a question {_pct(r['high_unasked'])} (before "
                  f"{_pct(b.get('high_unasked'))}), L1–L2 asked {_pct(r['low_asked'])} (before {_pct(b.get('low_asked'))})."]
    lines += ["", "The paper's labels of a benchmark the model never saw:", "",
              "| held out | tools | weighted κ | exact | within one |", "|---|---|---|---|---|"]
    for name, r in doc["paper_labels"].items():
        lines.append(f"| {name} | {r['n']:,} | {_f(r['kappa_quadratic'])} | {_f(r['exact'])} | {_f(r['within_one'])} |")
    if doc.get("frontier"):
        lines += ["", "The same held-out probabilities read at other L2/L3 thresholds (τ₂; the shipped one was chosen by the "
                  "inner split, the other choices kept):", "", "| τ₂ | weighted κ | L1–L2 asked | L4–L5 unasked |", "|---|---|---|---|"]
        lines += [f"| {r['tau_2']:.1f} | {_f(r['kappa_quadratic'])} | {_pct(r['low_asked'])} | {_pct(r['high_unasked'])} |"
                  for r in doc["frontier"]]
    if doc.get("frontier_boundaries"):
        fb = doc["frontier_boundaries"]
        t3s = sorted({r["tau_3"] for r in fb})
        lines += ["", "The same, the L2/L3 and L3/L4 thresholds read together (τ₂ down, τ₃ across; the outer two as each fold "
                  "chose them): weighted κ, L1–L2 asked, L4–L5 unasked:", "",
                  "| τ₂ | " + " | ".join(f"τ₃ {t:.1f}" for t in t3s) + " |", "|---|" + "---|" * len(t3s)]
        for t2 in sorted({r["tau_2"] for r in fb}):
            cells = {r["tau_3"]: r for r in fb if r["tau_2"] == t2}
            lines.append(f"| {t2:.1f} | " + " | ".join(
                f"{_f(cells[t]['kappa_quadratic'])}, {_pct(cells[t]['low_asked'])}, {_pct(cells[t]['high_unasked'])}" for t in t3s) + " |")
    lines += ["", "What the default policy (confirmation from L3) does, by the annotators' level (leave one server out):", "",
              "| rubric level | tools | asked (before) | run without a question (before) |", "|---|---|---|---|"]
    pt, pb = doc["policy"]["served level"], doc["policy"].get("before", {})
    for lv in map(str, range(1, 6)):
        lines.append(f"| L{lv} | {pt[lv]['n']} | {pt[lv]['asked']} ({pb.get(lv, {}).get('asked', '–')}) | "
                     f"{pt[lv]['unasked']} ({pb.get(lv, {}).get('unasked', '–')}) |")
    cb = doc.get("confusion_before_after") or {}
    for name in ("before", "after"):
        m = cb.get(name)
        if m:
            what = "the previous release as served" if name == "before" else "leave one server out"
            lines += ["", f"Confusion, {name} (rows: the annotators' level; columns: the served level; {what}):", "",
                      "| | L1 | L2 | L3 | L4 | L5 |", "|---|---|---|---|---|---|"]
            lines += [f"| L{i + 1} | " + " | ".join(str(v) for v in row) + " |" for i, row in enumerate(m)]
    return "\n".join(lines) + "\n"


def load_level_data(enc: Encoder, data_dir: str | None = None) -> tuple[list, list, LevelData]:
    """The rated sets, the parts :func:`build_data` reads (the MCP tools first) and the data: the
    MCP tools, the corpora sample and the attack set under the anchors, and the benchmarks' paper
    labels less the tools also rated under the anchors."""
    sets = load_rubric_sets(data_dir)
    by = {s.name: s for s in sets}
    parts = [("mcp", enc.encode([t.text() for t in by["mcp"].tools]), by["mcp"].tools, by["mcp"].levels, by["mcp"].groups, by["mcp"].hints)]
    for name in ("corpora", "attack"):
        s = by[name]
        parts.append(("rubric", enc.encode([t.text() for t in s.tools]), s.tools, s.levels, s.groups, s.hints))
    rated = {(t.name, t.description) for t in by["corpora"].tools}
    for name in ("ultratool", "sealtools"):
        reg = load_benchmark(name, data_dir).registry
        lv = np.asarray([0 if (t.name, t.description) in rated else (t.risk_level or 0) for t in reg])
        parts.append(("paper", enc.encode(reg.texts()), list(reg), lv, [name] * len(reg), [{} for _ in reg]))
    return sets, parts, build_data(parts)


def _meta(enc: Encoder) -> dict:
    """What the shipped model's sidecar says it was built from."""
    return {"encoder": enc.identity, "trained_on": ["mcp-annotated (rubric)", "corpora sample (rubric)", "attack set (rubric)",
                                                    "ultratool (paper)", "sealtools (paper)"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--save", default=None, help="fit on everything and write the level model here")
    ap.add_argument("--data", default=None)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--shrinks", default=None,
                    help="the partial form's shrinks the inner split may choose, comma-separated ('' : the one-score form only) "
                         "[default: the training code's PARTIAL_SHRINKS]")
    ap.add_argument("--neighbours", default=None,
                    help="the neighbour columns' weights the inner split may choose beside none, comma-separated "
                         "[default: the training code's NEIGHBOUR_SCALES]")
    ap.add_argument("--fit-from", default=None,
                    help="an artefact of this script: fit on everything with its recorded choice and --save, no held-out runs")
    ap.add_argument("--workers", type=int, default=1, help="processes for the held-out units (the same figures as one)")
    ap.add_argument("--tau-low", type=float, default=None,
                    help="a lower threshold the inner split may also choose for the L2/L3 and L3/L4 boundaries "
                         "(riskrank.training.levels.TAU_LOW; off by default)")
    ap.add_argument("--frontier-of", default=None,
                    help="an artefact of this script: add its two-threshold re-read (frontier_boundaries) to it, no fits")
    a = ap.parse_args()
    if a.fit_from and not a.save:
        ap.error("--fit-from writes a model: name its folder with --save")
    fit_choice = None
    if a.fit_from:  # read before the data: a wrong file is named at once
        try:
            fit_choice = Choice.from_dict(json.loads(Path(a.fit_from).read_text(encoding="utf-8"))["choice"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"risk_levels: --fit-from {a.fit_from}: not an artefact of this script with a 'choice' "
                             f"({type(exc).__name__}: {exc})") from None
    if a.tau_low is not None:
        if not 0 < a.tau_low < 1:
            ap.error(f"--tau-low: a probability between 0 and 1, got {a.tau_low}")
        import riskrank.training.levels as training_levels

        training_levels.TAU_LOW = a.tau_low  # read by every choice, in this process and the forked workers
    shrinks = PARTIAL_SHRINKS if a.shrinks is None else tuple(float(v) for v in a.shrinks.split(",") if v.strip())
    near = NEIGHBOUR_SCALES if a.neighbours is None else tuple(float(v) for v in a.neighbours.split(",") if v.strip())
    t0 = time.time()
    enc = Encoder(progress=False)
    sets, parts, data = load_level_data(enc, a.data)
    by = {s.name: s for s in sets}
    if a.frontier_of:
        from riskrank.fileio import atomic_write_text

        art = json.loads(Path(a.frontier_of).read_text(encoding="utf-8"))
        art["frontier_boundaries"] = frontier_boundaries(art, data)
        atomic_write_text(a.frontier_of, json.dumps(art, indent=1) + "\n")
        print(f"wrote frontier_boundaries into {a.frontier_of}")
        return
    if fit_choice is not None:
        fit_level_model(data, fit_choice, meta=_meta(enc)).save(a.save)
        print(f"saved the level model to {a.save} (choice of {a.fit_from}: {fit_choice.to_dict()})")
        return
    bench_masks = [(name, (data.source == "paper") & (data.server == name)) for name in ("ultratool", "sealtools")]
    doc: dict = {"seed": a.seed, "encoder": enc.identity, "targets": TARGETS, "form": {"form": "the inner split's choice", "shrinks": list(shrinks),
                                                                                    **({"neighbours": list(near)} if near else {}),
                                                                                    **({"tau_low": a.tau_low} if a.tau_low is not None else {})},
                 "n_tools": {s: int((data.source == s).sum()) for s in ("mcp", "rubric", "paper")}}
    doc["annotators"] = annotator_agreement(sets)
    doc["sets"] = {s.name: {"n": len(s), "levels": {str(lv): int((s.levels == lv).sum()) for lv in range(1, 6)},
                            "span": {k: int(v) for k, v in zip(("0", "1", ">=2"), np.bincount(np.minimum(s.votes.max(1) - s.votes.min(1), 2),
                                                                                            minlength=3), strict=True)}}
                   for s in sets}
    paper = np.asarray([lv or 0 for lv in by["corpora"].extra["paper_level"]])
    both = paper > 0
    doc["paper_vs_anchors"] = {**agreement_row(paper[both], by["corpora"].levels[both]),
                               "anchors_higher": int((by["corpora"].levels[both] > paper[both]).sum()),
                               "anchors_lower": int((by["corpora"].levels[both] < paper[both]).sum())}
    print(f"annotators (mcp): kappa {[round(p['kappa_quadratic'], 3) for p in doc['annotators']['mcp']['pairs']]}", flush=True)

    # before: the previous release's served levels of the same tools
    before = json.loads(BEFORE.read_text()) if BEFORE.is_file() else None
    mcp_rows = np.flatnonzero(data.source == "mcp")
    baselines = {}
    if before is not None:
        ids = by["mcp"].extra["id"]
        baselines["before"] = np.asarray([before["levels"][f"mcp:{i}"] for i in ids])
    servers = sorted(set(by["mcp"].groups))
    loso = leave_groups_out(data, {s: [s] for s in servers}, seed=a.seed, progress=True, baselines=baselines, shrinks=shrinks, neighbours=near,
                            workers=a.workers)
    doc["leave_one_server_out"] = loso
    gold = data.y[mcp_rows]
    served = np.asarray(loso["predictions"]["served"])
    doc["policy"] = {k: policy_table(gold, v) for k, v in [("served level", served), *baselines.items()]}
    hints = [data.hints[i] for i in mcp_rows]
    doc["hint_aucs"] = {k: hint_aucs(np.asarray(v, dtype=float), hints) for k, v in [("served level", served), *baselines.items()]}
    cum = np.asarray(loso["predictions"]["cumulative"])
    doc["calibration_ece"] = calibration(cum, gold)
    for k, v in loso["pooled"].items():
        print(f"{k:14s} kappa {_f(v['kappa_quadratic'])} exact {_f(v['exact'])} within-one {_f(v['within_one'])} "
              f"L1-2 asked {_pct(v['low_asked'])} L4-5 unasked {_pct(v['high_unasked'])}", flush=True)

    units = {"apibank": ["apibank"], "toolalpaca": ["toolalpaca"], "bfcl": ["bfcl"], "ultratool (rated sample)": ["ultratool"],
             "sealtools (rated sample)": ["sealtools"], "attack set": ["attack", "lookalike"]}
    # rubric rows of the sample share group names with the paper rows: hold out only the rubric ones
    rub = data.source == "rubric"
    data_units = LevelData(data.x, data.y, data.source, np.where(rub | (data.source == "mcp"), data.server, "paper:" + data.server),
                           data.cautious, data.floors, data.hints, data.names, data.texts)
    doc["leave_one_set_out"] = leave_groups_out(data_units, units, seed=a.seed, progress=True, shrinks=shrinks, neighbours=near, workers=a.workers)
    att = np.flatnonzero((data.source == "rubric") & np.isin(data.server, ["attack", "lookalike"]))
    read = set(np.random.default_rng(ATTACK_READ_SEED).permutation(len(att))[:ATTACK_READ_N].tolist())
    unread = np.asarray([k not in read for k in range(len(att))])
    rows = doc["leave_one_set_out"]["predictions"]["rows"]
    pos = {r: k for k, r in enumerate(rows)}
    held_pred = np.asarray([doc["leave_one_set_out"]["predictions"]["served"][pos[int(r)]] for r in att])
    doc["attack_unread_half"] = {"served level": agreement_row(data.y[att][unread], held_pred[unread]),
                                 "read": sorted(read)}
    if before is not None:
        b = np.asarray([before["levels"][f"attack:{k}"] for k in range(len(att))])
        doc["attack_before"] = agreement_row(data.y[att], b)
        doc["attack_unread_half"]["before"] = agreement_row(data.y[att][unread], b[unread])
    doc["paper_labels"] = paper_agreement(data, bench_masks, seed=a.seed, shrinks=shrinks, neighbours=near, workers=a.workers)

    # the cost of reading a registry's levels, per tool (capabilities, text facts, the model)
    choice = choose(data, seed=a.seed, shrinks=shrinks, neighbours=near)
    model = fit_level_model(data, choice, meta=_meta(enc))
    tools, emb = by["mcp"].tools, parts[0][1]
    t1 = time.perf_counter()
    for _ in range(3):
        model.predict(emb, tools, ToolEvidence.of(tools))
    doc["ms_per_tool"] = round((time.perf_counter() - t1) / 3 / len(tools) * 1000, 4)
    doc["choice"] = choice.to_dict()
    print(f"cost: {doc['ms_per_tool']} ms per tool; choice {choice.to_dict()}", flush=True)
    doc["confusion_before_after"] = {"before": confusion(gold, baselines["before"]) if baselines else None,
                                     "after": confusion(gold, served)}
    if a.save:
        model.save(a.save)
        doc["saved"] = {"folder": a.save, "choice": choice.to_dict()}
        print(f"saved the level model to {a.save}")
    doc["frontier"] = frontier(doc, data)
    doc["frontier_boundaries"] = frontier_boundaries(doc, data)
    doc["read_split"] = read_split(doc, data)
    doc["trust_annotations"] = trusting(doc, data, by["mcp"].tools)
    doc["seconds"] = round(time.time() - t0, 1)
    if a.json:
        from riskrank.fileio import atomic_write_text

        atomic_write_text(a.json, json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
