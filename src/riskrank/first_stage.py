"""First-stage relevance over the full pool: BM25, dense cosine, their fusion, and the
lexical evidence the residual head reads beside the cosine.

Scores are float32 arrays [Q, N] aligned with the registry (or [Q, M] over per-query
candidates). Rankings break ties by tool index (stable sorts) so every run of every method is
deterministic.

Three relevance first stages:

* ``dense``: cosine between the query and tool embeddings (:class:`DenseRetriever`);
* ``bm25``: Okapi BM25 (:class:`BM25Retriever`, the bm25s index) over one text per tool: the
  name split into words, the description and the parameter names (:func:`lexical_text`);
* ``hybrid``: a :class:`Fusion` of the two, per query: a convex combination of normalised
  scores (min-max or z-score over the scored set) or reciprocal-rank fusion. Which rule and
  weight is a validation choice (``training.choose_inference``): benchmarks disagree on how
  much lexical evidence helps (Seal-Tools queries reuse tool-name words, UltraTool's do not).

:class:`LexicalIndex` holds what a registry needs for the lexical evidence, built once: the
BM25 index and an inverted index from name words (and parameter-name words) to tools. A task
then costs the postings of its own words, never a scan of every name: the four name features
(:data:`LEXICAL_FEATURES`) are non-zero only for tools that share a word with the task.
``tests/naive.py`` computes them by scanning every name, and the tests hold this to it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from riskrank.errors import RiskrankError
from riskrank.names import looks_like_another
from riskrank.risk import split_name

DEFAULT_TOP_M = 100
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
#: A word of a tool name or a task for the name features: letters and digits of any script.
_WORD = re.compile(r"[^\W_]+")
#: An identifier run: what the word bounds of the exact-name feature delimit.
_RUN = re.compile(r"[a-z0-9_]+")
#: A name shorter than this never counts as named in a task ("id", "go" occur by chance).
MIN_NAMED_LENGTH = 3
#: The residual head's lexical features, in its weight vector's order: the cosine min-max
#: normalised per query, BM25 divided by the query's best BM25 (0 without a match), the exact
#: name occurring in the task, the fraction of the name's words in the task, the same
#: weighted by idf, and the fraction of the parameter names' words in the task.
LEXICAL_FEATURES = ("cos", "bm25", "ex", "fr", "fri", "frp")
#: Per-query normalisations of the convex fusion.
NORMS = ("minmax", "z")
FUSION_RULES = ("convex", "rrf")
#: The validation grid of the fusion (``training.choose_inference``).
FUSION_WEIGHTS = tuple(round(0.05 * i, 2) for i in range(21))
RRF_KS = (5, 10, 20, 30, 60, 100)
_EPS = 1e-6


# -- texts ----------------------------------------------------------------------------------------
def parameter_names(parameters: Any) -> list[str]:
    """The parameter names of a tool's JSON schema (its ``properties``), [] without any."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    return [str(p) for p in props] if isinstance(props, dict) else []


def lexical_text(name: str, description: str, parameters: Sequence[str] = ()) -> str:
    """The text BM25 indexes for a tool: name words, description, parameter-name words (on
    Seal-Tools the parameter names lift BM25's NDCG@5 from 0.790 to 0.828)."""
    return " ".join([split_name(name), description, *(split_name(p) for p in parameters)])


