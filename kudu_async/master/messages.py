"""The ``Master`` RPC protocol: tserver heartbeats, DDL, table and tablet locations, leader discovery.

Field names are the wire's map keys. A heartbeat is checked whole at decode (types by msgspec, then what
types cannot say: addresses, duplicates, config membership), so the master acts on all of it or none;
a bad field is named by its path, e.g. ``report.tablets[3].config.peers[ts-a]``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import msgspec

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.partition import Partition
from kudu_async.rpc.messages import UNSET, Message, NonNegInt, Unset
from kudu_async.server.config import is_wildcard, parse_hostport

MAX_ID_CHARS = 256  # uuids and tablet ids are 32 hex chars; anything this long is garbage, not an id
MAX_TEXT_CHARS = 4096  # error messages, versions, states
MAX_DDL_WAIT_MS = 5000  # longest an Is*Done call may be held waiting for the DDL to finish
MAX_REQUEST_ID_LEN = 128
REQUEST_ID_RE = re.compile(rf"[\x21-\x7e]{{1,{MAX_REQUEST_ID_LEN}}}")  # printable ASCII, no spaces

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]


class _Bad(Exception):
    """A failed check, named by its path relative to the object checked; each enclosing level prefixes its
    own part on the way out, so a valid report costs no path formatting at all."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem

    def under(self, parent: str) -> _Bad:
        sep = "" if not self.path or self.path.startswith("[") else "."
        return _Bad(parent + sep + self.path, self.problem)

    def error(self, parent: str) -> KuduInvalidArgument:
        path = self.under(parent).path
        return KuduInvalidArgument(f"'{path}': {self.problem}", {"field": path})


def _check_id(v: str, path: str) -> None:
    if not v.isprintable():
        raise _Bad(path, f"not a plausible id ({len(v)} characters)")


def _check_hostport(v: str, path: str, good: set[str]) -> None:
    """``good``: addresses already found valid in this request (a report names the same few servers)."""
    if v in good:
        return
    try:
        host, _ = parse_hostport(v)
    except ValueError as e:
        raise _Bad(path, str(e)) from None
    if is_wildcard(host):
        raise _Bad(path, f"{v!r} is a wildcard, not an address others can reach (the node needs an advertised address)")
    good.add(v)


def _check_ids(ids: list[str], path: str) -> None:
    if not "".join(ids).isprintable():
        for i, x in enumerate(ids):
            _check_id(x, f"{path}[{i}]")
    if len(set(ids)) != len(ids):
        raise _Bad(path, "duplicate entries")


# --- TSHeartbeat -------------------------------------------------------------------------------------------


class TSInfo(Message, frozen=True):
    """A tserver's registration: who it is, where it listens, since when it runs."""

    uuid: Id
    rpc_address: str
    http_address: str
    version: Text
    start_time: Annotated[float, msgspec.Meta(ge=0)]

    def check(self) -> None:
        """Raises INVALID_ARGUMENT naming the field (``ts.<field>``)."""
        try:
            _check_id(self.uuid, "uuid")
            _check_hostport(self.rpc_address, "rpc_address", set())
            _check_hostport(self.http_address, "http_address", set())
            if not math.isfinite(self.start_time):
                raise _Bad("start_time", f"expected a non-negative unix time, got {self.start_time!r}")
        except _Bad as e:
            raise e.error("ts") from None


class RaftConfigReport(Message, frozen=True):
    """The committed Raft config in a tablet report; every voter and non-voter needs an address."""

    opid_index: Annotated[int, msgspec.Meta(ge=-1)]  # -1: no config change committed yet
    voters: list[Id]
    non_voters: list[Id]
    peers: dict[Id, str]
    kept_non_voters: list[Id] = msgspec.field(default_factory=list)  # non-voters that are not to be promoted

    def check(self, good: set[str]) -> None:
        _check_ids(self.voters, "voters")
        _check_ids(self.non_voters, "non_voters")
        _check_ids(self.kept_non_voters, "kept_non_voters")
        if self.non_voters:
            both = set(self.voters) & set(self.non_voters)
            if both:
                raise _Bad("", f"{sorted(both)} listed as voter and non-voter")
        stray = set(self.kept_non_voters) - set(self.non_voters)
        if stray:
            raise _Bad("kept_non_voters", f"{sorted(stray)} are not non-voters")
        peers = self.peers
        for k, v in peers.items():
            _check_id(k, "peers key")
            _check_hostport(v, f"peers[{k}]", good)
        missing = [u for u in (*self.voters, *self.non_voters) if u not in peers]
        if missing:
            raise _Bad("peers", f"no address for member(s) {missing}")


