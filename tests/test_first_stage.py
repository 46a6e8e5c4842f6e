"""First stage: BM25 against a plain transcription of the (Lucene) formula on a hand corpus,
dense cosine, and top-M equal to the prefix of the full stable ranking, ties included."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from riskrank.first_stage import BM25Retriever, DenseRetriever, rank, top_m

CORPUS = [
    "getWeather: weather forecast city",
    "delete_file: delete file disk",
    "send_email: send email message",
    "city_guide: city restaurants museums",
    "read_file: read file contents",
]


def tokens(text: str) -> list[str]:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text).replace("_", " ")
    return [t for t in re.findall(r"\b\w\w+\b", text.lower()) if t != "the"]


def reference_bm25(corpus: list[str], query: str, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """score(q, d) = sum_t idf(t) * tf / (tf + k1 (1 - b + b |d| / avgdl)),
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))  (Lucene; Kamphuis et al. 2020)."""
    docs = [tokens(d) for d in corpus]
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    out = np.zeros(n)
    for t in dict.fromkeys(tokens(query)):
        df = sum(t in d for d in docs)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(t)
            out[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avgdl))
    return out


@pytest.mark.parametrize(
    "query",
    ["weather in the city", "delete the file", "read file", "email", "city museums weather", "getWeather now"],
)
def test_bm25_matches_the_formula(query):
    bm = BM25Retriever(CORPUS)
    got = bm.score([query])
    assert got.shape == (1, len(CORPUS)) and got.dtype == np.float32
    np.testing.assert_allclose(got[0], reference_bm25(CORPUS, query), rtol=1e-5, atol=1e-6)


def test_bm25_rankings_and_unknown_words():
    bm = BM25Retriever(CORPUS)
    s = bm.score(["weather forecast", "file", "zebra quantum", "the"])
    assert int(np.argmax(s[0])) == 0  # camelCase name split: getWeather -> weather
    assert set(np.flatnonzero(s[1] > 0)) == {1, 4}
    assert not s[2].any() and not s[3].any()  # nothing known -> zeros, no error


def test_dense_cosine():
    rng = np.random.default_rng(0)
    T = rng.normal(size=(50, 8)).astype(np.float32)
    T /= np.linalg.norm(T, axis=1, keepdims=True)
    Q = rng.normal(size=(3, 8)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    d = DenseRetriever(T)
    np.testing.assert_allclose(d.score(Q), Q @ T.T, rtol=1e-6)
    assert d.score(Q[0]).shape == (1, 50)
    idx, sc = d.search(Q, m=7)
    assert idx.shape == (3, 7)
    np.testing.assert_array_equal(idx, np.argsort(-(Q @ T.T), axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(sc, np.take_along_axis(Q @ T.T, idx, 1), rtol=1e-6)
    assert np.all(np.diff(sc, axis=1) <= 0)


@pytest.mark.parametrize("seed", range(6))
def test_top_m_is_the_prefix_of_the_full_ranking_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    # few distinct values -> many ties, which must break by tool index
    scores = rng.integers(0, 6, size=(4, n)).astype(np.float32)
    full = np.argsort(-scores, axis=1, kind="stable")
    np.testing.assert_array_equal(rank(scores), full)
    for m in sorted({1, 2, 3, n // 4, n // 2 - 1, n // 2, n - 1, n, n + 10} - {0, -1}):
        if m < 1:
            continue
        np.testing.assert_array_equal(top_m(scores, m), full[:, : min(m, n)], err_msg=f"n={n} m={m}")


def test_top_m_single_row_and_floats():
    s = np.array([0.1, 0.5, 0.5, -1.0, 0.5, 0.3], dtype=np.float32)
    assert top_m(s, 2).tolist() == [[1, 2]]
    assert top_m(s, 4).tolist() == [[1, 2, 4, 5]]
    assert rank(s).tolist() == [[1, 2, 4, 5, 0, 3]]
