"""Test and demo support: real multi-process clusters on 127.0.0.1; imports common and rpc (nodes run as processes)."""

from kudu_async.testing.mini_cluster import MiniCluster, MiniClusterError, NodePlacement, NodeProcess, free_port

__all__ = ["MiniCluster", "MiniClusterError", "NodePlacement", "NodeProcess", "free_port"]
