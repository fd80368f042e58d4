"""The JSON bodies of the master's REST catalog API (``rest_api.py``), as msgspec structs.

They are Kudu's protobuf messages as Kudu's REST endpoints read and write them (``CreateTableRequestPB``,
``AlterTableRequestPB``, ``ColumnSchemaPB``, ``PartitionSchemaPB`` as JSON: ``is_key``, ``is_nullable``,
``"type": "INT32"``, enum names in any case). The same structs decode the requests (unknown fields refused,
as Kudu's JSON parser refuses them) and generate the OpenAPI document's schemas, so the document says
exactly what the handlers take and answer.

Kudu's range bounds and split rows travel as encoded row operations (``RowOperationsPB``), which nobody
writes by hand in JSON: they are refused here, and ``range_bounds``/``split_rows`` (and the
``lower``/``upper`` of a range step) take rows as JSON maps instead.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType

from kudu_async.common import types as T
from kudu_async.rpc.messages import Message

TYPE_NAMES = tuple(t.name.upper() for t in (*T.ALL_TYPES, T.NESTED))
ENCODING_NAMES = (
    "AUTO_ENCODING",
    "PLAIN_ENCODING",
    "PREFIX_ENCODING",
    "GROUP_VARINT",
    "RLE",
    "DICT_ENCODING",
    "BIT_SHUFFLE",
)
COMPRESSION_NAMES = ("DEFAULT_COMPRESSION", "NO_COMPRESSION", "SNAPPY", "LZ4", "ZLIB", "ZSTD")
STEP_TYPES = (
    "ADD_COLUMN",
    "DROP_COLUMN",
    "RENAME_COLUMN",
    "ALTER_COLUMN",
    "ADD_RANGE_PARTITION",
    "DROP_RANGE_PARTITION",
)
TABLE_ID_PATTERN = "^[0-9a-f]{32}$"

# Enum-like strings: the document lists Kudu's names; the handlers take them in any case (Kudu parses its
# enums case-insensitively) and name the field of an unknown one.
DataTypeName = Annotated[str, Meta(extra_json_schema={"enum": list(TYPE_NAMES)}, description="Kudu's data type")]
EncodingName = Annotated[str, Meta(extra_json_schema={"enum": list(ENCODING_NAMES)})]
CompressionName = Annotated[str, Meta(extra_json_schema={"enum": list(COMPRESSION_NAMES)})]
StepType = Annotated[str, Meta(extra_json_schema={"enum": list(STEP_TYPES)})]
Name = Annotated[str, Meta(min_length=1, max_length=256)]
Base64 = Annotated[
    str,
    Meta(
        extra_json_schema={"format": "byte"},
        description="Kudu's encoding of one cell, base64: little-endian integers and floats (DECIMAL by its "
        "precision: 4, 8 or 16 bytes of the unscaled value; DATE days and UNIXTIME_MICROS microseconds since "
        "the epoch), UTF-8 for STRING and VARCHAR, the bytes of a BINARY",
    ),
]
Row = Annotated[dict[str, Any], Meta(description="A row over the range columns: column name -> JSON value")]
BoundType = Literal["inclusive", "exclusive"]


class Body(Message, frozen=True, forbid_unknown_fields=True):
    """Base of every REST body: a message whose unknown fields are refused, naming the field."""


class TypeAttributes(Body, frozen=True):
    """DECIMAL's precision and scale, VARCHAR's length (Kudu's ColumnTypeAttributesPB)."""

    precision: Annotated[int, Meta(ge=1, le=38)] | UnsetType = UNSET
    scale: Annotated[int, Meta(ge=0, le=38)] | UnsetType = UNSET
    length: Annotated[int, Meta(ge=1, le=65535)] | UnsetType = UNSET


class ArrayType(Body, frozen=True):
    """The element type of an array column."""

    type: DataTypeName


class NestedType(Body, frozen=True):
    """What a NESTED column holds: today a one-dimensional array of a scalar type."""

    array: ArrayType


class ColumnSchema(Body, frozen=True, kw_only=True):
    """One column (Kudu's ColumnSchemaPB). ``id`` is the master's: answered, refused in a request. Key
    columns come first."""

    id: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    name: Name
    type: DataTypeName
    is_key: bool = False
    is_nullable: bool = False
    read_default_value: Base64 | UnsetType = UNSET
    write_default_value: Base64 | UnsetType = UNSET
    encoding: EncodingName | UnsetType = UNSET
    compression: CompressionName | UnsetType = UNSET
    cfile_block_size: Annotated[int, Meta(ge=0, le=2**31 - 1)] | UnsetType = UNSET
    type_attributes: TypeAttributes | UnsetType = UNSET
    comment: Annotated[str, Meta(max_length=256)] | UnsetType = UNSET
    immutable: bool = False
    is_auto_incrementing: bool | UnsetType = UNSET
    nested_type: NestedType | UnsetType = UNSET


class TableSchema(Body, frozen=True):
    """A table's columns, key columns first."""

    columns: Annotated[list[ColumnSchema], Meta(min_length=1, max_length=300)]


class ColumnIdentifier(Body, frozen=True):
    """A column by ``name`` or by ``id`` (one of them; answers name it by id, as Kudu's do)."""

    id: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    name: Name | UnsetType = UNSET


class HashBucketSchema(Body, frozen=True):
    """One hash dimension: key columns hashed into ``num_buckets`` buckets."""

    columns: Annotated[list[ColumnIdentifier], Meta(min_length=1)]
    num_buckets: Annotated[int, Meta(ge=2, le=1024)]
    seed: Annotated[int, Meta(ge=0, le=2**32 - 1)] = 0


class RangeSchema(Body, frozen=True):
    """The key columns whose values order the range partitions (none: no range partitioning)."""

    columns: list[ColumnIdentifier]


class PartitionSchema(Body, frozen=True):
    """Hash dimensions, then the range columns. Without ``range_schema`` the range columns are the key
    columns, as in Kudu. Ranges with their own hash schema (Kudu's ``custom_hash_schema_ranges``, encoded
    bounds) are not taken here."""

    hash_schema: list[HashBucketSchema] | UnsetType = UNSET
    range_schema: RangeSchema | UnsetType = UNSET
    custom_hash_schema_ranges: list[Any] | UnsetType = UNSET


class RangeBound(Body, frozen=True):
    """A range partition by its bounds as JSON rows (a missing bound is unbounded on that side), with its own
    hash schema if it has one (Kudu's custom hash schema of a range)."""

    lower: Row | None = None
    upper: Row | None = None
    lower_bound_type: BoundType = "inclusive"
    upper_bound_type: BoundType = "exclusive"
    hash_schema: Annotated[list[HashBucketSchema], Meta(min_length=1)] | UnsetType = UNSET


class CreateTableRequest(Body, frozen=True):
    """A new table (Kudu's CreateTableRequestPB as JSON). ``owner`` defaults to the caller."""

    name: Name
    schema: TableSchema
    partition_schema: PartitionSchema
    num_replicas: Annotated[int, Meta(ge=1, le=7)] = 3
    owner: Annotated[str, Meta(max_length=128)] | UnsetType = UNSET
    comment: Annotated[str, Meta(max_length=256)] | UnsetType = UNSET
    range_bounds: Annotated[list[RangeBound], Meta(max_length=1000)] | UnsetType = UNSET
    split_rows: Annotated[list[Row], Meta(max_length=1000)] | UnsetType = UNSET
    split_rows_range_bounds: Any | UnsetType = UNSET
    extra_configs: dict[str, str] | UnsetType = UNSET


class TableIdentifier(Body, frozen=True):
    """The table an alteration names besides the path: it must be the path's table."""

    table_id: str | UnsetType = UNSET
    table_name: str | UnsetType = UNSET


class AddColumn(Body, frozen=True):
    """ADD_COLUMN: a new non-key column, nullable or with a default."""

    schema: ColumnSchema


class DropColumn(Body, frozen=True):
    """DROP_COLUMN: a non-key column by name."""

    name: Name


class RenameColumn(Body, frozen=True):
    """RENAME_COLUMN: a column's new name."""

    old_name: Name
    new_name: Name


class ColumnSchemaDelta(Body, frozen=True):
    """What ALTER_COLUMN changes of the column ``name``: its name, default, storage attributes, comment."""

    name: Name
    new_name: Name | UnsetType = UNSET
    default_value: Base64 | UnsetType = UNSET
    remove_default: bool = False
    encoding: EncodingName | UnsetType = UNSET
    compression: CompressionName | UnsetType = UNSET
    block_size: Annotated[int, Meta(ge=0, le=2**31 - 1)] | UnsetType = UNSET
    new_comment: Annotated[str, Meta(max_length=256)] | UnsetType = UNSET
    immutable: bool | UnsetType = UNSET


class AlterColumn(Body, frozen=True):
    """ALTER_COLUMN: what changes of one column."""

    delta: ColumnSchemaDelta


class RangePartition(Body, frozen=True):
    """A range partition step's bounds as JSON rows (Kudu's encoded ``range_bounds`` are refused); an added
    range may have its own hash schema (a dropped one is found by its bounds)."""

    lower: Row | None = None
    upper: Row | None = None
    lower_bound_type: BoundType = "inclusive"
    upper_bound_type: BoundType = "exclusive"
    hash_schema: Annotated[list[HashBucketSchema], Meta(min_length=1)] | UnsetType = UNSET
    range_bounds: Any | UnsetType = UNSET


class AlterTableStep(Body, frozen=True):
    """One step: ``type`` says which of the other fields it carries."""

    type: StepType
    add_column: AddColumn | UnsetType = UNSET
    drop_column: DropColumn | UnsetType = UNSET
    rename_column: RenameColumn | UnsetType = UNSET
    alter_column: AlterColumn | UnsetType = UNSET
    add_range_partition: RangePartition | UnsetType = UNSET
    drop_range_partition: RangePartition | UnsetType = UNSET


class AlterTableRequest(Body, frozen=True):
    """Changes to the path's table (Kudu's AlterTableRequestPB as JSON). ``schema`` is accepted and not
    used (Kudu reads encoded range bounds with it)."""

    table: TableIdentifier | UnsetType = UNSET
    alter_schema_steps: Annotated[list[AlterTableStep], Meta(max_length=1000)] = []
    new_table_name: Name | UnsetType = UNSET
    new_table_owner: Annotated[str, Meta(max_length=128)] | UnsetType = UNSET
    new_table_comment: Annotated[str, Meta(max_length=256)] | UnsetType = UNSET
    num_replicas: int | UnsetType = UNSET
    schema: Any | UnsetType = UNSET
    new_extra_configs: dict[str, str] | UnsetType = UNSET


# --- answers ------------------------------------------------------------------------------------------------


class TableInfo(Body, frozen=True):
    """One table of the list."""

    table_id: Annotated[str, Meta(pattern=TABLE_ID_PATTERN)]
    table_name: str


class TablesResponse(Body, frozen=True):
    """The tables the caller may see (METADATA on them), by name."""

    tables: list[TableInfo]


class TableResponse(Body, frozen=True):
    """A table as Kudu's REST answers it; owner and comment are "" when unset."""

    name: str
    id: Annotated[str, Meta(pattern=TABLE_ID_PATTERN)]
    schema: TableSchema
    partition_schema: PartitionSchema
    owner: str
    comment: str
    extra_config: dict[str, str]


class LeaderResponse(Body, frozen=True):
    """The leader master's web server."""

    leader: Annotated[str, Meta(description="its URL, e.g. http://host:8051")]


class ErrorResponse(Body, frozen=True, kw_only=True):
    """An error. The operations answer Kudu's ``error`` (the message) with ``code`` and ``message``; the
    admin server's own refusals (no or bad credentials, 401; a user outside the ACLs, 403; an unknown path)
    carry ``code`` and ``message`` only. A master that does not lead answers 503 naming the ``leader``."""

    error: str | UnsetType = UNSET
    code: str
    message: str
    details: dict[str, Any] | UnsetType = UNSET
    leader: str | UnsetType = UNSET


REQUEST_TYPES: tuple[type[Body], ...] = (CreateTableRequest, AlterTableRequest)
RESPONSE_TYPES: tuple[type[Body], ...] = (TablesResponse, TableResponse, LeaderResponse, ErrorResponse)
