"""The vectorised write path against a per-row reference model of it.

``reference_decide`` below decides row by row what ``WritePath`` decides column-wise (one key lookup per
row, a per-row overlay for keys repeated in a batch), with the row's last change read straight from
the rowset's delta tables. Random mixed batches (duplicate keys, every
op type including the *_IGNORE ones, keys in the MemRowSet and in several overlapping DiskRowSets,
deleted and re-inserted keys, fixed- and variable-width keys with trailing zero bytes) must get the same
per-row decision, errors and counts from ``prepare_write``, with and without ``replay``; the applied
result must match a dict model.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.tablet import rowset_maintenance as maintenance_mod
from kudu_async.tablet.bloom import BloomFilter, key_hashes
from kudu_async.tablet.compaction import CompactionInput, merge_rowsets
from kudu_async.tablet.delta_store import (
    LIVE_COL,
    ROW_COL,
    SEQ_COL,
    Mutation,
    apply_deltas,
    delta_rows_to_mutations,
    mutations_to_table,
)
from kudu_async.tablet.diskrowset import DiskRowSet, write_rowsets
from kudu_async.tablet.key_arrays import KeyBatch
from kudu_async.tablet.lock_manager import LockManager
from kudu_async.tablet.memrowset import MemRowSet
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.ops import LoggedWrite, OpType, RowError, WriteOp
from kudu_async.tablet.schema_info import KEY_COL, TS_COL
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions
from kudu_async.tablet.write_path import WritePath
from tests.unit.tablet.tablet_testkit import make_schema

_INSERT, _UPDATE, _DELETE = 1, 2, 3
ALL_OPS = list(OpType)


def _string_schema() -> Any:
    from kudu_async.common.schema import Schema

    fields = [
        pa.field("key", pa.string(), False),
        pa.field("i32", pa.int32(), True),
        pa.field("d", pa.float64(), True),
        pa.field("s", pa.string(), True),
    ]
    return Schema.from_arrow(pa.schema(fields), num_key_columns=1)


def _key_space(kind: str, n: int) -> list[Any]:
    if kind == "int":
        return list(range(n))
    # Variable width, with keys that differ only by trailing zero bytes and keys that prefix others.
    out = []
    for i in range(n // 4):
        base = f"k{i}"
        out += [base, base + "\x00", base + "\x00\x00", base + "x" * (i % 7 + 1)]
    return sorted(set(out))


# -- the per-row reference model of the write decisions --------------------------------------------------


def _reference_row_latest(d: DiskRowSet, row: int) -> tuple[int, bool]:
    deltas = d.delta_snapshot()
    if deltas is not None:
        mine = deltas.filter(pc.equal(deltas.column(ROW_COL), pa.scalar(row, pa.uint32())))
        if mine.num_rows:
            last = mine.sort_by([(TS_COL, "ascending"), (SEQ_COL, "ascending")]).slice(mine.num_rows - 1)
            return int(last.column(TS_COL)[0].as_py()), bool(last.column(LIVE_COL)[0].as_py())
    return int(d.read_base().column(TS_COL)[row].as_py()), True


def _reference_locate(t: Tablet, key: bytes) -> tuple[int, bool] | None:
    for m in t.components.memrowsets():
        r = m.get(key)
        if r is not None:  # the row's mutation chain, read mutation by mutation
            chain = m.deltas.mutations_of(r.rownum)
            return (chain[-1].ts, chain[-1].live) if chain else (r.insert_ts, True)
    for d in t.components.drs:
        pos = d.find_row(key)
        if pos is not None:
            return _reference_row_latest(d, pos)
    return None


def reference_decide(
    t: Tablet, op_types: list[int], keys: list[bytes], errors: dict[int, RowError], ts: int, replay: bool
) -> tuple[list[int], int]:
    """``WritePath._decide`` row by row: the action kind of every row (0: none)."""
    kinds = [0] * len(keys)
    overlay: dict[bytes, bool] = {}
    skipped: set[bytes] = set()
    ignored = 0
    for i, (op, key) in enumerate(zip(op_types, keys, strict=True)):
        if key is None or i in errors or key in skipped:
            continue
        if key in overlay:
            live = overlay[key]
        else:
            loc = _reference_locate(t, key)
            latest_ts, live = (-1, False) if loc is None else loc
            if replay and latest_ts >= ts:
                skipped.add(key)
                continue
        kind, error = _reference_action(op, live)
        if not kind:
            if error is None:
                ignored += 1
            else:
                errors[i] = RowError(i, error, _ERROR_MESSAGES[error])
            continue
        kinds[i] = kind
        overlay[key] = kind != _DELETE  # an update leaves a live key live
    return kinds, ignored


_ERROR_MESSAGES = {"ALREADY_PRESENT": "key already present", "NOT_FOUND": "key not found"}


def _reference_action(op: int, live: bool) -> tuple[int, str | None]:
    """What one row of type ``op`` does to its key, live or not: an action kind, or 0 with the row's error
    code (None: an *_IGNORE row ignored)."""
    if op in (OpType.INSERT, OpType.INSERT_IGNORE):
        if live:
            return 0, "ALREADY_PRESENT" if op == OpType.INSERT else None
        return _INSERT, None
    if op in (OpType.UPSERT, OpType.UPSERT_IGNORE):
        return (_UPDATE if live else _INSERT), None
    if not live:
        return 0, "NOT_FOUND" if op in (OpType.UPDATE, OpType.DELETE) else None
    return (_UPDATE if op in (OpType.UPDATE, OpType.UPDATE_IGNORE) else _DELETE), None


# -- harness ---------------------------------------------------------------------------------------------


class Diff:
    """A tablet, a dict model of its rows, and random mixed batches checked against ``reference_decide``."""

    def __init__(self, path: str, key_kind: str, seed: int) -> None:
        self.schema = make_schema() if key_kind == "int" else _string_schema()
        self.arrow = self.schema.to_arrow()
        self.clock = ManualHybridClock(10**12)
        opts = TabletOptions(sync=False, target_rowset_bytes=2000, history_max_age_sec=1e-9)
        self.path = path
        self.t = Tablet.create(path, self.schema, tablet_id="v", options=opts, clock=self.clock)
        self.wal: list[LoggedWrite] = []
        self.rng = random.Random(seed)
        self.keys = _key_space(key_kind, 240)
        self.model: dict[Any, tuple[Any, ...]] = {}
        self.past: list[int] = []
        self.index = 0
        self.checked = {"rows": 0, "dup_rows": 0, "drs_hits": 0, "mrs_hits": 0, "skipped": 0}

    def batch(self, n: int, hot: list[Any] | None = None) -> tuple[list[int], pa.RecordBatch, np.ndarray]:
        rng = self.rng
        pool = hot or self.keys
        ks = [rng.choice(pool) for _ in range(n)]
        if n > 4 and rng.random() < 0.5:  # runs of one key: insert/delete/re-insert chains in a batch
            k = rng.choice(pool)
            for j in rng.sample(range(n), min(n, 5)):
                ks[j] = k
        ops = [int(rng.choice(ALL_OPS)) for _ in range(n)]
        cols = [
            pa.array(ks, self.arrow.field(0).type),
            pa.array([rng.choice([None, rng.randint(-9, 9)]) for _ in range(n)], pa.int32()),
            pa.array([rng.choice([None, rng.random()]) for _ in range(n)], pa.float64()),
            pa.array([rng.choice([None, "", "x", "yy\x00"]) for _ in range(n)], pa.string()),
        ]
        mask = np.array([[True] + [rng.random() < 0.6 for _ in range(3)] for _ in range(n)], dtype=bool)
        return ops, pa.record_batch(cols, schema=self.arrow), mask

    def _expected(self, op: WriteOp, ts: int, replay: bool) -> tuple[list[int], dict[int, str], int]:
        keys = self.t.info.encode_keys(op.rows)
        errors: dict[int, RowError] = {}
        kinds, ignored = reference_decide(self.t, list(op.op_types), keys, errors, ts, replay)
        return kinds, {i: e.code for i, e in errors.items()}, ignored

    def _note_locations(self, op: WriteOp) -> None:
        keys = self.t.info.encode_keys(op.rows)
        self.checked["dup_rows"] += len(keys) - len(set(keys))
        for k in set(keys):
            if any(m.get(k) is not None for m in self.t.components.memrowsets()):
                self.checked["mrs_hits"] += 1
            elif any(d.find_row(k) is not None for d in self.t.components.drs):
                self.checked["drs_hits"] += 1

    def write(self, n: int, hot: list[Any] | None = None, ops: list[int] | None = None) -> None:
        gen_ops, b, mask = self.batch(n, hot)
        op = WriteOp(ops or gen_ops, b, mask)
        self.clock.advance(10)
        ts = self.clock.now()
        kinds, codes, ignored = self._expected(op, ts, False)
        self._note_locations(op)
        prepared = self.t.prepare_write(op, ts)
        assert prepared.plan.kind.tolist() == kinds
        assert {e.row_index: e.code for e in prepared.errors} == codes
        assert prepared.ignored == ignored
        self.index += 1
        self.wal.append(LoggedWrite(self.index, ts, op))
        res = self.t.apply_write(prepared, self.index)
        assert (res.inserted, res.updated, res.deleted, res.ignored) == (
            kinds.count(_INSERT),
            kinds.count(_UPDATE),
            kinds.count(_DELETE),
            ignored,
        )
        self._apply_model(b, mask, kinds)
        self.past.append(ts)
        self.checked["rows"] += n

    def replay_check(self, n: int) -> None:
        """prepare_write(replay=True) at a past timestamp decides like the per-row reference (then aborted)."""
        if not self.past:
            return
        ops, b, mask = self.batch(n)
        op = WriteOp(ops, b, mask)
        ts = self.rng.choice(self.past) + self.rng.choice([-1, 0, 1])
        kinds, codes, ignored = self._expected(op, ts, True)
        prepared = self.t.prepare_write(op, ts, replay=True)
        try:
            assert prepared.plan.kind.tolist() == kinds
            assert {e.row_index: e.code for e in prepared.errors} == codes
            assert prepared.ignored == ignored
        finally:
            self.t.abort_write(prepared)
        self.checked["skipped"] += sum(1 for i, k in enumerate(kinds) if k == 0 and i not in codes)

    def _apply_model(self, b: pa.RecordBatch, mask: np.ndarray, kinds: list[int]) -> None:
        cols = [b.column(i).to_pylist() for i in range(4)]
        for i, k in enumerate(kinds):
            key, vals = cols[0][i], (cols[1][i], cols[2][i], cols[3][i])
            if k == _INSERT:
                self.model[key] = vals
            elif k == _UPDATE:
                cur = self.model[key]
                self.model[key] = tuple(v if mask[i, c + 1] else cur[c] for c, v in enumerate(vals))
            elif k == _DELETE:
                del self.model[key]

    def reopen(self) -> None:
        """Crash (drop the tablet without flushing) and bootstrap from files plus the WAL."""
        self.t = Tablet.open(self.path, log_ops=list(self.wal), options=self.t.options, clock=self.clock)

    def check_state(self) -> None:
        got = self.t.scan(ScanSpec(ordered=True)).to_table()
        rows = [] if got is None else list(zip(*[got.column(c).to_pylist() for c in got.column_names], strict=True))
        want = [(k, *self.model[k]) for k in sorted(self.model, key=lambda k: self.t.info.encode_key([k]))]
        assert rows == want
        for d in self.t.rowsets():  # every mutation is stored once (flush/compaction carry-over)
            deltas = d.delta_snapshot()
            if deltas is not None:
                ids = deltas.select([ROW_COL, TS_COL, SEQ_COL]).to_pylist()
                assert len({tuple(r.values()) for r in ids}) == len(ids)


@pytest.mark.parametrize("key_kind", ["int", "string"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mixed_batches_decide_like_the_per_row_loop(tmp_path: Any, key_kind: str, seed: int) -> None:
    h = Diff(str(tmp_path / "t"), key_kind, seed)
    for step in range(45):
        h.write(h.rng.choice([1, 7, 40, 150]))
        if step % 3 == 0:
            h.replay_check(h.rng.choice([5, 60]))
        r = h.rng.random()
        if r < 0.25:
            h.t.flush_mrs()  # several overlapping DiskRowSets (each flush spans the key space)
        elif r < 0.35:
            h.t.flush_dms()
        elif r < 0.4:
            h.clock.advance(100)
            h.t.compact_rowsets()
        if step % 9 == 0:
            h.check_state()
        if step % 15 == 14:
            h.reopen()
            h.check_state()
    h.check_state()
    c = h.checked
    assert c["dup_rows"] and c["drs_hits"] and c["mrs_hits"] and c["skipped"], c
    assert len(h.t.rowsets()) >= 2


def test_flush_and_compaction_between_prepare_and_apply(tmp_path: Any) -> None:
    """Rows located in a MemRowSet or DiskRowSet that is flushed/compacted away before apply are
    found again; a re-insert of a row the compaction dropped becomes a fresh insert."""
    h = Diff(str(tmp_path / "t"), "int", 7)
    for _ in range(6):
        h.write(60)
        h.t.flush_mrs()
    h.write(60)  # some keys in the MemRowSet
    relocated = 0
    for rnd in range(12):
        ops, b, mask = h.batch(80)
        op = WriteOp(ops, b, mask)
        h.clock.advance(10)
        ts = h.clock.now()
        kinds, codes, ignored = h._expected(op, ts, False)
        prepared = h.t.prepare_write(op, ts)
        assert prepared.plan.kind.tolist() == kinds
        if rnd % 2 == 0:
            h.t.flush_mrs()
        h.clock.advance(100)
        h.t.compact_rowsets()
        relocated += any(s.retired for s in prepared.plan.stores)
        h.index += 1
        res = h.t.apply_write(prepared, h.index)
        assert {e.row_index: e.code for e in res.row_errors} == codes
        assert (res.inserted, res.updated, res.deleted, res.ignored) == (
            kinds.count(_INSERT),
            kinds.count(_UPDATE),
            kinds.count(_DELETE),
            ignored,
        )
        h._apply_model(b, mask, kinds)
        h.wal.append(LoggedWrite(h.index, ts, op))
        h.check_state()
        h.write(30)
    assert relocated >= 6
    h.reopen()
    h.check_state()


@pytest.mark.parametrize("during", ["compaction", "flush", "flush_input"])
def test_writes_during_flush_and_compaction_are_carried_over(tmp_path: Any, monkeypatch: Any, during: str) -> None:
    """Batches applied while a flush/compaction runs outside the lock land in the frozen stores'
    successors and are carried over to the new rowsets: column-wise DeltaMemStore chunks become
    Mutations again with their keys, log index and (for re-inserts of rows the compaction dropped)
    key values; a crash after that replays the WAL from the right place."""
    h = Diff(str(tmp_path / "t"), "int", 17)
    for _ in range(4):
        h.write(80, ops=[OpType.UPSERT] * 80)
        h.t.flush_mrs()
    dead = sorted(h.model)[::3]
    b = pa.record_batch(
        [pa.array(dead, pa.int64()), *(pa.nulls(len(dead), f.type) for f in list(h.arrow)[1:])], schema=h.arrow
    )
    h.clock.advance(10)
    h.index += 1
    op = WriteOp([OpType.DELETE] * len(dead), b)
    h.wal.append(LoggedWrite(h.index, h.clock.now(), op))
    assert h.t.write(op, h.clock.now(), h.index).deleted == len(dead)
    for k in dead:
        del h.model[k]
    h.write(40, ops=[OpType.UPSERT] * 40)  # some rows in the MemRowSet
    while h.t.flush_dms():
        pass
    h.clock.advance(1000)
    calls = 0

    def writes_meanwhile(orig: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            nonlocal calls
            calls += 1
            h.write(60, hot=dead)  # re-inserts of dropped rows, plus updates/deletes of live ones
            h.write(120)
            return orig(*a, **kw)

        return run

    if during == "compaction":
        monkeypatch.setattr(maintenance_mod, "merge_rowsets", writes_meanwhile(merge_rowsets))
        assert h.t.compact_rowsets()
    elif during == "flush":
        monkeypatch.setattr(maintenance_mod, "write_rowsets", writes_meanwhile(write_rowsets))
        assert h.t.flush_mrs()
    else:  # after the MemRowSet is frozen, before its content is read
        monkeypatch.setattr(MemRowSet, "flush_input", writes_meanwhile(MemRowSet.flush_input))
        assert h.t.flush_mrs()
    assert calls == 1
    h.check_state()
    monkeypatch.undo()
    h.write(100)
    h.check_state()
    h.reopen()
    h.check_state()
    h.t.flush_all()
    h.t.compact_rowsets()
    h.check_state()


def test_bloom_batch_probe_matches_single_probes() -> None:
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randint(0, 24)) for _ in range(3000)]
    bf = BloomFilter.from_bytes(BloomFilter.build(keys).to_bytes())
    probe = keys + [rng.randbytes(rng.randint(0, 24)) for _ in range(6000)]
    got = bf.may_contain_hashes(key_hashes(probe))
    assert got.tolist() == [bf.may_contain(k) for k in probe]
    assert got[: len(keys)].all()


def test_find_rows_matches_find_row_on_variable_width_keys(tmp_path: Any) -> None:
    schema = _string_schema()
    clock = ManualHybridClock(10**12)
    t = Tablet.create(str(tmp_path / "t"), schema, options=TabletOptions(sync=False), clock=clock)
    keys = _key_space("string", 400)
    stored = keys[::2]
    b = pa.record_batch(
        [
            pa.array(stored),
            pa.nulls(len(stored), pa.int32()),
            pa.nulls(len(stored), pa.float64()),
            pa.nulls(len(stored), pa.string()),
        ],
        schema=schema.to_arrow(),
    )
    t.write(WriteOp([OpType.INSERT] * len(stored), b), clock.now(), 1)
    t.flush_mrs()
    [d] = t.rowsets()
    probe_vals = [*keys, "", "\x00", "zzzz" * 10]
    enc: list[bytes | None] = [t.info.encode_key([k]) for k in probe_vals]
    enc.insert(3, None)  # an invalid row in the batch
    kb = KeyBatch(enc)
    rows = kb.rows_in_range(d.min_key, d.max_key)
    assert sorted(rows.tolist()) == [i for i, k in enumerate(enc) if k is not None and d.min_key <= k <= d.max_key]
    got = d.find_rows(kb, rows)
    want = [d.find_row(enc[r]) for r in rows.tolist()]
    assert got.tolist() == [-1 if w is None else w for w in want]
    assert sum(w is not None for w in want) == len(stored)


def test_rowset_state_follows_mutations_and_survives_reopen(tmp_path: Any) -> None:
    """The per-row (last ts, live) arrays agree with the delta tables after writes, DMS flushes and
    a reopen (where they are rebuilt from the files)."""
    h = Diff(str(tmp_path / "t"), "int", 11)
    h.write(150)
    h.t.flush_mrs()
    for i in range(8):
        h.write(100)
        if i % 3 == 2:
            h.t.flush_dms()
    h.t.flush_mrs()
    h.write(100)

    def check(t: Tablet) -> None:
        for d in t.rowsets():
            ts, live = d.rows_latest(np.arange(d.num_rows()))
            mutated = d.delta_index().lookup(np.arange(d.num_rows()))[0]
            deltas = d.delta_snapshot()
            touched = set() if deltas is None else set(deltas.column(ROW_COL).to_pylist())
            for row in range(d.num_rows()):
                assert (int(ts[row]), bool(live[row])) == _reference_row_latest(d, row)
                assert bool(mutated[row]) == (row in touched)

    check(h.t)
    reopened = Tablet.open(str(tmp_path / "t"), options=h.t.options, clock=h.clock)
    check(reopened)


@pytest.mark.parametrize("writes", [4, 12])
def test_mrs_rows_are_located_by_batch(tmp_path: Any, writes: int) -> None:
    """Also past the first growth of the per-row arrays after the last-change ones were made (12 writes
    store more rows than the initial 1,024)."""
    h = Diff(str(tmp_path / "t"), "int", 5)
    h.write(200, ops=[int(OpType.INSERT)] * 200)
    assert h.t.components.mrs._last_ts is None  # inserts alone: no last-change arrays yet
    for _ in range(writes - 1):
        h.write(200)  # later batches mutate rows earlier ones inserted into the MemRowSet
    mrs = h.t.components.mrs
    assert mrs._last_ts is not None and mrs._live is not None and mrs._insert_ts is not None
    assert len(mrs._last_ts) == len(mrs._live) == len(mrs._insert_ts)
    assert writes < 12 or mrs._num_stored > 1024
    keys = [h.t.info.encode_key([k]) for k in range(240)]
    store, _pos, latest, live, stores = WritePath(h.t.components).locate_batch(
        KeyBatch(list(keys)), np.ones(len(keys), dtype=bool)
    )
    mutated = 0
    for i, k in enumerate(keys):
        r = h.t.components.mrs.get(k)
        if r is None:
            assert store[i] == -1
            continue
        assert stores[store[i]] is h.t.components.mrs
        chain = h.t.components.mrs.deltas.mutations_of(r.rownum)
        mutated += bool(chain) and chain[-1].ts > r.insert_ts
        assert (latest[i], live[i]) == ((chain[-1].ts, chain[-1].live) if chain else (r.insert_ts, True))
    assert mutated > 20


def _num_locked(lm: LockManager) -> int:
    """Keys held by every owner: what the lock manager's own all-or-nothing rule is checked against."""
    return sum(keys.n for keys in lm._held.values())


