"""The asyncio driver of one Raft replica: the sans-IO core plus its WAL, metadata, peers and state machine.

It follows the core's Ready contract (see ``raft.py``): term and vote are made durable before any message
of the same Ready leaves; log writes start in order and run concurrently with sending (the leader ships
entries while its own fsync runs) and report back through ``persisted``; committed entries are applied
in order, and each resolves the proposal that produced it.

Files of a replica directory: ``cmeta`` (term, vote, commit, address book and compaction point) and
``wal/`` (the log). The state machine is pluggable: tablets and the master's system catalog both sit
behind the same ``StateMachine`` protocol, so consensus never imports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kudu_async.common.errors import (
    KuduAborted,
    KuduBadStatus,
    KuduCorruption,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotFound,
    KuduNotSupported,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTabletFailed,
    KuduTimedOut,
)
from kudu_async.consensus.consensus_meta import ConsensusMetadata
from kudu_async.consensus.log import MAX_ENTRY_BYTES, Log, LogEntry, LogOptions, LogWriter
from kudu_async.consensus.raft import (
    AppendResponse,
    Config,
    ConfigChangeOp,
    Entry,
    EntryKind,
    HardState,
    LogRead,
    Message,
    RaftNode,
    RaftOptions,
    Ready,
    SnapshotMeta,
)
from kudu_async.consensus.raft_messages import config_addresses
from kudu_async.consensus.transport import ConsensusTransport
from kudu_async.fs.io_util import atomic_write_bytes

log = logging.getLogger(__name__)


class StateMachine(Protocol):
    """What a replicated state machine offers its replica."""

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        """Apply one committed entry; the return value answers the proposer. Raising fails the replica."""
        ...

    def durable_index(self) -> int:
        """Entries up to here are durable in the state machine's own files (0: it needs the whole log)."""
        ...

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        """At restart, before any apply: committed (index, payload) entries the log still holds at or
        below ``durable_index``, which will not be applied again. For what the state machine keeps only in
        memory about them (a tablet: the results of exactly-once writes). Runs in a worker thread."""
        ...


class ReplicaState(enum.Enum):
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


@dataclass
class ReplicaOptions:
    raft: RaftOptions = field(default_factory=RaftOptions)
    fsync: bool = True
    use_fsync: bool = False  # fsync(2) instead of fdatasync(2) for WAL appends (LogOptions.use_fsync)
    segment_bytes: int = 8 * 1024 * 1024
    compression: str = "LZ4"  # the WAL's frame codec (log.WAL_CODECS)
    max_pending_proposals: int = 10_000
    max_retained_segments: int = 80  # beyond this, lagging peers need a tablet copy (Kudu's default)
    min_retained_segments: int = 1  # the newest segments always kept (Kudu's log_min_segments_to_retain)
    global_log_cache_bytes: int = 256 << 20  # all replicas' in-memory logs together (RaftManager splits it)
    gc_every_applied: int = 1000
    # Also look for log to collect this often (ticks) without new entries: a flush that made the
    # state machine durable frees the segments behind it even when writes have stopped.
    gc_check_ticks: int = 50
    commit_save_interval_s: float = 10.0


@dataclass
class _Proposal:
    payload: bytes
    future: asyncio.Future[Any]
    term: int = 0
    index: int = 0


