"""Quiescing and the graceful SIGTERM on one 1-master, 3-tserver cluster: a quiesced tserver loses its
leaders and refuses new scans; a tserver SIGTERMed and restarted under a write-and-read workload costs the
client no failed operation and no row."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.common.errors import KuduServiceUnavailable
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
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


def wait_until(what: str, timeout_s: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s (last: {got!r})"
        time.sleep(0.2)


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
    status = wait_until(
        "leaders moved off the quiescing tserver",
        15,
        lambda: (s := kudu_json(cluster, "tserver", "quiesce", "status", ts.rpc_address))["num_leaders"] == 0 and s,
    )
    assert status["quiescing"] and status["leader_transfers_started"] >= before["num_leaders"]
    wait_until("the master sees no leader there", 10, lambda: leaders_on(cluster, "quiesce", ts.uuid) == 0)
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
    stop = threading.Event()
    errors: list[str] = []
    written = [0]
    reads = [0]
    slowest = [0.0]  # the longest flush of a batch, seconds

    def writer() -> None:
        with kudu.connect(cluster.master_addresses.split(",")) as client:
            t = client.table("rolling")
            s = client.new_session()
            key = 0
            while not stop.is_set():
                try:
                    for k in range(key, key + 50):
                        s.apply(t.new_insert({"key": k, "v": f"v{k}"}))
                    began = time.monotonic()
                    s.flush()
                    slowest[0] = max(slowest[0], time.monotonic() - began)
                except Exception as e:
                    errors.append(f"write of keys {key}..{key + 49}: {e!r}")
                    return
                if s.count_pending_errors():
                    errors.append(f"write of keys {key}..{key + 49}: {s.get_pending_errors()[0]}")
                    return
                key += 50
                written[0] = key

    def reader() -> None:
        with kudu.connect(cluster.master_addresses.split(",")) as client:
            t = client.table("rolling")
            while not stop.is_set():
                floor = written[0]
                try:
                    n = len(t.scanner().open().read_all_tuples())
                except Exception as e:
                    errors.append(f"scan: {e!r}")
                    return
                if n < floor:
                    errors.append(f"scan saw {n} rows after {floor} were acknowledged")
                    return
                reads[0] += 1

    workers = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for w in workers:
        w.start()
    try:
        wait_until("the workload started", 30, lambda: written[0] >= 500 and reads[0] >= 2)
        started = time.monotonic()
        exit_code = cluster.stop_node(ts)  # SIGTERM: quiesce, then stop
        took = time.monotonic() - started
        assert exit_code == 0
        quiesced = [json.loads(line) for line in ts.log_path.read_text().splitlines() if "quiesced before" in line]
        assert quiesced and quiesced[-1]["leaders_left"] == 0 and quiesced[-1]["leader_transfers"] > 0, quiesced
        mid = written[0]
        cluster.restart_node(ts)
        wait_until("writes went on after the restart", 30, lambda: written[0] >= mid + 500)
        time.sleep(1.0)
    finally:
        stop.set()
        for w in workers:
            w.join(60)
    assert not errors, errors
    print(
        f"\nSIGTERM stop of {ts.name} took {took:.2f}s ({quiesced[-1]['leader_transfers']} leaderships handed "
        f"over); {written[0]} rows written, {reads[0]} scans, no error; slowest flush {slowest[0]:.2f}s"
    )
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        keys = sorted(r[0] for r in client.table("rolling").scanner().open().read_all_tuples())
    assert keys == list(range(written[0]))
