"""Fine-tuning the encoder (riskrank.training.finetune): the rows it mines, the batches it
forms, and one real (tiny) fine-tune whose folder the Encoder loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from riskrank.errors import RiskrankError
from riskrank.training.finetune import (
    DUPLICATE_COSINE,
    MAX_GOLD_PER_TASK,
    FinetuneConfig,
    Triplets,
    batches_without_duplicates,
    finetune_encoder,
    finetune_info,
    mine_triplets,
)


def test_mined_negatives_are_never_gold_nor_a_copy_of_it(encoder, demo, demo_tool_emb):
    qs = demo.train
    rows = mine_triplets(demo.registry, qs.texts, qs.gold, encoder, tool_emb=demo_tool_emb)
    texts = demo.registry.texts()
    index = {t: i for i, t in enumerate(texts)}
    assert len(rows) == sum(min(len(g), MAX_GOLD_PER_TASK) for g in qs.gold if len(g))
    r = 0
    for task, g in zip(qs.texts, qs.gold, strict=True):
        for _ in range(min(len(g), MAX_GOLD_PER_TASK)):
            assert rows.tasks[r] == task
            pos, neg = index[rows.positives[r]], index[rows.negatives[r]]
            assert pos in set(g.tolist()) and neg not in set(g.tolist())
            assert (demo_tool_emb[neg] @ demo_tool_emb[np.asarray(g)].T).max() <= DUPLICATE_COSINE
            r += 1


def test_batches_hold_no_text_twice_and_every_row_once():
    rng = np.random.default_rng(0)
    # few distinct tools, so collisions are common
    rows = Triplets([f"task {i % 40}" for i in range(200)], [f"tool {rng.integers(12)}" for _ in range(200)],
                    [f"other {rng.integers(12)}" for _ in range(200)])
    batches = batches_without_duplicates(rows, 8, seed=1)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(200))
    for b in batches:
        assert 1 <= len(b) <= 8
        texts = [t for i in b for t in (rows.tasks[i], rows.positives[i], rows.negatives[i])]
        assert len(texts) == len(set(texts))
    assert batches == batches_without_duplicates(rows, 8, seed=1)


def test_sample_is_seeded_and_keeps_order():
    rows = Triplets([f"q{i}" for i in range(50)], [f"p{i}" for i in range(50)], [f"n{i}" for i in range(50)])
    a, b = rows.sample(10, 3), rows.sample(10, 3)
    assert a.tasks == b.tasks and len(a) == 10
    assert [int(t[1:]) for t in a.tasks] == sorted(int(t[1:]) for t in a.tasks)
    assert [t[1:] for t in a.tasks] == [t[1:] for t in a.positives] == [t[1:] for t in a.negatives]
    assert rows.sample(None, 0) is rows


def test_a_real_fine_tune_loads_as_an_encoder_and_replaces_its_folder(tmp_path, encoder, demo, demo_tool_emb,
                                                                      torch_single_thread):
    from riskrank.encoder import Encoder

    qs = demo.train
    rows = mine_triplets(demo.registry, qs.texts[:12], qs.gold[:12], encoder, tool_emb=demo_tool_emb)
    out = tmp_path / "tuned"
    cfg = FinetuneConfig(batch_size=4, max_seq_length=32, lr=1e-4, max_rows=8)
    finetune_encoder(rows, out, config=cfg, progress=False)
    info = finetune_info(out)
    assert info["rows"] == 8 and info["steps"] >= 2 and info["config"]["max_rows"] == 8
    tuned = Encoder(str(out), cache_dir=tmp_path / "cache", progress=False)
    assert tuned.identity != encoder.identity
    e_tuned = tuned.encode(qs.texts[:3])
    e_base = encoder.encode(qs.texts[:3])
    assert e_tuned.shape == e_base.shape
    assert np.allclose(np.linalg.norm(e_tuned, axis=1), 1.0, atol=1e-4)
    assert not np.allclose(e_tuned, e_base, atol=1e-4)  # the weights moved
    # a second run replaces the folder only once it is complete, and leaves nothing beside it
    finetune_encoder(rows, out, config=FinetuneConfig(batch_size=4, max_seq_length=32, max_rows=4), progress=False)
    assert json.loads((out / "riskrank_finetune.json").read_text())["rows"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "tuned"]


def test_bad_input_is_one_clear_error(tmp_path, encoder, demo):
    with pytest.raises(RiskrankError, match="at least one"):
        finetune_encoder(Triplets([], [], []), tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()
    from riskrank.training.base_model import finetune_triplets, load_sources

    with pytest.raises(RiskrankError, match="query cap"):
        finetune_triplets(load_sources(["demo"]), None, encoder)
