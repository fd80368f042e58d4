"""Regression: a follower restarted from its durable state catches up its commit index with no new writes.

Found in the real-process tests: after kill -9 and restart, a follower still held every entry it had
acked, but its commit index stayed where its lazily saved metadata left it, because the leader (whose
match for it was already at its last index) never sent anything that re-established agreement.
"""

from __future__ import annotations

import random

from kudu_async.consensus.raft import HardState, RaftNode, SnapshotMeta
from tests.unit.consensus.raft_harness import GROUP, OPTS, Net


def test_restarted_follower_catches_up_commit_without_new_proposals() -> None:
    net = Net()
    a = net.elect("a")
    for i in range(5):
        a.propose(f"p{i}".encode())
        net.handle("a")
        net.deliver()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    c = net["c"]
    assert c.commit == a.commit == a.last_index
    # Restart c from its durable log, with the commit index it had saved long ago (1).
    entries = list(net.wal["c"])
    net.nodes["c"] = RaftNode.restart(
        "c",
        GROUP,
        HardState(c.term, c.vote, 1),
        SnapshotMeta(0, 0, c.config),
        entries,
        options=OPTS,
        rng=random.Random(7),
    )
    assert net["c"].commit < a.commit
    for _ in range(4):  # a few heartbeat rounds, no proposals
        net.tick(["a"], times=OPTS.heartbeat_ticks)
        net.deliver()
    assert net["c"].commit == a.commit
    assert [e.index for e in net.applied["c"]][-1] == a.commit