class TabletReport(Message, frozen=True):
    """One replica's state as its tserver reports it."""

    tablet_id: Id
    table_id: Text
    state: Text
    error: Text | None
    role: Text | None
    term: NonNegInt
    leader_uuid: Id | None
    config: RaftConfigReport
    schema_version: NonNegInt
    # A leader's figures (counted by the tablet, refreshed every --update_tablet_stats_interval_ms).
    live_row_count: NonNegInt | None = None
    on_disk_size: NonNegInt | None = None

    def check(self, good: set[str]) -> None:
        _check_id(self.tablet_id, "tablet_id")
        if self.leader_uuid is not None:
            _check_id(self.leader_uuid, "leader_uuid")
        try:
            self.config.check(good)
        except _Bad as e:
            raise e.under("config") from None


class Report(Message, frozen=True):
    """A full or incremental tablet report; a tablet may appear only once."""

    full: bool
    seq: NonNegInt
    tablets: list[TabletReport]
    removed: list[Id]

    def check(self) -> None:
        """Raises INVALID_ARGUMENT naming the field (``report.<path>``)."""
        try:
            self._check()
        except _Bad as e:
            raise e.error("report") from None

    def _check(self) -> None:
        good: set[str] = set()
        for i, t in enumerate(self.tablets):
            try:
                t.check(good)
            except _Bad as e:
                raise e.under(f"tablets[{i}]") from None
        ids = [t.tablet_id for t in self.tablets]
        if len(set(ids)) != len(ids):
            raise _Bad("tablets", "a tablet is reported more than once")
        _check_ids(self.removed, "removed")
        both = set(ids) & set(self.removed)
        if both:
            raise _Bad("removed", f"{sorted(both)[:5]} also reported as present")


# A PEM CSR for an ECDSA P-256 key is ~500 bytes; this leaves room for any sane one and no more.
MAX_CSR_BYTES = 8192


class TSHeartbeatRequest(Message, frozen=True):
    ts: TSInfo
    register: bool
    report: Report | None
    num_live_tablets: NonNegInt
    leader_count: NonNegInt
    # A PEM certificate signing request: the tserver wants a certificate from the cluster's CA (it has
    # none, or its own expires soon); the leader answers with ``cert_pem`` and ``ca_cert_pem``.
    csr_pem: Annotated[bytes, msgspec.Meta(max_length=MAX_CSR_BYTES)] | None = None
    # The newest token-signing key the tserver knows (-1: none): the leader sends newer public halves.
    tsk_seq: int = -1
    # The tserver is quiescing (handing its leaderships away): the auto-rebalancer leaves it alone.
    quiescing: bool = False

    def __post_init__(self) -> None:
        self.ts.check()
        if self.report is not None:
            self.report.check()

    @property
    def uuid(self) -> str:
        return self.ts.uuid


class TabletToDelete(Message, frozen=True):
    tablet_id: str
    reason: str
    delete_type: str


class TSHeartbeatResponse(Message, frozen=True):
    """``leader`` false: a follower master answered, and acted on nothing but the registration."""

    leader: bool
    master_uuid: str
    needs_reregister: bool = False
    needs_full_report: bool = False
    tablets_to_delete: list[TabletToDelete] = msgspec.field(default_factory=list)
    # Tables at their disk size or row count limit: their tablets refuse inserts and updates. Sent only
    # while the limits are enforced (absent: none is limited).
    write_limited_tables: list[str] | Unset = UNSET
    # The signed certificate for the request's ``csr_pem`` and the CA certificate it chains to (PEM).
    cert_pem: bytes | Unset = UNSET
    ca_cert_pem: bytes | Unset = UNSET
    # The public halves of the token-signing keys, when the tserver's tsk_seq is behind the leader's.
    tsks: list[dict[str, Any]] | Unset = UNSET
    # The leader's answer: the RPC address of every master in the catalog's Raft config, so tservers
    # heartbeat masters added (and stop heartbeating masters removed) without a restart.
    master_addresses: list[str] | Unset = UNSET


# --- DDL ---------------------------------------------------------------------------------------------------


def _check_request_id(rid: object) -> None:
    """A DDL may carry a client ``request_id``: a retry with it gets the original answer. Typed ``Any`` on
    the messages so that any wrong value, of any type, gets this one explanation."""
    if rid is not None and not (isinstance(rid, str) and REQUEST_ID_RE.fullmatch(rid)):
        shown = repr(rid) if len(repr(rid)) <= 60 else f"{repr(rid)[:57]}... ({len(repr(rid))} characters)"
        raise KuduInvalidArgument(
            f"'request_id' must be a string of 1-{MAX_REQUEST_ID_LEN} printable ASCII characters without "
            f"spaces (e.g. '<client uuid>:<sequence>'), got {shown}",
            {"field": "request_id"},
        )


