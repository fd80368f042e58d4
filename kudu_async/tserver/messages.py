"""The ``TabletServer`` RPC protocol: every request and response message of the service.

Field names are the wire's map keys. Bounds that the decoder checks live in the field types; checks that
need the tablet (a column in its schema, its schema version) stay in the handlers.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.consensus.raft_manager import GROUP_ID_RE
from kudu_async.rpc.messages import UNSET, Message, NonEmptyStr, NonNegInt, Unset
from kudu_async.security.tokens import MAX_TOKEN_BYTES
from kudu_async.tserver.result_tracker import MAX_CLIENT_ID_LEN, RequestId

MAX_BATCH_BYTES = 16 * 1024 * 1024
GroupId = Annotated[str, msgspec.Meta(pattern=GROUP_ID_RE.pattern)]  # a tablet id names its directory

# --- CreateTablet / DeleteTablet ---------------------------------------------------------------------------


class CreateTabletRequest(Message, frozen=True):
    """A new replica of ``tablet_id``; ``peers`` (uuid -> RPC address) is its first Raft config, and
    ``first_leader`` the one that campaigns at once. That this server is one of the peers is checked by
    the tablet manager."""

    tablet_id: GroupId
    table_id: NonEmptyStr
    schema: dict[str, Any]
    peers: Annotated[dict[str, str], msgspec.Meta(min_length=1)]
    table_name: str = ""
    schema_version: NonNegInt = 0
    first_leader: str | None = None
    partition: dict[str, Any] | None = None
    partition_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.first_leader is not None and self.first_leader not in self.peers:
            raise KuduInvalidArgument("'first_leader' must be one of 'peers'", {"field": "first_leader"})


class CreateTabletResponse(Message, frozen=True):
    tablet_id: str
    created: bool


class DeleteTabletRequest(Message, frozen=True):
    tablet_id: NonEmptyStr
    delete_type: NonEmptyStr = "DELETED"
    cas_config_index: int | None = None
    reason: Annotated[str, msgspec.Meta(max_length=1024)] | None = None  # why, for the server's log (Kudu's)


class DeleteTabletResponse(Message, frozen=True):
    tablet_id: str
    deleted: bool


# --- Write ------------------------------------------------------------------------------------------------


class WriteRequestId(Message, frozen=True, forbid_unknown_fields=True):
    """Exactly-once identity of a write: the client, its sequence number, its oldest unanswered one."""

    client_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CLIENT_ID_LEN)]
    seq_no: NonNegInt
    first_incomplete_seq_no: NonNegInt

    def __post_init__(self) -> None:
        if not self.client_id.isascii() or not self.client_id.isprintable():
            raise KuduInvalidArgument(
                f"'request_id.client_id' must be printable ASCII characters, got {self.client_id!r:.80}",
                {"field": "request_id.client_id"},
            )
        if self.first_incomplete_seq_no > self.seq_no + 1:
            raise KuduInvalidArgument(
                f"'request_id.first_incomplete_seq_no' ({self.first_incomplete_seq_no}) must be at most seq_no + 1"
                f" ({self.seq_no + 1})",
                {"field": "request_id.first_incomplete_seq_no"},
            )

    def to_request_id(self) -> RequestId:
        return RequestId(self.client_id, self.seq_no, self.first_incomplete_seq_no)


class WriteRequest(Message, frozen=True):
    """Row operations for one tablet. ``rows`` is an Arrow IPC stream, decoded as a view of the request body:
    the tablet's WAL entry holds these same bytes."""

    tablet_id: NonEmptyStr
    rows: memoryview
    op_types: bytes
    set_columns: bytes | None = None
    schema_version: NonNegInt = 0
    request_id: WriteRequestId | None = None
    propagated_timestamp: NonNegInt | None = None
    # The table's authz token from the leader master (checked when --tserver-enforce-access-control).
    authz_token: Annotated[bytes, msgspec.Meta(max_length=MAX_TOKEN_BYTES)] | None = None


class RowErrorMsg(Message, frozen=True):
    row_index: int
    code: str
    message: str


class WriteResponse(Message, frozen=True):
    timestamp: int
    row_errors: list[RowErrorMsg]
    inserted: int
    updated: int
    deleted: int
    ignored: int


# --- Scan -------------------------------------------------------------------------------------------------


