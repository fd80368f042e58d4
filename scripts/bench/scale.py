#!/usr/bin/env python3
"""Scale benchmark: a table loaded chunk by chunk up to ``--rows`` rows, with the tservers' memory, disk,
ingest, scan and point-read figures after every chunk, then a kill -9 of every tserver and the time until
every row is readable again.

1 master + 3 tservers (real processes on 127.0.0.1, fsync on, data under ``--dir``), one table ``key int64 PK,
a int64, b string, c double`` in ``--buckets`` hash tablets x ``--replicas`` replicas. Row of key k: a = k %
1000, b = "name-<k>", c = k * 0.5. Rows go in through ``session.apply_arrow`` (the client's bulk path) in
``--batch``-row batches, ``--chunk`` rows per chunk, keys ascending or in a fixed pseudo-random order over the
whole key space (``--keys random``: key = i * P mod N, P a prime coprime to N, so every key exactly once).

After each chunk:
- chunk rows/s (wall time of the chunk's load, batches built on the way);
- point reads (``--point-reads`` sequential single-key scans, each row checked) right after the load, in rounds
  with a 1 s pause between them, until the tservers' CPU falls idle (their flushes and compactions done) or
  ``--settle`` seconds pass; and, from the second chunk on, point reads from a reader process running for the
  whole of the chunk's load;
- per tserver: RSS, anonymous memory (RssAnon), VmHWM, and the peak RssAnon sampled every 0.5 s during the
  chunk (load, settling, scans);
- disk bytes per row per replica of the tservers' directories: WAL (any wal/ or wals/ directory) and data
  (every other file but the node's logs);
- a full scan of column a: row count and sum of a, both checked; a filtered scan (a < 100, projecting key and
  c): its row count and sum of c checked; its rate in table rows/s (fastest of ``--scan-runs``).
Then kill -9 of every tserver, restart, and the time until a full count returns every row. The summary table
and the scale goals (memory under the limit and flat, disk per row, ingest and scan rates holding up, point
read p99 after and during loads, restart time) with their measured figures and PASS/FAIL close the run.
Any wrong answer exits 1.

Tserver flags pass through with ``--tserver-flag name=value`` (repeatable); a flag the nodes do not know stops
the run before any node starts.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kudu_async as kudu
import kudu_async.aio
from kudu_async.common.errors import KuduBadStatus
from kudu_async.server.config import FLAGS_BY_NAME
from kudu_async.testing import MiniCluster
from kudu_async.testing.mini_cluster import MiniClusterError, NodeProcess

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

TABLE = "scale"
QUICK = {"rows": 2_000_000, "chunk": 1_000_000, "settle": 20.0}
FULL = {"rows": 100_000_000, "chunk": 10_000_000, "settle": 60.0}
# The memory goal's limit when the tservers are given no memory_limit_mb flag (the 100 M-row run's setting).
DEFAULT_LIMIT_MB = 1024
# The tservers count as idle (their flushes and compactions done) below this many cores of CPU together.
IDLE_CORES = 0.25
SAMPLE_S = 0.5
MIB = 1024 * 1024


class BenchError(RuntimeError):
    """A verification failed, or the cluster could not do what the run needs: the figures mean nothing."""


def check(ok: bool, msg: str) -> None:
    if not ok:
        raise BenchError(msg)


# --- keys ---------------------------------------------------------------------------------------------


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


@dataclasses.dataclass(frozen=True)
class KeyGen:
    """The key of the i-th row loaded, for i in [0, n): i itself, or i * p mod n (a bijection of [0, n) when
    p is coprime to n), vectorised and chunk by chunk, so no run holds the whole key space in memory."""

    n: int
    mode: str = "asc"
    p: int = 1

    @staticmethod
    def make(n: int, mode: str) -> KeyGen:
        if n <= 0:
            raise ValueError(f"key space must be positive, got {n}")
        if mode == "asc":
            return KeyGen(n, mode, 1)
        if mode != "random":
            raise ValueError(f"key order must be 'asc' or 'random', got {mode!r}")
        # Near n / golden ratio spreads consecutive i over the whole space; p * n < 2**63 keeps i * p exact.
        limit = (2**63 - 1) // n
        p = min(max(2, int(n * 0.6180339887)), limit)
        while p >= 2 and not (_is_prime(p) and n % p != 0):
            p -= 1
        if p < 2:
            if n > 2:
                raise ValueError(f"no multiplier for a random key order over {n:,} keys (too many)")
            p = 1  # n of 1 or 2: every order is a permutation
        return KeyGen(n, mode, p)

    def keys(self, lo: int, hi: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        if not 0 <= lo <= hi <= self.n:
            raise ValueError(f"row range [{lo}, {hi}) outside [0, {self.n})")
        i = np.arange(lo, hi, dtype=np.int64)
        if self.mode == "asc":
            return i
        out: np.ndarray[Any, np.dtype[np.int64]] = (i * np.int64(self.p)) % np.int64(self.n)
        return out

    def key(self, i: int) -> int:
        return i if self.mode == "asc" else (i * self.p) % self.n


def make_batch(keys: np.ndarray[Any, np.dtype[np.int64]]) -> pa.RecordBatch:
    """Rows of ``keys``: a = key % 1000, b = 'name-<key>', c = key * 0.5 (vectorised)."""
    k = pa.array(keys)
    a = pc.remainder(k, 1000)
    b = pc.binary_join_element_wise("name-", pc.cast(k, pa.string()), "")
    c = pc.multiply(pc.cast(k, pa.float64()), 0.5)
    return pa.RecordBatch.from_arrays([k, a, b, c], names=["key", "a", "b", "c"])


def expected_row(k: int) -> dict[str, Any]:
    return {"key": k, "a": k % 1000, "b": f"name-{k}", "c": k * 0.5}


# The filtered scan's predicate: a < FILTER_A.
FILTER_A = 100


@dataclasses.dataclass
class Expect:
    """What the rows loaded so far must scan back to."""

    rows: int = 0
    sum_a: int = 0
    filtered_rows: int = 0  # rows with a < FILTER_A
    filtered_key_sum: int = 0  # their keys' sum: sum of c = this / 2

    def add(self, keys: np.ndarray[Any, np.dtype[np.int64]]) -> None:
        a = keys % 1000
        hit = keys[a < FILTER_A]
        self.rows += len(keys)
        self.sum_a += int(a.sum(dtype=np.int64))
        self.filtered_rows += len(hit)
        self.filtered_key_sum += int(hit.sum(dtype=np.int64))


# --- node figures from /proc and the data directories ----------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and VmHWM of a process, in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "RssAnon", "VmHWM"):
                out[name] = int(rest.split()[0]) * 1024
    return out


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Top-level files of a node's directory that are not its data: its own logs.
NODE_LOGS = frozenset({"node.log", "stderr.log"})
WAL_DIRS = frozenset({"wal", "wals"})


def node_disk(root: Path) -> tuple[int, int]:
    """(data bytes, WAL bytes) of one node's directory: a file under a directory named wal or wals (e.g.
    consensus/<tablet>/wal/) is WAL, every other file but the node's logs is data (rowsets, metadata)."""
    data = wal = 0
    stack: list[tuple[Path, bool]] = [(root, False)]
    while stack:
        path, in_wal = stack.pop()
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:  # a directory removed while we walk (a compaction, a WAL GC)
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append((Path(e.path), in_wal or e.name in WAL_DIRS))
                elif not (path == root and e.name in NODE_LOGS):
                    size = e.stat(follow_symlinks=False).st_size
                    if in_wal:
                        wal += size
                    else:
                        data += size
            except FileNotFoundError:
                continue
    return data, wal


