"""One test per Raft rule the core implements, in the spirit of the paper's and etcd's rule tests.

Each builds the smallest cluster that shows the rule (see raft_harness.Net) and pins one behaviour.
"""

from __future__ import annotations

import itertools
import random

import msgpack
import pytest

from kudu_async.common.errors import (
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotTheLeader,
    KuduServiceUnavailable,
)
from kudu_async.consensus.raft import (
    LEASE_MARGIN_TICKS,
    AppendRequest,
    AppendResponse,
    Config,
    ConfigChangeOp,
    Entry,
    EntryKind,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    PeerState,
    RaftNode,
    RaftOptions,
    Role,
    SnapshotMeta,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    message_from_dict,
)
from kudu_async.consensus.raft_messages import config_addresses
from tests.unit.consensus.raft_harness import GROUP, OPTS, Net

ET = OPTS.election_ticks  # 15 ticks = 1.5 s at 100 ms


def _replicated(net: Net, leader: str, n: int = 3) -> list[int]:
    idx = [net[leader].propose(f"v{i}".encode()) for i in range(n)]
    net.handle(leader)
    net.deliver()
    return idx


def _progress(node: RaftNode, peer: str) -> tuple[PeerState, int, int]:
    """The leader's (state, match index, next index) of ``peer``, which it must be tracking."""
    progress = node.peer_state(peer)
    assert progress is not None, f"{node.id} tracks no progress of {peer}"
    return progress


# --- elections and timers ---------------------------------------------------------------------------


def test_election_timeout_is_three_heartbeats_plus_jitter() -> None:
    seen = set()
    for seed in range(50):
        node = RaftNode.bootstrap("a", GROUP, Config(frozenset("abc")), options=OPTS, rng=random.Random(seed))
        ticks = 0
        while node.role is Role.FOLLOWER:
            node.tick()
            ticks += 1
        seen.add(ticks)
    assert min(seen) >= 3 * OPTS.heartbeat_ticks
    assert max(seen) <= 2 * ET
    assert len(seen) > 5  # jittered, not a constant


def test_failed_elections_back_off_exponentially_with_cap() -> None:
    opts = RaftOptions(heartbeat_ticks=5, max_backoff_ticks=100)
    first, late = [], []
    for seed in range(20):
        node = RaftNode.bootstrap("a", GROUP, Config(frozenset("abc")), options=opts, rng=random.Random(seed))
        rounds = []
        for t in range(1, 3000):
            node.tick()
            if any(isinstance(m, VoteRequest) for m in node.ready().messages):
                rounds.append(t)
        waits = [b - a for a, b in itertools.pairwise(rounds)]
        # Nobody answers, so every round fails; the wait never exceeds timeout + cap.
        assert max(waits) <= opts.election_ticks + opts.max_backoff_ticks + 1
        first.append(waits[0])
        late.extend(waits[10:])
    assert sum(late) / len(late) > 2 * sum(first) / len(first)  # x1.5 per failed round, until capped


def test_leader_sends_heartbeat_every_h_ticks() -> None:
    net = Net()
    a = net.elect("a")
    net.take()
    sent_at = []
    for t in range(1, 3 * OPTS.heartbeat_ticks + 1):
        net.tick(["a"])
        if any(isinstance(m, Heartbeat) for m in net.take()):
            sent_at.append(t)
    assert len(sent_at) == 3 and all(b - a == OPTS.heartbeat_ticks for a, b in itertools.pairwise(sent_at))
    assert a.is_leader


@pytest.mark.parametrize("node_tick0", [0, 1, 3, 7, 12])
def test_new_leader_heartbeats_on_node_ticks_that_are_multiples_of_h(node_tick0: int) -> None:
    """Given the node's tick count, every leader of the node heartbeats on the same ticks (one batch per
    peer per period), at most h ticks after taking over and every h ticks after that."""
    net = Net()
    a = net.elect("a")
    net.take()
    h = OPTS.heartbeat_ticks
    sent_at = []
    for t in range(node_tick0 + 1, node_tick0 + 3 * h + 1):
        produced = a.tick(t)
        net.handle("a")
        hb = any(isinstance(m, Heartbeat) for m in net.take())
        assert produced == hb
        if hb:
            sent_at.append(t)
    assert sent_at and all(t % h == 0 for t in sent_at), sent_at
    assert sent_at[0] - node_tick0 <= h
    assert all(b - a_ == h for a_, b in itertools.pairwise(sent_at))


