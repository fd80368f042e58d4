"""``kudu table ...``: every table verb of Kudu's tool: listing and describing, creating from Kudu's JSON
table spec, renaming, deleting and recalling, altering columns, range partitions, comments, limits and the
replication factor, scanning, copying, statistics and locating a row.

Values given on the command line are JSON as Kudu takes them: a default value or a key is a JSON array
(``'[5]'``, ``'["a", 1]'``), range bounds are JSON arrays over the range columns (``'[]'``: unbounded);
dates and timestamps may also be ISO-8601 strings, decimals strings."""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.client.schema_builder import RangePartition
from kudu_async.client.table import Table
from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.common.retry import Deadline
from kudu_async.tools import table_tool
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    UsageError,
    add_format_flag,
    csv_list,
    flag,
    group,
    object_result,
    rows_result,
    show_progress,
    verb,
)

group("table", help="Operate on Kudu tables")
group("table", "set_limit", help="Set the write limit for a table")

LIST_OUTPUT_FORMATS = ("pretty", "json", "json_compact")
LIST_COLUMNS = ("id", "name", "num_tablets", "num_replicas", "live_row_count")
WRITE_TYPES = ("insert", "insert_ignore", "upsert", "upsert_ignore")
BOUND_TYPES = {"INCLUSIVE_BOUND": "inclusive", "EXCLUSIVE_BOUND": "exclusive"}


def _name(p: argparse.ArgumentParser, what: str = "Name of the table") -> None:
    p.add_argument("table_name", help=what)


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise KuduInvalidArgument(f"{what} is not valid JSON: {e}") from None


def _json_values(table: Table, columns: list[str], text: str, what: str) -> list[Any]:
    """A JSON array of values for ``columns`` of ``table``, each read as its column's type."""
    vals = _json_arg(text, what)
    if not isinstance(vals, list):
        raise KuduInvalidArgument(f'{what} must be a JSON array, e.g. [1] or ["a", 2]')
    if len(vals) != len(columns):
        raise KuduInvalidArgument(
            f"{what}: expected {len(columns)} value(s) for {', '.join(columns) or 'no column'}, got {len(vals)}"
        )
    return [table_tool.json_value(table.schema.column(c), v) for c, v in zip(columns, vals, strict=True)]


async def _alter(client: AsyncClient, name: str, build: Any) -> None:
    """One AlterTable through the client's alterer, built by ``build(alterer, table)``; waits until done."""
    table = await client.table(name)
    alterer = client.new_table_alterer(table)
    build(alterer, table)
    await alterer.alter()


# --- list, describe, list_in_flight ---------------------------------------------------------------------------


def _list_args(p: argparse.ArgumentParser) -> None:
    flag(p, "tables", metavar="PATTERN[,...]", help="only tables matching one of these names or glob patterns [all]")
    flag(p, "list_tablets", type=bool, help="include tablet and replica UUIDs in the output [false]")
    flag(p, "show_table_info", type=bool, help="include the number of tablets, replicas and live rows [false]")
    flag(p, "soft_deleted_only", type=bool, help="list only soft-deleted tables [false]")
    flag(
        p,
        "list_table_output_format",
        choices=LIST_OUTPUT_FORMATS,
        default="pretty",
        help="pretty, json or json_compact [pretty]",
    )
    flag(
        p,
        "columns",
        help=f"print these columns as a table instead (of {', '.join(LIST_COLUMNS)}; with -format) [none]",
    )
    add_format_flag(p)


