"""Single-tablet storage benchmark: no network, no Raft.

    python scripts/bench/tablet.py [--rows 5000000] [--dir /tmp/x] [--flush-mb 64]

(a) insert rows/s in 1,000-row batches of (int64 key, int32, double, 20-char string), with the
maintenance manager flushing in a worker thread; (b) point lookups p50/p99, half on flushed data;
(c) full scan, predicate on a non-key column, 2 of 4 columns projected; (d) the same with 10% of rows
updated and not compacted; (e) peak RSS; and the same scan with plain pyarrow over one Parquet file.

    python scripts/bench/tablet.py --ops [--rows 400000] [--batch 20000] [--rowset-mb 4]

Write paths on one Tablet whose rows are already flushed to DiskRowSets (bulk-load shaped batches,
no maintenance thread): ``--rows`` even keys are inserted and flushed, then rows/s of (i) inserts of
fresh keys interleaved with the flushed ones (odd keys, so every batch overlaps the DiskRowSets' key
ranges) and of fresh keys above them, (ii') upserts of those keys while still in the MemRowSet,
(ii) upserts of existing (flushed) keys, (iii) updates of one column of
existing keys, (iv) deletes of existing keys, (v) re-inserts of the deleted keys, each in ``--batch``-row
batches, half through ``Tablet.write`` (leader) and half through ``prepare_write(replay=True)`` +
``apply_write`` (how a follower applies replicated writes). Rates are rows per CPU second of the
process (the host is shared; wall time is printed too). Last, (vi) one compaction of every rowset
with all those deltas (a maintenance op that competes with writes for the tserver's CPU).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from kudu_async.common.clock import HybridClock
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.schema import Schema
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions

FIELDS = [
    pa.field("key", pa.int64(), False),
    pa.field("i32", pa.int32(), True),
    pa.field("d", pa.float64(), True),
    pa.field("s", pa.string(), True),
]


def make_schema() -> Schema:
    return Schema.from_arrow(pa.schema(FIELDS), num_key_columns=1)


def rss_mb() -> float:
    """Peak RSS (includes file pages of memory-mapped rowsets touched by scans)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class AnonPeak:
    """Samples RssAnon (heap, not memory-mapped file pages) to report the engine's own peak memory."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_kb = max(self.peak_kb, _anon_kb())

    def mb(self) -> float:
        self.peak_kb = max(self.peak_kb, _anon_kb())
        return self.peak_kb / 1024


def _anon_kb() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def make_batch(schema: pa.Schema, start: int, n: int, rng: np.random.Generator) -> pa.RecordBatch:
    keys = np.arange(start, start + n, dtype=np.int64)
    strs = pa.array([f"{k:020d}" for k in keys.tolist()], pa.string())
    return pa.record_batch(
        [pa.array(keys), pa.array(rng.integers(0, 1000, n, dtype=np.int32)), pa.array(rng.random(n)), strs],
        schema=schema,
    )


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def timed_scan(tablet: Tablet) -> tuple[float, int]:
    spec = ScanSpec(projection=["key", "d"], predicates=[ColumnPredicate("i32", "<", 500)])
    start = time.perf_counter()
    n = sum(b.num_rows for b in tablet.scan(spec))
    return time.perf_counter() - start, n


def ops_bench(args: argparse.Namespace) -> None:
    """See ``--ops`` in the module docstring."""
    root = args.dir or tempfile.mkdtemp(prefix="kudu-bench-tablet-ops-")
    schema = make_schema()
    arrow = schema.to_arrow()
    opts = TabletOptions(sync=args.sync, target_rowset_bytes=args.rowset_mb << 20)
    clock = HybridClock()
    tablet = Tablet.create(os.path.join(root, "tablet"), schema, tablet_id="ops", options=opts, clock=clock)
    rng = np.random.default_rng(1)
    n, bs = args.rows, args.batch
    prof = cProfile.Profile() if args.profile else None
    index = 0

    def batch_of(keys: np.ndarray) -> pa.RecordBatch:
        m = len(keys)
        strs = pa.array([f"{k:020d}" for k in keys.tolist()], pa.string())
        return pa.record_batch(
            [pa.array(keys), pa.array(rng.integers(0, 1000, m, dtype=np.int32)), pa.array(rng.random(m)), strs],
            schema=arrow,
        )

    def run(name: str, op_type: int, keys: np.ndarray, set_cols: np.ndarray | None = None) -> float:
        """Leader path (``write``) and, for the second half of ``keys``, the follower path (prepare
        with ``replay=True`` then apply, as tablet_replica applies replicated entries)."""
        nonlocal index
        half = len(keys) // 2
        for label, part, replay in (("leader", keys[:half], False), ("follower", keys[half:], True)):
            batches = [batch_of(part[s : s + bs]) for s in range(0, len(part), bs)]
            secs = cpu = 0.0
            for b in batches:
                index += 1
                types = np.full(b.num_rows, op_type, dtype=np.int64)
                mask = None if set_cols is None else np.repeat(set_cols[None, :], b.num_rows, axis=0)
                if prof is not None:
                    prof.enable()
                t0, c0 = time.perf_counter(), time.process_time()
                ts = clock.now()
                prepared = tablet.prepare_write(WriteOp(types, b, mask), ts, replay=replay)
                res = tablet.apply_write(prepared, index)
                secs += time.perf_counter() - t0
                cpu += time.process_time() - c0
                if prof is not None:
                    prof.disable()
                assert not res.row_errors, (name, res.row_errors[:3])
            print(
                f"  {name:<44} {label:<8} {len(part):>8,} rows {secs:7.3f} s wall {cpu:7.3f} s cpu "
                f"{len(part) / cpu:>11,.0f} rows/s (cpu)",
                flush=True,
            )
            if prof is not None:
                pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
                prof.clear()
        return 0.0

    existing = np.arange(0, 2 * n, 2, dtype=np.int64)
    index = insert_all(tablet, clock, (batch_of(existing[s : s + bs]) for s in range(0, n, bs)))
    tablet.flush_mrs()
    print(
        f"ops: {n:,} even keys flushed to {len(tablet.rowsets())} DiskRowSets; batches of {bs:,} rows "
        f"(sync={args.sync})",
        flush=True,
    )
    m = min(n, args.ops_rows)
    sample = np.sort(rng.choice(existing, m, replace=False))
    run("(i) insert fresh keys inside the DRS ranges", OpType.INSERT, existing[:m] + 1)
    above = np.arange(2 * n, 2 * n + m, dtype=np.int64)
    run("(i') insert fresh keys above the DRS ranges", OpType.INSERT, above)
    run("(ii') upsert keys still in the MemRowSet", OpType.UPSERT, above)
    tablet.flush_mrs()
    print(f"    (flushed: {len(tablet.rowsets())} DiskRowSets)", flush=True)
    run("(ii) upsert existing keys (all columns)", OpType.UPSERT, sample)
    run("(iii) update existing keys (1 column)", OpType.UPDATE, sample, np.array([True, True, False, False]))
    run("(iv) delete existing keys", OpType.DELETE, sample)
    run("(v) insert the deleted keys again", OpType.INSERT, sample)
    compact_all(tablet)
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


def insert_all(tablet: Tablet, clock: HybridClock, batches: Iterable[pa.RecordBatch]) -> int:
    """Insert ``batches``, one write each at log indexes 1, 2, ...; returns the last index."""
    index = 0
    for b in batches:
        index += 1
        res = tablet.write(WriteOp(np.full(b.num_rows, OpType.INSERT, dtype=np.int64), b), clock.now(), index)
        assert not res.row_errors
    return index


def compact_all(tablet: Tablet) -> None:
    """(vi) of --ops: flush everything, then compact all rowsets with their deltas, timed."""
    tablet.flush_all()
    deltas = sum(d.num_delta_rows_on_disk() for d in tablet.rowsets())
    rows_before = sum(d.num_rows() for d in tablet.rowsets())
    c0, t0 = time.process_time(), time.perf_counter()
    tablet.compact_rowsets()  # every delta is newer than the AHM (7 days of history): all carried over
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(
        f"  (vi) compact all {rows_before:,} rows with {deltas:,} deltas: {wall:.3f} s wall {cpu:.3f} s cpu "
        f"{rows_before / cpu:,.0f} rows/s (cpu)",
        flush=True,
    )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=None, help="default 5,000,000 (400,000 with --ops)")
    ap.add_argument("--batch", type=int, default=None, help="default 1,000 (20,000 with --ops)")
    ap.add_argument("--ops", action="store_true", help="write paths against DiskRowSets (see above)")
    ap.add_argument("--ops-rows", type=int, default=200_000, help="--ops: rows per measured operation")
    ap.add_argument("--rowset-mb", type=int, default=4, help="--ops: target DiskRowSet size")
    ap.add_argument("--profile", type=int, default=0, help="--ops: print the top N cProfile entries per phase")
    ap.add_argument("--lookups", type=int, default=20_000)
    ap.add_argument("--flush-mb", type=int, default=64)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--sync", action="store_true", help="fsync files (default off: measure the engine)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    if args.ops:
        args.rows = args.rows or 400_000
        args.batch = args.batch or 20_000
        ops_bench(args)
        return
    args.rows = args.rows or 5_000_000
    args.batch = args.batch or 1000
    root = args.dir or tempfile.mkdtemp(prefix="kudu-bench-tablet-")
    schema = make_schema()
    arrow = schema.to_arrow()
    opts = TabletOptions(flush_threshold_bytes=args.flush_mb << 20, sync=args.sync)
    clock = HybridClock()
    tablet = Tablet.create(os.path.join(root, "tablet"), schema, tablet_id="bench", options=opts, clock=clock)
    mm = MaintenanceManager(num_threads=1, polling_interval_s=0.05, memory_threshold_bytes=opts.flush_threshold_bytes)
    mm.register(tablet)
    mm.start()
    rng = np.random.default_rng(1)
    anon = AnonPeak()
    print(f"dir={root} rows={args.rows} batch={args.batch} flush_threshold={args.flush_mb} MiB sync={args.sync}")

    # (a) inserts
    write_s = 0.0
    wall0 = time.perf_counter()
    index = 0
    op_types = np.full(args.batch, OpType.INSERT, dtype=np.int64)
    for start in range(0, args.rows, args.batch):
        n = min(args.batch, args.rows - start)
        b = make_batch(arrow, start, n, rng)
        index += 1
        t0 = time.perf_counter()
        res = tablet.write(WriteOp(op_types[:n], b), clock.now(), index)
        write_s += time.perf_counter() - t0
        assert not res.row_errors
    wall = time.perf_counter() - wall0
    print(
        f"(a) insert: {args.rows / write_s:,.0f} rows/s in write calls, {args.rows / wall:,.0f} rows/s wall "
        f"(incl. row generation); rowsets={len(tablet.rowsets())} "
        f"mrs_bytes={tablet.mrs_memory_bytes() >> 20} MiB "
        f"peak rss={rss_mb():.0f} MiB, peak anon={anon.mb():.0f} MiB"
    )
    mm.stop()
    flushed_max = max((int.from_bytes(r.max_key, "big") ^ (1 << 63) for r in tablet.rowsets()), default=-1)

    lookup_phase(tablet, arrow, args.rows, args.lookups, flushed_max)

    # (c) scan with predicate on a non-key column, 2 of 4 columns
    tablet.flush_mrs()
    timed_scan(tablet)
    secs, matched = timed_scan(tablet)
    scan_rate = args.rows / secs
    print(f"(c) scan: {scan_rate:,.0f} rows/s ({matched} matched, {secs:.3f} s)")
    print(
        f"    peak so far (before the Parquet comparison loads a full copy): rss={rss_mb():.0f} MiB "
        f"anon={anon.mb():.0f} MiB"
    )

    pq_rate = parquet_rate(tablet, root, args.rows)
    print(f"    plain Parquet scan: {pq_rate:,.0f} rows/s; ratio tablet/parquet = {scan_rate / pq_rate:.2f}")

    # (d) 10% of rows updated, deltas not compacted
    n_upd, upd_s = update_phase(tablet, arrow, args.rows, args.batch, rng, clock, index)
    while tablet.flush_dms():
        pass
    timed_scan(tablet)
    secs, matched = timed_scan(tablet)
    print(
        f"(d) scan with 10% updated ({n_upd} updates at {n_upd / upd_s:,.0f} rows/s, flushed to delta files, "
        f"not compacted): {args.rows / secs:,.0f} rows/s ({matched} matched); ratio to parquet "
        f"{args.rows / secs / pq_rate:.2f}"
    )
    print(f"(e) peak RSS: {rss_mb():.0f} MiB (anon {anon.mb():.0f} MiB); data on disk {du(root) >> 20} MiB")
    print(
        "maintenance history:",
        [(h["name"], h["result"], h["duration_s"]) for h in mm.status()["history"]][:8],
    )
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


def lookup_phase(tablet: Tablet, arrow: pa.Schema, rows: int, lookups: int, flushed_max: int) -> None:
    """(b) point lookups: half on flushed rows, half in the MemRowSet."""
    info = tablet.info

    def key_of(k: int) -> bytes:
        return info.encode_keys(
            pa.record_batch(
                [pa.array([k], pa.int64()), pa.array([0], pa.int32()), pa.array([0.0]), pa.array([""])],
                schema=arrow,
            )
        )[0]

    lat: list[float] = []
    hits = 0
    for i in range(lookups):
        if i % 2 == 0 and flushed_max >= 0:
            k = random.randint(0, flushed_max)
        else:
            k = random.randint(flushed_max + 1, rows - 1) if flushed_max + 1 < rows else random.randint(0, rows - 1)
        kb = key_of(k)
        t0 = time.perf_counter()
        row = tablet.lookup(kb)
        lat.append(time.perf_counter() - t0)
        hits += row is not None
    print(
        f"(b) lookup: p50={pct(lat, 0.5) * 1e6:.0f} us p99={pct(lat, 0.99) * 1e6:.0f} us "
        f"({hits}/{lookups} found; flushed up to key {flushed_max})"
    )


def parquet_rate(tablet: Tablet, root: str, rows: int) -> float:
    """Rows/s of plain pyarrow running (c)'s scan over one Parquet file holding the same data."""
    full = tablet.scan(ScanSpec(projection=["key", "i32", "d", "s"])).to_table()
    pq_path = os.path.join(root, "plain.parquet")
    assert full is not None
    pq.write_table(full, pq_path)
    del full
    best = None
    for _ in range(2):
        t0 = time.perf_counter()
        t = pq.read_table(pq_path, columns=["key", "i32", "d"])
        t = t.filter(pc.less(t.column("i32"), 500)).select(["key", "d"])
        el = time.perf_counter() - t0
        best = el if best is None else min(best, el)
    assert best is not None
    return rows / best


def update_phase(
    tablet: Tablet, arrow: pa.Schema, rows: int, batch: int, rng: np.random.Generator, clock: HybridClock, index: int
) -> tuple[int, float]:
    """(d) update one column of 10% of the rows, after log index ``index``; returns (updates, seconds)."""
    n_upd = rows // 10
    upd_keys = np.sort(rng.choice(rows, n_upd, replace=False))
    set_cols = np.zeros((batch, 4), dtype=bool)
    set_cols[:, 1] = True
    upd_types = np.full(batch, OpType.UPDATE, dtype=np.int64)
    t0 = time.perf_counter()
    for s in range(0, n_upd, batch):
        ks = upd_keys[s : s + batch]
        n = len(ks)
        b = pa.record_batch(
            [
                pa.array(ks),
                pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
                pa.array(np.zeros(n)),
                pa.array([""] * n),
            ],
            schema=arrow,
        )
        index += 1
        res = tablet.write(WriteOp(upd_types[:n], b, set_cols[:n]), clock.now(), index)
        assert not res.row_errors, res.row_errors[:3]
    return n_upd, time.perf_counter() - t0


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


if __name__ == "__main__":
    main()