class ScanRequest(Message, frozen=True):
    """A new scan (``tablet_id`` and what to read) or the next batch of an open one (``scanner_id``)."""

    tablet_id: NonEmptyStr | None = None
    scanner_id: str | None = None
    close: bool = False
    projection: list[str] | None = None
    predicates: list[dict[str, Any]] | None = None
    read_mode: NonEmptyStr = "READ_LATEST"
    snapshot_ts: NonNegInt | None = None
    lower_key: bytes | None = None
    upper_key: bytes | None = None
    resume_after_key: bytes | None = None
    limit: NonNegInt | None = None
    batch_bytes: Annotated[int, msgspec.Meta(ge=1, le=MAX_BATCH_BYTES)] | None = None
    ordered: bool = False
    schema_version: int | None = None
    # The schema version the caller knows the table at: a replica that has not applied that alter yet
    # answers SERVICE_UNAVAILABLE (retried elsewhere or later) instead of refusing a new column.
    min_schema_version: NonNegInt | None = None
    propagated_timestamp: NonNegInt | None = None
    authz_token: Annotated[bytes, msgspec.Meta(max_length=MAX_TOKEN_BYTES)] | None = None


class ScanResponse(Message, frozen=True):
    """One batch as Arrow IPC bytes (``data``); ``scanner_id`` names the open scanner while ``has_more``."""

    scanner_id: str | None
    data: bytes | None
    rows: int
    has_more: bool
    last_key: bytes | Unset | None = UNSET
    snapshot_ts: int | Unset | None = UNSET
    schema_version: int | Unset = UNSET
    # What this call cost the server, by the names of Kudu's ResourceMetricsPB (the client sums them)
    resource_metrics: dict[str, int] | Unset = UNSET


class SplitKeyRangeRequest(Message, frozen=True):
    """Kudu's SplitKeyRange: the tablet's ``[start_primary_key, stop_primary_key)`` (encoded keys, absent or
    empty: unbounded) in chunks of about ``target_chunk_size_bytes``, sized by ``columns`` when given."""

    tablet_id: NonEmptyStr
    target_chunk_size_bytes: Annotated[int, msgspec.Meta(ge=1)]
    start_primary_key: bytes | None = None
    stop_primary_key: bytes | None = None
    columns: list[str] | None = None
    authz_token: Annotated[bytes, msgspec.Meta(max_length=MAX_TOKEN_BYTES)] | None = None


class KeyRangeMsg(Message, frozen=True):
    """Kudu's KeyRangePB: ``None`` bounds are the tablet's own ends."""

    start_primary_key: bytes | None
    stop_primary_key: bytes | None
    size_bytes_estimates: int


class SplitKeyRangeResponse(Message, frozen=True):
    ranges: list[KeyRangeMsg]


class ScannerKeepAliveRequest(Message, frozen=True):
    scanner_id: NonEmptyStr


class ScannerKeepAliveResponse(Message, frozen=True):
    pass


# --- tablet inspection and maintenance ---------------------------------------------------------------------


class ChecksumRequest(Message, frozen=True):
    tablet_id: NonEmptyStr
    snapshot_ts: NonNegInt | None = None
    authz_token: Annotated[bytes, msgspec.Meta(max_length=MAX_TOKEN_BYTES)] | None = None


class ChecksumResponse(Message, frozen=True):
    rows: int
    checksum: int
    snapshot_ts: int


class ListTabletsRequest(Message, frozen=True):
    need_schema_info: bool = False  # Kudu's field: each open replica's schema too (``remote_replica list``)


class ListTabletsResponse(Message, frozen=True):
    tablets: list[dict[str, Any]]


class GetSafeTimeRequest(Message, frozen=True):
    tablet_id: NonEmptyStr
    timestamp: NonNegInt


class GetSafeTimeResponse(Message, frozen=True):
    index: int


class StartTabletCopyRequest(Message, frozen=True):
    tablet_id: NonEmptyStr
    source_uuid: NonEmptyStr
    source_address: NonEmptyStr
    caller_term: NonNegInt = 0


class StartTabletCopyResponse(Message, frozen=True):
    tablet_id: str
    started: bool
    reason: str | Unset = UNSET


class AlterSchemaRequest(Message, frozen=True):
    tablet_id: NonEmptyStr
    schema: dict[str, Any]
    schema_version: NonNegInt


class AlterSchemaResponse(Message, frozen=True):
    schema_version: int


class FlushTabletRequest(Message, frozen=True):
    tablet_id: NonEmptyStr


class FlushTabletResponse(Message, frozen=True):
    last_flushed_log_index: int


class GetTabletStatsRequest(Message, frozen=True):
    tablet_id: NonEmptyStr


class GetTabletStatsResponse(Message, frozen=True):
    tablet_id: str
    on_disk_data_bytes: int
    on_disk_wal_bytes: int
    memrowset_bytes: int
    delta_memstore_bytes: int
    memrowset_rows: int
    disk_rowsets: int


class QuiesceRequest(Message, frozen=True):
    """``start``: move leaderships away, stand for no election, refuse new scans; ``stop``: undo it;
    ``status``: only report."""

    action: Literal["start", "stop", "status"]


class QuiesceResponse(Message, frozen=True):
    quiescing: bool
    num_leaders: int
    num_active_scanners: int
    leader_transfers_started: int
