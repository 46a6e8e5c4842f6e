"""Run the installed ``riskrank`` console script in-process, many times, with one encoder.

Used by ``fuzz_registries.py``: a worker process reads argv lists (JSON lines) on stdin, runs
the console script's entry point for each one exactly as ``riskrank ARGS`` would (same
stdout/stderr encoding and error handlers as a real pipe, ``SystemExit`` -> exit status, an
uncaught exception -> exit 1 with its traceback on stderr) and answers each with one
``@@RESULT {json}`` line on the real stdout. The parent kills and restarts the worker on a
timeout (a hang) or when it dies, so no case can take the whole run down.

The only hook: ``sentence_transformers.SentenceTransformer`` is wrapped so that a model is
loaded once per worker and reused by every run (a third-party name, not a riskrank module,
so the reorganisation of riskrank's internals does not touch it).
"""

from __future__ import annotations

import io
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path

RESULT_PREFIX = "@@RESULT "
MAX_KEEP = 4000  # characters of stdout/stderr kept per stream (lengths are measured before)


def _install_model_cache() -> None:
    import sentence_transformers

    original = sentence_transformers.SentenceTransformer
    models: dict = {}

    def cached(*args, **kwargs):
        key = (args, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        if key not in models:
            models[key] = original(*args, **kwargs)
        return models[key]

    sentence_transformers.SentenceTransformer = cached  # type: ignore[misc]


def _entry():
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "riskrank"]
    return ep.load()


def _stream_like(real) -> tuple[io.BytesIO, io.TextIOWrapper]:
    raw = io.BytesIO()
    return raw, io.TextIOWrapper(raw, encoding=real.encoding or "utf-8", errors=real.errors or "strict", write_through=True)


def run_once(entry, argv: list[str]) -> dict:
    out_raw, out = _stream_like(sys.__stdout__)
    err_raw, err = _stream_like(sys.__stderr__)
    old = sys.argv, sys.stdout, sys.stderr
    sys.argv, sys.stdout, sys.stderr = ["riskrank", *argv], out, err
    rc, exc_type = 0, None
    t0 = time.perf_counter()
    try:
        try:
            entry()
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:  # what the interpreter would do: traceback, status 1
            exc_type = type(e).__name__
            try:
                traceback.print_exc(file=err)
            except Exception:
                err.write(f"Traceback (most recent call last):\n  ...\n{exc_type}\n")
            rc = 1
        try:
            out.flush()
            err.flush()
        except Exception as e:
            exc_type = exc_type or type(e).__name__
            rc = rc or 1
    finally:
        sys.argv, sys.stdout, sys.stderr = old
    so = out_raw.getvalue().decode("utf-8", "replace")
    se = err_raw.getvalue().decode("utf-8", "replace")
    return {
        "rc": rc, "exc": exc_type, "seconds": round(time.perf_counter() - t0, 3),
        "stdout": so[:MAX_KEEP] if len(so) > MAX_KEEP else so, "stdout_len": len(so),
        "stderr": se[:MAX_KEEP], "stderr_len": len(se),
        "stderr_lines": [len(x) for x in se.splitlines() if x.strip()][:50],
        "stderr_tail": se[-600:] if len(se) > MAX_KEEP else "",
        "json_stdout": so if (so.lstrip().startswith("{") and len(so) < 2_000_000) else None,
    }


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover
        pass
    _install_model_cache()
    entry = _entry()
    real_out = sys.__stdout__
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        res = run_once(entry, req["argv"])
        res["id"] = req.get("id")
        real_out.write(RESULT_PREFIX + json.dumps(res) + "\n")
        real_out.flush()


class CliWorker:
    """The in-process runner (_cli_worker.py) in a child process, restarted on hang/death."""

    def __init__(self, env: dict[str, str], timeout: float) -> None:
        self.env, self.timeout, self.proc = env, timeout, None
        self.restarts = 0

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=self.env, text=True, bufsize=1)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, argv: list[str], timeout: float | None = None) -> tuple[dict | None, bool]:
        """(result or None, timed_out)."""
        if self.proc is None:
            self.start()
            self.restarts += 1
        assert self.proc and self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps({"argv": argv}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.stop()
            return {"rc": -1, "exc": "worker died", "stderr": "", "stderr_lines": []}, False
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                return None, True
            if not self.sel.select(left):
                continue
            line = self.proc.stdout.readline()
            if not line:  # died (a signal, os._exit, out of memory)
                rc = self.proc.wait()
                self.proc = None
                return {"rc": rc, "exc": f"worker died (status {rc})", "stderr": "", "stderr_lines": []}, False
            if line.startswith("@@RESULT "):
                return json.loads(line[len("@@RESULT "):]), False


if __name__ == "__main__":
    main()
