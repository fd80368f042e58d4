"""The state of one tablet replica that its rooms (write path, read path, rowset maintenance, schema
changes) share, and the component lock that guards it (Kudu's ``TabletComponents`` plus the fields
``Tablet`` keeps beside them).

Concurrency: the component lock (short holds) guards the rowset lists, the MemRowSet and delta stores,
the schema and the counters below; flush and compaction do their I/O outside it in worker threads and
swap the result in under it. The maintenance lock makes flushes, compactions and schema changes of one
tablet run one at a time.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from kudu_async.common.clock import HybridClock, timestamp_from_seconds_ago
from kudu_async.fs.block_cache import BlockCache
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.tablet_metadata import TabletMetadata
from kudu_async.tablet.compaction_policy import DEFAULT_SMALL_ROWSET_TRADEOFF
from kudu_async.tablet.diskrowset import TARGET_ROWSET_BYTES, DiskRowSet
from kudu_async.tablet.lock_manager import LockManager
from kudu_async.tablet.maintenance_worker import RowsetWriter
from kudu_async.tablet.memrowset import MemRowSet, MRSRow
from kudu_async.tablet.mvcc import MvccManager
from kudu_async.tablet.schema_info import TS_COL, SchemaInfo


@dataclass
class TabletOptions:
    """Storage knobs (Kudu's flag names in comments)."""

    flush_threshold_bytes: int = 64 * 1024 * 1024  # flush_threshold_mb (ours: 64 MiB), read by the maintenance manager
    flush_threshold_secs: float = 120.0  # flush_threshold_secs
    history_max_age_sec: float = 7 * 24 * 3600.0  # tablet_history_max_age_sec
    target_rowset_bytes: int = TARGET_ROWSET_BYTES  # budgeted_compaction_target_rowset_size
    compaction_budget_bytes: int = 128 * 1024 * 1024  # tablet_compaction_budget_mb: most input of one merge
    # compaction_small_rowset_tradeoff: what a merge earns per rowset it saves, against height removed
    compaction_small_rowset_tradeoff: float = DEFAULT_SMALL_ROWSET_TRADEOFF
    delta_minor_compact_max_files: int = 10  # tablet_delta_store_minor_compact_max (Kudu: 1000)
    delta_major_compact_min_ratio: float = 0.1  # tablet_delta_store_major_compact_min_ratio
    scan_batch_bytes: int = 1024 * 1024  # scanner_default_batch_size_bytes
    lock_timeout_s: float = 10.0
    sync: bool = True
    block_cache: BlockCache | None = None  # the node's (block_cache_capacity_mb), shared by its tablets
    # Writes flush and compaction outputs in another process (the node's maintenance pool); None: in the
    # flushing thread.
    rowset_writer: RowsetWriter | None = None


class TabletComponents:
    """Everything a tablet's rooms read and change; fields marked "component lock" are read and
    written only under :attr:`lock`."""

    def __init__(
        self,
        tablet_dir: str,
        meta: TabletMetadata,
        info: SchemaInfo,
        bm: BlockManager,
        options: TabletOptions,
        clock: HybridClock,
    ) -> None:
        self.tablet_dir = tablet_dir
        self.tablet_id = meta.tablet_id
        self.options = options
        self.clock = clock
        self.bm = bm
        self.mvcc = MvccManager()
        self.locks = LockManager()  # row locks, held from a write's prepare to its apply
        self.lock = threading.RLock()  # the component lock
        self.maint_lock = threading.RLock()
        # Component lock: the schema and its version (an alter swaps both together), the columns
        # added by alters (as they were when added: their read defaults).
        self.info = info
        self.schema_version = meta.schema_version
        self.added_columns: list[dict[str, Any]] = list(meta.added_columns)
        # Component lock: the stores.
        self._mrs_ids = itertools.count(1)
        self.mrs = self.new_mrs()
        self.flushing_mrs: list[MemRowSet] = []  # frozen by a flush, readable until its rowsets swap in
        self.drs: list[DiskRowSet] = [DiskRowSet(info, rs, bm) for rs in meta.rowsets]
        # Component lock: counters.
        self.next_seq = 1  # application order of mutations
        self.next_rowset_id = meta.next_rowset_id
        self.last_applied_index = meta.last_flushed_log_index
        self.last_flushed_index = meta.last_flushed_log_index
        self.mrs_flush_running = False
        self.stats = {"flushes": 0, "bytes_flushed": 0, "compactions": 0, "bytes_compacted": 0}
        durable_max = max(
            [rs.max_ts for rs in meta.rowsets]
            + [int(pc.max(t.column(TS_COL)).as_py()) for d in self.drs for t in d.delta_tables if t.num_rows],
            default=-1,
        )
        self.mvcc.mark_committed_up_to(durable_max)
        self.clock.update(durable_max)

    def new_mrs(self) -> MemRowSet:
        return MemRowSet(self.info, next(self._mrs_ids))

    def memrowsets(self) -> list[MemRowSet]:
        """The MemRowSet taking writes, then those a flush froze (component lock)."""
        return [self.mrs, *self.flushing_mrs]

    def take_seqs(self, n: int) -> int:
        """Reserve ``n`` consecutive mutation sequence numbers (component lock)."""
        first = self.next_seq
        self.next_seq += n
        return first

    def ancient_history_mark(self) -> int:
        return timestamp_from_seconds_ago(self.clock.now(), self.options.history_max_age_sec)

    def locate_in_memory(self, key: bytes) -> tuple[MemRowSet, MRSRow] | None:
        for m in self.memrowsets():
            r = m.get(key)
            if r is not None:
                return m, r
        return None

    def locate_on_disk(self, key: bytes) -> tuple[DiskRowSet, int] | None:
        for d in self.drs:
            pos = d.find_row(key)
            if pos is not None:
                return d, pos
        return None
