"""What both roles share: identity, RPC server and client, admin HTTP, metrics, clean shutdown.

A role (master, tserver) subclasses ``Node`` and adds its services in ``on_start`` and its admin pages
in ``add_admin_routes``. The shell owns the order of start and stop so that every role shuts down the
same way: stop accepting, let in-flight calls finish within the grace period, then release resources.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from aiohttp import web

from kudu_async.common.errors import KuduIllegalState, KuduNotAuthorized
from kudu_async.common.mem_tracker import NodeMemory
from kudu_async.common.metrics import MetricEntity, MetricRegistry
from kudu_async.consensus.raft import RaftOptions
from kudu_async.consensus.raft_manager import RaftManager
from kudu_async.consensus.replica import ReplicaOptions
from kudu_async.fs.fs_manager import FsManager
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.faults import FaultInjector
from kudu_async.rpc.messages import Method, serve
from kudu_async.rpc.server import CallContext, RpcServer
from kudu_async.security.acl import Acls
from kudu_async.security.audit import AuditLog, audit_line
from kudu_async.server import messages as msg
from kudu_async.server.admin import AdminAuth, build_admin_app, process_memory
from kudu_async.server.config import NodeConfig, format_hostport
from kudu_async.server.loop_lag import LoopLagProbe
from kudu_async.version import __version__

log = logging.getLogger(__name__)

# Freed memory is handed back to the OS once this much was freed since the last time (see
# ``release_freed_memory``), checked every RELEASE_CHECK_S.
RELEASE_AFTER_FREED_BYTES = 32 * 1024 * 1024
RELEASE_CHECK_S = 0.5


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_MALLOC_TRIM = _load_malloc_trim()


def release_freed_memory() -> None:
    """Give freed memory back to the OS: Arrow's pool (mimalloc) returns its unused pages and glibc's
    malloc trims its arenas. Without it a flushed MemRowSet's memory stays resident (measured in-process,
    3 x 1 M rows loaded and flushed: RssAnon 239 MiB kept, 106 MiB with this), so the process would grow
    past what is live. A few ms of work; ``malloc_trim`` runs without the GIL (ctypes)."""
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def audit_log_path(config: NodeConfig, data_root: Path) -> Path:
    """``--audit-log-file``, else ``audit.log`` beside ``--log-file``, else under the data directory's logs."""
    if config.audit_log_file:
        return Path(config.audit_log_file)
    if config.log_file:
        return Path(config.log_file).parent / "audit.log"
    return data_root / "logs" / "audit.log"


METRIC_ENTITY_ID = {"master": "kudu.master", "tserver": "kudu.tabletserver"}


