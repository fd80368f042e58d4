"""Kudu's order-preserving composite key encoding (memcmp order of the bytes == tuple order of the key).

Per component, in column order:

* integers (INT8..INT64, DATE as int32 days, UNIXTIME_MICROS as int64 micros, DECIMAL as its unscaled
  integer in 4/8/16 bytes by precision like Kudu's storage): big-endian two's complement with the
  sign bit flipped, so negative values sort before positive ones;
* STRING/VARCHAR (UTF-8) and BINARY: the raw bytes when it is the last component; otherwise every
  ``\\x00`` is escaped as ``\\x00\\x01`` and the component ends with ``\\x00\\x00``, so a shorter string
  sorts first and embedded zero bytes stay ordered.

The same encoding serves the primary key (storage order, key index) and the range part of partition
keys. ``encode_keys`` is the vectorised path used by the write path; it must agree byte for byte with
the scalar ``encode_key`` (a property test pins that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common import types as T
from kudu_async.common.column import ColumnSchema, cast_column
from kudu_async.common.errors import KuduCorruption, KuduInvalidArgument


class KeyedSchema(Protocol):
    """What key encoding needs of a schema (``common.schema.Schema``, which builds on this module)."""

    @property
    def key_columns(self) -> tuple[ColumnSchema, ...]: ...


MAX_ENCODED_KEY_SIZE_BYTES = 16 * 1024

_INT_WIDTH = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "date": 4, "unixtime_micros": 8}


def component_width(col: ColumnSchema) -> int | None:
    """Encoded width in bytes of a fixed-width component; None for strings and binary."""
    if col.type is T.DECIMAL:
        return T.decimal_width(col.precision or T.MAX_DECIMAL_PRECISION)
    return _INT_WIDTH.get(col.type.name)


def _check_key_type(col: ColumnSchema) -> None:
    if not col.type.key_allowed:
        raise KuduInvalidArgument(f"column '{col.name}' of type {col.type.name} cannot be part of a key")


# --- scalar path -----------------------------------------------------------------------------------------


def _encode_component(col: ColumnSchema, value: Any, is_last: bool) -> bytes:
    if value is None:
        raise KuduInvalidArgument(f"column '{col.name}': NULL in NOT NULL column", {"column": col.name})
    v = col.coerce(value)
    width = component_width(col)
    if width is not None:
        phys = T.to_physical(col.type, v, col.scale)
        return int(phys + (1 << (8 * width - 1))).to_bytes(width, "big")
    raw = v.encode("utf-8") if isinstance(v, str) else v
    if is_last:
        return raw
    return raw.replace(b"\x00", b"\x00\x01") + b"\x00\x00"


def encode_values(columns: Sequence[ColumnSchema], values: Sequence[Any], *, allow_prefix: bool = False) -> bytes:
    """Encode ``values`` for ``columns`` (the last column's string is raw).

    With ``allow_prefix`` fewer values than columns may be given (scan bounds, partial range bounds);
    positions keep their meaning in the full list, so a prefix encodes to a prefix of every key that
    starts with those values.
    """
    if len(values) > len(columns) or (not allow_prefix and len(values) != len(columns)):
        raise KuduInvalidArgument(f"expected {len(columns)} key values, got {len(values)}")
    last = len(columns) - 1
    parts = []
    for i, (col, v) in enumerate(zip(columns, values, strict=False)):
        _check_key_type(col)
        parts.append(_encode_component(col, v, i == last))
    out = b"".join(parts)
    if len(out) > MAX_ENCODED_KEY_SIZE_BYTES:
        raise KuduInvalidArgument(f"encoded primary key of {len(out)} bytes exceeds {MAX_ENCODED_KEY_SIZE_BYTES}")
    return out


def _key_values(schema: KeyedSchema, values: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
    if isinstance(values, Mapping):
        out = []
        for c in schema.key_columns:
            if c.name not in values:
                raise KuduInvalidArgument(f"column '{c.name}': key column missing", {"column": c.name})
            out.append(values[c.name])
        return out
    if isinstance(values, str | bytes):
        return [values]
    return list(values)


def encode_key(schema: KeyedSchema, values: Sequence[Any] | Mapping[str, Any]) -> bytes:
    """The encoded primary key of one row (values in key order, or a dict with the key columns)."""
    return encode_values(schema.key_columns, _key_values(schema, values))


def encode_key_prefix(schema: KeyedSchema, values: Sequence[Any]) -> bytes:
    """Encoding of the first ``len(values)`` key columns: a lower bound of every key with that prefix."""
    return encode_values(schema.key_columns, list(values), allow_prefix=True)


def decode_values(columns: Sequence[ColumnSchema], data: bytes, *, allow_prefix: bool = False) -> tuple[Any, ...]:
    """Inverse of ``encode_values``; values come back in canonical form. With ``allow_prefix`` the
    data may stop after any component (partial range bounds)."""
    out: list[Any] = []
    pos = 0
    last = len(columns) - 1
    for i, col in enumerate(columns):
        if allow_prefix and out and pos == len(data):
            break
        width = component_width(col)
        if width is not None:
            chunk = data[pos : pos + width]
            if len(chunk) != width:
                raise KuduCorruption(f"encoded key too short for column '{col.name}'")
            phys = int.from_bytes(chunk, "big") - (1 << (8 * width - 1))
            out.append(T.from_physical(col.type, phys, col.scale))
            pos += width
            continue
        if i == last:
            raw = data[pos:]
            pos = len(data)
        else:
            buf = bytearray()
            while True:
                z = data.find(b"\x00", pos)
                if z < 0 or z + 1 >= len(data):
                    raise KuduCorruption(f"unterminated string component for column '{col.name}'")
                buf += data[pos:z]
                marker = data[z + 1]
                pos = z + 2
                if marker == 0:
                    break
                if marker != 1:
                    raise KuduCorruption(f"bad escape in string component for column '{col.name}'")
                buf.append(0)
            raw = bytes(buf)
        out.append(raw if col.type is T.BINARY else raw.decode("utf-8"))
    if pos != len(data):
        raise KuduCorruption("trailing bytes after encoded key")
    return tuple(out)


def prefix_successor(key: bytes) -> bytes:
    """The smallest byte string greater than every string that starts with ``key``; b"" if none."""
    k = key.rstrip(b"\xff")
    if not k:
        return b""
    return k[:-1] + bytes([k[-1] + 1])


# --- vectorised path -------------------------------------------------------------------------------------


def _fixed_matrix(col: ColumnSchema, arr: pa.Array, width: int) -> np.ndarray:
    """(n, width) uint8 matrix of the encoded fixed-width component of every row."""
    n = len(arr)
    if col.type is T.DECIMAL:
        words = np.frombuffer(arr.buffers()[1], dtype="<u8", count=2 * (arr.offset + n))[2 * arr.offset :]
        lo = words[0::2]
        if width == 16:
            hi = words[1::2] ^ np.uint64(1 << 63)
            out = np.empty((n, 2), dtype=">u8")
            out[:, 0] = hi
            out[:, 1] = lo
            return out.view(np.uint8).reshape(n, 16)
        vals: np.ndarray = lo.view("<i8")
    else:
        if pa.types.is_timestamp(arr.type):
            arr = arr.view(pa.int64())
        elif pa.types.is_date32(arr.type):
            arr = arr.view(pa.int32())
        vals = arr.to_numpy(zero_copy_only=False)
    bits = 8 * width
    flipped = vals.astype(f"<i{width}", copy=False).view(f"<u{width}") ^ np.array(1 << (bits - 1), f"<u{width}")
    matrix: np.ndarray = flipped.astype(f">u{width}").view(np.uint8).reshape(n, width)
    return matrix


def _binary_from_matrix(m: np.ndarray) -> pa.Array:
    n, width = m.shape
    offsets = np.arange(0, n * width + 1, width, dtype=np.int32)
    data = np.ascontiguousarray(m).tobytes()
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])


def encode_columns(columns: Sequence[ColumnSchema], arrays: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """Vectorised ``encode_values``: one encoded key per row of the given column arrays.

    The arrays must already have the columns' Arrow types (``Schema.validate_batch_rows`` gives them)
    and no nulls.
    """
    if len(columns) != len(arrays):
        raise KuduInvalidArgument(f"expected {len(columns)} key arrays, got {len(arrays)}")
    if not columns:
        raise KuduInvalidArgument("a key needs at least one column")
    n = len(arrays[0])
    last = len(columns) - 1
    parts: list[pa.Array] = []
    pending: list[np.ndarray] = []  # consecutive fixed-width components, merged into one matrix
    any_variable = False
    for i, (col, a) in enumerate(zip(columns, arrays, strict=True)):
        _check_key_type(col)
        arr = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
        if len(arr) != n:
            raise KuduInvalidArgument("key arrays have different lengths")
        if arr.null_count:
            raise KuduInvalidArgument(f"column '{col.name}': NULL in NOT NULL column", {"column": col.name})
        if not arr.type.equals(col.arrow_type):
            arr = cast_column(col, arr)
        width = component_width(col)
        if width is not None:
            pending.append(_fixed_matrix(col, arr, width))
            continue
        if pending:
            parts.append(_binary_from_matrix(np.hstack(pending) if len(pending) > 1 else pending[0]))
            pending = []
        any_variable = True
        b = arr.cast(pa.binary())
        if i != last:
            b = pc.binary_join_element_wise(
                pc.replace_substring(b, b"\x00", b"\x00\x01"), pa.scalar(b"\x00\x00", pa.binary()), b""
            )
        parts.append(b)
    if pending:
        parts.append(_binary_from_matrix(np.hstack(pending) if len(pending) > 1 else pending[0]))
    out = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, b"")
    if any_variable and n:
        biggest = pc.max(pc.binary_length(out)).as_py()
        if biggest is not None and biggest > MAX_ENCODED_KEY_SIZE_BYTES:
            raise KuduInvalidArgument(f"encoded primary key of {biggest} bytes exceeds {MAX_ENCODED_KEY_SIZE_BYTES}")
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    return out


def encode_keys(schema: KeyedSchema, batch: pa.RecordBatch | pa.Table) -> pa.Array:
    """Encoded primary keys (a ``pa.BinaryArray``) of every row of a batch holding the key columns."""
    arrays = []
    names = batch.schema.names
    for c in schema.key_columns:
        if c.name not in names:
            raise KuduInvalidArgument(f"column '{c.name}': key column missing", {"column": c.name})
        arrays.append(batch.column(c.name))
    return encode_columns(schema.key_columns, arrays)
