"""A stopped node's data directory, read and edited offline: what the kudu tool's ``local_replica`` and
``fs`` verbs work on.

The layout is the running node's: ``consensus/<tablet_id>/`` holds a replica's Raft metadata (``cmeta``) and
WAL (``wal/``), plus ``TOMBSTONED`` once the replica is tombstoned; a tablet server keeps the replica's
storage in ``tablets/<tablet_id>/`` (``tablet-meta.json``, blocks under ``data/``). Opening a directory takes
the node's own lock (:class:`~kudu_async.fs.fs_manager.DataDirLock`), so nothing here runs beside a live
node. Every reader reports damage as KuduCorruption naming the file (and the offset, for a WAL), never by
raising whatever a library raised.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduCorruption,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotFound,
)
from kudu_async.consensus.consensus_meta import ConsensusMetadata
from kudu_async.consensus.log import SegmentReader, wal_segment_paths
from kudu_async.consensus.raft_manager import TOMBSTONE_FILE, check_group_id, delete_replica_files
from kudu_async.consensus.raft_messages import Config, EntryKind, config_addresses
from kudu_async.fs.block_manager import check_block_dir
from kudu_async.fs.fs_manager import DataDirLock, InstanceMetadata, read_instance
from kudu_async.fs.io_util import TMP_SUFFIX, fsync_dir
from kudu_async.fs.tablet_metadata import TabletMetadata, metadata_path, read_tablet_metadata
from kudu_async.tablet.offline import verify_block

CONSENSUS_DIR = "consensus"
TABLETS_DIR = "tablets"
CMETA_FILE = "cmeta"
WAL_DIR = "wal"
BLOCKS_DIR = "data"
COPY_STAGING_DIR = "copy-staging"


@dataclass
class LocalReplica:
    """One replica as its files hold it; ``*_error`` say what could not be read (the rest still is)."""

    tablet_id: str
    consensus_dir: Path
    tablet_dir: Path
    tombstoned: bool
    cmeta: ConsensusMetadata | None
    cmeta_error: str | None
    meta: TabletMetadata | None
    meta_error: str | None

    @property
    def extra(self) -> dict[str, Any]:
        return dict((self.cmeta.config.get("extra") or {}) if self.cmeta is not None else {})

    @property
    def table_name(self) -> str | None:
        name = self.extra.get("table_name")
        return None if name is None else str(name)

    @property
    def table_id(self) -> str | None:
        tid = self.extra.get("table_id")
        return None if tid is None else str(tid)

    @property
    def state(self) -> str:
        """TOMBSTONED, FAILED (a file that cannot be read) or READY (a node would open it)."""
        if self.tombstoned:
            return "TOMBSTONED"
        return "FAILED" if self.cmeta_error or self.meta_error else "READY"

    @property
    def wal_dir(self) -> Path:
        return self.consensus_dir / WAL_DIR


@dataclass(frozen=True)
class CommittedConfig:
    """The replica's Raft config at its commit index: the compaction point's, or a later CONFIG entry's."""

    opid_index: int
    config: Config
    addresses: dict[str, str]


@dataclass
class FsCheckReport:
    """What ``kudu fs check`` found; ``errors`` make it fail, ``warnings`` do not."""

    uuid: str
    role: str
    replicas: int = 0
    live_blocks: int = 0
    live_block_bytes: int = 0
    blocks_verified: int = 0
    wal_segments: int = 0
    wal_entries: int = 0
    orphaned_blocks: list[tuple[str, str, int, str]] = field(default_factory=list)  # (tablet, block, bytes, path)
    temp_files: list[str] = field(default_factory=list)
    unfinished_copies: list[str] = field(default_factory=list)  # copy-staging dirs a killed node left
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)


