"""Kudu's data-model features through the client against a cluster (1 master + 3 tablet servers, shared by
the module): immutable columns refuse changes; altering a column's mutability takes
effect on the tablets; a non-unique primary key gets server-assigned ids that stay unique across
restarts and leader changes; ARRAY columns are created, written, updated, scanned and altered."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration

FAST = ["--heartbeat-interval-ms", "200", "--raft-heartbeat-interval-ms", "250"]
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(1, 3, base_dir=tmp_path_factory.mktemp("data-model-cluster"), extra_flags=FAST)
    c.start()
    try:
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def client(cluster: MiniCluster) -> Iterator[kudu.Client]:
    host, port = cluster.masters[0].rpc_address.rsplit(":", 1)
    c = kudu.connect(host, int(port))
    yield c
    c.close()


def _rows(table: kudu.Table) -> list[tuple[Any, ...]]:
    return sorted(table.scanner().open().read_all_tuples())


def _flush_errors(session: kudu.Session) -> list[kudu.KuduError]:
    with pytest.raises(kudu.KuduBadStatus, match="row\\(s\\) failed"):
        session.flush()
    errors, overflowed = session.get_pending_errors()
    assert not overflowed
    return errors


def test_immutable_columns_are_enforced_through_the_client(client: kudu.Client) -> None:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("created").type(kudu.int64).mutable(False)
    b.add_column("note").type(kudu.string)
    schema = b.build()
    assert schema["created"].mutable is False
    parts = kudu.Partitioning().add_hash_partitions(["key"], 2)
    table = client.create_table(unique("immutable"), schema, parts, n_replicas=3)
    assert client.table(table.name).schema["created"].mutable is False

    s = client.new_session()
    for k in range(4):
        s.apply(table.new_insert({"key": k, "created": 100 + k, "note": "a"}))
    s.flush()

    s.apply(table.new_update({"key": 0, "created": 1}))  # refused
    s.apply(table.new_update({"key": 1, "note": "b"}))  # leaves it alone: applied
    s.apply(table.new_update_ignore({"key": 2, "created": 1, "note": "c"}))  # cell skipped, note applied
    s.apply(table.new_upsert({"key": 3, "created": 1, "note": "d"}))  # present row: refused
    s.apply(table.new_upsert_ignore({"key": 4, "created": 104, "note": "e"}))  # absent: inserted whole
    errors = _flush_errors(s)
    assert len(errors) == 2
    for e in errors:
        assert isinstance(e.status, kudu.KuduImmutable)
        assert isinstance(e.status, kudu.KuduBadStatus)  # what kudu-python raises for Status::Immutable
        assert "immutable column: created" in str(e.status)
    assert sorted(e.failed_op()["key"] for e in errors) == [0, 3]
    assert _rows(table) == [(0, 100, "a"), (1, 101, "b"), (2, 102, "c"), (3, 103, "a"), (4, 104, "e")]
    s.apply(table.new_upsert({"key": 3, "note": "f"}))  # leaves the immutable column out: applied
    s.flush()
    assert _rows(table)[3] == (3, 103, "f")


def test_altering_mutability_takes_effect_on_the_tablets(client: kudu.Client) -> None:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("v").type(kudu.int64)
    table = client.create_table(unique("alter_mut"), b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2))
    s = client.new_session()
    s.apply(table.new_insert({"key": 1, "v": 1}))
    s.flush()

    alterer = client.new_table_alterer(table)
    alterer.alter_column("v").mutable(False)
    table = alterer.alter()
    assert table.schema["v"].mutable is False
    s.apply(table.new_update({"key": 1, "v": 2}))
    errors = _flush_errors(s)
    assert [type(e.status) for e in errors] == [kudu.KuduImmutable]

    alterer = client.new_table_alterer(table)
    alterer.alter_column("v").mutable(True)
    table = alterer.alter()
    s.apply(table.new_update({"key": 1, "v": 3}))
    s.flush()
    assert _rows(table) == [(1, 3)]


AUTO = "auto_incrementing_id"


def _leader(client: kudu.Client, table: kudu.Table, cluster: MiniCluster) -> str:
    """The name of the node that leads the table's only tablet, as the master reports it now."""
    give_up = time.monotonic() + 20.0
    while True:
        (token,) = table.scan_token_builder().build()
        leaders = [r.ts().uuid() for r in token.tablet().replicas() if r.is_leader()]
        if leaders:
            return next(ts.name for ts in cluster.tservers if ts.uuid == leaders[0])
        assert time.monotonic() < give_up, "no leader reported for the tablet after 20 s"
        time.sleep(0.2)


def _insert(client: kudu.Client, table: kudu.Table, rows: list[tuple[int, str]]) -> None:
    s = client.new_session()
    for k, v in rows:
        s.apply(table.new_insert({"k": k, "v": v}))
    s.flush()


