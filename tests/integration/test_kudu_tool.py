"""The ``kudu`` tool with Kudu's syntax against a real 1-master/4-tserver cluster (its ``main`` run in this
process; the console entry as a subprocess where that is what is checked): table create from Kudu's JSON
spec, list, describe, scan with predicates (Kudu's rows, CSV, JSON), copy creating the destination,
statistics, delete, every altering verb, locate_row, limits, replication factor, soft delete and recall;
master and tserver list and status, unregister; ksck healthy, with -checksum_scan, and on a damaged cluster
(exit 1 naming what is wrong); tablet change_config and leader_step_down through the master's locations;
perf loadgen and table_scan; bad input named with exit status 1."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for
from tests.integration import kudu_cli
from tests.integration.kudu_cli import create_kv_table

pytestmark = pytest.mark.integration


def kudu_tool(cluster: MiniCluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """The verbs run in this process (the module runs a hundred of them); the console entry is run as a
    subprocess where that is what a test checks."""
    return kudu_cli.kudu_tool(cluster, *args, ok=ok, in_process=True)


def kudu_json(cluster: MiniCluster, *args: str) -> Any:
    return kudu_cli.kudu_json(cluster, *args, in_process=True)


SPEC: dict[str, Any] = {
    "table_name": "events",
    "schema": {
        "columns": [
            {"column_name": "id", "column_type": "INT64", "is_nullable": False},
            {"column_name": "day", "column_type": "DATE", "is_nullable": False},
            {"column_name": "name", "column_type": "STRING", "default_value": "anon", "comment": "who"},
            {"column_name": "amount", "column_type": "DECIMAL", "type_attributes": {"precision": 10, "scale": 2}},
            {"column_name": "ts", "column_type": "UNIXTIME_MICROS"},
        ],
        "key_column_names": ["id", "day"],
    },
    "partition": {
        "hash_partitions": [{"columns": ["id"], "num_buckets": 2}],
        "range_partition": {
            "columns": ["day"],
            "range_bounds": [
                {
                    "lower_bound": {"bound_type": "inclusive", "bound_values": ["2026-01-01"]},
                    "upper_bound": {"bound_type": "exclusive", "bound_values": ["2026-02-01"]},
                },
                {
                    "lower_bound": {"bound_type": "inclusive", "bound_values": ["2026-02-01"]},
                    "upper_bound": {"bound_type": "exclusive", "bound_values": ["2026-03-01"]},
                },
            ],
        },
    },
    "num_replicas": 3,
    "owner": "alice",
    "comment": "click stream",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = MiniCluster(
        num_masters=1,
        num_tservers=4,
        base_dir=tmp_path_factory.mktemp("kudu_tool"),
        master_flags=["--enable-table-write-limit", "true"],  # for table set_limit
    )
    c.start()
    yield c
    c.shutdown()


def test_table_commands(cluster: MiniCluster, tmp_path: Path) -> None:
    spec = tmp_path / "events.json"
    spec.write_text(json.dumps(SPEC))
    assert "created table events" in kudu_tool(cluster, "table", "create", f"@{spec}").stdout
    assert kudu_cli.kudu_tool(cluster, "table", "list").stdout.split() == ["events"]  # as a subprocess
    desc = kudu_tool(cluster, "table", "describe", "events").stdout
    assert "PRIMARY KEY (id, day)" in desc and "HASH (id) PARTITIONS 2" in desc
    assert "PARTITION '2026-01-01' <= VALUES < '2026-02-01'" in desc and "REPLICAS 3" in desc
    assert "name STRING DEFAULT 'anon' COMMENT 'who'" in desc and "amount DECIMAL(10,2)" in desc
    assert "OWNER alice" in desc and "COMMENT 'click stream'" in desc
    listed = json.loads(kudu_tool(cluster, "table", "list", "-list_tablets", "-list_table_output_format=json").stdout)[
        "tables"
    ]
    assert [d["name"] for d in listed] == ["events"] and len(listed[0]["tablet_with_partition"]) == 4
    assert all(len(t["replica_info"]) == 3 for t in listed[0]["tablet_with_partition"])

    with kudu.connect(cluster.master_addresses.split(",")) as client:
        t = client.table("events")
        s = client.new_session()
        for i in range(200):
            s.apply(
                t.new_insert(
                    {
                        "id": i,
                        "day": dt.date(2026, 1 + i % 2, 1 + i % 28),
                        "name": None if i % 10 == 0 else f"n{i}",
                        "amount": Decimal(i) / 4,
                        "ts": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
                    }
                )
            )
        s.flush()

    # Predicates in Kudu's JSON form: key range, IN on a date, NULL.
    out = kudu_tool(
        cluster,
        "table",
        "scan",
        "events",
        "-format=csv",
        "-predicates",
        '["AND", [">=", "id", 150], ["<", "id", 160], ["IN", "day", ["2026-02-12", "2026-02-14"]]]',
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted(int(r["id"]) for r in rows) == [151, 153]
    assert {r["amount"] for r in rows} == {"37.75", "38.25"}
    nulls = kudu_tool(
        cluster, "table", "scan", "events", "-format=json", "-columns", "id,name", "-predicates", '["NULL", "name"]'
    ).stdout
    recs = [json.loads(line) for line in nulls.splitlines()]
    assert sorted(r["id"] for r in recs) == list(range(0, 200, 10)) and all(r["name"] is None for r in recs)
    assert set(recs[0]) == {"id", "name"}
    limited = kudu_tool(cluster, "table", "scan", "events", "--format", "json", "--limit", "5").stdout
    assert len(limited.splitlines()) == 5

    stats = kudu_json(cluster, "table", "statistics", "events")
    assert stats["live_row_count"] == 200 and stats["num_tablets"] == 4 and not stats["replicas_unreachable"]
    assert stats["on_disk_size_all_replicas"] > 0  # metadata and WAL at least
    assert "live row count: 200" in kudu_tool(cluster, "table", "statistics", "events").stdout

    copied = kudu_json(cluster, "table", "copy", "events", cluster.master_addresses, "-dst_table=events_copy")
    assert copied["rows"] == 200
    assert (
        "PARTITION '2026-02-01' <= VALUES < '2026-03-01'"
        in kudu_tool(cluster, "table", "describe", "events_copy").stdout
    )
    # Copy a subset into the existing copy with upsert: nothing new, nothing lost.
    assert (
        kudu_json(
            cluster,
            "table",
            "copy",
            "events",
            cluster.master_addresses,
            "-dst_table=events_copy",
            "-write_type",
            "upsert",
            "-predicates",
            '["<", "id", 10]',
        )["rows"]
        == 10
    )
    report = kudu_json(cluster, "cluster", "ksck", "-checksum_scan", "-tables", "events,events_copy")
    assert report["ok"], report["errors"]
    sums = {t["name"]: t["checksum"] for t in report["tables"]}
    assert sums["events"]["rows"] == sums["events_copy"]["rows"] == 200
    # Copying into a table that has the rows already, with plain insert: every row fails, named.
    dup = kudu_tool(cluster, "table", "copy", "events", cluster.master_addresses, "-dst_table=events_copy", ok=False)
    assert dup.returncode == 1 and "ALREADY_PRESENT" in dup.stderr

    assert "deleted table events_copy" in kudu_tool(cluster, "table", "delete", "events_copy").stdout
    assert kudu_tool(cluster, "table", "list").stdout.split() == ["events"]


def test_parse_metrics_reads_a_nodes_metrics(cluster: MiniCluster, tmp_path: Path) -> None:
    """``diagnose parse_metrics`` over diagnostics-log lines made of a tablet server's own ``/metrics``."""

    def per_tablet(entities: list[dict[str, Any]]) -> dict[str, int]:
        return {
            e["id"]: m["value"]
            for e in entities
            if e["type"] == "tablet"
            for m in e["metrics"]
            if m["name"] == "rows_inserted"
        }

    snaps = {ts.name: json.loads(cluster.http_get(ts, "/metrics")[1]) for ts in cluster.tservers}
    ts = max(cluster.tservers, key=lambda t: sum(per_tablet(snaps[t.name]).values()))
    first, second = snaps[ts.name], json.loads(cluster.http_get(ts, "/metrics")[1])
    # A line names what it has; a tablet gone since the first (a deleted table's) keeps its last value.
    before, latest = per_tablet(first), {**per_tablet(first), **per_tablet(second)}
    assert sum(latest.values()) > 0  # the events table's rows
    log = tmp_path / "diag.log"
    log.write_text(
        f"I0101 00:00:01.000000 metrics 1000000 {json.dumps(first)}\n"
        f"I0101 00:00:03.000000 metrics 3000000 {json.dumps(second)}\n"
    )
    out = kudu_tool(
        cluster,
        "diagnose",
        "parse_metrics",
        str(log),
        "-simple_metrics=tablet.rows_inserted:ins",
        "-rate_metrics=tablet.rows_inserted:rate",
    ).stdout.splitlines()
    assert out[0] == "timestamp\tins\trate"
    assert out[1].split("\t")[:2] == ["1000000", str(sum(before.values()))]
    assert out[2].split("\t")[:2] == ["3000000", str(sum(latest.values()))]
    assert float(out[2].split("\t")[2]) == (sum(latest.values()) - sum(before.values())) / 2


