"""Block files: immutable files named by a unique block id, spread over the configured data dirs.

A block is written once (atomically, see :mod:`io_util`) and never modified; rowsets and delta files are
blocks. Which blocks are live is decided only by the tablet metadata, so a crash between writing a block
and writing the metadata leaves an orphan that :meth:`BlockManager.delete_orphans` removes on open.
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

import pyarrow as pa

from kudu_async.fs.block_cache import BlockCache, EvictCallback
from kudu_async.fs.io_util import TMP_SUFFIX, atomic_write_with, fsync_dir, remove_stale_temp_files

BLOCK_SUFFIX = ".blk"


class BlockManager:
    """Allocates block ids, writes blocks durably and maps ids to paths over several data dirs."""

    def __init__(
        self,
        data_dirs: list[str],
        *,
        sync: bool = True,
        cache: BlockCache | None = None,
        remove_temp_files: bool = True,
    ) -> None:
        """``remove_temp_files``: delete temp files a crash left in the dirs; False for a second writer into
        dirs whose owner is running (its temp files are writes in flight)."""
        if not data_dirs:
            raise ValueError("at least one data dir is required")
        self.data_dirs = [os.path.abspath(d) for d in data_dirs]
        self.sync = sync
        self.cache = cache
        for d in self.data_dirs:
            os.makedirs(d, exist_ok=True)
            if remove_temp_files:
                remove_stale_temp_files(d)
        self._rr = itertools.count()
        self._lock = threading.Lock()
        self._prefix = uuid.uuid4().hex[:12]
        self._seq = itertools.count()

    def new_block_id(self) -> str:
        """A fresh, globally unique block id; it embeds the dir index so lookup needs no search."""
        with self._lock:
            dir_idx = next(self._rr) % len(self.data_dirs)
            return f"{dir_idx}-{self._prefix}-{next(self._seq):08d}"

    def path(self, block_id: str) -> str:
        """The file path of a block."""
        dir_idx = int(block_id.split("-", 1)[0])
        return os.path.join(self.data_dirs[dir_idx % len(self.data_dirs)], block_id + BLOCK_SUFFIX)

    def write_block(self, writer: Callable[[BinaryIO], object]) -> str:
        """Write a new block through ``writer(file)``; returns its id once durable."""
        block_id = self.new_block_id()
        atomic_write_with(self.path(block_id), writer, sync=self.sync)
        return block_id

    def cached(
        self, block_id: str, on_evict: EvictCallback | None = None, *, make_room: bool = True
    ) -> pa.Buffer | None:
        """The whole block in memory, held by the node's block cache, or None (no cache, or no room);
        ``on_evict`` makes it evictable, ``make_room`` lets it evict others (see :meth:`BlockCache.read`)."""
        if self.cache is None:
            return None
        return self.cache.read(self.path(block_id), on_evict, make_room=make_room)

    def touch(self, path: str) -> None:
        """A cached block was just used (kept longest in the cache)."""
        if self.cache is not None:
            self.cache.touch(path)

    def exists(self, block_id: str) -> bool:
        return os.path.exists(self.path(block_id))

    def delete_blocks(self, block_ids: Iterable[str]) -> None:
        """Remove blocks no metadata refers to any more (after the metadata naming them is gone)."""
        block_ids = list(block_ids)
        if self.cache is not None:
            self.cache.drop(self.path(b) for b in block_ids)
        dirs = set()
        for b in block_ids:
            try:
                os.unlink(self.path(b))
                dirs.add(os.path.dirname(self.path(b)))
            except FileNotFoundError:
                pass
        if self.sync:
            for d in dirs:
                fsync_dir(d)

    def all_block_ids(self) -> set[str]:
        found = set()
        for d in self.data_dirs:
            for name in os.listdir(d):
                if name.endswith(BLOCK_SUFFIX):
                    found.add(name[: -len(BLOCK_SUFFIX)])
        return found

    def delete_orphans(self, live: set[str], owner_prefixes: Iterable[str] | None = None) -> list[str]:
        """Delete blocks not in ``live`` (crash leftovers); returns the ids removed."""
        orphans = sorted(self.all_block_ids() - live)
        if owner_prefixes is not None:
            prefixes = tuple(owner_prefixes)
            orphans = [o for o in orphans if o.split("-", 1)[1].startswith(prefixes)]
        self.delete_blocks(orphans)
        return orphans


@dataclass
class BlockDirCheck:
    """One block directory against the blocks its metadata names (``kudu fs check``)."""

    directory: str
    live: int = 0
    live_bytes: int = 0
    missing: list[str] = field(default_factory=list)
    orphans: list[tuple[str, int]] = field(default_factory=list)  # (block id, bytes)
    temp_files: list[str] = field(default_factory=list)

    def path_of(self, block_id: str) -> str:
        return os.path.join(self.directory, block_id + BLOCK_SUFFIX)


def check_block_dir(directory: str, live: set[str]) -> BlockDirCheck:
    """Which of ``live`` are missing from ``directory``, which blocks there nothing names (orphans: a crash
    between writing blocks and committing the metadata naming them) and the temporary files a crash left.
    Reads the directory only; a missing directory holds no blocks."""
    out = BlockDirCheck(directory)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        names = []
    present: dict[str, int] = {}
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(BLOCK_SUFFIX):
            present[name[: -len(BLOCK_SUFFIX)]] = os.stat(path).st_size
        elif name.endswith(TMP_SUFFIX):
            out.temp_files.append(path)
    for b in sorted(live):
        if b in present:
            out.live += 1
            out.live_bytes += present[b]
        else:
            out.missing.append(b)
    out.orphans = sorted((b, size) for b, size in present.items() if b not in live)
    return out
