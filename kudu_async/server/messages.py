"""The ``Generic`` RPC protocol every node serves: liveness, status and (for tests) fault injection."""

from __future__ import annotations

from typing import Any

import msgspec

from kudu_async.rpc.messages import Message


class PingRequest(Message, frozen=True):
    pass


class PingResponse(Message, frozen=True):
    pass


class GetStatusRequest(Message, frozen=True):
    pass


class SetFaultsRequest(Message, frozen=True):
    """The whole set of fault rules to apply from now on (an empty list clears them)."""

    rules: list[dict[str, Any]] = msgspec.field(default_factory=list)


class SetFaultsResponse(Message, frozen=True):
    rules: list[dict[str, Any]]
