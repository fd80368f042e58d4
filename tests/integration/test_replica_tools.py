"""The kudu tool's replica verbs on a real 1-master/3-tserver cluster: ``remote_replica list|check|dump|
delete|copy`` against running tablet servers, then ``local_replica``, ``wal dump`` and ``fs`` on the
directory of a tablet server stopped for them (refused while it runs), which restarts healthy after."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for
from kudu_async.tools.cli import main
from tests.integration.kudu_cli import create_kv_table

pytestmark = pytest.mark.integration

ROWS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(num_masters=1, num_tservers=3, base_dir=tmp_path_factory.mktemp("replica-tools"))
    c.start()
    create_kv_table(c, "kv", buckets=2, rows=ROWS)
    yield c
    c.shutdown()


def kudu(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _call(addr: str, method: str, req: dict[str, Any]) -> Any:
    async def go() -> Any:
        rpc = RpcClient(node_name="test")
        try:
            return await rpc.call(addr, "TabletServer", method, req, timeout_s=10.0)
        finally:
            await rpc.close()

    return asyncio.run(go())


def _replicas(addr: str) -> dict[str, dict[str, Any]]:
    return {r["tablet_id"]: r for r in _call(addr, "ListTablets", {})["tablets"]}


def _all_running(c: MiniCluster) -> bool:
    return all(
        len(reps) == 2 and all(r["state"] == "RUNNING" for r in reps.values())
        for reps in (_replicas(ts.rpc_address) for ts in c.tservers)
    )


def test_remote_replica_verbs(cluster: MiniCluster, capsys: pytest.CaptureFixture[str]) -> None:
    wait_for(lambda: _all_running(cluster), 30, "every replica running")
    ts0, ts1, ts2 = (ts.rpc_address for ts in cluster.tservers)
    code, out, err = kudu(capsys, "remote_replica", "list", ts0)
    assert code == 0, err
    tablets = re.findall(r"^Tablet id: (\w+)$", out, re.M)
    assert len(tablets) == 2 and out.count("State: RUNNING") == 2 and "Table name: kv" in out
    assert "Schema: kudu.Schema {" in out and "PRIMARY KEY (key)" in out
    code, out, _ = kudu(capsys, "remote_replica", "list", ts0, "-include_schema=false", f"-tablets={tablets[0]}")
    assert re.findall(r"^Tablet id: (\w+)$", out, re.M) == [tablets[0]] and "Schema:" not in out

    code, out, err = kudu(capsys, "remote_replica", "check", f"{ts0},{ts1}", ts2)
    assert (code, out.strip()) == (0, "All tablet replicas are running"), err

    dumped = 0
    for t in tablets:  # READ_LATEST on a leader, at a snapshot on a follower: every replica answers
        code, out, err = kudu(capsys, "remote_replica", "dump", ts1, t)
        assert code == 0, err
        lines = out.splitlines()
        assert all(re.fullmatch(r"\(int64 key=\d+, string v='v\d+'\)", ln) for ln in lines)
        dumped += len(lines)
    assert dumped == ROWS
    code, _, err = kudu(capsys, "remote_replica", "dump", ts1, "f" * 32)
    assert code == 1 and "cannot find a running replica" in err

    # A follower replica on ts2 (a leader refuses to be overwritten by a copy).
    tablet = next(t for t, r in _replicas(ts2).items() if r["role"] != "LEADER")
    code, _, err = kudu(capsys, "remote_replica", "copy", tablet, ts0, ts2)
    assert code == 1 and "already has a replica" in err and "-force_copy" in err
    code, out, err = kudu(capsys, "remote_replica", "copy", tablet, ts0, ts2, "-force_copy")
    assert code == 0 and out.strip() == f"tablet {tablet} copied from {ts0} to {ts2}: RUNNING", err

    code, out, err = kudu(capsys, "remote_replica", "delete", ts2, tablet, "replaced by the test")
    assert code == 0 and out.strip() == f"tablet {tablet} on {ts2}: tombstoned", err
    # Onto the tombstone without -force_copy. The tablet's leader also finds its peer without the replica
    # and copies it back on its own: a copy of its under way is waited for, and if it already finished,
    # the tool refuses the replica it finds there.
    code, out, err = kudu(capsys, "remote_replica", "copy", tablet, ts0, ts2)
    done = re.fullmatch(
        rf"tablet {tablet} copied (from {re.escape(ts0)} )?to {re.escape(ts2)}( by the copy under way there)?: RUNNING",
        out.strip(),
    )
    refused = f"already has a replica on {ts2} (" in err and "-force_copy replaces it" in err
    assert (code == 0 and done) or (code == 1 and refused), out + err
    wait_for(lambda: _all_running(cluster), 30, "the tombstoned replica copied back")
    code, _, err = kudu(capsys, "remote_replica", "delete", ts2, "f" * 32, "no such tablet")
    assert code == 1 and "has no replica" in err


def test_offline_verbs_on_a_stopped_tserver(cluster: MiniCluster, capsys: pytest.CaptureFixture[str]) -> None:
    wait_for(lambda: _all_running(cluster), 30, "every replica running")
    ts = cluster.tservers[1]
    fs = f"-fs_wal_dir={ts.data_dir}"
    for t in _replicas(ts.rpc_address):
        _call(ts.rpc_address, "FlushTablet", {"tablet_id": t})  # rows in rowsets, for the rowset dump

    code, _, err = kudu(capsys, "local_replica", "list", fs)
    assert code == 1 and f"is in use: process {ts.pid} (tserver)" in err

    cluster.stop_node(ts)
    try:
        code, out, err = kudu(capsys, "local_replica", "list", fs)
        assert code == 0, err
        tablets = out.split()
        assert len(tablets) == 2
        code, out, err = kudu(capsys, "fs", "dump", "uuid", fs)
        assert (code, out.strip()) == (0, ts.uuid), err
        code, out, err = kudu(capsys, "fs", "check", fs)
        assert code == 0 and "Total orphaned blocks: 0" in out and "Errors:" not in out, out + err
        code, out, _ = kudu(capsys, "fs", "list", fs, "-format=json")
        assert {r["tablet-id"] for r in json.loads(out)} == set(tablets)

        rows = 0
        per_tablet = {}
        for t in tablets:
            code, out, err = kudu(capsys, "local_replica", "dump", "rowset", t, fs, "-dump_metadata=false")
            assert code == 0, err
            per_tablet[t] = len(out.splitlines())
            rows += per_tablet[t]
            code, out, _ = kudu(capsys, "local_replica", "cmeta", "print_replica_uuids", t, fs)
            assert sorted(out.split("peers: ")[1].split()) == sorted(n.uuid for n in cluster.tservers)
        assert rows == ROWS
        code, out, _ = kudu(capsys, "local_replica", "dump", "wals", tablets[0], fs, "-print_entries=id")
        assert code == 0 and "REPLICATE NO_OP" in out and "REPLICATE WRITE_OP" in out
        copied_rows = per_tablet[tablets[0]]
        # A replica replaced offline: tombstoned, then copied in from a running server.
        code, out, err = kudu(capsys, "local_replica", "delete", tablets[0], fs)
        assert code == 0 and "tombstoned" in out, err
        source = cluster.tservers[0].rpc_address
        code, out, err = kudu(capsys, "local_replica", "copy_from_remote", tablets[0], source, fs)
        assert code == 0 and out.startswith(f"{tablets[0]}: copied from {source}"), err
        code, _, err = kudu(capsys, "local_replica", "copy_from_remote", tablets[0], source, fs)
        assert code == 1 and "delete it first" in err
        segment = sorted(Path(ts.data_dir, "consensus", tablets[0], "wal").glob("wal-*"))[0]
        # The console entry, as an operator runs it (it starts while the node restarts: wal dump reads a
        # segment file on its own, whatever the node appends meanwhile is at most a torn tail to it).
        proc = subprocess.Popen(
            [sys.executable, "-m", "kudu_async.tools.cli", "wal", "dump", str(segment), "-print_entries=false"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        cluster.restart_node(ts)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Header:" in stdout and "Footer:" in stdout, stderr
    wait_for(lambda: _all_running(cluster), 30, "the restarted tablet server's replicas running")
    code, out, err = kudu(capsys, "remote_replica", "check", *(n.rpc_address for n in cluster.tservers))
    assert code == 0, err
    code, out, err = kudu(capsys, "remote_replica", "dump", ts.rpc_address, tablets[0])
    assert code == 0 and len(out.splitlines()) == copied_rows, err
