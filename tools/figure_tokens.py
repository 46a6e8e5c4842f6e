"""What a figure is in the project's docs: the tokenizer the figures check and the claims
registry both read (a number in prose, not in code, a name, a reference or a bound)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNIT = r"(?:\s?(?:ms|s|min|minutes|seconds|hours|h|MB|GB|GiB|MiB|KB|kB|B)\b|\s?%|x\b|×)"
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+(?:e[-−]?\d+)?|\d+e[-−]?\d+|\d+"
#: a number token; the look-behind keeps names out (L3, NDCG@5, 10^6, v1, synthetic-4076, §4.3)
NUMBER = re.compile(rf"(?<![\w@^§#/.:\\-])(?:[-−+])?(?:{_NUM})")
#: what before a number makes it a reference, not a quantity
_REFERENCE = re.compile(r"(?:Tables?|Figures?|Sections?|§|Appendix|Appendices|Eq\.|Eqs\.|steps?|Step|commit|"
                        r"seeds?|lever|OAuth|HTTP/)\s*$")


@dataclass
class Token:
    doc: str
    start: int
    end: int
    text: str
    line: int
    backed_by: str = ""


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group())


def prose(text: str) -> str:
    """The doc with code blocks, inline code, link targets, HTML comments and dates blanked
    out (same length, so offsets and line numbers stay those of the doc)."""
    text = re.sub(r"```.*?```", _blank, text, flags=re.S)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.S)
    text = re.sub(r"`(?:[^`\n]|\n(?!\s*\n))*`", _blank, text)  # inline code, across a line break too
    text = re.sub(r"\]\([^)\s]*\)", _blank, text)
    text = re.sub(r"\b\d{4}-\d{2}-\d{2}(?:T[\d:.]+Z?)?\b", _blank, text)
    return text


def is_figure(text: str, start: int, end: int) -> bool:
    """A number token at text[start:end] is a figure (see the module's docstring)."""
    tok = text[start:end].lstrip("-−+")
    after = text[end:end + 24]
    before = text[max(0, start - 24):start]
    if re.match(r"[A-Za-z_]", after) and not re.match(_UNIT, after):
        return False                      # 1.x, 2D, 3rd, 8th
    if re.match(r"\.\d|\.[A-Za-z]", after):
        return False                      # 1.2.3, 3.x
    if re.search(r"^\s*(?:[-*]\s+)?$", text[text.rfind("\n", 0, start) + 1:start]) and re.match(r"\.\s", after):
        return False                      # a list marker
    if re.search(r"(?:^|\n)#+\s[^\n]*$", before):
        return False                      # a heading's own number
    if re.search(r"\bv$", before) or _REFERENCE.search(before):
        return False
    if re.search(r"(?:<=|>=|≤|≥)\s*$", before):
        return False                      # a bound the text sets (a target, a limit), not a result
    if re.match(r"\s?%\s(?:confidence\s)?(?:intervals?|CI|half-width)\b", after) and tok == "95":
        return False                      # a 95% interval: the interval's name, not a result
    if "." in tok or "e" in tok or "," in tok:
        return True
    if re.match(r"\s?:\d{2}\b", after):
        return True                       # 42:36
    return bool(re.match(_UNIT, after))


def tokens(doc: str, text: str) -> list[Token]:
    plain = prose(text)
    out = []
    for m in NUMBER.finditer(plain):
        if is_figure(plain, m.start(), m.end()):
            out.append(Token(doc, m.start(), m.end(), m.group(), plain.count("\n", 0, m.start()) + 1))
    return out
