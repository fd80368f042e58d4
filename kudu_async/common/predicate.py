"""Scan predicates on one column, evaluated vectorised over Arrow batches.

The same object travels client -> tserver (``to_dict``), prunes partitions (partition.py), and filters
rows in the tablet (``evaluate``). NULL follows SQL: a comparison or IN with a NULL cell is not a
match; only IS NULL matches NULL cells.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument

if TYPE_CHECKING:
    from kudu_async.common.schema import Schema

COMPARISON_OPS = ("=", "<", "<=", ">", ">=")
OPS = (*COMPARISON_OPS, "IN", "IS NULL", "IS NOT NULL")
_OP_ALIASES = {
    "==": "=",
    "eq": "=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "in": "IN",
    "in_list": "IN",
    "is null": "IS NULL",
    "is_null": "IS NULL",
    "is not null": "IS NOT NULL",
    "is_not_null": "IS NOT NULL",
}
_COMPUTE = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class ColumnPredicate:
    """``column op value``: ``value`` is a scalar for comparisons, a tuple for IN, None for IS [NOT] NULL."""

    column: str
    op: str
    value: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise KuduInvalidArgument(f"predicate column must be a name, got {self.column!r}")
        op = str(self.op).strip()
        op = _OP_ALIASES.get(op.lower(), op.upper())
        if op not in OPS:
            raise KuduInvalidArgument(f"unknown predicate operator '{self.op}'")
        object.__setattr__(self, "op", op)
        if op in ("IS NULL", "IS NOT NULL"):
            if self.value is not None:
                raise KuduInvalidArgument(f"{op} takes no value")
        elif op == "IN":
            if isinstance(self.value, str | bytes) or not isinstance(self.value, Iterable):
                raise KuduInvalidArgument(f"IN on column '{self.column}' needs a list of values")
            object.__setattr__(self, "value", tuple(self.value))
        elif self.value is None:
            raise KuduInvalidArgument(f"comparison with NULL on column '{self.column}' never matches; use IS NULL")

    @property
    def values(self) -> tuple[Any, ...]:
        """IN's values, or the comparison value as a 1-tuple; () for IS [NOT] NULL."""
        if self.op == "IN":
            return tuple(self.value)
        if self.op in COMPARISON_OPS:
            return (self.value,)
        return ()

    def bind(self, schema: Schema) -> ColumnPredicate:
        """Check the column exists and coerce the value(s) to its canonical form (client side)."""
        col = schema.column(self.column)
        if self.op in ("IS NULL", "IS NOT NULL"):
            return self
        if col.is_array:
            # Kudu has no ordering or equality of array cells: only IS NULL / IS NOT NULL apply.
            raise KuduInvalidArgument(
                f"column '{col.name}' is an array ({col.type_label}): only IS NULL and IS NOT NULL "
                f"predicates apply to it, not {self.op}",
                {"column": col.name},
            )
        if self.op == "IN":
            return ColumnPredicate(self.column, "IN", tuple(col.coerce(v) for v in self.value if v is not None))
        return ColumnPredicate(self.column, self.op, col.coerce(self.value))

    # -- evaluation -------------------------------------------------------------------------------------

    def evaluate(self, batch: pa.RecordBatch | pa.Table) -> pa.BooleanArray:
        """One boolean per row (never null): True where the row matches."""
        if self.column not in batch.schema.names:
            raise KuduInvalidArgument(f"predicate column '{self.column}' is not in the batch")
        col = batch.column(self.column)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        return self.evaluate_array(col)

    def evaluate_array(self, col: pa.Array) -> pa.BooleanArray:
        if self.op == "IS NULL":
            return pc.is_null(col)
        if self.op == "IS NOT NULL":
            return pc.is_valid(col)
        typ = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if self.op == "IN":
            vals = [_scalar_value(self.column, v, typ) for v in self.value if v is not None]
            if not vals:
                return pa.array([False] * len(col), pa.bool_())
            value_set = pa.array(vals, typ)
            mask = pc.is_in(col, value_set=value_set, skip_nulls=True)
        else:
            mask = _COMPUTE[self.op](col, pa.scalar(_scalar_value(self.column, self.value, typ), typ))
        out = pc.fill_null(mask, False)
        return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out

    def matches(self, value: Any) -> bool:
        """The same test on one Python value (for the per-row paths and model tests)."""
        if self.op == "IS NULL":
            return value is None
        if self.op == "IS NOT NULL":
            return value is not None
        if value is None:
            return False
        if self.op == "IN":
            return any(v is not None and value == v for v in self.value)
        return bool(_COMPARE[self.op](value, self.value))

    # -- wire form --------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"column": self.column, "op": self.op}
        if self.value is not None:
            d["value"] = T.value_to_wire(list(self.value) if self.op == "IN" else self.value)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ColumnPredicate:
        try:
            return cls(d["column"], d["op"], T.value_from_wire(d.get("value")))
        except (KeyError, TypeError) as e:
            raise KuduInvalidArgument(f"malformed predicate: {e!r}") from None


def _scalar_value(column: str, value: Any, typ: pa.DataType) -> Any:
    """Check that a predicate value fits the column's Arrow type; error names the column."""
    try:
        pa.scalar(value, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        if pa.types.is_decimal(typ) and isinstance(value, int | Decimal):
            raise KuduInvalidArgument(
                f"predicate on column '{column}': {value} does not fit decimal({typ.precision},{typ.scale})",
                {"column": column},
            ) from None
        raise KuduInvalidArgument(
            f"predicate on column '{column}': expected {typ}, got {type(value).__name__}", {"column": column}
        ) from None
    return value
