"""The master's page data: the Impala CREATE TABLE statement, partitions as Kudu names them, tablets with
their replicas, replica distribution, and the pages rendered from that data."""

from __future__ import annotations

import datetime as dt

from kudu_async.common import types as T
from kudu_async.common.partition import HashDimension, PartitionSchema, RangeWithHashSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.master import web_pages as wp
from kudu_async.master.messages import ReplicaLocation, TabletLocation, TabletPartition
from kudu_async.server.webui import render, sql, svg

SCHEMA = Schema(
    [
        ColumnSchema("host", T.STRING, nullable=False),
        ColumnSchema("ts", T.UNIXTIME_MICROS, nullable=False),
        ColumnSchema("value", T.DOUBLE, default=0.5, comment="it's measured"),
        ColumnSchema("price", T.DECIMAL, precision=10, scale=2, encoding="plain_encoding", compression="lz4"),
        ColumnSchema("code", T.VARCHAR, length=8),
        ColumnSchema("day", T.DATE),
    ],
    2,
)
PS = PartitionSchema(SCHEMA, [HashDimension(["host"], 4)], ["ts"])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T1 = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
MASTERS = ["m1:7051", "m2:7051"]


def _key(t: dt.datetime | None) -> bytes:
    return b"" if t is None else PS.encode_range_key({"ts": t})


def test_create_table_names_every_column_attribute_and_partition() -> None:
    ranges = [(_key(None), _key(T0)), (_key(T0), _key(T1)), (_key(T1), _key(None)), (_key(T0), _key(T1))]
    sql = wp.impala_create_table("impala::db.metrics", SCHEMA, PS, ranges, 3, MASTERS, comment="the metrics")
    assert sql.startswith("CREATE TABLE `db`.`metrics` (\n  `host` STRING NOT NULL,\n")
    assert "`value` DOUBLE NULL DEFAULT 0.5 COMMENT 'it\\'s measured'" in sql
    assert "`price` DECIMAL(10,2) NULL ENCODING PLAIN_ENCODING COMPRESSION LZ4" in sql
    assert "`code` VARCHAR(8) NULL" in sql and "`day` DATE NULL" in sql and "`ts` TIMESTAMP NOT NULL" in sql
    assert "  PRIMARY KEY (`host`, `ts`)\n)" in sql
    assert "PARTITION BY HASH (host) PARTITIONS 4,\nRANGE (`ts`) (\n" in sql
    assert "  PARTITION VALUES < '2026-01-01 00:00:00',\n" in sql
    assert "  PARTITION '2026-01-01 00:00:00' <= VALUES < '2026-02-01 00:00:00',\n" in sql
    assert "  PARTITION '2026-02-01 00:00:00' <= VALUES\n)" in sql
    assert sql.count("PARTITION '2026-01-01 ") == 1  # each range once, however many tablets it has
    assert "COMMENT 'the metrics'\nSTORED AS KUDU\n" in sql
    assert sql.endswith("'kudu.master_addresses' = 'm1:7051,m2:7051',\n  'kudu.num_tablet_replicas' = '3'\n);")
    ext = wp.impala_external_table("impala::db.metrics", MASTERS)
    assert ext.startswith("CREATE EXTERNAL TABLE `db`.`metrics` STORED AS KUDU") and "'impala::db.metrics'" in ext


def test_create_table_without_ranges_and_with_a_range_of_its_own_hash() -> None:
    simple = Schema([ColumnSchema("k", T.INT64, nullable=False)], 1)
    ps = PartitionSchema(simple, [HashDimension(["k"], 2)], ["k"])
    sql = wp.impala_create_table("t", simple, ps, [(b"", b"")], 1, MASTERS)
    assert "PARTITION BY HASH (k) PARTITIONS 2\nSTORED AS KUDU" in sql and "RANGE" not in sql
    lo, hi = ps.encode_range_key({"k": 0}), ps.encode_range_key({"k": 10})
    custom = PartitionSchema(
        simple,
        [HashDimension(["k"], 2)],
        ["k"],
        custom_ranges=[RangeWithHashSchema(lo, hi, (HashDimension(["k"], 5),))],
    )
    sql = wp.impala_create_table("t", simple, custom, [(lo, hi)], 1, MASTERS)
    assert "  PARTITION 0 <= VALUES < 10 HASH (k) PARTITIONS 5\n" in sql
    nothing = PartitionSchema(simple, [], [])
    assert "PARTITION BY" not in wp.impala_create_table("t", simple, nothing, [(b"", b"")], 1, MASTERS)


def test_schema_rows_use_kudus_names() -> None:
    rows = {r["name"]: r for r in wp.column_rows(SCHEMA)}
    assert rows["host"]["key"] and not rows["value"]["key"] and rows["value"]["default"] == "0.5"
    assert (rows["price"]["encoding"], rows["price"]["compression"]) == ("PLAIN_ENCODING", "LZ4")
    assert (rows["code"]["encoding"], rows["code"]["compression"]) == ("AUTO_ENCODING", "DEFAULT_COMPRESSION")
    assert rows["price"]["type"] == "decimal(10,2)" and rows["value"]["comment"] == "it's measured"