def disk_usage(tservers: list[NodeProcess]) -> tuple[int, int]:
    """(data bytes, WAL bytes) over every tserver."""
    per = [node_disk(t.data_dir) for t in tservers]
    return sum(d for d, _ in per), sum(w for _, w in per)


class MemSampler:
    """Samples every tserver's RssAnon every 0.5 s in a thread; keeps the peak since the last reset."""

    def __init__(self, tservers: list[NodeProcess]) -> None:
        self._tservers = tservers
        self._lock = threading.Lock()
        self._peak = [0] * len(tservers)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mem-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        for i, t in enumerate(self._tservers):
            pid = t.pid
            if pid is None or not t.is_running():
                continue
            try:
                anon = proc_status(pid).get("RssAnon", 0)
            except (FileNotFoundError, ProcessLookupError):
                continue
            with self._lock:
                self._peak[i] = max(self._peak[i], anon)
        with self._lock:
            self.samples += 1

    def take_peaks(self) -> list[int]:
        """Peak RssAnon per tserver since the last call, and start over."""
        with self._lock:
            out, self._peak = self._peak, [0] * len(self._tservers)
        return out


# --- reads --------------------------------------------------------------------------------------------


async def _point_read(table: Any, k: int) -> float:
    t0 = time.perf_counter()
    got = await table.scanner().add_predicate(table["key"] == k).to_arrow()
    el = time.perf_counter() - t0
    check(got.num_rows == 1, f"point read of key {k}: {got.num_rows} rows, expected 1")
    row = got.to_pylist()[0]
    check(row == expected_row(k), f"point read of key {k}: got {row}, expected {expected_row(k)}")
    return el


