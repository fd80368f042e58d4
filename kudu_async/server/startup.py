"""A node's start-up as Kudu's ``/startup`` page shows it: each step with when it began and how long it
took, so an operator sees where a slow start spends its time (most often replaying tablets' logs)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

# The steps of a start, in order, with the labels the page shows.
STEPS: tuple[tuple[str, str], ...] = (
    ("init", "Starting the process and reading the filesystem"),
    ("rpc", "Starting the RPC server"),
    ("services", "Starting the role's services"),
    ("replicas", "Bootstrapping and opening the replicas"),
    ("web", "Starting the web server"),
)
_LABELS = dict(STEPS)


def process_age_s() -> float:
    """Seconds since this process started (from /proc; 0 where /proc cannot tell)."""
    try:
        with open("/proc/self/stat") as fh:
            stat = fh.read()
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    # Field 22 (starttime, in clock ticks since boot) counted after the command name, which may hold spaces.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return 0.0
    return max(0.0, uptime - started)


class StartupProgress:
    """When each step of :data:`STEPS` began and ended, on ``clock`` (monotonic seconds). The first step
    began when the process did and ends when this object is made (the node shell makes it first)."""

    def __init__(self, process_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        now = clock()
        self._began: dict[str, float] = {"init": now - process_age}
        self._ended: dict[str, float] = {"init": now}

    def begin(self, step: str) -> None:
        if step not in _LABELS:
            raise ValueError(f"unknown start-up step {step!r}; steps are {[s for s, _ in STEPS]}")
        self._began[step] = self._clock()
        self._ended.pop(step, None)

    def end(self, step: str, at: float | None = None) -> None:
        if step not in self._began:
            raise ValueError(f"start-up step {step!r} ended before it began")
        self._ended[step] = self._clock() if at is None else at

    def end_if_running(self, step: str, at: float) -> None:
        """End ``step`` at ``at`` if it began and has not ended (a step that finishes in the background)."""
        if step in self._began and step not in self._ended:
            self._ended[step] = at

    def steps(self) -> list[dict[str, Any]]:
        """Each step: its name and label, ``state`` (pending, running, done) and seconds elapsed so far."""
        now = self._clock()
        out = []
        for name, label in STEPS:
            began = self._began.get(name)
            ended = self._ended.get(name)
            state = "pending" if began is None else "running" if ended is None else "done"
            elapsed = None if began is None else round((now if ended is None else ended) - began, 3)
            out.append({"step": name, "label": label, "state": state, "elapsed_s": elapsed})
        return out
