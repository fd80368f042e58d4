"""Hybrid logical clock: timestamps are ``physical_micros << 12 | logical``, as Kudu's HybridClock.

The core (:class:`HybridClockCore`) is sans-IO: it takes the physical time as an argument so that tests
and the deterministic simulator can drive it; :class:`HybridClock` is the thin wrapper reading the wall
clock. ``update`` is called with every timestamp received from a peer or client so that causally later
events always get larger timestamps (update-on-receive).
"""

from __future__ import annotations

import threading
import time

LOGICAL_BITS = 12
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def make_timestamp(physical_micros: int, logical: int = 0) -> int:
    """Compose a hybrid timestamp from its parts."""
    return (physical_micros << LOGICAL_BITS) | (logical & LOGICAL_MASK)


def physical_micros(ts: int) -> int:
    """The physical (microseconds since the epoch) part of a hybrid timestamp."""
    return ts >> LOGICAL_BITS


def logical_value(ts: int) -> int:
    """The logical counter part of a hybrid timestamp."""
    return ts & LOGICAL_MASK


def timestamp_from_seconds_ago(now_ts: int, seconds: float) -> int:
    """The hybrid timestamp ``seconds`` before ``now_ts`` (used for the ancient history mark)."""
    return max(0, make_timestamp(physical_micros(now_ts) - int(seconds * 1_000_000)))


class HybridClockCore:
    """Sans-IO hybrid clock state: monotonic, never behind any timestamp it has observed."""

    def __init__(self) -> None:
        self._last = 0

    @property
    def last(self) -> int:
        """The largest timestamp handed out or observed so far."""
        return self._last

    def now(self, physical_now_micros: int) -> int:
        """A timestamp strictly greater than every one handed out or observed before."""
        candidate = make_timestamp(physical_now_micros)
        self._last = candidate if candidate > self._last else self._last + 1
        return self._last

    def update(self, observed_ts: int) -> None:
        """Move the clock past a timestamp received from elsewhere (update-on-receive)."""
        if observed_ts > self._last:
            self._last = observed_ts


class HybridClock:
    """Thread-safe hybrid clock on the wall clock; ``time.time_ns`` is read only here."""

    def __init__(self) -> None:
        self._core = HybridClockCore()
        self._lock = threading.Lock()

    def now(self) -> int:
        """A fresh, strictly increasing hybrid timestamp."""
        with self._lock:
            return self._core.now(time.time_ns() // 1000)

    def update(self, observed_ts: int) -> None:
        """Record a timestamp seen in a message so later local timestamps exceed it."""
        with self._lock:
            self._core.update(observed_ts)

    def peek(self) -> int:
        """The last timestamp handed out or observed, without advancing the clock."""
        with self._lock:
            return self._core.last


class ManualHybridClock(HybridClock):
    """A hybrid clock whose physical time is set by the caller (tests and the simulator)."""

    def __init__(self, physical_micros: int = 0) -> None:
        super().__init__()
        self.physical_micros = physical_micros

    def advance(self, micros: int) -> None:
        self.physical_micros += micros

    def now(self) -> int:
        with self._lock:
            return self._core.now(self.physical_micros)