async def _table_info(client: AsyncClient, name: str, ctx: Context, tablets: bool) -> dict[str, Any]:
    schema = await client.masters.call("GetTableSchema", {"name": name}, Deadline(ctx.timeout_s, f"table {name}"))
    stats = await client.get_table_statistics(name)
    locs = await client.masters.call(
        "GetTableLocations",
        {"table_id": schema["table_id"], "max_returned": 100_000},
        Deadline(ctx.timeout_s, f"locations of {name}"),
    )
    info: dict[str, Any] = {
        "id": schema["table_id"],
        "name": name,
        "num_tablets": len(locs["tablets"]),
        "num_replicas": schema["num_replicas"],
        "live_row_count": stats.live_row_count,
    }
    if tablets:
        info["tablet_with_partition"] = [
            {
                "tablet_id": t["tablet_id"],
                "replica_info": [
                    {
                        "role": "L" if r["role"] == "LEADER" else "V" if r["role"] == "FOLLOWER" else "N",
                        "uuid": r["uuid"],
                        "host_port": r.get("rpc_address"),
                    }
                    for r in t["replicas"]
                ],
            }
            for t in locs["tablets"]
        ]
    return info


def _render_list(tables: list[dict[str, Any]], show_info: bool) -> str:
    lines = []
    for t in tables:
        head = t["name"]
        if show_info:
            head += (
                f" num_tablets:{t['num_tablets']} num_replicas:{t['num_replicas']} live_row_count:{t['live_row_count']}"
            )
        lines.append(head)
        for tab in t.get("tablet_with_partition", []):
            lines.append(f"  T {tab['tablet_id']}")
            lines += [f"    {r['role']} {r['uuid']} {r['host_port']}" for r in tab["replica_info"]]
    return "\n".join(lines)


