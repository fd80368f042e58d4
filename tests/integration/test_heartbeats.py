"""Real processes: tservers register with and heartbeat every master; masters see them live, dead, back."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import pytest

from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.mini_cluster import NodeProcess

pytestmark = pytest.mark.integration

UNRESPONSIVE_MS = 3000


def poll(cluster: MiniCluster, what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (bounded) until ``check()``; on timeout fail with the masters' view of the tservers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    views = {m.name: cluster.http_json(m, "/api/v1/tservers") for m in cluster.masters if m.is_running()}
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; masters see {views}")


def tservers_seen(cluster: MiniCluster, master: NodeProcess) -> dict[str, dict[str, Any]]:
    return {d["uuid"]: d for d in cluster.http_json(master, "/api/v1/tservers")}


def all_live(cluster: MiniCluster, master: NodeProcess) -> bool:
    seen = tservers_seen(cluster, master)
    return all(ts.uuid in seen and seen[ts.uuid]["live"] for ts in cluster.tservers)


async def test_master_tracks_tservers_through_kill_restart_and_its_own_restart(
    mini_cluster_factory: type[MiniCluster],
) -> None:
    cluster = mini_cluster_factory(
        num_masters=1, num_tservers=3, master_flags=["--tserver-unresponsive-timeout-ms", str(UNRESPONSIVE_MS)]
    )
    master = cluster.masters[0]
    poll(cluster, "all 3 tservers live", lambda: all_live(cluster, master), timeout_s=8.0)
    listed = cluster.http_json(master, "/api/v1/tservers")
    assert [d["uuid"] for d in listed] == sorted(ts.uuid for ts in cluster.tservers)
    for ts in cluster.tservers:
        d = tservers_seen(cluster, master)[ts.uuid]
        assert (d["rpc_address"], d["http_address"]) == (ts.rpc_address, ts.http_address)
        assert d["last_heartbeat_age_s"] < 3.0 and d["num_replicas"] == 0
    status = cluster.http_json(master, "/api/v1/status")
    assert (status["num_live_tservers"], status["num_dead_tservers"]) == (3, 0)
    # Start-up's objects are out of the cycle collector's sight (no full-collection pauses over them).
    assert status["gc"]["frozen_objects"] > 10_000
    assert cluster.http_json(cluster.tservers[0], "/api/v1/status")["gc"]["frozen_objects"] > 10_000
    poll(
        cluster,
        "the master leads its catalog and says so in heartbeats",
        lambda: cluster.http_json(cluster.tservers[0], "/api/v1/status")["heartbeat"][0]["is_leader"] is True,
    )
    ts_status = cluster.http_json(cluster.tservers[0], "/api/v1/status")
    [hb] = ts_status["heartbeat"]
    assert hb["address"] == master.rpc_address and hb["registered"] and hb["is_leader"] is True

    client = RpcClient("test")
    try:
        servers = (await client.call(master.rpc_address, "Master", "ListTabletServers", {}))["servers"]
        assert sorted(s["uuid"] for s in servers) == sorted(ts.uuid for ts in cluster.tservers)
    finally:
        await client.close()

    victim = cluster.tservers[1]
    cluster.kill_node(victim)
    poll(
        cluster,
        "the killed tserver shown dead",
        lambda: tservers_seen(cluster, master)[victim.uuid]["live"] is False,
        timeout_s=UNRESPONSIVE_MS / 1000 + 3,
    )
    seen = tservers_seen(cluster, master)
    assert all(seen[ts.uuid]["live"] for ts in cluster.tservers if ts is not victim)
    assert cluster.http_json(master, "/api/v1/status")["num_dead_tservers"] == 1

    cluster.restart_node(victim)
    poll(cluster, "the restarted tserver live again", lambda: all_live(cluster, master), timeout_s=6.0)
    assert len(cluster.http_json(master, "/api/v1/tservers")) == 3  # same uuid: re-registered, not added

    cluster.kill_node(master)  # its registry is in memory only
    cluster.restart_node(master)
    poll(
        cluster,
        "every tserver re-registered with the restarted master",
        lambda: all_live(cluster, master),
        timeout_s=10.0,
    )
    seen = tservers_seen(cluster, master)
    assert {u: (d["rpc_address"], d["http_address"]) for u, d in seen.items()} == {
        ts.uuid: (ts.rpc_address, ts.http_address) for ts in cluster.tservers
    }


def test_every_master_knows_every_tserver(mini_cluster_factory: type[MiniCluster]) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=2)
    for master in cluster.masters:
        poll(
            cluster,
            f"{master.name} seeing both tservers live",
            functools.partial(all_live, cluster, master),
            timeout_s=8.0,
        )
        assert len(tservers_seen(cluster, master)) == 2
    for ts in cluster.tservers:
        heartbeat = cluster.http_json(ts, "/api/v1/status")["heartbeat"]
        assert sorted(h["address"] for h in heartbeat) == sorted(m.rpc_address for m in cluster.masters)
        assert all(h["registered"] and h["consecutive_failures"] == 0 for h in heartbeat)
