"""Kudu's column data types, their Arrow types and Python value coercion.

A ``KuduType`` is the *base* type (what kudu-python calls ``kudu.int64``, ``kudu.decimal`` ...);
the parameters of DECIMAL (precision, scale) and VARCHAR (length) live on the column, as in Kudu, and
are passed to the methods that need them.

Arrow mapping (fixed here because every layer stores and ships Arrow):

* UNIXTIME_MICROS -> ``pa.timestamp("us", tz="UTC")``: Kudu's values are UTC instants in microseconds,
  so a tz-aware Arrow type makes ``to_pylist()``/pandas give unambiguous UTC datetimes; the physical
  int64 is identical to Kudu's.
* DATE -> ``pa.date32()`` (int32 days since the epoch, Kudu's physical form).
* DECIMAL(p, s) -> ``pa.decimal128(p, s)`` for every precision (Kudu's 4/8/16-byte storage is a key
  encoding detail, see key_encoding).
* VARCHAR(n) -> ``pa.string()``; the length is carried on the column (and in field metadata).

Canonical Python values (what ``coerce_value`` returns, what key decoding returns): ``int`` for the
integer types and for UNIXTIME_MICROS (microseconds; Kudu's full int64 range does not fit ``datetime``),
``datetime.date`` for DATE (Kudu's DATE range is exactly ``date``'s range), ``Decimal`` for DECIMAL,
``float``, ``bool``, ``str`` (STRING, VARCHAR) and ``bytes`` (BINARY).
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kudu_async.common.errors import KuduInvalidArgument, KuduNotSupported

MAX_CELL_SIZE_BYTES = 64 * 1024
MAX_DECIMAL_PRECISION = 38
MAX_VARCHAR_LENGTH = 65535
# Kudu's default of --array_cell_max_elem_num: the most elements one array cell may hold.
MAX_ARRAY_ELEMENTS = 1024
# Widest DECIMAL an array may hold: Kudu refuses arrays of 128-bit decimals (precision above 18).
MAX_ARRAY_DECIMAL_PRECISION = 18

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH_DT = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MIN_DATE_DAYS = (_dt.date.min - _EPOCH_DATE).days
_MAX_DATE_DAYS = (_dt.date.max - _EPOCH_DATE).days


@dataclass(frozen=True, eq=False)
class KuduType:
    """One Kudu base data type. Singletons: compare with ``is`` or ``==`` (identity)."""

    name: str
    """Kudu's lower-case name (``int64``, ``unixtime_micros`` ...), also the wire name."""
    type_id: int
    """Kudu's ``DataType`` enum value from common.proto (stable wire id)."""
    key_allowed: bool
    """Whether the type may be a primary-key column (not bool/float/double)."""
    fixed_width: int | None
    """Physical width in bytes of a cell; None for variable-length types (and DECIMAL: by precision)."""

    def __repr__(self) -> str:
        return f"KuduType({self.name})"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the singletons singletons across pickling (executor workers).
        return (type_from_name, (self.name,))

    @property
    def is_integer(self) -> bool:
        return self.name in _INT_BOUNDS

    @property
    def is_string_like(self) -> bool:
        """STRING, VARCHAR and BINARY: variable-length cells limited to 64 KiB."""
        return self.name in ("string", "varchar", "binary")

    def arrow_type(
        self, precision: int | None = None, scale: int | None = None, length: int | None = None
    ) -> pa.DataType:
        """The Arrow type of a column of this type (precision/scale for DECIMAL)."""
        if self.name == "decimal":
            if precision is None:
                raise KuduInvalidArgument("decimal type needs a precision")
            return pa.decimal128(precision, scale or 0)
        return _ARROW_TYPES[self.name]

    def new_value(self, value: Any) -> KuduValue:
        return KuduValue(self, value)


