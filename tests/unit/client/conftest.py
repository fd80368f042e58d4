"""Client objects built without a cluster: tables from a schema and partitioning, as the master describes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.client.table import Table
from kudu_async.common.schema import Schema


def table_info(
    schema: Schema,
    partitioning: kudu.Partitioning | None = None,
    *,
    name: str = "t",
    table_id: str = "tid",
    version: int = 0,
) -> dict[str, Any]:
    """What GetTableSchema answers for a table of this schema (column ids assigned, as the master does)."""
    part = partitioning if partitioning is not None else kudu.Partitioning()
    with_ids = schema.with_column_ids()
    return {
        "name": name,
        "table_id": table_id,
        "schema": with_ids.to_dict(),
        "schema_version": version,
        "partition_schema": part.to_wire(with_ids)["partition_schema"],
        "num_replicas": 3,
    }


def offline_table(schema: Schema, partitioning: kudu.Partitioning | None = None, **kw: Any) -> Table:
    return Table(None, table_info(schema, partitioning, **kw))  # type: ignore[arg-type]


@pytest.fixture
def kv_schema() -> Schema:
    """key int64 (primary key), val string (nullable), n int32 NOT NULL DEFAULT 7."""
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("val", type_=kudu.string)
    b.add_column("n", kudu.int32, nullable=False, default=7)
    return b.build()


@pytest.fixture
def kv_table(kv_schema: Schema) -> Table:
    return offline_table(kv_schema, kudu.Partitioning().add_hash_partitions(["key"], 3))


@pytest.fixture
def make_table() -> Callable[..., Table]:
    return offline_table
