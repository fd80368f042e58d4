"""The sans-IO Raft state machine (Kudu's RaftConsensus without the I/O).

Shape (DESIGN.md §3, §6): like h2's ``H2Connection`` and etcd raft, the caller feeds inputs in and
pulls plain data out. There is no I/O, no clock, no asyncio and no randomness except the injected
``random.Random``; given the same seed and inputs a node does exactly the same thing, which is what
lets ``tests/sim`` check Raft's safety properties on thousands of seeded runs.

Inputs: :meth:`RaftNode.tick`, :meth:`~RaftNode.step`, :meth:`~RaftNode.propose`,
:meth:`~RaftNode.persisted`, :meth:`~RaftNode.applied`, :meth:`~RaftNode.propose_config_change`,
:meth:`~RaftNode.step_down`, :meth:`~RaftNode.transfer_leadership`, :meth:`~RaftNode.read_index`,
:meth:`~RaftNode.compact`, :meth:`~RaftNode.install_snapshot`, :meth:`~RaftNode.log_read`,
:meth:`~RaftNode.unsafe_change_config` (plus ``propose_batch`` for many payloads at once). Views: ``role``,
``term``, ``leader``, ``commit``, ``config``, ``committed_config()``, ``lease_valid()``,
``retention_index()``, ``peer_state(peer)``.

Output: after inputs the caller takes one :class:`Ready` with :meth:`RaftNode.ready` and handles it
under this **ordering contract** (the asyncio driver and the WAL follow it):

1. ``snapshot`` (if set): replace the durable log by that snapshot point (a tablet copy was installed).
2. ``hard_state`` (if set): persist term/vote/commit durably (atomic replace + fsync). This must be
   complete before any message of this Ready leaves the node (a vote or an ack must survive a crash).
3. ``truncate_after`` / ``entries``: start the durable log write: drop entries after ``truncate_after``
   (when not None), then append ``entries``. Log writes run in Ready order but may run *concurrently*
   with step 4; when a write is durable, call ``persisted(last_index, last_term)``. The core never
   claims durability it has not been told about: follower acks and the leader's own vote in the commit
   quorum wait for ``persisted``. This is how the leader sends entries while its own disk write runs.
4. ``messages``: send them (batched per destination node, any order; the network may lose them).
5. ``committed``: apply in order (they are committed *and* durable locally), then call ``applied``.
6. ``read_states``: a linearizable read for ``ctx`` may be served once ``applied >= index``.
   ``needs_snapshot``: a follower is behind the log the WAL retains; start a tablet copy to it.
   ``log_reads``: a follower needs entries evicted from the in-memory log: read them from the WAL (in a
   worker) and hand them back with :meth:`~RaftNode.log_read`, or report :meth:`~RaftNode.log_read_failed`.
   ``role``: the role/term/leader after this Ready (None when unchanged).

Several inputs may be fed before one ``ready()``; the batch then covers all of them. The hard state's
commit is never above the durable log, so a restarted replica never mistakes an overwritten
undurable entry for a committed one. ``persisted`` identifies a write by (index, term); a report from
an older write is ignored unless that entry is still in the log. Known gap: if three leaders
rewrite the same index A, B, A again within one disk write, the report for the first A write is
taken while the B write is still queued, so durability is briefly over-claimed; the simulator has
not hit this (a write id carried in ``Ready`` and echoed by ``persisted`` would close it).

Kudu specifics kept on purpose: on a log mismatch the leader jumps the follower back to its reported
committed index; a commit needs a majority of voters holding the entry *durably*, which need not
include the leader; a config takes effect when appended (one change at a time).

A leader never steps down for a newer term heard from a server outside its config: such a server was
removed (it has not heard of its removal and campaigns), or it is one of the members an operator forced
out with ``unsafe_change_config`` (two of them can still elect each other under the old config). Members'
newer terms still depose it, and a leader that loses its members steps down by check-quorum, so ignoring
those messages costs no liveness, and dropping a message is always safe in Raft.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import count, repeat
from typing import Final

from kudu_async.common.errors import (
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotTheLeader,
    KuduServiceUnavailable,
)

from .log_cache import ENTRY_OVERHEAD, LogCache, entries_bytes
from .raft_messages import (
    AppendRequest,
    AppendResponse,
    Config,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    message_from_dict,
)

__all__ = [
    "AppendRequest",
    "AppendResponse",
    "Config",
    "ConfigChange",
    "ConfigChangeOp",
    "Entry",
    "EntryKind",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "Message",
    "NeedsSnapshot",
    "PeerState",
    "RaftNode",
    "RaftOptions",
    "ReadState",
    "Ready",
    "Role",
    "RoleChange",
    "SnapshotMeta",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "message_from_dict",
]

NORMAL: Final = EntryKind.NORMAL
NOOP: Final = EntryKind.NOOP
CONFIG: Final = EntryKind.CONFIG
_FAR: Final = 1 << 60  # "never heard a leader"


class Role(enum.Enum):
    """Raft roles; LEARNER is a follower that is not a voter (Kudu NON_VOTER, or not yet in the config)."""

    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    LEARNER = "LEARNER"


class PeerState(enum.Enum):
    """How the leader feeds one follower: PROBE finds the match point one message at a time,
    REPLICATE pipelines optimistically, SNAPSHOT waits for a tablet copy."""

    PROBE = "PROBE"
    REPLICATE = "REPLICATE"
    SNAPSHOT = "SNAPSHOT"


class ConfigChangeOp(enum.Enum):
    """One-server-at-a-time membership changes (Kudu ADD_PEER / REMOVE_PEER / MODIFY_PEER).

    ADD_LEARNER adds a learner on its way to voting (Kudu's NON_VOTER with ``promote``); ADD_NON_VOTER one
    that stays a learner; DEMOTE makes a voter such a learner (Kudu's MODIFY_PEER to NON_VOTER)."""

    ADD_VOTER = "ADD_VOTER"
    ADD_LEARNER = "ADD_LEARNER"
    ADD_NON_VOTER = "ADD_NON_VOTER"
    PROMOTE = "PROMOTE"
    DEMOTE = "DEMOTE"
    REMOVE = "REMOVE"


@dataclass(frozen=True, slots=True)
class ConfigChange:
    op: ConfigChangeOp
    peer: str


# How the leader lease stays inside the followers' stickiness (no vote for another candidate until an
# election timeout of *their* ticks has passed since they last heard from the leader). The host's ticker
# may run late ticks back to back, at most MAX_TICK_CATCH_UP of them (a follower's stickiness can end that
# many ticks early in real time); a leader trusts its lease only while its own ticker lags its schedule by
# at most LEASE_TICK_LAG ticks; and one tick covers where in a tick period an ack was counted. Held up for
# longer than the catch-up, a ticker drops the missed ticks and the leader voids its lease (``void_lease``).
MAX_TICK_CATCH_UP = 2
LEASE_TICK_LAG = 2
LEASE_MARGIN_TICKS = 1 + MAX_TICK_CATCH_UP + LEASE_TICK_LAG


@dataclass(frozen=True, slots=True)
class RaftOptions:
    """Timers are in ticks (the driver ticks every 100 ms: H=5 -> 500 ms heartbeats, 1.5 s timeout)."""

    heartbeat_ticks: int = 5
    missed_heartbeats: int = 3
    max_backoff_ticks: int = 200  # Kudu caps election backoff at 20 s
    backoff_factor: float = 1.5
    pre_vote: bool = True
    check_quorum: bool = True
    max_msg_bytes: int = 1 << 20  # consensus_max_batch_size_bytes
    max_inflight_msgs: int = 64
    max_inflight_bytes: int = 16 << 20
    # Bytes of entries kept in memory (Kudu's log_cache_size_limit_mb). Applied, durable entries every
    # peer holds leave at once; past this the oldest applied, durable ones leave too and a peer that
    # still needs them has them read back from the WAL.
    log_cache_bytes: int = 8 << 20

    @property
    def election_ticks(self) -> int:
        return self.heartbeat_ticks * self.missed_heartbeats


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before messages leave: current term, vote in it, commit index."""

    term: int
    vote: str | None
    commit: int


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """The compaction point: state machine holds everything up to ``index``; ``config`` is in force there."""

    index: int
    term: int
    config: Config


@dataclass(frozen=True, slots=True)
class RoleChange:
    role: Role
    term: int
    leader: str | None


@dataclass(frozen=True, slots=True)
class ReadState:
    """A read-index answer: serve the read for ``ctx`` once the state machine has applied ``index``."""

    ctx: bytes
    index: int


@dataclass(frozen=True, slots=True)
class NeedsSnapshot:
    """Peer ``peer`` needs entries before the retained log: copy the tablet up to ``snapshot``."""

    peer: str
    snapshot: SnapshotMeta


@dataclass(frozen=True, slots=True)
class LogRead:
    """Peer ``peer`` needs entries ``lo..hi`` read back from the WAL: at least ``min_entries`` of them (as
    many as there are), then more while they fit in ``max_bytes``."""

    peer: str
    lo: int
    hi: int
    max_bytes: int
    min_entries: int = 1


@dataclass(frozen=True, slots=True)
class Ready:
    """One batch of output; handle it in field order as the module docstring describes."""

    snapshot: SnapshotMeta | None = None
    hard_state: HardState | None = None
    truncate_after: int | None = None
    entries: tuple[Entry, ...] = ()
    messages: tuple[Message, ...] = ()
    committed: tuple[Entry, ...] = ()
    read_states: tuple[ReadState, ...] = ()
    needs_snapshot: tuple[NeedsSnapshot, ...] = ()
    role: RoleChange | None = None
    log_reads: tuple[LogRead, ...] = ()

    def is_empty(self) -> bool:
        return not (
            self.snapshot
            or self.hard_state
            or self.truncate_after is not None
            or self.entries
            or self.messages
            or self.committed
            or self.read_states
            or self.needs_snapshot
            or self.role
            or self.log_reads
        )


EMPTY_READY: Final = Ready()


@dataclass(slots=True)
class _Progress:
    """The leader's view of one follower."""

    match: int = 0  # highest index durable on the follower and agreeing with us
    next: int = 1
    state: PeerState = PeerState.PROBE
    paused: bool = False  # PROBE: one message outstanding
    inflight: deque[tuple[int, int]] = field(default_factory=deque)  # (last index, bytes) per message
    inflight_bytes: int = 0
    recent_active: bool = False
    lease_tick: int = -_FAR
    read_ack: int = 0
    snapshot_elapsed: int = 0
    reading: int = 0  # first index of the WAL read-back under way for this peer (0: none)
    # Entries read back from the WAL and not yet sent (at most one read's worth, within the in-flight
    # budget): a probe round or a full pipeline does not throw a read away. Committed, so never stale.
    stash: list[Entry] = field(default_factory=list)

    def from_stash(self, max_bytes: int) -> list[Entry]:
        """Stashed entries from ``next`` on, up to ``max_bytes`` (at least one); [] when not stashed."""
        stash = self.stash
        if not stash or not stash[0].index <= self.next <= stash[-1].index:
            stash.clear()
            return []
        del stash[: self.next - stash[0].index]
        end, size = 1, len(stash[0].payload) + ENTRY_OVERHEAD
        while end < len(stash):
            size += len(stash[end].payload) + ENTRY_OVERHEAD
            if size > max_bytes:
                break
            end += 1
        return stash[:end]

    def reset(self, state: PeerState, next_index: int) -> None:
        self.state = state
        self.next = next_index
        self.paused = False
        self.reading = 0
        self.inflight.clear()
        self.inflight_bytes = 0
        self.snapshot_elapsed = 0

    def free_to(self, index: int) -> None:
        """Acks are cumulative: every in-flight message ending at or before ``index`` is done."""
        inflight = self.inflight
        while inflight and inflight[0][0] <= index:
            self.inflight_bytes -= inflight.popleft()[1]


class RaftNode:
    """One replica of one Raft group. Create with :meth:`bootstrap` or :meth:`restart`."""

    def __init__(
        self,
        node_id: str,
        group: str,
        *,
        hard_state: HardState,
        snapshot: SnapshotMeta,
        entries: list[Entry] | tuple[Entry, ...] = (),
        applied: int | None = None,
        options: RaftOptions | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.id = node_id
        self.group = group
        self.opts = options or RaftOptions()
        self._rng = rng if rng is not None else random.Random(0)
        self._log_cache_limit = self.opts.log_cache_bytes
        self._log = LogCache(snapshot.index, snapshot.term, entries)
        self.term = hard_state.term
        self.vote = hard_state.vote
        last = self._log.last_index()
        self.commit = max(snapshot.index, min(hard_state.commit, last))
        self._applied = snapshot.index if applied is None else max(snapshot.index, min(applied, self.commit))
        self._apply_next = self._applied + 1  # first index not yet handed out for applying
        # Config history: the compaction point's config plus every CONFIG entry in the log.
        self._snap_config = snapshot.config
        self._configs: list[tuple[int, Config]] = []
        for e in entries:
            if e.kind is CONFIG:
                self._configs.append((e.index, Config.decode(e.payload)))
        self.config = self._configs[-1][1] if self._configs else snapshot.config

        self.leader: str | None = None
        self.role = Role.FOLLOWER if self.id in self.config.voters else Role.LEARNER
        self._ticks = 0
        self._elapsed = 0  # ticks since election timer reset
        # Leader stickiness also holds right after a (re)start: we may have just heard a leader.
        self._since_leader = 0
        self._failed_elections = 0
        self._timeout = self._randomized_timeout()
        self._votes: dict[str, bool] = {}
        # Follower side: the leader we ack and how far our log is known to agree with it.
        self._ack_leader: str | None = None
        self._ack_term = 0
        self._ack_match = self.commit
        self._ack_sent = 0
        # Leader side.
        self._progress: dict[str, _Progress] = {}
        self._hb_elapsed = 0
        self._hb_phase_pending = False
        self._noop_index = 0
        self._conf_pending = 0  # index of the newest config entry (or the no-op) that must commit first
        self._transferee: str | None = None
        self._transfer_elapsed = 0
        # Set by a quiescing host: never stand for election (timeouts, campaign(), TimeoutNow); votes as usual.
        self.quiescing = False
        self._lease_void_until = 0  # after a TimeoutNow a forced election may bypass stickiness
        self._read_seq = 0
        self._pending_reads: deque[tuple[int, bytes, int]] = deque()  # (seq, ctx, index)
        self._reads_waiting_noop: list[bytes] = []
        # Output being collected for the next Ready.
        self._hs_sent = hard_state
        self._out_snapshot: SnapshotMeta | None = None
        self._out_truncate: int | None = None
        self._out_entries: list[Entry] = []
        self._out_msgs: list[Message] = []
        self._out_reads: list[ReadState] = []
        self._out_needs_snapshot: list[NeedsSnapshot] = []
        self._out_log_reads: list[LogRead] = []
        self._last_role = RoleChange(self.role, self.term, self.leader)
        self._role_dirty = False

    # --- construction ---------------------------------------------------------------------------------

    @classmethod
    def bootstrap(
        cls,
        node_id: str,
        group: str,
        config: Config,
        *,
        options: RaftOptions | None = None,
        rng: random.Random | None = None,
    ) -> RaftNode:
        """A brand-new replica. Initial members pass the initial config; a replica about to be added
        passes ``Config(frozenset())`` and learns its config from the leader's log.

        It holds no leader stickiness: it has never acked a leader, so no lease counts on it (a restarted
        replica may have, and waits out an election timeout first)."""
        node = cls(
            node_id,
            group,
            hard_state=HardState(0, None, 0),
            snapshot=SnapshotMeta(0, 0, config),
            options=options,
            rng=rng,
        )
        node._since_leader = _FAR
        return node

    @classmethod
    def restart(
        cls,
        node_id: str,
        group: str,
        hard_state: HardState,
        snapshot: SnapshotMeta,
        entries: list[Entry] | tuple[Entry, ...],
        *,
        applied: int | None = None,
        options: RaftOptions | None = None,
        rng: random.Random | None = None,
    ) -> RaftNode:
        """Recover from durable state: hard state, the compaction point and the durable log after it.

        ``applied`` is how far a durable state machine already got (default: the snapshot index, i.e.
        entries are re-delivered from there)."""
        return cls(
            node_id,
            group,
            hard_state=hard_state,
            snapshot=snapshot,
            entries=entries,
            applied=applied,
            options=options,
            rng=rng,
        )

    # --- read-only views ------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def last_index(self) -> int:
        return self._log.last_index()

    @property
    def last_term(self) -> int:
        return self._log.last_term()

    @property
    def first_index(self) -> int:
        return self._log.first_index()

    @property
    def stable_index(self) -> int:
        """Highest index this node knows to be durable in its own log."""
        return self._log.stable

    @property
    def applied_index(self) -> int:
        return self._applied

    @property
    def log(self) -> LogCache:
        """The in-memory log (read it, never mutate it)."""
        return self._log

    def peer_state(self, peer: str) -> tuple[PeerState, int, int] | None:
        """(mode, match, next) of a follower as the leader sees it; for admin pages and tests."""
        pr = self._progress.get(peer)
        return None if pr is None else (pr.state, pr.match, pr.next)

    def retention_index(self) -> int:
        """Lowest index a log GC should keep so no live follower needs a tablet copy: on the leader the
        smallest follower match + 1 (the driver bounds this by its retention limit), else applied + 1."""
        if self.role is not Role.LEADER or not self._progress:
            return self._applied + 1
        return min(pr.match for pr in self._progress.values()) + 1

    @property
    def config_index(self) -> int:
        """Log index of the entry that made the current config (the compaction point if it predates it):
        whoever compares reports of one group keeps the config with the highest index (Kudu's opid_index)."""
        return self._configs[-1][0] if self._configs else self._log.snapshot_index

    def snapshot_meta(self) -> SnapshotMeta:
        return SnapshotMeta(self._log.snapshot_index, self._log.snapshot_term, self._snap_config)

    def committed_config(self) -> Config:
        """The config of the newest CONFIG entry at or below the commit index (Kudu's committed config;
        ``config`` may be newer: a config takes effect when appended)."""
        cfg = self._snap_config
        for idx, c in self._configs:
            if idx > self.commit:
                break
            cfg = c
        return cfg

    # --- the Ready batch ------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        return bool(
            self._out_snapshot
            or self._out_truncate is not None
            or self._out_entries
            or self._out_msgs
            or self._out_reads
            or self._out_needs_snapshot
            or self._out_log_reads
            or self._role_dirty
            or self._apply_next <= min(self.commit, self._log.stable)
            or self._hs_sent.term != self.term
            or self._hs_sent.vote != self.vote
            or self._hs_sent.commit != min(self.commit, self._log.stable)
        )

    def ready(self) -> Ready:
        """Take everything produced since the last call; see the module docstring for the contract."""
        hs: HardState | None = None
        sent = self._hs_sent
        upto = min(self.commit, self._log.stable)
        if sent.term != self.term or sent.vote != self.vote or sent.commit != upto:
            # Only a durable commit point is recorded: after a crash the durable log may still hold
            # entries that were overwritten in memory, and they must never look committed.
            hs = self._hs_sent = HardState(self.term, self.vote, upto)
        committed: tuple[Entry, ...] = ()
        if self._apply_next <= upto:
            committed = tuple(self._log.slice(self._apply_next, upto + 1))
            self._apply_next = upto + 1
        role: RoleChange | None = None
        if self._role_dirty:
            self._role_dirty = False
            now = RoleChange(self.role, self.term, self.leader)
            if now != self._last_role:
                role = self._last_role = now
        if (
            hs is None
            and not committed
            and role is None
            and not self._out_msgs
            and not self._out_entries
            and self._out_truncate is None
            and self._out_snapshot is None
            and not self._out_reads
            and not self._out_needs_snapshot
            and not self._out_log_reads
        ):
            return EMPTY_READY
        rd = Ready(
            snapshot=self._out_snapshot,
            hard_state=hs,
            truncate_after=self._out_truncate,
            entries=tuple(self._out_entries),
            messages=tuple(self._out_msgs),
            committed=committed,
            read_states=tuple(self._out_reads),
            needs_snapshot=tuple(self._out_needs_snapshot),
            role=role,
            log_reads=tuple(self._out_log_reads),
        )
        self._out_snapshot = None
        self._out_truncate = None
        self._out_entries = []
        self._out_msgs = []
        self._out_reads = []
        self._out_needs_snapshot = []
        self._out_log_reads = []
        return rd

    # --- inputs: durability and application ------------------------------------------------------------

    def persisted(self, up_to_index: int, term: int) -> None:
        """The log is durable up to ``up_to_index`` whose entry has ``term`` (stale reports are ignored)."""
        log = self._log
        if up_to_index <= log.stable or log.term_at(up_to_index) != term:
            return
        log.stable = up_to_index
        if self.role is Role.LEADER:
            self._maybe_commit()
        else:
            self._maybe_send_ack()

    def applied(self, index: int) -> None:
        """The state machine applied everything up to ``index`` (only ever moves forward)."""
        if index > self._applied:
            self._applied = min(index, self._apply_next - 1)
            self._evict()

    def _evict(self) -> None:
        """Drop applied, durable entries from memory: at once those every peer holds, and the oldest of
        the rest while the cache is over its byte limit (the WAL has them for a peer that asks)."""
        log = self._log
        bound = min(self._applied, log.stable)
        if bound < log.cached_from():
            return
        target = bound
        if self.role is Role.LEADER and self._progress:
            target = min(target, min(pr.match for pr in self._progress.values()))
        limit = self._log_cache_limit
        if log.memory_bytes() - log.bytes_between(log.cached_from(), max(target, log.cached_from() - 1) + 1) > limit:
            target = min(bound, max(target, log.evict_target(limit)))
        log.evict_to(target)

    def set_log_cache_limit(self, limit_bytes: int) -> None:
        """Bound the in-memory log to ``limit_bytes`` from now on (the node shares a global budget)."""
        if limit_bytes < 0:
            raise KuduInvalidArgument(f"log cache limit must be >= 0 bytes, not {limit_bytes}")
        self._log_cache_limit = limit_bytes
        self._evict()

    def log_retained_from(self, index: int) -> None:
        """The durable log holds entries from ``index`` on (after a GC, or at restart): terms of older
        ones are dropped, and a follower needing one of those gets a ``NeedsSnapshot``."""
        self._log.forget_before(index)

    def log_retained_terms(self, run_first: list[int], run_term: list[int]) -> None:
        """At restart: the durable log also holds entries from ``run_first[0]`` up to the compaction point,
        with these term runs; followers that need them have them read back instead of copied."""
        self._log.retain_terms(run_first, run_term)

    def log_memory_bytes(self) -> int:
        """Bytes of log entries this replica holds in memory."""
        return self._log.memory_bytes()

    # --- inputs: time ---------------------------------------------------------------------------------

    def tick(self, node_tick: int | None = None) -> bool:
        """One logical clock tick (100 ms in the driver); True when it produced output for ``ready()``.

        Most ticks only count: the driver skips ``has_ready()`` after those, which matters with hundreds
        of idle replicas on a node.

        ``node_tick`` is the node's own tick count, the same for every replica it ticks. A new leader
        given it moves its heartbeats onto the ticks that are multiples of ``heartbeat_ticks``, so all the
        node's leaders heartbeat on one tick and the transport sends one batch per peer per heartbeat
        period instead of one on every tick (idle multi-Raft cost is per RPC, not per message).
        """
        self._ticks += 1
        self._since_leader += 1
        if self.role is Role.LEADER:
            if node_tick is not None and self._hb_phase_pending:
                self._hb_phase_pending = False
                self._hb_elapsed = (node_tick - 1) % self.opts.heartbeat_ticks  # _tick_leader adds one
            return self._tick_leader()
        self._elapsed += 1
        if self._elapsed >= self._timeout and self._may_campaign():
            if self.role in (Role.PRE_CANDIDATE, Role.CANDIDATE):
                self._failed_elections += 1
            self._campaign(pre_vote=self.opts.pre_vote, forced=False)
            return True
        return False

    def _tick_leader(self) -> bool:
        opts = self.opts
        out = False
        self._hb_elapsed += 1
        self._elapsed += 1
        if self._transferee is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= opts.election_ticks:
                self._transferee = None  # target never caught up or never won: stay leader (Kudu)
        if self._elapsed >= opts.election_ticks:
            self._elapsed = 0
            if opts.check_quorum and not self._quorum_active():
                self._become_follower(self.term, None)
                return True
        if self._hb_elapsed >= opts.heartbeat_ticks:
            self._hb_elapsed = 0
            self._broadcast_heartbeat()
            out = True
        for peer, pr in self._progress.items():
            if pr.state is PeerState.SNAPSHOT:
                pr.snapshot_elapsed += 1
                if pr.snapshot_elapsed >= opts.election_ticks:
                    # The copy may have failed; say it again (the driver de-duplicates sessions).
                    pr.snapshot_elapsed = 0
                    self._out_needs_snapshot.append(NeedsSnapshot(peer, self.snapshot_meta()))
                    out = True
        return out

    def _quorum_active(self) -> bool:
        active = 1 if self.id in self.config.voters else 0
        for peer, pr in self._progress.items():
            if pr.recent_active and peer in self.config.voters:
                active += 1
            pr.recent_active = False
        return active >= self.config.quorum()

    # --- inputs: client requests ----------------------------------------------------------------------

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise KuduNotTheLeader(
                f"replica {self.id} of {self.group} is {self.role.value}, not the leader",
                {"leader": self.leader, "term": self.term},
            )
        if self._transferee is not None:
            raise KuduServiceUnavailable(
                f"replica {self.id} of {self.group} is transferring leadership to {self._transferee}",
                {"leader": self.id, "term": self.term},
            )

    def propose(self, payload: bytes) -> int:
        """Append one NORMAL entry; returns its index (it commits later, or is lost with leadership)."""
        self._require_leader()
        index = self._log.last_index() + 1
        self._append_own([Entry(self.term, index, NORMAL, payload)])
        return index

    def propose_batch(self, payloads: list[bytes]) -> int:
        """Append many NORMAL entries at once (one broadcast); returns the index of the last one."""
        self._require_leader()
        if not payloads:
            return self._log.last_index()
        term = self.term
        first = self._log.last_index() + 1
        self._append_own(list(map(Entry, repeat(term), count(first), repeat(NORMAL), payloads)))
        return first + len(payloads) - 1

    def propose_config_change(self, op: ConfigChangeOp, peer: str, addresses: Mapping[str, str] | None = None) -> int:
        """Append a CONFIG entry changing one server; it takes effect at once (when appended).

        ``addresses`` (uuid -> address) are stored in the entry for the hosts; the core never reads them."""
        self._require_leader()
        if self._conf_pending > self.commit:
            raise KuduIllegalState(
                f"a config change (or this leader's no-op) at index {self._conf_pending} is not committed yet"
                f" (commit index {self.commit}); one change at a time"
            )
        cfg = self.config
        voters, learners, kept = set(cfg.voters), set(cfg.learners), set(cfg.kept_learners)
        if op is ConfigChangeOp.ADD_VOTER:
            if peer in cfg.voters:
                raise KuduInvalidArgument(f"{peer} is already a voter of {self.group}")
            learners.discard(peer)
            kept.discard(peer)
            voters.add(peer)
        elif op in (ConfigChangeOp.ADD_LEARNER, ConfigChangeOp.ADD_NON_VOTER):
            if peer in cfg.members:
                raise KuduInvalidArgument(f"{peer} is already a member of {self.group}")
            learners.add(peer)
            if op is ConfigChangeOp.ADD_NON_VOTER:
                kept.add(peer)
        elif op is ConfigChangeOp.DEMOTE:
            if peer not in cfg.voters:
                raise KuduInvalidArgument(f"{peer} is not a voter of {self.group}")
            if peer == self.id:
                raise KuduIllegalState(
                    f"{peer} leads {self.group}: a leader is not demoted; transfer its leadership first"
                )
            voters.discard(peer)
            learners.add(peer)
            kept.add(peer)
        elif op is ConfigChangeOp.PROMOTE:
            if peer not in cfg.learners:
                raise KuduInvalidArgument(f"{peer} is not a learner of {self.group}")
            pr = self._progress.get(peer)
            if pr is None or pr.match < self.commit:
                raise KuduIllegalState(
                    f"learner {peer} is not caught up: holds {0 if pr is None else pr.match},"
                    f" commit index is {self.commit}"
                )
            learners.discard(peer)
            kept.discard(peer)
            voters.add(peer)
        else:
            if peer not in cfg.members:
                raise KuduInvalidArgument(f"{peer} is not a member of {self.group}")
            voters.discard(peer)
            learners.discard(peer)
            kept.discard(peer)
            if not voters:
                raise KuduInvalidArgument(f"removing {peer} would leave {self.group} without voters")
        new = Config(frozenset(voters), frozenset(learners), frozenset(kept))
        index = self._log.last_index() + 1
        self._conf_pending = index
        self._append_own([Entry(self.term, index, CONFIG, new.encode(addresses))])
        return index

    def campaign(self) -> None:
        """Start an election now rather than when the election timeout fires (etcd's Campaign): the
        tserver asks this of one replica of a tablet it has just created, so a new table gets its leaders
        in two vote round trips instead of 1.5-3 s of timeouts. A normal election (pre-vote first, when
        enabled): brand-new peers hold no stickiness and grant it, while peers that follow a live leader
        refuse it, so asking again while no leader is known here cannot depose one elected meanwhile.
        A no-op on a leader or a non-voter."""
        if self.role is Role.LEADER or not self._may_campaign():
            return
        self._campaign(pre_vote=self.opts.pre_vote, forced=False)

    def step_down(self) -> None:
        """Abrupt leader step-down (Kudu LeaderStepDown ABRUPT): become a follower in the same term."""
        if self.role is not Role.LEADER:
            raise KuduNotTheLeader(f"replica {self.id} of {self.group} is not the leader", {"leader": self.leader})
        self._become_follower(self.term, None)

    def transfer_leadership(self, peer: str) -> None:
        """Graceful step-down to ``peer``: stop taking writes, let it catch up, then TimeoutNow it.

        If it has not won within an election timeout, this leader carries on (as Kudu does)."""
        self._require_leader()
        if peer == self.id or peer not in self.config.voters:
            raise KuduInvalidArgument(f"cannot transfer leadership of {self.group} to {peer}: not another voter")
        self._transferee = peer
        self._transfer_elapsed = 0
        pr = self._progress[peer]
        if pr.match == self._log.last_index():
            self._send_timeout_now(peer)
        else:
            self._send_append(peer, pr)

    def unsafe_change_config(self, keep: frozenset[str], addresses: Mapping[str, str] | None = None) -> int:
        """Force the config to the members of the committed config named in ``keep`` (Kudu's
        UnsafeChangeConfig), for a group that lost its majority: nothing commits without one, so no
        config change can be replicated. Returns the index of the CONFIG entry written.

        Members keep their kind (voter or learner); this replica must stay a voter. As Kudu does, the entry
        is written as if a new leader of the next term had sent it: at the current term + 1, after the
        last entry of the log (uncommitted entries stay and commit under the new config), so no leader of
        an older term can write over it. The replica then campaigns at once: alone in the config it wins
        outright and its no-op commits everything before it. Unsafe: entries a lost majority committed
        that this log lacks are gone, and the members forced out must never serve again (the master
        deletes their replicas when they report).

        ``addresses`` (uuid -> address) are stored in the entry like ``propose_config_change``'s."""
        base = self.committed_config()
        unknown = sorted(keep - base.members)
        if unknown:
            raise KuduInvalidArgument(
                f"{', '.join(unknown)} not in the committed config of {self.group} "
                f"(voters {sorted(base.voters)}, learners {sorted(base.learners)})"
            )
        new = Config(base.voters & keep, base.learners & keep, base.kept_learners & keep)
        if self.id not in new.voters:
            raise KuduInvalidArgument(
                f"this replica {self.id} must be a voter of the new config of {self.group}, "
                f"which would be voters {sorted(new.voters)}, learners {sorted(new.learners)}"
            )
        self._become_follower(self.term + 1, None)
        entry = Entry(self.term, self._log.last_index() + 1, CONFIG, new.encode(addresses))
        self._log.append([entry])
        self._out_entries.append(entry)
        self._config_appended(entry)
        if self._may_campaign():
            self._campaign(pre_vote=self.opts.pre_vote, forced=False)
        return entry.index

    def read_index(self, ctx: bytes, *, use_lease: bool = False) -> None:
        """Ask for a linearizable read point; the answer arrives as a ``ReadState`` in a later Ready.

        Without a lease the leader confirms it is still leader with a heartbeat round to a majority.
        With ``use_lease`` it answers at once while its lease (majority acks younger than the election
        timeout, which followers honour through leader stickiness) holds, else falls back to a round.
        """
        self._require_leader()
        self._start_read(ctx, use_lease)

    @property
    def term_start_index(self) -> int:
        """Index of the no-op this node appended when it became leader (0 before it ever led): once it is
        applied, so is every entry of an earlier term."""
        return self._noop_index

    def lease_read_index(self) -> int | None:
        """What ``read_index(use_lease=True)`` would answer at once, without a Ready round: the commit
        index while this leader's lease holds and that index is of its own term; None otherwise (then ask
        ``read_index``, which waits or confirms with a heartbeat round)."""
        if self.role is not Role.LEADER or self._log.term_at(self.commit) != self.term:
            return None
        return self.commit if self._read_answers_at_once(True) else None

    def _read_answers_at_once(self, use_lease: bool) -> bool:
        """A leader whose commit index is of its term: no other voter to ask, or a lease to rely on."""
        return self.config.voters <= {self.id} or (use_lease and self.lease_valid())

    def _start_read(self, ctx: bytes, use_lease: bool) -> None:
        if self._log.term_at(self.commit) != self.term:
            self._reads_waiting_noop.append(ctx)  # commit index not yet known to be current
            return
        if self._read_answers_at_once(use_lease):
            self._out_reads.append(ReadState(ctx, self.commit))
            return
        self._read_seq += 1
        self._pending_reads.append((self._read_seq, ctx, self.commit))
        self._broadcast_heartbeat()

    def void_lease(self) -> None:
        """Distrust acks counted before now for an election timeout: the caller's ticks stopped while time
        went on (the process was stopped or starved), so those acks are older than their tick count says."""
        self._lease_void_until = max(self._lease_void_until, self._ticks + self.opts.election_ticks)

    def lease_valid(self) -> bool:
        """True while no other replica can have been elected: a majority acked a heartbeat sent less than
        an election timeout minus ``LEASE_MARGIN_TICKS`` ago. The host must only use it while its ticks
        keep up with real time (see the constant)."""
        if (
            self.role is not Role.LEADER
            or self._transferee is not None
            or not self.opts.check_quorum
            or self._ticks < self._lease_void_until
        ):
            return False
        ticks = [self._ticks if self.id in self.config.voters else -_FAR]
        ticks += [pr.lease_tick for p, pr in self._progress.items() if p in self.config.voters]
        ticks.sort(reverse=True)
        q = self.config.quorum()
        if len(ticks) < q:
            return False
        return ticks[q - 1] + self.opts.election_ticks - LEASE_MARGIN_TICKS >= self._ticks

    def compact(self, up_to_index: int, keep_terms_from: int | None = None) -> None:
        """Entries up to ``up_to_index`` are durable in the state machine: forget them. The WAL still
        holds those from ``keep_terms_from`` on (default: none of them): a follower that needs one has
        it read back (``log_reads``); one that needs an older entry gets a ``NeedsSnapshot`` output."""
        up_to_index = min(up_to_index, self._applied)
        if up_to_index <= self._log.snapshot_index:
            return
        cfg = self._snap_config
        keep: list[tuple[int, Config]] = []
        for idx, c in self._configs:
            if idx <= up_to_index:
                cfg = c
            else:
                keep.append((idx, c))
        self._log.compact(up_to_index, keep_terms_from)
        self._snap_config = cfg
        self._configs = keep

    def install_snapshot(self, snapshot: SnapshotMeta) -> bool:
        """A tablet copy brought a state machine image up to ``snapshot.index``.

        Returns True when the replica restarts its log from that image (the caller then swaps in the
        copied data), False when it is not needed: stale, or our own log already holds the committed
        entry at that index (then we only learn that it is committed)."""
        if snapshot.index <= self.commit or self.role is Role.LEADER:
            return False
        log = self._log
        if log.term_at(snapshot.index) == snapshot.term:
            # Our entry there is the committed one, hence so is our whole prefix.
            self._ack_match = max(self._ack_match, snapshot.index)
            self.commit = snapshot.index
            self._maybe_send_ack()
            return False
        log.reset(snapshot.index, snapshot.term)
        self._snap_config = snapshot.config
        self._configs = []
        self.commit = snapshot.index
        self._applied = snapshot.index
        self._apply_next = snapshot.index + 1
        self._out_snapshot = snapshot
        self._out_truncate = None
        self._out_entries = []
        # Committed entries agree with every leader, so the image counts as agreed and durable;
        # whatever we held beyond it diverged from the committed log.
        self._ack_match = snapshot.index
        self._ack_sent = min(self._ack_sent, snapshot.index)
        self._set_config(snapshot.config)
        self._maybe_send_ack()
        return True

    # --- inputs: messages -----------------------------------------------------------------------------

    def step(self, m: Message) -> None:
        """Handle one message from a peer."""
        if m.group != self.group:
            raise KuduInvalidArgument(f"message for group {m.group!r} stepped into group {self.group!r}")
        if m.term > self.term:
            if self.role is Role.LEADER and m.src not in self.config.members:
                return  # a removed (or forced-out) server's newer term: see the module docstring
            if not self._step_newer_term(m):
                return
        elif m.term < self.term:
            self._step_stale(m)
            return

        if isinstance(m, AppendRequest):
            self._handle_append(m)
        elif isinstance(m, AppendResponse):
            self._handle_append_response(m)
        elif isinstance(m, Heartbeat):
            self._handle_heartbeat(m)
        elif isinstance(m, HeartbeatResponse):
            self._handle_heartbeat_response(m)
        elif isinstance(m, VoteRequest):
            self._handle_vote_request(m)
        elif isinstance(m, VoteResponse):
            self._handle_vote_response(m)
        elif isinstance(m, TimeoutNow) and self._may_campaign() and self.role is not Role.LEADER:
            self._campaign(pre_vote=False, forced=True)

    def _step_newer_term(self, m: Message) -> bool:
        """Learn a message's newer term; False when the message is fully handled here."""
        if isinstance(m, VoteRequest):
            if not m.forced and self._in_lease():
                # Leader stickiness: a live leader exists, do not even learn the new term.
                self._send(VoteResponse(self.group, self.id, m.src, self.term, False, m.pre_vote))
                return False
            if m.pre_vote:
                self._handle_vote_request(m)
                return False
            self._become_follower(m.term, None)
        elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
            pass  # a granted pre-vote carries the term we are about to ask for
        elif isinstance(m, AppendRequest | Heartbeat | TimeoutNow):
            self._become_follower(m.term, m.src)
        else:
            self._become_follower(m.term, None)
        return True

    def _step_stale(self, m: Message) -> None:
        """Tell stale leaders and pre-candidates about the newer term; ignore other stale traffic."""
        if isinstance(m, AppendRequest):
            self._send(
                AppendResponse(
                    self.group,
                    self.id,
                    m.src,
                    self.term,
                    False,
                    0,
                    self._log.last_index(),
                    self.commit,
                    m.prev_index,
                )
            )
        elif isinstance(m, Heartbeat):
            self._send(HeartbeatResponse(self.group, self.id, m.src, self.term, 0, 0, m.read_seq, m.sent_tick))
        elif isinstance(m, VoteRequest) and m.pre_vote:
            self._send(VoteResponse(self.group, self.id, m.src, self.term, False, True))

    # --- elections ------------------------------------------------------------------------------------

    def _promotable(self) -> bool:
        return self.id in self.config.voters

    def _may_campaign(self) -> bool:
        return self._promotable() and not self.quiescing

    def _in_lease(self) -> bool:
        if self.role is Role.LEADER:
            return self.opts.check_quorum
        return self._since_leader < self.opts.election_ticks

    def _randomized_timeout(self) -> int:
        """Election timeout plus jitter that widens x1.5 per failed election, capped (Kudu's backoff)."""
        base = self.opts.election_ticks
        span = min(self.opts.max_backoff_ticks, int(base * self.opts.backoff_factor**self._failed_elections))
        return base + self._rng.randint(0, max(1, span))

    def _reset_timer(self) -> None:
        self._elapsed = 0
        self._timeout = self._randomized_timeout()

    def _campaign(self, *, pre_vote: bool, forced: bool) -> None:
        self._since_leader = _FAR
        self.leader = None
        if pre_vote:
            self._set_role(Role.PRE_CANDIDATE)
            term = self.term + 1
        else:
            self.term += 1
            self.vote = self.id
            self._set_role(Role.CANDIDATE)
            term = self.term
        self._reset_timer()
        self._votes = {self.id: True}
        if self._tally() is True:
            self._won_round()
            return
        pre = self.role is Role.PRE_CANDIDATE
        last_index, last_term = self._log.last_index(), self._log.last_term()
        for peer in sorted(self.config.voters):
            if peer != self.id:
                self._send(VoteRequest(self.group, self.id, peer, term, last_index, last_term, pre, forced))

    def _tally(self) -> bool | None:
        """True = won, False = lost, None = undecided."""
        q = self.config.quorum()
        yes = sum(1 for p, g in self._votes.items() if g and p in self.config.voters)
        no = sum(1 for p, g in self._votes.items() if not g and p in self.config.voters)
        if yes >= q:
            return True
        if no > len(self.config.voters) - q:
            return False
        return None

    def _won_round(self) -> None:
        if self.role is Role.PRE_CANDIDATE:
            self._campaign(pre_vote=False, forced=False)  # pre-vote won: now the real election
        else:
            self._become_leader()

    def _handle_vote_request(self, m: VoteRequest) -> None:
        log = self._log
        up_to_date = (m.last_term, m.last_index) >= (log.last_term(), log.last_index())
        if m.pre_vote:
            granted = m.term > self.term and up_to_date
        else:
            can_vote = self.vote == m.src or (self.vote is None and self.leader is None)
            granted = can_vote and up_to_date
            if granted:
                self.vote = m.src
                self._reset_timer()
        self._send(VoteResponse(self.group, self.id, m.src, m.term if granted else self.term, granted, m.pre_vote))

    def _handle_vote_response(self, m: VoteResponse) -> None:
        if m.pre_vote:
            if self.role is not Role.PRE_CANDIDATE or (m.granted and m.term != self.term + 1):
                return
        elif self.role is not Role.CANDIDATE:
            return
        self._votes[m.src] = m.granted
        result = self._tally()
        if result is True:
            self._won_round()
        elif result is False:
            self._failed_elections += 1
            self._become_follower(self.term, None)

    def _become_follower(self, term: int, leader: str | None) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
            self._ack_leader = None
            self._ack_match = self.commit  # committed entries agree with every later leader
            self._ack_sent = 0
        if self.role is Role.LEADER:
            self._abandon_leadership()
        self.leader = leader
        if leader is not None:
            self._heard_leader(leader)
        self._set_role(Role.FOLLOWER if self._promotable() else Role.LEARNER)
        self._reset_timer()

    def _heard_leader(self, leader: str) -> None:
        self.leader = leader
        self._since_leader = 0
        self._elapsed = 0
        self._failed_elections = 0
        if self.role in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            self._set_role(Role.FOLLOWER if self._promotable() else Role.LEARNER)
            self._reset_timer()
        if self._ack_leader != leader or self._ack_term != self.term:
            # Agreement is per (leader, term): the same node may lead a later term with a shorter log.
            self._ack_leader = leader
            self._ack_term = self.term
            self._ack_match = self.commit
            self._ack_sent = 0

    def _abandon_leadership(self) -> None:
        self._progress = {}
        self._transferee = None
        self._pending_reads.clear()
        self._reads_waiting_noop.clear()

    def _set_role(self, role: Role) -> None:
        if role is not self.role:
            self.role = role
        self._role_dirty = True

    def _become_leader(self) -> None:
        self._set_role(Role.LEADER)
        self.leader = self.id
        self._failed_elections = 0
        self._elapsed = 0
        self._hb_elapsed = 0
        self._hb_phase_pending = True
        self._since_leader = 0
        last = self._log.last_index()
        self._progress = {p: _Progress(next=last + 1) for p in sorted(self.config.members) if p != self.id}
        for pr in self._progress.values():
            pr.recent_active = True  # give everyone one election timeout before check-quorum counts
        self._noop_index = last + 1
        self._conf_pending = last + 1  # no config change before the no-op commits (Ongaro's single-server fix)
        self._append_own([Entry(self.term, last + 1, NOOP, b"")])

    # --- replication: leader side ---------------------------------------------------------------------

    def _append_own(self, entries: list[Entry]) -> None:
        """Leader appends to its log, queues the durable write and pipelines to followers at once."""
        self._log.append(entries)
        self._out_entries.extend(entries)
        for e in entries:
            if e.kind is CONFIG:
                self._config_appended(e)
        for peer, pr in self._progress.items():
            self._send_append(peer, pr)

    def _send_append(self, peer: str, pr: _Progress, *, allow_empty: bool = False) -> None:
        """Send as much as the peer's mode and in-flight bounds allow."""
        log = self._log
        opts = self.opts
        last = log.last_index()
        while True:
            if pr.state is PeerState.SNAPSHOT:
                return
            if pr.state is PeerState.PROBE:
                if pr.paused:
                    return
            elif len(pr.inflight) >= opts.max_inflight_msgs or pr.inflight_bytes >= opts.max_inflight_bytes:
                return
            prev = pr.next - 1
            prev_term = log.term_at(prev)
            if prev_term is None:  # compacted away: only a tablet copy helps now
                pr.reset(PeerState.SNAPSHOT, pr.next)
                self._out_needs_snapshot.append(NeedsSnapshot(peer, self.snapshot_meta()))
                return
            if pr.next > last:
                if not allow_empty:
                    return
                entries: list[Entry] = []
            elif pr.next < log.cached_from():  # evicted from memory: from the stash, or read from the WAL
                if not self._send_evicted(peer, pr, prev, prev_term):
                    return
                allow_empty = False
                continue
            else:
                if pr.stash:
                    pr.stash.clear()  # caught up with what is in memory: read-back leftovers are done
                entries = log.slice_limited(pr.next, opts.max_msg_bytes)
            size = log.bytes_between(pr.next, pr.next + len(entries)) if entries else 0
            if not self._ship(peer, pr, prev, prev_term, entries, size):
                return
            allow_empty = False

    def _send_evicted(self, peer: str, pr: _Progress, prev: int, prev_term: int) -> bool:
        """Send entries evicted from memory: stashed ones at once, else ask the driver to read them from
        the WAL. True when the pipeline may send more behind them."""
        opts = self.opts
        entries = pr.from_stash(opts.max_msg_bytes)
        if entries:  # read back a moment ago (a probe round or a full pipeline left them over)
            return self._ship(peer, pr, prev, prev_term, entries, entries_bytes(entries))
        if pr.reading:
            return False
        # One read fills the pipeline (one message's worth while probing), so catching up from the WAL
        # runs at the pipeline's pace, not one message per disk read; while the pipeline is more than
        # half full the read waits (acks call back here).
        if pr.state is PeerState.REPLICATE and (
            2 * len(pr.inflight) > opts.max_inflight_msgs or 2 * pr.inflight_bytes > opts.max_inflight_bytes
        ):
            return False
        room = 1 if pr.state is PeerState.PROBE else opts.max_inflight_msgs - len(pr.inflight)
        budget = min(room * opts.max_msg_bytes, opts.max_inflight_bytes - pr.inflight_bytes)
        pr.reading = pr.next
        last = self._log.cached_from() - 1
        self._out_log_reads.append(LogRead(peer, pr.next, last, max(budget, opts.max_msg_bytes), max(1, room)))
        return False

    def _ship(self, peer: str, pr: _Progress, prev: int, prev_term: int, entries: list[Entry], size: int) -> bool:
        """Send one AppendRequest of ``size`` bytes; True when the pipeline may send more behind it."""
        self._out_msgs.append(
            AppendRequest(self.group, self.id, peer, self.term, prev, prev_term, self.commit, tuple(entries))
        )
        if pr.state is PeerState.PROBE:
            pr.paused = True
            return False
        if not entries:
            return False
        sent_last = prev + len(entries)
        pr.inflight.append((sent_last, size))
        pr.inflight_bytes += size
        pr.next = sent_last + 1
        return True

    def log_read(self, peer: str, lo: int, entries: list[Entry]) -> None:
        """The driver read entries from ``lo`` back from the WAL for ``peer`` (as ``log_reads`` asked)."""
        pr = self._progress.get(peer)
        if self.role is not Role.LEADER or pr is None or pr.reading != lo:
            return  # an answer nobody waits for any more (new term, peer reset or removed)
        pr.reading = 0
        if pr.state is PeerState.SNAPSHOT or pr.next != lo:
            self._send_append(peer, pr)
            return
        log = self._log
        prev_term = log.term_at(lo - 1)
        if (
            not entries
            or prev_term is None
            or entries[0].index != lo
            or entries[-1].index != lo + len(entries) - 1
            or log.term_at(entries[0].index) != entries[0].term
            or log.term_at(entries[-1].index) != entries[-1].term
        ):
            self._need_copy(peer, pr)
            return
        pr.stash = list(entries)
        self._send_append(peer, pr)  # ships them from the stash as the pipeline has room

    def log_read_failed(self, peer: str, lo: int) -> None:
        """The WAL no longer holds the entries from ``lo`` that ``peer`` needs: it needs a tablet copy."""
        pr = self._progress.get(peer)
        if self.role is Role.LEADER and pr is not None and pr.reading == lo:
            self._need_copy(peer, pr)

    def _need_copy(self, peer: str, pr: _Progress) -> None:
        pr.reset(PeerState.SNAPSHOT, pr.next)
        self._out_needs_snapshot.append(NeedsSnapshot(peer, self.snapshot_meta()))

    def _broadcast_heartbeat(self) -> None:
        seq = self._read_seq
        for peer in self._progress:
            self._out_msgs.append(Heartbeat(self.group, self.id, peer, self.term, self.commit, seq, self._ticks))

    def _handle_append_response(self, m: AppendResponse) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self._progress.get(m.src)
        if pr is None:
            return
        pr.recent_active = True
        if m.success:
            if m.match > pr.match:
                pr.match = m.match
                pr.free_to(m.match)
                if pr.next <= m.match:
                    pr.next = m.match + 1
                self._maybe_commit()
                if self.role is not Role.LEADER:
                    return
            if pr.state is PeerState.PROBE:
                pr.reset(PeerState.REPLICATE, max(pr.next, pr.match + 1) if pr.paused else pr.match + 1)
            elif pr.state is PeerState.SNAPSHOT and pr.match >= self._log.snapshot_index:
                pr.reset(PeerState.PROBE, pr.match + 1)
            if m.src == self._transferee and pr.match == self._log.last_index():
                self._send_timeout_now(m.src)
            self._send_append(m.src, pr)
            return
        # Rejected: stale if it is about a point we already know matches.
        if m.rejected_prev < pr.match:
            return
        if pr.state is PeerState.SNAPSHOT:
            return
        # Kudu: jump straight back to the follower's committed index (it agrees with every leader);
        # if its log is simply too short, resume after its last entry.
        target = m.last_index + 1 if m.last_index < m.rejected_prev else m.committed + 1
        target = min(max(target, pr.match + 1), self._log.last_index() + 1)
        if pr.state is PeerState.PROBE and pr.next <= target and m.rejected_prev != pr.next - 1:
            return  # an older probe's answer; the current one is still out
        pr.reset(PeerState.PROBE, target)
        self._send_append(m.src, pr, allow_empty=True)

    def _handle_heartbeat_response(self, m: HeartbeatResponse) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self._progress.get(m.src)
        if pr is None:
            return
        pr.recent_active = True
        if m.sent_tick > pr.lease_tick:
            pr.lease_tick = m.sent_tick
        if m.match > pr.match:
            pr.match = m.match
            pr.free_to(m.match)
            pr.next = max(pr.next, m.match + 1)
            self._maybe_commit()
            if self.role is not Role.LEADER:
                return
        if m.read_seq > pr.read_ack:
            pr.read_ack = m.read_seq
            self._release_reads()
        if pr.state is PeerState.PROBE:
            pr.paused = False
        elif pr.state is PeerState.REPLICATE and m.accepted < pr.next - 1:
            # Something we pipelined never arrived (or is still on the way): fall back to probing.
            if not pr.inflight or m.accepted < pr.inflight[0][0]:
                pr.reset(PeerState.PROBE, max(pr.match, m.accepted) + 1)
        elif pr.state is PeerState.SNAPSHOT and m.match >= self._log.snapshot_index:
            pr.reset(PeerState.PROBE, m.match + 1)
        if m.src == self._transferee and pr.match == self._log.last_index():
            self._send_timeout_now(m.src)
        if pr.match < self._log.last_index():
            self._send_append(m.src, pr, allow_empty=pr.state is PeerState.PROBE)
        elif m.accepted < pr.match and pr.state is not PeerState.SNAPSHOT:
            # The follower restarted: its log still holds what it acked, but it no longer knows that the
            # log agrees with ours, so it cannot advance its commit index. With nothing new to send, a
            # probe at our match point re-establishes the agreement.
            if pr.state is PeerState.REPLICATE:
                pr.reset(PeerState.PROBE, pr.match + 1)
            self._send_append(m.src, pr, allow_empty=True)

    def _release_reads(self) -> None:
        voters = self.config.voters
        acks = [self._read_seq if self.id in voters else 0]
        acks += [pr.read_ack for p, pr in self._progress.items() if p in voters]
        acks.sort(reverse=True)
        q = self.config.quorum()
        if len(acks) < q:
            return
        confirmed = acks[q - 1]
        while self._pending_reads and self._pending_reads[0][0] <= confirmed:
            _, ctx, index = self._pending_reads.popleft()
            self._out_reads.append(ReadState(ctx, index))

    def _maybe_commit(self) -> None:
        """Advance commit to the highest index durable on a majority of voters, own term only (Fig. 8).
        The leader counts only once its own write is durable; a majority without it suffices."""
        voters = self.config.voters
        matches = [self._log.stable] if self.id in voters else []
        matches += [pr.match for p, pr in self._progress.items() if p in voters]
        q = self.config.quorum()
        if len(matches) < q:
            return
        matches.sort(reverse=True)
        candidate = matches[q - 1]
        if candidate <= self.commit or self._log.term_at(candidate) != self.term:
            return
        self.commit = candidate
        if self._reads_waiting_noop and candidate >= self._noop_index:
            waiting, self._reads_waiting_noop = self._reads_waiting_noop, []
            for ctx in waiting:
                self._start_read(ctx, False)
        if self.id not in self.config.voters and self._conf_pending <= self.commit:
            self._become_follower(self.term, None)  # we removed ourselves and that is now committed

    # --- replication: follower side -------------------------------------------------------------------

    def _handle_append(self, m: AppendRequest) -> None:
        if self.role is Role.LEADER:
            raise AssertionError(f"two leaders in term {self.term}: {self.id} and {m.src}")
        self._heard_leader(m.src)
        log = self._log
        prev, entries = m.prev_index, m.entries
        if prev < log.snapshot_index:
            # The head of this batch is compacted here, hence committed and identical: skip it.
            skip = log.snapshot_index - prev
            if skip >= len(entries):
                self._accept(m.src, prev + len(entries), m.commit, immediate=True)
                return
            entries = entries[skip:]
            prev = log.snapshot_index
            prev_term: int | None = log.snapshot_term
        else:
            prev_term = m.prev_term
        if log.term_at(prev) != prev_term:
            self._send(
                AppendResponse(self.group, self.id, m.src, self.term, False, 0, log.last_index(), self.commit, prev)
            )
            return
        last = log.last_index()
        if entries:
            if entries[0].index == last + 1:
                new: tuple[Entry, ...] = entries
            else:
                new = ()
                for k, e in enumerate(entries):
                    t = log.term_at(e.index)
                    if t is None:
                        new = entries[k:]
                        break
                    if t != e.term:
                        if e.index <= self.commit:
                            raise AssertionError(f"{self.id}: leader {m.src} overwrites committed index {e.index}")
                        self._truncate_after(e.index - 1)
                        new = entries[k:]
                        break
            if new:
                log.append(new)
                self._out_entries.extend(new)
                for e in new:
                    if e.kind is CONFIG:
                        self._config_appended(e)
        self._accept(m.src, prev + len(entries), m.commit, immediate=not entries)

    def _truncate_after(self, index: int) -> None:
        self._log.truncate_after(index)
        self._ack_match = min(self._ack_match, index)
        out = self._out_entries
        if out and out[0].index <= index + 1:
            del out[max(0, index + 1 - out[0].index) :]
        if not out or out[0].index > index + 1:
            self._out_truncate = index if self._out_truncate is None else min(self._out_truncate, index)
        if self._configs and self._configs[-1][0] > index:
            while self._configs and self._configs[-1][0] > index:
                self._configs.pop()
            self._set_config(self._configs[-1][1] if self._configs else self._snap_config)

    def _accept(self, leader: str, matched: int, leader_commit: int, *, immediate: bool) -> None:
        if matched > self._ack_match:
            self._ack_match = matched
        new_commit = min(leader_commit, self._ack_match)
        if new_commit > self.commit:
            self.commit = new_commit
        if immediate:
            ack = min(self._ack_match, self._log.stable)
            self._ack_sent = max(self._ack_sent, ack)
            self._send(
                AppendResponse(
                    self.group, self.id, leader, self.term, True, ack, self._log.last_index(), self.commit, 0
                )
            )
        else:
            self._maybe_send_ack()

    def _maybe_send_ack(self) -> None:
        """Send the deferred ack once our agreed entries are durable (never before: Kudu commits on it)."""
        leader = self._ack_leader
        if leader is None or leader != self.leader or self._ack_term != self.term or self.role is Role.LEADER:
            return
        ack = min(self._ack_match, self._log.stable)
        if ack > self._ack_sent:
            self._ack_sent = ack
            self._send(
                AppendResponse(
                    self.group, self.id, leader, self.term, True, ack, self._log.last_index(), self.commit, 0
                )
            )

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        if self.role is Role.LEADER:
            raise AssertionError(f"two leaders in term {self.term}: {self.id} and {m.src}")
        self._heard_leader(m.src)
        new_commit = min(m.commit, self._ack_match)
        if new_commit > self.commit:
            self.commit = new_commit
        ack = min(self._ack_match, self._log.stable)
        self._ack_sent = max(self._ack_sent, ack)
        self._send(
            HeartbeatResponse(self.group, self.id, m.src, self.term, ack, self._ack_match, m.read_seq, m.sent_tick)
        )

    # --- configuration --------------------------------------------------------------------------------

    def _config_appended(self, e: Entry) -> None:
        cfg = Config.decode(e.payload)
        self._configs.append((e.index, cfg))
        self._set_config(cfg)

    def _set_config(self, cfg: Config) -> None:
        self.config = cfg
        if self.role is Role.LEADER:
            last = self._log.last_index()
            for p in sorted(cfg.members):
                if p != self.id and p not in self._progress:
                    self._progress[p] = _Progress(next=last + 1, recent_active=True)
            for p in list(self._progress):
                if p not in cfg.members:
                    del self._progress[p]
            if self._transferee is not None and self._transferee not in cfg.voters:
                self._transferee = None
            self._maybe_commit()
        elif self.role in (Role.FOLLOWER, Role.LEARNER):
            self._set_role(Role.FOLLOWER if self._promotable() else Role.LEARNER)
        elif not self._promotable():
            self._become_follower(self.term, self.leader)

    def _send_timeout_now(self, peer: str) -> None:
        self._lease_void_until = self._ticks + 2 * self.opts.election_ticks
        self._send(TimeoutNow(self.group, self.id, peer, self.term))

    # --- plumbing -------------------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        self._out_msgs.append(m)

    def __repr__(self) -> str:
        return (
            f"RaftNode({self.id}/{self.group} {self.role.value} term={self.term} vote={self.vote} "
            f"commit={self.commit} last={self._log.last_index()} stable={self._log.stable})"
        )