def test_pre_vote_does_not_bump_terms() -> None:
    net = Net()
    net.elect("a")
    net.tick(["c"], times=2 * ET)  # c hears nothing and times out; b still follows the live leader
    assert net["c"].role is Role.PRE_CANDIDATE
    net.handle("c")
    net.deliver()
    assert {n.term for n in net.nodes.values()} == {1} and net["a"].is_leader


def test_pre_vote_winner_starts_real_election_and_becomes_leader() -> None:
    net = Net()
    net.tick(["b", "c"], times=ET)
    while net["a"].role is not Role.PRE_CANDIDATE:
        net.tick(["a"])
    net.deliver()
    assert net["a"].is_leader and net["a"].term == 1


def test_follower_rejects_vote_while_leader_is_alive() -> None:
    net = Net()
    net.elect("a")
    req = VoteRequest(GROUP, "c", "b", net["b"].term + 1, 100, 100, False, False)
    net["b"].step(req)
    (resp,) = [m for rd in net.handle("b") for m in rd.messages]
    assert isinstance(resp, VoteResponse) and not resp.granted
    assert net["b"].term == 1 and net["b"].leader == "a"


def test_forced_election_ignores_leader_stickiness() -> None:
    net = Net()
    net.elect("a")
    _replicated(net, "a")
    net["b"].step(TimeoutNow(GROUP, "a", "b", net["a"].term))
    net.handle("b")
    net.deliver()
    assert net["b"].is_leader and net["b"].term == 2
    assert not net["a"].is_leader


def test_campaign_elects_a_new_groups_leader_without_waiting_for_a_timeout() -> None:
    """What the tserver does on one replica of a tablet it just created: no ticks at all, a pre-vote and a
    vote round (brand-new replicas hold no leader stickiness)."""
    net = Net()
    net["b"].campaign()
    net.handle("b")
    net.deliver()
    assert net["b"].is_leader and net["b"].term == 1
    assert {n.leader for n in net.nodes.values()} == {"b"}
    net["b"].campaign()  # a leader's campaign changes nothing
    assert net["b"].is_leader and net["b"].term == 1
    net["a"].campaign()  # a follower of a live leader: the others refuse, nobody is deposed
    net.handle("a")
    net.deliver()
    assert net["b"].is_leader and net["b"].term == 1 and not net["a"].is_leader


def test_a_restarted_replica_holds_stickiness_a_new_one_does_not() -> None:
    """A restarted voter may have acked a leader's heartbeat just before (a lease may count on it): it
    refuses votes for an election timeout. A brand-new one has acked nobody."""
    cfg = Config(frozenset({"a", "b", "c"}))
    fresh = RaftNode.bootstrap("a", GROUP, cfg, options=OPTS)
    restarted = RaftNode.restart("a", GROUP, HardState(1, None, 0), SnapshotMeta(0, 0, cfg), [], options=OPTS)
    for node in (fresh, restarted):
        node.step(VoteRequest(GROUP, "b", "a", 2, 0, 0, True, False))
    votes = {n: [m for m in n.ready().messages if isinstance(m, VoteResponse)] for n in (fresh, restarted)}
    assert votes[fresh][0].granted and not votes[restarted][0].granted


def test_voter_grants_at_most_one_vote_per_term() -> None:
    net = Net()
    b = net["b"]
    assert b.role is Role.FOLLOWER and b.term == 0  # brand new: no stickiness
    b.step(VoteRequest(GROUP, "a", "b", 1, 0, 0, False, False))
    b.step(VoteRequest(GROUP, "c", "b", 1, 0, 0, False, False))
    votes = [m for rd in net.handle("b") for m in rd.messages if isinstance(m, VoteResponse)]
    assert [(v.dst, v.granted) for v in votes] == [("a", True), ("c", False)]
    assert b.vote == "a"


