"""The sys catalog state machine: whole-batch apply, stale writes and duplicate names refused, request ids
remembered (bounded, in log order) and kept by the snapshot."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import msgpack
import msgspec
import pytest
from msgspec.structs import replace

from kudu_async.common.errors import KuduCorruption, KuduInvalidArgument
from kudu_async.master.messages import TabletPartition
from kudu_async.master.sys_catalog import (
    MAX_TSKS,
    Op,
    PutTable,
    PutTablet,
    RequestRecord,
    SysCatalogStateMachine,
    TableRecord,
    TabletRecord,
    TServerStateRecord,
    TskRecord,
    decode_ops,
    delete,
    encode_ops,
    put,
    put_ca,
    put_tsk,
    request,
    set_tserver_state,
)


def table(tid: str, name: str, state: Any = "RUNNING", **extra: Any) -> TableRecord:
    return TableRecord(
        id=tid,
        name=name,
        state=state,
        schema={},
        schema_version=0,
        partition_schema={},
        num_replicas=1,
        tablet_ids=(),
        created_at=1.0,
        owner=None,
        comment=None,
        **extra,
    )


WHOLE = TabletPartition((), b"", b"", b"", b"")  # an unpartitioned table's one tablet


def tablet(tid: str, table_id: str = "t1", state: Any = "CREATING") -> TabletRecord:
    return TabletRecord(id=tid, table_id=table_id, partition=WHOLE, replicas={}, state=state, first_leader="ts-0")


def outcome(method: str, result: dict[str, Any], digest: str = "d") -> RequestRecord:
    return RequestRecord(method=method, digest=digest, result=result, time=1.5)


class Catalog:
    """A state machine fed entries at increasing indexes, as the replica would."""

    def __init__(self, directory: Path, **kw: Any) -> None:
        self.sm = SysCatalogStateMachine(directory, None, **kw)
        self.index = 0

    async def apply(self, *ops: Op) -> dict[str, Any]:
        self.index += 1
        result: dict[str, Any] = await self.sm.apply(self.index, 1, encode_ops(list(ops)))
        return result


@pytest.fixture
def cat(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path)


async def test_put_stamps_the_index_that_wrote_the_record_as_its_rev(cat: Catalog) -> None:
    assert await cat.apply(put(table("t1", "a"))) == {"index": 1}
    assert cat.sm.tables["t1"].rev == 1
    await cat.apply(put(replace(cat.sm.tables["t1"], state="ALTERING")))
    assert cat.sm.tables["t1"] == table("t1", "a", "ALTERING", rev=2)


async def test_put_derived_from_an_overwritten_version_is_refused_and_changes_nothing(cat: Catalog) -> None:
    await cat.apply(put(table("t1", "a")))
    read_by_a = cat.sm.tables["t1"]
    read_by_b = cat.sm.tables["t1"]
    await cat.apply(put(replace(read_by_a, schema_version=1, state="ALTERING")))
    result = await cat.apply(put(replace(read_by_b, state="RUNNING")), put(tablet("x", "t1")))
    assert "changed since it was read" in result["conflict"] and result["index"] == 3
    assert cat.sm.tables["t1"].schema_version == 1 and cat.sm.tables["t1"].state == "ALTERING"
    assert "x" not in cat.sm.tablets  # the whole batch, not just the stale op
    assert cat.sm.applied_index == 3 and cat.sm.conflicts == 1


async def test_put_of_a_record_deleted_since_it_was_read_does_not_resurrect_it(cat: Catalog) -> None:
    await cat.apply(put(tablet("x", state="CREATING")))
    stale = cat.sm.tablets["x"]
    await cat.apply(delete("tablet", "x"))
    result = await cat.apply(put(replace(stale, state="RUNNING")))
    assert "deleted since it was read" in result["conflict"] and "x" not in cat.sm.tablets


async def test_two_live_tables_never_share_a_name(cat: Catalog) -> None:
    await cat.apply(put(table("t1", "a")))
    result = await cat.apply(put(table("t2", "a", "CREATING")))
    assert "table name 'a' is taken by table t1" in result["conflict"] and "t2" not in cat.sm.tables
    await cat.apply(put(table("t3", "b")))
    renamed = await cat.apply(put(replace(cat.sm.tables["t3"], name="a")))
    assert "taken" in renamed["conflict"] and cat.sm.tables["t3"].name == "b"
    # Within one batch too.
    both = await cat.apply(put(table("t4", "c")), put(table("t5", "c")))
    assert "taken by table t4" in both["conflict"] and not {"t4", "t5"} & set(cat.sm.tables)


async def test_a_name_is_free_again_once_its_table_is_being_deleted(cat: Catalog) -> None:
    await cat.apply(put(table("t1", "a")))
    await cat.apply(put(replace(cat.sm.tables["t1"], state="DELETING")))
    assert "conflict" not in await cat.apply(put(table("t2", "a", "CREATING")))
    # ... and a deleting table may be written (the background loop's bookkeeping) while another holds it.
    assert "conflict" not in await cat.apply(put(cat.sm.tables["t1"]))
    # Names move inside one batch: the check sees the batch's own earlier ops.
    await cat.apply(put(table("t3", "b")))
    t2, t3 = cat.sm.tables["t2"], cat.sm.tables["t3"]
    swap = await cat.apply(put(replace(t2, name="tmp")), put(replace(t3, name="a")))
    assert "conflict" not in swap and cat.sm.tables["t3"].name == "a"


async def test_request_id_is_recorded_with_its_result_and_a_second_use_is_refused(cat: Catalog) -> None:
    entry = outcome("CreateTable", {"table_id": "t1"}, digest="d1")
    await cat.apply(put(table("t1", "a")), request("c:1", entry))
    assert cat.sm.requests["c:1"] == replace(entry, index=1)
    again = await cat.apply(put(table("t9", "z")), request("c:1", replace(entry, result={})))
    assert "request id 'c:1' was already applied" in again["conflict"]
    assert "t9" not in cat.sm.tables and cat.sm.requests["c:1"].result == {"table_id": "t1"}
    twice = await cat.apply(request("c:2", entry), request("c:2", entry))
    assert "already applied" in twice["conflict"] and "c:2" not in cat.sm.requests


async def test_remembered_request_ids_are_bounded_oldest_first(tmp_path: Path) -> None:
    cat = Catalog(tmp_path, max_requests=3)
    for i in range(1, 6):
        await cat.apply(request(f"c:{i}", outcome("DeleteTable", {"table_id": str(i)}, digest="")))
    assert list(cat.sm.requests) == ["c:3", "c:4", "c:5"]
    # A refused batch forgets nothing.
    await cat.apply(request("c:5", outcome("DeleteTable", {}, digest="")))
    assert list(cat.sm.requests) == ["c:3", "c:4", "c:5"]


async def test_snapshot_keeps_tables_tablets_request_ids_and_their_order(tmp_path: Path) -> None:
    cat = Catalog(tmp_path, snapshot_every=1000)
    for i in range(4):
        entry = outcome("CreateTable", {"table_id": f"t{i}"})
        await cat.apply(put(table(f"t{i}", f"n{i}")), request(f"c:{9 - i}", entry))
    await cat.apply(put(tablet("x", "t0")))
    await cat.sm.snapshot()
    again = SysCatalogStateMachine(tmp_path, None)
    again.load()
    assert again.applied_index == again.durable_index() == 5
    assert again.tables == cat.sm.tables and again.tablets == cat.sm.tablets
    assert list(again.requests.items()) == list(cat.sm.requests.items())
    assert list(again.requests) == ["c:9", "c:8", "c:7", "c:6"]


def test_damaged_snapshot_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "sys-catalog.snapshot").write_bytes(
        msgpack.packb({"index": 7, "tables": {}, "tablets": {}, "requests": [["c:1"]], "deleted_tablets": []})
    )
    with pytest.raises(KuduCorruption, match=r"requests\[0\]"):
        SysCatalogStateMachine(tmp_path, None).load()


@pytest.mark.parametrize(
    "op",
    [
        ["put", "table", "t"],
        ["put", "bogus", "t", {}],
        ["delete", "table"],
        ["request", "c:1"],
        ["request", 7, {}],
        ["remove", "table", "t"],
        "put",
    ],
)
def test_malformed_operations_are_refused_before_replication(op: Any) -> None:
    with pytest.raises(KuduInvalidArgument, match="bad sys catalog operation"):
        encode_ops([cast(Op, op)])


async def test_deleted_tablet_ids_are_remembered_bounded_and_kept_by_the_snapshot(tmp_path: Path) -> None:
    cat = Catalog(tmp_path, max_deleted=2)
    for tid in ("x", "y", "z"):
        await cat.apply(put(tablet(tid)))
    await cat.apply(delete("tablet", "x"), delete("tablet", "never-existed"), delete("table", "t-none"))
    assert cat.sm.deleted_tablets == {"x": 4}
    await cat.apply(delete("tablet", "y"))
    await cat.apply(delete("tablet", "z"))
    assert list(cat.sm.deleted_tablets) == ["y", "z"]  # the oldest forgotten first
    refused = await cat.apply(delete("tablet", "y"), put(table("t", "a", rev=99)))
    assert "conflict" in refused and list(cat.sm.deleted_tablets) == ["y", "z"]
    await cat.sm.snapshot()
    again = SysCatalogStateMachine(tmp_path, None)
    again.load()
    assert again.deleted_tablets == {"y": 5, "z": 6}


def test_records_encode_to_the_maps_the_catalog_stores(tmp_path: Path) -> None:
    """The entry and snapshot bytes are those of plain msgpack maps and lists, keys in the master's order."""
    created = table("t1", "a", "CREATING")
    as_map: dict[str, Any] = {
        "id": "t1",
        "name": "a",
        "state": "CREATING",
        "schema": {},
        "schema_version": 0,
        "partition_schema": {},
        "num_replicas": 1,
        "tablet_ids": [],
        "created_at": 1.0,
        "owner": None,
        "comment": None,
    }
    altered = replace(created, rev=3, dropped_tablet_ids=("x",), next_column_id=2, state="ALTERING")
    altered_map = {**as_map, "state": "ALTERING", "rev": 3, "dropped_tablet_ids": ["x"], "next_column_id": 2}
    tablet_map = {
        "id": "x",
        "table_id": "t1",
        "partition": {
            "hash_buckets": [],
            "range_key_start": b"",
            "range_key_end": b"",
            "partition_key_start": b"",
            "partition_key_end": b"",
        },
        "replicas": {},
        "state": "CREATING",
        "first_leader": "ts-0",
    }
    entry = outcome("CreateTable", {"table_id": "t1"})
    ops: list[Op] = [put(created), put(altered), put(tablet("x")), delete("tablet", "y"), request("c:1", entry)]
    wire = [
        ["put", "table", "t1", as_map],
        ["put", "table", "t1", altered_map],
        ["put", "tablet", "x", tablet_map],
        ["delete", "tablet", "y"],
        ["request", "c:1", {"method": "CreateTable", "digest": "d", "result": {"table_id": "t1"}, "time": 1.5}],
    ]
    assert encode_ops(ops) == msgpack.packb(wire, use_bin_type=True)
    assert decode_ops(msgpack.packb(wire, use_bin_type=True)) == ops


