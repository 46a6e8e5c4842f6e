"""riskrank-base: the pretrained heads shipped inside the package.

A registry nobody trained on (an MCP server's ``tools/list``, a function list) has no
(task, gold tool) pairs and no audited levels. The base model brings what transfers from the
two benchmarks: a risk head trained on every audited tool of UltraTool and Seal-Tools, and a
relevance head in its zero-shot form (the z-score fusion of BM25 and the cosine plus the
learned lexical weights; the embedding residual, which memorises the training tools, is
dropped). Every surface uses it when no checkpoint is given (:func:`default_checkpoint`).

This module is the light half (paths and the card, standard library only) so that surfaces
can name the default without importing torch; :mod:`riskrank.training.base_model` trains it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The shipped checkpoint directory (package data): heads, sidecar and the model card.
MODEL_DIR = Path(__file__).with_name("model")
CARD_JSON = "card.json"
CARD_MD = "MODEL_CARD.md"
NAME = "riskrank-base"
#: ``--checkpoint none``: no checkpoint at all (encoder-only modes), not the base model.
NO_CHECKPOINT = "none"
#: The library's default: the base model where the encoder is the base model's, else none
#: (the reason is kept on the retriever), as every surface resolves a missing --checkpoint.
AUTO = "auto"


#: The shipped level model (package data): what level an unaudited tool is served at.
LEVELS_DIR = Path(__file__).with_name("levels")


def default_level_model_dir() -> Path | None:
    """The shipped level model's directory, or None where this installation has none."""
    return LEVELS_DIR if (LEVELS_DIR / "levels.json").is_file() else None


def is_base_checkpoint(path: str | Path | None) -> bool:
    """Whether ``path`` is the shipped base model's directory."""
    base = default_checkpoint()
    return path is not None and base is not None and Path(path).resolve() == base.resolve()


def default_checkpoint() -> Path | None:
    """The base model's checkpoint directory, or None when this installation has none (a
    source tree where ``make base-model`` has not run)."""
    return MODEL_DIR if (MODEL_DIR / "checkpoint.json").is_file() else None


def model_card(path: str | Path | None = None) -> dict[str, Any] | None:
    """The model card (``card.json``) of a base-model directory (default: the shipped one)."""
    folder = Path(path) if path is not None else default_checkpoint()
    if folder is None or not (folder / CARD_JSON).is_file():
        return None
    return json.loads((folder / CARD_JSON).read_text(encoding="utf-8"))


def base_encoder_identity(path: str | Path | None = None) -> str | None:
    """The encoder identity the base model's heads were trained on (its sidecar's)."""
    folder = Path(path) if path is not None else default_checkpoint()
    if folder is None:
        return None
    meta = json.loads((folder / "checkpoint.json").read_text(encoding="utf-8"))
    return str(meta["encoder"]["identity"])


def resolve_checkpoint(checkpoint: str | Path | None, encoder_identity: str | None = None) -> tuple[str | None, str | None]:
    """What a surface loads for ``--checkpoint``: (checkpoint path or None, a note or None).

    A given path is used as is; ``none`` means no checkpoint; None means the base model, unless
    the encoder is not the base model's (its heads read that encoder's embeddings only), in
    which case the surface runs without heads and the note says why."""
    if checkpoint is not None and str(checkpoint) != NO_CHECKPOINT:
        return str(checkpoint), None
    if checkpoint is not None:
        return None, None
    base = default_checkpoint()
    if base is None:
        return None, f"no base model in this installation ({MODEL_DIR}; build it with `make base-model`): encoder-only modes"
    wanted = base_encoder_identity(base)
    if encoder_identity is not None and encoder_identity != wanted:
        return None, (f"the base model's heads read {wanted!r} embeddings, not {encoder_identity!r}: without a checkpoint "
                      "trained on this encoder only dense, bm25 and hybrid (and their +rule) work")
    return str(base), None
