"""The Write wire form and the tablet WAL entries: round trips and clear errors for bad input."""

from __future__ import annotations

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.row_conversion import decode_row_operations, encode_row_operations
from kudu_async.tablet.ops import OpType, RowError, WriteOp, WriteResult
from kudu_async.tserver.result_tracker import RequestId
from kudu_async.tserver.wire import (
    AlterEntry,
    WriteEntry,
    WriteHeader,
    decode_entry,
    decode_entry_header,
    encode_alter_entry,
    encode_write_entry,
)


def _batch(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"k": pa.array(range(n), pa.int64()), "v": pa.array([f"x{i}" for i in range(n)])})


def test_row_operations_round_trip_with_partial_update_bitmap() -> None:
    b = _batch(5)
    cells = np.array([[True, i % 2 == 0] for i in range(5)])
    enc = encode_row_operations(b, [OpType.UPDATE] * 5, cells)
    rows, types, matrix = decode_row_operations(enc["rows"], enc["op_types"], enc["set_columns"])
    assert rows.equals(b)
    assert types.tolist() == [2] * 5
    assert matrix is not None and (matrix == cells).all()


@pytest.mark.parametrize(
    ("rows", "types", "bits", "message"),
    [
        (b"garbage", b"\x01", None, "not a valid Arrow IPC"),
        (None, b"\x01", None, "Arrow IPC stream bytes"),
        ("ok", b"\x01\x01", None, "2 op types for 1 rows"),
        ("ok", b"\x63", None, "unknown row operation types \\[99\\]"),
        ("ok", b"\x01", b"\x00\x00\x00", "bits for 2 cells"),
        ("ok", [1], None, "'op_types' must be bytes"),
    ],
)
def test_bad_row_operations_are_named(rows: object, types: object, bits: object, message: str) -> None:
    good = encode_row_operations(_batch(1), [1])
    with pytest.raises(KuduInvalidArgument, match=message):
        decode_row_operations(good["rows"] if rows == "ok" else rows, types, bits)


def test_a_write_entry_carries_the_rows_ipc_bytes_it_is_given() -> None:
    from kudu_async.common.row_conversion import batch_to_ipc
    from kudu_async.tserver.wire import decode_write_op

    ipc = batch_to_ipc(_batch(4))
    op = decode_write_op(ipc, bytes([1] * 4), None)
    assert op.rows_ipc is ipc
    raw = encode_write_entry(7, 1, op)
    assert raw.endswith(ipc)
    entry = decode_entry(raw)
    assert isinstance(entry, WriteEntry) and entry.op.rows.equals(_batch(4))
    assert decode_write_op(bytearray(ipc), bytes([1] * 4), None).rows_ipc is None  # may change: not kept


def test_wal_entries_round_trip() -> None:
    op = WriteOp(np.array([1, 5, 3]), _batch(3), None)
    entry = decode_entry(encode_write_entry(1234, 2, op))
    assert isinstance(entry, WriteEntry)
    assert (entry.timestamp, entry.schema_version) == (1234, 2)
    assert entry.request_id is None
    assert entry.op.rows.equals(op.rows) and list(entry.op.op_types) == [1, 5, 3]
    alter = decode_entry(encode_alter_entry({"columns": [], "num_key_columns": 0}, 3))
    assert alter == AlterEntry({"columns": [], "num_key_columns": 0}, 3)


def test_write_entries_carry_the_request_id() -> None:
    op = WriteOp(np.array([1, 1]), _batch(2), None)
    rid = RequestId("0123abcd", 42, 40)
    entry = decode_entry(encode_write_entry(99, 1, op, rid))
    assert isinstance(entry, WriteEntry)
    assert entry.request_id == rid and entry.timestamp == 99 and entry.op.rows.equals(op.rows)


def test_a_write_entry_with_its_rows_inside_the_msgpack_list_is_refused_by_name() -> None:
    d = encode_row_operations(_batch(2), [1, 2])
    whole = msgpack.packb(["w", 5, 0, d["rows"], d["op_types"], d["set_columns"]])
    for decode in (decode_entry, decode_entry_header):
        with pytest.raises(KuduInvalidArgument, match="does not start with its rows-after-header byte"):
            decode(whole)


def test_write_entries_hold_their_rows_after_the_header_read_in_place() -> None:
    """The current form: rows decode as views of the entry (no copy) at a 64-byte aligned offset, the
    header decodes without them, and a truncated or mangled entry is refused by name."""
    op = WriteOp(np.array([1] * 100), _batch(100), None)
    payload = encode_write_entry(7, 1, op, RequestId("c", 2, 1))
    assert payload[0] == 0xC1
    entry = decode_entry(payload)
    assert isinstance(entry, WriteEntry) and entry.op.rows.equals(op.rows)
    base = pa.py_buffer(payload).address
    for col in entry.op.rows.columns:
        for buf in col.buffers():
            if buf is not None:
                assert base <= buf.address < base + len(payload)  # inside the entry: read in place
                assert (buf.address - base) % 8 == 0
    assert decode_entry_header(payload) == WriteHeader(7, 1, RequestId("c", 2, 1), None)
    with pytest.raises(KuduInvalidArgument, match="shorter than its header"):
        decode_entry(payload[:3])
    with pytest.raises(KuduInvalidArgument, match="overruns"):
        decode_entry(payload[:1] + (10**6).to_bytes(4, "big") + payload[5:])
    with pytest.raises(KuduInvalidArgument, match="not a valid Arrow IPC stream"):
        decode_entry(payload[:-40])


def test_tracked_write_entries_carry_the_decided_result_and_decode_without_their_rows() -> None:
    """What a restarted replica recalls instead of applying a flushed write again."""
    op = WriteOp(np.array([1, 1, 2]), _batch(3), None)
    rid = RequestId("c", 7, 7)
    outcome = WriteResult(99, 0, [RowError(1, "ALREADY_PRESENT", "key already present")], inserted=1, updated=1)
    payload = encode_write_entry(99, 4, op, rid, outcome)
    entry = decode_entry(payload)
    assert isinstance(entry, WriteEntry) and entry.outcome == outcome and entry.request_id == rid
    assert decode_entry_header(payload) == WriteHeader(99, 4, rid, outcome)
    no_result = decode_entry_header(encode_write_entry(99, 4, op, rid))  # tracked, no decided result given
    assert no_result == WriteHeader(99, 4, rid, None)
    assert decode_entry_header(encode_alter_entry({"columns": []}, 5)) == AlterEntry({"columns": []}, 5)
    with pytest.raises(KuduInvalidArgument, match="unknown tablet log entry type"):
        decode_entry_header(msgpack.packb(["x"]))
