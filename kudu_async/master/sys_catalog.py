"""The sys catalog: every table and tablet record, in one Raft group replicated across the masters.

Entries are batches of record changes (``put``/``delete`` of a ``table`` or ``tablet`` record by id, and
``request``: the result of one client DDL under its request id), applied in log order to in-memory maps
on every master: those maps are the leader's caches, changed only by committed entries, so a new leader
already holds them. Every ``snapshot_every`` entries (and on close) the maps are written atomically to
``sys-catalog.snapshot`` with the index they include; that index is the state machine's durable index,
so the WAL below it can be collected and a restart replays only the entries after it.

A batch applies whole or not at all. It is refused (applied as a no-op on every master alike, and
answered ``{"conflict": reason}`` to the proposer) when it was planned against a catalog that changed
under it:

- every stored record carries ``rev``, the index of the entry that last wrote it; a ``put`` replaces
  the version it was derived from, so its record's ``rev`` must still be the stored one (absent for a
  new record, which must not exist yet). A writer that read a record, then lost a race with another
  write of it, never overwrites that write with its stale copy;
- two live tables (not DELETING/DELETED) never share a name;
- a request id is recorded once: a second batch under the same id is a duplicate of one already applied.

The request ids (``requests``, id -> {method, digest, result, time}) make DDL retries exactly-once: the
leader answers a retry from here instead of applying it again. The newest ``max_requests`` are kept, the
oldest (by log order, so every master drops the same ones) forgotten.

The ids of deleted tablet records are remembered too (``deleted_tablets``, the newest ``max_deleted``):
a replica a tserver still reports (a CreateTablet that landed after the deletion, a tserver that was
down) is of a tablet that will never exist again, so the leader has it deleted. Tablet ids are never
reused, so even a leader that lags knows no false deletion.
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
MAX_REMEMBERED_REQUESTS = 10_000
MAX_REMEMBERED_DELETED_TABLETS = 100_000
DEAD_TABLE_STATES = ("DELETING", "DELETED")


def put(kind: str, record_id: str, record: dict[str, Any]) -> list[Any]:
    return ["put", kind, record_id, record]


def delete(kind: str, record_id: str) -> list[Any]:
    return ["delete", kind, record_id]


def request(request_id: str, entry: dict[str, Any]) -> list[Any]:
    """Record one DDL's outcome under its client request id (``method``, ``digest``, ``result``, ``time``)."""
    return ["request", request_id, entry]


def encode_ops(ops: list[list[Any]]) -> bytes:
    for op in ops:
        if not _well_formed(op):
            raise KuduInvalidArgument(f"bad sys catalog operation {op!r}")
    return msgpack.packb(ops, use_bin_type=True)


def _well_formed(op: Any) -> bool:
    if not isinstance(op, list) or len(op) < 3 or not isinstance(op[1], str):
        return False
    if op[0] == "request":
        return len(op) == 3 and isinstance(op[2], dict)
    if op[0] == "put":
        return len(op) == 4 and op[1] in KINDS and isinstance(op[2], str) and isinstance(op[3], dict)
    return op[0] == "delete" and len(op) == 3 and op[1] in KINDS and isinstance(op[2], str)


def is_live_table(record: dict[str, Any]) -> bool:
    return record.get("state") not in DEAD_TABLE_STATES