class RaftReplica:
    """One replica of one Raft group on this node."""

    def __init__(
        self,
        group: str,
        node_uuid: str,
        directory: Path,
        state_machine: StateMachine,
        transport: ConsensusTransport,
        executor: Executor | None = None,
        options: ReplicaOptions | None = None,
        extra_meta: dict[str, Any] | None = None,
    ) -> None:
        self.group = group
        self.node_uuid = node_uuid
        self.dir = directory
        self.sm = state_machine
        self.transport = transport
        self.executor = executor
        self.options = options or ReplicaOptions()
        self.state = ReplicaState.INITIALIZING
        self.error: str | None = None
        self.peers: dict[str, str] = {}  # uuid -> RPC address: Raft configs name uuids only
        self.extra_meta: dict[str, Any] = dict(extra_meta or {})
        self.raft: RaftNode | None = None
        self.wal: Log | None = None
        self.writer: LogWriter | None = None
        self.last_contact: dict[str, float] = {}
        self._cmeta = ConsensusMetadata()
        # Held by the worker saving cmeta: saves share one temp file, and a save whose awaiting task was
        # cancelled (close() cancels the driver) runs on in its thread while close() saves again.
        self._cmeta_lock = threading.Lock()
        self._commit_saved_at = 0.0
        # Each record is numbered as it is taken on the loop; a worker writes it only if no later one is
        # on disk yet, so saves that finish out of order never put an older term or vote back.
        self._cmeta_seq = itertools.count(1)
        self._cmeta_written = 0
        self._background_save: asyncio.Future[None] | None = None
        self._queued: list[_Proposal] = []
        self._inflight: dict[int, _Proposal] = {}
        self._reads: dict[bytes, asyncio.Future[int]] = {}
        self._read_seq = 0
        self._wake = asyncio.Event()
        self._busy = False  # the driver is between taking a Ready and finishing it
        self._readies: list[Ready] = []  # taken by the inline path, waiting for the driver
        self._task: asyncio.Task[None] | None = None
        self._writes_in_flight = 0
        self.append_responses_sent: dict[str, int] = {}  # per peer: how many AppendResponses went out
        self._applied_since_gc = 0
        self._segments_at_gc = 0
        self._ticks_to_gc_check = self.options.gc_check_ticks
        self._gc_due = False
        self._snapshot_warned: set[str] = set()
        self.log_reads_done = 0  # WAL read-backs answered for lagging peers
        self._role_waiters: list[tuple[Callable[[RaftReplica], bool], asyncio.Future[None]]] = []
        # Set by the host: called when a peer needs a tablet copy (behind the retained log, or missing).
        self.on_peer_needs_copy: Callable[[str, str], None] | None = None
        # Set by the host: called after this replica's role, term or known leader changed.
        self.on_role_change: Callable[[], None] | None = None
        # Set by the host: whether its ticks keep up with real time now, so a lease counted in them holds.
        self.ticks_on_schedule: Callable[[], bool] = lambda: False
        self.gc_holds = 0
        self._closed = False

    @property
    def cmeta_path(self) -> Path:
        return self.dir / "cmeta"

    # --- opening --------------------------------------------------------------------------------------

    async def open(self, initial_peers: dict[str, str] | None = None) -> None:
        """Recover from disk, or create a new replica whose first config is ``initial_peers``.

        A damaged WAL or metadata file marks the replica FAILED (and raises), it never starts empty.
        """
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self._open_blocking, initial_peers)
        except KuduBadStatus as e:
            self._fail(f"cannot open replica: {e}")
            raise KuduTabletFailed(f"replica {self.group}: {e}") from e
        assert self.wal is not None
        self.writer = LogWriter(self.wal, self.executor)
        self.state = ReplicaState.RUNNING
        self._task = loop.create_task(self._drive(), name=f"raft {self.group}")

    def _open_blocking(self, initial_peers: dict[str, str] | None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        cmeta = ConsensusMetadata.load(self.cmeta_path)
        wal, report = Log.open(
            self.dir / "wal",
            LogOptions(
                self.options.segment_bytes, self.options.fsync, self.options.compression, self.options.use_fsync
            ),
        )
        self.wal = wal
        if report.truncated_tail_bytes:
            log.warning(
                "recovered WAL with a torn tail", extra={"group": self.group, "bytes": report.truncated_tail_bytes}
            )
        rng = random.Random(hash((self.node_uuid, self.group, time.time_ns())))
        if cmeta is None:
            if not initial_peers:
                raise KuduIllegalState(f"replica {self.group} has no metadata and no initial config")
            self.peers = dict(initial_peers)
            config = Config(frozenset(initial_peers))
            cmeta = ConsensusMetadata(
                0, None, 0, {"peers": self.peers, "snapshot": [0, 0, config.to_dict()], "extra": self.extra_meta}
            )
            cmeta.save(self.cmeta_path)
            self._cmeta = cmeta
            self.raft = RaftNode.bootstrap(self.node_uuid, self.group, config, options=self.options.raft, rng=rng)
            return
        self._cmeta = cmeta
        missing = {"peers", "extra", "snapshot"} - cmeta.config.keys()
        if missing:
            raise KuduCorruption(f"{self.cmeta_path}: consensus metadata lacks {sorted(missing)}")
        self.peers = dict(cmeta.config["peers"])
        self.extra_meta = dict(cmeta.config["extra"])
        snap_index, snap_term, snap_cfg = cmeta.config["snapshot"]
        snapshot = SnapshotMeta(int(snap_index), int(snap_term), Config.from_dict(snap_cfg))
        durable = self.sm.durable_index()
        done = min(max(durable, snapshot.index), wal.last_index)
        if wal.first_index <= done:
            self.sm.recall(
                [
                    (e.index, e.data)
                    for e in wal.read(wal.first_index, done)
                    if EntryKind(int(e.kind)) is EntryKind.NORMAL
                ]
            )
        start = max(wal.first_index, snapshot.index + 1)
        entries = (
            [Entry(e.term, e.index, EntryKind(int(e.kind)), e.data) for e in wal.read(start)]
            if start <= wal.last_index
            else []
        )
        self._learn_addresses(entries)
        self.raft = RaftNode.restart(
            self.node_uuid,
            self.group,
            HardState(cmeta.term, cmeta.voted_for, cmeta.commit_index),
            snapshot,
            entries,
            applied=max(durable, snapshot.index) if durable else None,
            options=self.options.raft,
            rng=rng,
        )
        if wal.first_index <= snapshot.index <= wal.last_index:
            # Entries the WAL keeps below the compaction point (for lagging peers) are not loaded: their
            # terms are enough to read them back when a peer asks.
            runs, terms = wal.term_runs(wal.first_index, snapshot.index)
            if terms[-1] == snapshot.term:
                self.raft.log_retained_terms(runs, terms)
            else:
                log.warning(
                    "WAL term at the compaction point differs; lagging peers will get a tablet copy",
                    extra={"group": self.group, "index": snapshot.index, "term": terms[-1], "expected": snapshot.term},
                )
        log.info(
            "replica recovered",
            extra={"group": self.group, "term": cmeta.term, "entries": len(entries), "snapshot_index": snapshot.index},
        )

    # --- inputs ---------------------------------------------------------------------------------------

    def tick(self, node_tick: int | None = None) -> None:
        raft = self.raft
        if raft is None or self.state is not ReplicaState.RUNNING:
            return
        if raft.tick(node_tick):
            self._after_input(raft)
        self._ticks_to_gc_check -= 1
        if self._ticks_to_gc_check <= 0:
            self._ticks_to_gc_check = self.options.gc_check_ticks
            self._gc_due = True
            self._wake.set()

    def receive(self, message: Message) -> None:
        """A message from a peer (already decoded and validated by the transport layer)."""
        if self.state is not ReplicaState.RUNNING or self.raft is None:
            return
        self.last_contact[message.src] = time.monotonic()
        self.raft.step(message)
        self._after_input(self.raft)

    def _after_input(self, raft: RaftNode) -> None:
        """Handle a Ready that needs no I/O at once; wake the driver for anything else.

        Idle groups only trade heartbeats: sending them inline, instead of waking a driver task per
        message, is what keeps hundreds of idle replicas cheap. It is only done while the driver is idle,
        so Readies are still handled strictly in order.
        """
        if not raft.has_ready():
            return
        if self._busy or self._readies:
            self._wake.set()
            return
        rd = raft.ready()
        if rd.snapshot is None and rd.hard_state is None and not rd.entries and not rd.committed:
            self._handle_after_io(rd)
            self._notify_waiters()
        else:
            self._readies.append(rd)
            self._wake.set()

    def _require_running(self) -> RaftNode:
        if self.state is not ReplicaState.RUNNING or self.raft is None:
            if self.state is ReplicaState.FAILED:
                raise KuduTabletFailed(f"replica {self.group} is FAILED: {self.error}")
            raise KuduServiceUnavailable(f"replica {self.group} is {self.state.value}")
        return self.raft

    def leader_hint(self) -> dict[str, Any]:
        raft = self.raft
        leader = raft.leader if raft is not None else None
        return {
            "group": self.group,
            "leader": leader,
            "leader_address": self.peers.get(leader or ""),
            "term": raft.term if raft is not None else 0,
        }

    async def replicate(self, payload: bytes, timeout_s: float = 10.0) -> Any:
        """Replicate ``payload``; returns what the state machine's ``apply`` returned for it.

        Raises NOT_THE_LEADER (with the known leader in details), ABORTED (lost to a new leader),
        SERVICE_UNAVAILABLE (too many pending) or TIMED_OUT.
        """
        return (await self.replicate_many([payload], timeout_s))[0]

    async def replicate_many(self, payloads: list[bytes], timeout_s: float = 10.0) -> list[Any]:
        """Replicate several entries proposed together (one Raft append); results in order.

        Each entry commits on its own; if one fails the call raises, and the others may still commit,
        exactly as separate calls would.
        """
        futures = self.propose(payloads)
        if not futures:
            return []
        # One waiter for all (a shield and a gather slot per entry cost ~1.6 us each); neither a timeout
        # nor the caller's cancellation cancels the proposals, which stay tracked until they are settled.
        _, pending = await asyncio.wait(futures, timeout=timeout_s)
        if pending:
            raise KuduTimedOut(f"replicating to {self.group} did not commit within {timeout_s:.1f}s")
        errors = [f.exception() for f in futures]  # every one retrieved, the first raised
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return [f.result() for f in futures]

    def propose(self, payloads: list[bytes]) -> list[asyncio.Future[Any]]:
        """Queue entries for replication now, in call order; each future resolves as ``replicate`` would.

        For callers that must fix the order of proposals synchronously (a tablet assigns timestamps in
        log order) and follow each entry's fate even after they stop waiting for it.
        """
        raft = self._require_running()
        if not raft.is_leader:
            raise KuduNotTheLeader(f"replica {self.node_uuid} of {self.group} is not the leader", self.leader_hint())
        if len(self._queued) + len(self._inflight) + len(payloads) > self.options.max_pending_proposals:
            raise KuduServiceUnavailable(f"replica {self.group}: too many pending proposals")
        for p in payloads:
            if len(p) > MAX_ENTRY_BYTES:  # the log could not store it: refuse it here, not fail the WAL
                raise KuduInvalidArgument(
                    f"replica {self.group}: an entry of {len(p)} bytes is over the "
                    f"{MAX_ENTRY_BYTES}-byte limit of a log entry"
                )
        loop = asyncio.get_running_loop()
        props = [_Proposal(p, loop.create_future()) for p in payloads]
        self._queued.extend(props)
        self._wake.set()
        return [p.future for p in props]

    def is_leader_ready(self) -> bool:
        """Leader whose own term's first entry is applied: every earlier entry is applied too, so the
        state machine has seen everything a new proposal must be ordered after."""
        raft = self.raft
        return (
            self.state is ReplicaState.RUNNING
            and raft is not None
            and raft.is_leader
            and raft.applied_index >= raft.commit
            and raft.log.term_at(raft.applied_index) == raft.term
        )

    async def read_index(self, timeout_s: float = 10.0, use_lease: bool = True) -> int:
        """A linearizable read point: once ``applied >= `` the returned index, reads see every commit."""
        raft = self._require_running()
        use_lease = use_lease and self.ticks_on_schedule()
        if use_lease:
            index = raft.lease_read_index()
            if index is not None:
                return index  # no future, no driver wake-up: the common case of a READ_LATEST scan
        self._read_seq += 1
        ctx = self._read_seq.to_bytes(8, "big")
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._reads[ctx] = fut
        try:
            raft.read_index(ctx, use_lease=use_lease)
        except KuduBadStatus:
            self._reads.pop(ctx, None)
            raise
        self._wake.set()
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise KuduTimedOut(f"read index on {self.group} timed out") from None
        finally:
            self._reads.pop(ctx, None)

    def void_lease(self) -> None:
        """The host's ticks stopped while time went on: acks counted in them are older than they look."""
        if self.raft is not None:
            self.raft.void_lease()

    def campaign(self) -> None:
        self._require_running().campaign()
        self._wake.set()

    def step_down(self) -> None:
        self._require_running().step_down()
        self._wake.set()

    def transfer_leadership(self, peer: str) -> None:
        self._require_running().transfer_leadership(peer)
        self._wake.set()

    async def change_config(self, op: ConfigChangeOp, peer: str, address: str | None, timeout_s: float = 30.0) -> int:
        """One-server config change through the log; returns once it is committed."""
        raft = self._require_running()
        if address:
            self.peers[peer] = address
        # The entry carries every member's address, so followers (and whoever leads next) can reach a
        # server they never heard of, and report it.
        addresses = {u: self.peers[u] for u in sorted(raft.config.members | {peer}) if u in self.peers}
        index = raft.propose_config_change(op, peer, addresses)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[index] = _Proposal(b"", fut, raft.term, index)
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            raise KuduTimedOut(f"config change on {self.group} did not commit within {timeout_s:.1f}s") from None
        return index

    async def unsafe_change_config(self, keep: frozenset[str], timeout_s: float = 10.0) -> dict[str, Any]:
        """Force this replica's config to the members of its committed config named in ``keep`` (see
        ``RaftNode.unsafe_change_config``); returns once the new config's entry and term are durable, so
        the change survives a restart. The answer names the entry's index, the term and the role now."""
        raft = self._require_running()
        before = raft.committed_config()
        addresses = {u: self.peers[u] for u in sorted(keep & before.members) if u in self.peers}
        index = raft.unsafe_change_config(keep, addresses)
        log.warning(
            "UNSAFE config change forced on this replica",
            extra={
                "group": self.group,
                "old_voters": sorted(before.voters),
                "new_voters": sorted(raft.config.voters),
                "index": index,
                "term": raft.log.term_at(index),
            },
        )
        self._wake.set()
        await self.wait_for(
            lambda r: r.state is not ReplicaState.RUNNING or (r.raft is not None and r.raft.stable_index >= index),
            timeout_s,
        )
        raft = self._require_running()
        return {
            "config_index": index,
            "term": raft.term,
            "role": raft.role.value,
            "voters": sorted(raft.config.voters),
            "learners": sorted(raft.config.learners),
        }

    async def wait_for(self, predicate: Callable[[RaftReplica], bool], timeout_s: float) -> None:
        """Wait until ``predicate(self)`` holds after some Ready (role, commit ... changes)."""
        if predicate(self):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._role_waiters.append((predicate, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise KuduTimedOut(f"replica {self.group}: condition not reached within {timeout_s}s") from None

    async def wait_append_responses(self, peer: str, count: int, timeout_s: float) -> None:
        """Until ``count`` AppendResponses in all have gone to ``peer`` (the ones owed for appends just
        received go out once their entries are durable), this replica has nothing left under way (a
        message it ignored owes no answer), it stops, or ``timeout_s`` passes (then no error: the
        responses still go out, in a call of their own)."""

        def answered(r: RaftReplica) -> bool:
            return (
                r.append_responses_sent.get(peer, 0) >= count
                or r.state is not ReplicaState.RUNNING
                or (
                    not r._busy
                    and not r._readies
                    and r._writes_in_flight == 0
                    and (r.raft is None or not r.raft.has_ready())
                )
            )

        with contextlib.suppress(KuduTimedOut):
            await self.wait_for(answered, timeout_s)

    # --- the driver loop ------------------------------------------------------------------------------

    async def _drive(self) -> None:
        try:
            while self.state is ReplicaState.RUNNING:
                await self._wake.wait()
                self._wake.clear()
                raft = self.raft
                assert raft is not None
                self._busy = True
                try:
                    if self._queued:
                        self._propose_queued(raft)
                    while self.state is ReplicaState.RUNNING and (self._readies or raft.has_ready()):
                        await self._handle(self._readies.pop(0) if self._readies else raft.ready())
                    if self._gc_due and self.state is ReplicaState.RUNNING:
                        self._gc_due = False
                        await self._maybe_gc()
                finally:
                    self._busy = False
                self._notify_waiters()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("replica driver failed", extra={"group": self.group})
            self._fail(f"driver failed: {type(e).__name__}: {e}")

    def _propose_queued(self, raft: RaftNode) -> None:
        batch, self._queued = self._queued, []
        try:
            last = raft.propose_batch([p.payload for p in batch])
        except KuduBadStatus as e:
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(type(e)(e.message, {**e.details, **self.leader_hint()}))
            return
        first = last - len(batch) + 1
        for i, p in enumerate(batch):
            p.term, p.index = raft.term, first + i
            self._inflight[p.index] = p

    async def _handle(self, rd: Ready) -> None:
        raft = self.raft
        assert raft is not None and self.writer is not None
        if rd.snapshot is not None:
            raise KuduNotSupported("installing a snapshot needs tablet copy, which this replica host lacks")
        if rd.hard_state is not None:
            await self._persist_hard_state(rd.hard_state)
        if rd.entries:
            self._learn_addresses(rd.entries)
            self._start_log_write(rd.entries)
        for m in rd.messages:
            self._send(m)
        if rd.committed:
            await self._apply(rd.committed)
        self._handle_after_io(rd, messages_sent=True)

    def _handle_after_io(self, rd: Ready, messages_sent: bool = False) -> None:
        """The parts of a Ready that need no disk: messages (unless sent already), reads, notices, role."""
        if not messages_sent:
            for m in rd.messages:
                self._send(m)
        for rs in rd.read_states:
            fut = self._reads.get(rs.ctx)
            if fut is not None and not fut.done():
                fut.set_result(rs.index)
        for lr in rd.log_reads:
            self._start_log_read(lr)
        for ns in rd.needs_snapshot:
            if ns.peer not in self._snapshot_warned:
                self._snapshot_warned.add(ns.peer)
                log.warning(
                    "peer is behind the retained log and needs a tablet copy",
                    extra={"group": self.group, "peer": ns.peer, "snapshot_index": ns.snapshot.index},
                )
            self.peer_needs_copy(ns.peer)
        if rd.role is not None:
            log.info(
                "raft role change",
                extra={"group": self.group, "role": rd.role.role.value, "term": rd.role.term, "leader": rd.role.leader},
            )
            if self.on_role_change is not None:
                self.on_role_change()

    def _start_log_read(self, lr: LogRead) -> None:
        """Read entries a lagging peer needs back from the WAL in a worker; the core gets them (or hears
        that the WAL lost them) on the loop once the read is done."""
        wal, raft = self.wal, self.raft
        assert wal is not None and raft is not None
        try:
            fut = asyncio.get_running_loop().run_in_executor(
                self.executor, wal.read_limited, lr.lo, lr.hi, lr.max_bytes, lr.min_entries
            )
        except RuntimeError:  # the executor is shut down: the node is stopping, the peer waits for a leader
            return

        def done(f: asyncio.Future[list[LogEntry]]) -> None:
            if self.state is not ReplicaState.RUNNING or self.raft is not raft:
                if not f.cancelled():
                    f.exception()  # retrieved: nobody waits for this read any more
                return
            error = KuduAborted("log read cancelled") if f.cancelled() else f.exception()
            if isinstance(error, KuduNotFound):  # collected meanwhile: only a tablet copy helps now
                raft.log_read_failed(lr.peer, lr.lo)
            elif error is not None:
                log.error("reading the WAL back failed", extra={"group": self.group, "error": str(error)})
                self._fail(f"reading log entries from {lr.lo} failed: {error}")
                return
            else:
                self.log_reads_done += 1
                raft.log_read(
                    lr.peer, lr.lo, [Entry(e.term, e.index, EntryKind(int(e.kind)), e.data) for e in f.result()]
                )
            self._after_input(raft)

        fut.add_done_callback(done)

    def log_cache_bytes(self) -> int:
        """Bytes of log entries held in memory for this replica (the rest are read back from the WAL)."""
        return self.raft.log_memory_bytes() if self.raft is not None else 0

    async def _persist_hard_state(self, hs: HardState) -> None:
        cm = self._cmeta
        must_sync = hs.term != cm.term or hs.vote != cm.voted_for
        now = time.monotonic()
        if not must_sync:
            # Only the commit index moved: it can be recomputed, so it is saved lazily and off the
            # driver's path (awaited, the save's fsyncs would delay the commit of the next write of every
            # group written less often than once per save interval: most groups of a node with many).
            if now - self._commit_saved_at >= self.options.commit_save_interval_s and self._background_save is None:
                cm.commit_index = hs.commit
                self._save_cmeta_config()
                self._commit_saved_at = now
                self._start_background_save()
            return
        cm.term, cm.voted_for, cm.commit_index = hs.term, hs.vote, hs.commit
        self._save_cmeta_config()
        self._commit_saved_at = now
        await self._save_cmeta()

    def _cmeta_record(self) -> tuple[int, bytes]:
        """The consensus metadata as it is now, numbered (on the loop: no torn read of term and vote)."""
        return next(self._cmeta_seq), self._cmeta.to_bytes()

    async def _save_cmeta(self) -> None:
        seq, data = self._cmeta_record()
        await asyncio.get_running_loop().run_in_executor(self.executor, self._write_cmeta_record, seq, data)

    def _start_background_save(self) -> None:
        seq, data = self._cmeta_record()
        try:
            fut = asyncio.get_running_loop().run_in_executor(self.executor, self._write_cmeta_record, seq, data)
        except RuntimeError:  # the executor is shut down: the node is stopping and close() saves
            return
        self._background_save = fut

        def done(f: asyncio.Future[None]) -> None:
            if self._background_save is f:
                self._background_save = None
            error = None if f.cancelled() else f.exception()
            if error is not None:
                self._fail(f"saving consensus metadata failed: {error}")

        fut.add_done_callback(done)

    def _learn_addresses(self, entries: Sequence[Entry]) -> None:
        """Member addresses from CONFIG entries (appended here, or replayed from the WAL)."""
        for e in entries:
            if e.kind is EntryKind.CONFIG:
                self.peers.update(config_addresses(e.payload))

    def _write_cmeta(self) -> None:
        """Save the consensus metadata as it is when the write starts (in a worker), one save at a time."""
        self._write_cmeta_record(*self._cmeta_record())

    def _write_cmeta_record(self, seq: int, data: bytes) -> None:
        """Write a record taken by ``_cmeta_record`` (in a worker) unless a later one is already written."""
        with self._cmeta_lock:
            if seq <= self._cmeta_written:
                return
            atomic_write_bytes(self.cmeta_path, data)
            self._cmeta_written = seq

    def _save_cmeta_config(self) -> None:
        raft = self.raft
        assert raft is not None
        snap = raft.snapshot_meta()
        self._cmeta.config = {
            "peers": dict(self.peers),
            "snapshot": [snap.index, snap.term, snap.config.to_dict()],
            "extra": self.extra_meta,
        }

    def _start_log_write(self, entries: tuple[Entry, ...]) -> None:
        assert self.writer is not None
        last = entries[-1]
        self._writes_in_flight += 1

        def durable(error: BaseException | None) -> None:
            # Called as the write completes, not a loop iteration later through the future's callbacks.
            self._writes_in_flight -= 1
            if error is not None:
                self._fail(f"WAL write failed: {error}")
                return
            if self.state is ReplicaState.RUNNING and self.raft is not None:
                try:
                    self.raft.persisted(last.index, last.term)
                except Exception as e:  # the Raft core refusing its own log's progress is fatal for it
                    log.exception("raft refused a durable append", extra={"group": self.group})
                    self._fail(f"persisting up to {last.index} failed: {type(e).__name__}: {e}")
                    return
                self._wake.set()

        self.writer.submit([LogEntry(e.term, e.index, int(e.kind), e.payload) for e in entries], durable)

    def _send(self, m: Message) -> None:
        if type(m) is AppendResponse:
            self.append_responses_sent[m.dst] = self.append_responses_sent.get(m.dst, 0) + 1
        address = self.peers.get(m.dst)
        if address is None:
            log.warning("no address for raft peer; dropping message", extra={"group": self.group, "peer": m.dst})
            return
        size = 64 + sum(len(e.payload) + 24 for e in getattr(m, "entries", ()))
        self.transport.send(m.dst, address, m.to_dict(), size)

    async def _apply(self, committed: tuple[Entry, ...]) -> None:
        raft = self.raft
        assert raft is not None
        for e in committed:
            result: Any = None
            if e.kind is EntryKind.NORMAL:
                try:
                    result = await self.sm.apply(e.index, e.term, e.payload)
                except Exception as exc:  # the state machine diverging is fatal for this replica
                    log.exception("state machine apply failed", extra={"group": self.group, "index": e.index})
                    self._fail(f"apply of index {e.index} failed: {type(exc).__name__}: {exc}")
                    return
            elif e.kind is EntryKind.CONFIG:
                self._save_cmeta_config()
            prop = self._inflight.pop(e.index, None)
            if prop is not None and not prop.future.done():
                if prop.term == e.term:
                    prop.future.set_result(result)
                else:
                    prop.future.set_exception(
                        KuduAborted(
                            f"entry {e.index} of {self.group} was replaced by a new leader's entry", self.leader_hint()
                        )
                    )
        raft.applied(committed[-1].index)
        self._applied_since_gc += len(committed)
        segments = self.wal.num_segments if self.wal is not None else 0
        # Every N entries, or when the log rolled a segment (large entries: few of them fill a segment).
        if self._applied_since_gc >= self.options.gc_every_applied or segments > self._segments_at_gc:
            self._applied_since_gc = 0
            await self._maybe_gc()
            self._segments_at_gc = self.wal.num_segments if self.wal is not None else 0

    async def _maybe_gc(self) -> None:
        """Drop log segments the state machine has made durable and no peer still needs.

        Runs after applies and every ``gc_check_ticks``: a segment kept for a peer that has caught up
        since, or behind a flush that came after the last write, is collected without new entries."""
        raft, wal = self.raft, self.wal
        assert raft is not None and wal is not None
        if self.gc_holds:
            return  # a tablet copy is capturing the log and compaction point
        loop = asyncio.get_running_loop()
        durable = min(self.sm.durable_index(), raft.applied_index)
        if durable > raft.snapshot_meta().index:
            raft.compact(durable, keep_terms_from=wal.first_index)  # what the WAL still has stays readable
            self._save_cmeta_config()
            await self._save_cmeta()  # compaction point first
        compacted = raft.snapshot_meta().index
        segments = wal.segment_info()
        retain_from = min(compacted + 1, raft.retention_index())  # what lagging followers still need
        if len(segments) > self.options.max_retained_segments:
            retain_from = compacted + 1  # past the retention cap: lagging peers get a tablet copy instead
        if len(segments) <= self.options.min_retained_segments or segments[0]["last_index"] >= retain_from:
            return  # not one whole segment to drop
        await loop.run_in_executor(self.executor, wal.gc, retain_from, self.options.min_retained_segments)
        raft.log_retained_from(wal.first_index)

    def peer_needs_copy(self, peer: str) -> None:
        """Ask the host to copy this replica to ``peer`` (only a leader does; the host rate-limits)."""
        raft = self.raft
        if self.on_peer_needs_copy is None or raft is None or not raft.is_leader or peer not in raft.config.members:
            return
        address = self.peers.get(peer)
        if address is not None:
            self.on_peer_needs_copy(peer, address)

    def notify(self) -> None:
        """Re-check ``wait_for`` conditions after a change outside Raft (e.g. the state machine's)."""
        self._notify_waiters()

    def _notify_waiters(self) -> None:
        if not self._role_waiters:
            return
        keep = []
        for pred, fut in self._role_waiters:
            if fut.done():
                continue
            if pred(self):
                fut.set_result(None)
            else:
                keep.append((pred, fut))
        self._role_waiters = keep

    def _fail(self, reason: str) -> None:
        if self.state is ReplicaState.FAILED:
            return
        log.error("replica FAILED", extra={"group": self.group, "reason": reason})
        self.state = ReplicaState.FAILED
        self.error = reason
        self._fail_pending(KuduTabletFailed(f"replica {self.group} FAILED: {reason}"))

    def _fail_pending(self, exc: KuduBadStatus) -> None:
        for p in [*self._queued, *self._inflight.values()]:
            if not p.future.done():
                p.future.set_exception(exc)
        self._queued.clear()
        self._inflight.clear()
        for fut in self._reads.values():
            if not fut.done():
                fut.set_exception(exc)

    async def close(self) -> None:
        """Stop driving; finish pending log writes and sync the WAL. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        if self.state is ReplicaState.RUNNING:
            self.state = ReplicaState.STOPPED
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._fail_pending(KuduAborted(f"replica {self.group} is shutting down"))
        if self.writer is not None:
            await self.writer.close()
        if self._background_save is not None:  # nothing may write the replica's files once close() returns
            await asyncio.gather(self._background_save, return_exceptions=True)
        if self.raft is not None and self.state is not ReplicaState.FAILED:
            cm = self._cmeta
            cm.term, cm.voted_for = self.raft.term, self.raft.vote
            cm.commit_index = min(self.raft.commit, self.raft.stable_index)
            self._save_cmeta_config()
            await self._save_cmeta()

    # --- tablet copy (source side) --------------------------------------------------------------------

    def copy_metadata(self) -> bytes:
        """Consensus metadata for a copy of this replica: its term, compaction point, config and commit
        index as of now, but no vote (the copy never voted). Capture it while ``gc_holds`` is raised and
        before linking the WAL, so the log files hold every entry after the compaction point."""
        raft = self._require_running()
        snap = raft.snapshot_meta()
        cm = ConsensusMetadata(
            raft.term,
            None,
            min(raft.commit, raft.stable_index),
            {
                "peers": dict(self.peers),
                "snapshot": [snap.index, snap.term, snap.config.to_dict()],
                "extra": self.extra_meta,
            },
        )
        return cm.to_bytes()

    def wal_files(self) -> list[Path]:
        """The WAL's segment files (call from a worker thread while ``gc_holds`` is raised)."""
        d = self.dir / "wal"
        return sorted(p for p in d.iterdir() if p.is_file()) if d.exists() else []

    # --- introspection --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        raft = self.raft
        out: dict[str, Any] = {
            "group": self.group,
            "state": self.state.value,
            "error": self.error,
            "kind": self.extra_meta.get("kind"),
        }
        if raft is None:
            return out
        now = time.monotonic()
        peers = []
        for uuid in sorted(raft.config.members | set(self.peers)):
            ps = raft.peer_state(uuid) if raft.is_leader else None
            contact = self.last_contact.get(uuid)
            peers.append(
                {
                    "uuid": uuid,
                    "address": self.peers.get(uuid),
                    "member_type": "VOTER"
                    if uuid in raft.config.voters
                    else "NON_VOTER"
                    if uuid in raft.config.learners
                    else "NONE",
                    "match_index": ps[1] if ps else None,
                    "mode": ps[0].value if ps else None,
                    "last_contact_ms_ago": None if contact is None else round((now - contact) * 1000),
                }
            )
        out.update(
            {
                "role": raft.role.value,
                "term": raft.term,
                "leader": raft.leader,
                "commit_index": raft.commit,
                "config_index": raft.config_index,
                "applied_index": raft.applied_index,
                "last_log_index": raft.last_index,
                "durable_index": raft.stable_index,
                "first_log_index": raft.first_index,
                "peers": peers,
                "pending_proposals": len(self._queued) + len(self._inflight),
                "driver_busy": self._busy,
                "readies_waiting": len(self._readies),
                "log_writes_in_flight": self._writes_in_flight,
                "wal_segments": len(self.wal.segment_info()) if self.wal is not None else 0,
                "log_cache_bytes": raft.log_memory_bytes(),
                "log_cached_from": raft.log.cached_from(),
                "log_reads": self.log_reads_done,
            }
        )
        return out