def test_voter_rejects_candidate_with_stale_log() -> None:
    net = Net()
    net.elect("a")
    _replicated(net, "a")
    b = net["b"]
    net.tick(["b"], times=ET)
    b.step(VoteRequest(GROUP, "c", "b", b.term + 1, 1, 1, False, True))
    (v,) = [m for rd in net.handle("b") for m in rd.messages if isinstance(m, VoteResponse)]
    assert not v.granted


def test_candidate_steps_down_on_append_from_leader_of_same_term() -> None:
    net = Net()
    c = net["c"]
    c.step(TimeoutNow(GROUP, "x", "c", 0))  # c becomes candidate in term 1
    assert c.role is Role.CANDIDATE
    net.take()
    c.step(AppendRequest(GROUP, "a", "c", 1, 0, 0, 0, ()))
    assert c.role is Role.FOLLOWER and c.leader == "a"  # type: ignore[comparison-overlap]  # step() changed it


def test_higher_term_message_makes_leader_follower() -> None:
    net = Net()
    a = net.elect("a")
    a.step(AppendResponse(GROUP, "b", "a", 7, False, 0, 0, 0, 0))
    assert a.role is Role.FOLLOWER and a.term == 7


def test_leader_steps_down_without_quorum_contact() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"a"}
    net.tick(["a"], times=2 * ET + 1)
    net.deliver()
    assert a.role is Role.FOLLOWER


def test_learner_never_campaigns() -> None:
    net = Net(learners=["l"])
    net.tick(["l"], times=20 * ET)
    assert net["l"].role is Role.LEARNER
    assert not any(isinstance(m, VoteRequest) for m in net.inflight)


# --- replication and commit -------------------------------------------------------------------------


def test_new_leader_appends_noop_of_its_term() -> None:
    net = Net()
    a = net.elect("a")
    e = net.entry("a", a.last_index)
    assert (e.kind, e.term) == (EntryKind.NOOP, a.term)
    assert a.commit == e.index  # and commits it


def test_propose_on_follower_raises_not_the_leader() -> None:
    net = Net()
    net.elect("a")
    with pytest.raises(KuduNotTheLeader) as exc:
        net["b"].propose(b"x")
    assert exc.value.details["leader"] == "a"


def test_leader_commits_only_own_term_entries() -> None:
    """Figure 8: an old-term entry on a majority is not committed by counting replicas."""
    cfg = Config(frozenset("abc"))
    noop = Entry(1, 1, EntryKind.NOOP, b"")
    old = Entry(1, 2, EntryKind.NORMAL, b"old")  # written by a in term 1, never replicated
    net = Net()
    net.nodes["a"] = RaftNode.restart("a", GROUP, HardState(2, None, 1), SnapshotMeta(0, 0, cfg), [noop, old])
    for i in "bc":
        net.nodes[i] = RaftNode.restart(i, GROUP, HardState(2, None, 1), SnapshotMeta(0, 0, cfg), [noop])
    a = net["a"]
    a.step(TimeoutNow(GROUP, "x", "a", 2))
    net.handle("a")
    net.deliver(drop=lambda m: isinstance(m, AppendRequest))  # votes only
    assert a.is_leader and a.term == 3 and a.last_index == 3  # its no-op is index 3
    net.take()
    # Only the old entry reaches c: now a majority (a, c) holds index 2 ...
    net["c"].step(AppendRequest(GROUP, "a", "c", 3, 1, 1, a.commit, (old,)))
    net.handle("c")
    for m in net.take(lambda m: m.src == "c"):
        a.step(m)
    net.handle("a")
    assert _progress(a, "c")[1] == 2
    assert a.commit == 1  # ... but an entry of term 1 is not committed by counting replicas.
    # Once the term-3 no-op is on a majority, both commit together.
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert a.commit == 3


def test_follower_acks_only_after_persisted() -> None:
    net = Net()
    net.elect("a")
    net.auto_persist["b"] = False
    idx = net["a"].propose(b"x")
    net.handle("a")
    net.deliver()
    assert _progress(net["a"], "b")[1] < idx  # b holds it in memory only
    net.persist("b")
    net.deliver()
    assert _progress(net["a"], "b")[1] == idx


