"""One column of a table: its Kudu attributes and rules, and the cast of an Arrow array to its type.

Below ``schema`` (a list of columns) and ``key_encoding`` (which encodes key columns), so both build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument, KuduNotSupported

MAX_IDENTIFIER_LENGTH = 256
# The hidden last key column of a table with a non-unique primary key: tablet servers assign its values.
AUTO_INCREMENTING_COLUMN_NAME = "auto_incrementing_id"

# Kudu's encodings and compression codecs, with the column types each encoding applies to.
ENCODINGS = ("auto", "plain", "prefix", "group_varint", "rle", "dict", "bit_shuffle")
_ENCODING_ALIASES = {
    "bitshuffle": "bit_shuffle",
    "auto_encoding": "auto",
    "plain_encoding": "plain",
    "prefix_encoding": "prefix",
    "dict_encoding": "dict",
}
COMPRESSIONS = ("default", "none", "snappy", "lz4", "zlib", "zstd")
_COMPRESSION_ALIASES = {"default_compression": "default", "no_compression": "none"}
_INT_LIKE = ("int8", "int16", "int32", "int64", "date", "unixtime_micros")
_ALLOWED_ENCODINGS: dict[str, tuple[str, ...]] = {
    **{n: ("auto", "plain", "bit_shuffle", "rle") for n in _INT_LIKE},
    "float": ("auto", "plain", "bit_shuffle"),
    "double": ("auto", "plain", "bit_shuffle"),
    "decimal": ("auto", "plain", "bit_shuffle"),
    "bool": ("auto", "plain", "rle"),
    "string": ("auto", "plain", "prefix", "dict"),
    "varchar": ("auto", "plain", "prefix", "dict"),
    "binary": ("auto", "plain", "prefix", "dict"),
}

_VARCHAR_META = b"kudu.varchar_length"


def check_identifier(kind: str, name: Any) -> None:
    """Kudu's identifier rule for table and column names: non-empty UTF-8 of at most 256 bytes."""
    if not isinstance(name, str) or not name:
        raise KuduInvalidArgument(f"{kind} name must be a non-empty string, got {name!r}")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise KuduInvalidArgument(f"{kind} name {name!r} is not valid UTF-8") from None
    if len(encoded) > MAX_IDENTIFIER_LENGTH:
        raise KuduInvalidArgument(
            f"{kind} name '{name[:40]}...' is {len(encoded)} bytes; the limit is {MAX_IDENTIFIER_LENGTH}"
        )


def _norm_choice(kind: str, value: str | None, choices: Sequence[str], aliases: Mapping[str, str]) -> str | None:
    if value is None:
        return None
    v = str(value).strip().lower()
    for prefix in ("encoding_", "compression_"):
        if v.startswith(prefix):
            v = v[len(prefix) :]
    v = aliases.get(v, v)
    if v not in choices:
        raise KuduInvalidArgument(f"unknown {kind} '{value}'; expected one of {', '.join(choices)}")
    return v


@dataclass(frozen=True)
class ColumnTypeAttributes:
    """A column's type parameters: DECIMAL's precision and scale, VARCHAR's length (None when not set)."""

    precision: int | None = None
    scale: int | None = None
    length: int | None = None

    def __repr__(self) -> str:
        return f"ColumnTypeAttributes(precision={self.precision}, scale={self.scale}, length={self.length})"


