"""Cross-encoder baselines on a tiny, randomly initialised BERT built here (no hub, seconds):
loading by folder, reranking (a permutation of each row, best first, ties in candidate order,
deterministic), the ce-minilm-ft fine-tuning loop with its cache sidecar, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from riskrank.errors import RiskrankError
from riskrank.evaluation import cross_encoder as ce

TOOLS = [
    "delete file: remove a file from the disk",
    "send email: send an email message to a recipient",
    "weather lookup: current weather for a city",
    "currency converter: convert an amount between currencies",
    "calendar add: add an event to the calendar",
    "translate text: translate text into another language",
    "stock price: latest price of a stock ticker",
    "run shell command: execute a bash command",
]
QUERIES = [
    "remove the old backup file",
    "email my boss the report",
    "what is the weather in Paris",
    "convert 20 dollars to euros",
    "put the meeting in my calendar",
    "translate hello into French",
]
GOLD = [np.array([0]), np.array([1]), np.array([2]), np.array([3]), np.array([4]), np.array([5, 1])]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with a one-logit head and MiniLM's tokenizer, saved as a plain
    transformers folder (what any fine-tuned cross-encoder checkpoint looks like)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny_ce")
    tok = AutoTokenizer.from_pretrained(str(ce._bundled_minilm()))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, num_labels=1)
    with ce._quiet_transformers():
        BertForSequenceClassification(cfg).save_pretrained(str(folder))
        tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    return ce.load_cross_encoder(tiny_model_dir)


@pytest.fixture(autouse=True)
def _one_thread(torch_single_thread):
    """Tiny models: thread hand-offs cost more than the arithmetic (see conftest)."""


def _candidates(seed: int = 0, q: int = len(QUERIES), m: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(len(TOOLS))[:m] for _ in range(q)])


def test_load_and_rerank_is_a_deterministic_permutation(tiny_model):
    cand = _candidates()
    out = ce.rerank(tiny_model, QUERIES, TOOLS, cand, batch_size=4, progress=False)
    assert out.shape == cand.shape and out.dtype == cand.dtype
    for row_in, row_out in zip(cand, out, strict=True):
        assert sorted(row_in) == sorted(row_out)
    np.testing.assert_array_equal(out, ce.rerank(tiny_model, QUERIES, TOOLS, cand, batch_size=3, progress=False))
    # Best first: the scores along each reranked row do not increase.
    pairs = [(QUERIES[i], TOOLS[t]) for i in range(len(QUERIES)) for t in out[i]]
    s = ce.score_pairs(tiny_model, pairs, progress=False).reshape(out.shape)
    assert (np.diff(s, axis=1) <= 1e-6).all()


def test_rerank_depth_keeps_the_tail(tiny_model):
    cand = _candidates(1)
    out = ce.rerank(tiny_model, QUERIES, TOOLS, cand, depth=3, progress=False)
    np.testing.assert_array_equal(out[:, 3:], cand[:, 3:])
    for row_in, row_out in zip(cand[:, :3], out[:, :3], strict=True):
        assert sorted(row_in) == sorted(row_out)


class _TableModel:
    """A stand-in with CrossEncoder.predict's shape: the score of a pair is looked up by tool."""

    def __init__(self, by_tool: dict[str, float]):
        self.by_tool = by_tool
        self.calls = 0

    def predict(self, pairs, **_):
        self.calls += len(pairs)
        return np.array([self.by_tool[t] for _, t in pairs], dtype=np.float32)


def test_rerank_sorts_by_score_and_breaks_ties_by_candidate_order():
    model = _TableModel({TOOLS[0]: 1.0, TOOLS[1]: 3.0, TOOLS[2]: 1.0, TOOLS[3]: 2.0, TOOLS[4]: 1.0})
    cand = np.array([[4, 0, 1, 2, 3], [2, 3, 4, 1, 0]])
    out = ce.rerank(model, ["q a", "q b"], TOOLS, cand, progress=False)
    np.testing.assert_array_equal(out, [[1, 3, 4, 0, 2], [1, 3, 2, 4, 0]])
    # A repeated query's pairs are scored once.
    model.calls = 0
    ce.rerank(model, ["same", "same"], TOOLS, cand, progress=False)
    assert model.calls == 5


