"""The RPC rules as sans-IO connection objects: bytes and a clock in, RPC events and bytes out.

``ServerConnection`` and ``ClientConnection`` hold one HTTP/2 connection each (jh2, via ``jh2_fast``) and
everything the RPC layer decides about it: a call is ``POST /<Service>/<Method>`` on its own stream with
an ``application/msgpack`` or ``application/json`` body, answered on the same stream with the same
content type; ``x-deadline-ms`` is the caller's remaining time; bodies are bounded in size; errors are
``{"code", "message", "details"}`` bodies with the code's HTTP status; a stream reset cancels the call.
No sockets, loop or clock inside: the caller passes ``now`` (seconds on any monotonic clock, the shells
use the event loop's), feeds received bytes to ``receive_data`` and writes ``chunks_to_send()``.

Flow control is honoured in both directions. Outgoing bodies sit in a per-stream queue and are sent as
the peer's stream and connection windows allow (resumed on WINDOW_UPDATE / SETTINGS, and on
``resume_writing`` when the socket buffer drained). Incoming DATA is acknowledged as soon as it is
received (bodies are buffered whole anyway, bounded by the max body size), with generous windows (16 MiB
per stream and per connection) so a large upload never waits on a round trip.

Events are the objects the connection already keeps per call, so a call allocates nothing beyond jh2's
events: the server's ``receive_data`` returns ``Request`` objects (ready to run, or ``abandoned`` when
the caller reset the stream of a running call), the client's returns the ``Call`` objects that finished
(``error`` is ``None`` for a complete answer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jh2.errors
import jh2.events
import jh2.exceptions
import jh2.settings

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduInvalidRequest,
    KuduNetworkError,
    KuduNoSuchMethod,
    KuduNoSuchService,
    KuduRemoteError,
    KuduRequestTooLarge,
    KuduServiceUnavailable,
    KuduTimedOut,
    error_from_dict,
)
from kudu_async.common.metrics import Counter, Histogram, MetricEntity
from kudu_async.rpc import codec
from kudu_async.rpc.jh2_fast import Chunk, make_h2_connection
from kudu_async.security.identity import AUTHORIZATION_HEADER, USER_HEADER

DEFAULT_WINDOW = 16 * 1024 * 1024
DEFAULT_MAX_FRAME = 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_INFLIGHT_PER_SERVICE = 1000
DEFAULT_MAX_CONCURRENT_STREAMS = 4096
CLIENT_MAX_CONCURRENT_STREAMS = 100
STREAM_ID_LIMIT = 1 << 30  # a client connection stops taking calls well before h2's 2**31 stream ids run out
_H2_DEFAULT_WINDOW = 65535

NO_ERROR = jh2.errors.ErrorCodes.NO_ERROR
CANCEL = jh2.errors.ErrorCodes.CANCEL
REFUSED_STREAM = jh2.errors.ErrorCodes.REFUSED_STREAM

_STATUS_200 = b"200"
_CONTENT_TYPE_B = {codec.MSGPACK: codec.MSGPACK_B, codec.JSON: codec.JSON_B}

Decoder = Callable[[bytes, str], Any]
Encoder = Callable[[Any, str], bytes]


class RpcProtocolError(Exception):
    """The peer broke HTTP/2: the connection cannot continue and must be closed."""


class Unprocessed(Exception):
    """The server did not process this call (GOAWAY beyond it, REFUSED_STREAM): safe to send it again."""


def code_name(code: Any) -> str:
    try:
        name: str = jh2.errors.ErrorCodes(code).name
    except ValueError:
        return str(code)
    return name


class _Outbound:
    """The unsent part of one stream's body."""

    __slots__ = ("end", "offset", "view")

    def __init__(self, data: bytes, end: bool) -> None:
        self.view = memoryview(data)
        self.offset = 0
        self.end = end


