"""The REST catalog API's translation of Kudu's JSON to the catalog's messages and back, its OpenAPI
document and page, and the admin middleware's rule for pages that check their callers themselves."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized, KuduNotTheLeader
from kudu_async.common.schema import Schema
from kudu_async.master import messages as msg
from kudu_async.master import rest_api as ra
from kudu_async.master import rest_bodies as rb
from kudu_async.rpc.messages import Method, ServiceTable
from kudu_async.rpc.server import CallContext
from kudu_async.security.acl import Acls
from kudu_async.security.identity import Identity
from kudu_async.server.admin import AdminAuth, build_admin_app, checks_own_privileges
from kudu_async.server.config import NodeConfig
from kudu_async.server.node import Node

# Kudu's own REST test table (rest_catalog-test.cc), as its POST body.
KUDU_TABLE = {
    "name": "test_table",
    "schema": {
        "columns": [
            {"name": "key", "type": "INT32", "is_nullable": False, "is_key": True},
            {"name": "int_val", "type": "INT32", "is_nullable": False, "is_key": False},
        ]
    },
    "partition_schema": {"range_schema": {"columns": [{"name": "key"}]}},
    "num_replicas": 1,
}


def _create(body: dict[str, Any], user: str = "alice") -> msg.CreateTableRequest:
    return ra.create_request(ra.parse_body(body, rb.CreateTableRequest), user)


def _with(**changes: Any) -> dict[str, Any]:
    return {**KUDU_TABLE, **changes}


def _schema_response(req: msg.CreateTableRequest, table_id: str = "0" * 32) -> msg.GetTableSchemaResponse:
    """What GetTableSchema answers for a table made from ``req`` (ids assigned as the catalog does)."""
    return msg.GetTableSchemaResponse(
        table_id=table_id,
        name=req.name,
        schema=Schema.from_dict(req.schema).with_column_ids().to_dict(),
        schema_version=0,
        partition_schema=req.partition_schema or {},
        num_replicas=req.num_replicas,
        owner=req.owner,
        comment=req.comment,
        create_table_done=True,
    )


def test_kudus_create_body_becomes_the_catalogs_request() -> None:
    req = _create(KUDU_TABLE)
    assert req.name == "test_table" and req.num_replicas == 1
    assert req.schema == {
        "columns": [
            {"name": "key", "type": "int32", "nullable": False},
            {"name": "int_val", "type": "int32", "nullable": False},
        ],
        "num_key_columns": 1,
    }
    assert req.partition_schema == {"hash_dimensions": [], "range_columns": ["key"]}
    assert req.owner == "alice"  # the caller, as Kudu's CreateTableWithUser
    assert _create({**KUDU_TABLE, "owner": "bob"}).owner == "bob"
    assert _create(KUDU_TABLE, user="").owner is None


def test_partitioning_by_name_or_id_and_kudus_default_range() -> None:
    two_keys = {
        "columns": [
            {"name": "a", "type": "int64", "is_key": True},
            {"name": "b", "type": "string", "is_key": True},
            {"name": "v", "type": "double", "is_nullable": True},
        ]
    }
    req = _create(
        _with(
            schema=two_keys,
            partition_schema={"hash_schema": [{"columns": [{"id": 1}, {"name": "a"}], "num_buckets": 4, "seed": 7}]},
        )
    )
    assert req.partition_schema == {
        "hash_dimensions": [{"columns": ["b", "a"], "num_buckets": 4, "seed": 7}],
        "range_columns": ["a", "b"],  # no range_schema: the key columns, as in Kudu
    }
    no_range = _create(_with(schema=two_keys, partition_schema={"range_schema": {"columns": []}}))
    assert no_range.partition_schema == {"hash_dimensions": [], "range_columns": []}
    ranged = _create(
        _with(
            range_bounds=[{"lower": {"key": 0}, "upper": {"key": 10}}, {"lower": {"key": 10}}],
            split_rows=[{"key": 5}],
        )
    )
    assert ranged.range_bounds == [
        {"lower": {"key": 0}, "upper": {"key": 10}, "lower_bound_type": "inclusive", "upper_bound_type": "exclusive"},
        {"lower": {"key": 10}, "upper": None, "lower_bound_type": "inclusive", "upper_bound_type": "exclusive"},
    ]
    assert ranged.split_rows == [{"key": 5}]


def _col(**kw: Any) -> dict[str, Any]:
    return {"name": "c", "type": "INT32", **kw}


BAD_CREATES: list[tuple[dict[str, Any], str, str]] = [
    ({"name": "t"}, "schema", "missing"),
    (_with(name=""), "name", "non-empty"),
    (_with(num_replicas="3"), "num_replicas", "int"),
    (_with(bogus=1), "bogus", "unknown field"),
    (_with(schema={"columns": []}), "schema.columns", "length"),
    (_with(schema={"columns": [_col(type="INT33", is_key=True)]}), "schema.columns[0].type", "unknown data type"),
    (_with(schema={"columns": [_col(is_key=True, colour=1)]}), "schema.columns[0].colour", "unknown field"),
    (_with(schema={"columns": [_col()]}), "schema.columns", "primary key"),
    (_with(schema={"columns": [_col(), _col(name="k", is_key=True)]}), "schema.columns[1].is_key", "come first"),
    (_with(schema={"columns": [_col(is_key=True, id=3)]}), "schema.columns[0].id", "master's to assign"),
    (_with(schema={"columns": [_col(is_key=True, is_nullable=True)]}), "schema", "NOT NULL"),
    (_with(schema={"columns": [_col(type="DECIMAL", is_key=True)]}), "schema.columns[0]", "precision"),
    (_with(schema={"columns": [_col(is_key=True, encoding="ZIGZAG")]}), "schema.columns[0]", "encoding"),
    (
        _with(schema={"columns": [_col(is_key=True, write_default_value="!!")]}),
        "schema.columns[0].write_default_value",
        "base64",
    ),
    (
        _with(schema={"columns": [_col(is_key=True, write_default_value="AQ==")]}),
        "schema.columns[0].write_default_value",
        "4 bytes",
    ),
    (_with(schema={"columns": [_col(type="NESTED", is_key=True)]}), "schema.columns[0].nested_type", "NESTED"),
    (
        _with(partition_schema={"hash_schema": [{"columns": [{"name": "nope"}], "num_buckets": 2}]}),
        "partition_schema.hash_schema[0].columns[0].name",
        "no column",
    ),
    (
        _with(partition_schema={"hash_schema": [{"columns": [{"name": "key", "id": 0}], "num_buckets": 2}]}),
        "partition_schema.hash_schema[0].columns[0]",
        "one of them",
    ),
    (
        _with(partition_schema={"hash_schema": [{"columns": [{"name": "key"}], "num_buckets": 1}]}),
        "partition_schema.hash_schema[0].num_buckets",
        ">= 2",
    ),
    (_with(partition_schema={"range_schema": {"columns": [{"id": 9}]}}), "partition_schema.range_schema", "id 9"),
    (_with(split_rows_range_bounds={"rows": "AA=="}), "split_rows_range_bounds", "JSON rows"),
    (_with(extra_configs={"kudu.table.history_max_age_sec": "1"}), "extra_configs", "not supported"),
    (_with(range_bounds=[{"lower": {"key": 1}, "lower_bound_type": "open"}]), "range_bounds[0].lower_bound_type", ""),
]


@pytest.mark.parametrize(("body", "field", "problem"), BAD_CREATES)
def test_a_bad_create_body_is_refused_naming_the_field(body: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(KuduInvalidArgument) as info:
        _create(body)
    assert str(info.value.details["field"]).startswith(field), info.value
    assert problem in info.value.message, info.value


CELLS: list[tuple[T.KuduType, int | None, Any, bytes]] = [
    (T.INT8, None, -2, b"\xfe"),
    (T.INT16, None, 258, b"\x02\x01"),
    (T.INT32, None, 5, b"\x05\x00\x00\x00"),
    (T.INT64, None, -1, b"\xff" * 8),
    (T.UNIXTIME_MICROS, None, 1_000_000, struct.pack("<q", 1_000_000)),
    (T.DATE, None, 19_000, struct.pack("<i", 19_000)),
    (T.FLOAT, None, 1.5, struct.pack("<f", 1.5)),
    (T.DOUBLE, None, -2.25, struct.pack("<d", -2.25)),
    (T.BOOL, None, True, b"\x01"),
    (T.STRING, None, "héllo", "héllo".encode()),
    (T.VARCHAR, None, "v", b"v"),
    (T.BINARY, None, b"\x00\xff", b"\x00\xff"),
    (T.DECIMAL, 9, -12345, struct.pack("<i", -12345)),
    (T.DECIMAL, 18, 2**40, struct.pack("<q", 2**40)),
    (T.DECIMAL, 38, -(2**100), (-(2**100)).to_bytes(16, "little", signed=True)),
]


@pytest.mark.parametrize(("kt", "precision", "value", "raw"), CELLS)
def test_default_cells_in_kudus_encoding(kt: T.KuduType, precision: int | None, value: Any, raw: bytes) -> None:
    text = base64.b64encode(raw).decode()
    assert ra.decode_cell(kt, precision, text, "f") == value
    assert ra.encode_cell(kt, precision, value) == text
    if len(raw) > 1 and kt not in (T.STRING, T.VARCHAR, T.BINARY):
        with pytest.raises(KuduInvalidArgument, match="bytes"):
            ra.decode_cell(kt, precision, base64.b64encode(raw[:-1]).decode(), "f")


def test_a_table_answers_in_kudus_shape() -> None:
    """Kudu's own test expects this exact object for its test table (rest_catalog-test.cc)."""
    table_id = "05755b4c0c7640cd9f6673c2530a4e78"
    body = msgspec.json.encode(ra.table_out(_schema_response(_create(KUDU_TABLE, user="kudu"), table_id))).decode()
    column = (
        '{{"id":{0},"name":"{1}","type":"INT32","is_key":{2},"is_nullable":false,"encoding":"AUTO_ENCODING",'
        '"compression":"DEFAULT_COMPRESSION","cfile_block_size":0,"immutable":false}}'
    )
    schema = '{"columns":[' + column.format(0, "key", "true") + "," + column.format(1, "int_val", "false") + "]}"
    assert body == (
        f'{{"name":"test_table","id":"{table_id}","schema":{schema},'
        '"partition_schema":{"range_schema":{"columns":[{"id":0}]}},"owner":"kudu","comment":"","extra_config":{}}'
    )


