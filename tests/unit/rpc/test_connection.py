"""The RPC rules on the sans-IO connection objects, driven against each other with no socket, loop or clock:
bytes one side queues are fed to the other, and time is a number the test moves."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from kudu_async.common.errors import (
    KuduInvalidArgument,
    KuduInvalidRequest,
    KuduNetworkError,
    KuduNoSuchMethod,
    KuduNoSuchService,
    KuduNotTheLeader,
    KuduRemoteError,
    KuduRequestTooLarge,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.metrics import MetricEntity
from kudu_async.rpc import codec
from kudu_async.rpc.connection import (
    CLIENT_MAX_CONCURRENT_STREAMS,
    Call,
    ClientConnection,
    Method,
    Request,
    Router,
    ServerConnection,
    Service,
    Unprocessed,
    decode_answer,
    request_headers,
)


def _router(max_body: int = 1 << 20, max_inflight: int = 1000, metrics: MetricEntity | None = None) -> Router:
    router = Router(metrics, max_body)
    svc = router.services["Test"] = Service("Test", max_inflight)
    for name in ("Echo", "Slow"):
        svc.methods[name] = Method(svc, name, None, metrics)
    return router


class Pair:
    """A client and a server connection wired back to back; ``pump`` moves bytes until both are quiet."""

    def __init__(self, router: Router | None = None, window: int = 16 << 20, **client_kw: Any) -> None:
        self.server = ServerConnection(router or _router(), window=window)
        self.client = ClientConnection("server:1", window=window, **client_kw)
        self.server.initiate()
        self.client.initiate()
        self.now = 1000.0
        self.started: list[Request] = []
        self.finished: list[Call] = []
        self.wire_bytes = 0
        self.pump()

    def pump(self, max_rounds: int = 10_000) -> None:
        for _ in range(max_rounds):
            c = b"".join(bytes(x) for x in self.client.chunks_to_send())
            s = b"".join(bytes(x) for x in self.server.chunks_to_send())
            if not c and not s:
                return
            self.wire_bytes += len(c) + len(s)
            if c:
                self.started += self.server.receive_data(c, self.now)
            if s:
                self.finished += self.client.receive_data(s)
        raise AssertionError("the two connections never went quiet")

    def send(
        self,
        path: str,
        body: bytes,
        ctype: bytes = codec.MSGPACK_B,
        deadline_ms: int = 10_000,
        extra: tuple[tuple[bytes, bytes], ...] = (),
    ) -> Call:
        call = Call("Test", path.rsplit("/", 1)[-1], self.now, None)
        tail = [(b"content-type", ctype), (b"x-kudu-source", b"tester"), *extra]
        self.client.send(request_headers(path.encode(), b"server:1", deadline_ms, tail), body, call)
        return call

    def open_upload(self, path: str, deadline_ms: int) -> Call:
        """Send a call's headers only: its body is still to come."""
        call = Call("Test", path.rsplit("/", 1)[-1], self.now, None)
        call.sid = self.client.h2.get_next_available_stream_id()
        self.client.calls[call.sid] = call
        headers = request_headers(path.encode(), b"server:1", deadline_ms, [(b"content-type", codec.MSGPACK_B)])
        self.client.h2.send_headers(call.sid, headers)
        return call

    def answer_all(self) -> None:
        """The handler of every started call: echo its request in the request's codec."""
        started, self.started = self.started, []
        for req in started:
            if not req.abandoned:
                self.server.respond(req, codec.encode(req.body, req.ctype))
        self.pump()


def test_msgpack_call_round_trip_and_the_request_carries_what_the_handler_needs() -> None:
    p = Pair()
    call = p.send("/Test/Echo", codec.encode_msgpack({"blob": b"\x00\x01", "n": 7}), deadline_ms=2500)
    p.pump()
    (req,) = p.started
    assert req.body == {"blob": b"\x00\x01", "n": 7}
    assert req.ctype == codec.MSGPACK and req.source == "tester"
    assert req.method is not None and req.method.name == "Echo"
    assert req.deadline == pytest.approx(p.now + 2.5)
    assert req.method.service.inflight == 1
    p.answer_all()
    assert p.finished == [call] and call.error is None and call.status == 200
    assert decode_answer(call, "server:1") == {"blob": b"\x00\x01", "n": 7}
    assert req.method.service.inflight == 0 and not p.server.calls and not p.client.calls


