"""One tablet replica on a tablet server: the tablet storage as the state machine of its Raft group.

Write path (leader), as Kudu orders it: one write at a time per tablet takes a timestamp, is prepared
(rows validated, row locks taken, per-row outcome decided, timestamp registered with MVCC) and is queued
for Raft, so timestamps increase in log order. The reply waits for the entry to be committed (durable on
a majority) and applied. Followers, and bootstrap after a restart, prepare and apply each committed entry
as it is applied, deciding exactly what the leader decided.

Reads: READ_LATEST is served by the leader after a Raft read index confirms it still leads;
READ_AT_SNAPSHOT(t) by any replica once its safe time has passed t: every write with a timestamp <= t is
applied there. On the leader that is MVCC being clean up to t after its clock has moved past t; on a
follower it holds once it has applied a write at or after t, or up to the index the leader names for t.

Exactly-once: a Write with a request id is looked up in the replica's ``ResultTracker`` once this replica
is a ready leader (every entry of earlier terms applied, so every earlier attempt that will ever commit has
been recorded). A completed one is answered with its first result; one still being replicated here is
awaited (within the caller's deadline) and looked up again; a new one is proposed with its id in the WAL
entry. Every replica records the result when it applies the entry, so a new leader knows it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kudu_async.common.clock import HybridClock
from kudu_async.common.errors import (
    KuduAborted,
    KuduBadStatus,
    KuduInvalidArgument,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTabletFailed,
    KuduTabletNotRunning,
    KuduTimedOut,
)
from kudu_async.common.mem_tracker import NodeMemory
from kudu_async.common.metrics import MetricEntity
from kudu_async.common.retry import Backoff, BackoffPolicy
from kudu_async.common.schema import Schema
from kudu_async.consensus.replica import RaftReplica, ReplicaState
from kudu_async.tablet.ops import WouldBlock, WriteOp, WriteResult
from kudu_async.tablet.tablet import READ_AT_SNAPSHOT, READ_LATEST, ScanSpec, Tablet, TabletScanner
from kudu_async.tablet.write_path import PreparedWrite
from kudu_async.tserver.result_tracker import Outcome, RequestId, ResultTracker
from kudu_async.tserver.scanners import BatchedHandOff
from kudu_async.tserver.wire import (
    AlterEntry,
    WriteEntry,
    WriteHeader,
    decode_entry,
    decode_entry_header,
    encode_alter_entry,
    encode_write_entry,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# A write waiting for row locks held by writes in flight: each holds them for one prepare, so retry fast.
ROW_LOCK_BACKOFF = BackoffPolicy(initial_s=0.001, max_s=0.05)
# A write this small is prepared and applied on the event loop (a few hundred microseconds of vectorised
# work, the same the loop spends decoding its RPC) instead of in a worker: each executor hop costs ~90 us
# of CPU in thread wake-ups on these machines, waits behind fsyncs in the queue and hands the GIL back and
# forth: in a worker, a single-row write's prepare and apply measured 15-25 ms p50 under 64 concurrent
# writers. Where the write would wait for background work or read rowsets from disk, it goes to a worker.
INLINE_WRITE_MAX_ROWS = 16
INLINE_WRITE_MAX_BYTES = 32 * 1024


class TabletState(enum.Enum):
    BOOTSTRAPPING = "BOOTSTRAPPING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    TOMBSTONED = "TOMBSTONED"
    COPYING = "COPYING"  # only in reports: a tablet copy into this server is in progress (Kudu: TABLET_DATA_COPYING)


@dataclass
class WriteLimits:
    """Back-pressure: beyond these a write gets SERVICE_UNAVAILABLE (retryable) instead of queueing."""

    max_pending_writes: int = 256
    max_pending_bytes: int = 64 * 1024 * 1024
    memory_limit_bytes: int = 256 * 1024 * 1024  # MemRowSet + DeltaMemStores of one tablet
    max_rows_per_write: int = 100_000
    lock_wait_s: float = 5.0


# (leader tablet id, timestamp) -> the index up to which a follower must apply to be safe at timestamp.
SafeIndexFetcher = Callable[["TabletReplica", int, float], Awaitable[int]]


@dataclass(frozen=True, kw_only=True)
class ReplicaServices:
    """What every replica of a tablet server shares: the node's workers, clock and limits, and the
    manager's callbacks."""

    executor: Executor | None  # blocking tablet work (None: the loop's default executor)
    clock: HybridClock
    limits: WriteLimits
    memory: NodeMemory  # the node's memory limit: new client writes are refused near it
    small_reads: BatchedHandOff  # point reads of all tablets handed to the workers together
    on_change: Callable[[str], None]  # a replica's reported state changed (its tablet id)
    fetch_safe_index: SafeIndexFetcher  # a follower read asks the leader how far it must have applied


