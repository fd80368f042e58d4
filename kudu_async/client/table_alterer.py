"""kudu-python's ``TableAlterer``: collect column and partition changes, send them as one AlterTable."""

from __future__ import annotations

from typing import Any, Self

from kudu_async.client.core import ClientCore
from kudu_async.client.schema_builder import NO_DEFAULT, ColumnSpec, RangePartition, SchemaBuilder, bound_to_wire
from kudu_async.client.table import Table
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.types import value_to_wire


class _AlterColumnSpec(ColumnSpec):
    """``alter_column(name)``: only what Kudu lets AlterTable change (default, comment, encoding,
    compression, block size, mutability) and a rename."""

    def type(self, type_: Any) -> Self:
        raise KuduInvalidArgument(f"column '{self.name}': a column's type cannot be altered")

    def nullable(self, is_nullable: bool = True) -> Self:
        raise KuduInvalidArgument(f"column '{self.name}': nullability cannot be altered")

    def steps(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        changes: dict[str, Any] = {k: v for k, v in self._attrs.items() if k != "new_name"}
        for bad in ("precision", "scale", "length"):
            if bad in changes:
                raise KuduInvalidArgument(f"column '{self.name}': {bad} cannot be altered")
        if self._default is not NO_DEFAULT:
            changes["default"] = value_to_wire(self._default)
        if self._default_removed:
            changes["default"] = None
        if changes:
            out.append({"type": "ALTER_COLUMN", "name": self.name, **changes})
        if "new_name" in self._attrs:
            out.append({"type": "RENAME_COLUMN", "old_name": self.name, "new_name": self._attrs["new_name"]})
        return out

    _default_removed = False

    def remove_default(self) -> Self:
        self._default_removed = True
        return super().remove_default()


class AlterConfig:
    """The changes an alterer collects and their AlterTable request; the builders of ``AsyncTableAlterer`` and
    the blocking ``TableAlterer`` (each returns self), which differ only in how ``alter()`` waits."""

    def __init__(self, client: ClientCore, table: Table) -> None:
        self.client = client
        self.table = table
        self._new_name: str | None = None
        self._added: list[ColumnSpec] = []
        self._altered: list[_AlterColumnSpec] = []
        self._steps: list[dict[str, Any] | None] = []  # None marks where the next column spec goes
        self._extra: dict[str, Any] = {}

    def rename(self, table_name: str) -> Self:
        self._new_name = table_name
        return self

    def set_owner(self, new_owner: str) -> Self:
        self._extra["new_owner"] = new_owner
        return self

    def set_comment(self, new_comment: str) -> Self:
        self._extra["new_comment"] = new_comment
        return self

    def set_table_disk_size_limit(self, limit: int) -> Self:
        """Kudu's ``SetTableDiskSizeLimit``: bytes on disk at which the table stops taking inserts and
        updates (-1: no limit). Needs the master's --enable_table_write_limit; alters nothing else."""
        self._extra["disk_size_limit"] = _limit(limit, "disk size")
        return self

    def set_table_row_count_limit(self, limit: int) -> Self:
        """Kudu's ``SetTableRowCountLimit``: live rows at which the table stops taking inserts and updates
        (-1: no limit). Needs the master's --enable_table_write_limit; alters nothing else."""
        self._extra["row_count_limit"] = _limit(limit, "row count")
        return self

    def add_column(
        self,
        name: str,
        type_: Any = None,
        nullable: bool | None = None,
        compression: str | None = None,
        encoding: str | None = None,
        default: Any = NO_DEFAULT,
        **kw: Any,
    ) -> ColumnSpec:
        b = SchemaBuilder()
        spec = b.add_column(name, type_, nullable, compression, encoding, **kw)
        if default is not NO_DEFAULT:
            spec.default(default)
        self._added.append(spec)
        self._steps.append({"type": "ADD_COLUMN", "spec": len(self._added) - 1})
        return spec

    def alter_column(self, name: str, rename_to: str | None = None) -> ColumnSpec:
        if name not in self.table.schema:
            raise KuduInvalidArgument(f"column '{name}' is not in table {self.table.name}")
        spec = _AlterColumnSpec(SchemaBuilder(), name)
        if rename_to is not None:
            spec.rename(rename_to)
        self._altered.append(spec)
        self._steps.append({"type": "ALTER", "spec": len(self._altered) - 1})
        return spec

    def drop_column(self, name: str) -> Self:
        if name not in self.table.schema:
            raise KuduInvalidArgument(f"column '{name}' is not in table {self.table.name}")
        self._steps.append({"type": "DROP_COLUMN", "name": name})
        return self

    def add_range_partition(
        self,
        lower_bound: Any = None,
        upper_bound: Any = None,
        lower_bound_type: str = "inclusive",
        upper_bound_type: str = "exclusive",
    ) -> Self:
        return self._range_step("ADD_RANGE_PARTITION", lower_bound, upper_bound, lower_bound_type, upper_bound_type)

    def add_custom_range_partition(self, range_partition: RangePartition) -> Self:
        """Add a range with its own hash schema (see :class:`RangePartition`)."""
        if not isinstance(range_partition, RangePartition):
            raise KuduInvalidArgument(f"expected a RangePartition, got {type(range_partition).__name__}")
        lo, hi, lt, ut, dims = range_partition.bound()
        b = bound_to_wire(self.table.partition_schema, lo, hi, lt, ut, dims)
        self._steps.append({"type": "ADD_RANGE_PARTITION", **b})
        return self

    def drop_range_partition(
        self,
        lower_bound: Any = None,
        upper_bound: Any = None,
        lower_bound_type: str = "inclusive",
        upper_bound_type: str = "exclusive",
    ) -> Self:
        return self._range_step("DROP_RANGE_PARTITION", lower_bound, upper_bound, lower_bound_type, upper_bound_type)

    def _range_step(self, step: str, lower: Any, upper: Any, lower_type: str, upper_type: str) -> Self:
        b = bound_to_wire(self.table.partition_schema, lower, upper, lower_type, upper_type)
        self._steps.append({"type": step, **b})
        return self

    def request(self) -> dict[str, Any]:
        steps: list[dict[str, Any]] = []
        for s in self._steps:
            assert s is not None
            if s["type"] == "ADD_COLUMN":
                spec = self._added[s["spec"]]
                col = spec.to_column(key=False)
                steps.append({"type": "ADD_COLUMN", "column": col.to_dict()})
            elif s["type"] == "ALTER":
                steps.extend(self._altered[s["spec"]].steps())
            else:
                steps.append(s)
        req: dict[str, Any] = {"alter_schema_steps": steps, **self._extra}
        if self._new_name is not None:
            req["new_name"] = self._new_name
        if not steps and not self._new_name and not self._extra:
            raise KuduInvalidArgument("nothing to alter")
        return req


class AsyncTableAlterer(AlterConfig):
    """kudu-python's ``TableAlterer`` with a coroutine ``alter()``."""

    async def alter(self, wait: bool = True) -> Table:
        return await self.client.alter_table(self.table, self.request(), wait)


def _limit(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise KuduInvalidArgument(f"{what} limit must be an int greater than or equal to -1, got {value!r}")
    return value
