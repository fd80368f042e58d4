"""The node's data directory and its instance file, which holds the node's permanent identity.

The uuid is created once and kept so a restarted node keeps its place in Raft configs and the master's
registry. The file carries the role and a checksum: a node refuses a directory of the other role, or a
damaged file, rather than silently taking a new identity.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from kudu_async.common.errors import KuduCorruption, KuduIllegalState, KuduIOError
from kudu_async.fs.io_util import atomic_write_bytes

INSTANCE_FILE = "instance"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class InstanceMetadata:
    uuid: str
    role: str
    created_unix: float
    format_version: int = FORMAT_VERSION


class FsManager:
    """Owns one node's data directory layout."""

    def __init__(self, data_dir: str | os.PathLike[str], role: str) -> None:
        self.root = Path(data_dir).resolve()
        self.role = role
        self.instance: InstanceMetadata | None = None

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

    def open_or_create(self) -> InstanceMetadata:
        """Open the directory, creating it and a fresh identity on first use. Blocking."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise KuduIOError(f"cannot create data directory {self.root}: {e}") from e
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
        path = self.instance_path
        try:
            raw = path.read_bytes()
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