@dataclass(frozen=True, repr=False)
class ColumnSchema:
    """One column: Kudu's attributes, validated on construction (default coerced to the type)."""

    name: str
    type: T.KuduType
    nullable: bool = True
    default: Any = None
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    comment: str | None = None
    encoding: str | None = None
    compression: str | None = None
    immutable: bool = False
    block_size: int | None = None
    # The server-assigned key column that makes a non-unique primary key unique (Kudu's auto-incrementing
    # column): INT64 NOT NULL, named AUTO_INCREMENTING_COLUMN_NAME, no default.
    auto_incrementing: bool = False
    # What a NESTED column holds (``type`` is ``T.NESTED``): a one-dimensional array of a scalar element
    # type, whose precision/scale/length are the column's. None for scalar columns.
    nested_type: T.NestedTypeDescriptor | None = None
    # Stable identity across renames (Kudu's column id): storage maps files to the schema by it.
    id: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", T.type_from_name(self.type))
        check_identifier("column", self.name)
        kt = self._check_nested()
        if kt is T.DECIMAL:
            if self.precision is None:
                raise KuduInvalidArgument(
                    f"no precision provided for DECIMAL column: {self.name} "
                    f"(column '{self.name}': decimal needs a precision)"
                )
            if not 1 <= self.precision <= T.MAX_DECIMAL_PRECISION:
                raise KuduInvalidArgument(
                    f"precision must be between 1 and 38: {self.name} "
                    f"(column '{self.name}': decimal precision {self.precision} not in 1..38)"
                )
            scale = 0 if self.scale is None else self.scale
            if not 0 <= scale <= self.precision:
                bound = (
                    f"is greater than the precision value of {self.precision}"
                    if scale > self.precision
                    else "is less than the minimum value of 0"
                )
                raise KuduInvalidArgument(
                    f"scale {bound}: {self.name} "
                    f"(column '{self.name}': decimal scale {scale} not in 0..{self.precision})"
                )
            object.__setattr__(self, "scale", scale)
        elif self.precision is not None or self.scale is not None:
            raise KuduInvalidArgument(f"column '{self.name}': precision/scale only apply to decimal")
        if kt is T.VARCHAR:
            if self.length is None:
                raise KuduInvalidArgument(
                    f"no length provided for VARCHAR column: {self.name} (column '{self.name}': varchar needs a length)"
                )
            if not 1 <= self.length <= T.MAX_VARCHAR_LENGTH:
                raise KuduInvalidArgument(
                    f"length must be between 1 and {T.MAX_VARCHAR_LENGTH}: {self.name} "
                    f"(column '{self.name}': varchar length {self.length} not in 1..{T.MAX_VARCHAR_LENGTH})"
                )
        elif self.length is not None:
            raise KuduInvalidArgument(f"column '{self.name}': length only applies to varchar")
        enc = _norm_choice("encoding", self.encoding, ENCODINGS, _ENCODING_ALIASES)
        if enc is not None and enc not in _ALLOWED_ENCODINGS[kt.name]:
            raise KuduInvalidArgument(f"column '{self.name}': encoding {enc} not supported for {self.type_label}")
        object.__setattr__(self, "encoding", enc)
        object.__setattr__(
            self,
            "compression",
            _norm_choice("compression", self.compression, COMPRESSIONS, _COMPRESSION_ALIASES),
        )
        if self.default is not None:
            if self.nested_type is not None:
                raise KuduInvalidArgument(
                    f"column '{self.name}': an array column cannot have a default value", {"column": self.name}
                )
            object.__setattr__(self, "default", self.coerce(self.default))
        if self.auto_incrementing and (
            kt is not T.INT64 or self.nullable or self.default is not None or self.name != AUTO_INCREMENTING_COLUMN_NAME
        ):
            raise KuduInvalidArgument(
                f"column '{self.name}': an auto-incrementing column is INT64 NOT NULL without a default, "
                f"named '{AUTO_INCREMENTING_COLUMN_NAME}'"
            )

    def _check_nested(self) -> T.KuduType:
        """Check a NESTED column's descriptor; returns the type the column's attributes apply to (the
        array's element type, else the column's own type)."""
        nested = self.nested_type
        if self.type is not T.NESTED:
            if nested is not None:
                raise KuduInvalidArgument(
                    f"column '{self.name}': a nested type descriptor needs the column type nested, not {self.type.name}"
                )
            return self.type
        if nested is None:
            raise KuduInvalidArgument(f"missing information on a NESTED type for column: {self.name}")
        if not isinstance(nested, T.NestedTypeDescriptor):
            raise KuduInvalidArgument(
                f"column '{self.name}': nested_type must be a NestedTypeDescriptor, not {type(nested).__name__}"
            )
        elem = nested.element_type
        if elem is T.DECIMAL and self.precision is not None and self.precision > T.MAX_ARRAY_DECIMAL_PRECISION:
            raise KuduNotSupported(
                f"columns of 'decimal (128 bit) 1d-array' type are not yet supported (column '{self.name}')"
            )
        return elem

    # -- derived facts ----------------------------------------------------------------------------------

    @property
    def is_array(self) -> bool:
        """Whether the column holds one-dimensional arrays (type NESTED)."""
        return self.nested_type is not None

    @property
    def element_type(self) -> T.KuduType | None:
        """An array column's element type; None for a scalar column."""
        return None if self.nested_type is None else self.nested_type.element_type

    @property
    def scalar_type(self) -> T.KuduType:
        """The type of the column's scalar values: its elements' for an array, else its own."""
        return self.type if self.nested_type is None else self.nested_type.element_type

    @property
    def element_arrow_type(self) -> pa.DataType:
        """The Arrow type of one scalar value (an array's element, else the cell)."""
        return self.scalar_type.arrow_type(self.precision, self.scale, self.length)

    @property
    def arrow_type(self) -> pa.DataType:
        """A cell's Arrow type: an array column is ``list<element>`` with nullable elements."""
        if self.nested_type is not None:
            return pa.list_(pa.field("element", self.element_arrow_type, True))
        return self.type.arrow_type(self.precision, self.scale, self.length)

    @property
    def type_label(self) -> str:
        """``int64``, ``decimal(10,2)``, ``varchar(20)``, ``int64 1d-array``: how errors and describe show
        the type."""
        kt = self.scalar_type
        if kt is T.DECIMAL:
            label = f"decimal({self.precision},{self.scale})"
        elif kt is T.VARCHAR:
            label = f"varchar({self.length})"
        else:
            label = kt.name
        return label if self.nested_type is None else f"{label} 1d-array"

    def to_arrow_field(self) -> pa.Field:
        meta = None
        if self.scalar_type is T.VARCHAR:
            meta = {_VARCHAR_META: str(self.length).encode()}
        return pa.field(self.name, self.arrow_type, self.nullable, metadata=meta)

    # -- kudu-python's ColumnSchema surface ---------------------------------------------------------------

    @property
    def mutable(self) -> bool:
        return not self.immutable

    @property
    def type_attributes(self) -> ColumnTypeAttributes:
        return ColumnTypeAttributes(self.precision, self.scale, self.length)

    def equals(self, other: object) -> bool:
        """Same column in every attribute (the column id, a storage detail, is not compared)."""
        return isinstance(other, ColumnSchema) and self == other

    def type_to_string(self) -> str:
        """The type as Kudu prints it in a schema, with nullability: ``DECIMAL(8, 2) NOT NULL``,
        ``STRING 1D-ARRAY NULLABLE``."""
        kt = self.scalar_type
        name = kt.name.upper()
        if kt is T.DECIMAL:
            name = f"{name}({self.precision}, {self.scale})"
        elif kt is T.VARCHAR:
            name = f"{name}({self.length})"
        if self.nested_type is not None:
            name = f"{name} 1D-ARRAY"
        return f"{name} {'NULLABLE' if self.nullable else 'NOT NULL'}"

    def __repr__(self) -> str:
        return f"ColumnSchema(name={self.name}, type={self.type.name}, nullable={self.nullable})"

    def coerce(self, value: Any) -> Any:
        """Canonical form of one non-None value for this column (KuduInvalidArgument if it does not fit);
        for an array column a list of canonical elements or None."""
        if self.nested_type is not None:
            return T.coerce_array(
                self.nested_type.element_type,
                value,
                column=self.name,
                precision=self.precision,
                scale=self.scale,
                length=self.length,
            )
        return T.coerce_value(
            self.type, value, column=self.name, precision=self.precision, scale=self.scale, length=self.length
        )

    # -- wire form ----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """msgpack-able form; the default is stored in its physical form (ints for date/decimal)."""
        d: dict[str, Any] = {"name": self.name, "type": self.type.name, "nullable": self.nullable}
        if self.nested_type is not None:
            d["array_element_type"] = self.nested_type.element_type.name
        if self.default is not None:
            d["default"] = T.to_physical(self.type, self.default, self.scale)
        for attr in ("precision", "scale", "length", "comment", "encoding", "compression", "block_size"):
            v = getattr(self, attr)
            if v is not None:
                d[attr] = v
        if self.immutable:
            d["immutable"] = True
        if self.auto_incrementing:
            d["auto_incrementing"] = True
        if self.id is not None:
            d["id"] = self.id
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ColumnSchema:
        kt = T.type_from_name(d["type"])
        default = d.get("default")
        if default is not None:
            default = T.from_physical(kt, default, d.get("scale"))
        return cls(
            name=d["name"],
            type=kt,
            nullable=bool(d.get("nullable", True)),
            default=default,
            precision=d.get("precision"),
            scale=d.get("scale"),
            length=d.get("length"),
            comment=d.get("comment"),
            encoding=d.get("encoding"),
            compression=d.get("compression"),
            immutable=bool(d.get("immutable", False)),
            block_size=d.get("block_size"),
            auto_incrementing=bool(d.get("auto_incrementing", False)),
            nested_type=None if d.get("array_element_type") is None else T.array_type(d["array_element_type"]),
            id=_column_id(d.get("id")),
        )

    @classmethod
    def from_arrow_field(cls, f: pa.Field, *, nullable: bool | None = None) -> ColumnSchema:
        """The column of an Arrow field; a list field is an array column of its value type."""
        t = f.type
        is_list = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        kt, attrs = T.type_from_arrow(t.value_type if is_list else t)
        length = None
        if f.metadata and _VARCHAR_META in f.metadata:
            kt, length = T.VARCHAR, int(f.metadata[_VARCHAR_META])
        return cls(
            f.name,
            T.NESTED if is_list else kt,
            f.nullable if nullable is None else nullable,
            precision=attrs.get("precision"),
            scale=attrs.get("scale"),
            length=length,
            nested_type=T.array_type(kt) if is_list else None,
        )


