"""The client while nodes die (kill -9), each test on a cluster of its own: a tablet leader killed under a
stream of session writes, the server a fault-tolerant scan reads from killed mid-scan, and the leader
master killed during DDL and writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.client import Table
from kudu_async.client.meta_cache import TableLocations
from kudu_async.common.retry import Deadline
from kudu_async.testing import MiniCluster
from kudu_async.testing.mini_cluster import NodeProcess

pytestmark = pytest.mark.integration
FAST = ["--heartbeat-interval-ms", "200", "--raft-heartbeat-interval-ms", "250"]


def schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("val", kudu.string)
    return b.build()


def locations(client: kudu.Client, table: Table) -> TableLocations:
    """Fresh tablet locations from the leader master, through the client's own cache."""
    return client._run(client._async.meta.locations(table.id, Deadline(10.0, "locations"), refresh=True))


def node_at(cluster: MiniCluster, rpc_address: str) -> NodeProcess:
    return next(n for n in cluster.nodes if n.rpc_address == rpc_address)


def wait_for(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (v := cond()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.05)
    return v


class Writer(threading.Thread):
    """Upserts batches of rows (key = a counter, val = its text) through one session until stopped; a batch
    is acknowledged when flush() returns. Any exception is kept for the test to re-raise."""

    def __init__(self, client: kudu.Client, table: Table, batch: int = 40) -> None:
        super().__init__(daemon=True)
        self.session = client.new_session(timeout_ms=30_000)
        self.table, self.batch = table, batch
        self.acked: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.flushes = 0

    def run(self) -> None:
        k = 0
        try:
            while not self.stop.is_set():
                keys = list(range(k, k + self.batch))
                for key in keys:
                    self.session.apply(self.table.new_upsert({"key": key, "val": f"v{key}"}))
                self.session.flush()
                self.acked += keys
                self.flushes += 1
                k += self.batch
        except BaseException as e:  # handed to the test thread
            self.error = e

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop.set()
        self.join(timeout_s)
        assert not self.is_alive(), "writer did not finish"
        if self.error is not None:
            raise self.error


def test_kill_a_tablet_leader_during_session_writes(mini_cluster_factory: Any) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3, extra_flags=FAST)
    with kudu.connect(cluster.master_addresses) as client:
        t = client.create_table(
            "writes_under_fire", schema(), kudu.Partitioning().add_hash_partitions(["key"], 3), n_replicas=3
        )
        w = Writer(client, t)
        w.start()
        wait_for(lambda: w.flushes >= 10 or w.error, 30, "ten acknowledged batches")
        leaders = [tab.leader_address for tab in locations(client, t).tablets]
        victim = node_at(cluster, max((a for a in leaders if a), key=leaders.count))
        cluster.kill_node(victim)
        killed_at = w.flushes
        wait_for(lambda: w.flushes >= killed_at + 15 or w.error, 60, "15 more batches after the kill")
        w.finish()
        assert w.session.get_pending_errors() == ([], False)
        got = {r[0]: r[1] for r in t.scanner().set_fault_tolerant().open().read_all_tuples()}
        assert set(w.acked) <= set(got)
        assert all(got[k] == f"v{k}" for k in w.acked)
        metrics = w.session.get_write_op_metrics()
        assert metrics["successful_upserts"] == len(w.acked)
        new_leaders = {tab.leader_address for tab in locations(client, t).tablets}
        assert victim.rpc_address not in new_leaders


