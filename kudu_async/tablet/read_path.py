"""The read path of a tablet: scans (ordered or not, bounded batches) and point reads of one key.

A scan takes the schema, the MemRowSets' contents and the rowset list together under the component
lock, so it reads with one schema throughout even if an AlterSchema lands while it runs; it then reads
the rowsets' files outside the lock. A scan whose predicates pin the whole primary key is answered by
one key-index lookup instead (:meth:`ReadPath.point_lookup_key`), on the event loop when memory holds
the answer (:meth:`ReadPath.scan_in_memory`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common import key_encoding
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.tablet.components import TabletComponents
from kudu_async.tablet.diskrowset import DiskRowSet
from kudu_async.tablet.key_arrays import KeyView
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import KEY_COL, SchemaInfo

READ_LATEST = "READ_LATEST"
READ_AT_SNAPSHOT = "READ_AT_SNAPSHOT"


# The encoded key range ``[lo, hi)`` a comparison with one key value implies, from that value's own range
# ``[elo, ehi)`` (``ehi`` None: no key above it).
_RANGE_OF_OP: dict[str, Callable[[bytes, bytes | None], tuple[bytes | None, bytes | None]]] = {
    "=": lambda elo, ehi: (elo, ehi),
    ">=": lambda elo, ehi: (elo, None),
    ">": lambda elo, ehi: (ehi, None),
    "<": lambda elo, ehi: (None, elo),
    "<=": lambda elo, ehi: (None, ehi),
}


@dataclass
class ScanSpec:
    """What to read: projection, predicates, PK bounds (encoded keys), limit and read mode."""

    projection: list[str] | None = None
    predicates: list[ColumnPredicate] = field(default_factory=list)
    lower_key: bytes | None = None  # inclusive
    upper_key: bytes | None = None  # exclusive
    resume_after_key: bytes | None = None  # exclusive: the last key a previous scan returned
    limit: int | None = None
    read_mode: str = READ_LATEST
    snapshot_ts: int | None = None
    ordered: bool = False
    batch_bytes: int | None = None
    snapshot_wait_s: float = 10.0


class TabletScanner:
    """Iterator of Arrow record batches; ``last_key`` is the encoded key of the last row returned."""

    def __init__(
        self,
        batches: Iterator[tuple[pa.RecordBatch, bytes | None]],
        snapshot: MvccSnapshot,
        snapshot_ts: int | None,
        info: SchemaInfo,
    ) -> None:
        self._it = batches
        self.snapshot = snapshot
        self.snapshot_ts = snapshot_ts
        self.last_key: bytes | None = None
        self.info = info  # the schema this scan reads with (an alter may land while it runs)

    def __iter__(self) -> TabletScanner:
        return self

    def __next__(self) -> pa.RecordBatch:
        batch, last = next(self._it)
        if last is not None:
            self.last_key = last
        return batch

    def to_table(self) -> pa.Table | None:
        """Drain the scan into one table (tests, small scans); None when no row matched."""
        batches = list(self)
        return pa.Table.from_batches(batches) if batches else None


def _key_slice(t: pa.Table, lo: bytes | None, hi: bytes | None) -> pa.Table:
    """Rows of a key-sorted table with ``lo <= key < hi`` (None = unbounded)."""
    view = KeyView(t.column(KEY_COL).combine_chunks())
    a = 0 if lo is None else bisect.bisect_left(view, lo)
    b = len(view) if hi is None else bisect.bisect_left(view, hi)
    return t.slice(a, max(0, b - a))


def _ordered_pieces(
    mrs_tables: list[pa.Table],
    drs: list[tuple[DiskRowSet, pa.Table | None]],
    snap: MvccSnapshot,
    needed: list[str],
    lower: bytes | None,
    upper: bytes | None,
    lower_excl: bool,
) -> Iterator[pa.Table]:
    """Key-ordered pieces with memory bounded by the largest cluster of overlapping rowsets.

    Rowsets are grouped into clusters of transitively overlapping key ranges; clusters are disjoint,
    so each is merged (concat + sort) on its own and emitted in key order, with the MemRowSet rows
    that fall in it or in the gap before it.
    """
    mrs = pa.concat_tables(mrs_tables).sort_by([(KEY_COL, "ascending")]) if mrs_tables else None
    clusters: list[list[tuple[DiskRowSet, pa.Table | None]]] = []
    cmax = b""
    for item in drs:  # sorted by min key
        if clusters and item[0].min_key <= cmax:
            clusters[-1].append(item)
            cmax = max(cmax, item[0].max_key)
        else:
            clusters.append([item])
            cmax = item[0].max_key
    prev_hi: bytes | None = None
    for cl in clusters:
        lo = cl[0][0].min_key
        hi_incl = max(d.max_key for d, _ in cl)
        hi = hi_incl + b"\x00"  # smallest key above hi_incl
        parts = [d.scan(snap, needed, deltas, lower, upper, lower_excl) for d, deltas in cl]
        if mrs is not None:
            gap = _key_slice(mrs, prev_hi, lo)
            if gap.num_rows:
                yield gap
            parts.append(_key_slice(mrs, lo, hi))
        prev_hi = hi
        merged = pa.concat_tables(parts)
        yield merged.sort_by([(KEY_COL, "ascending")]) if len(parts) > 1 else merged
    if mrs is not None:
        tail = _key_slice(mrs, prev_hi, None)
        if tail.num_rows:
            yield tail


def _pinned_key(info: SchemaInfo, spec: ScanSpec) -> list[Any] | None:
    """The primary key's values when the predicates pin every key column by '=' (one value each)."""
    nk = info.num_key_columns
    pinned: dict[str, Any] = {}
    for p in spec.predicates:
        if p.op == "=" and p.column in info.key_names[:nk]:
            if p.column in pinned:  # two values for one key column: the general path decides
                return None
            pinned[p.column] = p.value
    if len(pinned) < nk:
        return None
    return [pinned[n] for n in info.key_names[:nk]]


