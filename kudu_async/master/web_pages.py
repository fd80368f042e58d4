"""The master's web pages at Kudu's paths: ``/tablet-servers`` (with the cluster view picture),
``/masters``, ``/tables`` and ``/table?id=`` (schema, partitioning, tablets with their replicas and
leader, the table's CREATE TABLE statement).

Each page is HTML for a browser and its data as JSON for everyone else (``server/webui/render.py``);
``/tablet-servers`` keeps its JSON list of tserver descriptors. The data functions here take plain
records, so tests check them without a cluster. Any master answers from its own catalog copy; a
follower's may lag the leader's, which the pages say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from kudu_async.common.partition import PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.master.catalog_manager import CatalogManager
from kudu_async.master.messages import TabletLocation
from kudu_async.master.sys_catalog import TableRecord
from kudu_async.master.ts_manager import TSManager
from kudu_async.rpc.messages import to_builtins
from kudu_async.server.config import NodeConfig
from kudu_async.server.webui import pages, render, svg
from kudu_async.server.webui.sql import (
    hash_text,
    partition_schema_text,
    partition_text,
    quote_ident,
    range_bounds,
    range_text,
    sql_literal,
)


class WebMaster(Protocol):
    """What the pages read of the master (``master.Master``)."""

    catalog_manager: CatalogManager
    ts_manager: TSManager
    config: NodeConfig

    def tserver_descriptors(self) -> list[dict[str, Any]]: ...

    def masters(self) -> list[dict[str, Any]]: ...

    def leader_info(self) -> dict[str, Any]: ...

    def is_catalog_leader(self) -> bool: ...


# --- CREATE TABLE -----------------------------------------------------------------------------------------

_IMPALA_TYPES = {
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
    "string": "STRING",
    "binary": "BINARY",
    "unixtime_micros": "TIMESTAMP",
    "date": "DATE",
}


def impala_type(c: ColumnSchema) -> str:
    """The Impala type of a column (``DECIMAL(p,s)``, ``VARCHAR(n)``, ``ARRAY<...>`` included)."""
    kt = c.scalar_type
    if kt.name == "decimal":
        base = f"DECIMAL({c.precision},{c.scale})"
    elif kt.name == "varchar":
        base = f"VARCHAR({c.length})"
    else:
        base = _IMPALA_TYPES[kt.name]
    return base if c.nested_type is None else f"ARRAY<{base}>"


def impala_table_name(name: str) -> str:
    """Kudu's Impala tables are named ``impala::db.table``; others map to a table of the same name."""
    if name.startswith("impala::") and "." in name:
        db, _, table = name[len("impala::") :].partition(".")
        return f"{quote_ident(db)}.{quote_ident(table)}"
    return quote_ident(name)


def impala_create_table(
    name: str,
    schema: Schema,
    ps: PartitionSchema,
    ranges: Sequence[tuple[bytes, bytes]],
    num_replicas: int,
    master_addresses: Sequence[str],
    comment: str | None = None,
) -> str:
    """The Impala CREATE TABLE statement that makes this table: columns with their attributes, the
    primary key, hash and range partitioning (a range's own hash schema included), replication."""
    lines = []
    for c in schema.columns:
        if c.auto_incrementing:
            continue
        parts = [f"  {quote_ident(c.name)} {impala_type(c)}", "NULL" if c.nullable else "NOT NULL"]
        if c.default is not None:
            parts.append(f"DEFAULT {sql_literal(c.default)}")
        if c.encoding:
            parts.append(f"ENCODING {pages.encoding_name(c.encoding)}")
        if c.compression:
            parts.append(f"COMPRESSION {pages.compression_name(c.compression)}")
        if c.block_size:
            parts.append(f"BLOCK_SIZE {c.block_size}")
        if c.comment:
            parts.append(f"COMMENT {sql_literal(c.comment)}")
        lines.append(" ".join(parts))
    unique = "" if schema.auto_incrementing_index is None else "NON UNIQUE "
    lines.append(f"  {unique}PRIMARY KEY ({', '.join(quote_ident(k) for k in schema.user_key_names)})")
    out = [f"CREATE TABLE {impala_table_name(name)} (", ",\n".join(lines), ")"]
    partitioning = hash_text(ps.hash_dimensions)
    bounds = [range_bounds(ps, lo, hi) for lo, hi in sorted(set(ranges))]
    if ps.range_schema.columns and bounds and bounds != [(None, None)]:
        items = []
        for (lo_key, _), (lo, hi) in zip(sorted(set(ranges)), bounds, strict=True):
            own = ps.hash_dimensions_for(lo_key)
            extra = "" if own == ps.hash_dimensions else " " + " ".join(hash_text(own))
            items.append(f"  {range_text(lo, hi)}{extra}")
        cols = ", ".join(quote_ident(c) for c in ps.range_schema.columns)
        partitioning.append(f"RANGE ({cols}) (\n" + ",\n".join(items) + "\n)")
    if partitioning:
        out.append("PARTITION BY " + ",\n".join(partitioning))
    if comment:
        out.append(f"COMMENT {sql_literal(comment)}")
    out.append("STORED AS KUDU")
    out.append(
        "TBLPROPERTIES (\n"
        f"  'kudu.master_addresses' = {sql_literal(','.join(master_addresses))},\n"
        f"  'kudu.num_tablet_replicas' = '{num_replicas}'\n)"
    )
    return "\n".join(out) + ";"