def test_commit_needs_majority_of_durable_acks() -> None:
    net = Net()
    net.elect("a")
    net.auto_persist["a"] = net.auto_persist["b"] = net.auto_persist["c"] = False
    idx = net["a"].propose(b"x")
    net.handle("a")
    net.deliver()
    assert net["a"].commit < idx  # nobody's write is durable yet
    net.persist("b")
    net.deliver()
    assert net["a"].commit < idx  # one durable copy of three is not a majority
    net.persist("c")
    net.deliver()
    assert net["a"].commit == idx


def test_leader_commits_without_its_own_durable_write() -> None:
    """Kudu: a majority of durable voters need not include the (slow-disk) leader."""
    net = Net()
    a = net.elect("a")
    net.auto_persist["a"] = False
    idx = a.propose(b"x")
    net.handle("a")
    net.deliver()
    assert a.stable_index < idx and a.commit == idx
    # ... but the leader applies it only once its own copy is durable.
    assert all(e.index != idx for e in net.applied["a"])
    net.persist("a")
    assert net.applied["a"][-1].index == idx


def test_leader_pipelines_several_appends_in_replicate_mode() -> None:
    net = Net()
    a = net.elect("a")
    for i in range(3):
        a.propose(b"p%d" % i)
    net.handle("a")
    to_b = [m for m in net.inflight if m.dst == "b" and isinstance(m, AppendRequest)]
    assert len(to_b) == 3  # sent without waiting for acks
    assert _progress(a, "b")[0] is PeerState.REPLICATE


def test_inflight_bytes_bound_pauses_replication() -> None:
    opts = RaftOptions(max_inflight_msgs=2)
    net = Net(options=opts)
    a = net.elect("a")
    for i in range(5):
        a.propose(b"p%d" % i)
    net.handle("a")
    assert len([m for m in net.inflight if m.dst == "b" and isinstance(m, AppendRequest)]) == 2
    net.deliver()
    assert _progress(a, "b")[1] == a.last_index  # the rest follows as acks free the window


def test_inflight_bytes_bound_pauses_replication_by_size() -> None:
    opts = RaftOptions(max_inflight_bytes=300, max_msg_bytes=1 << 20)
    net = Net(options=opts)
    a = net.elect("a")
    for _ in range(5):
        a.propose(b"x" * 200)  # each message carries ~224 bytes
        net.handle("a")
    sent = [m for m in net.inflight if m.dst == "b" and isinstance(m, AppendRequest)]
    assert len(sent) == 2  # the second message crossed the 300-byte bound; the rest waits
    net.deliver()
    assert _progress(a, "b")[1] == a.last_index


def test_probe_mode_sends_one_append_at_a_time() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"c"}
    for i in range(3):
        a.propose(b"p%d" % i)
        net.handle("a")
    net.deliver()
    # Force c back to probing via a rejection, then propose more.
    a.step(AppendResponse(GROUP, "c", "a", a.term, False, 0, 1, 1, _progress(a, "c")[2] - 1))
    net.handle("a")
    a.propose(b"more")
    a.propose(b"more2")
    net.handle("a")
    assert _progress(a, "c")[0] is PeerState.PROBE
    assert len([m for m in net.inflight if m.dst == "c" and isinstance(m, AppendRequest)]) == 1


def test_mismatch_jumps_back_to_follower_committed_index() -> None:
    """Kudu: on a mismatch the leader resumes at the follower's committed index + 1."""
    net = Net()
    a = net.elect("a")
    _replicated(net, "a", 5)
    net.take()
    rejected_prev = a.last_index
    a.step(AppendResponse(GROUP, "b", "a", a.term, False, 0, a.last_index + 3, 2, rejected_prev))
    (probe,) = [m for rd in net.handle("a") for m in rd.messages if m.dst == "b"]
    assert isinstance(probe, AppendRequest)
    assert probe.prev_index == max(2, _progress(a, "b")[1])


