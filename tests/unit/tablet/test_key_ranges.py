"""A tablet's key range in chunks of about N bytes (Kudu's SplitKeyRange), from its rowsets' block index
and its MemRowSet's keys; and the scan read counts the block cache charges to the reading thread."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.schema import Schema
from kudu_async.fs.block_cache import BlockCache, ReadCounts, charge_reads_to
from kudu_async.tablet.key_ranges import KeyPiece, KeyRange, split_key_range
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.rowset_file import BLOCK_ROWS, ParquetBase
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions
from tests.unit.tablet.tablet_testkit import encode_key

FIELDS = [pa.field("k", pa.int64(), False), pa.field("v", pa.string(), True)]


def _tablet(path: str, cache: BlockCache | None = None) -> tuple[Tablet, Schema, ManualHybridClock]:
    schema = Schema.from_arrow(pa.schema(FIELDS), num_key_columns=1)
    clock = ManualHybridClock(10**12)
    return Tablet.create(path, schema, options=TabletOptions(sync=False, block_cache=cache), clock=clock), schema, clock


def _write(t: Tablet, clock: ManualHybridClock, keys: range, index: int) -> None:
    b = pa.record_batch(
        [pa.array(list(keys), pa.int64()), pa.array([f"value-{k:08d}" for k in keys], pa.string())],
        schema=pa.schema(FIELDS),
    )
    assert t.write(WriteOp([OpType.INSERT] * len(keys), b), clock.now(), index).row_errors == []


def _keys_in(t: Tablet, lo: bytes | None, hi: bytes | None) -> list[int]:
    tbl = t.scan(ScanSpec(lower_key=lo, upper_key=hi)).to_table()
    return [] if tbl is None else tbl.column("k").to_pylist()


def test_pieces_are_cut_where_their_sizes_add_up_and_cover_the_range() -> None:
    pieces = [KeyPiece(bytes([i]), bytes([i]) + b"\xff", 100) for i in range(1, 11)]
    got = split_key_range(pieces, None, None, 250)
    assert got == [
        KeyRange(None, bytes([4]), 300),
        KeyRange(bytes([4]), bytes([7]), 300),
        KeyRange(bytes([7]), bytes([10]), 300),
        KeyRange(bytes([10]), None, 100),
    ]
    # bounded: only the pieces inside count, and the ends are the bounds asked for
    got = split_key_range(pieces, bytes([3]), bytes([8]), 200)
    assert got[0].start == bytes([3]) and got[-1].stop == bytes([8])
    assert all(a.stop == b.start for a, b in itertools.pairwise(got))
    assert split_key_range([], b"a", b"b", 10) == [KeyRange(b"a", b"b", 0)]
    assert split_key_range(pieces, b"\x05", b"\x05", 10) == []
    with pytest.raises(ValueError, match="must be > 0"):
        split_key_range(pieces, None, None, 0)


def test_overlapping_rowsets_never_give_an_empty_or_backward_chunk() -> None:
    pieces = [KeyPiece(b"\x01", b"\x09", 500), KeyPiece(b"\x01", b"\x05", 500), KeyPiece(b"\x02", b"\x03", 10)]
    got = split_key_range(pieces, None, None, 100)
    assert all(r.start is None or r.stop is None or r.start < r.stop for r in got)
    assert got[0].start is None and got[-1].stop is None


def test_a_tablet_with_several_rowsets_and_a_memrowset_splits_into_chunks_covering_every_row(tmp_path: Any) -> None:
    t, schema, clock = _tablet(str(tmp_path / "t"))
    n_rowsets, per = 3, 5 * BLOCK_ROWS
    for i in range(n_rowsets):  # interleaved keys: the rowsets overlap in key range
        _write(t, clock, range(i, n_rowsets * per, n_rowsets), i + 1)
        t.flush_mrs()
    _write(t, clock, range(10**6, 10**6 + 3000), 10)  # and rows still in memory
    assert len(t.rowsets()) >= n_rowsets
    bases = [d.base for d in t.rowsets()]
    assert all(isinstance(b, ParquetBase) for b in bases)
    total = sum(int(b.block_bytes().sum()) for b in bases if isinstance(b, ParquetBase))
    ranges = t.split_key_range(None, None, total // 6)
    assert 4 <= len(ranges) <= 12
    assert ranges[0].start is None and ranges[-1].stop is None
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    seen: list[int] = []
    for r in ranges:
        seen += _keys_in(t, r.start, r.stop)
    assert sorted(seen) == [*range(n_rowsets * per), *range(10**6, 10**6 + 3000)]  # each row once

    lo, hi = encode_key(schema, 1000), encode_key(schema, 20_000)
    bounded = t.split_key_range(lo, hi, total // 20, ["v"])
    assert bounded[0].start == lo and bounded[-1].stop == hi and len(bounded) > 1
    assert sorted(k for r in bounded for k in _keys_in(t, r.start, r.stop)) == list(range(1000, 20_000))
    with pytest.raises(KuduInvalidArgument, match="nope"):
        t.split_key_range(None, None, 100, ["nope"])


def test_reads_are_charged_to_the_thread_that_asked_hits_and_misses(tmp_path: Any) -> None:
    cache = BlockCache(64 << 20)
    t, _, clock = _tablet(str(tmp_path / "t"), cache)
    _write(t, clock, range(20_000), 1)
    t.flush_mrs()

    def counted(spec: ScanSpec) -> ReadCounts:
        counts = ReadCounts()
        before = charge_reads_to(counts)
        try:
            t.scan(spec).to_table()
        finally:
            assert charge_reads_to(before) is counts
        return counts

    whole = counted(ScanSpec())  # a range scan decodes from the file, around the cache
    assert whole.miss_bytes > 0
    point = counted(ScanSpec(predicates=[ColumnPredicate("k", "=", 7).bind(t.info.schema)]))
    assert point.hit_bytes > 0  # the flush left the blocks in the cache
    uncounted = ReadCounts()
    t.scan(ScanSpec()).to_table()  # charged to nobody
    assert (uncounted.hit_bytes, uncounted.miss_bytes) == (0, 0)
