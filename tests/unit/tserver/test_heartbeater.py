"""Heartbeater against fake masters served by a real RpcServer on 127.0.0.1 (real RPC, real timers)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduServiceUnavailable
from kudu_async.rpc import RpcClient, RpcServer
from kudu_async.rpc.server import CallContext
from kudu_async.security.tokens import TokenSigner, TokenVerifier
from kudu_async.tserver.heartbeater import Heartbeater, HeartbeatOptions

INTERVAL_S = 0.05


async def wait_until(pred: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


class FakeMaster:
    """Answers Master/TSHeartbeat as the protocol says, with knobs to misbehave; records every request."""

    def __init__(self, uuid: str = "master-1") -> None:
        self.uuid = uuid
        self.requests: list[dict[str, Any]] = []
        self.leader = True
        self.fail = False
        self.hold = False
        self.gate = asyncio.Event()
        self.held = 0
        self.next_answers: list[dict[str, Any]] = []  # field overrides for the next calls, in order
        self.always: dict[str, Any] = {}  # field overrides for every call
        self.server = RpcServer(None, node_name=uuid)
        self.server.register("Master", "TSHeartbeat", self.ts_heartbeat, requires="service")

    async def start(self, port: int = 0) -> None:
        await self.server.start("127.0.0.1", port)

    @property
    def address(self) -> str:
        return self.server.address

    async def ts_heartbeat(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        self.requests.append(request)
        if self.hold:
            self.held += 1
            await self.gate.wait()
        if self.fail:
            raise KuduServiceUnavailable("fake master is failing on purpose")
        answer: dict[str, Any] = {
            "leader": self.leader,
            "master_uuid": self.uuid,
            "needs_reregister": False,
            "needs_full_report": False,
            "tablets_to_delete": [],
        }
        answer.update(self.always)
        if self.next_answers:
            answer.update(self.next_answers.pop(0))
        return answer

    def reports_sent(self) -> list[dict[str, Any]]:
        return [r["report"] for r in self.requests if r["report"] is not None]


def tablet_report(tablet_id: str, role: str = "FOLLOWER") -> dict[str, Any]:
    return {
        "tablet_id": tablet_id,
        "table_id": "tbl",
        "state": "RUNNING",
        "error": None,
        "role": role,
        "term": 1,
        "leader_uuid": None,
        "config": {"opid_index": 1, "voters": ["ts-1"], "non_voters": [], "peers": {"ts-1": "127.0.0.1:1"}},
        "schema_version": 0,
    }


class Tablets:
    """The tablet manager's side: the replicas that exist, and what the master asked for."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {"t1": tablet_report("t1", "LEADER"), "t2": tablet_report("t2")}
        self.reports_calls: list[set[str] | None] = []
        self.deleted: list[dict[str, Any]] = []

    def reports(self, ids: set[str] | None) -> list[dict[str, Any]]:
        self.reports_calls.append(ids)
        if ids is None:
            return list(self.by_id.values())
        return [self.by_id[i] for i in sorted(ids) if i in self.by_id]

    async def on_delete(self, item: dict[str, Any]) -> None:
        self.deleted.append(item)


def ts_info() -> dict[str, Any]:
    return {
        "uuid": "ts-1",
        "rpc_address": "127.0.0.1:7050",
        "http_address": "127.0.0.1:8050",
        "version": "test",
        "start_time": 1.0,
    }


@pytest.fixture
async def master() -> AsyncIterator[FakeMaster]:
    m = FakeMaster()
    await m.start()
    yield m
    m.gate.set()
    await m.server.stop(1.0)


@pytest.fixture
async def client() -> AsyncIterator[RpcClient]:
    c = RpcClient("ts-1")
    yield c
    await c.close()


@pytest.fixture
def tablets() -> Tablets:
    return Tablets()


HeartbeaterFactory = Callable[..., Awaitable[Heartbeater]]


@pytest.fixture
async def make_hb(client: RpcClient, tablets: Tablets) -> AsyncIterator[HeartbeaterFactory]:
    made: list[Heartbeater] = []

    async def make(addresses: list[str], reports: Any = None, **options: float) -> Heartbeater:
        options.setdefault("interval_s", INTERVAL_S)
        options.setdefault("rpc_timeout_s", 2.0)
        options.setdefault("max_backoff_s", 0.4)
        hb = Heartbeater(
            client, addresses, ts_info, reports or tablets.reports, tablets.on_delete, HeartbeatOptions(**options)
        )
        made.append(hb)
        await hb.start()
        return hb

    yield make
    for hb in made:
        await hb.stop()


