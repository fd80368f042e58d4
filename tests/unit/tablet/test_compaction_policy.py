"""Budgeted compaction policy: rowset layout height and the choice of rowsets to merge."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kudu_async.common.clock import HybridClock
from kudu_async.common.errors import KuduConfigurationError
from kudu_async.server.config import COMPACTION_MINIMUM_IMPROVEMENT, load_config
from kudu_async.tablet.compaction_policy import (
    DEFAULT_SMALL_ROWSET_TRADEOFF,
    MIN_IMPROVEMENT,
    SMALL_ROWSET_TRADEOFF,
    LayoutPlan,
    RowSetExtent,
    max_height,
    plan,
)
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


def _ingest(
    tmp: str, ordered: bool, tradeoff: float = SMALL_ROWSET_TRADEOFF
) -> tuple[Tablet, list[tuple[int, float, int]], list[str]]:
    """40 batches of 1,000 keys, each flushed, with the maintenance ops of a poll run inline after each
    flush (at most 3: the manager's share of the time between flushes); returns the tablet, (rows,
    average height, max height) after each batch and the ops run."""
    opts = TabletOptions(
        sync=False,
        flush_threshold_bytes=1,
        target_rowset_bytes=32 * 1024,
        compaction_budget_bytes=256 * 1024,
        compaction_small_rowset_tradeoff=tradeoff,
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


def test_ascending_key_ingest_never_compacts_for_height(tmp_path: pytest.TempPathFactory) -> None:
    tablet, trace, ran = _ingest(str(tmp_path), ordered=True, tradeoff=0.0)
    assert ran and set(ran) == {"FlushMRSOp"}
    assert all(top == 1 for _, _, top in trace)
    assert trace[-1][1] == pytest.approx(1.0)
    assert sum(d.num_rows() for d in tablet.rowsets()) == 40_000


# --- small rowsets (compaction_small_rowset_tradeoff) --------------------------------------------------

TARGET = 32 * MB


def small(layout: list[RowSetExtent], budget: int = 128 * MB, target: int = TARGET) -> LayoutPlan:
    return plan(layout, budget, small_rowset_tradeoff=SMALL_ROWSET_TRADEOFF, target_rowset_bytes=target)


def _random_layouts() -> list[tuple[list[RowSetExtent], int]]:
    rng = np.random.default_rng(2837)
    out = []
    for n, spread, budget in ((12, 500, 16), (30, 5000, 64), (45, 50, 128), (60, 2000, 128), (80, 800, 256)):
        layout = []
        for i in range(n):
            lo = int(rng.integers(0, 10_000))
            layout.append(ext(i, lo, lo + int(rng.integers(0, spread)), int(rng.integers(1, 40)) * MB))
        out.append((layout, budget * MB))
    return out


# The plans of the height-only policy for the layouts above (computed before the small-rowset credit).
HEIGHT_ONLY_PLANS = [
    ((6, 7), 0.040318933646878, 16777216),
    ((3, 13, 16, 18, 24), 1.3058304960517746, 67108864),
    ((9, 23, 31, 35, 37, 43), 0.07528702424318545, 125829120),
    ((8, 17, 26, 29, 30, 31, 38, 53, 58), 1.371132690604835, 128974848),
    (
        (5, 6, 11, 12, 15, 17, 18, 24, 26, 35, 37, 40, 41, 42, 45, 50, 53, 57, 58, 62, 67, 69, 78, 79),
        0.9168099682866002,
        233832448,
    ),
]


def test_tradeoff_zero_plans_exactly_as_the_height_only_policy() -> None:
    for (layout, budget), (ids, gain, nbytes) in zip(_random_layouts(), HEIGHT_ONLY_PLANS, strict=True):
        got = plan(layout, budget, small_rowset_tradeoff=0.0, target_rowset_bytes=TARGET)
        assert (got.compact_ids, got.improvement, got.compact_bytes) == (ids, gain, nbytes)
        assert got == plan(layout, budget)
    ascending = [ext(i, 100 * i, 100 * i + 99, MB) for i in range(40)]
    assert plan(ascending, 128 * MB, small_rowset_tradeoff=0.0).compact_ids == ()


def _merge(layout: list[RowSetExtent], ids: tuple[int, ...], target: int, next_id: int) -> list[RowSetExtent]:
    """What a compaction writes for ``ids``: their bytes as rowsets of ``target`` bytes (the last one
    the remainder), spread evenly over the inputs' key range in key order."""
    inputs = [e for e in layout if e.id in ids]
    lo = min(int.from_bytes(e.min_key, "big") for e in inputs)
    hi = max(int.from_bytes(e.max_key, "big") for e in inputs)
    total = sum(e.size for e in inputs)
    n = math.ceil(total / target)
    sizes = [target] * (n - 1) + [total - target * (n - 1)]
    bounds = [lo + (hi + 1 - lo) * sum(sizes[:i]) // total for i in range(n + 1)]
    outputs = [ext(next_id + i, bounds[i], bounds[i + 1] - 1, sizes[i]) for i in range(n)]
    return [e for e in layout if e.id not in ids] + outputs


def _to_fixed_point(layout: list[RowSetExtent], budget: int) -> tuple[list[RowSetExtent], int]:
    """Plan and merge until the policy picks nothing (at most 200 rounds); the layout and merges run."""
    next_id = max(e.id for e in layout) + 1
    for merges in range(200):
        p = small(layout, budget)
        if not p.compact_ids:
            return layout, merges
        assert p.compact_bytes <= budget
        assert p.compact_bytes == sum(e.size for e in layout if e.id in p.compact_ids)
        before, height = len(layout), p.max_height
        layout = _merge(layout, p.compact_ids, TARGET, next_id)
        next_id += len(layout)
        if height == 1:
            assert len(layout) < before  # with nothing to flatten, a merge saves at least one rowset
    raise AssertionError(f"no fixed point after 200 merges: {len(layout)} rowsets")


def test_ascending_small_rowsets_merge_to_target_size_then_stop() -> None:
    rng = np.random.default_rng(37)
    sizes = rng.integers(2, 15, size=60) * MB  # 60 flushes of 2-14 MiB, ascending keys
    layout = [ext(i, 1000 * i, 1000 * i + 999, int(s)) for i, s in enumerate(sizes)]
    assert plan(layout, 128 * MB).compact_ids == ()  # no height to remove
    final, merges = _to_fixed_point(layout, 128 * MB)
    total = int(sizes.sum())
    assert sum(e.size for e in final) == total
    assert merges >= 5
    assert max_height(final) == 1
    assert len(final) <= math.ceil(1.5 * total / TARGET), sorted(e.size // MB for e in final)
    assert sum(e.size >= TARGET for e in final) >= total // TARGET // 2
    # No two neighbours left that together would save more than MIN_IMPROVEMENT / tradeoff rowsets.
    by_key = sorted(final, key=lambda e: e.min_key)
    for x, y in itertools.pairwise(by_key):
        saved = max(0.0, 1 - x.size / TARGET) + max(0.0, 1 - y.size / TARGET)
        assert saved * SMALL_ROWSET_TRADEOFF <= MIN_IMPROVEMENT, (x, y)
    again = small(final)
    assert again.compact_ids == () and again.improvement == 0.0


def test_random_layout_reaches_a_fixed_point_with_the_credit() -> None:
    for layout, budget in _random_layouts():
        final, _ = _to_fixed_point([ext(e.id, *_ints(e), min(e.size, budget)) for e in layout], budget)
        assert small(final, budget).compact_ids == ()


def _ints(e: RowSetExtent) -> tuple[int, int]:
    return int.from_bytes(e.min_key, "big"), int.from_bytes(e.max_key, "big")


def test_rowsets_at_or_above_the_target_size_earn_no_credit() -> None:
    at_target = [ext(i, 100 * i, 100 * i + 99, TARGET) for i in range(60)]
    assert small(at_target).compact_ids == ()
    above = [ext(i, 100 * i, 100 * i + 99, TARGET + MB) for i in range(60)]
    assert small(above, 1024 * MB).compact_ids == ()


def test_a_merge_of_disjoint_rowsets_must_save_more_than_one_rowset() -> None:
    # Two rowsets of 0.45 target: 1.1 rowsets saved x 0.009 < 0.01; of 0.4 target: 1.2 x 0.009 > 0.01.
    def pair(frac: float) -> list[RowSetExtent]:
        return [ext(1, 0, 99, int(frac * TARGET)), ext(2, 100, 199, int(frac * TARGET))]

    assert small(pair(0.45)).compact_ids == ()
    merge = small(pair(0.4))
    assert merge.compact_ids == (1, 2)
    assert merge.improvement == pytest.approx(SMALL_ROWSET_TRADEOFF * 1.2)


def test_overlapping_rowsets_still_win_over_small_disjoint_ones() -> None:
    stack = [ext(i, 0, 1000, 8 * MB) for i in range(3)]  # height 3 over a third of the data
    tiny = [ext(10 + i, 2000 + 100 * i, 2000 + 100 * i + 99, 6 * MB) for i in range(8)]
    height_only = plan(stack + tiny, 32 * MB)
    assert height_only.compact_ids == (0, 1, 2)
    both = small(stack + tiny, 32 * MB)
    assert {0, 1, 2} <= set(both.compact_ids)
    assert both.compact_bytes <= 32 * MB
    assert both.improvement >= height_only.improvement
    # Without the stack, the same budget merges the small ones.
    assert len(small(tiny, 32 * MB).compact_ids) == 5


def test_budget_bounds_the_small_rowset_merge() -> None:
    layout = [ext(i, 100 * i, 100 * i + 99, 4 * MB) for i in range(40)]
    for budget in (8 * MB, 32 * MB, 128 * MB):
        p = small(layout, budget)
        assert p.compact_bytes <= budget
        assert len(p.compact_ids) == budget // (4 * MB)
        assert list(p.compact_ids) == list(range(p.compact_ids[0], p.compact_ids[0] + len(p.compact_ids)))


def test_the_tradeoff_must_stay_below_the_minimum_improvement() -> None:
    layout = [ext(1, 0, 99), ext(2, 100, 199)]
    for bad in (MIN_IMPROVEMENT, 0.5, -0.001, float("nan")):
        with pytest.raises(ValueError, match="compaction_small_rowset_tradeoff"):
            plan(layout, 128 * MB, small_rowset_tradeoff=bad)
    with pytest.raises(ValueError, match="target rowset size"):
        plan(layout, 128 * MB, small_rowset_tradeoff=0.009, target_rowset_bytes=0)
    assert COMPACTION_MINIMUM_IMPROVEMENT == MIN_IMPROVEMENT
    base = ["--role", "tserver", "--data-dir", "/d"]
    assert load_config(base, {}).compaction_small_rowset_tradeoff == DEFAULT_SMALL_ROWSET_TRADEOFF == 0
    assert load_config([*base, "--compaction-small-rowset-tradeoff", "0"], {}).compaction_small_rowset_tradeoff == 0
    for bad_text in ("0.01", "-0.1", "nan", "lots"):
        with pytest.raises(KuduConfigurationError, match="--compaction-small-rowset-tradeoff"):
            load_config([*base, "--compaction-small-rowset-tradeoff", bad_text], {})


def test_ascending_flushes_are_merged_into_fewer_rowsets_and_every_row_stays(
    tmp_path: pytest.TempPathFactory,
) -> None:
    """Ascending keys flushed 250 rows at a time (each rowset well under the 32 KiB target), with the
    maintenance manager's ops run inline after each flush and until it has nothing left to run."""
    opts = TabletOptions(
        sync=False,
        flush_threshold_bytes=1,
        target_rowset_bytes=32 * 1024,
        compaction_budget_bytes=256 * 1024,
        compaction_small_rowset_tradeoff=SMALL_ROWSET_TRADEOFF,
    )
    clock = HybridClock()
    tablet = Tablet.create(str(tmp_path), make_schema(), tablet_id="s", options=opts, clock=clock)
    mm = MaintenanceManager(memory_threshold_bytes=1 << 40)
    mm.register(tablet)
    keys = np.arange(10_000, dtype=np.int64)
    ran: list[str] = []
    for b in range(40):
        _load(tablet, clock, keys[b * 250 : (b + 1) * 250], b + 1)
        op = mm.poll_once(run_inline=True)
        if op is not None:
            ran.append(op.name)
    for _ in range(100):
        op = mm.poll_once(run_inline=True)
        if op is None:
            break
        ran.append(op.name)
    assert mm.poll_once(run_inline=True) is None
    flushes = ran.count("FlushMRSOp")
    assert flushes == 40
    assert "CompactRowSetsOp" in ran
    rowsets = tablet.rowsets()
    assert len(rowsets) < flushes // 2, [d.base_bytes() for d in rowsets]
    assert tablet.rowset_layout().max_height == 1
    assert tablet.rowset_layout().compact_ids == ()
    count, key_sum, d_sum = 0, 0, 0.0
    for batch in tablet.scan():
        count += batch.num_rows
        key_sum += pc.sum(batch.column("key")).as_py() or 0
        d_sum += pc.sum(batch.column("d")).as_py() or 0.0
    assert count == 10_000
    assert key_sum == int(keys.sum())
    assert d_sum == pytest.approx(float((keys * 0.5).sum()))
    assert sum(d.num_rows() for d in rowsets) == 10_000
