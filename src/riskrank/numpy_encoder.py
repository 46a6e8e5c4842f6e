"""The frozen encoder's forward pass in NumPy: the serving path's encoder, with no PyTorch.

An MCP client starts the gateway every time it starts, and importing PyTorch with
sentence-transformers costs seconds before the first ``tools/list`` (docs/benchmarks.md has
the start-up timeline). The encoder riskrank serves is frozen, small (all-MiniLM-L6-v2: six
BERT layers at 384 dimensions) and only ever run forward, so this module runs it from the
model folder's own files: ``model.safetensors`` read by ``safetensors.numpy``, the tokenizer
by the ``tokenizers`` library from ``tokenizer.json`` (the same Rust tokenizer
sentence-transformers calls), the layers as float32 BLAS products. Its embeddings equal
sentence-transformers' to ~1e-6 (``tests/test_encoder.py`` holds them to it on the bundled
model).

Supported: a sentence-transformers folder of a BERT ``Transformer`` (absolute positions, GELU),
mean ``Pooling`` and optionally ``Normalize``, with a ``tokenizer.json``: the default encoder
and most MiniLM/BERT sentence encoders. Anything else raises :class:`UnsupportedModel` and
the caller uses PyTorch.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError


class UnsupportedModel(RiskrankError):
    """The folder holds a model this forward pass does not implement (use PyTorch)."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnsupportedModel(f"{path.parent}: no {path.name}") from None
    except (OSError, ValueError) as exc:
        raise RiskrankError(f"{path}: unreadable ({exc})") from None


def _check_modules(folder: Path) -> None:
    mods = _json(folder / "modules.json")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in mods] if isinstance(mods, list) else []
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]) or mods[0].get("path", "") != "":
        raise UnsupportedModel(f"{folder}: modules {' + '.join(kinds) or '?'}; the NumPy encoder runs Transformer + mean Pooling")
    pool = _json(folder / (mods[1].get("path") or "1_Pooling") / "config.json")
    others = [k for k, v in pool.items() if k.startswith("pooling_mode_") and v and k != "pooling_mode_mean_tokens"]
    if not pool.get("pooling_mode_mean_tokens") or others:
        raise UnsupportedModel(f"{folder}: pooling {others or 'not mean'}; the NumPy encoder does mean pooling")


