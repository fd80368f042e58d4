"""Master-driven re-replication (Kudu's 3-4-3 scheme) with real processes: 1 master + 4 tservers, one
tserver killed for longer than --follower-unavailable-considered-failed-sec; every tablet gets back to 3
live voters with matching checksums, and the dead tserver's replicas are tombstoned when it returns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common import types as T
from kudu_async.common.errors import KuduBadStatus, KuduNotTheLeader
from kudu_async.common.partition import HashDimension, PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.tablet_client import UPSERT, TabletClient

pytestmark = pytest.mark.integration
SCHEMA = Schema([ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING)], 1)
PSCHEMA = PartitionSchema(SCHEMA, [HashDimension(["key"], 4)], [])
FAILED_AFTER_S = 3
MASTER_FLAGS = [
    "--follower-unavailable-considered-failed-sec",
    str(FAILED_AFTER_S),
    "--tserver-unresponsive-timeout-ms",
    "1500",
]
TSERVER_FLAGS = ["--heartbeat-interval-ms", "300"]


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


async def master_call(cluster: MiniCluster, rpc: RpcClient, method: str, req: dict, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await rpc.call(cluster.masters[0].rpc_address, "Master", method, req, timeout_s=10.0)
        except KuduNotTheLeader:
            pass
        assert time.monotonic() < deadline, f"{method}: the master never led within {timeout_s}s"
        await asyncio.sleep(0.1)


async def locations(cluster: MiniCluster, rpc: RpcClient, name: str) -> list[dict[str, Any]]:
    return (await master_call(cluster, rpc, "GetTableLocations", {"name": name}))["tablets"]


async def create_and_fill(cluster: MiniCluster, rpc: RpcClient, name: str, keys: list[int]) -> list[dict]:
    req = {"name": name, "schema": SCHEMA.to_dict(), "partition_schema": PSCHEMA.to_dict(), "num_replicas": 3}
    await master_call(cluster, rpc, "CreateTable", req)
    deadline = time.monotonic() + 60
    while not (await master_call(cluster, rpc, "IsCreateTableDone", {"name": name}))["done"]:
        assert time.monotonic() < deadline, "table never finished creating"
        await asyncio.sleep(0.2)
    locs = await locations(cluster, rpc, name)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.int64()), pa.array([f"v{k}" for k in keys])], schema=SCHEMA.to_arrow()
    )
    pkeys = PSCHEMA.partition_keys(batch).to_pylist()
    for loc in locs:
        p = loc["partition"]
        idx = [
            i
            for i, k in enumerate(pkeys)
            if k >= p["partition_key_start"] and (not p["partition_key_end"] or k < p["partition_key_end"])
        ]
        tc = TabletClient(rpc, loc["tablet_id"], SCHEMA, {r["uuid"]: r["rpc_address"] for r in loc["replicas"]})
        for lo in range(0, len(idx), 1000):
            await tc.write(batch.take(pa.array(idx[lo : lo + 1000])), UPSERT)
    return locs


async def voters_of(rpc: RpcClient, leader_address: str, tablet_id: str) -> list[str] | None:
    """The voters as the leader's own Raft state has them, or None if it does not lead (any more)."""
    try:
        st = await rpc.call(leader_address, "Consensus", "GetState", {"group": tablet_id}, timeout_s=2.0)
    except KuduBadStatus:
        return None
    if st.get("role") != "LEADER":
        return None
    return sorted(p["uuid"] for p in st["peers"] if p["member_type"] == "VOTER")


async def wait_rereplicated(
    cluster: MiniCluster, rpc: RpcClient, name: str, dead: str, timeout_s: float
) -> list[dict[str, Any]]:
    """Until every tablet has 3 voters, none on ``dead``, no learner, all live, and a leader that agrees."""
    live = {ts.uuid for ts in cluster.tservers if ts.is_running()}
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        locs = await locations(cluster, rpc, name)
        ok = True
        for loc in locs:
            reps = loc["replicas"]
            roles = sorted(r["role"] for r in reps)
            uuids = sorted(r["uuid"] for r in reps)
            if roles != ["FOLLOWER", "FOLLOWER", "LEADER"] or not set(uuids) <= live or dead in uuids:
                ok, last = False, (loc["tablet_id"], [(r["uuid"][:8], r["role"]) for r in reps])
                break
            leader = next(r for r in reps if r["role"] == "LEADER")
            if await voters_of(rpc, leader["rpc_address"], loc["tablet_id"]) != uuids:
                ok, last = False, (loc["tablet_id"], "the leader's own config differs")
                break
        if ok:
            return locs
        await asyncio.sleep(0.1)
    raise AssertionError(f"not re-replicated within {timeout_s}s; last pending: {last}")


async def checksums_match(rpc: RpcClient, locs: list[dict[str, Any]], timeout_s: float = 30.0) -> int:
    """Each tablet's replicas agree at one snapshot; returns the total row count."""
    total = 0
    for loc in locs:
        addrs = {r["uuid"]: r["rpc_address"] for r in loc["replicas"]}
        tc = TabletClient(rpc, loc["tablet_id"], SCHEMA, addrs)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                leader = await tc.wait_leader(5.0)
                first = await tc.checksum(leader)
                sums = [await tc.checksum(a, first["snapshot_ts"]) for a in addrs.values()]
                if all((s["rows"], s["checksum"]) == (first["rows"], first["checksum"]) for s in sums):
                    total += first["rows"]
                    break
                last: Any = sums
            except KuduBadStatus as e:
                last = str(e)
            assert time.monotonic() < deadline, f"tablet {loc['tablet_id']}: checksums never matched: {last}"
            await asyncio.sleep(0.2)
    return total


