"""The learned poisoning detector: does a span of a tool's definition speak to the model?

The rule scan (:mod:`riskrank.scan`) knows the phrases its authors thought of. This detector
scores every sentence-like span of a definition's texts (descriptions, parameter descriptions,
titles, enum values, defaults, examples; text smuggled in tag characters; base64 or hex blobs
decoded once) for what poisoning *is*: text that addresses the model instead of describing the
tool, asks it to involve other tools, to keep something from the user, to skip confirmation,
or to move data somewhere. It was trained on attack instructions nobody wrote as tools
(BIPIA's) and hand-written ones planted into real definitions, against tens of thousands of real
tool and parameter descriptions (``riskrank.training.poison``; docs/trust.md has the figures).

A span's inputs:

- the mean of its word pieces' *static embeddings*: each vocabulary piece of the bundled
  MiniLM encoder, run through the encoder alone (the encoder's own view of the piece, with no
  context). Running the encoder on every span costs about 7 ms a span on two CPU cores, some
  400 times the scan's budget (10 ms per 100 tools); a mean of static rows costs microseconds;
- which cue words it holds (second person, the assistant named, the user, secrecy, negation,
  consent, data movement, authority, the conversation, the answer, other tools, secrets,
  code), and which its first word is;
- what it is and how it looks: a question, a URL, an e-mail address, a file path, code,
  quoted names, its length, capitals, a ``Label:`` lead, a lead-in ending in ``:``;
- what it names: this tool ("this tool", its own name), one of its own parameters, another
  identifier (snake_case, camelCase, in backticks);
- how it sits in its tool: its topic against the tool's name and its other spans', and how
  those other spans talk (the share addressing the model, the share giving orders): a
  definition written throughout as usage advice to the model is its authors' style, a lone
  order in a plain definition is not.

A small MLP reads them. Its first layer is linear, so it is applied to each vocabulary row once
(the shipped table holds ``static @ W1``: the mean of projected rows equals the projection of
the mean), and inference is a lookup, a segment sum and one small matrix product in NumPy.

The weights are ``base/poison/poison.safetensors`` with a JSON sidecar (``poison.json``: its
sha256, the tokenizer's sha256, the cue words, the thresholds chosen on validation data and how
it was trained); no pickles. A span scores in [0, 1]; at or above ``thresholds.poisoned`` it
is a ``poisoned`` finding, at or above ``thresholds.suspicious`` a ``suspicious`` one.

Languages: the cue words are English and the encoder's vocabulary is English word pieces; a
span in another language is still scored (its pieces and embeddings are whatever the
vocabulary makes of it, accents stripped), with the recall docs/trust.md measures on texts in
five other languages.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from riskrank.errors import CheckpointError
from riskrank.fileio import read_weights_folder, write_weights_folder

FORMAT = "riskrank-poison/1"
WEIGHTS = "poison.safetensors"
SIDECAR = "poison.json"
#: The shipped detector (package data).
DETECTOR_DIR = Path(__file__).with_name("base") / "poison"

#: A span holds at most this many words: a longer sentence is read in overlapping windows, so
#: a directive inside a long paragraph is not averaged away.
MAX_SPAN_WORDS = 48
#: Spans with fewer words (punctuation marks not counted) are not scored: a directive needs
#: words (enum values such as ``fast`` or ``asc``, or a tag such as ``<hint>``, are not sentences).
MIN_SPAN_WORDS = 3
#: A field's text is read up to this many characters (a 1 MB description is read whole, in
#: pieces of :data:`PIECE_SPANS` spans); beyond it only the rule scan's ``oversized`` speaks.
MAX_FIELD_CHARS = 1 << 20
PIECE_SPANS = 4096
#: Words remembered with their pieces and cue bits (a catalogue's vocabulary is far smaller).
MAX_WORDS = 200_000
#: Characters of text whose spans are remembered (a catalogue listed again, or another
#: server's copy of a tool, costs lookups); past it the memory starts again.
MEMO_CHARS = 1 << 25

#: Cue words by group (after NFKC and case folding; text is split at every punctuation mark,
#: so "don't" is ``don ' t`` and "pre-approved" is ``pre - approved``). Written with the
#: detector, after the hand-written attack sets were committed; the shipped sidecar pins them.
LEXICONS: dict[str, tuple[str, ...]] = {
    "second_person": ("you", "your", "yours", "yourself", "yourselves"),
    "assistant": ("assistant", "assistants", "ai", "model", "models", "llm", "llms", "agent", "agents", "chatbot",
                  "bot", "gpt", "chatgpt", "claude", "copilot", "gemini"),
    "user": ("user", "users", "human", "humans", "person", "customer", "customers", "owner", "operator"),
    "secrecy": ("hide", "hidden", "secret", "secretly", "silently", "silent", "quietly", "covertly", "covert",
                "discreetly", "conceal", "unaware", "invisible", "omit", "mention", "mentioning", "reveal", "disclose",
                "tell", "telling", "notice", "aware", "background"),
    "negation": ("not", "never", "no", "don", "doesn", "nothing", "without", "neither", "nor", "avoid"),
    "consent": ("approve", "approved", "approval", "preapproved", "consent", "consented", "permission",
                "permissions", "authorized", "authorised", "authorization", "authorisation", "confirm",
                "confirmation", "confirmed", "granted", "agreed", "waived", "opted", "allowed"),
    "data_move": ("send", "sent", "forward", "forwarded", "upload", "uploaded", "post", "transmit", "copy", "copied",
                  "mirror", "exfiltrate", "share", "email", "attach", "append", "include", "pass", "submit", "export",
                  "paste", "leak", "report", "sync", "route", "routed", "deliver", "duplicate", "supply", "provide",
                  "put", "embed", "insert"),
    "authority": ("important", "must", "always", "required", "mandatory", "critical", "priority", "override",
                  "directive", "instruction", "instructions", "policy", "compliance", "rule", "rules", "urgent",
                  "immediately", "system", "developer", "admin", "administrator", "note"),
    "conversation": ("conversation", "chat", "history", "transcript", "prompt", "prompts", "messages", "session"),
    "answer": ("reply", "response", "answer", "respond", "responses", "answers", "replies", "say", "claim",
               "recommend", "pretend"),
    "other_tools": ("tool", "tools", "server", "servers", "connector", "plugin", "integration", "instead", "other",
                    "another", "whenever", "every", "call", "invoke"),
    "secrets": ("password", "passwords", "token", "tokens", "key", "keys", "credential", "credentials", "secrets",
                "ssh", "env", "cookie", "cookies", "api", "private"),
    "code": ("import", "os", "subprocess", "requests", "exec", "eval", "curl", "wget", "bash", "sh", "socket", "def",
             "http", "https", "www"),
}
#: First words that open a directive more often than a description.
OPENERS: tuple[str, ...] = ("if", "when", "whenever", "before", "after", "always", "never", "do", "don", "please",
                            "you", "your", "assistant", "ai", "model", "note", "important", "ignore", "system",
                            "as", "should", "once", "also", "from", "for", "in", "per", "keep", "make")
#: The span's own features (computed here, not learned words), in the weights' order: how it
#: looks, and how it sits in its tool (the cosine of its topic vector with the tool name's and
#: with the mean of the tool's other spans'; whether there are others).
SPAN_FEATURES = ("question", "url", "email", "path", "code", "quoted", "log_words", "capitals", "label_lead",
                 "lead_in", "self_ref", "own_name", "foreign_name", "topic_name", "topic_rest", "has_rest", "rest_addressed",
                 "rest_orders")
#: Field kinds the detector reads. Kind is not an input: real definitions have few long enum
#: values or defaults, so a model that read the kind would learn where attacks were planted.
FIELD_KINDS = ("description", "param", "value", "title")

#: What each cue group says about a span, in the order a finding lists them.
WHY = (
    ("secrecy", "asks it to keep something from the user"),
    ("consent", "claims the user's approval"),
    ("data_move", "asks it to move data"),
    ("other_tools", "tells it which tools to call"),
    ("answer", "tells it what to answer"),
    ("code", "carries code or a command"),
    ("addressed", "addresses the assistant"),
    ("authority", "gives orders"),
)

_WORD = re.compile(r"[^\W_]+|[^\w\s]|_")
#: Where a tool name splits into words: a lower-to-upper case change, underscores, dashes, dots.
_NAME_SPLIT = re.compile(r"(?<=[a-z])(?=[A-Z])|[_\-.]+")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
#: Where a span ends: after a sentence's end mark, at a line break, at ``;``; but not before a
#: lowercase letter (a soft-wrapped line, "e.g. this", an ellipsis inside quotes go on).
#: Written plainly: ``(?<=[.!?。！？])["'”’)\]]*\s+(?![a-z\s])|(?<!\s)\s*\n\s*(?![a-z\s])|;\s+``.
#: Spelt here to consume a match's first character (a space, ``;`` or a closing mark) before
#: the lookbehinds, so that the regex engine skips at C speed to where a match can start
#: instead of trying all three alternatives at every character (some 1.8 times faster; the
#: same matches: tests/test_scan_fast_paths.py).
_BREAK = re.compile(r"[\s;\"'\u201d\u2019)\]](?:(?<=[.!?\u3002\uff01\uff1f][\"'\u201d\u2019)\]])[\"'\u201d\u2019)\]]*\s+(?![a-z\s])"
                    r"|(?<=[.!?\u3002\uff01\uff1f]\s)\s*(?![a-z\s])|(?<!\s\s)(?<=\s)(?:(?<=\n)\s*|\s*\n\s*)(?![a-z\s])|(?<=;)\s+)")
_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e0fff]")
#: A word (a run of ``[^\W_]``, whole) holding a character beyond ASCII: the only words
#: :func:`normalise` may fold (a callback per ASCII word cost most of its time).
_NON_ASCII_WORD = re.compile(r"(?<![^\W_])[^\W_]*[^\W_\x00-\x7f][^\W_]*")
#: What such a word holds: a search that skips to it at C speed, where :data:`_NON_ASCII_WORD`
#: tries each position (a text beyond ASCII mostly holds only marks there: quotes, dashes, emoji).
_NON_ASCII_LETTER = re.compile(r"[^\W_\x00-\x7f]")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+\.\w")
_LABEL = re.compile(r"^\W*\w+(?:\s+\w+){0,2}\s*:")


def spans_of(text: str) -> list[tuple[int, int]]:
    """Sentence-like spans of ``text`` as (start, end) offsets: sentences, lines and
    ``;``-clauses; a fenced code block is one span; a span over :data:`MAX_SPAN_WORDS` words
    becomes windows of that many words, each starting half a window after the last."""
    out: list[tuple[int, int]] = []
    pos = 0
    pieces: list[tuple[int, int, bool]] = []
    if "```" in text:
        for m in _FENCE.finditer(text):
            pieces.append((pos, m.start(), False))
            pieces.append((m.start(), m.end(), True))
            pos = m.end()
    pieces.append((pos, len(text), False))
    for a, b, fenced in pieces:
        if fenced:
            out.append((a, b))
            continue
        start = a
        for m in _BREAK.finditer(text, a, b):
            if m.start() > start:
                out.append((start, m.start()))
            start = m.end()
        if b > start:
            out.append((start, b))
    spans: list[tuple[int, int]] = []
    for a, b in out:
        piece = text[a:b]
        if not piece.strip():
            continue
        if piece.count(" ") < MAX_SPAN_WORDS:  # cheap bound first: most spans are short
            spans.append((a, b))
            continue
        starts = [m.start() for m in re.finditer(r"\S+", piece)]
        if len(starts) <= MAX_SPAN_WORDS:
            spans.append((a, b))
            continue
        step = MAX_SPAN_WORDS // 2
        for w in range(0, len(starts) - step, step):
            end = starts[w + MAX_SPAN_WORDS] if w + MAX_SPAN_WORDS < len(starts) else len(piece)
            spans.append((a + starts[w], a + end))
    return spans


def normalise(text: str) -> str:
    """What the detector reads: NFKC (fullwidth letters, ligatures, compatibility forms), with
    default-ignorable characters (zero-width, bidi controls, tag characters, variation
    selectors) removed so that they cannot split a word, and look-alike letters of another
    script inside a Latin word folded to the Latin ones (``іgnore`` with a Cyrillic ``і``)."""
    if text.isascii():
        return text
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    if text.isascii() or _NON_ASCII_LETTER.search(text) is None:  # no word to fold (emoji, dashes, quotes)
        return text
    from riskrank.names import _representatives

    def fold(m: re.Match[str]) -> str:
        w = m.group()
        if w.isascii() or not any("a" <= c.lower() <= "z" for c in w):
            return w  # a word of one other script (French, German, Chinese) stays as written
        # the table is built on first need (some 30 ms a process): most catalogues never need it
        rep = _representatives()
        return "".join(rep.get(c, c) if not c.isascii() else c for c in w)

    return _NON_ASCII_WORD.sub(fold, text)


@lru_cache(maxsize=1 << 14)  # a catalogue's field names repeat (``inputSchema.properties.path.description``)
def field_kind(field: str) -> str | None:
    """The kind of a definition's field (:func:`riskrank.scan.texts_of` names them), or None
    for what the detector does not read (names, types, ``required`` lists, schema keywords)."""
    base = field.split("(", 1)[0]
    if base in ("description", "title", "annotations.title"):
        return "description" if base == "description" else "title"
    if not base.startswith("inputSchema"):
        return None
    last = re.sub(r"\[\d+\]$", "", base).rsplit(".", 1)[-1]
    if last == "description":
        return "param"
    if last == "title":
        return "title"
    if last in ("default", "examples", "example", "const", "enum"):
        return "value"
    return None


#: A word in capitals (``\b[A-Z]{4,}\b``), spelt to start at a capital: the regex engine then skips
#: to the next capital at C speed instead of testing a word boundary at every character.
_SHOUT = re.compile(r"[A-Z](?<!\w[A-Z])[A-Z]{3,}(?!\w)")
#: The tool named as itself ("this tool", "this endpoint"): a definition describing its own use.
_SELF = re.compile(r"\bthis\s+(?:tool|function|endpoint|command|api|method|operation|action|resource|server|plugin)\b")
#: An identifier: snake_case, camelCase or in backticks (a tool's or parameter's name).
#: (Possessive runs: what follows each run cannot be a character it gave back, so backtracking
#: into it never finds a match; without it every word is tried again one letter shorter.)
_IDENT = re.compile(r"`([^`\s]{2,64})`|\b([A-Za-z][A-Za-z0-9]*+(?:_[A-Za-z0-9]++)+|[a-z]++(?:[A-Z][a-z0-9]++)+)\b")
_TOKEN = re.compile(r"\w+")
#: A lower-to-upper case change (``[a-z][A-Z]``), spelt to start at the (rarer) capital.
_CAMEL = re.compile(r"[A-Z](?<=[a-z][A-Z])")
#: :data:`_WORD` on ASCII text, its classes spelt as the ASCII ranges they are there (``\w`` is
#: ``[a-zA-Z0-9_]``, ``\s`` is ``[\t-\r\x1c-\x1f ]``): a range is one table lookup a character,
#: a Unicode category several (tests/test_scan_fast_paths.py checks every ASCII character).
_WORD_ASCII = re.compile(r"[a-zA-Z0-9]+|[^a-zA-Z0-9_\t-\r\x1c-\x1f ]|_")


def _span_words(low: str) -> list[str]:
    """A span's words (:data:`_WORD`), with the ASCII spelling on ASCII text: what
    :meth:`Featuriser._read` finds and :meth:`_Read.words` finds again."""
    return (_WORD_ASCII if low.isascii() else _WORD).findall(low)


def own_names(tool: dict[str, Any]) -> tuple[str, ...]:
    """The names a definition owns, case-folded: its parameters' (top level and one level
    down). A span that names them describes how to call this tool."""
    out: list[str] = []
    schema = tool.get("inputSchema") or tool.get("parameters")
    props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(props, dict):
        for k, v in props.items():
            out.append(str(k).casefold())
            inner = v.get("properties") if isinstance(v, dict) else None
            if isinstance(inner, dict):
                out += [str(x).casefold() for x in inner]
    return tuple(out)


def _names(shown: str, low: str, me: str, mine: frozenset[str]) -> tuple[bool, bool, bool]:
    """What a span names: this tool (``this tool``, its own name), one of its parameters,
    another identifier (substring tests first: most spans name nothing)."""
    hits = [p for p in mine if p in low]
    named = me != "" and me in low
    self_ref = "this " in low and _SELF.search(low) is not None
    param = False
    if hits or named:
        tokens = set(_TOKEN.findall(low))
        self_ref = self_ref or (named and me in tokens)
        param = any(p in tokens for p in hits)
    foreign = ("_" in shown or "`" in shown or _CAMEL.search(shown) is not None) and any(
        i not in mine and i != me and i.strip("()") not in mine
        for i in ((m.group(1) or m.group(2)).casefold() for m in _IDENT.finditer(shown)))  # stops at the first
    return self_ref, param, foreign


@dataclass
class Spans:
    """A batch of spans, featurised: the word rows of every span back to back (``starts[i]`` is
    span i's first, ``nwords[i]`` how many; rows index :class:`Featuriser`'s words), how each
    looks (the first :data:`SPAN_FEATURES`), the owner of each (its tool in the batch) and the
    word rows of each owner's name. Training and inference read the same batch."""

    words: np.ndarray
    starts: np.ndarray
    nwords: np.ndarray
    looks: np.ndarray
    owner: np.ndarray
    name_words: list[list[int]]
    where: list[tuple[int, int, int]] = field(default_factory=list)  # (text index, start, end) per span
    texts: list[str] = field(default_factory=list)  # the texts as read (normalise), which ``where`` indexes

    def __len__(self) -> int:
        return len(self.nwords)