async def test_first_heartbeat_registers_with_a_full_report_then_none_until_something_changes(
    master: FakeMaster, make_hb: HeartbeaterFactory
) -> None:
    hb = await make_hb([master.address])
    await wait_until(lambda: len(master.requests) >= 3, what="3 heartbeats")
    first, second, third = master.requests[:3]
    assert first["register"] is True and first["ts"] == ts_info()
    assert first["report"]["full"] is True and first["report"]["seq"] == 0 and first["report"]["removed"] == []
    assert sorted(t["tablet_id"] for t in first["report"]["tablets"]) == ["t1", "t2"]
    assert (first["num_live_tablets"], first["leader_count"]) == (2, 1)
    assert second["register"] is False and second["report"] is None and third["report"] is None
    [st] = hb.status()
    assert st["address"] == master.address and st["registered"] is True and st["is_leader"] is True
    assert st["consecutive_failures"] == 0 and st["last_error"] is None and st["last_success_age_s"] < 1.0


async def test_heartbeats_keep_to_the_interval(master: FakeMaster, make_hb: HeartbeaterFactory) -> None:
    await make_hb([master.address], interval_s=0.1)
    await asyncio.sleep(1.05)
    assert 8 <= len(master.requests) <= 12


async def test_dirty_tablets_go_in_the_next_incremental_report_and_vanished_ones_as_removed(
    master: FakeMaster, make_hb: HeartbeaterFactory, tablets: Tablets
) -> None:
    hb = await make_hb([master.address])
    await wait_until(lambda: len(master.requests) >= 2, what="registration")
    del tablets.by_id["t2"]
    hb.mark_dirty("t1")
    hb.mark_dirty("t2")
    await wait_until(lambda: len(master.reports_sent()) >= 2, what="an incremental report")
    inc = master.reports_sent()[1]
    assert inc["full"] is False and inc["seq"] == 1
    assert [t["tablet_id"] for t in inc["tablets"]] == ["t1"] and inc["removed"] == ["t2"]
    assert {"t1", "t2"} in tablets.reports_calls
    n = len(master.requests)
    await wait_until(lambda: len(master.requests) >= n + 3, what="more heartbeats")
    assert len(master.reports_sent()) == 2  # acknowledged: not sent again
    assert hb.status()[0]["pending_dirty"] == 0


async def test_an_id_marked_again_during_the_call_stays_dirty(master: FakeMaster, make_hb: HeartbeaterFactory) -> None:
    hb = await make_hb([master.address])
    await wait_until(lambda: len(master.requests) >= 2, what="registration")
    master.gate.clear()
    master.hold = True
    hb.mark_dirty("t1")
    await wait_until(lambda: master.held >= 1 and master.requests[-1]["report"] is not None, what="held call")
    hb.mark_dirty("t1")  # changed again while the report carrying it is in flight
    master.hold = False
    master.gate.set()
    await wait_until(lambda: len(master.reports_sent()) >= 3, what="the report sent again")
    again = master.reports_sent()[2]
    assert [t["tablet_id"] for t in again["tablets"]] == ["t1"] and again["seq"] > master.reports_sent()[1]["seq"]
    n = len(master.requests)
    await wait_until(lambda: len(master.requests) >= n + 3, what="more heartbeats")
    assert len(master.reports_sent()) == 3


