"""The client (kudu-python's API, sync and async) against one MiniCluster of 1 master + 3 tablet servers
shared by the module: every public call of Client, Table, Session, Scanner, ScanTokenBuilder and
TableAlterer; write kinds with their per-row errors and exact metrics; flush modes; Arrow writes; every
column type; predicates and pruning; snapshots; scan tokens used in another process; alters; timeouts.

Tests that stop nodes get clusters of their own (below, and in test_client_faults.py).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import kudu_async as kudu
import kudu_async.aio as kaio
from kudu_async import errors as kerrors
from kudu_async.client import Scanner, Table
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for

pytestmark = pytest.mark.integration

# Shorter Raft and master heartbeats than the defaults: tables finish creating (every tablet has a leader)
# in ~1.5 s instead of ~3.5 s, which is most of this module's time.
FAST = ["--heartbeat-interval-ms", "200", "--raft-heartbeat-interval-ms", "250"]
REPO = Path(__file__).resolve().parents[2]
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(1, 3, base_dir=tmp_path_factory.mktemp("client-cluster"), extra_flags=FAST)
    c.start()
    try:
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def client(cluster: MiniCluster) -> Iterator[kudu.Client]:
    c = kudu.connect(cluster.master_addresses)
    yield c
    c.close()


def kv_schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("val", type_=kudu.string)
    b.add_column("n", kudu.int32, nullable=False, default=7)
    return b.build()


def create_kv(client: kudu.Client, prefix: str = "kv", buckets: int = 3) -> Table:
    return client.create_table(
        unique(prefix), kv_schema(), kudu.Partitioning().add_hash_partitions(["key"], buckets), n_replicas=3
    )


@pytest.fixture(scope="module")
def range_table(client: kudu.Client) -> Table:
    """host string + ts int64 key; hash(host) x 2, ranges on ts [0,100) [100,200) [300,400): 6 tablets, a gap;
    rows host h0..h3 x ts 0..399 step 10 (except the gap), metric = ts, flag = ts % 20 == 0, note NULL when
    ts % 30 == 0."""
    b = kudu.schema_builder()
    b.add_column("host", kudu.string, nullable=False)
    b.add_column("ts", kudu.int64, nullable=False)
    b.add_column("metric", kudu.double)
    b.add_column("flag", kudu.bool)
    b.add_column("note", kudu.string)
    b.set_primary_keys(["host", "ts"])
    part = (
        kudu.Partitioning()
        .add_hash_partitions(["host"], 2)
        .set_range_partition_columns(["ts"])
        .add_range_partition(0, 100)
        .add_range_partition(100, 200)
        .add_range_partition(300, 400)
    )
    t = client.create_table(unique("ranges"), b.build(), part, n_replicas=3)
    s = client.new_session()
    for h in range(4):
        for ts in range(0, 400, 10):
            if 200 <= ts < 300:
                continue
            s.apply(
                t.new_insert(
                    {
                        "host": f"h{h}",
                        "ts": ts,
                        "metric": float(ts),
                        "flag": ts % 20 == 0,
                        "note": None if ts % 30 == 0 else f"n{ts}",
                    }
                )
            )
    s.flush()
    return t


RANGE_ROWS = [(f"h{h}", ts) for h in range(4) for ts in range(0, 400, 10) if not 200 <= ts < 300]


def keys_of(t: Table, scanner: Any = None) -> list[tuple[Any, ...]]:
    sc = scanner if scanner is not None else t.scanner()
    return sorted(sc.open().read_all_tuples())


# --- connect and cluster metadata ------------------------------------------------------------------------------


def test_connect_takes_every_kudu_python_form(cluster: MiniCluster) -> None:
    m = cluster.masters[0]
    host, port = m.rpc_address.rsplit(":", 1)
    for c in (
        kudu.connect(host, int(port)),
        kudu.connect([host], [int(port)]),
        kudu.connect([m.rpc_address]),
        kudu.connect(m.rpc_address, port=None),
    ):
        with c:
            assert c.master_addrs == [m.rpc_address]
            assert len(c.list_tablet_servers()) == 3
    with pytest.raises(kudu.KuduException, match="the client is closed"):
        c.list_tables()  # a closed client refuses further calls
    c.close()  # closing twice is fine


def test_list_tablet_servers_and_masters(client: kudu.Client, cluster: MiniCluster) -> None:
    servers = client.list_tablet_servers()
    assert {s["uuid"] for s in servers} == {ts.uuid for ts in cluster.tservers}
    assert {s["rpc_address"] for s in servers} == {ts.rpc_address for ts in cluster.tservers}
    assert all(s["live"] for s in servers)
    masters = client.list_masters()
    assert [(m["uuid"], m["rpc_address"], m["role"]) for m in masters] == [
        (cluster.masters[0].uuid, cluster.masters[0].rpc_address, "LEADER")
    ]


# --- DDL -----------------------------------------------------------------------------------------------------


def test_create_find_list_and_delete_tables(client: kudu.Client) -> None:
    alpha, beta = unique("ddl_alpha"), unique("ddl_beta")
    t = client.create_table(
        alpha,
        kv_schema(),
        kudu.Partitioning().add_hash_partitions(["key"], 2),
        n_replicas=1,
        owner="alice",
        comment="a test table",
    )
    client.create_table(
        beta,
        kv_schema(),
        kudu.Partitioning()
        .set_range_partition_columns(["key"])
        .add_range_partition(0, 10)
        .add_range_partition_split(5),
        n_replicas=3,
    )
    assert (t.name, t.num_replicas, t.num_columns) == (alpha, 1, 3)
    assert t.schema == kv_schema()
    assert client.table_exists(alpha) and client.table_exists(beta)
    assert not client.table_exists(unique("ddl_missing"))
    assert alpha in client.list_tables() and beta in client.list_tables()
    assert client.list_tables(alpha) == [alpha]
    assert set(client.list_tables("ddl_")) >= {alpha, beta}
    assert client.list_tables(unique("nothing_like_this")) == []
    opened = client.table(beta)
    assert (opened.name, opened.num_replicas, opened.schema) == (beta, 3, kv_schema())
    assert len(opened.scan_token_builder().build()) == 2  # [0,5) and [5,10)
    with pytest.raises(kerrors.KuduAlreadyPresent, match="already exists"):
        client.create_table(alpha, kv_schema())
    client.delete_table(alpha)
    opened.drop()
    assert not client.table_exists(alpha) and not client.table_exists(beta)
    assert alpha not in client.list_tables() and beta not in client.list_tables()
    with pytest.raises(kudu.KuduNotFound, match=alpha):
        client.table(alpha)
    with pytest.raises(kudu.KuduNotFound):
        client.delete_table(alpha)


def test_typed_range_bounds_and_splits_route_rows(client: kudu.Client) -> None:
    """Range partitions and split rows over timestamp, date and decimal key columns, as datetime / date /
    Decimal values (they travel tagged to the master), then rows routed to them and pruned scans."""
    b = kudu.schema_builder()
    b.add_column("ts", kudu.unixtime_micros, nullable=False)
    b.add_column("day", kudu.date, nullable=False)
    b.add_column("amount", kudu.decimal, precision=8, scale=2, nullable=False)
    b.set_primary_keys(["ts", "day", "amount"])
    jan, jun, dec = (dt.datetime(2024, m, 1, tzinfo=UTC) for m in (1, 6, 12))
    part = (
        kudu.Partitioning()
        .set_range_partition_columns(["ts"])
        .add_range_partition(jan, dec)
        .add_range_partition_split(jun)
    )
    t = client.create_table(unique("typed_ranges"), b.build(), part, n_replicas=1)
    assert len(t.scan_token_builder().build()) == 2
    s = client.new_session()
    for m in range(1, 12):
        s.apply(
            t.new_insert(
                {"ts": dt.datetime(2024, m, 15, tzinfo=UTC), "day": dt.date(2024, m, 15), "amount": Decimal(m) / 4}
            )
        )
    s.apply(t.new_insert({"ts": dec, "day": dt.date(2024, 12, 1), "amount": 0}))  # past the last range
    with pytest.raises(kudu.KuduBadStatus, match="1 row"):
        s.flush()
    later = t.scanner().add_predicate(t["ts"] >= jun).open()
    assert scanned_tablets(later) == 1
    assert [r[2] for r in sorted(later.read_all_tuples())] == [Decimal(m) / 4 for m in range(6, 12)]
    by_amount = t.scanner().add_predicate(t["amount"].in_list([Decimal("0.25"), Decimal("2.75")])).open()
    assert sorted(r[1] for r in by_amount.read_all_tuples()) == [dt.date(2024, 1, 15), dt.date(2024, 11, 15)]
    t2 = client.new_table_alterer(t).add_range_partition(dec, None).alter()
    s.apply(t2.new_insert({"ts": dec, "day": dt.date(2024, 12, 1), "amount": 0}))
    s.flush()
    assert len(t2.scanner().open().read_all_tuples()) == 12


@pytest.mark.parametrize(
    ("kw", "complaint"),
    [
        ({"n_replicas": 2}, "odd"),
        ({"n_replicas": 5}, "not enough live tablet servers"),
        ({"partitioning": kudu.Partitioning().add_hash_partitions(["val"], 2)}, "not a primary key column"),
        ({"schema": "not a schema"}, "schema must be built"),
        ({"partitioning": "hash"}, "must be a kudu.Partitioning"),
    ],
)
def test_create_table_refuses_bad_requests(client: kudu.Client, kw: dict[str, Any], complaint: str) -> None:
    args: dict[str, Any] = {"schema": kv_schema(), "partitioning": None, **kw}
    name = unique("bad")
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        client.create_table(name, args.pop("schema"), args.pop("partitioning"), **args)
    assert not client.table_exists(name)


# --- writes --------------------------------------------------------------------------------------------------


def rows_of(t: Table) -> dict[int, tuple[Any, ...]]:
    return {r[0]: r for r in t.scanner().open().read_all_tuples()}


def test_every_write_kind_with_per_row_errors_and_exact_metrics(client: kudu.Client) -> None:
    t = create_kv(client)
    s = client.new_session()
    for k in range(10):
        s.apply(t.new_insert({"key": k, "val": f"v{k}", "n": k}))
    s.flush()
    assert s.get_write_op_metrics()["successful_inserts"] == 10
    ops = [
        t.new_insert({"key": 0, "val": "dup"}),
        t.new_insert({"key": 10, "val": "v10"}),  # 1 error, 1 ok
        t.new_insert_ignore({"key": 1, "val": "dup"}),
        t.new_insert_ignore({"key": 11}),  # 1 ignored, 1 ok
        t.new_upsert({"key": 2, "val": "up2"}),
        t.new_upsert({"key": 12, "val": "up12"}),  # update + insert
        t.new_upsert_ignore({"key": 3, "val": "upi3"}),
        t.new_update({"key": 4, "val": "upd4"}),
        t.new_update({"key": 99, "val": "x"}),  # 1 ok, 1 error
        t.new_update_ignore({"key": 5, "n": 55}),
        t.new_update_ignore({"key": 98, "n": 1}),  # 1 ok, 1 ignored
        t.new_delete({"key": 6}),
        t.new_delete({"key": 97}),  # 1 ok, 1 error
        t.new_delete_ignore({"key": 7}),
        t.new_delete_ignore({"key": 96}),  # 1 ok, 1 ignored
    ]
    for op in ops:
        s.apply(op)
    assert s.count_buffered_operations() == len(ops)
    with pytest.raises(kudu.KuduBadStatus, match=r"flush: 3 row\(s\) failed"):
        s.flush()
    assert s.count_pending_errors() == 3
    errors, overflowed = s.get_pending_errors()
    assert not overflowed
    assert sorted((type(e.status).__name__, e.failed_op().op_name, e.failed_op()["key"]) for e in errors) == [
        ("KuduAlreadyPresent", "insert", 0),
        ("KuduNotFound", "delete", 97),
        ("KuduNotFound", "update", 99),
    ]
    assert all(not e.was_possibly_successful() for e in errors)
    assert s.get_write_op_metrics() == {
        "successful_inserts": 12,
        "successful_upserts": 3,
        "successful_updates": 2,
        "successful_deletes": 2,
        "insert_ignore_errors": 1,
        "upsert_ignore_errors": 0,
        "update_ignore_errors": 1,
        "delete_ignore_errors": 1,
    }
    assert rows_of(t) == {
        0: (0, "v0", 0),
        1: (1, "v1", 1),
        2: (2, "up2", 2),
        3: (3, "upi3", 3),
        4: (4, "upd4", 4),
        5: (5, "v5", 55),
        8: (8, "v8", 8),
        9: (9, "v9", 9),
        10: (10, "v10", 7),
        11: (11, None, 7),
        12: (12, "up12", 7),
    }  # upserts kept the cells they did not name; inserts took n's default
    s.close()


def test_operations_from_tuples_lists_and_setitem(client: kudu.Client) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session(flush_mode=kudu.FLUSH_AUTO_SYNC)
    s.apply(t.new_insert((1, "tuple", 1)))
    s.apply(t.new_insert([2, "list"]))
    op = t.new_upsert()
    op["key"] = 3
    op[1] = "setitem"
    op.set_field("n", 33)
    s.apply(op)
    null_op = t.new_upsert({"key": 1})
    null_op.set_null("val")
    s.apply(null_op)
    assert rows_of(t) == {1: (1, None, 1), 2: (2, "list", 7), 3: (3, "setitem", 33)}


def test_auto_flush_sync_applies_at_once_and_raises_on_a_bad_row(client: kudu.Client) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session(flush_mode="sync")
    s.apply(t.new_insert({"key": 1, "val": "a"}))
    assert rows_of(t) == {1: (1, "a", 7)}  # visible with no flush
    with pytest.raises(kerrors.KuduAlreadyPresent, match="key already present"):
        s.apply(t.new_insert({"key": 1, "val": "b"}))
    with pytest.raises(kudu.KuduNotFound, match="key not found"):
        s.apply(t.new_update({"key": 2, "val": "b"}))
    errors, _ = s.get_pending_errors()  # also kept as pending errors, as Kudu does
    assert [e.failed_op()["key"] for e in errors] == [1, 2]
    s.flush()  # nothing buffered
    assert s.get_write_op_metrics()["successful_inserts"] == 1


def test_auto_flush_background_sends_without_flush_and_flush_waits(client: kudu.Client) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session(flush_mode=kudu.FLUSH_AUTO_BACKGROUND, mutation_buffer_flush_interval=100)
    for k in range(50):
        s.apply(t.new_insert({"key": k}))
    wait_for(lambda: len(rows_of(t)) == 50, 5.0, "background flush of 50 rows without flush()")
    assert s.count_buffered_operations() == 0
    # A watermark crossing starts a flush too (here at once: 1 byte buffer space, any watermark).
    s.set_mutation_buffer_flush_interval(60_000)
    s.set_mutation_buffer_space(10_000)
    s.set_mutation_buffer_flush_watermark(0.01)
    s.apply(t.new_insert({"key": 50, "val": "x" * 200}))
    wait_for(lambda: 50 in rows_of(t), 5.0, "a flush started by the watermark")
    for k in range(51, 300):
        s.apply(t.new_insert({"key": k}))
    s.flush()  # waits for every background flush and the rest of the buffer
    assert sorted(rows_of(t)) == list(range(300))
    s.apply(t.new_insert({"key": 0}))  # a duplicate: reported at the next flush
    with pytest.raises(kudu.KuduBadStatus, match="1 row"):
        s.flush()
    assert s.get_write_op_metrics()["successful_inserts"] == 300


def test_manual_flush_buffer_full_is_an_error_and_flush_empties_it(client: kudu.Client) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session(mutation_buffer_sz=2_000)
    k = 0
    with pytest.raises(kudu.KuduBadStatus, match="mutation buffer is full"):
        while k < 1_000:
            s.apply(t.new_insert({"key": k, "val": "x" * 100}))
            k += 1
    assert 5 <= k < 1_000 and s.count_buffered_operations() == k
    s.flush()
    assert s.count_buffered_operations() == 0
    s.apply(t.new_insert({"key": k, "val": "after"}))
    s.flush()
    assert sorted(rows_of(t)) == list(range(k + 1))


def test_apply_arrow_with_column_subsets_and_bad_rows(client: kudu.Client) -> None:
    t = create_kv(client)
    s = client.new_session()
    batch = pa.table({"val": [f"a{k}" for k in range(100)], "key": pa.array(range(100), pa.int64())})
    assert s.apply_arrow(t, batch, op="insert") == 100  # no n: its default
    assert rows_of(t)[5] == (5, "a5", 7)
    upd = pa.record_batch({"key": pa.array([1, 2, 500], pa.int64()), "n": pa.array([10, 20, 30], pa.int32())})
    with pytest.raises(kudu.KuduBadStatus, match="apply_arrow: 1 row"):
        s.apply_arrow(t, upd, op="update")
    errors, _ = s.get_pending_errors()
    assert [(e.failed_op()["key"], type(e.status).__name__) for e in errors] == [(500, "KuduNotFound")]
    rows = rows_of(t)
    assert (rows[1], rows[2]) == ((1, "a1", 10), (2, "a2", 20))  # val kept: only n was given
    bad = pa.table({"key": pa.array([200, 201, 202], pa.int64()), "n": pa.array([1, None, 3], pa.int32())})
    with pytest.raises(kudu.KuduBadStatus, match="apply_arrow: 1 row"):
        s.apply_arrow(t, bad, op="upsert")
    errors, _ = s.get_pending_errors()
    assert [(e.failed_op()["key"], str(e.status)) for e in errors] == [
        (201, "INVALID_ARGUMENT: column 'n': NULL in NOT NULL column")
    ]
    assert 200 in rows_of(t) and 202 in rows_of(t) and 201 not in rows_of(t)
    s.apply_arrow(t, pa.table({"key": pa.array(range(50), pa.int64())}), op="delete")
    assert sorted(rows_of(t)) == [*range(50, 100), 200, 202]
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'nope' is not in the schema"):
        s.apply_arrow(t, pa.table({"key": [1], "nope": [1]}))
    assert s.get_write_op_metrics() == {
        "successful_inserts": 100,
        "successful_upserts": 2,
        "successful_updates": 2,
        "successful_deletes": 50,
        "insert_ignore_errors": 0,
        "upsert_ignore_errors": 0,
        "update_ignore_errors": 0,
        "delete_ignore_errors": 0,
    }


def test_session_as_context_manager_flushes_on_exit(client: kudu.Client) -> None:
    t = create_kv(client, buckets=2)
    with client.new_session() as s:
        s.set_flush_mode(kudu.FLUSH_MANUAL)
        s.set_timeout_ms(10_000)
        s.set_mutation_buffer_max_num(2)
        s.apply(t.new_insert({"key": 1}))
        s.apply(t.new_insert({"key": 2}))
        s.apply(t.new_insert({"key": 3}))
    assert sorted(rows_of(t)) == [1, 2, 3]


# --- every column type ---------------------------------------------------------------------------------------


def all_types_schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int32, nullable=False).primary_key()
    b.add_column("i8", kudu.int8)
    b.add_column("i16", kudu.int16)
    b.add_column("i32", kudu.int32)
    b.add_column("i64", kudu.int64)
    b.add_column("f", kudu.float_)
    b.add_column("d", kudu.double)
    b.add_column("b", kudu.bool)
    b.add_column("s", kudu.string)
    b.add_column("bin", kudu.binary)
    b.add_column("ts", kudu.unixtime_micros)
    b.add_column("day", kudu.date)
    b.add_column("dec", kudu.decimal, precision=12, scale=3)
    b.add_column("big", kudu.decimal, precision=38, scale=10)
    b.add_column("vc", kudu.varchar, length=4)
    return b.build()


UTC = dt.UTC
TYPED_ROWS = [
    (
        0,
        -128,
        -32768,
        -(2**31),
        -(2**63),
        -1.5,
        -1e300,
        False,
        "",
        b"",
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.date(1, 1, 1),
        Decimal("-999999999.999"),
        Decimal("-9999999999999999999999999999.9999999999"),
        "",
    ),
    (
        1,
        127,
        32767,
        2**31 - 1,
        2**63 - 1,
        3.25,
        2.5e-300,
        True,
        "ünïcødé ✓",
        b"\x00\xff\x01",
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
        dt.date(9999, 12, 31),
        Decimal("999999999.999"),
        Decimal("9999999999999999999999999999.9999999999"),
        "abcd",
    ),
    (2, None, None, None, None, None, None, None, None, None, None, None, None, None, None),
]


def test_every_column_type_round_trips(client: kudu.Client) -> None:
    t = client.create_table(
        unique("types"), all_types_schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=1
    )
    s = client.new_session()
    for r in TYPED_ROWS:
        s.apply(t.new_insert(r))
    # kudu-python's conveniences: naive datetimes are UTC, ints work for decimals and timestamps,
    # str for binary, and a too-long varchar is truncated as Kudu does.
    s.apply(
        t.new_insert({"key": 3, "ts": dt.datetime(2001, 2, 3, 4, 5, 6), "dec": 12, "bin": "text", "vc": "truncated"})
    )
    s.apply(t.new_insert({"key": 4, "ts": 1_000_000, "day": 1}))
    s.flush()
    got = sorted(t.scanner().open().read_all_tuples())
    assert got[:3] == TYPED_ROWS
    by_name = dict(zip(t.schema.names, got[3], strict=True))
    assert (by_name["ts"], by_name["dec"], by_name["bin"], by_name["vc"]) == (
        dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC),
        Decimal("12.000"),
        b"text",
        "trun",
    )
    assert got[4][10] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC) and got[4][11] == dt.date(1970, 1, 2)
    arrow = t.scanner().open().to_arrow()
    assert arrow.schema.field("dec").type == pa.decimal128(12, 3)
    assert arrow.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert arrow.schema.field("day").type == pa.date32()
    for r in TYPED_ROWS[:2]:  # an equality predicate on every type finds its row
        for ci, name in enumerate(t.schema.names[1:], start=1):
            found = t.scanner().add_predicate(t[name] == r[ci]).set_projected_column_names(["key"]).open()
            assert r[0] in [x[0] for x in found.read_all_tuples()], name
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'i8': value 128 out of range for int8"):
        s.apply(t.new_insert({"key": 9, "i8": 128}))
    with pytest.raises(kudu.KuduInvalidArgument, match="more than 3 fractional digits"):
        s.apply(t.new_insert({"key": 9, "dec": Decimal("1.0001")}))
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'day'"):
        s.apply(t.new_insert({"key": 9, "day": dt.datetime(2020, 1, 1)}))


# --- predicates, pruning, projections, limits -----------------------------------------------------------------


def buckets_of(t: Table, *hosts: str) -> int:
    return len({t.partition_schema.hash_buckets_of({"host": h}) for h in hosts})


def scanned_tablets(sc: Scanner) -> int:
    assert sc._inner is not None
    return len(sc._inner._tablets)


@pytest.mark.parametrize(
    ("preds", "expect", "tablets"),
    [
        (lambda t: [], lambda h, ts: True, 6),
        (lambda t: [t["host"] == "h1"], lambda h, ts: h == "h1", 3),  # hash pruned
        (lambda t: [t["ts"] >= 300], lambda h, ts: ts >= 300, 2),  # range pruned
        (lambda t: [t["ts"] < 100], lambda h, ts: ts < 100, 2),
        (lambda t: [t["ts"] > 90, t["ts"] <= 100], lambda h, ts: 90 < ts <= 100, 4),
        (lambda t: [t["host"] == "h2", t["ts"] == 150], lambda h, ts: (h, ts) == ("h2", 150), 1),
        (
            lambda t: [t["host"].in_list(["h0", "h3"]), t["ts"].in_list([10, 20])],
            lambda h, ts: h in ("h0", "h3") and ts in (10, 20),
            lambda t: buckets_of(t, "h0", "h3"),
        ),
        (lambda t: [t["ts"].in_list([10, 390])], lambda h, ts: ts in (10, 390), 6),  # IN prunes by its min..max
        (lambda t: [t["ts"] >= 200, t["ts"] < 300], lambda h, ts: False, 0),  # only the range gap
        (lambda t: [t["host"].is_null()], lambda h, ts: False, 0),  # key columns are NOT NULL
        (lambda t: [t["metric"] >= 350.0], lambda h, ts: ts >= 350, 6),  # value column: no pruning
        (lambda t: [t["flag"] == True], lambda h, ts: ts % 20 == 0, 6),  # noqa: E712
        (lambda t: [t["note"].is_null()], lambda h, ts: ts % 30 == 0, 6),
        (lambda t: [t["note"].is_not_null(), t["ts"] < 60], lambda h, ts: ts % 30 != 0 and ts < 60, 2),
        (lambda t: [t["note"].in_list(["n10", "n20", "nope"])], lambda h, ts: ts in (10, 20), 6),
        (lambda t: [t["host"] >= "h2", t["ts"] < 20], lambda h, ts: h >= "h2" and ts < 20, 2),
    ],
)
def test_predicates_of_every_kind_and_partition_pruning(
    range_table: Table, preds: Any, expect: Any, tablets: Any
) -> None:
    sc = range_table.scanner().add_predicates(preds(range_table)).set_projected_column_names(["host", "ts"])
    sc.open()
    assert scanned_tablets(sc) == (tablets(range_table) if callable(tablets) else tablets)
    got = sorted(sc.read_all_tuples())
    assert got == [r for r in RANGE_ROWS if expect(*r)]


def test_projection_limit_bounds_and_batch_reading(range_table: Table) -> None:
    t = range_table
    proj = t.scanner().set_projected_column_names(["metric", "host"]).add_predicate(t["ts"] == 20).open()
    assert proj.get_projection_schema().names == ["metric", "host"]
    assert sorted(proj.read_all_tuples()) == [(20.0, f"h{h}") for h in range(4)]
    by_index = t.scanner().set_projected_column_indexes([1]).add_predicate(t["host"] == "h0").open()
    assert sorted(by_index.read_all_tuples()) == [(ts,) for h, ts in RANGE_ROWS if h == "h0"]
    for limit in (0, 1, 7, 1000):
        got = t.scanner().set_limit(limit).open().read_all_tuples()
        assert len(got) == min(limit, len(RANGE_ROWS))
    limited = t.scanner().set_limit(5).add_predicate(t["ts"] >= 300).set_batch_size_bytes(64).open()
    assert all(r[1] >= 300 for r in limited.read_all_tuples())
    # Primary-key bounds: [("h1", 50), ("h2", 0)) - the key is (host, ts).
    bounded = t.scanner().add_lower_bound({"host": "h1", "ts": 50}).add_exclusive_upper_bound(("h2", 0)).open()
    assert sorted(r[:2] for r in bounded.read_all_tuples()) == [r for r in RANGE_ROWS if ("h1", 50) <= r < ("h2", 0)]
    # Small batches: next_batch / read_next_batch_tuples / xbatches / has_more_rows give every row once.
    sc = t.scanner().set_batch_size_bytes(200).set_projected_column_names(["host", "ts"]).open()
    seen: list[tuple[Any, ...]] = []
    batches = 0
    while sc.has_more_rows():
        b = sc.next_batch_arrow()
        seen += list(zip(b.column("host").to_pylist(), b.column("ts").to_pylist(), strict=True))
        batches += 1
    assert sorted(seen) == RANGE_ROWS and batches > 6
    sc2 = t.scanner().set_batch_size_bytes(200).open()
    first = sc2.read_next_batch_tuples()
    assert 0 < len(first) < len(RANGE_ROWS) and sc2.has_more_rows()
    assert sc2._inner is not None
    assert sc2.get_current_server() in {r.rpc_address for r in sc2._inner._tablets[0].replicas}
    sc2.keep_alive()
    sc2.close()
    assert not sc2.has_more_rows()
    chunks = list(t.scanner().set_batch_size_bytes(300).open().xbatches_arrow())
    assert len(chunks) > 6 and sum(c.num_rows for c in chunks) == len(RANGE_ROWS)
    df = t.scanner().add_predicate(t["host"] == "h3").open().to_pandas()
    assert list(df.columns) == ["host", "ts", "metric", "flag", "note"] and len(df) == len(RANGE_ROWS) // 4
    assert t.scanner().add_predicate(t["host"] == "h3").open().to_pandas(index="ts").index.name == "ts"


def test_xbatches_reads_one_batch_ahead_and_stops_cleanly(range_table: Table) -> None:
    """xbatches opens with its first fetch (no open() needed) and fetches the next batch while the caller
    holds this one; other calls on the scanner meanwhile wait for that fetch (every row still comes once);
    a caller that stops early leaves a scanner it can close and a client that goes on."""
    t = range_table
    sc = t.scanner().set_batch_size_bytes(200).set_projected_column_names(["host", "ts"])
    seen: list[tuple[Any, ...]] = []
    for i, b in enumerate(sc.xbatches_arrow()):
        if i == 2:
            assert sc._ahead is not None  # the next batch is on its way while this one is handled
            sc.keep_alive()
            assert sc._ahead.done()
        seen += list(zip(b.column("host").to_pylist(), b.column("ts").to_pylist(), strict=True))
    assert sorted(seen) == RANGE_ROWS and not sc.has_more_rows() and sc._ahead is None
    early = t.scanner().set_batch_size_bytes(200)
    it = early.xbatches_arrow()
    first = next(it)
    assert 0 < first.num_rows < len(RANGE_ROWS)
    it.close()  # the caller stops: the read-ahead is dropped
    early.close()
    assert not early.has_more_rows()
    assert sorted(r[:2] for r in t.scanner().open().read_all_tuples()) == RANGE_ROWS


def test_to_arrow_reads_tablets_concurrently_in_the_sequential_order(range_table: Table) -> None:
    t = range_table
    for make in (
        lambda: t.scanner().set_batch_size_bytes(200),
        lambda: t.scanner().set_fault_tolerant().set_projected_column_names(["metric", "ts"]),
        lambda: t.scanner().add_predicate(t["ts"] >= 100),
    ):
        sequential = [b for b in make().open().xbatches_arrow()]
        want = pa.concat_tables(sequential) if sequential else None
        sc = make().open()
        assert sc._inner is not None
        snapshot_first = sc._inner.snapshot_ts is None and sc._inner.read_mode == kudu.READ_AT_SNAPSHOT
        assert sc._inner._can_read_concurrently() != snapshot_first  # a fault-tolerant scan reads one first
        got = sc.to_arrow()
        assert want is not None and got.equals(want)  # same rows, same order (tablet by tablet)
        assert not sc.has_more_rows()
    started = t.scanner().set_batch_size_bytes(200).open()
    first = started.next_batch_arrow()  # a scan already under way is finished one tablet after another
    assert started._inner is not None and not started._inner._can_read_concurrently()
    assert first.num_rows + started.to_arrow().num_rows == len(RANGE_ROWS)


def test_replica_selection_modes_read_the_same_rows(range_table: Table) -> None:
    expected = sorted(range_table.scanner().open().read_all_tuples())
    for sel in (kudu.LEADER_ONLY, kudu.CLOSEST_REPLICA, kudu.FIRST_REPLICA):
        for mode in (kudu.READ_LATEST, kudu.READ_AT_SNAPSHOT):
            sc = range_table.scanner().set_selection(sel).set_read_mode(mode).set_cache_blocks(True)
            assert sorted(sc.open().read_all_tuples()) == expected, (sel, mode)


def test_bad_scans_are_refused(range_table: Table) -> None:
    t = range_table
    with pytest.raises(kudu.KuduInvalidArgument, match="projected column 'nope'"):
        t.scanner().set_projected_column_names(["nope"])
    with pytest.raises(kudu.KuduInvalidArgument, match="no != predicate"):
        t.scanner().add_predicate(t["ts"] != 3)
    with pytest.raises(kudu.KuduInvalidArgument, match="expected int64"):
        t.scanner().add_predicate(t["ts"] == "3")


# --- snapshots and read-your-writes -------------------------------------------------------------------------------


def test_read_at_snapshot_in_the_past_does_not_see_later_writes(client: kudu.Client) -> None:
    t = create_kv(client)
    s = client.new_session()
    for k in range(10):
        s.apply(t.new_insert({"key": k, "val": "before"}))
    s.flush()
    after_first = client.latest_observed_timestamp()
    assert after_first > 0
    time.sleep(0.01)
    snap_micros = int(time.time() * 1_000_000)
    time.sleep(0.01)
    for k in range(10, 20):
        s.apply(t.new_insert({"key": k, "val": "after"}))
    s.apply(t.new_update({"key": 0, "val": "changed"}))
    s.apply(t.new_delete({"key": 1}))
    s.flush()
    before = {k: (k, "before", 7) for k in range(10)}
    latest = rows_of(t)
    assert latest == {
        0: (0, "changed", 7),
        **{k: (k, "before", 7) for k in range(2, 10)},
        **{k: (k, "after", 7) for k in range(10, 20)},
    }
    for sc in (
        t.scanner().set_snapshot(snap_micros),
        t.scanner().set_snapshot(dt.datetime.fromtimestamp(snap_micros / 1e6, UTC)),
        t.scanner().set_read_mode(kudu.READ_AT_SNAPSHOT).set_snapshot_raw(after_first),
        t.scanner().set_fault_tolerant().set_snapshot(snap_micros).set_batch_size_bytes(64),
    ):
        assert {r[0]: r for r in sc.open().read_all_tuples()} == before
    # A snapshot scan with no timestamp reads every tablet at the one time the first tablet picked.
    sc = t.scanner().set_read_mode(kudu.READ_AT_SNAPSHOT).open()
    assert {r[0] for r in sc.read_all_tuples()} == set(latest)


def test_read_your_writes_sees_own_writes_on_any_replica_and_across_clients(
    client: kudu.Client, cluster: MiniCluster
) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session(flush_mode=kudu.FLUSH_AUTO_SYNC)
    for k in range(8):
        s.apply(t.new_upsert({"key": k, "val": f"round{k}"}))
        for sel in (kudu.FIRST_REPLICA, kudu.CLOSEST_REPLICA):  # followers too: they wait for the write
            sc = t.scanner().set_read_mode(kudu.READ_YOUR_WRITES).set_selection(sel)
            sc.add_predicate(t["key"] == k)
            assert sc.open().read_all_tuples() == [(k, f"round{k}", 7)]
    with kudu.connect(cluster.master_addresses) as other:
        assert other.latest_observed_timestamp() == 0
        other.set_latest_observed_timestamp(client.latest_observed_timestamp())
        ot = other.table(t.name)
        got = ot.scanner().set_read_mode("read_your_writes").set_selection(kudu.FIRST_REPLICA).open()
        assert len(got.read_all_tuples()) == 8
        assert other.latest_observed_timestamp() >= client.latest_observed_timestamp()


# --- scan tokens in another process ----------------------------------------------------------------------------

TOKEN_READER = """
import base64, json, sys
import kudu_async as kudu
masters, tokens = sys.argv[1], [base64.b64decode(x) for x in sys.stdin.read().split()]
out = []
with kudu.connect(masters) as client:
    for i, data in enumerate(tokens):
        if i % 2:
            sc = client.deserialize_token_into_scanner(data)
        else:
            sc = kudu.ScanToken.deserialize_into_scanner(client, data)
        out.append([list(r) for r in sc.open().read_all_tuples()])
