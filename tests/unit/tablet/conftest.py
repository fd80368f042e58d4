"""Fixtures for storage tests: a small table schema.

Uses ``kudu_async.common.schema``/``key_encoding`` when they exist; until they land, a minimal
stand-in (int64/string keys only) is installed so the storage can be tested on its own.
"""

from __future__ import annotations

import struct
import sys
import types
from typing import Any

import pyarrow as pa
import pytest


class StandInSchema:
    """Just what the storage uses: Arrow schema, key column count, dict round trip."""

    def __init__(self, fields: list[pa.Field], num_keys: int) -> None:
        self._arrow = pa.schema(fields)
        self.num_key_columns = num_keys

    def to_arrow(self) -> pa.Schema:
        return self._arrow

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": [[f.name, str(f.type), f.nullable] for f in self._arrow],
            "num_key_columns": self.num_key_columns,
        }


def _enc_value(v: Any) -> bytes:
    if isinstance(v, int):
        return struct.pack(">Q", (v + (1 << 63)) & ((1 << 64) - 1))
    return v.encode().replace(b"\x00", b"\x00\x01") + b"\x00\x00"


def _encode_key(schema: Any, values: Any) -> bytes:
    return b"".join(_enc_value(v) for v in values)


def _encode_keys(schema: Any, batch: Any) -> pa.BinaryArray:
    if schema.num_key_columns == 1 and batch.schema.field(0).type == pa.int64():
        import numpy as np

        v = batch.column(0).to_numpy().view(np.uint64) ^ np.uint64(1 << 63)
        raw = v.astype(">u8").tobytes()
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(v), [None, pa.py_buffer(raw)])
        return fixed.cast(pa.binary())
    cols = [batch.column(i).to_pylist() for i in range(schema.num_key_columns)]
    return pa.array([_encode_key(schema, vals) for vals in zip(*cols, strict=True)], pa.binary())


try:
    from kudu_async.common import key_encoding as _real_ke  # noqa: F401
    from kudu_async.common import schema as _real_schema  # noqa: F401

    HAVE_COMMON = True
except ImportError:
    HAVE_COMMON = False
    fake = types.ModuleType("kudu_async.common.key_encoding")
    fake.encode_keys = _encode_keys  # type: ignore[attr-defined]
    fake.encode_key = _encode_key  # type: ignore[attr-defined]
    sys.modules["kudu_async.common.key_encoding"] = fake
    import kudu_async.common as _common

    _common.key_encoding = fake  # type: ignore[attr-defined]


ARROW_FIELDS = [
    pa.field("key", pa.int64(), False),
    pa.field("i32", pa.int32(), True),
    pa.field("d", pa.float64(), True),
    pa.field("s", pa.string(), True),
]


def make_schema() -> Any:
    if HAVE_COMMON:
        from kudu_async.common.schema import Schema

        return Schema.from_arrow(pa.schema(ARROW_FIELDS), num_key_columns=1)  # type: ignore[attr-defined]
    return StandInSchema(ARROW_FIELDS, 1)


def encode_key(schema: Any, *values: Any) -> bytes:
    from kudu_async.common import key_encoding

    return key_encoding.encode_key(schema, list(values))  # type: ignore[no-any-return]


@pytest.fixture
def schema() -> Any:
    return make_schema()


class SimplePredicate:
    """A predicate with the shape of common.predicate.ColumnPredicate (column + vectorised evaluate)."""

    def __init__(self, column: str, op: str, value: Any = None) -> None:
        self.column = column
        self.op = op
        self.value = value

    def evaluate(self, batch: Any) -> Any:
        import pyarrow.compute as pc

        col = batch.column(self.column)
        if self.op == "IS NULL":
            return pc.is_null(col)
        if self.op == "IS NOT NULL":
            return pc.is_valid(col)
        if self.op == "IN":
            return pc.is_in(col, value_set=pa.array(self.value, col.type))
        fn = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[self.op]
        return fn(col, pa.scalar(self.value, col.type))

    def matches(self, v: Any) -> bool:
        if self.op == "IS NULL":
            return v is None
        if self.op == "IS NOT NULL":
            return v is not None
        if v is None:
            return False
        if self.op == "IN":
            return v in self.value
        return {
            "=": v == self.value,
            "<": v < self.value,
            "<=": v <= self.value,
            ">": v > self.value,
            ">=": v >= self.value,
        }[self.op]


if HAVE_COMMON:
    from kudu_async.common.predicate import ColumnPredicate

    Predicate: Any = ColumnPredicate
else:
    Predicate = SimplePredicate
