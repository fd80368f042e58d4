"""The ``TabletCopy`` RPC protocol: a copy session over a frozen image of one replica's files."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from kudu_async.rpc.messages import Message, NonEmptyStr, NonNegInt


class BeginSessionRequest(Message, frozen=True):
    group: NonEmptyStr
    extra: dict[str, Any] | None = None


class CopyFile(Message, frozen=True):
    name: str
    size: int
    crc32c: int


class BeginSessionResponse(Message, frozen=True):
    session_id: str
    meta: dict[str, Any]
    files: list[CopyFile]


class FetchDataRequest(Message, frozen=True):
    offset: NonNegInt
    session_id: str | None = None
    name: str | None = None
    max_bytes: Annotated[int, msgspec.Meta(gt=0)] | None = None


class FetchDataResponse(Message, frozen=True):
    data: bytes
    crc32c: int
    eof: bool


class EndSessionRequest(Message, frozen=True):
    session_id: str | None = None


class EndSessionResponse(Message, frozen=True):
    pass
