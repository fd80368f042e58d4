"""The RPC server: ``POST /<Service>/<Method>`` over h2c, msgpack or JSON bodies, typed errors.

Every request is checked before any handler runs (path, service, method, content type, deadline, body
size, per-service queue, body decoding); each failure has its own status code, so a caller always learns
what was wrong and the server keeps serving. A handler's result is encoded with the request's codec.
A handler raising ``KuduBadStatus`` sends that code; any other exception becomes RUNTIME_ERROR (logged
with its traceback). Error bodies are ``{"code", "message", "details"}`` with the code's HTTP status.

Deadlines: ``x-deadline-ms`` is the caller's remaining time when it sent the call. The server measures
it from the arrival of the request headers, refuses to start a handler whose deadline already passed,
and cancels a running handler at the deadline, answering TIMED_OUT.

Queues are bounded per service (``max_inflight_per_service``): an overloaded service answers
SERVICE_UNAVAILABLE at once so that callers back off, as Kudu's service queues do.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jh2.errors
import jh2.events

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduInvalidRequest,
    KuduNoSuchMethod,
    KuduNoSuchService,
    KuduRequestTooLarge,
    KuduRuntimeError,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.metrics import Counter, Histogram, MetricEntity
from kudu_async.rpc import codec
from kudu_async.rpc.faults import FaultInjector
from kudu_async.rpc.h2_protocol import DEFAULT_WINDOW, H2Protocol

log = logging.getLogger("kudu_async.rpc")

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_INFLIGHT_PER_SERVICE = 1000
DEFAULT_MAX_CONCURRENT_STREAMS = 4096

_STATUS_200 = b"200"
_CONTENT_TYPE_B = {codec.MSGPACK: codec.MSGPACK_B, codec.JSON: codec.JSON_B}


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


def require_map(request: Any) -> dict[str, Any]:
    """Every service's first check: the body is a map (msgpack or JSON object)."""
    if not isinstance(request, dict):
        raise KuduInvalidArgument("request body must be a map")
    return request


Handler = Callable[[Any, CallContext], Awaitable[Any]]


class BodyCodec(Protocol):
    """How a method's bodies are read and written when it has its own message types."""

    def decode(self, body: bytes, content_type: str) -> Any: ...

    def encode(self, obj: Any, content_type: str) -> bytes: ...


class _DefaultCodec:
    """Bodies as plain maps and values (``kudu_async.rpc.codec``)."""

    decode = staticmethod(codec.decode)
    encode = staticmethod(codec.encode)


_DEFAULT_CODEC = _DefaultCodec()


class _Method:
    """A registered method with its metrics, resolved once so a call does no name formatting."""

    __slots__ = ("calls", "codec", "entity", "errors", "handler", "latency", "name", "service")

    def __init__(
        self, service: _Service, name: str, handler: Handler, entity: MetricEntity | None, body_codec: BodyCodec
    ) -> None:
        self.service = service
        self.name = name
        self.handler = handler
        self.codec = body_codec
        self.entity = entity
        self.errors: dict[str, Counter] = {}
        if entity is not None:
            self.calls: Counter | None = entity.counter(
                f"rpc_calls_{service.name}_{name}", f"Calls of {service.name}/{name} received"
            )
            self.latency: Histogram | None = entity.histogram(
                f"handler_latency_{service.name}_{name}", f"Time spent in the {service.name}/{name} handler"
            )
        else:
            self.calls = None
            self.latency = None

    def count_error(self, code: str) -> None:
        c = self.errors.get(code)
        if c is None:
            if self.entity is None:
                return
            c = self.errors[code] = self.entity.counter(
                f"rpc_errors_{self.service.name}_{self.name}_{code}",
                f"Calls of {self.service.name}/{self.name} answered with {code}",
            )
        c.increment()


class _Service:
    __slots__ = ("inflight", "max_inflight", "methods", "name")

    def __init__(self, name: str, max_inflight: int) -> None:
        self.name = name
        self.methods: dict[str, _Method] = {}
        self.max_inflight = max_inflight
        self.inflight = 0


