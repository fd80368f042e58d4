"""DDL a client may retry: a request id makes CreateTable / AlterTable / DeleteTable exactly-once across a
leader master's death, with 3 masters and 3 tablet servers in real processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from kudu_async.common import types as T
from kudu_async.common.errors import KuduAlreadyPresent, KuduBadStatus, KuduNotFound
from kudu_async.common.partition import HashDimension, PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster, NodeProcess
from kudu_async.testing.master_client import LeaderMasterClient

pytestmark = pytest.mark.integration
SCHEMA = Schema([ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING)], 1)
PSCHEMA = PartitionSchema(SCHEMA, [HashDimension(["key"], 2)], ["key"])
CREATE = {"schema": SCHEMA.to_dict(), "partition_schema": PSCHEMA.to_dict(), "num_replicas": 3}


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


def masters_client(cluster: MiniCluster, rpc: RpcClient) -> LeaderMasterClient:
    return LeaderMasterClient(rpc, lambda: [m.rpc_address for m in cluster.masters if m.is_running()])


async def kill_leader(cluster: MiniCluster, rpc: RpcClient, timeout_s: float = 30.0) -> NodeProcess:
    """kill -9 the master that says it leads the catalog (waiting for one to say so)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in cluster.masters:
            if not m.is_running():
                continue
            try:
                info = await rpc.call(m.rpc_address, "Master", "ConnectToMaster", {}, timeout_s=2.0)
            except KuduBadStatus:
                continue
            if info.get("leader"):
                cluster.kill_node(m)
                return m
        await asyncio.sleep(0.1)
    raise AssertionError(f"no leader master within {timeout_s}s")


async def remembered_everywhere(cluster: MiniCluster, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        counts = [cluster.http_json(m, "/api/v1/status")["ddl_request_ids_remembered"] for m in cluster.masters]
        if counts == [n] * len(cluster.masters):
            return
        assert time.monotonic() < deadline, f"request ids remembered by each master: {counts}, expected {n}"
        await asyncio.sleep(0.2)


async def test_ddl_retried_on_the_next_leader_is_answered_as_first_and_applied_once(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3)
    client = masters_client(cluster, rpc)
    # CreateTable: acknowledged, the leader dies, the retry reaches the next leader.
    create = {"name": "t", **CREATE, "request_id": "app:1"}
    created = await client.call("CreateTable", create)
    await client.wait_done("IsCreateTableDone", {"table_id": created["table_id"]})
    dead = await kill_leader(cluster, rpc)
    assert await client.call("CreateTable", create) == created
    with pytest.raises(KuduAlreadyPresent):  # what a retry without a request id got, and still gets
        await client.call("CreateTable", {**create, "request_id": "app:other"})
    cluster.restart_node(dead)
    # AlterTable adding a column, then a rename: each retried after a leader's death.
    add = {
        "name": "t",
        "request_id": "app:2",
        "alter_schema_steps": [{"type": "ADD_COLUMN", "column": {"name": "extra", "type": "int32"}}],
    }
    added = await client.call("AlterTable", add)
    assert added == {"table_id": created["table_id"], "schema_version": 1}
    cluster.restart_node(await kill_leader(cluster, rpc))
    assert await client.call("AlterTable", add) == added
    rename = {"name": "t", "new_name": "u", "request_id": "app:3"}
    renamed = await client.call("AlterTable", rename)
    cluster.restart_node(await kill_leader(cluster, rpc))
    assert await client.call("AlterTable", rename) == renamed  # not NOT_FOUND for "t"
    schema = await client.call("GetTableSchema", {"name": "u"})
    assert [c["name"] for c in schema["schema"]["columns"]] == ["key", "val", "extra"]
    assert schema["schema_version"] == 1 and schema["table_id"] == created["table_id"]
    # DeleteTable, retried after every master was killed and restarted (the ids live in the catalog).
    delete = {"name": "u", "request_id": "app:4"}
    deleted = await client.call("DeleteTable", delete)
    for m in cluster.masters:
        cluster.kill_node(m)
    for m in cluster.masters:
        cluster.restart_node(m)
    assert await client.call("DeleteTable", delete, timeout_s=60) == deleted
    assert await client.call("CreateTable", create) == created  # the first request, still remembered
    assert (await client.call("ListTables", {}))["tables"] == []
    with pytest.raises(KuduNotFound):
        await client.call("DeleteTable", {**delete, "request_id": "app:5"})
    await remembered_everywhere(cluster, 4)  # app:1 to app:4; refused requests leave nothing


async def test_a_create_whose_reply_never_came_is_resolved_by_its_retry(mini_cluster_factory, rpc: RpcClient) -> None:
    """The client gives up on the reply (a deadline of a few ms) while the leader may already have proposed
    the create, which then commits unanswered; the leader dies. Whether or not the first attempt committed,
    its retry under the same request id leaves exactly one table and names it."""
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3)
    client = masters_client(cluster, rpc)
    await client.call("ListTables", {})
    leader = client.leader  # the last master that answered: the leader
    assert leader is not None
    unanswered_but_applied = 0
    names = []
    for i in range(30):  # deadlines of 1 to 30 ms: some end before the proposal, some after, some not at all
        name = f"t{i}"
        names.append(name)
        try:
            await rpc.call(
                leader,
                "Master",
                "CreateTable",
                {"name": name, **CREATE, "request_id": f"app:{i}"},
                timeout_s=(i + 1) / 1000.0,
            )
            continue
        except KuduBadStatus as e:
            assert e.code in ("TIMED_OUT", "NETWORK_ERROR"), e
        await asyncio.sleep(0.2)
        listed = {t["name"] for t in (await client.call("ListTables", {}))["tables"]}
        unanswered_but_applied += name in listed
        if unanswered_but_applied >= 2:
            break
    await kill_leader(cluster, rpc)
    ids = {
        n: await client.call("CreateTable", {"name": n, **CREATE, "request_id": f"app:{i}"})
        for i, n in enumerate(names)
    }
    tables = (await client.call("ListTables", {}))["tables"]
    assert sorted((t["name"], t["table_id"]) for t in tables) == sorted((n, r["table_id"]) for n, r in ids.items())
    print(f"\n{len(names)} creates sent with a short deadline, {unanswered_but_applied} applied unanswered")
    assert unanswered_but_applied >= 1, "no create was applied after its caller gave up: the case was not hit"