def _latest_read_floor(r: RaftReplica, index: int) -> int:
    """The log index a READ_LATEST scan must see applied, given the leader's confirmed read ``index``: only
    up to the leader's no-op of its term. A write is answered only after this leader applied it, and the
    no-op orders every entry of earlier terms before it, so each write acknowledged before the read began
    is visible once that no-op is applied; entries committed but not yet applied belong to writes still in
    flight, which a read may or may not see (as Kudu's READ_LATEST). Waiting for the whole commit index
    would put a point read behind the applies of a bulk load's batches: tens of ms."""
    raft = r.raft
    if raft is None or not raft.is_leader:
        return index
    return min(index, raft.term_start_index)


class TabletReplica:
    """A tablet's storage behind its Raft replica; implements the consensus ``StateMachine``."""

    def __init__(
        self,
        tablet_id: str,
        info: dict[str, Any],
        tablet: Tablet,
        get_raft: Callable[[], RaftReplica | None],
        metrics: MetricEntity,
        services: ReplicaServices,
    ) -> None:
        self.tablet_id = tablet_id
        self.info = info  # table_id, table_name, partition, partition_schema
        self.tablet = tablet
        self._get_raft = get_raft
        self.metrics = metrics
        self.executor = services.executor
        self.clock = clock = services.clock
        self.limits = services.limits
        self.memory = services.memory
        self._on_change = services.on_change
        self._fetch_safe_index = services.fetch_safe_index
        self.small_reads = services.small_reads
        self.error: str | None = None
        self.stopped = False
        # (live rows, bytes on disk) while this replica leads, refreshed by the tablet manager for the reports.
        self.stats: tuple[int, int] | None = None
        self.bootstrap_target: int | None = None  # commit index seen when Raft came up: RUNNING once applied
        self._prepare_lock = asyncio.Lock()
        self._pending: dict[tuple[int, int], PreparedWrite] = {}  # (term, timestamp) -> prepared on this leader
        self._pending_bytes = 0
        self.max_applied_ts = clock.peek()
        self.tracker = ResultTracker()
        # (client id, seq_no) -> resolved once this leader's attempt of that request has an outcome
        self._inflight_requests: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._c_inserted = metrics.counter("rows_inserted", "Rows inserted", "rows")
        self._c_updated = metrics.counter("rows_updated", "Rows updated", "rows")
        self._c_deleted = metrics.counter("rows_deleted", "Rows deleted", "rows")
        self._c_writes = metrics.counter("write_ops", "Write operations applied", "operations")
        self._c_rejected = metrics.counter(
            "writes_rejected_backpressure", "Writes refused with SERVICE_UNAVAILABLE by back-pressure", "operations"
        )
        self._c_scans = metrics.counter("scans_started", "Scanners opened", "scanners")
        self._c_point_in_memory = metrics.counter(
            "point_reads_in_memory",
            "Point lookups answered on the event loop from memory (a MemRowSet or cached rowset files)",
            "scanners",
        )
        self._c_point_handed_off = metrics.counter(
            "point_reads_handed_off",
            "Point lookups handed to a worker (a rowset file not in the block cache may hold the row)",
            "scanners",
        )
        self._c_duplicates = metrics.counter(
            "writes_duplicate_answered",
            "Retried writes answered with the first attempt's result (not applied again)",
            "operations",
        )
        self._c_stale = metrics.counter(
            "writes_stale_rejected", "Retried writes refused because their result was already forgotten", "operations"
        )
        metrics.gauge(
            "result_tracker_clients",
            "Clients whose write results this replica remembers",
            "units",
            read=lambda: self.tracker.num_clients(),
        )
        metrics.gauge(
            "result_tracker_responses",
            "Write results this replica remembers",
            "units",
            read=lambda: self.tracker.num_responses(),
        )
        metrics.gauge("memrowset_size", "MemRowSet bytes", "bytes", read=tablet.mrs_memory_bytes)
        metrics.gauge("delta_memstore_size", "DeltaMemStore bytes", "bytes", read=tablet.dms_memory_bytes)
        metrics.gauge("num_rowsets_on_disk", "DiskRowSets", "units", read=lambda: len(tablet.rowsets()))
        metrics.gauge(
            "average_diskrowset_height",
            "DiskRowSets a key probe consults, averaged over the tablet's data (Kudu's rowset layout height)",
            "units",
            read=lambda: round(tablet.rowset_layout(fresh=False).average_height, 4),
        )
        metrics.gauge(
            "max_diskrowset_height",
            "Most DiskRowSets whose key ranges cover one key",
            "units",
            read=lambda: tablet.rowset_layout(fresh=False).max_height,
        )
        for key, unit, text in (
            ("flushes", "operations", "MemRowSet and DeltaMemStore flushes"),
            ("bytes_flushed", "bytes", "Bytes written by flushes"),
            ("compactions", "operations", "Rowset and delta compactions that did work"),
            ("bytes_compacted", "bytes", "Bytes written by compactions"),
        ):
            metrics.gauge(key, text + " (monotonic)", unit, read=functools.partial(_stat, tablet, key))
        metrics.gauge(
            "pending_writes", "Writes prepared and not yet applied", "operations", read=lambda: len(self._pending)
        )

    # --- state ----------------------------------------------------------------------------------------

    @property
    def raft(self) -> RaftReplica | None:
        return self._get_raft()

    @property
    def state(self) -> TabletState:
        if self.error is not None:
            return TabletState.FAILED
        r = self.raft
        if self.stopped:
            return TabletState.STOPPED
        if r is None or r.state is ReplicaState.INITIALIZING:
            return TabletState.BOOTSTRAPPING
        if r.state is ReplicaState.FAILED:
            return TabletState.FAILED
        if r.state is ReplicaState.STOPPED:
            return TabletState.STOPPED
        if r.raft is not None:
            if self.bootstrap_target is None:
                self.bootstrap_target = r.raft.commit
            if r.raft.applied_index < self.bootstrap_target:
                return TabletState.BOOTSTRAPPING
        return TabletState.RUNNING

    @property
    def failure_reason(self) -> str | None:
        r = self.raft
        return self.error or (r.error if r is not None else None)

    def _running_raft(self) -> RaftReplica:
        st = self.state
        r = self.raft
        if st is TabletState.FAILED:
            raise KuduTabletFailed(f"tablet {self.tablet_id} is FAILED: {self.failure_reason}")
        if st is not TabletState.RUNNING or r is None:
            raise KuduTabletNotRunning(f"tablet {self.tablet_id} is {st.value}", {"state": st.value})
        return r

    def _leader(self) -> RaftReplica:
        r = self._running_raft()
        if r.raft is None or not r.raft.is_leader:
            raise KuduNotTheLeader(f"this replica of tablet {self.tablet_id} is not the leader", r.leader_hint())
        return r

    # --- StateMachine ---------------------------------------------------------------------------------

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        # The header is enough on the loop: a write prepared here applies the rows it prepared, and one
        # replayed (a follower's, bootstrap's) has its rows decoded in the worker that applies them.
        entry = decode_entry_header(payload)
        loop = asyncio.get_running_loop()
        if isinstance(entry, WriteHeader):
            prepared = self._pending.pop((term, entry.timestamp), None)
            if entry.schema_version != self.tablet.schema_version:
                # An AlterSchema committed before this write: every replica refuses it the same way.
                if prepared is not None:
                    self._pending_bytes -= prepared.op.rows.nbytes
                    self.tablet.abort_write(prepared)
                return _mismatch(self.tablet_id, self.tablet.schema_version, entry.schema_version)
            if prepared is None:
                self._abort_stale_pending()
                result = await self._replay(payload, index)
            else:
                self._pending_bytes -= prepared.op.rows.nbytes
                result = await self._apply_prepared(prepared, index)
            self.max_applied_ts = max(self.max_applied_ts, entry.timestamp)
            self._c_writes.increment()
            self._c_inserted.increment(result.inserted)
            self._c_updated.increment(result.updated)
            self._c_deleted.increment(result.deleted)
            if entry.request_id is not None:
                self.tracker.complete(entry.request_id, result, time.monotonic())
            return result
        self._abort_stale_pending()
        changed = await loop.run_in_executor(
            self.executor, self.tablet.alter_schema, _schema_from_dict(entry.schema), entry.version, index
        )
        if changed:
            log.info("tablet schema altered", extra={"tablet": self.tablet_id, "version": entry.version})
            self._on_change(self.tablet_id)
        return {"schema_version": self.tablet.schema_version}

    def durable_index(self) -> int:
        return self.tablet.earliest_needed_log_index() - 1

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        """Writes applied and flushed before this replica restarted are not applied again: remember their
        results (as the leader decided them, in the entries) so that a retry is answered, not re-applied.
        A write refused at apply (an AlterSchema changed the schema first) left no result and is skipped."""
        headers = [(index, decode_entry_header(payload)) for index, payload in entries]
        alters = [h.version for _, h in headers if isinstance(h, AlterEntry)]
        newest = alters[0] - 1 if alters else self.tablet.schema_version  # in force before the first one
        exact = False
        now = time.monotonic()
        recalled = 0
        for index, h in headers:
            if isinstance(h, AlterEntry):
                newest, exact = h.version, True
            elif (
                h.request_id is not None
                and h.outcome is not None
                and (h.schema_version == newest if exact else h.schema_version <= newest)
            ):
                self.tracker.complete(h.request_id, replace(h.outcome, log_index=index), now)
                recalled += 1
        if recalled:
            log.info(
                "recalled the results of flushed writes from the log",
                extra={"tablet": self.tablet_id, "writes": recalled},
            )

    async def _apply_prepared(self, prepared: PreparedWrite, index: int) -> WriteResult:
        if _small(prepared.op):
            try:
                return self.tablet.apply_write(prepared, index, wait=False)
            except WouldBlock:
                pass  # still prepared: apply it in a worker
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.tablet.apply_write, prepared, index)

    async def _replay(self, payload: bytes, index: int) -> WriteResult:
        """Apply an entry this replica did not prepare (a follower's, or one of an earlier leadership)."""
        if len(payload) <= INLINE_WRITE_MAX_BYTES:
            entry = decode_entry(payload)
            assert isinstance(entry, WriteEntry)  # the caller read its header
            if entry.op.rows.num_rows <= INLINE_WRITE_MAX_ROWS:
                self.clock.update(entry.timestamp)
                try:
                    prepared = self.tablet.prepare_write(
                        entry.op, entry.timestamp, replay=True, lock_timeout_s=0, wait=False
                    )
                except (WouldBlock, KuduTimedOut):
                    pass  # nothing held: a worker prepares it, waiting as it may
                else:
                    return await self._apply_prepared(prepared, index)
            return await asyncio.get_running_loop().run_in_executor(self.executor, self._replay_entry, entry, index)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._replay_write, payload, index)

    def _replay_write(self, payload: bytes, index: int) -> WriteResult:
        entry = decode_entry(payload)
        assert isinstance(entry, WriteEntry)  # the caller read its header
        return self._replay_entry(entry, index)

    def _replay_entry(self, entry: WriteEntry, index: int) -> WriteResult:
        self.clock.update(entry.timestamp)
        prepared = self.tablet.prepare_write(
            entry.op, entry.timestamp, replay=True, lock_timeout_s=self.limits.lock_wait_s
        )
        return self.tablet.apply_write(prepared, index)

    def _abort_stale_pending(self) -> None:
        """An entry this replica did not prepare is being applied: we lost leadership, and what we
        prepared will either never commit or arrive here again (then it is replayed like a follower's)."""
        if not self._pending:
            return
        for prepared in self._pending.values():
            self.tablet.abort_write(prepared)
        log.info(
            "aborted writes prepared in a lost leadership",
            extra={"tablet": self.tablet_id, "count": len(self._pending)},
        )
        self._pending.clear()
        self._pending_bytes = 0

    # --- writes ---------------------------------------------------------------------------------------

    async def write(
        self, op: WriteOp, schema_version: int, timeout_s: float, request_id: RequestId | None = None
    ) -> WriteResult:
        """Replicate and apply one batch; returns per-row errors. Leader only. With a ``request_id``, at
        most once: a retry of a write already applied gets the first attempt's result."""
        r = self._leader()
        deadline = time.monotonic() + timeout_s
        if request_id is None:
            self._check_write(op, schema_version)
            r = await self._ready_leader(r, deadline)
            return await self._await_write(await self._prepare_and_propose(r, op, deadline, schema_version), deadline)
        key = request_id.key
        while True:
            r = await self._ready_leader(r, deadline)
            look = self.tracker.start(request_id, time.monotonic())
            if look.outcome is Outcome.COMPLETED:
                self._c_duplicates.increment()
                assert isinstance(look.response, WriteResult)
                return look.response
            if look.outcome is Outcome.STALE:
                self._c_stale.increment()
                raise KuduInvalidArgument(
                    f"write request {request_id.seq_no} of client {request_id.client_id} on tablet {self.tablet_id} "
                    "is older than what this tablet remembers of that client (completed and forgotten); it is "
                    "not applied again",
                    {"error": "STALE_REQUEST", "seq_no": request_id.seq_no},
                )
            if look.outcome is Outcome.IN_PROGRESS:
                first = self._inflight_requests.get(key)
                if first is None:  # no attempt of ours is running: a leftover mark
                    self.tracker.abandon(*key)
                    continue
                try:
                    await asyncio.wait_for(asyncio.shield(first), max(0.01, deadline - time.monotonic()))
                except TimeoutError:
                    raise KuduTimedOut(
                        f"write to tablet {self.tablet_id}: an earlier attempt of this request is "
                        "still being replicated; it may still commit"
                    ) from None
                r = self._leader()
                continue  # its outcome is recorded (COMPLETED) or it left no trace (NEW)
            break
        assert r.raft is not None
        term = r.raft.term  # the tracker was consulted as the ready leader of this term
        attempt: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight_requests[key] = attempt
        try:
            self._check_write(op, schema_version)
            fut = await self._prepare_and_propose(r, op, deadline, schema_version, (request_id, term))
        except BaseException:
            self._request_done(request_id, attempt, None)  # failed before replication: no trace
            raise
        fut.add_done_callback(functools.partial(self._request_done, request_id, attempt))
        return await self._await_write(fut, deadline)

    def _check_write(self, op: WriteOp, schema_version: int) -> None:
        if schema_version != self.tablet.schema_version:
            raise _mismatch(self.tablet_id, self.tablet.schema_version, schema_version)
        n = op.rows.num_rows
        if n > self.limits.max_rows_per_write:
            raise KuduInvalidArgument(f"write of {n} rows exceeds the limit of {self.limits.max_rows_per_write}")
        self._check_backpressure(op.rows.nbytes)

    async def _ready_leader(self, r: RaftReplica, deadline: float) -> RaftReplica:
        if not r.is_leader_ready():
            await r.wait_for(
                lambda rr: rr.is_leader_ready() or not (rr.raft and rr.raft.is_leader),
                max(0.01, deadline - time.monotonic()),
            )
            r = self._leader()
        return r

    def _request_done(self, rid: RequestId, attempt: asyncio.Future[None], _fut: asyncio.Future[Any] | None) -> None:
        """This leader's attempt of ``rid`` has an outcome: an apply recorded it in the tracker, or it was never
        applied here (then its in-progress mark goes, and a retry is proposed anew)."""
        if self._inflight_requests.get(rid.key) is attempt:
            del self._inflight_requests[rid.key]
        self.tracker.abandon(*rid.key)  # keeps a completed response
        if not attempt.done():
            attempt.set_result(None)

    async def _await_write(self, fut: asyncio.Future[Any], deadline: float) -> WriteResult:
        try:
            result = await asyncio.wait_for(asyncio.shield(fut), max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            raise KuduTimedOut(
                f"write to tablet {self.tablet_id} did not commit in time; it may still commit"
            ) from None
        if isinstance(result, KuduBadStatus):
            raise result
        assert isinstance(result, WriteResult)
        return result

    def _check_backpressure(self, nbytes: int) -> None:
        lim = self.limits
        why = None
        if len(self._pending) >= lim.max_pending_writes:
            why = f"{len(self._pending)} writes pending"
        elif self._pending_bytes + nbytes > lim.max_pending_bytes:
            why = f"{self._pending_bytes} bytes of writes pending"
        else:
            mem = self.tablet.mrs_memory_bytes() + self.tablet.dms_memory_bytes()
            if mem > lim.memory_limit_bytes:
                why = f"{mem} bytes in memory stores (limit {lim.memory_limit_bytes}) while flushes catch up"
        if why is not None:
            self._c_rejected.increment()
            raise KuduServiceUnavailable(f"tablet {self.tablet_id} is busy: {why}; retry later", {"retryable": True})
        # Only the leader's admission of a new client write is refused here: a follower applies what its
        # leader replicates whatever its own memory (refusing would stall the Raft group).
        refusal = self.memory.admission_refusal()
        if refusal is not None:
            self._c_rejected.increment()
            raise KuduServiceUnavailable(
                f"write to tablet {self.tablet_id} refused: {refusal}; retry later",
                {"retryable": True, "memory_limit_exceeded": True},
            )

    async def _prepare_and_propose(
        self,
        r: RaftReplica,
        op: WriteOp,
        deadline: float,
        schema_version: int,
        tracked: tuple[RequestId, int] | None = None,
    ) -> asyncio.Future[Any]:
        """Prepare and propose under the prepare lock. ``tracked``: the write's request id and the term in
        which the tracker said it was new (a leadership lost and won again meanwhile may have applied an
        attempt of an intervening leader, so the write is refused as retryable instead of proposed)."""
        request_id = None if tracked is None else tracked[0]
        loop = asyncio.get_running_loop()
        backoff = Backoff(ROW_LOCK_BACKOFF)
        while True:
            async with self._prepare_lock:
                r = self._leader()
                if tracked is not None and request_id is not None:
                    if r.raft is None or r.raft.term != tracked[1]:
                        raise KuduAborted(
                            f"write to tablet {self.tablet_id}: leadership changed while it waited; retry",
                            r.leader_hint(),
                        )
                    look = self.tracker.peek(*request_id.key)  # recorded meanwhile: never propose it again
                    if look.outcome is Outcome.COMPLETED:
                        done: asyncio.Future[Any] = loop.create_future()
                        done.set_result(look.response)
                        return done
                if schema_version != self.tablet.schema_version:  # an alter landed while this write waited
                    raise _mismatch(self.tablet_id, self.tablet.schema_version, schema_version)
                ts = self.clock.now()
                try:
                    prepared, entry = await self._prepare_in_worker(op, ts, request_id)
                except KuduTimedOut:
                    prepared = None  # a row lock is held by a write in flight: wait outside the lock
                if prepared is not None:
                    try:
                        fut = r.propose([entry])[0]
                    except BaseException:
                        self.tablet.abort_write(prepared)
                        raise
                    assert r.raft is not None
                    key = (r.raft.term, ts)  # the entry's term: a later leader may reuse the timestamp
                    self._pending[key] = prepared
                    self._pending_bytes += prepared.op.rows.nbytes
                    fut.add_done_callback(functools.partial(self._proposal_done, key))
                    return fut
            if time.monotonic() + backoff.ceiling() > deadline:
                raise KuduTimedOut(f"write to tablet {self.tablet_id}: rows stayed locked by writes in flight")
            await asyncio.sleep(backoff.next_delay())

    async def _prepare_in_worker(
        self, op: WriteOp, ts: int, request_id: RequestId | None
    ) -> tuple[PreparedWrite, bytes]:
        """Prepare with the write's log entry: a small write right here, else in a worker. Cancellation-safe:
        if the caller is cancelled (its RPC deadline, or the client hung up) while the worker prepares, the
        prepare still completes there and would hold its row locks and MVCC slot forever; it is undone as
        soon as it is done, and the prepare lock stays held till then."""
        if _small(op):
            try:
                return self._prepare_no_wait(op, ts, request_id, wait=False)
            except WouldBlock:
                pass
        job = asyncio.get_running_loop().run_in_executor(self.executor, self._prepare_no_wait, op, ts, request_id)
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            job.add_done_callback(self._undo_orphan_prepare)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([job])
            raise

    def _undo_orphan_prepare(self, job: asyncio.Future[tuple[PreparedWrite, bytes]]) -> None:
        if not job.cancelled() and job.exception() is None:
            self.tablet.abort_write(job.result()[0])
            r = self.raft
            if r is not None:
                r.notify()

    def _prepare_no_wait(
        self, op: WriteOp, ts: int, request_id: RequestId | None, wait: bool = True
    ) -> tuple[PreparedWrite, bytes]:
        """Prepare without waiting for row locks, then encode the log entry and let the write apply the rows
        as the entry holds them (the rows' IPC stream is a copy of the whole batch). ``wait``: see
        :meth:`Tablet.prepare_write`."""
        prepared = self.tablet.prepare_write(op, ts, lock_timeout_s=0, wait=wait)
        try:
            entry = encode_write_entry(
                ts,
                self.tablet.schema_version,
                prepared.op,
                request_id,
                None if request_id is None else prepared.outcome(),
            )
            _rows_from_entry(prepared, entry)
        except BaseException:
            self.tablet.abort_write(prepared)
            raise
        return prepared, entry

    def _proposal_done(self, key: tuple[int, int], fut: asyncio.Future[Any]) -> None:
        """An entry that will never be applied gives back its locks and MVCC slot."""
        if fut.cancelled() or fut.exception() is not None:
            prepared = self._pending.pop(key, None)
            if prepared is not None:
                self._pending_bytes -= prepared.op.rows.nbytes
                self.tablet.abort_write(prepared)
                r = self.raft
                if r is not None:
                    r.notify()

    async def alter_schema(self, schema: dict[str, Any], version: int, timeout_s: float) -> int:
        """Replicate an AlterSchema; returns the schema version now in force. Idempotent by version."""
        r = self._leader()
        if version <= self.tablet.schema_version:
            return self.tablet.schema_version
        _schema_from_dict(schema)  # validate before it reaches the log
        deadline = time.monotonic() + timeout_s
        if not r.is_leader_ready():
            await r.wait_for(
                lambda rr: rr.is_leader_ready() or not (rr.raft and rr.raft.is_leader),
                max(0.01, deadline - time.monotonic()),
            )
            r = self._leader()
        # Like Kudu's schema lock: no write is prepared between proposing the alter and applying it (one
        # that slipped in would be refused at apply anyway, identically on every replica).
        async with self._prepare_lock:
            fut = r.propose([encode_alter_entry(schema, version)])[0]
            try:
                await asyncio.wait_for(asyncio.shield(fut), max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                raise KuduTimedOut(f"AlterSchema on tablet {self.tablet_id} did not commit in time") from None
        return self.tablet.schema_version

    # --- reads ----------------------------------------------------------------------------------------

    async def scan_with(
        self,
        spec: ScanSpec,
        timeout_s: float,
        then: Callable[[TabletScanner], _T],
        measuring: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> _T:
        """Position a scan (READ_LATEST on the confirmed leader, READ_AT_SNAPSHOT where safe), open it and
        run ``then`` on the new scanner in the same worker call (the tserver pulls a first batch without a
        second hop to the executor). A point lookup is answered on the loop when its row is in memory,
        else handed to a worker together with the other lookups of this loop iteration. The open and
        ``then`` run inside ``measuring()``, on the thread that does them (the call's resource metrics)."""
        deadline = time.monotonic() + timeout_s
        if spec.read_mode == READ_LATEST:
            r = self._leader()
            index = await r.read_index(timeout_s=max(0.01, deadline - time.monotonic()))
            await self._wait_applied(r, _latest_read_floor(r, index), deadline)
        elif spec.read_mode == READ_AT_SNAPSHOT:
            if spec.snapshot_ts is None:
                spec.snapshot_ts = self.clock.now()
            await self.wait_safe_time(spec.snapshot_ts, deadline)
            spec.snapshot_wait_s = 0.0
        else:
            raise KuduInvalidArgument(f"unknown read mode {spec.read_mode!r}")

        def open_() -> _T:
            with measuring():
                return then(self.tablet.scan(spec))

        key = self.tablet.point_lookup_key(spec)
        if key is not None:
            with measuring():
                it = self.tablet.scan_in_memory(spec, key)  # memory answers it: no hand-off to a worker at all
                if it is not None:
                    self._c_point_in_memory.increment()
                    out = then(it)
            if it is None:
                self._c_point_handed_off.increment()
                out = await self.small_reads.run(open_)
        else:
            out = await asyncio.get_running_loop().run_in_executor(self.executor, open_)
        self._c_scans.increment()
        return out

    async def _wait_applied(self, r: RaftReplica, index: int, deadline: float) -> None:
        def applied(rr: RaftReplica) -> bool:
            return rr.raft is not None and rr.raft.applied_index >= index

        await r.wait_for(applied, max(0.01, deadline - time.monotonic()))

    async def wait_safe_time(self, ts: int, deadline: float) -> None:
        """Return once every write with a timestamp <= ``ts`` is applied on this replica."""
        r = self._running_raft()
        mvcc = self.tablet.mvcc
        if r.raft is not None and r.raft.is_leader:
            await self.leader_safe_index(ts, deadline)
            return
        if ts > self.max_applied_ts:
            index = await self._fetch_safe_index(self, ts, max(0.01, deadline - time.monotonic()))
            await self._wait_applied(r, index, deadline)
            self.max_applied_ts = max(self.max_applied_ts, ts)
        self.clock.update(ts)
        await r.wait_for(lambda rr: mvcc.is_clean_up_to(ts), max(0.01, deadline - time.monotonic()))

    async def leader_safe_index(self, ts: int, deadline: float) -> int:
        """On the leader: make every later write take a timestamp > ``ts``, wait until the writes at or
        before it are applied, and return an index a follower must reach to be safe at ``ts``.

        Only a ready leader answers: a new one has not yet applied (nor registered with MVCC) what its
        predecessors committed, so "MVCC clean up to ``ts``" would hold vacuously and miss those writes.
        And only a confirmed one (its lease, or a heartbeat round): a leader cut off or stopped may have
        been replaced, and the new one may have committed writes at or before ``ts``.
        """
        r = await self._ready_leader(self._leader(), deadline)
        async with self._prepare_lock:  # no timestamp is between assignment and MVCC registration now
            self.clock.update(ts)
        mvcc = self.tablet.mvcc
        await r.wait_for(lambda rr: mvcc.is_clean_up_to(ts), max(0.01, deadline - time.monotonic()))
        await r.read_index(timeout_s=max(0.01, deadline - time.monotonic()))
        assert r.raft is not None
        return r.raft.applied_index

    async def checksum(self, snapshot_ts: int | None, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        if snapshot_ts is None:
            snapshot_ts = self.clock.now()
        await self.wait_safe_time(snapshot_ts, deadline)
        out: dict[str, Any] = await asyncio.get_running_loop().run_in_executor(
            self.executor, self.tablet.checksum, snapshot_ts
        )
        return out

    # --- lifecycle and introspection ------------------------------------------------------------------

    def abort_all(self) -> None:
        """Before the replica goes away: nothing prepared here will be applied by this object."""
        with contextlib.suppress(KuduBadStatus):
            self._abort_stale_pending()

    def in_flight_writes(self) -> list[dict[str, Any]]:
        """The writes this leader prepared and has not applied yet (Kudu's in-flight ops of
        ``/transactions``): term and hybrid timestamp, state, rows by kind, bytes."""
        out = []
        for (term, ts), prepared in list(self._pending.items()):
            outcome = prepared.outcome()
            out.append(
                {
                    "tablet_id": self.tablet_id,
                    "term": term,
                    "timestamp": ts,
                    "state": prepared.state,
                    "rows": prepared.op.rows.num_rows,
                    "inserts": outcome.inserted,
                    "updates": outcome.updated,
                    "deletes": outcome.deleted,
                    "row_errors": len(prepared.errors),
                    "bytes": prepared.op.rows.nbytes,
                    "schema_version": prepared.schema_version,
                }
            )
        return out

    def report(self) -> dict[str, Any]:
        """The tablet report the heartbeater sends to masters."""
        r = self.raft
        raft = r.raft if r is not None else None
        cfg: dict[str, Any] = {"opid_index": 0, "voters": [], "non_voters": [], "peers": {}}
        if raft is not None and r is not None:
            cfg = {
                "opid_index": raft.config_index,
                "voters": sorted(raft.config.voters),
                "non_voters": sorted(raft.config.learners),
                "kept_non_voters": sorted(raft.config.kept_learners),
                "peers": dict(r.peers),
            }
        return {
            "tablet_id": self.tablet_id,
            "table_id": self.info.get("table_id", ""),
            "state": self.state.value,
            "error": self.failure_reason,
            "role": raft.role.value if raft is not None else None,
            "term": raft.term if raft is not None else 0,
            "leader_uuid": raft.leader if raft is not None else None,
            "config": cfg,
            "schema_version": self.tablet.schema_version,
            "live_row_count": None if self.stats is None else self.stats[0],
            "on_disk_size": None if self.stats is None else self.stats[1],
        }

    def report_signature(self) -> tuple[Any, ...]:
        """What :meth:`report` says that can change, cheaply (the tablet manager polls every replica each
        second): the config's voters and non-voters only change with its index."""
        r = self.raft
        raft = r.raft if r is not None else None
        if raft is None:
            return (self.state.value, self.failure_reason, self.tablet.schema_version, self.stats)
        return (
            self.state.value,
            self.failure_reason,
            raft.role,
            raft.term,
            raft.leader,
            raft.config_index,
            self.tablet.schema_version,
            self.stats,
        )

    def status(self) -> dict[str, Any]:
        r = self.raft
        storage = self.tablet.status()
        return {
            "tablet_id": self.tablet_id,
            "table_id": self.info.get("table_id", ""),
            "table_name": self.info.get("table_name", ""),
            "partition": self.info.get("partition"),
            "state": self.state.value,
            "error": self.failure_reason,
            "schema_version": self.tablet.schema_version,
            "schema": self.tablet.schema_dict(),
            "consensus": r.status() if r is not None else None,
            "pending_writes": len(self._pending),
            "mvcc_in_flight": self.tablet.mvcc.in_flight(),
            "pending_write_bytes": self._pending_bytes,
            "max_applied_timestamp": self.max_applied_ts,
            "result_tracker": {**self.tracker.stats(), "writes_in_flight_tracked": len(self._inflight_requests)},
            "memrowset_bytes": storage["mrs_bytes"],
            "delta_memstore_bytes": storage["dms_bytes"],
            "storage": storage,
        }


def _small(op: WriteOp) -> bool:
    """Whether a write is prepared and applied on the event loop (see ``INLINE_WRITE_MAX_ROWS``)."""
    return bool(op.rows.num_rows <= INLINE_WRITE_MAX_ROWS and op.rows.nbytes <= INLINE_WRITE_MAX_BYTES)


def _stat(tablet: Tablet, key: str) -> int:
    return tablet.stats()[key]


def _mismatch(tablet_id: str, have: int, got: int) -> KuduInvalidArgument:
    return KuduInvalidArgument(
        f"tablet {tablet_id} has schema version {have}; the write was built for version {got}: "
        "reload the table schema and retry",
        {"error": "MISMATCHED_SCHEMA", "schema_version": have},
    )


def _schema_from_dict(d: dict[str, Any]) -> Schema:
    return Schema.from_dict(d)


def _rows_from_entry(prepared: PreparedWrite, entry: bytes) -> None:
    """Let the write apply the rows as its log entry holds them (read in place, the same values): the
    MemRowSet then keeps the memory the Raft log keeps anyway, and the request's copy is freed."""
    logged = decode_entry(entry)
    if isinstance(logged, WriteEntry) and logged.op.rows.schema.equals(prepared.op.rows.schema):
        prepared.op = replace(prepared.op, rows=logged.op.rows, rows_ipc=None)  # the request's bytes go too
