"""Exactly-once writes on real clusters: a Write RPC resent with the same request_id is answered with the
first attempt's result and not applied again, on the same leader, on the leader elected after the first
one was killed, and through the public client when its first attempt timed out after the tablet server
had applied it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.retry import Deadline
from kudu_async.common.row_conversion import encode_row_operations
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.tablet_client import INSERT, UPDATE, TabletClient

pytestmark = pytest.mark.integration
SCHEMA = Schema(
    [ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("val", T.STRING), ColumnSchema("n", T.INT32)], 1
)


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test-client")
    yield client
    await client.close()


def rows(keys: list[int], n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.int64()),
            pa.array([f"v{k}" for k in keys], pa.string()),
            pa.array([n] * len(keys), pa.int32()),
        ],
        schema=SCHEMA.to_arrow(),
    )


class Writes:
    """Builds Write requests for one tablet under one client id."""

    def __init__(self, tablet_id: str) -> None:
        self.tablet_id = tablet_id
        self.client_id = uuid.uuid4().hex

    def req(self, seq: int, batch: pa.RecordBatch, op: int, first: int | None = None) -> dict[str, Any]:
        return {
            "tablet_id": self.tablet_id,
            "schema_version": 0,
            "request_id": {
                "client_id": self.client_id,
                "seq_no": seq,
                "first_incomplete_seq_no": seq if first is None else first,
            },
            **encode_row_operations(batch, [op] * batch.num_rows),
        }


async def values(tc: TabletClient) -> dict[int, int]:
    table, _ = await tc.scan()
    return dict(zip(table.column("key").to_pylist(), table.column("n").to_pylist(), strict=True))


async def tracker_status(cluster: MiniCluster, address: str, tablet_id: str) -> dict[str, Any]:
    node = next(n for n in cluster.nodes if n.rpc_address == address)
    st = await asyncio.get_running_loop().run_in_executor(None, cluster.http_json, node, f"/api/v1/tablets/{tablet_id}")
    out: dict[str, Any] = st["result_tracker"]
    return out


async def start_tablet(cluster: MiniCluster, rpc: RpcClient, tablet_id: str) -> tuple[TabletClient, str]:
    tc = TabletClient(rpc, tablet_id, SCHEMA, {ts.uuid: ts.rpc_address for ts in cluster.tservers})
    await tc.create()
    return tc, await tc.wait_leader()


async def test_a_write_sent_twice_to_the_leader_is_applied_once(mini_cluster_factory: Any, rpc: RpcClient) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc, leader = await start_tablet(cluster, rpc, "eo-same-leader")
    w = Writes(tc.tablet_id)

    insert = w.req(1, rows(list(range(10)), 1), INSERT)
    first = await rpc.call(leader, "TabletServer", "Write", insert)
    assert first["row_errors"] == [] and first["inserted"] == 10
    again = await rpc.call(leader, "TabletServer", "Write", insert)
    assert again == first  # no ALREADY_PRESENT: the retry was not applied

    # An update applied twice would show: a later update (seq 3) must survive the resend of seq 2.
    set_100 = w.req(2, rows([0, 1], 100), UPDATE, first=2)
    r100 = await rpc.call(leader, "TabletServer", "Write", set_100)
    r200 = await rpc.call(leader, "TabletServer", "Write", w.req(3, rows([0, 1], 200), UPDATE, first=2))
    assert r100["updated"] == r200["updated"] == 2 and r200["timestamp"] > r100["timestamp"]
    assert await rpc.call(leader, "TabletServer", "Write", set_100) == r100
    got = await values(tc)
    assert len(got) == 10 and got[0] == got[1] == 200 and got[2] == 1

    st = await tracker_status(cluster, leader, tc.tablet_id)
    assert st["duplicates_answered"] == 2 and st["clients"] == 1 and st["responses"] >= 2

    # The client said seq 2 is complete (first_incomplete_seq_no 4): a resend of it is refused, not applied.
    await rpc.call(leader, "TabletServer", "Write", w.req(4, rows([5], 5), UPDATE, first=4))
    with pytest.raises(KuduInvalidArgument, match="completed and forgotten") as ei:
        await rpc.call(leader, "TabletServer", "Write", set_100)
    assert ei.value.details.get("error") == "STALE_REQUEST"
    assert (await values(tc))[0] == 200

    bad = {**insert, "request_id": {"client_id": "x" * 65, "seq_no": 1, "first_incomplete_seq_no": 1}}
    with pytest.raises(KuduInvalidArgument, match=r"request_id\.client_id"):
        await rpc.call(leader, "TabletServer", "Write", bad)
    bad = {**insert, "request_id": {"client_id": "c", "seq_no": 1, "first_incomplete_seq_no": 5}}
    with pytest.raises(KuduInvalidArgument, match=r"request_id\.first_incomplete_seq_no"):
        await rpc.call(leader, "TabletServer", "Write", bad)
    no_id = {k: v for k, v in insert.items() if k != "request_id"}  # no id: applied as a plain write, not deduplicated
    plain = await rpc.call(leader, "TabletServer", "Write", no_id)
    assert [e["code"] for e in plain["row_errors"]] == ["ALREADY_PRESENT"] * 10


async def test_a_write_resent_to_the_new_leader_after_a_kill_is_applied_once(
    mini_cluster_factory: Any, rpc: RpcClient
) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc, leader = await start_tablet(cluster, rpc, "eo-failover")
    w = Writes(tc.tablet_id)
    insert = w.req(1, rows(list(range(20)), 1), INSERT)
    first = await rpc.call(leader, "TabletServer", "Write", insert)
    set_100 = w.req(2, rows([3], 100), UPDATE, first=1)
    r100 = await rpc.call(leader, "TabletServer", "Write", set_100)
    await rpc.call(leader, "TabletServer", "Write", w.req(3, rows([3], 200), UPDATE, first=1))

    old = next(n for n in cluster.tservers if n.rpc_address == leader)
    cluster.kill_node(old)  # kill -9: the followers learn the results only from the WAL entries they applied
    tc.addresses = {u: a for u, a in tc.addresses.items() if a != leader}
    tc.leader = None
    new_leader = await tc.wait_leader(30.0)
    assert new_leader != leader
    assert await tc._call_leader("Write", insert, 20.0) == first
    assert await tc._call_leader("Write", set_100, 20.0) == r100
    got = await values(tc)
    assert len(got) == 20 and got[3] == 200
    st = await tracker_status(cluster, tc.leader or new_leader, tc.tablet_id)
    assert st["duplicates_answered"] == 2

    # The killed replica replays its WAL at restart and remembers the results too.
    await asyncio.get_running_loop().run_in_executor(None, cluster.restart_node, old)
    deadline = time.monotonic() + 30
    while True:
        try:
            if (await tracker_status(cluster, leader, tc.tablet_id))["responses"] >= 3:
                break
        except Exception:  # still bootstrapping
            pass
        assert time.monotonic() < deadline, "the restarted replica never remembered the writes it replayed"
        await asyncio.sleep(0.2)


def test_a_session_insert_whose_first_attempt_timed_out_is_applied_once(mini_cluster_factory: Any) -> None:
    """Replication is slowed (every consensus call between tservers held 450 ms, under the 1.5 s election
    timeout) past the client's 300 ms RPC timeout: the first attempt of each Write times out on the client after
    the leader proposed it, the retries find it in progress, then completed, and no row comes back
    ALREADY_PRESENT."""
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3, tserver_flags=["--enable-fault-injection", "true"])
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("val", kudu.string)
    with kudu.connect(cluster.master_addresses) as admin:
        t = admin.create_table(
            "eo_session", b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        locs = admin._run(admin._async.meta.locations(t.id, Deadline(10.0, "locations"), refresh=True))
        tablet_ids = [tab.tablet_id for tab in locs.tablets]

        def set_rules(slow: bool) -> None:
            async def go() -> None:
                for ts in cluster.tservers:
                    rules = (
                        [
                            {"action": "delay", "src": "*", "dst": other.rpc_address, "delay_ms": 450}
                            for other in cluster.tservers
                            if other is not ts
                        ]
                        if slow
                        else []
                    )
                    await admin._async.rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": rules})

            admin._run(go())

        with kudu.connect(cluster.master_addresses, rpc_timeout_ms=300) as client:
            table = client.table("eo_session")
            s = client.new_session(timeout_ms=30_000)
            set_rules(True)
            try:
                for k in range(40):
                    s.apply(table.new_insert({"key": k, "val": f"v{k}"}))
                s.flush()
            finally:
                set_rules(False)
            assert s.get_pending_errors() == ([], False)
            assert s.get_write_op_metrics()["successful_inserts"] == 40

        got = sorted(r[0] for r in t.scanner().open().read_all_tuples())
        assert got == list(range(40))
        duplicates = 0
        for ts in cluster.tservers:
            for tid in tablet_ids:
                duplicates += cluster.http_json(ts, f"/api/v1/tablets/{tid}")["result_tracker"]["duplicates_answered"]
        assert duplicates >= 1, "no retry reached a tablet server: the test did not exercise a retry"


async def test_a_write_flushed_before_a_full_restart_is_still_applied_once(
    mini_cluster_factory: Any, rpc: RpcClient
) -> None:
    """Every replica flushes the writes to its files and every tablet server restarts: the writes are not
    applied again at bootstrap, so their results come from their WAL entries; a resend of each is answered
    with the first attempt's result (no ALREADY_PRESENT, and the earlier update does not overwrite the
    later one)."""
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3)
    tc, leader = await start_tablet(cluster, rpc, "eo-restart")
    w = Writes(tc.tablet_id)
    insert = w.req(1, rows(list(range(10)), 1), INSERT)
    first = await rpc.call(leader, "TabletServer", "Write", insert)
    dup = await rpc.call(leader, "TabletServer", "Write", w.req(2, rows([0, 10], 1), INSERT, first=1))
    assert [e["row_index"] for e in dup["row_errors"]] == [0] and dup["inserted"] == 1
    set_100 = w.req(3, rows([3], 100), UPDATE, first=1)
    r100 = await rpc.call(leader, "TabletServer", "Write", set_100)
    await rpc.call(leader, "TabletServer", "Write", w.req(4, rows([3], 200), UPDATE, first=1))
    for ts in cluster.tservers:  # every replica holds the four writes (entries 2-5) in its files
        deadline = time.monotonic() + 20
        while (await rpc.call(ts.rpc_address, "TabletServer", "FlushTablet", {"tablet_id": tc.tablet_id}))[
            "last_flushed_log_index"
        ] < 5:
            assert time.monotonic() < deadline, f"{ts.name} never applied the writes"
            await asyncio.sleep(0.1)

    loop = asyncio.get_running_loop()
    for ts in cluster.tservers:
        await loop.run_in_executor(None, cluster.stop_node, ts)
    for ts in cluster.tservers:
        await loop.run_in_executor(None, cluster.restart_node, ts)
    tc.leader = None
    await tc.wait_leader(30.0)
    assert await tc._call_leader("Write", insert, 20.0) == first
    assert await tc._call_leader("Write", w.req(2, rows([0, 10], 1), INSERT, first=1), 20.0) == dup
    assert await tc._call_leader("Write", set_100, 20.0) == r100
    got = await values(tc)
    assert len(got) == 11 and got[3] == 200