class KuduValue:
    """A Python value checked and converted for one Kudu type (kudu-python's ``KuduValue``). It goes
    wherever a plain value does: a cell, a predicate's value, a bound."""

    __slots__ = ("type", "value")

    def __init__(self, type_: KuduType, value: Any) -> None:
        if not isinstance(type_, KuduType):
            raise TypeError(f"a KuduValue needs a KuduType, not {type(type_).__name__}")
        if value is None:
            raise KuduInvalidArgument("a KuduValue cannot hold None (set the cell to None instead)")
        if type_ is NESTED:
            raise KuduInvalidArgument("an array cell has no KuduValue: give the list itself")
        self.type = type_
        if type_ is DECIMAL:
            if not isinstance(value, _decimal.Decimal):
                raise KuduInvalidArgument(f"a decimal KuduValue needs a Decimal, not {type(value).__name__}")
            self.value: Any = value
        else:
            self.value = coerce_value(type_, value, column=f"KuduValue({type_.name})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KuduValue):
            return NotImplemented
        return self.type is other.type and self.value == other.value

    def __hash__(self) -> int:
        return hash((self.type.name, self.value))

    def __repr__(self) -> str:
        return f"KuduValue({self.type.name}, {self.value!r})"


INT8 = KuduType("int8", 0, True, 1)
INT16 = KuduType("int16", 1, True, 2)
INT32 = KuduType("int32", 2, True, 4)
INT64 = KuduType("int64", 3, True, 8)
STRING = KuduType("string", 4, True, None)
BOOL = KuduType("bool", 5, False, 1)
FLOAT = KuduType("float", 6, False, 4)
DOUBLE = KuduType("double", 7, False, 8)
BINARY = KuduType("binary", 8, True, None)
UNIXTIME_MICROS = KuduType("unixtime_micros", 9, True, 8)
DECIMAL = KuduType("decimal", 17, True, None)
VARCHAR = KuduType("varchar", 18, True, None)
DATE = KuduType("date", 19, True, 4)
# A column of a non-scalar type; today only one-dimensional arrays of a scalar type (the column's
# ``nested_type``). Not in ALL_TYPES: it is never a cell's type of its own.
NESTED = KuduType("nested", 21, False, None)

ALL_TYPES: tuple[KuduType, ...] = (
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    BOOL,
    FLOAT,
    DOUBLE,
    BINARY,
    UNIXTIME_MICROS,
    DECIMAL,
    VARCHAR,
    DATE,
)

_ARROW_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "float": pa.float32(),
    "double": pa.float64(),
    "binary": pa.binary(),
    "unixtime_micros": pa.timestamp("us", tz="UTC"),
    "varchar": pa.string(),
    "date": pa.date32(),
}

_INT_BOUNDS: dict[str, tuple[int, int]] = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}

_BY_NAME: dict[str, KuduType] = {t.name: t for t in (*ALL_TYPES, NESTED)}
# kudu-python's constant names and common aliases (kudu.float_, kudu.bool_, "timestamp" ...).
_ALIASES: dict[str, KuduType] = {
    "float_": FLOAT,
    "float32": FLOAT,
    "float64": DOUBLE,
    "bool_": BOOL,
    "boolean": BOOL,
    "timestamp": UNIXTIME_MICROS,
    "unixtime_micros_": UNIXTIME_MICROS,
    "decimal128": DECIMAL,
}


def type_from_name(name: str | KuduType) -> KuduType:
    """Look a type up by its Kudu name (case-insensitive, kudu-python aliases accepted)."""
    if isinstance(name, KuduType):
        return name
    if not isinstance(name, str):
        raise KuduInvalidArgument(f"expected a type name, got {type(name).__name__}")
    key = name.strip().lower()
    t = _BY_NAME.get(key) or _ALIASES.get(key)
    if t is None:
        raise KuduInvalidArgument(f"unknown data type '{name}'")
    return t


# Element types an array column may hold (Kudu 1.18: every scalar type; DECIMAL up to precision 18).
ARRAY_ELEMENT_TYPES: tuple[KuduType, ...] = ALL_TYPES


@dataclass(frozen=True)
class ArrayTypeDescriptor:
    """kudu-python's ``ArrayTypeDescriptor``: a one-dimensional array of one scalar element type.

    The element's parameters (DECIMAL's precision and scale, VARCHAR's length) are set on the column, as in
    Kudu. ``element_type`` is the type id (``kudu.schema.INT64`` ...), as kudu-python returns it;
    ``element_kudu_type`` is the type object."""

    element_kudu_type: KuduType

    def __init__(self, element_type: Any) -> None:
        kt = element_type if isinstance(element_type, KuduType) else _type_from_any(element_type)
        if kt is NESTED:
            raise KuduNotSupported("only one-dimensional arrays of a scalar type are supported, not arrays of arrays")
        object.__setattr__(self, "element_kudu_type", kt)

    @property
    def element_type(self) -> int:
        return self.element_kudu_type.type_id

    def __repr__(self) -> str:
        return f"ArrayTypeDescriptor(element_type={self.element_kudu_type.name})"


