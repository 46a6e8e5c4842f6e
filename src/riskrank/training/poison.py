"""Train the learned poisoning detector (:mod:`riskrank.poison`) and the data it is judged on.

Positives nobody wrote as tools: BIPIA's attack instructions (train split; text and code; a
family is a key of its JSON files) and the hand-written sets of ``corpora/poison/attacks.json``,
each planted into real tool definitions (:func:`plant`: the start, middle or end of a
description, a parameter's description, an enum value, a default). Negatives: every real
definition at hand (:func:`benign_tools`): the 1,302 MCP tools of ``mcp-annotated`` (23
servers) and the corpora's tool and API descriptions (BFCL with its parameter schemas,
APIBench, API-Bank, ToolAlpaca, UltraTool, Seal-Tools with its parameters); their imperatives
("Use this to ...", "Call with the file path") are the hard negatives.

A fit (:func:`fit_detector`) holds out a fifth of each benign group's tools as validation,
trains the MLP on the rest (PyTorch, here only), and sets both thresholds on the validation
tools alone: ``poisoned`` where the validation false-positive rate (a tool whose best span
scores at or above it) is at most :data:`ALPHA_POISONED`, ``suspicious`` at
:data:`ALPHA_SUSPICIOUS`. No attack text takes part in choosing a threshold.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.poison import (
    LEXICONS,
    OPENERS,
    SPAN_FEATURES,
    Featuriser,
    PoisonDetector,
    WordTable,
    bundled_tokenizer,
    normalise,
    placement,
    texts_for,
)
from riskrank.scan import texts_of

ATTACKS_PATH = Path(__file__).resolve().parents[3] / "corpora" / "poison" / "attacks.json"
MCP_PATH = Path(__file__).resolve().parents[3] / "corpora" / "mcp-annotated" / "tools.json"
BIPIA = "microsoft/BIPIA/benchmark"
#: The validation false-positive rates the thresholds are set at (fixed before any fit ran).
ALPHA_POISONED = 0.002
ALPHA_SUSPICIOUS = 0.01
#: Where an attack text is planted.
POSITIONS = ("start", "middle", "end", "param", "enum", "default")
SEPARATORS = (" ", "\n", "\n\n", "  ")
#: The corpora whose descriptions are negatives (besides the MCP tools).
CORPUS_NAMES = ("bfcl", "apibench", "apibank", "toolalpaca", "ultratool", "sealtools")


@dataclass(frozen=True)
class Family:
    """One attack family: its name, where it comes from, its split and its texts."""

    name: str
    source: str
    split: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class BenignTool:
    """A real tool definition: its corpus (``mcp`` or a corpus name), its group (an MCP
    server, or the corpus) and the definition (name, description, inputSchema)."""

    corpus: str
    group: str
    tool: dict[str, Any]


def attack_families(data_dir: str | Path, attacks_path: str | Path | None = None) -> list[Family]:
    """Every attack family: BIPIA's (``bipia-text/...``, ``bipia-code/...``; splits ``train``
    and ``test``, upstream's) and the hand-written ones (``own/...``; ``train`` and ``heldout``)."""
    data_dir = Path(data_dir)
    out: list[Family] = []
    for kind in ("text", "code"):
        for split in ("train", "test"):
            path = data_dir / BIPIA / f"{kind}_attack_{split}.json"
            doc = json.loads(path.read_text(encoding="utf-8"))
            for key, texts in doc.items():
                out.append(Family(f"bipia-{kind}/{key}", f"BIPIA {kind}_attack_{split}.json", split, tuple(texts)))
    own = json.loads(Path(attacks_path or ATTACKS_PATH).read_text(encoding="utf-8"))
    for split in ("train", "heldout"):
        for key, texts in own[split].items():
            out.append(Family(f"own/{key}", f"corpora/poison/attacks.json ({split})", split, tuple(texts)))
    return out


def benign_heldout(attacks_path: str | Path | None = None) -> list[str]:
    """The hand-written hard benign descriptions (never trained on)."""
    return list(json.loads(Path(attacks_path or ATTACKS_PATH).read_text(encoding="utf-8"))["benign_heldout"])


