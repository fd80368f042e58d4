"""The tablet server role. Tablet hosting, heartbeats and tablet copy arrive with the tserver issue."""

from __future__ import annotations

from kudu_async.server.node import Node


class TabletServer(Node):
    role = "tserver"