def test_bad_input_is_named(cluster: MiniCluster, tmp_path: Path) -> None:
    r = kudu_tool(cluster, "table", "scan", "events", "-predicates", '[">=", "nope", 1]', ok=False)
    assert r.returncode == 1 and "column 'nope' is not in table events" in r.stderr
    r = kudu_tool(cluster, "table", "scan", "events", "-predicates", '["~", "id", 1]', ok=False)
    assert r.returncode == 1 and "unknown predicate operator" in r.stderr
    r = kudu_tool(cluster, "table", "scan", "events", "-predicates", "[>=", ok=False)
    assert r.returncode == 1 and "not valid JSON" in r.stderr
    r = kudu_tool(cluster, "table", "describe", "missing", ok=False)
    assert r.returncode == 1 and "missing" in r.stderr
    bad = {**SPEC, "table_name": "bad", "schema": {**SPEC["schema"], "key_column_names": ["nope"]}}
    r = kudu_tool(cluster, "table", "create", json.dumps(bad), ok=False)
    assert r.returncode == 1 and "'nope'" in r.stderr
    # Kudu's tool exits 1 on every failure, a missing file included.
    r = kudu_tool(cluster, "table", "create", "@" + str(tmp_path / "absent.json"), ok=False)
    assert r.returncode == 1 and "absent.json" in r.stderr
    r = kudu_tool(cluster, "perf", "loadgen", "-num_rows_per_thread", "0", ok=False)
    assert r.returncode == 1 and "-num_rows_per_thread must be an integer >= 1" in r.stderr
    r = kudu_tool(cluster, "tablet", "leader_step_down", "0123456789abcdef0123456789abcdef", ok=False)
    assert r.returncode == 1 and "knows no tablet" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "kudu_async.tools.cli", "table", "list", "127.0.0.1:1", "-timeout_ms", "1500"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "TIMED_OUT" in r.stderr and "127.0.0.1:1" in r.stderr


