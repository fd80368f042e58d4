"""Test services and a bare h2 client shared by the RPC tests."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import jh2.connection
import jh2.events

from kudu_async.common.errors import KuduNotTheLeader, error_from_code
from kudu_async.rpc import CallContext, RpcServer
from kudu_async.rpc.jh2_fast import make_h2_connection


class TestService:
    """Handlers the tests call; ``gate`` holds Block calls until a test opens it."""

    __test__ = False

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = 0
        self.cancelled = 0
        self.calls: list[str] = []

    async def Ping(self, req: Any, ctx: CallContext) -> Any:
        return {"pong": req, "source": ctx.source}

    async def Echo(self, req: Any, ctx: CallContext) -> Any:
        return req

    async def Size(self, req: Any, ctx: CallContext) -> int:
        return len(req)

    async def Sleep(self, req: Any, ctx: CallContext) -> str:
        self.started += 1
        try:
            await asyncio.sleep(float(req))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "slept"

    async def Block(self, req: Any, ctx: CallContext) -> str:
        self.started += 1
        self.calls.append(ctx.full_method)
        await self.gate.wait()
        return "released"

    async def Fail(self, req: Any, ctx: CallContext) -> None:
        raise ValueError(f"broken on purpose: {req}")

    async def NotLeader(self, req: Any, ctx: CallContext) -> None:
        raise KuduNotTheLeader("I follow", {"leader": "ts-2"})

    async def RaiseCode(self, req: Any, ctx: CallContext) -> None:
        raise error_from_code(req, f"raised {req}", {"k": 1})

    async def Context(self, req: Any, ctx: CallContext) -> dict[str, Any]:
        return {
            "service": ctx.service,
            "method": ctx.method,
            "source": ctx.source,
            "remote": ctx.remote,
            "remaining": ctx.remaining(),
            "user": ctx.identity.user,
            "authn": ctx.identity.authn,
        }


def serve_object(server: RpcServer, service: str, obj: object) -> None:
    """Register every public ``async def`` method of ``obj`` as a method of ``service``."""
    names = [n for n in dir(obj) if not n.startswith("_") and inspect.iscoroutinefunction(getattr(obj, n))]
    assert names, f"{type(obj).__name__} has no public async methods"
    for name in names:
        server.register(service, name, getattr(obj, name), requires="user")


async def raw_post(
    port: int,
    path: str,
    body: bytes | None,
    content_type: bytes | None = b"application/json",
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
    method: bytes = b"POST",
    timeout_s: float = 10.0,
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request with a bare h2 client, for what RpcClient never sends (JSON, garbage, odd headers).

    ``body=None`` sends the headers only and leaves the request stream open (an upload in progress).
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn: jh2.connection.H2Connection = make_h2_connection(True)
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    headers = [(b":method", method), (b":scheme", b"http"), (b":path", path.encode()), (b":authority", b"x")]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    headers.extend(extra_headers)
    conn.send_headers(sid, headers, end_stream=body == b"")
    if body:
        conn.send_data(sid, body, end_stream=True)
    writer.write(conn.data_to_send())
    status = 0
    resp_headers: dict[bytes, bytes] = {}
    chunks: list[bytes] = []
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                for ev in conn.receive_data(data):
                    if isinstance(ev, jh2.events.ResponseReceived):
                        assert ev.headers is not None
                        resp_headers = dict(ev.headers)
                        status = int(resp_headers[b":status"])
                    elif isinstance(ev, jh2.events.DataReceived):
                        assert ev.data is not None
                        conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                        chunks.append(ev.data)
                    elif isinstance(ev, jh2.events.StreamEnded):
                        return status, resp_headers, b"".join(chunks)
                    elif isinstance(ev, jh2.events.StreamReset):
                        raise ConnectionResetError(f"stream reset: {ev.error_code}")
                writer.write(conn.data_to_send())
    finally:
        writer.close()
        await writer.wait_closed()


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll a condition that no event signals (e.g. a handler having started)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
