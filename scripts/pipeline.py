#!/usr/bin/env python3
"""The demo pipeline: a local kudu_async cluster fed and queried by Spark.

1. starts a local cluster (1 master + 3 tablet servers on 127.0.0.1, data in --data-dir),
2. creates an events table (range partitions by day x hash buckets) and a users dimension table,
3. ingests a batch of generated events with Spark, then updates, late corrections and deletes,
4. streams three more micro-batches of events through Structured Streaming (upsert sink),
5. runs Spark SQL analytics over the tables (aggregations, a join with the dimension table),
6. writes a result table back and reads it, printing results and rows/s in and out.

``--secure`` runs the same against a secured cluster (TLS required with the cluster's CA, JWT
authentication, table privileges enforced): every Spark read and write then carries kudu.jwt and
kudu.encryptionPolicy, the user being ``alice``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kudu_async as kudu
from kudu_async.testing import MiniCluster

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

DAY0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
DAYS = 4
EVENT_TYPES = ["view", "click", "cart", "purchase"]
COUNTRIES = ["DE", "US", "FR", "JP", "BR", "IN", "NL", "SE"]


def spark_session() -> SparkSession:
    from kudu_async.spark import local_session

    return local_session("kudu_async-pipeline")


def create_tables(client: kudu.Client) -> None:
    b = kudu.schema_builder()
    b.add_column("event_time", kudu.unixtime_micros, nullable=False).primary_key()
    b.add_column("event_id", kudu.int64, nullable=False).primary_key()
    b.add_column("user_id", kudu.int64, nullable=False)
    b.add_column("event_type", kudu.string, nullable=False)
    b.add_column("amount", kudu.decimal, precision=12, scale=2)
    b.add_column("revision", kudu.int32, nullable=False, default=0)
    part = kudu.Partitioning().add_hash_partitions(["event_id"], 3).set_range_partition_columns(["event_time"])
    for d in range(DAYS):
        part.add_range_partition(
            {"event_time": DAY0 + dt.timedelta(days=d)}, {"event_time": DAY0 + dt.timedelta(days=d + 1)}
        )
    client.create_table("events", b.build(), part, n_replicas=3)
    u = kudu.schema_builder()
    u.add_column("user_id", kudu.int64, nullable=False).primary_key()
    u.add_column("country", kudu.string, nullable=False)
    u.add_column("segment", kudu.string)
    client.create_table("users", u.build(), kudu.Partitioning().add_hash_partitions(["user_id"], 2), n_replicas=3)


# The Spark source's security options every read and write carries (empty on an unsecured cluster).
SECURITY: dict[str, str] = {}


def kudu_df(spark: SparkSession, masters: str, table: str) -> DataFrame:
    r = spark.read.format("kudu").options(**SECURITY)
    return r.option("kudu.master", masters).option("kudu.table", table).load()


def write(df: DataFrame, masters: str, table: str, op: str, **opts: str) -> None:
    w = df.write.format("kudu").options(**SECURITY).option("kudu.master", masters).option("kudu.table", table)
    w = w.option("kudu.operation", op)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def show(title: str, rows: list[Row]) -> None:
    print(f"\n== {title}")
    for r in rows:
        print("  " + ", ".join(f"{k}={v}" for k, v in r.asDict().items()))


def reset_tables(masters: str) -> None:
    policy = kudu.ENCRYPTION_REQUIRED if SECURITY else kudu.ENCRYPTION_OPTIONAL
    with kudu.connect(masters.split(","), jwt=SECURITY.get("kudu.jwt"), encryption_policy=policy) as client:
        for name in ("events", "users", "daily_revenue"):
            if client.table_exists(name):
                client.delete_table(name)
        create_tables(client)


def run(masters: str, n_events: int, n_users: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    reset_tables(masters)
    spark = spark_session()
    start_us = int(DAY0.timestamp() * 1_000_000)
    span_us = DAYS * 86_400_000_000 - 1

    users = spark.range(0, n_users).selectExpr(
        "id as user_id",
        f"element_at(array({','.join(repr(c) for c in COUNTRIES)}), "
        f"cast(pmod(hash(id), {len(COUNTRIES)}) + 1 as int)) as country",
        "case when id % 10 = 0 then 'vip' else 'regular' end as segment",
    )
    write(users, masters, "users", "upsert")

    types = ",".join(repr(t) for t in EVENT_TYPES)
    events = (
        spark.range(0, n_events)
        .selectExpr(
            f"timestamp_micros({start_us} + pmod(xxhash64(id, 7), {span_us})) as event_time",
            "id as event_id",
            f"pmod(hash(id, 11), {n_users}) as user_id",
            f"element_at(array({types}), cast(pmod(hash(id, 13), {len(EVENT_TYPES)}) + 1 as int)) as event_type",
            "cast(pmod(hash(id, 17), 20000) / 100.0 as decimal(12,2)) as amount",
            "0 as revision",
        )
        .cache()
    )
    events.count()
    t0 = time.monotonic()
    write(events, masters, "events", "upsert")
    figures["batch ingest rows/s"] = n_events / (time.monotonic() - t0)
    print(f"ingested {n_events} events in {time.monotonic() - t0:.1f}s")

    # Corrections: 5% of events get a new amount (revision 1); 1% are deleted as fraud; late events arrive.
    corrections = events.where("event_id % 20 = 0").selectExpr(
        "event_time",
        "event_id",
        "user_id",
        "event_type",
        "cast(amount * 0.9 as decimal(12,2)) as amount",
        "1 as revision",
    )
    write(corrections, masters, "events", "update")
    write(events.where("event_id % 100 = 1").select("event_time", "event_id"), masters, "events", "delete")
    late = spark.range(n_events, n_events + n_events // 50).selectExpr(
        f"timestamp_micros({start_us} + pmod(xxhash64(id, 7), 86400000000)) as event_time",
        "id as event_id",
        f"pmod(hash(id, 11), {n_users}) as user_id",
        "'purchase' as event_type",
        "cast(pmod(hash(id, 17), 20000) / 100.0 as decimal(12,2)) as amount",
        "0 as revision",
    )
    write(late, masters, "events", "insert")

    # A short streaming run: three micro-batches of JSON events, upserted (replay-safe).
    stream_dir = Path(tempfile.mkdtemp(prefix="kudu-stream-"))
    try:
        base = n_events + n_events // 50
        for part in range(3):
            lines = []
            for i in range(1000):
                eid = base + part * 1000 + i
                ts = DAY0 + dt.timedelta(days=DAYS - 1, seconds=eid % 86_000)
                lines.append(
                    json.dumps(
                        {
                            "event_time": ts.isoformat(),
                            "event_id": eid,
                            "user_id": eid % n_users,
                            "event_type": "view",
                            "amount": None,
                            "revision": 0,
                        }
                    )
                )
            (stream_dir / "in").mkdir(exist_ok=True)
            (stream_dir / "in" / f"batch{part}.json").write_text("\n".join(lines))
        schema = (
            "event_time timestamp, event_id long, user_id long, event_type string, amount decimal(12,2), revision int"
        )
        q = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .json(str(stream_dir / "in"))
            .writeStream.format("kudu")
            .options(**SECURITY)
            .option("kudu.master", masters)
            .option("kudu.table", "events")
            .option("checkpointLocation", str(stream_dir / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(300)
        print(f"streamed 3 micro-batches ({len(q.recentProgress)} progress reports)")
    finally:
        shutil.rmtree(stream_dir, ignore_errors=True)

    ev = kudu_df(spark, masters, "events")
    ev.createOrReplaceTempView("events")
    kudu_df(spark, masters, "users").createOrReplaceTempView("users")
    t0 = time.monotonic()
    total = ev.count()
    figures["full scan rows/s"] = total / (time.monotonic() - t0)
    expected = n_events - len(range(1, n_events, 100)) + n_events // 50 + 3000
    print(f"events table holds {total} rows (expected {expected})")
    if total != expected:
        raise SystemExit(f"pipeline check failed: {total} rows, expected {expected}")

    daily = spark.sql("""
        SELECT to_date(event_time) AS day, event_type, count(*) AS events, sum(amount) AS revenue
        FROM events GROUP BY to_date(event_time), event_type ORDER BY day, event_type""")
    show("events and revenue by day and type", daily.collect()[:8])
    top = spark.sql("""
        SELECT u.country, u.segment, count(*) AS purchases, sum(e.amount) AS revenue
        FROM events e JOIN users u ON e.user_id = u.user_id
        WHERE e.event_type = 'purchase'
        GROUP BY u.country, u.segment ORDER BY revenue DESC LIMIT 5""")
    show("top countries/segments by purchase revenue (join with users)", top.collect())
    corrected = spark.sql("SELECT count(*) AS corrected FROM events WHERE revision = 1").collect()
    show("corrected events (revision 1, pushed down)", corrected)

    t0 = time.monotonic()
    write(
        daily.selectExpr("cast(day as date) as day", "event_type", "events", "revenue"),
        masters,
        "daily_revenue",
        "upsert",
        **{"kudu.createTable": "true", "kudu.primaryKey": "day,event_type", "kudu.hashBuckets": "2"},
    )
    back = kudu_df(spark, masters, "daily_revenue").count()
    print(f"\nwrote result table daily_revenue: {back} rows in {time.monotonic() - t0:.1f}s")
    spark.stop()
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="local-cluster", help="cluster data directory [./local-cluster]")
    ap.add_argument("--events", type=int, default=200_000, help="events in the batch ingest [200000]")
    ap.add_argument("--users", type=int, default=1_000, help="rows of the users dimension table [1000]")
    ap.add_argument("--masters", help="use this running cluster instead of starting one")
    ap.add_argument("--secure", action="store_true", help="a secured cluster: TLS, JWT authentication, privileges")
    args = ap.parse_args()
    t_start = time.monotonic()
    if args.masters:
        figures = run(args.masters, args.events, args.users)
    else:
        data_dir = Path(args.data_dir).resolve() / "pipeline"
        if data_dir.exists():
            shutil.rmtree(data_dir)
        policy = {"grant": [{"users": ["alice"], "tables": ["*"], "privileges": ["ALL"]}]}
        cluster = MiniCluster(
            num_masters=1,
            num_tservers=3,
            base_dir=data_dir,
            secure=args.secure,
            authz_policy=policy if args.secure else None,
        )
        print(f"starting a local cluster (1 master + 3 tablet servers) in {data_dir}", flush=True)
        cluster.start()
        for line in cluster.describe():
            print(line, flush=True)
        if args.secure:
            SECURITY["kudu.jwt"] = cluster.mint_jwt("alice", ttl_s=86_400.0)
            SECURITY["kudu.encryptionPolicy"] = "required"
        try:
            figures = run(cluster.master_addresses, args.events, args.users)
        finally:
            cluster.shutdown()
    print("\n== figures")
    for k, v in figures.items():
        print(f"  {k}: {v:,.0f}")
    print(f"  pipeline wall time: {time.monotonic() - t_start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