@verb("table", "list", help="List tables", args=_list_args)
async def table_list(ctx: Context, a: argparse.Namespace) -> Result:
    patterns = csv_list(a.tables, "-tables")
    columns = [c.lower() for c in csv_list(a.columns, "-columns") or []]
    unknown = [c for c in columns if c not in LIST_COLUMNS]
    if unknown:
        raise UsageError(f"Invalid column name: {', '.join(unknown)} (of {', '.join(LIST_COLUMNS)})")
    client = await ctx.client()
    if a.soft_deleted_only:
        names = await client.list_soft_deleted_tables()
    else:
        names = await client.list_tables()
    names = [n for n in names if not patterns or any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    detail = bool(columns) or a.show_table_info or a.list_tablets
    if a.soft_deleted_only or not detail:
        tables: list[dict[str, Any]] = [{"name": n} for n in names]
    else:
        tables = [await _table_info(client, n, ctx, a.list_tablets) for n in names]
    if columns:
        return rows_result(tables, columns, a.format)
    if a.list_table_output_format == "pretty":
        return Result(data=tables, text=_render_list(tables, a.show_table_info))
    if not a.show_table_info:
        tables = [{k: v for k, v in t.items() if k in ("name", "tablet_with_partition")} for t in tables]
    indent = 2 if a.list_table_output_format == "json" else None
    return Result(data={"tables": tables}, text=json.dumps({"tables": tables}, indent=indent))


def _describe_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to describe")
    add_format_flag(p, "pretty", ("pretty", "json"))


@verb(
    "table", "describe", help="Describe a table: schema, partitioning, owner, replication, comment", args=_describe_args
)
async def table_describe(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    return object_result(await table_tool.describe(client, a.table_name), a.format, table_tool.render_describe)


def _in_flight_args(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "list_table_output_format",
        choices=LIST_OUTPUT_FORMATS,
        default="pretty",
        help="pretty, json or json_compact [pretty]",
    )


@verb("table", "list_in_flight", help="List tables in flight (being created or altered)", args=_in_flight_args)
async def table_list_in_flight(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    reply = await client.masters.call("ListInFlightTables", {}, Deadline(ctx.timeout_s, "ListInFlightTables"))
    tables = reply["tables"]
    if a.list_table_output_format == "pretty":
        text = "\n".join(
            f"id:{t['table_id']} name:{t['name']}, num_tablets:{t['num_tablets']} "
            f"num_tablets_in_flight:{t['num_tablets_in_flight']} state:{t['state']}"
            for t in tables
        )
        return Result(data=tables, text=text)
    indent = 2 if a.list_table_output_format == "json" else None
    return Result(data={"tables": tables}, text=json.dumps({"tables": tables}, indent=indent))


# --- create, delete, rename, recall -----------------------------------------------------------------------


def _create_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "create_table_json",
        help="Kudu's JSON table spec (table_name, schema, partition, num_replicas, owner, comment), or @FILE",
    )


@verb("table", "create", help="Create a table from Kudu's JSON table spec", args=_create_args)
async def table_create(ctx: Context, a: argparse.Namespace) -> Result:
    text = a.create_table_json
    raw = await asyncio.to_thread(Path(text[1:]).read_text) if text.startswith("@") else text
    spec = _json_arg(raw, "the table spec")
    name, schema, part, n, extra = table_tool.spec_to_create_args(spec)
    client = await ctx.client()
    await client.create_table(name, schema, part, n_replicas=n, owner=extra.get("owner"), comment=extra.get("comment"))
    return Result(data={"created": name}, text=f"created table {name}")


def _delete_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to delete")
    flag(
        p,
        "reserve_seconds",
        type=int,
        default=-1,
        help="keep the table soft-deleted (recallable) this long; 0 purges it at once; -1: the master's "
        "--default_deleted_table_reserve_seconds [-1]",
    )
    flag(
        p, "modify_external_catalogs", type=bool, default=True, help="accepted for Kudu's syntax; no external catalogs"
    )


@verb("table", "delete", help="Delete a table", args=_delete_args)
async def table_delete(ctx: Context, a: argparse.Namespace) -> Result:
    if a.reserve_seconds < -1:
        raise UsageError(f"-reserve_seconds must be >= -1, got {a.reserve_seconds}")
    client = await ctx.client()
    if a.reserve_seconds == -1:
        await client.delete_table(a.table_name)
    else:
        await client.soft_delete_table(a.table_name, a.reserve_seconds)
    return Result(data={"deleted": a.table_name}, text=f"deleted table {a.table_name}")


def _rename_table_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to rename")
    p.add_argument("new_table_name", help="New table name")
    flag(
        p, "modify_external_catalogs", type=bool, default=True, help="accepted for Kudu's syntax; no external catalogs"
    )


@verb("table", "rename_table", help="Rename a table", args=_rename_table_args)
async def rename_table(ctx: Context, a: argparse.Namespace) -> Result:
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.rename(a.new_table_name))
    return Result(text="")


def _recall_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("table_id", help="ID of the table to recall")
    flag(p, "new_table_name", default="", help="the name of the recalled table [its own]")


@verb("table", "recall", help="Recall a deleted but still reserved table", args=_recall_args)
async def table_recall(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    await client.recall_table(a.table_id, a.new_table_name or None)
    return Result(text="")


# --- columns ------------------------------------------------------------------------------------------------


def _column(p: argparse.ArgumentParser, what: str = "Name of the table column to alter") -> None:
    _name(p, "Name of the table to alter")
    p.add_argument("column_name", help=what)


def _rename_column_args(p: argparse.ArgumentParser) -> None:
    _column(p, "Name of the table column to rename")
    p.add_argument("new_column_name", help="New column name")


@verb("table", "rename_column", help="Rename a column", args=_rename_column_args)
async def rename_column(ctx: Context, a: argparse.Namespace) -> Result:
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.alter_column(a.column_name, a.new_column_name))
    return Result(text="")


def _add_column_args(p: argparse.ArgumentParser) -> None:
    _column(p, "Name of the table column to add")
    p.add_argument("data_type", help="Data type of the column (INT64, STRING, DECIMAL, ...)")
    flag(p, "default_value", default="", help="default value as a JSON array of one value, e.g. '[5]' [none]")
    flag(p, "encoding_type", default="AUTO_ENCODING", help="encoding of the column [AUTO_ENCODING]")
    flag(p, "compression_type", default="DEFAULT_COMPRESSION", help="compression of the column [DEFAULT_COMPRESSION]")
    flag(p, "comment", default="", help="comment of the column [none]")
    flag(p, "column_precision", type=int, default=0, help="precision of a DECIMAL column, 1..38 (required for one)")
    flag(p, "column_scale", type=int, default=0, help="scale of a DECIMAL column, 0..precision [0]")
    flag(p, "column_length", type=int, default=0, help="length of a VARCHAR column, 1..65535 (required for one)")


@verb("table", "add_column", help="Add a column (nullable, or with a default value)", args=_add_column_args)
async def add_column(ctx: Context, a: argparse.Namespace) -> Result:
    kind = a.data_type.lower()
    attrs: dict[str, Any] = {}
    if kind == "decimal":
        if a.column_precision == 0:
            raise UsageError("must specify -column_precision for a DECIMAL column")
        attrs.update(precision=a.column_precision, scale=a.column_scale)
    elif kind == "varchar":
        if a.column_length == 0:
            raise UsageError("must specify -column_length for a VARCHAR column")
        attrs["length"] = a.column_length
    client = await ctx.client()

    def build(al: Any, t: Table) -> None:
        # Kudu's AUTO_ENCODING and DEFAULT_COMPRESSION: the column keeps no choice of its own.
        encoding = None if a.encoding_type.upper() in ("AUTO_ENCODING", "AUTO") else a.encoding_type
        compression = None if a.compression_type.upper() in ("DEFAULT_COMPRESSION", "DEFAULT") else a.compression_type
        spec = al.add_column(a.column_name, type_=kind, encoding=encoding, compression=compression, **attrs)
        if a.comment:
            spec.comment(a.comment)
        if a.default_value:
            col = spec.to_column(key=False)
            [value] = _one_value(col, a.default_value)
            spec.default(value)

    await _alter(client, a.table_name, build)
    return Result(text="")


def _one_value(col: Any, text: str) -> list[Any]:
    vals = _json_arg(text, "the default value")
    if not isinstance(vals, list) or len(vals) != 1:
        raise KuduInvalidArgument(f"the default value must be a JSON array of one value, e.g. '[5]', got {text!r}")
    return [table_tool.json_value(col, vals[0])]


def _plain_column_args(p: argparse.ArgumentParser) -> None:
    _column(p)


@verb("table", "delete_column", help="Delete a column", args=_plain_column_args)
async def delete_column(ctx: Context, a: argparse.Namespace) -> Result:
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.drop_column(a.column_name))
    return Result(text="")


