"""MVCC: which write timestamps a reader may see.

A write op is registered (``start_op``) when its timestamp is assigned, and becomes visible only when it
commits. A snapshot is ``(clean_ts, committed)``: timestamp ``t`` is visible iff ``t < clean_ts`` or ``t``
is in ``committed``. READ_AT_SNAPSHOT(T) is the snapshot ``(T + 1, {})``, valid only once no op with a
timestamp ``<= T`` is still in flight (:meth:`MvccManager.is_clean_up_to`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common.errors import KuduIllegalState, KuduTimedOut


@dataclass(frozen=True)
class MvccSnapshot:
    """A consistent read point; see the module docstring for the visibility rule."""

    clean_ts: int
    committed: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def at(cls, ts: int) -> MvccSnapshot:
        """Everything with timestamp ``<= ts``."""
        return cls(ts + 1)

    def is_visible(self, ts: int) -> bool:
        return ts < self.clean_ts or ts in self.committed

    def may_have_invisible(self, max_ts: int) -> bool:
        """False when every timestamp up to ``max_ts`` is visible, so filtering can be skipped."""
        return max_ts >= self.clean_ts

    def visible_mask(self, ts: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """Vectorised :meth:`is_visible` over a uint64 timestamp column."""
        mask = pc.less(ts, pa.scalar(self.clean_ts, pa.uint64()))
        if self.committed:
            mask = pc.or_(mask, pc.is_in(ts, value_set=pa.array(sorted(self.committed), pa.uint64())))
        return mask


class MvccManager:
    """Tracks in-flight and committed write timestamps; thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight: set[int] = set()
        self._committed_above_clean: set[int] = set()
        self._max_committed = -1

    def start_op(self, ts: int) -> None:
        """Register an op whose timestamp was just assigned; it is invisible until committed."""
        with self._cond:
            if ts in self._in_flight:
                raise KuduIllegalState(f"timestamp {ts} is already in flight")
            self._in_flight.add(ts)

    def commit_op(self, ts: int) -> None:
        """Make an applied op visible to new snapshots."""
        with self._cond:
            self._in_flight.discard(ts)
            self._committed_above_clean.add(ts)
            self._max_committed = max(self._max_committed, ts)
            clean = self._clean_locked()
            self._committed_above_clean = {t for t in self._committed_above_clean if t >= clean}
            self._cond.notify_all()

    def mark_committed_up_to(self, ts: int) -> None:
        """Treat everything up to ``ts`` as committed (data found in durable files on open)."""
        with self._cond:
            self._max_committed = max(self._max_committed, ts)
            self._cond.notify_all()

    def abort_op(self, ts: int) -> None:
        """Forget an op that will never be applied (e.g. Raft did not replicate it)."""
        with self._cond:
            self._in_flight.discard(ts)
            self._cond.notify_all()

    def _clean_locked(self) -> int:
        if self._in_flight:
            return min(self._in_flight)
        return self._max_committed + 1

    def snapshot_latest(self) -> MvccSnapshot:
        """READ_LATEST: everything committed now."""
        with self._cond:
            return MvccSnapshot(self._clean_locked(), frozenset(self._committed_above_clean))

    def is_clean_up_to(self, ts: int) -> bool:
        """True when no op with a timestamp ``<= ts`` is still in flight."""
        with self._cond:
            return not any(t <= ts for t in self._in_flight)

    def wait_clean_up_to(self, ts: int, timeout_s: float) -> None:
        """Block (in a worker thread, never on the loop) until :meth:`is_clean_up_to`."""
        with self._cond:
            ok = self._cond.wait_for(lambda: not any(t <= ts for t in self._in_flight), timeout_s)
        if not ok:
            raise KuduTimedOut(f"ops at or before timestamp {ts} still in flight after {timeout_s}s")

    def in_flight(self) -> list[int]:
        with self._cond:
            return sorted(self._in_flight)

    def min_in_flight(self) -> int | None:
        with self._cond:
            return min(self._in_flight) if self._in_flight else None
