"""The checkpoint directory: what ``riskrank train`` writes and every other command loads.

::

    heads.safetensors   the dual head's weights (safetensors: never unpickled)
    graph.npz           the ToolGraph built from the training queries (registry-specific)
    need.safetensors    the need head's weights (the context modes), when it was trained
    checkpoint.json     the sidecar: format, encoder, head shape, the inference settings chosen
                        on validation (lambda, alpha, normalisation), hyperparameters,
                        training data fingerprints, validation records, and ``files``: the
                        sha256 of every other file (the manifest)

Heads only: the frozen encoder is named (its identity must match at load), not stored. This
module is the only one that knows the layout.

A checkpoint commits as a whole. Every file is written into a staging directory beside the
target (``.NAME.staging-*``), fsynced, and the staging directory then takes the target's
place in one rename: an atomic exchange with the old checkpoint where the system has one
(Linux ``renameat2(RENAME_EXCHANGE)``), else two renames, between which a crash leaves the
old checkpoint whole at ``.NAME.old-*`` and :func:`load_checkpoint` says where it is. A
reader (or a crash) never meets heads of one run beside the graph of another. On load, the
manifest is checked too: a file it lists that is missing or differs, or an artefact it does
not list, is an error, so a hand-assembled or tampered directory is refused.

The sidecar is validated against :data:`SIDECAR_SCHEMA`, one line per key (type, range,
choices, required or not). Two kinds of key:

- plain keys (``inference.lam``) change what the checkpoint means: an unknown plain key in a
  checked block is an error (a typo such as ``lamda`` must not silently fall back to a
  default, and an older riskrank must not half-understand a newer checkpoint);
- namespaced keys, ``NAMESPACE:NAME`` (``lexical:weight``, ``quality:risk_head_collapsed``),
  are extensions: a reader that knows one validates it (add it to the schema), a reader that
  does not keeps and ignores it. A later version adds information that older versions may
  skip as a namespaced key, and anything they must understand as a plain key (or a new
  format).

Every load error is one line naming the file and the problem.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import io
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riskrank._version import __version__
from riskrank.contamination import DIGEST_CHARS, is_digest
from riskrank.context import NEED_FEATURES, NeedHead
from riskrank.errors import CheckpointError, RiskrankError
from riskrank.fileio import DIR_MODE, atomic_writer, dumps, loads_strict, read_regular_file, show
from riskrank.first_stage import FUSION_RULES, LEXICAL_FEATURES, NORMS, Fusion
from riskrank.graph import NORMALISATIONS, ToolGraph
from riskrank.heads import DESIGNS, PENALTIES, PENALTY_SOURCES, HeadWeights, as_weights
from riskrank.modes import MAX_LAMBDA

WEIGHTS = "heads.safetensors"
SIDECAR = "checkpoint.json"
GRAPH_FILE = "graph.npz"
NEED_FILE = "need.safetensors"
#: The artefacts a checkpoint directory may hold besides the sidecar.
ARTEFACTS = (WEIGHTS, GRAPH_FILE, NEED_FILE)
#: A model card beside the files (the base model's; optional): its ``files`` map holds the
#: sha256 of each file of the build it describes (``riskrank.base.CARD_JSON``, the same name).
CARD_FILE = "card.json"
FORMAT = "riskrank-heads/2"
#: Formats this version reads: /1 (no manifest; the graph is range-checked only) and /2.
READABLE_FORMATS = ("riskrank-heads/1", FORMAT)
#: The pipeline names ``inference.pipelines`` may hold.
PIPELINE_NAMES = r"(top[0-9]{1,7}/)?core(\+rule|\+graph|\+graph\+rule|\+graph\+rule_pred|\+graph\+context|\+graph\+context\+rule)?"
#: The largest sidecar read (a sidecar is a few kB; validation records make it tens).
MAX_SIDECAR_BYTES = 16 * 1024 * 1024


# -- the sidecar schema ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Key:
    """What one sidecar key may hold. ``kind``: ``str``, ``int``, ``number`` (int or float,
    finite), ``bool``, ``dict``, ``list`` or ``sha256`` (64 hex digits); ``low``/``high``: an
    inclusive range for numbers; ``choices``: the allowed values; ``nullable``: null allowed;
    ``open``: a dict whose own keys are not checked (free-form records); ``items``: the
    values a list's elements may take; ``each``: a dict whose keys are names (matching the
    regex ``names``) and whose values are dicts of exactly these keys."""

    kind: str
    required: bool = True
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    open: bool = False
    items: tuple[Any, ...] | None = None
    each: dict[str, Key] | None = None
    names: str | None = None
    item: Callable[[Any], bool] | None = None
    """A check every element of a list must pass (``item_words`` says what it wants)."""
    item_words: str = ""

    def problem(self, value: Any) -> str | None:
        """Why ``value`` does not fit, or None."""
        if value is None:
            return None if self.nullable else "must not be null"
        ok = {
            "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "dict": isinstance(value, dict),
            "list": isinstance(value, list),
            "sha256": isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value),
        }[self.kind]
        if not ok:
            return f"must be {_KIND_WORDS[self.kind]}, got {show(value)}"
        if self.kind in ("int", "number"):
            if not math.isfinite(value):
                return f"must be a finite number, got {show(value)}"
            if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
                return f"must be in [{self.low:g}, {self.high:g}], got {show(value)}" if self.high is not None \
                    else f"must be >= {self.low:g}, got {show(value)}"
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}, got {show(value)}"
        if self.items is not None and any(v not in self.items for v in value):
            return f"may only hold {', '.join(map(str, self.items))}, got {show(value)}"
        if self.item is not None:
            for v in value:
                if not self.item(v):
                    return f"may only hold {self.item_words}, got {show(v)}"
        if self.each is not None:
            for name, sub in value.items():
                if self.names is not None and not re.fullmatch(self.names, name):
                    return f"has an unknown entry {show(name)}"
                if not isinstance(sub, dict):
                    return f"{name} must be a JSON object, got {show(sub)}"
                for key in sub:
                    if key not in self.each:
                        return f"{name} has an unknown key {show(key)}"
                for key, spec in self.each.items():
                    if key not in sub:
                        if spec.required:
                            return f"{name} is missing {key}"
                        continue
                    why = spec.problem(sub[key])
                    if why:
                        return f"{name}.{key} {why}"
        return None


_KIND_WORDS = {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false",
               "dict": "a JSON object", "list": "a JSON list", "sha256": "a sha256 (64 lower-case hex digits)"}

#: Every key of the sidecar, by dotted path. Extending the sidecar is one line here (and, for
#: a key older versions may ignore, a ``namespace:name`` key: see the module docstring).
SIDECAR_SCHEMA: dict[str, Key] = {
    "format": Key("str", choices=READABLE_FORMATS),
    "riskrank_version": Key("str", required=False),
    "created": Key("str", required=False),
    "encoder": Key("dict"),
    "encoder.identity": Key("str"),
    "encoder.name": Key("str", required=False, nullable=True),
    "encoder.dim": Key("int", required=False, low=1),
    "head": Key("dict"),
    "head.design": Key("str", choices=DESIGNS),
    "head.dim": Key("int", low=1),
    "head.hidden": Key("int", low=1),
    "head.rank": Key("int", low=1),
    "head.parameters": Key("int", required=False, low=0),
    # The lexical features the relevance head reads (none: the dense head) and what lambda
    # multiplies; a checkpoint without them is a dense head with the paper's penalty.
    "head.lexical": Key("list", required=False, items=LEXICAL_FEATURES),
    "head.penalty": Key("str", required=False, choices=PENALTIES),
    "inference": Key("dict"),
    "inference.lam": Key("number", low=0.0, high=MAX_LAMBDA),
    "inference.alpha": Key("number", required=False, low=0.0, high=1.0),
    "inference.normalisation": Key("str", required=False, choices=NORMALISATIONS),
    "inference.residual_weight": Key("number", required=False, low=0.0, high=100.0),
    "inference.penalty_source": Key("str", required=False, choices=PENALTY_SOURCES),
    "inference.label_lam": Key("number", required=False, low=0.0, high=MAX_LAMBDA),
    "inference.min_score": Key("number", required=False, nullable=True, low=0.0, high=1.0),
    # The hybrid first stage's fusion, chosen on the training queries.
    "inference.fusion": Key("dict", required=False),
    "inference.fusion.rule": Key("str", choices=FUSION_RULES),
    "inference.fusion.norm": Key("str", nullable=True, choices=NORMS),
    "inference.fusion.weight": Key("number", low=0.0, high=1.0),
    "inference.fusion.k": Key("int", required=False, nullable=True, low=1),
    # lambda, alpha and normalisation per pipeline (core, core+graph+rule, top100/core, ...).
    "inference.pipelines": Key("dict", required=False, names=PIPELINE_NAMES, each={
        "lam": Key("number", low=0.0, high=MAX_LAMBDA), "alpha": Key("number", low=0.0, high=1.0),
        "normalisation": Key("str", choices=NORMALISATIONS)}),
    # The context stage per context pipeline: need threshold, relevance margin (null: none) and the
    # penalty of a task that needs a risky tool (the pipeline's own lambda is the hold-back one),
    # and the rule pipeline's risk cap for such a task (absent: 1).
    "inference.context": Key("dict", required=False, names=r"(top[0-9]{1,7}/)?core\+graph\+context(\+rule)?", each={
        "tau": Key("number", low=0.0, high=1.0), "margin": Key("number", nullable=True, low=-MAX_LAMBDA, high=MAX_LAMBDA),
        "lam_need": Key("number", low=0.0, high=MAX_LAMBDA), "cap_need": Key("int", required=False, low=1, high=100)}),
    # The need head (weights in need.safetensors): its feature groups and how it was chosen.
    "need_head": Key("dict", required=False),
    "need_head.features": Key("list", items=NEED_FEATURES),
    "need_head.C": Key("number", required=False, low=0.0),
    "need_head.val_auc": Key("number", required=False, nullable=True, low=0.0, high=1.0),
    "need_head.chosen_by": Key("str", required=False),
    "need_head.n_train": Key("int", required=False, low=0),
    "need_head.train_positives": Key("int", required=False, low=0),
    "need_head.n_val": Key("int", required=False, low=0),
    "need_head.val_positives": Key("int", required=False, low=0),
    "need_head.grid": Key("list", required=False),
    # The risk head's held-out check: a head that has not learned is not used for levels.
    "risk_head": Key("dict", required=False),
    "risk_head.heldout_auc": Key("number", nullable=True, low=0.0, high=1.0),
    "risk_head.heldout_auc_p_risky": Key("number", required=False, nullable=True, low=0.0, high=1.0),
    "risk_head.level_span": Key("number", low=0.0, high=4.0),
    "risk_head.folds": Key("int", required=False, low=1),
    "risk_head.learned": Key("bool"),
    "risk_head.reason": Key("str", required=False, nullable=True),
    "hyperparameters": Key("dict", required=False, open=True),
    "training_data": Key("dict"),
    "training_data.registry_fingerprint": Key("str"),
    "training_data.queries_fingerprint": Key("str", required=False),
    "training_data.n_queries": Key("int", required=False, low=0),
    "training_data.tool_template": Key("str", required=False),
    # Digests of the training task texts (riskrank.contamination): evaluate refuses to score
    # the trained methods on queries the checkpoint trained on. Absent in older checkpoints.
    "training_data.query_sha256": Key("list", required=False, item=is_digest,
                                      item_words=f"{DIGEST_CHARS}-hex-digit task digests"),
    "counts": Key("dict", required=False, open=True),
    "validation": Key("dict", required=False, open=True),
    "history": Key("list", required=False),
    "train_seconds": Key("number", required=False, low=0.0),
    "weights_sha256": Key("sha256"),
    "files": Key("dict", required=False),  # required from format /2 on (checked below)
    **{f"files.{name}": Key("sha256", required=False) for name in ARTEFACTS},
}


def validate_sidecar(meta: Any, where: str) -> dict[str, Any]:
    """``meta`` checked against :data:`SIDECAR_SCHEMA`; the first problem is one
    :class:`CheckpointError` naming ``where`` and the key."""
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where}: the sidecar must be a JSON object, got {type(meta).__name__}")
    if meta.get("format") not in READABLE_FORMATS:
        raise CheckpointError(f"{where}: unknown format {show(meta.get('format'))} (this riskrank reads {', '.join(READABLE_FORMATS)})")
    blocks = {path.rsplit(".", 1)[0] for path in SIDECAR_SCHEMA if "." in path}
    for path, key in SIDECAR_SCHEMA.items():
        parent, _, name = path.rpartition(".")
        container = _lookup(meta, parent) if parent else meta
        if not isinstance(container, dict):
            continue  # the parent's own check reports it
        if name not in container:
            if key.required:
                raise CheckpointError(f"{where}: missing {path}")
            continue
        why = key.problem(container[name])
        if why:
            raise CheckpointError(f"{where}: {path} {why}")
    for block in ("", *sorted(blocks)):
        container = _lookup(meta, block) if block else meta
        if not isinstance(container, dict) or (block and SIDECAR_SCHEMA[block].open):
            continue
        for name in container:
            path = f"{block}.{name}" if block else name
            if path not in SIDECAR_SCHEMA and ":" not in name:
                raise CheckpointError(f"{where}: unknown key {show(path)} (a typo, or a newer riskrank's checkpoint; "
                                      "extension keys are named NAMESPACE:NAME)")
    if meta["format"] == FORMAT and "files" not in meta:
        raise CheckpointError(f"{where}: missing files (the manifest of a {FORMAT} checkpoint)")
    if meta["head"]["dim"] != meta["encoder"].get("dim", meta["head"]["dim"]):
        raise CheckpointError(f"{where}: head.dim {meta['head']['dim']} differs from encoder.dim {meta['encoder']['dim']}")
    lexical = meta["head"].get("lexical") or []
    if lexical and tuple(lexical) != LEXICAL_FEATURES:
        raise CheckpointError(f"{where}: head.lexical must be [] or {', '.join(LEXICAL_FEATURES)} in this order "
                              f"(the features this riskrank computes), got {show(lexical)}")
    files = meta.get("files")
    if files is not None and files.get(WEIGHTS) not in (None, meta["weights_sha256"]):
        raise CheckpointError(f"{where}: files.{WEIGHTS} differs from weights_sha256")
    return meta


def _finite_or_null(value: Any) -> Any:
    """NaN and infinities (a training record's "no loss at epoch 0") as JSON null: the sidecar
    is strict JSON, readable by any parser."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy values
        return _finite_or_null(value.tolist())
    return value


def _lookup(meta: dict[str, Any], dotted: str) -> Any:
    out: Any = meta
    for part in dotted.split("."):
        if not isinstance(out, dict):
            return None
        out = out.get(part)
    return out


# -- the checkpoint -------------------------------------------------------------------------------------
@dataclass
class Checkpoint:
    """Loaded (or freshly trained) heads and their sidecar; ``path`` is the directory it was
    loaded from, None for one that lives only in memory."""

    model: HeadWeights
    meta: dict[str, Any]
    path: Path | None = None
    graph_bytes: bytes | None = field(default=None, repr=False)
    """``graph.npz`` as read and verified at load (the graph is parsed when first asked for)."""
    need_head: NeedHead | None = None
    """The need head of the context modes; None for a checkpoint trained without one."""

    @property
    def lam(self) -> float:
        return float(self.meta["inference"]["lam"])

    @property
    def encoder_identity(self) -> str:
        return str(self.meta["encoder"]["identity"])

    @property
    def inference(self) -> dict[str, Any]:
        """The settings chosen on validation: lam, alpha, normalisation, ..."""
        return dict(self.meta.get("inference", {}))

    def graph_for(self, registry_fingerprint: str, n_tools: int | None = None) -> ToolGraph | None:
        """The saved ToolGraph, if there is one and it was built for this registry (a graph
        is registry-specific; another registry gets its own)."""
        if self.graph_bytes is None:
            return None
        if self.meta["training_data"].get("registry_fingerprint") != registry_fingerprint:
            return None
        where = str(self.path / GRAPH_FILE) if self.path is not None else GRAPH_FILE
        try:
            graph = ToolGraph.from_npz(io.BytesIO(self.graph_bytes), source=where)
        except RiskrankError as exc:
            raise CheckpointError(str(exc)) from None
        if n_tools is not None and graph.n_tools != n_tools:
            raise CheckpointError(f"{where}: the graph is for {graph.n_tools} tools, the registry has {n_tools}: retrain")
        return graph


@dataclass
class TrainResult:
    """What training produced, as a checkpoint saves it: the heads, the configuration they were
    trained with, the validated lambda, the history and validation records, counts and timing;
    the artefact type lives here, with the checkpoint, so that loading one needs no training code."""

    model: Any
    """The trained heads (a :class:`riskrank.training.modules.DualHead`; anything with
    ``weights() -> HeadWeights``: the checkpoint, part of the engine, imports no PyTorch)."""
    config: Any
    """The :class:`riskrank.training.TrainConfig` it was trained with (typed loosely: the
    checkpoint, part of the engine, imports no training code)."""
    lam: float
    history: list[dict[str, float]]
    validation: dict[str, Any]
    counts: dict[str, int]
    seconds: float
    warnings: list[str] = field(default_factory=list)
    fusion: Fusion | None = None
    risk_quality: dict[str, Any] = field(default_factory=dict)
    """The risk head's held-out check (:func:`risk_quality`)."""
    crossfit: dict[str, np.ndarray] = field(default_factory=dict)
    """Per tool, from risk heads that never saw its label: ``level_score``, ``p_risky`` (the
    penalty, p_risky penalty only), ``levels`` and ``fold``."""
    need_head: Any = None
    """The need head (:class:`riskrank.context.NeedHead`), trained by :func:`fit` when it has
    validation queries; None otherwise."""


def sidecar(result: TrainResult, *, encoder: dict[str, Any], registry_fingerprint: str,
            training_data: dict[str, Any] | None = None, inference: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sidecar of a training result (without the sha256s, which saving adds)."""
    heads = as_weights(result.model)
    return {
        "format": FORMAT,
        "riskrank_version": __version__,
        "created": _created(),
        "encoder": encoder,
        "head": {"design": heads.design, "dim": heads.dim, "hidden": heads.hidden, "rank": heads.rank,
                 "parameters": heads.n_parameters(), "lexical": list(heads.lexical), "penalty": heads.penalty},
        "inference": {"lam": result.lam, **(inference or {})},
        **({"risk_head": dict(result.risk_quality)} if result.risk_quality else {}),
        **({"need_head": need_info(result.need_head)} if result.need_head is not None else {}),
        "hyperparameters": asdict(result.config),
        "training_data": {"registry_fingerprint": registry_fingerprint, **(training_data or {})},
        "counts": result.counts,
        "validation": result.validation,
        "history": result.history,
        "train_seconds": result.seconds,
    }


def _created() -> str:
    """The sidecar's time stamp: now, or ``SOURCE_DATE_EPOCH`` when set (the reproducible-builds
    convention), so a rebuild of the same model on the same versions is byte-identical."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)) if epoch.isdigit() else time.gmtime())


def need_info(head: NeedHead) -> dict[str, Any]:
    """The sidecar's ``need_head`` block: the head's features and how it was chosen."""
    keys = ("C", "val_auc", "chosen_by", "n_train", "train_positives", "n_val", "val_positives", "grid")
    return {"features": list(head.features), **{k: head.info[k] for k in keys if k in head.info}}


def in_memory(result: TrainResult, **meta: Any) -> Checkpoint:
    """A checkpoint around a training result, no files involved (``meta``: as :func:`sidecar`)."""
    return Checkpoint(as_weights(result.model), sidecar(result, **meta), need_head=result.need_head)


# -- saving: one atomic commit --------------------------------------------------------------------------
def save_checkpoint(
    result: TrainResult, path: str | Path, *, encoder: dict[str, Any], registry_fingerprint: str,
    training_data: dict[str, Any] | None = None, inference: dict[str, Any] | None = None, graph: ToolGraph | None = None,
) -> Path:
    """Write ``heads.safetensors``, ``graph.npz`` (when a graph is given) and, last,
    ``checkpoint.json`` with their sha256s into a staging directory, then put it in place of
    directory ``path`` in one step (module docstring). ``path`` may not exist, be empty, or
    hold a checkpoint (which is replaced); a directory holding anything else is refused."""
    from safetensors.numpy import save

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path}: exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not is_checkpoint_dir(path):
        raise CheckpointError(f"{path}: a directory holding other files, not a checkpoint; not overwritten")
    blob = save(dict(as_weights(result.model).arrays))
    meta = sidecar(result, encoder=encoder, registry_fingerprint=registry_fingerprint, training_data=training_data,
                   inference=inference)
    meta["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _directory_lock(path.parent):
        _remove_leftovers(path)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.staging-", dir=path.parent))
        try:
            with atomic_writer(staging / WEIGHTS) as fh:
                fh.write(blob)
            files = {WEIGHTS: meta["weights_sha256"]}
            if graph is not None:
                graph.to_npz(staging / GRAPH_FILE)
                files[GRAPH_FILE] = _sha256_file(staging / GRAPH_FILE)
            if result.need_head is not None:
                need_blob = save({k: np.ascontiguousarray(v) for k, v in result.need_head.arrays().items()})
                with atomic_writer(staging / NEED_FILE) as fh:
                    fh.write(need_blob)
                files[NEED_FILE] = hashlib.sha256(need_blob).hexdigest()
            meta["files"] = files
            validate_sidecar(meta, f"{path / SIDECAR} (about to be written)")
            with atomic_writer(staging / SIDECAR) as fh:
                fh.write(dumps(_finite_or_null(meta), allow_nan=False).encode())
            os.chmod(staging, DIR_MODE)  # mkdtemp's 0700 would make the checkpoint private
            _fsync_dir(staging)
            _commit(staging, path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return path


@contextlib.contextmanager
def _directory_lock(parent: Path) -> Iterator[None]:
    """An exclusive lock on the parent directory: two saves beside each other take turns, and
    leftovers found while holding it belong to no running save."""
    fd = os.open(parent, os.O_RDONLY)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):  # pragma: no cover - no advisory locks here
            pass
        yield
    finally:
        os.close(fd)


def _leftovers(path: Path, kind: str) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.{kind}-*"))


def _remove_leftovers(path: Path) -> None:
    """Staging directories of killed saves; an old copy only once a checkpoint is in place
    again (until then it is the only whole one)."""
    for p in _leftovers(path, "staging"):
        shutil.rmtree(p, ignore_errors=True)
    if is_checkpoint_dir(path):
        for p in _leftovers(path, "old"):
            shutil.rmtree(p, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux renameat2 with RENAME_EXCHANGE); False where
    the system or the file system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _commit(staging: Path, path: Path) -> None:
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        os.replace(staging, path)  # onto nothing, or onto an empty directory: one rename
    elif _exchange(staging, path):
        shutil.rmtree(staging, ignore_errors=True)  # staging now holds the old checkpoint
    else:
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.replace(path, old)  # a crash right here leaves the old checkpoint whole at `old`
        os.replace(staging, path)
        shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system can fsync a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- loading --------------------------------------------------------------------------------------------
def read_sidecar(path: str | Path) -> dict[str, Any]:
    """The sidecar as it is on disk, or {} when it is missing or not JSON (for a caller that
    only wants a hint, such as the encoder name; :func:`load_checkpoint` names the problem)."""
    side = Path(path) / SIDECAR
    try:
        meta = loads_strict(read_regular_file(side, max_bytes=MAX_SIDECAR_BYTES).decode("utf-8"), str(side), non_finite=True)
    except (OSError, RiskrankError, UnicodeDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _read(file: Path, what: str) -> bytes:
    try:
        return read_regular_file(file)
    except RiskrankError as exc:
        raise CheckpointError(f"{file}: {what} is {exc}") from None
    except OSError as exc:
        raise CheckpointError(f"{file}: cannot read the {what} ({exc.strerror or exc})") from None


def load_checkpoint(path: str | Path, *, encoder_identity: str | None = None, dim: int | None = None) -> Checkpoint:
    """Load a checkpoint directory; never unpickles. A mismatched encoder or dimension, a
    missing, torn, tampered or out-of-range part is a :class:`CheckpointError` naming the
    file and the problem."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    path = Path(path)
    if not path.is_dir():
        old = _leftovers(path, "old")
        if old:
            raise CheckpointError(f"{path}: missing; an interrupted save left the previous checkpoint at {old[-1]} "
                                  f"(rename it to {path.name}, or train again)")
        raise CheckpointError(f"{path}: no such checkpoint directory")
    side, weights = path / SIDECAR, path / WEIGHTS
    for f in (side, weights):
        if not f.is_file():
            raise CheckpointError(f"{path}: missing {f.name}; not a riskrank checkpoint")
    if (path / CARD_FILE).is_file():
        _check_card(path)
    raw = _read(side, "sidecar")
    if len(raw) > MAX_SIDECAR_BYTES:
        raise CheckpointError(f"{side}: {len(raw):,} bytes; not a riskrank sidecar")
    try:
        # NaN is let through for format /1 sidecars (their records held NaN); the schema
        # still requires every number it checks to be finite.
        meta = loads_strict(raw.decode("utf-8"), str(side), CheckpointError, non_finite=True)
    except UnicodeDecodeError:
        raise CheckpointError(f"{side}: corrupt checkpoint sidecar (not UTF-8)") from None
    except CheckpointError as exc:
        raise CheckpointError(f"{side}: corrupt checkpoint sidecar ({str(exc).removeprefix(str(side) + ': ')})") from None
    validate_sidecar(meta, str(side))
    blob = _read(weights, "weights file")
    if hashlib.sha256(blob).hexdigest() != meta["weights_sha256"]:
        raise CheckpointError(f"{weights}: weights do not match the sidecar's sha256 (corrupt, partially written, or of another run)")
    graph_bytes = _verified_graph(path, meta)
    ck_dim = meta["head"]["dim"]
    if dim is not None and ck_dim != dim:
        raise CheckpointError(f"{path}: checkpoint heads expect {ck_dim}-d embeddings but the encoder gives {dim}-d")
    if encoder_identity is not None and meta["encoder"]["identity"] != encoder_identity:
        raise CheckpointError(
            f"{path}: trained on encoder {meta['encoder']['identity']!r}, not {encoder_identity!r}; "
            "pass the same --encoder or retrain"
        )
    head = meta["head"]
    try:
        state = load(blob)
    except (SafetensorError, ValueError) as exc:
        raise CheckpointError(f"{weights}: cannot load head weights ({str(exc).splitlines()[0][:160]})") from None
    try:
        model = HeadWeights.from_state(ck_dim, head["design"], head["hidden"], head["rank"], tuple(head.get("lexical", ())),
                                       head.get("penalty", "paper"), state)
    except (RuntimeError, ValueError) as exc:
        # the weights passed their sha256, so it is the sidecar's head block that is wrong
        shape = {k: head[k] for k in ("design", "dim", "hidden", "rank", "lexical", "penalty") if k in head}
        raise CheckpointError(f"{side}: head {shape} does not fit the weights in {WEIGHTS} "
                              f"({str(exc).splitlines()[-1].strip()[:120]})") from None
    return Checkpoint(model, meta, path, graph_bytes, _verified_need_head(path, meta, ck_dim))


def _check_card(path: Path) -> None:
    """A folder with a model card is the build the card describes: each file the card's
    ``files`` names has the sha256 it records (a sidecar or weights from another build beside
    the card, or a card copied over another model, is refused)."""
    card_path = path / CARD_FILE
    raw = _read(card_path, "model card")
    try:
        card = loads_strict(raw.decode("utf-8"), str(card_path), CheckpointError)
    except UnicodeDecodeError:
        raise CheckpointError(f"{card_path}: corrupt model card (not UTF-8)") from None
    files = card.get("files") if isinstance(card, dict) else None
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"{card_path}: the model card lists no files' sha256 (files); not the card of this model")
    for name, digest in sorted(files.items()):
        f = path / str(name)
        if Path(str(name)).name != name or not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise CheckpointError(f"{card_path}: files.{name}: not a file name with a sha256")
        got = hashlib.sha256(_read(f, name)).hexdigest() if f.is_file() else None
        if got != digest:
            now = "missing" if got is None else f"sha256 {got[:12]}"
            raise CheckpointError(f"{f}: does not match its model card ({CARD_FILE} records sha256 {digest[:12]}, the file is "
                                  f"{now}): the file is damaged (partially written, truncated, edited) or of another "
                                  "build than the card; reinstall or rebuild the folder (`make base-model` for the "
                                  "shipped model)")


def _verified_need_head(path: Path, meta: Mapping[str, Any], dim: int) -> NeedHead | None:
    """The need head, checked against the manifest and the sidecar; None when there is none."""
    files = meta.get("files") or {}
    info = meta.get("need_head")
    if NEED_FILE not in files:
        if info is not None:
            raise CheckpointError(f"{path / SIDECAR}: need_head is set but the manifest lists no {NEED_FILE}")
        return None
    if info is None:
        raise CheckpointError(f"{path / NEED_FILE}: the sidecar has no need_head block for it")
    from safetensors import SafetensorError
    from safetensors.numpy import load as load_np

    data = _read(path / NEED_FILE, "need head file")
    if hashlib.sha256(data).hexdigest() != files[NEED_FILE]:
        raise CheckpointError(f"{path / NEED_FILE}: does not match the sidecar's sha256 (corrupt, partially written, or of another run)")
    try:
        arrays = load_np(data)
        head = NeedHead.from_arrays(tuple(info["features"]), arrays, dict(info))
    except (SafetensorError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{path / NEED_FILE}: cannot load the need head ({str(exc).splitlines()[0][:160]})") from None
    except CheckpointError as exc:
        raise CheckpointError(f"{path / NEED_FILE}: {exc}") from None
    if head.w.shape[0] != head.input_dim(dim):
        raise CheckpointError(f"{path / NEED_FILE}: {head.w.shape[0]} weights for features {list(head.features)} at dimension {dim}")
    return head


def _verified_graph(path: Path, meta: Mapping[str, Any]) -> bytes | None:
    """``graph.npz``'s bytes, checked against the manifest; None when there is no graph."""
    graph = path / GRAPH_FILE
    files = meta.get("files")
    if files is None:  # format /1: no manifest; the graph is range-checked when parsed
        return _read(graph, "graph file") if graph.exists() else None
    for name in ARTEFACTS:
        present, listed = (path / name).exists(), name in files
        if listed and not present:
            raise CheckpointError(f"{path / name}: missing, but the sidecar's manifest lists it (a torn or partial copy)")
        if present and not listed:
            raise CheckpointError(f"{path / name}: not part of this checkpoint (the sidecar's manifest does not list it)")
    if GRAPH_FILE not in files:
        return None
    data = _read(graph, "graph file")
    if hashlib.sha256(data).hexdigest() != files[GRAPH_FILE]:
        raise CheckpointError(f"{graph}: does not match the sidecar's sha256 (corrupt, partially written, or of another run)")
    return data


def is_checkpoint_dir(path: str | Path) -> bool:
    return (Path(path) / SIDECAR).is_file()
