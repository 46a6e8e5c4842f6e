"""The level model: the rubric level of a tool nobody audited, from its definition.

One ordinal model reads three kinds of evidence about a tool:

* its frozen embedding (what the tool is about),
* the dangerous capabilities its name, description and parameters show
  (:mod:`riskrank.capabilities`: reads secrets, runs commands, deletes, moves money, ...),
* four facts about its text: the name says it only reads, the name says it acts, the
  description is (nearly) empty, the description is not English;
* its words: a tf-idf vector of the name and description's words and word pairs over a
  vocabulary fixed at training (the embedding is a mean over the whole text, so one
  sentence that says what a disguised tool really does barely moves it; its words do);
* optionally, what its nearest rated tools were rated (:func:`neighbour_shares`: a model
  trained with them carries the rated tools' embeddings and levels; the shipped model has
  none).

It is a cumulative-logit model: four increasing thresholds and a score per level boundary,
``P(level > k) = sigmoid(w_k · x - theta_k)`` for k = 1..4, read as non-increasing in k, so every
tool gets a calibrated distribution over the five levels, not a point. The shipped model's
``w_k`` are one weight vector the boundaries share plus a part of their own, fitted shrunk
toward the shared one (the partial form, chosen by the inner split at training time); a model
file with one score for every boundary (weights [F], the proportional-odds form) loads too.
The level served is the highest k with ``P(level >= k) >= tau_k`` (``tau`` chosen on held-out
servers at training time), raised to the floor of the capabilities found: a tool that runs commands is never served below L4 and a
tool that harvests credentials never below L5, whatever the model says. A tool whose text
says little (an empty description, a language the encoder was not trained on) is read at the
cautious end of its distribution (``tau_cautious``), and its evidence says so. Declared MCP
hints are applied afterwards and only raise a level (:func:`riskrank.risk.resolve_tool_levels`),
by the amounts the model carries (``hint_floors``).

Inference is NumPy (no torch on the serving path); the weights live in one safetensors file
with a JSON sidecar holding its sha256, the feature layout and how it was trained.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from riskrank.capabilities import (
    ACT_VERBS,
    CAPABILITY_KEYS,
    MAX_CHARS,
    READ_VERBS,
    CapabilityHit,
    capability_floor,
    detect_capabilities,
)
from riskrank.errors import CheckpointError
from riskrank.fileio import read_weights_folder, write_weights_folder
from riskrank.risk import normalise_text, split_name

WEIGHTS = "levels.safetensors"
SIDECAR = "levels.json"
FORMAT = "riskrank-levels/2"
_KEYS = ("ordinal.weight", "ordinal.thresholds")
#: Present when the model reads words (a vocabulary in the sidecar, its idf here).
_TEXT_KEY = "text.idf"
#: A model that reads its nearest rated tools carries their embeddings [R, D] and levels [R].
_NEIGHBOUR_KEYS = ("neighbours.embedding", "neighbours.levels")
#: Characters of a description the word vector reads.
WORD_CHARS = 4000
_TOKEN = re.compile(r"\b\w\w+\b")
#: The facts about a tool's text the model reads beside the embedding and the capabilities.
TEXT_FEATURES = ("name_reads", "name_acts", "no_description", "not_english")
#: Fewer words than this in a description is "says little": read at the cautious end.
MIN_WORDS = 3
_ENGLISH = frozenset(["the", "a", "an", "of", "to", "and", "in", "for", "is", "on", "with", "this", "that", "by", "from", "or", "be", "it", "as", "are", "at", "its", "can", "use", "used", "returns"])
_LETTERS = re.compile(r"[^\W\d_]+")


#: A run of opening sentences shared word for word by at least this many tools of one registry
#: is the registry's preamble ("This tool belongs to the Gorilla file system. ..."), not each tool's.
PREAMBLE_MIN_TOOLS = 3
#: At most this many opening sentences are compared.
PREAMBLE_MAX_SENTENCES = 3
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` made read-only: a cached array handed to every reader must not be changed by one."""
    a.setflags(write=False)
    return a


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))


