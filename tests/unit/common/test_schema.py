"""Schema rules, wire round trip, projection and the per-row and vectorised write validation."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument, KuduNotFound
from kudu_async.common.schema import ColumnSchema, Schema


def C(name: str, kt: T.KuduType, **kw: object) -> ColumnSchema:
    return ColumnSchema(name, kt, **kw)  # type: ignore[arg-type]


@pytest.fixture
def schema() -> Schema:
    return Schema(
        [
            C("key", T.INT64, nullable=False),
            C("ts", T.UNIXTIME_MICROS, nullable=False),
            C("val", T.STRING),
            C("n", T.INT32, nullable=False, default=7),
            C("d", T.DECIMAL, precision=10, scale=2, default=Decimal("1.5")),
            C("v", T.VARCHAR, length=3),
            C("day", T.DATE, default=dt.date(2000, 1, 1)),
            C("b", T.BINARY),
            C("f", T.FLOAT, comment="a float", encoding="bitshuffle", compression="LZ4"),
        ],
        2,
    )


# --- rules ----------------------------------------------------------------------------------------------


def test_key_must_be_non_empty_prefix() -> None:
    with pytest.raises(KuduInvalidArgument, match="non-empty prefix"):
        Schema([C("a", T.INT64, nullable=False)], 0)
    with pytest.raises(KuduInvalidArgument, match="non-empty prefix"):
        Schema([C("a", T.INT64, nullable=False)], 2)


def test_key_columns_must_be_not_null() -> None:
    with pytest.raises(KuduInvalidArgument, match="key column 'a' must be NOT NULL"):
        Schema([C("a", T.INT64)], 1)


@pytest.mark.parametrize("kt", [T.BOOL, T.FLOAT, T.DOUBLE])
def test_key_columns_may_not_be_bool_float_double(kt: T.KuduType) -> None:
    with pytest.raises(KuduInvalidArgument, match=f"may not be of type {kt.name}"):
        Schema([C("a", kt, nullable=False)], 1)


def test_decimal_key_allowed() -> None:
    assert Schema([C("a", T.DECIMAL, nullable=False, precision=20, scale=3)], 1).num_key_columns == 1


def test_at_most_300_columns() -> None:
    cols = [C("k", T.INT64, nullable=False)] + [C(f"c{i}", T.INT8) for i in range(299)]
    assert len(Schema(cols, 1)) == 300
    with pytest.raises(KuduInvalidArgument, match="301 columns; the limit is 300"):
        Schema([*cols, C("extra", T.INT8)], 1)


def test_column_names_non_empty_unique_and_at_most_256_bytes() -> None:
    with pytest.raises(KuduInvalidArgument, match="non-empty"):
        C("", T.INT8)
    C("x" * 256, T.INT8)
    with pytest.raises(KuduInvalidArgument, match="257 bytes"):
        C("x" * 257, T.INT8)
    with pytest.raises(KuduInvalidArgument, match="bytes"):
        C("é" * 129, T.INT8)  # 258 bytes of UTF-8
    with pytest.raises(KuduInvalidArgument, match="duplicate column name 'a'"):
        Schema([C("a", T.INT64, nullable=False), C("a", T.INT8)], 1)


def test_varchar_length_and_decimal_precision_scale_checked() -> None:
    with pytest.raises(KuduInvalidArgument, match="varchar needs a length"):
        C("v", T.VARCHAR)
    with pytest.raises(KuduInvalidArgument, match=r"not in 1\.\.65535"):
        C("v", T.VARCHAR, length=65536)
    with pytest.raises(KuduInvalidArgument, match=r"precision 39 not in 1\.\.38"):
        C("d", T.DECIMAL, precision=39)
    with pytest.raises(KuduInvalidArgument, match=r"scale 6 not in 0\.\.5"):
        C("d", T.DECIMAL, precision=5, scale=6)
    with pytest.raises(KuduInvalidArgument, match="only apply to decimal"):
        C("i", T.INT32, precision=5)
    assert C("d", T.DECIMAL, precision=5).scale == 0


def test_default_must_fit_the_type() -> None:
    with pytest.raises(KuduInvalidArgument, match="column 'n': expected int32, got str"):
        C("n", T.INT32, default="x")
    with pytest.raises(KuduInvalidArgument, match="out of range"):
        C("n", T.INT8, default=1000)


def test_encoding_must_suit_the_type() -> None:
    assert C("s", T.STRING, encoding="DICT_ENCODING").encoding == "dict"
    with pytest.raises(KuduInvalidArgument, match="encoding rle not supported for string"):
        C("s", T.STRING, encoding="rle")
    with pytest.raises(KuduInvalidArgument, match="unknown compression"):
        C("s", T.STRING, compression="brotli")


# --- lookups and conversions ----------------------------------------------------------------------------


def test_lookups(schema: Schema) -> None:
    assert schema.names[:3] == ["key", "ts", "val"]
    assert schema.column_index("val") == 2
    assert schema.column("val").type is T.STRING
    assert [c.name for c in schema.key_columns] == ["key", "ts"] == schema.primary_keys()
    with pytest.raises(KuduNotFound, match="column 'nope' is not in the schema"):
        schema.column("nope")


def test_to_arrow_types(schema: Schema) -> None:
    a = schema.to_arrow()
    assert a.field("key").type == pa.int64() and not a.field("key").nullable
    assert a.field("ts").type == pa.timestamp("us", tz="UTC")
    assert a.field("d").type == pa.decimal128(10, 2)
    assert a.field("day").type == pa.date32()
    assert a.field("f").type == pa.float32()


def test_dict_roundtrip_is_exact_through_msgpack(schema: Schema) -> None:
    wire = msgpack.unpackb(msgpack.packb(schema.to_dict()))
    back = Schema.from_dict(wire)
    assert back == schema
    assert back.column("d").default == Decimal("1.50")
    assert back.column("day").default == dt.date(2000, 1, 1)
    assert back.column("f").comment == "a float" and back.column("f").compression == "lz4"


def test_from_arrow_keeps_types_and_makes_keys_not_null(schema: Schema) -> None:
    back = Schema.from_arrow(schema.to_arrow(), 2)
    assert [c.type_label for c in back] == [c.type_label for c in schema]
    arrow = pa.schema([pa.field("k", pa.int64()), pa.field("s", pa.string())])
    assert not Schema.from_arrow(arrow, 1).column("k").nullable


# --- per-row validation ---------------------------------------------------------------------------------


def test_validate_row_fills_defaults_for_insert(schema: Schema) -> None:
    row = schema.validate_row({"key": 1, "ts": dt.datetime(2020, 1, 1), "v": "abcdef"}, for_op="insert")
    assert row["n"] == 7 and row["d"] == Decimal("1.50") and row["val"] is None
    assert row["v"] == "abc"
    assert row["ts"] == 1577836800000000


def test_validate_row_accepts_tuples_in_column_order(schema: Schema) -> None:
    row = schema.validate_row((1, 2, "x"), for_op="upsert")
    assert (row["key"], row["ts"], row["val"]) == (1, 2, "x")


def test_validate_row_errors_name_the_column(schema: Schema) -> None:
    with pytest.raises(KuduInvalidArgument, match="column 'key': NULL in NOT NULL column"):
        schema.validate_row({"key": None, "ts": 1}, for_op="insert")
    with pytest.raises(KuduInvalidArgument, match="column 'ts': key column missing"):
        schema.validate_row({"key": 1}, for_op="delete")
    with pytest.raises(KuduInvalidArgument, match="column 'ts': expected unixtime_micros"):
        schema.validate_row({"key": 1, "ts": "now"}, for_op="insert")
    with pytest.raises(KuduInvalidArgument, match="column 'zz' is not in the schema"):
        schema.validate_row({"key": 1, "ts": 1, "zz": 1}, for_op="insert")
    with pytest.raises(KuduInvalidArgument, match="column 'n': NULL in NOT NULL column"):
        schema.validate_row({"key": 1, "ts": 1, "n": None}, for_op="update")


def test_validate_row_update_and_delete_shapes(schema: Schema) -> None:
    assert schema.validate_row({"key": 1, "ts": 1, "val": "x"}, for_op="UPDATE") == {
        "key": 1,
        "ts": 1,
        "val": "x",
    }
    assert schema.validate_row({"key": 1, "ts": 1, "val": "x"}, for_op="delete") == {"key": 1, "ts": 1}


def test_not_null_column_without_default_required_for_insert() -> None:
    s = Schema([C("k", T.INT64, nullable=False), C("x", T.INT64, nullable=False)], 1)
    with pytest.raises(KuduInvalidArgument, match="column 'x': NOT NULL column without a default is missing"):
        s.validate_row({"k": 1}, for_op="insert")
    assert s.validate_row({"k": 1}, for_op="update") == {"k": 1}


def test_unknown_op_rejected(schema: Schema) -> None:
    with pytest.raises(KuduInvalidArgument, match="unknown write operation 'merge'"):
        schema.validate_row({"key": 1, "ts": 1}, for_op="merge")


def test_oversized_string_key_rejected_per_row() -> None:
    s = Schema([C("a", T.STRING, nullable=False), C("b", T.STRING, nullable=False)], 2)
    with pytest.raises(KuduInvalidArgument, match="exceeds 16384"):
        s.validate_row({"a": "x" * 9000, "b": "y" * 9000}, for_op="insert")


# --- vectorised validation ------------------------------------------------------------------------------


def _valid(schema: Schema, batch: pa.Table | pa.RecordBatch, *, for_op: str) -> pa.RecordBatch:
    """``validate_batch_rows`` of a batch whose rows are all valid (a problem of a column raises)."""
    out, errors = schema.validate_batch_rows(batch, for_op=for_op)
    assert errors == {}
    return out


def test_validate_batch_casts_reorders_and_fills(schema: Schema) -> None:
    t = pa.table({"val": ["a", None], "ts": pa.array([1, 2], pa.int64()), "key": pa.array([1, 2], pa.int32())})
    out = _valid(schema, t, for_op="insert")
    assert isinstance(out, pa.RecordBatch)
    assert out.schema.names == schema.names
    assert out.schema.equals(schema.to_arrow(), check_metadata=False)
    assert out.column("n").to_pylist() == [7, 7]
    assert out.column("d").to_pylist() == [Decimal("1.50")] * 2
    assert out.column("day").to_pylist() == [dt.date(2000, 1, 1)] * 2
    assert out.column("b").null_count == 2
    assert out.column("ts").to_pylist()[0] == dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)


def test_validate_batch_update_keeps_given_columns_delete_keeps_key(schema: Schema) -> None:
    t = pa.table({"key": [1], "ts": pa.array([1000], pa.timestamp("ns")), "val": ["x"], "f": [1.0]})
    assert _valid(schema, t, for_op="update").schema.names == ["key", "ts", "val", "f"]
    assert _valid(schema, t, for_op="delete_ignore").schema.names == ["key", "ts"]


def test_validate_batch_wrong_type_names_column(schema: Schema) -> None:
    t = pa.table({"key": ["1"], "ts": [1]})
    with pytest.raises(KuduInvalidArgument, match="column 'key': expected int64, got str"):
        schema.validate_batch_rows(t, for_op="insert")
    t = pa.table({"key": [1], "ts": [1.5]})
    with pytest.raises(KuduInvalidArgument, match="column 'ts': expected unixtime_micros, got double"):
        schema.validate_batch_rows(t, for_op="insert")


def test_validate_batch_int_overflow_rejected() -> None:
    s = Schema([C("k", T.INT8, nullable=False)], 1)
    _, errors = s.validate_batch_rows(pa.table({"k": [1, 300]}), for_op="insert")
    assert errors == {1: "column 'k': value 300 out of range for int8"}


def test_validate_batch_null_in_not_null(schema: Schema) -> None:
    _, errors = schema.validate_batch_rows(pa.table({"key": [1, None], "ts": [1, 2]}), for_op="upsert")
    assert errors == {1: "column 'key': NULL in NOT NULL column"}


def test_validate_batch_cell_limit_and_varchar_truncation(schema: Schema) -> None:
    base = {"key": [1], "ts": [1]}
    _, errors = schema.validate_batch_rows(pa.table({**base, "val": ["x" * 70000]}), for_op="insert")
    assert errors == {0: "column 'val': cell of 70000 bytes exceeds 65536"}
    out = _valid(schema, pa.table({**base, "v": ["héllo"]}), for_op="insert")
    assert out.column("v").to_pylist() == ["hél"]


def test_validate_batch_decimal_and_date_casts(schema: Schema) -> None:
    t = pa.table(
        {
            "key": [1],
            "ts": [1],
            "d": pa.array([Decimal("2.5")], pa.decimal128(3, 1)),
            "day": pa.array([dt.date(2020, 1, 1)], pa.date32()),
        }
    )
    out = _valid(schema, t, for_op="insert")
    assert out.column("d").to_pylist() == [Decimal("2.50")]
    t = pa.table({"key": [1], "ts": [1], "d": pa.array([Decimal("2.555")], pa.decimal128(4, 3))})
    with pytest.raises(KuduInvalidArgument, match="column 'd': cannot convert"):
        schema.validate_batch_rows(t, for_op="insert")


def test_validate_batch_unknown_and_missing_columns(schema: Schema) -> None:
    with pytest.raises(KuduInvalidArgument, match="column 'zz' is not in the schema"):
        schema.validate_batch_rows(pa.table({"key": [1], "ts": [1], "zz": [1]}), for_op="insert")
    with pytest.raises(KuduInvalidArgument, match="column 'ts': key column missing"):
        schema.validate_batch_rows(pa.table({"key": [1]}), for_op="delete")


def test_validate_batch_dictionary_and_empty_batches(schema: Schema) -> None:
    t = pa.table({"key": [1, 2], "ts": [1, 2], "val": pa.array(["a", "a"]).dictionary_encode()})
    assert _valid(schema, t, for_op="insert").column("val").to_pylist() == ["a", "a"]
    empty = pa.table({"key": pa.array([], pa.int64()), "ts": pa.array([], pa.int64())})
    assert _valid(schema, empty, for_op="insert").num_rows == 0


def test_validate_batch_oversized_key_rejected() -> None:
    s = Schema([C("a", T.STRING, nullable=False), C("b", T.BINARY, nullable=False)], 2)
    t = pa.table({"a": ["x" * 9000], "b": [b"y" * 9000]})
    _, errors = s.validate_batch_rows(t, for_op="insert")
    assert list(errors) == [0] and "encoded primary key of 18002 bytes exceeds 16384" in errors[0]


def test_validate_batch_rejects_sub_microsecond_timestamps(schema: Schema) -> None:
    t = pa.table({"key": [1], "ts": pa.array([1], pa.timestamp("ns"))})
    with pytest.raises(KuduInvalidArgument, match="column 'ts': cannot convert timestamp"):
        schema.validate_batch_rows(t, for_op="insert")


def test_validate_batch_rows_reports_bad_rows_and_keeps_all(schema: Schema) -> None:
    t = pa.table(
        {
            "key": [1, None, 3, 4],
            "ts": [1, 2, 3, 4],
            "val": ["ok", "ok", "x" * 70000, None],
            "n": pa.array([1, 2, 3, None], pa.int32()),
        }
    )
    out, errors = schema.validate_batch_rows(t, for_op="insert")
    assert out.num_rows == 4
    assert errors == {
        1: "column 'key': NULL in NOT NULL column",
        2: "column 'val': cell of 70000 bytes exceeds 65536",
        3: "column 'n': NULL in NOT NULL column",
    }


def test_validate_batch_rows_reports_oversized_keys() -> None:
    s = Schema([C("a", T.STRING, nullable=False), C("b", T.BINARY, nullable=False)], 2)
    t = pa.table({"a": ["x" * 9000, "short"], "b": [b"y" * 9000, b""]})
    _, errors = s.validate_batch_rows(t, for_op="upsert")
    assert errors == {0: "encoded primary key of 18002 bytes exceeds 16384"}


def test_out_of_range_ints_are_row_errors() -> None:
    s = Schema([C("k", T.INT64, nullable=False), C("b", T.INT8, nullable=False)], 1)
    out, errors = s.validate_batch_rows(pa.table({"k": [1, 2, 3], "b": [1, 300, -129]}), for_op="insert")
    assert errors == {
        1: "column 'b': value 300 out of range for int8",
        2: "column 'b': value -129 out of range for int8",
    }
    assert out.column("b").to_pylist()[0] == 1


def test_alter_steps_follow_kudu_rules(schema: Schema) -> None:
    s2 = schema.add_column(C("extra", T.INT32, nullable=False, default=0))
    assert s2.names[-1] == "extra" and schema.names[-1] == "f"
    with pytest.raises(KuduInvalidArgument, match="must be nullable or have a default"):
        schema.add_column(C("x", T.INT32, nullable=False))
    with pytest.raises(KuduInvalidArgument, match="column 'val' already exists"):
        schema.add_column(C("val", T.INT32))
    with pytest.raises(KuduInvalidArgument, match="cannot drop key column 'ts'"):
        schema.drop_column("ts")
    assert "val" not in schema.drop_column("val")
    renamed = schema.rename_column("key", "id")
    assert renamed.key_names == ["id", "ts"]
    with pytest.raises(KuduInvalidArgument, match="column 'val' already exists"):
        schema.rename_column("key", "val")
    altered = schema.alter_column("val", default="x", comment="c", encoding="dict")
    assert altered.column("val").default == "x" and altered.column("val").encoding == "dict"
    assert altered.alter_column("val", default=None).column("val").default is None
    with pytest.raises(KuduInvalidArgument, match="cannot alter nullable, type"):
        schema.alter_column("val", type=T.BINARY, nullable=False)


def test_unsigned_values_beyond_int64_are_row_errors() -> None:
    s = Schema([C("k", T.INT64, nullable=False)], 1)
    t = pa.table({"k": pa.array([1, 2**63], pa.uint64())})
    _, errors = s.validate_batch_rows(t, for_op="insert")
    assert errors == {1: f"column 'k': value {2**63} out of range for int64"}


def test_cell_limit_checked_on_sliced_arrays() -> None:
    s = Schema([C("k", T.INT64, nullable=False), C("b", T.BINARY)], 1)
    arr = pa.array([b"x" * 70000, b"ok", b"y" * 70001], pa.binary())
    batch = pa.record_batch({"k": pa.array([1, 2]), "b": arr.slice(1, 2)})
    _, errors = s.validate_batch_rows(batch, for_op="insert")
    assert errors == {1: "column 'b': cell of 70001 bytes exceeds 65536"}
    _, errors = s.validate_batch_rows(pa.record_batch({"k": [1], "b": arr.slice(1, 1)}), for_op="insert")
    assert errors == {}


ALL_TYPES_SCHEMA = Schema(
    [
        C("k", T.INT32, nullable=False),
        C("i8", T.INT8),
        C("i64", T.INT64),
        C("f", T.FLOAT),
        C("dbl", T.DOUBLE),
        C("bo", T.BOOL),
        C("s", T.STRING),
        C("bi", T.BINARY),
        C("ts", T.UNIXTIME_MICROS),
        C("day", T.DATE),
        C("dec", T.DECIMAL, precision=12, scale=3),
        C("vc", T.VARCHAR, length=3),
    ],
    1,
)

_row_values = {
    "i8": st.integers(-128, 127),
    "i64": st.integers(-(2**63), 2**63 - 1),
    "f": st.floats(allow_nan=False, width=32),
    "dbl": st.floats(allow_nan=False),
    "bo": st.booleans(),
    "s": st.text(max_size=5),
    "bi": st.binary(max_size=5),
    "ts": st.integers(-62135596800000000, 253402300799999999),  # to_pylist needs datetime range
    "day": st.dates(),
    "dec": st.integers(-(10**12) + 1, 10**12 - 1).map(lambda u: T.unscaled_to_decimal(u, 3)),
    "vc": st.text(max_size=6),
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({}, optional={k: st.none() | v for k, v in _row_values.items()}), max_size=8))
def test_vectorised_and_per_row_validation_agree(rows: list[dict[str, Any]]) -> None:
    rows = [{"k": i, **r} for i, r in enumerate(rows)]
    per_row = [ALL_TYPES_SCHEMA.validate_row(r, for_op="insert") for r in rows]
    expected = pa.RecordBatch.from_arrays(
        [pa.array([r[c.name] for r in per_row], c.arrow_type) for c in ALL_TYPES_SCHEMA],
        schema=ALL_TYPES_SCHEMA.to_arrow(),
    )
    arrays = [pa.array([r.get(c.name) for r in rows], c.arrow_type) for c in ALL_TYPES_SCHEMA]
    vc = ALL_TYPES_SCHEMA.column_index("vc")
    arrays[vc] = pa.array([r.get("vc") for r in rows], pa.string())  # untruncated input
    got = _valid(ALL_TYPES_SCHEMA, pa.RecordBatch.from_arrays(arrays, names=ALL_TYPES_SCHEMA.names), for_op="insert")
    assert got.to_pylist() == expected.to_pylist()


# --- column ids -------------------------------------------------------------------------------------------


def test_column_ids_default_to_none_and_round_trip(schema: Schema) -> None:
    assert all(c.id is None for c in schema.columns)
    assert "id" not in schema.columns[0].to_dict()  # as the client sends it: the master assigns the ids
    with_ids = schema.with_column_ids()
    d = with_ids.to_dict()
    assert [c["id"] for c in d["columns"]] == list(range(len(schema.columns)))
    back = Schema.from_dict(msgpack.unpackb(msgpack.packb(d)))
    assert [c.id for c in back.columns] == [c.id for c in with_ids.columns]
    assert Schema.from_dict(schema.to_dict()).columns[0].id is None  # a CreateTable request's schema loads


@pytest.mark.parametrize("bad", [-1, True, "3", 1.5])
def test_column_id_must_be_a_non_negative_int(bad: object) -> None:
    with pytest.raises(KuduInvalidArgument, match="column id"):
        ColumnSchema.from_dict({"name": "a", "type": "int32", "id": bad})


def test_with_column_ids_numbers_only_the_missing_ones_after_the_max() -> None:
    s = Schema([C("k", T.INT64, nullable=False, id=4), C("a", T.INT32), C("b", T.STRING, id=1), C("c", T.INT8)], 1)
    got = s.with_column_ids()
    assert [c.id for c in got.columns] == [4, 5, 1, 6]  # fresh ids above every present one, in column order
    assert [c.id for c in got.with_column_ids().columns] == [4, 5, 1, 6]  # idempotent
    assert [c.id for c in s.with_column_ids(10).columns] == [4, 10, 1, 11]  # or above a given floor
    with pytest.raises(KuduInvalidArgument, match="unique"):
        Schema([C("k", T.INT64, nullable=False, id=2), C("a", T.INT32, id=2)], 1).with_column_ids()


def test_alter_steps_keep_column_ids(schema: Schema) -> None:
    s = schema.with_column_ids()
    ids = {c.name: c.id for c in s.columns if c.id is not None}
    assert len(ids) == len(s.columns)
    renamed = s.rename_column("key", "id").rename_column("val", "label")
    assert renamed.column("id").id == ids["key"] and renamed.column("label").id == ids["val"]
    dropped = renamed.drop_column("n")
    assert [c.id for c in dropped.columns] == [ids[n] for n in s.names if n != "n"]
    added = dropped.add_column(C("n", T.INT32)).with_column_ids()
    assert added.column("n").id == max(ids.values()) + 1  # a re-added name is a new column
    assert s.alter_column("n", default=9).column("n").id == ids["n"]
