"""Table schemas: ordered columns with a primary key (one column is ``column``), Arrow conversion, validation.

A ``Schema`` is immutable and validated on construction, so every layer (client, master, tablet) can
trust one it holds. Two validation paths exist on purpose: ``validate_row`` for the per-row client
API (kudu-python's ``op['col'] = v``) and the vectorised ``validate_batch_rows`` that the write paths
(the client's ``apply_arrow``, the tablet's) use on whole Arrow batches without touching Python objects
per cell.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.common import types as T
from kudu_async.common.column import (
    AUTO_INCREMENTING_COLUMN_NAME,
    COMPRESSIONS,
    ENCODINGS,
    ColumnSchema,
    array_cell_bytes,
    array_value_lengths,
    cast_column,
)
from kudu_async.common.errors import KuduInvalidArgument, KuduNotFound
from kudu_async.common.key_encoding import MAX_ENCODED_KEY_SIZE_BYTES, encode_key, encode_values

MAX_COLUMNS = 300

# Write operations (RowOperationsPB.Type names, lower case) and which columns each needs.
INSERT_LIKE_OPS = frozenset({"insert", "insert_ignore", "upsert", "upsert_ignore"})
UPDATE_OPS = frozenset({"update", "update_ignore"})
DELETE_OPS = frozenset({"delete", "delete_ignore"})
INSERT_OPS = frozenset({"insert", "insert_ignore"})
# Kudu's per-row errors for the auto-incrementing column.
AUTO_INC_SET_ON_INSERT = "auto-incrementing column should not be set for INSERT/INSERT_IGNORE operations"
AUTO_INC_MISSING_ON_UPSERT = "auto-incrementing column should be set for UPSERT/UPSERT_IGNORE operations"
AUTO_INC_NEGATIVE = "auto-incrementing column value must be greater than zero"
WRITE_OPS = INSERT_LIKE_OPS | UPDATE_OPS | DELETE_OPS


def _norm_op(for_op: str) -> str:
    op = str(for_op).lower()
    if op not in WRITE_OPS:
        raise KuduInvalidArgument(f"unknown write operation '{for_op}'")
    return op


@dataclass(frozen=True, init=False, repr=False)
class Schema:
    """An ordered list of columns whose first ``num_key_columns`` form the primary key."""

    columns: tuple[ColumnSchema, ...]
    num_key_columns: int
    _index: dict[str, int] = field(repr=False, compare=False)

    def __init__(self, columns: Iterable[ColumnSchema], key_column_count: int) -> None:
        cols = tuple(columns)
        for c in cols:
            if not isinstance(c, ColumnSchema):
                raise KuduInvalidArgument(f"expected ColumnSchema, got {type(c).__name__}")
        if not cols:
            raise KuduInvalidArgument("a schema needs at least one column")
        if len(cols) > MAX_COLUMNS:
            raise KuduInvalidArgument(f"schema has {len(cols)} columns; the limit is {MAX_COLUMNS}")
        if isinstance(key_column_count, bool) or not isinstance(key_column_count, int):
            raise KuduInvalidArgument("key_column_count must be an int")
        if not 1 <= key_column_count <= len(cols):
            raise KuduInvalidArgument(
                f"the primary key must be a non-empty prefix of the columns (got {key_column_count} of {len(cols)})"
            )
        index: dict[str, int] = {}
        for i, c in enumerate(cols):
            if c.name in index:
                raise KuduInvalidArgument(f"duplicate column name '{c.name}'")
            index[c.name] = i
        for c in cols[:key_column_count]:
            if c.nullable:
                raise KuduInvalidArgument(f"key column '{c.name}' must be NOT NULL")
            if c.is_array:
                raise KuduInvalidArgument(
                    f"key column may not have type of BOOL, FLOAT, DOUBLE, or NESTED (e.g., array): "
                    f"'{c.name}' is {c.type_label}"
                )
            if not c.type.key_allowed:
                raise KuduInvalidArgument(f"key column '{c.name}' may not be of type {c.type.name}")
        auto = [i for i, c in enumerate(cols) if c.auto_incrementing]
        if auto and (auto != [key_column_count - 1] or key_column_count < 2):
            raise KuduInvalidArgument(
                f"a schema has at most one auto-incrementing column, the last key column after the non-unique "
                f"primary key columns (got it at {auto} with {key_column_count} key columns)"
            )
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "num_key_columns", key_column_count)
        object.__setattr__(self, "_index", index)

    # -- lookups ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.columns)

    def __iter__(self) -> Iterator[ColumnSchema]:
        return iter(self.columns)

    def __getitem__(self, key: int | str) -> ColumnSchema:
        if isinstance(key, str):
            return self.column(key)
        return self.columns[key]

    # -- kudu-python's Schema surface ---------------------------------------------------------------------

    def equals(self, other: Schema) -> bool:
        return isinstance(other, Schema) and self == other

    def at(self, i: int) -> ColumnSchema:
        """The column at index ``i`` (IndexError out of range, negative indexes included, as in kudu-python)."""
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.columns):
            raise IndexError(f"Column index {i} is not in range")
        return self.columns[i]

    def get_loc(self, name: str) -> int:
        """The index of column ``name`` (KeyError if there is none)."""
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(name) from None

    def primary_key_indices(self) -> list[int]:
        return list(range(self.num_key_columns))

    @staticmethod
    def get_auto_incrementing_column_name() -> str:
        """The name of the hidden key column a non-unique primary key gets (Kudu's constant)."""
        return AUTO_INCREMENTING_COLUMN_NAME

    @functools.cached_property
    def auto_incrementing_index(self) -> int | None:
        """The index of the auto-incrementing column (the last key column), None without one."""
        last = self.num_key_columns - 1
        return last if self.columns[last].auto_incrementing else None

    @property
    def user_key_names(self) -> list[str]:
        """The key columns a writer gives: all of them but the auto-incrementing one (what partitions
        may be defined on, since a row is routed before the server assigns its id)."""
        return [c.name for c in self.key_columns if not c.auto_incrementing]

    def new_row(self, record: Mapping[Any, Any] | Sequence[Any] | None = None) -> PartialRow:
        """An empty row of this schema (filled from ``record`` if given): bounds and split rows."""
        row = PartialRow(self)
        if record:
            row.from_record(record)
        return row

    def __repr__(self) -> str:
        width = 2 + max(len(c.name) for c in self.columns)
        lines = [f"  {c.name.ljust(width)}{c.type_to_string()}" for c in self.columns]
        lines.append(f"  PRIMARY KEY ({', '.join(self.key_names)})")
        return "kudu.Schema {\n" + "\n".join(lines) + "\n}"

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return self.columns == other.columns and self.num_key_columns == other.num_key_columns

    def __hash__(self) -> int:
        return hash((self.columns, self.num_key_columns))

    @property
    def key_column_count(self) -> int:
        return self.num_key_columns

    def column(self, name: str) -> ColumnSchema:
        return self.columns[self.column_index(name)]

    def column_index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KuduNotFound(f"column '{name}' is not in the schema", {"column": name}) from None

    @property
    def key_columns(self) -> tuple[ColumnSchema, ...]:
        return self.columns[: self.num_key_columns]

    @property
    def key_names(self) -> list[str]:
        return [c.name for c in self.key_columns]

    def primary_keys(self) -> list[str]:
        """kudu-python's name for the key column names."""
        return self.key_names

    @property
    def names(self) -> list[str]:
        return list(self._names)

    @functools.cached_property
    def _names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def num_columns(self) -> int:
        return len(self.columns)

    def is_key_column(self, name: str) -> bool:
        return self.column_index(name) < self.num_key_columns

    # -- conversions ------------------------------------------------------------------------------------

    def to_arrow(self) -> pa.Schema:
        return pa.schema([c.to_arrow_field() for c in self.columns])

    @classmethod
    def from_arrow(cls, schema: pa.Schema, num_key_columns: int) -> Schema:
        """A Schema from Arrow fields; key columns are made NOT NULL (Arrow fields default nullable)."""
        cols = [
            ColumnSchema.from_arrow_field(f, nullable=False if i < num_key_columns else None)
            for i, f in enumerate(schema)
        ]
        return cls(cols, num_key_columns)

    def to_dict(self) -> dict[str, Any]:
        """msgpack-able form for the wire and tablet metadata; ``from_dict`` restores it exactly."""
        return {"columns": [c.to_dict() for c in self.columns], "num_key_columns": self.num_key_columns}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Schema:
        try:
            return cls([ColumnSchema.from_dict(c) for c in d["columns"]], int(d["num_key_columns"]))
        except (KeyError, TypeError) as e:
            raise KuduInvalidArgument(f"malformed schema: {e!r}") from None

    # -- column ids -------------------------------------------------------------------------------------

    @property
    def next_column_id(self) -> int:
        return max((c.id for c in self.columns if c.id is not None), default=-1) + 1

    def with_column_ids(self, first_free: int | None = None) -> Schema:
        """Every column without an id gets a fresh one (after every id present, or ``first_free``)."""
        nxt = max(self.next_column_id, first_free or 0)
        cols = []
        for c in self.columns:
            if c.id is None:
                c = dataclasses.replace(c, id=nxt)
                nxt += 1
            cols.append(c)
        ids = [c.id for c in cols]
        if len(set(ids)) != len(ids):
            raise KuduInvalidArgument(f"column ids must be unique, got {ids}")
        return Schema(cols, self.num_key_columns)

    # -- AlterTable steps (each returns a new Schema; the rules are Kudu's) ------------------------------

    def add_column(self, col: ColumnSchema) -> Schema:
        """A new non-key column at the end; it must be nullable or have a default (existing rows)."""
        if col.name in self._index:
            raise KuduInvalidArgument(f"column '{col.name}' already exists", {"column": col.name})
        if not col.nullable and col.default is None:
            raise KuduInvalidArgument(
                f"column '{col.name}': a new column must be nullable or have a default", {"column": col.name}
            )
        return Schema([*self.columns, col], self.num_key_columns)

    def drop_column(self, name: str) -> Schema:
        if self.is_key_column(name):
            raise KuduInvalidArgument(f"cannot drop key column '{name}'", {"column": name})
        return Schema([c for c in self.columns if c.name != name], self.num_key_columns)

    def rename_column(self, old: str, new: str) -> Schema:
        """Any column may be renamed, key columns too."""
        i = self.column_index(old)
        if new != old and new in self._index:
            raise KuduInvalidArgument(f"column '{new}' already exists", {"column": new})
        cols = list(self.columns)
        cols[i] = dataclasses.replace(cols[i], name=new)
        return Schema(cols, self.num_key_columns)

    def alter_column(self, name: str, **changes: Any) -> Schema:
        """Change what Kudu lets AlterTable change: ``default`` (None removes it), ``comment``,
        ``encoding``, ``compression``, ``block_size``, ``immutable``. Type, nullability, precision,
        scale and length are fixed for the life of a column."""
        allowed = {"default", "comment", "encoding", "compression", "block_size", "immutable"}
        bad = set(changes) - allowed
        if bad:
            raise KuduInvalidArgument(f"column '{name}': cannot alter {', '.join(sorted(bad))}", {"column": name})
        i = self.column_index(name)
        cols = list(self.columns)
        cols[i] = dataclasses.replace(cols[i], **changes)
        return Schema(cols, self.num_key_columns)

    # -- per-row validation -----------------------------------------------------------------------------

    def validate_row(self, row: Mapping[str, Any] | Sequence[Any], *, for_op: str = "insert") -> dict[str, Any]:
        """Check one row for ``for_op`` and return ``{name: canonical value}``.

        insert/upsert: every column, defaults filled in, NOT NULL enforced. update: key + given columns.
        delete: key columns only (other given columns are checked and dropped).
        """
        op = _norm_op(for_op)
        if isinstance(row, Mapping):
            given = dict(row)
        else:
            vals = list(row)
            if len(vals) > len(self.columns):
                raise KuduInvalidArgument(f"row has {len(vals)} values; the schema has {len(self.columns)} columns")
            given = {c.name: v for c, v in zip(self.columns, vals, strict=False)}
        if not given.keys() <= self._index.keys():
            name = next(n for n in given if n not in self._index)
            raise KuduInvalidArgument(f"column '{name}' is not in the schema", {"column": name})
        deleting = op in DELETE_OPS
        inserting = op in INSERT_LIKE_OPS
        out: dict[str, Any] = {}
        assigned = self._check_auto_incrementing(given, op)
        for name, is_key, canonical, fill, c in self._row_plan:
            if name in given:
                v = given[name]
                if v is None:
                    if not c.nullable:
                        raise KuduInvalidArgument(f"column '{name}': NULL in NOT NULL column", {"column": name})
                elif canonical is None or not canonical(v):
                    v = c.coerce(v)
                if not deleting or is_key:
                    out[name] = v
            elif name == assigned:
                continue  # the tablet server fills it in
            elif is_key:
                raise KuduInvalidArgument(f"column '{name}': key column missing", {"column": name})
            elif inserting:
                if fill is _REQUIRED:
                    raise KuduInvalidArgument(
                        f"column '{name}': NOT NULL column without a default is missing", {"column": name}
                    )
                out[name] = fill
        if self._variable_key and _max_key_bound(self, out) > MAX_ENCODED_KEY_SIZE_BYTES:
            encode_key(self, [out[c.name] for c in self.key_columns])
        return out

    def _check_auto_incrementing(self, given: dict[str, Any], op: str) -> str | None:
        """Kudu's rules for the auto-incrementing column of one row: an INSERT leaves it out (the name is
        returned: the tablet server assigns it, and it is dropped from ``given``), an UPSERT gives it, and
        a value is never below zero."""
        auto = self.auto_incrementing_index
        if auto is None:
            return None
        name = self.columns[auto].name
        value = given.get(name)
        if op in INSERT_OPS:
            if value is not None:
                raise KuduInvalidArgument(AUTO_INC_SET_ON_INSERT, {"column": name})
            given.pop(name, None)
            return name
        if value is None and op in INSERT_LIKE_OPS:
            raise KuduInvalidArgument(AUTO_INC_MISSING_ON_UPSERT, {"column": name})
        if isinstance(value, int) and value < 0:
            raise KuduInvalidArgument(AUTO_INC_NEGATIVE, {"column": name})
        return None

    @functools.cached_property
    def _row_plan(self) -> tuple[tuple[str, bool, Callable[[Any], bool] | None, Any, ColumnSchema], ...]:
        """Per column: name, is it a key column, its canonical-value test (see ``T.canonical_check``), and
        what an insert that omits it stores (its default, NULL, or ``_REQUIRED``: the insert is refused)."""
        return tuple(
            (c.name, i < self.num_key_columns, T.canonical_check(c.type, c.length), _insert_fill(c), c)
            for i, c in enumerate(self.columns)
        )

    @functools.cached_property
    def _variable_key(self) -> bool:
        """Whether a key can approach the encoded-key limit (fixed-size keys never can)."""
        return any(c.type in (T.STRING, T.VARCHAR, T.BINARY) for c in self.key_columns)

    # -- vectorised validation --------------------------------------------------------------------------

    def validate_batch_rows(
        self, batch: pa.RecordBatch | pa.Table, *, for_op: str
    ) -> tuple[pa.RecordBatch, dict[int, str]]:
        """Check and normalise a whole batch for ``for_op`` with pyarrow.compute (no per-cell Python).

        Columns may come in any order and be a subset. Returns one RecordBatch with the schema's Arrow
        types (for insert/upsert every column, missing ones filled with the default or NULL; for update
        the key columns plus the given ones, in schema order; for delete the key columns only; VARCHAR
        values truncated to their length) and the problems confined to rows as ``{row_index: message}``
        (NULL in a NOT NULL column, an integer out of range, a cell over 64 KiB, an encoded key over
        16 KiB), every row kept, so the write path can answer INVALID_ARGUMENT for those rows only.
        Problems of a whole column (wrong type, unknown or missing column) raise KuduInvalidArgument.
        """
        op = _norm_op(for_op)
        arrays_in = self._batch_arrays(batch)
        n = batch.num_rows
        errors: dict[int, str] = {}
        out_cols: list[ColumnSchema] = []
        out_arrays: list[pa.Array] = []
        for i, c in enumerate(self.columns):
            is_key = i < self.num_key_columns
            if c.auto_incrementing and op in INSERT_LIKE_OPS:
                arr = _auto_incrementing_column(c, arrays_in.get(c.name), n, op, errors)
            elif c.name in arrays_in:
                if op in DELETE_OPS and not is_key:
                    continue
                arr = _checked_column(c, arrays_in[c.name], errors)
                if c.auto_incrementing:
                    _refuse_negative(arr, errors)
            elif is_key:
                raise KuduInvalidArgument(f"column '{c.name}': key column missing", {"column": c.name})
            elif op in INSERT_LIKE_OPS:
                arr = _filled_column(c, n)
            else:
                continue
            out_cols.append(c)
            out_arrays.append(arr)
        fields = [c.to_arrow_field() for c in out_cols]
        result = pa.RecordBatch.from_arrays(out_arrays, schema=pa.schema(fields))
        if n:
            for r, msg in _oversized_keys(self, result).items():
                errors.setdefault(r, msg)
        return result, errors

    def _batch_arrays(self, batch: pa.RecordBatch | pa.Table) -> dict[str, pa.Array]:
        """The batch's columns by name (one chunk each); raises for a non-Arrow batch, a duplicate name or
        a column the schema does not have."""
        if isinstance(batch, pa.Table):
            arrays = {n: batch.column(i).combine_chunks() for i, n in enumerate(batch.schema.names)}
        elif isinstance(batch, pa.RecordBatch):
            arrays = {n: batch.column(i) for i, n in enumerate(batch.schema.names)}
        else:
            raise KuduInvalidArgument(f"expected a pyarrow RecordBatch or Table, got {type(batch).__name__}")
        if len(arrays) != batch.num_columns:
            raise KuduInvalidArgument("batch has duplicate column names")
        for name in arrays:
            if name not in self._index:
                raise KuduInvalidArgument(f"column '{name}' is not in the schema", {"column": name})
        return arrays


_REQUIRED: Any = object()  # in ``Schema._row_plan``: a column an insert must give


class PartialRow(Mapping[str, Any]):
    """Some cells of a row of ``schema``, by column name or index: kudu-python's row for scan bounds,
    range bounds and split rows. It reads as a dict of the cells set, so it goes wherever a dict row does.
    Each value is checked against its column when set."""

    def __init__(self, schema: Schema) -> None:
        if not isinstance(schema, Schema):
            raise KuduInvalidArgument(f"a PartialRow needs a Schema, not {type(schema).__name__}")
        self.schema = schema
        self._cells: dict[str, Any] = {}

    def _name(self, key: str | int) -> str:
        if isinstance(key, str):
            return self.schema.column(key).name
        if isinstance(key, bool) or not isinstance(key, int):
            raise KuduInvalidArgument(f"a column is named by a string or an index, not {key!r}")
        return self.schema.at(key).name

    def __setitem__(self, key: str | int, value: Any) -> None:
        self.set_field(key, value)

    def __getitem__(self, key: str) -> Any:
        return self._cells[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cells)

    def __len__(self) -> int:
        return len(self._cells)

    def from_record(self, record: Mapping[Any, Any] | Sequence[Any]) -> None:
        """Set cells from a dict (keys: names or indexes) or a tuple/list in column order."""
        if isinstance(record, Mapping):
            for k, v in record.items():
                self.set_field(k, v)
        elif isinstance(record, Sequence) and not isinstance(record, str | bytes):
            if len(record) > len(self.schema.columns):
                raise KuduInvalidArgument(f"{len(record)} values for a schema of {len(self.schema.columns)} columns")
            for i, v in enumerate(record):
                self.set_field(i, v)
        else:
            raise KuduInvalidArgument(f"a record is a dict, tuple or list, not {type(record).__name__}")

    def set_field(self, key: str | int, value: Any) -> None:
        name = self._name(key)
        if value is None:
            self.set_field_null(name)
            return
        self._cells[name] = self.schema.column(name).coerce(value)

    def set_loc(self, i: int, value: Any) -> None:
        self.set_field(i, value)

    def set_field_null(self, key: str | int) -> None:
        name = self._name(key)
        if not self.schema.column(name).nullable:
            raise KuduInvalidArgument(f"column '{name}' is not nullable", {"column": name})
        self._cells[name] = None

    def set_loc_null(self, i: int) -> None:
        self.set_field_null(i)

    def __repr__(self) -> str:
        return f"PartialRow({self._cells!r})"


def _insert_fill(c: ColumnSchema) -> Any:
    """What an insert that omits column ``c`` stores: its default, else NULL, else ``_REQUIRED``."""
    if c.default is not None:
        return c.default
    return None if c.nullable else _REQUIRED


def _checked_column(c: ColumnSchema, arr: pa.Array, errors: dict[int, str]) -> pa.Array:
    """A given column cast to ``c``'s Arrow type, with the rows it makes invalid added to ``errors``
    (integers out of range, NULL in a NOT NULL column, cells over the size limit)."""
    arr = _null_out_of_range_ints(c, arr, errors)
    arr = cast_column(c, arr, check_cells=False)
    if not c.nullable and arr.null_count:
        for r in np.flatnonzero(pc.is_null(arr).to_numpy(zero_copy_only=False)).tolist():
            errors.setdefault(int(r), f"column '{c.name}': NULL in NOT NULL column")
    limit = T.MAX_CELL_SIZE_BYTES
    if c.is_array and len(arr):
        _array_cell_errors(c, arr, errors)
    elif c.type.is_string_like and len(arr) and _max_cell_bytes(arr) > limit:
        sizes = pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False)
        for r in np.flatnonzero(sizes > limit).tolist():
            errors.setdefault(int(r), f"column '{c.name}': cell of {int(sizes[r])} bytes exceeds {limit}")
    return arr


