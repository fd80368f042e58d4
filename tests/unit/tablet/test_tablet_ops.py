"""Write operations, their per-row errors, MVCC visibility, row locks, flush races and crash safety."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.errors import KuduInvalidArgument, KuduTimedOut
from kudu_async.common.mem_tracker import MemTracker
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.tablet import compaction, diskrowset
from kudu_async.tablet import rowset_maintenance as maintenance_mod
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.ops import LoggedWrite, OpType, WouldBlock, WriteOp
from kudu_async.tablet.tablet import READ_AT_SNAPSHOT, ScanSpec, Tablet, TabletOptions
from tests.unit.tablet.tablet_testkit import encode_key

INS, U, D, UP = OpType.INSERT, OpType.UPDATE, OpType.DELETE, OpType.UPSERT


class Harness:
    """A tablet plus its own log of writes, so it can be crashed and reopened."""

    def __init__(self, path: str, schema: Any, tablet_id: str = "t", **opts: Any) -> None:
        self.path, self.schema = path, schema
        self.clock = ManualHybridClock(10**12)
        self.opts = TabletOptions(sync=False, **opts)
        self.tablet = Tablet.create(path, schema, tablet_id=tablet_id, options=self.opts, clock=self.clock)
        self.wal: list[LoggedWrite] = []

    def batch(self, keys: list[Any], i32: list[Any] | None = None, s: list[Any] | None = None) -> pa.RecordBatch:
        n = len(keys)
        return pa.record_batch(
            [
                pa.array(keys, pa.int64()),
                pa.array(i32 or [k * 10 for k in keys], pa.int32()),
                pa.array([0.5] * n),
                pa.array(s or [f"v{k}" for k in keys]),
            ],
            schema=self.schema.to_arrow(),
        )

    def op(self, types: list[int], keys: list[Any], **kw: Any) -> WriteOp:
        mask = kw.pop("mask", None)
        return WriteOp(types, self.batch(keys, **kw), mask)

    def write(self, types: list[int], keys: list[Any], **kw: Any) -> Any:
        op = self.op(types, keys, **kw)
        self.clock.advance(10)
        ts = self.clock.now()
        self.wal.append(LoggedWrite(len(self.wal) + 1, ts, op))
        return self.tablet.write(op, ts, len(self.wal))

    def rows(self, **kw: Any) -> list[tuple[Any, ...]]:
        t = self.tablet.scan(ScanSpec(ordered=True, **kw)).to_table()
        return [] if t is None else list(zip(*[t.column(c).to_pylist() for c in t.column_names], strict=True))

    def reopen(self) -> None:
        # The tablet rebuilds its schema from its own metadata, as a tserver would.
        self.tablet = Tablet.open(self.path, log_ops=list(self.wal), options=self.opts, clock=self.clock)


@pytest.fixture
def h(tmp_path: Any, schema: Any) -> Harness:
    return Harness(str(tmp_path / "t"), schema)


def codes(res: Any) -> dict[int, str]:
    return {e.row_index: e.code for e in res.row_errors}


def test_insert_of_present_key_is_already_present_and_insert_ignore_is_counted(h: Harness) -> None:
    h.write([INS], [1])
    res = h.write([INS, OpType.INSERT_IGNORE, INS], [1, 1, 2])
    assert codes(res) == {0: "ALREADY_PRESENT"}
    assert (res.inserted, res.ignored) == (1, 1)


def test_update_and_delete_of_missing_key_are_not_found_unless_ignore(h: Harness) -> None:
    res = h.write([U, D, OpType.UPDATE_IGNORE, OpType.DELETE_IGNORE], [5, 6, 7, 8])
    assert codes(res) == {0: "NOT_FOUND", 1: "NOT_FOUND"}
    assert res.ignored == 2


def test_null_key_is_invalid_argument_for_that_row_only(h: Harness) -> None:
    res = h.write([INS, INS], [None, 3], i32=[0, 30])
    assert codes(res) == {0: "INVALID_ARGUMENT"}
    assert h.rows(projection=["key"]) == [(3,)]


def test_batch_with_wrong_columns_is_rejected(h: Harness) -> None:
    bad = pa.record_batch([pa.array([1], pa.int64())], names=["key"])
    with pytest.raises(KuduInvalidArgument, match="do not match"):
        h.tablet.prepare_write(WriteOp([INS], bad), h.clock.now())


@pytest.mark.parametrize("flush", [False, True])
def test_reinsert_after_delete(h: Harness, flush: bool) -> None:
    h.write([INS], [1], s=["first"])
    if flush:
        h.tablet.flush_mrs()
    h.write([D], [1])
    assert h.rows() == []
    res = h.write([INS], [1], s=["second"])
    assert codes(res) == {}
    assert h.rows(projection=["key", "s"]) == [(1, "second")]
    h.tablet.flush_all()
    h.reopen()
    assert h.rows(projection=["key", "s"]) == [(1, "second")]


def test_upsert_of_partial_row_changes_only_set_columns(h: Harness) -> None:
    h.write([INS], [1], i32=[7], s=["keep"])
    h.tablet.flush_mrs()
    mask = np.array([[True, True, False, False]])
    h.write([UP], [1], i32=[8], s=["ignored"], mask=mask)
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 8, "keep")]


def test_prepared_op_is_invisible_until_applied(h: Harness) -> None:
    p = h.tablet.prepare_write(h.op([INS], [1]), h.clock.now())
    assert h.rows() == []
    h.tablet.apply_write(p, 1)
    assert len(h.rows()) == 1


def test_snapshot_scan_waits_for_in_flight_ops_at_or_before_it(h: Harness) -> None:
    ts = h.clock.now()
    p = h.tablet.prepare_write(h.op([INS], [1]), ts)
    with pytest.raises(KuduTimedOut):
        h.tablet.scan(ScanSpec(read_mode=READ_AT_SNAPSHOT, snapshot_ts=ts, snapshot_wait_s=0.05))
    h.tablet.apply_write(p, 1)
    t = h.tablet.scan(ScanSpec(read_mode=READ_AT_SNAPSHOT, snapshot_ts=ts)).to_table()
    assert t is not None and t.num_rows == 1


def test_row_locks_serialise_ops_on_one_key_and_abort_releases_them(h: Harness) -> None:
    a = h.tablet.prepare_write(h.op([INS], [1]), h.clock.now())
    with pytest.raises(KuduTimedOut):
        h.tablet.prepare_write(h.op([U], [1]), h.clock.now(), lock_timeout_s=0)
    h.tablet.abort_write(a)
    b = h.tablet.prepare_write(h.op([INS], [1]), h.clock.now(), lock_timeout_s=0)
    h.tablet.apply_write(b, 1)
    assert h.tablet.mvcc.in_flight() == []


def test_blocked_writer_proceeds_when_the_lock_holder_applies(h: Harness) -> None:
    a = h.tablet.prepare_write(h.op([INS], [1]), h.clock.now())
    out: list[Any] = []
    ts2 = h.clock.now()
    th = threading.Thread(
        target=lambda: out.append(h.tablet.apply_write(h.tablet.prepare_write(h.op([U], [1], i32=[99]), ts2), 2))
    )
    th.start()
    h.tablet.apply_write(a, 1)
    th.join(5)
    assert codes(out[0]) == {}
    assert h.rows(projection=["i32"]) == [(99,)]


class _HeldLock:
    """The tablet's component lock held by another thread, as a flush holds it while it commits."""

    def __init__(self, tablet: Tablet) -> None:
        self._lock = tablet._c.lock
        self._taken, self._release = threading.Event(), threading.Event()
        self._th = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        with self._lock:
            self._taken.set()
            self._release.wait(10)

    def __enter__(self) -> None:
        self._th.start()
        assert self._taken.wait(5)

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self._th.join(5)


