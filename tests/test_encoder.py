"""The frozen encoder and its on-disk cache: the bundled model, unit-norm float32 output, a
cache hit that never loads the model, and two processes sharing one cache."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import sqlite3

import numpy as np
import pytest

from riskrank.encoder import ArrayEncoder, EmbeddingCache, Encoder, resolve_model, text_key
from riskrank.errors import RiskrankError

TEXTS = ["delete a file from the disk", "what is the weather in Lisbon", "send an email to Alice"]


def test_bundled_model(encoder):
    # Straight through the model (not the cache), so the load itself is tested on every run.
    assert encoder.model is not None and encoder.dim == 384
    E = encoder._encode_model(TEXTS, "test")
    assert E.shape == (3, 384) and E.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(encoder.encode(TEXTS), E, atol=1e-5)
    assert "all-MiniLM-L6-v2" in encoder.identity
    # related texts are closer than unrelated ones
    q = encoder.encode_query("remove the file")
    assert q.shape == (384,) and float(q @ E[0]) > float(q @ E[1])


def test_aliases_resolve_to_the_bundled_model():
    a, fa = resolve_model(None)
    b, fb = resolve_model("minilm")
    assert a == b == "sentence-transformers/all-MiniLM-L6-v2" and fa == fb and (fa / "config.json").exists()


def test_missing_or_bad_model_folder(tmp_path):
    with pytest.raises(RiskrankError, match="does not exist"):
        resolve_model("./no/such/model")
    with pytest.raises(RiskrankError, match="not a sentence-transformers model folder"):
        resolve_model(str(tmp_path))


def test_cache_hit_does_not_load_the_model(encoder, tmp_path):
    first = Encoder(cache_dir=tmp_path, progress=False)
    # The session encoder stands in for the model (it loads at most once per session).
    first._encode_model = lambda texts, desc: encoder.encode(texts)
    first._dim = 384
    first.cache.put_meta(first.identity, {"dim": 384, "name": first.display_name})
    E1 = first.encode(TEXTS)
    assert first._model is None

    second = Encoder(cache_dir=tmp_path, progress=False)
    E2 = second.encode([TEXTS[2], TEXTS[0], TEXTS[2]])
    assert second._model is None, "a cache hit must not load the model"
    assert second.dim == 384 and second._model is None  # the dimension comes from the cache
    np.testing.assert_array_equal(E2, E1[[2, 0, 2]])
    assert second.encode([]).shape == (0, 384) and second._model is None


def test_cache_is_keyed_by_model_identity(tmp_path):
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    k = text_key("hello")
    cache.put_many("model-a", [(k, np.ones(4, dtype=np.float32))])
    assert set(cache.get_many("model-a", [k])) == {k}
    assert cache.get_many("model-b", [k]) == {}


def test_empty_text_is_an_error(encoder):
    with pytest.raises(RiskrankError, match=r"empty text \(item 1\)"):
        encoder.encode(["ok", "   "])
    with pytest.raises(RiskrankError, match="empty"):
        encoder.encode_query("")
    with pytest.raises(RiskrankError, match="empty"):
        encoder.encode([None])  # type: ignore[list-item]


# -- two processes, one cache ---------------------------------------------------------------------
DIM = 8


def fake_vector(text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


class FakeModelEncoder(Encoder):
    """The real cache path with a deterministic stand-in for the model."""

    def __init__(self, cache_dir) -> None:
        super().__init__(cache_dir=cache_dir, progress=False)
        self._dim = DIM
        self.identity = "fake-model"

    def _encode_model(self, texts, desc):
        return np.stack([fake_vector(t) for t in texts])


def cache_worker(cache_dir: str, worker: int, rounds: int) -> int:
    enc = FakeModelEncoder(cache_dir)
    bad = 0
    for r in range(rounds):
        # Overlapping windows: both processes write many of the same keys at the same time.
        texts = [f"text {i}" for i in range(r * 7 + worker * 3, r * 7 + worker * 3 + 40)]
        out = enc.encode(texts)
        bad += sum(not np.array_equal(out[i], fake_vector(t)) for i, t in enumerate(texts))
    return bad


def test_two_processes_share_one_cache(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(cache_worker, [(str(tmp_path), 0, 25), (str(tmp_path), 1, 25)])
    assert results == [0, 0]
    db = tmp_path / "embeddings.sqlite"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        n = conn.execute("SELECT COUNT(*) FROM emb WHERE model = 'fake-model'").fetchone()[0]
    expected = {f"text {i}" for w in (0, 1) for r in range(25) for i in range(r * 7 + w * 3, r * 7 + w * 3 + 40)}
    assert n == len(expected)
    # every stored row reads back intact in a fresh process-like reader
    reader = FakeModelEncoder(tmp_path)
    reader._encode_model = None  # any miss would now fail loudly
    texts = sorted(expected)
    np.testing.assert_array_equal(reader.encode(texts), np.stack([fake_vector(t) for t in texts]))


# -- ArrayEncoder -------------------------------------------------------------------------------
def test_array_encoder():
    enc = ArrayEncoder({"a": np.array([3.0, 4.0]), "b": np.array([0.0, 2.0])}, identity="toy")
    assert enc.dim == 2 and enc.identity == "toy"
    E = enc.encode(["b", "a"])
    assert E.dtype == np.float32
    np.testing.assert_allclose(E, [[0.0, 1.0], [0.6, 0.8]])
    np.testing.assert_allclose(enc.encode_query("a"), [0.6, 0.8])
    with pytest.raises(RiskrankError, match="not in the array encoder"):
        enc.encode(["c"])
    with pytest.raises(RiskrankError, match="empty"):
        enc.encode_query("  ")


def test_array_encoder_empty_batch():
    enc = ArrayEncoder({"a": np.array([3.0, 4.0])})
    assert enc.encode([]).shape == (0, 2)


def test_onnx_backend_gives_the_same_embeddings(tmp_path):
    texts = ["  padded   text with spaces ", "Delete ALL files in /var/log older than 30 days!", "word " * 400,
             "émigré café naïve — unicode ✓", "short", "wire $200 to Alice"]
    onnx = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="onnx")
    torch_enc = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False)
    a, b = onnx.encode(texts), torch_enc.encode(texts)
    assert a.dtype == np.float32 and a.shape == b.shape
    np.testing.assert_allclose(a, b, atol=1e-5)  # truncation, padding, unicode, batches by length
    exported = list((tmp_path / "onnx").glob("*.onnx"))
    assert len(exported) == 1
    # A second encoder reuses the export; a corrupt export is a clear error, not a crash.
    again = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="onnx")
    np.testing.assert_allclose(again.encode(texts[:2]), b[:2], atol=1e-5)
    exported[0].write_bytes(b"not a model")
    with pytest.raises(RiskrankError, match="exported encoder"):
        Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="onnx").encode(["x"])
    # auto falls back to PyTorch with a warning where ONNX cannot serve.
    with pytest.warns(UserWarning, match="using PyTorch"):
        auto = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="auto")
        np.testing.assert_allclose(auto.encode(texts[:1]), b[:1], atol=1e-6)
    assert auto.backend == "torch"
    ok = Encoder(None, cache_dir=tmp_path / "fresh", use_cache=False, progress=False, backend="auto")
    ok.encode(["x"])
    assert ok.backend == "onnx"  # auto reports what it runs


def test_unknown_backend():
    with pytest.raises(RiskrankError, match="unknown encoder backend"):
        Encoder(None, backend="tensorrt")


def test_auto_backend_falls_back_on_any_export_failure(tmp_path):
    (tmp_path / "onnx").write_text("a file where the export folder should be")
    with pytest.warns(UserWarning, match="using PyTorch"):
        enc = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="auto")
        assert enc.encode(["hello world"]).shape == (1, 384)
    assert enc.backend == "torch"
    with pytest.raises(RiskrankError, match="onnx encoder backend failed"):
        Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="onnx").encode(["hello world"])
    with pytest.raises(RiskrankError, match="runs on the CPU"):
        Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="onnx", device="meta").onnx_backend()
