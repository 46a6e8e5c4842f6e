"""The checkpoint directory: what ``riskrank train`` writes and every other command loads.

::

    heads.safetensors   the dual head's weights (safetensors: never unpickled)
    graph.npz           the ToolGraph built from the training queries (registry-specific)
    checkpoint.json     the sidecar: format, encoder, head shape, the inference settings chosen
                        on validation (lambda, alpha, normalisation), hyperparameters,
                        training data fingerprints, validation records, the weights' sha256

Heads only: the frozen encoder is named (its identity must match at load), not stored. Each
file is written atomically and the sidecar last, with the weights' sha256, so a torn
directory is detected on load. This module is the only one that knows the layout.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from riskrank._version import __version__
from riskrank.errors import CheckpointError
from riskrank.fileio import atomic_write_bytes, dumps
from riskrank.graph import ToolGraph
from riskrank.heads import DualHead
from riskrank.training import TrainResult

WEIGHTS = "heads.safetensors"
SIDECAR = "checkpoint.json"
GRAPH_FILE = "graph.npz"
FORMAT = "riskrank-heads/1"


@dataclass
class Checkpoint:
    """Loaded (or freshly trained) heads and their sidecar; ``path`` is the directory it was
    loaded from, None for one that lives only in memory."""

    model: DualHead
    meta: dict[str, Any]
    path: Path | None = None

    @property
    def lam(self) -> float:
        return float(self.meta["inference"]["lam"])

    @property
    def encoder_identity(self) -> str:
        return str(self.meta["encoder"]["identity"])

    @property
    def inference(self) -> dict[str, Any]:
        """The settings chosen on validation: lam, alpha, normalisation."""
        return dict(self.meta.get("inference", {}))

    def graph_for(self, registry_fingerprint: str) -> ToolGraph | None:
        """The saved ToolGraph, if there is one and it was built for this registry (a graph
        is registry-specific; another registry gets its own)."""
        if self.path is None or not (self.path / GRAPH_FILE).exists():
            return None
        if self.meta["training_data"].get("registry_fingerprint") != registry_fingerprint:
            return None
        return ToolGraph.from_npz(self.path / GRAPH_FILE)


def sidecar(result: TrainResult, *, encoder: dict[str, Any], registry_fingerprint: str,
            training_data: dict[str, Any] | None = None, inference: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sidecar of a training result (without the weights' sha256, which saving adds)."""
    return {
        "format": FORMAT,
        "riskrank_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "encoder": encoder,
        "head": {"design": result.model.design, "dim": result.model.dim, "hidden": result.model.hidden,
                 "rank": result.model.rank, "parameters": result.model.n_parameters()},
        "inference": {"lam": result.lam, **(inference or {})},
        "hyperparameters": asdict(result.config),
        "training_data": {"registry_fingerprint": registry_fingerprint, **(training_data or {})},
        "counts": result.counts,
        "validation": result.validation,
        "history": result.history,
        "train_seconds": result.seconds,
    }


def in_memory(result: TrainResult, **meta: Any) -> Checkpoint:
    """A checkpoint around a training result, no files involved (``meta``: as :func:`sidecar`)."""
    return Checkpoint(result.model, sidecar(result, **meta))


def save_checkpoint(
    result: TrainResult, path: str | Path, *, encoder: dict[str, Any], registry_fingerprint: str,
    training_data: dict[str, Any] | None = None, inference: dict[str, Any] | None = None, graph: ToolGraph | None = None,
) -> Path:
    """Write ``heads.safetensors``, ``graph.npz`` (when a graph is given) and, last,
    ``checkpoint.json`` into directory ``path``."""
    from safetensors.torch import save

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path}: exists and is not a directory")
    state = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    blob = save(state)
    atomic_write_bytes(path / WEIGHTS, blob)
    if graph is not None:
        graph.to_npz(path / GRAPH_FILE)
    meta = sidecar(result, encoder=encoder, registry_fingerprint=registry_fingerprint, training_data=training_data,
                   inference=inference)
    meta["weights_sha256"] = hashlib.sha256(blob).hexdigest()
    atomic_write_bytes(path / SIDECAR, dumps(meta).encode())
    return path


def read_sidecar(path: str | Path) -> dict[str, Any]:
    """The sidecar as it is on disk, or {} when it is missing or not JSON (for a caller that
    only wants a hint, such as the encoder name; :func:`load_checkpoint` names the problem)."""
    side = Path(path) / SIDECAR
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def load_checkpoint(path: str | Path, *, encoder_identity: str | None = None, dim: int | None = None) -> Checkpoint:
    """Load a checkpoint directory; never unpickles. A mismatched encoder or dimension, a
    missing file, a torn or corrupt pair is a :class:`CheckpointError` naming the problem."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint directory")
    side, weights = path / SIDECAR, path / WEIGHTS
    for f in (side, weights):
        if not f.is_file():
            raise CheckpointError(f"{path}: missing {f.name}; not a riskrank checkpoint")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise CheckpointError(f"{side}: unknown format {meta.get('format')!r} (expected {FORMAT})")
        head = meta["head"]
        design, ck_dim = head["design"], int(head["dim"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{side}: corrupt checkpoint sidecar ({exc})") from None
    blob = weights.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("weights_sha256"):
        raise CheckpointError(f"{weights}: weights do not match the sidecar's sha256 (corrupt or partially written)")
    if dim is not None and ck_dim != dim:
        raise CheckpointError(f"{path}: checkpoint heads expect {ck_dim}-d embeddings but the encoder gives {dim}-d")
    if encoder_identity is not None and meta["encoder"].get("identity") != encoder_identity:
        raise CheckpointError(
            f"{path}: trained on encoder {meta['encoder'].get('identity')!r}, not {encoder_identity!r}; "
            "pass the same --encoder or retrain"
        )
    try:
        state = load(blob)
        model = DualHead(ck_dim, design, int(head["hidden"]), int(head["rank"]))
        model.load_state_dict(state, strict=True)
    except (SafetensorError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{weights}: cannot load head weights ({str(exc).splitlines()[0]})") from None
    return Checkpoint(model.eval(), meta, path)


def is_checkpoint_dir(path: str | Path) -> bool:
    return (Path(path) / SIDECAR).is_file()
