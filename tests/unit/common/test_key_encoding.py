"""Order-preserving key encoding: exact bytes per type, tuple order, vectorised == scalar, round trip."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.key_encoding import (
    decode_values,
    encode_key,
    encode_key_prefix,
    encode_keys,
    prefix_successor,
)
from kudu_async.common.schema import ColumnSchema, Schema


def key_schema(*cols: ColumnSchema) -> Schema:
    return Schema([*cols, ColumnSchema("payload", T.INT8)], len(cols))


def K(name: str, kt: T.KuduType, **kw: Any) -> ColumnSchema:
    return ColumnSchema(name, kt, nullable=False, **kw)


# --- exact bytes per type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("col", "value", "expected"),
    [
        (K("k", T.INT8), -128, b"\x00"),
        (K("k", T.INT8), 0, b"\x80"),
        (K("k", T.INT8), 127, b"\xff"),
        (K("k", T.INT16), -1, b"\x7f\xff"),
        (K("k", T.INT32), 1, b"\x80\x00\x00\x01"),
        (K("k", T.INT64), -(2**63), b"\x00" * 8),
        (K("k", T.INT64), 5, b"\x80\x00\x00\x00\x00\x00\x00\x05"),
        (K("k", T.DATE), dt.date(1970, 1, 2), b"\x80\x00\x00\x01"),
        (K("k", T.UNIXTIME_MICROS), dt.datetime(1970, 1, 1, 0, 0, 0, 1), b"\x80" + b"\x00" * 6 + b"\x01"),
        (K("k", T.DECIMAL, precision=9, scale=2), Decimal("-0.01"), b"\x7f\xff\xff\xff"),
        (K("k", T.DECIMAL, precision=18, scale=0), 1, b"\x80" + b"\x00" * 6 + b"\x01"),
        (K("k", T.DECIMAL, precision=38, scale=0), -1, b"\x7f" + b"\xff" * 15),
        (K("k", T.STRING), "a\x00b", b"a\x00b"),
        (K("k", T.BINARY), b"\x00\xff", b"\x00\xff"),
        (K("k", T.VARCHAR, length=2), "abc", b"ab"),
    ],
)
def test_single_column_encoding(col: ColumnSchema, value: Any, expected: bytes) -> None:
    s = key_schema(col)
    assert encode_key(s, [value]) == expected
    batch = pa.record_batch([pa.array([col.coerce(value)], col.arrow_type)], names=[col.name])
    assert encode_keys(s, batch).to_pylist() == [expected]


def test_non_last_string_is_escaped_and_terminated() -> None:
    s = key_schema(K("a", T.STRING), K("b", T.BINARY))
    assert encode_key(s, ["x\x00y", b"\x00"]) == b"x\x00\x01y\x00\x00\x00"
    assert decode_values(s.key_columns, b"x\x00\x01y\x00\x00\x00") == ("x\x00y", b"\x00")


def test_encode_key_accepts_a_mapping() -> None:
    s = key_schema(K("a", T.INT32), K("b", T.STRING))
    assert encode_key(s, {"a": 1, "b": "z", "payload": 3}) == encode_key(s, (1, "z"))


def test_prefix_encoding_is_a_prefix_of_full_keys() -> None:
    s = key_schema(K("a", T.STRING), K("b", T.INT64))
    assert encode_key(s, ("ab", 3)).startswith(encode_key_prefix(s, ["ab"]))


def test_null_key_value_rejected() -> None:
    with pytest.raises(KuduInvalidArgument, match="column 'k': NULL in NOT NULL column"):
        encode_key(key_schema(K("k", T.INT64)), [None])


def test_wrong_key_value_type_rejected() -> None:
    with pytest.raises(KuduInvalidArgument, match="column 'k': expected int64, got str"):
        encode_key(key_schema(K("k", T.INT64)), ["1"])


def test_wrong_number_of_key_values_rejected() -> None:
    with pytest.raises(KuduInvalidArgument, match="expected 2 key values, got 1"):
        encode_key(key_schema(K("a", T.INT64), K("b", T.INT64)), [1])


def test_key_over_16k_rejected_scalar_and_vectorised() -> None:
    s = key_schema(K("a", T.BINARY), K("b", T.BINARY))
    with pytest.raises(KuduInvalidArgument, match="encoded primary key of 20002 bytes exceeds 16384"):
        encode_key(s, [b"x" * 10000, b"y" * 10000])
    batch = pa.record_batch({"a": pa.array([b"x" * 10000], pa.binary()), "b": pa.array([b"y" * 10000])})
    with pytest.raises(KuduInvalidArgument, match="exceeds 16384"):
        encode_keys(s, batch)


def test_vectorised_single_int64_key_on_a_sliced_array() -> None:
    s = key_schema(K("k", T.INT64))
    arr = pa.array(list(range(-5, 5)), pa.int64()).slice(3, 4)
    got = encode_keys(s, pa.record_batch([arr], names=["k"])).to_pylist()
    assert got == [encode_key(s, [v]) for v in arr.to_pylist()]


def test_vectorised_decimal_on_a_sliced_array() -> None:
    for p in (5, 15, 30):
        s = key_schema(K("k", T.DECIMAL, precision=p, scale=1))
        arr = pa.array([Decimal("-1.5"), Decimal("2.0"), Decimal("-0.1"), Decimal("3.3")], pa.decimal128(p, 1))
        arr = arr.slice(1, 3)
        got = encode_keys(s, pa.record_batch([arr], names=["k"])).to_pylist()
        assert got == [encode_key(s, [v]) for v in arr.to_pylist()]


def test_prefix_successor() -> None:
    assert prefix_successor(b"ab") == b"ac"
    assert prefix_successor(b"a\xff\xff") == b"b"
    assert prefix_successor(b"\xff") == b""


# --- properties -----------------------------------------------------------------------------------------

text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6)
small_text = st.text(alphabet="\x00\x01ab\xff", max_size=5)  # dense in embedded zero bytes
small_bytes = st.binary(max_size=5).map(lambda b: b.replace(b"\x02", b"\x00"))

SCHEMAS: list[tuple[Schema, list[st.SearchStrategy[Any]]]] = [
    (
        key_schema(K("a", T.INT8), K("b", T.STRING), K("c", T.INT64)),
        [st.integers(-128, 127), small_text, st.integers(-(2**63), 2**63 - 1)],
    ),
    (key_schema(K("a", T.STRING), K("b", T.BINARY)), [small_text | text, small_bytes]),
    (key_schema(K("a", T.BINARY), K("b", T.INT16)), [small_bytes, st.integers(-(2**15), 2**15 - 1)]),
    (
        key_schema(
            K("a", T.DECIMAL, precision=9, scale=2),
            K("b", T.DECIMAL, precision=18, scale=0),
            K("c", T.DECIMAL, precision=38, scale=5),
        ),
        [
            st.integers(-(10**9) + 1, 10**9 - 1).map(lambda u: T.unscaled_to_decimal(u, 2)),
            st.integers(-(10**18) + 1, 10**18 - 1).map(Decimal),
            st.integers(-(10**38) + 1, 10**38 - 1).map(lambda u: T.unscaled_to_decimal(u, 5)),
        ],
    ),
    (
        key_schema(K("a", T.DATE), K("b", T.UNIXTIME_MICROS), K("c", T.VARCHAR, length=4), K("d", T.INT32)),
        [
            st.dates(),
            st.integers(-(2**63), 2**63 - 1),
            small_text.map(lambda s: s[:4]),
            st.integers(-(2**31), 2**31 - 1),
        ],
    ),
]


def rows_for(idx: int) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(*SCHEMAS[idx][1])


def cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_encoding_order_is_tuple_order(data: st.DataObject) -> None:
    idx = data.draw(st.integers(0, len(SCHEMAS) - 1))
    schema = SCHEMAS[idx][0]
    a = data.draw(rows_for(idx))
    b = data.draw(rows_for(idx))
    assert cmp(encode_key(schema, a), encode_key(schema, b)) == cmp(a, b)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_decode_inverts_encode(data: st.DataObject) -> None:
    idx = data.draw(st.integers(0, len(SCHEMAS) - 1))
    schema = SCHEMAS[idx][0]
    row = data.draw(rows_for(idx))
    assert decode_values(schema.key_columns, encode_key(schema, row)) == row


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vectorised_equals_scalar(data: st.DataObject) -> None:
    idx = data.draw(st.integers(0, len(SCHEMAS) - 1))
    schema = SCHEMAS[idx][0]
    rows = data.draw(st.lists(rows_for(idx), min_size=0, max_size=20))
    cols = schema.key_columns
    arrays = [pa.array([r[i] for r in rows], c.arrow_type) for i, c in enumerate(cols)]
    batch = pa.record_batch(arrays, names=[c.name for c in cols])
    assert encode_keys(schema, batch).to_pylist() == [encode_key(schema, r) for r in rows]


def test_encode_keys_accepts_multi_chunk_tables() -> None:
    s = key_schema(K("a", T.STRING), K("b", T.INT32))
    b1 = pa.record_batch({"a": pa.array(["x", "y"]), "b": pa.array([1, 2], pa.int32())})
    b2 = pa.record_batch({"a": pa.array(["z"]), "b": pa.array([-3], pa.int32())})
    table = pa.Table.from_batches([b1, b2])
    assert encode_keys(s, table).to_pylist() == [encode_key(s, r) for r in [("x", 1), ("y", 2), ("z", -3)]]
