"""The node's block cache: rowset files held in memory within a budget, and the point lookups it lets
the tserver answer without a worker (``Tablet.scan_in_memory``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.fs.block_cache import BlockCache
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions

FIELDS = [pa.field("k", pa.int64(), False), pa.field("v", pa.string())]


def _file(tmp_path: Any, name: str, size: int) -> str:
    p = str(tmp_path / name)
    with open(p, "wb") as f:
        f.write(bytes(range(256)) * (size // 256) + bytes(size % 256))
    return p


def test_blocks_are_admitted_within_the_budget_shared_and_forgotten_when_deleted(tmp_path: Any) -> None:
    a, b, c = (_file(tmp_path, n, 1000) for n in "abc")
    cache = BlockCache(2500)
    buf = cache.read(a)
    assert buf is not None and buf.to_pybytes() == Path(a).read_bytes()
    assert cache.read(a) is buf  # a second open shares the buffer: no second copy, no second charge
    assert cache.read(b) is not None
    assert cache.read(c) is None  # 3000 bytes would exceed 2500: the caller maps the file instead
    st = cache.status()
    assert (st["usage_bytes"], st["blocks"], st["hits"], st["inserts"], st["refused"]) == (2000, 2, 1, 2, 1)
    cache.drop([a])
    assert not cache.holds(a) and cache.read(c) is not None
    sub = tmp_path / "tablet"
    sub.mkdir()
    d = _file(sub, "d", 100)
    assert cache.read(d) is not None
    cache.drop_under(str(sub))
    assert not cache.holds(d) and cache.holds(b) and cache.status()["usage_bytes"] == 2000
    assert BlockCache(0).read(a) is None  # 0 turns it off
    with pytest.raises(ValueError, match="capacity"):
        BlockCache(-1)


class Owner:
    """A stand-in for a rowset: records the evictions it is told of."""

    def __init__(self, fail: bool = False) -> None:
        self.evicted: list[str] = []
        self.fail = fail

    def let_go(self, path: str) -> None:
        self.evicted.append(path)
        if self.fail:
            raise RuntimeError("cannot let go")


def test_least_recently_used_evictable_blocks_make_room_and_their_owners_are_told(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, c, d, e = (_file(tmp_path, n, 1000) for n in "abcde")
    cache = BlockCache(3000)
    oa, ob, oc = Owner(), Owner(fail=True), Owner()
    assert cache.read(a, oa.let_go) is not None
    assert cache.read(b, ob.let_go) is not None
    assert cache.read(c) is not None  # no owner callback: pinned
    cache.touch(os.path.abspath(a))  # a is now used more recently than b
    with caplog.at_level("ERROR", logger="kudu_async.fs.block_cache"):
        assert cache.read(d, oc.let_go) is not None  # full: b, the least recently used evictable, goes
    assert ob.evicted == [os.path.abspath(b)] and oa.evicted == [] and not cache.holds(b)
    assert "failed to let it go" in caplog.text  # an owner that raises is logged; the eviction stands
    st = cache.status()
    assert (st["usage_bytes"], st["pinned_bytes"], st["evictions"]) == (3000, 1000, 1)
    assert cache.read(_file(tmp_path, "big", 3001)) is None  # larger than the whole budget
    del oc  # an owner that is gone is not called
    assert cache.read(e) is not None and oa.evicted == [os.path.abspath(a)]  # e pinned; a was older than d
    assert cache.read(b) is not None  # evicts d, whose owner is gone
    assert cache.read(_file(tmp_path, "f", 10)) is None  # everything left is pinned: refused
    assert cache.status()["refused"] == 2

    lazy = BlockCache(1500)
    og = Owner()
    assert lazy.read(a, og.let_go) is not None
    assert lazy.read(b, og.let_go, make_room=False) is None  # only free room: nothing evicted for it
    assert og.evicted == [] and lazy.holds(a) and lazy.status()["evictions"] == 0


def test_a_block_deleted_while_it_is_read_is_not_admitted(tmp_path: Any, monkeypatch: Any) -> None:
    """A compaction can delete a block while another thread opens it: the reader still gets its bytes,
    but the cache must not keep (and charge for) a block nobody can open again."""
    a = _file(tmp_path, "a", 500)
    cache = BlockCache(10_000)
    real = pa.OSFile

    class DroppingFile(real):  # type: ignore[misc, valid-type]
        def read_buffer(self, *args: Any) -> pa.Buffer:
            cache.drop([a])
            return super().read_buffer(*args)

    monkeypatch.setattr(pa, "OSFile", DroppingFile)
    buf = cache.read(a)
    monkeypatch.setattr(pa, "OSFile", real)
    assert buf is not None and buf.size == 500
    assert not cache.holds(a) and cache.status()["usage_bytes"] == 0
    assert cache.read(a) is not None and cache.status()["usage_bytes"] == 500  # admitted on a later open


def test_a_missing_block_raises_and_releases_its_reservation(tmp_path: Any) -> None:
    cache = BlockCache(10_000)
    with pytest.raises(OSError):
        cache.read(str(tmp_path / "nope"))
    assert cache.status()["usage_bytes"] == 0


def _tablet(path: str, cache: BlockCache | None) -> tuple[Tablet, Any, ManualHybridClock]:
    from kudu_async.common.schema import Schema

    schema = Schema.from_arrow(pa.schema(FIELDS), num_key_columns=1)
    clock = ManualHybridClock(10**12)
    return Tablet.create(path, schema, options=TabletOptions(sync=False, block_cache=cache), clock=clock), schema, clock


def _write(
    t: Tablet, clock: ManualHybridClock, op: OpType, keys: list[int], vals: list[str | None], index: int
) -> None:
    b = pa.record_batch([pa.array(keys, pa.int64()), pa.array(vals, pa.string())], schema=pa.schema(FIELDS))
    res = t.write(WriteOp([op] * len(keys), b), clock.now(), index)
    assert res.row_errors == []


def _lookup(t: Tablet, k: int, inline: bool) -> list[tuple[Any, ...]] | None:
    """The row of key ``k`` as the event loop would read it (``inline``; None: handed to a worker), or
    as a worker's scan does."""
    from kudu_async.common.predicate import ColumnPredicate as P

    spec = ScanSpec(predicates=[P("k", "=", k)])
    if inline:
        key = t.point_lookup_key(spec)
        assert key is not None
        it = t.scan_in_memory(spec, key)
        if it is None:
            return None
    else:
        it = t.scan(spec)
    tbl = it.to_table()
    return [] if tbl is None else list(zip(*[tbl.column(c).to_pylist() for c in tbl.column_names], strict=True))


