"""Evaluation on any registry: a user's tools, their queries with gold tools, and (when they
have them) training queries and audited risk labels, through the same runner and results
contract as the benchmarks.

- With training queries, the trained methods train on them exactly as on a benchmark's
  training split (:class:`~riskrank.evaluation.runner.Runner`: a validation slice of them
  chooses every setting, the heads train once per seed); they may not overlap the queries.
- Without them, the trained methods are evaluated zero-shot from a checkpoint, by default
  the shipped base model (:func:`riskrank.base.resolve_checkpoint`, as every surface
  resolves it); with ``none``, only the untrained methods run (BM25, dense, hybrid, their
  rule variants) and the result says which were left out.
- Exposure metrics need risk levels. Audited levels come from the registry or a labels file
  (the file wins where both give one); every other tool takes a predicted level, from the
  checkpoint's risk head when it has learned, else from the keyword annotator, and the
  result says how many levels are predicted and from where: such exposure numbers describe
  what riskrank believes, not an audit. The same levels serve the rule filter and the
  metrics, as they would in deployment; training queries on an unaudited registry also train
  the risk head on them, which then adds nothing to the annotator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.base import resolve_checkpoint
from riskrank.contamination import overlap
from riskrank.datasets.base import Benchmark
from riskrank.datasets.user import QueryFile, read_labels, read_queries
from riskrank.encoder import Encoder
from riskrank.errors import DataError, RiskrankError
from riskrank.evaluation.methods import parse_methods
from riskrank.evaluation.runner import DEFAULT_SEEDS, EvalRun, Runner
from riskrank.registry import ToolRegistry

#: The methods a registry evaluation runs when none are named: the baselines, then (with a
#: checkpoint or training queries) the trained pipelines.
DEFAULT_METHODS = ("bm25", "dense", "hybrid", "dense+rule", "core", "core+graph", "core+graph+rule")
#: Where a predicted level comes from (``levels.source`` in the results).
LEVEL_SOURCES = {"head": "the checkpoint's risk head, with keyword evidence and MCP hints that only raise a level",
                 "keyword": "riskrank's keyword annotator"}


@dataclass
class RegistryEvaluation:
    """A finished registry evaluation: the runner's :class:`EvalRun` and what the results
    contract gains for a user registry (``levels``, ``queries``, ``skipped_methods``)."""

    run: EvalRun
    levels: dict[str, Any]
    queries: dict[str, Any]
    skipped_methods: list[str] = field(default_factory=list)

    def results_json(self) -> dict[str, Any]:
        res = self.run.results_json()
        res["levels"] = self.levels
        res["queries"] = self.queries
        if self.skipped_methods:
            res["skipped_methods"] = self.skipped_methods
        return res


def _apply_labels(registry: ToolRegistry, labels: str | Path | None, notes: list[str]) -> ToolRegistry:
    if labels is None:
        return registry
    lab = read_labels(labels, registry)
    if lab.note():
        notes.append(lab.note())  # type: ignore[arg-type]
    decided = {k: v for k, v in lab.levels.items() if v is not None}
    return registry.with_risk_levels(decided) if decided else registry


def _predicted(registry: ToolRegistry, encoder: Encoder, checkpoint: Any) -> tuple[np.ndarray, str]:
    """Predicted levels of every tool and their source: the checkpoint's risk head when it
    has learned (its held-out check), else the keyword annotator."""
    from riskrank.risk import keyword_levels

    if checkpoint is not None:
        from riskrank.pipeline import RiskAwareRetriever

        r = RiskAwareRetriever(registry, encoder=encoder, checkpoint=checkpoint, progress=False)
        if r.scorer is not None and r.risk_head_learned:  # the head's levels with the keyword evidence and MCP hints
            return r.tool_levels.levels, "head"
    return keyword_levels(registry), "keyword"


def evaluate_registry(
    registry: str | Path, queries: str | Path, *, train_queries: str | Path | None = None, labels: str | Path | None = None,
    checkpoint: str | Path | None = None, methods: Sequence[str] | str | None = None, seeds: Sequence[int] = DEFAULT_SEEDS,
    encoder: Encoder | str | None = None, name: str | None = None, allow_contaminated: bool = False,
    train_overrides: dict[str, Any] | None = None, progress: bool = True,
) -> RegistryEvaluation:
    """Evaluate ``methods`` on a registry file and a queries file (module docstring). Bad
    input is one :class:`~riskrank.errors.RiskrankError` before anything is encoded."""
    explicit = methods is not None
    specs = parse_methods(methods if explicit else list(DEFAULT_METHODS))  # type: ignore[arg-type]
    if train_queries is not None and checkpoint is not None:
        raise RiskrankError("give --train-queries (train here) or --checkpoint (zero-shot), not both")
    reg = ToolRegistry.load(registry)
    notes: list[str] = []
    reg = _apply_labels(reg, labels, notes)
    test = read_queries(queries, reg, what="queries", name="test")
    files: list[QueryFile] = [test]
    train = None
    if train_queries is not None:
        train = read_queries(train_queries, reg, what="train queries", name="train")
        files.append(train)
        both = overlap(test.texts, train.texts)
        if both:
            raise DataError(f"{both} of the {len(test.texts)} queries in {queries} are also in the training queries "
                            f"{train_queries} (ignoring whitespace and case); evaluate on queries the heads never saw")
    notes.extend(n for n in (f.note() for f in files) if n)
    enc = encoder if encoder is not None and not isinstance(encoder, str) else Encoder(encoder, progress=progress)
    ck = None
    if train is None:
        ck, ck_note = resolve_checkpoint(checkpoint, enc.identity)
        if ck_note:
            notes.append(ck_note)
    skipped: list[str] = []
    if train is None and ck is None:
        skipped = [s.name for s in specs if s.trained]
        specs = [s for s in specs if not s.trained]
        if skipped and explicit and not specs:
            raise RiskrankError(f"{', '.join(skipped)}: trained methods need a checkpoint (--checkpoint) or training queries "
                                "(--train-queries)")
        if skipped:
            notes.append(f"not run: {', '.join(skipped)} (trained methods need --checkpoint or --train-queries)")
    loaded = None
    if ck is not None:
        from riskrank.checkpoint import load_checkpoint

        loaded = load_checkpoint(ck, encoder_identity=enc.identity)
    n_audited = len(reg) - reg.n_unlabelled
    source = None
    if reg.n_unlabelled:
        predicted, source = _predicted(reg, enc, loaded)
        missing = reg.risk_levels == 0
        reg = reg.with_risk_levels({t.name: int(predicted[i]) for i, t in enumerate(reg) if missing[i]})
        notes.insert(0, (f"PREDICTED risk levels: {len(reg) - n_audited} of {len(reg)} tools have no audited level and take "
                         f"the level of {LEVEL_SOURCES[source]}; the exposure metrics (rvr@5, srr@5, safe_rvr@5, needrisk_hit@5, sndcg@5) "
                         "and the rule filter read them" + ("" if n_audited else " (no audit: give --labels for audited numbers)")))
    levels = {"audited": n_audited, "predicted": len(reg) - n_audited, "source": "audited" if source is None else
              ("mixed" if n_audited else "predicted"), "predicted_by": source}
    bench_name = name or Path(registry).stem
    if train is not None:
        protocol = (f"trained on the {len(train.texts)} training queries of {train_queries} (a validation slice of them "
                    "chooses every setting), evaluated on the queries")
    else:
        protocol = "zero-shot"
    bench = Benchmark(bench_name, reg, {"test": test.queries}, train.queries if train is not None else None, protocol, notes)
    runner = Runner(bench, [s.name for s in specs], seeds=seeds, encoder=enc, train_overrides=train_overrides,
                    progress=progress, checkpoint=loaded, zero_shot=train is None, allow_contaminated=allow_contaminated)
    run = runner.run()
    return RegistryEvaluation(run, levels, {"test": test.summary(), **({"train": train.summary()} if train else {})}, skipped)
