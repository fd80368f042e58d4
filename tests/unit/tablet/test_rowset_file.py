"""The rowset file format: Kudu's encodings and compression per column and type, the sparse key index,
damaged files, and rowsets written in the older Arrow IPC format."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from kudu_async.common import types as T
from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.column import _ALLOWED_ENCODINGS, COMPRESSIONS
from kudu_async.common.errors import KuduCorruption
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.fs.block_cache import BlockCache
from kudu_async.tablet import rowset_file
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.schema_info import KEY_COL, TS_COL
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions

N = 3000  # rows: a few blocks of BLOCK_ROWS when the test shrinks it


def _values(kt: T.KuduType, n: int) -> list[Any]:
    """``n`` values of a type with nulls, repeats (for dictionaries and runs) and distinct ones."""
    out: list[Any] = []
    for i in range(n):
        if i % 7 == 3:
            out.append(None)
            continue
        j = i // 3 if i % 2 else i
        if kt in (T.INT8, T.INT16, T.INT32, T.INT64):
            bits = {T.INT8: 7, T.INT16: 15, T.INT32: 31, T.INT64: 63}[kt]
            out.append((j * 2654435761) % (1 << bits) - (1 << (bits - 1)) if i % 5 else j % 100)
        elif kt is T.UNIXTIME_MICROS:
            out.append(dt.datetime(2020, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=j * 1_000_003))
        elif kt is T.DATE:
            out.append(dt.date(2000, 1, 1) + dt.timedelta(days=j % 9000))
        elif kt in (T.FLOAT, T.DOUBLE):
            out.append(j * 0.25 - 100.0)
        elif kt is T.DECIMAL:
            out.append(decimal.Decimal(j * 7 - 5000).scaleb(-2))
        elif kt is T.BOOL:
            out.append(bool((i // 11) % 2))
        elif kt in (T.STRING, T.VARCHAR):
            out.append(f"name-{j}" if i % 3 else "same")
        elif kt is T.BINARY:
            out.append(b"\x00\xff" + j.to_bytes(4, "big"))
    return out


def _columns() -> list[ColumnSchema]:
    cols = []
    for tname, encs in _ALLOWED_ENCODINGS.items():
        kt = T.type_from_name(tname)
        extra: dict[str, Any] = {}
        if kt is T.DECIMAL:
            extra = {"precision": 12, "scale": 2}
        if kt is T.VARCHAR:
            extra = {"length": 20}
        for enc in encs:
            for comp in COMPRESSIONS:
                cols.append(ColumnSchema(f"{tname}_{enc}_{comp}", kt, encoding=enc, compression=comp, **extra))
    return cols


def _tablet(path: str, schema: Schema, cache: BlockCache | None = None) -> tuple[Tablet, ManualHybridClock]:
    clock = ManualHybridClock(10**12)
    return Tablet.create(path, schema, options=TabletOptions(sync=False, block_cache=cache), clock=clock), clock


def test_every_type_encoding_and_compression_round_trips_and_is_in_the_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rowset_file, "BLOCK_ROWS", 1024)
    cols = _columns()
    schema = Schema([ColumnSchema("k", T.INT64, nullable=False), *cols], 1)
    t, clock = _tablet(str(tmp_path / "t"), schema, BlockCache(64 << 20))
    arrow = schema.to_arrow()
    data = {"k": list(range(N))}
    for c in cols:
        data[c.name] = _values(c.type, N)
    batch = pa.RecordBatch.from_pydict(data, schema=arrow)
    assert t.write(WriteOp([OpType.INSERT] * N, batch), clock.now(), 1).row_errors == []
    t.flush_mrs()
    got = t.scan(ScanSpec(ordered=True)).to_table()
    assert got is not None
    for c in cols:
        assert got.column(c.name).to_pylist() == data[c.name], c.name

    # The file holds the encodings and codecs the attributes map to (Parquet column metadata).
    [d] = t.rowsets()
    md = pq.ParquetFile(t.bm.path(d.meta.base_block)).metadata
    assert md.num_row_groups == -(-N // 1024)
    rg = md.row_group(0)
    by_name = {rg.column(j).path_in_schema: rg.column(j) for j in range(rg.num_columns)}
    want_codec = {"default": "LZ4", "none": "UNCOMPRESSED", "snappy": "SNAPPY", "lz4": "LZ4", "zlib": "GZIP"}
    want_codec["zstd"] = "ZSTD"
    for c in cols:
        meta = by_name[c.name]
        assert meta.compression.upper().replace("LZ4_RAW", "LZ4") == want_codec[c.compression or "default"], c.name
        enc = rowset_file.column_encoding(c.encoding, c.arrow_type, batch.column(c.name))
        encs = set(meta.encodings)
        if enc == "DICT":
            assert "RLE_DICTIONARY" in encs or "PLAIN_DICTIONARY" in encs, (c.name, encs)
        else:
            assert enc in encs, (c.name, enc, encs)
    assert "DELTA_BYTE_ARRAY" in by_name[KEY_COL].encodings
    assert "DELTA_BINARY_PACKED" in by_name[TS_COL].encodings


def test_kudu_encodings_map_to_the_closest_parquet_encoding() -> None:
    ce = rowset_file.column_encoding
    assert ce("bit_shuffle", pa.float64()) == "BYTE_STREAM_SPLIT"
    assert ce("bit_shuffle", pa.decimal128(12, 2)) == "BYTE_STREAM_SPLIT"
    assert ce("bit_shuffle", pa.int64()) == "DELTA_BINARY_PACKED"
    assert ce("group_varint", pa.int32()) == "DELTA_BINARY_PACKED"
    assert ce("prefix", pa.string()) == "DELTA_BYTE_ARRAY"
    assert ce("dict", pa.binary()) == "DICT"
    assert ce("rle", pa.bool_()) == "RLE" and ce("rle", pa.int16()) == "DICT"
    assert ce("plain", pa.int8()) == "PLAIN"
    # AUTO is Kudu's default of the type; strings fall back from a dictionary when mostly distinct.
    assert ce("auto", pa.int64()) == "DELTA_BINARY_PACKED" and ce(None, pa.float32()) == "BYTE_STREAM_SPLIT"
    assert ce("auto", pa.bool_()) == "RLE"
    few = pa.chunked_array([pa.array(["a", "b"] * 500)])
    many = pa.chunked_array([pa.array([f"v{i}" for i in range(1000)])])
    assert ce("auto", pa.string(), few) == "DICT" and ce("auto", pa.string(), many) == "DELTA_BYTE_ARRAY"
    assert rowset_file.codec("default") == "lz4" and rowset_file.codec("zlib") == "gzip"
    with pytest.raises(ValueError, match="compression"):
        rowset_file.codec("brotli")


FIELDS = [pa.field("k", pa.int64(), False), pa.field("v", pa.string())]


def _kv_tablet(path: str, cache: BlockCache | None = None) -> tuple[Tablet, ManualHybridClock]:
    return _tablet(path, Schema.from_arrow(pa.schema(FIELDS), num_key_columns=1), cache)


def _write(t: Tablet, clock: ManualHybridClock, op: OpType, keys: list[int], vals: list[Any], index: int) -> None:
    b = pa.record_batch([pa.array(keys, pa.int64()), pa.array(vals, pa.string())], schema=pa.schema(FIELDS))
    assert t.write(WriteOp([op] * len(keys), b), clock.now(), index).row_errors == []


def _rows(t: Tablet) -> list[tuple[Any, ...]]:
    tbl = t.scan(ScanSpec(ordered=True)).to_table()
    return [] if tbl is None else list(zip(tbl.column("k").to_pylist(), tbl.column("v").to_pylist(), strict=True))


def test_point_lookups_and_key_probes_read_one_block(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rowset_file, "BLOCK_ROWS", 256)
    cache = BlockCache(64 << 20)
    t, clock = _kv_tablet(str(tmp_path / "t"), cache)
    keys = list(range(0, 20_000, 2))
    _write(t, clock, OpType.INSERT, keys, [f"v{k}" for k in keys], 1)
    t.flush_mrs()
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=BlockCache(1 << 20)), clock=clock)
    [d] = t2.rowsets()
    assert isinstance(d.base, rowset_file.ParquetBase) and d.base.num_blocks == len(keys) // 256 + 1
    cache2 = d.base.cache
    assert cache2 is not None
    before = cache2.status()["usage_bytes"]
    assert t2.lookup(t2.info.encode_key([5000])) == {"k": 5000, "v": "v5000"}
    assert t2.lookup(t2.info.encode_key([5001])) is None
    # one small block decoded, not the rowset (and the footer parsed for it)
    assert cache2.status()["usage_bytes"] - before - d.base.footer_bytes() < 64 << 10
    # Writes probe keys block by block: updates of existing rows, inserts of new keys, duplicates.
    _write(t2, clock, OpType.UPDATE, [0, 10_000, 19_998], ["a", "b", "c"], 2)
    _write(t2, clock, OpType.INSERT, [1, 19_999], ["n1", "n2"], 3)
    dup = pa.record_batch([pa.array([4], pa.int64()), pa.array(["x"])], schema=pa.schema(FIELDS))
    res = t2.write(WriteOp([OpType.INSERT], dup), clock.now(), 4)
    assert [e.code for e in res.row_errors] == ["ALREADY_PRESENT"]
    rows = dict(_rows(t2))
    assert rows[0] == "a" and rows[10_000] == "b" and rows[19_998] == "c" and rows[1] == "n1" and rows[4] == "v4"
    assert len(rows) == len(keys) + 2


def test_a_damaged_block_is_corruption_naming_the_file(tmp_path: Any) -> None:
    t, clock = _kv_tablet(str(tmp_path / "t"))
    _write(t, clock, OpType.INSERT, list(range(2000)), [f"value-{i}" for i in range(2000)], 1)
    t.flush_mrs()
    path = t.bm.path(t.rowsets()[0].meta.base_block)
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    for i in range(100, 400):  # inside the first data pages
        raw[i] ^= 0x5A
    with open(path, "wb") as f:
        f.write(raw)
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False), clock=clock)
    with pytest.raises(KuduCorruption, match=os.path.basename(path)):
        t2.scan(ScanSpec()).to_table()
    with open(path, "wb") as f:
        f.write(raw[: len(raw) // 2])  # truncated: the footer is gone
    with pytest.raises(KuduCorruption, match=os.path.basename(path)):
        Tablet.open(t.tablet_dir, options=TabletOptions(sync=False), clock=clock)


def _to_ipc(path: str) -> None:
    """Rewrite a rowset's base file as the older format wrote it: one uncompressed Arrow IPC record
    batch, the column id map in the schema metadata."""
    table = pq.read_table(path)
    md = {k: v for k, v in (table.schema.metadata or {}).items() if k.startswith(b"kudu.column_ids")}
    table = table.replace_schema_metadata(md)
    with pa.OSFile(path, "wb") as f, ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=max(1, table.num_rows))


@pytest.mark.parametrize("cache_mb", [0, 64])
def test_rowsets_in_the_older_ipc_format_read_write_and_compact_into_the_new_one(tmp_path: Any, cache_mb: int) -> None:
    t, clock = _kv_tablet(str(tmp_path / "t"))
    _write(t, clock, OpType.INSERT, list(range(0, 600, 2)), [f"v{i}" for i in range(0, 600, 2)], 1)
    t.flush_mrs()
    _write(t, clock, OpType.INSERT, list(range(1, 600, 2)), [f"w{i}" for i in range(1, 600, 2)], 2)
    t.flush_mrs()
    _write(t, clock, OpType.UPDATE, [4, 5], ["u4", "u5"], 3)
    t.flush_all()
    expect = _rows(t)
    for d in t.rowsets():
        _to_ipc(t.bm.path(d.meta.base_block))
    cache = BlockCache(cache_mb << 20)
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=cache), clock=clock)
    assert all(rowset_file.file_kind(t2.bm.path(d.meta.base_block)) == "ipc" for d in t2.rowsets())
    assert all(isinstance(d.base, rowset_file.IpcBase) for d in t2.rowsets())
    assert _rows(t2) == expect
    assert t2.lookup(t2.info.encode_key([4])) == {"k": 4, "v": "u4"}
    _write(t2, clock, OpType.UPDATE, [6, 7], ["u6", "u7"], 4)
    _write(t2, clock, OpType.DELETE, [8], [None], 5)
    expect = [(k, {6: "u6", 7: "u7"}.get(k, v)) for k, v in expect if k != 8]
    assert _rows(t2) == expect
    assert t2.compact_rowsets()
    assert all(rowset_file.file_kind(t2.bm.path(d.meta.base_block)) == "parquet" for d in t2.rowsets())
    assert _rows(t2) == expect
    t3 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False), clock=clock)
    assert _rows(t3) == expect


def test_nothing_per_row_is_kept_after_a_flush_without_a_cache(tmp_path: Any) -> None:
    """Without a block cache a rowset holds its footer's per-block index only: reads decode blocks on
    demand and let them go."""
    t, clock = _kv_tablet(str(tmp_path / "t"))
    n = 50_000
    _write(t, clock, OpType.INSERT, list(range(n)), [f"v{i}" for i in range(n)], 1)
    t.flush_mrs()
    [d] = t.rowsets()
    assert isinstance(d.base, rowset_file.ParquetBase)
    assert len(d.base.firsts) == len(d.base.lasts) == d.base.num_blocks < n // 1000
    before = pa.total_allocated_bytes()
    for k in np.random.default_rng(0).integers(0, n, 50).tolist():
        assert t.lookup(t.info.encode_key([k])) == {"k": k, "v": f"v{k}"}
    assert pa.total_allocated_bytes() - before < 1 << 20
    assert d.built_delta_index() is None


def test_the_delta_index_keeps_the_last_change_of_every_row_as_runs_merge() -> None:
    from kudu_async.tablet.diskrowset import DeltaIndex

    rng = np.random.default_rng(5)
    idx = DeltaIndex()
    ref: dict[int, tuple[int, int, bool]] = {}
    seq = 0
    for step in range(60):
        n = int(rng.integers(1, 300))
        rows = rng.integers(0, 2000, n)
        ts = np.full(n, step + 1)
        seqs = np.arange(seq, seq + n)
        seq += n
        live = rng.random(n) < 0.7
        idx.add(rows, ts, seqs, live)
        for r, t, s, lv in zip(rows.tolist(), ts.tolist(), seqs.tolist(), live.tolist(), strict=True):
            ref[r] = (t, s, lv)
    q = np.arange(2100)
    found, ts_, live_ = idx.lookup(q)
    for r in q.tolist():
        if r in ref:
            assert found[r] and (int(ts_[r]), bool(live_[r])) == (ref[r][0], ref[r][2])
        else:
            assert not found[r]


def _held_footers(base: rowset_file.ParquetBase) -> list[str]:
    """Attributes of an open rowset base that hold a parsed footer (they would stay in process memory)."""
    return [k for k, v in vars(base).items() if isinstance(v, (pq.ParquetFile, pq.FileMetaData))]


@pytest.mark.parametrize("n", [5_000, 40_000])
def test_an_open_rowset_holds_a_packed_index_only_and_its_memory_stays_bounded_per_block(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """The parsed footer (~5.7 KiB per block) is not held by the rowset: what stays resident is the packed
    sparse key index, a few dozen bytes per block, and the tablet's DiskRowSets tracker counts it."""
    monkeypatch.setattr(rowset_file, "BLOCK_ROWS", 128)
    t, clock = _kv_tablet(str(tmp_path / "t"))
    _write(t, clock, OpType.INSERT, list(range(n)), [f"v{i}" for i in range(n)], 1)
    t.flush_mrs()
    cache = BlockCache(64 << 20)  # a node's rowsets always have one: footers go there
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=cache), clock=clock)
    [d] = t2.rowsets()
    assert isinstance(d.base, rowset_file.ParquetBase) and d.base.num_blocks == -(-n // 128)
    assert _held_footers(d.base) == []
    per_block = (d.base.resident_bytes() - rowset_file.RESIDENT_OVERHEAD_BYTES) / d.base.num_blocks
    assert per_block <= 64  # 8-byte keys: first and last (8 + 8 each, and as integers 8 each), first row (8)
    assert t2.drs_memory_bytes() == d.memory_bytes() == d.base.resident_bytes()
    assert t2.lookup(t2.info.encode_key([n - 7])) == {"k": n - 7, "v": f"v{n - 7}"}
    assert _held_footers(d.base) == []
    _write(t2, clock, OpType.UPDATE, [1, 2, 3], ["a", "b", "c"], 2)  # the delta index is tracked too
    d.delta_index()
    assert t2.drs_memory_bytes() == d.base.resident_bytes() + d.built_delta_index().nbytes() > d.base.resident_bytes()  # type: ignore[union-attr]


def test_footers_live_in_the_block_cache_and_an_evicted_one_is_parsed_again_with_the_same_answers(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rowset_file, "BLOCK_ROWS", 256)
    t, clock = _kv_tablet(str(tmp_path / "t"))
    keys = list(range(0, 20_000, 2))
    _write(t, clock, OpType.INSERT, keys, [f"v{k}" for k in keys], 1)
    t.flush_mrs()
    expect = _rows(t)

    roomy = BlockCache(64 << 20)
    t1 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=roomy), clock=clock)
    [d1] = t1.rowsets()
    assert isinstance(d1.base, rowset_file.ParquetBase)
    footer = d1.base.footer_bytes()
    # Opening parses the footer and lets it go; the first block decode caches it, charged at its
    # estimated size in memory.
    assert roomy.status()["usage_bytes"] == 0
    assert t1.lookup(t1.info.encode_key([5000])) == {"k": 5000, "v": "v5000"}
    assert roomy.peek((d1.base.path, "#footer")) is not None
    held = roomy.status()["usage_bytes"]
    assert footer < held < footer + (64 << 10)  # the footer and one small block

    # A cache too small for the footer: every block decode parses it again from the mapped file.
    tiny = BlockCache(footer // 2)
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=tiny), clock=clock)
    [d2] = t2.rowsets()
    assert isinstance(d2.base, rowset_file.ParquetBase)
    assert tiny.peek((d2.base.path, "#footer")) is None
    for k in (0, 5000, 19_998):
        assert t2.lookup(t2.info.encode_key([k])) == t1.lookup(t1.info.encode_key([k])) == {"k": k, "v": f"v{k}"}
    assert t2.lookup(t2.info.encode_key([5001])) is None
    assert _rows(t2) == _rows(t1) == expect
    assert list(d2.base.block_bytes(["v"])) == list(d1.base.block_bytes(["v"]))
    assert _held_footers(d2.base) == []

    # Gone from the cache: a scan parses it for itself (a scan would evict what lookups use); a block
    # decode for a lookup parses it and caches it again.
    roomy.drop([d1.base.path])
    assert roomy.peek((d1.base.path, "#footer")) is None
    assert _rows(t1) == expect and roomy.peek((d1.base.path, "#footer")) is None
    assert t1.lookup(t1.info.encode_key([777 * 2])) == {"k": 1554, "v": "v1554"}
    assert roomy.peek((d1.base.path, "#footer")) is not None
    assert _rows(t1) == expect
