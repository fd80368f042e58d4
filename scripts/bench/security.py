#!/usr/bin/env python3
"""Security overhead: the cluster bench's bulk ingest and point reads with security off, then fully on.

Each round starts 1 master + 3 tservers (fsync on) twice, alternating: plain (the defaults: optional
encryption, which leaves loopback in the clear, as Kudu does) and secured (``MiniCluster(secure=True)``:
TLS required on every connection, loopback included, with the cluster CA's certificates, JWT then authn
token authentication required, a table privilege policy and authz tokens checked on every write and
scan). The same table (``key`` int64 PK, ``a`` int64, ``b`` string, ``c`` double, ``--buckets`` hash
tablets x 3 replicas) is bulk-loaded through ``session.apply_arrow`` and read back by single-key scans
from ``--concurrency`` tasks of the async client; every load is checked (count and sum of keys) and every
read by its values. Goals (issue: security overhead): secured ingest at least 85 % of plain, secured p99
point read at most 1.5x plain.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kudu_async as kudu
import kudu_async.aio
from kudu_async.testing import MiniCluster
from scripts.bench.cluster import SESSION_TIMEOUT_MS, check, count_rows, make_batch, pct, schema

POLICY = {"grant": [{"users": ["alice"], "tables": ["*"], "privileges": ["ALL"]}]}


def _credentials(cluster: MiniCluster) -> dict[str, Any]:
    """What a client needs for this cluster: nothing, or alice's JWT and the CA to require TLS with."""
    if not cluster.secure:
        return {}
    deadline = time.monotonic() + 60
    status, pem = cluster.http_get(cluster.masters[0], "/ipki-ca-cert")
    while status != 200 or not all(
        cluster.http_json(t, "/api/v1/status")["tls"]["certificate_signed"] for t in cluster.tservers
    ):
        check(time.monotonic() < deadline, "the cluster CA never signed every tablet server's certificate")
        time.sleep(0.2)
        status, pem = cluster.http_get(cluster.masters[0], "/ipki-ca-cert")
    return {
        "jwt": cluster.mint_jwt("alice"),
        "encryption_policy": kudu.ENCRYPTION_REQUIRED,
        "trusted_certificates": [pem.decode()],
    }


def ingest(client: kudu.Client, rows: int, batch: int, buckets: int) -> float:
    """Rows/s of a bulk load of ``rows`` rows in ``batch``-row record batches, checked by a full scan."""
    table = client.create_table(
        "bench", schema(), kudu.Partitioning().add_hash_partitions(["key"], buckets), n_replicas=3
    )
    batches = [make_batch(lo, min(lo + batch, rows)) for lo in range(0, rows, batch)]
    session = client.new_session(timeout_ms=SESSION_TIMEOUT_MS)
    t0 = time.perf_counter()
    for rb in batches:
        session.apply_arrow(table, rb, op="insert")
    session.flush()
    el = time.perf_counter() - t0
    errors, overflowed = session.get_pending_errors()
    check(not errors and not overflowed, f"ingest left {len(errors)} row errors: {errors[:2]}")
    got = count_rows(client.table("bench"))
    check(got == (rows, rows * (rows - 1) // 2), f"ingest: read back (rows, sum of keys) {got}")
    return rows / el


async def point_reads(masters: str, creds: dict[str, Any], rows: int, n: int, concurrency: int) -> list[float]:
    """Latencies (s) of ``n`` single-key scans from ``concurrency`` tasks, each checked."""
    client = await kudu_async.aio.connect(masters.split(","), **creds)
    try:
        table = await client.table("bench")
        rng = random.Random(7)
        keys = iter([rng.randrange(rows) for _ in range(n)])

        async def read(k: int) -> float:
            t0 = time.perf_counter()
            got = await table.scanner().add_predicate(table["key"] == k).to_arrow()
            el = time.perf_counter() - t0
            row = got.to_pylist()
            check(row == [{"key": k, "a": k % 1000, "b": f"name-{k}", "c": k * 0.5}], f"key {k}: read {row}")
            return el

        await asyncio.gather(*(read(rng.randrange(rows)) for _ in range(concurrency)))  # warm-up
        lat: list[float] = []

        async def worker() -> None:
            for k in keys:
                lat.append(await read(k))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        check(len(lat) == n, f"{len(lat)} reads done, expected {n}")
        return sorted(lat)
    finally:
        await client.close()


def one_run(secure: bool, base: Path, args: argparse.Namespace) -> dict[str, float]:
    cluster = MiniCluster(
        num_masters=1, num_tservers=3, base_dir=base, secure=secure, authz_policy=POLICY if secure else None
    ).start()
    try:
        creds = _credentials(cluster)
        with kudu.connect(cluster.master_addresses.split(","), **creds) as client:
            rate = ingest(client, args.rows, args.batch, args.buckets)
        lat = asyncio.run(point_reads(cluster.master_addresses, creds, args.rows, args.point_reads, args.concurrency))
        return {"ingest": rate, "p50": statistics.median(lat) * 1000, "p99": pct(lat, 0.99) * 1000}
    finally:
        cluster.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows bulk-loaded [1,000,000]")
    ap.add_argument("--batch", type=int, default=100_000, help="rows per record batch [100,000]")
    ap.add_argument("--buckets", type=int, default=6, help="hash tablets [6]")
    ap.add_argument("--point-reads", type=int, default=5_000, help="point reads [5,000]")
    ap.add_argument("--concurrency", type=int, default=16, help="tasks doing the point reads [16]")
    ap.add_argument("--rounds", type=int, default=2, help="plain/secured pairs, alternating [2]")
    args = ap.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="kudu-bench-security-") as tmp:
        for r in range(args.rounds):
            for secure in (False, True):
                fig = one_run(secure, Path(tmp) / f"r{r}-{'secure' if secure else 'plain'}", args)
                results[secure].append(fig)
                print(
                    f"round {r + 1} {'secured' if secure else 'plain  '}: ingest {fig['ingest']:,.0f} rows/s, "
                    f"point reads p50 {fig['p50']:.1f} ms, p99 {fig['p99']:.1f} ms",
                    flush=True,
                )
    plain = {k: statistics.median(f[k] for f in results[False]) for k in ("ingest", "p50", "p99")}
    sec = {k: statistics.median(f[k] for f in results[True]) for k in ("ingest", "p50", "p99")}
    ingest_ratio = sec["ingest"] / plain["ingest"]
    p99_ratio = sec["p99"] / plain["p99"]
    print(f"\nmedian of {args.rounds} rounds     ingest rows/s   p50 ms   p99 ms")
    print(f"plain                   {plain['ingest']:>13,.0f}  {plain['p50']:>7.1f}  {plain['p99']:>7.1f}")
    print(f"secured                 {sec['ingest']:>13,.0f}  {sec['p50']:>7.1f}  {sec['p99']:>7.1f}")
    ok_ingest = ingest_ratio >= 0.85
    ok_p99 = p99_ratio <= 1.5
    print(f"{'PASS' if ok_ingest else 'FAIL'}  secured ingest >= 85% of plain: {ingest_ratio:.0%}")
    print(f"{'PASS' if ok_p99 else 'FAIL'}  secured p99 point read <= 1.5x plain: {p99_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