class Node:
    """One cluster node process. Use ``await node.start()`` then ``await node.stop()``."""

    role = "node"
    # A tserver reopens its (possibly hundreds of) replicas after it starts serving; a master waits.
    open_replicas_in_background = False

    def __init__(self, config: NodeConfig, fs: FsManager) -> None:
        self.config = config
        self.fs = fs
        self.uuid = fs.uuid
        self.name = config.node_name or self.uuid
        self.started_at = time.time()
        self._started_mono = time.monotonic()
        self.metrics = MetricRegistry()
        self.server_metrics: MetricEntity = self.metrics.entity(
            "server", METRIC_ENTITY_ID.get(self.role, "kudu.server"), {"uuid": self.uuid, "role": self.role}
        )
        self.server_metrics.gauge(
            "uptime",
            "Seconds since the node started",
            "seconds",
            read=lambda: round(time.monotonic() - self._started_mono, 3),
        )
        self.server_metrics.gauge(
            "memory_rss", "Resident set size of the process", "bytes", read=lambda: process_memory()["current_bytes"]
        )
        self.loop_lag = LoopLagProbe(config.event_loop_lag_probe_interval_ms / 1000.0)
        self.loop_lag.register(self.server_metrics)
        self.memory = NodeMemory(
            config.memory_limit_mb * 1024 * 1024,
            soft_percentage=config.memory_limit_soft_percentage,
            pressure_threshold_bytes=config.memory_pressure_threshold_mb * 1024 * 1024,
        )
        # What the process holds before it serves anything (interpreter, libraries, module state): counted
        # so that the limit covers the process and not only its data.
        self.baseline_bytes = process_memory()["anonymous_bytes"]
        self.memory.root.child("baseline", gauge=lambda: self.baseline_bytes)
        self.server_metrics.gauge(
            "memory_anonymous",
            "Anonymous resident memory of the process (heap, not file pages)",
            "bytes",
            read=lambda: process_memory()["anonymous_bytes"],
        )
        self.server_metrics.gauge(
            "memory_consumption",
            "Memory the node's trackers count (the root of /mem-trackers)",
            "bytes",
            read=self.memory.refresh,
        )
        self.server_metrics.gauge(
            "memory_limit", "The node's memory limit (memory_limit_mb)", "bytes", read=lambda: self.memory.limit
        )
        self.faults = FaultInjector(enabled=config.enable_fault_injection)
        self.rpc_server = RpcServer(
            self.server_metrics,
            node_name=self.name,
            faults=self.faults,
            max_body_bytes=config.rpc_max_message_bytes,
            max_inflight_per_service=config.rpc_service_queue_length,
        )
        self.rpc_client = RpcClient(
            self.name,
            faults=self.faults,
            metrics=self.server_metrics,
            max_response_bytes=config.rpc_max_message_bytes,
        )
        self.acls = Acls.from_flags(
            user_acl=config.user_acl,
            superuser_acl=config.superuser_acl,
            service_acl=config.service_acl,
            authentication_required=config.values.get("rpc_authentication") == "required",
        )
        self.rpc_server.acls = self.acls
        self.rpc_server.on_denied = self._audit_denial
        # A server calls its peers as the service user.
        self.rpc_client.set_credentials(self.acls.service_user, None)
        self.audit_log = AuditLog(audit_log_path(config, fs.root), max_bytes=config.audit_log_max_size_mb * 1024 * 1024)
        self.admin_auth = AdminAuth.from_config(config, self.acls)
        self.io_executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="io")
        tick_ms = config.raft_tick_interval_ms
        heartbeat_ticks = max(1, round(config.raft_heartbeat_interval_ms / tick_ms))
        self.raft = RaftManager(
            self.uuid,
            fs.root / "consensus",
            self.rpc_client,
            self.io_executor,
            ReplicaOptions(
                raft=RaftOptions(
                    heartbeat_ticks=heartbeat_ticks,
                    missed_heartbeats=max(1, round(config.leader_failure_max_missed_heartbeat_periods)),
                    log_cache_bytes=config.log_cache_size_limit_mb * 1024 * 1024,
                ),
                fsync=config.log_force_fsync_all,
                segment_bytes=config.log_segment_size_mb * 1024 * 1024,
                compression=config.log_compression_codec,
                max_retained_segments=config.log_max_segments_to_retain,
                min_retained_segments=config.log_min_segments_to_retain,
                global_log_cache_bytes=config.global_log_cache_size_limit_mb * 1024 * 1024,
            ),
            tick_interval_s=tick_ms / 1000.0,
            max_parallel_opens=config.tablet_bootstrap_parallelism,
        )
        self.raft.register_rpc(self.rpc_server)
        self.memory.root.child("rpc", gauge=lambda: self.rpc_server.buffered_bytes() + self.rpc_client.buffered_bytes())
        self.rpc_address = config.rpc_bind
        self.http_address = config.http_bind
        self._http_runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._signal: signal.Signals | None = None  # the signal that ended run_until_signalled
        self._releaser: asyncio.Task[None] | None = None
        self._register_generic_service()

    # --- role hooks -----------------------------------------------------------------------------------

    async def on_start(self) -> None:
        """Start role services; called after RPC is bound and before HTTP is up."""

    async def on_started(self) -> None:
        """Called once RPC, replicas and HTTP are all up (e.g. to create a replica that needs peers)."""

    async def on_stop(self) -> None:
        """Stop role background work; in-flight RPCs are still allowed to finish."""

    def add_admin_routes(self, app: web.Application) -> None:
        """Add the role's admin pages."""

    def role_status(self) -> dict[str, Any]:
        """Role-specific fields of ``/api/v1/status`` and ``Generic/GetStatus``."""
        return {}

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop_lag.start()
        rpc_host, rpc_port = self.config.rpc_hostport
        await self.rpc_server.start(rpc_host, rpc_port)
        self.rpc_address = format_hostport(rpc_host, self.rpc_server.port)
        await self.on_start()
        self._releaser = asyncio.get_running_loop().create_task(self._release_freed(), name="memory-release")
        await self.raft.start(background=self.open_replicas_in_background)
        http_host, http_port = self.config.http_hostport
        self._http_runner = web.AppRunner(build_admin_app(self, self.admin_auth), access_log=None, handle_signals=False)
        await self._http_runner.setup()
        site = web.TCPSite(self._http_runner, http_host, http_port, reuse_address=True)
        await site.start()
        addresses = self._http_runner.addresses  # resolves port 0 to the bound port
        if addresses:
            self.http_address = format_hostport(http_host, addresses[0][1])
        log.info(
            "node started",
            extra={"rpc_address": self.rpc_address, "http_address": self.http_address, "version": __version__},
        )
        await self.on_started()

    async def stop(self) -> None:
        grace = self.config.shutdown_grace_ms / 1000.0
        log.info("node stopping", extra={"grace_s": grace})
        if self._releaser is not None:
            self._releaser.cancel()
            await asyncio.gather(self._releaser, return_exceptions=True)
        try:
            await self.on_stop()
        finally:
            await self.rpc_server.stop(grace)
            await self.raft.stop()
            if self._http_runner is not None:
                await self._http_runner.cleanup()
            await self.rpc_client.close()
            self.io_executor.shutdown(wait=True)
            await self.loop_lag.stop()
            await asyncio.to_thread(self.audit_log.close)
        log.info("node stopped")

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        await self.start()
        # What start-up made (modules, classes, the node's long-lived structures) leaves the cycle
        # collector's sight: each full collection walked all of it, a 28-54 ms stop of the loop every
        # ten seconds or so under load (point-read p99.9 32.7 -> 19.7 ms without them). Reference
        # counting still frees these objects; only cycles among them would stay.
        gc.collect()
        gc.freeze()
        await self._stopping.wait()
        if self._signal is signal.SIGTERM:
            await self.before_graceful_stop()
        await self.stop()

    async def before_graceful_stop(self) -> None:
        """What a role does on SIGTERM before it stops (a tserver hands its leaderships away); SIGINT
        stops at once."""

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received %s", sig.name)
        self._signal = sig
        self._stopping.set()

    def remeasure_baseline(self) -> None:
        """Count what start-up work loaded since the node was built (libraries imported on first use) in
        the baseline: the process's anonymous memory less what the other trackers count, if more."""
        others = self.memory.refresh() - self.baseline_bytes
        self.baseline_bytes = max(self.baseline_bytes, process_memory()["anonymous_bytes"] - others)

    async def _release_freed(self) -> None:
        """Hand freed memory back to the OS once a flush, a compaction or a scan has freed enough of it:
        the tracked total fell, or the process's untracked part grew (temporaries of background work)."""
        loop = asyncio.get_running_loop()
        high = self.memory.refresh()
        untracked_after = process_memory()["anonymous_bytes"] - high
        while True:
            await asyncio.sleep(RELEASE_CHECK_S)
            tracked = self.memory.refresh()
            high = max(high, tracked)
            untracked = process_memory()["anonymous_bytes"] - tracked
            if high - tracked < RELEASE_AFTER_FREED_BYTES and untracked - untracked_after < RELEASE_AFTER_FREED_BYTES:
                continue
            try:
                await loop.run_in_executor(self.io_executor, release_freed_memory)
            except Exception:
                log.exception("releasing freed memory to the OS failed; trying again later")
            high = tracked
            untracked_after = process_memory()["anonymous_bytes"] - tracked

    # --- shared services ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "uuid": self.uuid,
            "name": self.name,
            "rpc_address": self.rpc_address,
            "http_address": self.http_address,
            "version": __version__,
            "start_time_unix": self.started_at,
            "uptime_s": round(time.monotonic() - self._started_mono, 3),
            "is_leader": None,
            # Objects kept out of the cycle collector since start-up, and its runs per generation.
            "gc": {"frozen_objects": gc.get_freeze_count(), "collections": [g["collections"] for g in gc.get_stats()]},
            **self.role_status(),
        }

    def rpcz(self) -> dict[str, Any]:
        return {
            "inbound": self.rpc_server.inflight(),
            "outbound": self.rpc_client.inflight(),
            "services": self.rpc_server.services(),
            # Who may call each method (``requires``): what a fuzz pass or an operator checks.
            "requirements": self.rpc_server.requirements(),
        }

    def audit(self, line: dict[str, Any]) -> None:
        """Append one authorization decision to the audit log (off the loop)."""
        self.audit_log.record(line)

    def _audit_denial(self, ctx: CallContext, err: KuduNotAuthorized) -> None:
        obj = err.details.get("table") or err.details.get("object") or ctx.full_method
        self.audit_log.record(
            audit_line(
                identity=ctx.identity,
                client=ctx.remote,
                method=ctx.full_method,
                obj=str(obj),
                allowed=False,
                reason=err.message,
            )
        )

    def mem_trackers(self) -> list[dict[str, Any]]:
        return self.memory.root.rows()

    def mem_trackers_nested(self) -> dict[str, Any]:
        return self.memory.root.nested()

    def _register_generic_service(self) -> None:
        serve(
            self.rpc_server,
            "Generic",
            {
                "Ping": Method(msg.PingRequest, msg.PingResponse, self._rpc_ping, requires="any"),
                "GetStatus": Method(msg.GetStatusRequest, dict, self._rpc_get_status, requires="user"),
                "SetFaults": Method(
                    msg.SetFaultsRequest, msg.SetFaultsResponse, self._rpc_set_faults, requires="superuser"
                ),
            },
        )

    async def _rpc_ping(self, request: msg.PingRequest, ctx: CallContext) -> msg.PingResponse:
        return msg.PingResponse()

    async def _rpc_get_status(self, request: msg.GetStatusRequest, ctx: CallContext) -> dict[str, Any]:
        return self.status()

    async def _rpc_set_faults(self, request: msg.SetFaultsRequest, ctx: CallContext) -> msg.SetFaultsResponse:
        if not self.config.enable_fault_injection:
            raise KuduIllegalState("fault injection is off on this node (start it with --enable-fault-injection)")
        self.faults.set_rules(request.rules)
        log.warning("fault injection rules set", extra={"rules": repr(self.faults.rules())})
        return msg.SetFaultsResponse(rules=self.faults.rules())
