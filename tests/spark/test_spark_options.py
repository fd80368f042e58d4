"""kudu-spark's options on the ``kudu`` source and its ``KuduContext``: each option's effect where a
reader can see it, the errors for unknown and unavailable options, and a KuduContext round trip."""

from __future__ import annotations

import time
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import types as st  # noqa: E402

from kudu_async.spark import (  # noqa: E402
    OPTIONS,
    CreateTableOptions,
    KuduContext,
    KuduReadOptions,
    KuduWriteOptions,
    source,
)

SPARK_ERRORS = (Exception,)  # PySpark wraps a source's error in its own exception types
KUDU_SPARK_NAMES = (
    "kudu.master",
    "kudu.table",
    "kudu.operation",
    "kudu.faultTolerantScan",
    "kudu.scanLocality",
    "kudu.ignoreNull",
    "kudu.ignoreDuplicateRowErrors",
    "kudu.repartition",
    "kudu.repartition.sort",
    "kudu.scanRequestTimeoutMs",
    "kudu.socketReadTimeoutMs",
    "kudu.batchSize",
    "kudu.keepAlivePeriodMs",
    "kudu.splitSizeBytes",
    "kudu.handleSchemaDrift",
    "kudu.useDriverMetadata",
    "kudu.snapshotTimestampMs",
    "kudu.saslProtocolName",
    "kudu.requireAuthentication",
    "kudu.encryptionPolicy",
)


# --- options without a cluster ----------------------------------------------------------------------


def test_every_kudu_spark_option_name_is_known() -> None:
    assert set(KUDU_SPARK_NAMES) <= set(OPTIONS)


def test_an_unknown_kudu_option_is_an_error_naming_it_and_the_known_ones() -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=r"unknown option kudu\.ignorenulls;.*kudu\.ignoreNull"):
        source.check_options({"kudu.master": "h:1", "kudu.ignorenulls": "true"})
    source.check_options({"kudu.master": "h:1", "kudu.ignorenull": "true", "path": "x"})  # case-insensitive
    with pytest.raises(kudu.KuduInvalidArgument, match=r"kudu\.batchSize must be an integer"):
        source.check_options({"kudu.batchsize": "big"})
    with pytest.raises(kudu.KuduInvalidArgument, match=r"kudu\.ignoreNull must be true or false"):
        source.check_options({"kudu.ignorenull": "maybe"})


@pytest.mark.parametrize(
    ("opts", "refused"),
    [
        ({"kudu.saslProtocolName": "other"}, "sasl_protocol_name"),
    ],
)
def test_security_options_asking_for_more_than_the_cluster_gives_are_refused(
    opts: dict[str, str], refused: str
) -> None:
    with pytest.raises(kudu.KuduNotSupported, match=f"kudu source security options: .*{refused}"):
        source.check_options(opts)


def test_authentication_options() -> None:
    with pytest.raises(kudu.KuduNotAuthorized, match=r"kudu\.requireAuthentication needs credentials"):
        source.check_options({"kudu.requireAuthentication": "true"})
    source.check_options({"kudu.requireAuthentication": "true", "kudu.jwt": "header.payload.sig"})


def test_security_options_at_their_defaults_are_accepted() -> None:
    source.check_options(
        {"kudu.requireAuthentication": "false", "kudu.encryptionPolicy": "optional", "kudu.saslProtocolName": "kudu"}
    )


def test_every_kudu_encryption_policy_is_accepted_and_others_refused() -> None:
    for policy in ("required", "REQUIRED_REMOTE", "optional"):
        source.check_options({"kudu.encryptionPolicy": policy})
    with pytest.raises(kudu.KuduInvalidArgument, match="encryption_policy must be one of"):
        source.check_options({"kudu.encryptionPolicy": "sometimes"})


def test_operation_spellings_and_ignore_duplicate_rows() -> None:
    assert source._operation({"kudu.operation": "insert-ignore"}, "upsert") == "insert_ignore"
    assert source._operation({"kudu.operation": "DELETE-IGNORE"}, "upsert") == "delete_ignore"
    assert source._operation({"kudu.operation": "insert", "kudu.ignoreDuplicateRowErrors": "true"}, "u") == (
        "insert_ignore"
    )
    assert source._operation({"kudu.operation": "upsert", "kudu.ignoreduplicaterowerrors": "true"}, "u") == "upsert"


