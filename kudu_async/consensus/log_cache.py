"""The Raft core's in-memory view of the log (Kudu's ``LogCache``); ``log.py`` is the durable WAL.

Three ranges, oldest first:

- up to ``floor``: gone from the WAL too; a peer that needs an entry there gets a tablet copy;
- ``floor + 1 .. cached_from() - 1``: evicted from memory but still in the WAL. Only their terms stay,
  one (first index, term) pair per run of equal terms (a log's terms never decrease), so a long
  evicted stretch costs a few words. A peer that needs them has them read back from the WAL by the
  driver (``Ready.log_reads``);
- ``cached_from() .. last_index()``: the entries themselves, with cumulative byte sizes so that
  batching by bytes is a bisect instead of a loop over entries.

``snapshot_index`` (the state machine's compaction point) lies between ``floor`` and ``cached_from() - 1``.
Only entries that are durable and applied are ever evicted (the core decides which); they are
committed, so the WAL's copy never differs from the one evicted.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate, islice, repeat
from operator import add, itemgetter

from kudu_async.common.errors import KuduIllegalState

from .raft_messages import Entry

# Rough framing cost per entry (term, index, kind, length) so empty payloads still count.
ENTRY_OVERHEAD = 24


_payload = itemgetter(3)  # Entry.payload, fetched without a Python-level call


def entries_bytes(entries: Sequence[Entry]) -> int:
    """What ``entries`` count for in the cache's and the in-flight byte budgets."""
    return sum(map(len, map(_payload, entries))) + ENTRY_OVERHEAD * len(entries)


