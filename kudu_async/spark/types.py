"""Kudu column types <-> Spark SQL types, and the Arrow schema Spark expects for a Kudu schema.

Spark checks a Python source's first Arrow batch against the declared schema exactly (names, types and
nullability), so the declared StructType follows each column's nullability, and batches are cast to
``expected_arrow_schema`` before they are yielded.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import types as st

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.schema import ColumnSchema, Schema


def spark_type(col: ColumnSchema) -> st.DataType:
    """The Spark type of a column; an array column is ``ArrayType(element, containsNull=True)``, as
    kudu-spark maps it (Kudu's array elements are always nullable)."""
    if col.is_array:
        return st.ArrayType(_scalar_spark_type(col), containsNull=True)
    return _scalar_spark_type(col)


def _scalar_spark_type(col: ColumnSchema) -> st.DataType:
    t = col.scalar_type
    if t is T.DECIMAL:
        return st.DecimalType(col.precision or 38, col.scale or 0)
    make = _SPARK_TYPES.get(t.name)
    if make is None:
        raise KuduInvalidArgument(f"column '{col.name}': type {t.name} has no Spark type")
    return make()


_SPARK_TYPES: dict[str, Callable[[], st.DataType]] = {
    T.INT8.name: st.ByteType,
    T.INT16.name: st.ShortType,
    T.INT32.name: st.IntegerType,
    T.INT64.name: st.LongType,
    T.FLOAT.name: st.FloatType,
    T.DOUBLE.name: st.DoubleType,
    T.BOOL.name: st.BooleanType,
    T.STRING.name: st.StringType,
    T.VARCHAR.name: st.StringType,
    T.BINARY.name: st.BinaryType,
    T.UNIXTIME_MICROS.name: st.TimestampType,
    T.DATE.name: st.DateType,
}


def spark_schema(schema: Schema, columns: list[str] | None = None) -> st.StructType:
    names = columns if columns is not None else schema.names
    return st.StructType([st.StructField(n, spark_type(schema.column(n)), schema.column(n).nullable) for n in names])


def expected_arrow_schema(struct: st.StructType) -> pa.Schema:
    """The Arrow schema Spark requires of yielded batches for ``struct``."""
    fields = []
    for f in struct.fields:
        fields.append(pa.field(f.name, _arrow_type(f.dataType), f.nullable))
    return pa.schema(fields)


def _arrow_type(t: st.DataType) -> pa.DataType:
    simple: list[tuple[type[st.DataType], pa.DataType]] = [
        (st.ByteType, pa.int8()),
        (st.ShortType, pa.int16()),
        (st.IntegerType, pa.int32()),
        (st.LongType, pa.int64()),
        (st.FloatType, pa.float32()),
        (st.DoubleType, pa.float64()),
        (st.BooleanType, pa.bool_()),
        (st.StringType, pa.string()),
        (st.BinaryType, pa.binary()),
        (st.DateType, pa.date32()),
        (st.TimestampType, pa.timestamp("us", tz="UTC")),
        (st.TimestampNTZType, pa.timestamp("us")),
    ]
    for cls, at in simple:
        if isinstance(t, cls):
            return at
    if isinstance(t, st.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, st.ArrayType):
        return pa.list_(pa.field("element", _arrow_type(t.elementType), t.containsNull))
    raise KuduInvalidArgument(f"Spark type {t.simpleString()} cannot be read from a kudu_async table")


def kudu_column(field: st.StructField, *, key: bool) -> ColumnSchema:
    """A Kudu column for a Spark field (table creation from a DataFrame); an ``ArrayType`` of a scalar type
    becomes an array column of that element type (kudu-spark's mapping), never a key column."""
    t = field.dataType
    nullable = not key and field.nullable
    if isinstance(t, st.ArrayType):
        if key:
            raise KuduInvalidArgument(f"Array-typed column '{field.name}' cannot be a Kudu key")
        elem, precision, scale = _kudu_scalar(field.name, t.elementType)
        return ColumnSchema(
            field.name, T.NESTED, nullable, precision=precision, scale=scale, nested_type=T.array_type(elem)
        )
    kt, precision, scale = _kudu_scalar(field.name, t)
    return ColumnSchema(field.name, kt, nullable, precision=precision, scale=scale)


_SCALAR_KUDU_TYPES: list[tuple[type[st.DataType], T.KuduType]] = [
    (st.ByteType, T.INT8),
    (st.ShortType, T.INT16),
    (st.IntegerType, T.INT32),
    (st.LongType, T.INT64),
    (st.FloatType, T.FLOAT),
    (st.DoubleType, T.DOUBLE),
    (st.BooleanType, T.BOOL),
    (st.StringType, T.STRING),
    (st.BinaryType, T.BINARY),
    (st.DateType, T.DATE),
    (st.TimestampType, T.UNIXTIME_MICROS),
    (st.TimestampNTZType, T.UNIXTIME_MICROS),
]


def _kudu_scalar(name: str, t: st.DataType) -> tuple[T.KuduType, int | None, int | None]:
    """The Kudu type of a scalar Spark type, with DECIMAL's precision and scale (else None)."""
    for cls, kt in _SCALAR_KUDU_TYPES:
        if isinstance(t, cls):
            return kt, None, None
    if isinstance(t, st.DecimalType):
        return T.DECIMAL, t.precision, t.scale
    raise KuduInvalidArgument(f"column '{name}': Spark type {t.simpleString()} has no kudu_async type")


def kudu_schema(schema: st.StructType, keys: list[str], key_source: str) -> Schema:
    """A Kudu schema for a Spark schema, ``keys`` first as the primary key (in that order), then the other
    fields; ``key_source`` names where the keys came from, for the error about one that is not a field."""
    by_name = {f.name: f for f in schema.fields}
    for k in keys:
        if k not in by_name:
            raise KuduInvalidArgument(f"{key_source} names '{k}', which is not a column of {', '.join(by_name)}")
    cols = [kudu_column(by_name[k], key=True) for k in keys]
    cols += [kudu_column(f, key=False) for f in schema.fields if f.name not in keys]
    return Schema(cols, len(keys))
