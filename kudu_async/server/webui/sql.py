"""Tables, partitions and values as Impala's SQL writes them, for the pages that show a table's
partitioning and its CREATE TABLE statement (the master's) and a replica's partition (the tablet
server's)."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from kudu_async.common import types as T
from kudu_async.common.column import ColumnSchema
from kudu_async.common.errors import KuduCorruption
from kudu_async.common.key_encoding import decode_values
from kudu_async.common.partition import PartitionSchema


def sql_literal(v: Any) -> str:
    """A value as an Impala SQL literal (strings quoted with backslash escapes, bytes as ``\\x`` escapes,
    timestamps as UTC ``'YYYY-MM-DD HH:MM:SS[.ffffff]'``, dates as ``'YYYY-MM-DD'``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in v) + "'"
    if isinstance(v, dt.datetime):
        utc = v.astimezone(dt.UTC) if v.tzinfo is not None else v
        return "'" + utc.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".") + "'"
    if isinstance(v, dt.date):
        return f"'{v.isoformat()}'"
    if isinstance(v, int | float | decimal.Decimal):
        return str(v)
    return sql_literal(str(v))


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _readable(c: ColumnSchema, v: Any) -> Any:
    """A key value as the column's type shows it (encoded keys decode timestamps as microseconds)."""
    if c.scalar_type is T.UNIXTIME_MICROS and isinstance(v, int):
        try:
            return T.micros_to_datetime(v)
        except OverflowError:  # outside years 1-9999: the number is all there is to show
            return v
    return v


def _bound_text(cols: Sequence[ColumnSchema], values: tuple[Any, ...]) -> str:
    shown = [sql_literal(_readable(c, v)) for c, v in zip(cols, values, strict=False)]
    return shown[0] if len(shown) == 1 else "(" + ", ".join(shown) + ")"


def range_bounds(ps: PartitionSchema, start: bytes, end: bytes) -> tuple[str | None, str | None]:
    """A range partition's lower and upper bound as SQL values (None: unbounded); a bound that is not a
    whole key (an exclusive lower or inclusive upper bound given as such) as its encoded hex."""
    cols = ps.range_columns

    def one(key: bytes) -> str | None:
        if not key:
            return None
        try:
            return _bound_text(cols, decode_values(cols, key, allow_prefix=True))
        except KuduCorruption:
            return f"0x{key.hex()}"

    return one(start), one(end)


def range_text(lo: str | None, hi: str | None) -> str:
    """Impala's spelling of one range partition."""
    if lo is None and hi is None:
        return "PARTITION UNBOUNDED"
    left = "" if lo is None else f"{lo} <= "
    right = "" if hi is None else f" < {hi}"
    return f"PARTITION {left}VALUES{right}"


def hash_text(dims: Sequence[Any]) -> list[str]:
    return [f"HASH ({', '.join(d.columns)}) PARTITIONS {d.num_buckets}" for d in dims]


def partition_text(ps: PartitionSchema, hash_buckets: Sequence[int], start: bytes, end: bytes) -> str:
    """One tablet's partition as Kudu names it: ``HASH (a) PARTITION 1, RANGE (k) PARTITION 0 <= VALUES < 9``."""
    dims = ps.hash_dimensions_for(start)
    parts = [f"HASH ({', '.join(d.columns)}) PARTITION {b}" for d, b in zip(dims, hash_buckets, strict=False)]
    if ps.range_schema.columns:
        lo, hi = range_bounds(ps, start, end)
        parts.append(f"RANGE ({', '.join(ps.range_schema.columns)}) {range_text(lo, hi)}")
    return ", ".join(parts) or "the whole table"


def partition_schema_text(ps: PartitionSchema) -> str:
    parts = hash_text(ps.hash_dimensions)
    if ps.range_schema.columns:
        parts.append(f"RANGE ({', '.join(ps.range_schema.columns)})")
    return ",\n".join(parts) or "one tablet (no hash or range partitioning)"
