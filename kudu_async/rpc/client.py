"""The pooled RPC client: one HTTP/2 connection per peer address, many concurrent calls over it.

``await client.call("host:port", "Service", "Method", request, timeout_s=10.0)`` returns the decoded
answer or raises the typed exception of ``kudu_async.common.errors`` that the server sent. Transport
failures are typed too: a refused, reset or lost connection is ``KuduNetworkError``; a passed deadline
is ``KuduTimedOut`` (enforced locally as well, so a dead peer cannot hold a caller past its timeout).

A call costs no task of its own: it registers a future on its stream, the connection's protocol
completes it from the connection object's events (``rpc/connection.py`` holds the rules), and one timer
handle enforces the deadline. Calls the server provably
did not process (GOAWAY beyond them, REFUSED_STREAM) are retried on a fresh connection within the
deadline, so a peer's graceful restart is invisible to callers. Calls are never retried otherwise: the
layers above know which of their calls are idempotent.

Encryption (``RpcClient.tls``, security/tls.py) is decided when a connection opens: TLS with ALPN h2 or
cleartext h2c, per the client's policy and the peer's address. A server that requires TLS answers a
cleartext connection with GOAWAY(INADEQUATE_SECURITY); its calls were not processed, so they go again,
over TLS, and that peer is reached over TLS from then on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from typing import Any

from kudu_async.common.errors import (
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNetworkError,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.metrics import Counter, MetricEntity
from kudu_async.rpc import codec
from kudu_async.rpc.connection import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_WINDOW,
    Call,
    ClientConnection,
    RpcProtocolError,
    Unprocessed,
    decode_answer,
    request_headers,
)
from kudu_async.rpc.faults import FaultInjector
from kudu_async.rpc.protocol import RpcProtocol
from kudu_async.security.identity import AUTHORIZATION_HEADER, USER_HEADER
from kudu_async.security.tls import ALPN_H2, ClientTls

log = logging.getLogger("kudu_async.rpc")

INADEQUATE_SECURITY = 0xC  # HTTP/2's error code for "use TLS" (RFC 9113 section 7)
DEFAULT_MAX_QUEUED_PER_PEER = 10_000
_MAX_ATTEMPTS = 3


class _ClientProtocol(RpcProtocol):
    """One outgoing connection: feeds its ClientConnection, completes callers' futures, queues callers
    for a stream when the server's MAX_CONCURRENT_STREAMS is reached."""

    rpc: ClientConnection

    def __init__(self, client: RpcClient, addr: str) -> None:
        super().__init__(ClientConnection(addr, max_response_bytes=client.max_response_bytes, window=client.window))
        self.client = client
        self.addr = addr
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.lost_reason: Exception | None = None
        self.answered = False  # the server's first bytes arrived, or the connection ended
        self.first_answer: asyncio.Future[None] | None = None  # for someone waiting for ``answered``

    @property
    def usable(self) -> bool:
        return self.rpc.usable and not self.lost

    # --- capacity -----------------------------------------------------------------------------------------

    def has_slot(self) -> bool:
        return not self.waiters and self.rpc.has_slot()

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
        while waiters and self.rpc.has_slot():
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def _wake_waiters(self) -> None:
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_exception(Unprocessed())

    # --- calls ----------------------------------------------------------------------------------------------

    def send(self, headers: list[tuple[bytes, bytes]], body: bytes, call: Call) -> None:
        self.rpc.send(headers, body, call)
        self.schedule_flush()

    def expire(self, call: Call, timeout_s: float) -> None:
        """The caller's deadline passed: fail the call and tell the server to stop working on it."""
        fut = call.waiter
        if fut.done():
            return
        fut.set_exception(
            KuduTimedOut(
                f"{call.service}/{call.method} to {self.addr} timed out after {timeout_s:g}s",
                {"deadline_exceeded": True},
            )
        )
        self.abandon(call)

    def abandon(self, call: Call) -> None:
        self.rpc.abandon(call)
        self._after_events()
        self.schedule_flush()

    # --- events ---------------------------------------------------------------------------------------------

    def data_received(self, data: bytes | memoryview) -> None:
        try:
            finished = self.rpc.receive_data(data)
        except RpcProtocolError as e:
            log.warning("HTTP/2 protocol error from %s: %s; closing the connection", self.addr, e)
            self.flush()
            self.abort_connection()
            return
        if not self.answered:
            self._answered()
        for call in finished:
            fut = call.waiter
            if not fut.done():
                if call.error is None:
                    fut.set_result(call)
                else:
                    fut.set_exception(call.error)
        self._after_events()
        self.flush()

    def _after_events(self) -> None:
        if self.waiters:
            if self.rpc.usable:
                self._release_slot()
            else:
                self._wake_waiters()
        if not self.rpc.usable:
            if self.rpc.terminated_code == INADEQUATE_SECURITY:
                self.client._peer_requires_tls(self.addr)
            self.client._forget(self)

    def _answered(self) -> None:
        self.answered = True
        fut = self.first_answer
        self.first_answer = None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.lost_reason = exc
        self._answered()
        self.fail(self.rpc.connection_lost(exc))
        self.client._forget(self)
        self._wake_waiters()
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, calls: list[Call]) -> None:
        for call in calls:
            if not call.waiter.done():
                call.waiter.set_exception(call.error)