#: How many of :data:`SPAN_FEATURES` describe the span's looks and what it names (the rest
#: place it in its tool).
N_LOOKS = 13


@dataclass(slots=True)
class _Read:
    """One text as :meth:`Featuriser.featurise` reads it (remembered per text): the text as read,
    each span's (start, end), how many words each has and how each looks, as arrays, and the
    words' rows with the generation that numbered them. A batch of texts read before is then a
    few concatenations, not a Python loop over its spans and words. The words themselves are
    kept only until they are numbered (``fresh``): a new generation reads them again from the
    text, so the memory holds no string per word."""

    text: str
    where: list[tuple[int, int]]
    nwords: np.ndarray
    looks: np.ndarray
    fresh: list[str] | None
    rows: tuple[int, np.ndarray] | None = None

    @classmethod
    def of(cls, text: str, read: list[tuple[int, int, list[str], tuple[float, ...]]]) -> _Read:
        if not read:
            return cls(text, [], _NO_WORDS, _NO_LOOKS, [])
        return cls(text, [(a, b) for a, b, _, _ in read], np.asarray([len(found) for _, _, found, _ in read], np.int64),
                   np.asarray([look for _, _, _, look in read], np.float32).reshape(len(read), N_LOOKS),
                   [w for _, _, found, _ in read for w in found])

    def words(self) -> list[str]:
        """The spans' words back to back, as :meth:`Featuriser._read` found them."""
        if self.fresh is not None:
            return self.fresh
        return [w for a, b in self.where for w in _span_words(self.text[a:b].casefold())]