# -- BM25 -----------------------------------------------------------------------------------------
class BM25Retriever:
    """Okapi BM25 (bm25s, Lucene variant, k1=1.5, b=0.75, English stopwords) over tool texts.

    bm25s builds the index: a token-major sparse matrix of per-document scores, each token's
    postings sorted by tool. A query is scored from the postings of its own tokens: over the
    full pool one accumulation (:meth:`score`, equal to bm25s's own ``get_scores``, tested),
    over a candidate set a binary search per token and candidate (:meth:`score_candidates`),
    and its best tools (:meth:`top`, the approximate first stage's lexical candidates) from
    each token's highest-scoring postings, so a word shared by half of a million tools costs
    ``depth`` postings, not half a million."""

    def __init__(self, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        # bm25s sets its logger to DEBUG when imported, so that under a root handler (an MCP
        # SDK's, a host's) every index build printed a debug line: the application decides
        logging.getLogger("bm25s").setLevel(logging.NOTSET)

        self.n = len(texts)
        tokens = bm25s.tokenize([self._prep(t) for t in texts], stopwords="en", show_progress=False)
        self.vocab: dict[str, int] = dict(tokens.vocab)
        self.model = None
        if any(len(ids) for ids in tokens.ids):
            self.model = bm25s.BM25(k1=k1, b=b)
            with np.errstate(divide="ignore", invalid="ignore"):
                self.model.index(tokens, show_progress=False)
            sc = self.model.scores
            self._indptr = np.asarray(sc["indptr"], dtype=np.int64)
            self._docs = np.asarray(sc["indices"], dtype=np.int64)
            self._vals = np.asarray(sc["data"], dtype=np.float32)
            # Each token's postings by descending score (impact order), for top().
            owner = np.repeat(np.arange(len(self._indptr) - 1), np.diff(self._indptr))
            self._impact = np.lexsort((-self._vals, owner)).astype(np.int64)
        else:  # no indexable token in the whole registry (names like "x", empty descriptions)
            self.vocab = {}
        del tokens

    @staticmethod
    def _prep(text: str) -> str:
        # Split camelCase / snake_case identifiers so "getWeather" matches "weather".
        return split_name(text)

    def token_ids(self, query: str) -> np.ndarray:
        """The query's known tokens as vocabulary ids, repeats kept (a repeated word counts
        again, as in bm25s)."""
        ids = [self.vocab[t] for t in _TOKEN.findall(self._prep(query).lower()) if t in self.vocab]
        return np.asarray(ids, dtype=np.int64)

    def score(self, queries: Sequence[str]) -> np.ndarray:
        """BM25 scores [Q, N]; a query with no known token scores 0 everywhere."""
        out = np.zeros((len(queries), self.n), dtype=np.float32)
        if self.model is None:
            return out
        for i, q in enumerate(queries):
            ids = self.token_ids(q)
            if ids.size:
                pos = _ranges(self._indptr[ids], self._indptr[ids + 1])
                out[i] = np.bincount(self._docs[pos], weights=self._vals[pos], minlength=self.n)
        return out

    def _score_tools(self, ids: np.ndarray, tools: np.ndarray) -> np.ndarray:
        """Exact BM25 of ``tools`` for the query tokens ``ids``: per token, a binary search
        in its postings (sorted by tool)."""
        out = np.zeros(tools.shape, dtype=np.float32)
        for t in ids.tolist():
            lo, hi = self._indptr[t], self._indptr[t + 1]
            docs = self._docs[lo:hi]
            j = np.minimum(np.searchsorted(docs, tools), docs.size - 1)
            hit = docs[j] == tools
            out[hit] += self._vals[lo + j[hit]]
        return out

    def score_candidates(self, queries: Sequence[str], candidates: np.ndarray) -> np.ndarray:
        """BM25 scores [Q, M] of each query's candidate tools [Q, M]."""
        candidates = np.atleast_2d(candidates)
        out = np.zeros(candidates.shape, dtype=np.float32)
        if self.model is None:
            return out
        for i, q in enumerate(queries):
            ids = self.token_ids(q)
            if ids.size:
                out[i] = self._score_tools(ids, np.asarray(candidates[i], dtype=np.int64))
        return out

    def top(self, query: str, m: int, depth: int = 256) -> np.ndarray:
        """The (at most) m best tools with a non-zero score, best first, ties by index.
        Exact when no query token has more than ``depth`` postings; otherwise the best of the
        union of each token's ``depth`` highest-scoring tools, scored exactly (a tool outside
        every such list scores below each list's last entry on every token). At 10^5
        synthetic tools the default depth finds 96% of the exact top-25 in 1.1 ms instead of
        4.2 ms at depth 4,096 (docs/benchmarks.md)."""
        if self.model is None:
            return np.zeros(0, np.int64)
        ids = np.unique(self.token_ids(query))  # distinct tokens; the scoring counts repeats
        if not ids.size:
            return np.zeros(0, np.int64)
        starts = self._indptr[ids]
        stops = np.minimum(self._indptr[ids + 1], starts + depth)
        tools = np.unique(self._docs[self._impact[_ranges(starts, stops)]])
        vals = self._score_tools(self.token_ids(query), tools)
        if tools.size > m:
            keep = np.argpartition(-vals, m - 1)[:m]
            keep = np.flatnonzero(vals >= vals[keep].min())
            tools, vals = tools[keep], vals[keep]
        order = np.lexsort((tools, -vals))[:m]
        return tools[order]


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start, stop) over the pairs, without a Python loop."""
    lens = np.maximum(stops - starts, 0)
    total = int(lens.sum())
    if not total:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return np.arange(total, dtype=np.int64) + offsets


# -- name words -----------------------------------------------------------------------------------
def words(text: str) -> list[str]:
    """Distinct lower-case words of a name or a task, in order: letters and digits, camelCase
    and snake_case split (``getV2API`` -> get, v2, api)."""
    return list(dict.fromkeys(_WORD.findall(split_name(text).lower())))


def task_words(task: str) -> set[str]:
    """A task's words for the name features: its split words and its plain words (so a task
    that writes ``getWeather`` matches both ``get_weather`` and ``getweather``)."""
    return set(words(task)) | set(_WORD.findall(task.lower()))


class _WordIndex:
    """Tools x words, both ways: postings (word -> tools) for the full pool, rows (tool ->
    words) for a candidate set; idf(w) = ln(1 + N / df(w)) over the tools' own words."""

    def __init__(self, per_tool: Sequence[Sequence[str]]) -> None:
        n = len(per_tool)
        self.vocab: dict[str, int] = {}
        rows = [np.asarray([self.vocab.setdefault(w, len(self.vocab)) for w in dict.fromkeys(ws)], np.int64) for ws in per_tool]
        self.n_words = np.asarray([len(r) for r in rows], dtype=np.int64)
        self.row_ptr = np.concatenate([[0], np.cumsum(self.n_words)]).astype(np.int64)
        self.row_words = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        owners = np.repeat(np.arange(n, dtype=np.int64), self.n_words)
        order = np.argsort(self.row_words, kind="stable")
        self.post_tools = owners[order]
        df = np.bincount(self.row_words, minlength=len(self.vocab)).astype(np.float64)
        self.post_ptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
        self.idf = np.log1p(n / np.maximum(df, 1.0)).astype(np.float32)
        self.idf_sum = np.bincount(owners, weights=self.idf[self.row_words], minlength=n).astype(np.float32)
        self.n = n

    def ids(self, task_set: set[str]) -> np.ndarray:
        return np.asarray(sorted(self.vocab[w] for w in task_set if w in self.vocab), dtype=np.int64)

    def full(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fraction, idf-weighted fraction) [N] of each tool's words among ``ids``."""
        pos = _ranges(self.post_ptr[ids], self.post_ptr[ids + 1])
        tools = self.post_tools[pos]
        word = np.repeat(ids, self.post_ptr[ids + 1] - self.post_ptr[ids])
        count = np.bincount(tools, minlength=self.n).astype(np.float32)
        weight = np.bincount(tools, weights=self.idf[word], minlength=self.n).astype(np.float32)
        return _ratio(count, self.n_words), _ratio(weight, self.idf_sum)

    def candidates(self, ids: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The same fractions [M] for the tools ``cand`` only (their own words)."""
        pos = _ranges(self.row_ptr[cand], self.row_ptr[cand + 1])
        owner = np.repeat(np.arange(cand.size), self.n_words[cand])
        w = self.row_words[pos]
        hit = np.isin(w, ids)
        count = np.bincount(owner[hit], minlength=cand.size).astype(np.float32)
        weight = np.bincount(owner[hit], weights=self.idf[w[hit]], minlength=cand.size).astype(np.float32)
        return _ratio(count, self.n_words[cand]), _ratio(weight, self.idf_sum[cand])


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros(a.shape, np.float32), where=b > 0).astype(np.float32)


@dataclass
class LexicalEvidence:
    """The lexical evidence of Q tasks over a scored set of L tools, each [Q, L] float32:
    BM25, and the name features (:data:`LEXICAL_FEATURES`); ``named`` [Q, L] marks the tools
    a task names (an identifier-like name occurring in it, :meth:`LexicalIndex.named`)."""

    bm25: np.ndarray
    ex: np.ndarray
    fr: np.ndarray
    fri: np.ndarray
    frp: np.ndarray
    named: np.ndarray

    def rows(self, idx: Any) -> LexicalEvidence:
        """The evidence of a subset of the tasks."""
        return replace(self, **{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def take(self, candidates: np.ndarray) -> LexicalEvidence:
        """Full-pool evidence [Q, N] gathered to per-query candidates [Q, M]."""
        return replace(self, **{f.name: np.take_along_axis(getattr(self, f.name), candidates, axis=1) for f in fields(self)})


class LexicalIndex:
    """What one registry needs for the lexical evidence, built once per registry (see the
    module docstring). ``names``, ``descriptions`` and ``parameters`` (each tool's parameter
    names) are aligned with the registry."""

    def __init__(self, names: Sequence[str], descriptions: Sequence[str], parameters: Sequence[Sequence[str]] | None = None) -> None:
        params = list(parameters) if parameters is not None else [[] for _ in names]
        if not len(names) == len(descriptions) == len(params):
            raise RiskrankError("names, descriptions and parameters must have one entry per tool")
        self.n = len(names)
        self.bm25 = BM25Retriever([lexical_text(n, d, p) for n, d, p in zip(names, descriptions, params, strict=True)])
        self._name_words = _WordIndex([words(n) for n in names])
        self._param_words = _WordIndex([[w for p in ps for w in words(p)] for ps in params])
        #: A name that is an identifier (``delete_files``, ``getWeather``), not a plain word or
        #: phrase (``translate``): only those count as named by a task (plain words occur in
        #: tasks by chance: on Seal-Tools their "naming" is right 27% of the time).
        # A name spelt with look-alike characters (a Cyrillic e in delete_files) is never a
        # "named" tool: the task's text cannot tell it from the name it imitates.
        self.identifier_like = np.asarray([split_name(n) != n and not looks_like_another(n) for n in names], dtype=bool)
        # The exact-name feature: a lower-cased name made of one identifier run is found by
        # the task's own runs (a dict lookup); any other name by the first run it starts with,
        # then checked with its word-bounded pattern (rare: names with spaces, dots, hyphens).
        self._exact: dict[str, list[int]] = {}
        self._exact_other: dict[str, list[tuple[int, re.Pattern[str]]]] = {}
        for i, name in enumerate(names):
            low = name.lower()
            if len(low) < MIN_NAMED_LENGTH:
                continue
            if _RUN.fullmatch(low):
                self._exact.setdefault(low, []).append(i)
            else:
                m = re.match(r"[a-z0-9_]+", low)
                pattern = re.compile(r"(?<![a-z0-9_])" + re.escape(low) + r"(?![a-z0-9_])")
                self._exact_other.setdefault(m.group(0) if m else "", []).append((i, pattern))

    @classmethod
    def from_registry(cls, registry: Any) -> LexicalIndex:
        """The index of a :class:`riskrank.registry.ToolRegistry`."""
        tools = list(registry)
        return cls([t.name for t in tools], [t.description for t in tools], [parameter_names(t.parameters) for t in tools])

    def exact(self, task: str) -> list[int]:
        """The tools whose lower-cased name (3+ characters) occurs in the lower-cased task
        between identifier bounds (``(?<![a-z0-9_])name(?![a-z0-9_])``)."""
        low = task.lower()
        runs = set(_RUN.findall(low))
        hits = [i for r in runs for i in self._exact.get(r, ())]
        for key in (*runs, ""):
            hits += [i for i, pattern in self._exact_other.get(key, ()) if pattern.search(low)]
        return sorted(set(hits))

    def evidence(self, texts: Sequence[str], candidates: np.ndarray | None = None) -> LexicalEvidence:
        """The lexical evidence of ``texts`` over the full pool [Q, N], or over per-query
        ``candidates`` [Q, M] (computed from those tools' own words only)."""
        q = len(texts)
        shape = (q, self.n) if candidates is None else np.atleast_2d(candidates).shape
        if candidates is not None and shape[0] != q:
            raise RiskrankError(f"candidates have {shape[0]} rows for {q} tasks")
        out = {k: np.zeros(shape, np.float32) for k in ("ex", "fr", "fri", "frp")}
        for i, task in enumerate(texts):
            tw = task_words(task)
            name_ids, param_ids = self._name_words.ids(tw), self._param_words.ids(tw)
            named = np.asarray(self.exact(task), dtype=np.int64)
            if candidates is None:
                out["fr"][i], out["fri"][i] = self._name_words.full(name_ids)
                out["frp"][i] = self._param_words.full(param_ids)[0]
                out["ex"][i, named] = 1.0
            else:
                cand = np.asarray(candidates[i], dtype=np.int64)
                out["fr"][i], out["fri"][i] = self._name_words.candidates(name_ids, cand)
                out["frp"][i] = self._param_words.candidates(param_ids, cand)[0]
                out["ex"][i] = np.isin(cand, named)
        bm = self.bm25.score(texts) if candidates is None else self.bm25.score_candidates(texts, candidates)
        ident = self.identifier_like if candidates is None else self.identifier_like[np.atleast_2d(candidates)]
        return LexicalEvidence(bm, out["ex"], out["fr"], out["fri"], out["frp"], (out["ex"] > 0) & ident)


# -- normalisation and fusion -------------------------------------------------------------------
def normalise(x: np.ndarray, how: str) -> np.ndarray:
    """Per-row normalisation over the scored set: ``minmax`` (x - min) / (max - min) or ``z``
    (x - mean) / std, with the spread floored at 1e-6 so a constant row (a task with no
    lexical match) is all zeros, never NaN."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float32))
    if how == "minmax":
        lo = x.min(axis=1, keepdims=True)
        return ((x - lo) / np.maximum(x.max(axis=1, keepdims=True) - lo, _EPS)).astype(np.float32)
    if how == "z":
        return ((x - x.mean(axis=1, keepdims=True)) / np.maximum(x.std(axis=1, keepdims=True), _EPS)).astype(np.float32)
    raise RiskrankError(f"unknown normalisation {how!r}; choose from {', '.join(NORMS)}")


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based rank of each tool in its row (ties by tool index, as :func:`rank`)."""
    order = rank(x)
    out = np.empty_like(order)
    np.put_along_axis(out, order, np.arange(1, order.shape[1] + 1)[None, :].repeat(order.shape[0], 0), axis=1)
    return out


@dataclass(frozen=True)
class Fusion:
    """The hybrid first stage: h = (1 - w) n(cos) + w n(bm25) for ``rule="convex"`` (n the
    per-query ``norm``), or h = (1 - w) / (k + rank_cos) + w / (k + rank_bm25) for ``rrf``
    (the BM25 term 0 for a tool with no lexical match). ``weight`` is w, the lexical share."""

    rule: str = "convex"
    norm: str | None = "z"
    weight: float = 0.3
    k: int | None = None

    def __post_init__(self) -> None:
        if self.rule not in FUSION_RULES:
            raise RiskrankError(f"unknown fusion rule {self.rule!r}; choose from {', '.join(FUSION_RULES)}")
        if self.rule == "convex" and self.norm not in NORMS:
            raise RiskrankError(f"the convex fusion needs a normalisation from {', '.join(NORMS)}, got {self.norm!r}")
        if self.rule == "rrf" and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise RiskrankError(f"reciprocal-rank fusion needs an integer k >= 1, got {self.k!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, int | float) or not 0.0 <= self.weight <= 1.0:
            raise RiskrankError(f"the fusion weight must be in [0, 1], got {self.weight!r}")

    def __call__(self, cos: np.ndarray, bm25: np.ndarray) -> np.ndarray:
        cos, bm25 = np.atleast_2d(cos), np.atleast_2d(bm25)
        w = np.float32(self.weight)
        if self.rule == "convex":
            return ((1 - w) * normalise(cos, self.norm) + w * normalise(bm25, self.norm)).astype(np.float32)
        k = np.float32(self.k)
        # Only a tool that matches the task lexically gets BM25 rank credit: the order of the
        # zero-score rest is arbitrary (tool index), not evidence.
        lexical = np.where(bm25 > 0, 1.0 / (k + ranks(bm25)), 0.0)
        return ((1 - w) / (k + ranks(cos)) + w * lexical).astype(np.float32)

    def describe(self) -> str:
        if self.rule == "convex":
            return f"convex {'min-max' if self.norm == 'minmax' else 'z-score'}, w = {self.weight:g}"
        return f"RRF k = {self.k}, w = {self.weight:g}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "norm": self.norm, "weight": float(self.weight), "k": self.k}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fusion:
        return cls(d["rule"], d.get("norm"), float(d["weight"]), d.get("k"))


#: The fusion of a registry without validation queries: a z-score convex fusion at w = 0.3,
#: within 1% of max(bm25, dense) on UltraTool, Seal-Tools and the demo registry (the most
#: robust single weight over the three; docs/benchmarks.md). Validated fusions replace it.
PRIOR_FUSION = Fusion("convex", "z", 0.3)


def fusion_grid() -> list[Fusion]:
    """Every fusion validation chooses from: convex (min-max, z) and RRF over the weights."""
    grid = [Fusion("convex", n, w) for n in NORMS for w in FUSION_WEIGHTS]
    return grid + [Fusion("rrf", None, w, k) for k in RRF_KS for w in FUSION_WEIGHTS]


@dataclass
class RelevanceInputs:
    """What a relevance head reads beyond the embeddings, over the scored set [Q, L]: ``f0``,
    the first stage's score (the cosine for the dense head; the fusion min-max rescaled to
    [0, 1] per query for the hybrid one) and ``x``, the lexical features
    (:data:`LEXICAL_FEATURES`, one [Q, L] array each; empty for the dense head)."""

    f0: np.ndarray
    x: tuple[np.ndarray, ...] = ()

    def rows(self, idx: Any) -> RelevanceInputs:
        return RelevanceInputs(self.f0[idx], tuple(a[idx] for a in self.x))

    def take(self, candidates: np.ndarray) -> RelevanceInputs:
        g = lambda a: np.take_along_axis(a, candidates, axis=1)  # noqa: E731
        return RelevanceInputs(g(self.f0), tuple(g(a) for a in self.x))


def relevance_inputs(cos: np.ndarray, lexical: LexicalEvidence | None = None, fusion: Fusion | None = None) -> RelevanceInputs:
    """The head inputs over a scored set: the dense head's (``fusion`` None) or the hybrid
    head's (normalised per query over the same set)."""
    cos = np.atleast_2d(np.asarray(cos, dtype=np.float32))
    if fusion is None:
        return RelevanceInputs(cos)
    if lexical is None:
        raise RiskrankError("the hybrid relevance head needs the lexical evidence of the task texts")
    bm = lexical.bm25
    best = bm.max(axis=1, keepdims=True)
    bm_scaled = np.divide(bm, best, out=np.zeros_like(bm), where=best > 0)
    f0 = normalise(fusion(cos, bm), "minmax")
    return RelevanceInputs(f0, (normalise(cos, "minmax"), bm_scaled, lexical.ex, lexical.fr, lexical.fri, lexical.frp))


def pin_named(scores: np.ndarray, named: np.ndarray | None) -> np.ndarray:
    """Scores with every named tool of a row lifted above every other tool of the row (their
    order among themselves kept): a task that names a tool exactly gets it first. The caller
    reports the scores it had; only the ranking reads these."""
    if named is None or not named.any():
        return scores
    s = np.array(scores, dtype=np.float32, copy=True)
    rows = np.flatnonzero(named.any(axis=1))
    sub = s[rows]
    lift = sub.max(axis=1, keepdims=True) - sub.min(axis=1, keepdims=True) + 1.0
    s[rows] = np.where(named[rows], sub + lift, sub)
    return s


# -- dense and ranking ----------------------------------------------------------------------------
class DenseRetriever:
    """Cosine similarity between unit-norm query and tool embeddings (one matmul)."""

    def __init__(self, tool_emb: np.ndarray) -> None:
        self.tool_emb = np.ascontiguousarray(tool_emb, dtype=np.float32)

    def score(self, query_emb: np.ndarray) -> np.ndarray:
        return np.asarray(np.atleast_2d(query_emb), dtype=np.float32) @ self.tool_emb.T

    def search(self, query_emb: np.ndarray, m: int = DEFAULT_TOP_M) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-m: (indices [Q, m], scores [Q, m]), best first."""
        scores = self.score(query_emb)
        idx = top_m(scores, m)
        return idx, np.take_along_axis(scores, idx, axis=1)


def rank(scores: np.ndarray) -> np.ndarray:
    """Full ranking [Q, N] best first, ties by tool index."""
    scores = np.atleast_2d(scores)
    return np.argsort(-scores, axis=1, kind="stable")


def top_m(scores: np.ndarray, m: int) -> np.ndarray:
    """Indices of the m best tools per row, best first, equal to ``rank(scores)[:, :m]``
    (ties broken by tool index) without sorting the pool: a partial partition finds each
    row's m-th best value, and only the tools at or above it are sorted. At a million tools
    that is ~2 ms per row instead of ~160 ms for the full stable sort."""
    scores = np.atleast_2d(scores)
    n_q, n = scores.shape
    m = max(0, min(int(m), n))
    if m == 0:
        return np.zeros((n_q, 0), dtype=np.int64)
    if m >= n // 2:
        return rank(scores)[:, :m]
    out = np.empty((n_q, m), dtype=np.int64)
    for i in range(n_q):
        row = scores[i]
        cut = np.partition(row, n - m)[n - m]  # the m-th largest value
        # Every tool tied with the m-th score is kept, so index tie-breaking stays exact.
        cand = np.flatnonzero(row >= cut)
        if cand.size < m:  # NaN scores: let the full sort place them (last)
            out[i] = rank(row)[0, :m]
            continue
        order = np.lexsort((cand, -row[cand]))
        out[i] = cand[order[:m]]
    return out


def union_candidates(dense: np.ndarray, lexical: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Per-query candidate sets [Q, width]: each row's lexical candidates (BM25's best), then
    its dense candidates in order, skipping repeats, until ``width`` tools. ``dense`` [Q, D]
    must hold at least ``width`` distinct tools per row."""
    out = np.empty((dense.shape[0], width), dtype=np.int64)
    for i, lex in enumerate(lexical):
        lex = np.asarray(lex, dtype=np.int64)[:width]
        rest = dense[i][~np.isin(dense[i], lex)]
        row = np.concatenate([lex, rest])[:width]
        if row.size < width:
            raise RiskrankError(f"too few candidates for a set of {width}")
        out[i] = row
    return out
