"""Write sessions: buffer operations, route them to tablet leaders in per-tablet Arrow batches, collect
per-row errors (kudu-python's ``Session``, async core).

Routing is vectorised: a flush builds one Arrow batch per table, computes every row's partition key
with pyarrow, finds each row's tablet by binary search over the tablets' start keys, and sends one Write
per tablet (split to bounded RPCs). Tablets are written concurrently; a tablet's RPCs go in order, so
operations on one row apply in the order they were applied to the session. A write that meets a schema
change is rebuilt for the new schema; a tablet that moved is re-routed after a location refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kudu_async.client.meta_cache import TableLocations
from kudu_async.client.table import OPERATIONS, Table, WriteOperation, op_type_of
from kudu_async.common.errors import (
    KuduBadStatus,
    KuduIncomplete,
    KuduInvalidArgument,
    KuduIOError,
    KuduNotFound,
    error_from_code,
)
from kudu_async.common.retry import Deadline
from kudu_async.common.row_conversion import OpType, encode_row_operations, op_mask
from kudu_async.common.schema import ColumnSchema, Schema

if TYPE_CHECKING:
    from kudu_async.client.aio import AsyncClient

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

MAX_ROWS_PER_RPC = 20_000
MAX_BYTES_PER_RPC = 8 * 1024 * 1024
MAX_PENDING_ERRORS = 10_000
MAX_BUFFERED_OPS = 100_000  # operations in the buffer being filled (its bytes are bounded by the buffer space)
MAX_TABLETS_IN_FLIGHT = 32
STAGE_ROWS = 1000  # the blocking Session hands rows to the loop this many at a time ...
STAGE_BYTES = 1024 * 1024  # ... or at this many bytes
MAX_REROUTES = 10
_IGNORE_KINDS = (int(OpType.INSERT_IGNORE), int(OpType.UPDATE_IGNORE), int(OpType.DELETE_IGNORE))
_METRIC_NAMES = {
    OpType.INSERT: "insert",
    OpType.INSERT_IGNORE: "insert",
    OpType.UPSERT: "upsert",
    OpType.UPSERT_IGNORE: "upsert",
    OpType.UPDATE: "update",
    OpType.UPDATE_IGNORE: "update",
    OpType.DELETE: "delete",
    OpType.DELETE_IGNORE: "delete",
}


class KuduError:
    """One failed row of a flush (kudu-python's ``KuduError``): the status and the operation."""

    def __init__(self, status: KuduBadStatus, op: WriteOperation | dict[str, Any], possibly_successful: bool = False):
        self.status = status
        self._op = op
        self._possibly = possibly_successful

    def failed_op(self) -> WriteOperation | dict[str, Any]:
        return self._op

    def was_possibly_successful(self) -> bool:
        return self._possibly

    def __str__(self) -> str:
        return f"{self.status} ({self._op!r})"

    __repr__ = __str__


@dataclass
class _Batch:
    """Row operations for one table: full-schema rows, one op type per row, the cells each row sets."""

    table: Table
    rows: pa.RecordBatch
    op_types: np.ndarray  # int8
    set_cols: np.ndarray | None  # rows x columns bool; None = every cell set
    ops: Sequence[WriteOperation] | None  # for errors; None for Arrow input (the row itself is reported)
    schema: Schema  # the schema ``rows`` were built for, and its version (the table's may be newer by now)
    schema_version: int

    def failed(self, i: int) -> WriteOperation | dict[str, Any]:
        if self.ops is not None:
            return self.ops[i]
        return self.rows.slice(i, 1).to_pylist()[0]


# An applied operation: the op, its validated row, and the table schema (and version) it was validated against.
_Buffered = tuple[WriteOperation, dict[str, Any], Schema, int]


def _row_bytes(row: dict[str, Any]) -> int:
    n = 0
    for v in row.values():
        n += len(v) if isinstance(v, str | bytes) else 8
    return n + 16


class AsyncSession:
    def __init__(
        self,
        client: AsyncClient,
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
        self._buf: list[_Buffered] = []
        self._buf_bytes = 0
        self._errors: list[KuduError] = []
        self._overflowed = False
        self._failed_total = 0  # every failed row, also those past MAX_PENDING_ERRORS
        self._metrics: dict[str, int] = {f"successful_{k}s": 0 for k in ("insert", "upsert", "update", "delete")}
        self._metrics.update({f"{k}_ignore_errors": 0 for k in ("insert", "upsert", "update", "delete")})
        self._inflight: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._staged: list[tuple[_Buffered, int]] = []  # (op, its bytes) checked in a caller thread (stage())
        self._staged_bytes = 0
        self._stage_lock = threading.Lock()
        self._take_lock = asyncio.Lock()
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

    def check(self, op: WriteOperation) -> _Buffered:
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
            errors_before = len(self._errors)
            await self._write_ops([item])
            if len(self._errors) > errors_before:
                raise self._errors[-1].status
            return
        await self._buffer(item)

    def _check_space(self, size: int, count: int) -> None:
        """FLUSH_MANUAL: refuse an operation the buffer (with rows staged for it) has no room for."""
        if (
            self._buf_bytes + self._staged_bytes + size > self.buffer_bytes_limit
            or len(self._buf) + len(self._staged) + count > MAX_BUFFERED_OPS
        ):
            raise KuduIncomplete(
                f"mutation buffer is full ({len(self._buf) + len(self._staged)} operations, "
                f"{self._buf_bytes + self._staged_bytes} bytes); flush() first or "
                "set_mutation_buffer_space()"
            )

    async def _buffer(self, item: _Buffered, size: int | None = None) -> None:
        size = _row_bytes(item[1]) if size is None else size
        if self.flush_mode == FLUSH_MANUAL:
            self._check_space(size, 1)
        elif self._buf_bytes + size > self.buffer_bytes_limit or len(self._buf) >= MAX_BUFFERED_OPS:
            await self._start_background_flush()
            while self._inflight and self._buf and (self._buf_bytes + size > self.buffer_bytes_limit):
                await asyncio.wait(set(self._inflight), return_when=asyncio.FIRST_COMPLETED)
        while not self._buf and 0 < self.buffer_max_num <= len(self._inflight):
            await asyncio.wait(set(self._inflight), return_when=asyncio.FIRST_COMPLETED)  # no free buffer yet
        self._buf.append(item)
        self._buf_bytes += size
        if self.flush_mode == FLUSH_AUTO_BACKGROUND:
            self._ensure_timer()
            if self._buf_bytes >= self.buffer_bytes_limit * self.flush_watermark:
                await self._start_background_flush()

    # --- staging: the blocking facade's batched hand-off ---------------------------------------------

    def stage(self, item: _Buffered) -> int:
        """Queue a checked operation from the caller's thread without a hop to the event loop (one hop
        per STAGE_ROWS rows instead of one per row); returns how many are staged. The loop takes them in
        order (``take_staged``), on the caller's hand-off or on the background flush interval."""
        size = _row_bytes(item[1])
        with self._stage_lock:
            if self.flush_mode == FLUSH_MANUAL:
                self._check_space(size, 1)
            self._staged.append((item, size))
            self._staged_bytes += size
            return len(self._staged)

    def staged_enough(self) -> bool:
        """Whether the caller should hand its staged rows over now (bounded in rows and bytes)."""
        return len(self._staged) >= STAGE_ROWS or self._staged_bytes >= min(
            STAGE_BYTES, self.buffer_bytes_limit * self.flush_watermark
        )

    async def take_staged(self) -> None:
        """Buffer every staged operation (on the loop, in staging order: the swap and the buffering
        happen under one asyncio lock, so two takers never interleave)."""
        async with self._take_lock:
            with self._stage_lock:
                items, self._staged, self._staged_bytes = self._staged, [], 0
            for k, (item, size) in enumerate(items):
                try:
                    await self._buffer(item, size)
                except BaseException:  # nothing is lost: what was not buffered is staged again, in order
                    with self._stage_lock:
                        self._staged[:0] = items[k:]
                        self._staged_bytes += sum(sz for _, sz in items[k:])
                    raise

    def has_staged(self) -> bool:
        return bool(self._staged)

    def timer_running(self) -> bool:
        return self._timer is not None and not self._timer.done()

    async def apply_arrow(self, table: Table, batch: pa.RecordBatch | pa.Table, op: str = "upsert") -> int:
        """Write a whole Arrow batch of one operation type now (the bulk path: no per-row Python).

        Columns may be any subset in any order (missing ones take their defaults for inserts and upserts;
        updates set only the given columns). Returns the number of rows sent; failed rows go to
        ``get_pending_errors()`` like any other, and this raises like ``flush()`` when some failed.
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
        full, set_cols = _widen(table.schema, checked, given)
        n = full.num_rows
        errors_before = (len(self._errors), self._failed_total)
        keep = np.ones(n, dtype=bool)
        for i, msg in bad.items():
            keep[i] = False
            self._add_error(KuduError(KuduInvalidArgument(msg), full.slice(i, 1).to_pylist()[0]))
        if not keep.all():
            idx = pa.array(np.flatnonzero(keep))
            full = full.take(idx)
            set_cols = None if set_cols is None else set_cols[keep]
        if full.num_rows:
            await self._send(
                _Batch(
                    table,
                    full,
                    np.full(full.num_rows, int(op_type), dtype=np.int8),
                    set_cols,
                    None,
                    table.schema,
                    table.schema_version,
                )
            )
        self._raise_if_new_errors(errors_before, "apply_arrow")
        return n

    async def flush(self) -> None:
        """Send everything buffered and wait; raises KuduBadStatus when rows failed (see get_pending_errors)."""
        errors_before = (len(self._errors), self._failed_total)
        if self._staged:
            await self.take_staged()
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        if self._buf:
            ops, self._buf, self._buf_bytes = self._buf, [], 0
            await self._write_ops(ops)
        self._raise_if_new_errors(errors_before, "flush")

    def _raise_if_new_errors(self, before: tuple[int, int], what: str) -> None:
        """``before``: (errors kept, rows failed) when the call started."""
        kept_before, failed_before = before
        failed = self._failed_total - failed_before
        if failed > 0:
            first: Any = (
                self._errors[kept_before]
                if len(self._errors) > kept_before
                else self._errors[-1]
                if self._errors
                else "(already taken by get_pending_errors)"
            )
            dropped = (
                ""
                if len(self._errors) - kept_before == failed
                else f" (only the first {MAX_PENDING_ERRORS} errors are kept)"
            )
            raise KuduIOError(
                f"{what}: {failed} row(s) failed{dropped}; first: {first}; see get_pending_errors()", {"errors": failed}
            )

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

    def _ensure_timer(self) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._interval_flusher())

    async def _interval_flusher(self) -> None:
        while not self._closed and self.flush_mode == FLUSH_AUTO_BACKGROUND:
            await asyncio.sleep(self.flush_interval_ms / 1000.0)
            if self._staged:
                await self.take_staged()
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

    def _add_error(self, err: KuduError) -> None:
        self._failed_total += 1
        if len(self._errors) >= MAX_PENDING_ERRORS:
            self._overflowed = True
            return
        self._errors.append(err)

    def get_pending_errors(self) -> tuple[list[KuduError], bool]:
        """(errors, overflowed) and clear them, as kudu-python does."""
        out, over = self._errors, self._overflowed
        self._errors, self._overflowed = [], False
        return out, over

    def count_pending_errors(self) -> int:
        return len(self._errors)

    def get_write_op_metrics(self) -> dict[str, int]:
        return dict(self._metrics)

    def count_buffered_operations(self) -> int:
        return len(self._buf) + len(self._staged)

    # --- sending ---------------------------------------------------------------------------------------

    async def _write_ops(self, ops: list[_Buffered]) -> None:
        by_table: dict[str, list[_Buffered]] = {}
        for item in ops:
            by_table.setdefault(item[0].table.id, []).append(item)

        async def in_order(items: list[_Buffered]) -> None:
            # Rows validated against different schema versions (an alter between two applies) go as separate
            # batches, one after the other, so operations on one row still apply in order.
            for _, run in itertools.groupby(items, key=lambda item: item[3]):
                await self._send(_ops_to_batch(list(run)))

        await asyncio.gather(*(in_order(items) for items in by_table.values()))

    async def _send(self, b: _Batch) -> None:
        """Route a table's batch to its tablets and write them (tablets concurrently, in order per tablet).
        Never raises for a tablet's failure: each row gets its own outcome (written, a row error, or the
        error of the write that carried it), so rows other tablets confirmed are never reported failed."""
        # Routing (locations, re-routing after a move) shares one deadline; each Write RPC batch then gets
        # the session timeout for itself, as in Kudu, so a bulk apply_arrow is not cut by one timeout.
        deadline = Deadline(self.timeout_ms / 1000.0, f"routing {b.rows.num_rows} rows of table {b.table.name}")
        await self._route_and_write(b, deadline, refresh=False)

    def _fail_rows(self, b: _Batch, rows: Any, err: KuduBadStatus, possibly_successful: bool) -> None:
        for i in rows:
            if len(self._errors) >= MAX_PENDING_ERRORS:  # past the cap only the count is kept
                self._failed_total += 1
                self._overflowed = True
                continue
            self._add_error(KuduError(err, b.failed(int(i)), possibly_successful=possibly_successful))

    async def _route_and_write(self, b: _Batch, deadline: Deadline, refresh: bool, hops: int = 0) -> None:
        try:
            locs = await self.client.meta.locations(b.table.id, deadline, refresh=refresh)
            where = locs.assign(b.table.partition_schema.partition_keys(b.rows))
        except KuduBadStatus as e:  # nothing of this batch was sent
            self._fail_rows(b, range(b.rows.num_rows), e, possibly_successful=False)
            return
        for i in np.flatnonzero(where < 0).tolist():
            self._add_error(
                KuduError(
                    KuduNotFound(f"no tablet of table {b.table.name} covers this row (no range partition for it)"),
                    b.failed(i),
                )
            )
        tablets = [int(t) for t in np.unique(where[where >= 0])]
        sem = asyncio.Semaphore(MAX_TABLETS_IN_FLIGHT)
        moved: list[np.ndarray] = []

        async def one(t: int) -> None:
            rows = np.flatnonzero(where == t)
            async with sem:
                left = await self._write_tablet(b, locs, t, rows)
            if left is not None and len(left):
                moved.append(left)

        await asyncio.gather(*(one(t) for t in tablets))
        if moved:  # tablets not found where the cache said: refresh and route those rows again
            idx = np.sort(np.concatenate(moved))
            sub = _Batch(
                b.table,
                b.rows.take(pa.array(idx)),
                b.op_types[idx],
                None if b.set_cols is None else b.set_cols[idx],
                None if b.ops is None else [b.ops[i] for i in idx.tolist()],
                b.schema,
                b.schema_version,
            )
            if hops >= MAX_REROUTES:
                self._fail_rows(
                    sub,
                    range(len(idx)),
                    KuduNotFound(
                        f"{len(idx)} rows of table {b.table.name} found no tablet after {hops} location refreshes "
                        "(tablets keep moving or being dropped)"
                    ),
                    possibly_successful=False,
                )
                return
            again = Deadline(self.timeout_ms / 1000.0, f"re-routing {len(idx)} rows of table {b.table.name}")
            await again.backoff(None)
            await self._route_and_write(sub, again, refresh=True, hops=hops + 1)

    async def _write_tablet(self, b: _Batch, locs: TableLocations, t: int, rows: np.ndarray) -> np.ndarray | None:
        """Write ``rows`` of ``b`` to tablet ``t`` in ordered RPCs; returns the rows to re-route if it moved.
        A failed RPC fails its rows (maybe applied) and the tablet's later rows (not sent, so that
        operations on one row never apply out of order)."""
        tablet = locs.tablets[t]
        segs = _segments(b, rows)
        for k, seg in enumerate(segs):
            try:
                await self._write_segment(b, tablet.tablet_id, seg)
            except _TabletMoved:
                return rows[np.searchsorted(rows, seg[0]) :]
            except KuduBadStatus as e:
                self._fail_rows(b, seg, e, possibly_successful=True)
                for later in segs[k + 1 :]:
                    self._fail_rows(b, later, e, possibly_successful=False)
                return None
        return None

    async def _write_segment(self, b: _Batch, tablet_id: str, seg: np.ndarray) -> None:
        deadline = Deadline(
            self.timeout_ms / 1000.0, f"write of {len(seg)} rows to tablet {tablet_id} of table {b.table.name}"
        )
        idx = pa.array(seg)
        # One request id for every attempt, whatever the reason for the retry (timeout, lost connection,
        # another leader) and whichever server answers, so a write already applied is never applied again.
        # Kept even when the batch is rebuilt after MISMATCHED_SCHEMA: the tablet server refuses a schema
        # only for a request it found NEW on a ready leader (no attempt of it applied, and it keeps no trace
        # of the refusal), so reusing the id is always safe, and it covers a deposed leader answering
        # MISMATCHED_SCHEMA while the real leader had applied an earlier attempt (it answers that result).
        request_id = self.client.write_ids.begin()
        try:
            await self._write_segment_attempts(b, tablet_id, seg, idx, deadline, request_id)
        finally:
            self.client.write_ids.end(request_id)

    async def _write_segment_attempts(
        self, b: _Batch, tablet_id: str, seg: np.ndarray, idx: pa.Array, deadline: Deadline, request_id: dict[str, Any]
    ) -> None:
        while True:
            version = b.schema_version  # rows, bitmap and version read together (no await in between)
            rows = b.rows.take(idx)
            types = b.op_types[seg]
            set_cols = None if b.set_cols is None else b.set_cols[seg]
            req = {
                "tablet_id": tablet_id,
                "schema_version": version,
                "request_id": request_id,
                **encode_row_operations(rows, types, set_cols),
            }
            seen = self.client.latest_observed_timestamp()
            if seen:
                req["propagated_timestamp"] = seen
            try:
                reply = await self.client.call_tablet_leader(b.table, tablet_id, "Write", req, deadline)
            except KuduNotFound as e:
                if e.details.get("error") == "TABLET_NOT_FOUND":
                    raise _TabletMoved() from e
                raise
            except KuduInvalidArgument as e:
                if e.details.get("error") != "MISMATCHED_SCHEMA":
                    raise
                await self._catch_up_schema(b, version, e, deadline)
                continue
            self._take_reply(b, seg, types, reply)
            return

    async def _catch_up_schema(self, b: _Batch, sent: int, err: KuduInvalidArgument, deadline: Deadline) -> None:
        """A tablet refused rows built for schema version ``sent``. Rebuild the batch for the table's newer
        schema (once, whichever of its segments learns first), or wait while the tablet is the one behind."""
        if b.schema_version != sent:
            return  # another segment of this batch already rebuilt it
        have = err.details.get("schema_version")
        if not (isinstance(have, int) and have < sent) and b.table.schema_version <= sent:
            await self.client.reload_table(b.table, deadline)
        if b.schema_version == sent and b.table.schema_version > sent:
            _adapt(b, b.schema, b.table.schema)
            b.schema, b.schema_version = b.table.schema, b.table.schema_version
        elif b.schema_version == sent:
            await deadline.backoff(err)  # the tablet has not applied the alter yet (or the master not told us)

    def _take_reply(self, b: _Batch, seg: np.ndarray, types: np.ndarray, reply: dict[str, Any]) -> None:
        if reply.get("timestamp"):
            self.client.observe_timestamp(int(reply["timestamp"]))
        failed = np.zeros(len(seg), dtype=bool)
        for e in reply.get("row_errors") or []:
            i = int(e["row_index"])
            failed[i] = True
            self._add_error(
                KuduError(error_from_code(str(e["code"]), str(e.get("message", ""))), b.failed(int(seg[i])))
            )
        ok = types[~failed]
        ignored = int(reply.get("ignored", 0))
        for t in np.unique(ok).tolist():
            name = _METRIC_NAMES[OpType(t)]
            n = int((ok == t).sum())
            if t in _IGNORE_KINDS:  # a segment holds one ignore kind at most, so this is exact
                self._metrics[f"{name}_ignore_errors"] += ignored
                n -= ignored
            self._metrics[f"successful_{name}s"] += n


class _TabletMoved(Exception):
    """The tablet is not where the location cache said (range dropped and re-added, replicas moved)."""


def _segments(b: _Batch, rows: np.ndarray) -> list[np.ndarray]:
    """Split one tablet's rows (kept in order) into RPC-sized runs holding at most one *_IGNORE kind."""
    if not len(rows):
        return []
    per_row = max(1, b.rows.nbytes // max(1, b.rows.num_rows))
    cap = max(1, min(MAX_ROWS_PER_RPC, MAX_BYTES_PER_RPC // per_row))
    types = b.op_types[rows]
    ignore_kinds = np.unique(types[op_mask(types, _IGNORE_KINDS)])
    if len(ignore_kinds) <= 1:  # the usual case: only the size cap splits (vectorised)
        return np.split(rows, range(cap, len(rows), cap))
    out: list[np.ndarray] = []
    start = 0
    kind = 0
    for i in range(len(rows)):  # several *_IGNORE kinds interleaved: rare, walk the rows
        t = int(types[i])
        k = t if t in _IGNORE_KINDS else 0
        if i - start >= cap or (k and kind and k != kind):
            out.append(rows[start:i])
            start, kind = i, 0
        if k:
            kind = k
    out.append(rows[start:])
    return out


def _ops_to_batch(group: list[_Buffered]) -> _Batch:
    """Row operations of one table, validated against one schema version, as a full-schema Arrow batch.
    The row API's per-row cost is kept to one list comprehension per column; only rows that set some
    but not all columns (updates, partial upserts) walk their cells."""
    table, schema, version = group[0][0].table, group[0][2], group[0][3]
    names = schema.names
    n = len(group)
    ops = [item[0] for item in group]
    rows = [item[1] for item in group]
    types = np.fromiter((int(op.op_type) for op in ops), dtype=np.int8, count=n)
    arrays = [pa.array([row.get(c.name) for row in rows], c.arrow_type) for c in schema.columns]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema.to_arrow())
    ncols = len(names)
    partial = [r for r, op in enumerate(ops) if not op.op_name.startswith("insert") and len(op._cells) < ncols]
    set_cols: np.ndarray | None = None
    if partial:
        set_cols = np.ones((n, ncols), dtype=bool)
        col_pos = {c: i for i, c in enumerate(names)}
        nk = schema.num_key_columns
        for r in partial:
            set_cols[r, nk:] = False
            for c in ops[r]._cells:
                set_cols[r, col_pos[c]] = True
    return _Batch(table, batch, types, set_cols, ops, schema, version)


def _widen(schema: Schema, checked: pa.RecordBatch, given: set[str]) -> tuple[pa.RecordBatch, np.ndarray | None]:
    """A validated batch (maybe fewer columns) as full-schema rows plus the cells it sets."""
    n = checked.num_rows
    arrays = []
    set_cols = np.zeros((n, len(schema)), dtype=bool)
    for ci, c in enumerate(schema.columns):
        if c.name in checked.schema.names:
            arrays.append(checked.column(c.name))
            if c.name in given or ci < schema.num_key_columns:
                set_cols[:, ci] = True
        else:
            arrays.append(pa.nulls(n, c.arrow_type))
    full = pa.RecordBatch.from_arrays(arrays, schema=schema.to_arrow())
    return full, (None if set_cols.all() else set_cols)


def _adapt(b: _Batch, old: Schema, new: Schema) -> None:
    """Rebuild ``b`` for a table schema that changed under it: columns matched by column id (so a rename
    keeps its data), new ones unset (their default for inserted rows), dropped ones refused if set."""
    n = b.rows.num_rows
    set_cols = b.set_cols if b.set_cols is not None else np.ones((n, len(old)), dtype=bool)

    def ident(c: ColumnSchema) -> Any:
        return c.id if c.id is not None else c.name

    new_pos = {ident(c): i for i, c in enumerate(new.columns)}
    old_pos = {ident(c): i for i, c in enumerate(old.columns)}
    for ci, c in enumerate(old.columns):
        if ident(c) not in new_pos and set_cols[:, ci].any() and b.rows.column(ci).null_count < n:
            raise KuduInvalidArgument(
                f"column '{c.name}' is no longer in table {b.table.name} (dropped while this write was in flight)"
            )
    arrays = []
    new_set = np.zeros((n, len(new)), dtype=bool)
    insertish = op_mask(b.op_types, (OpType.INSERT, OpType.INSERT_IGNORE, OpType.UPSERT, OpType.UPSERT_IGNORE))
    for ci, c in enumerate(new.columns):
        oi = old_pos.get(ident(c))
        if oi is not None:
            arrays.append(b.rows.column(oi).cast(c.arrow_type))
            new_set[:, ci] = set_cols[:, oi]
        else:
            vals = [c.default if ins else None for ins in insertish.tolist()]
            arrays.append(pa.array(vals, c.arrow_type))
    b.rows = pa.RecordBatch.from_arrays(arrays, schema=new.to_arrow())
    b.set_cols = None if new_set.all() else new_set
