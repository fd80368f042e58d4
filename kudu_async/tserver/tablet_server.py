"""The tablet server role: hosts tablet replicas behind the ``TabletServer`` RPC service.

It wires the tablet manager (replicas, creation, deletion, copy), the scanner registry, the maintenance
manager (flushes and compactions on worker threads) and the admin pages onto the node shell.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from aiohttp import web

from kudu_async.common.clock import HybridClock
from kudu_async.common.errors import KuduBadStatus, KuduConfigurationError, KuduInvalidArgument
from kudu_async.common.mem_tracker import NodeMemory, format_bytes
from kudu_async.fs.block_cache import BlockCache
from kudu_async.server.admin import json_response, node_as
from kudu_async.server.config import parse_master_addresses
from kudu_async.server.node import Node
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.tablet import TabletOptions
from kudu_async.tserver import web_pages
from kudu_async.tserver.heartbeater import Heartbeater, HeartbeatOptions
from kudu_async.tserver.maintenance_pool import MaintenanceProcessPool
from kudu_async.tserver.replicated_kv import ReplicatedKVService
from kudu_async.tserver.scanners import ScannerManager
from kudu_async.tserver.service import TabletService
from kudu_async.tserver.tablet_manager import NodeParts, TabletManager
from kudu_async.tserver.tablet_replica import WriteLimits
from kudu_async.version import __version__

log = logging.getLogger(__name__)


class TabletServer(Node):
    role = "tserver"
    open_replicas_in_background = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.clock = HybridClock()
        flush_bytes = cfg.flush_threshold_mb * 1024 * 1024
        self.maintenance = MaintenanceManager(
            num_threads=cfg.maintenance_manager_num_threads,
            memory_threshold_bytes=self.memory.pressure_threshold,
            flush_age_s=float(cfg.flush_threshold_secs),
            memory_usage=self.memory.projected,  # pressure judged with the next flush counted
            working_memory=self.memory.root.child("maintenance"),
            nice=cfg.maintenance_manager_nice,
        )
        self.maintenance_pool = (
            MaintenanceProcessPool(cfg.maintenance_manager_num_threads, nice=cfg.maintenance_manager_nice)
            if cfg.maintenance_worker_processes
            else None
        )
        if self.maintenance_pool is not None:
            self.memory.root.child("maintenance_workers", gauge=self.maintenance_pool.anon_bytes)
        self.block_cache = BlockCache(cfg.block_cache_capacity_mb * 1024 * 1024)
        _check_fixed_memory(self.memory, self.block_cache.capacity_bytes)
        self.memory.root.child("block_cache", gauge=self.block_cache.usage_bytes)
        for name, key, text, unit in (
            ("block_cache_usage", "usage_bytes", "Bytes of rowset files held in memory", "bytes"),
            ("block_cache_capacity", "capacity_bytes", "Block cache capacity (block_cache_capacity_mb)", "bytes"),
            ("block_cache_inserts", "inserts", "Rowset files admitted to the block cache (monotonic)", "blocks"),
            ("block_cache_hits", "hits", "Opens of a file the block cache already held (monotonic)", "blocks"),
            (
                "block_cache_evictions",
                "evictions",
                "Least recently used files evicted to make room (monotonic)",
                "blocks",
            ),
            (
                "block_cache_refused",
                "refused",
                "Files memory-mapped instead: no room in the block cache (monotonic)",
                "blocks",
            ),
        ):
            self.server_metrics.gauge(name, text, unit, read=functools.partial(_cache_stat, self.block_cache, key))
        options = TabletOptions(
            flush_threshold_bytes=flush_bytes,
            flush_threshold_secs=float(cfg.flush_threshold_secs),
            target_rowset_bytes=cfg.budgeted_compaction_target_rowset_size_mb * 1024 * 1024,
            compaction_budget_bytes=cfg.tablet_compaction_budget_mb * 1024 * 1024,
            compaction_small_rowset_tradeoff=cfg.compaction_small_rowset_tradeoff,
            history_max_age_sec=float(cfg.tablet_history_max_age_sec),
            sync=cfg.log_force_fsync_all,
            block_cache=self.block_cache,
            rowset_writer=self.maintenance_pool,
        )
        limits = WriteLimits(
            max_pending_writes=cfg.tablet_max_pending_writes,
            memory_limit_bytes=cfg.tablet_memory_limit_mb * 1024 * 1024,
        )
        self.read_executor = ThreadPoolExecutor(cfg.point_read_threads, thread_name_prefix="read")
        node = NodeParts(
            raft=self.raft,
            rpc_client=self.rpc_client,
            executor=self.io_executor,
            read_executor=self.read_executor,
            metrics=self.metrics,
            maintenance=self.maintenance,
            clock=self.clock,
            memory=self.memory,
        )
        self.tablets = TabletManager(self.uuid, self.fs.root, node, options, limits, lambda: self.rpc_address)
        # Runtime flags: every tablet shares ``options``, which the maintenance manager reads on each pass.
        cfg.on_change("flush_threshold_mb", lambda mb: setattr(options, "flush_threshold_bytes", mb * 1024 * 1024))
        cfg.on_change("flush_threshold_secs", functools.partial(_set_flush_age, options, self.maintenance))
        self.scanners = ScannerManager(self.io_executor, ttl_s=cfg.scanner_ttl_ms / 1000.0)
        cfg.on_change("scanner_ttl_ms", lambda ms: setattr(self.scanners, "ttl_s", ms / 1000.0))
        self.memory.root.child("scanners", gauge=self.scanners.buffered_bytes)
        # A quiescing leader's successor must have answered within two Raft heartbeats: it is up.
        self.service = TabletService(
            self.tablets, self.scanners, self.clock.update, successor_silence_ms=2 * cfg.raft_heartbeat_interval_ms
        )
        if self.config.tserver_enforce_access_control:
            self.service.token_verifier = self.token_verifier
        self.service.register_rpc(self.rpc_server)
        self.tablets.copy_source.register_rpc(self.rpc_server)
        self._poll_task: asyncio.Task[None] | None = None
        self.heartbeater = Heartbeater(
            self.rpc_client,
            parse_master_addresses(cfg.master_addresses),
            ts_info=self._ts_info,
            reports=self.tablets.reports,
            on_delete=self._master_says_delete,
            options=HeartbeatOptions(interval_s=cfg.heartbeat_interval_ms / 1000.0),
            tablet_counts=self._tablet_counts,
            on_write_limits=self._set_write_limits,
            csr=lambda: self.certificate_request(time.time()),
            on_certificate=self.accept_certificate,
            quiescing=lambda: self.service.quiescer.quiescing,
        )
        self.heartbeater.token_verifier = self.token_verifier
        self.tablets.on_change = self.heartbeater.mark_dirty

    async def on_start(self) -> None:
        if self.config.enable_test_kv:
            kv = ReplicatedKVService(self.raft)
            kv.register_rpc(self.rpc_server)
        await self.tablets.copy_source.start()
        await self.scanners.start()
        if self.maintenance_pool is not None:
            # In a worker: starting a process waits for the fork server to answer with its pid, and the
            # fork server first imports its modules (seconds on a busy host). Not awaited: flushes write
            # in their own thread until the workers are up.
            started = asyncio.get_running_loop().run_in_executor(self.io_executor, self.maintenance_pool.start)
            started.add_done_callback(_log_pool_start)
        self.maintenance.start()
        self._poll_task = asyncio.get_running_loop().create_task(self._poll_changes(), name="tablet-state-poll")
        await self.heartbeater.start()
        # pyarrow imports pandas on its first pa.array() (~0.4 s of CPU): pay it now in a worker, not in
        # the first Write a client sends.
        self._warm = asyncio.get_running_loop().run_in_executor(self.io_executor, _warm_pyarrow)
        self._warm.add_done_callback(self._warmed)

    def _warmed(self, fut: asyncio.Future[None]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("pyarrow warm-up failed (the first write pays for it instead)", exc_info=fut.exception())
        self.remeasure_baseline()  # pandas, imported by the warm-up, stays loaded: ~25 MiB

    async def _poll_changes(self) -> None:
        """Every heartbeat interval (at most 1 s), note which tablets changed role/term/config/state for the
        next tablet report; every --update_tablet_stats_interval_ms refresh the leaders' statistics first."""
        period = min(1.0, self.config.heartbeat_interval_ms / 1000.0)
        stats_every = self.config.update_tablet_stats_interval_ms / 1000.0
        loop = asyncio.get_running_loop()
        stats_due = loop.time()
        while True:
            await asyncio.sleep(min(period, stats_every))
            try:
                if loop.time() >= stats_due:
                    stats_due = loop.time() + stats_every
                    await self.tablets.refresh_stats()
                self.tablets.poll_changes()
            except Exception:
                log.exception("tablet state poll failed; continuing")

    async def before_graceful_stop(self) -> None:
        """Quiesce (leaderships away, no new scans) for at most --graceful-shutdown-timeout-ms."""
        timeout_s = self.config.graceful_shutdown_timeout_ms / 1000.0
        if timeout_s <= 0:
            return
        started = time.monotonic()
        leaders, scanners = await self.service.quiescer.drain(timeout_s)
        log.info(
            "quiesced before stopping",
            extra={
                "seconds": round(time.monotonic() - started, 3),
                "leaders_left": leaders,
                "scanners_left": scanners,
                "leader_transfers": self.service.quiescer.transfers_started,
            },
        )

    async def on_stop(self) -> None:
        await self.service.quiescer.close()
        await self.heartbeater.stop()
        if self._poll_task is not None:
            self._poll_task.cancel()
            await asyncio.gather(self._poll_task, return_exceptions=True)
        await self.scanners.stop()
        await self.tablets.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.maintenance.stop)
        if self.maintenance_pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.maintenance_pool.shutdown)
        await asyncio.get_running_loop().run_in_executor(None, self.read_executor.shutdown)

    def _set_write_limits(self, table_ids: frozenset[str]) -> None:
        self.service.write_limited_tables = table_ids

    def _tablet_counts(self) -> tuple[int, int]:
        """(live tablets, leaders) for heartbeats."""
        live = leaders = 0
        for r in self.tablets.replicas.values():
            live += 1
            rr = r.raft
            if rr is not None and rr.raft is not None and rr.raft.is_leader:
                leaders += 1
        return live, leaders

    def _ts_info(self) -> dict[str, Any]:
        """Our registration; read at every heartbeat, so the HTTP port bound after start is picked up."""
        return {
            "uuid": self.uuid,
            "rpc_address": self.rpc_address,
            "http_address": self.http_address,
            "version": __version__,
            "start_time": self.started_at,
        }

    async def _master_says_delete(self, item: dict[str, Any]) -> None:
        tablet_id = item.get("tablet_id")
        if not isinstance(tablet_id, str):
            raise KuduInvalidArgument(f"master asked to delete a malformed tablet entry: {item!r}")
        try:
            self.scanners.close_tablet(tablet_id)
            await self.tablets.delete_tablet(tablet_id, str(item.get("delete_type", "DELETED")))
        except KuduBadStatus as e:
            log.warning("delete asked by the master failed", extra={"tablet": tablet_id, "error": str(e)})

    def role_status(self) -> dict[str, Any]:
        states: dict[str, int] = {}
        for rep in self.tablets.reports(None):
            states[rep["state"]] = states.get(rep["state"], 0) + 1
        _, leaders = self._tablet_counts()
        return {
            "num_tablets": sum(states.values()),
            "tablet_states": states,
            "num_leaders": leaders,
            "heartbeat": self.heartbeater.status(),
        }

    def add_admin_routes(self, app: web.Application) -> None:
        web_pages.add_routes(app, self)
        app.router.add_get("/api/v1/tablets", _tablets)
        app.router.add_get("/api/v1/tablets/{tablet_id}", _tablet)
        app.router.add_get("/api/v1/maintenance", _maintenance)
        app.router.add_get("/api/v1/scans", _scans)


