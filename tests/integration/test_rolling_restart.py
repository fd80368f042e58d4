"""``scripts/rolling_restart.py`` against a running 3-master, 3-tserver MiniCluster (through its node manifest):
every node restarted one at a time while a client writes (FLUSH_AUTO_SYNC) and scans, with no failed client
operation and every acknowledged row there at the end."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster

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


def create_table(cluster: MiniCluster, name: str) -> None:
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("v", type_=kudu.string)
        client.create_table(name, b.build(), kudu.Partitioning().add_hash_partitions(["key"], 3), n_replicas=3)


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
    create_table(cluster, "rolling")
    stop = threading.Event()
    errors: list[str] = []
    written = [0]
    scans = [0]

    def writer() -> None:
        with kudu.connect(cluster.master_addresses.split(",")) as client:
            t = client.table("rolling")
            s = client.new_session(flush_mode=kudu.FLUSH_AUTO_SYNC)
            for key in range(MAX_ROWS):
                if stop.is_set():
                    return
                try:
                    s.apply(t.new_insert({"key": key, "v": f"v{key}"}))
                except Exception as e:
                    errors.append(f"insert of key {key}: {e!r}")
                    return
                written[0] = key + 1

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
                scans[0] += 1
                time.sleep(0.2)

    workers = [threading.Thread(target=writer), threading.Thread(target=reader)]
    old_pids = {n.name: n.pid for n in cluster.nodes}
    for w in workers:
        w.start()
    try:
        deadline = time.monotonic() + 30
        while written[0] < 50 and not errors and time.monotonic() < deadline:
            time.sleep(0.1)
        r = rolling_restart(cluster)
        mid = written[0]
        deadline = time.monotonic() + 30
        while written[0] < mid + 50 and not errors and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for w in workers:
            w.join(60)
    print(f"\n{r.stdout}\n{r.stderr[-3000:]}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not errors, errors
    assert "rolling restart done: 6 node(s) restarted" in r.stdout

    assert cluster.adopt_restarted() == set()
    for n in cluster.nodes:
        assert n.is_running() and n.pid != old_pids[n.name], n.name
    print(f"{written[0]} rows written and {scans[0]} scans during the rolling restart, no failed operation")
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        keys = sorted(row[0] for row in client.table("rolling").scanner().open().read_all_tuples())
    assert keys == list(range(written[0]))