def test_a_write_that_may_not_wait_refuses_where_it_would_wait_and_holds_nothing(h: Harness) -> None:
    with _HeldLock(h.tablet), pytest.raises(WouldBlock):
        h.tablet.prepare_write(h.op([INS], [1]), h.clock.now(), lock_timeout_s=0, wait=False)
    p = h.tablet.prepare_write(h.op([INS], [1]), h.clock.now(), lock_timeout_s=0, wait=False)
    assert h.tablet.mvcc.in_flight() == [p.timestamp]  # the refused attempt registered nothing
    with _HeldLock(h.tablet), pytest.raises(WouldBlock):
        h.tablet.apply_write(p, 1, wait=False)
    assert h.rows() == [] and p.state == "prepared"  # refused, still prepared: applied in a worker
    res = h.tablet.apply_write(p, 1, wait=False)
    assert res.inserted == 1 and len(h.rows()) == 1 and h.tablet.mvcc.in_flight() == []


def test_a_write_that_may_not_wait_refuses_to_probe_disk_rowsets(h: Harness) -> None:
    h.write([INS], [1])
    assert h.tablet.flush_mrs()
    with pytest.raises(WouldBlock):  # key 1 is in a DiskRowSet: deciding reads its key index
        h.tablet.prepare_write(h.op([U], [1], i32=[5]), h.clock.now(), lock_timeout_s=0, wait=False)
    h.write([U], [1], i32=[5])  # nothing was left locked
    assert h.rows(projection=["i32"]) == [(5,)]
    p = h.tablet.prepare_write(h.op([INS], [2]), h.clock.now(), lock_timeout_s=0, wait=False)  # past every rowset
    h.tablet.apply_write(p, 3, wait=False)
    assert [r[0] for r in h.rows()] == [1, 2]


