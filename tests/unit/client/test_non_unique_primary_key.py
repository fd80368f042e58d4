"""kudu-python's non-unique primary keys on the client: the builder adds the hidden auto_incrementing_id key
column, partitions stay on the columns a writer gives, and rows are checked by Kudu's rules for it."""

from __future__ import annotations

import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.schema import Schema

AUTO = "auto_incrementing_id"


def test_a_column_marked_non_unique_gets_the_hidden_key_column() -> None:
    b = kudu.schema_builder()
    b.add_column("k", kudu.int32, nullable=False).non_unique_primary_key()
    b.add_column("v", kudu.string)
    s = b.build()
    assert s.names == ["k", AUTO, "v"]
    assert s.primary_key_indices() == [0, 1]
    assert s.get_auto_incrementing_column_name() == AUTO == kudu.schema.Schema.get_auto_incrementing_column_name()
    assert s[AUTO].type_to_string() == "INT64 NOT NULL"


def test_kudu_pythons_seventh_parameter_and_set_non_unique_primary_keys() -> None:
    b = kudu.schema_builder()
    b.add_column("a", kudu.int32, False, None, None, False, True)  # non_unique_primary_key, positionally
    b.add_column("v", kudu.int64)
    assert b.build().key_names == ["a", AUTO]

    b = kudu.schema_builder()
    b.add_column("a", kudu.int32, nullable=False)
    b.add_column("b", kudu.string, nullable=False)
    b.add_column("v", kudu.int64)
    b.set_non_unique_primary_keys(["a", "b"])
    assert b.build().names == ["a", "b", AUTO, "v"]
    b.set_primary_keys(["a", "b"])  # the last call decides
    assert b.build().names == ["a", "b", "v"]


def test_builder_errors_name_what_was_wrong() -> None:
    b = kudu.schema_builder()
    b.add_column("a", kudu.int32).non_unique_primary_key()
    b.add_column("b", kudu.int32).primary_key()
    with pytest.raises(KuduInvalidArgument, match=r"all unique .* or all non-unique"):
        b.build()

    b = kudu.schema_builder()
    b.add_column("a", kudu.int32).non_unique_primary_key()
    b.set_non_unique_primary_keys(["a"])
    with pytest.raises(KuduInvalidArgument, match=r"both set_non_unique_primary_keys\(\) and on a specific column: a"):
        b.build()

    b = kudu.schema_builder()
    b.add_column("a", kudu.int32).non_unique_primary_key()
    b.add_column(AUTO, kudu.int64)
    with pytest.raises(KuduInvalidArgument, match="reserved"):
        b.build()


def test_partitions_use_the_columns_a_writer_gives() -> None:
    b = kudu.schema_builder()
    b.add_column("k", kudu.int32).non_unique_primary_key()
    s = b.build()
    ps = kudu.Partitioning().add_hash_partitions(["k"], 2).partition_schema(s)
    assert ps.range_schema.columns == ("k",)  # the default range columns leave the id out
    with pytest.raises(KuduInvalidArgument, match="hash partition column 'auto_incrementing_id' is the auto-inc"):
        kudu.Partitioning().add_hash_partitions([AUTO], 2).partition_schema(s)
    with pytest.raises(KuduInvalidArgument, match="range partition column 'auto_incrementing_id' is the auto-inc"):
        kudu.Partitioning().set_range_partition_columns(["k", AUTO]).partition_schema(s)


def _schema() -> Schema:
    b = kudu.schema_builder()
    b.add_column("k", kudu.int32).non_unique_primary_key()
    b.add_column("v", kudu.string)
    return b.build()


def test_row_rules_for_the_auto_incrementing_column() -> None:
    s = _schema()
    assert s.validate_row({"k": 1, "v": "a"}, for_op="insert") == {"k": 1, "v": "a"}
    with pytest.raises(KuduInvalidArgument, match="should not be set for INSERT"):
        s.validate_row({"k": 1, AUTO: 3}, for_op="insert_ignore")
    with pytest.raises(KuduInvalidArgument, match="should be set for UPSERT"):
        s.validate_row({"k": 1, "v": "a"}, for_op="upsert")
    with pytest.raises(KuduInvalidArgument, match="greater than zero"):
        s.validate_row({"k": 1, AUTO: -1}, for_op="update")
    with pytest.raises(KuduInvalidArgument, match="key column missing"):
        s.validate_row({"k": 1}, for_op="delete")
    assert s.validate_row({"k": 1, AUTO: 7}, for_op="delete") == {"k": 1, AUTO: 7}


def test_batch_rules_for_the_auto_incrementing_column() -> None:
    s = _schema()
    out, errors = s.validate_batch_rows(pa.table({"k": [1, 2], "v": ["a", "b"]}), for_op="insert")
    assert errors == {} and out.column(AUTO).null_count == 2
    _, errors = s.validate_batch_rows(pa.table({"k": [1, 2], AUTO: [None, 4]}), for_op="insert")
    assert errors == {1: "auto-incrementing column should not be set for INSERT/INSERT_IGNORE operations"}
    _, errors = s.validate_batch_rows(pa.table({"k": [1, 2, 3], AUTO: [None, 4, -2]}), for_op="upsert")
    assert set(errors) == {0, 2} and "greater than zero" in errors[2]