_NO_WORDS = np.zeros(0, np.int64)
_NO_LOOKS = np.zeros((0, N_LOOKS), np.float32)


class Featuriser:
    """Text -> :class:`Spans`: the tokenizer of the bundled encoder (each word split into pieces
    once and remembered as a row), the cue words and the span features."""

    def __init__(self, tokenizer_path: str | Path, lexicons: dict[str, Sequence[str]] | None = None,
                 openers: Sequence[str] | None = None) -> None:
        from tokenizers import Tokenizer

        self.tokenizer_path = Path(tokenizer_path)
        self.tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.vocab: dict[str, int] = self.tokenizer.get_vocab()
        self.lexicons = {k: tuple(v) for k, v in (lexicons or LEXICONS).items()}
        self.openers = tuple(openers or OPENERS)
        if len(self.lexicons) + 1 > 62:
            raise CheckpointError("the detector holds at most 61 cue groups")
        self._cue: dict[str, int] = {}
        for i, words in enumerate(self.lexicons.values()):
            for w in words:
                self._cue[w] = self._cue.get(w, 0) | (1 << i)
        for w in self.openers:
            self._cue[w] = self._cue.get(w, 0) | (1 << len(self.lexicons))
        self._lock = threading.Lock()
        #: (text, tool name, parameter names) -> the text as read, its spans, words and looks
        #: (see :meth:`_read`), up to :data:`MEMO_CHARS` characters of text
        self._memo: dict[tuple[str, str, frozenset[str]], _Read] = {}
        self._memo_chars = 0
        self._names: dict[str, list[str]] = {}
        self._params: dict[tuple[str, ...], frozenset[str]] = {}
        self._reset()

    def _reset(self) -> None:
        #: word -> row; per row its pieces and cue bits. A new generation when full.
        self.index: dict[str, int] = {}
        self.pieces: list[list[int]] = []
        self._bits: list[int] = []
        self._bits_arr = np.zeros(0, np.int64)
        #: tool name -> its words' rows, in this generation
        self._name_rows: dict[str, list[int]] = {}
        self.generation = getattr(self, "generation", -1) + 1

    @property
    def n_cues(self) -> int:
        return len(self.lexicons)

    def sha256(self) -> str:
        return hashlib.sha256(self.tokenizer_path.read_bytes()).hexdigest()

    def _add(self, words: Iterable[str]) -> None:
        with self._lock:
            todo = [w for w in dict.fromkeys(words) if w not in self.index]
            rare = [w for w in todo if w not in self.vocab]
            split = self._split(rare)
            unk = [self.vocab.get("[UNK]", 100)]
            for w in todo:
                ids = [self.vocab[w]] if w in self.vocab else split[w]
                self.index[w] = len(self.pieces)
                self.pieces.append(ids or unk)
                self._bits.append(self._cue.get(w, 0))

    def _split(self, words: list[str]) -> dict[str, list[int]]:
        """Each word's word pieces. A word of lower-case ASCII letters and digits is one pre-token
        that the normaliser leaves as it is, so the WordPiece model alone splits it as the whole
        pipeline would (some three times faster than ``encode_batch``: no normalising, no offsets,
        no ``Encoding`` per word; tests/test_scan_fast_paths.py checks it on a corpus's words);
        the others (accents, other scripts) go through the pipeline in one batch."""
        model = self.tokenizer.model
        out = {w: [t.id for t in model.tokenize(w)] for w in words if w.isascii() and w.isalnum() and w == w.lower()}
        rest = [w for w in words if w not in out]
        if rest:
            out.update(zip(rest, (e.ids for e in self.tokenizer.encode_batch(rest, add_special_tokens=False)), strict=True))
        return out

    def bits(self) -> np.ndarray:
        """Each word row's cue bits (the last bit: an opener)."""
        if len(self._bits_arr) != len(self._bits):
            self._bits_arr = np.asarray(self._bits, np.int64)
        return self._bits_arr

    def featurise(self, texts: Sequence[tuple[str, int]], names: Sequence[str] = (),
                  params: Sequence[Sequence[str]] = ()) -> Spans:
        """Every span of each (text, owner) with at least :data:`MIN_SPAN_WORDS` words; ``names``
        are the owners' tool names (a span is read against its tool's name and other spans),
        ``params`` their parameters' names (:func:`own_names`; a span naming them, or the tool
        itself, describes this tool; one naming another identifier points elsewhere)."""
        if len(self.index) >= MAX_WORDS:
            with self._lock:
                self._reset()
        reads: list[_Read] = []
        owner: list[int] = []
        keys = [str(n) for n in names]
        tool_names = [n.casefold() for n in keys]
        name_lists = [self._name_words(n) for n in keys]
        own_params = [self._own_params(p) for p in params]
        memo = self._memo
        if self._memo_chars > MEMO_CHARS:
            memo.clear()
            self._memo_chars = 0
        for raw, own in texts:
            me = tool_names[own] if own < len(tool_names) else ""
            mine = own_params[own] if own < len(own_params) else frozenset()
            key = (raw, me, mine)
            got = memo.get(key)
            if got is None:
                text = normalise(raw[:MAX_FIELD_CHARS])
                got = memo[key] = _Read.of(text, self._read(text, me, mine, frozenset(name_lists[own]) if own < len(name_lists) else frozenset()))
                self._memo_chars += len(raw)
            reads.append(got)
            owner.append(own)
        # a text whose rows were numbered in this generation has every word in the index already
        generation = self.generation
        stale = [r for r in reads if r.rows is None or r.rows[0] != generation]
        words = [r.words() for r in stale]
        new = set().union(*words, *name_lists).difference(self.index)
        if new:
            self._add(sorted(new))
        index = self.index
        # one conversion for the batch, sliced per text (a conversion per text costs more)
        rows = np.fromiter(map(index.__getitem__, chain.from_iterable(words)), np.int64, sum(map(len, words)))
        start = 0
        for r, found in zip(stale, words, strict=True):
            r.rows, r.fresh = (generation, rows[start: start + len(found)]), None
            start += len(found)
        name_rows = self._name_rows
        if len(name_rows) >= MAX_WORDS:
            name_rows.clear()
        for n, ws in zip(keys, name_lists, strict=True):
            if n not in name_rows:
                name_rows[n] = [index[w] for w in ws]
        nwords = np.concatenate([_NO_WORDS, *(r.nwords for r in reads)])
        return Spans(words=np.concatenate([_NO_WORDS, *(r.rows[1] for r in reads if r.rows is not None)]),
                     starts=np.cumsum(nwords) - nwords, nwords=nwords,
                     looks=np.concatenate([_NO_LOOKS, *(r.looks for r in reads)]),
                     owner=np.repeat(np.asarray(owner, np.int64), [len(r.where) for r in reads]),
                     name_words=[name_rows[n] for n in keys],
                     where=[(ti, a, b) for ti, r in enumerate(reads) for a, b in r.where], texts=[r.text for r in reads])

    def _own_params(self, params: Sequence[str]) -> frozenset[str]:
        """The parameter names a span of a tool is read against (three characters or more),
        remembered per tool: a catalogue's are asked for again at every batch of its texts."""
        key = tuple(params)
        got = self._params.get(key)
        if got is None:
            if len(self._params) >= MAX_WORDS:
                self._params.clear()
            got = self._params[key] = frozenset(x for x in key if len(x) >= 3)
        return got

    def _name_words(self, name: str) -> list[str]:
        """A tool name's words (``readMediaFile``, ``read_media_file``: read, media, file),
        remembered: a catalogue's names are read again at every batch of its texts."""
        got = self._names.get(name)
        if got is None:
            if len(self._names) >= MAX_WORDS:
                self._names.clear()
            got = self._names[name] = _WORD.findall(_NAME_SPLIT.sub(" ", name).casefold())
        return got

    @staticmethod
    def _read(text: str, me: str, mine: frozenset[str], name_words: frozenset[str] = frozenset()
              ) -> list[tuple[int, int, list[str], tuple[float, ...]]]:
        """Each span of one text (as read) with its words and looks, for a tool named ``me``
        (in words: ``name_words``) with parameters ``mine`` (remembered per text: a catalogue
        listed again costs lookups). A span whose words are all its tool's name's ("Read Media
        File" for ``read_media_file``) only names the tool and is not scored."""
        shout, label = _SHOUT.search, _LABEL.match
        out = []
        for a, b in spans_of(text):
            shown = text[a:b]
            low = shown.casefold()
            found = _span_words(low)
            n = len(found)
            if n < MIN_SPAN_WORDS or (n < 4 * MIN_SPAN_WORDS and (
                    sum(map(str.isalnum, found)) < MIN_SPAN_WORDS  # a word is all letters and digits or one mark
                    or (name_words and name_words.issuperset(filter(str.isalnum, found))))):
                continue
            end = shown.rstrip()[-1:]
            out.append((a, b, found, (
                end == "?",
                "http" in low or "www." in low,
                "@" in low and _EMAIL.search(low) is not None,
                "~/" in low or "/etc/" in low or "/." in low or "\\." in low,
                "```" in low or "()" in low or " = " in low or "import " in low,
                "`" in low or "'" in low or '"' in low,
                math.log1p(n) / 4.0,
                shout(shown) is not None,
                ":" in shown and label(shown) is not None,
                end == ":",
                *_names(shown, low, me, mine),
            )))
        return out

    def cues(self, spans: Spans) -> tuple[np.ndarray, np.ndarray]:
        """The cue bits of each span's words (any word) and of its first word (with the opener
        bit), as 0/1 matrices."""
        n = len(spans)
        if n == 0:
            return np.zeros((0, self.n_cues), np.float32), np.zeros((0, self.n_cues + 1), np.float32)
        wb = self.bits()[spans.words]
        anyb = np.bitwise_or.reduceat(wb, spans.starts)
        first = wb[spans.starts]
        shift = np.arange(self.n_cues + 1)
        return ((anyb[:, None] >> shift[:-1]) & 1).astype(np.float32), ((first[:, None] >> shift) & 1).astype(np.float32)