def _range_scan(t: Tablet, k: int) -> list[tuple[Any, ...]]:
    """Key ``k`` read by a scan that is not a lookup (a one-key range): the rowset scan path."""
    from kudu_async.common.predicate import ColumnPredicate as P

    tbl = t.scan(ScanSpec(predicates=[P("k", ">=", k), P("k", "<=", k)])).to_table()
    return [] if tbl is None else list(zip(*[tbl.column(c).to_pylist() for c in tbl.column_names], strict=True))


def test_lookups_in_cached_rowsets_are_answered_from_memory_as_a_worker_would(tmp_path: Any) -> None:
    cache = BlockCache(64 << 20)
    t, _, clock = _tablet(str(tmp_path / "t"), cache)
    _write(t, clock, OpType.INSERT, list(range(0, 1000, 2)), [f"v{i}" for i in range(0, 1000, 2)], 1)
    t.flush_mrs()
    assert all(d.resident() for d in t.rowsets())  # every decoded block of the flushed rowset is held
    used = cache.status()["usage_bytes"]
    assert 0 < used <= cache.capacity_bytes
    assert used >= sum(d.base_bytes() for d in t.rowsets()) // 2  # charged at about the decoded size
    for k in (0, 2, 500, 998):
        assert _lookup(t, k, inline=True) == _lookup(t, k, inline=False) == [(k, f"v{k}")]
        assert _lookup(t, k, inline=True) == _range_scan(t, k)  # the general (non-lookup) scan agrees
    for k in (1, 999, 5000, -3):  # absent: the bloom filter or the cached key column says so
        assert _lookup(t, k, inline=True) == [] == _lookup(t, k, inline=False)

    # A change after the flush lives in the rowset's DeltaMemStore: until the per-row change state is
    # built (by a write that needs it or a worker's lookup) a lookup goes to a worker, then it is inline.
    _write(t, clock, OpType.UPDATE, [500], ["new"], 2)
    _write(t, clock, OpType.DELETE, [998], [None], 3)
    if t.rowsets()[0].built_delta_index() is None:
        assert _lookup(t, 500, inline=True) is None
        assert _lookup(t, 500, inline=False) == [(500, "new")]
    assert _lookup(t, 500, inline=True) == [(500, "new")] == _range_scan(t, 500)
    assert _lookup(t, 998, inline=True) == [] == _range_scan(t, 998)
    assert _lookup(t, 2, inline=True) == [(2, "v2")]
    # An older snapshot sees the row as written (the base data, before the deltas).
    from kudu_async.common.predicate import ColumnPredicate as P
    from kudu_async.tablet.tablet import READ_AT_SNAPSHOT

    old_ts = t.rowsets()[0].meta.max_ts
    snap = t.scan(
        ScanSpec(predicates=[P("k", "=", 500)], read_mode=READ_AT_SNAPSHOT, snapshot_ts=old_ts, snapshot_wait_s=0.0)
    ).to_table()
    assert snap is not None and snap.column("v").to_pylist() == ["v500"]
    before = t.scan(
        ScanSpec(predicates=[P("k", "=", 2)], read_mode=READ_AT_SNAPSHOT, snapshot_ts=old_ts - 1, snapshot_wait_s=0.0)
    ).to_table()
    assert before is None or before.num_rows == 0  # not yet written then
    t.flush_dms()  # the delta file is admitted too: still resident
    assert all(d.resident() for d in t.rowsets())
    assert _lookup(t, 500, inline=True) == [(500, "new")] and _lookup(t, 998, inline=True) == []

    # A compaction replaces the files: the old ones leave the cache, the new ones enter it.
    _write(t, clock, OpType.INSERT, list(range(1, 1000, 2)), [f"v{i}" for i in range(1, 1000, 2)], 4)
    t.flush_mrs()
    old = {b for d in t.rowsets() for b in (d.meta.base_block, *d.meta.delta_blocks)}
    assert t.compact_rowsets()
    live = {b for d in t.rowsets() for b in (d.meta.base_block, *d.meta.delta_blocks)}
    assert all(cache.holds(t.bm.path(b)) for b in live) and all(d.resident() for d in t.rowsets())
    assert not any(cache.holds(t.bm.path(b)) for b in old - live)
    assert _lookup(t, 501, inline=False) == [(501, "v501")]  # builds the new rowset's change state
    assert _lookup(t, 501, inline=True) == [(501, "v501")] and _lookup(t, 500, inline=True) == [(500, "new")]

    # Reopened (a restarted replica): the same immutable files are shared, not read and charged again.
    before = cache.status()
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=cache), clock=clock)
    after = cache.status()
    assert after["usage_bytes"] == before["usage_bytes"] and after["inserts"] == before["inserts"]
    assert after["hits"] > before["hits"] and all(d.resident() for d in t2.rowsets())
    assert _lookup(t2, 501, inline=False) == [(501, "v501")]
    assert _lookup(t2, 501, inline=True) == [(501, "v501")]