def _ts(request: web.Request) -> TabletServer:
    return node_as(request, TabletServer)


async def _tablets(request: web.Request) -> web.Response:
    return json_response({"tablets": _ts(request).tablets.list_tablets()})


async def _tablet(request: web.Request) -> web.Response:
    ts = _ts(request)
    replica = ts.tablets.get(request.match_info["tablet_id"])
    return json_response(replica.status())


def _log_pool_start(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("maintenance worker processes did not start (flushes retry them): %r", fut.exception())


async def _maintenance(request: web.Request) -> web.Response:
    ts = _ts(request)
    return json_response(
        {
            **ts.maintenance.status(),
            "tablet_copies": ts.tablets.copy_history,
            "copy_sessions": ts.tablets.copy_source.status(),
        }
    )


async def _scans(request: web.Request) -> web.Response:
    ts = _ts(request)
    return json_response(
        {"scanners": ts.scanners.status(), "recent": ts.scanners.recent_scans(), "expired": ts.scanners.expired}
    )


def _set_flush_age(options: TabletOptions, maintenance: MaintenanceManager, secs: int) -> None:
    options.flush_threshold_secs = float(secs)
    maintenance.flush_age_s = float(secs)


def _check_fixed_memory(memory: NodeMemory, block_cache_bytes: int) -> None:
    """Refuse to start when what the node holds from the start (its baseline and a full block cache)
    leaves no room below the pressure watermark: it would flush without end and refuse every write."""
    baseline = memory.refresh()
    if baseline + block_cache_bytes >= memory.pressure_threshold:
        raise KuduConfigurationError(
            f"the process's baseline ({format_bytes(baseline)}) plus --block-cache-capacity-mb "
            f"({format_bytes(block_cache_bytes)}) reach the memory pressure watermark "
            f"({format_bytes(memory.pressure_threshold)}: --memory-pressure-percentage of --memory-limit-mb "
            f"{format_bytes(memory.limit)}, or --memory-pressure-threshold-mb): raise --memory-limit-mb or lower "
            "--block-cache-capacity-mb"
        )


def _cache_stat(cache: BlockCache, key: str) -> int:
    return int(cache.status()[key])


def _warm_pyarrow() -> None:
    pa.array([0])
