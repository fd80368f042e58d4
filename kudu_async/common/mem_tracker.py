"""Memory trackers (Kudu's ``MemTracker`` tree) and the node-wide memory limit built on them.

A tracker has an id, a parent, an optional limit and a peak. Its consumption is what it counted itself
(``consume``/``release``, for consumers that see their allocations go by) plus what its gauge reads (for
consumers that already know their size, such as a MemRowSet or the block cache) plus its children's.

:class:`NodeMemory` holds the root and the watermarks of ``--memory-limit-mb``: above the pressure
percentage the maintenance manager flushes the biggest memory stores first; above the soft percentage a
write is refused with a probability that rises linearly to 1 at the hard limit (Kudu's rule: load falls
off gradually instead of every writer hitting a wall at once). Writes consult it on the event loop, so it
caches the node's total and reads the trackers at most once per ``refresh_s`` (less often when a pass is
slow: hundreds of tablets). 20 ms by default: with a single-row write every millisecond over 100 tablets a
5 ms period cost 5-6 % of a tserver's CPU in profiles, and a node's memory moves little in 20 ms next to
the gap between the soft and the hard limit.
Sans-IO: the clock and the random source are injected.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

Gauge = Callable[[], int]
# A refresh of the node's total runs at most once per REFRESH_COST_SHARE times its own duration (2%).
REFRESH_COST_SHARE = 50.0
# However slow a pass was (a preempted process on a busy host), the total is never older than this when
# a write is admitted.
MAX_REFRESH_INTERVAL_S = 0.25
# Trackers of memory stores (one per tablet) and of the running flushes' working memory. Flushing a
# store needs about as much again as the store holds (its rows taken out in key order) until the rowsets
# are written, so the node judges pressure and admission on what it will hold once the biggest store's
# flush runs, not on what it holds now: otherwise a store that grew to the soft limit doubles past the
# hard limit when its flush starts.
STORE_TRACKER_IDS = frozenset({"MemRowSet", "DeltaMemStores"})
WORKING_TRACKER_ID = "maintenance"
# The root's child for what the process holds beyond every tracker's count (allocator caches, Python
# objects, libraries' buffers): the node's total is the process's, as Kudu's root reads its allocator's.
UNTRACKED_TRACKER_ID = "untracked"


def format_bytes(n: float) -> str:
    """Bytes for people: ``1.02 GiB``, ``600 MiB``, ``12 KiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(n) >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.2f} {unit}" if unit == "GiB" else f"{v:.0f} {unit}"
    return f"{int(n)} B"


