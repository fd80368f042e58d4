"""A tiny hand-driven cluster for the rule tests: messages are queued, delivered on request, and
log writes are durable either at once or only when a test says so."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from kudu_async.consensus.raft import (
    Config,
    Entry,
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
        self.auto_persist = dict.fromkeys(self.nodes, auto_persist)
        self.cut: set[str] = set()  # isolated nodes: their messages are dropped both ways

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
            if rd.entries and self.auto_persist[node_id]:
                node.persisted(rd.entries[-1].index, rd.entries[-1].term)
            if rd.committed:
                self.applied[node_id].extend(rd.committed)
                node.applied(rd.committed[-1].index)

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
