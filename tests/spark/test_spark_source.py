"""The ``kudu`` PySpark data source against a real cluster: types, pushdown seen by the tablets, every
write operation, the streaming sink, clear errors, and a fault-tolerant read through a tserver kill."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration
pyspark = pytest.importorskip("pyspark")
from pyspark.errors import AnalysisException  # noqa: E402
from pyspark.sql import types as st  # noqa: E402

try:
    from pyspark.errors import PySparkException
except ImportError:  # pragma: no cover
    PySparkException = Exception  # type: ignore[misc,assignment]

SPARK_ERRORS = (PySparkException, AnalysisException, Exception)


def _client(c: MiniCluster) -> kudu.Client:
    return kudu.connect(c.master_addresses.split(","))


def _read(spark: Any, c: MiniCluster, table: str, **opts: str) -> Any:
    r = spark.read.format("kudu").option("kudu.master", c.master_addresses).option("kudu.table", table)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _write(df: Any, c: MiniCluster, table: str, op: str, **opts: str) -> None:
    w = df.write.format("kudu").option("kudu.master", c.master_addresses).option("kudu.table", table)
    w = w.option("kudu.operation", op)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def test_every_type_round_trips(spark: Any, spark_cluster: MiniCluster) -> None:
    with _client(spark_cluster) as client:
        b = kudu.schema_builder()
        b.add_column("id", kudu.int64, nullable=False).primary_key()
        for name, typ in (
            ("i8", kudu.int8),
            ("i16", kudu.int16),
            ("i32", kudu.int32),
            ("f", kudu.float_),
            ("d", kudu.double),
            ("b", kudu.bool_),
            ("s", kudu.string),
            ("bin", kudu.binary),
            ("ts", kudu.unixtime_micros),
            ("day", kudu.date),
        ):
            b.add_column(name, typ)
        b.add_column("dec", kudu.decimal, precision=12, scale=3)
        b.add_column("vc", kudu.varchar, length=10)
        client.create_table("types", b.build(), kudu.Partitioning().add_hash_partitions(["id"], 2), n_replicas=3)
    schema = _read(spark, spark_cluster, "types").schema
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields] == [
        ("id", "bigint", False),
        ("i8", "tinyint", True),
        ("i16", "smallint", True),
        ("i32", "int", True),
        ("f", "float", True),
        ("d", "double", True),
        ("b", "boolean", True),
        ("s", "string", True),
        ("bin", "binary", True),
        ("ts", "timestamp", True),
        ("day", "date", True),
        ("dec", "decimal(12,3)", True),
        ("vc", "string", True),
    ]
    ts = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    rows = [
        (
            1,
            -5,
            300,
            70000,
            1.5,
            2.25,
            True,
            "héllo",
            b"\x00\xff",
            ts,
            dt.date(2024, 2, 29),
            Decimal("123456789.125"),
            "short",
        ),
        (2, None, None, None, None, None, None, None, None, None, None, None, None),
    ]
    df = spark.createDataFrame(rows, schema)
    _write(df, spark_cluster, "types", "insert")
    back = sorted(_read(spark, spark_cluster, "types").collect(), key=lambda r: r.id)
    assert [tuple(r) for r in back] == [tuple(r) for r in sorted(rows)]


def test_array_columns_round_trip_as_spark_arrays(spark: Any, spark_cluster: MiniCluster) -> None:
    with _client(spark_cluster) as client:
        b = kudu.schema_builder()
        b.add_column("id", kudu.int64, nullable=False).primary_key()
        b.add_column("ints").nested_type(kudu.array_type(kudu.int32))
        b.add_column("tags").nested_type(kudu.array_type(kudu.string))
        b.add_column("days").nested_type(kudu.array_type(kudu.date))
        client.create_table("arrays", b.build(), kudu.Partitioning().add_hash_partitions(["id"], 2), n_replicas=3)
    schema = _read(spark, spark_cluster, "arrays").schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("id", "bigint"),
        ("ints", "array<int>"),
        ("tags", "array<string>"),
        ("days", "array<date>"),
    ]
    rows = [
        (1, [1, None, 3], ["a", "b"], [dt.date(2024, 2, 29)]),
        (2, [], None, [None]),
        (3, None, [None], None),
    ]
    _write(spark.createDataFrame(rows, schema), spark_cluster, "arrays", "insert")
    back = sorted(_read(spark, spark_cluster, "arrays").collect(), key=lambda r: r.id)
    assert [tuple(r) for r in back] == rows
    # schema drift adds an ArrayType field the table lacks as a nullable array column (kudu_column(), the
    # mapping kudu.createTable uses too)
    drifted = spark.createDataFrame(
        [(2, [0.5, None])],
        st.StructType(
            [st.StructField("id", st.LongType(), False), st.StructField("more", st.ArrayType(st.DoubleType()))]
        ),
    )
    _write(drifted, spark_cluster, "arrays", "upsert", **{"kudu.handleSchemaDrift": "true"})
    with _client(spark_cluster) as client:
        table = client.table("arrays")
        assert table.schema["more"].type_to_string() == "DOUBLE 1D-ARRAY NULLABLE"
        sc = table.scanner().set_projected_column_names(["id", "more"])
        assert sorted(sc.open().read_all_tuples()) == [(1, None), (2, [0.5, None]), (3, None)]


def _scans_seen(c: MiniCluster) -> list[dict[str, Any]]:
    out = []
    for n in c.tservers:
        with urllib.request.urlopen(f"{n.http_url}/api/v1/scans", timeout=5) as resp:
            out += json.loads(resp.read())["recent"]
    return out


def test_filters_are_pushed_to_the_tablets(spark: Any, spark_cluster: MiniCluster) -> None:
    df = spark.range(0, 5000).selectExpr("id as key", "cast(id % 10 as int) as grp", "concat('v', id) as val")
    _write(
        df,
        spark_cluster,
        "push",
        "upsert",
        **{"kudu.createTable": "true", "kudu.primaryKey": "key", "kudu.hashBuckets": "3"},
    )
    got = _read(spark, spark_cluster, "push").filter("key >= 4990 and grp in (1, 3) and val is not null").collect()
    assert sorted(r.key for r in got) == [4991, 4993]
    preds = [p for s in _scans_seen(spark_cluster) for p in s.get("predicates", [])]
    assert "key >= 4990" in preds, preds
    assert "grp IN [1, 3]" in preds, preds
    # Not pushable (OR, <>): Spark still filters, the answer stays exact.
    got = _read(spark, spark_cluster, "push").filter("(key < 3 or key > 4997) and grp <> 0").collect()
    assert sorted(r.key for r in got) == [1, 2, 4998, 4999]
    like = _read(spark, spark_cluster, "push").filter("val like 'v499%'").count()
    assert like == 11  # v499 and v4990..v4999


def test_each_write_operation_and_row_errors(spark: Any, spark_cluster: MiniCluster) -> None:
    base = spark.createDataFrame([(i, f"a{i}") for i in range(10)], "key long, val string")
    _write(base, spark_cluster, "ops", "insert", **{"kudu.createTable": "true", "kudu.primaryKey": "key"})

    def content() -> dict[int, str]:
        return {r.key: r.val for r in _read(spark, spark_cluster, "ops").collect()}

    assert content() == {i: f"a{i}" for i in range(10)}
    dup = spark.createDataFrame([(3, "x"), (20, "new")], "key long, val string")
    with pytest.raises(SPARK_ERRORS, match="ALREADY_PRESENT") as ei:
        _write(dup, spark_cluster, "ops", "insert")
    assert "'key': 3" in str(ei.value)  # the failing row is named
    _write(dup, spark_cluster, "ops", "insert_ignore")
    assert content()[3] == "a3" and content()[20] == "new"
    _write(spark.createDataFrame([(3, "u3"), (30, "u30")], "key long, val string"), spark_cluster, "ops", "upsert")
    _write(spark.createDataFrame([(4, "up4")], "key long, val string"), spark_cluster, "ops", "update")
    with pytest.raises(SPARK_ERRORS, match="NOT_FOUND"):
        _write(spark.createDataFrame([(999, "zz")], "key long, val string"), spark_cluster, "ops", "update")
    _write(spark.createDataFrame([(5,), (6,)], "key long"), spark_cluster, "ops", "delete")
    _write(spark.createDataFrame([(5,), (777,)], "key long"), spark_cluster, "ops", "delete_ignore")
    final = content()
    assert final[3] == "u3" and final[30] == "u30" and final[4] == "up4"
    assert 5 not in final and 6 not in final and len(final) == 10 - 2 + 2


def test_a_non_unique_primary_key_table_reads_and_writes_its_ids(spark: Any, spark_cluster: MiniCluster) -> None:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).non_unique_primary_key()
    b.add_column("val", kudu.string)
    parts = kudu.Partitioning().add_hash_partitions(["key"], 2)
    with _client(spark_cluster) as client:
        client.create_table("non_unique", b.build(), parts)
    # Inserts leave the id out: the tablets assign it, so the same key makes two rows.
    df = spark.createDataFrame([(1, "a"), (1, "b"), (2, "c")], "key long, val string")
    _write(df, spark_cluster, "non_unique", "insert")
    read = _read(spark, spark_cluster, "non_unique")
    assert read.columns == ["key", "auto_incrementing_id", "val"]
    rows = sorted((r.key, r.val, r.auto_incrementing_id) for r in read.collect())
    assert [(k, v) for k, v, _ in rows] == [(1, "a"), (1, "b"), (2, "c")]
    assert len({(k, i) for k, _, i in rows}) == 3
    # A delete names a row by its full key, the id included.
    (gone,) = [(k, i) for k, v, i in rows if v == "a"]
    _write(spark.createDataFrame([gone], "key long, auto_incrementing_id long"), spark_cluster, "non_unique", "delete")
    assert sorted(r.val for r in _read(spark, spark_cluster, "non_unique").collect()) == ["b", "c"]


def test_task_writer_overlaps_chunks_and_fails_on_a_later_chunk(
    spark_cluster: MiniCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's writer sends one chunk while it gathers the next: every row of many chunks lands, and a bad
    row in a later chunk fails the task naming it, with the earlier chunks written."""
    import pyarrow as pa

    from kudu_async.spark import source

    monkeypatch.setattr(source, "WRITE_FLUSH_ROWS", 25)
    c = _client(spark_cluster)
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("val", type_=kudu.string)
    c.create_table("chunks", b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3)
    opts = {"kudu.master": spark_cluster.master_addresses, "kudu.table": "chunks"}

    def batches(lo: int, hi: int) -> list[pa.RecordBatch]:
        return [
            pa.RecordBatch.from_pydict(
                {"key": list(range(i, min(i + 10, hi))), "val": [f"v{k}" for k in range(i, min(i + 10, hi))]}
            )
            for i in range(lo, hi, 10)
        ]

    try:
        msg = source._write_batches(opts, "insert", iter(batches(0, 300)))
        assert msg.rows == 300
        got = c.table("chunks").scanner().open().read_all_tuples()
        assert sorted(got) == [(k, f"v{k}") for k in range(300)]
        # Keys 300..399, then a duplicate of key 5 in the last chunk.
        bad = [*batches(300, 400), pa.RecordBatch.from_pydict({"key": [5], "val": ["dup"]})]
        with pytest.raises(kudu.KuduBadStatus, match=r"ALREADY_PRESENT.*'key': 5"):
            source._write_batches(opts, "insert", iter(bad))
        assert len(c.table("chunks").scanner().open().read_all_tuples()) == 400
        # A call refused whole (no row error): its reason is in the task's own message, not only in a
        # chained cause, which PySpark's rendering of a worker's traceback leaves out.
        wrong = [pa.RecordBatch.from_pydict({"key": [1000], "val": [1.5]})]
        with pytest.raises(kudu.KuduBadStatus, match=r"insert into chunks failed: column 'val': expected string"):
            source._write_batches(opts, "insert", iter(wrong))
    finally:
        c.close()
        source._close_clients()  # the writer's per-process client, which a Spark worker keeps until exit