@dataclass(frozen=True)
class NestedTypeDescriptor:
    """kudu-python's ``NestedTypeDescriptor``: what a NESTED column holds (an array, the only nested kind)."""

    array_descriptor: ArrayTypeDescriptor

    def __init__(self, array_descriptor: ArrayTypeDescriptor) -> None:
        if not isinstance(array_descriptor, ArrayTypeDescriptor):
            raise TypeError(f"Expected ArrayTypeDescriptor, got {type(array_descriptor)}")
        object.__setattr__(self, "array_descriptor", array_descriptor)

    def is_array(self) -> bool:
        return True

    def array(self) -> ArrayTypeDescriptor:
        return self.array_descriptor

    @property
    def element_type(self) -> KuduType:
        """The array's element type object."""
        return self.array_descriptor.element_kudu_type

    def __repr__(self) -> str:
        return "NestedTypeDescriptor(type=array)"


def array_type(element_type: Any) -> NestedTypeDescriptor:
    """kudu-python's ``kudu.array_type``: the descriptor of a one-dimensional array of ``element_type``, for
    ``ColumnSpec.nested_type``: ``builder.add_column("v").nested_type(kudu.array_type(kudu.int64))``."""
    return NestedTypeDescriptor(ArrayTypeDescriptor(element_type))


_BY_ID: dict[int, KuduType] = {t.type_id: t for t in (*ALL_TYPES, NESTED)}


def _type_from_any(value: Any) -> KuduType:
    """A type given as a type object, a name or a type id (kudu-python's ``to_data_type``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        kt = _BY_ID.get(value)
        if kt is None:
            raise KuduInvalidArgument(f"Invalid type: {value}")
        return kt
    return type_from_name(value)


def int_bounds(kt: KuduType) -> tuple[int, int] | None:
    """(min, max) of an integer type; None for other types."""
    return _INT_BOUNDS.get(kt.name)


def decimal_width(precision: int) -> int:
    """Kudu stores DECIMAL in 4 bytes up to precision 9, 8 up to 18, else 16."""
    if precision <= 9:
        return 4
    if precision <= 18:
        return 8
    return 16


def type_from_arrow(t: pa.DataType) -> tuple[KuduType, dict[str, int]]:
    """The Kudu type for an Arrow type, plus its attributes (precision/scale) if any."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_decimal(t):
        return DECIMAL, {"precision": t.precision, "scale": t.scale}
    for matches, kt in _FROM_ARROW:
        if matches(t):
            return kt, {}
    raise KuduInvalidArgument(f"Arrow type {t} has no Kudu equivalent")


_FROM_ARROW: tuple[tuple[Callable[[pa.DataType], bool], KuduType], ...] = (
    (pa.types.is_int8, INT8),
    (pa.types.is_int16, INT16),
    (pa.types.is_int32, INT32),
    (pa.types.is_int64, INT64),
    (pa.types.is_float32, FLOAT),
    (pa.types.is_float64, DOUBLE),
    (pa.types.is_boolean, BOOL),
    (pa.types.is_string, STRING),
    (pa.types.is_large_string, STRING),
    (pa.types.is_string_view, STRING),
    (pa.types.is_binary, BINARY),
    (pa.types.is_large_binary, BINARY),
    (pa.types.is_binary_view, BINARY),
    (pa.types.is_timestamp, UNIXTIME_MICROS),
    (pa.types.is_date32, DATE),
    (pa.types.is_date64, DATE),
)


# --- value coercion -----------------------------------------------------------------------------------


def _type_label(kt: KuduType, precision: int | None, scale: int | None, length: int | None) -> str:
    if kt is DECIMAL:
        return f"decimal({precision},{scale or 0})"
    if kt is VARCHAR:
        return f"varchar({length})"
    return kt.name


def _bad(column: str, expected: str, value: Any) -> KuduInvalidArgument:
    return KuduInvalidArgument(
        f"column '{column}': expected {expected}, got {type(value).__name__}", {"column": column}
    )


