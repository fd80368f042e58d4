"""Write operation types, the write op a Raft entry carries, and per-row results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kudu_async.common.row_conversion import OpType

__all__ = ["LoggedWrite", "OpType", "RowError", "WriteOp", "WriteResult"]


@dataclass(frozen=True)
class WriteOp:
    """A batch of row operations: one op type per row, rows in schema column order.

    ``set_columns`` (rows x columns, bool) says which columns an UPDATE/UPSERT row really sets; None
    means every column is set. INSERT rows must carry every column's value (defaults already filled
    in by the client/row conversion); unset cells of UPDATE rows are ignored.
    """

    op_types: Sequence[int] | np.ndarray | pa.Array
    rows: pa.RecordBatch
    set_columns: np.ndarray | None = None
    # The Arrow IPC stream ``rows`` were read from (a write RPC's bytes), while they are those rows
    # unchanged: the log entry then carries these bytes instead of writing the rows out again.
    rows_ipc: bytes | memoryview | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class LoggedWrite:
    """A write as the WAL records it: what bootstrap replays."""

    log_index: int
    timestamp: int
    op: WriteOp


@dataclass(frozen=True)
class RowError:
    row_index: int
    code: str  # ALREADY_PRESENT | NOT_FOUND | INVALID_ARGUMENT
    message: str


@dataclass
class WriteResult:
    """Per-row failures plus counts; rows not listed in ``row_errors`` succeeded (or were ignored)."""

    timestamp: int
    log_index: int
    row_errors: list[RowError] = field(default_factory=list)
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    ignored: int = 0


class WouldBlock(Exception):
    """A write step asked not to wait (run on an event loop) would have waited: on the component lock a
    flush or compaction holds across its file writes, or on rowset data that may have to be read from
    disk. Nothing was changed; the caller runs the step again in a worker."""