class MemTracker:
    """One node of the tree. Counting is thread-safe; gauges are read by whoever asks."""

    __slots__ = ("_children", "_counted", "_gauge", "_lock", "_peak", "_tree", "id", "kind", "limit", "parent")

    def __init__(
        self,
        tracker_id: str,
        parent: MemTracker | None = None,
        *,
        limit: int = -1,
        gauge: Gauge | None = None,
        kind: str = "",
    ) -> None:
        if not tracker_id:
            raise ValueError("a memory tracker needs a non-empty id")
        self.id = tracker_id
        self.parent = parent
        self.limit = limit
        # Consumers of the same sort (every tablet's MemRowSet) share a kind: the node sums by it.
        self.kind = kind or tracker_id
        self._gauge = gauge
        self._counted = 0
        self._peak = 0
        self._children: dict[str, MemTracker] = {}
        self._lock = threading.Lock()
        self._tree: list[int] = [0] if parent is None else parent._tree  # [generation]: bumped on every change
        if parent is not None:
            parent._attach(self)

    def _attach(self, child: MemTracker) -> None:
        with self._lock:
            if child.id in self._children:
                raise ValueError(f"memory tracker {self.id!r} already has a child {child.id!r}")
            self._children[child.id] = child
            self._tree[0] += 1

    def child(self, tracker_id: str, *, limit: int = -1, gauge: Gauge | None = None, kind: str = "") -> MemTracker:
        """A new child of this tracker."""
        return MemTracker(tracker_id, self, limit=limit, gauge=gauge, kind=kind)

    def children(self) -> list[MemTracker]:
        with self._lock:
            return list(self._children.values())

    def get_child(self, tracker_id: str) -> MemTracker | None:
        with self._lock:
            return self._children.get(tracker_id)

    def detach(self) -> None:
        """Leave the tree (a tablet deleted or shut down): the node stops counting this subtree."""
        parent = self.parent
        if parent is not None:
            with parent._lock:
                if parent._children.get(self.id) is self:
                    del parent._children[self.id]
                    self._tree[0] += 1

    def consume(self, nbytes: int) -> None:
        with self._lock:
            self._counted += nbytes
            self._peak = max(self._peak, self._counted)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._counted -= nbytes
            if self._counted < 0:
                raise ValueError(f"memory tracker {self.id!r} released {nbytes} bytes more than it counted")

    def current(self) -> int:
        """Consumption now: counted + gauge + children (each child's peak is kept up to date too)."""
        return self._walk()

    @property
    def peak(self) -> int:
        return self._peak

    def own(self) -> int:
        """This tracker's consumption without its children's."""
        return self._counted + (self._gauge() if self._gauge is not None else 0)

    def subtree(self) -> list[MemTracker]:
        """This tracker and every descendant, parents first."""
        out = [self]
        for c in self.children():
            out.extend(c.subtree())
        return out

    @property
    def generation(self) -> int:
        """Changes whenever a tracker joins or leaves this tree."""
        return self._tree[0]

    def _walk(self) -> int:
        total = self.own() + sum(c._walk() for c in self.children())
        if total > self._peak:
            self._peak = total
        return total

    def rows(self) -> list[dict[str, Any]]:
        """The tree flattened, parents first: Kudu's ``/mem-trackers`` table (id, parent, limit, current, peak)."""
        out: list[dict[str, Any]] = []
        self._rows(out)
        return out

    def _rows(self, out: list[dict[str, Any]]) -> int:
        row: dict[str, Any] = {
            "id": self.id,
            "parent": None if self.parent is None else self.parent.id,
            "limit": self.limit,
            "current": 0,
            "peak": 0,
        }
        out.append(row)
        total = self.own() + sum(c._rows(out) for c in self.children())
        if total > self._peak:
            self._peak = total
        row["current"] = total
        row["peak"] = self._peak
        return total

    def nested(self) -> dict[str, Any]:
        """The tree as nested objects (each with its children), for people reading JSON."""
        kids = [c.nested() for c in self.children()]
        total = self.own() + sum(k["current"] for k in kids)
        if total > self._peak:
            self._peak = total
        return {"id": self.id, "limit": self.limit, "current": total, "peak": self._peak, "children": kids}