def test_follower_truncates_conflicting_uncommitted_suffix() -> None:
    net = Net()
    b = net["b"]
    b.step(
        AppendRequest(
            GROUP,
            "a",
            "b",
            1,
            0,
            0,
            0,
            (Entry(1, 1, EntryKind.NOOP, b""), Entry(1, 2, EntryKind.NORMAL, b"x")),
        )
    )
    net.handle("b")
    b.step(AppendRequest(GROUP, "c", "b", 2, 1, 1, 0, (Entry(2, 2, EntryKind.NORMAL, b"y"),)))
    rds = net.handle("b")
    assert net.entry("b", 2).payload == b"y"
    assert any(rd.truncate_after == 1 for rd in rds)


def test_committed_entries_are_delivered_only_when_durable() -> None:
    net = Net()
    net.elect("a")
    net.auto_persist["c"] = False
    idx = net["a"].propose(b"x")
    net.handle("a")
    net.deliver()
    net.tick(["a"], times=OPTS.heartbeat_ticks)  # heartbeat tells c the commit index
    net.deliver()
    assert net["c"].commit >= idx - 1
    assert all(e.index <= net["c"].stable_index for e in net.applied["c"])
    net.persist("c")
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert net.applied["c"][-1].index == idx


def test_hard_state_is_in_the_same_ready_as_the_vote_it_covers() -> None:
    """Ordering contract: a vote is only sent in a Ready whose hard state records it."""
    net = Net()
    b = net["b"]
    net.tick(["b"], times=ET)
    b.step(VoteRequest(GROUP, "a", "b", 1, 0, 0, False, False))
    (rd,) = net.handle("b")
    assert rd.hard_state == HardState(1, "a", 0)
    assert any(isinstance(m, VoteResponse) and m.granted for m in rd.messages)


# --- configuration ----------------------------------------------------------------------------------


def test_config_takes_effect_when_appended() -> None:
    net = Net(("a", "b", "c", "d"))
    net.cut = {"d"}
    a = net.elect("a")
    net.take()
    net.cut = {"b", "c", "d"}
    a.propose_config_change(ConfigChangeOp.REMOVE, "d")
    net.handle("a")
    assert a.config.voters == frozenset("abc")  # before any commit


def test_one_config_change_at_a_time() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"b", "c"}
    a.propose_config_change(ConfigChangeOp.ADD_LEARNER, "l")
    with pytest.raises(KuduIllegalState):
        a.propose_config_change(ConfigChangeOp.ADD_LEARNER, "m")


def test_no_config_change_before_noop_commits() -> None:
    net = Net()
    net.cut = {"b", "c"}
    a = net["a"]
    a.step(TimeoutNow(GROUP, "x", "a", 0))
    net.handle("a")
    a.step(VoteResponse(GROUP, "b", "a", 1, True, False))
    net.handle("a")
    assert a.is_leader and a.commit == 0
    with pytest.raises(KuduIllegalState):
        a.propose_config_change(ConfigChangeOp.ADD_LEARNER, "l")


def test_config_entry_carries_addresses_the_core_ignores() -> None:
    net = Net()
    a = net.elect("a")
    addrs = {"a": "h:1", "b": "h:2", "c": "h:3", "l": "h:9"}
    idx = a.propose_config_change(ConfigChangeOp.ADD_LEARNER, "l", addrs)
    net.handle("a")
    net.deliver()
    entry = net.entry("b", idx)
    assert entry.kind is EntryKind.CONFIG and config_addresses(entry.payload) == addrs
    assert Config.decode(entry.payload) == Config(frozenset("abc"), frozenset("l")) == net["b"].config
    assert config_addresses(Config(frozenset("ab")).encode()) == {}  # a CONFIG entry without addresses
    assert config_addresses(b"\xc1") == {}


def test_learner_promoted_only_when_caught_up() -> None:
    net = Net(learners=["l"])
    a = net.elect("a")
    net.cut = {"l"}
    _replicated(net, "a")
    with pytest.raises(KuduIllegalState):
        a.propose_config_change(ConfigChangeOp.PROMOTE, "l")
    net.cut = set()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    a.propose_config_change(ConfigChangeOp.PROMOTE, "l")
    net.handle("a")
    net.deliver()
    assert net["l"].config.voters == frozenset({"a", "b", "c", "l"})
    assert net["l"].role is Role.FOLLOWER


