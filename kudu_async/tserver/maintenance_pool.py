"""The tserver's maintenance worker processes: where flushes and compactions write their rowsets.

A worker process has its own GIL, so Parquet encoding, bloom building and fsyncs never hold the event
loop's turn, and it runs at a lower OS priority (``nice``), so on a busy host the kernel runs the event
loop, the WAL and write prepare first. The pool is bounded (``--maintenance-manager-num-threads``
processes forked from a fork server), started with the tserver and replaced when a worker dies: the op
that was running fails with the reason (the maintenance manager records it and retries the op later; the
tablet keeps its frozen stores until a write succeeds, so nothing is lost).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from kudu_async.common.errors import KuduIOError
from kudu_async.fs.tablet_metadata import RowSetMetadata
from kudu_async.server.node import release_freed_memory
from kudu_async.tablet.maintenance_worker import RowsetWriteWork, run_rowset_write

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
OWNER_CHECK_S = 1.0  # how often a worker checks that its tserver still runs


def default_spool_dir() -> str:
    """Shared memory when the host has it (the spooled rows never touch the disk), else the temp dir."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _watch_owner(owner: int) -> None:
    """Exit once the tserver is gone: a worker's parent is the fork server, which a kill -9 of the tserver
    does not stop while a worker holds its pipes."""
    while True:
        time.sleep(OWNER_CHECK_S)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:  # a process of another user took the pid: the tserver is gone
            os._exit(0)


def _init_worker(nice: int, owner: int) -> None:
    """In each worker: ``nice`` below its parent's priority (the fork server, started by the tserver's
    event loop; not below a niced maintenance thread's), and die with its parent (the fork server exits
    when the tserver does, so a kill -9 of the tserver leaves no worker behind)."""
    target = min(19, os.getpriority(os.PRIO_PROCESS, os.getppid()) + nice)
    if target > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, target)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tserver decides when its workers stop
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown still stops the workers
        pass
    threading.Thread(target=_watch_owner, args=(owner,), name="owner-watch", daemon=True).start()


def _write_rowsets(work: RowsetWriteWork) -> list[RowSetMetadata]:
    """The worker's job: write, then hand the encoding buffers back to the OS (an idle worker keeps only
    its modules, ~60 MiB)."""
    try:
        return run_rowset_write(work)
    finally:
        release_freed_memory()


def _anon_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):  # gone, or no procfs: nothing to count
        return 0
    return 0


class MaintenanceProcessPool:
    """A :class:`~kudu_async.tablet.maintenance_worker.RowsetWriter` over ``num_workers`` processes."""

    def __init__(self, num_workers: int, *, nice: int = 0, spool_dir: str | None = None) -> None:
        if num_workers < 1:
            raise ValueError(f"maintenance pool needs at least one worker process, got {num_workers}")
        if not 0 <= nice <= 19:
            raise ValueError(f"maintenance worker nice value must be in [0, 19], got {nice}")
        self.num_workers = num_workers
        self.nice = nice
        self.spool_dir = spool_dir or default_spool_dir()
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        self._ready = threading.Event()  # the current pool's workers answered
        self._starting = False
        self.restarts = 0  # workers found dead and the pool replaced
        self.in_thread = 0  # writes run in the calling thread while the workers were not up

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise KuduIOError("maintenance worker pool is shut down")
            if self._pool is None:
                # Workers fork from a server process that imported this module once (a spawned worker
                # would import the tserver's main module and all it needs: seconds on a busy host, paid
                # again for every replaced worker); the server process itself has no threads to fork.
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload([__name__])
                self._pool = ProcessPoolExecutor(
                    self.num_workers,
                    mp_context=ctx,
                    initializer=_init_worker,
                    initargs=(self.nice, os.getpid()),
                )
            return self._pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = None
                self._ready.clear()
                self.restarts += 1
        broken.shutdown(wait=False, cancel_futures=True)

    def _start_in_background(self) -> None:
        with self._lock:
            if self._starting or self._closed:
                return
            self._starting = True
        threading.Thread(target=self._background_start, name="maintenance-pool-start", daemon=True).start()

    def _background_start(self) -> None:
        try:
            self.start()
        except Exception as e:  # the next write runs in its thread and tries again
            log.warning("maintenance worker processes did not start: %r", e)
        finally:
            with self._lock:
                self._starting = False

    def start(self) -> None:
        """Start the fork server and the workers and wait till they answer (the fork server imports its
        modules first: seconds on a busy host). Call it in a worker thread."""
        pool = self._executor()
        # The pool starts a process per job while none is idle.
        jobs = [pool.submit(os.getpid) for _ in range(self.num_workers)]
        try:
            for job in jobs:
                job.result()
        except BrokenProcessPool as e:
            self._replace(pool)
            raise KuduIOError(f"maintenance worker processes did not start: {e}") from e
        with self._lock:
            if self._pool is pool:
                self._ready.set()

    def __call__(self, work: RowsetWriteWork) -> list[RowSetMetadata]:
        """Run ``work`` in a worker and wait for it (called from a maintenance thread). Until the workers are
        up (the tserver just started, or a dead worker's pool is being replaced) the write runs in the
        calling thread instead, as without worker processes: a flush never waits for a process start."""
        if self._closed:
            raise KuduIOError("maintenance worker pool is shut down")
        if not self._ready.is_set():
            self._start_in_background()
            self.in_thread += 1
            return run_rowset_write(work)
        pool = self._executor()
        try:
            return pool.submit(_write_rowsets, work).result()
        except BrokenProcessPool as e:
            self._replace(pool)
            log.warning("maintenance worker process died writing rowsets %d..: %s", work.first_id, e)
            raise KuduIOError(f"maintenance worker process died writing rowsets {work.first_id}..: {e}") from e

    def worker_pids(self) -> list[int]:
        """The live workers' process ids (for the admin page and tests)."""
        with self._lock:
            pool = self._pool
        procs = getattr(pool, "_processes", None) or {}
        return sorted(list(procs))  # list() copies the dict in one step, while the pool may change it

    def anon_bytes(self) -> int:
        """Anonymous memory of the workers (their modules and a running write): counted in the node's
        memory, as Kudu counts its maintenance threads' allocations."""
        return sum(_anon_bytes(pid) for pid in self.worker_pids())

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            # Stopped after the maintenance manager, so no write is running: nothing to wait for. A write
            # cut short would leave orphan blocks only.
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                p.kill()
            for p in procs:
                p.join(timeout=5.0)
