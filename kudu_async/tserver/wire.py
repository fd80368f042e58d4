"""Wire and WAL forms of tablet operations.

A Write travels as Arrow IPC (rows, in schema column order) plus two small byte strings: one op type
per row (int8) and, for partial updates, a rows x columns bitmap of the cells a row sets. The WAL entry
is the same bytes plus the timestamp the leader assigned and the schema version the rows were built
for, so followers and bootstrap decode exactly what the leader prepared, without per-row Python. A write
sent with a request id carries it as a last, optional element ``[client_id, seq_no,
first_incomplete_seq_no]``, so every replica's result tracker learns the write's result when it applies
the entry; entries written before (or without) it have one element fewer and decode with no id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.row_conversion import VALID_OP_TYPES, decode_row_operations, encode_row_operations
from kudu_async.tablet.ops import OpType, WriteOp
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


def encode_write_entry(timestamp: int, schema_version: int, op: WriteOp, request_id: RequestId | None = None) -> bytes:
    rows, types, set_cols = encode_write_op(op)
    item: list[Any] = [ENTRY_WRITE, timestamp, schema_version, rows, types, set_cols]
    if request_id is not None:
        item.append([request_id.client_id, request_id.seq_no, request_id.first_incomplete_seq_no])
    return msgpack.packb(item)


def encode_alter_entry(schema: dict[str, Any], version: int) -> bytes:
    return msgpack.packb([ENTRY_ALTER, schema, version])


def decode_entry(payload: bytes) -> WriteEntry | AlterEntry:
    """Decode a tablet WAL entry; anything else is corruption of the replica's log."""
    item = msgpack.unpackb(payload, raw=False)
    if item[0] == ENTRY_WRITE:
        _, ts, version, rows, types, set_cols, *rest = item
        rid = None
        if rest and rest[0] is not None:
            cid, seq, first = rest[0]
            rid = RequestId(str(cid), int(seq), int(first))
        return WriteEntry(int(ts), int(version), decode_write_op(rows, types, set_cols), rid)
    if item[0] == ENTRY_ALTER:
        return AlterEntry(dict(item[1]), int(item[2]))
    raise KuduInvalidArgument(f"unknown tablet log entry type {item[0]!r}")