def test_json_request_gets_a_json_answer() -> None:
    p = Pair()
    call = p.send("/Test/Echo", b'{"x": [1, 2]}', ctype=b"application/json; charset=utf-8")
    p.pump()
    assert p.started[0].ctype == codec.JSON and p.started[0].body == {"x": [1, 2]}
    p.answer_all()
    assert call.ctype == codec.JSON
    assert json.loads(b"".join(call.chunks)) == {"x": [1, 2]}


@pytest.mark.parametrize(
    ("path", "ctype", "body", "error", "status"),
    [
        ("/Nope/Echo", codec.MSGPACK_B, b"", KuduNoSuchService, 404),
        ("/Test/Missing", codec.MSGPACK_B, b"", KuduNoSuchMethod, 404),
        ("/Test", codec.MSGPACK_B, b"", KuduInvalidRequest, 400),
        ("/Test/Echo", b"text/plain", b"x", KuduInvalidRequest, 400),
        ("/Test/Echo", codec.MSGPACK_B, b"\xc1", KuduInvalidRequest, 400),
        ("/Test/Echo", codec.MSGPACK_B, msgpack.packb(1) + b"x", KuduInvalidRequest, 400),
        ("/Test/Echo", codec.JSON_B, b"{", KuduInvalidRequest, 400),
    ],
)
def test_requests_breaking_a_rule_are_answered_with_a_typed_error_and_no_handler_runs(
    path: str, ctype: bytes, body: bytes, error: type[Exception], status: int
) -> None:
    p = Pair()
    call = p.send(path, body, ctype=ctype)
    p.pump()
    assert p.started == []
    assert call.status == status
    with pytest.raises(error):
        decode_answer(call, "server:1")
    assert not p.server.requests and not p.server.calls


def test_error_bodies_map_back_to_the_typed_exception_in_both_codecs() -> None:
    for ctype in (codec.MSGPACK_B, codec.JSON_B):
        p = Pair()
        call = p.send("/Test/Echo", codec.encode(None, codec.canonical_content_type(ctype) or ""), ctype=ctype)
        p.pump()
        (req,) = p.started
        p.server.respond_error(req, KuduNotTheLeader("I follow", {"leader": "ts-2"}))
        p.pump()
        assert call.status == KuduNotTheLeader.http_status
        with pytest.raises(KuduNotTheLeader, match="I follow") as e:
            decode_answer(call, "server:1")
        assert e.value.details == {"leader": "ts-2"}


def test_a_non_error_body_with_an_error_status_is_a_remote_error() -> None:
    call = Call("Test", "Echo", 0.0, None)
    call.status, call.chunks = 500, [b"oops"]
    with pytest.raises(KuduRemoteError, match="HTTP 500"):
        decode_answer(call, "server:1")


def test_deadline_passed_while_the_body_arrived_is_timed_out_before_the_handler() -> None:
    metrics = MetricEntity("server", "s")
    p = Pair(_router(metrics=metrics))
    call = p.open_upload("/Test/Echo", deadline_ms=50)
    # Headers and body arrive in separate reads, 100 ms apart on the connection's clock.
    p.pump()
    assert p.started == []
    p.now += 0.1
    p.client.h2.send_data(call.sid, codec.encode_msgpack(1), end_stream=True)
    p.pump()
    assert p.started == []
    with pytest.raises(KuduTimedOut, match="before the handler started"):
        decode_answer(call, "server:1")
    assert metrics.counter("rpcs_timed_out_in_queue").value == 1