def _set_default_args(p: argparse.ArgumentParser) -> None:
    _column(p)
    p.add_argument("default_value", help="write default value of the column as a JSON array of one value, e.g. '[5]'")


@verb("table", "column_set_default", help="Set write_default value for a column", args=_set_default_args)
async def column_set_default(ctx: Context, a: argparse.Namespace) -> Result:
    def build(al: Any, t: Table) -> None:
        if a.column_name not in t.schema:
            raise KuduNotFound(f"Couldn't find column {a.column_name}")
        [value] = _one_value(t.schema.column(a.column_name), a.default_value)
        al.alter_column(a.column_name).default(value)

    await _alter(await ctx.client(), a.table_name, build)
    return Result(text="")


@verb("table", "column_remove_default", help="Remove write_default value for a column", args=_plain_column_args)
async def column_remove_default(ctx: Context, a: argparse.Namespace) -> Result:
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.alter_column(a.column_name).remove_default())
    return Result(text="")


def _attr_args(name: str, what: str) -> Any:
    def add(p: argparse.ArgumentParser) -> None:
        _column(p)
        p.add_argument(name, help=what)

    return add


def _column_attr_verb(name: str, arg: str, what: str, setter: str, help: str) -> None:
    """``table <name> <master_addresses> <table> <column> <arg>``: one attribute of a column set through the
    alterer's column spec method ``setter``."""

    async def handler(ctx: Context, a: argparse.Namespace) -> Result:
        def build(al: Any, t: Table) -> None:
            getattr(al.alter_column(a.column_name), setter)(getattr(a, arg))

        await _alter(await ctx.client(), a.table_name, build)
        return Result(text="")

    verb("table", name, help=help, args=_attr_args(arg, what))(handler)


