"""The async client API: ``await kudu_async.aio.connect(...)`` gives an ``AsyncClient`` (same calls as the
blocking ``Client``, as coroutines)."""

from kudu_async.client.aio import AsyncClient, connect
from kudu_async.client.core import ClientCore
from kudu_async.client.scanner import AsyncScanner, AsyncScanTokenBuilder
from kudu_async.client.session import AsyncSession
from kudu_async.client.table_alterer import AsyncTableAlterer

__all__ = [
    "AsyncClient",
    "AsyncScanTokenBuilder",
    "AsyncScanner",
    "AsyncSession",
    "AsyncTableAlterer",
    "ClientCore",
    "connect",
]
