"""Wire-level values of the Raft core: log entries, configs and the messages peers exchange.

Everything here is a small frozen dataclass that round-trips through plain dicts (and therefore
msgpack or JSON), because the asyncio driver ships messages over RPC, batched per destination node.
Every message carries its group id (the tablet id) so that many Raft groups share one transport.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import msgpack

from kudu_async.common.errors import KuduInvalidRequest

__all__ = [
    "AppendRequest",
    "AppendResponse",
    "Config",
    "Entry",
    "EntryKind",
    "Heartbeat",
    "HeartbeatResponse",
    "Message",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "message_from_dict",
]


class EntryKind(enum.IntEnum):
    """What an entry carries: Kudu's WRITE_OP/ALTER_SCHEMA_OP are NORMAL; NO_OP, CHANGE_CONFIG_OP map 1:1."""

    NORMAL = 0
    NOOP = 1
    CONFIG = 2


_KINDS: tuple[EntryKind, ...] = (EntryKind.NORMAL, EntryKind.NOOP, EntryKind.CONFIG)


class Entry(NamedTuple):
    """One log entry (Kudu: an op with opid term.index). The payload is opaque to consensus.

    A NamedTuple rather than a frozen dataclass: it is just as immutable, and building one is several
    times cheaper, which matters because every proposal creates one (the core's hot path)."""

    term: int
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: Raft calls it index
    kind: EntryKind
    payload: bytes

    def to_list(self) -> list[Any]:
        """Compact wire form ``[term, index, kind, payload]`` (lists are cheaper than dicts in msgpack)."""
        return [self.term, self.index, int(self.kind), self.payload]

    @staticmethod
    def from_list(raw: Any) -> Entry:
        """Inverse of :meth:`to_list`; rejects malformed input with INVALID_REQUEST."""
        try:
            term, index, kind, payload = raw
            return Entry(int(term), int(index), _KINDS[int(kind)], bytes(payload))
        except (TypeError, ValueError, IndexError) as exc:
            raise KuduInvalidRequest(
                f"malformed log entry: expected [term, index, kind, payload], got {raw!r:.100}"
            ) from exc


@dataclass(frozen=True, slots=True)
class Config:
    """A Raft membership: voters decide elections and commits; learners (Kudu NON_VOTER) only replicate."""

    voters: frozenset[str]
    learners: frozenset[str] = frozenset()
    # Learners that stay learners (Kudu's NON_VOTER without the ``promote`` attribute: read replicas an
    # operator asked for, or a demoted voter); the others are on their way to becoming voters (a
    # re-replication's new replica), which the master promotes once their copy runs.
    kept_learners: frozenset[str] = frozenset()

    @property
    def members(self) -> frozenset[str]:
        """Everyone the leader replicates to."""
        return self.voters | self.learners

    @property
    def promotable_learners(self) -> frozenset[str]:
        return self.learners - self.kept_learners

    def quorum(self) -> int:
        """Votes or durable acks needed: a strict majority of voters."""
        return len(self.voters) // 2 + 1

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"voters": sorted(self.voters), "learners": sorted(self.learners)}
        if self.kept_learners:
            d["kept_learners"] = sorted(self.kept_learners)
        return d

    @staticmethod
    def from_dict(raw: Any) -> Config:
        try:
            learners = frozenset(map(str, raw.get("learners", ())))
            kept = frozenset(map(str, raw.get("kept_learners", ()))) & learners
            return Config(frozenset(map(str, raw["voters"])), learners, kept)
        except (TypeError, KeyError, AttributeError) as exc:
            raise KuduInvalidRequest(f"malformed raft config: expected voters/learners, got {raw!r:.100}") from exc

    def encode(self, addresses: Mapping[str, str] | None = None) -> bytes:
        """Payload of a CONFIG entry (msgpack, so the WAL stays one format).

        ``addresses`` (uuid -> RPC address, Kudu's ``last_known_addr``) ride along opaquely: the core
        ignores them; replica hosts read them with ``config_addresses`` so every member (and a later
        leader) can reach a server added by this entry."""
        d: dict[str, Any] = self.to_dict()
        if addresses:
            d["addresses"] = dict(addresses)
        packed: bytes = msgpack.packb(d, use_bin_type=True)  # msgpack ships no type hints
        return packed

    @staticmethod
    def decode(payload: bytes) -> Config:
        return Config.from_dict(msgpack.unpackb(payload, raw=False))