def impala_external_table(name: str, master_addresses: Sequence[str]) -> str:
    """The statement that maps the existing Kudu table into Impala (the form Kudu's table page shows)."""
    return (
        f"CREATE EXTERNAL TABLE {impala_table_name(name)} STORED AS KUDU\n"
        "TBLPROPERTIES (\n"
        f"  'kudu.table_name' = {sql_literal(name)},\n"
        f"  'kudu.master_addresses' = {sql_literal(','.join(master_addresses))}\n);"
    )


# --- page data ----------------------------------------------------------------------------------------------


def column_rows(schema: Schema) -> list[dict[str, Any]]:
    """The schema table of Kudu's table page (defaults as SQL literals)."""
    return pages.schema_rows(schema, sql_literal)


def tablet_rows(
    ps: PartitionSchema, locations: Sequence[TabletLocation], tserver_http: Mapping[str, str], scheme: str
) -> list[dict[str, Any]]:
    """Each tablet with its partition and replicas (role, address, link to the replica's page on its
    tablet server), leaders first, in partition-key order."""
    order = {"LEADER": 0, "FOLLOWER": 1, "LEARNER": 2}
    rows = []
    for loc in sorted(locations, key=lambda loc: loc.partition.partition_key_start):
        p = loc.partition
        replicas = []
        for r in sorted(loc.replicas, key=lambda r: (order.get(r.role, 3), r.uuid)):
            http = tserver_http.get(r.uuid)
            replicas.append(
                {
                    "uuid": r.uuid,
                    "role": r.role,
                    "rpc_address": r.rpc_address,
                    "href": f"{scheme}://{http}/tablet?id={loc.tablet_id}" if http else None,
                }
            )
        leader = next((r["uuid"] for r in replicas if r["role"] == "LEADER"), None)
        rows.append(
            {
                "tablet_id": loc.tablet_id,
                "state": loc.state,
                "partition": partition_text(ps, p.hash_buckets, p.range_key_start, p.range_key_end),
                "leader": leader,
                "replicas": replicas,
            }
        )
    return rows


