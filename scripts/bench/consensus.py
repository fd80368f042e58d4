#!/usr/bin/env python3
"""Consensus benchmark: 3 tserver processes, replicated TestKV groups, fsync on.

A client proposes small entries (TestKV/Put to each group's leader) with bounded concurrency and prints
committed entries/s and p50/p99 commit latency, for one group and for many groups at once. Each also
with the same proposers (one entry outstanding each) coalesced by the client into TestKV/PutBatch calls
(what a Kudu session does with concurrent writes to one tablet), and with many entries per RPC from every
proposer (100 x 64 entries in flight: throughput, not latency). Each phase is bounded by a count and a
time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

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


async def drive(
    concurrency: int, max_ops: int, seconds: float, step: int, op: Callable[[int], Awaitable[Any]]
) -> tuple[list[float], float, int]:
    """``concurrency`` workers, each awaiting ``op(i)`` (``step`` entries from entry ``i``) until ``max_ops``
    entries or ``seconds``: (each entry's latency, elapsed seconds, entries that failed)."""
    latencies: list[float] = []
    errors = 0
    next_op = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal next_op, errors
        while next_op < max_ops and time.monotonic() < deadline:
            i = next_op
            next_op += step
            t0 = time.perf_counter()
            try:
                await op(i)
                latencies.extend([time.perf_counter() - t0] * step)
            except KuduBadStatus:
                errors += step

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - t0, errors


async def run_phase(
    rpc: RpcClient, leaders: dict[str, str], concurrency: int, max_ops: int, seconds: float, batch: int = 1
) -> None:
    groups = list(leaders)

    async def op(i: int) -> None:
        g = groups[(i // batch) % len(groups)]
        if batch == 1:
            await rpc.call(leaders[g], "TestKV", "Put", {"group": g, "key": f"k{i}", "value": b"x" * 32}, timeout_s=10)
        else:
            items = [[f"k{j}", b"x" * 32] for j in range(i, i + batch)]
            await rpc.call(leaders[g], "TestKV", "PutBatch", {"group": g, "items": items}, timeout_s=10)

    latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, batch, op)
    report(
        f"groups={len(groups)} concurrency={concurrency} entries/RPC={batch}", latencies, elapsed, f"errors {errors}"
    )


def report(label: str, latencies: list[float], elapsed: float, extra: str) -> None:
    """Print a phase's committed entries/s and its commit latency percentiles."""
    lat = sorted(latencies)

    def p(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    print(f"{label}: committed entries/s {len(lat) / elapsed:,.0f} ({len(lat)} in {elapsed:.1f}s, {extra})")
    print(
        f"{label}: commit latency p50 {p(0.50):.2f} ms, p99 {p(0.99):.2f} ms, mean "
        f"{(statistics.mean(lat) * 1000 if lat else float('nan')):.2f} ms"
    )


class Coalescer:
    """What a Kudu client's session does with concurrent writes to one tablet: entries submitted while
    calls to their leader are in flight wait, and leave together in the next call (TestKV/PutBatch), with
    at most ``in_flight`` calls per leader. Each entry's latency is still its own, submit to commit.

    A call leaves at the end of the loop turn in which its first entry was submitted (no timer, no added
    wait): the proposers a finished call releases all submit again in that turn and go out together.
    Sending at the first submit instead sent the first of them alone and split the rest into calls that
    then travelled in lockstep (16 entries per call, the Raft log idle between rounds)."""

    def __init__(self, rpc: RpcClient, group: str, address: str, in_flight: int, max_batch: int) -> None:
        self.rpc, self.group, self.address = rpc, group, address
        self.in_flight, self.max_batch = in_flight, max_batch
        self.queue: list[tuple[list[Any], asyncio.Future[None]]] = []
        self.sending = 0
        self.calls = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self._pump_scheduled = False

    def submit(self, key: str, value: bytes) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self.queue.append(([key, value], fut))
        if not self._pump_scheduled:
            self._pump_scheduled = True
            loop.call_soon(self._scheduled_pump)
        return fut

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    def _pump(self) -> None:
        while self.queue and self.sending < self.in_flight:
            batch, self.queue = self.queue[: self.max_batch], self.queue[self.max_batch :]
            self.sending += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _send(self, batch: list[tuple[list[Any], asyncio.Future[None]]]) -> None:
        try:
            await self.rpc.call(
                self.address,
                "TestKV",
                "PutBatch",
                {"group": self.group, "items": [item for item, _ in batch]},
                timeout_s=10,
            )
            for _, fut in batch:
                fut.set_result(None)
        except KuduBadStatus as e:
            for _, fut in batch:
                fut.set_exception(e)
        finally:
            self.calls += 1
            self.sending -= 1
            self._pump()


async def run_coalesced(
    rpc: RpcClient, leaders: dict[str, str], concurrency: int, max_ops: int, seconds: float, in_flight: int = 2
) -> None:
    """``concurrency`` proposers, each with one small entry outstanding at a time, through Coalescers."""
    groups = list(leaders)
    batchers = {g: Coalescer(rpc, g, leaders[g], in_flight, 1000) for g in groups}

    def op(i: int) -> Awaitable[None]:
        return batchers[groups[i % len(groups)]].submit(f"c{i}", b"x" * 32)

    latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, 1, op)
    calls = sum(b.calls for b in batchers.values())
    report(
        f"groups={len(groups)} proposers={concurrency} one entry each, coalesced by the client "
        f"(<= {in_flight} calls in flight per leader)",
        latencies,
        elapsed,
        f"errors {errors}, {len(latencies) / max(1, calls):.1f} entries per call",
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--ops", type=int, default=50_000, help="max entries per phase")
    ap.add_argument("--seconds", type=float, default=10.0, help="max seconds per phase")
    ap.add_argument("--groups", type=int, default=100, help="groups in the multi-group phase")
    ap.add_argument("--batch", type=int, default=100, help="entries per RPC in the batched phases")
    ap.add_argument("--in-flight", type=int, default=2, help="calls in flight per leader in the coalesced phases [2]")
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
            await run_coalesced(rpc, one, args.concurrency, args.ops * 10, args.seconds, args.in_flight)
            await run_phase(rpc, one, args.concurrency, args.ops * 10, args.seconds, args.batch)
            await run_phase(rpc, many, args.concurrency, args.ops, args.seconds)
            await run_coalesced(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.in_flight)
            await run_phase(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.batch)
        finally:
            await rpc.close()
            cluster.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