def test_every_column_attribute_survives_the_round_trip() -> None:
    columns = [
        {"name": "k", "type": "INT64", "is_key": True, "encoding": "BIT_SHUFFLE", "compression": "LZ4"},
        {
            "name": "d",
            "type": "DECIMAL",
            "is_nullable": True,
            "type_attributes": {"precision": 12, "scale": 2},
            "write_default_value": base64.b64encode(struct.pack("<q", 12345)).decode(),
            "comment": "money",
        },
        {"name": "s", "type": "VARCHAR", "type_attributes": {"length": 10}, "write_default_value": "eA=="},
        {"name": "a", "type": "NESTED", "is_nullable": True, "nested_type": {"array": {"type": "INT32"}}},
        {"name": "i", "type": "INT32", "is_nullable": True, "immutable": True, "cfile_block_size": 4096},
    ]
    req = _create(_with(schema={"columns": columns}, partition_schema={}, comment="all of them"))
    assert Schema.from_dict(req.schema).columns[1].default == decimal.Decimal("123.45")
    out = ra.table_out(_schema_response(req))
    again = [msgspec.structs.replace(c, id=msgspec.UNSET) for c in out.schema.columns]
    assert (
        _create(_with(schema={"columns": msgspec.to_builtins(again)}, partition_schema={}, comment="all of them"))
        == req
    )
    assert out.comment == "all of them"
    assert [c.compression for c in out.schema.columns][:2] == ["LZ4", "DEFAULT_COMPRESSION"]


