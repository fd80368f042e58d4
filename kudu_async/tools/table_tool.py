"""``kudu-admin table ...``: list, describe, create (from Kudu's JSON table spec), delete, scan, copy,
statistics. Everything goes through the public client (``kudu_async.client``), as a user's script would.

The JSON formats are Kudu's own, so specs and predicates written for ``kudu table create`` /
``kudu table scan -predicates`` work unchanged:

- table spec: ``{"table_name", "schema": {"columns": [{"column_name", "column_type", "is_nullable",
  "default_value", "comment", "encoding", "compression", "type_attributes": {"precision", "scale",
  "length"}}], "key_column_names": [...]}, "partition": {"hash_partitions": [{"columns", "num_buckets",
  "seed"}], "range_partition": {"columns", "range_bounds": [{"lower_bound": {"bound_type",
  "bound_values"}, "upper_bound": {...}}]}}, "num_replicas"}``;
- predicates: ``["AND", ["=", "col", v], [">=", "col", v], ["IN", "col", [v, ...]], ["NULL", "col"],
  ["NOTNULL", "col"]]`` (a lone comparison without ``AND`` is accepted too).

Values in JSON are converted by column type: timestamps and dates as ISO-8601 strings (or integer
microseconds / days), decimals as strings or numbers, binary as UTF-8 strings.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pacsv

from kudu_async.client.aio import AsyncClient
from kudu_async.client.meta_cache import TabletLocation
from kudu_async.client.schema_builder import Partitioning, SchemaBuilder
from kudu_async.client.table import OPERATIONS, Predicate, Table
from kudu_async.common import types as T
from kudu_async.common.errors import KuduBadStatus, KuduCorruption, KuduInvalidArgument
from kudu_async.common.key_encoding import decode_values
from kudu_async.common.retry import Deadline
from kudu_async.common.schema import ColumnSchema, Schema

COPY_BATCH_ROWS = 100_000  # rows per apply_arrow call of ``table copy``


class Progress:
    """Progress of a long command on stderr: redrawn in place on a terminal, a line every 5 s otherwise."""

    def __init__(
        self, what: str, total: int | None = None, out: IO[str] | None = None, enabled: bool = True, unit: str = "rows"
    ) -> None:
        self.what, self.total, self.enabled, self.unit = what, total, enabled, unit
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty()
        self.t0 = time.monotonic()
        self._last = self.t0
        self.done = 0

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if not self.enabled or now - self._last < (0.2 if self.tty else 5.0):
            return
        self._last = now
        self._draw(now, end="\r" if self.tty else "\n")

    def finish(self) -> None:
        if self.enabled:
            self._draw(time.monotonic(), end="\n")

    def _draw(self, now: float, end: str) -> None:
        took = max(now - self.t0, 1e-9)
        of = ""
        if self.total:
            pct = 100.0 * self.done / self.total
            width = 30
            fill = int(width * min(1.0, self.done / self.total))
            of = f" [{'#' * fill}{'.' * (width - fill)}] {pct:5.1f}% of {self.total:,}"
        rate = self.done / took
        shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}"
        self.out.write(f"{self.what}: {self.done:,} {self.unit}{of}, {shown} {self.unit}/s{end}")
        self.out.flush()


# --- JSON table spec ------------------------------------------------------------------------------------


def _iso_timestamp(v: str) -> dt.datetime:
    ts = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)


def _bool_word(v: str) -> Any:
    """``true``/``false`` in any case as a bool; any other string is left for the column's own check."""
    return v.lower() == "true" if v.lower() in ("true", "false") else v


# How a string in a JSON spec reads as a value of each type (integers: see json_value).
_FROM_STRING: dict[T.KuduType, Callable[[str], Any]] = {
    T.UNIXTIME_MICROS: _iso_timestamp,
    T.DATE: dt.date.fromisoformat,
    T.BINARY: lambda v: v.encode("utf-8"),
    T.FLOAT: float,
    T.DOUBLE: float,
    T.BOOL: _bool_word,
}