def _expire_waiter(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(KuduTimedOut("timed out waiting for a free HTTP/2 stream"))


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
        tls: ClientTls | None = None,
    ) -> None:
        self.node_name = node_name
        self.faults = faults
        # When connections are encrypted; None: never (a peer requiring TLS is then unreachable). May be
        # replaced at any time (the node got a new certificate): later connections use it.
        self.tls = tls
        self._refused_clear: set[str] = set()  # peers that require TLS, when this client has none
        self.max_response_bytes = max_response_bytes
        self.max_queued_per_peer = max_queued_per_peer
        self.window = window
        self._headers_tail: list[tuple[bytes, bytes]] = []
        self._headers_tail_faulted: list[tuple[bytes, bytes]] = []
        self.set_credentials(None, None)
        self._conns: dict[str, _ClientProtocol] = {}
        self._connecting: dict[str, asyncio.Task[_ClientProtocol]] = {}
        self._all: set[_ClientProtocol] = set()
        self._closed = False
        self._faulty = False  # some fault rule is set: calls go through _hold_for_faults first
        if faults is not None:
            faults.subscribe(self._faults_changed)
        self._m_connects: Counter | None = None
        self._m_failures: Counter | None = None
        if metrics is not None:
            self._m_connects = metrics.counter("rpc_client_connections_opened", "Outgoing RPC connections opened")
            self._m_failures = metrics.counter(
                "rpc_client_connect_failures", "Outgoing RPC connection attempts that failed"
            )

    def set_credentials(self, user: str | None, authorization: bytes | None) -> None:
        """Send ``user`` (the name an unauthenticated caller gives) and ``authorization`` (a bearer JWT or an
        authn token, security/identity.py) with every later call; None leaves a header out."""
        tail = [(b"content-type", codec.MSGPACK_B)]
        if self.node_name:
            tail.append((b"x-kudu-source", self.node_name.encode()))
        if user:
            tail.append((USER_HEADER, user.encode()))
        if authorization:
            tail.append((AUTHORIZATION_HEADER, authorization))
        self._headers_tail = tail
        self._headers_tail_faulted = [*tail, (b"x-kudu-fault-applied", b"1")]

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
        headers_tail = self._headers_tail
        if self._faulty:
            headers_tail = await self._hold_for_faults(addr, service, method, deadline, timeout_s)
        path = f"/{service}/{method}".encode()
        authority = addr.encode()
        for attempt in range(_MAX_ATTEMPTS):
            conn = self._conns.get(addr)
            if conn is None or not conn.usable or not conn.has_slot():
                conn = await self._ready_connection(addr, conn, deadline, timeout_s)
                if conn is None:
                    continue
            remaining_ms = int((deadline - loop.time()) * 1000.0)
            if remaining_ms <= 0:
                raise KuduTimedOut(f"{service}/{method} to {addr} timed out after {timeout_s:g}s before sending")
            fut: asyncio.Future[Call] = loop.create_future()
            call = Call(service, method, loop.time(), fut)
            try:
                conn.send(request_headers(path, authority, remaining_ms, headers_tail), body, call)
            except Unprocessed:
                continue
            timer = loop.call_at(deadline, conn.expire, call, timeout_s)
            try:
                await fut
            except Unprocessed:
                if attempt + 1 < _MAX_ATTEMPTS:
                    continue
                raise KuduNetworkError(
                    f"{service}/{method} to {addr}: refused by a server that is shutting down"
                ) from None
            except asyncio.CancelledError:
                conn.abandon(call)
                raise
            finally:
                timer.cancel()
            # The future's result is the call, which holds the future: part them (the call is answered and
            # out of the connection), so refcounting frees both instead of leaving a cycle per call to the
            # garbage collector.
            call.waiter = None
            return decode_answer(call, addr)
        raise KuduNetworkError(f"{service}/{method} to {addr}: no connection would take the call")

    async def _ready_connection(
        self, addr: str, conn: _ClientProtocol | None, deadline: float, timeout_s: float
    ) -> _ClientProtocol | None:
        """A usable connection to ``addr`` with a free stream (connecting or queueing for one as needed);
        ``None`` when the connection stopped taking calls meanwhile (try another)."""
        if conn is None or not conn.usable:
            conn = await self._connect(addr, deadline, timeout_s)
            if conn.lost and conn.rpc.terminated_code == INADEQUATE_SECURITY:
                return None  # the server wants TLS: the next attempt knows it (or says this client has none)
            if conn.lost:  # between connecting and this call's turn: no call would ever be answered on it
                why = f": {conn.lost_reason}" if conn.lost_reason else ""
                raise KuduNetworkError(
                    f"connection to {addr} closed right after it was made{why} (over TLS, how a server refuses a "
                    "client certificate its CA did not sign)"
                )
        try:
            if not conn.has_slot():
                await conn.wait_slot(deadline)
        except Unprocessed:
            return None
        return conn

    def _faults_changed(self, active: bool) -> None:
        self._faulty = active

    async def _hold_for_faults(
        self, addr: str, service: str, method: str, deadline: float, timeout_s: float
    ) -> list[tuple[bytes, bytes]]:
        """Apply the fault rules to an outgoing call: wait out a drop (then time out) or a delay; the
        headers to send (marked when a rule was applied, so the server does not apply one again)."""
        faults = self.faults
        decision = None if faults is None else faults.decide(self.node_name, (addr,))
        if decision is None:
            return self._headers_tail
        loop = asyncio.get_running_loop()
        if decision.drop:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            raise KuduTimedOut(
                f"{service}/{method} to {addr} timed out after {timeout_s:g}s (dropped by fault injection)",
                {"deadline_exceeded": True},
            )
        await asyncio.sleep(min(decision.delay_s, max(0.0, deadline - loop.time())))
        return self._headers_tail_faulted

    async def _connect(self, addr: str, deadline: float, timeout_s: float) -> _ClientProtocol:
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

    def _connect_done(self, addr: str, task: asyncio.Task[_ClientProtocol]) -> None:
        if self._connecting.get(addr) is task:
            del self._connecting[addr]
        if not task.cancelled():
            task.exception()  # retrieved here so an abandoned attempt does not warn

    async def _open(self, addr: str) -> _ClientProtocol:
        try:
            host, port = codec.parse_addr(addr)
        except ValueError as e:
            raise KuduNetworkError(str(e)) from None
        tls = self.tls
        if tls is None and addr in self._refused_clear:
            raise KuduNetworkError(
                f"{addr} accepts only TLS connections (its --rpc-encryption is required) and this client does "
                "not encrypt"
            )
        ctx = tls.context if tls is not None and tls.wants_tls(addr, host) else None
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(lambda: _ClientProtocol(self, addr), host, port, ssl=ctx)
        except (ssl.SSLError, ConnectionResetError) as e:
            if self._m_failures is not None:
                self._m_failures.increment()
            if tls is None or ctx is None or not tls.tls_failed(addr, host):
                raise KuduNetworkError(
                    f"TLS connection to {addr} failed ({e}): the server does not offer TLS (--rpc-encryption "
                    "disabled) or its certificate did not verify against the trusted CA certificates"
                ) from None
            log.info("TLS to %s failed (%s); it is reached in cleartext (encryption policy optional)", addr, e)
            return await self._open(addr)
        except OSError as e:
            if self._m_failures is not None:
                self._m_failures.increment()
            raise KuduNetworkError(f"cannot connect to {addr}: {e.strerror or e}") from None
        if ctx is None and tls is not None and not await self._cleartext_accepted(proto, addr):
            return await self._open(addr)
        if ctx is not None:
            ssl_object = proto.transport.get_extra_info("ssl_object") if proto.transport is not None else None
            alpn = None if ssl_object is None else ssl_object.selected_alpn_protocol()
            if alpn != ALPN_H2:
                proto.abort_connection()
                raise KuduNetworkError(f"TLS connection to {addr} did not negotiate ALPN h2 (got {alpn!r})")
        if self._closed:
            proto.close_connection()
            raise KuduIllegalState("RpcClient is closed")
        if self._m_connects is not None:
            self._m_connects.increment()
        self._conns[addr] = proto
        self._all.add(proto)
        return proto

    async def _cleartext_accepted(self, proto: _ClientProtocol, addr: str) -> bool:
        """Before a cleartext connection of a TLS-capable client carries a call: wait for the server's
        first frames (one round trip, at connect only), so that a server requiring TLS says so
        (GOAWAY INADEQUATE_SECURITY) before any call data went out in clear. False: reconnect over TLS."""
        if not proto.answered:  # the answer may have been read already (uvloop reads in the same turn)
            fut = proto.first_answer = proto.loop.create_future()
            await fut
        tls = self.tls
        if proto.rpc.terminated_code == INADEQUATE_SECURITY and tls is not None:
            tls.require_tls_for(addr)
            proto.close_connection()
            return False
        if proto.lost:
            raise KuduNetworkError(f"connection to {addr} closed by the server before it answered")
        return True

    def _peer_requires_tls(self, addr: str) -> None:
        """``addr`` refused a cleartext connection: reach it over TLS from now on, if this client can."""
        if self.tls is not None:
            log.info("%s requires TLS; reconnecting over TLS", addr)
            self.tls.require_tls_for(addr)
        else:
            self._refused_clear.add(addr)

    def _forget(self, conn: _ClientProtocol) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]
        if conn.lost:
            self._all.discard(conn)

    def buffered_bytes(self) -> int:
        """Request bodies not yet sent plus answers arriving: what outgoing calls keep in memory."""
        total = 0
        for conn in list(self._all):
            rpc = conn.rpc
            total += rpc.unsent_bytes() + sum(c.size for c in list(rpc.calls.values()))
        return total

    def inflight(self) -> list[dict[str, Any]]:
        """Outstanding calls for ``/rpcz``: method, remote, elapsed milliseconds."""
        now = asyncio.get_running_loop().time()
        out = []
        for conn in list(self._all):
            for c in list(conn.rpc.calls.values()):
                out.append(
                    {
                        "method": f"{c.service}/{c.method}",
                        "remote": conn.addr,
                        "elapsed_ms": round((now - c.start) * 1000.0, 3),
                    }
                )
        return out

    async def close(self, timeout_s: float = 2.0) -> None:
        """Fail outstanding calls with KuduNetworkError and close every connection."""
        self._closed = True
        if self.faults is not None:
            self.faults.unsubscribe(self._faults_changed)
        for task in list(self._connecting.values()):
            task.cancel()
        conns = list(self._all)
        self._conns.clear()
        for conn in conns:
            conn.fail(conn.rpc.fail_all(f"RpcClient closed while calling {conn.addr}"))
            conn._wake_waiters()
            conn.close_connection()
        if conns:
            await asyncio.wait([c.done for c in conns], timeout=timeout_s)
        self._all.clear()
