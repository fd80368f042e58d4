"""Arrow record batches <-> Arrow IPC stream bytes and row tuples, and the row operations of a write.

The tuple form exists for the kudu-python style API (``read_all_tuples``); everything that moves data in
bulk (writes to the tablet, scan results on the wire) stays Arrow, and crosses the wire as IPC stream bytes.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kudu_async.common.errors import KuduInvalidArgument


def batch_to_tuples(batch: pa.RecordBatch | pa.Table) -> list[tuple[Any, ...]]:
    """Rows as tuples in column order (kudu-python's ``read_all_tuples`` shape)."""
    cols = [c.to_pylist() for c in batch.columns]
    return list(zip(*cols, strict=True)) if cols else []


def table_to_pandas(table: pa.Table, index: Any = None) -> Any:
    """A scan result as a pandas DataFrame; an array column holds a Python list per cell (None for NULL), as
    kudu-python's DataFrames do, rather than Arrow's numpy arrays. Only array columns go through Python
    objects, and pandas keeps object cells for them anyway."""
    df = table.to_pandas()
    for i, f in enumerate(table.schema):
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            df[f.name] = pd_series(table.column(i).to_pylist(), df.index)
    return df.set_index(index) if index is not None else df


def pd_series(values: list[Any], index: Any) -> Any:
    """An object-dtype pandas Series of ``values`` (lists stay lists, one per cell)."""
    pd = importlib.import_module("pandas")  # needed only by callers of to_pandas, who have it
    return pd.Series(values, index=index, dtype=object)


# Passed explicitly: without options, pyarrow reads two environment variables on every stream it writes
# (measurable on a point read's path).
_IPC_WRITE_OPTIONS = pa.ipc.IpcWriteOptions()


def batch_to_ipc(batch: pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch]) -> bytes:
    """Arrow IPC *stream* bytes of a batch, table or list of batches (all with one schema)."""
    data: bytes = batch_ipc_buffer(batch).to_pybytes()
    return data


def batch_ipc_buffer(batch: pa.RecordBatch | pa.Table | Sequence[pa.RecordBatch]) -> pa.Buffer:
    """:func:`batch_to_ipc` as the Arrow buffer it was written to (no copy into a bytes object)."""
    if isinstance(batch, pa.RecordBatch | pa.Table):
        batches: list[pa.RecordBatch] = [batch] if isinstance(batch, pa.RecordBatch) else batch.to_batches()
        schema = batch.schema
    else:
        batches = list(batch)
        if not batches:
            raise ValueError("batch_to_ipc needs at least one batch (or a Table) to know the schema")
        schema = batches[0].schema
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=_IPC_WRITE_OPTIONS) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue()


def ipc_to_table(data: bytes | memoryview | pa.Buffer) -> pa.Table:
    """IPC stream bytes as one Table (keeps the schema even with zero batches)."""
    with pa.ipc.open_stream(pa.py_buffer(data) if not isinstance(data, pa.Buffer) else data) as r:
        return r.read_all()


# --- row operations on the wire (Write RPC and the tablet WAL) ------------------------------------------


class OpType(enum.IntEnum):
    """Row operation types, numbered as Kudu's RowOperationsPB so wire values carry over."""

    INSERT = 1
    UPDATE = 2
    DELETE = 3
    UPSERT = 5
    INSERT_IGNORE = 10
    UPDATE_IGNORE = 11
    DELETE_IGNORE = 12
    UPSERT_IGNORE = 13


VALID_OP_TYPES = tuple(int(t) for t in OpType)
_OP_LUTS: dict[frozenset[int], np.ndarray] = {}