def test_a_write_that_may_not_wait_is_not_applied_where_a_flush_moved_its_rows(h: Harness) -> None:
    h.write([INS], [1])
    p = h.tablet.prepare_write(h.op([U], [1], i32=[7]), h.clock.now(), lock_timeout_s=0, wait=False)
    assert h.tablet.flush_mrs()  # the row the update targets moved to disk since prepare
    with pytest.raises(WouldBlock):
        h.tablet.apply_write(p, 2, wait=False)
    h.tablet.apply_write(p, 2)  # in a worker: finds the row again
    assert h.rows(projection=["i32"]) == [(7,)]


def test_scan_resumes_after_last_key_and_bounds_batches(h: Harness) -> None:
    h.write([INS] * 50, list(range(50)))
    h.tablet.flush_mrs()
    h.write([INS] * 50, list(range(50, 100)))
    sc = h.tablet.scan(ScanSpec(projection=["key"], ordered=True, batch_bytes=200, limit=30))
    got = [b for b in sc]
    assert all(b.num_rows <= 25 for b in got)
    assert sum(b.num_rows for b in got) == 30
    assert sc.last_key == encode_key(h.schema, 29)
    rest = h.rows(projection=["key"], resume_after_key=sc.last_key)
    assert [r[0] for r in rest] == list(range(30, 100))


def test_predicates_and_key_bounds(h: Harness) -> None:
    h.write([INS] * 10, list(range(10)), s=[None if k % 3 == 0 else "x" for k in range(10)])
    h.tablet.flush_mrs()
    rows = h.rows(
        projection=["key"],
        predicates=[ColumnPredicate("s", "IS NULL")],
        lower_key=encode_key(h.schema, 1),
        upper_key=encode_key(h.schema, 9),
    )
    assert rows == [(3,), (6,)]


def test_snapshot_older_than_history_is_rejected(h: Harness) -> None:
    with pytest.raises(KuduInvalidArgument, match="ancient history"):
        h.tablet.scan(ScanSpec(read_mode=READ_AT_SNAPSHOT, snapshot_ts=1))


