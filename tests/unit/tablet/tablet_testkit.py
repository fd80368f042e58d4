"""Helpers shared by the storage tests: a small table schema (int64 key, int32, double, string)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kudu_async.common import key_encoding
from kudu_async.common.schema import Schema

ARROW_FIELDS = [
    pa.field("key", pa.int64(), False),
    pa.field("i32", pa.int32(), True),
    pa.field("d", pa.float64(), True),
    pa.field("s", pa.string(), True),
]


def make_schema() -> Schema:
    return Schema.from_arrow(pa.schema(ARROW_FIELDS), num_key_columns=1)


def encode_key(schema: Schema, *values: Any) -> bytes:
    return key_encoding.encode_key(schema, list(values))
