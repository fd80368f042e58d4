"""Event-loop lag probe: how late a short sleep on the node's loop wakes up.

Anything that keeps the loop from running (a callback doing CPU work, a worker thread holding the GIL in
one long C call or a Python loop) delays every wake-up by as long, so the lateness of a sleep that should
last ``interval_s`` measures the stall a request arriving then would have waited. The samples of the last
``window_s`` are kept in a fixed ring (memory bounded whatever the uptime); p99 and max are computed from
it when the metrics are rendered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import numpy as np

from kudu_async.common.metrics import MetricEntity


class LoopLagProbe:
    """Sleeps ``interval_s`` over and over on the running loop and keeps each wake's lateness (ms)."""

    def __init__(self, interval_s: float = 0.01, window_s: float = 10.0) -> None:
        if interval_s <= 0 or window_s <= 0:
            raise ValueError(f"loop lag probe: interval_s {interval_s} and window_s {window_s} must be positive")
        self.interval_s = interval_s
        self.window_s = window_s
        size = max(16, int(window_s / interval_s) + 1)
        self._lag_ms = np.zeros(size, dtype=np.float64)
        self._at = np.full(size, -np.inf, dtype=np.float64)  # monotonic time of each sample
        self._next = 0
        self._task: asyncio.Task[None] | None = None

    def record(self, lag_ms: float, now: float) -> None:
        i = self._next % len(self._lag_ms)
        self._lag_ms[i] = lag_ms
        self._at[i] = now
        self._next += 1

    def window(self, now: float | None = None) -> np.ndarray:
        """The lateness samples (ms) of the last ``window_s`` seconds."""
        now = time.monotonic() if now is None else now
        return self._lag_ms[self._at >= now - self.window_s]

    def p99_ms(self) -> float:
        w = self.window()
        return round(float(np.percentile(w, 99)), 3) if len(w) else 0.0

    def max_ms(self) -> float:
        w = self.window()
        return round(float(w.max()), 3) if len(w) else 0.0

    def register(self, metrics: MetricEntity) -> None:
        window = f"the last {self.window_s:g} s"
        metrics.gauge(
            "event_loop_lag_ms_p99",
            f"99th percentile of how late a {self.interval_s * 1000:g} ms sleep on the event loop woke, over {window}",
            "milliseconds",
            read=self.p99_ms,
        )
        metrics.gauge(
            "event_loop_lag_ms_max",
            f"Longest event-loop stall seen by the lag probe over {window}",
            "milliseconds",
            read=self.max_ms,
        )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="event-loop-lag-probe")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        interval = self.interval_s
        while True:
            start = time.monotonic()
            await asyncio.sleep(interval)
            now = time.monotonic()
            self.record(max(0.0, (now - start - interval) * 1000.0), now)
