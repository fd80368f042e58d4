"""Routing and retrying of writes (Kudu's batcher): one table's rows to its tablets' leaders, in per-tablet
Arrow batches, with each row's outcome collected for the session.

Routing is vectorised: every row's partition key is computed with pyarrow and its tablet found by binary
search over the tablets' start keys; one Write goes per tablet (split into bounded RPCs). Tablets are
written concurrently; a tablet's RPCs go in order, so operations on one row apply in the order they were
applied to the session. A write that meets a schema change is rebuilt for the new schema; a tablet that
moved is re-routed after a location refresh.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.client.meta_cache import TableLocations
from kudu_async.client.retry import WriteRequestIds
from kudu_async.client.table import OP_NAMES, FailedRow, Table, WriteOperation
from kudu_async.common.errors import (
    KuduBadStatus,
    KuduInvalidArgument,
    KuduIOError,
    KuduNotFound,
    error_from_code,
)
from kudu_async.common.retry import Deadline
from kudu_async.common.row_conversion import OpType, encode_row_operations, op_mask
from kudu_async.common.schema import ColumnSchema, Schema

MAX_ROWS_PER_RPC = 20_000
MAX_BYTES_PER_RPC = 8 * 1024 * 1024
MAX_PENDING_ERRORS = 10_000
MAX_TABLETS_IN_FLIGHT = 32
MAX_REROUTES = 10
IGNORE_KINDS = (int(OpType.INSERT_IGNORE), int(OpType.UPDATE_IGNORE), int(OpType.DELETE_IGNORE))
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


class Locations(Protocol):
    async def locations(self, table_id: str, deadline: Deadline, *, refresh: bool = False) -> TableLocations: ...


class WriteClient(Protocol):
    """What the batcher needs of the client (``ClientCore``)."""

    @property
    def meta(self) -> Locations: ...

    @property
    def write_ids(self) -> WriteRequestIds: ...

    def latest_observed_timestamp(self) -> int: ...

    def observe_timestamp(self, ts: int) -> None: ...

    async def call_tablet_leader(
        self, table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]: ...

    async def reload_table(self, table: Table, deadline: Deadline) -> None: ...


class KuduError:
    """One failed row of a flush (kudu-python's ``KuduError``): the status and the operation."""

    def __init__(self, status: KuduBadStatus, op: WriteOperation | FailedRow, possibly_successful: bool = False):
        self.status = status
        self._op = op
        self._possibly = possibly_successful

    def failed_op(self) -> WriteOperation | FailedRow:
        """The operation as applied, or for a row of an Arrow write, the row (a dict) and its op name."""
        return self._op

    def was_possibly_successful(self) -> bool:
        return self._possibly

    def __str__(self) -> str:
        return f"{self.status} ({self._op!r})"

    def __repr__(self) -> str:
        return f"KuduError({str(self.status)!r})"


@dataclass
class RowBatch:
    """Row operations for one table: full-schema rows, one op type per row, the cells each row sets."""

    table: Table
    rows: pa.RecordBatch
    op_types: np.ndarray  # int8
    set_cols: np.ndarray | None  # rows x columns bool; None = every cell set
    ops: Sequence[WriteOperation] | None  # for errors; None for Arrow input (the row itself is reported)
    schema: Schema  # the schema ``rows`` were built for, and its version (the table's may be newer by now)
    schema_version: int
    # The validated rows as dicts, when the row API built the batch: one row is routed from its dict.
    dicts: Sequence[dict[str, Any]] | None = None

    def failed(self, i: int) -> WriteOperation | FailedRow:
        if self.ops is not None:
            return self.ops[i]
        return FailedRow(self.rows.slice(i, 1).to_pylist()[0], OP_NAMES[OpType(int(self.op_types[i]))])


# An applied operation: the op, its validated row, and the table schema (and version) it was validated against.
Buffered = tuple[WriteOperation, dict[str, Any], Schema, int]


class ErrorCollector:
    """A session's failed rows (at most MAX_PENDING_ERRORS kept, every one counted) and its write metrics."""

    def __init__(self) -> None:
        self.errors: list[KuduError] = []
        self.overflowed = False
        self.failed_total = 0  # every failed row, also those past MAX_PENDING_ERRORS
        self.metrics: dict[str, int] = {f"successful_{k}s": 0 for k in ("insert", "upsert", "update", "delete")}
        self.metrics.update({f"{k}_ignore_errors": 0 for k in ("insert", "upsert", "update", "delete")})

    def add(self, err: KuduError) -> None:
        self.failed_total += 1
        if len(self.errors) >= MAX_PENDING_ERRORS:
            self.overflowed = True
            return
        self.errors.append(err)

    def fail_rows(self, b: RowBatch, rows: Iterable[Any], err: KuduBadStatus, possibly_successful: bool) -> None:
        for i in rows:
            if len(self.errors) >= MAX_PENDING_ERRORS:  # past the cap only the count is kept
                self.failed_total += 1
                self.overflowed = True
                continue
            self.add(KuduError(err, b.failed(int(i)), possibly_successful=possibly_successful))

    def take(self) -> tuple[list[KuduError], bool]:
        """(errors, overflowed), and clear them."""
        out, over = self.errors, self.overflowed
        self.errors, self.overflowed = [], False
        return out, over

    def mark(self) -> tuple[int, int]:
        """Where the errors stand now (kept, failed in all), for ``raise_if_new``."""
        return len(self.errors), self.failed_total

    def raise_if_new(self, before: tuple[int, int], what: str) -> None:
        """Raise KuduIOError naming the first row that failed since ``before`` (a ``mark()``), if any did."""
        kept_before, failed_before = before
        failed = self.failed_total - failed_before
        if failed > 0:
            first: Any = (
                self.errors[kept_before]
                if len(self.errors) > kept_before
                else self.errors[-1]
                if self.errors
                else "(already taken by get_pending_errors)"
            )
            dropped = (
                ""
                if len(self.errors) - kept_before == failed
                else f" (only the first {MAX_PENDING_ERRORS} errors are kept)"
            )
            raise KuduIOError(
                f"{what}: {failed} row(s) failed{dropped}; first: {first}; see get_pending_errors()", {"errors": failed}
            )


class Batcher:
    """Writes row batches of one flush for a session: routing, per-tablet RPCs and their retries. Never
    raises for a row: each gets its outcome in ``errors`` (or is counted as written)."""

    def __init__(self, client: WriteClient, errors: ErrorCollector, timeout_s: float) -> None:
        self.client = client
        self.errors = errors
        self.timeout_s = timeout_s

    async def write_ops(self, ops: list[Buffered]) -> None:
        """Write buffered operations: tables concurrently; one table's ops in order."""
        by_table: dict[str, list[Buffered]] = {}
        for item in ops:
            by_table.setdefault(item[0].table.id, []).append(item)

        async def in_order(items: list[Buffered]) -> None:
            # Rows validated against different schema versions (an alter between two applies) go as separate
            # batches, one after the other, so operations on one row still apply in order.
            for _, run in itertools.groupby(items, key=lambda item: item[3]):
                await self.send(batch_of_ops(list(run)))

        if len(by_table) == 1:  # no task to create, no loop turn to wait for it
            await in_order(ops)
            return
        await asyncio.gather(*(in_order(items) for items in by_table.values()))

    async def send(self, b: RowBatch) -> None:
        """Route a table's batch to its tablets and write them (tablets concurrently, in order per tablet).
        Never raises for a tablet's failure: each row gets its own outcome (written, a row error, or the
        error of the write that carried it), so rows other tablets confirmed are never reported failed."""
        # Routing (locations, re-routing after a move) shares one deadline; each Write RPC batch then gets
        # the session timeout for itself, as in Kudu, so a bulk apply_arrow is not cut by one timeout.
        deadline = Deadline(self.timeout_s, f"routing {b.rows.num_rows} rows of table {b.table.name}")
        await self._route_and_write(b, deadline, refresh=False)

    async def _route_and_write(self, b: RowBatch, deadline: Deadline, refresh: bool, hops: int = 0) -> None:
        try:
            locs = await self.client.meta.locations(b.table.id, deadline, refresh=refresh)
            where = tablet_indexes(b, locs)
        except KuduBadStatus as e:  # nothing of this batch was sent
            self.errors.fail_rows(b, range(b.rows.num_rows), e, possibly_successful=False)
            return
        for i in np.flatnonzero(where < 0).tolist():
            self.errors.add(
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

        if len(tablets) == 1:  # one tablet (every single-row write): no task, no semaphore wait
            await one(tablets[0])
        else:
            await asyncio.gather(*(one(t) for t in tablets))
        if moved:  # tablets not found where the cache said: refresh and route those rows again
            idx = np.sort(np.concatenate(moved))
            sub = RowBatch(
                b.table,
                b.rows.take(pa.array(idx)),
                b.op_types[idx],
                None if b.set_cols is None else b.set_cols[idx],
                None if b.ops is None else [b.ops[i] for i in idx.tolist()],
                b.schema,
                b.schema_version,
            )
            if hops >= MAX_REROUTES:
                self.errors.fail_rows(
                    sub,
                    range(len(idx)),
                    KuduNotFound(
                        f"{len(idx)} rows of table {b.table.name} found no tablet after {hops} location refreshes "
                        "(tablets keep moving or being dropped)"
                    ),
                    possibly_successful=False,
                )
                return
            again = Deadline(self.timeout_s, f"re-routing {len(idx)} rows of table {b.table.name}")
            await again.backoff(None)
            await self._route_and_write(sub, again, refresh=True, hops=hops + 1)

    async def _write_tablet(self, b: RowBatch, locs: TableLocations, t: int, rows: np.ndarray) -> np.ndarray | None:
        """Write ``rows`` of ``b`` to tablet ``t`` in ordered RPCs; returns the rows to re-route if it moved.
        A failed RPC fails its rows (maybe applied) and the tablet's later rows (not sent, so that
        operations on one row never apply out of order)."""
        tablet = locs.tablets[t]
        segs = segments(b, rows)
        for k, seg in enumerate(segs):
            try:
                await self._write_segment(b, tablet.tablet_id, seg)
            except _TabletMoved:
                return rows[np.searchsorted(rows, seg[0]) :]
            except KuduBadStatus as e:
                self.errors.fail_rows(b, seg, e, possibly_successful=True)
                for later in segs[k + 1 :]:
                    self.errors.fail_rows(b, later, e, possibly_successful=False)
                return None
        return None

    async def _write_segment(self, b: RowBatch, tablet_id: str, seg: np.ndarray) -> None:
        deadline = Deadline(self.timeout_s, f"write of {len(seg)} rows to tablet {tablet_id} of table {b.table.name}")
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
        self,
        b: RowBatch,
        tablet_id: str,
        seg: np.ndarray,
        idx: pa.Array,
        deadline: Deadline,
        request_id: dict[str, Any],
    ) -> None:
        while True:
            version = b.schema_version  # rows, bitmap and version read together (no await in between)
            rows = b.rows if len(seg) == b.rows.num_rows else b.rows.take(idx)  # seg is sorted: all rows in order
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

    async def _catch_up_schema(self, b: RowBatch, sent: int, err: KuduInvalidArgument, deadline: Deadline) -> None:
        """A tablet refused rows built for schema version ``sent``. Rebuild the batch for the table's newer
        schema (once, whichever of its segments learns first), or wait while the tablet is the one behind."""
        if b.schema_version != sent:
            return  # another segment of this batch already rebuilt it
        have = err.details.get("schema_version")
        if not (isinstance(have, int) and have < sent) and b.table.schema_version <= sent:
            await self.client.reload_table(b.table, deadline)
        if b.schema_version == sent and b.table.schema_version > sent:
            adapt_to_schema(b, b.schema, b.table.schema)
            b.schema, b.schema_version = b.table.schema, b.table.schema_version
        elif b.schema_version == sent:
            await deadline.backoff(err)  # the tablet has not applied the alter yet (or the master not told us)

    def _take_reply(self, b: RowBatch, seg: np.ndarray, types: np.ndarray, reply: dict[str, Any]) -> None:
        if reply.get("timestamp"):
            self.client.observe_timestamp(int(reply["timestamp"]))
        failed = np.zeros(len(seg), dtype=bool)
        for e in reply.get("row_errors") or []:
            i = int(e["row_index"])
            failed[i] = True
            self.errors.add(
                KuduError(error_from_code(str(e["code"]), str(e.get("message", ""))), b.failed(int(seg[i])))
            )
        ok = types[~failed]
        ignored = int(reply.get("ignored", 0))
        for t in np.unique(ok).tolist():
            name = _METRIC_NAMES[OpType(t)]
            n = int((ok == t).sum())
            if t in IGNORE_KINDS:  # a segment holds one ignore kind at most, so this is exact
                self.errors.metrics[f"{name}_ignore_errors"] += ignored
                n -= ignored
            self.errors.metrics[f"successful_{name}s"] += n


class _TabletMoved(Exception):
    """The tablet is not where the location cache said (range dropped and re-added, replicas moved)."""


def tablet_indexes(b: RowBatch, locs: TableLocations) -> np.ndarray:
    """Each row's tablet (an index into ``locs.tablets``; -1 where no tablet covers it). One row built by
    the row API is routed from its dict: the vectorised path's Arrow calls cost ~10x more for one row."""
    if b.dicts is not None and len(b.dicts) == 1 and b.schema_version == b.table.schema_version:
        key = b.table.partition_schema.partition_key(b.dicts[0])
        i = bisect.bisect_right(locs.starts, key) - 1
        found = i >= 0 and locs.tablets[i].partition.contains(key)
        return np.array([i if found else -1], dtype=np.int64)
    return locs.assign(b.table.partition_schema.partition_keys(b.rows))


def segments(b: RowBatch, rows: np.ndarray) -> list[np.ndarray]:
    """Split one tablet's rows (kept in order) into RPC-sized runs holding at most one *_IGNORE kind."""
    if len(rows) <= 1:
        return [rows] if len(rows) else []
    per_row = max(1, b.rows.nbytes // max(1, b.rows.num_rows))
    cap = max(1, min(MAX_ROWS_PER_RPC, MAX_BYTES_PER_RPC // per_row))
    types = b.op_types[rows]
    ignore_kinds = np.unique(types[op_mask(types, IGNORE_KINDS)])
    if len(ignore_kinds) <= 1:  # the usual case: only the size cap splits (vectorised)
        return np.split(rows, range(cap, len(rows), cap))
    out: list[np.ndarray] = []
    start = 0
    kind = 0
    for i in range(len(rows)):  # several *_IGNORE kinds interleaved: rare, walk the rows
        t = int(types[i])
        k = t if t in IGNORE_KINDS else 0
        if i - start >= cap or (k and kind and k != kind):
            out.append(rows[start:i])
            start, kind = i, 0
        if k:
            kind = k
    out.append(rows[start:])
    return out


def batch_of_ops(group: list[Buffered]) -> RowBatch:
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
    return RowBatch(table, batch, types, set_cols, ops, schema, version, rows)


def widen(schema: Schema, checked: pa.RecordBatch, given: set[str]) -> tuple[pa.RecordBatch, np.ndarray | None]:
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


def unset_nulls(schema: Schema, full: pa.RecordBatch, set_cols: np.ndarray | None) -> np.ndarray | None:
    """``set_cols`` less the null non-key cells (vectorised: one validity mask per nullable column)."""
    n = full.num_rows
    out = set_cols
    for ci in range(schema.num_key_columns, len(schema)):
        col = full.column(ci)
        if col.null_count == 0:
            continue
        if out is None:
            out = np.ones((n, len(schema)), dtype=bool)
        out[:, ci] &= pc.is_valid(col).to_numpy(zero_copy_only=False)
    return out


def adapt_to_schema(b: RowBatch, old: Schema, new: Schema) -> None:
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
    b.dicts = None  # validated against the old schema
