"""TSManager (registration, liveness on a hand-driven clock, reports, validation) and the Master service on it."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.fs.fs_manager import FsManager
from kudu_async.master.master import Master
from kudu_async.master.ts_manager import TSManager, parse_heartbeat_request
from kudu_async.rpc import RpcClient
from kudu_async.server.config import load_config
from kudu_async.tserver.heartbeater import Heartbeater, HeartbeatOptions

TIMEOUT_S = 60.0


def ts_info(uuid: str = "ts-a", port: int = 7050) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "rpc_address": f"127.0.0.1:{port}",
        "http_address": f"127.0.0.1:{port + 1000}",
        "version": "0.1.0",
        "start_time": 1700000000.5,
    }


def tablet(
    tablet_id: str,
    *,
    opid_index: int = 1,
    voters: tuple[str, ...] = ("ts-a", "ts-b", "ts-c"),
    term: int = 1,
    leader: str | None = "ts-a",
    role: str | None = "FOLLOWER",
    state: str = "RUNNING",
) -> dict[str, Any]:
    return {
        "tablet_id": tablet_id,
        "table_id": "table-1",
        "state": state,
        "error": None,
        "role": role,
        "term": term,
        "leader_uuid": leader,
        "config": {
            "opid_index": opid_index,
            "voters": list(voters),
            "non_voters": [],
            "peers": {u: f"127.0.0.1:{7050 + i}" for i, u in enumerate(voters)},
        },
        "schema_version": 0,
    }


def report(
    seq: int, tablets: list[dict[str, Any]], removed: tuple[str, ...] = (), full: bool = False
) -> dict[str, Any]:
    return {"full": full, "seq": seq, "tablets": tablets, "removed": list(removed)}


def describe(m: TSManager, uuid: str, now: float) -> dict[str, Any]:
    """One tserver's entry of the ``/api/v1/tservers`` list."""
    [d] = [d for d in m.descriptors(now) if d["uuid"] == uuid]
    return d


@pytest.fixture
def m() -> TSManager:
    return TSManager(TIMEOUT_S)


def test_registered_tserver_is_live_until_the_unresponsive_timeout(m: TSManager) -> None:
    m.register(ts_info(), now=100.0, wall_time=1.7e9)
    assert m.is_live("ts-a", 100.0) and m.live_tservers(159.9) == ["ts-a"]
    assert not m.is_live("ts-a", 160.0) and m.live_tservers(160.0) == []
    assert m.heartbeat("ts-a", 150.0, num_live_tablets=4, leader_count=2)
    assert m.is_live("ts-a", 209.0)
    [d] = m.descriptors(209.0)
    assert d["uuid"] == "ts-a" and d["rpc_address"] == "127.0.0.1:7050" and d["http_address"] == "127.0.0.1:8050"
    assert d["registered_at"] == 1.7e9 and d["last_heartbeat_age_s"] == 59.0 and d["live"] is True
    assert (d["num_replicas"], d["num_leaders"], d["version"]) == (4, 2, "0.1.0")
    assert m.descriptors(210.0)[0]["live"] is False
    assert not m.is_live("nobody", 0.0)


def test_a_heartbeat_says_whether_the_tserver_is_quiescing(m: TSManager) -> None:
    m.register(ts_info("ts-a"), now=1.0)
    m.register(ts_info("ts-b", 7060), now=1.0)
    assert m.quiescing_tservers() == set() and describe(m, "ts-a", 1.0)["quiescing"] is False
    assert m.heartbeat("ts-a", 2.0, quiescing=True)
    assert m.quiescing_tservers() == {"ts-a"} and describe(m, "ts-a", 2.0)["quiescing"] is True
    assert m.heartbeat("ts-a", 3.0)  # a heartbeat that does not say keeps the last word
    assert m.quiescing_tservers() == {"ts-a"}
    assert m.heartbeat("ts-a", 4.0, quiescing=False)
    assert m.quiescing_tservers() == set()


def test_heartbeat_from_unknown_uuid_is_refused_and_changes_nothing(m: TSManager) -> None:
    assert m.heartbeat("ts-x", 1.0) is False
    assert m.descriptors(1.0) == [] and m.needs_full_report("ts-x")


def test_descriptors_are_sorted_and_a_clock_going_back_does_not_revive(m: TSManager) -> None:
    for u in ("ts-c", "ts-a", "ts-b"):
        m.register(ts_info(u), now=10.0)
    assert [d["uuid"] for d in m.descriptors(10.0)] == ["ts-a", "ts-b", "ts-c"]
    m.heartbeat("ts-a", 5.0)  # an older timestamp must not move last_heartbeat backwards
    assert m.descriptors(10.0)[0]["last_heartbeat_age_s"] == 0.0


