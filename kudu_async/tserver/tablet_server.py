"""The tablet server role. Tablet hosting, heartbeats and tablet copy arrive with the tserver issue."""

from __future__ import annotations

from kudu_async.server.node import Node
from kudu_async.tserver.test_kv import TestKVService


class TabletServer(Node):
    role = "tserver"

    async def on_start(self) -> None:
        if self.config.enable_test_kv:
            kv = TestKVService(self.raft)
            kv.register_rpc(self.rpc_server)
