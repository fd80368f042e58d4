"""The memory tracker tree and the node's admission rule (Kudu's MemTracker and SoftLimitExceeded)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kudu_async.common.mem_tracker import MAX_REFRESH_INTERVAL_S, MemTracker, NodeMemory, format_bytes

MiB = 1 << 20


def ticking() -> Callable[[], float]:
    """A clock a second further on every read: every consumption() call refreshes."""
    t = [0.0]

    def now() -> float:
        t[0] += 1.0
        return t[0]

    return now


def test_consumption_sums_counted_gauges_and_children_and_keeps_peaks() -> None:
    root = MemTracker("root", limit=100)
    size = [10]
    t = root.child("tablet-a", kind="tablets")
    mrs = t.child("MemRowSet", gauge=lambda: size[0], kind="MemRowSets")
    scanners = root.child("scanners")
    scanners.consume(7)
    assert (mrs.current(), t.current(), root.current()) == (10, 10, 17)
    size[0] = 40
    scanners.release(7)
    assert root.current() == 40
    size[0] = 5
    assert root.current() == 5
    assert (root.peak, t.peak, mrs.peak, scanners.peak) == (40, 40, 40, 7)


def test_rows_are_kudus_table_parents_first_and_nested_matches() -> None:
    root = MemTracker("root", limit=1000)
    t = root.child("tablet-x")
    t.child("MemRowSet", gauge=lambda: 3)
    t.child("DeltaMemStores", gauge=lambda: 2)
    root.child("block_cache", gauge=lambda: 10)
    rows = root.rows()
    assert [r["id"] for r in rows] == ["root", "tablet-x", "MemRowSet", "DeltaMemStores", "block_cache"]
    assert rows[0] == {"id": "root", "parent": None, "limit": 1000, "current": 15, "peak": 15}
    assert {r["id"]: r["parent"] for r in rows[1:]} == {
        "tablet-x": "root",
        "MemRowSet": "tablet-x",
        "DeltaMemStores": "tablet-x",
        "block_cache": "root",
    }
    assert all(set(r) == {"id", "parent", "limit", "current", "peak"} for r in rows)
    nested = root.nested()
    assert nested["current"] == 15 and [c["id"] for c in nested["children"]] == ["tablet-x", "block_cache"]
    assert nested["children"][0]["current"] == 5


def test_detach_removes_a_subtree_and_ids_are_checked() -> None:
    root = MemTracker("root")
    t = root.child("tablet-a")
    t.child("MemRowSet", gauge=lambda: 9)
    assert root.current() == 9
    with pytest.raises(ValueError, match="already has a child 'tablet-a'"):
        root.child("tablet-a")
    t.detach()
    assert root.current() == 0 and root.get_child("tablet-a") is None
    root.child("tablet-a")  # the id is free again
    with pytest.raises(ValueError, match="non-empty id"):
        MemTracker("")


def test_release_below_zero_is_an_error_naming_the_tracker() -> None:
    t = MemTracker("rpc")
    t.consume(5)
    with pytest.raises(ValueError, match="'rpc' released 6 bytes"):
        t.release(6)


def test_counting_from_many_threads_is_exact() -> None:
    t = MemTracker("scanners")

    def work() -> None:
        for _ in range(10_000):
            t.consume(3)
            t.release(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.current() == 4 * 10_000 * 2


def test_node_total_is_cached_for_refresh_s() -> None:
    now = [0.0]
    calls = [0]

    def gauge() -> int:
        calls[0] += 1
        return 50 * MiB

    mem = NodeMemory(100 * MiB, refresh_s=0.01, clock=lambda: now[0], timer=lambda: 0.0)
    mem.root.child("MemRowSet", gauge=gauge)
    assert mem.consumption() == 50 * MiB and calls[0] == 1
    now[0] += 0.005
    assert mem.consumption() == 50 * MiB and calls[0] == 1  # cached
    now[0] += 0.006
    assert mem.consumption() == 50 * MiB and calls[0] == 2
    mem.root.child("DeltaMemStores", gauge=lambda: MiB)  # a tracker joining is seen at the next pass
    now[0] += 0.011
    assert mem.consumption() == 51 * MiB and calls[0] == 3


def test_a_slow_pass_is_made_less_often() -> None:
    """Refreshing costs at most ~2% of the asker's time: a pass of 1 ms waits 50 ms for the next, and
    however slow a pass, the total is re-read at least every MAX_REFRESH_INTERVAL_S."""
    now = [0.0]
    spent = [0.0]
    calls = [0]
    pass_cost = [0.001]

    def slow() -> int:
        calls[0] += 1
        spent[0] += pass_cost[0]
        return 1

    mem = NodeMemory(100 * MiB, refresh_s=0.005, clock=lambda: now[0], timer=lambda: spent[0])
    mem.root.child("MemRowSet", gauge=slow)
    mem.consumption()
    now[0] += 0.01
    mem.consumption()
    assert calls[0] == 1  # past refresh_s, not past 50 x the pass
    now[0] += 0.05
    mem.consumption()
    assert calls[0] == 2
    pass_cost[0] = 1.0  # a pass preempted for a second would otherwise wait 50 s
    now[0] += 0.05
    mem.consumption()
    assert calls[0] == 3
    now[0] += MAX_REFRESH_INTERVAL_S + 0.001
    mem.consumption()
    assert calls[0] == 4


def test_watermarks_follow_the_percentages() -> None:
    mem = NodeMemory(1000 * MiB, soft_percentage=80, pressure_percentage=60)
    assert (mem.soft_limit, mem.pressure_threshold) == (800 * MiB, 600 * MiB)
    pinned = NodeMemory(1000 * MiB, pressure_threshold_bytes=123)
    assert pinned.pressure_threshold == 123
    used = [599 * MiB]
    mem.root.child("block_cache", gauge=lambda: used[0])  # not a memory store: nothing to flush
    mem._clock = ticking()
    assert not mem.under_pressure()
    used[0] = 600 * MiB
    assert mem.under_pressure()
    store = mem.root.child("MemRowSet", gauge=lambda: 100 * MiB)  # its flush will need 100 MiB more
    used[0] = 399 * MiB
    assert not mem.under_pressure()
    used[0] = 400 * MiB
    assert mem.under_pressure()
    store.detach()


@pytest.mark.parametrize(
    ("limit", "soft", "pressure", "needle"),
    [(0, 80.0, 60.0, "> 0"), (100, 0.0, 60.0, "soft"), (100, 80.0, 120.0, "pressure")],
)
def test_bad_node_memory_settings_are_refused(limit: int, soft: float, pressure: float, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        NodeMemory(limit, soft_percentage=soft, pressure_percentage=pressure)


def test_rejection_probability_rises_linearly_from_soft_to_hard() -> None:
    mem = NodeMemory(1000, soft_percentage=80)
    assert mem.rejection_probability(0) == 0.0
    assert mem.rejection_probability(799) == 0.0
    assert mem.rejection_probability(800) == 0.0
    assert mem.rejection_probability(900) == pytest.approx(0.5)
    assert mem.rejection_probability(1000) == 1.0
    assert mem.rejection_probability(5000) == 1.0


def test_admission_refuses_by_probability_and_names_the_figures() -> None:
    draw = [0.0]
    used = {"MemRowSets": 300 * MiB, "block": 300 * MiB}
    mem = NodeMemory(1000 * MiB, soft_percentage=80, clock=ticking(), rand=lambda: draw[0], timer=lambda: 0.0)
    t = mem.root.child("tablet-a", kind="tablets")
    t.child("MemRowSet", gauge=lambda: used["MemRowSets"], kind="MemRowSets")
    t.child("DeltaMemStores", gauge=lambda: 0)
    mem.root.child("block_cache", gauge=lambda: used["block"])
    # 600 MiB held, 900 once the 300 MiB store's flush takes as much again: half way from soft to hard,
    # so refused when the draw falls below 0.5
    draw[0] = 0.49
    why = mem.admission_refusal()
    assert why is not None
    assert why.startswith("soft memory limit (800 MiB) exceeded: 600 MiB of 1000 MiB used (")
    assert "MemRowSets 300 MiB, block_cache 300 MiB" in why and "DeltaMemStores" not in why
    assert why.endswith("), 900 MiB with the flush of the biggest store")
    draw[0] = 0.51
    assert mem.admission_refusal() is None
    # past the hard limit every write is refused, whatever the draw
    used["MemRowSets"] = 400 * MiB
    draw[0] = 0.99
    why = mem.admission_refusal()
    assert why is not None and why.startswith("memory limit exceeded: 700 MiB of 1000 MiB used (MemRowSets 400 MiB")
    used["MemRowSets"] = 100 * MiB
    assert mem.admission_refusal() is None


def test_a_running_flush_counts_once() -> None:
    """The store being flushed is in its tablet's MemRowSet tracker and in the flush's working memory:
    the projection adds only what the biggest store holds beyond the working memory already counted."""
    mem = NodeMemory(1000 * MiB, clock=ticking(), timer=lambda: 0.0)
    store = [300 * MiB]
    mem.root.child("tablet-a", kind="tablets").child("MemRowSet", gauge=lambda: store[0], kind="MemRowSets")
    work = mem.root.child("maintenance")
    assert (mem.refresh(), mem.projected()) == (300 * MiB, 600 * MiB)
    work.consume(300 * MiB)  # its flush started
    assert (mem.refresh(), mem.projected()) == (600 * MiB, 600 * MiB)
    store[0] = 350 * MiB  # 50 MiB written to the next store meanwhile: its flush will need 50 MiB more
    assert (mem.refresh(), mem.projected()) == (650 * MiB, 700 * MiB)
    assert mem.under_pressure()  # 60 % of the limit


def test_memory_the_trackers_miss_shows_as_untracked_and_does_not_refuse_writes() -> None:
    """The root of /mem-trackers is the process's anonymous memory: what the trackers miss shows as its
    ``untracked`` child. Admission counts only the trackers (flushes cannot free the rest)."""
    anon = [500 * MiB]
    mem = NodeMemory(1000 * MiB, soft_percentage=80, clock=ticking(), rand=lambda: 0.0, timer=lambda: 0.0)
    mem.root.child("tablet-a", kind="tablets").child("MemRowSet", gauge=lambda: 100 * MiB, kind="MemRowSets")
    mem.root.child("block_cache", gauge=lambda: 200 * MiB)
    mem.track_process(lambda: anon[0])
    assert (mem.refresh(), mem.tracked(), mem.untracked()) == (300 * MiB, 300 * MiB, 200 * MiB)
    rows = {r["id"]: r["current"] for r in mem.root.rows()}
    assert rows["untracked"] == 200 * MiB and rows["root"] == 500 * MiB
    anon[0] = 1100 * MiB  # past the limit though the trackers count 300 MiB: not the writes' doing
    mem.refresh()
    assert mem.admission_refusal() is None and mem.untracked() == 800 * MiB
    anon[0] = 250 * MiB  # the process holds less than the trackers count (shared pages): never negative
    assert (mem.refresh(), mem.untracked()) == (300 * MiB, 0)
    assert {r["id"]: r["current"] for r in mem.root.rows()}["untracked"] == 0


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (12, 3 << 10, 600 * MiB, int(1.02 * (1 << 30)))] == [
        "12 B",
        "3 KiB",
        "600 MiB",
        "1.02 GiB",
    ]