async def test_dead_tserver_replicas_are_re_replicated_and_tombstoned_when_it_returns(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    cluster = mini_cluster_factory(
        num_masters=1, num_tservers=4, master_flags=MASTER_FLAGS, tserver_flags=TSERVER_FLAGS
    )
    keys = list(range(0, 20_000, 3))
    locs = await create_and_fill(cluster, rpc, "rerep", keys)
    assert len(locs) == 4
    assert await checksums_match(rpc, locs) == len(keys)
    held = {ts.uuid: sum(1 for loc in locs for r in loc["replicas"] if r["uuid"] == ts.uuid) for ts in cluster.tservers}
    victim = max(cluster.tservers, key=lambda ts: (held[ts.uuid], ts.name))
    affected = sorted(loc["tablet_id"] for loc in locs if any(r["uuid"] == victim.uuid for r in loc["replicas"]))
    assert affected, held

    killed_at = time.monotonic()
    cluster.kill_node(victim)
    locs = await wait_rereplicated(cluster, rpc, "rerep", victim.uuid, timeout_s=45)
    took = time.monotonic() - killed_at
    print(
        f"\nre-replication of {len(affected)} tablets (replicas of killed {victim.name}) took {took:.1f}s "
        f"after the kill ({took - FAILED_AFTER_S:.1f}s after the {FAILED_AFTER_S}s failure timeout)"
    )
    assert await checksums_match(rpc, locs) == len(keys)
    placement = {u: sum(1 for loc in locs for r in loc["replicas"] if r["uuid"] == u) for u in held if u != victim.uuid}
    assert sum(placement.values()) == 12 and max(placement.values()) - min(placement.values()) <= 1, placement

    # The dead server returns holding replicas that left their configs: the master tombstones them, and
    # it does not rejoin any config.
    back_at = time.monotonic()
    cluster.restart_node(victim)
    deadline = time.monotonic() + 30
    while True:
        listed = (await rpc.call(victim.rpc_address, "TabletServer", "ListTablets", {}))["tablets"]
        states = {t["tablet_id"]: t["state"] for t in listed}
        if sorted(states) == affected and set(states.values()) == {"TOMBSTONED"}:
            break
        assert time.monotonic() < deadline, f"stale replicas never tombstoned: {states}"
        await asyncio.sleep(0.2)
    print(f"stale replicas on the returned {victim.name} tombstoned {time.monotonic() - back_at:.1f}s after restart")
    after = await locations(cluster, rpc, "rerep")
    assert all(victim.uuid not in {r["uuid"] for r in loc["replicas"]} and len(loc["replicas"]) == 3 for loc in after)
    assert await checksums_match(rpc, after) == len(keys)


async def test_paused_tserver_resumed_mid_re_replication_ends_with_three_replicas(
    mini_cluster_factory, rpc: RpcClient
) -> None:
    """SIGSTOP a tserver past the failure timeout and SIGCONT it as soon as a replacement learner appears:
    the learner is still promoted, the tablet briefly has 4 healthy voters and is trimmed back to 3 (the
    voter being replaced goes), and the resumed server's replicas outside the configs are tombstoned."""
    cluster = mini_cluster_factory(
        num_masters=1, num_tservers=4, master_flags=MASTER_FLAGS, tserver_flags=TSERVER_FLAGS
    )
    keys = list(range(0, 9_000, 3))
    locs = await create_and_fill(cluster, rpc, "pause", keys)
    victim = max(
        cluster.tservers,
        key=lambda ts: (sum(1 for loc in locs for r in loc["replicas"] if r["uuid"] == ts.uuid), ts.name),
    )
    cluster.pause_node(victim)
    deadline = time.monotonic() + 30
    while not any(r["role"] == "LEARNER" for loc in await locations(cluster, rpc, "pause") for r in loc["replicas"]):
        assert time.monotonic() < deadline, "no replacement learner was ever added"
        await asyncio.sleep(0.05)
    cluster.resume_node(victim)
    deadline = time.monotonic() + 45
    while True:
        locs = await locations(cluster, rpc, "pause")
        if all(sorted(r["role"] for r in loc["replicas"]) == ["FOLLOWER", "FOLLOWER", "LEADER"] for loc in locs):
            voters = [
                await voters_of(
                    rpc, next(r["rpc_address"] for r in loc["replicas"] if r["role"] == "LEADER"), loc["tablet_id"]
                )
                for loc in locs
            ]
            if all(v == sorted(r["uuid"] for r in loc["replicas"]) for v, loc in zip(voters, locs, strict=True)):
                break
        assert time.monotonic() < deadline, f"never back to 3 voters: {locs}"
        await asyncio.sleep(0.1)
    assert await checksums_match(rpc, locs) == len(keys)
    member_of = {loc["tablet_id"] for loc in locs if victim.uuid in {r["uuid"] for r in loc["replicas"]}}
    deadline = time.monotonic() + 30
    while True:
        listed = (await rpc.call(victim.rpc_address, "TabletServer", "ListTablets", {}))["tablets"]
        stale = {t["tablet_id"]: t["state"] for t in listed if t["tablet_id"] not in member_of}
        if all(s == "TOMBSTONED" for s in stale.values()):
            break
        assert time.monotonic() < deadline, f"replicas outside their configs never tombstoned: {stale}"
        await asyncio.sleep(0.2)
    trims = cluster.masters[0].log_path.read_text().count("voters for replication factor")
    print(
        f"\n{victim.name} paused then resumed: {len(stale)} of its replicas replaced and tombstoned, "
        f"{len(member_of)} kept; {trims} config(s) trimmed from 4 voters back to 3"
    )