print(json.dumps(out))
"""


def read_tokens_elsewhere(cluster: MiniCluster, tokens: list[bytes]) -> list[list[tuple[Any, ...]]]:
    import base64
    import json

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-c", TOKEN_READER, cluster.master_addresses],
        env=env,
        cwd=str(REPO),
        input="\n".join(base64.b64encode(t).decode() for t in tokens),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [[tuple(row) for row in rows] for rows in json.loads(r.stdout)]


def test_scan_tokens_serialised_and_read_in_another_process(
    client: kudu.Client, cluster: MiniCluster, range_table: Table
) -> None:
    t = range_table
    b = t.scan_token_builder()
    b.set_projected_column_names(["host", "ts", "note"]).add_predicate(t["ts"] >= 50).add_predicate(
        t["note"].is_not_null()
    ).set_batch_size_bytes(256).set_timeout_millis(20_000)
    tokens = b.build()
    assert len(tokens) == 6  # ts >= 50 prunes nothing here: [0,100) still holds 50..90
    assert all(isinstance(tok.tablet(), kudu.client.Tablet) and tok.hosts() == ["127.0.0.1"] for tok in tokens)
    assert len({tok.tablet().id() for tok in tokens}) == 6
    local = [sorted(tok.into_kudu_scanner().open().read_all_tuples()) for tok in tokens]
    remote = read_tokens_elsewhere(cluster, [tok.serialize() for tok in tokens])
    assert [sorted(r) for r in remote] == local
    expected = sorted(
        t.scanner()
        .set_projected_column_names(["host", "ts", "note"])
        .add_predicate(t["ts"] >= 50)
        .add_predicate(t["note"].is_not_null())
        .open()
        .read_all_tuples()
    )
    merged = sorted(r for rows in remote for r in rows)
    assert merged == expected and len(merged) == len(set(merged)) > 0
    # Primary-key bounds travel in the tokens: together they read exactly the rows inside them.
    bounded = t.scan_token_builder().add_lower_bound(("h1", 0)).add_upper_bound(("h2", 0)).build()
    rows = sorted(r for tok in bounded for r in tok.into_kudu_scanner().open().read_all_tuples())
    assert [r[:2] for r in rows] == [r for r in RANGE_ROWS if r[0] == "h1"]


def test_snapshot_scan_tokens_read_at_build_time_in_another_process(client: kudu.Client, cluster: MiniCluster) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session()
    for k in range(20):
        s.apply(t.new_insert({"key": k, "val": "old"}))
    s.flush()
    tokens = t.scan_token_builder().set_read_mode(kudu.READ_AT_SNAPSHOT).add_predicate(t["key"] < 15).build()
    assert len(tokens) == 2
    time.sleep(0.01)
    for k in range(20, 30):
        s.apply(t.new_insert({"key": k, "val": "new"}))
    s.apply(t.new_update({"key": 3, "val": "new"}))
    s.flush()
    remote = sorted(r for rows in read_tokens_elsewhere(cluster, [tok.serialize() for tok in tokens]) for r in rows)
    assert remote == [(k, "old", 7) for k in range(15)]
    limited = t.scan_token_builder().set_limit(3).set_fault_tolerant().build()
    assert all(len(tok.into_kudu_scanner().open().read_all_tuples()) == 3 for tok in limited)
    assert sum(len(r) for r in read_tokens_elsewhere(cluster, [tok.serialize() for tok in limited])) == 6


def test_a_garbage_token_is_refused_by_the_client(client: kudu.Client) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match="scan token"):
        client.deserialize_token_into_scanner(b"\x93garbage")


# --- alter table -------------------------------------------------------------------------------------------------


def range_kv(client: kudu.Client, prefix: str = "alter") -> Table:
    part = (
        kudu.Partitioning()
        .add_hash_partitions(["key"], 2)
        .set_range_partition_columns(["key"])
        .add_range_partition(0, 100)
    )
    return client.create_table(unique(prefix), kv_schema(), part, n_replicas=3)


def test_alter_columns_and_range_partitions_then_write_and_read(client: kudu.Client) -> None:
    t = range_kv(client)
    s = client.new_session()
    for k in range(0, 100, 10):
        s.apply(t.new_insert({"key": k, "val": f"v{k}", "n": k}))
    s.flush()
    s.apply(t.new_insert({"key": 150}))
    with pytest.raises(kudu.KuduBadStatus):
        s.flush()  # no range holds 150 yet
    assert "no range partition" in str(s.get_pending_errors()[0][0].status)

    alt = client.new_table_alterer(t)
    alt.add_column("extra", kudu.int64, default=5)
    alt.add_column("note").type(kudu.string).nullable(True)
    alt.drop_column("n")
    alt.alter_column("val").rename("value")
    alt.add_range_partition(100, 200)
    t2 = alt.alter()
    assert t2.name == t.name and t2.schema.names == ["key", "value", "extra", "note"]
    assert t2.schema.column("extra").default == 5
    assert len(t2.scan_token_builder().build()) == 4
    s.apply(t2.new_insert({"key": 150, "value": "new range", "note": "hi"}))
    s.flush()
    rows = {r[0]: r for r in t2.scanner().open().read_all_tuples()}
    assert rows[150] == (150, "new range", 5, "hi")
    assert rows[10] == (10, "v10", 5, None)  # existing rows read the added column's default
    assert t2.scanner().add_predicate(t2["extra"] == 5).open().read_all_tuples().__len__() == 11

    alt2 = client.new_table_alterer(t2)
    alt2.alter_column("extra").default(9)
    alt2.drop_range_partition(0, 100)
    new_name = unique("renamed")
    alt2.rename(new_name)
    t3 = alt2.alter()
    assert t3.name == new_name and client.table_exists(new_name) and not client.table_exists(t.name)
    assert new_name in client.list_tables()
    assert [r[0] for r in t3.scanner().open().read_all_tuples()] == [150]  # [0,100) and its rows are gone
    s.apply(t3.new_insert({"key": 160}))
    s.flush()
    assert {r[0]: r[2] for r in t3.scanner().open().read_all_tuples()} == {150: 5, 160: 9}
    alt3 = client.new_table_alterer(t3)
    alt3.alter_column("extra").remove_default()
    alt3.alter_column("note").comment("a note")
    t4 = alt3.alter()
    assert t4.schema.column("extra").default is None and t4.schema.column("note").comment == "a note"
    s.apply(t4.new_insert({"key": 170}))
    s.flush()
    assert {r[0]: r[2] for r in t4.scanner().open().read_all_tuples()} == {150: 5, 160: 9, 170: None}
    t5 = t4.rename(unique("renamed_again"))
    assert client.table(t5.name).id == t.id


def test_ranges_with_their_own_hash_schema_create_alter_write_and_read(client: kudu.Client) -> None:
    """kudu-python's per-range hash schemas (Kudu 1.17): RangePartition(...).add_hash_partitions(...) at
    create time and through the alterer; rows route to the range's own buckets, scans and point reads
    find them, pruning counts the range's buckets, and dropping the range drops its hash schema too."""
    part = (
        kudu.Partitioning()
        .add_hash_partitions(["key"], 2)
        .set_range_partition_columns(["key"])
        .add_range_partition(0, 100)
        .add_custom_range_partition(kudu.RangePartition(100, 200).add_hash_partitions(["key"], 4, seed=7))
    )
    t = client.create_table(unique("custom_hash"), kv_schema(), part, n_replicas=3)
    assert len(t.scan_token_builder().build()) == 2 + 4
    assert [
        (r.hash_dimensions[0].num_buckets, r.hash_dimensions[0].seed) for r in t.partition_schema.custom_ranges
    ] == [(4, 7)]
    s = client.new_session()
    for k in range(0, 200, 5):
        s.apply(t.new_insert({"key": k, "val": f"v{k}", "n": k}))
    s.flush()
    assert sorted(r[0] for r in t.scanner().open().read_all_tuples()) == list(range(0, 200, 5))
    for k in (5, 150, 195):
        assert t.scanner().add_predicate(t["key"] == k).open().read_all_tuples() == [(k, f"v{k}", k)]
    upper = t.scanner().add_predicate(t["key"] >= 100).open()
    assert scanned_tablets(upper) == 4 and len(upper.read_all_tuples()) == 20
    tablets_of = {tok.tablet().id() for tok in t.scan_token_builder().add_predicate(t["key"] >= 100).build()}
    assert len(tablets_of) == 4  # the rows of [100, 200) are spread over its own 4 buckets

    t2 = (
        client.new_table_alterer(t)
        .add_custom_range_partition(kudu.RangePartition(200, 300).add_hash_partitions(["key"], 3))
        .alter()
    )
    assert len(t2.scan_token_builder().build()) == 2 + 4 + 3
    s.apply(t2.new_insert({"key": 250, "val": "third", "n": 1}))
    s.flush()
    assert t2.scanner().add_predicate(t2["key"] == 250).open().read_all_tuples() == [(250, "third", 1)]
    t3 = client.new_table_alterer(t2).drop_range_partition(100, 200).alter()
    assert [r.hash_dimensions[0].num_buckets for r in t3.partition_schema.custom_ranges] == [3]
    assert len(t3.scan_token_builder().build()) == 2 + 3
    assert sorted(r[0] for r in t3.scanner().open().read_all_tuples()) == [*range(0, 100, 5), 250]
    with pytest.raises(kudu.KuduInvalidArgument, match="needs its hash partitions"):
        client.new_table_alterer(t3).add_custom_range_partition(kudu.RangePartition(300, 400))
    with pytest.raises(kudu.KuduInvalidArgument, match="'val' is not a primary key column"):
        client.new_table_alterer(t3).add_custom_range_partition(
            kudu.RangePartition(300, 400).add_hash_partitions(["val"], 2)
        ).alter()
    with pytest.raises(kudu.KuduInvalidArgument, match="overlap"):
        client.new_table_alterer(t3).add_custom_range_partition(
            kudu.RangePartition(250, 400).add_hash_partitions(["key"], 2)
        ).alter()
    assert len(client.table(t3.name).scan_token_builder().build()) == 2 + 3  # nothing changed


