"""Maintenance manager: picks flushes and compactions across tablets and runs them on worker threads.

Every poll it asks each registered tablet for candidate ops (:func:`tablet_ops`), scores them and hands
the best runnable one to a free worker. Scoring follows Kudu's order: memory pressure first (the node's
tracked memory, ``memory_usage``, or without it the MemRowSet + DeltaMemStore bytes of all tablets, above
``memory_threshold_bytes``: flush the biggest), then a store past its tablet's ``flush_threshold_bytes``
(Kudu's per-tablet ``flush_threshold_mb``), then age (a non-empty store older than ``flush_threshold_secs``),
then performance benefit (the average rowset height a merging compaction removes within the tablet's
compaction budget, see :mod:`.compaction_policy`; delta file count; delta/base ratio): a flush, which frees
memory, always goes before a compaction. A bulk load thus fills each tablet's MemRowSet to the threshold
before it is flushed, instead of the node flushing (and later compacting) many small rowsets.
Queue, running ops and history are plain JSON-able dicts for the admin page.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kudu_async.common.mem_tracker import MemTracker
from kudu_async.tablet.tablet import Tablet

_A = TypeVar("_A")


@dataclass
class MaintenanceOp:
    """A candidate op: what it would free (RAM), how much it would help reads, and how to run it."""

    name: str
    tablet_id: str
    ram_anchored: int
    age_s: float
    perf_improvement: float
    run: Callable[[], bool]
    key: str = ""
    over_threshold: bool = False  # a store at or past its tablet's flush threshold

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tablet_id": self.tablet_id,
            "ram_anchored_bytes": self.ram_anchored,
            "age_s": round(self.age_s, 3),
            "perf_improvement": round(self.perf_improvement, 4),
            "over_threshold": self.over_threshold,
        }


def _lower_priority(nice: int) -> None:
    """Lower the calling thread's CPU priority by ``nice`` (Linux schedules threads one by one)."""
    if nice:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


def _bind(fn: Callable[[_A], bool], arg: _A) -> Callable[[], bool]:
    return lambda: fn(arg)


def tablet_ops(tablet: Tablet) -> list[MaintenanceOp]:
    """The flush and compaction ops this tablet could run now."""
    ops: list[MaintenanceOp] = []
    now = time.monotonic()
    tid = tablet.tablet_id
    mrs_bytes = tablet.mrs_memory_bytes()
    threshold = tablet.options.flush_threshold_bytes
    created = tablet.mrs_created_at()
    if mrs_bytes:
        ops.append(
            MaintenanceOp(
                "FlushMRSOp",
                tid,
                mrs_bytes,
                now - created if created else 0.0,
                0.0,
                tablet.flush_mrs,
                key=f"{tid}/mrs",
                over_threshold=mrs_bytes >= threshold,
            )
        )
    opts = tablet.options
    for d in tablet.rowsets():
        dms_bytes = d.dms.memory_bytes()
        if dms_bytes:
            age = now - d.dms.created_at if d.dms.created_at else 0.0
            ops.append(
                MaintenanceOp(
                    "FlushDeltaMemStoresOp",
                    tid,
                    dms_bytes,
                    age,
                    0.0,
                    _bind(tablet.flush_dms, d.id),
                    key=f"{tid}/dms/{d.id}",
                    over_threshold=dms_bytes >= threshold,
                )
            )
        nfiles = len(d.delta_tables)
        if nfiles >= opts.delta_minor_compact_max_files:
            ops.append(
                MaintenanceOp(
                    "MinorDeltaCompactionOp",
                    tid,
                    0,
                    0.0,
                    nfiles / 100.0,
                    _bind(tablet.minor_delta_compaction, d.id),
                    key=f"{tid}/minor/{d.id}",
                )
            )
        ratio = d.num_delta_rows_on_disk() / max(1, d.num_rows())
        if nfiles and ratio >= opts.delta_major_compact_min_ratio:
            ops.append(
                MaintenanceOp(
                    "MajorDeltaCompactionOp",
                    tid,
                    0,
                    0.0,
                    ratio,
                    _bind(tablet.compact_rowsets, [d.id]),
                    key=f"{tid}/major/{d.id}",
                )
            )
    layout = tablet.rowset_layout()
    if layout.compact_ids:
        ops.append(
            MaintenanceOp(
                "CompactRowSetsOp",
                tid,
                0,
                0.0,
                layout.improvement,
                _bind(tablet.compact_rowsets, list(layout.compact_ids)),
                key=f"{tid}/compact",
            )
        )
    return ops


