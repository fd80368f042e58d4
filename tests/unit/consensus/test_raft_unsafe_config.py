"""Kudu's UnsafeChangeConfig in the Raft core: a replica of a group that lost its majority forces its config
to the survivors, wins at once, commits; servers forced out cannot depose it."""

from __future__ import annotations

import pytest

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.consensus.raft import Config, EntryKind, HardState, RaftNode, Role, SnapshotMeta
from tests.unit.consensus.raft_harness import GROUP, OPTS, Net


def _settled(net: Net, leader: str = "a", n: int = 3) -> None:
    net.elect(leader)
    for i in range(n):
        net[leader].propose(f"w{i}".encode())
        net.handle(leader)
        net.deliver()
    net.tick(times=OPTS.heartbeat_ticks)  # heartbeats carry the commit index to the followers
    net.deliver()


def test_a_follower_forced_alone_becomes_leader_in_a_newer_term_and_commits() -> None:
    net = Net()
    _settled(net)
    b = net["b"]
    term, last, commit = b.term, b.last_index, b.commit
    assert commit == last  # b holds everything the majority committed
    net.cut = {"a", "c"}  # the majority is gone for good
    index = b.unsafe_change_config(frozenset({"b"}), {"b": "host-b:7050"})
    net.handle("b")
    assert index == last + 1
    forced = net.entry("b", index)
    assert forced.term == term + 1 and forced.kind is EntryKind.CONFIG
    assert Config.decode(forced.payload) == Config(frozenset({"b"}))
    # Alone in its config it won at once, in the term after the forced entry's, and its no-op committed
    # everything before it.
    assert b.role is Role.LEADER and b.term == term + 2
    assert b.commit == b.last_index > index
    assert b.committed_config() == Config(frozenset({"b"}))
    applied = [e.payload for e in net.applied["b"] if e.kind is EntryKind.NORMAL]
    assert applied == [b"w0", b"w1", b"w2"]
    b.propose(b"after")
    net.handle("b")
    assert b.commit == b.last_index and net.applied["b"][-1].payload == b"after"


def test_a_leader_that_lost_its_majority_is_forced_too_and_keeps_uncommitted_entries() -> None:
    net = Net()
    _settled(net)
    a = net["a"]
    net.cut = {"b", "c"}
    a.propose(b"uncommitted")  # never reaches a majority
    net.handle("a")
    net.deliver()
    assert a.commit < a.last_index
    a.unsafe_change_config(frozenset({"a"}))
    net.handle("a")
    assert a.is_leader and a.commit == a.last_index
    assert b"uncommitted" in [e.payload for e in net.applied["a"]]


def test_two_survivors_elect_one_of_them_under_the_forced_config() -> None:
    net = Net(("a", "b", "c", "d", "e"))
    _settled(net)
    net.cut = {"a", "d", "e"}
    net["b"].unsafe_change_config(frozenset({"b", "c"}))
    net.handle("b")
    net.deliver()
    net.tick(times=3 * OPTS.election_ticks)
    net.deliver()
    leaders = [i for i in ("b", "c") if net[i].is_leader]
    assert leaders, "no leader among the survivors"
    leader = net[leaders[0]]
    assert leader.config == Config(frozenset({"b", "c"}))
    leader.propose(b"two")
    net.handle(leaders[0])
    net.deliver()
    net.tick(["b", "c"], times=OPTS.heartbeat_ticks)  # the commit index reaches the follower
    net.deliver()
    assert b"two" in [e.payload for e in net.applied["c"]] and b"two" in [e.payload for e in net.applied["b"]]


def test_the_request_is_checked_before_anything_changes() -> None:
    net = Net(("a", "b", "c"), learners=("l",))
    _settled(net)
    b = net["b"]
    before = (b.term, b.last_index, b.config)
    with pytest.raises(KuduInvalidArgument, match="zz not in the committed config"):
        b.unsafe_change_config(frozenset({"b", "zz"}))
    with pytest.raises(KuduInvalidArgument, match="must be a voter"):
        b.unsafe_change_config(frozenset({"c"}))
    with pytest.raises(KuduInvalidArgument, match="must be a voter"):
        net["l"].unsafe_change_config(frozenset({"l", "b"}))  # a learner is behind by definition
    assert (b.term, b.last_index, b.config) == before
    # Named members keep their kind: the learner stays a learner.
    b.unsafe_change_config(frozenset({"b", "l"}))
    assert b.config == Config(frozenset({"b"}), frozenset({"l"}))


def test_the_forced_config_survives_a_restart() -> None:
    net = Net()
    _settled(net)
    net.cut = {"a", "c"}
    b = net["b"]
    b.unsafe_change_config(frozenset({"b"}))
    net.handle("b")
    hs = next(rd.hard_state for rd in reversed(net.readies["b"]) if rd.hard_state is not None)
    again = RaftNode.restart("b", GROUP, hs, SnapshotMeta(0, 0, Config(frozenset("abc"))), net.wal["b"], options=OPTS)
    assert again.config == Config(frozenset({"b"})) and again.term == b.term
    assert hs == HardState(b.term, "b", b.commit)


def test_members_forced_out_cannot_depose_the_forced_leader() -> None:
    """a and c come back together: under the old config they are a majority and elect one of them, whose
    newer term reaches b. b ignores newer terms from servers outside its config: it keeps leading and
    nothing it committed is touched."""
    net = Net()
    _settled(net)
    net.cut = {"a", "c"}
    b = net["b"]
    b.unsafe_change_config(frozenset({"b"}))
    net.handle("b")
    b.propose(b"mine")
    net.handle("b")
    term, commit = b.term, b.commit
    net.cut = set()
    net.inflight.clear()
    for _ in range(10):  # a and c campaign (b refuses them), one of them wins and heartbeats b
        net.tick(["a", "c"], times=OPTS.election_ticks)
        net.deliver()
        if net["a"].is_leader or net["c"].is_leader:
            break
    old = net["a"] if net["a"].is_leader else net["c"]
    assert old.is_leader and old.term > term  # the split the operator must end by deleting a and c
    net.tick(list(net.nodes), times=2 * OPTS.heartbeat_ticks)
    net.deliver()
    assert b.is_leader and b.term == term and b.commit >= commit
    assert b"mine" in [e.payload for e in net.applied["b"]]
