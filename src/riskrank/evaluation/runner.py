"""The evaluation runner: every method of the results contract on one benchmark, per seed,
under the benchmark's protocol, with per-query metrics kept for tables, tests and plots.

Protocols: with a training split, the heads train on it once per seed and every
evaluation split is scored; without one (UltraTool without dev.json), 5-fold cross-fitting
over the evaluation queries, so each query is scored by models that never saw it. In both,
the training queries choose the hybrid fusion, and a validation slice of them (by query)
chooses beta and lambda and alpha per pipeline; test queries never choose anything.

Zero-shot (a checkpoint given, or a registry without training queries): nothing is trained
or chosen in the run; the trained methods read the checkpoint's heads and validated settings,
the ``hybrid`` baseline its fusion (else the prior one), and the run refuses queries the
checkpoint trained on (:mod:`riskrank.contamination`) unless told to label them contaminated.

Predicted risk is honest: every method with the rule filter on predicted levels reads levels
cross-fitted over tools (no tool's level comes from a head that saw its label), except the one
``[levels=in_sample]`` variant kept to show the difference. Baselines rank as they are (named
tools are not lifted); riskrank's methods lift a tool the task names, as the engine does.

All scoring of riskrank's methods and the dense baselines goes through
:meth:`riskrank.pipeline.RiskAwareRetriever.rank_batch`, the same code the CLI and the servers
run; training and every choice made on validation are :mod:`riskrank.training`'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

import riskrank.training as training
from riskrank.checkpoint import Checkpoint, load_checkpoint
from riskrank.contamination import seen_mask
from riskrank.datasets import Benchmark, QuerySet, crossfit_folds
from riskrank.encoder import Encoder
from riskrank.errors import RiskrankError
from riskrank.evaluation.baselines import mmr_rerank
from riskrank.evaluation.methods import MethodSpec, parse_methods
from riskrank.first_stage import PRIOR_FUSION, Fusion, LexicalEvidence, LexicalIndex, rank, top_m
from riskrank.graph import EDGE_TYPES, GraphConfig, ToolGraph
from riskrank.metrics import METRICS, evaluate, query_subsets, tool_query_counts
from riskrank.modes import Stages
from riskrank.pipeline import RiskAwareRetriever
from riskrank.rules import PAPER_FILL
from riskrank.training import TrainConfig

DEFAULT_SEEDS = (42, 123, 777)
N_FOLDS = 5
KEEP_TOP = 10


@dataclass
class EvalRun:
    """Everything one evaluation produced. ``per_query[seed][split][method][metric]`` is a
    [Q] array in the split's query order; ``top[seed][split][method]`` the top-10 tool
    indices; ``filters[seed][split][method]`` per-query rule-filter reports;
    ``subsets[seed][split]`` boolean query masks; ``choices[seed]`` the validation choices
    of every fold."""

    dataset: str
    protocol: str
    encoder: str
    seeds: list[int]
    methods: list[str]
    splits: dict[str, int]
    per_query: dict[int, dict[str, dict[str, dict[str, np.ndarray]]]] = field(default_factory=dict)
    top: dict[int, dict[str, dict[str, np.ndarray]]] = field(default_factory=dict)
    filters: dict[int, dict[str, dict[str, list[dict[str, Any]]]]] = field(default_factory=dict)
    subsets: dict[int, dict[str, dict[str, np.ndarray]]] = field(default_factory=dict)
    choices: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    contaminated: dict[str, Any] | None = None
    """With a checkpoint: which evaluation queries it trained on and which methods read it."""

    def seed_means(self, split: str, method: str) -> dict[str, np.ndarray]:
        """Per-seed mean of every metric: {metric: [S]} (NaN-aware)."""
        out: dict[str, list[float]] = {}
        for s in self.seeds:
            for m, v in self.per_query[s][split][method].items():
                v = np.asarray(v, dtype=np.float64)
                out.setdefault(m, []).append(float(np.nanmean(v)) if np.isfinite(v).any() else float("nan"))
        return {m: np.array(v) for m, v in out.items()}

    def summary(self, split: str, method: str) -> dict[str, dict[str, float]]:
        """{metric: {"mean", "std"}} over seeds (std with ddof=1 when there are >= 2 seeds)."""
        res = {}
        for m, v in self.seed_means(split, method).items():
            std = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
            res[m] = {"mean": float(np.mean(v)), "std": std}
        return res

    def results_json(self) -> dict[str, Any]:
        """The results contract (docs/results-contract.md)."""
        return {
            "dataset": self.dataset,
            "protocol": self.protocol,
            "encoder": self.encoder,
            "seeds": self.seeds,
            "splits": {
                sp: {"n_queries": n, "methods": {m: self.summary(sp, m) for m in self.methods}}
                for sp, n in self.splits.items()
            },
            "timing": self.timing,
            "choices": {str(s): c for s, c in self.choices.items()},
            "notes": self.notes,
            **({"contaminated": self.contaminated} if self.contaminated is not None else {}),
        }

    # -- persistence (reproduce --reuse) ----------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Per-query arrays to one .npz, the rest to JSON (no pickle); atomic."""
        from riskrank.fileio import atomic_write_bytes, write_json

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for s in self.seeds:
            for sp in self.splits:
                for me in self.methods:
                    for mt, v in self.per_query[s][sp][me].items():
                        arrays[_key("pq", s, sp, me, mt)] = np.asarray(v)
                    arrays[_key("top", s, sp, me)] = self.top[s][sp][me]
                for name, mask in self.subsets[s][sp].items():
                    arrays[_key("sub", s, sp, name)] = mask
        import io

        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        atomic_write_bytes(d / "per_query.npz", buf.getvalue())
        meta = {
            "dataset": self.dataset, "protocol": self.protocol, "encoder": self.encoder, "seeds": self.seeds,
            "methods": self.methods, "splits": self.splits, "filters": {str(s): f for s, f in self.filters.items()},
            "choices": {str(s): c for s, c in self.choices.items()}, "timing": self.timing, "notes": self.notes,
            "contaminated": self.contaminated,
        }
        write_json(d / "run.json", meta, indent=None)

    @classmethod
    def load(cls, directory: str | Path) -> EvalRun:
        d = Path(directory)
        try:
            meta = json.loads((d / "run.json").read_text())
            data = np.load(d / "per_query.npz", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise RiskrankError(f"{d}: no reusable evaluation run ({exc})") from None
        run = cls(meta["dataset"], meta["protocol"], meta["encoder"], meta["seeds"], meta["methods"], meta["splits"],
                  timing=meta["timing"], notes=meta["notes"], contaminated=meta.get("contaminated"))
        run.filters = {int(s): f for s, f in meta["filters"].items()}
        run.choices = {int(s): c for s, c in meta["choices"].items()}
        for s in run.seeds:
            run.per_query[s] = {sp: {me: {} for me in run.methods} for sp in run.splits}
            run.top[s] = {sp: {} for sp in run.splits}
            run.subsets[s] = {sp: {} for sp in run.splits}
        for key in data.files:
            kind, s, *rest = key.split("|")
            s = int(s)
            rest = [r.replace("~", "/") for r in rest]
            if kind == "pq":
                run.per_query[s][rest[0]][rest[1]][rest[2]] = data[key]
            elif kind == "top":
                run.top[s][rest[0]][rest[1]] = data[key]
            elif kind == "sub":
                run.subsets[s][rest[0]][rest[1]] = data[key]
        return run


def _key(*parts: Any) -> str:
    return "|".join(str(p).replace("/", "~") for p in parts)


@dataclass
class _Fold:
    """What one training run (one seed, one fold) gives the methods."""

    retrievers: dict[str, RiskAwareRetriever]
    train_part_gold: list[np.ndarray]
    train_counts: np.ndarray
    label_lam: float
    choice: dict[str, Any]
    hybrid: RiskAwareRetriever
    """The ``hybrid`` baseline: the fusion this fold's training queries chose, nothing more."""
    graphs: dict[tuple[str, ...], ToolGraph] = field(default_factory=dict)
    train_q: QuerySet | None = None
    train_emb: np.ndarray | None = None
    predicted: dict[str, RiskAwareRetriever] = field(default_factory=dict)
    """Per head, the retriever whose predicted levels are cross-fitted over tools."""


class Runner:
    """Evaluate methods on a benchmark. Heavy inputs (embeddings, the lexical evidence) are
    computed once and shared by every seed and fold."""

    def __init__(
        self, benchmark: Benchmark, methods: Sequence[str] | str, *, seeds: Sequence[int] = DEFAULT_SEEDS,
        encoder: Encoder | str | None = None, train_overrides: dict[str, Any] | None = None,
        graph_config: GraphConfig | None = None, n_folds: int = N_FOLDS, progress: bool = True,
        checkpoint: Checkpoint | str | Path | None = None, zero_shot: bool = False, allow_contaminated: bool = False,
    ) -> None:
        """``checkpoint`` (or ``zero_shot`` without one): evaluate zero-shot (module
        docstring); ``allow_contaminated``: run a checkpoint's methods on queries it trained
        on, and label them contaminated, instead of refusing."""
        self.bench = benchmark
        self.specs = parse_methods(methods)
        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise RiskrankError("no seeds given")
        self.encoder = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
        self.checkpoint = checkpoint if checkpoint is None or isinstance(checkpoint, Checkpoint) \
            else load_checkpoint(checkpoint, encoder_identity=self.encoder.identity)
        self.zero_shot = bool(zero_shot or self.checkpoint is not None)
        self.contaminated: dict[str, Any] | None = None
        if self.zero_shot:
            self.seeds = self.seeds[:1]  # nothing is trained: one run is every run
            self._check_zero_shot()
            self.contaminated = self._contamination(allow_contaminated)
        self.train_overrides = dict(train_overrides or {})
        self.graph_config = graph_config or GraphConfig()
        self.n_folds = n_folds
        self.progress = progress
        self.timing: dict[str, float] = {}
        self.registry = benchmark.registry
        if not self.registry.has_labels:
            raise RiskrankError(f"{benchmark.name}: {self.registry.n_unlabelled} tools have no risk label; the exposure metrics need audited labels")
        t0 = time.perf_counter()
        self.tool_emb = self.encoder.encode(self.registry.texts(), desc="encoding tools")
        self.split_emb = {sp: self.encoder.encode(qs.texts, desc=f"encoding {sp}") for sp, qs in benchmark.splits.items()}
        self.train_emb = self.encoder.encode(benchmark.train.texts, desc="encoding train") if benchmark.train is not None else None
        self.timing["encode_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.lexical_index = LexicalIndex.from_registry(self.registry)
        self.split_lex = {sp: self.lexical_index.evidence(qs.texts) for sp, qs in benchmark.splits.items()}
        self.train_lex = self.lexical_index.evidence(benchmark.train.texts) if benchmark.train is not None else None
        self.timing["lexical_s"] = time.perf_counter() - t0
        # One retriever without heads serves dense, dense+rule and risk_label_penalty; the
        # baselines rank as they are (no named-tool lift).
        self.base = RiskAwareRetriever(self.registry, encoder=self.encoder, checkpoint=None, tool_emb=self.tool_emb, mode="dense", progress=False,
                                       pin_named=False)
        self.base._lexical = self.lexical_index
        self.heads_needed = sorted({s.head_key for s in self.specs if s.trained})
        self.top_m = tuple(sorted({s.candidates for s in self.specs if s.trained and s.candidates}))
        self.ce_info: list[dict[str, Any]] = []

    # -- zero-shot ------------------------------------------------------------------------------
    def _head_key(self) -> str | None:
        """The head key (:attr:`MethodSpec.head_key`) of the checkpoint's heads."""
        if self.checkpoint is None:
            return None
        head = self.checkpoint.meta["head"]
        if head["design"] != "residual":
            return str(head["design"])
        return "residual" if head.get("lexical") else "residual:dense"

    def _check_zero_shot(self) -> None:
        """Every method asked can run without training, before any data is encoded."""
        from riskrank.evaluation.cross_encoder import FT_METHOD

        trained = [s.name for s in self.specs if s.trained]
        if trained and self.checkpoint is None:
            raise RiskrankError(f"{', '.join(trained)}: trained methods need a checkpoint or training queries")
        key = self._head_key()
        other = [s.name for s in self.specs if s.trained and s.head_key != key]
        if other:
            raise RiskrankError(f"{', '.join(other)}: the checkpoint holds {key} heads, these methods need others")
        if any(s.model == FT_METHOD for s in self.specs):
            raise RiskrankError(f"{FT_METHOD} is fine-tuned on training queries; there are none in a zero-shot run")
        if any(self._label_lam_needed(s) for s in self.specs) and self._checkpoint_label_lam() is None:
            raise RiskrankError("risk_label_penalty chooses its lambda on training queries; give training queries, a checkpoint "
                                "that holds inference.label_lam, or a fixed one (risk_label_penalty@lam=0.5)")

    @staticmethod
    def _label_lam_needed(spec: MethodSpec) -> bool:
        return spec.relevance == "dense" and spec.lam == "selected"

    def _checkpoint_label_lam(self) -> float | None:
        value = self.checkpoint.inference.get("label_lam") if self.checkpoint is not None else None
        return None if value is None else float(value)

    def _reads_checkpoint(self, spec: MethodSpec) -> bool:
        """True for a method whose scores depend on what the checkpoint learned or chose on
        its training queries: the heads, the fusion of ``hybrid``, the label-penalty lambda."""
        if self.checkpoint is None:
            return False
        inference = self.checkpoint.inference
        return spec.trained or (spec.relevance == "hybrid" and bool(inference.get("fusion"))) or self._label_lam_needed(spec)

    def _contamination(self, allow: bool) -> dict[str, Any] | None:
        """Which evaluation queries the checkpoint trained on; a refusal when its methods
        would be scored on them and ``allow`` is false."""
        if self.checkpoint is None:
            return None
        where = str(self.checkpoint.path) if self.checkpoint.path is not None else "the checkpoint"
        readers = [s.name for s in self.specs if self._reads_checkpoint(s)]
        digests = self.checkpoint.meta["training_data"].get("query_sha256")
        if digests is None:
            return {"checkpoint": where, "checked": False, "splits": {}, "methods": []}
        seen = {sp: int(sum(seen_mask(qs.texts, digests))) for sp, qs in self.bench.splits.items()}
        total, n = sum(seen.values()), sum(len(qs) for qs in self.bench.splits.values())
        if total and readers and not allow:
            parts = ", ".join(f"{k} {v}" for k, v in seen.items() if v)
            raise RiskrankError(f"{where} trained on {total} of the {n} evaluation queries ({parts}); refusing to score its "
                                f"methods ({', '.join(readers)}) on them (--allow-contaminated runs them, labelled contaminated)")
        return {"checkpoint": where, "checked": True, "splits": seen, "methods": readers if total else []}

    def _zero_shot_fold(self) -> _Fold:
        """What the methods read when nothing is trained: the checkpoint's heads (its graph
        when it was built for this registry, else one of semantic and permission edges), its
        fusion and label-penalty lambda; without a checkpoint, the prior fusion."""
        n = len(self.registry)
        retrievers: dict[str, RiskAwareRetriever] = {}
        choice: dict[str, Any] = {"zero_shot": True}
        fusion: Fusion = PRIOR_FUSION
        if self.checkpoint is not None:
            r = RiskAwareRetriever(self.registry, encoder=self.encoder, checkpoint=self.checkpoint, tool_emb=self.tool_emb,
                                   progress=False)
            r._lexical = self.lexical_index
            key = self._head_key()
            assert key is not None
            retrievers[key] = r
            fusion = r.head_fusion or PRIOR_FUSION
            choice.update({"checkpoint": str(self.checkpoint.path) if self.checkpoint.path else None,
                           key: {"lam": r.lam, "alpha": r.alpha, "normalisation": r.normalisation, "pipelines": r.pipelines,
                                 "risk_head": r.risk_quality}})
        choice["fusion"] = fusion.to_dict()
        hybrid = RiskAwareRetriever(self.registry, encoder=self.encoder, checkpoint=None, tool_emb=self.tool_emb, mode="hybrid", fusion=fusion,
                                    progress=False, pin_named=False)
        hybrid._lexical = self.lexical_index
        # A checkpoint never saw this registry's labels unless it was trained on this very
        # registry; its predicted levels are then what the _pred methods read either way.
        return _Fold(retrievers, [], np.zeros(n, dtype=np.int64), self._checkpoint_label_lam() or 0.0, choice, hybrid,
                     predicted=dict(retrievers))

    def _zero_shot_protocol(self) -> str:
        if self.checkpoint is None:
            return "zero-shot: no training queries and no checkpoint; untrained methods only (hybrid: the prior fusion)"
        data = self.checkpoint.meta["training_data"]
        same = data.get("registry_fingerprint") == self.registry.fingerprint()
        n = data.get("n_queries")
        return (f"zero-shot: heads and every validated setting from the checkpoint {self.checkpoint.path or '(in memory)'}"
                + (f", trained on {n} queries" if n is not None else "")
                + (" of this registry" if same else " of another registry"))

    # -- protocol ---------------------------------------------------------------------------
    def run(self) -> EvalRun:
        b = self.bench
        protocol = self._zero_shot_protocol() if self.zero_shot else b.protocol
        run = EvalRun(b.name, protocol, self.encoder.identity, self.seeds, [s.name for s in self.specs],
                      {sp: len(qs) for sp, qs in b.splits.items()}, notes=list(b.notes), contaminated=self.contaminated)
        c = self.contaminated
        if c is not None and not c["checked"]:
            run.notes.append(f"{c['checkpoint']} records no training-query digests (an older checkpoint): "
                             "whether it trained on these queries was not checked")
        elif c is not None and c["methods"]:
            run.notes.append(f"CONTAMINATED: {c['checkpoint']} trained on " + ", ".join(f"{v} of the {len(b.splits[k])} {k} queries"
                             for k, v in c["splits"].items() if v) + "; these methods are scored on their own training data: "
                             + ", ".join(c["methods"]))
        ck = self.checkpoint
        if ck is not None and ck.meta["training_data"].get("registry_fingerprint") == self.registry.fingerprint() \
                and any(s.rule == "predicted" for s in self.specs):
            run.notes.append("the checkpoint's risk head trained on this registry's labels: the methods with predicted "
                             "levels read in-sample levels here, not cross-fitted ones")
        t_train = t_eval = 0.0
        for seed in self.seeds:
            run.per_query[seed] = {sp: {s.name: {} for s in self.specs} for sp in b.splits}
            run.top[seed] = {sp: {} for sp in b.splits}
            run.filters[seed] = {sp: {} for sp in b.splits}
            run.subsets[seed] = {sp: {} for sp in b.splits}
            run.choices[seed] = []
            first = seed == self.seeds[0]
            specs = [s for s in self.specs if first or not s.seed_independent]
            for fold_id, train_q, train_emb, train_lex, targets in self._folds(seed):
                t0 = time.perf_counter()
                fold = self._zero_shot_fold() if self.zero_shot else self._train(seed, train_q, train_emb, train_lex)
                fold.train_q, fold.train_emb = train_q, train_emb
                t_train += time.perf_counter() - t0
                run.choices[seed].append({"fold": fold_id, "label_penalty_lam": fold.label_lam, **fold.choice})
                t0 = time.perf_counter()
                for split, idx in targets:
                    self._evaluate(run, seed, split, idx, fold, specs)
                t_eval += time.perf_counter() - t0
            if not first:
                # Seed-independent methods: the first seed's per-query results, shared.
                base = self.seeds[0]
                for sp in b.splits:
                    for s in self.specs:
                        if s.seed_independent:
                            run.per_query[seed][sp][s.name] = run.per_query[base][sp][s.name]
                            run.top[seed][sp][s.name] = run.top[base][sp][s.name]
                            if s.name in run.filters[base][sp]:
                                run.filters[seed][sp][s.name] = run.filters[base][sp][s.name]
        self.timing.update({"train_s": t_train, "evaluate_s": t_eval, "train_s_per_seed": t_train / len(self.seeds)})
        run.timing = dict(self.timing)
        if self.ce_info:
            run.notes.append("cross-encoder runs: " + "; ".join(
                f"{c['method']} {c['split']}: {c.get('n_queries')} queries, prepare {c.get('prepare_s', 0):.0f}s, rerank {c.get('rerank_s', 0):.0f}s"
                + (f", {c['finetune_steps']} fine-tuning steps" if c.get("finetune_steps") else "")
                + (" (reused from cache)" if c.get("finetune_reused") else "")
                for c in self.ce_info))
        return run

    def _folds(self, seed: int):
        """(fold id, training QuerySet, its embeddings, its lexical evidence, [(split, query positions)])."""
        b = self.bench
        if self.zero_shot:
            yield "zero-shot", None, None, None, [(sp, np.arange(len(qs))) for sp, qs in b.splits.items()]
            return
        if b.train is not None:
            yield "all", b.train, self.train_emb, self.train_lex, [(sp, np.arange(len(qs))) for sp, qs in b.splits.items()]
            return
        (split, qs), = b.splits.items()
        folds = crossfit_folds(len(qs), self.n_folds, seed)
        it = tqdm(range(self.n_folds), desc=f"seed {seed} folds", disable=not self.progress, leave=False)
        for f in it:
            tr = np.flatnonzero(folds != f)
            yield f, qs.subset(tr), self.split_emb[split][tr], self.split_lex[split].rows(tr), [(split, np.flatnonzero(folds == f))]

    def _train(self, seed: int, train_q: QuerySet, train_emb: np.ndarray, train_lex: LexicalEvidence) -> _Fold:
        """Every head this run needs, trained on one fold's training queries; every choice
        (the fusion, lambda and alpha per pipeline, beta, normalisation, the label-penalty
        lambda) is :func:`riskrank.training.choose_inference`'s, on the training queries (the
        fusion) and the validation split of :func:`riskrank.training.validation_split`."""
        gold = [np.asarray(g) for g in train_q.gold]
        retrievers, predicted, choice = {}, {}, {}
        base_cfg = TrainConfig(seed=seed, **self.train_overrides).resolved()
        fusion = None
        for key in self.heads_needed:
            design, _, evidence = key.partition(":")
            cfg = TrainConfig(design=design, seed=seed, relevance=evidence or None, candidate_pipelines=self.top_m,
                              **self.train_overrides).resolved(has_lexical=True)
            result, graph, ch = training.fit(self.tool_emb, train_emb, gold, self.registry, cfg, self.graph_config,
                                             progress=self.progress, lexical=train_lex)
            r = RiskAwareRetriever.from_training(self.registry, self.encoder, self.tool_emb, result, graph, ch)
            r._lexical = self.lexical_index
            retrievers[key] = r
            predicted[key] = RiskAwareRetriever(self.registry, encoder=self.encoder, checkpoint=r.checkpoint, graph=graph,
                                                tool_emb=self.tool_emb, progress=False,
                                                predicted_levels=training.predicted_levels_of(result, self.registry))
            predicted[key]._lexical = self.lexical_index
            fusion = fusion or result.fusion
            choice[key] = {"lam": result.lam, "residual_weight": result.validation.get("residual_weight"),
                           "best_epoch": result.validation.get("best_epoch"), "train_seconds": result.seconds,
                           "lexical_weights": result.validation.get("lexical_weights"), "risk_head": result.risk_quality, **ch}
            if result.need_head is not None:
                choice[key]["need_head"] = {k: v for k, v in result.need_head.info.items() if k != "grid"}
        if fusion is None and any(s.relevance == "hybrid" for s in self.specs):
            fusion = training.choose_inference(train_emb, gold, self.tool_emb, self.registry.risk_levels, base_cfg,
                                               choose_fusion_on=train_lex)["fusion"]
        if fusion is not None:
            choice["fusion"] = fusion.to_dict()
        hybrid = RiskAwareRetriever(self.registry, encoder=self.encoder, checkpoint=None, tool_emb=self.tool_emb, mode="hybrid", fusion=fusion,
                                    progress=False, pin_named=False)
        hybrid._lexical = self.lexical_index
        label_lam = 0.0
        if any(s.name.startswith("risk_label_penalty") and s.lam == "selected" for s in self.specs):
            label_lam = training.label_penalty_lambda(self.tool_emb, train_emb, gold, self.registry.risk_levels, base_cfg)
        tr, _ = training.validation_split(len(gold), base_cfg)  # the part the graphs are built from
        part = [gold[i] for i in tr]
        return _Fold(retrievers, part, tool_query_counts(gold, len(self.registry)), label_lam, choice, hybrid, predicted=predicted)

    # -- methods ------------------------------------------------------------------------------
    def _graph(self, fold: _Fold, spec: MethodSpec, retriever: RiskAwareRetriever) -> ToolGraph | None:
        if tuple(spec.edge_types) == EDGE_TYPES:
            return None  # the retriever's own full graph
        key = tuple(spec.edge_types)
        if key not in fold.graphs:
            cfg = GraphConfig(**{**self.graph_config.__dict__, "edge_types": key})
            fold.graphs[key] = ToolGraph.build(self.tool_emb, fold.train_part_gold, self.registry.risk_levels, self.registry.permissions, cfg)
        return fold.graphs[key]

    def _rank(self, spec: MethodSpec, split: str, idx: np.ndarray, q: np.ndarray, cos: np.ndarray, fold: _Fold, cache: dict) -> tuple[np.ndarray, list | None]:
        lex = cache.get("lex")
        if lex is None:
            lex = cache["lex"] = self.split_lex[split].rows(idx)
        if spec.relevance == "bm25":
            return rank(lex.bm25), None
        if spec.relevance == "hybrid":
            return fold.hybrid.rank_batch(q, mode="hybrid", lexical=lex).order, None
        if spec.relevance in ("mmr", "cross-encoder"):  # baselines over the dense top-M, outside the engine
            ck = ("cand", spec.candidates)
            if ck not in cache:
                cache[ck] = top_m(cos, spec.candidates)
            if spec.relevance == "mmr":
                return mmr_rerank(q, self.tool_emb, cache[ck], spec.mmr_lambda), None
            return self._cross_encoder(spec, split, idx, cache[ck], fold), None
        mode = Stages(heads=spec.trained, graph=spec.graph, rule=spec.rule is not None, context=spec.context).name
        if spec.relevance == "dense":
            r, graph, alpha = self.base, None, None
            lam = fold.label_lam if spec.lam == "selected" else float(spec.lam)
        else:
            key = spec.head_key
            crossfit = spec.rule == "predicted" and spec.levels == "crossfit"
            r = fold.predicted[key] if crossfit else fold.retrievers[key]
            # None: the pipeline's own validated lambda and alpha (the retriever resolves them).
            lam = None if spec.lam == "selected" else float(spec.lam)
            alpha = None if spec.alpha == "selected" else float(spec.alpha)
            graph = self._graph(fold, spec, r) if spec.graph else None
        # The paper's fill (deferred tools top the list up to K): the reproduction measures it.
        batch = r.rank_batch(q, mode=mode, lam=lam, alpha=alpha, candidates=spec.candidates, risk_source=spec.rule or "labels",
                             graph=graph, fill=PAPER_FILL, lexical=lex)
        if batch.context is not None:
            cache[("need", spec.name)] = batch.context.need
        return batch.order, batch.filters

    def _cross_encoder(self, spec: MethodSpec, split: str, idx: np.ndarray, cand: np.ndarray, fold: _Fold) -> np.ndarray:
        """A cross-encoder rescoring the top-20 of the dense top-100 (cross_encoder.DEFAULT_DEPTH; the rest keep dense order); ``ce-minilm-ft`` is fine-tuned on this
        fold's training queries (once, first seed; cached on disk by the split's fingerprint)."""
        from riskrank.evaluation.cross_encoder import (
            FT_METHOD,
            cross_encoder_rank,
            hard_negatives_from_scores,
        )

        texts = [self.bench.splits[split].texts[i] for i in idx]
        kw: dict[str, Any] = {}
        if spec.model == FT_METHOD:
            assert fold.train_q is not None and fold.train_emb is not None
            hn = hard_negatives_from_scores(fold.train_emb @ self.tool_emb.T, fold.train_q.gold)
            kw = {"train_texts": fold.train_q.texts, "train_gold": fold.train_q.gold, "hard_negatives": hn, "seed": self.seeds[0]}
        info: dict[str, Any] = {}
        order = cross_encoder_rank(spec.model, texts, self.registry.texts(), cand, progress=self.progress, info=info, **kw)
        self.ce_info.append({"method": spec.name, "split": split, **{k: v for k, v in info.items() if k != "finetune"},
                             "finetune_steps": (info.get("finetune") or {}).get("steps")})
        return order

    def _evaluate(self, run: EvalRun, seed: int, split: str, idx: np.ndarray, fold: _Fold, specs: list[MethodSpec]) -> None:
        qs = self.bench.splits[split]
        q = self.split_emb[split][idx]
        gold = [qs.gold[i] for i in idx]
        cos = q @ self.tool_emb.T
        risk = self.registry.risk_levels
        n = len(qs)
        cache: dict = {}
        subsets = query_subsets(gold, risk, fold.train_counts)
        for name, mask in subsets.items():
            full = run.subsets[seed][split].setdefault(name, np.zeros(n, dtype=bool))
            full[idx] = mask
        for spec in specs:
            t0 = time.perf_counter()
            order, results = self._rank(spec, split, idx, q, cos, fold, cache)
            key = "cross_encoder_s" if spec.relevance == "cross-encoder" else "rank_s"
            self.timing[key] = self.timing.get(key, 0.0) + time.perf_counter() - t0
            metrics = evaluate(order, gold, risk)
            store = run.per_query[seed][split][spec.name]
            for m in METRICS:
                store.setdefault(m, np.full(n, np.nan))[idx] = metrics[m]
            if ("need", spec.name) in cache:  # the need head's estimate, per query (context methods)
                store.setdefault("need", np.full(n, np.nan))[idx] = cache[("need", spec.name)]
            top = run.top[seed][split].setdefault(spec.name, np.full((n, KEEP_TOP), -1, dtype=np.int32))
            top[idx, : min(KEEP_TOP, order.shape[1])] = order[:, :KEEP_TOP]
            if results is not None:
                flist = run.filters[seed][split].setdefault(spec.name, [None] * n)
                for j, fr in zip(idx, results, strict=True):
                    flist[int(j)] = {
                        "deferred": {str(int(t)): list(r) for t, r in fr.deferred.items()},
                        "fallback": [int(t) for t in fr.fallback], "unlabelled": [int(t) for t in fr.unlabelled],
                    }


def run_evaluation(benchmark: Benchmark, methods: Sequence[str] | str, **kwargs: Any) -> EvalRun:
    """Evaluate ``methods`` on ``benchmark`` (see :class:`Runner` for the options)."""
    return Runner(benchmark, methods, **kwargs).run()
