"""kudu.schema_builder() and kudu.Partitioning(): every type and attribute, and the errors they name."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async import schema as kschema
from kudu_async.common.partition import PartitionSchema
from kudu_async.common.schema import Schema


def every_type_builder() -> kudu.SchemaBuilder:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("i8", kudu.int8)
    b.add_column("i16", "int16")
    b.add_column("i32", kudu.int32, default=5)
    b.add_column("f", kudu.float_)
    b.add_column("d", kudu.double)
    b.add_column("b", kudu.bool)
    b.add_column("s", kudu.string, nullable=False, default="x")
    b.add_column("bin", kudu.binary)
    b.add_column("ts", kudu.unixtime_micros, default=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    b.add_column("dt", kudu.date, default=dt.date(2021, 2, 3))
    b.add_column("dec", kudu.decimal, precision=10, scale=2, default=Decimal("1.5"))
    b.add_column("vc").type(kudu.varchar).length(5).default("abcdefgh")
    return b


def test_every_type_builds_with_its_attributes_and_defaults() -> None:
    s = every_type_builder().build()
    assert isinstance(s, kudu.Schema)
    assert s.names == ["key", "i8", "i16", "i32", "f", "d", "b", "s", "bin", "ts", "dt", "dec", "vc"]
    assert s.primary_keys() == ["key"]
    assert [c.type_label for c in s.columns] == [
        "int64",
        "int8",
        "int16",
        "int32",
        "float",
        "double",
        "bool",
        "string",
        "binary",
        "unixtime_micros",
        "date",
        "decimal(10,2)",
        "varchar(5)",
    ]
    assert s.column("key").nullable is False
    assert s.column("i8").nullable is True  # value columns default to nullable, as in kudu-python
    assert s.column("s").nullable is False
    assert s.column("i32").default == 5
    assert s.column("ts").default == 1_577_836_800_000_000  # datetime default kept as microseconds
    assert s.column("dt").default == dt.date(2021, 2, 3)
    assert s.column("dec").default == Decimal("1.50")  # quantised to the scale
    assert (s.column("dec").precision, s.column("dec").scale) == (10, 2)
    assert s.column("vc").length == 5
    assert s.column("vc").default == "abcde"  # varchar defaults are truncated to the length, as Kudu does


def test_type_objects_carry_kudu_python_names() -> None:
    assert kudu.bool is kudu.bool_ and kudu.float is kudu.float_
    assert kschema.int8 is kudu.int8 and kschema.varchar is kudu.varchar
    assert [str(t) for t in (kudu.int8, kudu.unixtime_micros, kudu.decimal, kudu.varchar, kudu.date)] == [
        "int8",
        "unixtime_micros",
        "decimal",
        "varchar",
        "date",
    ]


def test_fluent_column_spec_sets_every_attribute() -> None:
    b = kudu.schema_builder()
    b.add_column("k").type("int32").nullable(False).primary_key().compression("lz4").encoding("bitshuffle").block_size(
        4096
    ).comment("the key")
    b.add_column("v").type(kudu.string).default("d").remove_default().compression("zlib").encoding("dict")
    b.add_column("m").type(kudu.int64).immutable()
    c = b.build()
    k, v, m = c.column("k"), c.column("v"), c.column("m")
    assert (k.type_label, k.nullable, k.compression, k.encoding, k.block_size, k.comment) == (
        "int32",
        False,
        "lz4",
        "bit_shuffle",
        4096,
        "the key",
    )
    assert (v.default, v.compression, v.encoding) == (None, "zlib", "dict")
    assert m.immutable is True


def test_set_primary_keys_gives_a_compound_key() -> None:
    b = kudu.schema_builder()
    b.add_column("a", kudu.int32, nullable=False)
    b.add_column("b", kudu.string, nullable=False)
    b.add_column("c", kudu.double)
    s = b.set_primary_keys(["a", "b"]).build()
    assert s.primary_keys() == ["a", "b"]
    assert s.num_key_columns == 2


def test_set_primary_keys_on_nullable_by_default_columns_makes_them_not_null() -> None:
    b = kudu.schema_builder()
    b.add_column("a", kudu.int32)
    s = b.set_primary_keys(["a"]).build()
    assert s.column("a").nullable is False


def _build(*cols: tuple[str, dict[str, Any]], keys: list[str] | None = None) -> Schema:
    b = kudu.schema_builder()
    for name, kw in cols:
        b.add_column(name, **kw)
    if keys is not None:
        b.set_primary_keys(keys)
    return b.build()


@pytest.mark.parametrize(
    ("cols", "keys", "complaint"),
    [
        ((), None, "at least one column"),
        ((("a", {"type_": kudu.int32}),), None, "no primary key"),
        ((("a", {"type_": kudu.int32}),), [], "no primary key"),
        (
            (("a", {"type_": kudu.int32}), ("k", {"type_": kudu.int32, "primary_key": True})),
            None,
            "must be the first columns",
        ),
        ((("a", {"type_": kudu.int32}), ("b", {"type_": kudu.int32})), ["b", "a"], "must be the first columns"),
        ((("a", {"type_": kudu.int32}),), ["zz"], "'zz' is not in the schema"),
        ((("a", {"type_": kudu.int32, "primary_key": True, "nullable": True}),), None, "cannot be nullable"),
        ((("a", {"primary_key": True}),), None, "no type given"),
        ((("a", {"type_": kudu.decimal, "primary_key": True}),), None, "decimal needs a precision"),
        ((("a", {"type_": kudu.decimal, "precision": 39, "primary_key": True}),), None, "precision 39 not in 1..38"),
        ((("a", {"type_": kudu.decimal, "precision": 0, "primary_key": True}),), None, "precision 0 not in 1..38"),
        (
            (("a", {"type_": kudu.decimal, "precision": 5, "scale": 6, "primary_key": True}),),
            None,
            "scale 6 not in 0..5",
        ),
        ((("a", {"type_": kudu.int32, "precision": 3, "primary_key": True}),), None, "only apply to decimal"),
        ((("a", {"type_": kudu.varchar, "primary_key": True}),), None, "varchar needs a length"),
        ((("a", {"type_": kudu.varchar, "length": 0, "primary_key": True}),), None, "varchar length 0"),
        ((("a", {"type_": kudu.string, "length": 3, "primary_key": True}),), None, "length only applies to varchar"),
        (
            (("a", {"type_": kudu.int32, "primary_key": True}), ("v", {"type_": kudu.int8, "default": 300})),
            None,
            "300 out of range for int8",
        ),
        (
            (("a", {"type_": kudu.int32, "primary_key": True}), ("v", {"type_": kudu.int32, "default": "x"})),
            None,
            "column 'v': expected int32, got str",
        ),
        (
            (
                ("a", {"type_": kudu.int32, "primary_key": True}),
                ("v", {"type_": kudu.decimal, "precision": 4, "scale": 1, "default": Decimal("1.25")}),
            ),
            None,
            "more than 1 fractional digits",
        ),
        ((("a", {"type_": kudu.int32, "primary_key": True, "compression": "bogus"}),), None, "unknown compression"),
        ((("a", {"type_": kudu.int32, "primary_key": True, "encoding": "prefix"}),), None, "not supported for int32"),
    ],
)
def test_bad_schemas_are_refused_naming_the_problem(
    cols: tuple[tuple[str, dict[str, Any]], ...], keys: list[str] | None, complaint: str
) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        _build(*cols, keys=keys)


def test_a_column_added_twice_or_of_an_unknown_type_is_refused_at_once() -> None:
    b = kudu.schema_builder()
    b.add_column("a", kudu.int32)
    with pytest.raises(kudu.KuduInvalidArgument, match="added twice"):
        b.add_column("a", kudu.int64)
    with pytest.raises(kudu.KuduInvalidArgument, match="unknown data type 'nosuch'"):
        b.add_column("b", "nosuch")


# --- Partitioning ------------------------------------------------------------------------------------------


@pytest.fixture
def kks() -> Schema:
    """k int64, s string (compound key), v double."""
    return _build(
        ("k", {"type_": kudu.int64, "nullable": False}),
        ("s", {"type_": kudu.string, "nullable": False}),
        ("v", {"type_": kudu.double}),
        keys=["k", "s"],
    )


def _tablets(part: kudu.Partitioning, schema: Schema) -> int:
    w = part.to_wire(schema)
    ps = PartitionSchema.from_dict(schema, w["partition_schema"])
    bounds = [(b["lower"], b["upper"], b["lower_bound_type"], b["upper_bound_type"]) for b in w["range_bounds"]]
    return len(ps.create_partitions(bounds, w["split_rows"]))


def test_no_partitioning_is_one_unbounded_range_over_the_key(kks: Schema) -> None:
    w = kudu.Partitioning().to_wire(kks)
    assert w == {
        "partition_schema": {"hash_dimensions": [], "range_columns": ["k", "s"]},
        "range_bounds": [],
        "split_rows": [],
    }
    assert _tablets(kudu.Partitioning(), kks) == 1


def test_hash_levels_with_seed_and_no_range(kks: Schema) -> None:
    p = (
        kudu.Partitioning()
        .add_hash_partitions("k", 3, seed=7)
        .add_hash_partitions(["s"], 2)
        .set_range_partition_columns([])
    )
    w = p.to_wire(kks)
    assert w["partition_schema"] == {
        "hash_dimensions": [
            {"columns": ["k"], "num_buckets": 3, "seed": 7},
            {"columns": ["s"], "num_buckets": 2, "seed": 0},
        ],
        "range_columns": [],
    }
    assert _tablets(p, kks) == 6


def test_hash_times_range_bounds_and_splits_in_every_row_form(kks: Schema) -> None:
    p = (
        kudu.Partitioning()
        .add_hash_partitions(["s"], 2)
        .set_range_partition_columns("k")
        .add_range_partition({"k": 0}, {"k": 10})
        .add_range_partition([10], (20,), "inclusive", "inclusive")
        .add_range_partition(30, None, "exclusive", "exclusive")
        .add_range_partition_split(5)
    )
    w = p.to_wire(kks)
    assert w["range_bounds"] == [
        {"lower": {"k": 0}, "upper": {"k": 10}, "lower_bound_type": "inclusive", "upper_bound_type": "exclusive"},
        {"lower": {"k": 10}, "upper": {"k": 20}, "lower_bound_type": "inclusive", "upper_bound_type": "inclusive"},
        {"lower": {"k": 30}, "upper": None, "lower_bound_type": "exclusive", "upper_bound_type": "exclusive"},
    ]
    assert w["split_rows"] == [{"k": 5}]
    assert _tablets(p, kks) == 2 * 4


def test_string_range_bounds_are_whole_values(kks: Schema) -> None:
    s = _build(("name", {"type_": kudu.string, "nullable": False}), keys=["name"])
    p = kudu.Partitioning().add_range_partition("a", "m").add_range_partition_split("cat")
    w = p.to_wire(s)
    assert w["range_bounds"][0]["lower"] == {"name": "a"} and w["split_rows"] == [{"name": "cat"}]
    assert _tablets(p, s) == 2


def test_typed_range_bounds_travel_tagged(kks: Schema) -> None:
    s = _build(
        ("ts", {"type_": kudu.unixtime_micros, "nullable": False}),
        ("d", {"type_": kudu.decimal, "precision": 6, "scale": 2, "nullable": False}),
        keys=["ts", "d"],
    )
    lo = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    p = (
        kudu.Partitioning()
        .set_range_partition_columns(["ts", "d"])
        .add_range_partition({"ts": lo, "d": Decimal("1.25")}, None)
    )
    assert p.to_wire(s)["range_bounds"][0]["lower"] == {
        "ts": {"$micros": 1_704_067_200_000_000},
        "d": {"$decimal": "1.25"},
    }


@pytest.mark.parametrize(
    ("make", "complaint"),
    [
        (
            lambda p: p.set_range_partition_columns(["k"]).add_range_partition(0, 10).add_range_partition(5, 20),
            "overlap",
        ),
        (
            lambda p: p.set_range_partition_columns(["k"]).add_range_partition(None, 10).add_range_partition(None, 20),
            "overlap",
        ),
        (lambda p: p.set_range_partition_columns(["k"]).add_range_partition(10, 0), "not below its upper bound"),
        (lambda p: p.set_range_partition_columns(["k"]).add_range_partition(10, 10), "not below its upper bound"),
        (
            lambda p: p.set_range_partition_columns(["k"]).add_range_partition(0, 10).add_range_partition_split(10),
            "not strictly inside",
        ),
        (
            lambda p: p.set_range_partition_columns(["k"]).add_range_partition(0, 10).add_range_partition_split(50),
            "not strictly inside",
        ),
        (
            lambda p: p.set_range_partition_columns(["k"]).add_range_partition_split(0).add_range_partition(0, 10),
            "not strictly inside",
        ),
        (lambda p: p.set_range_partition_columns(["k"]).add_range_partition("a", 10), "column 'k': expected int64"),
        (lambda p: p.set_range_partition_columns(["k"]).add_range_partition(0, 10, "weird"), "inclusive' or"),
        (lambda p: p.set_range_partition_columns([]).add_range_partition(0, 10), "no range columns"),
        (lambda p: p.set_range_partition_columns([]).add_range_partition_split(3), "no range columns"),
        (lambda p: p.set_range_partition_columns(["v"]), "'v' is not a primary key column"),
        (lambda p: p.set_range_partition_columns(["nope"]), "'nope' is not in the schema"),
        (lambda p: p.set_range_partition_columns(["s", "s"]), "repeat"),
        (lambda p: p.add_hash_partitions(["v"], 3), "hash partition column 'v' is not a primary key column"),
        (lambda p: p.add_hash_partitions(["k"], 1), "at least 2 buckets"),
        (lambda p: p.add_hash_partitions(["k"], 2).add_hash_partitions(["k", "s"], 2), "share column 'k'"),
    ],
)
def test_bad_partitioning_is_refused_before_reaching_a_master(kks: Schema, make: Any, complaint: str) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        make(kudu.Partitioning()).to_wire(kks)


def test_a_range_with_its_own_hash_schema_travels_with_its_bound(kks: Schema) -> None:
    """The master registers a custom range from its bound: the wire's partition schema stays plain, and the
    master's view (plain schema + bounds) equals the client's."""
    from kudu_async.common.partition import hash_dimensions_from_wire

    p = (
        kudu.Partitioning()
        .add_hash_partitions(["s"], 2)
        .set_range_partition_columns("k")
        .add_range_partition(0, 10)
        .add_custom_range_partition(kudu.RangePartition(10, 20).add_hash_partitions("s", 5, seed=3))
    )
    w = p.to_wire(kks)
    assert "custom_ranges" not in w["partition_schema"]
    assert w["range_bounds"][1]["hash_dimensions"] == [{"columns": ["s"], "num_buckets": 5, "seed": 3}]
    assert "hash_dimensions" not in w["range_bounds"][0]
    master_view = PartitionSchema.from_dict(kks, w["partition_schema"]).with_custom_ranges(w["range_bounds"])
    assert master_view == p.partition_schema(kks)
    assert len(master_view.create_partitions(w["range_bounds"])) == 2 + 5
    with pytest.raises(kudu.KuduInvalidArgument, match="needs its hash partitions"):
        kudu.Partitioning().add_custom_range_partition(kudu.RangePartition(0, 1))
    with pytest.raises(kudu.KuduInvalidArgument, match="expected a RangePartition"):
        kudu.Partitioning().add_custom_range_partition((0, 1))  # type: ignore[arg-type]
    with pytest.raises(kudu.KuduInvalidArgument, match="1 levels; the table has 2"):
        (
            kudu.Partitioning()
            .add_hash_partitions("s", 2)
            .add_hash_partitions("k", 2)
            .add_custom_range_partition(kudu.RangePartition(0, 1).add_hash_partitions("s", 3))
            .to_wire(kks)
        )
    for bad, complaint in (
        ("x", "non-empty list"),
        ([], "non-empty list"),
        ([{"columns": ["s"]}], "num_buckets"),
        ([{"columns": "s", "num_buckets": 2}], "list of names"),
        ([{"columns": ["s"], "num_buckets": 1}], "at least 2 buckets"),
    ):
        with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
            hash_dimensions_from_wire(bad)