def json_value(col: ColumnSchema, v: Any) -> Any:
    """A value given in JSON (a predicate, a default, a range bound) as the column's Python value."""
    if v is None:
        return None
    kt = col.type
    try:
        if kt is T.DECIMAL:
            exact = isinstance(v, str | int | float) and not isinstance(v, bool)
            return Decimal(str(v)) if exact else v
        if isinstance(v, str):
            # Kudu's spec gives integer bound values as strings.
            parse = _FROM_STRING.get(kt) or (int if T.int_bounds(kt) is not None else None)
            if parse is not None:
                return parse(v)
    except (ValueError, InvalidOperation):
        raise KuduInvalidArgument(f"column '{col.name}': cannot read {v!r} as {kt.name}") from None
    return v


def _obj(d: Any, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise KuduInvalidArgument(f"{what} must be a JSON object, got {type(d).__name__}")
    return d


def _list_of_str(v: Any, what: str) -> list[str]:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        raise KuduInvalidArgument(f"{what} must be a non-empty list of column names")
    return v


def spec_to_create_args(spec: Any) -> tuple[str, Schema, Partitioning, int | None, dict[str, str]]:
    """Kudu's JSON table spec -> (name, schema, partitioning, num_replicas, {owner, comment}), every field
    checked (the master checks owner and comment lengths)."""
    spec = _obj(spec, "the table spec")
    name = spec.get("table_name")
    if not isinstance(name, str) or not name:
        raise KuduInvalidArgument("the table spec needs 'table_name'")
    schema = _schema_from_spec(_obj(spec.get("schema"), "'schema'"))
    part = _partitioning_from_spec(_obj(spec.get("partition") or {}, "'partition'"), schema)
    n_rep = spec.get("num_replicas")
    if n_rep is not None and (isinstance(n_rep, bool) or not isinstance(n_rep, int)):
        raise KuduInvalidArgument("'num_replicas' must be an integer")
    extra = {}
    for key in ("owner", "comment"):
        if spec.get(key) is not None:
            if not isinstance(spec[key], str):
                raise KuduInvalidArgument(f"'{key}' must be a string")
            extra[key] = spec[key]
    return name, schema, part, n_rep, extra


def _schema_from_spec(sch: dict[str, Any]) -> Schema:
    """The spec's ``schema``: its columns (type, nullability, attributes, default) and key."""
    cols = sch.get("columns")
    if not isinstance(cols, list) or not cols:
        raise KuduInvalidArgument("'schema.columns' must be a non-empty list")
    keys = _list_of_str(sch.get("key_column_names"), "'schema.key_column_names'")
    b = SchemaBuilder()
    for i, c in enumerate(cols):
        c = _obj(c, f"column #{i}")
        cname = c.get("column_name")
        if not isinstance(cname, str):
            raise KuduInvalidArgument(f"column #{i} needs 'column_name'")
        ctype = c.get("column_type")
        if not isinstance(ctype, str):
            raise KuduInvalidArgument(f"column '{cname}' needs 'column_type'")
        attrs = _obj(c.get("type_attributes") or {}, f"column '{cname}': 'type_attributes'")
        spec_c = b.add_column(
            cname,
            type_=ctype,
            nullable=bool(c.get("is_nullable", cname not in keys)),
            precision=attrs.get("precision"),
            scale=attrs.get("scale"),
            length=attrs.get("length"),
            comment=c.get("comment"),
            encoding=c.get("encoding"),
            compression=c.get("compression"),
        )
        if c.get("default_value") is not None:
            tmp = spec_c.to_column(key=False)
            spec_c.default(json_value(tmp, c["default_value"]))
    b.set_primary_keys(keys)
    return b.build()


def _partitioning_from_spec(p: dict[str, Any], schema: Schema) -> Partitioning:
    """The spec's ``partition``: hash dimensions, then range columns and bounds."""
    part = Partitioning()
    for i, h in enumerate(p.get("hash_partitions") or []):
        h = _obj(h, f"hash_partitions #{i}")
        n = h.get("num_buckets")
        if isinstance(n, bool) or not isinstance(n, int):
            raise KuduInvalidArgument(f"hash_partitions #{i}: 'num_buckets' must be an integer")
        part.add_hash_partitions(_list_of_str(h.get("columns"), f"hash_partitions #{i}: 'columns'"), n, h.get("seed"))
    rp = p.get("range_partition")
    if rp is not None:
        rp = _obj(rp, "'range_partition'")
        rcols = rp.get("columns", [])
        if not isinstance(rcols, list) or not all(isinstance(x, str) for x in rcols):
            raise KuduInvalidArgument("'range_partition.columns' must be a list of column names")
        part.set_range_partition_columns(rcols)
        rc = [schema.column(c) for c in rcols if c in schema]
        for j, rb in enumerate(rp.get("range_bounds") or []):
            rb = _obj(rb, f"range_bounds #{j}")
            lo, lt = _bound(rb.get("lower_bound"), rc, f"range_bounds #{j}: lower_bound", "inclusive")
            hi, ut = _bound(rb.get("upper_bound"), rc, f"range_bounds #{j}: upper_bound", "exclusive")
            part.add_range_partition(lo, hi, lt, ut)
    elif p.get("hash_partitions"):
        part.set_range_partition_columns([])
    return part


def _bound(b: Any, cols: list[ColumnSchema], what: str, default_type: str) -> tuple[Any, str]:
    if b is None:
        return None, default_type
    b = _obj(b, what)
    kind = str(b.get("bound_type", default_type)).lower()
    if kind not in ("inclusive", "exclusive"):
        raise KuduInvalidArgument(f"{what}: 'bound_type' must be inclusive or exclusive")
    vals = b.get("bound_values")
    if not isinstance(vals, list) or len(vals) != len(cols):
        raise KuduInvalidArgument(
            f"{what}: 'bound_values' must list one value per range column ({[c.name for c in cols]})"
        )
    return tuple(json_value(c, v) for c, v in zip(cols, vals, strict=True)), kind


# --- predicates -----------------------------------------------------------------------------------------

_OPS = {"=": "__eq__", "<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def parse_predicates(table: Table, text: str | None) -> list[Predicate]:
    """Kudu's JSON predicate list, bound to ``table`` (unknown columns and bad values are named)."""
    if not text:
        return []
    try:
        tree = json.loads(text)
    except json.JSONDecodeError as e:
        raise KuduInvalidArgument(f"predicates are not valid JSON: {e}") from None
    if not isinstance(tree, list) or not tree:
        raise KuduInvalidArgument('predicates must be a JSON list like ["AND", [">=", "key", 5]]')
    items = tree[1:] if isinstance(tree[0], str) and tree[0].upper() == "AND" else [tree]
    out = []
    for p in items:
        if not isinstance(p, list) or len(p) < 2 or not isinstance(p[0], str) or not isinstance(p[1], str):
            raise KuduInvalidArgument(f"bad predicate {p!r}: expected [op, column, value...]")
        op, name = p[0].upper(), p[1]
        col = table[name]
        if op in ("NULL", "IS NULL"):
            out.append(col.is_null())
        elif op in ("NOTNULL", "IS NOT NULL"):
            out.append(col.is_not_null())
        elif op == "IN":
            if len(p) != 3 or not isinstance(p[2], list):
                raise KuduInvalidArgument(f"bad predicate {p!r}: IN takes a list of values")
            out.append(col.in_list([json_value(col.spec, v) for v in p[2]]))
        elif op in _OPS:
            if len(p) != 3:
                raise KuduInvalidArgument(f"bad predicate {p!r}: {op} takes one value")
            out.append(getattr(col, _OPS[op])(json_value(col.spec, p[2])))
        else:
            raise KuduInvalidArgument(f"unknown predicate operator {p[0]!r} (=, <, <=, >, >=, IN, NULL, NOTNULL)")
    return out


# --- describe -------------------------------------------------------------------------------------------


def range_partitions(table: Table, tablets: Sequence[TabletLocation]) -> list[tuple[Any, Any]]:
    """The table's range partitions as (lower, upper) value tuples (None = unbounded), in key order."""
    ps = table.partition_schema
    cols = [table.schema.column(c) for c in ps.range_schema.columns]
    seen: dict[tuple[bytes, bytes], None] = {}
    for t in tablets:
        seen.setdefault((t.partition.range_key_start, t.partition.range_key_end), None)
    out = []
    for lo, hi in sorted(seen):
        try:
            out.append(
                (
                    decode_values(cols, lo, allow_prefix=True) if lo else None,
                    decode_values(cols, hi, allow_prefix=True) if hi else None,
                )
            )
        except KuduCorruption:
            raise KuduInvalidArgument(
                f"table {table.name}: a range bound ({lo.hex()}..{hi.hex()}) was given as exclusive-lower or "
                "inclusive-upper and cannot be shown as values"
            ) from None
    return out


def _sql(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, dt.datetime | dt.date):
        return f"'{v.isoformat()}'"
    return str(v)


async def describe(client: AsyncClient, name: str) -> dict[str, Any]:
    table = await client.table(name)
    locs = await client.meta.locations(
        table.id, Deadline(client.admin_timeout_ms / 1000, f"locations of {name}"), refresh=True
    )
    ps = table.partition_schema
    ranges: list[Any]
    try:
        ranges = [
            [list(lo) if lo else None, list(hi) if hi else None] for lo, hi in range_partitions(table, locs.tablets)
        ]
    except KuduInvalidArgument as e:
        ranges = [str(e)]
    return {
        "name": table.name,
        "table_id": table.id,
        "num_replicas": table.num_replicas,
        "owner": table.owner,
        "comment": table.comment,
        "schema_version": table.schema_version,
        "schema": table.schema.to_dict(),
        "hash_partitions": [
            {"columns": list(d.columns), "num_buckets": d.num_buckets, "seed": d.seed} for d in ps.hash_dimensions
        ],
        "range_columns": list(ps.range_schema.columns),
        "range_partitions": ranges,
        "tablets": [{"tablet_id": t.tablet_id, "replicas": [r.to_dict() for r in t.replicas]} for t in locs.tablets],
    }


def render_describe(d: dict[str, Any]) -> str:
    """Kudu's ``table describe`` shape: a CREATE-TABLE-like text."""
    schema = Schema.from_dict(d["schema"])
    lines = [f"TABLE {d['name']} ("]
    for c in schema.columns:
        extra = "" if c.nullable else " NOT NULL"
        if c.default is not None:
            extra += f" DEFAULT {_sql(c.default)}"
        if c.encoding:
            extra += f" ENCODING {c.encoding}"
        if c.compression:
            extra += f" COMPRESSION {c.compression}"
        if c.comment:
            extra += f" COMMENT {_sql(c.comment)}"
        lines.append(f"    {c.name} {c.type_label.upper()}{extra},")
    lines.append(f"    PRIMARY KEY ({', '.join(schema.key_names)})")
    lines.append(")")
    parts = [f"HASH ({', '.join(h['columns'])}) PARTITIONS {h['num_buckets']}" for h in d["hash_partitions"]]
    if d["range_columns"]:
        rl = []
        for r in d["range_partitions"]:
            if isinstance(r, str):
                rl.append(f"    -- {r}")
                continue
            lo, hi = r
            lo_s = "" if lo is None else f"{_sql(tuple(lo) if len(lo) > 1 else lo[0])} <= "
            hi_s = "" if hi is None else f" < {_sql(tuple(hi) if len(hi) > 1 else hi[0])}"
            rl.append(f"    PARTITION {lo_s}VALUES{hi_s}" if lo_s or hi_s else "    PARTITION UNBOUNDED")
        parts.append(f"RANGE ({', '.join(d['range_columns'])}) (\n" + ",\n".join(rl) + "\n)")
    lines.append(",\n".join(parts))
    if d.get("owner"):
        lines.append(f"OWNER {d['owner']}")
    lines.append(f"REPLICAS {d['num_replicas']}")
    if d.get("comment"):
        lines.append(f"COMMENT {_sql(d['comment'])}")
    lines.append(f"-- {len(d['tablets'])} tablets, schema version {d['schema_version']}, id {d['table_id']}")
    return "\n".join(lines)


# --- scan -----------------------------------------------------------------------------------------------


async def scan(
    client: AsyncClient,
    name: str,
    columns: Sequence[str] | None,
    predicates: str | None,
    fmt: str,
    limit: int | None,
    out: IO[bytes],
    progress: bool = True,
) -> int:
    """Stream the rows of ``name`` to ``out`` as CSV (with a header) or JSON Lines; returns the row count."""
    table = await client.table(name)
    sc = client.new_scanner(table)
    if columns:
        sc.set_projected_column_names(list(columns))
    sc.add_predicates(parse_predicates(table, predicates))
    if limit is not None:
        sc.set_limit(limit)
    sc.set_fault_tolerant()
    prog = Progress(f"scan {name}", enabled=progress)
    header = True
    rows = 0
    async for batch in sc.xbatches():
        if fmt == "csv":
            buf = io.BytesIO()
            pacsv.write_csv(_csv_safe(batch), buf, pacsv.WriteOptions(include_header=header))
            out.write(buf.getvalue())
            header = False
        else:
            for rec in batch.to_pylist():  # JSON is for scripts and small scans; CSV is the bulk format
                out.write(json.dumps(rec, default=_json_default).encode() + b"\n")
        rows += batch.num_rows
        prog.update(batch.num_rows)
    if fmt == "csv" and header:  # an empty result still gets its header
        buf = io.BytesIO()
        pacsv.write_csv(_csv_safe(sc.output_schema().empty_table()), buf)
        out.write(buf.getvalue())
    out.flush()
    prog.finish()
    await sc.close()
    return rows


def _csv_safe(t: pa.Table) -> pa.Table:
    """Arrow's CSV writer takes no binary or decimal-less oddities: binary columns go out as hex text."""
    cols = []
    for i, f in enumerate(t.schema):
        c = t.column(i)
        if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            c = pa.array([None if v is None else v.hex() for v in c.to_pylist()], pa.string())
        cols.append(c)
    return pa.table(cols, names=t.schema.names)


def _json_default(v: Any) -> Any:
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


# --- copy -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CopyOptions:
    """How ``copy`` writes: into a table it creates first or an existing one, with which write type,
    which source rows (predicates in the ``scan`` syntax), and whether it shows progress."""

    create_table: bool = False
    write_type: str = "insert"
    predicates: str | None = None
    num_replicas: int | None = None  # of a table it creates (default: the source's)
    progress: bool = True

    def __post_init__(self) -> None:
        wt = self.write_type
        if wt not in OPERATIONS or "delete" in wt or "update" in wt:
            raise KuduInvalidArgument(f"write type must be insert, insert_ignore, upsert or upsert_ignore, got {wt!r}")


async def copy(
    client: AsyncClient,
    src: str,
    dst: str,
    dst_client: AsyncClient | None = None,
    options: CopyOptions = CopyOptions(),
) -> dict[str, Any]:
    """Copy the rows of ``src`` into ``dst`` (maybe on another cluster), optionally creating it with the
    source's schema and partitioning. Rows move as Arrow batches through ``apply_arrow``."""
    write_type = options.write_type
    target = dst_client or client
    table = await client.table(src)
    if options.create_table:
        await _create_like(client, table, target, dst, options.num_replicas or table.num_replicas)
    out = await target.table(dst)
    missing = [c for c in table.schema.names if c not in out.schema]
    if missing:
        raise KuduInvalidArgument(f"table {dst} has no columns {missing} of {src}")
    sc = client.new_scanner(table)
    sc.add_predicates(parse_predicates(table, options.predicates))
    sc.set_fault_tolerant()
    session = target.new_session(timeout_ms=max(30_000, target.rpc_timeout_ms))
    prog = Progress(f"copy {src} -> {dst}", enabled=options.progress)
    rows = 0
    t0 = time.monotonic()
    pending: list[pa.RecordBatch] = []
    buffered = 0

    async def write(batches: list[pa.RecordBatch]) -> None:
        tbl = pa.Table.from_batches(batches).combine_chunks()
        await session.apply_arrow(out, tbl, op=write_type)

    async for batch in sc.xbatches():
        pending += batch.to_batches()
        buffered += batch.num_rows
        if buffered >= COPY_BATCH_ROWS:
            await write(pending)
            rows += buffered
            prog.update(buffered)
            pending, buffered = [], 0
    if buffered:
        await write(pending)
        rows += buffered
        prog.update(buffered)
    prog.finish()
    await sc.close()
    took = time.monotonic() - t0
    return {
        "source": src,
        "destination": dst,
        "rows": rows,
        "seconds": round(took, 3),
        "rows_per_s": round(rows / took) if took > 0 else None,
        "write_type": write_type,
    }


async def _create_like(client: AsyncClient, table: Table, target: AsyncClient, dst: str, num_replicas: int) -> None:
    """Create ``dst`` through ``target`` with the schema and partitioning (its ranges as they are now) of
    ``table``, read through ``client``."""
    locs = await client.meta.locations(
        table.id, Deadline(client.admin_timeout_ms / 1000, f"locations of {table.name}"), refresh=True
    )
    part = Partitioning()
    for d in table.partition_schema.hash_dimensions:
        part.add_hash_partitions(list(d.columns), d.num_buckets, d.seed)
    part.set_range_partition_columns(list(table.partition_schema.range_schema.columns))
    if table.partition_schema.range_schema.columns:
        for lo, hi in range_partitions(table, locs.tablets):
            part.add_range_partition(lo, hi)
    schema = Schema([c for c in table.schema.columns], table.schema.num_key_columns)
    await target.create_table(dst, schema, part, n_replicas=num_replicas)


# --- statistics -----------------------------------------------------------------------------------------


async def statistics(client: AsyncClient, name: str) -> dict[str, Any]:
    """Live rows (exact: each tablet's leader counts them at one snapshot) and bytes on disk and in
    memory, summed over the leaders (one copy of the data) and over all replicas."""
    table = await client.table(name)
    deadline = Deadline(client.admin_timeout_ms / 1000, f"statistics of {name}")
    locs = await client.meta.locations(table.id, deadline, refresh=True)

    async def one(t: TabletLocation) -> dict[str, Any]:
        counted = await client.call_tablet_leader(table, t.tablet_id, "Checksum", {"tablet_id": t.tablet_id}, deadline)

        async def sizes(r: Any) -> dict[str, Any]:
            try:
                got = await client.rpc.call(
                    r.rpc_address,
                    "TabletServer",
                    "GetTabletStats",
                    {"tablet_id": t.tablet_id},
                    timeout_s=deadline.rpc_timeout(client.rpc_timeout_ms / 1000),
                )
                return {"uuid": r.uuid, "role": r.role, **got}
            except KuduBadStatus as e:
                return {"uuid": r.uuid, "role": r.role, "error": str(e)}

        reps = await asyncio.gather(*(sizes(r) for r in t.replicas))
        return {"tablet_id": t.tablet_id, "live_row_count": counted["rows"], "replicas": list(reps)}

    per = await asyncio.gather(*(one(t) for t in locs.tablets))
    ok = [s for p in per for s in p["replicas"] if "error" not in s]
    leaders = [s for s in ok if s["role"] == "LEADER"]
    return {
        "table": name,
        "table_id": table.id,
        "num_tablets": len(per),
        "num_replicas": table.num_replicas,
        "live_row_count": sum(p["live_row_count"] for p in per),
        # One copy of the data (the leaders'), as Kudu's statistics count it; and every replica's.
        "on_disk_size": sum(s["on_disk_data_bytes"] for s in leaders),
        "on_disk_size_all_replicas": sum(s["on_disk_data_bytes"] + s["on_disk_wal_bytes"] for s in ok),
        "memory_size": sum(s["memrowset_bytes"] + s["delta_memstore_bytes"] for s in leaders),
        "replicas_unreachable": [f"{s['uuid']}: {s['error']}" for p in per for s in p["replicas"] if "error" in s],
        "tablets": per,
    }
