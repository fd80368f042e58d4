"""Scanner configuration, scan tokens (serialise, parse, refuse garbage), deadlines and backoff, and the
leader-finding retry loops of the master client and of tablet calls - all against fake RPCs."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from typing import Any

import msgpack
import pytest

import kudu_async as kudu
from kudu_async.client.aio import AsyncClient
from kudu_async.client.core import ClientCore
from kudu_async.client.meta_cache import ReplicaLocation, TabletLocation
from kudu_async.client.scanner import TOKEN_VERSION, ScanConfig, ScanToken, snapshot_to_hybrid
from kudu_async.client.table import Table
from kudu_async.common import retry
from kudu_async.common.clock import make_timestamp
from kudu_async.common.errors import (
    KuduNetworkError,
    KuduNotFound,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.key_encoding import encode_key
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.retry import BackoffPolicy, Deadline


@pytest.fixture
def typed_table(make_table: Callable[..., Table]) -> Table:
    b = kudu.schema_builder()
    b.add_column("key", kudu.int64, nullable=False).primary_key()
    b.add_column("val", kudu.string)
    b.add_column("dec", kudu.decimal, precision=6, scale=2)
    b.add_column("day", kudu.date)
    b.add_column("ts", kudu.unixtime_micros)
    return make_table(b.build(), kudu.Partitioning().add_hash_partitions(["key"], 2))


# --- scanner configuration ------------------------------------------------------------------------------------


def test_scan_config_setters_chain_and_store(typed_table: Table) -> None:
    c = ScanConfig(typed_table)
    assert c.set_projected_column_names(["val", "key"]) is c
    assert c.projection == ["val", "key"]
    c.set_projected_column_indexes([0, 2])
    assert c.projection == ["key", "dec"]
    assert c.add_predicate(typed_table["key"] >= 3) is c
    c.add_predicates([typed_table["val"].is_not_null(), ColumnPredicate("dec", "<", 5)])
    assert c.predicates == [
        ColumnPredicate("key", ">=", 3),
        ColumnPredicate("val", "IS NOT NULL"),
        ColumnPredicate("dec", "<", Decimal("5.00")),
    ]  # a raw predicate is bound too
    c.set_read_mode("READ_YOUR_WRITES")
    assert c.read_mode == kudu.READ_YOUR_WRITES
    c.set_limit(0).set_batch_size_bytes(1 << 30).set_selection("FIRST_REPLICA").set_timeout_millis(5)
    assert (c.limit, c.batch_size_bytes, c.selection, c.timeout_ms) == (0, 16 << 20, kudu.FIRST_REPLICA, 5)
    assert c.set_cache_blocks(False) is c
    c.add_lower_bound({"key": 5}).add_exclusive_upper_bound([9])
    assert (c.lower_key, c.upper_key) == (encode_key(typed_table.schema, [5]), encode_key(typed_table.schema, [9]))
    c.add_upper_bound((10,))
    assert c.upper_key == encode_key(typed_table.schema, [10])
    assert c.output_schema().names == ["key", "dec"]


def test_fault_tolerant_and_snapshot_imply_read_at_snapshot(typed_table: Table) -> None:
    c = ScanConfig(typed_table).set_fault_tolerant()
    assert c.fault_tolerant and c.read_mode == kudu.READ_AT_SNAPSHOT
    when = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    c2 = ScanConfig(typed_table).set_snapshot(when)
    assert c2.read_mode == kudu.READ_AT_SNAPSHOT
    assert c2.snapshot_ts == make_timestamp(1_714_564_800_000_000) == snapshot_to_hybrid(1_714_564_800_000_000)
    assert snapshot_to_hybrid(dt.datetime(2024, 5, 1, 12)) == c2.snapshot_ts  # naive datetimes are UTC
    assert ScanConfig(typed_table).set_snapshot_raw(12345).snapshot_ts == 12345


@pytest.mark.parametrize(
    ("call", "complaint"),
    [
        (lambda c: c.set_projected_column_names(["nope"]), "projected column 'nope'"),
        (lambda c: c.add_predicate("key > 3"), "not a predicate"),
        (lambda c: c.set_read_mode("eventually"), "read mode must be"),
        (lambda c: c.set_snapshot("yesterday"), "microseconds since the epoch or a datetime"),
        (lambda c: c.set_snapshot(-1), "microseconds since the epoch or a datetime"),
        (lambda c: c.set_snapshot_raw(-1), "non-negative hybrid timestamp"),
        (lambda c: c.set_limit(-1), "non-negative"),
        (lambda c: c.set_limit(True), "non-negative"),
        (lambda c: c.set_batch_size_bytes(0), "positive"),
        (lambda c: c.set_selection("nearest"), "replica selection must be"),
        (lambda c: c.set_timeout_millis(0), "positive"),
        (lambda c: c.add_lower_bound({"key": "x"}), "expected int64"),
    ],
)
def test_bad_scan_settings_are_refused(typed_table: Table, call: Any, complaint: str) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match=complaint):
        call(ScanConfig(typed_table))


# --- scan tokens -----------------------------------------------------------------------------------------------


def _tablet() -> TabletLocation:
    from kudu_async.common.partition import Partition

    return TabletLocation(
        "tab1",
        Partition((1,), b"", b"", b"\x00\x00\x00\x01", b"\x00\x00\x00\x02"),
        [ReplicaLocation("u1", "127.0.0.1:1", "LEADER"), ReplicaLocation("u2", "127.0.0.2:2", "FOLLOWER")],
    )


@pytest.fixture
async def offline_client() -> AsyncIterator[AsyncClient]:
    c = AsyncClient(ClientCore(["127.0.0.1:1"]))
    yield c
    await c.close()


async def test_scan_token_round_trip_keeps_every_setting(typed_table: Table, offline_client: AsyncClient) -> None:
    cfg = ScanConfig(typed_table)
    (
        cfg.set_projected_column_names(["key", "dec", "day"])
        .add_predicate(typed_table["dec"] >= Decimal("1.25"))
        .add_predicate(typed_table["day"].in_list([dt.date(2020, 1, 1), dt.date(2021, 1, 1)]))
        .add_predicate(typed_table["ts"] < dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
        .add_predicate(typed_table["val"].is_null())
        .set_fault_tolerant()
        .set_snapshot_raw(987654321)
        .set_limit(7)
        .set_batch_size_bytes(4096)
        .set_selection(kudu.LEADER_ONLY)
        .set_timeout_millis(1500)
        .add_lower_bound([1])
        .add_exclusive_upper_bound([100])
    )
    token = ScanToken(typed_table, _tablet(), cfg.config_dict())
    data = token.serialize()
    assert isinstance(data, bytes)
    assert token.hosts() == ["127.0.0.1", "127.0.0.2"]
    assert repr(token) == "ScanToken(t, tablet=tab1)"
    sc = await offline_client.deserialize_token_into_scanner(data)
    assert sc.table.id == typed_table.id and sc.table.schema == typed_table.schema
    assert sc.table.partition_schema == typed_table.partition_schema
    assert [t.tablet_id for t in sc._fixed_tablets or []] == ["tab1"]
    for field in ScanConfig.CONFIG_FIELDS:
        assert getattr(sc, field) == getattr(cfg, field), field
    again = ScanToken.parse(data)
    assert again["v"] == TOKEN_VERSION and again["tablet"] == _tablet().to_wire()


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"garbage",
        b"\xc1",
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"v": TOKEN_VERSION + 1, "table": {}, "tablet": {}, "scan": {}}),
        msgpack.packb({"v": TOKEN_VERSION, "table": {}}),
        msgpack.packb("a string"),
        msgpack.packb(1) + b"trailing",
    ],
)
async def test_a_garbage_token_is_refused(garbage: bytes, offline_client: AsyncClient) -> None:
    with pytest.raises(kudu.KuduInvalidArgument, match="scan token"):
        ScanToken.parse(garbage)
    with pytest.raises(kudu.KuduInvalidArgument, match="scan token"):
        await offline_client.deserialize_token_into_scanner(garbage)


# --- deadlines and backoff -------------------------------------------------------------------------------------


def test_deadline_names_the_operation_and_the_last_error_when_it_passes() -> None:
    d = Deadline(0.0, "write of 3 rows to table t")
    assert d.remaining() <= 0
    with pytest.raises(KuduTimedOut) as ei:
        d.left(KuduNotTheLeader("no leader for tablet x"))
    msg = str(ei.value)
    assert "write of 3 rows to table t timed out after 0s (0 attempts)" in msg
    assert "last error: NOT_THE_LEADER: no leader for tablet x" in msg
    assert ei.value.details == {"attempts": 0}
    assert "last error" not in str(d.timed_out())


def test_deadline_rpc_timeout_is_what_is_left_capped() -> None:
    d = Deadline(5.0, "x")
    assert 4.5 < d.left() <= 5.0
    assert d.rpc_timeout(1.0) == 1.0
    assert 4.5 < d.rpc_timeout(60.0) <= 5.0
    assert Deadline(-1.0, "x").rpc_timeout(1.0) == 0.001


async def test_a_last_attempt_cut_short_by_the_deadline_keeps_the_masters_real_error() -> None:
    """A master that refused connections, then timed out on an attempt given only the deadline's last
    millisecond: the timeout message still names the refusal (what a user can act on)."""
    from kudu_async.client.meta_cache import MasterClient

    class Rpc:
        def __init__(self) -> None:
            self.calls: list[float] = []

        async def call(self, addr: str, service: str, method: str, req: Any, timeout_s: float = 10.0) -> Any:
            self.calls.append(timeout_s)
            if len(self.calls) == 1:
                raise KuduNetworkError(f"{addr}: connection refused")
            raise KuduTimedOut(f"connecting to {addr} timed out (call timeout {timeout_s:g}s)")

    rpc = Rpc()
    mc = MasterClient(rpc, ["127.0.0.1:1"], rpc_timeout_s=10.0)  # type: ignore[arg-type]
    assert await mc._find_leader(Deadline(5.0, "connect")) is None
    assert await mc._find_leader(Deadline(0.0, "connect")) is None  # an attempt with 1 ms left
    assert rpc.calls[1] == 0.001
    assert "connection refused" in str(mc._no_leader())
    assert await mc._find_leader(Deadline(5.0, "connect")) is None  # a full attempt's timeout is news
    assert "timed out (call timeout 3s)" in str(mc._no_leader())


async def test_backoff_doubles_with_jitter_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    d = Deadline(3600.0, "x")
    for _ in range(12):
        await d.backoff()
    assert d.attempts == 12
    for i, s in enumerate(slept):
        ceiling = min(retry.CLIENT_BACKOFF.max_s, retry.CLIENT_BACKOFF.initial_s * 2**i)
        assert ceiling / 2 <= s <= ceiling, (i, s)
    assert max(slept) <= retry.CLIENT_BACKOFF.max_s


async def test_backoff_never_sleeps_past_the_deadline_and_then_raises() -> None:
    d = Deadline(0.15, "scan of tablet x", policy=BackoffPolicy(initial_s=10.0, max_s=10.0))
    t0 = time.monotonic()
    with pytest.raises(KuduTimedOut, match="scan of tablet x timed out"):
        await d.backoff(KuduNetworkError("connection refused"))
    assert time.monotonic() - t0 < 0.5


# --- leader finding with fake RPCs ------------------------------------------------------------------------------


class FakeRpc:
    """Answers calls from a handler; records (addr, method) of each."""

    def __init__(self, handler: Callable[[str, str, dict[str, Any]], Any]) -> None:
        self.handler = handler
        self.calls: list[tuple[str, str]] = []

    async def call(self, addr: str, service: str, method: str, req: Any = None, timeout_s: float = 10.0) -> Any:
        self.calls.append((addr, method))
        await asyncio.sleep(0)
        r = self.handler(addr, method, req)
        if isinstance(r, BaseException):
            raise r
        return r

    async def close(self) -> None:
        pass


def _client_with(rpc: FakeRpc, masters: list[str]) -> AsyncClient:
    c = AsyncClient(ClientCore(masters))
    c.rpc = rpc  # type: ignore[assignment]
    c.masters.rpc = rpc  # type: ignore[assignment]
    return c


async def test_master_calls_find_the_leader_and_follow_a_failover() -> None:
    leader = {"now": "m2:1"}

    def handler(addr: str, method: str, req: Any) -> Any:
        if addr == "m3:1":
            return KuduNetworkError("connection refused")
        if method == "ConnectToMaster":
            return {"leader": addr == leader["now"], "leader_address": leader["now"]}
        if addr != leader["now"]:
            return KuduNotTheLeader("not the leader", {"leader_address": leader["now"]})
        return {"tables": [{"name": f"from {addr}"}]}

    rpc = FakeRpc(handler)
    c = _client_with(rpc, ["m1:1", "m2:1", "m3:1"])
    assert await c.list_tables() == ["from m2:1"]
    assert c.masters.leader == "m2:1"
    leader["now"] = "m1:1"
    rpc.calls.clear()
    assert await c.list_tables() == ["from m1:1"]
    assert rpc.calls == [("m2:1", "ListTables"), ("m1:1", "ListTables")]  # one hop, by the hint
    await c.close()


async def test_no_leader_master_times_out_naming_the_masters() -> None:
    rpc = FakeRpc(lambda addr, method, req: {"leader": False})
    c = _client_with(rpc, ["m1:1", "m2:1"])
    c.admin_timeout_ms = 300
    t0 = time.monotonic()
    with pytest.raises(KuduTimedOut, match=r"ListTables timed out after 0.3s .*no leader master among m1:1, m2:1"):
        await c.list_tables()
    assert time.monotonic() - t0 < 1.5
    await c.close()


async def test_tablet_calls_follow_hints_skip_failed_replicas_and_refresh(typed_table: Table) -> None:
    from kudu_async.common.partition import Partition

    part = Partition((), b"", b"", b"", b"")
    locs_v1 = [
        {
            "tablet_id": "tab",
            "partition": part.to_dict(),
            "replicas": [
                {"uuid": "a", "rpc_address": "ts1:1", "role": "LEADER"},
                {"uuid": "b", "rpc_address": "ts2:1", "role": "FOLLOWER"},
                {"uuid": "c", "rpc_address": "ts3:1", "role": "FOLLOWER"},
            ],
        }
    ]
    state: dict[str, Any] = {"leader": "ts3:1", "down": {"ts1:1"}, "located": 0}

    def handler(addr: str, method: str, req: Any) -> Any:
        if method == "ConnectToMaster":
            return {"leader": True}
        if method == "GetTableLocations":
            state["located"] += 1
            return {"tablets": locs_v1}
        if addr in state["down"]:
            return KuduNetworkError(f"{addr} is down")
        if addr != state["leader"]:
            return KuduNotTheLeader("follower", {"leader_address": state["leader"]})
        return {"ok": addr}

    rpc = FakeRpc(handler)
    c = _client_with(rpc, ["m:1"])
    d = Deadline(5.0, "write")
    assert await c.call_tablet_leader(typed_table, "tab", "Write", {}, d) == {"ok": "ts3:1"}
    writes = [a for a, m in rpc.calls if m == "Write"]
    assert writes == ["ts1:1", "ts2:1", "ts3:1"]  # the master's leader is down; a follower names the new one
    rpc.calls.clear()
    assert await c.call_tablet_leader(typed_table, "tab", "Write", {}, d) == {"ok": "ts3:1"}
    assert [a for a, m in rpc.calls if m == "Write"] == ["ts3:1"]  # the learned leader is used directly
    with pytest.raises(KuduNotFound, match="tablet gone is no longer part of table t") as ei:
        await c.call_tablet_leader(typed_table, "gone", "Write", {}, d)
    assert ei.value.details == {"error": "TABLET_NOT_FOUND"}
    assert state["located"] == 1  # one master lookup for all of it
    await c.close()


async def test_every_attempt_of_a_write_carries_the_same_request_id(typed_table: Table) -> None:
    """Retries after a dead server, a NOT_THE_LEADER and a timeout all name the same Write."""
    from kudu_async.common.partition import Partition

    part = Partition((), b"", b"", b"", b"")
    seen: list[dict[str, Any]] = []

    def handler(addr: str, method: str, req: Any) -> Any:
        if method == "ConnectToMaster":
            return {"leader": True}
        if method == "GetTableLocations":
            return {
                "tablets": [
                    {
                        "tablet_id": "tab",
                        "partition": part.to_dict(),
                        "replicas": [
                            {"uuid": "a", "rpc_address": "ts1:1", "role": "LEADER"},
                            {"uuid": "b", "rpc_address": "ts2:1", "role": "FOLLOWER"},
                        ],
                    }
                ]
            }
        seen.append(dict(req["request_id"]))
        if len(seen) == 1:
            return KuduNetworkError("ts1:1 is down")
        if len(seen) == 2:
            return KuduTimedOut("no answer in time")
        if addr != "ts1:1":
            return KuduNotTheLeader("follower", {"leader_address": "ts1:1"})
        return {"ok": addr}

    rpc = FakeRpc(handler)
    c = _client_with(rpc, ["m:1"])
    rid = c.write_ids.begin()
    assert rid["client_id"] == c.client_id and rid["seq_no"] == 1
    reply = await c.call_tablet_leader(typed_table, "tab", "Write", {"request_id": rid}, Deadline(5.0, "write"))
    assert reply == {"ok": "ts1:1"}
    assert len(seen) >= 3 and all(r == rid for r in seen)
    c.write_ids.end(rid)
    assert c.write_ids.begin()["first_incomplete_seq_no"] == 2
    await c.close()


async def test_tablet_calls_time_out_naming_the_last_error_when_every_replica_is_down(typed_table: Table) -> None:
    from kudu_async.common.partition import Partition

    part = Partition((), b"", b"", b"", b"")

    def handler(addr: str, method: str, req: Any) -> Any:
        if method == "ConnectToMaster":
            return {"leader": True}
        if method == "GetTableLocations":
            return {
                "tablets": [
                    {
                        "tablet_id": "tab",
                        "partition": part.to_dict(),
                        "replicas": [{"uuid": "a", "rpc_address": "ts1:1", "role": "LEADER"}],
                    }
                ]
            }
        return KuduServiceUnavailable(f"{addr} overloaded")

    rpc = FakeRpc(handler)
    c = _client_with(rpc, ["m:1"])
    t0 = time.monotonic()
    with pytest.raises(
        KuduTimedOut,
        match=r"write to t timed out after 0\.4s .*last error: SERVICE_UNAVAILABLE: "
        r"ts1:1 overloaded",
    ):
        await c.call_tablet_leader(typed_table, "tab", "Write", {}, Deadline(0.4, "write to t"))
    assert time.monotonic() - t0 < 1.5
    assert sum(1 for _, m in rpc.calls if m == "GetTableLocations") >= 2  # locations refreshed between rounds
    await c.close()


def test_a_raw_predicate_on_an_unknown_column_is_refused(typed_table: Table) -> None:
    with pytest.raises(KuduNotFound, match="column 'nope' is not in the schema"):
        ScanConfig(typed_table).add_predicate(ColumnPredicate("nope", "=", 1))