class CreateTableRequest(Message, frozen=True):
    name: str
    schema: dict[str, Any]
    partition_schema: dict[str, Any] | None = None
    num_replicas: int = 3
    range_bounds: list[Any] | None = None
    split_rows: list[Any] | None = None
    owner: str | None = None
    comment: str | None = None
    request_id: Any = None

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)


class TableIdResponse(Message, frozen=True):
    """The table a DDL acted on (CreateTable, DeleteTable)."""

    table_id: str


class TableRef(Message, frozen=True):
    """A table named by ``table_id``, or else by ``name``."""

    name: str | None = None
    table_id: str | None = None


class DeleteTableRequest(Message, frozen=True):
    """``reserve_seconds``: keep the table SOFT_DELETED (recallable) this long; 0 deletes it at once; absent:
    the master's ``--default_deleted_table_reserve_seconds`` decides (Kudu's DeleteTable/SoftDeleteTable)."""

    name: str | None = None
    table_id: str | None = None
    reserve_seconds: Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)] | None = None
    request_id: Any = None

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)


class RecallDeletedTableRequest(Message, frozen=True):
    """Bring a SOFT_DELETED table back, under ``new_table_name`` if given (else its own name)."""

    table_id: Id
    new_table_name: str | None = None
    request_id: Any = None

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)


class AlterTableRequest(Message, frozen=True):
    name: str | None = None
    table_id: str | None = None
    new_name: str | None = None
    new_owner: str | Unset | None = UNSET
    new_comment: str | Unset | None = UNSET
    alter_schema_steps: list[Any] | None = None
    # Kudu's per-table write limits: -1 removes the limit; they cannot be combined with other alterations.
    disk_size_limit: int | None = None
    row_count_limit: int | None = None
    # Kudu's set_replication_factor: the master's re-replication then adds or trims replicas to match.
    num_replicas: int | None = None
    request_id: Any = None

    def __post_init__(self) -> None:
        _check_request_id(self.request_id)


class AlterTableResponse(Message, frozen=True):
    table_id: str
    schema_version: int


class IsDdlDoneRequest(Message, frozen=True):
    """IsCreateTableDone / IsAlterTableDone: held up to ``wait_ms`` for the DDL to finish."""

    name: str | None = None
    table_id: str | None = None
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_DDL_WAIT_MS)] = 0


class IsCreateTableDoneResponse(Message, frozen=True):
    done: bool
    state: str
    table_id: str


class IsAlterTableDoneResponse(Message, frozen=True):
    done: bool
    state: str
    schema_version: int


# --- catalog reads -----------------------------------------------------------------------------------------


class ListTablesRequest(Message, frozen=True):
    """``show_soft_deleted``: list only the SOFT_DELETED tables (Kudu's ListTables flag), else only the others."""

    name_filter: str | None = None
    show_soft_deleted: bool = False


class TableEntry(Message, frozen=True):
    name: str
    table_id: str
    state: str


class ListTablesResponse(Message, frozen=True):
    tables: list[TableEntry]


class InFlightTable(Message, frozen=True):
    table_id: str
    name: str
    state: str
    num_tablets: int
    num_tablets_in_flight: int


class ListInFlightTablesResponse(Message, frozen=True):
    """Kudu's ListInFlightTables: tables being created or altered."""

    tables: list[InFlightTable]


class GetTableStatisticsResponse(Message, frozen=True):
    """Sums of the tablet leaders' last reported figures; -1 where a figure or a limit is unknown or unset."""

    table_id: str
    on_disk_size: int
    live_row_count: int
    disk_size_limit: int
    row_count_limit: int


class GetTableSchemaResponse(Message, frozen=True):
    table_id: str
    name: str
    schema: dict[str, Any]
    schema_version: int
    partition_schema: dict[str, Any]
    num_replicas: int
    owner: str | None
    comment: str | None
    create_table_done: bool
    # The caller's privileges on the table, signed by the leader master, for the tablet servers.
    authz_token: bytes | Unset = UNSET


class ReplicaLocation(Message, frozen=True):
    uuid: str
    rpc_address: str
    role: str


class TabletPartition(Message, frozen=True):
    """A tablet's slice of its table (``common.partition.Partition`` on the wire)."""

    hash_buckets: tuple[int, ...]
    range_key_start: bytes
    range_key_end: bytes
    partition_key_start: bytes
    partition_key_end: bytes

    @classmethod
    def of(cls, p: Partition) -> TabletPartition:
        return cls(
            tuple(p.hash_buckets), p.range_key_start, p.range_key_end, p.partition_key_start, p.partition_key_end
        )


class TabletLocation(Message, frozen=True):
    tablet_id: str
    partition: TabletPartition
    state: str
    replicas: list[ReplicaLocation]


