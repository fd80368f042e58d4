"""The tablet server role. Tablet hosting and tablet copy arrive with the tserver issue."""

from __future__ import annotations

import logging
from typing import Any

from kudu_async.server.config import parse_master_addresses
from kudu_async.server.node import Node
from kudu_async.tserver.heartbeater import Heartbeater
from kudu_async.tserver.test_kv import TestKVService
from kudu_async.version import __version__

log = logging.getLogger(__name__)


class TabletServer(Node):
    role = "tserver"
    heartbeater: Heartbeater | None = None

    async def on_start(self) -> None:
        if self.config.enable_test_kv:
            kv = TestKVService(self.raft)
            kv.register_rpc(self.rpc_server)
        await self._start_heartbeater()

    async def on_stop(self) -> None:
        if self.heartbeater is not None:
            await self.heartbeater.stop()

    def role_status(self) -> dict[str, Any]:
        return {"heartbeat": self.heartbeater.status() if self.heartbeater is not None else []}

    # --- heartbeats to the masters --------------------------------------------------------------------
    # Minimal wiring: the tablet manager (written separately) replaces ``reports`` and the callbacks.

    async def _start_heartbeater(self) -> None:
        self.heartbeater = Heartbeater(
            self.rpc_client,
            parse_master_addresses(self.config.master_addresses),
            ts_info=self._ts_info,
            reports=lambda ids: [],  # no tablets hosted yet
            on_delete=self._log_tablet_request,
            on_create=self._log_tablet_request,
            interval_s=self.config.heartbeat_interval_ms / 1000.0,
        )
        await self.heartbeater.start()

    def _ts_info(self) -> dict[str, Any]:
        """Our registration; read at every heartbeat, so the HTTP port bound after start is picked up."""
        return {"uuid": self.uuid, "rpc_address": self.rpc_address, "http_address": self.http_address,
                "version": __version__, "start_time": self.started_at}

    async def _log_tablet_request(self, item: dict[str, Any]) -> None:
        log.warning("master asked for tablet work this tserver cannot do yet (no tablet manager)",
                    extra={"request": repr(item)[:500]})