def test_lock_owners_conflict_only_on_shared_keys() -> None:
    from kudu_async.common.errors import KuduTimedOut
    from kudu_async.tablet.key_arrays import KeySet

    lm = LockManager()
    lm.acquire(KeySet.of([b"a", b"b", b"b"]), 1, 0)  # a repeated key is one lock
    assert _num_locked(lm) == 2
    with pytest.raises(KuduTimedOut):
        lm.acquire(KeySet.of([b"b", b"z"]), 2, 0)
    assert _num_locked(lm) == 2  # all or nothing: b"z" was not taken
    lm.acquire(KeySet.of([b"aa", b"c"]), 2, 0)  # inside op 1's range, no shared key
    with pytest.raises(ValueError, match="already holds"):
        lm.acquire(KeySet.of([b"q"]), 2, 0)
    lm.release_all(1)
    lm.acquire(KeySet.of([b"b", b"z"]), 3, 0)
    assert _num_locked(lm) == 4
    lm.release_all(2)
    lm.release_all(3)
    assert _num_locked(lm) == 0


@pytest.mark.parametrize("width", [1, 2, 4, 8, 5, None])
def test_key_sets_overlap_exactly(width: int | None) -> None:
    """Integer-width keys (sorted numeric search), other fixed widths and varying widths (Arrow's
    is_in) all find a single shared key among many, and none where there is none."""
    from kudu_async.tablet.key_arrays import KeySet

    rng = random.Random(width or 0)

    def key(v: int) -> bytes:
        if width is None:
            return v.to_bytes(4, "big")[: 1 + v % 4]
        return (v % (256**width)).to_bytes(width, "big")

    space = 256 if width == 1 else 100_000
    vals = rng.sample(range(space), min(space, 4000))
    a_vals, b_vals = vals[: len(vals) // 2], vals[len(vals) // 2 :]
    a, b = KeySet.of([key(v) for v in a_vals]), KeySet.of([key(v) for v in b_vals])
    assert a.lo <= b.hi and b.lo <= a.hi  # ranges overlap: the exact test decides
    shared = {key(v) for v in a_vals} & {key(v) for v in b_vals}
    assert a.overlaps(b) is bool(shared) and b.overlaps(a) is bool(shared)
    one = key(b_vals[rng.randrange(len(b_vals))])
    c = KeySet.of([key(v) for v in a_vals] + [one])
    assert c.overlaps(b) and b.overlaps(c)
    assert not KeySet.of([]).overlaps(b) and not b.overlaps(KeySet.of([]))


def test_key_sets_of_different_widths_and_forms() -> None:
    from kudu_async.tablet.key_arrays import KeySet

    ints8 = KeySet.of([(v).to_bytes(8, "big") for v in range(1000)])
    assert ints8.sorted is not None and ints8.n == 1000
    ints4 = KeySet.of([(v).to_bytes(4, "big") for v in range(1000)])
    assert not ints8.overlaps(ints4)  # keys of two widths are never equal
    mixed = KeySet.of([b"\x00" * 8, b"\x00\x01"])  # varying widths: compared as Arrow arrays
    assert mixed.sorted is None
    assert mixed.overlaps(ints8) and ints8.overlaps(mixed)
    assert mixed.overlaps(ints4) is False
    assert KeySet.of([(0).to_bytes(4, "big"), b"\x00\x01"]).overlaps(ints4)


def test_release_all_frees_one_ops_keys_and_wakes_a_waiting_op() -> None:
    import threading

    from kudu_async.tablet.key_arrays import KeySet

    lm = LockManager()
    lm.acquire(KeySet.of([b"k%d" % i for i in range(1000)]), 1, 0)
    lm.acquire(KeySet.of([b"other"]), 2, 0)
    got: list[bool] = []

    def wait_for_the_locks() -> None:
        lm.acquire(KeySet.of([b"k999", b"new"]), 3, 10.0)
        got.append(True)

    waiter = threading.Thread(target=wait_for_the_locks)
    waiter.start()
    lm.release_all(1)
    waiter.join(10.0)
    assert got == [True] and not waiter.is_alive()
    assert _num_locked(lm) == 3  # b"other" (op 2), b"k999" and b"new" (op 3)
    lm.release_all(1)  # nothing held any more: a no-op
    lm.release_all(2)
    lm.release_all(3)
    assert _num_locked(lm) == 0


# -- compaction: a per-row reference fold ----------------------------------------------------------------


def _reference_fold_rowset(info: Any, inp: Any, ahm: int) -> tuple[pa.Table, list[Mutation]]:
    base = inp.base
    snap = MvccSnapshot.at(ahm)
    value_cols = [info.names[i] for i in info.value_indices]
    folded, live = apply_deltas(base, 0, inp.deltas, snap, value_cols)
    later: list[Mutation] = []
    if inp.deltas is not None and inp.deltas.num_rows:
        newer = inp.deltas.filter(pc.greater(inp.deltas.column(TS_COL), pa.scalar(ahm, pa.uint64())))
        keys = base.column(KEY_COL).to_pylist() if newer.num_rows else []
        later = [m for _, m in sorted(delta_rows_to_mutations(info, newer, keys), key=lambda it: (it[1].ts, it[1].seq))]
    keep = np.ones(folded.num_rows, dtype=bool) if live is None else live.copy()
    keep |= pc.greater(folded.column(TS_COL), pa.scalar(ahm, pa.uint64())).to_numpy(zero_copy_only=False)
    dead_keys = set(folded.column(KEY_COL).filter(pa.array(~keep)).to_pylist()) if not keep.all() else set()
    revived: list[dict[str, Any]] = []
    if dead_keys and later:
        remaining = []
        for m in later:
            if m.key in dead_keys:
                assert m.reinsert
                row: dict[str, Any] = {info.names[i]: m.changes[i] for i in info.value_indices}  # type: ignore[index]
                row.update({"__key__": m.key, "__ts__": m.ts})
                revived.append(row)
                dead_keys.discard(m.key)
            else:
                remaining.append(m)
        later = remaining
    out = folded.filter(pa.array(keep))
    if revived:
        idx = pc.index_in(pa.array([r["__key__"] for r in revived], pa.binary()), value_set=base.column(KEY_COL))
        sub = base.take(idx)
        cols = {}
        for i, f in enumerate(info.arrow):
            vals = sub.column(i).to_pylist() if i < info.num_key_columns else [r[f.name] for r in revived]
            cols[f.name] = pa.array(vals, f.type)
        cols[KEY_COL] = pa.array([r["__key__"] for r in revived], pa.binary())
        cols[TS_COL] = pa.array([r["__ts__"] for r in revived], pa.uint64())
        out = pa.concat_tables([out, pa.table(cols, schema=out.schema)])
    return out, later


def _reference_merge_rowsets(info: Any, inputs: list[Any], ahm: int) -> tuple[pa.Table, list[tuple[int, Mutation]]]:
    tables, muts = [], []
    for inp in inputs:
        t, later = _reference_fold_rowset(info, inp, ahm)
        tables.append(t)
        muts.extend(later)
    merged = pa.concat_tables(tables).sort_by([(KEY_COL, "ascending")]).combine_chunks()
    pos = pc.index_in(pa.array([m.key for m in muts], pa.binary()), value_set=merged.column(KEY_COL))
    return merged, list(zip(pos.to_pylist(), muts, strict=True))


@pytest.mark.parametrize("key_kind", ["int", "string"])
def test_compaction_merge_matches_the_per_row_fold(tmp_path: Any, key_kind: str) -> None:
    """merge_rowsets (column-wise) gives the same rows and the same deltas newer than the AHM as the
    per-row reference fold, at many AHMs: rows dead at the AHM dropped or revived by a later re-insert."""
    h = Diff(str(tmp_path / "t"), key_kind, 23)
    for step in range(30):
        h.write(h.rng.choice([20, 80]), hot=h.keys[:60])
        if step % 4 == 3:
            h.t.flush_mrs()
        elif step % 4 == 1:
            h.t.flush_dms()
    h.t.flush_mrs()
    info = h.t.info
    inputs = [CompactionInput(d.read_base(), d.delta_snapshot()) for d in h.t.rowsets()]
    revived = 0
    for ahm in [h.past[0] - 1, *h.past[:: max(1, len(h.past) // 12)], h.past[-1]]:
        want, want_deltas = _reference_merge_rowsets(info, inputs, ahm)
        got, got_deltas = merge_rowsets(info, inputs, ahm)
        assert got.equals(want)
        cols = [ROW_COL, TS_COL, SEQ_COL, LIVE_COL]
        want_t = mutations_to_table(info, want_deltas).select(cols) if want_deltas else None
        got_t = (
            None
            if got_deltas is None
            else got_deltas.sort_by([(ROW_COL, "ascending"), (TS_COL, "ascending"), (SEQ_COL, "ascending")])
        )
        if want_t is None:
            assert got_t is None
        else:
            assert got_t is not None
            assert got_t.select(cols).to_pylist() == want_t.to_pylist()
            full_want = mutations_to_table(info, want_deltas)
            for name in full_want.column_names[4:]:
                assert got_t.column(name).to_pylist() == full_want.column(name).to_pylist(), name
        revived += sum(1 for t in got.column(TS_COL).to_pylist() if t > ahm) - sum(
            1 for inp in inputs for t in inp.base.column(TS_COL).to_pylist() if t > ahm
        )
    assert revived > 0  # some rows dead at an AHM came back through a later re-insert


def test_delta_store_never_caches_a_table_older_than_its_last_add(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen MemRowSet's flush reads its DeltaMemStore outside the tablet lock while writes to its
    keys still add to it: a table built before such an add must not become the cached answer (that
    lost updates and deletes in the concurrent-maintenance test)."""
    from kudu_async.tablet import delta_store
    from kudu_async.tablet.schema_info import SchemaInfo

    dms = delta_store.DeltaMemStore(SchemaInfo(make_schema().with_column_ids()))
    dms.add(0, Mutation(10, 1, True, {1: 5}, 1, b"k0"))
    real = delta_store.mutations_to_table

    def racing(info: Any, singles: Any) -> pa.Table:
        monkeypatch.setattr(delta_store, "mutations_to_table", real)
        chunk = real(info, [(1, Mutation(11, 2, False, None, 2, b"k1"))])
        dms.add_chunk(chunk, np.zeros(1, dtype=bool), 2, 11, 100)  # a write batch lands meanwhile
        return real(info, singles)

    monkeypatch.setattr(delta_store, "mutations_to_table", racing)
    assert dms.to_table().num_rows == 1  # what was there when the build began
    assert dms.to_table().num_rows == 2  # not the stale table from the cache
    assert dms.to_table().column(ROW_COL).to_pylist() == [0, 1]


@pytest.mark.parametrize("width", [None, 1, 2, 3, 4, 8, 16])
def test_memrowset_sorted_view_orders_keys_as_python_compares_bytes(width: int | None) -> None:
    """The scans' sorted view of a MemRowSet's keys: byte order (prefixes first, NUL bytes count), row
    numbers carried along, bisection that matches ``bisect`` on the sorted list, and the same when keys
    arrive in batches sorted into the previous view (random widths: Arrow's sort; one width: numpy's).
    """
    import bisect
    import random

    from kudu_async.tablet.schema_info import SchemaInfo

    rng = random.Random(7 + (width or 0))
    alphabet = b"\x00\x01\x7f\x80\xff"

    def key() -> bytes:
        n = rng.randrange(0, 6) if width is None else width
        return bytes(rng.choice(alphabet) for _ in range(n))

    keys = list(dict.fromkeys(key() for _ in range(3000)))
    mrs = MemRowSet(SchemaInfo(make_schema().with_column_ids()), 0)
    rownum = {k: 7 * i for i, k in enumerate(keys)}  # row numbers are the MemRowSet's; any distinct ints
    mrs._insert_ts = np.zeros(7 * len(keys) + 1, dtype=np.int64)
    done: list[bytes] = []
    cuts = sorted({0, len(keys), *rng.sample(range(1, len(keys)), min(4, len(keys) - 1))})
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        part = keys[lo:hi]
        given = pa.array(part, pa.binary()) if i % 2 else part  # as the write's Arrow array or a list
        mrs.insert_many(given, [rownum[k] for k in part], 1, 1)
        done += part
        view = mrs.sorted_view()
        expect = sorted(done)
        assert view.keys.to_pylist() == expect
        assert view.rownums.tolist() == [rownum[k] for k in expect]
        assert mrs.sorted_view() is view  # kept until the next insert
    for probe in [b"", b"\x00", b"\x7f\x80", b"\xff\xff\xff\xff\xff\xff\xff", *rng.sample(keys, min(50, len(keys)))]:
        assert view.bisect(probe) == bisect.bisect_left(expect, probe)
        assert view.bisect(probe, right=True) == bisect.bisect_right(expect, probe)


@pytest.mark.parametrize("width", [None, 1, 2, 4, 8, 12])
def test_key_sort_order_is_byte_order_and_stable(width: int | None) -> None:
    """``sort_order``: byte order for equal-width keys (numpy views) and others (Arrow), equal keys in
    their given order, on sliced arrays too."""
    from kudu_async.tablet.key_arrays import sort_order

    rng = random.Random(11)
    n = 2000
    keys = [
        bytes(rng.choice(b"\x00\x01\x80\xff") for _ in range(rng.randrange(0, 5) if width is None else width))
        for _ in range(n)
    ]
    arr = pa.array(keys, pa.binary())
    for a, ks in ((arr, keys), (arr.slice(37, 1500), keys[37:1537])):
        order = sort_order(a)
        assert order.tolist() == sorted(range(len(ks)), key=lambda i: ks[i])  # sorted() is stable too
