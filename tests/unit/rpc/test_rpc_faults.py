"""FaultInjector rules: validation and matching (the wire behaviour is in test_rpc_calls.py)."""

from __future__ import annotations

import pytest

from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument
from kudu_async.rpc import FaultInjector, RpcClient, RpcServer


def test_disabled_injector_refuses_rules_but_allows_clear() -> None:
    f = FaultInjector()
    with pytest.raises(KuduIllegalState, match="enable-fault-injection"):
        f.set_rules([{"action": "drop"}])
    f.clear()
    assert f.rules() == []


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("drop", "expected an object"),
        ({"action": "explode"}, "'action' must be one of"),
        ({"action": "drop", "src": ""}, "'src' must be a non-empty string"),
        ({"action": "drop", "dst": 3}, "'dst' must be a non-empty string"),
        ({"action": "delay"}, "needs 'delay_ms' > 0"),
        ({"action": "delay", "delay_ms": -1}, "'delay_ms' must be an int"),
        ({"action": "drop", "probability": 1.5}, "'probability' must be a number in"),
        ({"action": "drop", "color": "red"}, "unknown field"),
    ],
)
def test_bad_rules_are_rejected_with_the_field_named(rule: object, message: str) -> None:
    f = FaultInjector(enabled=True)
    f.set_rules([{"action": "drop", "src": "a"}])
    with pytest.raises(KuduInvalidArgument, match=message):
        f.set_rules([{"action": "delay", "delay_ms": 5}, rule])  # type: ignore[list-item]
    assert f.rules()[0]["src"] == "a", "a rejected list must not replace the active rules"


def test_rules_match_on_source_and_destination() -> None:
    f = FaultInjector(enabled=True)
    f.set_rules([{"action": "drop", "src": "ts-1", "dst": "ts-2"}])
    assert f.decide("ts-1", ("ts-2", "127.0.0.1:1")) is not None
    assert f.decide("ts-1", ("ts-3",)) is None
    assert f.decide("ts-9", ("ts-2",)) is None
    assert f.rules() == [{"action": "drop", "src": "ts-1", "dst": "ts-2", "delay_ms": 0, "probability": 1.0}]


def test_delays_add_up_and_drop_wins() -> None:
    f = FaultInjector(enabled=True)
    f.set_rules([{"action": "delay", "delay_ms": 100}, {"action": "delay", "delay_ms": 50, "src": "a"}])
    d = f.decide("a", ("b",))
    assert d is not None and not d.drop and d.delay_s == pytest.approx(0.15)
    f.set_rules([{"action": "delay", "delay_ms": 100}, {"action": "drop"}])
    d = f.decide("a", ("b",))
    assert d is not None and d.drop


def test_probability_is_honoured_roughly() -> None:
    f = FaultInjector(enabled=True, seed=7)
    f.set_rules([{"action": "drop", "probability": 0.25}])
    hits = sum(f.decide("a", ("b",)) is not None for _ in range(4000))
    assert 700 < hits < 1300
    f.set_rules([{"action": "drop", "probability": 0.0}])
    assert all(f.decide("a", ("b",)) is None for _ in range(100))


def test_clear_removes_every_rule() -> None:
    f = FaultInjector(enabled=True)
    f.set_rules([{"action": "drop"}])
    assert f.active
    f.clear()
    assert not f.active and f.decide("a", ("b",)) is None


async def test_server_and_client_take_the_fault_path_only_while_rules_are_set() -> None:
    f = FaultInjector(enabled=True)
    server = RpcServer(faults=f)
    client = RpcClient("c", faults=f)
    try:
        assert server._start == server._start_call and not client._faulty
        f.set_rules([{"action": "delay", "delay_ms": 1}])
        assert server._start == server._start_with_faults and client._faulty
        f.clear()
        assert server._start == server._start_call and not client._faulty
    finally:
        await client.close()
    f.set_rules([{"action": "drop"}])
    assert not client._faulty, "a closed client no longer listens to the injector"
