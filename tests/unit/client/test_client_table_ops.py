"""A Table without a cluster: table['c'] predicates (no !=), and write operations from dicts, tuples, setitem."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async import client as kclient
from kudu_async.client.table import OPERATIONS, Table, op_type_of
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.row_conversion import OpType


@pytest.fixture
def typed(make_table: Callable[..., Table]) -> Table:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("val", kudu.string)
    b.add_column("dec", kudu.decimal, precision=5, scale=2)
    b.add_column("ts", kudu.unixtime_micros)
    b.add_column("day", kudu.date)
    return make_table(b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2))


def test_table_metadata(kv_table: Table) -> None:
    assert (kv_table.name, kv_table.id, kv_table.num_columns, kv_table.num_replicas) == ("t", "tid", 3, 3)
    assert kv_table.owner is None and kv_table.comment is None
    assert kv_table.schema.names == ["key", "val", "n"]
    assert repr(kv_table["key"]) == "Column(key, parent=t, type=int64)"
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'zz' is not in table t"):
        kv_table["zz"]


@pytest.mark.parametrize(
    ("make", "op", "value"),
    [
        (lambda c: c == 3, "=", 3),
        (lambda c: c < 3, "<", 3),
        (lambda c: c <= 3, "<=", 3),
        (lambda c: c > 3, ">", 3),
        (lambda c: c >= 3, ">=", 3),
        (lambda c: 3 <= c, ">=", 3),  # noqa: SIM300 - reflected: Python turns 3 <= c into c >= 3
        (lambda c: c.in_list([3, 1, 2]), "IN", (3, 1, 2)),
        (lambda c: c.in_list(v for v in (1, None)), "IN", (1,)),  # NULL never matches an IN list
        (lambda c: c.is_null(), "IS NULL", None),
        (lambda c: c.is_not_null(), "IS NOT NULL", None),
    ],
)
def test_column_comparisons_make_predicates(kv_table: Table, make: Any, op: str, value: Any) -> None:
    p = make(kv_table["key"])
    assert isinstance(p, kclient.Predicate)
    assert p.pred == ColumnPredicate("key", op, value)


def test_predicate_repr_names_column_op_and_value(kv_table: Table) -> None:
    assert repr(kv_table["key"] >= 5) == "Predicate(key >= 5)"
    assert repr(kv_table["val"].is_null()) == "Predicate(val IS NULL)"


def test_not_equal_is_refused_as_kudu_has_none(kv_table: Table) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match="no != predicate"):
        kv_table["key"] != 3  # noqa: B015


def test_columns_are_not_hashable_because_eq_makes_a_predicate(kv_table: Table) -> None:
    with pytest.raises(TypeError):
        hash(kv_table["key"])


@pytest.mark.parametrize(
    ("make", "complaint"),
    [
        (lambda t: t["key"] == "x", "column 'key': expected int64, got str"),
        (lambda t: t["key"] > 2**63, "out of range for int64"),
        (lambda t: t["key"] == None, "use IS NULL"),  # noqa: E711
        (lambda t: t["key"].in_list(5), "needs a list"),
        (lambda t: t["val"].in_list("abc"), "needs a list"),
        (lambda t: t["key"].in_list([1, "x"]), "expected int64"),
        (lambda t: t["dec"] < Decimal("1.555"), "more than 2 fractional digits"),
        (lambda t: t["dec"] < Decimal("1000"), "out of range for decimal"),
        (lambda t: t["day"] == dt.datetime(2020, 1, 1), "date"),
    ],
)
def test_bad_predicate_values_are_refused_naming_the_column(typed: Table, make: Any, complaint: str) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        make(typed)


def test_predicate_values_take_kudu_python_types(typed: Table) -> None:
    assert (typed["dec"] < Decimal("1.5")).pred.value == Decimal("1.50")
    assert (typed["dec"] == 2).pred.value == Decimal("2.00")
    when = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    assert (typed["ts"] > when).pred.value == 1_577_836_800_000_000
    assert (typed["ts"] > 5).pred.value == 5
    assert (typed["day"] >= dt.date(2020, 1, 2)).pred.value == dt.date(2020, 1, 2)
    assert (typed["val"] == b"bytes").pred.value == "bytes"


# --- write operations ---------------------------------------------------------------------------------------


def test_operation_from_dict_tuple_and_setitem_agree(kv_table: Table) -> None:
    by_dict = kv_table.new_insert({"key": 1, "val": "a"})
    by_tuple = kv_table.new_insert((1, "a"))
    by_list = kv_table.new_insert([1, "a"])
    by_item = kv_table.new_insert()
    by_item["key"] = 1
    by_item[1] = "a"
    by_setter = kv_table.new_insert()
    by_setter.set_field(0, 1)
    by_setter.set_field("val", "a")
    for op in (by_dict, by_tuple, by_list, by_item, by_setter):
        assert op.cells == {"key": 1, "val": "a"}
        assert op["val"] == "a"
        assert op.validated(kv_table.schema) == {"key": 1, "val": "a", "n": 7}  # default filled for an insert


def test_set_null_and_repr(kv_table: Table) -> None:
    op = kv_table.new_upsert({"key": 1})
    op.set_null("val")
    assert op.cells == {"key": 1, "val": None}
    assert repr(op) == "Upsert(t, {'key': 1, 'val': None})"


@pytest.mark.parametrize(
    ("factory", "cls", "op_type"),
    [
        ("new_insert", kclient.Insert, OpType.INSERT),
        ("new_insert_ignore", kclient.InsertIgnore, OpType.INSERT_IGNORE),
        ("new_upsert", kclient.Upsert, OpType.UPSERT),
        ("new_upsert_ignore", kclient.UpsertIgnore, OpType.UPSERT_IGNORE),
        ("new_update", kclient.Update, OpType.UPDATE),
        ("new_update_ignore", kclient.UpdateIgnore, OpType.UPDATE_IGNORE),
        ("new_delete", kclient.Delete, OpType.DELETE),
        ("new_delete_ignore", kclient.DeleteIgnore, OpType.DELETE_IGNORE),
    ],
)
def test_every_operation_kind(kv_table: Table, factory: str, cls: type, op_type: OpType) -> None:
    op = getattr(kv_table, factory)({"key": 1, "val": "x"})
    assert type(op) is cls and isinstance(op, kclient.WriteOperation)
    assert op.op_type is op_type
    assert op_type_of(op.op_name) is op_type and OPERATIONS[op.op_name] is cls


def test_what_each_kind_sends(kv_table: Table) -> None:
    s = kv_table.schema
    assert kv_table.new_upsert({"key": 1}).validated(s) == {"key": 1, "val": None, "n": 7}
    assert kv_table.new_update({"key": 1, "n": 3}).validated(s) == {"key": 1, "n": 3}  # only what is set
    assert kv_table.new_delete({"key": 1, "val": "dropped"}).validated(s) == {"key": 1}  # key only


def test_unknown_operation_name_is_refused() -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match="unknown write operation 'merge'"):
        op_type_of("merge")


@pytest.mark.parametrize(
    ("make", "complaint"),
    [
        (lambda t: t.new_insert({"zz": 1}), "column 'zz' is not in table t"),
        (lambda t: t.new_insert((1, "a", 3, 4)), "4 values for a table of 3 columns"),
        (lambda t: t.new_insert("abc"), "dict or a tuple/list, not str"),
        (lambda t: t.new_insert(5), "dict or a tuple/list, not int"),
        (lambda t: t.new_insert().__setitem__(3, 1), "column index 3"),
        (lambda t: t.new_insert().__setitem__(-1, 1), "column index -1"),
    ],
)
def test_bad_rows_are_refused_when_built(kv_table: Table, make: Any, complaint: str) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        make(kv_table)


@pytest.mark.parametrize(
    ("record", "op", "complaint"),
    [
        ({"val": "x"}, "insert", "column 'key': key column missing"),
        ({"val": "x"}, "delete", "column 'key': key column missing"),
        ({"key": "1"}, "insert", "column 'key': expected int64, got str"),
        ({"key": None}, "upsert", "column 'key': NULL in NOT NULL column"),
        ({"key": 1, "n": None}, "update", "column 'n': NULL in NOT NULL column"),
        ({"key": 1, "n": 2**31}, "insert", "out of range for int32"),
    ],
)
def test_bad_rows_are_refused_when_validated(kv_table: Table, record: dict[str, Any], op: str, complaint: str) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        getattr(kv_table, f"new_{op}")(record).validated(kv_table.schema)