class GetTableLocationsRequest(TableRef, frozen=True):
    partition_key_start: bytes | None = None
    partition_key_end: bytes | None = None
    max_returned: Annotated[int, msgspec.Meta(ge=1)] = 1000


class GetTableLocationsResponse(Message, frozen=True):
    table_id: str
    tablets: list[TabletLocation]
    schema_version: int


class GetTabletLocationsRequest(Message, frozen=True):
    tablet_ids: list[str]


class GetTabletLocationsResponse(Message, frozen=True):
    tablets: list[TabletLocation]
    missing: list[str]


# --- cluster membership ------------------------------------------------------------------------------------


class MasterEntry(Message, frozen=True):
    uuid: str | None
    rpc_address: str
    role: str  # LEADER, FOLLOWER, LEARNER (a master being added) or UNKNOWN (no catalog here)
    member_type: str | Unset = UNSET  # VOTER or NON_VOTER, as Kudu's ListMasters


class ConnectToMasterResponse(Message, frozen=True):
    """Leader discovery: any master answers with what it knows."""

    leader: bool
    uuid: str
    leader_uuid: str | None
    leader_address: str | None
    term: int
    masters: list[MasterEntry]
    # The leader's answer to a caller authenticated by a JWT or a certificate: a signed authn token to show
    # tablet servers and masters from now on, and when it expires (unix seconds).
    authn_token: bytes | Unset = UNSET
    authn_token_expire_unix: float | Unset = UNSET


class ListMastersResponse(Message, frozen=True):
    masters: list[MasterEntry]


class ListTabletServersResponse(Message, frozen=True):
    """Every registered tserver, live or dead (the ``/api/v1/tservers`` map of each)."""

    servers: list[dict[str, Any]]


class ChangeTServerStateRequest(Message, frozen=True):
    """Put a tserver in maintenance mode or take it out (Kudu's ``kudu tserver state``).

    ``allow_missing_tserver``: accept a uuid no master has heard from (a server not started yet)."""

    uuid: Id
    change: Literal["ENTER_MAINTENANCE_MODE", "EXIT_MAINTENANCE_MODE"]
    allow_missing_tserver: bool = False


class UnregisterTServerRequest(Message, frozen=True):
    """Forget a tablet server (Kudu's ``kudu tserver unregister``); ``force_unregister_live_tserver``: even one
    that still heartbeats (it registers again with its next heartbeat)."""

    uuid: Id
    force_unregister_live_tserver: bool = False


class UnregisterTServerResponse(Message, frozen=True):
    uuid: str
    unregistered: bool


class ChangeTServerStateResponse(Message, frozen=True):
    """``changed``: False when the tserver already was in the state asked for."""

    uuid: str
    state: str
    changed: bool


# --- master membership --------------------------------------------------------------------------------------


def _check_address(value: str, field: str) -> None:
    try:
        host, port = parse_hostport(value)
    except ValueError as e:
        raise KuduInvalidArgument(f"'{field}': {e}", {"field": field}) from None
    if not host or port <= 0:
        raise KuduInvalidArgument(f"'{field}': expected host:port with a port, got {value!r}", {"field": field})


class AddMasterRequest(Message, frozen=True):
    """Add the master serving at ``rpc_address`` (started with an empty data directory) to the catalog's
    Raft config: as a learner, filled by a copy of the catalog, promoted to voter once caught up."""

    rpc_address: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS)]

    def __post_init__(self) -> None:
        _check_address(self.rpc_address, "rpc_address")


class AddMasterResponse(Message, frozen=True):
    """``already_present``: that master was a member already (the add is idempotent); ``member_type`` is
    what it is now (NON_VOTER until its copy has caught up and the leader promotes it)."""

    uuid: str
    rpc_address: str
    member_type: str
    config_index: int
    already_present: bool = False


class RemoveMasterRequest(Message, frozen=True):
    """Remove the master at ``rpc_address`` (``master_uuid`` tells apart masters sharing an address)."""

    rpc_address: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS)]
    master_uuid: Id | None = None

    def __post_init__(self) -> None:
        _check_address(self.rpc_address, "rpc_address")


class RemoveMasterResponse(Message, frozen=True):
    uuid: str
    rpc_address: str
    config_index: int


class StartCatalogCopyRequest(Message, frozen=True):
    """Sent by the leader master to a master it added whose catalog is missing or behind its log: copy
    the catalog from ``source_address`` (the leader, in ``caller_term``)."""

    source_uuid: Id
    source_address: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS)]
    caller_term: NonNegInt

    def __post_init__(self) -> None:
        _check_address(self.source_address, "source_address")


class StartCatalogCopyResponse(Message, frozen=True):
    started: bool
    reason: str | Unset = UNSET
