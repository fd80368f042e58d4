"""Kudu's REST catalog API on the master: ``/api/v1/leader``, ``/api/v1/tables`` (GET lists, POST creates),
``/api/v1/tables/<table_id>`` (GET, PUT alters, DELETE), the OpenAPI document ``/api/v1/spec`` and the page
``/api/docs`` rendered from it.

Every operation runs the master's own RPC handler (ListTables, CreateTable, IsCreateTableDone, AlterTable,
IsAlterTableDone, DeleteTable, GetTableSchema) as the user the admin app authenticated, after the check the
RPC server makes before any handler (authentication when ``--rpc-authentication=required``, the method's
ACL): the same table privileges, the same audit lines (method ``REST/<name>``), no second way into the
catalog. The admin app's middleware asks only for a user on these paths' writes for that reason.

Bodies are Kudu's JSON (``rest_bodies.py``); errors are Kudu's ``{"error": message}`` (with ``code`` and
``message``) and Kudu's status codes: 400 for a bad request or an existing name, 403 without the privilege,
404 for an unknown table, 503 from a master that does not lead (naming the leader's web address in
``leader``; Kudu's code answers 500 there, its own OpenAPI document 503), 500 for anything else, including
a DDL not finished within ``--rest-catalog-default-request-timeout-ms`` (the table exists; poll it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import html
import logging
import re
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import msgspec
from aiohttp import web
from msgspec import UNSET

from kudu_async.common import types as T
from kudu_async.common.column import ColumnSchema as InternalColumn
from kudu_async.common.errors import (
    KuduBadStatus,
    KuduInvalidArgument,
    KuduNotAuthorized,
    KuduNotFound,
    KuduNotTheLeader,
    KuduTimedOut,
)
from kudu_async.common.schema import Schema
from kudu_async.master import messages as msg
from kudu_async.master import rest_bodies as rb
from kudu_async.master.catalog_manager import CatalogManager
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.messages import ServiceTable, convert
from kudu_async.rpc.server import CallContext
from kudu_async.security.acl import Acls
from kudu_async.security.identity import ANONYMOUS
from kudu_async.server.admin import IDENTITY_KEY, checks_own_privileges
from kudu_async.server.config import NodeConfig
from kudu_async.server.webui import pages

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
LEADER_LOOKUP_S = 2.0  # longest /api/v1/leader waits for the leader's own answer
DDL_POLL_WAIT_MS = msg.MAX_DDL_WAIT_MS  # each Is*Done call is held this long at most while a DDL finishes
JSON = "application/json"


class RestMaster(Protocol):
    """What the REST API uses of the master (``master.master.Master``)."""

    @property
    def uuid(self) -> str: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def acls(self) -> Acls: ...

    @property
    def rpc_client(self) -> RpcClient: ...

    @property
    def http_address(self) -> str: ...

    @property
    def http_scheme(self) -> str: ...

    @property
    def catalog_manager(self) -> CatalogManager: ...

    def methods(self) -> ServiceTable: ...

    def is_catalog_leader(self) -> bool: ...

    def leader_info(self) -> dict[str, Any]: ...

    def audit_denial(self, ctx: CallContext, err: KuduNotAuthorized) -> None: ...


class _HttpError(Exception):
    """A request refused before any RPC handler ran (no body, not JSON, a malformed table id)."""

    def __init__(self, status: int, code: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})


# Kudu's mapping of a status to an HTTP code (rest_catalog_path_handlers.cc), and 503 for a follower.
_HTTP_STATUS = {
    "NOT_AUTHORIZED": 403,
    "INVALID_ARGUMENT": 400,
    "INVALID_REQUEST": 400,
    "ALREADY_PRESENT": 400,
    "NOT_FOUND": 404,
    "ILLEGAL_STATE": 503,
    "SERVICE_UNAVAILABLE": 503,
    "UNINITIALIZED": 503,
    "NOT_THE_LEADER": 503,
}


def http_status(code: str) -> int:
    return _HTTP_STATUS.get(code, 500)


def error_response(
    status: int, code: str, message: str, details: Mapping[str, Any] | None = None, leader: str | None = None
) -> web.Response:
    body = rb.ErrorResponse(
        error=message, code=code, message=message, details=dict(details) if details else UNSET, leader=leader or UNSET
    )
    return web.Response(body=msgspec.json.encode(body), status=status, content_type=JSON)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(obj), status=status, content_type=JSON)


def _bad(path: str, problem: str) -> KuduInvalidArgument:
    return KuduInvalidArgument(f"'{path}': {problem}", {"field": path})


# --- cells: Kudu's binary encoding of a default value ------------------------------------------------------

_FIXED = {
    "int8": "<b",
    "int16": "<h",
    "int32": "<i",
    "int64": "<q",
    "unixtime_micros": "<q",
    "date": "<i",
    "float": "<f",
    "double": "<d",
    "bool": "<?",
}


def _decimal_width(precision: int | None) -> int:
    p = precision or 0
    return 4 if p <= 9 else 8 if p <= 18 else 16


def decode_cell(kt: T.KuduType, precision: int | None, text: str, path: str) -> Any:
    """The physical value of a base64 cell in Kudu's encoding (see ``rest_bodies.Base64``)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(path, "not base64") from None
    name = kt.name
    if name in _FIXED:
        fmt = _FIXED[name]
        if len(raw) != struct.calcsize(fmt):
            raise _bad(path, f"a {name.upper()} cell is {struct.calcsize(fmt)} bytes, got {len(raw)}")
        return struct.unpack(fmt, raw)[0]
    if kt is T.DECIMAL:
        width = _decimal_width(precision)
        if len(raw) != width:
            raise _bad(path, f"a DECIMAL({precision}) cell is {width} bytes (its unscaled value), got {len(raw)}")
        return int.from_bytes(raw, "little", signed=True)
    if kt in (T.STRING, T.VARCHAR):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(path, f"a {name.upper()} cell is UTF-8") from None
    if kt is T.BINARY:
        return raw
    raise _bad(path, f"a {name.upper()} column has no default value")


