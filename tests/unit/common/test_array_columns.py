"""ARRAY columns in the data model: kudu-python's array_type/ColumnSpec.nested_type API, the column's type
strings, wire form and Arrow type, value checks, and Kudu's refusals (key, defaults, wide decimals, limits)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.common import types as T
from kudu_async.common.column import ColumnSchema, cast_column
from kudu_async.common.errors import KuduInvalidArgument, KuduNotSupported
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.row_conversion import batch_to_ipc, batch_to_tuples, ipc_to_table, table_to_pandas
from kudu_async.common.schema import Schema

SCALARS = [
    ("int8", kudu.int8),
    ("int16", kudu.int16),
    ("int32", kudu.int32),
    ("int64", kudu.int64),
    ("float", kudu.float_),
    ("double", kudu.double),
    ("bool", kudu.bool_),
    ("string", kudu.string),
    ("binary", kudu.binary),
    ("unixtime_micros", kudu.unixtime_micros),
    ("date", kudu.date),
]


def _full_schema() -> Schema:
    b = kudu.schema_builder()
    b.add_column("id", kudu.int32, nullable=False).primary_key()
    for name, t in SCALARS:
        b.add_column("arr_" + name).nested_type(kudu.array_type(t))
    b.add_column("arr_varchar").nested_type(kudu.array_type(kudu.varchar)).length(50)
    b.add_column("arr_decimal").nested_type(kudu.array_type(kudu.decimal)).precision(8).scale(2)
    return b.build()


def test_descriptors_as_kudu_python_shows_them() -> None:
    arr = kudu.array_type(kudu.int64)
    assert isinstance(arr, kudu.NestedTypeDescriptor)
    assert arr.is_array()
    assert str(arr) == repr(arr) == "NestedTypeDescriptor(type=array)"
    desc = kudu.ArrayTypeDescriptor(kudu.string)
    assert repr(desc) == "ArrayTypeDescriptor(element_type=string)"
    assert desc.element_type == kudu.schema.STRING
    assert kudu.NestedTypeDescriptor(desc).array() is desc
    assert kudu.ArrayTypeDescriptor("int8").element_kudu_type is kudu.int8
    assert kudu.ArrayTypeDescriptor(kudu.schema.DATE).element_kudu_type is kudu.date
    with pytest.raises(TypeError, match="Expected ArrayTypeDescriptor"):
        kudu.NestedTypeDescriptor(kudu.int64)  # type: ignore[arg-type]
    with pytest.raises(KuduNotSupported, match="one-dimensional"):
        kudu.array_type(kudu.nested)
    with pytest.raises(TypeError, match="Expected NestedTypeDescriptor"):
        kudu.schema_builder().add_column("a").nested_type(kudu.ArrayTypeDescriptor(kudu.int8))  # type: ignore[arg-type]


def test_schema_prints_arrays_as_kudu_python() -> None:
    schema = _full_schema()
    assert len(schema) == 14
    text = str(schema)
    assert "  arr_int8             INT8 1D-ARRAY NULLABLE\n" in text
    assert "  arr_unixtime_micros  UNIXTIME_MICROS 1D-ARRAY NULLABLE\n" in text
    assert "  arr_varchar          VARCHAR(50) 1D-ARRAY NULLABLE\n" in text
    assert "  arr_decimal          DECIMAL(8, 2) 1D-ARRAY NULLABLE\n" in text
    for i, (name, t) in enumerate(SCALARS, start=1):
        col = schema[i]
        assert col.type.name == "nested" and col.type is kudu.nested
        assert col.nullable and col.is_array and col.element_type is t
        assert col.type_to_string() == f"{name.upper()} 1D-ARRAY NULLABLE"
        assert repr(col) == f"ColumnSchema(name=arr_{name}, type=nested, nullable=True)"
    dec = schema["arr_decimal"]
    assert (dec.type_attributes.precision, dec.type_attributes.scale) == (8, 2)
    assert schema["arr_varchar"].type_attributes.length == 50
    not_null = kudu.schema_builder()
    not_null.add_column("k", kudu.int8, nullable=False).primary_key()
    not_null.add_column("a", nullable=False).nested_type(kudu.array_type(kudu.double))
    assert not_null.build()["a"].type_to_string() == "DOUBLE 1D-ARRAY NOT NULL"


def test_equals_wire_form_and_arrow_round_trip() -> None:
    schema = _full_schema()
    again = Schema.from_dict(schema.to_dict())
    assert again.equals(schema)
    for col in schema.columns[1:]:
        assert pa.types.is_list(col.arrow_type)
        assert ColumnSchema.from_arrow_field(col.to_arrow_field()).equals(col)
    other = ColumnSchema("arr_int8", T.NESTED, nested_type=T.array_type(T.INT16))
    assert not other.equals(schema["arr_int8"])
    assert schema["arr_decimal"].arrow_type.value_type == pa.decimal128(8, 2)
    b = kudu.schema_builder()
    b.copy_column(schema["arr_decimal"])
    b.add_column("k", kudu.int8, nullable=False)
    b.set_primary_keys(["k"])
    with pytest.raises(KuduInvalidArgument, match="first columns"):
        b.build()


def test_refusals_with_kudus_messages() -> None:
    b = kudu.schema_builder()
    b.add_column("a", nullable=False).nested_type(kudu.array_type(kudu.int32)).primary_key()
    with pytest.raises(KuduInvalidArgument, match=r"key column may not have type of BOOL, FLOAT, DOUBLE, or NESTED"):
        b.build()
    with pytest.raises(KuduInvalidArgument, match="missing information on a NESTED type for column: a"):
        ColumnSchema("a", T.NESTED)
    with pytest.raises(KuduInvalidArgument, match="array column cannot have a default"):
        ColumnSchema("a", T.NESTED, default=[1], nested_type=T.array_type(T.INT32))
    with pytest.raises(
        KuduNotSupported, match=r"'decimal \(128 bit\) 1d-array' type are not yet supported \(column 'a'\)"
    ):
        ColumnSchema("a", T.NESTED, precision=19, nested_type=T.array_type(T.DECIMAL))
    with pytest.raises(KuduInvalidArgument, match="no precision provided for DECIMAL column: a"):
        ColumnSchema("a", T.NESTED, nested_type=T.array_type(T.DECIMAL))
    with pytest.raises(KuduInvalidArgument, match="no length provided for VARCHAR column: a"):
        ColumnSchema("a", T.NESTED, nested_type=T.array_type(T.VARCHAR))
    with pytest.raises(KuduInvalidArgument, match="precision/scale only apply to decimal"):
        ColumnSchema("a", T.NESTED, precision=3, nested_type=T.array_type(T.INT32))
    # encodings are the element type's
    assert ColumnSchema("a", T.NESTED, encoding="rle", nested_type=T.array_type(T.INT32)).encoding == "rle"
    assert ColumnSchema("a", T.NESTED, encoding="dict", nested_type=T.array_type(T.STRING)).encoding == "dict"
    with pytest.raises(KuduInvalidArgument, match="encoding dict not supported for int32 1d-array"):
        ColumnSchema("a", T.NESTED, encoding="dict", nested_type=T.array_type(T.INT32))
    with pytest.raises(KuduInvalidArgument, match="nested type descriptor needs the column type nested"):
        ColumnSchema("a", T.INT32, nested_type=T.array_type(T.INT32))


def test_partition_on_an_array_column_is_refused() -> None:
    schema = _full_schema()
    p = kudu.Partitioning().add_hash_partitions(["arr_int8"], 2)
    with pytest.raises(KuduInvalidArgument, match="arr_int8"):
        p.to_wire(schema)
    p = kudu.Partitioning().set_range_partition_columns(["arr_int8"])
    with pytest.raises(KuduInvalidArgument, match="arr_int8"):
        p.to_wire(schema)


def test_row_values_coerced_per_element() -> None:
    schema = _full_schema()
    row = schema.new_row()
    row["id"] = 1
    row["arr_int8"] = [1, 2, None]
    row["arr_unixtime_micros"] = [dt.datetime(2020, 1, 1), "2020-01-02T00:00:00.000000", None]
    row["arr_date"] = (dt.date(2020, 1, 1), None)
    row["arr_varchar"] = ["a" * 60, None]
    row["arr_decimal"] = [Decimal("1.23"), None]
    row["arr_string"] = []
    row["arr_double"] = None
    assert row["arr_int8"] == [1, 2, None]
    assert row["arr_unixtime_micros"] == [1577836800000000, 1577923200000000, None]
    assert row["arr_date"] == [dt.date(2020, 1, 1), None]
    assert row["arr_varchar"] == ["a" * 50, None]
    assert row["arr_string"] == [] and row["arr_double"] is None
    with pytest.raises(KuduInvalidArgument, match="out of range for int8"):
        row["arr_int8"] = [1000]
    with pytest.raises(KuduInvalidArgument, match="expected a list or tuple"):
        row["arr_int8"] = 5
    with pytest.raises(
        KuduInvalidArgument, match=r"too many array elements for column 'arr_int8' \(1025, maximum is 1024\)"
    ):
        row["arr_int8"] = [1] * 1025
    with pytest.raises(KuduInvalidArgument, match="exceeds 65536"):
        row["arr_string"] = ["x" * 40000, "y" * 40000]
    with pytest.raises(KuduInvalidArgument, match="more than 2 fractional digits"):
        row["arr_decimal"] = [Decimal("1.234")]


def test_batch_validation_casts_lists_and_reports_rows() -> None:
    schema = _full_schema()
    batch = pa.record_batch(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "arr_int32": pa.array([[1, None], None, [], [2] * 1025], pa.large_list(pa.int8())),
            "arr_string": pa.array([["x" * 40000, "y" * 40000], ["ok"], None, []]),
        }
    )
    out, errors = schema.validate_batch_rows(batch, for_op="insert")
    assert out.schema.field("arr_int32").type == schema["arr_int32"].arrow_type
    assert out.column("arr_int32").to_pylist()[:3] == [[1, None], None, []]
    assert out.column("arr_double").null_count == 4
    assert errors == {
        0: "column 'arr_string': cell of 80000 bytes exceeds 65536",
        3: "too many array elements for column 'arr_int32' (1025, maximum is 1024)",
    }
    with pytest.raises(KuduInvalidArgument, match="expected int32 1d-array, got int64"):
        schema.validate_batch_rows(
            pa.record_batch({"id": pa.array([1], pa.int32()), "arr_int32": pa.array([5])}), for_op="insert"
        )
    with pytest.raises(KuduInvalidArgument, match="cannot convert"):
        cast_column(schema["arr_int8"], pa.array([[300]]))
    sliced = cast_column(schema["arr_int8"], pa.array([[1], [2, 3], None, [4]]).slice(1, 2))
    assert sliced.to_pylist() == [[2, 3], None]


def test_only_null_predicates_on_arrays() -> None:
    schema = _full_schema()
    assert ColumnPredicate("arr_int8", "IS NULL").bind(schema).op == "IS NULL"
    assert ColumnPredicate("arr_int8", "IS NOT NULL").bind(schema).op == "IS NOT NULL"
    with pytest.raises(KuduInvalidArgument, match="only IS NULL and IS NOT NULL"):
        ColumnPredicate("arr_int8", "=", [1]).bind(schema)
    with pytest.raises(KuduInvalidArgument, match="only IS NULL and IS NOT NULL"):
        ColumnPredicate("arr_int8", "IN", [[1]]).bind(schema)


def test_wire_tuples_and_pandas_keep_lists() -> None:
    schema = _full_schema()
    rows = [schema.validate_row({"id": 1, "arr_int8": [1, None], "arr_date": [dt.date(2020, 1, 1)]})]
    rows.append(schema.validate_row({"id": 2, "arr_int8": [], "arr_string": ["x"]}))
    cols = [pa.array([r[c.name] for r in rows], c.arrow_type) for c in schema.columns]
    batch = pa.RecordBatch.from_arrays(cols, schema=schema.to_arrow())
    back = ipc_to_table(batch_to_ipc(batch))
    assert back.schema.equals(schema.to_arrow())
    tuples = batch_to_tuples(back.select(["id", "arr_int8", "arr_date", "arr_string"]))
    assert tuples == [(1, [1, None], [dt.date(2020, 1, 1)], None), (2, [], None, ["x"])]
    df = table_to_pandas(back.select(["id", "arr_int8"]), index="id")
    assert df["arr_int8"].tolist() == [[1, None], []]
    same_length = pa.table({"a": pa.array([[1, 2], [3, 4]], pa.list_(pa.int32()))})
    assert table_to_pandas(same_length)["a"].tolist() == [[1, 2], [3, 4]]


def test_an_array_has_no_kudu_value() -> None:
    with pytest.raises(KuduInvalidArgument, match="an array cell has no KuduValue"):
        kudu.nested.new_value([1])
