"""Two results files side by side: did a change move any figure?

``riskrank compare BEFORE.json AFTER.json`` reads two files of the results contract (what
``riskrank evaluate --json`` and ``riskrank reproduce`` write), and for every split, method and
metric both hold, the two means, their difference and whether it lies within the seed spread:
``|after - before| <= max(std_before, std_after)`` (with one seed, std is 0 and only equal
figures are "within"). Timing fields are not compared. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError

#: The metrics compared, in the contract's order (others a file holds are compared too).
METRICS = ("ndcg@5", "mrr", "sndcg@5", "rvr@5", "srr@5", "safe_rvr@5", "needrisk_hit@5", "recall@5", "success@5")


@dataclass(frozen=True)
class Row:
    split: str
    method: str
    metric: str
    before: float
    after: float
    spread: float

    @property
    def diff(self) -> float:
        return self.after - self.before

    @property
    def within(self) -> bool:
        return abs(self.diff) <= self.spread + 1e-12

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "method": self.method, "metric": self.metric, "before": self.before,
                "after": self.after, "diff": self.diff, "spread": self.spread, "within": self.within}


def _load(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RiskrankError(f"{path}: no such results file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RiskrankError(f"{path}: not a results file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise RiskrankError(f"{path}: not a results file (no \"splits\"; see docs/results-contract.md)")
    return data


def _stat(value: Any) -> tuple[float, float] | None:
    if isinstance(value, dict) and isinstance(value.get("mean"), int | float):
        std = value.get("std")
        return float(value["mean"]), float(std) if isinstance(std, int | float) else 0.0
    return None


def compare(before: str | Path, after: str | Path) -> tuple[list[Row], list[str]]:
    """(rows for every split/method/metric both files hold, notes on what only one holds)."""
    a, b = _load(before), _load(after)
    notes = []
    if a.get("dataset") != b.get("dataset"):
        notes.append(f"different datasets: {a.get('dataset')!r} and {b.get('dataset')!r}")
    if a.get("seeds") != b.get("seeds"):
        notes.append(f"different seeds: {a.get('seeds')} and {b.get('seeds')}")
    rows: list[Row] = []
    for split in sorted(set(a["splits"]) | set(b["splits"])):
        ma = (a["splits"].get(split) or {}).get("methods") or {}
        mb = (b["splits"].get(split) or {}).get("methods") or {}
        only = sorted(set(ma) ^ set(mb))
        if only:
            notes.append(f"{split}: only in one file: {', '.join(only)}")
        for method in [m for m in ma if m in mb]:
            keys = [k for k in METRICS if k in ma[method] and k in mb[method]]
            keys += sorted(k for k in ma[method] if k in mb[method] and k not in METRICS)
            for metric in keys:
                sa, sb = _stat(ma[method][metric]), _stat(mb[method][metric])
                if sa is None or sb is None:
                    continue
                rows.append(Row(split, method, metric, sa[0], sb[0], max(sa[1], sb[1])))
    if not rows:
        raise RiskrankError(f"{before} and {after} share no split, method and metric to compare")
    return rows, notes