def test_writes_during_flush_are_carried_over_to_the_new_rowsets(h: Harness, monkeypatch: Any) -> None:
    h.write([INS] * 4, [1, 2, 3, 4])
    go, started = threading.Event(), threading.Event()
    real = diskrowset.write_rowsets

    def slow(*a: Any, **kw: Any) -> Any:
        started.set()
        go.wait(5)
        return real(*a, **kw)

    monkeypatch.setattr(maintenance_mod, "write_rowsets", slow)
    th = threading.Thread(target=h.tablet.flush_mrs)
    th.start()
    started.wait(5)
    h.write([U, D, D, INS, INS], [1, 2, 3, 3, 5], i32=[11, 0, 0, 33, 50])
    assert [r[:2] for r in h.rows()] == [(1, 11), (3, 33), (4, 40), (5, 50)]
    go.set()
    th.join(5)
    assert [r[:2] for r in h.rows()] == [(1, 11), (3, 33), (4, 40), (5, 50)]
    assert len(h.tablet.rowsets()) == 1
    h.reopen()
    assert [r[:2] for r in h.rows()] == [(1, 11), (3, 33), (4, 40), (5, 50)]


def test_failed_flush_keeps_rows_readable_and_is_retried(h: Harness, monkeypatch: Any) -> None:
    h.write([INS] * 3, [1, 2, 3])
    before = h.rows()

    def crash(*a: Any, **kw: Any) -> None:
        raise OSError("simulated crash")

    monkeypatch.setattr(maintenance_mod, "write_tablet_metadata", crash)
    with pytest.raises(OSError):
        h.tablet.flush_mrs()
    monkeypatch.undo()
    h.write([U], [1], i32=[111])  # the frozen MemRowSet still takes mutations of its keys
    assert h.tablet.flush_mrs()  # and a later flush retries it
    assert h.tablet.status()["flushing_mrs"] == 0
    h.reopen()
    assert [r[:2] for r in h.rows()] == [(1, 111), (2, 20), (3, 30)]
    assert before[0][:2] == (1, 10)


def test_crash_mid_flush_reopens_to_the_old_state_and_removes_orphans(h: Harness, monkeypatch: Any) -> None:
    h.write([INS] * 3, [1, 2, 3])
    before = h.rows()
    monkeypatch.setattr(maintenance_mod, "write_tablet_metadata", lambda *a, **kw: (_ for _ in ()).throw(OSError()))
    monkeypatch.setattr(h.tablet.bm, "delete_blocks", lambda ids: None)  # the process dies: no cleanup
    with pytest.raises(OSError):
        h.tablet.flush_mrs()
    monkeypatch.undo()
    blocks_dir = os.path.join(h.path, "data")
    assert os.listdir(blocks_dir)
    h.reopen()
    assert os.listdir(blocks_dir) == []  # orphans of the unfinished flush are removed on open
    assert h.rows() == before


def test_compaction_drops_history_and_deleted_rows_past_the_history_mark(tmp_path: Any, schema: Any) -> None:
    h = Harness(str(tmp_path / "t"), schema, history_max_age_sec=0.001)
    h.write([INS] * 4, [1, 2, 3, 4])
    h.tablet.flush_mrs()
    h.write([D, U], [1, 2], i32=[0, 22])
    h.tablet.flush_dms()
    h.clock.advance(1_000_000)
    assert h.tablet.compact_rowsets()
    (rs,) = h.tablet.rowsets()
    assert rs.num_rows() == 3 and rs.delta_tables == []
    assert [r[:2] for r in h.rows()] == [(2, 22), (3, 30), (4, 40)]


def test_maintenance_manager_flushes_under_memory_pressure_and_reports_json(tmp_path: Any, schema: Any) -> None:
    h = Harness(str(tmp_path / "t"), schema)
    h.write([INS] * 100, list(range(100)))
    mm = MaintenanceManager(memory_threshold_bytes=1000)
    mm.register(h.tablet)
    op = mm.poll_once(run_inline=True)
    assert op is not None and op.name == "FlushMRSOp"
    assert len(h.tablet.rowsets()) == 1
    status = json.loads(json.dumps(mm.status()))
    assert status["history"][0]["result"] == "OK"