def config_addresses(payload: bytes) -> dict[str, str]:
    """The member addresses a CONFIG entry carries (empty for entries written without them)."""
    try:
        raw = msgpack.unpackb(payload, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return {}
    addrs = raw.get("addresses") if isinstance(raw, dict) else None
    if not isinstance(addrs, dict):
        return {}
    return {k: v for k, v in addrs.items() if isinstance(k, str) and isinstance(v, str) and k and v}


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls: Any) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class _Wire:
    """Shared dict codec: field order is the dataclass order, plus a type tag ``t``."""

    TAG: ClassVar[str] = ""
    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.TAG}
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if name == "entries":
                value = [e.to_list() for e in value]
            out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class _Addressed(_Wire):
    """The fields every message starts with: its group, sender, receiver and the sender's term."""

    group: str
    src: str
    dst: str
    term: int


@dataclass(frozen=True, slots=True)
class AppendRequest(_Addressed):
    """Leader -> follower (Kudu UpdateConsensus): entries after (prev_index, prev_term) plus the commit index.

    The same message with no entries probes a follower whose position is unknown.
    """

    TAG: ClassVar[str] = "append"
    prev_index: int
    prev_term: int
    commit: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class AppendResponse(_Addressed):
    """Follower -> leader. ``match`` is the highest index durable on the follower *and* known to agree
    with this leader; on reject, ``last_index`` and ``committed`` let the leader jump back (Kudu)."""

    TAG: ClassVar[str] = "append_resp"
    success: bool
    match: int
    last_index: int
    committed: int
    rejected_prev: int


@dataclass(frozen=True, slots=True)
class Heartbeat(_Addressed):
    """Leader -> follower keep-alive; carries commit, a read-index sequence and the leader's send tick
    (echoed back so the leader can compute its lease from the time the heartbeat *left*)."""

    TAG: ClassVar[str] = "hb"
    commit: int
    read_seq: int
    sent_tick: int


@dataclass(frozen=True, slots=True)
class HeartbeatResponse(_Addressed):
    """Follower -> leader. ``match`` = durable agreed index, ``accepted`` = agreed index in memory."""

    TAG: ClassVar[str] = "hb_resp"
    match: int
    accepted: int
    read_seq: int
    sent_tick: int


@dataclass(frozen=True, slots=True)
class VoteRequest(_Addressed):
    """Candidate -> voter. ``pre_vote`` polls without anyone bumping a term; ``forced`` (leadership
    transfer) overrides leader stickiness, like Kudu's ``ignore_live_leader``."""

    TAG: ClassVar[str] = "vote"
    last_index: int
    last_term: int
    pre_vote: bool
    forced: bool


@dataclass(frozen=True, slots=True)
class VoteResponse(_Addressed):
    """Voter -> candidate; a granted pre-vote carries the term the candidate asked about."""

    TAG: ClassVar[str] = "vote_resp"
    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class TimeoutNow(_Addressed):
    """Leader -> caught-up transferee: start a real election now (leadership transfer)."""

    TAG: ClassVar[str] = "timeout_now"


Message = AppendRequest | AppendResponse | Heartbeat | HeartbeatResponse | VoteRequest | VoteResponse | TimeoutNow

_BY_TAG: dict[str, type[_Wire]] = {
    cls.TAG: cls
    for cls in (
        AppendRequest,
        AppendResponse,
        Heartbeat,
        HeartbeatResponse,
        VoteRequest,
        VoteResponse,
        TimeoutNow,
    )
}


def message_from_dict(raw: Any) -> Message:
    """Decode a message produced by ``to_dict`` (maybe via msgpack); malformed input -> INVALID_REQUEST."""
    if not isinstance(raw, dict):
        raise KuduInvalidRequest(f"malformed raft message: expected a map, got {type(raw).__name__}")
    cls = _BY_TAG.get(raw.get("t", ""))
    if cls is None:
        raise KuduInvalidRequest(f"unknown raft message type {raw.get('t')!r}")
    kwargs: dict[str, Any] = {}
    try:
        for name in _field_names(cls):
            value = raw[name]
            if name == "entries":
                value = tuple(Entry.from_list(e) for e in value)
            kwargs[name] = value
    except KeyError as exc:
        raise KuduInvalidRequest(f"raft message {cls.TAG!r} lacks field {exc.args[0]!r}") from exc
    return cls(**kwargs)  # type: ignore[return-value]
