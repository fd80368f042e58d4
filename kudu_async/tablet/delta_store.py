"""REDO delta stores for rows already in DiskRowSets: the DeltaMemStore and delta files.

A delta table has one row per mutation: ``_row`` (position in the rowset's base data), ``_ts``,
``_seq`` (application order), ``_live`` (False for a delete), then for each value column its new value
and a ``_set_<name>`` flag (partial updates set only some columns). Delta files are such tables written
as Arrow IPC files; the DeltaMemStore builds the same table on demand, so scans apply in-memory and
on-disk deltas with one vectorised routine (:func:`apply_deltas`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.ops import WriteOp
from kudu_async.tablet.schema_info import TS_COL, SchemaInfo

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


ROW_COL = "_row"
SEQ_COL = "_seq"
LIVE_COL = "_live"


def set_col(name: str) -> str:
    return f"_set_{name}"


def delta_schema(info: SchemaInfo) -> pa.Schema:
    fields = [
        pa.field(ROW_COL, pa.uint32()),
        pa.field(TS_COL, pa.uint64()),
        pa.field(SEQ_COL, pa.int64()),
        pa.field(LIVE_COL, pa.bool_()),
    ]
    for i in info.value_indices:
        f = info.arrow.field(i)
        fields.append(pa.field(f.name, f.type, True))
        fields.append(pa.field(set_col(f.name), pa.bool_()))
    return pa.schema(fields)


def mutations_to_table(info: SchemaInfo, items: list[tuple[int, Mutation]]) -> pa.Table:
    """Build a delta table (sorted by row, ts, seq) from in-memory mutations."""
    items = sorted(items, key=lambda it: (it[0], it[1].ts, it[1].seq))
    cols: dict[str, Any] = {
        ROW_COL: pa.array([r for r, _ in items], pa.uint32()),
        TS_COL: pa.array([m.ts for _, m in items], pa.uint64()),
        SEQ_COL: pa.array([m.seq for _, m in items], pa.int64()),
        LIVE_COL: pa.array([m.live for _, m in items], pa.bool_()),
    }
    for i in info.value_indices:
        f = info.arrow.field(i)
        vals = [m.changes.get(i) if m.changes else None for _, m in items]
        sets = [bool(m.changes) and i in m.changes for _, m in items]  # type: ignore[operator]
        cols[f.name] = pa.array(vals, f.type)
        cols[set_col(f.name)] = pa.array(sets, pa.bool_())
    return pa.table(cols, schema=delta_schema(info))


def delta_rows_to_mutations(
    info: SchemaInfo, table: pa.Table, keys: list[bytes] | dict[int, bytes]
) -> list[tuple[int, Mutation]]:
    """Turn a delta table back into mutations (row -> key through ``keys``); used by compaction."""
    out: list[tuple[int, Mutation]] = []
    if table.num_rows == 0:
        return out
    d = table.to_pydict()
    for j in range(table.num_rows):
        changes = {i: d[info.names[i]][j] for i in info.value_indices if d[set_col(info.names[i])][j]}
        row = d[ROW_COL][j]
        out.append(
            (
                row,
                Mutation(
                    d[TS_COL][j],
                    d[SEQ_COL][j],
                    d[LIVE_COL][j],
                    changes or None,
                    0,
                    keys[row],
                    reinsert=bool(d[LIVE_COL][j]) and len(changes) == len(info.value_indices),
                ),
            )
        )
    return out


def delta_chunk(
    info: SchemaInfo,
    op: WriteOp,
    idx: np.ndarray,
    positions: np.ndarray,
    live: np.ndarray,
    whole_row: np.ndarray,
    ts: int,
    seqs: np.ndarray,
) -> tuple[pa.Table, int]:
    """The delta table of many mutations of one write batch at once, column-wise, and its memory
    estimate (what :meth:`DeltaMemStore.add` would count for them one by one).

    Row ``j`` is row ``idx[j]`` of ``op`` applied to base row ``positions[j]``: a delete when not
    ``live[j]``, else a re-insert setting every value column when ``whole_row[j]``, else an update
    setting the columns ``op.set_columns`` marks (all when None).
    """
    batch, set_columns = op.rows, op.set_columns
    m = len(idx)
    take = pa.array(idx, pa.int64())
    cols: dict[str, Any] = {
        ROW_COL: pa.array(positions.astype(np.uint32)),
        TS_COL: pa.array(np.full(m, ts, dtype=np.uint64)),
        SEQ_COL: pa.array(seqs.astype(np.int64)),
        LIVE_COL: pa.array(live),
    }
    n_set = 0
    for i in info.value_indices:
        f = info.arrow.field(i)
        sel = live if set_columns is None else live & (whole_row | set_columns[idx, i])
        n_set += int(np.count_nonzero(sel))
        vals = batch.column(i).take(take)
        if not sel.all():
            vals = pc.if_else(pa.array(sel), vals, pa.scalar(None, f.type))
        cols[f.name] = vals
        cols[set_col(f.name)] = pa.array(sel)
    return pa.table(cols, schema=delta_schema(info)), m * MUTATION_OVERHEAD_BYTES + 16 * n_set


class DeltaMemStore:
    """In-memory REDO mutations of one DiskRowSet, by base row position; mutated under the tablet lock.

    Column-wise: a write batch's mutations of this rowset arrive as one delta table (``add_chunk``);
    only mutations carried over by a flush or compaction arrive one by one (``add``).

    A frozen MemRowSet's store is read by its flush outside the tablet lock while writes to its keys
    still add chunks, so the cached sorted table is filled and invalidated under a lock of its own: a
    table built from the chunks before an add must never be cached after it.
    """

    def __init__(self, info: SchemaInfo) -> None:
        self.info = info
        self._chunks: list[tuple[pa.Table, np.ndarray, int]] = []  # (deltas, re-insert flags, log index)
        self._singles: list[tuple[int, Mutation]] = []
        self._n = 0
        self.min_log_index: int | None = None
        self.min_ts: int | None = None
        self.created_at: float | None = None
        self._mem = 0
        self._table: pa.Table | None = None
        self._cache_lock = threading.Lock()
        self._version = 0  # bumped by every add: a cache built from an older version is dropped

    def __len__(self) -> int:
        return self._n

    def memory_bytes(self) -> int:
        return self._mem

    def _note(self, log_index: int, ts: int) -> None:
        if self.min_log_index is None or log_index < self.min_log_index:
            self.min_log_index = log_index
        if self.min_ts is None or ts < self.min_ts:
            self.min_ts = ts

    def add(self, row: int, m: Mutation) -> None:
        with self._cache_lock:
            self._singles.append((row, m))
            self._n += 1
            self._version += 1
            self._table = None
        self._mem += MUTATION_OVERHEAD_BYTES + (len(m.changes) * 16 if m.changes else 0)
        self._note(m.log_index, m.ts)

    def add_chunk(self, table: pa.Table, reinsert: np.ndarray, log_index: int, ts: int, nbytes: int) -> None:
        """Mutations of one write batch (from :func:`delta_chunk`), all at ``ts`` and ``log_index``."""
        with self._cache_lock:
            self._chunks.append((table, reinsert, log_index))
            self._n += table.num_rows
            self._version += 1
            self._table = None
        self._mem += nbytes
        self._note(log_index, ts)

    def to_table(self) -> pa.Table:
        """Every mutation as one delta table sorted by (row, ts, seq)."""
        with self._cache_lock:
            if self._table is not None:
                return self._table
            version, chunks, singles = self._version, list(self._chunks), list(self._singles)
        parts = [c[0] for c in chunks]
        if singles or not parts:
            parts.append(mutations_to_table(self.info, singles))
        t = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        t = t.sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])
        with self._cache_lock:
            if self._version == version:
                self._table = t
        return t

    def mutations_of(self, row: int) -> list[Mutation]:
        """The mutations of one base row in application order (point lookups). Each chunk is
        filtered on its own, so a lookup never pays for re-sorting the whole store."""
        out = [m for r, m in self._singles if r == row]
        key = pa.scalar(row, pa.uint32())
        for table, _, log_index in self._chunks:
            sub = table.filter(pc.equal(table.column(ROW_COL), key))
            for _, m in delta_rows_to_mutations(self.info, sub, {row: b""}):
                m.log_index = log_index
                out.append(m)
        out.sort(key=lambda m: (m.ts, m.seq))
        return out

    def late_parts(
        self, min_seq: int = 0, max_seq: int | None = None
    ) -> tuple[list[tuple[pa.Table, np.ndarray, int]], list[tuple[int, Mutation]]]:
        """The delta chunks (as (table, re-insert flags, log index), each cut to its mutations with a
        sequence number in ``[min_seq, max_seq)``) and the single mutations in that range."""
        top = max_seq if max_seq is not None else 1 << 62
        singles = [(r, m) for r, m in self._singles if min_seq <= m.seq < top]
        chunks: list[tuple[pa.Table, np.ndarray, int]] = []
        for table, reinsert, log_index in list(self._chunks):
            if min_seq > 0 or max_seq is not None:
                seq = table.column(SEQ_COL)
                late = pc.greater_equal(seq, pa.scalar(min_seq, pa.int64()))
                if max_seq is not None:
                    late = pc.and_(late, pc.less(seq, pa.scalar(max_seq, pa.int64())))
                if not pc.any(late).as_py():
                    continue
                if not pc.all(late).as_py():
                    mask = late.to_numpy(zero_copy_only=False)
                    table, reinsert = table.filter(late), np.asarray(reinsert)[mask]
            chunks.append((table, np.asarray(reinsert), log_index))
        return chunks, singles

    def mutations(
        self,
        keys_of: Callable[[np.ndarray], list[bytes]],
        key_values_of: Callable[[np.ndarray], list[tuple[Any, ...]]],
        min_seq: int = 0,
    ) -> list[tuple[int, Mutation]]:
        """The mutations with a sequence number of at least ``min_seq`` as :class:`Mutation` s with their
        keys (and key values for re-inserts), for carrying over mutations that arrived during a flush or
        compaction; ``keys_of``/``key_values_of`` map base row positions to encoded keys / key column
        values. Rows are selected in Arrow first: only the (usually few) late ones become objects."""
        chunks, out = self.late_parts(min_seq)
        for table, reinsert, log_index in chunks:
            rows = table.column(ROW_COL).to_numpy().astype(np.int64)
            out.extend(chunk_mutations(self.info, table, reinsert, log_index, keys_of(rows), key_values_of))
        return out


def chunk_memory_bytes(info: SchemaInfo, table: pa.Table) -> int:
    """What a delta chunk counts toward its store's memory (as :func:`delta_chunk` estimates it)."""
    n_set = sum(pc.sum(table.column(set_col(info.names[i]))).as_py() or 0 for i in info.value_indices)
    return int(table.num_rows * MUTATION_OVERHEAD_BYTES + 16 * n_set)


