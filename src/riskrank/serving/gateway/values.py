"""The values a tool's result can carry into a later call, and the one form both are compared in.

An injected instruction works by making the agent put the attacker's choice into a call: the
recipient of a message, the URL of an upload, the account of a payment, the path of a file to
delete. Such a choice is a *value* the agent copies from what it read. :func:`candidates`
finds them in a result (its invisible characters dropped first, and its markup tags read
both as nothing and as a blank, so that ``USR\u200b042`` or ``USR<b></b>042`` is ``USR042``
and ``x@evil.example</p>Best`` is ``x@evil.example``): e-mail addresses, URLs and domains (a
URL's or an address's host also on its own: ``https://evil.example/drop`` gives
``evil.example``), IBAN-like account numbers, file
paths and names, phone numbers, street addresses (``1428 Elm Street, Springfield``), ``@handles``, long identifiers (six characters or more with a
digit: ``USR042``, ``acct-993812``) and quoted recipients (``to "Mallory"``). Numbers alone
(an amount, a short id) and plain words are not values: they are what every task is made of,
so they would match everything.

Both sides are compared in :func:`fold`'s form: percent- and HTML-unescaped (twice, for a
value escaped twice), NFKC, case-folded, Unicode's confusables mapped to one representative
(a Cyrillic ``е`` is an ``e``: :func:`riskrank.names.skeleton`), invisible characters dropped,
then every character that is not a letter or a digit removed. ``X@Evil.Example``,
``x%40evil.example``, ``x&#64;evil.example``, ``ｘ@evil.example`` and ``x @ evil . example``
all fold to ``xevilexample``; an argument holds a value when its folded text contains the
value's. A value is the user's own when the user's words hold it in :func:`shape`'s form,
which keeps the punctuation folding drops. What folding cannot undo is in docs/session-guard.md.

Standard library only (and :mod:`riskrank.names`).
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from riskrank.names import skeleton, without_invisible

#: A folded value shorter than this is not recorded: it would occur in arguments by chance.
MIN_VALUE_CHARS = 6
#: A value is kept (shown and folded) to at most this many characters.
MAX_VALUE_CHARS = 128
#: Of a long result, the head and the tail are read for values (bytes of text each).
SCAN_CHARS = 256 * 1024
#: At most this many values are taken from one result (the first and last halves of them).
MAX_PER_RESULT = 256

#: What each kind of value is called in a confirmation ("recipient 'x@evil.example' ...").
KINDS = {"email": "e-mail address", "url": "URL", "domain": "domain", "iban": "account number", "path": "path", "phone": "phone number",
         "address": "address", "handle": "handle", "identifier": "identifier", "recipient": "recipient"}
#: What ends a street address's name (``Elm Street``, ``5th Ave``).
_STREET = (r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Way|Court|Ct|Place|Pl|Square|Sq|Terrace|"
           r"Parkway|Pkwy|Highway|Hwy|Circle|Cir|Close|Crescent|Row|Alley|Trail|Plaza)")

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("email", re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")),
    ("url", re.compile(r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"'`)\]}]{3,}")),
    ("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")),
    ("path", re.compile(r"(?:~|\.{1,2})?/[\w.~-]+(?:/[\w.~-]+)+|\b[\w-]{1,64}(?:\.[\w-]{1,63})*\.[A-Za-z][A-Za-z0-9]{0,5}\b")),
    # a bare domain whose top-level name is longer than a file's extension (``evil-corp.digital``,
    # ``mail.attacker.network``; shorter ones are read by the path pattern above), the top-level
    # name in one case (``self.assertEqual`` is code), not followed by a call's parenthesis
    ("domain", re.compile(r"\b[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9][A-Za-z0-9-]{0,62})*\.(?:[a-z]{7,24}|[A-Z]{7,24})"
                          r"(?![\w(-])")),
    ("phone", re.compile(r"(?<![\w+])\+?\d[\d ().-]{6,18}\d\b")),
    # a house number, one to four capitalised words ending in a street word, then the town's
    # capitalised words after a comma
    ("address", re.compile(r"\b\d{1,6}[A-Za-z]?\s+(?:[A-Z0-9][\w'.-]*\s+){0,3}" + _STREET + r"\b\.?"
                           r"(?:,\s*[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,3})?")),
    ("handle", re.compile(r"(?<![\w.@])@[A-Za-z0-9_]{2,30}\b")),
    ("identifier", re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{6,64}\b|\b\d{6,32}\b")),
    ("recipient", re.compile(r"\b(?:to|for|recipient|receiver|user|username|account|payee)\s*[:=]?\s*"
                             r"[\"'\u201c\u2018]([^\"'\u201d\u2019\n]{2,64})[\"'\u201d\u2019]", re.IGNORECASE)),
)
#: What a text must hold for a pattern to match in it (any one of them; empty: no test): a
#: cheap ``in`` that spares the regular expression's scan of a text it cannot match.
_NEEDS = {"email": ("@",), "handle": ("@",), "url": ("://", "www."), "recipient": ("\"", "'", "\u201c", "\u2018")}
_PATTERNS_NEED = tuple((kind, rx, _NEEDS.get(kind, ())) for kind, rx in _PATTERNS)
_NOT_ALNUM = re.compile(r"[\W_]+")
#: A markup tag (``<b>``, ``</span>``, ``<br/>``): not text. ``<x@evil.example>`` is no tag.
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]{0,30}(?:\s[^<>]{0,200})?/?>")
#: Tags standing between two characters that are not blanks (``x@evil.example</p>Best``).
_GLUED = re.compile(r"\S(?:" + _TAG.pattern + r")+\S")


#: A JSON string escape a result may carry as text (a JSON document in a text item, written by
#: an encoder that escapes ``/`` or non-ASCII): ``\/``, ``\uXXXX`` (a surrogate pair joined).
_JSON_ESCAPE = re.compile(r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\/")


def _json_unescaped(m: re.Match[str]) -> str:
    if m.group(1):
        hi, lo = int(m.group(1), 16), int(m.group(2), 16)
        return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
    if m.group(3):
        c = int(m.group(3), 16)
        return "\ufffd" if 0xD800 <= c <= 0xDFFF else chr(c)
    return "/"


def unescape(text: str) -> str:
    """``text`` with JSON string escapes (``\\/``, ``\\u0040``), percent and HTML escapes undone
    (at most twice: a value escaped twice is found too), in NFKC."""
    for _ in range(2):
        plain = _JSON_ESCAPE.sub(_json_unescaped, text) if "\\" in text else text
        plain = html.unescape(unquote(plain, errors="replace")) if ("%" in plain or "&" in plain) else plain
        if plain == text:
            break
        text = plain
    return unicodedata.normalize("NFKC", text)


def _readable(text: str) -> str:
    """``text`` unescaped (:func:`unescape`), its invisible characters dropped (zero-width
    characters, soft hyphens, bidi controls: ASCII has none)."""
    plain = unescape(text)
    return plain if plain.isascii() else without_invisible(plain)


def fold(text: str) -> str:
    """The form values are compared in (module docstring): only letters and digits, after
    unescaping, NFKC, case folding and the confusables."""
    return _folded(unescape(text))


def _folded(plain: str) -> str:
    """:func:`fold` of a text already unescaped."""
    return _NOT_ALNUM.sub("", skeleton(plain))


#: The longest match whose folded form is remembered (:func:`_folded_match`).
_CACHED_CHARS = 256


@functools.lru_cache(maxsize=8192)
def _folded_cached(raw: str) -> str:
    return _folded(raw)[:MAX_VALUE_CHARS]


def _folded_match(raw: str) -> str:
    """A match's folded form, cut to :data:`MAX_VALUE_CHARS`: remembered for short matches,
    since a source's answers repeat the same addresses, hosts and links (the same inbox read
    again, one domain behind every address) and folding is most of the scan's cost per value.
    A long match (a URL can be any length) is folded every time, so the cache stays small."""
    return _folded_cached(raw) if len(raw) <= _CACHED_CHARS else _folded(raw)[:MAX_VALUE_CHARS]


@dataclass(frozen=True)
class Value:
    """One candidate value: its ``kind`` (a key of :data:`KINDS`), as the result wrote it
    (``shown``, cut) and folded (what is matched)."""

    kind: str
    shown: str
    folded: str


def candidates(text: str) -> list[Value]:
    """The candidate values of ``text`` in order of first appearance, one per folded form,
    folded ones shorter than :data:`MIN_VALUE_CHARS` left out."""
    plain = _readable(text)
    texts = [plain]
    if "<" in plain:
        # A tag read as nothing joins a value split by empty tags (``USR<b></b>042``); read as
        # a blank it keeps a value apart from the next word (``x@evil.example</p><p>Best``
        # would otherwise be ``x@evil.exampleBest``, and the address itself never recorded).
        # The two differ only where tags stand between two characters that are not blanks: a
        # text without such a place is read once.
        texts = [_TAG.sub("", plain), _TAG.sub(" ", plain)] if _GLUED.search(plain) else [_TAG.sub("", plain)]
    found: dict[str, tuple[int, Value]] = {}

    def add(kind: str, raw: str, at: int) -> None:
        folded = _folded_match(raw)
        if len(folded) >= MIN_VALUE_CHARS and folded not in found:
            found[folded] = (at, Value(kind, raw[:MAX_VALUE_CHARS], folded))

    for plain in texts:
        for kind, rx, needs in _PATTERNS_NEED:
            if needs and not any(n in plain for n in needs):
                continue  # the pattern cannot match: its scan is skipped, nothing else changes
            group = 1 if rx.groups else 0
            hosts = kind in ("email", "url")
            for m in rx.finditer(plain):
                raw = m.group(group).strip().rstrip(".,;:!?")
                add(kind, raw, m.start())
                if hosts and (host := _host(kind, raw)) is not None:
                    add("domain", host, m.start())
    return [v for _, v in sorted(found.values(), key=lambda p: p[0])]


_BLANKS = re.compile(r"\s+")


def shape(text: str) -> str:
    """The form a value is compared with the user's own values in: :func:`fold`'s, with the
    punctuation kept (blanks dropped, and a trailing full stop or slash). Two addresses that differ
    only in a dot, an underscore or where the ``@`` sits fold to the same letters, but are
    two mailboxes: an attacker's ``bobsmith@outlook.com`` is not the user's
    ``bob.smith@outlook.com``."""
    return _BLANKS.sub("", skeleton(_readable(text))).rstrip(".,;:!?/")


def _host(kind: str, raw: str) -> str | None:
    """The host of a URL (the real one after any ``user@``) or of an e-mail address, ``www.``
    left out: the attacker's domain, whatever path or mailbox the agent puts before or after it."""
    if kind == "email":
        host = raw.rsplit("@", 1)[1]
    elif kind == "url":
        try:
            host = urlsplit(raw if "://" in raw else "http://" + raw).hostname or ""
        except ValueError:
            return None
    else:
        return None
    host = host.lower().removeprefix("www.")
    return host if "." in host else None


