"""ARRAY columns in a tablet: the MemRowSet, DiskRowSet base files (Parquet list columns), deltas (an
UPDATE replaces the whole array), compaction, projections, IS [NOT] NULL predicates, reopen and alter."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kudu_async.common import types as T
from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.column import ColumnSchema
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.schema import Schema
from kudu_async.tablet.ops import LoggedWrite, OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions

INS, U, UP, D = OpType.INSERT, OpType.UPDATE, OpType.UPSERT, OpType.DELETE


def _arr(name: str, elem: T.KuduType, **kw: Any) -> ColumnSchema:
    return ColumnSchema(name, T.NESTED, nested_type=T.array_type(elem), **kw)


SCHEMA = Schema(
    [
        ColumnSchema("key", T.INT64, False),
        _arr("ints", T.INT32, encoding="rle"),
        _arr("strs", T.STRING, compression="zstd"),
        _arr("stamps", T.UNIXTIME_MICROS),
        _arr("decs", T.DECIMAL, precision=8, scale=2),
        _arr("days", T.DATE),
        ColumnSchema("n", T.INT32),
    ],
    1,
).with_column_ids()

ROWS: list[dict[str, Any]] = [
    {
        "key": 1,
        "ints": [1, None, 3],
        "strs": ["a", "b"],
        "stamps": [0, None],
        "decs": [Decimal("1.25")],
        "days": [dt.date(2020, 1, 1)],
        "n": 1,
    },
    {"key": 2, "ints": None, "strs": [], "stamps": None, "decs": [None], "days": None, "n": 2},
    {"key": 3, "ints": [], "strs": [None, "z"], "stamps": [5], "decs": [], "days": [], "n": 3},
]


class H:
    def __init__(self, path: str, schema: Schema = SCHEMA) -> None:
        self.path, self.schema = path, schema
        self.clock = ManualHybridClock(10**12)
        self.opts = TabletOptions(sync=False)
        self.tablet = Tablet.create(path, schema, tablet_id="t", options=self.opts, clock=self.clock)
        self.wal: list[LoggedWrite] = []

    def write(self, types: list[int], rows: list[dict[str, Any]], names: list[str] | None = None) -> Any:
        cols = [c for c in self.schema.columns if names is None or c.name in names]
        batch = pa.record_batch(
            [pa.array([r.get(c.name) for r in rows], c.arrow_type) for c in cols],
            schema=pa.schema([c.to_arrow_field() for c in cols]),
        )
        mask = None
        if names is not None:
            mask = np.array([[c.name in names for c in self.schema.columns]] * len(rows))
            batch = pa.record_batch(
                [
                    batch.column(c.name) if c.name in names else pa.nulls(len(rows), c.arrow_type)
                    for c in self.schema.columns
                ],
                schema=self.schema.to_arrow(),
            )
        op = WriteOp(types, batch, mask)
        self.clock.advance(10)
        ts = self.clock.now()
        self.wal.append(LoggedWrite(len(self.wal) + 1, ts, op))
        res = self.tablet.write(op, ts, len(self.wal))
        assert not res.row_errors, res.row_errors
        return res

    def rows(self, **kw: Any) -> list[dict[str, Any]]:
        t = self.tablet.scan(ScanSpec(ordered=True, **kw)).to_table()
        return [] if t is None else t.to_pylist()


def _expected(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        r = dict(r)
        if r["stamps"] is not None:
            r["stamps"] = [None if v is None else T.micros_to_datetime(v) for v in r["stamps"]]
        out.append(r)
    return out


@pytest.mark.parametrize("where", ["memrowset", "diskrowset"])
def test_insert_scan_project_and_predicates(tmp_path: Any, where: str) -> None:
    h = H(str(tmp_path / "t"))
    h.write([INS] * 3, ROWS)
    if where == "diskrowset":
        assert h.tablet.flush_mrs()
    assert h.rows() == _expected(ROWS)
    assert h.rows(projection=["strs", "key"]) == [{"strs": r["strs"], "key": r["key"]} for r in ROWS]
    null_ints = h.rows(projection=["key"], predicates=[ColumnPredicate("ints", "IS NULL")])
    assert null_ints == [{"key": 2}]
    some = h.rows(projection=["key"], predicates=[ColumnPredicate("stamps", "IS NOT NULL")])
    assert some == [{"key": 1}, {"key": 3}]


def test_base_file_stores_list_columns_with_the_element_encodings(tmp_path: Any) -> None:
    h = H(str(tmp_path / "t"))
    h.write([INS] * 3, ROWS)
    assert h.tablet.flush_mrs()
    files = [p for p in (tmp_path / "t" / "data").rglob("*") if p.is_file() and p.read_bytes()[:4] == b"PAR1"]
    md = pq.ParquetFile(str(files[0])).metadata
    leaves = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i) for i in range(md.num_columns)}
    assert "ints.list.element" in leaves and "strs.list.element" in leaves
    assert leaves["strs.list.element"].compression == "ZSTD"
    # RLE on ints is dictionary indices run-length encoded; BIT_SHUFFLE (auto) on timestamps is delta
    assert leaves["ints.list.element"].has_dictionary_page
    assert "DELTA_BINARY_PACKED" in leaves["stamps.list.element"].encodings


@pytest.mark.parametrize("flush_first", [False, True])
def test_update_replaces_the_whole_array_through_deltas_and_compaction(tmp_path: Any, flush_first: bool) -> None:
    h = H(str(tmp_path / "t"))
    h.write([INS] * 3, ROWS)
    if flush_first:
        h.tablet.flush_mrs()
    h.write([U, U], [{"key": 1, "ints": [9]}, {"key": 2, "ints": [None, 8]}], names=["key", "ints"])
    h.write([U], [{"key": 3, "strs": None}], names=["key", "strs"])
    want = _expected(ROWS)
    want[0]["ints"], want[1]["ints"], want[2]["strs"] = [9], [None, 8], None
    assert h.rows() == want
    h.tablet.flush_all()
    assert h.rows() == want
    h.write([INS, UP], [{**ROWS[0], "key": 4}, {**ROWS[1], "key": 1, "ints": [7, 7]}])
    h.tablet.flush_all()
    assert h.tablet.compact_rowsets()
    want[0] = {**_expected([ROWS[1]])[0], "key": 1, "ints": [7, 7]}
    want.append({**_expected([ROWS[0]])[0], "key": 4})
    assert h.rows() == want
    h.tablet = Tablet.open(h.path, log_ops=list(h.wal), options=h.opts, clock=h.clock)
    assert h.rows() == want


def test_alter_adds_and_drops_array_columns(tmp_path: Any) -> None:
    h = H(str(tmp_path / "t"))
    h.write([INS] * 3, ROWS)
    h.tablet.flush_mrs()
    added = SCHEMA.add_column(_arr("more", T.DOUBLE)).with_column_ids()  # as the master assigns them
    assert h.tablet.alter_schema(added, 1, 10)
    h.schema = added
    h.write([U], [{"key": 1, "more": [0.5, None]}], names=["key", "more"])
    got = h.rows(projection=["key", "more"])
    assert got == [{"key": 1, "more": [0.5, None]}, {"key": 2, "more": None}, {"key": 3, "more": None}]
    dropped = added.drop_column("ints")
    assert h.tablet.alter_schema(dropped, 2, 11)
    h.schema = dropped
    h.tablet.flush_all()
    h.tablet.compact_rowsets()
    assert "ints" not in h.rows()[0]
    assert h.rows(projection=["more"])[0] == {"more": [0.5, None]}


def test_checksum_covers_array_cells_and_does_not_depend_on_storage(tmp_path: Any) -> None:
    a, b = H(str(tmp_path / "a")), H(str(tmp_path / "b"))
    for h in (a, b):
        h.write([INS] * 3, ROWS)
    b.tablet.flush_mrs()
    ca, cb = a.tablet.checksum(), b.tablet.checksum()
    assert ca["rows"] == cb["rows"] == 3 and ca["checksum"] == cb["checksum"]
    a.write([U], [{"key": 1, "ints": [1, None]}], names=["key", "ints"])
    assert a.tablet.checksum()["checksum"] != ca["checksum"]
