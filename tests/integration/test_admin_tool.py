"""``kudu-admin`` as operators run it (a subprocess per command) against a real 1-master/4-tserver
cluster: table create from Kudu's JSON spec, list, describe, scan with predicates (CSV and JSON), copy
with --create-table, statistics, delete; master and tserver list; ksck healthy, with --checksum, and on
a damaged cluster (exit 1 naming what is wrong); tablet change-config add/remove, move-replica and
leader-step-down through the master's locations; perf loadgen; bad input named with exit status 1/2."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import kudu_async as kudu
from kudu_async.testing import MiniCluster
from kudu_async.testing.waits import wait_for
from tests.integration.admin_cli import admin, admin_json, create_kv_table

pytestmark = pytest.mark.integration

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
    c = MiniCluster(num_masters=1, num_tservers=4, base_dir=tmp_path_factory.mktemp("admin"))
    c.start()
    yield c
    c.shutdown()


def test_table_commands(cluster: MiniCluster, tmp_path: Path) -> None:
    spec = tmp_path / "events.json"
    spec.write_text(json.dumps(SPEC))
    assert "created table events" in admin(cluster, "table", "create", f"@{spec}").stdout
    assert admin(cluster, "table", "list").stdout.split() == ["events"]
    desc = admin(cluster, "table", "describe", "events").stdout
    assert "PRIMARY KEY (id, day)" in desc and "HASH (id) PARTITIONS 2" in desc
    assert "PARTITION '2026-01-01' <= VALUES < '2026-02-01'" in desc and "REPLICAS 3" in desc
    assert "name STRING DEFAULT 'anon' COMMENT 'who'" in desc and "amount DECIMAL(10,2)" in desc
    assert "OWNER alice" in desc and "COMMENT 'click stream'" in desc
    listed = admin_json(cluster, "table", "list", "--list-tablets")
    assert [d["name"] for d in listed] == ["events"] and len(listed[0]["tablets"]) == 4
    assert all(len(t["replicas"]) == 3 for t in listed[0]["tablets"])

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
    out = admin(
        cluster,
        "table",
        "scan",
        "events",
        "--predicates",
        '["AND", [">=", "id", 150], ["<", "id", 160], ["IN", "day", ["2026-02-12", "2026-02-14"]]]',
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert sorted(int(r["id"]) for r in rows) == [151, 153]
    assert {r["amount"] for r in rows} == {"37.75", "38.25"}
    nulls = admin(
        cluster, "--json", "table", "scan", "events", "--columns", "id,name", "--predicates", '["NULL", "name"]'
    ).stdout
    recs = [json.loads(line) for line in nulls.splitlines()]
    assert sorted(r["id"] for r in recs) == list(range(0, 200, 10)) and all(r["name"] is None for r in recs)
    assert set(recs[0]) == {"id", "name"}
    limited = admin(cluster, "table", "scan", "events", "--format", "json", "--limit", "5").stdout
    assert len(limited.splitlines()) == 5

    stats = admin_json(cluster, "table", "statistics", "events")
    assert stats["live_row_count"] == 200 and stats["num_tablets"] == 4 and not stats["replicas_unreachable"]
    assert stats["on_disk_size_all_replicas"] > 0  # metadata and WAL at least
    assert "live row count: 200" in admin(cluster, "table", "statistics", "events").stdout

    copied = admin_json(cluster, "table", "copy", "events", "events_copy", "--create-table")
    assert copied["rows"] == 200
    assert (
        "PARTITION '2026-02-01' <= VALUES < '2026-03-01'" in admin(cluster, "table", "describe", "events_copy").stdout
    )
    # Copy a subset into the existing copy with upsert: nothing new, nothing lost.
    assert (
        admin_json(
            cluster,
            "table",
            "copy",
            "events",
            "events_copy",
            "--write-type",
            "upsert",
            "--predicates",
            '["<", "id", 10]',
        )["rows"]
        == 10
    )
    report = admin_json(cluster, "cluster", "ksck", "--checksum", "--tables", "events,events_copy")
    assert report["ok"], report["errors"]
    sums = {t["name"]: t["checksum"] for t in report["tables"]}
    assert sums["events"]["rows"] == sums["events_copy"]["rows"] == 200
    # Copying into a table that has the rows already, with plain insert: every row fails, named.
    dup = admin(cluster, "table", "copy", "events", "events_copy", ok=False)
    assert dup.returncode == 1 and "ALREADY_PRESENT" in dup.stderr

    assert "deleted table events_copy" in admin(cluster, "table", "delete", "events_copy").stdout
    assert admin(cluster, "table", "list").stdout.split() == ["events"]


def test_bad_input_is_named(cluster: MiniCluster, tmp_path: Path) -> None:
    r = admin(cluster, "table", "scan", "events", "--predicates", '[">=", "nope", 1]', ok=False)
    assert r.returncode == 1 and "column 'nope' is not in table events" in r.stderr
    r = admin(cluster, "table", "scan", "events", "--predicates", '["~", "id", 1]', ok=False)
    assert r.returncode == 1 and "unknown predicate operator" in r.stderr
    r = admin(cluster, "table", "scan", "events", "--predicates", "[>=", ok=False)
    assert r.returncode == 1 and "not valid JSON" in r.stderr
    r = admin(cluster, "table", "describe", "missing", ok=False)
    assert r.returncode == 1 and "missing" in r.stderr
    bad = {**SPEC, "table_name": "bad", "schema": {**SPEC["schema"], "key_column_names": ["nope"]}}
    r = admin(cluster, "table", "create", json.dumps(bad), ok=False)
    assert r.returncode == 1 and "'nope'" in r.stderr
    r = admin(cluster, "table", "create", "@" + str(tmp_path / "absent.json"), ok=False)
    assert r.returncode == 2 and "absent.json" in r.stderr
    r = admin(cluster, "perf", "loadgen", "--rows", "0", ok=False)
    assert r.returncode == 1 and "--rows must be an integer >= 1" in r.stderr
    r = admin(cluster, "tablet", "leader-step-down", "0123456789abcdef0123456789abcdef", ok=False)
    assert r.returncode == 1 and "knows no tablet" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kudu_async.tools.admin",
            "--masters",
            "127.0.0.1:1",
            "--timeout-ms",
            "1500",
            "table",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "TIMED_OUT" in r.stderr and "127.0.0.1:1" in r.stderr


def test_master_tserver_list_and_loadgen(cluster: MiniCluster) -> None:
    masters = admin_json(cluster, "master", "list")
    assert [m["role"] for m in masters] == ["LEADER"] and masters[0]["uuid"] == cluster.masters[0].uuid
    assert "LEADER" in admin(cluster, "master", "list").stdout
    servers = admin_json(cluster, "tserver", "list")
    assert sorted(s["uuid"] for s in servers) == sorted(t.uuid for t in cluster.tservers)
    assert all(s["live"] for s in servers)
    assert admin(cluster, "tserver", "list").stdout.count("LIVE") == 4
    res = admin_json(
        cluster,
        "perf",
        "loadgen",
        "--rows",
        "30000",
        "--threads",
        "3",
        "--batch-rows",
        "5000",
        "--replicas",
        "3",
        "--run-scan",
    )
    assert res["rows"] == 30000 and res["scan"]["rows"] == 30000 and not res["errors"] and not res["kept"]
    assert res["rows_per_s"] > 0 and res["batch_latency_ms"]["p99"] >= res["batch_latency_ms"]["p50"] > 0
    assert not [n for n in admin(cluster, "table", "list").stdout.split() if n.startswith("loadgen_auto")]
    kept = admin_json(cluster, "perf", "loadgen", "--rows", "2000", "--row-mode", "--keep-auto-table")
    assert kept["kept"] and kept["mode"] == "row" and kept["rows"] == 2000
    with kudu.connect(cluster.master_addresses.split(",")) as client:
        assert len(client.table(kept["table"]).scanner().open().read_all_tuples()) == 2000
        client.delete_table(kept["table"])


def _leader(cluster: MiniCluster, tablet: str) -> dict[str, Any]:
    states = admin_json(cluster, "tablet", "raft-state", tablet)
    return max((s for s in states.values() if s.get("role") == "LEADER"), key=lambda s: s["term"])


def _voters(cluster: MiniCluster, tablet: str) -> dict[str, str]:
    return {p["uuid"]: p["member_type"] for p in _leader(cluster, tablet)["peers"] if p["member_type"] != "NONE"}


def test_tablet_commands_through_the_master(cluster: MiniCluster) -> None:
    create_kv_table(cluster, "moves", 2, 500)
    tablet = admin_json(cluster, "table", "describe", "moves")["tablets"][0]["tablet_id"]
    voters = _voters(cluster, tablet)
    assert len(voters) == 3
    spare = next(ts.uuid for ts in cluster.tservers if ts.uuid not in voters)
    src = next(u for u in voters if u != _leader(cluster, tablet)["leader"])

    moved = admin_json(cluster, "tablet", "move-replica", tablet, src, spare)
    assert moved["moved_from"] == src and moved["moved_to"] == spare
    after = wait_for(lambda: v if len(v := _voters(cluster, tablet)) == 3 else None, 60, "3 voters after the move")
    assert spare in after and src not in after and set(after.values()) == {"VOTER"}

    # remove: the master sees the tablet under-replicated and places a new replica (3-4-3).
    victim = next(u for u in after if u != _leader(cluster, tablet)["leader"])
    admin_json(cluster, "tablet", "change-config", tablet, "remove", victim)
    wait_for(
        lambda: (v := _voters(cluster, tablet)) and len(v) == 3 and victim not in v and set(v.values()) == {"VOTER"},
        90,
        "the master to re-replicate after a remove",
    )

    # leader-step-down through the master's locations: another election, the rows still there.
    before = _leader(cluster, tablet)
    admin_json(cluster, "tablet", "leader-step-down", tablet)
    wait_for(
        lambda: any(
            s.get("role") == "LEADER" and s["term"] > before["term"]
            for s in admin_json(cluster, "tablet", "raft-state", tablet).values()
        ),
        30,
        "a new leader",
    )
    report = admin_json(cluster, "cluster", "ksck", "--checksum", "--tables", "moves")
    assert report["ok"], report["errors"]
    assert report["tables"][0]["checksum"]["rows"] == 500


def test_ksck_on_a_damaged_cluster(cluster: MiniCluster) -> None:
    """Last in the module: it kills a tablet server."""
    ok = admin(cluster, "cluster", "ksck")
    assert ok.stdout.rstrip().endswith("OK")
    busiest = max(admin_json(cluster, "tserver", "list"), key=lambda d: d["num_replicas"])
    assert busiest["num_replicas"] > 0
    victim = next(ts for ts in cluster.tservers if ts.uuid == busiest["uuid"])
    cluster.kill_node(victim)
    r = admin(cluster, "cluster", "ksck", ok=False)
    assert r.returncode == 1, r.stdout
    assert "problem(s) found" in r.stdout and victim.uuid in r.stdout
    report = json.loads(admin(cluster, "--json", "cluster", "ksck", ok=False).stdout)
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
