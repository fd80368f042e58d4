"""kudu-python's blocking API over the async client: each ``Client`` runs its ``AsyncClient`` on a private
event-loop thread, and every blocking call submits a coroutine there and waits for it.

So one client serves many threads (calls are serialised onto its loop, where the real concurrency is),
and code written for kudu-python runs with ``import kudu_async as kudu``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import weakref
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import CancelledError, Future, wait
from typing import Any, Self, TypeVar

import pyarrow as pa
import uvloop

from kudu_async.client.aio import connect as aio_connect
from kudu_async.client.aio import master_addresses
from kudu_async.client.batcher import Buffered, KuduError
from kudu_async.client.meta_cache import TabletServer
from kudu_async.client.options import ENCRYPTION_OPTIONAL, check_security
from kudu_async.client.scanner import (
    AsyncScanner,
    AsyncScanTokenBuilder,
    RowBatch,
    ScanConfig,
    ScanToken,
    checked_split_size,
)
from kudu_async.client.schema_builder import Partitioning
from kudu_async.client.session import FLUSH_AUTO_BACKGROUND, FLUSH_AUTO_SYNC, FLUSH_MANUAL, AsyncSession, row_bytes
from kudu_async.client.table import Table, TableStatistics, WriteOperation
from kudu_async.client.table_alterer import AlterConfig
from kudu_async.common.errors import KuduBadStatus, KuduIllegalState, KuduInvalidArgument
from kudu_async.common.row_conversion import batch_to_tuples
from kudu_async.common.schema import Schema

_T = TypeVar("_T")
log = logging.getLogger(__name__)

STAGE_ROWS = 1000  # the blocking Session hands rows to the loop this many at a time ...
STAGE_BYTES = 1024 * 1024  # ... or at this many bytes


class _LoopThread:
    """One event loop in a daemon thread; ``run`` blocks the caller until a coroutine finishes there."""

    def __init__(self, name: str) -> None:
        # uvloop, as the nodes run: ~7% less client CPU per point read than asyncio's loop
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        """Start ``coro`` on the loop; the caller waits on the returned future when it needs the result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise KuduIllegalState("a blocking kudu_async call was made from the client's own loop thread")
        if self.loop.is_closed():
            coro.close()
            raise KuduIllegalState("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self.loop.close()


_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    """At interpreter exit, close the clients a program left open: their sessions' background flushers stop
    cleanly, and operations never flushed are reported (and dropped, as Kudu's client does) instead of
    vanishing without a word."""
    for c in list(_open_clients):
        try:
            c.close()
        except Exception as e:  # exiting anyway: say why this client could not close cleanly
            log.warning("closing a kudu client at exit failed: %s", e)


class Client:
    """kudu-python's ``Client`` (blocking). Thread-safe; close it (or use ``with``) when done."""

    def __init__(  # noqa: PLR0913 - kudu-python's arguments, and a client certificate
        self,
        addr_or_addrs: str | Sequence[str],
        admin_timeout_ms: int | None = None,
        rpc_timeout_ms: int | None = None,
        sasl_protocol_name: str | None = None,
        require_authentication: bool = False,
        encryption_policy: str = ENCRYPTION_OPTIONAL,
        jwt: str | None = None,
        trusted_certificates: Any = None,
        client_certificate: Any = None,
    ) -> None:
        """kudu-python's arguments, plus ``client_certificate``: a ``(certificate, key)`` pair (PEM text or
        paths) that authenticates the client by TLS (see ``client.options.client_tls``)."""
        check_security(encryption_policy, require_authentication, sasl_protocol_name, jwt, trusted_certificates)
        masters = [addr_or_addrs] if isinstance(addr_or_addrs, str) else list(addr_or_addrs)
        if not masters:
            raise ValueError("Client() needs at least one master address ('host:port')")
        self._loop = _LoopThread("kudu-client")
        try:
            self._async = self._loop.run(
                aio_connect(
                    list(masters),
                    None,
                    admin_timeout_ms,
                    rpc_timeout_ms,
                    encryption_policy=encryption_policy,
                    trusted_certificates=trusted_certificates,
                    require_authentication=require_authentication,
                    jwt=jwt,
                    client_certificate=client_certificate,
                )
            )
        except BaseException:
            self._loop.stop()
            raise
        _open_clients.add(self)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self._loop.run(coro)

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        return self._loop.submit(coro)

    @property
    def master_addrs(self) -> list[str]:
        return self._async.master_addrs

    @property
    def is_multimaster(self) -> bool:
        """Whether the client was given more than one master."""
        return len(self._async.master_addrs) > 1

    def close(self) -> None:
        _open_clients.discard(self)
        if not self._loop.loop.is_closed():
            self._run(self._async.close())
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # DDL and metadata
    def create_table(
        self,
        table_name: str,
        schema: Schema,
        partitioning: Partitioning | None = None,
        n_replicas: int | None = None,
        owner: str | None = None,
        comment: str | None = None,
    ) -> Table:
        t = self._run(self._async.create_table(table_name, schema, partitioning, n_replicas, owner, comment))
        t._owner = self
        return t

    def delete_table(self, table_name: str) -> None:
        """Delete a table (the master's --default_deleted_table_reserve_seconds may soft-delete it)."""
        self._run(self._async.delete_table(table_name))

    def soft_delete_table(self, table_name: str, reserve_seconds: int | None = None) -> None:
        """Keep the table recallable for ``reserve_seconds``, then purge it; None or 0 deletes it at once."""
        self._run(self._async.soft_delete_table(table_name, reserve_seconds))

    def recall_table(self, table_id: str, new_table_name: str | None = None) -> None:
        """Bring back a soft-deleted table by its id, renamed to ``new_table_name`` if given."""
        self._run(self._async.recall_table(table_id, new_table_name))

    def list_soft_deleted_tables(self, match_substring: str | None = None) -> list[str]:
        return self._run(self._async.list_soft_deleted_tables(match_substring))

    def table_exists(self, table_name: str) -> bool:
        return self._run(self._async.table_exists(table_name))

    def list_tables(self, match_substring: str | None = None) -> list[str]:
        return self._run(self._async.list_tables(match_substring))

    def table(self, table_name: str) -> Table:
        return self._run(self._async.table(table_name, owner=self))

    def new_table_alterer(self, table: Table) -> TableAlterer:
        return TableAlterer(table, self)

    def get_table_statistics(self, table_name: str) -> TableStatistics:
        """Live rows, bytes on disk and limits of a table, from the master (see the async client)."""
        return self._run(self._async.get_table_statistics(table_name))

    def list_tablet_servers(self) -> list[TabletServer]:
        """Every tablet server the master knows, as ``TabletServer`` (a dict of the master's fields)."""
        return [TabletServer(d) for d in self._run(self._async.list_tablet_servers())]

    def list_masters(self) -> list[dict[str, Any]]:
        return self._run(self._async.list_masters())

    def latest_observed_timestamp(self) -> int:
        return self._async.latest_observed_timestamp()

    def set_latest_observed_timestamp(self, ts: int) -> None:
        self._loop.loop.call_soon_threadsafe(self._async.observe_timestamp, ts)

    # sessions and scans
    def new_session(self, flush_mode: str = FLUSH_MANUAL, timeout_ms: int = 5000, **kw: Any) -> Session:
        return Session(self, self._async.new_session(flush_mode, timeout_ms, **kw))

    def new_scanner(self, table: Table) -> Scanner:
        """A scanner of ``table`` (what ``table.scanner()`` gives for a table this client opened)."""
        return Scanner(table, self)

    def new_scan_token_builder(self, table: Table) -> ScanTokenBuilder:
        """A scan token builder for ``table`` (``table.scan_token_builder()``)."""
        return ScanTokenBuilder(table, self)

    def deserialize_token_into_scanner(self, serialized_token: bytes) -> Scanner:
        sc = self._async.scanner_from_token(serialized_token, owner=self)  # parsing only: no hop to the loop
        return Scanner(sc.table, self, sc)


def _client_of(table: Table, client: Client | None) -> Client:
    """The blocking client ``table`` came from, when the caller did not name one (kudu-python's objects are
    built from the table alone)."""
    if client is not None:
        return client
    owner = getattr(table, "_owner", None)
    if not isinstance(owner, Client):
        raise KuduInvalidArgument(f"{table!r} was not opened by a blocking kudu.Client: pass the client")
    return owner


class TableAlterer(AlterConfig):
    """kudu-python's ``TableAlterer`` (blocking)."""

    def __init__(self, table: Table, client: Client | None = None) -> None:
        client = _client_of(table, client)
        super().__init__(client._async.core, table)
        self._sync = client

    def alter(self, wait: bool = True) -> Table:
        return self._sync._run(self.client.alter_table(self.table, self.request(), wait))


class _Staging:
    """Operations a blocking Session checked in its caller's thread, held until the session's loop takes
    them: one hop to the loop per STAGE_ROWS rows instead of one per row. The loop takes them in order, on
    the caller's hand-off, before a flush, or on the background flush interval (``StagedOps``)."""

    def __init__(self, session: AsyncSession) -> None:
        self._s = session
        self._items: list[tuple[Buffered, int]] = []  # (checked op, its bytes)
        self._bytes = 0
        self._lock = threading.Lock()
        self._take_lock = asyncio.Lock()

    def stage(self, item: Buffered) -> int:
        """Queue a checked operation (from the caller's thread); returns how many are staged."""
        size = row_bytes(item[1])
        with self._lock:
            if self._s.flush_mode == FLUSH_MANUAL:
                self._s.check_space(size, 1)
            self._items.append((item, size))
            self._bytes += size
            return len(self._items)

    def enough(self) -> bool:
        """Whether the caller should hand its staged rows over now (bounded in rows and bytes)."""
        s = self._s
        return len(self._items) >= STAGE_ROWS or self._bytes >= min(
            STAGE_BYTES, s.buffer_bytes_limit * s.flush_watermark
        )

    def counts(self) -> tuple[int, int]:
        return len(self._items), self._bytes

    async def take(self) -> None:
        """Buffer every staged operation (on the loop, in staging order: the swap and the buffering happen
        under one asyncio lock, so two takers never interleave)."""
        if not self._items:
            return
        async with self._take_lock:
            with self._lock:
                items, self._items, self._bytes = self._items, [], 0
            for k, (item, size) in enumerate(items):
                try:
                    await self._s.buffer(item, size)
                except BaseException:  # nothing is lost: what was not buffered is staged again, in order
                    with self._lock:
                        self._items[:0] = items[k:]
                        self._bytes += sum(sz for _, sz in items[k:])
                    raise


class Session:
    """kudu-python's ``Session`` (blocking); one per thread, as in Kudu."""

    def __init__(self, client: Client, inner: AsyncSession) -> None:
        self._client = client
        self._s = inner
        self._stage = _Staging(inner)
        inner.staged = self._stage

    def apply(self, op: WriteOperation) -> None:
        """In FLUSH_AUTO_SYNC one blocking write. Otherwise the row is checked here, in the caller's
        thread (a bad row raises at once, as in kudu-python), and staged; the loop takes staged rows a
        thousand at a time, or on the flush interval, instead of one cross-thread hop per row."""
        s = self._s
        if s.flush_mode == FLUSH_AUTO_SYNC:
            self._client._run(s.apply(op))
            return
        stage = self._stage
        if stage.stage(s.check(op)) == 1 and s.flush_mode == FLUSH_AUTO_BACKGROUND and not s.timer_running():
            self._client._loop.loop.call_soon_threadsafe(s.ensure_timer)  # the interval flush takes staged rows
        if stage.enough():
            self._client._run(stage.take())

    def _hand_over(self) -> None:
        if self._stage.counts()[0]:
            self._client._run(self._stage.take())

    def apply_arrow(
        self, table: Table, batch: pa.RecordBatch | pa.Table, op: str = "upsert", ignore_null: bool = False
    ) -> int:
        self._hand_over()
        return self._client._run(self._s.apply_arrow(table, batch, op, ignore_null))

    def flush(self) -> None:
        self._client._run(self._s.flush())

    def close(self) -> None:
        self._client._run(self._s.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get_pending_errors(self) -> tuple[list[KuduError], bool]:
        return self._s.get_pending_errors()

    def count_pending_errors(self) -> int:
        return self._s.count_pending_errors()

    def count_buffered_operations(self) -> int:
        return self._s.count_buffered_operations()

    def get_write_op_metrics(self) -> dict[str, int]:
        return self._s.get_write_op_metrics()

    def set_flush_mode(self, flush_mode: str = FLUSH_MANUAL) -> None:
        self._hand_over()
        self._s.set_flush_mode(flush_mode)

    def set_timeout_ms(self, ms: int) -> None:
        self._s.set_timeout_ms(ms)

    def set_mutation_buffer_space(self, size_bytes: int) -> None:
        self._hand_over()
        self._s.set_mutation_buffer_space(size_bytes)

    def set_mutation_buffer_max_num(self, max_num: int) -> None:
        self._s.set_mutation_buffer_max_num(max_num)

    def set_mutation_buffer_flush_watermark(self, watermark_pct: float) -> None:
        self._s.set_mutation_buffer_flush_watermark(watermark_pct)

    def set_mutation_buffer_flush_interval(self, millis: int) -> None:
        self._s.set_mutation_buffer_flush_interval(millis)


async def _open_and_fetch(sc: AsyncScanner) -> pa.Table:
    """Open (if not yet) and read the first batch, in one trip to the loop."""
    await sc.open()
    if not sc.has_more_rows():
        return sc.output_schema().empty_table()
    return await sc.next_batch()


class Scanner(ScanConfig):
    """kudu-python's ``Scanner`` (blocking): configure, ``open()``, then read."""

    def __init__(self, table: Table, client: Client | None = None, inner: AsyncScanner | None = None) -> None:
        super().__init__(table)
        self._client = _client_of(table, client)
        self._inner = inner
        self._ahead: Future[pa.Table] | None = None  # xbatches' read-ahead, while one is in flight
        if inner is not None:
            self.copy_config_from(inner)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """A call on the loop for this scanner, after xbatches' read-ahead (one scanner, one call at a time)."""
        ahead = self._ahead
        if ahead is not None and not ahead.done():
            wait([ahead])
        return self._client._run(coro)

    def _scanner(self) -> AsyncScanner:
        if self._inner is None:
            self._inner = AsyncScanner(self._client._async.core, self.table)
        self._inner.copy_config_from(self)
        return self._inner

    def open(self) -> Self:
        sc = self._scanner()
        self._run(sc.open())
        return self

    def _opened(self) -> AsyncScanner:
        if self._inner is None or not self._inner._opened:
            self.open()
        assert self._inner is not None
        return self._inner

    def has_more_rows(self) -> bool:
        return self._inner is not None and self._inner.has_more_rows()

    def next_batch(self) -> RowBatch:
        """The next batch of rows (kudu-python: StopIteration once the scan has no more rows)."""
        return RowBatch(self.next_batch_arrow())

    def next_batch_arrow(self) -> pa.Table:
        """The next batch as an Arrow table (possibly empty: check ``has_more_rows()``)."""
        sc = self._opened()
        if not sc.has_more_rows():
            raise StopIteration
        return self._run(sc.next_batch())

    def read_next_batch_tuples(self) -> list[tuple[Any, ...]]:
        return self._run(self._opened().read_next_batch_tuples())

    def read_all_tuples(self) -> list[tuple[Any, ...]]:
        return self._run(self._opened().read_all_tuples())

    def to_arrow(self) -> pa.Table:
        return self._run(self._opened().to_arrow())

    def to_pandas(self, index: Any = None, coerce_float: bool = False) -> Any:
        return self._run(self._opened().to_pandas(index, coerce_float))

    def xbatches(self) -> Iterator[list[tuple[Any, ...]]]:
        """Each batch's rows as a list of tuples until the scan ends, as kudu-python yields them (the batches
        are read ahead as in ``xbatches_arrow``)."""
        for b in self.xbatches_arrow():
            yield batch_to_tuples(b)

    def xbatches_arrow(self) -> Iterator[pa.Table]:
        """Non-empty Arrow batches until the scan ends. The next batch is fetched on the client's loop while the
        caller works on this one (one batch ahead, no more), and opening the scanner rides with the first
        fetch: a scan of one batch costs the caller one wait, not one per step."""
        sc = self._scanner() if self._inner is None or not self._inner._opened else self._inner
        pending: Future[pa.Table] | None = self._client._submit(_open_and_fetch(sc))
        try:
            while pending is not None:
                b = pending.result()
                pending = self._ahead = self._client._submit(sc.next_batch()) if sc.has_more_rows() else None
                if b.num_rows:
                    yield b
        finally:
            self._ahead = None
            if pending is not None and not pending.done():  # the caller stopped early: drop the read-ahead
                pending.cancel()
                with contextlib.suppress(CancelledError, KuduBadStatus):
                    pending.result()

    def keep_alive(self) -> None:
        if self._inner is not None:
            self._run(self._inner.keep_alive())

    def close(self) -> None:
        if self._inner is not None:
            self._run(self._inner.close())

    def get_current_server(self) -> str | None:
        return None if self._inner is None else self._inner.get_current_server()

    def get_projection_schema(self) -> pa.Schema:
        return self.output_schema()

    def get_resource_metrics(self) -> dict[str, int]:
        """The cumulative resource metrics since the scan was started (kudu-python's dict of Kudu's
        ResourceMetricsPB names)."""
        return {} if self._inner is None else self._inner.get_resource_metrics()


class ScanTokenBuilder(ScanConfig):
    def __init__(self, table: Table, client: Client | None = None) -> None:
        super().__init__(table)
        self._client = _client_of(table, client)
        self._split_size_bytes = 0

    def set_split_size_bytes(self, split_size_bytes: int) -> Self:
        """Kudu's ``SetSplitSizeBytes``: tokens of about this many bytes each, several per tablet where
        the tablet holds more; 0, the default, is one token per tablet."""
        self._split_size_bytes = checked_split_size(split_size_bytes)
        return self

    def build(self) -> list[ScanToken]:
        b = AsyncScanTokenBuilder(self._client._async.core, self.table)
        b.copy_config_from(self)
        b.set_split_size_bytes(self._split_size_bytes)
        return self._client._run(b.build())


def connect(  # noqa: PLR0913 - kudu-python's arguments, and a client certificate
    host: str | Sequence[str] = "127.0.0.1",
    port: int | Sequence[int] | None = 7051,
    admin_timeout_ms: int | None = None,
    rpc_timeout_ms: int | None = None,
    require_authentication: bool = False,
    encryption_policy: str = ENCRYPTION_OPTIONAL,
    jwt: str | None = None,
    trusted_certificates: Any = None,
    client_certificate: Any = None,
) -> Client:
    """kudu-python's ``connect``: one host and port, lists of both, or ``"host:port"`` strings."""
    return Client(
        master_addresses(host, port),
        admin_timeout_ms,
        rpc_timeout_ms,
        require_authentication=require_authentication,
        encryption_policy=encryption_policy,
        jwt=jwt,
        trusted_certificates=trusted_certificates,
        client_certificate=client_certificate,
    )