def test_write_and_read_options_objects_map_to_the_source_options() -> None:
    wo = KuduWriteOptions(ignoreNull=True, handleSchemaDrift=True)
    assert wo.to_options() == {
        "kudu.ignoreDuplicateRowErrors": "false",
        "kudu.ignoreNull": "true",
        "kudu.handleSchemaDrift": "true",
    }
    ro = KuduReadOptions(scanLocality="leader_only", snapshotTimestampMs=5, faultTolerantScanner=True)
    opts = ro.to_options()
    assert opts["kudu.scanLocality"] == "leader_only" and opts["kudu.snapshotTimestampMs"] == "5"
    assert opts["kudu.faultTolerantScan"] == "true" and "kudu.splitSizeBytes" not in opts
    for k in {**opts, **wo.to_options()}:
        assert k in OPTIONS


# --- on a cluster -----------------------------------------------------------------------------------


def _read(spark: Any, c: MiniCluster, table: str, **opts: str) -> Any:
    r = spark.read.format("kudu").option("kudu.master", c.master_addresses).option("kudu.table", table)
    return r.options(**opts).load()


def _write(df: Any, c: MiniCluster, table: str, op: str, **opts: str) -> None:
    w = df.write.format("kudu").option("kudu.master", c.master_addresses).option("kudu.table", table)
    w.option("kudu.operation", op).options(**opts).mode("append").save()


def _rows(spark: Any, c: MiniCluster, table: str, **opts: str) -> dict[int, tuple[Any, ...]]:
    return {r[0]: tuple(r[1:]) for r in _read(spark, c, table, **opts).collect()}


def _create(c: MiniCluster, name: str) -> None:
    with kudu.connect(c.master_addresses.split(",")) as client:
        b = kudu.schema_builder()
        b.add_column("key", kudu.int64, nullable=False).primary_key()
        b.add_column("a", kudu.string)
        b.add_column("b", kudu.int32)
        client.create_table(name, b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3)


SCHEMA = "key long, a string, b int"


def test_unknown_and_unavailable_options_fail_reads_and_writes(spark: Any, spark_cluster: MiniCluster) -> None:
    _create(spark_cluster, "opt_errors")
    with pytest.raises(SPARK_ERRORS, match=r"unknown option kudu\.scanlocalty"):
        _read(spark, spark_cluster, "opt_errors", **{"kudu.scanLocalty": "leader_only"}).collect()
    df = spark.createDataFrame([(1, "x", 1)], SCHEMA)
    with pytest.raises(SPARK_ERRORS, match=r"unknown option kudu\.ignorenul"):
        _write(df, spark_cluster, "opt_errors", "upsert", **{"kudu.ignoreNul": "true"})
    with pytest.raises(SPARK_ERRORS, match=r"kudu\.requireAuthentication needs credentials"):
        _write(df, spark_cluster, "opt_errors", "upsert", **{"kudu.requireAuthentication": "true"})
    with pytest.raises(SPARK_ERRORS, match=r"kudu\.repartition needs the whole DataFrame.*KuduContext"):
        _write(df, spark_cluster, "opt_errors", "upsert", **{"kudu.repartition": "true"})
    with pytest.raises(SPARK_ERRORS, match=r"kudu\.scanLocality must be closest_replica or leader_only"):
        _read(spark, spark_cluster, "opt_errors", **{"kudu.scanLocality": "nearest"}).collect()
    assert _rows(spark, spark_cluster, "opt_errors") == {}  # no refused write wrote anything


def test_split_size_bytes_reads_a_tablet_as_several_partitions(spark: Any, spark_cluster: MiniCluster) -> None:
    _create(spark_cluster, "opt_split")
    rows = [(k, f"a{k}", k) for k in range(20_000)]
    _write(spark.createDataFrame(rows, SCHEMA), spark_cluster, "opt_split", "insert")
    whole = _read(spark, spark_cluster, "opt_split")
    split = _read(spark, spark_cluster, "opt_split", **{"kudu.splitSizeBytes": "65536"})
    assert whole.rdd.getNumPartitions() == 2 and split.rdd.getNumPartitions() > 2
    assert sorted(tuple(r) for r in split.collect()) == rows  # every row exactly once


