"""The learned poisoning detector judged as it will be judged: on families, servers and corpora it never saw.

    python benchmarks/poison_detector.py [--data DIR] [--json benchmarks/results/poison_detector.json]
                                         [--ship src/riskrank/base/poison] [--cost-only]

Every figure comes from the full scan (``riskrank.scan.scan_tool``: the rules and the
detector), as the gateway and ``riskrank scan`` run it; a poisoned definition counts as caught
when its verdict is ``poisoned`` (withheld by the default policy), and a real one as a false
positive when its verdict is ``poisoned`` (``suspicious``, which asks for confirmation, is
counted beside it). Each fit sets its own thresholds on its own validation tools (a fifth of
each benign group it trains on; ``riskrank.training.poison.fit_detector``), never on what it is
judged on.

- **Leave one family out**: for each training family (BIPIA's 15 text and 10 code families
  of its train split, and the 12 hand-written ones), a detector fitted without it; recall on
  its texts planted into real MCP tools (each text at each of six positions, two hosts each).
  Training plants each text into six real definitions, corpus tools and MCP tools alike; a fit
  that holds a server or a corpus out drops the plantings it hosted.
- **Leave one server out** (the 23 servers of mcp-annotated): the first 23 of those fits also
  leave one server out each (fit k: family k and server k), and count their false positives
  on it. **Leave one corpus out** (BFCL, APIBench, API-Bank, ToolAlpaca, UltraTool,
  Seal-Tools): a fit without that corpus's tools; its false positives on them.
- **The shipped detector** (fitted on every training family and every real tool; ``--ship``
  writes it): BIPIA's test split (15 + 10 families no fit saw) and the hand-written held-out
  set (63 texts, 12 families, 4 of them new), planted the same way; the 44 hand-written hard
  benign descriptions; the three npm reference servers' 36 tools (started and listed, as
  ``tools/list``, with ``--npm-bin``).
- **Cost**: the full scan of the 1,302 MCP tools per 100 tools, with a fresh detector (a cold
  connect: no word or text seen yet) and warm (the same list again: each text's spans are
  remembered), against the rules alone; the cross-server check at 1,000 to 10,000 tools.
  ``--cost-only --json FILE`` measures it again into an existing results file.
- **Twelve npm servers nobody read** (``--unseen-servers-only --json FILE``, into an existing
  results file): the 156 tools of ``corpora/rubric-levels/npm-servers.jsonl``, scanned as a
  gateway over all twelve scans them, by the rules alone and with the shipped detector.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.fileio import write_json
from riskrank.poison import DETECTOR_DIR, load_detector
from riskrank.scan import cross_server_findings, scan_catalogue, scan_definitions
from riskrank.tables import text_table
from riskrank.training import poison as tp

HERE = Path(__file__).resolve().parent
#: Plantings per attack text when judging: each of the six positions, in this many hosts.
HOSTS_PER_POSITION = 2
#: Plantings per attack text in training (positions in turn, any real definition as host).
TRAIN_PLANTINGS = 6
SEED = 42


def verdicts(tools: list[dict], det: Any) -> list[Any]:
    return scan_definitions(tools, det)


def judge_plantings(texts: list[str], hosts: list[dict], seed: int) -> list[tuple[int, dict, str]]:
    """(text index, poisoned definition, position): every text at every position, in
    :data:`HOSTS_PER_POSITION` hosts each."""
    import random

    rng = random.Random(seed)
    out = []
    for i, text in enumerate(texts):
        for position in tp.POSITIONS:
            for _ in range(HOSTS_PER_POSITION):
                t, _, _ = tp.plant(rng.choice(hosts), text, position, rng)
                out.append((i, t, position))
    return out


def best_score(sc: Any) -> float:
    return max((f.score for f in sc.findings if f.score is not None), default=0.0)


def recall_of(family: tp.Family, hosts: list[dict], det: Any, seed: int) -> dict[str, Any]:
    planted = judge_plantings(list(family.texts), hosts, seed)
    scans = verdicts([t for _, t, _ in planted], det)
    caught = [s.verdict == "poisoned" for s in scans]
    flagged = [s.verdict != "clean" for s in scans]
    by_pos: dict[str, list[bool]] = defaultdict(list)
    for (_, _, pos), c in zip(planted, caught, strict=True):
        by_pos[pos].append(c)
    misses = [{"text": family.texts[i], "position": pos, "verdict": s.verdict, "score": round(best_score(s), 4)}
              for (i, _, pos), s in zip(planted, scans, strict=True) if s.verdict != "poisoned"]
    return {"source": family.source, "n": len(planted), "poisoned": int(sum(caught)), "recall": float(np.mean(caught)),
            "flagged": float(np.mean(flagged)),
            "by_position": {p: float(np.mean(v)) for p, v in by_pos.items()},
            "rules_alone": float(np.mean([s.verdict == "poisoned" for s in verdicts([t for _, t, _ in planted], None)])),
            "misses": sorted(misses, key=lambda m: m["score"])}


def fpr_of(tools: list[dict], det: Any) -> dict[str, Any]:
    scans = verdicts(tools, det)
    poisoned = [s for s in scans if s.verdict == "poisoned"]
    suspicious = [s for s in scans if s.verdict == "suspicious"]
    flagged = sorted(poisoned + suspicious, key=best_score, reverse=True)
    return {"n": len(tools), "poisoned": len(poisoned), "suspicious": len(suspicious),
            "fpr": len(poisoned) / max(1, len(tools)), "flag_rate": (len(poisoned) + len(suspicious)) / max(1, len(tools)),
            "flagged": [{"name": s.name, "verdict": s.verdict, "score": round(best_score(s), 4),
                         "findings": [f.to_dict() for f in s.findings][:3]} for s in flagged]}


class Data:
    """Everything the fits share: the static table, the featuriser, the real tools and their
    span rows, each training family's planted span rows, and the judging hosts."""

    def __init__(self, data_dir: str, npm_bin: str | None) -> None:
        t0 = time.perf_counter()
        self.t = tp.tables()
        self.benign = tp.benign_tools(data_dir)
        self.families = tp.attack_families(data_dir)
        self.tools = [b.tool for b in self.benign]
        self.groups = np.asarray([b.group for b in self.benign])
        self.corpus = np.asarray([b.corpus for b in self.benign])
        self.neg = tp.definition_rows(self.t, self.tools)
        # Training hosts: every real definition (corpora and MCP servers); a planted definition
        # remembers its host's group, so a fit that holds a server out drops those hosted there.
        host_groups = np.asarray([b.group for b in self.benign])
        self.npm = npm_tools(npm_bin) if npm_bin else []
        self.judge_hosts = [b.tool for b in self.benign if b.corpus == "mcp"] + [
            {**t, "name": t["name"].split("/", 1)[-1]} for t in self.npm]
        self.pos: dict[str, tp.SpanRows] = {}
        self.pos_group: dict[str, np.ndarray] = {}  # per span row: its host's group
        for k, fam in enumerate(f for f in self.families if f.split == "train"):
            planted = tp.plantings(list(fam.texts), self.tools, TRAIN_PLANTINGS, SEED + k)
            ats = [(f, off, off + len(fam.texts[i])) for i, _, _, f, off, _ in planted]
            rows = tp.definition_rows(self.t, [p[1] for p in planted], ats)
            self.pos[fam.name] = rows
            self.pos_group[fam.name] = host_groups[np.asarray([p[5] for p in planted])][rows.tool]
        self.seconds = time.perf_counter() - t0

    def positives(self, without: str | None = None, held: set[str] = frozenset()) -> tp.SpanRows:
        """Every training family's planted rows but ``without``'s, and none hosted by a ``held`` group."""
        parts = [(r, self.pos_group[name]) for name, r in self.pos.items() if name != without]
        keep = [~np.isin(g, list(held)) for _, g in parts]
        return tp.SpanRows(np.vstack([r.X[k] for (r, _), k in zip(parts, keep, strict=True)]),
                           np.concatenate([r.tool[k] for (r, _), k in zip(parts, keep, strict=True)]),
                           np.concatenate([r.attack[k] for (r, _), k in zip(parts, keep, strict=True)]), 0)

    def negatives(self, keep: np.ndarray) -> tuple[tp.SpanRows, np.ndarray, np.ndarray]:
        """The rows of the kept definitions, renumbered, their groups and corpora."""
        idx = np.flatnonzero(keep)
        remap = -np.ones(len(keep), np.int64)
        remap[idx] = np.arange(len(idx))
        rows = keep[self.neg.tool]
        sub = tp.SpanRows(self.neg.X[rows], remap[self.neg.tool[rows]], self.neg.attack[rows], len(idx))
        return sub, self.groups[idx], self.corpus[idx]

    def fit(self, keep: np.ndarray, without_family: str | None = None, meta: dict | None = None) -> tp.Fit:
        neg, groups, corpus = self.negatives(keep)
        pos = self.positives(without_family, set(self.groups[~keep]))
        return tp.fit_detector(self.t, neg, groups, corpus, pos, tp.MlpConfig(), meta=meta)