def test_master_tserver_list_and_loadgen(cluster: MiniCluster) -> None:
    masters = kudu_json(cluster, "master", "list")
    assert [m["role"] for m in masters] == ["LEADER"] and masters[0]["uuid"] == cluster.masters[0].uuid
    assert "LEADER" in kudu_tool(cluster, "master", "list").stdout
    servers = kudu_json(cluster, "tserver", "list")
    assert sorted(s["uuid"] for s in servers) == sorted(t.uuid for t in cluster.tservers)
    assert all(s["live"] is True for s in servers)
    assert kudu_tool(cluster, "tserver", "list", "-columns=uuid,rpc-addresses,live").stdout.count("LIVE") == 4
    res = kudu_json(
        cluster,
        "perf",
        "loadgen",
        "-num_rows_per_thread",
        "10000",
        "-num_threads",
        "3",
        "-flush_per_n_rows",
        "5000",
        "-table_num_replicas",
        "3",
        "-run_scan",
    )
    assert res["rows"] == 30000 and res["scan"]["rows"] == 30000 and not res["errors"] and not res["kept"]
    assert res["rows_per_s"] > 0 and res["batch_latency_ms"]["p99"] >= res["batch_latency_ms"]["p50"] > 0
    assert not [n for n in kudu_tool(cluster, "table", "list").stdout.split() if n.startswith("loadgen_auto")]
    kept = kudu_json(
        cluster,
        "perf",
        "loadgen",
        "-num_threads=2",
        "-num_rows_per_thread=1000",
        "-flush_per_n_rows=0",
        "-keep_auto_table",
    )
    assert kept["kept"] and kept["mode"] == "row" and kept["rows"] == 2000
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        assert len(client.table(kept["table"]).scanner().open().read_all_tuples()) == 2000
        client.delete_table(kept["table"])


