"""The table verbs of ``kudu table ...``: describe, create (from Kudu's JSON table spec), scan, copy,
statistics, locate_row. Everything goes through the public client (``kudu_async.client``), as a user's script would.

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
from kudu_async.common.errors import KuduBadStatus, KuduCorruption, KuduIllegalState, KuduInvalidArgument, KuduNotFound
from kudu_async.common.key_encoding import decode_values
from kudu_async.common.retry import Deadline
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.tools.progress import progress

COPY_BATCH_ROWS = 100_000  # rows per apply_arrow call of ``table copy``


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

SCAN_FORMATS = ("pretty", "csv", "json")
MAX_SCAN_THREADS = 64
# Kudu's -replica_selection values and the client's.
REPLICA_SELECTIONS = {"CLOSEST": "closest_replica", "LEADER": "leader_only", "FIRST": "first_replica"}


@dataclass(frozen=True, kw_only=True)
class ScanOptions:
    """Kudu's ``table scan`` / ``perf table_scan`` flags: which columns, rows and tablets, how many tablets at
    once, and how the scanners read."""

    columns: Sequence[str] | None = None
    predicates: str | None = None
    tablets: Sequence[str] | None = None
    num_threads: int = 2  # Kudu's -num_threads
    fault_tolerant: bool = False
    fill_cache: bool = True
    scan_batch_size: int = -1  # bytes; negative: the server's default
    replica_selection: str = "CLOSEST"
    limit: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.num_threads <= MAX_SCAN_THREADS:
            raise KuduInvalidArgument(f"-num_threads must be 1..{MAX_SCAN_THREADS}, got {self.num_threads}")
        if self.replica_selection.upper() not in REPLICA_SELECTIONS:
            raise KuduInvalidArgument(
                f"-replica_selection must be one of {', '.join(REPLICA_SELECTIONS)}, got {self.replica_selection!r}"
            )
        if self.limit is not None and self.limit < 0:
            raise KuduInvalidArgument(f"-limit must be >= 0, got {self.limit}")


async def scan_tablets(
    client: AsyncClient, name: str, opts: ScanOptions, sink: Callable[[pa.Table], None]
) -> dict[str, Any]:
    """Scan ``name`` tablet by tablet, ``opts.num_threads`` tablets at once, handing every batch to ``sink``
    (on the loop, in arrival order); returns the count and time of the whole scan and of each tablet."""
    table = await client.table(name)
    builder = client.new_scan_token_builder(table)
    if opts.columns:
        builder.set_projected_column_names(list(opts.columns))
    builder.add_predicates(parse_predicates(table, opts.predicates))
    if opts.fault_tolerant:
        builder.set_fault_tolerant()
    builder.set_cache_blocks(opts.fill_cache)
    if opts.scan_batch_size >= 0:
        builder.set_batch_size_bytes(opts.scan_batch_size)
    builder.set_selection(REPLICA_SELECTIONS[opts.replica_selection.upper()])
    tokens = await builder.build()
    if opts.tablets:
        known = {t.location.tablet_id for t in tokens}
        unknown = [t for t in opts.tablets if t not in known]
        if unknown:
            raise KuduInvalidArgument(f"-tablets: table {name} has no tablet {', '.join(unknown)} to scan")
        tokens = [t for t in tokens if t.location.tablet_id in opts.tablets]
    prog = progress(None, f"scan {name}", opts.progress)
    queue = list(reversed(tokens))
    per_tablet: list[dict[str, Any]] = []
    remaining: list[int | None] = [opts.limit]  # rows still wanted (None: all)
    t0 = time.monotonic()

    async def worker() -> None:
        while queue and remaining[0] != 0:
            tok = queue.pop()
            sc = client.scanner_from_token(tok.serialize())
            t1 = time.monotonic()
            rows = 0
            try:
                async for batch in sc.xbatches():
                    left = remaining[0]
                    if left is not None:
                        batch = batch.slice(0, left)
                        remaining[0] = left - batch.num_rows
                    if batch.num_rows:
                        sink(batch)
                        rows += batch.num_rows
                        prog.update(batch.num_rows)
                    if remaining[0] == 0:
                        break
            finally:
                await sc.close()
            per_tablet.append(
                {"tablet_id": tok.location.tablet_id, "rows": rows, "seconds": round(time.monotonic() - t1, 3)}
            )

    # A limit is served in tablet order by one scanner at a time, so the first rows are the same each run.
    workers = 1 if opts.limit is not None else min(opts.num_threads, max(1, len(tokens)))
    await asyncio.gather(*(worker() for _ in range(workers)))
    prog.close()
    return {
        "table": name,
        "rows": sum(t["rows"] for t in per_tablet),
        "seconds": round(time.monotonic() - t0, 3),
        "tablets": sorted(per_tablet, key=lambda t: t["tablet_id"]),
    }


def row_texts(batch: pa.Table) -> list[str]:
    """Kudu's ``table scan`` row text, ``(int64 key=1, string v="a")``: for people (per-row Python)."""
    names = batch.schema.names
    labels = [_type_label(f.type) for f in batch.schema]
    out = []
    for rec in batch.to_pylist():
        cells = [f"{lab} {n}={_row_value(rec[n])}" for lab, n in zip(labels, names, strict=True)]
        out.append("(" + ", ".join(cells) + ")")
    return out


