"""DiskRowSet: immutable columnar base data on disk plus its REDO delta stores.

The base data is one file (:mod:`kudu_async.tablet.rowset_file`: Parquet row groups with Kudu's
encodings and compression, or the older uncompressed Arrow IPC file), sorted by encoded primary key and
carrying the encoded key (``_key``) and the insert timestamp (``_ts``). Its sparse key index (first and
last key per block) is in the file's footer; blocks are decoded on demand through the node's block
cache. A bloom filter block, memory-mapped, answers "certainly absent" for key probes; min/max keys
live in the tablet metadata so rowsets can be pruned without opening them. Nothing per base row is
kept in anonymous memory: a row's last change comes from its block's ``_ts`` and a per-delta index.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from kudu_async.common.errors import KuduCorruption
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import RowSetMetadata
from kudu_async.tablet import rowset_file
from kudu_async.tablet.bloom import BloomFilter
from kudu_async.tablet.delta_store import (
    LIVE_COL,
    ROW_COL,
    SEQ_COL,
    DeltaMemStore,
    apply_deltas,
    delta_rows_to_mutations,
    delta_schema,
    mutations_to_table,
    set_col,
)
from kudu_async.tablet.key_arrays import KeyBatch, word_hashes
from kudu_async.tablet.memrowset import Mutation, apply_mutations
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.rowset_file import IpcBase, ParquetBase
from kudu_async.tablet.schema_info import KEY_COL, TS_COL, SchemaInfo

TARGET_ROWSET_BYTES = 32 * 1024 * 1024
# A lookup on the event loop filters a rowset's delta files whole (vectorised): beyond this many delta
# rows it goes to a worker instead.
LOOP_LOOKUP_MAX_DELTA_ROWS = 65_536


def file_column_ids(t: pa.Table) -> dict[int, str]:
    """column id -> name in a file, from the map ``SchemaInfo.file_metadata`` writes into every file."""
    return rowset_file.file_column_ids(t.schema.metadata)


def adapt_deltas(info: SchemaInfo, t: pa.Table) -> pa.Table:
    """A delta table written for an older schema, seen through the current one (see ``adapt_base``)."""
    ids = file_column_ids(t)
    if ids == dict(zip(info.ids, info.names, strict=True)):
        return t
    target = delta_schema(info)
    cols = [t.column(c) for c in (ROW_COL, TS_COL, SEQ_COL, LIVE_COL)]
    n = t.num_rows
    # A delta that set every value column of its day is a whole row (a re-insert): it sets an added
    # column too, to that column's default, as the row would read; partial updates leave it alone.
    whole_row = t.column(LIVE_COL)
    for name in t.column_names:
        if name.startswith("_set_"):
            whole_row = pc.and_(whole_row, t.column(name))
    for i in info.value_indices:
        f = info.arrow.field(i)
        src = ids.get(info.ids[i])
        if src is not None and src in t.column_names:
            cols += [t.column(src), t.column(set_col(src))]
        else:
            fill = rowset_file.fill(f, info.read_default(i), n)
            cols += [pa.chunked_array([fill], f.type), pc.fill_null(whole_row, False)]
    return pa.Table.from_arrays(cols, schema=target.with_metadata(info.file_metadata()))


def _ipc_writer(table: pa.Table, info: SchemaInfo) -> Callable[[BinaryIO], object]:
    table = table.replace_schema_metadata(info.file_metadata())

    def write(f: BinaryIO) -> None:
        sink = pa.PythonFile(f, mode="w")
        with ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=max(1, table.num_rows))

    return write


def read_ipc_table(path: str, buf: pa.Buffer | None = None) -> pa.Table:
    """Open an IPC file from ``buf`` (the whole file, already in memory: zero copy), or memory-mapped:
    columns are then paged in only when touched."""
    try:
        return ipc.open_file(pa.BufferReader(buf) if buf is not None else pa.memory_map(path, "r")).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise KuduCorruption(f"cannot read block {path}: {e}") from e


def _read_bloom(path: str) -> BloomFilter:
    """The bloom filter block, memory-mapped (file pages, not process memory)."""
    try:
        buf = pa.memory_map(path, "r").read_buffer()
        return BloomFilter.from_bytes(memoryview(buf))
    except (pa.ArrowException, OSError, ValueError, struct.error) as e:
        raise KuduCorruption(f"cannot read block {path}: {e}") from e


Run = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # sorted distinct rows, last ts, seq, live


class DeltaIndex:
    """The last change (timestamp, sequence, liveness) of every base row a delta touched.

    Runs of distinct rows sorted for ``searchsorted``, merged as they grow (sizes at least halve
    from run to run, so a lookup searches O(log n) runs). Memory follows the deltas, which flushes
    and compactions bound, never the base rows. Mutations are only ever added to a rowset's deltas
    (a flush or minor compaction moves them between stores), so the index stays valid across those.
    """

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: list[Run] = []

    @staticmethod
    def _last(rows: np.ndarray, ts: np.ndarray, seq: np.ndarray, live: np.ndarray) -> Run:
        order = np.lexsort((seq, ts, rows))
        rows, ts, seq, live = rows[order], ts[order], seq[order], live[order]
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = rows[:-1] != rows[1:]
        return rows[last], ts[last], seq[last], live[last]

    def add(self, rows: np.ndarray, ts: np.ndarray, seq: np.ndarray, live: np.ndarray) -> None:
        if not len(rows):
            return
        self._runs.append(
            self._last(
                np.asarray(rows, dtype=np.int64),
                np.asarray(ts, dtype=np.int64),
                np.asarray(seq, dtype=np.int64),
                np.asarray(live, dtype=bool),
            )
        )
        while len(self._runs) > 1 and 2 * len(self._runs[-1][0]) >= len(self._runs[-2][0]):
            b, a = self._runs.pop(), self._runs.pop()
            self._runs.append(self._merge(a, b))

    @staticmethod
    def _merge(a: Run, b: Run) -> Run:
        """Two runs as one: a stable sort of two sorted runs (linear), the newer change of a row kept."""
        rows = np.concatenate([a[0], b[0]])
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        ts, seq, live = (np.concatenate([x, y])[order] for x, y in zip(a[1:], b[1:], strict=True))
        dup = np.flatnonzero(rows[1:] == rows[:-1])  # (i, i + 1): a row in both runs, a's first
        if not len(dup):
            return rows, ts, seq, live
        b_older = (ts[dup + 1] < ts[dup]) | ((ts[dup + 1] == ts[dup]) & (seq[dup + 1] < seq[dup]))
        keep = np.ones(len(rows), dtype=bool)
        keep[np.where(b_older, dup + 1, dup)] = False
        return rows[keep], ts[keep], seq[keep], live[keep]

    def add_table(self, t: pa.Table) -> None:
        if t.num_rows:
            self.add(
                t.column(ROW_COL).to_numpy(),
                t.column(TS_COL).to_numpy(),
                t.column(SEQ_COL).to_numpy(),
                t.column(LIVE_COL).to_numpy(zero_copy_only=False),
            )

    def lookup(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(changed, last-change ts int64, live bool) of base rows ``q``."""
        n = len(q)
        found = np.zeros(n, dtype=bool)
        ts = np.zeros(n, dtype=np.int64)
        seq = np.zeros(n, dtype=np.int64)
        live = np.ones(n, dtype=bool)
        for rows, rts, rseq, rlive in self._runs:
            i = np.minimum(np.searchsorted(rows, q), len(rows) - 1)
            hit = rows[i] == q
            t, s = rts[i], rseq[i]
            newer = hit & (~found | (t > ts) | ((t == ts) & (s > seq)))
            ts[newer], seq[newer], live[newer] = t[newer], s[newer], rlive[i][newer]
            found |= hit
        return found, ts, live

    def nbytes(self) -> int:
        return sum(sum(a.nbytes for a in r) for r in self._runs)


