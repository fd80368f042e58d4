"""Budgeted compaction policy: rowset layout height and the choice of rowsets to merge."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kudu_async.common.clock import HybridClock
from kudu_async.tablet.compaction_policy import RowSetExtent, max_height, plan
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.tablet import Tablet, TabletOptions
from tests.unit.tablet.tablet_testkit import ARROW_FIELDS, make_schema

MB = 1024 * 1024


def k(v: int) -> bytes:
    return v.to_bytes(8, "big")


def ext(rid: int, lo: int, hi: int, size: int = MB) -> RowSetExtent:
    return RowSetExtent(rid, k(lo), k(hi), size)


def test_disjoint_rowsets_have_height_one_and_are_never_merged() -> None:
    layout = plan([ext(i, 100 * i, 100 * i + 99) for i in range(10)], 128 * MB)
    assert layout.average_height == pytest.approx(1.0)
    assert layout.max_height == 1
    assert layout.compact_ids == ()


def test_stacked_rowsets_count_each_layer_and_merge_within_the_budget() -> None:
    stacked = [ext(i, 0, 1000) for i in range(4)]
    layout = plan(stacked, 128 * MB)
    assert layout.average_height == pytest.approx(4.0)
    assert layout.max_height == 4
    assert layout.compact_ids == (0, 1, 2, 3)
    assert layout.improvement == pytest.approx(3.0)
    small = plan(stacked, 2 * MB)  # room for two of them only
    assert len(small.compact_ids) == 2 and small.compact_bytes == 2 * MB
    assert small.improvement == pytest.approx(1.0)


def test_the_merge_that_lowers_height_most_wins_over_a_disjoint_neighbour() -> None:
    # Two overlapping rowsets on the left, a lone one on the right: only the pair is worth merging.
    layout = plan([ext(1, 0, 100), ext(2, 50, 150), ext(3, 1000, 2000)], 128 * MB)
    assert layout.compact_ids == (1, 2)
    assert max_height([ext(1, 0, 100), ext(2, 100, 150)]) == 2  # inclusive ranges touching at a key


def test_a_rowset_bigger_than_the_budget_is_left_alone() -> None:
    layout = plan([ext(1, 0, 100, 200 * MB), ext(2, 0, 100), ext(3, 0, 100)], 128 * MB)
    assert layout.compact_ids == (2, 3)
    with pytest.raises(ValueError, match="budget"):
        plan([ext(1, 0, 1)], 0)


def _load(tablet: Tablet, clock: HybridClock, keys: np.ndarray, index: int) -> None:
    n = len(keys)
    batch = pa.record_batch(
        [
            pa.array(keys),
            pa.array((keys % 1000).astype(np.int32)),
            pa.array(keys * 0.5),
            pa.array([f"name-{v}" for v in keys.tolist()], pa.string()),
        ],
        schema=pa.schema(ARROW_FIELDS),
    )
    res = tablet.write(WriteOp(np.full(n, OpType.INSERT, dtype=np.int64), batch), clock.now(), index)
    assert not res.row_errors


def _ingest(tmp: str, ordered: bool) -> tuple[Tablet, list[tuple[int, float, int]], list[str]]:
    """40 batches of 1,000 keys, each flushed, with the maintenance ops of a poll run inline after each
    flush (at most 3: the manager's share of the time between flushes); returns the tablet, (rows,
    average height, max height) after each batch and the ops run."""
    opts = TabletOptions(
        sync=False, flush_threshold_bytes=1, target_rowset_bytes=32 * 1024, compaction_budget_bytes=256 * 1024
    )
    clock = HybridClock()
    tablet = Tablet.create(tmp, make_schema(), tablet_id="h", options=opts, clock=clock)
    mm = MaintenanceManager(memory_threshold_bytes=1 << 40)
    mm.register(tablet)
    rng = np.random.default_rng(28)
    keys = np.arange(40_000, dtype=np.int64) if ordered else rng.permutation(np.arange(40_000, dtype=np.int64) * 7919)
    trace: list[tuple[int, float, int]] = []
    ran: list[str] = []
    for b in range(40):
        _load(tablet, clock, keys[b * 1000 : (b + 1) * 1000], b + 1)
        for _ in range(3):
            op = mm.poll_once(run_inline=True)
            if op is None:
                break
            ran.append(op.name)
        layout = tablet.rowset_layout()
        trace.append(((b + 1) * 1000, layout.average_height, layout.max_height))
    return tablet, trace, ran


def test_random_key_ingest_keeps_the_rowset_height_bounded(tmp_path: pytest.TempPathFactory) -> None:
    tablet, trace, ran = _ingest(str(tmp_path), ordered=False)
    assert trace[-1][0] == 10 * trace[3][0]  # rows grew tenfold from the 4th batch on
    assert "CompactRowSetsOp" in ran
    worst_avg = max(avg for _, avg, _ in trace[3:])
    worst_max = max(top for _, _, top in trace[3:])
    assert worst_avg <= 3.0, trace
    assert worst_max <= 6, trace
    assert trace[-1][1] <= 3.0
    rows = sum(1 for _ in tablet.scan())
    assert rows >= 1
    assert sum(d.num_rows() for d in tablet.rowsets()) == 40_000
    status = tablet.status()
    assert status["average_rowset_height"] == pytest.approx(trace[-1][1], abs=1e-3)
    assert status["max_rowset_height"] == trace[-1][2]


def test_ascending_key_ingest_never_compacts(tmp_path: pytest.TempPathFactory) -> None:
    tablet, trace, ran = _ingest(str(tmp_path), ordered=True)
    assert ran and set(ran) == {"FlushMRSOp"}
    assert all(top == 1 for _, _, top in trace)
    assert trace[-1][1] == pytest.approx(1.0)
    assert sum(d.num_rows() for d in tablet.rowsets()) == 40_000
