"""Runtime flags and the master's auto-rebalancer on one 1-master cluster: ``kudu ... get_flags|set_flag|
set_flag_for_all`` change what a running node does (and refuse what it cannot), and the auto-rebalancer,
off by default, evens out the replicas once it is switched on at runtime after two tservers joined."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for
from tests.integration import kudu_cli
from tests.integration.kudu_cli import create_kv_table

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    c = MiniCluster(
        num_masters=1,
        num_tservers=3,
        base_dir=Path(tmp_path_factory.mktemp("flags")),
        master_flags=["--auto-rebalancing-interval-seconds", "1", "--auto-rebalancing-max-moves-per-server", "2"],
        tserver_flags=["--heartbeat-interval-ms", "300"],
    )
    try:
        yield c.start()
    finally:
        c.shutdown()


def run(cluster: MiniCluster, *argv: str) -> tuple[int, str, str]:
    """``kudu <argv>`` in this process, the cluster's masters inserted where the verb takes them: its exit
    status, stdout and stderr."""
    r = kudu_cli.kudu_tool(cluster, *argv, ok=False, in_process=True)
    return r.returncode, r.stdout, r.stderr


def test_get_flags_and_set_flag_on_a_tserver(cluster: MiniCluster) -> None:
    ts = cluster.tservers[0]
    code, out, _ = run(
        cluster, "tserver", "get_flags", ts.rpc_address, "-flag_tags=runtime", "-all_flags", "-format=json"
    )
    assert code == 0
    flags = {f["flag"]: f for f in json.loads(out)}
    assert {"scanner_ttl_ms", "log_level", "graceful_shutdown_timeout_ms"} <= set(flags)
    assert flags["scanner_ttl_ms"] == {
        "flag": "scanner_ttl_ms",
        "value": "60000",
        "default value?": True,
        "tags": "runtime",
    }

    code, out, _ = run(cluster, "tserver", "set_flag", ts.rpc_address, "scanner_ttl_ms", "45000")
    assert code == 0 and "scanner_ttl_ms: '60000' -> '45000'" in out
    status, varz = cluster.http_get(ts, "/varz")
    assert status == 200 and "--scanner_ttl_ms=45000" in varz.decode()
    code, out, _ = run(cluster, "tserver", "get_flags", ts.rpc_address, "-flags=scanner_ttl_ms", "-format=json")
    assert json.loads(out) == [{"flag": "scanner_ttl_ms", "value": "45000", "default value?": False, "tags": "runtime"}]
    # The change is logged and audited.
    assert any(
        '"flag changed at runtime"' in line and "scanner_ttl_ms" in line
        for line in ts.log_path.read_text().splitlines()
    )
    audit = [json.loads(line) for line in (ts.data_dir / "audit.log").read_text().splitlines()]
    assert any("SetFlag" in a["method"] and a["allowed"] and "60000 -> 45000" in a["reason"] for a in audit)


def test_set_flag_refuses_what_a_running_node_cannot_take(cluster: MiniCluster) -> None:
    ts = cluster.tservers[1]
    code, _, err = run(cluster, "tserver", "set_flag", ts.rpc_address, "heartbeat_interval_ms", "200")
    assert code == 1 and "heartbeat_interval_ms is not runtime-settable" in err and "-force" in err
    code, _, err = run(cluster, "tserver", "set_flag", ts.rpc_address, "no_such_flag", "1")
    assert code == 1 and "no flag named 'no_such_flag'" in err
    code, _, err = run(cluster, "tserver", "set_flag", ts.rpc_address, "scanner_ttl_ms", "soon")
    assert code == 1 and "bad value 'soon'" in err
    code, _, err = run(cluster, "tserver", "set_flag", ts.rpc_address, "scanner_ttl_ms", "-5")
    assert code == 1 and "must be > 0" in err
    code, out, _ = run(cluster, "tserver", "set_flag", ts.rpc_address, "heartbeat_interval_ms", "300", "-force")
    assert code == 0 and "forced" in out
    code, out, _ = run(
        cluster, "tserver", "get_flags", ts.rpc_address, "-flags=heartbeat_interval_ms,rpc_bind", "-format=json"
    )
    assert [f["flag"] for f in json.loads(out)] == ["heartbeat_interval_ms", "rpc_bind"]
    audit = [json.loads(line) for line in (ts.data_dir / "audit.log").read_text().splitlines()]
    assert any("SetFlag" in a["method"] and not a["allowed"] and "not runtime-settable" in a["reason"] for a in audit)


def test_flush_threshold_set_at_runtime_flushes_a_small_memrowset(cluster: MiniCluster) -> None:
    """flush_threshold_mb is runtime (as in Kudu): at 1 MiB a MemRowSet of a few MiB is flushed, which at
    the default (64 MiB) stays in memory."""
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        b.add_column("v", type_=kudu.string)
        t = client.create_table("flushy", b.build(), kudu.Partitioning().set_range_partition_columns([]), n_replicas=3)
        [token] = t.scan_token_builder().build()
        tablet = token.tablet().id()
        s = client.new_session()
        for i in range(3000):
            s.apply(t.new_insert({"key": i, "v": "x" * 1000}))
        s.flush()

    def rowsets() -> int:
        detail = cluster.http_json(cluster.tservers[0], f"/api/v1/tablets/{tablet}")
        return len(detail["storage"]["rowsets"])

    time.sleep(1.0)  # several maintenance passes at the default threshold
    assert rowsets() == 0
    code, out, _ = run(cluster, "tserver", "set_flag_for_all", "flush_threshold_mb", "1")
    assert code == 0, out
    try:
        wait_for(rowsets, 30, "the MemRowSet past 1 MiB flushed")
    finally:
        run(cluster, "tserver", "set_flag_for_all", "flush_threshold_mb", "64")


def test_set_flag_for_all_changes_what_the_masters_do(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "reserve", buckets=2, rows=10)
    code, out, _ = run(cluster, "master", "set_flag_for_all", "default_deleted_table_reserve_seconds", "3600")
    assert code == 0, out
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        client.delete_table("reserve")  # kept SOFT_DELETED now: recallable
        assert client.list_soft_deleted_tables() == ["reserve"]
    code, _, _ = run(
        cluster, "master", "set_flag", cluster.masters[0].rpc_address, "default_deleted_table_reserve_seconds", "0"
    )
    assert code == 0
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        client.delete_table("reserve")  # a soft-deleted table is deleted at once
        wait_for(lambda: client.list_soft_deleted_tables() == [], 10, "the table purged")
    code, out, _ = run(cluster, "tserver", "set_flag_for_all", "log_level", "LOUD", "-format=json")
    rows = json.loads(out)
    assert code == 1 and len(rows) == 3 and all("expected one of DEBUG" in r["error"] for r in rows)


def replicas_per_tserver(cluster: MiniCluster, table: str) -> Counter[str]:
    counts: Counter[str] = Counter({t.uuid: 0 for t in cluster.tservers})
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        for token in client.table(table).scan_token_builder().build():
            counts.update(r.ts().uuid() for r in token.tablet().replicas())
    return counts


def test_auto_rebalancer_is_off_by_default_and_evens_replicas_once_on(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "skewed", buckets=3, rows=300)
    added = [cluster.add_tserver(), cluster.add_tserver()]
    new = {t.uuid for t in added}
    wait_for(
        lambda: sum(d["live"] for d in cluster.http_json(cluster.masters[0], "/api/v1/tservers")) == 5,
        15,
        "5 live tservers",
    )
    time.sleep(3.0)  # three auto-rebalancing intervals: nothing moves while the flag is off
    before = replicas_per_tserver(cluster, "skewed")
    assert sum(before.values()) == 9 and all(before[u] == 0 for u in new), before
    assert cluster.http_json(cluster.masters[0], "/api/v1/status")["auto_rebalancer"]["enabled"] is False

    code, _, _ = run(cluster, "master", "set_flag", cluster.masters[0].rpc_address, "auto_rebalancing_enabled", "true")
    assert code == 0

    def balanced() -> Counter[str] | None:
        c = replicas_per_tserver(cluster, "skewed")
        return c if sum(c.values()) == 9 and max(c.values()) - min(c.values()) <= 1 else None

    after = wait_for(balanced, 90, "replicas evened out", every_s=0.3)  # a client a call
    assert all(after[u] >= 1 for u in new), after
    status = wait_for(
        lambda: (
            (s := cluster.http_json(cluster.masters[0], "/api/v1/status")["auto_rebalancer"])["state"] == "balanced"
            and s
        ),
        15,
        "the auto-rebalancer says balanced",
    )
    assert status["replica_moves_started"] >= 3  # 3,3,3,0,0 -> 2,2,2,2,1
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        assert len(client.table("skewed").scanner().open().read_all_tuples()) == 300