def text_facts(name: str, description: str) -> tuple[bool, bool, bool, bool]:
    """(name only reads, name acts, description says little, description is not English).

    Not English: at least six words of which under 5 % are common English function words, or
    mostly letters outside ASCII (the encoder is English-only: such a text is read cautiously)."""
    words = set(normalise_text(split_name(name)).split())
    acts = bool(words & ACT_VERBS)
    reads = bool(words & READ_VERBS) and not acts
    desc = (description or "")[:4000]
    tokens = _LETTERS.findall(desc)
    little = len(tokens) < MIN_WORDS
    foreign = False
    if len(tokens) >= 6:
        low = [t.lower() for t in tokens]
        english = sum(t in _ENGLISH for t in low) / len(low)
        ascii_share = sum(t.isascii() for t in tokens) / len(tokens)
        foreign = english < 0.05 or ascii_share < 0.5
    return reads, acts, little, foreign


def _other_script(description: str) -> bool:
    """Whether ``description`` is written mostly in letters outside ASCII (four letters at least)."""
    letters = [c for c in description[:WORD_CHARS] if c.isalpha()]
    return len(letters) >= 4 and sum(not c.isascii() for c in letters) >= 0.5 * len(letters)


def shared_openings(descriptions: Sequence[str]) -> list[str | None]:
    """Each description's opening that it shares with other tools of its registry, or None.

    A server that opens every description with the same sentences ("This tool belongs to the
    Gorilla file system. It ... allows users to perform basic file operations such as creating
    files and directories, reading and writing to files") would otherwise have them read as each
    tool's own words, and ``ls`` and ``cat`` would be read as writing files. The opening is the
    longest run of whole opening sentences (at most PREAMBLE_MAX_SENTENCES) that at least
    PREAMBLE_MIN_TOOLS descriptions share word for word, kept only where the tool has words of its
    own after it (MIN_WORDS): a description that is nothing but the shared text keeps it."""
    cuts: list[list[tuple[str, int]]] = []
    counts: dict[str, int] = {}
    for desc in descriptions:
        text = (desc or "")[:WORD_CHARS]
        pieces: list[tuple[str, int]] = []
        for m in _SENTENCE_END.finditer(text):
            pieces.append((" ".join(text[:m.start()].split()), m.end()))
            if len(pieces) == PREAMBLE_MAX_SENTENCES:
                break
        cuts.append(pieces)
        for key, _ in pieces:
            counts[key] = counts.get(key, 0) + 1
    out: list[str | None] = []
    for desc, pieces in zip(descriptions, cuts, strict=True):
        got = None
        for key, end in pieces:
            if counts[key] >= PREAMBLE_MIN_TOOLS and len(_LETTERS.findall((desc or "")[end:])) >= MIN_WORDS:
                got = (desc or "")[:end]
        out.append(got)
    return out


def own_texts(tools: Sequence[Any], groups: Sequence[str] | None = None) -> tuple[list[Any], list[str | None]]:
    """(the tools as the level model reads them, the shared opening taken from each or None):
    a tool without a shared opening is returned as it is. ``groups`` (one per tool: its server)
    counts an opening among the tools of one group only, so that one server's descriptions
    never change how another server's tools are read; without it, ``tools`` are one registry."""
    openings: list[str | None] = [None] * len(tools)
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(groups if groups is not None else [""] * len(tools)):
        by_group.setdefault(g, []).append(i)
    for idx in by_group.values():
        for i, o in zip(idx, shared_openings([tools[i].description or "" for i in idx]), strict=True):
            openings[i] = o
    read = [t if o is None else _with_description(t, t.description[len(o):].strip()) for t, o in zip(tools, openings, strict=True)]
    return read, openings


def own_capabilities(tools: Sequence[Any], groups: Sequence[str] | None = None) -> list[list[CapabilityHit]]:
    """Each tool's capabilities as the level model reads them: from its own words, without the
    opening it shares with other tools of its registry (or of its group: :func:`own_texts`)."""
    return [list(hits) for hits in ToolEvidence.of(*own_texts(tools, groups)).hits]


def _with_description(tool: Any, description: str) -> Any:
    if dataclasses.is_dataclass(tool) and not isinstance(tool, type):
        return dataclasses.replace(tool, description=description)
    return SimpleNamespace(name=tool.name, description=description, parameters=getattr(tool, "parameters", None))