def chunk_mutations(
    info: SchemaInfo,
    table: pa.Table,
    reinsert: np.ndarray,
    log_index: int,
    keys: list[bytes],
    key_values_of: Callable[[np.ndarray], list[tuple[Any, ...]]],
) -> list[tuple[int, Mutation]]:
    """The rows of one delta chunk (or part of one) as :class:`Mutation` s: ``keys[j]`` is row ``j``'s
    encoded key, ``key_values_of`` gives the key column values of re-inserted base rows."""
    rows = table.column(ROW_COL).to_numpy().astype(np.int64)
    muts = delta_rows_to_mutations(info, table, dict(zip(rows.tolist(), keys, strict=True)))
    re_rows = np.flatnonzero(reinsert)
    kvs = dict(zip(re_rows.tolist(), key_values_of(rows[re_rows]), strict=True)) if len(re_rows) else {}
    out: list[tuple[int, Mutation]] = []
    for j, (_, m) in enumerate(muts):
        m.log_index = log_index
        m.reinsert = bool(reinsert[j])
        m.key_values = kvs.get(j)
        out.append((int(rows[j]), m))
    return out


@dataclass
class LateMutations:
    """The mutations a store received after a flush or compaction froze it (sequence number at least
    ``min_seq``), with the maps from its row positions to encoded keys (an Arrow ``binary`` array) and
    to key column values (for re-inserts)."""

    store: DeltaMemStore
    min_seq: int
    keys_of: Callable[[np.ndarray], pa.Array]
    key_values_of: Callable[[np.ndarray], list[tuple[Any, ...]]]

    def since(self, min_seq: int) -> LateMutations:
        """The same store's mutations from ``min_seq`` on."""
        return LateMutations(self.store, max(self.min_seq, min_seq), self.keys_of, self.key_values_of)

    def as_mutations(self) -> list[Mutation]:
        """Every late mutation as a :class:`Mutation` with its key, in application order."""

        def keys(rows: np.ndarray) -> list[bytes]:
            out: list[bytes] = self.keys_of(rows).to_pylist()
            return out

        muts = [m for _, m in self.store.mutations(keys, self.key_values_of, self.min_seq)]
        muts.sort(key=lambda m: m.seq)
        return muts

    def min_log_index(self) -> int | None:
        chunks, singles = self.store.late_parts(self.min_seq)
        return min([*(c[2] for c in chunks), *(m.log_index for _, m in singles)], default=None)