def test_table_alterer_refuses_what_kudu_cannot_alter(client: kudu.Client, range_table: Table) -> None:
    alt = client.new_table_alterer(range_table)
    with pytest.raises(kudu.KuduInvalidArgument, match="type cannot be altered"):
        alt.alter_column("metric").type(kudu.int64)
    with pytest.raises(kudu.KuduInvalidArgument, match="nullability cannot be altered"):
        alt.alter_column("metric").nullable(False)
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'nope' is not in table"):
        alt.alter_column("nope")
    with pytest.raises(kudu.KuduInvalidArgument, match="column 'nope' is not in table"):
        alt.drop_column("nope")
    with pytest.raises(kudu.KuduInvalidArgument, match="nothing to alter"):
        client.new_table_alterer(range_table).alter()
    with pytest.raises(kudu.KuduInvalidArgument, match="no range partition matches"):
        client.new_table_alterer(range_table).drop_range_partition(200, 300).alter()
    with pytest.raises(kudu.KuduInvalidArgument, match="overlaps"):
        client.new_table_alterer(range_table).add_range_partition(150, 250).alter()
    with pytest.raises(kudu.KuduInvalidArgument, match="key"):
        client.new_table_alterer(range_table).drop_column("ts").alter()
    assert client.table(range_table.name).schema == range_table.schema  # nothing changed


