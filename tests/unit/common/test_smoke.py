"""Smoke test of the common API surface the storage builds on."""

from __future__ import annotations

import pyarrow as pa

from kudu_async.common import types as T
from kudu_async.common.key_encoding import decode_values, encode_key, encode_keys
from kudu_async.common.schema import ColumnSchema, Schema


def test_int64_string_key_roundtrip() -> None:
    s = Schema([ColumnSchema("k", T.INT64, nullable=False), ColumnSchema("s", T.STRING, nullable=False)], 2)
    batch = pa.record_batch({"k": pa.array([-1, 5]), "s": pa.array(["a\x00b", ""])})
    batch, errors = s.validate_batch_rows(batch, for_op="insert")
    assert errors == {}
    keys = encode_keys(s, batch).to_pylist()
    assert keys == [encode_key(s, (-1, "a\x00b")), encode_key(s, (5, ""))]
    assert decode_values(s.key_columns, keys[0]) == (-1, "a\x00b")
