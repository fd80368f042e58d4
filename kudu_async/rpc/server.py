"""The RPC server: ``POST /<Service>/<Method>`` over h2c, msgpack or JSON bodies, typed errors.

Every request is checked before any handler runs (path, service, method, content type, deadline, body
size, per-service queue, body decoding); each failure has its own status code, so a caller always learns
what was wrong and the server keeps serving. Those rules live in ``rpc/connection.py``
(``ServerConnection``); this module is the asyncio shell that feeds it bytes and the loop's clock and
runs a task per admitted call. A handler's result is encoded with the request's codec. A handler
raising ``KuduBadStatus`` sends that code; any other exception becomes RUNTIME_ERROR (logged with its
traceback). Error bodies are ``{"code", "message", "details"}`` with the code's HTTP status.

Deadlines: ``x-deadline-ms`` is the caller's remaining time when it sent the call. The server measures
it from the arrival of the request headers, refuses to start a handler whose deadline already passed,
and cancels a running handler at the deadline, answering TIMED_OUT.

Encryption (``RpcServer.tls``, security/tls.py): with TLS on, one port serves TLS and cleartext alike,
told apart by the connection's first byte (a TLS ClientHello starts with 0x16, an h2c client with its
preface), peeked before the connection is handed to the protocol; under ``required`` a cleartext
connection gets an HTTP/2 GOAWAY with INADEQUATE_SECURITY (so the client learns to use TLS) and is
closed. All of it happens once, at accept: a call on an established connection costs the same.

Queues are bounded per service (``max_inflight_per_service``): an overloaded service answers
SERVICE_UNAVAILABLE at once so that callers back off, as Kudu's service queues do.

Authorization: every method declares who may call it (``requires``, see ``security/acl.py``) and the
server checks the call's identity against its ACLs before the body is decoded, so a caller without the
right learns NOT_AUTHORIZED and nothing about the method's input rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import jh2.config
import jh2.connection
import jh2.errors

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotAuthorized,
    KuduRuntimeError,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.metrics import Counter, MetricEntity
from kudu_async.rpc import codec
from kudu_async.rpc.connection import (
    CANCEL,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONCURRENT_STREAMS,
    DEFAULT_MAX_INFLIGHT_PER_SERVICE,
    DEFAULT_WINDOW,
    Decoder,
    Method,
    Request,
    Router,
    RpcProtocolError,
    ServerConnection,
    Service,
)
from kudu_async.rpc.faults import FaultInjector
from kudu_async.rpc.protocol import RpcProtocol, peer_name
from kudu_async.security.acl import REQUIREMENTS, Acls, Requires
from kudu_async.security.identity import ANONYMOUS, Authenticator, Identity, TlsPeer, claimed_identity
from kudu_async.security.tls import ALPN_H2, ServerTls, peer_of

log = logging.getLogger("kudu_async.rpc")

# A connection must send its first byte, and finish its TLS handshake, within this long.
HANDSHAKE_TIMEOUT_S = 10.0
# Connections accepted and not yet past their first byte / handshake; more are closed at once.
MAX_PENDING_HANDSHAKES = 256


# What a server requiring TLS answers a cleartext HTTP/2 client: its SETTINGS, then GOAWAY (last stream
# 0, INADEQUATE_SECURITY, "TLS required"), so the client knows to reconnect over TLS.
def _tls_required_goaway() -> bytes:
    h2 = jh2.connection.H2Connection(jh2.config.H2Configuration(client_side=False))
    h2.initiate_connection()
    h2.close_connection(error_code=jh2.errors.ErrorCodes.INADEQUATE_SECURITY, additional_data=b"TLS required")
    data: bytes = h2.data_to_send()
    return data


_TLS_REQUIRED_GOAWAY = _tls_required_goaway()


@dataclass(slots=True)
class CallContext:
    """What a handler may want to know about its call.

    ``deadline`` is on the event loop's clock (``asyncio.get_running_loop().time()``, monotonic), or
    ``None`` when the caller sent no ``x-deadline-ms``; ``remaining()`` is the convenient form.
    """

    service: str
    method: str
    remote: str
    source: str
    deadline: float | None
    content_type: str
    start: float = field(default_factory=time.monotonic)
    # Who the call acts as: the server's authenticator decides; without one, the name the caller gave.
    identity: Identity = ANONYMOUS

    @property
    def full_method(self) -> str:
        return f"{self.service}/{self.method}"

    def remaining(self) -> float | None:
        """Seconds left before the deadline (may be negative), or None without a deadline."""
        if self.deadline is None:
            return None
        return self.deadline - asyncio.get_running_loop().time()

    def time_left(self, default_s: float = 10.0, margin_s: float = 0.05) -> float:
        """A timeout for work done on behalf of this call: what the caller's deadline leaves (minus a margin
        to answer in), or ``default_s`` without a deadline; never below 50 ms."""
        remaining = self.remaining()
        return default_s if remaining is None else max(0.05, remaining - margin_s)


Handler = Callable[[Any, CallContext], Awaitable[Any]]


class BodyCodec(Protocol):
    """How a method's bodies are read and written when it has its own message types."""

    def decode(self, body: bytes, content_type: str) -> Any: ...

    def encode(self, obj: Any, content_type: str) -> bytes: ...