def test_kudus_alter_steps_become_the_catalogs() -> None:
    table = _schema_response(_create(KUDU_TABLE), "ab" * 16)
    body = {
        "table": {"table_name": "test_table"},
        "new_table_name": "renamed",
        "new_table_owner": "carol",
        "alter_schema_steps": [
            {
                "type": "ADD_COLUMN",
                "add_column": {"schema": {"name": "new_column", "type": "STRING", "is_nullable": True}},
            },
            {"type": "rename_column", "rename_column": {"old_name": "int_val", "new_name": "v"}},
            {"type": "DROP_COLUMN", "drop_column": {"name": "new_column"}},
            {
                "type": "ALTER_COLUMN",
                "alter_column": {
                    "delta": {"name": "v", "new_name": "w", "default_value": "BwAAAA==", "new_comment": "c"}
                },
            },
            {"type": "ADD_RANGE_PARTITION", "add_range_partition": {"lower": {"key": 0}, "upper": {"key": 9}}},
        ],
    }
    req = ra.alter_request(ra.parse_body(body, rb.AlterTableRequest), table)
    assert (req.table_id, req.new_name, req.new_owner, req.new_comment) == (
        "ab" * 16,
        "renamed",
        "carol",
        msgspec.UNSET,
    )
    assert req.alter_schema_steps == [
        {"type": "ADD_COLUMN", "column": {"name": "new_column", "type": "string", "nullable": True}},
        {"type": "RENAME_COLUMN", "old_name": "int_val", "new_name": "v"},
        {"type": "DROP_COLUMN", "name": "new_column"},
        # the default decoded by the type of "v", the name the earlier steps gave int_val
        {"type": "ALTER_COLUMN", "name": "v", "default": 7, "comment": "c"},
        {"type": "RENAME_COLUMN", "old_name": "v", "new_name": "w"},
        {
            "type": "ADD_RANGE_PARTITION",
            "lower": {"key": 0},
            "upper": {"key": 9},
            "lower_bound_type": "inclusive",
            "upper_bound_type": "exclusive",
        },
    ]