def tserver_cpu(tservers: list[NodeProcess]) -> float:
    return sum(proc_cpu_s(t.pid) for t in tservers if t.pid is not None and t.is_running())


async def settle_reads(
    masters: str, gen: KeyGen, loaded: int, n: int, settle_s: float, tservers: list[NodeProcess], seed: int
) -> tuple[list[float], float, bool]:
    """Rounds of ``n`` sequential point reads right after a load, each round followed by a 1 s pause in which
    the tservers' CPU is measured, until they are idle or ``settle_s`` passed. Returns the latencies, the
    seconds until idle (or the whole window) and whether they went idle."""
    rng = random.Random(seed)
    client = await kudu_async.aio.connect(masters.split(","))
    try:
        table = await client.table(TABLE)
        await _point_read(table, gen.key(rng.randrange(loaded)))  # locations, connections: not timed
        lat: list[float] = []
        t0 = time.monotonic()
        while True:
            for _ in range(n):
                lat.append(await _point_read(table, gen.key(rng.randrange(loaded))))
            c0, w0 = tserver_cpu(tservers), time.monotonic()
            await asyncio.sleep(1.0)
            cores = (tserver_cpu(tservers) - c0) / (time.monotonic() - w0)
            el = time.monotonic() - t0
            if cores < IDLE_CORES:
                return lat, el, True
            if el >= settle_s:
                return lat, el, False
    finally:
        await client.close()


async def _reader_loop(masters: str, gen: KeyGen, loaded: int, seed: int, ready: Event, stop: Event) -> list[float]:
    rng = random.Random(seed)
    client = await kudu_async.aio.connect(masters.split(","))
    try:
        table = await client.table(TABLE)
        await _point_read(table, gen.key(rng.randrange(loaded)))  # locations, connections: not timed
        ready.set()
        lat: list[float] = []
        while not stop.is_set():
            lat.append(await _point_read(table, gen.key(rng.randrange(loaded))))
        return lat
    finally:
        await client.close()


def reader_process(
    masters: str, gen: KeyGen, loaded: int, seed: int, events: tuple[Event, Event], out: Queue[tuple[str, Any]]
) -> None:
    """Sequential point reads of rows loaded earlier, from the first read after ``events[0]`` (ready) is set
    until ``events[1]`` (stop) is; latencies (or the error) to ``out``."""
    try:
        out.put(("ok", asyncio.run(_reader_loop(masters, gen, loaded, seed, *events))))
    except BaseException as e:  # the parent reports it and fails the run
        out.put(("error", f"{type(e).__name__}: {e}"))


def full_count(table: Any) -> tuple[int, int]:
    """(rows, sum of a) by a full scan of column a."""
    rows = total = 0
    for b in table.scanner().set_projected_column_names(["a"]).xbatches_arrow():
        rows += b.num_rows
        total += int(pc.sum(b.column("a")).as_py() or 0)
    return rows, total


def filtered_scan(table: Any) -> tuple[int, float, float]:
    """(rows, sum of c, seconds) of the scan a < FILTER_A projecting key and c."""
    t0 = time.perf_counter()
    rows = 0
    total = 0.0
    sc = table.scanner().set_projected_column_names(["key", "c"]).add_predicate(table["a"] < FILTER_A)
    for b in sc.xbatches_arrow():
        rows += b.num_rows
        total += float(pc.sum(b.column("c")).as_py() or 0.0)
    return rows, total, time.perf_counter() - t0


def pct(lat: list[float], q: float) -> float:
    """The q-quantile in ms (nearest rank); NaN for no samples."""
    if not lat:
        return math.nan
    s = sorted(lat)
    return s[max(0, math.ceil(q * len(s)) - 1)] * 1000


