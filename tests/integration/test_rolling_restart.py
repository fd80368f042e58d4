"""``scripts/rolling_restart.py`` against a running 3-master, 3-tserver MiniCluster (through its node manifest):
every node restarted one at a time while a client writes (FLUSH_AUTO_SYNC) and scans, with no failed client
operation and every acknowledged row there at the end."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.testing.workload import WriteScanWorkload
from tests.integration.kudu_cli import create_kv_table

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rolling_restart.py"
MAX_ROWS = 200_000  # the writer's bound


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=3,
        num_tservers=3,
        base_dir=Path(tmp_path_factory.mktemp("rolling")),
        tserver_flags=["--heartbeat-interval-ms", "300"],
    )
    try:
        yield c.start()
    finally:
        c.shutdown()


def rolling_restart(cluster: MiniCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--manifest", str(cluster.manifest_path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_dry_run_names_the_order_and_changes_nothing(cluster: MiniCluster) -> None:
    pids = [n.pid for n in cluster.nodes]
    r = rolling_restart(cluster, "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line.strip() for line in r.stdout.splitlines() if line.strip().startswith("restart")]
    assert len(lines) == 6
    masters, tservers = lines[:3], lines[3:]
    assert all(line.startswith("restart master") for line in masters)
    assert "hand the catalog leadership over" in masters[2] and not any("hand" in m for m in masters[:2])
    assert all("enter maintenance, quiesce, SIGTERM" in t for t in tservers)
    assert [n.pid for n in cluster.nodes] == pids


def test_rolling_restart_under_load_fails_no_operation(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "rolling", buckets=3, rows=0)
    old_pids = {n.name: n.pid for n in cluster.nodes}
    with WriteScanWorkload(
        cluster.master_addresses.split(","),
        "rolling",
        flush_mode=kudu.FLUSH_AUTO_SYNC,
        batch_rows=1,
        max_rows=MAX_ROWS,
        scan_pause_s=0.2,
    ) as load:
        load.wait("the workload started", rows=50)
        r = rolling_restart(cluster)
        load.wait("writes went on after the rolling restart", rows=load.written + 50)
    print(f"\n{r.stdout}\n{r.stderr[-3000:]}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not load.errors, load.errors
    assert "rolling restart done: 6 node(s) restarted" in r.stdout

    assert cluster.adopt_restarted() == set()
    for n in cluster.nodes:
        assert n.is_running() and n.pid != old_pids[n.name], n.name
    print(f"{load.written} rows written and {load.scans} scans during the rolling restart, no failed operation")
    load.check_every_row()