def test_non_unique_primary_key_through_the_client(client: kudu.Client, cluster: MiniCluster) -> None:
    b = kudu.schema_builder()
    b.add_column("k", kudu.int32, nullable=False, non_unique_primary_key=True)
    b.add_column("v", kudu.string)
    schema = b.build()
    assert schema.get_auto_incrementing_column_name() == AUTO
    parts = kudu.Partitioning().set_range_partition_columns(["k"])  # one tablet: its counter is the table's
    table = client.create_table(unique("non_unique"), schema, parts, n_replicas=3)
    assert table.schema.names == ["k", AUTO, "v"] and table.schema.primary_keys() == ["k", AUTO]

    _insert(client, table, [(1, "a"), (1, "b"), (2, "c")])
    rows = _rows(table)  # the hidden column comes with every column
    assert [(k, v) for k, _, v in rows] == [(1, "a"), (1, "b"), (2, "c")]
    ids = [i for _, i, _ in rows]
    assert len(set(ids)) == 3 and min(ids) >= 1

    # Updates and deletes name a row by its full key, the id included.
    s = client.new_session()
    s.apply(table.new_update({"k": 1, AUTO: rows[1][1], "v": "B"}))
    s.apply(table.new_delete({"k": 1, AUTO: rows[0][1]}))
    s.flush()
    assert [(k, v) for k, _, v in _rows(table)] == [(1, "B"), (2, "c")]
    with pytest.raises(kudu.KuduInvalidArgument, match="key column missing"):
        s.apply(table.new_delete({"k": 2}))
    with pytest.raises(kudu.KuduInvalidArgument, match="should not be set for INSERT"):
        s.apply(table.new_insert({"k": 2, AUTO: 99}))

    # The counter survives a restart of the leader (which also hands leadership to another replica),
    # and a second one: ids stay unique and keep increasing.
    seen = set(ids)
    for _ in range(2):
        top = max(seen)
        cluster.restart_node(_leader(client, table, cluster))
        _insert(client, table, [(1, "x"), (1, "y")])
        now = {i for _, i, _ in _rows(table)}
        fresh = now - seen
        assert len(fresh) == 2 and min(fresh) > top, (sorted(seen), sorted(now))
        seen |= now
    assert len(_rows(table)) == 6


def test_array_columns_end_to_end(client: kudu.Client) -> None:
    """ARRAY columns through a cluster: created from kudu-python's builder, written as Python lists and as
    Arrow list columns, updated whole, scanned as tuples, batches, Arrow and pandas, and added/dropped by
    ALTER TABLE."""
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("ints").nested_type(kudu.array_type(kudu.int32))
    b.add_column("tags").nested_type(kudu.array_type(kudu.string))
    b.add_column("prices").nested_type(kudu.array_type(kudu.decimal)).precision(8).scale(2)
    table = client.create_table(
        unique("arrays"), b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
    )
    schema = client.table(table.name).schema
    assert schema["tags"].type_to_string() == "STRING 1D-ARRAY NULLABLE"
    assert schema["prices"].type_to_string() == "DECIMAL(8, 2) 1D-ARRAY NULLABLE"

    s = client.new_session()
    s.apply(table.new_insert({"key": 1, "ints": [1, None, 3], "tags": ["a"], "prices": [Decimal("1.50")]}))
    s.apply(table.new_insert({"key": 2, "ints": [], "tags": None}))
    s.flush()
    s.apply_arrow(
        table,
        pa.table({"key": pa.array([3], pa.int64()), "ints": pa.array([[7, 8]], pa.list_(pa.int64()))}),
        op="insert",
    )
    s.apply(table.new_update({"key": 1, "ints": [9]}))
    s.flush()
    with pytest.raises(kudu.KuduInvalidArgument, match="too many array elements"):
        s.apply(table.new_insert({"key": 4, "ints": [1] * 1025}))
    too_long = pa.table({"key": pa.array([4], pa.int64()), "ints": [[1] * 1025]})
    with pytest.raises(
        kudu.KuduBadStatus, match=r"too many array elements for column 'ints' \(1025, maximum is 1024\)"
    ):
        s.apply_arrow(table, too_long, op="insert")
    with pytest.raises(kudu.KuduInvalidArgument, match="only IS NULL and IS NOT NULL"):
        table.scanner().add_predicate(table["ints"] == [1])

    assert _rows(table) == [
        (1, [9], ["a"], [Decimal("1.50")]),
        (2, [], None, None),
        (3, [7, 8], None, None),
    ]
    sc = table.scanner().set_projected_column_names(["key", "tags"])
    sc.add_predicate(table["tags"].is_not_null())
    assert sc.open().read_all_tuples() == [(1, ["a"])]
    arrow = table.scanner().set_projected_column_names(["ints"]).open().to_arrow()
    assert arrow.schema.field("ints").type == pa.list_(pa.field("element", pa.int32()))
    df = table.scanner().open().to_pandas().sort_values("key")
    assert df["ints"].tolist() == [[9], [], [7, 8]]

    alt = client.new_table_alterer(table)
    alt.add_column("more").nested_type(kudu.array_type(kudu.double))
    alt.drop_column("tags")
    table = alt.alter()
    assert table.schema["more"].type_to_string() == "DOUBLE 1D-ARRAY NULLABLE"
    s.apply(table.new_update({"key": 2, "more": [0.5, None]}))
    s.flush()
    assert _rows(table) == [
        (1, [9], [Decimal("1.50")], None),
        (2, [], None, [0.5, None]),
        (3, [7, 8], None, None),
    ]
