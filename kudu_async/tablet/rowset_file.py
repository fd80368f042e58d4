"""A DiskRowSet's base data file: Parquet with Kudu's per-column encodings and compression.

Chosen by measurement (docs/storage.md): Parquet maps Kudu's column attributes onto real encodings
(dictionary, delta, byte-stream-split, RLE) with a codec per column, and its row groups are the small
blocks a point lookup decodes alone. Each row group holds ``BLOCK_ROWS`` rows of every column, the
encoded key ``_key`` and the insert timestamp ``_ts``; the footer's key-value metadata carries the
sparse key index (first and last key of every row group) and the column id map. Nothing per row is
read at open: the footer is parsed, and blocks are decoded on demand into the node's block cache.

Rowsets written before this format are one uncompressed Arrow IPC file: :class:`IpcBase` still reads
them (told apart by the file's magic bytes) until a compaction rewrites them.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from kudu_async.common.errors import KuduCorruption
from kudu_async.fs.block_cache import BlockCache, charge_miss
from kudu_async.tablet.key_arrays import KeyBatch, PackedKeys, SortedKeys
from kudu_async.tablet.schema_info import FILE_IDS_META, KEY_COL, TS_COL, SchemaInfo

# Rows per row group (block). Measured on the table, 2M rows: a point lookup that decodes its
# block takes ~1.3 ms at 8192 rows, ~0.7-0.9 ms at 4096, ~0.4 ms at 2048, for 7.4 / 7.7 / 8.2 bytes per
# row on disk and the same scan rate; every block costs footer metadata (~5.7 KiB parsed, held in the
# block cache) and ~40 bytes of resident key index, so 4096.
BLOCK_ROWS = 4096
# Rows read per step of a scan: a scan holds one step's decoded columns, never the whole rowset.
SCAN_STEP_ROWS = 65_536
FORMAT_META = b"kudu.rowset_format"
FIRST_KEYS_META = b"kudu.block_first_keys"
LAST_KEYS_META = b"kudu.block_last_keys"
DECODED_BYTES_META = b"kudu.decoded_bytes"
PARQUET_MAGIC = b"PAR1"
ARROW_MAGIC = b"ARROW1"
# A parsed footer (pyarrow's FileMetaData, held by the ParquetFile that decodes blocks) takes about 14
# times its serialised size in memory: measured 280 KiB for a 20 KiB footer of 49 row groups of six
# columns, ~5.7 KiB per block. The block cache charges it at this multiple.
FOOTER_MEMORY_RATIO = 14
# What an open rowset holds beside its packed per-block index: its Python objects (DiskRowSet, base,
# bloom filter, empty delta stores), measured ~4 KiB with tracemalloc on the table.
RESIDENT_OVERHEAD_BYTES = 4096

# Kudu's compression codecs -> Parquet's; DEFAULT is LZ4 (measured: within 1.2x of ZSTD's size on
# the table, faster to write and to scan; Kudu's own default is no compression over
# bitshuffle's built-in LZ4).
CODECS = {"none": "none", "snappy": "snappy", "lz4": "lz4", "zlib": "gzip", "zstd": "zstd"}
DEFAULT_CODEC = "lz4"
# A dictionary of more distinct values than this fraction of a rowset's rows is not worth it: AUTO
# on strings then falls back to prefix (delta) encoding, as Kudu's DICT falls back per rowset. Judged
# on a strided sample (counting a whole rowset's distinct strings costs more than encoding it).
DICT_MAX_DISTINCT_FRACTION = 0.4
DICT_SAMPLE_ROWS = 8192

_FLOAT_TYPES = (pa.float32(), pa.float64())


def _is_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t))


def column_encoding(kudu_encoding: str | None, t: pa.DataType, values: pa.ChunkedArray | None = None) -> str:
    """The Parquet encoding of a column with Kudu encoding ``kudu_encoding`` and Arrow type ``t``
    ("DICT" for Parquet's dictionary encoding); ``values`` (the rowset's) decide AUTO on strings.

    ==============  ======================================================================
    Kudu            Parquet
    ==============  ======================================================================
    PLAIN           PLAIN
    PREFIX          DELTA_BYTE_ARRAY (shared prefix + suffix, as Kudu's front coding)
    DICT            dictionary (RLE_DICTIONARY; Parquet falls back to PLAIN past 1 MiB)
    RLE             RLE for bool; dictionary indices run-length encoded for other types
    BIT_SHUFFLE     BYTE_STREAM_SPLIT for floats and decimals; DELTA_BINARY_PACKED for ints
    GROUP_VARINT    DELTA_BINARY_PACKED (bit-packed small values, as varints)
    AUTO            Kudu's default of the type: BIT_SHUFFLE for numbers, dates, timestamps and
                    decimals; RLE for bool; DICT for strings and binary, or PREFIX when the
                    rowset's values are mostly distinct (Kudu's per-rowset DICT fallback)
    ==============  ======================================================================
    """
    enc = (kudu_encoding or "auto").lower()
    if enc == "auto":
        if pa.types.is_boolean(t):
            enc = "rle"
        elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t):
            enc = "dict"
            if values is not None and len(values):
                step = max(1, len(values) // DICT_SAMPLE_ROWS)
                sample = values.take(pa.array(np.arange(0, len(values), step))) if step > 1 else values
                distinct = pc.count_distinct(sample).as_py()
                enc = "dict" if distinct <= DICT_MAX_DISTINCT_FRACTION * len(sample) else "prefix"
        else:
            enc = "bit_shuffle"
    if enc == "plain":
        return "PLAIN"
    if enc == "prefix":
        return "DELTA_BYTE_ARRAY"
    if enc == "dict":
        return "DICT"
    if enc == "rle":
        return "RLE" if pa.types.is_boolean(t) else "DICT"
    if enc in ("bit_shuffle", "group_varint"):
        if t in _FLOAT_TYPES or pa.types.is_decimal(t) or (enc == "bit_shuffle" and not _is_int(t)):
            return "BYTE_STREAM_SPLIT"
        return "DELTA_BINARY_PACKED"
    raise ValueError(f"unknown Kudu encoding {kudu_encoding!r}")


def codec(kudu_compression: str | None) -> str:
    """The Parquet codec of a Kudu compression name (DEFAULT: :data:`DEFAULT_CODEC`)."""
    c = (kudu_compression or "default").lower()
    if c == "default":
        return DEFAULT_CODEC
    if c not in CODECS:
        raise ValueError(f"unknown Kudu compression {kudu_compression!r}")
    return CODECS[c]


def _hex_keys(keys: list[bytes]) -> bytes:
    return json.dumps([k.hex() for k in keys]).encode()


def _leaf(f: pa.Field, values: pa.ChunkedArray) -> tuple[str, pa.DataType, pa.ChunkedArray]:
    """The Parquet leaf column of a field (its path, Arrow type and values): an array column is encoded and
    compressed as its elements, the way Kudu picks an array's encoder by its element type."""
    if pa.types.is_list(f.type):
        return f"{f.name}.list.element", f.type.value_type, pc.list_flatten(values)
    return f.name, f.type, values