class LogCache:
    """Entries after a compaction point (some evicted to the WAL), plus the durable watermark ``stable``."""

    __slots__ = (
        "_cum",
        "_entries",
        "_run_first",
        "_run_term",
        "_start",
        "floor",
        "floor_term",
        "snapshot_index",
        "snapshot_term",
        "stable",
    )

    def __init__(self, snapshot_index: int = 0, snapshot_term: int = 0, entries: Sequence[Entry] = ()) -> None:
        self.snapshot_index = snapshot_index
        self.snapshot_term = snapshot_term
        self.floor = snapshot_index
        self.floor_term = snapshot_term
        self._start = snapshot_index + 1  # index of _entries[0]
        self._entries: list[Entry] = []
        self._cum: list[int] = [0]
        self._run_first: list[int] = []  # evicted stretch: first index of each run of one term
        self._run_term: list[int] = []
        # Everything handed in at construction came from durable storage.
        self.append(entries)
        self.stable = self.last_index()

    # --- queries --------------------------------------------------------------------------------------

    def first_index(self) -> int:
        return self.snapshot_index + 1

    def cached_from(self) -> int:
        """The first index whose entry is in memory (``last_index() + 1`` when none is)."""
        return self._start

    def last_index(self) -> int:
        return self._start + len(self._entries) - 1

    def last_term(self) -> int:
        if self._entries:
            return self._entries[-1].term
        term = self.term_at(self._start - 1)
        assert term is not None  # _start - 1 is the floor, the compaction point or an evicted entry
        return term

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``; None when it is past the end or behind the floor."""
        k = index - self._start
        if k >= 0:
            return self._entries[k].term if k < len(self._entries) else None
        if index == self.snapshot_index:
            return self.snapshot_term
        if index == self.floor:
            return self.floor_term
        if index < self.floor:
            return None
        return self._run_term[bisect_right(self._run_first, index) - 1]

    def entry(self, index: int) -> Entry:
        return self._entries[index - self._start]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi (both inside the cached part)."""
        if lo < self._start:
            raise KuduIllegalState(f"log entries from {lo} are evicted (cached from {self._start})")
        base = self._start
        return self._entries[lo - base : hi - base]

    def bytes_between(self, lo: int, hi: int) -> int:
        base = self._start
        return self._cum[hi - base] - self._cum[lo - base]

    def slice_limited(self, lo: int, max_bytes: int) -> list[Entry]:
        """Entries from ``lo`` up to ``max_bytes`` (at least one if any exist): one AppendEntries batch."""
        k = lo - self._start
        if k < 0:
            raise KuduIllegalState(f"log entries from {lo} are evicted (cached from {self._start})")
        if k >= len(self._entries):
            return []
        # Largest end with cum[end] - cum[k] <= max_bytes, found by bisect.
        end = bisect_right(self._cum, self._cum[k] + max_bytes) - 1
        end = max(end, k + 1)
        return self._entries[k:end]

    def memory_bytes(self) -> int:
        """Bytes of the cached entries (payloads plus framing), what the cache's limit bounds."""
        return self._cum[-1] - self._cum[0]

    def evict_target(self, limit: int) -> int:
        """The highest index to evict so that what stays cached fits in ``limit`` bytes."""
        k = bisect_left(self._cum, self._cum[-1] - limit)
        return self._start + k - 1

    # --- mutations ------------------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries that directly follow the last index."""
        if not entries:
            return
        self._entries.extend(entries)
        # All C-level iteration: payload lengths plus the per-entry overhead, accumulated.
        sizes = map(add, map(len, map(_payload, entries)), repeat(ENTRY_OVERHEAD))
        self._cum.extend(islice(accumulate(sizes, initial=self._cum[-1]), 1, None))

    def truncate_after(self, index: int) -> None:
        """Drop entries after ``index``; the durable watermark can not stay above what remains."""
        if index < self._start - 1:  # into the evicted stretch: only its terms are left to drop
            self._entries = []
            self._cum = [0]
            self._start = index + 1
            keep = bisect_right(self._run_first, index)
            del self._run_first[keep:], self._run_term[keep:]
        k = index - self._start + 1
        del self._entries[k:]
        del self._cum[k + 1 :]
        if self.stable > index:
            self.stable = index

    def evict_to(self, index: int) -> None:
        """Keep only the terms of entries up to ``index`` (the caller knows the WAL holds them)."""
        k = min(index, self.last_index()) - self._start + 1
        if k <= 0:
            return
        gone = self._entries[:k]
        last_run = self._run_term[-1] if self._run_term else None
        if gone[0].term != gone[-1].term or gone[0].term != last_run:
            for e in gone:  # terms never decrease: a new run starts where the term grows
                if e.term != last_run:
                    self._run_first.append(e.index)
                    self._run_term.append(e.term)
                    last_run = e.term
        del self._entries[:k]
        del self._cum[:k]
        self._start += k

    def compact(self, index: int, keep_terms_from: int | None = None) -> None:
        """The state machine holds entries up to ``index``: forget them, but keep the terms of those
        from ``keep_terms_from`` on (the WAL still has them for lagging peers; default: none)."""
        term = self.term_at(index)
        if term is None or index <= self.snapshot_index:
            return
        self.evict_to(index)
        self.snapshot_index = index
        self.snapshot_term = term
        keep = index + 1 if keep_terms_from is None else keep_terms_from
        self.forget_before(min(keep, index + 1))

    def forget_before(self, index: int) -> None:
        """The WAL no longer holds entries before ``index``: drop their terms (a peer needing them gets
        a tablet copy)."""
        floor = min(index - 1, self.snapshot_index)
        if floor <= self.floor:
            return
        term = self.term_at(floor)
        assert term is not None
        self.floor, self.floor_term = floor, term
        k = bisect_right(self._run_first, floor)
        if k:  # the run holding the floor now starts right after it
            self._run_first[k - 1] = floor + 1
        del self._run_first[: k - 1 if k else 0], self._run_term[: k - 1 if k else 0]
        if self._run_first and self._run_first[0] >= self._start:
            self._run_first.clear()
            self._run_term.clear()

    def retain_terms(self, run_first: Sequence[int], run_term: Sequence[int]) -> None:
        """At restart: the WAL still holds entries ``run_first[0]..snapshot_index`` with these term runs
        (the compaction point's own term last), so the floor moves down to the first of them."""
        if self._run_first or self._start != self.snapshot_index + 1:
            raise KuduIllegalState("term runs can only be given to a log cache that evicted nothing")
        if not run_first or run_first[0] > self.snapshot_index or run_term[-1] != self.snapshot_term:
            raise KuduIllegalState(
                f"term runs from {run_first[:1]} (last term {run_term[-1:]}) do not end at the compaction "
                f"point {self.snapshot_index} (term {self.snapshot_term})"
            )
        self.floor, self.floor_term = run_first[0], run_term[0]
        firsts, terms = list(run_first), list(run_term)
        firsts[0] += 1  # the floor's own term is floor_term
        if len(firsts) > 1 and firsts[0] == firsts[1]:
            del firsts[0], terms[0]
        if firsts[0] <= self.snapshot_index:
            self._run_first, self._run_term = firsts, terms

    def reset(self, snapshot_index: int, snapshot_term: int) -> None:
        """Replace the whole log by a snapshot point (a tablet copy was installed)."""
        self._entries = []
        self._cum = [0]
        self._run_first = []
        self._run_term = []
        self.snapshot_index = self.floor = snapshot_index
        self.snapshot_term = self.floor_term = snapshot_term
        self._start = snapshot_index + 1
        self.stable = snapshot_index
