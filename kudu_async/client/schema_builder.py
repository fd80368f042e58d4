"""kudu-python's schema builder and partitioning objects, building our common Schema and PartitionSchema.

``kudu.schema_builder()`` -> ``SchemaBuilder.add_column(...)`` returns a fluent ``ColumnSpec``; ``build()``
gives a ``Schema``. ``Partitioning`` collects hash levels, range columns, range bounds and split rows,
and becomes the wire form CreateTable takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Self

from kudu_async.common import types as T
from kudu_async.common.column import AUTO_INCREMENTING_COLUMN_NAME
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.partition import HashDimension, PartitionSchema, RangeBound
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.common.types import value_to_wire

NO_DEFAULT: Any = object()  # "no default given" (None is a real default: NULL)


class ColumnSpec:
    """One column being described; every setter returns the spec so calls chain."""

    def __init__(self, builder: SchemaBuilder, name: str) -> None:
        self._builder = builder
        self.name = name
        self._type: T.KuduType | None = None
        self._nullable: bool | None = None
        self._default: Any = NO_DEFAULT
        self._attrs: dict[str, Any] = {}
        self._primary_key = False
        self._unique_key = True
        self._nested: T.NestedTypeDescriptor | None = None

    def type(self, type_: Any) -> Self:
        self._type = T.type_from_name(type_)
        return self

    def nested_type(self, type_descriptor: T.NestedTypeDescriptor) -> Self:
        """Make the column an array column: ``.nested_type(kudu.array_type(kudu.int64))``. Its type is then
        ``nested``; ``precision``/``scale``/``length`` apply to the elements (DECIMAL, VARCHAR). An array
        column cannot be a key column and has no default."""
        if not isinstance(type_descriptor, T.NestedTypeDescriptor):
            raise TypeError(f"Expected NestedTypeDescriptor, got {type(type_descriptor)}")
        self._type = T.NESTED
        self._nested = type_descriptor
        return self

    def nullable(self, is_nullable: bool = True) -> Self:
        self._nullable = bool(is_nullable)
        return self

    def primary_key(self) -> Self:
        self._primary_key = True
        self._unique_key = True
        return self

    def non_unique_primary_key(self) -> Self:
        """A key column whose values may repeat: the table gets the hidden key column
        ``auto_incrementing_id`` (its values assigned by the tablet servers) that tells such rows apart."""
        self._primary_key = True
        self._unique_key = False
        return self

    def default(self, value: Any) -> Self:
        self._default = value
        return self

    def remove_default(self) -> Self:
        self._default = NO_DEFAULT
        return self

    def _set(self, key: str, value: Any) -> Self:
        self._attrs[key] = value
        return self

    def compression(self, compression: str) -> Self:
        return self._set("compression", compression)

    def encoding(self, encoding: str) -> Self:
        return self._set("encoding", encoding)

    def precision(self, precision: int) -> Self:
        return self._set("precision", precision)

    def scale(self, scale: int) -> Self:
        return self._set("scale", scale)

    def length(self, length: int) -> Self:
        return self._set("length", length)

    def comment(self, comment: str) -> Self:
        return self._set("comment", comment)

    def block_size(self, block_size: int) -> Self:
        return self._set("block_size", block_size)

    def immutable(self, immutable: bool = True) -> Self:
        return self._set("immutable", bool(immutable))

    def mutable(self, is_mutable: bool = True) -> Self:
        """kudu-python's spelling of ``immutable(not is_mutable)``."""
        return self._set("immutable", not is_mutable)

    def rename(self, new_name: str) -> Self:
        """Used by the table alterer (``alter_column(name).rename(new)``)."""
        return self._set("new_name", new_name)

    def to_column(self, *, key: bool) -> ColumnSchema:
        if self._type is None:
            raise KuduInvalidArgument(f"no type provided for column: {self.name} (column '{self.name}': no type given)")
        nullable = (not key) if self._nullable is None else self._nullable
        if key and nullable:
            raise KuduInvalidArgument(f"key column '{self.name}' cannot be nullable")
        attrs = {k: v for k, v in self._attrs.items() if k != "new_name"}
        return ColumnSchema(
            self.name,
            self._type,
            nullable,
            None if self._default is NO_DEFAULT else self._default,
            nested_type=self._nested if self._type is T.NESTED else None,
            **attrs,
        )