class LocalDataDir:
    """A node's data directory opened by a tool: its instance checked, its lock held until :meth:`close`."""

    def __init__(self, root: Path, instance: InstanceMetadata, lock: DataDirLock | None) -> None:
        self.root = root
        self.instance = instance
        self._lock = lock

    @classmethod
    def open(cls, root: str | os.PathLike[str], tool: str, *, lock: bool = True) -> LocalDataDir:
        """Open ``root`` for ``tool``; KuduIllegalState naming the process when a node (or another tool)
        holds it, KuduNotFound when it is not a node's data directory."""
        path = Path(root).resolve()
        if not path.is_dir():
            raise KuduNotFound(f"{path} is not a directory (the node's --data-dir)")
        instance = read_instance(path)
        held = DataDirLock.acquire(path, tool) if lock else None
        return cls(path, instance, held)

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> LocalDataDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- replicas -------------------------------------------------------------------------------------

    @property
    def consensus_root(self) -> Path:
        return self.root / CONSENSUS_DIR

    @property
    def tablets_root(self) -> Path:
        return self.root / TABLETS_DIR

    def replica_ids(self) -> list[str]:
        """Every tablet with Raft metadata or storage here (a tombstone included), sorted."""
        ids: set[str] = set()
        for top in (self.consensus_root, self.tablets_root):
            if top.is_dir():
                ids.update(p.name for p in top.iterdir() if p.is_dir() and not p.name.startswith("."))
        return sorted(ids)

    def replica(self, tablet_id: str) -> LocalReplica:
        """One replica's files read (KuduNotFound if the directory has nothing of ``tablet_id``)."""
        try:
            check_group_id(tablet_id)
        except KuduInvalidArgument:
            raise KuduInvalidArgument(f"{tablet_id!r} is not a tablet id") from None
        cdir, tdir = self.consensus_root / tablet_id, self.tablets_root / tablet_id
        if not cdir.is_dir() and not tdir.is_dir():
            raise KuduNotFound(f"tablet {tablet_id} has no replica in {self.root}")
        cmeta: ConsensusMetadata | None = None
        meta: TabletMetadata | None = None
        cmeta_error: str | None = None
        meta_error: str | None = None
        if cdir.is_dir():
            try:
                cmeta = ConsensusMetadata.load(cdir / CMETA_FILE)
                if cmeta is None:
                    cmeta_error = f"{cdir / CMETA_FILE} is missing"
            except (KuduBadStatus, OSError) as e:
                cmeta_error = str(e)
        if tdir.is_dir():
            try:
                meta = read_tablet_metadata(str(tdir))
            except KuduCorruption as e:
                meta_error = f"{metadata_path(str(tdir))}: {e.message}"
            except (KuduBadStatus, OSError) as e:
                meta_error = str(e)
        elif self.instance.role == "tserver" and not (cdir / TOMBSTONE_FILE).exists():
            meta_error = f"{tdir} is missing"
        return LocalReplica(
            tablet_id, cdir, tdir, (cdir / TOMBSTONE_FILE).exists(), cmeta, cmeta_error, meta, meta_error
        )

    def replicas(self) -> Iterator[LocalReplica]:
        for tid in self.replica_ids():
            yield self.replica(tid)

    def committed_config(self, r: LocalReplica) -> CommittedConfig:
        """The config at the replica's commit index: its WAL's CONFIG entries over the compaction point's.
        Reads the WAL's segments (KuduCorruption on mid-log damage)."""
        if r.cmeta is None:
            raise KuduIllegalState(f"tablet {r.tablet_id}: no consensus metadata ({r.cmeta_error})")
        try:
            snap_index, _, snap_cfg = r.cmeta.config["snapshot"]
            best = CommittedConfig(int(snap_index), Config.from_dict(snap_cfg), dict(r.cmeta.config.get("peers") or {}))
        except (KeyError, TypeError, ValueError, KuduBadStatus) as e:
            raise KuduCorruption(f"{r.consensus_dir / CMETA_FILE}: malformed config: {e}") from e
        configs: dict[int, bytes] = {}
        for entry_index, kind, payload in self._wal_kinds(r):
            for i in [i for i in configs if i >= entry_index]:
                del configs[i]  # a later entry at that index truncated the log logically
            if kind == EntryKind.CONFIG:
                configs[entry_index] = payload
        for index in sorted(configs):
            if best.opid_index < index <= r.cmeta.commit_index:
                try:
                    cfg = Config.decode(configs[index])
                except (KuduBadStatus, ValueError) as e:
                    raise KuduCorruption(f"tablet {r.tablet_id}: CONFIG entry {index} undecodable: {e}") from e
                best = CommittedConfig(index, cfg, {**best.addresses, **config_addresses(configs[index])})
        return best

    def _wal_kinds(self, r: LocalReplica) -> Iterator[tuple[int, int | str, bytes]]:
        """(index, kind, payload of a CONFIG entry, else empty) of every entry, in file order."""
        if not r.wal_dir.is_dir():
            return
        paths = wal_segment_paths(r.wal_dir)
        for n, path in enumerate(paths):
            for frame in SegmentReader(path, is_last=n == len(paths) - 1).frames():
                for e in frame.entries:
                    yield e.index, e.kind, e.data if e.kind == EntryKind.CONFIG else b""

    def delete_replica(self, tablet_id: str, *, clean_unsafe: bool = False) -> LocalReplica:
        """Delete a replica as the tablet manager does: its storage and WAL go, ``cmeta`` stays with a
        tombstone (term and vote survive: the replica can never vote twice in a term), unless
        ``clean_unsafe`` removes everything."""
        r = self.replica(tablet_id)
        if r.tablet_dir.exists():
            shutil.rmtree(r.tablet_dir)
            fsync_dir(str(r.tablet_dir.parent))
        if r.consensus_dir.exists():
            if clean_unsafe or r.cmeta is None:
                shutil.rmtree(r.consensus_dir)
                fsync_dir(str(r.consensus_dir.parent))
            else:
                delete_replica_files(r.consensus_dir, tombstone=True)
        return r

    def locate_block(self, block_id: str) -> tuple[str, Path] | None:
        """(tablet id, path) of the block file named ``block_id``, referenced or not; None if no tablet has it."""
        name = f"{block_id}.blk"
        if "/" in block_id or block_id in ("", ".", ".."):
            raise KuduInvalidArgument(f"{block_id!r} is not a block id")
        if self.tablets_root.is_dir():
            for tdir in sorted(self.tablets_root.iterdir()):
                path = tdir / BLOCKS_DIR / name
                if path.is_file():
                    return tdir.name, path
        return None

    def tree(self) -> Iterator[tuple[int, str, int | None]]:
        """(depth, name, bytes or None for a directory) of everything under the directory, sorted."""

        def walk(d: Path, depth: int) -> Iterator[tuple[int, str, int | None]]:
            for p in sorted(d.iterdir()):
                if p.is_dir() and not p.is_symlink():
                    yield depth, p.name + "/", None
                    yield from walk(p, depth + 1)
                else:
                    yield depth, p.name, p.lstat().st_size

        yield 0, str(self.root) + "/", None
        yield from walk(self.root, 1)

    def copy_staging(self, tablet_id: str) -> Path:
        """A fresh directory name for a tablet copy into this directory (the tablet manager's staging place)."""
        return self.root / COPY_STAGING_DIR / f"{check_group_id(tablet_id)}.{time.time_ns() // 1_000_000}"

    def install_copy(self, tablet_id: str, staging: Path) -> None:
        """Put a fetched copy of ``tablet_id`` in place of whatever is here of it (a tombstone, nothing)."""
        try:
            install_copied_replica(staging, self.tablets_root / tablet_id, self.consensus_root / tablet_id)
        finally:
            if staging.exists():
                shutil.rmtree(staging)

    def set_term(self, tablet_id: str, term: int) -> tuple[int, Path]:
        """Raise a replica's current term (its vote cleared), as Kudu's ``cmeta set_term``; the old record
        is kept beside it. Returns (old term, backup path)."""
        r = self.replica(tablet_id)
        if r.cmeta is None:
            raise KuduIllegalState(f"tablet {tablet_id}: no consensus metadata to edit ({r.cmeta_error})")
        if term <= r.cmeta.term:
            raise KuduInvalidArgument(f"specified term {term} must be higher than current term {r.cmeta.term}")
        path = r.consensus_dir / CMETA_FILE
        backup = path.with_name(f"{CMETA_FILE}.pre_rewrite.{time.time_ns() // 1000}")
        shutil.copy2(path, backup)
        old = r.cmeta.term
        ConsensusMetadata(term, None, r.cmeta.commit_index, r.cmeta.config).save(path)
        return old, backup

    # --- the check ------------------------------------------------------------------------------------

    def check(self, *, repair: bool = False, progress: Callable[[int], None] | None = None) -> FsCheckReport:
        """Every replica's metadata readable, every block its tablet metadata names present and intact
        (Parquet page checksums, IPC and bloom structure), every WAL segment's checksums; orphaned blocks
        and temporary files listed and, with ``repair``, removed, as are the staging directories of tablet
        copies a node was killed in the middle of (nothing else removes those). ``progress(n)`` after each
        replica."""
        rep = FsCheckReport(self.instance.uuid, self.instance.role)
        for r in self.replicas():
            rep.replicas += 1
            self._check_replica(r, rep)
            if progress is not None:
                progress(1)
        staging = self.root / COPY_STAGING_DIR
        if staging.is_dir():
            rep.unfinished_copies = sorted(str(p) for p in staging.iterdir())
        if repair:
            for path in rep.unfinished_copies:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
                rep.repaired.append(f"removed unfinished tablet copy {path}")
            dirs = set()
            for tid, b, _, path in rep.orphaned_blocks:
                os.unlink(path)
                dirs.add(os.path.dirname(path))
                rep.repaired.append(f"removed orphaned block {b} of tablet {tid}")
            for path in rep.temp_files:
                os.unlink(path)
                dirs.add(os.path.dirname(path))
                rep.repaired.append(f"removed temporary file {path}")
            for d in sorted(dirs):
                fsync_dir(d)
        return rep

    def _check_replica(self, r: LocalReplica, rep: FsCheckReport) -> None:
        tid = r.tablet_id
        if r.cmeta_error is not None:
            rep.errors.append(f"tablet {tid}: consensus metadata: {r.cmeta_error}")
        if r.tombstoned:
            if r.tablet_dir.exists():
                rep.warnings.append(f"tablet {tid}: tombstoned, yet its storage {r.tablet_dir} remains")
            return
        if r.consensus_dir.is_dir():
            self._check_wal(r, rep)
        elif r.tablet_dir.is_dir():
            rep.warnings.append(f"tablet {tid}: storage {r.tablet_dir} without a replica (no {r.consensus_dir})")
        if r.meta_error is not None:
            rep.errors.append(f"tablet {tid}: tablet metadata: {r.meta_error}")
        if r.meta is None:
            return
        blocks_dir = r.tablet_dir / BLOCKS_DIR
        kinds: dict[str, str] = {}
        for rs in r.meta.rowsets:
            kinds[rs.base_block] = "base"
            kinds[rs.bloom_block] = "bloom"
            kinds.update(dict.fromkeys(rs.delta_blocks, "delta"))
        found = check_block_dir(str(blocks_dir), set(kinds))
        rep.live_blocks += found.live
        rep.live_block_bytes += found.live_bytes
        for b in found.missing:
            rep.errors.append(f"tablet {tid}: {kinds[b]} block {b} is missing ({blocks_dir})")
        rep.orphaned_blocks.extend((tid, b, size, found.path_of(b)) for b, size in found.orphans)
        rep.temp_files.extend(found.temp_files)
        for b in sorted(set(kinds) - set(found.missing)):
            problem = verify_block(found.path_of(b), kinds[b])
            rep.blocks_verified += 1
            if problem is not None:
                rep.errors.append(f"tablet {tid}: {kinds[b]} block {b}: {problem}")

    def _check_wal(self, r: LocalReplica, rep: FsCheckReport) -> None:
        if not r.wal_dir.is_dir():
            rep.errors.append(f"tablet {r.tablet_id}: WAL directory {r.wal_dir} is missing")
            return
        paths = wal_segment_paths(r.wal_dir)
        for n, path in enumerate(paths):
            rep.wal_segments += 1
            try:
                seg = SegmentReader(path, is_last=n == len(paths) - 1)
                for frame in seg.frames():
                    rep.wal_entries += len(frame.entries)
            except KuduBadStatus as e:
                rep.errors.append(f"tablet {r.tablet_id}: {e}")
                continue
            if seg.torn_tail is not None:
                off, why = seg.torn_tail
                rep.warnings.append(
                    f"tablet {r.tablet_id}: WAL segment {path} ends in a torn write at offset {off} ({why}): "
                    "the node cuts it off when it starts"
                )
        for p in r.wal_dir.iterdir():
            if p.name.endswith(TMP_SUFFIX):
                rep.temp_files.append(str(p))


