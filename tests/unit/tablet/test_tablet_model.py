"""Model-based test: random writes, flushes, compactions, snapshot scans and crash-reopens of one
tablet, checked against a dict model that keeps each key's full history."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kudu_async.common.clock import ManualHybridClock, timestamp_from_seconds_ago
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.tablet.ops import LoggedWrite, OpType, WriteOp
from kudu_async.tablet.tablet import READ_AT_SNAPSHOT, ScanSpec, Tablet, TabletOptions
from tests.unit.tablet.tablet_testkit import encode_key, make_schema

KEYS = st.integers(0, 15)
OPS = st.sampled_from(list(OpType))
VALS = st.tuples(
    st.one_of(st.none(), st.integers(-5, 5)),
    st.one_of(st.none(), st.floats(-2, 2, width=32).map(lambda x: x + 0.0)),
    st.one_of(st.none(), st.sampled_from(["a", "b", "", "zz\x00y"])),
)
ROW = st.tuples(OPS, KEYS, VALS, st.tuples(st.booleans(), st.booleans(), st.booleans()))
HISTORY_S = 0.002  # 2 ms of history at 100 us per op: AHM moves and history GC is exercised


def merge(vals: Any, setm: Any, cur: Any) -> tuple[Any, ...]:
    return tuple(v if s else c for v, s, c in zip(vals, setm, cur, strict=True))


class TabletModel(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tablet-model-")
        self.schema = make_schema()
        self.clock = ManualHybridClock(1_000_000_000)
        self.opts = TabletOptions(sync=False, history_max_age_sec=HISTORY_S, target_rowset_bytes=600)
        self.tablet = Tablet.create(self.dir, self.schema, tablet_id="m", options=self.opts, clock=self.clock)
        self.history: dict[int, list[tuple[int, tuple[Any, ...] | None]]] = {}
        self.wal: list[LoggedWrite] = []
        self.timestamps: list[int] = []

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _state(self, key: int, ts: int | None = None) -> tuple[Any, ...] | None:
        h = self.history.get(key, [])
        for t, v in reversed(h):
            if ts is None or t <= ts:
                return v
        return None

    @rule(rows=st.lists(ROW, min_size=1, max_size=8))
    def write(self, rows: list[Any]) -> None:
        self.clock.advance(100)
        ts = self.clock.now()
        arrow = self.schema.to_arrow()
        batch = pa.record_batch(
            [
                pa.array([r[1] for r in rows], pa.int64()),
                pa.array([r[2][0] for r in rows], pa.int32()),
                pa.array([r[2][1] for r in rows], pa.float64()),
                pa.array([r[2][2] for r in rows], pa.string()),
            ],
            schema=arrow,
        )
        mask = np.array([[True, *r[3]] for r in rows], dtype=bool)
        op = WriteOp([int(r[0]) for r in rows], batch, mask)
        index = len(self.wal) + 1
        self.wal.append(LoggedWrite(index, ts, op))
        res = self.tablet.write(op, ts, index)
        expected_errors = {}
        for i, (t, k, vals, setm) in enumerate(rows):
            cur = self._state(k)
            new: Any = "same"
            if t in (OpType.INSERT, OpType.INSERT_IGNORE):
                if cur is not None:
                    if t == OpType.INSERT:
                        expected_errors[i] = "ALREADY_PRESENT"
                else:
                    new = tuple(vals)
            elif t in (OpType.UPSERT, OpType.UPSERT_IGNORE):
                new = tuple(vals) if cur is None else merge(vals, setm, cur)
            elif t in (OpType.UPDATE, OpType.UPDATE_IGNORE):
                if cur is None:
                    if t == OpType.UPDATE:
                        expected_errors[i] = "NOT_FOUND"
                else:
                    new = merge(vals, setm, cur)
            else:
                if cur is None:
                    if t == OpType.DELETE:
                        expected_errors[i] = "NOT_FOUND"
                else:
                    new = None
            if new != "same":
                self.history.setdefault(k, []).append((ts, new))
        assert {e.row_index: e.code for e in res.row_errors} == expected_errors
        self.timestamps.append(ts)

    def _check_scan(self, spec: ScanSpec, at: int | None) -> None:
        got_t = self.tablet.scan(spec).to_table()
        cols = [] if got_t is None else [got_t.column(c).to_pylist() for c in got_t.column_names]
        got = list(zip(*cols, strict=True))
        names = ["key", "i32", "d", "s"]
        proj = spec.projection or names
        want = []
        for k in sorted(self.history):
            v = self._state(k, at)
            if v is None:
                continue
            row = dict(zip(names, (k, *v), strict=False))
            if spec.lower_key is not None and encode_key(self.schema, k) < spec.lower_key:
                continue
            if spec.upper_key is not None and encode_key(self.schema, k) >= spec.upper_key:
                continue
            if all(p.matches(row[p.column]) for p in spec.predicates):
                want.append(tuple(row[c] for c in proj))
        if spec.limit is not None:
            assert len(got) == min(spec.limit, len(want))
            assert set(got) <= set(want)
        else:
            assert got == want

    @invariant()
    def latest_scan_matches(self) -> None:
        if hasattr(self, "tablet"):
            self._check_scan(ScanSpec(ordered=True), None)

    @precondition(lambda self: self.timestamps)
    @rule(data=st.data())
    def snapshot_scan(self, data: st.DataObject) -> None:
        ahm = timestamp_from_seconds_ago(self.clock.now(), HISTORY_S) + 1
        usable = [t for t in self.timestamps if t >= ahm]
        if not usable:
            return
        ts = data.draw(st.sampled_from(usable))
        self._check_scan(ScanSpec(ordered=True, read_mode=READ_AT_SNAPSHOT, snapshot_ts=ts), ts)

    @rule(
        col=st.sampled_from(["i32", "d", "s", "key"]),
        op=st.sampled_from(["=", "<", "<=", ">", ">=", "IS NULL", "IS NOT NULL", "IN"]),
        lo=st.one_of(st.none(), KEYS),
        hi=st.one_of(st.none(), KEYS),
        proj=st.sampled_from([None, ["key", "s"], ["d"]]),
        limit=st.one_of(st.none(), st.integers(0, 4)),
    )
    def predicate_scan(
        self, col: str, op: str, lo: int | None, hi: int | None, proj: list[str] | None, limit: int | None
    ) -> None:
        value: Any = {"i32": 1, "d": 0.0, "s": "b", "key": 7}[col]
        if op == "IN":
            value = {"i32": [0, 1, 2], "d": [0.0], "s": ["a", ""], "key": [1, 3, 5]}[col]
        if op in ("IS NULL", "IS NOT NULL"):
            value = None
        spec = ScanSpec(
            projection=proj,
            predicates=[ColumnPredicate(col, op, value)],
            limit=limit,
            ordered=True,
            lower_key=None if lo is None else encode_key(self.schema, lo),
            upper_key=None if hi is None else encode_key(self.schema, hi),
        )
        self._check_scan(spec, None)

    @rule(
        key=KEYS,
        data=st.data(),
        extra=st.sampled_from([None, ("i32", ">=", 0), ("s", "=", "a"), ("d", "IS NULL", None), ("key", "<", 9)]),
        proj=st.sampled_from([None, ["s"], ["key", "d"]]),
        limit=st.sampled_from([None, 0, 1]),
        bound=st.sampled_from([None, "lower", "upper", "resume"]),
    )
    def point_scan(
        self, key: int, data: st.DataObject, extra: Any, proj: list[str] | None, limit: int | None, bound: str | None
    ) -> None:
        """Scans that pin the key take the tablet's point path: the same answers as the model, at the
        latest time or a snapshot, with other predicates, projections, limits and key bounds."""
        ahm = timestamp_from_seconds_ago(self.clock.now(), HISTORY_S) + 1
        usable = [t for t in self.timestamps if t >= ahm]
        at = data.draw(st.sampled_from([None, *usable]))
        live = [k for k in sorted(self.history) if self._state(k, at) is not None]
        if live:  # noqa: SIM102 - the coin is drawn only when there is a key to pick
            if data.draw(st.booleans()):
                key = data.draw(st.sampled_from(live))  # often a key that has a row to find
        preds = [ColumnPredicate("key", "=", key)] + ([] if extra is None else [ColumnPredicate(*extra)])
        enc = encode_key(self.schema, key)
        spec = ScanSpec(
            projection=proj,
            predicates=preds,
            limit=limit,
            ordered=True,
            read_mode=READ_AT_SNAPSHOT if at is not None else "READ_LATEST",
            snapshot_ts=at,
            lower_key=enc if bound == "lower" else None,
            upper_key=enc if bound == "upper" else None,
            resume_after_key=enc if bound == "resume" else None,
        )
        if bound in ("upper", "resume"):  # the key itself is outside these bounds
            got = self.tablet.scan(spec).to_table()
            assert got is None or got.num_rows == 0
            return
        self._check_scan(spec, at)

    @rule(key=KEYS)
    def lookup(self, key: int) -> None:
        got = self.tablet.lookup(encode_key(self.schema, key))
        want = self._state(key)
        assert (None if got is None else (got["i32"], got["d"], got["s"])) == want

    @rule()
    def flush_mrs(self) -> None:
        self.tablet.flush_mrs()
        st_ = self.tablet.status()
        event(f"rowsets={min(len(st_['rowsets']), 4)}")
        event(f"delta files={min(sum(r['delta_files'] for r in st_['rowsets']), 3)}")

    @rule()
    def flush_dms(self) -> None:
        self.tablet.flush_dms()

    @rule()
    def compact_all(self) -> None:
        self.clock.advance(500)
        self.tablet.compact_rowsets()

    @precondition(lambda self: self.tablet.rowsets())
    @rule(data=st.data())
    def major_or_minor_delta_compaction(self, data: st.DataObject) -> None:
        rs = data.draw(st.sampled_from(self.tablet.rowsets()))
        if data.draw(st.booleans()):
            self.tablet.compact_rowsets([rs.id])
        else:
            self.tablet.minor_delta_compaction(rs.id)

    @rule()
    def crash_and_reopen(self) -> None:
        # Drop the in-memory tablet without any shutdown: only files on disk and the WAL survive.
        self.tablet = Tablet.open(self.dir, log_ops=list(self.wal), options=self.opts, clock=self.clock)


TabletModel.TestCase.settings = settings(
    max_examples=int(__import__("os").environ.get("MODEL_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_tablet_model = TabletModel.TestCase