def test_a_write_built_on_the_old_schema_after_an_alter(client: kudu.Client) -> None:
    t = range_kv(client, "oldschema")
    stale = client.table(t.name)  # a second handle that will not see the alter
    s = client.new_session()
    s.apply(t.new_insert({"key": 1, "val": "first"}))
    s.flush()
    alt = client.new_table_alterer(t)
    alt.alter_column("val").rename("value")
    alt.add_column("extra", kudu.int32, default=3)
    t2 = alt.alter()
    assert stale.schema.names == ["key", "val", "n"]
    s.apply(stale.new_insert({"key": 2, "val": "old handle"}))  # built for schema version 0
    s.apply(stale.new_update({"key": 1, "n": 11}))
    s.flush()
    assert stale.schema.names == ["key", "value", "n", "extra"]  # the session reloaded it
    rows = {r[0]: r for r in t2.scanner().open().read_all_tuples()}
    assert rows == {1: (1, "first", 11, 3), 2: (2, "old handle", 7, 3)}
    stale2 = client.table(t2.name)
    client.new_table_alterer(t2).drop_column("n").alter()
    s.apply(stale2.new_update({"key": 1, "n": 5}))  # sets a column that is gone
    with pytest.raises(kudu.KuduBadStatus):
        s.flush()
    errors, _ = s.get_pending_errors()
    assert len(errors) == 1 and "column 'n' is no longer in table" in str(errors[0].status)
    s.apply(stale2.new_update({"key": 2, "value": "still fine"}))  # does not touch the dropped column
    s.flush()
    assert {r[0]: r[1] for r in client.table(t2.name).scanner().open().read_all_tuples()}[2] == "still fine"


