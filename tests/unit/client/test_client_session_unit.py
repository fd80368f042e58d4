"""Sessions without a cluster: how operations become per-tablet Arrow batches (_ops_to_batch, _widen,
_segments, _adapt), routing over tablet locations with range gaps, and the session's buffering rules.

The routing tests use a fake client whose 'tablets' keep rows in dicts and answer Write as a tserver does
(per-row ALREADY_PRESENT / NOT_FOUND, an 'ignored' count), so what a session sends can be checked exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.client import batcher as B
from kudu_async.client import session as S
from kudu_async.client import sync
from kudu_async.client.meta_cache import ReplicaLocation, TableLocations, TabletLocation
from kudu_async.client.retry import WriteRequestIds
from kudu_async.client.table import Table
from kudu_async.common.errors import KuduInvalidArgument, KuduNotFound
from kudu_async.common.partition import PartitionSchema
from kudu_async.common.retry import Deadline
from kudu_async.common.row_conversion import OpType, decode_row_operations
from kudu_async.common.schema import ColumnSchema, Schema

INS, U, D, UP = int(OpType.INSERT), int(OpType.UPDATE), int(OpType.DELETE), int(OpType.UPSERT)
II, UI, DI, UPI = (
    int(OpType.INSERT_IGNORE),
    int(OpType.UPDATE_IGNORE),
    int(OpType.DELETE_IGNORE),
    int(OpType.UPSERT_IGNORE),
)


def _batch(table: Table, ops: list[Any]) -> B.RowBatch:
    return B.batch_of_ops([(op, op.validated(table.schema), table.schema, table.schema_version) for op in ops])


# --- _ops_to_batch -------------------------------------------------------------------------------------------


def test_ops_to_batch_full_schema_rows_and_the_cells_each_op_sets(kv_table: Table) -> None:
    b = _batch(
        kv_table,
        [
            kv_table.new_insert({"key": 1, "val": "a"}),
            kv_table.new_update({"key": 2, "val": "b"}),
            kv_table.new_delete({"key": 3}),
            kv_table.new_upsert({"key": 4, "n": 1}),
        ],
    )
    assert b.rows.schema == kv_table.schema.to_arrow()
    assert b.rows.to_pylist() == [
        {"key": 1, "val": "a", "n": 7},
        {"key": 2, "val": "b", "n": None},
        {"key": 3, "val": None, "n": None},
        {"key": 4, "val": None, "n": 1},
    ]
    assert b.op_types.tolist() == [INS, U, D, UP]
    assert b.set_cols is not None
    assert b.set_cols.tolist() == [
        [True, True, True],  # an insert sets every cell (defaults included)
        [True, True, False],  # an update sets the key and what it names
        [True, False, False],  # a delete only the key
        [True, False, True],
    ]  # an upsert leaves unnamed cells alone on update
    assert repr(b.failed(1)) == "Update(t, {'key': 2, 'val': 'b'})"


def test_ops_to_batch_of_inserts_only_needs_no_bitmap(kv_table: Table) -> None:
    b = _batch(kv_table, [kv_table.new_insert({"key": k}) for k in range(3)])
    assert b.set_cols is None
    assert b.rows.column("n").to_pylist() == [7, 7, 7]


# --- _widen (apply_arrow's subsets of columns) ---------------------------------------------------------------


def test_widen_update_subset_marks_only_given_cells(kv_table: Table) -> None:
    given = pa.record_batch({"val": pa.array(["a", None]), "key": pa.array([1, 2], pa.int64())})
    checked, bad = kv_table.schema.validate_batch_rows(given, for_op="update")
    assert bad == {}
    full, set_cols = B.widen(kv_table.schema, checked, set(given.schema.names))
    assert full.schema == kv_table.schema.to_arrow()
    assert full.to_pylist() == [{"key": 1, "val": "a", "n": None}, {"key": 2, "val": None, "n": None}]
    assert set_cols is not None and set_cols.tolist() == [[True, True, False]] * 2  # val=None is a set NULL


def test_widen_insert_subset_fills_defaults_but_does_not_mark_them(kv_table: Table) -> None:
    given = pa.record_batch({"key": pa.array([1], pa.int64())})
    checked, _ = kv_table.schema.validate_batch_rows(given, for_op="upsert")
    full, set_cols = B.widen(kv_table.schema, checked, {"key"})
    assert full.to_pylist() == [{"key": 1, "val": None, "n": 7}]
    assert set_cols is not None and set_cols.tolist() == [[True, False, False]]


def test_widen_all_columns_needs_no_bitmap(kv_table: Table) -> None:
    given = pa.record_batch({"key": pa.array([1], pa.int64()), "val": ["x"], "n": pa.array([3], pa.int32())})
    checked, _ = kv_table.schema.validate_batch_rows(given, for_op="insert")
    assert B.widen(kv_table.schema, checked, set(given.schema.names))[1] is None


def test_unset_nulls_leaves_null_non_key_cells_unset(kv_table: Table) -> None:
    """apply_arrow(ignore_null=True): a null cell of a given column is not set, so the stored value stays."""
    given = pa.record_batch(
        {"key": pa.array([1, 2], pa.int64()), "val": pa.array(["a", None]), "n": pa.array([None, 4], pa.int32())}
    )
    checked, _ = kv_table.schema.validate_batch_rows(given, for_op="upsert")
    full, set_cols = B.widen(kv_table.schema, checked, set(given.schema.names))
    assert set_cols is None
    out = B.unset_nulls(kv_table.schema, full, set_cols)
    assert out is not None and out.tolist() == [[True, True, False], [True, False, True]]
    no_nulls = pa.record_batch({"key": pa.array([1], pa.int64()), "val": ["x"], "n": pa.array([3], pa.int32())})
    checked, _ = kv_table.schema.validate_batch_rows(no_nulls, for_op="upsert")
    full, set_cols = B.widen(kv_table.schema, checked, set(no_nulls.schema.names))
    assert B.unset_nulls(kv_table.schema, full, set_cols) is None  # nothing to leave out: no bitmap


# --- _segments -------------------------------------------------------------------------------------------------


def _typed_batch(table: Table, types: list[int]) -> B.RowBatch:
    rows = pa.RecordBatch.from_pylist(
        [{"key": i, "val": "x", "n": 1} for i in range(len(types))], schema=table.schema.to_arrow()
    )
    return B.RowBatch(table, rows, np.array(types, dtype=np.int8), None, None, table.schema, table.schema_version)


def test_segments_keep_order_and_hold_one_ignore_kind_at_most(kv_table: Table) -> None:
    b = _typed_batch(kv_table, [II, II, INS, UI, U, DI, II, UPI])
    segs = B.segments(b, np.arange(8))
    assert [s.tolist() for s in segs] == [[0, 1, 2], [3, 4], [5], [6, 7]]
    for s in segs:
        assert len({t for t in b.op_types[s].tolist() if t in B.IGNORE_KINDS}) <= 1
    assert np.concatenate(segs).tolist() == list(range(8))


def test_segments_without_ignore_kinds_are_one_rpc(kv_table: Table) -> None:
    b = _typed_batch(kv_table, [INS, U, D, UP, UPI])
    assert [s.tolist() for s in B.segments(b, np.array([0, 2, 4]))] == [[0, 2, 4]]
    assert B.segments(b, np.array([], dtype=np.int64)) == []
    failed = b.failed(1)  # an Arrow row: the dict of its cells, with its operation's name
    assert failed == {"key": 1, "val": "x", "n": 1} and failed.op_name == "update" and failed.cells == failed


def test_segments_are_cut_at_the_rpc_row_cap(kv_table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "MAX_ROWS_PER_RPC", 3)
    b = _typed_batch(kv_table, [INS] * 8)
    assert [s.tolist() for s in B.segments(b, np.arange(8))] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_segments_are_cut_by_bytes_too(kv_table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _typed_batch(kv_table, [INS] * 10)
    per_row = b.rows.nbytes // 10
    monkeypatch.setattr(B, "MAX_BYTES_PER_RPC", per_row * 4)
    assert [len(s) for s in B.segments(b, np.arange(10))] == [4, 4, 2]


# --- _adapt: a write built on an old schema -----------------------------------------------------------------


def test_adapt_follows_a_renamed_column_by_id_and_fills_added_defaults(kv_table: Table) -> None:
    old = kv_table.schema
    new = (
        old.rename_column("val", "val2")
        .add_column(ColumnSchema("x", kudu.int16, default=4))
        .with_column_ids(old.next_column_id)
    )
    b = _batch(kv_table, [kv_table.new_insert({"key": 1, "val": "a"}), kv_table.new_update({"key": 2, "n": 3})])
    B.adapt_to_schema(b, old, new)
    assert b.rows.schema == new.to_arrow()
    assert b.rows.to_pylist() == [{"key": 1, "val2": "a", "n": 7, "x": 4}, {"key": 2, "val2": None, "n": 3, "x": None}]
    assert b.set_cols is not None
    assert b.set_cols.tolist() == [[True, True, True, False], [True, False, True, False]]


def test_adapt_refuses_a_write_that_sets_a_dropped_column(kv_table: Table) -> None:
    b = _batch(kv_table, [kv_table.new_update({"key": 1, "val": "a"})])
    with pytest.raises(KuduInvalidArgument, match="column 'val' is no longer in table t"):
        B.adapt_to_schema(b, kv_table.schema, kv_table.schema.drop_column("val"))


def test_adapt_drops_a_column_the_write_does_not_set(kv_table: Table) -> None:
    b = _batch(kv_table, [kv_table.new_update({"key": 1, "n": 3})])
    B.adapt_to_schema(b, kv_table.schema, kv_table.schema.drop_column("val"))
    assert b.rows.to_pylist() == [{"key": 1, "n": 3}]


# --- TableLocations.assign -----------------------------------------------------------------------------------


def _locations(schema: Schema, ps: PartitionSchema, bounds: list[Any]) -> TableLocations:
    parts = ps.create_partitions(bounds)
    tablets = [
        TabletLocation(f"t{i}", p, [ReplicaLocation(f"u{i}", f"h:{i + 1}", "LEADER")]) for i, p in enumerate(parts)
    ]
    return TableLocations("tid", list(reversed(tablets)))  # sorted by start key whatever the input order


@pytest.fixture
def range_schema() -> Schema:
    return Schema([ColumnSchema("key", kudu.int64, nullable=False), ColumnSchema("v", kudu.string)], 1)


def test_assign_finds_each_rows_tablet_and_minus_one_in_range_gaps(range_schema: Schema) -> None:
    ps = PartitionSchema(range_schema, [], ["key"])
    locs = _locations(range_schema, ps, [([0], [10]), ([20], [30]), ([40], None)])
    assert [t.tablet_id for t in locs.tablets] == ["t0", "t1", "t2"]
    keys = [-5, 0, 9, 10, 15, 19, 20, 29, 30, 39, 40, 10**12]
    batch = pa.record_batch({"key": pa.array(keys, pa.int64()), "v": pa.nulls(len(keys), pa.string())})
    pkeys = ps.partition_keys(batch).to_pylist()
    assert locs.assign(pkeys).tolist() == [-1, 0, 0, -1, -1, -1, 1, 1, -1, -1, 2, 2]
    assert [locs.find(k) is not None for k in pkeys] == [k >= 0 for k in locs.assign(pkeys).tolist()]
    assert locs.assign([]).tolist() == []


def test_assign_with_hash_buckets_and_a_gap(range_schema: Schema) -> None:
    from kudu_async.common.partition import HashDimension

    ps = PartitionSchema(range_schema, [HashDimension(["key"], 2)], ["key"])
    locs = _locations(range_schema, ps, [([0], [100]), ([200], [300])])
    keys = list(range(-10, 310, 7))
    batch = pa.record_batch({"key": pa.array(keys, pa.int64()), "v": pa.nulls(len(keys), pa.string())})
    where = locs.assign(ps.partition_keys(batch).to_pylist()).tolist()
    for k, w in zip(keys, where, strict=True):
        if 0 <= k < 100 or 200 <= k < 300:
            p = locs.tablets[w].partition
            assert p.hash_buckets == ps.hash_buckets_of({"key": k})
            assert p.range_key_start <= ps.encode_range_key([k]) < p.range_key_end
        else:
            assert w == -1, k


@pytest.mark.parametrize("compare_max", [0, 1000], ids=["distinct-keys-search", "compare-with-every-start"])
def test_both_assign_strategies_agree_with_find_for_every_key(
    range_schema: Schema, compare_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kudu_async.client import meta_cache
    from kudu_async.common.partition import HashDimension

    monkeypatch.setattr(meta_cache, "COMPARE_MAX_TABLETS", compare_max)
    monkeypatch.setattr(meta_cache, "FEW_DISTINCT_KEYS", 0)
    ps = PartitionSchema(range_schema, [HashDimension(["key"], 3)], ["key"])
    locs = _locations(range_schema, ps, [(None, [-100]), ([0], [50]), ([50], [1000]), ([5000], None)])
    assert len(locs.tablets) == 12
    keys = [-(2**63), -101, -100, -1, 0, 1, 49, 50, 51, 999, 1000, 4999, 5000, 2**63 - 1, *range(-300, 6000, 37)]
    batch = pa.record_batch({"key": pa.array(keys, pa.int64()), "v": pa.nulls(len(keys), pa.string())})
    pkeys = ps.partition_keys(batch)
    expected = []
    for k in pkeys.to_pylist():
        t = locs.find(k)
        expected.append(-1 if t is None else locs.tablets.index(t))
    assert locs.assign(pkeys).tolist() == expected
    assert -1 in expected and len(set(expected) - {-1}) >= 10  # gaps and (nearly) every tablet are hit


def test_tablet_location_wire_round_trip_and_leader_guesses() -> None:
    from kudu_async.common.partition import Partition

    p = Partition((1,), b"a", b"b", b"\x00\x00\x00\x01a", b"\x00\x00\x00\x01b")
    t = TabletLocation.from_wire(
        {
            "tablet_id": "x",
            "partition": p.to_dict(),
            "replicas": [
                {"uuid": "1", "rpc_address": "h:1", "role": "FOLLOWER"},
                {"uuid": "2", "rpc_address": "h:2", "role": "LEADER"},
                {"uuid": "3", "rpc_address": "h:3", "role": "LEARNER"},
                {"uuid": "4", "rpc_address": "", "role": "FOLLOWER"},
            ],
        }
    )
    assert t.id() == "x" and t.partition == p
    assert t.leader_address == "h:2"
    assert t.addresses() == ["h:1", "h:2"]  # learners and address-less replicas take no leader traffic
    assert t.next_leader_guess() == "h:2"
    t.failed.add("h:2")
    assert t.next_leader_guess() == "h:1"
    t.failed.add("h:1")
    assert t.next_leader_guess() is None
    assert TabletLocation.from_wire(t.to_wire()).to_wire() == t.to_wire()


# --- routing and replies, with a fake client -------------------------------------------------------------------


class FakeTablets:
    """A client stand-in: locations from a PartitionSchema, and tablets that apply Writes to dicts."""

    def __init__(self, table: Table, bounds: Sequence[Any] = ()) -> None:
        self.table = table
        parts = table.partition_schema.create_partitions(bounds)
        self.locs = TableLocations(
            table.id,
            [TabletLocation(f"tablet{i}", p, [ReplicaLocation("u", "h:1", "LEADER")]) for i, p in enumerate(parts)],
        )
        self.rows: dict[str, dict[int, dict[str, Any]]] = {t.tablet_id: {} for t in self.locs.tablets}
        self.requests: list[tuple[str, list[int]]] = []
        self.meta = self
        self.ts = 0
        self.refreshes = 0
        self.fail_next: dict[str, BaseException] = {}
        self.version, self.names = table.schema_version, table.schema.names  # what the 'tablets' have
        self.write_ids = WriteRequestIds("fake-client")
        self.request_ids: list[dict[str, Any]] = []  # of every Write call, attempts included

    async def locations(self, table_id: str, deadline: Deadline, *, refresh: bool = False) -> TableLocations:
        self.refreshes += refresh
        return self.locs

    def latest_observed_timestamp(self) -> int:
        return self.ts

    def observe_timestamp(self, ts: int) -> None:
        self.ts = max(self.ts, ts)

    async def reload_table(self, table: Table, deadline: Deadline) -> None:
        raise AssertionError(f"table {table.name} reloaded: the tests that alter a table set their own reload")

    async def call_tablet_leader(
        self, table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        assert method == "Write"
        self.request_ids.append(dict(req["request_id"]))
        if tablet_id in self.fail_next:
            raise self.fail_next.pop(tablet_id)
        await asyncio.sleep(0)  # let concurrent segments interleave, as real RPCs do
        if req["schema_version"] != self.version:
            raise KuduInvalidArgument("mismatch", {"error": "MISMATCHED_SCHEMA", "schema_version": self.version})
        rows, types, matrix = decode_row_operations(req["rows"], req["op_types"], req["set_columns"])
        if rows.schema.names != self.names:  # as the tablet checks
            raise KuduInvalidArgument(f"write columns {rows.schema.names} do not match the schema columns {self.names}")
        store = self.rows[tablet_id]
        keys = rows.column("key").to_pylist()
        self.requests.append((tablet_id, keys))
        errors, ignored = [], 0
        for i, (k, t, row) in enumerate(zip(keys, types.tolist(), rows.to_pylist(), strict=True)):
            present = k in store
            if (t in (INS, II) and present) or (t in (U, UI, D, DI) and not present):
                if t in (II, UI, DI):
                    ignored += 1
                else:
                    errors.append(
                        {
                            "row_index": i,
                            "code": "ALREADY_PRESENT" if t == INS else "NOT_FOUND",
                            "message": "key already present" if t == INS else "key not found",
                        }
                    )
            elif t in (D, DI):
                del store[k]
            elif present:  # update, or upsert of a present row: only the cells the op sets
                store[k].update({c: v for j, (c, v) in enumerate(row.items()) if matrix is None or matrix[i, j]})
            else:
                store[k] = row
        self.ts += 10
        return {"timestamp": self.ts, "row_errors": errors, "ignored": ignored}


async def test_flush_routes_rows_per_tablet_and_reports_each_failed_row(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess = S.AsyncSession(fake)
    for k in range(20):
        await sess.apply(kv_table.new_insert({"key": k, "val": f"v{k}"}))
    assert sess.count_buffered_operations() == 20
    await sess.flush()
    assert sess.count_buffered_operations() == 0
    assert sorted(k for store in fake.rows.values() for k in store) == list(range(20))
    assert len(fake.requests) == 3  # one Write per tablet
    for tablet_id, keys in fake.requests:
        assert keys == sorted(keys) and all(k in fake.rows[tablet_id] for k in keys)  # order kept
    assert fake.ts == 30 and sess.client.latest_observed_timestamp() == 30
    await sess.apply(kv_table.new_insert({"key": 3}))
    await sess.apply(kv_table.new_update({"key": 99, "val": "x"}))
    await sess.apply(kv_table.new_insert_ignore({"key": 4}))
    await sess.apply(kv_table.new_delete_ignore({"key": 98}))
    await sess.apply(kv_table.new_upsert({"key": 5, "val": "new"}))
    with pytest.raises(kudu.KuduBadStatus, match=r"flush: 2 row\(s\) failed"):
        await sess.flush()
    errors, overflowed = sess.get_pending_errors()
    assert not overflowed
    assert sorted((e.status.code, repr(e.failed_op())) for e in errors) == [
        ("ALREADY_PRESENT", "Insert(t, {'key': 3})"),
        ("NOT_FOUND", "Update(t, {'key': 99, 'val': 'x'})"),
    ]
    assert not any(e.was_possibly_successful() for e in errors)
    assert sess.get_pending_errors() == ([], False)  # taken once
    assert sess.get_write_op_metrics() == {
        "successful_inserts": 20,
        "successful_upserts": 1,
        "successful_updates": 0,
        "successful_deletes": 0,
        "insert_ignore_errors": 1,
        "upsert_ignore_errors": 0,
        "update_ignore_errors": 0,
        "delete_ignore_errors": 1,
    }
    assert fake.rows[next(t for t in fake.rows if 5 in fake.rows[t])][5] == {"key": 5, "val": "new", "n": 7}


async def test_rows_in_a_range_gap_fail_alone_with_not_found(
    make_table: Callable[..., Table], kv_schema: Schema
) -> None:
    part = (
        kudu.Partitioning().set_range_partition_columns(["key"]).add_range_partition(0, 10).add_range_partition(20, 30)
    )
    table = make_table(kv_schema, part)
    fake = FakeTablets(table, [([0], [10]), ([20], [30])])
    sess = S.AsyncSession(fake)
    for k in (1, 15, 25, 35):
        await sess.apply(table.new_upsert({"key": k}))
    with pytest.raises(kudu.KuduBadStatus, match=r"2 row\(s\) failed"):
        await sess.flush()
    errors, _ = sess.get_pending_errors()
    assert sorted(e.failed_op()["key"] for e in errors) == [15, 35]
    assert all(isinstance(e.status, KuduNotFound) and "no range partition" in str(e.status) for e in errors)
    assert sorted(k for store in fake.rows.values() for k in store) == [1, 25]
    assert sess.get_write_op_metrics()["successful_upserts"] == 2


async def test_a_moved_tablet_is_rerouted_after_a_location_refresh(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    fake.fail_next["tablet1"] = KuduNotFound("tablet not here", {"error": "TABLET_NOT_FOUND"})
    sess = S.AsyncSession(fake)
    for k in range(30):
        await sess.apply(kv_table.new_upsert({"key": k}))
    await sess.flush()
    assert fake.refreshes == 1
    assert sorted(k for store in fake.rows.values() for k in store) == list(range(30))
    assert sess.get_write_op_metrics()["successful_upserts"] == 30


async def test_a_failed_tablet_write_fails_only_its_rows(kv_table: Table) -> None:
    """One tablet's Write times out: its rows fail (maybe applied), the other tablets' rows are written and
    counted, never reported failed."""
    fake = FakeTablets(kv_table)
    fake.fail_next["tablet0"] = kudu.KuduTimedOut("write timed out")
    sess = S.AsyncSession(fake)
    for k in range(30):
        await sess.apply(kv_table.new_upsert({"key": k}))
    with pytest.raises(kudu.KuduBadStatus, match=r"flush: (\d+) row\(s\) failed"):
        await sess.flush()
    errors, _ = sess.get_pending_errors()
    written = sorted(k for store in fake.rows.values() for k in store)
    failed = sorted(e.failed_op().cells["key"] for e in errors)
    assert errors and written and sorted(written + failed) == list(range(30))
    assert all(e.was_possibly_successful() and isinstance(e.status, kudu.KuduTimedOut) for e in errors)
    assert sess.get_write_op_metrics()["successful_upserts"] == len(written)


async def test_rows_after_a_failed_rpc_to_the_same_tablet_are_not_sent(
    kv_table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(B, "MAX_ROWS_PER_RPC", 4)
    fake = FakeTablets(kv_table)
    fake.fail_next["tablet0"] = kudu.KuduTimedOut("write timed out")
    sess = S.AsyncSession(fake)
    for k in range(40):
        await sess.apply(kv_table.new_upsert({"key": k}))
    with pytest.raises(kudu.KuduBadStatus):
        await sess.flush()
    errors, _ = sess.get_pending_errors()
    maybe = [e for e in errors if e.was_possibly_successful()]
    unsent = [e for e in errors if not e.was_possibly_successful()]
    assert len(maybe) == 4 and unsent  # the failed RPC's rows, then the tablet's later rows, kept in order
    written = {k for store in fake.rows.values() for k in store}
    assert not written & {e.failed_op().cells["key"] for e in errors}
    assert len(written) + len(errors) == 40


async def test_apply_arrow_reports_bad_rows_alone_and_sends_the_rest(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess = S.AsyncSession(fake)
    batch = pa.table({"key": pa.array([1, 2, 3], pa.int64()), "n": pa.array([1, None, 3], pa.int32())})
    with pytest.raises(kudu.KuduBadStatus, match=r"apply_arrow: 1 row\(s\) failed"):
        await sess.apply_arrow(kv_table, batch, op="insert")
    errors, _ = sess.get_pending_errors()
    assert [(e.failed_op(), str(e.status)) for e in errors] == [
        ({"key": 2, "val": None, "n": None}, "INVALID_ARGUMENT: column 'n': NULL in NOT NULL column")
    ]
    failed = errors[0].failed_op()  # the row, read like the WriteOperation a row-by-row write reports
    assert (failed.op_name, failed.cells, failed["key"]) == ("insert", {"key": 2, "val": None, "n": None}, 2)
    assert sorted(k for store in fake.rows.values() for k in store) == [1, 3]
    assert await sess.apply_arrow(kv_table, pa.table({"key": pa.array([], pa.int64())}), op="upsert") == 0
    with pytest.raises(kudu.KuduInvalidArgument, match="unknown write operation"):
        await sess.apply_arrow(kv_table, batch, op="merge")
    with pytest.raises(kudu.KuduInvalidArgument, match="'zz' is not in the schema"):
        await sess.apply_arrow(kv_table, pa.table({"key": [1], "zz": [1]}))


# --- buffering rules, configuration ---------------------------------------------------------------------------


async def test_manual_flush_refuses_ops_once_the_buffer_space_is_full(kv_table: Table) -> None:
    sess = S.AsyncSession(None, mutation_buffer_sz=100)  # type: ignore[arg-type]  # no client: nothing is sent
    await sess.apply(kv_table.new_insert({"key": 1, "val": "x" * 50}))
    with pytest.raises(kudu.KuduBadStatus, match="mutation buffer is full"):
        await sess.apply(kv_table.new_insert({"key": 2, "val": "y" * 50}))
    assert sess.count_buffered_operations() == 1
    sess.set_mutation_buffer_space(1000)
    await sess.apply(kv_table.new_insert({"key": 2, "val": "y" * 50}))
    assert sess.count_buffered_operations() == 2


async def test_mutation_buffer_max_num_counts_buffers_not_operations(kv_table: Table) -> None:
    """kudu-python code passes mutation_buffer_max_num=2 (Kudu's default: two buffers); it must not cap the
    buffer at two operations. In background mode apply() waits when every buffer is in use."""
    fake = FakeTablets(kv_table)
    gate = asyncio.Event()
    real_call = fake.call_tablet_leader

    async def slow_call(
        table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        await gate.wait()
        return await real_call(table, tablet_id, method, req, deadline)

    fake.call_tablet_leader = slow_call  # type: ignore[method-assign]  # this test's tablets answer late
    manual = S.AsyncSession(fake, mutation_buffer_max_num=2)
    for k in range(10):
        await manual.apply(kv_table.new_insert({"key": k}))
    assert manual.count_buffered_operations() == 10
    bg = S.AsyncSession(
        fake,
        flush_mode=kudu.FLUSH_AUTO_BACKGROUND,
        mutation_buffer_max_num=2,
        mutation_buffer_sz=100,
        mutation_buffer_watermark=1.0,
        mutation_buffer_flush_interval=60_000,
    )
    assert (bg.flush_watermark, bg.flush_interval_ms) == (1.0, 60_000)  # kudu-python's keyword names
    for k in (100, 101):
        await asyncio.wait_for(bg.apply(kv_table.new_insert({"key": k, "val": "x" * 30})), 5)
    assert len(bg._inflight) == 1 and bg.count_buffered_operations() == 1  # the second filled the first buffer
    blocked = asyncio.ensure_future(bg.apply(kv_table.new_insert({"key": 102, "val": "x" * 30})))
    await asyncio.sleep(0.05)
    assert not blocked.done()  # two flushes in flight: no buffer for a third operation until one ends
    assert len(bg._inflight) == 2
    gate.set()
    await asyncio.wait_for(blocked, 5)
    await bg.flush()
    assert {100, 101, 102} <= {k for store in fake.rows.values() for k in store}
    for bad in (-1, 1.5, True):
        with pytest.raises(kudu.KuduInvalidArgument, match="mutation_buffer_max_num"):
            bg.set_mutation_buffer_max_num(bad)  # type: ignore[arg-type]  # a bad value on purpose
    bg.set_mutation_buffer_max_num(0)  # no limit
    await bg.close()
    await manual.close()


async def test_apply_refuses_bad_rows_and_non_operations(kv_table: Table) -> None:
    sess = S.AsyncSession(None)  # type: ignore[arg-type]  # no client: nothing is sent
    with pytest.raises(kudu.KuduInvalidArgument, match="key column missing"):
        await sess.apply(kv_table.new_insert({"val": "x"}))
    with pytest.raises(kudu.KuduInvalidArgument, match="takes an operation"):
        await sess.apply({"key": 1})  # type: ignore[arg-type]  # not an operation, on purpose
    assert sess.count_buffered_operations() == 0


async def test_a_closed_session_takes_no_more_operations(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess = S.AsyncSession(fake)
    await sess.apply(kv_table.new_insert({"key": 1}))
    await sess.close()
    assert 1 in {k for store in fake.rows.values() for k in store}  # close flushed it
    with pytest.raises(kudu.KuduBadStatus, match="session is closed"):
        await sess.apply(kv_table.new_insert({"key": 2}))
    await sess.close()  # twice is fine


def test_session_configuration_names_and_checks() -> None:
    sess = S.AsyncSession(None)  # type: ignore[arg-type]  # no client: nothing is sent
    assert sess.flush_mode == kudu.FLUSH_MANUAL  # kudu-python's default
    for name, mode in (
        ("sync", kudu.FLUSH_AUTO_SYNC),
        ("AUTO_FLUSH_BACKGROUND", kudu.FLUSH_AUTO_BACKGROUND),
        ("manual_flush", kudu.FLUSH_MANUAL),
        (kudu.FLUSH_AUTO_BACKGROUND, kudu.FLUSH_AUTO_BACKGROUND),
    ):
        sess.set_flush_mode(name)
        assert sess.flush_mode == mode
    with pytest.raises(kudu.KuduInvalidArgument, match="flush mode must be"):
        sess.set_flush_mode("sometimes")
    for bad in (0, -5, 1.5, True):
        with pytest.raises(kudu.KuduInvalidArgument, match="timeout_ms"):
            sess.set_timeout_ms(bad)  # type: ignore[arg-type]  # a bad value on purpose
    sess.set_timeout_ms(1234)
    assert sess.timeout_ms == 1234
    for bad_w in (0.0, 1.5, -0.1):
        with pytest.raises(kudu.KuduInvalidArgument, match="watermark"):
            sess.set_mutation_buffer_flush_watermark(bad_w)
    sess.set_mutation_buffer_flush_watermark(0.25)
    sess.set_mutation_buffer_flush_interval(50)
    sess.set_mutation_buffer_max_num(9)
    assert (sess.flush_watermark, sess.flush_interval_ms, sess.buffer_max_num) == (0.25, 50, 9)
    with pytest.raises(kudu.KuduInvalidArgument):
        S.AsyncSession(None, flush_mode="nope")  # type: ignore[arg-type]  # no client: refused before use


def _altered(table: Table) -> dict[str, Any]:
    """The table's info after 'val' was renamed 'value' and 'x' int16 DEFAULT 4 was added (version + 1)."""
    old = table.schema
    new = (
        old.rename_column("val", "value")
        .add_column(ColumnSchema("x", kudu.int16, default=4))
        .with_column_ids(old.next_column_id)
    )
    return {**table.info, "schema": new.to_dict(), "schema_version": table.schema_version + 1}


async def test_segments_meeting_an_alter_together_rebuild_the_batch_once(kv_table: Table) -> None:
    """Every tablet answers MISMATCHED_SCHEMA at once; the batch is rebuilt for the new schema exactly once and
    no segment sends old-layout rows with the new version."""
    fake = FakeTablets(kv_table)
    info = _altered(kv_table)
    fake.version, fake.names = info["schema_version"], ["key", "value", "n", "x"]
    reloads: list[int] = []

    async def reload_table(table: Table, deadline: Deadline) -> None:
        reloads.append(1)
        await asyncio.sleep(0.01)
        table._load(info)

    fake.reload_table = reload_table  # type: ignore[method-assign]  # this test's reload
    sess = S.AsyncSession(fake)
    for k in range(30):
        await sess.apply(kv_table.new_insert({"key": k, "val": f"v{k}"}))
    await sess.flush()
    stored = {k: row for store in fake.rows.values() for k, row in store.items()}
    assert stored == {k: {"key": k, "value": f"v{k}", "n": 7, "x": 4} for k in range(30)}
    assert 1 <= len(reloads) <= 3


async def test_operations_applied_across_an_alter_go_in_order(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess = S.AsyncSession(fake)
    await sess.apply(kv_table.new_insert({"key": 1, "val": "a"}))  # validated against version 0
    info = _altered(kv_table)
    kv_table._load(info)  # another session reloaded the shared Table
    fake.version, fake.names = info["schema_version"], ["key", "value", "n", "x"]

    async def reload_table(table: Table, deadline: Deadline) -> None:
        table._load(info)

    fake.reload_table = reload_table  # type: ignore[method-assign]  # this test's reload
    await sess.apply(kv_table.new_update({"key": 1, "value": "b"}))  # validated against version 1
    await sess.flush()
    stored = {k: row for store in fake.rows.values() for k, row in store.items()}
    assert stored == {1: {"key": 1, "value": "b", "n": 7, "x": 4}}
    assert sess.get_write_op_metrics()["successful_updates"] == 1


async def test_a_tablet_behind_the_tables_schema_is_waited_for(kv_table: Table) -> None:
    """The table is at version 1 but a tablet has not applied the alter yet: the write backs off and retries
    the same rows until the tablet catches up, inside the session's deadline."""
    info = _altered(kv_table)
    kv_table._load(info)
    fake = FakeTablets(kv_table)
    fake.version, fake.names = 0, ["key", "val", "n"]  # behind
    calls = {"n": 0}
    real_call = fake.call_tablet_leader

    async def call(
        table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 3:  # the tablet applies the alter
            fake.version, fake.names = 1, ["key", "value", "n", "x"]
        return await real_call(table, tablet_id, method, req, deadline)

    fake.call_tablet_leader = call  # type: ignore[method-assign]  # this test's tablets alter mid-way
    sess = S.AsyncSession(fake)
    await sess.apply(kv_table.new_insert({"key": 1, "value": "v"}))
    await sess.flush()
    stored = {k: row for store in fake.rows.values() for k, row in store.items()}
    assert stored == {1: {"key": 1, "value": "v", "n": 7, "x": 4}}
    assert calls["n"] == 3


async def test_each_write_rpc_carries_its_own_request_id(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess = S.AsyncSession(fake)
    for k in range(20):
        await sess.apply(kv_table.new_insert({"key": k, "val": f"v{k}"}))
    await sess.flush()
    ids = fake.request_ids
    assert len(ids) == 3 and {r["client_id"] for r in ids} == {"fake-client"}
    assert sorted(r["seq_no"] for r in ids) == [1, 2, 3]
    assert all(r["first_incomplete_seq_no"] == 1 for r in ids)  # the three were in flight together
    assert fake.write_ids.in_flight() == 0 and fake.write_ids.first_incomplete() == 4
    await sess.apply(kv_table.new_insert({"key": 100}))
    await sess.flush()
    assert fake.request_ids[-1]["seq_no"] == 4 and fake.request_ids[-1]["first_incomplete_seq_no"] == 4


async def test_a_write_rebuilt_after_an_alter_keeps_its_request_id(kv_table: Table) -> None:
    """MISMATCHED_SCHEMA means the tablet found the request new and kept no trace of it: the rebuilt rows go
    under the same id, so an earlier attempt applied elsewhere could never be applied a second time."""
    fake = FakeTablets(kv_table)
    info = _altered(kv_table)
    fake.version, fake.names = info["schema_version"], ["key", "value", "n", "x"]

    async def reload_table(table: Table, deadline: Deadline) -> None:
        table._load(info)

    fake.reload_table = reload_table  # type: ignore[method-assign]  # this test's reload
    sess = S.AsyncSession(fake)
    await sess.apply(kv_table.new_insert({"key": 1, "val": "v"}))
    await sess.flush()
    assert len(fake.request_ids) == 2 and fake.request_ids[0] == fake.request_ids[1]
    assert fake.write_ids.in_flight() == 0


def test_first_incomplete_seq_no_is_the_oldest_write_still_in_flight() -> None:
    ids = WriteRequestIds("c")
    a, b, c = ids.begin(), ids.begin(), ids.begin()
    assert [r["first_incomplete_seq_no"] for r in (a, b, c)] == [1, 1, 1]
    ids.end(b)
    assert ids.first_incomplete() == 1
    ids.end(a)
    assert ids.first_incomplete() == 3 and ids.begin()["first_incomplete_seq_no"] == 3
    ids.end(a)  # ending twice is harmless


async def test_failed_row_count_is_exact_past_the_error_cap(kv_table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "MAX_PENDING_ERRORS", 3)
    fake = FakeTablets(kv_table)
    for t in list(fake.rows):
        fake.fail_next[t] = kudu.KuduTimedOut("write timed out")
    sess = S.AsyncSession(fake)
    for k in range(30):
        await sess.apply(kv_table.new_upsert({"key": k}))
    with pytest.raises(kudu.KuduBadStatus, match=r"flush: 30 row\(s\) failed \(only the first 3 errors are kept\)"):
        await sess.flush()
    errors, overflowed = sess.get_pending_errors()
    assert len(errors) == 3 and overflowed


# --- the blocking Session: rows checked in the caller's thread, handed to the loop in batches ----------------


class _LoopClient:
    """What the blocking Session needs of kudu_async.Client: a loop thread to run coroutines on."""

    def __init__(self) -> None:
        from kudu_async.client.sync import _LoopThread

        self._loop = _LoopThread("test-session-loop")
        self._run = self._loop.run


def _blocking_session(fake: FakeTablets, **kw: Any) -> tuple[Any, _LoopClient]:
    from kudu_async.client.sync import Session

    lc = _LoopClient()

    async def make() -> S.AsyncSession:
        return S.AsyncSession(fake, **kw)

    return Session(lc, lc._run(make())), lc  # type: ignore[arg-type]  # the loop thread is all Session uses


def test_blocking_apply_stages_rows_and_keeps_their_order(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess, lc = _blocking_session(fake, flush_mode=kudu.FLUSH_AUTO_BACKGROUND, mutation_buffer_flush_interval=60_000)
    try:
        hops = 0
        real_run = lc._run

        def counting_run(coro: Any) -> Any:
            nonlocal hops
            hops += 1
            return real_run(coro)

        sess._client._run = counting_run
        n = 2 * sync.STAGE_ROWS + 500
        for k in range(n):  # every row inserted, then updated: order within a key must hold
            sess.apply(kv_table.new_insert({"key": k, "val": "first"}))
            sess.apply(kv_table.new_update({"key": k, "val": f"second{k}"}))
        assert hops == 2 * n // sync.STAGE_ROWS  # one hand-off per STAGE_ROWS rows, not one per row
        assert 0 < sess.count_buffered_operations() <= 2 * n  # staged rows count as buffered
        with pytest.raises(kudu.KuduInvalidArgument, match="key column missing"):
            sess.apply(kv_table.new_insert({"val": "x"}))  # a bad row is refused at once, in the caller
        sess.flush()
        assert sess.count_buffered_operations() == 0
        got = {k: row["val"] for store in fake.rows.values() for k, row in store.items()}
        assert got == {k: f"second{k}" for k in range(n)}
        assert sess.get_pending_errors() == ([], False)
        sess.close()
    finally:
        lc._loop.stop()


def test_blocking_background_session_flushes_staged_rows_on_its_interval(kv_table: Table) -> None:
    import time

    fake = FakeTablets(kv_table)
    sess, lc = _blocking_session(fake, flush_mode=kudu.FLUSH_AUTO_BACKGROUND, mutation_buffer_flush_interval=50)
    try:
        for k in range(5):  # far fewer than a hand-off batch: only the interval flush can send them
            sess.apply(kv_table.new_upsert({"key": k, "val": "v"}))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(len(s) for s in fake.rows.values()) < 5:
            time.sleep(0.02)
        assert sorted(k for store in fake.rows.values() for k in store) == [0, 1, 2, 3, 4]
        assert sess.count_buffered_operations() == 0
        sess.close()
    finally:
        lc._loop.stop()


def test_blocking_manual_session_counts_staged_rows_against_the_buffer(kv_table: Table) -> None:
    fake = FakeTablets(kv_table)
    sess, lc = _blocking_session(fake, mutation_buffer_sz=1000)
    try:
        applied = 0
        with pytest.raises(kudu.KuduBadStatus, match="mutation buffer is full"):
            for k in range(1000):
                sess.apply(kv_table.new_insert({"key": k, "val": "x" * 50}))
                applied += 1
        assert 0 < applied < 20 and sess.count_buffered_operations() == applied
        sess.flush()  # what was accepted is written; the refused row is not
        assert sorted(k for store in fake.rows.values() for k in store) == list(range(applied))
        sess.apply(kv_table.new_insert({"key": 5000}))  # room again after the flush
        sess.close()
        assert 5000 in {k for store in fake.rows.values() for k in store}
    finally:
        lc._loop.stop()


async def test_closing_the_client_stops_its_sessions_flushers_and_names_dropped_operations(
    kv_table: Table, caplog: pytest.LogCaptureFixture
) -> None:
    """A background session left open stops with its client (no flusher task left pending on a closed
    loop); as Kudu's client does, operations still buffered are dropped with a warning, not sent."""
    from kudu_async.client.aio import AsyncClient
    from kudu_async.client.core import ClientCore

    client = AsyncClient(ClientCore(["127.0.0.1:1"]))  # never contacted: nothing is flushed
    flushed = client.new_session(kudu.FLUSH_AUTO_BACKGROUND, flush_interval_ms=60_000)
    left = client.new_session(kudu.FLUSH_AUTO_BACKGROUND, flush_interval_ms=60_000)
    for k in range(3):
        await left.apply(kv_table.new_insert({"key": k}))
    timer = left._timer
    assert timer is not None and not timer.done()
    with caplog.at_level("WARNING", logger="kudu_async.client.session"):
        await client.close()
    assert timer.done() and timer.cancelled()
    assert [r.getMessage() for r in caplog.records] == [
        "client closed with 3 operation(s) buffered in a session that was never flushed or closed: they are dropped"
    ]
    assert flushed._timer is None
    with pytest.raises(kudu.KuduBadStatus, match="closed"):
        await left.apply(kv_table.new_insert({"key": 9}))


def test_one_row_is_routed_from_its_dict_to_the_tablet_the_vectorised_path_picks(
    make_table: Callable[..., Table],
) -> None:
    """The row API's one-row batch takes the per-row partition key, not the Arrow path: both must agree
    for hash and range columns of several types, in range gaps too."""
    schema = Schema(
        [
            ColumnSchema("id", kudu.int32, nullable=False),
            ColumnSchema("name", kudu.string, nullable=False),
            ColumnSchema("ts", kudu.unixtime_micros, nullable=False),
            ColumnSchema("v", kudu.double),
        ],
        3,
    )
    part = (
        kudu.Partitioning()
        .add_hash_partitions(["id", "name"], 4)
        .add_hash_partitions(["ts"], 3, seed=7)
        .set_range_partition_columns(["name"])
        .add_range_partition(["a"], ["m"])
        .add_range_partition(["p"], None)
    )
    table = make_table(schema, part)
    ps = table.partition_schema
    locs = _locations(table.schema, ps, [(["a"], ["m"]), (["p"], None)])
    assert len(locs.tablets) == 24
    seen = set()
    for i in range(300):
        op = table.new_insert({"id": i * 7919 - 1000, "name": "abcnopqz"[i % 8] + str(i), "ts": i * 10**9, "v": 1.5})
        b = B.batch_of_ops([S.AsyncSession(None).check(op)])  # type: ignore[arg-type]
        assert b.dicts is not None
        one = B.tablet_indexes(b, locs).tolist()
        assert one == locs.assign(ps.partition_keys(b.rows)).tolist()
        seen.add(one[0])
    assert -1 in seen and len(seen) == 25  # every tablet, and the gap between the ranges
