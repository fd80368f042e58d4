"""RPC: msgpack (or JSON) calls over HTTP/2 cleartext on the sans-IO ``jh2`` package (h2's API); imports only common.

``RpcServer`` serves ``POST /<Service>/<Method>``; ``RpcClient`` is the pooled caller; both are asyncio
shells around the sans-IO connection objects of ``connection.py``, which hold the rules. ``FaultInjector``
drops or delays calls between named nodes in tests. Errors are the typed exceptions of
``kudu_async.common.errors`` on both ends. Imports only ``kudu_async.common``.
"""

from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.codec import JSON, MSGPACK, parse_addr
from kudu_async.rpc.faults import FaultDecision, FaultInjector, FaultRule
from kudu_async.rpc.server import CallContext, Handler, RpcServer

__all__ = [
    "JSON",
    "MSGPACK",
    "CallContext",
    "FaultDecision",
    "FaultInjector",
    "FaultRule",
    "Handler",
    "RpcClient",
    "RpcServer",
    "parse_addr",
]