# --- the async API -------------------------------------------------------------------------------------------


async def test_async_client_every_call(cluster: MiniCluster) -> None:
    async with await kaio.connect(cluster.master_addresses) as client:
        assert isinstance(client, kaio.AsyncClient)
        assert len(await client.list_tablet_servers()) == 3 and len(await client.list_masters()) == 1
        name = unique("async")
        t = await client.create_table(name, kv_schema(), kudu.Partitioning().add_hash_partitions(["key"], 2))
        assert await client.table_exists(name) and await client.list_tables(name) == [name]
        s = client.new_session(flush_mode=kudu.FLUSH_MANUAL)
        assert isinstance(s, kaio.AsyncSession)
        for k in range(20):
            await s.apply(t.new_insert({"key": k, "val": f"a{k}"}))
        await s.flush()
        await s.apply_arrow(t, pa.table({"key": pa.array([20, 21], pa.int64())}), op="insert")
        sc = t.scanner()
        assert isinstance(sc, kaio.AsyncScanner)
        sc.add_predicate(t["key"] >= 10).set_projected_column_names(["key"]).set_batch_size_bytes(32)
        await sc.open()
        assert sorted(r[0] for r in await sc.read_all_tuples()) == list(range(10, 22))
        batches = [b async for b in t.scanner().set_batch_size_bytes(64).xbatches()]
        assert sum(b.num_rows for b in batches) == 22
        assert (await t.scanner().set_limit(4).to_arrow()).num_rows == 4
        assert len(await t.scanner().to_pandas()) == 22
        nb = t.scanner().set_batch_size_bytes(32)
        first = await nb.read_next_batch_tuples()
        assert 0 < len(first) < 22 and nb.has_more_rows()
        assert nb.get_current_server() is not None
        await nb.keep_alive()
        await nb.close()
        assert not nb.has_more_rows()
        tb = t.scan_token_builder()
        assert isinstance(tb, kaio.AsyncScanTokenBuilder)
        tokens = await tb.add_predicate(t["key"] < 5).build()
        got = []
        for tok in tokens:
            tsc = await client.deserialize_token_into_scanner(tok.serialize())
            mine = await (await tok.into_kudu_scanner()).read_all_tuples()
            assert sorted(await tsc.read_all_tuples()) == sorted(mine)
            got += mine
        assert sorted(r[0] for r in got) == list(range(5))
        alt = client.new_table_alterer(t)
        assert isinstance(alt, kaio.AsyncTableAlterer)
        alt.add_column("x", kudu.int8, default=1)
        t2 = await alt.alter()
        assert t2.schema.names[-1] == "x"
        t3 = await t2.rename(unique("async_renamed"))
        assert not await client.table_exists(name) and await client.table_exists(t3.name)
        assert client.latest_observed_timestamp() > 0
        await s.close()
        await t3.drop()
        assert not await client.table_exists(t3.name)
        with pytest.raises(kudu.KuduNotFound):
            await client.table(t3.name)


