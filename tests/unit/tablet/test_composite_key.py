"""A (string, int64) primary key: variable-width keys, embedded zero bytes, prefix pruning."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.read_path import ReadPath
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions, TabletScanner

FIELDS = [pa.field("host", pa.string(), False), pa.field("ts", pa.int64(), False), pa.field("v", pa.int32())]
HOSTS = ["a", "a\x00b", "a\x00", "ab", "", "b"]


def _tablet(path: str) -> tuple[Tablet, Any, ManualHybridClock]:
    from kudu_async.common.schema import Schema

    schema = Schema.from_arrow(pa.schema(FIELDS), num_key_columns=2)
    clock = ManualHybridClock(10**12)
    return Tablet.create(path, schema, options=TabletOptions(sync=False), clock=clock), schema, clock


def _rows(t: Tablet, **kw: Any) -> list[tuple[Any, ...]]:
    tbl = t.scan(ScanSpec(ordered=True, **kw)).to_table()
    return [] if tbl is None else list(zip(*[tbl.column(c).to_pylist() for c in tbl.column_names], strict=True))


def test_composite_keys_sort_as_tuples_and_survive_flush_compaction_and_reopen(tmp_path: Any) -> None:
    from kudu_async.common.predicate import ColumnPredicate

    t, schema, clock = _tablet(str(tmp_path / "t"))
    arrow = schema.to_arrow()
    rows = [(h, ts) for h in HOSTS for ts in (-5, 0, 7)]
    for i, chunk in enumerate((rows[::2], rows[1::2])):
        b = pa.record_batch(
            [
                pa.array([r[0] for r in chunk]),
                pa.array([r[1] for r in chunk], pa.int64()),
                pa.array([len(r[0]) for r in chunk], pa.int32()),
            ],
            schema=arrow,
        )
        t.write(WriteOp([OpType.INSERT] * len(chunk), b), clock.now(), i + 1)
        t.flush_mrs()
    upd = pa.record_batch([pa.array(["a\x00"]), pa.array([0], pa.int64()), pa.array([99], pa.int32())], schema=arrow)
    res = t.write(WriteOp([OpType.UPDATE], upd), clock.now(), 3)
    assert res.row_errors == []
    want = sorted((h, ts, 99 if (h, ts) == ("a\x00", 0) else len(h)) for h, ts in rows)
    assert _rows(t) == want
    got = _rows(t, predicates=[ColumnPredicate("host", "=", "a\x00")])
    assert got == [r for r in want if r[0] == "a\x00"]
    got = _rows(t, predicates=[ColumnPredicate("host", "<", "a\x00b")])
    assert got == [r for r in want if r[0] < "a\x00b"]
    got = _rows(t, predicates=[ColumnPredicate("host", "IN", ["", "b"])], projection=["host", "ts"])
    assert got == [r[:2] for r in want if r[0] in ("", "b")]
    assert t.lookup(t.info.encode_key(["a\x00b", 7])) == {"host": "a\x00b", "ts": 7, "v": 3}
    assert t.compact_rowsets()
    assert len(t.rowsets()) == 1
    reopened = Tablet.open(str(tmp_path / "t"), options=TabletOptions(sync=False), clock=clock)
    assert _rows(reopened) == want


def test_scans_pinning_the_whole_key_are_point_reads_with_the_general_paths_answers(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both key columns '=': the row is looked up (no rowset scanned); one of them, or two values for
    one column, leave the general path to decide. Answers are the same either way."""
    from kudu_async.common.predicate import ColumnPredicate as P

    t, schema, clock = _tablet(str(tmp_path / "t"))
    arrow = schema.to_arrow()
    rows = [(h, ts) for h in HOSTS for ts in (-5, 0, 7)]
    b = pa.record_batch(
        [
            pa.array([r[0] for r in rows]),
            pa.array([r[1] for r in rows], pa.int64()),
            pa.array([len(r[0]) for r in rows], pa.int32()),
        ],
        schema=arrow,
    )
    t.write(WriteOp([OpType.INSERT] * len(rows), b), clock.now(), 1)
    t.flush_mrs()  # half on disk, half in memory, one row updated and one deleted after the flush
    more = pa.record_batch([pa.array(["zz"]), pa.array([1], pa.int64()), pa.array([5], pa.int32())], schema=arrow)
    t.write(WriteOp([OpType.INSERT], more), clock.now(), 2)
    upd = pa.record_batch(
        [pa.array(["a\x00", "b"]), pa.array([0, 7], pa.int64()), pa.array([99, 0], pa.int32())], schema=arrow
    )
    t.write(WriteOp([OpType.UPDATE, OpType.DELETE], upd), clock.now(), 3)
    cases = [
        ([P("host", "=", "a\x00"), P("ts", "=", 0)], [("a\x00", 0, 99)]),
        ([P("host", "=", "zz"), P("ts", "=", 1)], [("zz", 1, 5)]),
        ([P("host", "=", "b"), P("ts", "=", 7)], []),  # deleted
        ([P("host", "=", "a"), P("ts", "=", 8)], []),  # never written
        ([P("host", "=", "a"), P("ts", "=", 0), P("v", ">", 0)], [("a", 0, 1)]),
        ([P("host", "=", "a"), P("ts", "=", 0), P("v", ">", 1)], []),
        ([P("host", "=", "a"), P("ts", "=", 0), P("ts", "=", 7)], []),  # two values for one column
        ([P("host", "=", "a"), P("ts", "=", 0), P("host", "=", "a")], [("a", 0, 1)]),
        ([P("host", "=", "a")], [("a", -5, 1), ("a", 0, 1), ("a", 7, 1)]),  # not the whole key
    ]
    points = 0
    real = ReadPath._point_read

    def counting(self: ReadPath, *a: Any) -> Any:
        nonlocal points
        got = real(self, *a)
        points += got is not None
        return got

    monkeypatch.setattr(ReadPath, "_point_read", counting)
    for preds, want in cases:
        assert _rows(t, predicates=preds) == want, preds
        assert _rows(t, predicates=preds, projection=["v"]) == [(r[2],) for r in want], preds
        assert _rows(t, predicates=preds, limit=0) == []
    assert points == 3 * 6  # the six cases that pin both columns exactly once


