"""``kudu remote_replica unsafe_change_config`` brings back a tablet that lost its majority: a 3-replica
tablet loses two tablet servers for good (kill -9), writes fail; the tool forces the survivor's config to
itself, writes succeed again, the forced config survives the survivor's restart, and with new tablet
servers the master re-replicates the tablet back to three replicas holding every row written before and
after."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import NOT_READY, wait_for
from kudu_async.tools import cli

pytestmark = pytest.mark.integration
MASTER_FLAGS = ["--tserver-unresponsive-timeout-ms", "1500"]
TSERVER_FLAGS = ["--heartbeat-interval-ms", "300"]


def _write(client: kudu.Client, t: kudu.Table, lo: int, hi: int, timeout_ms: int) -> None:
    s = client.new_session(timeout_ms=timeout_ms)
    s.apply_arrow(t, pa.table({"key": pa.array(range(lo, hi), pa.int64())}), "upsert")


def test_a_tablet_that_lost_its_majority_is_forced_back_and_re_replicated(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        MiniCluster(
            num_masters=1,
            num_tservers=3,
            base_dir=tmp_path / "c",
            master_flags=MASTER_FLAGS,
            tserver_flags=TSERVER_FLAGS,
        ) as c,
        kudu.connect(c.master_addresses.split(",")) as client,
    ):
        b = kudu.schema_builder()
        b.add_column("key").type(kudu.int64).nullable(False).primary_key()
        t = client.create_table("lost", b.build(), kudu.Partitioning().set_range_partition_columns([]), n_replicas=3)
        _write(client, t, 0, 100, 30_000)

        (tablet,) = c.http_json(c.masters[0], "/api/v1/catalog/tables/lost")["tablets"]
        survivor = next(ts for ts in c.tservers if ts.uuid == tablet["replicas"][0]["uuid"])
        for ts in c.tservers:
            if ts is not survivor:
                c.kill_node(ts)  # gone for good: never restarted
        with pytest.raises(kudu.KuduBadStatus):
            _write(client, t, 100, 101, 2_000)  # no majority, nothing commits

        rc = cli.main(["remote_replica", "unsafe_change_config", survivor.rpc_address, tablet["tablet_id"], "x"])
        assert rc == 1 and "must include this server" in capsys.readouterr().err
        rc = cli.main(
            ["remote_replica", "unsafe_change_config", survivor.rpc_address, tablet["tablet_id"], survivor.uuid]
        )
        out = capsys.readouterr()
        assert rc == 0, out.err
        assert f"config forced to voters {survivor.uuid}" in out.out
        _write(client, t, 100, 200, 30_000)

        # The forced config is in the survivor's log and metadata: after a restart it leads again alone.
        c.stop_node(survivor)
        c.restart_node(survivor)
        _write(client, t, 200, 300, 30_000)

        # Two new servers: the master re-replicates to the tablet's replication factor.
        added = {c.add_tserver(TSERVER_FLAGS).uuid, c.add_tserver(TSERVER_FLAGS).uuid}

        def replicated() -> bool:
            (loc,) = c.http_json(c.masters[0], "/api/v1/catalog/tables/lost")["tablets"]
            voters = {r["uuid"] for r in loc["replicas"] if r["role"] in ("LEADER", "FOLLOWER")}
            return voters == {survivor.uuid, *added} and len(loc["replicas"]) == 3

        wait_for(replicated, 40.0, "three voters on live servers", retry_on=NOT_READY)
        got = t.scanner().set_read_mode(kudu.READ_LATEST).open().to_arrow().column("key").to_pylist()
        assert sorted(got) == list(range(300))
        # Each new replica is running and has applied every entry the survivor (the leader) committed.
        tid = tablet["tablet_id"]
        commit = c.http_json(survivor, f"/api/v1/tablets/{tid}")["consensus"]["commit_index"]

        def caught_up() -> bool:
            for ts in (n for n in c.tservers if n.uuid in added):
                st = c.http_json(ts, f"/api/v1/tablets/{tid}")
                if st["state"] != "RUNNING" or st["consensus"]["applied_index"] < commit:
                    return False
            return True

        wait_for(caught_up, 30.0, "the new replicas applying every committed entry", retry_on=NOT_READY)