_ARROW_LABELS = (
    (pa.types.is_timestamp, "unixtime_micros"),
    (pa.types.is_date32, "date"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_binary, "binary"),
    (pa.types.is_large_binary, "binary"),
    (pa.types.is_boolean, "bool"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
)


def _type_label(t: pa.DataType) -> str:
    """Kudu's name of a column's type, from its Arrow type."""
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    return next((label for test, label in _ARROW_LABELS if test(t)), str(t))


def _row_value(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bytes):
        return json.dumps(v.decode("utf-8", "backslashreplace"))
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


async def scan(client: AsyncClient, name: str, opts: ScanOptions, fmt: str, out: IO[bytes]) -> dict[str, Any]:
    """Stream the rows of ``name`` to ``out``: Kudu's row text and its ``Total count`` line (``pretty``), CSV
    with a header (``csv``, the bulk format: Arrow's writer) or JSON Lines (``json``)."""
    if fmt not in SCAN_FORMATS:
        raise KuduInvalidArgument(f"-format must be one of {', '.join(SCAN_FORMATS)} for a scan, got {fmt!r}")
    header = [True]

    def sink(batch: pa.Table) -> None:
        if fmt == "csv":
            buf = io.BytesIO()
            pacsv.write_csv(_csv_safe(batch), buf, pacsv.WriteOptions(include_header=header[0]))
            out.write(buf.getvalue())
            header[0] = False
        elif fmt == "json":
            for rec in batch.to_pylist():  # JSON is for scripts and small scans; CSV is the bulk format
                out.write(json.dumps(rec, default=_json_default).encode() + b"\n")
        else:
            out.write("".join(line + "\n" for line in row_texts(batch)).encode())

    res = await scan_tablets(client, name, opts, sink)
    if fmt == "csv" and header[0]:  # an empty result still gets its header
        table = await client.table(name)
        sc = client.new_scanner(table)
        if opts.columns:
            sc.set_projected_column_names(list(opts.columns))
        buf = io.BytesIO()
        pacsv.write_csv(_csv_safe(sc.output_schema().empty_table()), buf)
        out.write(buf.getvalue())
    if fmt == "pretty":
        out.write(f"Total count {res['rows']} cost {res['seconds']} seconds\n".encode())
    out.flush()
    return res


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
    """How ``copy`` writes: into an existing table or, with ``create_table`` (Kudu's default), one it creates
    like the source when it does not exist; with which write type, which source rows (predicates in the
    ``scan`` syntax), and whether it shows progress."""

    create_table: bool = True
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
    if options.create_table and not await target.table_exists(dst):
        await _create_like(client, table, target, dst, options.num_replicas or table.num_replicas)
    out = await target.table(dst)
    missing = [c for c in table.schema.names if c not in out.schema]
    if missing:
        raise KuduInvalidArgument(f"table {dst} has no columns {missing} of {src}")
    sc = client.new_scanner(table)
    sc.add_predicates(parse_predicates(table, options.predicates))
    sc.set_fault_tolerant()
    session = target.new_session(timeout_ms=max(30_000, target.rpc_timeout_ms))
    prog = progress(None, f"copy {src} -> {dst}", options.progress)
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
    prog.close()
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


# --- locate_row -----------------------------------------------------------------------------------------


async def locate_row(client: AsyncClient, name: str, key_json: str, check_existence: bool) -> dict[str, Any]:
    """The tablet holding the row whose primary key is the JSON array ``key_json`` (equality predicates on
    every key column, pruned to the one tablet they can match) and, with ``check_existence``, the row as
    its leader has it (KuduNotFound when it does not exist)."""
    table = await client.table(name)
    try:
        vals = json.loads(key_json)
    except json.JSONDecodeError as e:
        raise KuduInvalidArgument(f"the primary key is not valid JSON: {e}") from None
    keys = table.schema.key_names
    if not isinstance(vals, list):
        raise KuduInvalidArgument(f"the primary key must be a JSON array of {len(keys)} value(s), e.g. [1]")
    if len(vals) != len(keys):
        raise KuduInvalidArgument(
            f"wrong number of key columns specified: expected {len(keys)} but received {len(vals)}"
        )
    builder = client.new_scan_token_builder(table)
    for col, v in zip(keys, vals, strict=True):
        if v is None:
            raise KuduInvalidArgument(f"key column '{col}' cannot be null")
        builder.add_predicate(table[col] == json_value(table.schema.column(col), v))
    builder.set_selection("leader_only")
    tokens = await builder.build()
    if not tokens:
        raise KuduNotFound("row does not belong to any currently existing tablet")
    if len(tokens) > 1:
        raise KuduIllegalState(
            f"all primary key columns specified but found {len(tokens)} matching tablets: "
            + ", ".join(t.location.tablet_id for t in tokens)
        )
    out: dict[str, Any] = {"tablet_id": tokens[0].location.tablet_id}
    if check_existence:
        sc = client.scanner_from_token(tokens[0].serialize())
        rows = [line async for batch in sc.xbatches() for line in row_texts(batch)]
        await sc.close()
        if not rows:
            raise KuduNotFound("row does not exist")
        out["row"] = "\n".join(rows)
    return out
