"""Open scanners of a tablet server: continued by id, expired when idle (Kudu: scanner_ttl_ms).

Each scanner pulls Arrow batches from its tablet in a worker thread, one call at a time, and keeps one
batch of look-ahead so an answer can say whether more rows follow. Once an answer is sent, the batch
after the look-ahead is read in a worker while the answer travels and the client decodes it, so a
scan's reads on the tablet server overlap its round trips instead of waiting for them.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import resource
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from kudu_async.common.errors import KuduNotFound, KuduServiceUnavailable
from kudu_async.common.row_conversion import batch_to_ipc
from kudu_async.fs.block_cache import ReadCounts, charge_reads_to
from kudu_async.tablet.tablet import TabletScanner

log = logging.getLogger(__name__)
RECENT_SCANS = 200
# Scanner ids: a random prefix per process (an id from before a restart never names a new scanner)
# and a counter. One os.urandom call per scan costs ~3% of a tserver's CPU in point reads.
_ID_PREFIX = secrets.token_hex(8)
_id_counter = itertools.count(1)
_T = TypeVar("_T")
_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)
Pulled = tuple[pa.RecordBatch | None, bytes, bool]


def _thread_cpu_ns() -> tuple[int, int]:
    """(user, system) CPU nanoseconds of the calling thread; where the OS gives no per-thread split,
    the thread's whole CPU time counts as user time."""
    if _RUSAGE_THREAD is None:
        return time.thread_time_ns(), 0
    ru = resource.getrusage(_RUSAGE_THREAD)
    return int(ru.ru_utime * 1e9), int(ru.ru_stime * 1e9)


class BatchedHandOff:
    """Hands small jobs (the opens of point reads) to the executor, those submitted in one event-loop
    iteration together, in one worker call.

    On a busy tserver the hand-off itself cost more than the lookup: a thread woken, the GIL passed to
    it and back, the loop woken through its self-pipe, once per read. With 16 readers on a 2M-row table,
    a tserver spent 0.396 ms of CPU per point read with a hand-off each, 0.257 ms reading inline (an
    experiment), 0.331 ms with the reads of one iteration sharing a hand-off (one socket read often holds
    several). The lookup itself stays off the loop: it may touch memory-mapped rowset files, which can
    wait on the disk. Only small jobs belong here: they run one after another in their worker, so a big
    one would hold up the rest.
    """

    def __init__(self, executor: Executor | None, max_batch: int = 32) -> None:
        self.executor = executor
        self.max_batch = max_batch
        self._queued: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self.calls = 0  # worker calls made (jobs / calls = the batching achieved)
        self.jobs = 0

    def run(self, fn: Callable[[], _T]) -> asyncio.Future[_T]:
        """``fn()`` in a worker; its result or exception on the returned future."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_T] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._dispatch)
        self._queued.append((fn, fut))
        return fut

    def _dispatch(self) -> None:
        queued, self._queued = self._queued, []
        loop = asyncio.get_running_loop()
        for i in range(0, len(queued), self.max_batch):
            jobs = queued[i : i + self.max_batch]
            self.calls += 1
            self.jobs += len(jobs)
            try:
                work = loop.run_in_executor(self.executor, _run_jobs, [fn for fn, _ in jobs])
            except RuntimeError as e:  # the executor is shut down: the node is stopping
                for _, fut in jobs:
                    if not fut.done():
                        fut.set_exception(KuduServiceUnavailable(f"cannot run a read: {e}"))
                continue
            work.add_done_callback(lambda w, jobs=jobs: _settle(jobs, w))  # type: ignore[misc]


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _run_jobs(fns: list[Callable[[], Any]]) -> list[tuple[bool, Any]]:
    out: list[tuple[bool, Any]] = []
    for fn in fns:
        try:
            out.append((True, fn()))
        except Exception as e:  # each job's own error goes to its own caller
            out.append((False, e))
    return out


def _settle(jobs: list[tuple[Callable[[], Any], asyncio.Future[Any]]], work: asyncio.Future[Any]) -> None:
    if work.cancelled() or work.exception() is not None:
        exc = work.exception() if not work.cancelled() else KuduServiceUnavailable("a read's worker call was cancelled")
        for _, fut in jobs:
            if not fut.done():
                fut.set_exception(exc)  # type: ignore[arg-type]
        return
    for (_, fut), (ok, value) in zip(jobs, work.result(), strict=True):
        if fut.done():  # its caller gave up (deadline): the result is dropped
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


class CallCost:
    """What one Scan call cost this server, as Kudu's ResourceMetricsPB counts it: the time from the
    call's arrival (``accepted``, time.monotonic) until a thread took its work up, the CPU time of the
    threads that did it, and the rowset bytes they read from the block cache and from the files."""

    __slots__ = ("_before", "_cpu0", "accepted", "counts", "cpu_system_ns", "cpu_user_ns", "started")

    def __init__(self, accepted: float) -> None:
        self.accepted = accepted
        self.started: float | None = None
        self.counts = ReadCounts()
        self.cpu_user_ns = 0
        self.cpu_system_ns = 0
        self._before: ReadCounts | None = None
        self._cpu0 = (0, 0)

    def measuring(self) -> CallCost:
        """Charge the work done inside ``with``, on this thread, to this call."""
        return self

    def __enter__(self) -> None:
        if self.started is None:
            self.started = time.monotonic()
        self._before = charge_reads_to(self.counts)
        self._cpu0 = _thread_cpu_ns()

    def __exit__(self, *exc: object) -> None:
        user1, sys1 = _thread_cpu_ns()
        charge_reads_to(self._before)
        self.cpu_user_ns += user1 - self._cpu0[0]
        self.cpu_system_ns += sys1 - self._cpu0[1]

    def absorb(self, other: CallCost) -> None:
        """Add the bytes and CPU of work done for this call ahead of it (a scanner's read-ahead)."""
        self.counts.hit_bytes += other.counts.hit_bytes
        self.counts.miss_bytes += other.counts.miss_bytes
        self.cpu_user_ns += other.cpu_user_ns
        self.cpu_system_ns += other.cpu_system_ns

    def metrics(self) -> dict[str, int]:
        """The figures by Kudu's names, the call's total duration up to now."""
        now = time.monotonic()
        started = now if self.started is None else self.started
        return {
            "cfile_cache_hit_bytes": self.counts.hit_bytes,
            "cfile_cache_miss_bytes": self.counts.miss_bytes,
            "bytes_read": self.counts.hit_bytes + self.counts.miss_bytes,
            "queue_duration_nanos": max(0, int((started - self.accepted) * 1e9)),
            "total_duration_nanos": max(0, int((now - self.accepted) * 1e9)),
            "cpu_user_nanos": self.cpu_user_ns,
            "cpu_system_nanos": self.cpu_system_ns,
        }


@dataclass
class Scanner:
    id: str
    tablet_id: str
    it: TabletScanner
    schema: pa.Schema
    snapshot_ts: int | None
    created: float = field(default_factory=time.monotonic)
    last_access: float = field(default_factory=time.monotonic)
    ahead: collections.deque[pa.RecordBatch] = field(default_factory=collections.deque)  # read, not sent
    prefetch: asyncio.Future[None] | None = None  # the read of the next batch, in a worker
    prefetch_cost: CallCost | None = None  # what that read cost, charged to the call that sends it
    done: bool = False
    rows: int = 0
    batches: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    request: dict[str, Any] = field(default_factory=dict)  # projection, predicates, read mode: for /scans
    # Kudu's scan resource metrics of the last call (ResourceMetricsPB's names), from its CallCost
    metrics: dict[str, int] = field(default_factory=dict)

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "scanner_id": self.id,
            "tablet_id": self.tablet_id,
            "rows_returned": self.rows,
            "batches": self.batches,
            "idle_s": round(now - self.last_access, 3),
            "age_s": round(now - self.created, 3),
            "snapshot_ts": self.snapshot_ts,
            **self.request,
        }