async def test_snapshot_bytes_are_the_maps_the_catalog_stores(cat: Catalog, tmp_path: Path) -> None:
    await cat.apply(put(table("t1", "a")), request("c:1", outcome("CreateTable", {"table_id": "t1"})))
    await cat.apply(put(tablet("x")))
    await cat.apply(delete("tablet", "x"))
    await cat.sm.snapshot()
    doc = msgpack.unpackb((tmp_path / "sys-catalog.snapshot").read_bytes())
    assert list(doc) == ["index", "tables", "tablets", "requests", "deleted_tablets"]
    assert doc["index"] == 3 and doc["tablets"] == {} and doc["deleted_tablets"] == [["x", 3]]
    assert doc["tables"]["t1"]["rev"] == 1 and doc["tables"]["t1"]["name"] == "a"
    assert doc["requests"] == [
        ["c:1", {"method": "CreateTable", "digest": "d", "result": {"table_id": "t1"}, "time": 1.5, "index": 1}]
    ]


@pytest.mark.parametrize(
    ("op", "problem"),
    [
        (["put", "table", "t1", {"id": "t1", "name": "a"}], "missing required field `state`"),
        (PutTablet("tablet", "y", tablet("x")), "put of tablet y carries the record of x"),
        (PutTable("table", "t1", table("t1", "a", state="BOGUS")), "Invalid enum value 'BOGUS'"),
        (PutTable("table", "t1", table("t1", "a", rev="7")), "Expected `int`, got `str`"),
    ],
)
def test_entries_with_malformed_records_are_refused_before_replication(op: Any, problem: str) -> None:
    with pytest.raises(KuduInvalidArgument, match=re.escape(problem)):
        encode_ops([op])


