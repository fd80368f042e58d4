"""Kudu's data-model features through the client against a cluster (1 master + 3 tablet servers, shared by
the module): immutable columns refuse changes; altering a column's mutability takes
effect on the tablets."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

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


def _rows(table: kudu.Table) -> list[tuple[object, ...]]:
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
