"""A table as the client sees it (schema, partitioning, id), its columns for predicates, and write operations.

Nothing here does I/O: a ``Table`` is a snapshot of the table's metadata from the master, and hands out
operations (``new_insert`` ...), scanners and alterers through the client that opened it (its owner, seen
through the ``TableOwner`` protocol: the blocking ``Client`` or the ``AsyncClient``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.partition import PartitionSchema
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.row_conversion import OpType
from kudu_async.common.schema import ColumnSchema, Schema


class TableOwner(Protocol):
    """The client whose scanners, token builders and alterers a table hands out (sync objects for the
    blocking client, coroutines and async objects for the async one)."""

    def new_scanner(self, table: Table) -> Any: ...

    def new_scan_token_builder(self, table: Table) -> Any: ...

    def new_table_alterer(self, table: Table) -> Any: ...

    def delete_table(self, table_name: str) -> Any: ...

    def deserialize_token_into_scanner(self, data: bytes) -> Any: ...


class Predicate:
    """A predicate built from ``table['col'] >= v`` (kudu-python's ``Predicate``)."""

    def __init__(self, pred: ColumnPredicate) -> None:
        self.pred = pred

    def __repr__(self) -> str:
        v = "" if self.pred.value is None else f" {self.pred.value!r}"
        return f"Predicate({self.pred.column} {self.pred.op}{v})"


class Column:
    """``table['col']``: comparisons make predicates (there is no ``!=``, as in Kudu)."""

    def __init__(self, table: Table, spec: ColumnSchema) -> None:
        self.table = table
        self.spec = spec
        self.name = spec.name

    def _pred(self, op: str, value: Any) -> Predicate:
        return Predicate(ColumnPredicate(self.name, op, value).bind(self.table.schema))

    def __eq__(self, value: Any) -> Predicate:  # type: ignore[override]
        return self._pred("=", value)

    def __lt__(self, value: Any) -> Predicate:
        return self._pred("<", value)

    def __le__(self, value: Any) -> Predicate:
        return self._pred("<=", value)

    def __gt__(self, value: Any) -> Predicate:
        return self._pred(">", value)

    def __ge__(self, value: Any) -> Predicate:
        return self._pred(">=", value)

    def __ne__(self, value: Any) -> Predicate:  # type: ignore[override]
        raise KuduInvalidArgument("Kudu has no != predicate; use two range predicates or filter after the scan")

    __hash__ = None  # type: ignore[assignment]

    def in_list(self, values: Sequence[Any]) -> Predicate:
        return self._pred("IN", values)  # the predicate refuses a non-list (a str, a lone value)

    def is_null(self) -> Predicate:
        return Predicate(ColumnPredicate(self.name, "IS NULL"))

    def is_not_null(self) -> Predicate:
        return Predicate(ColumnPredicate(self.name, "IS NOT NULL"))

    def __repr__(self) -> str:
        return f"Column({self.name}, parent={self.table.name}, type={self.spec.type.name})"


class WriteOperation:
    """One row operation; cells are given as a dict, a tuple in column order, or ``op['col'] = v``."""

    op_type: OpType = OpType.INSERT
    op_name = "insert"

    def __init__(self, table: Table, record: Mapping[str, Any] | Sequence[Any] | None = None) -> None:
        self.table = table
        self._cells: dict[str, Any] = {}
        if record is None:
            return
        if isinstance(record, Mapping):
            if record.keys() <= self.table.schema._index.keys():  # the common case: every name a column
                self._cells = dict(record)
                return
            for k, v in record.items():
                self[k] = v
        elif isinstance(record, Sequence) and not isinstance(record, str | bytes):
            names = table.schema.names
            if len(record) > len(names):
                raise KuduInvalidArgument(f"{len(record)} values for a table of {len(names)} columns")
            for name, v in zip(names, record, strict=False):
                self[name] = v
        else:
            raise KuduInvalidArgument(f"a row must be a dict or a tuple/list, not {type(record).__name__}")

    def __setitem__(self, key: str | int, value: Any) -> None:
        schema = self.table.schema
        if type(key) is str and key in schema._index:
            self._cells[key] = value
            return
        if isinstance(key, int) and not 0 <= key < len(schema.columns):
            raise KuduInvalidArgument(
                f"column index {key} is not in table {self.table.name} ({len(schema.columns)} columns)"
            )
        name = schema.columns[key].name if isinstance(key, int) else key
        if name not in schema:
            raise KuduInvalidArgument(f"column '{name}' is not in table {self.table.name}")
        self._cells[name] = value

    def __getitem__(self, key: str) -> Any:
        return self._cells[key]

    def set_field(self, key: str | int, value: Any) -> None:
        self[key] = value

    def set_null(self, key: str | int) -> None:
        self[key] = None

    @property
    def cells(self) -> dict[str, Any]:
        return dict(self._cells)

    def validated(self, schema: Schema) -> dict[str, Any]:
        """The row in canonical form for this op (defaults filled for inserts); raises naming the problem."""
        return schema.validate_row(self._cells, for_op=self.op_name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.table.name}, {self._cells!r})"


class Insert(WriteOperation):
    op_type, op_name = OpType.INSERT, "insert"


class InsertIgnore(WriteOperation):
    op_type, op_name = OpType.INSERT_IGNORE, "insert_ignore"


class Upsert(WriteOperation):
    op_type, op_name = OpType.UPSERT, "upsert"


class UpsertIgnore(WriteOperation):
    op_type, op_name = OpType.UPSERT_IGNORE, "upsert_ignore"


class Update(WriteOperation):
    op_type, op_name = OpType.UPDATE, "update"


