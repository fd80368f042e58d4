"""Durable tablet metadata: the list of live rowsets and blocks plus the last flushed log index.

The metadata file is the single commit point of every flush and compaction: new blocks are written
first, then the metadata is replaced atomically, then obsolete blocks are deleted. A crash at any moment
therefore leaves either the old or the new set of rowsets, never a mix.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from kudu_async.common.errors import KuduCorruption, KuduNotFound
from kudu_async.fs.io_util import atomic_write_bytes

METADATA_FILE = "tablet-meta.json"
FORMAT_VERSION = 1


@dataclass
class RowSetMetadata:
    """One DiskRowSet: base data block, bloom block, REDO delta blocks and its key range."""

    id: int
    base_block: str
    bloom_block: str
    num_rows: int
    min_key_hex: str
    max_key_hex: str
    max_ts: int
    delta_blocks: list[str] = field(default_factory=list)

    def blocks(self) -> list[str]:
        return [self.base_block, self.bloom_block, *self.delta_blocks]


@dataclass
class TabletMetadata:
    """Everything needed to reopen a tablet's storage: schema, rowsets and replay start."""

    tablet_id: str
    schema: dict[str, Any]
    rowsets: list[RowSetMetadata] = field(default_factory=list)
    last_flushed_log_index: int = 0
    next_rowset_id: int = 0
    version: int = FORMAT_VERSION
    schema_version: int = 0  # bumped by each AlterSchema; writes must be built for the current one
    # Columns this tablet gained by an AlterSchema, as they were when added (column dicts): rows written
    # before then read the default the column had at that moment (Kudu's read default), not a later one.
    added_columns: list[dict[str, Any]] = field(default_factory=list)

    def live_blocks(self) -> set[str]:
        return {b for rs in self.rowsets for b in rs.blocks()}

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TabletMetadata:
        try:
            raw = json.loads(data)
            rowsets = [RowSetMetadata(**r) for r in raw.pop("rowsets")]
            return cls(rowsets=rowsets, **raw)
        except (ValueError, TypeError, KeyError) as e:
            raise KuduCorruption(f"tablet metadata unreadable: {e}") from e


def metadata_path(tablet_dir: str) -> str:
    return os.path.join(tablet_dir, METADATA_FILE)


def write_tablet_metadata(tablet_dir: str, meta: TabletMetadata, *, sync: bool = True) -> None:
    """Atomically replace the tablet's metadata: the commit point of flushes and compactions."""
    os.makedirs(tablet_dir, exist_ok=True)
    atomic_write_bytes(metadata_path(tablet_dir), meta.to_json(), sync=sync)


def read_tablet_metadata(tablet_dir: str) -> TabletMetadata:
    try:
        with open(metadata_path(tablet_dir), "rb") as f:
            return TabletMetadata.from_json(f.read())
    except FileNotFoundError as e:
        raise KuduNotFound(f"no tablet metadata in {tablet_dir}") from e