def test_maintenance_manager_worker_threads_run_ops(tmp_path: Any, schema: Any) -> None:
    h = Harness(str(tmp_path / "t"), schema)
    h.write([INS] * 10, list(range(10)))
    mm = MaintenanceManager(num_threads=2, polling_interval_s=0.01, memory_threshold_bytes=1)
    mm.register(h.tablet)
    mm.start()
    try:
        for _ in range(200):
            if h.tablet.rowsets():
                break
            threading.Event().wait(0.01)
    finally:
        mm.stop()
    assert len(h.tablet.rowsets()) == 1


def test_lookup_after_flush_uses_bloom_and_key_index(h: Harness) -> None:
    h.write([INS] * 20, list(range(0, 40, 2)))
    h.tablet.flush_mrs()
    assert h.tablet.lookup(encode_key(h.schema, 4)) == {"key": 4, "i32": 40, "d": 0.5, "s": "v4"}
    assert h.tablet.lookup(encode_key(h.schema, 5)) is None
    assert diskrowset.TARGET_ROWSET_BYTES == 32 * 1024 * 1024


def test_maintenance_scores_memory_over_age_over_benefit(tmp_path: Any, schema: Any) -> None:
    # Height-based merges only: with the small-rowset credit the tiny disjoint rowset would join the merge.
    h = Harness(str(tmp_path / "t"), schema, compaction_small_rowset_tradeoff=0.0)
    mm = MaintenanceManager(memory_threshold_bytes=10**9, flush_age_s=120)
    h.write([INS] * 10, list(range(0, 20, 2)))
    h.tablet.flush_mrs()
    h.write([INS] * 10, list(range(1, 20, 2)))  # key range overlaps the first rowset's
    h.tablet.flush_mrs()
    mm.register(h.tablet)
    names = [op.name for _, op in mm.candidates()]
    assert names == ["CompactRowSetsOp"]  # no memory pressure, nothing old: only the read benefit
    h.write([INS], [100])
    h.tablet.components.mrs.created_at = time.monotonic() - 1000  # pretend the MemRowSet is old
    assert mm.candidates()[0][1].name == "FlushMRSOp"
    mm.poll_once(run_inline=True)
    mm.poll_once(run_inline=True)
    assert [h_["name"] for h_ in mm.status()["history"]] == ["FlushMRSOp", "CompactRowSetsOp"]
    assert len(h.tablet.rowsets()) == 2  # the two overlapping ones merged; the new one is disjoint
    assert [r[0] for r in h.rows(projection=["key"])] == [*range(20), 100]


def test_oversize_cell_is_invalid_argument_for_that_row_only(h: Harness) -> None:
    res = h.write([INS, INS, U], [1, 2, 3], s=["ok", "x" * (64 * 1024 + 1), "y"])
    assert codes(res) == {1: "INVALID_ARGUMENT", 2: "NOT_FOUND"}
    assert "s" in res.row_errors[0].message
    assert h.rows(projection=["key"]) == [(1,)]


