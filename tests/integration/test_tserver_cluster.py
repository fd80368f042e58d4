"""Tablet servers in real processes: replicated tablets created by direct RPC, written, scanned, killed,
copied and restarted, with no master: the tests drive the tablet servers themselves."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kudu_async.common import types as T
from kudu_async.common.errors import (
    KuduBadStatus,
    KuduInvalidArgument,
    KuduNotFound,
    KuduNotTheLeader,
    KuduServiceUnavailable,
)
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.tablet_client import INSERT, UPSERT, TabletClient
from kudu_async.testing.waits import wait_for

pytestmark = pytest.mark.integration
LONG = os.environ.get("KUDU_LONG_TESTS") == "1"
SCHEMA = Schema(
    [ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING), ColumnSchema("n", T.INT32)], 1
)


def rows(keys: range | list[int], tag: str = "v") -> pa.RecordBatch:
    ks = list(keys)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ks, pa.int64()),
            pa.array([f"{tag}{k}" for k in ks], pa.string()),
            pa.array([k % 1000 for k in ks], pa.int32()),
        ],
        schema=SCHEMA.to_arrow(),
    )


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


def addresses(cluster: MiniCluster, n: int | None = None) -> dict[str, str]:
    tss = cluster.tservers if n is None else cluster.tservers[:n]
    return {ts.uuid: ts.rpc_address for ts in tss}


async def wait_checksums_equal(tc: TabletClient, addrs: list[str], rows_expected: int, timeout_s: float = 30.0) -> dict:
    """Every replica's checksum at one snapshot, once all agree (followers may still be applying)."""
    deadline = time.monotonic() + timeout_s
    last: list = []
    while time.monotonic() < deadline:
        try:
            leader = await tc.wait_leader(5.0)
            first = await tc.checksum(leader)
            snap = first["snapshot_ts"]
            last = [await tc.checksum(a, snap) for a in addrs]
            if all(c == last[0] for c in last) and last[0]["rows"] == rows_expected:
                return last[0]
        except KuduBadStatus as e:
            last = [str(e)]
        await asyncio.sleep(0.2)
    raise AssertionError(f"replica checksums never matched with {rows_expected} rows: {last}")