def test_reregistration_at_a_new_address_updates_it_and_warns(m: TSManager, caplog: pytest.LogCaptureFixture) -> None:
    m.register(ts_info(port=7050), now=1.0)
    m.process_report("ts-a", report(1, [tablet("t1")], full=True), now=1.0)
    assert not m.needs_full_report("ts-a")
    with caplog.at_level(logging.WARNING, logger="kudu_async.master.ts_manager"):
        m.register(ts_info(port=7150), now=2.0)
    assert "different address" in caplog.text
    assert describe(m, "ts-a", 2.0)["rpc_address"] == "127.0.0.1:7150"
    assert m.needs_full_report("ts-a")  # re-registration: a full report is due again
    assert len(m.descriptors(2.0)) == 1


def test_incremental_report_is_ignored_until_a_full_one_arrives(m: TSManager) -> None:
    m.register(ts_info(), now=1.0)
    assert m.needs_full_report("ts-a")
    assert m.process_report("ts-a", report(1, [tablet("t1")]), now=1.0) is False
    assert m.tablets() == []
    assert m.process_report("ts-a", report(2, [tablet("t1")], full=True), now=1.0) is True
    assert not m.needs_full_report("ts-a") and m.tablets() == ["t1"]
    assert m.process_report("ts-a", report(3, [tablet("t2")]), now=1.0) is True
    assert m.tablets() == ["t1", "t2"]


def test_full_report_drops_unlisted_replicas_and_removed_drops_them_too(m: TSManager) -> None:
    for u in ("ts-a", "ts-b"):
        m.register(ts_info(u), now=1.0)
    m.process_report("ts-a", report(1, [tablet("t1"), tablet("t2"), tablet("t3")], full=True), now=1.0)
    m.process_report("ts-b", report(1, [tablet("t1")], full=True), now=1.0)
    assert set(m.tablet_replicas("t1")) == {"ts-a", "ts-b"}
    m.process_report("ts-a", report(2, [], removed=("t1",)), now=2.0)
    assert set(m.tablet_replicas("t1")) == {"ts-b"}  # only that tserver's entry goes
    m.process_report("ts-a", report(3, [tablet("t3")], full=True), now=3.0)  # t2 unlisted -> removed
    assert m.tablets() == ["t1", "t3"]
    assert describe(m, "ts-a", 3.0)["num_reported_replicas"] == 1
    m.process_report("ts-a", report(4, [], removed=("never-had-it",)), now=3.0)  # harmless


def test_older_config_does_not_overwrite_but_replica_state_is_recorded(m: TSManager) -> None:
    for u in ("ts-a", "ts-b"):
        m.register(ts_info(u), now=1.0)
        m.process_report(u, report(1, [], full=True), now=1.0)
    m.process_report("ts-a", report(2, [tablet("t1", opid_index=7, voters=("ts-a", "ts-b", "ts-d"))]), now=1.0)
    m.process_report("ts-b", report(2, [tablet("t1", opid_index=5, state="BOOTSTRAPPING")]), now=1.0)
    info = m.tablet_info("t1")
    assert info is not None
    assert info["config"]["opid_index"] == 7 and info["config"]["voters"] == ["ts-a", "ts-b", "ts-d"]
    assert info["config_reported_by"] == "ts-a"
    assert m.tablet_replicas("t1")["ts-b"]["state"] == "BOOTSTRAPPING"
    assert m.tablet_replicas("t1")["ts-b"]["config"]["opid_index"] == 5
    m.process_report("ts-b", report(3, [tablet("t1", opid_index=9, voters=("ts-a", "ts-b"))]), now=1.0)
    assert m.tablet_info("t1")["config"]["opid_index"] == 9  # type: ignore[index]


def test_leader_follows_the_newest_term(m: TSManager) -> None:
    for u in ("ts-a", "ts-b"):
        m.register(ts_info(u), now=1.0)
        m.process_report(u, report(1, [], full=True), now=1.0)
    m.process_report("ts-a", report(2, [tablet("t1", term=3, leader="ts-b")]), now=1.0)
    m.process_report("ts-b", report(2, [tablet("t1", term=2, leader="ts-a")]), now=1.0)  # stale view
    info = m.tablet_info("t1")
    assert info is not None and (info["leader_uuid"], info["term"]) == ("ts-b", 3)


