"""Running ``kudu-admin`` against a MiniCluster, and a small filled table to run it on (shared by the
integration tests of the admin tool and of ``cluster rebalance``)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import kudu_async as kudu
from kudu_async.testing import MiniCluster


def admin(cluster: MiniCluster, *args: str, ok: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "kudu_async.tools.admin", "--masters", cluster.master_addresses, "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if ok:
        assert r.returncode == 0, f"kudu-admin {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def admin_json(cluster: MiniCluster, *args: str) -> Any:
    return json.loads(admin(cluster, "--json", *args).stdout)


def create_kv_table(cluster: MiniCluster, name: str, buckets: int, rows: int) -> None:
    """A (key int64, v string) table hash-partitioned on key, 3 replicas, with keys 0..rows-1."""
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("v", type_=kudu.string)
        t = client.create_table(
            name, b.build(), kudu.Partitioning().add_hash_partitions(["key"], buckets), n_replicas=3
        )
        s = client.new_session()
        for i in range(rows):
            s.apply(t.new_insert({"key": i, "v": f"v{i}"}))
        s.flush()