ALTERS_SPEC: dict[str, Any] = {
    "table_name": "alters",
    "schema": {
        "columns": [
            {"column_name": "key", "column_type": "INT64", "is_nullable": False},
            {"column_name": "v", "column_type": "STRING"},
        ],
        "key_column_names": ["key"],
    },
    "partition": {
        "range_partition": {
            "columns": ["key"],
            "range_bounds": [
                {
                    "lower_bound": {"bound_type": "inclusive", "bound_values": ["0"]},
                    "upper_bound": {"bound_type": "exclusive", "bound_values": ["100"]},
                }
            ],
        }
    },
    "num_replicas": 1,
}


def _describe(cluster: MiniCluster, table: str) -> str:
    return kudu_tool(cluster, "table", "describe", table).stdout


def test_alter_verbs_change_the_table(cluster: MiniCluster) -> None:
    """Every altering table verb, checked through ``describe`` (and the catalog) after it ran."""
    kudu_tool(cluster, "table", "create", json.dumps(ALTERS_SPEC))
    kudu_tool(cluster, "table", "add_range_partition", "alters", "[100]", "[200]")
    assert "PARTITION 100 <= VALUES < 200" in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "drop_range_partition", "alters", "[100]", "[200]")
    assert "PARTITION 100 <= VALUES < 200" not in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "add_range_partition", "alters", "[200]", "[]")
    assert "PARTITION 200 <= VALUES" in _describe(cluster, "alters")

    kudu_tool(cluster, "table", "add_column", "alters", "extra", "INT32", "-default_value=[7]", "-comment=hello")
    assert "extra INT32 DEFAULT 7 COMMENT 'hello'" in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "column_set_default", "alters", "extra", "[9]")
    assert "extra INT32 DEFAULT 9" in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "column_remove_default", "alters", "extra")
    assert "DEFAULT" not in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "column_set_compression", "alters", "v", "LZ4")
    kudu_tool(cluster, "table", "column_set_encoding", "alters", "v", "PLAIN_ENCODING")
    kudu_tool(cluster, "table", "column_set_block_size", "alters", "v", "8192")
    kudu_tool(cluster, "table", "column_set_comment", "alters", "v", "the v")
    assert "v STRING ENCODING plain COMPRESSION lz4 COMMENT 'the v'" in _describe(cluster, "alters")
    cols = {c["name"]: c for c in kudu_json(cluster, "table", "describe", "alters")["schema"]["columns"]}
    assert cols["v"]["block_size"] == 8192
    kudu_tool(cluster, "table", "rename_column", "alters", "extra", "extra2")
    assert "extra2 INT32" in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "delete_column", "alters", "extra2")
    assert "extra2" not in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "set_comment", "alters", "c1")
    assert "COMMENT 'c1'" in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "clear_comment", "alters")
    assert "COMMENT 'c1'" not in _describe(cluster, "alters")
    kudu_tool(cluster, "table", "rename_table", "alters", "alters2")
    assert "alters2" in kudu_tool(cluster, "table", "list").stdout.split()

    # Bad values name what is wrong and exit 1.
    r = kudu_tool(cluster, "table", "column_set_default", "alters2", "v", "7", ok=False)
    assert r.returncode == 1 and "JSON array of one value" in r.stderr
    r = kudu_tool(cluster, "table", "column_set_block_size", "alters2", "v", "-1", ok=False)
    assert r.returncode == 1 and "Invalid block size: -1" in r.stderr
    r = kudu_tool(cluster, "table", "add_column", "alters2", "d", "DECIMAL", ok=False)
    assert r.returncode == 1 and "-column_precision" in r.stderr
    r = kudu_tool(cluster, "table", "rename_column", "alters2", "nope", "x", ok=False)
    assert r.returncode == 1 and "column 'nope' is not in table alters2" in r.stderr
    r = kudu_tool(cluster, "table", "add_range_partition", "alters2", "[1]", ok=False)
    assert r.returncode == 1 and "usage: kudu table add_range_partition" in r.stderr