_column_attr_verb(
    "column_set_compression",
    "compression_type",
    "DEFAULT_COMPRESSION, NO_COMPRESSION, SNAPPY, LZ4, ZLIB or ZSTD",
    "compression",
    "Set compression type for a column",
)
_column_attr_verb(
    "column_set_encoding",
    "encoding_type",
    "AUTO_ENCODING, PLAIN_ENCODING, PREFIX_ENCODING, RLE, DICT_ENCODING, BIT_SHUFFLE or GROUP_VARINT",
    "encoding",
    "Set encoding type for a column",
)
_column_attr_verb(
    "column_set_comment", "column_comment", "Comment of the column", "comment", "Set comment for a column"
)


@verb(
    "table",
    "column_set_block_size",
    help="Set block size for a column",
    args=_attr_args("block_size", "block size of the column in bytes (> 0)"),
)
async def column_set_block_size(ctx: Context, a: argparse.Namespace) -> Result:
    try:
        size = int(a.block_size)
    except ValueError:
        raise UsageError(f"Unable to parse block_size value: {a.block_size}.") from None
    if size <= 0:
        raise UsageError(f"Invalid block size: {a.block_size}, it should be set higher than 0.")
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.alter_column(a.column_name).block_size(size))
    return Result(text="")


# --- table attributes -----------------------------------------------------------------------------------------


def _set_comment_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to alter")
    p.add_argument("table_comment", help="the comment for the table")


@verb("table", "set_comment", help="Set the comment for a table", args=_set_comment_args)
async def set_comment(ctx: Context, a: argparse.Namespace) -> Result:
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.set_comment(a.table_comment))
    return Result(text="")


def _table_only(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to alter")


@verb("table", "clear_comment", help="Clear the comment for a table", args=_table_only)
async def clear_comment(ctx: Context, a: argparse.Namespace) -> Result:
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.set_comment(""))
    return Result(text="")


def _rf_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to alter")
    p.add_argument("replication_factor", help="New replication factor of the table (odd)")


@verb(
    "table",
    "set_replication_factor",
    help="Change a table's replication factor: the master adds or removes replicas of every tablet to match",
    args=_rf_args,
)
async def set_replication_factor(ctx: Context, a: argparse.Namespace) -> Result:
    try:
        n = int(a.replication_factor)
    except ValueError:
        raise UsageError(f"Unable to parse replication factor value: {a.replication_factor}.") from None
    client = await ctx.client()
    table = await client.table(a.table_name)
    await client.alter_table(table, {"num_replicas": n})
    return Result(text="")


def _limit_args(what: str) -> Any:
    def add(p: argparse.ArgumentParser) -> None:
        _name(p, "Name of the table to set limit")
        p.add_argument(what, help=f"The {what.replace('_', ' ')} limit, 'unlimited' for no limit")

    return add


def _limit_value(text: str, what: str) -> int:
    if text.lower() == "unlimited":
        return -1
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"Could not parse {text} as {what} limit") from None


@verb("table", "set_limit", "disk_size", help="Set the disk size limit", args=_limit_args("disk_size"))
async def set_disk_size_limit(ctx: Context, a: argparse.Namespace) -> Result:
    limit = _limit_value(a.disk_size, "disk size")
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.set_table_disk_size_limit(limit))
    return Result(text="")


@verb("table", "set_limit", "row_count", help="Set the row count limit", args=_limit_args("row_count"))
async def set_row_count_limit(ctx: Context, a: argparse.Namespace) -> Result:
    limit = _limit_value(a.row_count, "row count")
    await _alter(await ctx.client(), a.table_name, lambda al, t: al.set_table_row_count_limit(limit))
    return Result(text="")


