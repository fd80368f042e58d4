"""``kudu master add|remove`` on a running cluster: one master becomes three (each new one started empty,
added by the tool, copied, promoted), DDL and writes go on, the original leader is killed and the other two
elect a leader, the dead one is removed and the cluster stays healthy; tablet servers and a client that
only ever knew the first master follow the master list by themselves. Started again, the removed master
notices it is out and stops serving."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.testing.mini_cluster import NodeProcess
from kudu_async.testing.waits import NOT_READY, wait_for
from kudu_async.tools import cli

pytestmark = pytest.mark.integration
TSERVER_FLAGS = ["--heartbeat-interval-ms", "300"]


def _schema() -> kudu.Schema:
    b = kudu.schema_builder()
    b.add_column("key").type(kudu.int64).nullable(False).primary_key()
    b.add_column("val", type_=kudu.string)
    return b.build()


def _fill(client: kudu.Client, name: str, lo: int, hi: int) -> kudu.Table:
    if not client.table_exists(name):
        client.create_table(name, _schema(), kudu.Partitioning().add_hash_partitions(["key"], 2), n_replicas=1)
    t = client.table(name)
    s = client.new_session(timeout_ms=30_000)
    s.apply_arrow(
        t, pa.table({"key": pa.array(range(lo, hi), pa.int64()), "val": [str(k) for k in range(lo, hi)]}), "upsert"
    )
    return t


def _keys(t: kudu.Table) -> list[int]:
    return sorted(t.scanner().set_read_mode(kudu.READ_LATEST).open().to_arrow().column("key").to_pylist())


def _voters(cluster: MiniCluster, node: NodeProcess) -> set[str]:
    cat = cluster.http_json(node, "/api/v1/status").get("catalog") or {}
    return set(cat.get("voters", ()))


def _sees(cluster: MiniCluster, node: NodeProcess, voters: set[str]) -> Callable[[], bool]:
    return lambda: _voters(cluster, node) == voters


def _status_is(cluster: MiniCluster, node: NodeProcess, key: str, value: Any) -> Callable[[], bool]:
    return lambda: bool(cluster.http_json(node, "/api/v1/status")[key] == value)


def test_masters_added_killed_and_removed_while_the_cluster_serves(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        MiniCluster(num_masters=1, num_tservers=1, base_dir=tmp_path / "c", tserver_flags=TSERVER_FLAGS) as c,
        kudu.connect([c.masters[0].rpc_address]) as client,
    ):
        original = c.masters[0]
        t = _fill(client, "before", 0, 100)
        new = c.plan_masters(2)
        for n in new:
            c.restart_node(n)  # its first start: empty data directory, all three masters in --master-addresses
            assert _voters(c, n) == set(), "a joining master must not create a catalog of its own"
            rc = cli.main(["master", "add", original.rpc_address, n.rpc_address, "-wait_secs=30", "-format=json"])
            out = capsys.readouterr()
            assert rc == 0, out.err
            rows = json.loads(out.out)
            assert {r["rpc-addresses"]: r["member_type"] for r in rows}[n.rpc_address] == "VOTER"
        uuids = {m.uuid for m in c.masters}
        for m in c.masters:  # every master holds the catalog with all three as voters
            wait_for(_sees(c, m, uuids), 20.0, f"{m.name} seeing three voters", retry_on=NOT_READY)
        # Adding a member again is harmless (Kudu's tool is idempotent too).
        assert cli.main(["master", "add", original.rpc_address, new[0].rpc_address, "-format=json"]) == 0
        capsys.readouterr()
        # The tablet server was started knowing the first master only: it heartbeats the new ones too.
        for m in new:
            wait_for(_status_is(c, m, "num_live_tservers", 1), 20.0, f"the tserver at {m.name}", retry_on=NOT_READY)
        t2 = _fill(client, "after_add", 0, 100)
        # The client was given the first master only: calling the leader, it learns the others.
        every = {m.rpc_address for m in c.masters}
        wait_for(
            lambda: client.list_tables() is not None and set(client.master_addrs) == every,
            20.0,
            "the client's masters",
            retry_on=NOT_READY,
        )

        c.kill_node(original)  # the leader of the catalog until now
        t3 = _fill(client, "after_kill", 0, 50)  # the client finds the new leader among masters it learnt
        leaders = [m for m in new if c.http_json(m, "/api/v1/status")["is_leader"]]
        assert len(leaders) == 1
        survivors = ",".join(m.rpc_address for m in new)
        rc = cli.main(["master", "remove", survivors, original.rpc_address])
        out = capsys.readouterr()
        assert rc == 0, out.err
        assert original.rpc_address not in out.out.split("\n\n")[0]
        for m in new:
            wait_for(_sees(c, m, {n.uuid for n in new}), 20.0, f"{m.name} seeing two voters", retry_on=NOT_READY)
        # Still healthy: DDL, writes and scans on every table, old and new.
        _fill(client, "after_remove", 0, 10)
        assert _keys(t) == list(range(100)) and _keys(t2) == list(range(100)) and _keys(t3) == list(range(50))
        assert {e["uuid"] for e in client.list_masters()} == {n.uuid for n in new}

        # The removed master, started again with its old catalog, finds itself out and stops serving.
        c.restart_node(original)
        wait_for(
            lambda: c.http_json(original, "/api/v1/status")["removed_from_cluster"],
            25.0,
            "the removed master noticing",
            retry_on=NOT_READY,
        )
        assert c.http_json(original, "/api/v1/status")["catalog"] is None
        leader = next(m for m in new if c.http_json(m, "/api/v1/status")["is_leader"])
        assert leader in leaders  # it never disturbed the leader
        _fill(client, "after_return", 0, 10)
        # Removing the leader, or a master that is not one, is refused with the reason.
        assert cli.main(["master", "remove", survivors, leader.rpc_address]) == 1
        assert "can't remove the leader master" in capsys.readouterr().err
        assert cli.main(["master", "remove", survivors, "127.0.0.1:1"]) == 1
        assert "not found" in capsys.readouterr().err