def encode_cell(kt: T.KuduType, precision: int | None, value: Any) -> str:
    """Inverse of ``decode_cell``."""
    if kt.name in _FIXED:
        raw = struct.pack(_FIXED[kt.name], value)
    elif kt is T.DECIMAL:
        raw = int(value).to_bytes(_decimal_width(precision), "little", signed=True)
    elif isinstance(value, str):
        raw = value.encode("utf-8")
    else:
        raw = bytes(value)
    return base64.b64encode(raw).decode("ascii")


# --- requests: Kudu's JSON to the RPCs' messages --------------------------------------------------------


def _type(name: str, path: str) -> T.KuduType:
    try:
        return T.type_from_name(name)
    except KuduInvalidArgument:
        raise _bad(path, f"unknown data type {name!r}; expected one of {', '.join(rb.TYPE_NAMES)}") from None


def _column_default(c: rb.ColumnSchema, kt: T.KuduType, precision: int | None, path: str) -> Any:
    read, write = c.read_default_value, c.write_default_value
    if read is not UNSET and write is not UNSET and read != write:
        raise _bad(f"{path}.write_default_value", "differs from read_default_value; give one default")
    text = write if write is not UNSET else read
    if text is UNSET:
        return None
    which = "write_default_value" if write is not UNSET else "read_default_value"
    return decode_cell(kt, precision, text, f"{path}.{which}")


def _column_type_in(c: rb.ColumnSchema, kt: T.KuduType, path: str, d: dict[str, Any]) -> None:
    """The type's parameters and an array column's element type, into ``d``."""
    if c.type_attributes is not UNSET:
        for k in ("precision", "scale", "length"):
            v = getattr(c.type_attributes, k)
            if v is not UNSET:
                d[k] = v
    if c.nested_type is not UNSET:
        if kt is not T.NESTED:
            raise _bad(f"{path}.nested_type", "only a NESTED column has a nested type")
        d["array_element_type"] = _type(c.nested_type.array.type, f"{path}.nested_type.array.type").name
    elif kt is T.NESTED:
        raise _bad(f"{path}.nested_type", "a NESTED column needs 'nested_type': {'array': {'type': ...}}")


def _column_storage_in(c: rb.ColumnSchema, d: dict[str, Any]) -> None:
    """Encoding, compression, block size, comment and flags, into ``d``; Kudu's defaults (AUTO_ENCODING,
    DEFAULT_COMPRESSION, block size 0) are what a column without them gets."""
    if c.encoding is not UNSET and c.encoding.upper() not in ("AUTO_ENCODING", "AUTO"):
        d["encoding"] = c.encoding
    if c.compression is not UNSET and c.compression.upper() not in ("DEFAULT_COMPRESSION", "DEFAULT"):
        d["compression"] = c.compression
    if c.comment is not UNSET:
        d["comment"] = c.comment
    if c.cfile_block_size is not UNSET and c.cfile_block_size > 0:
        d["block_size"] = c.cfile_block_size
    if c.immutable:
        d["immutable"] = True
    if c.is_auto_incrementing is True:
        d["auto_incrementing"] = True


def column_in(c: rb.ColumnSchema, path: str) -> dict[str, Any]:
    """One column as the catalog's schema map holds it; INVALID_ARGUMENT naming ``path`` if it is wrong."""
    if c.id is not UNSET:
        raise _bad(f"{path}.id", "column ids are the master's to assign; leave 'id' out")
    kt = _type(c.type, f"{path}.type")
    d: dict[str, Any] = {"name": c.name, "type": kt.name, "nullable": c.is_nullable}
    _column_type_in(c, kt, path, d)
    default = _column_default(c, kt, d.get("precision"), path)
    if default is not None:
        d["default"] = default
    _column_storage_in(c, d)
    try:
        InternalColumn.from_dict(d)
    except KuduInvalidArgument as e:
        raise _bad(path, e.message) from None
    return d


def schema_in(s: rb.TableSchema) -> dict[str, Any]:
    """The catalog's schema map: key columns first (Kudu's rule), at least one."""
    cols: list[dict[str, Any]] = []
    keys = 0
    for i, c in enumerate(s.columns):
        path = f"schema.columns[{i}]"
        if c.is_key:
            if keys < i:
                raise _bad(f"{path}.is_key", f"key column {c.name!r} follows a non-key column: key columns come first")
            keys += 1
        cols.append(column_in(c, path))
    if keys == 0:
        raise _bad("schema.columns", "no column has is_key: true; a table needs a primary key")
    schema = {"columns": cols, "num_key_columns": keys}
    try:
        Schema.from_dict(schema)
    except KuduInvalidArgument as e:
        raise _bad("schema", e.message) from None
    return schema