class ReadPath:
    """Scans and point reads of a tablet's components."""

    def __init__(self, components: TabletComponents) -> None:
        self._c = components
        self._point_schemas: dict[tuple[SchemaInfo, tuple[str, ...]], pa.Schema] = {}

    def _locate_without_disk(self, key: bytes) -> tuple[DiskRowSet, int] | Literal[False] | None:
        """:meth:`_locate_on_disk` when every rowset that may hold ``key`` can be searched without the
        disk (:meth:`DiskRowSet.search_in_memory`); False when one cannot (only a worker may look).
        Range checks are in memory and bloom filters memory-mapped for every rowset."""
        for d in self._c.drs:
            if not d.may_contain_key(key):
                continue
            pos = d.search_in_memory(key)
            if pos is False:
                return False
            if pos is not None:
                return d, pos
        return None

    def _snapshot_for(self, spec: ScanSpec) -> tuple[MvccSnapshot, int | None]:
        if spec.read_mode == READ_LATEST:
            return self._c.mvcc.snapshot_latest(), None
        if spec.read_mode != READ_AT_SNAPSHOT:
            raise KuduInvalidArgument(f"unknown read mode {spec.read_mode!r}")
        ts = spec.snapshot_ts if spec.snapshot_ts is not None else self._c.clock.now()
        if ts < self._c.ancient_history_mark():
            raise KuduInvalidArgument(f"snapshot timestamp {ts} is older than the ancient history mark")
        self._c.clock.update(ts)
        self._c.mvcc.wait_clean_up_to(ts, spec.snapshot_wait_s)
        return MvccSnapshot.at(ts), ts

    def scan(self, spec: ScanSpec | None = None) -> TabletScanner:
        """Start a scan; returns an iterator of bounded-size Arrow record batches.

        The schema, MemRowSet contents and rowsets are taken together under the component lock, so a
        scan reads with one schema throughout even if an AlterSchema lands while it runs.
        """
        scanner = self._scan(spec or ScanSpec(), memory_only=False)
        assert scanner is not None
        return scanner

    def point_lookup_key(self, spec: ScanSpec) -> bytes | None:
        """The encoded primary key when ``spec`` reads at most one row found through the key index (every
        key column pinned by '='), else None: the host hands such small reads to its workers together,
        and tries :meth:`scan_in_memory` with the key first."""
        values = _pinned_key(self._c.info, spec)
        if values is None:
            return None
        try:
            return self._c.info.encode_key(values)
        except Exception:  # a value the encoder does not take: the general path evaluates it
            return None

    def scan_in_memory(self, spec: ScanSpec, key: bytes) -> TabletScanner | None:
        """The scan of lookup ``key`` (from :meth:`point_lookup_key`), started now, when memory can answer
        it (a MemRowSet holds the key, or every rowset that may hold it is in the block cache) and the
        component lock is free; None otherwise, and then :meth:`scan` in a worker answers. It reads no
        disk and never waits for the component lock, so the event loop may call it: lookups skip the
        hand-off to a worker, which costs more than the lookup itself."""
        if spec.read_mode != READ_LATEST and spec.snapshot_wait_s:
            return None  # its snapshot may still have to wait for writes in flight
        if self._c.locate_in_memory(key) is None and self._needs_disk(key):
            # Checked without the lock, so a lookup that must go to a worker costs the loop no more than a
            # dict lookup and the bloom probes; the answer itself is looked up under the lock.
            return None
        return self._scan(spec, memory_only=True, key=key)

    def _needs_disk(self, key: bytes) -> bool:
        """Whether a rowset that may hold ``key`` cannot be searched without the disk."""
        return any(d.may_contain_key(key) and d.search_in_memory(key) is False for d in self._c.drs)

    def _scan(self, spec: ScanSpec, memory_only: bool, key: bytes | None = None) -> TabletScanner | None:
        """``memory_only``: the on-loop form (None when only a worker may answer); ``key``: the lookup's
        encoded key when the caller has it already."""
        snap, snap_ts = self._snapshot_for(spec)
        if not self._c.lock.acquire(blocking=not memory_only):
            return None  # a flush or a write holds the components: not worth waiting for on the loop
        try:
            info = self._c.info
            projection = list(spec.projection) if spec.projection is not None else list(info.names)
            for c in projection:
                if c not in info.names:
                    raise KuduInvalidArgument(f"projected column '{c}' is not in the schema")
            pred_cols = [p.column for p in spec.predicates]
            for c in pred_cols:
                if c not in info.names:
                    raise KuduInvalidArgument(f"predicate column '{c}' is not in the schema")
            needed = [c for c in info.names if c in projection or c in pred_cols]
            point = self._point_read(info, spec, snap, needed, memory_only, key)
            if point is not None:  # every key column pinned by '=': one row looked up, no rowset scanned
                batches = self._point_batches(point, spec, projection, info.key_names)
                return TabletScanner(batches, snap, snap_ts, info)
            if memory_only:
                return None
            lower, upper = spec.lower_key, spec.upper_key
            for p in spec.predicates:
                plo, phi = self._key_bounds_of(info, p)
                if plo is not None and (lower is None or plo > lower):
                    lower = plo
                if phi is not None and (upper is None or phi < upper):
                    upper = phi
            lower_excl = False
            if spec.resume_after_key is not None and (lower is None or spec.resume_after_key >= lower):
                lower, lower_excl = spec.resume_after_key, True
            mrs_tables = [
                m.materialize(snap, lower, upper, lower_excl, columns=needed).select([*needed, KEY_COL])
                for m in self._c.memrowsets()
                if len(m)
            ]
            drs = [
                (d, d.delta_snapshot())
                for d in self._c.drs
                if (upper is None or d.min_key < upper) and (lower is None or d.max_key >= lower)
            ]
        finally:
            self._c.lock.release()
        drs.sort(key=lambda it: it[0].min_key)

        # An unordered scan reads rowsets without their encoded keys: a batch's resume key is encoded
        # from the key columns of its last row (see :meth:`_batches`).
        with_keys = [*needed, *(k for k in info.key_names if k not in needed)]

        def pieces() -> Iterator[pa.Table]:
            if spec.ordered:
                yield from _ordered_pieces(mrs_tables, drs, snap, needed, lower, upper, lower_excl)
                return
            yield from mrs_tables
            for d, deltas in drs:
                yield from d.scan_blocks(snap, with_keys, deltas, lower, upper, lower_excl, with_key=False)

        return TabletScanner(
            self._batches(self._filtered(pieces(), spec, projection, info), spec, projection, info),
            snap,
            snap_ts,
            info,
        )

    @staticmethod
    def _filtered(
        pieces: Iterator[pa.Table], spec: ScanSpec, projection: list[str], info: SchemaInfo
    ) -> Iterator[pa.Table]:
        """The rows of each piece that match every predicate, projected, plus ``_key`` or (a piece read
        without it) the key columns the projection lacks."""
        for t in pieces:
            if t.num_rows and spec.predicates:
                mask = None
                for p in spec.predicates:
                    m = p.evaluate(t)
                    mask = m if mask is None else pc.and_(mask, m)
                    mask = pc.fill_null(mask, False)
                t = t.filter(mask)
            if t.num_rows:
                if KEY_COL in t.column_names:
                    yield t.select([*projection, KEY_COL])
                else:
                    yield t.select([*projection, *(k for k in info.key_names if k not in projection)])

    @staticmethod
    def _point_batches(
        row: pa.Table, spec: ScanSpec, projection: list[str], key_names: list[str]
    ) -> Iterator[tuple[pa.RecordBatch, bytes | None]]:
        """The looked-up row as the scan's one batch, if the limit and every predicate that does not pin
        the key let it through (those that do are met by construction: the key encoding is exact)."""
        if not row.num_rows or spec.limit == 0:
            return
        for p in spec.predicates:
            if p.op == "=" and p.column in key_names:
                continue
            if not pc.fill_null(p.evaluate(row), False)[0].as_py():
                return
        yield row.select(projection).to_batches()[0], row.column(KEY_COL)[0].as_py()

    def _point_read(  # noqa: PLR0911 - one exit per case of the point-read path; split, it costs a call per read
        self,
        info: SchemaInfo,
        spec: ScanSpec,
        snap: MvccSnapshot,
        needed: list[str],
        memory_only: bool = False,
        key: bytes | None = None,
    ) -> pa.Table | None:
        """A scan whose predicates fix the whole primary key as the row (0 or 1 rows, with ``needed``
        and ``_key``) found through the key index, as a write finds it; None when the scan is not of that
        shape or the row's store reads another schema (the general path then answers), and with
        ``memory_only`` also when a rowset that may hold the key is not in memory (see
        :meth:`_locate_without_disk`). Only the scan's own key bounds are checked here: other predicates
        on key columns are evaluated on the row (:meth:`_point_batches`). Called under the component
        lock; per-row Python is fine here, it is one row."""
        if key is None:
            key = self.point_lookup_key(spec)
            if key is None:
                return None
        schema = self._point_schema(info, needed)
        if (
            (spec.lower_key is not None and key < spec.lower_key)
            or (spec.upper_key is not None and key >= spec.upper_key)
            or (spec.resume_after_key is not None and key <= spec.resume_after_key)
        ):
            return schema.empty_table()
        mem = self._c.locate_in_memory(key)
        if mem is not None:
            m, r = mem
            if m.info.names != info.names:
                return None
            # A row never changed since it was written is a zero-copy slice of the batch it arrived in,
            # which has no key column.
            written: pa.RecordBatch | pa.Table | None = m.base_row(r, snap)
            key_col = pa.array([key], pa.binary())
            vals = None if written is not None else m.visible_row(r, snap)
        else:
            found = self._locate_without_disk(key) if memory_only else self._c.locate_on_disk(key)
            if found is False:
                return None
            if found is None:
                return schema.empty_table()
            d, pos = found
            if d.info.names != info.names:
                return None
            written = d.base_row(pos, snap)  # a zero-copy slice of the base data, key column included
            key_col = None if written is None else written.column(KEY_COL)
            vals = None if written is not None else d.get_row(pos, snap)
        if written is not None:
            cols = [*(written.column(n) for n in needed), key_col]
            if all(c.type == f.type for c, f in zip(cols, schema, strict=True)):
                return pa.Table.from_arrays(cols, schema=schema)
            vals = m.visible_row(r, snap) if mem is not None else d.get_row(pos, snap)
        if vals is None:
            return schema.empty_table()
        return pa.table([*([vals[info.names.index(n)]] for n in needed), [key]], schema=schema)

    def _point_schema(self, info: SchemaInfo, needed: list[str]) -> pa.Schema:
        """The Arrow schema of a point read's row (``needed`` columns and ``_key``), memoised per schema."""
        memo_key = (info, tuple(needed))
        schema = self._point_schemas.get(memo_key)
        if schema is None:
            if len(self._point_schemas) >= 64:
                self._point_schemas.clear()
            cols = [info.names.index(n) for n in needed]
            schema = pa.schema([*(info.arrow.field(i) for i in cols), info.storage_arrow.field(KEY_COL)])
            self._point_schemas[memo_key] = schema
        return schema

    @staticmethod
    def _key_bounds_of(info: SchemaInfo, pred: ColumnPredicate) -> tuple[bytes | None, bytes | None]:
        """Encoded PK bounds ``[lo, hi)`` implied by a predicate on the first key column (pruning only:
        the predicate itself is still evaluated, so (None, None) is always a safe answer)."""
        if pred.column != info.key_names[0]:
            return None, None
        op, value = pred.op, pred.value
        if op not in ("=", "<", "<=", ">", ">=", "IN") or value is None:
            return None, None
        single = info.num_key_columns == 1

        def eq_bounds(v: Any) -> tuple[bytes, bytes | None]:
            if single:  # the whole key: the next key up is the encoding plus a zero byte
                e = key_encoding.encode_key(info.schema, [v])
                return e, e + b"\x00"
            pfx = key_encoding.encode_key_prefix(info.schema, [v])
            return pfx, key_encoding.prefix_successor(pfx) or None

        try:
            if op == "IN":
                if not value:
                    return None, None
                bounds = [eq_bounds(v) for v in value]
                lo = min(b[0] for b in bounds)
                his = [b[1] for b in bounds]
                return lo, (None if any(h is None for h in his) else max(h for h in his if h is not None))
            elo, ehi = eq_bounds(value)
        except Exception:  # a value the encoder does not take: no pruning, the predicate still filters
            return None, None
        return _RANGE_OF_OP[op](elo, ehi)

    def _batches(
        self, source: Iterator[pa.Table], spec: ScanSpec, projection: list[str], info: SchemaInfo
    ) -> Iterator[tuple[pa.RecordBatch, bytes | None]]:
        remaining = spec.limit
        target = spec.batch_bytes or self._c.options.scan_batch_bytes
        for t in source:
            if remaining is not None:
                if remaining <= 0:
                    return
                t = t.slice(0, remaining)
            per_row = max(1, t.nbytes // max(1, t.num_rows))
            step = max(1, target // per_row)
            for start in range(0, t.num_rows, step):
                piece = t.slice(start, step)
                if KEY_COL in piece.column_names:
                    last = piece.column(KEY_COL)[-1].as_py()
                else:  # the last row's key columns, encoded as the rowset stores them
                    last = info.encode_keys_array(piece.slice(piece.num_rows - 1, 1))[0].as_py()
                out = piece.select(projection).combine_chunks()
                batch = out.to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist([], out.schema)
                if remaining is not None:
                    remaining -= batch.num_rows
                yield batch, last

    def lookup(self, key: bytes, snapshot: MvccSnapshot | None = None) -> dict[str, Any] | None:
        """Point read of one encoded primary key at a snapshot (default: latest committed)."""
        snap = snapshot or self._c.mvcc.snapshot_latest()
        with self._c.lock:
            mem = self._c.locate_in_memory(key)
            if mem is not None:
                vals, names = mem[0].visible_row(mem[1], snap), mem[0].info.names
            else:
                disk = self._c.locate_on_disk(key)
                if disk is None:
                    return None
                vals, names = disk[0].get_row(disk[1], snap), disk[0].info.names  # the schema read with
        if vals is None:
            return None
        return {names[i]: vals[i] for i in range(len(names))}
