"""The master role: tserver registry and heartbeats for now; the catalog and DDL arrive with the master issue.

Every tserver heartbeats every master (``Master/TSHeartbeat``). Each master keeps its own in-memory
``TSManager``: registrations and liveness on all masters, tablet reports processed by the catalog leader
only (as in Kudu, where followers answer ``leader: false`` and a new leader asks for full reports).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web

from kudu_async.fs.fs_manager import FsManager
from kudu_async.master.ts_manager import TSManager, parse_heartbeat_request
from kudu_async.rpc.server import CallContext
from kudu_async.server.admin import NODE_KEY
from kudu_async.server.config import NodeConfig
from kudu_async.server.node import Node

log = logging.getLogger(__name__)


class Master(Node):
    role = "master"

    def __init__(self, config: NodeConfig, fs: FsManager) -> None:
        super().__init__(config, fs)
        self.ts_manager = TSManager(config.tserver_unresponsive_timeout_ms / 1000.0)
        # Registered before the RPC port opens, so a tserver's first heartbeat never finds no method.
        self.rpc_server.register("Master", "TSHeartbeat", self._rpc_ts_heartbeat)
        self.rpc_server.register("Master", "ListTabletServers", self._rpc_list_tablet_servers)

    def is_catalog_leader(self) -> bool:
        """Whether this master leads the sys catalog (and so processes tablet reports).

        Placeholder until the sys-catalog issue: there is no replicated catalog yet, so every master
        acts as leader. That issue replaces this with the catalog tablet's Raft role and calls
        ``ts_manager.request_full_reports()`` on becoming leader.
        """
        return True

    # --- RPC ------------------------------------------------------------------------------------------

    async def _rpc_ts_heartbeat(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = parse_heartbeat_request(request)  # every field checked before any state changes
        now = time.monotonic()
        leader = self.is_catalog_leader()
        tsm = self.ts_manager
        resp: dict[str, Any] = {
            "leader": leader,
            "master_uuid": self.uuid,
            "needs_reregister": False,
            "needs_full_report": False,
            "tablets_to_delete": [],
            # CreateTablet request bodies: filled by the catalog manager (master issue).
            "tablets_to_create": [],
        }
        if req.register:
            tsm.register(req.ts, now, wall_time=time.time())
        else:
            known = tsm.registration(req.uuid)
            if known is None or known != req.ts:
                # Unknown (this master restarted) or restarted/moved without registering: ask for a
                # registration and ignore the rest, so nothing is attributed to a stale identity.
                resp["needs_reregister"] = True
                return resp
        tsm.heartbeat(req.uuid, now, req.num_live_tablets, req.leader_count)
        if leader:
            if req.report is not None:
                tsm.process_report(req.uuid, req.report, now)
            resp["needs_full_report"] = tsm.needs_full_report(req.uuid)
        return resp

    async def _rpc_list_tablet_servers(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        return {"servers": self.ts_manager.descriptors(time.monotonic())}

    # --- admin and status -----------------------------------------------------------------------------

    def add_admin_routes(self, app: web.Application) -> None:
        app.router.add_get("/api/v1/tservers", _tservers_page)

    def role_status(self) -> dict[str, Any]:
        ds = self.ts_manager.descriptors(time.monotonic())
        live = sum(1 for d in ds if d["live"])
        return {"num_live_tservers": live, "num_dead_tservers": len(ds) - live}


async def _tservers_page(request: web.Request) -> web.Response:
    """``GET /api/v1/tservers``: every registered tserver (live and dead), sorted by uuid."""
    master: Master = request.app[NODE_KEY]  # type: ignore[assignment]
    return web.json_response(master.ts_manager.descriptors(time.monotonic()))
