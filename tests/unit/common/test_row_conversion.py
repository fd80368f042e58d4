"""Rows <-> Arrow batches and Arrow IPC stream bytes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

from kudu_async.common import types as T
from kudu_async.common.row_conversion import batch_to_ipc, batch_to_tuples, ipc_to_table
from kudu_async.common.schema import ColumnSchema, Schema

SCHEMA = Schema(
    [
        ColumnSchema("k", T.INT64, nullable=False),
        ColumnSchema("ts", T.UNIXTIME_MICROS),
        ColumnSchema("d", T.DECIMAL, precision=6, scale=2),
        ColumnSchema("day", T.DATE),
        ColumnSchema("b", T.BINARY),
    ],
    1,
)


def test_validated_rows_to_a_batch_and_back_as_dicts_and_tuples() -> None:
    when = dt.datetime(2021, 5, 6, 7, 8, 9, 10, tzinfo=dt.UTC)
    rows: list[dict[str, object] | tuple[object, ...]] = [
        {"k": 1, "ts": when, "d": Decimal("1.5"), "day": dt.date(2021, 1, 1), "b": b"\x00"},
        (2, None, None, None, None),
    ]
    checked = [SCHEMA.validate_row(r, for_op="insert") for r in rows]
    batch = pa.RecordBatch.from_pylist(checked, schema=SCHEMA.to_arrow())
    assert batch.to_pylist()[0] == {
        "k": 1,
        "ts": when,
        "d": Decimal("1.50"),
        "day": dt.date(2021, 1, 1),
        "b": b"\x00",
    }
    assert batch_to_tuples(batch)[1] == (2, None, None, None, None)


def test_ipc_roundtrip_keeps_schema_and_batches() -> None:
    batch = pa.RecordBatch.from_pylist([{"k": i} for i in range(5)], schema=SCHEMA.to_arrow())
    data = batch_to_ipc([batch, batch])
    assert isinstance(data, bytes)
    got = ipc_to_table(data).to_batches()
    assert len(got) == 2 and all(b.equals(batch) for b in got)
    empty = pa.Table.from_batches([], schema=SCHEMA.to_arrow())
    assert ipc_to_table(batch_to_ipc(empty)).schema.equals(SCHEMA.to_arrow())


def test_op_mask_matches_isin_for_every_dtype_and_out_of_range_types() -> None:
    import numpy as np

    from kudu_async.common.row_conversion import VALID_OP_TYPES, op_mask

    rng = np.random.default_rng(7)
    kinds = (1, 5, 10, 13)
    for dtype in (np.int8, np.uint8, np.int64):
        lo, hi = (-128, 128) if dtype == np.int8 else (0, 256) if dtype == np.uint8 else (-1000, 1000)
        types = rng.integers(lo, hi, 5000).astype(dtype)
        np.testing.assert_array_equal(op_mask(types, kinds), np.isin(types, kinds))
        np.testing.assert_array_equal(op_mask(types, VALID_OP_TYPES), np.isin(types, VALID_OP_TYPES))
    assert op_mask(np.array([], dtype=np.int64), kinds).shape == (0,)
    assert op_mask([1, 2, 300, -1, 13], kinds).tolist() == [True, False, False, False, True]
