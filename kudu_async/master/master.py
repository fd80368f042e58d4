"""The master role. The catalog, tserver registry and DDL arrive with the master issue."""

from __future__ import annotations

from kudu_async.server.node import Node


class Master(Node):
    role = "master"
