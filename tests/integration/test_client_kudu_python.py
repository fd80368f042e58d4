"""kudu-python's API against a cluster (1 master + 3 tablet servers, shared by the module): a program written
for kudu-python (string timestamps, bounds from new_bound(), xbatches of tuples, RowBatch) runs unchanged;
Client("host:port"), list_tablet_servers() as TabletServer objects, ScanToken.tablet() and its replicas;
a table deleted under a scan is reported as deleted."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration

FAST = ["--heartbeat-interval-ms", "200", "--raft-heartbeat-interval-ms", "250"]
# Table statistics refreshed often, and per-table write limits enforced (no table has one unless a test sets it).
STATS = ["--update-tablet-stats-interval-ms", "300"]
LIMITS = ["--enable-table-write-limit", "true"]
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        1,
        3,
        base_dir=tmp_path_factory.mktemp("kudu-python-cluster"),
        extra_flags=FAST,
        master_flags=LIMITS,
        tserver_flags=STATS,
    )
    c.start()
    try:
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def client(cluster: MiniCluster) -> Iterator[kudu.Client]:
    host, port = cluster.masters[0].rpc_address.rsplit(":", 1)
    c = kudu.connect(host, int(port), encryption_policy=kudu.ENCRYPTION_OPTIONAL)
    yield c
    c.close()


def events_table(client: kudu.Client) -> kudu.Table:
    builder = kudu.schema_builder()
    builder.add_column("key").type(kudu.int64).nullable(False).primary_key()
    builder.add_column("ts_val", type_=kudu.unixtime_micros, nullable=False, compression=kudu.COMPRESSION_LZ4)
    builder.add_column("note", kudu.string, encoding=kudu.ENCODING_DICT)
    schema = builder.build()
    partitioning = kudu.Partitioning().add_hash_partitions(column_names=["key"], num_buckets=3)
    return client.create_table(unique("events"), schema, partitioning)


def test_a_kudu_python_program_runs_unchanged(client: kudu.Client) -> None:
    table = events_table(client)
    session = client.new_session()
    # kudu-python's documented ways to give a timestamp
    session.apply(table.new_insert({"key": 1, "ts_val": "2016-09-14T23:11:32.432019"}))
    session.apply(table.new_insert((2, ("2016-09-15", "%Y-%m-%d"), "two")))
    op = table.new_insert()
    op["key"] = 3
    op["ts_val"] = dt.datetime(2016, 9, 16, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    session.apply(op)
    for k in range(4, 40):
        session.apply(table.new_insert({"key": k, "ts_val": dt.datetime(2017, 1, 1), "note": f"n{k}"}))
    session.flush()

    scanner = table.scanner()
    scanner.add_predicate(table["ts_val"] < ("2016-09-16", "%Y-%m-%d"))
    rows = sorted(scanner.open().read_all_tuples())
    assert rows == [
        (1, dt.datetime(2016, 9, 14, 23, 11, 32, 432019, tzinfo=dt.UTC), None),
        (2, dt.datetime(2016, 9, 15, tzinfo=dt.UTC), "two"),
    ]
    assert table.scanner().add_predicate(table["key"] == 3).open().read_all_tuples()[0][1] == dt.datetime(
        2016, 9, 16, tzinfo=dt.UTC
    )

    # bounds from new_bound(), xbatches of tuples, next_batch() RowBatch
    scanner = table.scanner()
    lower = scanner.new_bound()
    lower["key"] = 10
    upper = scanner.new_bound()
    upper["key"] = 20
    scanner.add_lower_bound(lower).add_exclusive_upper_bound(upper).set_batch_size_bytes(64)
    seen: list[tuple[Any, ...]] = []
    batches = 0
    for batch in scanner.xbatches():
        assert isinstance(batch, list) and all(isinstance(r, tuple) for r in batch)
        seen += batch
        batches += 1
    assert sorted(r[0] for r in seen) == list(range(10, 20)) and batches > 1
    sc = table.scanner().set_projected_column_names(["key"]).open()
    got: list[int] = []
    while sc.has_more_rows():
        rb = sc.next_batch()
        assert isinstance(rb, kudu.client.RowBatch)
        got += [r[0] for r in rb.as_tuples()]
        assert [t for t in rb] == rb.as_tuples() and len(rb) == len(rb.as_tuples())
    assert sorted(got) == list(range(1, 40))
    with pytest.raises(StopIteration):
        sc.next_batch()

    # a snapshot given as a string: rows written after it are not seen
    before = time.time()
    stamp = dt.datetime.fromtimestamp(before, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    time.sleep(0.05)
    session.apply(table.new_insert({"key": 100, "ts_val": 0}))
    session.flush()
    snap = table.scanner().set_snapshot(stamp).open().read_all_tuples()
    assert 100 not in {r[0] for r in snap} and len(snap) == 39
    table.drop()


def test_client_from_one_address_string_lists_tablet_servers(cluster: MiniCluster) -> None:
    with kudu.Client(cluster.masters[0].rpc_address) as c:
        assert c.master_addrs == [cluster.masters[0].rpc_address] and not c.is_multimaster
        servers = c.list_tablet_servers()
        assert all(isinstance(s, kudu.client.TabletServer) for s in servers)
        assert {s.uuid() for s in servers} == {ts.uuid for ts in cluster.tservers}
        assert {f"{s.hostname()}:{s.port()}" for s in servers} == {ts.rpc_address for ts in cluster.tservers}


def test_scan_token_tablet_names_its_replicas_and_leader(client: kudu.Client, cluster: MiniCluster) -> None:
    table = events_table(client)
    tokens = table.scan_token_builder().build()
    assert len(tokens) == 3
    servers = {s.uuid(): s for s in client.list_tablet_servers()}
    for tok in tokens:
        tablet = tok.tablet()
        replicas = tablet.replicas()
        assert len(replicas) == 3 and sum(r.is_leader() for r in replicas) <= 1
        assert {r.ts().uuid() for r in replicas} == set(servers)
        assert all(r.ts() == servers[r.ts().uuid()] for r in replicas)
    assert len({tok.tablet().id() for tok in tokens}) == 3
    table.drop()


def test_a_scan_of_a_deleted_table_says_the_table_was_deleted(client: kudu.Client) -> None:
    table = events_table(client)
    s = client.new_session()
    s.apply(table.new_insert({"key": 1, "ts_val": 0}))
    s.flush()
    assert len(table.scanner().open().read_all_tuples()) == 1  # locations cached
    client.delete_table(table.name)
    give_up = time.monotonic() + 20.0
    while True:
        try:
            table.scanner().open().read_all_tuples()
        except kudu.KuduNotFound as e:
            assert "range partition" not in str(e) and "not found" in str(e)
            break
        assert time.monotonic() < give_up, "the deleted table's tablets were still scannable after 20 s"
        time.sleep(0.1)


def test_table_statistics_count_live_rows_and_bytes_on_disk(client: kudu.Client) -> None:
    table = events_table(client)
    s = client.new_session()
    for k in range(50):
        s.apply(table.new_insert({"key": k, "ts_val": k}))
    s.flush()
    for k in range(10):
        s.apply(table.new_delete({"key": k}))
    s.flush()
    # The master sums the leaders' figures from their tablet reports (refreshed every 300 ms here).
    stats = wait_for_statistics(client, table.name, lambda st: st.live_row_count == 40)
    assert isinstance(stats, kudu.client.TableStatistics)
    assert stats.live_row_count == 40 and stats.on_disk_size >= 0
    assert (stats.on_disk_size_limit, stats.live_row_count_limit) == (-1, -1)
    assert repr(stats).startswith(f"on disk size: {stats.on_disk_size}\nlive row count: 40\n")
    with pytest.raises(kudu.KuduNotFound):
        client.get_table_statistics(unique("no_such_table"))
    table.drop()


def wait_for_statistics(
    client: kudu.Client, name: str, ok: Callable[[Any], bool], timeout_s: float = 20.0
) -> kudu.client.TableStatistics:
    give_up = time.monotonic() + timeout_s
    while True:
        stats = client.get_table_statistics(name)
        if ok(stats):
            return stats
        assert time.monotonic() < give_up, f"statistics of {name} never matched: {stats!r}"
        time.sleep(0.1)


def insert_rows(client: kudu.Client, table: kudu.Table, keys: range) -> None:
    s = client.new_session()
    for k in keys:
        s.apply(table.new_insert({"key": k, "ts_val": k}))
    s.flush()


def tablets_held(cluster: MiniCluster) -> set[str]:
    """Ids of the tablet replicas every tserver holds."""

    async def ask() -> set[str]:
        rpc = RpcClient("test-client")
        try:
            held: set[str] = set()
            for ts in cluster.tservers:
                listed = (await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {}))["tablets"]
                held |= {t["tablet_id"] for t in listed}
            return held
        finally:
            await rpc.close()

    return asyncio.run(ask())


def test_a_soft_deleted_table_is_hidden_kept_whole_and_recalled(client: kudu.Client) -> None:
    table = events_table(client)
    insert_rows(client, table, range(20))
    client.soft_delete_table(table.name, 600)
    assert table.name not in client.list_tables()
    assert client.list_soft_deleted_tables(table.name) == [table.name]
    # As in Kudu: still read and written by its clients until purged, and its name is not free.
    insert_rows(client, table, range(20, 30))
    assert len(table.scanner().open().read_all_tuples()) == 30
    with pytest.raises(kudu.KuduAlreadyPresent):
        events_table_named(client, table.name)
    with pytest.raises(kudu.KuduInvalidArgument, match="should not be soft deleted again"):
        client.soft_delete_table(table.name, 60)
    new_name = unique("recalled")
    client.recall_table(table.id, new_name)
    assert new_name in client.list_tables() and client.list_soft_deleted_tables(table.name) == []
    back = client.table(new_name)
    assert back.id == table.id
    assert sorted(r[0] for r in back.scanner().open().read_all_tuples()) == list(range(30))
    with pytest.raises(kudu.KuduNotFound):
        client.recall_table(table.id)  # no longer soft-deleted
    client.soft_delete_table(new_name)  # no reserve time: deleted at once
    assert new_name not in client.list_tables() and client.list_soft_deleted_tables(new_name) == []


def test_a_soft_deleted_table_is_purged_with_its_tablets_after_the_reserve_time(
    client: kudu.Client, cluster: MiniCluster
) -> None:
    table = events_table(client)
    insert_rows(client, table, range(10))
    tablet_ids = {tok.tablet().id() for tok in table.scan_token_builder().build()}
    assert len(tablet_ids) == 3 and tablet_ids <= tablets_held(cluster)
    client.soft_delete_table(table.name, 2)
    assert client.list_soft_deleted_tables(table.name) == [table.name]
    give_up = time.monotonic() + 30.0
    while client.list_soft_deleted_tables(table.name) or tablet_ids & tablets_held(cluster):
        assert time.monotonic() < give_up, "the soft-deleted table was not purged 30 s after its 2 s reserve"
        time.sleep(0.2)
    assert not client.table_exists(table.name)
    with pytest.raises(kudu.KuduNotFound):
        client.recall_table(table.id)


def test_a_table_at_its_row_count_limit_refuses_inserts_and_updates_but_not_deletes(client: kudu.Client) -> None:
    table = events_table(client)
    alterer = client.new_table_alterer(table)
    alterer.set_table_row_count_limit(20)
    alterer.alter()
    stats = client.get_table_statistics(table.name)
    assert (stats.live_row_count_limit, stats.on_disk_size_limit) == (20, -1)
    insert_rows(client, table, range(19))  # 19 rows: at 95% of the limit, Kudu's default write limit ratio
    wait_for_statistics(client, table.name, lambda st: st.live_row_count == 19)
    # Each tserver learns of the limit from the leader master's next heartbeat answer to it.
    wait_refused(client, table, lambda: table.new_insert({"key": 100, "ts_val": 0}), "not authorized to insert")
    wait_refused(client, table, lambda: table.new_update({"key": 1, "ts_val": 5}), "not authorized to update")
    s = client.new_session()
    for k in range(10):
        s.apply(table.new_delete({"key": k}))
    s.flush()  # deletes free room: always allowed
    alterer = client.new_table_alterer(table)
    alterer.set_table_row_count_limit(-1)
    alterer.alter()
    assert client.get_table_statistics(table.name).live_row_count_limit == -1
    give_up = time.monotonic() + 20.0
    while True:  # upserts: a retry of rows a tserver already took is harmless
        s = client.new_session()
        for k in range(200, 210):
            s.apply(table.new_upsert({"key": k, "ts_val": k}))
        try:
            s.flush()
            break
        except kudu.KuduBadStatus:
            assert time.monotonic() < give_up, "inserts were still refused 20 s after the limit was removed"
            time.sleep(0.2)
    table.drop()


def wait_refused(client: kudu.Client, table: kudu.Table, make_op: Callable[[], Any], text: str) -> None:
    """Apply ``make_op()`` until its write is refused with ``text`` (an op that went through is undone)."""
    give_up = time.monotonic() + 20.0
    while True:
        s = client.new_session()
        op = make_op()
        s.apply(op)
        try:
            s.flush()
        except kudu.KuduBadStatus:
            errors, _overflow = s.get_pending_errors()
            assert errors and all(text in str(e) for e in errors), errors
            return
        assert time.monotonic() < give_up, f"writes were still taken 20 s after the table reached its limit: {op}"
        if isinstance(op, kudu.Insert):
            s.apply(table.new_delete({"key": 100}))
            s.flush()
        time.sleep(0.2)


def events_table_named(client: kudu.Client, name: str) -> kudu.Table:
    builder = kudu.schema_builder()
    builder.add_column("key").type(kudu.int64).nullable(False).primary_key()
    schema = builder.build()
    return client.create_table(name, schema, kudu.Partitioning().add_hash_partitions(["key"], 3))


def test_the_kudu_python_demo_program_runs_against_a_cluster(cluster: MiniCluster) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [
            sys.executable,
            str(root / "scripts/examples/kudu_python_demo.py"),
            "--master",
            cluster.master_addresses,
            "--table",
            unique("demo"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith("ok") and "recalled:" in out.stdout


def flush_tablets(cluster: MiniCluster) -> None:
    """Every tablet replica's MemRowSet to rowset files."""

    async def flush() -> None:
        rpc = RpcClient("test-client")
        try:
            for ts in cluster.tservers:
                for t in (await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {}))["tablets"]:
                    await rpc.call(ts.rpc_address, "TabletServer", "FlushTablet", {"tablet_id": t["tablet_id"]})
        finally:
            await rpc.close()

    asyncio.run(flush())