def test_write_options_ignore_null_duplicates_and_schema_drift(spark: Any, spark_cluster: MiniCluster) -> None:
    _create(spark_cluster, "opt_writes")
    _write(spark.createDataFrame([(1, "a1", 10), (2, "a2", 20)], SCHEMA), spark_cluster, "opt_writes", "insert")
    nulls = spark.createDataFrame([(1, None, 11), (2, "b2", None)], SCHEMA)
    _write(nulls, spark_cluster, "opt_writes", "upsert", **{"kudu.ignoreNull": "true"})
    assert _rows(spark, spark_cluster, "opt_writes") == {1: ("a1", 11), 2: ("b2", 20)}
    _write(nulls, spark_cluster, "opt_writes", "update", **{"kudu.ignoreNull": "false"})
    assert _rows(spark, spark_cluster, "opt_writes") == {1: (None, 11), 2: ("b2", None)}

    dup = spark.createDataFrame([(1, "dup", 0), (3, "a3", 30)], SCHEMA)
    with pytest.raises(SPARK_ERRORS, match="ALREADY_PRESENT"):
        _write(dup, spark_cluster, "opt_writes", "insert")
    _write(dup, spark_cluster, "opt_writes", "insert", **{"kudu.ignoreDuplicateRowErrors": "true"})
    assert _rows(spark, spark_cluster, "opt_writes")[1] == (None, 11)
    assert _rows(spark, spark_cluster, "opt_writes")[3] == ("a3", 30)

    drift = spark.createDataFrame([(4, "a4", 40, 1.5)], SCHEMA + ", c double")
    with pytest.raises(SPARK_ERRORS, match="'c' is not a column"):
        _write(drift, spark_cluster, "opt_writes", "upsert")
    _write(drift, spark_cluster, "opt_writes", "upsert", **{"kudu.handleSchemaDrift": "true"})
    rows = _rows(spark, spark_cluster, "opt_writes")
    assert rows[4] == ("a4", 40, 1.5) and rows[1] == (None, 11, None)


def test_read_options_snapshot_locality_timeouts_and_metadata(spark: Any, spark_cluster: MiniCluster) -> None:
    _create(spark_cluster, "opt_reads")
    _write(spark.createDataFrame([(i, f"v{i}", i) for i in range(5)], SCHEMA), spark_cluster, "opt_reads", "insert")
    time.sleep(0.05)
    snap_ms = int(time.time() * 1000)
    time.sleep(0.05)
    more = spark.createDataFrame([(i, f"v{i}", i) for i in range(5, 9)], SCHEMA)
    _write(more, spark_cluster, "opt_reads", "insert")
    assert len(_rows(spark, spark_cluster, "opt_reads")) == 9
    then = _rows(spark, spark_cluster, "opt_reads", **{"kudu.snapshotTimestampMs": str(snap_ms)})
    assert sorted(then) == list(range(5))
    every = {
        "kudu.scanLocality": "leader_only",
        "kudu.scanRequestTimeoutMs": "20000",
        "kudu.keepAlivePeriodMs": "1000",
        "kudu.useDriverMetadata": "false",
        "kudu.socketReadTimeoutMs": "5000",
        "kudu.batchSize": "1024",
        "kudu.faultTolerantScan": "true",
    }
    assert sorted(_rows(spark, spark_cluster, "opt_reads", **every)) == list(range(9))
    # A table altered after planning: without driver metadata the task reads the table as it is now.
    with kudu.connect(spark_cluster.master_addresses.split(",")) as client:
        reader = source.KuduReader(
            {
                "kudu.master": spark_cluster.master_addresses,
                "kudu.table": "opt_reads",
                "kudu.useDriverMetadata": "false",
            },
            st.StructType([st.StructField("key", st.LongType(), False)]),
            client.table("opt_reads").schema,
        )
        parts = reader.partitions()
        alterer = client.new_table_alterer(client.table("opt_reads"))
        alterer.rename("opt_reads_renamed")
        alterer.alter()
        with pytest.raises(kudu.KuduNotFound):
            list(reader.read(parts[0]))  # looked up by the name the driver planned with: gone
    source._close_clients()


def test_a_scanner_waiting_on_spark_is_kept_alive(spark_cluster: MiniCluster) -> None:
    _create(spark_cluster, "opt_keepalive")
    with kudu.connect(spark_cluster.master_addresses.split(",")) as client:
        t = client.table("opt_keepalive")
        s = client.new_session()
        s.apply_arrow(t, __import__("pyarrow").table({"key": list(range(2000)), "a": ["x" * 50] * 2000}), "insert")
        sc = t.scanner().set_batch_size_bytes(1024)
        with source._KeepAlive(sc, 0.1) as ka:
            batches = sc.xbatches_arrow()
            next(batches)
            time.sleep(0.35)  # not waiting on Spark: nothing sent
            assert ka.sent == 0
            with ka.waiting():
                time.sleep(0.55)
            sent = ka.sent
            assert sent >= 3
            assert sum(b.num_rows for b in batches) > 0  # the scanner is still there
        sc.close()


