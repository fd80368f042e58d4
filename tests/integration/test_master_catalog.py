"""The masters' replicated sys catalog: leadership, failover, and what clients and tservers see."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest

from kudu_async.common.errors import KuduBadStatus
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


async def wait_master_leader(
    cluster: MiniCluster, rpc: RpcClient, timeout_s: float = 20.0, exclude: tuple[str, ...] = ()
) -> dict:
    """Poll every live master until one says it leads and every live master names that one."""
    deadline = time.monotonic() + timeout_s
    last: list = []
    while time.monotonic() < deadline:
        answers = []
        for m in cluster.masters:
            if not m.is_running() or m.name in exclude:
                continue
            try:
                answers.append(await rpc.call(m.rpc_address, "Master", "ConnectToMaster", {}, timeout_s=2.0))
            except KuduBadStatus as e:
                answers.append({"error": str(e)})
        leaders = [a for a in answers if a.get("leader")]
        if len(leaders) == 1 and all(a.get("leader_uuid") == leaders[0]["uuid"] for a in answers):
            return leaders[0]
        last = answers
        await asyncio.sleep(0.1)
    raise AssertionError(f"no agreed master leader: {last}")


async def test_three_masters_elect_one_catalog_leader_and_fail_over(mini_cluster_factory, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=1)
    started = time.monotonic()
    leader = await wait_master_leader(cluster, rpc)
    print(f"\ncatalog leader agreed {time.monotonic() - started:.2f}s after the cluster was healthy")
    masters = cluster.http_json(cluster.masters[0].name, "/api/v1/masters")["masters"]
    assert sorted(m["role"] for m in masters) == ["FOLLOWER", "FOLLOWER", "LEADER"]
    assert {m["rpc_address"] for m in masters} == {m.rpc_address for m in cluster.masters}
    for m in cluster.masters:
        assert cluster.http_json(m.name, "/api/v1/status")["leader_uuid"] == leader["uuid"]
    # Only the leader processes the tserver's tablet reports; followers say so in their answers.
    victim = next(m for m in cluster.masters if m.uuid == leader["uuid"])
    cluster.kill_node(victim.name)
    t0 = time.monotonic()
    new = await wait_master_leader(cluster, rpc, exclude=(victim.name,))
    print(f"master failover: new catalog leader {time.monotonic() - t0:.2f}s after kill -9")
    assert new["uuid"] != leader["uuid"]
    cluster.restart_node(victim.name)
    again = await wait_master_leader(cluster, rpc)
    assert again["uuid"] in {m.uuid for m in cluster.masters}


def test_even_master_count_is_refused(tmp_path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kudu_async.server.main",
            "--role",
            "master",
            "--data-dir",
            str(tmp_path / "m"),
            "--rpc-bind",
            "127.0.0.1:0",
            "--http-bind",
            "127.0.0.1:0",
            "--master-addresses",
            "127.0.0.1:7051,127.0.0.1:7151",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "1, 3 or 5" in r.stderr


async def test_a_deposed_leader_does_not_answer_catalog_reads_from_its_stale_catalog(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    """The leader master is stopped (SIGSTOP), the others elect a new leader and a table is renamed there.
    A lookup of the old name sent to the stopped master, which still believes it leads, is answered when
    it resumes: it must not return the table under its old name. Its lease has lapsed (its ticks fell
    behind), so it confirms leadership with a heartbeat round first, learns of the new term and refuses."""
    cluster = mini_cluster_factory(num_masters=3, num_tservers=1)
    leader = await wait_master_leader(cluster, rpc)
    old = next(m for m in cluster.masters if m.uuid == leader["uuid"])
    schema = {"columns": [{"name": "k", "type": "int64", "nullable": False}], "num_key_columns": 1}
    await rpc.call(
        old.rpc_address,
        "Master",
        "CreateTable",
        {"name": "before", "schema": schema, "num_replicas": 1},
        timeout_s=30.0,
    )
    for _ in range(60):  # the rename below needs the table created (its tablet running)
        if (
            await rpc.call(
                old.rpc_address, "Master", "IsCreateTableDone", {"name": "before", "wait_ms": 1000}, timeout_s=5.0
            )
        )["done"]:
            break
    got = await rpc.call(old.rpc_address, "Master", "GetTableSchema", {"name": "before"}, timeout_s=5.0)
    assert got["name"] == "before" and got["create_table_done"]
    cluster.pause_node(old.name)
    try:
        new = await wait_master_leader(cluster, rpc, exclude=(old.name,))
        new_addr = next(m.rpc_address for m in cluster.masters if m.uuid == new["uuid"])
        await rpc.call(new_addr, "Master", "AlterTable", {"name": "before", "new_name": "after"}, timeout_s=30.0)
        assert (await rpc.call(new_addr, "Master", "GetTableSchema", {"name": "after"}, timeout_s=5.0))[
            "name"
        ] == "after"
        stale = asyncio.ensure_future(
            rpc.call(old.rpc_address, "Master", "GetTableSchema", {"name": "before"}, timeout_s=20.0)
        )
        await asyncio.sleep(0.5)  # the request waits at the stopped master
    finally:
        cluster.resume_node(old.name)
    try:
        answer = await stale
    except KuduBadStatus as e:
        assert e.code in ("NOT_THE_LEADER", "NOT_FOUND", "SERVICE_UNAVAILABLE"), e
    else:
        raise AssertionError(f"a deposed leader answered from its stale catalog: {answer}")