class WordTable:
    """A table over word pieces (vocabulary x width) read per word row of a :class:`Featuriser`:
    each row the sum of its pieces' rows and their count, computed once per word."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = np.asarray(table, np.float32)
        self.sums = np.zeros((0, self.table.shape[1]), np.float32)
        self.counts = np.zeros(0, np.float32)
        self.generation = -1
        self._lock = threading.Lock()

    def rows(self, feat: Featuriser) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if self.generation != feat.generation:
                self.sums, self.counts, self.generation = self.sums[:0], self.counts[:0], feat.generation
            have, want = len(self.counts), len(feat.pieces)
            if want > have:
                new = feat.pieces[have:want]
                flat = np.fromiter((i for p in new for i in p), np.int64)
                lens = np.fromiter((len(p) for p in new), np.int64, len(new))
                sums = np.add.reduceat(self.table[flat], np.concatenate([[0], np.cumsum(lens)[:-1]]), axis=0)
                self.sums = np.vstack([self.sums, sums.astype(np.float32)])
                self.counts = np.concatenate([self.counts, lens.astype(np.float32)])
            return self.sums, self.counts

    def mean(self, feat: Featuriser, spans: Spans) -> np.ndarray:
        """The mean of the table's rows over each span's word pieces: [len(spans), width]."""
        if len(spans) == 0:
            return np.zeros((0, self.table.shape[1]), np.float32)
        sums, counts = self.rows(feat)
        return _segment_sums(sums, spans.words, spans.nwords) / _segment_counts(counts, spans.words, spans.nwords)[:, None]

    def name_means(self, feat: Featuriser, spans: Spans) -> np.ndarray:
        """The mean piece row of each owner's name (zeros for a name with no word)."""
        sums, counts = self.rows(feat)
        rows = spans.name_words
        flat = np.fromiter((r for rs in rows for r in rs), np.int64)
        lengths = np.fromiter((len(rs) for rs in rows), np.int64, len(rows))
        n = _segment_counts(counts, flat, lengths)
        return (_segment_sums(sums, flat, lengths) / np.maximum(n, 1)[:, None]).astype(np.float32)


