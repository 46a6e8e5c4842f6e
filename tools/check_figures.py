"""Check that every figure in README.md and docs/*.md comes from a committed artefact.

    python tools/check_figures.py              # counts per doc; exit 1 on any failure
    python tools/check_figures.py --unbacked   # each figure with no artefact, with its context
    make docs                                  # the same check

**What a figure is.** A number in the prose or a table of a doc (fenced code blocks, inline
code and link targets are commands, names and paths, not figures) that states a quantity: a
number with a decimal point or an exponent (0.691, 2.5e-7), a percentage, a number with a unit
of time, size or ratio (ms, s, min, MB, GB, GiB, ``x``/``×``), a duration (42:36), or a count
with a thousands separator (1,302). Numbers that are part of a name are not figures: metric
names and levels (NDCG@5, L3, r ≥ 3), powers (10^6), section, table, figure and equation
numbers, dates, list markers. A number right after a comparison (``<= 3 s``, ``≥ 0.80``) is a
bound the text sets (a target, a threshold), and "95%" before "interval" names the interval.
Small bare integers (seeds, k, caps, the number of folds) are settings: they are checked where
a claim quotes them (below), not found on their own.

**How a figure is backed** (both registries live in ``tools/figures.py``):

1. *Rendered*: a block (a table, a sentence) that a function renders from its artefact; the
   doc must contain the rendered text byte for byte. Every figure inside it is backed.
2. *Claimed*: a phrase of the doc with its figures as ``{}`` placeholders, filled from
   artefact values (``claim(DOC, "reaches NeedRisk-Hit@5 {}", U.mean(...))``); the doc must
   contain the filled phrase, whitespace and line breaks aside. Every figure inside it is
   backed. A figure written literally in a claim's template (not through a placeholder) is an
   error: the registry cannot vouch for a number it was only told.

A figure in a section another change owns and is rewriting, with no artefact yet, may be
*handed off* (``HANDED_OFF``): listed with the phrase and the reason, printed on every run, and
an error once the phrase leaves the doc. It is not a way to pass a figure: keep it to sections
this change may not edit.

A claim names its artefact (a committed JSON file, a source module, the lock file, or
``docs/paper-figures.json`` for what the paper reports); a timing claim or block also names the
machine and the date, and its doc section must state them and the artefact's path.

**Registering a figure** you add to a doc: render the table with the benchmark's own
``doc_table``-style function and add it to ``RENDERED``, or add a ``claim`` to ``CLAIMS`` with
the phrase as it reads in the doc and the artefact values (``Json(path).at("a.b.c")``,
arithmetic on them, a format such as ``.3f``). ``--unbacked`` lists what is left.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from figure_tokens import Token, tokens  # noqa: E402 - tools/ joins the path above

DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))

@dataclass
class Report:
    found: dict[str, int] = field(default_factory=dict)
    rendered: dict[str, int] = field(default_factory=dict)
    checked: dict[str, int] = field(default_factory=dict)
    handed_off: dict[str, int] = field(default_factory=dict)
    unbacked: list[Token] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)




def _normalised(text: str) -> tuple[str, list[int]]:
    """Whitespace runs collapsed to one space, with each kept character's offset in the doc."""
    chars, offsets, space = [], [], False
    for i, c in enumerate(text):
        if c.isspace():
            if not space:
                chars.append(" ")
                offsets.append(i)
            space = True
        else:
            chars.append(c)
            offsets.append(i)
            space = False
    return "".join(chars), offsets


_TABLE_RULE = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$")


def broken_tables(text: str) -> list[tuple[int, int]]:
    """(first line, separator rows) of each markdown table (a run of lines starting with ``|``,
    outside fenced code) that has other than one ``|---|`` row: two tables run together, or the
    tail of an old render, with its rule, left below a new one."""
    out, lines, i, fenced = [], text.split("\n"), 0, False
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not lines[i].startswith("|"):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        n = sum(bool(_TABLE_RULE.match(x)) for x in lines[i:j])
        if n != 1:
            out.append((i + 1, n))
        i = j
    return out


