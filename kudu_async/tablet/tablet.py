"""Tablet: one replica's storage — write ops, scans, flushes, compactions, open and bootstrap.

Write contract (the Raft layer sits between the two halves, as in Kudu):

1. ``prepare_write(op, timestamp)`` validates the rows, takes the row locks of every key in the batch
   (blocking up to ``lock_timeout_s``; pass 0 from an event loop and retry on KuduTimedOut), decides per
   row what will happen (insert / update / delete / error / ignored) and registers ``timestamp`` with MVCC
   as in flight. Nothing is visible yet. Timestamps must increase in log-index order (the leader's
   hybrid clock guarantees it).
2. The caller replicates the op (the WAL entry is a :class:`LoggedWrite`), then calls
   ``apply_write(prepared, log_index)``: the mutations go into the MemRowSet/delta stores, MVCC commits
   the timestamp (scans see it from now on), locks are released and the :class:`WriteResult` returned.
   ``abort_write(prepared)`` instead drops the locks and the MVCC registration.

Because the locks are held from prepare to apply, the per-row outcome decided in prepare stays valid.

Schema changes: ``alter_schema(schema, version, log_index)`` is applied in log order like a write. A
write is prepared against one schema version and ``apply_write`` refuses it (KuduIllegalState) if an
alter landed in between; files keep the column ids they were written with and are read through the
current schema by id (see :mod:`kudu_async.tablet.diskrowset`).

Storage invariant: a key lives in exactly one rowset (the MemRowSet or one DiskRowSet); re-inserting a
deleted key adds a re-insert mutation to the rowset that holds it. Hence every op's effect on a key is
in one store, durable stores hold a prefix of each key's history, and replay can skip a row whose key
already has history at or after the op's timestamp (see :meth:`Tablet.open`).

Concurrency: one component lock (short holds) guards the rowset lists, the MemRowSet and delta stores;
flush and compaction do their I/O outside it in worker threads and swap the result in under it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from kudu_async.common.clock import HybridClock
from kudu_async.common.errors import (
    KuduInvalidArgument,
    KuduNotFound,
)
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import (
    RowSetMetadata,
    TabletMetadata,
    read_tablet_metadata,
    write_tablet_metadata,
)
from kudu_async.tablet.compaction import CompactionInput, merge_rowsets
from kudu_async.tablet.components import TabletComponents, TabletOptions
from kudu_async.tablet.delta_store import DeltaMemStore
from kudu_async.tablet.diskrowset import (
    DiskRowSet,
    write_delta_block,
    write_rowsets,
)
from kudu_async.tablet.lock_manager import LockManager
from kudu_async.tablet.memrowset import Mutation
from kudu_async.tablet.mvcc import MvccManager, MvccSnapshot
from kudu_async.tablet.ops import LoggedWrite, WriteOp, WriteResult
from kudu_async.tablet.read_path import READ_AT_SNAPSHOT, READ_LATEST, ReadPath, ScanSpec, TabletScanner
from kudu_async.tablet.schema_info import TS_COL, SchemaInfo
from kudu_async.tablet.write_path import PreparedWrite, WritePath


class Tablet:
    """One tablet replica's storage; see the module docstring for the contracts."""

    def __init__(self, components: TabletComponents) -> None:
        self.components = components  # the state the rooms share; read or change it only under its lock
        self._writes = WritePath(components)
        self._reads = ReadPath(components)
        self._c = components

    @property
    def tablet_id(self) -> str:
        return self._c.tablet_id

    @property
    def tablet_dir(self) -> str:
        return self._c.tablet_dir

    @property
    def options(self) -> TabletOptions:
        return self._c.options

    @property
    def clock(self) -> HybridClock:
        return self._c.clock

    @property
    def bm(self) -> BlockManager:
        return self._c.bm

    @property
    def mvcc(self) -> MvccManager:
        return self._c.mvcc

    @property
    def locks(self) -> LockManager:
        """The row locks a write holds from prepare to apply."""
        return self._c.locks

    @property
    def info(self) -> SchemaInfo:
        """The storage view of the current schema (an alter replaces it)."""
        return self._c.info

    @property
    def schema_version(self) -> int:
        return self._c.schema_version

    # -- lifecycle --------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        tablet_dir: str,
        schema: Any,
        *,
        tablet_id: str = "",
        options: TabletOptions | None = None,
        clock: HybridClock | None = None,
        schema_version: int = 0,
    ) -> Tablet:
        """Create an empty tablet (metadata written durably) and open it; a tablet added to an altered
        table (a new range) starts at the table's current ``schema_version``."""
        options = options or TabletOptions()
        os.makedirs(tablet_dir, exist_ok=True)
        if hasattr(schema, "with_column_ids"):  # storage tests may pass a minimal stand-in schema
            schema = schema.with_column_ids()
        meta = TabletMetadata(
            tablet_id=tablet_id or os.path.basename(tablet_dir), schema=schema.to_dict(), schema_version=schema_version
        )
        write_tablet_metadata(tablet_dir, meta, sync=options.sync)
        return cls.open(tablet_dir, options=options, clock=clock, schema=schema)

    @classmethod
    def open(
        cls,
        tablet_dir: str,
        *,
        log_ops: Iterable[LoggedWrite] = (),
        options: TabletOptions | None = None,
        clock: HybridClock | None = None,
        schema: Any = None,
    ) -> Tablet:
        """Open a tablet and bootstrap it: replay logged writes above the last flushed log index.

        Rows whose key already has history at or after the op's timestamp are skipped (their effect
        is already in flushed files); every other row is re-applied exactly as it was the first time.
        """
        options = options or TabletOptions()
        clock = clock or HybridClock()
        meta = read_tablet_metadata(tablet_dir)
        if schema is None:
            schema = SchemaInfo.schema_from_dict(meta.schema)
        if hasattr(schema, "with_column_ids") and any(c.id is None for c in schema.columns):
            # Written before column ids existed: number the columns now (deterministically, so a crash
            # before the next metadata write numbers them the same) and remember which id each file
            # column name got: those files carry no id map, and later alters match columns by id.
            schema = schema.with_column_ids()
            meta_cols = meta.schema.get("columns", [])
            if not meta.legacy_column_ids and not all(isinstance(c, dict) and "id" in c for c in meta_cols):
                meta.legacy_column_ids = {c.name: c.id for c in schema.columns}
        bm = BlockManager([os.path.join(tablet_dir, "data")], sync=options.sync, cache=options.block_cache)
        bm.delete_orphans(meta.live_blocks())
        legacy_ids = dict(meta.legacy_column_ids)
        info = _schema_info(schema, list(meta.added_columns), legacy_ids)
        tablet = cls(TabletComponents(tablet_dir, meta, info, bm, options, clock, legacy_ids))
        for entry in log_ops:
            if entry.log_index <= meta.last_flushed_log_index:
                continue
            clock.update(entry.timestamp)
            prepared = tablet.prepare_write(entry.op, entry.timestamp, replay=True)
            tablet.apply_write(prepared, entry.log_index)
        return tablet

    # -- writes (see write_path) -------------------------------------------------------------------

    def prepare_write(
        self, op: WriteOp, timestamp: int, *, replay: bool = False, lock_timeout_s: float | None = None
    ) -> PreparedWrite:
        """Validate, lock and decide every row; register ``timestamp`` with MVCC (see :mod:`.write_path`).
        ``replay``: skip rows whose key changed at or after ``timestamp`` (their effect is durable)."""
        return self._writes.prepare(op, timestamp, replay=replay, lock_timeout_s=lock_timeout_s)

    def apply_write(self, prepared: PreparedWrite, log_index: int) -> WriteResult:
        """Apply a prepared op at its timestamp, commit it in MVCC and release its locks."""
        return self._writes.apply(prepared, log_index)

    def abort_write(self, prepared: PreparedWrite) -> None:
        """Give up a prepared op (not replicated): release its locks, forget its timestamp."""
        self._writes.abort(prepared)

    def write(self, op: WriteOp, timestamp: int, log_index: int) -> WriteResult:
        """prepare + apply in one call, for callers without replication in between (tests, bench)."""
        return self.apply_write(self.prepare_write(op, timestamp), log_index)

    # -- reads (see read_path) ----------------------------------------------------------------------

    def ancient_history_mark(self) -> int:
        """The oldest timestamp a snapshot scan may read at (older history may be compacted away)."""
        return self._c.ancient_history_mark()

    def scan(self, spec: ScanSpec | None = None) -> TabletScanner:
        """Start a scan; returns an iterator of bounded-size Arrow record batches."""
        return self._reads.scan(spec)

    def point_lookup_key(self, spec: ScanSpec) -> bytes | None:
        """The encoded primary key when ``spec`` pins every key column by '=' (a point read), else None."""
        return self._reads.point_lookup_key(spec)

    def scan_in_memory(self, spec: ScanSpec, key: bytes) -> TabletScanner | None:
        """The point read of ``key`` started now when memory can answer it without waiting, else None
        (then :meth:`scan` in a worker answers); safe to call from the event loop."""
        return self._reads.scan_in_memory(spec, key)

    def lookup(self, key: bytes, snapshot: MvccSnapshot | None = None) -> dict[str, Any] | None:
        """Point read of one encoded primary key at a snapshot (default: latest committed)."""
        return self._reads.lookup(key, snapshot)

    # -- memory and state -------------------------------------------------------------------------

    def mrs_memory_bytes(self) -> int:
        with self._c.lock:
            return self._c.mrs.memory_bytes() + sum(m.memory_bytes() for m in self._c.flushing_mrs)

    def dms_memory_bytes(self) -> int:
        with self._c.lock:
            return sum(d.delta_memory_bytes() for d in self._c.drs)

    def _replay_start_locked(self, drop_mrs: Any = None, drop_frozen_of: Sequence[DiskRowSet] = ()) -> int:
        """Last log index whose effects are all in durable files (bootstrap replays after it)."""
        mins = [
            m.min_log_index
            for m in [self._c.mrs, *self._c.flushing_mrs]
            if m.min_log_index is not None and m is not drop_mrs
        ]
        for d in self._c.drs:
            stores = [d.dms] if d in drop_frozen_of else [d.dms, *d.flushing_dms]
            mins.extend(s.min_log_index for s in stores if s.min_log_index is not None)
        return (min(mins) - 1) if mins else self._c.last_applied_index

    def earliest_needed_log_index(self) -> int:
        """Log anchor: WAL entries from this index on must be kept for bootstrap."""
        with self._c.lock:
            return self._replay_start_locked() + 1

    def _effective_ahm(self) -> int:
        ahm = self._c.ancient_history_mark()
        with self._c.lock:
            mins = [m.min_ts for m in [self._c.mrs, *self._c.flushing_mrs] if m.min_ts is not None]
            for d in self._c.drs:
                mins.extend(s.min_ts for s in [d.dms, *d.flushing_dms] if s.min_ts is not None)
        inflight = self._c.mvcc.min_in_flight()
        if inflight is not None:
            mins.append(inflight)
        return min([ahm, *[m - 1 for m in mins]])

    def _write_metadata_locked(
        self,
        rowsets: list[DiskRowSet] | None = None,
        *,
        drop_mrs: Any = None,
        drop_frozen_of: Sequence[DiskRowSet] = (),
        extra_min_index: int | None = None,
    ) -> None:
        """Commit ``rowsets`` (default: the current ones) durably, with the replay start index.

        ``drop_mrs``/``drop_frozen_of`` name in-memory stores whose content those rowsets now hold;
        ``extra_min_index`` is the oldest log index of mutations about to be carried over.
        """
        rowsets = self._c.drs if rowsets is None else rowsets
        replay_start = self._replay_start_locked(drop_mrs, drop_frozen_of)
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
            legacy_column_ids=self._c.legacy_ids,
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

    # -- flush ------------------------------------------------------------------------------------

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
            metas = write_rowsets(
                self._c.bm, self._c.info, table, deltas, first_id, self._c.options.target_rowset_bytes
            )
            new_ids = [b for rs in metas for b in rs.blocks()]
            written = self._blocks_bytes(new_ids)
            new_drs = [DiskRowSet(self._c.info, rs, self._c.bm, fresh=True) for rs in metas]
            with self._c.lock:
                late = old.mutations_since(freeze_seq)
                # Commit point first: if it fails nothing in memory has changed.
                self._write_metadata_locked(
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
            # writable for its keys) in _flushing_mrs; the next flush_mrs retries it.
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
                self._write_metadata_locked()
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

    def _blocks_bytes(self, block_ids: Sequence[str]) -> int:
        return sum(os.path.getsize(self._c.bm.path(b)) for b in block_ids)

    def stats(self) -> dict[str, int]:
        """Monotonic counters of flushes and compactions (per-tablet metrics)."""
        with self._c.lock:
            return dict(self._c.stats)

    def flush_all(self) -> None:
        """Flush the MemRowSet and every DeltaMemStore (used before shutdown and by tests)."""
        self.flush_mrs()
        while self.flush_dms():
            pass

    # -- compaction -------------------------------------------------------------------------------

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
                    frozen.append(CompactionInput(d.base, d.delta_snapshot()))
                first_id = self._c.next_rowset_id
                self._c.next_rowset_id += 1000
            ahm = self._effective_ahm()
            table, deltas = merge_rowsets(self._c.info, frozen, ahm)
            metas = write_rowsets(
                self._c.bm, self._c.info, table, deltas, first_id, self._c.options.target_rowset_bytes
            )
            new_ids = [b for rs in metas for b in rs.blocks()]
            written = self._blocks_bytes(new_ids)
            outputs = [DiskRowSet(self._c.info, rs, self._c.bm, fresh=True) for rs in metas]
            with self._c.lock:
                late = sorted((m for d in inputs for m in d.dms_mutations()), key=lambda m: m.seq)
                self._write_metadata_locked(
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
                self._write_metadata_locked()
                self._c.stats["compactions"] += 1
                self._c.stats["bytes_compacted"] += written
        finally:
            d.busy = False
        self._c.bm.delete_blocks(blocks)
        return True

    # -- schema changes ---------------------------------------------------------------------------

    def alter_schema(self, new_schema: Any, version: int, log_index: int) -> bool:
        """Apply an AlterSchema replicated at ``log_index``; False if ``version`` is not newer (replay).

        Columns are matched by id: renamed ones keep their data, added ones read as their default (or
        NULL) in older rows, dropped ones disappear. Everything in memory is flushed first and the new
        schema is committed with a replay start at ``log_index``, so bootstrap never replays a write
        built for the old schema against the new one (and replays the alter itself if it crashed before).
        Writes prepared for the old schema are refused by :meth:`apply_write`.
        """
        with self._c.maint_lock:
            if version <= self._c.schema_version:
                return False
            schema = self._check_alter(new_schema)
            ids = {c.id for c in schema.columns}
            cur_ids = set(self._c.info.ids)
            # The default an added column has now is what older rows read from then on (Kudu's read
            # default), whatever later alters make of its write default.
            added = [d for d in self._c.added_columns if d.get("id") in ids]
            added += [c.to_dict() for c in schema.columns if c.id not in cur_ids]
            new_info = _schema_info(schema, added, self._c.legacy_ids)
            while True:
                self.flush_all()
                with self._c.lock:
                    old_drs = list(self._c.drs)
                # Files are re-read outside the component lock: only this thread (holding the
                # maintenance lock) changes the rowset list or their files.
                new_drs = [DiskRowSet(new_info, d.meta, self._c.bm, state=d.built_state()) for d in old_drs]
                with self._c.lock:
                    if self._c.drs != old_drs or self._dirty_locked():
                        continue  # a write for the old schema was applied meanwhile: flush it too
                    saved = (self._c.info, self._c.schema_version, self._c.added_columns, self._c.last_applied_index)
                    self._c.info, self._c.schema_version, self._c.added_columns = new_info, version, added
                    self._c.last_applied_index = max(self._c.last_applied_index, log_index)
                    try:
                        self._write_metadata_locked(new_drs)
                    except BaseException:
                        self._c.info, self._c.schema_version, self._c.added_columns, self._c.last_applied_index = saved
                        raise
                    self._c.drs = new_drs
                    for d in old_drs:
                        d.retired = True  # scans already open keep reading them with the old schema
                    self._c.mrs = self._c.new_mrs()
                    return True

    def _dirty_locked(self) -> bool:
        """Anything in memory that is not in a file yet (MemRowSets, DeltaMemStores)?"""
        return bool(len(self._c.mrs) or self._c.flushing_mrs or any(len(d.dms) or d.flushing_dms for d in self._c.drs))

    def _check_alter(self, new_schema: Any) -> Any:
        """The new schema with ids for added columns, after Kudu's alter rules (matched by id)."""
        cur = self._c.info.schema
        cur_by_id = {c.id: c for c in cur.columns}
        next_id = max([c.id for c in cur.columns if c.id is not None], default=-1) + 1
        schema = new_schema.with_column_ids(next_id)
        new_ids = [c.id for c in schema.columns]
        new_key = [(c.id, c.name) for c in schema.key_columns]
        cur_key = [(c.id, c.name) for c in cur.key_columns]
        if [i for i, _ in new_key] != [i for i, _ in cur_key]:
            # Name the first key position that differs (the current column there, else the new one).
            pos = next(
                p
                for p in range(max(len(new_key), len(cur_key)))
                if p >= len(new_key) or p >= len(cur_key) or new_key[p][0] != cur_key[p][0]
            )
            name = cur_key[pos][1] if pos < len(cur_key) else new_key[pos][1]
            raise KuduInvalidArgument(
                f"AlterSchema cannot change the primary key columns (key column '{name}')", {"column": name}
            )
        for c in schema.columns:
            old = cur_by_id.get(c.id)
            if old is None:
                if c.id < next_id:
                    raise KuduInvalidArgument(f"column '{c.name}' reuses the id {c.id} of a dropped column")
                if not c.nullable and c.default is None:
                    raise KuduInvalidArgument(
                        f"added column '{c.name}' must be nullable or have a default", {"column": c.name}
                    )
                continue
            for attr in ("type", "nullable", "precision", "scale", "length"):
                if getattr(c, attr) != getattr(old, attr):
                    raise KuduInvalidArgument(f"column '{old.name}': cannot change its {attr}", {"column": old.name})
        dropped = [c.name for c in cur.columns if c.id not in new_ids]
        key_dropped = [n for n in dropped if cur.is_key_column(n)]
        if key_dropped:
            raise KuduInvalidArgument(f"cannot drop key column '{key_dropped[0]}'", {"column": key_dropped[0]})
        return schema

    # -- checksum ---------------------------------------------------------------------------------

    def checksum(self, snapshot_ts: int | None = None) -> dict[str, Any]:
        """Rows and a 64-bit checksum of what is visible at READ_AT_SNAPSHOT ``snapshot_ts``.

        ``snapshot_ts`` None: ``clock.now()`` when no write is in flight, else just below the oldest
        one (so this never waits on a write), reported back as ``snapshot_ts``.

        Definition (the same on every replica and platform): the rows in primary-key order (an
        ordered scan); per column, in schema order, three xxh64 streams:

        - validity: one byte per row (1 set, 0 NULL);
        - values: fixed-width types as little-endian raw values with NULL as 0 (bool one byte, dates
          int64 days, timestamps int64 micros); variable-width types (string, binary, varchar, and
          decimals as their fixed-scale text) as int64 lengths, NULL as length 0;
        - bytes: the concatenated variable-width values (empty for fixed-width types).

        The result is xxh64 over, per column, its name, NUL, Arrow type, NUL and its three digests,
        then the row count (8 bytes little-endian). Streams are fed batch by batch, so memory stays
        bounded and the result never depends on how rows are split into MemRowSet, DiskRowSets,
        deltas or scan batches.
        """
        ts = snapshot_ts
        if ts is None:
            # Not the MVCC clean point: on an idle tablet that is its last write (-1 when empty), which
            # can be older than the ancient history mark and so not a valid snapshot.
            inflight = self._c.mvcc.min_in_flight()
            ts = self._c.clock.now() if inflight is None else inflight - 1
        spec = ScanSpec(read_mode=READ_AT_SNAPSHOT, snapshot_ts=ts, ordered=True, snapshot_wait_s=0.0)
        scanner = self.scan(spec)
        info = scanner.info
        assert info is not None
        names = list(info.names)
        streams = [[xxhash.xxh64() for _ in range(3)] for _ in names]
        rows = 0
        for batch in scanner:
            rows += batch.num_rows
            for col, hashers in zip(batch.columns, streams, strict=True):
                for h, data in zip(hashers, _canonical_streams(col), strict=True):
                    h.update(data)
        total = xxhash.xxh64()
        types = [str(f.type) for f in info.arrow]
        for name, typ, hashers in zip(names, types, streams, strict=True):
            total.update(f"{name}\0{typ}\0".encode())
            for h in hashers:
                total.update(h.digest())
        total.update(rows.to_bytes(8, "little"))
        return {"rows": rows, "checksum": total.intdigest(), "snapshot_ts": ts}

    # -- introspection ----------------------------------------------------------------------------

    def rowsets(self) -> list[DiskRowSet]:
        with self._c.lock:
            return list(self._c.drs)

    def status(self) -> dict[str, Any]:
        """JSON-able state for admin pages: rowsets, memory, log anchors."""
        with self._c.lock:
            return {
                "tablet_id": self._c.tablet_id,
                "schema_version": self._c.schema_version,
                "mrs_rows": len(self._c.mrs),
                "mrs_bytes": self._c.mrs.memory_bytes(),
                "flushing_mrs": len(self._c.flushing_mrs),
                "dms_bytes": sum(d.delta_memory_bytes() for d in self._c.drs),
                "last_applied_log_index": self._c.last_applied_index,
                "last_flushed_log_index": self._c.last_flushed_index,
                "rowsets": [
                    {
                        "id": d.id,
                        "rows": d.num_rows(),
                        "min_key": d.min_key.hex(),
                        "max_key": d.max_key.hex(),
                        "delta_files": len(d.delta_tables),
                        "dms_bytes": d.dms.memory_bytes(),
                        "base_bytes": d.base_bytes(),
                    }
                    for d in self._c.drs
                ],
            }

    def schema_dict(self) -> dict[str, Any]:
        return self._c.info.to_dict()

    def drs_metadata(self) -> list[RowSetMetadata]:
        with self._c.lock:
            return [d.meta for d in self._c.drs]


def _schema_info(schema: Any, added_columns: list[dict[str, Any]], legacy_ids: dict[str, int]) -> SchemaInfo:
    """The storage view of ``schema``: read defaults of columns added by alters, ids of legacy files."""
    added = [SchemaInfo.column_from_dict(d) for d in added_columns]
    return SchemaInfo(
        schema,
        {c.id: c.default for c in added if c.id is not None},
        {i: name for name, i in legacy_ids.items()},
    )


def _canonical_streams(col: pa.Array) -> tuple[bytes, bytes, bytes | memoryview]:
    """(validity, values-or-lengths, var-width bytes) of one column chunk; see ``Tablet.checksum``."""
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes()
    typ = col.type
    if pa.types.is_decimal(typ):
        col = pc.cast(col, pa.string())
        typ = col.type
    if (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
    ):
        b = pc.fill_null(pc.cast(col, pa.large_binary()), pa.scalar(b"", pa.large_binary()))
        lengths = pc.binary_length(b).to_numpy(zero_copy_only=False).astype("<i8").tobytes()
        offsets = np.frombuffer(b.buffers()[1], dtype="<i8", count=len(b) + 1, offset=b.offset * 8)
        data = b.buffers()[2]
        # A view of just this slice's bytes: batches share one big buffer, so never copy all of it.
        body = b"" if data is None else memoryview(data)[int(offsets[0]) : int(offsets[-1])]
        return valid, lengths, body
    if pa.types.is_boolean(typ):
        flags = pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(np.uint8)
        return valid, flags.tobytes(), b""
    if pa.types.is_temporal(typ):
        # Canonical integers: days for dates (Arrow has no date32 -> int64 cast), micros for timestamps.
        as_int = (col.cast(pa.int32()) if pa.types.is_date32(typ) else col).cast(pa.int64())
    else:
        as_int = col
    vals = pc.fill_null(as_int, pa.scalar(0, as_int.type)).to_numpy(zero_copy_only=False)
    vals = np.ascontiguousarray(vals, dtype=vals.dtype.newbyteorder("<"))  # a no-op on little-endian hosts
    return valid, vals.view(np.uint8).tobytes(), b""


__all__ = [
    "READ_AT_SNAPSHOT",
    "READ_LATEST",
    "KuduNotFound",
    "ScanSpec",
    "Tablet",
    "TabletOptions",
    "TabletScanner",
]
