"""The sys catalog: every table and tablet record, in one Raft group replicated across the masters.

Entries are batches of record changes (``put``/``delete`` of a ``table`` or ``tablet`` record by id,
``request``: the result of one client DDL under its request id, and ``tsk``: a token-signing key), applied
in log order to in-memory maps on every master: those maps are the leader's caches, changed only by
committed entries, so a new leader already holds them. Every ``snapshot_every`` entries (and on close) the
maps are written atomically to ``sys-catalog.snapshot`` with the index they include; that index is the
state machine's durable index, so the WAL below it can be collected and a restart replays only the
entries after it.

Records are typed (``TableRecord``, ``TabletRecord``, ``RequestRecord``: frozen msgspec structs, never
changed in place; a writer puts a ``msgspec.structs.replace`` copy). Entries and the snapshot are plain
msgpack lists and maps; they are decoded and validated when an entry is applied and when the snapshot
loads, and a batch is checked the same way when it is encoded, before it is replicated.

A batch applies whole or not at all. It is refused (applied as a no-op on every master alike, and
answered ``{"conflict": reason}`` to the proposer) when it was planned against a catalog that changed
under it:

- every stored record carries ``rev``, the index of the entry that last wrote it; a ``put`` replaces
  the version it was derived from, so its record's ``rev`` must still be the stored one (absent for a
  new record, which must not exist yet). A writer that read a record, then lost a race with another
  write of it, never overwrites that write with its stale copy;
- two live tables (not DELETING/DELETED; a SOFT_DELETED table keeps its name until purged) never share a name;
- a request id is recorded once: a second batch under the same id is a duplicate of one already applied.

The request ids (``requests``, id -> {method, digest, result, time}) make DDL retries exactly-once: the
leader answers a retry from here instead of applying it again. The newest ``max_requests`` are kept, the
oldest (by log order, so every master drops the same ones) forgotten.

The cluster's CA (``CaRecord``: its certificate and private key, PEM; Kudu's IPKI) is one more entry
(``["ca", record]``), written once by the first leader; every master holds it, so a new leader signs
with the same CA. A second CA entry is refused like any conflicting batch.

Operators' tablet-server states (``tserver_states``, uuid -> ``TServerStateRecord``: MAINTENANCE_MODE) live
here too, so a new leader master keeps honouring them; ``ts_state`` sets or clears one (no ``rev``: the
operation states the wanted outcome, so applying it twice is harmless).

The ids of deleted tablet records are remembered too (``deleted_tablets``, the newest ``max_deleted``):
a replica a tserver still reports (a CreateTablet that landed after the deletion, a tserver that was
down) is of a tablet that will never exist again, so the leader has it deleted. Tablet ids are never
reused, so even a leader that lags knows no false deletion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Literal

import msgspec

from kudu_async.common.errors import KuduCorruption, KuduInvalidArgument
from kudu_async.fs.io_util import atomic_write_bytes
from kudu_async.master.messages import TabletPartition
from kudu_async.security.tokens import MAX_VERIFICATION_KEYS

log = logging.getLogger(__name__)

GROUP = "sys.catalog"
KIND = "sys_catalog"
SNAPSHOT_FILE = "sys-catalog.snapshot"
MAX_REMEMBERED_REQUESTS = 10_000
MAX_REMEMBERED_DELETED_TABLETS = 100_000
# Token-signing keys kept: a key lives for a rotation period plus the longest token validity, so a handful
# are alive at once (the masters refuse a rotation period so short that more would be: see
# CatalogManager); older ones have expired.
MAX_TSKS = MAX_VERIFICATION_KEYS
DEAD_TABLE_STATES = ("DELETING", "DELETED")

Kind = Literal["table", "tablet"]
TableState = Literal["CREATING", "RUNNING", "ALTERING", "SOFT_DELETED", "DELETING", "DELETED"]
TabletState = Literal["CREATING", "RUNNING"]
Unset = msgspec.UnsetType
UNSET = msgspec.UNSET


# --- records ----------------------------------------------------------------------------------------------
# Each record is the map the catalog stores, field for field and in the order the master writes its keys
# (a key no field names is dropped at decode). ``rev`` is unset on a record about to be put for the first
# time; the entry that stores it sets it.


class TableExtra(msgspec.Struct, frozen=True, omit_defaults=True):
    """A table's soft deletion (SOFT_DELETED since ``deleted_at``, unix time, recallable for
    ``reserve_seconds``) and Kudu's per-table write limits (-1: none)."""

    deleted_at: float | None = None
    reserve_seconds: int = 0
    disk_size_limit: int = -1
    row_count_limit: int = -1