def test_rows_limits_replication_and_recall(cluster: MiniCluster) -> None:
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        t = client.table("alters2")
        s = client.new_session()
        for k in (5, 250):
            s.apply(t.new_insert({"key": k, "v": f"v{k}"}))
        s.flush()
    tablet = kudu_tool(cluster, "table", "locate_row", "alters2", "[5]").stdout.strip()
    assert len(tablet) == 32
    found = kudu_tool(cluster, "table", "locate_row", "alters2", "[5]", "-check_row_existence").stdout
    assert found.splitlines() == [tablet, '(int64 key=5, string v="v5")']
    assert kudu_tool(cluster, "table", "locate_row", "alters2", "[250]").stdout.strip() != tablet
    r = kudu_tool(cluster, "table", "locate_row", "alters2", "[6]", "-check_row_existence", ok=False)
    assert r.returncode == 1 and "row does not exist" in r.stderr
    r = kudu_tool(cluster, "table", "locate_row", "alters2", "[150]", ok=False)
    assert r.returncode == 1 and "row does not belong to any currently existing tablet" in r.stderr
    r = kudu_tool(cluster, "table", "locate_row", "alters2", "[1, 2]", ok=False)
    assert r.returncode == 1 and "expected 1 but received 2" in r.stderr

    scanned = kudu_tool(cluster, "table", "scan", "alters2").stdout.splitlines()
    assert sorted(scanned[:-1]) == ['(int64 key=250, string v="v250")', '(int64 key=5, string v="v5")']
    assert scanned[-1].startswith("Total count 2 cost ")
    perf = kudu_json(cluster, "perf", "table_scan", "alters2", "-num_threads=2")
    assert perf["rows"] == 2 and len(perf["tablets"]) == 2
    assert "Total count 2" in kudu_tool(cluster, "perf", "table_scan", "alters2").stdout

    kudu_tool(cluster, "table", "set_limit", "disk_size", "alters2", "1000000")
    kudu_tool(cluster, "table", "set_limit", "row_count", "alters2", "500")
    stats = kudu_json(cluster, "table", "statistics", "alters2")
    assert (stats["disk_size_limit"], stats["row_count_limit"], stats["live_row_count"]) == (1000000, 500, 2)
    kudu_tool(cluster, "table", "set_limit", "row_count", "alters2", "unlimited")
    assert kudu_json(cluster, "table", "statistics", "alters2")["row_count_limit"] == -1
    assert "TABLETS" in kudu_tool(cluster, "table", "statistics", "alters2", "-show_tablets").stdout

    r = kudu_tool(cluster, "table", "set_replication_factor", "alters2", "2", ok=False)
    assert r.returncode == 1 and "illegal replication factor 2" in r.stderr
    kudu_tool(cluster, "table", "set_replication_factor", "alters2", "3")

    def replicated() -> bool:
        info = json.loads(
            kudu_tool(
                cluster, "table", "list", "-tables=alters2", "-list_tablets", "-list_table_output_format=json"
            ).stdout
        )["tables"][0]
        return all(
            sorted(r["role"] for r in t["replica_info"]) == ["L", "V", "V"] for t in info["tablet_with_partition"]
        )

    wait_for(lambda: replicated() or None, 60, "3 voters of every tablet after set_replication_factor 3")
    info = kudu_tool(cluster, "table", "list", "-tables=alt*", "-show_table_info").stdout
    assert info.startswith("alters2 num_tablets:2 num_replicas:3 live_row_count:"), info
    listed = kudu_tool(cluster, "table", "list", "-columns=name,num_replicas", "-format=csv").stdout
    assert "alters2,3" in listed.splitlines()

    table_id = kudu_json(cluster, "table", "describe", "alters2")["table_id"]
    kudu_tool(cluster, "table", "delete", "alters2", "-reserve_seconds=600")
    assert "alters2" not in kudu_tool(cluster, "table", "list").stdout.split()
    assert kudu_tool(cluster, "table", "list", "-soft_deleted_only").stdout.split() == ["alters2"]
    kudu_tool(cluster, "table", "recall", table_id, "-new_table_name=alters3")
    assert "alters3" in kudu_tool(cluster, "table", "list").stdout.split()
    assert kudu_tool(cluster, "table", "list", "-soft_deleted_only").stdout.split() == []
    kudu_tool(cluster, "table", "delete", "alters3")


