"""One name, one tool: tool names compared as a reader sees them.

A name a person reads as ``delete_files`` may be spelt with a Cyrillic ``е``, carry an
invisible Hangul filler (U+3164) or a variation selector, or use fullwidth letters. Two such
names are two tools to a dict and one to the user approving a call. :func:`skeleton` folds a
name to what it looks like: NFKC, case-folded, every character replaced by the representative
of its class in Unicode's confusables table (TR39, the data of the maintained
``confusable-homoglyphs`` package; an ASCII member wherever a class has one), default-ignorable
code points dropped. :func:`first_invisible` finds a character that renders as nothing, which no
tool name may hold.
"""

from __future__ import annotations

import json
import unicodedata
from functools import lru_cache
from importlib import resources

#: Code points that render as nothing or as blank space although ``str.isprintable`` accepts
#: them: Unicode's Default_Ignorable_Code_Point ranges, the Hangul fillers, the braille blank
#: and every space separator (a name holds no space but ASCII's).
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x2800, 0x2800),
    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)


#: Unicode's space separators (category Zs) but ASCII's space: blank in a name (a test checks
#: the list against this Python's Unicode database).
SPACE_SEPARATORS = (0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)


def is_invisible(ch: str) -> bool:
    """Whether ``ch`` renders as nothing (or blank) in a name."""
    cp = ord(ch)
    if ch != " " and unicodedata.category(ch) == "Zs":
        return True
    return any(lo <= cp <= hi for lo, hi in _INVISIBLE_RANGES)


def first_invisible(text: str) -> tuple[int, str] | None:
    """(position, character) of the first invisible character of ``text``, or None."""
    for i, ch in enumerate(text):
        if is_invisible(ch):
            return i, ch
    return None


@lru_cache(maxsize=1)
def _representatives() -> dict[str, str]:
    """Each non-ASCII confusable character -> its class's representative (a lower-case ASCII
    letter first, then other ASCII, else the smallest code point), from the package's copy of Unicode's confusables."""
    data = json.loads(resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text(encoding="utf-8"))
    parent: dict[str, str] = {}

    def find(c: str) -> str:
        while parent.setdefault(c, c) != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    def rank(s: str) -> tuple[int, str]:
        # a lower-case ASCII letter first (l for l, 1 and I), then other ASCII, then the rest
        return (0 if s.isascii() and s.islower() else 1 if s.isascii() else 2, s)

    def better(a: str, b: str) -> str:
        return min(a, b, key=rank)

    for ch, glyphs in data.items():
        for g in glyphs:
            other = g.get("c", "")
            if len(ch) != 1 or len(other) != 1:
                continue  # multi-character confusables (rn ~ m) are not folded: too eager for names
            a, b = find(ch), find(other)
            if a != b:
                root = better(a, b)
                parent[a] = parent[b] = root
    # ASCII stays itself: names people type are compared as typed; only the others fold.
    return {c: find(c) for c in parent if find(c) != c and not c.isascii()}


@lru_cache(maxsize=1)
def _invisible_table() -> dict[int, None]:
    """The code points of :data:`_INVISIBLE_RANGES`, each to nothing (a ``str.translate`` table)."""
    return {cp: None for lo, hi in _INVISIBLE_RANGES for cp in range(lo, hi + 1)}


def without_invisible(text: str) -> str:
    """``text`` without the characters that render as nothing (zero-width characters, the soft
    hyphen, bidi controls, variation selectors, tag characters); spaces stay."""
    return text.translate(_invisible_table())


@lru_cache(maxsize=1)
def _skeleton_table() -> dict[int, str | None]:
    """:func:`skeleton`'s per-character step as one ``str.translate`` table: each confusable
    to its representative, each invisible character (:func:`is_invisible`) to nothing."""
    table: dict[int, str | None] = {ord(c): r for c, r in _representatives().items()}
    table.update(_invisible_table())
    table.update(dict.fromkeys(SPACE_SEPARATORS))
    return table


def skeleton(name: str) -> str:
    """What ``name`` looks like: two names with one skeleton read as one name."""
    return unicodedata.normalize("NFKC", name).casefold().translate(_skeleton_table()).casefold()


def looks_like_another(name: str) -> bool:
    """Whether ``name`` uses a character that stands for another (its skeleton differs from
    its plain NFKC case-fold): a mixed-script ``dеlеtе_filеs`` does, ``delete_files`` and
    ``天気`` do not."""
    return skeleton(name) != unicodedata.normalize("NFKC", name).casefold()


def look_alikes(names: list[str]) -> dict[int, int]:
    """Each name that looks like an earlier one (:func:`skeleton`): its index -> the earlier's."""
    first: dict[str, int] = {}
    out = {}
    for i, name in enumerate(names):
        j = first.setdefault(skeleton(name), i)
        if j != i:
            out[i] = j
    return out
