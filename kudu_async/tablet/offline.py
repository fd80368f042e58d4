"""A tablet's files read by the offline tools (``kudu local_replica dump rowset``, ``kudu fs check``),
without opening the tablet: opening one deletes orphaned blocks and replays its WAL, neither of which a
tool that only looks may do.

Blocks are read as the tablet's own readers read them, so damage they would meet is found here: a base
file's Parquet pages against their CRC32s (row group by row group, so memory stays one block's), a delta
file's Arrow IPC batches validated whole, a bloom filter's header against its size.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument, KuduNotFound
from kudu_async.common.schema import Schema
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import RowSetMetadata, TabletMetadata
from kudu_async.tablet import rowset_file
from kudu_async.tablet.bloom import BloomFilter
from kudu_async.tablet.diskrowset import DiskRowSet
from kudu_async.tablet.mvcc import MvccSnapshot
from kudu_async.tablet.schema_info import SchemaInfo, tablet_schema_info

BLOCK_KINDS = ("base", "bloom", "delta")
_ALL_VISIBLE = MvccSnapshot((1 << 64) - 1)  # every timestamp a hybrid clock gives is below it


def verify_block(path: str, kind: str) -> str | None:
    """None when the block at ``path`` reads back whole, else what is wrong with it (naming where)."""
    if kind not in BLOCK_KINDS:
        raise KuduInvalidArgument(f"block kind {kind!r}: one of {', '.join(BLOCK_KINDS)}")
    try:
        if kind == "bloom":
            with open(path, "rb") as f:
                BloomFilter.from_bytes(f.read())
            return None
        if kind == "delta" or rowset_file.file_kind(path) == "ipc":
            with pa.memory_map(path, "r") as source:
                reader = ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    reader.get_batch(i).validate(full=True)
            return None
        return _verify_parquet(path)
    except KuduBadStatus as e:
        return e.message
    except (pa.ArrowException, OSError, ValueError, struct.error) as e:
        return f"unreadable ({type(e).__name__}: {e})"


def _verify_parquet(path: str) -> str | None:
    pf = pq.ParquetFile(path, page_checksum_verification=True)
    for i in range(pf.metadata.num_row_groups):
        try:
            pf.read_row_group(i).validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as e:
            rg = pf.metadata.row_group(i)
            at = min(rg.column(c).data_page_offset for c in range(rg.num_columns)) if rg.num_columns else 0
            return f"row group {i} at offset {at} is damaged ({e})"
    return None


def tablet_info(meta: TabletMetadata) -> SchemaInfo:
    """The storage view of the schema the tablet's metadata holds."""
    return tablet_schema_info(Schema.from_dict(meta.schema), list(meta.added_columns))


def rowset_rows(tablet_dir: str | os.PathLike[str], meta: TabletMetadata, rs: RowSetMetadata) -> Iterator[pa.Table]:
    """The rows of one rowset as they are now (its REDO deltas applied, deleted rows left out), a few
    blocks at a time, in key order."""
    info = tablet_info(meta)
    data = Path(tablet_dir) / "data"
    if not data.is_dir():
        raise KuduNotFound(f"{data} is missing: the tablet's blocks are gone")
    bm = BlockManager([str(data)], sync=False, cache=None, remove_temp_files=False)
    drs = DiskRowSet(info, rs, bm)
    yield from drs.scan_blocks(_ALL_VISIBLE, list(info.names), drs.delta_snapshot(), None, None, with_key=False)