class SchemaBuilder:
    """kudu-python's ``SchemaBuilder``: key columns first, as Kudu requires."""

    def __init__(self) -> None:
        self._specs: list[ColumnSpec] = []
        self._keys: list[str] | None = None
        self._keys_unique = True

    def add_column(  # noqa: PLR0913 - kudu-python's SchemaBuilder.add_column, keyword for keyword
        self,
        name: str,
        type_: Any = None,
        nullable: bool | None = None,
        compression: str | None = None,
        encoding: str | None = None,
        primary_key: bool = False,
        non_unique_primary_key: bool = False,
        block_size: int | None = None,
        default: Any = NO_DEFAULT,
        precision: int | None = None,
        scale: int | None = None,
        length: int | None = None,
        comment: str | None = None,
    ) -> ColumnSpec:
        if any(s.name == name for s in self._specs):
            raise KuduInvalidArgument(f"column '{name}' added twice")
        spec = ColumnSpec(self, name)
        self._specs.append(spec)
        if type_ is not None:
            spec.type(type_)
        if nullable is not None:
            spec.nullable(nullable)
        if primary_key:
            spec.primary_key()
        if non_unique_primary_key:
            spec.non_unique_primary_key()
        if default is not NO_DEFAULT:
            spec.default(default)
        for key, v in (
            ("compression", compression),
            ("encoding", encoding),
            ("block_size", block_size),
            ("precision", precision),
            ("scale", scale),
            ("length", length),
            ("comment", comment),
        ):
            if v is not None:
                spec._set(key, v)
        return spec

    def copy_column(self, colschema: ColumnSchema) -> ColumnSpec:
        """Add a column with every attribute of ``colschema`` (a column of another schema); returns its spec."""
        if not isinstance(colschema, ColumnSchema):
            raise KuduInvalidArgument(f"copy_column takes a ColumnSchema, not {type(colschema).__name__}")
        if any(s.name == colschema.name for s in self._specs):
            raise KuduInvalidArgument(f"column '{colschema.name}' added twice")
        spec = ColumnSpec(self, colschema.name)
        spec._type = colschema.type
        spec._nested = colschema.nested_type
        spec._nullable = colschema.nullable
        if colschema.default is not None:
            spec._default = colschema.default
        for key in ("precision", "scale", "length", "comment", "encoding", "compression", "block_size"):
            value = getattr(colschema, key)
            if value is not None:
                spec._attrs[key] = value
        if colschema.immutable:
            spec._attrs["immutable"] = True
        self._specs.append(spec)
        return spec

    def set_primary_keys(self, key_names: Sequence[str]) -> Self:
        self._keys = list(key_names)
        self._keys_unique = True
        return self

    def set_non_unique_primary_keys(self, key_names: Sequence[str]) -> Self:
        """Key columns whose values may repeat (see :meth:`ColumnSpec.non_unique_primary_key`)."""
        self._keys = list(key_names)
        self._keys_unique = False
        return self

    def build(self) -> Schema:
        if not self._specs:
            raise KuduInvalidArgument("a schema needs at least one column")
        marked = [s for s in self._specs if s._primary_key]
        if self._keys is not None:
            if marked:
                how = "set_primary_keys()" if self._keys_unique else "set_non_unique_primary_keys()"
                raise KuduInvalidArgument(
                    f"primary key specified by both {how} and on a specific column: {marked[0].name}"
                )
            keys, unique = self._keys, self._keys_unique
        else:
            keys = [s.name for s in marked]
            unique = all(s._unique_key for s in marked)
            if not unique and any(s._unique_key for s in marked):
                raise KuduInvalidArgument(
                    "primary key columns are either all unique (primary_key()) or all non-unique "
                    f"(non_unique_primary_key()): {', '.join(s.name for s in marked)}"
                )
        if not keys:
            raise KuduInvalidArgument(
                "no primary key or non-unique primary key specified: mark columns with primary_key() or "
                "non_unique_primary_key(), or call set_primary_keys() or set_non_unique_primary_keys()"
            )
        names = [s.name for s in self._specs]
        for k in keys:
            if k not in names:
                raise KuduInvalidArgument(f"primary key column '{k}' is not in the schema")
        if names[: len(keys)] != keys:
            raise KuduInvalidArgument(
                f"primary key columns {keys} must be the first columns, in order "
                f"(the schema starts with {names[: len(keys)]})"
            )
        cols = [s.to_column(key=i < len(keys)) for i, s in enumerate(self._specs)]
        if unique:
            return Schema(cols, len(keys))
        if AUTO_INCREMENTING_COLUMN_NAME in names:
            raise KuduInvalidArgument(
                f"column name '{AUTO_INCREMENTING_COLUMN_NAME}' is reserved for the auto-incrementing column of a "
                "non-unique primary key"
            )
        auto = ColumnSchema(AUTO_INCREMENTING_COLUMN_NAME, T.INT64, nullable=False, auto_incrementing=True)
        return Schema([*cols[: len(keys)], auto, *cols[len(keys) :]], len(keys) + 1)


def schema_builder() -> SchemaBuilder:
    return SchemaBuilder()


def _hash_level(column_names: Sequence[str] | str, num_buckets: int, seed: int | None) -> HashDimension:
    cols = [column_names] if isinstance(column_names, str) else list(column_names)
    return HashDimension(cols, num_buckets, 0 if seed is None else seed)


