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


async def wait_master_leader(cluster: MiniCluster, rpc: RpcClient, timeout_s: float = 20.0,
                             exclude: tuple[str, ...] = ()) -> dict:
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
        assert cluster.http_json(m.name, "/api/v1/leader")["leader_uuid"] == leader["uuid"]
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
    r = subprocess.run([sys.executable, "-m", "kudu_async.server.main", "--role", "master",
                        "--data-dir", str(tmp_path / "m"), "--rpc-bind", "127.0.0.1:0", "--http-bind", "127.0.0.1:0",
                        "--master-addresses", "127.0.0.1:7051,127.0.0.1:7151"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "1, 3 or 5" in r.stderr