class NumpyEncoder:
    """``SentenceTransformer(folder).encode(texts, normalize_embeddings=True)`` in NumPy (module
    docstring). Thread-safe: one forward pass at a time (BLAS threads do the parallel work)."""

    def __init__(self, folder: str | Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(folder)
        _check_modules(folder)
        cfg = _json(folder / "config.json")
        st = _json(folder / "sentence_bert_config.json") if (folder / "sentence_bert_config.json").exists() else {}
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act", "gelu") != "gelu" \
                or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModel(f"{folder}: a {cfg.get('model_type')!r} model with {cfg.get('hidden_act')!r}; "
                                   "the NumPy encoder runs BERT with GELU and absolute positions")
        if not (folder / "tokenizer.json").is_file():
            raise UnsupportedModel(f"{folder}: no tokenizer.json")
        weights = sorted(folder.glob("*.safetensors"))
        if len(weights) != 1:
            raise UnsupportedModel(f"{folder}: {len(weights)} safetensors files; the NumPy encoder reads one")
        self.layers_n = int(cfg["num_hidden_layers"])
        self.heads = int(cfg["num_attention_heads"])
        self.dim = int(cfg["hidden_size"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.max_length = int(st.get("max_seq_length") or cfg.get("max_position_embeddings", 512))
        try:
            w = load_file(str(weights[0]))
        except Exception as exc:
            raise RiskrankError(f"{weights[0]}: cannot read the encoder's weights ({exc})") from None
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        try:
            self.w = self._arrays(w, prefix)
        except KeyError as exc:
            raise UnsupportedModel(f"{weights[0]}: no tensor {exc} (not a BERT checkpoint)") from None
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # as sentence-transformers calls it: longest-first truncation at max_seq_length, padding
        # to the batch's longest text (done here, so the mask is ours)
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()
        self._lock = threading.Lock()

    def _arrays(self, w: dict[str, np.ndarray], p: str) -> dict[str, Any]:
        f = lambda k: np.ascontiguousarray(w[p + k], dtype=np.float32)  # noqa: E731
        out: dict[str, Any] = {"word": f("embeddings.word_embeddings.weight"), "pos": f("embeddings.position_embeddings.weight"),
                               "type": f("embeddings.token_type_embeddings.weight"),
                               "ln": (f("embeddings.LayerNorm.weight"), f("embeddings.LayerNorm.bias")), "layers": []}
        for i in range(self.layers_n):
            a = f"encoder.layer.{i}."
            # Q, K and V as one [d, 3d] product (weights stored transposed for x @ W)
            qkv = np.concatenate([f(a + f"attention.self.{n}.weight") for n in ("query", "key", "value")]).T
            out["layers"].append({
                "qkv": (np.ascontiguousarray(qkv), np.concatenate([f(a + f"attention.self.{n}.bias") for n in ("query", "key", "value")])),
                "o": (np.ascontiguousarray(f(a + "attention.output.dense.weight").T), f(a + "attention.output.dense.bias")),
                "ln1": (f(a + "attention.output.LayerNorm.weight"), f(a + "attention.output.LayerNorm.bias")),
                "up": (np.ascontiguousarray(f(a + "intermediate.dense.weight").T), f(a + "intermediate.dense.bias")),
                "down": (np.ascontiguousarray(f(a + "output.dense.weight").T), f(a + "output.dense.bias")),
                "ln2": (f(a + "output.LayerNorm.weight"), f(a + "output.LayerNorm.bias")),
            })
        return out

    def _norm(self, x: np.ndarray, ln: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        x = x - mu
        var = np.mean(x * x, axis=-1, keepdims=True)
        x *= 1.0 / np.sqrt(var + self.eps)
        x *= ln[0]
        x += ln[1]
        return x

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        from scipy.special import erf

        b, n = ids.shape
        h, d = self.heads, self.dim
        hd = d // h
        w = self.w
        x = w["word"][ids] + w["pos"][:n][None] + w["type"][types]
        x = self._norm(x, w["ln"])
        neg = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :].astype(np.float32)  # [b, 1, 1, n]
        scale = np.float32(1.0 / math.sqrt(hd))
        for layer in w["layers"]:
            qkv = x @ layer["qkv"][0] + layer["qkv"][1]  # [b, n, 3d]
            qkv = qkv.reshape(b, n, 3, h, hd).transpose(2, 0, 3, 1, 4)  # [3, b, h, n, hd]
            att = (qkv[0] @ qkv[1].transpose(0, 1, 3, 2)) * scale + neg  # [b, h, n, n]
            att -= att.max(-1, keepdims=True)
            np.exp(att, out=att)
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(b, n, d)
            x = self._norm(ctx @ layer["o"][0] + layer["o"][1] + x, layer["ln1"])
            up = x @ layer["up"][0] + layer["up"][1]
            up *= 0.5 * (1.0 + erf(up * np.float32(1 / math.sqrt(2))))  # exact GELU, as BERT's
            x = self._norm(up @ layer["down"][0] + layer["down"][1] + x, layer["ln2"])
        m = mask[..., None]
        emb = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: list[str], batch_size: int = 64, desc: str | None = None) -> np.ndarray:
        """Unit-norm float32 embeddings [len(texts), dim]; texts batched by length (short
        padding), a progress bar when ``desc`` is given."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        with self._lock:
            encs = self.tokenizer.encode_batch(list(texts))
            order = np.argsort([-len(e.ids) for e in encs], kind="stable")
            out = np.empty((len(texts), self.dim), np.float32)
            starts = range(0, len(texts), batch_size)
            if desc:
                from tqdm.auto import tqdm

                starts = tqdm(starts, desc=desc, unit="batch", leave=False)
            for a in starts:
                idx = order[a : a + batch_size]
                n = max(len(encs[i].ids) for i in idx)
                ids = np.zeros((len(idx), n), np.int64)
                types = np.zeros((len(idx), n), np.int64)
                mask = np.zeros((len(idx), n), np.float32)
                for j, i in enumerate(idx):
                    e = encs[i]
                    ids[j, : len(e.ids)] = e.ids
                    types[j, : len(e.ids)] = e.type_ids
                    mask[j, : len(e.ids)] = 1.0
                out[idx] = self._forward(ids, types, mask)
        return out


# -- the same graph in ONNX Runtime, built from the same weights (no PyTorch) -----------------------------
#: Bumped when the graph below changes: a cached graph of another version is rebuilt.
GRAPH_VERSION = 2
#: Largest element-wise difference from the NumPy forward pass accepted for a built graph.
MAX_GRAPH_DIFF = 1e-4
#: The largest element-wise difference of both backends' embeddings from sentence-transformers'
#: on the bundled model, as measured on mixed texts (padding, truncation, unicode): 2.46e-7 on
#: one 2-core machine, 2.53e-7 (the NumPy pass; ONNX Runtime 1.94e-7) on another with AVX-512,
#: whose BLAS sums in another order; held by ``tests/test_encoder.py``; the docs quote it.
EMBEDDING_TOLERANCE = 3e-7
#: The encoder's weights as served: ``float32`` (the model's own), or ``int8``: the weight
#: products quantised per channel (:meth:`OnnxBertEncoder._quantise`), a query encoded at
#: about half the cost, at a cosine of about 0.99 to the float32 embedding.
WEIGHTS = ("float32", "int8")
#: The lowest cosine between an int8 embedding and the float32 one accepted on the probe texts.
MIN_INT8_COSINE = 0.98
#: Texts the int8 pass runs at once (each run on ONNX Runtime's own threads, parked when idle).
PARALLEL_RUNS = 2
#: Bumped when the int8 graph's making changes (the float32 graph's version is in its key).
INT8_VERSION = 1
_PROBE = ["delete the old log files on the build server",
          "wire $200 to Alice and email her the receipt, then add the payment to my budget spreadsheet"]


def _quantised(data: bytes) -> bool:
    """Whether an ONNX model's bytes hold int8 weight products (``MatMulInteger``)."""
    import onnx

    return any(n.op_type == "MatMulInteger" for n in onnx.load_from_string(data).graph.node)


class _DropAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


class OnnxBertEncoder(NumpyEncoder):
    """:class:`NumpyEncoder`'s model run by ONNX Runtime: the graph is written here, node by
    node, from the folder's own weights (no exporter, so no PyTorch), cached under
    ``cache_dir/onnx/`` per model identity (written atomically; a file that does not load or
    does not give the NumPy pass's embeddings to :data:`MAX_GRAPH_DIFF` is rebuilt once, then
    refused), and checked against the NumPy pass every time it is loaded. ONNX Runtime's
    kernels make a query 2-4x faster than NumPy's products on one core, and a batch more so."""

    def __init__(self, folder: str | Path, identity: str, cache_dir: str | Path, threads: int | None = None,
                 weights: str = "float32") -> None:
        import hashlib

        if weights not in WEIGHTS:
            raise RiskrankError(f"unknown encoder weights {weights!r}; choose from {', '.join(WEIGHTS)}")
        super().__init__(folder)
        self.weights = weights
        self._pool: Any = None
        key = hashlib.sha256(f"{identity}\x00graph-{GRAPH_VERSION}".encode()).hexdigest()[:16]
        self.path = Path(cache_dir) / "onnx" / f"bert-{key}.onnx"
        ref = super().encode(_PROBE)
        self._bytes: bytes | None = None
        for attempt in ((0, 1) if weights == "float32" else ()):
            if not self.path.is_file() or attempt:
                self._build()
            try:
                self.session = self._session(threads)
                diff = float(np.abs(self.encode(_PROBE) - ref).max())
            except Exception as exc:  # an unreadable or foreign file: rebuilt once
                problem = f"cannot load {self.path} ({str(exc).splitlines()[0][:160]})"
            else:
                if diff <= MAX_GRAPH_DIFF:
                    break
                problem = f"{self.path} gives embeddings {diff:.1e} away from the NumPy forward pass"
            if attempt:
                raise RiskrankError(f"the ONNX encoder: {problem}")
        if weights == "int8":
            self._quantise(ref, threads)
        self.w = self._bytes = None  # ONNX Runtime holds its own copy of the weights

    def _quantise(self, ref: np.ndarray, threads: int | None) -> None:
        """The session on the graph with its weight products quantised to int8 (ONNX Runtime's
        dynamic quantiser, per output channel; the attention products, which multiply
        activations by activations, stay float32; GELU fused), cached beside the float32 graph.
        A file that does not load or whose embeddings fall below :data:`MIN_INT8_COSINE` of
        the float32 (NumPy) pass ``ref`` is rebuilt once, then refused."""
        import contextlib
        import tempfile

        from onnxruntime.quantization import QuantType, quantize_dynamic

        from riskrank.fileio import atomic_write_bytes

        path = self.path.with_name(f"{self.path.stem}-int8-v{INT8_VERSION}.onnx")
        for attempt in (0, 1):
            data = None
            if not path.is_file() or attempt:
                with tempfile.TemporaryDirectory(prefix="riskrank-int8-") as tmp:
                    source = Path(tmp) / "float32.onnx"
                    source.write_bytes(self._graph(fused_gelu=True))
                    out = Path(tmp) / "int8.onnx"
                    attention = [f"l{i}.{n}" for i in range(self.layers_n) for n in ("qk", "ctx")]
                    quiet = _DropAdvice()  # the quantiser's advice to pre-process, logged on the root logger
                    logging.getLogger().addFilter(quiet)
                    try:
                        quantize_dynamic(str(source), str(out), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                                         per_channel=True, nodes_to_exclude=attention,
                                         extra_options={"DefaultTensorType": 1})  # FLOAT: Gelu's output type
                    finally:
                        logging.getLogger().removeFilter(quiet)
                    data = out.read_bytes()
                with contextlib.suppress(OSError):  # a cache that cannot be written: quantised at each start
                    atomic_write_bytes(path, data)
            self.path = path
            try:
                data = data if data is not None else path.read_bytes()
                if not _quantised(data):
                    raise RiskrankError("it has no int8 products")  # e.g. a float32 graph under this name
                self._bytes = data  # the session loads the bytes just checked: the file is read once
                self.session = self._session(threads)
                cosine = float((self.encode(_PROBE) * ref).sum(axis=1).min())
            except Exception as exc:  # an unreadable or foreign file: rebuilt once
                problem = f"cannot load {path} ({str(exc).splitlines()[0][:160]})"
            else:
                if cosine >= MIN_INT8_COSINE:
                    return
                problem = f"{path} gives embeddings at cosine {cosine:.3f} to the float32 pass (at least {MIN_INT8_COSINE})"
            if attempt:
                raise RiskrankError(f"the int8 ONNX encoder: {problem}")

    def encode(self, texts: list[str], batch_size: int = 64, desc: str | None = None) -> np.ndarray:
        """As :meth:`NumpyEncoder.encode`; with int8 weights one text per run: the quantiser
        scales each product's activations by the whole run's range, so in a batch a text's
        embedding would depend on the texts beside it (a task ranked differently under load).
        Several texts (concurrent requests' tasks) run two at a time instead, which on two
        cores encodes eight tasks in about two thirds of the time of one after another."""
        if self.weights != "int8":
            return super().encode(texts, batch_size, desc)
        with self._lock:
            encs = self.tokenizer.encode_batch(list(texts))
            if self._pool is None and len(encs) > 1:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=PARALLEL_RUNS, thread_name_prefix="riskrank-int8")
        out = np.empty((len(encs), self.dim), np.float32)
        if not encs:
            return out
        rows = self._pool.map(self._one, encs) if len(encs) > 1 else map(self._one, encs)
        if desc:
            from tqdm.auto import tqdm

            rows = tqdm(rows, total=len(encs), desc=desc, unit="text", leave=False)
        for i, row in enumerate(rows):
            out[i] = row
        return out

    def _one(self, enc: Any) -> np.ndarray:
        ids = np.asarray([enc.ids], np.int64)
        return self._forward(ids, np.asarray([enc.type_ids], np.int64), np.ones(ids.shape, np.float32))[0]

    def _session(self, threads: int | None) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        # Its own threads, parked when idle (no spin-waiting, which costs dearly on a busy
        # machine): measured on 2 cores, a 48-token query 10.2 ms on one thread, 7.6 ms on two;
        # a batch of 8 concurrent queries 52 ms and 32 ms.
        opts.intra_op_num_threads = int(threads or min(4, os.cpu_count() or 1))
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        source = self._bytes if self._bytes is not None else str(self.path)
        return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])

    def _build(self) -> None:
        """Write :meth:`_graph` to the cache (kept in memory where the cache cannot be written)."""
        from riskrank.fileio import atomic_write_bytes

        data = self._graph()
        try:
            atomic_write_bytes(self.path, data)
        except OSError as exc:  # a cache that cannot be written: built each start, from memory
            logging.getLogger("riskrank.encoder").warning(
                "riskrank: cannot keep the encoder's ONNX graph in %s (%s); it is rebuilt at each start", self.path.parent, exc)
            self._bytes = data

    def _graph(self, fused_gelu: bool = False) -> bytes:
        """The BERT encoder as an ONNX graph (opset 17): inputs ``input_ids``,
        ``token_type_ids``, ``position_ids`` and the additive attention bias (computed by the
        caller, as :meth:`NumpyEncoder._forward` does), output the last hidden state.
        ``fused_gelu``: GELU as ONNX Runtime's own ``Gelu`` kernel (about a sixth of the int8
        pass's time saved) instead of its ``Erf`` formula, whose float32 embeddings are the ones
        held to sentence-transformers'."""
        from onnx import TensorProto, helper, numpy_helper

        w, d, h = self.w, self.dim, self.heads
        hd = d // h
        inits: list[Any] = []
        nodes: list[Any] = []

        def const(name: str, value: Any) -> str:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
            return name

        def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
            nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
            return out

        def norm(x: str, ln: tuple[np.ndarray, np.ndarray], name: str) -> str:
            return node("LayerNormalization", [x, const(f"{name}.g", ln[0]), const(f"{name}.b", ln[1])], f"{name}.out",
                        axis=-1, epsilon=self.eps)

        def dense(x: str, wb: tuple[np.ndarray, np.ndarray], name: str) -> str:
            y = node("MatMul", [x, const(f"{name}.w", wb[0])], f"{name}.mm")
            return node("Add", [y, const(f"{name}.bias", wb[1])], f"{name}.out")

        e = node("Add", [node("Gather", [const("word", w["word"]), "input_ids"], "e.word"),
                         node("Gather", [const("pos", w["pos"]), "position_ids"], "e.pos")], "e.wp")
        e = node("Add", [e, node("Gather", [const("type", w["type"]), "token_type_ids"], "e.type")], "e.sum")
        x = norm(e, w["ln"], "e.ln")
        split_shape = const("split_shape", np.array([0, 0, 3, h, hd], np.int64))
        merge_shape = const("merge_shape", np.array([0, 0, d], np.int64))
        scale = const("scale", np.array(1.0 / math.sqrt(hd), np.float32))
        if not fused_gelu:
            half, one, rsqrt2 = (const(n, np.array(v, np.float32)) for n, v in
                                 (("half", 0.5), ("one", 1.0), ("rsqrt2", 1 / math.sqrt(2))))
        for i, layer in enumerate(w["layers"]):
            p = f"l{i}"
            qkv = node("Reshape", [dense(x, layer["qkv"], f"{p}.qkv"), split_shape], f"{p}.qkv5")
            qkv = node("Transpose", [qkv], f"{p}.qkvT", perm=[2, 0, 3, 1, 4])  # [3, b, h, n, hd]
            q, k, v = (node("Gather", [qkv, const(f"{p}.i{j}", np.array(j, np.int64))], f"{p}.{n}", axis=0)
                       for j, n in enumerate("qkv"))
            att = node("MatMul", [q, node("Transpose", [k], f"{p}.kT", perm=[0, 1, 3, 2])], f"{p}.qk")
            att = node("Add", [node("Mul", [att, scale], f"{p}.qks"), "attention_bias"], f"{p}.att")
            ctx = node("MatMul", [node("Softmax", [att], f"{p}.p", axis=-1), v], f"{p}.ctx")
            ctx = node("Reshape", [node("Transpose", [ctx], f"{p}.ctxT", perm=[0, 2, 1, 3]), merge_shape], f"{p}.ctx3")
            x = norm(node("Add", [dense(ctx, layer["o"], f"{p}.o"), x], f"{p}.res1"), layer["ln1"], f"{p}.ln1")
            up = dense(x, layer["up"], f"{p}.up")
            if fused_gelu:
                nodes.append(helper.make_node("Gelu", [up], [f"{p}.gelu"], name=f"{p}.gelu", domain="com.microsoft"))
                gelu = f"{p}.gelu"
            else:
                erf = node("Erf", [node("Mul", [up, rsqrt2], f"{p}.us")], f"{p}.erf")
                gelu = node("Mul", [node("Mul", [up, half], f"{p}.uh"), node("Add", [erf, one], f"{p}.e1")], f"{p}.gelu")
            x = norm(node("Add", [dense(gelu, layer["down"], f"{p}.down"), x], f"{p}.res2"), layer["ln2"], f"{p}.ln2")
        nodes.append(helper.make_node("Identity", [x], ["hidden"]))
        ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
                for n in ("input_ids", "token_type_ids")]
        graph = helper.make_graph(
            nodes, "riskrank-bert", [*ints, helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "tokens"]),
                                     helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT, ["batch", 1, 1, "tokens"])],
            [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "tokens", d])], inits)
        opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if fused_gelu else [])
        model = helper.make_model(graph, opset_imports=opsets, producer_name="riskrank")
        model.ir_version = 8
        return model.SerializeToString()

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.w is not None and not hasattr(self, "session"):
            return super()._forward(ids, types, mask)  # the reference pass, before the session exists
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :].astype(np.float32)
        pos = np.arange(ids.shape[1], dtype=np.int64)[None]
        hidden = self.session.run(None, {"input_ids": ids, "token_type_ids": types, "position_ids": pos,
                                         "attention_bias": bias})[0]
        m = mask[..., None]
        emb = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
