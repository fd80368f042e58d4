"""The kudu tool's JSON inputs: Kudu's table spec, Kudu's predicate lists, values by column type."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from kudu_async.client.table import Table
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.tools.table_tool import json_value, parse_predicates, spec_to_create_args

SPEC = {
    "table_name": "t",
    "schema": {
        "columns": [
            {"column_name": "k", "column_type": "INT32", "is_nullable": False},
            {"column_name": "d", "column_type": "DATE", "is_nullable": False},
            {"column_name": "s", "column_type": "VARCHAR", "type_attributes": {"length": 5}, "default_value": "x"},
            {"column_name": "m", "column_type": "DECIMAL", "type_attributes": {"precision": 6, "scale": 1}},
            {"column_name": "ts", "column_type": "UNIXTIME_MICROS"},
        ],
        "key_column_names": ["k", "d"],
    },
    "partition": {
        "hash_partitions": [{"columns": ["k"], "num_buckets": 3, "seed": 7}],
        "range_partition": {
            "columns": ["d"],
            "range_bounds": [
                {"upper_bound": {"bound_type": "exclusive", "bound_values": ["2026-01-01"]}},
                {"lower_bound": {"bound_type": "inclusive", "bound_values": ["2026-01-01"]}},
            ],
        },
    },
    "num_replicas": 3,
}


def _table() -> Table:
    name, schema, part, n, _ = spec_to_create_args(SPEC)
    wire = part.to_wire(schema)
    return Table(
        None,  # type: ignore[arg-type]  # a handle that only describes the table needs no client
        {
            "name": name,
            "table_id": "x",
            "schema": schema.to_dict(),
            "partition_schema": wire["partition_schema"],
            "num_replicas": n,
        },
    )


def test_spec_builds_schema_and_partitioning() -> None:
    name, schema, part, n, extra = spec_to_create_args({**SPEC, "owner": "alice"})
    assert (name, n, schema.key_names, extra) == ("t", 3, ["k", "d"], {"owner": "alice"})
    s = schema.column("s")
    assert s.default == "x" and s.length == 5 and schema.column("m").scale == 1
    ps = part.partition_schema(schema)
    assert ps.hash_dimensions[0].num_buckets == 3 and ps.hash_dimensions[0].seed == 7
    assert list(ps.range_schema.columns) == ["d"]
    assert len(ps.create_partitions(part._range_bounds(), part._splits)) == 6


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"table_name": ""}, "needs 'table_name'"),
        ({"schema": {"columns": [], "key_column_names": ["k"]}}, "non-empty list"),
        ({"schema": {"columns": [{"column_name": "k"}], "key_column_names": ["k"]}}, "needs 'column_type'"),
        (
            {"schema": {"columns": [{"column_name": "k", "column_type": "INT99"}], "key_column_names": ["k"]}},
            "unknown data type",
        ),
        ({"num_replicas": "3"}, "'num_replicas' must be an integer"),
        ({"partition": {"hash_partitions": [{"columns": ["k"], "num_buckets": "2"}]}}, "'num_buckets'"),
        (
            {
                "partition": {
                    "range_partition": {
                        "columns": ["d"],
                        "range_bounds": [{"lower_bound": {"bound_values": ["2026-01-01", 1]}}],
                    }
                }
            },
            "one value per range column",
        ),
        (
            {
                "partition": {
                    "range_partition": {
                        "columns": ["d"],
                        "range_bounds": [{"lower_bound": {"bound_values": ["not a date"]}}],
                    }
                }
            },
            "cannot read 'not a date' as date",
        ),
    ],
)
def test_bad_specs_are_named(patch: dict[str, object], message: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=message):
        spec_to_create_args({**SPEC, **patch})


def test_predicates_in_kudu_json() -> None:
    t = _table()
    preds = parse_predicates(
        t,
        '["AND", [">=", "k", 5], ["IN", "d", ["2026-01-02"]], ["NULL", "s"], '
        '["NOTNULL", "m"], ["<", "ts", "2026-01-01T00:00:00Z"], ["=", "m", "1.5"]]',
    )
    assert len(preds) == 6
    assert len(parse_predicates(t, '["<=", "k", 9]')) == 1
    assert parse_predicates(t, None) == [] and parse_predicates(t, "") == []


@pytest.mark.parametrize(
    "text, message",
    [
        ("[>", "not valid JSON"),
        ("{}", "must be a JSON list"),
        ('["AND", [">", "zz", 1]]', "column 'zz'"),
        ('["LIKE", "s", "a%"]', "unknown predicate operator"),
        ('["IN", "k", 5]', "IN takes a list"),
        ('["="]', "expected \\[op, column, value"),
        ('["=", "k"]', "takes one value"),
        ('["=", "k", 1, 2]', "takes one value"),
        ('["=", "k", "x"]', "cannot read 'x' as int32"),
    ],
)
def test_bad_predicates_are_named(text: str, message: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=message):
        parse_predicates(_table(), text)


def test_json_values_by_type() -> None:
    t = _table()
    col = t.schema.column
    assert json_value(col("d"), "2026-03-04") == dt.date(2026, 3, 4)
    assert json_value(col("ts"), "2026-01-01T00:00:00") == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert json_value(col("m"), 1.5) == Decimal("1.5") and json_value(col("k"), "12") == 12
    assert json_value(col("s"), None) is None
