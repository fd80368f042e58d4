#!/usr/bin/env python3
"""Spark + kudu_async vs Spark + local Parquet: write N rows (key + 3 columns) from one DataFrame to a
3-replica table and to Parquet, then read both back with a filter; prints times and the ratios.

Goal: the kudu write within 4x of the Parquet write time, the read within 3x.

Writes and reads are timed ``--runs`` times each, and the ratios use the best run of each side, as a
pipeline that keeps its SparkSession sees them. Five by default: the JVM keeps compiling over the first
runs (a Parquet read took 0.13 s after two runs, 0.08-0.10 s after five), so each read query also runs
``--runs`` times untimed first. Every write run goes to a new kudu table (created by the write,
``kudu.createTable``) and a new Parquet directory; after its timing, each run's table and directory but
the first run's (which the reads use) are deleted, so every run writes into a cluster holding what one
1M-row write leaves. Keeping all of them made each later kudu run slower than the one before (~0.9 s for
runs 2-3, ~1.3 s for runs 4-5 on the 2-core test machines): each tserver holds ~80 MB more per table, and
there memory beyond the first few GB a workload takes costs ~7x more to fault in (0.37 ms per MB below
~3.7 GB of fresh allocations in one process, 2.7 ms above). The first kudu write of a session also pays PySpark
starting its Python planner and worker processes (a cost Parquet's JVM-only writer never has), so the
first run of each side is printed as well, with its own ratio.
``--upsert`` then writes the same DataFrame again with ``kudu.operation upsert`` (every key exists).

The write and the read are also timed against a Python data source that does nothing (a writer that
drops its Arrow batches; a reader of no rows with one partition per kudu tablet): PySpark's own cost of
moving the rows to Python workers and of running a Python source's tasks, which no kudu work can go below.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kudu_async.client.sync import connect
from kudu_async.testing import MiniCluster

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def floor_source(partitions: int):  # type: ignore[no-untyped-def]
    """A Python data source that does nothing, with the bench's columns: a reader of ``partitions`` empty
    partitions, and an Arrow writer that drains its batches and keeps none."""
    from dataclasses import dataclass

    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    class EmptyReader(DataSourceReader):
        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            return iter(())

    @dataclass
    class Drained(WriterCommitMessage):
        rows: int = 0

    class DrainWriter(DataSourceArrowWriter):
        def write(self, iterator):  # type: ignore[no-untyped-def]
            return Drained(sum(b.num_rows for b in iterator))

    class EmptySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_empty_python_source"

        def schema(self) -> str:
            return "key long, a int, b string, c double"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return EmptyReader()

        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return DrainWriter()

    return EmptySource


def best(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    """The fastest of ``runs`` timed calls, after ``runs`` untimed ones (the JVM's warm-up)."""
    for _ in range(runs):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        fn()
        times.append(time.monotonic() - t0)
    return min(times)


def timed_writes(df: DataFrame, work: Path, masters: str, runs: int, buckets: int) -> tuple[list[float], list[float]]:
    """Each run's Parquet and kudu write times of ``df``; run 0's directory and table are kept for the reads."""
    pq_times: list[float] = []
    kudu_times: list[float] = []
    for run in range(max(1, runs)):
        pq = str(work / f"parquet-{run}")
        t0 = time.monotonic()
        df.write.mode("overwrite").parquet(pq)
        pq_times.append(time.monotonic() - t0)
        t0 = time.monotonic()
        (
            df.write.format("kudu")
            .option("kudu.master", masters)
            .option("kudu.table", f"bench-{run}")
            .option("kudu.createTable", "true")
            .option("kudu.primaryKey", "key")
            .option("kudu.hashBuckets", str(buckets))
            .option("kudu.operation", "insert")
            .mode("append")
            .save()
        )
        kudu_times.append(time.monotonic() - t0)
        if run > 0:  # keep the footprint of one write (see the module docstring); run 0 is read below
            shutil.rmtree(pq, ignore_errors=True)
            with connect(masters) as client:
                client.delete_table(f"bench-{run}")
    return pq_times, kudu_times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=6, help="hash buckets of the kudu table [6]")
    ap.add_argument(
        "--runs",
        type=int,
        default=5,
        help="timed runs of each write and read (best is compared; the JVM warms up over the first) [5]",
    )
    ap.add_argument("--upsert", action="store_true", help="also time an upsert of every row again")
    args = ap.parse_args()
    from kudu_async.spark import local_session

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    cluster = MiniCluster(num_masters=1, num_tservers=3, base_dir=work / "cluster").start()
    try:
        spark = local_session("kudu_async-bench", partitions=2)
        m = cluster.master_addresses
        n = args.rows
        df = (
            spark.range(0, n)
            .selectExpr("id as key", "cast(id % 1000 as int) as a", "concat('name-', id) as b", "id * 0.5 as c")
            .cache()
        )
        df.count()
        pq_times, kudu_times = timed_writes(df, work, m, args.runs, args.buckets)
        pq_write, kudu_write = min(pq_times), min(kudu_times)
        kudu_upsert = None
        if args.upsert:
            t0 = time.monotonic()
            (
                df.write.format("kudu")
                .option("kudu.master", m)
                .option("kudu.table", "bench-0")
                .option("kudu.operation", "upsert")
                .mode("append")
                .save()
            )
            kudu_upsert = time.monotonic() - t0
        cut = int(n * 0.9)
        kdf = spark.read.format("kudu").option("kudu.master", m).option("kudu.table", "bench-0").load()
        pdf = spark.read.parquet(str(work / "parquet-0"))
        expect = n - cut
        for name, frame in (("kudu", kdf), ("parquet", pdf)):
            got = frame.filter(f"key >= {cut}").count()
            assert got == expect, f"{name}: {got} rows, expected {expect}"
        kudu_read = best(lambda: kdf.filter(f"key >= {cut}").agg({"c": "sum"}).collect(), args.runs)
        pq_read = best(lambda: pdf.filter(f"key >= {cut}").agg({"c": "sum"}).collect(), args.runs)
        spark.dataSource.register(floor_source(args.buckets))
        empty_write = best(lambda: df.write.format("bench_empty_python_source").mode("append").save(), args.runs)
        edf = spark.read.format("bench_empty_python_source").load()
        edf.filter(f"key >= {cut}").count()
        empty_read = best(lambda: edf.filter(f"key >= {cut}").agg({"c": "sum"}).collect(), args.runs)
        kudu_full = best(lambda: kdf.agg({"c": "sum"}).collect(), args.runs)
        pq_full = best(lambda: pdf.agg({"c": "sum"}).collect(), args.runs)
        print(f"rows: {n:,} (key + 3 columns), kudu table: {args.buckets} tablets x 3 replicas on 3 tservers")
        print(
            f"write   kudu {kudu_write:7.2f}s ({n / kudu_write:,.0f} rows/s)   parquet {pq_write:6.2f}s   "
            f"ratio {kudu_write / pq_write:5.1f}x   (goal <= 4x; best of {len(kudu_times)} runs, each into "
            "a new table / directory)"
        )
        print(
            f"    PySpark's floor for it: the same DataFrame to a Python Arrow writer that drops the batches "
            f"{empty_write:.2f}s ({empty_write / pq_write:.1f}x parquet); kudu is {kudu_write - empty_write:+.2f}s "
            "above it"
        )
        print(
            f"write, first run of the session   kudu {kudu_times[0]:6.2f}s   parquet {pq_times[0]:6.2f}s   "
            f"ratio {kudu_times[0] / pq_times[0]:5.1f}x   (kudu's includes PySpark starting its Python workers)"
        )
        print(
            "write runs (s): kudu "
            + ", ".join(f"{t:.2f}" for t in kudu_times)
            + "; parquet "
            + ", ".join(f"{t:.2f}" for t in pq_times)
        )
        if kudu_upsert is not None:
            print(f"upsert  kudu {kudu_upsert:7.2f}s ({n / kudu_upsert:,.0f} rows/s), every key already present")
        print(
            f"read (key >= {cut}, sum c)   kudu {kudu_read:6.2f}s   parquet {pq_read:6.2f}s   "
            f"ratio {kudu_read / pq_read:5.1f}x   (goal <= 3x)"
        )
        print(
            f"    PySpark's floor for it: the same query on a Python source with {args.buckets} empty partitions "
            f"{empty_read:.2f}s ({empty_read / pq_read:.1f}x parquet); kudu is {kudu_read - empty_read:+.2f}s "
            "above it"
        )
        print(
            f"read (all rows, sum c)      kudu {kudu_full:6.2f}s   parquet {pq_full:6.2f}s   "
            f"ratio {kudu_full / pq_full:5.1f}x   ({n / kudu_full:,.0f} rows/s from kudu)"
        )
        spark.stop()
    finally:
        cluster.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
