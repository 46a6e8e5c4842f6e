"""Tables for people: aligned plain text (terminals) and Markdown (reports).

One printer for every command, report and benchmark, so a column reads the same wherever it
appears: the first column left-aligned (names), the others right-aligned (numbers).
"""

from __future__ import annotations

from collections.abc import Sequence


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Header, a rule, then the rows; columns as wide as their widest cell."""
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    head = line(cells[0])
    return "\n".join([head, "-" * len(head), *(line(r) for r in cells[1:])])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
