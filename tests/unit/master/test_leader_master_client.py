"""The tests' leader-master caller: follows NOT_THE_LEADER hints, retries dead masters inside its deadline
with the same request id on every attempt, and gives up at once on answers a retry cannot change."""

from __future__ import annotations

from typing import Any

import pytest

from kudu_async.common.errors import (
    KuduAlreadyPresent,
    KuduBadStatus,
    KuduNetworkError,
    KuduNotTheLeader,
    KuduTimedOut,
)
from kudu_async.testing.master_client import LeaderMasterClient

MASTERS = ["m0:1", "m1:1", "m2:1"]


class FakeRpc:
    """Answers from a script: address -> list of replies or exceptions, consumed in order (last repeats)."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = script
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    async def call(self, addr: str, service: str, method: str, req: Any, timeout_s: float = 10.0) -> Any:
        assert service == "Master" and timeout_s > 0
        self.sent.append((addr, method, req))
        answers = self.script.get(addr, [KuduNetworkError(f"{addr}: connection refused")])
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, KuduBadStatus):
            raise answer
        return answer


def not_leader(leader: str | None) -> KuduNotTheLeader:
    return KuduNotTheLeader("not the catalog leader", {"leader_address": leader})


async def test_follows_the_leader_hint_and_remembers_who_answered() -> None:
    rpc = FakeRpc({"m0:1": [not_leader("m2:1")], "m1:1": [not_leader(None)], "m2:1": [{"ok": 1}]})
    client = LeaderMasterClient(rpc, MASTERS)  # type: ignore[arg-type]
    assert await client.call("ListTables", {}) == {"ok": 1}
    assert [a for a, _, _ in rpc.sent] == ["m0:1", "m1:1", "m2:1"]
    assert client.leader == "m2:1"
    rpc.sent.clear()
    assert await client.call("ListTables", {}) == {"ok": 1}
    assert [a for a, _, _ in rpc.sent] == ["m2:1"]  # straight to the last leader
    assert client.leader == "m2:1"  # the same leader answered: no switch


async def test_hint_is_tried_first_in_the_next_round() -> None:
    rpc = FakeRpc(
        {
            "m0:1": [KuduNetworkError("down")],
            "m1:1": [not_leader(None), not_leader("m0:1")],
            "m2:1": [not_leader("m1:1"), {"ok": 2}],
        }
    )
    client = LeaderMasterClient(rpc, MASTERS)  # type: ignore[arg-type]
    rpc.script["m0:1"] = [KuduNetworkError("down"), {"ok": 0}]
    assert await client.call("ListTables", {}, timeout_s=5) == {"ok": 0}
    # Round 1: m0 down, m1 unsure, m2 names m1; round 2 starts at m1, which names m0, which answers.
    assert [a for a, _, _ in rpc.sent] == ["m0:1", "m1:1", "m2:1", "m1:1", "m0:1"]
    assert client.stats.calls == 1 and client.stats.attempts == 5  # four retries


async def test_ddl_keeps_one_request_id_across_every_attempt() -> None:
    rpc = FakeRpc(
        {
            "m0:1": [KuduTimedOut("lost reply"), {"table_id": "t"}],
            "m1:1": [not_leader(None)],
            "m2:1": [KuduNetworkError("killed")],
        }
    )
    client = LeaderMasterClient(rpc, MASTERS, client_id="me")  # type: ignore[arg-type]
    assert await client.ddl("CreateTable", {"name": "x"}, timeout_s=5) == {"table_id": "t"}
    ids = {req["request_id"] for _, _, req in rpc.sent}
    assert ids == {"me:1"} and len(rpc.sent) == 4
    await client.ddl("DeleteTable", {"name": "x"})
    assert rpc.sent[-1][2]["request_id"] == "me:2"
    await client.ddl("DeleteTable", {"name": "x", "request_id": "mine"})  # a caller's id is kept
    assert rpc.sent[-1][2]["request_id"] == "mine"
    with pytest.raises(ValueError, match="not a DDL method"):
        await client.ddl("ListTables", {})


async def test_answers_a_retry_cannot_change_are_raised_at_once() -> None:
    rpc = FakeRpc({"m0:1": [KuduAlreadyPresent("table x already exists")]})
    client = LeaderMasterClient(rpc, MASTERS)  # type: ignore[arg-type]
    with pytest.raises(KuduAlreadyPresent):
        await client.ddl("CreateTable", {"name": "x"})
    assert len(rpc.sent) == 1


async def test_gives_up_at_the_deadline_naming_the_last_error() -> None:
    rpc = FakeRpc({})
    client = LeaderMasterClient(rpc, MASTERS, max_backoff_s=0.05)  # type: ignore[arg-type]
    with pytest.raises(KuduTimedOut, match=r"within 0\.3s; last error: NETWORK_ERROR: m\d:1: connection refused"):
        await client.call("ListTables", {}, timeout_s=0.3)
    assert len(rpc.sent) >= 6  # several rounds, backing off between them


async def test_masters_may_be_a_function_of_the_moment() -> None:
    live = ["m0:1"]
    rpc = FakeRpc({"m0:1": [not_leader("m1:1")], "m1:1": [{"ok": 1}]})
    client = LeaderMasterClient(rpc, lambda: list(live), max_backoff_s=0.01)  # type: ignore[arg-type]
    with pytest.raises(KuduTimedOut):  # the hinted master is not (yet) among the addresses: not called
        await client.call("ListTables", {}, timeout_s=0.1)
    assert {a for a, _, _ in rpc.sent} == {"m0:1"}
    live.append("m1:1")
    assert await client.call("ListTables", {}, timeout_s=1) == {"ok": 1}