def npm_tools(bin_dir: str) -> list[dict]:
    """The three npm reference servers' tools (filesystem, memory, everything), listed as
    ``riskrank scan`` lists them (each named ``server/tool``)."""
    import tempfile

    from riskrank.cli.trust import _list_server
    from riskrank.serving.gateway.config import load_servers

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "files").mkdir()
        servers = {"mcpServers": {
            "filesystem": {"command": f"{bin_dir}/mcp-server-filesystem", "args": [f"{tmp}/files"]},
            "memory": {"command": f"{bin_dir}/mcp-server-memory", "env": {"MEMORY_FILE_PATH": f"{tmp}/m.jsonl"}},
            "everything": {"command": f"{bin_dir}/mcp-server-everything"}}}
        (Path(tmp) / "servers.json").write_text(json.dumps(servers))
        return [t for up in load_servers(f"{tmp}/servers.json") for t in _list_server(up, 60.0)]


def cost(tools: list[dict], ship_dir: Path, repeats: int) -> dict[str, Any]:
    """ms per 100 tools of the full scan (one batch, as the gateway scans a list it has not seen):
    a freshly loaded detector (cold: no word seen yet), then warm passes; the rules alone."""
    out: dict[str, Any] = {"n_tools": len(tools)}
    cold = []
    for _ in range(3):
        det = load_detector(ship_dir)
        t0 = time.perf_counter()
        scan_definitions(tools, det)
        cold.append((time.perf_counter() - t0) * 1000 / len(tools) * 100)
    warm, rules = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        scan_definitions(tools, det)
        warm.append((time.perf_counter() - t0) * 1000 / len(tools) * 100)
        t0 = time.perf_counter()
        scan_definitions(tools, None)
        rules.append((time.perf_counter() - t0) * 1000 / len(tools) * 100)
    out.update({"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "cold_ms_per_100": round(statistics.median(cold), 2), "warm_ms_per_100": round(statistics.median(warm), 2),
                "warm_best_ms_per_100": round(min(warm), 2), "rules_ms_per_100": round(statistics.median(rules), 2),
                "rules_best_ms_per_100": round(min(rules), 2), "repeats": repeats,
                "load_1min": round(os.getloadavg()[0], 2)})
    # the cross-server check (names and references) at growing catalogue sizes: linear or near it
    scale = []
    for n in (1000, 2000, 5000, 10000):
        cat: dict[str, list[dict]] = defaultdict(list)
        for i in range(n):
            t = tools[i % len(tools)]
            cat[f"server{i % 50}"].append({**t, "name": f"{t['name']}_{i // len(tools)}"})
        t0 = time.perf_counter()
        cross_server_findings(cat)
        scale.append({"tools": n, "ms": round((time.perf_counter() - t0) * 1000, 1)})
    out["cross_server"] = scale
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.environ.get("RISKRANK_DATA"))
    ap.add_argument("--npm-bin", default=None, help="The npm reference servers' bin directory (.ci/npm/install.sh prints it).")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--ship", default=None, help="Write the shipped detector here.")
    ap.add_argument("--cost-only", action="store_true",
                    help="Only the cost, of the detector in --ship (with --json: written into that results file).")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--unseen-servers-only", action="store_true",
                    help="Only the scan of the twelve npm servers nobody read (corpora/rubric-levels/npm-servers.jsonl), "
                         "rules alone and with the detector in --ship (with --json: written into that results file).")
    ap.add_argument("--earlier-because", default=None,
                    help="With --unseen-servers-only: keep the previous scan in npm_servers_earlier, with this reason.")
    args = ap.parse_args()
    if args.unseen_servers_only:
        measured = unseen_servers(Path(args.ship or DETECTOR_DIR))
        print(json.dumps({k: v for k, v in measured.items() if k != "flagged"}))
        if args.json_out:
            result = json.loads(Path(args.json_out).read_text(encoding="utf-8"))
            if "npm_servers" in result and args.earlier_because:  # a run before a change: kept, with why it changed
                result["npm_servers_earlier"] = [{**result["npm_servers"], "changed_after": args.earlier_because},
                                                 *result.get("npm_servers_earlier", [])]
            result["npm_servers"] = measured
            write_json(args.json_out, result)
            print(f"wrote npm_servers into {args.json_out}")
        return
    mcp = json.loads(tp.MCP_PATH.read_text(encoding="utf-8"))["tools"]
    mcp_tools = [{k: v for k, v in r.items() if k in ("name", "description", "inputSchema")} for r in mcp]
    if args.cost_only:
        measured = cost(mcp_tools, Path(args.ship or DETECTOR_DIR), args.repeats)
        print(json.dumps(measured, indent=1))
        if args.json_out:  # the cost measured again (a quieter machine), into an existing results file
            result = json.loads(Path(args.json_out).read_text(encoding="utf-8"))
            if "cost" in result:  # the earlier measurements are kept: the cost moves with the machine's load
                result["cost_earlier"] = [result["cost"], *result.get("cost_earlier", [])]
            result["cost"] = measured
            write_json(args.json_out, result)
            print(f"wrote the cost into {args.json_out}")
        return
    d = Data(args.data, args.npm_bin)
    print(f"data: {len(d.benign):,} real tools, {len(d.neg.X):,} spans; {sum(len(r.X) for r in d.pos.values()):,} planted "
          f"training spans ({sum(int(r.attack.sum()) for r in d.pos.values()):,} attack spans); {d.seconds:.0f} s", flush=True)
    everything = np.ones(len(d.benign), bool)
    train_families = [f for f in d.families if f.split == "train"]
    servers = sorted(set(d.groups[d.corpus == "mcp"]))
    lofo: dict[str, Any] = {}
    loso: dict[str, Any] = {}
    # Fit k holds out training family k and, for the first 23, MCP server k too: recall on the
    # family and false positives on the server, each from a fit that never saw it.
    for k, fam in enumerate(train_families):
        server = servers[k] if k < len(servers) else None
        held = d.groups == server
        fit = d.fit(~held, without_family=fam.name)
        lofo[fam.name] = {**recall_of(fam, d.judge_hosts, fit.detector, 1000 + k), "thresholds": fit.thresholds}
        line = f"fit {k}: {fam.name} recall {lofo[fam.name]['recall']:.3f} (rules alone {lofo[fam.name]['rules_alone']:.3f})"
        if server is not None:
            loso[server] = {**fpr_of([d.tools[i] for i in np.flatnonzero(held)], fit.detector), "thresholds": fit.thresholds,
                            "fit": k}
            line += f"; {server}: {loso[server]['poisoned']}/{loso[server]['n']} poisoned, {loso[server]['suspicious']} suspicious"
        print(line, flush=True)
    loso = dict(sorted(loso.items()))
    loco: dict[str, Any] = {}
    for corpus in tp.CORPUS_NAMES:
        held = d.corpus == corpus
        fit = d.fit(~held)
        loco[corpus] = {**fpr_of([d.tools[i] for i in np.flatnonzero(held)], fit.detector), "thresholds": fit.thresholds}
        print(f"LOCO {corpus}: {loco[corpus]['poisoned']}/{loco[corpus]['n']} poisoned, {loco[corpus]['suspicious']} suspicious",
              flush=True)
    meta = {"encoder": "sentence-transformers/all-MiniLM-L6-v2 (bundled): static piece embeddings",
            "trained_on": {"positives": {f.name: len(f.texts) for f in train_families},
                           "plantings_per_text": TRAIN_PLANTINGS,
                           "negatives": {c: int((d.corpus == c).sum()) for c in ("mcp", *tp.CORPUS_NAMES)}},
            "seed": SEED, "built": str(date.today())}
    if args.json_out:  # the fits are the long part: keep them even if what follows fails
        write_json(args.json_out + ".partial", {"lofo": lofo, "loso": loso, "loco": loco})
    final = d.fit(everything, meta=meta)
    if args.ship:
        final.detector.save(args.ship)
        print(f"wrote {args.ship}")
    det = load_detector(args.ship) if args.ship else final.detector  # judge what ships, as it loads
    test = {f.name: recall_of(f, d.judge_hosts, det, 5000 + k) for k, f in enumerate(d.families) if f.split == "test"}
    heldout = {f.name: recall_of(f, d.judge_hosts, det, 7000 + k) for k, f in enumerate(d.families) if f.split == "heldout"}
    benign_hard = fpr_of([{"name": f"benign_{i}", "description": t} for i, t in enumerate(tp.benign_heldout())], det)
    scans = [sc for found in scan_catalogue(_by_server(d.npm), det).values() for sc in found]
    npm = {"n": len(scans), **{v: sum(s.verdict == v for s in scans) for v in ("clean", "suspicious", "poisoned")},
           "flagged": [s.to_dict() for s in scans if s.verdict != "clean"]}
    result = {
        "date": str(date.today()), "machine": f"{platform.node()} ({os.cpu_count()} cores)", "thresholds": final.thresholds,
        "training": final.info, "lofo": lofo, "loso": loso, "loco": loco, "bipia_test": test, "own_heldout": heldout,
        "benign_heldout": benign_hard, "npm": npm,
        "seen_before_fixed": SEEN,
    }
    if args.ship:
        result["cost"] = cost(mcp_tools, Path(args.ship), args.repeats)
    summary(result)
    if args.json_out:
        write_json(args.json_out, result)
        print(f"wrote {args.json_out}")