def test_stale_or_duplicate_seq_is_ignored(m: TSManager) -> None:
    m.register(ts_info(), now=1.0)
    m.process_report("ts-a", report(5, [tablet("t1", state="RUNNING")], full=True), now=1.0)
    assert m.process_report("ts-a", report(5, [tablet("t1", state="FAILED")]), now=1.0) is False
    assert m.process_report("ts-a", report(4, [tablet("t1", state="FAILED")]), now=1.0) is False
    assert m.tablet_replicas("t1")["ts-a"]["state"] == "RUNNING"
    m.register(ts_info(), now=2.0)  # a restarted tserver numbers from 0 again
    assert m.process_report("ts-a", report(0, [tablet("t1", state="FAILED")], full=True), now=2.0) is True
    assert m.tablet_replicas("t1")["ts-a"]["state"] == "FAILED"


def test_report_from_an_unregistered_tserver_is_an_error(m: TSManager) -> None:
    with pytest.raises(KuduIllegalState):
        m.process_report("ts-x", report(1, [], full=True), now=1.0)


def test_request_full_reports_marks_everyone(m: TSManager) -> None:
    m.register(ts_info(), now=1.0)
    m.process_report("ts-a", report(1, [], full=True), now=1.0)
    m.request_full_reports()
    assert m.needs_full_report("ts-a")


def test_returned_reports_are_copies(m: TSManager) -> None:
    m.register(ts_info(), now=1.0)
    m.process_report("ts-a", report(1, [tablet("t1")], full=True), now=1.0)
    m.tablet_replicas("t1")["ts-a"]["state"] = "MUTATED"
    assert m.tablet_replicas("t1")["ts-a"]["state"] == "RUNNING"


# --- validation --------------------------------------------------------------------------------------------


def heartbeat_request() -> dict[str, Any]:
    return {
        "ts": ts_info(),
        "register": True,
        "report": report(0, [tablet("t1")], full=True),
        "num_live_tablets": 1,
        "leader_count": 0,
    }


def test_valid_heartbeat_request_parses() -> None:
    req = parse_heartbeat_request(heartbeat_request())
    assert req.uuid == "ts-a" and req.register and req.report is not None and req.report.full
    req2 = parse_heartbeat_request({**heartbeat_request(), "report": None})
    assert req2.report is None


def _set(d: Any, path: str, value: Any) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[int(k)] if isinstance(d, list) else d[k]
    if value is _DELETE:
        del d[keys[-1]]
    else:
        d[keys[-1]] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("ts", "x", "ts"),
        ("ts.uuid", "", "ts.uuid"),
        ("ts.uuid", 7, "ts.uuid"),
        ("ts.uuid", "u" * 1000, "ts.uuid"),
        ("ts.rpc_address", "nohost", "ts.rpc_address"),
        ("ts.http_address", "h:99999", "ts.http_address"),
        ("ts.rpc_address", "0.0.0.0:7050", "ts.rpc_address"),
        ("ts.http_address", "[::]:8050", "ts.http_address"),
        ("ts.version", None, "ts.version"),
        ("ts.start_time", "yesterday", "ts.start_time"),
        ("ts.start_time", float("nan"), "ts.start_time"),
        ("ts.start_time", _DELETE, "ts.start_time"),
        ("register", 1, "register"),
        ("register", _DELETE, "register"),
        ("num_live_tablets", -1, "num_live_tablets"),
        ("leader_count", True, "leader_count"),
        ("report", [], "report"),
        ("report.full", "yes", "report.full"),
        ("report.seq", -1, "report.seq"),
        ("report.tablets", {}, "report.tablets"),
        ("report.removed", ["t9", "t9"], "report.removed"),
        ("report.removed", ["t1"], "report.removed"),
        ("report.tablets.0.tablet_id", None, "report.tablets[0].tablet_id"),
        ("report.tablets.0.table_id", 3, "report.tablets[0].table_id"),
        ("report.tablets.0.state", None, "report.tablets[0].state"),
        ("report.tablets.0.error", 5, "report.tablets[0].error"),
        ("report.tablets.0.role", 5, "report.tablets[0].role"),
        ("report.tablets.0.term", 1.5, "report.tablets[0].term"),
        ("report.tablets.0.leader_uuid", "", "report.tablets[0].leader_uuid"),
        ("report.tablets.0.schema_version", -2, "report.tablets[0].schema_version"),
        ("report.tablets.0.config", None, "report.tablets[0].config"),
        ("report.tablets.0.config.opid_index", -2, "report.tablets[0].config.opid_index"),
        ("report.tablets.0.config.voters", "ts-a", "report.tablets[0].config.voters"),
        ("report.tablets.0.config.non_voters", ["ts-a"], "report.tablets[0].config"),
        ("report.tablets.0.config.peers", {"ts-a": "127.0.0.1:1"}, "report.tablets[0].config.peers"),
        ("report.tablets.0.config.peers.ts-a", "bad", "report.tablets[0].config.peers[ts-a]"),
    ],
)
def test_every_bad_field_is_named(path: str, value: Any, field: str) -> None:
    req = copy.deepcopy(heartbeat_request())
    _set(req, path, value)
    with pytest.raises(KuduInvalidArgument) as ei:
        parse_heartbeat_request(req)
    assert ei.value.details["field"] == field, ei.value


