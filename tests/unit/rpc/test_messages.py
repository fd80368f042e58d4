"""Typed RPC messages: validation at decode, wire shapes, zero-copy bytes, and the service table."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduInvalidRequest
from kudu_async.rpc import codec
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.messages import UNSET, Empty, Message, MessageCodec, Method, NonEmptyStr, NonNegInt, Unset, serve
from kudu_async.rpc.server import CallContext, RpcServer
from kudu_async.tserver.messages import ScanResponse, WriteRequest


class EchoRequest(Message, frozen=True):
    tablet_id: NonEmptyStr
    count: NonNegInt = 0
    key: bytes | None = None


class EchoResponse(Message, frozen=True):
    tablet_id: str
    count: int
    extra: int | Unset = UNSET


def _decode(body: Any, content_type: str = codec.MSGPACK) -> Any:
    raw = codec.encode(body, content_type) if content_type == codec.JSON else msgpack.packb(body)
    return MessageCodec(EchoRequest, EchoResponse).decode(raw, content_type)


def test_a_valid_request_decodes_with_defaults() -> None:
    assert _decode({"tablet_id": "t", "unknown": 1}) == EchoRequest(tablet_id="t")
    assert _decode({"tablet_id": "t", "count": 3}, codec.JSON) == EchoRequest(tablet_id="t", count=3)


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"tablet_id": 5}, "tablet_id", "'tablet_id': expected str, got int"),
        ({"tablet_id": ""}, "tablet_id", "'tablet_id': expected a non-empty string"),
        ({}, "tablet_id", "'tablet_id': missing"),
        ({"tablet_id": "t", "count": -1}, "count", "'count': expected a non-negative integer"),
        ({"tablet_id": "t", "count": True}, "count", "'count': expected int, got bool"),
        ({"tablet_id": "t", "key": "k"}, "key", "'key': expected bytes | null, got str"),
        ([1], "request", "'request': expected a map, got array"),
    ],
)
def test_a_bad_field_is_named_with_what_was_expected_and_what_arrived(body: Any, field: str, text: str) -> None:
    with pytest.raises(KuduInvalidArgument) as ei:
        _decode(body)
    assert ei.value.message == text and ei.value.details["field"] == field


def test_nested_fields_are_named_by_their_path() -> None:
    body = {"tablet_id": "t", "rows": b"", "op_types": b"", "request_id": {"client_id": "c", "seq_no": "1"}}
    with pytest.raises(KuduInvalidArgument, match=r"'request_id.seq_no': expected int, got str"):
        MessageCodec(WriteRequest, EchoResponse).decode(msgpack.packb(body), codec.MSGPACK)


def test_malformed_bodies_are_invalid_requests() -> None:
    mc = MessageCodec(EchoRequest, EchoResponse)
    with pytest.raises(KuduInvalidRequest, match="malformed msgpack"):
        mc.decode(b"\xc1", codec.MSGPACK)
    with pytest.raises(KuduInvalidRequest, match="malformed JSON"):
        mc.decode(b"{", codec.JSON)


def test_an_empty_body_is_an_empty_map() -> None:
    mc = MessageCodec(EchoResponse, EchoResponse)
    with pytest.raises(KuduInvalidArgument, match="'tablet_id': missing"):
        mc.decode(b"", codec.MSGPACK)
    assert MessageCodec(Empty, EchoResponse).decode(b" ", codec.JSON) == Empty()


def test_write_rows_are_a_view_of_the_body() -> None:
    rows = bytes(range(256)) * 4096
    body = msgpack.packb({"tablet_id": "t", "rows": rows, "op_types": b"\x00"})
    req = MessageCodec(WriteRequest, EchoResponse).decode(body, codec.MSGPACK)
    assert isinstance(req.rows, memoryview) and req.rows.obj is body and req.rows.readonly
    assert req.rows == rows


def test_responses_encode_to_the_same_maps_as_dicts() -> None:
    mc = MessageCodec(EchoRequest, ScanResponse)
    resp = ScanResponse(scanner_id=None, data=b"\x01", rows=1, has_more=False)
    want = {"scanner_id": None, "data": b"\x01", "rows": 1, "has_more": False}
    assert msgpack.unpackb(mc.encode(resp, codec.MSGPACK)) == want
    assert mc.encode(resp, codec.JSON) == codec.encode_json(want)
    with pytest.raises(TypeError, match="declares ScanResponse"):
        mc.encode({"rows": 1}, codec.MSGPACK)


async def test_a_service_table_serves_typed_methods_over_rpc() -> None:
    seen: list[EchoRequest] = []

    async def echo(req: EchoRequest, ctx: CallContext) -> EchoResponse:
        seen.append(req)
        return EchoResponse(tablet_id=req.tablet_id, count=req.count + 1)

    server = RpcServer()
    serve(server, "Echo", {"Echo": Method(EchoRequest, EchoResponse, echo, requires="user")})
    await server.start()
    client = RpcClient()
    try:
        assert await client.call(server.address, "Echo", "Echo", {"tablet_id": "t", "count": 1}) == {
            "tablet_id": "t",
            "count": 2,
        }
        with pytest.raises(KuduInvalidArgument, match="'count': expected a non-negative integer"):
            await client.call(server.address, "Echo", "Echo", {"tablet_id": "t", "count": -5})
        assert seen == [EchoRequest(tablet_id="t", count=1)]
    finally:
        await client.close()
        await server.stop()
