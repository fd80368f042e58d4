"""Non-unique primary keys (Kudu 1.17): the tablet assigns the hidden ``auto_incrementing_id`` key column
from a per-tablet counter that survives restarts; writes carrying the ids (replicated or replayed) store
them unchanged."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kudu_async.client.schema_builder import SchemaBuilder
from kudu_async.common import types as T
from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.schema import Schema
from kudu_async.tablet.ops import LoggedWrite, OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions

INS, INSI, U, D, UP = OpType.INSERT, OpType.INSERT_IGNORE, OpType.UPDATE, OpType.DELETE, OpType.UPSERT
AUTO = "auto_incrementing_id"


def non_unique_schema() -> Schema:
    b = SchemaBuilder()
    b.add_column("k", T.INT32).non_unique_primary_key()
    b.add_column("v", T.STRING)
    return b.build()


class Node:
    """One tablet with its own log, so it can be reopened, and a second tablet fed the leader's log
    entries as a follower would be."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.schema = non_unique_schema().with_column_ids()
        self.clock = ManualHybridClock(10**12)
        self.opts = TabletOptions(sync=False)
        self.tablet = Tablet.create(path, self.schema, tablet_id="t", options=self.opts, clock=self.clock)
        self.wal: list[LoggedWrite] = []

    def op(
        self, types: list[int], ks: list[int], ids: list[int | None] | None = None, vs: list[str] | None = None
    ) -> WriteOp:
        n = len(ks)
        batch = pa.record_batch(
            [
                pa.array(ks, pa.int32()),
                pa.array(ids or [None] * n, pa.int64()),
                pa.array(vs or [f"v{k}" for k in ks]),
            ],
            schema=self.schema.to_arrow(),
        )
        return WriteOp(types, batch)

    def write(self, types: list[int], ks: list[int], **kw: Any) -> Any:
        """Prepare as a leader, log what the prepared write holds (rows with their ids), apply."""
        self.clock.advance(10)
        ts = self.clock.now()
        prepared = self.tablet.prepare_write(self.op(types, ks, **kw), ts)
        self.wal.append(LoggedWrite(len(self.wal) + 1, ts, prepared.op))
        return self.tablet.apply_write(prepared, len(self.wal))

    def rows(self, tablet: Tablet | None = None) -> list[tuple[Any, ...]]:
        t = (tablet or self.tablet).scan(ScanSpec(ordered=True)).to_table()
        return [] if t is None else sorted(zip(*[t.column(c).to_pylist() for c in t.column_names], strict=True))

    def reopen(self) -> None:
        self.tablet = Tablet.open(self.path, log_ops=list(self.wal), options=self.opts, clock=self.clock)


def codes(res: Any) -> dict[int, str]:
    return {e.row_index: e.code for e in res.row_errors}


@pytest.fixture
def node(tmp_path: Any) -> Node:
    return Node(str(tmp_path / "t"))


def test_the_builder_adds_the_hidden_key_column() -> None:
    s = non_unique_schema()
    assert s.names == ["k", AUTO, "v"]
    assert s.key_names == ["k", AUTO]
    assert s.user_key_names == ["k"]
    assert s.auto_incrementing_index == 1
    assert s[AUTO].auto_incrementing and not s[AUTO].nullable
    assert Schema.get_auto_incrementing_column_name() == AUTO
    assert Schema.from_dict(s.to_dict()) == s


def test_the_same_key_twice_makes_two_rows_with_different_ids(node: Node) -> None:
    res = node.write([INS, INS, INSI], [1, 1, 1], vs=["a", "b", "c"])
    assert codes(res) == {} and res.inserted == 3
    assert node.rows() == [(1, 1, "a"), (1, 2, "b"), (1, 3, "c")]
    node.write([INS], [1], vs=["d"])
    assert [r[1] for r in node.rows()] == [1, 2, 3, 4]


def test_update_and_delete_need_the_full_key(node: Node) -> None:
    node.write([INS, INS], [1, 1], vs=["a", "b"])
    res = node.write([U, D], [1, 1], ids=[2, 1], vs=["B", "x"])
    assert codes(res) == {} and (res.updated, res.deleted) == (1, 1)
    assert node.rows() == [(1, 2, "B")]
    res = node.write([D], [1])  # no id: the key is incomplete
    assert codes(res) == {0: "INVALID_ARGUMENT"}


def test_insert_must_not_set_the_id_and_upsert_must(node: Node) -> None:
    res = node.write([INS, UP, INS], [1, 2, 3], ids=[5, None, None])
    assert codes(res) == {0: "INVALID_ARGUMENT", 1: "INVALID_ARGUMENT"}
    assert "should not be set" in res.row_errors[0].message
    assert "should be set for UPSERT" in res.row_errors[1].message
    assert node.rows() == [(3, 1, "v3")]
    # An UPSERT naming its row by the full key updates it; one naming a new id inserts it and the
    # counter moves past that id.
    res = node.write([UP, UP], [3, 3], ids=[1, 10], vs=["u", "w"])
    assert codes(res) == {} and (res.updated, res.inserted) == (1, 1)
    node.write([INS], [4])
    assert node.rows() == [(3, 1, "u"), (3, 10, "w"), (4, 11, "v4")]


def test_ids_keep_increasing_after_a_restart(node: Node) -> None:
    node.write([INS, INS], [1, 2])
    node.tablet.flush_all()
    node.write([INS], [3])  # only in the log
    node.reopen()
    assert [r[1] for r in node.rows()] == [1, 2, 3]
    node.write([INS, INS], [1, 1])
    assert node.rows() == [(1, 1, "v1"), (1, 4, "v1"), (1, 5, "v1"), (2, 2, "v2"), (3, 3, "v3")]
    # Restarted with every row flushed: the counter comes from the stored rows alone.
    node.tablet.flush_all()
    node.wal.clear()
    node.reopen()
    node.write([INS], [9])
    assert node.rows()[-1] == (9, 6, "v9")


def test_a_follower_stores_the_leaders_ids_and_continues_after_them(node: Node, tmp_path: Any) -> None:
    node.write([INS, INS, INS], [1, 1, 2])
    follower = Tablet.create(str(tmp_path / "f"), node.schema, tablet_id="t", options=node.opts, clock=node.clock)
    for entry in node.wal:
        follower.apply_write(follower.prepare_write(entry.op, entry.timestamp, replay=True), entry.log_index)
    assert node.rows(follower) == node.rows()
    # The follower becomes the leader: its next ids follow the old leader's.
    node.tablet = follower
    node.write([INS], [1])
    assert sorted(r[1] for r in node.rows()) == [1, 2, 3, 4]
