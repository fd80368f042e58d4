"""``kudu perf loadgen``: write synthetic rows with concurrent writers, report rows/s and the latency of
each write batch. Like Kudu's, it creates a table of its own (hash partitioned, dropped afterwards unless
``-keep_auto_table``) or writes into the one ``-table_name`` names.

Rows are generated column-wise with numpy/pyarrow (no per-row Python) and written with ``apply_arrow`` in
batches of ``-flush_per_n_rows``, or, with ``-flush_per_n_rows=0`` (Kudu's default), one ``apply`` per row in
FLUSH_AUTO_BACKGROUND, the way an application feeding single events would (much slower in Python: it
measures the client, not the cluster).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.client.aio import AsyncClient
from kudu_async.client.schema_builder import Partitioning, SchemaBuilder
from kudu_async.client.session import FLUSH_AUTO_BACKGROUND
from kudu_async.client.table import Table
from kudu_async.common import types as T
from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument
from kudu_async.tools.progress import progress

MAX_BATCH_ROWS = 1_000_000
DEFAULT_BATCH_ROWS = 10_000  # -flush_per_n_rows: Arrow batches, the fast path of this client


@dataclass
class LoadgenOptions:
    """Kudu's flags of ``perf loadgen`` (by their names)."""

    num_threads: int = 2
    num_rows_per_thread: int = 1000
    flush_per_n_rows: int = DEFAULT_BATCH_ROWS  # 0: one apply per row, FLUSH_AUTO_BACKGROUND
    table_name: str | None = None
    table_num_hash_partitions: int = 8
    table_num_replicas: int = 1
    string_len: int = 32
    keep_auto_table: bool = False
    seq_start: int = 0
    run_scan: bool = False
    progress: bool = True

    @property
    def rows(self) -> int:
        return self.num_threads * self.num_rows_per_thread

    @property
    def row_mode(self) -> bool:
        return self.flush_per_n_rows == 0

    def check(self) -> None:
        for name, lo in (
            ("num_threads", 1),
            ("num_rows_per_thread", 1),
            ("flush_per_n_rows", 0),
            ("table_num_hash_partitions", 1),
            ("table_num_replicas", 1),
            ("string_len", 0),
            ("seq_start", 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise KuduInvalidArgument(f"-{name} must be an integer >= {lo}, got {v!r}")
        if self.flush_per_n_rows > MAX_BATCH_ROWS:
            raise KuduInvalidArgument(f"-flush_per_n_rows must be at most {MAX_BATCH_ROWS}")
        if self.num_threads > 256:
            raise KuduInvalidArgument("-num_threads must be at most 256")


def generate(table: Table, start: int, n: int, string_len: int) -> pa.RecordBatch:
    """Rows with keys start..start+n-1 for every column of ``table`` (deterministic from the key)."""
    keys = np.arange(start, start + n, dtype=np.int64)
    cols: list[pa.Array] = []
    names: list[str] = []
    for i, c in enumerate(table.schema.columns):
        kt = c.type
        bounds = T.int_bounds(kt)
        if i == 0:
            if bounds is None and kt not in (T.STRING, T.VARCHAR):
                raise KuduInvalidArgument(
                    f"loadgen needs an integer or string first key column; {c.name} is {c.type_label}"
                )
            if bounds is not None and start + n - 1 > bounds[1]:
                raise KuduInvalidArgument(
                    f"key column {c.name} ({c.type_label}) cannot hold keys up to {start + n - 1}"
                )
            vals = keys
        else:
            vals = (keys * 2654435761 + i) % 1_000_003
        base = pa.array(vals)
        if bounds is not None:
            arr = pa.array(vals if i == 0 else vals & bounds[1]).cast(
                pa.from_numpy_dtype(np.dtype(f"int{8 * _width(kt)}"))
            )
        elif kt in (T.FLOAT, T.DOUBLE):
            arr = pc.divide(pc.cast(base, pa.float64()), 7.0)
            arr = arr.cast(pa.float32() if kt is T.FLOAT else pa.float64())
        elif kt in (T.STRING, T.VARCHAR):
            arr = pc.utf8_rpad(pc.cast(base, pa.string()), width=max(string_len, 1), padding="x")
        elif kt is T.BINARY:
            arr = pc.cast(pc.utf8_rpad(pc.cast(base, pa.string()), width=max(string_len, 1), padding="x"), pa.binary())
        elif kt is T.BOOL:
            arr = pc.equal(pc.bit_wise_and(base, 1), 1)
        elif kt is T.UNIXTIME_MICROS:
            arr = pc.cast(pc.multiply(base, 1000), pa.timestamp("us", tz="UTC"))
        elif not c.nullable or c.default is None:
            raise KuduInvalidArgument(f"loadgen cannot generate column {c.name} ({c.type_label}) and it has no default")
        else:
            continue  # nullable or defaulted: left out, the server fills it
        cols.append(arr)
        names.append(c.name)
    return pa.RecordBatch.from_arrays(cols, names=names)


def _width(kt: T.KuduType) -> int:
    return {"int8": 1, "int16": 2, "int32": 4, "int64": 8}[kt.name]


async def run(client: AsyncClient, opts: LoadgenOptions) -> dict[str, Any]:
    opts.check()
    auto = opts.table_name is None
    name = opts.table_name or f"loadgen_auto_{uuid.uuid4().hex[:12]}"
    if auto:
        b = SchemaBuilder()
        b.add_column("key", type_="int64", nullable=False, primary_key=True)
        b.add_column("int_val", type_="int32", nullable=False)
        b.add_column("double_val", type_="double")
        b.add_column("string_val", type_="string")
        part = (
            Partitioning().add_hash_partitions(["key"], opts.table_num_hash_partitions).set_range_partition_columns([])
        )
        table = await client.create_table(name, b.build(), part, n_replicas=opts.table_num_replicas)
    else:
        table = await client.table(name)
    try:
        return await _load(client, table, opts, auto)
    finally:
        if auto and not opts.keep_auto_table:
            try:
                await client.delete_table(name)
            except KuduBadStatus as e:
                print(f"kudu perf loadgen: could not drop the auto-created table {name}: {e}", file=sys.stderr)


async def _load(client: AsyncClient, table: Table, opts: LoadgenOptions, auto: bool) -> dict[str, Any]:
    per = [opts.num_rows_per_thread] * opts.num_threads
    starts = [opts.seq_start + w * opts.num_rows_per_thread for w in range(opts.num_threads)]
    latencies: list[float] = []
    errors: list[str] = []
    prog = progress(opts.rows, f"loadgen {table.name}", opts.progress)
    written_by: list[int] = []  # rows each writer wrote

    async def writer(start: int, n: int) -> None:
        s = client.new_session(
            flush_mode=FLUSH_AUTO_BACKGROUND if opts.row_mode else "manual",
            timeout_ms=max(30_000, client.rpc_timeout_ms),
        )
        done = 0
        while done < n:
            k = min(opts.flush_per_n_rows or DEFAULT_BATCH_ROWS, n - done)
            batch = generate(table, start + done, k, opts.string_len)
            t0 = time.monotonic()
            try:
                if opts.row_mode:
                    for rec in batch.to_pylist():  # row mode measures exactly this per-row path
                        await s.apply(table.new_insert(rec))
                    await s.flush()
                else:
                    await s.apply_arrow(table, batch, op="insert")
            except KuduBadStatus as e:
                errs, _ = s.get_pending_errors()
                errors.append(f"{e}" + (f"; first row error: {errs[0]}" if errs else ""))
                return
            latencies.append(time.monotonic() - t0)
            done += k
            written_by.append(k)
            prog.update(k)

    t0 = time.monotonic()
    await asyncio.gather(*(writer(st, n) for st, n in zip(starts, per, strict=True) if n))
    took = time.monotonic() - t0
    prog.close()
    lat = np.array(latencies) * 1000.0 if latencies else np.zeros(1)
    written = sum(written_by)
    out: dict[str, Any] = {
        "table": table.name,
        "auto_table": auto,
        "kept": (not auto) or opts.keep_auto_table,
        "rows": written,
        "threads": opts.num_threads,
        "batch_rows": opts.flush_per_n_rows,
        "mode": "row" if opts.row_mode else "arrow",
        "seconds": round(took, 3),
        "rows_per_s": round(written / took) if took > 0 else None,
        "batch_latency_ms": {
            "p50": round(float(np.percentile(lat, 50)), 2),
            "p95": round(float(np.percentile(lat, 95)), 2),
            "p99": round(float(np.percentile(lat, 99)), 2),
            "max": round(float(lat.max()), 2),
        },
        "errors": errors,
    }
    if opts.run_scan:
        sc = client.new_scanner(table)
        sc.set_projected_column_names([table.schema.columns[0].name])
        t1 = time.monotonic()
        counted = sum([b.num_rows async for b in sc.xbatches()])
        out["scan"] = {"rows": counted, "seconds": round(time.monotonic() - t1, 3)}
    return out
