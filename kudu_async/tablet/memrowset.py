"""MemRowSet: the in-memory, key-ordered store that takes new inserts.

Rows are kept as a reference into the Arrow batches they arrived in (inserts never copy values into
Python objects): a dict from encoded primary key to row number, plus a sorted key index. Updates,
deletes and re-inserts are appended to the row's mutation chain with their timestamps; nothing is
updated in place. Per-row Python (mutation chains) is confined here, as the design allows.

Thread-safety: the tablet mutates a MemRowSet only under its component lock; a frozen MemRowSet being
flushed can still receive mutations (recorded with sequence numbers at or above the freeze point so the
flush can carry them over to the new DiskRowSets).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sortedcontainers import SortedList

from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import KEY_COL, TS_COL, SchemaInfo

ROW_OVERHEAD_BYTES = 250
MUTATION_OVERHEAD_BYTES = 120


@dataclass(slots=True)
class Mutation:
    """One REDO change to a row: ``live`` False is a delete; a re-insert carries every value column."""

    ts: int
    seq: int
    live: bool
    changes: dict[int, Any] | None
    log_index: int
    key: bytes
    reinsert: bool = False
    key_values: tuple[Any, ...] | None = None  # re-inserts only, in memory only


@dataclass(slots=True)
class MRSRow:
    """A view of one MemRowSet row (made on demand by :meth:`MemRowSet.get`)."""

    insert_ts: int
    rownum: int
    mutations: list[Mutation] | None = None

    def latest_live(self) -> bool:
        return self.mutations[-1].live if self.mutations else True

    def max_ts(self) -> int:
        return self.mutations[-1].ts if self.mutations else self.insert_ts


class MemRowSet:
    """Encoded key -> row version chain; see the module docstring.

    Per row only a dict entry key -> row number: insert timestamps live in one numpy array indexed
    by row number and mutation chains in a second dict holding just the rows that have any, so a
    bulk insert creates no Python object per row.
    """

    def __init__(self, info: SchemaInfo, mrs_id: int) -> None:
        self.info = info
        self.id = mrs_id
        self.rows: dict[bytes, int] = {}  # key -> row number in the stored batches
        self._muts: dict[bytes, list[Mutation]] = {}  # mutation chains of the rows that have any
        self._insert_ts = np.full(1024, -1, dtype=np.int64)  # by row number (-1: not inserted)
        self._index = SortedList()
        self._pending: list[bytes] = []  # inserted keys not yet in the sorted index (bulk-merged lazily)
        self._batches: list[pa.RecordBatch] = []
        self._num_stored = 0
        self._mem = 0
        self.min_log_index: int | None = None
        self.max_log_index = 0
        self.min_ts: int | None = None
        self.created_at: float | None = None
        self.retired = False
        self._table: pa.Table | None = None

    def __len__(self) -> int:
        return len(self.rows)

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
        self._num_stored += batch.num_rows
        if self._num_stored > len(self._insert_ts):
            grown = np.full(max(self._num_stored, 2 * len(self._insert_ts)), -1, dtype=np.int64)
            grown[: len(self._insert_ts)] = self._insert_ts
            self._insert_ts = grown
        self._mem += batch.nbytes
        self._table = None
        return base

    def sorted_keys(self) -> SortedList:
        """The key index; pending keys are merged in bulk first (one sort instead of many inserts)."""
        if self._pending:
            self._index.update(self._pending)
            self._pending = []
        return self._index

    def insert(self, key: bytes, rownum: int, ts: int, log_index: int) -> None:
        self.rows[key] = rownum
        self._insert_ts[rownum] = ts
        self._pending.append(key)
        self._mem += ROW_OVERHEAD_BYTES + len(key)
        self._note(ts, log_index)

    def insert_many(self, keys: list[bytes], rownums: range | list[int], ts: int, log_index: int) -> None:
        """Insert new keys in bulk (the common all-insert batch): C-level dict and numpy updates."""
        self.rows.update(zip(keys, rownums, strict=True))
        if isinstance(rownums, range) and rownums.step == 1:
            self._insert_ts[rownums.start : rownums.stop] = ts
        else:
            self._insert_ts[np.asarray(rownums, dtype=np.int64)] = ts
        self._pending.extend(keys)
        self._mem += len(keys) * ROW_OVERHEAD_BYTES + sum(map(len, keys))
        self._note(ts, log_index)

    def get(self, key: bytes) -> MRSRow | None:
        rownum = self.rows.get(key)
        if rownum is None:
            return None
        return MRSRow(int(self._insert_ts[rownum]), rownum, self._muts.get(key))

    def latest_of(self, keys: list[bytes], rownums: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(timestamp of the last change, live now) of many rows this MemRowSet holds."""
        ts = self._insert_ts[np.asarray(rownums, dtype=np.int64)]
        live = np.ones(len(keys), dtype=bool)
        if self._muts:
            chains = list(map(self._muts.get, keys))
            for j in np.flatnonzero(np.fromiter(map(bool, chains), dtype=bool, count=len(keys))).tolist():
                last = chains[j][-1]  # type: ignore[index]
                ts[j], live[j] = last.ts, last.live
        return ts, live

    def mutate(self, row: MRSRow, m: Mutation) -> None:
        """Append ``m`` to the chain of ``row`` (a view from :meth:`get`; ``m.key`` is its key)."""
        chain = self._muts.get(m.key)
        if chain is None:
            chain = self._muts[m.key] = [m]
        else:
            chain.append(m)
        row.mutations = chain
        self._mem += MUTATION_OVERHEAD_BYTES + (len(m.changes) * 16 if m.changes else 0)
        self._note(m.ts, m.log_index)

    def table(self) -> pa.Table:
        """All stored rows (including never-visible ones) as one table indexed by row number."""
        if self._table is None:
            self._table = (
                pa.Table.from_batches(self._batches) if self._batches else self.info.arrow.empty_table()
            )
        return self._table

    # -- reading ---------------------------------------------------------------------------------

    def _keys_in_range(
        self, lower: bytes | None, upper: bytes | None, lower_exclusive: bool = False
    ) -> Iterator[bytes]:
        return self.sorted_keys().irange(lower, upper, inclusive=(not lower_exclusive, False))

    def visible_row(self, row: MRSRow, snap: MvccSnapshot) -> dict[int, Any] | None:
        """Column index -> value of the row as of ``snap``, or None when not live then."""
        if not snap.is_visible(row.insert_ts):
            return None
        tbl = self.table()
        values = {i: tbl.column(i)[row.rownum].as_py() for i in range(len(self.info.names))}
        return apply_mutations(values, row.mutations, snap)

    def _chains(self, keys: list[bytes]) -> tuple[np.ndarray, list[list[Mutation] | None]]:
        """Positions in ``keys`` of the rows with a mutation chain, and every key's chain (or None)."""
        if not self._muts:
            return np.zeros(0, dtype=np.int64), []
        chains = list(map(self._muts.get, keys))
        return np.flatnonzero(np.fromiter(map(bool, chains), dtype=bool, count=len(keys))), chains

    def materialize(
        self,
        snap: MvccSnapshot,
        lower: bytes | None,
        upper: bytes | None,
        lower_exclusive: bool = False,
    ) -> pa.Table:
        """Rows live at ``snap`` in ``[lower, upper)`` in key order, with ``_key`` and ``_ts``.

        Rows with no visible mutation are gathered by one vectorised ``take``; only mutated rows are
        rebuilt in Python. Must be called under the tablet's component lock.
        """
        index = self.sorted_keys()
        lo = 0 if lower is None else (index.bisect_right if lower_exclusive else index.bisect_left)(lower)
        hi = len(index) if upper is None else index.bisect_left(upper)
        keys: list[bytes] = index[lo:hi] if hi > lo else []
        n = len(keys)
        rownums = np.fromiter(map(self.rows.__getitem__, keys), dtype=np.int64, count=n)
        tss = self._insert_ts[rownums].astype(np.uint64)
        keep = snap.visible_mask(pa.array(tss)).to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
        patched: list[tuple[int, dict[int, Any]]] = []
        mutated, chains = self._chains(keys)
        for j in mutated.tolist():  # per-row Python only for mutated rows
            if not keep[j]:
                continue
            visible = [m for m in chains[j] if snap.is_visible(m.ts)]
            if not visible:
                continue
            base = {i: self.table().column(i)[int(rownums[j])].as_py() for i in range(len(self.info.names))}
            vals = apply_mutations(base, visible, MvccSnapshot.everything())
            if vals is None:
                keep[j] = False
            else:
                patched.append((j, vals))
        tbl = self.table().take(pa.array(rownums))
        if patched:
            cols = []
            positions = np.array([p for p, _ in patched], dtype=np.int64)
            idx = np.arange(n, dtype=np.int64)
            idx[positions] = n + np.arange(len(patched))
            for i, field in enumerate(self.info.arrow):
                repl = pa.array([vals[i] for _, vals in patched], field.type)
                col = pa.concat_arrays([tbl.column(i).combine_chunks(), repl]).take(pa.array(idx))
                cols.append(col)
            tbl = pa.Table.from_arrays(cols, schema=self.info.arrow)
        tbl = tbl.append_column(KEY_COL, pa.array(keys, pa.binary()))
        tbl = tbl.append_column(TS_COL, pa.array(tss, pa.uint64()))
        return tbl if keep.all() else tbl.filter(pa.array(keep))

    def flush_input(self, max_seq: int) -> tuple[pa.Table, list[tuple[int, Mutation]]]:
        """The frozen content for a flush: base rows in key order plus their REDO mutations.

        Base rows are the rows as first inserted (``_ts`` = insert timestamp); every mutation with a
        sequence number below ``max_seq`` is returned with the row's position in the base table.
        """
        keys = list(self.sorted_keys())
        take_idx = np.fromiter(map(self.rows.__getitem__, keys), dtype=np.int64, count=len(keys))
        tss = self._insert_ts[take_idx].astype(np.uint64)
        tbl = self.table().take(pa.array(take_idx))
        tbl = tbl.append_column(KEY_COL, pa.array(keys, pa.binary()))
        tbl = tbl.append_column(TS_COL, pa.array(tss, pa.uint64()))
        deltas: list[tuple[int, Mutation]] = []
        mutated, chains = self._chains(keys)
        for pos in mutated.tolist():
            deltas.extend((pos, m) for m in chains[pos] if m.seq < max_seq)
        return tbl.combine_chunks(), deltas

    def mutations_since(self, min_seq: int) -> list[Mutation]:
        """Mutations applied after a freeze point, in application order (for carry-over)."""
        out = [m for chain in self._muts.values() for m in chain if m.seq >= min_seq]
        out.sort(key=lambda m: m.seq)
        return out


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
