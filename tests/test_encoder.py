"""The frozen encoder and its on-disk cache: the bundled model, unit-norm float32 output, a
cache hit that never loads the model, and two processes sharing one cache."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import shutil
import sqlite3

import numpy as np
import pytest

from riskrank.encoder import ArrayEncoder, EmbeddingCache, Encoder, resolve_model, text_key
from riskrank.errors import RiskrankError
from riskrank.numpy_encoder import EMBEDDING_TOLERANCE

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
        n = conn.execute("SELECT COUNT(*) FROM vectors WHERE model = 'fake-model'").fetchone()[0]
    expected = {f"text {i}" for w in (0, 1) for r in range(25) for i in range(r * 7 + w * 3, r * 7 + w * 3 + 40)}
    assert n == len(expected)
    # every stored row reads back intact in a fresh process-like reader
    reader = FakeModelEncoder(tmp_path)
    reader._encode_model = None  # any miss would now fail loudly
    texts = sorted(expected)
    np.testing.assert_array_equal(reader.encode(texts), np.stack([fake_vector(t) for t in texts]))


# -- a damaged or edited cache is detected, never used -------------------------------------------------
def _fresh(tmp_path, texts):
    enc = FakeModelEncoder(tmp_path)
    ref = enc.encode(texts)
    return enc.cache.path, ref


def _sql(db, *stmts):
    with sqlite3.connect(db) as conn:
        for stmt, params in stmts:
            conn.execute(stmt, params)


@pytest.mark.parametrize("damage", ["random", "half", "header"])
def test_a_damaged_database_is_moved_aside_and_rebuilt(tmp_path, damage, caplog):
    texts = [f"text {i}" for i in range(60)]
    db, ref = _fresh(tmp_path, texts)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = db.read_bytes()
    db.write_bytes({"random": np.random.default_rng(0).bytes(8192), "half": data[: len(data) // 2],
                    "header": b"\x00" * 100 + data[100:]}[damage])
    enc = FakeModelEncoder(tmp_path)
    out = enc.encode(texts)
    np.testing.assert_array_equal(out, ref)
    assert list(tmp_path.glob("embeddings.sqlite.corrupt-*")), "the damaged file is kept aside, not deleted"
    warnings = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("edit", ["nan", "swap", "one_dim", "all_dim", "digest"])
def test_cached_vectors_are_checked_on_read(tmp_path, edit, caplog):
    texts = [f"text {i}" for i in range(20)]
    db, ref = _fresh(tmp_path, texts)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT rowid, dim, vec FROM vectors").fetchall()
        if edit == "nan":
            for rowid, dim, _ in rows:
                conn.execute("UPDATE vectors SET vec = ? WHERE rowid = ?", (np.full(dim, np.nan, np.float32).tobytes(), rowid))
        elif edit == "swap":  # finite, unit-norm, of the right size: only the digest tells
            vecs = [v for _, _, v in rows][::-1]
            for (rowid, _, _), v in zip(rows, vecs, strict=True):
                conn.execute("UPDATE vectors SET vec = ? WHERE rowid = ?", (v, rowid))
        elif edit == "one_dim":
            conn.execute("UPDATE vectors SET dim = 10, vec = ? WHERE rowid = ?", (np.ones(10, np.float32).tobytes(), rows[0][0]))
        elif edit == "all_dim":
            conn.execute("UPDATE vectors SET dim = 10, vec = ?", (np.ones(10, np.float32).tobytes(),))
        else:
            conn.execute("UPDATE vectors SET digest = ?", (b"\x00" * 16,))
    enc = FakeModelEncoder(tmp_path)
    np.testing.assert_array_equal(enc.encode(texts), ref)
    assert enc.cache.dropped >= 1
    assert any("failed their check" in r.getMessage() for r in caplog.records)
    assert FakeModelEncoder(tmp_path).cache.get_many("fake-model", [text_key(t) for t in texts], dim=DIM).keys() == \
        {text_key(t) for t in texts}, "re-encoded rows replace the bad ones"


@pytest.mark.parametrize("meta", ['{"dim": "abc", "name": "x"}', "not json", "[]", '{"dim": true}', '{"dim": -3}', "null"])
def test_bad_model_metadata_is_ignored(tmp_path, meta):
    """Unreadable metadata is as good as none: the dimension then comes from the model."""
    texts = ["a text", "another text"]
    db, ref = _fresh(tmp_path, texts)
    _sql(db, ("INSERT OR REPLACE INTO model_meta VALUES (?, ?)", ("fake-model", meta)))
    enc = FakeModelEncoder(tmp_path)
    assert enc.cache.get_meta("fake-model") is None
    np.testing.assert_array_equal(enc.encode(texts), ref)


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


MIXED = ["  padded   text with spaces ", "Delete ALL files in /var/log older than 30 days!", "word " * 400,
         "émigré café naïve — unicode ✓ 🚀", "short", "wire $200 to Alice", "x"]


def test_torch_free_backends_give_sentence_transformers_embeddings(tmp_path):
    """ONNX Runtime on the graph riskrank builds from the weights (the default) and the NumPy
    pass, against sentence-transformers on the bundled model: truncation at 256 tokens,
    padding, unicode, batches sorted by length; neither loads sentence-transformers."""
    ref = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="torch").encode(MIXED)
    for backend, runs in (("auto", "onnx"), ("onnx", "onnx"), ("numpy", "numpy")):
        enc = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend=backend)
        got = enc.encode(MIXED)
        assert enc.backend == runs and enc._model is None  # sentence-transformers never loaded
        assert got.dtype == np.float32 and got.shape == ref.shape
        # to the figure the docs give (EMBEDDING_TOLERANCE), not a looser one
        np.testing.assert_allclose(got, ref, atol=EMBEDDING_TOLERANCE, rtol=0)
        np.testing.assert_allclose(enc.torch_free_backend().encode(MIXED, batch_size=2), ref, atol=EMBEDDING_TOLERANCE, rtol=0)
    built = list((tmp_path / "onnx").glob("bert-*.onnx"))
    assert len(built) == 1  # built once, reused
    # A damaged graph is rebuilt (it is checked against the NumPy pass on every load).
    built[0].write_bytes(b"not a model")
    again = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False)
    np.testing.assert_allclose(again.encode(MIXED[:2]), ref[:2], atol=EMBEDDING_TOLERANCE, rtol=0)
    assert again.backend == "onnx" and built[0].stat().st_size > 1_000_000


def test_exported_onnx_for_models_the_graph_builder_does_not_run(tmp_path):
    """Models riskrank's graph does not cover (simulated: no torch-free pass) export once with
    PyTorch; a corrupt export is a clear error; auto falls back to PyTorch with a warning."""
    b = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="torch").encode(MIXED)

    def exported(backend: str, cache) -> Encoder:
        enc = Encoder(None, cache_dir=cache, use_cache=False, progress=False, backend=backend)
        enc.torch_free_backend = lambda: None  # as for a model the graph builder does not run
        return enc

    np.testing.assert_allclose(exported("onnx", tmp_path).encode(MIXED), b, atol=1e-5)
    files = list((tmp_path / "onnx").glob("encoder-*.onnx"))
    assert len(files) == 1
    np.testing.assert_allclose(exported("onnx", tmp_path).encode(MIXED[:2]), b[:2], atol=1e-5)  # reused
    files[0].write_bytes(b"not a model")
    with pytest.raises(RiskrankError, match="exported encoder"):
        exported("onnx", tmp_path).encode(["x"])
    with pytest.warns(UserWarning, match="using PyTorch"):
        auto = exported("auto", tmp_path)
        np.testing.assert_allclose(auto.encode(MIXED[:1]), b[:1], atol=1e-6)
    assert auto.backend == "torch"
    ok = exported("auto", tmp_path / "fresh")
    ok.encode(["x"])
    assert ok.backend == "onnx"  # auto reports what it runs


def test_numpy_backend_refuses_what_it_cannot_run(tmp_path):
    from riskrank.encoder import _bundled_path
    from riskrank.numpy_encoder import NumpyEncoder, UnsupportedModel

    folder = tmp_path / "model"
    shutil.copytree(_bundled_path(), folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "model_type": "roberta"}))
    with pytest.raises(UnsupportedModel, match="roberta"):
        NumpyEncoder(folder)
    with pytest.raises(RiskrankError, match="numpy encoder backend cannot run"):
        Encoder(str(folder), cache_dir=tmp_path, use_cache=False, progress=False, backend="numpy").encode(["x"])
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(RiskrankError, match="cannot read the encoder's weights"):
        NumpyEncoder(folder)
    with pytest.raises(RiskrankError, match="runs on the CPU"):
        Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="numpy", device="cuda").encode(["x"])


def test_unknown_backend():
    with pytest.raises(RiskrankError, match="unknown encoder backend"):
        Encoder(None, backend="tensorrt")


def test_auto_backend_falls_back_on_any_export_failure(tmp_path, caplog, monkeypatch):
    (tmp_path / "onnx").write_text("a file where the export folder should be")
    with caplog.at_level("WARNING", logger="riskrank.encoder"):  # the graph cannot be kept: built in memory
        enc = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="auto")
        assert enc.encode(["hello world"]).shape == (1, 384)
    assert enc.backend == "onnx" and "rebuilt at each start" in caplog.text
    from riskrank.numpy_encoder import OnnxBertEncoder

    def broken(self, threads):
        raise RuntimeError("no session today")

    monkeypatch.setattr(OnnxBertEncoder, "_session", broken)
    with pytest.warns(UserWarning, match="using NumPy"):  # ONNX Runtime fails: NumPy serves
        enc = Encoder(None, cache_dir=tmp_path / "other", use_cache=False, progress=False, backend="auto")
        assert enc.encode(["hello world"]).shape == (1, 384)
    assert enc.backend == "numpy"
    with pytest.raises(RiskrankError, match="onnx encoder backend failed"):  # asked for by name: the error
        Encoder(None, cache_dir=tmp_path / "other", use_cache=False, progress=False, backend="onnx").encode(["hello world"])
    monkeypatch.undo()
    with pytest.warns(UserWarning, match="using PyTorch"):
        enc = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="auto")
        enc.torch_free_backend = lambda: None  # as for a model the graph builder does not run
        assert enc.encode(["hello world"]).shape == (1, 384)
    assert enc.backend == "torch"
    with pytest.raises(RiskrankError, match="runs on the CPU"):
        Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, backend="onnx", device="meta").onnx_backend()


# -- hub names: pinned to a revision, or a warning ------------------------------------------------
def test_hub_names_carry_their_revision():
    from riskrank.encoder import split_revision

    assert split_revision("org/model@0123abc") == ("org/model", "0123abc")
    assert split_revision("org/model") == ("org/model", None)
    assert split_revision("model@v1.0") == ("model", "v1.0")
    with pytest.raises(RiskrankError, match="empty revision"):
        split_revision("org/model@")
    assert resolve_model("org/model@0123abc") == ("org/model@0123abc", None)


@pytest.mark.parametrize(("name", "warned"), [("riskrank-test/no-such-model", True), ("riskrank-test/no-such-model@0123abc", False)])
def test_an_unpinned_hub_encoder_is_one_warning(tmp_path, monkeypatch, caplog, name, warned):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the load fails after the check
    enc = Encoder(name, cache_dir=tmp_path, progress=False)
    with pytest.raises(RiskrankError, match="cannot load encoder"):
        _ = enc.model
    lines = [r.getMessage() for r in caplog.records if "not pinned" in r.getMessage()]
    assert len(lines) == (1 if warned else 0)
    if warned:
        assert f"{name}@COMMIT" in lines[0] and "\n" not in lines[0]


# -- a cache that cannot be used costs speed, never an answer ---------------------------------------
def test_unusable_cache_directory_falls_back_to_computing(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    enc = Encoder(None, cache_dir=blocker / "cache", progress=False)
    ref = Encoder(None, cache_dir=tmp_path / "ok", use_cache=False, progress=False).encode(["delete a file"])
    with caplog.at_level("WARNING", logger="riskrank.encoder"):
        np.testing.assert_allclose(enc.encode(["delete a file"]), ref, atol=1e-6)
    assert enc.cache is None
    assert "cannot be opened" in caplog.text and "computing embeddings without it" in caplog.text


def test_cache_that_cannot_be_written_warns_once_and_still_reads(tmp_path, caplog, monkeypatch):
    enc = Encoder(None, cache_dir=tmp_path, progress=False)
    first = enc.encode(["read a file"])  # stored

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(EmbeddingCache, "put_many", full)
    with caplog.at_level("WARNING", logger="riskrank.encoder"):
        enc.encode(["write a file"])
        enc.encode(["move a file"])
    assert caplog.text.count("cannot be written") == 1  # said once
    np.testing.assert_array_equal(enc.encode(["read a file"]), first)  # reading still works


def test_int8_weights_encode_close_to_float32_under_their_own_identity(tmp_path, caplog):
    """The int8 query encoder: the same model with its weight products quantised (cached
    beside the float32 graph), embeddings at a cosine of about 0.99 to the float32 ones, never
    sharing cached embeddings with them; a damaged int8 file is rebuilt; what cannot run it
    says so."""
    f32 = Encoder(None, cache_dir=tmp_path, progress=False)
    i8 = Encoder(None, cache_dir=tmp_path, progress=False, weights="int8")
    assert i8.identity == f32.identity + "+int8-v1" and i8.weights == "int8"
    a, b = f32.encode(MIXED), i8.encode(MIXED)
    assert i8.backend == "onnx" and i8._model is None
    cos = (a * b).sum(axis=1)
    # close (the lowest: the one-letter text "x"), and really another pass
    assert np.median(cos) >= 0.99 and cos.min() >= 0.97 and not np.allclose(a, b, atol=1e-4)
    quantised = list((tmp_path / "onnx").glob("bert-*-int8-v*.onnx"))
    assert len(quantised) == 1 and "pre-processing" not in caplog.text
    size = quantised[0].stat().st_size
    for damage in (b"not a model", next((tmp_path / "onnx").glob("bert-????????????????.onnx")).read_bytes()):
        quantised[0].write_bytes(damage)  # garbage, or the float32 graph under the int8 name: rebuilt
        again = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, weights="int8")
        np.testing.assert_allclose(again.encode(MIXED[:2]), b[:2], atol=1e-5)
        assert quantised[0].stat().st_size == size
    with pytest.raises(RiskrankError, match="int8 encoder weights run on ONNX Runtime, not the numpy backend"):
        Encoder(None, backend="numpy", weights="int8")
    with pytest.raises(RiskrankError, match="unknown encoder weights 'int4'"):
        Encoder(None, weights="int4")
    with pytest.raises(RiskrankError, match=r"int8 encoder weights cannot run .*CPU"):
        Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, device="cuda", weights="int8").encode(["x"])


def test_a_server_encodes_tasks_with_int8_and_tools_with_float32(tmp_path, monkeypatch, caplog):
    """make_encoder(query_weights="int8"): live tasks (store=False) go through the int8 pass,
    a registry's tools (store=True) through the float32 one the heads were trained on; where
    int8 cannot run, a warning and float32 for both."""
    from riskrank.encoder import encode_tools, make_encoder

    monkeypatch.setenv("RISKRANK_CACHE", str(tmp_path))
    enc = make_encoder(None, query_weights="int8")
    assert enc.identity == enc.inner.identity and enc.query.weights == "int8"
    tools = encode_tools(enc, TEXTS)
    task = enc.encode(["delete a file from the disk"])
    np.testing.assert_allclose(tools, enc.inner.encode(TEXTS), atol=1e-6)
    np.testing.assert_allclose(task, enc.query.encode(["delete a file from the disk"]), atol=1e-6)
    assert 0.98 <= float(task[0] @ tools[0]) < 1 - 1e-4
    with caplog.at_level("WARNING", logger="riskrank.encoder"):
        plain = make_encoder(None, backend="numpy", query_weights="int8")
    assert plain.query is plain.inner
    assert "tasks are encoded with float32 weights, not int8: --encoder-backend numpy was asked for" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="riskrank.encoder"):  # an encoder object: its own pass, said
        given = make_encoder(ArrayEncoder({"x": np.ones(4, np.float32)}), query_weights="int8")
    assert given.query is given.inner and "not to array-encoder" in caplog.text
    default = make_encoder(None)  # the library's default: one float32 pass for both
    assert default.query is default.inner


def test_an_int8_embedding_does_not_depend_on_the_texts_beside_it(tmp_path):
    """Dynamic quantisation scales activations by the whole batch's range: the int8 pass
    encodes one text at a time, so a task's embedding is the same alone and under load."""
    i8 = Encoder(None, cache_dir=tmp_path, use_cache=False, progress=False, weights="int8")
    together = i8.encode(MIXED)
    alone = np.stack([i8.encode([t])[0] for t in MIXED])
    np.testing.assert_array_equal(together, alone)


def test_a_model_the_int8_pass_cannot_run_serves_its_tasks_in_float32(tmp_path, monkeypatch, caplog):
    """A local model the int8 pass does not run (here: CLS pooling) must not stop a server
    whose default is int8 tasks: when the pass loads (warm, or the first task), one warning
    naming why, and float32 for the tasks."""
    from riskrank.encoder import _bundled_path, make_encoder

    monkeypatch.setenv("RISKRANK_CACHE", str(tmp_path))
    folder = tmp_path / "cls-model"
    shutil.copytree(_bundled_path(), folder)
    pool = folder / "1_Pooling" / "config.json"
    cfg = json.loads(pool.read_text())
    pool.write_text(json.dumps({**cfg, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    with caplog.at_level("WARNING", logger="riskrank.encoder"):
        enc = make_encoder(str(folder), query_weights="int8")
        assert enc.query is not enc.inner and not caplog.text  # nothing loaded before a server answers
        with pytest.warns(UserWarning, match="using PyTorch"):  # the float32 pass of a CLS model
            enc.warm()
    assert enc.query is enc.inner
    assert "tasks are encoded with float32 weights, not int8: int8 encoder weights cannot run" in caplog.text
    assert "pooling" in caplog.text