def write_base(f: BinaryIO, info: SchemaInfo, table: pa.Table, block_rows: int | None = None) -> None:
    """Write a key-sorted base table (value columns, ``_key``, ``_ts``) as a Parquet rowset file.

    Encoded in memory, then written in one call: the encoders and codecs run in Arrow without the GIL.
    """
    block_rows = block_rows or BLOCK_ROWS
    n = table.num_rows
    keys = table.column(KEY_COL)
    starts = list(range(0, n, block_rows))
    firsts = pc.take(keys, pa.array(starts, pa.int64())).to_pylist() if n else []
    lasts = pc.take(keys, pa.array([min(s + block_rows, n) - 1 for s in starts], pa.int64())).to_pylist() if n else []
    dict_cols: list[str] = []
    encodings: dict[str, str] = {KEY_COL: "DELTA_BYTE_ARRAY", TS_COL: "DELTA_BINARY_PACKED"}
    codecs: dict[str, str] = {KEY_COL: DEFAULT_CODEC, TS_COL: DEFAULT_CODEC}
    for col, f_ in zip(info.schema.columns, info.arrow, strict=True):
        path, t, values = _leaf(f_, table.column(f_.name))
        enc = column_encoding(col.encoding, t, values)
        if enc == "DICT":
            dict_cols.append(path)
        else:
            encodings[path] = enc
        codecs[path] = codec(col.compression)
    md = {
        **info.file_metadata(),
        FORMAT_META: b"parquet-1",
        FIRST_KEYS_META: _hex_keys(firsts),
        LAST_KEYS_META: _hex_keys(lasts),
        DECODED_BYTES_META: str(table.nbytes).encode(),
    }
    table = table.replace_schema_metadata(md)
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=block_rows,
        compression=codecs,
        use_dictionary=dict_cols,
        column_encoding=encodings,
        write_statistics=False,
        store_schema=True,
        write_page_checksum=True,  # CRC32 per page: a damaged block reads as corruption, not wrong rows
    )
    f.write(sink.getvalue())


