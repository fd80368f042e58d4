"""Scanners and scan tokens (kudu-python's API, async core).

A scan walks the tablets its predicates cannot rule out, in partition-key order, one tablet at a time,
pulling Arrow batches. READ_AT_SNAPSHOT scans without a timestamp adopt the one the first tablet
picked, so every tablet answers at one point in time. A fault-tolerant scan is ordered and at a
snapshot; when a replica fails mid-tablet it reopens on another replica after the last key it returned,
so nothing is missed or returned twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as _dt
import random
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Protocol, Self, TypeVar

import msgpack
import pyarrow as pa

from kudu_async.client.authn import authz_token_stale
from kudu_async.client.core import ClientCore
from kudu_async.client.meta_cache import Tablet, TabletLocation
from kudu_async.client.table import Predicate, Table
from kudu_async.common.clock import make_timestamp
from kudu_async.common.errors import (
    KuduBadStatus,
    KuduInvalidArgument,
    KuduNotAuthorized,
    KuduNotFound,
    KuduNotTheLeader,
)
from kudu_async.common.key_encoding import encode_key, encode_keys
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.retry import REPLICA_RETRYABLE, Deadline, leader_hint
from kudu_async.common.row_conversion import batch_to_tuples, ipc_to_table, table_to_pandas
from kudu_async.common.schema import PartialRow
from kudu_async.common.types import ISO_TIMESTAMP_FORMAT, datetime_to_micros, parse_timestamp

READ_LATEST = "latest"
READ_AT_SNAPSHOT = "snapshot"
READ_YOUR_WRITES = "read_your_writes"
_READ_MODES = {
    "latest": READ_LATEST,
    "read_latest": READ_LATEST,
    "snapshot": READ_AT_SNAPSHOT,
    "read_at_snapshot": READ_AT_SNAPSHOT,
    "read_your_writes": READ_YOUR_WRITES,
}
LEADER_ONLY = "leader_only"
CLOSEST_REPLICA = "closest_replica"
FIRST_REPLICA = "first_replica"
_SELECTIONS = (LEADER_ONLY, CLOSEST_REPLICA, FIRST_REPLICA)
TOKEN_VERSION = 1
MAX_CONCURRENT_TABLET_SCANS = 4  # tablets one to_arrow() reads at once


def snapshot_to_hybrid(ts: Any, fmt: str | None = None) -> int:
    """kudu-python's ``set_snapshot`` value (microseconds since the epoch, a datetime, a string in ``fmt``
    or ISO form, or a ``(string, format)`` tuple) as a hybrid time."""
    if isinstance(ts, str | tuple):
        try:
            ts = parse_timestamp(ts, fmt or ISO_TIMESTAMP_FORMAT)
        except KuduInvalidArgument as e:
            raise KuduInvalidArgument(
                f"a snapshot is microseconds since the epoch or a datetime, or a timestamp string: {e}"
            ) from e
    if isinstance(ts, _dt.datetime):
        micros = datetime_to_micros(ts if ts.tzinfo else ts.replace(tzinfo=_dt.UTC))
    elif isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0:
        micros = ts
    else:
        raise KuduInvalidArgument(f"a snapshot is microseconds since the epoch or a datetime, not {ts!r}")
    return make_timestamp(micros)


class ScanConfig:
    """What to scan and how; the setters of Scanner and ScanTokenBuilder (each returns self)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.projection: list[str] | None = None
        self.predicates: list[ColumnPredicate] = []
        self.read_mode = READ_LATEST
        self.snapshot_ts: int | None = None  # hybrid time
        self.limit: int | None = None
        self.fault_tolerant = False
        self.batch_size_bytes: int | None = None
        self.selection = CLOSEST_REPLICA
        self.timeout_ms: int | None = None
        self.lower_key: bytes | None = None
        self.upper_key: bytes | None = None
        self._out: tuple[Any, tuple[str, ...] | None, pa.Schema] | None = None  # output_schema's memo

    def set_projected_column_names(self, names: Sequence[str]) -> Self:
        names = list(names)
        for n in names:
            if n not in self.table.schema:
                raise KuduInvalidArgument(f"projected column '{n}' is not in table {self.table.name}")
        self.projection = names
        return self

    def set_projected_column_indexes(self, indexes: Sequence[int]) -> Self:
        names = self.table.schema.names
        return self.set_projected_column_names([names[i] for i in indexes])

    def add_predicate(self, pred: Predicate | ColumnPredicate) -> Self:
        p = pred.pred if isinstance(pred, Predicate) else pred
        if not isinstance(p, ColumnPredicate):
            raise KuduInvalidArgument(f"not a predicate: {pred!r} (build one with table['col'] >= value)")
        self.predicates.append(p.bind(self.table.schema))
        return self

    def add_predicates(self, preds: Sequence[Predicate | ColumnPredicate]) -> Self:
        for p in preds:
            self.add_predicate(p)
        return self

    def set_read_mode(self, read_mode: str) -> Self:
        m = _READ_MODES.get(str(read_mode).lower())
        if m is None:
            raise KuduInvalidArgument(f"read mode must be latest, snapshot or read_your_writes, not {read_mode!r}")
        self.read_mode = m
        return self

    def set_snapshot(self, timestamp: Any, format: str | None = None) -> Self:
        self.snapshot_ts = snapshot_to_hybrid(timestamp, format)
        self.read_mode = READ_AT_SNAPSHOT
        return self

    def set_snapshot_raw(self, hybrid_ts: int) -> Self:
        if isinstance(hybrid_ts, bool) or not isinstance(hybrid_ts, int) or hybrid_ts < 0:
            raise KuduInvalidArgument("a raw snapshot is a non-negative hybrid timestamp")
        self.snapshot_ts = hybrid_ts
        self.read_mode = READ_AT_SNAPSHOT
        return self

    def set_limit(self, limit: int) -> Self:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise KuduInvalidArgument("a scan limit is a non-negative integer")
        self.limit = limit
        return self

    def set_fault_tolerant(self) -> Self:
        self.fault_tolerant = True
        self.read_mode = READ_AT_SNAPSHOT
        return self

    def set_batch_size_bytes(self, batch_size: int) -> Self:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise KuduInvalidArgument("batch size is a positive number of bytes")
        self.batch_size_bytes = min(batch_size, 16 * 1024 * 1024)
        return self

    def set_selection(self, replica_selection: str) -> Self:
        s = str(replica_selection).lower()
        if s not in _SELECTIONS:
            raise KuduInvalidArgument(f"replica selection must be one of {', '.join(_SELECTIONS)}")
        self.selection = s
        return self

    def set_timeout_millis(self, millis: int) -> Self:
        if isinstance(millis, bool) or not isinstance(millis, int) or millis <= 0:
            raise KuduInvalidArgument("timeout is a positive number of milliseconds")
        self.timeout_ms = millis
        return self

    set_timout_millis = set_timeout_millis  # kudu-python's misspelt name, kept there for old callers

    def new_bound(self) -> PartialRow:
        """An empty row of the table's schema, to fill with key values and pass to a bound."""
        return PartialRow(self.table.schema)

    def add_lower_bound(self, bound: Any) -> Self:
        """Inclusive lower bound on the primary key (a PartialRow, dict, tuple or list of key values)."""
        self.lower_key = encode_key(self.table.schema, bound)
        return self

    def add_exclusive_upper_bound(self, bound: Any) -> Self:
        self.upper_key = encode_key(self.table.schema, bound)
        return self

    add_upper_bound = add_exclusive_upper_bound

    def set_cache_blocks(self, cache_blocks: bool) -> Self:
        return self  # no block cache to bypass: accepted for kudu-python compatibility

    # wire form, for scan tokens
    def config_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.CONFIG_FIELDS}
        d["predicates"] = [p.to_dict() for p in self.predicates]
        return d

    def load_config(self, d: dict[str, Any]) -> None:
        if d.get("projection") is not None:
            self.set_projected_column_names(d["projection"])
        for p in d.get("predicates") or []:
            self.add_predicate(ColumnPredicate.from_dict(p))
        self.read_mode = _READ_MODES.get(str(d.get("read_mode", READ_LATEST)), READ_LATEST)
        self.snapshot_ts = d.get("snapshot_ts")
        self.limit = d.get("limit")
        self.fault_tolerant = bool(d.get("fault_tolerant"))
        self.batch_size_bytes = d.get("batch_size_bytes")
        self.selection = d.get("selection") or CLOSEST_REPLICA
        self.timeout_ms = d.get("timeout_ms")
        self.lower_key = d.get("lower_key")
        self.upper_key = d.get("upper_key")

    CONFIG_FIELDS = (
        "projection",
        "predicates",
        "read_mode",
        "snapshot_ts",
        "limit",
        "fault_tolerant",
        "batch_size_bytes",
        "selection",
        "timeout_ms",
        "lower_key",
        "upper_key",
    )

    def copy_config_from(self, other: ScanConfig) -> None:
        for k in self.CONFIG_FIELDS:
            setattr(self, k, copy.copy(getattr(other, k)))

    def output_schema(self) -> pa.Schema:
        """The Arrow schema of the rows returned (memoised: a point read asks more than once)."""
        schema, proj = self.table.schema, None if self.projection is None else tuple(self.projection)
        if self._out is None or self._out[0] is not schema or self._out[1] != proj:
            names = proj if proj is not None else schema.names
            self._out = (schema, proj, pa.schema([schema.column(n).to_arrow_field() for n in names]))
        return self._out[2]