def test_ranges_with_their_own_hash_schema() -> None:
    hashed = [{"columns": [{"name": "key"}], "num_buckets": 3, "seed": 1}]
    req = _create(_with(range_bounds=[{"lower": {"key": 0}, "upper": {"key": 10}, "hash_schema": hashed}]))
    assert req.range_bounds is not None
    assert req.range_bounds[0]["hash_dimensions"] == [{"columns": ["key"], "num_buckets": 3, "seed": 1}]
    table = _schema_response(req, "ab" * 16)  # column ids 0 (key) and 1 (int_val)
    by_id = [{"columns": [{"id": 0}], "num_buckets": 2}]
    step = {"type": "ADD_RANGE_PARTITION", "add_range_partition": {"lower": {"key": 10}, "hash_schema": by_id}}
    [added] = (
        ra.alter_request(ra.parse_body({"alter_schema_steps": [step]}, rb.AlterTableRequest), table).alter_schema_steps
        or []
    )
    assert added["hash_dimensions"] == [{"columns": ["key"], "num_buckets": 2, "seed": 0}]
    with pytest.raises(KuduInvalidArgument, match="no column has id 7"):
        _create(_with(range_bounds=[{"hash_schema": [{"columns": [{"id": 7}], "num_buckets": 2}]}]))
    drop = {"type": "DROP_RANGE_PARTITION", "drop_range_partition": {"lower": {"key": 10}, "hash_schema": by_id}}
    with pytest.raises(KuduInvalidArgument, match="bounds alone"):
        ra.alter_request(ra.parse_body({"alter_schema_steps": [drop]}, rb.AlterTableRequest), table)