@dataclass(frozen=True)
class ToolEvidence:
    """What the level model reads of a registry beside the embeddings: each tool's capabilities
    and text facts (computed once per registry)."""

    hits: tuple[tuple[CapabilityHit, ...], ...]
    facts: np.ndarray  # [N, len(TEXT_FEATURES)] 0/1
    #: The registry's shared opening taken from each tool's description before reading it (None: none).
    openings: tuple[str | None, ...] = ()
    #: Each description's length in characters (a long one is read in part: :meth:`LevelPrediction.explain` says so).
    lengths: tuple[int, ...] = ()
    #: Whether each description is written mostly in letters outside ASCII (Chinese, Japanese:
    #: a whole sentence without spaces is one or two "words" to the text facts, which then
    #: read it as saying almost nothing; the evidence says what it is). Not a model input.
    other_script: tuple[bool, ...] = ()

    @classmethod
    def of(cls, tools: Sequence[Any], openings: Sequence[str | None] | None = None) -> ToolEvidence:
        """The evidence of ``tools`` as given (pass the tools of :func:`own_texts` and its openings
        to read each without its registry's shared opening)."""
        hits = tuple(tuple(detect_capabilities(t.name, t.description, getattr(t, "parameters", None))) for t in tools)
        facts = np.asarray([text_facts(t.name, t.description) for t in tools], dtype=np.float32).reshape(len(tools), len(TEXT_FEATURES))
        return cls(hits, facts, tuple(openings) if openings is not None else (), tuple(len(t.description or "") for t in tools),
                   tuple(_other_script(t.description or "") for t in tools))

    @cached_property
    def capability_matrix(self) -> np.ndarray:
        out = np.zeros((len(self.hits), len(CAPABILITY_KEYS)), dtype=np.float32)
        for i, hs in enumerate(self.hits):
            for h in hs:
                out[i, CAPABILITY_KEYS.index(h.key)] = 1.0
        return _frozen(out)

    # Each is read once per tool while a registry's levels are resolved: computed once (an
    # array over every tool rebuilt at each read made resolving N tools cost N^2), read-only.
    @cached_property
    def floors(self) -> np.ndarray:
        return _frozen(np.asarray([capability_floor(hs) for hs in self.hits], dtype=np.int8))

    @cached_property
    def cautious(self) -> np.ndarray:
        return _frozen((self.facts[:, 2] > 0) | (self.facts[:, 3] > 0))


def features(tool_emb: np.ndarray, evidence: ToolEvidence) -> np.ndarray:
    """The model's input [N, D + C + 4]: embedding, capability flags, text facts (the word
    vector, when the model reads words, is appended by :class:`WordVectors`)."""
    e = np.asarray(tool_emb, dtype=np.float32)
    return np.hstack([e, evidence.capability_matrix, evidence.facts]).astype(np.float32)


def word_text(name: str, description: str) -> str:
    """What the word vector reads: the name's words and the description's first WORD_CHARS
    characters, normalised."""
    return normalise_text(split_name(name) + " " + (description or "")[:WORD_CHARS])


def word_terms(text: str) -> list[str]:
    """A normalised text's words of two or more characters and its adjacent word pairs (the
    terms scikit-learn's ``TfidfVectorizer(ngram_range=(1, 2))`` counts)."""
    words = _TOKEN.findall(text)
    return words + [f"{a} {b}" for a, b in pairwise(words)]


@dataclass(frozen=True)
class WordVectors:
    """Sublinear tf-idf over a fixed vocabulary, L2-normalised (equal to scikit-learn's
    ``TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)`` with that vocabulary and idf:
    tested), scaled by ``scale``."""

    vocabulary: tuple[str, ...]
    idf: np.ndarray
    scale: float = 1.0

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        index = {t: i for i, t in enumerate(self.vocabulary)}
        out = np.zeros((len(texts), len(self.vocabulary)), dtype=np.float32)
        for r, text in enumerate(texts):
            counts: dict[int, int] = {}
            for term in word_terms(text):
                j = index.get(term)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            if counts:
                cols = np.fromiter(counts, dtype=np.int64)
                vals = (1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64))) * self.idf[cols]
                norm = float(np.sqrt((vals ** 2).sum()))
                out[r, cols] = (vals / norm * self.scale) if norm > 0 else 0.0
        return out


