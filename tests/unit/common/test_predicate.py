"""Column predicates: vectorised evaluation with SQL NULL semantics, scalar matching, wire form."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.schema import ColumnSchema, Schema

BATCH = pa.record_batch(
    {
        "i": pa.array([1, None, 3, 4], pa.int64()),
        "s": pa.array(["a", "b", None, "d"]),
        "ts": pa.array([0, 1_000_000, None, 2_000_000], pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2020, 1, 1), None, dt.date(2021, 1, 1), dt.date(2022, 1, 1)], pa.date32()),
        "dec": pa.array([Decimal("1.10"), Decimal("2.20"), None, Decimal("-1.00")], pa.decimal128(5, 2)),
    }
)


def ev(col: str, op: str, value: Any = None) -> list[bool]:
    out = ColumnPredicate(col, op, value).evaluate(BATCH)
    assert isinstance(out, pa.BooleanArray) and out.null_count == 0
    return out.to_pylist()


def test_comparisons_never_match_null() -> None:
    assert ev("i", "=", 3) == [False, False, True, False]
    assert ev("i", "<", 3) == [True, False, False, False]
    assert ev("i", "<=", 3) == [True, False, True, False]
    assert ev("i", ">", 3) == [False, False, False, True]
    assert ev("i", ">=", 1) == [True, False, True, True]
    assert ev("s", ">=", "b") == [False, True, False, True]


def test_in_list_with_null_does_not_match_null_cells() -> None:
    assert ev("i", "IN", [1, None, 4]) == [True, False, False, True]
    assert ev("s", "IN", []) == [False] * 4


def test_is_null_and_is_not_null() -> None:
    assert ev("i", "IS NULL") == [False, True, False, False]
    assert ev("s", "IS NOT NULL") == [True, True, False, True]


def test_time_date_and_decimal_values() -> None:
    assert ev("ts", ">=", dt.datetime(1970, 1, 1, 0, 0, 1)) == [False, True, False, True]
    assert ev("ts", "<", dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)) == [True, False, False, False]
    assert ev("day", ">", dt.date(2020, 6, 1)) == [False, False, True, True]
    assert ev("dec", ">", Decimal("1.5")) == [False, True, False, False]


def test_wrong_value_type_names_the_column() -> None:
    with pytest.raises(KuduInvalidArgument, match="predicate on column 'i': expected int64, got str"):
        ev("i", "=", "x")


def test_operator_aliases_and_validation() -> None:
    assert ColumnPredicate("i", "==", 1).op == "="
    assert ColumnPredicate("i", "in", (1, 2)).value == (1, 2)
    assert ColumnPredicate("i", "is not null").op == "IS NOT NULL"
    with pytest.raises(KuduInvalidArgument, match="unknown predicate operator '!='"):
        ColumnPredicate("i", "!=", 1)
    with pytest.raises(KuduInvalidArgument, match="use IS NULL"):
        ColumnPredicate("i", "=", None)
    with pytest.raises(KuduInvalidArgument, match="needs a list"):
        ColumnPredicate("i", "IN", "abc")


def test_predicates_evaluate_on_tables_too() -> None:
    table = pa.Table.from_batches([BATCH, BATCH])
    mask = pc.and_(ColumnPredicate("i", ">", 1).evaluate(table), ColumnPredicate("s", "IS NOT NULL").evaluate(table))
    assert mask.to_pylist() == [False, False, False, True] * 2


def test_bind_coerces_to_the_column_type() -> None:
    schema = Schema([ColumnSchema("k", T.INT64, nullable=False), ColumnSchema("t", T.UNIXTIME_MICROS)], 1)
    assert ColumnPredicate("t", ">", dt.datetime(1970, 1, 1, 0, 0, 1)).bind(schema).value == 1_000_000
    with pytest.raises(KuduInvalidArgument, match="column 'k': expected int64, got str"):
        ColumnPredicate("k", "=", "1").bind(schema)


@pytest.mark.parametrize(
    "pred",
    [
        ColumnPredicate("a", "=", 1),
        ColumnPredicate("a", "IN", [Decimal("1.5"), dt.date(2020, 1, 1), b"x", "s"]),
        ColumnPredicate("a", "<", dt.datetime(2020, 1, 1, tzinfo=dt.UTC)),
        ColumnPredicate("a", "IS NULL"),
    ],
)
def test_dict_roundtrip_through_msgpack(pred: ColumnPredicate) -> None:
    assert ColumnPredicate.from_dict(msgpack.unpackb(msgpack.packb(pred.to_dict()))) == pred


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.none() | st.integers(-5, 5), max_size=20),
    st.sampled_from(["=", "<", "<=", ">", ">=", "IN", "IS NULL", "IS NOT NULL"]),
    st.integers(-5, 5),
    st.lists(st.none() | st.integers(-5, 5), max_size=3),
)
def test_vectorised_agrees_with_scalar_matches(values: list[int | None], op: str, v: int, vs: list[int | None]) -> None:
    value: Any = vs if op == "IN" else (None if op.startswith("IS") else v)
    p = ColumnPredicate("c", op, value)
    got = p.evaluate(pa.record_batch({"c": pa.array(values, pa.int32())})).to_pylist()
    assert got == [p.matches(x) for x in values]


def test_decimal_value_finer_than_the_column_scale_is_rejected_clearly() -> None:
    with pytest.raises(KuduInvalidArgument, match=r"predicate on column 'dec': 1.234 does not fit decimal\(5,2\)"):
        ev("dec", ">", Decimal("1.234"))


def test_missing_column_is_invalid_argument() -> None:
    with pytest.raises(KuduInvalidArgument, match="predicate column 'zz' is not in the batch"):
        ev("zz", "=", 1)
