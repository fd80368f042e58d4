"""Kudu data types: names, Arrow types and Python value coercion."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kudu_async import schema as kudu_schema
from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument


def test_kudu_python_constant_names_resolve_to_types() -> None:
    for name in (
        "int8",
        "int16",
        "int32",
        "int64",
        "float",
        "double",
        "bool",
        "string",
        "binary",
        "unixtime_micros",
        "date",
        "decimal",
        "varchar",
    ):
        assert getattr(kudu_schema, name) is T.type_from_name(name)  # kudu.int8 ... as kudu-python names them
    assert T.type_from_name("FLOAT_") is T.FLOAT
    assert T.type_from_name(T.INT8) is T.INT8


def test_unknown_type_name_is_invalid_argument() -> None:
    with pytest.raises(KuduInvalidArgument, match="unknown data type 'int128'"):
        T.type_from_name("int128")


@pytest.mark.parametrize(
    ("kt", "arrow"),
    [
        (T.INT8, pa.int8()),
        (T.INT16, pa.int16()),
        (T.INT32, pa.int32()),
        (T.INT64, pa.int64()),
        (T.FLOAT, pa.float32()),
        (T.DOUBLE, pa.float64()),
        (T.BOOL, pa.bool_()),
        (T.STRING, pa.string()),
        (T.BINARY, pa.binary()),
        (T.UNIXTIME_MICROS, pa.timestamp("us", tz="UTC")),
        (T.DATE, pa.date32()),
        (T.VARCHAR, pa.string()),
    ],
)
def test_arrow_type_of_each_type(kt: T.KuduType, arrow: pa.DataType) -> None:
    assert kt.arrow_type() == arrow


def test_decimal_arrow_type_and_width_follow_precision() -> None:
    assert T.DECIMAL.arrow_type(9, 2) == pa.decimal128(9, 2)
    assert [T.decimal_width(p) for p in (1, 9, 10, 18, 19, 38)] == [4, 4, 8, 8, 16, 16]


def test_key_allowed_excludes_bool_float_double() -> None:
    assert {t.name for t in T.ALL_TYPES if not t.key_allowed} == {"bool", "float", "double"}


def test_types_survive_pickling_as_singletons() -> None:
    import pickle

    assert pickle.loads(pickle.dumps(T.DECIMAL)) is T.DECIMAL


@pytest.mark.parametrize(
    ("kt", "value", "message"),
    [
        (T.INT64, "1", "column 'c': expected int64, got str"),
        (T.INT32, 1.5, "column 'c': expected int32, got float"),
        (T.INT8, True, "column 'c': expected int8, got bool"),
        (T.INT8, 128, "column 'c': value 128 out of range for int8"),
        (T.INT16, -32769, "out of range for int16"),
        (T.BOOL, 1, "expected bool, got int"),
        (T.DOUBLE, "x", "expected double, got str"),
        (T.STRING, 5, "expected string, got int"),
        (T.BINARY, 5, "expected binary, got int"),
        (T.DATE, dt.datetime(2020, 1, 1), "expected date, got datetime"),
        (T.UNIXTIME_MICROS, "2020", "expected unixtime_micros"),
        (T.STRING, b"\xff", "invalid UTF-8"),
    ],
)
def test_coercion_errors_name_the_column_and_problem(kt: T.KuduType, value: object, message: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        T.coerce_value(kt, value, column="c")


def test_ints_accept_numpy_scalars() -> None:
    assert T.coerce_value(T.INT64, np.int64(7)) == 7
    assert T.coerce_value(T.DOUBLE, 3) == 3.0


def test_float_is_rounded_to_single_precision() -> None:
    assert T.coerce_value(T.FLOAT, 0.1) == float(np.float32(0.1))


def test_timestamp_from_aware_naive_and_int() -> None:
    aware = dt.datetime(2020, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    naive = dt.datetime(2020, 1, 1)
    expected = 1577836800 * 1_000_000
    assert T.coerce_value(T.UNIXTIME_MICROS, aware) == expected
    assert T.coerce_value(T.UNIXTIME_MICROS, naive) == expected
    assert T.coerce_value(T.UNIXTIME_MICROS, expected + 1) == expected + 1
    assert T.micros_to_datetime(expected) == dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def test_timestamp_before_epoch_is_negative_micros() -> None:
    assert T.coerce_value(T.UNIXTIME_MICROS, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1


def test_date_from_date_and_days() -> None:
    assert T.coerce_value(T.DATE, dt.date(1970, 1, 2)) == dt.date(1970, 1, 2)
    assert T.coerce_value(T.DATE, -1) == dt.date(1969, 12, 31)
    with pytest.raises(KuduInvalidArgument, match="out of range"):
        T.coerce_value(T.DATE, 10**8)


def test_decimal_is_quantised_and_range_checked() -> None:
    assert T.coerce_value(T.DECIMAL, Decimal("1.5"), precision=5, scale=2) == Decimal("1.50")
    assert T.coerce_value(T.DECIMAL, 12, precision=5, scale=2) == Decimal("12.00")
    with pytest.raises(KuduInvalidArgument, match="more than 2 fractional digits"):
        T.coerce_value(T.DECIMAL, Decimal("1.234"), precision=5, scale=2, column="d")
    with pytest.raises(KuduInvalidArgument, match=r"out of range for decimal\(5,2\)"):
        T.coerce_value(T.DECIMAL, Decimal("1000"), precision=5, scale=2)
    with pytest.raises(KuduInvalidArgument, match="expected decimal"):
        T.coerce_value(T.DECIMAL, 1.5, precision=5, scale=2)


def test_decimal_unscaled_is_exact_at_38_digits() -> None:
    d = Decimal("-1234567890123456789012345678901234.5678")
    u = T.decimal_to_unscaled(d, 4)
    assert u == -12345678901234567890123456789012345678
    assert T.unscaled_to_decimal(u, 4) == d


def test_varchar_truncates_to_length_in_characters() -> None:
    assert T.coerce_value(T.VARCHAR, "héllo", length=2) == "hé"


def test_cell_over_64k_rejected() -> None:
    with pytest.raises(KuduInvalidArgument, match="column 'val': cell of 70000 bytes exceeds 65536"):
        T.coerce_value(T.BINARY, b"x" * 70000, column="val")
    assert len(T.coerce_value(T.STRING, "x" * 65536)) == 65536


def test_binary_accepts_str_as_utf8() -> None:
    assert T.coerce_value(T.BINARY, "é") == "é".encode()


def test_wire_values_roundtrip() -> None:
    vals = [
        1,
        "s",
        b"b",
        Decimal("1.25"),
        dt.date(2020, 2, 2),
        dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        [1, 2],
    ]
    for v in vals:
        assert T.value_from_wire(T.value_to_wire(v)) == v


def test_canonical_check_accepts_only_values_coerce_returns_unchanged() -> None:
    """The row API's fast path (Schema.validate_row) must never let through what coerce_value would
    convert or reject."""
    samples: list[Any] = [
        0,
        1,
        -1,
        127,
        128,
        -129,
        2**31,
        2**63 - 1,
        2**63,
        -(2**63) - 1,
        True,
        False,
        1.5,
        2.0,
        float("nan"),
        "",
        "abc",
        "é" * 16_385,
        "x" * 70_000,
        b"",
        b"ab",
        b"x" * 70_000,
        bytearray(b"ab"),
        np.int64(5),
        np.float64(1.5),
        None,
        [1],
    ]
    for kt in (T.INT8, T.INT16, T.INT32, T.INT64, T.DOUBLE, T.FLOAT, T.BOOL, T.STRING, T.BINARY):
        check = T.canonical_check(kt)
        for v in samples:
            if check is None or v is None or not check(v):
                continue
            out = T.coerce_value(kt, v)
            assert type(out) is type(v) and (out == v or (out != out and v != v)), (kt, v)  # NaN stays NaN
    varchar = T.canonical_check(T.VARCHAR, 3)
    assert varchar is not None and varchar("abc") and not varchar("abcd")  # longer ones are truncated
    assert T.coerce_value(T.VARCHAR, "abcd", length=3) == "abc"
    for rejected in (2**63, True, "x" * 70_000):
        with pytest.raises(KuduInvalidArgument):
            T.coerce_value(T.INT64 if rejected != "x" * 70_000 else T.STRING, rejected)
    assert not T.canonical_check(T.INT64)(2**63) and not T.canonical_check(T.INT64)(True)  # type: ignore[misc]
