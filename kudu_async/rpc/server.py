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

Queues are bounded per service (``max_inflight_per_service``): an overloaded service answers
SERVICE_UNAVAILABLE at once so that callers back off, as Kudu's service queues do.

Authorization: every method declares who may call it (``requires``, see ``security/acl.py``) and the
server checks the call's identity against its ACLs before the body is decoded, so a caller without the
right learns NOT_AUTHORIZED and nothing about the method's input rules.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

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
from kudu_async.rpc.protocol import RpcProtocol
from kudu_async.security.acl import REQUIREMENTS, Acls, Requires
from kudu_async.security.identity import ANONYMOUS, Authenticator, Identity, TlsPeer, claimed_identity

log = logging.getLogger("kudu_async.rpc")


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
        self.lost = True
        self.rpc.connection_lost()
        self.server._connection_closed(self)


class RpcServer:
    """Serves registered ``Service/Method`` handlers over HTTP/2 cleartext (prior knowledge)."""

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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerProtocol(self), host, port, backlog=1024)
        sock = self._server.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        self._sweeper = loop.call_later(1.0, self._sweep)

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
        if self._server is None or self._stopping is not None:
            return
        loop = asyncio.get_running_loop()
        self._stopping = loop.create_future()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._server.close()
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
