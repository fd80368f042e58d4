"""Event-loop lag while maintenance ops run: where a flush or compaction holds the GIL.

    python scripts/bench/maintenance.py [--rows 2000000] [--switch-ms 5] [--top 12] [--reads]

One Tablet (no network) gets ``--rows`` random int64 keys in 100,000-row batches, then each maintenance
op runs in a worker thread, as the maintenance manager runs it, while this thread's asyncio loop sleeps
1 ms over and over and records how late it wakes (the ``event_loop_lag_ms`` probe of a node): the MemRowSet
flush, a second overlapping load's flush, DeltaMemStore flushes of 10 % updated rows, a minor delta
compaction and a merging compaction of every rowset. Per op: wall time and lag p50/p99/max; then the
worker's stack at each wake later than ``--stall-ms``, summed by source line: the stretch that held the GIL
ends where the worker let it go, so the line named is where a long C call returned or Python looped.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from kudu_async.common import key_encoding
from kudu_async.common.clock import HybridClock
from kudu_async.common.schema import Schema
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.tablet import Tablet, TabletOptions

FIELDS = [
    pa.field("key", pa.int64(), False),
    pa.field("a", pa.int64(), True),
    pa.field("b", pa.string(), True),
    pa.field("c", pa.float64(), True),
]
ARROW = pa.schema(FIELDS)


def batch_of(keys: np.ndarray) -> pa.RecordBatch:
    b = pa.array(np.char.add("name-", keys.astype(str)).astype(object), pa.string())
    return pa.record_batch([pa.array(keys), pa.array(keys % 1000), b, pa.array(keys * 0.5)], schema=ARROW)


class Writer:
    def __init__(self, tablet: Tablet, clock: HybridClock) -> None:
        self.tablet, self.clock, self.index = tablet, clock, 0

    def write(self, op_type: int, keys: np.ndarray, set_cols: np.ndarray | None = None, bs: int = 100_000) -> None:
        for s in range(0, len(keys), bs):
            b = batch_of(keys[s : s + bs])
            self.index += 1
            mask = None if set_cols is None else np.repeat(set_cols[None, :], b.num_rows, axis=0)
            types = np.full(b.num_rows, op_type, dtype=np.int64)
            res = self.tablet.write(WriteOp(types, b, mask), self.clock.now(), self.index)
            assert not res.row_errors, res.row_errors[:3]


READER: dict[str, Any] = {}  # "lookup": a point read of one random loaded key, run on the loop


async def probe(stop: threading.Event, worker: list[int], stall_ms: float, out: dict[str, Any]) -> None:
    """Sleep 1 ms at a time; record each wake's lateness and, past ``stall_ms``, the worker's stack;
    with ``--reads`` also a point read after each wake, timed (as a tserver answers one on its loop)."""
    lags: list[float] = []
    reads: list[float] = []
    stacks: collections.Counter[str] = collections.Counter()
    worst: dict[str, float] = {}
    lookup = READER.get("lookup")
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lag = (time.perf_counter() - t0) * 1000.0 - 1.0
        lags.append(lag)
        if lookup is not None:
            r0 = time.perf_counter()
            lookup()
            reads.append((time.perf_counter() - r0) * 1000.0)
        if lag > stall_ms and worker:
            frame = sys._current_frames().get(worker[0])
            if frame is not None:
                fs = traceback.extract_stack(frame)
                own = [f for f in fs if "kudu_async" in f.filename] or fs
                where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in own[-1:-4:-1])
                stacks[where] += 1
                worst[where] = max(worst.get(where, 0.0), lag)
    out["lags"], out["reads"], out["stacks"], out["worst"] = lags, reads, stacks, worst


def run_op(name: str, fn: Callable[[], object], stall_ms: float, top: int) -> None:
    stop = threading.Event()
    worker: list[int] = []
    out: dict[str, Any] = {}
    err: list[BaseException] = []

    def body() -> None:
        worker.append(threading.get_ident())
        try:
            fn()
        except BaseException as e:
            err.append(e)
        finally:
            stop.set()

    async def main() -> float:
        t0 = time.perf_counter()
        th = threading.Thread(target=body)
        task = asyncio.ensure_future(probe(stop, worker, stall_ms, out))
        th.start()
        await task
        th.join()
        return time.perf_counter() - t0

    wall = asyncio.run(main())
    if err:
        raise err[0]
    lags = np.array(out["lags"] or [0.0])
    print(
        f"{name:<44} {wall:7.2f} s  lag p50 {np.percentile(lags, 50):6.2f} p99 {np.percentile(lags, 99):7.2f} "
        f"max {lags.max():7.1f} ms  wakes>{stall_ms:g}ms {int((lags > stall_ms).sum())}",
        flush=True,
    )
    if out["reads"]:
        reads = np.array(out["reads"])
        print(
            f"    point reads on the loop: {len(reads):,}  p50 {np.percentile(reads, 50):6.2f} "
            f"p99 {np.percentile(reads, 99):7.2f} max {reads.max():7.1f} ms"
        )
    for where, n in out["stacks"].most_common(top):
        print(f"    {n:5d} x  worst {out['worst'][where]:7.1f} ms  {where}")


def carry_over_phase(tablet: Tablet, w: Writer, keys: np.ndarray, set_cols: np.ndarray, args: Any) -> None:
    """A merging compaction while another thread updates 10,000-row batches: the mutations that arrive
    meanwhile are carried over to the outputs under the tablet's component lock; that step is timed."""
    from kudu_async.tablet import rowset_maintenance

    cls: Any = rowset_maintenance.RowSetMaintenance
    name = "_carry_over_late_locked" if hasattr(cls, "_carry_over_late_locked") else "_carry_over_locked"
    orig = getattr(cls, name)
    spent: list[tuple[int, float]] = []

    def count(item: Any) -> int:
        if hasattr(item, "store"):  # a store's late mutations, carried over column-wise
            chunks, singles = item.store.late_parts(item.min_seq)
            return int(sum(c[0].num_rows for c in chunks)) + len(singles)
        return 1  # one Mutation

    def timed(self: Any, items: Any, *rest: Any) -> None:
        items = list(items)
        t0 = time.perf_counter()
        orig(self, items, *rest)
        spent.append((sum(count(i) for i in items), time.perf_counter() - t0))

    setattr(cls, name, timed)
    stop = threading.Event()
    rng = np.random.default_rng(3)

    def updater() -> None:
        while not stop.is_set():
            w.write(OpType.UPDATE, np.sort(rng.choice(keys, 10_000, replace=False)), set_cols, bs=10_000)

    def compact() -> None:
        th = threading.Thread(target=updater)
        th.start()
        try:
            tablet.compact_rowsets()
        finally:
            stop.set()
            th.join()

    try:
        run_op("merging compaction + concurrent updates", compact, args.stall_ms, args.top)
    finally:
        setattr(cls, name, orig)
    for n, secs in spent:
        print(f"    carried over {n:,} mutations under the component lock in {secs * 1000:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--switch-ms", type=float, default=5.0, help="sys.setswitchinterval, in ms (Python's default 5)")
    ap.add_argument("--stall-ms", type=float, default=2.0)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--reads", action="store_true", help="a point read on the loop after each probe wake")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    sys.setswitchinterval(args.switch_ms / 1000.0)
    root = args.dir or tempfile.mkdtemp(prefix="kudu-bench-maint-")
    schema = Schema.from_arrow(ARROW, num_key_columns=1)
    opts = TabletOptions(sync=False, flush_threshold_bytes=1 << 40)
    clock = HybridClock()
    tablet = Tablet.create(os.path.join(root, "tablet"), schema, tablet_id="maint", options=opts, clock=clock)
    w = Writer(tablet, clock)
    rng = np.random.default_rng(7)
    n = args.rows
    keys = rng.permutation(np.arange(0, 4 * n, 2, dtype=np.int64))
    first, second = keys[:n], keys[n : n + n // 2]
    print(f"rows={n:,} switchinterval={args.switch_ms:g} ms dir={root}", flush=True)
    w.write(OpType.INSERT, first)
    if args.reads:
        pick = rng.permutation(first)[:100_000]
        encoded = [key_encoding.encode_key(schema, [int(k)]) for k in pick]
        count = [0]

        def lookup() -> None:
            count[0] += 1
            row = tablet.lookup(encoded[count[0] % len(encoded)])
            assert row is not None

        READER["lookup"] = lookup
    run_op(f"flush MemRowSet ({n:,} random keys)", tablet.flush_mrs, args.stall_ms, args.top)
    w.write(OpType.INSERT, second)
    run_op(f"flush MemRowSet ({len(second):,}, overlapping)", tablet.flush_mrs, args.stall_ms, args.top)
    print(f"  rowsets: {len(tablet.rowsets())}", flush=True)
    upd = np.sort(rng.choice(first, n // 10, replace=False))
    set_cols = np.array([False, True, False, True])
    for r in range(3):
        w.write(OpType.UPDATE, upd, set_cols)
        run_op(f"flush DeltaMemStores (round {r + 1})", tablet.flush_all, args.stall_ms, args.top)
    most = max(tablet.rowsets(), key=lambda d: len(d.delta_tables))
    run_op(
        f"minor delta compaction ({len(most.delta_tables)} files)",
        lambda: tablet.minor_delta_compaction(most.id),
        args.stall_ms,
        args.top,
    )
    w.write(OpType.UPDATE, upd[::3], set_cols)  # a DeltaMemStore the compaction freezes and carries over
    run_op(
        f"merging compaction ({len(tablet.rowsets())} rowsets)",
        lambda: tablet.compact_rowsets(),
        args.stall_ms,
        args.top,
    )
    print(f"  rowsets: {len(tablet.rowsets())}", flush=True)
    carry_over_phase(tablet, w, first, set_cols, args)
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