def test_snapshot_with_records_never_stamped_by_an_entry_is_an_error(tmp_path: Path) -> None:
    unstamped = msgspec.to_builtins(table("t", "a"))
    (tmp_path / "sys-catalog.snapshot").write_bytes(
        msgpack.packb({"index": 7, "tables": {"t": unstamped}, "tablets": {}, "requests": [], "deleted_tablets": []})
    )
    with pytest.raises(KuduCorruption, match="records without 'rev'"):
        SysCatalogStateMachine(tmp_path, None).load()


async def test_the_cluster_ca_is_written_once_and_survives_a_snapshot(cat: Catalog, tmp_path: Path) -> None:
    first = put_ca(b"cert-1", b"key-1")
    assert await cat.apply(first) == {"index": 1}
    assert cat.sm.ca is not None and cat.sm.ca.cert_pem == b"cert-1"
    # A second CA (another leader's, racing) is refused whole: the first one stays the cluster's.
    result = await cat.apply(put_ca(b"cert-2", b"key-2"), put(table("t1", "a")))
    assert result["conflict"] == "the cluster CA exists already"
    assert cat.sm.ca.cert_pem == b"cert-1" and "t1" not in cat.sm.tables
    await cat.sm.snapshot()
    again = SysCatalogStateMachine(tmp_path, None)
    again.load()
    assert again.ca == cat.sm.ca