def within(value: str, text: str) -> bool:
    """Whether ``value`` occurs in ``text`` (already unescaped and case-folded) as a whole: not
    inside a longer address, number or name (``alice@corp.co`` is not in ``alice@corp.com``)."""
    v = unescape(value).casefold().strip()
    return bool(v) and re.search(r"(?<![\w@.+-])" + re.escape(v) + r"(?![\w@+-]|[.-]\w)", text) is not None


def strings_of(value: Any) -> Iterator[str]:
    """Every string (and number, as text) inside a JSON value, without recursion."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int | float):
            yield str(node)
        elif isinstance(node, dict):  # keys too: {"x@evil.example": "Auditor"} names a recipient
            stack.extend(reversed([v for kv in node.items() for v in kv]))
        elif isinstance(node, list):
            stack.extend(reversed(node))


def unencodable(value: Any) -> bool:
    """Whether a JSON value holds a string (or a key) UTF-8 cannot encode: a lone surrogate,
    which some JSON parsers let through and no digest, log line or upstream can take."""
    for s in strings_of(value):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


def folded_arguments(arguments: dict[str, Any]) -> str:
    """The folded text a call's argument values are matched in: each string folded on its own,
    joined by ``|`` (never part of a folded value, so no value spans two arguments); the keys of
    an object inside an argument are read too, the argument names (the schema's) are not."""
    return "|".join(fold(s) for v in arguments.values() for s in strings_of(v))


@dataclass(frozen=True)
class ResultText:
    """What a result is read as: its text (head and tail of a long one), its sha256, how many
    characters it had and how many of its items were binary (not read)."""

    text: str
    sha256: str
    chars: int
    binary: int

    @property
    def cut(self) -> bool:
        return self.chars > 2 * SCAN_CHARS


def result_text(wired: dict[str, Any]) -> ResultText:
    """The readable text of a ``tools/call`` result (wire form): its text items, the text of
    embedded resources, a resource link's URI, name, title and description, and the strings
    of ``structuredContent``; images, audio and blobs are
    counted, not read. A text over 2 x :data:`SCAN_CHARS` is read by its head and tail. The
    digest covers the binary items too (their type, MIME type, URI and base64 data): two
    results of images alone are told apart, not both the digest of no text."""
    parts, binary = [], 0
    unread = hashlib.sha256()
    for item in wired.get("content") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            parts.append(str(item.get("text", "")))
        elif item.get("type") == "resource" and isinstance(item.get("resource"), dict) and "text" in item["resource"]:
            parts.append(str(item["resource"]["text"]))
        elif item.get("type") == "resource_link":  # a link the agent is shown: its words are read like a text's
            parts.extend(str(item[k]) for k in ("uri", "name", "title", "description") if isinstance(item.get(k), str))
        else:
            binary += 1
            inner = item.get("resource") if isinstance(item.get("resource"), dict) else item
            for key in ("type", "mimeType", "uri", "data", "blob"):
                unread.update(f"{key}\0{inner.get(key, item.get(key, ''))}\0".encode("utf-8", "replace"))
    structured = wired.get("structuredContent")
    if structured is not None:
        parts.extend(strings_of(structured))
    whole = "\n".join(parts)
    hasher = hashlib.sha256(whole.encode("utf-8", "replace"))
    if binary:
        hasher.update(b"\0binary\0" + unread.digest())
    digest = hasher.hexdigest()
    text = whole if len(whole) <= 2 * SCAN_CHARS else whole[:SCAN_CHARS] + "\n" + whole[-SCAN_CHARS:]
    return ResultText(text, digest, len(whole), binary)


def bounded(values: list[Value]) -> tuple[list[Value], int]:
    """At most :data:`MAX_PER_RESULT` of one result's values (its first and last halves: an
    injected instruction sits at an end more often than in the middle), and how many were left out."""
    if len(values) <= MAX_PER_RESULT:
        return values, 0
    half = MAX_PER_RESULT // 2
    return values[:half] + values[-half:], len(values) - MAX_PER_RESULT


def shown(value: str) -> str:
    """A value as a confirmation quotes it (JSON string: control characters escaped)."""
    return json.dumps(value, ensure_ascii=False)
