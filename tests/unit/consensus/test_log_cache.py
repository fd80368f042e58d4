"""The byte-bounded in-memory log: eviction keeps terms per run, lagging peers are fed from the WAL."""

from __future__ import annotations

import pytest

from kudu_async.common.errors import KuduIllegalState
from kudu_async.consensus.log_cache import ENTRY_OVERHEAD, LogCache
from kudu_async.consensus.raft import AppendRequest, EntryKind, PeerState, RaftOptions
from kudu_async.consensus.raft_messages import Entry
from tests.unit.consensus.raft_harness import Net


def _entries(first: int, last: int, term: int, size: int = 10) -> list[Entry]:
    return [Entry(term, i, EntryKind.NORMAL, bytes(size)) for i in range(first, last + 1)]


def _cache() -> LogCache:
    """Entries 1..30: terms 1 (1-10), 2 (11-12), 5 (13-30)."""
    c = LogCache(0, 0, _entries(1, 10, 1) + _entries(11, 12, 2) + _entries(13, 30, 5))
    return c


def test_evicted_entries_keep_their_terms_in_one_pair_per_run() -> None:
    c = _cache()
    terms = {i: c.term_at(i) for i in range(0, 31)}
    assert c.memory_bytes() == 30 * (10 + ENTRY_OVERHEAD)
    c.evict_to(5)
    c.evict_to(20)
    assert c.cached_from() == 21 and c.memory_bytes() == 10 * (10 + ENTRY_OVERHEAD)
    assert {i: c.term_at(i) for i in range(0, 31)} == terms
    assert len(c._run_first) == 3  # three terms, three pairs, however many entries
    assert c.slice(21, 23) == _entries(21, 22, 5)
    with pytest.raises(KuduIllegalState, match="evicted"):
        c.slice_limited(20, 1000)
    assert c.last_index() == 30 and c.last_term() == 5


def test_evict_target_leaves_at_most_the_limit_cached() -> None:
    c = _cache()
    per = 10 + ENTRY_OVERHEAD
    target = c.evict_target(7 * per + 5)
    assert target == 23  # 24..30 stay: 7 entries
    c.evict_to(target)
    assert c.memory_bytes() == 7 * per
    everything = LogCache(0, 0, _entries(1, 3, 1))
    everything.evict_to(everything.evict_target(0))
    assert everything.memory_bytes() == 0 and everything.last_term() == 1 and everything.last_index() == 3


def test_compact_keeps_terms_the_wal_still_has_and_forget_before_drops_them() -> None:
    c = _cache()
    c.compact(15, keep_terms_from=4)
    assert (c.snapshot_index, c.snapshot_term, c.floor) == (15, 5, 3)
    assert [c.term_at(i) for i in (2, 3, 4, 10, 11, 12, 13, 15, 16)] == [None, 1, 1, 1, 2, 2, 5, 5, 5]
    c.forget_before(12)
    assert (c.floor, c.floor_term) == (11, 2)
    assert [c.term_at(i) for i in (10, 11, 12, 13, 16)] == [None, 2, 2, 5, 5]
    c.forget_before(40)  # never past the compaction point
    assert (c.floor, c.term_at(15), c.term_at(14)) == (15, 5, None)
    plain = _cache()
    plain.compact(12)  # by default nothing below the compaction point stays
    assert (plain.floor, plain.term_at(12), plain.term_at(11)) == (12, 2, None)


def test_truncate_after_reaches_into_the_evicted_stretch() -> None:
    c = _cache()
    c.evict_to(25)
    c.truncate_after(11)
    assert (c.last_index(), c.last_term(), c.cached_from(), c.term_at(12)) == (11, 2, 12, None)
    c.append(_entries(12, 13, 6))
    assert [c.term_at(i) for i in (10, 11, 12, 13)] == [1, 2, 6, 6]


OPTS = RaftOptions(heartbeat_ticks=5, max_backoff_ticks=200, max_msg_bytes=2_000, log_cache_bytes=4_000)


def _load(net: Net, leader: str, n: int, size: int = 500) -> None:
    for i in range(n):
        net[leader].propose(bytes([i % 256]) * size)
        net.handle(leader)
        net.deliver()