# --- timeouts --------------------------------------------------------------------------------------------------


def test_writes_scans_and_ddl_time_out_naming_what_they_waited_for(mini_cluster_factory: Any) -> None:
    c = mini_cluster_factory(num_masters=1, num_tservers=1, extra_flags=FAST)
    with kudu.connect(c.master_addresses) as setup:
        name = unique("timeouts")
        setup.create_table(name, kv_schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=1)
    with kudu.connect(c.master_addresses, admin_timeout_ms=1500, rpc_timeout_ms=500) as client:
        t = client.table(name)
        s = client.new_session(timeout_ms=1500)
        # An upsert: with a 500 ms RPC timeout on a loaded machine the first Write can time out after the
        # tablet applied it, and the retry would then find an insert's key present (writes are not yet
        # exactly-once; see the session note).
        s.apply(t.new_upsert({"key": 1}))
        s.flush()  # locations are cached and a leader is known
        c.stop_node(c.tservers[0])

        s.apply(t.new_insert({"key": 2}))
        t0 = time.monotonic()
        with pytest.raises(kudu.KuduBadStatus, match="1 row"):
            s.flush()
        took = time.monotonic() - t0
        assert 1.4 < took < 10.0, took  # upper bounds only prove the call is bounded: machines are shared
        errors, _ = s.get_pending_errors()
        assert len(errors) == 1 and errors[0].was_possibly_successful()
        st = errors[0].status
        assert isinstance(st, kudu.KuduTimedOut)
        assert "write of 1 rows to tablet " in str(st) and "last error" in str(st)
        assert f"of table {t.name} timed out after 1.5s" in str(st)

        sync = client.new_session(flush_mode=kudu.FLUSH_AUTO_SYNC, timeout_ms=800)
        t0 = time.monotonic()
        expected = f"write of 1 rows to tablet .* of table {t.name} timed out after 0.8s"
        with pytest.raises(kudu.KuduTimedOut, match=expected):
            sync.apply(t.new_upsert({"key": 3}))
        assert time.monotonic() - t0 < 10.0

        t0 = time.monotonic()
        with pytest.raises(kudu.KuduTimedOut, match=f"scan of tablet .* of table {t.name} timed out after 1s"):
            t.scanner().set_timeout_millis(1000).open().read_all_tuples()
        assert time.monotonic() - t0 < 10.0

        c.stop_node(c.masters[0])
        t0 = time.monotonic()
        with pytest.raises(kudu.KuduTimedOut, match=r"ListTables timed out after 1\.5s"):
            client.list_tables()
        assert time.monotonic() - t0 < 10.0


