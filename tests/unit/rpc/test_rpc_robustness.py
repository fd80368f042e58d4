"""Resets, cancellations and lost connections leave nothing behind on either end."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from kudu_async.common.errors import KuduNetworkError, KuduTimedOut
from kudu_async.common.metrics import MetricEntity
from kudu_async.rpc import RpcClient, RpcServer
from tests.unit.rpc.rpc_testkit import TestService, raw_post, serve_object, wait_until

pytestmark = pytest.mark.timeout(60)


def _server_state(server: RpcServer) -> tuple[int, int, int]:
    conns = list(server._connections)
    return (
        len(server._calls),
        sum(len(c.rpc.requests) for c in conns),
        sum(len(c.rpc.outbound) for c in conns),
    )


async def test_timeouts_and_cancellations_leave_no_state_behind(
    server: RpcServer, client: RpcClient, service: TestService
) -> None:
    # Calls that time out on the client, and calls whose caller is cancelled, 50 of each.
    timed_out = [client.call(server.address, "Test", "Sleep", 30, timeout_s=0.2) for _ in range(50)]
    results = await asyncio.gather(*timed_out, return_exceptions=True)
    assert all(isinstance(r, KuduTimedOut) for r in results)
    tasks = [asyncio.create_task(client.call(server.address, "Test", "Block")) for _ in range(50)]
    await wait_until(lambda: service.started >= 100)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert client.inflight() == []
    service.gate.set()
    await wait_until(lambda: _server_state(server) == (0, 0, 0))
    # The connection is still healthy and h2's own stream table was trimmed.
    assert await client.call(server.address, "Test", "Echo", "alive") == "alive"
    (conn,) = list(server._connections)
    assert len(conn.rpc.h2.streams) <= 300


async def test_caller_cancellation_cancels_the_handler_and_only_that_stream(
    server: RpcServer, client: RpcClient, service: TestService, metrics: MetricEntity
) -> None:
    sleeping = asyncio.create_task(client.call(server.address, "Test", "Sleep", 30, timeout_s=60.0))
    await wait_until(lambda: service.started == 1)
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    await wait_until(lambda: service.cancelled == 1)
    assert metrics.counter("rpc_errors_Test_Sleep_CANCELLED").value == 1
    assert await client.call(server.address, "Test", "Echo", 9) == 9


async def test_half_uploaded_request_times_out_at_its_deadline(server: RpcServer) -> None:
    status, _, body = await raw_post(
        server.port, "/Test/Echo", None, extra_headers=((b"x-deadline-ms", b"100"),), timeout_s=10.0
    )
    assert status == 504 and json.loads(body)["code"] == "TIMED_OUT"
    assert _server_state(server) == (0, 0, 0)


async def test_peer_vanishing_mid_call_is_a_network_error(service: TestService) -> None:
    srv = RpcServer()
    serve_object(srv, "Test", service)
    await srv.start()
    c = RpcClient()
    try:
        call = asyncio.create_task(c.call(srv.address, "Test", "Block", timeout_s=10.0))
        await wait_until(lambda: service.started == 1)
        for proto in list(srv._connections):
            assert proto.transport is not None
            proto.transport.abort()  # as if the peer process died
        with pytest.raises(KuduNetworkError, match="lost"):
            await call
        assert c.inflight() == []
    finally:
        await c.close()
        service.gate.set()
        await srv.stop(1.0)


async def test_garbage_bytes_close_only_that_connection(server: RpcServer, client: RpcClient) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await asyncio.wait_for(reader.read(), 5.0) is not None  # server closes it
    writer.close()
    await writer.wait_closed()
    assert await client.call(server.address, "Test", "Echo", "fine") == "fine"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
async def test_curl_with_json_works(server: RpcServer) -> None:
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "-s",
        "--http2-prior-knowledge",
        "-H",
        "content-type: application/json",
        "-d",
        '{"hello": "world"}',
        f"http://{server.address}/Test/Ping",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 20.0)
    assert json.loads(out) == {"pong": {"hello": "world"}, "source": ""}
