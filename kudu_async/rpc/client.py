"""The pooled RPC client: one HTTP/2 connection per peer address, many concurrent calls over it.

``await client.call("host:port", "Service", "Method", request, timeout_s=10.0)`` returns the decoded
answer or raises the typed exception of ``kudu_async.common.errors`` that the server sent. Transport
failures are typed too: a refused, reset or lost connection is ``KuduNetworkError``; a passed deadline
is ``KuduTimedOut`` (enforced locally as well, so a dead peer cannot hold a caller past its timeout).

A call costs no task of its own: it registers a future on its stream, the connection's protocol
completes it from h2's events, and one timer handle enforces the deadline. Calls the server provably
did not process (GOAWAY beyond them, REFUSED_STREAM) are retried on a fresh connection within the
deadline, so a peer's graceful restart is invisible to callers. Calls are never retried otherwise: the
layers above know which of their calls are idempotent.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import jh2.errors
import jh2.events

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNetworkError,
    KuduRemoteError,
    KuduServiceUnavailable,
    KuduTimedOut,
    error_from_dict,
)
from kudu_async.common.metrics import Counter, MetricEntity
from kudu_async.rpc import codec
from kudu_async.rpc.faults import FaultInjector
from kudu_async.rpc.h2_protocol import DEFAULT_WINDOW, H2Protocol

DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_QUEUED_PER_PEER = 10_000
_MAX_ATTEMPTS = 3
_STREAM_ID_LIMIT = 1 << 30  # open a fresh connection well before h2's 2**31 stream ids run out


class _Unprocessed(Exception):
    """The server did not process this call (GOAWAY / REFUSED_STREAM): safe to send it again."""


class _Pending:
    """One call waiting for its answer."""

    __slots__ = ("chunks", "ctype", "fut", "method", "service", "size", "start", "status")

    def __init__(self, fut: asyncio.Future[_Pending], service: str, method: str) -> None:
        self.fut = fut
        self.service = service
        self.method = method
        self.status = 0
        self.ctype = codec.MSGPACK
        self.chunks: list[bytes] = []
        self.size = 0
        self.start = time.monotonic()


class _ClientConnection(H2Protocol):
    """One outgoing HTTP/2 connection to a peer."""

    def __init__(self, client: RpcClient, addr: str) -> None:
        super().__init__(client_side=True, max_concurrent_streams=100, window=client.window)
        self.client = client
        self.addr = addr
        self.streams: dict[int, _Pending] = {}
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.usable = True
        self.lost: asyncio.Future[None] = self.loop.create_future()

    # --- capacity -----------------------------------------------------------------------------------------

    def has_slot(self) -> bool:
        return len(self.streams) < self.conn.remote_settings.max_concurrent_streams and not self.waiters

    async def wait_slot(self, deadline: float) -> None:
        """Queue (bounded) until the server's MAX_CONCURRENT_STREAMS lets one more stream open."""
        if len(self.waiters) >= self.client.max_queued_per_peer:
            raise KuduServiceUnavailable(
                f"{len(self.waiters)} calls already queued for a stream to {self.addr}; retry later"
            )
        fut: asyncio.Future[None] = self.loop.create_future()
        self.waiters.append(fut)
        timer = self.loop.call_at(deadline, _expire_waiter, fut)
        try:
            await fut
        except BaseException:
            if fut in self.waiters:
                self.waiters.remove(fut)
            raise
        finally:
            timer.cancel()

    def _release_slot(self) -> None:
        waiters = self.waiters
        while waiters and len(self.streams) < self.conn.remote_settings.max_concurrent_streams:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def on_settings_changed(self) -> None:
        self._release_slot()

    # --- calls ----------------------------------------------------------------------------------------------

    def start(self, headers: list[tuple[bytes, bytes]], body: bytes, p: _Pending) -> int:
        sid = self.conn.get_next_available_stream_id()
        self.streams[sid] = p
        if not self.send_message(sid, headers, body):
            del self.streams[sid]
            raise _Unprocessed()
        self.schedule_flush()
        if sid > _STREAM_ID_LIMIT:
            self.usable = False
        return sid

    def expire(self, sid: int, p: _Pending, timeout_s: float) -> None:
        """The caller's deadline passed: fail the call and tell the server to stop working on it."""
        if p.fut.done():
            return
        p.fut.set_exception(
            KuduTimedOut(
                f"{p.service}/{p.method} to {self.addr} timed out after {timeout_s:g}s",
                {"deadline_exceeded": True},
            )
        )
        self.abandon(sid)

    def abandon(self, sid: int) -> None:
        if self.streams.pop(sid, None) is not None:
            self.reset_stream(sid, jh2.errors.ErrorCodes.CANCEL)
            self._release_slot()
            if not self.usable:
                self._close_if_idle()

    # --- events -----------------------------------------------------------------------------------------

    def on_response(self, ev: jh2.events.ResponseReceived) -> None:
        p = self.streams.get(ev.stream_id)
        if p is None:
            return
        for k, v in ev.headers:
            if k == b":status":
                p.status = int(v)
            elif k == b"content-type":
                p.ctype = codec.canonical_content_type(v) or codec.MSGPACK

    def on_data(self, ev: jh2.events.DataReceived) -> None:
        p = self.streams.get(ev.stream_id)
        if p is None:
            return
        data = ev.data
        p.size += len(data)
        if p.size > self.client.max_response_bytes:
            if not p.fut.done():
                p.fut.set_exception(
                    KuduRemoteError(
                        f"answer of {p.service}/{p.method} from {self.addr} exceeds "
                        f"{self.client.max_response_bytes} bytes"
                    )
                )
            self.abandon(ev.stream_id)
            return
        p.chunks.append(data)

    def on_stream_ended(self, ev: jh2.events.StreamEnded) -> None:
        p = self.streams.pop(ev.stream_id, None)
        if p is None:
            return
        # The answer is complete even if our own upload was cut short (server answered early).
        self.drop_outbound(ev.stream_id)
        if not p.fut.done():
            p.fut.set_result(p)
        if self.waiters:
            self._release_slot()
        if not self.usable:
            self._close_if_idle()

    def on_stream_reset(self, ev: jh2.events.StreamReset) -> None:
        super().on_stream_reset(ev)
        p = self.streams.pop(ev.stream_id, None)
        if p is None:
            return
        if not p.fut.done():
            if ev.error_code == jh2.errors.ErrorCodes.REFUSED_STREAM:
                # Only a draining server refuses streams (we honour its stream limit): go elsewhere.
                self.usable = False
                self.client._forget(self)
                p.fut.set_exception(_Unprocessed())
            else:
                p.fut.set_exception(
                    KuduNetworkError(
                        f"{p.service}/{p.method} to {self.addr}: stream reset by peer ({_code_name(ev.error_code)})"
                    )
                )
        self._release_slot()
        if not self.usable:
            self._close_if_idle()

    def on_terminated(self, ev: jh2.events.ConnectionTerminated) -> None:
        self.usable = False
        self.client._forget(self)
        last = ev.last_stream_id if ev.last_stream_id is not None else 0
        graceful = ev.error_code in (0, jh2.errors.ErrorCodes.NO_ERROR, None)
        for sid in [s for s in self.streams if s > last or not graceful]:
            p = self.streams.pop(sid)
            if not p.fut.done():
                if sid > last:
                    p.fut.set_exception(_Unprocessed())
                else:
                    p.fut.set_exception(
                        KuduNetworkError(f"connection to {self.addr} closed by peer ({_code_name(ev.error_code)})")
                    )
        self._wake_waiters()
        self._close_if_idle()

    def on_connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self.client._forget(self)
        why = f": {exc}" if exc else ""
        streams, self.streams = self.streams, {}
        for p in streams.values():
            if not p.fut.done():
                p.fut.set_exception(KuduNetworkError(f"connection to {self.addr} lost{why}"))
        self._wake_waiters()
        if not self.lost.done():
            self.lost.set_result(None)

    def _wake_waiters(self) -> None:
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_exception(_Unprocessed())

    def _close_if_idle(self) -> None:
        """A connection no longer taking calls closes once its last call is answered."""
        if not self.usable and not self.streams and not self.closed:
            self.close_connection()