def test_a_tablet_past_its_flush_threshold_flushes_without_node_memory_pressure(tmp_path: Any, schema: Any) -> None:
    """The per-tablet threshold (flush_threshold_mb) is the tablet's own: a small MemRowSet waits (no
    pressure, not old) even when the node holds several; one past its threshold flushes first."""
    small = Harness(str(tmp_path / "small"), schema, tablet_id="small")  # 64 MiB threshold
    big = Harness(str(tmp_path / "big"), schema, tablet_id="big", flush_threshold_bytes=5_000)
    small.write([INS] * 100, list(range(100)))
    big.write([INS] * 100, list(range(100)))
    assert small.tablet.mrs_memory_bytes() > 5_000  # the same size: only the thresholds differ
    mm = MaintenanceManager(memory_threshold_bytes=10**9, flush_age_s=120)
    for h in (small, big):
        mm.register(h.tablet)
    ((_, op),) = mm.candidates()
    assert op.name == "FlushMRSOp" and op.over_threshold and op.tablet_id == big.tablet.tablet_id
    ran = mm.poll_once(run_inline=True)  # ops are rebuilt on every poll
    assert ran is not None and ran.key == op.key
    assert len(big.tablet.rowsets()) == 1 and small.tablet.rowsets() == []
    assert mm.candidates() == []  # the small one stays in memory until it is old or the node is short

    mm.memory_threshold_bytes = 1  # node-wide pressure: the biggest store goes whatever its threshold
    assert mm.poll_once(run_inline=True) is not None and len(small.tablet.rowsets()) == 1


def test_node_memory_input_drives_pressure_flushes_biggest_first(tmp_path: Any, schema: Any) -> None:
    """With the node's tracked memory as its input, pressure is what the node holds (block cache, log,
    baseline...), not only its memory stores: past the watermark the biggest store flushes first."""
    small = Harness(str(tmp_path / "small"), schema, tablet_id="small")
    big = Harness(str(tmp_path / "big"), schema, tablet_id="big")
    small.write([INS] * 10, list(range(10)))
    big.write([INS] * 100, list(range(100)))
    node_bytes = [0]
    working = MemTracker("maintenance")
    mm = MaintenanceManager(
        memory_threshold_bytes=10**6,
        flush_age_s=120,
        memory_usage=lambda: node_bytes[0],
        working_memory=working,
    )
    for h in (small, big):
        mm.register(h.tablet)
    assert mm.candidates() == []  # stores far below the watermark and the node too
    node_bytes[0] = 10**6  # the node is at its watermark, whatever holds the memory
    big_bytes = big.tablet.mrs_memory_bytes()
    ran = mm.poll_once(run_inline=True)
    assert ran is not None and ran.name == "FlushMRSOp" and ran.tablet_id == "big"
    # the flush's output counted while it ran (about the store's size), released when it finished
    assert working.peak == big_bytes and working.current() == 0
    ran = mm.poll_once(run_inline=True)
    assert ran is not None and ran.tablet_id == "small"
    node_bytes[0] = 10**6 - 1
    small.write([INS], [1000])
    assert mm.candidates() == []


def test_rows_passed_through_unchanged_keep_the_ipc_bytes_they_came_in(h: Harness) -> None:
    """The log entry may carry a write's IPC bytes as they arrived only while prepare left the rows
    as they were read: a cast column (or any rewrite) drops them."""
    from kudu_async.common.row_conversion import batch_to_ipc, ipc_to_table

    ipc = batch_to_ipc(h.batch([1, 2]))
    rows = ipc_to_table(ipc).to_batches()[0]
    p = h.tablet.prepare_write(WriteOp(np.array([INS, INS], dtype=np.int8), rows, None, ipc), h.clock.now())
    assert p.op.rows_ipc is ipc and p.op.rows.equals(rows)
    h.tablet.abort_write(p)
    cols = rows.columns
    wide = pa.record_batch([cols[0], cols[1].cast(pa.int64()), *cols[2:]], names=rows.schema.names)
    p = h.tablet.prepare_write(WriteOp([INS, INS], wide, None, batch_to_ipc(wide)), h.clock.now())
    assert p.op.rows_ipc is None and p.op.rows.schema.field(1).type == pa.int32()
    h.tablet.abort_write(p)