class AsyncScanner(ScanConfig):
    """kudu-python's ``Scanner`` with coroutines; ``Scanner`` (sync) runs these on the client's loop."""

    def __init__(self, client: ClientCore, table: Table, tablets: list[TabletLocation] | None = None) -> None:
        super().__init__(table)
        self.client = client
        self._fixed_tablets = tablets  # a scan token's tablet, else all tablets the predicates allow
        self._tablets: list[TabletLocation] = []
        self._ti = 0
        self._opened = False
        self._server: str | None = None
        self._last_server: str | None = None  # the server of the last tablet read, for get_current_server()
        self._scanner_id: str | None = None
        self._tablet_open = False
        self._last_key: bytes | None = None
        self._returned = 0
        self._done = False
        self._resume_cols: list[str] = []  # key columns added to the projection for resuming
        self._returned_from_tablet = False
        self._metrics: dict[str, int] = {}  # the servers' resource metrics of every call, summed

    # --- lifecycle ---------------------------------------------------------------------------------

    def _deadline(self, what: str) -> Deadline:
        ms = self.timeout_ms or self.client.rpc_timeout_ms * 3
        return Deadline(ms / 1000.0, what)

    async def open(self) -> Self:
        if self._opened:
            return self
        if self.read_mode == READ_YOUR_WRITES:
            seen = self.client.latest_observed_timestamp()
            if seen:
                self.read_mode, self.snapshot_ts = READ_AT_SNAPSHOT, max(seen, self.snapshot_ts or 0)
            else:
                self.read_mode = READ_LATEST
        if self._fixed_tablets is not None:
            self._tablets = list(self._fixed_tablets)
        else:
            locs = await self.client.meta.locations(self.table.id, self._deadline(f"locating {self.table.name}"))
            by_start = {t.partition.partition_key_start: t for t in locs.tablets}
            keep = self.table.partition_schema.prune(
                [t.partition for t in locs.tablets],
                self.predicates,
                lower_bound_key=self.lower_key or b"",
                upper_bound_key=self.upper_key or b"",
            )
            self._tablets = [by_start[p.partition_key_start] for p in keep]
        if self.fault_tolerant:
            proj = self.projection if self.projection is not None else self.table.schema.names
            self._resume_cols = [k for k in self.table.schema.key_names if k not in proj]
        self._opened = True
        self._done = not self._tablets or self.limit == 0
        return self

    def has_more_rows(self) -> bool:
        return self._opened and not self._done

    async def close(self) -> None:
        if self._scanner_id is not None and self._server is not None:
            with contextlib.suppress(KuduBadStatus):  # else the server expires it after its TTL
                await self.client.rpc.call(
                    self._server, "TabletServer", "Scan", {"scanner_id": self._scanner_id, "close": True}, timeout_s=2.0
                )
        self._scanner_id = None
        self._done = True

    async def keep_alive(self) -> None:
        if self._scanner_id is not None and self._server is not None:
            await self.client.rpc.call(
                self._server,
                "TabletServer",
                "ScannerKeepAlive",
                {"scanner_id": self._scanner_id},
                timeout_s=self.client.rpc_timeout_ms / 1000,
            )

    def get_current_server(self) -> str | None:
        """The server of the batch just read (still known once the scanner moved past that tablet)."""
        return self._server if self._server is not None else self._last_server

    def get_projection_schema(self) -> pa.Schema:
        return self.output_schema()

    # --- reading -----------------------------------------------------------------------------------

    async def next_batch(self) -> pa.Table:
        """The next batch of rows (possibly empty); check ``has_more_rows()`` to know when to stop."""
        if not self._opened:
            await self.open()
        while not self._done:
            t = self._tablets[self._ti]
            what = f"scan of tablet {t.tablet_id} of table {self.table.name}"
            table = await self._pull(t, self._deadline(what))
            if table is None:  # this tablet is exhausted
                self._next_tablet()
                continue
            out = self._deliver(table)
            if self._scanner_id is None and self._tablet_open and not self._done:
                self._next_tablet()  # that was its last batch: no call just to learn so
            return out
        return self.output_schema().empty_table()

    def _next_tablet(self) -> None:
        self._ti += 1
        self._tablet_open = False
        self._scanner_id = None
        self._last_server = self._server or self._last_server
        self._server = None
        self._last_key = None
        if self._ti >= len(self._tablets):
            self._done = True

    def _deliver(self, table: pa.Table) -> pa.Table:
        if table.num_rows and (self.fault_tolerant or self._resume_cols):
            keys = encode_keys(self.table.schema, table.slice(table.num_rows - 1))
            self._last_key = keys[0].as_py()
        if self._resume_cols:
            table = table.drop_columns(self._resume_cols)
        if self.limit is not None:
            left = self.limit - self._returned
            if table.num_rows >= left:
                table = table.slice(0, left)
                self._done = True
        self._returned += table.num_rows
        return table

    async def _pull(self, t: TabletLocation, deadline: Deadline) -> pa.Table | None:
        """One batch from tablet ``t``; None when it has no more. Reopens elsewhere on failure when allowed."""
        last: BaseException | None = None
        tried: set[str] = set()
        renewed = False
        while True:
            deadline.left(last)
            try:
                if not self._tablet_open:
                    return await self._open_tablet(t, deadline, tried)
                if self._scanner_id is None:
                    return None
                assert self._server is not None
                reply = await self.client.rpc.call(
                    self._server,
                    "TabletServer",
                    "Scan",
                    {"scanner_id": self._scanner_id},
                    timeout_s=deadline.rpc_timeout(self.client.rpc_timeout_ms / 1000),
                )
                return self._take_reply(reply)
            except KuduNotAuthorized as e:
                if renewed or self._tablet_open or not authz_token_stale(e):
                    raise
                renewed = True  # the table's authz token expired: a new one from the master, then again
                last = e
                await self.client.reload_table(self.table, deadline)
            except REPLICA_RETRYABLE as e:
                last = e
                if self._tablet_open and not self.fault_tolerant and self._returned_from_tablet:
                    raise KuduBadStatus(
                        f"scan of tablet {t.tablet_id} failed on {self._server} after returning "
                        f"rows: {e} (use set_fault_tolerant() to resume elsewhere)"
                    ) from e
                if self._server is not None:
                    tried.add(self._server)
                    t.failed.add(self._server)
                self._tablet_open = False
                self._scanner_id = None
                self._server = None
                if isinstance(e, KuduNotTheLeader):
                    hint = leader_hint(e, t.addresses(), None)
                    if hint is not None:
                        t.leader_address = hint
                        tried.discard(hint)
                        t.failed.discard(hint)
                if isinstance(e, KuduNotFound) or not set(t.addresses()) - tried:
                    fresh = await self._refresh(t, deadline)
                    if fresh is not None:
                        t = fresh
                        tried.clear()
                await deadline.backoff(last)

    async def _refresh(self, t: TabletLocation, deadline: Deadline) -> TabletLocation | None:
        try:
            locs = await self.client.meta.locations(self.table.id, deadline, refresh=True)
        except KuduNotFound:
            raise  # the table was deleted: no replica will ever serve this scan
        except KuduBadStatus:
            return None
        fresh = locs.by_id(t.tablet_id)
        if fresh is None:
            raise KuduNotFound(
                f"tablet {t.tablet_id} is no longer part of table {self.table.name} (its range partition was dropped)",
                {"error": "TABLET_NOT_FOUND"},
            )
        self._tablets[self._ti] = fresh
        return fresh

    def _pick_replica(self, t: TabletLocation, tried: set[str]) -> str | None:
        leader_needed = self.read_mode == READ_LATEST or self.selection == LEADER_ONLY
        if leader_needed:
            guess = t.leader_address if t.leader_address not in tried else None
            if guess:
                return guess
        candidates = [a for a in t.addresses() if a not in tried]
        if not candidates:
            return None
        if self.selection == FIRST_REPLICA or leader_needed:
            return candidates[0]
        return random.choice(candidates)

    async def _open_tablet(self, t: TabletLocation, deadline: Deadline, tried: set[str]) -> pa.Table | None:
        addr = self._pick_replica(t, tried)
        if addr is None:
            t.failed.clear()
            raise KuduNotFound(f"every replica of tablet {t.tablet_id} failed this scan")
        proj = self.projection
        if proj is not None and self._resume_cols:
            proj = [*proj, *self._resume_cols]
        req: dict[str, Any] = {
            "tablet_id": t.tablet_id,
            "read_mode": "READ_LATEST" if self.read_mode == READ_LATEST else "READ_AT_SNAPSHOT",
            "ordered": bool(self.fault_tolerant),
            "predicates": [p.to_dict() for p in self.predicates],
        }
        if proj is not None:
            req["projection"] = proj
        if self.table.schema_version > 0:
            req["min_schema_version"] = self.table.schema_version  # a replica behind an alter answers retryably
        if self.snapshot_ts is not None and self.read_mode == READ_AT_SNAPSHOT:
            req["snapshot_ts"] = self.snapshot_ts
        if self.batch_size_bytes is not None:
            req["batch_bytes"] = self.batch_size_bytes
        if self.limit is not None:
            req["limit"] = max(0, self.limit - self._returned)
        if self.lower_key is not None:
            req["lower_key"] = self.lower_key
        if self.upper_key is not None:
            req["upper_key"] = self.upper_key
        if self._last_key is not None:
            req["resume_after_key"] = self._last_key
        seen = self.client.latest_observed_timestamp()
        if seen:
            req["propagated_timestamp"] = seen
        if self.table.authz_token is not None:
            req["authz_token"] = self.table.authz_token
        self._server = addr
        reply = await self.client.rpc.call(
            addr, "TabletServer", "Scan", req, timeout_s=deadline.rpc_timeout(self.client.rpc_timeout_ms / 1000)
        )
        t.failed.discard(addr)
        if self.read_mode == READ_LATEST:
            t.leader_address = addr
        self._tablet_open = True
        self._returned_from_tablet = False
        if self.read_mode == READ_AT_SNAPSHOT and self.snapshot_ts is None and reply.get("snapshot_ts"):
            self.snapshot_ts = int(reply["snapshot_ts"])  # every later tablet reads at this same time
        return self._take_reply(reply)

    def get_resource_metrics(self) -> dict[str, int]:
        """What the scan cost the tablet servers so far (kudu-python's names: ``cfile_cache_hit_bytes``,
        ``cfile_cache_miss_bytes``, ``bytes_read``, ``queue_duration_nanos``, ``total_duration_nanos``,
        ``cpu_user_nanos``, ``cpu_system_nanos``), summed over its calls."""
        return dict(self._metrics)

    def _take_reply(self, reply: dict[str, Any]) -> pa.Table:
        self._scanner_id = reply.get("scanner_id") if reply.get("has_more") else None
        for name, value in (reply.get("resource_metrics") or {}).items():
            self._metrics[name] = self._metrics.get(name, 0) + int(value)
        data = reply.get("data")
        table = ipc_to_table(data) if data else self._request_schema().empty_table()
        if reply.get("snapshot_ts"):
            self.client.observe_timestamp(int(reply["snapshot_ts"]))
        if table.num_rows:
            self._returned_from_tablet = True
        return table

    def _request_schema(self) -> pa.Schema:
        names = self.projection if self.projection is not None else self.table.schema.names
        names = [*names, *self._resume_cols]
        return pa.schema([self.table.schema.column(n).to_arrow_field() for n in names])

    async def xbatches(self) -> AsyncIterator[pa.Table]:
        if not self._opened:
            await self.open()
        while self.has_more_rows():
            b = await self.next_batch()
            if b.num_rows:
                yield b

    async def to_arrow(self) -> pa.Table:
        """Every remaining row as one table. A scan not yet started and without a limit reads its
        tablets concurrently (a few at a time), then joins them in tablet order: the same rows in the
        same order as reading them one after another, in about the time of the slowest server."""
        if not self._opened:
            await self.open()
        parts: list[pa.Table] = []
        if self.read_mode == READ_AT_SNAPSHOT and self.snapshot_ts is None:
            first = self._ti  # the first tablet read chooses the snapshot every other tablet then reads at
            while self.has_more_rows() and self._ti == first:
                parts.append(await self.next_batch())
        if self._can_read_concurrently():
            parts += await self._tablets_concurrently()
        else:
            parts += [b async for b in self.xbatches()]
        parts = [p for p in parts if p.num_rows]
        schema = self.output_schema()
        if not parts:
            return schema.empty_table()
        return pa.concat_tables([p.cast(schema) if p.schema != schema else p for p in parts])

    def _can_read_concurrently(self) -> bool:
        # Between tablets, unlimited, several tablets left, and one read time known up front
        # (READ_LATEST, or the snapshot fixed): a snapshot the next tablet would choose comes first.
        return (
            not self._tablet_open
            and self.limit is None
            and len(self._tablets) - self._ti > 1
            and not self._done
            and (self.read_mode == READ_LATEST or self.snapshot_ts is not None)
        )

    async def _tablets_concurrently(self) -> list[pa.Table]:
        sem = asyncio.Semaphore(MAX_CONCURRENT_TABLET_SCANS)

        async def one(t: TabletLocation) -> list[pa.Table]:
            async with sem:
                sub = AsyncScanner(self.client, self.table, [t])
                sub.copy_config_from(self)
                return [b async for b in sub.xbatches()]

        per_tablet = await asyncio.gather(*(one(t) for t in self._tablets[self._ti :]))
        self._ti, self._done = len(self._tablets), True
        parts = [b for bs in per_tablet for b in bs]
        self._returned += sum(b.num_rows for b in parts)
        return parts

    async def read_all_tuples(self) -> list[tuple[Any, ...]]:
        return batch_to_tuples(await self.to_arrow())

    async def read_next_batch_tuples(self) -> list[tuple[Any, ...]]:
        return batch_to_tuples(await self.next_batch())

    async def to_pandas(self, index: Any = None, coerce_float: bool = False) -> Any:
        return table_to_pandas(await self.to_arrow(), index)


