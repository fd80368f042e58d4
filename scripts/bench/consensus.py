#!/usr/bin/env python3
"""Consensus benchmark: 3 tserver processes, replicated TestKV groups, fsync on.

A client proposes small entries (TestKV/Put to each group's leader) with bounded concurrency and prints
committed entries/s and p50/p99 commit latency, for one group and for many groups at once. Each also
with the same proposers (one entry outstanding each) coalesced by the client into TestKV/PutBatch calls
(what a Kudu session does with concurrent writes to one tablet), and with many entries per RPC from every
proposer (100 x 64 entries in flight: throughput, not latency). Then one client alone: sequential put
latency and sequential linearizable point reads (TestKV/Get) on one group.

When an ``etcd`` binary is on PATH, the same run starts a 3-member etcd cluster on 127.0.0.1 (its default
timers, fsync on, data in a temporary directory) after the tservers are stopped, runs the 1-group workload
(same concurrency, value size and duration) and the sequential put and read against it through etcd's JSON
gRPC gateway (``/v3/kv/put``, ``/v3/kv/range`` over aiohttp), and prints both sides with their ratio. Each
phase is bounded by a count and a time limit.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
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

from kudu_async.common.errors import KuduBadStatus
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster

# Every put's value, on both sides.
VALUE = b"x" * 32


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
    await asyncio.gather(*(worker() for _ in range(concurrency)))
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
SEQ_SECONDS = 5.0


async def run_sequential_kudu(rpc: RpcClient, group: str, leader: str, seconds: float) -> tuple[Stats, Stats]:
    """One client, one call at a time, on one group: TestKV/Put, then linearizable TestKV/Get of those keys
    (a read index round, as etcd's default range)."""

    async def put(i: int) -> None:
        await rpc.call(leader, "TestKV", "Put", {"group": group, "key": f"s{i}", "value": VALUE}, timeout_s=10)

    latencies, elapsed, errors = await drive(1, SEQ_MAX_OPS, seconds, 1, put)
    written = max(1, len(latencies))
    put_stats = report(
        "kudu_async sequential put (1 client, 1 group)", latencies, elapsed, f"errors {errors}", "puts", errors
    )

    async def get(i: int) -> None:
        r = await rpc.call(
            leader, "TestKV", "Get", {"group": group, "key": f"s{i % written}", "linearizable": True}, timeout_s=10
        )
        if not r["found"]:
            raise SystemExit(f"kudu_async: key s{i % written} written by the put phase was not found")

    latencies, elapsed, errors = await drive(1, SEQ_MAX_OPS, seconds, 1, get)
    get_stats = report(
        "kudu_async sequential linearizable point read (1 client, TestKV/Get)",
        latencies,
        elapsed,
        f"errors {errors}",
        "reads",
        errors,
    )
    return put_stats, get_stats


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

    async def put(self, key: str, value: bytes) -> None:
        await self.post(
            self.leader_url,
            "/v3/kv/put",
            {"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value).decode()},
        )

    async def get(self, key: str) -> bytes | None:
        """A linearizable range of one key (etcd's default)."""
        out = await self.post(self.leader_url, "/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = out.get("kvs")
        return base64.b64decode(kvs[0]["value"]) if kvs else None


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


async def run_etcd(
    binary: str, concurrency: int, max_ops: int, seconds: float, seq_seconds: float
) -> tuple[Stats, Stats, Stats]:
    """The 1-group workload and the sequential put and read, against etcd."""
    errors_of = (aiohttp.ClientError, asyncio.TimeoutError, EtcdError)
    async with etcd_cluster(binary) as etcd:
        print(f"etcd: 3 members on 127.0.0.1, default timers, fsync on; JSON gateway on the leader {etcd.leader_url}")

        async def put(i: int) -> None:
            await etcd.put(f"k{i}", VALUE)

        latencies, elapsed, errors = await drive(concurrency, max_ops, seconds, 1, put, errors_of)
        many = report(
            f"etcd concurrency={concurrency} entries/RPC=1", latencies, elapsed, f"errors {errors}", errors=errors
        )

        async def seq_put(i: int) -> None:
            await etcd.put(f"s{i}", VALUE)

        latencies, elapsed, errors = await drive(1, SEQ_MAX_OPS, seq_seconds, 1, seq_put, errors_of)
        written = max(1, len(latencies))
        seq = report("etcd sequential put (1 client)", latencies, elapsed, f"errors {errors}", "puts", errors)

        async def seq_get(i: int) -> None:
            if await etcd.get(f"s{i % written}") is None:
                raise SystemExit(f"etcd: key s{i % written} written by the put phase was not found")

        latencies, elapsed, errors = await drive(1, SEQ_MAX_OPS, seq_seconds, 1, seq_get, errors_of)
        read = report(
            "etcd sequential linearizable point read (1 client, range)",
            latencies,
            elapsed,
            f"errors {errors}",
            "reads",
            errors,
        )
        return many, seq, read


def summary(kudu: dict[str, Stats], etcd: dict[str, Stats] | None, etcd_note: str, concurrency: int) -> None:
    """Both sides and their ratio: throughput kudu/etcd (above 1 is kudu ahead), latency kudu/etcd (below 1
    is kudu ahead)."""

    def div(a: float, b: float) -> float:
        return a / b if b else float("nan")

    def side(name: str, st: Stats, rate: bool) -> str:
        r = f"{st.rate:,.0f}/s " if rate else ""
        e = f" ({st.errors} errors)" if st.errors else ""
        return f"{name} {r}p50 {st.p50_ms:.2f} ms p99 {st.p99_ms:.2f} ms{e}"

    print()
    print(f"summary ({etcd_note}):")
    for key, label, rate in (
        ("many", f"1 group, 1 entry/RPC, {concurrency} clients", True),
        ("seq", "sequential put, 1 client", False),
        ("read", "sequential linearizable point read, 1 client", False),
    ):
        line = f"  {label}: {side('kudu_async', kudu[key], rate)}"
        if etcd is not None:
            k, e = kudu[key], etcd[key]
            ratio = f"throughput {div(k.rate, e.rate):.2f}x, " if rate else ""
            line += (
                f" | {side('etcd', e, rate)} | ratio kudu/etcd: {ratio}"
                f"p50 {div(k.p50_ms, e.p50_ms):.2f}x, p99 {div(k.p99_ms, e.p99_ms):.2f}x"
            )
        print(line)
    if etcd is not None:
        print(
            f"  sequential read p50 / etcd sequential put p50: {div(kudu['read'].p50_ms, etcd['seq'].p50_ms):.2f}x"
            " (goal: at most 0.5x)"
        )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--ops", type=int, default=50_000, help="max entries per phase")
    ap.add_argument("--seconds", type=float, default=10.0, help="max seconds per phase")
    ap.add_argument("--groups", type=int, default=100, help="groups in the multi-group phase")
    ap.add_argument("--batch", type=int, default=100, help="entries per RPC in the batched phases")
    ap.add_argument("--in-flight", type=int, default=2, help="calls in flight per leader in the coalesced phases [2]")
    ap.add_argument("--no-etcd", action="store_true", help="skip the etcd anchor even when etcd is installed")
    args = ap.parse_args()
    etcd_binary = None if args.no_etcd else shutil.which("etcd")
    if args.no_etcd:
        etcd_note = "etcd anchor skipped: --no-etcd"
    elif etcd_binary is None:
        etcd_note = "etcd anchor skipped: no etcd binary on PATH (Debian: apt-get install etcd-server etcd-client)"
    else:
        etcd_note = f"etcd anchor: {etcd_binary} via its JSON gRPC gateway (aiohttp), not the gRPC client"
    print(etcd_note)
    kudu: dict[str, Stats] = {}
    seq_s = min(args.seconds, SEQ_SECONDS)
    with tempfile.TemporaryDirectory(prefix="bench-consensus-") as d:
        cluster = MiniCluster(1, 3, base_dir=d, tserver_flags=["--enable-test-kv", "true"])
        cluster.start()
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
            await run_phase(rpc, many, args.concurrency, args.ops, args.seconds)
            await run_coalesced(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.in_flight)
            await run_phase(rpc, many, args.concurrency, args.ops * 10, args.seconds, args.batch)
            kudu["seq"], kudu["read"] = await run_sequential_kudu(rpc, "g-0", leaders["g-0"], seq_s)
        finally:
            await rpc.close()
            cluster.shutdown()
    etcd: dict[str, Stats] | None = None
    if etcd_binary is not None:
        # After the tservers stopped: each side has the machine to itself.
        try:
            many_e, seq_e, read_e = await run_etcd(etcd_binary, args.concurrency, args.ops, args.seconds, seq_s)
            etcd = {"many": many_e, "seq": seq_e, "read": read_e}
        except EtcdError as e:
            etcd_note = f"etcd anchor failed: {e}"
    summary(kudu, etcd, etcd_note, args.concurrency)


if __name__ == "__main__":
    asyncio.run(main())
