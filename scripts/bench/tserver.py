#!/usr/bin/env python3
"""Tablet server benchmark: writes through one 3-replica tablet, snapshot scans, and a 50-tablet restart.

Real processes (MiniCluster on 127.0.0.1), fsync on. Phase 1 writes ``--rows`` rows in batches of
``--batch`` with ``--concurrency`` writes in flight to the tablet's leader and prints rows/s and the
p50/p99 latency of a Write (commit on a majority + apply). Phase 2 scans them back at a snapshot from
a follower. Phase 3 restarts a tserver holding ``--tablets`` single-replica tablets of ``--rows-per-tablet``
rows and prints how long until every tablet is RUNNING again.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kudu_async.common import types as T
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.tablet_client import INSERT, TabletClient

SCHEMA = Schema(
    [ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING), ColumnSchema("metric", T.DOUBLE)], 1
)


def batch(lo: int, hi: int) -> pa.RecordBatch:
    keys = pa.array(range(lo, hi), pa.int64())
    return pa.RecordBatch.from_arrays(
        [keys, pa.array([f"value-{k:012d}" for k in range(lo, hi)]), pa.array([k * 0.5 for k in range(lo, hi)])],
        schema=SCHEMA.to_arrow(),
    )


async def writes(args: argparse.Namespace, base: Path) -> None:
    cluster = MiniCluster(num_masters=1, num_tservers=3, base_dir=base / "writes").start()
    rpc = RpcClient("bench")
    try:
        tc = TabletClient(rpc, "bench-tablet", SCHEMA, {t.uuid: t.rpc_address for t in cluster.tservers})
        await tc.create()
        leader = await tc.wait_leader()
        lat: list[float] = []
        sem = asyncio.Semaphore(args.concurrency)

        async def one(lo: int) -> None:
            async with sem:
                t0 = time.perf_counter()
                reply = await tc.write(batch(lo, min(args.rows, lo + args.batch)), INSERT)
                lat.append(time.perf_counter() - t0)
                assert not reply["row_errors"], reply["row_errors"][:2]

        t0 = time.perf_counter()
        await asyncio.gather(*(one(lo) for lo in range(0, args.rows, args.batch)))
        el = time.perf_counter() - t0
        lat.sort()
        print(
            f"write: {args.rows:,} rows in batches of {args.batch} x{args.concurrency} in flight: "
            f"{args.rows / el:,.0f} rows/s; Write p50 {statistics.median(lat) * 1000:.1f} ms "
            f"p99 {lat[int(len(lat) * 0.99) - 1] * 1000:.1f} ms"
        )
        follower = next(a for a in tc.addresses.values() if a != leader)
        t0 = time.perf_counter()
        _, snap = await tc.scan(leader, read_mode="READ_AT_SNAPSHOT", projection=["key"])
        table, _ = await tc.scan(follower, read_mode="READ_AT_SNAPSHOT", snapshot_ts=snap, ordered=False)
        el = time.perf_counter() - t0
        print(
            f"scan: {table.num_rows:,} rows (all columns) from a follower at a snapshot in {el:.2f}s "
            f"(+ a key-only scan on the leader): {table.num_rows / el:,.0f} rows/s"
        )
    finally:
        await rpc.close()
        cluster.shutdown()


async def restart(args: argparse.Namespace, base: Path) -> None:
    cluster = MiniCluster(num_masters=1, num_tservers=1, base_dir=base / "restart").start()
    rpc = RpcClient("bench")
    try:
        ts = cluster.tservers[0]
        clients = [TabletClient(rpc, f"r-{i:03d}", SCHEMA, {ts.uuid: ts.rpc_address}) for i in range(args.tablets)]
        await asyncio.gather(*(c.create() for c in clients))
        await asyncio.gather(*(c.wait_leader(60) for c in clients))
        n = args.rows_per_tablet
        for i, c in enumerate(clients):
            for lo in range(0, n, 5000):
                await c.write(batch(i * n + lo, i * n + min(n, lo + 5000)))
        t0 = time.perf_counter()
        cluster.restart_node(ts.name)
        healthy = time.perf_counter() - t0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            listed = await rpc.call(ts.rpc_address, "TabletServer", "ListTablets", {})
            if sum(t["state"] == "RUNNING" for t in listed["tablets"]) == args.tablets:
                break
            await asyncio.sleep(0.02)
        el = time.perf_counter() - t0
        print(
            f"restart: {args.tablets} tablets x {n:,} rows (WAL replay, nothing flushed): process healthy in "
            f"{healthy:.2f}s, all tablets RUNNING {el:.2f}s after the restart began"
        )
    finally:
        await rpc.close()
        cluster.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--batch", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--tablets", type=int, default=50)
    p.add_argument("--rows-per-tablet", type=int, default=10_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="kudu-bench-ts-") as d:
        asyncio.run(writes(args, Path(d)))
        asyncio.run(restart(args, Path(d)))


if __name__ == "__main__":
    main()
