"""Every tablet replica of a tablet server: create, open, delete, tombstone, copy in, report.

A replica is two directories under the data dir: ``consensus/<tablet_id>/`` (Raft metadata and WAL,
owned by the RaftManager) and ``tablets/<tablet_id>/`` (the storage: tablet metadata with schema and
flushed index, rowset blocks). Which table and partition it belongs to travels in the Raft metadata's
``extra`` map, written once at creation. On start the RaftManager reopens every replica (in parallel,
bounded); each asks this manager for its state machine, which opens the storage, and Raft then replays
the log from the storage's flushed index.

Tablet copy: a leader whose peer lacks the tablet (or is behind the retained log) asks that peer's
tserver to ``StartTabletCopy``; the peer pulls the leader's flushed files, WAL and consensus metadata
through ``consensus.tablet_copy``, installs them with renames and opens the replica like at startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kudu_async.common.clock import HybridClock
from kudu_async.common.errors import (
    KuduAlreadyPresent,
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotFound,
    KuduServiceUnavailable,
    KuduTabletFailed,
)
from kudu_async.common.mem_tracker import NodeMemory
from kudu_async.common.metrics import MetricRegistry
from kudu_async.common.schema import Schema
from kudu_async.consensus.raft_manager import RaftManager, check_group_id
from kudu_async.consensus.replica import RaftReplica
from kudu_async.consensus.tablet_copy import CopyManifest, TabletCopySource, fetch_tablet_copy, link_or_copy
from kudu_async.fs.tablet_metadata import metadata_path
from kudu_async.rpc.client import RpcClient
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.tablet import Tablet, TabletOptions
from kudu_async.tserver.local_replicas import install_copied_replica
from kudu_async.tserver.messages import CreateTabletRequest
from kudu_async.tserver.scanners import BatchedHandOff
from kudu_async.tserver.tablet_replica import ReplicaServices, TabletReplica, TabletState, WriteLimits

log = logging.getLogger(__name__)
FIRST_CAMPAIGN_DELAY_S = 0.02  # after creating a new tablet's replica, before its designated one campaigns
FIRST_CAMPAIGN_RETRY_S = 0.05  # again while no leader is known (a peer's replica may not exist yet), ...
FIRST_CAMPAIGN_TRIES = 6  # ... doubling the pause each time (0.05 + 0.1 + ... + 0.8 s); then elections as usual


def first_candidate(tablet_id: str, peers: dict[str, str]) -> str:
    """The replica of a new tablet that campaigns first when the master names none (``first_leader``):
    spread over the servers by tablet id."""
    order = sorted(peers)
    return order[zlib.crc32(tablet_id.encode()) % len(order)]


TABLET_KIND = "tablet"
COPY_RETRY_S = 10.0  # at most one copy attempt per (tablet, peer) this often


@dataclass(frozen=True, kw_only=True)
class NodeParts:
    """The parts of the tablet server a TabletManager works with, shared with the rest of the node."""

    raft: RaftManager
    rpc_client: RpcClient
    executor: Executor | None  # blocking disk and CPU work (None: the loop's default executor)
    metrics: MetricRegistry
    maintenance: MaintenanceManager  # flushes and compactions of every tablet
    clock: HybridClock
    memory: NodeMemory  # the node's memory limit; each replica's stores hang under its root
    # The point reads handed off the loop (None: ``executor``), apart from the writes' and WAL's queue.
    read_executor: Executor | None = None


class TabletManager:
    def __init__(
        self,
        node_uuid: str,
        data_root: Path,
        node: NodeParts,
        options: TabletOptions,
        limits: WriteLimits,
        self_address: Callable[[], str],
    ) -> None:
        self.node_uuid = node_uuid
        self.self_address = self_address  # this server's RPC address (known once bound)
        self.tablets_root = data_root / "tablets"
        self.staging_root = data_root / "copy-staging"
        self.raft = raft = node.raft
        self.rpc = node.rpc_client
        self.executor = executor = node.executor
        self.small_reads = BatchedHandOff(node.read_executor if node.read_executor is not None else executor)
        self.metrics = node.metrics
        self.options = options
        self.limits = limits
        self.maintenance = node.maintenance
        self.clock = node.clock
        self.memory = node.memory
        # What every replica opened here shares.
        self._replica_services = ReplicaServices(
            executor=executor,
            clock=self.clock,
            limits=limits,
            memory=node.memory,
            small_reads=self.small_reads,
            on_change=self._mark_dirty,
            fetch_safe_index=self._fetch_safe_index,
        )
        self.replicas: dict[str, TabletReplica] = {}
        self.failed_to_open: dict[str, str] = {}
        self.on_change: Callable[[str], None] = lambda tablet_id: None
        self._signatures: dict[str, tuple[Any, ...]] = {}
        self._creating: dict[str, asyncio.Future[None]] = {}
        self._copying: dict[str, asyncio.Task[None]] = {}
        self._copy_asked: dict[tuple[str, str], float] = {}
        self._asks: set[asyncio.Task[None]] = set()
        # Block cache warm-up of replicas opened from disk, one tablet at a time once it is RUNNING
        # (opening a tablet reads only its rowsets' footers, so bootstrap does not grow with the data).
        self._warm_queue: list[str] = []
        self._warm_seen: set[str] = set()
        self._warm_task: asyncio.Task[None] | None = None
        self.copy_history: list[dict[str, Any]] = []
        self.copy_source = TabletCopySource(data_root / "copy-sessions", self._copy_manifest, executor)
        raft.register_kind(TABLET_KIND, self._open_state_machine)
        raft.on_peer_needs_copy = self._peer_needs_copy
        raft.on_role_change = self._role_changed

    # --- opening --------------------------------------------------------------------------------------

    def tablet_dir(self, tablet_id: str) -> Path:
        return self.tablets_root / check_group_id(tablet_id)

    async def _open_state_machine(self, group: str, extra: dict[str, Any]) -> TabletReplica:
        """RaftManager's factory: open (or, for a new replica, create) the storage of ``group``."""
        tdir = self.tablet_dir(group)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            tablet = await loop.run_in_executor(self.executor, self._open_or_create_storage, group, tdir, extra)
        except (KuduBadStatus, OSError, KeyError) as e:
            self.failed_to_open[group] = f"cannot open tablet storage: {e}"
            log.error("tablet storage failed to open", extra={"tablet": group, "error": str(e)})
            raise KuduIllegalState(f"tablet {group}: cannot open storage: {e}") from e
        self.failed_to_open.pop(group, None)
        info = {k: extra.get(k) for k in ("table_id", "table_name", "partition", "partition_schema")}
        entity = self.metrics.entity(
            "tablet", group, {"table_id": info.get("table_id") or "", "table_name": info.get("table_name") or ""}
        )
        replica = TabletReplica(
            group, info, tablet, lambda: self.raft.replicas.get(group), entity, self._replica_services
        )
        self.replicas[group] = replica
        self._track_memory(group, tablet)
        self.maintenance.register(tablet)
        log.info(
            "tablet storage opened",
            extra={"tablet": group, "seconds": round(time.monotonic() - started, 3), "rowsets": len(tablet.rowsets())},
        )
        self._mark_dirty(group)
        return replica

    def _open_or_create_storage(self, group: str, tdir: Path, extra: dict[str, Any]) -> Tablet:
        if os.path.exists(metadata_path(str(tdir))):
            return Tablet.open(str(tdir), options=self.options, clock=self.clock)
        schema = Schema.from_dict(extra["schema"])
        return Tablet.create(
            str(tdir),
            schema,
            tablet_id=group,
            options=self.options,
            clock=self.clock,
            schema_version=int(extra.get("schema_version") or 0),
        )

    def _mark_dirty(self, tablet_id: str) -> None:
        self.on_change(tablet_id)

    def poll_changes(self) -> None:
        """Mark tablets whose reported state moved (role, term, leader, config, state, schema)."""
        for tid, r in list(self.replicas.items()):
            self._check_changed(tid, r)
        self._queue_warm_ups()

    def _queue_warm_ups(self) -> None:
        """Queue replicas that reached RUNNING for :meth:`_warm_up`; start it if idle."""
        for tid, r in list(self.replicas.items()):
            if tid not in self._warm_seen and r.state is TabletState.RUNNING:
                self._warm_seen.add(tid)
                if r.tablet.rowsets():
                    self._warm_queue.append(tid)
        if self._warm_queue and (self._warm_task is None or self._warm_task.done()):
            self._warm_task = asyncio.get_running_loop().create_task(self._warm_up(), name="block-cache-warm-up")

    async def _warm_up(self) -> None:
        """Fill the block cache's free room from the queued tablets' rowsets, one tablet at a time in a
        worker, after bootstrap rather than in it; stops when the cache refuses a block."""
        loop = asyncio.get_running_loop()
        while self._warm_queue:
            r = self.replicas.get(self._warm_queue.pop(0))
            if r is None or r.stopped:
                continue
            try:
                whole = await loop.run_in_executor(self.executor, r.tablet.warm_block_cache)
            except (KuduBadStatus, OSError) as e:  # the replica's own reads report a damaged file
                log.warning("block cache warm-up skipped a tablet", extra={"tablet": r.tablet_id, "error": str(e)})
                continue
            if whole < len(r.tablet.rowsets()):
                self._warm_queue.clear()  # the cache is full
                return

    def _role_changed(self, tablet_id: str) -> None:
        """Raft's role change hook: report a new leader now rather than at the next poll."""
        r = self.replicas.get(tablet_id)
        if r is not None:
            self._check_changed(tablet_id, r)

    def _check_changed(self, tid: str, r: TabletReplica) -> None:
        sig = r.report_signature()
        if self._signatures.get(tid) != sig:
            self._signatures[tid] = sig
            self.on_change(tid)

    # --- create / delete ------------------------------------------------------------------------------

    async def create_tablet(self, req: CreateTabletRequest) -> dict[str, Any]:
        """Create a replica; idempotent (the master retries): an identical existing replica is success."""
        tablet_id, table_id, table_name, peers = req.tablet_id, req.table_id, req.table_name, req.peers
        schema = Schema.from_dict(req.schema).with_column_ids()
        if self.node_uuid not in peers:
            raise KuduInvalidArgument(f"'peers' does not include this tablet server {self.node_uuid}")
        existing = self.replicas.get(tablet_id)
        if existing is not None or tablet_id in self.raft.replicas:
            if existing is not None and existing.info.get("table_id") not in (None, table_id):
                raise KuduAlreadyPresent(f"tablet {tablet_id} exists here for table {existing.info.get('table_id')}")
            return {"tablet_id": tablet_id, "created": False}
        if tablet_id in self._copying:
            raise KuduServiceUnavailable(f"tablet {tablet_id} is being copied to this server", {"retryable": True})
        if tablet_id in self._creating:
            await asyncio.shield(self._creating[tablet_id])
            return {"tablet_id": tablet_id, "created": False}
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creating[tablet_id] = fut
        try:
            tdir = self.tablet_dir(tablet_id)
            # Leftover storage without a replica (a crash mid-create, or an old deleted incarnation).
            await asyncio.get_running_loop().run_in_executor(self.executor, self._remove_storage, tdir)
            extra = {
                "table_id": table_id,
                "table_name": table_name,
                "partition": req.partition,
                "partition_schema": req.partition_schema,
                "schema": schema.to_dict(),
                "schema_version": req.schema_version,
            }
            replica = await self.raft.create_replica(tablet_id, TABLET_KIND, dict(peers), extra)
            log.info("tablet created", extra={"tablet": tablet_id, "table": table_name, "peers": sorted(peers)})
            if (req.first_leader or first_candidate(tablet_id, peers)) == self.node_uuid:
                asyncio.get_running_loop().call_later(FIRST_CAMPAIGN_DELAY_S, self._first_campaign, tablet_id, replica)
            return {"tablet_id": tablet_id, "created": True}
        finally:
            fut.set_result(None)
            del self._creating[tablet_id]

    def _first_campaign(
        self,
        tablet_id: str,
        replica: RaftReplica,
        tries_left: int = FIRST_CAMPAIGN_TRIES,
        pause_s: float = FIRST_CAMPAIGN_RETRY_S,
    ) -> None:
        """A new tablet's designated replica asks for votes at once instead of waiting out an election
        timeout. Its peers are created by the same master pass, a moment apart: a round that found too
        few of them is repeated shortly, with doubling pauses so that a slow vote round is not cut short
        forever. Each is a normal pre-vote election: if a peer was elected meanwhile by timeout (and its
        heartbeat has not reached us yet), its followers refuse, and it stays leader."""
        raft = replica.raft
        if self.raft.replicas.get(tablet_id) is not replica or raft is None or raft.leader is not None:
            return  # removed, not running, or a leader already
        try:
            replica.campaign()
        except KuduBadStatus as e:  # stopped or failed meanwhile: the election timeout still applies
            log.info("first campaign skipped", extra={"tablet": tablet_id, "reason": str(e)})
            return
        if tries_left > 1:
            asyncio.get_running_loop().call_later(
                pause_s, self._first_campaign, tablet_id, replica, tries_left - 1, 2 * pause_s
            )

    async def delete_tablet(
        self,
        tablet_id: str,
        delete_type: str = "DELETED",
        cas_config_index: int | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """DELETED removes everything; TOMBSTONED keeps the Raft metadata. Idempotent."""
        check_group_id(tablet_id)
        if delete_type not in ("DELETED", "TOMBSTONED"):
            raise KuduInvalidArgument(f"delete_type must be DELETED or TOMBSTONED, not {delete_type!r}")
        replica = self.replicas.get(tablet_id)
        raft_replica = self.raft.replicas.get(tablet_id)
        if cas_config_index is not None and raft_replica is not None and raft_replica.raft is not None:
            have = raft_replica.raft.config_index
            if have > cas_config_index:
                raise KuduIllegalState(
                    f"tablet {tablet_id}: config index {have} is newer than {cas_config_index}", {"config_index": have}
                )
        known = replica is not None or raft_replica is not None or tablet_id in self.raft.tombstoned
        if not known and not self.tablet_dir(tablet_id).exists():
            return {"tablet_id": tablet_id, "deleted": False}
        if delete_type == "TOMBSTONED" and replica is None and tablet_id in self.raft.tombstoned:
            return {"tablet_id": tablet_id, "deleted": False}
        await self._remove(tablet_id, tombstone=delete_type == "TOMBSTONED")
        log.info("tablet deleted", extra={"tablet": tablet_id, "delete_type": delete_type, "reason": reason})
        return {"tablet_id": tablet_id, "deleted": True}

    def _track_memory(self, group: str, tablet: Tablet) -> None:
        """The replica's memory consumers under the node's root: ``tablet-<id>`` -> MemRowSet,
        DeltaMemStores, DiskRowSets (their key and delta indexes; their blocks and footers are in the
        block cache) and the Raft log cache (entries replicated and not yet applied)."""
        root = self.memory.root
        old = root.get_child(f"tablet-{group}")
        if old is not None:  # reopened (e.g. after a tablet copy): the new storage replaces it
            old.detach()
        node = root.child(f"tablet-{group}", kind="tablets")
        node.child("MemRowSet", gauge=tablet.mrs_memory_bytes, kind="MemRowSets")
        node.child("DeltaMemStores", gauge=tablet.dms_memory_bytes)
        node.child("DiskRowSets", gauge=tablet.drs_memory_bytes)
        node.child("log_cache", gauge=functools.partial(_log_cache_bytes, self.raft, group), kind="log caches")

    async def _remove(self, tablet_id: str, *, tombstone: bool) -> None:
        replica = self.replicas.pop(tablet_id, None)
        tracker = self.memory.root.get_child(f"tablet-{tablet_id}")
        if tracker is not None:
            tracker.detach()
        self.maintenance.unregister(tablet_id)
        if replica is not None:
            replica.stopped = True
            replica.abort_all()
        await self.raft.remove_replica(tablet_id, tombstone=tombstone)
        await self._wait_maintenance_idle(tablet_id)
        await asyncio.get_running_loop().run_in_executor(
            self.executor, self._remove_storage, self.tablet_dir(tablet_id)
        )
        self.metrics.remove("tablet", tablet_id)
        self._signatures.pop(tablet_id, None)
        self._warm_seen.discard(tablet_id)
        self.failed_to_open.pop(tablet_id, None)
        self._mark_dirty(tablet_id)

    async def _wait_maintenance_idle(self, tablet_id: str, timeout_s: float = 60.0) -> None:
        """A flush or compaction already running on the tablet finishes before its files go away."""
        deadline = time.monotonic() + timeout_s
        while any(op.get("tablet_id") == tablet_id for op in self.maintenance.status()["running"]):
            if time.monotonic() > deadline:
                raise KuduIllegalState(f"tablet {tablet_id}: maintenance op still running after {timeout_s}s")
            await asyncio.sleep(0.05)

    def get(self, tablet_id: Any) -> TabletReplica:
        replica = self.replicas.get(check_group_id(tablet_id))
        if replica is None:
            if tablet_id in self.failed_to_open:
                raise KuduTabletFailed(f"tablet {tablet_id} is FAILED: {self.failed_to_open[tablet_id]}")
            if tablet_id in self._copying or tablet_id in self.raft.opening:
                raise KuduServiceUnavailable(
                    f"tablet {tablet_id} is not ready yet on {self.node_uuid}", {"retryable": True}
                )
            raise KuduNotFound(
                f"tablet {tablet_id} is not hosted by tablet server {self.node_uuid}", {"error": "TABLET_NOT_FOUND"}
            )
        return replica

    # --- reports and listings -------------------------------------------------------------------------

    async def refresh_stats(self) -> None:
        """Kudu's tablet statistics: each leader's live row count (the tablet's counter) and bytes on disk
        (its directory walked in a worker), set on the replica for its next report; followers report none."""
        leaders = {
            tid: r
            for tid, r in self.replicas.items()
            if r.raft is not None and r.raft.raft is not None and r.raft.raft.is_leader
        }
        for r in self.replicas.values():
            if r.tablet_id not in leaders:
                r.stats = None
        if not leaders:
            return
        dirs = {tid: self.tablet_dir(tid) for tid in leaders}
        sizes = await asyncio.get_running_loop().run_in_executor(
            self.executor, lambda: {tid: tree_bytes(d) for tid, d in dirs.items()}
        )
        for tid, r in leaders.items():
            if self.replicas.get(tid) is r:
                r.stats = (r.tablet.live_rows, sizes[tid])

    def reports(self, ids: set[str] | None) -> list[dict[str, Any]]:
        wanted = (
            (
                set(self.replicas)
                | set(self.failed_to_open)
                | self.raft.tombstoned
                | set(self.raft.opening)
                | set(self._copying)
            )
            if ids is None
            else ids
        )
        out = []
        for tid in sorted(wanted):
            r = self.replicas.get(tid)
            if r is not None:
                out.append(r.report())
            elif (
                tid in self._copying
                or tid in self.failed_to_open
                or tid in self.raft.tombstoned
                or tid in self.raft.opening
            ):
                state = (
                    TabletState.COPYING
                    if tid in self._copying
                    else TabletState.FAILED
                    if tid in self.failed_to_open
                    else TabletState.TOMBSTONED
                    if tid in self.raft.tombstoned
                    else TabletState.BOOTSTRAPPING
                )
                out.append(
                    {
                        "tablet_id": tid,
                        "table_id": "",
                        "state": state.value,
                        "error": self.failed_to_open.get(tid),
                        "role": None,
                        "term": 0,
                        "leader_uuid": None,
                        "config": {"opid_index": 0, "voters": [], "non_voters": [], "peers": {}},
                        "schema_version": 0,
                    }
                )
        return out

    def list_tablets(self, *, with_schema: bool = False) -> list[dict[str, Any]]:
        """Every replica's report with its table and partition; ``with_schema`` adds an open replica's schema."""
        out = []
        for rep in self.reports(None):
            r = self.replicas.get(rep["tablet_id"])
            if r is not None:
                rep = {
                    **rep,
                    "table_name": r.info.get("table_name"),
                    "partition": r.info.get("partition"),
                    "schema_version": r.tablet.schema_version,
                }
                if with_schema:
                    rep["schema"] = r.tablet.schema_dict()
            out.append(rep)
        return out

    # --- safe time for follower snapshot reads --------------------------------------------------------

    async def _fetch_safe_index(self, replica: TabletReplica, ts: int, timeout_s: float) -> int:
        r = replica.raft
        hint = r.leader_hint() if r is not None else {}
        address = hint.get("leader_address")
        if not address:
            raise KuduServiceUnavailable(
                f"tablet {replica.tablet_id}: no known leader to confirm safe time", {"retryable": True}
            )
        reply = await self.rpc.call(
            address,
            "TabletServer",
            "GetSafeTime",
            {"tablet_id": replica.tablet_id, "timestamp": ts},
            timeout_s=timeout_s,
        )
        index = reply.get("index") if isinstance(reply, dict) else None
        if not isinstance(index, int):
            raise KuduIllegalState(f"GetSafeTime from {address}: malformed answer")
        return index

    # --- tablet copy ----------------------------------------------------------------------------------

    def _peer_needs_copy(self, group: str, peer: str, address: str) -> None:
        """Leader side: ask ``peer`` to copy ``group`` from us (rate-limited per tablet and peer)."""
        now = time.monotonic()
        key = (group, peer)
        if now - self._copy_asked.get(key, -COPY_RETRY_S) < COPY_RETRY_S:
            return
        self._copy_asked[key] = now
        r = self.raft.replicas.get(group)
        term = r.raft.term if r is not None and r.raft is not None else 0
        log.info("asking peer to copy tablet from this leader", extra={"tablet": group, "peer": peer})

        async def ask() -> None:
            try:
                await self.rpc.call(
                    address,
                    "TabletServer",
                    "StartTabletCopy",
                    {
                        "tablet_id": group,
                        "source_uuid": self.node_uuid,
                        "source_address": self.self_address(),
                        "caller_term": term,
                    },
                    timeout_s=10.0,
                )
            except KuduBadStatus as e:
                log.warning("StartTabletCopy request failed", extra={"tablet": group, "peer": peer, "error": str(e)})

        task = asyncio.get_running_loop().create_task(ask())
        self._asks.add(task)
        task.add_done_callback(self._asks.discard)

    async def start_tablet_copy(
        self, tablet_id: str, source_uuid: str, source_address: str, caller_term: int
    ) -> dict[str, Any]:
        """Destination side: replace whatever we hold of ``tablet_id`` with a copy from the leader."""
        check_group_id(tablet_id)
        if tablet_id in self._copying:
            return {"tablet_id": tablet_id, "started": False, "reason": "copy already in progress"}
        existing = self.raft.replicas.get(tablet_id)
        if existing is not None and existing.raft is not None:
            if existing.raft.is_leader:
                raise KuduIllegalState(f"tablet {tablet_id}: this replica is the leader; refusing to be overwritten")
            if existing.raft.term > caller_term:
                raise KuduIllegalState(
                    f"tablet {tablet_id}: local term {existing.raft.term} is newer than the caller's {caller_term}"
                )
        task = asyncio.get_running_loop().create_task(self._copy_in(tablet_id, source_uuid, source_address))
        self._copying[tablet_id] = task
        task.add_done_callback(lambda t: self._copying.pop(tablet_id, None))
        self._mark_dirty(tablet_id)  # the master sees COPYING: the copy is making its way, not stuck
        return {"tablet_id": tablet_id, "started": True}

    async def _copy_in(self, tablet_id: str, source_uuid: str, source_address: str) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        staging = self.staging_root / f"{tablet_id}.{int(time.time() * 1000)}"
        record: dict[str, Any] = {"tablet_id": tablet_id, "source": source_uuid, "started_at": time.time()}
        try:
            if tablet_id in self.raft.replicas or tablet_id in self.replicas or tablet_id in self.raft.tombstoned:
                await self._remove(tablet_id, tombstone=True)
            await loop.run_in_executor(self.executor, lambda: self.staging_root.mkdir(parents=True, exist_ok=True))
            meta = await fetch_tablet_copy(self.rpc, source_address, tablet_id, staging, executor=self.executor)
            await loop.run_in_executor(self.executor, self._install, tablet_id, staging)
            replica = await self.raft.open_existing(tablet_id)
            if replica is None or tablet_id not in self.replicas:
                raise KuduIllegalState(f"copied tablet {tablet_id} did not open")
            record.update(result="OK", bytes=meta.get("bytes"), seconds=round(time.monotonic() - started, 3))
            log.info("tablet copy finished", extra=record)
        except Exception as e:  # the leader asks again later; the error is kept for the admin page
            record.update(result=f"ERROR: {type(e).__name__}: {e}", seconds=round(time.monotonic() - started, 3))
            log.error("tablet copy failed", extra=record)
        finally:
            await loop.run_in_executor(self.executor, _rmtree, staging)
            self.copy_history = [*self.copy_history[-31:], record]
            self._mark_dirty(tablet_id)

    def _remove_storage(self, tdir: Path) -> None:
        """Delete a tablet's storage directory and forget its blocks in the node's block cache."""
        if self.options.block_cache is not None:
            self.options.block_cache.drop_under(str(tdir))
        _rmtree(tdir)

    def _install(self, tablet_id: str, staging: Path) -> None:
        """Move a verified copy into place (see :func:`install_copied_replica`)."""
        tdir = self.tablet_dir(tablet_id)
        self._remove_storage(tdir)
        install_copied_replica(staging, tdir, self.raft.replica_dir(tablet_id))

    async def _copy_manifest(self, group: str, extra: dict[str, Any], session_dir: Path) -> CopyManifest:
        """Source side: a consistent image of ``group`` hard-linked into ``session_dir``."""
        replica = self.replicas.get(check_group_id(group))
        rr = self.raft.replicas.get(group)
        if replica is None or rr is None or replica.state is not TabletState.RUNNING:
            raise KuduNotFound(f"no running replica of tablet {group} to copy from")
        rr.gc_holds += 1  # the log keeps every entry after the compaction point captured below
        try:
            cmeta = rr.copy_metadata()
            files, blobs = await asyncio.get_running_loop().run_in_executor(
                self.executor, self._capture_files, replica, rr.wal_files(), session_dir
            )
        finally:
            rr.gc_holds -= 1
        blobs["consensus/cmeta"] = cmeta
        total = sum(p.stat().st_size for p in files.values()) + sum(len(b) for b in blobs.values())
        return CopyManifest(files=files, blobs=blobs, meta={"tablet_id": group, "bytes": total})

    @staticmethod
    def _capture_files(
        replica: TabletReplica, wal_files: list[Path], session_dir: Path
    ) -> tuple[dict[str, Path], dict[str, bytes]]:
        files: dict[str, Path] = {}
        for p in wal_files:  # WAL first: the storage captured after it can only be newer
            dst = session_dir / "consensus" / "wal" / p.name
            link_or_copy(p, dst)
            files[f"consensus/wal/{p.name}"] = dst
        tablet = replica.tablet
        tdir = tablet.tablet_dir
        with tablet.durable_files() as (meta_bytes, block_paths):  # metadata and its blocks as one version
            for block_path in block_paths:
                src = Path(block_path)
                rel = os.path.relpath(src, tdir)
                dst = session_dir / "tablet" / rel
                link_or_copy(src, dst)
                files[f"tablet/{rel}"] = dst
        return files, {"tablet/" + os.path.basename(metadata_path(tdir)): meta_bytes}

    # --- lifecycle ------------------------------------------------------------------------------------

    async def stop(self) -> None:
        if self._warm_task is not None:
            self._warm_task.cancel()
            await asyncio.gather(self._warm_task, return_exceptions=True)
        for t in list(self._copying.values()):
            t.cancel()
        await asyncio.gather(*self._copying.values(), return_exceptions=True)
        await self.copy_source.stop()


def _rmtree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def _log_cache_bytes(raft: RaftManager, group: str) -> int:
    """Bytes of the log entries not yet applied. An applied write's rows are read in place from its
    entry's payload (``_rows_from_entry``), so the MemRowSet's tracker counts those bytes already; they
    stay in the log cache only until the MemRowSet is flushed."""
    r = raft.replicas.get(group)
    core = None if r is None else r.raft
    if core is None:
        return 0
    log = core.log
    lo = max(core.applied_index + 1, log.first_index())
    hi = log.last_index() + 1
    return log.bytes_between(lo, hi) if lo < hi else 0


def tree_bytes(top: Path) -> int:
    """Bytes of the files under ``top``; files and directories vanishing meanwhile (a flush, a WAL
    segment collected) are skipped, as os.walk skips directories it cannot list."""
    total = 0
    for root, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_size
    return total
