"""The ``Consensus`` RPC protocol: batched Raft messages between nodes, and leadership and config commands.

Raft messages themselves are ``consensus.raft_messages`` dataclasses; a batch carries them as maps, each
decoded (and checked) by ``message_from_dict`` before any replica sees one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kudu_async.rpc.messages import UNSET, Message, NonEmptyStr, Unset


class BatchRequest(Message, frozen=True):
    sender: NonEmptyStr = msgspec.field(name="from")
    to: str
    messages: list[dict[str, Any]]


class BatchResponse(Message, frozen=True):
    """Raft messages for the sender; ``missing`` lists groups this node has no replica of."""

    messages: list[dict[str, Any]]
    missing: list[str] | Unset = UNSET


class StepDownRequest(Message, frozen=True):
    group: NonEmptyStr


class LeaderHint(Message, frozen=True):
    """Who leads a group as this replica knows it (the answer to StepDown and TransferLeadership)."""

    group: str
    leader: str | None
    leader_address: str | None
    term: int


class TransferLeadershipRequest(Message, frozen=True):
    group: NonEmptyStr
    peer: str


class ChangeConfigRequest(Message, frozen=True):
    group: NonEmptyStr
    op: str
    peer: NonEmptyStr
    address: str | None = None
    cas_config_index: int | None = None


class ChangeConfigResponse(Message, frozen=True):
    group: str
    leader: str | None
    leader_address: str | None
    term: int
    config_index: int


class GetStateRequest(Message, frozen=True):
    """One replica's status (``group``), or every replica's (``{"replicas": [...]}``) without it."""

    group: str | None = None


class UnsafeChangeConfigRequest(Message, frozen=True):
    """Kudu's UnsafeChangeConfig: force a replica's config to ``peers`` (uuids of members of its committed
    config; this server's among the voters). ``dest_uuid``, when given, must be this server's uuid;
    ``caller_id`` names who asks, for the log."""

    tablet_id: NonEmptyStr
    peers: list[NonEmptyStr]
    dest_uuid: str | None = None
    caller_id: str | None = None


class UnsafeChangeConfigResponse(Message, frozen=True):
    """The forced config: the index of its entry, the replica's term and role once that entry is durable."""

    tablet_id: str
    config_index: int
    term: int
    role: str
    voters: list[str]
    learners: list[str]
