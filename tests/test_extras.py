"""Optional extras: a missing one is one line naming the exact pip install, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from riskrank.errors import RiskrankError
from riskrank.extras import MissingExtraError, requires


def run_without(modules: list[str], argv: list[str]) -> subprocess.CompletedProcess:
    """`riskrank ARGV` in a fresh interpreter where ``modules`` cannot be imported."""
    code = (f"import sys\nfor m in {modules!r}: sys.modules[m] = None\n"
            f"sys.argv = ['riskrank', *{argv!r}]\nfrom riskrank.cli import entry\nentry()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("missing", "argv", "extra"), [
    (["fastapi"], ["serve", "--insecure", "--port", "0"], "serve"),
    (["mcp"], ["mcp"], "mcp"),
])
def test_a_missing_extra_is_one_line(missing, argv, extra):
    out = run_without(missing, argv)
    assert out.returncode == 2, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("error: ") and f"pip install 'riskrank[{extra}]'" in lines[0]
    assert missing[0] in lines[0]


def test_requires_names_the_extra_and_the_module():
    hint = r"the ANN first stage needs no_such_mod_x, which is not installed: pip install 'riskrank\[ann\]'"
    with pytest.raises(MissingExtraError, match=hint), requires("ann", "the ANN first stage"):
        import no_such_mod_x  # noqa: F401
    assert issubclass(MissingExtraError, RiskrankError) and MissingExtraError.code == "missing_extra"
    with pytest.raises(ValueError, match="unknown extra"), requires("nope", "x"):
        pass
