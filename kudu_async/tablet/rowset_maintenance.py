"""Rowset maintenance of a tablet: flushes of the MemRowSet and DeltaMemStores, rowset and delta
compactions, and the tablet metadata writes that commit them.

Each op freezes its inputs under the component lock, writes its files outside it (in a worker thread),
then commits the new metadata and swaps the outputs in under the lock; mutations that arrived
meanwhile are carried over to the rowsets that now hold their keys. The metadata records the replay
start: the last log index whose effects are all in durable files. Ops on one tablet run one at a time
(the maintenance lock).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.fs.tablet_metadata import TabletMetadata, write_tablet_metadata
from kudu_async.tablet.compaction import CompactionInput, merge_rowsets
from kudu_async.tablet.components import TabletComponents
from kudu_async.tablet.delta_store import (
    ROW_COL,
    SEQ_COL,
    DeltaMemStore,
    LateMutations,
    chunk_memory_bytes,
    chunk_mutations,
)
from kudu_async.tablet.diskrowset import DiskRowSet, write_delta_block, write_rowsets
from kudu_async.tablet.key_arrays import KeyBatch
from kudu_async.tablet.maintenance_worker import discard_spool, prepare_rowset_write
from kudu_async.tablet.memrowset import MemRowSet, Mutation
from kudu_async.tablet.schema_info import KEY_COL, TS_COL

LateChunk = tuple[LateMutations, pa.Table, np.ndarray, int]  # a store's delta chunk (or rows of one)
# A flush or compaction catches the mutations that arrived while it ran up outside the lock at most this
# many times, and stops once a round had at most this many rows: each round lasts as long as its backlog
# took to arrive divided by how much faster the catch-up is than the writes.
CATCH_UP_ROUNDS = 4
CATCH_UP_DONE_ROWS = 10_000


class RowSetMaintenance:
    """Flushes and compactions of a tablet's components, and the metadata writes that commit them."""

    def __init__(self, components: TabletComponents) -> None:
        self._c = components

    def replay_start_locked(self, drop_mrs: MemRowSet | None = None, drop_frozen_of: Sequence[DiskRowSet] = ()) -> int:
        """Last log index whose effects are all in durable files (bootstrap replays after it)."""
        mins = [m.min_log_index for m in self._c.memrowsets() if m.min_log_index is not None and m is not drop_mrs]
        for d in self._c.drs:
            stores = [d.dms] if d in drop_frozen_of else [d.dms, *d.flushing_dms]
            mins.extend(s.min_log_index for s in stores if s.min_log_index is not None)
        return (min(mins) - 1) if mins else self._c.last_applied_index

    def earliest_needed_log_index(self) -> int:
        """Log anchor: WAL entries from this index on must be kept for bootstrap."""
        with self._c.lock:
            return self.replay_start_locked() + 1

    def _effective_ahm(self) -> int:
        ahm = self._c.ancient_history_mark()
        with self._c.lock:
            mins = [m.min_ts for m in self._c.memrowsets() if m.min_ts is not None]
            for d in self._c.drs:
                mins.extend(s.min_ts for s in [d.dms, *d.flushing_dms] if s.min_ts is not None)
        inflight = self._c.mvcc.min_in_flight()
        if inflight is not None:
            mins.append(inflight)
        return min([ahm, *[m - 1 for m in mins]])

    def write_metadata_locked(
        self,
        rowsets: list[DiskRowSet] | None = None,
        *,
        drop_mrs: MemRowSet | None = None,
        drop_frozen_of: Sequence[DiskRowSet] = (),
        extra_min_index: int | None = None,
    ) -> None:
        """Commit ``rowsets`` (default: the current ones) durably, with the replay start index.

        ``drop_mrs``/``drop_frozen_of`` name in-memory stores whose content those rowsets now hold;
        ``extra_min_index`` is the oldest log index of mutations about to be carried over.
        """
        rowsets = self._c.drs if rowsets is None else rowsets
        replay_start = self.replay_start_locked(drop_mrs, drop_frozen_of)
        if extra_min_index is not None:
            replay_start = min(replay_start, extra_min_index - 1)
        meta = TabletMetadata(
            tablet_id=self._c.tablet_id,
            schema=self._c.info.to_dict(),
            rowsets=[d.meta for d in rowsets],
            last_flushed_log_index=replay_start,
            next_rowset_id=self._c.next_rowset_id,
            schema_version=self._c.schema_version,
            added_columns=self._c.added_columns,
        )
        meta = TabletMetadata.from_json(meta.to_json())  # deep copy: later in-place changes stay out
        write_tablet_metadata(self._c.tablet_dir, meta, sync=self._c.options.sync)
        self._c.last_flushed_index = meta.last_flushed_log_index

    def _carry_over_locked(self, muts: Iterable[Mutation]) -> None:
        """Re-apply mutations that arrived during a flush/compaction to the rowsets that now hold the key."""
        for m in muts:
            mem = self._c.locate_in_memory(m.key)
            disk = None if mem is not None else self._c.locate_on_disk(m.key)
            if mem is not None:
                mem[0].mutate(mem[1], m)
            elif disk is not None:
                disk[0].mutate(disk[1], m)
            elif m.reinsert:
                self._insert_values_locked(m)
            else:
                raise AssertionError("carried-over mutation of a key that no rowset holds")

    def _catch_up(
        self, sources: Sequence[LateMutations], outputs: Sequence[DiskRowSet]
    ) -> tuple[list[LateMutations], list[LateChunk]]:
        """Before the swap, outside the component lock: add the late mutations that arrived so far to
        the ``outputs`` (invisible to writers and readers until swapped in), again for what arrived
        meanwhile while that shrinks, so the carry-over under the lock has only the last few write
        batches. Returns the sources narrowed to what is left and the chunk rows whose keys no output
        holds (carried over under the lock, before the rest)."""
        left, deferred = list(sources), list[LateChunk]()
        for _ in range(CATCH_UP_ROUNDS):
            with self._c.lock:
                upto = self._c.next_seq  # every mutation below it is already in its store
                parts = [(src, *src.store.late_parts(src.min_seq, upto)) for src in left]
            if any(singles for _, _, singles in parts):
                break  # single mutations keep the one-by-one order: the rest all under the lock
            chunks = [(src, t, r, li) for src, ch, _ in parts for t, r, li in ch if t.num_rows]
            chunks.sort(key=lambda c: int(c[1].column(SEQ_COL)[0].as_py()))
            for src, table, reinsert, log_index in chunks:
                keys = src.keys_of(table.column(ROW_COL).to_numpy().astype(np.int64))
                rest = self._mutate_on_disk_locked(table, reinsert, log_index, keys, rowsets=outputs)
                if len(rest):
                    deferred.append((src, table.take(pa.array(rest)), reinsert[rest], log_index))
            left = [src.since(upto) for src in left]
            if sum(c[1].num_rows for c in chunks) <= CATCH_UP_DONE_ROWS:
                break
        return left, deferred

    def _carry_over_late_locked(self, sources: Sequence[LateMutations], deferred: Sequence[LateChunk] = ()) -> None:
        """Re-apply the mutations that arrived during a flush/compaction, column-wise: each write batch's
        delta chunk is split by the DiskRowSet that now holds each key (one vectorised key probe per
        rowset) and added to it as a chunk. Only keys no DiskRowSet holds (re-inserts of rows the
        compaction dropped) and stores holding single mutations go through :meth:`_carry_over_locked`."""
        chunks: list[LateChunk] = []
        singles: list[Mutation] = []
        for src in sources:
            parts, ones = src.store.late_parts(src.min_seq)
            if ones:  # single mutations: keep this store's application order exactly, one by one
                singles.extend(src.as_mutations())
                continue
            chunks.extend((src, t, r, li) for t, r, li in parts if t.num_rows)
        if singles:
            self._carry_over_locked(sorted(singles, key=lambda m: m.seq))
        # Stores hold disjoint keys; one store's chunks go in their arrival (sequence) order, after the
        # rows a catch-up left (all older).
        chunks.sort(key=lambda c: int(c[1].column(SEQ_COL)[0].as_py()))
        for src, table, reinsert, log_index in [*deferred, *chunks]:
            rows = table.column(ROW_COL).to_numpy().astype(np.int64)
            keys = src.keys_of(rows)
            rest = self._mutate_on_disk_locked(table, reinsert, log_index, keys)
            if len(rest):
                sub = table.take(pa.array(rest))
                sub_keys: list[bytes] = keys.take(pa.array(rest)).to_pylist()
                muts = chunk_mutations(self._c.info, sub, reinsert[rest], log_index, sub_keys, src.key_values_of)
                self._carry_over_locked(m for _, m in muts)

    def _mutate_on_disk_locked(
        self,
        table: pa.Table,
        reinsert: np.ndarray,
        log_index: int,
        keys: pa.Array,
        rowsets: Sequence[DiskRowSet] | None = None,
    ) -> np.ndarray:
        """Add the rows of a delta chunk whose keys a DiskRowSet holds (and no MemRowSet) to those
        rowsets as chunks; returns the rows left (positions in ``table``). With ``rowsets`` (outputs of
        an op not yet swapped in, so no lock is needed) only those are probed."""
        n = table.num_rows
        kb = KeyBatch(arr=keys)
        placed = np.zeros(n, dtype=bool)
        if rowsets is None:
            for m in self._c.memrowsets():
                placed |= m.rownums_of(kb) >= 0  # held in memory: the one-by-one path finds it there first
        in_memory = placed.copy()
        bounds = pc.min_max(keys)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        ts = int(table.column(TS_COL)[0].as_py())
        for d in self._c.drs if rowsets is None else rowsets:
            if d.max_key < lo or d.min_key > hi:
                continue
            inside = pc.and_(
                pc.greater_equal(keys, pa.scalar(d.min_key, pa.binary())),
                pc.less_equal(keys, pa.scalar(d.max_key, pa.binary())),
            )
            cand = np.flatnonzero(inside.to_numpy(zero_copy_only=False) & ~placed)
            if not len(cand):
                continue
            pos = d.find_rows(kb, cand)
            hit = pos >= 0
            if not hit.any():
                continue
            idx, at = cand[hit], pos[hit]
            sub = table.take(pa.array(idx))
            sub = sub.set_column(sub.schema.get_field_index(ROW_COL), ROW_COL, pa.array(at.astype(np.uint32)))
            d.mutate_batch(at, sub, reinsert[idx], log_index, ts, chunk_memory_bytes(self._c.info, sub))
            placed[idx] = True
        return np.flatnonzero(~placed | in_memory)

    def _insert_values_locked(self, m: Mutation) -> None:
        key_vals = m.key_values
        if key_vals is None:
            raise AssertionError("re-insert mutation without its key values")
        cols = [
            pa.array(
                [key_vals[i] if i < self._c.info.num_key_columns else m.changes[i]],  # type: ignore[index]
                f.type,
            )
            for i, f in enumerate(self._c.info.arrow)
        ]
        rownum = self._c.mrs.add_batch(pa.RecordBatch.from_arrays(cols, schema=self._c.info.arrow))
        self._c.mrs.insert(m.key, rownum, m.ts, m.log_index)

    # -- flush -------------------------------------------------------------------------------------

    def _flush_mrs(self) -> bool:
        """Flush the MemRowSet to DiskRowSets (run in a worker thread). False if nothing to do.

        A new MemRowSet takes writes at once; the old one stays readable until the new rowsets are
        swapped in under the component lock, and the metadata write commits the flush.
        """
        with self._c.lock:
            if self._c.mrs_flush_running:
                return False
            if self._c.flushing_mrs:
                old = self._c.flushing_mrs[0]  # a flush of it failed earlier: retry it first
            elif len(self._c.mrs):
                old = self._c.mrs
                self._c.mrs = self._c.new_mrs()
                self._c.flushing_mrs.append(old)
            else:
                return False
            self._c.mrs_flush_running = True
            freeze_seq = self._c.take_seqs(1)
            first_id = self._c.next_rowset_id
            self._c.next_rowset_id += 1000
        new_ids: list[str] = []
        try:
            table, deltas = old.flush_input(freeze_seq)
            new_drs, new_ids, written = self._write_rowsets(table, deltas, first_id)
            late = old.late_mutations(freeze_seq)
            rest, deferred = self._catch_up([late], new_drs)
            with self._c.lock:
                # Commit point first: if it fails nothing in memory has changed. Mutations caught up
                # into the outputs are in memory only: the replay start stays below all of them.
                self.write_metadata_locked([*self._c.drs, *new_drs], drop_mrs=old, extra_min_index=late.min_log_index())
                self._c.flushing_mrs.remove(old)
                old.retired = True
                self._c.drs.extend(new_drs)
                self._carry_over_late_locked(rest, deferred)
                self._c.stats["flushes"] += 1
                self._c.stats["bytes_flushed"] += written
            new_ids = []
            return True
        except BaseException:
            # Never referenced by committed metadata. The frozen MemRowSet stays readable (and
            # writable for its keys) in flushing_mrs; the next flush_mrs retries it.
            self._c.bm.delete_blocks(new_ids)
            raise
        finally:
            with self._c.lock:
                self._c.mrs_flush_running = False

    def _flush_dms(self, drs_id: int | None = None) -> bool:
        """Flush the DeltaMemStore of one rowset (the largest if None) to a delta file."""
        with self._c.lock:
            cands = [d for d in self._c.drs if len(d.dms) and not d.busy and (drs_id is None or d.id == drs_id)]
            if not cands:
                return False
            d = max(cands, key=lambda x: x.dms.memory_bytes())
            d.busy = True
            frozen = d.dms
            d.dms = DeltaMemStore(self._c.info)
            d.flushing_dms.append(frozen)
        try:
            block = write_delta_block(self._c.bm, frozen.to_table(), self._c.info)
            written = self._blocks_bytes([block])
            table = d.open_block(block)
            with self._c.lock:
                d.delta_tables.append(table)
                d.meta.delta_blocks.append(block)
                d.flushing_dms.remove(frozen)
                self.write_metadata_locked()
                self._c.stats["flushes"] += 1
                self._c.stats["bytes_flushed"] += written
            return True
        finally:
            d.busy = False

    def flush_mrs(self) -> bool:
        """Flush the MemRowSet to DiskRowSets (run in a worker thread). False if nothing to do.

        A new MemRowSet takes writes at once; the old one stays readable until the new rowsets are
        swapped in under the component lock, and the metadata write commits the flush.
        """
        with self._c.maint_lock:
            return self._flush_mrs()

    def flush_dms(self, drs_id: int | None = None) -> bool:
        """Flush the DeltaMemStore of one rowset (the largest if None) to a delta file."""
        with self._c.maint_lock:
            return self._flush_dms(drs_id)

    def compact_rowsets(self, rowset_ids: Sequence[int] | None = None) -> bool:
        """Merging compaction (also a major delta compaction when given one rowset); see ``_compact_rowsets``."""
        with self._c.maint_lock:
            return self._compact_rowsets(rowset_ids)

    def minor_delta_compaction(self, rowset_id: int) -> bool:
        """Concatenate one rowset's delta files into one (fewer files to open and merge on scans)."""
        with self._c.maint_lock:
            return self._minor_delta_compaction(rowset_id)

    def _write_rowsets(
        self, table: pa.Table, deltas: list[tuple[int, Mutation]] | pa.Table | None, first_id: int
    ) -> tuple[list[DiskRowSet], list[str], int]:
        """Write ``table`` and its ``deltas`` as rowsets (outside the component lock) and open them: the
        rowsets, their blocks (deleted here if opening them fails) and the bytes written."""
        c = self._c
        pieces: list[pa.Table] = []
        writer = c.options.rowset_writer
        if writer is not None and not isinstance(deltas, list):
            work = prepare_rowset_write(
                c.info, c.bm, table, deltas, first_id, c.options.target_rowset_bytes, writer.spool_dir
            )
            try:
                metas = writer(work)
            finally:
                discard_spool(work)
            start = 0
            for rs in metas:  # the rows each rowset holds, for the block cache
                pieces.append(table.slice(start, rs.num_rows).combine_chunks())
                start += rs.num_rows
            if start != table.num_rows:
                c.bm.delete_blocks(b for rs in metas for b in rs.blocks())
                raise AssertionError(f"rowset writer wrote {start} rows of {table.num_rows}")
        else:
            metas = write_rowsets(c.bm, c.info, table, deltas, first_id, c.options.target_rowset_bytes, pieces)
        block_ids = [b for rs in metas for b in rs.blocks()]
        try:
            written = self._blocks_bytes(block_ids)
            drs = [DiskRowSet(c.info, rs, c.bm, fresh=True, written=p) for rs, p in zip(metas, pieces, strict=True)]
            return drs, block_ids, written
        except BaseException:
            c.bm.delete_blocks(block_ids)
            raise

    def _blocks_bytes(self, block_ids: Sequence[str]) -> int:
        return sum(os.path.getsize(self._c.bm.path(b)) for b in block_ids)

    def flush_all(self) -> None:
        """Flush the MemRowSet and every DeltaMemStore (used before shutdown and by tests)."""
        self.flush_mrs()
        while self.flush_dms():
            pass

    # -- compaction --------------------------------------------------------------------------------

    def _claim(self, ids: Sequence[int] | None) -> list[DiskRowSet]:
        with self._c.lock:
            chosen = [d for d in self._c.drs if not d.busy and (ids is None or d.id in ids)]
            for d in chosen:
                d.busy = True
            return chosen

    def _compact_rowsets(self, rowset_ids: Sequence[int] | None = None) -> bool:
        """Merging compaction (also a major delta compaction when given one rowset).

        Inputs are frozen (their DeltaMemStores swapped out) under the lock, merged outside it, and
        the outputs swapped in with any mutations that arrived meanwhile carried over.
        """
        inputs = self._claim(rowset_ids)
        if not inputs or (
            rowset_ids is None and len(inputs) < 2 and not inputs[0].delta_tables and not len(inputs[0].dms)
        ):
            for d in inputs:
                d.busy = False
            return False
        old_blocks: list[str] = []
        new_ids: list[str] = []
        try:
            with self._c.lock:
                frozen = []
                for d in inputs:
                    d.flushing_dms.append(d.dms)
                    d.dms = DeltaMemStore(self._c.info)
                    frozen.append(CompactionInput(d.read_base(), d.delta_snapshot()))
                first_id = self._c.next_rowset_id
                self._c.next_rowset_id += 1000
            ahm = self._effective_ahm()
            table, deltas = merge_rowsets(self._c.info, frozen, ahm)
            outputs, new_ids, written = self._write_rowsets(table, deltas, first_id)
            late, deferred = self._catch_up([_late_of(d) for d in inputs], outputs)
            with self._c.lock:
                self.write_metadata_locked(
                    [*(d for d in self._c.drs if d not in inputs), *outputs], drop_frozen_of=inputs
                )
                new_ids = []
                self._c.drs = [d for d in self._c.drs if d not in inputs] + outputs
                for d in inputs:
                    d.retired = True
                    old_blocks.extend(d.meta.blocks())
                self._carry_over_late_locked(late, deferred)
                self._c.stats["compactions"] += 1
                self._c.stats["bytes_compacted"] += written
        except BaseException:
            self._c.bm.delete_blocks(new_ids)
            raise
        finally:
            for d in inputs:
                d.busy = False
        self._c.bm.delete_blocks(old_blocks)
        return True

    def _minor_delta_compaction(self, rowset_id: int) -> bool:
        """Concatenate one rowset's delta files into one (fewer files to open and merge on scans)."""
        claimed = self._claim([rowset_id])
        if not claimed:
            return False
        d = claimed[0]
        try:
            if len(d.delta_tables) < 2:
                return False
            tables = list(d.delta_tables)
            blocks = list(d.meta.delta_blocks)
            merged = pa.concat_tables(tables).sort_by([("_row", "ascending"), (TS_COL, "ascending")])
            block = write_delta_block(self._c.bm, merged, self._c.info)
            written = self._blocks_bytes([block])
            table = d.open_block(block)
            with self._c.lock:
                d.delta_tables = [table, *d.delta_tables[len(tables) :]]
                d.meta.delta_blocks = [block, *d.meta.delta_blocks[len(blocks) :]]
                self.write_metadata_locked()
                self._c.stats["compactions"] += 1
                self._c.stats["bytes_compacted"] += written
        finally:
            d.busy = False
        self._c.bm.delete_blocks(blocks)
        return True


def _late_of(d: DiskRowSet) -> LateMutations:
    """The mutations a compaction input's active DeltaMemStore took while the compaction ran."""

    def keys(rows: np.ndarray) -> pa.Array:
        return d.base.take(rows, [KEY_COL]).column(0).combine_chunks()

    def key_values(rows: np.ndarray) -> list[tuple[Any, ...]]:
        sub = d.base.take(rows, d.info.key_names)
        return list(zip(*[c.to_pylist() for c in sub.columns], strict=True))

    return LateMutations(d.dms, 0, keys, key_values)