_NO_EXTRA = TableExtra()


class TableRecord(msgspec.Struct, frozen=True):
    """A table: its schema and partitioning as the master accepted them, and its tablets."""

    id: str
    name: str
    state: TableState
    schema: dict[str, Any]
    schema_version: int
    partition_schema: dict[str, Any]
    num_replicas: int
    tablet_ids: tuple[str, ...]
    created_at: float
    owner: str | None
    comment: str | None
    rev: int | Unset = UNSET
    # Tablets of dropped ranges still to be deleted: written by AlterTable, emptied once the table is RUNNING.
    dropped_tablet_ids: tuple[str, ...] | Unset = UNSET
    # Written by AlterTable: the id of the next column added (a dropped column's id is never reused).
    next_column_id: int | Unset = UNSET
    # Soft deletion and write limits, one nested map (a record of at most 15 keys encodes as a fixmap).
    extra: TableExtra | Unset = UNSET

    @property
    def live(self) -> bool:
        """Not being deleted: its name belongs to it."""
        return self.state not in DEAD_TABLE_STATES

    def dropped(self) -> tuple[str, ...]:
        return () if self.dropped_tablet_ids is UNSET else self.dropped_tablet_ids

    @property
    def ext(self) -> TableExtra:
        return _NO_EXTRA if self.extra is UNSET else self.extra

    def purge_at(self) -> float | None:
        """The unix time after which a SOFT_DELETED table is purged (None for any other state)."""
        e = self.ext
        if self.state != "SOFT_DELETED" or e.deleted_at is None:
            return None
        return e.deleted_at + e.reserve_seconds

    def limits(self) -> tuple[int, int]:
        """(disk size limit, row count limit), -1 where none is set (Kudu's value for "no limit")."""
        return self.ext.disk_size_limit, self.ext.row_count_limit

    def with_extra(self, **changes: Any) -> TableRecord:
        """A copy with some of ``extra``'s fields changed."""
        return msgspec.structs.replace(self, extra=msgspec.structs.replace(self.ext, **changes))


class TabletRecord(msgspec.Struct, frozen=True):
    """A tablet: its partition and the tservers the catalog placed its replicas on (uuid -> address)."""

    id: str
    table_id: str
    partition: TabletPartition
    replicas: dict[str, str]
    state: TabletState
    first_leader: str
    rev: int | Unset = UNSET


class TskRecord(msgspec.Struct, frozen=True):
    """A token-signing key with its private half (``security.tokens.TokenSigningKey``'s record), so that a
    new leader master signs with the keys whose public halves every node already has."""

    seq: int
    private: bytes
    activate: float
    expire: float


class RequestRecord(msgspec.Struct, frozen=True):
    """The outcome of one DDL under its client request id; ``index`` is set by the entry that stores it."""

    method: str
    digest: str
    result: dict[str, Any]
    time: float
    index: int | Unset = UNSET


class CaRecord(msgspec.Struct, frozen=True):
    """The cluster CA's certificate and (unencrypted, as Kudu keeps it in its catalog) private key, PEM."""

    cert_pem: bytes
    key_pem: bytes


Record = TableRecord | TabletRecord

TServerState = Literal["MAINTENANCE_MODE"]


class TServerStateRecord(msgspec.Struct, frozen=True):
    """An operator-set state of one tablet server, since ``since`` (unix time)."""

    state: TServerState
    since: float


