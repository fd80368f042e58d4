#!/usr/bin/env python3
"""Benchmark: proposals committed per second through a 3-node in-memory Raft cluster, one process.

Measures the consensus core alone (no WAL, no network): the leader batches proposals, messages are
handed straight to the peers, every log write is "durable" at once, and applied entries are
acknowledged. Goal: >= 200,000 entries/s, so the core is never the system's bottleneck.

    python scripts/bench/raft_core.py [--entries 1000000] [--batch 1000] [--payload 100] [--window 8]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kudu_async.consensus.raft import Config, Message, RaftNode, RaftOptions, Role

GROUP = "bench"


class Cluster:
    """Three nodes wired by an in-process FIFO; Ready handled per the ordering contract."""

    def __init__(self, n: int = 3) -> None:
        ids = [f"n{i + 1}" for i in range(n)]
        opts = RaftOptions(max_inflight_msgs=256)
        cfg = Config(frozenset(ids))
        self.nodes = {
            i: RaftNode.bootstrap(i, GROUP, cfg, options=opts, rng=random.Random(k)) for k, i in enumerate(ids)
        }
        self.queue: deque[Message] = deque()
        self.applied = dict.fromkeys(ids, 0)

    def handle(self, node: RaftNode) -> None:
        while True:
            rd = node.ready()
            if rd.is_empty():
                return
            self.queue.extend(rd.messages)
            if rd.entries:
                last = rd.entries[-1]
                node.persisted(last.index, last.term)  # in-memory "disk": durable at once
            if rd.committed:
                idx = rd.committed[-1].index
                self.applied[node.id] = idx
                node.applied(idx)

    def pump(self) -> None:
        nodes, queue = self.nodes, self.queue
        while queue:
            m = queue.popleft()
            dst = nodes[m.dst]
            dst.step(m)
            self.handle(dst)

    def elect(self) -> RaftNode:
        for _ in range(1000):
            for node in self.nodes.values():
                node.tick()
                self.handle(node)
            self.pump()
            leaders = [n for n in self.nodes.values() if n.role is Role.LEADER]
            if leaders and leaders[0].commit >= leaders[0].last_index:
                return leaders[0]
        raise RuntimeError("no leader elected")


def run(entries: int, batch: int, payload_size: int, window: int) -> dict[str, float]:
    c = Cluster()
    leader = c.elect()
    start_index = leader.commit
    payloads = [bytes([i % 256]) * payload_size for i in range(batch)]
    proposed = 0
    t0 = time.perf_counter()
    while proposed < entries:
        # Keep `window` batches in flight before letting the network catch up (pipelining).
        for _ in range(window):
            leader.propose_batch(payloads)
            proposed += batch
            c.handle(leader)
        c.pump()
    c.pump()
    elapsed = time.perf_counter() - t0
    committed = leader.commit - start_index
    applied_everywhere = min(c.applied.values()) - start_index
    return {
        "entries": committed,
        "seconds": elapsed,
        "committed_per_s": committed / elapsed,
        "applied_everywhere": applied_everywhere,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--payload", type=int, default=100)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    best = 0.0
    for k in range(args.repeat):
        r = run(args.entries, args.batch, args.payload, args.window)
        best = max(best, r["committed_per_s"])
        print(
            f"run {k + 1}: {r['entries']:,} entries committed in {r['seconds']:.2f}s = "
            f"{r['committed_per_s']:,.0f} entries/s (applied on all 3: {r['applied_everywhere']:,})"
        )
    goal = 200_000
    print(
        f"best: {best:,.0f} committed entries/s through 3 nodes "
        f"(batch {args.batch}, payload {args.payload} B); goal {goal:,}: "
        f"{'met' if best >= goal else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