def _column_id(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise KuduInvalidArgument(f"column id must be a non-negative integer, got {v!r}")
    return int(v)


# --- casting one Arrow column to a column's type ----------------------------------------------------------


# The kind of an Arrow type for casting rules, by the first test that holds (a dictionary by its values).
_KIND_TESTS: tuple[tuple[str, Callable[[pa.DataType], bool]], ...] = (
    ("null", pa.types.is_null),
    ("int", pa.types.is_integer),
    ("float", pa.types.is_floating),
    ("bool", pa.types.is_boolean),
    ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)),
    (
        "binary",
        lambda t: (
            pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
            or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)
        ),
    ),
    ("timestamp", pa.types.is_timestamp),
    ("date", pa.types.is_date),
    ("decimal", pa.types.is_decimal),
)


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    return next((kind for kind, test in _KIND_TESTS if test(t)), "other")


# Which source kinds may be cast (safely, checked by Arrow) to each Kudu type.
_CASTABLE: dict[str, frozenset[str]] = {
    **{n: frozenset({"int"}) for n in ("int8", "int16", "int32", "int64")},
    "float": frozenset({"int", "float"}),
    "double": frozenset({"int", "float"}),
    "bool": frozenset({"bool"}),
    "string": frozenset({"string"}),
    "varchar": frozenset({"string"}),
    "binary": frozenset({"binary", "string"}),
    "unixtime_micros": frozenset({"timestamp", "int"}),
    "date": frozenset({"date"}),
    "decimal": frozenset({"decimal", "int"}),
}


