"""kill -9 at every write point, then corrupt and tamper with every artefact, and record what
the next command does. Prints ``section | case | expected | observed | verdict``.

    python benchmarks/fault_injection.py [--sections train,sidecar,graph,heads,cache,audit] [--json out.json]

Everything runs through the installed ``riskrank`` console script: the writes under
``_kill_hook.py`` (which SIGKILLs the process at the N-th ``os.replace``, vote-log flush or
SQLite statement; a traced clean run enumerates the points first), the later loads through
the in-process runner of ``_cli_worker.py`` (one encoder load; the same entry point) or, for
the embedding cache, a fresh subprocess per case. Artefacts are tampered with by generic file
operations: JSON edits of ``checkpoint.json``, byte cuts and flips of ``graph.npz``, SQL on
the cache's tables, line edits of the vote log. The few facts about riskrank's file layout
this needs are the constants below.

Sections:

- ``train``: ``riskrank train --dataset demo`` killed before each of its atomic writes, into a
  fresh directory and over an existing checkpoint (``--force``); then ``retrieve
  --checkpoint`` (mode core+graph) compared with clean runs A (old) and B (new) on the 56 demo tasks.
- ``sidecar``: ``checkpoint.json`` values edited (lam -5/NaN/1e6/"abc"/"0.5"/true, alpha -1/2,
  a missing ``inference`` or ``training_data`` block, a list sidecar, ...).
- ``graph`` / ``heads``: ``graph.npz`` / ``heads.safetensors`` truncated, bit-flipped, emptied,
  replaced.
- ``cache``: ``retrieve`` killed mid-transaction of the embedding cache; the cache db replaced
  by garbage or truncated; cached vectors set to NaN, altered, or of the wrong dimension.
- ``audit``: ``riskrank audit`` (keyword + an OpenAI-compatible annotator served by a local
  fake) killed after each vote-log flush and before each label-file write, resumed and
  compared with an uninterrupted run; then the vote log edited by hand.

Verdicts: ``ok`` (what a hardened riskrank does), ``FAIL`` (the defect is present),
``info`` (recorded; no expectation).
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import math
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _cli_worker import CliWorker  # noqa: E402  (the in-process runner, next to this file)
from _verdicts import report  # noqa: E402

# -- what this script knows about riskrank's files (the only coupling to its internals) ---------
SIDECAR, HEADS, GRAPH = "checkpoint.json", "heads.safetensors", "graph.npz"
CACHE_DB = "embeddings.sqlite"  # under $RISKRANK_CACHE
CACHE_TABLE, CACHE_VEC, CACHE_DIM, CACHE_META = "vectors", "vec", "dim", "model_meta"  # "emb" before the per-row digest
VOTES_SUFFIX = ".votes.jsonl"

TASKS = [
    "delete the old log files", "list the files in my downloads folder", "send an email to my manager",
    "book a table for two tonight", "transfer 50 dollars to my landlord", "show my recent bank transactions",
    "drop the staging database", "read the contents of config.yaml", "restart the web server",
    "find flights from Paris to Rome", "change my account password", "back up my photos to the cloud",
]
LINE_CAP = 300


def demo_tasks() -> list[str]:
    """The bundled demo's 56 tasks (package data of riskrank.datasets.demo), else TASKS."""
    try:
        from importlib.resources import files

        return [t["task"] for t in json.loads((files("riskrank.datasets.demo") / "tasks.json").read_text(encoding="utf-8"))]
    except Exception:
        return TASKS


ALL_TASKS: list[str] = []


def demo_registry_records() -> list[dict]:
    """The bundled demo registry (package data of riskrank.datasets.demo)."""
    from importlib.resources import files

    return json.loads((files("riskrank.datasets.demo") / "registry.json").read_text(encoding="utf-8"))


def write_reordered_demo(tmp: Path) -> tuple[Path, Path]:
    """(registry, queries): the demo registry in reverse order (an edited registry: same
    tools, new positions) and the demo tasks as ``{"task", "gold"}`` JSONL for ``--queries``."""
    from importlib.resources import files

    reg, q = tmp / "demo_reordered.json", tmp / "demo_queries.jsonl"
    reg.write_text(json.dumps(demo_registry_records()[::-1], indent=1))
    tasks = json.loads((files("riskrank.datasets.demo") / "tasks.json").read_text(encoding="utf-8"))
    q.write_text("".join(json.dumps({"task": t["task"], "gold": t["gold"]}) + "\n" for t in tasks))
    return reg, q


@dataclass
class Row:
    section: str
    case: str
    expected: str
    observed: str
    verdict: str


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, section: str, case: str, expected: str, observed: str, ok: bool | None) -> None:
        v = "info" if ok is None else ("ok" if ok else "FAIL")
        self.rows.append(Row(section, case, expected, observed, v))
        print(f"  [{v:4s}] {section}: {case}: {observed}", flush=True)


def script() -> str:
    cand = Path(sys.executable).with_name("riskrank")
    return str(cand) if cand.exists() else (shutil.which("riskrank") or "riskrank")