def test_scanner_resource_metrics_sum_what_the_servers_measured(client: kudu.Client, cluster: MiniCluster) -> None:
    table = events_table(client)
    insert_rows(client, table, range(30_000))
    flush_tablets(cluster)
    names = {
        "cfile_cache_hit_bytes",
        "cfile_cache_miss_bytes",
        "bytes_read",
        "queue_duration_nanos",
        "total_duration_nanos",
        "cpu_user_nanos",
        "cpu_system_nanos",
    }
    scanner = table.scanner().set_batch_size_bytes(64 * 1024)
    assert scanner.get_resource_metrics() == {}  # nothing asked of a server yet
    scanner.open()
    n = 0
    while scanner.has_more_rows():
        n += len(scanner.next_batch())
    m = scanner.get_resource_metrics()
    assert n == 30_000 and set(m) == names
    assert (
        m["cfile_cache_miss_bytes"] > 0 and m["bytes_read"] == m["cfile_cache_hit_bytes"] + m["cfile_cache_miss_bytes"]
    )
    assert m["total_duration_nanos"] > m["queue_duration_nanos"] >= 0
    assert m["cpu_user_nanos"] + m["cpu_system_nanos"] > 0
    # a point read finds the rowset's blocks the flush left in the block cache
    point = table.scanner().add_predicate(table["key"] == 777)
    assert point.open().read_all_tuples()[0][0] == 777
    assert point.get_resource_metrics()["cfile_cache_hit_bytes"] > 0
    table.drop()