def test_list_in_flight_servers_status_and_usage(cluster: MiniCluster) -> None:
    in_flight = json.loads(kudu_tool(cluster, "table", "list_in_flight", "-list_table_output_format=json").stdout)
    assert in_flight == {"tables": []}
    ts = cluster.tservers[0]
    st = kudu_json(cluster, "tserver", "status", ts.rpc_address)
    assert st["uuid"] == ts.uuid and st["role"] == "tserver"
    assert f"uuid: {ts.uuid}" in kudu_tool(cluster, "tserver", "status", ts.rpc_address, "-format=pretty").stdout
    mst = kudu_json(cluster, "master", "status", cluster.masters[0].rpc_address)
    assert mst["uuid"] == cluster.masters[0].uuid
    listed = kudu_tool(cluster, "tserver", "list", "-columns=uuid,state,heartbeat", "-format=space").stdout.split("\n")
    assert {line.split()[0] for line in listed if line} == {t.uuid for t in cluster.tservers}
    assert all(line.split()[1] == "NONE" and line.split()[2].endswith("ms") for line in listed if line)
    r = kudu_tool(cluster, "tserver", "list", "-columns=uuid,nope", ok=False)
    assert r.returncode == 1 and "unknown column(s) nope" in r.stderr
    r = kudu_tool(cluster, "tserver", "unregister", ts.uuid, ok=False)
    assert r.returncode == 1 and "is live" in r.stderr
    # Usage: an unknown verb, a missing argument, a bad flag value each print the usage and exit 1.
    for args in (("table", "nosuch"), ("table", "rename_table", "x"), ("cluster", "ksck", "-ksck_format=xml")):
        r = kudu_tool(cluster, *args, ok=False)
        assert r.returncode == 1 and "usage: kudu" in r.stderr, (args, r.stderr)


def _leader(cluster: MiniCluster, tablet: str) -> dict[str, Any]:
    states = kudu_json(cluster, "tablet", "raft_state", tablet)
    return max((s for s in states.values() if s.get("role") == "LEADER"), key=lambda s: s["term"])


def _voters(cluster: MiniCluster, tablet: str) -> dict[str, str]:
    return {p["uuid"]: p["member_type"] for p in _leader(cluster, tablet)["peers"] if p["member_type"] != "NONE"}