def tablet_gauges(cluster: MiniCluster) -> dict[str, float]:
    """MemRowSet bytes over every replica, and DiskRowSets per replica (mean, max)."""
    mrs = 0
    rowsets: list[int] = []
    for ts in cluster.tservers:
        for ent in cluster.http_json(ts, "/metrics?metrics=memrowset_size,num_rowsets_on_disk&types=tablet"):
            for m in ent["metrics"]:
                if m["name"] == "memrowset_size":
                    mrs += int(m["value"])
                elif m["name"] == "num_rowsets_on_disk":
                    rowsets.append(int(m["value"]))
    return {
        "mrs_bytes": mrs,
        "rowsets_mean": statistics.mean(rowsets) if rowsets else 0.0,
        "rowsets_max": max(rowsets, default=0),
    }


# --- the run ------------------------------------------------------------------------------------------


def schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("a", type_=kudu.int64)
    b.add_column("b", type_=kudu.string)
    b.add_column("c", type_=kudu.double)
    return b.build()


def parse_tserver_flags(raw: list[str]) -> list[str]:
    """``name=value`` pairs as kudu-node arguments; an unknown name stops the run with the known ones."""
    out: list[str] = []
    for item in raw:
        name, eq, value = item.partition("=")
        name = name.strip().lstrip("-").replace("-", "_")
        if not eq or not name:
            raise BenchError(f"--tserver-flag {item!r}: expected name=value, e.g. memory_limit_mb=1024")
        if name not in FLAGS_BY_NAME:
            raise BenchError(
                f"--tserver-flag {item!r}: kudu-node has no flag {name!r} in this checkout "
                f"({Path(__file__).resolve().parents[2]}); it knows: {', '.join(sorted(FLAGS_BY_NAME))}"
            )
        out.append(f"--{name.replace('_', '-')}={value}")
    return out


def memory_limit_mb(raw: list[str]) -> tuple[int, str]:
    for item in raw:
        name, _, value = item.partition("=")
        if name.strip().lstrip("-").replace("-", "_") == "memory_limit_mb":
            return int(value), "--tserver-flag memory_limit_mb"
    return DEFAULT_LIMIT_MB, "the goal's figure; no memory_limit_mb flag passed"


def load_chunk(
    client: kudu.Client, table: Any, gen: KeyGen, lo: int, hi: int, batch: int, timeout_ms: int, expect: Expect
) -> float:
    """Load rows [lo, hi) of the key order; returns the wall seconds (batch building included)."""
    session = client.new_session(timeout_ms=timeout_ms)
    t0 = time.perf_counter()
    try:
        for b_lo in range(lo, hi, batch):
            keys = gen.keys(b_lo, min(hi, b_lo + batch))
            session.apply_arrow(table, make_batch(keys), op="insert")
            expect.add(keys)
        session.flush()
    except KuduBadStatus as e:
        errors, overflowed = session.get_pending_errors()
        raise BenchError(f"load of rows [{lo:,}, {hi:,}) failed: {e}; row errors: {errors[:2]}") from e
    el = time.perf_counter() - t0
    errors, overflowed = session.get_pending_errors()
    session.close()
    check(not errors and not overflowed, f"load of rows [{lo:,}, {hi:,}) left {len(errors)} row errors: {errors[:2]}")
    return el


def restart_all(cluster: MiniCluster, table: Any, expect: Expect, timeout_s: float) -> dict[str, float]:
    """kill -9 every tserver, start them again, and time until a full count sees every row."""
    for t in cluster.tservers:
        cluster.kill_node(t)
    t0 = time.monotonic()
    for t in cluster.tservers:
        cluster.restart_node(t, wait=False)
    for t in cluster.tservers:
        cluster.wait_healthy(t, timeout_s)
    healthy = time.monotonic() - t0
    last = ""
    while True:
        try:
            rows, sum_a = full_count(table)
            if rows == expect.rows:
                check(sum_a == expect.sum_a, f"after restart: sum of a {sum_a}, expected {expect.sum_a}")
                break
            last = f"counted {rows:,} of {expect.rows:,} rows"
            check(rows < expect.rows, f"after restart: {last}")
        except KuduBadStatus as e:
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() - t0 > timeout_s:
            raise BenchError(f"not every row readable {timeout_s:.0f}s after restarting the tservers; last: {last}")
        time.sleep(0.2)
    all_rows = time.monotonic() - t0
    anon = [proc_status(t.pid)["RssAnon"] / MIB for t in cluster.tservers if t.pid is not None]
    return {"healthy_s": healthy, "all_rows_s": all_rows, "anon_mib_after": max(anon, default=0.0)}