def _segment_sums(table: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per segment (``lengths[i]`` consecutive entries of ``rows``), the sum of its rows of
    ``table`` (float32), added one at a time in order into zeros: the additions, so the bits,
    of the sparse product (``scipy.sparse``) this replaced, whose import cost a fresh process
    some 200 ms at its first scan, more than the scan itself. One step per position in a
    segment, over the segments that long (sorted longest first: a prefix), so as many NumPy
    calls as the longest segment has rows, not one per segment; some 1 ms a scan more than the
    sparse product."""
    out = np.zeros((len(lengths), table.shape[1]), np.float32)
    if len(rows) == 0:
        return out
    order = np.argsort(-lengths, kind="stable")
    first = (np.cumsum(lengths) - lengths)[order]
    at_least = np.bincount(lengths)[::-1].cumsum()[::-1]  # at_least[k]: segments of k rows or more
    for k in range(1, len(at_least)):
        part = out[: at_least[k]]
        np.add(part, table.take(rows.take(first[: at_least[k]] + (k - 1)), axis=0), out=part)
    sums = np.empty_like(out)
    sums[order] = out
    return sums


def _segment_counts(counts: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per segment, the sum of its rows' piece counts (whole numbers: exact in any order)."""
    segment = np.repeat(np.arange(len(lengths)), lengths)
    return np.bincount(segment, weights=counts[rows], minlength=len(lengths)).astype(np.float32)


#: Rows per block of :func:`_product`: 256 rows by the shipped detector's at most 18 inputs by
#: its 32 hidden units is under the 65536 x 4 multiply-adds up to which OpenBLAS computes a
#: product on the calling thread.
PRODUCT_ROWS = 256


def _product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` for a batch of spans (x) and a small weight matrix (w), in blocks of
    :data:`PRODUCT_ROWS` rows. A product over a whole batch wakes OpenBLAS's worker threads,
    which then spin for a while beside the Python work that follows: on a machine whose other
    core was busy, the warm scan took two to three times as long. Each row's result is the
    same bits in any block (tests/test_scan_fast_paths.py); no block is a single row, which NumPy
    would send to another BLAS routine."""
    n = len(x)
    cuts = list(range(PRODUCT_ROWS, n - 1, PRODUCT_ROWS))
    return np.concatenate([x[i:j] @ w for i, j in zip([0, *cuts], [*cuts, n], strict=True)]) if cuts else x @ w


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-9)


#: Cue groups whose share among a tool's other spans says how the whole definition talks: to
#: the model ("you", "the assistant"), or in orders ("always", "must", "call", "instead").
_STYLE = (("second_person", "assistant"), ("authority", "other_tools"))


def placement(topic: WordTable, feat: Featuriser, spans: Spans, cues: np.ndarray) -> np.ndarray:
    """How each span sits in its tool (the last five :data:`SPAN_FEATURES`): the cosine of its
    topic vector with its tool name's, with the mean of its tool's other spans' (0 without
    others), whether there are others, and the share of those others that address the model
    and that give orders (``cues``: :meth:`Featuriser.cues`' first matrix). Off-topic text (a
    task for the assistant planted in a tool about something else) is far from both; a
    definition written throughout as advice to the model (its own usage rules) is read as a
    whole, not one sentence at a time."""
    if len(spans) == 0:
        return np.zeros((0, 5), np.float32)
    t = topic.mean(feat, spans)
    names = topic.name_means(feat, spans)
    n_owner = len(spans.name_words) if spans.name_words else int(spans.owner.max()) + 1
    sums = np.zeros((n_owner, t.shape[1]), np.float32)
    np.add.at(sums, spans.owner, t)
    count = np.bincount(spans.owner, minlength=n_owner)[spans.owner]
    rest = (sums[spans.owner] - t) / np.maximum(count - 1, 1)[:, None]
    has_rest = count > 1
    by_name = _cos(t, names[spans.owner]) if spans.name_words else np.zeros(len(spans), np.float32)
    groups = list(feat.lexicons)
    style = np.stack([cues[:, [groups.index(g) for g in gs if g in groups]].max(1) for gs in _STYLE], 1)
    totals = np.zeros((n_owner, style.shape[1]), np.float32)
    np.add.at(totals, spans.owner, style)
    others = (totals[spans.owner] - style) / np.maximum(count - 1, 1)[:, None]
    return np.hstack([np.stack([by_name, np.where(has_rest, _cos(t, rest), 0.0), has_rest], 1), others]).astype(np.float32)


@dataclass(frozen=True)
class SpanScore:
    """One scored span: where it is (the index of its text in the batch, start and end in the
    text as read), its score, the cue groups it holds (what a finding says in words) and the
    span itself (as read: NFKC, invisible characters removed)."""

    text: int
    start: int
    end: int
    score: float
    cues: tuple[str, ...]
    span: str

    def why(self) -> str:
        """The span in words: what it does that a description of a tool does not."""
        said = [words for key, words in WHY if key in self.cues][:3]
        head = f"reads as text addressed to the model, not a description of the tool (score {self.score:.2f})"
        return head + ("; " + "; ".join(said) if said else "")


_KEYS_MLP = ("token.table", "topic.table", "cues.weight", "first.weight", "span.weight", "l1.bias", "l2.weight", "l2.bias")


@dataclass
class PoisonDetector:
    """The detector's weights (see the module docstring), its featuriser and its sidecar."""

    arrays: dict[str, np.ndarray] = field(repr=False)
    meta: dict[str, Any]
    featuriser: Featuriser = field(repr=False)

    def __post_init__(self) -> None:
        self._token = WordTable(self.arrays["token.table"])
        self._topic = WordTable(self.arrays["topic.table"])

    @property
    def thresholds(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.meta["thresholds"].items()}

    def scores_of(self, spans: Spans) -> np.ndarray:
        """P(the span speaks to the model) for each span of a featurised batch."""
        a = self.arrays
        feat = self.featuriser
        cues, first = feat.cues(spans)
        span = np.hstack([spans.looks, placement(self._topic, feat, spans, cues)])
        h = self._token.mean(feat, spans)
        h += _product(cues, a["cues.weight"]) + _product(first, a["first.weight"]) + _product(span, a["span.weight"]) + a["l1.bias"]
        np.maximum(h, 0, out=h)
        # whole: OpenBLAS keeps a matrix-vector product of some 15,000 spans or fewer on this
        # thread, and past that how it splits one can move a score's last bit
        z = h @ a["l2.weight"] + a["l2.bias"][0]
        return (1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))).astype(np.float32)

    def score(self, texts: Sequence[tuple[str, int]], names: Sequence[str] = (), min_score: float = 0.0,
              params: Sequence[Sequence[str]] = ()) -> list[SpanScore]:
        """Every span of each (text, owner) that scores at least ``min_score``, with its score;
        ``names`` are the owners' tool names, ``params`` their parameters' (:func:`own_names`). A field over 256 KB is read in pieces of its own
        (a 1 MB description costs time in proportion, and one batch's memory stays bounded); the
        other fields are scored in batches of about that many characters, each owner's fields in
        one batch (a span is read against its tool's other spans), so that a listing of many
        fields costs memory in proportion to a batch, not to the listing."""
        out: list[SpanScore] = []
        cue_names = list(self.featuriser.lexicons)
        batch: list[tuple[str, int]] = []
        index: list[int] = []
        step = 64 * PIECE_SPANS
        size = 0

        def flush() -> None:
            nonlocal batch, index, size
            if batch:
                sp = self.featuriser.featurise(batch, names, params)
                out.extend(self._collect(sp, self.scores_of(sp), index, cue_names, 0, min_score))
            batch, index, size = [], [], 0

        for i, (text, own) in enumerate(texts):
            if len(text) > step:
                text = normalise(text[:MAX_FIELD_CHARS])
                for off in range(0, len(text), step):
                    sp = self.featuriser.featurise([(text[off: off + step], own)], names, params)
                    out += self._collect(sp, self.scores_of(sp), [i], cue_names, off, min_score)
                continue
            if size > step and batch[-1][1] != own:
                flush()
            batch.append((text, own))
            index.append(i)
            size += len(text)
        flush()
        return out

    def _collect(self, sp: Spans, scores: np.ndarray, index: list[int], names: list[str], offset: int,
                 min_score: float) -> list[SpanScore]:
        out = []
        cues, _ = self.featuriser.cues(sp)
        for j in np.flatnonzero(scores >= min_score):
            ti, a, b = sp.where[j]
            found = tuple(n for n, on in zip(names, cues[j], strict=True) if on)
            if "second_person" in found or "assistant" in found:
                found += ("addressed",)
            out.append(SpanScore(index[ti], a + offset, b + offset, float(scores[j]), found, sp.texts[ti][a:b]))
        return out

    def save(self, folder: str | Path) -> Path:
        """Write the weights and the sidecar (their sha256, the tokenizer's) atomically."""
        arrays = {k: np.ascontiguousarray(self.arrays[k], dtype=np.float16 if k.endswith(".table") else np.float32)
                  for k in _KEYS_MLP}
        meta = {**self.meta, "format": FORMAT,
                "tokenizer_sha256": self.featuriser.sha256(), "lexicons": [[k, list(v)] for k, v in self.featuriser.lexicons.items()],
                "openers": list(self.featuriser.openers), "span_features": list(SPAN_FEATURES)}
        return write_weights_folder(folder, arrays, meta, WEIGHTS, SIDECAR, ensure_ascii=False)


def bundled_tokenizer() -> Path:
    """The bundled encoder's ``tokenizer.json`` (the word pieces the static table is indexed by)."""
    from riskrank.encoder import resolve_model

    _, folder = resolve_model(None)
    assert folder is not None
    return folder / "tokenizer.json"


def load_detector(folder: str | Path) -> PoisonDetector:
    """Load and check a detector; a missing, torn or tampered file, or a tokenizer other than
    the one it was trained with, is a :class:`CheckpointError`."""
    folder = Path(folder)
    side, weights = folder / SIDECAR, folder / WEIGHTS
    meta, arrays = read_weights_folder(folder, WEIGHTS, SIDECAR, FORMAT, "poisoning detector", CheckpointError)
    if list(meta.get("span_features", [])) != list(SPAN_FEATURES):
        raise CheckpointError(f"{side}: span features {meta.get('span_features')} are not this riskrank's {list(SPAN_FEATURES)}")
    th = meta.get("thresholds")
    if not (isinstance(th, dict) and all(isinstance(th.get(k), (int, float)) for k in ("poisoned", "suspicious"))):
        raise CheckpointError(f"{side}: no thresholds (poisoned, suspicious)")
    tok = bundled_tokenizer()
    if hashlib.sha256(tok.read_bytes()).hexdigest() != meta.get("tokenizer_sha256"):
        raise CheckpointError(f"{side}: trained with another tokenizer than {tok} (its word pieces index the weights)")
    missing = [k for k in _KEYS_MLP if k not in arrays]
    if missing:
        raise CheckpointError(f"{weights}: missing {', '.join(missing)}")
    # The cue groups in the weights' order (a list of [group, words]: the sidecar is written
    # with sorted keys, so an object would lose the order that indexes cues.weight's rows).
    lexicons = meta.get("lexicons")
    if not (isinstance(lexicons, list) and all(isinstance(g, list) and len(g) == 2 and isinstance(g[0], str)
                                               and isinstance(g[1], list) for g in lexicons)):
        raise CheckpointError(f"{side}: lexicons must be a list of [group, words] in the weights' order")
    feat = Featuriser(tok, {g: tuple(map(str, words)) for g, words in lexicons}, meta.get("openers"))
    hidden = arrays["l1.bias"].shape[0]
    shapes = {"token.table": (len(feat.vocab), hidden), "topic.table": (len(feat.vocab), arrays["topic.table"].shape[1]),
              "cues.weight": (feat.n_cues, hidden),
              "first.weight": (feat.n_cues + 1, hidden), "span.weight": (len(SPAN_FEATURES), hidden),
              "l2.weight": (hidden,), "l2.bias": (1,)}
    for k, shape in shapes.items():
        if tuple(arrays[k].shape) != shape:
            raise CheckpointError(f"{weights}: {k} has shape {tuple(arrays[k].shape)}, expected {shape}")
    return PoisonDetector({k: np.asarray(arrays[k], dtype=np.float32) for k in _KEYS_MLP}, meta, feat)


@lru_cache(maxsize=1)
def default_detector() -> PoisonDetector | None:
    """The shipped detector, loaded once; None where this installation has none (a source
    tree before ``make poison-detector``): the scan is then the rules alone."""
    if not (DETECTOR_DIR / SIDECAR).is_file():
        return None
    return load_detector(DETECTOR_DIR)


def texts_for(fields: Iterable[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(field, text, kind) for each field the detector reads."""
    out = []
    for f, text in fields:
        kind = field_kind(f)
        if kind is not None and text.strip():
            out.append((f, text, kind))
    return out
