"""Immutable columns (Kudu 1.17): once a row holds a value, UPDATE and UPSERT cannot change it; the
IGNORE variants leave the immutable cells alone and apply the rest."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from kudu_async.common.schema import Schema
from kudu_async.tablet.ops import OpType
from tests.unit.tablet.tablet_testkit import make_schema
from tests.unit.tablet.test_tablet_ops import Harness, codes

INS, U, UI, UP, UPI = OpType.INSERT, OpType.UPDATE, OpType.UPDATE_IGNORE, OpType.UPSERT, OpType.UPSERT_IGNORE
# key, i32 (immutable), d, s: set only the key and the named columns
SET_I32 = np.array([[True, True, False, False]])
SET_S = np.array([[True, False, False, True]])
SET_BOTH = np.array([[True, True, False, True]])


@pytest.fixture
def h(tmp_path: Any) -> Harness:
    base = make_schema()
    schema = Schema([base[0], dataclasses.replace(base[1], immutable=True), base[2], base[3]], 1)
    return Harness(str(tmp_path / "t"), schema)


@pytest.fixture(params=[False, True], ids=["memrowset", "diskrowset"])
def flushed(request: Any) -> bool:
    return bool(request.param)


def _seed(h: Harness, flushed: bool) -> None:
    h.write([INS], [1], i32=[7], s=["a"])
    if flushed:
        h.tablet.flush_mrs()


def test_insert_sets_the_immutable_column(h: Harness) -> None:
    res = h.write([INS, UP], [1, 2], i32=[7, 8])
    assert codes(res) == {}
    assert h.rows(projection=["key", "i32"]) == [(1, 7), (2, 8)]


def test_update_of_an_immutable_column_is_an_immutable_row_error(h: Harness, flushed: bool) -> None:
    _seed(h, flushed)
    res = h.write([U], [1], i32=[9], s=["b"], mask=SET_BOTH)
    assert codes(res) == {0: "IMMUTABLE"}
    assert "immutable column: i32" in res.row_errors[0].message
    assert res.updated == 0
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "a")]
    # An UPDATE that leaves the immutable column alone still works.
    res = h.write([U], [1], s=["c"], mask=SET_S)
    assert codes(res) == {}
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "c")]


def test_update_touching_an_immutable_column_fails_even_for_a_missing_key(h: Harness) -> None:
    assert codes(h.write([U], [5], mask=SET_I32)) == {0: "IMMUTABLE"}


def test_update_ignore_skips_the_immutable_cells_and_applies_the_rest(h: Harness, flushed: bool) -> None:
    _seed(h, flushed)
    res = h.write([UI], [1], i32=[9], s=["b"], mask=SET_BOTH)
    assert codes(res) == {}
    assert (res.updated, res.ignored) == (1, 0)
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "b")]
    # Only the immutable cell set: nothing left to do, the row is ignored.
    res = h.write([UI], [1], i32=[10], mask=SET_I32)
    assert (res.updated, res.ignored, codes(res)) == (0, 1, {})
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "b")]


def test_upsert_of_a_present_row_touching_an_immutable_column_fails(h: Harness, flushed: bool) -> None:
    _seed(h, flushed)
    res = h.write([UP, UP], [1, 2], i32=[9, 20], s=["b", "x"])
    assert codes(res) == {0: "IMMUTABLE"}
    assert res.inserted == 1
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "a"), (2, 20, "x")]
    res = h.write([UP], [1], s=["c"], mask=SET_S)
    assert codes(res) == {}
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "c"), (2, 20, "x")]


def test_upsert_ignore_skips_immutable_cells_of_a_present_row(h: Harness, flushed: bool) -> None:
    _seed(h, flushed)
    res = h.write([UPI, UPI], [1, 2], i32=[9, 20], s=["b", "x"])
    assert codes(res) == {}
    assert (res.inserted, res.updated) == (1, 1)
    assert h.rows(projection=["key", "i32", "s"]) == [(1, 7, "b"), (2, 20, "x")]


def test_repeated_keys_in_one_batch_are_decided_in_order(h: Harness) -> None:
    # insert, then an upsert of the now-present row (refused), then an upsert_ignore (cells skipped)
    res = h.write([INS, UP, UPI], [3, 3, 3], i32=[1, 2, 3], s=["a", "b", "c"])
    assert codes(res) == {1: "IMMUTABLE"}
    assert h.rows(projection=["key", "i32", "s"]) == [(3, 1, "c")]


def test_replay_after_restart_decides_the_same(h: Harness, flushed: bool) -> None:
    _seed(h, flushed)
    h.write([UI, U, UP], [1, 1, 1], i32=[9, 9, 9], s=["b", "c", "d"])
    before = h.rows(projection=["key", "i32", "s"])
    assert before == [(1, 7, "b")]
    h.reopen()
    assert h.rows(projection=["key", "i32", "s"]) == before


def test_a_table_without_immutable_columns_is_unaffected(tmp_path: Any) -> None:
    h = Harness(str(tmp_path / "t"), make_schema())
    h.write([INS], [1], i32=[7])
    res = h.write([U, UP], [1, 1], i32=[8, 9], mask=np.array([[True, True, False, False]] * 2))
    assert codes(res) == {}
    assert h.rows(projection=["key", "i32"]) == [(1, 9)]
