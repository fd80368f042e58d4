"""Durable Raft metadata of one replica: current term, vote, committed config, commit index.

Raft's safety needs term and vote on disk before a vote or an append is acknowledged, so every save is
temp file + fsync + rename + directory fsync (blocking: call it from an executor). The record carries a
CRC32C so a damaged file is reported, never read as a fresh replica that may vote twice in a term.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import msgpack

from kudu_async.common.errors import KuduCorruption
from kudu_async.fs.io_util import atomic_write_bytes

_MAGIC = b"kcmeta1\n"
_CRC = struct.Struct(">I")


@dataclass
class ConsensusMetadata:
    term: int = 0
    voted_for: str | None = None
    commit_index: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        # A plain map, not dataclasses.asdict (a deep copy of the config): saved on the event loop, often.
        body = msgpack.packb(
            {"term": self.term, "voted_for": self.voted_for, "commit_index": self.commit_index, "config": self.config},
            use_bin_type=True,
        )
        return _MAGIC + _CRC.pack(crc32c.crc32c(body)) + body

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "consensus metadata") -> ConsensusMetadata:
        head = len(_MAGIC) + _CRC.size
        if len(data) < head or not data.startswith(_MAGIC):
            raise KuduCorruption(f"{where}: not a consensus metadata file")
        (crc,) = _CRC.unpack_from(data, len(_MAGIC))
        body = data[head:]
        if crc32c.crc32c(body) != crc:
            raise KuduCorruption(f"{where}: checksum mismatch")
        try:
            doc = msgpack.unpackb(body, raw=False)
            return cls(int(doc["term"]), doc["voted_for"], int(doc["commit_index"]), dict(doc["config"]))
        except (ValueError, KeyError, TypeError) as e:
            raise KuduCorruption(f"{where}: malformed record: {e}") from e

    def save(self, path: Path) -> None:
        atomic_write_bytes(path, self.to_bytes())

    @classmethod
    def load(cls, path: Path) -> ConsensusMetadata | None:
        """The saved record, or None if the replica never saved one."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return cls.from_bytes(data, str(path))