# --- range partitions -------------------------------------------------------------------------------------


def _range_args(hash_schema: bool) -> Any:
    def add(p: argparse.ArgumentParser) -> None:
        _name(p, "Name of the table")
        p.add_argument(
            "table_range_lower_bound",
            help="JSON array of the range columns' values of the lower bound, e.g. '[1]'; '[]': unbounded",
        )
        p.add_argument(
            "table_range_upper_bound",
            help="JSON array of the range columns' values of the upper bound, e.g. '[2]'; '[]': unbounded",
        )
        flag(
            p,
            "lower_bound_type",
            default="INCLUSIVE_BOUND",
            help="INCLUSIVE_BOUND or EXCLUSIVE_BOUND [INCLUSIVE_BOUND]",
        )
        flag(
            p,
            "upper_bound_type",
            default="EXCLUSIVE_BOUND",
            help="INCLUSIVE_BOUND or EXCLUSIVE_BOUND [EXCLUSIVE_BOUND]",
        )
        if hash_schema:
            flag(
                p,
                "hash_schema",
                default="",
                help='the range\'s own hash schema as JSON, e.g. {"hash_schema": [{"columns": ["c0"], '
                '"num_buckets": 5}]} [the table\'s]',
            )

    return add


def _bounds(t: Table, a: argparse.Namespace) -> tuple[Any, Any, str, str]:
    cols = list(t.partition_schema.range_schema.columns)
    if not cols:
        raise KuduIllegalState(f"table {t.name} has no range partitioning")
    out = []
    for text, what in ((a.table_range_lower_bound, "the lower bound"), (a.table_range_upper_bound, "the upper bound")):
        raw = _json_arg(text, what)
        out.append(None if raw == [] else tuple(_json_values(t, cols, text, what)))
    kinds = []
    for v, what in ((a.lower_bound_type, "-lower_bound_type"), (a.upper_bound_type, "-upper_bound_type")):
        kind = BOUND_TYPES.get(v.upper()) or ({"inclusive": "inclusive", "exclusive": "exclusive"}.get(v.lower()))
        if kind is None:
            raise UsageError(f"wrong type of range {what}: only 'INCLUSIVE_BOUND' or 'EXCLUSIVE_BOUND' can be received")
        kinds.append(kind)
    return out[0], out[1], kinds[0], kinds[1]


@verb("table", "add_range_partition", help="Add a range partition for table", args=_range_args(True))
async def add_range_partition(ctx: Context, a: argparse.Namespace) -> Result:
    def build(al: Any, t: Table) -> None:
        lo, hi, lt, ut = _bounds(t, a)
        if not a.hash_schema:
            al.add_range_partition(lo, hi, lt, ut)
            return
        spec = _json_arg(a.hash_schema, "-hash_schema")
        dims = spec.get("hash_schema") if isinstance(spec, dict) else None
        if not isinstance(dims, list) or not dims:
            raise KuduInvalidArgument('-hash_schema must be {"hash_schema": [{"columns": [...], "num_buckets": N}]}')
        rp = RangePartition(lo, hi, lt, ut)
        for i, d in enumerate(dims):
            if not isinstance(d, dict) or not isinstance(d.get("num_buckets"), int):
                raise KuduInvalidArgument(f"-hash_schema #{i}: needs 'columns' and an integer 'num_buckets'")
            rp.add_hash_partitions(d.get("columns") or [], d["num_buckets"], d.get("seed"))
        al.add_custom_range_partition(rp)

    await _alter(await ctx.client(), a.table_name, build)
    return Result(text="")


@verb("table", "drop_range_partition", help="Drop a range partition of table", args=_range_args(False))
async def drop_range_partition(ctx: Context, a: argparse.Namespace) -> Result:
    def build(al: Any, t: Table) -> None:
        lo, hi, lt, ut = _bounds(t, a)
        al.drop_range_partition(lo, hi, lt, ut)

    await _alter(await ctx.client(), a.table_name, build)
    return Result(text="")