def test_split_size_tokens_cover_every_row_exactly_once(client: kudu.Client, cluster: MiniCluster) -> None:
    table = events_table(client)
    insert_rows(client, table, range(60_000))
    flush_tablets(cluster)
    insert_rows(client, table, range(60_000, 62_000))  # and some rows still in memory
    whole = table.scan_token_builder().build()
    tokens = table.scan_token_builder().set_split_size_bytes(8 * 1024).build()
    assert len(whole) == 3 and len(tokens) > 2 * len(whole)
    assert {t.tablet().id() for t in tokens} == {t.tablet().id() for t in whole}
    keys: list[int] = []
    for tok in tokens:
        sc = client.deserialize_token_into_scanner(tok.serialize())
        keys += [r[0] for r in sc.open().read_all_tuples()]
    assert sorted(keys) == list(range(62_000))

    # with the scan's own bounds: the chunks stay inside them
    b = table.scan_token_builder().set_split_size_bytes(2 * 1024)
    lower, upper = b.new_bound(), b.new_bound()
    lower["key"], upper["key"] = 1000, 40_000
    b.add_lower_bound(lower).add_exclusive_upper_bound(upper)
    bounded = b.build()
    keys = [r[0] for tok in bounded for r in tok.into_kudu_scanner().open().read_all_tuples()]
    assert len(bounded) > 3 and sorted(keys) == list(range(1000, 40_000))
    with pytest.raises(kudu.KuduInvalidArgument, match="split size"):
        table.scan_token_builder().set_split_size_bytes(-1)
    table.drop()
