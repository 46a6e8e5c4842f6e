"""The verdict table the fault-injection and HTTP-probe harnesses print and save: one row per
case (``group | case | expected | observed | verdict``), then ``N <noun>: ok, FAIL, info``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def report(rows: Sequence[Any], group: str, widths: tuple[int, int, int], noun: str, json_out: str | None) -> None:
    """Print ``rows`` (objects with the attribute ``group``, ``case``, ``expected``, ``observed``,
    ``verdict``) as the table, the summary line, and write them as JSON to ``json_out``."""
    g, c, e = widths
    print()
    print(f"{group:{g}} | {'case':{c}} | {'expected':{e}} | observed | verdict")
    for r in rows:
        print(f"{getattr(r, group):{g}} | {r.case[:c]:{c}} | {r.expected[:e]:{e}} | {r.observed} | {r.verdict}")
    n_fail = sum(r.verdict == "FAIL" for r in rows)
    n_ok = sum(r.verdict == "ok" for r in rows)
    print(f"\n{len(rows)} {noun}: {n_ok} ok, {n_fail} FAIL, {len(rows) - n_ok - n_fail} info")
    if json_out:
        Path(json_out).write_text(json.dumps([r.__dict__ for r in rows], indent=1) + "\n")
