"""Creating a tablet's files and opening them: metadata, block manager, rowsets, then the replay of
the logged writes above the last flushed log index.

Replay relies on the storage invariant (a key lives in one rowset, so every op's effect on a key is
in one store, and durable stores hold a prefix of each key's history): a row whose key already has
history at or after the op's timestamp is skipped (its effect is already in flushed files); every other
row is re-applied exactly as it was the first time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from kudu_async.common.clock import HybridClock
from kudu_async.common.schema import Schema
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import TabletMetadata, read_tablet_metadata, write_tablet_metadata
from kudu_async.tablet.components import TabletComponents, TabletOptions
from kudu_async.tablet.ops import LoggedWrite
from kudu_async.tablet.schema_info import tablet_schema_info
from kudu_async.tablet.write_path import WritePath


def create_metadata(
    tablet_dir: str, schema: Schema, tablet_id: str, options: TabletOptions, schema_version: int
) -> None:
    """Write the metadata of an empty tablet durably, its schema's columns numbered (alters match
    columns by id)."""
    os.makedirs(tablet_dir, exist_ok=True)
    meta = TabletMetadata(
        tablet_id=tablet_id or os.path.basename(tablet_dir),
        schema=schema.with_column_ids().to_dict(),
        schema_version=schema_version,
    )
    write_tablet_metadata(tablet_dir, meta, sync=options.sync)


def open_components(tablet_dir: str, options: TabletOptions, clock: HybridClock) -> TabletComponents:
    """The components of a tablet as its durable files hold them (unflushed writes not replayed yet)."""
    meta = read_tablet_metadata(tablet_dir)
    schema = Schema.from_dict(meta.schema)
    bm = BlockManager([os.path.join(tablet_dir, "data")], sync=options.sync, cache=options.block_cache)
    bm.delete_orphans(meta.live_blocks())
    info = tablet_schema_info(schema, list(meta.added_columns))
    return TabletComponents(tablet_dir, meta, info, bm, options, clock)


def replay(writes: WritePath, clock: HybridClock, log_ops: Iterable[LoggedWrite], last_flushed_index: int) -> None:
    """Re-apply the logged writes above ``last_flushed_index`` (those below are in durable files)."""
    for entry in log_ops:
        if entry.log_index <= last_flushed_index:
            continue
        clock.update(entry.timestamp)
        prepared = writes.prepare(entry.op, entry.timestamp, replay=True)
        writes.apply(prepared, entry.log_index)