def test_half_uploaded_request_expires_at_its_deadline() -> None:
    p = Pair()
    call = p.open_upload("/Test/Echo", deadline_ms=100)
    sid = call.sid
    p.pump()
    assert sid in p.server.requests
    p.server.expire_uploads(p.now + 0.05)
    assert sid in p.server.requests  # not yet
    p.server.expire_uploads(p.now + 0.2)
    p.pump()
    assert not p.server.requests
    with pytest.raises(KuduTimedOut, match="still arriving"):
        decode_answer(call, "server:1")


def test_too_large_bodies_are_refused_by_content_length_and_while_streaming() -> None:
    p = Pair(_router(max_body=1000))
    declared = p.send("/Test/Echo", b"", extra=((b"content-length", b"5000"),))
    streamed = p.send("/Test/Echo", codec.encode_msgpack(b"x" * 5000))
    p.pump()
    assert p.started == []
    for call in (declared, streamed):
        assert call.status == 413
        with pytest.raises(KuduRequestTooLarge) as e:
            decode_answer(call, "server:1")
        assert e.value.details["max_body_bytes"] == 1000
    assert not p.server.requests and not p.client.outbound


def test_answers_over_the_clients_limit_fail_the_call_and_reset_the_stream() -> None:
    p = Pair(max_response_bytes=100)
    call = p.send("/Test/Echo", codec.encode_msgpack(b"x" * 500))
    p.pump()
    p.answer_all()
    assert isinstance(call.error, KuduRemoteError) and "exceeds 100 bytes" in str(call.error)
    assert not p.client.calls and not p.server.calls


def test_caller_reset_is_an_abandoned_event_and_leaves_nothing_behind() -> None:
    metrics = MetricEntity("server", "s")
    p = Pair(_router(metrics=metrics))
    calls = [p.send("/Test/Slow", codec.encode_msgpack(i)) for i in range(3)]
    p.pump()
    running = list(p.started)
    p.started.clear()
    p.client.abandon(calls[1])
    p.pump()
    assert p.started == [running[1]] and running[1].abandoned
    p.server.abandon(running[1])
    p.started.clear()
    for req in (running[0], running[2]):
        p.server.respond(req, codec.encode_msgpack(req.body))
    p.pump()
    assert [c.sid for c in p.finished] == [calls[0].sid, calls[2].sid]
    assert metrics.counter("rpc_errors_Test_Slow_CANCELLED").value == 1
    assert not p.server.calls and not p.client.calls and not p.server.outbound


def test_the_service_queue_bound_answers_service_unavailable() -> None:
    p = Pair(_router(max_inflight=2))
    calls = [p.send("/Test/Slow", b"") for _ in range(3)]
    p.pump()
    assert len(p.started) == 2
    with pytest.raises(KuduServiceUnavailable, match="limit of 2"):
        decode_answer(calls[2], "server:1")
    p.answer_all()
    assert all(c.status == 200 for c in calls[:2])


def test_many_concurrent_streams_respect_the_servers_stream_limit() -> None:
    p = Pair()
    assert p.client.h2.remote_settings.max_concurrent_streams == 4096
    server_side = ServerConnection(_router(), max_concurrent_streams=CLIENT_MAX_CONCURRENT_STREAMS)
    p.server = server_side
    p.client = ClientConnection("server:1")
    p.server.initiate()
    p.client.initiate()
    p.pump()
    calls: list[Call] = []
    while p.client.has_slot():
        calls.append(p.send("/Test/Echo", codec.encode_msgpack(len(calls))))
    assert len(calls) == CLIENT_MAX_CONCURRENT_STREAMS
    p.pump()
    assert sorted(r.body for r in p.started) == list(range(len(calls)))
    p.answer_all()
    assert all(decode_answer(c, "s") == i for i, c in enumerate(calls))
    assert p.client.has_slot()