def replica_distribution(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Replicas per tablet server of one table, and the skew (max - min count) Kudu's table page shows."""
    counts: dict[str, int] = {}
    for t in rows:
        for r in t["replicas"]:
            counts[r["uuid"]] = counts.get(r["uuid"], 0) + 1
    values = list(counts.values()) or [0]
    return {
        "counts": [{"tserver": u, "replicas": n} for u, n in sorted(counts.items())],
        "min_count": min(values),
        "max_count": max(values),
        "skew": max(values) - min(values),
    }


def version_summary(descriptors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for d in descriptors:
        v = out.setdefault(str(d.get("version") or "unknown"), {"version": str(d.get("version") or "unknown")})
        key = "live" if d.get("live") else "dead"
        v[key] = v.get(key, 0) + 1
    return [{"version": k, "live": v.get("live", 0), "dead": v.get("dead", 0)} for k, v in sorted(out.items())]


def cluster_counts(
    tables: Mapping[str, str], locations: Sequence[tuple[str, TabletLocation]]
) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Replicas per tserver and table name, and leaders per tserver, from ``(table_id, location)`` pairs."""
    replicas: dict[str, dict[str, int]] = {}
    leaders: dict[str, int] = {}
    for table_id, loc in locations:
        name = tables.get(table_id, table_id)
        for r in loc.replicas:
            per = replicas.setdefault(r.uuid, {})
            per[name] = per.get(name, 0) + 1
            if r.role == "LEADER":
                leaders[r.uuid] = leaders.get(r.uuid, 0) + 1
    return replicas, leaders


def _ts_label(d: Mapping[str, Any]) -> str:
    state = "" if d.get("state", "NONE") == "NONE" else f" [{d['state']}]"
    return f"{str(d['uuid'])[:12]}… {d.get('rpc_address', '')}{'' if d.get('live') else ' (dead)'}{state}"


# --- handlers ------------------------------------------------------------------------------------------------


def _catalog_note(master: WebMaster) -> str | None:
    if master.is_catalog_leader():
        return None
    info = master.leader_info()
    where = f"the leader is {info['leader_uuid']} at {info['leader_address']}" if info["leader_uuid"] else "no leader"
    return f"This master is not the catalog leader ({where}): its copy of the catalog may lag."


def _live_tables(cm: CatalogManager) -> list[TableRecord]:
    return sorted((t for t in cm.tables.values() if t.live), key=lambda t: t.name)


def _locations(cm: CatalogManager, t: TableRecord) -> list[TabletLocation]:
    return [cm.location(cm.tablets[tid]) for tid in t.tablet_ids if tid in cm.tablets]


def add_routes(app: web.Application, master: WebMaster) -> None:
    """The master's pages and their places in the nav bar."""

    def scheme(request: web.Request) -> str:
        return request.url.scheme or "http"

    async def tablet_servers(request: web.Request) -> web.Response:
        descriptors = master.tserver_descriptors()
        cm = master.catalog_manager
        states = cm.tserver_states()
        tables = _live_tables(cm)
        located = [(t.id, loc) for t in tables for loc in _locations(cm, t)]
        replicas, leaders = cluster_counts({t.id: t.name for t in tables}, located)
        view_rows = [
            {
                "uuid": d["uuid"],
                "label": _ts_label(d),
                "href": f"{scheme(request)}://{d['http_address']}/" if d.get("http_address") else None,
            }
            for d in descriptors
        ]
        picture = svg.cluster_view(view_rows, replicas, leaders, svg.table_colours([t.name for t in tables]))
        context = {
            "tservers": descriptors,
            "versions": version_summary(descriptors),
            "states": [{"uuid": u, "state": rec.state, "since": rec.since} for u, rec in sorted(states.items())],
            "cluster_view": picture,
            "scheme": scheme(request),
            "note": _catalog_note(master),
        }
        return render.page(request, "master_tservers.html", context, "Tablet Servers", json_body=descriptors)

    async def masters(request: web.Request) -> web.Response:
        rows = master.masters()
        context = {"masters": rows, "leader": master.leader_info(), "even": len(rows) % 2 == 0}
        return render.page(request, "masters.html", context, "Masters", json_body={"masters": rows})

    async def tables(request: web.Request) -> web.Response:
        cm = master.catalog_manager
        rows = []
        for t in sorted(cm.tables.values(), key=lambda t: t.name):
            rows.append(
                {
                    "name": t.name,
                    "table_id": t.id,
                    "state": t.state,
                    "owner": t.owner,
                    "comment": t.comment,
                    "num_tablets": len(t.tablet_ids),
                    "num_replicas": t.num_replicas,
                    "schema_version": t.schema_version,
                    "created_at": t.created_at,
                }
            )
        context = {"tables": rows, "note": _catalog_note(master)}
        return render.page(request, "tables.html", context, "Tables", json_body={"tables": rows})

    async def table(request: web.Request) -> web.Response:
        table_id = render.query_param(request, "id", required=True)
        cm = master.catalog_manager
        t = cm.find_table(table_id=table_id)
        schema = Schema.from_dict(t.schema)
        ps = PartitionSchema.from_dict(schema, t.partition_schema)
        locations = _locations(cm, t)
        http = {d["uuid"]: d["http_address"] for d in master.tserver_descriptors() if d.get("http_address")}
        rows = tablet_rows(ps, locations, http, scheme(request))
        ranges = [(loc.partition.range_key_start, loc.partition.range_key_end) for loc in locations]
        addresses = list(master.config.masters)
        record = {k: v for k, v in to_builtins(t).items() if k != "tablet_ids"}
        states: dict[str, int] = {}
        for r in rows:
            states[r["state"]] = states.get(r["state"], 0) + 1
        body = {
            **record,
            "tablets": [to_builtins(loc) for loc in locations],
            "columns": column_rows(schema),
            "partition_schema_text": partition_schema_text(ps),
            "tablet_rows": rows,
            "tablet_states": [{"state": s, "count": n} for s, n in sorted(states.items())],
            "replica_distribution": replica_distribution(rows),
            "create_table": impala_create_table(t.name, schema, ps, ranges, t.num_replicas, addresses, t.comment),
            "create_external_table": impala_external_table(t.name, addresses),
            "note": _catalog_note(master),
        }
        return render.page(request, "table.html", body, f"Table {t.name}")

    routes: Sequence[render.PageRoute] = (
        ("/tablet-servers", tablet_servers, "Tablet Servers"),
        ("/masters", masters, "Masters"),
        ("/tables", tables, "Tables"),
        ("/table", table, None),
    )
    render.add_pages(app, routes)