def test_clear_errors(spark: Any, spark_cluster: MiniCluster) -> None:
    with pytest.raises(SPARK_ERRORS, match="does not exist"):
        _read(spark, spark_cluster, "no_such_table").collect()
    with pytest.raises(SPARK_ERRORS, match="master address 'a:b:c:x' must be 'host:port'"):
        spark.read.format("kudu").option("kudu.master", "a:b:c:x").option("kudu.table", "x").load().collect()
    t0 = time.monotonic()
    with pytest.raises(SPARK_ERRORS, match=r"TIMED_OUT.*127\.0\.0\.1:1: NETWORK_ERROR"):
        (
            spark.read.format("kudu")
            .option("kudu.master", "127.0.0.1:1")
            .option("kudu.table", "x")
            .option("kudu.operationTimeoutMs", "1500")
            .load()
            .collect()
        )
    assert time.monotonic() - t0 < 60
    good = spark.createDataFrame([(1, "x")], "key long, val string")
    _write(good, spark_cluster, "errs", "upsert", **{"kudu.createTable": "true", "kudu.primaryKey": "key"})
    bad = spark.createDataFrame([(1, "x", 2)], "key long, val string, nope int")
    with pytest.raises(SPARK_ERRORS, match="'nope' is not a column"):
        _write(bad, spark_cluster, "errs", "upsert")
    with pytest.raises(SPARK_ERRORS, match="only appends"):
        (
            bad.write.format("kudu")
            .option("kudu.master", spark_cluster.master_addresses)
            .option("kudu.table", "errs")
            .mode("overwrite")
            .save()
        )


