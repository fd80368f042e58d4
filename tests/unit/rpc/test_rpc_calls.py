"""Calls over a real HTTP/2 connection on 127.0.0.1: errors, deadlines, limits, streams, faults."""

from __future__ import annotations

import asyncio
import json
import time

import msgpack
import pytest

from kudu_async.common.errors import (
    STATUS_CLASSES,
    KuduInvalidArgument,
    KuduNetworkError,
    KuduNoSuchMethod,
    KuduNoSuchService,
    KuduNotTheLeader,
    KuduRequestTooLarge,
    KuduRuntimeError,
    KuduServiceUnavailable,
    KuduTimedOut,
)
from kudu_async.common.metrics import MetricEntity
from kudu_async.rpc import FaultInjector, RpcClient, RpcServer
from tests.unit.rpc.rpc_testkit import TestService, raw_post, serve_object, wait_until

pytestmark = pytest.mark.timeout(60)


async def test_ping_returns_the_decoded_answer_and_names_the_caller(server: RpcServer, client: RpcClient) -> None:
    out = await client.call(server.address, "Test", "Ping", {"blob": b"\x00\x01", "n": 7})
    assert out == {"pong": {"blob": b"\x00\x01", "n": 7}, "source": "client-1"}


async def test_handler_sees_its_context(server: RpcServer, client: RpcClient) -> None:
    ctx = await client.call(server.address, "Test", "Context", None, timeout_s=5.0)
    assert ctx["service"] == "Test" and ctx["method"] == "Context" and ctx["source"] == "client-1"
    assert ctx["remote"].startswith("127.0.0.1:")
    assert 0.0 < ctx["remaining"] <= 5.0


async def test_json_request_gets_a_json_answer(server: RpcServer) -> None:
    status, headers, body = await raw_post(server.port, "/Test/Ping", b'{"x": 1}')
    assert status == 200
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(body) == {"pong": {"x": 1}, "source": ""}


async def test_unknown_service_and_method_are_typed_and_the_server_keeps_serving(
    server: RpcServer, client: RpcClient, metrics: MetricEntity
) -> None:
    with pytest.raises(KuduNoSuchService, match="Nope"):
        await client.call(server.address, "Nope", "Ping")
    assert await client.call(server.address, "Test", "Echo", 1) == 1
    with pytest.raises(KuduNoSuchMethod, match="Missing") as e:
        await client.call(server.address, "Test", "Missing")
    assert "Ping" in e.value.details["methods"]
    assert await client.call(server.address, "Test", "Echo", 2) == 2
    assert metrics.counter("rpcs_unknown_method").value == 2


async def test_unknown_method_over_json_has_status_404_and_error_body(server: RpcServer) -> None:
    status, _, body = await raw_post(server.port, "/Test/Missing", b"{}")
    assert status == 404
    assert json.loads(body)["code"] == "NO_SUCH_METHOD"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (b"application/msgpack", b"\xc1\xc1"),
        (b"application/msgpack", msgpack.packb(1) + b"x"),
        (b"application/json", b"{"),
    ],
)
async def test_malformed_bodies_are_invalid_requests(
    server: RpcServer, client: RpcClient, content_type: bytes, body: bytes, metrics: MetricEntity
) -> None:
    status, _, answer = await raw_post(server.port, "/Test/Echo", body, content_type=content_type)
    assert status == 400
    decoded = json.loads(answer) if content_type == b"application/json" else msgpack.unpackb(answer)
    assert decoded["code"] == "INVALID_REQUEST"
    assert metrics.counter("rpc_errors_Test_Echo_INVALID_REQUEST").value == 1
    assert await client.call(server.address, "Test", "Echo", "still here") == "still here"


@pytest.mark.parametrize("content_type", [b"text/plain", None])
async def test_bad_content_type_is_an_invalid_request(server: RpcServer, content_type: bytes | None) -> None:
    status, headers, body = await raw_post(server.port, "/Test/Echo", b"{}", content_type=content_type)
    assert status == 400
    assert headers[b"content-type"] == b"application/json"
    assert "content-type must be" in json.loads(body)["message"]