def test_kudu_context_round_trip(spark: Any, spark_cluster: MiniCluster) -> None:
    kc = KuduContext(spark_cluster.master_addresses, spark)
    schema = st.StructType(
        [
            st.StructField("id", st.LongType(), False),
            st.StructField("name", st.StringType()),
            st.StructField("score", st.DecimalType(10, 2)),
        ]
    )
    assert not kc.tableExists("kc")
    kc.createTable("kc", schema, ["id"], CreateTableOptions().setNumReplicas(3).addHashPartitions(["id"], 3))
    assert kc.tableExists("kc")
    assert kc.syncClient.table("kc").schema.primary_keys() == ["id"]
    from decimal import Decimal

    df = spark.createDataFrame([(i, f"n{i}", Decimal(i)) for i in range(100)], schema)
    kc.insertRows(df, "kc")
    with pytest.raises(SPARK_ERRORS, match="ALREADY_PRESENT"):
        kc.insertRows(df.limit(3), "kc")
    kc.insertIgnoreRows(df.limit(3), "kc")
    kc.insertRows(df.limit(3), "kc", KuduWriteOptions(ignoreDuplicateRowErrors=True))
    upd = spark.createDataFrame([(i, None, Decimal("0.5")) for i in range(0, 100, 10)], schema)
    kc.updateRows(upd, "kc", KuduWriteOptions(ignoreNull=True))
    ups = spark.createDataFrame([(i, f"u{i}", None) for i in range(90, 110)], schema)
    kc.upsertRows(ups, "kc", KuduWriteOptions(repartition=True, ignoreNull=True))
    kc.deleteRows(spark.createDataFrame([(1,), (2,)], "id long"), "kc")
    with pytest.raises(SPARK_ERRORS, match="NOT_FOUND"):
        kc.deleteRows(spark.createDataFrame([(1,)], "id long"), "kc")
    kc.deleteIgnoreRows(spark.createDataFrame([(1,), (3,)], "id long"), "kc")
    got = {r.id: (r.name, r.score) for r in kc.kuduRDD(spark.sparkContext, "kc").collect()}
    assert len(got) == 110 - 3
    assert got[10] == ("n10", Decimal("0.50")) and got[11] == ("n11", Decimal("11.00"))
    assert got[90] == ("u90", Decimal("0.50")) and got[105] == ("u105", None)
    proj = kc.kuduRDD(None, "kc", ["name"], KuduReadOptions(scanLocality="leader_only"))
    assert proj.columns == ["name"] and proj.count() == 107
    kc.deleteTable("kc")
    assert not kc.tableExists("kc")
    # Encryption required: TLS to a cluster that offers it (optional, the default) works the same.
    assert not KuduContext(spark_cluster.master_addresses, spark, encryptionPolicy="required").tableExists("kc")


def test_kudu_context_repartition_gives_one_sorted_partition_per_tablet(spark: Any, spark_cluster: MiniCluster) -> None:
    kc = KuduContext(spark_cluster.master_addresses, spark)
    schema = st.StructType([st.StructField("id", st.LongType(), False), st.StructField("v", st.LongType())])
    kc.createTable("kc_rep", schema, ["id"], CreateTableOptions().addHashPartitions(["id"], 4))
    df = spark.range(0, 2000, numPartitions=3).selectExpr("(1999 - id) as id", "id as v")
    keyed = kc._repartition(df, "kc_rep", sort=True)
    parts = keyed.rdd.glom().map(lambda rows: [r.id for r in rows]).collect()
    assert len(parts) == 4
    assert sum(len(p) for p in parts) == 2000
    assert all(p == sorted(p) for p in parts)
    kc.upsertRows(df, "kc_rep", KuduWriteOptions(repartition=True, repartitionSort=False))
    assert kc.kuduRDD(None, "kc_rep").count() == 2000
    with kudu.connect(spark_cluster.master_addresses.split(",")) as client:
        tokens = client.table("kc_rep").scan_token_builder().build()
        assert len(tokens) == 4
        by_tablet = sorted(
            sorted(r[0] for r in client.deserialize_token_into_scanner(t.serialize()).open().read_all_tuples())
            for t in tokens
        )
    assert sorted(parts) == by_tablet  # each Spark partition is exactly one tablet's rows
