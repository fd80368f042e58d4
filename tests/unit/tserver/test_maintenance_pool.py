"""Flush and compaction outputs written by worker processes: the same files as in-process, and a worker
that dies mid-flush costs a retry, never data."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.errors import KuduIOError
from kudu_async.fs.block_manager import BlockManager
from kudu_async.tablet.diskrowset import write_rowsets
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.maintenance_worker import discard_spool, prepare_rowset_write, run_rowset_write
from kudu_async.tablet.ops import LoggedWrite, OpType, WriteOp
from kudu_async.tablet.rowset_file import ParquetBase
from kudu_async.tablet.schema_info import SchemaInfo
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions
from kudu_async.tserver.maintenance_pool import MaintenanceProcessPool
from tests.unit.tablet.tablet_testkit import make_schema


@pytest.fixture(scope="module")
def pool() -> Iterator[MaintenanceProcessPool]:
    p = MaintenanceProcessPool(1, nice=5)
    p.start()
    try:
        yield p
    finally:
        p.shutdown()


def _batch(keys: list[int], base: int) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(keys, pa.int64()),
            pa.array([k + base for k in keys], pa.int32()),
            pa.array([k * 0.5 for k in keys]),
            pa.array([f"name-{k}" for k in keys]),
        ],
        schema=make_schema().to_arrow(),
    )


class _Writes:
    """Writes to a tablet, logged so a reopen can replay what is not flushed."""

    def __init__(self, tablet: Tablet, clock: ManualHybridClock) -> None:
        self.tablet, self.clock, self.log = tablet, clock, list[LoggedWrite]()
        self.model: dict[int, int] = {}

    def apply(self, t: OpType, keys: list[int], base: int) -> None:
        self.clock.advance(100)
        op = WriteOp([t] * len(keys), _batch(keys, base))
        index = len(self.log) + 1
        self.log.append(LoggedWrite(index, self.clock.now(), op))
        assert self.tablet.write(op, self.clock.now(), index).row_errors == []
        for k in keys:
            self.model[k] = k + base


def _scan(tablet: Tablet) -> dict[int, int]:
    t = tablet.scan(ScanSpec(projection=["key", "i32"], ordered=True)).to_table()
    return {} if t is None else dict(zip(t.column("key").to_pylist(), t.column("i32").to_pylist(), strict=True))


def test_worker_writes_the_rowsets_the_in_process_path_writes(tmp_path: Any, pool: MaintenanceProcessPool) -> None:
    info = SchemaInfo(make_schema().with_column_ids())
    keys = list(range(0, 30_000, 3))
    rows = pa.Table.from_batches([_batch(keys, 7)])
    rows = rows.append_column("_key", info.encode_keys_array(rows))
    rows = rows.append_column("_ts", pa.array([5] * len(keys), pa.uint64()))
    deltas = pa.table(
        {
            "_row": pa.array([2, 4000, 9999], pa.uint32()),
            "_ts": pa.array([9, 9, 9], pa.uint64()),
            "_seq": pa.array([1, 2, 3], pa.uint64()),
        }
    )
    bm = BlockManager([str(tmp_path / "data")], sync=False)
    target = rows.nbytes // 3  # several rowsets, each delta in its own
    mine = write_rowsets(bm, info, rows, deltas, 100, target)
    work = prepare_rowset_write(info, bm, rows, deltas, 100, target, str(tmp_path))
    try:
        theirs = pool(work)
        assert run_rowset_write(work) != []  # the work is plain data: it runs here as well
    finally:
        discard_spool(work)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".arrow")]
    assert len(mine) == len(theirs) > 1
    for a, b in zip(mine, theirs, strict=True):
        assert (a.id, a.num_rows, a.min_key_hex, a.max_key_hex, a.max_ts) == (
            b.id,
            b.num_rows,
            b.min_key_hex,
            b.max_key_hex,
            b.max_ts,
        )
        assert len(a.delta_blocks) == len(b.delta_blocks)
        base_a = ParquetBase(bm.path(a.base_block), info, None).read_all()
        base_b = ParquetBase(bm.path(b.base_block), info, None).read_all()
        assert base_a.equals(base_b)
        for blocks in ((a.bloom_block, b.bloom_block), *zip(a.delta_blocks, b.delta_blocks, strict=True)):
            with open(bm.path(blocks[0]), "rb") as fa, open(bm.path(blocks[1]), "rb") as fb:
                assert fa.read() == fb.read()


def test_flush_and_compaction_through_worker_processes(tmp_path: Any, pool: MaintenanceProcessPool) -> None:
    clock = ManualHybridClock(10**12)
    opts = TabletOptions(sync=False, target_rowset_bytes=20_000, rowset_writer=pool)
    tablet = Tablet.create(str(tmp_path / "t"), make_schema(), options=opts, clock=clock)
    w = _Writes(tablet, clock)
    w.apply(OpType.INSERT, list(range(0, 2000, 2)), 1)
    assert tablet.flush_mrs()
    w.apply(OpType.INSERT, list(range(1, 2000, 2)), 2)
    w.apply(OpType.UPDATE, list(range(0, 2000, 10)), 3)  # deltas of flushed rows
    assert tablet.flush_mrs()
    assert len(tablet.rowsets()) > 2
    assert tablet.compact_rowsets([d.id for d in tablet.rowsets()])
    assert _scan(tablet) == w.model
    assert not [n for n in os.listdir(pool.spool_dir) if n.startswith(f"rowset-write-{os.getpid()}-")]
    reopened = Tablet.open(str(tmp_path / "t"), log_ops=w.log, options=opts, clock=clock)
    assert _scan(reopened) == w.model


def test_a_worker_killed_mid_flush_leaves_the_tablet_intact_and_the_op_is_retried(tmp_path: Any) -> None:
    pool = MaintenanceProcessPool(1)
    try:
        pool.start()
        clock = ManualHybridClock(10**12)
        opts = TabletOptions(sync=False, rowset_writer=pool)
        tablet = Tablet.create(str(tmp_path / "t"), make_schema(), options=opts, clock=clock)
        w = _Writes(tablet, clock)
        w.apply(OpType.INSERT, list(range(500)), 1)
        assert tablet.flush_mrs()  # the worker is up
        [pid] = pool.worker_pids()
        assert pool.anon_bytes() > 10 * 1024 * 1024  # its modules at least: counted in the node's memory
        w.apply(OpType.INSERT, list(range(500, 1000)), 1)
        os.kill(pid, signal.SIGKILL)  # the next flush's write finds its worker dead
        mm = MaintenanceManager(memory_threshold_bytes=1)
        mm.register(tablet)
        assert mm.poll_once(run_inline=True) is not None
        [failed] = mm.status()["history"]
        assert failed["name"] == "FlushMRSOp" and failed["result"].startswith("ERROR")
        assert "worker process died" in failed["result"]
        assert pool.restarts == 1
        assert _scan(tablet) == w.model  # the frozen MemRowSet still answers
        assert len(tablet.rowsets()) == 1
        w.apply(OpType.UPDATE, [600, 700], 5)  # and takes mutations of its rows
        pool.start()  # the replacement workers are up (until then writes would run in this thread)
        assert mm.poll_once(run_inline=True) is not None  # the retry, in a fresh worker
        assert mm.status()["history"][-1]["result"] == "OK"
        assert pool.worker_pids() and pool.worker_pids() != [pid]
        assert pool.in_thread == 0
        assert len(tablet.rowsets()) == 2 and tablet.mrs_memory_bytes() == 0
        assert _scan(tablet) == w.model
        reopened = Tablet.open(str(tmp_path / "t"), log_ops=w.log, options=opts, clock=clock)
        assert _scan(reopened) == w.model
    finally:
        pool.shutdown()


def test_pool_rejects_bad_settings_and_work_after_shutdown(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        MaintenanceProcessPool(0)
    with pytest.raises(ValueError, match="nice value"):
        MaintenanceProcessPool(1, nice=20)
    pool = MaintenanceProcessPool(1)
    pool.shutdown()
    info = SchemaInfo(make_schema().with_column_ids())
    rows = pa.Table.from_batches([_batch([1], 0)])
    rows = rows.append_column("_key", info.encode_keys_array(rows))
    rows = rows.append_column("_ts", pa.array([5], pa.uint64()))
    work = prepare_rowset_write(info, BlockManager([str(tmp_path)], sync=False), rows, None, 1, 1 << 20, str(tmp_path))
    try:
        with pytest.raises(KuduIOError, match="shut down"):
            pool(work)
    finally:
        discard_spool(work)


def test_writes_run_in_the_calling_thread_until_the_workers_are_up(tmp_path: Any) -> None:
    pool = MaintenanceProcessPool(1)
    try:
        clock = ManualHybridClock(10**12)
        tablet = Tablet.create(
            str(tmp_path / "t"), make_schema(), options=TabletOptions(sync=False, rowset_writer=pool), clock=clock
        )
        w = _Writes(tablet, clock)
        w.apply(OpType.INSERT, list(range(100)), 1)
        assert tablet.flush_mrs()  # no worker yet: written here, and the workers start meanwhile
        assert pool.in_thread == 1
        assert _scan(tablet) == w.model
        pool.start()
        w.apply(OpType.INSERT, list(range(100, 200)), 1)
        assert tablet.flush_mrs()
        assert pool.in_thread == 1 and pool.worker_pids()
        assert _scan(tablet) == w.model
    finally:
        pool.shutdown()