async def test_get_and_bad_paths_are_invalid_requests(server: RpcServer) -> None:
    status, _, body = await raw_post(server.port, "/Test/Echo", b"", method=b"GET")
    assert status == 400 and "POST" in json.loads(body)["message"]
    status, _, body = await raw_post(server.port, "/Test", b"{}")
    assert status == 400 and json.loads(body)["code"] == "INVALID_REQUEST"


async def test_bad_deadline_header_is_an_invalid_request(server: RpcServer) -> None:
    status, _, body = await raw_post(server.port, "/Test/Echo", b"1", extra_headers=((b"x-deadline-ms", b"soon"),))
    assert status == 400 and "x-deadline-ms" in json.loads(body)["message"]


async def test_handler_errors_keep_their_code_and_details(server: RpcServer, client: RpcClient) -> None:
    with pytest.raises(KuduNotTheLeader) as e:
        await client.call(server.address, "Test", "NotLeader")
    assert e.value.details == {"leader": "ts-2"}


async def test_every_status_code_round_trips_to_its_exception_class(server: RpcServer, client: RpcClient) -> None:
    for code, cls in sorted(STATUS_CLASSES.items()):
        with pytest.raises(cls) as e:
            await client.call(server.address, "Test", "RaiseCode", code)
        assert type(e.value) is cls and e.value.message == f"raised {code}" and e.value.details == {"k": 1}