def check(verbose: bool = False) -> Report:
    import figures

    rep = Report()
    texts = {d: (ROOT / d).read_text() for d in DOCS}
    toks = {d: tokens(d, t) for d, t in texts.items()}
    norm = {d: _normalised(t) for d, t in texts.items()}

    def cover(doc: str, start: int, end: int, how: str) -> None:
        for t in toks[doc]:
            if start <= t.start and t.end <= end and not t.backed_by:
                t.backed_by = how

    for block in figures.RENDERED:
        try:
            rendered = block.render()
        except Exception as exc:  # a missing artefact or a broken renderer fails its entry, named; the check goes on
            rep.mismatches.append(f"{block.doc}: {block.name}: cannot render from {', '.join(block.artefacts)}: {exc}")
            continue
        text = texts[block.doc]
        at = text.find(rendered)
        if at < 0:
            rep.mismatches.append(f"{block.doc}: {block.name}: differs from {', '.join(block.artefacts)} (render it again)")
            continue
        while at >= 0:
            cover(block.doc, at, at + len(rendered), "rendered")
            if rendered.rstrip().endswith("|") and text[at + len(rendered):].lstrip(" ").startswith("|"):
                rep.mismatches.append(f"{block.doc}: {block.name}: table rows follow the rendered table (an older render left below it?)")
            at = text.find(rendered, at + 1)
        rep.mismatches += block.timing_problems(text)

    for c in figures.CLAIMS:
        try:
            filled = c.filled()
        except Exception as exc:  # the same, for a claim
            rep.mismatches.append(f"{c.where()}: cannot read {', '.join(c.artefacts())}: {exc}")
            continue
        literal = c.literal_figures()
        if literal:
            rep.mismatches.append(f"{c.where()}: figures written into the template, not read from an artefact: {literal}")
        needle = " ".join(filled.split())
        hit = False
        for doc in c.docs():
            hay, offsets = norm[doc]
            at = hay.find(needle)
            while at >= 0:
                hit = True
                cover(doc, offsets[at], offsets[at + len(needle) - 1] + 1, "checked")
                at = hay.find(needle, at + 1)
            if hit:
                rep.mismatches += c.timing_problems(texts[doc])
        if not hit:
            rep.mismatches.append(f"{c.where()}: the doc does not say {needle!r} (from {', '.join(c.artefacts())})")

    for h in figures.HANDED_OFF:
        hay, offsets = norm[h.doc]
        needle = " ".join(h.phrase.split())
        at = hay.find(needle)
        if at < 0:
            rep.mismatches.append(f"{h.doc}: hand-off {h.phrase[:50]!r} no longer in the doc: remove it from HANDED_OFF")
            continue
        cover(h.doc, offsets[at], offsets[at + len(needle) - 1] + 1, "handed off")

    for d in DOCS:
        rep.mismatches += [f"{d}:{line}: a table with {n} header separator rows (a stale render left behind?)"
                           for line, n in broken_tables(texts[d])]
    for d in DOCS:
        rep.found[d] = len(toks[d])
        rep.handed_off[d] = sum(t.backed_by == "handed off" for t in toks[d])
        rep.rendered[d] = sum(t.backed_by == "rendered" for t in toks[d])
        rep.checked[d] = sum(t.backed_by == "checked" for t in toks[d])
        rep.unbacked += [t for t in toks[d] if not t.backed_by]
    return rep


def context(token: Token, width: int = 60) -> str:
    text = (ROOT / token.doc).read_text()
    a, b = max(0, token.start - width), min(len(text), token.end + width)
    return " ".join(text[a:token.start].split()) + " [" + token.text + "] " + " ".join(text[token.end:b].split())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--unbacked", action="store_true", help="list every figure with no artefact, in context")
    args = p.parse_args(argv)
    rep = check()
    print(f"{'doc':<26} {'found':>6} {'rendered':>9} {'checked':>8} {'handed off':>11} {'unbacked':>9}")
    for d in DOCS:
        n_un = sum(t.doc == d for t in rep.unbacked)
        print(f"{d:<26} {rep.found[d]:>6} {rep.rendered[d]:>9} {rep.checked[d]:>8} {rep.handed_off[d]:>11} {n_un:>9}")
    print(f"{'total':<26} {sum(rep.found.values()):>6} {sum(rep.rendered.values()):>9} "
          f"{sum(rep.checked.values()):>8} {sum(rep.handed_off.values()):>11} {len(rep.unbacked):>9}")
    import figures

    for h in figures.HANDED_OFF:
        print(f"handed off: {h.doc}: {h.phrase!r}: {h.why}")
    for m in rep.mismatches:
        print("mismatch:", m)
    if args.unbacked:
        for t in rep.unbacked:
            print(f"unbacked: {t.doc}:{t.line}: {context(t)}")
    if rep.mismatches or rep.unbacked:
        print(f"{len(rep.mismatches)} mismatches, {len(rep.unbacked)} figures without an artefact")
        return 1
    print("0 mismatches, 0 figures without an artefact")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