def test_rowsets_the_cache_cannot_hold_are_left_to_a_worker(tmp_path: Any) -> None:
    t, _, clock = _tablet(str(tmp_path / "nocache"), None)
    _write(t, clock, OpType.INSERT, [1, 2, 3], ["a", "b", "c"], 1)
    t.flush_mrs()
    assert _lookup(t, 2, inline=True) is None and _lookup(t, 2, inline=False) == [(2, "b")]
    assert _lookup(t, 7, inline=True) == []  # beyond every rowset's max key: memory says so

    # The base file fits, a later delta file does not: the rowset is no longer wholly in memory.
    path = str(tmp_path / "tight")
    probe, _, clock2 = _tablet(path + "-probe", BlockCache(64 << 20))
    _write(probe, clock2, OpType.INSERT, [1, 2, 3], ["a", "b", "c"], 1)
    probe.flush_mrs()
    base_size = probe.bm.cache.status()["usage_bytes"]  # type: ignore[union-attr]
    cache = BlockCache(base_size)
    t, _, clock = _tablet(path, cache)
    _write(t, clock, OpType.INSERT, [1, 2, 3], ["a", "b", "c"], 1)
    t.flush_mrs()
    assert cache.status()["usage_bytes"] == base_size
    assert _lookup(t, 2, inline=True) == [(2, "b")]
    _write(t, clock, OpType.UPDATE, [2], ["z"], 2)
    t.flush_dms()
    assert cache.status()["refused"] == 1 and not t.rowsets()[0].resident()
    assert _lookup(t, 2, inline=True) is None and _lookup(t, 2, inline=False) == [(2, "z")]


