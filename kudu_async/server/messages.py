"""The ``Generic`` RPC protocol every node serves: liveness, status, flags and (for tests) fault injection."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from kudu_async.rpc.messages import Message

FlagName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
# A flag's value as text (Kudu's gflags form): long enough for a certificate path or an ACL.
FlagValue = Annotated[str, msgspec.Meta(max_length=4096)]


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


class GetFlagsRequest(Message, frozen=True):
    """Kudu's GetFlags: ``flags`` names the flags to return (then the other filters do not apply); else
    every flag when ``all_flags``, only those not at their default otherwise, and with ``tags`` only the
    flags carrying every one of them."""

    flags: Annotated[list[FlagName], msgspec.Meta(max_length=1000)] = msgspec.field(default_factory=list)
    all_flags: bool = False
    tags: Annotated[list[FlagName], msgspec.Meta(max_length=16)] = msgspec.field(default_factory=list)


class FlagInfo(Message, frozen=True):
    name: str
    value: str
    default: str
    tags: list[str]
    is_default: bool
    source: str  # default, cli, env, file:<path>, derived, auto, runtime
    help: str


class GetFlagsResponse(Message, frozen=True):
    flags: list[FlagInfo]


class SetFlagRequest(Message, frozen=True):
    """Kudu's SetFlag: ``force`` sets a flag without the ``runtime`` tag too."""

    flag: FlagName
    value: FlagValue
    force: bool = False


class SetFlagResponse(Message, frozen=True):
    flag: str
    old_value: str
    value: str
    forced: bool  # the flag is not runtime-settable: the node may not act on the new value