def test_entries_every_peer_holds_leave_memory_at_once() -> None:
    net = Net(options=OPTS)
    a = net.elect("a")
    _load(net, "a", 20)
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    _load(net, "a", 1)  # applied after every ack came in
    for n in "abc":
        assert net[n].log_memory_bytes() <= 500 + ENTRY_OVERHEAD, n
        assert net[n].log.cached_from() >= a.last_index, n


def test_a_lagging_follower_catches_up_from_entries_read_back_from_the_wal() -> None:
    net = Net(options=OPTS)
    a = net.elect("a")
    net.cut = {"c"}
    _load(net, "a", 40)  # 20 KB of entries: five times the cache
    assert a.log_memory_bytes() <= OPTS.log_cache_bytes
    assert a.log.cached_from() > net["c"].last_index + 1  # what c needs is gone from memory
    net.cut = set()
    for _ in range(10):
        net.tick(["a"], times=OPTS.heartbeat_ticks)
        net.deliver()
    c = net["c"]
    assert c.last_index == c.commit == a.commit == a.last_index
    assert [e.payload for e in net.applied["c"]] == [e.payload for e in net.applied["a"]]
    sent = [
        m for rd in net.readies["a"] for m in rd.messages if isinstance(m, AppendRequest) and m.dst == "c" and m.entries
    ]
    assert len(sent) >= 10  # 2 KB messages for 20 KB
    assert 1 <= net.reads_answered["a"] < len(sent) // 2  # one read fills the pipeline, not one message
    assert not any(rd.needs_snapshot for rd in net.readies["a"])
    reads = [lr for rd in net.readies["a"] for lr in rd.log_reads]
    assert all(lr.peer == "c" and lr.max_bytes >= OPTS.max_msg_bytes for lr in reads)


def test_read_backs_answered_late_or_twice_are_ignored_and_a_lost_range_needs_a_copy() -> None:
    net = Net(options=OPTS)
    a = net.elect("a")
    net.cut = {"c"}
    _load(net, "a", 30)
    net.cut = set()
    net.answer_reads = False
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert len(net.pending_reads) == 1  # one read-back per peer at a time
    node, lr = net.pending_reads.pop()
    net.tick(["a"], times=OPTS.heartbeat_ticks)
    net.deliver()
    assert not net.pending_reads  # still waiting for the first
    a.log_read_failed("c", lr.lo + 1)  # not the read under way: ignored
    assert a.peer_state("c") is not None and a.peer_state("c")[0] is not PeerState.SNAPSHOT  # type: ignore[index]
    a.log_read_failed("c", lr.lo)  # the WAL lost them meanwhile
    rds = net.handle("a")
    assert [ns.peer for rd in rds for ns in rd.needs_snapshot] == ["c"]
    net.answer_read(node, lr)  # its answer arrives after all: nobody waits for it
    assert a.peer_state("c")[0] is PeerState.SNAPSHOT  # type: ignore[index]


def test_a_restarted_cache_learns_the_terms_of_what_the_wal_keeps_below_the_compaction_point() -> None:
    c = LogCache(20, 5, _entries(21, 25, 5))
    assert c.term_at(19) is None
    c.retain_terms([8, 11, 13], [1, 2, 5])  # the WAL holds 8..20
    assert [c.term_at(i) for i in (7, 8, 9, 10, 11, 12, 13, 20, 21)] == [None, 1, 1, 1, 2, 2, 5, 5, 5]
    assert c.floor == 8 and c.memory_bytes() == 5 * (10 + ENTRY_OVERHEAD)
    with pytest.raises(KuduIllegalState, match="evicted nothing"):
        c.retain_terms([8], [1])
    bad = LogCache(20, 5)
    with pytest.raises(KuduIllegalState, match="compaction point 20"):
        bad.retain_terms([8, 11], [1, 2])
    single = LogCache(20, 5)
    single.retain_terms([20], [5])  # only the compaction point itself
    assert (single.floor, single.term_at(20), single.term_at(19)) == (20, 5, None)
