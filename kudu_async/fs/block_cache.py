"""The node's block cache: rowset data held in process memory, within one byte budget for the node.

Kudu keeps recently read blocks in an LRU cache (``--block_cache_capacity_mb``) so that hot lookups do
not go to disk: a read of a file page may wait on the disk, so the tablet server answers a point lookup
on its event loop only from memory it owns. A whole file in this cache (a small delta file) is read
once into an Arrow buffer that the rowset opened from it shares (zero copy); later opens of the same
immutable block (a reopen after a schema change, a restarted replica) share the same buffer.

Blocks are admitted while the budget has room; when a new block does not fit, the least recently used
evictable blocks make room: the owners of whole files are told (``on_evict``) and switch to mapping
the file, so the memory is freed once no reader holds it; a whole file without an owner callback (a
rowset's small delta files) is pinned until the block is deleted. A block larger than the whole budget
is refused.

Rowset base files are columnar files of many small blocks: the cache also holds their *decoded*
blocks (one column of one row group, or a key index built over one), keyed by (path, ...) and charged
at their decoded size (:meth:`BlockCache.get` / :meth:`BlockCache.put`). Such an entry has no owner:
a reader holding a decoded block keeps it alive after eviction, and the next reader decodes it again.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

log = logging.getLogger(__name__)

EvictCallback = Callable[[str], None]


class ReadCounts:
    """Bytes one scan read from rowset blocks: held by the block cache (hits) or decoded from the files
    (misses), as Kudu's scan resource metrics count them. Charged by the thread that reads."""

    __slots__ = ("hit_bytes", "miss_bytes")

    def __init__(self) -> None:
        self.hit_bytes = 0
        self.miss_bytes = 0


_charged = threading.local()


def charge_reads_to(counts: ReadCounts | None) -> ReadCounts | None:
    """Charge this thread's block reads to ``counts`` (None: to nobody); returns what was charged before."""
    before: ReadCounts | None = getattr(_charged, "counts", None)
    _charged.counts = counts
    return before


def charge_hit(nbytes: int) -> None:
    counts: ReadCounts | None = getattr(_charged, "counts", None)
    if counts is not None:
        counts.hit_bytes += nbytes


def charge_miss(nbytes: int) -> None:
    """Bytes read from a file rather than the cache (the caller knows their decoded size)."""
    counts: ReadCounts | None = getattr(_charged, "counts", None)
    if counts is not None:
        counts.miss_bytes += nbytes


@dataclass
class _Entry:
    buf: Any  # a whole file's pa.Buffer, or a decoded block
    pinned: bool
    size: int
    owners: list[weakref.WeakMethod[EvictCallback]] = field(default_factory=list)
    path: str = ""


