"""The hostile-upstream harness, run end to end: the real ``riskrank mcp`` over a malicious
MCP server, driven by the real MCP client. Every probe class must hold."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import hostile_gateway


def test_every_hostile_probe_holds(tmp_path):
    rows = anyio.run(hostile_gateway.probes, tmp_path)
    broken = [r for r in rows if r["outcome"] != "held"]
    assert len(rows) == 8 and not broken, broken