async def test_unexpected_exception_is_a_runtime_error_and_is_logged(
    server: RpcServer, client: RpcClient, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(KuduRuntimeError, match="ValueError: broken on purpose: 42"):
        await client.call(server.address, "Test", "Fail", 42)
    assert any("Test/Fail" in r.getMessage() and r.exc_info for r in caplog.records)
    assert await client.call(server.address, "Test", "Echo", "ok") == "ok"


async def test_client_deadline_expires_and_server_cancels_the_handler(
    server: RpcServer, client: RpcClient, service: TestService, metrics: MetricEntity
) -> None:
    t0 = time.monotonic()
    # A deadline long enough that the handler starts even on a loaded host (one that passes while the call
    # still waits in the queue is the next test's case), and the call runs past it.
    call = asyncio.ensure_future(client.call(server.address, "Test", "Sleep", 30, timeout_s=2.0))
    for _ in range(200):
        if service.started:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(KuduTimedOut, match="Test/Sleep"):
        await call
    assert time.monotonic() - t0 < 10.0
    for _ in range(200):
        if service.cancelled:
            break
        await asyncio.sleep(0.01)
    assert service.cancelled == 1, "the server must stop the handler at the deadline"
    assert metrics.counter("rpc_errors_Test_Sleep_TIMED_OUT").value == 1
    assert await client.call(server.address, "Test", "Echo", 1) == 1


async def test_server_answers_timed_out_when_the_deadline_header_passes(server: RpcServer) -> None:
    status, _, body = await raw_post(server.port, "/Test/Sleep", b"30", extra_headers=((b"x-deadline-ms", b"200"),))
    assert status == 504
    assert json.loads(body)["code"] == "TIMED_OUT"


async def test_server_does_not_start_a_handler_whose_deadline_passed(
    server: RpcServer, service: TestService, metrics: MetricEntity
) -> None:
    status, _, body = await raw_post(server.port, "/Test/Sleep", b"0", extra_headers=((b"x-deadline-ms", b"0"),))
    assert status == 504 and json.loads(body)["code"] == "TIMED_OUT"
    assert service.started == 0
    assert metrics.counter("rpcs_timed_out_in_queue").value == 1


async def test_oversize_body_is_rejected_and_the_connection_survives(
    server: RpcServer, client: RpcClient, metrics: MetricEntity
) -> None:
    with pytest.raises(KuduRequestTooLarge, match="maximum of 16777216"):
        await client.call(server.address, "Test", "Size", b"x" * (40 * 1024 * 1024), timeout_s=30.0)
    assert metrics.counter("rpc_errors_Test_Size_REQUEST_TOO_LARGE").value == 1
    assert await client.call(server.address, "Test", "Size", b"x" * 1000) == 1000
    assert metrics.counter("rpc_connections_accepted").value == 1


async def test_declared_oversize_content_length_is_rejected_before_the_body(server: RpcServer) -> None:
    status, _, body = await raw_post(
        server.port, "/Test/Size", None, extra_headers=((b"content-length", b"999999999"),)
    )
    assert status == 413 and json.loads(body)["code"] == "REQUEST_TOO_LARGE"


async def test_full_service_queue_answers_service_unavailable_at_once(
    client: RpcClient, service: TestService, metrics: MetricEntity, faults: FaultInjector
) -> None:
    server = RpcServer(metrics, node_name="ts-1", faults=faults, max_inflight_per_service=2)
    serve_object(server, "Test", service)
    await server.start("127.0.0.1", 0)
    try:
        blocked = [asyncio.create_task(client.call(server.address, "Test", "Block")) for _ in range(2)]
        await wait_until(lambda: service.started >= 2)
        t0 = time.monotonic()
        with pytest.raises(KuduServiceUnavailable, match="limit of 2"):
            await client.call(server.address, "Test", "Echo", 1)
        assert time.monotonic() - t0 < 2.0
        assert metrics.counter("rpcs_queue_overflow").value == 1
        inflight = server.inflight()
        assert sorted(c["method"] for c in inflight) == ["Test/Block", "Test/Block"]
        assert all(c["source"] == "client-1" and c["elapsed_ms"] >= 0 for c in inflight)
        assert [c["method"] for c in client.inflight()] == ["Test/Block", "Test/Block"]
        service.gate.set()
        assert await asyncio.gather(*blocked) == ["released", "released"]
        assert await client.call(server.address, "Test", "Echo", 3) == 3
    finally:
        service.gate.set()
        await server.stop(1.0)


async def test_many_concurrent_calls_share_one_connection(
    server: RpcServer, client: RpcClient, metrics: MetricEntity
) -> None:
    results = await asyncio.gather(*(client.call(server.address, "Test", "Echo", i) for i in range(500)))
    assert results == list(range(500))
    assert metrics.counter("rpc_connections_accepted").value == 1
    assert metrics.counter("rpc_calls_Test_Echo").value == 500
    assert metrics.histogram("handler_latency_Test_Echo").total_count == 500


async def test_client_queues_locally_at_the_servers_stream_limit(metrics: MetricEntity, service: TestService) -> None:
    srv = RpcServer(metrics, max_concurrent_streams=4)
    serve_object(srv, "Test", service)
    await srv.start()
    c = RpcClient()
    try:
        await c.call(srv.address, "Test", "Echo", 0)  # learn the server's settings
        blocked = [asyncio.create_task(c.call(srv.address, "Test", "Block")) for _ in range(10)]
        await asyncio.sleep(0.2)
        assert service.started == 4
        service.gate.set()
        assert await asyncio.gather(*blocked) == ["released"] * 10
        results = await asyncio.gather(*(c.call(srv.address, "Test", "Echo", i) for i in range(100)))
        assert results == list(range(100))
    finally:
        await c.close()
        await srv.stop(1.0)


async def test_large_bodies_in_both_directions(server: RpcServer, client: RpcClient) -> None:
    blob = bytes(range(256)) * (8 * 4096)  # 8 MiB
    out = await asyncio.gather(*(client.call(server.address, "Test", "Echo", blob, timeout_s=60.0) for _ in range(3)))
    assert all(o == blob for o in out)


async def test_connection_refused_is_a_network_error(client: RpcClient) -> None:
    probe = RpcServer()
    probe.register("X", "Y", _noop, requires="user")
    await probe.start()
    addr = probe.address
    await probe.stop(0)
    with pytest.raises(KuduNetworkError, match="cannot connect"):
        await client.call(addr, "X", "Y", timeout_s=2.0)


async def _noop(req: object, ctx: object) -> None:
    return None


async def test_client_reconnects_after_server_restart(service: TestService) -> None:
    first = RpcServer()
    serve_object(first, "Test", service)
    await first.start()
    port = first.port
    c = RpcClient()
    try:
        assert await c.call(first.address, "Test", "Echo", 1) == 1
        await first.stop(1.0)
        with pytest.raises(KuduNetworkError):
            await c.call(f"127.0.0.1:{port}", "Test", "Echo", 2, timeout_s=2.0)
        second = RpcServer()
        serve_object(second, "Test", service)
        await second.start("127.0.0.1", port)
        try:
            assert await c.call(f"127.0.0.1:{port}", "Test", "Echo", 3) == 3
        finally:
            await second.stop(1.0)
    finally:
        await c.close()


async def test_stop_lets_running_calls_finish_within_grace(
    server: RpcServer, client: RpcClient, service: TestService
) -> None:
    call = asyncio.create_task(client.call(server.address, "Test", "Sleep", 0.3))
    await wait_until(lambda: service.started > 0)
    await server.stop(5.0)
    assert await call == "slept"


async def test_stop_cancels_calls_still_running_after_grace(
    server: RpcServer, client: RpcClient, service: TestService
) -> None:
    call = asyncio.create_task(client.call(server.address, "Test", "Block"))
    await wait_until(lambda: service.started > 0)
    await server.stop(0.1)
    with pytest.raises((KuduServiceUnavailable, KuduNetworkError)):
        await call
    assert server.inflight() == []


async def test_client_close_fails_outstanding_calls(server: RpcServer, service: TestService) -> None:
    c = RpcClient()
    call = asyncio.create_task(c.call(server.address, "Test", "Block"))
    await wait_until(lambda: service.started > 0)
    await c.close()
    with pytest.raises(KuduNetworkError, match="closed"):
        await call


async def test_fault_drop_on_the_client_side_looks_like_a_timeout(
    server: RpcServer, client: RpcClient, faults: FaultInjector, service: TestService
) -> None:
    faults.set_rules([{"action": "drop", "src": "client-1", "dst": server.address}])
    t0 = time.monotonic()
    with pytest.raises(KuduTimedOut):
        await client.call(server.address, "Test", "Block", timeout_s=0.3)
    assert 0.25 < time.monotonic() - t0 < 5.0
    assert service.started == 0
    faults.clear()
    assert await client.call(server.address, "Test", "Echo", 1) == 1


async def test_fault_drop_on_the_server_side_by_node_name(
    server: RpcServer, faults: FaultInjector, service: TestService
) -> None:
    plain = RpcClient("client-2")  # no injector of its own: the server's rule must catch it
    try:
        faults.set_rules([{"action": "drop", "src": "client-2", "dst": "ts-1"}])
        with pytest.raises(KuduTimedOut):
            await plain.call(server.address, "Test", "Block", timeout_s=0.3)
        assert service.started == 0
        faults.set_rules([{"action": "drop", "src": "someone-else", "dst": "ts-1"}])
        assert await plain.call(server.address, "Test", "Echo", 5) == 5
    finally:
        await plain.close()


async def test_fault_delay_is_applied_once_per_call(
    server: RpcServer, client: RpcClient, faults: FaultInjector
) -> None:
    faults.set_rules([{"action": "delay", "delay_ms": 300, "dst": server.address}])
    t0 = time.monotonic()
    assert await client.call(server.address, "Test", "Echo", 1, timeout_s=10.0) == 1
    elapsed = time.monotonic() - t0
    assert 0.29 < elapsed < 0.55, "client and server share the rule; the delay must not be doubled"
    assert faults.delayed == 1


async def test_unencodable_request_is_an_invalid_argument(server: RpcServer, client: RpcClient) -> None:
    with pytest.raises(KuduInvalidArgument, match="cannot be encoded"):
        await client.call(server.address, "Test", "Echo", object())


async def test_unencodable_answer_is_a_runtime_error(server: RpcServer, client: RpcClient) -> None:
    async def bad(req: object, ctx: object) -> object:
        return object()

    server.register("Odd", "Bad", bad, requires="user")
    with pytest.raises(KuduRuntimeError, match="Odd/Bad failed"):
        await client.call(server.address, "Odd", "Bad")


async def test_answered_calls_leave_no_reference_cycles_for_the_collector(server: RpcServer, client: RpcClient) -> None:
    # Objects of a call that refer to each other are freed only by the cyclic collector, whose pauses grow
    # with what it has to walk: at 64 calls in flight they were the ping bench's p99. Answered calls must
    # free everything they made by reference counting alone.
    import gc

    await client.call(server.address, "Test", "Ping", 0)  # connection set up, caches warm
    gc.collect()
    gc.disable()
    try:
        await asyncio.gather(*(client.call(server.address, "Test", "Ping", i) for i in range(200)))
        await asyncio.sleep(0.05)  # the server's tasks finish after their answers are written
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable < 20, f"{unreachable} objects of 200 answered calls were left in reference cycles"