def _array_cell_errors(c: ColumnSchema, arr: pa.Array, errors: dict[int, str]) -> None:
    """Rows of an array column over Kudu's limits: more than MAX_ARRAY_ELEMENTS elements, or string/binary
    elements of more than 64 KiB together."""
    lengths = array_value_lengths(arr)
    if int(lengths.max()) > T.MAX_ARRAY_ELEMENTS:
        for r in np.flatnonzero(lengths > T.MAX_ARRAY_ELEMENTS).tolist():
            errors.setdefault(
                int(r),
                f"too many array elements for column '{c.name}' ({int(lengths[r])}, maximum is {T.MAX_ARRAY_ELEMENTS})",
            )
    sizes = array_cell_bytes(arr)
    limit = T.MAX_CELL_SIZE_BYTES
    if sizes is not None and int(sizes.max()) > limit:
        for r in np.flatnonzero(sizes > limit).tolist():
            errors.setdefault(int(r), f"column '{c.name}': cell of {int(sizes[r])} bytes exceeds {limit}")


def _auto_incrementing_column(
    c: ColumnSchema, given: pa.Array | None, n: int, op: str, errors: dict[int, str]
) -> pa.Array:
    """The auto-incrementing column of insert-like rows: an INSERT must leave it NULL (the tablet server
    assigns it), an UPSERT must give it (it names the row to update), and never below zero."""
    if given is None:
        given = pa.nulls(n, c.arrow_type)
    arr = cast_column(c, _null_out_of_range_ints(c, given, errors), check_cells=False)
    if op in INSERT_OPS:
        any_bad, bad, message = arr.null_count < n, pc.is_valid(arr), AUTO_INC_SET_ON_INSERT
    else:
        any_bad, bad, message = arr.null_count > 0, pc.is_null(arr), AUTO_INC_MISSING_ON_UPSERT
        _refuse_negative(arr, errors)
    if any_bad:
        for r in np.flatnonzero(bad.to_numpy(zero_copy_only=False)).tolist():
            errors.setdefault(int(r), message)
    return arr