# --- operations: an entry is a list of them, each a list on the wire ------------------------------------


class PutTable(msgspec.Struct, frozen=True, array_like=True, tag="put"):
    """``["put", "table", id, record]``"""

    kind: Literal["table"]
    record_id: str
    record: TableRecord


class PutTablet(msgspec.Struct, frozen=True, array_like=True, tag="put"):
    """``["put", "tablet", id, record]``"""

    kind: Literal["tablet"]
    record_id: str
    record: TabletRecord


class Delete(msgspec.Struct, frozen=True, array_like=True, tag="delete"):
    """``["delete", kind, id]``"""

    kind: Kind
    record_id: str


class Request(msgspec.Struct, frozen=True, array_like=True, tag="request"):
    """``["request", request id, entry]``"""

    request_id: str
    entry: RequestRecord


class PutCa(msgspec.Struct, frozen=True, array_like=True, tag="ca"):
    """``["ca", record]``"""

    record: CaRecord


class PutTsk(msgspec.Struct, frozen=True, array_like=True, tag="tsk"):
    """``["tsk", record]``: keep a token-signing key (the newest ``max_tsks`` are kept)."""

    record: TskRecord


class SetTServerState(msgspec.Struct, frozen=True, array_like=True, tag="ts_state"):
    """``["ts_state", uuid, record or None]``: None clears the tserver's state."""

    uuid: str
    record: TServerStateRecord | None


Op = PutTable | PutTablet | Delete | Request | PutCa | PutTsk | SetTServerState


class _RawPut(msgspec.Struct, frozen=True, array_like=True, tag="put"):
    """A put as decoded before its record, whose type its kind names."""

    kind: Kind
    record_id: str
    record: msgspec.Raw


class _Snapshot(msgspec.Struct, omit_defaults=True):
    index: int
    tables: dict[str, TableRecord]
    tablets: dict[str, TabletRecord]
    requests: list[tuple[str, RequestRecord]]  # oldest first
    deleted_tablets: list[tuple[str, int]]  # oldest first
    ca: CaRecord | None = None
    tsks: list[TskRecord] = msgspec.field(default_factory=list)  # by seq
    tserver_states: dict[str, TServerStateRecord] = {}


_ENCODER = msgspec.msgpack.Encoder()
_OPS = msgspec.msgpack.Decoder(list[_RawPut | Delete | Request | PutCa | PutTsk | SetTServerState])
_TABLE = msgspec.msgpack.Decoder(TableRecord)
_TABLET = msgspec.msgpack.Decoder(TabletRecord)
_SNAPSHOT = msgspec.msgpack.Decoder(_Snapshot)


def put(record: Record) -> PutTable | PutTablet:
    """Store ``record`` under its id; ``record.rev`` is that of the stored version it was derived from."""
    if isinstance(record, TableRecord):
        return PutTable("table", record.id, record)
    return PutTablet("tablet", record.id, record)


def delete(kind: Kind, record_id: str) -> Delete:
    return Delete(kind, record_id)


def request(request_id: str, entry: RequestRecord) -> Request:
    """Record one DDL's outcome under its client request id."""
    return Request(request_id, entry)


def put_ca(cert_pem: bytes, key_pem: bytes) -> PutCa:
    return PutCa(CaRecord(cert_pem, key_pem))


def put_tsk(record: TskRecord) -> PutTsk:
    return PutTsk(record)


def set_tserver_state(uuid: str, record: TServerStateRecord | None) -> SetTServerState:
    """Set (or, with None, clear) the operator-set state of tserver ``uuid``."""
    return SetTServerState(uuid, record)


def encode_ops(ops: Sequence[Op]) -> bytes:
    """One entry's bytes, checked by decoding them as every master will (a struct's constructor checks
    no types): a malformed operation is refused here, before it is replicated."""
    try:
        data = _ENCODER.encode(list(ops))
        decode_ops(data)
    except (TypeError, msgspec.ValidationError, msgspec.DecodeError) as e:
        raise KuduInvalidArgument(f"bad sys catalog operation in {list(ops)!r}: {e}") from None
    return data


