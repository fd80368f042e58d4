"""A tiny hand-driven cluster for the rule tests: messages are queued, delivered on request, and
log writes are durable either at once or only when a test says so. WAL read-backs the core asks for
(``Ready.log_reads``) are answered at once from the log as written, unless a test takes them over."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from kudu_async.consensus.raft import (
    Config,
    Entry,
    LogRead,
    Message,
    RaftNode,
    RaftOptions,
    Ready,
    TimeoutNow,
)

GROUP = "t1"
OPTS = RaftOptions(heartbeat_ticks=5, max_backoff_ticks=200)


class Net:
    """Nodes plus an in-flight message list; ``readies`` keeps every Ready for assertions."""

    def __init__(
        self,
        ids: Iterable[str] = ("a", "b", "c"),
        *,
        learners: Iterable[str] = (),
        options: RaftOptions = OPTS,
        auto_persist: bool = True,
    ) -> None:
        ids = list(ids)
        learners = list(learners)
        cfg = Config(frozenset(ids), frozenset(learners))
        self.options = options
        self.nodes = {
            i: RaftNode.bootstrap(i, GROUP, cfg, options=options, rng=random.Random(k))
            for k, i in enumerate(ids + learners)
        }
        self.inflight: list[Message] = []
        self.readies: dict[str, list[Ready]] = {i: [] for i in self.nodes}
        self.applied: dict[str, list[Entry]] = {i: [] for i in self.nodes}
        # Each node's log as written (the core evicts applied entries from memory; a WAL keeps them).
        self.wal: dict[str, list[Entry]] = {i: [] for i in self.nodes}
        self.auto_persist = dict.fromkeys(self.nodes, auto_persist)
        self.cut: set[str] = set()  # isolated nodes: their messages are dropped both ways
        self.answer_reads = True  # False: read-backs wait in ``pending_reads`` for the test
        self.pending_reads: list[tuple[str, LogRead]] = []
        self.reads_answered: dict[str, int] = dict.fromkeys(self.nodes, 0)

    def __getitem__(self, node_id: str) -> RaftNode:
        return self.nodes[node_id]

    def handle(self, node_id: str) -> list[Ready]:
        node = self.nodes[node_id]
        out: list[Ready] = []
        while True:
            rd = node.ready()
            if rd.is_empty():
                return out
            out.append(rd)
            self.readies[node_id].append(rd)
            self.inflight.extend(rd.messages)
            wal = self.wal[node_id]
            if rd.truncate_after is not None:
                del wal[next((k for k, e in enumerate(wal) if e.index > rd.truncate_after), len(wal)) :]
            if rd.entries:
                del wal[next((k for k, e in enumerate(wal) if e.index >= rd.entries[0].index), len(wal)) :]
                wal.extend(rd.entries)
            if rd.entries and self.auto_persist[node_id]:
                node.persisted(rd.entries[-1].index, rd.entries[-1].term)
            if rd.committed:
                self.applied[node_id].extend(rd.committed)
                node.applied(rd.committed[-1].index)
            for lr in rd.log_reads:
                if self.answer_reads:
                    self.answer_read(node_id, lr)
                else:
                    self.pending_reads.append((node_id, lr))

    def answer_read(self, node_id: str, lr: LogRead) -> None:
        """Answer a read-back from the node's written log, a byte budget's worth (at least one entry)."""
        node = self.nodes[node_id]
        got: list[Entry] = []
        size = 0
        for e in self.wal[node_id]:
            if lr.lo <= e.index <= lr.hi:
                size += len(e.payload) + 24
                if len(got) >= lr.min_entries and size > lr.max_bytes:
                    break
                got.append(e)
        self.reads_answered[node_id] += 1
        if got and got[0].index == lr.lo:
            node.log_read(lr.peer, lr.lo, got)
        else:
            node.log_read_failed(lr.peer, lr.lo)

    def entry(self, node_id: str, index: int) -> Entry:
        """The entry at ``index`` of a node's written log."""
        return next(e for e in self.wal[node_id] if e.index == index)

    def persist(self, node_id: str) -> None:
        node = self.nodes[node_id]
        node.persisted(node.last_index, node.last_term)
        self.handle(node_id)

    def take(self, pred: Callable[[Message], bool] = lambda m: True) -> list[Message]:
        """Remove and return queued messages matching ``pred`` (to inspect or drop them)."""
        got = [m for m in self.inflight if pred(m)]
        self.inflight = [m for m in self.inflight if not pred(m)]
        return got

    def deliver(self, max_rounds: int = 1000, drop: Callable[[Message], bool] | None = None) -> None:
        for _ in range(max_rounds):
            if not self.inflight:
                return
            batch, self.inflight = self.inflight, []
            for m in batch:
                if m.src in self.cut or m.dst in self.cut or (drop is not None and drop(m)):
                    continue
                self.nodes[m.dst].step(m)
                self.handle(m.dst)

    def tick(self, node_ids: Iterable[str] | None = None, times: int = 1) -> None:
        for _ in range(times):
            for i in node_ids or list(self.nodes):
                node = self.nodes[i]
                before = node.has_ready()
                if not node.tick() and not before:
                    # The driver skips has_ready() after a tick that says it produced nothing.
                    assert not node.has_ready(), f"{i}: tick() returned False but left output for ready()"
                self.handle(i)

    def elect(self, node_id: str) -> RaftNode:
        """Make ``node_id`` leader quickly (a TimeoutNow starts a forced election) and settle."""
        node = self.nodes[node_id]
        node.step(TimeoutNow(GROUP, "test", node_id, node.term))
        self.handle(node_id)
        self.deliver()
        assert node.is_leader, node
        return node
