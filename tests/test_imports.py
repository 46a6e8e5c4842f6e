"""The package's import graph: no cycle, and the layering rules of tools/check_imports.py
(the same script `make test` runs, so a new cycle fails CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "check_imports.py"


def check(package: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(package)], capture_output=True, text=True)


def test_the_package_has_no_cycle_and_keeps_its_layers():
    out = check(ROOT / "src" / "riskrank")
    assert out.returncode == 0, out.stdout
    assert out.stdout.startswith("no import cycles")


def test_a_cycle_a_lazy_one_included_fails(tmp_path):
    pkg = tmp_path / "riskrank"
    (pkg / "serving").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from riskrank.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from riskrank import a\n")
    (pkg / "c.py").write_text("import click\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from riskrank import a\n")
    (pkg / "serving" / "__init__.py").write_text("")
    (pkg / "serving" / "http.py").write_text("from riskrank.serving.mcp import y\n")
    (pkg / "serving" / "mcp.py").write_text("")
    out = check(pkg)
    assert out.returncode == 1
    assert "import cycle: riskrank.a, riskrank.b" in out.stdout
    assert "riskrank.serving.http -> riskrank.serving.mcp" in out.stdout
    assert "riskrank.c -> click" in out.stdout
    assert "riskrank.c -> riskrank.a" not in out.stdout  # TYPE_CHECKING imports do not count


def test_the_console_is_mounted_by_surfaces_and_imports_none(tmp_path):
    """serving.mcp and serving.http may mount the console; the console imports no surface,
    no MCP layer and no engine, and the gateway's parts do not import it."""
    pkg = tmp_path / "riskrank"
    (pkg / "serving" / "console").mkdir(parents=True)
    (pkg / "serving" / "gateway").mkdir()
    for init in (pkg, pkg / "serving", pkg / "serving" / "console", pkg / "serving" / "gateway"):
        (init / "__init__.py").write_text("")
    (pkg / "pipeline.py").write_text("")
    (pkg / "serving" / "mcp_compat.py").write_text("")
    (pkg / "serving" / "http.py").write_text("from riskrank.serving.console import app\n")
    (pkg / "serving" / "mcp.py").write_text("from riskrank.serving.console.app import create_console\n")
    (pkg / "serving" / "console" / "app.py").write_text(
        "def f():\n    from riskrank.serving import mcp, mcp_compat, http\n    from riskrank import pipeline\n")
    (pkg / "serving" / "gateway" / "confirm.py").write_text("from riskrank.serving.console import app\n")
    out = check(pkg)
    assert out.returncode == 1
    found = {line.split(" (line")[0] for line in out.stdout.splitlines() if line.startswith("forbidden import: ")}
    assert found == {f"forbidden import: riskrank.serving.console.app -> riskrank.{m}" for m in
                     ("serving.mcp", "serving.mcp_compat", "serving.http", "pipeline")} | {
        "forbidden import: riskrank.serving.gateway.confirm -> riskrank.serving.console",
        "forbidden import: riskrank.serving.gateway.confirm -> riskrank.serving.console.app"}
