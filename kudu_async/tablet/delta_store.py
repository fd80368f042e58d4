"""REDO delta stores for rows already in DiskRowSets: the DeltaMemStore and delta files.

A delta table has one row per mutation: ``_row`` (position in the rowset's base data), ``_ts``,
``_seq`` (application order), ``_live`` (False for a delete), then for each value column its new value
and a ``_set_<name>`` flag (partial updates set only some columns). Delta files are such tables written
as Arrow IPC files; the DeltaMemStore builds the same table on demand, so scans apply in-memory and
on-disk deltas with one vectorised routine (:func:`apply_deltas`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.tablet.memrowset import MUTATION_OVERHEAD_BYTES, Mutation
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import TS_COL, SchemaInfo

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
    info: SchemaInfo, table: pa.Table, keys: list[bytes]
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


class DeltaMemStore:
    """In-memory REDO mutations of one DiskRowSet, by base row position; mutated under the tablet lock."""

    def __init__(self, info: SchemaInfo) -> None:
        self.info = info
        self.items: list[tuple[int, Mutation]] = []
        self.by_row: dict[int, list[Mutation]] = {}
        self.min_log_index: int | None = None
        self.min_ts: int | None = None
        self.created_at: float | None = None
        self._mem = 0
        self._table: pa.Table | None = None

    def __len__(self) -> int:
        return len(self.items)

    def memory_bytes(self) -> int:
        return self._mem

    def add(self, row: int, m: Mutation) -> None:
        self.items.append((row, m))
        self.by_row.setdefault(row, []).append(m)
        self._mem += MUTATION_OVERHEAD_BYTES + (len(m.changes) * 16 if m.changes else 0)
        if self.min_log_index is None or m.log_index < self.min_log_index:
            self.min_log_index = m.log_index
        if self.min_ts is None or m.ts < self.min_ts:
            self.min_ts = m.ts
        self._table = None

    def to_table(self) -> pa.Table:
        if self._table is None:
            self._table = mutations_to_table(self.info, self.items)
        return self._table


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