#: Tools the level model reads at once: a block's word vectors (4,096 x 5,000 float32, some 80
#: MB) and its similarities to the rated tools (4,096 x 2,453 float64, some 80 MB) are all it
#: holds beside the registry's own arrays, whatever the registry's size.
ROW_BLOCK = 4096


def neighbour_shares(query: np.ndarray, ref: np.ndarray, ref_levels: np.ndarray, k: int, *,
                     query_groups: np.ndarray | None = None, ref_groups: np.ndarray | None = None) -> np.ndarray:
    """[len(query), 4]: among the ``k`` rows of ``ref`` nearest each row of ``query`` (cosine),
    the share rated above each level boundary (P(level > 1..4) among them), each neighbour
    weighted by its similarity (floored at 0). With groups, a row's own group (its server,
    corpus or set) never votes for it: a training tool is then read as a tool of a server
    the model has never seen will be. A linear score over the embedding cannot say "most
    rated tools around here are L2"; this can. The query rows are read in blocks of :data:`ROW_BLOCK`:
    a registry of a million tools never holds its [N, R] similarities, or a float64 copy of
    itself, at once."""
    q = np.asarray(query)
    r = np.asarray(ref, dtype=np.float64)
    r = r / (np.linalg.norm(r, axis=1, keepdims=True) + 1e-12)
    if len(q) == 0 or len(r) == 0:
        return np.zeros((len(q), 4))
    k = max(1, min(int(k), len(r)))
    levels = np.asarray(ref_levels)
    grouped = query_groups is not None and ref_groups is not None
    qg, rg = (np.asarray(query_groups), np.asarray(ref_groups)) if grouped else (None, None)
    out = np.empty((len(q), 4))
    for a in range(0, len(q), ROW_BLOCK):
        qb = q[a:a + ROW_BLOCK].astype(np.float64)
        sims = (qb / (np.linalg.norm(qb, axis=1, keepdims=True) + 1e-12)) @ r.T
        if grouped:
            sims = np.where(qg[a:a + ROW_BLOCK, None] == rg[None, :], -np.inf, sims)
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        s = np.take_along_axis(sims, top, axis=1)
        w = np.where(np.isfinite(s), np.maximum(s, 0.0) + 1e-6, 0.0)  # a row of its own group weighs nothing
        above = levels[top][:, :, None] > np.arange(1, 5)[None, None, :]
        out[a:a + len(sims)] = (w[:, :, None] * above).sum(axis=1) / np.maximum(w.sum(axis=1, keepdims=True), 1e-12)
    return out


def levels_from_cumulative(cum: np.ndarray, tau: Sequence[float]) -> np.ndarray:
    """The level for cumulative probabilities ``cum`` [N, 4] (P(level > k), k = 1..4): 1 + the
    number of boundaries k with P(level > k) >= tau_k."""
    return (1 + (np.asarray(cum) >= np.asarray(tau, dtype=np.float64)[None, :]).sum(axis=1)).astype(np.int8)