class RangePartition:
    """kudu-python's ``RangePartition``: one range with its own hash schema (Kudu 1.17 per-range hash
    schemas), for ``Partitioning.add_custom_range_partition`` and ``TableAlterer.add_custom_range_partition``.
    A range of recent, busy rows can take more buckets than the old ones. It needs as many hash levels as
    the table has."""

    def __init__(
        self,
        lower_bound: Any = None,
        upper_bound: Any = None,
        lower_bound_type: str = "inclusive",
        upper_bound_type: str = "exclusive",
    ) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.lower_bound_type, self.upper_bound_type = lower_bound_type, upper_bound_type
        self.hash_dimensions: list[HashDimension] = []

    def add_hash_partitions(self, column_names: Sequence[str] | str, num_buckets: int, seed: int | None = None) -> Self:
        self.hash_dimensions.append(_hash_level(column_names, num_buckets, seed))
        return self

    def bound(self) -> tuple[Any, Any, str, str, tuple[HashDimension, ...]]:
        if not self.hash_dimensions:
            raise KuduInvalidArgument("a custom range partition needs its hash partitions (add_hash_partitions)")
        return (
            self.lower_bound,
            self.upper_bound,
            self.lower_bound_type,
            self.upper_bound_type,
            tuple(self.hash_dimensions),
        )


class Partitioning:
    """kudu-python's ``Partitioning``: hash levels plus range columns, bounds and split rows."""

    def __init__(self) -> None:
        self._hash: list[HashDimension] = []
        self._range_cols: list[str] | None = None
        self._bounds: list[tuple[Any, Any, str, str, tuple[HashDimension, ...] | None]] = []
        self._splits: list[Any] = []

    def add_hash_partitions(self, column_names: Sequence[str] | str, num_buckets: int, seed: int | None = None) -> Self:
        self._hash.append(_hash_level(column_names, num_buckets, seed))
        return self

    def set_range_partition_columns(self, column_names: Sequence[str] | str) -> Self:
        self._range_cols = [column_names] if isinstance(column_names, str) else list(column_names)
        return self

    def add_range_partition(
        self,
        lower_bound: Any = None,
        upper_bound: Any = None,
        lower_bound_type: str = "inclusive",
        upper_bound_type: str = "exclusive",
    ) -> Self:
        self._bounds.append((lower_bound, upper_bound, lower_bound_type, upper_bound_type, None))
        return self

    def add_custom_range_partition(self, range_partition: RangePartition) -> Self:
        """A range with its own hash schema (see :class:`RangePartition`)."""
        if not isinstance(range_partition, RangePartition):
            raise KuduInvalidArgument(f"expected a RangePartition, got {type(range_partition).__name__}")
        self._bounds.append(range_partition.bound())
        return self

    def add_range_partition_split(self, split_row: Any) -> Self:
        self._splits.append(split_row)
        return self

    def partition_schema(self, schema: Schema) -> PartitionSchema:
        """The table's partition schema, custom ranges included."""
        ranges = schema.user_key_names if self._range_cols is None else self._range_cols
        return PartitionSchema(schema, self._hash, ranges).with_custom_ranges(self._range_bounds())

    def _range_bounds(self) -> list[RangeBound]:
        return [
            dataclasses.replace(RangeBound.of((_as_row(lo), _as_row(hi), lt, ut)), hash_dimensions=dims)
            for lo, hi, lt, ut, dims in self._bounds
        ]

    def to_wire(self, schema: Schema) -> dict[str, Any]:
        """``partition_schema``, ``range_bounds`` and ``split_rows`` of a CreateTable request (validated here,
        so a bad bound is named before anything reaches the master). The partition schema goes without
        the custom ranges: each travels with its bound, and the master registers it from there."""
        ps = self.partition_schema(schema)
        # raises on overlaps, bad splits, wrong columns
        ps.create_partitions(self._range_bounds(), [_as_row(s) for s in self._splits])
        plain = PartitionSchema(schema, ps.hash_dimensions, ps.range_schema)
        return {
            "partition_schema": plain.to_dict(),
            "range_bounds": [bound_to_wire(ps, lo, hi, lt, ut, dims) for lo, hi, lt, ut, dims in self._bounds],
            "split_rows": [row_to_wire(ps, s) for s in self._splits],
        }


def _as_row(row: Any) -> Any:
    """A bound or split as a row: a lone value (one range column) becomes a one-value row."""
    if row is None or isinstance(row, Mapping | list | tuple):
        return row
    return [row]


def row_to_wire(ps: PartitionSchema, row: Any) -> Any:
    """A bound or split row over the range columns, as a map of wire values (tuples by range order)."""
    if row is None:
        return None
    if isinstance(row, Mapping):
        d = dict(row)
    else:
        vals = [row] if not isinstance(row, list | tuple) else list(row)
        d = dict(zip(ps.range_schema.columns, vals, strict=False))
    return {k: value_to_wire(v) for k, v in d.items()}


def bound_to_wire(
    ps: PartitionSchema,
    lower: Any,
    upper: Any,
    lower_type: str,
    upper_type: str,
    hash_dimensions: Sequence[HashDimension] | None = None,
) -> dict[str, Any]:
    out = {
        "lower": row_to_wire(ps, lower),
        "upper": row_to_wire(ps, upper),
        "lower_bound_type": lower_type,
        "upper_bound_type": upper_type,
    }
    if hash_dimensions is not None:
        out["hash_dimensions"] = [d.to_dict() for d in hash_dimensions]
    return out
