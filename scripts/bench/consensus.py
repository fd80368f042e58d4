#!/usr/bin/env python3
"""Consensus benchmark: 3 tserver processes, replicated TestKV groups, fsync on.

A client proposes small entries (TestKV/Put to each group's leader) with bounded concurrency and prints
committed entries/s and p50/p99 commit latency, for one group and for many groups at once; each also
with many entries per RPC (TestKV/PutBatch, proposed together), as Kudu's clients batch rows per Write.
Each phase is bounded by a count and a time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kudu_async.common.errors import KuduBadStatus
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster


async def find_leaders(
    rpc: RpcClient, cluster: MiniCluster, groups: list[str], timeout_s: float = 30
) -> dict[str, str]:
    leaders: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(leaders) < len(groups) and time.monotonic() < deadline:
        for ts in cluster.tservers:
            st = await rpc.call(ts.rpc_address, "Consensus", "GetState", {})
            for r in st["replicas"]:
                if r.get("role") == "LEADER" and r["group"] in groups:
                    leaders[r["group"]] = ts.rpc_address
        if len(leaders) < len(groups):
            await asyncio.sleep(0.2)
    if len(leaders) < len(groups):
        raise SystemExit(f"only {len(leaders)} of {len(groups)} groups elected a leader")
    return leaders


async def run_phase(
    rpc: RpcClient, leaders: dict[str, str], concurrency: int, max_ops: int, seconds: float, batch: int = 1
) -> None:
    groups = list(leaders)
    latencies: list[float] = []
    errors = 0
    next_op = 0
    deadline = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal next_op, errors
        while next_op < max_ops and time.monotonic() < deadline:
            i = next_op
            next_op += batch
            g = groups[(i // batch) % len(groups)]
            t0 = time.perf_counter()
            try:
                if batch == 1:
                    await rpc.call(leaders[g], "TestKV", "Put", {"group": g, "key": f"k{i}", "value": b"x" * 32},
                                   timeout_s=10)
                else:
                    items = [[f"k{j}", b"x" * 32] for j in range(i, i + batch)]
                    await rpc.call(leaders[g], "TestKV", "PutBatch", {"group": g, "items": items}, timeout_s=10)
                latencies.extend([time.perf_counter() - t0] * batch)
            except KuduBadStatus:
                errors += batch

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    lat = sorted(latencies)
    p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000) if lat else (lambda q: float("nan"))
    label = f"groups={len(groups)} concurrency={concurrency} entries/RPC={batch}"
    print(f"{label}: committed entries/s {len(lat) / elapsed:,.0f} ({len(lat)} in {elapsed:.1f}s, errors {errors})")
    print(f"{label}: commit latency p50 {p(0.50):.2f} ms, p99 {p(0.99):.2f} ms, mean "
          f"{(statistics.mean(lat) * 1000 if lat else float('nan')):.2f} ms")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--ops", type=int, default=50_000, help="max entries per phase")
    ap.add_argument("--seconds", type=float, default=10.0, help="max seconds per phase")
    ap.add_argument("--groups", type=int, default=100, help="groups in the multi-group phase")
    ap.add_argument("--batch", type=int, default=100, help="entries per RPC in the batched phases")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-consensus-") as d:
        cluster = MiniCluster(1, 3, base_dir=d, tserver_flags=["--enable-test-kv", "true"])
        cluster.start()
        rpc = RpcClient("bench")
        try:
            peers = {ts.uuid: ts.rpc_address for ts in cluster.tservers}
            names = ["g-0"] + [f"m-{i}" for i in range(args.groups)]
            for g in names:
                for ts in cluster.tservers:
                    await rpc.call(ts.rpc_address, "TestKV", "CreateGroup", {"group": g, "peers": peers})
            print("fsync on (log_force_fsync_all=true); 3 tservers on 127.0.0.1; client in this process")
            leaders = await find_leaders(rpc, cluster, names)
            one = {"g-0": leaders["g-0"]}
            many = {g: leaders[g] for g in names[1:]}
            await run_phase(rpc, one, args.concurrency, args.ops, args.seconds)
            await run_phase(rpc, one, args.concurrency, args.ops * 10, args.seconds, args.batch)
            await run_phase(rpc, many, args.concurrency, args.ops, args.seconds)
            await run_phase(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.batch)
        finally:
            await rpc.close()
            cluster.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