@dataclass(frozen=True)
class LevelPrediction:
    """The level model's reading of every tool: its distribution over the levels, the level it
    gives, the capability floor, and the evidence for both."""

    cumulative: np.ndarray  # [N, 4] P(level > k)
    model_levels: np.ndarray  # [N] before the floors
    evidence: ToolEvidence
    hint_floors: dict[str, int] = field(default_factory=dict)
    #: [N, 4] among the rated tools nearest each tool, the similarity-weighted share above each
    #: boundary (:func:`neighbour_shares`), and how many were read; None: a model without them.
    neighbour_shares: np.ndarray | None = None
    neighbour_k: int = 0
    #: The thresholds the levels were read at (``tau``; ``tau_cautious`` for a tool read at the
    #: cautious end), for the evidence; empty: not known.
    tau: tuple[float, ...] = ()
    tau_cautious: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.model_levels)

    @property
    def floors(self) -> np.ndarray:
        return self.evidence.floors

    @cached_property
    def levels(self) -> np.ndarray:
        """The level after the capability floors (before declared hints)."""
        return _frozen(np.maximum(self.model_levels, self.floors).astype(np.int8))

    @cached_property
    def probabilities(self) -> np.ndarray:
        """[N, 5] P(level = k)."""
        c = np.hstack([np.ones((len(self), 1)), self.cumulative, np.zeros((len(self), 1))])
        return _frozen(np.clip(c[:, :-1] - c[:, 1:], 0.0, 1.0))

    @property
    def expected(self) -> np.ndarray:
        """E[level] under the model (1..5): a continuous level score."""
        return (1.0 + self.cumulative.sum(axis=1)).astype(np.float32)

    def _threshold(self, i: int) -> str:
        """Why the level is not the likeliest one, where it is not: the boundary and threshold
        that decided it ("L3 (L2 0.59 L3 0.30)" reads as a contradiction without it)."""
        tau = self.tau_cautious if (self.tau_cautious and bool(self.evidence.cautious[i])) else self.tau
        level, likeliest = int(self.model_levels[i]), int(np.argmax(self.probabilities[i])) + 1
        if not tau or level == likeliest:
            return ""
        # the level counts the boundaries whose P(level >= k) reaches its threshold
        cmp = [(k, float(self.cumulative[i, k - 2]), float(tau[k - 2])) for k in range(2, 6)]
        if level > likeliest:
            told = [f"P(level >= {k}) {p:.2f} >= {t:.2f}" for k, p, t in cmp if p >= t]
            return f"; served at L{level}: {', '.join(told)} (each boundary's threshold)"
        told = [f"P(level >= {k}) {p:.2f} < {t:.2f}" for k, p, t in cmp if k <= likeliest and p < t]
        return f"; served at L{level}: {', '.join(told)} (below the boundary's threshold)"

    def explain(self, i: int) -> list[str]:
        """Why tool ``i`` gets its level: the model's distribution, the caution, the floors."""
        p = self.probabilities[i]
        dist = " ".join(f"L{k + 1} {p[k]:.2f}" for k in range(5) if p[k] >= 0.05)
        why = [f"level model: L{int(self.model_levels[i])} ({dist}{self._threshold(i)})"]
        _reads, _acts, little, foreign = (bool(x) for x in self.evidence.facts[i])
        other = i < len(self.evidence.other_script) and self.evidence.other_script[i]
        if little and other and not foreign:
            why.append("the description is not written in English (the encoder's language): read at the cautious end")
        elif little:
            why.append("the description says almost nothing: read at the cautious end of the model's range")
        if foreign:
            why.append("the description does not read as English (the encoder's language): read at the cautious end")
        opening = self.evidence.openings[i] if i < len(self.evidence.openings) else None
        if opening:
            quote = opening if len(opening) <= 80 else opening[:77] + "..."
            why.append(f"its opening {quote!r} is shared by other tools of the registry: read as the registry's, not as this tool's")
        n = self.evidence.lengths[i] if i < len(self.evidence.lengths) else 0
        if n > WORD_CHARS:
            parts = [f"the words its first {WORD_CHARS:,}"] + ([f"the capability patterns its first {MAX_CHARS:,}"] if n > MAX_CHARS else [])
            why.append(f"the description is {n:,} characters: read in part ({', '.join(parts)}; the encoder its first tokens)")
        if self.neighbour_shares is not None:
            c = np.concatenate([[1.0], self.neighbour_shares[i], [0.0]])
            near = " ".join(f"L{k + 1} {100 * (c[k] - c[k + 1]):.0f} %" for k in range(5) if c[k] - c[k + 1] >= 0.005)
            why.append(f"the {self.neighbour_k} rated tools nearest it were rated {near} (weighted by similarity)")
        why += [h.evidence() for h in self.evidence.hits[i]]
        if self.floors[i] > self.model_levels[i]:
            why.append(f"capability floor raises L{int(self.model_levels[i])} to L{int(self.floors[i])}")
        return why