def test_kill_the_server_a_fault_tolerant_scan_reads_from(mini_cluster_factory: Any) -> None:
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3, extra_flags=FAST)
    with kudu.connect(cluster.master_addresses) as client:
        t = client.create_table(
            "scan_under_fire", schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        s = client.new_session()
        n = 4000
        for k in range(n):
            s.apply(t.new_insert({"key": k, "val": f"{k:06d}" * 8}))
        s.flush()

        sc = t.scanner().set_fault_tolerant().set_batch_size_bytes(2048).open()
        assert sc._inner is not None
        per_tablet: dict[int, list[int]] = {}
        killed: NodeProcess | None = None
        batches = 0
        servers_after: set[str | None] = set()
        while sc.has_more_rows():
            ti = sc._inner._ti  # the tablet the next batch comes from (the scanner moves on after a tablet's last)
            b = sc.next_batch_arrow()
            per_tablet.setdefault(ti, []).extend(b.column("key").to_pylist())
            batches += 1
            if killed is not None and ti == 0 and sc._inner._ti == 0:
                servers_after.add(sc.get_current_server())
            if batches == 5:  # mid-way through the first tablet (about 55 batches each)
                current = sc.get_current_server()
                assert current is not None
                killed = node_at(cluster, current)
                cluster.kill_node(killed)
        assert killed is not None and not killed.is_running()
        assert servers_after and killed.rpc_address not in servers_after  # the first tablet resumed elsewhere
        assert len(per_tablet[0]) > 1000  # and it went on for a while after the kill
        keys = [k for ks in per_tablet.values() for k in ks]
        assert len(keys) == len(set(keys)), "a row came back twice"
        assert sorted(keys) == list(range(n)), "rows are missing"
        for ks in per_tablet.values():
            assert ks == sorted(ks), "a tablet's rows were not in key order"
        assert batches > 20

        # Without set_fault_tolerant() the same failure is an error once rows were returned, never a silent gap.
        cluster.restart_node(killed)
        sc2 = t.scanner().set_batch_size_bytes(2048).open()
        sc2.next_batch_arrow()
        current = sc2.get_current_server()
        assert current is not None
        cluster.kill_node(node_at(cluster, current))
        with pytest.raises(kudu.KuduBadStatus, match="use set_fault_tolerant"):
            while sc2.has_more_rows():
                sc2.next_batch_arrow()


def test_leader_master_failover_during_ddl_and_writes(mini_cluster_factory: Any) -> None:
    cluster = mini_cluster_factory(num_masters=3, num_tservers=3, extra_flags=FAST)
    with kudu.connect(cluster.master_addresses) as client:
        t = client.create_table(
            "ddl_failover", schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        w = Writer(client, t)
        w.start()
        wait_for(lambda: w.flushes >= 5 or w.error, 30, "five acknowledged batches")
        leader = next(m for m in client.list_masters() if m["role"] == "LEADER")
        old = node_at(cluster, leader["rpc_address"])
        cluster.kill_node(old)

        other = client.create_table(
            "after_failover", schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=3
        )
        new_leader = next(m for m in client.list_masters() if m["role"] == "LEADER")
        assert new_leader["rpc_address"] != old.rpc_address
        alt = client.new_table_alterer(t)
        alt.add_column("extra", kudu.int32, default=1)
        t3 = alt.alter()
        assert t3.schema.names == ["key", "val", "extra"]
        assert set(client.list_tables()) == {"ddl_failover", "after_failover"}
        s = client.new_session()
        s.apply(other.new_insert({"key": 1, "val": "x"}))
        s.flush()
        assert other.scanner().open().read_all_tuples() == [(1, "x")]
        client.delete_table("after_failover")
        assert not client.table_exists("after_failover")
        before = w.flushes
        wait_for(lambda: w.flushes >= before + 5 or w.error, 60, "writes going on after the failover")
        w.finish()
        assert w.session.get_pending_errors() == ([], False)
        got = {r[0]: r for r in client.table(t.name).scanner().open().read_all_tuples()}
        assert set(w.acked) <= set(got)
        assert all(got[k][1] == f"v{k}" for k in w.acked)


def test_a_snapshot_read_on_a_new_leader_sees_what_the_old_one_committed(mini_cluster_factory: Any) -> None:
    """Every consensus call between tservers is held 1 s, so the followers never hear that the killed
    leader committed the batch it acknowledged, and the new leader's own first entry (which commits it)
    takes 1 s more. A snapshot read after the write, sent the moment a new leader appears, must wait for
    that instead of answering from a state machine that has not applied the batch yet."""
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3, tserver_flags=["--enable-fault-injection", "true"])
    part = kudu.Partitioning().set_range_partition_columns([])  # one tablet
    with kudu.connect(cluster.master_addresses) as client:
        t = client.create_table("snapshot_after_failover", schema(), part, n_replicas=3)
        (tablet,) = locations(client, t).tablets
        old = node_at(cluster, wait_for(lambda: locations(client, t).tablets[0].leader_address, 10, "a leader"))
        rpc = client._async.rpc

        def set_faults(on: bool) -> None:
            async def go() -> None:
                for ts in cluster.tservers:
                    if ts.is_running():
                        rules = (
                            [
                                {"action": "delay", "src": "*", "dst": o.rpc_address, "delay_ms": 1000}
                                for o in cluster.tservers
                                if o is not ts
                            ]
                            if on
                            else []
                        )
                        await rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": rules})

            client._run(go())

        def new_leader() -> str | None:
            async def go() -> str | None:
                for ts in cluster.tservers:
                    if ts is not old:
                        st = await rpc.call(ts.rpc_address, "Consensus", "GetState", {"group": tablet.tablet_id})
                        if st.get("role") == "LEADER":
                            return ts.rpc_address
                return None

            return client._run(go())

        set_faults(True)
        s = client.new_session(timeout_ms=30_000)
        n = 500
        for k in range(n):
            s.apply(t.new_insert({"key": k, "val": f"v{k}"}))
        s.flush()  # acknowledged: committed on the old leader and one follower's log
        written_at = client.latest_observed_timestamp()
        cluster.kill_node(old)
        wait_for(new_leader, 30, "a new leader")
        try:
            got = t.scanner().set_snapshot_raw(written_at).open().read_all_tuples()
        finally:
            set_faults(False)
        assert sorted(r[0] for r in got) == list(range(n))


def test_a_snapshot_read_on_a_replaced_leader_is_not_stale(mini_cluster_factory: Any) -> None:
    """The tablet leader is cut off (its peers ignore it) and stopped; another is elected and takes an
    update. Resumed, the old one still believes it leads: a snapshot read at the update's timestamp sent to
    it (through a client whose cache names it the leader) must not answer from its own stale state."""
    cluster = mini_cluster_factory(num_masters=1, num_tservers=3, tserver_flags=["--enable-fault-injection", "true"])
    part = kudu.Partitioning().set_range_partition_columns([])  # one tablet
    with kudu.connect(cluster.master_addresses) as stale_client, kudu.connect(cluster.master_addresses) as client:
        t = stale_client.create_table("snapshot_on_old_leader", schema(), part, n_replicas=3)
        old = node_at(cluster, wait_for(lambda: locations(stale_client, t).tablets[0].leader_address, 10, "a leader"))
        s = stale_client.new_session()
        s.apply(t.new_insert({"key": 1, "val": "old"}))
        s.flush()
        time.sleep(1.2)  # heartbeat rounds give the leader its lease
        others = [ts for ts in cluster.tservers if ts is not old]
        rules = [
            {"action": "drop", "src": "*", "dst": old.rpc_address},
            {"action": "drop", "src": old.name, "dst": "*"},
        ]

        async def set_rules(rs: list[dict[str, Any]]) -> None:
            for ts in others:
                await client._async.rpc.call(ts.rpc_address, "Generic", "SetFaults", {"rules": rs})

        client._run(set_rules(rules))
        cluster.pause_node(old)
        try:
            t2 = client.table(t.name)
            wait_for(
                lambda: locations(client, t2).tablets[0].leader_address not in (None, old.rpc_address),
                30,
                "a new leader",
            )
            s2 = client.new_session(timeout_ms=30_000)
            s2.apply(t2.new_update({"key": 1, "val": "new"}))
            s2.flush()
            at = client.latest_observed_timestamp()
        finally:
            cluster.resume_node(old)
        try:
            sc = t.scanner().set_selection(kudu.LEADER_ONLY).set_snapshot_raw(at).set_timeout_millis(5_000)
            got = sc.open().read_all_tuples()
        except kudu.KuduBadStatus:
            got = None  # refusing is right: the old leader cannot confirm that it still leads
        finally:
            client._run(set_rules([]))
        assert got is None or got == [(1, "new")], f"stale snapshot read: {got}"
