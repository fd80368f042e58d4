"""The same transport on uvloop, which is what nodes run on (its transports differ from asyncio's)."""

from __future__ import annotations

import asyncio

import pytest

from kudu_async.common.errors import KuduNoSuchMethod, KuduTimedOut
from kudu_async.rpc import RpcClient, RpcServer
from tests.unit.rpc.rpc_testkit import TestService, serve_object

uvloop = pytest.importorskip("uvloop")


async def _scenario() -> None:
    service = TestService()
    server = RpcServer()
    serve_object(server, "Test", service)
    await server.start()
    client = RpcClient("uv")
    try:
        assert await client.call(server.address, "Test", "Ping", 1) == {"pong": 1, "source": "uv"}
        blob = b"\x07" * (8 * 1024 * 1024 + 3)
        assert await client.call(server.address, "Test", "Echo", blob, timeout_s=60.0) == blob
        many = await asyncio.gather(*(client.call(server.address, "Test", "Echo", i) for i in range(300)))
        assert many == list(range(300))
        with pytest.raises(KuduNoSuchMethod):
            await client.call(server.address, "Test", "Nope")
        with pytest.raises(KuduTimedOut):
            await client.call(server.address, "Test", "Sleep", 30, timeout_s=0.2)
        assert await client.call(server.address, "Test", "Echo", "after") == "after"
    finally:
        await client.close()
        await server.stop(1.0)


@pytest.mark.timeout(60)
def test_calls_large_bodies_and_errors_on_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_scenario())
