"""DDL through the leader master: tables created on the tservers, located, written, read, failed over,
restarted and deleted, with 3 masters and 3 tablet servers in real processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common import types as T
from kudu_async.common.errors import KuduAlreadyPresent, KuduBadStatus, KuduInvalidArgument, KuduNotTheLeader
from kudu_async.common.partition import HashDimension, PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.tablet_client import UPSERT, TabletClient

pytestmark = pytest.mark.integration
SCHEMA = Schema([ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING)], 1)
PSCHEMA = PartitionSchema(SCHEMA, [HashDimension(["key"], 3)], ["key"])


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


async def master_call(cluster: MiniCluster, rpc: RpcClient, method: str, req: dict, timeout_s: float = 30.0) -> dict:
    """Call the leader master, following NOT_THE_LEADER and retrying unavailable masters (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for m in cluster.masters:
            if not m.is_running():
                continue
            try:
                return await rpc.call(m.rpc_address, "Master", method, req, timeout_s=10.0)
            except (KuduNotTheLeader, KuduAlreadyPresent, KuduInvalidArgument) as e:
                if not isinstance(e, KuduNotTheLeader):
                    raise
            except KuduBadStatus:
                pass
        assert time.monotonic() < deadline, f"{method}: no master leader answered in {timeout_s}s"
        await asyncio.sleep(0.1)


async def create_table(cluster: MiniCluster, rpc: RpcClient, name: str) -> str:
    req = {
        "name": name,
        "schema": SCHEMA.to_dict(),
        "partition_schema": PSCHEMA.to_dict(),
        "num_replicas": 3,
        "range_bounds": [[{"key": 0}, {"key": 50_000}], [{"key": 50_000}, {"key": 100_000}]],
    }
    return (await master_call(cluster, rpc, "CreateTable", req))["table_id"]


async def wait_created(cluster: MiniCluster, rpc: RpcClient, name: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (await master_call(cluster, rpc, "IsCreateTableDone", {"name": name}))["done"]:
        assert time.monotonic() < deadline, f"table {name} never finished creating"
        await asyncio.sleep(0.2)


async def write_and_read(cluster: MiniCluster, rpc: RpcClient, name: str, keys: list[int]) -> int:
    """A minimal client: route rows by partition key to each tablet's leader, then scan every tablet."""
    locs = (await master_call(cluster, rpc, "GetTableLocations", {"name": name}))["tablets"]
    batch = pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.int64()), pa.array([f"v{k}" for k in keys])], schema=SCHEMA.to_arrow()
    )
    pkeys = PSCHEMA.partition_keys(batch).to_pylist()
    clients = {}
    for loc in locs:
        p = loc["partition"]
        idx = [
            i
            for i, k in enumerate(pkeys)
            if k >= p["partition_key_start"] and (not p["partition_key_end"] or k < p["partition_key_end"])
        ]
        tc = TabletClient(rpc, loc["tablet_id"], SCHEMA, {r["uuid"]: r["rpc_address"] for r in loc["replicas"]})
        clients[loc["tablet_id"]] = tc
        if idx:
            await tc.write(batch.take(pa.array(idx)), UPSERT)
    total = 0
    for tc in clients.values():
        table, _ = await tc.scan()
        total += table.num_rows
    return total


async def test_create_locate_write_read_restart_and_delete(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3)
    t0 = time.monotonic()
    await create_table(cluster, rpc, "metrics")
    await wait_created(cluster, rpc, "metrics")
    print(f"\nCreateTable of 6 tablets x 3 replicas done in {time.monotonic() - t0:.2f}s")
    with pytest.raises(KuduAlreadyPresent):
        await create_table(cluster, rpc, "metrics")
    locs = (await master_call(cluster, rpc, "GetTableLocations", {"name": "metrics"}))["tablets"]
    assert len(locs) == 6
    for loc in locs:
        roles = sorted(r["role"] for r in loc["replicas"])
        assert roles == ["FOLLOWER", "FOLLOWER", "LEADER"], loc
    per_server: dict[str, int] = {}
    for loc in locs:
        for r in loc["replicas"]:
            per_server[r["uuid"]] = per_server.get(r["uuid"], 0) + 1
    assert sorted(per_server.values()) == [6, 6, 6]  # placement spreads replicas
    keys = list(range(0, 100_000, 97))
    assert await write_and_read(cluster, rpc, "metrics", keys) == len(keys)
    listed = await master_call(cluster, rpc, "ListTables", {})
    assert [t["name"] for t in listed["tables"]] == ["metrics"]
    schema = await master_call(cluster, rpc, "GetTableSchema", {"name": "metrics"})
    assert Schema.from_dict(schema["schema"]) == SCHEMA and schema["create_table_done"]
    leader_http = cluster.http_json(cluster.masters[0].name, "/api/v1/catalog/tables")
    assert [t["name"] for t in leader_http["tables"]] == ["metrics"]
    # Every master restarts: the catalog survives; locations come back from the tservers' reports.
    for m in cluster.masters:
        cluster.kill_node(m.name)
    for m in cluster.masters:
        cluster.restart_node(m.name)
    deadline = time.monotonic() + 60
    while True:
        locs = (await master_call(cluster, rpc, "GetTableLocations", {"name": "metrics"}))["tablets"]
        if len(locs) == 6 and all(any(r["role"] == "LEADER" for r in loc["replicas"]) for loc in locs):
            break
        assert time.monotonic() < deadline, locs
        await asyncio.sleep(0.2)
    assert await write_and_read(cluster, rpc, "metrics", keys) == len(keys)
    # DeleteTable: the tablets disappear from every tserver.
    await master_call(cluster, rpc, "DeleteTable", {"name": "metrics"})
    deadline = time.monotonic() + 60
    while True:
        held = [
            len((await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {}))["tablets"])
            for ts in cluster.tservers
        ]
        if held == [0, 0, 0]:
            break
        assert time.monotonic() < deadline, held
        await asyncio.sleep(0.2)
    assert (await master_call(cluster, rpc, "ListTables", {}))["tables"] == []