class _Request:
    """A request whose headers arrived and whose body is still coming in."""

    __slots__ = ("chunks", "ctype", "deadline", "fault_applied", "method", "rejected", "sid", "size", "source")

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.chunks: list[bytes] = []
        self.size = 0
        self.ctype = codec.JSON
        self.deadline: float | None = None
        self.source = ""
        self.method: _Method | None = None
        self.rejected = False
        self.fault_applied = False


class _Call:
    """A dispatched call: its handler task runs until it answers (or the caller resets the stream)."""

    __slots__ = ("cancel_reason", "ctx", "method", "proto", "sid", "task")

    def __init__(self, proto: _ServerConnection, sid: int, method: _Method, ctx: CallContext) -> None:
        self.proto = proto
        self.sid = sid
        self.method = method
        self.ctx = ctx
        self.task: asyncio.Task[None] | None = None
        # Why the task was cancelled: "deadline", "abandoned" (caller reset the stream) or "" (shutdown).
        self.cancel_reason = ""

    def cancel(self, reason: str) -> None:
        if self.task is not None and not self.task.done() and not self.cancel_reason:
            self.cancel_reason = reason
            self.task.cancel()


class _ServerConnection(H2Protocol):
    """One accepted HTTP/2 connection."""

    def __init__(self, server: RpcServer) -> None:
        super().__init__(client_side=False, max_concurrent_streams=server.max_concurrent_streams, window=server.window)
        self.server = server
        self.requests: dict[int, _Request] = {}
        self.calls: dict[int, _Call] = {}
        self.draining = False
        self.active_calls = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.server._connection_opened(self)

    def on_connection_lost(self, exc: Exception | None) -> None:
        self.requests.clear()
        self.server._connection_closed(self)

    # --- events -----------------------------------------------------------------------------------------

    def on_request(self, ev: jh2.events.RequestReceived) -> None:
        sid = ev.stream_id
        if self.draining:
            self.reset_stream(sid, jh2.errors.ErrorCodes.REFUSED_STREAM)
            return
        req = _Request(sid)
        self.requests[sid] = req
        path = ctype = deadline_ms = verb = clen = None
        for k, v in ev.headers:
            if k == b":path":
                path = v
            elif k == b"content-type":
                ctype = v
            elif k == b"x-deadline-ms":
                deadline_ms = v
            elif k == b"x-kudu-source":
                req.source = v.decode("utf-8", "replace")
            elif k == b":method":
                verb = v
            elif k == b"content-length":
                clen = v
            elif k == b"x-kudu-fault-applied":
                req.fault_applied = True
        ct = codec.canonical_content_type(ctype)
        if ct is not None:
            req.ctype = ct
        err = self.server._route(req, verb, path)
        if err is None and ct is None:
            shown = ctype.decode("latin-1") if ctype is not None else "none"
            err = KuduInvalidRequest(f"content-type must be {codec.MSGPACK} or {codec.JSON}, got {shown!r}")
        if err is None and deadline_ms is not None:
            try:
                ms = float(deadline_ms)
                if ms != ms:  # NaN
                    raise ValueError
            except ValueError:
                err = KuduInvalidRequest(f"x-deadline-ms must be a number of milliseconds, got {deadline_ms!r}")
            else:
                req.deadline = self.loop.time() + ms / 1000.0
        if err is None and clen is not None and clen.isdigit() and int(clen) > self.server.max_body_bytes:
            err = self.server._too_large(int(clen))
        if err is not None:
            self.reject(req, err, stop_upload=not ev.stream_ended)

    def on_data(self, ev: jh2.events.DataReceived) -> None:
        req = self.requests.get(ev.stream_id)
        if req is None or req.rejected:
            return
        data = ev.data
        req.size += len(data)
        if req.size > self.server.max_body_bytes:
            req.chunks.clear()
            self.reject(req, self.server._too_large(req.size, partial=True), stop_upload=ev.stream_ended is None)
            return
        req.chunks.append(data)

    def on_stream_ended(self, ev: jh2.events.StreamEnded) -> None:
        req = self.requests.pop(ev.stream_id, None)
        if req is not None and not req.rejected:
            self.server._dispatch(self, req)

    def on_stream_reset(self, ev: jh2.events.StreamReset) -> None:
        self.requests.pop(ev.stream_id, None)
        self.drop_outbound(ev.stream_id)
        call = self.calls.pop(ev.stream_id, None)
        if call is not None and call.task is not None:
            # The caller gave up (its deadline, or it was cancelled): stop the work nobody will read, as
            # the server's own deadline would. Handlers are cancellation-safe for that reason already.
            call.cancel("abandoned")

    def expire_uploads(self, now: float) -> None:
        """Answer TIMED_OUT to requests whose body is still arriving after their deadline."""
        for req in [r for r in self.requests.values() if r.deadline is not None and r.deadline <= now]:
            self.reject(req, KuduTimedOut("deadline passed while the request body was still arriving"), True)
            self.requests.pop(req.sid, None)

    def on_terminated(self, ev: jh2.events.ConnectionTerminated) -> None:
        # The client is going away: answers it can no longer read are dropped by h2; close once idle.
        self.draining = True
        if self.active_calls == 0:
            self.close_connection()

    # --- answering --------------------------------------------------------------------------------------

    def reject(self, req: _Request, err: KuduBadStatus, stop_upload: bool = False) -> None:
        """Answer a request with an error before (or instead of) running its handler."""
        req.rejected = True
        if req.method is not None:
            req.method.count_error(err.code)
        self.respond_error(req.sid, req.ctype, err)
        if stop_upload and self.outbound_done(req.sid) and req.sid in self.requests:
            # The full answer is queued: ask the client to stop uploading (RFC 9113 §8.1, NO_ERROR).
            self.requests.pop(req.sid, None)
            self.reset_stream(req.sid, jh2.errors.ErrorCodes.NO_ERROR)

    def respond(self, sid: int, ctype: str, body: bytes) -> None:
        headers = [(b":status", _STATUS_200), (b"content-type", _CONTENT_TYPE_B[ctype])]
        if self.send_message(sid, headers, body):
            self.schedule_flush()

    def respond_error(self, sid: int, ctype: str, err: KuduBadStatus) -> None:
        try:
            body = codec.encode(err.to_dict(), ctype)
        except Exception:
            body = codec.encode({"code": err.code, "message": err.message, "details": {}}, ctype)
        headers = [(b":status", str(err.http_status).encode()), (b"content-type", _CONTENT_TYPE_B[ctype])]
        if self.send_message(sid, headers, body):
            self.schedule_flush()

    def call_finished(self) -> None:
        self.active_calls -= 1
        if self.draining and self.active_calls == 0 and self.server._stopping is None:
            self.close_connection()


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
        self._metrics = metrics
        self._services: dict[str, _Service] = {}
        self._connections: set[_ServerConnection] = set()
        self._calls: set[_Call] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Future[None] | None = None
        self.host = ""
        self.port = 0
        if metrics is not None:
            self._m_accepted: Counter | None = metrics.counter(
                "rpc_connections_accepted", "Incoming RPC connections accepted"
            )
            self._m_overflow: Counter | None = metrics.counter(
                "rpcs_queue_overflow", "Calls refused with SERVICE_UNAVAILABLE because the service queue was full"
            )
            self._m_expired: Counter | None = metrics.counter(
                "rpcs_timed_out_in_queue", "Calls whose deadline passed before their handler could start"
            )
            self._m_bad_path: Counter | None = metrics.counter(
                "rpcs_unknown_method", "Calls for a service or method this server does not have"
            )
            metrics.gauge("rpc_connections_open", "Open incoming RPC connections", read=lambda: len(self._connections))
            metrics.gauge("rpcs_in_flight", "Calls whose handler is running", read=lambda: len(self._calls))
        else:
            self._m_accepted = self._m_overflow = self._m_expired = self._m_bad_path = None

    # --- registration -----------------------------------------------------------------------------------

    def register(self, service: str, method: str, handler: Handler, *, messages: BodyCodec | None = None) -> None:
        """Serve ``POST /service/method`` with ``await handler(request, ctx)``; ``messages`` decodes the
        request bodies and encodes the answers (default: plain maps, see ``kudu_async.rpc.codec``)."""
        for what, name in (("service", service), ("method", method)):
            if not name or "/" in name or not name.isprintable():
                raise KuduInvalidArgument(f"bad {what} name {name!r}")
        if not callable(handler):
            raise KuduInvalidArgument(f"handler for {service}/{method} is not callable")
        svc = self._services.get(service)
        if svc is None:
            svc = self._services[service] = _Service(service, self.max_inflight_per_service)
        if method in svc.methods:
            raise KuduIllegalState(f"{service}/{method} is already registered")
        svc.methods[method] = _Method(svc, method, handler, self._metrics, messages or _DEFAULT_CODEC)

    def register_service(self, service: str, obj: object) -> list[str]:
        """Register every public ``async def`` method of ``obj`` under its own name; returns the names."""
        names = []
        for name, fn in inspect.getmembers(obj, inspect.iscoroutinefunction):
            if name.startswith("_"):
                continue
            self.register(service, name, fn)
            names.append(name)
        if not names:
            raise KuduInvalidArgument(f"{type(obj).__name__} has no public async methods to serve as {service}")
        return names

    def set_queue_limit(self, service: str, max_inflight: int) -> None:
        """Bound the calls of one service running at once (over it: SERVICE_UNAVAILABLE)."""
        if max_inflight <= 0:
            raise KuduInvalidArgument(f"queue limit must be positive, got {max_inflight}")
        svc = self._services.get(service)
        if svc is None:
            raise KuduNoSuchService(f"no service {service!r} registered")
        svc.max_inflight = max_inflight

    def services(self) -> dict[str, list[str]]:
        return {name: sorted(s.methods) for name, s in sorted(self._services.items())}

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
        self._server = await loop.create_server(lambda: _ServerConnection(self), host, port, backlog=1024)
        sock = self._server.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        self._sweeper = loop.call_later(1.0, self._sweep)

    def _sweep(self) -> None:
        """Once a second: time out requests stuck half-uploaded past their deadline (slow or dead peers)."""
        if self._stopping is not None:
            return
        now = asyncio.get_running_loop().time()
        for proto in list(self._connections):
            if proto.requests:
                proto.expire_uploads(now)
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
            proto.draining = True
        end = loop.time() + grace_s
        # Polled: the condition spans every connection's partly uploaded requests as well as calls.
        while (self._calls or any(p.requests for p in self._connections)) and loop.time() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
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
        self._stopping.set_result(None)

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

    def _connection_opened(self, proto: _ServerConnection) -> None:
        self._connections.add(proto)
        if self._m_accepted is not None:
            self._m_accepted.increment()
        if self._stopping is not None:
            proto.draining = True
            proto.close_connection()

    def _connection_closed(self, proto: _ServerConnection) -> None:
        self._connections.discard(proto)

    def _too_large(self, size: int, partial: bool = False) -> KuduRequestTooLarge:
        what = f"more than {size - 1}" if partial else str(size)
        return KuduRequestTooLarge(
            f"request body of {what} bytes exceeds the maximum of {self.max_body_bytes} bytes",
            {"max_body_bytes": self.max_body_bytes},
        )

    def _route(self, req: _Request, verb: bytes | None, path: bytes | None) -> KuduBadStatus | None:
        """Find the method for ``POST /Service/Method``; the error to answer when there is none."""
        if verb != b"POST":
            shown = verb.decode("latin-1") if verb else "?"
            return KuduInvalidRequest(f"RPCs are POST /<Service>/<Method>, got {shown}")
        if path is None:
            return KuduInvalidRequest("missing :path")
        text = path.split(b"?", 1)[0].decode("utf-8", "replace")
        parts = text.split("/")
        if len(parts) != 3 or parts[0] != "" or not parts[1] or not parts[2]:
            return KuduInvalidRequest(f"RPC path must be /<Service>/<Method>, got {text!r}")
        svc = self._services.get(parts[1])
        if svc is None:
            if self._m_bad_path is not None:
                self._m_bad_path.increment()
            return KuduNoSuchService(f"no service {parts[1]!r} on this server", {"services": sorted(self._services)})
        m = svc.methods.get(parts[2])
        if m is None:
            if self._m_bad_path is not None:
                self._m_bad_path.increment()
            return KuduNoSuchMethod(
                f"service {parts[1]!r} has no method {parts[2]!r}", {"methods": sorted(svc.methods)}
            )
        req.method = m
        return None

    def _dispatch(self, proto: _ServerConnection, req: _Request) -> None:
        """The request body is complete: admit it (deadline, queue, decode, faults) and start its task."""
        m = req.method
        assert m is not None
        if m.calls is not None:
            m.calls.increment()
        svc = m.service
        loop = proto.loop
        if req.deadline is not None and loop.time() >= req.deadline:
            if self._m_expired is not None:
                self._m_expired.increment()
            proto.reject(req, KuduTimedOut(f"{svc.name}/{m.name}: deadline passed before the handler started"))
            return
        if svc.inflight >= svc.max_inflight:
            if self._m_overflow is not None:
                self._m_overflow.increment()
            proto.reject(
                req,
                KuduServiceUnavailable(
                    f"service {svc.name} is at its limit of {svc.max_inflight} calls in flight; retry later",
                    {"queue_limit": svc.max_inflight},
                ),
            )
            return
        chunks = req.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        req.chunks = []
        try:
            request = m.codec.decode(body, req.ctype)
        except (KuduInvalidRequest, KuduInvalidArgument) as e:
            proto.reject(req, e)
            return
        delay = 0.0
        faults = self.faults
        if faults is not None and faults.active and not req.fault_applied:
            decision = faults.decide(req.source, (self.node_name, self.address))
            if decision is not None:
                if decision.drop:
                    self._drop(proto, req)
                    return
                delay = decision.delay_s
        ctx = CallContext(svc.name, m.name, proto.peer, req.source, req.deadline, req.ctype)
        call = _Call(proto, req.sid, m, ctx)
        svc.inflight += 1
        proto.active_calls += 1
        self._calls.add(call)
        proto.calls[req.sid] = call
        call.task = loop.create_task(self._run(call, request, delay))

    def _drop(self, proto: _ServerConnection, req: _Request) -> None:
        """Black-hole a call (fault injection): never answer; free the stream after its deadline."""
        req.rejected = True
        code = jh2.errors.ErrorCodes.CANCEL
        if req.deadline is None:
            proto.reset_stream(req.sid, code)
        else:
            proto.loop.call_at(req.deadline + 1.0, proto.reset_stream, req.sid, code)

    async def _run(self, call: _Call, request: Any, delay: float) -> None:
        ctx = call.ctx
        m = call.method
        proto = call.proto
        t0 = time.perf_counter()
        err: KuduBadStatus | None = None
        body = b""
        # One timer handle enforces the deadline (cheaper than asyncio.timeout_at on the hot path).
        timer = None if ctx.deadline is None else proto.loop.call_at(ctx.deadline, call.cancel, "deadline")
        try:
            if delay:
                await asyncio.sleep(delay)
            result = await m.handler(request, ctx)
            body = m.codec.encode(result, ctx.content_type)
        except KuduBadStatus as e:
            err = e
        except asyncio.CancelledError:
            if call.cancel_reason == "deadline":
                err = KuduTimedOut(f"{ctx.full_method} did not finish within its deadline", {"deadline_exceeded": True})
            elif call.cancel_reason == "abandoned":
                err = KuduTimedOut(f"{ctx.full_method} abandoned by the caller")
            else:  # "shutdown", or cancelled from inside the handler
                err = KuduServiceUnavailable(f"{ctx.full_method} cancelled: the server is shutting down")
        except Exception as e:
            log.exception("handler %s raised (caller %s %s)", ctx.full_method, ctx.source or "-", ctx.remote)
            err = KuduRuntimeError(f"{ctx.full_method} failed: {type(e).__name__}: {e}")
        finally:
            if timer is not None:
                timer.cancel()
            if m.latency is not None:
                m.latency.record((time.perf_counter() - t0) * 1e6)
            m.service.inflight -= 1
            self._calls.discard(call)
            proto.calls.pop(call.sid, None)
        if call.cancel_reason == "abandoned":
            m.count_error("CANCELLED")
        elif err is None:
            proto.respond(call.sid, ctx.content_type, body)
        else:
            m.count_error(err.code)
            proto.respond_error(call.sid, ctx.content_type, err)
        proto.call_finished()