class RowBatch:
    """One batch of a blocking scan (kudu-python's ``RowBatch``): its rows as tuples in projection order, by
    index or by iteration. The Arrow form is ``to_arrow()``."""

    __slots__ = ("_table", "_tuples")

    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self._tuples: list[tuple[Any, ...]] | None = None

    def as_tuples(self) -> list[tuple[Any, ...]]:
        if self._tuples is None:
            self._tuples = batch_to_tuples(self._table)  # column by column, not cell by cell
        return list(self._tuples)

    def to_arrow(self) -> pa.Table:
        return self._table

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        if self._tuples is None:
            self._tuples = batch_to_tuples(self._table)
        return self._tuples[i]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self._tuples is None:
            self._tuples = batch_to_tuples(self._table)
        return iter(self._tuples)

    def __repr__(self) -> str:
        return f"RowBatch({self._table.num_rows} rows: {', '.join(self._table.column_names)})"


_ScannerT = TypeVar("_ScannerT", covariant=True)


class TokenReader(Protocol[_ScannerT]):
    """A client that turns serialized scan tokens into its scanners (a ``Scanner`` for the blocking client,
    a coroutine giving an ``AsyncScanner`` for the async one)."""

    def deserialize_token_into_scanner(self, data: bytes) -> _ScannerT: ...


