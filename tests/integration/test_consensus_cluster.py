"""Raft in real processes: the TestKV state machine on 3 tablet servers, under kills, pauses and partitions.

CI runs short versions; ``KUDU_LONG_TESTS=1`` (or ``scripts/consensus_fault_tests.sh``) runs the full ones.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kudu_async.common.errors import (
    KuduAborted,
    KuduBadStatus,
    KuduInvalidArgument,
    KuduNetworkError,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTabletFailed,
    KuduTimedOut,
)
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster, NodeProcess

pytestmark = pytest.mark.integration
LONG = os.environ.get("KUDU_LONG_TESTS") == "1"
GROUP = "kv-1"
RETRYABLE = (KuduNotTheLeader, KuduNetworkError, KuduTimedOut, KuduServiceUnavailable, KuduAborted, KuduTabletFailed)


class KV:
    """Drives the TestKV service of a cluster like a client would: finds the leader, retries."""

    def __init__(self, cluster: MiniCluster, group: str = GROUP) -> None:
        self.cluster = cluster
        self.group = group
        self.rpc = RpcClient("test-client")
        self.leader: str | None = None

    async def create(self) -> None:
        peers = {ts.uuid: ts.rpc_address for ts in self.cluster.tservers}
        for ts in self.cluster.tservers:
            await self.rpc.call(ts.rpc_address, "TestKV", "CreateGroup", {"group": self.group, "peers": peers})

    async def state(self, ts: NodeProcess) -> dict:
        return await self.rpc.call(ts.rpc_address, "Consensus", "GetState", {"group": self.group}, timeout_s=2.0)

    async def wait_leader(self, timeout_s: float = 10.0, among: list[NodeProcess] | None = None) -> NodeProcess:
        deadline = time.monotonic() + timeout_s
        nodes = among if among is not None else self.cluster.tservers
        while time.monotonic() < deadline:
            for ts in nodes:
                if not ts.is_running() or ts.paused:
                    continue
                try:
                    st = await self.state(ts)
                except KuduBadStatus:
                    continue
                if st.get("role") == "LEADER":
                    self.leader = ts.rpc_address
                    return ts
            await asyncio.sleep(0.05)
        raise AssertionError(f"no leader among {[n.name for n in nodes]} within {timeout_s}s")

    async def put(self, key: str, value: str, timeout_s: float = 20.0) -> None:
        """Retry until acknowledged; raises only if the deadline passes."""
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        while True:
            targets = [self.leader] if self.leader else []
            targets += [ts.rpc_address for ts in self.cluster.tservers if ts.is_running() and not ts.paused]
            for addr in targets:
                if addr is None:
                    continue
                try:
                    await self.rpc.call(
                        addr, "TestKV", "Put", {"group": self.group, "key": key, "value": value}, timeout_s=2.0
                    )
                    self.leader = addr
                    return
                except KuduNotTheLeader as e:
                    hinted = e.details.get("leader_address")
                    self.leader = hinted if hinted and hinted != addr else None
                except RETRYABLE:
                    self.leader = None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"put {key} not acknowledged within {timeout_s}s")
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 2)

    async def dump(self, ts: NodeProcess, with_data: bool = False) -> dict:
        return await self.rpc.call(ts.rpc_address, "TestKV", "Dump", {"group": self.group, "with_data": with_data})

    async def wait_converged(self, expected_count: int | None = None, timeout_s: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                dumps = [await self.dump(ts) for ts in self.cluster.tservers]
            except KuduServiceUnavailable:
                # A restarted tserver opens its replicas in the background: "still opening" means not yet.
                dumps = []
            digests = {d["digest"] for d in dumps}
            if len(digests) == 1 and (expected_count is None or dumps[0]["count"] == expected_count):
                return dumps[0]
            if time.monotonic() > deadline:
                states = [await self.state(ts) for ts in self.cluster.tservers]
                raise AssertionError(f"replicas did not converge: {dumps}\nraft states: {states}")
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        await self.rpc.close()


@pytest.fixture
async def kv_cluster(tmp_path: Path) -> AsyncIterator[tuple[MiniCluster, KV]]:
    cluster = MiniCluster(
        1, 3, base_dir=tmp_path / "c", tserver_flags=["--enable-test-kv", "true", "--enable-fault-injection", "true"]
    )
    await asyncio.get_running_loop().run_in_executor(None, cluster.start)
    kv = KV(cluster)
    try:
        yield cluster, kv
    finally:
        await kv.close()
        await asyncio.get_running_loop().run_in_executor(None, cluster.shutdown)


async def put_many(kv: KV, prefix: str, n: int, concurrency: int = 32) -> list[str]:
    """Put n keys with bounded concurrency; returns the keys acknowledged."""
    acked: list[str] = []
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            key = f"{prefix}-{i}"
            await kv.put(key, f"v{i}")
            acked.append(key)

    await asyncio.gather(*(one(i) for i in range(n)))
    return acked


async def test_three_nodes_elect_a_leader_fast_and_replicate_identically(kv_cluster) -> None:
    cluster, kv = kv_cluster
    t0 = time.monotonic()
    await kv.create()
    await kv.wait_leader(timeout_s=3.0)
    assert time.monotonic() - t0 < 3.0
    n = 10_000 if LONG else 2_000
    await put_many(kv, "k", n, concurrency=64)
    leader = await kv.wait_leader()
    batch = {"group": GROUP, "items": [[f"b{i}", f"v{i}"] for i in range(500)]}
    got = await kv.rpc.call(leader.rpc_address, "TestKV", "PutBatch", batch)
    assert got["last_index"] - got["first_index"] == 499
    with pytest.raises(KuduInvalidArgument, match="items"):
        await kv.rpc.call(leader.rpc_address, "TestKV", "PutBatch", {"group": GROUP, "items": [["k"]]})
    n += 500
    final = await kv.wait_converged(expected_count=n)
    assert final["count"] == n
    raft = cluster.http_json(cluster.tservers[0], "/api/v1/raft")
    assert raft["replicas"][0]["group"] == GROUP and raft["replicas"][0]["commit_index"] >= n

    # A follower's acks ride back in the answers to the leader's appends (Kudu's UpdateConsensus): one
    # call per append, not another one back from each follower.
    leader = await kv.wait_leader()
    follower = next(ts for ts in cluster.tservers if ts is not leader)

    def calls_to_leader() -> int:
        return int(cluster.http_json(follower, "/api/v1/raft")["peers"].get(leader.uuid, {}).get("calls", 0))

    before = calls_to_leader()
    for i in range(50):
        await kv.put(f"seq{i}", "v")
    assert calls_to_leader() - before < 10


async def test_leader_kill9_under_load_loses_no_acknowledged_write(kv_cluster) -> None:
    cluster, kv = kv_cluster
    await kv.create()
    leader = await kv.wait_leader()
    load = asyncio.create_task(put_many(kv, "a", 3000 if LONG else 600, concurrency=16))
    await asyncio.sleep(0.5)
    cluster.kill_node(leader)
    acked = await asyncio.wait_for(load, 90)
    others = [ts for ts in cluster.tservers if ts is not leader]
    new_leader = await kv.wait_leader(among=others)
    assert new_leader is not leader
    await kv.put("after-kill", "x")
    await asyncio.get_running_loop().run_in_executor(None, cluster.restart_node, leader)
    final = await kv.wait_converged(timeout_s=30)
    data = (await kv.dump(cluster.tservers[0], with_data=True))["data"]
    missing = [k for k in acked if k not in data]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert "after-kill" in data and final["count"] == len(data)


async def test_paused_leader_is_replaced_and_steps_down_on_resume(kv_cluster) -> None:
    cluster, kv = kv_cluster
    await kv.create()
    leader = await kv.wait_leader()
    await kv.put("before", "1")
    cluster.pause_node(leader)
    try:
        others = [ts for ts in cluster.tservers if ts is not leader]
        new_leader = await kv.wait_leader(among=others, timeout_s=8.0)
        await kv.put("during-pause", "2")
    finally:
        cluster.resume_node(leader)
    deadline = time.monotonic() + 10
    while (await kv.state(leader))["role"] == "LEADER":
        assert time.monotonic() < deadline, "resumed old leader never stepped down"
        await asyncio.sleep(0.05)
    st = await kv.state(leader)
    assert st["leader"] == new_leader.uuid
    await kv.wait_converged()


async def test_minority_partition_cannot_commit_and_logs_converge_after_heal(kv_cluster) -> None:
    cluster, kv = kv_cluster
    await kv.create()
    leader = await kv.wait_leader()
    await kv.put("base", "0")
    names = [ts.name for ts in cluster.tservers]
    isolated = leader
    # Cut the leader off from the other tservers, both directions.
    rules = [
        {"action": "drop", "src": isolated.name, "dst": ts.rpc_address} for ts in cluster.tservers if ts is not isolated
    ]
    rules += [{"action": "drop", "src": n, "dst": isolated.rpc_address} for n in names if n != isolated.name]
    for ts in cluster.tservers:
        await kv.rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": rules})
    with pytest.raises(RETRYABLE):
        await kv.rpc.call(
            isolated.rpc_address, "TestKV", "Put", {"group": GROUP, "key": "minority", "value": "x"}, timeout_s=3.0
        )
    majority = [ts for ts in cluster.tservers if ts is not isolated]
    new_leader = await kv.wait_leader(among=majority, timeout_s=10.0)
    await kv.rpc.call(
        new_leader.rpc_address, "TestKV", "Put", {"group": GROUP, "key": "majority", "value": "y"}, timeout_s=5.0
    )
    for ts in cluster.tservers:
        await kv.rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": []})
    await kv.wait_converged(timeout_s=20)
    data = (await kv.dump(isolated, with_data=True))["data"]
    assert "majority" in data and "minority" not in data


async def test_repeated_kill9_under_fsync_load_recovers_every_time(kv_cluster) -> None:
    cluster, kv = kv_cluster
    await kv.create()
    await kv.wait_leader()
    acked: list[str] = []
    rounds = 20 if LONG else 3
    for r in range(rounds):
        victim = cluster.tservers[r % 3]
        load = asyncio.create_task(put_many(kv, f"r{r}", 200, concurrency=16))
        await asyncio.sleep(0.2)
        cluster.kill_node(victim)
        acked += await asyncio.wait_for(load, 90)
        await asyncio.get_running_loop().run_in_executor(None, cluster.restart_node, victim)
    await kv.wait_converged(timeout_s=30)
    data = (await kv.dump(cluster.tservers[0], with_data=True))["data"]
    assert all(k in data for k in acked)


async def wait_replica_open(kv: KV, ts: NodeProcess, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            st = await kv.state(ts)
            if st["state"] != "INITIALIZING":
                return st
        except KuduBadStatus:
            pass
        assert time.monotonic() < deadline, f"replica on {ts.name} never opened"
        await asyncio.sleep(0.05)


def _wal_segments(ts: NodeProcess) -> list[Path]:
    return sorted((ts.data_dir / "consensus" / GROUP / "wal").glob("wal-*"))


async def test_torn_wal_tail_is_recovered_and_mid_log_damage_fails_only_the_replica(kv_cluster) -> None:
    cluster, kv = kv_cluster
    await kv.create()
    await kv.wait_leader()
    await put_many(kv, "t", 200)
    await kv.wait_converged(expected_count=200)
    # Torn tail: the node died half-way through writing a frame it never acknowledged. (Cutting into
    # frames it *had* acknowledged would break Raft's durability assumption, not test recovery.)
    ts = cluster.tservers[0]
    await asyncio.get_running_loop().run_in_executor(None, cluster.kill_node, ts)
    seg = _wal_segments(ts)[-1]
    size_before = seg.stat().st_size
    with seg.open("ab") as fh:
        fh.write(b"\x00\x00\x10\x00" + os.urandom(40))  # a header claiming 4 KiB, then a few bytes
    await asyncio.get_running_loop().run_in_executor(None, cluster.restart_node, ts)
    st = await wait_replica_open(kv, ts)  # tservers reopen replicas in the background after they serve
    assert st["state"] == "RUNNING"
    assert seg.stat().st_size == size_before  # the torn frame was cut off, nothing else
    assert '"truncating torn WAL tail"' in ts.log_path.read_text()
    await kv.put("after-torn", "1")
    await kv.wait_converged(expected_count=201)
    # A flipped byte in the middle: the replica is FAILED with a clear error, the node keeps serving.
    ts2 = cluster.tservers[1]
    await asyncio.get_running_loop().run_in_executor(None, cluster.kill_node, ts2)
    seg = _wal_segments(ts2)[0]
    data = bytearray(seg.read_bytes())
    data[len(data) // 3] ^= 0xFF
    seg.write_bytes(bytes(data))
    await asyncio.get_running_loop().run_in_executor(None, cluster.restart_node, ts2)
    st = await wait_replica_open(kv, ts2)
    assert st["state"] == "FAILED" and "corrupt" in st["error"]
    assert await kv.rpc.call(ts2.rpc_address, "Generic", "Ping", {}) == {}
    await kv.put("still-writable", "1")  # the other two still form a majority


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_two_hundred_idle_replicas_cost_little_cpu(kv_cluster) -> None:
    cluster, kv = kv_cluster
    peers = {ts.uuid: ts.rpc_address for ts in cluster.tservers}
    n = 200
    for i in range(n):
        for ts in cluster.tservers:
            await kv.rpc.call(ts.rpc_address, "TestKV", "CreateGroup", {"group": f"idle-{i}", "peers": peers})
    await asyncio.sleep(5)  # let every group elect
    ts = cluster.tservers[0]
    assert ts.pid is not None
    c0, t0 = _cpu_seconds(ts.pid), time.monotonic()
    await asyncio.sleep(10)
    share = (_cpu_seconds(ts.pid) - c0) / (time.monotonic() - t0)
    print(f"\nidle CPU of a tserver with {n} replicas: {share * 100:.2f}% of a core")
    assert share < 0.15, f"{share * 100:.1f}% of a core for {n} idle replicas"


async def test_kudu_tool_steps_down_and_transfers_leadership(kv_cluster) -> None:
    import json
    import subprocess
    import sys

    cluster, kv = kv_cluster
    await kv.create()
    leader = await kv.wait_leader()
    servers = ",".join(ts.rpc_address for ts in cluster.tservers)
    target = next(ts for ts in cluster.tservers if ts is not leader)

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kudu_async.tools.cli", *args], capture_output=True, text=True, timeout=30
        )

    masters = cluster.master_addresses
    r = await asyncio.get_running_loop().run_in_executor(
        None,
        admin,
        "tablet",
        "leader_step_down",
        masters,
        GROUP,
        f"-new_leader_uuid={target.uuid}",
        "-servers",
        servers,
    )
    assert r.returncode == 0, r.stderr
    new = await kv.wait_leader(among=[target], timeout_s=10)
    assert new is target
    r = await asyncio.get_running_loop().run_in_executor(
        None, admin, "tablet", "leader_step_down", masters, GROUP, "-abrupt", "-servers", servers
    )
    assert r.returncode == 0, r.stderr
    state = json.loads(
        (
            await asyncio.get_running_loop().run_in_executor(
                None, admin, "tablet", "raft_state", masters, GROUP, "-servers", servers, "-format=json"
            )
        ).stdout
    )
    assert set(state) == {ts.rpc_address for ts in cluster.tservers}
    await kv.put("after-admin", "1")  # a leader is back and the group takes writes


async def test_a_resumed_paused_leader_does_not_serve_stale_lease_reads(kv_cluster) -> None:
    """A leader's lease is counted in ticks, and ticks do not advance while the process is stopped. A
    leader cut off from its peers (they ignore it, so it cannot learn of a new term), stopped past its
    lease, replaced, and resumed must not answer a linearizable read from its old lease: the new leader
    has committed a newer value."""
    cluster, kv = kv_cluster
    await kv.create()
    old = await kv.wait_leader()
    await kv.put("k", "old")
    await asyncio.sleep(1.2)  # heartbeat rounds (every 0.5 s) give the leader its lease
    others = [ts for ts in cluster.tservers if ts is not old]
    rules = [{"action": "drop", "src": "*", "dst": old.rpc_address}, {"action": "drop", "src": old.name, "dst": "*"}]
    for ts in others:
        await kv.rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": rules})
    cluster.pause_node(old)
    try:
        await kv.wait_leader(among=others, timeout_s=8.0)
        await kv.put("k", "new")
    finally:
        cluster.resume_node(old)
    try:
        got = await kv.rpc.call(
            old.rpc_address, "TestKV", "Get", {"group": GROUP, "key": "k", "linearizable": True}, timeout_s=5.0
        )
    except RETRYABLE:
        got = None  # refusing (or timing out) is right: it cannot confirm that it still leads
    assert got is None or got["value"] == "new", f"stale read from the resumed old leader: {got}"
    for ts in others:
        await kv.rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": []})
    await kv.wait_converged()
