"""MemRowSet: the in-memory, key-ordered store that takes new inserts.

Rows are kept as a reference into the Arrow batches they arrived in (inserts never copy values into
Python objects), found by a columnar index from encoded primary key to row number
(:class:`~kudu_async.tablet.key_arrays.KeyIndex`: sorted runs of the Arrow key arrays the writes
encoded, no Python object per key); scans and flushes read its keys merged into one run. Updates,
deletes and re-inserts are REDO mutations with their timestamps, kept column-wise like a DiskRowSet's
(a DeltaMemStore by row number); nothing is updated in place.

Thread-safety: the tablet mutates a MemRowSet only under its component lock; a frozen MemRowSet being
flushed can still receive mutations (recorded with sequence numbers at or above the freeze point so the
flush can carry them over to the new DiskRowSets).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.tablet.delta_store import (
    LIVE_COL,
    MUTATION_OVERHEAD_BYTES,
    ROW_COL,
    SEQ_COL,
    DeltaMemStore,
    LateMutations,
    Mutation,
    apply_deltas,
)
from kudu_async.tablet.key_arrays import KeyBatch, KeyIndex, KeyRun, key_bytes
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import KEY_COL, TS_COL, SchemaInfo

__all__ = ["MUTATION_OVERHEAD_BYTES", "ROW_OVERHEAD_BYTES", "MRSRow", "MemRowSet", "Mutation", "apply_mutations"]

# Memory a row costs beyond its values and key bytes (both counted as they come): its index entry (key
# offset, row number, the search form's copy of an integer key) and its slots in the per-row arrays
# (insert and last-change timestamps, liveness), which grow by doubling; no Python object per row.
ROW_OVERHEAD_BYTES = 64


@dataclass(slots=True)
class MRSRow:
    """A view of one MemRowSet row (made on demand by :meth:`MemRowSet.get`): its row number, insert
    timestamp and the timestamp and liveness after its last mutation."""

    insert_ts: int
    rownum: int
    last_ts: int = -1
    live: bool = True

    def max_ts(self) -> int:
        return max(self.insert_ts, self.last_ts)


class MemRowSet:
    """Encoded key -> row version chain; see the module docstring.

    Per row only its key in the index (with its row number). Insert timestamps and each row's last change
    (timestamp, live) live in numpy arrays indexed by row number; mutations live column-wise in a
    :class:`DeltaMemStore` whose ``_row`` is the row number (one delta chunk per write batch), so
    neither a bulk insert nor a batch of updates creates a Python object per row.
    """

    def __init__(self, info: SchemaInfo, mrs_id: int) -> None:
        self.info = info
        self.id = mrs_id
        self.index = KeyIndex()  # key -> row number in the stored batches
        self.deltas = DeltaMemStore(info)  # mutations by row number
        cap = 1024
        self._insert_ts = np.full(cap, -1, dtype=np.int64)  # by row number (-1: not inserted)
        # By row number, made on the first mutation (rows of a bulk load never change): the timestamp of
        # each row's last mutation (-1: none) and whether it is live after it.
        self._last_ts: np.ndarray | None = None
        self._live: np.ndarray | None = None
        self._batches: list[pa.RecordBatch] = []
        self._starts: list[int] = []  # row number of each stored batch's first row
        self._num_stored = 0
        self._mem = 0
        self.min_log_index: int | None = None
        self.max_log_index = 0
        self.min_ts: int | None = None
        self.created_at: float | None = None
        self.retired = False
        self._table: pa.Table | None = None

    def __len__(self) -> int:
        return len(self.index)

    def memory_bytes(self) -> int:
        return self._mem

    def _note(self, ts: int, log_index: int) -> None:
        if self.min_log_index is None or log_index < self.min_log_index:
            self.min_log_index = log_index
        self.max_log_index = max(self.max_log_index, log_index)
        if self.min_ts is None or ts < self.min_ts:
            self.min_ts = ts

    def add_batch(self, batch: pa.RecordBatch) -> int:
        """Keep ``batch`` as backing storage; returns the row number of its first row."""
        base = self._num_stored
        self._batches.append(batch)
        self._starts.append(base)
        self._num_stored += batch.num_rows
        cap = len(self._insert_ts)
        if self._num_stored > cap:
            new_cap = max(self._num_stored, 2 * cap)
            for name, fill in (("_insert_ts", -1), ("_last_ts", -1), ("_live", True)):
                old = getattr(self, name)
                if old is not None:
                    grown = np.full(new_cap, fill, dtype=old.dtype)
                    grown[:cap] = old
                    setattr(self, name, grown)
        self._mem += batch.nbytes
        self._table = None
        return base

    def sorted_view(self) -> KeyRun:
        """The keys in key order with their row numbers (the index merged into one run)."""
        return self.index.sorted()

    def insert(self, key: bytes, rownum: int, ts: int, log_index: int) -> None:
        self.insert_many([key], [rownum], ts, log_index)

    def insert_many(
        self,
        keys: pa.Array | list[bytes],
        rownums: range | np.ndarray | list[int],
        ts: int,
        log_index: int,
        order: np.ndarray | None = None,
    ) -> None:
        """Insert new keys (none already here; best as an Arrow ``binary`` array) in bulk: one index run
        and numpy updates. ``order``: the keys' sort order, when the write has it."""
        if isinstance(rownums, range) and rownums.step == 1:
            self._insert_ts[rownums.start : rownums.stop] = ts
            rn = np.arange(rownums.start, rownums.stop, dtype=np.int64)
        else:
            rn = np.asarray(rownums, dtype=np.int64)
            self._insert_ts[rn] = ts
        arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary())
        if not arr.type.equals(pa.binary()):
            arr = arr.cast(pa.binary())
        self.index.add(arr, rn, order)
        self._mem += len(arr) * ROW_OVERHEAD_BYTES + key_bytes(arr)
        self._note(ts, log_index)

    def rownums_of(self, kb: KeyBatch, rows: np.ndarray | None = None) -> np.ndarray:
        """Row numbers of the keys ``kb`` holds at ``rows`` (default all), -1 for keys not here."""
        return self.index.find(kb, rows)

    def get(self, key: bytes) -> MRSRow | None:
        rownum = self.index.get(key)
        if rownum is None:
            return None
        if self._last_ts is None or self._live is None:
            return MRSRow(int(self._insert_ts[rownum]), rownum, -1, True)
        return MRSRow(int(self._insert_ts[rownum]), rownum, int(self._last_ts[rownum]), bool(self._live[rownum]))

    def live_rows(self) -> int:
        """Rows inserted here and not deleted since (vectorised over the per-row arrays)."""
        n = self._num_stored
        inserted = self._insert_ts[:n] >= 0
        if self._live is None:
            return int(np.count_nonzero(inserted))
        return int(np.count_nonzero(inserted & self._live[:n]))

    def latest_of(self, rownums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(timestamp of the last change, live now) of many rows, by row number."""
        if self._last_ts is None or self._live is None:
            return self._insert_ts[rownums], np.ones(len(rownums), dtype=bool)
        return np.maximum(self._insert_ts[rownums], self._last_ts[rownums]), self._live[rownums]

    def _change_state(self) -> tuple[np.ndarray, np.ndarray]:
        """The last-change arrays, made (as long as the insert timestamps) on the first mutation."""
        if self._last_ts is None or self._live is None:
            cap = len(self._insert_ts)
            self._last_ts = np.full(cap, -1, dtype=np.int64)
            self._live = np.ones(cap, dtype=bool)
        return self._last_ts, self._live

    def mutate(self, row: MRSRow, m: Mutation) -> None:
        """One mutation of ``row`` (a view from :meth:`get`; ``m.key`` is its key)."""
        self.deltas.add(row.rownum, m)
        last_ts, live = self._change_state()
        last_ts[row.rownum] = m.ts
        live[row.rownum] = m.live
        row.last_ts, row.live = m.ts, m.live
        self._mem += MUTATION_OVERHEAD_BYTES + (len(m.changes) * 16 if m.changes else 0)
        self._note(m.ts, m.log_index)

    def mutate_batch(
        self, rownums: np.ndarray, table: pa.Table, reinsert: np.ndarray, log_index: int, ts: int, nbytes: int
    ) -> None:
        """Many mutations of one write batch at once (a :func:`delta_chunk` whose ``_row`` holds row
        numbers, in sequence order)."""
        self.deltas.add_chunk(table, reinsert, log_index, ts, nbytes)
        _, first = np.unique(rownums[::-1], return_index=True)  # the last mutation of each row
        last = len(rownums) - 1 - first
        last_ts, live = self._change_state()
        last_ts[rownums[last]] = ts
        live[rownums[last]] = table.column(LIVE_COL).to_numpy(zero_copy_only=False)[last]
        self._mem += nbytes
        self._note(ts, log_index)

    def table(self) -> pa.Table:
        """All stored rows (including never-visible ones) as one table indexed by row number."""
        if self._table is None:
            self._table = pa.Table.from_batches(self._batches) if self._batches else self.info.arrow.empty_table()
        return self._table

    # -- reading ---------------------------------------------------------------------------------

    def base_row(self, row: MRSRow, snap: MvccSnapshot) -> pa.RecordBatch | None:
        """The row as a one-row slice of the batch it arrived in (zero copy) when ``snap`` sees it as it
        was inserted (visible, never changed since); else None and :meth:`visible_row` answers."""
        if row.last_ts >= 0 or not snap.is_visible(row.insert_ts):
            return None
        k = bisect.bisect_right(self._starts, row.rownum) - 1
        return self._batches[k].slice(row.rownum - self._starts[k], 1)

    def visible_row(self, row: MRSRow, snap: MvccSnapshot) -> dict[int, Any] | None:
        """Column index -> value of the row as of ``snap``, or None when not live then."""
        if not snap.is_visible(row.insert_ts):
            return None
        tbl = self.table()
        values = {i: tbl.column(i)[row.rownum].as_py() for i in range(len(self.info.names))}
        muts = self.deltas.mutations_of(row.rownum) if row.last_ts >= 0 else None
        return apply_mutations(values, muts, snap)

    def _deltas_at(self, rownums: np.ndarray, max_seq: int | None = None) -> pa.Table | None:
        """The mutations of the given rows (row numbers), ``_row`` rewritten to the position in
        ``rownums``; only those with a sequence number below ``max_seq`` if given."""
        if not len(self.deltas) or not len(rownums):
            return None
        d = self.deltas.to_table()
        if max_seq is not None:
            d = d.filter(pc.less(d.column(SEQ_COL), pa.scalar(max_seq, pa.int64())))
        pos_of = np.full(self._num_stored, -1, dtype=np.int64)
        pos_of[rownums] = np.arange(len(rownums), dtype=np.int64)
        pos = pos_of[d.column(ROW_COL).to_numpy().astype(np.int64)]
        keep = pos >= 0
        if not keep.all():
            d = d.filter(pa.array(keep))
            pos = pos[keep]
        if not d.num_rows:
            return None
        d = d.set_column(d.schema.get_field_index(ROW_COL), ROW_COL, pa.array(pos.astype(np.uint32)))
        return d.sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])

    def materialize(
        self,
        snap: MvccSnapshot,
        lower: bytes | None,
        upper: bytes | None,
        lower_exclusive: bool = False,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """Rows live at ``snap`` in ``[lower, upper)`` in key order, with ``_key`` and ``_ts``; only
        ``columns`` of the value columns when given (a scan's: the ``take`` of the others, strings
        above all, was half a filtered scan's time).

        One vectorised ``take`` in key order, then the visible mutations rolled in column-wise
        (:func:`apply_deltas`, as for DiskRowSets). Must be called under the tablet's component lock.
        """
        view = self.sorted_view()
        lo = 0 if lower is None else view.bisect(lower, right=lower_exclusive)
        hi = len(view) if upper is None else view.bisect(upper)
        hi = max(lo, hi)
        keys = view.keys.slice(lo, hi - lo)
        rownums = view.rownums[lo:hi]
        n = len(rownums)
        tss = self._insert_ts[rownums].astype(np.uint64)
        keep = snap.visible_mask(pa.array(tss)).to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
        whole = self.table()
        tbl = (whole if columns is None else whole.select(columns)).take(pa.array(rownums))
        deltas = self._deltas_at(rownums)
        if deltas is not None:
            value_cols = [self.info.names[i] for i in self.info.value_indices]
            if columns is not None:
                value_cols = [c for c in value_cols if c in columns]
            tbl, live = apply_deltas(tbl, 0, deltas, snap, value_cols)
            if live is not None:
                keep = keep & live
        tbl = tbl.append_column(KEY_COL, keys)
        tbl = tbl.append_column(TS_COL, pa.array(tss, pa.uint64()))
        return tbl if keep.all() else tbl.filter(pa.array(keep))

    def flush_input(self, max_seq: int) -> tuple[pa.Table, pa.Table | None]:
        """The frozen content for a flush: base rows in key order plus their REDO mutations.

        Base rows are the rows as first inserted (``_ts`` = insert timestamp); every mutation with a
        sequence number below ``max_seq`` is returned as a delta table positioned in the base table.

        Key order is the scans' sorted view (Arrow's sort of the keys, byte order as Python compares
        bytes; the sort runs in C++ without the GIL), built here if no scan did, and kept for the flush's
        carry-over (:meth:`mutations_since`). Reads only ``rows`` and the insert timestamps, which a frozen
        MemRowSet no longer changes, so it runs outside the tablet's lock while scans may build the same
        view (either build is complete and identical).
        """
        view = self.sorted_view()
        take_idx = view.rownums
        tss = self._insert_ts[take_idx].astype(np.uint64)
        tbl = self.table().take(pa.array(take_idx))
        tbl = tbl.append_column(KEY_COL, view.keys)
        tbl = tbl.append_column(TS_COL, pa.array(tss, pa.uint64()))
        return tbl.combine_chunks(), self._deltas_at(take_idx, max_seq)

    def late_mutations(self, min_seq: int) -> LateMutations:
        """The mutations applied after a freeze point with their keys' maps, for a column-wise
        carry-over (keys from the flush's own sorted view: a frozen MemRowSet takes no inserts)."""
        tbl = self.table()
        nk = self.info.num_key_columns
        view = self.sorted_view()
        pos_of = np.full(self._num_stored, -1, dtype=np.int64)  # row number -> position in the view
        pos_of[view.rownums] = np.arange(len(view), dtype=np.int64)

        def keys(rownums: np.ndarray) -> pa.Array:
            taken: pa.Array = view.keys.take(pa.array(pos_of[rownums]))
            return taken

        def key_values(rownums: np.ndarray) -> list[tuple[Any, ...]]:
            sub = tbl.take(pa.array(rownums))
            return list(zip(*[sub.column(i).to_pylist() for i in range(nk)], strict=True))

        return LateMutations(self.deltas, min_seq, keys, key_values)

    def mutations_since(self, min_seq: int) -> list[Mutation]:
        """Mutations applied after a freeze point, in application order, with their keys (and key
        values for re-inserts)."""
        if not len(self.deltas):
            return []
        return self.late_mutations(min_seq).as_mutations()


def apply_mutations(
    values: dict[int, Any], mutations: list[Mutation] | None, snap: MvccSnapshot
) -> dict[int, Any] | None:
    """Roll a base row forward through the mutations visible at ``snap``; None when deleted."""
    live = True
    if mutations:
        for m in mutations:
            if not snap.is_visible(m.ts):
                continue
            live = m.live
            if m.changes:
                values.update(m.changes)
    return values if live else None