def _bfcl_definitions(data_dir: Path) -> list[dict[str, Any]]:
    """BFCL's function definitions with their parameter schemas (the corpus loader keeps names
    and descriptions only), one per distinct definition."""
    from riskrank.datasets.bfcl import CATEGORIES, question_file
    from riskrank.datasets.corpora import corpus_file, read_records

    seen: set[str] = set()
    out = []
    for category in CATEGORIES:
        for _, rec in read_records(corpus_file(data_dir, question_file(category))):
            for fn in rec.get("function") or []:
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    continue
                key = json.dumps(fn, sort_keys=True)
                if key in seen:
                    continue
                seen.add(key)
                out.append({"name": fn["name"], "description": str(fn.get("description") or ""),
                            "inputSchema": fn.get("parameters") or {}})
    return out


def benign_tools(data_dir: str | Path, mcp_path: str | Path | None = None,
                 corpora: Sequence[str] = CORPUS_NAMES) -> list[BenignTool]:
    """Every real definition: the MCP tools (grouped by server) and each corpus's tools."""
    from riskrank.datasets import load_benchmark

    data_dir = Path(data_dir)
    out: list[BenignTool] = []
    doc = json.loads(Path(mcp_path or MCP_PATH).read_text(encoding="utf-8"))
    seen: set[tuple[str, str]] = set()
    for rec in doc["tools"]:
        key = (rec["server"], rec["name"])
        if key in seen:
            continue
        seen.add(key)
        tool = {"name": rec["name"], "description": rec.get("description") or ""}
        if rec.get("inputSchema"):
            tool["inputSchema"] = rec["inputSchema"]
        out.append(BenignTool("mcp", rec["server"], tool))
    for name in corpora:
        if name == "bfcl":
            tools = _bfcl_definitions(data_dir)
        else:
            reg = load_benchmark(name, data_dir).registry
            tools = [{"name": t.name, "description": t.description,
                      **({"inputSchema": dict(t.parameters)} if t.parameters else {})} for t in reg.tools]
        keys: set[str] = set()
        for t in tools:
            key = json.dumps(t, sort_keys=True)
            if key not in keys:
                keys.add(key)
                out.append(BenignTool(name, name, t))
    return out


def plant(tool: dict[str, Any], attack: str, position: str, rng: random.Random) -> tuple[dict[str, Any], str, int]:
    """``tool`` with ``attack`` planted at ``position``: (the poisoned definition, the field it
    went into, the attack's offset in that field's text). ``start``/``middle``/``end`` go into
    the description (``middle``: at a sentence boundary near the middle, or the end of a
    one-sentence description); ``param`` into one parameter's description (after its own text,
    or as a new parameter's); ``enum`` as one more enum value; ``default`` as a default."""
    t = copy.deepcopy(tool)
    sep = rng.choice(SEPARATORS)
    desc = str(t.get("description") or "")
    if position in ("start", "middle", "end"):
        if position == "middle":
            cuts = [i + 2 for i in range(len(desc) - 2) if desc[i] in ".!?" and desc[i + 1] == " "]
            cut = min(cuts, key=lambda c: abs(c - len(desc) / 2)) if cuts else len(desc)
            head, tail = desc[:cut].rstrip(), desc[cut:].lstrip()
            text = head + (sep if head else "") + attack + (sep + tail if tail else "")
            off = len(head) + (len(sep) if head else 0)
        elif position == "start":
            text, off = attack + (sep + desc if desc else ""), 0
        else:
            text, off = desc + (sep if desc else "") + attack, len(desc) + (len(sep) if desc else 0)
        t["description"] = text
        return t, "description", off
    schema = t.get("inputSchema")
    if not isinstance(schema, dict):
        schema = t["inputSchema"] = {"type": "object", "properties": {}}
    props = schema.get("properties")
    if not isinstance(props, dict):
        props = schema["properties"] = {}
    names = [k for k, v in props.items() if isinstance(v, dict)]
    if position == "param":
        if names and rng.random() < 0.7:
            p = rng.choice(names)
            own = str(props[p].get("description") or "")
            props[p]["description"] = own + (sep if own else "") + attack
            return t, f"inputSchema.properties.{p}.description", len(own) + (len(sep) if own else 0)
        p = rng.choice(("notes", "context", "metadata", "options", "trace", "extra"))
        while p in props:
            p += "_"
        props[p] = {"type": "string", "description": attack}
        return t, f"inputSchema.properties.{p}.description", 0
    if position == "enum":
        p = rng.choice(names) if names and rng.random() < 0.5 else "mode"
        node = props.setdefault(p, {"type": "string"})
        values = list(node.get("enum") or ["default", "fast"])
        node["enum"] = [*values, attack]
        return t, f"inputSchema.properties.{p}.enum[{len(values)}]", 0
    if position == "default":
        p = rng.choice(names) if names and rng.random() < 0.5 else "options"
        props.setdefault(p, {"type": "string"})["default"] = attack
        return t, f"inputSchema.properties.{p}.default", 0
    raise ValueError(f"unknown position {position!r}")