def datetime_to_micros(value: _dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC (kudu-python does the same)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    delta = value - _EPOCH_DT
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


ISO_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"
"""kudu-python's format for a timestamp given as a bare string."""


def parse_timestamp(value: str | tuple[str, str], fmt: str = ISO_TIMESTAMP_FORMAT) -> _dt.datetime:
    """A timestamp written as kudu-python takes it: a string in ``fmt``, or a ``(string, format)`` tuple
    (``strptime`` formats; no zone in the string means UTC)."""
    if isinstance(value, tuple):
        if len(value) != 2 or not all(isinstance(v, str) for v in value):
            raise KuduInvalidArgument(f"a timestamp tuple is (string, format), not {value!r}")
        value, fmt = value
    try:
        return _dt.datetime.strptime(value, fmt)
    except ValueError as e:
        raise KuduInvalidArgument(f"timestamp {value!r} does not match format {fmt!r}: {e}") from e


def micros_to_datetime(micros: int) -> _dt.datetime:
    """A UTC-aware datetime for microseconds since the epoch (raises OverflowError outside year 1-9999)."""
    return _EPOCH_DT + _dt.timedelta(microseconds=micros)


def date_to_days(value: _dt.date) -> int:
    return (value - _EPOCH_DATE).days


def days_to_date(days: int) -> _dt.date:
    return _EPOCH_DATE + _dt.timedelta(days=days)


def decimal_to_unscaled(value: _decimal.Decimal, scale: int) -> int:
    """The unscaled integer of a Decimal already quantised to ``scale`` (exact, no context rounding)."""
    sign, digits, exp = value.as_tuple()
    assert isinstance(exp, int)
    mag = int("".join(map(str, digits)) or "0")
    shift = exp + scale
    factor: int = 10 ** abs(shift)
    mag = mag * factor if shift >= 0 else mag // factor
    return -mag if sign else mag


def unscaled_to_decimal(unscaled: int, scale: int) -> _decimal.Decimal:
    """Exact inverse of ``decimal_to_unscaled`` (string construction never rounds)."""
    return _decimal.Decimal(f"{unscaled}E-{scale}")


def _int_in(lo: int, hi: int, v: Any) -> bool:
    return type(v) is int and lo <= v <= hi


def _is_exact(kind: type, v: Any) -> bool:
    return type(v) is kind


def _str_upto(limit: int, v: Any) -> bool:
    return type(v) is str and len(v) <= limit


def _bytes_upto(limit: int, v: Any) -> bool:
    return type(v) is bytes and len(v) <= limit


def canonical_check(kt: KuduType, length: int | None = None) -> Callable[[Any], bool] | None:
    """A cheap test that a value is already canonical for ``kt`` (the row API's common case), so
    ``coerce_value`` runs only for values that need converting or rejecting; None where every value
    needs the full path. It accepts only values that ``coerce_value`` would return unchanged.
    (Partials of module functions, not lambdas, so a schema holding them still pickles.)"""
    name = kt.name
    if name in _INT_BOUNDS:
        return functools.partial(_int_in, *_INT_BOUNDS[name])
    if kt is DOUBLE:
        return functools.partial(_is_exact, float)
    if kt is BOOL:
        return functools.partial(_is_exact, bool)
    if kt is STRING or kt is VARCHAR:
        # at most 4 UTF-8 bytes per code point, so short strings cannot exceed the cell limit
        limit = MAX_CELL_SIZE_BYTES // 4 if length is None else min(length, MAX_CELL_SIZE_BYTES // 4)
        return functools.partial(_str_upto, limit)
    if kt is BINARY:
        return functools.partial(_bytes_upto, MAX_CELL_SIZE_BYTES)
    return None


def coerce_value(
    kt: KuduType,
    value: Any,
    *,
    column: str = "?",
    precision: int | None = None,
    scale: int | None = None,
    length: int | None = None,
) -> Any:
    """Check and convert one non-None Python value to the canonical form of a column of type ``kt``.

    Accepts what kudu-python accepts (datetime for timestamps, date, Decimal, numpy scalars) and
    raises KuduInvalidArgument naming the column otherwise. Strings longer than a VARCHAR's length are
    truncated, as Kudu does; cells over 64 KiB are rejected.
    """
    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, KuduValue):
        value = value.value
    coerce = _COERCERS.get(kt.name)
    if coerce is None:  # pragma: no cover
        raise KuduInvalidArgument(f"column '{column}': unsupported type {kt.name}")
    return coerce(kt, value, column, precision, scale, length)