def test_a_demoted_voter_stays_a_learner_until_promoted_and_a_leader_is_not_demoted() -> None:
    net = Net(learners=["l"])
    a = net.elect("a")
    _replicated(net, "a")
    with pytest.raises(KuduIllegalState, match="a leader is not demoted"):
        a.propose_config_change(ConfigChangeOp.DEMOTE, "a")
    with pytest.raises(KuduInvalidArgument, match="not a voter"):
        a.propose_config_change(ConfigChangeOp.DEMOTE, "l")
    a.propose_config_change(ConfigChangeOp.DEMOTE, "b")
    net.handle("a")
    net.deliver()
    cfg = net["b"].config
    assert (cfg.voters, cfg.learners, cfg.kept_learners) == (frozenset("ac"), frozenset("bl"), frozenset("b"))
    assert cfg.promotable_learners == frozenset("l") and net["b"].role is Role.LEARNER
    assert Config.decode(cfg.encode()) == cfg  # the kept learners survive the CONFIG entry
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    a.propose_config_change(ConfigChangeOp.PROMOTE, "b")
    net.handle("a")
    net.deliver()
    b = net["b"]  # read again: the same node, a new role
    assert b.config.kept_learners == frozenset() and b.role is Role.FOLLOWER


def test_a_non_voter_added_to_stay_is_kept_and_removal_forgets_it() -> None:
    net = Net(learners=["l"])
    a = net.elect("a")
    a.propose_config_change(ConfigChangeOp.REMOVE, "l")
    net.handle("a")
    net.deliver()
    a.propose_config_change(ConfigChangeOp.ADD_NON_VOTER, "l")
    net.handle("a")
    net.deliver()
    assert a.config.kept_learners == frozenset("l") == a.config.learners
    for _ in range(3):  # the re-added learner is probed and caught up
        net.tick(["a"], times=OPTS.heartbeat_ticks)
        net.deliver()
    assert net["l"].config == a.config and net["l"].role is Role.LEARNER
    a.propose_config_change(ConfigChangeOp.REMOVE, "l")
    net.handle("a")
    net.deliver()
    assert a.config == Config(frozenset("abc"))


def test_leader_steps_down_after_removing_itself_commits() -> None:
    net = Net()
    a = net.elect("a")
    idx = a.propose_config_change(ConfigChangeOp.REMOVE, "a")
    net.handle("a")
    assert a.is_leader  # still leads while the change is uncommitted
    net.deliver()
    assert a.commit >= idx
    assert a.role is Role.LEARNER


def test_config_reverts_when_entry_truncated() -> None:
    net = Net()
    b = net["b"]
    cfg = Config(frozenset("abcd"))
    b.step(AppendRequest(GROUP, "a", "b", 1, 0, 0, 0, (Entry(1, 1, EntryKind.CONFIG, cfg.encode()),)))
    assert b.config == cfg
    b.step(AppendRequest(GROUP, "c", "b", 2, 0, 0, 0, (Entry(2, 1, EntryKind.NOOP, b""),)))
    assert b.config == Config(frozenset("abc"))


# --- leadership transfer and step-down --------------------------------------------------------------


def test_leadership_transfer_sends_timeout_now_to_caught_up_peer() -> None:
    net = Net()
    a = net.elect("a")
    _replicated(net, "a")
    a.transfer_leadership("c")
    net.handle("a")
    assert any(isinstance(m, TimeoutNow) and m.dst == "c" for m in net.inflight)
    net.deliver()
    assert net["c"].is_leader and not a.is_leader


def test_leadership_transfer_blocks_proposals_and_aborts_after_timeout() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"c"}
    _replicated(net, "a")
    a.transfer_leadership("c")
    with pytest.raises(KuduServiceUnavailable):
        a.propose(b"x")
    net.tick(["a", "b"], times=ET)
    net.deliver()
    assert a.is_leader
    a.propose(b"x")  # transfer abandoned, leader takes writes again


def test_quiescing_replica_stands_for_no_election_but_votes() -> None:
    net = Net()
    net.elect("a")
    b = net["b"]
    b.quiescing = True
    net.cut = {"a"}  # the leader is gone: b's timer runs out again and again
    net.tick(["b"], times=4 * ET)
    b.campaign()
    net.deliver()
    assert b.role is Role.FOLLOWER
    net.tick(["c"], times=2 * ET)  # c runs; quiescing b still grants its vote
    net.deliver()
    assert net["c"].is_leader and b.leader == "c"


