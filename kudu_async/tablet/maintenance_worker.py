"""The CPU-heavy part of a flush or compaction as a unit of work another process can run.

Writing a rowset (Parquet encoding and compression, the bloom filter, the file writes and fsyncs) is the
longest step of a flush or a merging compaction, and needs nothing of the tablet but the rows to write,
the schema and where blocks go. :func:`prepare_rowset_write` spools the rows into Arrow IPC files (written
by Arrow without the GIL) and describes the work; :func:`run_rowset_write` does it wherever it is called
(a worker process of the tserver's maintenance pool, or in-process) and returns the new rowsets'
metadata. Freezing the inputs, MVCC, the carry-over of late mutations and the swap stay in the tablet
(:mod:`.rowset_maintenance`); nothing refers to the blocks written until the tablet commits its metadata,
so a worker that dies mid-write leaves orphan blocks only (removed when the tablet next opens).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import RowSetMetadata
from kudu_async.tablet.diskrowset import write_rowsets
from kudu_async.tablet.schema_info import SchemaInfo

SPOOL_SUFFIX = ".arrow"


@dataclass(frozen=True)
class RowsetWriteWork:
    """Rows to write as rowsets: a key-sorted storage table (with ``_key``/``_ts``) and its REDO deltas
    (``_row`` = position in the table), both spooled as Arrow IPC files."""

    info: SchemaInfo
    data_dirs: tuple[str, ...]
    sync: bool
    table_path: str
    deltas_path: str | None
    first_id: int
    target_bytes: int

    def spool_paths(self) -> list[str]:
        return [p for p in (self.table_path, self.deltas_path) if p is not None]


class RowsetWriter(Protocol):
    """Runs a :class:`RowsetWriteWork` (in a worker process) and returns the rowsets written."""

    spool_dir: str

    def __call__(self, work: RowsetWriteWork) -> list[RowSetMetadata]: ...


def _spool(table: pa.Table, path: str) -> None:
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)


def _unspool(path: str) -> pa.Table:
    with pa.memory_map(path) as src:
        return pa.ipc.open_file(src).read_all()


def prepare_rowset_write(
    info: SchemaInfo,
    bm: BlockManager,
    table: pa.Table,
    deltas: pa.Table | None,
    first_id: int,
    target_bytes: int,
    spool_dir: str,
) -> RowsetWriteWork:
    """Spool ``table`` and ``deltas`` under ``spool_dir`` and describe writing them into ``bm``'s dirs; the
    caller removes the spool files with :func:`discard_spool` once the work ran (or failed)."""
    stem = os.path.join(spool_dir, f"rowset-write-{os.getpid()}-{uuid.uuid4().hex}")
    table_path = stem + SPOOL_SUFFIX
    deltas_path = stem + ".deltas" + SPOOL_SUFFIX if deltas is not None and deltas.num_rows else None
    work = RowsetWriteWork(info, tuple(bm.data_dirs), bm.sync, table_path, deltas_path, first_id, target_bytes)
    try:
        _spool(table, table_path)
        if deltas_path is not None:
            assert deltas is not None
            _spool(deltas, deltas_path)
    except BaseException:
        discard_spool(work)
        raise
    return work


def discard_spool(work: RowsetWriteWork) -> None:
    for p in work.spool_paths():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


def run_rowset_write(work: RowsetWriteWork) -> list[RowSetMetadata]:
    """Write the spooled rows as rowsets into the work's data dirs (durably when ``sync``); returns their
    metadata, in key order. Block ids come from a block manager of this call, unique across processes."""
    bm = BlockManager(list(work.data_dirs), sync=work.sync, remove_temp_files=False)
    table = _unspool(work.table_path)
    deltas = _unspool(work.deltas_path) if work.deltas_path is not None else None
    return write_rowsets(bm, work.info, table, deltas, work.first_id, work.target_bytes)
