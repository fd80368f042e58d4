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

from kudu_async.tablet.delta_store import TS_COL, apply_deltas, delta_rows_to_mutations
from kudu_async.tablet.memrowset import Mutation
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import KEY_COL, SchemaInfo


@dataclass
class CompactionInput:
    """A frozen rowset: full base table (all columns, ``_key``, ``_ts``) and every delta it had."""

    base: pa.Table
    deltas: pa.Table | None


def fold_rowset(info: SchemaInfo, inp: CompactionInput, ahm: int) -> tuple[pa.Table, list[Mutation]]:
    """Roll one rowset forward to ``ahm``; returns surviving base rows and the deltas newer than it."""
    base = inp.base
    snap = MvccSnapshot.at(ahm)
    value_cols = [info.names[i] for i in info.value_indices]
    folded, live = apply_deltas(base, 0, inp.deltas, snap, value_cols)
    n = folded.num_rows
    later: list[Mutation] = []
    if inp.deltas is not None and inp.deltas.num_rows:
        newer = inp.deltas.filter(pc.greater(inp.deltas.column(TS_COL), pa.scalar(ahm, pa.uint64())))
        keys = base.column(KEY_COL).to_pylist() if newer.num_rows else []
        later = [
            m
            for _, m in sorted(
                delta_rows_to_mutations(info, newer, keys), key=lambda it: (it[1].ts, it[1].seq)
            )
        ]
    keep = np.ones(n, dtype=bool) if live is None else live.copy()
    # Rows inserted after the AHM are kept untouched (their deltas are all newer than the AHM too).
    inserted_after = pc.greater(folded.column(TS_COL), pa.scalar(ahm, pa.uint64())).to_numpy(
        zero_copy_only=False
    )
    keep |= inserted_after
    dead_keys = set(folded.column(KEY_COL).filter(pa.array(~keep)).to_pylist()) if not keep.all() else set()
    revived: list[dict[str, object]] = []
    if dead_keys and later:
        # A row dead at the AHM but re-inserted later: the re-insert becomes its new base row.
        remaining: list[Mutation] = []
        for m in later:
            if m.key in dead_keys:
                if not m.reinsert:
                    raise AssertionError("mutation of a deleted row that was not a re-insert")
                row: dict[str, object] = {info.names[i]: m.changes[i] for i in info.value_indices}  # type: ignore[index]
                row.update({"__key__": m.key, "__ts__": m.ts})
                revived.append(row)
                dead_keys.discard(m.key)
            else:
                remaining.append(m)
        later = remaining
    out = folded.filter(pa.array(keep))
    if revived:
        key_cols = _key_values(info, inp.base, [r["__key__"] for r in revived])  # type: ignore[misc]
        cols = {}
        for i, f in enumerate(info.arrow):
            vals = key_cols[i] if i < info.num_key_columns else [r[f.name] for r in revived]
            cols[f.name] = pa.array(vals, f.type)
        cols[KEY_COL] = pa.array([r["__key__"] for r in revived], pa.binary())
        cols[TS_COL] = pa.array([r["__ts__"] for r in revived], pa.uint64())
        out = pa.concat_tables([out, pa.table(cols, schema=out.schema)])
    return out, later


def _key_values(info: SchemaInfo, base: pa.Table, keys: list[bytes]) -> list[list[object]]:
    idx = pc.index_in(pa.array(keys, pa.binary()), value_set=base.column(KEY_COL))
    sub = base.take(idx)
    return [sub.column(i).to_pylist() for i in range(info.num_key_columns)]


def merge_rowsets(
    info: SchemaInfo, inputs: list[CompactionInput], ahm: int
) -> tuple[pa.Table, list[tuple[int, Mutation]]]:
    """Fold every input to the AHM and merge them into one key-sorted table plus positioned deltas."""
    tables, muts = [], []
    for inp in inputs:
        t, later = fold_rowset(info, inp, ahm)
        tables.append(t)
        muts.extend(later)
    merged = pa.concat_tables(tables) if tables else info.storage_arrow.empty_table()
    merged = merged.sort_by([(KEY_COL, "ascending")]).combine_chunks()
    if not muts:
        return merged, []
    pos = pc.index_in(pa.array([m.key for m in muts], pa.binary()), value_set=merged.column(KEY_COL))
    if pos.null_count:
        raise AssertionError("a kept delta lost its row during compaction")
    return merged, list(zip(pos.to_pylist(), muts, strict=True))