def test_quiescing_replica_ignores_timeout_now_and_the_transfer_lapses() -> None:
    net = Net()
    a = net.elect("a")
    _replicated(net, "a")
    net["c"].quiescing = True
    a.transfer_leadership("c")
    net.handle("a")
    net.deliver()
    assert a.is_leader and not net["c"].is_leader
    net.tick(["a", "b", "c"], times=ET)
    net.deliver()
    assert a.is_leader
    a.propose(b"x")  # the transfer lapsed: the leader takes writes again


def test_step_down_makes_leader_follower_in_same_term() -> None:
    net = Net()
    a = net.elect("a")
    term = a.term
    a.step_down()
    assert a.role is Role.FOLLOWER and a.term == term and a.leader is None
    with pytest.raises(KuduNotTheLeader):
        a.step_down()


# --- reads ------------------------------------------------------------------------------------------


def test_read_index_waits_for_quorum_heartbeat() -> None:
    net = Net()
    a = net.elect("a")
    a.read_index(b"r1")
    rds = net.handle("a")
    assert not any(rd.read_states for rd in rds)
    hbs = [m for m in net.inflight if isinstance(m, Heartbeat)]
    assert hbs and all(m.read_seq == 1 for m in hbs)
    net.deliver()
    (rs,) = [s for rd in net.readies["a"] for s in rd.read_states]
    assert (rs.ctx, rs.index) == (b"r1", a.commit)


def test_read_index_waits_for_noop_commit() -> None:
    net = Net()
    net.cut = {"b", "c"}
    a = net["a"]
    a.step(TimeoutNow(GROUP, "x", "a", 0))
    a.step(VoteResponse(GROUP, "b", "a", 1, True, False))
    net.handle("a")
    a.read_index(b"r")
    net.cut = set()
    net.take()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    (rs,) = [s for rd in net.readies["a"] for s in rd.read_states]
    assert rs.index >= 1 and a.log.term_at(rs.index) == a.term


def test_lease_read_answers_at_once_while_lease_holds() -> None:
    net = Net()
    a = net.elect("a")
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert a.lease_valid()
    a.read_index(b"fast", use_lease=True)
    (rd,) = net.handle("a")
    assert rd.read_states[0].ctx == b"fast"


def test_lease_expires_without_acks() -> None:
    net = Net()
    a = net.elect("a")
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    net.cut = {"b", "c"}
    net.tick(["a"], times=ET)
    assert not a.lease_valid()


# --- compaction, snapshots and restart --------------------------------------------------------------


def test_compacted_follower_gets_needs_snapshot() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"c"}
    _replicated(net, "a", 5)
    a.compact(a.applied_index)
    net.cut = set()
    net.take()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    notes = [n for rd in net.readies["a"] for n in rd.needs_snapshot]
    assert notes and notes[0].peer == "c" and notes[0].snapshot.index == a.log.snapshot_index


def test_retention_index_keeps_entries_a_slow_follower_needs() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"c"}
    _replicated(net, "a", 5)
    assert a.retention_index() == _progress(a, "c")[1] + 1 < a.applied_index


def test_install_snapshot_restarts_log_and_resumes_replication() -> None:
    net = Net()
    a = net.elect("a")
    net.cut = {"c"}
    _replicated(net, "a", 5)
    a.compact(a.applied_index)
    net.cut = set()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    meta = a.snapshot_meta()
    assert net["c"].install_snapshot(meta)
    (rd, *_) = net.handle("c")
    assert rd.snapshot == meta
    idx = a.propose(b"after")
    net.handle("a")
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert net["c"].log.term_at(idx) == a.term and net["c"].commit == idx


def test_restart_recovers_term_vote_and_log() -> None:
    net = Net()
    a = net.elect("a")
    _replicated(net, "a")
    b = net["b"]
    hs = [rd.hard_state for rd in net.readies["b"] if rd.hard_state][-1]
    entries = list(net.wal["b"])
    again = RaftNode.restart("b", GROUP, hs, SnapshotMeta(0, 0, b.config), entries, options=OPTS)
    assert (again.term, again.vote, again.last_index) == (b.term, b.vote, b.last_index)
    assert again.commit <= b.commit and again.role is Role.FOLLOWER
    assert a.is_leader