class ScanToken:
    """One tablet's share of a scan; serialises to bytes that become a scanner in another process."""

    def __init__(self, table: Table, tablet: TabletLocation, config: dict[str, Any]) -> None:
        self.table = table
        self.location = tablet
        self.config = config

    def serialize(self) -> bytes:
        return bytes(
            msgpack.packb(
                {"v": TOKEN_VERSION, "table": self.table.info, "tablet": self.location.to_wire(), "scan": self.config}
            )
        )

    @staticmethod
    def parse(data: bytes) -> dict[str, Any]:
        try:
            d = msgpack.unpackb(data, raw=False)
        except (ValueError, TypeError, msgpack.ExtraData) as e:
            raise KuduInvalidArgument(f"not a scan token: {e}") from None
        if (
            not isinstance(d, dict)
            or d.get("v") != TOKEN_VERSION
            or not all(k in d for k in ("table", "tablet", "scan"))
        ):
            raise KuduInvalidArgument("not a scan token of this version")
        return d

    def into_kudu_scanner(self) -> Any:
        """A scanner for this token on the client that built it (kudu-python's name)."""
        return self.table._owner.deserialize_token_into_scanner(self.serialize())

    @staticmethod
    def deserialize_into_scanner(client: TokenReader[_ScannerT], serialized_token: bytes) -> _ScannerT:
        return client.deserialize_token_into_scanner(serialized_token)

    def tablet(self) -> Tablet:
        """The tablet this token reads, with its replicas as they were when the token was built."""
        return Tablet(self.location)

    def hosts(self) -> list[str]:
        """Replica hosts, for locality preferences (Spark)."""
        return sorted({r.rpc_address.rpartition(":")[0].strip("[]") for r in self.location.replicas})

    def __repr__(self) -> str:
        return f"ScanToken({self.table.name}, tablet={self.location.tablet_id})"