def plantings(texts: Sequence[str], hosts: Sequence[dict[str, Any]], per_text: int, seed: int
              ) -> list[tuple[int, dict[str, Any], str, str, int]]:
    """(text index, poisoned definition, position, field, offset) for each text planted into
    ``per_text`` hosts, the positions taken in turn from a seeded start."""
    rng = random.Random(seed)
    out = []
    for i, text in enumerate(texts):
        first = rng.randrange(len(POSITIONS))
        for k in range(per_text):
            position = POSITIONS[(first + k) % len(POSITIONS)]
            t, f, off = plant(rng.choice(hosts), text, position, rng)
            out.append((i, t, position, f, off))
    return out


def static_table(cache_dir: str | Path | None = None) -> np.ndarray:
    """The bundled encoder's static piece embeddings [vocabulary, 384]: each word piece run
    through the encoder alone (``[CLS] piece [SEP]``, mean-pooled and normalised as the encoder
    pools a sentence). Computed once (a minute on two cores) and kept in the cache directory."""
    from riskrank.encoder import default_cache_dir, resolve_model
    from riskrank.fileio import atomic_write_bytes
    from riskrank.numpy_encoder import NumpyEncoder

    _, folder = resolve_model(None)
    assert folder is not None
    key = hashlib.sha256((folder / "tokenizer.json").read_bytes() + b"|" + (folder / "model.safetensors").read_bytes()[:1 << 20]
                         ).hexdigest()[:16]
    path = Path(cache_dir or default_cache_dir()) / f"poison-static-{key}.npy"
    if path.is_file():
        return np.load(path)
    enc = NumpyEncoder(folder)
    vocab = enc.tokenizer.get_vocab()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    n = len(vocab)
    out = np.zeros((n, enc.dim), np.float32)
    for a in range(0, n, 1024):
        ids = np.arange(a, min(n, a + 1024))
        batch = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        out[a: a + len(ids)] = enc._forward(batch, np.zeros_like(batch), np.ones(batch.shape, np.float32))
    path.parent.mkdir(parents=True, exist_ok=True)
    import io

    buf = io.BytesIO()
    np.save(buf, out)
    atomic_write_bytes(path, buf.getvalue())
    return out


#: The width of the topic table (the static table's first principal components).
TOPIC_DIMS = 32