def test_rerank_rejects_bad_inputs(tiny_model):
    with pytest.raises(RiskrankError, match="query texts"):
        ce.rerank(tiny_model, QUERIES[:2], TOOLS, _candidates(), progress=False)
    with pytest.raises(RiskrankError, match="indices"):
        ce.rerank(tiny_model, QUERIES[:1], TOOLS, np.array([[0, 99]]), progress=False)
    with pytest.raises(RiskrankError, match=r"\[Q, M\]"):
        ce.rerank(tiny_model, QUERIES[:1], TOOLS, np.array([0, 1]), progress=False)


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(RiskrankError, match="does not exist"):
        ce.load_cross_encoder(tmp_path / "nope")
    with pytest.raises(RiskrankError, match="does not exist"):
        ce.load_cross_encoder("./no/such/folder")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RiskrankError, match=r"no config\.json"):
        ce.load_cross_encoder(tmp_path / "empty")
    # A hub name with the hub offline (conftest sets HF_HUB_OFFLINE=1): an error, not a hang.
    with pytest.raises(RiskrankError, match="cannot load cross-encoder"):
        ce.load_cross_encoder("no-such-org/no-such-cross-encoder")


def test_hard_negatives_exclude_gold_and_pad():
    scores = np.array([[0.9, 0.8, 0.7, 0.1], [0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    hn = ce.hard_negatives_from_scores(scores, [np.array([0]), np.array([3, 2, 1, 0])], p=2)
    np.testing.assert_array_equal(hn, [[1, 2], [-1, -1]])


def _finetune(out_dir: Path, **kw) -> Path:
    scores = np.random.default_rng(0).random((len(QUERIES), len(TOOLS)))
    hn = ce.hard_negatives_from_scores(scores, GOLD, p=3)
    args = dict(hard_negatives=hn, out_dir=out_dir, max_steps=3, budget_s=60, max_length=32, n_layers=1,
                batch_size=4, progress=False)
    return ce.finetune_minilm_cross_encoder(TOOLS, QUERIES, GOLD, **{**args, **kw})


def test_finetune_saves_a_loadable_model_with_a_sidecar_and_reuses_it(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(ce, "_bundled_minilm", lambda: tiny_model_dir)  # tiny base, same code path
    out = _finetune(tmp_path / "ft")
    meta = json.loads((out / ce.SIDECAR).read_text())
    assert meta["steps"] == 3 and meta["stopped_by"] == "max_steps" and meta["pairs_seen"] == 12
    assert meta["config"]["seed"] == 42 and meta["config"]["budget_s"] == 60 and meta["seconds"] >= meta["train_seconds"] > 0
    assert not list(tmp_path.glob(".ft.*"))  # the temporary folder was renamed into place
    model = ce.load_cross_encoder(out)
    assert model.max_seq_length == 32 and model.config.num_hidden_layers == 1
    order = ce.rerank(model, QUERIES, TOOLS, _candidates(), progress=False)
    assert order.shape == (len(QUERIES), 6)

    weights = out / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert _finetune(tmp_path / "ft") == out and weights.stat().st_mtime_ns == stamp  # reused
    _finetune(tmp_path / "ft", seed=7)  # other settings: retrained in place
    assert json.loads((out / ce.SIDECAR).read_text())["config"]["seed"] == 7
    # Same seed, same data: the same weights (the run is seeded end to end).
    again = _finetune(tmp_path / "ft2", seed=7)
    a = ce.load_cross_encoder(again).predict([("q", "t")], activation_fn=None)
    b = ce.load_cross_encoder(out).predict([("q", "t")], activation_fn=None)
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_finetune_stops_at_the_time_budget(tmp_path, tiny_model_dir, monkeypatch):
    """The budget reads the module's clock: a fake one that advances 0.1 s per reading makes
    the stop exact (no wall-time bound, so a slow machine cannot fail it)."""
    import types

    monkeypatch.setattr(ce, "_bundled_minilm", lambda: tiny_model_dir)
    ticks = iter(range(10_000))
    fake = types.SimpleNamespace(perf_counter=lambda: next(ticks) * 0.1, strftime=ce.time.strftime, gmtime=ce.time.gmtime)
    monkeypatch.setattr(ce, "time", fake)
    meta = json.loads((_finetune(tmp_path / "b", max_steps=None, budget_s=0.5) / ce.SIDECAR).read_text())
    # clock readings: t_start, t0, then one per loop test: steps at 0.1 .. 0.4 s of budget, stop at 0.5
    assert meta["stopped_by"] == "budget" and meta["steps"] == 4


def test_finetune_rejects_bad_training_data(tmp_path):
    with pytest.raises(RiskrankError, match="gold lists"):
        ce.finetune_minilm_cross_encoder(TOOLS, QUERIES, GOLD[:2], hard_negatives=np.zeros((6, 2), int), out_dir=tmp_path)
    with pytest.raises(RiskrankError, match="hard_negatives"):
        ce.finetune_minilm_cross_encoder(TOOLS, QUERIES, GOLD, hard_negatives=np.zeros((2, 2), int), out_dir=tmp_path)


def test_cross_encoder_rank_fine_tunes_once_per_training_split(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(ce, "_bundled_minilm", lambda: tiny_model_dir)
    hn = ce.hard_negatives_from_scores(np.random.default_rng(1).random((4, len(TOOLS))), GOLD[:4], p=3)
    kw = dict(train_texts=QUERIES[:4], train_gold=GOLD[:4], hard_negatives=hn, cache_dir=tmp_path, max_steps=2,
              max_length=32, n_layers=1, depth=4, progress=False)
    cand = _candidates(2, q=2)
    info: dict = {}
    out = ce.cross_encoder_rank("ce-minilm-ft", QUERIES[4:], TOOLS, cand, info=info, **kw)
    np.testing.assert_array_equal(out[:, 4:], cand[:, 4:])
    assert info["finetune"]["steps"] == 2 and info["depth"] == 4 and not info["finetune_reused"]
    folders = list(tmp_path.glob("ce-minilm-ft-*"))
    assert len(folders) == 1 and Path(info["model"]) == folders[0]
    np.testing.assert_array_equal(ce.cross_encoder_rank("ce-minilm-ft", QUERIES[4:], TOOLS, cand, info=info, **kw), out)
    assert info["finetune_reused"]
    assert len(list(tmp_path.glob("ce-minilm-ft-*"))) == 1  # same split: the cached model
    ce.cross_encoder_rank("ce-minilm-ft", QUERIES[4:], TOOLS, cand, **{**kw, "train_texts": QUERIES[1:5], "train_gold": GOLD[1:5]})
    assert len(list(tmp_path.glob("ce-minilm-ft-*"))) == 2  # another fold: another model
    with pytest.raises(RiskrankError, match="training texts"):
        ce.cross_encoder_rank("ce-minilm-ft", QUERIES, TOOLS, _candidates(), progress=False)


def test_cross_encoder_rank_by_folder(tiny_model_dir, tiny_model):
    cand = _candidates(3)
    out = ce.cross_encoder_rank(str(tiny_model_dir), QUERIES, TOOLS, cand, depth=None, progress=False)
    np.testing.assert_array_equal(out, ce.rerank(tiny_model, QUERIES, TOOLS, cand, progress=False))


@pytest.mark.slow
def test_finetune_from_the_bundled_minilm(tmp_path):
    """The real base: MiniLM's weights under a fresh head (about 10 s to load and save)."""
    out = _finetune(tmp_path / "minilm", max_steps=1, n_layers=1)
    model = ce.load_cross_encoder(out)
    assert model.config.hidden_size == 384 and model.num_labels == 1