def coerce_array(
    kt: KuduType,
    value: Any,
    *,
    column: str = "?",
    precision: int | None = None,
    scale: int | None = None,
    length: int | None = None,
) -> list[Any]:
    """Check and convert one array cell: a list or tuple (or a one-dimensional numpy array) of values of
    element type ``kt``, None for a NULL element. At most :data:`MAX_ARRAY_ELEMENTS` elements, and the
    string/binary elements of one cell together at most 64 KiB (Kudu limits the whole cell)."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    elif isinstance(value, KuduValue):
        raise KuduInvalidArgument(f"column '{column}': an array cell is a list, not a KuduValue", {"column": column})
    if not isinstance(value, list | tuple):
        raise KuduInvalidArgument(
            f"column '{column}': expected a list or tuple for a {kt.name} 1d-array, got {type(value).__name__}",
            {"column": column},
        )
    if len(value) > MAX_ARRAY_ELEMENTS:
        raise KuduInvalidArgument(
            f"too many array elements for column '{column}' ({len(value)}, maximum is {MAX_ARRAY_ELEMENTS})",
            {"column": column},
        )
    out = [
        None if v is None else coerce_value(kt, v, column=column, precision=precision, scale=scale, length=length)
        for v in value
    ]
    if kt.is_string_like:
        size = sum(
            len(v.encode("utf-8", "surrogatepass")) if isinstance(v, str) else len(v) for v in out if v is not None
        )
        _check_cell_size(column, size)
    return out


# One coercer per type, all with coerce_value's arguments: (kt, value, column, precision, scale, length).
_Coercer = Callable[[KuduType, Any, str, int | None, int | None, int | None], Any]


def _coerce_int(kt: KuduType, value: Any, column: str, _p: int | None, _s: int | None, _n: int | None) -> Any:
    name = kt.name
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(column, name, value)
    lo, hi = _INT_BOUNDS[name]
    if not lo <= value <= hi:
        raise KuduInvalidArgument(f"column '{column}': value {value} out of range for {name}", {"column": column})
    return value


def _coerce_float(kt: KuduType, value: Any, column: str, _p: int | None, _s: int | None, _n: int | None) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(column, kt.name, value)
    out = float(value)
    if kt is FLOAT:
        return float(np.float32(out))
    return out


def _coerce_bool(kt: KuduType, value: Any, column: str, _p: int | None, _s: int | None, _n: int | None) -> Any:
    if not isinstance(value, bool):
        raise _bad(column, kt.name, value)
    return value


def _coerce_string(
    kt: KuduType, value: Any, column: str, precision: int | None, scale: int | None, length: int | None
) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise KuduInvalidArgument(f"column '{column}': invalid UTF-8 in string value", {"column": column}) from None
    if not isinstance(value, str):
        raise _bad(column, _type_label(kt, precision, scale, length), value)
    if kt is VARCHAR and length is not None and len(value) > length:
        value = value[:length]
    _check_cell_size(column, len(value.encode("utf-8", "surrogatepass")))
    return value


def _coerce_binary(kt: KuduType, value: Any, column: str, _p: int | None, _s: int | None, _n: int | None) -> Any:
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, bytes | bytearray | memoryview):
        raise _bad(column, kt.name, value)
    out_b = bytes(value)
    _check_cell_size(column, len(out_b))
    return out_b


def _coerce_timestamp(kt: KuduType, value: Any, column: str, _p: int | None, _s: int | None, _n: int | None) -> Any:
    if isinstance(value, _dt.datetime):
        micros = datetime_to_micros(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        micros = value
    elif _is_pandas_timestamp(value):
        micros = int(value.value // 1000)
    elif isinstance(value, str | tuple):
        try:
            micros = datetime_to_micros(parse_timestamp(value))
        except KuduInvalidArgument as e:
            raise KuduInvalidArgument(
                f"column '{column}': expected unixtime_micros, got {type(value).__name__}: {e.message}",
                {"column": column},
            ) from e
    else:
        raise _bad(column, "unixtime_micros (datetime, int microseconds, ISO string or (string, format))", value)
    lo, hi = _INT_BOUNDS["int64"]
    if not lo <= micros <= hi:
        raise KuduInvalidArgument(f"column '{column}': timestamp out of range", {"column": column})
    return micros


def _coerce_date(kt: KuduType, value: Any, column: str, _p: int | None, _s: int | None, _n: int | None) -> Any:
    if isinstance(value, _dt.datetime):
        raise _bad(column, "date", value)
    if isinstance(value, _dt.date):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if not _MIN_DATE_DAYS <= value <= _MAX_DATE_DAYS:
            raise KuduInvalidArgument(f"column '{column}': date {value} days out of range", {"column": column})
        return days_to_date(value)
    raise _bad(column, "date", value)


def _coerce_decimal(
    kt: KuduType, value: Any, column: str, precision: int | None, scale: int | None, _n: int | None
) -> Any:
    p = precision if precision is not None else MAX_DECIMAL_PRECISION
    s = scale or 0
    label = f"decimal({p},{s})"
    if isinstance(value, bool) or not isinstance(value, int | _decimal.Decimal):
        raise _bad(column, label, value)
    d = _decimal.Decimal(value)
    if not d.is_finite():
        raise KuduInvalidArgument(f"column '{column}': {d} is not a finite decimal", {"column": column})
    with _decimal.localcontext() as ctx:
        ctx.prec = 80
        q = d.quantize(_decimal.Decimal(1).scaleb(-s))
        if q != d:
            raise KuduInvalidArgument(
                f"column '{column}': {d} has more than {s} fractional digits for {label}",
                {"column": column},
            )
        unscaled = decimal_to_unscaled(q, s)
    if abs(unscaled) >= 10**p:
        raise KuduInvalidArgument(f"column '{column}': {d} out of range for {label}", {"column": column})
    return q


_COERCERS: dict[str, _Coercer] = {
    **{name: _coerce_int for name in _INT_BOUNDS},
    FLOAT.name: _coerce_float,
    DOUBLE.name: _coerce_float,
    BOOL.name: _coerce_bool,
    STRING.name: _coerce_string,
    VARCHAR.name: _coerce_string,
    BINARY.name: _coerce_binary,
    UNIXTIME_MICROS.name: _coerce_timestamp,
    DATE.name: _coerce_date,
    DECIMAL.name: _coerce_decimal,
}


def _is_pandas_timestamp(value: Any) -> bool:
    return type(value).__name__ == "Timestamp" and hasattr(value, "value") and hasattr(value, "tz")


def _check_cell_size(column: str, size: int) -> None:
    if size > MAX_CELL_SIZE_BYTES:
        raise KuduInvalidArgument(
            f"column '{column}': cell of {size} bytes exceeds {MAX_CELL_SIZE_BYTES}", {"column": column}
        )


def to_physical(kt: KuduType, value: Any, scale: int | None = None) -> Any:
    """The physical (storage / key-encoding) form of a canonical value: ints for the time types and
    for DECIMAL's unscaled value; other types unchanged."""
    if kt is DATE:
        return date_to_days(value)
    if kt is DECIMAL:
        return decimal_to_unscaled(value, scale or 0)
    return value


def from_physical(kt: KuduType, value: Any, scale: int | None = None) -> Any:
    """Inverse of ``to_physical``."""
    if kt is DATE:
        return days_to_date(value)
    if kt is DECIMAL:
        return unscaled_to_decimal(value, scale or 0)
    return value


# --- msgpack-able wire form of loose values (predicates, defaults) ------------------------------------


def value_to_wire(value: Any) -> Any:
    """A msgpack-able form of a value whose type is not known from context (tagged dicts)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, _decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, _dt.datetime):
        return {"$micros": datetime_to_micros(value)}
    if isinstance(value, _dt.date):
        return {"$date": date_to_days(value)}
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, list | tuple):
        return [value_to_wire(v) for v in value]
    return value


def value_from_wire(value: Any) -> Any:
    """Inverse of ``value_to_wire`` (datetimes come back as UTC-aware datetimes)."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, v),) = value.items()
        if tag == "$decimal":
            return _decimal.Decimal(v)
        if tag == "$micros":
            return micros_to_datetime(int(v))
        if tag == "$date":
            return days_to_date(int(v))
    if isinstance(value, list):
        return [value_from_wire(v) for v in value]
    return value
