"""A real 1 master + 3 tserver cluster: every node answers RPC and HTTP, and survives kill -9."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kudu_async.common.errors import KuduNoSuchMethod
from kudu_async.rpc.client import RpcClient
from kudu_async.testing import MiniCluster

pytestmark = pytest.mark.integration


async def test_every_node_answers_rpc_and_http(cluster_1m3t: MiniCluster) -> None:
    client = RpcClient(node_name="test")
    try:
        for n in cluster_1m3t.nodes:
            assert await client.call(n.rpc_address, "Generic", "Ping", {}) == {}
            st = await client.call(n.rpc_address, "Generic", "GetStatus", {})
            assert st["uuid"] == n.uuid and st["role"] == n.role and st["rpc_address"] == n.rpc_address
            with pytest.raises(KuduNoSuchMethod):
                await client.call(n.rpc_address, "Generic", "NoSuchThing", {})
            code, body = cluster_1m3t.http_get(n, "/healthz")
            assert (code, body) == (200, b"OK")
            status = cluster_1m3t.http_json(n, "/api/v1/status")
            assert status["uuid"] == n.uuid and status["http_address"] == n.http_address
            metrics = cluster_1m3t.http_json(n, "/metrics?types=server")
            names = {m["name"] for m in metrics[0]["metrics"]}
            assert "rpc_calls_Generic_Ping" in names and "handler_latency_Generic_GetStatus" in names
            assert {"event_loop_lag_ms_p99", "event_loop_lag_ms_max"} <= names
            code, prom = cluster_1m3t.http_get(n, "/metrics_prometheus")
            assert code == 200 and b"kudu_rpc_calls_Generic_Ping" in prom
            assert "version_info" in cluster_1m3t.http_json(n, "/version")
            assert cluster_1m3t.http_json(n, "/api/v1/varz")["flags"]["role"]["value"] == n.role
            assert "inbound" in cluster_1m3t.http_json(n, "/rpcz")
            code, body = cluster_1m3t.http_get(n, "/no/such/page")
            assert code == 404 and json.loads(body)["code"] == "NOT_FOUND"
    finally:
        await client.close()


async def test_killed_tserver_restarts_with_same_uuid(cluster_1m3t: MiniCluster) -> None:
    ts = cluster_1m3t.tservers[1]
    uuid_before = ts.uuid
    cluster_1m3t.kill_node(ts)
    assert not ts.is_running()
    client = RpcClient(node_name="test")
    try:
        # The others keep serving while it is down.
        for other in (cluster_1m3t.tservers[0], cluster_1m3t.tservers[2], *cluster_1m3t.masters):
            assert await client.call(other.rpc_address, "Generic", "Ping", {}) == {}
        cluster_1m3t.restart_node(ts)
        st = await client.call(ts.rpc_address, "Generic", "GetStatus", {})
        assert st["uuid"] == uuid_before == ts.uuid
    finally:
        await client.close()


def test_sigterm_stops_a_node_cleanly_and_fast(cluster_1m3t: MiniCluster) -> None:
    import time

    ts = cluster_1m3t.tservers[0]
    t0 = time.monotonic()
    assert cluster_1m3t.stop_node(ts, timeout_s=5.0) == 0
    assert time.monotonic() - t0 < 5.0
    assert '"node stopped"' in ts.log_path.read_text()


def test_pause_and_resume(cluster_1m3t: MiniCluster) -> None:
    import urllib.error

    ts = cluster_1m3t.tservers[2]
    cluster_1m3t.pause_node(ts)
    with pytest.raises((urllib.error.URLError, TimeoutError)):
        cluster_1m3t.http_get(ts, "/healthz", timeout_s=0.5)
    cluster_1m3t.resume_node(ts)
    assert cluster_1m3t.http_get(ts, "/healthz") == (200, b"OK")


def test_nodes_run_this_repositorys_code_whatever_the_callers_directory(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MiniCluster started from a directory holding another ``kudu_async`` (another checkout) runs its
    nodes on its own repository's code: the caller's directory is not put first on their path."""
    other = tmp_path / "other-checkout"  # type: ignore[operator]
    (other / "kudu_async" / "server").mkdir(parents=True)
    (other / "kudu_async" / "__init__.py").write_text("raise ImportError('the wrong kudu_async was imported')\n")
    (other / "kudu_async" / "server" / "__init__.py").write_text("")
    monkeypatch.chdir(other)
    with MiniCluster(num_masters=1, num_tservers=0, base_dir=tmp_path / "c") as c:  # type: ignore[operator]
        assert c.http_json(c.masters[0], "/api/v1/status")["role"] == "master"


def test_nodes_stop_when_the_process_that_started_them_is_killed(tmp_path: Path) -> None:
    """A test run killed by a timeout runs no clean-up: its nodes must not live on, eating CPU."""
    import subprocess
    import sys
    import time

    script = (
        "import os, sys\n"
        "from kudu_async.testing import MiniCluster\n"
        f"c = MiniCluster(num_masters=1, num_tservers=1, base_dir={str(tmp_path / 'c')!r})\n"
        "c.start()\n"
        "print(' '.join(str(n.pid) for n in c.nodes), flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30.0
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _proc_state(p)]
    assert not alive, f"nodes {alive} outlived the process that started them"


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "Z"