def _column_ref(ref: rb.ColumnIdentifier, by_id: Mapping[int, str], path: str) -> str:
    """A partition column by name, or by its id (``by_id``: a new table's columns get ids 0, 1, ... in
    order; an existing table's are the master's)."""
    if (ref.id is UNSET) == (ref.name is UNSET):
        raise _bad(path, "name the column by 'name' or by 'id' (one of them)")
    if ref.id is not UNSET:
        if ref.id not in by_id:
            raise _bad(f"{path}.id", f"no column has id {ref.id}")
        return by_id[ref.id]
    assert ref.name is not UNSET
    if ref.name not in by_id.values():
        raise _bad(f"{path}.name", f"no column named {ref.name!r}")
    return ref.name


def _hash_in(hashes: list[rb.HashBucketSchema], by_id: Mapping[int, str], path: str) -> list[dict[str, Any]]:
    """Hash dimensions as the catalog's partition schema holds them."""
    return [
        {
            "columns": [_column_ref(c, by_id, f"{path}[{i}].columns[{j}]") for j, c in enumerate(h.columns)],
            "num_buckets": h.num_buckets,
            "seed": h.seed,
        }
        for i, h in enumerate(hashes)
    ]


def _ids_of_new(schema: Mapping[str, Any]) -> dict[int, str]:
    return {i: c["name"] for i, c in enumerate(schema["columns"])}