@dataclass(frozen=True)
class LevelModel:
    """The ordinal model's weights and its sidecar (see the module docstring)."""

    arrays: dict[str, np.ndarray] = field(repr=False)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def words(self) -> WordVectors | None:
        """The word vector it reads (None for a model without one)."""
        if _TEXT_KEY not in self.arrays:
            return None
        return WordVectors(tuple(self.meta.get("vocabulary") or ()), self.arrays[_TEXT_KEY].astype(np.float64),
                           float(self.meta.get("word_scale", 1.0)))

    @property
    def neighbours(self) -> tuple[np.ndarray, np.ndarray, int, float] | None:
        """(the rated tools' embeddings, their levels, k, scale) for a model that reads its
        nearest rated tools (:func:`neighbour_shares`), else None."""
        if _NEIGHBOUR_KEYS[0] not in self.arrays:
            return None
        how = self.meta.get("neighbours") or {}
        return (self.arrays[_NEIGHBOUR_KEYS[0]], self.arrays[_NEIGHBOUR_KEYS[1]], int(how.get("k", 10)),
                float(how.get("scale", 1.0)))

    def neighbour_columns(self, tool_emb: np.ndarray) -> np.ndarray | None:
        """The four columns the model reads from the rated tools nearest ``tool_emb`` (None
        for a model without them)."""
        nb = self.neighbours
        if nb is None:
            return None
        ref, levels, k, scale = nb
        return scale * neighbour_shares(tool_emb, ref, levels, k)

    @property
    def dim(self) -> int:
        """The embedding dimension it reads."""
        n_words = 0 if _TEXT_KEY not in self.arrays else int(self.arrays[_TEXT_KEY].shape[0])
        n_neighbours = 0 if self.neighbours is None else 4
        return (int(self.arrays["ordinal.weight"].shape[-1]) - len(CAPABILITY_KEYS) - len(TEXT_FEATURES) - n_words
                - n_neighbours)

    @property
    def encoder_identity(self) -> str | None:
        return self.meta.get("encoder")

    @property
    def tau(self) -> tuple[float, ...]:
        return tuple(float(t) for t in self.meta.get("tau", (0.5,) * 4))

    @property
    def tau_cautious(self) -> tuple[float, ...]:
        return tuple(float(t) for t in self.meta.get("tau_cautious", (0.25,) * 4))

    @property
    def hint_floors(self) -> dict[str, int]:
        """The level each declared hint raises a tool to (only raises)."""
        return {k: int(v) for k, v in self.meta.get("hint_floors", {"destructiveHint": 4, "readOnlyHint=false": 3, "openWorldHint": 2}).items()}

    def cumulative(self, x: Any) -> np.ndarray:
        """P(level > k), k = 1..4, for feature rows ``x`` [N, F] (an array or a sparse matrix):
        one score against four thresholds (weights [F]), or a score per boundary (weights
        [4, F]) read as non-increasing in k (a tool cannot be likelier above L3 than above L2)."""
        w = self.arrays["ordinal.weight"].astype(np.float64)
        th = self.arrays["ordinal.thresholds"].astype(np.float64)[None, :]
        if w.ndim == 1:
            z = np.asarray(x @ w, dtype=np.float64).ravel()
            return _sigmoid(z[:, None] - th)
        z = np.asarray(x @ w.T, dtype=np.float64).reshape(-1, 4)
        return np.minimum.accumulate(_sigmoid(z - th), axis=1)

    def predict(self, tool_emb: np.ndarray, tools: Sequence[Any], evidence: ToolEvidence | None = None) -> LevelPrediction:
        """The level model's reading of ``tools`` (objects with ``name``, ``description`` and
        ``parameters``) from their embeddings [N, D]."""
        e = np.asarray(tool_emb, dtype=np.float32)
        if e.ndim != 2 or e.shape[1] != self.dim:
            raise CheckpointError(f"level model expects {self.dim}-d embeddings, got shape {tuple(e.shape)}")
        if len(tools) != e.shape[0]:
            raise CheckpointError(f"level model: {len(tools)} tools but {e.shape[0]} embeddings")
        evidence = evidence if evidence is not None else ToolEvidence.of(tools)
        base = features(e, evidence)
        words = self.words  # built once: the property rebuilds the vocabulary and idf on each read
        texts = None if words is None else [word_text(t.name, t.description) for t in tools]
        nb, shares = self.neighbours, None
        if nb is not None:
            ref, ref_levels, k, scale = nb
            shares = neighbour_shares(e, ref, ref_levels, k)
        cum = np.empty((len(e), 4))
        for a in range(0, len(e), ROW_BLOCK):  # row by row in blocks: the word vectors are dense
            x = base[a:a + ROW_BLOCK]
            if texts is not None:
                x = np.hstack([x, words.transform(texts[a:a + ROW_BLOCK])])
            if shares is not None:
                x = np.hstack([x, scale * shares[a:a + ROW_BLOCK]])
            cum[a:a + ROW_BLOCK] = self.cumulative(x)
        levels = np.where(evidence.cautious, levels_from_cumulative(cum, self.tau_cautious), levels_from_cumulative(cum, self.tau))
        return LevelPrediction(cum.astype(np.float32), levels.astype(np.int8), evidence, self.hint_floors,
                               shares if shares is None else shares.astype(np.float32), 0 if nb is None else min(nb[2], len(nb[0])),
                               tau=self.tau, tau_cautious=self.tau_cautious)

    def save(self, folder: str | Path) -> Path:
        """Write the weights and the sidecar (with their sha256) atomically."""
        arrays = {k: np.ascontiguousarray(self.arrays[k], dtype=np.float32) for k in (*_KEYS, _TEXT_KEY, *_NEIGHBOUR_KEYS)
                  if k in self.arrays}
        meta = {**self.meta, "format": FORMAT,
                "features": {"embedding": self.dim, "capabilities": list(CAPABILITY_KEYS), "text": list(TEXT_FEATURES)}}
        return write_weights_folder(folder, arrays, meta, WEIGHTS, SIDECAR)


