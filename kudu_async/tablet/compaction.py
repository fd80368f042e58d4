"""Compactions: folding REDO history older than the ancient history mark and merging rowsets.

One routine serves merging compaction (several overlapping DiskRowSets -> non-overlapping ones) and
major delta compaction (one rowset rewritten with its deltas folded in): every input is rolled forward
to the ancient history mark (AHM), rows dead at the AHM disappear, deltas newer than the AHM are kept
as REDO deltas of the output, and the result is re-sorted by key and cut into ~32 MiB rowsets.
Minor delta compaction only concatenates a rowset's delta files into one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.tablet.delta_store import LIVE_COL, ROW_COL, SEQ_COL, apply_deltas, set_col
from kudu_async.tablet.key_arrays import sort_order
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import KEY_COL, TS_COL, SchemaInfo

POS_COL = "_pos"  # a kept delta's row: its position in the folded (then merged) rows


@dataclass
class CompactionInput:
    """A frozen rowset: full base table (all columns, ``_key``, ``_ts``) and every delta it had."""

    base: pa.Table
    deltas: pa.Table | None


def fold_rowset(info: SchemaInfo, inp: CompactionInput, ahm: int) -> tuple[pa.Table, pa.Table | None]:
    """Roll one rowset forward to ``ahm``; returns surviving base rows and the deltas newer than it
    (a delta table with a ``_pos`` column, the position of each delta's row in the returned rows, or
    None), column-wise."""
    base = inp.base
    snap = MvccSnapshot.at(ahm)
    value_cols = [info.names[i] for i in info.value_indices]
    folded, live = apply_deltas(base, 0, inp.deltas, snap, value_cols)
    n = folded.num_rows
    newer: pa.Table | None = None
    if inp.deltas is not None and inp.deltas.num_rows:
        newer = inp.deltas.filter(pc.greater(inp.deltas.column(TS_COL), pa.scalar(ahm, pa.uint64())))
        if not newer.num_rows:
            newer = None
    keep = np.ones(n, dtype=bool) if live is None else live.copy()
    # Rows inserted after the AHM are kept untouched (their deltas are all newer than the AHM too).
    inserted_after = pc.greater(folded.column(TS_COL), pa.scalar(ahm, pa.uint64())).to_numpy(zero_copy_only=False)
    keep |= inserted_after
    out = folded.filter(pa.array(keep))
    if newer is None:
        return out, None
    pos_of = np.full(n, -1, dtype=np.int64)  # base row -> its position in ``out``
    pos_of[keep] = np.arange(out.num_rows, dtype=np.int64)
    rows = newer.column(ROW_COL).to_numpy().astype(np.int64)
    dead = np.flatnonzero(~keep[rows])
    if len(dead):
        # A row dead at the AHM but re-inserted later: its first later change (by ts, seq) must be a
        # re-insert, which becomes its new base row; the changes after it stay deltas of that row.
        ts = newer.column(TS_COL).to_numpy()
        seq = newer.column(SEQ_COL).to_numpy()
        order = dead[np.lexsort((seq[dead], ts[dead], rows[dead]))]
        first = np.ones(len(order), dtype=bool)
        first[1:] = rows[order][1:] != rows[order][:-1]
        rev = order[first]
        revs = newer.take(pa.array(rev))
        whole = revs.column(LIVE_COL).to_numpy(zero_copy_only=False).copy()
        for name in value_cols:
            whole &= revs.column(set_col(name)).to_numpy(zero_copy_only=False)
        if not whole.all():
            raise AssertionError("mutation of a deleted row that was not a re-insert")
        take_rows = pa.array(rows[rev])
        cols = [
            base.column(i).take(take_rows) if i < info.num_key_columns else revs.column(f.name)
            for i, f in enumerate(info.arrow)
        ]
        cols += [base.column(KEY_COL).take(take_rows), revs.column(TS_COL)]
        pos_of[rows[rev]] = out.num_rows + np.arange(len(rev), dtype=np.int64)
        out = pa.concat_tables([out, pa.Table.from_arrays(cols, schema=out.schema)])
        rest = np.ones(len(rows), dtype=bool)
        rest[rev] = False
        newer = newer.filter(pa.array(rest))
        rows = rows[rest]
        if not newer.num_rows:
            return out, None
    return out, newer.append_column(POS_COL, pa.array(pos_of[rows]))


def merge_rowsets(info: SchemaInfo, inputs: list[CompactionInput], ahm: int) -> tuple[pa.Table, pa.Table | None]:
    """Fold every input to the AHM and merge them into one key-sorted table plus its deltas newer
    than the AHM (a delta table whose ``_row`` is the position in the merged table, or None)."""
    tables, laters = [], []
    start = 0
    for inp in inputs:
        t, later = fold_rowset(info, inp, ahm)
        tables.append(t)
        if later is not None:
            # Position in the concatenation of the folded inputs.
            shifted = later.column(POS_COL).to_numpy() + start
            laters.append(later.set_column(later.schema.get_field_index(POS_COL), POS_COL, pa.array(shifted)))
        start += t.num_rows
    merged = pa.concat_tables(tables) if tables else info.storage_arrow.empty_table()
    keys = merged.column(KEY_COL)
    keys = keys.chunk(0) if keys.num_chunks == 1 else keys.combine_chunks()
    order = sort_order(keys)
    merged = merged.take(pa.array(order)).combine_chunks()
    if not laters:
        return merged, None
    later = pa.concat_tables(laters)
    # Where each concatenated row went in the sort: the inverse permutation, no key hashing.
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order), dtype=np.int64)
    concat_pos = later.column(POS_COL).to_numpy()
    if (concat_pos < 0).any():
        raise AssertionError("a kept delta lost its row during compaction")
    pos = where[concat_pos].astype(np.uint32)
    later = later.drop_columns([POS_COL])
    return merged, later.set_column(later.schema.get_field_index(ROW_COL), ROW_COL, pa.array(pos))