async def test_token_signing_keys_are_kept_bounded_and_survive_the_snapshot(tmp_path: Path) -> None:
    cat = Catalog(tmp_path, snapshot_every=1000)
    for seq in range(MAX_TSKS + 2):
        assert await cat.apply(put_tsk(TskRecord(seq, bytes(32), 1.0, 2.0))) == {"index": seq + 1}
    assert sorted(cat.sm.tsks) == list(range(2, MAX_TSKS + 2))  # the oldest go, by seq on every master alike
    refused = await cat.apply(put_tsk(TskRecord(5, bytes(32), 1.0, 2.0)))
    assert refused["conflict"] == "token-signing key 5 already exists"
    await cat.sm.snapshot()
    again = SysCatalogStateMachine(tmp_path, None)
    again.load()
    assert again.tsks == cat.sm.tsks


async def test_tserver_states_are_set_cleared_and_kept_by_the_snapshot(tmp_path: Path) -> None:
    cat = Catalog(tmp_path, snapshot_every=1000)
    maint = TServerStateRecord("MAINTENANCE_MODE", 2.5)
    assert await cat.apply(set_tserver_state("ts-a", maint), set_tserver_state("ts-b", maint)) == {"index": 1}
    assert await cat.apply(set_tserver_state("ts-b", None)) == {"index": 2}
    await cat.apply(set_tserver_state("ts-c", None))  # clearing a state never set is harmless
    assert cat.sm.tserver_states == {"ts-a": maint}
    await cat.sm.snapshot()
    doc = msgpack.unpackb((tmp_path / "sys-catalog.snapshot").read_bytes())
    assert doc["tserver_states"] == {"ts-a": {"state": "MAINTENANCE_MODE", "since": 2.5}}
    again = SysCatalogStateMachine(tmp_path, None)
    again.load()
    assert again.tserver_states == {"ts-a": maint}


def test_tserver_state_operations_are_checked_before_replication() -> None:
    assert decode_ops(encode_ops([set_tserver_state("ts-a", None)])) == [set_tserver_state("ts-a", None)]
    with pytest.raises(KuduInvalidArgument, match=re.escape("Invalid enum value 'DRAINING'")):
        encode_ops([set_tserver_state("ts-a", TServerStateRecord(cast(Any, "DRAINING"), 1.0))])