def _arrow_type_label(t: pa.DataType) -> str:
    k = _kind(t)
    if k == "string":
        return "str"
    return str(t)


def cast_column(col: ColumnSchema, arr: pa.Array | pa.ChunkedArray, *, check_cells: bool = True) -> pa.Array:
    """Cast an Arrow array to the column's type, enforcing Kudu's cell rules (vectorised).

    Only lossless, same-kind casts are allowed (int widths with range checks, int -> float/decimal,
    timestamps of any unit/zone to UTC microseconds, string -> binary); strings are not parsed into
    numbers. VARCHAR is truncated to its length; cells over 64 KiB are rejected.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if col.nested_type is not None:
        return _cast_array_column(col, arr, check_cells)
    target = col.arrow_type
    src = arr.type
    if pa.types.is_dictionary(src):
        arr = arr.dictionary_decode()
        src = arr.type
    if not src.equals(target):
        kind = _kind(src)
        if kind != "null" and kind not in _CASTABLE[col.type.name]:
            raise KuduInvalidArgument(
                f"column '{col.name}': expected {col.type_label}, got {_arrow_type_label(src)}",
                {"column": col.name},
            )
        try:
            if kind == "int" and col.type is T.UNIXTIME_MICROS:
                arr = pc.cast(arr, pa.int64(), safe=True).view(target)
            else:
                arr = pc.cast(arr, target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise KuduInvalidArgument(
                f"column '{col.name}': cannot convert {src} to {col.type_label}: {e}", {"column": col.name}
            ) from None
    if col.type.is_string_like and len(arr):
        if col.type is T.VARCHAR and col.length is not None:
            too_long = pc.max(pc.utf8_length(arr)).as_py()
            if too_long is not None and too_long > col.length:
                arr = pc.utf8_slice_codeunits(arr, 0, col.length)
        biggest = pc.max(pc.binary_length(arr)).as_py() if check_cells else None
        if biggest is not None and biggest > T.MAX_CELL_SIZE_BYTES:
            raise KuduInvalidArgument(
                f"column '{col.name}': cell of {biggest} bytes exceeds {T.MAX_CELL_SIZE_BYTES}",
                {"column": col.name},
            )
    return arr


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def element_column(col: ColumnSchema) -> ColumnSchema:
    """An array column's element as a nullable scalar column of the same name and attributes (for casts
    and checks of the elements)."""
    assert col.nested_type is not None
    return ColumnSchema(
        col.name, col.nested_type.element_type, True, precision=col.precision, scale=col.scale, length=col.length
    )


def array_value_lengths(arr: pa.Array) -> np.ndarray:
    """Elements per cell of a list array (0 for a NULL cell), as int64."""
    return np.asarray(pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def array_cell_bytes(arr: pa.Array) -> np.ndarray | None:
    """Bytes of the string/binary elements of each cell of a list array; None for other element types
    (their cells stay far below the cell limit at the element limit)."""
    t = arr.type.value_type
    if not (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)):
        return None
    per_elem = pc.fill_null(pc.binary_length(pc.list_flatten(arr)), 0).to_numpy(zero_copy_only=False)
    lengths = array_value_lengths(arr)
    ends = np.cumsum(np.concatenate([[0], np.asarray(per_elem, dtype=np.int64)]))
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return np.asarray(ends[bounds[1:]] - ends[bounds[:-1]], dtype=np.int64)


def _cast_array_column(col: ColumnSchema, arr: pa.Array, check_cells: bool) -> pa.Array:
    """:func:`cast_column` for an array column: list cells whose elements cast as a scalar column's would;
    with ``check_cells``, a cell over the element or byte limit raises."""
    src = arr.type
    if pa.types.is_null(src):
        return pa.nulls(len(arr), col.arrow_type)
    if not _is_list(src):
        raise KuduInvalidArgument(
            f"column '{col.name}': expected {col.type_label}, got {_arrow_type_label(src)}", {"column": col.name}
        )
    # Rebuilt from the cells' lengths and the flattened valid elements, so a slice or a large/fixed-size
    # list comes out as a plain list array of exactly its own cells.
    lengths = array_value_lengths(arr)
    values = cast_column(element_column(col), pc.list_flatten(arr), check_cells=False)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32), pa.int32())
    mask = pc.is_null(arr) if arr.null_count else None
    out = pa.ListArray.from_arrays(offsets, values, type=col.arrow_type, mask=mask)
    if check_cells and len(out):
        too_many = int(lengths.max())
        if too_many > T.MAX_ARRAY_ELEMENTS:
            raise KuduInvalidArgument(
                f"too many array elements for column '{col.name}' ({too_many}, maximum is {T.MAX_ARRAY_ELEMENTS})",
                {"column": col.name},
            )
        sizes = array_cell_bytes(out)
        if sizes is not None and int(sizes.max()) > T.MAX_CELL_SIZE_BYTES:
            raise KuduInvalidArgument(
                f"column '{col.name}': cell of {int(sizes.max())} bytes exceeds {T.MAX_CELL_SIZE_BYTES}",
                {"column": col.name},
            )
    return out