async def test_each_master_keeps_its_own_backlog_until_it_acknowledges(
    make_hb: HeartbeaterFactory, tablets: Tablets
) -> None:
    a, b = FakeMaster("master-a"), FakeMaster("master-b")
    await a.start()
    await b.start()
    try:
        hb = await make_hb([a.address, b.address])
        await wait_until(lambda: len(a.requests) >= 2 and len(b.requests) >= 2, what="registration with both")
        a.fail = True
        hb.mark_dirty("t1")
        await wait_until(lambda: len(b.reports_sent()) >= 2, what="B gets the incremental report")
        await wait_until(lambda: hb.status()[0]["consecutive_failures"] >= 2, what="A failing")
        st_a, st_b = hb.status()
        assert st_a["pending_dirty"] == 1 and "fake master is failing" in st_a["last_error"]
        assert st_b["pending_dirty"] == 0 and st_b["consecutive_failures"] == 0
        a.fail = False
        # The failed calls carried t1 too; only an acknowledged one counts.
        await wait_until(lambda: hb.status()[0]["consecutive_failures"] == 0, what="A recovering")
        await wait_until(lambda: hb.status()[0]["pending_dirty"] == 0, what="A acknowledging t1")
        assert a.requests[-1]["report"] is None or a.requests[-1]["report"]["tablets"][0]["tablet_id"] == "t1"
        assert len(b.reports_sent()) == 2
    finally:
        await a.server.stop(1.0)
        await b.server.stop(1.0)


async def test_needs_reregister_and_needs_full_report_are_followed(
    master: FakeMaster, make_hb: HeartbeaterFactory
) -> None:
    hb = await make_hb([master.address])
    await wait_until(lambda: len(master.requests) >= 2, what="registration")
    master.next_answers.append({"needs_reregister": True})
    await wait_until(lambda: sum(r["register"] for r in master.requests) >= 2, what="re-registration")
    rereg = next(r for r in master.requests[1:] if r["register"])
    assert rereg["report"]["full"] is True
    n = len(master.requests)
    hb.mark_dirty("t2")
    master.always = {"needs_full_report": True}  # it ignores incremental reports until a full one
    await wait_until(
        lambda: any(r["report"] and r["report"]["full"] for r in master.requests[n:]), what="a full report on request"
    )
    master.always = {}
    reports = [r["report"] for r in master.requests[n:] if r["report"] is not None]
    assert reports[0]["full"] is False and reports[1]["full"] is True
    assert hb.status()[0]["registered"] is True


async def test_request_full_report_goes_to_every_master(master: FakeMaster, make_hb: HeartbeaterFactory) -> None:
    hb = await make_hb([master.address])
    await wait_until(lambda: len(master.requests) >= 2, what="registration")
    hb.request_full_report()
    await wait_until(lambda: len(master.reports_sent()) >= 2, what="a second full report")
    assert master.reports_sent()[1]["full"] is True and len(master.reports_sent()[1]["tablets"]) == 2