NPM_SERVERS = Path(__file__).resolve().parents[1] / "corpora" / "rubric-levels" / "npm-servers.jsonl"


def unseen_servers(detector_dir: Path) -> dict[str, Any]:
    """The scan of the 156 tools of twelve npm MCP servers no rule or fit ever read (their
    definitions kept with their rubric labels), as a gateway over all twelve scans them: the
    rules alone, and with the detector."""
    catalogue: dict[str, list[dict]] = defaultdict(list)
    for line in NPM_SERVERS.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        catalogue[r["server"]].append({"name": r["name"], "description": r["description"], "inputSchema": r["inputSchema"]})
    out: dict[str, Any] = {"n": sum(len(v) for v in catalogue.values()), "servers": len(catalogue)}
    for key, det in (("rules", None), ("detector", load_detector(detector_dir))):
        scans = [(server, sc) for server, found in scan_catalogue(catalogue, det).items() for sc in found]
        out[key] = {v: sum(sc.verdict == v for _, sc in scans) for v in ("clean", "suspicious", "poisoned")}
        out.setdefault("flagged", {})[key] = [{"server": server, **sc.to_dict()} for server, sc in scans if sc.verdict != "clean"]
    return out


def _by_server(tools: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for t in tools:
        server, _, name = t["name"].partition("/")
        out[server].append({**t, "name": name})
    return out


#: What was seen before each figure's settings were fixed (docs/trust.md prints it).
SEEN = {
    "design": "Fixed before the first fit: the MLP's form, the cue words, the span features' first version and the "
              "validation false-positive rates of the thresholds (0.2 % poisoned, 1 % suspicious).",
    "first_run": "The first run (2026-12-06) scored everything below with the first design: leave-one-family-out "
                 "recall 0.00-1.00 (mean about 0.6), 2.85 % of held-out servers' tools poisoned, BIPIA's test split "
                 "0.727, the held-out set 0.339. Seen, then changed: the field kind dropped as an input (a title, "
                 "never seen in training, scored 0.997), the placement features added (a span against its tool's "
                 "name and its other spans), thresholds validated on whole held-out servers, 10 epochs of batches "
                 "of 1,024 at 3e-3. Chosen on the training families and the benign groups (leave-one-family-out "
                 "over 17 of them, 5 folds of servers, the corpora): the figures of those tables were seen while "
                 "choosing; BIPIA's test split and the held-out set were not used to choose anything.",
    "dev_tried": "Tried on the same development protocol and not kept: logistic regression instead of the MLP, the "
                 "full encoder's sentence embeddings instead of the static ones (no better held out: the "
                 "representation is not what limits it), the corpora's 7,888 user requests as more positives "
                 "(recall fell, BFCL's false positives rose to 13 %).",
    "second_pass": "A second pass (2026-12-06, 05:50-06:30 UTC) started from the first design's results (47 held-out "
                   "servers' tools poisoned: 15 of DesktopCommander's by one sentence cut at an ellipsis in quotes, "
                   "Stripe's lead-ins 'It takes the following arguments:', a '<hint>' tag counted as three words, "
                   "usage advice written to the model) and judged "
                   "every change on the leave-one-family-out, leave-one-server-out and leave-one-corpus-out tables "
                   "below (the same fits, seeds and splits), never on BIPIA's test split or the held-out set. Kept: "
                   "spans go on across a lowercase continuation (soft wrap, 'e.g.', an ellipsis in quotes); a span "
                   "needs three words besides punctuation; span features for what it names (this tool, one of its "
                   "own parameters, another identifier), a lead-in ending in ':', and how the tool's other spans talk "
                   "(the share addressing the model, giving orders); training plantings in MCP tools too (a fit drops "
                   "those its held-out server or corpus hosted); four hand-written families written and committed "
                   "before any fit read them. Seen with those and the first threshold rule (0.2 % of the pooled "
                   "validation tools): 58.3 % of 3,036 planted definitions caught (61.9 % on the first 33 families, "
                   "against 46.4 % before), 1.77 % of held-out servers' tools poisoned, 0.93 % of held-out corpora's. "
                   "Tried and not kept: the static table cut to 64 or 16 principal components, dropout 0.3 on the "
                   "inputs, weight decay 1e-2 with 20 epochs, the MCP tools given 30 % of the negatives' weight, four "
                   "MLPs averaged (none lowered the servers' rate).",
    "threshold_rule": "The threshold rule was then chosen among four, each run on those tables, by a rule written "
                      "down before the last two ran: the highest leave-one-family-out recall among rules meeting both "
                      "false-positive targets (servers <= 1 %, corpora <= 0.5 %). Seen: 0.2 % pooled: 58.3 % caught, "
                      "1.77 %, 0.93 % (misses both); 0.2 % pooled and 0.2 % within each validation group (the MCP "
                      "servers, each corpus): 34.7 %, 0.62 %, 0.40 %; 0.5 % within each group: 37.6 %, 0.62 %, "
                      "0.40 % (chosen); 1 % within each group: 53.5 %, 0.85 %, 0.57 % (misses the corpora's target). "
                      "Those development runs planted the judged texts into the MCP tools alone; the run below adds "
                      "the npm servers' tools as hosts, so its plantings, and its figures, differ a little.",
    "npm_title": "The first full run of this design (2026-12-06 06:26 UTC) scored the npm filesystem server's title "
                 "'Read Media File' at 1.00, poisoned. Seen, then changed before this run: a span whose words are all "
                 "its tool's name's (the name in words) only names the tool and is not scored. That run's other "
                 "figures were seen too: leave one family out 37.2 %, servers 0.62 %, corpora 0.40 %, BIPIA's test "
                 "split 40.9 %, the held-out set 14.4 %, hard benign 2 of 44; nothing else was changed after them.",
    "after_last_run": "Tried on the same development protocol after the shipped run (which read there 36.5 % caught, "
                      "0.77 %, 0.28 %) and not kept, by the same rule: a second fit weighing five times the 2 % of "
                      "negatives the first scored highest (33.4 %, 0.39 %, 0.34 %), hidden 64 with 15 epochs "
                      "(33.9 %, 0.62 %, 0.15 %), twelve plantings per text (39.3 %, 1.08 %, 0.19 %: servers above "
                      "1 %).",
}


def pooled(rows: dict[str, Any]) -> tuple[int, int, int]:
    return (sum(r["n"] for r in rows.values()), sum(r["poisoned"] for r in rows.values()),
            sum(r.get("suspicious", 0) for r in rows.values()))


def _short(text: str, n: int = 90) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def hardest(r: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The five held-out real tools the scan flagged with the highest detector scores (leave
    one server or corpus out), and the five held-out plantings it missed with the lowest
    (leave one family out)."""
    fps = [{"held_out": k, **f} for part in ("loso", "loco") for k, v in r[part].items() for f in v["flagged"]]
    fps.sort(key=lambda f: (f["verdict"] != "poisoned", -f["score"]))
    misses = [{"family": k, **m} for k, v in r["lofo"].items() for m in v["misses"]]
    misses.sort(key=lambda m: m["score"])
    return fps[:5], misses[:5]


def doc_tables(r: dict[str, Any]) -> str:
    """The Markdown docs/trust.md quotes, rendered from the artefact (a test compares them)."""
    lines = ["| held-out family (source) | poisoned definitions | caught | recall | flagged | rules alone |",
             "|---|---:|---:|---:|---:|---:|"]
    for k, v in r["lofo"].items():
        lines.append(f"| {k} | {v['n']} | {v['poisoned']} | {v['recall']:.3f} | {v['flagged']:.3f} | {v['rules_alone']:.3f} |")
    n, p, _ = pooled(r["lofo"])
    at = sum(v["recall"] >= 0.95 for v in r["lofo"].values())
    lines += [f"| **all {len(r['lofo'])} families** | {n:,} | {p:,} | {p / n:.3f} | "
              f"{sum(v['flagged'] * v['n'] for v in r['lofo'].values()) / n:.3f} | "
              f"{sum(v['rules_alone'] * v['n'] for v in r['lofo'].values()) / n:.3f} |", "",
              f"Families at or above 0.95 recall: {at} of {len(r['lofo'])}.", ""]
    lines += ["| held out (leave one server or corpus out) | real tools | poisoned | false-positive rate | suspicious |",
              "|---|---:|---:|---:|---:|"]
    for part in ("loso", "loco"):
        for k, v in r[part].items():
            lines.append(f"| {k} | {v['n']:,} | {v['poisoned']} | {v['fpr']:.2%} | {v['suspicious']} |")
        n, p, s = pooled(r[part])
        name = "the 23 MCP servers" if part == "loso" else "the six corpora"
        lines.append(f"| **{name}** | {n:,} | {p} | {p / n:.2%} | {s} |")
    lines += ["", "| never trained on (the shipped detector) | poisoned definitions | caught | recall |", "|---|---:|---:|---:|"]
    for part, label in (("bipia_test", "BIPIA test split"), ("own_heldout", "hand-written held-out set")):
        for k, v in r[part].items():
            lines.append(f"| {label}: {k.split('/', 1)[1]} | {v['n']} | {v['poisoned']} | {v['recall']:.3f} |")
        n, p, _ = pooled(r[part])
        lines.append(f"| **{label}** | {n:,} | {p:,} | {p / n:.3f} |")
    b, npm = r["benign_heldout"], r["npm"]
    lines += ["", f"Hand-written hard benign descriptions: {b['poisoned']} of {b['n']} poisoned, {b['suspicious']} suspicious. "
              f"The three npm reference servers: {npm['clean']} of {npm['n']} clean, {npm['suspicious']} suspicious, "
              f"{npm['poisoned']} poisoned."]
    if "npm_servers" in r:
        u = r["npm_servers"]
        lines[-1] += (f" Twelve npm servers nobody read ({u['n']} tools, `corpora/rubric-levels/npm-servers.jsonl`): the rules "
                      f"alone {u['rules']['suspicious']} suspicious, {u['rules']['poisoned']} poisoned; with the detector "
                      f"{u['detector']['suspicious']} suspicious, {u['detector']['poisoned']} poisoned.")
        for e in r.get("npm_servers_earlier", []):
            lines[-1] += (f" Before a change made after seeing it ({e['changed_after']}): the rules {e['rules']['suspicious']} "
                          f"suspicious, with the detector {e['detector']['suspicious']} suspicious, {e['detector']['poisoned']} poisoned.")
    lines.append("")
    fps, misses = hardest(r)
    lines += ["| hardest false positives (held out) | verdict | score | span |", "|---|---|---:|---|"]
    for f in fps:
        span = next((x["evidence"].split(" [reads as")[0] for x in f["findings"] if x.get("kind") == "directive"), "")
        lines.append(f"| {f['held_out']}: {f['name']} | {f['verdict']} | {f['score']:.3f} | {_short(span)} |")
    lines += ["", "| hardest misses (family held out) | position | verdict | score | text |", "|---|---|---|---:|---|"]
    for m in misses:
        lines.append(f"| {m['family']} | {m['position']} | {m['verdict']} | {m['score']:.3f} | {_short(m['text'])} |")
    if "cost" in r:
        c = r["cost"]
        scale = ", ".join(f"{x['tools']:,} tools {x['ms']:,.0f} ms" for x in c["cross_server"])
        lines += ["", f"Cost ({c.get('measured', r['date'])}, {r['machine']}, 1-minute load {c['load_1min']:.2f}): the full scan of the "
                  f"{c['n_tools']:,} MCP tools, {c['warm_ms_per_100']:.2f} ms per 100 tools (median of {c['repeats']} "
                  f"passes, best {c['warm_best_ms_per_100']:.2f}; a freshly loaded detector {c['cold_ms_per_100']:.2f}), "
                  f"the rules alone {c['rules_ms_per_100']:.2f} (best {c['rules_best_ms_per_100']:.2f}). "
                  f"Across servers: {scale}."]
        for e in r.get("cost_earlier", []):
            lines += ["", f"Measured before ({e['measured']}, 1-minute load {e['load_1min']:.2f}): the full scan "
                      f"{e['warm_ms_per_100']:.2f} ms per 100 tools (best {e['warm_best_ms_per_100']:.2f}; freshly loaded "
                      f"{e['cold_ms_per_100']:.2f}), the rules alone {e['rules_ms_per_100']:.2f} (best {e['rules_best_ms_per_100']:.2f})."]
    return "\n".join(lines)


def summary(r: dict[str, Any]) -> None:
    print(text_table(["family (held out)", "n", "caught", "recall", "flagged", "rules alone"],
                     [[k, v["n"], v["poisoned"], f"{v['recall']:.3f}", f"{v['flagged']:.3f}", f"{v['rules_alone']:.3f}"]
                      for k, v in r["lofo"].items()]))
    n, p, _ = pooled(r["lofo"])
    print(f"leave one family out, pooled: {p}/{n} = {p / n:.3f}; families at >= 0.95: "
          f"{sum(v['recall'] >= 0.95 for v in r['lofo'].values())}/{len(r['lofo'])}")
    for name in ("loso", "loco"):
        print(text_table(["held out", "tools", "poisoned", "FPR", "suspicious"],
                         [[k, v["n"], v["poisoned"], f"{v['fpr']:.2%}", v["suspicious"]] for k, v in r[name].items()]))
        n, p, s = pooled(r[name])
        print(f"{name} pooled: {p}/{n} poisoned = {p / n:.2%}; suspicious {s}")
    for name in ("bipia_test", "own_heldout"):
        n, p, _ = pooled(r[name])
        print(f"{name}: {p}/{n} = {p / n:.3f}; " + ", ".join(f"{k.split('/')[-1]} {v['recall']:.2f}" for k, v in r[name].items()))
    b = r["benign_heldout"]
    print(f"benign held-out: {b['poisoned']}/{b['n']} poisoned, {b['suspicious']} suspicious; npm: {r['npm']}")
    if "cost" in r:
        print(f"cost: {r['cost']}")


if __name__ == "__main__":
    sys.exit(main())
