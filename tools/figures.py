"""The figures of README.md and docs/*.md and the artefacts they come from (checked by
tools/check_figures.py, whose docstring says what a figure is and how to add one).

``RENDERED``: blocks a function renders from artefacts, found byte for byte in a doc.
``CLAIMS``: phrases of a doc with ``{}`` placeholders filled from artefact values, found with
whitespace collapsed. Values are ``V``s: a number (or text) and where it was read.
"""

from __future__ import annotations

import json
import re
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
        from check_figures import tokens

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
         lambda: _bench("trust_scan").doc_table(_load("benchmarks/results/trust_scan.json")))
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
rendered("docs/base-model.md", "the level-model tables", ["benchmarks/results/risk_levels.json"],
         lambda: _bench("risk_levels").table_md(_load("benchmarks/results/risk_levels.json")))
rendered("docs/base-model.md", "the leave-one-corpus-out tables", ["benchmarks/results/loco.json"],
         lambda: _bench("transfer_loco").doc_tables(_load("benchmarks/results/loco.json")["summary"]))
rendered("docs/base-model.md", "the risk-choices lever table", ["benchmarks/results/loco.json", "benchmarks/results/loco_audited.json"],
         lambda: _bench("transfer_loco").lever_table(_load("benchmarks/results/loco.json"), _load("benchmarks/results/loco_audited.json")))
rendered("docs/base-model.md", "the encoder lever table", ["benchmarks/results/loco.json", "benchmarks/results/loco_finetuned.json"],
         lambda: _bench("transfer_loco").finetune_table(_load("benchmarks/results/loco.json"), _load("benchmarks/results/loco_finetuned.json"))[0])
rendered("docs/base-model.md", "the shipped-against-five-registries table", ["benchmarks/results/loco_shipped.json", "benchmarks/results/loco.json"],
         lambda: "\n\n".join(_bench("transfer_loco").shipped_table(_load("benchmarks/results/loco.json")["summary"],
                                                                    _load("benchmarks/results/loco_shipped.json"))))
rendered("docs/base-model.md", "the leave-one-benchmark-out table", ["benchmarks/results/transfer_lobo.json"],
         lambda: _bench("transfer_lobo").table_md(_load("benchmarks/results/transfer_lobo.json")["summary"]))
rendered("docs/base-model.md", "the leave-one-benchmark-out context table", ["benchmarks/results/transfer_lobo.json"],
         lambda: _bench("transfer_lobo").context_table_md(_load("benchmarks/results/transfer_lobo.json")["summary"]))
rendered("docs/base-model.md", "the leave-one-benchmark-out frontier", ["benchmarks/results/transfer_lobo.json"],
         lambda: _bench("transfer_lobo").frontier_md(_load("benchmarks/results/transfer_lobo.json")["summary"]))


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
      QUANT.at("fidelity_int8_weights", "dense_top5_overlap_mean", fmt=".3f"))
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
claim("docs/trust.md", "a field over {} characters", Source("riskrank.scan").at("MAX_FIELD_CHARS", ","))
claim("docs/trust.md", "**Benign**: the {} real tools of", TRUST.at("benign", "n", fmt=","))
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