def fmt_mib(b: float) -> str:
    return f"{b / MIB:,.0f}"


def chunk_line(r: dict[str, Any]) -> str:
    per_ts = " ".join(
        f"[{fmt_mib(t['rss'])}/{fmt_mib(t['anon'])}/{fmt_mib(t['hwm'])}/pk {fmt_mib(t['anon_peak'])}]"
        for t in r["tservers"]
    )
    during = (
        f"p50 {r['during_p50_ms']:.1f} p99 {r['during_p99_ms']:.1f} ms ({r['during_reads']:,})"
        if r["during_reads"]
        else "-"
    )
    return (
        f"rows {r['rows']:>12,} | {r['rate']:>9,.0f} rows/s | RSS/anon/HWM/peak-anon MiB {per_ts} | "
        f"disk B/row/replica {r['disk_bpr']:.1f} (data {r['data_bpr']:.1f} wal {r['wal_bpr']:.1f}) | "
        f"scan a<{FILTER_A} {r['scan_rate']:,.0f} rows/s | reads after: p50 {r['after_p50_ms']:.1f} "
        f"p99 {r['after_p99_ms']:.1f} ms ({r['after_reads']:,}, {'idle' if r['settled'] else 'busy'} after "
        f"{r['settle_s']:.0f}s) | reads during load: {during} | rowsets/tablet mean {r['rowsets_mean']:.1f} "
        f"max {r['rowsets_max']} | load avg {r['loadavg_1m']:.1f}"
    )


SUMMARY_COLS = (
    ("rows", "rows", "{:,}"),
    ("rows/s", "rate", "{:,.0f}"),
    ("anon MiB (sum)", "anon_sum_mib", "{:,.0f}"),
    ("peak anon MiB (max ts)", "anon_peak_max_mib", "{:,.0f}"),
    ("RSS MiB (sum)", "rss_sum_mib", "{:,.0f}"),
    ("B/row/rep", "disk_bpr", "{:.1f}"),
    ("data", "data_bpr", "{:.1f}"),
    ("wal", "wal_bpr", "{:.1f}"),
    ("scan rows/s", "scan_rate", "{:,.0f}"),
    ("p50 after", "after_p50_ms", "{:.1f}"),
    ("p99 after", "after_p99_ms", "{:.1f}"),
    ("p99 during", "during_p99_ms", "{:.1f}"),
    ("settle s", "settle_s", "{:.0f}"),
    ("rowsets max", "rowsets_max", "{}"),
    ("load 1m", "loadavg_1m", "{:.1f}"),
)