def decode_ops(data: bytes) -> list[Op]:
    """An entry's operations, each record decoded as its kind's type and validated."""
    ops: list[Op] = []
    for op in _OPS.decode(data):
        if not isinstance(op, _RawPut):
            ops.append(op)
            continue
        put_op = (
            PutTable("table", op.record_id, _TABLE.decode(op.record))
            if op.kind == "table"
            else PutTablet("tablet", op.record_id, _TABLET.decode(op.record))
        )
        if put_op.record.id != op.record_id:
            raise msgspec.ValidationError(f"put of {op.kind} {op.record_id} carries the record of {put_op.record.id}")
        ops.append(put_op)
    return ops


class SysCatalogStateMachine:
    """The catalog maps, rebuilt from the snapshot plus the log; implements ``StateMachine``."""

    def __init__(
        self,
        directory: Path,
        executor: Executor | None,
        snapshot_every: int = 200,
        max_requests: int = MAX_REMEMBERED_REQUESTS,
        max_deleted: int = MAX_REMEMBERED_DELETED_TABLETS,
    ) -> None:
        self.path = directory / SNAPSHOT_FILE
        self.executor = executor
        self.snapshot_every = snapshot_every
        self.max_requests = max_requests
        self.max_deleted = max_deleted
        self.tables: dict[str, TableRecord] = {}
        self.tablets: dict[str, TabletRecord] = {}
        self.requests: dict[str, RequestRecord] = {}  # request id -> outcome, oldest first (log order)
        self.deleted_tablets: dict[str, int] = {}  # tablet id -> index of its deletion, oldest first
        self.ca: CaRecord | None = None
        self.tsks: dict[int, TskRecord] = {}  # token-signing keys by seq
        self.tserver_states: dict[str, TServerStateRecord] = {}  # tserver uuid -> its operator-set state
        self.applied_index = 0
        self.conflicts = 0  # batches refused since start (this master)
        self._snapshot_index = 0
        self._since_snapshot = 0

    def load(self) -> None:
        """Read the snapshot (worker thread); a damaged one is an error, never an empty catalog."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = _SNAPSHOT.decode(data)
            records: list[Record] = [*doc.tables.values(), *doc.tablets.values()]
            unstamped = [r.id for r in records if r.rev is UNSET]
            if unstamped:
                raise ValueError(f"records without 'rev': {unstamped[:5]}")
        except (ValueError, msgspec.DecodeError) as e:  # msgspec.ValidationError is a ValueError
            raise KuduCorruption(f"sys catalog snapshot {self.path} is unreadable: {e}") from e
        self.tables, self.tablets = doc.tables, doc.tablets
        self.requests = dict(doc.requests)
        self.deleted_tablets = dict(doc.deleted_tablets)
        self.ca = doc.ca
        self.tsks = {t.seq: t for t in doc.tsks}
        self.tserver_states = dict(doc.tserver_states)
        self.applied_index = self._snapshot_index = doc.index

    def conflict(self, ops: Sequence[Op]) -> str | None:
        """Why this batch cannot apply to the current maps (see the module docstring), or None."""
        staged: dict[tuple[str, str], Record | None] = {}  # what the batch's earlier ops left
        requests: set[str] = set()
        for op in ops:
            if isinstance(op, PutTsk):
                if op.record.seq in self.tsks:
                    return f"token-signing key {op.record.seq} already exists"
                continue
            if isinstance(op, Request):
                if op.request_id in self.requests or op.request_id in requests:
                    return f"request id {op.request_id!r} was already applied"
                requests.add(op.request_id)
            elif isinstance(op, Delete):
                staged[(op.kind, op.record_id)] = None
            elif isinstance(op, PutCa):
                if self.ca is not None:
                    return "the cluster CA exists already"
            elif isinstance(op, SetTServerState):
                continue
            else:
                reason = self._put_conflict(op, staged)
                if reason is not None:
                    return reason
                staged[(op.kind, op.record_id)] = op.record
        return None

    def _current(self, staged: dict[tuple[str, str], Record | None], kind: str, record_id: str) -> Record | None:
        if (kind, record_id) in staged:
            return staged[(kind, record_id)]
        return (self.tables if kind == "table" else self.tablets).get(record_id)

    def _put_conflict(self, op: PutTable | PutTablet, staged: dict[tuple[str, str], Record | None]) -> str | None:
        """A put must replace the version it was derived from, and a live table must keep its name its own."""
        kind, record_id, new = op.kind, op.record_id, op.record
        old = self._current(staged, kind, record_id)
        if old is None and new.rev is not UNSET:
            return f"{kind} {record_id} was deleted since it was read (at rev {new.rev})"
        if old is not None and old.rev != new.rev:
            shown = None if new.rev is UNSET else new.rev
            return f"{kind} {record_id} changed since it was read: rev {shown} was written over by rev {old.rev}"
        if not isinstance(new, TableRecord) or not new.live:
            return None
        if isinstance(old, TableRecord) and old.live and old.name == new.name:
            return None
        for other_id in {*self.tables, *(i for k, i in staged if k == "table")}:
            other = self._current(staged, "table", other_id)
            if other_id != record_id and isinstance(other, TableRecord) and other.live and other.name == new.name:
                return f"table name {new.name!r} is taken by table {other_id}"
        return None

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        try:
            ops = decode_ops(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise KuduCorruption(f"sys catalog entry {index} is unreadable: {e}") from e
        reason = self.conflict(ops)
        if reason is None:
            self._apply(index, ops)
        else:
            self.conflicts += 1
            log.info("sys catalog batch refused", extra={"index": index, "reason": reason})
        self.applied_index = index
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_every:
            await self.snapshot()
        return {"index": index} if reason is None else {"index": index, "conflict": reason}

    def _apply(self, index: int, ops: list[Op]) -> None:
        for op in ops:
            if isinstance(op, PutTsk):
                self.tsks[op.record.seq] = op.record
                while len(self.tsks) > MAX_TSKS:
                    del self.tsks[min(self.tsks)]
            elif isinstance(op, Request):
                self.requests[op.request_id] = msgspec.structs.replace(op.entry, index=index)
            elif isinstance(op, PutCa):
                self.ca = op.record
            elif isinstance(op, PutTable):
                self.tables[op.record_id] = msgspec.structs.replace(op.record, rev=index)
            elif isinstance(op, PutTablet):
                self.tablets[op.record_id] = msgspec.structs.replace(op.record, rev=index)
            elif isinstance(op, SetTServerState):
                if op.record is None:
                    self.tserver_states.pop(op.uuid, None)
                else:
                    self.tserver_states[op.uuid] = op.record
            elif op.kind == "table":
                self.tables.pop(op.record_id, None)
            elif self.tablets.pop(op.record_id, None) is not None:
                self.deleted_tablets[op.record_id] = index
        while len(self.requests) > self.max_requests:
            del self.requests[next(iter(self.requests))]
        while len(self.deleted_tablets) > self.max_deleted:
            del self.deleted_tablets[next(iter(self.deleted_tablets))]

    def durable_index(self) -> int:
        return self._snapshot_index

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        """Nothing to recall: its snapshot file holds the catalog and the DDL request results."""

    async def snapshot(self) -> None:
        self._since_snapshot = 0
        index = self.applied_index
        # Encoded here, on the loop, so the maps cannot change under it; records are never changed in place.
        data = _ENCODER.encode(
            _Snapshot(
                index,
                self.tables,
                self.tablets,
                list(self.requests.items()),
                list(self.deleted_tablets.items()),
                self.ca,
                [self.tsks[k] for k in sorted(self.tsks)],
                self.tserver_states,
            )
        )
        await asyncio.get_running_loop().run_in_executor(self.executor, atomic_write_bytes, str(self.path), data)
        self._snapshot_index = index
