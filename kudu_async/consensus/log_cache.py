"""The Raft core's in-memory copy of the log (Kudu's ``LogCache``); ``log.py`` is the durable WAL.

It holds every entry after the compaction point (``snapshot_index``) and answers what the core asks
fast: term at an index, slices for AppendEntries, and cumulative byte sizes so that batching by bytes is
a bisect instead of a loop over entries. Unlike Kudu's cache it never reads back from the WAL: a peer
that needs an entry at or below ``snapshot_index`` gets a tablet copy.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, islice, repeat
from operator import add, itemgetter

from .raft_messages import Entry

# Rough framing cost per entry (term, index, kind, length) so empty payloads still count.
ENTRY_OVERHEAD = 24


_payload = itemgetter(3)  # Entry.payload, fetched without a Python-level call


class LogCache:
    """Entries after a compaction point, plus the durable watermark ``stable``."""

    __slots__ = ("_cum", "_entries", "snapshot_index", "snapshot_term", "stable")

    def __init__(self, snapshot_index: int = 0, snapshot_term: int = 0, entries: Sequence[Entry] = ()) -> None:
        self.snapshot_index = snapshot_index
        self.snapshot_term = snapshot_term
        self._entries: list[Entry] = []
        self._cum: list[int] = [0]
        # Everything handed in at construction came from durable storage.
        self.append(entries)
        self.stable = self.last_index()

    # --- queries --------------------------------------------------------------------------------------

    def first_index(self) -> int:
        return self.snapshot_index + 1

    def last_index(self) -> int:
        return self.snapshot_index + len(self._entries)

    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snapshot_term

    def term_at(self, index: int) -> int | None:
        """Term of the entry at ``index``; None when it is past the end or compacted away."""
        k = index - self.snapshot_index - 1
        if k < 0:
            return self.snapshot_term if k == -1 else None
        if k < len(self._entries):
            return self._entries[k].term
        return None

    def entry(self, index: int) -> Entry:
        return self._entries[index - self.snapshot_index - 1]

    def memory_bytes(self) -> int:
        """Bytes of the entries held (payloads plus framing), for the node's memory tracker."""
        return self._cum[-1] - self._cum[0]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi (both inside the retained log)."""
        base = self.snapshot_index + 1
        return self._entries[lo - base : hi - base]

    def bytes_between(self, lo: int, hi: int) -> int:
        base = self.snapshot_index + 1
        return self._cum[hi - base] - self._cum[lo - base]

    def slice_limited(self, lo: int, max_bytes: int) -> list[Entry]:
        """Entries from ``lo`` up to ``max_bytes`` (at least one if any exist): one AppendEntries batch."""
        base = self.snapshot_index + 1
        k = lo - base
        if k >= len(self._entries):
            return []
        # Largest end with cum[end] - cum[k] <= max_bytes, found by bisect.
        end = bisect_right(self._cum, self._cum[k] + max_bytes) - 1
        end = max(end, k + 1)
        return self._entries[k:end]

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
        k = index - self.snapshot_index
        del self._entries[k:]
        del self._cum[k + 1 :]
        if self.stable > index:
            self.stable = index

    def compact(self, index: int) -> None:
        """Forget entries up to ``index`` (they are durable in the state machine)."""
        term = self.term_at(index)
        if term is None or index <= self.snapshot_index:
            return
        k = index - self.snapshot_index
        del self._entries[:k]
        del self._cum[:k]
        self.snapshot_index = index
        self.snapshot_term = term

    def reset(self, snapshot_index: int, snapshot_term: int) -> None:
        """Replace the whole log by a snapshot point (a tablet copy was installed)."""
        self._entries = []
        self._cum = [0]
        self.snapshot_index = snapshot_index
        self.snapshot_term = snapshot_term
        self.stable = snapshot_index
