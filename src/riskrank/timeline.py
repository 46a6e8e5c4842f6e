"""Where start-up time goes: stages marked in seconds since the process started.

An MCP client spawns the gateway and waits for ``tools/list`` before its user can type, so
the start-up is a feature. Each stage the CLI and the catalogue pass through is marked here
(interpreter and imports, model files, each upstream's spawn and ``tools/list``, levels,
encoding, indexes, the first answers); ``--verbose`` prints each mark as it happens, and the
start-up benchmark reads them. The clock starts at the process's own start (Linux:
``/proc/self/stat``), so the interpreter's start-up and the imports before riskrank's first line
are counted too; elsewhere it starts at this module's import.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable


def _process_start() -> float:
    """``time.perf_counter()`` at the moment the process started (best effort)."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0 <= age < 3600 else now


class Timeline:
    """Marks ``(seconds since start, stage)``; thread-safe; ``echo`` (set by ``--verbose``)
    receives each as a line when it is made."""

    def __init__(self) -> None:
        self.t0 = _process_start()
        self.marks: list[tuple[float, str]] = []
        self.echo: Callable[[str], None] | None = None
        self._once: set[str] = set()
        self._lock = threading.Lock()

    def mark(self, stage: str, *, once: bool = False) -> float:
        """Record ``stage`` now; ``once``: only its first occurrence (a first answer)."""
        t = time.perf_counter() - self.t0
        with self._lock:
            if once:
                if stage in self._once:
                    return t
                self._once.add(stage)
            prev = self.marks[-1][0] if self.marks else 0.0
            self.marks.append((t, stage))
        if self.echo is not None:
            self.echo(f"start-up {t:6.2f} s (+{t - prev:.2f}) {stage}")
        return t

    def follow(self, echo: Callable[[str], None]) -> None:
        """Echo every mark from now on, after the ones made so far."""
        prev = 0.0
        for t, stage in list(self.marks):
            echo(f"start-up {t:6.2f} s (+{t - prev:.2f}) {stage}")
            prev = t
        self.echo = echo

    def seconds(self, stage: str) -> float | None:
        """When ``stage`` (its first mark) happened, or None."""
        return next((t for t, s in self.marks if s == stage), None)


#: The process's timeline (one process, one start-up).
TIMELINE = Timeline()
mark = TIMELINE.mark
