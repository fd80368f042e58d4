"""DiskRowSet: immutable columnar base data on disk plus its REDO delta stores.

File format (measured against Parquet, see ``docs``/report): Arrow IPC *file* format, uncompressed,
read memory-mapped, one record batch per rowset. Base data is sorted by encoded primary key and carries
the encoded key (``_key``, which doubles as the key index searched by binary search) and the insert
timestamp (``_ts``). A bloom filter block answers "certainly absent" for key probes; min/max keys live
in the tablet metadata so rowsets can be pruned without opening them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from kudu_async.common.errors import KuduCorruption
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import RowSetMetadata
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
from kudu_async.tablet.key_arrays import KeyBatch, SortedKeys
from kudu_async.tablet.memrowset import Mutation, apply_mutations
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import FILE_IDS_META, KEY_COL, TS_COL, SchemaInfo

TARGET_ROWSET_BYTES = 32 * 1024 * 1024
# A lookup on the event loop filters a rowset's delta files whole (vectorised): beyond this many delta
# rows it goes to a worker instead.
LOOP_LOOKUP_MAX_DELTA_ROWS = 65_536


def file_column_ids(t: pa.Table) -> dict[int, str]:
    """column id -> name in a file, from the map ``SchemaInfo.file_metadata`` writes into every file."""
    md = t.schema.metadata
    if not md or FILE_IDS_META not in md:
        raise KuduCorruption("block has no column id map")
    return {int(i): name for name, i in json.loads(md[FILE_IDS_META]).items()}


def _needs_adapting(info: SchemaInfo, ids: dict[int, str]) -> bool:
    return ids != dict(zip(info.ids, info.names, strict=True))


def _fill(field: pa.Field, default: Any, n: int) -> pa.Array:
    if default is None:
        return pa.nulls(n, field.type)
    return pa.repeat(pa.scalar(default, field.type), n)


def adapt_base(info: SchemaInfo, t: pa.Table) -> pa.Table:
    """A base table written for an older schema, seen through the current one (matched by column id):
    renamed columns under their new name, dropped ones gone, added ones filled with their read default."""
    ids = file_column_ids(t)
    if not _needs_adapting(info, ids):
        return t
    cols, fields = [], []
    for i, (cid, f) in enumerate(zip(info.ids, info.arrow, strict=True)):
        src = ids.get(cid)
        if src is not None and src in t.column_names:
            cols.append(t.column(src))
        else:
            cols.append(pa.chunked_array([_fill(f, info.read_default(i), t.num_rows)], f.type))
        fields.append(f)
    for name in (KEY_COL, TS_COL):
        cols.append(t.column(name))
        fields.append(t.schema.field(name))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=info.file_metadata()))


def adapt_deltas(info: SchemaInfo, t: pa.Table) -> pa.Table:
    """A delta table written for an older schema, seen through the current one (see ``adapt_base``)."""
    ids = file_column_ids(t)
    if not _needs_adapting(info, ids):
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
            fill = _fill(f, info.read_default(i), n)
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


class DiskRowSet:
    """One flushed rowset; the tablet mutates its delta stores only under the component lock."""

    def __init__(
        self,
        info: SchemaInfo,
        meta: RowSetMetadata,
        bm: BlockManager,
        state: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        """Open a rowset's files seen through ``info``; ``state`` reuses the per-row last-change arrays
        of the same files opened before (:meth:`state`; they depend on rows and timestamps, not on the
        schema). ``fresh``: just written (a flush or compaction output, the newest data and in the page
        cache): it may evict older data from the block cache; an old rowset opened only takes free room."""
        self.info = info
        self.meta = meta
        self.bm = bm
        self._mapped: set[str] = set()  # blocks read memory-mapped, not from the block cache
        self._base_path = bm.path(meta.base_block)
        self._use_base(adapt_base(info, self.open_block(meta.base_block, evictable=True, make_room=fresh)))
        if self.base.num_rows != meta.num_rows:
            raise KuduCorruption(f"rowset {meta.id}: {self.base.num_rows} rows, metadata says {meta.num_rows}")
        with open(bm.path(meta.bloom_block), "rb") as f:
            self.bloom = BloomFilter.from_bytes(f.read())
        self.min_key = bytes.fromhex(meta.min_key_hex)
        self.max_key = bytes.fromhex(meta.max_key_hex)
        self.delta_tables: list[pa.Table] = [
            adapt_deltas(info, self.open_block(b, make_room=fresh)) for b in meta.delta_blocks
        ]
        self.dms = DeltaMemStore(info)
        self.flushing_dms: list[DeltaMemStore] = []
        # Per base row: timestamp of the last change, live now, changed at all (deltas included);
        # built on first use by a write or a point lookup, then kept current by every mutation.
        self._state: tuple[np.ndarray, np.ndarray, np.ndarray] | None = (
            None if state is None else (state[0].copy(), state[1].copy(), state[2].copy())
        )
        self.busy = False
        self.retired = False

    def open_block(self, block_id: str, evictable: bool = False, make_room: bool = True) -> pa.Table:
        """One of this rowset's files as a table: from the node's block cache when it admits the file,
        else memory-mapped. The base data is ``evictable`` (the cache may take it back, see
        :meth:`_evicted`); delta files, small, stay while they live. ``make_room``: a newly written file
        may evict older data; an old one opened takes free room only. Reads the file: call in a worker."""
        path = self.bm.path(block_id)
        try:
            buf = self.bm.cached(block_id, self._evicted if evictable else None, make_room=make_room)
        except OSError as e:  # as read_ipc_table reports a missing or unreadable block
            raise KuduCorruption(f"cannot read block {path}: {e}") from e
        if buf is None:
            self._mapped.add(block_id)
        return read_ipc_table(path, buf)

    def _evicted(self, path: str) -> None:
        """The block cache took back the base data's buffer to make room: map the file instead. The
        content is the same, so a reader still holding the old tables reads the same rows, and their
        memory is freed when the last one lets go. Marked mapped first: the loop stops reading here."""
        if path != self._base_path:
            return
        self._mapped.add(self.meta.base_block)
        self._use_base(adapt_base(self.info, read_ipc_table(path)))

    def _use_base(self, base: pa.Table) -> None:
        """Read the base data from ``base`` (and its key column and fixed-width key view from it)."""
        keys = base.column(KEY_COL).combine_chunks()
        self.base, self.keys, self._sorted = base, keys, SortedKeys(keys)

    def touch(self) -> None:
        """This rowset's base data was read: the block cache keeps it longest."""
        self.bm.touch(self._base_path)

    def resident(self) -> bool:
        """True when every file of the rowset is held in memory (the block cache): a lookup in it reads
        no disk, so the event loop may run it. Call under the component lock."""
        return not self._mapped or (
            self.meta.base_block not in self._mapped and not self._mapped.intersection(self.meta.delta_blocks)
        )

    def readable_without_disk(self) -> bool:
        """A point lookup here reads only memory and stays short: the files are cached, the per-row
        change state exists already (or nothing changed since the flush), and the delta files, which a
        lookup filters whole, are small. Call under the component lock."""
        if not self.resident():
            return False
        if self._state is None and (self.delta_tables or self.flushing_dms or len(self.dms)):
            return False
        return self.num_delta_rows_on_disk() <= LOOP_LOOKUP_MAX_DELTA_ROWS

    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(last-change timestamp int64, live bool, mutated bool) per base row; call under the
        component lock. Built vectorised from the base timestamps and every delta store."""
        if self._state is None:
            n = self.base.num_rows
            ts = self.base.column(TS_COL).to_numpy().astype(np.int64)
            live = np.ones(n, dtype=bool)
            mutated = np.zeros(n, dtype=bool)
            cols = [ROW_COL, TS_COL, SEQ_COL, LIVE_COL]
            parts = [t.select(cols) for t in self.delta_tables if t.num_rows]
            parts += [d.to_table().select(cols) for d in (*self.flushing_dms, self.dms) if len(d)]
            if parts:
                d = pa.concat_tables(parts).sort_by(
                    [(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")]
                )
                rows = d.column(ROW_COL).to_numpy().astype(np.int64)
                last = np.ones(len(rows), dtype=bool)
                last[:-1] = rows[:-1] != rows[1:]
                ts[rows[last]] = d.column(TS_COL).to_numpy()[last].astype(np.int64)
                live[rows[last]] = d.column(LIVE_COL).to_numpy(zero_copy_only=False)[last]
                mutated[rows] = True
            self._state = (ts, live, mutated)
        return self._state

    def built_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`state` if it has been built (for reopening the same files), else None."""
        return self._state

    @property
    def id(self) -> int:
        return self.meta.id

    def num_rows(self) -> int:
        return self.meta.num_rows

    def base_bytes(self) -> int:
        nbytes: int = self.base.nbytes
        return nbytes

    def delta_memory_bytes(self) -> int:
        return self.dms.memory_bytes() + sum(d.memory_bytes() for d in self.flushing_dms)

    def num_delta_rows_on_disk(self) -> int:
        return sum(t.num_rows for t in self.delta_tables)

    # -- key probes ----------------------------------------------------------------------------

    def may_contain_key(self, key: bytes) -> bool:
        return self.min_key <= key <= self.max_key and self.bloom.may_contain(key)

    def find_row(self, key: bytes) -> int | None:
        """Position of ``key`` in the base data, by range check, bloom filter and binary search."""
        if not self.may_contain_key(key):
            return None
        return self.search(key)

    def search(self, key: bytes) -> int | None:
        """Binary search of one key in the base data (no range or bloom check)."""
        self.touch()
        return self._sorted.search(key)

    def find_rows(self, kb: KeyBatch, rows: np.ndarray) -> np.ndarray:
        """Positions in the base data of the keys ``kb`` holds at ``rows`` (-1: not in this rowset).

        The vectorised :meth:`find_row`: the caller passes rows whose keys are within [min, max]; a
        batch bloom probe drops most absent keys, one ``searchsorted`` places the others.
        """
        out = np.full(len(rows), -1, dtype=np.int64)
        if not len(rows) or self.base.num_rows == 0:
            return out
        sub = np.flatnonzero(self.bloom.may_contain_hashes(kb.hashes()[rows]))
        if not len(sub):
            return out
        self.touch()
        out[sub] = self._sorted.find(kb, rows[sub])
        return out

    def row_bounds(self, lower: bytes | None, upper: bytes | None, lower_exclusive: bool) -> tuple[int, int]:
        lo = 0 if lower is None else self._sorted.bisect(lower, right=lower_exclusive)
        hi = len(self.keys) if upper is None else self._sorted.bisect(upper)
        return lo, max(lo, hi)

    def rows_latest(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(timestamp of the last change, live now) of base rows, deltas included: (int64, bool) arrays."""
        ts, live, _ = self.state()
        return ts[rows], live[rows]

    def mutate(self, row: int, m: Mutation) -> None:
        if self.dms.created_at is None:
            self.dms.created_at = time.monotonic()
        self.dms.add(row, m)
        if self._state is not None:
            ts, live, mutated = self._state
            ts[row], live[row], mutated[row] = m.ts, m.live, True

    def mutate_batch(
        self, rows: np.ndarray, table: pa.Table, reinsert: np.ndarray, log_index: int, ts: int, nbytes: int
    ) -> None:
        """Many mutations of one write batch at once (a :func:`delta_chunk` for base ``rows``, in
        sequence order)."""
        if self.dms.created_at is None:
            self.dms.created_at = time.monotonic()
        self.dms.add_chunk(table, reinsert, log_index, ts, nbytes)
        if self._state is not None:
            st_ts, st_live, mutated = self._state
            rev = rows[::-1]
            _, first = np.unique(rev, return_index=True)  # the last mutation of each row
            last = len(rows) - 1 - first
            st_ts[rows[last]] = ts
            st_live[rows[last]] = table.column(LIVE_COL).to_numpy(zero_copy_only=False)[last]
            mutated[rows] = True

    def dms_mutations(self) -> list[Mutation]:
        """The active DeltaMemStore's mutations as :class:`Mutation` objects with keys (carry-over)."""
        key_cols = self.base.select(self.info.key_names)

        def key_values(rows: np.ndarray) -> list[tuple[Any, ...]]:
            sub = key_cols.take(pa.array(rows))
            return list(zip(*[c.to_pylist() for c in sub.columns], strict=True))

        muts = self.dms.mutations(lambda rows: self.keys.take(pa.array(rows)).to_pylist(), key_values)
        return [m for _, m in muts]

    # -- reads -------------------------------------------------------------------------------------

    def delta_snapshot(self) -> pa.Table | None:
        """All deltas (files, flushing and active DMS) as one table; call under the component lock."""
        parts = [*self.delta_tables, *(d.to_table() for d in self.flushing_dms if len(d))]
        if len(self.dms):
            parts.append(self.dms.to_table())
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def scan(
        self,
        snap: MvccSnapshot,
        columns: list[str],
        deltas: pa.Table | None,
        lower: bytes | None,
        upper: bytes | None,
        lower_exclusive: bool = False,
    ) -> pa.Table:
        """Rows live at ``snap`` within the key bounds: ``columns`` plus ``_key``, vectorised."""
        self.touch()
        lo, hi = self.row_bounds(lower, upper, lower_exclusive)
        if lo >= hi:
            return self.base.select([*columns, KEY_COL]).slice(0, 0)
        t = self.base.select([*columns, KEY_COL, TS_COL]).slice(lo, hi - lo)
        value_cols = [c for c in columns if c not in self.info.key_names]
        t, live = apply_deltas(t, lo, deltas, snap, value_cols)
        masks = []
        if snap.may_have_invisible(self.meta.max_ts):
            masks.append(snap.visible_mask(t.column(TS_COL)))
        if live is not None:
            masks.append(pa.array(live))
        if masks:
            m = masks[0] if len(masks) == 1 else pc.and_(masks[0], masks[1])
            t = t.filter(m)
        return t.drop_columns([TS_COL])

    def _changed(self, row: int) -> bool:
        """Whether any delta (file or memory) touches base row ``row``; builds :meth:`state` if needed."""
        if not (self.delta_tables or self.flushing_dms or len(self.dms)):
            return False
        return bool(self.state()[2][row])

    def base_row(self, row: int, snap: MvccSnapshot) -> pa.Table | None:
        """Base row ``row`` as a one-row slice of the base data (zero copy) when ``snap`` sees it as it was
        written (visible, and never changed since); else None and :meth:`get_row` answers."""
        if self._changed(row) or not snap.is_visible(int(self.base.column(TS_COL)[row].as_py())):
            return None
        return self.base.slice(row, 1)

    def get_row(self, row: int, snap: MvccSnapshot) -> dict[int, Any] | None:
        """One row as of ``snap`` (point lookup path; per-row Python is fine here)."""
        if not snap.is_visible(int(self.base.column(TS_COL)[row].as_py())):
            return None
        values = {i: self.base.column(i)[row].as_py() for i in range(len(self.info.names))}
        stores = [d for d in (*self.flushing_dms, self.dms) if len(d)]
        if not self._changed(row):
            return values  # never changed since it was written
        muts: list[Mutation] = []
        for t in self.delta_tables:
            sub = t.filter(pc.equal(t.column(ROW_COL), pa.scalar(row, pa.uint32())))
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
) -> list[RowSetMetadata]:
    """Write a key-sorted table (with ``_key``/``_ts``) as rowsets of about ``target_bytes`` each.

    ``deltas``: REDO mutations of its rows, as (position, Mutation) pairs or as a delta table whose
    ``_row`` is the position. Returns their metadata; nothing refers to the blocks until the caller
    commits new tablet metadata.
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
        base_block = bm.write_block(_ipc_writer(piece, info))
        bloom = BloomFilter.build(keys.to_pylist())
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
