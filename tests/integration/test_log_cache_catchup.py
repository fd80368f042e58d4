"""A follower stopped (SIGSTOP) while its leader takes several times the log cache's worth of writes
catches up from entries the leader reads back from its WAL, with no tablet copy, and serves every row."""

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
PSCHEMA = PartitionSchema(SCHEMA, [HashDimension(["key"], 2)], [])
CACHE_MB = 1
VALUE_BYTES = 2_000  # incompressible enough that the WAL stays about as big as the rows
# 48 MB, 24 MB per tablet: more than the leader pipelines to a peer before it waits for acks (16 MiB
# in flight), so the rest can only come from the WAL.
ROWS = 24_000


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


async def state(rpc: RpcClient, address: str, tablet_id: str) -> dict[str, Any]:
    st: dict[str, Any] = await rpc.call(address, "Consensus", "GetState", {"group": tablet_id}, timeout_s=5.0)
    return st


def rows(keys: list[int]) -> pa.RecordBatch:
    # Distinct per row (the key in hex, repeated) so no codec shrinks the log below the cache limit.
    vals = [(f"{k * 2654435761 % (1 << 32):08x}" * (VALUE_BYTES // 8)) for k in keys]
    return pa.RecordBatch.from_arrays([pa.array(keys, pa.int64()), pa.array(vals)], schema=SCHEMA.to_arrow())


async def test_paused_follower_catches_up_from_the_wal_without_a_tablet_copy(
    mini_cluster_factory: Any, rpc: RpcClient
) -> None:
    cluster: MiniCluster = mini_cluster_factory(
        num_masters=1,
        num_tservers=3,
        tserver_flags=["--log-cache-size-limit-mb", str(CACHE_MB), "--log-compression-codec", "NONE"],
    )
    req = {"name": "lc", "schema": SCHEMA.to_dict(), "partition_schema": PSCHEMA.to_dict(), "num_replicas": 3}
    await master_call(cluster, rpc, "CreateTable", req)
    deadline = time.monotonic() + 60
    while not (await master_call(cluster, rpc, "IsCreateTableDone", {"name": "lc"}))["done"]:
        assert time.monotonic() < deadline, "table never finished creating"
        await asyncio.sleep(0.2)
    locs = (await master_call(cluster, rpc, "GetTableLocations", {"name": "lc"}))["tablets"]
    clients = [
        TabletClient(rpc, loc["tablet_id"], SCHEMA, {r["uuid"]: r["rpc_address"] for r in loc["replicas"]})
        for loc in locs
    ]
    leaders = {await tc.wait_leader(10.0) for tc in clients}
    victim = next(ts for ts in cluster.tservers if ts.rpc_address not in leaders)  # follows every tablet

    keys = list(range(ROWS))
    batch = rows(keys)
    pkeys = PSCHEMA.partition_keys(batch).to_pylist()
    per_tablet: list[list[int]] = []
    for loc in locs:
        p = loc["partition"]
        per_tablet.append(
            [
                i
                for i, k in enumerate(pkeys)
                if k >= p["partition_key_start"] and (not p["partition_key_end"] or k < p["partition_key_end"])
            ]
        )
    # A first slice with everyone up, then the rest with the victim stopped.
    first = ROWS // 10
    for tc, idx in zip(clients, per_tablet, strict=True):
        part = [i for i in idx if i < first]
        await tc.write(batch.take(pa.array(part)), UPSERT)
    cluster.pause_node(victim)
    try:
        for tc, idx in zip(clients, per_tablet, strict=True):
            rest = [i for i in idx if i >= first]
            for lo in range(0, len(rest), 250):
                await tc.write(batch.take(pa.array(rest[lo : lo + 250])), UPSERT)
        for loc, tc in zip(locs, clients, strict=True):
            st = await state(rpc, await tc.wait_leader(5.0), loc["tablet_id"])
            # The leader holds what its cache allows, not what the stopped follower still needs.
            assert st["log_cache_bytes"] <= CACHE_MB << 20, st
            behind = next(p for p in st["peers"] if p["uuid"] == victim.uuid)
            assert behind["match_index"] < st["log_cached_from"] - 1, (behind, st["log_cached_from"])
    finally:
        cluster.resume_node(victim)

    deadline = time.monotonic() + 60
    for loc, tc in zip(locs, clients, strict=True):
        leader = await tc.wait_leader(10.0)
        while True:
            lead, mine = (
                await state(rpc, leader, loc["tablet_id"]),
                await state(rpc, victim.rpc_address, loc["tablet_id"]),
            )
            if mine["applied_index"] >= lead["commit_index"]:
                break
            assert time.monotonic() < deadline, f"the resumed follower never caught up: {mine} vs {lead}"
            await asyncio.sleep(0.2)
        assert lead["log_reads"] > 0, lead
        while True:
            try:
                here = await tc.checksum(victim.rpc_address)
                there = await tc.checksum(leader, here["snapshot_ts"])
                break
            except KuduBadStatus as e:
                assert time.monotonic() < deadline, f"checksum on the resumed follower failed: {e}"
                await asyncio.sleep(0.2)
        assert (here["rows"], here["checksum"]) == (there["rows"], there["checksum"])
        assert here["rows"] == len(per_tablet[clients.index(tc)])
    for ts in cluster.tservers:
        assert "needs a tablet copy" not in ts.log_path.read_text(), ts.name