def _last_per_group(rows: np.ndarray) -> np.ndarray:
    """Mask of the last element of each run of equal values in a sorted array."""
    last = np.ones(len(rows), dtype=bool)
    if len(rows) > 1:
        last[:-1] = rows[:-1] != rows[1:]
    return last


def apply_deltas(
    base: pa.Table, lo: int, deltas: pa.Table | None, snap: MvccSnapshot, value_cols: list[str]
) -> tuple[pa.Table, np.ndarray | None]:
    """Roll base rows ``[lo, lo + n)`` forward through the visible deltas, vectorised.

    Returns the updated table (only ``value_cols`` are patched) and a liveness mask (None when no
    visible delta touched the rows, i.e. all rows live).
    """
    n = base.num_rows
    if deltas is None or deltas.num_rows == 0 or n == 0:
        return base, None
    rowcol = deltas.column(ROW_COL)
    mask = pc.and_(
        pc.greater_equal(rowcol, pa.scalar(lo, pa.uint32())), pc.less(rowcol, pa.scalar(lo + n, pa.uint32()))
    )
    mask = pc.and_(mask, snap.visible_mask(deltas.column(TS_COL)))
    d = deltas.filter(mask)
    if d.num_rows == 0:
        return base, None
    d = d.sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])
    rows = d.column(ROW_COL).to_numpy().astype(np.int64) - lo
    last = _last_per_group(rows)
    live = np.ones(n, dtype=bool)
    live[rows[last]] = d.column(LIVE_COL).to_numpy(zero_copy_only=False)[last]
    for name in value_cols:
        sel = d.column(set_col(name)).to_numpy(zero_copy_only=False)
        if not sel.any():
            continue
        sub_rows = rows[sel]
        sub_last = _last_per_group(sub_rows)
        vals = d.column(name).filter(pa.array(sel)).filter(pa.array(sub_last))
        idx = np.arange(n, dtype=np.int64)
        idx[sub_rows[sub_last]] = n + np.arange(len(vals), dtype=np.int64)
        col = base.column(name)
        merged = pa.concat_arrays([*col.chunks, *vals.chunks]) if col.num_chunks else vals.combine_chunks()
        i = base.schema.get_field_index(name)
        base = base.set_column(i, name, merged.take(pa.array(idx)))
    return base, live