async def test_leader_master_killed_during_create_table_next_leader_finishes(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3)
    await create_table(cluster, rpc, "warm-up")  # answered only once a leader leads the catalog
    info = await master_call(cluster, rpc, "ConnectToMaster", {})
    leader = next(m for m in cluster.masters if m.uuid == info["leader_uuid"])
    await create_table(cluster, rpc, "half-made")  # acknowledged: in the catalog, tablets not made yet
    cluster.kill_node(leader.name)
    await wait_created(cluster, rpc, "half-made")
    assert await write_and_read(cluster, rpc, "half-made", [1, 2, 3, 60_000]) == 4


async def test_bad_ddl_requests_are_named(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=1)
    base: dict[str, Any] = {"name": "t", "schema": SCHEMA.to_dict(), "partition_schema": PSCHEMA.to_dict()}
    cases = [
        ({**base, "num_replicas": 3}, "live tablet servers"),
        ({**base, "num_replicas": 2}, "odd"),
        ({**base, "name": ""}, "name"),
        ({**base, "partition_schema": {"range_columns": ["val"]}}, "val"),
    ]
    for req, msg in cases:
        with pytest.raises(KuduInvalidArgument, match=msg):
            await master_call(cluster, rpc, "CreateTable", req)
    await master_call(cluster, rpc, "CreateTable", {**base, "num_replicas": 1})
    await wait_created(cluster, rpc, "t")


async def test_alter_table_survives_leader_master_kill_and_reaches_every_tablet(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3)
    await create_table(cluster, rpc, "evolving")
    await wait_created(cluster, rpc, "evolving")
    assert await write_and_read(cluster, rpc, "evolving", list(range(0, 100_000, 1000))) == 100
    info = await master_call(cluster, rpc, "ConnectToMaster", {})
    leader = next(m for m in cluster.masters if m.uuid == info["leader_uuid"])
    steps = [
        {"type": "ADD_COLUMN", "column": {"name": "extra", "type": "int32", "default": 5}},
        {"type": "RENAME_COLUMN", "old_name": "val", "new_name": "label"},
        {"type": "ADD_RANGE_PARTITION", "lower": {"key": 100_000}, "upper": {"key": 150_000}},
        {"type": "DROP_RANGE_PARTITION", "lower": {"key": 0}, "upper": {"key": 50_000}},
    ]
    reply = await master_call(
        cluster, rpc, "AlterTable", {"name": "evolving", "alter_schema_steps": steps, "new_name": "evolved"}
    )
    assert reply["schema_version"] == 1
    cluster.kill_node(leader.name)  # the next leader pushes the schema and makes/drops the range tablets
    deadline = time.monotonic() + 90
    while not (await master_call(cluster, rpc, "IsAlterTableDone", {"name": "evolved"}))["done"]:
        assert time.monotonic() < deadline, "AlterTable never finished after the leader master died"
        await asyncio.sleep(0.2)
    schema = await master_call(cluster, rpc, "GetTableSchema", {"name": "evolved"})
    new = Schema.from_dict(schema["schema"])
    assert schema["schema_version"] == 1 and new.names == ["key", "label", "extra"]
    locs = (await master_call(cluster, rpc, "GetTableLocations", {"name": "evolved"}))["tablets"]
    ranges = sorted({(loc["partition"]["range_key_start"], loc["partition"]["range_key_end"]) for loc in locs})
    assert len(locs) == 6 and len(ranges) == 2  # [50k, 100k) and the new [100k, 150k), 3 buckets each
    for loc in locs:  # every tablet's leader reports the new schema version
        tc = TabletClient(rpc, loc["tablet_id"], new, {r["uuid"]: r["rpc_address"] for r in loc["replicas"]})
        tc.schema_version = 1
        table, _ = await tc.scan()
        assert table.column_names == ["key", "label", "extra"]
        assert all(v == 5 for v in table.column("extra").to_pylist())
