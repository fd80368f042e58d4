"""Write sessions (kudu-python's ``Session``, async core): buffer operations, flush them by the session's
mode (manual, on every apply, or in the background on a watermark and an interval), collect per-row errors.

Flushes hand the operations to a ``Batcher`` (``client/batcher.py``), which routes them to the tablets'
leaders and retries; the blocking facade stages operations in its own thread (``client/sync.py``) and
hands them over in batches through ``StagedOps``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from kudu_async.client.batcher import (
    Batcher,
    Buffered,
    ErrorCollector,
    KuduError,
    RowBatch,
    WriteClient,
    unset_nulls,
    widen,
)
from kudu_async.client.table import OPERATIONS, FailedRow, Table, WriteOperation, op_type_of
from kudu_async.common.errors import KuduIncomplete, KuduInvalidArgument

log = logging.getLogger(__name__)

FLUSH_AUTO_SYNC = "sync"
FLUSH_AUTO_BACKGROUND = "background"
FLUSH_MANUAL = "manual"
_FLUSH_MODES = {
    "sync": FLUSH_AUTO_SYNC,
    "auto_sync": FLUSH_AUTO_SYNC,
    "auto_flush_sync": FLUSH_AUTO_SYNC,
    "background": FLUSH_AUTO_BACKGROUND,
    "auto_background": FLUSH_AUTO_BACKGROUND,
    "auto_flush_background": FLUSH_AUTO_BACKGROUND,
    "manual": FLUSH_MANUAL,
    "manual_flush": FLUSH_MANUAL,
}

MAX_BUFFERED_OPS = 100_000  # operations in the buffer being filled (its bytes are bounded by the buffer space)


class StagedOps(Protocol):
    """Operations checked and held for this session outside its loop (the blocking Session stages rows in
    the caller's thread): they count as buffered, and are taken before a flush."""

    def counts(self) -> tuple[int, int]:
        """(operations, bytes) staged; callable from any thread without blocking."""
        ...

    async def take(self) -> None:
        """Buffer every staged operation into the session, in staging order."""
        ...


def row_bytes(row: dict[str, Any]) -> int:
    """The buffer space one validated row takes."""
    n = 0
    for v in row.values():
        n += len(v) if isinstance(v, str | bytes) else 8
    return n + 16


class AsyncSession:
    def __init__(  # noqa: PLR0913 - kudu-python's new_session(flush_mode, timeout_ms, **kwargs) keywords
        self,
        client: WriteClient,
        flush_mode: str = FLUSH_MANUAL,
        timeout_ms: int = 5000,
        mutation_buffer_sz: int = 7 * 1024 * 1024,
        mutation_buffer_max_num: int = 2,
        flush_interval_ms: int = 1000,
        flush_watermark: float = 0.5,
        *,
        mutation_buffer_watermark: float | None = None,
        mutation_buffer_flush_interval: int | None = None,
    ) -> None:
        """kudu-python's ``new_session`` keywords (``mutation_buffer_watermark``, ``mutation_buffer_flush_interval``)
        are accepted as well as the shorter ``flush_watermark`` and ``flush_interval_ms``."""
        self.client = client
        self.flush_mode = FLUSH_MANUAL
        self.set_flush_mode(flush_mode)
        self.timeout_ms = timeout_ms
        self.set_timeout_ms(timeout_ms)
        self.buffer_bytes_limit = mutation_buffer_sz
        self.buffer_max_num = 2
        self.set_mutation_buffer_max_num(mutation_buffer_max_num)
        self.flush_interval_ms = flush_interval_ms
        self.flush_watermark = flush_watermark
        if mutation_buffer_watermark is not None:
            self.set_mutation_buffer_flush_watermark(mutation_buffer_watermark)
        if mutation_buffer_flush_interval is not None:
            self.set_mutation_buffer_flush_interval(mutation_buffer_flush_interval)
        self._buf: list[Buffered] = []
        self._buf_bytes = 0
        self._errors = ErrorCollector()
        self._inflight: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self.staged: StagedOps | None = None  # set by the blocking Session that stages for this one
        self._closed = False

    # --- configuration (kudu-python names) -----------------------------------------------------------

    def set_flush_mode(self, mode: str) -> None:
        m = _FLUSH_MODES.get(str(mode).lower())
        if m is None:
            raise KuduInvalidArgument(f"flush mode must be one of manual, sync, background; not {mode!r}")
        self.flush_mode = m

    def set_timeout_ms(self, ms: int) -> None:
        if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
            raise KuduInvalidArgument("timeout_ms must be a positive integer")
        self.timeout_ms = ms

    def set_mutation_buffer_space(self, size_bytes: int) -> None:
        self.buffer_bytes_limit = int(size_bytes)

    def set_mutation_buffer_max_num(self, n: int) -> None:
        """Kudu's meaning: how many buffers a session may have - the one filling plus background flushes in
        flight (apply() waits for a flush to finish when it would need one more); 0 means no limit."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise KuduInvalidArgument("mutation_buffer_max_num is a number of buffers, >= 0 (0: no limit)")
        self.buffer_max_num = n

    def set_mutation_buffer_flush_watermark(self, watermark: float) -> None:
        if not 0.0 < watermark <= 1.0:
            raise KuduInvalidArgument("flush watermark is a fraction in (0, 1]")
        self.flush_watermark = watermark

    def set_mutation_buffer_flush_interval(self, ms: int) -> None:
        self.flush_interval_ms = int(ms)

    # --- applying ------------------------------------------------------------------------------------

    def check(self, op: WriteOperation) -> Buffered:
        """Validate one operation for buffering (pure: callable from any thread); a bad row is refused
        here, naming why."""
        if self._closed:
            raise KuduIncomplete("session is closed")
        if not isinstance(op, WriteOperation):
            raise KuduInvalidArgument(f"apply() takes an operation from table.new_insert() etc., not {op!r}")
        schema, version = op.table.schema, op.table.schema_version
        return op, op.validated(schema), schema, version

    async def apply(self, op: WriteOperation) -> None:
        """Buffer (or, in FLUSH_AUTO_SYNC, send) one operation; a bad row is refused here, naming why."""
        item = self.check(op)
        if self.flush_mode == FLUSH_AUTO_SYNC:
            errors_before = len(self._errors.errors)
            await self._write_ops([item])
            if len(self._errors.errors) > errors_before:
                raise self._errors.errors[-1].status
            return
        await self.buffer(item)

    def check_space(self, size: int, count: int) -> None:
        """FLUSH_MANUAL: refuse an operation the buffer (with rows staged for it) has no room for."""
        staged_ops, staged_bytes = self.staged.counts() if self.staged is not None else (0, 0)
        if (
            self._buf_bytes + staged_bytes + size > self.buffer_bytes_limit
            or len(self._buf) + staged_ops + count > MAX_BUFFERED_OPS
        ):
            raise KuduIncomplete(
                f"mutation buffer is full ({len(self._buf) + staged_ops} operations, "
                f"{self._buf_bytes + staged_bytes} bytes); flush() first or "
                "set_mutation_buffer_space()"
            )

    async def buffer(self, item: Buffered, size: int | None = None) -> None:
        """Buffer one checked operation (``size``: its ``row_bytes``, if known), flushing as the mode says."""
        size = row_bytes(item[1]) if size is None else size
        if self.flush_mode == FLUSH_MANUAL:
            self.check_space(size, 1)
        elif self._buf_bytes + size > self.buffer_bytes_limit or len(self._buf) >= MAX_BUFFERED_OPS:
            await self._start_background_flush()
            while self._inflight and self._buf and (self._buf_bytes + size > self.buffer_bytes_limit):
                await asyncio.wait(set(self._inflight), return_when=asyncio.FIRST_COMPLETED)
        while not self._buf and 0 < self.buffer_max_num <= len(self._inflight):
            await asyncio.wait(set(self._inflight), return_when=asyncio.FIRST_COMPLETED)  # no free buffer yet
        self._buf.append(item)
        self._buf_bytes += size
        if self.flush_mode == FLUSH_AUTO_BACKGROUND:
            self.ensure_timer()
            if self._buf_bytes >= self.buffer_bytes_limit * self.flush_watermark:
                await self._start_background_flush()

    def timer_running(self) -> bool:
        return self._timer is not None and not self._timer.done()

    async def apply_arrow(
        self, table: Table, batch: pa.RecordBatch | pa.Table, op: str = "upsert", ignore_null: bool = False
    ) -> int:
        """Write a whole Arrow batch of one operation type now (the bulk path: no per-row Python).

        Columns may be any subset in any order (missing ones take their defaults for inserts and upserts;
        updates set only the given columns). With ``ignore_null`` a null non-key cell is left unset rather
        than set to null, so an upsert or update keeps the stored value (kudu-spark's ``ignoreNull``).
        Returns the number of rows sent; failed rows go to ``get_pending_errors()`` like any other, and this
        raises like ``flush()`` when some failed.
        """
        op_type = op_type_of(op)
        name = OPERATIONS[str(op).lower()].op_name
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0]
                if batch.num_rows
                else pa.RecordBatch.from_pylist([], batch.schema)
            )
        given = set(batch.schema.names)
        checked, bad = table.schema.validate_batch_rows(batch, for_op=name)
        full, set_cols = widen(table.schema, checked, given)
        if ignore_null:
            set_cols = unset_nulls(table.schema, full, set_cols)
        n: int = full.num_rows
        errors_before = self._errors.mark()
        keep = np.ones(n, dtype=bool)
        for i, msg in bad.items():
            keep[i] = False
            self._errors.add(KuduError(KuduInvalidArgument(msg), FailedRow(full.slice(i, 1).to_pylist()[0], name)))
        if not keep.all():
            idx = pa.array(np.flatnonzero(keep))
            full = full.take(idx)
            set_cols = None if set_cols is None else set_cols[keep]
        if full.num_rows:
            await self._batcher().send(
                RowBatch(
                    table,
                    full,
                    np.full(full.num_rows, int(op_type), dtype=np.int8),
                    set_cols,
                    None,
                    table.schema,
                    table.schema_version,
                )
            )
        self._errors.raise_if_new(errors_before, "apply_arrow")
        return n

    async def flush(self) -> None:
        """Send everything buffered and wait; raises KuduBadStatus when rows failed (see get_pending_errors)."""
        errors_before = self._errors.mark()
        if self.staged is not None:
            await self.staged.take()
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        if self._buf:
            ops, self._buf, self._buf_bytes = self._buf, [], 0
            await self._write_ops(ops)
        self._errors.raise_if_new(errors_before, "flush")

    async def _start_background_flush(self) -> None:
        if not self._buf:
            return
        ops, self._buf, self._buf_bytes = self._buf, [], 0
        task = asyncio.get_running_loop().create_task(self._write_ops(ops))
        self._inflight.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background flush failed", exc_info=task.exception())

    def ensure_timer(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._interval_flusher())

    async def _interval_flusher(self) -> None:
        while not self._closed and self.flush_mode == FLUSH_AUTO_BACKGROUND:
            await asyncio.sleep(self.flush_interval_ms / 1000.0)
            if self.staged is not None:
                await self.staged.take()
            await self._start_background_flush()

    async def close(self) -> None:
        """Flush what is buffered, then stop the background flusher."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._timer

    def abandon(self) -> asyncio.Task[None] | None:
        """The client is closing: stop the background flusher (returned, cancelled, for the caller to await).
        As Kudu's client does, what is still buffered is dropped with a warning, not flushed behind the
        caller's back; close() flushes."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        left = self.count_buffered_operations()
        if left and not self._closed:
            log.warning(
                "client closed with %d operation(s) buffered in a session that was never flushed or "
                "closed: they are dropped",
                left,
            )
        self._closed = True
        return timer

    # --- errors and metrics --------------------------------------------------------------------------

    def get_pending_errors(self) -> tuple[list[KuduError], bool]:
        """(errors, overflowed) and clear them, as kudu-python does."""
        return self._errors.take()

    def count_pending_errors(self) -> int:
        return len(self._errors.errors)

    def get_write_op_metrics(self) -> dict[str, int]:
        return dict(self._errors.metrics)

    def count_buffered_operations(self) -> int:
        return len(self._buf) + (self.staged.counts()[0] if self.staged is not None else 0)

    # --- sending ---------------------------------------------------------------------------------------

    def _batcher(self) -> Batcher:
        # Each Write RPC batch gets the session timeout for itself, as in Kudu.
        return Batcher(self.client, self._errors, self.timeout_ms / 1000.0)

    async def _write_ops(self, ops: list[Buffered]) -> None:
        await self._batcher().write_ops(ops)