class ScannerManager:
    def __init__(self, executor: Executor | None, ttl_s: float = 60.0, max_scanners: int = 1000) -> None:
        self.executor = executor
        self.ttl_s = ttl_s
        self.max_scanners = max_scanners
        self.scanners: dict[str, Scanner] = {}
        self.expired = 0
        # Finished scans, newest last, as Kudu's /scans page shows them (bounded).
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_SCANS)
        self._task: asyncio.Task[None] | None = None

    def buffered_bytes(self) -> int:
        """Look-ahead batches the open scanners hold between calls, for the node's memory tracker."""
        return sum(b.nbytes for sc in list(self.scanners.values()) for b in list(sc.ahead))

    def check_capacity(self) -> None:
        if len(self.scanners) >= self.max_scanners:
            raise KuduServiceUnavailable(
                f"{len(self.scanners)} scanners open on this server; retry later", {"retryable": True}
            )

    @staticmethod
    def new(
        tablet_id: str,
        it: TabletScanner,
        schema: pa.Schema,
        snapshot_ts: int | None,
        request: dict[str, Any] | None = None,
    ) -> Scanner:
        """A scanner not yet registered (see :meth:`started`)."""
        sid = f"{_ID_PREFIX}{next(_id_counter):08x}"
        return Scanner(sid, tablet_id, it, schema, snapshot_ts, request=request or {})

    def started(self, sc: Scanner, pulled: tuple[pa.RecordBatch | None, bytes, bool]) -> dict[str, Any]:
        """The answer to a new scan whose first batch was pulled with the open (one worker hop, not two):
        the scanner is registered only when more rows follow, so a point read leaves nothing behind."""
        if pulled[2]:
            self.check_capacity()
            self.scanners[sc.id] = sc
            self._start_prefetch(sc)
        else:
            self.recent.append(sc.to_dict(time.monotonic()))
        return self._reply(sc, *pulled)

    def get(self, scanner_id: str) -> Scanner:
        sc = self.scanners.get(scanner_id)
        if sc is None:
            raise KuduNotFound(
                f"scanner {scanner_id} not found (it expired after {self.ttl_s:.0f}s idle, "
                "finished, or the server restarted)",
                {"error": "SCANNER_EXPIRED"},
            )
        sc.last_access = time.monotonic()
        return sc

    def close(self, scanner_id: str) -> None:
        sc = self.scanners.pop(scanner_id, None)
        if sc is not None:
            self.recent.append(sc.to_dict(time.monotonic()))

    def close_tablet(self, tablet_id: str) -> None:
        for sid in [s.id for s in self.scanners.values() if s.tablet_id == tablet_id]:
            self.close(sid)

    async def next_batch(self, sc: Scanner, cost: CallCost | None = None) -> dict[str, Any]:
        """The next batch as IPC bytes, whether more follow, and the resume key; what the call cost goes
        to ``cost`` and from it to the answer."""
        cost = CallCost(time.monotonic()) if cost is None else cost

        def pull() -> Pulled:
            with cost.measuring():
                return self.pull(sc)

        async with sc.lock:
            if sc.prefetch is not None:
                pending, sc.prefetch = sc.prefetch, None
                await pending
                if sc.prefetch_cost is not None:
                    cost.absorb(sc.prefetch_cost)
                    sc.prefetch_cost = None
            batch, data, more = await asyncio.get_running_loop().run_in_executor(self.executor, pull)
            sc.metrics = cost.metrics()
            out = self._reply(sc, batch, data, more)
            if more:
                self._start_prefetch(sc)
            else:
                self.close(sc.id)
            return out

    def _start_prefetch(self, sc: Scanner) -> None:
        """Read the batch after the look-ahead in a worker now; the scanner's next call waits for it."""
        ahead = CallCost(time.monotonic())

        def read_ahead() -> None:
            with ahead.measuring():
                self._read_ahead(sc)

        try:
            fut = asyncio.get_running_loop().run_in_executor(self.executor, read_ahead)
        except RuntimeError:  # the executor is shut down: the node is stopping, the next call reads
            return
        fut.add_done_callback(_retrieve)  # a scanner closed before its next call leaves no warning
        sc.prefetch, sc.prefetch_cost = fut, ahead

    @staticmethod
    def _read_ahead(sc: Scanner) -> None:
        if not sc.done and len(sc.ahead) < 2:
            b = next(sc.it, None)
            if b is None:
                sc.done = True
            else:
                sc.ahead.append(b)

    @staticmethod
    def _reply(sc: Scanner, batch: pa.RecordBatch | None, data: bytes, more: bool) -> dict[str, Any]:
        sc.last_access = time.monotonic()
        if batch is not None:
            sc.rows += batch.num_rows
            sc.batches += 1
        return {
            "scanner_id": sc.id if more else None,
            "data": data,
            "rows": 0 if batch is None else batch.num_rows,
            "has_more": more,
            "last_key": sc.it.last_key,
            "snapshot_ts": sc.snapshot_ts,
            "resource_metrics": sc.metrics,
        }

    @staticmethod
    def pull(sc: Scanner) -> tuple[pa.RecordBatch | None, bytes, bool]:
        """Next batch, its IPC bytes and whether more follow: all of it off the event loop."""
        batch, more = ScannerManager._next(sc)
        data = batch_to_ipc(batch if batch is not None else pa.RecordBatch.from_pylist([], sc.schema))
        return batch, data, more

    @staticmethod
    def _next(sc: Scanner) -> tuple[pa.RecordBatch | None, bool]:
        batch = sc.ahead.popleft() if sc.ahead else None
        if batch is None and not sc.done:
            batch = next(sc.it, None)
            if batch is None:
                sc.done = True
        if not sc.ahead and not sc.done:
            b = next(sc.it, None)
            if b is None:
                sc.done = True
            else:
                sc.ahead.append(b)
        return batch, bool(sc.ahead)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._reap(), name="scanner-reaper")

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, max(0.05, self.ttl_s / 4)))
            try:
                now = time.monotonic()
                idle = [s for s in self.scanners.values() if now - s.last_access > self.ttl_s and not s.lock.locked()]
                for sc in idle:
                    self.close(sc.id)
                    self.expired += 1
                    log.info("scanner expired", extra={"scanner": sc.id, "tablet": sc.tablet_id})
            except Exception:
                log.exception("scanner reaper pass failed; continuing")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.scanners.clear()

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [s.to_dict(now) for s in self.scanners.values()]

    def recent_scans(self) -> list[dict[str, Any]]:
        return list(self.recent)