class NodeMemory:
    """The node's root tracker with ``--memory-limit-mb`` and its soft and pressure watermarks."""

    def __init__(
        self,
        limit_bytes: int,
        *,
        soft_percentage: float = 80.0,
        pressure_percentage: float = 60.0,
        pressure_threshold_bytes: int | None = None,
        refresh_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"the memory limit must be > 0 bytes, not {limit_bytes}")
        for name, pct in (("soft", soft_percentage), ("pressure", pressure_percentage)):
            if not 0 < pct <= 100:
                raise ValueError(f"the memory {name} percentage must be in (0, 100], not {pct}")
        self.limit = limit_bytes
        self.soft_limit = int(limit_bytes * soft_percentage / 100.0)
        self.pressure_threshold = (
            int(limit_bytes * pressure_percentage / 100.0)
            if pressure_threshold_bytes is None
            else pressure_threshold_bytes
        )
        self.root = MemTracker("root", limit=limit_bytes)
        self.refresh_s = refresh_s
        self._clock = clock
        self._rand = rand
        self._timer = timer  # measures a pass's cost
        self._cached = 0
        self._projected = 0  # _cached plus what the biggest store's flush will add
        self._last: tuple[list[MemTracker], list[int]] = ([], [])  # the trackers and their own bytes
        self._flat: tuple[int, list[MemTracker]] = (-1, [])  # (tree generation, its trackers)
        self._refreshed_at = -float("inf")
        self._interval = refresh_s
        self._lock = threading.Lock()
        self._process: Gauge | None = None
        self._untracked_tracker: MemTracker | None = None
        self._untracked = 0
        self._tracked = 0

    def track_process(self, anonymous_bytes: Gauge) -> None:
        """Show what the process holds beyond the trackers' count (allocator caches kept after frees,
        temporaries of background work, Python objects) as the root's ``untracked`` child, so the root of
        ``/mem-trackers`` is the process's anonymous memory as Kudu's is its allocator's total.

        Pressure and admission still count only the trackers: they act by flushing stores and refusing
        writes, which free tracked memory; counting memory that no flush frees made a node refuse every
        write for good (a 224 MiB node at 231 MiB with its stores flushed: 89 MiB untracked)."""
        self._process = anonymous_bytes
        self._untracked_tracker = self.root.child(UNTRACKED_TRACKER_ID, gauge=lambda: self._untracked)

    def tracked(self) -> int:
        """The trackers' own total at the last refresh, without the untracked remainder."""
        return self._tracked

    def untracked(self) -> int:
        """The process's anonymous memory beyond the trackers' count at the last refresh."""
        return self._untracked

    def consumption(self) -> int:
        """The node's tracked total, at most ``refresh_s`` old."""
        now = self._clock()
        if now - self._refreshed_at >= self._interval:
            self.refresh(now)
        return self._cached

    def refresh(self, now: float | None = None) -> int:
        """Read every tracker's own consumption (a flat pass over the tree, re-listed only when a tracker
        joined or left): what a write pays for every ``refresh_s``."""
        started = self._timer()
        gen, flat = self._flat
        if gen != self.root.generation:
            gen = self.root.generation
            flat = self.root.subtree()
            self._flat = (gen, flat)
        owns = [t.own() for t in flat]
        ut = self._untracked_tracker
        if ut is not None and self._process is not None:
            owns[next(j for j, t in enumerate(flat) if t is ut)] = 0  # shown, not counted (see track_process)
            total = self._tracked = sum(owns)
            self._untracked = max(0, self._process() - total)
        else:
            total = self._tracked = sum(owns)
        root = self.root
        if total + self._untracked > root._peak:
            root._peak = total + self._untracked
        with self._lock:
            self._cached = total
            self._projected = total + _flush_debt(flat, owns)
            self._last = (flat, owns)
            self._refreshed_at = self._clock() if now is None else now
        # A node with many tablets pays more per pass: pass less often, so that refreshing never takes
        # more than 1/REFRESH_COST_SHARE of the time of whoever asks (the event loop, on every write).
        cost = self._timer() - started
        self._interval = min(max(self.refresh_s, REFRESH_COST_SHARE * cost), MAX_REFRESH_INTERVAL_S)
        return total

    def projected(self) -> int:
        """The tracked total plus the working memory the flush of the biggest store will take beyond what
        running flushes take already: what the node holds at its next peak."""
        self.consumption()
        return self._projected

    def under_pressure(self) -> bool:
        """Above the pressure watermark: flush the biggest memory stores first."""
        return self.projected() >= self.pressure_threshold

    def rejection_probability(self, current: int) -> float:
        """0 up to the soft limit, rising linearly to 1 at the hard limit (Kudu's ``SoftLimitExceeded``)."""
        if current < self.soft_limit:
            return 0.0
        if current >= self.limit or self.limit <= self.soft_limit:
            return 1.0
        return (current - self.soft_limit) / (self.limit - self.soft_limit)

    def admission_refusal(self) -> str | None:
        """Why a new client write is refused now, or None to admit it."""
        current = self.projected()
        p = self.rejection_probability(current)
        if p <= 0.0 or (p < 1.0 and self._rand() >= p):
            return None
        return self.describe(current)

    def describe(self, projected: int | None = None) -> str:
        """``soft memory limit (800 MiB) exceeded: 700 MiB of 1000 MiB used (MemRowSets 300 MiB, ...), 900
        MiB with the flush of the biggest store``: the figures an operator needs to see which consumer
        holds the memory. ``projected``: the figure the limits were compared with (:meth:`projected`)."""
        with self._lock:
            flat, owns = self._last
            cur = self._cached
            proj = self._projected if projected is None else projected
        by_kind: dict[str, int] = {}
        for t, n in zip(flat, owns, strict=True):
            if n:
                by_kind[t.kind] = by_kind.get(t.kind, 0) + n
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]) if v)
        which = "memory limit" if proj >= self.limit else f"soft memory limit ({format_bytes(self.soft_limit)})"
        flush = f", {format_bytes(proj)} with the flush of the biggest store" if proj > cur else ""
        return (
            f"{which} exceeded: {format_bytes(cur)} of {format_bytes(self.limit)} used "
            f"({parts or 'nothing tracked'}){flush}"
        )

    def status(self) -> dict[str, Any]:
        return {
            "limit_bytes": self.limit,
            "soft_limit_bytes": self.soft_limit,
            "pressure_threshold_bytes": self.pressure_threshold,
            "current_bytes": self.consumption(),
        }


def _flush_debt(flat: list[MemTracker], owns: list[int]) -> int:
    """Bytes the biggest memory store's flush will add beyond the working memory flushes hold now."""
    biggest = 0
    working = 0
    for t, n in zip(flat, owns, strict=True):
        if t.id in STORE_TRACKER_IDS:
            biggest = max(biggest, n)
        elif t.id == WORKING_TRACKER_ID:
            working += n
    return max(0, biggest - working)