def test_point_reads_of_rows_in_memory_start_without_a_worker_and_answer_as_the_scan_does(tmp_path: Any) -> None:
    """``scan_in_memory`` (which the tserver calls on its event loop) answers only lookups it can settle
    from the MemRowSet or the key ranges, with the general scan's answer; a row that only a rowset file
    could hold, a scan that is not a lookup, or a component lock held by another thread leave it to
    ``scan`` in a worker (None)."""
    import threading

    from kudu_async.common.predicate import ColumnPredicate as P

    t, schema, clock = _tablet(str(tmp_path / "t"))
    arrow = schema.to_arrow()
    b = pa.record_batch(
        [pa.array(["a", "b"]), pa.array([0, 7], pa.int64()), pa.array([1, 2], pa.int32())], schema=arrow
    )
    t.write(WriteOp([OpType.INSERT] * 2, b), clock.now(), 1)
    t.flush_mrs()  # a, b on disk
    more = pa.record_batch(
        [pa.array(["zz", "yy"]), pa.array([1, 2], pa.int64()), pa.array([5, 6], pa.int32())], schema=arrow
    )
    t.write(WriteOp([OpType.INSERT] * 2, more), clock.now(), 2)
    dele = pa.record_batch([pa.array(["yy"]), pa.array([2], pa.int64()), pa.array([None], pa.int32())], schema=arrow)
    t.write(WriteOp([OpType.DELETE], dele), clock.now(), 3)

    def in_memory(preds: list[Any], **kw: Any) -> list[tuple[Any, ...]] | None:
        spec = ScanSpec(predicates=preds, **kw)
        key = t.point_lookup_key(spec)
        it = None if key is None else t.scan_in_memory(spec, key)
        if it is None:
            return None
        tbl = it.to_table()
        return [] if tbl is None else list(zip(*[tbl.column(c).to_pylist() for c in tbl.column_names], strict=True))

    zz = [P("host", "=", "zz"), P("ts", "=", 1)]
    assert in_memory(zz) == _rows(t, predicates=zz) == [("zz", 1, 5)]
    assert in_memory(zz, projection=["v"]) == [(5,)]
    assert in_memory([*zz, P("v", ">", 5)]) == []  # a non-key predicate still filters
    assert in_memory([P("host", "=", "yy"), P("ts", "=", 2)]) == []  # deleted in memory
    assert in_memory(zz, lower_key=t.info.encode_key(["zzz", 0])) == []  # the bounds rule it out
    assert in_memory([P("host", "=", "a"), P("ts", "=", 0)]) is None  # in a rowset file (no block cache here)
    assert in_memory([P("host", "=", "c"), P("ts", "=", 0)]) == []  # beyond every rowset's max key
    assert in_memory([P("host", "=", "zz")]) is None  # not the whole key
    assert t.point_lookup_key(ScanSpec(predicates=zz)) == t.info.encode_key(["zz", 1])
    assert t.point_lookup_key(ScanSpec(predicates=zz[:1])) is None

    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with t.components.lock:
            held.set()
            release.wait(10)

    th = threading.Thread(target=holder)
    th.start()
    try:
        held.wait(10)
        assert in_memory(zz) is None  # a flush or a write holds the components: never waited for
    finally:
        release.set()
        th.join()
    assert in_memory(zz) == [("zz", 1, 5)]