class _Endpoint:
    """One HTTP/2 connection: event dispatch, outgoing bodies under flow control, resets, close."""

    def __init__(self, client_side: bool, max_concurrent_streams: int, window: int) -> None:
        self.h2 = make_h2_connection(client_side)
        self.outbound: dict[int, _Outbound] = {}
        self.write_paused = False
        self.closed = False  # GOAWAY queued: the shell closes the transport once it has written it
        self._window = window
        self._max_streams = max_concurrent_streams
        self._dispatch: dict[type, Callable[[Any], None]] = {
            jh2.events.RequestReceived: self._on_request,
            jh2.events.ResponseReceived: self._on_response,
            jh2.events.DataReceived: self._on_data_received,
            jh2.events.StreamEnded: self._on_stream_ended,
            jh2.events.StreamReset: self._on_stream_reset,
            jh2.events.WindowUpdated: self._on_window_updated,
            jh2.events.RemoteSettingsChanged: self._on_remote_settings,
            jh2.events.ConnectionTerminated: self._on_terminated,
        }

    def initiate(self) -> None:
        """Queue the connection preface with our settings."""
        h2 = self.h2
        # Our settings are installed as the *current* local values before the preface goes out rather
        # than sent later with update_settings(): h2 then enforces them (stream limit, frame size,
        # windows) from the first byte, instead of its defaults until the peer's ACK arrives.
        h2.local_settings = jh2.settings.Settings(
            client=h2.config.client_side,
            initial_values={
                jh2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self._max_streams,
                jh2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 1 << 16,
                jh2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self._window,
                jh2.settings.SettingCodes.MAX_FRAME_SIZE: DEFAULT_MAX_FRAME,
                jh2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        h2.max_inbound_frame_size = DEFAULT_MAX_FRAME
        h2.initiate_connection()
        if self._window > _H2_DEFAULT_WINDOW:
            h2.increment_flow_control_window(self._window - _H2_DEFAULT_WINDOW)

    def chunks_to_send(self) -> list[Chunk]:
        """Bytes to write, in order, as chunks for ``writelines`` (bodies are views, not copies)."""
        return self.h2.chunks_to_send()

    def _feed(self, data: bytes | memoryview) -> None:
        try:
            events = self.h2.receive_data(data)
        except jh2.exceptions.ProtocolError as e:
            raise RpcProtocolError(str(e)) from None
        dispatch = self._dispatch
        for ev in events:
            handler = dispatch.get(type(ev))
            if handler is not None:
                handler(ev)

    # --- sending ----------------------------------------------------------------------------------------

    def send_message(self, stream_id: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Queue headers and a whole body on a stream (end_stream after the body); False if it is gone."""
        h2 = self.h2
        try:
            if not body:
                h2.send_headers(stream_id, headers, end_stream=True)
                return True
            h2.send_headers(stream_id, headers)
        except (jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError):
            return False
        ob = _Outbound(body, True)
        self.outbound[stream_id] = ob
        if not self.write_paused:
            self._pump(stream_id, ob)
        return True

    def _pump(self, stream_id: int, ob: _Outbound) -> None:
        h2 = self.h2
        view = ob.view
        total = len(view)
        try:
            while True:
                remaining = total - ob.offset
                window = h2.local_flow_control_window(stream_id)
                if window <= 0:
                    return
                n = min(remaining, window, h2.max_outbound_frame_size)
                last = n == remaining
                start = ob.offset
                h2.send_data(stream_id, view[start : start + n], end_stream=last and ob.end)
                ob.offset = start + n
                if last:
                    del self.outbound[stream_id]
                    return
        except (jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError, KeyError):
            self.outbound.pop(stream_id, None)

    def unsent_bytes(self) -> int:
        """Body bytes queued on this connection and not yet handed to the transport (flow control)."""
        return sum(len(ob.view) - ob.offset for ob in self.outbound.values())

    def _pump_all(self) -> None:
        for sid, ob in list(self.outbound.items()):
            if self.write_paused:
                return
            self._pump(sid, ob)

    def pause_writing(self) -> None:
        """The socket buffer is full: hold bodies back until ``resume_writing``."""
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.outbound:
            self._pump_all()

    def reset_stream(self, stream_id: int, error_code: int) -> None:
        self.outbound.pop(stream_id, None)
        try:
            self.h2.reset_stream(stream_id, error_code)
        except (jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError):
            return

    def close(self) -> None:
        """Queue the final GOAWAY; ``closed`` tells the shell to close the transport after writing it."""
        if self.closed:
            return
        self.closed = True
        self.outbound.clear()
        try:
            self.h2.close_connection()
        except jh2.exceptions.ProtocolError:
            return

    # --- events -----------------------------------------------------------------------------------------

    def _on_data_received(self, ev: jh2.events.DataReceived) -> None:
        # Hand the window back at once: bodies are buffered whole (bounded by the max body size), and
        # waiting for the application would stall large uploads for a round trip per window.
        n = ev.flow_controlled_length
        if n:
            # A stream closed meanwhile no longer needs its window (the connection's was returned).
            with contextlib.suppress(jh2.exceptions.StreamClosedError, jh2.exceptions.ProtocolError):
                self.h2.acknowledge_received_data(n, ev.stream_id)
        self._on_data(ev)

    def _on_window_updated(self, ev: jh2.events.WindowUpdated) -> None:
        if not self.outbound or self.write_paused:
            return
        sid = ev.stream_id
        if sid:
            ob = self.outbound.get(sid)
            if ob is not None:
                self._pump(sid, ob)
        else:
            self._pump_all()

    def _on_remote_settings(self, ev: jh2.events.RemoteSettingsChanged) -> None:
        if self.outbound and not self.write_paused:
            self._pump_all()

    def _on_request(self, ev: jh2.events.RequestReceived) -> None:
        self.reset_stream(ev.stream_id, REFUSED_STREAM)

    def _on_response(self, ev: jh2.events.ResponseReceived) -> None:
        self.reset_stream(ev.stream_id, jh2.errors.ErrorCodes.PROTOCOL_ERROR)

    def _on_data(self, ev: jh2.events.DataReceived) -> None:
        raise NotImplementedError

    def _on_stream_ended(self, ev: jh2.events.StreamEnded) -> None:
        raise NotImplementedError

    def _on_stream_reset(self, ev: jh2.events.StreamReset) -> None:
        raise NotImplementedError

    def _on_terminated(self, ev: jh2.events.ConnectionTerminated) -> None:
        raise NotImplementedError


# --- server side ------------------------------------------------------------------------------------------


class Method:
    """A registered method with its metrics, resolved once so a call does no name formatting."""

    __slots__ = ("calls", "decode", "encode", "entity", "errors", "handler", "latency", "name", "service")

    def __init__(
        self,
        service: Service,
        name: str,
        handler: Any,
        entity: MetricEntity | None,
        decode: Decoder | None = None,
        encode: Encoder | None = None,
    ) -> None:
        self.service = service
        self.name = name
        self.handler = handler
        self.decode: Decoder = decode if decode is not None else codec.decode
        self.encode: Encoder = encode if encode is not None else codec.encode
        self.entity = entity
        self.errors: dict[str, Counter] = {}
        self.calls: Counter | None = None
        self.latency: Histogram | None = None
        if entity is not None:
            self.calls = entity.counter(f"rpc_calls_{service.name}_{name}", f"Calls of {service.name}/{name} received")
            self.latency = entity.histogram(
                f"handler_latency_{service.name}_{name}", f"Time spent in the {service.name}/{name} handler"
            )

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


class Service:
    """A named group of methods sharing one bound on the calls running at once."""

    __slots__ = ("inflight", "max_inflight", "methods", "name")

    def __init__(self, name: str, max_inflight: int) -> None:
        self.name = name
        self.methods: dict[str, Method] = {}
        self.max_inflight = max_inflight
        self.inflight = 0


class Router:
    """The services a server has, its body limit and the counters of calls refused before any handler."""

    def __init__(self, metrics: MetricEntity | None, max_body_bytes: int) -> None:
        self.services: dict[str, Service] = {}
        self.max_body_bytes = max_body_bytes
        self.m_overflow: Counter | None = None
        self.m_expired: Counter | None = None
        self.m_bad_path: Counter | None = None
        if metrics is not None:
            self.m_overflow = metrics.counter(
                "rpcs_queue_overflow", "Calls refused with SERVICE_UNAVAILABLE because the service queue was full"
            )
            self.m_expired = metrics.counter(
                "rpcs_timed_out_in_queue", "Calls whose deadline passed before their handler could start"
            )
            self.m_bad_path = metrics.counter(
                "rpcs_unknown_method", "Calls for a service or method this server does not have"
            )

    def route(self, verb: bytes | None, path: bytes | None) -> Method | KuduBadStatus:
        """The method for ``POST /Service/Method``, or the error to answer when there is none."""
        if verb != b"POST":
            shown = verb.decode("latin-1") if verb else "?"
            return KuduInvalidRequest(f"RPCs are POST /<Service>/<Method>, got {shown}")
        if path is None:
            return KuduInvalidRequest("missing :path")
        text = path.split(b"?", 1)[0].decode("utf-8", "replace")
        parts = text.split("/")
        if len(parts) != 3 or parts[0] != "" or not parts[1] or not parts[2]:
            return KuduInvalidRequest(f"RPC path must be /<Service>/<Method>, got {text!r}")
        svc = self.services.get(parts[1])
        if svc is None:
            if self.m_bad_path is not None:
                self.m_bad_path.increment()
            return KuduNoSuchService(f"no service {parts[1]!r} on this server", {"services": sorted(self.services)})
        m = svc.methods.get(parts[2])
        if m is None:
            if self.m_bad_path is not None:
                self.m_bad_path.increment()
            return KuduNoSuchMethod(
                f"service {parts[1]!r} has no method {parts[2]!r}", {"methods": sorted(svc.methods)}
            )
        return m

    def too_large(self, size: int, partial: bool = False) -> KuduRequestTooLarge:
        what = f"more than {size - 1}" if partial else str(size)
        return KuduRequestTooLarge(
            f"request body of {what} bytes exceeds the maximum of {self.max_body_bytes} bytes",
            {"max_body_bytes": self.max_body_bytes},
        )


class Request:
    """One call on the server: headers arrived, body arriving, then admitted and running until answered.

    ``body`` is the decoded request once admitted. ``handle`` belongs to the shell (its task).
    """

    __slots__ = (
        "abandoned",
        "body",
        "chunks",
        "claimed_user",
        "credentials",
        "ctype",
        "deadline",
        "fault_applied",
        "handle",
        "method",
        "rejected",
        "sid",
        "size",
        "source",
    )

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.chunks: list[bytes] = []
        self.size = 0
        self.ctype = codec.JSON
        self.deadline: float | None = None
        self.source = ""
        # What the caller says about itself (security/identity.py): checked by the server's authenticator.
        self.claimed_user = ""
        self.credentials: bytes | None = None
        self.method: Method | None = None
        self.rejected = False
        self.fault_applied = False
        self.abandoned = False
        self.body: Any = None
        self.handle: Any = None


class ServerConnection(_Endpoint):
    """The server end of one connection: routes and admits calls, answers them, refuses what breaks a rule."""

    def __init__(
        self,
        router: Router,
        *,
        max_concurrent_streams: int = DEFAULT_MAX_CONCURRENT_STREAMS,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        super().__init__(False, max_concurrent_streams, window)
        self.router = router
        self.requests: dict[int, Request] = {}  # headers arrived, body still coming
        self.calls: dict[int, Request] = {}  # admitted, not answered yet
        self.draining = False  # new streams are refused
        self.close_when_idle = False  # the client sent GOAWAY
        self._events: list[Request] = []
        self._now = 0.0

    def receive_data(self, data: bytes | memoryview, now: float) -> list[Request]:
        """Feed received bytes; the calls to start, and running calls whose caller reset the stream.

        Raises RpcProtocolError when the peer broke HTTP/2.
        """
        self._now = now
        events = self._events = []
        self._feed(data)
        return events

    # --- answering --------------------------------------------------------------------------------------

    def respond(self, req: Request, body: bytes) -> None:
        """Answer a running call with an encoded result (200)."""
        self._finish(req)
        headers = [(b":status", _STATUS_200), (b"content-type", _CONTENT_TYPE_B[req.ctype])]
        self.send_message(req.sid, headers, body)
        self._close_if_idle()

    def respond_error(self, req: Request, err: KuduBadStatus) -> None:
        """Answer a running call with an error (counted on its method)."""
        self._finish(req)
        assert req.method is not None
        req.method.count_error(err.code)
        self._send_error(req.sid, req.ctype, err)
        self._close_if_idle()

    def abandon(self, req: Request) -> None:
        """A running call ended without an answer because its caller reset the stream."""
        self._finish(req)
        assert req.method is not None
        req.method.count_error("CANCELLED")
        self._close_if_idle()

    def drop(self, req: Request) -> None:
        """A running call is black-holed (fault injection): no answer; the shell resets the stream later."""
        self._finish(req)
        self._close_if_idle()

    def reject(self, req: Request, err: KuduBadStatus, stop_upload: bool = False) -> None:
        """Answer a request with an error before (or instead of) running its handler."""
        req.rejected = True
        if req.method is not None:
            req.method.count_error(err.code)
        self._send_error(req.sid, req.ctype, err)
        if stop_upload and req.sid not in self.outbound and req.sid in self.requests:
            # The full answer is queued: ask the client to stop uploading (RFC 9113 §8.1, NO_ERROR).
            del self.requests[req.sid]
            self.reset_stream(req.sid, NO_ERROR)

    def expire_uploads(self, now: float) -> None:
        """Answer TIMED_OUT to requests whose body is still arriving after their deadline."""
        for req in [r for r in self.requests.values() if r.deadline is not None and r.deadline <= now]:
            self.reject(req, KuduTimedOut("deadline passed while the request body was still arriving"), True)
            self.requests.pop(req.sid, None)

    def connection_lost(self) -> None:
        self.closed = True
        self.requests.clear()
        self.outbound.clear()

    def _finish(self, req: Request) -> None:
        m = req.method
        assert m is not None
        m.service.inflight -= 1
        if self.calls.get(req.sid) is req:
            del self.calls[req.sid]

    def _close_if_idle(self) -> None:
        if self.close_when_idle and not self.calls:
            self.close()

    def _send_error(self, sid: int, ctype: str, err: KuduBadStatus) -> None:
        try:
            body = codec.encode(err.to_dict(), ctype)
        except Exception:
            body = codec.encode({"code": err.code, "message": err.message, "details": {}}, ctype)
        headers = [(b":status", str(err.http_status).encode()), (b"content-type", _CONTENT_TYPE_B[ctype])]
        self.send_message(sid, headers, body)

    # --- events -----------------------------------------------------------------------------------------

    def _on_request(self, ev: jh2.events.RequestReceived) -> None:
        sid = ev.stream_id
        if self.draining:
            self.reset_stream(sid, REFUSED_STREAM)
            return
        req = Request(sid)
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
            elif k == USER_HEADER:
                req.claimed_user = v.decode("utf-8", "replace")
            elif k == AUTHORIZATION_HEADER:
                req.credentials = v
        err = self._check_request(req, verb, path, ctype, deadline_ms, clen)
        if err is not None:
            self.reject(req, err, stop_upload=not ev.stream_ended)

    def _check_request(
        self,
        req: Request,
        verb: bytes | None,
        path: bytes | None,
        ctype: bytes | None,
        deadline_ms: bytes | None,
        clen: bytes | None,
    ) -> KuduBadStatus | None:
        """Fill in the request's method, codec and deadline from its headers; the error if one breaks a rule."""
        ct = codec.canonical_content_type(ctype)
        if ct is not None:
            req.ctype = ct
        routed = self.router.route(verb, path)
        if not isinstance(routed, Method):
            return routed
        req.method = routed
        if ct is None:
            shown = ctype.decode("latin-1") if ctype is not None else "none"
            return KuduInvalidRequest(f"content-type must be {codec.MSGPACK} or {codec.JSON}, got {shown!r}")
        if deadline_ms is not None:
            try:
                ms = float(deadline_ms)
            except ValueError:
                ms = float("nan")
            if ms != ms:  # not a number, or NaN
                return KuduInvalidRequest(f"x-deadline-ms must be a number of milliseconds, got {deadline_ms!r}")
            req.deadline = self._now + ms / 1000.0
        if clen is not None and clen.isdigit() and int(clen) > self.router.max_body_bytes:
            return self.router.too_large(int(clen))
        return None

    def _on_data(self, ev: jh2.events.DataReceived) -> None:
        req = self.requests.get(ev.stream_id)
        if req is None or req.rejected:
            return
        data = ev.data
        req.size += len(data)
        if req.size > self.router.max_body_bytes:
            req.chunks.clear()
            self.reject(req, self.router.too_large(req.size, partial=True), stop_upload=ev.stream_ended is None)
            return
        req.chunks.append(data)

    def _on_stream_ended(self, ev: jh2.events.StreamEnded) -> None:
        req = self.requests.pop(ev.stream_id, None)
        if req is not None and not req.rejected:
            self._admit(req)

    def _admit(self, req: Request) -> None:
        """The request body is complete: check its deadline, its service's queue and its body."""
        m = req.method
        assert m is not None
        if m.calls is not None:
            m.calls.increment()
        svc = m.service
        router = self.router
        if req.deadline is not None and self._now >= req.deadline:
            if router.m_expired is not None:
                router.m_expired.increment()
            self.reject(req, KuduTimedOut(f"{svc.name}/{m.name}: deadline passed before the handler started"))
            return
        if svc.inflight >= svc.max_inflight:
            if router.m_overflow is not None:
                router.m_overflow.increment()
            self.reject(
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
            req.body = m.decode(body, req.ctype)
        except KuduBadStatus as e:
            self.reject(req, e)
            return
        svc.inflight += 1
        self.calls[req.sid] = req
        self._events.append(req)

    def _on_stream_reset(self, ev: jh2.events.StreamReset) -> None:
        sid = ev.stream_id
        self.requests.pop(sid, None)
        self.outbound.pop(sid, None)
        req = self.calls.get(sid)
        if req is not None and not req.abandoned:
            # The caller gave up (its deadline, or it was cancelled): the shell stops the work nobody will
            # read, as the server's own deadline would.
            req.abandoned = True
            self._events.append(req)

    def _on_terminated(self, ev: jh2.events.ConnectionTerminated) -> None:
        # The client is going away: answers it can no longer read are dropped by h2; close once idle.
        self.draining = True
        self.close_when_idle = True
        self._close_if_idle()


# --- client side ------------------------------------------------------------------------------------------


class Call:
    """One call on the client, from sending to its answer. ``waiter`` belongs to the shell (its future).

    Finished when returned by ``receive_data``: ``error`` is ``None`` for a complete answer (``status``,
    ``ctype``, ``chunks``), else the exception to raise (``Unprocessed``: the call may be sent again).
    """

    __slots__ = ("chunks", "ctype", "error", "method", "service", "sid", "size", "start", "status", "waiter")

    def __init__(self, service: str, method: str, start: float, waiter: Any) -> None:
        self.service = service
        self.method = method
        self.start = start
        self.waiter = waiter
        self.sid = 0
        self.status = 0
        self.ctype = codec.MSGPACK
        self.chunks: list[bytes] = []
        self.size = 0
        self.error: Exception | None = None


def request_headers(
    path: bytes, authority: bytes, deadline_ms: int, tail: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    """The headers of a call: ``POST path``, the caller's remaining time, then content type and source."""
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path),
        (b":authority", authority),
        (b"x-deadline-ms", str(deadline_ms).encode()),
        *tail,
    ]


def decode_answer(call: Call, addr: str) -> Any:
    """The decoded result of a finished call, or the typed error the server sent, raised."""
    chunks = call.chunks
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if call.status == 200:
        try:
            return codec.decode(body, call.ctype)
        except KuduBadStatus as e:
            raise KuduRemoteError(f"undecodable answer to {call.service}/{call.method} from {addr}: {e}") from None
    try:
        decoded = codec.decode(body, call.ctype)
    except KuduBadStatus:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("code"), str):
        raise error_from_dict(decoded)
    raise KuduRemoteError(
        f"HTTP {call.status} from {addr} for {call.service}/{call.method} without an error body",
        {"http_status": call.status},
    )


class ClientConnection(_Endpoint):
    """The client end of one connection to ``addr``: sends calls, collects answers, fails what was lost."""

    def __init__(
        self, addr: str, *, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, window: int = DEFAULT_WINDOW
    ) -> None:
        super().__init__(True, CLIENT_MAX_CONCURRENT_STREAMS, window)
        self.addr = addr
        self.max_response_bytes = max_response_bytes
        self.calls: dict[int, Call] = {}
        self.usable = True  # takes new calls
        self.terminated_code: int | None = None  # the error code of the server's GOAWAY, once one came
        self._events: list[Call] = []

    def has_slot(self) -> bool:
        """The server's MAX_CONCURRENT_STREAMS lets one more call start now."""
        limit: int = self.h2.remote_settings.max_concurrent_streams
        return len(self.calls) < limit

    def send(self, headers: list[tuple[bytes, bytes]], body: bytes, call: Call) -> int:
        """Open a stream for the call and queue it; its stream id. Raises Unprocessed if h2 refuses."""
        sid: int = self.h2.get_next_available_stream_id()
        self.calls[sid] = call
        call.sid = sid
        if not self.send_message(sid, headers, body):
            del self.calls[sid]
            raise Unprocessed()
        if sid > STREAM_ID_LIMIT:
            self.usable = False
        return sid

    def abandon(self, call: Call) -> None:
        """The caller gave up (deadline, cancellation): tell the server to stop working on it."""
        if self.calls.get(call.sid) is call:
            del self.calls[call.sid]
            self.reset_stream(call.sid, CANCEL)
            self._close_if_idle()

    def receive_data(self, data: bytes | memoryview) -> list[Call]:
        """Feed received bytes; the calls that finished. Raises RpcProtocolError when the peer broke HTTP/2."""
        events = self._events = []
        self._feed(data)
        return events

    def fail_all(self, message: str) -> list[Call]:
        """Every outstanding call fails with KuduNetworkError(message); the connection takes no more."""
        self.usable = False
        calls, self.calls = self.calls, {}
        for c in calls.values():
            c.error = KuduNetworkError(message)
        return list(calls.values())

    def connection_lost(self, exc: Exception | None) -> list[Call]:
        self.closed = True
        self.outbound.clear()
        why = f": {exc}" if exc else ""
        return self.fail_all(f"connection to {self.addr} lost{why}")

    def _close_if_idle(self) -> None:
        """A connection no longer taking calls closes once its last call is answered."""
        if not self.usable and not self.calls:
            self.close()

    # --- events -----------------------------------------------------------------------------------------

    def _on_response(self, ev: jh2.events.ResponseReceived) -> None:
        c = self.calls.get(ev.stream_id)
        if c is None:
            return
        for k, v in ev.headers:
            if k == b":status":
                c.status = int(v)
            elif k == b"content-type":
                c.ctype = codec.canonical_content_type(v) or codec.MSGPACK

    def _on_data(self, ev: jh2.events.DataReceived) -> None:
        c = self.calls.get(ev.stream_id)
        if c is None:
            return
        data = ev.data
        c.size += len(data)
        if c.size > self.max_response_bytes:
            c.error = KuduRemoteError(
                f"answer of {c.service}/{c.method} from {self.addr} exceeds {self.max_response_bytes} bytes"
            )
            self._events.append(c)
            self.abandon(c)
            return
        c.chunks.append(data)

    def _on_stream_ended(self, ev: jh2.events.StreamEnded) -> None:
        c = self.calls.pop(ev.stream_id, None)
        if c is None:
            return
        # The answer is complete even if our own upload was cut short (server answered early).
        self.outbound.pop(ev.stream_id, None)
        self._events.append(c)
        self._close_if_idle()

    def _on_stream_reset(self, ev: jh2.events.StreamReset) -> None:
        self.outbound.pop(ev.stream_id, None)
        c = self.calls.pop(ev.stream_id, None)
        if c is None:
            return
        if ev.error_code == REFUSED_STREAM:
            # Only a draining server refuses streams (we honour its stream limit): go elsewhere.
            self.usable = False
            c.error = Unprocessed()
        else:
            c.error = KuduNetworkError(
                f"{c.service}/{c.method} to {self.addr}: stream reset by peer ({code_name(ev.error_code)})"
            )
        self._events.append(c)
        self._close_if_idle()

    def _on_terminated(self, ev: jh2.events.ConnectionTerminated) -> None:
        self.usable = False
        self.terminated_code = ev.error_code
        last = ev.last_stream_id if ev.last_stream_id is not None else 0
        graceful = ev.error_code in (0, NO_ERROR, None)
        for sid in [s for s in self.calls if s > last or not graceful]:
            c = self.calls.pop(sid)
            if sid > last:
                c.error = Unprocessed()
            else:
                c.error = KuduNetworkError(f"connection to {self.addr} closed by peer ({code_name(ev.error_code)})")
            self._events.append(c)
        self._close_if_idle()
