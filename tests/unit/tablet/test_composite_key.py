"""A (string, int64) primary key: variable-width keys, embedded zero bytes, prefix pruning."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from conftest import HAVE_COMMON

from kudu_async.common.clock import ManualHybridClock
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions

pytestmark = pytest.mark.skipif(not HAVE_COMMON, reason="needs kudu_async.common.schema")

FIELDS = [pa.field("host", pa.string(), False), pa.field("ts", pa.int64(), False), pa.field("v", pa.int32())]
HOSTS = ["a", "a\x00b", "a\x00", "ab", "", "b"]


def _tablet(path: str) -> tuple[Tablet, Any, ManualHybridClock]:
    from kudu_async.common.schema import Schema

    schema = Schema.from_arrow(pa.schema(FIELDS), num_key_columns=2)
    clock = ManualHybridClock(10**12)
    return Tablet.create(path, schema, options=TabletOptions(sync=False), clock=clock), schema, clock


def _rows(t: Tablet, **kw: Any) -> list[tuple[Any, ...]]:
    tbl = t.scan(ScanSpec(ordered=True, **kw)).to_table()
    return (
        [] if tbl is None else list(zip(*[tbl.column(c).to_pylist() for c in tbl.column_names], strict=True))
    )


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
    upd = pa.record_batch(
        [pa.array(["a\x00"]), pa.array([0], pa.int64()), pa.array([99], pa.int32())], schema=arrow
    )
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
