"""``kudu perf ...``: load generation (``loadgen``) and timed scans (``table_scan``) against a cluster."""

from __future__ import annotations

import argparse
from typing import Any

from kudu_async.tools import loadgen, table_tool
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    add_format_flag,
    flag,
    group,
    object_result,
    show_progress,
    verb,
)
from kudu_async.tools.cli.table import scan_flags, scan_options

group("perf", help="Measure the performance of a Kudu cluster")


def _loadgen_args(p: argparse.ArgumentParser) -> None:
    d = loadgen.LoadgenOptions()
    flag(p, "num_threads", type=int, default=d.num_threads, help=f"concurrent writers [{d.num_threads}]")
    flag(
        p,
        "num_rows_per_thread",
        type=int,
        default=d.num_rows_per_thread,
        help=f"rows each writer inserts [{d.num_rows_per_thread}]",
    )
    flag(
        p,
        "flush_per_n_rows",
        type=int,
        default=d.flush_per_n_rows,
        help="rows per write batch, sent as one Arrow batch; 0: one apply() per row in AUTO_FLUSH_BACKGROUND "
        f"mode, Kudu's default, which in Python measures the client more than the cluster [{d.flush_per_n_rows}]",
    )
    flag(p, "table_name", help="write into this existing table [a table of its own, dropped afterwards]")
    flag(
        p,
        "table_num_hash_partitions",
        type=int,
        default=d.table_num_hash_partitions,
        help=f"hash buckets of the auto-created table [{d.table_num_hash_partitions}]",
    )
    flag(
        p,
        "table_num_replicas",
        type=int,
        default=d.table_num_replicas,
        help=f"replication factor of the auto-created table [{d.table_num_replicas}]",
    )
    flag(p, "string_len", type=int, default=d.string_len, help=f"length of generated strings [{d.string_len}]")
    flag(p, "seq_start", type=int, default=0, help="first key [0]")
    flag(p, "keep_auto_table", type=bool, help="keep the auto-created table [false]")
    flag(p, "run_scan", type=bool, help="count the table's rows afterwards [false]")
    add_format_flag(p, "pretty", ("pretty", "json"))


def _render_loadgen(r: dict[str, Any]) -> str:
    lat = r["batch_latency_ms"]
    mode = "one apply() per row" if r["mode"] == "row" else f"{r['batch_rows']} rows per batch"
    lines = [
        "INSERT report",
        f"    rows total: {r['rows']}",
        f"    time total: {r['seconds'] * 1000:.0f} ms",
        f"    time per row: {r['seconds'] * 1000 / max(r['rows'], 1):.6f} ms",
        f"wrote {r['rows']:,} rows into {r['table']} with {r['threads']} writers ({mode}) in {r['seconds']} s: "
        f"{r['rows_per_s'] or 0:,} rows/s",
        f"batch latency ms: p50 {lat['p50']}  p95 {lat['p95']}  p99 {lat['p99']}  max {lat['max']}",
        "table kept" if r["kept"] else "auto-created table dropped",
    ]
    if "scan" in r:
        lines.append(f"Total count {r['scan']['rows']} cost {r['scan']['seconds']} seconds")
    lines += [f"ERROR: {e}" for e in r["errors"]]
    return "\n".join(lines)


@verb(
    "perf",
    "loadgen",
    help="Run load generation with optional scan afterwards: rows/s and the latency of each write batch",
    args=_loadgen_args,
)
async def perf_loadgen(ctx: Context, a: argparse.Namespace) -> Result:
    opts = loadgen.LoadgenOptions(
        num_threads=a.num_threads,
        num_rows_per_thread=a.num_rows_per_thread,
        flush_per_n_rows=a.flush_per_n_rows,
        table_name=a.table_name,
        table_num_hash_partitions=a.table_num_hash_partitions,
        table_num_replicas=a.table_num_replicas,
        string_len=a.string_len,
        seq_start=a.seq_start,
        keep_auto_table=a.keep_auto_table,
        run_scan=a.run_scan,
        progress=show_progress(),
    )
    opts.check()
    client = await ctx.client()
    res = await loadgen.run(client, opts)
    return object_result(res, a.format, _render_loadgen, 1 if res["errors"] else 0)


def _table_scan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("table_name", help="Name of the table to scan")
    scan_flags(p)
    add_format_flag(p, "pretty", ("pretty", "json"))


def _render_table_scan(r: dict[str, Any]) -> str:
    lines = [f"T {t['tablet_id']} scanned {t['rows']} rows in {t['seconds']} seconds" for t in r["tablets"]]
    lines.append(f"Total count {r['rows']} cost {r['seconds']} seconds")
    return "\n".join(lines)


@verb(
    "perf",
    "table_scan",
    help="Show row count and scanning time cost of tablets in a table",
    args=_table_scan_args,
)
async def perf_table_scan(ctx: Context, a: argparse.Namespace) -> Result:
    opts = scan_options(a)
    client = await ctx.client()
    res = await table_tool.scan_tablets(client, a.table_name, opts, lambda batch: None)
    return object_result(res, a.format, _render_table_scan)