def _refuse_negative(arr: pa.Array, errors: dict[int, str]) -> None:
    neg = pc.fill_null(pc.less(arr, 0), False).to_numpy(zero_copy_only=False)
    for r in np.flatnonzero(neg).tolist():
        errors.setdefault(int(r), AUTO_INC_NEGATIVE)


def _filled_column(c: ColumnSchema, n: int) -> pa.Array:
    """Column ``c`` for ``n`` inserted rows that do not give it: its default, else NULLs; raises when it
    has neither."""
    if c.default is not None:
        return pa.array([c.default] * n, c.arrow_type) if n else pa.array([], c.arrow_type)
    if c.nullable:
        return pa.nulls(n, c.arrow_type)
    raise KuduInvalidArgument(f"column '{c.name}': NOT NULL column without a default is missing", {"column": c.name})


def _max_key_bound(schema: Schema, row: Mapping[str, Any]) -> int:
    """A cheap upper bound of a row's encoded key size (each byte may be escaped, plus terminator)."""
    total = 0
    for c in schema.key_columns:
        v = row.get(c.name)
        if isinstance(v, str):
            total += 4 * len(v) * 2 + 2
        elif isinstance(v, bytes):
            total += 2 * len(v) + 2
        else:
            total += 16
    return total


def _max_cell_bytes(arr: pa.Array) -> int:
    """Largest cell of a string/binary array: one pass over the offsets, no per-cell work."""
    if len(arr) == 0:
        return 0
    if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=arr.offset + len(arr) + 1)
        return int(np.diff(offsets[arr.offset :]).max())
    mx = pc.max(pc.binary_length(arr)).as_py()
    return int(mx or 0)


