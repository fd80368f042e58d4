"""Tablet: one replica's storage, the owner of its state and locks, and the API the tserver uses.

The work is done in rooms, one per stage of a row's life, each working on the shared
:class:`~kudu_async.tablet.components.TabletComponents` (the state and the component lock):

- :mod:`.bootstrap`: create the files, open them, replay the logged writes above the last flush;
- :mod:`.write_path`: prepare (validate, lock, decide) and apply writes (its docstring has the contract
  with the Raft layer in between);
- :mod:`.read_path`: scans and point reads;
- :mod:`.rowset_maintenance`: flushes, compactions and the metadata writes that commit them;
- :mod:`.schema_change`: AlterSchema, applied in log order like a write;
- :mod:`.checksum`: the replica-independent checksum of the rows at a snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common.clock import HybridClock
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.schema import Schema
from kudu_async.fs.tablet_metadata import TabletMetadata, metadata_path
from kudu_async.tablet import bootstrap, checksum, compaction_policy, key_ranges, schema_change
from kudu_async.tablet.compaction_policy import LayoutPlan, RowSetExtent
from kudu_async.tablet.components import TabletComponents, TabletOptions
from kudu_async.tablet.delta_store import LIVE_COL, ROW_COL, SEQ_COL
from kudu_async.tablet.diskrowset import DiskRowSet
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.ops import LoggedWrite, WriteOp, WriteResult
from kudu_async.tablet.read_path import READ_AT_SNAPSHOT, READ_LATEST, ReadPath, ScanSpec, TabletScanner
from kudu_async.tablet.rowset_maintenance import RowSetMaintenance
from kudu_async.tablet.schema_info import TS_COL, SchemaInfo
from kudu_async.tablet.write_path import PreparedWrite, WritePath


class Tablet:
    """One tablet replica's storage; see the module docstring for the contracts."""

    def __init__(self, components: TabletComponents) -> None:
        self.components = components  # the state the rooms share; read or change it only under its lock
        self._c = components
        self._writes = WritePath(components)
        self._reads = ReadPath(components)
        self._maintenance = RowSetMaintenance(components)
        self.tablet_id = components.tablet_id
        self.tablet_dir = components.tablet_dir
        self.options = components.options
        self.clock = components.clock
        self.bm = components.bm
        self.mvcc = components.mvcc
        self.locks = components.locks  # the row locks a write holds from prepare to apply
        # (policy knobs and layout, its plan)
        self._layout: tuple[tuple[tuple[int, float, int], tuple[tuple[int, int], ...]], LayoutPlan] | None = None
        # Live rows, counted from the stores once (see :meth:`count_live_rows`) and then kept by the
        # applied writes' results; flushes and compactions move rows without changing it.
        self._live_rows_lock = threading.Lock()
        self._live_rows = 0

    @property
    def info(self) -> SchemaInfo:
        """The storage view of the current schema (an alter replaces it)."""
        return self._c.info

    @property
    def schema_version(self) -> int:
        return self._c.schema_version

    # -- lifecycle ---------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        tablet_dir: str,
        schema: Schema,
        *,
        tablet_id: str = "",
        options: TabletOptions | None = None,
        clock: HybridClock | None = None,
        schema_version: int = 0,
    ) -> Tablet:
        """Create an empty tablet (metadata written durably) and open it; a tablet added to an altered
        table (a new range) starts at the table's current ``schema_version``."""
        options = options or TabletOptions()
        bootstrap.create_metadata(tablet_dir, schema, tablet_id, options, schema_version)
        return cls.open(tablet_dir, options=options, clock=clock)

    @classmethod
    def open(
        cls,
        tablet_dir: str,
        *,
        log_ops: Iterable[LoggedWrite] = (),
        options: TabletOptions | None = None,
        clock: HybridClock | None = None,
    ) -> Tablet:
        """Open a tablet and bootstrap it: replay logged writes above the last flushed log index.

        Rows whose key already has history at or after the op's timestamp are skipped (their effect
        is already in flushed files); every other row is re-applied exactly as it was the first time.
        """
        options = options or TabletOptions()
        clock = clock or HybridClock()
        components = bootstrap.open_components(tablet_dir, options, clock)
        tablet = cls(components)
        if components.info.schema.auto_incrementing_index is not None:
            tablet._writes.auto_increment = tablet._largest_auto_increment()
        bootstrap.replay(tablet._writes, clock, log_ops, components.last_flushed_index)
        tablet._live_rows = tablet.count_live_rows()
        return tablet

    def _largest_auto_increment(self) -> int:
        """The largest auto-incrementing id of the stored rows (0: none), read in bounded batches: where
        the tablet's counter resumes after a restart (as Kudu derives it on bootstrap)."""
        ai = self._c.info.schema.auto_incrementing_index
        assert ai is not None
        largest = 0
        for batch in self.scan(ScanSpec(projection=[self._c.info.names[ai]])):
            if batch.num_rows:
                largest = max(largest, int(pc.max(batch.column(0)).as_py()))
        return largest

    # -- writes (see write_path) -------------------------------------------------------------------

    def prepare_write(
        self,
        op: WriteOp,
        timestamp: int,
        *,
        replay: bool = False,
        lock_timeout_s: float | None = None,
        wait: bool = True,
    ) -> PreparedWrite:
        """Validate, lock and decide every row; register ``timestamp`` with MVCC (see :mod:`.write_path`).
        ``replay``: skip rows whose key changed at or after ``timestamp`` (their effect is durable).
        ``wait`` False: raise :class:`WouldBlock` rather than wait for background work or disk."""
        return self._writes.prepare(op, timestamp, replay=replay, lock_timeout_s=lock_timeout_s, wait=wait)

    def apply_write(self, prepared: PreparedWrite, log_index: int, *, wait: bool = True) -> WriteResult:
        """Apply a prepared op at its timestamp, commit it in MVCC and release its locks (``wait`` as
        for :meth:`prepare_write`; refused, the write stays prepared)."""
        res = self._writes.apply(prepared, log_index, wait=wait)
        if res.inserted or res.deleted:
            with self._live_rows_lock:
                self._live_rows += res.inserted - res.deleted
        return res

    def abort_write(self, prepared: PreparedWrite) -> None:
        """Give up a prepared op (not replicated): release its locks, forget its timestamp."""
        self._writes.abort(prepared)

    def write(self, op: WriteOp, timestamp: int, log_index: int) -> WriteResult:
        """prepare + apply in one call, for callers without replication in between (tests, bench)."""
        return self.apply_write(self.prepare_write(op, timestamp), log_index)

    # -- reads (see read_path) ---------------------------------------------------------------------

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

    def split_key_range(
        self, start: bytes | None, stop: bytes | None, target_bytes: int, columns: Sequence[str] | None = None
    ) -> list[key_ranges.KeyRange]:
        """Kudu's SplitKeyRange: ``[start, stop)`` cut into chunks of about ``target_bytes`` (of
        ``columns`` when given), from the rowsets' block index and the MemRowSets' keys. Reads footers
        already in memory; run it in a worker all the same (a MemRowSet's sorted view may be merged)."""
        if columns is not None:
            unknown = [c for c in columns if c not in self._c.info.names]
            if unknown:
                raise KuduInvalidArgument(f"column(s) {unknown} are not in the table's schema")
        pieces: list[key_ranges.KeyPiece] = []
        with self._c.lock:  # a MemRowSet's sorted view is read under it
            drs = list(self._c.drs)
            for mrs in self._c.memrowsets():
                pieces += key_ranges.memrowset_pieces(mrs)
        for d in drs:
            pieces += key_ranges.rowset_pieces(d, columns)
        return key_ranges.split_key_range(pieces, start, stop, target_bytes)

    def lookup(self, key: bytes, snapshot: MvccSnapshot | None = None) -> dict[str, Any] | None:
        """Point read of one encoded primary key at a snapshot (default: latest committed)."""
        return self._reads.lookup(key, snapshot)

    # -- memory and state --------------------------------------------------------------------------

    def mrs_memory_bytes(self) -> int:
        with self._c.lock:
            return self._c.mrs.memory_bytes() + sum(m.memory_bytes() for m in self._c.flushing_mrs)

    def mrs_created_at(self) -> float | None:
        """When the MemRowSet taking writes got its first row (``time.monotonic``; None while empty): the
        maintenance manager flushes a MemRowSet that has held rows too long."""
        with self._c.lock:
            return self._c.mrs.created_at

    def dms_memory_bytes(self) -> int:
        with self._c.lock:
            return sum(d.delta_memory_bytes() for d in self._c.drs)

    def drs_memory_bytes(self) -> int:
        """What the open DiskRowSets hold in process memory beside the block cache (key and delta indexes)."""
        with self._c.lock:
            return sum(d.memory_bytes() for d in self._c.drs)

    def earliest_needed_log_index(self) -> int:
        """Log anchor: WAL entries from this index on must be kept for bootstrap."""
        return self._maintenance.earliest_needed_log_index()

    # -- flush and compaction (see rowset_maintenance) ---------------------------------------------

    def flush_mrs(self) -> bool:
        """Flush the MemRowSet to DiskRowSets (run in a worker thread). False if nothing to do."""
        return self._maintenance.flush_mrs()

    def flush_dms(self, drs_id: int | None = None) -> bool:
        """Flush the DeltaMemStore of one rowset (the largest if None) to a delta file."""
        return self._maintenance.flush_dms(drs_id)

    def flush_all(self) -> None:
        """Flush the MemRowSet and every DeltaMemStore (used before shutdown and by tests)."""
        self._maintenance.flush_all()

    def compact_rowsets(self, rowset_ids: Sequence[int] | None = None) -> bool:
        """Merging compaction (also a major delta compaction when given one rowset)."""
        return self._maintenance.compact_rowsets(rowset_ids)

    def minor_delta_compaction(self, rowset_id: int) -> bool:
        """Concatenate one rowset's delta files into one (fewer files to open and merge on scans)."""
        return self._maintenance.minor_delta_compaction(rowset_id)

    @property
    def live_rows(self) -> int:
        """Rows inserted and not deleted (Kudu's live row count): a counter, cheap to read anywhere."""
        return self._live_rows

    def count_live_rows(self) -> int:
        """Live rows counted from the stores, vectorised: at open, before the counter takes over."""
        with self._c.lock:
            n = sum(m.live_rows() for m in self._c.memrowsets())
            return n + sum(d.num_rows() - _deleted_rows(d) for d in self._c.drs)

    def stats(self) -> dict[str, int]:
        """Monotonic counters of flushes and compactions (per-tablet metrics)."""
        with self._c.lock:
            return dict(self._c.stats)

    # -- schema changes and checksums --------------------------------------------------------------

    def alter_schema(self, new_schema: Schema, version: int, log_index: int) -> bool:
        """Apply an AlterSchema replicated at ``log_index``; False if ``version`` is not newer (replay).
        See :func:`.schema_change.alter_schema`."""
        return schema_change.alter_schema(self._c, self._maintenance, new_schema, version, log_index)

    def checksum(self, snapshot_ts: int | None = None) -> dict[str, Any]:
        """Rows and a 64-bit checksum of what is visible at READ_AT_SNAPSHOT ``snapshot_ts`` (default: now,
        or just below the oldest write in flight); see :func:`.checksum.checksum`."""
        return checksum.checksum(self._c, self._reads, snapshot_ts)

    # -- introspection -----------------------------------------------------------------------------

    def warm_block_cache(self) -> int:
        """Decode the rowsets' blocks into the block cache's free room, newest rowsets first, until it
        refuses one (opening a tablet reads only footers; this is the cache's warm-up after a
        restart). Returns the rowsets warmed whole. Reads files outside the component lock, as scans
        do: call in a worker."""
        with self._c.lock:
            drs = sorted(self._c.drs, key=lambda d: d.id, reverse=True)
        warmed = 0
        for d in drs:
            if d.retired:
                continue
            if not d.warm_cache():
                break
            warmed += 1
        return warmed

    def rowsets(self) -> list[DiskRowSet]:
        with self._c.lock:
            return list(self._c.drs)

    def rowset_layout(self, fresh: bool = True) -> LayoutPlan:
        """The DiskRowSet layout's average and max height and the best merge within the compaction budget
        (:mod:`.compaction_policy`), recomputed only when the set of rowsets changed. ``fresh=False``
        (metrics and status pages, on the event loop) takes the maintenance manager's last plan as it
        is: planning hundreds of rowsets takes tens of milliseconds."""
        cached = self._layout
        if not fresh and cached is not None:
            return cached[1]
        extents = [RowSetExtent(d.id, d.min_key, d.max_key, d.base_bytes()) for d in self.rowsets()]
        o = self.options
        knobs = (o.compaction_budget_bytes, o.compaction_small_rowset_tradeoff, o.target_rowset_bytes)
        sig = (knobs, tuple((e.id, e.size) for e in extents))
        if cached is not None and cached[0] == sig:
            return cached[1]
        layout = compaction_policy.plan(
            extents,
            o.compaction_budget_bytes,
            small_rowset_tradeoff=o.compaction_small_rowset_tradeoff,
            target_rowset_bytes=o.target_rowset_bytes,
        )
        self._layout = (sig, layout)
        return layout

    def status(self) -> dict[str, Any]:
        """JSON-able state for admin pages: rowsets, memory, log anchors, rowset layout height."""
        layout = self.rowset_layout(fresh=False)
        with self._c.lock:
            return {
                "average_rowset_height": round(layout.average_height, 4),
                "max_rowset_height": layout.max_height,
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

    @contextmanager
    def durable_files(self) -> Iterator[tuple[bytes, list[str]]]:
        """The committed metadata file's bytes and the paths of the blocks it references, for copying the
        tablet (tablet copy). No flush or compaction commits new metadata while the ``with`` block runs,
        and blocks are deleted only after the metadata that drops them is committed, so the files stay
        one consistent version until it exits."""
        with self._c.lock:
            with open(metadata_path(self._c.tablet_dir), "rb") as f:
                meta_bytes = f.read()
            live = TabletMetadata.from_json(meta_bytes).live_blocks() & self._c.bm.all_block_ids()
            yield meta_bytes, [self._c.bm.path(b) for b in sorted(live)]

    def schema_dict(self) -> dict[str, Any]:
        return self._c.info.to_dict()


__all__ = [
    "READ_AT_SNAPSHOT",
    "READ_LATEST",
    "ScanSpec",
    "Tablet",
    "TabletOptions",
    "TabletScanner",
]


def _deleted_rows(d: DiskRowSet) -> int:
    """Base rows of ``d`` whose last change is a delete, from its delta stores alone (sorted by row,
    then change order), so the count costs memory in proportion to the deltas, not to the rowset."""
    cols = [ROW_COL, TS_COL, SEQ_COL, LIVE_COL]
    parts = [t.select(cols) for t in d.delta_tables if t.num_rows]
    parts += [m.to_table().select(cols) for m in (*d.flushing_dms, d.dms) if len(m)]
    if not parts:
        return 0
    t = pa.concat_tables(parts).sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])
    rows = t.column(ROW_COL).to_numpy()
    last = np.ones(len(rows), dtype=bool)
    last[:-1] = rows[:-1] != rows[1:]
    live = t.column(LIVE_COL).to_numpy(zero_copy_only=False)
    return int(np.count_nonzero(~live[last]))
