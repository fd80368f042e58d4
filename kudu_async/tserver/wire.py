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
record). Entries without these elements decode with none.

A write entry is ``0xC1`` (a byte msgpack never writes), the length of a msgpack header (4 bytes, big
endian), the header (the list above without the rows), zero bytes up to a multiple of 64 (Arrow's
alignment: a bytes object's data is 16-byte aligned, so the rows' buffers are too) and then the rows'
IPC stream as is: decoding
reads the rows in place (zero copy), so a replica's MemRowSet holds the same memory as its Raft log's
copy of the entry, and reading a header never copies the rows. Every other entry (an alter) is one
msgpack list.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.row_conversion import (
    VALID_OP_TYPES,
    batch_ipc_buffer,
    decode_row_operations,
    encode_op_types,
)
from kudu_async.tablet.ops import OpType, RowError, WriteOp, WriteResult
from kudu_async.tserver.result_tracker import RequestId

assert set(VALID_OP_TYPES) == {int(t) for t in OpType}, "wire op numbers must match tablet.ops.OpType"

ENTRY_WRITE = "w"
ENTRY_ALTER = "a"
_ROWS_AFTER_HEADER = 0xC1  # first byte of a write entry whose rows follow its header
_HEADER_LEN = struct.Struct(">I")
_ROWS_ALIGN = 64


def _rows_start(header_len: int) -> int:
    end = 1 + _HEADER_LEN.size + header_len
    return -(-end // _ROWS_ALIGN) * _ROWS_ALIGN


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


def decode_write_op(rows_ipc: Any, op_types: Any, set_columns: Any) -> WriteOp:
    rows, types, matrix = decode_row_operations(rows_ipc, op_types, set_columns)
    fixed = isinstance(rows_ipc, bytes) or (isinstance(rows_ipc, memoryview) and rows_ipc.readonly)
    return WriteOp(types, rows, matrix, rows_ipc if fixed else None)


def encode_write_entry(
    timestamp: int,
    schema_version: int,
    op: WriteOp,
    request_id: RequestId | None = None,
    outcome: WriteResult | None = None,
) -> bytes:
    types, set_cols = encode_op_types(op.rows.num_rows, op.op_types, op.set_columns)
    item: list[Any] = [ENTRY_WRITE, timestamp, schema_version, None, types, set_cols]
    if request_id is not None:
        item.append([request_id.client_id, request_id.seq_no, request_id.first_incomplete_seq_no])
        if outcome is not None:
            item.append(
                [
                    [[e.row_index, e.code, e.message] for e in outcome.row_errors],
                    outcome.inserted,
                    outcome.updated,
                    outcome.deleted,
                    outcome.ignored,
                ]
            )
    header = msgpack.packb(item)
    pad = bytes(_rows_start(len(header)) - 1 - _HEADER_LEN.size - len(header))
    rows = op.rows_ipc if op.rows_ipc is not None else batch_ipc_buffer(op.rows)
    return b"".join((bytes((_ROWS_AFTER_HEADER,)), _HEADER_LEN.pack(len(header)), header, pad, rows))


def _write_parts(payload: bytes) -> tuple[list[Any], Any]:
    """(header list, rows IPC as a view of ``payload``) of a write entry; other entries come back whole,
    with no rows."""
    if payload[:1] != bytes((_ROWS_AFTER_HEADER,)):
        whole = msgpack.unpackb(payload, raw=False)
        if not isinstance(whole, list) or not whole:
            raise KuduInvalidArgument("tablet log entry is not a list")
        if whole[0] == ENTRY_WRITE:
            raise KuduInvalidArgument("tablet log write entry does not start with its rows-after-header byte 0xC1")
        return whole, None
    if len(payload) < 1 + _HEADER_LEN.size:
        raise KuduInvalidArgument(f"tablet log entry of {len(payload)} bytes is shorter than its header")
    (n,) = _HEADER_LEN.unpack_from(payload, 1)
    start, rows = 1 + _HEADER_LEN.size, _rows_start(n)
    if rows > len(payload):
        raise KuduInvalidArgument(f"tablet log entry header of {n} bytes overruns its {len(payload)} bytes")
    item = msgpack.unpackb(memoryview(payload)[start : start + n], raw=False)
    if not isinstance(item, list) or len(item) < 6 or item[0] != ENTRY_WRITE:
        raise KuduInvalidArgument("tablet log entry with rows after its header is not a write")
    return item, memoryview(payload)[rows:]


def encode_alter_entry(schema: dict[str, Any], version: int) -> bytes:
    packed: bytes = msgpack.packb([ENTRY_ALTER, schema, version])  # msgpack ships no type hints
    return packed


def decode_entry(payload: bytes) -> WriteEntry | AlterEntry:
    """Decode a tablet WAL entry; anything else is corruption of the replica's log."""
    item, rows = _write_parts(payload)
    if item[0] == ENTRY_WRITE:
        _, ts, version, _, types, set_cols, *rest = item
        rid, outcome = _tracking(int(ts), rest)
        return WriteEntry(int(ts), int(version), decode_write_op(rows, types, set_cols), rid, outcome)
    if item[0] == ENTRY_ALTER:
        return AlterEntry(dict(item[1]), int(item[2]))
    raise KuduInvalidArgument(f"unknown tablet log entry type {item[0]!r}")


def decode_entry_header(payload: bytes) -> WriteHeader | AlterEntry:
    """Like :func:`decode_entry` but leaves a write's rows undecoded."""
    item, _ = _write_parts(payload)
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
    return rid, WriteResult(
        ts,
        0,
        [RowError(int(i), str(c), str(m)) for i, c, m in errors],
        int(inserted),
        int(updated),
        int(deleted),
        int(ignored),
    )