class BlockCache:
    """Thread-safe LRU map of block path -> whole-file buffer and of (path, ...) -> decoded block,
    bounded together by ``capacity_bytes`` (0 = off)."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"block cache capacity must be >= 0 bytes, not {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._blocks: collections.OrderedDict[Hashable, _Entry] = collections.OrderedDict()  # oldest use first
        self._decoded: dict[str, set[Hashable]] = {}  # path -> keys of its decoded blocks held
        self._reserved = 0  # bytes of admitted blocks, including those still being read
        self._loading: dict[str, int] = {}  # path -> bytes reserved while a worker reads it
        self._cancelled: set[str] = set()  # loading paths deleted meanwhile
        self._counts = {"hits": 0, "inserts": 0, "refused": 0, "dropped": 0, "evictions": 0}

    def read(self, path: str, on_evict: EvictCallback | None = None, *, make_room: bool = True) -> pa.Buffer | None:
        """The whole file at ``path`` as a buffer held by the cache, or None when it cannot fit (the
        caller maps the file instead). ``on_evict`` (a bound method, held weakly) makes the block
        evictable: it is called with the path when the block leaves the cache to make room, and must
        stop using the buffer; without it the block is pinned until deleted. With ``make_room`` False
        the block only takes free room and evicts nothing: a restarting tserver opening its old files
        fills the cache without reading every file it holds (each would evict the one before). Reads the
        file: call from a worker, never the event loop."""
        path = os.path.abspath(path)
        with self._lock:
            e = self._blocks.get(path)
            if e is not None:
                self._counts["hits"] += 1
                self._blocks.move_to_end(path)
                self._own(e, on_evict)
                charge_hit(e.size)
                return e.buf
        size = os.path.getsize(path)
        with self._lock:
            e = self._blocks.get(path)
            if e is not None:  # read by another thread meanwhile
                self._counts["hits"] += 1
                self._own(e, on_evict)
                charge_hit(e.size)
                return e.buf
            if path in self._loading or size > self.capacity_bytes:
                self._counts["refused"] += 1
                return None
            evicted = self._make_room(size) if make_room else []
            admitted = self._reserved + size <= self.capacity_bytes  # else pinned blocks fill it
            if admitted:
                self._reserved += size
                self._loading[path] = size
            else:
                self._counts["refused"] += 1
        self._tell(evicted)
        if not admitted:
            return None
        try:
            with pa.OSFile(path, "r") as f:
                buf = f.read_buffer()
            charge_miss(buf.size)
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
            e = _Entry(buf, pinned=on_evict is None, size=buf.size, path=path)
            self._own(e, on_evict)
            self._blocks[path] = e
            self._reserved += buf.size
            self._counts["inserts"] += 1
        return buf

    @staticmethod
    def _own(e: _Entry, on_evict: EvictCallback | None) -> None:
        if on_evict is None:
            e.pinned = True  # an owner that cannot let go: the block stays
        else:  # owners that are gone (reopened rowsets) are dropped here, so the list stays short
            e.owners = [r for r in e.owners if r() is not None]
            e.owners.append(weakref.WeakMethod(on_evict))

    def _make_room(self, size: int) -> list[tuple[str, _Entry]]:
        """Evict least recently used evictable blocks until ``size`` more bytes fit (under the lock)."""
        out: list[tuple[str, _Entry]] = []
        if self._reserved + size <= self.capacity_bytes:
            return out
        victims: list[tuple[Hashable, _Entry]] = []
        freed = 0
        for key, e in self._blocks.items():  # oldest first; stops as soon as enough is freed
            if self._reserved - freed + size <= self.capacity_bytes:
                break
            if not e.pinned:
                victims.append((key, e))
                freed += e.size
        for key, e in victims:
            self._forget(key, e)
            self._counts["evictions"] += 1
            if e.owners:
                out.append((e.path, e))
        return out

    def _forget(self, key: Hashable, e: _Entry) -> None:
        """Remove one entry (under the lock)."""
        del self._blocks[key]
        self._reserved -= e.size
        if not isinstance(key, str):
            keys = self._decoded.get(e.path)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._decoded[e.path]

    def get(self, key: tuple[str, Hashable]) -> Any | None:
        """The decoded block held under ``key`` ((path, what)), marked used now; None when not held."""
        with self._lock:
            e = self._blocks.get(key)
            if e is None:
                return None
            self._counts["hits"] += 1
            self._blocks.move_to_end(key)
            charge_hit(e.size)
            return e.buf

    def get_many(self, keys: list[tuple[str, Hashable]]) -> list[Any | None]:
        """:meth:`get` of several decoded blocks under one lock acquisition."""
        out: list[Any | None] = []
        hit = 0
        with self._lock:
            for key in keys:
                e = self._blocks.get(key)
                if e is None:
                    out.append(None)
                    continue
                self._counts["hits"] += 1
                self._blocks.move_to_end(key)
                hit += e.size
                out.append(e.buf)
        if hit:
            charge_hit(hit)
        return out

    def holds_all(self, keys: list[tuple[str, Hashable]]) -> bool:
        """Whether every one of ``keys`` is held (a check: no hit counted, no eviction order changed)."""
        with self._lock:
            return all(k in self._blocks for k in keys)

    def peek(self, key: tuple[str, Hashable]) -> Any | None:
        """:meth:`get` without counting a hit or changing the eviction order (a check, not a read)."""
        with self._lock:
            e = self._blocks.get(key)
            return None if e is None else e.buf

    def put(self, key: tuple[str, Hashable], value: Any, nbytes: int, *, make_room: bool = True) -> bool:
        """Hold a decoded block of file ``key[0]`` charged at ``nbytes``; evicts least recently used
        blocks for it when ``make_room``, else takes only free room. False when it is not admitted."""
        path = key[0]
        with self._lock:
            old = self._blocks.get(key)
            if old is not None:
                self._blocks.move_to_end(key)
                return True
            if nbytes > self.capacity_bytes:
                self._counts["refused"] += 1
                return False
            evicted = self._make_room(nbytes) if make_room else []
            admitted = self._reserved + nbytes <= self.capacity_bytes
            if admitted:
                self._blocks[key] = _Entry(value, pinned=False, size=nbytes, path=path)
                self._decoded.setdefault(path, set()).add(key)
                self._reserved += nbytes
                self._counts["inserts"] += 1
            else:
                self._counts["refused"] += 1
        self._tell(evicted)
        return admitted

    @staticmethod
    def _tell(evicted: list[tuple[str, _Entry]]) -> None:
        """Tell the owners of evicted blocks (outside the lock: they re-open the file mapped)."""
        for path, e in evicted:
            for ref in e.owners:
                cb = ref()
                if cb is None:
                    continue
                try:
                    cb(path)
                except Exception:  # an owner that cannot switch keeps its buffer alive; others still told
                    log.exception("block cache: the owner of evicted block %s failed to let it go", path)

    def touch(self, path: str) -> None:
        """Mark a block used now (a lookup or scan read it), so it is evicted last."""
        with self._lock:
            if path in self._blocks:
                self._blocks.move_to_end(path)

    def drop(self, paths: Iterable[str]) -> None:
        """Forget deleted blocks (their buffers live on only in rowsets still being read)."""
        with self._lock:
            for p in paths:
                p = os.path.abspath(p)
                if p in self._loading:
                    self._cancelled.add(p)
                e = self._blocks.get(p)
                if e is not None:
                    self._forget(p, e)
                    self._counts["dropped"] += 1
                for key in list(self._decoded.get(p, ())):
                    self._forget(key, self._blocks[key])
                    self._counts["dropped"] += 1

    def drop_under(self, directory: str) -> None:
        """Forget every block below ``directory`` (a tablet's storage being removed)."""
        prefix = os.path.join(os.path.abspath(directory), "")
        with self._lock:
            held = {k if isinstance(k, str) else e.path for k, e in self._blocks.items()}
            paths = [p for p in (*held, *self._loading) if p.startswith(prefix)]
        self.drop(paths)

    def holds(self, path: str) -> bool:
        with self._lock:
            p = os.path.abspath(path)
            return p in self._blocks or p in self._decoded

    def usage_bytes(self) -> int:
        """Bytes held now (cheap: no walk over the blocks), for the node's memory tracker."""
        return self._reserved

    def status(self) -> dict[str, Any]:
        with self._lock:
            pinned = sum(e.size for e in self._blocks.values() if e.pinned)
            return {
                "capacity_bytes": self.capacity_bytes,
                "usage_bytes": self._reserved,
                "pinned_bytes": pinned,
                "blocks": len(self._blocks),
                **self._counts,
            }
