"""The tablet's view of a table schema: Arrow layout, key columns, column ids and the key encoder,
derived once per schema from :class:`kudu_async.common.schema.Schema`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from kudu_async.common import key_encoding
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.schema import ColumnSchema, Schema

KEY_COL = "_key"
FILE_IDS_META = b"kudu.column_ids"
TS_COL = "_ts"


class SchemaInfo:
    """Derived, immutable facts about a schema that the storage uses on every operation."""

    def __init__(
        self,
        schema: Schema,
        read_defaults: dict[int, Any] | None = None,
    ) -> None:
        self.schema = schema
        # column id -> the value rows written before that column existed read (Kudu's read default):
        # fixed when an AlterSchema adds the column, so a later default change only affects new writes.
        self.read_defaults: dict[int, Any] = dict(read_defaults or {})
        self.arrow: pa.Schema = schema.to_arrow()
        self.names: list[str] = list(self.arrow.names)
        self.num_key_columns = schema.num_key_columns
        self.key_names = self.names[: self.num_key_columns]
        self.value_indices = list(range(self.num_key_columns, len(self.names)))
        self.nullable = [f.nullable for f in self.arrow]
        # Value columns no write may change once a row holds them (Kudu's immutable columns).
        self.immutable_indices = [i for i in self.value_indices if schema.columns[i].immutable]
        self.ids: list[int] = column_ids(schema)
        self.storage_arrow = pa.schema(
            [*self.arrow, pa.field(KEY_COL, pa.binary(), False), pa.field(TS_COL, pa.uint64(), False)]
        )

    def read_default(self, i: int) -> Any:
        """The value column ``i`` has in rows written before it was added (None: NULL)."""
        cid = self.ids[i]
        if cid in self.read_defaults:
            return self.read_defaults[cid]
        return self.schema.columns[i].default

    def file_metadata(self) -> dict[bytes, bytes]:
        """Arrow schema metadata written into every base and delta file: which column id each named
        column holds, so files written before a rename, add or drop map onto later schemas."""
        ids = dict(zip(self.names, self.ids, strict=True))
        return {FILE_IDS_META: json.dumps(ids, sort_keys=True).encode()}

    def encode_keys(self, batch: pa.RecordBatch | pa.Table) -> list[bytes]:
        """Order-preserving encoded primary keys of every row, via common.key_encoding."""
        keys: list[bytes] = self.encode_keys_array(batch).to_pylist()
        return keys

    def encode_keys_array(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        """:meth:`encode_keys` as an Arrow binary array."""
        return key_encoding.encode_keys(self.schema, batch)

    def encode_key(self, values: Sequence[Any] | Mapping[str, Any]) -> bytes:
        return key_encoding.encode_key(self.schema, values)

    def to_dict(self) -> dict[str, Any]:
        return self.schema.to_dict()


def column_ids(schema: Schema) -> list[int]:
    """The schema's column ids; the storage matches columns by id, so every column must have one."""
    missing = [c.name for c in schema.columns if c.id is None]
    if missing:
        raise KuduInvalidArgument(f"storage schema column '{missing[0]}' has no column id")
    return [c.id for c in schema.columns if c.id is not None]


def tablet_schema_info(schema: Schema, added_columns: list[dict[str, Any]]) -> SchemaInfo:
    """The storage view of ``schema`` with the read defaults of the columns alters added."""
    added = [ColumnSchema.from_dict(d) for d in added_columns]
    return SchemaInfo(schema, {c.id: c.default for c in added if c.id is not None})