def print_summary(records: list[dict[str, Any]]) -> None:
    cells = [
        [
            "-" if isinstance(r[key], float) and math.isnan(r[key]) else fmt.format(r[key])
            for _, key, fmt in SUMMARY_COLS
        ]
        for r in records
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(SUMMARY_COLS)]
    print(" | ".join(h.rjust(w) for (h, _, _), w in zip(SUMMARY_COLS, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for c in cells:
        print(" | ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def goals(
    records: list[dict[str, Any]], restart: dict[str, float], limit_mb: int, limit_src: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    first = next(r for r in records if r["rows"] >= 0.1 * records[-1]["rows"])
    last = records[-1]
    peak_mib = max(r["anon_peak_max_mib"] for r in records)
    after_p99 = max(r["after_p99_ms"] for r in records)
    during = [r["during_p99_ms"] for r in records if r["during_reads"]]
    out: list[dict[str, Any]] = [
        {
            "goal": f"each tserver's anon memory < {limit_mb} MiB at every sample ({limit_src})",
            "measured": f"peak {peak_mib:,.0f} MiB",
            "pass": peak_mib < limit_mb,
        },
        {
            "goal": f"memory flat from {first['rows']:,} to {last['rows']:,} rows (peak anon of the last chunk "
            "<= 1.2 x that of the first 10%)",
            "measured": f"{first['anon_peak_max_mib']:,.0f} -> {last['anon_peak_max_mib']:,.0f} MiB "
            f"(x{last['anon_peak_max_mib'] / max(first['anon_peak_max_mib'], 1):.2f})",
            "pass": last["anon_peak_max_mib"] <= 1.2 * first["anon_peak_max_mib"],
        },
        {
            "goal": "disk <= 20 B/row/replica (data + WAL) at the end",
            "measured": f"{last['disk_bpr']:.1f} (data {last['data_bpr']:.1f}, wal {last['wal_bpr']:.1f})",
            "pass": last["disk_bpr"] <= 20,
        },
        {
            "goal": "ingest rows/s of the last chunk >= 80% of the first 10%'s",
            "measured": f"{first['rate']:,.0f} -> {last['rate']:,.0f} ({last['rate'] / first['rate']:.0%})",
            "pass": last["rate"] >= 0.8 * first["rate"],
        },
        {
            "goal": "filtered-scan rows/s at the end >= 80% of the first 10%'s",
            "measured": f"{first['scan_rate']:,.0f} -> {last['scan_rate']:,.0f} "
            f"({last['scan_rate'] / first['scan_rate']:.0%})",
            "pass": last["scan_rate"] >= 0.8 * first["scan_rate"],
        },
        {
            "goal": "point read p99 <= 10 ms right after every load (flushes/compactions running)",
            "measured": f"worst chunk {after_p99:.1f} ms",
            "pass": after_p99 <= 10,
        },
        {
            "goal": "point read p99 <= 25 ms during every load",
            "measured": f"worst chunk {max(during):.1f} ms" if during else "no chunk after the first",
            "pass": bool(during) and max(during) <= 25,
        },
        {
            "goal": "every row readable <= 30 s after kill -9 of every tserver",
            "measured": f"{restart['all_rows_s']:.1f} s",
            "pass": restart["all_rows_s"] <= 30,
        },
    ]
    if args.keys == "random" and args.asc_json:
        asc = json.loads(Path(args.asc_json).read_text())
        asc_rate = statistics.mean(r["rate"] for r in asc["chunks"])
        rate = statistics.mean(r["rate"] for r in records)
        out.append(
            {
                "goal": f"random-key ingest >= 50% of the ascending rate ({args.asc_json})",
                "measured": f"{rate:,.0f} vs {asc_rate:,.0f} rows/s ({rate / asc_rate:.0%})",
                "pass": rate >= 0.5 * asc_rate,
            }
        )
    return out


@dataclasses.dataclass
class Run:
    """What every chunk of one run works with."""

    args: argparse.Namespace
    cluster: MiniCluster
    client: kudu.Client
    table: Any
    gen: KeyGen
    sampler: MemSampler
    expect: dataclasses.InitVar[Expect | None] = None

    def __post_init__(self, expect: Expect | None) -> None:
        self.exp = expect if expect is not None else Expect()
        self.mp = mp.get_context("spawn")

    def load_with_reader(self, lo: int, hi: int, chunk_no: int) -> tuple[float, list[float]]:
        """Load rows [lo, hi) while a reader process reads rows loaded before (none for the first chunk)."""
        ready, stop = self.mp.Event(), self.mp.Event()
        queue: Queue[tuple[str, Any]] = self.mp.Queue()
        reader = None
        if lo:
            reader = self.mp.Process(
                target=reader_process,
                args=(self.cluster.master_addresses, self.gen, lo, self.args.seed + chunk_no, (ready, stop), queue),
                daemon=True,
            )
            reader.start()
            while not ready.wait(0.5):  # the load starts once the reader reads
                if not reader.is_alive():
                    status, payload = queue.get(timeout=5)
                    raise BenchError(f"the reader for the load of chunk {chunk_no} failed to start: {payload}")
        try:
            el = load_chunk(
                self.client, self.table, self.gen, lo, hi, self.args.batch, self.args.write_timeout_ms, self.exp
            )
        finally:
            stop.set()
        if reader is None:
            return el, []
        status, payload = queue.get(timeout=120)
        reader.join(30)
        check(status == "ok", f"the reader during the load of chunk {chunk_no} failed: {payload}")
        return el, list(payload)

    def verify(self, chunk_no: int) -> tuple[int, float]:
        """Full count and sum of a, then the filtered scan, all checked; the scan's (rows, seconds)."""
        exp = self.exp
        rows, sum_a = full_count(self.table)
        check(rows == exp.rows, f"chunk {chunk_no}: full scan counted {rows:,} rows, loaded {exp.rows:,}")
        check(sum_a == exp.sum_a, f"chunk {chunk_no}: sum of a is {sum_a}, expected {exp.sum_a}")
        f_rows, f_sum, f_el = filtered_scan(self.table)
        for _ in range(self.args.scan_runs - 1):
            again = filtered_scan(self.table)
            check(
                again[:2] == (f_rows, f_sum),
                f"chunk {chunk_no}: scan a < {FILTER_A} gave {again[:2]}, then {(f_rows, f_sum)}",
            )
            f_el = min(f_el, again[2])
        check(
            f_rows == exp.filtered_rows,
            f"chunk {chunk_no}: scan a < {FILTER_A} returned {f_rows:,} rows, expected {exp.filtered_rows:,}",
        )
        check(
            f_sum == exp.filtered_key_sum / 2,
            f"chunk {chunk_no}: scan a < {FILTER_A} summed c to {f_sum}, expected {exp.filtered_key_sum / 2}",
        )
        return f_rows, f_el

    def chunk(self, lo: int, hi: int, chunk_no: int) -> dict[str, Any]:
        args = self.args
        self.sampler.take_peaks()
        el, during = self.load_with_reader(lo, hi, chunk_no)
        after, settle_el, settled = asyncio.run(
            settle_reads(
                self.cluster.master_addresses,
                self.gen,
                hi,
                args.point_reads,
                args.settle,
                self.cluster.tservers,
                args.seed * 1000 + chunk_no,
            )
        )
        f_rows, f_el = self.verify(chunk_no)
        self.sampler.sample()
        peaks = self.sampler.take_peaks()
        data_b, wal_b = disk_usage(self.cluster.tservers)
        per_rep = max(1, self.exp.rows * args.replicas)
        tss = []
        for t, peak in zip(self.cluster.tservers, peaks, strict=True):
            assert t.pid is not None
            st = proc_status(t.pid)
            tss.append({"rss": st["VmRSS"], "anon": st["RssAnon"], "hwm": st["VmHWM"], "anon_peak": peak})
        return {
            "chunk": chunk_no,
            "rows": self.exp.rows,
            "rate": (hi - lo) / el,
            "load_s": el,
            "tservers": tss,
            "anon_sum_mib": sum(t["anon"] for t in tss) / MIB,
            "rss_sum_mib": sum(t["rss"] for t in tss) / MIB,
            "anon_peak_max_mib": max(peaks) / MIB,
            "data_bytes": data_b,
            "wal_bytes": wal_b,
            "disk_bpr": (data_b + wal_b) / per_rep,
            "data_bpr": data_b / per_rep,
            "wal_bpr": wal_b / per_rep,
            "scan_s": f_el,
            "scan_rate": self.exp.rows / f_el,
            "scan_matched": f_rows,
            "after_reads": len(after),
            "after_p50_ms": pct(after, 0.5),
            "after_p99_ms": pct(after, 0.99),
            "after_max_ms": pct(after, 1.0),
            "settle_s": settle_el,
            "settled": settled,
            "during_reads": len(during),
            "during_p50_ms": pct(during, 0.5),
            "during_p99_ms": pct(during, 0.99),
            "during_max_ms": pct(during, 1.0),
            **tablet_gauges(self.cluster),
            # The machine's 1-minute load average: other work on it skews every figure of the chunk.
            "loadavg_1m": os.getloadavg()[0],
        }


def start_cluster(args: argparse.Namespace, work: Path, ts_flags: list[str]) -> MiniCluster:
    cluster = MiniCluster(num_masters=1, num_tservers=3, base_dir=work / "cluster", tserver_flags=ts_flags)
    try:
        return cluster.start()
    except MiniClusterError as e:
        raise BenchError(f"the cluster did not start (tserver flags {ts_flags}):\n{e}") from e


def finish(run: Run, records: list[dict[str, Any]], limit: tuple[int, str], result: dict[str, Any]) -> None:
    """kill -9 and restart every tserver, then the summary and the goals."""
    restart = restart_all(run.cluster, run.table, run.exp, run.args.restart_timeout)
    result["restart"] = restart
    print(
        f"kill -9 of every tserver, restart: healthy after {restart['healthy_s']:.1f}s, full count of "
        f"{run.exp.rows:,} rows (sum of a checked) after {restart['all_rows_s']:.1f}s; then the largest "
        f"tserver anon memory {restart['anon_mib_after']:,.0f} MiB"
    )
    print()
    print_summary(records)
    print()
    gl = goals(records, restart, limit[0], limit[1], run.args)
    result["goals"] = gl
    for g in gl:
        print(f"{'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['measured']}")
    print(f"goals passed: {sum(g['pass'] for g in gl)} of {len(gl)}")


def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The whole run; fills ``result`` as it goes (so a failed run still leaves its figures)."""
    ts_flags = parse_tserver_flags(args.tserver_flag)
    limit = memory_limit_mb(args.tserver_flag)
    gen = KeyGen.make(args.rows, args.keys)
    if args.dir:
        work = Path(args.dir).resolve()
        check(not (work / "cluster").exists(), f"--dir {work} already holds a cluster/ directory: pick another")
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    result.update({"args": vars(args), "dir": str(work), "chunks": []})
    records: list[dict[str, Any]] = result["chunks"]
    t0 = time.perf_counter()
    cluster = start_cluster(args, work, ts_flags)
    client: kudu.Client | None = None
    sampler = MemSampler(cluster.tservers)
    try:
        client = kudu.connect(cluster.master_addresses.split(","))
        part = kudu.Partitioning().add_hash_partitions(["key"], args.buckets)
        table = client.create_table(TABLE, schema(), part, n_replicas=args.replicas)
        print(
            f"cluster: 1 master + 3 tservers (flags {ts_flags or 'none'}) under {work}; table of {args.buckets} "
            f"tablets x {args.replicas} replicas in {time.perf_counter() - t0:.1f}s; {args.rows:,} rows, "
            f"{args.keys} keys" + (f" (key = i * {gen.p} mod {gen.n})" if args.keys == "random" else "")
        )
        print(
            "per chunk: per tserver [RSS/RssAnon/VmHWM/peak RssAnon during the chunk] MiB; reads after: "
            f"{args.point_reads}-read rounds until the tservers idle (< {IDLE_CORES} cores) or {args.settle:.0f}s"
        )
        sampler.start()
        bench = Run(args, cluster, client, table, gen, sampler)
        for chunk_no, lo in enumerate(range(0, args.rows, args.chunk), start=1):
            r = bench.chunk(lo, min(args.rows, lo + args.chunk), chunk_no)
            records.append(r)
            print(chunk_line(r), flush=True)
        sampler.stop()
        finish(bench, records, limit, result)
    finally:
        sampler.stop()
        if client is not None:
            client.close()
        cluster.shutdown()
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work / "cluster" if args.dir else work, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=None, help=f"rows to load [{FULL['rows']:,}]")
    ap.add_argument("--chunk", type=int, default=None, help=f"rows per chunk [{FULL['chunk']:,}]")
    ap.add_argument("--batch", type=int, default=100_000, help="rows per apply_arrow batch [100,000]")
    ap.add_argument("--keys", choices=("asc", "random"), default="asc", help="key order [asc]")
    ap.add_argument("--buckets", type=int, default=6, help="hash tablets [6]")
    ap.add_argument("--replicas", type=int, default=3, choices=(1, 3), help="replicas per tablet [3]")
    ap.add_argument("--point-reads", type=int, default=300, help="sequential point reads per round [300]")
    ap.add_argument(
        "--settle", type=float, default=None, help=f"most seconds of point reads after a chunk [{FULL['settle']:.0f}]"
    )
    ap.add_argument(
        "--tserver-flag",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a kudu-node flag for every tserver, e.g. memory_limit_mb=1024 (repeatable)",
    )
    ap.add_argument("--dir", default=None, help="where the nodes keep their data [a temporary directory]")
    ap.add_argument("--keep", action="store_true", help="keep the data directories at the end")
    ap.add_argument("--write-timeout-ms", type=int, default=60_000, help="session timeout of the load [60,000]")
    ap.add_argument("--restart-timeout", type=float, default=300.0, help="give up on the restart after this [300]")
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--asc-json", default=None, help="with --keys random: an ascending run's --json, to compare rates")
    ap.add_argument("--scan-runs", type=int, default=2, help="runs of the filtered scan per chunk, fastest kept [2]")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: " + ", ".join(f"{k} {v:,}" for k, v in QUICK.items())
    )
    args = ap.parse_args(argv)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if (
        args.rows <= 0
        or args.chunk <= 0
        or args.batch <= 0
        or args.point_reads <= 0
        or args.buckets <= 0
        or args.scan_runs <= 0
    ):
        ap.error("--rows, --chunk, --batch, --point-reads, --buckets and --scan-runs must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result: dict[str, Any] = {}
    rc = 0
    try:
        run(args, result)
    except BenchError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        result["failed"] = str(e)
        rc = 1
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        print(f"figures written to {args.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
