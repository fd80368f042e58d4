"""The node's block cache: rowset files held in process memory, within one byte budget for the node.

Kudu keeps recently read blocks in an LRU cache (``--block_cache_capacity_mb``) so that hot lookups do
not go to disk. Our rowset files are Arrow IPC files that are otherwise memory-mapped: a read of a mapped
page may wait on the disk, so the tablet server answers a point lookup on its event loop only from
memory it owns. A block in this cache is read once, whole, into an Arrow buffer that the rowset opened
from it shares (zero copy); later opens of the same immutable block (a reopen after a schema change, a
restarted replica) share the same buffer. Blocks are admitted while the budget has room and stay until
they are deleted: a rowset keeps its buffer for its whole life, so evicting one would free nothing.
Blocks that do not fit are mapped as before and read in workers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

import pyarrow as pa


class BlockCache:
    """Thread-safe map of block path -> whole-file buffer, bounded by ``capacity_bytes`` (0 = off)."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"block cache capacity must be >= 0 bytes, not {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._blocks: dict[str, pa.Buffer] = {}
        self._reserved = 0  # bytes of admitted blocks, including those still being read
        self._loading: dict[str, int] = {}  # path -> bytes reserved while a worker reads it
        self._cancelled: set[str] = set()  # loading paths deleted meanwhile
        self._counts = {"hits": 0, "inserts": 0, "refused": 0, "dropped": 0}

    def read(self, path: str) -> pa.Buffer | None:
        """The whole file at ``path`` as a buffer held by the cache, or None when it does not fit (the
        caller maps the file instead). Blocks are immutable, so a cached buffer is always current. Reads
        the file: call from a worker, never the event loop."""
        path = os.path.abspath(path)
        with self._lock:
            buf = self._blocks.get(path)
            if buf is not None:
                self._counts["hits"] += 1
                return buf
        size = os.path.getsize(path)
        with self._lock:
            buf = self._blocks.get(path)
            if buf is not None:  # read by another thread meanwhile
                self._counts["hits"] += 1
                return buf
            if path in self._loading or self._reserved + size > self.capacity_bytes:
                self._counts["refused"] += 1
                return None
            self._reserved += size
            self._loading[path] = size
        try:
            with pa.OSFile(path, "r") as f:
                buf = f.read_buffer()
        except BaseException:
            with self._lock:
                self._reserved -= self._loading.pop(path)
                self._cancelled.discard(path)
            raise
        with self._lock:
            self._reserved -= self._loading.pop(path)
            if path in self._cancelled:  # deleted while it was read: never admit it
                self._cancelled.discard(path)
                return buf
            self._blocks[path] = buf
            self._reserved += buf.size
            self._counts["inserts"] += 1
        return buf

    def drop(self, paths: Iterable[str]) -> None:
        """Forget deleted blocks (their buffers live on only in rowsets still being read)."""
        with self._lock:
            for p in paths:
                p = os.path.abspath(p)
                if p in self._loading:
                    self._cancelled.add(p)
                buf = self._blocks.pop(p, None)
                if buf is not None:
                    self._reserved -= buf.size
                    self._counts["dropped"] += 1

    def drop_under(self, directory: str) -> None:
        """Forget every block below ``directory`` (a tablet's storage being removed)."""
        prefix = os.path.join(os.path.abspath(directory), "")
        with self._lock:
            paths = [p for p in (*self._blocks, *self._loading) if p.startswith(prefix)]
        self.drop(paths)

    def holds(self, path: str) -> bool:
        with self._lock:
            return os.path.abspath(path) in self._blocks

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"capacity_bytes": self.capacity_bytes, "usage_bytes": self._reserved,
                    "blocks": len(self._blocks), **self._counts}
