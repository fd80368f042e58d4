"""Wire and WAL forms of tablet operations.

A Write travels as Arrow IPC (rows, in schema column order) plus two small byte strings: one op type
per row (int8) and, for partial updates, a rows x columns bitmap of the cells a row sets. The WAL entry
is the same bytes plus the timestamp the leader assigned and the schema version the rows were built
for, so followers and bootstrap decode exactly what the leader prepared, without per-row Python. A write
sent with a request id carries it as an optional element ``[client_id, seq_no,
first_incomplete_seq_no]``, so every replica's result tracker learns the write's result when it applies
the entry, and then the result the leader decided at prepare, ``[[[row_index, code, message], ...],
inserted, updated, deleted, ignored]``: a replica that restarts with the write already in its files does
not apply it again, and recalls that result from its log instead (Kudu keeps it in the WAL's commit
record). Entries written before (or without) these elements decode with none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.row_conversion import VALID_OP_TYPES, decode_row_operations, encode_row_operations
from kudu_async.tablet.ops import OpType, RowError, WriteOp, WriteResult
from kudu_async.tserver.result_tracker import RequestId

assert set(VALID_OP_TYPES) == {int(t) for t in OpType}, "wire op numbers must match tablet.ops.OpType"

ENTRY_WRITE = "w"
ENTRY_ALTER = "a"


@dataclass(frozen=True)
class WriteEntry:
    """A write as the WAL holds it."""

    timestamp: int
    schema_version: int
    op: WriteOp
    request_id: RequestId | None = None
    outcome: WriteResult | None = None  # as decided at prepare; ``log_index`` 0


@dataclass(frozen=True)
class WriteHeader:
    """A write entry without its rows (decoded without touching them): enough to recall its result."""

    timestamp: int
    schema_version: int
    request_id: RequestId | None
    outcome: WriteResult | None


@dataclass(frozen=True)
class AlterEntry:
    """An AlterSchema as the WAL holds it."""

    schema: dict[str, Any]
    version: int


def encode_write_op(op: WriteOp) -> tuple[bytes, bytes, bytes | None]:
    """(rows IPC, op types int8 bytes, set-columns bitmap bytes or None)."""
    types = op.op_types.to_numpy(zero_copy_only=False) if isinstance(op.op_types, pa.Array) else op.op_types
    d = encode_row_operations(op.rows, types, op.set_columns)
    return d["rows"], d["op_types"], d["set_columns"]


def decode_write_op(rows_ipc: Any, op_types: Any, set_columns: Any) -> WriteOp:
    rows, types, matrix = decode_row_operations(rows_ipc, op_types, set_columns)
    return WriteOp(types, rows, matrix)


def encode_write_entry(timestamp: int, schema_version: int, op: WriteOp, request_id: RequestId | None = None,
                       outcome: WriteResult | None = None) -> bytes:
    rows, types, set_cols = encode_write_op(op)
    item: list[Any] = [ENTRY_WRITE, timestamp, schema_version, rows, types, set_cols]
    if request_id is not None:
        item.append([request_id.client_id, request_id.seq_no, request_id.first_incomplete_seq_no])
        if outcome is not None:
            item.append([[[e.row_index, e.code, e.message] for e in outcome.row_errors], outcome.inserted,
                         outcome.updated, outcome.deleted, outcome.ignored])
    return msgpack.packb(item)


def encode_alter_entry(schema: dict[str, Any], version: int) -> bytes:
    return msgpack.packb([ENTRY_ALTER, schema, version])


def decode_entry(payload: bytes) -> WriteEntry | AlterEntry:
    """Decode a tablet WAL entry; anything else is corruption of the replica's log."""
    item = msgpack.unpackb(payload, raw=False)
    if item[0] == ENTRY_WRITE:
        _, ts, version, rows, types, set_cols, *rest = item
        rid, outcome = _tracking(int(ts), rest)
        return WriteEntry(int(ts), int(version), decode_write_op(rows, types, set_cols), rid, outcome)
    if item[0] == ENTRY_ALTER:
        return AlterEntry(dict(item[1]), int(item[2]))
    raise KuduInvalidArgument(f"unknown tablet log entry type {item[0]!r}")


def decode_entry_header(payload: bytes) -> WriteHeader | AlterEntry:
    """Like :func:`decode_entry` but leaves a write's rows undecoded."""
    item = msgpack.unpackb(payload, raw=False)
    if item[0] == ENTRY_WRITE:
        rid, outcome = _tracking(int(item[1]), item[6:])
        return WriteHeader(int(item[1]), int(item[2]), rid, outcome)
    if item[0] == ENTRY_ALTER:
        return AlterEntry(dict(item[1]), int(item[2]))
    raise KuduInvalidArgument(f"unknown tablet log entry type {item[0]!r}")


def _tracking(ts: int, rest: list[Any]) -> tuple[RequestId | None, WriteResult | None]:
    if not rest or rest[0] is None:
        return None, None
    cid, seq, first = rest[0]
    rid = RequestId(str(cid), int(seq), int(first))
    if len(rest) < 2 or rest[1] is None:
        return rid, None
    errors, inserted, updated, deleted, ignored = rest[1]
    return rid, WriteResult(ts, 0, [RowError(int(i), str(c), str(m)) for i, c, m in errors], int(inserted),
                            int(updated), int(deleted), int(ignored))
