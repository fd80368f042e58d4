#!/usr/bin/env python3
"""Consensus benchmark: 3 tserver processes, replicated TestKV groups, fsync on.

A client proposes small entries (TestKV/Put to each group's leader) with bounded concurrency and prints
committed entries/s and p50/p99 commit latency, for one group and for many groups at once. Each also
with the same proposers (one entry outstanding each) coalesced by the client into TestKV/PutBatch calls
(what a Kudu session does with concurrent writes to one tablet), and with many entries per RPC from every
proposer (100 x 64 entries in flight: throughput, not latency). Then one client alone: sequential put
latency and sequential linearizable point reads (TestKV/Get) on one group. Then the same load through the
public client (unless ``--no-tablets``): a fresh 1 master + 3 tservers, one table of ``--tablets`` hash
tablets x 3 replicas, and ``--concurrency`` tasks each inserting one row at a time through its own
FLUSH_AUTO_SYNC session of the async client (one Write RPC per row), checked by a scan that counts the rows,
then one client's sequential single-row writes and point reads (a scan with the key pinned) on that table.
After the TestKV phases, the idle CPU of each tserver with ``--idle-replicas`` replicas and no requests.
Every phase prints the CPU per entry of each process (the tservers or etcd members, and this client).

When an ``etcd`` binary is on PATH, the same run starts a 3-member etcd cluster on 127.0.0.1 (its default
timers, fsync on, data in a temporary directory) after the tservers are stopped, runs the 1-group workload
(same concurrency, value size, duration and entry cap) and the sequential put and read against its leader
through etcd's gRPC API (aetcd, the optional ``bench`` extra, when importable) and its JSON gRPC gateway
(``/v3/kv/put``, ``/v3/kv/range`` over aiohttp), and prints both sides with their ratio. Each phase is
bounded by a count and a time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import importlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kudu_async as kudu
import kudu_async.aio
from kudu_async.common.errors import KuduBadStatus, KuduNotTheLeader
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster

# Every put's value, on both sides.
VALUE = b"x" * 32


class CpuMeter:
    """CPU seconds (user + system) of the processes of the side being measured, over each phase: with
    the machine shared, CPU per entry is the figure that survives the load."""

    def __init__(self) -> None:
        self.procs: dict[str, int] = {}  # name -> pid; this process is always counted as "client"
        self._start: dict[str, float] = {}
        self.used: dict[str, float] = {}

    @staticmethod
    def seconds(pid: int | None) -> float:
        """CPU seconds a process has used; this process with None."""
        if pid is None:
            return time.process_time()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def _all(self) -> dict[str, float]:
        out = {name: self.seconds(pid) for name, pid in self.procs.items()}
        out["client"] = self.seconds(None)
        return out

    def start(self) -> None:
        self._start = self._all()

    def stop(self) -> None:
        now = self._all()
        self.used = {k: now[k] - self._start.get(k, now[k]) for k in now}

    def per_entry(self, entries: int) -> str:
        """``cpu/entry: ts0 0.61 ms, ... client 0.30 ms`` for the last phase."""
        if not self.used or entries <= 0:
            return "cpu/entry: n/a"
        parts = [f"{k} {v * 1000 / entries:.2f} ms" for k, v in self.used.items()]
        return "cpu/entry: " + ", ".join(parts)


CLK_TCK = os.sysconf("SC_CLK_TCK")
METER = CpuMeter()


async def find_leaders(
    rpc: RpcClient, cluster: MiniCluster, groups: list[str], timeout_s: float = 30
) -> dict[str, str]:
    leaders: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(leaders) < len(groups) and time.monotonic() < deadline:
        for ts in cluster.tservers:
            st = await rpc.call(ts.rpc_address, "Consensus", "GetState", {})
            for r in st["replicas"]:
                if r.get("role") == "LEADER" and r["group"] in groups:
                    leaders[r["group"]] = ts.rpc_address
        if len(leaders) < len(groups):
            await asyncio.sleep(0.2)
    if len(leaders) < len(groups):
        raise SystemExit(f"only {len(leaders)} of {len(groups)} groups elected a leader")
    return leaders


async def drive(
    concurrency: int,
    max_ops: int,
    seconds: float,
    step: int,
    op: Callable[[int], Awaitable[Any]],
    errors_of: tuple[type[Exception], ...] = (KuduBadStatus,),
) -> tuple[list[float], float, int]:
    """``concurrency`` workers, each awaiting ``op(i)`` (``step`` entries from entry ``i``) until ``max_ops``
    entries or ``seconds``: (each entry's latency, elapsed seconds, entries that failed with ``errors_of``)."""
    latencies: list[float] = []
    errors = 0
    next_op = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal next_op, errors
        while next_op < max_ops and time.monotonic() < deadline:
            i = next_op
            next_op += step
            t0 = time.perf_counter()
            try:
                await op(i)
                latencies.extend([time.perf_counter() - t0] * step)
            except errors_of:
                errors += step

    t0 = time.perf_counter()
    METER.start()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    METER.stop()
    return latencies, time.perf_counter() - t0, errors


async def run_phase(
    rpc: RpcClient, leaders: dict[str, str], concurrency: int, max_ops: int, seconds: float, batch: int = 1
) -> Stats:
    groups = list(leaders)

    async def op(i: int) -> None:
        g = groups[(i // batch) % len(groups)]
        if batch == 1:
            await rpc.call(leaders[g], "TestKV", "Put", {"group": g, "key": f"k{i}", "value": VALUE}, timeout_s=10)
        else:
            items = [[f"k{j}", VALUE] for j in range(i, i + batch)]
            await rpc.call(leaders[g], "TestKV", "PutBatch", {"group": g, "items": items}, timeout_s=10)

    latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, batch, op)
    return report(
        f"groups={len(groups)} concurrency={concurrency} entries/RPC={batch}",
        latencies,
        elapsed,
        f"errors {errors}",
        errors=errors,
    )


@dataclasses.dataclass(frozen=True)
class Stats:
    """A phase's figures, for the side-by-side summary."""

    rate: float
    p50_ms: float
    p99_ms: float
    errors: int = 0


def report(
    label: str, latencies: list[float], elapsed: float, extra: str, what: str = "committed entries", errors: int = 0
) -> Stats:
    """Print a phase's completed operations/s and their latency percentiles."""
    lat = sorted(latencies)

    def p(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    stats = Stats(len(lat) / elapsed if elapsed > 0 else float("nan"), p(0.50), p(0.99), errors)
    print(f"{label}: {what}/s {stats.rate:,.0f} ({len(lat)} in {elapsed:.1f}s, {extra})")
    print(
        f"{label}: latency p50 {stats.p50_ms:.2f} ms, p99 {stats.p99_ms:.2f} ms, mean "
        f"{(statistics.mean(lat) * 1000 if lat else float('nan')):.2f} ms"
    )
    print(f"{label}: {METER.per_entry(len(lat))}")
    return stats


class Coalescer:
    """What a Kudu client's session does with concurrent writes to one tablet: entries submitted while
    calls to their leader are in flight wait, and leave together in the next call (TestKV/PutBatch), with
    at most ``in_flight`` calls per leader. Each entry's latency is still its own, submit to commit.

    A call leaves at the end of the loop turn in which its first entry was submitted (no timer, no added
    wait): the proposers a finished call releases all submit again in that turn and go out together.
    Sending at the first submit instead sent the first of them alone and split the rest into calls that
    then travelled in lockstep (16 entries per call, the Raft log idle between rounds)."""

    def __init__(self, rpc: RpcClient, group: str, address: str, in_flight: int, max_batch: int) -> None:
        self.rpc, self.group, self.address = rpc, group, address
        self.in_flight, self.max_batch = in_flight, max_batch
        self.queue: list[tuple[list[Any], asyncio.Future[None]]] = []
        self.sending = 0
        self.calls = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self._pump_scheduled = False

    def submit(self, key: str, value: bytes) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self.queue.append(([key, value], fut))
        if not self._pump_scheduled:
            self._pump_scheduled = True
            loop.call_soon(self._scheduled_pump)
        return fut

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    def _pump(self) -> None:
        while self.queue and self.sending < self.in_flight:
            batch, self.queue = self.queue[: self.max_batch], self.queue[self.max_batch :]
            self.sending += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _send(self, batch: list[tuple[list[Any], asyncio.Future[None]]]) -> None:
        try:
            await self.rpc.call(
                self.address,
                "TestKV",
                "PutBatch",
                {"group": self.group, "items": [item for item, _ in batch]},
                timeout_s=10,
            )
            for _, fut in batch:
                fut.set_result(None)
        except KuduBadStatus as e:
            for _, fut in batch:
                fut.set_exception(e)
        finally:
            self.calls += 1
            self.sending -= 1
            self._pump()


async def run_coalesced(
    rpc: RpcClient, leaders: dict[str, str], concurrency: int, max_ops: int, seconds: float, in_flight: int = 2
) -> None:
    """``concurrency`` proposers, each with one small entry outstanding at a time, through Coalescers."""
    groups = list(leaders)
    batchers = {g: Coalescer(rpc, g, leaders[g], in_flight, 1000) for g in groups}

    def op(i: int) -> Awaitable[None]:
        return batchers[groups[i % len(groups)]].submit(f"c{i}", VALUE)

    latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, 1, op)
    calls = sum(b.calls for b in batchers.values())
    report(
        f"groups={len(groups)} proposers={concurrency} one entry each, coalesced by the client "
        f"(<= {in_flight} calls in flight per leader)",
        latencies,
        elapsed,
        f"errors {errors}, {len(latencies) / max(1, calls):.1f} entries per call",
    )


SEQ_MAX_OPS = 2_000
# Sequential phases stop at SEQ_MAX_OPS or this many seconds (or --seconds if lower).
SEQ_SECONDS = 3.0


async def run_sequential(
    name: str,
    put: Callable[[str, bytes], Awaitable[None]],
    get: Callable[[str], Awaitable[bool]],
    seconds: float,
    errors_of: tuple[type[Exception], ...],
) -> tuple[Stats, Stats]:
    """One client, one request at a time: puts of new keys, then linearizable point reads of those keys
    (``get`` says whether the key was found; a written key that is missing ends the run)."""

    async def put_one(i: int) -> None:
        await put(f"s{i}", VALUE)

    latencies, elapsed, errors = await drive(1, SEQ_MAX_OPS, seconds, 1, put_one, errors_of)
    written = max(1, len(latencies))
    put_stats = report(f"{name} sequential put (1 client)", latencies, elapsed, f"errors {errors}", "puts", errors)

    async def get_one(i: int) -> None:
        if not await get(f"s{i % written}"):
            raise SystemExit(f"{name}: key s{i % written} written by the sequential put phase was not found")

    latencies, elapsed, errors = await drive(1, SEQ_MAX_OPS, seconds, 1, get_one, errors_of)
    get_stats = report(
        f"{name} sequential linearizable point read (1 client)", latencies, elapsed, f"errors {errors}", "reads", errors
    )
    return put_stats, get_stats


async def run_sequential_kudu(rpc: RpcClient, group: str, leader: str, seconds: float) -> tuple[Stats, Stats]:
    """On one TestKV group: Put, then Get with ``linearizable`` (a read index round, as etcd's default range).
    A leader change (elections happen on a loaded machine) sends the next requests to the new leader."""
    at = {"leader": leader}

    async def call(method: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            out: dict[str, Any] = await rpc.call(at["leader"], "TestKV", method, body, timeout_s=10)
            return out
        except KuduNotTheLeader as e:
            if e.details.get("leader_address"):
                at["leader"] = str(e.details["leader_address"])
            raise

    async def put(key: str, value: bytes) -> None:
        await call("Put", {"group": group, "key": key, "value": value})

    async def get(key: str) -> bool:
        return bool((await call("Get", {"group": group, "key": key, "linearizable": True}))["found"])

    return await run_sequential("kudu_async (1 TestKV group)", put, get, seconds, (KuduBadStatus,))


IDLE_SETTLE_S = 5.0
IDLE_MEASURE_S = 10.0


async def idle_cpu(
    rpc: RpcClient, cluster: MiniCluster, peers: dict[str, str], names: list[str], replicas: int
) -> list[float]:
    """Each tserver's CPU, in percent of a core, with ``replicas`` replicas per tserver (groups added to
    the ones already there) and no requests: what hundreds of idle tablets cost a node."""
    extra = [f"idle-{i}" for i in range(max(0, replicas - len(names)))]
    for g in extra:
        for ts in cluster.tservers:
            await rpc.call(ts.rpc_address, "TestKV", "CreateGroup", {"group": g, "peers": peers})
    await find_leaders(rpc, cluster, extra, timeout_s=60)
    await asyncio.sleep(IDLE_SETTLE_S)
    pids = [ts.pid or 0 for ts in cluster.tservers]
    before = [CpuMeter.seconds(pid) for pid in pids]
    await asyncio.sleep(IDLE_MEASURE_S)
    used = [(CpuMeter.seconds(pid) - b) / IDLE_MEASURE_S * 100 for pid, b in zip(pids, before, strict=True)]
    print(
        f"idle: {len(names) + len(extra)} replicas per tserver, no requests, {IDLE_MEASURE_S:.0f}s: CPU "
        + ", ".join(f"ts{i} {u:.2f} %" for i, u in enumerate(used))
        + " of a core"
    )
    return used


async def run_tablets(
    concurrency: int, max_ops: int, seconds: float, tablets: int, seq_seconds: float
) -> dict[str, Stats]:
    """Single-row inserts of distinct keys (hashed over every tablet) from ``concurrency`` tasks, each with
    its own FLUSH_AUTO_SYNC session: each latency is one apply, one Write RPC to 3 replicas, checked by a
    scan whose row count must equal the inserts acknowledged. Then one client alone: sequential single-row
    inserts through one FLUSH_AUTO_SYNC session, and sequential point reads of those keys (a scan with the
    key pinned by an equality predicate: one Scan RPC to the tablet's leader, READ_LATEST).
    {"tablets", "client_seq", "client_read": Stats}."""
    with tempfile.TemporaryDirectory(prefix="bench-tablets-") as d:
        cluster = MiniCluster(1, 3, base_dir=d)
        cluster.start()
        METER.procs = {"master": cluster.masters[0].pid or 0} | {
            f"ts{i}": ts.pid or 0 for i, ts in enumerate(cluster.tservers)
        }
        try:
            client = await kudu_async.aio.connect(cluster.master_addresses.split(","))
            try:
                b = kudu.schema_builder()
                b.add_column("key").type(kudu.int64).nullable(False).primary_key()
                b.add_column("v", type_=kudu.binary)
                part = kudu.Partitioning().add_hash_partitions(["key"], tablets)
                t0 = time.perf_counter()
                table = await client.create_table("bench_tablets", b.build(), part, n_replicas=3)
                print(
                    f"tablets: 1 master + 3 tservers, fsync on; 1 table of {tablets} hash tablets x 3 replicas "
                    f"created in {time.perf_counter() - t0:.1f}s"
                )
                # Not timed: a scan of the empty table brings every tablet's locations into the meta cache.
                empty = (await table.scanner().set_projected_column_names(["key"]).to_arrow()).num_rows
                if empty:
                    raise SystemExit(f"tablets phase: the new table already holds {empty} rows")
                sessions: dict[asyncio.Task[Any] | None, kudu_async.aio.AsyncSession] = {}

                async def insert(i: int) -> None:
                    task = asyncio.current_task()
                    session = sessions.get(task)
                    if session is None:
                        session = sessions[task] = client.new_session(
                            flush_mode=kudu.FLUSH_AUTO_SYNC, timeout_ms=10_000
                        )
                    await session.apply(table.new_insert({"key": i, "v": VALUE}))

                latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, 1, insert)
                for session in sessions.values():
                    await session.close()
                stats = report(
                    f"tablets={tablets} sessions={concurrency} FLUSH_AUTO_SYNC, 1 row/apply",
                    latencies,
                    elapsed,
                    f"errors {errors}",
                    "rows",
                    errors,
                )
                rows = (await table.scanner().set_projected_column_names(["key"]).to_arrow()).num_rows
                if rows != len(latencies):
                    raise SystemExit(
                        f"tablets phase: a scan counted {rows} rows, {len(latencies)} inserts were acknowledged"
                    )
                print(f"tablets={tablets}: scan counted {rows} rows = inserts acknowledged")
                out = {"tablets": stats}
                session = client.new_session(flush_mode=kudu.FLUSH_AUTO_SYNC, timeout_ms=10_000)
                base = 1 << 40  # above every key of the concurrent phase

                async def put(key: str, value: bytes) -> None:
                    await session.apply(table.new_insert({"key": base + int(key[1:]), "v": value}))

                async def get(key: str) -> bool:
                    found = await table.scanner().add_predicate(table["key"] == base + int(key[1:])).to_arrow()
                    return bool(found.num_rows == 1 and found.column("v")[0].as_py() == VALUE)

                try:
                    out["client_seq"], out["client_read"] = await run_sequential(
                        "kudu_async client (100 tablets)", put, get, seq_seconds, (KuduBadStatus,)
                    )
                finally:
                    await session.close()
                return out
            finally:
                await client.close()
        finally:
            cluster.shutdown()


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (the OS picks them; held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class EtcdError(Exception):
    """An etcd request that failed (HTTP error status or a gateway error body)."""


class Etcd:
    """A 3-member etcd cluster on 127.0.0.1 (default timers, fsync on), reached through its JSON gRPC gateway."""

    def __init__(self, binary: str, base_dir: Path, session: aiohttp.ClientSession) -> None:
        self.binary, self.base_dir, self.session = binary, base_dir, session
        ports = free_ports(6)
        self.client_urls = [f"http://127.0.0.1:{p}" for p in ports[:3]]
        self.peer_urls = [f"http://127.0.0.1:{p}" for p in ports[3:]]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.leader_url = ""

    def start(self) -> None:
        cluster = ",".join(f"e{i}={u}" for i, u in enumerate(self.peer_urls))
        for i in range(3):
            # The child holds its own copy of the descriptor.
            with open(self.base_dir / f"e{i}.log", "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        [
                            self.binary,
                            f"--name=e{i}",
                            f"--data-dir={self.base_dir / f'e{i}'}",
                            f"--listen-client-urls={self.client_urls[i]}",
                            f"--advertise-client-urls={self.client_urls[i]}",
                            f"--listen-peer-urls={self.peer_urls[i]}",
                            f"--initial-advertise-peer-urls={self.peer_urls[i]}",
                            f"--initial-cluster={cluster}",
                            "--initial-cluster-token=bench",
                            "--initial-cluster-state=new",
                            "--listen-metrics-urls=",
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        # Own process group: a Ctrl-C reaches this script, which stops the members in order.
                        start_new_session=True,
                    )
                )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    async def post(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(url + path, json=body) as resp:
            out: dict[str, Any] = await resp.json(content_type=None)
            if resp.status != 200 or "error" in out:
                raise EtcdError(f"etcd {path} -> HTTP {resp.status}: {out}")
            return out

    async def wait_healthy(self, timeout_s: float = 30) -> None:
        """Until every member answers /health with true and they agree on a leader; the leader's client URL
        is where the phases send (as kudu's phases send to each group's leader)."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise EtcdError(f"an etcd member exited with {proc.returncode}; see {self.base_dir}/e*.log")
            try:
                healthy = 0
                leaders: dict[str, str] = {}
                for url in self.client_urls:
                    async with self.session.get(url + "/health") as resp:
                        healthy += (await resp.json(content_type=None)).get("health") == "true"
                    st = await self.post(url, "/v3/maintenance/status", {})
                    leaders[st["header"]["member_id"]] = url
                    leader_id = st["leader"]
                if healthy == 3 and leader_id in leaders:
                    self.leader_url = leaders[leader_id]
                    return
                last = f"{healthy} of 3 healthy"
            except (aiohttp.ClientError, EtcdError, KeyError) as e:
                last = repr(e)
            await asyncio.sleep(0.2)
        raise EtcdError(f"etcd not healthy after {timeout_s:.0f}s ({last}); see {self.base_dir}/e*.log")


class EtcdGateway:
    """etcd's JSON gRPC gateway over aiohttp (``/v3/kv/put``, ``/v3/kv/range``): no dependency beyond ours."""

    name = "etcd JSON gateway"
    errors_of: tuple[type[Exception], ...] = (aiohttp.ClientError, asyncio.TimeoutError, EtcdError)

    def __init__(self, etcd: Etcd) -> None:
        self.etcd = etcd

    async def put(self, key: str, value: bytes) -> None:
        body = {"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value).decode()}
        await self.etcd.post(self.etcd.leader_url, "/v3/kv/put", body)

    async def get(self, key: str) -> bool:
        """A linearizable range of one key (etcd's default): whether it exists."""
        out = await self.etcd.post(
            self.etcd.leader_url, "/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()}
        )
        return bool(out.get("kvs"))

    async def close(self) -> None:
        """The session belongs to the cluster."""


class EtcdGrpc:
    """etcd's gRPC API through aetcd (asyncio, grpcio), the optional ``bench`` extra."""

    name = "etcd gRPC (aetcd)"

    def __init__(self, aetcd: Any, leader_url: str) -> None:
        host, _, port = leader_url.removeprefix("http://").rpartition(":")
        self.client = aetcd.Client(host=host, port=int(port), timeout=10)
        self.errors_of: tuple[type[Exception], ...] = (aetcd.exceptions.ClientError,)

    async def put(self, key: str, value: bytes) -> None:
        await self.client.put(key.encode(), value)

    async def get(self, key: str) -> bool:
        """A linearizable range of one key (etcd's default): whether it exists."""
        return await self.client.get(key.encode()) is not None

    async def close(self) -> None:
        await self.client.close()


@contextlib.asynccontextmanager
async def etcd_cluster(binary: str) -> AsyncIterator[Etcd]:
    """A running, healthy etcd cluster; stopped and its data removed on exit, also on errors and Ctrl-C."""
    base = Path(tempfile.mkdtemp(prefix="bench-etcd-"))
    try:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=10)
        ) as session:
            etcd = Etcd(binary, base, session)
            try:
                etcd.start()
                await etcd.wait_healthy()
                yield etcd
            finally:
                etcd.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def load_aetcd() -> tuple[Any, str]:
    """The aetcd module, or None and why not (it is in the optional ``bench`` extra)."""
    try:
        return importlib.import_module("aetcd"), ""
    except ImportError as e:
        return None, f"etcd gRPC client skipped: aetcd not importable ({e}; pip install 'kudu_async[bench]')"


async def run_etcd(
    binary: str, aetcd: Any, concurrency: int, max_ops: int, seconds: float, seq_seconds: float
) -> dict[str, dict[str, Stats]]:
    """The 1-group workload and the sequential put and read against one etcd cluster, through each client:
    {client name: {"many", "seq", "read": Stats}}."""
    out: dict[str, dict[str, Stats]] = {}
    async with etcd_cluster(binary) as etcd:
        print(f"etcd: 3 members on 127.0.0.1, default timers, fsync on; requests go to the leader {etcd.leader_url}")
        METER.procs = {f"etcd{i}": proc.pid for i, proc in enumerate(etcd.procs)}
        clients: list[EtcdGateway | EtcdGrpc] = []
        if aetcd is not None:
            clients.append(EtcdGrpc(aetcd, etcd.leader_url))
        clients.append(EtcdGateway(etcd))
        for client in clients:
            try:

                async def put(i: int, client: EtcdGateway | EtcdGrpc = client) -> None:
                    await client.put(f"k{i}", VALUE)

                latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, 1, put, client.errors_of)
                many = report(
                    f"{client.name} concurrency={concurrency} entries/RPC=1",
                    latencies,
                    elapsed,
                    f"errors {errors}",
                    errors=errors,
                )
                seq, read = await run_sequential(client.name, client.put, client.get, seq_seconds, client.errors_of)
                out[client.name] = {"many": many, "seq": seq, "read": read}
            finally:
                await client.close()
    return out


def summary(
    kudu: dict[str, Stats],
    etcd: dict[str, dict[str, Stats]],
    notes: list[str],
    concurrency: int,
    idle: list[float],
    idle_replicas: int,
) -> None:
    """Both sides and their ratio: throughput kudu/etcd (above 1 is kudu ahead), latency kudu/etcd (below 1
    is kudu ahead)."""

    def div(a: float, b: float) -> float:
        return a / b if b else float("nan")

    def side(name: str, st: Stats, rate: bool) -> str:
        r = f"{st.rate:>7,.0f}/s " if rate else ""
        e = f" ({st.errors} errors)" if st.errors else ""
        return f"    {name:<20} {r}p50 {st.p50_ms:6.2f} ms  p99 {st.p99_ms:6.2f} ms{e}"

    print()
    print("summary" + "".join(f"\n  {n}" for n in notes))
    for key, label, rate in (
        ("many", f"1 group, 1 entry/RPC, {concurrency} clients", True),
        ("seq", "sequential put, 1 client", False),
        ("read", "sequential linearizable point read, 1 client", False),
    ):
        print(f"  {label}:")
        k = kudu[key]
        print(side("kudu_async", k, rate))
        for name, figures in etcd.items():
            e = figures[key]
            ratio = f"throughput {div(k.rate, e.rate):.2f}x, " if rate else ""
            print(
                f"{side(name, e, rate)}  | kudu/etcd {ratio}p50 {div(k.p50_ms, e.p50_ms):.2f}x, "
                f"p99 {div(k.p99_ms, e.p99_ms):.2f}x"
            )
    print(f"  many groups / tablets (--groups, --tablets), 1 entry/RPC, {concurrency} clients:")
    print(side("TestKV groups", kudu["groups"], True))
    if "tablets" in kudu:
        print(side("tablets, AUTO_SYNC", kudu["tablets"], True) + "  (goal: at least 3,000/s)")
    if "client_seq" in kudu:
        print("  through the public client (100-tablet table, 1 client):")
        print(side("single-row write", kudu["client_seq"], False) + "  (goal: p50, p99 at most etcd's put)")
        print(side("point read (Scan)", kudu["client_read"], False) + "  (goal: p50 at most half etcd's put p50)")
    for name, figures in etcd.items():
        put = figures["seq"]
        print(
            f"  kudu_async TestKV sequential read p50 / {name} sequential put p50: "
            f"{div(kudu['read'].p50_ms, put.p50_ms):.2f}x (goal: at most 0.5x)"
        )
        if "client_seq" in kudu:
            w, r = kudu["client_seq"], kudu["client_read"]
            print(
                f"  kudu_async client write / {name} sequential put: p50 {div(w.p50_ms, put.p50_ms):.2f}x, "
                f"p99 {div(w.p99_ms, put.p99_ms):.2f}x (goal: at most 1x); client point read p50 / put p50: "
                f"{div(r.p50_ms, put.p50_ms):.2f}x (goal: at most 0.5x)"
            )
    if idle:
        print(
            f"  idle tserver, {idle_replicas} replicas: "
            + ", ".join(f"{u:.2f} %" for u in idle)
            + " of a core (goal: under 3 %)"
        )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--ops", type=int, default=50_000, help="max entries per phase")
    ap.add_argument("--seconds", type=float, default=10.0, help="max seconds per phase")
    ap.add_argument("--groups", type=int, default=100, help="groups in the multi-group phase")
    ap.add_argument("--batch", type=int, default=100, help="entries per RPC in the batched phases")
    ap.add_argument("--in-flight", type=int, default=2, help="calls in flight per leader in the coalesced phases [2]")
    ap.add_argument("--tablets", type=int, default=100, help="hash tablets of the table in the tablet phase [100]")
    ap.add_argument("--no-tablets", action="store_true", help="skip the tablet phase (public client, real table)")
    ap.add_argument("--no-etcd", action="store_true", help="skip the etcd anchor even when etcd is installed")
    ap.add_argument(
        "--idle-replicas",
        type=int,
        default=200,
        help="replicas per tserver for the idle CPU figure, measured after the TestKV phases (0: skip) [200]",
    )
    return ap.parse_args()


async def main() -> None:
    args = parse_args()
    etcd_binary = None if args.no_etcd else shutil.which("etcd")
    aetcd = None
    if args.no_etcd:
        notes = ["etcd anchor skipped: --no-etcd"]
    elif etcd_binary is None:
        notes = ["etcd anchor skipped: no etcd binary on PATH (Debian: apt-get install etcd-server etcd-client)"]
    else:
        aetcd, why_not = load_aetcd()
        notes = [f"etcd anchor: {etcd_binary}, through the clients below"] + ([why_not] if why_not else [])
    print("\n".join(notes))
    kudu: dict[str, Stats] = {}
    idle: list[float] = []
    seq_s = min(args.seconds, SEQ_SECONDS)
    with tempfile.TemporaryDirectory(prefix="bench-consensus-") as d:
        cluster = MiniCluster(1, 3, base_dir=d, tserver_flags=["--enable-test-kv", "true"])
        cluster.start()
        METER.procs = {f"ts{i}": ts.pid or 0 for i, ts in enumerate(cluster.tservers)}
        rpc = RpcClient("bench")
        try:
            peers = {ts.uuid: ts.rpc_address for ts in cluster.tservers}
            names = ["g-0"] + [f"m-{i}" for i in range(args.groups)]
            for g in names:
                for ts in cluster.tservers:
                    await rpc.call(ts.rpc_address, "TestKV", "CreateGroup", {"group": g, "peers": peers})
            print("fsync on (log_force_fsync_all=true); 3 tservers on 127.0.0.1; client in this process")
            leaders = await find_leaders(rpc, cluster, names)
            one = {"g-0": leaders["g-0"]}
            many = {g: leaders[g] for g in names[1:]}
            kudu["many"] = await run_phase(rpc, one, args.concurrency, args.ops, args.seconds)
            await run_coalesced(rpc, one, args.concurrency, args.ops * 10, args.seconds, args.in_flight)
            await run_phase(rpc, one, args.concurrency, args.ops * 10, args.seconds, args.batch)
            kudu["groups"] = await run_phase(rpc, many, args.concurrency, args.ops, args.seconds)
            await run_coalesced(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.in_flight)
            await run_phase(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.batch)
            # Elections may have moved g-0's leader while the machine was loaded.
            leader = (await find_leaders(rpc, cluster, ["g-0"]))["g-0"]
            kudu["seq"], kudu["read"] = await run_sequential_kudu(rpc, "g-0", leader, seq_s)
            if args.idle_replicas:
                idle = await idle_cpu(rpc, cluster, peers, names, args.idle_replicas)
        finally:
            await rpc.close()
            cluster.shutdown()
    if not args.no_tablets:
        # Its own cluster, after the TestKV one stopped: no idle groups beside the tablets.
        kudu.update(await run_tablets(args.concurrency, args.ops, args.seconds, args.tablets, seq_s))
    etcd: dict[str, dict[str, Stats]] = {}
    if etcd_binary is not None:
        # After the tservers stopped: each side has the machine to itself.
        try:
            etcd = await run_etcd(etcd_binary, aetcd, args.concurrency, args.ops, args.seconds, seq_s)
        except EtcdError as e:
            notes.append(f"etcd anchor failed: {e}")
    summary(kudu, etcd, notes, args.concurrency, idle, args.idle_replicas)


if __name__ == "__main__":
    asyncio.run(main())
