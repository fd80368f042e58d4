#!/usr/bin/env python3
"""Client benchmark: the kudu-python-style client against 1 master + 3 tservers on this machine.

A table of ``key`` int64 (primary key), ``a`` int64, ``b`` string, ``c`` double, hash-partitioned into
``--buckets`` tablets with 3 replicas each (real processes on 127.0.0.1, fsync on):

(a) bulk load ``--rows`` rows through ``session.apply_arrow`` in record batches of ``--batch`` rows built
    with pyarrow (vectorised; no per-row Python);                          goal >= 100,000 rows/s
(b) ``--apply-rows`` rows through row-at-a-time ``session.apply(table.new_insert(...))`` in
    FLUSH_AUTO_BACKGROUND into a second table;                              goal >=  30,000 rows/s
    (then, for information, the same through the async client into a third table)
(c) ``--point-reads`` point reads by key (a scanner with ``table['key'] == k``) from ``--concurrency``
    asyncio tasks on the async client; p50/p99/max latency;                 goal p99 < 10 ms
(d) a scan with a predicate (``key >= rows/2``, sum of ``c``) against pyarrow reading the same rows from a
    local Parquet file written in the same run (``pyarrow.parquet.read_table`` with filters);
                                                                            goal >= 25% of Parquet's rows/s

Write sessions use a 30 s timeout (SESSION_TIMEOUT_MS). Each load is verified by a scan (row count, and the
sum of the keys for (a)), each read by its values; a mismatch fails the run.
``--quick`` is a smoke run (100k rows, 20k applied rows, 300 point reads).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kudu_async as kudu
import kudu_async.aio
from kudu_async.testing import MiniCluster

if TYPE_CHECKING:
    from kudu_async.client.table import Table

# 20,000 point reads (~5 s): a p99 from 2,000 is the 20th-slowest read of half a second, one stall away
# from another figure.
FULL = {"rows": 2_000_000, "apply_rows": 200_000, "point_reads": 20_000}
QUICK = {"rows": 100_000, "apply_rows": 20_000, "point_reads": 300}
# Sessions of (a) and (b) get 30 s, not the default 5 s: one Write RPC carries up to 20,000 rows of a tablet,
# and on a loaded 2-core machine such a Write to 3 replicas can take over 5 s, failing the run.
SESSION_TIMEOUT_MS = 30_000
# Tablet counters of where a tserver answered each point lookup: on its event loop, or in a worker.
POINT_READ_PATHS = ("point_reads_in_memory", "point_reads_handed_off")


class BenchError(RuntimeError):
    """A verification failed: the figures of this run mean nothing."""


def check(ok: bool, msg: str) -> None:
    if not ok:
        raise BenchError(msg)


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("a", type_=kudu.int64)
    b.add_column("b", type_=kudu.string)
    b.add_column("c", type_=kudu.double)
    return b.build()


def make_batch(lo: int, hi: int) -> pa.RecordBatch:
    """Rows ``lo..hi-1``: a = key % 1000, b = 'name-<key>', c = key * 0.5 (all vectorised)."""
    keys = pa.array(np.arange(lo, hi, dtype=np.int64))
    a = pc.remainder(keys, 1000)
    b = pc.binary_join_element_wise("name-", pc.cast(keys, pa.string()), "")
    c = pc.multiply(pc.cast(keys, pa.float64()), 0.5)
    return pa.RecordBatch.from_arrays([keys, a, b, c], names=["key", "a", "b", "c"])


def best(fn: Any, runs: int) -> tuple[float, Any]:
    """The fastest of ``runs`` calls of ``fn`` and the result of the last one."""
    times = []
    out = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def count_rows(table: Any) -> tuple[int, int]:
    """(rows, sum of keys) of a table, by a full scan of the key column."""
    keys = table.scanner().set_projected_column_names(["key"]).open().to_arrow().column("key")
    return len(keys), int(pc.sum(keys).as_py() or 0)


def bulk_load(client: kudu.Client, table: Any, batches: list[pa.RecordBatch]) -> tuple[float, list[float]]:
    """Elapsed time of the whole load and of each apply_arrow call."""
    session = client.new_session(timeout_ms=SESSION_TIMEOUT_MS)
    per: list[float] = []
    t0 = time.perf_counter()
    for rb in batches:
        t1 = time.perf_counter()
        session.apply_arrow(table, rb, op="insert")
        per.append(time.perf_counter() - t1)
    session.flush()
    el = time.perf_counter() - t0
    errors, overflowed = session.get_pending_errors()
    check(not errors and not overflowed, f"(a) apply_arrow left {len(errors)} row errors: {errors[:2]}")
    return el, per


def row_apply(client: kudu.Client, table: Any, n: int) -> float:
    session = client.new_session(flush_mode=kudu.FLUSH_AUTO_BACKGROUND, timeout_ms=SESSION_TIMEOUT_MS)
    t0 = time.perf_counter()
    for k in range(n):
        session.apply(table.new_insert({"key": k, "a": k % 1000, "b": f"name-{k}", "c": k * 0.5}))
    session.flush()
    el = time.perf_counter() - t0
    errors, overflowed = session.get_pending_errors()
    session.close()
    check(not errors and not overflowed, f"(b) apply left {len(errors)} row errors: {errors[:2]}")
    return el


async def row_apply_async(masters: str, table_name: str, n: int) -> float:
    """(b) again on the async client (no thread hop per call): the cost of the blocking wrapper."""
    client = await kudu_async.aio.connect(masters.split(","))
    try:
        table = await client.table(table_name)
        session = client.new_session(flush_mode=kudu.FLUSH_AUTO_BACKGROUND, timeout_ms=SESSION_TIMEOUT_MS)
        t0 = time.perf_counter()
        for k in range(n):
            await session.apply(table.new_insert({"key": k, "a": k % 1000, "b": f"name-{k}", "c": k * 0.5}))
        await session.flush()
        el = time.perf_counter() - t0
        errors, overflowed = session.get_pending_errors()
        await session.close()
        check(not errors and not overflowed, f"(b, async) apply left {len(errors)} row errors: {errors[:2]}")
        return el
    finally:
        await client.close()


async def point_reads(
    masters: str, table_name: str, rows: int, n: int, concurrency: int, seed: int
) -> tuple[list[float], float]:
    """Latencies (seconds) of ``n`` single-key reads from ``concurrency`` tasks, and the elapsed time."""
    client = await kudu_async.aio.connect(masters.split(","))
    try:
        table = await client.table(table_name)
        rng = random.Random(seed)
        keys = [rng.randrange(rows) for _ in range(n)]

        async def read(k: int) -> float:
            t0 = time.perf_counter()
            got = await table.scanner().add_predicate(table["key"] == k).to_arrow()
            el = time.perf_counter() - t0
            check(got.num_rows == 1, f"(c) key {k}: {got.num_rows} rows")
            row = got.to_pylist()[0]
            check(row == {"key": k, "a": k % 1000, "b": f"name-{k}", "c": k * 0.5}, f"(c) key {k}: read {row}")
            return el

        # Warm-up (not timed): table locations into the meta cache, connections to every tserver.
        await asyncio.gather(*(read(rng.randrange(rows)) for _ in range(concurrency)))
        lat: list[float] = []
        it = iter(keys)

        async def worker() -> None:
            for k in it:  # tasks share one iterator: each key is read once
                lat.append(await read(k))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        el = time.perf_counter() - t0
        check(len(lat) == n, f"(c) {len(lat)} reads done, expected {n}")
        return lat, el
    finally:
        await client.close()


async def ping_floor(address: str, n: int, concurrency: int) -> list[float]:
    """Latencies of ``n`` bare Generic/Ping RPCs to one tserver at the same concurrency: what any read
    costs at least through this RPC stack (context for (c), not a goal)."""
    from kudu_async.rpc.client import RpcClient

    rpc = RpcClient()
    try:
        await rpc.call(address, "Generic", "Ping", {})
        lat: list[float] = []
        it = iter(range(n))

        async def worker() -> None:
            for _ in it:
                t0 = time.perf_counter()
                await rpc.call(address, "Generic", "Ping", {})
                lat.append(time.perf_counter() - t0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return lat
    finally:
        await rpc.close()


def pct(sorted_lat: list[float], q: float) -> float:
    return sorted_lat[max(0, math.ceil(q * len(sorted_lat)) - 1)]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=None, help=f"rows bulk-loaded in (a) [{FULL['rows']:,}]")
    ap.add_argument(
        "--apply-rows", type=int, default=None, help=f"rows applied one at a time in (b) [{FULL['apply_rows']:,}]"
    )
    ap.add_argument("--point-reads", type=int, default=None, help=f"point reads in (c) [{FULL['point_reads']:,}]")
    ap.add_argument("--concurrency", type=int, default=16, help="tasks doing the point reads [16]")
    ap.add_argument("--batch", type=int, default=100_000, help="rows per record batch in (a) [100,000]")
    ap.add_argument("--buckets", type=int, default=6, help="hash buckets (tablets) of each table [6]")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each scan in (d), best printed [3]")
    ap.add_argument("--seed", type=int, default=9)
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: " + ", ".join(f"{k} {v:,}" for k, v in QUICK.items())
    )
    args = ap.parse_args()
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def point_read_phase(cluster: MiniCluster, masters: str, n: int, args: argparse.Namespace) -> float:
    """(c) point reads from the async client, with the tserver-side paths they took and the RPC floor;
    returns the p99 latency in ms."""
    before = cluster.tserver_metric_totals(POINT_READ_PATHS)
    lat, el_c = asyncio.run(point_reads(masters, "bench_arrow", n, args.point_reads, args.concurrency, args.seed))
    after = cluster.tserver_metric_totals(POINT_READ_PATHS)
    lat.sort()
    p50, p99, mx = statistics.median(lat) * 1000, pct(lat, 0.99) * 1000, lat[-1] * 1000
    print(
        f"(c) point reads (scanner, key == k; async client, {args.concurrency} tasks): {len(lat):,} reads "
        f"in {el_c:.2f}s ({len(lat) / el_c:,.0f} reads/s): p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
        f"max {mx:.1f} ms   (goal p99 < 10 ms: {verdict(p99 < 10)})"
    )
    mem, handed = (after[k] - before[k] for k in POINT_READ_PATHS)
    print(
        f"    info, not the goal: {mem:,} of these lookups (warm-up included) were answered from memory on "
        f"the tserver's event loop (a MemRowSet, or rowset files in the block cache), {handed:,} went to a "
        "worker (a rowset file not in the cache, or the tablet's lock was held)"
    )
    floor = sorted(asyncio.run(ping_floor(cluster.tservers[0].rpc_address, args.point_reads, args.concurrency)))
    print(
        f"    info, not the goal: bare Generic/Ping RPCs to one tserver, {args.concurrency} tasks: p50 "
        f"{statistics.median(floor) * 1000:.1f} ms, p99 {pct(floor, 0.99) * 1000:.1f} ms (the RPC stack's floor)"
    )
    return p99


def scan_phase(ta: Table, path: Path, n: int, args: argparse.Namespace, pq_write: float) -> float:
    """(d) a predicate scan of the kudu table against the same scan of the Parquet file at ``path``;
    returns kudu's rate as a fraction of Parquet's."""
    cut = n // 2
    expect_rows = n - cut
    expect_sum = 0.5 * (n * (n - 1) // 2 - cut * (cut - 1) // 2)

    def kudu_scan() -> tuple[int, float]:
        t = ta.scanner().set_projected_column_names(["c"]).add_predicate(ta["key"] >= cut).open().to_arrow()
        return t.num_rows, float(pc.sum(t.column("c")).as_py() or 0.0)

    def parquet_scan() -> tuple[int, float]:
        t = pq.read_table(path, columns=["c"], filters=[("key", ">=", cut)])
        return t.num_rows, float(pc.sum(t.column("c")).as_py() or 0.0)

    kudu_el, (k_rows, k_sum) = best(kudu_scan, args.runs)
    pq_el, (p_rows, p_sum) = best(parquet_scan, args.runs)
    for name, rows, total in (("kudu", k_rows, k_sum), ("parquet", p_rows, p_sum)):
        check(rows == expect_rows, f"(d) {name} scan returned {rows:,} rows, expected {expect_rows:,}")
        check(total == expect_sum, f"(d) {name} scan summed c to {total}, expected {expect_sum}")
    kudu_rate, pq_rate = expect_rows / kudu_el, expect_rows / pq_el
    ratio = kudu_rate / pq_rate
    print(
        f"(d) scan key >= {cut:,}, sum c ({expect_rows:,} rows, best of {args.runs}): kudu {kudu_el:.3f}s "
        f"({kudu_rate:,.0f} rows/s), parquet {pq_el:.3f}s ({pq_rate:,.0f} rows/s): kudu at {ratio:.1%} of "
        f"parquet   (goal >= 25%: {verdict(ratio >= 0.25)}; parquet file written in {pq_write:.2f}s, "
        f"row groups of {args.batch:,})"
    )
    return ratio


def main() -> int:
    args = parse_args()
    n, m = args.rows, args.apply_rows
    check(n > 0 and m > 0 and args.point_reads > 0 and args.batch > 0, "sizes must be positive")

    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cluster: MiniCluster | None = None
    client: kudu.Client | None = None
    try:
        t0 = time.perf_counter()
        cluster = MiniCluster(num_masters=1, num_tservers=3, base_dir=work / "cluster").start()
        masters = cluster.master_addresses
        client = kudu.connect(masters.split(","))
        part = kudu.Partitioning().add_hash_partitions(["key"], args.buckets)
        ta = client.create_table("bench_arrow", schema(), part, n_replicas=3)
        tb = client.create_table("bench_apply", schema(), part, n_replicas=3)
        tb2 = client.create_table("bench_apply_async", schema(), part, n_replicas=3)
        print(
            f"cluster: 1 master + 3 tservers up, 3 tables of {args.buckets} tablets x 3 replicas created in "
            f"{time.perf_counter() - t0:.1f}s"
        )

        # (a) bulk load through apply_arrow
        t0 = time.perf_counter()
        batches = [make_batch(lo, min(n, lo + args.batch)) for lo in range(0, n, args.batch)]
        build = time.perf_counter() - t0
        el_a, per = bulk_load(client, ta, batches)
        got, key_sum = count_rows(ta)
        check(got == n, f"(a) scan counted {got:,} rows, {n:,} were written")
        check(key_sum == n * (n - 1) // 2, f"(a) scan summed keys to {key_sum}, expected {n * (n - 1) // 2}")
        rate_a = n / el_a
        print(
            f"(a) apply_arrow bulk load: {n:,} rows in batches of {args.batch:,} in {el_a:.2f}s: "
            f"{rate_a:,.0f} rows/s   (goal >= 100,000 rows/s: {verdict(rate_a >= 100_000)}; "
            f"batches built in {build:.2f}s, not timed; scan count verified)"
        )
        if len(per) >= 2:
            half = len(per) // 2
            first = sum(len(b) for b in batches[:half]) / sum(per[:half])
            second = sum(len(b) for b in batches[half:]) / sum(per[half:])
            print(
                f"    per apply_arrow call: fastest {min(per):.2f}s, median {statistics.median(per):.2f}s, slowest "
                f"{max(per):.2f}s; first half of the load {first:,.0f} rows/s, second half {second:,.0f} rows/s"
            )

        # (b) row-at-a-time apply, FLUSH_AUTO_BACKGROUND
        el_b = row_apply(client, tb, m)
        got, _ = count_rows(tb)
        check(got == m, f"(b) scan counted {got:,} rows, {m:,} were applied")
        rate_b = m / el_b
        print(
            f"(b) row-at-a-time apply (FLUSH_AUTO_BACKGROUND): {m:,} rows in {el_b:.2f}s: {rate_b:,.0f} rows/s   "
            f"(goal >= 30,000 rows/s: {verdict(rate_b >= 30_000)}; scan count verified)"
        )
        el_b2 = asyncio.run(row_apply_async(masters, "bench_apply_async", m))
        got, _ = count_rows(tb2)
        check(got == m, f"(b, async) scan counted {got:,} rows, {m:,} were applied")
        print(
            f"    info, not the goal: the same {m:,} rows through the async client's apply (no thread hop per "
            f"row): {el_b2:.2f}s, {m / el_b2:,.0f} rows/s; scan count verified"
        )

        # (c) point reads from the async client
        p99 = point_read_phase(cluster, masters, n, args)

        # (d) predicate scan vs Parquet
        path = work / "bench.parquet"
        t0 = time.perf_counter()
        pq.write_table(pa.Table.from_batches(batches), path, row_group_size=args.batch)
        pq_write = time.perf_counter() - t0
        del batches
        ratio = scan_phase(ta, path, n, args, pq_write)
        met = [rate_a >= 100_000, rate_b >= 30_000, p99 < 10, ratio >= 0.25]
        summary = ", ".join(f"({x}) {verdict(ok)}" for x, ok in zip("abcd", met, strict=True))
        print(f"goals met: {sum(met)} of 4 ({summary})")
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