def test_duplicate_tablet_in_one_report_is_rejected() -> None:
    req = heartbeat_request()
    req["report"]["tablets"].append(tablet("t1"))
    with pytest.raises(KuduInvalidArgument, match="more than once"):
        parse_heartbeat_request(req)


def test_bad_report_changes_no_state(m: TSManager) -> None:
    m.register(ts_info(), now=1.0)
    good = tablet("t1")
    bad = tablet("t2")
    bad["term"] = "x"
    with pytest.raises(KuduInvalidArgument):
        m.process_report("ts-a", report(1, [good, bad], full=True), now=1.0)
    assert m.tablets() == [] and m.needs_full_report("ts-a")
    with pytest.raises(KuduInvalidArgument):
        m.register({**ts_info("ts-b"), "rpc_address": "x"}, now=1.0)
    assert [d["uuid"] for d in m.descriptors(1.0)] == ["ts-a"]


def test_timeout_must_be_positive() -> None:
    with pytest.raises(KuduInvalidArgument):
        TSManager(0)


# --- the Master/TSHeartbeat service, in process over real RPC ----------------------------------------------


async def wait_until(pred: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def master_node(tmp_path: Path) -> AsyncIterator[Master]:
    config = load_config(
        [
            "--role",
            "master",
            "--data-dir",
            str(tmp_path / "m"),
            "--rpc-bind",
            "127.0.0.1:0",
            "--http-bind",
            "127.0.0.1:0",
            "--tserver-unresponsive-timeout-ms",
            "500",
        ],
        {},
    )
    fs = FsManager(config.data_dir, "master")
    fs.open_or_create()
    node = Master(config, fs)
    await node.start()
    deadline = time.monotonic() + 10
    # a lone master creates its catalog and elects itself at once, then writes its first token-signing key
    while not node.is_catalog_leader() or node.catalog_manager.token_verifier_max_seq() < 0:
        assert time.monotonic() < deadline, "single master never led its catalog and wrote a token-signing key"
        await asyncio.sleep(0.02)
    yield node
    await node.stop()


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    c = RpcClient("test")
    yield c
    await c.close()


async def test_service_registration_reports_and_reregistration(master_node: Master, rpc: RpcClient) -> None:
    addr = master_node.rpc_address

    async def hb(**fields: Any) -> dict[str, Any]:
        req = {"ts": ts_info(), "register": False, "report": None, "num_live_tablets": 1, "leader_count": 1}
        req.update(fields)
        resp: dict[str, Any] = await rpc.call(addr, "Master", "TSHeartbeat", req)
        return resp

    resp = await hb(report=report(0, [tablet("t1")], full=True))  # unknown and not registering
    assert resp["needs_reregister"] is True and master_node.ts_manager.descriptors(0.0) == []
    resp = await hb(register=True, report=report(0, [tablet("t1")]))  # incremental right after registering
    assert [k["seq"] for k in resp.pop("tsks")] == [0]  # a tserver that knows no key is sent the public halves
    assert resp == {
        "leader": True,
        "master_uuid": master_node.uuid,
        "needs_reregister": False,
        "needs_full_report": True,
        "tablets_to_delete": [],
        "master_addresses": [addr],  # every master of the catalog's config, so tservers follow changes
    }
    assert master_node.ts_manager.tablets() == []
    resp = await hb(report=report(1, [tablet("t1")], full=True))
    assert resp["needs_full_report"] is False and master_node.ts_manager.tablets() == ["t1"]
    moved = {**ts_info(), "rpc_address": "127.0.0.1:7999"}
    resp = await hb(ts=moved, report=report(2, [], removed=("t1",)))  # moved without registering
    assert resp["needs_reregister"] is True and master_node.ts_manager.tablets() == ["t1"]
    resp = await hb(ts=moved, register=True, report=report(0, [], full=True))
    assert resp["needs_full_report"] is False and master_node.ts_manager.tablets() == []
    [listed] = (await rpc.call(addr, "Master", "ListTabletServers", {}))["servers"]
    assert listed["rpc_address"] == "127.0.0.1:7999" and listed["live"] is True and listed["num_replicas"] == 1
    with pytest.raises(KuduInvalidArgument, match=r"report\.tablets\[0\]\.term"):
        await hb(report=report(3, [{**tablet("t2"), "term": "one"}]))
    assert master_node.ts_manager.tablets() == []
    assert master_node.status()["num_live_tservers"] == 1
    await asyncio.sleep(0.6)  # the unresponsive timeout is 500 ms here
    assert (master_node.status()["num_live_tservers"], master_node.status()["num_dead_tservers"]) == (0, 1)


async def test_follower_master_records_tservers_but_ignores_reports(
    master_node: Master, rpc: RpcClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(master_node, "is_catalog_leader", lambda: False)
    req = {
        "ts": ts_info(),
        "register": True,
        "report": report(0, [tablet("t1")], full=True),
        "num_live_tablets": 1,
        "leader_count": 0,
    }
    resp = await rpc.call(master_node.rpc_address, "Master", "TSHeartbeat", req)
    assert resp["leader"] is False and resp["needs_full_report"] is False and resp["needs_reregister"] is False
    assert master_node.ts_manager.tablets() == [] and master_node.ts_manager.live_tservers(time.monotonic()) == ["ts-a"]


async def test_real_heartbeater_fills_the_real_masters_directory(master_node: Master, rpc: RpcClient) -> None:
    hosted = {"t1": tablet("t1", role="LEADER"), "t2": tablet("t2")}
    deletes: list[dict[str, Any]] = []

    def reports(ids: set[str] | None) -> list[dict[str, Any]]:
        return [r for i, r in sorted(hosted.items()) if ids is None or i in ids]

    async def on_item(item: dict[str, Any]) -> None:
        deletes.append(item)

    hb = Heartbeater(rpc, [master_node.rpc_address], ts_info, reports, on_item, HeartbeatOptions(interval_s=0.05))
    await hb.start()
    try:
        tsm = master_node.ts_manager
        await wait_until(lambda: tsm.tablets() == ["t1", "t2"], "the full report")
        del hosted["t2"]
        hosted["t1"] = tablet("t1", role="FOLLOWER", term=2, leader="ts-b", opid_index=4)
        hb.mark_dirty("t1")
        hb.mark_dirty("t2")
        await wait_until(lambda: tsm.tablets() == ["t1"], "the incremental report")
        info = tsm.tablet_info("t1")
        assert info is not None
        assert (info["leader_uuid"], info["term"], info["config"]["opid_index"]) == ("ts-b", 2, 4)
        [d] = tsm.descriptors(time.monotonic())
        assert d["live"] and (d["num_replicas"], d["num_leaders"]) == (1, 0)
        assert hb.status()[0]["master_uuid"] == master_node.uuid and deletes == []
    finally:
        await hb.stop()


def test_silent_for_counts_from_the_last_heartbeat_and_is_none_for_strangers(m: TSManager) -> None:
    assert m.silent_for("ts-a", 100.0) is None
    m.register(ts_info(), now=100.0)
    assert m.silent_for("ts-a", 100.0) == 0.0
    assert m.silent_for("ts-a", 403.5) == 303.5  # live or not, the clock runs until it is heard from again
    m.heartbeat("ts-a", 400.0)
    assert m.silent_for("ts-a", 403.5) == 3.5


def test_unregister_forgets_a_dead_tserver_and_refuses_a_live_one_unless_forced(m: TSManager) -> None:
    for u in ("ts-a", "ts-b"):
        m.register(ts_info(u), now=1.0)
    m.process_report("ts-a", report(1, [tablet("t1")], full=True), now=1.0)
    m.process_report("ts-b", report(1, [tablet("t1"), tablet("t2")], full=True), now=1.0)
    with pytest.raises(KuduIllegalState, match="tserver ts-b is live"):
        m.unregister("ts-b", now=2.0)
    m.unregister("ts-b", now=1.0 + TIMEOUT_S + 1)  # silent past the unresponsive timeout: dead
    assert [d["uuid"] for d in m.descriptors(now=2.0)] == ["ts-a"]
    assert set(m.tablet_replicas("t1")) == {"ts-a"} and m.tablets() == ["t1"]
    m.unregister("ts-a", now=2.0, force_live=True)
    assert m.descriptors(now=2.0) == [] and m.tablets() == []
    with pytest.raises(KuduNotFound, match="tserver ts-a is not registered"):
        m.unregister("ts-a", now=2.0)
