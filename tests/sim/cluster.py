"""Deterministic Raft cluster simulator: every fault comes from one seed, every step is checked.

The simulator owns what the asyncio driver will own later: a network (delays, drops, duplicates,
reorders, symmetric and one-way partitions), a durable store per node (hard state written at once, log
writes finishing after a random delay and lost on crash), a state machine per node, and a tablet-copy
stand-in for ``NeedsSnapshot``, and WAL read-backs (``log_reads``) answered from the durable log after a
random delay, with a log cache small enough that entries are evicted all the time. It drives
:class:`RaftNode` exactly by the Ready ordering contract and checks Raft's safety properties after every
input; at the end it heals the cluster and checks liveness (a leader within bounded ticks, and a
proposal applied by every voter).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduBadStatus
from kudu_async.consensus.raft import (
    Config,
    ConfigChangeOp,
    Entry,
    HardState,
    LogRead,
    Message,
    RaftNode,
    RaftOptions,
    Ready,
    Role,
    SnapshotMeta,
    message_from_dict,
)

GROUP = "tablet-sim"
TICK = 4  # simulation steps per Raft tick


class SafetyViolation(AssertionError):
    """A Raft property did not hold; the message names it."""


@dataclass(frozen=True)
class SimParams:
    """Knobs of one run; the defaults are what the CI sweep uses."""

    nodes: int = 3  # pool size; all start as voters unless initial_voters says otherwise
    initial_voters: int | None = None
    steps: int = 800  # chaotic phase length in simulation steps (TICK steps = 1 tick)
    max_delay: int = 6  # message delay in steps (1..max_delay)
    drop: float = 0.05
    duplicate: float = 0.03
    disk_delay: int = 8  # log write latency in steps (1..disk_delay)
    p_crash: float = 0.004
    p_restart: float = 0.02
    p_partition: float = 0.006
    p_heal: float = 0.01
    p_propose: float = 0.15
    p_config: float = 0.01
    p_transfer: float = 0.002
    p_step_down: float = 0.001
    p_read: float = 0.03
    p_compact: float = 0.01
    liveness_ticks: int = 400
    heartbeat_ticks: int = 2
    max_backoff_ticks: int = 20
    max_msg_bytes: int = 200
    max_inflight_msgs: int = 4
    log_cache_bytes: int = 150  # a handful of entries: lagging peers are fed from read-backs
    read_delay: int = 2  # WAL read-back latency in steps (1..read_delay): a page-cache read, no fsync
    trace: bool = False


@dataclass
class Durable:
    """What survives a crash: hard state, compaction point with its state-machine image, durable log."""

    hard_state: HardState
    snapshot: SnapshotMeta
    snap_data: list[tuple[int, bytes]]  # (term, payload) for indices 1..snapshot.index
    log: list[Entry] = field(default_factory=list)


@dataclass
class SimNode:
    id: str
    durable: Durable
    raft: RaftNode | None = None
    writes: deque[tuple[int, int | None, tuple[Entry, ...]]] = field(default_factory=deque)
    sm: list[tuple[int, bytes]] = field(default_factory=list)  # applied (term, payload), index = pos + 1
    seen_commit: int = 0
    incarnation: int = 0

    @property
    def alive(self) -> bool:
        return self.raft is not None


class Simulation:
    """One seeded run. ``run()`` raises SafetyViolation on the first broken property."""

    def __init__(self, seed: int, params: SimParams | None = None) -> None:
        self.seed = seed
        self.p = p = params or SimParams()
        self.rng = random.Random(seed)
        self.now = 0
        self.trace: list[str] = []
        self.opts = RaftOptions(
            heartbeat_ticks=p.heartbeat_ticks,
            max_backoff_ticks=p.max_backoff_ticks,
            max_msg_bytes=p.max_msg_bytes,
            max_inflight_msgs=p.max_inflight_msgs,
            log_cache_bytes=p.log_cache_bytes,
        )
        ids = [f"n{i + 1}" for i in range(p.nodes)]
        self.ids = ids
        nvoters = p.initial_voters or p.nodes
        initial = Config(frozenset(ids[:nvoters]))
        empty = Config(frozenset())
        self.nodes: dict[str, SimNode] = {}
        for k, nid in enumerate(ids):
            cfg = initial if k < nvoters else empty
            d = Durable(HardState(0, None, 0), SnapshotMeta(0, 0, cfg), [])
            self.nodes[nid] = SimNode(nid, d)
        self.net: list[tuple[int, int, Message]] = []
        self.net_seq = 0
        self.blocked: set[tuple[str, str]] = set()
        self.drop = p.drop
        self.duplicate = p.duplicate
        self.faults = True
        # Global knowledge for the checks.
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, int] = {}  # index -> term, from any node's commit index
        self.max_committed = 0
        self.applied_at: dict[int, tuple[int, bytes]] = {}
        # (index, term) -> (payload, previous entry's term): the log matching witness.
        self.entries_seen: dict[tuple[int, int], tuple[bytes, int]] = {}
        self.reads: dict[bytes, int] = {}
        self.copies: list[tuple[int, str, SnapshotMeta, list[tuple[int, bytes]]]] = []
        self.log_reads: list[tuple[int, str, int, LogRead]] = []  # (due, node, incarnation, request)
        self.proposed = 0
        self.stats = {"elections": 0, "commits": 0, "crashes": 0, "config": 0, "reads": 0, "snapshots": 0}
        self.stats["log_reads"] = 0
        for k, nid in enumerate(ids):
            self._start(self.nodes[nid], phase=k)

    # --- tracing ------------------------------------------------------------------------------------

    def log(self, text: str) -> None:
        if self.p.trace:
            self.trace.append(f"t={self.now:5d} {text}")

    # --- node lifecycle -------------------------------------------------------------------------------

    def _start(self, n: SimNode, phase: int = 0) -> None:
        d = n.durable
        n.incarnation += 1
        rng = random.Random(f"{self.seed}/{n.id}/{n.incarnation}")
        n.raft = RaftNode.restart(n.id, GROUP, d.hard_state, d.snapshot, list(d.log), options=self.opts, rng=rng)
        n.sm = list(d.snap_data)
        n.seen_commit = n.raft.commit
        n.writes.clear()
        self.log(f"start {n.id} {n.raft!r}")

    def crash(self, n: SimNode) -> None:
        self.log(f"crash {n.id}")
        self.stats["crashes"] += 1
        n.raft = None
        n.writes.clear()
        n.sm = []

    # --- the Ready contract ---------------------------------------------------------------------------

    def handle(self, n: SimNode) -> None:
        r = n.raft
        assert r is not None
        rd = r.ready()
        if rd.is_empty():
            self._check_commit(n)
            return
        self._handle(n, r, rd)

    def _handle(self, n: SimNode, r: RaftNode, rd: Ready) -> None:
        d = n.durable
        if rd.snapshot is not None:
            raise SafetyViolation("snapshot Ready outside install")  # installs are handled in _copy
        if rd.hard_state is not None:
            hs = rd.hard_state
            old = d.hard_state
            if hs.term < old.term or (hs.term == old.term and old.vote is not None and hs.vote != old.vote):
                raise SafetyViolation(f"{n.id} hard state went back: {old} -> {hs}")
            d.hard_state = hs
        if rd.entries or rd.truncate_after is not None:
            due = max(self.now + self.rng.randint(1, self.p.disk_delay), n.writes[-1][0] if n.writes else 0)
            n.writes.append((due, rd.truncate_after, rd.entries))
            self._check_entries(n, r, rd.entries)
        for m in rd.messages:
            self.send(m)
        if rd.committed:
            self._apply(n, r, rd.committed)
        for rs in rd.read_states:
            want = self.reads.pop(rs.ctx, None)
            if want is not None and rs.index < want:
                raise SafetyViolation(f"read index {rs.index} for {rs.ctx!r} misses earlier commit {want}")
        for lr in rd.log_reads:
            due = self.now + self.rng.randint(1, self.p.read_delay)
            self.log_reads.append((due, n.id, n.incarnation, lr))
        for ns in rd.needs_snapshot:
            self.copies.append((self.now + self.rng.randint(2, 10), ns.peer, ns.snapshot, list(d.snap_data)))
        if rd.role is not None:
            self.log(f"role {n.id} {rd.role}")
            if rd.role.role is Role.LEADER:
                self._check_new_leader(n, r)
        self._check_commit(n)

    def _check_entries(self, n: SimNode, r: RaftNode, entries: tuple[Entry, ...]) -> None:
        """Log matching: one (index, term) names one payload with one predecessor term, on every node."""
        seen = self.entries_seen
        for e in entries:
            prev = r.log.term_at(e.index - 1)
            key = (e.index, e.term)
            got = seen.get(key)
            if got is None:
                seen[key] = (e.payload, -1 if prev is None else prev)
            elif got[0] != e.payload or (prev is not None and got[1] != -1 and got[1] != prev):
                raise SafetyViolation(f"log matching: {n.id} differs at {key}: {got} vs {e.payload!r}/{prev}")

    def _check_new_leader(self, n: SimNode, r: RaftNode) -> None:
        """Election safety and leader completeness."""
        self.stats["elections"] += 1
        other = self.leaders.setdefault(r.term, n.id)
        if other != n.id:
            raise SafetyViolation(f"election safety: {other} and {n.id} both lead term {r.term}")
        log = r.log
        for i in range(log.snapshot_index + 1, self.max_committed + 1):
            t = self.committed.get(i)
            if t is not None and log.term_at(i) != t:
                raise SafetyViolation(
                    f"leader completeness: {n.id} leads term {r.term} without committed entry {i}/{t}"
                    f" (has {log.term_at(i)})"
                )

    def _check_commit(self, n: SimNode) -> None:
        r = n.raft
        assert r is not None
        if r.commit <= n.seen_commit:
            return
        log = r.log
        for i in range(max(n.seen_commit + 1, log.first_index()), r.commit + 1):
            t = log.term_at(i)
            if t is None:
                raise SafetyViolation(f"{n.id} commit {r.commit} beyond its log {log.last_index()}")
            prev = self.committed.setdefault(i, t)
            if prev != t:
                raise SafetyViolation(f"commit safety: index {i} committed with terms {prev} and {t}")
        n.seen_commit = r.commit
        if r.commit > self.max_committed:
            self.stats["commits"] += r.commit - self.max_committed
            self.max_committed = r.commit

    def _apply(self, n: SimNode, r: RaftNode, entries: tuple[Entry, ...]) -> None:
        """State machine safety: no two nodes apply different entries at one index."""
        for e in entries:
            if e.index != len(n.sm) + 1:
                raise SafetyViolation(f"{n.id} applies {e.index} after {len(n.sm)}")
            if e.index > r.stable_index:
                raise SafetyViolation(f"{n.id} applies {e.index} before it is durable ({r.stable_index})")
            got = self.applied_at.setdefault(e.index, (e.term, e.payload))
            if got != (e.term, e.payload):
                raise SafetyViolation(f"state machine safety: index {e.index} applied as {got} and {e.term}")
            n.sm.append((e.term, e.payload))
        r.applied(entries[-1].index)

    # --- network ------------------------------------------------------------------------------------

    def send(self, m: Message) -> None:
        rng = self.rng
        if rng.random() < self.drop:
            return
        copies = 2 if rng.random() < self.duplicate else 1
        if rng.random() < 0.02:
            m = message_from_dict(m.to_dict())  # keep the wire codec honest
        for _ in range(copies):
            self.net_seq += 1
            heapq.heappush(self.net, (self.now + rng.randint(1, self.p.max_delay), self.net_seq, m))

    def deliver_due(self) -> None:
        net = self.net
        while net and net[0][0] <= self.now:
            _, _, m = heapq.heappop(net)
            n = self.nodes[m.dst]
            if n.raft is None or (m.src, m.dst) in self.blocked:
                continue
            self.log(f"deliver {m}")
            n.raft.step(m)
            self.handle(n)

    # --- disk -----------------------------------------------------------------------------------------

    def complete_writes(self) -> None:
        for n in self.nodes.values():
            while n.writes and n.writes[0][0] <= self.now and n.raft is not None:
                _, trunc, entries = n.writes.popleft()
                log = n.durable.log
                base = n.durable.snapshot.index
                if trunc is not None:
                    del log[max(0, trunc - base) :]
                if entries:
                    if entries[0].index != base + len(log) + 1:
                        raise SafetyViolation(f"{n.id} log gap: {entries[0].index} after {base + len(log)}")
                    log.extend(entries)
                if log:
                    n.raft.persisted(log[-1].index, log[-1].term)
                    self.handle(n)

    def answer_log_reads(self) -> None:
        """WAL read-back stand-in: the durable log's entries from ``lo``, a byte budget's worth."""
        due = [x for x in self.log_reads if x[0] <= self.now]
        if not due:
            return
        self.log_reads = [x for x in self.log_reads if x[0] > self.now]
        for _, nid, incarnation, lr in due:
            n = self.nodes[nid]
            r = n.raft
            if r is None or n.incarnation != incarnation:
                continue  # the node crashed: its driver's reads died with it
            base = n.durable.snapshot.index
            log = n.durable.log
            if not base < lr.lo <= base + len(log):
                r.log_read_failed(lr.peer, lr.lo)
            else:
                out: list[Entry] = []
                size = 0
                for e in log[lr.lo - base - 1 : lr.hi - base]:
                    size += len(e.payload) + 24
                    if len(out) >= lr.min_entries and size > lr.max_bytes:
                        break
                    out.append(e)
                self.stats["log_reads"] += 1
                r.log_read(lr.peer, lr.lo, out)
            self.handle(n)

    def run_copies(self) -> None:
        """Tablet copy stand-in: install the leader's snapshot image on the lagging peer."""
        due = [c for c in self.copies if c[0] <= self.now]
        if not due:
            return
        self.copies = [c for c in self.copies if c[0] > self.now]
        for _, peer, meta, data in due:
            n = self.nodes[peer]
            r = n.raft
            if r is None or meta.index <= r.commit or r.role is Role.LEADER:
                continue
            if not r.install_snapshot(meta):
                self.handle(n)
                continue
            for i, (t, payload) in enumerate(data, 1):
                got = self.applied_at.setdefault(i, (t, payload))
                if got != (t, payload):
                    raise SafetyViolation(f"snapshot image disagrees at {i}")
            self.stats["snapshots"] += 1
            self.log(f"copy to {peer} {meta}")
            # The copy is durable before the replica restarts its log from it (tablet copy semantics).
            n.durable.snapshot = meta
            n.durable.snap_data = list(data)
            n.durable.log = []
            n.writes.clear()
            n.sm = list(data)
            rd = r.ready()
            if rd.snapshot != meta:
                raise SafetyViolation(f"install_snapshot did not report {meta}")
            self._handle(n, r, Ready(**{**_fields(rd), "snapshot": None}))

    # --- workload and faults --------------------------------------------------------------------------

    def _leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.raft is not None and n.raft.role is Role.LEADER]

    def chaos(self) -> None:
        rng, p = self.rng, self.p
        nodes = list(self.nodes.values())
        if rng.random() < p.p_crash:
            alive = [n for n in nodes if n.alive]
            if alive:
                self.crash(rng.choice(alive))
        if rng.random() < p.p_restart:
            dead = [n for n in nodes if not n.alive]
            if dead:
                n = rng.choice(dead)
                self._start(n)
                self.handle(n)
        if rng.random() < p.p_partition:
            ids = self.ids
            if rng.random() < 0.5:
                side = set(rng.sample(ids, rng.randint(1, len(ids) // 2)))
                self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
                self.log(f"partition {sorted(side)}")
            else:
                links = [(a, b) for a in ids for b in ids if a != b]
                self.blocked = set(rng.sample(links, rng.randint(1, len(links) // 2)))
                self.log(f"one-way blocks {sorted(self.blocked)}")
        if self.blocked and rng.random() < p.p_heal:
            self.blocked = set()
            self.log("heal")

    def workload(self) -> None:
        rng, p = self.rng, self.p
        leaders = self._leaders()
        if not leaders:
            return
        n = rng.choice(leaders)
        r = n.raft
        assert r is not None
        try:
            if rng.random() < p.p_propose:
                k = rng.randint(1, 3)
                payloads = [f"{self.seed}:{self.proposed + j}".encode() for j in range(k)]
                self.proposed += k
                if k == 1:
                    r.propose(payloads[0])
                else:
                    r.propose_batch(payloads)
            if rng.random() < p.p_read:
                ctx = f"r{self.now}".encode()
                self.reads[ctx] = self.max_committed
                self.stats["reads"] += 1
                r.read_index(ctx, use_lease=rng.random() < 0.5)
            if rng.random() < p.p_config:
                self._config_change(r)
            if rng.random() < p.p_transfer:
                peers = sorted(r.config.voters - {r.id})
                if peers:
                    r.transfer_leadership(rng.choice(peers))
            if rng.random() < p.p_step_down:
                r.step_down()
        except KuduBadStatus:
            pass
        self.handle(n)

    def _config_change(self, r: RaftNode) -> None:
        rng = self.rng
        cfg = r.config
        outside = [i for i in self.ids if i not in cfg.members]
        choice = rng.random()
        if cfg.learners and choice < 0.4:
            r.propose_config_change(ConfigChangeOp.PROMOTE, rng.choice(sorted(cfg.learners)))
        elif outside and choice < 0.7:
            op = ConfigChangeOp.ADD_LEARNER if rng.random() < 0.6 else ConfigChangeOp.ADD_VOTER
            r.propose_config_change(op, rng.choice(outside))
        elif len(cfg.voters) > 2:
            r.propose_config_change(ConfigChangeOp.REMOVE, rng.choice(sorted(cfg.members)))
        else:
            return
        self.stats["config"] += 1
        self.log(f"config change by {r.id}")

    def compact_some(self) -> None:
        if self.rng.random() >= self.p.p_compact:
            return
        alive = [n for n in self.nodes.values() if n.raft is not None]
        if not alive:
            return
        n = self.rng.choice(alive)
        r = n.raft
        assert r is not None
        upto = r.applied_index - self.rng.randint(0, 4)
        if upto <= r.log.snapshot_index:
            return
        r.compact(upto)
        meta = r.snapshot_meta()
        d = n.durable
        d.log = [e for e in d.log if e.index > meta.index]
        d.snap_data = n.sm[: meta.index]
        d.snapshot = meta
        self.log(f"compact {n.id} -> {meta.index}")

    # --- the run ------------------------------------------------------------------------------------

    def step_once(self) -> None:
        self.now += 1
        if self.faults:
            self.chaos()
            self.compact_some()
        self.workload()
        self.deliver_due()
        self.complete_writes()
        self.answer_log_reads()
        self.run_copies()
        for k, n in enumerate(self.nodes.values()):
            if n.raft is not None and (self.now + k) % TICK == 0:
                n.raft.tick()
                self.handle(n)

    def run(self) -> dict[str, Any]:
        try:
            for _ in range(self.p.steps):
                self.step_once()
            self.check_liveness()
        except SafetyViolation:
            raise
        except AssertionError as exc:  # the core's own invariants
            raise SafetyViolation(f"core assertion: {exc}") from exc
        return self.stats

    def check_liveness(self) -> None:
        """Heal everything, then demand a leader within bounded ticks and a proposal applied everywhere."""
        self.faults = False
        self.blocked = set()
        self.drop = 0.0
        self.duplicate = 0.0
        p = self.p
        for n in self.nodes.values():
            if n.raft is None:
                self._start(n)
                self.handle(n)
        saved = (p.p_config, p.p_transfer, p.p_step_down)
        self.p = p = SimParams(**{**_fields(p), "p_config": 0.0, "p_transfer": 0.0, "p_step_down": 0.0})
        et = self.opts.election_ticks
        bound = 3 * (et + p.max_backoff_ticks) + 4 * et
        start = self.now
        leader: SimNode | None = None
        elected = False
        marker = f"{self.seed}:marker".encode()
        index = 0
        deadline = start + p.liveness_ticks * TICK
        while self.now < deadline:
            self.step_once()
            leaders = self._leaders()
            if leader is None and leaders:
                # A leader that has committed its own no-op is a working one.
                cand = max(leaders, key=lambda x: x.raft.term if x.raft else 0)
                r = cand.raft
                assert r is not None
                if r.log.term_at(r.commit) == r.term:
                    try:
                        index = r.propose(marker)
                    except KuduBadStatus:
                        continue
                    leader = cand
                    self.handle(cand)
                    self.log(f"liveness: leader {cand.id} after {(self.now - start) // TICK} ticks")
            if leaders:
                elected = True
            if not elected and self.now - start > bound * TICK:
                raise SafetyViolation(f"liveness: no leader elected {bound} ticks after healing")
            if leader is not None:
                lr = leader.raft
                if lr is None or lr.role is not Role.LEADER:
                    leader = None  # lost it (e.g. config); try again within the deadline
                    continue
                voters = lr.config.voters
                if all(len(self.nodes[v].sm) >= index for v in voters):
                    for v in voters:
                        _term, payload = self.nodes[v].sm[index - 1]
                        if payload != marker:
                            raise SafetyViolation(f"liveness: {v} applied {payload!r} at the marker index")
                    self._check_final()
                    self.p = SimParams(**{**_fields(p), "p_config": saved[0]})
                    return
        raise SafetyViolation(f"liveness: proposal not applied by all voters within {p.liveness_ticks} ticks")

    def _check_final(self) -> None:
        """Committed entries are never lost: every state machine agrees with everything committed."""
        for n in self.nodes.values():
            for i, (t, payload) in enumerate(n.sm, 1):
                if self.applied_at.get(i) != (t, payload):
                    raise SafetyViolation(f"{n.id} state machine diverges at {i}")
        for i, t in self.committed.items():
            got = self.applied_at.get(i)
            if got is not None and got[0] != t:
                raise SafetyViolation(f"committed {i}/{t} was applied as term {got[0]}")


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


def run_seed(seed: int, params: SimParams | None = None) -> dict[str, Any]:
    """Run one seed; raises SafetyViolation naming the broken property."""
    return Simulation(seed, params).run()


def params_for_seed(seed: int, steps: int | None = None) -> SimParams:
    """The sweep's mix: odd seeds 5 nodes, some with spare nodes that join via config changes."""
    kind = seed % 4
    if kind == 0:
        p = SimParams(nodes=3)
    elif kind == 1:
        p = SimParams(nodes=5)
    elif kind == 2:
        p = SimParams(nodes=5, initial_voters=3, p_config=0.03)
    else:
        # Harsh: more crashes and loss, one entry per AppendEntries (more interleavings per entry).
        p = SimParams(
            nodes=3,
            p_crash=0.01,
            drop=0.15,
            duplicate=0.1,
            p_partition=0.02,
            max_msg_bytes=1,
            max_inflight_msgs=16,
        )
    if steps is not None:
        p = SimParams(**{**_fields(p), "steps": steps})
    return p