async def test_callbacks_run_for_the_leader_only_once_at_a_time_and_failures_are_not_fatal(
    make_hb: HeartbeaterFactory, tablets: Tablets, caplog: pytest.LogCaptureFixture
) -> None:
    follower, leader = FakeMaster("follower"), FakeMaster("leader")
    await follower.start()
    await leader.start()
    follower.leader = False
    follower.always = {"tablets_to_delete": [{"tablet_id": "from-follower", "reason": "x", "delete_type": "DELETED"}]}
    slow_item = {"tablet_id": "t8", "reason": "replaced", "delete_type": "DELETED"}
    leader.always = {
        "tablets_to_delete": [{"tablet_id": "t9", "reason": "table dropped", "delete_type": "TOMBSTONED"}, slow_item],
    }
    release = asyncio.Event()
    slow: list[dict[str, Any]] = []

    async def on_delete(item: dict[str, Any]) -> None:
        if item["tablet_id"] == "t8":  # a slow one
            slow.append(item)
            await release.wait()
            return
        tablets.deleted.append(item)
        raise RuntimeError("disk on fire")

    try:
        with caplog.at_level(logging.ERROR, logger="kudu_async.tserver.heartbeater"):
            hb = await make_hb([follower.address, leader.address])
            hb.on_delete = on_delete
            await wait_until(lambda: len(leader.requests) >= 6 and len(follower.requests) >= 6, what="heartbeats")
        assert {d["tablet_id"] for d in tablets.deleted} == {"t9"}  # never the follower's
        assert len(tablets.deleted) >= 2  # a failing callback is retried on later heartbeats...
        assert "disk on fire" in caplog.text and "heartbeat callback failed" in caplog.text
        assert slow == [slow_item]  # ...but one still running is not doubled
        release.set()
        await wait_until(lambda: len(slow) >= 2, what="the delete requested again once the first ended")
        assert all(s["consecutive_failures"] == 0 for s in hb.status())
        assert [s["is_leader"] for s in hb.status()] == [False, True]
    finally:
        release.set()
        await follower.server.stop(1.0)
        await leader.server.stop(1.0)


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_unreachable_master_backs_off_logs_once_and_recovers(
    make_hb: HeartbeaterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    port = _unused_port()
    with caplog.at_level(logging.DEBUG, logger="kudu_async.tserver.heartbeater"):
        hb = await make_hb([f"127.0.0.1:{port}"])
        await asyncio.sleep(1.5)
        failures = hb.status()[0]["consecutive_failures"]
        # Without backoff a 50 ms interval makes ~30 attempts; with it (cap 0.4 s) at most ~13.
        assert 3 <= failures <= 14, failures
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "backing off" in warnings[0].getMessage()
        assert hb.status()[0]["registered"] is False and "127.0.0.1" in hb.status()[0]["last_error"]
        m = FakeMaster()
        await m.start(port)
        try:
            await wait_until(lambda: hb.status()[0]["registered"], timeout_s=3.0, what="registration")
            assert m.requests[0]["register"] is True and m.requests[0]["report"]["full"] is True
            assert hb.status()[0]["consecutive_failures"] == 0 and hb.status()[0]["last_error"] is None
            assert any("resumed" in r.getMessage() for r in caplog.records)
        finally:
            await m.server.stop(1.0)


async def test_unexpected_exception_is_logged_and_the_loop_restarted(
    master: FakeMaster, make_hb: HeartbeaterFactory, tablets: Tablets, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    def broken_then_fine(ids: set[str] | None) -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise ValueError("tablet manager bug")
        return tablets.reports(ids)

    with caplog.at_level(logging.ERROR, logger="kudu_async.tserver.heartbeater"):
        hb = await make_hb([master.address], reports=broken_then_fine)
        await wait_until(lambda: hb.status()[0]["registered"], what="registration after the restarts")
    errors = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert len(errors) == 1 and errors[0].exc_info is not None  # traceback once, not per attempt
    assert master.requests[0]["register"] is True and master.requests[0]["report"]["full"] is True


async def test_malformed_answer_is_a_failure_not_a_registration(
    master: FakeMaster, make_hb: HeartbeaterFactory, tablets: Tablets
) -> None:
    master.always = {"leader": "yes", "tablets_to_delete": [{"tablet_id": "t9"}]}
    hb = await make_hb([master.address])
    await wait_until(lambda: hb.status()[0]["consecutive_failures"] >= 2, what="failures")
    assert hb.status()[0]["registered"] is False and "leader" in hb.status()[0]["last_error"]
    master.always = {"tablets_to_delete": [{"tablet_id": "t9", "reason": "r", "delete_type": "GONE"}]}
    await wait_until(lambda: "tablets_to_delete" in (hb.status()[0]["last_error"] or ""), what="bad delete item")
    assert tablets.deleted == []
    master.always = {}
    await wait_until(lambda: hb.status()[0]["registered"], what="registration")


async def test_stop_cancels_an_in_flight_call_promptly_and_nothing_runs_after(
    master: FakeMaster, client: RpcClient, tablets: Tablets
) -> None:
    hb = Heartbeater(
        client,
        [master.address],
        ts_info,
        tablets.reports,
        tablets.on_delete,
        HeartbeatOptions(interval_s=INTERVAL_S, rpc_timeout_s=10.0),
    )
    master.hold = True
    await hb.start()
    await wait_until(lambda: master.held >= 1, what="a call in flight")
    t0 = time.monotonic()
    await hb.stop()
    assert time.monotonic() - t0 < 1.0
    n = len(master.requests)
    master.hold = False
    master.gate.set()
    await asyncio.sleep(5 * INTERVAL_S)
    assert len(master.requests) == n
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("heartbeat")] == []


async def test_constructor_checks_its_arguments(client: RpcClient, tablets: Tablets) -> None:
    def make(addrs: list[str], **options: float) -> Heartbeater:
        return Heartbeater(client, addrs, ts_info, tablets.reports, tablets.on_delete, HeartbeatOptions(**options))

    with pytest.raises(KuduInvalidArgument):
        make([])
    with pytest.raises(KuduInvalidArgument):
        make(["127.0.0.1:1", "127.0.0.1:1"])
    with pytest.raises(KuduInvalidArgument):
        make(["127.0.0.1:1"], interval_s=0)
    with pytest.raises(KuduInvalidArgument):
        make(["127.0.0.1:1"], rpc_timeout_s=-1)
    with pytest.raises(KuduInvalidArgument):
        make(["127.0.0.1:1"]).mark_dirty("")


async def test_a_change_is_reported_at_once_not_at_the_next_interval_and_a_burst_shares_one_report(
    master: FakeMaster, make_hb: HeartbeaterFactory
) -> None:
    hb = await make_hb([master.address], interval_s=30.0)
    await wait_until(lambda: len(master.requests) >= 1, what="registration")
    await asyncio.sleep(0.3)
    assert len(master.requests) == 1  # nothing changed: no heartbeat before the 30 s interval
    hb.mark_dirty("t1")
    hb.mark_dirty("t2")  # the same burst (a new table's tablets electing their leaders)
    await wait_until(lambda: len(master.requests) >= 2, timeout_s=5.0, what="an early report")
    report = master.requests[1]["report"]
    assert report["full"] is False and sorted(t["tablet_id"] for t in report["tablets"]) == ["t1", "t2"]
    await asyncio.sleep(0.3)
    assert len(master.requests) == 2  # acknowledged: no further early heartbeat
    assert hb.status()[0]["pending_dirty"] == 0


async def test_a_csr_goes_with_heartbeats_until_the_leader_signs_it(
    master: FakeMaster, client: RpcClient, tablets: Tablets
) -> None:
    wanted = [b"csr-pem"]
    got: list[tuple[bytes, bytes]] = []

    def take(cert: bytes, ca_cert: bytes) -> None:
        got.append((cert, ca_cert))
        wanted.clear()  # the node has its certificate: no CSR any more

    master.leader = False  # a follower does not sign: the CSR keeps coming
    hb = Heartbeater(
        client,
        [master.address],
        ts_info,
        tablets.reports,
        tablets.on_delete,
        HeartbeatOptions(interval_s=INTERVAL_S),
        csr=lambda: wanted[0] if wanted else None,
        on_certificate=take,
    )
    await hb.start()
    try:
        await wait_until(lambda: len(master.requests) >= 2, what="2 heartbeats")
        assert all(r["csr_pem"] == b"csr-pem" for r in master.requests) and got == []
        master.leader = True
        master.always = {"cert_pem": b"cert", "ca_cert_pem": b"ca"}
        await wait_until(lambda: got != [], what="the certificate")
        assert got == [(b"cert", b"ca")]
        n = len(master.requests)
        await wait_until(lambda: len(master.requests) >= n + 2, what="2 more heartbeats")
        assert all("csr_pem" not in r for r in master.requests[n + 1 :])
        # A malformed certificate answer is a failed heartbeat, not a crash.
        wanted.append(b"csr-again")
        master.always = {"cert_pem": "not bytes", "ca_cert_pem": b"ca"}
        await wait_until(lambda: hb.status()[0]["consecutive_failures"] > 0, what="a refused answer")
        assert "cert_pem and ca_cert_pem must both be PEM bytes" in str(hb.status()[0]["last_error"])
    finally:
        await hb.stop()


async def test_the_leaders_token_verification_keys_reach_the_verifier(
    master: FakeMaster, make_hb: HeartbeaterFactory
) -> None:
    signer = TokenSigner(rotation_s=100.0, max_validity_s=50.0)
    now = time.time()
    signer.add(signer.new_key(now))
    signer.add(signer.new_key(now))
    master.always = {"tsks": [k.to_record() for k in signer.verification_keys(now)]}
    hb = await make_hb([master.address])
    verifier = TokenVerifier()
    hb.token_verifier = verifier
    await wait_until(lambda: verifier.max_seq == 1, what="the keys")
    assert [k.seq for k in verifier.keys()] == [0, 1]  # noqa: SIM118 - the verifier's list of keys
    # Every heartbeat says which keys the tserver has, so the leader sends only newer ones.
    await wait_until(lambda: master.requests[-1].get("tsk_seq") == 1, what="a heartbeat naming key 1")
    master.always = {"tsks": [{"seq": 9, "public": b"short"}]}  # malformed: the whole answer is refused
    await wait_until(lambda: hb.status()[0]["last_error"] is not None, what="the refusal")
    assert "token verification key" in hb.status()[0]["last_error"]
    assert verifier.max_seq == 1
