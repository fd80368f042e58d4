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
from kudu_async.tablet.components import TabletComponents, TabletOptions
from kudu_async.tablet.diskrowset import (
    DiskRowSet,
)
from kudu_async.tablet.lock_manager import LockManager
from kudu_async.tablet.mvcc import MvccManager, MvccSnapshot
from kudu_async.tablet.ops import LoggedWrite, WriteOp, WriteResult
from kudu_async.tablet.read_path import READ_AT_SNAPSHOT, READ_LATEST, ReadPath, ScanSpec, TabletScanner
from kudu_async.tablet.rowset_maintenance import RowSetMaintenance
from kudu_async.tablet.schema_info import SchemaInfo
from kudu_async.tablet.write_path import PreparedWrite, WritePath


class Tablet:
    """One tablet replica's storage; see the module docstring for the contracts."""

    def __init__(self, components: TabletComponents) -> None:
        self.components = components  # the state the rooms share; read or change it only under its lock
        self._writes = WritePath(components)
        self._reads = ReadPath(components)
        self._maintenance = RowSetMaintenance(components)
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

    def earliest_needed_log_index(self) -> int:
        """Log anchor: WAL entries from this index on must be kept for bootstrap."""
        return self._maintenance.earliest_needed_log_index()

    # -- flush and compaction (see rowset_maintenance) ------------------------------------------------

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

    def stats(self) -> dict[str, int]:
        """Monotonic counters of flushes and compactions (per-tablet metrics)."""
        with self._c.lock:
            return dict(self._c.stats)

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
                self._maintenance.flush_all()
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
                        self._maintenance.write_metadata_locked(new_drs)
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