def op_mask(op_types: npt.ArrayLike, kinds: Iterable[int]) -> np.ndarray:
    """Bool mask of the rows whose op type is one of ``kinds``.

    A 256-entry lookup table indexed by the types: ``np.isin`` costs ~10x more on these arrays (it
    allocates and scans several times), and every write batch asks this a few times per replica.
    """
    key = frozenset(int(k) for k in kinds)
    lut = _OP_LUTS.get(key)
    if lut is None:
        lut = np.zeros(256, dtype=bool)
        lut[[k for k in key if 0 <= k < 256]] = True
        _OP_LUTS[key] = lut
    t = np.asarray(op_types)
    if t.dtype == np.int8 or t.dtype == np.uint8:
        return lut.take(t.view(np.uint8))  # negative int8 types land on 128..255: never a kind
    in_range = (t >= 0) & (t < 256)
    if in_range.all():
        return lut.take(t.astype(np.uint8))
    out = np.zeros(len(t), dtype=bool)
    out[in_range] = lut.take(t[in_range].astype(np.uint8))
    return out


def encode_row_operations(
    rows: pa.RecordBatch, op_types: Sequence[int] | np.ndarray, set_columns: np.ndarray | None = None
) -> dict[str, Any]:
    """``{"rows": IPC, "op_types": int8 bytes, "set_columns": packed bitmap | None}`` of a batch of
    operations: rows in schema column order, one op type per row, and for partial updates a rows x
    columns bool matrix of the cells each row sets."""
    types, bitmap = encode_op_types(rows.num_rows, op_types, set_columns)
    return {"rows": batch_to_ipc(rows), "op_types": types, "set_columns": bitmap}


def encode_op_types(
    num_rows: int, op_types: Sequence[int] | np.ndarray | pa.Array, set_columns: np.ndarray | None = None
) -> tuple[bytes, bytes | None]:
    """(int8 op type per row, packed set-columns bitmap or None): the row operations without their rows."""
    if isinstance(op_types, pa.Array):
        op_types = op_types.to_numpy(zero_copy_only=False)
    types = np.asarray(op_types, dtype=np.int8)
    if len(types) != num_rows:
        raise KuduInvalidArgument(f"{len(types)} op types for {num_rows} rows")
    bitmap = None if set_columns is None else np.packbits(np.asarray(set_columns, dtype=bool)).tobytes()
    return types.tobytes(), bitmap


def decode_row_operations(
    rows_ipc: Any, op_types: Any, set_columns: Any
) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray | None]:
    """Parse and check the shape of encoded row operations (values are checked later, per row)."""
    if not isinstance(rows_ipc, bytes | bytearray | memoryview):
        raise KuduInvalidArgument("'rows' must be Arrow IPC stream bytes")
    if not isinstance(op_types, bytes | bytearray):
        raise KuduInvalidArgument("'op_types' must be bytes: one int8 operation type per row")
    try:
        # read in place (zero copy) unless the bytes may change under the batch (a bytearray)
        mutable = isinstance(rows_ipc, bytearray) or (isinstance(rows_ipc, memoryview) and not rows_ipc.readonly)
        table = ipc_to_table(bytes(rows_ipc) if mutable else rows_ipc)
    except (pa.ArrowInvalid, OSError) as e:
        raise KuduInvalidArgument(f"'rows' is not a valid Arrow IPC stream: {e}") from None
    batches = table.combine_chunks().to_batches()
    rows = batches[0] if batches else pa.RecordBatch.from_pylist([], table.schema)
    types = np.frombuffer(bytes(op_types), dtype=np.int8)
    if len(types) != rows.num_rows:
        raise KuduInvalidArgument(f"{len(types)} op types for {rows.num_rows} rows")
    valid = op_mask(types, VALID_OP_TYPES)
    if not valid.all():
        bad = np.unique(types[~valid])
        raise KuduInvalidArgument(f"unknown row operation types {sorted(int(b) for b in bad)}")
    matrix = None
    if set_columns is not None:
        if not isinstance(set_columns, bytes | bytearray):
            raise KuduInvalidArgument("'set_columns' must be a packed bitmap (bytes) or absent")
        cells = rows.num_rows * rows.num_columns
        bits = np.unpackbits(np.frombuffer(bytes(set_columns), dtype=np.uint8))
        if len(bits) < cells or len(bits) - cells >= 8:
            raise KuduInvalidArgument(f"'set_columns' has {len(bits)} bits for {cells} cells")
        matrix = bits[:cells].reshape(rows.num_rows, rows.num_columns).astype(bool)
    return rows, types, matrix
