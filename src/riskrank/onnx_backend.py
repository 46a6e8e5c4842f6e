"""ONNX Runtime over a graph exported with PyTorch: the encoder backend for models that
:mod:`riskrank.numpy_encoder` does not run (it builds BERT encoders' graphs itself, with no
PyTorch; this exporter needs PyTorch once per model).

A served query is encoded one at a time, and on this project's 2-core machine PyTorch's eager
forward pass of all-MiniLM-L6-v2 costs ~35 ms for a 30-token task, most of a request's time.
ONNX Runtime runs the same graph with fused attention and GEMM kernels in ~17 ms, with
embeddings equal to PyTorch's to ~1e-7 (checked at export, see :data:`MAX_EXPORT_DIFF`).

Supported: sentence-transformers models made of a ``Transformer`` module, mean ``Pooling``
and optionally ``Normalize`` (the default encoder and most sentence encoders). The transformer
is exported once per model identity to ``$RISKRANK_CACHE/onnx/`` (written atomically) and
reused. ``onnxruntime`` and ``onnx`` are imported lazily.
"""

from __future__ import annotations

import hashlib
import io
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.extras import requires
from riskrank.fileio import atomic_write_bytes

MAX_EXPORT_DIFF = 1e-4
"""Largest element-wise difference from PyTorch's embeddings accepted after an export."""
_PROBE = [
    "delete the old log files on the build server",
    "wire $200 to Alice and email her the receipt, then add the payment to my budget spreadsheet",
]


def _supported(model: Any) -> tuple[Any, int]:
    """(Transformer module, max_seq_length) of a Transformer -> mean Pooling [-> Normalize] model."""
    mods = list(model)
    names = [type(m).__name__ for m in mods]
    if len(mods) not in (2, 3) or names[0] != "Transformer" or names[1] != "Pooling" or names[2:] not in ([], ["Normalize"]):
        raise RiskrankError(f"the onnx encoder backend supports Transformer + mean Pooling models, not {' + '.join(names)}")
    pool = mods[1]
    mode = getattr(pool, "pooling_mode", None) or ("mean" if getattr(pool, "pooling_mode_mean_tokens", False) else None)
    extra = any(getattr(pool, f"pooling_mode_{m}", False) for m in ("cls_token", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"))
    if mode != "mean" or extra:
        raise RiskrankError("the onnx encoder backend supports mean pooling only")
    return mods[0], int(mods[0].max_seq_length)


class OnnxEncoderBackend:
    """Encodes texts like ``SentenceTransformer.encode(..., normalize_embeddings=True)`` with
    the transformer running in ONNX Runtime."""

    def __init__(self, model: Any, identity: str, cache_dir: str | Path, threads: int | None = None) -> None:
        with requires("onnx", "the onnx encoder backend"):
            import onnxruntime as ort
        self.transformer, self.max_length = _supported(model)
        self.tokenizer = self.transformer.tokenizer
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.path = Path(cache_dir) / "onnx" / f"encoder-{key}.onnx"
        if not self.path.is_file():
            self._export()
        opts = ort.SessionOptions()
        if threads is None:
            import torch

            threads = torch.get_num_threads()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise RiskrankError(f"cannot load the exported encoder {self.path}: {exc} (delete it to re-export)") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        self._lock = threading.Lock()
        ref = np.asarray(model.encode(_PROBE, convert_to_numpy=True, normalize_embeddings=True), dtype=np.float32)
        diff = float(np.abs(self.encode(_PROBE) - ref).max())
        if diff > MAX_EXPORT_DIFF:
            raise RiskrankError(f"the ONNX encoder differs from PyTorch's by {diff:.2e} (> {MAX_EXPORT_DIFF}); use the torch backend")

    def _tokens(self, texts: list[str], kind: str) -> dict[str, Any]:
        return dict(self.tokenizer(texts, padding=True, truncation="longest_first", max_length=self.max_length, return_tensors=kind))

    def _export(self) -> None:
        import torch

        auto = self.transformer.auto_model
        sample = self._tokens(_PROBE, "pt")
        names = list(sample)

        class _Wrap(torch.nn.Module):
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, *args: torch.Tensor) -> torch.Tensor:
                return self.m(**dict(zip(names, args, strict=True))).last_hidden_state

        axes = {n: {0: "batch", 1: "tokens"} for n in [*names, "hidden"]}
        buf = io.BytesIO()
        try:
            # The exporter's tracer warnings concern code paths this fixed graph does not take
            # (the export is checked against PyTorch right after).
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(_Wrap(auto).eval(), tuple(sample[n] for n in names), buf, input_names=names,
                                  output_names=["hidden"], dynamic_axes=axes, opset_version=17, dynamo=False)
            atomic_write_bytes(self.path, buf.getvalue())
        except Exception as exc:
            raise RiskrankError(f"cannot export the encoder to ONNX: {exc}") from None

    def encode(self, texts: list[str], batch_size: int = 64, desc: str | None = None) -> np.ndarray:
        """Unit-norm float32 embeddings [len(texts), dim]; batches sorted by length like
        sentence-transformers, so padding stays short; a progress bar when ``desc`` is given."""
        from tqdm.auto import tqdm

        order = np.argsort([-len(t) for t in texts], kind="stable")
        out: list[np.ndarray] = [None] * len(texts)  # type: ignore[list-item]
        starts = range(0, len(texts), batch_size)
        for a in tqdm(starts, desc=desc, unit="batch", leave=False) if desc else starts:
            idx = order[a : a + batch_size]
            with self._lock:  # one tokenizer and session run at a time (the session has its own threads)
                tok = self._tokens([texts[i] for i in idx], "np")
                feeds = {n: np.asarray(tok[n], dtype=np.int64) for n in self.inputs}
                hidden = self.session.run(None, feeds)[0]
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            emb = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
            for j, i in enumerate(idx):
                out[i] = emb[j]
        return np.stack(out).astype(np.float32, copy=False)
