"""A tablet server under --memory-limit-mb: the /mem-trackers tree, and a load past the soft limit that
is refused with the node's figures, ridden through by the client, and loses and duplicates nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.common import types as T
from kudu_async.common.errors import KuduServiceUnavailable
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.tablet_client import UPSERT, TabletClient
from kudu_async.testing.waits import wait_for

pytestmark = pytest.mark.integration

FAST = ["--heartbeat-interval-ms", "200", "--raft-heartbeat-interval-ms", "250"]
MiB = 1 << 20
LIMIT_MB = 256
# One tablet: its pressure flush starts at 60% (134 MiB: ~70 MiB of baseline, ~60 MiB of MemRowSet) and
# counts its output (about the store's size) while it runs, so the node passes its soft 80% (179 MiB)
# during the first one whatever the timing of the load.
LOAD_LIMIT_MB = 224


def _server_metrics(cluster: MiniCluster, node: Any) -> dict[str, int]:
    ent = cluster.http_json(node, "/metrics?types=server&metrics=memory_anonymous,memory_consumption,memory_limit")
    return {m["name"]: int(m["value"]) for m in ent[0]["metrics"]}


def _schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("a", type_=kudu.int64)
    b.add_column("b", type_=kudu.string)
    b.add_column("c", type_=kudu.double)
    return b.build()


def test_mem_trackers_tree_on_a_cluster(cluster_1m3t: MiniCluster) -> None:
    """Every node answers Kudu's tracker table; a tserver's tablets hang under the root with their stores."""
    client = kudu.connect(cluster_1m3t.master_addresses)
    try:
        t = client.create_table("memtree", _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3)
        s = client.new_session(timeout_ms=30_000)
        keys = np.arange(1000, dtype=np.int64)
        s.apply_arrow(t, pa.record_batch({"key": keys, "a": keys % 1000, "b": [f"name-{k}" for k in keys]}))
        s.close()
        for n in cluster_1m3t.nodes:
            rows = cluster_1m3t.http_json(n, "/mem-trackers")
            assert all(set(r) == {"id", "parent", "limit", "current", "peak"} for r in rows)
            root = rows[0]
            assert root["id"] == "root" and root["parent"] is None and root["limit"] > 0
            assert root["current"] == sum(r["current"] for r in rows if r["parent"] == "root")
            assert all(r["peak"] >= r["current"] >= 0 for r in rows)
            ids = {r["id"]: r for r in rows}
            assert {"baseline", "rpc"} <= set(ids)
            nested = cluster_1m3t.http_json(n, "/mem-trackers?nested=1")
            assert nested["id"] == "root" and {c["id"] for c in nested["children"]} >= {"baseline", "rpc"}
            metrics = _server_metrics(cluster_1m3t, n)
            assert metrics["memory_limit"] == root["limit"] and metrics["memory_consumption"] > 0
            if n.role == "master":
                assert (
                    ids["tablet-sys_catalog"]["parent"] == "root" and ids["log_cache"]["parent"] == "tablet-sys_catalog"
                )
                continue
            assert {"block_cache", "scanners"} <= set(ids)
            tablets = [r for r in rows if r["id"].startswith("tablet-") and r["parent"] == "root"]
            assert len(tablets) == 2  # 2 tablets x 3 replicas on 3 tservers
            for tr in tablets:
                kids = {r["id"]: r for r in rows if r["parent"] == tr["id"]}
                assert set(kids) == {"MemRowSet", "DeltaMemStores", "DiskRowSets", "log_cache"}
                assert tr["current"] == sum(k["current"] for k in kids.values())

            def holds_rows(node: Any = n) -> bool:  # a follower applies the rows a little later
                trackers = cluster_1m3t.http_json(node, "/mem-trackers")
                return sum(r["current"] for r in trackers if r["id"] == "MemRowSet") > 0

            wait_for(holds_rows, 10.0, f"{n.name}'s MemRowSet trackers to count the rows written")
    finally:
        client.close()


def test_load_past_the_soft_limit_is_refused_ridden_through_and_complete(mini_cluster_factory: Any) -> None:
    """A tiny memory limit and flushes only under memory pressure: the bulk load crosses the soft limit, the
    leader refuses writes with SERVICE_UNAVAILABLE, the client backs off and retries, and every row is there
    once; the process's anonymous memory stays within the limit plus a margin."""
    cluster = mini_cluster_factory(
        num_masters=1,
        num_tservers=1,
        extra_flags=FAST,
        tserver_flags=[
            "--memory-limit-mb",
            str(LOAD_LIMIT_MB),
            "--flush-threshold-mb",
            "4096",
            "--tablet-memory-limit-mb",
            "4096",
            # Watermarks close together and low: a flush starts at the pressure watermark with its next
            # store counted, so only a load that outruns the flushes meets the soft limit: this one must.
            "--memory-pressure-percentage",
            "55",
            "--memory-limit-soft-percentage",
            "60",
        ],
    )
    ts = cluster.tservers[0]
    samples: list[dict[str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_server_metrics(cluster, ts))
            time.sleep(0.05)

    client = kudu.connect(cluster.master_addresses)
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        t = client.create_table(
            "memlimit", _schema(), kudu.Partitioning().set_range_partition_columns(["key"]), n_replicas=1
        )
        s = client.new_session(timeout_ms=120_000)
        sampler.start()
        n, batch_rows = 1_500_000, 100_000
        for lo in range(0, n, batch_rows):
            keys = np.arange(lo, lo + batch_rows, dtype=np.int64)
            batch = pa.record_batch(
                {
                    "key": keys,
                    "a": keys % 1000,
                    "b": pa.array(np.char.add("name-", keys.astype(str)).astype(object), pa.string()),
                    "c": keys * 0.5,
                }
            )
            assert s.apply_arrow(t, batch, op="insert") == batch_rows
        s.close()
        stop.set()
        sampler.join()
        refused = cluster.tserver_metric_totals(["writes_rejected_backpressure"])["writes_rejected_backpressure"]
        assert refused > 0, "the load never crossed the soft memory limit"
        got = client.new_scanner(t).open().to_arrow()
        assert got.num_rows == n
        assert pa.compute.sum(got.column("key")).as_py() == n * (n - 1) // 2
        assert len(np.unique(got.column("key").to_numpy())) == n
        peak_tracked = max(x["memory_consumption"] for x in samples)
        peak_anon = max(x["memory_anonymous"] for x in samples)
        print(
            f"\nrefused {refused}; peak tracked {peak_tracked / MiB:.0f} MiB, peak anonymous {peak_anon / MiB:.0f} MiB"
        )
        # Pressure and admission count the next flush's working memory (as much again as the biggest
        # store), so tracked memory stays under the limit (measured 162-194 MiB of 224 in 4 runs beside a
        # 3-tserver bench); the margin covers writes admitted just before a refusal and a maintenance
        # poll (0.25 s) late on a loaded host. The process holds, beside, what the trackers do not see: up
        # to 32 MiB freed and not yet handed back (RELEASE_AFTER_FREED_BYTES) and Python objects of the
        # write path (measured: anonymous 196-226 MiB in the same runs).
        assert peak_tracked < (LOAD_LIMIT_MB + 64) * MiB
        assert peak_anon < (LOAD_LIMIT_MB + 112) * MiB
    finally:
        stop.set()
        client.close()


async def test_leaders_refuse_with_the_figures_and_followers_apply_everything(mini_cluster_factory: Any) -> None:
    """A soft limit of 1%: the baseline alone passes it, so a leader refuses a share of new writes (naming
    the node's figures) while its followers, past the same watermark, apply every write it replicates."""
    cluster = mini_cluster_factory(
        num_masters=1,
        num_tservers=3,
        extra_flags=FAST,
        tserver_flags=["--memory-limit-mb", str(LIMIT_MB), "--memory-limit-soft-percentage", "1"],
    )
    schema = Schema([ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING)], 1)
    rpc = RpcClient("test-client")
    try:
        tc = TabletClient(rpc, "tablet-mem", schema, {ts.uuid: ts.rpc_address for ts in cluster.tservers})
        await tc.create()
        leader = await tc.wait_leader()
        messages: list[str] = []
        n_batches, per = 60, 2000
        for i in range(n_batches):
            keys = list(range(i * per, (i + 1) * per))
            batch = pa.record_batch(
                [pa.array(keys, pa.int64()), pa.array([f"v{k}" for k in keys])], schema=schema.to_arrow()
            )
            try:
                await tc.rpc.call(
                    leader,
                    "TabletServer",
                    "Write",
                    {"tablet_id": "tablet-mem", "schema_version": 0, **_ops(batch)},
                )
            except KuduServiceUnavailable as e:
                messages.append(e.message)
                await tc.write(batch, UPSERT)  # retried until admitted, as a client does
        assert messages, "no write was refused above the soft limit"
        m = messages[0]
        assert "soft memory limit (3 MiB) exceeded:" in m and f"of {LIMIT_MB} MiB used (" in m and "baseline" in m, m
        deadline = time.monotonic() + 30.0
        while True:
            snap = (await tc.checksum(leader))["snapshot_ts"]
            sums = [await tc.checksum(ts.rpc_address, snap) for ts in cluster.tservers]
            if all(c == sums[0] for c in sums) and sums[0]["rows"] == n_batches * per:
                break
            assert time.monotonic() < deadline, f"replicas never agreed on {n_batches * per} rows: {sums}"
            await asyncio.sleep(0.2)
    finally:
        await rpc.close()


def _ops(batch: pa.RecordBatch) -> dict[str, Any]:
    from kudu_async.common.row_conversion import encode_row_operations

    return encode_row_operations(batch, [UPSERT] * batch.num_rows)
