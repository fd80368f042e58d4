"""The tablet's view of a table schema: Arrow layout, key columns and the key encoder.

Everything the storage needs from ``kudu_async.common.schema``/``key_encoding`` goes through this one
class, so the storage depends on a narrow surface of the common API.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import pyarrow as pa

KEY_COL = "_key"
FILE_IDS_META = b"kudu.column_ids"
TS_COL = "_ts"


def _key_encoding() -> Any:
    """common.key_encoding, imported late so the storage can load before it (tests stand in for it)."""
    return importlib.import_module("kudu_async.common.key_encoding")


def _num_key_columns(schema: Any) -> int:
    for attr in ("key_column_count", "num_key_columns", "num_primary_key_columns"):
        v = getattr(schema, attr, None)
        if v is not None:
            return int(v() if callable(v) else v)
    for attr in ("primary_key", "key_columns", "primary_key_columns"):
        v = getattr(schema, attr, None)
        if v is not None:
            return len(v() if callable(v) else v)
    raise TypeError(f"cannot find the key columns of schema {schema!r}")


class SchemaInfo:
    """Derived, immutable facts about a schema that the storage uses on every operation."""

    def __init__(
        self,
        schema: Any,
        read_defaults: dict[int, Any] | None = None,
        legacy_ids: dict[int, str] | None = None,
    ) -> None:
        self.schema = schema
        # column id -> name of files written before column ids existed (they carry no id map).
        self.legacy_ids: dict[int, str] = dict(legacy_ids or {})
        # column id -> the value rows written before that column existed read (Kudu's read default):
        # fixed when an AlterSchema adds the column, so a later default change only affects new writes.
        self.read_defaults: dict[int, Any] = dict(read_defaults or {})
        self.arrow: pa.Schema = schema.to_arrow()
        self.names: list[str] = list(self.arrow.names)
        self.num_key_columns = _num_key_columns(schema)
        self.key_names = self.names[: self.num_key_columns]
        self.value_indices = list(range(self.num_key_columns, len(self.names)))
        self.nullable = [f.nullable for f in self.arrow]
        self.ids: list[int | None] = [getattr(c, "id", None) for c in getattr(schema, "columns", ())] or [None] * len(
            self.names
        )
        self.storage_arrow = pa.schema(
            [*self.arrow, pa.field(KEY_COL, pa.binary(), False), pa.field(TS_COL, pa.uint64(), False)]
        )

    def read_default(self, i: int) -> Any:
        """The value column ``i`` has in rows written before it was added (None: NULL)."""
        cid = self.ids[i]
        if cid is not None and cid in self.read_defaults:
            return self.read_defaults[cid]
        return getattr(self.schema.columns[i], "default", None)

    def file_metadata(self) -> dict[bytes, bytes]:
        """Arrow schema metadata written into every base and delta file: which column id each named
        column holds, so files written before a rename, add or drop map onto later schemas."""
        ids = {n: i for n, i in zip(self.names, self.ids, strict=True) if i is not None}
        return {FILE_IDS_META: json.dumps(ids, sort_keys=True).encode()} if ids else {}

    def encode_keys(self, batch: pa.RecordBatch | pa.Table) -> list[bytes]:
        """Order-preserving encoded primary keys of every row, via common.key_encoding."""
        return self.encode_keys_array(batch).to_pylist()

    def encode_keys_array(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        """:meth:`encode_keys` as an Arrow binary array."""
        encoded: pa.Array = _key_encoding().encode_keys(self.schema, batch)
        return encoded

    def encode_key(self, values: Any) -> bytes:
        key: bytes = _key_encoding().encode_key(self.schema, values)
        return key

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = self.schema.to_dict()
        return d

    @staticmethod
    def schema_from_dict(d: dict[str, Any]) -> Any:
        from kudu_async.common.schema import Schema

        return Schema.from_dict(d)

    @staticmethod
    def column_from_dict(d: dict[str, Any]) -> Any:
        from kudu_async.common.schema import ColumnSchema

        return ColumnSchema.from_dict(d)


def tablet_schema_info(schema: Any, added_columns: list[dict[str, Any]], legacy_ids: dict[str, int]) -> SchemaInfo:
    """The storage view of ``schema``: read defaults of columns added by alters, ids of legacy files."""
    added = [SchemaInfo.column_from_dict(d) for d in added_columns]
    return SchemaInfo(
        schema,
        {c.id: c.default for c in added if c.id is not None},
        {i: name for name, i in legacy_ids.items()},
    )