def test_a_missing_rowset_file_is_named_as_corruption_with_the_cache_too(tmp_path: Any) -> None:
    from kudu_async.common.errors import KuduCorruption

    t, _, clock = _tablet(str(tmp_path / "t"), BlockCache(64 << 20))
    _write(t, clock, OpType.INSERT, [1, 2], ["a", "b"], 1)
    t.flush_mrs()
    base = t.bm.path(t.rowsets()[0].meta.base_block)
    os.unlink(base)
    with pytest.raises(KuduCorruption, match="cannot read block"):
        Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=BlockCache(64 << 20)), clock=clock)


def test_an_evicted_rowset_reads_its_mapped_file_and_lookups_go_to_a_worker(tmp_path: Any) -> None:
    """A cache with room for one rowset's decoded blocks: the next flush's rowset takes it, the first one's
    blocks are evicted (its rows read from the file again), and its lookups are left to a worker while
    the new one's stay inline; a worker's read puts the block it decoded back in the cache."""
    probe, _, pclock = _tablet(str(tmp_path / "probe"), BlockCache(64 << 20))
    _write(probe, pclock, OpType.INSERT, list(range(100)), [f"v{i}" for i in range(100)], 1)
    probe.flush_mrs()
    one = probe.bm.cache.status()["usage_bytes"]  # type: ignore[union-attr]
    cache = BlockCache(one + one // 2)
    t, _, clock = _tablet(str(tmp_path / "t"), cache)
    _write(t, clock, OpType.INSERT, list(range(100)), [f"v{i}" for i in range(100)], 1)
    t.flush_mrs()
    first = t.rowsets()[0]
    assert first.resident() and _lookup(t, 7, inline=True) == [(7, "v7")]
    _write(t, clock, OpType.INSERT, list(range(1000, 1100)), [f"v{i}" for i in range(1000, 1100)], 2)
    t.flush_mrs()
    second = next(d for d in t.rowsets() if d is not first)
    assert cache.status()["evictions"] >= 1 and not first.resident() and second.resident()
    assert _lookup(t, 1007, inline=True) == [(1007, "v1007")]
    assert _lookup(t, 7, inline=True) is None and _lookup(t, 7, inline=False) == [(7, "v7")]
    assert _lookup(t, 7, inline=True) == [(7, "v7")]  # the worker's read put the block back in the cache
    assert _rows_of(t) == [*range(100), *range(1000, 1100)]

    # A restart opens old rowsets reading their footers only; the warm-up that follows bootstrap gives
    # them only free room, so warming every file of a tserver holding more than its budget does not read
    # each one (each evicting the last).
    again = BlockCache(one + one // 2)
    t2 = Tablet.open(t.tablet_dir, options=TabletOptions(sync=False, block_cache=again), clock=clock)
    assert again.status()["inserts"] == 0
    assert t2.warm_block_cache() == 1
    st = again.status()
    assert st["refused"] >= 1 and st["evictions"] == 0
    assert sum(d.resident() for d in t2.rowsets()) == 1
    assert _rows_of(t2) == [*range(100), *range(1000, 1100)]


def _rows_of(t: Tablet) -> list[int]:
    tbl = t.scan(ScanSpec(ordered=True)).to_table()
    return [] if tbl is None else tbl.column("k").to_pylist()