class SysCatalogStateMachine:
    """The catalog maps, rebuilt from the snapshot plus the log; implements ``StateMachine``."""

    def __init__(
        self,
        directory: Path,
        executor: Executor | None,
        snapshot_every: int = 200,
        max_requests: int = MAX_REMEMBERED_REQUESTS,
        max_deleted: int = MAX_REMEMBERED_DELETED_TABLETS,
    ) -> None:
        self.path = directory / SNAPSHOT_FILE
        self.executor = executor
        self.snapshot_every = snapshot_every
        self.max_requests = max_requests
        self.max_deleted = max_deleted
        self.tables: dict[str, dict[str, Any]] = {}
        self.tablets: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, dict[str, Any]] = {}  # request id -> outcome, oldest first (log order)
        self.deleted_tablets: dict[str, int] = {}  # tablet id -> index of its deletion, oldest first
        self.applied_index = 0
        self.conflicts = 0  # batches refused since start (this master)
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
            self.requests = {str(rid): dict(entry) for rid, entry in doc.get("requests", [])}
            self.deleted_tablets = {str(tid): int(i) for tid, i in doc.get("deleted_tablets", [])}
            self.applied_index = self._snapshot_index = int(doc["index"])
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            raise KuduCorruption(f"sys catalog snapshot {self.path} is unreadable: {e}") from e

    def conflict(self, ops: list[list[Any]]) -> str | None:
        """Why this batch cannot apply to the current maps (see the module docstring), or None."""
        staged: dict[tuple[str, str], dict[str, Any] | None] = {}  # what the batch's earlier ops left
        requests: set[str] = set()

        def current(kind: str, record_id: str) -> dict[str, Any] | None:
            if (kind, record_id) in staged:
                return staged[(kind, record_id)]
            return (self.tables if kind == "table" else self.tablets).get(record_id)

        for op in ops:
            if op[0] == "request":
                if op[1] in self.requests or op[1] in requests:
                    return f"request id {op[1]!r} was already applied"
                requests.add(op[1])
                continue
            kind, record_id = op[1], op[2]
            old = current(kind, record_id)
            if op[0] == "delete":
                staged[(kind, record_id)] = None
                continue
            new = op[3]
            if old is None and new.get("rev") is not None:
                return f"{kind} {record_id} was deleted since it was read (at rev {new.get('rev')})"
            if old is not None and old.get("rev") != new.get("rev"):
                return (
                    f"{kind} {record_id} changed since it was read: rev {new.get('rev')} was written over "
                    f"by rev {old.get('rev')}"
                )
            if (
                kind == "table"
                and is_live_table(new)
                and (old is None or not is_live_table(old) or old.get("name") != new.get("name"))
            ):
                for other_id in {*self.tables, *(i for k, i in staged if k == "table")}:
                    other = current("table", other_id)
                    if (
                        other_id != record_id
                        and other is not None
                        and is_live_table(other)
                        and other.get("name") == new.get("name")
                    ):
                        return f"table name {new.get('name')!r} is taken by table {other_id}"
            staged[(kind, record_id)] = new
        return None

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        ops = msgpack.unpackb(payload, raw=False)
        reason = self.conflict(ops)
        if reason is None:
            for op in ops:
                if op[0] == "request":
                    self.requests[op[1]] = {**op[2], "index": index}
                    continue
                target = self.tables if op[1] == "table" else self.tablets
                if op[0] == "put":
                    target[op[2]] = {**op[3], "rev": index}
                elif target.pop(op[2], None) is not None and op[1] == "tablet":
                    self.deleted_tablets[op[2]] = index
            while len(self.requests) > self.max_requests:
                del self.requests[next(iter(self.requests))]
            while len(self.deleted_tablets) > self.max_deleted:
                del self.deleted_tablets[next(iter(self.deleted_tablets))]
        else:
            self.conflicts += 1
            log.info("sys catalog batch refused", extra={"index": index, "reason": reason})
        self.applied_index = index
        if reason is None:
            for listener in list(self.listeners):
                listener(ops)
        self._since_snapshot += 1
        if self._since_snapshot >= self.snapshot_every:
            await self.snapshot()
        return {"index": index} if reason is None else {"index": index, "conflict": reason}

    def durable_index(self) -> int:
        return self._snapshot_index

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        """Nothing to recall: its snapshot file holds the catalog and the DDL request results."""

    async def snapshot(self) -> None:
        self._since_snapshot = 0
        index = self.applied_index
        data = msgpack.packb(
            {
                "index": index,
                "tables": copy.deepcopy(self.tables),
                "tablets": copy.deepcopy(self.tablets),
                "requests": [[rid, copy.deepcopy(e)] for rid, e in self.requests.items()],
                "deleted_tablets": list(self.deleted_tablets.items()),
            },
            use_bin_type=True,
        )
        await asyncio.get_running_loop().run_in_executor(self.executor, atomic_write_bytes, str(self.path), data)
        self._snapshot_index = index