def test_restart_never_treats_undurable_commit_as_committed() -> None:
    net = Net()
    net.elect("a")
    net.auto_persist["b"] = False
    net["a"].propose(b"x")
    net.handle("a")
    net.deliver()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    b = net["b"]
    assert b.commit > b.stable_index
    for rd in net.readies["b"]:
        if rd.hard_state:
            assert rd.hard_state.commit <= b.stable_index


# --- messages ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "msg",
    [
        AppendRequest(GROUP, "a", "b", 3, 5, 2, 4, (Entry(3, 6, EntryKind.NORMAL, b"\x00\xff"),)),
        AppendResponse(GROUP, "b", "a", 3, False, 0, 9, 4, 5),
        Heartbeat(GROUP, "a", "b", 3, 4, 7, 100),
        HeartbeatResponse(GROUP, "b", "a", 3, 4, 6, 7, 100),
        VoteRequest(GROUP, "a", "b", 4, 6, 3, True, False),
        VoteResponse(GROUP, "b", "a", 4, True, True),
        TimeoutNow(GROUP, "a", "b", 3),
    ],
)
def test_messages_round_trip_through_msgpack(msg: object) -> None:
    wire = msgpack.packb(msg.to_dict(), use_bin_type=True)  # type: ignore[attr-defined]
    assert message_from_dict(msgpack.unpackb(wire, raw=False)) == msg


def test_step_rejects_message_of_another_group() -> None:
    net = Net()
    with pytest.raises(KuduInvalidArgument):
        net["a"].step(TimeoutNow("other-tablet", "b", "a", 1))


def test_a_voided_lease_needs_acks_counted_after_the_void() -> None:
    net = Net()
    a = net.elect("a")
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert a.lease_valid()
    a.void_lease()  # the host's ticks stopped for a while: those acks may be older than they look
    assert not a.lease_valid()
    a.read_index(b"r", use_lease=True)  # no lease: a heartbeat round answers instead
    net.handle("a")
    assert not [s for rd in net.readies["a"] for s in rd.read_states]
    net.deliver()
    assert [s.ctx for rd in net.readies["a"] for s in rd.read_states] == [b"r"]
    net.tick(["a"], times=ET)
    net.deliver()
    assert a.lease_valid()  # acks of heartbeats sent after the void count again


def test_the_lease_ends_before_a_follower_could_vote_for_another() -> None:
    net = Net()
    a = net.elect("a")
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    net.cut = {"b", "c"}
    last_ack = max(a._progress["b"].lease_tick, a._progress["c"].lease_tick)
    while a.lease_valid():
        net.tick(["a"])
    # Counted from the acked heartbeat's tick: an election timeout less the margin (host tick lag, late
    # ticks a follower's host may run back to back, phase within a tick).
    assert a._ticks - last_ack == ET - LEASE_MARGIN_TICKS + 1


def test_term_start_index_is_the_new_leaders_noop() -> None:
    """A READ_LATEST read waits for this entry to be applied, not for the whole commit index."""
    net = Net()
    assert net["a"].term_start_index == 0  # never led
    a = net.elect("a")
    first = a.term_start_index
    e = net.entry("a", first)
    assert (e.kind, e.term) == (EntryKind.NOOP, a.term)
    _replicated(net, "a")
    assert a.term_start_index == first and a.commit > first  # later entries leave it where it was
    b = net.elect("b")
    e = net.entry("b", b.term_start_index)
    assert b.term_start_index > first and (e.kind, e.term) == (EntryKind.NOOP, b.term)


def test_lease_read_index_answers_at_once_only_where_read_index_would() -> None:
    net = Net()
    a = net.elect("a")
    assert net["b"].lease_read_index() is None  # a follower never answers
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert a.lease_valid() and a.lease_read_index() == a.commit
    net.cut = {"b", "c"}
    net.tick(["a"], times=ET)
    assert not a.lease_valid() and a.lease_read_index() is None  # read_index would need a heartbeat round
