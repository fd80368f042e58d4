"""``replica_util.move_replica`` against a fake Raft group (no cluster): a follower's replica moves; a
leader's replica hands leadership over first (a single voter removes itself after the promotion); a voter
trimmed by someone else meanwhile fails the move instead of taking the tablet under its replication
factor."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from kudu_async.common.errors import KuduIllegalState, KuduNotTheLeader
from kudu_async.tools import replica_util

A, B, C, D = "ts-a", "ts-b", "ts-c", "ts-d"
ADDR = {u: f"127.0.0.1:{i + 1}" for i, u in enumerate((A, B, C, D))}


class FakeGroup:
    """One tablet's Raft config as its leader would answer ``Consensus/*`` (changes apply at once)."""

    def __init__(self, voters: tuple[str, ...], leader: str) -> None:
        self.members = dict.fromkeys(voters, "VOTER")
        self.leader = leader
        self.index = 1
        self.after_promote: Callable[[FakeGroup], None] | None = None
        self.busy = 0  # the next this many changes are refused: the previous one is not committed yet
        self.log: list[str] = []

    def state(self, who: str) -> dict[str, Any]:
        peers = [{"uuid": u, "member_type": t, "address": ADDR[u], "match_index": 5} for u, t in self.members.items()]
        return {
            "role": "LEADER" if who == self.leader else "FOLLOWER",
            "leader": self.leader,
            "term": 3,
            "commit_index": 5,
            "config_index": self.index,
            "peers": peers,
        }

    def trim(self, u: str) -> None:
        """Someone else (the master) removes ``u``: a config change of its own."""
        del self.members[u]
        self.index += 1

    async def call(self, addr: str, service: str, method: str, req: dict[str, Any], timeout_s: float) -> Any:
        who = next(u for u, a in ADDR.items() if a == addr)
        if method == "GetState":
            return self.state(who)
        if who != self.leader:
            raise KuduNotTheLeader(f"{who} is not the leader")
        if method == "TransferLeadership":
            self.log.append(f"transfer {req['peer']}")
            self.leader = req["peer"]
            return {"leader": who}
        assert method == "ChangeConfig"
        if req.get("cas_config_index") not in (None, self.index):
            raise KuduIllegalState(f"config is at {self.index}")
        if self.busy:
            self.busy -= 1
            raise KuduIllegalState("a config change (or this leader's no-op) is not committed yet")
        op, peer = req["op"], req["peer"]
        self.log.append(f"{op} {peer}")
        self.index += 1
        index = self.index
        if op == "ADD_LEARNER":
            self.members[peer] = "NON_VOTER"
        elif op == "PROMOTE":
            self.members[peer] = "VOTER"
            if self.after_promote:
                self.after_promote(self)  # right after the promotion commits, before our next call
        elif op == "REMOVE":
            del self.members[peer]
        return {"config_index": index}


class FakeClient:
    def __init__(self, group: FakeGroup) -> None:
        self.rpc = group


def _move(group: FakeGroup, src: str, dst: str, leader_to: str | None = None) -> dict[str, Any]:
    return asyncio.run(
        replica_util.move_replica(
            FakeClient(group),  # type: ignore[arg-type]  # only .rpc is used: a scripted Raft group
            "t1",
            src,
            dst,
            ADDR[group.leader],
            5.0,
            dst_address=ADDR[dst],
            leader_to=leader_to,
        )
    )


def test_a_followers_replica_moves() -> None:
    g = FakeGroup((A, B, C), leader=A)
    res = _move(g, B, D)
    assert res["moved_from"] == B and res["moved_to"] == D and "notes" not in res
    assert g.members == {A: "VOTER", C: "VOTER", D: "VOTER"} and g.leader == A
    assert g.log == [f"ADD_LEARNER {D}", f"PROMOTE {D}", f"REMOVE {B}"]


def test_a_leaders_replica_hands_leadership_over_before_the_move() -> None:
    g = FakeGroup((A, B, C), leader=A)
    res = _move(g, A, D)
    assert g.log == [f"transfer {B}", f"ADD_LEARNER {D}", f"PROMOTE {D}", f"REMOVE {A}"]
    assert g.leader == B and set(g.members) == {B, C, D} and res["notes"] == [f"leadership handed to {B} first"]
    g = FakeGroup((A, B, C), leader=A)
    _move(g, A, D, leader_to=C)
    assert g.log[0] == f"transfer {C}" and g.leader == C


def test_a_single_voter_removes_itself_after_the_promotion() -> None:
    g = FakeGroup((A,), leader=A)
    res = _move(g, A, D)
    assert g.log == [f"ADD_LEARNER {D}", f"PROMOTE {D}", f"REMOVE {A}"] and set(g.members) == {D}
    assert "only voter" in res["notes"][0]


def test_another_voter_trimmed_meanwhile_fails_the_move() -> None:
    g = FakeGroup((A, B, C), leader=A)
    g.after_promote = lambda grp: grp.trim(C)  # the master trims C before we remove B
    with pytest.raises(KuduIllegalState, match=f"\\['{C}'\\] was removed instead of {B}"):
        _move(g, B, D)
    assert set(g.members) == {A, B, D}  # still three voters: B was not removed too


def test_source_trimmed_by_the_master_counts_as_moved() -> None:
    g = FakeGroup((A, B, C), leader=A)
    g.after_promote = lambda grp: grp.trim(B)
    assert _move(g, B, D)["moved_from"] == B
    assert set(g.members) == {A, C, D} and f"REMOVE {B}" not in g.log


def test_a_new_leader_not_ready_for_changes_yet_is_retried() -> None:
    # Right after the hand-over the new leader's no-op is not committed: it refuses the first changes.
    g = FakeGroup((A, B, C), leader=A)
    g.busy = 2
    _move(g, A, D)
    assert g.log == [f"transfer {B}", f"ADD_LEARNER {D}", f"PROMOTE {D}", f"REMOVE {A}"] and g.busy == 0