# --- data: scan, copy, statistics, locate_row -----------------------------------------------------------------


def scan_flags(p: argparse.ArgumentParser) -> None:
    """Kudu's flags of ``table scan`` and ``perf table_scan``."""
    flag(p, "columns", help="comma-separated columns to scan [all]")
    flag(
        p,
        "predicates",
        default="",
        help='Kudu\'s JSON predicates, e.g. \'["AND", [">=", "key", 5], ["IN", "c", [1, 2]], ["NULL", "d"]]\'',
    )
    flag(p, "tablets", metavar="TABLET_ID[,...]", help="only these tablets [all]")
    flag(p, "num_threads", type=int, default=2, help="tablets scanned at once (concurrent scanners) [2]")
    flag(p, "fault_tolerant", type=bool, help="resumable scans, in key order per tablet [false]")
    flag(p, "fill_cache", type=bool, default=True, help="let the scan fill the block cache [true]")
    flag(p, "scan_batch_size", type=int, default=-1, help="batch size in bytes; -1: the server's default [-1]")
    flag(p, "replica_selection", default="CLOSEST", help="CLOSEST or LEADER [CLOSEST]")


def scan_options(a: argparse.Namespace, limit: int | None = None) -> table_tool.ScanOptions:
    return table_tool.ScanOptions(
        columns=csv_list(a.columns, "-columns"),
        predicates=a.predicates or None,
        tablets=csv_list(a.tablets, "-tablets"),
        num_threads=a.num_threads,
        fault_tolerant=a.fault_tolerant,
        fill_cache=a.fill_cache,
        scan_batch_size=a.scan_batch_size,
        replica_selection=a.replica_selection,
        limit=limit,
        progress=show_progress(),
    )


def _scan_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to scan")
    scan_flags(p)
    flag(p, "row_count_only", type=bool, help="print only the row count [false]")
    flag(p, "limit", type=int, help="stop after this many rows (not a Kudu flag) [all]")
    add_format_flag(p, "pretty", table_tool.SCAN_FORMATS)


@verb(
    "table",
    "scan",
    help="Scan rows from a table: Kudu's row text (pretty), CSV with a header, or JSON Lines",
    args=_scan_args,
)
async def table_scan(ctx: Context, a: argparse.Namespace) -> Result:
    opts = scan_options(a, a.limit)
    client = await ctx.client()
    if a.row_count_only:
        res = await table_tool.scan_tablets(client, a.table_name, opts, lambda batch: None)
        return object_result(res, a.format, lambda r: f"Total count {r['rows']} cost {r['seconds']} seconds")
    sys.stdout.flush()  # rows go to the byte stream below the text one
    await table_tool.scan(client, a.table_name, opts, a.format, sys.stdout.buffer)
    return Result(text="")


def _copy_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the source table")
    p.add_argument("dest_master_addresses", help="comma-separated master addresses of the destination cluster")
    flag(p, "dst_table", default="", help="the destination table [the source's name]")
    flag(p, "create_table", type=bool, default=True, help="create the destination table if it does not exist [true]")
    flag(
        p,
        "create_table_replication_factor",
        type=int,
        default=-1,
        help="replication factor of a created destination table; -1: the source's [-1]",
    )
    flag(p, "write_type", choices=WRITE_TYPES, default="insert", help="insert, insert_ignore, upsert, upsert_ignore")
    flag(p, "predicates", default="", help="only rows matching these (Kudu's JSON predicates)")
    add_format_flag(p, "pretty", ("pretty", "json"))