def load_level_model(folder: str | Path) -> LevelModel:
    """Load and check a level model; a missing, torn, tampered or older-format file is a
    CheckpointError, and so is one whose capability list differs from this riskrank's."""
    folder = Path(folder)
    side, weights = folder / SIDECAR, folder / WEIGHTS
    meta, arrays = read_weights_folder(folder, WEIGHTS, SIDECAR, FORMAT, "level model", CheckpointError,
                                       rebuild="rebuild it with benchmarks/risk_levels.py --save")
    missing = [k for k in _KEYS if k not in arrays]
    if _TEXT_KEY in arrays and len(meta.get("vocabulary") or ()) != arrays[_TEXT_KEY].shape[0]:
        raise CheckpointError(f"{side}: its vocabulary does not match {weights.name}'s {_TEXT_KEY}")
    if missing:
        raise CheckpointError(f"{weights}: missing {', '.join(missing)}")
    caps = (meta.get("features") or {}).get("capabilities")
    if caps != list(CAPABILITY_KEYS):
        raise CheckpointError(f"{side}: built for capabilities {caps}, this riskrank detects {list(CAPABILITY_KEYS)}; rebuild it")
    w = arrays["ordinal.weight"]
    if arrays["ordinal.thresholds"].shape != (4,) or not (w.ndim == 1 or (w.ndim == 2 and w.shape[0] == 4)):
        raise CheckpointError(f"{weights}: ordinal arrays have shapes {arrays['ordinal.weight'].shape}, {arrays['ordinal.thresholds'].shape}")
    near = [k for k in _NEIGHBOUR_KEYS if k in arrays]
    if near:
        emb, lv = arrays.get(_NEIGHBOUR_KEYS[0]), arrays.get(_NEIGHBOUR_KEYS[1])
        if len(near) != 2 or emb.ndim != 2 or lv.shape != (emb.shape[0],) or not isinstance(meta.get("neighbours"), dict):
            raise CheckpointError(f"{weights}: its neighbours' arrays ({', '.join(near)}) are not an [R, D] embedding and [R] levels "
                                  f"with a 'neighbours' entry in {side.name}")
    model = LevelModel({k: np.asarray(arrays[k], dtype=np.float32) for k in (*_KEYS, _TEXT_KEY, *_NEIGHBOUR_KEYS) if k in arrays}, meta)
    if near and model.neighbours is not None and model.neighbours[0].shape[1] != model.dim:
        raise CheckpointError(f"{weights}: its neighbours' embeddings are {model.neighbours[0].shape[1]}-d, the model reads {model.dim}-d")
    return model
