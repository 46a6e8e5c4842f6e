"""Cross-fitting never lets a model see the queries it scores: for every seed and fold, the
queries a fold trains on and the ones it validates on (every choice: lambda, alpha, beta,
normalisation, and the fusion) are disjoint from the ones it scores, the scored sets partition
the split, and validation lies inside the training side."""

from __future__ import annotations

import numpy as np
import pytest

import riskrank.evaluation.runner as runner_mod
import riskrank.training as training
import riskrank.training.fitting as fitting
from riskrank.datasets import Benchmark


@pytest.fixture
def crossfit_demo(demo):
    qs = demo.splits["test"]
    return Benchmark("demo", demo.registry, {"test": qs}, None, "3-fold cross-fitting over the demo tasks")


def test_each_fold_trains_and_validates_only_on_other_queries(crossfit_demo, encoder, monkeypatch, torch_single_thread):
    split_emb = encoder.encode(crossfit_demo.splits["test"].texts)
    row_of = {row.tobytes(): i for i, row in enumerate(np.asarray(split_emb, dtype=np.float32))}
    assert len(row_of) == len(split_emb), "the demo tasks embed to distinct rows"

    def indices(emb: np.ndarray) -> set[int]:
        return {row_of[np.asarray(r, dtype=np.float32).tobytes()] for r in emb}

    trained, validated, fused, scored = [], [], [], []
    real_fit, real_choose, real_eval = training.fit, training.choose_inference, runner_mod.Runner._evaluate

    def fit(tool_emb, query_emb, gold, registry, cfg, *a, **kw):
        trained.append(indices(query_emb))
        return real_fit(tool_emb, query_emb, gold, registry, cfg, *a, **kw)

    def choose(val_query_emb, *a, **kw):
        # the fusion step (all training queries: it has no trained parameter) or the rest
        (validated if kw.get("model") is not None else fused).append(indices(val_query_emb))
        return real_choose(val_query_emb, *a, **kw)

    def evaluate(self, run, seed, split, idx, fold, specs):
        scored.append((seed, set(np.asarray(idx).tolist())))
        return real_eval(self, run, seed, split, idx, fold, specs)

    monkeypatch.setattr(training, "fit", fit)
    monkeypatch.setattr(training, "choose_inference", choose)
    monkeypatch.setattr(fitting, "choose_inference", choose)  # where fit() calls it
    monkeypatch.setattr(runner_mod.Runner, "_evaluate", evaluate)
    run = runner_mod.run_evaluation(crossfit_demo, ["dense", "core"], seeds=[42, 7], encoder=encoder, n_folds=3,
                                    train_overrides={"epochs": 1}, progress=False)
    n = len(crossfit_demo.splits["test"])
    assert len(trained) == len(validated) == len(fused) == len(scored) == 6  # 2 seeds x 3 folds, one fit each
    for (seed, test_idx), train_idx, val_idx, fuse_idx in zip(scored, trained, validated, fused, strict=True):
        assert not train_idx & test_idx, f"seed {seed}: a fold trained on a query it scores"
        assert not val_idx & test_idx, f"seed {seed}: a fold chose a setting on a query it scores"
        assert val_idx <= train_idx and val_idx, "validation is a slice of the training side"
        assert fuse_idx == train_idx, "the fusion is chosen on the training side, all of it"
        assert train_idx | test_idx == set(range(n))
    for seed in (42, 7):
        parts = [idx for s, idx in scored if s == seed]
        assert sorted(i for p in parts for i in p) == list(range(n)), "each query scored exactly once per seed"
    assert {frozenset(idx) for s, idx in scored if s == 42} != {frozenset(idx) for s, idx in scored if s == 7}, \
        "the folds are seeded"
    assert run.results_json()["splits"]["test"]["n_queries"] == n
