"""Fine-tuning the sentence encoder itself on (task, gold tool) pairs: the second relevance lever.

The heads read a frozen encoder's embeddings; what the encoder cannot tell apart, no head
on top of it can. This module trains the encoder (all-MiniLM-L6-v2 by default) with the
contrastive loss sentence-transformers calls ``MultipleNegativesRankingLoss``: each task
against its gold tool, every other tool of the batch (in-batch negatives) and one hard
negative per pair, a non-gold tool from the top of the hybrid first stage (the z-score fusion
of the cosine and BM25 that a registry without validation queries gets,
:data:`riskrank.first_stage.PRIOR_FUSION`), on the task's own registry.

Two traps, and what is done about them:

* a hard negative that is really a duplicate of the gold tool (registries list near-copies:
  ``get_weather`` and ``get weather (variant 2)``) teaches the encoder to separate what cannot
  be separated: a candidate whose cosine to a gold tool is above :data:`DUPLICATE_COSINE` is
  never a negative;
* in-batch negatives are false negatives when two pairs of a batch share a task or a tool:
  batches are filled so that no text occurs twice in one (the idea of sentence-transformers'
  ``NoDuplicatesBatchSampler``).

The loop is plain PyTorch over the library's loss (it needs neither ``datasets`` nor
``accelerate``, which sentence-transformers' trainer would), seeded, on the CPU. The result is
a sentence-transformers folder that :class:`riskrank.encoder.Encoder` loads like any other
(``--encoder DIR``), written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError

#: A candidate closer than this (cosine of the base encoder) to a gold tool is taken for a
#: copy of it and never used as a negative.
DUPLICATE_COSINE = 0.9
#: How deep in the hybrid ranking a hard negative is drawn from (uniformly, non-gold only).
NEGATIVE_DEPTH = 10
#: At most this many (task, gold tool) pairs per task (a task with many gold tools would
#: otherwise dominate the batches).
MAX_GOLD_PER_TASK = 3


@dataclass(frozen=True)
class FinetuneConfig:
    """The fine-tuning's settings; all of them enter the output folder's fingerprint."""

    seed: int = 42
    epochs: int = 1
    batch_size: int = 32
    lr: float = 2e-5
    warmup: float = 0.1
    scale: float = 20.0
    #: Tokens per text while training (the saved model keeps its own limit for encoding).
    #: The cost of a step grows with it: at 128, a step of 32 rows (96 texts) took about 40 s
    #: on one thread of the 2-core machine while another job ran; tasks and most tool texts
    #: are shorter than 64 tokens.
    max_seq_length: int = 64
    #: At most this many rows (a seeded sample), for the same reason: the leave-one-corpus-out
    #: study fine-tunes once per build.
    max_rows: int | None = 2048


@dataclass
class Triplets:
    """(task, gold tool text, hard negative text) rows: what the loss reads."""

    tasks: list[str]
    positives: list[str]
    negatives: list[str]

    def __len__(self) -> int:
        return len(self.tasks)

    def sample(self, n: int | None, seed: int) -> Triplets:
        """At most ``n`` rows, drawn without replacement by ``seed``, in their order."""
        if n is None or len(self) <= n:
            return self
        keep = np.sort(np.random.default_rng(seed).choice(len(self), size=n, replace=False))
        return Triplets(*([col[i] for i in keep] for col in (self.tasks, self.positives, self.negatives)))

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for row in zip(self.tasks, self.positives, self.negatives, strict=True):
            h.update("\x1f".join(row).encode("utf-8") + b"\x1e")
        return h.hexdigest()


def mine_triplets(registry: Any, texts: Sequence[str], gold: Sequence[np.ndarray], encoder: Any, *, seed: int = 42,
                  tool_emb: np.ndarray | None = None) -> Triplets:
    """The training rows of one registry's (task, gold tools) pairs: one per gold tool (at
    most :data:`MAX_GOLD_PER_TASK`), each with a hard negative drawn from the non-gold tools
    of the hybrid first stage's top :data:`NEGATIVE_DEPTH` that are not near-copies of a gold
    tool (else from the registry at random)."""
    from riskrank.first_stage import PRIOR_FUSION, LexicalIndex

    tool_texts = registry.texts()
    if tool_emb is None:
        tool_emb = encoder.encode(tool_texts, desc="encoding tools")
    q_emb = encoder.encode(list(texts), desc="encoding tasks")
    hybrid = PRIOR_FUSION(q_emb @ tool_emb.T, LexicalIndex.from_registry(registry).evidence(list(texts)).bm25)
    rng = np.random.default_rng(seed)
    out = Triplets([], [], [])
    n = len(tool_texts)
    for i, (task, g) in enumerate(zip(texts, gold, strict=True)):
        g = np.asarray(g, dtype=np.int64)
        if not len(g):
            continue
        near = (tool_emb @ tool_emb[g].T).max(axis=1) > DUPLICATE_COSINE
        near[g] = True
        order = np.argsort(-hybrid[i], kind="stable")
        pool = [int(t) for t in order[: NEGATIVE_DEPTH + len(g)] if not near[t]][:NEGATIVE_DEPTH]
        if not pool:
            pool = [int(t) for t in np.flatnonzero(~near)]
        if not pool:
            continue  # every tool is a copy of the gold: nothing to tell apart
        for pos in g[:MAX_GOLD_PER_TASK]:
            out.tasks.append(task)
            out.positives.append(tool_texts[int(pos)])
            out.negatives.append(tool_texts[pool[int(rng.integers(len(pool)))]])
    if n and not len(out):
        raise RiskrankError("no training pair could be formed: every task lacks gold tools")
    return out


def batches_without_duplicates(rows: Triplets, batch_size: int, seed: int) -> list[list[int]]:
    """Row indices in shuffled batches of ``batch_size`` in which no task, gold or negative
    text occurs twice (a repeated text is a false in-batch negative). A row that does not fit
    the open batch waits for the next; the last batch may be smaller."""
    order = list(np.random.default_rng(seed).permutation(len(rows)))
    out: list[list[int]] = []
    while order:
        batch: list[int] = []
        seen: set[str] = set()
        rest: list[int] = []
        for i in order:
            texts = {rows.tasks[i], rows.positives[i], rows.negatives[i]}
            if len(batch) < batch_size and not (texts & seen) and len(texts) == 3:
                batch.append(i)
                seen |= texts
            elif len(texts) == 3:
                rest.append(i)
        if not batch:
            break
        out.append(batch)
        order = rest
    return out


def finetune_encoder(rows: Triplets, out_dir: str | Path, *, base: str | None = None, config: FinetuneConfig | None = None,
                     progress: bool = True) -> Path:
    """Fine-tune ``base`` (a sentence-transformers name or folder; the bundled MiniLM by
    default) on ``rows`` and write it to ``out_dir`` (atomically: a folder that exists is
    replaced only once the new one is complete). Returns ``out_dir``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from tqdm.auto import tqdm

    from riskrank.encoder import resolve_model

    cfg = config or FinetuneConfig()
    if not len(rows):
        raise RiskrankError("fine-tuning needs at least one (task, gold tool, negative) row")
    display, folder = resolve_model(base)
    rows = rows.sample(cfg.max_rows, cfg.seed)
    torch.manual_seed(cfg.seed)
    model = SentenceTransformer(str(folder) if folder is not None else display, device="cpu")
    served_length = model.max_seq_length
    model.max_seq_length = min(cfg.max_seq_length, served_length or cfg.max_seq_length)
    loss = MultipleNegativesRankingLoss(model, scale=cfg.scale)
    plan = [b for _ in range(cfg.epochs) for b in batches_without_duplicates(rows, cfg.batch_size, cfg.seed + _)]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    warm = max(1, int(cfg.warmup * len(plan)))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (len(plan) - s) / max(1, len(plan) - warm))))
    model.train()
    losses = []
    bar = tqdm(plan, desc="fine-tuning the encoder", disable=not progress, unit="batch")
    for batch in bar:
        features = [model.preprocess([getattr(rows, col)[i] for i in batch]) for col in ("tasks", "positives", "negatives")]
        value = loss(features, torch.empty(0))  # the loss makes its own labels (row i's positive is column i)
        opt.zero_grad()
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(value.detach()))
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    model.eval()
    model.max_seq_length = served_length
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save(str(tmp))
        info = {"base": display, "config": asdict(cfg), "rows": len(rows), "rows_sha256": rows.fingerprint(),
                "steps": len(plan), "loss_first": losses[0], "loss_last_20": float(np.mean(losses[-20:]))}
        (tmp / "riskrank_finetune.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def finetune_info(folder: str | Path) -> dict[str, Any] | None:
    """What :func:`finetune_encoder` recorded in ``folder`` (None for a folder it did not write)."""
    p = Path(folder) / "riskrank_finetune.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