async def test_three_replicas_take_100k_rows_and_agree(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc = TabletClient(rpc, "tablet-a", SCHEMA, addresses(cluster))
    await tc.create()
    leader = await tc.wait_leader()
    total = 100_000
    batch = 2_000
    started = time.monotonic()
    sem = asyncio.Semaphore(4)

    async def one(lo: int) -> None:
        async with sem:
            reply = await tc.write(rows(range(lo, min(total, lo + batch))), INSERT)
            assert reply["row_errors"] == [], reply["row_errors"][:3]

    await asyncio.gather(*(one(lo) for lo in range(0, total, batch)))
    elapsed = time.monotonic() - started
    print(f"\n100k rows through one 3-replica tablet: {total / elapsed:,.0f} rows/s")
    addrs = list(tc.addresses.values())
    agreed = await wait_checksums_equal(tc, addrs, total)
    assert agreed["rows"] == total

    # A duplicate key gets a per-row ALREADY_PRESENT; the rest of the batch still applies.
    reply = await tc.write(rows([5, total + 1]), INSERT)
    assert [e["code"] for e in reply["row_errors"]] == ["ALREADY_PRESENT"]
    assert reply["inserted"] == 1

    # Snapshot scans return identical rows on every replica.
    _, snap = await tc.scan(leader, read_mode="READ_AT_SNAPSHOT", batch_bytes=256 * 1024)
    results = [(await tc.scan(a, read_mode="READ_AT_SNAPSHOT", snapshot_ts=snap))[0] for a in addrs]
    assert results[0].num_rows == total + 1
    for r in results[1:]:
        assert r.equals(results[0])
    # READ_LATEST is the leader's: a follower refuses it and names the leader. On a loaded machine the
    # leadership may move after the load above: ask for the leader now, and again if it moved meanwhile.
    refused: KuduNotTheLeader | None = None
    for _ in range(5):
        refused = None
        leader = await tc.wait_leader()
        follower = next(a for a in addrs if a != leader)
        try:
            await rpc.call(follower, "TabletServer", "Scan", {"tablet_id": "tablet-a", "read_mode": "READ_LATEST"})
        except KuduNotTheLeader as e:
            refused = e
        if await tc.wait_leader() == leader:
            break  # no election in between: the answer stands
    assert refused is not None, f"the follower {follower} served READ_LATEST"
    assert refused.details.get("leader_address") == leader
    # Followers refuse writes too.
    with pytest.raises(KuduNotTheLeader):
        await rpc.call(
            follower, "TabletServer", "Write", {"tablet_id": "tablet-a", "schema_version": 0, **_ops(rows([total + 2]))}
        )


async def wait_master_sees(cluster: MiniCluster, replicas: int, leaders: int, timeout_s: float = 10.0) -> None:
    """Poll the master's tserver list until its incremental tablet reports show these counts."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        seen = [
            (d["num_replicas"], d["num_leaders"])
            for d in cluster.http_json(cluster.masters[0].name, "/api/v1/tservers")
        ]
        if seen == [(replicas, leaders)]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"master saw {seen}, expected [({replicas}, {leaders})]")


def _ops(batch: pa.RecordBatch, op: int = INSERT) -> dict:
    from kudu_async.common.row_conversion import encode_row_operations

    return encode_row_operations(batch, [op] * batch.num_rows)


async def test_create_delete_idempotent_and_bad_requests(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=1)
    ts = cluster.tservers[0]
    tc = TabletClient(rpc, "tablet-b", SCHEMA, addresses(cluster))
    await tc.create()
    await tc.create()  # the master may retry: same answer, no error
    await tc.wait_leader()
    listed = await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {})
    assert [t["tablet_id"] for t in listed["tablets"]] == ["tablet-b"]
    bad = [
        ("Write", {"tablet_id": "tablet-b", "rows": b"not arrow", "op_types": b"\x01"}),
        ("Write", {"tablet_id": "tablet-b", **_ops(rows([1])), "op_types": b"\x63"}),
        ("Write", {"tablet_id": "nope", **_ops(rows([1]))}),
        ("Scan", {"tablet_id": "tablet-b", "projection": ["missing"]}),
        ("Scan", {"tablet_id": "tablet-b", "read_mode": "READ_SOMETIME"}),
        ("CreateTablet", {"tablet_id": "../x", "table_id": "t", "schema": SCHEMA.to_dict(), "peers": {}}),
        (
            "CreateTablet",
            {
                "tablet_id": "tablet-c",
                "table_id": "t",
                "schema": SCHEMA.to_dict(),
                "peers": {ts.uuid: ts.rpc_address},
                "first_leader": "someone-else",
            },
        ),
        (
            "CreateTablet",
            {
                "tablet_id": "tablet-c",
                "table_id": "t",
                "schema": SCHEMA.to_dict(),
                "peers": {ts.uuid: ts.rpc_address},
                "first_leader": [ts.uuid],
            },
        ),
        ("DeleteTablet", {"tablet_id": "tablet-b", "delete_type": "SHRED"}),
    ]
    for method, req in bad:
        with pytest.raises((KuduInvalidArgument, KuduNotFound)):
            await rpc.call(ts.rpc_address, "TabletServer", method, req)
    reply = await tc.write(rows(range(10)))  # still serving, nothing lost
    assert reply["inserted"] == 10
    # Admin pages: the tablet list, one tablet's detail, maintenance and per-tablet metrics.
    listed_http = cluster.http_json(ts.name, "/api/v1/tablets")
    assert [(t["tablet_id"], t["state"], t["role"]) for t in listed_http["tablets"]] == [
        ("tablet-b", "RUNNING", "LEADER")
    ]
    detail = cluster.http_json(ts.name, "/api/v1/tablets/tablet-b")
    assert detail["consensus"]["role"] == "LEADER" and detail["storage"]["mrs_rows"] == 10
    assert [c["name"] for c in detail["schema"]["columns"]] == ["key", "val", "n"]
    assert "memrowset_bytes" in detail and "rowsets" in detail["storage"]
    await rpc.call(ts.rpc_address, "TabletServer", "FlushTablet", {"tablet_id": "tablet-b"})
    detail = cluster.http_json(ts.name, "/api/v1/tablets/tablet-b")
    assert sum(r["rows"] for r in detail["storage"]["rowsets"]) == 10
    maint = cluster.http_json(ts.name, "/api/v1/maintenance")
    assert {"queue", "running", "history"} <= set(maint)
    metrics = cluster.http_json(ts.name, "/metrics?types=tablet")
    tablet_metrics = {m["name"]: m["value"] for e in metrics if e["id"] == "tablet-b" for m in e["metrics"]}
    assert tablet_metrics["rows_inserted"] == 10
    assert tablet_metrics["flushes"] >= 1 and tablet_metrics["bytes_flushed"] > 0
    assert tablet_metrics["max_diskrowset_height"] in (0, 1)  # the maintenance manager's last plan
    assert "average_rowset_height" in cluster.http_json(ts.name, "/api/v1/tablets/tablet-b")["storage"]
    missing = cluster.http_get(ts.name, "/api/v1/tablets/nope")
    assert missing[0] == 404
    # The heartbeater reported the replica (and its leadership) to the master.
    await wait_master_sees(cluster, replicas=1, leaders=1)
    # A write built for another schema version is refused with a clear error.
    with pytest.raises(KuduInvalidArgument, match="schema version"):
        await rpc.call(
            ts.rpc_address, "TabletServer", "Write", {"tablet_id": "tablet-b", "schema_version": 7, **_ops(rows([99]))}
        )
    assert (await rpc.call(ts.rpc_address, "TabletServer", "DeleteTablet", {"tablet_id": "tablet-b"}))["deleted"]
    assert not (await rpc.call(ts.rpc_address, "TabletServer", "DeleteTablet", {"tablet_id": "tablet-b"}))["deleted"]
    listed = await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {})
    assert listed["tablets"] == []
    await wait_master_sees(cluster, replicas=0, leaders=0)
    assert not (Path(ts.data_dir) / "tablets" / "tablet-b").exists()
    assert not (Path(ts.data_dir) / "consensus" / "tablet-b").exists()


async def test_kill_leader_during_writes_loses_nothing_acknowledged(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc = TabletClient(rpc, "tablet-k", SCHEMA, addresses(cluster))
    await tc.create()
    leader_addr = await tc.wait_leader()
    acked: list[int] = []
    batch = 200
    n_batches = 150 if LONG else 60
    stop_at = n_batches // 3

    third = asyncio.Event()

    async def writer() -> None:
        for i in range(n_batches):
            keys = range(i * batch, (i + 1) * batch)
            await tc.write(rows(keys), UPSERT, timeout_s=60.0)
            acked.extend(keys)
            if i + 1 == stop_at:
                third.set()

    task = asyncio.create_task(writer())
    await asyncio.wait_for(third.wait(), 60)
    victim = next(ts for ts in cluster.tservers if ts.rpc_address == leader_addr)
    cluster.kill_node(victim.name)
    await asyncio.wait_for(task, 120)
    new_leader = await tc.wait_leader(exclude=[leader_addr])
    assert new_leader != leader_addr
    cluster.restart_node(victim.name)
    table, _ = await tc.scan()
    got = set(table.column("key").to_pylist())
    assert set(acked) <= got
    assert len(acked) == n_batches * batch
    await wait_checksums_equal(tc, list(tc.addresses.values()), len(got), timeout_s=60.0)


async def test_deleted_replica_is_rebuilt_by_tablet_copy(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc = TabletClient(rpc, "tablet-c", SCHEMA, addresses(cluster))
    await tc.create()
    leader = await tc.wait_leader()
    await tc.write(rows(range(0, 5000)), INSERT)
    await rpc.call(leader, "TabletServer", "FlushTablet", {"tablet_id": "tablet-c"})  # some data in files
    await tc.write(rows(range(5000, 8000)), INSERT)
    victim = next(ts for ts in cluster.tservers if ts.rpc_address != leader)
    cluster.stop_node(victim.name)
    data = Path(victim.data_dir)
    shutil.rmtree(data / "consensus" / "tablet-c")
    shutil.rmtree(data / "tablets" / "tablet-c")
    await tc.write(rows(range(8000, 9000)), INSERT)  # the majority goes on meanwhile
    cluster.restart_node(victim.name)
    agreed = await wait_checksums_equal(tc, list(tc.addresses.values()), 9000, timeout_s=60.0)
    assert agreed["rows"] == 9000
    st = await rpc.call(victim.rpc_address, "Consensus", "GetState", {"group": "tablet-c"})
    assert st["role"] == "FOLLOWER"
    copies = cluster.http_json(victim.name, "/api/v1/maintenance")["tablet_copies"]
    assert [c["result"] for c in copies if c["tablet_id"] == "tablet-c"][-1] == "OK"
    maint = cluster.http_json(next(t for t in cluster.tservers if t.rpc_address == leader).name, "/api/v1/maintenance")
    assert "copy_sessions" in maint


async def test_restart_with_50_tablets_bootstraps_all(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=1)
    ts = cluster.tservers[0]
    clients = [TabletClient(rpc, f"t50-{i:02d}", SCHEMA, addresses(cluster)) for i in range(50)]
    await asyncio.gather(*(c.create() for c in clients))
    await asyncio.gather(*(c.wait_leader(30.0) for c in clients))
    await asyncio.gather(*(c.write(rows(range(i * 100, i * 100 + 100))) for i, c in enumerate(clients)))
    started = time.monotonic()
    cluster.restart_node(ts.name)
    deadline = started + 60
    while True:
        listed = await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {})
        states = [t["state"] for t in listed["tablets"]]
        if len(states) == 50 and all(s == "RUNNING" for s in states):
            break
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.05)
    print(f"\n50-tablet restart: all RUNNING {time.monotonic() - started:.2f}s after the restart began")
    for i, c in enumerate(clients):
        await c.wait_leader()
        table, _ = await c.scan()
        assert sorted(table.column("key").to_pylist()) == list(range(i * 100, i * 100 + 100))


async def test_backpressure_and_scanner_expiry(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(
        num_masters=1,
        num_tservers=1,
        tserver_flags=["--tablet-memory-limit-mb", "1", "--flush-threshold-mb", "512", "--scanner-ttl-ms", "600"],
    )
    tc = TabletClient(rpc, "tablet-p", SCHEMA, addresses(cluster))
    await tc.create()
    addr = await tc.wait_leader()
    refused = 0
    for i in range(40):  # bounded: ~40 x 5,000 rows, well past the 1 MiB memory limit
        try:
            batch = rows(range(i * 5000, (i + 1) * 5000))
            await rpc.call(addr, "TabletServer", "Write", {"tablet_id": "tablet-p", "schema_version": 0, **_ops(batch)})
        except KuduServiceUnavailable as e:
            assert "busy" in e.message
            refused += 1
            break
    assert refused == 1
    first = await rpc.call(
        addr, "TabletServer", "Scan", {"tablet_id": "tablet-p", "batch_bytes": 1024, "read_mode": "READ_LATEST"}
    )
    assert first["has_more"]
    await asyncio.sleep(2.0)
    with pytest.raises(KuduNotFound, match="expired"):
        await rpc.call(addr, "TabletServer", "Scan", {"scanner_id": first["scanner_id"]})


async def test_follower_behind_the_retained_log_is_copied(mini_cluster_factory, rpc: RpcClient) -> None:
    # Uncompressed WAL: the repetitive rows below must fill segments as their raw size says.
    flags = ["--log-segment-size-mb", "1", "--log-max-segments-to-retain", "2", "--log-compression-codec", "NONE"]
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3, tserver_flags=flags)
    tc = TabletClient(rpc, "tablet-g", SCHEMA, addresses(cluster))
    await tc.create()
    leader = await tc.wait_leader()
    victim = next(ts for ts in cluster.tservers if ts.rpc_address != leader)
    cluster.stop_node(victim.name)
    wide = [str(i) * 200 for i in range(10)]
    for i in range(30):  # ~30 x 400 KiB of WAL: well past 2 retained 1 MiB segments
        b = rows(range(i * 2000, (i + 1) * 2000))
        b = b.set_column(1, "val", pa.array([wide[k % 10] for k in range(2000)], pa.string()))
        await tc.write(b, INSERT)
    await rpc.call(leader, "TabletServer", "FlushTablet", {"tablet_id": "tablet-g"})
    for i in range(30, 36):  # more entries after the flush let the leader collect its log
        await tc.write(rows(range(i * 2000, (i + 1) * 2000)), INSERT)
    st = await rpc.call(leader, "Consensus", "GetState", {"group": "tablet-g"})
    assert st["first_log_index"] > 2, st  # the entries the stopped follower needs are gone
    cluster.restart_node(victim.name)
    await wait_checksums_equal(tc, list(tc.addresses.values()), 36 * 2000, timeout_s=90.0)
    copies = cluster.http_json(victim.name, "/api/v1/maintenance")["tablet_copies"]
    assert [c["result"] for c in copies if c["tablet_id"] == "tablet-g"][-1] == "OK"


async def test_alter_schema_is_replicated_and_old_writes_are_refused(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc = TabletClient(rpc, "tablet-s", SCHEMA, addresses(cluster))
    await tc.create()
    leader = await tc.wait_leader()
    await tc.write(rows(range(100)))
    leader_node = next(t for t in cluster.tservers if t.rpc_address == leader)
    current = Schema.from_dict(cluster.http_json(leader_node.name, "/api/v1/tablets/tablet-s")["schema"])
    altered = current.add_column(ColumnSchema("extra", T.INT32, default=7)).rename_column("val", "label")
    reply = await rpc.call(
        leader,
        "TabletServer",
        "AlterSchema",
        {"tablet_id": "tablet-s", "schema": altered.to_dict(), "schema_version": 1},
    )
    assert reply["schema_version"] == 1
    with pytest.raises(KuduInvalidArgument, match="schema version") as ei:
        await rpc.call(
            leader, "TabletServer", "Write", {"tablet_id": "tablet-s", "schema_version": 0, **_ops(rows([500]))}
        )
    assert ei.value.details["error"] == "MISMATCHED_SCHEMA" and ei.value.details["schema_version"] == 1
    new_rows = pa.RecordBatch.from_arrays(
        [
            pa.array([1000, 1001], pa.int64()),
            pa.array(["a", "b"]),
            pa.array([1, 2], pa.int32()),
            pa.array([70, None], pa.int32()),
        ],
        schema=altered.to_arrow(),
    )
    tc.schema_version = 1
    assert (await tc.write(new_rows))["inserted"] == 2
    # Every replica applied the alter: same rows, the new column's default on old rows, the renamed column.
    await wait_checksums_equal(tc, list(tc.addresses.values()), 102)
    follower = next(a for a in tc.addresses.values() if a != leader)
    _, snap = await tc.scan(leader, read_mode="READ_AT_SNAPSHOT")
    table, _ = await tc.scan(follower, read_mode="READ_AT_SNAPSHOT", snapshot_ts=snap)
    assert table.column_names == ["key", "label", "n", "extra"]
    got = {r["key"]: (r["label"], r["extra"]) for r in table.to_pylist()}
    assert got[5] == ("v5", 7) and got[1000] == ("a", 70) and got[1001] == ("b", None)
    # A caller that knows the table at a later schema version than a replica has applied is told to retry
    # (SERVICE_UNAVAILABLE), not that its columns do not exist; one at the replica's version reads.
    scan = {"tablet_id": "tablet-s", "projection": ["key", "extra"]}
    with pytest.raises(KuduServiceUnavailable, match="the alter is not applied here yet"):
        await rpc.call(follower, "TabletServer", "Scan", {**scan, "min_schema_version": 2})
    assert (await rpc.call(leader, "TabletServer", "Scan", {**scan, "min_schema_version": 1}))["rows"] > 0
    # A replica restarted after the alter replays it (or finds it durable) and agrees.
    victim = next(t for t in cluster.tservers if t.rpc_address == follower)
    cluster.kill_node(victim.name)
    cluster.restart_node(victim.name)
    await wait_checksums_equal(tc, list(tc.addresses.values()), 102)


async def test_new_learner_is_filled_by_tablet_copy_then_promoted(mini_cluster_factory, rpc: RpcClient) -> None:
    """Kudu's 3-4-3 re-replication, driven by hand: add a NON_VOTER, it is copied, promote it, evict one."""
    cluster = mini_cluster_factory(num_masters=1, num_tservers=4)
    first3 = addresses(cluster, 3)
    tc = TabletClient(rpc, "tablet-r", SCHEMA, first3)
    await tc.create()
    leader = await tc.wait_leader()
    await tc.write(rows(range(3000)))
    new = cluster.tservers[3]
    await rpc.call(
        leader,
        "Consensus",
        "ChangeConfig",
        {"group": "tablet-r", "op": "ADD_LEARNER", "peer": new.uuid, "address": new.rpc_address},
    )
    deadline = time.monotonic() + 60
    while True:  # the leader finds the learner lacks the tablet and has it copied there
        try:
            st = await rpc.call(new.rpc_address, "Consensus", "GetState", {"group": "tablet-r"})
            if st["state"] == "RUNNING" and st["applied_index"] >= 3:
                break
        except KuduNotFound:
            pass
        assert time.monotonic() < deadline, "learner never received a copy"
        await asyncio.sleep(0.1)
    for addr in first3.values():  # the config entry told every member (not only the leader) its address
        st = await rpc.call(addr, "Consensus", "GetState", {"group": "tablet-r"})
        assert {p["uuid"]: (p["member_type"], p["address"]) for p in st["peers"]}[new.uuid] == (
            "NON_VOTER",
            new.rpc_address,
        ), st["peers"]
    while True:  # a learner is promoted once caught up
        try:
            await rpc.call(
                leader, "Consensus", "ChangeConfig", {"group": "tablet-r", "op": "PROMOTE", "peer": new.uuid}
            )
            break
        except KuduBadStatus as e:
            assert time.monotonic() < deadline, f"promotion kept failing: {e}"
            await asyncio.sleep(0.2)
    evicted = next(u for u, a in first3.items() if a != leader)
    servers = ",".join([*first3.values(), new.rpc_address])
    admin = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kudu_async.tools.cli",
        "tablet",
        "change_config",
        "remove_replica",
        cluster.master_addresses,
        "tablet-r",
        evicted,
        "-servers",
        servers,
        "-format=json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(admin.communicate(), 60)
    assert admin.returncode == 0, err.decode()
    assert json.loads(out)["config_index"] > 0
    await rpc.call(
        first3[evicted], "TabletServer", "DeleteTablet", {"tablet_id": "tablet-r", "delete_type": "TOMBSTONED"}
    )
    tc.addresses = {u: a for u, a in {**first3, new.uuid: new.rpc_address}.items() if u != evicted}
    await tc.write(rows(range(3000, 4000)))
    await wait_checksums_equal(tc, list(tc.addresses.values()), 4000)
    st = await rpc.call(leader, "Consensus", "GetState", {"group": "tablet-r"})
    assert sorted(p["uuid"] for p in st["peers"] if p["member_type"] == "VOTER") == sorted(tc.addresses)
    listed = await rpc.call(first3[evicted], "TabletServer", "ListTablets", {})
    assert [(t["tablet_id"], t["state"]) for t in listed["tablets"]] == [("tablet-r", "TOMBSTONED")]


async def test_block_cache_holds_flushed_files_and_lets_them_go_with_the_tablet(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    """The tserver's block cache takes a flushed tablet's files (lookups of its rows then answered on the
    loop), a restart reads them back into it, and deleting the tablet releases them."""
    cluster = mini_cluster_factory(num_masters=1, num_tservers=1)
    ts = cluster.tservers[0]
    tc = TabletClient(rpc, "tablet-cache", SCHEMA, addresses(cluster))
    await tc.create()
    leader = await tc.wait_leader()

    def cache() -> dict[str, int]:
        return cluster.tserver_metric_totals(["block_cache_usage", "block_cache_inserts"], "server")

    assert cache()["block_cache_usage"] == 0
    await tc.write(rows(range(0, 3000)), INSERT)
    await rpc.call(leader, "TabletServer", "FlushTablet", {"tablet_id": "tablet-cache"})
    held = cache()
    assert held["block_cache_usage"] > 0 and held["block_cache_inserts"] >= 1  # the rowset's base data
    # At most the tablet's data as decoded blocks (and its key index), whole files for the rest.
    held_data = 0
    for p in (Path(ts.data_dir) / "tablets" / "tablet-cache" / "data").glob("*.blk"):
        if p.read_bytes()[:4] == b"PAR1":
            base = pq.read_table(p)
            held_data += base.nbytes + base.column("_key").nbytes
        else:
            held_data += p.stat().st_size
    assert 0 < held["block_cache_usage"] <= held_data
    before = cluster.tserver_metric_totals(["point_reads_in_memory", "point_reads_handed_off"])
    for k in (5, 1500, 2999):
        got, _ = await tc.scan(leader, predicates=[{"column": "key", "op": "=", "value": k}])
        assert got.column("key").to_pylist() == [k]
    after = cluster.tserver_metric_totals(["point_reads_in_memory", "point_reads_handed_off"])
    assert after["point_reads_in_memory"] - before["point_reads_in_memory"] == 3
    assert after["point_reads_handed_off"] == before["point_reads_handed_off"]

    cluster.restart_node(ts.name)
    leader = await tc.wait_leader()
    # Replicas open in the background after a restart; opening reads the files into the cache again.
    await asyncio.to_thread(
        wait_for,
        lambda: cache()["block_cache_usage"] == held["block_cache_usage"],
        20.0,
        "the restarted tserver's block cache to hold the tablet's files again",
    )

    await rpc.call(ts.rpc_address, "TabletServer", "DeleteTablet", {"tablet_id": "tablet-cache"})
    assert cache()["block_cache_usage"] == 0


async def test_point_reads_memory_cannot_answer_run_on_their_own_threads(mini_cluster_factory, rpc: RpcClient) -> None:
    """Without a block cache a flushed row is read from its files: the read is handed to the point-read
    threads (--point-read-threads), not queued with the WAL syncs and write preparation of --io-threads."""
    cluster = mini_cluster_factory(
        num_masters=1, num_tservers=1, tserver_flags=["--block-cache-capacity-mb", "0", "--point-read-threads", "3"]
    )
    ts = cluster.tservers[0]
    tc = TabletClient(rpc, "tablet-reads", SCHEMA, addresses(cluster))
    await tc.create()
    leader = await tc.wait_leader()
    await tc.write(rows(range(0, 2000)), INSERT)
    await rpc.call(leader, "TabletServer", "FlushTablet", {"tablet_id": "tablet-reads"})
    before = cluster.tserver_metric_totals(["point_reads_in_memory", "point_reads_handed_off"])
    for k in (7, 1000, 1999):
        got, _ = await tc.scan(leader, predicates=[{"column": "key", "op": "=", "value": k}])
        assert got.column("key").to_pylist() == [k]
    after = cluster.tserver_metric_totals(["point_reads_in_memory", "point_reads_handed_off"])
    assert after["point_reads_handed_off"] - before["point_reads_handed_off"] == 3
    status, body = cluster.http_get(ts, "/threadz?raw")
    assert status == 200
    groups = {g["group"]: g["threads"] for g in json.loads(body)["groups"]}
    assert 1 <= groups.get("read", 0) <= 3, groups