def file_kind(path: str) -> str:
    """ "parquet" or "ipc" (an Arrow IPC file, the older format), from the file's magic bytes."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as e:
        raise KuduCorruption(f"cannot read block {path}: {e}") from e
    if head[:4] == PARQUET_MAGIC:
        return "parquet"
    if head == ARROW_MAGIC:
        return "ipc"
    raise KuduCorruption(f"cannot read block {path}: neither a Parquet nor an Arrow IPC file")


def file_column_ids(md: dict[bytes, bytes] | None) -> dict[int, str]:
    """column id -> name in a file, from the map ``SchemaInfo.file_metadata`` writes into every file."""
    if not md or FILE_IDS_META not in md:
        raise KuduCorruption("block has no column id map")
    return {int(i): name for name, i in json.loads(md[FILE_IDS_META]).items()}


def _one_array(col: pa.ChunkedArray) -> pa.Array:
    """The column as one array (zero copy when it already is one chunk)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def fill(field: pa.Field, default: Any, n: int) -> pa.Array:
    """A column of ``n`` read defaults (a column added after the file was written)."""
    if default is None:
        return pa.nulls(n, field.type)
    return pa.repeat(pa.scalar(default, field.type), n)


class ParquetBase:
    """The base data of one Parquet rowset file seen through schema ``info``: blocks decoded on demand.

    Decoded blocks (one column of one row group; the key index of one row group) live in the node's
    block cache when there is one, else only as long as a read holds them. So does the parsed footer,
    which a block decode needs (about 5.7 KiB per block): evicted, it is parsed again from the mapped
    file. What stays resident while the rowset is open is its sparse key index, packed (first and last
    key and first row of every block: ~40 bytes per block for integer keys), see :meth:`resident_bytes`.
    """

    def __init__(self, path: str, info: SchemaInfo, cache: BlockCache | None) -> None:
        self.path = path
        self.info = info
        self.cache = cache
        self._lock = threading.Lock()  # one decode at a time through the shared reader
        try:
            # Mapped for the rowset's life: a scan still reading it after a compaction deleted the
            # file reads on (file pages, not process memory).
            self._file = pa.memory_map(path, "r").read_buffer()
            pf = self._parse_footer()
            md = pf.metadata
            schema = pf.schema_arrow
            kv = schema.metadata or {}
            ids = file_column_ids(kv)
            self.firsts = PackedKeys(bytes.fromhex(h) for h in json.loads(kv[FIRST_KEYS_META]))
            self.lasts = PackedKeys(bytes.fromhex(h) for h in json.loads(kv[LAST_KEYS_META]))
            self.decoded_bytes = int(kv[DECODED_BYTES_META])
        except (pa.ArrowException, OSError, KeyError, ValueError) as e:
            raise KuduCorruption(f"cannot read block {path}: {e}") from e
        self.num_rows = md.num_rows
        counts = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        if len(counts) != len(self.firsts):
            raise KuduCorruption(f"cannot read block {path}: {len(counts)} row groups, {len(self.firsts)} index keys")
        self.starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if len(self.firsts):  # integer keys: the view write batches place their keys with, built once
            self.firsts.ints(len(self.firsts[0]))
            self.lasts.ints(len(self.firsts[0]))
        self._resident = RESIDENT_OVERHEAD_BYTES + self.firsts.nbytes() + self.lasts.nbytes() + self.starts.nbytes
        # _key and _ts as written (the scan merges them with MemRowSet rows); the file's schema itself
        # is not kept (its metadata repeats the key index as hex).
        self._internal = {name: schema.field(name) for name in (KEY_COL, TS_COL)}
        # current column name -> the file's name for it (None: added later, read its default)
        self.src: dict[str, str | None] = {}
        for cid, name in zip(info.ids, info.names, strict=True):
            src = ids.get(cid)
            self.src[name] = src if src is not None and src in schema.names else None
        self.src[KEY_COL] = KEY_COL
        self.src[TS_COL] = TS_COL
        self.all_columns = [*info.names, KEY_COL, TS_COL]
        self._fields: dict[str, pa.Field] = {}
        self._schemas: dict[tuple[str, ...], pa.Schema] = {}
        # With a block cache the footer parsed here is let go: the first block decode parses and caches it
        # (a restart opening every rowset would otherwise fill the cache with footers before the warm-up
        # puts blocks there). Without one (tests, tools: nothing bounds their memory) the rowset keeps it,
        # rather than parse it again for every block it decodes.
        self._own_footer: pq.ParquetFile | None = pf if cache is None else None

    @property
    def num_blocks(self) -> int:
        return len(self.firsts)

    def resident_bytes(self) -> int:
        """Bytes this rowset's base holds in process memory for as long as it is open (not in the
        block cache): the packed sparse key index and block starts, plus a fixed overhead."""
        return self._resident

    def footer_bytes(self) -> int:
        """What the parsed footer is charged in the block cache (its size in memory, estimated)."""
        size = int.from_bytes(self._file[len(self._file) - 8 : len(self._file) - 4].to_pybytes(), "little")
        return max(1, size * FOOTER_MEMORY_RATIO)

    def _parse_footer(self) -> pq.ParquetFile:
        return pq.ParquetFile(pa.BufferReader(self._file), page_checksum_verification=True)

    def footer(self, *, fill_cache: bool = True) -> pq.ParquetFile:
        """The parsed footer (a reader over the mapped file): from the block cache, or parsed again
        from the file when it was evicted (and cached again with ``fill_cache``: a scan parses it for
        itself rather than evict the blocks lookups use)."""
        if self._own_footer is not None:
            return self._own_footer
        key = (self.path, "#footer")
        pf = self.cache.get(key) if self.cache is not None else None
        if pf is None:
            try:
                pf = self._parse_footer()
            except (pa.ArrowException, OSError) as e:
                raise self._corrupt(e) from e
            if self.cache is not None and fill_cache:
                self.cache.put(key, pf, self.footer_bytes())
        assert isinstance(pf, pq.ParquetFile)
        return pf

    def block_bytes(self, columns: Sequence[str] | None = None) -> np.ndarray:
        """Uncompressed bytes of every block, from the footer: of ``columns`` (current names) and the
        key, or of every column (None). What a split of the key range by size weighs blocks with."""
        md = self.footer(fill_cache=False).metadata
        n = md.num_row_groups
        if columns is None:
            return np.fromiter((md.row_group(i).total_byte_size for i in range(n)), dtype=np.int64, count=n)
        wanted = {KEY_COL, *(s for s in (self.src.get(c) for c in columns) if s is not None)}
        out = np.zeros(n, dtype=np.int64)
        for i in range(n):
            rg = md.row_group(i)
            for j in range(rg.num_columns):
                col = rg.column(j)
                if col.path_in_schema.split(".")[0] in wanted:
                    out[i] += col.total_uncompressed_size
        return out

    def _field(self, name: str) -> pa.Field:
        f = self._fields.get(name)
        if f is None:
            # _key and _ts as written (the scan merges them with MemRowSet rows)
            f = self._internal[name] if name in self._internal else self.info.arrow.field(name)
            self._fields[name] = f
        return f

    def _schema_of(self, columns: list[str]) -> pa.Schema:
        key = tuple(columns)
        s = self._schemas.get(key)
        if s is None:
            if len(self._schemas) > 32:
                self._schemas.clear()
            s = self._schemas[key] = pa.schema([self._field(c) for c in columns])
        return s

    def _corrupt(self, e: BaseException) -> KuduCorruption:
        return KuduCorruption(f"cannot read block {self.path}: {e}")

    # -- blocks ------------------------------------------------------------------------------------

    def _decode(self, rg: int, file_cols: list[str], cache_footer: bool = True) -> pa.Table:
        try:
            pf = self.footer(fill_cache=cache_footer)
            with self._lock:  # one decode at a time through the shared reader
                return pf.read_row_group(rg, columns=file_cols, use_threads=False)
        except (pa.ArrowException, OSError) as e:
            raise self._corrupt(e) from e

    def block(self, rg: int, columns: list[str], *, fill_cache: bool = True, make_room: bool = True) -> pa.Table:
        """Row group ``rg`` with ``columns`` (current names), from the cache or decoded (and cached)."""
        n = int(self.starts[rg + 1] - self.starts[rg])
        got: dict[str, pa.Array] = {}
        missing: list[str] = []
        stored = [c for c in columns if self.src[c] is not None]
        if self.cache is not None:
            held = self.cache.get_many([(self.path, (rg, self.src[c])) for c in stored])
        else:
            held = [None] * len(stored)
        for c, v in zip(stored, held, strict=True):
            if v is None:
                missing.append(c)
            else:
                got[c] = v
        for c in columns:
            if self.src[c] is None:
                i = self.info.names.index(c)
                got[c] = fill(self.info.arrow.field(i), self.info.read_default(i), n)
        if missing:
            srcs = [self.src[c] for c in missing]
            # Warming the cache (make_room False) leaves the footer out: lookups in the blocks it warms
            # need none, and it would take room meant for blocks.
            t = self._decode(rg, [s for s in srcs if s is not None], cache_footer=make_room)
            charge_miss(t.nbytes)
            if t.num_rows != n:
                raise KuduCorruption(f"cannot read block {self.path}: row group {rg} has {t.num_rows} rows, not {n}")
            for c, s in zip(missing, srcs, strict=True):
                arr = t.column(s).combine_chunks()
                if not arr.type.equals(self._field(c).type):
                    arr = arr.cast(self._field(c).type)
                got[c] = arr
                if self.cache is not None and fill_cache:
                    self.cache.put((self.path, (rg, s)), arr, max(1, arr.nbytes), make_room=make_room)
        return pa.Table.from_arrays([got[c] for c in columns], schema=self._schema_of(columns))

    def cached(self, rg: int, columns: list[str]) -> bool:
        """Whether ``columns`` of row group ``rg`` are all in the block cache (a read needs no disk)."""
        if self.cache is None:
            return False
        return self.cache.holds_all([(self.path, (rg, s)) for s in (self.src[c] for c in columns) if s is not None])

    def preload(self, table: pa.Table | None, make_room: bool) -> bool:
        """Put every block in the cache: from ``table`` (the rows just written, copied per block so the
        cache does not keep the whole table alive) or decoded. Stops at the first block refused (then
        False)."""
        if self.cache is None:
            return False
        stored = [(name, src) for name, src in ((c, self.src[c]) for c in self.all_columns) if src is not None]
        whole = {} if table is None else {name: _one_array(table.column(name)) for name, _ in stored}
        for rg in range(self.num_blocks):
            lo, hi = int(self.starts[rg]), int(self.starts[rg + 1])
            if table is None:
                self.block(rg, self.all_columns, make_room=make_room)
                self.sorted_keys(rg, make_room=make_room)
                if not (self._keys_cached(rg) and self.cached(rg, self.all_columns)):
                    return False
                continue
            for name, src in stored:
                arr = pa.concat_arrays([whole[name].slice(lo, hi - lo)])  # a copy of this block only
                if not self.cache.put((self.path, (rg, src)), arr, max(1, arr.nbytes), make_room=make_room):
                    return False
            self.sorted_keys(rg, make_room=make_room)
        return True

    def sorted_keys(self, rg: int, *, make_room: bool = True) -> SortedKeys:
        """The key index of row group ``rg`` (its ``_key`` column with a fixed-width numpy view)."""
        key = (self.path, (rg, "#sorted"))
        sk = self.cache.get(key) if self.cache is not None else None
        if sk is None:
            keys = self.block(rg, [KEY_COL], make_room=make_room).column(0).combine_chunks()
            sk = SortedKeys(keys)
            if self.cache is not None:
                self.cache.put(key, sk, max(1, keys.nbytes), make_room=make_room)
        assert isinstance(sk, SortedKeys)
        return sk

    def fully_cached(self) -> bool:
        """Every block (all columns and the key index) is in the cache."""
        return all(self._keys_cached(rg) and self.cached(rg, self.all_columns) for rg in range(self.num_blocks))

    def _keys_cached(self, rg: int) -> bool:
        return self.cache is not None and self.cache.peek((self.path, (rg, "#sorted"))) is not None

    # -- key index ---------------------------------------------------------------------------------

    def block_of_key(self, key: bytes) -> int | None:
        """The row group whose key range holds ``key`` (None: between blocks or outside the file)."""
        rg = bisect.bisect_right(self.firsts, key) - 1
        if rg < 0 or key > self.lasts[rg]:
            return None
        return rg

    def search(self, key: bytes) -> int | None:
        rg = self.block_of_key(key)
        if rg is None:
            return None
        p = self.sorted_keys(rg).search(key)
        return None if p is None else int(self.starts[rg]) + p

    def search_in_memory(self, key: bytes, columns: list[str]) -> int | Literal[False] | None:
        """:meth:`search` when the key's block and its ``columns`` are cached; False when the disk is needed."""
        rg = self.block_of_key(key)
        if rg is None:
            return None
        sk = self.cache.get((self.path, (rg, "#sorted"))) if self.cache is not None else None
        if not isinstance(sk, SortedKeys) or not self.cached(rg, columns):
            return False
        p = sk.search(key)
        return None if p is None else int(self.starts[rg]) + p

    def bisect(self, key: bytes, right: bool = False) -> int:
        """Where ``key`` would go in the file's rows (after equal keys with ``right``)."""
        firsts = self.firsts
        rg = (bisect.bisect_right if right else bisect.bisect_left)(firsts, key) - 1
        if rg < 0:
            return 0
        if key > self.lasts[rg]:
            return int(self.starts[rg + 1])
        return int(self.starts[rg]) + self.sorted_keys(rg).bisect(key, right=right)

    def find(self, kb: KeyBatch, rows: np.ndarray) -> np.ndarray:
        """Positions of the keys ``kb`` holds at ``rows`` (-1: absent): each block's candidates are
        picked by its key range and placed with one ``searchsorted``."""
        out = np.full(len(rows), -1, dtype=np.int64)
        if not len(rows):
            return out
        if len(rows) == 1:  # one key (a single-row write): its block by the sparse index
            k = kb.key(int(rows[0]))
            rg = None if k is None else self.block_of_key(k)
            if rg is not None:
                p = self.sorted_keys(rg).find(kb, rows)
                if p[0] >= 0:
                    out[0] = p[0] + self.starts[rg]
            return out
        rgs = self._blocks_of_ints(kb, rows)
        if rgs is not None:  # integer keys: every key's block by one searchsorted
            order = np.argsort(rgs, kind="stable")
            srt = rgs[order]
            bounds = np.flatnonzero(np.diff(srt)) + 1
            for grp in np.split(order, bounds):
                rg = int(rgs[grp[0]])
                if rg < 0:
                    continue
                p = self.sorted_keys(rg).find(kb, rows[grp])
                hit = p >= 0
                out[grp[hit]] = p[hit] + self.starts[rg]
            return out
        where = np.full(kb.n, -1, dtype=np.int64)
        where[rows] = np.arange(len(rows))
        for rg in range(self.num_blocks):
            cand = kb.rows_in_range(self.firsts[rg], self.lasts[rg])
            if not len(cand):
                continue
            cand = cand[where[cand] >= 0]
            if not len(cand):
                continue
            p = self.sorted_keys(rg).find(kb, cand)
            hit = p >= 0
            out[where[cand[hit]]] = p[hit] + self.starts[rg]
        return out

    def _blocks_of_ints(self, kb: KeyBatch, rows: np.ndarray) -> np.ndarray | None:
        """The block of each key (-1: in none) when the batch's and the index's keys are integers of
        one width, else None."""
        w = kb.int_width()
        if w is None:
            return None
        firsts, lasts = self.firsts.ints(w), self.lasts.ints(w)
        if firsts is None or lasts is None:
            return None
        q = kb.numeric(w)[rows]
        rg = np.searchsorted(firsts, q, side="right") - 1
        inside = (rg >= 0) & (q <= lasts[np.maximum(rg, 0)])
        return np.where(inside, rg, -1)

    # -- rows --------------------------------------------------------------------------------------

    def take(self, rows: np.ndarray, columns: list[str]) -> pa.Table:
        """``columns`` of the given rows, in the given order."""
        rows = np.asarray(rows, dtype=np.int64)
        schema = pa.schema([self._field(c) for c in columns])
        if not len(rows):
            return schema.empty_table()
        rgs = np.searchsorted(self.starts, rows, side="right") - 1
        order = np.argsort(rgs, kind="stable")
        parts = []
        srt = rgs[order]
        bounds = np.flatnonzero(np.diff(srt)) + 1
        for grp in np.split(order, bounds):
            rg = int(rgs[grp[0]])
            local = rows[grp] - self.starts[rg]
            parts.append(self.block(rg, columns).take(pa.array(local)))
        t = pa.concat_tables(parts)
        inv = np.empty(len(rows), dtype=np.int64)
        inv[order] = np.arange(len(rows))
        return t.take(pa.array(inv))

    def row(self, pos: int, columns: list[str]) -> pa.Table:
        rg = int(np.searchsorted(self.starts, pos, side="right") - 1)
        return self.block(rg, columns).slice(pos - int(self.starts[rg]), 1)

    def ts_of(self, rows: np.ndarray) -> np.ndarray:
        """The insert timestamps of base rows (int64), block by block."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(len(rows), dtype=np.int64)
        if not len(rows):
            return out
        rgs = np.searchsorted(self.starts, rows, side="right") - 1
        first, last = int(rgs.min()), int(rgs.max())
        if first == last:
            ts = self.block(first, [TS_COL]).column(0).to_numpy()
            out[:] = ts[rows - self.starts[first]]
            return out
        order = np.argsort(rgs, kind="stable")
        bounds = np.flatnonzero(np.diff(rgs[order])) + 1
        for grp in np.split(order, bounds):
            rg = int(rgs[grp[0]])
            ts = self.block(rg, [TS_COL]).column(0).to_numpy()
            out[grp] = ts[rows[grp] - self.starts[rg]]
        return out

    def ranges(self, lo: int, hi: int, columns: list[str]) -> Iterator[pa.Table]:
        """Rows ``[lo, hi)`` with ``columns``, a few blocks at a time (decoded straight from the file,
        not through the cache: a scan would evict the blocks lookups use)."""
        if lo >= hi:
            return
        first = int(np.searchsorted(self.starts, lo, side="right") - 1)
        last = int(np.searchsorted(self.starts, hi - 1, side="right") - 1)
        srcs = [self.src[c] for c in columns]
        file_cols = list(dict.fromkeys(s for s in srcs if s is not None))
        try:  # a reader of its own (reads in parallel with lookups), over the cached footer
            pf = pq.ParquetFile(
                pa.BufferReader(self._file),
                metadata=self.footer(fill_cache=False).metadata,
                page_checksum_verification=True,
            )
        except (pa.ArrowException, OSError) as e:
            raise self._corrupt(e) from e
        step = max(1, SCAN_STEP_ROWS // BLOCK_ROWS)
        schema = pa.schema([self._field(c) for c in columns])
        for g in range(first, last + 1, step):
            rgs = list(range(g, min(g + step, last + 1)))
            try:
                t = pf.read_row_groups(rgs, columns=file_cols, use_threads=False)
            except (pa.ArrowException, OSError) as e:
                raise self._corrupt(e) from e
            charge_miss(t.nbytes)
            base = int(self.starts[rgs[0]])
            a, b = max(lo, base), min(hi, int(self.starts[rgs[-1] + 1]))
            t = t.slice(a - base, b - a)
            cols = []
            for c, s in zip(columns, srcs, strict=True):
                if s is None:
                    i = self.info.names.index(c)
                    cols.append(fill(self.info.arrow.field(i), self.info.read_default(i), t.num_rows))
                else:
                    col = t.column(s)
                    cols.append(col if col.type.equals(self._field(c).type) else col.cast(self._field(c).type))
            yield pa.Table.from_arrays(cols, schema=schema)

    def read_all(self) -> pa.Table:
        """Every row and column (compaction input; bounded by the compaction budget)."""
        parts = list(self.ranges(0, self.num_rows, self.all_columns))
        return pa.concat_tables(parts) if parts else pa.schema([self._field(c) for c in self.all_columns]).empty_table()


def adapt_base(info: SchemaInfo, t: pa.Table) -> pa.Table:
    """A base table written for an older schema, seen through the current one (matched by column id):
    renamed columns under their new name, dropped ones gone, added ones filled with their read default."""
    ids = file_column_ids(t.schema.metadata)
    if ids == dict(zip(info.ids, info.names, strict=True)):
        return t
    cols, fields = [], []
    for i, (cid, f) in enumerate(zip(info.ids, info.arrow, strict=True)):
        src = ids.get(cid)
        if src is not None and src in t.column_names:
            cols.append(t.column(src))
        else:
            cols.append(pa.chunked_array([fill(f, info.read_default(i), t.num_rows)], f.type))
        fields.append(f)
    for name in (KEY_COL, TS_COL):
        cols.append(t.column(name))
        fields.append(t.schema.field(name))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=info.file_metadata()))


class IpcBase:
    """The base data of a rowset in the older format (one uncompressed Arrow IPC file), memory-mapped:
    the same reads as :class:`ParquetBase`, over the whole mapped table."""

    def __init__(self, path: str, info: SchemaInfo) -> None:
        self.path = path
        self.info = info
        self.table = adapt_base(info, read_ipc_table(path))
        keys = self.table.column(KEY_COL).combine_chunks()
        self._sorted = SortedKeys(keys)
        self.num_rows = self.table.num_rows
        self.decoded_bytes = int(self.table.nbytes)
        self.all_columns = [*info.names, KEY_COL, TS_COL]

    def search(self, key: bytes) -> int | None:
        return self._sorted.search(key)

    def search_in_memory(self, key: bytes, columns: list[str]) -> int | Literal[False] | None:
        return False  # mapped pages may be on disk

    def resident_bytes(self) -> int:
        """Process memory held while open: the key index's search form (the columns are mapped)."""
        return RESIDENT_OVERHEAD_BYTES + self._sorted.form_bytes()

    def bisect(self, key: bytes, right: bool = False) -> int:
        return self._sorted.bisect(key, right=right)

    def find(self, kb: KeyBatch, rows: np.ndarray) -> np.ndarray:
        return self._sorted.find(kb, rows)

    def take(self, rows: np.ndarray, columns: list[str]) -> pa.Table:
        return self.table.select(columns).take(pa.array(np.asarray(rows, dtype=np.int64)))

    def row(self, pos: int, columns: list[str]) -> pa.Table:
        return self.table.select(columns).slice(pos, 1)

    def ts_of(self, rows: np.ndarray) -> np.ndarray:
        return self.take(rows, [TS_COL]).column(0).to_numpy().astype(np.int64)  # type: ignore[no-any-return]

    def ranges(self, lo: int, hi: int, columns: list[str]) -> Iterator[pa.Table]:
        t = self.table.select(columns)
        for a in range(lo, hi, SCAN_STEP_ROWS):
            yield t.slice(a, min(SCAN_STEP_ROWS, hi - a))

    def read_all(self) -> pa.Table:
        return self.table

    def preload(self, table: pa.Table | None, make_room: bool) -> bool:
        return False  # mapped whole: nothing to decode into the cache

    def fully_cached(self) -> bool:
        return False


def read_ipc_table(path: str) -> pa.Table:
    """An Arrow IPC file memory-mapped: columns are paged in only when touched."""
    try:
        return ipc.open_file(pa.memory_map(path, "r")).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise KuduCorruption(f"cannot read block {path}: {e}") from e