def _keep_body(body: bytes, content_type: str) -> bytes:
    """The connection's decoding step for a guarded method: the body is decoded after the caller passed."""
    return body


class _GuardedMethod(Method):
    """A method whose callers are checked: its requirement and the decoder run once they pass."""

    __slots__ = ("body_decode", "requires")

    def __init__(self, *args: Any, requires: Requires, body_decode: Decoder, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requires = requires
        self.body_decode = body_decode


# Refused calls are logged (as warnings) at most this often.
DENIAL_LOG_INTERVAL_S = 1.0
# Told of every refused call (the node writes it to the audit log): the call and the refusal.
DenialHook = Callable[[CallContext, KuduNotAuthorized], None]


class _Call:
    """A running call: its handler task runs until it answers (or the caller resets the stream)."""

    __slots__ = ("cancel_reason", "ctx", "proto", "req", "task")

    def __init__(self, proto: _ServerProtocol, req: Request, ctx: CallContext) -> None:
        self.proto = proto
        self.req = req
        self.ctx = ctx
        self.task: asyncio.Task[None] | None = None
        # Why the task was cancelled: "deadline", "abandoned" (caller reset the stream) or "" (shutdown).
        self.cancel_reason = ""

    def cancel(self, reason: str) -> None:
        if self.task is not None and not self.task.done() and not self.cancel_reason:
            self.cancel_reason = reason
            self.task.cancel()

    def cancelled_error(self) -> KuduBadStatus:
        """The answer for a handler that was cancelled, by why it was."""
        name = self.ctx.full_method
        if self.cancel_reason == "deadline":
            return KuduTimedOut(f"{name} did not finish within its deadline", {"deadline_exceeded": True})
        if self.cancel_reason == "abandoned":
            return KuduTimedOut(f"{name} abandoned by the caller")
        # "shutdown", or cancelled from inside the handler
        return KuduServiceUnavailable(f"{name} cancelled: the server is shutting down")


class _ServerProtocol(RpcProtocol):
    """One accepted connection: feeds its ServerConnection and starts a task per admitted call."""

    rpc: ServerConnection
    # The connection's TLS state and verified client certificate; None on a cleartext connection.
    tls_peer: TlsPeer | None = None

    def __init__(self, server: RpcServer) -> None:
        super().__init__(
            ServerConnection(server._router, max_concurrent_streams=server.max_concurrent_streams, window=server.window)
        )
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            if ssl_object.selected_alpn_protocol() != ALPN_H2:
                log.warning("TLS client %s did not negotiate ALPN h2; closing the connection", peer_name(transport))
                cast(asyncio.Transport, transport).abort()
                self.lost = True
                return
            self.tls_peer = peer_of(ssl_object)
        super().connection_made(transport)
        self.server._connection_opened(self)

    def data_received(self, data: bytes | memoryview) -> None:
        try:
            events = self.rpc.receive_data(data, self.loop.time())
        except RpcProtocolError as e:
            log.warning("HTTP/2 protocol error from %s: %s; closing the connection", self.peer, e)
            self.flush()
            self.abort_connection()
            return
        for req in events:
            if req.abandoned:
                # The caller gave up (its deadline, or it was cancelled): stop the work nobody will read,
                # as the server's own deadline would. Handlers are cancellation-safe for that reason already.
                call = req.handle
                if call is not None:
                    call.cancel("abandoned")
            else:
                self.server._start(self, req)
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is None:  # refused in connection_made
            return
        self.lost = True
        self.rpc.connection_lost()
        self.server._connection_closed(self)


def dual_stack_listener(host: str, port: int) -> socket.socket | None:
    """A listening socket for ``::`` that takes IPv4 connections too, as a C server binding ``[::]`` gets
    on Linux (asyncio's own sockets would be IPv6-only); None for any other host, or where the system
    has no dual-stack sockets (then ``::`` means IPv6 only)."""
    if host.strip("[]") != "::" or not socket.has_dualstack_ipv6():
        return None
    listener = socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=1024)
    listener.setblocking(False)
    return listener