def _expire_waiter(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(KuduTimedOut("timed out waiting for a free HTTP/2 stream"))


def _code_name(code: Any) -> str:
    try:
        return jh2.errors.ErrorCodes(code).name
    except ValueError:
        return str(code)


class RpcClient:
    """A pool of HTTP/2 connections, one per peer ``host:port``; safe to share within one event loop."""

    def __init__(
        self,
        node_name: str = "",
        *,
        faults: FaultInjector | None = None,
        metrics: MetricEntity | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_queued_per_peer: int = DEFAULT_MAX_QUEUED_PER_PEER,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.node_name = node_name
        self._source_b = node_name.encode()
        self.faults = faults
        self.max_response_bytes = max_response_bytes
        self.max_queued_per_peer = max_queued_per_peer
        self.window = window
        self._conns: dict[str, _ClientConnection] = {}
        self._connecting: dict[str, asyncio.Task[_ClientConnection]] = {}
        self._all: set[_ClientConnection] = set()
        self._closed = False
        self._m_connects: Counter | None = None
        self._m_failures: Counter | None = None
        if metrics is not None:
            self._m_connects = metrics.counter("rpc_client_connections_opened", "Outgoing RPC connections opened")
            self._m_failures = metrics.counter(
                "rpc_client_connect_failures", "Outgoing RPC connection attempts that failed"
            )

    async def call(
        self,
        addr: str,
        service: str,
        method: str,
        request: Any = None,
        timeout_s: float = 10.0,
    ) -> Any:
        """Call ``service/method`` on the peer at ``addr``; the decoded answer, or a typed exception."""
        if self._closed:
            raise KuduIllegalState("RpcClient is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            body = codec.encode_msgpack(request)
        except (TypeError, ValueError, OverflowError) as e:
            raise KuduInvalidArgument(f"request for {service}/{method} cannot be encoded as msgpack: {e}") from None
        fault_applied = False
        faults = self.faults
        if faults is not None and faults.active:
            decision = faults.decide(self.node_name, (addr,))
            if decision is not None:
                if decision.drop:
                    await asyncio.sleep(max(0.0, deadline - loop.time()))
                    raise KuduTimedOut(
                        f"{service}/{method} to {addr} timed out after {timeout_s:g}s (dropped by fault injection)",
                        {"deadline_exceeded": True},
                    )
                await asyncio.sleep(min(decision.delay_s, max(0.0, deadline - loop.time())))
                fault_applied = True
        headers_tail: list[tuple[bytes, bytes]] = [
            (b"content-type", codec.MSGPACK_B),
        ]
        if self._source_b:
            headers_tail.append((b"x-kudu-source", self._source_b))
        if fault_applied:
            headers_tail.append((b"x-kudu-fault-applied", b"1"))
        path = f"/{service}/{method}".encode()
        authority = addr.encode()
        for attempt in range(_MAX_ATTEMPTS):
            conn = self._conns.get(addr)
            if conn is None or not conn.usable:
                conn = await self._connect(addr, deadline, timeout_s)
            try:
                if not conn.has_slot():
                    await conn.wait_slot(deadline)
            except _Unprocessed:
                continue
            remaining_ms = int((deadline - loop.time()) * 1000.0)
            if remaining_ms <= 0:
                raise KuduTimedOut(f"{service}/{method} to {addr} timed out after {timeout_s:g}s before sending")
            headers = [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", path),
                (b":authority", authority),
                (b"x-deadline-ms", str(remaining_ms).encode()),
                *headers_tail,
            ]
            fut: asyncio.Future[_Pending] = loop.create_future()
            p = _Pending(fut, service, method)
            try:
                sid = conn.start(headers, body, p)
            except _Unprocessed:
                continue
            timer = loop.call_at(deadline, conn.expire, sid, p, timeout_s)
            try:
                await fut
            except _Unprocessed:
                if attempt + 1 < _MAX_ATTEMPTS:
                    continue
                raise KuduNetworkError(
                    f"{service}/{method} to {addr}: refused by a server that is shutting down"
                ) from None
            except asyncio.CancelledError:
                conn.abandon(sid)
                raise
            finally:
                timer.cancel()
            return self._answer(addr, p)
        raise KuduNetworkError(f"{service}/{method} to {addr}: no connection would take the call")

    def _answer(self, addr: str, p: _Pending) -> Any:
        chunks = p.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if p.status == 200:
            try:
                return codec.decode(body, p.ctype)
            except KuduBadStatus as e:
                raise KuduRemoteError(f"undecodable answer to {p.service}/{p.method} from {addr}: {e}") from None
        try:
            decoded = codec.decode(body, p.ctype)
        except KuduBadStatus:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("code"), str):
            raise error_from_dict(decoded)
        raise KuduRemoteError(
            f"HTTP {p.status} from {addr} for {p.service}/{p.method} without an error body",
            {"http_status": p.status},
        )

    async def _connect(self, addr: str, deadline: float, timeout_s: float) -> _ClientConnection:
        task = self._connecting.get(addr)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(addr))
            self._connecting[addr] = task
            task.add_done_callback(lambda t: self._connect_done(addr, t))
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(asyncio.shield(task), max(remaining, 0.0))
        except TimeoutError:
            raise KuduTimedOut(
                f"connecting to {addr} timed out (call timeout {timeout_s:g}s)", {"deadline_exceeded": True}
            ) from None

    def _connect_done(self, addr: str, task: asyncio.Task[_ClientConnection]) -> None:
        if self._connecting.get(addr) is task:
            del self._connecting[addr]
        if not task.cancelled():
            task.exception()  # retrieved here so an abandoned attempt does not warn

    async def _open(self, addr: str) -> _ClientConnection:
        try:
            host, port = codec.parse_addr(addr)
        except ValueError as e:
            raise KuduNetworkError(str(e)) from None
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(lambda: _ClientConnection(self, addr), host, port)
        except OSError as e:
            if self._m_failures is not None:
                self._m_failures.increment()
            raise KuduNetworkError(f"cannot connect to {addr}: {e.strerror or e}") from None
        if self._closed:
            proto.close_connection()
            raise KuduIllegalState("RpcClient is closed")
        if self._m_connects is not None:
            self._m_connects.increment()
        self._conns[addr] = proto
        self._all.add(proto)
        return proto

    def _forget(self, conn: _ClientConnection) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]
        if conn.lost.done() or conn.closed:
            self._all.discard(conn)

    def inflight(self) -> list[dict[str, Any]]:
        """Outstanding calls for ``/rpcz``: method, remote, elapsed milliseconds."""
        now = time.monotonic()
        out = []
        for conn in list(self._all):
            for p in list(conn.streams.values()):
                out.append(
                    {
                        "method": f"{p.service}/{p.method}",
                        "remote": conn.addr,
                        "elapsed_ms": round((now - p.start) * 1000.0, 3),
                    }
                )
        return out

    def connected_peers(self) -> list[str]:
        return sorted(self._conns)

    async def close(self, timeout_s: float = 2.0) -> None:
        """Fail outstanding calls with KuduNetworkError and close every connection."""
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        conns = list(self._all)
        self._conns.clear()
        for conn in conns:
            conn.usable = False
            streams, conn.streams = conn.streams, {}
            for p in streams.values():
                if not p.fut.done():
                    p.fut.set_exception(KuduNetworkError(f"RpcClient closed while calling {conn.addr}"))
            conn._wake_waiters()
            conn.close_connection()
        if conns:
            await asyncio.wait([c.lost for c in conns], timeout=timeout_s)
        self._all.clear()