def test_streaming_sink_upserts_and_replays_without_duplicates(
    spark: Any, spark_cluster: MiniCluster, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    for part in range(3):
        (src / f"part{part}.json").write_text(
            "\n".join(json.dumps({"key": part * 100 + i, "val": f"s{part}-{i}"}) for i in range(100))
        )
    schema = st.StructType([st.StructField("key", st.LongType()), st.StructField("val", st.StringType())])

    def run(checkpoint: Path) -> None:
        q = (
            spark.readStream.schema(schema)
            .json(str(src))
            .writeStream.format("kudu")
            .option("kudu.master", spark_cluster.master_addresses)
            .option("kudu.table", "stream")
            .option("kudu.createTable", "true")
            .option("kudu.primaryKey", "key")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None

    run(tmp_path / "ck1")
    assert _read(spark, spark_cluster, "stream").count() == 300
    run(tmp_path / "ck2")  # a replay of every micro-batch from scratch
    rows = _read(spark, spark_cluster, "stream").collect()
    assert len(rows) == 300 and len({r.key for r in rows}) == 300


def test_fault_tolerant_read_through_a_tserver_kill(spark: Any, spark_cluster: MiniCluster) -> None:
    """Runs last in the module: it kills a tserver of the shared cluster."""
    n = 40_000
    df = spark.range(0, n).selectExpr("id as key", "id * 2 as v")
    _write(
        df,
        spark_cluster,
        "ft",
        "upsert",
        **{"kudu.createTable": "true", "kudu.primaryKey": "key", "kudu.hashBuckets": "3"},
    )
    killed_at: list[float] = []
    victims: list[str] = []

    def kill() -> None:
        # Kill the first tserver seen serving one of the scans (bounded wait), so the kill lands mid-scan.
        deadline = time.monotonic() + 30
        victim = spark_cluster.tservers[1]
        while time.monotonic() < deadline and not victims:
            for node in spark_cluster.tservers:
                with urllib.request.urlopen(f"{node.http_url}/api/v1/scans", timeout=5) as resp:
                    if json.loads(resp.read())["scanners"]:
                        victim = node
                        victims.append(node.name)
                        break
        spark_cluster.kill_node(victim)
        killed_at.append(time.monotonic())

    t = threading.Thread(target=kill)
    start = time.monotonic()
    t.start()
    rows = _read(spark, spark_cluster, "ft", **{"kudu.faultTolerantScan": "true", "kudu.batchSize": "4096"}).collect()
    done = time.monotonic()
    t.join()
    keys = sorted(r.key for r in rows)
    assert keys == list(range(n)), f"{len(keys)} rows, {len(set(keys))} distinct"
    assert all(r.v == 2 * r.key for r in rows)
    print(f"read took {done - start:.2f}s; tserver {victims} killed {killed_at[0] - start:.2f}s after it started")


def test_a_worker_freezes_its_long_lived_heap_once_and_only_in_a_pyspark_worker() -> None:
    """PySpark's daemon collects every reused worker's whole heap after each task; the source freezes the
    long-lived objects once, so that collection skips them. In a process not forked by the daemon nothing
    is frozen. In a child interpreter: freezing is for the life of a process."""
    code = textwrap.dedent("""
        import gc, sys
        from kudu_async.spark import source

        source._settle_worker_heap()
        assert gc.get_freeze_count() == 0, "froze outside a PySpark worker"
        sys.orig_argv = [sys.executable, "-m", "pyspark.daemon", "pyspark.worker"]
        source._settle_worker_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000, frozen  # the modules and classes loaded so far
        keep = [[i] for i in range(1000)]
        source._settle_worker_heap()
        assert gc.get_freeze_count() == frozen, "froze again"
        print("ok", frozen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]


def test_the_local_session_talks_to_its_python_workers_over_unix_sockets(spark: Any) -> None:
    """Over loopback TCP each Python task's input arrived ~40 ms late (an empty Python source's task: 57 ms
    over TCP, 21 ms over Unix sockets); the session helper turns the sockets on."""
    from kudu_async.spark.source import UNIX_SOCKETS

    assert spark.conf.get(UNIX_SOCKETS) == "true"
    assert spark.sparkContext.parallelize(range(4), 4).map(lambda x: x * 2).sum() == 12  # workers answer
