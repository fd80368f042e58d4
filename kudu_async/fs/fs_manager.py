"""The node's data directory and its instance file, which holds the node's permanent identity.

The uuid is created once and kept so a restarted node keeps its place in Raft configs and the master's
registry. The file carries the role and a checksum: a node refuses a directory of the other role, or a
damaged file, rather than silently taking a new identity.

A running node holds a lock on ``instance.lock`` (a POSIX record lock, which the kernel drops when the
process dies, however it dies, and which forked children do not inherit), with its pid written in the
file: the offline tools take the same lock, so they refuse a directory a live node is using and a node
cannot start on a directory a tool is editing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from kudu_async.common.errors import KuduCorruption, KuduIllegalState, KuduIOError, KuduNotFound
from kudu_async.fs.io_util import atomic_write_bytes

INSTANCE_FILE = "instance"
LOCK_FILE = "instance.lock"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class InstanceMetadata:
    uuid: str
    role: str
    created_unix: float
    format_version: int = FORMAT_VERSION


class DataDirLock:
    """The exclusive lock of one data directory, held until :meth:`release` or the process's end."""

    def __init__(self, root: Path, fd: int) -> None:
        self.root = root
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, root: str | os.PathLike[str], holder: str) -> DataDirLock:
        """Lock ``root`` for ``holder`` (a node's role, a tool's name); KuduIllegalState naming the process
        that holds it when another does."""
        root = Path(root).resolve()
        path = root / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise KuduIOError(f"cannot open lock file {path}: {e}") from e
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise KuduIllegalState(
                f"data directory {root} is in use: process {owner} holds {path} (a running node, or another "
                "tool); stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} ({holder})\n".encode(), 0)
        return cls(root, fd)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the record lock
            self._fd = None

    def __enter__(self) -> DataDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_instance(root: str | os.PathLike[str]) -> InstanceMetadata:
    """The instance record of the data directory ``root``, its checksum verified. Blocking."""
    path = Path(root) / INSTANCE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise KuduNotFound(f"{root} holds no instance file: not a node's data directory (its --data-dir)") from None
    except OSError as e:
        raise KuduIOError(f"cannot read instance file {path}: {e}") from e
    try:
        doc = json.loads(raw)
        body = doc["instance"]
        crc = doc["crc32"]
        payload = json.dumps(body, sort_keys=True)
    except (ValueError, KeyError, TypeError) as e:
        raise KuduCorruption(f"instance file {path} is damaged (not a valid instance record: {e})") from e
    if zlib.crc32(payload.encode()) != crc:
        raise KuduCorruption(f"instance file {path} is damaged (checksum mismatch)")
    try:
        meta = InstanceMetadata(
            uuid=str(body["uuid"]),
            role=str(body["role"]),
            created_unix=float(body["created_unix"]),
            format_version=int(body["format_version"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise KuduCorruption(f"instance file {path} is damaged (missing field {e})") from e
    if meta.format_version > FORMAT_VERSION:
        raise KuduIllegalState(
            f"instance file {path} has format {meta.format_version}; this build reads <= {FORMAT_VERSION}"
        )
    return meta


class FsManager:
    """Owns one node's data directory layout."""

    def __init__(self, data_dir: str | os.PathLike[str], role: str) -> None:
        self.root = Path(data_dir).resolve()
        self.role = role
        self.instance: InstanceMetadata | None = None
        self.dir_lock: DataDirLock | None = None

    @property
    def instance_path(self) -> Path:
        return self.root / INSTANCE_FILE

    @property
    def wal_root(self) -> Path:
        return self.root / "wals"

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    @property
    def meta_root(self) -> Path:
        return self.root / "tablet-meta"

    @property
    def uuid(self) -> str:
        if self.instance is None:
            raise KuduIllegalState("FsManager not opened")
        return self.instance.uuid

    def open_or_create(self, *, lock: bool = False) -> InstanceMetadata:
        """Open the directory, creating it and a fresh identity on first use; with ``lock`` (a node's
        process) hold the directory's lock for the process's life. Blocking."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise KuduIOError(f"cannot create data directory {self.root}: {e}") from e
        if lock and self.dir_lock is None:
            self.dir_lock = DataDirLock.acquire(self.root, self.role)
        if self.instance_path.exists():
            meta = self._read_instance()
        else:
            meta = InstanceMetadata(uuid=uuid.uuid4().hex, role=self.role, created_unix=time.time())
            self._write_instance(meta)
        if meta.role != self.role:
            raise KuduIllegalState(
                f"data directory {self.root} belongs to a {meta.role} (uuid {meta.uuid}); "
                f"refusing to start it as a {self.role}"
            )
        for d in (self.wal_root, self.data_root, self.meta_root):
            d.mkdir(exist_ok=True)
        self.instance = meta
        return meta

    def _write_instance(self, meta: InstanceMetadata) -> None:
        body = {
            "uuid": meta.uuid,
            "role": meta.role,
            "created_unix": meta.created_unix,
            "format_version": meta.format_version,
        }
        payload = json.dumps(body, sort_keys=True)
        doc = {"instance": body, "crc32": zlib.crc32(payload.encode())}
        atomic_write_bytes(self.instance_path, (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode())

    def _read_instance(self) -> InstanceMetadata:
        return read_instance(self.root)