class RpcServer:
    """Serves registered ``Service/Method`` handlers over HTTP/2: cleartext (prior knowledge), or TLS with
    ALPN h2 as ``tls`` allows."""

    def __init__(
        self,
        metrics: MetricEntity | None = None,
        *,
        node_name: str = "",
        faults: FaultInjector | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_inflight_per_service: int = DEFAULT_MAX_INFLIGHT_PER_SERVICE,
        max_concurrent_streams: int = DEFAULT_MAX_CONCURRENT_STREAMS,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        if max_body_bytes <= 0 or max_inflight_per_service <= 0 or max_concurrent_streams <= 0:
            raise KuduInvalidArgument("RpcServer limits must be positive")
        self.node_name = node_name
        self.faults = faults
        self.max_body_bytes = max_body_bytes
        self.max_inflight_per_service = max_inflight_per_service
        self.max_concurrent_streams = max_concurrent_streams
        self.window = window
        # Set by the node when security is configured; every call's identity then goes through it.
        self.authenticator: Authenticator | None = None
        # Who may call what (``requires`` of each method); the node sets its flags' ACLs.
        self.acls: Acls = Acls.open()
        self.on_denied: DenialHook | None = None
        self._denied_logged_at = -DENIAL_LOG_INTERVAL_S
        self._denied_unlogged = 0
        # What connections may be (--rpc-encryption); None serves cleartext only. Set before start; its
        # context may be replaced at any time (a new certificate), later connections use it.
        self.tls: ServerTls | None = None
        self._listener: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._metrics = metrics
        self._router = Router(metrics, max_body_bytes)
        self._connections: set[_ServerProtocol] = set()
        self._calls: set[_Call] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Future[None] | None = None
        self.host = ""
        self.port = 0
        # How an admitted call starts: straight to its handler, or through the fault rules while any are set.
        self._start: Callable[[_ServerProtocol, Request], None] = self._start_call
        if faults is not None:
            faults.subscribe(self._faults_changed)
        self._m_accepted: Counter | None = None
        if metrics is not None:
            self._m_accepted = metrics.counter("rpc_connections_accepted", "Incoming RPC connections accepted")
            metrics.gauge("rpc_connections_open", "Open incoming RPC connections", read=lambda: len(self._connections))
            metrics.gauge("rpcs_in_flight", "Calls whose handler is running", read=lambda: len(self._calls))

    # --- registration -----------------------------------------------------------------------------------

    def register(
        self,
        service: str,
        method: str,
        handler: Handler,
        *,
        requires: Requires,
        messages: BodyCodec | None = None,
    ) -> None:
        """Serve ``POST /service/method`` with ``await handler(request, ctx)`` to callers who meet
        ``requires`` (checked before the body is decoded); ``messages`` decodes the request bodies and
        encodes the answers (default: plain maps, see ``kudu_async.rpc.codec``); its decode raises
        ``KuduBadStatus`` (e.g. INVALID_ARGUMENT naming the field) to refuse the call."""
        for what, name in (("service", service), ("method", method)):
            if not name or "/" in name or not name.isprintable():
                raise KuduInvalidArgument(f"bad {what} name {name!r}")
        if not callable(handler):
            raise KuduInvalidArgument(f"handler for {service}/{method} is not callable")
        if requires not in REQUIREMENTS:
            raise KuduInvalidArgument(f"{service}/{method}: requires={requires!r}, expected one of {REQUIREMENTS}")
        services = self._router.services
        svc = services.get(service)
        if svc is None:
            svc = services[service] = Service(service, self.max_inflight_per_service)
        if method in svc.methods:
            raise KuduIllegalState(f"{service}/{method} is already registered")
        decode = None if messages is None else messages.decode
        encode = None if messages is None else messages.encode
        if requires == "any":
            svc.methods[method] = Method(svc, method, handler, self._metrics, decode=decode, encode=encode)
        else:
            svc.methods[method] = _GuardedMethod(
                svc,
                method,
                handler,
                self._metrics,
                decode=_keep_body,
                encode=encode,
                requires=requires,
                body_decode=decode if decode is not None else codec.decode,
            )

    def requirements(self) -> dict[str, Requires]:
        """``Service/Method`` -> what its callers need, for every registered method."""
        out: dict[str, Requires] = {}
        for name, s in sorted(self._router.services.items()):
            for mname, m in sorted(s.methods.items()):
                out[f"{name}/{mname}"] = m.requires if isinstance(m, _GuardedMethod) else "any"
        return out

    def services(self) -> dict[str, list[str]]:
        return {name: sorted(s.methods) for name, s in sorted(self._router.services.items())}

    # --- lifecycle --------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The bound ``host:port`` (valid after start)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on host:port (0 picks a free port; read it from ``.port``)."""
        if self._server is not None:
            raise KuduIllegalState("RpcServer already started")
        if self._listener is not None:
            raise KuduIllegalState("RpcServer already started")
        loop = asyncio.get_running_loop()
        host = host.strip("[]")
        dual = dual_stack_listener(host, port)
        if self.tls is None or self.tls.mode == "disabled":
            if dual is not None:
                self._server = await loop.create_server(lambda: _ServerProtocol(self), sock=dual, backlog=1024)
            else:
                self._server = await loop.create_server(lambda: _ServerProtocol(self), host, port, backlog=1024)
            sock = self._server.sockets[0].getsockname()
        else:
            if dual is not None:
                listener = dual
            else:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
                if not infos:
                    raise KuduInvalidArgument(f"cannot resolve {host!r} to listen on")
                family, _, _, _, sockaddr = infos[0]
                listener = socket.create_server(sockaddr[:2], family=family, backlog=1024)
            listener.setblocking(False)
            self._listener = listener
            sock = listener.getsockname()
            self._acceptor = loop.create_task(self._accept_loop(listener), name="rpc-accept")
        self.host, self.port = sock[0], sock[1]
        self._sweeper = loop.call_later(1.0, self._sweep)

    # --- accepting with TLS -------------------------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except asyncio.CancelledError:
                raise
            except OSError as e:  # out of descriptors, or a connection reset while queued: keep serving
                log.warning("accepting an RPC connection failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            if len(self._pending) >= MAX_PENDING_HANDSHAKES or self._stopping is not None:
                conn.close()
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._handshake(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _handshake(self, conn: socket.socket) -> None:
        """Wait for the connection's first byte, then serve it as TLS, cleartext, or refuse it."""
        loop = asyncio.get_running_loop()
        tls = self.tls
        assert tls is not None
        try:
            peer = conn.getpeername()
        except OSError:
            conn.close()
            return
        where = f"{peer[0]}:{peer[1]}"
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                first = await _peek_first_byte(loop, conn)
                if first is None:
                    conn.close()
                    return
                decision = tls.accepts(first)
                if decision == "refuse":
                    log.warning(
                        "refused a cleartext RPC connection from %s: this server requires TLS "
                        "(--rpc-encryption=required)",
                        where,
                    )
                    await _refuse_cleartext(loop, conn)
                    return
                ctx = tls.context if decision == "tls" else None
                await loop.connect_accepted_socket(
                    lambda: _ServerProtocol(self),
                    conn,
                    ssl=ctx,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if ctx else None,
                )
        except TimeoutError:
            log.info("RPC connection from %s sent nothing or did not finish its TLS handshake in time; closed", where)
            _hang_up(conn)
        except (ssl.SSLError, OSError) as e:
            log.warning("TLS handshake with RPC client %s failed: %s", where, e)
            _hang_up(conn)

    def _sweep(self) -> None:
        """Once a second: time out requests stuck half-uploaded past their deadline (slow or dead peers)."""
        if self._stopping is not None:
            return
        now = asyncio.get_running_loop().time()
        for proto in list(self._connections):
            if proto.rpc.requests:
                proto.rpc.expire_uploads(now)
                proto.flush()
        self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let running calls finish for up to ``grace_s``, then cancel and close."""
        if (self._server is None and self._listener is None) or self._stopping is not None:
            return
        loop = asyncio.get_running_loop()
        self._stopping = loop.create_future()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        if self._acceptor is not None:
            self._acceptor.cancel()
            await asyncio.gather(self._acceptor, return_exceptions=True)
            for task in list(self._pending):
                task.cancel()
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        # No GOAWAY yet: h2 moves a connection that received one to CLOSED and then rejects the answers
        # still to come. New streams are refused instead (REFUSED_STREAM: the client knows it may retry
        # them elsewhere), running calls finish, and GOAWAY goes out with the close.
        for proto in list(self._connections):
            proto.rpc.draining = True
        await self._drain(loop.time() + grace_s)
        leftovers = [c.task for c in self._calls if c.task is not None]
        for c in list(self._calls):
            c.cancel("shutdown")
        if leftovers:
            await asyncio.gather(*leftovers, return_exceptions=True)
        for proto in list(self._connections):
            proto.close_connection()
        if self._server is not None:
            await self._server.wait_closed()
        # Let connection_lost run for the transports just closed.
        for _ in range(3):
            if not self._connections:
                break
            await asyncio.sleep(0)
        if self.faults is not None:
            self.faults.unsubscribe(self._faults_changed)
        self._stopping.set_result(None)

    async def _drain(self, end: float) -> None:
        """Wait until no call runs and no request is half uploaded, or until ``end`` on the loop's clock."""
        loop = asyncio.get_running_loop()
        # Polled: the condition spans every connection's partly uploaded requests as well as calls.
        while (self._calls or any(p.rpc.requests for p in self._connections)) and loop.time() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    def buffered_bytes(self) -> int:
        """Request bodies held (arriving, or admitted and still running) plus answers not yet sent: what
        this server's calls keep in memory, for the node's memory tracker."""
        total = sum(c.req.size for c in list(self._calls))
        for p in list(self._connections):
            conn = p.rpc
            total += conn.unsent_bytes() + sum(r.size for r in list(conn.requests.values()))
        return total

    def inflight(self) -> list[dict[str, Any]]:
        """Running calls for ``/rpcz``: method, remote, source, elapsed and remaining milliseconds."""
        now = time.monotonic()
        loop_now = asyncio.get_running_loop().time()
        out = []
        for c in list(self._calls):
            ctx = c.ctx
            out.append(
                {
                    "method": ctx.full_method,
                    "remote": ctx.remote,
                    "source": ctx.source,
                    "elapsed_ms": round((now - ctx.start) * 1000.0, 3),
                    "deadline_remaining_ms": None
                    if ctx.deadline is None
                    else round((ctx.deadline - loop_now) * 1000.0, 3),
                }
            )
        return out

    # --- internals --------------------------------------------------------------------------------------

    def _connection_opened(self, proto: _ServerProtocol) -> None:
        self._connections.add(proto)
        if self._m_accepted is not None:
            self._m_accepted.increment()
        if self._stopping is not None:
            proto.rpc.draining = True
            proto.close_connection()

    def _connection_closed(self, proto: _ServerProtocol) -> None:
        self._connections.discard(proto)

    def _faults_changed(self, active: bool) -> None:
        self._start = self._start_with_faults if active else self._start_call

    def _start_call(self, proto: _ServerProtocol, req: Request, delay: float = 0.0) -> None:
        """Run the handler of an admitted call in its own task."""
        m = req.method
        assert m is not None
        ctx = CallContext(m.service.name, m.name, proto.peer, req.source, req.deadline, req.ctype)
        if req.claimed_user:
            ctx.identity = claimed_identity(req.claimed_user)
        call = req.handle = _Call(proto, req, ctx)
        self._calls.add(call)
        call.task = proto.loop.create_task(self._run(call, req.body, delay))

    def _authorize(self, ctx: CallContext, requires: Requires) -> None:
        """Refuse a caller that does not meet the method's requirement (NOT_AUTHORIZED naming both). The
        warning is logged at most once a second with the count since, so a flood cannot fill the log (the
        audit log, bounded by rotation, keeps every refusal)."""
        acls = self.acls
        if not acls.allowed(ctx.identity, requires):
            self._denied_unlogged += 1
            now = time.monotonic()
            if now - self._denied_logged_at >= DENIAL_LOG_INTERVAL_S:
                log.warning(
                    "unauthorized call of %s by %s from %s (%d refused since the last such warning)",
                    ctx.full_method,
                    ctx.identity.describe(),
                    ctx.remote,
                    self._denied_unlogged,
                )
                self._denied_logged_at = now
                self._denied_unlogged = 0
            acls.check(ctx.identity, requires, ctx.full_method)

    def _start_with_faults(self, proto: _ServerProtocol, req: Request) -> None:
        """``_start_call`` behind the fault rules: drop the call, or delay its handler."""
        faults = self.faults
        decision = None
        if faults is not None and not req.fault_applied:
            decision = faults.decide(req.source, (self.node_name, self.address))
        if decision is None:
            self._start_call(proto, req)
        elif decision.drop:
            # Black hole: never answer; free the stream after the call's deadline.
            proto.rpc.drop(req)
            if req.deadline is None:
                proto.rpc.reset_stream(req.sid, CANCEL)
            else:
                proto.loop.call_at(req.deadline + 1.0, self._reset_dropped, proto, req.sid)
        else:
            self._start_call(proto, req, decision.delay_s)

    @staticmethod
    def _reset_dropped(proto: _ServerProtocol, sid: int) -> None:
        proto.rpc.reset_stream(sid, CANCEL)
        proto.schedule_flush()

    async def _run(self, call: _Call, request: Any, delay: float) -> None:
        ctx = call.ctx
        req = call.req
        m = req.method
        assert m is not None
        proto = call.proto
        t0 = time.perf_counter()
        err: KuduBadStatus | None = None
        body = b""
        # One timer handle enforces the deadline (cheaper than asyncio.timeout_at on the hot path).
        timer = None if ctx.deadline is None else proto.loop.call_at(ctx.deadline, call.cancel, "deadline")
        try:
            if delay:
                await asyncio.sleep(delay)
            if self.authenticator is not None:
                ctx.identity = self.authenticator.authenticate(req.credentials, req.claimed_user, proto.tls_peer)
            if isinstance(m, _GuardedMethod):
                self._authorize(ctx, m.requires)
                request = m.body_decode(request, ctx.content_type)
            result = await m.handler(request, ctx)
            body = m.encode(result, ctx.content_type)
        except KuduNotAuthorized as e:
            err = e
            if self.on_denied is not None:
                self.on_denied(ctx, e)
        except KuduBadStatus as e:
            err = e
        except asyncio.CancelledError:
            err = call.cancelled_error()
        except Exception as e:
            log.exception("handler %s raised (caller %s %s)", ctx.full_method, ctx.source or "-", ctx.remote)
            err = KuduRuntimeError(f"{ctx.full_method} failed: {type(e).__name__}: {e}")
        finally:
            if timer is not None:
                timer.cancel()
            if m.latency is not None:
                m.latency.record((time.perf_counter() - t0) * 1e6)
            self._calls.discard(call)
            # The request and its call refer to each other: part them, so refcounting frees both at once
            # instead of leaving a cycle per call to the garbage collector (its pauses were the p99 at load).
            req.handle = None
        rpc = proto.rpc
        if call.cancel_reason == "abandoned":
            rpc.abandon(req)
        elif err is None:
            rpc.respond(req, body)
        else:
            rpc.respond_error(req, err)
        if not proto.lost:
            proto.schedule_flush()


async def _peek_first_byte(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> int | None:
    """The connection's first byte, left in the socket for the protocol to read; None when the peer closed."""
    while True:
        try:
            data = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(conn.fileno(), _set_done, readable)
            try:
                await readable
            finally:
                loop.remove_reader(conn.fileno())
            continue
        return data[0] if data else None


def _hang_up(conn: socket.socket) -> None:
    """End a connection now. A failed TLS transport may still hold the socket (uvloop closes it
    gracefully, waiting on a peer that waits on us); shutdown ends the TCP connection regardless."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _refuse_cleartext(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    """Answer a cleartext client of a TLS-only server with GOAWAY(INADEQUATE_SECURITY) and close. What the
    client sent is read to its end first (briefly), so the close is a FIN the client reads after the
    GOAWAY rather than a reset that could overtake it."""
    try:
        await loop.sock_sendall(conn, _TLS_REQUIRED_GOAWAY)
        conn.shutdown(socket.SHUT_WR)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                received = 0
                while received < 1 << 20:
                    chunk = await loop.sock_recv(conn, 65536)
                    if not chunk:
                        break
                    received += len(chunk)
    except OSError as e:
        log.debug("closing a refused cleartext connection: %s", e)
    finally:
        conn.close()