@verb("table", "copy", help="Copy table data to another table (in the same cluster or another one)", args=_copy_args)
async def table_copy(ctx: Context, a: argparse.Namespace) -> Result:
    if a.create_table_replication_factor != -1 and not a.create_table:
        raise UsageError("-create_table_replication_factor is meaningless when -create_table=false")
    client = await ctx.client()
    same = csv_list(a.dest_master_addresses, "dest_master_addresses") == csv_list(
        a.master_addresses, "master_addresses"
    )
    dst_client = None if same else await ctx.client(a.dest_master_addresses)
    dst = a.dst_table or a.table_name
    if same and dst == a.table_name:
        raise UsageError("copying a table onto itself: give -dst_table or another cluster")
    options = table_tool.CopyOptions(
        create_table=a.create_table,
        write_type=a.write_type,
        predicates=a.predicates or None,
        num_replicas=None if a.create_table_replication_factor == -1 else a.create_table_replication_factor,
        progress=show_progress(),
    )
    res = await table_tool.copy(client, a.table_name, dst, dst_client, options)
    return object_result(
        res,
        a.format,
        lambda r: (
            f"copied {r['rows']:,} rows from {r['source']} to {r['destination']} in "
            f"{r['seconds']} s ({r['rows_per_s'] or 0:,} rows/s)\nTotal count {r['rows']} cost {r['seconds']} seconds"
        ),
    )


def _stats_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to get statistics")
    flag(p, "show_tablets", type=bool, help="also each tablet's on-disk size and live row count [false]")
    add_format_flag(p, "pretty", ("pretty", "json"))


def _render_stats(s: dict[str, Any]) -> str:
    def limit(v: int) -> str:
        return "N/A" if v < 0 else f"{v:,}"

    lines = [
        f"TABLE {s['table']}",
        f"  live row count: {s['live_row_count']:,}",
        f"  on disk size: {s['on_disk_size']:,} bytes (leaders; {s['on_disk_size_all_replicas']:,} bytes "
        "with every replica and WAL)",
        f"  memory: {s['memory_size']:,} bytes",
        f"  on disk size limit: {limit(s['disk_size_limit'])}",
        f"  live row count limit: {limit(s['row_count_limit'])}",
        f"  tablets: {s['num_tablets']}, replication factor {s['num_replicas']}",
    ]
    if s["replicas_unreachable"]:
        lines.append("  unreachable replicas: " + "; ".join(s["replicas_unreachable"]))
    if s.get("show_tablets"):
        rows = []
        for t in s["tablets"]:
            leader = next((r for r in t["replicas"] if r.get("role") == "LEADER" and "error" not in r), None)
            rows.append(
                {
                    "tablet_id": t["tablet_id"],
                    "on_disk_size": None if leader is None else leader["on_disk_data_bytes"],
                    "live_row_count": t["live_row_count"],
                }
            )
        lines += ["TABLETS", rows_result(rows, ["tablet_id", "on_disk_size", "live_row_count"], "pretty").text or ""]
    return "\n".join(lines)


@verb(
    "table",
    "statistics",
    help="Get table statistics: live rows (exact, counted by each tablet's leader), bytes on disk and in memory, "
    "limits",
    args=_stats_args,
)
async def table_statistics(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    stats = await table_tool.statistics(client, a.table_name)
    limits = await client.get_table_statistics(a.table_name)
    stats.update(
        disk_size_limit=limits.on_disk_size_limit,
        row_count_limit=limits.live_row_count_limit,
        show_tablets=a.show_tablets,
    )
    return object_result(stats, a.format, _render_stats)


def _locate_args(p: argparse.ArgumentParser) -> None:
    _name(p, "Name of the table to look up against")
    p.add_argument("primary_key", help="the primary key as a JSON array of values, e.g. '[1, \"a\"]'")
    flag(
        p,
        "check_row_existence",
        type=bool,
        help="also look the row up on the tablet's leader and print it; exit 1 if it does not exist [false]",
    )


@verb("table", "locate_row", help="Locate which tablet a row belongs to", args=_locate_args)
async def locate_row(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    res = await table_tool.locate_row(client, a.table_name, a.primary_key, a.check_row_existence)
    lines = [res["tablet_id"]]
    if a.check_row_existence:
        lines.append(res["row"])
    return Result(data=res, text="\n".join(lines))