def test_a_point_read_of_an_unchanged_row_in_memory_is_a_slice_of_its_batch(tmp_path: Any) -> None:
    """A MemRowSet row never changed since its insert is answered as a one-row slice of the batch it
    arrived in (zero copy); one updated since, or not yet visible at the snapshot, by the general path."""
    from kudu_async.common.predicate import ColumnPredicate as P
    from kudu_async.tablet.tablet import READ_AT_SNAPSHOT

    t, schema, clock = _tablet(str(tmp_path / "t"))
    arrow = schema.to_arrow()
    before = clock.now()
    b = pa.record_batch(
        [pa.array(["h1", "h2"]), pa.array([1, 2], pa.int64()), pa.array([10, 20], pa.int32())], schema=arrow
    )
    t.write(WriteOp([OpType.INSERT] * 2, b), clock.now(), 1)
    upd = pa.record_batch([pa.array(["h2"]), pa.array([2], pa.int64()), pa.array([21], pa.int32())], schema=arrow)
    t.write(WriteOp([OpType.UPDATE], upd), clock.now(), 2)

    def read(host: str, ts: int, **kw: Any) -> pa.Table | None:
        spec = ScanSpec(predicates=[P("host", "=", host), P("ts", "=", ts)], **kw)
        it: TabletScanner | None
        if kw:
            it = t.scan(spec)
        else:
            key = t.point_lookup_key(spec)
            assert key is not None  # both key columns are pinned
            it = t.scan_in_memory(spec, key)
        assert it is not None
        return it.to_table()

    h1 = read("h1", 1)
    assert h1 is not None and h1.to_pylist() == [{"host": "h1", "ts": 1, "v": 10}]
    inserted = {buf.address for col in b.columns for buf in col.buffers() if buf is not None}
    assert h1.column("v").chunk(0).buffers()[1].address in inserted  # the batch's own memory
    h2 = read("h2", 2)
    assert h2 is not None and h2.to_pylist() == [{"host": "h2", "ts": 2, "v": 21}]
    assert read("h1", 1, read_mode=READ_AT_SNAPSHOT, snapshot_ts=before) is None


def test_unordered_scan_resume_keys_of_rowsets_equal_the_stored_keys(tmp_path: Any) -> None:
    """An unordered scan reads rowsets without ``_key`` and encodes each batch's resume key from the
    key columns: it must be the key the rowset stores, with or without the key columns projected."""
    t, schema, clock = _tablet(str(tmp_path / "t"))
    arrow = schema.to_arrow()
    rows = sorted((h, ts) for h in HOSTS for ts in range(-3, 40))
    b = pa.record_batch(
        [
            pa.array([r[0] for r in rows]),
            pa.array([r[1] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.int32()),
        ],
        schema=arrow,
    )
    t.write(WriteOp([OpType.INSERT] * len(rows), b), clock.now(), 1)
    t.flush_mrs()
    for projection in (["v"], ["ts", "host"], []):
        seen: list[int] = []
        resume: bytes | None = None
        while True:
            sc = t.scan(ScanSpec(projection=projection, batch_bytes=64, resume_after_key=resume))
            batch = next(sc, None)
            if batch is None:
                break
            seen.append(batch.num_rows)
            assert sc.last_key is not None
            assert sc.last_key in {t.info.encode_key(list(r)) for r in rows}
            resume = sc.last_key
        assert sum(seen) == len(rows) and len(seen) > 1
