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

import pyarrow as pa

from kudu_async.fs.tablet_metadata import TabletMetadata, write_tablet_metadata
from kudu_async.tablet.compaction import CompactionInput, merge_rowsets
from kudu_async.tablet.components import TabletComponents
from kudu_async.tablet.delta_store import DeltaMemStore
from kudu_async.tablet.diskrowset import DiskRowSet, write_delta_block, write_rowsets
from kudu_async.tablet.memrowset import MemRowSet, Mutation
from kudu_async.tablet.schema_info import TS_COL


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
            with self._c.lock:
                late = old.mutations_since(freeze_seq)
                # Commit point first: if it fails nothing in memory has changed.
                self.write_metadata_locked(
                    [*self._c.drs, *new_drs],
                    drop_mrs=old,
                    extra_min_index=min((m.log_index for m in late), default=None),
                )
                self._c.flushing_mrs.remove(old)
                old.retired = True
                self._c.drs.extend(new_drs)
                self._carry_over_locked(late)
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
            with self._c.lock:
                late = sorted((m for d in inputs for m in d.dms_mutations()), key=lambda m: m.seq)
                self.write_metadata_locked(
                    [*(d for d in self._c.drs if d not in inputs), *outputs], drop_frozen_of=inputs
                )
                new_ids = []
                self._c.drs = [d for d in self._c.drs if d not in inputs] + outputs
                for d in inputs:
                    d.retired = True
                    old_blocks.extend(d.meta.blocks())
                self._carry_over_locked(late)
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
