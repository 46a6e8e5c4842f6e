"""The hostile-registry harness (benchmarks/fuzz_registries.py, ~2,100 seeded registries through
the real console script) as a slow test: every case must end cleanly. The default suite runs the
seeded hypothesis fuzz of tests/test_registry_hostile.py instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_fuzz_harness_every_registry_ends_cleanly(tmp_path):
    out = tmp_path / "fuzz.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_registries.py"), "--subprocess-sample", "1",
                           "--workdir", str(tmp_path / "work"), "--json", str(out)], capture_output=True, text=True, env=env,
                          timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    total = json.loads(out.read_text())["total"]
    assert total["tried"] >= 2000 and total["clean"] == total["tried"], total