def test_literals() -> None:
    assert sql.sql_literal("a'b\\c") == "'a\\'b\\\\c'"
    assert sql.sql_literal(True) == "true" and sql.sql_literal(b"\x01\xff") == "'\\x01\\xff'"
    assert sql.sql_literal(dt.date(2026, 1, 2)) == "'2026-01-02'"
    assert sql.sql_literal(dt.datetime(2026, 1, 2, 3, 4, 5, 60, tzinfo=dt.UTC)) == "'2026-01-02 03:04:05.00006'"
    assert sql.quote_ident("a`b") == "`a``b`" and wp.impala_table_name("plain") == "`plain`"


def _location(tid: str, bucket: int, lo: dt.datetime | None, hi: dt.datetime | None, leader: str) -> TabletLocation:
    start, end = _key(lo), _key(hi)
    part = TabletPartition((bucket,), start, end, bucket.to_bytes(4, "big") + start, b"")
    replicas = [ReplicaLocation(u, f"{u}:7050", "LEADER" if u == leader else "FOLLOWER") for u in ("a", "b", "c")]
    return TabletLocation(tid, part, "RUNNING", replicas)


def test_tablet_rows_link_replicas_and_count_them() -> None:
    locs = [_location("t2", 1, T0, None, "b"), _location("t1", 0, None, T0, "a")]
    rows = wp.tablet_rows(PS, locs, {"a": "ha:8050", "b": "hb:8050"}, "http")
    assert [r["tablet_id"] for r in rows] == ["t1", "t2"]  # partition-key order
    assert rows[0]["partition"] == "HASH (host) PARTITION 0, RANGE (ts) PARTITION VALUES < '2026-01-01 00:00:00'"
    assert rows[1]["leader"] == "b" and rows[1]["replicas"][0]["role"] == "LEADER"
    assert rows[1]["replicas"][0]["href"] == "http://hb:8050/tablet?id=t2"
    assert next(r for r in rows[1]["replicas"] if r["uuid"] == "c")["href"] is None  # no web address known
    dist = wp.replica_distribution(rows)
    assert dist["skew"] == 0 and dist["counts"] == [{"tserver": u, "replicas": 2} for u in "abc"]
    replicas, leaders = wp.cluster_counts({"tbl": "metrics"}, [("tbl", loc) for loc in locs])
    assert replicas["a"] == {"metrics": 2} and leaders == {"a": 1, "b": 1}
    summary = wp.version_summary([{"version": "1", "live": True}, {"version": "1", "live": False}, {"live": True}])
    assert summary == [{"version": "1", "live": 1, "dead": 1}, {"version": "unknown", "live": 1, "dead": 0}]


def _page(template: str, context: dict[str, object]) -> str:
    base = {
        "title": "t",
        "node": {"role": "master", "uuid": "m-uuid", "name": "master-0"},
        "nav": [("/tables", "Tables")],
        "current_path": "/x",
        "version": "0",
        "rendered_at": "now",
        "css_path": "/kudu.css",
        "request_query": [],
        "raw_link": True,
    }
    return render.render(template, {**base, **context})


def test_table_and_tserver_pages_render_from_their_data() -> None:
    locs = [_location("t1", 0, None, T0, "a")]
    rows = wp.tablet_rows(PS, locs, {"a": "ha:8050"}, "http")
    html = _page(
        "table.html",
        {
            "name": "metrics",
            "id": "tid",
            "owner": "alice",
            "comment": None,
            "schema_version": 2,
            "state": "RUNNING",
            "num_replicas": 3,
            "created_at": 1_700_000_000,
            "columns": wp.column_rows(SCHEMA),
            "partition_schema_text": sql.partition_schema_text(PS),
            "tablet_rows": rows,
            "tablet_states": [{"state": "RUNNING", "count": 1}],
            "replica_distribution": wp.replica_distribution(rows),
            "create_table": wp.impala_create_table("metrics", SCHEMA, PS, [], 3, MASTERS),
            "create_external_table": wp.impala_external_table("metrics", MASTERS),
            "note": None,
        },
    )
    assert '<pre id="create-table">CREATE TABLE `metrics`' in html
    assert 'href="http://ha:8050/tablet?id=t1"' in html and "HASH (host) PARTITIONS 4,\nRANGE (ts)" in html
    ts = {
        "uuid": "a",
        "rpc_address": "a:7050",
        "http_address": "ha:8050",
        "version": "0",
        "start_time": 1,
        "live": True,
        "num_replicas": 1,
        "num_leaders": 1,
        "last_heartbeat_age_s": 0.2,
        "state": "MAINTENANCE_MODE",
    }
    view = svg.cluster_view([{"uuid": "a", "label": "a", "href": None}], {"a": {"metrics": 1}}, {"a": 1}, {})
    html = _page(
        "master_tservers.html",
        {
            "tservers": [ts],
            "versions": wp.version_summary([ts]),
            "states": [{"uuid": "a", "state": "MAINTENANCE_MODE", "since": 1_700_000_000}],
            "cluster_view": view,
            "scheme": "http",
            "note": "not the leader",
        },
    )
    assert '<a href="http://ha:8050/">a</a>' in html and "<svg" in html and "MAINTENANCE_MODE" in html