def test_mrs_created_at_and_durable_files(h: Harness) -> None:
    """The public views the maintenance manager and tablet copy read: the MemRowSet's age, and the
    committed metadata with the paths of exactly the blocks it references."""
    import os

    from kudu_async.fs.tablet_metadata import TabletMetadata

    assert h.tablet.mrs_created_at() is None
    before = time.monotonic()
    h.write([INS] * 10, list(range(10)))
    created = h.tablet.mrs_created_at()
    assert created is not None and before <= created <= time.monotonic()
    h.tablet.flush_mrs()
    assert h.tablet.mrs_created_at() is None  # a fresh MemRowSet took over
    h.write([INS] * 10, list(range(10, 20)))
    h.tablet.flush_mrs()
    h.tablet.compact_rowsets()
    with h.tablet.durable_files() as (meta_bytes, paths):
        meta = TabletMetadata.from_json(meta_bytes)
        assert meta.rowsets and sorted(paths) == sorted(h.tablet.bm.path(b) for b in meta.live_blocks())
        assert all(os.path.exists(p) for p in paths)


def test_mutations_during_a_compaction_are_carried_over_column_wise(
    tmp_path: Any, schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes that land while a compaction merges (outside the lock) reach the outputs as delta chunks,
    one per write batch and output rowset; a re-insert of a row the compaction dropped (dead at the
    history mark) goes to the MemRowSet; replay after a crash gives the same rows."""
    h = Harness(str(tmp_path / "t"), schema, history_max_age_sec=0.001, target_rowset_bytes=512)
    h.write([INS] * 40, list(range(0, 80, 2)))
    h.tablet.flush_mrs()
    h.write([INS] * 40, list(range(1, 80, 2)))
    h.tablet.flush_mrs()
    h.write([D], [10])
    h.tablet.flush_all()
    h.clock.advance(1_000_000)  # the delete is older than the history mark: compaction drops row 10
    real_merge = compaction.merge_rowsets

    def merge_while_writing(*args: Any) -> Any:
        out = real_merge(*args)
        h.write([U] * 6, [1, 2, 33, 40, 41, 79], i32=[-1, -2, -33, -40, -41, -79])
        h.write([D, INS, U], [2, 10, 10], i32=[0, 100, 101])
        return out

    monkeypatch.setattr(maintenance_mod, "merge_rowsets", merge_while_writing)
    assert h.tablet.compact_rowsets()
    outputs = h.tablet.rowsets()
    assert len(outputs) > 1
    assert all(not d.dms._singles for d in outputs)  # chunks only: nothing went row by row
    assert sum(len(d.dms) for d in outputs) == 7
    assert len(h.tablet.components.mrs) == 1  # key 10, re-inserted
    expected = {k: k * 10 for k in range(80) if k not in (2,)}
    expected.update({1: -1, 33: -33, 40: -40, 41: -41, 79: -79, 10: 101})
    assert [r[:2] for r in h.rows(projection=["key", "i32"])] == sorted(expected.items())
    h.reopen()
    assert [r[:2] for r in h.rows(projection=["key", "i32"])] == sorted(expected.items())


def test_live_row_count_follows_writes_flushes_compactions_and_reopening(h: Harness) -> None:
    """Kudu's live row count: inserted minus deleted rows, kept by the tablet without a scan, equal to
    what a fresh count of the stores says after flushes, compactions and a reopen with log replay."""
    h.write([INS] * 5, [1, 2, 3, 4, 5])
    h.write([INS, OpType.INSERT_IGNORE], [1, 6])  # a duplicate insert counts nothing
    assert h.tablet.live_rows == 6
    h.tablet.flush_mrs()
    h.write([D, D, U], [1, 2, 3])
    h.write([UP, UP], [3, 7])  # one update, one insert
    assert h.tablet.live_rows == 5 == h.tablet.count_live_rows() == len(h.rows())
    h.tablet.flush_all()
    h.write([INS, D], [1, 7])  # a re-insert of a deleted key, a delete of a row still in memory
    assert h.tablet.live_rows == 5 == h.tablet.count_live_rows()
    h.reopen()  # replays the writes above the last flush
    assert h.tablet.live_rows == 5 == len(h.rows())
    h.tablet.flush_all()
    h.tablet.compact_rowsets()
    assert h.tablet.live_rows == 5 == h.tablet.count_live_rows() == len(h.rows())