def test_a_thousand_interleaved_calls_each_get_their_own_answer() -> None:
    p = Pair()
    calls = [p.send("/Test/Echo", codec.encode_msgpack({"i": i, "pad": b"p" * (i % 7) * 1000})) for i in range(90)]
    p.pump()
    for _ in range(10):
        # Answer in reverse order while new calls keep arriving.
        started, p.started = p.started, []
        for req in reversed(started):
            p.server.respond(req, codec.encode_msgpack(req.body))
        base = len(calls)
        calls += [p.send("/Test/Echo", codec.encode_msgpack({"i": base + j})) for j in range(90)]
        p.pump()
    p.answer_all()
    assert len(calls) == 990
    assert all(decode_answer(c, "s")["i"] == i for i, c in enumerate(calls))


def test_large_bodies_flow_under_small_windows_and_when_writes_pause() -> None:
    p = Pair(_router(max_body=8 << 20), window=65535)
    body = bytes(range(256)) * (12 * 1024)  # 3 MiB, many windows of 64 KiB
    call = p.send("/Test/Echo", codec.encode_msgpack(body))
    assert p.client.outbound, "the body waits for window, it is not all queued at once"
    p.pump()
    (req,) = p.started
    assert req.body == body
    p.server.pause_writing()
    p.server.respond(req, codec.encode_msgpack(req.body))
    assert req.sid in p.server.outbound  # headers queued, the body held back
    p.pump()
    assert call.status == 200 and not call.chunks
    p.server.resume_writing()
    p.pump()
    assert decode_answer(call, "s") == body
    assert not p.server.outbound and not p.client.outbound
    assert p.wire_bytes > 2 * len(body)


def test_goaway_fails_calls_beyond_it_as_unprocessed_and_the_connection_closes_when_idle() -> None:
    p = Pair()
    first = p.send("/Test/Slow", b"")
    p.pump()
    p.server.h2.close_connection(last_stream_id=first.sid)
    second = p.send("/Test/Slow", b"")  # crosses the GOAWAY on the wire (the closed server never reads it)
    p.client.chunks_to_send()
    finished = p.client.receive_data(b"".join(bytes(c) for c in p.server.chunks_to_send()))
    assert finished == [second] and isinstance(second.error, Unprocessed)
    assert not p.client.usable and not p.client.closed and list(p.client.calls) == [first.sid]
    p.client.abandon(first)  # its caller's deadline passes
    assert p.client.closed  # no more calls: GOAWAY queued, the shell closes the socket


def test_a_draining_server_refuses_new_streams_so_the_client_may_retry_elsewhere() -> None:
    p = Pair()
    p.server.draining = True
    call = p.send("/Test/Echo", b"")
    p.pump()
    assert p.started == [] and isinstance(call.error, Unprocessed) and not p.client.usable


def test_client_goaway_closes_the_server_side_once_its_calls_are_answered() -> None:
    p = Pair()
    p.send("/Test/Slow", b"")
    p.pump()
    p.client.h2.close_connection()
    p.pump()
    assert p.server.draining and not p.server.closed
    p.server.respond(p.started[0], b"")
    assert p.server.closed


def test_lost_connection_fails_every_outstanding_call() -> None:
    p = Pair()
    calls = [p.send("/Test/Slow", b"") for _ in range(3)]
    p.pump()
    failed = p.client.connection_lost(ConnectionResetError("gone"))
    assert failed == calls and all(isinstance(c.error, KuduNetworkError) for c in calls)
    assert "lost: gone" in str(calls[0].error) and not p.client.calls


def test_a_method_may_bring_its_own_decoder() -> None:
    router = _router()
    svc = router.services["Test"]

    def decode(body: bytes, ctype: str) -> Any:
        value = codec.decode(body, ctype)
        if not isinstance(value, int):
            raise KuduInvalidArgument(f"expected an int, got {type(value).__name__}")
        return value * 2

    svc.methods["Double"] = Method(svc, "Double", None, None, decode)
    p = Pair(router)
    ok = p.send("/Test/Double", codec.encode_msgpack(21))
    bad = p.send("/Test/Double", codec.encode_msgpack("x"))
    p.pump()
    assert [r.body for r in p.started] == [42]
    p.answer_all()
    assert decode_answer(ok, "s") == 42
    with pytest.raises(KuduInvalidArgument, match="expected an int, got str"):
        decode_answer(bad, "s")