def checked_split_size(split_size_bytes: object) -> int:
    if isinstance(split_size_bytes, bool) or not isinstance(split_size_bytes, int) or split_size_bytes < 0:
        raise KuduInvalidArgument(f"split size must be an int >= 0 bytes, not {split_size_bytes!r}")
    return split_size_bytes


class AsyncScanTokenBuilder(ScanConfig):
    def __init__(self, client: ClientCore, table: Table) -> None:
        super().__init__(table)
        self.client = client
        self.split_size_bytes = 0

    def set_split_size_bytes(self, split_size_bytes: int) -> Self:
        """Kudu's ``SetSplitSizeBytes``: tokens of about this many bytes each, several per tablet where
        the tablet holds more (its servers cut its key range from their rowsets' block index); 0, the
        default, is one token per tablet."""
        self.split_size_bytes = checked_split_size(split_size_bytes)
        return self

    async def build(self) -> list[ScanToken]:
        if self.read_mode == READ_YOUR_WRITES:
            seen = self.client.latest_observed_timestamp()
            self.read_mode = READ_AT_SNAPSHOT if seen else READ_LATEST
            self.snapshot_ts = seen or None
        locs = await self.client.meta.locations(
            self.table.id, Deadline(self.client.admin_timeout_ms / 1000, f"locating {self.table.name}")
        )
        by_start = {t.partition.partition_key_start: t for t in locs.tablets}
        keep = self.table.partition_schema.prune(
            [t.partition for t in locs.tablets],
            self.predicates,
            lower_bound_key=self.lower_key or b"",
            upper_bound_key=self.upper_key or b"",
        )
        if self.read_mode == READ_AT_SNAPSHOT and self.snapshot_ts is None:
            # One point in time for every token, chosen here, as kudu-spark does on the driver.
            self.snapshot_ts = max(self.client.latest_observed_timestamp(), make_timestamp(int(time.time() * 1e6)))
        cfg = self.config_dict()
        tablets = [by_start[p.partition_key_start] for p in keep]
        if not self.split_size_bytes:
            return [ScanToken(self.table, t, cfg) for t in tablets]
        deadline = Deadline(self.client.admin_timeout_ms / 1000, f"splitting the key ranges of {self.table.name}")
        chunks = await asyncio.gather(*(self._key_ranges(t, deadline) for t in tablets))
        tokens: list[ScanToken] = []
        for t, ranges in zip(tablets, chunks, strict=True):
            for lo, hi in ranges:
                tokens.append(ScanToken(self.table, t, {**cfg, "lower_key": lo, "upper_key": hi}))
        return tokens

    async def _key_ranges(self, t: TabletLocation, deadline: Deadline) -> list[tuple[bytes | None, bytes | None]]:
        """Tablet ``t``'s share of the scan's key bounds in chunks of about ``split_size_bytes``."""
        req: dict[str, Any] = {"tablet_id": t.tablet_id, "target_chunk_size_bytes": self.split_size_bytes}
        if self.lower_key:
            req["start_primary_key"] = self.lower_key
        if self.upper_key:
            req["stop_primary_key"] = self.upper_key
        if self.projection is not None:
            req["columns"] = self.projection
        reply = await self.client.call_tablet_leader(self.table, t.tablet_id, "SplitKeyRange", req, deadline)
        out: list[tuple[bytes | None, bytes | None]] = []
        for r in reply["ranges"]:
            lo, hi = r.get("start_primary_key"), r.get("stop_primary_key")
            out.append((lo or self.lower_key, hi or self.upper_key))
        return out