def partition_in(p: rb.PartitionSchema, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The catalog's partition schema map; without a range schema the range columns are the key columns."""
    if p.custom_hash_schema_ranges is not UNSET and p.custom_hash_schema_ranges:
        raise _bad(
            "partition_schema.custom_hash_schema_ranges",
            "ranges with their own hash schema take encoded bounds there: give each of 'range_bounds' its "
            "'hash_schema' instead",
        )
    by_id = _ids_of_new(schema)
    dims = _hash_in(p.hash_schema or [], by_id, "partition_schema.hash_schema")
    if p.range_schema is UNSET:
        ranges = [c["name"] for c in schema["columns"][: schema["num_key_columns"]]]
    else:
        ranges = [
            _column_ref(c, by_id, f"partition_schema.range_schema.columns[{j}]")
            for j, c in enumerate(p.range_schema.columns)
        ]
    return {"hash_dimensions": dims, "range_columns": ranges}


def _bound_in(b: rb.RangeBound | rb.RangePartition, by_id: Mapping[int, str], path: str) -> dict[str, Any]:
    """A range partition as the catalog's requests take it, with its own hash schema if it has one."""
    out: dict[str, Any] = {
        "lower": b.lower,
        "upper": b.upper,
        "lower_bound_type": b.lower_bound_type,
        "upper_bound_type": b.upper_bound_type,
    }
    if b.hash_schema is not UNSET:
        out["hash_dimensions"] = _hash_in(b.hash_schema, by_id, f"{path}.hash_schema")
    return out


def create_request(body: rb.CreateTableRequest, user: str) -> msg.CreateTableRequest:
    """CreateTable's message for a REST body; the owner is the caller unless the body names one (Kudu's)."""
    if body.split_rows_range_bounds is not UNSET:
        raise _bad(
            "split_rows_range_bounds",
            "encoded row operations are not taken over REST: give 'range_bounds' and 'split_rows' as JSON rows",
        )
    if body.extra_configs is not UNSET and body.extra_configs:
        raise _bad("extra_configs", "table extra configuration is not supported")
    schema = schema_in(body.schema)
    pschema = partition_in(body.partition_schema, schema)
    ranges = None
    if body.range_bounds is not UNSET:
        by_id = _ids_of_new(schema)
        ranges = [_bound_in(b, by_id, f"range_bounds[{i}]") for i, b in enumerate(body.range_bounds)]
    owner = body.owner if body.owner is not UNSET else user
    return msg.CreateTableRequest(
        name=body.name,
        schema=schema,
        partition_schema=pschema,
        num_replicas=body.num_replicas,
        range_bounds=ranges,
        split_rows=list(body.split_rows) if body.split_rows is not UNSET else None,
        owner=owner or None,
        comment=body.comment if body.comment is not UNSET else None,
    )


def _delta_in(d: rb.ColumnSchemaDelta, path: str, columns: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """ALTER_COLUMN as the catalog's steps: the attribute changes, then the rename."""
    changes: dict[str, Any] = {}
    if d.default_value is not UNSET:
        if d.remove_default:
            raise _bad(f"{path}.remove_default", "give default_value or remove_default, not both")
        col = columns.get(d.name)
        if col is None:
            raise _bad(f"{path}.name", f"the table has no column {d.name!r}")
        kt = T.type_from_name(col["type"])
        physical = decode_cell(kt, col.get("precision"), d.default_value, f"{path}.default_value")
        changes["default"] = T.value_to_wire(T.from_physical(kt, physical, col.get("scale")))
    elif d.remove_default:
        changes["default"] = None
    for key, value in (
        ("encoding", d.encoding),
        ("compression", d.compression),
        ("block_size", d.block_size),
        ("comment", d.new_comment),
        ("immutable", d.immutable),
    ):
        if value is not UNSET:
            changes[key] = value
    steps: list[dict[str, Any]] = []
    if changes:
        steps.append({"type": "ALTER_COLUMN", "name": d.name, **changes})
    if d.new_name is not UNSET:
        steps.append({"type": "RENAME_COLUMN", "old_name": d.name, "new_name": d.new_name})
    if not steps:
        raise _bad(path, "the delta changes nothing")
    return steps


_STEP_FIELDS = tuple(t.lower() for t in rb.STEP_TYPES)


def step_in(s: rb.AlterTableStep, path: str, columns: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One Kudu alter step as the catalog's steps; the step carries exactly the field its type names."""
    kind = s.type.upper()
    if kind not in rb.STEP_TYPES:
        raise _bad(f"{path}.type", f"unknown step type {s.type!r}; expected one of {', '.join(rb.STEP_TYPES)}")
    field = kind.lower()
    for other in _STEP_FIELDS:
        if other != field and getattr(s, other) is not UNSET:
            raise _bad(f"{path}.{other}", f"a {kind} step carries '{field}' only")
    payload = getattr(s, field)
    if payload is UNSET:
        raise _bad(f"{path}.{field}", f"a {kind} step needs '{field}'")
    if isinstance(payload, rb.AddColumn):
        if payload.schema.is_key:
            raise _bad(f"{path}.add_column.schema.is_key", "a new column cannot be a key column")
        return [{"type": kind, "column": column_in(payload.schema, f"{path}.add_column.schema")}]
    if isinstance(payload, rb.DropColumn):
        return [{"type": kind, "name": payload.name}]
    if isinstance(payload, rb.RenameColumn):
        return [{"type": kind, "old_name": payload.old_name, "new_name": payload.new_name}]
    if isinstance(payload, rb.AlterColumn):
        return _delta_in(payload.delta, f"{path}.alter_column.delta", columns)
    assert isinstance(payload, rb.RangePartition)
    if payload.range_bounds is not UNSET:
        raise _bad(
            f"{path}.{field}.range_bounds",
            "encoded row operations are not taken over REST: give 'lower' and 'upper' as JSON rows",
        )
    if kind == "DROP_RANGE_PARTITION" and payload.hash_schema is not UNSET:
        raise _bad(f"{path}.{field}.hash_schema", "a range to drop is found by its bounds alone")
    by_id = {int(c["id"]): name for name, c in columns.items() if c.get("id") is not None}
    return [{"type": kind, **_bound_in(payload, by_id, f"{path}.{field}")}]


def _follow(columns: dict[str, Mapping[str, Any]], steps: list[dict[str, Any]]) -> None:
    """Keep ``columns`` (name -> column) as the steps so far leave the table, for the next steps' defaults."""
    for step in steps:
        kind = step["type"]
        if kind == "ADD_COLUMN":
            columns[step["column"]["name"]] = step["column"]
        elif kind == "DROP_COLUMN":
            columns.pop(step["name"], None)
        elif kind == "RENAME_COLUMN" and step["old_name"] in columns:
            columns[step["new_name"]] = columns.pop(step["old_name"])


def alter_request(body: rb.AlterTableRequest, table: msg.GetTableSchemaResponse) -> msg.AlterTableRequest:
    """AlterTable's message for a REST body on ``table`` (the path's)."""
    if body.num_replicas is not UNSET:
        raise _bad("num_replicas", "the replication factor is not changed over REST")
    if body.new_extra_configs is not UNSET and body.new_extra_configs:
        raise _bad("new_extra_configs", "table extra configuration is not supported")
    named = body.table
    if named is not UNSET:
        if named.table_id is not UNSET and named.table_id != table.table_id:
            raise _bad("table.table_id", f"{named.table_id!r} is not the path's table {table.table_id}")
        if named.table_name is not UNSET and named.table_name != table.name:
            raise _bad("table.table_name", f"{named.table_name!r} is not the name of table {table.table_id}")
    columns = {c["name"]: c for c in table.schema["columns"]}
    steps: list[dict[str, Any]] = []
    for i, s in enumerate(body.alter_schema_steps):
        added = step_in(s, f"alter_schema_steps[{i}]", columns)
        _follow(columns, added)
        steps += added
    return msg.AlterTableRequest(
        table_id=table.table_id,
        new_name=body.new_table_name if body.new_table_name is not UNSET else None,
        new_owner=body.new_table_owner,
        new_comment=body.new_table_comment,
        alter_schema_steps=steps or None,
    )


# --- answers: the catalog's maps as Kudu's JSON ---------------------------------------------------------


def column_out(c: Mapping[str, Any], is_key: bool) -> rb.ColumnSchema:
    kt = T.type_from_name(c["type"])
    precision = c.get("precision")
    attrs: rb.TypeAttributes | msgspec.UnsetType = UNSET
    if any(c.get(k) is not None for k in ("precision", "scale", "length")):
        attrs = rb.TypeAttributes(
            precision=c.get("precision") or UNSET,
            scale=c["scale"] if c.get("scale") is not None else UNSET,
            length=c.get("length") or UNSET,
        )
    default = UNSET if c.get("default") is None else encode_cell(kt, precision, c["default"])
    element = c.get("array_element_type")
    return rb.ColumnSchema(
        id=c["id"] if c.get("id") is not None else UNSET,
        name=c["name"],
        type=kt.name.upper(),
        is_key=is_key,
        is_nullable=bool(c.get("nullable", True)),
        read_default_value=default,
        write_default_value=default,
        encoding=pages.encoding_name(c.get("encoding")),
        compression=pages.compression_name(c.get("compression")),
        cfile_block_size=c.get("block_size") or 0,
        type_attributes=attrs,
        comment=c["comment"] if c.get("comment") is not None else UNSET,
        immutable=bool(c.get("immutable", False)),
        is_auto_incrementing=True if c.get("auto_incrementing") else UNSET,
        nested_type=rb.NestedType(array=rb.ArrayType(type=element.upper())) if element else UNSET,
    )


def table_out(s: msg.GetTableSchemaResponse) -> rb.TableResponse:
    """Kudu's table object: columns with their ids, partition columns named by id."""
    cols = s.schema["columns"]
    keys = s.schema["num_key_columns"]
    ids = {c["name"]: c.get("id") for c in cols}

    def ref(name: str) -> rb.ColumnIdentifier:
        i = ids.get(name)
        return rb.ColumnIdentifier(id=i) if i is not None else rb.ColumnIdentifier(name=name)

    p = s.partition_schema
    hashes = [
        rb.HashBucketSchema(columns=[ref(n) for n in h["columns"]], num_buckets=h["num_buckets"], seed=h["seed"])
        for h in p.get("hash_dimensions", [])
    ]
    return rb.TableResponse(
        name=s.name,
        id=s.table_id,
        schema=rb.TableSchema(columns=[column_out(c, i < keys) for i, c in enumerate(cols)]),
        partition_schema=rb.PartitionSchema(
            hash_schema=hashes or UNSET,
            range_schema=rb.RangeSchema(columns=[ref(n) for n in p.get("range_columns", [])]),
        ),
        owner=s.owner or "",
        comment=s.comment or "",
        extra_config={},
    )


# --- the handlers ------------------------------------------------------------------------------------------


def _table_id(request: web.Request) -> str:
    table_id = request.match_info["table_id"]
    if len(table_id) != 32:
        raise _HttpError(400, "INVALID_ARGUMENT", "Invalid table ID: must be exactly 32 characters long.")
    if table_id.strip("0123456789abcdef"):
        raise _HttpError(400, "INVALID_ARGUMENT", "Invalid table ID: must be 32 lowercase hexadecimal digits.")
    return table_id


async def read_body(request: web.Request, cls: type[rb.Body]) -> Any:
    """The JSON body as ``cls``: 411 without one, 415 unless it is JSON (which also keeps a page of another
    site from posting a form here), 400 naming the field that is wrong."""
    if not request.body_exists:
        raise _HttpError(411, "LENGTH_REQUIRED", f"{request.method} {request.path} needs a JSON body")
    if request.content_type != JSON:
        raise _HttpError(
            415, "UNSUPPORTED_MEDIA_TYPE", f"send the body as {JSON}, not {request.content_type or 'untyped'}"
        )
    raw = await request.read()
    try:
        decoded = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise _HttpError(400, "INVALID_ARGUMENT", f"JSON table object is not correct: {e}") from None
    return parse_body(decoded, cls)


def parse_body(decoded: Any, cls: type[rb.Body]) -> Any:
    """A decoded JSON body as ``cls``; INVALID_ARGUMENT naming the wrong field (``details.field``)."""
    try:
        return convert(decoded, cls)
    except KuduInvalidArgument as e:
        field, message = str(e.details.get("field", "")), e.message
        unknown = _UNKNOWN_FIELD.search(message)
        if unknown is not None:  # named by its own path, as every other wrong field is
            field = unknown.group(1) if field in ("", "request") else f"{field}.{unknown.group(1)}"
            message = f"'{field}': unknown field"
        raise KuduInvalidArgument(f"JSON table object is not correct: {message}", {"field": field}) from None


_UNKNOWN_FIELD = re.compile(r"object contains unknown field `(.*)`$")


Operation = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RestApi:
    """The REST operations of one master, each an RPC handler of its ``Master`` service."""

    def __init__(self, master: RestMaster) -> None:
        self.master = master
        self.methods = master.methods()

    @property
    def timeout_s(self) -> float:
        return float(self.master.config.rest_catalog_default_request_timeout_ms) / 1000.0

    def own_url(self) -> str:
        return f"{self.master.http_scheme}://{self.master.http_address}"

    async def leader_url(self) -> str | None:
        """The leader master's web address: this master's, or the one its leader answers with."""
        m = self.master
        info = m.leader_info()
        uuid, address = info.get("leader_uuid"), info.get("leader_address")
        if m.is_catalog_leader() or uuid == m.uuid:
            return self.own_url()
        if not uuid or not address:
            return None
        try:
            status = await m.rpc_client.call(address, "Generic", "GetStatus", {}, timeout_s=LEADER_LOOKUP_S)
        except KuduBadStatus as e:
            log.info("leader master did not answer", extra={"leader": address, "error": str(e)})
            return None
        url = status.get("http_url") if isinstance(status, dict) and status.get("uuid") == uuid else None
        return url if isinstance(url, str) else None

    async def answer(self, request: web.Request, ops: Mapping[str, Operation]) -> web.StreamResponse:
        op = ops.get(request.method)
        if op is None:
            refused = error_response(405, "METHOD_NOT_ALLOWED", "Method not allowed", {"allowed": sorted(ops)})
            refused.headers["Allow"] = ", ".join(sorted(ops))
            return refused
        try:
            return await op(request)
        except _HttpError as e:
            return error_response(e.status, e.code, e.message, e.details)
        except KuduNotTheLeader as e:
            return error_response(503, e.code, e.message, e.details, leader=await self.leader_url())
        except KuduBadStatus as e:
            return error_response(http_status(e.code), e.code, e.message, e.details)

    # --- running an RPC handler as the page's user ----------------------------------------------------

    def _context(self, request: web.Request, name: str, deadline: float) -> CallContext:
        return CallContext(
            service="REST",
            method=name,
            remote=request.remote or "",
            source="rest",
            deadline=deadline,
            content_type=JSON,
            identity=request.get(IDENTITY_KEY, ANONYMOUS),
        )

    def _admit(self, ctx: CallContext, name: str) -> None:
        """What the RPC server checks before a handler: authentication when required, the method's ACL."""
        identity = ctx.identity
        if self.master.config.rpc_authentication == "required" and not identity.authenticated:
            raise KuduNotAuthorized(
                "this master requires authenticated callers (--rpc-authentication=required) and its web server "
                "authenticates none: give it --webserver-password-file or JWT authentication to use the REST API",
                {"method": ctx.full_method},
            )
        self.master.acls.check(identity, self.methods[name].requires, ctx.full_method)

    async def call(self, request: web.Request, name: str, req: Any, deadline: float) -> Any:
        """Run the ``Master`` RPC method ``name`` as the page's user; a refusal is audited as the RPC
        server audits one."""
        ctx = self._context(request, name, deadline)
        try:
            self._admit(ctx, name)
            return await self.methods[name].handler(req, ctx)
        except KuduNotAuthorized as e:
            self.master.audit_denial(ctx, e)
            raise

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.timeout_s

    async def _wait_done(self, request: web.Request, name: str, table_id: str, deadline: float, what: str) -> None:
        """Hold until IsCreateTableDone/IsAlterTableDone says done (Kudu's REST answers a finished DDL)."""
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise KuduTimedOut(
                    f"{what} timed out while waiting for operation completion; the table is {table_id}",
                    {"table_id": table_id},
                )
            wait_ms = int(min(left * 1000, DDL_POLL_WAIT_MS))
            done = await self.call(request, name, msg.IsDdlDoneRequest(table_id=table_id, wait_ms=wait_ms), deadline)
            if done.done:
                return

    async def _schema(self, request: web.Request, table_id: str, deadline: float) -> msg.GetTableSchemaResponse:
        """The table's schema as GetTableSchema answers it; a table being deleted is gone already (Kudu's)."""
        reply: msg.GetTableSchemaResponse = await self.call(
            request, "GetTableSchema", msg.TableRef(table_id=table_id), deadline
        )
        record = self.master.catalog_manager.tables.get(table_id)
        if record is None or not record.live:
            raise KuduNotFound("Table not found", {"table_id": table_id})
        return reply

    # --- the operations -------------------------------------------------------------------------------

    async def get_leader(self, request: web.Request) -> web.StreamResponse:
        url = await self.leader_url()
        if url is None:
            return error_response(503, "SERVICE_UNAVAILABLE", "No leader master found")
        return _json(rb.LeaderResponse(leader=url))

    async def list_tables(self, request: web.Request) -> web.StreamResponse:
        reply = await self.call(request, "ListTables", msg.ListTablesRequest(), self._deadline())
        tables = [rb.TableInfo(table_id=t.table_id, table_name=t.name) for t in reply.tables]
        return _json(rb.TablesResponse(tables=tables))

    async def create_table(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request, rb.CreateTableRequest)
        req = create_request(body, request.get(IDENTITY_KEY, ANONYMOUS).user)
        deadline = self._deadline()
        reply = await self.call(request, "CreateTable", req, deadline)
        await self._wait_done(request, "IsCreateTableDone", reply.table_id, deadline, "Create table")
        return _json(table_out(await self._schema(request, reply.table_id, deadline)), 201)

    async def get_table(self, request: web.Request) -> web.StreamResponse:
        table_id = _table_id(request)
        return _json(table_out(await self._schema(request, table_id, self._deadline())))

    async def alter_table(self, request: web.Request) -> web.StreamResponse:
        table_id = _table_id(request)
        body = await read_body(request, rb.AlterTableRequest)
        deadline = self._deadline()
        req = alter_request(body, await self._schema(request, table_id, deadline))
        await self.call(request, "AlterTable", req, deadline)
        await self._wait_done(request, "IsAlterTableDone", table_id, deadline, "Alter table")
        return _json(table_out(await self._schema(request, table_id, deadline)))

    async def delete_table(self, request: web.Request) -> web.StreamResponse:
        table_id = _table_id(request)
        await self.call(request, "DeleteTable", msg.DeleteTableRequest(table_id=table_id), self._deadline())
        return web.Response(status=204)


REST_KEY: web.AppKey[RestApi] = web.AppKey("rest_api", RestApi)


def _api(request: web.Request) -> RestApi:
    return request.app[REST_KEY]


async def leader_endpoint(request: web.Request) -> web.StreamResponse:
    api = _api(request)
    return await api.answer(request, {"GET": api.get_leader, "HEAD": api.get_leader})


@checks_own_privileges
async def tables_endpoint(request: web.Request) -> web.StreamResponse:
    api = _api(request)
    return await api.answer(request, {"GET": api.list_tables, "HEAD": api.list_tables, "POST": api.create_table})


@checks_own_privileges
async def table_endpoint(request: web.Request) -> web.StreamResponse:
    api = _api(request)
    ops = {"GET": api.get_table, "HEAD": api.get_table, "PUT": api.alter_table, "DELETE": api.delete_table}
    return await api.answer(request, ops)


async def spec_page(request: web.Request) -> web.Response:
    return web.json_response(openapi_spec())


async def docs_page(request: web.Request) -> web.Response:
    return web.Response(text=docs_html(openapi_spec()), content_type="text/html")


def add_routes(app: web.Application, master: RestMaster) -> None:
    app[REST_KEY] = RestApi(master)
    r = app.router
    r.add_route("*", f"{API_PREFIX}/leader", leader_endpoint)
    r.add_route("*", f"{API_PREFIX}/tables", tables_endpoint)
    r.add_route("*", f"{API_PREFIX}/tables/{{table_id}}", table_endpoint)
    r.add_get(f"{API_PREFIX}/spec", spec_page)
    r.add_get("/api/docs", docs_page)


# --- the OpenAPI document and its page -----------------------------------------------------------------

_ERRORS = {
    400: "Bad request: a malformed body or table id, a wrong field (named in 'details.field'), a table that "
    "exists already",
    401: "No or wrong credentials (HTTP basic or a JWT bearer token, when the master's web server asks for them)",
    403: "The user lacks the table privilege the operation needs, or is outside the ACLs",
    404: "No such table",
    411: "No body",
    415: "A body that is not application/json",
    500: "The DDL did not finish within --rest-catalog-default-request-timeout-ms (the table exists: poll it), "
    "or an internal error",
    503: "This master does not lead the catalog ('leader' names the one that does) or is not ready",
}


def _responses(ok: int, ok_text: str, ok_schema: str | None, errors: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {str(ok): {"description": ok_text}}
    if ok_schema is not None:
        out[str(ok)]["content"] = {JSON: {"schema": {"$ref": f"#/components/schemas/{ok_schema}"}}}
    error_schema = {JSON: {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for code in errors:
        out[str(code)] = {"description": _ERRORS[code], "content": error_schema}
    return out


def _body(schema: str, text: str) -> dict[str, Any]:
    return {
        "required": True,
        "description": text,
        "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


_TABLE_ID_PARAM = {
    "name": "table_id",
    "in": "path",
    "required": True,
    "description": "The table's id (32 hexadecimal digits)",
    "schema": {"type": "string", "pattern": rb.TABLE_ID_PATTERN, "minLength": 32, "maxLength": 32},
}


def _paths() -> dict[str, Any]:
    auth = (401, 403)
    return {
        "/leader": {
            "get": {
                "operationId": "getLeaderMaster",
                "summary": "The leader master's web address",
                "description": "Any master answers; 503 while no master leads.",
                "responses": _responses(200, "The leader", "LeaderResponse", (*auth, 503)),
            }
        },
        "/tables": {
            "get": {
                "operationId": "listTables",
                "summary": "List tables",
                "description": "Every table the caller holds a privilege on (METADATA), by name. Leader only.",
                "responses": _responses(200, "The tables", "TablesResponse", (*auth, 503)),
            },
            "post": {
                "operationId": "createTable",
                "summary": "Create a table",
                "description": "Needs CREATE on the table's name. Answers once every tablet is running.",
                "requestBody": _body("CreateTableRequest", "The new table"),
                "responses": _responses(201, "The table", "TableResponse", (400, *auth, 411, 415, 500, 503)),
            },
        },
        "/tables/{table_id}": {
            "parameters": [_TABLE_ID_PARAM],
            "get": {
                "operationId": "getTable",
                "summary": "A table's schema, partitioning, owner and comment",
                "description": "Needs METADATA on the table.",
                "responses": _responses(200, "The table", "TableResponse", (400, *auth, 404, 503)),
            },
            "put": {
                "operationId": "updateTable",
                "summary": "Alter a table",
                "description": "Rename it (ALL on the table and CREATE on the new name), change its owner or "
                "comment, add, drop, rename or alter columns, add or drop range partitions (ALTER). Answers "
                "once every tablet has the new schema.",
                "requestBody": _body("AlterTableRequest", "The alteration"),
                "responses": _responses(200, "The table", "TableResponse", (400, *auth, 404, 411, 415, 500, 503)),
            },
            "delete": {
                "operationId": "deleteTable",
                "summary": "Delete a table",
                "description": "Needs DROP. The master's --default-deleted-table-reserve-seconds decides whether "
                "it is kept soft-deleted (recallable) first.",
                "responses": _responses(204, "Deleted", None, (400, *auth, 404, 503)),
            },
        },
    }


@functools.cache
def openapi_spec() -> dict[str, Any]:
    """The OpenAPI 3 document: the paths written here, the schemas generated from ``rest_bodies``."""
    _, components = msgspec.json.schema_components(
        (*rb.REQUEST_TYPES, *rb.RESPONSE_TYPES), ref_template="#/components/schemas/{name}"
    )
    for schema in components.values():  # docstrings as one line each, without indentation or reST quoting
        if "description" in schema:
            schema["description"] = " ".join(schema["description"].split()).replace("``", "`")
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "kudu_async master REST API",
            "version": "1.0.0",
            "description": "Apache Kudu's REST catalog API. Bodies are Kudu's protobuf messages as JSON; range "
            "bounds and split rows are JSON rows (Kudu's encoded row operations are refused).",
        },
        "servers": [{"url": API_PREFIX}],
        "security": [{}, {"basicAuth": []}, {"bearerAuth": []}],
        "paths": _paths(),
        "components": {
            "schemas": components,
            "securitySchemes": {
                "basicAuth": {"type": "http", "scheme": "basic", "description": "--webserver-password-file users"},
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
        },
    }


def _type_text(s: Mapping[str, Any]) -> str:
    """A schema's type in a few words, with a link for a reference."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f'<a href="#{html.escape(name)}">{html.escape(name)}</a>'
    if "anyOf" in s:
        return " or ".join(_type_text(x) for x in s["anyOf"])
    kind = s.get("type", "any")
    if kind == "array":
        return "list of " + _type_text(s.get("items", {}))
    if kind == "object" and isinstance(s.get("additionalProperties"), dict):
        return "map to " + _type_text(s["additionalProperties"])
    text = html.escape(str(kind))
    if "enum" in s:
        text += ": " + ", ".join(html.escape(str(v)) for v in s["enum"])
    return text


def _schema_html(name: str, s: Mapping[str, Any]) -> list[str]:
    out = [f'<h3 id="{html.escape(name)}">{html.escape(name)}</h3>']
    for key in ("title", "description"):
        if s.get(key):
            out.append(f"<p>{html.escape(s[key])}</p>")
    required = set(s.get("required", []))
    rows = [
        f"<tr><td><code>{html.escape(p)}</code></td><td>{_type_text(ps)}</td>"
        f"<td>{'yes' if p in required else ''}</td><td>{html.escape(ps.get('description', ''))}</td></tr>"
        for p, ps in s.get("properties", {}).items()
    ]
    if rows:
        out.append("<table><tr><th>field</th><th>type</th><th>required</th><th>about</th></tr>")
        out += [*rows, "</table>"]
    return out


def _operation_html(path: str, method: str, op: Mapping[str, Any], params: list[Any]) -> list[str]:
    full = f"{method.upper()} {API_PREFIX}{path}"
    out = [f'<h3 id="{html.escape(op["operationId"])}">{html.escape(full)}</h3>']
    out.append(f"<p><b>{html.escape(op['summary'])}</b>. {html.escape(op.get('description', ''))}</p>")
    for p in params:
        out.append(f"<p>Path parameter <code>{html.escape(p['name'])}</code>: {html.escape(p['description'])}</p>")
    body = op.get("requestBody")
    if body is not None:
        out.append(f"<p>Body ({JSON}): {_type_text(body['content'][JSON]['schema'])}</p>")
    out.append("<table><tr><th>status</th><th>meaning</th><th>body</th></tr>")
    for code, r in op["responses"].items():
        schema = r.get("content", {}).get(JSON, {}).get("schema")
        shown = _type_text(schema) if schema is not None else ""
        out.append(f"<tr><td>{html.escape(code)}</td><td>{html.escape(r['description'])}</td><td>{shown}</td></tr>")
    out.append("</table>")
    return out


def docs_html(spec: Mapping[str, Any]) -> str:
    """``/api/docs``: every operation and schema of ``spec`` as one page (no script)."""
    info = spec["info"]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(info['title'])}</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:1em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}</style>",
        "</head><body>",
        f"<h1>{html.escape(info['title'])} {html.escape(info['version'])}</h1>",
        f"<p>{html.escape(info['description'])}</p>",
        f'<p>The machine-readable document: <a href="{API_PREFIX}/spec">{API_PREFIX}/spec</a> (OpenAPI 3).</p>',
        "<h2>Operations</h2>",
    ]
    for path, item in spec["paths"].items():
        params = item.get("parameters", [])
        for method, op in item.items():
            if method != "parameters":
                out += _operation_html(path, method, op, params)
    out.append("<h2>Schemas</h2>")
    for name, schema in spec["components"]["schemas"].items():
        out += _schema_html(name, schema)
    out.append("</body></html>")
    return "\n".join(out)