def _oversized_keys(schema: Schema, batch: pa.RecordBatch) -> dict[int, str]:
    """Rows whose encoded key exceeds 16 KiB; only rows whose cheap size bound allows it are encoded."""
    bound = np.zeros(batch.num_rows, dtype=np.int64)
    has_variable = False
    for c in schema.key_columns:
        if c.type.is_string_like:
            has_variable = True
            lengths = pc.fill_null(pc.binary_length(batch.column(c.name)), 0)
            bound += 2 * lengths.to_numpy(zero_copy_only=False).astype(np.int64) + 2
        else:
            bound += 16
    if not has_variable:
        return {}
    out: dict[int, str] = {}
    for r in np.flatnonzero(bound > MAX_ENCODED_KEY_SIZE_BYTES).tolist():
        values = [batch.column(c.name)[r].as_py() for c in schema.key_columns]
        if any(v is None for v in values):
            continue  # already reported as NULL in a NOT NULL column
        try:
            encode_values(schema.key_columns, values)
        except KuduInvalidArgument as e:
            out[int(r)] = e.message
    return out


def _null_out_of_range_ints(
    col: ColumnSchema, arr: pa.Array | pa.ChunkedArray, errors: dict[int, str]
) -> pa.Array | pa.ChunkedArray:
    """Report integers that do not fit a narrower integer column per row, and null them out so the
    cast of the rest succeeds (the rows are reported, so nothing is written for them)."""
    bounds = T.int_bounds(col.type)
    if bounds is None or not pa.types.is_integer(arr.type) or not len(arr):
        return arr
    if pa.types.is_signed_integer(arr.type) and arr.type.bit_width <= 8 * (col.type.fixed_width or 8):
        return arr  # every value of a narrower or equal signed type fits
    lo, hi = bounds
    mm = pc.min_max(arr).as_py()
    if mm["min"] is None or (mm["min"] >= lo and mm["max"] <= hi):
        return arr

    # Compare only on the side that overflows, so the bound always fits the source type (unsigned).
    def below() -> pa.Array:
        return pc.less(arr, pa.scalar(lo, arr.type))

    def above() -> pa.Array:
        return pc.greater(arr, pa.scalar(hi, arr.type))

    if mm["min"] < lo and mm["max"] > hi:
        bad = pc.or_(below(), above())
    elif mm["min"] < lo:
        bad = below()
    else:
        bad = above()
    bad = pc.fill_null(bad, False)
    values = arr.to_pylist() if isinstance(arr, pa.Array) else arr.combine_chunks().to_pylist()
    for r in np.flatnonzero(bad.to_numpy(zero_copy_only=False)).tolist():
        errors.setdefault(int(r), f"column '{col.name}': value {values[r]} out of range for {col.type.name}")
    return pc.if_else(bad, pa.scalar(None, arr.type), arr)


__all__ = [
    "COMPRESSIONS",
    "DELETE_OPS",
    "ENCODINGS",
    "INSERT_LIKE_OPS",
    "MAX_COLUMNS",
    "UPDATE_OPS",
    "WRITE_OPS",
    "ColumnSchema",
    "PartialRow",
    "Schema",
    "cast_column",
]
