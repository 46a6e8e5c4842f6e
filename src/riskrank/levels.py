"""The level model: what level an unaudited tool is served at, from its embedding.

Three small heads read the frozen tool embedding, and their mean is the level score the
served level comes from (``level = round(4 * score + 1)``, the rubric's scale):

* ``risk``: the rubric-level regression ((r - 1) / 4, sigmoid(MLP)), trained on the audited
  tools of the benchmarks and on real MCP tools whose declared hints stand in as weak levels
  (read-only L1, changes state L3, destructive L5);
* ``writes``: P(the tool changes state), a logistic regression on the MCP tools' readOnlyHint;
* ``destructive``: P(destructive), a logistic regression on their destructiveHint.

``score = (risk + 2 * (writes / 2 + destructive / 4)) / 3``: the two probabilities are put
on the level scale (a state change is about L3, destruction about L4) and weighed twice the
regression. The form was chosen by leaving one MCP server out at a time (docs/base-model.md);
keyword evidence and permission categories were measured as further inputs and added
nothing there, while "the higher of the head and the keywords" cost 0.2 of AUC, so they are
evidence in every response but do not set the level. Declared hints are applied afterwards,
escalate-only (:func:`riskrank.risk.resolve_tool_levels`).

Inference is NumPy (no torch on the serving path); the weights live in one safetensors file
with a JSON sidecar holding its sha256 and how it was trained.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import CheckpointError
from riskrank.fileio import atomic_write_bytes

WEIGHTS = "levels.safetensors"
SIDECAR = "levels.json"
FORMAT = "riskrank-levels/1"
#: The weights of the mean: (risk, writes, destructive), each probability on the level axis.
MIX = {"risk": 1.0, "writes": 1.0, "destructive": 0.5}
_KEYS = ("risk.l1.weight", "risk.l1.bias", "risk.l2.weight", "risk.l2.bias",
         "writes.weight", "writes.bias", "destructive.weight", "destructive.bias")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))).astype(np.float32)


@dataclass(frozen=True)
class LevelParts:
    """Each head's output per tool and the level score they make."""

    risk: np.ndarray
    writes: np.ndarray
    destructive: np.ndarray

    @property
    def score(self) -> np.ndarray:
        total = MIX["risk"] * self.risk + MIX["writes"] * self.writes + MIX["destructive"] * self.destructive
        return (total / 3.0).astype(np.float32)

    def evidence(self, i: int) -> str:
        return (f"level model: score {float(self.score[i]):.2f} (risk head {float(self.risk[i]):.2f}, "
                f"P(changes state) {float(self.writes[i]):.2f}, P(destructive) {float(self.destructive[i]):.2f})")


@dataclass(frozen=True)
class LevelModel:
    """The three heads' weights (see the module docstring) and their sidecar."""

    arrays: dict[str, np.ndarray] = field(repr=False)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.arrays["writes.weight"].shape[0])

    @property
    def encoder_identity(self) -> str | None:
        return self.meta.get("encoder")

    def parts(self, tool_emb: np.ndarray) -> LevelParts:
        e = np.asarray(tool_emb, dtype=np.float32)
        if e.ndim != 2 or e.shape[1] != self.dim:
            raise CheckpointError(f"level model expects {self.dim}-d embeddings, got shape {tuple(e.shape)}")
        a = self.arrays
        h = np.maximum(e @ a["risk.l1.weight"].T + a["risk.l1.bias"], 0)
        risk = _sigmoid(h @ a["risk.l2.weight"][0] + a["risk.l2.bias"][0])
        writes = _sigmoid(e @ a["writes.weight"] + a["writes.bias"][0])
        destructive = _sigmoid(e @ a["destructive.weight"] + a["destructive.bias"][0])
        return LevelParts(risk, writes, destructive)

    def save(self, folder: str | Path) -> Path:
        """Write the weights and the sidecar (with their sha256) atomically."""
        from safetensors.numpy import save

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        blob = save({k: np.ascontiguousarray(self.arrays[k], dtype=np.float32) for k in _KEYS})
        atomic_write_bytes(folder / WEIGHTS, blob)
        meta = {**self.meta, "format": FORMAT, "weights_sha256": hashlib.sha256(blob).hexdigest(), "mix": MIX}
        atomic_write_bytes(folder / SIDECAR, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
        return folder


def load_level_model(folder: str | Path) -> LevelModel:
    """Load and check a level model; a missing, torn or tampered file is a CheckpointError."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    folder = Path(folder)
    side, weights = folder / SIDECAR, folder / WEIGHTS
    for f in (side, weights):
        if not f.is_file():
            raise CheckpointError(f"{folder}: missing {f.name}; not a level model")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{side}: corrupt level model sidecar ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{side}: not a {FORMAT} sidecar")
    blob = weights.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta.get("weights_sha256"):
        raise CheckpointError(f"{weights}: does not match the sidecar's sha256 (corrupt, partially written, or of another run)")
    try:
        arrays = load(blob)
    except (SafetensorError, ValueError) as exc:
        raise CheckpointError(f"{weights}: cannot load ({str(exc).splitlines()[0][:160]})") from None
    missing = [k for k in _KEYS if k not in arrays]
    if missing:
        raise CheckpointError(f"{weights}: missing {', '.join(missing)}")
    d = arrays["writes.weight"].shape[0]
    shapes = {"risk.l1.weight": (arrays["risk.l1.bias"].shape[0], d), "destructive.weight": (d,), "risk.l2.weight": (1, arrays["risk.l1.bias"].shape[0])}
    for k, shape in shapes.items():
        if arrays[k].shape != shape:
            raise CheckpointError(f"{weights}: {k} has shape {arrays[k].shape}, expected {shape}")
    return LevelModel({k: np.asarray(arrays[k], dtype=np.float32) for k in _KEYS}, meta)