def test_tablet_commands_through_the_master(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "moves", 2, 500)
    tablet = kudu_json(cluster, "table", "describe", "moves")["tablets"][0]["tablet_id"]
    voters = _voters(cluster, tablet)
    assert len(voters) == 3
    spare = next(ts.uuid for ts in cluster.tservers if ts.uuid not in voters)
    src = next(u for u in voters if u != _leader(cluster, tablet)["leader"])

    moved = kudu_json(cluster, "tablet", "change_config", "move_replica", tablet, src, spare)
    assert moved["moved_from"] == src and moved["moved_to"] == spare
    after = wait_for(lambda: v if len(v := _voters(cluster, tablet)) == 3 else None, 60, "3 voters after the move")
    assert spare in after and src not in after and set(after.values()) == {"VOTER"}

    # remove: the master sees the tablet under-replicated and places a new replica (3-4-3).
    victim = next(u for u in after if u != _leader(cluster, tablet)["leader"])
    removed = kudu_json(cluster, "tablet", "change_config", "remove_replica", tablet, victim)["config_index"]

    def re_replicated() -> bool:  # 3 voters again, by config changes after the removal (the new replica
        lead = _leader(cluster, tablet)  # may land on the server just removed: the least loaded one)
        v = {p["uuid"]: p["member_type"] for p in lead["peers"] if p["member_type"] != "NONE"}
        return lead["config_index"] > removed and len(v) == 3 and set(v.values()) == {"VOTER"}

    wait_for(
        re_replicated,
        90,
        "the master to re-replicate after a remove",
    )

    # leader_step_down -abrupt through the master's locations: another election, the rows still there.
    before = _leader(cluster, tablet)
    kudu_json(cluster, "tablet", "leader_step_down", tablet, "-abrupt")
    wait_for(
        lambda: any(
            s.get("role") == "LEADER" and s["term"] > before["term"]
            for s in kudu_json(cluster, "tablet", "raft_state", tablet).values()
        ),
        30,
        "a new leader",
    )
    # A graceful step-down to a named voter, then another to whichever voter is most caught up.
    now = _leader(cluster, tablet)
    target = next(u for u in _voters(cluster, tablet) if u != now["leader"])
    kudu_json(cluster, "tablet", "leader_step_down", tablet, f"-new_leader_uuid={target}")
    assert _leader(cluster, tablet)["leader"] == target
    kudu_json(cluster, "tablet", "leader_step_down", tablet)
    assert _leader(cluster, tablet)["leader"] != target
    r = kudu_tool(cluster, "tablet", "leader_step_down", tablet, "-abrupt", f"-new_leader_uuid={target}", ok=False)
    assert r.returncode == 1 and "exclude each other" in r.stderr

    # add_replica NON_VOTER: a NON_VOTER that stays one (Kudu's, without the promote attribute): its copy
    # runs and the master leaves it a learner.
    spare = next(ts.uuid for ts in cluster.tservers if ts.uuid not in _voters(cluster, tablet))
    added = kudu_json(cluster, "tablet", "change_config", "add_replica", tablet, spare, "NON_VOTER")
    assert added["config_index"] > 0

    def caught_up() -> bool:
        lead = _leader(cluster, tablet)
        mine = next(p for p in lead["peers"] if p["uuid"] == spare)
        return mine["match_index"] is not None and mine["match_index"] >= lead["commit_index"]

    wait_for(caught_up, 60, "the NON_VOTER's copy to catch up")
    time.sleep(3.0)  # several of the master's re-replication passes
    members = _voters(cluster, tablet)
    assert members[spare] == "NON_VOTER" and list(members.values()).count("VOTER") == 3
    leader = _leader(cluster, tablet)["leader"]
    r = kudu_tool(cluster, "tablet", "change_config", "change_replica_type", tablet, leader, "NON_VOTER", ok=False)
    assert r.returncode == 1 and "a leader is not demoted" in r.stderr
    voter = next(u for u, t in members.items() if t == "VOTER" and u != leader)
    r = kudu_tool(cluster, "tablet", "change_config", "change_replica_type", tablet, voter, "VOTER", ok=False)
    assert r.returncode == 1 and "already a VOTER" in r.stderr
    # The NON_VOTER made a VOTER: 4 voters for 3, so the master trims one.
    kudu_json(cluster, "tablet", "change_config", "change_replica_type", tablet, spare, "VOTER")
    wait_for(
        lambda: (v := _voters(cluster, tablet)) and len(v) == 3 and set(v.values()) == {"VOTER"},
        60,
        "the master to trim the tablet back to 3 voters",
    )
    # A voter demoted: 2 voters for 3, so the master places a new one on the tserver without a replica;
    # the demoted replica stays a NON_VOTER until removed.
    leader = _leader(cluster, tablet)["leader"]
    voter = next(u for u in _voters(cluster, tablet) if u != leader)
    kudu_json(cluster, "tablet", "change_config", "change_replica_type", tablet, voter, "NON_VOTER")
    wait_for(
        lambda: (v := _voters(cluster, tablet)).get(voter) == "NON_VOTER" and list(v.values()).count("VOTER") == 3,
        60,
        "the demoted replica a NON_VOTER and a new voter placed",
    )
    kudu_json(cluster, "tablet", "change_config", "remove_replica", tablet, voter)
    wait_for(lambda: voter not in _voters(cluster, tablet), 30, "the demoted replica removed")

    def master_lists_it() -> bool:  # the master learns the new config from the leader's next report
        (loc,) = [
            x
            for x in cluster.http_json(cluster.masters[0], "/api/v1/catalog/tables/moves")["tablets"]
            if x["tablet_id"] == tablet
        ]
        return voter in json.dumps(loc)

    wait_for(lambda: not master_lists_it(), 30, "the master's locations without the removed replica")

    # The master's view and the removed replica learn of the trim a heartbeat or two later.
    wait_for(
        lambda: (
            kudu_cli.kudu_tool(cluster, "cluster", "ksck", "-tables=moves", ok=False, in_process=True).returncode == 0
            or None
        ),
        30,
        "ksck to find the tablet settled after the trim",
    )
    report = kudu_json(cluster, "cluster", "ksck", "-checksum_scan", "-tables", "moves")
    assert report["ok"], report["errors"]
    assert report["tables"][0]["checksum"]["rows"] == 500
    one = kudu_json(cluster, "cluster", "ksck", f"-tablets={tablet}")
    assert one["ok"] and [t["tablets"] for t in one["tables"]] == [1]


