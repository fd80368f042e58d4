"""A write-and-scan workload that runs through node restarts and says whether a client ever saw one.

A writer inserts keys 0, 1, 2, ... into a ``(key int64, v string)`` table (``v`` is ``f"v{key}"``) and a
reader scans the whole table again and again, each on a client of its own in a thread of its own. Either
one stops at its first failure: an operation the client could not complete, or a scan that returned fewer
rows than the writer had seen acknowledged before it began. A restart done right costs neither, and at the
end the table holds exactly the keys acknowledged.

Used by the integration tests of graceful restarts and of ``scripts/rolling_restart.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType

from kudu_async.client.session import FLUSH_MANUAL
from kudu_async.client.sync import connect


class WriteScanWorkload:
    """The writer and the reader over one table; a context manager that starts them and stops them.

    ``batch_rows`` rows go into one session flush (in ``flush_mode`` FLUSH_AUTO_SYNC each row is its own
    write); the writer stops after ``max_rows`` (None: never), the reader pauses ``scan_pause_s`` between
    scans. The counters are read by the test's thread while the workers write them: each is one int or
    float, replaced whole."""

    def __init__(
        self,
        master_addresses: Sequence[str],
        table: str,
        *,
        flush_mode: str = FLUSH_MANUAL,
        batch_rows: int = 50,
        max_rows: int | None = None,
        scan_pause_s: float = 0.0,
    ) -> None:
        if batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, got {batch_rows}")
        self.master_addresses = list(master_addresses)
        self.table = table
        self.flush_mode = flush_mode
        self.batch_rows = batch_rows
        self.max_rows = max_rows
        self.scan_pause_s = scan_pause_s
        self.written = 0  # keys 0 .. written-1 are acknowledged
        self.scans = 0  # scans that saw every row acknowledged before they began
        self.slowest_write_s = 0.0  # the longest write of one batch (apply and flush)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, name=f"workload-writer-{table}", daemon=True),
            threading.Thread(target=self._scan, name=f"workload-reader-{table}", daemon=True),
        ]

    def __enter__(self) -> WriteScanWorkload:
        for t in self._threads:
            t.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self, join_timeout_s: float = 60.0) -> None:
        """Stop both workers and wait for them (a write or scan in flight ends first)."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(join_timeout_s)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise AssertionError(f"workload threads {alive} still running {join_timeout_s}s after stop")

    def wait(self, what: str, rows: int, scans: int = 0, timeout_s: float = 30.0) -> None:
        """Block until ``rows`` rows are acknowledged and ``scans`` scans done; AssertionError naming
        ``what`` at the first worker failure or once ``timeout_s`` has passed. The rows asked for are capped
        at ``max_rows``, where the writer stops."""
        if self.max_rows is not None:
            rows = min(rows, self.max_rows)
        deadline = time.monotonic() + timeout_s
        while self.written < rows or self.scans < scans:
            if self.errors:
                raise AssertionError(f"the workload failed while waiting for {what}: {self.errors}")
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout_s}s waiting for {what} ({self.written} rows written, {self.scans} scans)"
                )
            time.sleep(0.1)

    def check_every_row(self) -> None:
        """AssertionError unless the table holds exactly the keys acknowledged; call after ``stop``."""
        with connect(self.master_addresses) as client:
            rows = client.table(self.table).scanner().open().read_all_tuples()
        keys = sorted(row[0] for row in rows)
        if keys != list(range(self.written)):
            missing = sorted(set(range(self.written)) - set(keys))
            extra = sorted(set(keys) - set(range(self.written)))
            raise AssertionError(
                f"{self.table} holds {len(keys)} rows for {self.written} acknowledged: missing keys "
                f"{missing[:20]}, unexpected keys {extra[:20]}"
            )

    def _write(self) -> None:
        with connect(self.master_addresses) as client:
            t = client.table(self.table)
            s = client.new_session(flush_mode=self.flush_mode)
            key = 0
            while not self._stop.is_set() and (self.max_rows is None or key < self.max_rows):
                end = key + self.batch_rows if self.max_rows is None else min(key + self.batch_rows, self.max_rows)
                keys = f"key {key}" if end == key + 1 else f"keys {key}..{end - 1}"
                began = time.monotonic()
                try:
                    for k in range(key, end):
                        s.apply(t.new_insert({"key": k, "v": f"v{k}"}))
                    if self.flush_mode == FLUSH_MANUAL:
                        s.flush()
                except Exception as e:  # any failure the client returned is what the workload reports
                    self.errors.append(f"write of {keys}: {e!r}")
                    return
                if s.count_pending_errors():
                    self.errors.append(f"write of {keys}: {s.get_pending_errors()[0]}")
                    return
                self.slowest_write_s = max(self.slowest_write_s, time.monotonic() - began)
                key = end
                self.written = key

    def _scan(self) -> None:
        with connect(self.master_addresses) as client:
            t = client.table(self.table)
            while not self._stop.is_set():
                floor = self.written
                try:
                    n = len(t.scanner().open().read_all_tuples())
                except Exception as e:  # any failure the client returned is what the workload reports
                    self.errors.append(f"scan: {e!r}")
                    return
                if n < floor:
                    self.errors.append(f"scan saw {n} rows after {floor} were acknowledged")
                    return
                self.scans += 1
                if self.scan_pause_s:
                    self._stop.wait(self.scan_pause_s)