BAD_ALTERS: list[tuple[dict[str, Any], str, str]] = [
    ({"table": {"table_name": "other"}}, "table.table_name", "not the name"),
    ({"table": {"table_id": "cd" * 16}}, "table.table_id", "not the path's"),
    ({"num_replicas": 3}, "num_replicas", "replication factor"),
    ({"new_extra_configs": {"kudu.table.maintenance_priority": "1"}}, "new_extra_configs", "not supported"),
    ({"alter_schema_steps": [{"type": "SPLIT"}]}, "alter_schema_steps[0].type", "unknown step type"),
    ({"alter_schema_steps": [{"type": "DROP_COLUMN"}]}, "alter_schema_steps[0].drop_column", "needs"),
    (
        {"alter_schema_steps": [{"type": "DROP_COLUMN", "drop_column": {"name": "x"}, "rename_column": {}}]},
        "alter_schema_steps[0].rename_column",
        "",
    ),
    (
        {"alter_schema_steps": [{"type": "ADD_COLUMN", "add_column": {"schema": _col(is_key=True)}}]},
        "alter_schema_steps[0].add_column.schema.is_key",
        "key column",
    ),
    (
        {"alter_schema_steps": [{"type": "ALTER_COLUMN", "alter_column": {"delta": {"name": "key"}}}]},
        "alter_schema_steps[0].alter_column.delta",
        "changes nothing",
    ),
    (
        {
            "alter_schema_steps": [
                {"type": "ALTER_COLUMN", "alter_column": {"delta": {"name": "nope", "default_value": "AAAAAA=="}}}
            ]
        },
        "alter_schema_steps[0].alter_column.delta.name",
        "no column",
    ),
    (
        {"alter_schema_steps": [{"type": "DROP_RANGE_PARTITION", "drop_range_partition": {"range_bounds": {}}}]},
        "alter_schema_steps[0].drop_range_partition.range_bounds",
        "JSON rows",
    ),
]


@pytest.mark.parametrize(("body", "field", "problem"), BAD_ALTERS)
def test_a_bad_alter_body_is_refused_naming_the_field(body: dict[str, Any], field: str, problem: str) -> None:
    table = _schema_response(_create(KUDU_TABLE), "ab" * 16)
    with pytest.raises(KuduInvalidArgument) as info:
        ra.alter_request(ra.parse_body(body, rb.AlterTableRequest), table)
    assert str(info.value.details["field"]).startswith(field), info.value
    assert problem in info.value.message, info.value


def test_an_alter_default_of_a_time_column_is_its_logical_value() -> None:
    req = _create(_with(schema={"columns": [_col(name="key", is_key=True), _col(name="t", type="DATE")]}))
    table = _schema_response(req, "ab" * 16)
    delta = {"name": "t", "default_value": base64.b64encode(struct.pack("<i", 1)).decode()}
    body = {"alter_schema_steps": [{"type": "ALTER_COLUMN", "alter_column": {"delta": delta}}]}
    [step] = ra.alter_request(ra.parse_body(body, rb.AlterTableRequest), table).alter_schema_steps or []
    assert T.value_from_wire(step["default"]) == dt.date(1970, 1, 2)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref" and isinstance(v, str)] + [
            r for v in node.values() for r in _refs(v)
        ]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_openapi_document_is_whole_and_its_page_shows_all_of_it() -> None:
    spec = ra.openapi_spec()
    assert spec["openapi"].startswith("3.")
    schemas = spec["components"]["schemas"]
    assert {"/leader", "/tables", "/tables/{table_id}"} == set(spec["paths"])
    for ref in _refs(spec):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref
    ops = [(p, m, op) for p, item in spec["paths"].items() for m, op in item.items() if m != "parameters"]
    assert sorted(op["operationId"] for _, _, op in ops) == sorted(
        ["getLeaderMaster", "listTables", "createTable", "getTable", "updateTable", "deleteTable"]
    )
    for _, _, op in ops:
        assert "401" in op["responses"] and any(code.startswith("2") for code in op["responses"])
    json.dumps(spec)  # served as JSON
    page = ra.docs_html(spec)
    assert "<script" not in page
    for path, method, op in ops:
        assert f"{method.upper()} /api/v1{path}" in page and f'id="{op["operationId"]}"' in page
    for name in schemas:
        assert f'id="{name}"' in page


def test_answers_decode_as_the_documents_types() -> None:
    """Every answer type is a struct of ``rest_bodies``: what the handlers send decodes with it."""
    out = ra.table_out(_schema_response(_create(KUDU_TABLE)))
    assert msgspec.json.decode(msgspec.json.encode(out), type=rb.TableResponse) == out
    err = ra.error_response(404, "NOT_FOUND", "Table not found")
    assert isinstance(err.body, bytes) and err.status == 404
    decoded = msgspec.json.decode(err.body, type=rb.ErrorResponse)
    assert (decoded.error, decoded.code, decoded.message) == ("Table not found", "NOT_FOUND", "Table not found")
    assert [ra.http_status(c) for c in ("ALREADY_PRESENT", "NOT_THE_LEADER", "NOT_AUTHORIZED", "TIMED_OUT")] == [
        400,
        503,
        403,
        500,
    ]


