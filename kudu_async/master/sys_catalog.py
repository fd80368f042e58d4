"""The sys catalog: every table and tablet record, in one Raft group replicated across the masters.

Entries are batches of record changes (``put``/``delete`` of a ``table`` or ``tablet`` record by id),
applied in log order to in-memory maps on every master: those maps are the leader's caches, changed only
by committed entries, so a new leader already holds them. Every ``snapshot_every`` entries (and on close)
the maps are written atomically to ``sys-catalog.snapshot`` with the index they include; that index is
the state machine's durable index, so the WAL below it can be collected and a restart replays only the
entries after it.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import msgpack

from kudu_async.common.errors import KuduCorruption, KuduInvalidArgument
from kudu_async.fs.io_util import atomic_write_bytes

log = logging.getLogger(__name__)

GROUP = "sys.catalog"
KIND = "sys_catalog"
KINDS = ("table", "tablet")
SNAPSHOT_FILE = "sys-catalog.snapshot"


def put(kind: str, record_id: str, record: dict[str, Any]) -> list[Any]:
    return ["put", kind, record_id, record]


def delete(kind: str, record_id: str) -> list[Any]:
    return ["delete", kind, record_id]


def encode_ops(ops: list[list[Any]]) -> bytes:
    for op in ops:
        if op[0] not in ("put", "delete") or op[1] not in KINDS or not isinstance(op[2], str):
            raise KuduInvalidArgument(f"bad sys catalog operation {op!r}")
    return msgpack.packb(ops, use_bin_type=True)


class SysCatalogStateMachine:
    """The catalog maps, rebuilt from the snapshot plus the log; implements ``StateMachine``."""

    def __init__(self, directory: Path, executor: Executor | None, snapshot_every: int = 200) -> None:
        self.path = directory / SNAPSHOT_FILE
        self.executor = executor
        self.snapshot_every = snapshot_every
        self.tables: dict[str, dict[str, Any]] = {}
        self.tablets: dict[str, dict[str, Any]] = {}
        self.applied_index = 0
        self._snapshot_index = 0
        self._since_snapshot = 0
        self.listeners: list[Any] = []  # called with (ops) after each applied batch (leader bookkeeping)

    def load(self) -> None:
        """Read the snapshot (worker thread); a damaged one is an error, never an empty catalog."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = msgpack.unpackb(data, raw=False)
            self.tables, self.tablets = dict(doc["tables"]), dict(doc["tablets"])
            self.applied_index = self._snapshot_index = int(doc["index"])
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            raise KuduCorruption(f"sys catalog snapshot {self.path} is unreadable: {e}") from e

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        ops = msgpack.unpackb(payload, raw=False)
        for op in ops:
            target = self.tables if op[1] == "table" else self.tablets
            if op[0] == "put":
                target[op[2]] = op[3]
            else:
                target.pop(op[2], None)
        self.applied_index = index
        for listener in list(self.listeners):
            listener(ops)
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_every:
            await self.snapshot()
        return {"index": index}

    def durable_index(self) -> int:
        return self._snapshot_index

    async def snapshot(self) -> None:
        self._since_snapshot = 0
        index = self.applied_index
        data = msgpack.packb({"index": index, "tables": copy.deepcopy(self.tables),
                              "tablets": copy.deepcopy(self.tablets)}, use_bin_type=True)
        await asyncio.get_running_loop().run_in_executor(self.executor, atomic_write_bytes, str(self.path), data)
        self._snapshot_index = index