def install_copied_replica(staging: Path, tablet_dir: Path, consensus_dir: Path) -> None:
    """Move a verified tablet copy (``staging/tablet``, ``staging/consensus``) into place, replacing what
    was there: storage first, consensus last (its presence means "replica"), each rename made durable."""
    for old in (tablet_dir, consensus_dir):
        if old.exists():
            shutil.rmtree(old)
    tablet_dir.parent.mkdir(parents=True, exist_ok=True)
    consensus_dir.parent.mkdir(parents=True, exist_ok=True)
    (staging / "consensus" / WAL_DIR).mkdir(parents=True, exist_ok=True)
    os.replace(staging / "tablet", tablet_dir)
    fsync_dir(str(tablet_dir.parent))
    os.replace(staging / "consensus", consensus_dir)
    fsync_dir(str(consensus_dir.parent))


def partition_text(partition: Any) -> str:
    """A replica's partition as the tool prints it: hash buckets and the partition-key interval (hex)."""
    if not isinstance(partition, dict):
        return "<unknown>"
    buckets = partition.get("hash_buckets") or []
    start = partition.get("partition_key_start") or b""
    end = partition.get("partition_key_end") or b""
    hexed = [v.hex() if isinstance(v, bytes) else str(v) for v in (start, end)]
    head = f"HASH BUCKETS {list(buckets)} " if buckets else ""
    return f"{head}KEYS [{hexed[0] or '<start>'}, {hexed[1] or '<end>'})"