class DiskRowSet:
    """One flushed rowset; the tablet mutates its delta stores only under the component lock."""

    def __init__(
        self,
        info: SchemaInfo,
        meta: RowSetMetadata,
        bm: BlockManager,
        deltas: DeltaIndex | None = None,
        *,
        fresh: bool = False,
        written: pa.Table | None = None,
    ) -> None:
        """Open a rowset's files seen through ``info``; ``deltas`` reuses the delta index of the same
        files opened before (:meth:`built_delta_index`; it depends on rows and timestamps, not on the
        schema). ``fresh``: just written (a flush or compaction output, the newest data): its blocks
        may evict older ones from the block cache. ``written``: the base rows just written, which fill
        the cache without decoding the file. Without them nothing per block is read here (the footer
        only), so a restart's bootstrap does not grow with the data stored: :meth:`warm_cache` fills
        the cache later."""
        self.info = info
        self.meta = meta
        self.bm = bm
        self._mapped: set[str] = set()  # delta blocks read memory-mapped, not from the block cache
        self._base_path = bm.path(meta.base_block)
        self.base: ParquetBase | IpcBase
        if rowset_file.file_kind(self._base_path) == "parquet":
            self.base = ParquetBase(self._base_path, info, bm.cache)
        else:
            self.base = IpcBase(self._base_path, info)
        if self.base.num_rows != meta.num_rows:
            raise KuduCorruption(f"rowset {meta.id}: {self.base.num_rows} rows, metadata says {meta.num_rows}")
        if written is not None:  # opening reads the footer only: see :meth:`warm_cache`
            self.base.preload(written, make_room=fresh)
        self.bloom = _read_bloom(bm.path(meta.bloom_block))
        self.min_key = bytes.fromhex(meta.min_key_hex)
        self.max_key = bytes.fromhex(meta.max_key_hex)
        self.delta_tables: list[pa.Table] = [
            adapt_deltas(info, self.open_block(b, make_room=fresh)) for b in meta.delta_blocks
        ]
        self.dms = DeltaMemStore(info)
        self.flushing_dms: list[DeltaMemStore] = []
        # Built on first use by a write or a lookup that needs a row's last change, then kept current
        # by every mutation.
        self._deltas: DeltaIndex | None = deltas
        self.busy = False
        self.retired = False

    def warm_cache(self) -> bool:
        """Decode this rowset's blocks into the block cache's free room (never evicting: an opened
        rowset is older than what the cache holds); False when the cache refused a block. Reads the
        file: call in a worker."""
        return self.base.preload(None, make_room=False)

    def open_block(self, block_id: str, make_room: bool = True) -> pa.Table:
        """One of this rowset's delta files as a table: from the node's block cache when it admits the
        file (pinned while it lives), else memory-mapped. Reads the file: call in a worker."""
        path = self.bm.path(block_id)
        try:
            buf = self.bm.cached(block_id, None, make_room=make_room)
        except OSError as e:  # as read_ipc_table reports a missing or unreadable block
            raise KuduCorruption(f"cannot read block {path}: {e}") from e
        if buf is None:
            self._mapped.add(block_id)
        return read_ipc_table(path, buf)

    def resident(self) -> bool:
        """True when every file of the rowset is held in memory (the block cache): a lookup in it reads
        no disk. Call under the component lock."""
        return not self._mapped.intersection(self.meta.delta_blocks) and self.base.fully_cached()

    def _deltas_in_memory(self) -> bool:
        """The delta part of a lookup reads only memory and stays short: the delta files are cached and
        small (a lookup filters them whole), and the delta index exists (or nothing changed)."""
        if self._mapped.intersection(self.meta.delta_blocks):
            return False
        if self._deltas is None and (self.delta_tables or self.flushing_dms or len(self.dms)):
            return False
        return self.num_delta_rows_on_disk() <= LOOP_LOOKUP_MAX_DELTA_ROWS

    def readable_without_disk(self) -> bool:
        """Every point lookup here reads only memory (see :meth:`search_in_memory` for one key)."""
        return self._deltas_in_memory() and self.resident()

    def search_in_memory(self, key: bytes) -> int | Literal[False] | None:
        """:meth:`search` of ``key`` when its answer and the row need no disk read (the key's block and
        its columns cached, deltas in memory); False when only a worker may look."""
        if not self._deltas_in_memory():
            return False
        return self.base.search_in_memory(key, self.base.all_columns)

    def delta_index(self) -> DeltaIndex:
        """The last change of every changed base row; call under the component lock. Built vectorised
        from every delta store on first use."""
        if self._deltas is None:
            idx = DeltaIndex()
            for t in self.delta_tables:
                idx.add_table(t)
            for d in (*self.flushing_dms, self.dms):
                if len(d):
                    idx.add_table(d.to_table())
            self._deltas = idx
        return self._deltas

    def built_delta_index(self) -> DeltaIndex | None:
        """:meth:`delta_index` if it has been built (for reopening the same files), else None."""
        return self._deltas

    @property
    def id(self) -> int:
        return self.meta.id

    def num_rows(self) -> int:
        return self.meta.num_rows

    def base_bytes(self) -> int:
        """The base data's size decoded (what a compaction reading it holds)."""
        return self.base.decoded_bytes

    def memory_bytes(self) -> int:
        """Process memory this rowset holds while open, outside the block cache and its DeltaMemStores:
        the base's packed sparse key index and the delta index."""
        deltas = self._deltas
        return self.base.resident_bytes() + (0 if deltas is None else deltas.nbytes())

    def delta_memory_bytes(self) -> int:
        return self.dms.memory_bytes() + sum(d.memory_bytes() for d in self.flushing_dms)

    def num_delta_rows_on_disk(self) -> int:
        return sum(t.num_rows for t in self.delta_tables)

    def _has_deltas(self) -> bool:
        return bool(self.delta_tables or self.flushing_dms or len(self.dms))

    # -- key probes ----------------------------------------------------------------------------

    def may_contain_key(self, key: bytes) -> bool:
        return self.min_key <= key <= self.max_key and self.bloom.may_contain(key)

    def find_row(self, key: bytes) -> int | None:
        """Position of ``key`` in the base data, by range check, bloom filter and the key index."""
        if not self.may_contain_key(key):
            return None
        return self.search(key)

    def search(self, key: bytes) -> int | None:
        """Key-index search of one key in the base data (no range or bloom check); may read a block."""
        return self.base.search(key)

    def find_rows(self, kb: KeyBatch, rows: np.ndarray) -> np.ndarray:
        """Positions in the base data of the keys ``kb`` holds at ``rows`` (-1: not in this rowset).

        The vectorised :meth:`find_row`: the caller passes rows whose keys are within [min, max]; a
        batch bloom probe drops most absent keys, the key index places the others block by block.
        """
        out = np.full(len(rows), -1, dtype=np.int64)
        if not len(rows) or self.base.num_rows == 0:
            return out
        hashes = kb.word_hashes() if self.bloom.words else kb.hashes()
        sub = np.flatnonzero(self.bloom.may_contain_hashes(hashes[rows]))
        if not len(sub):
            return out
        out[sub] = self.base.find(kb, rows[sub])
        return out

    def row_bounds(self, lower: bytes | None, upper: bytes | None, lower_exclusive: bool) -> tuple[int, int]:
        lo = 0 if lower is None else self.base.bisect(lower, right=lower_exclusive)
        hi = self.base.num_rows if upper is None else self.base.bisect(upper)
        return lo, max(lo, hi)

    def rows_latest(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(timestamp of the last change, live now) of base rows, deltas included: (int64, bool) arrays."""
        ts = self.base.ts_of(rows)
        if not self._has_deltas():
            return ts, np.ones(len(rows), dtype=bool)
        found, dts, live = self.delta_index().lookup(np.asarray(rows, dtype=np.int64))
        ts[found] = dts[found]
        return ts, live

    def mutate(self, row: int, m: Mutation) -> None:
        if self.dms.created_at is None:
            self.dms.created_at = time.monotonic()
        self.dms.add(row, m)
        if self._deltas is not None:
            self._deltas.add(np.array([row]), np.array([m.ts]), np.array([m.seq]), np.array([m.live]))

    def mutate_batch(
        self, rows: np.ndarray, table: pa.Table, reinsert: np.ndarray, log_index: int, ts: int, nbytes: int
    ) -> None:
        """Many mutations of one write batch at once (a :func:`delta_chunk` for base ``rows``, in
        sequence order)."""
        if self.dms.created_at is None:
            self.dms.created_at = time.monotonic()
        self.dms.add_chunk(table, reinsert, log_index, ts, nbytes)
        if self._deltas is not None:
            self._deltas.add_table(table)

    # -- reads -------------------------------------------------------------------------------------

    def read_base(self) -> pa.Table:
        """The whole base data, decoded (compaction input: bounded by the compaction budget)."""
        return self.base.read_all()

    def delta_snapshot(self) -> pa.Table | None:
        """All deltas (files, flushing and active DMS) as one table; call under the component lock."""
        parts = [*self.delta_tables, *(d.to_table() for d in self.flushing_dms if len(d))]
        if len(self.dms):
            parts.append(self.dms.to_table())
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def scan_blocks(
        self,
        snap: MvccSnapshot,
        columns: list[str],
        deltas: pa.Table | None,
        lower: bytes | None,
        upper: bytes | None,
        lower_exclusive: bool = False,
        *,
        with_key: bool = True,
    ) -> Iterator[pa.Table]:
        """Rows live at ``snap`` within the key bounds: ``columns`` plus ``_key``, a few blocks at a
        time (a scan holds one step of decoded rows, not the rowset), vectorised.

        ``with_key=False``: without ``_key`` (the costliest column to decode, measured 17 M rows/s
        against 150-500 for the value columns); a caller that needs a row's key encodes it from the
        key columns. ``_ts`` is decoded only when the snapshot may not see every row of the rowset."""
        lo, hi = self.row_bounds(lower, upper, lower_exclusive)
        value_cols = [c for c in columns if c not in self.info.key_names]
        check_ts = snap.may_have_invisible(self.meta.max_ts)
        read = [*columns, KEY_COL] if with_key else list(columns)
        if check_ts:
            read.append(TS_COL)
        start = lo
        drows: np.ndarray | None = None
        if deltas is not None and deltas.num_rows:
            # Sorted by row once, so each step applies only its own slice of the deltas.
            deltas = deltas.sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])
            drows = deltas.column(ROW_COL).to_numpy()
        for t in self.base.ranges(lo, hi, read):
            n = t.num_rows
            step_deltas = None
            if drows is not None and deltas is not None:
                a, b = np.searchsorted(drows, [start, start + n])
                step_deltas = deltas.slice(int(a), int(b - a)) if b > a else None
            t, live = apply_deltas(t, start, step_deltas, snap, value_cols)
            start += n
            masks = []
            if check_ts:
                masks.append(snap.visible_mask(t.column(TS_COL)))
            if live is not None:
                masks.append(pa.array(live))
            if masks:
                m = masks[0] if len(masks) == 1 else pc.and_(masks[0], masks[1])
                t = t.filter(m)
            yield t.drop_columns([TS_COL]) if check_ts else t

    def scan(
        self,
        snap: MvccSnapshot,
        columns: list[str],
        deltas: pa.Table | None,
        lower: bytes | None,
        upper: bytes | None,
        lower_exclusive: bool = False,
    ) -> pa.Table:
        """:meth:`scan_blocks` as one table (an ordered scan merges a cluster of rowsets whole)."""
        parts = list(self.scan_blocks(snap, columns, deltas, lower, upper, lower_exclusive))
        if not parts:
            return self.base.take(np.zeros(0, dtype=np.int64), [*columns, KEY_COL])
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _changed(self, row: int) -> bool:
        """Whether any delta (file or memory) touches base row ``row``; builds the delta index if needed."""
        if not self._has_deltas():
            return False
        return bool(self.delta_index().lookup(np.array([row], dtype=np.int64))[0][0])

    def base_row(self, row: int, snap: MvccSnapshot) -> pa.Table | None:
        """Base row ``row`` as a one-row slice of its block (every column, ``_key`` and ``_ts``) when
        ``snap`` sees it as it was written (visible, and never changed since); else None and
        :meth:`get_row` answers."""
        if self._changed(row):
            return None
        t = self.base.row(row, self.base.all_columns)
        if not snap.is_visible(int(t.column(TS_COL)[0].as_py())):
            return None
        return t

    def get_row(self, row: int, snap: MvccSnapshot) -> dict[int, Any] | None:
        """One row as of ``snap`` (point lookup path; per-row Python is fine here)."""
        t = self.base.row(row, self.base.all_columns)
        if not snap.is_visible(int(t.column(TS_COL)[0].as_py())):
            return None
        values = {i: t.column(i)[0].as_py() for i in range(len(self.info.names))}
        stores = [d for d in (*self.flushing_dms, self.dms) if len(d)]
        if not self._changed(row):
            return values  # never changed since it was written
        muts: list[Mutation] = []
        for dt in self.delta_tables:
            sub = dt.filter(pc.equal(dt.column(ROW_COL), pa.scalar(row, pa.uint32())))
            if sub.num_rows:
                muts.extend(m for _, m in delta_rows_to_mutations(self.info, sub, {row: b""}))
        for d in stores:
            muts.extend(d.mutations_of(row))
        muts.sort(key=lambda m: (m.ts, m.seq))
        return apply_mutations(values, muts, snap)


def write_rowsets(
    bm: BlockManager,
    info: SchemaInfo,
    table: pa.Table,
    deltas: list[tuple[int, Mutation]] | pa.Table | None,
    first_id: int,
    target_bytes: int = TARGET_ROWSET_BYTES,
    written: list[pa.Table] | None = None,
) -> list[RowSetMetadata]:
    """Write a key-sorted table (with ``_key``/``_ts``) as rowsets of about ``target_bytes`` each.

    ``deltas``: REDO mutations of its rows, as (position, Mutation) pairs or as a delta table whose
    ``_row`` is the position. Returns their metadata; nothing refers to the blocks until the caller
    commits new tablet metadata. ``written`` receives each rowset's base table (for
    :class:`DiskRowSet`'s ``written``).
    """
    n = table.num_rows
    if n == 0:
        return []
    per_row = max(1, table.nbytes // n)
    rows_per_rs = max(1, target_bytes // per_row)
    pieces = math.ceil(n / rows_per_rs)
    by_piece: list[list[tuple[int, Mutation]]] = [[] for _ in range(pieces)]
    delta_table = deltas if isinstance(deltas, pa.Table) and deltas.num_rows else None
    if isinstance(deltas, list):
        for pos, m in deltas:
            by_piece[pos // rows_per_rs].append((pos % rows_per_rs, m))
    piece_of = (
        delta_table.column(ROW_COL).to_numpy().astype(np.int64) // rows_per_rs if delta_table is not None else None
    )
    out = []
    for p in range(pieces):
        piece = table.slice(p * rows_per_rs, rows_per_rs).combine_chunks()
        keys = piece.column(KEY_COL)
        if written is not None:
            written.append(piece)
        base_block = bm.write_block(lambda f, piece=piece: rowset_file.write_base(f, info, piece))  # type: ignore[misc]
        bloom = BloomFilter.from_word_hashes(word_hashes(keys.combine_chunks()))
        data = bloom.to_bytes()
        bloom_block = bm.write_block(lambda f, data=data: f.write(data))  # type: ignore[misc]
        delta_blocks = []
        max_ts = int(pc.max(piece.column(TS_COL)).as_py())
        if by_piece[p]:
            dt = mutations_to_table(info, by_piece[p])
            delta_blocks.append(bm.write_block(_ipc_writer(dt, info)))
        elif piece_of is not None and delta_table is not None and (piece_of == p).any():
            dt = delta_table.filter(pa.array(piece_of == p))
            rows = dt.column(ROW_COL).to_numpy().astype(np.int64) - p * rows_per_rs
            dt = dt.set_column(dt.schema.get_field_index(ROW_COL), ROW_COL, pa.array(rows.astype(np.uint32)))
            dt = dt.sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])
            delta_blocks.append(bm.write_block(_ipc_writer(dt, info)))
        out.append(
            RowSetMetadata(
                id=first_id + p,
                base_block=base_block,
                bloom_block=bloom_block,
                num_rows=piece.num_rows,
                min_key_hex=keys[0].as_py().hex(),
                max_key_hex=keys[-1].as_py().hex(),
                max_ts=max_ts,
                delta_blocks=delta_blocks,
            )
        )
    return out


def write_delta_block(bm: BlockManager, table: pa.Table, info: SchemaInfo) -> str:
    return bm.write_block(_ipc_writer(table, info))