def topic_table(static: np.ndarray, dims: int = TOPIC_DIMS) -> np.ndarray:
    """The static table centred and projected on its first ``dims`` principal components: the
    vectors the placement features compare (raw static rows share one large component, so their
    cosines are all high)."""
    centred = static - static.mean(0)
    _, _, vt = np.linalg.svd(centred[:: max(1, len(centred) // 20000)], full_matrices=False)
    return (centred @ vt[:dims].T).astype(np.float32)


@dataclass
class Tables:
    """What training reads spans through: the featuriser, the static table and the topic
    table (each as a :class:`WordTable` over the featuriser's words)."""

    feat: Featuriser
    static: np.ndarray
    topic: np.ndarray

    def __post_init__(self) -> None:
        self.static_words = WordTable(self.static)
        self.topic_words = WordTable(self.topic)


def tables(cache_dir: str | Path | None = None) -> Tables:
    static = static_table(cache_dir)
    return Tables(new_featuriser(), static, topic_table(static))


@dataclass
class SpanRows:
    """Featurised spans of many definitions: the model's inputs ``X``, and per row the
    definition it came from (``tool``) and whether it is attack text (``attack``)."""

    X: np.ndarray
    tool: np.ndarray
    attack: np.ndarray
    n_tools: int

    def take(self, rows: np.ndarray) -> SpanRows:
        return SpanRows(self.X[rows], self.tool[rows], self.attack[rows], self.n_tools)


def definition_rows(t: Tables, tools: Sequence[dict[str, Any]],
                    attack_at: Sequence[tuple[str, int, int] | None] | None = None) -> SpanRows:
    """The spans of every field the detector reads, for each definition, as the model's inputs
    ([mean static embedding, cue bits, first-word bits, span features]: the order the exported
    weights split at). With ``attack_at`` (per definition: the field, start and end of the
    planted text, or None), a span of that field is attack text when at least half of it lies
    in the planted range."""
    texts: list[tuple[str, int]] = []
    ranges: list[tuple[int, int] | None] = []
    for i, tool in enumerate(tools):
        at = attack_at[i] if attack_at is not None else None
        for f, text, _ in texts_for(texts_of(tool)):
            texts.append((text, i))
            if at is not None and f == at[0]:
                a = len(normalise(text[: at[1]]))
                ranges.append((a, a + len(normalise(text[at[1]: at[2]]))))
            else:
                ranges.append(None)
    sp = t.feat.featurise(texts, [str(tool.get("name", "")) for tool in tools])
    attack = np.zeros(len(sp), bool)
    for j, (ti, a, b) in enumerate(sp.where):
        r = ranges[ti]
        if r is not None:
            attack[j] = max(0, min(b, r[1]) - max(a, r[0])) >= 0.5 * (b - a)
    cues, first = t.feat.cues(sp)
    X = np.hstack([t.static_words.mean(t.feat, sp), cues, first, sp.looks, placement(t.topic_words, t.feat, sp)])
    return SpanRows(X.astype(np.float32), sp.owner.copy(), attack, len(tools))


def tool_max(scores: np.ndarray, tool: np.ndarray, n_tools: int) -> np.ndarray:
    """Each definition's best span score (0 for a definition with no span)."""
    out = np.zeros(n_tools, np.float32)
    np.maximum.at(out, tool, scores)
    return out


def threshold_at(scores: np.ndarray, alpha: float) -> float:
    """The lowest threshold at which at most ``alpha`` of ``scores`` reach it (midway between
    the last score kept below and the next one up)."""
    s = np.sort(np.asarray(scores, np.float64))[::-1]
    k = int(np.floor(alpha * len(s)))
    if len(s) == 0:
        return 0.5
    if k == 0:
        return float(np.nextafter(s[0], np.inf))
    return float((s[k - 1] + s[k]) / 2) if k < len(s) else float(s[-1])


@dataclass
class MlpConfig:
    """The MLP and its training (fixed before the first fit; docs/trust.md)."""

    hidden: int = 32
    epochs: int = 10
    lr: float = 3e-3
    weight_decay: float = 1e-4
    batch: int = 1024
    seed: int = 42
    positive_share: float = 0.5  # the positives' share of the total training weight


def fit_mlp(X: np.ndarray, y: np.ndarray, cfg: MlpConfig) -> dict[str, np.ndarray]:
    """The MLP on standardised inputs; returns its weights with the standardisation folded in
    (``W1 @ x + b1`` on raw inputs)."""
    import torch

    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    mu = X.mean(0)
    sd = np.maximum(X.std(0), 1e-2)  # a cue almost never seen in training is not blown up
    xt = torch.from_numpy((X - mu) / sd).float()
    yt = torch.from_numpy(y.astype(np.float32))
    n_pos = max(1.0, float(y.sum()))
    n_neg = max(1.0, float(len(y) - y.sum()))
    w = np.where(y, cfg.positive_share / n_pos, (1 - cfg.positive_share) / n_neg) * len(y)
    wt = torch.from_numpy(w.astype(np.float32))
    model = torch.nn.Sequential(torch.nn.Linear(X.shape[1], cfg.hidden), torch.nn.ReLU(), torch.nn.Linear(cfg.hidden, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="none")
    for _ in range(cfg.epochs):
        order = torch.randperm(len(yt), generator=g)
        for a in range(0, len(order), cfg.batch):
            idx = order[a: a + cfg.batch]
            opt.zero_grad()
            loss = (loss_fn(model(xt[idx]).squeeze(1), yt[idx]) * wt[idx]).mean()
            loss.backward()
            opt.step()
    W1 = model[0].weight.detach().numpy().astype(np.float64) / sd
    b1 = model[0].bias.detach().numpy().astype(np.float64) - W1 @ mu
    return {"W1": W1.astype(np.float32), "b1": b1.astype(np.float32),
            "w2": model[2].weight.detach().numpy()[0].astype(np.float32), "b2": model[2].bias.detach().numpy().astype(np.float32)}


def to_detector(weights: dict[str, np.ndarray], t: Tables, thresholds: dict[str, float], meta: dict[str, Any]) -> PoisonDetector:
    """A :class:`PoisonDetector` from an MLP on :func:`definition_rows`' inputs: the static part
    of the first layer applied to every vocabulary row once (``token.table``), the rest split by
    input, and the topic table the placement features read."""
    W1 = weights["W1"]
    d = t.static.shape[1]
    L = t.feat.n_cues
    cut = np.cumsum([d, L, L + 1, len(SPAN_FEATURES)])
    arrays = {
        "token.table": (t.static @ W1[:, :d].T).astype(np.float16).astype(np.float32),
        "topic.table": t.topic.astype(np.float16).astype(np.float32),
        "cues.weight": W1[:, cut[0]: cut[1]].T.copy(), "first.weight": W1[:, cut[1]: cut[2]].T.copy(),
        "span.weight": W1[:, cut[2]: cut[3]].T.copy(), "l1.bias": weights["b1"],
        "l2.weight": weights["w2"], "l2.bias": weights["b2"],
    }
    return PoisonDetector(arrays, {**meta, "thresholds": thresholds}, t.feat)


@dataclass
class Fit:
    """A fitted detector, its thresholds and what it was fitted and validated on."""

    detector: PoisonDetector
    thresholds: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict, repr=False)


def fit_detector(t: Tables, neg: SpanRows, neg_groups: np.ndarray, neg_corpus: np.ndarray, pos: SpanRows,
                 cfg: MlpConfig, *, val_share: float = 0.2, meta: dict[str, Any] | None = None) -> Fit:
    """Fit on ``neg`` (benign spans; ``neg_groups`` and ``neg_corpus`` per definition) and
    ``pos`` (planted definitions' spans; their attack spans are the positives). Validation, for
    the thresholds (:data:`ALPHA_POISONED`, :data:`ALPHA_SUSPICIOUS`): whole MCP servers (a
    ``val_share`` of them, so the thresholds meet servers the model never saw, as it will) and
    a ``val_share`` of each corpus's definitions; the rest trains."""
    rng = np.random.default_rng(cfg.seed)
    val_tool = np.zeros(neg.n_tools, bool)
    servers = sorted(set(neg_groups[neg_corpus == "mcp"]))
    if servers:
        held = rng.choice(servers, size=max(1, round(val_share * len(servers))), replace=False)
        val_tool |= np.isin(neg_groups, held) & (neg_corpus == "mcp")
    for c in sorted(set(neg_corpus) - {"mcp"}):
        members = np.flatnonzero(neg_corpus == c)
        if len(members) >= 5:
            val_tool[rng.choice(members, size=max(1, round(val_share * len(members))), replace=False)] = True
    val_rows = val_tool[neg.tool]
    X = np.vstack([neg.X[~val_rows], pos.X[pos.attack]])
    y = np.concatenate([np.zeros(int((~val_rows).sum()), bool), np.ones(int(pos.attack.sum()), bool)])
    weights = fit_mlp(X, y, cfg)
    val = neg.take(np.flatnonzero(val_rows))
    best = tool_max(mlp_scores(weights, val.X), val.tool, neg.n_tools)[val_tool]
    thresholds = {"poisoned": threshold_at(best, ALPHA_POISONED), "suspicious": threshold_at(best, ALPHA_SUSPICIOUS)}
    thresholds["suspicious"] = min(thresholds["suspicious"], thresholds["poisoned"])
    info = {"n_train_spans": len(y), "n_positive_spans": int(y.sum()), "n_validation_tools": int(val_tool.sum()),
            "validation_servers": [str(x) for x in (held if servers else [])],
            "alpha": {"poisoned": ALPHA_POISONED, "suspicious": ALPHA_SUSPICIOUS},
            "mlp": {k: getattr(cfg, k) for k in ("hidden", "epochs", "lr", "weight_decay", "batch", "seed", "positive_share")}}
    det = to_detector(weights, t, thresholds, {**(meta or {}), "training": info})
    return Fit(det, thresholds, info, weights)


def mlp_scores(weights: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """The MLP's scores of rows of :func:`inputs` (what the exported detector computes from the
    spans themselves, up to the table's float16 rounding; ``tests/test_poison.py`` holds them
    together)."""
    h = X @ weights["W1"].T + weights["b1"]
    np.maximum(h, 0, out=h)
    z = h @ weights["w2"] + weights["b2"][0]
    return (1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))).astype(np.float32)


def new_featuriser() -> Featuriser:
    """The featuriser a detector is trained with (the bundled tokenizer, the cue words)."""
    return Featuriser(bundled_tokenizer(), LEXICONS, OPENERS)
