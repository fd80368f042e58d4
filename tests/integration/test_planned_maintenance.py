"""Planned maintenance on a real cluster: a tserver in maintenance mode keeps its replicas however long it
is down (the state survives a master restart), and leaving maintenance brings failure handling back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from tests.integration.kudu_cli import create_kv_table, kudu_json, kudu_tool
from tests.integration.test_rereplication import locations, master_call, wait_rereplicated

pytestmark = pytest.mark.integration
FAILED_AFTER_S = 2
MASTER_FLAGS = [
    "--follower-unavailable-considered-failed-sec",
    str(FAILED_AFTER_S),
    "--tserver-unresponsive-timeout-ms",
    "1000",
]
TSERVER_FLAGS = ["--heartbeat-interval-ms", "300"]


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


def states(cluster: MiniCluster) -> dict[str, str]:
    return {t["uuid"]: t["state"] for t in kudu_json(cluster, "tserver", "list")}


async def members(cluster: MiniCluster, rpc: RpcClient, name: str) -> list[set[str]]:
    return [{r["uuid"] for r in loc["replicas"]} for loc in await locations(cluster, rpc, name)]


async def test_maintenance_mode_suppresses_re_replication_until_it_is_exited(
    mini_cluster_factory: Any, rpc: RpcClient
) -> None:
    cluster = mini_cluster_factory(
        num_masters=1, num_tservers=4, master_flags=MASTER_FLAGS, tserver_flags=TSERVER_FLAGS
    )
    create_kv_table(cluster, "maint", buckets=3, rows=300)
    before = await members(cluster, rpc, "maint")
    victim = max(cluster.tservers, key=lambda ts: (sum(ts.uuid in m for m in before), ts.name))
    assert any(victim.uuid in m for m in before)

    out = kudu_tool(cluster, "tserver", "state", "enter_maintenance", victim.uuid).stdout
    assert "MAINTENANCE_MODE" in out
    again = kudu_tool(cluster, "tserver", "state", "enter_maintenance", victim.uuid).stdout
    assert "(unchanged)" in again
    assert states(cluster)[victim.uuid] == "MAINTENANCE_MODE"
    assert "MAINTENANCE_MODE" in kudu_tool(cluster, "tserver", "list", "-columns=uuid,state").stdout
    assert {d["uuid"]: d["state"] for d in cluster.http_json(cluster.masters[0], "/tablet-servers")}[
        victim.uuid
    ] == "MAINTENANCE_MODE"
    unknown = kudu_tool(cluster, "tserver", "state", "enter_maintenance", "no-such-tserver", ok=False)
    assert unknown.returncode == 1 and "has not registered" in unknown.stderr

    cluster.kill_node(victim)
    # The state is in the replicated catalog: a restarted master still honours it.
    cluster.restart_node(cluster.masters[0])
    await master_call(cluster, rpc, "ListTables", {})
    deadline = time.monotonic() + 5 * FAILED_AFTER_S + 3
    while time.monotonic() < deadline:
        assert await members(cluster, rpc, "maint") == before, "a replica of the tserver in maintenance was replaced"
        await asyncio.sleep(0.5)

    out = kudu_tool(cluster, "tserver", "state", "exit_maintenance", victim.uuid).stdout
    assert f"tserver {victim.uuid}: NONE" in out and "(unchanged)" not in out
    await wait_rereplicated(cluster, rpc, "maint", victim.uuid, timeout_s=45)