# --- the admin middleware: pages that check their callers themselves ---------------------------------------


class _Node:
    role = "master"
    uuid = "master-uuid"
    name = "master-0"

    def __init__(self) -> None:
        self.audited: list[dict[str, Any]] = []

    def add_admin_routes(self, app: web.Application) -> None:
        @checks_own_privileges
        async def own(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        async def plain(request: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        app.router.add_post("/own", own)
        app.router.add_post("/plain", plain)

    def audit(self, line: dict[str, Any]) -> None:
        self.audited.append(line)


@pytest.fixture
async def admin() -> AsyncIterator[TestClient[Any, Any]]:
    acls = Acls.from_flags(user_acl="alice", superuser_acl="admin", service_acl="kudu", authentication_required=True)
    auth = AdminAuth(acls, None, bearer=lambda token: Identity(token, "jwt"))
    client = TestClient(TestServer(build_admin_app(_Node(), auth)))  # type: ignore[arg-type]
    await client.start_server()
    yield client
    await client.close()


async def test_a_page_that_checks_its_callers_needs_a_user_not_a_superuser(admin: TestClient[Any, Any]) -> None:
    def as_(user: str) -> dict[str, str]:
        return {"authorization": f"Bearer {user}"}

    assert (await admin.post("/own", headers=as_("alice"))).status == 200
    assert (await admin.post("/plain", headers=as_("alice"))).status == 403
    assert (await admin.post("/plain", headers=as_("admin"))).status == 200
    assert (await admin.post("/own", headers=as_("eve"))).status == 403  # outside the user ACL
    assert (await admin.post("/own")).status == 401


# --- the handlers over a master's service: the RPC server's checks, errors, audit lines --------------------


class _Master:
    """The parts of a master the REST API uses; its service has the two methods these tests call."""

    uuid = "m-1"
    http_address = "127.0.0.1:8051"
    http_scheme = "http"
    rpc_client = None
    catalog_manager = None

    def __init__(self, authentication: str, leads: bool = True) -> None:
        self.config = NodeConfig(
            {"rpc_authentication": authentication, "rest_catalog_default_request_timeout_ms": 1000}
        )
        self.acls = Acls.from_flags(
            user_acl="alice",
            superuser_acl="admin",
            service_acl="kudu",
            authentication_required=authentication == "required",
        )
        self.leads = leads
        self.audited: list[dict[str, Any]] = []
        self.contexts: list[CallContext] = []

    def methods(self) -> ServiceTable:
        return {
            "ListTables": Method(msg.ListTablesRequest, msg.ListTablesResponse, self._list, requires="user"),
            "CreateTable": Method(msg.CreateTableRequest, msg.TableIdResponse, self._create, requires="user"),
        }

    async def _list(self, req: msg.ListTablesRequest, ctx: CallContext) -> msg.ListTablesResponse:
        self.contexts.append(ctx)
        if not self.leads:
            raise KuduNotTheLeader("master m-1 is not the catalog leader", self.leader_info())
        return msg.ListTablesResponse(tables=[msg.TableEntry(name="t", table_id="ab" * 16, state="RUNNING")])

    async def _create(self, req: msg.CreateTableRequest, ctx: CallContext) -> msg.TableIdResponse:
        self.contexts.append(ctx)
        raise KuduNotAuthorized(
            f"{ctx.identity.describe()} is not authorized to create table {req.name}", {"table": req.name}
        )

    def is_catalog_leader(self) -> bool:
        return self.leads

    def leader_info(self) -> dict[str, Any]:
        return {"leader_uuid": self.uuid if self.leads else None, "leader_address": None, "term": 1}

    def audit(self, line: dict[str, Any]) -> None:
        self.audited.append(line)

    # The node's own refusal line, written through ``audit`` above: the tests check the line a master writes.
    audit_denial = Node.audit_denial


class _RestNode(_Node):
    def __init__(self, master: _Master) -> None:
        super().__init__()
        self.master = master

    def add_admin_routes(self, app: web.Application) -> None:
        ra.add_routes(app, self.master)  # type: ignore[arg-type]


async def _rest_client(master: _Master, auth: AdminAuth) -> TestClient[Any, Any]:
    client = TestClient(TestServer(build_admin_app(_RestNode(master), auth)))  # type: ignore[arg-type]
    await client.start_server()
    return client


async def test_open_pages_do_not_open_the_catalog_when_rpcs_need_authentication() -> None:
    master = _Master("required")
    client = await _rest_client(master, AdminAuth(Acls.open(), None))
    try:
        r = await client.get("/api/v1/tables")
        body = await r.json()
        assert r.status == 403 and body["code"] == "NOT_AUTHORIZED" and "authenticated" in body["error"]
        assert master.contexts == []  # refused before the handler, as the RPC server refuses
        [line] = master.audited
        assert (line["method"], line["allowed"], line["user"]) == ("REST/ListTables", False, "")
    finally:
        await client.close()


async def test_the_methods_acl_applies_and_an_allowed_caller_reaches_the_handler() -> None:
    master = _Master("optional")
    client = await _rest_client(master, AdminAuth(Acls.open(), None))
    try:
        r = await client.get("/api/v1/tables")  # anonymous: outside --user-acl alice
        assert r.status == 403 and "requires a user" in (await r.json())["error"]
    finally:
        await client.close()
    master = _Master("required")
    acls = Acls.from_flags(user_acl="alice", superuser_acl="admin", service_acl="kudu", authentication_required=True)
    client = await _rest_client(master, AdminAuth(acls, None, bearer=lambda token: Identity(token, "jwt")))
    try:
        r = await client.get("/api/v1/tables", headers={"authorization": "Bearer alice"})
        assert r.status == 200 and await r.json() == {"tables": [{"table_id": "ab" * 16, "table_name": "t"}]}
        [ctx] = master.contexts
        assert (ctx.identity, ctx.full_method, ctx.deadline is not None) == (
            Identity("alice", "jwt"),
            "REST/ListTables",
            True,
        )
        # The handler's privilege refusal: 403 in Kudu's shape, audited.
        r = await client.post("/api/v1/tables", json=KUDU_TABLE, headers={"authorization": "Bearer alice"})
        body = await r.json()
        assert (
            r.status == 403 and body["error"] == body["message"] == "alice is not authorized to create table test_table"
        )
        assert master.audited[-1]["object"] == "test_table" and master.audited[-1]["allowed"] is False
        # Refused before any handler: no such method, no body, not JSON, not JSON at all.
        cases: list[tuple[str, bytes | None, str | None, int]] = [
            ("DELETE", None, None, 405),
            ("POST", None, None, 411),
            ("POST", b"name=t", "application/x-www-form-urlencoded", 415),
            ("POST", b"{", "application/json", 400),
        ]
        for method, data, content_type, status in cases:
            headers = {"authorization": "Bearer alice"}
            if content_type is not None:
                headers["content-type"] = content_type
            r = await client.request(method, "/api/v1/tables", headers=headers, data=data)
            assert r.status == status, (method, status, await r.text())
            assert (await r.json())["error"]
            if status == 405:
                assert r.headers["Allow"] == "GET, HEAD, POST"
        assert len(master.contexts) == 2
    finally:
        await client.close()


async def test_a_master_that_does_not_lead_answers_503() -> None:
    master = _Master("optional", leads=False)
    client = await _rest_client(master, AdminAuth(Acls.open(), None))
    master.acls = Acls.open()
    try:
        r = await client.get("/api/v1/tables")
        body = await r.json()
        assert r.status == 503 and body["code"] == "NOT_THE_LEADER" and "leader" not in body  # none known
        r = await client.get("/api/v1/leader")
        assert r.status == 503 and (await r.json())["error"] == "No leader master found"
        master.leads = True
        r = await client.get("/api/v1/leader")
        assert r.status == 200 and await r.json() == {"leader": "http://127.0.0.1:8051"}
    finally:
        await client.close()
