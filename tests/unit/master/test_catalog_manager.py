"""The catalog manager on one in-process master: exactly-once DDL (a retry under the same request id gets
the original reply, never ALREADY_PRESENT, NOT_FOUND or a second application, also after a restart; ids
reused for another request and malformed ids are refused); concurrent DDL on one table planned again, never
lost; deleted tablets concluded gone only on full reports, and replicas of deleted tablets deleted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from kudu_async.common.errors import (
    KuduAlreadyPresent,
    KuduConfigurationError,
    KuduInvalidArgument,
    KuduNotFound,
    KuduNotSupported,
    KuduServiceUnavailable,
)
from kudu_async.common.partition import HashDimension, PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.common.types import INT64, STRING
from kudu_async.fs.fs_manager import FsManager
from kudu_async.master import catalog_manager
from kudu_async.master.catalog_manager import CatalogConflict, CatalogManager
from kudu_async.master.master import Master
from kudu_async.master.messages import (
    AlterTableRequest,
    CreateTableRequest,
    DeleteTableRequest,
    GetTableLocationsRequest,
    IsDdlDoneRequest,
    ListTablesRequest,
    RecallDeletedTableRequest,
    TableRef,
    TabletToDelete,
)
from kudu_async.master.sys_catalog import TableRecord, put
from kudu_async.rpc.messages import convert
from kudu_async.server.config import load_config

SCHEMA = Schema([ColumnSchema("key", INT64, nullable=False), ColumnSchema("val", STRING)], 1)
PSCHEMA = PartitionSchema(SCHEMA, [HashDimension(["key"], 2)], ["key"])
TIMEOUT_S = 10.0


async def start_master(data_dir: Path, tservers: int = 3) -> Master:
    config = load_config(
        [
            "--role",
            "master",
            "--data-dir",
            str(data_dir),
            "--rpc-bind",
            "127.0.0.1:0",
            "--http-bind",
            "127.0.0.1:0",
            "--raft-tick-interval-ms",
            "20",
            "--raft-heartbeat-interval-ms",
            "100",
        ],
        {},
    )
    fs = FsManager(config.data_dir, "master")
    fs.open_or_create()
    node = Master(config, fs)
    await node.start()
    await node.catalog_manager.stop()  # no background work: tables stay as the DDL wrote them
    deadline = time.monotonic() + 10
    while not node.is_catalog_leader():  # a lone master creates its catalog and elects itself at once
        assert time.monotonic() < deadline, "single master never led its catalog"
        await asyncio.sleep(0.02)
    for i in range(tservers):  # placement needs live tservers; nothing is ever sent to these
        node.ts_manager.register(
            {
                "uuid": f"ts-{i}",
                "rpc_address": f"127.0.0.1:{9 + i}",
                "http_address": f"127.0.0.1:{19 + i}",
                "version": "0.1.0",
                "start_time": 1.0,
            },
            time.monotonic(),
        )
    return node


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    node = await start_master(tmp_path / "m")
    yield node
    await node.stop()


def create_req(name: str, request_id: str | None, **extra: Any) -> dict[str, Any]:
    req = {"name": name, "schema": SCHEMA.to_dict(), "partition_schema": PSCHEMA.to_dict(), "num_replicas": 3, **extra}
    return req if request_id is None else {**req, "request_id": request_id}


def add_column(name: str, column: str, request_id: str | None) -> dict[str, Any]:
    req = {"name": name, "alter_schema_steps": [{"type": "ADD_COLUMN", "column": {"name": column, "type": "int32"}}]}
    return req if request_id is None else {**req, "request_id": request_id}


async def make_running(cm: CatalogManager, name: str) -> TableRecord:
    """What the background loop does once every tablet has a leader (it is stopped here)."""
    t = cm.find_table(name)
    await cm._write([put(replace(t, state="RUNNING"))])
    return cm.find_table(name)


def live_named(cm: CatalogManager, name: str) -> list[TableRecord]:
    return [t for t in cm.tables.values() if t.name == name and t.state not in ("DELETING", "DELETED")]


async def test_create_table_retried_with_its_request_id_returns_the_original_table(master: Master) -> None:
    cm = master.catalog_manager
    first = await cm.create_table(convert(create_req("t", "client-a:1"), CreateTableRequest), TIMEOUT_S)
    again = await cm.create_table(convert(create_req("t", "client-a:1"), CreateTableRequest), TIMEOUT_S)
    assert again == first
    assert [t.id for t in live_named(cm, "t")] == [first["table_id"]]
    assert len(cm.tablets) == 2  # the tablets were made once
    with pytest.raises(KuduAlreadyPresent):  # another request for the same name is still refused
        await cm.create_table(convert(create_req("t", "client-b:1"), CreateTableRequest), TIMEOUT_S)
    with pytest.raises(KuduAlreadyPresent):  # ... and so is one without an id
        await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)


async def test_new_tablets_name_a_first_leader_spread_evenly_over_the_servers(master: Master) -> None:
    """Each new tablet's record names the replica that campaigns first; over a table (and a range
    partition added later) those are spread so every server leads its share."""
    cm = master.catalog_manager
    six = PartitionSchema(SCHEMA, [HashDimension(["key"], 6)], ["key"])
    await cm.create_table(convert(create_req("t", None, partition_schema=six.to_dict()), CreateTableRequest), TIMEOUT_S)
    recs = [cm.tablets[tid] for tid in cm.find_table("t").tablet_ids]
    firsts = [r.first_leader for r in recs]
    assert all(f in r.replicas for f, r in zip(firsts, recs, strict=True))
    assert sorted(firsts.count(u) for u in {"ts-0", "ts-1", "ts-2"}) == [2, 2, 2]


async def test_alter_table_retried_adds_the_column_and_bumps_the_version_once(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    await make_running(cm, "t")
    first = await cm.alter_table(convert(add_column("t", "extra", "c:2"), AlterTableRequest), TIMEOUT_S)
    assert first["schema_version"] == 1
    assert await cm.alter_table(convert(add_column("t", "extra", "c:2"), AlterTableRequest), TIMEOUT_S) == first
    t = cm.find_table("t")
    assert [c["name"] for c in t.schema["columns"]] == ["key", "val", "extra"] and t.schema_version == 1
    with pytest.raises(KuduInvalidArgument, match="extra"):  # without the id it is a second, bad alter
        await cm.alter_table(convert(add_column("t", "extra", "c:3"), AlterTableRequest), TIMEOUT_S)


async def test_rename_retried_after_it_applied_is_not_not_found(master: Master) -> None:
    cm = master.catalog_manager
    created = await cm.create_table(convert(create_req("old", "c:1"), CreateTableRequest), TIMEOUT_S)
    await make_running(cm, "old")
    req = {"name": "old", "new_name": "new", "request_id": "c:2"}
    first = await cm.alter_table(convert(req, AlterTableRequest), TIMEOUT_S)
    assert (
        await cm.alter_table(convert(dict(req), AlterTableRequest), TIMEOUT_S)
        == first
        == {"table_id": created["table_id"], "schema_version": 0}
    )
    assert cm.find_table("new").id == created["table_id"]
    with pytest.raises(KuduNotFound):
        await cm.alter_table(convert({**req, "request_id": "c:3"}, AlterTableRequest), TIMEOUT_S)


async def test_delete_retried_after_the_table_is_gone_returns_the_original_reply(master: Master) -> None:
    cm = master.catalog_manager
    created = await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    first = await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S)
    assert first == {"table_id": created["table_id"]}
    t = cm.tables[created["table_id"]]
    await cm._write([put(replace(t, state="DELETED"))])
    assert await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S) == first
    with pytest.raises(KuduNotFound):
        await cm.delete_table(convert({"name": "t", "request_id": "c:3"}, DeleteTableRequest), TIMEOUT_S)
    # Even the create, retried after its table was deleted, answers what it answered then.
    assert await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S) == created
    assert live_named(cm, "t") == []


async def test_a_request_id_reused_for_a_different_request_is_refused(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    with pytest.raises(KuduInvalidArgument, match="already used for a different request"):
        await cm.create_table(convert(create_req("t", "c:1", num_replicas=1), CreateTableRequest), TIMEOUT_S)
    with pytest.raises(KuduInvalidArgument, match=r"different request \(CreateTable\)"):
        await cm.delete_table(convert({"name": "t", "request_id": "c:1"}, DeleteTableRequest), TIMEOUT_S)
    assert cm.find_table("t").state == "CREATING"


async def test_a_retry_with_its_fields_in_another_order_is_the_same_request(master: Master) -> None:
    cm = master.catalog_manager
    req = create_req("t", "c:1")
    first = await cm.create_table(convert(req, CreateTableRequest), TIMEOUT_S)
    reordered = dict(reversed(list(req.items())))
    reordered["schema"] = dict(reversed(list(req["schema"].items())))
    assert await cm.create_table(convert(reordered, CreateTableRequest), TIMEOUT_S) == first


async def test_malformed_request_ids_are_refused_and_nothing_is_applied(master: Master) -> None:
    cm = master.catalog_manager
    for rid in (7, b"c:1", "", "x" * 129, "has space", "ctl\x01", "tab\t", "naïve", "nl\n", ["c", 1]):
        with pytest.raises(KuduInvalidArgument, match="'request_id' must be a string of 1-128 printable ASCII"):
            await cm.create_table(convert({**create_req("t", None), "request_id": rid}, CreateTableRequest), TIMEOUT_S)
    assert cm.tables == {}
    assert master.catalog is not None and master.catalog.requests == {}


async def test_longest_request_id_is_accepted(master: Master) -> None:
    cm = master.catalog_manager
    rid = "k" * 128
    first = await cm.create_table(convert(create_req("t", rid), CreateTableRequest), TIMEOUT_S)
    assert await cm.create_table(convert(create_req("t", rid), CreateTableRequest), TIMEOUT_S) == first
    assert master.catalog is not None and rid in master.catalog.requests


async def test_concurrent_attempts_of_one_request_apply_it_once(master: Master) -> None:
    cm = master.catalog_manager
    replies = await asyncio.gather(
        *(cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S) for _ in range(4))
    )
    assert len({r["table_id"] for r in replies}) == 1
    assert len(live_named(cm, "t")) == 1 and len(cm.tables) == 1 and len(cm.tablets) == 2


async def test_concurrent_creates_of_one_name_make_one_table(master: Master) -> None:
    cm = master.catalog_manager
    results = await asyncio.gather(
        *(cm.create_table(convert(create_req("t", f"c{i}:1"), CreateTableRequest), TIMEOUT_S) for i in range(4)),
        return_exceptions=True,
    )
    made = [r for r in results if isinstance(r, dict)]
    assert len(made) == 1 and all(isinstance(r, KuduAlreadyPresent) for r in results if r not in made)
    assert [t.id for t in cm.tables.values()] == [made[0]["table_id"]]
    assert {r.table_id for r in cm.tablets.values()} == {made[0]["table_id"]}  # no tablets of a loser


async def test_concurrent_alters_of_one_table_are_all_applied(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    await make_running(cm, "t")
    replies = await asyncio.gather(
        *(
            cm.alter_table(convert(add_column("t", f"c{i}", f"c:{10 + i}"), AlterTableRequest), TIMEOUT_S)
            for i in range(5)
        )
    )
    assert sorted(r["schema_version"] for r in replies) == [1, 2, 3, 4, 5]
    t = cm.find_table("t")
    assert sorted(c["name"] for c in t.schema["columns"][2:]) == [f"c{i}" for i in range(5)]
    assert t.schema_version == 5
    assert master.catalog is not None and master.catalog.conflicts > 0  # some were planned again


async def test_a_stale_background_write_never_undoes_an_acknowledged_alter(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    stale = await make_running(cm, "t")
    await cm.alter_table(convert(add_column("t", "extra", "c:2"), AlterTableRequest), TIMEOUT_S)
    with pytest.raises(CatalogConflict, match="changed since it was read"):
        await cm._write([put(replace(stale, state="RUNNING", dropped_tablet_ids=()))])
    t = cm.find_table("t")
    assert t.schema_version == 1 and t.state == "ALTERING" and t.schema["columns"][-1]["name"] == "extra"


async def test_request_ids_survive_a_master_restart(tmp_path: Path) -> None:
    node = await start_master(tmp_path / "m")
    try:
        created = await node.catalog_manager.create_table(
            convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S
        )
        deleted = await node.catalog_manager.delete_table(
            convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S
        )
    finally:
        await node.stop()
    node = await start_master(tmp_path / "m")
    try:
        cm = node.catalog_manager
        assert await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S) == created
        assert (
            await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S) == deleted
        )
        assert node.role_status()["ddl_request_ids_remembered"] == 2
    finally:
        await node.stop()


async def test_a_restarted_master_asks_for_a_retry_until_known_tservers_register_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await start_master(tmp_path / "m")
    try:
        await node.catalog_manager.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    finally:
        await node.stop()
    node = await start_master(tmp_path / "m", tservers=1)  # two of the three have not heartbeated yet
    try:
        cm = node.catalog_manager
        with pytest.raises(KuduServiceUnavailable, match="2 tablet servers holding replicas have not registered"):
            await cm.create_table(convert(create_req("u", "c:2"), CreateTableRequest), TIMEOUT_S)
        monkeypatch.setattr(catalog_manager, "REGISTRATION_GRACE_S", 0.0)
        with pytest.raises(KuduInvalidArgument, match="1 tablet servers are alive"):
            await cm.create_table(convert(create_req("u", "c:2"), CreateTableRequest), TIMEOUT_S)
    finally:
        await node.stop()


async def test_a_new_cluster_short_of_tservers_is_told_at_once(tmp_path: Path) -> None:
    node = await start_master(tmp_path / "m", tservers=1)
    try:  # no tablet is placed anywhere yet: no tserver is known to be missing
        with pytest.raises(KuduInvalidArgument, match="not enough live tablet servers"):
            await node.catalog_manager.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    finally:
        await node.stop()


async def test_a_new_leader_does_not_take_missing_reports_for_deleted_tablets(master: Master) -> None:
    cm = master.catalog_manager
    created = await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S)
    assert master.check_leadership()  # every tserver is asked for a full report; none has sent one
    await cm.process_once()
    assert cm.tables[created["table_id"]].state == "DELETING" and len(cm.tablets) == 2
    # Full reports without the tablets arrive from every tserver: now they are known to be gone.
    for i in range(3):
        master.ts_manager.process_report(
            f"ts-{i}", {"full": True, "seq": 1, "tablets": [], "removed": []}, time.monotonic()
        )
    await cm.process_once()
    assert cm.tables == {} and cm.tablets == {}
    assert master.catalog is not None and len(master.catalog.deleted_tablets) == 2


async def test_heartbeats_have_replicas_of_deleted_tablets_deleted(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    tablet_ids = sorted(cm.tablets)
    await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S)
    master.check_leadership()
    for i in range(3):
        master.ts_manager.process_report(
            f"ts-{i}", {"full": True, "seq": 1, "tablets": [], "removed": []}, time.monotonic()
        )
    await cm.process_once()
    assert cm.tablets == {}
    # A CreateTablet sent before the delete lands late: ts-0 reports a replica of a deleted tablet.
    late = {
        "tablet_id": tablet_ids[0],
        "table_id": "x",
        "state": "RUNNING",
        "error": None,
        "role": "LEADER",
        "term": 1,
        "leader_uuid": "ts-0",
        "schema_version": 0,
        "config": {"opid_index": 1, "voters": ["ts-0"], "non_voters": [], "peers": {"ts-0": "127.0.0.1:9"}},
    }
    master.ts_manager.process_report(
        "ts-0", {"full": False, "seq": 2, "tablets": [late], "removed": []}, time.monotonic()
    )
    assert cm.deleted_tablets_on("ts-0") == [
        TabletToDelete(tablet_id=tablet_ids[0], delete_type="DELETED", reason="its tablet was deleted from the catalog")
    ]
    assert cm.deleted_tablets_on("ts-1") == []


async def test_a_tserver_with_nothing_to_delete_that_the_directory_lists_is_asked_for_a_full_report(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    tablet_id = sorted(cm.tablets)[0]
    await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S)
    master.check_leadership()
    replica = {
        "tablet_id": tablet_id,
        "table_id": "x",
        "state": "RUNNING",
        "error": None,
        "role": "LEADER",
        "term": 1,
        "leader_uuid": "ts-0",
        "schema_version": 0,
        "config": {"opid_index": 1, "voters": ["ts-0"], "non_voters": [], "peers": {"ts-0": "127.0.0.1:9"}},
    }
    for i in range(3):  # ts-0's report of the replica is the last it sent; the deletion's report is lost
        master.ts_manager.process_report(
            f"ts-{i}", {"full": True, "seq": 1, "tablets": [replica] if i == 0 else [], "removed": []}, time.monotonic()
        )
    sent: list[tuple[str, str, dict[str, Any]]] = []

    async def fake_call(address: str, service: str, method: str, req: dict[str, Any], timeout_s: float) -> Any:
        sent.append((address, method, req))
        return {"tablet_id": req["tablet_id"], "deleted": False}

    monkeypatch.setattr(master.rpc_client, "call", fake_call)
    await cm.process_once()
    for _ in range(100):
        if master.ts_manager.needs_full_report("ts-0"):
            break
        await asyncio.sleep(0.01)
    assert [(m, r["tablet_id"]) for _, m, r in sent] == [("DeleteTablet", tablet_id)]
    assert master.ts_manager.needs_full_report("ts-0") and not master.ts_manager.needs_full_report("ts-1")
    # Its full report without the replica settles it: the tablet and then the table leave the catalog.
    master.ts_manager.process_report("ts-0", {"full": True, "seq": 2, "tablets": [], "removed": []}, time.monotonic())
    await cm.process_once()
    await cm.process_once()
    assert cm.tables == {} and cm.tablets == {}


def test_an_excess_voter_counts_as_fresh_for_the_trim_grace_at_one_config_index() -> None:
    """The master leaves a just-over-replicated tablet to the operator's move for TRIM_GRACE_S; the clock
    restarts when the config changes and the record goes when the excess does."""
    from kudu_async.master.rereplication import TabletView

    def view(tid: str, voters: tuple[str, ...], index: int) -> TabletView:
        return TabletView(tid, 3, index, frozenset(voters), frozenset(), {}, voters[0], {}, None)

    cm = CatalogManager.__new__(CatalogManager)  # only the trim bookkeeping is exercised
    cm._excess_since = {}
    grace = catalog_manager.TRIM_GRACE_S
    four, three = ("a", "b", "c", "d"), ("a", "b", "c")
    assert cm._fresh_excess([view("t1", four, 7), view("t2", three, 4)], 100.0) == {"t1"}
    assert cm._fresh_excess([view("t1", four, 7)], 100.0 + grace - 0.1) == {"t1"}
    assert cm._fresh_excess([view("t1", four, 7)], 100.0 + grace) == frozenset()  # trimmed from now on
    assert cm._fresh_excess([view("t1", four, 9)], 100.0 + grace + 1) == {"t1"}  # a new config: a new grace
    assert cm._fresh_excess([view("t1", three, 10)], 200.0) == frozenset()
    assert cm._excess_since == {}


async def test_is_create_table_done_waits_for_the_pass_that_finishes_the_table(master: Master) -> None:
    """An Is*Done call with ``wait_ms`` is answered when a background pass makes the table RUNNING, not at
    the end of its wait; without a wait it answers at once; bad waits are refused."""
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
    req = {"name": "t"}
    assert (await cm.wait_ddl_done(cm.is_create_table_done, convert(req, IsDdlDoneRequest), TIMEOUT_S))[
        "done"
    ] is False  # wait_ms 0

    t0 = time.monotonic()
    waiting = asyncio.create_task(
        cm.wait_ddl_done(cm.is_create_table_done, convert({**req, "wait_ms": 5000}, IsDdlDoneRequest), TIMEOUT_S)
    )
    await asyncio.sleep(0.1)
    cm._notify_pass()  # a pass that did not finish it: the call keeps waiting
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await make_running(cm, "t")
    cm._notify_pass()
    reply = await asyncio.wait_for(waiting, 2.0)
    assert reply["done"] is True and reply["state"] == "RUNNING"
    assert time.monotonic() - t0 < 2.0

    await cm.alter_table(
        convert(add_column("t", "c2", None), AlterTableRequest), TIMEOUT_S
    )  # ALTERING until a pass finishes it
    t0 = time.monotonic()
    reply = await cm.wait_ddl_done(
        cm.is_alter_table_done, convert({**req, "wait_ms": 200}, IsDdlDoneRequest), 0.05
    )  # the caller's deadline wins
    assert reply["done"] is False and reply["state"] == "ALTERING"
    assert time.monotonic() - t0 < 1.0
    for bad in (-1, 5001, 1.5, True, "100"):
        with pytest.raises(KuduInvalidArgument, match="wait_ms"):
            await cm.wait_ddl_done(
                cm.is_create_table_done, convert({**req, "wait_ms": bad}, IsDdlDoneRequest), TIMEOUT_S
            )


async def test_locations_of_a_table_being_deleted_say_the_table_was_deleted(master: Master) -> None:
    """While its tablets leave the catalog one by one, a deleted table has no locations at all: a client
    holding cached locations learns the table is gone, never that some of its range partitions were dropped."""
    cm = master.catalog_manager
    created = await cm.create_table(convert(create_req("t", "c:1"), CreateTableRequest), TIMEOUT_S)
    req = convert({"table_id": created["table_id"]}, GetTableLocationsRequest)
    assert len(cm.get_table_locations(req).tablets) == 2
    await cm.delete_table(convert({"name": "t", "request_id": "c:2"}, DeleteTableRequest), TIMEOUT_S)
    t = cm.tables[created["table_id"]]
    assert t.state == "DELETING"
    cm.tablets.pop(t.tablet_ids[0])  # one tablet already gone from the catalog, the other still there
    with pytest.raises(KuduNotFound, match="table t not found: it was deleted"):
        cm.get_table_locations(req)


# --- soft-deleted tables (Kudu 1.17: SoftDeleteTable, RecallDeletedTable, purge after the reserve time) ---


def delete_req(name: str, reserve_seconds: int | None = None) -> DeleteTableRequest:
    req: dict[str, Any] = {"name": name}
    if reserve_seconds is not None:
        req["reserve_seconds"] = reserve_seconds
    return convert(req, DeleteTableRequest)


def listed(cm: CatalogManager, soft: bool = False) -> list[str]:
    return [t["name"] for t in cm.list_tables(ListTablesRequest(show_soft_deleted=soft))["tables"]]


async def test_a_soft_deleted_table_is_listed_apart_keeps_its_name_and_is_recalled(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
    t = await make_running(cm, "t")
    await cm.delete_table(delete_req("t", 600), TIMEOUT_S)
    soft = cm.tables[t.id]
    assert soft.state == "SOFT_DELETED" and soft.ext.reserve_seconds == 600
    assert listed(cm) == [] and listed(cm, soft=True) == ["t"]
    assert cm.find_table("t").id == t.id  # still opened, read and written by name, as in Kudu
    assert cm.get_table_locations(GetTableLocationsRequest(name="t")).tablets
    with pytest.raises(KuduAlreadyPresent, match="table t already exists with id"):
        await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
    with pytest.raises(KuduInvalidArgument, match="soft_deleted table t should not be altered"):
        await cm.alter_table(convert(add_column("t", "c", None), AlterTableRequest), TIMEOUT_S)
    with pytest.raises(KuduInvalidArgument, match="soft_deleted table t should not be soft deleted again"):
        await cm.delete_table(delete_req("t", 60), TIMEOUT_S)
    await cm.recall_table(RecallDeletedTableRequest(table_id=t.id, new_table_name="t2"), TIMEOUT_S)
    back = cm.tables[t.id]
    assert (back.state, back.name, back.ext.deleted_at, back.tablet_ids) == ("RUNNING", "t2", None, t.tablet_ids)
    assert back.purge_at() is None
    assert listed(cm) == ["t2"] and listed(cm, soft=True) == []
    with pytest.raises(KuduNotFound, match="not soft-deleted"):
        await cm.recall_table(RecallDeletedTableRequest(table_id=t.id), TIMEOUT_S)


async def test_deleting_a_soft_deleted_table_with_no_reserve_purges_it_at_once(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
    t = await make_running(cm, "t")
    await cm.delete_table(delete_req("t", 600), TIMEOUT_S)
    await cm.delete_table(delete_req("t", 0), TIMEOUT_S)
    assert cm.tables[t.id].state == "DELETING" and listed(cm, soft=True) == []


async def test_delete_table_follows_the_default_reserve_flag_unless_the_request_names_one(master: Master) -> None:
    cm = master.catalog_manager
    for name in ("a", "b"):
        await cm.create_table(convert(create_req(name, None), CreateTableRequest), TIMEOUT_S)
        await make_running(cm, name)
    assert master.config.default_deleted_table_reserve_seconds == 0  # Kudu's default: delete at once
    master.config.values["default_deleted_table_reserve_seconds"] = 60
    await cm.delete_table(delete_req("a"), TIMEOUT_S)
    await cm.delete_table(delete_req("b", 0), TIMEOUT_S)
    assert cm.find_table("a").state == "SOFT_DELETED" and cm.find_table("a").ext.reserve_seconds == 60
    assert [t.state for t in cm.tables.values() if t.name == "b"] == ["DELETING"]
    with pytest.raises(KuduInvalidArgument, match="should not be soft deleted again"):
        await cm.delete_table(delete_req("a"), TIMEOUT_S)


async def test_the_leader_purges_a_soft_deleted_table_once_its_reserve_time_is_over(master: Master) -> None:
    cm = master.catalog_manager
    for name in ("old", "young"):
        await cm.create_table(convert(create_req(name, None), CreateTableRequest), TIMEOUT_S)
        await make_running(cm, name)
        await cm.delete_table(delete_req(name, 30), TIMEOUT_S)
    old = cm.find_table("old")
    await cm._write([put(old.with_extra(deleted_at=time.time() - 31))])  # deleted 31 s ago
    assert master.check_leadership()
    await cm.process_once()
    assert cm.tables[old.id].state == "DELETING"
    assert cm.find_table("young").state == "SOFT_DELETED"
    with pytest.raises(KuduNotFound):
        await cm.recall_table(RecallDeletedTableRequest(table_id=old.id), TIMEOUT_S)


async def test_soft_deletion_and_its_times_survive_a_master_restart(tmp_path: Path) -> None:
    node = await start_master(tmp_path / "m")
    try:
        cm = node.catalog_manager
        await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
        await make_running(cm, "t")
        await cm.delete_table(delete_req("t", 600), TIMEOUT_S)
        before = cm.find_table("t")
    finally:
        await node.stop()
    node = await start_master(tmp_path / "m")
    try:
        after = node.catalog_manager.find_table("t")
        assert after.state == "SOFT_DELETED" and after.ext == before.ext and after.ext.reserve_seconds == 600
    finally:
        await node.stop()


# --- table statistics and limits ---------------------------------------------------------------------------


def leader_report(tablet_id: str, table_id: str, rows: int | None, size: int | None) -> dict[str, Any]:
    return {
        "tablet_id": tablet_id,
        "table_id": table_id,
        "state": "RUNNING",
        "error": None,
        "role": "LEADER",
        "term": 1,
        "leader_uuid": "ts-0",
        "schema_version": 0,
        "config": {"opid_index": 1, "voters": ["ts-0"], "non_voters": [], "peers": {"ts-0": "127.0.0.1:9"}},
        "live_row_count": rows,
        "on_disk_size": size,
    }


async def test_table_statistics_sum_the_leaders_reported_figures(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
    t = await make_running(cm, "t")
    a, b = t.tablet_ids
    now = time.monotonic()
    master.ts_manager.process_report(
        "ts-0", {"full": True, "seq": 1, "tablets": [leader_report(a, t.id, 10, 1000)], "removed": []}, now
    )
    stats = cm.get_table_statistics(TableRef(name="t"))
    assert (stats.live_row_count, stats.on_disk_size) == (-1, -1)  # tablet b has not reported yet
    assert (stats.disk_size_limit, stats.row_count_limit) == (-1, -1)
    master.ts_manager.process_report(
        "ts-0",
        {"full": False, "seq": 2, "tablets": [leader_report(b, t.id, 5, 500)], "removed": []},
        now,
    )
    stats = cm.get_table_statistics(TableRef(name="t"))
    assert (stats.live_row_count, stats.on_disk_size) == (15, 1500)


async def test_limits_need_the_flag_stand_alone_and_stop_writes_near_the_limit(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", None), CreateTableRequest), TIMEOUT_S)
    t = await make_running(cm, "t")
    limit = convert({"name": "t", "row_count_limit": 100}, AlterTableRequest)
    with pytest.raises(KuduNotSupported, match="--enable_table_write_limit is not enabled"):
        await cm.alter_table(limit, TIMEOUT_S)
    master.config.values["enable_table_write_limit"] = True
    with pytest.raises(KuduConfigurationError, match="cannot be combined"):
        await cm.alter_table(convert({**add_column("t", "c", None), "row_count_limit": 100}, AlterTableRequest), 5)
    with pytest.raises(KuduInvalidArgument, match="greater than or equal to -1"):
        await cm.alter_table(convert({"name": "t", "disk_size_limit": -2}, AlterTableRequest), TIMEOUT_S)
    await cm.alter_table(limit, TIMEOUT_S)
    assert cm.get_table_statistics(TableRef(name="t")).row_count_limit == 100
    assert cm.write_limited_tables() == []  # no figures reported yet
    a, b = t.tablet_ids
    reports = [leader_report(a, t.id, 50, 10), leader_report(b, t.id, 44, 10)]
    master.ts_manager.process_report("ts-0", {"full": True, "seq": 1, "tablets": reports, "removed": []}, 0.0)
    assert cm.write_limited_tables() == []  # 94 rows: below 95% of the limit
    reports[1] = leader_report(b, t.id, 45, 10)
    master.ts_manager.process_report("ts-0", {"full": True, "seq": 2, "tablets": reports, "removed": []}, 0.0)
    assert cm.write_limited_tables() == [t.id]
    await cm.alter_table(convert({"name": "t", "row_count_limit": -1}, AlterTableRequest), TIMEOUT_S)
    assert cm.get_table_statistics(TableRef(name="t")).row_count_limit == -1
    assert cm.write_limited_tables() == []


async def test_replication_factor_changes_in_the_catalog_within_bounds(master: Master) -> None:
    """Kudu's set_replication_factor: the table's factor changes; re-replication then follows it."""
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("t", None, num_replicas=1), CreateTableRequest), TIMEOUT_S)
    await make_running(cm, "t")
    for bad in (2, 0, 9):
        with pytest.raises(KuduInvalidArgument, match=f"illegal replication factor {bad}"):
            await cm.alter_table(convert({"name": "t", "num_replicas": bad}, AlterTableRequest), TIMEOUT_S)
    with pytest.raises(KuduInvalidArgument, match="not enough live tablet servers"):
        await cm.alter_table(convert({"name": "t", "num_replicas": 5}, AlterTableRequest), TIMEOUT_S)
    await cm.alter_table(convert({"name": "t", "num_replicas": 3}, AlterTableRequest), TIMEOUT_S)
    t = cm.find_table("t")
    assert (t.num_replicas, t.state, t.schema_version) == (3, "RUNNING", 0)  # no tablet is touched
    assert cm.get_table_schema(TableRef(name="t"))["num_replicas"] == 3
    master.config.values["enable_table_write_limit"] = True
    with pytest.raises(KuduConfigurationError, match="cannot be combined"):
        await cm.alter_table(convert({"name": "t", "num_replicas": 1, "row_count_limit": 5}, AlterTableRequest), 5)


async def test_in_flight_tables_are_those_being_created_or_altered(master: Master) -> None:
    cm = master.catalog_manager
    await cm.create_table(convert(create_req("new", None), CreateTableRequest), TIMEOUT_S)
    await cm.create_table(convert(create_req("done", None), CreateTableRequest), TIMEOUT_S)
    await make_running(cm, "done")
    listed = cm.list_in_flight_tables()["tables"]
    assert [(t["name"], t["state"], t["num_tablets"], t["num_tablets_in_flight"]) for t in listed] == [
        ("new", "CREATING", 2, 2)
    ]
    await cm.alter_table(convert(add_column("done", "c", None), AlterTableRequest), TIMEOUT_S)
    listed = cm.list_in_flight_tables()["tables"]
    assert [(t["name"], t["state"], t["num_tablets_in_flight"]) for t in listed] == [
        ("done", "ALTERING", 2),  # no leader has reported the new schema
        ("new", "CREATING", 2),
    ]
