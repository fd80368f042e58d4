"""The Spark type mapping of ARRAY columns (kudu-spark's): Kudu ARRAY <-> Spark ArrayType, the Arrow
schema Spark expects of read batches, and kudu_schema() from a Spark schema with arrays."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
from pyspark.sql import types as st

from kudu_async.common import types as T
from kudu_async.common.column import ColumnSchema
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.schema import Schema
from kudu_async.spark.types import expected_arrow_schema, kudu_schema, spark_schema


def test_kudu_arrays_read_as_spark_array_types() -> None:
    schema = Schema(
        [
            ColumnSchema("k", T.INT32, False),
            ColumnSchema("a", T.NESTED, nested_type=T.array_type(T.INT64)),
            ColumnSchema("d", T.NESTED, False, precision=9, scale=3, nested_type=T.array_type(T.DECIMAL)),
            ColumnSchema("v", T.NESTED, length=4, nested_type=T.array_type(T.VARCHAR)),
            ColumnSchema("t", T.NESTED, nested_type=T.array_type(T.UNIXTIME_MICROS)),
        ],
        1,
    )
    struct = spark_schema(schema)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in struct.fields] == [
        ("k", "int", False),
        ("a", "array<bigint>", True),
        ("d", "array<decimal(9,3)>", False),
        ("v", "array<string>", True),
        ("t", "array<timestamp>", True),
    ]
    assert all(isinstance(f.dataType, st.ArrayType) and f.dataType.containsNull for f in struct.fields[1:])
    arrow = expected_arrow_schema(struct)
    assert arrow.field("a").type == pa.list_(pa.field("element", pa.int64(), True))
    assert arrow.field("t").type.value_type == pa.timestamp("us", tz="UTC")
    # a scan batch (the table's Arrow types) casts to what Spark expects
    batch = pa.record_batch([pa.array([[1, None]], schema["a"].arrow_type)], names=["a"])
    assert batch.column(0).cast(arrow.field("a").type).to_pylist() == [[1, None]]


def test_kudu_schema_from_a_spark_schema_with_arrays() -> None:
    struct = st.StructType(
        [
            st.StructField("id", st.LongType(), False),
            st.StructField("tags", st.ArrayType(st.StringType(), True), True),
            st.StructField("prices", st.ArrayType(st.DecimalType(10, 2), False), False),
        ]
    )
    schema = kudu_schema(struct, ["id"], "kudu.primaryKey")
    assert schema["tags"].type_to_string() == "STRING 1D-ARRAY NULLABLE"
    assert schema["prices"].type_to_string() == "DECIMAL(10, 2) 1D-ARRAY NOT NULL"
    with pytest.raises(KuduInvalidArgument, match="Array-typed column 'tags' cannot be a Kudu key"):
        kudu_schema(struct, ["tags"], "kudu.primaryKey")
    nested = st.StructType(
        [st.StructField("id", st.LongType(), False), st.StructField("m", st.ArrayType(st.ArrayType(st.LongType())))]
    )
    with pytest.raises(KuduInvalidArgument, match="array<bigint> has no kudu_async type"):
        kudu_schema(nested, ["id"], "kudu.primaryKey")
