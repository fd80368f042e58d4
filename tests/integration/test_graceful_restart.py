"""Quiescing and the graceful SIGTERM on one 1-master, 3-tserver cluster: a quiesced tserver loses its
leaders and refuses new scans; a tserver SIGTERMed and restarted under a write-and-read workload costs the
client no failed operation and no row."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.common.errors import KuduServiceUnavailable
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for
from kudu_async.testing.workload import WriteScanWorkload
from tests.integration.kudu_cli import create_kv_table, kudu_json, kudu_tool

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=1,
        num_tservers=3,
        base_dir=Path(tmp_path_factory.mktemp("graceful")),
        tserver_flags=["--heartbeat-interval-ms", "300"],
    )
    try:
        yield c.start()
    finally:
        c.shutdown()


def leaders_on(cluster: MiniCluster, table: str, uuid: str) -> int:
    described = kudu_json(cluster, "table", "describe", table)
    return sum(1 for t in described["tablets"] for r in t["replicas"] if r["uuid"] == uuid and r["role"] == "LEADER")


async def scan_directly(address: str, tablet_id: str) -> Any:
    rpc = RpcClient("test-client")
    try:
        return await rpc.call(
            address, "TabletServer", "Scan", {"tablet_id": tablet_id, "read_mode": "READ_AT_SNAPSHOT"}
        )
    finally:
        await rpc.close()


def test_quiesce_moves_leaders_away_and_refuses_new_scans(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "quiesce", buckets=6, rows=600)
    ts = max(cluster.tservers, key=lambda t: (leaders_on(cluster, "quiesce", t.uuid), t.name))
    assert leaders_on(cluster, "quiesce", ts.uuid) > 0
    before = kudu_json(cluster, "tserver", "quiesce", "status", ts.rpc_address)
    assert not before["quiescing"] and before["num_leaders"] > 0

    out = kudu_tool(cluster, "tserver", "quiesce", "start", ts.rpc_address).stdout
    assert "quiescing" in out
    status = wait_for(
        lambda: (s := kudu_json(cluster, "tserver", "quiesce", "status", ts.rpc_address))["num_leaders"] == 0 and s,
        15,
        "leaders moved off the quiescing tserver",
    )
    assert status["quiescing"] and status["leader_transfers_started"] >= before["num_leaders"]
    wait_for(lambda: leaders_on(cluster, "quiesce", ts.uuid) == 0, 10, "the master sees no leader there")
    time.sleep(2.0)  # elections elsewhere (or none): a quiescing tserver never wins one back
    assert kudu_json(cluster, "tserver", "quiesce", "status", ts.rpc_address)["num_leaders"] == 0

    tablet = kudu_json(cluster, "table", "describe", "quiesce")["tablets"][0]["tablet_id"]
    with pytest.raises(KuduServiceUnavailable, match="quiescing"):
        asyncio.run(scan_directly(ts.rpc_address, tablet))
    with kudu.connect(cluster.master_addresses.split(",")) as client:  # clients go to the other replicas
        t = client.table("quiesce")
        assert len(t.scanner().set_read_mode(kudu.READ_AT_SNAPSHOT).open().read_all_tuples()) == 600
        assert len(t.scanner().open().read_all_tuples()) == 600

    stopped = kudu_json(cluster, "tserver", "quiesce", "stop", ts.rpc_address)
    assert not stopped["quiescing"]


def test_sigterm_restart_under_load_fails_no_operation(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "rolling", buckets=6, rows=0)
    ts = max(cluster.tservers, key=lambda t: (leaders_on(cluster, "rolling", t.uuid), t.name))
    with WriteScanWorkload(cluster.master_addresses.split(","), "rolling", batch_rows=50) as load:
        load.wait("the workload started", rows=500, scans=2)
        started = time.monotonic()
        exit_code = cluster.stop_node(ts)  # SIGTERM: quiesce, then stop
        took = time.monotonic() - started
        assert exit_code == 0
        quiesced = [json.loads(line) for line in ts.log_path.read_text().splitlines() if "quiesced before" in line]
        assert quiesced and quiesced[-1]["leaders_left"] == 0 and quiesced[-1]["leader_transfers"] > 0, quiesced
        mid = load.written
        cluster.restart_node(ts)
        load.wait("writes went on after the restart", rows=mid + 500)
        time.sleep(1.0)
    assert not load.errors, load.errors
    print(
        f"\nSIGTERM stop of {ts.name} took {took:.2f}s ({quiesced[-1]['leader_transfers']} leaderships handed "
        f"over); {load.written} rows written, {load.scans} scans, no error; slowest write {load.slowest_write_s:.2f}s"
    )
    load.check_every_row()