def test_scanning_a_deleted_table_fails_at_once(client: kudu.Client) -> None:
    t = create_kv(client, buckets=2)
    s = client.new_session()
    s.apply(t.new_insert({"key": 1}))
    s.flush()
    assert len(t.scanner().open().read_all_tuples()) == 1  # locations cached
    client.delete_table(t.name)
    # DeleteTable answers before the tservers drop the tablets (as in Kudu), so a scan with cached
    # locations may still read for a moment; once they are gone, a scan must fail at once (not retry
    # until its 30 s deadline).
    give_up = time.monotonic() + 20.0
    while True:
        t0 = time.monotonic()
        try:
            t.scanner().open().read_all_tuples()
        except kudu.KuduNotFound as e:
            assert "not found" in str(e)
            assert time.monotonic() - t0 < 10.0
            break
        assert time.monotonic() < give_up, "the deleted table's tablets were still scannable after 20 s"
        time.sleep(0.2)
    s.apply(t.new_insert({"key": 2}))
    with pytest.raises(kudu.KuduBadStatus):
        s.flush()
    assert isinstance(s.get_pending_errors()[0][0].status, kudu.KuduNotFound)


# --- scanner expiry and keep-alive (a cluster whose tservers expire idle scanners after 0.5 s) ----------------


def test_expired_scanners_resume_when_fault_tolerant_and_keep_alive_keeps_them(mini_cluster_factory: Any) -> None:
    c = mini_cluster_factory(
        num_masters=1, num_tservers=3, extra_flags=FAST, tserver_flags=["--scanner-ttl-ms", "2000"]
    )
    with kudu.connect(c.master_addresses) as client:
        t = client.create_table(
            unique("expiry"), kv_schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        s = client.new_session()
        for k in range(2000):
            s.apply(t.new_insert({"key": k, "val": "x" * 50}))
        s.flush()

        def expired(addr: str) -> int:
            return int(c.http_json(node_at(c, addr), "/api/v1/scans")["expired"])

        def open_one(**kw: Any) -> tuple[Scanner, list[int], str]:
            sc = t.scanner().set_batch_size_bytes(1024)
            if kw.get("fault_tolerant"):
                sc.set_fault_tolerant()
            first = sc.open().next_batch_arrow().column("key").to_pylist()
            server = sc.get_current_server()
            assert server is not None and sc.has_more_rows()
            return sc, first, server

        def rest(sc: Scanner) -> list[int]:
            out: list[int] = []
            while sc.has_more_rows():
                out += sc.next_batch_arrow().column("key").to_pylist()
            return out

        ft, ft_rows, ft_server = open_one(fault_tolerant=True)
        plain, _, plain_server = open_one()
        kept, kept_rows, kept_server = open_one()
        before = {a: expired(a) for a in {ft_server, plain_server, kept_server}}

        def both_expired() -> bool:
            kept.keep_alive()
            # each server's counter grows by the scanners that expired there; ft and plain must both be gone
            grown = {a: expired(a) - n for a, n in before.items()}
            need: dict[str, int] = {}
            for a in (ft_server, plain_server):
                need[a] = need.get(a, 0) + 1
            return all(grown[a] >= n for a, n in need.items())

        # TTL 2 s, keep-alive every 0.1 s: room for a loaded machine between two keep-alives
        wait_for(both_expired, 30.0, "the two idle scanners to expire", every_s=0.1)
        kept_all = kept_rows + rest(kept)  # kept alive the whole time (read first: reading is not idling)
        assert sorted(kept_all) == list(range(2000)) and len(kept_all) == 2000
        all_rows = ft_rows + rest(ft)  # resumed after its last key: nothing twice, nothing missed
        assert sorted(all_rows) == list(range(2000)) and len(all_rows) == 2000
        with pytest.raises(kudu.KuduBadStatus, match="use set_fault_tolerant"):
            rest(plain)


def node_at(cluster: MiniCluster, rpc_address: str) -> Any:
    return next(n for n in cluster.nodes if n.rpc_address == rpc_address)