def run_cli(argv: list[str], env: dict[str, str], *, kill: str | None = None, trace: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """The console script, or with a kill point, the same entry point under _kill_hook.py."""
    e = dict(env)
    if kill is not None or trace is not None:
        if kill:
            e["RR_KILL"] = kill
        if trace:
            e["RR_TRACE"] = str(trace)
        cmd = [sys.executable, str(HERE / "_kill_hook.py"), *argv]
    else:
        cmd = [script(), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=e, timeout=timeout)


def first_error(stderr: str) -> str:
    lines = [x for x in stderr.strip().splitlines() if x.strip() and not x.lstrip().startswith(("train ", "encoding"))]
    if not lines:
        return ""
    if any("Traceback (most recent call last)" in x for x in lines):
        return f"traceback ({len(lines)} lines): {lines[-1][:160]}"
    return lines[0][:220] + (f" [+{len(lines) - 1} lines]" if len(lines) > 1 else "")


def describe(rc: int, stderr: str) -> str:
    if rc == -9:
        return "killed"
    return f"exit {rc}" + (f": {first_error(stderr)}" if first_error(stderr) else "")


def is_clean_error(rc: int, stderr: str, must: tuple[str, ...] = ()) -> bool:
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    return (rc == 2 and len(lines) == 1 and lines[0].startswith("error:") and len(lines[0]) <= LINE_CAP
            and all(re.search(m, lines[0]) for m in must))


# -- rankings over the 12 tasks, through the in-process runner --------------------------------------
class Loader:
    def __init__(self, env: dict[str, str]) -> None:
        self.worker = CliWorker(env, timeout=300)

    def retrieve(self, argv: list[str]) -> dict:
        r, timed_out = self.worker.run(["retrieve", *argv, "--json"])
        if timed_out or r is None:
            return {"rc": None, "stderr": "timeout"}
        out = {"rc": r["rc"], "stderr": r["stderr"], "exc": r.get("exc")}
        if r["rc"] == 0 and r.get("json_stdout"):
            out["json"] = json.loads(r["json_stdout"])
        return out

    def rankings(self, ckpt: Path, mode: str = "core+graph", extra: list[str] | None = None, tasks: list[str] | None = None,
                 registry: Path | None = None) -> dict:
        """{"rc", "stderr", "lists": [[names]], "lambda", "alpha", "nan": bool} (stops at the first error)."""
        lists, lam, alpha, nan = [], None, None, False
        for t in tasks if tasks is not None else ALL_TASKS:
            r = self.retrieve(["--checkpoint", str(ckpt), "--mode", mode, *(["--registry", str(registry)] if registry else []), *(extra or []), t])
            if r["rc"] != 0 or "json" not in r:
                return {"rc": r["rc"], "stderr": r["stderr"], "exc": r.get("exc"), "lists": lists}
            j = r["json"]
            lists.append([x["name"] for x in j["tools"]])
            lam, alpha = j.get("lambda"), j.get("alpha")
            nan = nan or any(not math.isfinite(x["score"]) for x in j["tools"])
        return {"rc": 0, "stderr": "", "lists": lists, "lambda": lam, "alpha": alpha, "nan": nan}

    def stop(self) -> None:
        self.worker.stop()


def differs(a: list[list[str]], b: list[list[str]]) -> int:
    return sum(x != y for x, y in zip(a, b, strict=False))


def load_summary(res: dict, ref: dict | None = None, other: dict | None = None, names: tuple[str, str] = ("A", "B")) -> str:
    if res["rc"] != 0:
        msg = first_error(res["stderr"]) or res.get("exc") or ""
        return f"exit {res['rc']}: {msg}"
    s = f"exit 0, lambda {res.get('lambda')}, alpha {res.get('alpha')}" + (", NaN scores" if res.get("nan") else "")
    if ref is not None and ref.get("lists"):
        s += f"; top-5 differs from {names[0]} on {differs(res['lists'], ref['lists'])}/{len(res['lists'])}"
    if other is not None and other.get("lists"):
        s += f", from {names[1]} on {differs(res['lists'], other['lists'])}/{len(res['lists'])}"
    return s


def manifest_whole(d: Path) -> bool:
    """Whether a checkpoint directory is one whole checkpoint by its own manifest (the
    sidecar's ``files``: every listed file present with that sha256, no artefact unlisted)."""
    try:
        files = json.loads((d / SIDECAR).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    for name in (HEADS, GRAPH):
        p = d / name
        if (name in files) != p.is_file() or (p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() != files[name]):
            return False
    return True


def dir_listing(d: Path) -> str:
    if not d.exists():
        return "(no directory)"
    names = sorted(p.name for p in d.iterdir())
    return ", ".join(names) if names else "(empty)"


# -- sections ------------------------------------------------------------------------------------------
def train_args(out: Path, seed: int, force: bool = False, data: tuple[Path, Path] | None = None) -> list[str]:
    src = ["--registry", str(data[0]), "--queries", str(data[1])] if data else ["--dataset", "demo"]
    return ["train", *src, "--out", str(out), "--epochs", "3", "--seed", str(seed), *(["--force"] if force else [])]


def section_train(rep: Report, tmp: Path, env: dict[str, str], loader: Loader, refs: dict) -> None:
    """A: trained on the demo registry. B: retrained after the registry file was edited (the
    same tools in another order), with --force into A's directory, killed before each write.
    Loads use B's registry, as the user would after editing it."""
    data = write_reordered_demo(tmp)
    reg = data[0]
    A, B = refs["A"], tmp / "ref-B-reordered"
    if not (B / SIDECAR).exists():
        p = run_cli(train_args(B, 7, data=data), env)
        if p.returncode != 0:
            raise SystemExit(f"training B failed: {p.stderr[-1500:]}")
    trace = tmp / "train.trace"
    run_cli(train_args(tmp / "traced", 7, data=data), env, trace=trace)
    points = [x.split(" ", 1)[1] for x in trace.read_text().splitlines() if x.startswith("replace ")]
    # a replace onto the output directory itself is the commit of a whole staged checkpoint
    name_of = lambda x: "the directory commit" if Path(x).name == "traced" else Path(x).name  # noqa: E731
    rep.add("train", "write points of `riskrank train` (traced run)", "-", f"{len(points)} atomic replaces: " + ", ".join(name_of(x) for x in points), None)
    ra = loader.rankings(A, extra=["--alpha", "0.3"], registry=reg)
    rb = loader.rankings(B, extra=["--alpha", "0.3"], registry=reg)
    rep.add("train", "references on the edited registry, mode core+graph --alpha 0.3: A (old checkpoint) vs B (retrained)",
            "-", f"top-5 of A and B differ on {differs(ra['lists'], rb['lists'])}/{len(ra['lists'])} tasks", None)
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None  # noqa: E731
    owner = {}
    for name, d in (("A", A), ("B", B)):
        for f in (HEADS, SIDECAR, GRAPH):
            owner.setdefault(sha(d / f), name)

    def parts(d: Path) -> str:
        return " ".join(f"{f.split('.')[0]}={owner.get(sha(d / f), '-' if not (d / f).exists() else '?')}" for f in (HEADS, SIDECAR, GRAPH))

    litter = 0
    for n in range(1, len(points) + 1):
        # a fresh directory
        d = tmp / f"fresh{n}"
        p = run_cli(train_args(d, 7, data=data), env, kill=f"replace:before:{n}")
        pieces = parts(d)
        res = loader.rankings(d, extra=["--alpha", "0.3"], registry=reg)
        again = run_cli(train_args(d, 7, data=data), env)
        litter += len([x for x in (d.iterdir() if d.exists() else []) if x.name.endswith(".tmp")])
        ok = res["rc"] == 2 and is_clean_error(res["rc"], res["stderr"])
        obs = f"{describe(p.returncode, '')}; parts: {pieces}; load: {load_summary(res, rb, None, ('B', ''))}; train again: {describe(again.returncode, again.stderr)}"
        rep.add("train", f"fresh dir, kill before write {n} ({name_of(points[n - 1])})",
                "the next load: one error line (no checkpoint / incomplete checkpoint)", obs, ok)
        # over the existing checkpoint A
        g = tmp / f"force{n}"
        shutil.copytree(A, g)
        p = run_cli(train_args(g, 7, force=True, data=data), env, kill=f"replace:before:{n}")
        pieces = parts(g)
        res = loader.rankings(g, extra=["--alpha", "0.3"], registry=reg)
        litter += len([x for x in g.iterdir() if x.name.endswith(".tmp")])
        # whole: A's or B's files byte for byte, or a complete checkpoint by its own manifest
        # (a kill point the --force path never reaches: the swap is one atomic exchange)
        whole = pieces in (parts(A), parts(B)) or manifest_whole(g)
        verdict = (whole and res["rc"] == 0) or (res["rc"] == 2 and is_clean_error(res["rc"], res["stderr"]))
        mixed = res["rc"] == 0 and not whole
        obs = (f"{describe(p.returncode, '')}; parts: {pieces}; load: {load_summary(res, ra, rb)}"
               + ("  <- a mix of A and B, loaded without a warning" if mixed else ""))
        rep.add("train", f"--force over checkpoint A, kill before write {n} ({name_of(points[n - 1])})",
                "A intact or B complete (or one clear error); never a silent mix", obs, verdict)
    rep.add("train", "temp files left in checkpoint dirs after the kills (and a successful rerun in the fresh ones)",
            "0 (a later write removes stale temp files, or they live outside the checkpoint dir)", f"{litter}", litter == 0)
    lost = sum(parts(tmp / f"force{n}") != parts(A) and not manifest_whole(tmp / f"force{n}") for n in range(1, len(points) + 1))
    rep.add("train", "kill points of --force after which neither A nor a whole new checkpoint is there", "0 (the new checkpoint commits as a whole)",
            f"{lost} of {len(points)}", lost == 0)
    # and a graph that no longer fits the registry: one tool added at the top, graph of 98 tools
    grown = tmp / "demo_grown.json"
    grown.write_text(json.dumps([{"name": "new_tool", "description": "Archives a folder.", "risk_level": 2}, *demo_registry_records()]))
    q = tmp / "grown_queries.jsonl"
    q.write_text(data[1].read_text())
    g = tmp / "force-grown"
    shutil.copytree(A, g)
    graph_point = next((n for n, x in enumerate(points, 1) if Path(x).name == GRAPH), len(points))
    p = run_cli(train_args(g, 7, force=True, data=(grown, q)), env, kill=f"replace:before:{graph_point}")
    res = loader.rankings(g, extra=["--alpha", "0.3"], registry=grown, tasks=ALL_TASKS[:3])
    # A's heads serve any registry; only A's graph must never meet the grown registry
    intact = parts(g) == parts(A) and res["rc"] == 0
    rep.add("train", "registry grown by one tool, --force retrain killed before graph.npz; load with the new registry",
            "A intact (its graph not applied to the new registry) or one error line; never a graph of another registry",
            f"{describe(p.returncode, '')}; parts: {parts(g)}; load: {load_summary(res)}",
            intact or (res["rc"] == 2 and is_clean_error(res["rc"], res["stderr"])))


def _edit_json(src: Path, dst: Path, fn) -> None:  # type: ignore[no-untyped-def]
    shutil.copytree(src, dst)
    meta = json.loads((dst / SIDECAR).read_text())
    new = fn(meta)
    (dst / SIDECAR).write_text(new if isinstance(new, str) else json.dumps(new if new is not None else meta, indent=2))


def section_sidecar(rep: Report, tmp: Path, env: dict[str, str], loader: Loader, refs: dict) -> None:
    A, ra = refs["A"], refs["rank_A_core"]

    def set_path(path: str, value: Any):  # type: ignore[no-untyped-def]
        def fn(m: dict) -> dict:
            keys = path.split(".")
            cur = m
            for k in keys[:-1]:
                cur = cur[k]
            cur[keys[-1]] = value
            return m
        return fn

    def delete(path: str):  # type: ignore[no-untyped-def]
        def fn(m: dict) -> dict:
            keys = path.split(".")
            cur = m
            for k in keys[:-1]:
                cur = cur[k]
            del cur[keys[-1]]
            return m
        return fn

    raw_nan = lambda key: (lambda m: json.dumps(m, indent=2).replace(f'"{key}": {json.dumps(m["inference"][key])}', f'"{key}": NaN', 1))  # noqa: E731
    cases: list[tuple[str, Any, str]] = [
        ("inference.lam = -5", set_path("inference.lam", -5), "lam"),
        ("inference.lam = NaN", raw_nan("lam"), "lam"),
        ("inference.lam = 1e6", set_path("inference.lam", 1e6), "lam"),
        ('inference.lam = "abc"', set_path("inference.lam", "abc"), "lam"),
        ('inference.lam = "0.5" (a string)', set_path("inference.lam", "0.5"), "lam"),
        ("inference.lam = true", set_path("inference.lam", True), "lam"),
        ("inference.lam = null", set_path("inference.lam", None), "lam"),
        ("inference.alpha = -1", set_path("inference.alpha", -1), "alpha"),
        ("inference.alpha = 2", set_path("inference.alpha", 2), "alpha"),
        ("inference.alpha = NaN", raw_nan("alpha"), "alpha"),
        ('inference.normalisation = "xyz"', set_path("inference.normalisation", "xyz"), "normalisation"),
        ('inference gets an unknown key "lamda": 0.5', set_path("inference.lamda", 0.5), "lamda|unknown"),
        ("no inference block", delete("inference"), "inference"),
        ("no training_data block", delete("training_data"), "training_data"),
        ("no encoder block", delete("encoder"), "encoder"),
        ('head.dim = "abc"', set_path("head.dim", "abc"), "dim"),
        ("head.hidden = 10", set_path("head.hidden", 10), "hidden|weights"),
        ("weights_sha256 removed", delete("weights_sha256"), "sha256"),
        ("sidecar is a JSON list", lambda m: "[]", "checkpoint"),
        ("sidecar is null", lambda m: "null", "checkpoint"),
        ("sidecar is {}", lambda m: "{}", "format"),
        ("sidecar empty", lambda m: "", "checkpoint"),
        ("sidecar truncated", lambda m: json.dumps(m)[:200], "checkpoint"),
        ("format = 2", set_path("format", 2), "format"),
        ("training_data.registry_fingerprint edited", set_path("training_data.registry_fingerprint", "0" * 64), "fingerprint|graph"),
    ]
    for label, fn, field_rx in cases:
        d = tmp / ("side-" + re.sub(r"[^a-z0-9]+", "_", label.lower()))
        _edit_json(A, d, fn)
        res = loader.rankings(d, mode="core+graph", tasks=ALL_TASKS[:4])
        ok = res["rc"] == 2 and is_clean_error(res["rc"], res["stderr"], (SIDECAR.replace(".", r"\."), field_rx))
        if label.startswith("training_data.registry_fingerprint"):
            ok = None  # a registry mismatch is legitimate (another registry); recorded only
        rep.add("sidecar", label, f"exit 2, one line naming {SIDECAR} and the field", load_summary(res, {"lists": ra["lists"][:4]}, None), ok)


def section_graph(rep: Report, tmp: Path, env: dict[str, str], loader: Loader, refs: dict) -> None:
    import numpy as np

    A, ra = refs["A"], refs["rank_A"]
    blob = (A / GRAPH).read_bytes()
    rng = random.Random(5)

    def flip(data: bytes, pos: int) -> bytes:
        b = bytearray(data)
        b[pos] ^= 0xFF
        return bytes(b)

    with np.load(A / GRAPH, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    def npz(**changes: Any) -> bytes:
        import io

        a = {k: v for k, v in arrays.items() if k not in changes or changes[k] is not None}
        a.update({k: v for k, v in changes.items() if v is not None})
        buf = io.BytesIO()
        np.savez(buf, **a)
        return buf.getvalue()

    n = int(arrays["shape"][0])
    data_nan = arrays["data"].astype(np.float64).copy()
    data_nan[: max(1, len(data_nan) // 3)] = np.nan
    cases: list[tuple[str, bytes | None]] = [
        ("empty file", b""),
        ("truncated to half", blob[: len(blob) // 2]),
        ("truncated to 100 bytes", blob[:100]),
        ("last 22 bytes only (the zip end record)", blob[-22:]),
        ("byte flipped at 40 (a member's header)", flip(blob, 40)),
        ("byte flipped in the middle (member data)", flip(blob, len(blob) // 2)),
        ("byte flipped 30 bytes from the end (central directory)", flip(blob, len(blob) - 30)),
        ("random bytes", bytes(rng.randrange(256) for _ in range(len(blob)))),
        ("a text file", b"not a graph\n"),
        ("a valid npz without 'data'", npz(data=None)),
        ("a valid npz whose shape says 10 tools", npz(shape=np.array([10, 10], dtype=np.int64))),
        (f"a valid npz whose shape says {n + 5} tools", npz(shape=np.array([n + 5, n + 5], dtype=np.int64))),
        ("a valid npz with NaN edge weights", npz(data=data_nan.astype(arrays["data"].dtype))),
        ("a valid npz with NaN weights and permissions", npz(data=np.full_like(arrays["data"], np.nan), permissions=np.full_like(arrays["permissions"], np.nan))),
        ("a valid npz with config 'abc'", npz(config=np.array("abc"))),
        ("graph.npz of another run, for the same tools in another order", (tmp / "ref-B-reordered" / GRAPH).read_bytes() if (tmp / "ref-B-reordered" / GRAPH).exists() else b""),
        ("graph.npz is a directory", None),
    ]
    for label, content in cases:
        d = tmp / ("graph-" + re.sub(r"[^a-z0-9]+", "_", label.lower()))[:60]
        shutil.copytree(A, d)
        (d / GRAPH).unlink()
        if content is None:
            (d / GRAPH).mkdir()
        else:
            (d / GRAPH).write_bytes(content)
        res = loader.rankings(d, extra=["--alpha", "0.3"], tasks=ALL_TASKS[:4])
        ok = res["rc"] == 2 and is_clean_error(res["rc"], res["stderr"], (r"graph\.npz",))
        rep.add("graph", label, "exit 2, one line naming graph.npz (the checkpoint is incomplete/corrupt)",
                load_summary(res, {"lists": ra["lists"][:4]}, None), ok)


def section_heads(rep: Report, tmp: Path, env: dict[str, str], loader: Loader, refs: dict) -> None:
    A = refs["A"]
    blob = (A / HEADS).read_bytes()
    b = bytearray(blob)
    b[len(b) // 2] ^= 1
    for label, content in (("truncated to half", blob[: len(blob) // 2]), ("one bit flipped", bytes(b)), ("empty", b""),
                           ("heads of run B", (refs["B"] / HEADS).read_bytes())):
        d = tmp / ("heads-" + re.sub(r"[^a-z0-9]+", "_", label.lower()))
        shutil.copytree(A, d)
        (d / HEADS).write_bytes(content)
        res = loader.rankings(d, tasks=ALL_TASKS[:1])
        rep.add("heads", label, "exit 2, one line (sha256 mismatch)", load_summary(res), res["rc"] == 2 and is_clean_error(res["rc"], res["stderr"], (HEADS.replace(".", r"\."),)))


# -- the embedding cache -------------------------------------------------------------------------------
def _cache_registry(path: Path, n: int = 150) -> None:
    rng = random.Random(11)
    verbs = ["read", "list", "delete", "send", "create", "update", "search", "export"]
    nouns = ["file", "record", "email", "invoice", "photo", "note", "user", "bucket", "calendar event", "log"]
    tools = []
    for i in range(n):
        v, o = rng.choice(verbs), rng.choice(nouns)
        tools.append({"name": f"{v}_{o.replace(' ', '_')}_{i}", "description": f"{v.capitalize()} a {o} by id ({i}).", "risk_level": rng.randint(1, 5)})
    path.write_text(json.dumps(tools))


def section_cache(rep: Report, tmp: Path, env: dict[str, str]) -> None:
    reg = tmp / "cache_registry.json"
    _cache_registry(reg)
    task = "delete the old invoice records"
    argv = ["retrieve", "--registry", str(reg), "--mode", "dense+rule", "--json", task]

    def run(cache: Path, kill: str | None = None, trace: Path | None = None) -> subprocess.CompletedProcess:
        e = {**env, "RISKRANK_CACHE": str(cache)}
        return run_cli(argv, e, kill=kill, trace=trace)

    def top(p: subprocess.CompletedProcess) -> list[tuple[str, float]] | None:
        try:
            return [(t["name"], round(t["score"], 5)) for t in json.loads(p.stdout)["tools"]]
        except (json.JSONDecodeError, KeyError, TypeError):
            return None

    base = tmp / "cache-base"
    trace = tmp / "cache.trace"
    p0 = run(base, trace=trace)
    ref = top(p0)
    stmts = [x for x in trace.read_text().splitlines() if x.startswith("sql ")]
    inserts = sum(1 for x in stmts if x.startswith("sql INSERT"))
    commits = sum(1 for x in stmts if x.startswith("sql COMMIT"))
    rep.add("cache", "write points of a cold `retrieve` (traced)", "-", f"{inserts} INSERTs in {commits} transactions; reference run {describe(p0.returncode, p0.stderr)}", None)

    def integrity(db: Path) -> str:
        try:
            with sqlite3.connect(db) as c:
                return str(c.execute("PRAGMA integrity_check").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            return f"error: {exc}"

    for kill in ("sql:INSERT:1", f"sql:INSERT:{max(2, inserts // 2)}", f"sql:INSERT:{inserts}", "sql:COMMIT:1", f"sql:COMMIT:{commits}"):
        c = tmp / ("cache-" + kill.replace(":", "_"))
        p = run(c, kill=kill)
        q = run(c)
        same = top(q) == ref
        rep.add("cache", f"kill at {kill.split(':', 1)[1]}, then the same command", "exit 0, the same ranking, db intact",
                f"{describe(p.returncode, '')}; rerun {describe(q.returncode, q.stderr)}, ranking {'same' if same else 'DIFFERENT'}, integrity {integrity(c / CACHE_DB)}",
                q.returncode == 0 and same)

    def variant(label: str, mutate, expected: str, ok_fn) -> None:  # type: ignore[no-untyped-def]
        c = tmp / ("cache-" + re.sub(r"[^a-z0-9]+", "_", label.lower()))[:60]
        shutil.copytree(base, c)
        with sqlite3.connect(c / CACHE_DB) as conn:  # fold the WAL into the db file first
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for side in ("-wal", "-shm"):
            Path(str(c / CACHE_DB) + side).unlink(missing_ok=True)
        mutate(c / CACHE_DB)
        q = run(c)
        rep.add("cache", label, expected, f"{describe(q.returncode, q.stderr)}" + (f", ranking {'same' if top(q) == ref else 'DIFFERENT'}" if q.returncode == 0 else "")
                + (f", scores {[s for _, s in (top(q) or [])][:3]}" if q.returncode == 0 and top(q) != ref else ""), ok_fn(q))

    rebuilt = lambda q: q.returncode == 0 and top(q) == ref  # noqa: E731
    rebuilt_or_error = lambda q: rebuilt(q) or is_clean_error(q.returncode, q.stderr)  # noqa: E731
    rng = random.Random(3)
    variant("db replaced by random bytes", lambda db: db.write_bytes(bytes(rng.randrange(256) for _ in range(8192))),
            "a one-line warning, the db moved aside and rebuilt; exit 0, same ranking", rebuilt)
    variant("db truncated to half", lambda db: db.write_bytes(db.read_bytes()[: db.stat().st_size // 2]),
            "a one-line warning, rebuilt; exit 0, same ranking", rebuilt)
    variant("db header overwritten", lambda db: db.write_bytes(b"\x00" * 100 + db.read_bytes()[100:]),
            "a one-line warning, rebuilt; exit 0, same ranking", rebuilt)
    variant("db empty (0 bytes)", lambda db: db.write_bytes(b""), "exit 0, same ranking", rebuilt)

    def sql(stmt: str, params: tuple = ()):  # type: ignore[no-untyped-def]
        def fn(db: Path) -> None:
            with sqlite3.connect(db) as conn:
                conn.execute(stmt, params)
        return fn

    def nan_vectors(db: Path) -> None:
        with sqlite3.connect(db) as conn:
            rows = conn.execute(f"SELECT rowid, {CACHE_DIM} FROM {CACHE_TABLE}").fetchall()
            import numpy as np

            for rowid, dim in rows:
                conn.execute(f"UPDATE {CACHE_TABLE} SET {CACHE_VEC} = ? WHERE rowid = ?", (np.full(dim, np.nan, dtype=np.float32).tobytes(), rowid))

    def shuffled_vectors(db: Path) -> None:
        with sqlite3.connect(db) as conn:
            rows = conn.execute(f"SELECT rowid, {CACHE_VEC} FROM {CACHE_TABLE}").fetchall()
            vecs = [v for _, v in rows]
            random.Random(1).shuffle(vecs)
            for (rowid, _), v in zip(rows, vecs, strict=True):
                conn.execute(f"UPDATE {CACHE_TABLE} SET {CACHE_VEC} = ? WHERE rowid = ?", (v, rowid))

    def one_row_wrong_dim(db: Path) -> None:
        import numpy as np

        with sqlite3.connect(db) as conn:
            (rowid,) = conn.execute(f"SELECT rowid FROM {CACHE_TABLE} LIMIT 1").fetchone()
            conn.execute(f"UPDATE {CACHE_TABLE} SET {CACHE_DIM} = 10, {CACHE_VEC} = ? WHERE rowid = ?", (np.ones(10, dtype=np.float32).tobytes(), rowid))

    def all_rows_wrong_dim(db: Path) -> None:
        import numpy as np

        with sqlite3.connect(db) as conn:
            conn.execute(f"UPDATE {CACHE_TABLE} SET {CACHE_DIM} = 10, {CACHE_VEC} = ?", (np.ones(10, dtype=np.float32).tobytes(),))

    variant("every cached vector NaN", nan_vectors, "NaN rows detected on read and re-encoded; exit 0, same ranking", rebuilt)
    variant("cached vectors swapped between texts (finite, unit norm)", shuffled_vectors,
            "detected (a per-row checksum) and re-encoded; exit 0, same ranking", rebuilt)
    variant("one cached row of dimension 10", one_row_wrong_dim, "the row ignored and re-encoded; exit 0, same ranking", rebuilt_or_error)
    variant("every cached row of dimension 10", all_rows_wrong_dim, "rows of the wrong dimension re-encoded; exit 0, same ranking", rebuilt)
    variant("model_meta dim = 'abc'", sql(f"UPDATE {CACHE_META} SET meta = ?", (json.dumps({"dim": "abc", "name": "x"}),)),
            "detected and rebuilt (or one error line); never a traceback", rebuilt_or_error)
    variant("model_meta meta not JSON", sql(f"UPDATE {CACHE_META} SET meta = 'not json'"),
            "detected and rebuilt (or one error line); never a traceback", rebuilt_or_error)


# -- the audit vote log -----------------------------------------------------------------------------
class FakeLLM:
    """An OpenAI-compatible /chat/completions that answers a level derived from the tool name."""

    def __init__(self) -> None:
        outer = self
        self.requests = 0

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                outer.requests += 1
                text = body["messages"][0]["content"]
                m = re.search(r"Tool name: (.*)", text)
                level = hashlib.sha256((m.group(1) if m else text).encode()).digest()[0] % 5 + 1
                out = json.dumps({"choices": [{"message": {"role": "assistant", "content": str(level)}}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def section_audit(rep: Report, tmp: Path, env: dict[str, str]) -> None:
    llm = FakeLLM()
    try:
        def argv(d: Path) -> list[str]:
            return ["audit", "--dataset", "demo", "-a", "keyword", "-a", f"openai:fake@{llm.url}", "--out", str(d / "labels.json"),
                    "--workers", "2", "--retries", "0", "--quiet"]

        def labels(d: Path) -> dict | None:
            try:
                data = json.loads((d / "labels.json").read_text())
            except (OSError, json.JSONDecodeError):
                return None
            return {k: (v.get("risk_level"), json.dumps(v.get("votes"), sort_keys=True), v.get("resolution")) for k, v in data.items()}

        ref_dir = tmp / "audit-ref"
        ref_dir.mkdir()
        trace = tmp / "audit.trace"
        p = run_cli(argv(ref_dir), env, trace=trace)
        ref = labels(ref_dir)
        pts = trace.read_text().splitlines()
        flushes = sum(1 for x in pts if x.startswith("votes-flush"))
        replaces = [x.split(" ", 1)[1] for x in pts if x.startswith("replace ")]
        rep.add("audit", "write points of `riskrank audit` (traced, keyword + openai fake)", "-",
                f"{describe(p.returncode, p.stderr)}; {flushes} vote-log flushes, {len(replaces)} replaces ({', '.join(Path(r).name for r in replaces)}); {len(ref or {})} tools", None)

        kills = [f"votes:after:{n}" for n in sorted({1, flushes // 4, flushes // 2, flushes - 1, flushes})] + ["votes:torn:3", f"votes:torn:{flushes // 2}"]
        kills += [f"replace:before:{i + 1}" for i in range(len(replaces))]
        for kill in kills:
            d = tmp / ("audit-" + kill.replace(":", "_"))
            d.mkdir()
            p = run_cli(argv(d), env, kill=kill)
            q = run_cli(argv(d), env)
            got = labels(d)
            same = got == ref
            ndiff = None if got is None or ref is None else sum(got.get(k) != v for k, v in ref.items())
            note = re.search(r"\d+ new vote\(s\), \d+ from \S+( \(torn last line repaired\))?", q.stdout)
            rep.add("audit", f"kill at {kill}, then the same command", "the labels of an uninterrupted run",
                    f"{describe(p.returncode, '')}; resume {describe(q.returncode, q.stderr)} ({note.group(0) if note else '-'}); "
                    + ("labels identical" if same else f"labels differ on {ndiff} tools"), q.returncode == 0 and same)

        # hand edits of a complete vote log
        log_name = "labels" + VOTES_SUFFIX
        records = [json.loads(x) for x in (ref_dir / log_name).read_text().splitlines()]
        # the target: a tool labelled L4+ whose name says it destroys something
        risky = [k for k, v in (ref or {}).items() if (v[0] or 0) >= 4]
        target = next((k for k in risky if re.search(r"delete|drop|wipe|purge|terminate|destroy", k)), risky[0] if risky else records[0]["tool"])

        def lvl(rec: tuple | None) -> str:
            if rec is None:
                return "?"
            return f"L{rec[0]}" if rec[0] else f"unresolved ({rec[2]})"

        def edited(label: str, edit, expected: str, ok_fn) -> None:  # type: ignore[no-untyped-def]
            d = tmp / ("audit-edit-" + re.sub(r"[^a-z0-9]+", "_", label.lower()))[:70]
            shutil.copytree(ref_dir, d)
            log = d / log_name
            lines = log.read_text().splitlines(keepends=True)
            log.write_text("".join(edit(lines)))
            q = run_cli(argv(d), env)
            got = labels(d) or {}
            before, after = (ref or {}).get(target), got.get(target)
            note = re.search(r"\d+ new vote\(s\), \d+ from \S+( \(torn last line repaired\))?", q.stdout)
            warn = [x for x in (q.stdout + q.stderr).splitlines() if "note:" in x or "warning" in x.lower()]
            obs = (f"{describe(q.returncode, q.stderr)} ({note.group(0) if note else '-'}); {target}: "
                   f"{lvl(before)} -> {lvl(after)}" + (f"; {warn[0][:100]!r}" if warn else "; no warning"))
            rep.add("audit", label, expected, obs, ok_fn(q, before, after, warn))

        def set_level(annotator: str, level: int):  # type: ignore[no-untyped-def]
            def edit(lines: list[str]) -> list[str]:
                out = []
                for line in lines:
                    r = json.loads(line)
                    if r.get("tool") == target and r.get("annotator", "").startswith(annotator):
                        r["level"] = level
                        line = json.dumps(r, ensure_ascii=False) + "\n"
                    out.append(line)
                return out
            return edit

        unchanged = lambda q, b, a, w: q.returncode == 0 and a == b  # noqa: E731
        flagged = lambda q, b, a, w: (q.returncode == 0 and a == b) or is_clean_error(q.returncode, q.stderr)  # noqa: E731
        edited("keyword vote of a destructive tool edited to 1", set_level("keyword", 1),
               "detected: the keyword vote recomputed (deterministic) or the line's checksum fails", flagged)
        edited("openai vote of the same tool edited to 1", set_level("openai", 1),
               "detected by the line's checksum (re-asked or one error line)", flagged)
        edited("both votes of the same tool edited to 1", lambda lines: set_level("openai", 1)(set_level("keyword", 1)(lines)),
               "detected (checksum / keyword recomputed)", flagged)
        def forged(lines: list[str]) -> list[str]:
            kw_line = next(x for x in lines if json.loads(x).get("tool") == target and json.loads(x).get("annotator") == "keyword")
            return [*lines, json.dumps({**json.loads(kw_line), "level": 1}) + "\n"]
        edited("a forged keyword vote appended (the last vote wins)", forged, "detected (checksum / recomputed)", flagged)
        edited("a garbage line inserted mid-log", lambda lines: [*lines[:5], "{not json\n", *lines[5:]],
               "the line ignored with a note; labels unchanged", lambda q, b, a, w: q.returncode == 0 and a == b and bool(w))
        edited("a vote with level 9", set_level("keyword", 9), "ignored and re-annotated; labels unchanged", unchanged)
        edited("the last line cut in half", lambda lines: [*lines[:-1], lines[-1][:len(lines[-1]) // 2]],
               "repaired (reported) and re-annotated; labels unchanged", unchanged)
    finally:
        llm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="train,sidecar,graph,heads,cache,audit")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    sections = args.sections.split(",")
    tmp = Path(args.workdir or tempfile.mkdtemp(prefix="riskrank-faults-"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("RISKRANK_CACHE", str(tmp / "shared-cache"))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    rep = Report()
    ALL_TASKS[:] = demo_tasks()
    refs: dict[str, Any] = {}
    loader = None
    if {"train", "sidecar", "graph", "heads"} & set(sections):
        A, B = tmp / "ref-A", tmp / "ref-B"
        for d, seed in ((A, 42), (B, 7)):
            if not (d / SIDECAR).exists():
                p = run_cli(train_args(d, seed), env)
                if p.returncode != 0:
                    raise SystemExit(f"reference training failed: {p.stderr[-2000:]}")
        loader = Loader(env)
        data = write_reordered_demo(tmp)
        if not (tmp / "ref-B-reordered" / SIDECAR).exists():
            p = run_cli(train_args(tmp / "ref-B-reordered", 7, data=data), env)
            if p.returncode != 0:
                raise SystemExit(f"reference training failed: {p.stderr[-2000:]}")
        refs = {"A": A, "B": B, "rank_A": loader.rankings(A, extra=["--alpha", "0.3"]),
                "rank_A_core": loader.rankings(A, mode="core+graph")}
    try:
        for name, fn in (("train", section_train), ("sidecar", section_sidecar), ("graph", section_graph), ("heads", section_heads)):
            if name in sections:
                print(f"[{name}]", flush=True)
                fn(rep, tmp, env, loader, refs)
    finally:
        if loader is not None:
            loader.stop()
    if "cache" in sections:
        print("[cache]", flush=True)
        section_cache(rep, tmp, env)
    if "audit" in sections:
        print("[audit]", flush=True)
        section_audit(rep, tmp, env)

    report(rep.rows, "section", (8, 58, 62), "cases", args.json_out)


if __name__ == "__main__":
    main()