class MaintenanceManager:
    """Runs :class:`MaintenanceOp` s on ``num_threads`` workers; ``poll_once`` is the thread-free core."""

    def __init__(
        self,
        *,
        num_threads: int = 1,
        polling_interval_s: float = 0.25,
        memory_threshold_bytes: int = 1024 * 1024 * 1024,
        flush_age_s: float = 120.0,
        history_size: int = 64,
        memory_usage: Callable[[], int] | None = None,
        working_memory: MemTracker | None = None,
        nice: int = 0,
    ) -> None:
        if not 0 <= nice <= 19:
            raise ValueError(f"maintenance worker nice value must be in [0, 19], got {nice}")
        self.num_threads = num_threads
        # Added to the workers' OS scheduling priority: with more runnable threads than cores the kernel
        # then runs the event loop (and the WAL, and write prepare) first, flushes in what CPU is left.
        self.nice = nice
        self.polling_interval_s = polling_interval_s
        self.memory_threshold_bytes = memory_threshold_bytes
        self.flush_age_s = flush_age_s
        # The node's tracked memory, compared with memory_threshold_bytes; without it, the memory stores'
        # own total is.
        self.memory_usage = memory_usage
        # Counts what a running flush builds beside the store it empties: its output is about the store's
        # size (measured: a 105 MiB MemRowSet's flush raised RssAnon by ~110 MiB until it finished).
        self.working_memory = working_memory
        self._tablets: dict[str, Tablet] = {}
        self._lock = threading.Lock()
        self._running: dict[str, dict[str, Any]] = {}
        self._history: deque[dict[str, Any]] = deque(maxlen=history_size)
        self._pool: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_queue: list[dict[str, Any]] = []

    def register(self, tablet: Tablet) -> None:
        with self._lock:
            self._tablets[tablet.tablet_id] = tablet

    def unregister(self, tablet_id: str) -> None:
        with self._lock:
            self._tablets.pop(tablet_id, None)

    def score(self, op: MaintenanceOp, total_ram: int) -> float:
        """Memory pressure beats age beats read benefit; 0 means "not worth running"."""
        if op.ram_anchored and total_ram >= self.memory_threshold_bytes:
            return 1e12 + op.ram_anchored
        if op.over_threshold:
            return 1e10 + op.ram_anchored
        if op.ram_anchored and op.age_s >= self.flush_age_s:
            return 1e9 + op.age_s
        return op.perf_improvement

    def candidates(self) -> list[tuple[float, MaintenanceOp]]:
        with self._lock:
            tablets = list(self._tablets.values())
            busy = set(self._running)
        ops = [op for t in tablets for op in tablet_ops(t)]
        total_ram = self.memory_usage() if self.memory_usage is not None else sum(op.ram_anchored for op in ops)
        scored = sorted(((self.score(op, total_ram), op) for op in ops if op.key not in busy), key=lambda so: -so[0])
        self._last_queue = [{**op.to_dict(), "score": s} for s, op in scored]
        return [(s, op) for s, op in scored if s > 0]

    def poll_once(self, run_inline: bool = False) -> MaintenanceOp | None:
        """Pick the best op; run it inline (tests) or submit it to the worker pool."""
        with self._lock:
            if not run_inline and len(self._running) >= self.num_threads:
                return None
        cands = self.candidates()
        if not cands:
            return None
        op = cands[0][1]
        with self._lock:
            self._running[op.key] = {**op.to_dict(), "started_at": time.time()}
        if run_inline:
            self._execute(op)
        else:
            assert self._pool is not None
            self._pool.submit(self._execute, op)
        return op

    def _execute(self, op: MaintenanceOp) -> None:
        start = time.monotonic()
        entry = op.to_dict()
        working = self.working_memory if op.ram_anchored else None
        if working is not None:
            working.consume(op.ram_anchored)
        try:
            did = op.run()
            entry["result"] = "OK" if did else "NOTHING_TO_DO"
        except Exception as e:  # a failed op is recorded and retried later; the tablet stays usable
            entry["result"] = f"ERROR: {e!r}"
            entry["traceback"] = traceback.format_exc(limit=5)
        finally:
            if working is not None:
                working.release(op.ram_anchored)
        entry["duration_s"] = round(time.monotonic() - start, 4)
        entry["finished_at"] = time.time()
        with self._lock:
            self._running.pop(op.key, None)
            self._history.append(entry)

    def start(self) -> None:
        """Start the polling thread and the worker pool."""
        if self._thread is not None:
            return
        self._pool = ThreadPoolExecutor(
            self.num_threads, thread_name_prefix="maintenance", initializer=_lower_priority, initargs=(self.nice,)
        )
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="maintenance-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.polling_interval_s):
            try:
                while self.poll_once() is not None:
                    pass
            except Exception:  # keep scheduling even if one tablet misbehaves
                traceback.print_exc()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def status(self) -> dict[str, Any]:
        """JSON-able queue / running / history for ``/api/v1/maintenance``."""
        with self._lock:
            return {
                "num_threads": self.num_threads,
                "queue": list(self._last_queue),
                "running": list(self._running.values()),
                "history": list(self._history),
            }