def test_ksck_on_a_damaged_cluster(cluster: MiniCluster) -> None:
    """Last in the module: it kills a tablet server."""
    ok = kudu_tool(cluster, "cluster", "ksck")
    assert ok.stdout.rstrip().endswith("OK")
    busiest = max(kudu_json(cluster, "tserver", "list"), key=lambda d: d["num_replicas"])
    assert busiest["num_replicas"] > 0
    victim = next(ts for ts in cluster.tservers if ts.uuid == busiest["uuid"])
    cluster.kill_node(victim)
    r = kudu_tool(cluster, "cluster", "ksck", ok=False)
    assert r.returncode == 1, r.stdout
    assert "problem(s) found" in r.stdout and victim.uuid in r.stdout
    report = json.loads(kudu_tool(cluster, "cluster", "ksck", "-ksck_format=json_pretty", ok=False).stdout)
    assert not report["ok"]
    assert [t["status"] for t in report["tservers"] if t["uuid"] == victim.uuid] == ["UNAVAILABLE"]
    hit = [
        tb
        for table in report["tables"]
        for tb in table["unhealthy_tablets"]
        if victim.uuid in [rep["uuid"] for rep in tb["replicas"]]
    ]
    assert len(hit) == busiest["num_replicas"]
    assert all(tb["status"] in ("UNDER_REPLICATED", "UNAVAILABLE") for tb in hit)
    assert all(any("TS_UNAVAILABLE" in w for w in tb["why"]) for tb in hit)


def test_unregister_a_dead_tserver(cluster: MiniCluster) -> None:
    """After the damaged-cluster test: its killed tablet server is forgotten by the masters."""
    dead = next(ts for ts in cluster.tservers if not ts.is_running())
    kudu_tool(cluster, "tserver", "unregister", dead.uuid, "-force_unregister_live_tserver")
    assert dead.uuid not in {d["uuid"] for d in kudu_json(cluster, "tserver", "list")}
    r = kudu_tool(cluster, "tserver", "unregister", dead.uuid, ok=False)
    assert r.returncode == 1 and "not registered" in r.stderr