class UpdateIgnore(WriteOperation):
    op_type, op_name = OpType.UPDATE_IGNORE, "update_ignore"


class Delete(WriteOperation):
    op_type, op_name = OpType.DELETE, "delete"


class DeleteIgnore(WriteOperation):
    op_type, op_name = OpType.DELETE_IGNORE, "delete_ignore"


OPERATIONS: dict[str, type[WriteOperation]] = {
    c.op_name: c for c in (Insert, InsertIgnore, Upsert, UpsertIgnore, Update, UpdateIgnore, Delete, DeleteIgnore)
}


OP_NAMES: dict[OpType, str] = {c.op_type: c.op_name for c in OPERATIONS.values()}


class FailedRow(dict[str, Any]):
    """A failed row of an Arrow write (``KuduError.failed_op()``): the row as a dict of its cells, with
    the ``op_name`` and ``cells`` of the ``WriteOperation`` a row-by-row write reports, so code reading
    errors works on both."""

    __slots__ = ("op_name",)

    def __init__(self, row: Mapping[str, Any], op_name: str) -> None:
        super().__init__(row)
        self.op_name = op_name

    @property
    def cells(self) -> dict[str, Any]:
        return dict(self)


def op_type_of(name: str) -> OpType:
    cls = OPERATIONS.get(str(name).lower())
    if cls is None:
        raise KuduInvalidArgument(f"unknown write operation {name!r}; one of {', '.join(OPERATIONS)}")
    return cls.op_type


class TableStatistics:
    """A table's size (kudu-python's ``TableStatistics``): bytes on disk and live rows, one copy of the data
    (the leaders'), -1 when unknown; and its disk size and row count limits, -1 when none is set."""

    __slots__ = ("live_row_count", "live_row_count_limit", "on_disk_size", "on_disk_size_limit")

    def __init__(
        self, on_disk_size: int, live_row_count: int, on_disk_size_limit: int = -1, live_row_count_limit: int = -1
    ) -> None:
        self.on_disk_size = on_disk_size
        self.live_row_count = live_row_count
        self.on_disk_size_limit = on_disk_size_limit
        self.live_row_count_limit = live_row_count_limit

    def __repr__(self) -> str:
        return (
            f"on disk size: {self.on_disk_size}\nlive row count: {self.live_row_count}\n"
            f"on disk size limit: {self.on_disk_size_limit}\nlive row count limit: {self.live_row_count_limit}\n"
        )


class Table:
    """kudu-python's ``Table``: metadata plus factories for operations, scanners and token builders."""

    def __init__(self, owner: TableOwner, info: dict[str, Any]) -> None:
        self._owner = owner
        self._load(info)

    def _load(self, info: dict[str, Any]) -> None:
        self._name: str = info["name"]
        self._id: str = info["table_id"]
        self.schema: Schema = Schema.from_dict(info["schema"])
        self.schema_version: int = int(info.get("schema_version", 0))
        self.partition_schema = PartitionSchema.from_dict(self.schema, info.get("partition_schema") or {})
        self.num_replicas: int = int(info.get("num_replicas", 0))
        # The caller's privileges on the table, signed by the leader master: shown to the tablet servers
        # with every write and new scan (they check it when access control is enforced).
        token = info.get("authz_token")
        self.authz_token: bytes | None = token if isinstance(token, bytes) else None
        self.info = info

    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> str:
        return self._id

    @property
    def num_columns(self) -> int:
        return len(self.schema)

    @property
    def owner(self) -> str | None:
        return self.info.get("owner")

    @property
    def comment(self) -> str | None:
        return self.info.get("comment")

    def __getitem__(self, key: str | int) -> Column:
        """The column ``key`` (a name, or an index into the schema) for building predicates."""
        if isinstance(key, str):
            if key not in self.schema:
                raise KuduInvalidArgument(f"column '{key}' is not in table {self.name}")
            return Column(self, self.schema.column(key))
        if isinstance(key, bool) or not isinstance(key, int) or not -len(self.schema) <= key < len(self.schema):
            raise IndexError(f"column index {key!r} is not in table {self.name} ({len(self.schema)} columns)")
        return Column(self, self.schema.columns[key])

    def __repr__(self) -> str:
        return f"Table({self.name}, id={self.id}, {len(self.schema)} columns)"

    # operations (kudu-python names)
    def new_insert(self, record: Any = None) -> Insert:
        return Insert(self, record)

    def new_insert_ignore(self, record: Any = None) -> InsertIgnore:
        return InsertIgnore(self, record)

    def new_upsert(self, record: Any = None) -> Upsert:
        return Upsert(self, record)

    def new_upsert_ignore(self, record: Any = None) -> UpsertIgnore:
        return UpsertIgnore(self, record)

    def new_update(self, record: Any = None) -> Update:
        return Update(self, record)

    def new_update_ignore(self, record: Any = None) -> UpdateIgnore:
        return UpdateIgnore(self, record)

    def new_delete(self, record: Any = None) -> Delete:
        return Delete(self, record)

    def new_delete_ignore(self, record: Any = None) -> DeleteIgnore:
        return DeleteIgnore(self, record)

    # scans and DDL through the owning client (sync objects for the sync client, async ones otherwise)
    def scanner(self) -> Any:
        return self._owner.new_scanner(self)

    def scan_token_builder(self) -> Any:
        return self._owner.new_scan_token_builder(self)

    def rename(self, new_name: str) -> Any:
        return self._owner.new_table_alterer(self).rename(new_name).alter()

    def drop(self) -> Any:
        return self._owner.delete_table(self.name)
