"""The async client: DDL through the leader master, tables, sessions, scanners (the real implementation;
``kudu_async.client.sync`` wraps it for kudu-python's blocking API).

An ``AsyncClient`` owns a ``ClientCore`` (the services its parts share) and composes the parts: sessions,
scanners, scan token builders and table alterers hold the core, never the client.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any, Self

from kudu_async.client.core import DEFAULT_ADMIN_TIMEOUT_MS, DEFAULT_RPC_TIMEOUT_MS, ClientCore
from kudu_async.client.meta_cache import MasterClient, MetaCache, TabletLocation, parse_master_addresses
from kudu_async.client.options import ENCRYPTION_OPTIONAL, check_security, client_tls
from kudu_async.client.retry import WriteRequestIds
from kudu_async.client.scanner import AsyncScanner, AsyncScanTokenBuilder, ScanToken
from kudu_async.client.schema_builder import Partitioning
from kudu_async.client.session import FLUSH_MANUAL, AsyncSession
from kudu_async.client.table import Table, TableStatistics
from kudu_async.client.table_alterer import AsyncTableAlterer
from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument, KuduNotFound
from kudu_async.common.retry import Deadline
from kudu_async.common.schema import Schema
from kudu_async.rpc.client import RpcClient

DEFAULT_PORT = 7051
__all__ = ["DEFAULT_ADMIN_TIMEOUT_MS", "DEFAULT_PORT", "DEFAULT_RPC_TIMEOUT_MS", "AsyncClient", "connect"]


def master_addresses(host: str | Sequence[str], port: int | Sequence[int] | None = DEFAULT_PORT) -> list[str]:
    """kudu-python's forms: ``host, port``; ``[hosts], [ports]``; also ``"h:p"``, ``"h1:p1,h2:p2"``, ``["h:p"]``."""
    hosts: list[str]
    if isinstance(host, str):
        hosts = [h.strip() for h in host.split(",") if h.strip()]
    elif isinstance(host, Sequence):
        if not all(isinstance(h, str) for h in host):
            raise KuduInvalidArgument(f"host must be a string or a list of strings, not {list(host)!r}")
        hosts = list(host)
    else:
        raise KuduInvalidArgument(f"host must be a string or a list of strings, not {type(host).__name__}")
    if not hosts:
        raise KuduInvalidArgument("no master host given")
    if port is None:
        ports: list[int] = [DEFAULT_PORT] * len(hosts)
    elif isinstance(port, int) and not isinstance(port, bool):
        ports = [port] * len(hosts)
    elif isinstance(port, Sequence) and not isinstance(port, str):
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in port):
            raise KuduInvalidArgument(f"port must be an int or a list of ints, not {list(port)!r}")
        ports = list(port)
        if len(ports) != len(hosts):
            raise KuduInvalidArgument(f"{len(hosts)} hosts but {len(ports)} ports")
    else:
        raise KuduInvalidArgument(f"port must be an int or a list of ints, not {port!r}")
    out = [h if ":" in h.rsplit("]", 1)[-1] else f"{h}:{p}" for h, p in zip(hosts, ports, strict=True)]
    return parse_master_addresses(out)


class AsyncClient:
    """A connection to one cluster; safe to share between tasks of one event loop.

    Built over a ``ClientCore`` (``AsyncClient(ClientCore(masters, ...))``), whose constructor takes the
    client's settings; ``connect`` builds both from kudu-python's arguments."""

    def __init__(self, core: ClientCore) -> None:
        self.core = core
        self._closed = False
        self._sessions: weakref.WeakSet[AsyncSession] = weakref.WeakSet()  # their flushers stop on close()

    # The core's services, as the tools and scripts built on the client read them.

    @property
    def admin_timeout_ms(self) -> int:
        return self.core.admin_timeout_ms

    @admin_timeout_ms.setter
    def admin_timeout_ms(self, ms: int) -> None:
        self.core.admin_timeout_ms = ms

    @property
    def rpc_timeout_ms(self) -> int:
        return self.core.rpc_timeout_ms

    @rpc_timeout_ms.setter
    def rpc_timeout_ms(self, ms: int) -> None:
        self.core.rpc_timeout_ms = ms

    @property
    def client_id(self) -> str:
        return self.core.client_id

    @property
    def rpc(self) -> RpcClient:
        return self.core.rpc

    @rpc.setter
    def rpc(self, rpc: RpcClient) -> None:
        self.core.rpc = rpc

    @property
    def masters(self) -> MasterClient:
        return self.core.masters

    @property
    def meta(self) -> MetaCache:
        return self.core.meta

    @property
    def write_ids(self) -> WriteRequestIds:
        return self.core.write_ids

    @property
    def master_addrs(self) -> list[str]:
        return list(self.core.masters.addresses)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            timers = [t for t in (s.abandon() for s in list(self._sessions)) if t is not None]
            await asyncio.gather(*timers, return_exceptions=True)
            await self.core.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- timestamps (client-propagated consistency) --------------------------------------------------

    def latest_observed_timestamp(self) -> int:
        return self.core.latest_observed_timestamp()

    def observe_timestamp(self, ts: int) -> None:
        self.core.observe_timestamp(ts)

    set_latest_observed_timestamp = observe_timestamp

    # --- DDL -----------------------------------------------------------------------------------------

    async def create_table(
        self,
        table_name: str,
        schema: Schema,
        partitioning: Partitioning | None = None,
        n_replicas: int | None = None,
        owner: str | None = None,
        comment: str | None = None,
        wait: bool = True,
    ) -> Table:
        if not isinstance(schema, Schema):
            raise KuduInvalidArgument("schema must be built with kudu.schema_builder()")
        part = partitioning if partitioning is not None else Partitioning()
        if not isinstance(part, Partitioning):
            raise KuduInvalidArgument("partitioning must be a kudu.Partitioning")
        req: dict[str, Any] = {
            "name": table_name,
            "schema": schema.to_dict(),
            **part.to_wire(schema),
            "request_id": self.core.request_id(),
        }
        if n_replicas is not None:
            req["num_replicas"] = n_replicas
        if owner is not None:
            req["owner"] = owner
        if comment is not None:
            req["comment"] = comment
        deadline = self.core.admin_deadline(f"CreateTable {table_name}")
        reply = await self.core.masters.call("CreateTable", req, deadline)
        if wait:
            await self.core.wait_done("IsCreateTableDone", {"table_id": reply["table_id"]}, deadline)
        return await self.table(table_name)

    async def delete_table(self, table_name: str) -> None:
        """Delete a table; the master's --default_deleted_table_reserve_seconds (0 by default) may keep it
        soft-deleted that long instead, as Kudu's DeleteTable does."""
        await self.core.masters.call(
            "DeleteTable",
            {"name": table_name, "request_id": self.core.request_id()},
            self.core.admin_deadline(f"DeleteTable {table_name}"),
        )

    async def soft_delete_table(self, table_name: str, reserve_seconds: int | None = None) -> None:
        """kudu-python's ``soft_delete_table``: keep the table recallable for ``reserve_seconds``
        (readable and writable meanwhile, then purged); None or 0 deletes it at once."""
        if reserve_seconds is not None and (
            isinstance(reserve_seconds, bool) or not isinstance(reserve_seconds, int) or reserve_seconds < 0
        ):
            raise KuduInvalidArgument(f"reserve_seconds must be a non-negative int, got {reserve_seconds!r}")
        await self.core.masters.call(
            "DeleteTable",
            {"name": table_name, "reserve_seconds": reserve_seconds or 0, "request_id": self.core.request_id()},
            self.core.admin_deadline(f"SoftDeleteTable {table_name}"),
        )

    async def recall_table(self, table_id: str, new_table_name: str | None = None) -> None:
        """kudu-python's ``recall_table``: bring back a soft-deleted table by its id, under
        ``new_table_name`` if given (None or "" keeps its name)."""
        req: dict[str, Any] = {"table_id": table_id, "request_id": self.core.request_id()}
        if new_table_name:
            req["new_table_name"] = new_table_name
        await self.core.masters.call("RecallDeletedTable", req, self.core.admin_deadline(f"RecallTable {table_id}"))

    async def list_soft_deleted_tables(self, match_substring: str | None = None) -> list[str]:
        req: dict[str, Any] = {"show_soft_deleted": True}
        if match_substring:
            req["name_filter"] = match_substring
        r = await self.core.masters.call("ListTables", req, self.core.admin_deadline("ListTables"))
        return [t["name"] for t in r.get("tables", [])]

    async def table_exists(self, table_name: str) -> bool:
        try:
            await self.core.masters.call(
                "GetTableSchema", {"name": table_name}, self.core.admin_deadline(f"GetTableSchema {table_name}")
            )
            return True
        except KuduNotFound:
            return False

    async def list_tables(self, match_substring: str | None = None) -> list[str]:
        req = {"name_filter": match_substring} if match_substring else {}
        r = await self.core.masters.call("ListTables", req, self.core.admin_deadline("ListTables"))
        return [t["name"] for t in r.get("tables", [])]

    async def table(self, table_name: str, owner: Any = None) -> Table:
        info = await self.core.masters.call(
            "GetTableSchema", {"name": table_name}, self.core.admin_deadline(f"GetTableSchema {table_name}")
        )
        return Table(owner if owner is not None else self, info)

    async def reload_table(self, table: Table, deadline: Deadline) -> None:
        """Refresh a table's schema (after MISMATCHED_SCHEMA) and its locations."""
        await self.core.reload_table(table, deadline)

    def new_table_alterer(self, table: Table) -> AsyncTableAlterer:
        return AsyncTableAlterer(self.core, table)

    async def alter_table(self, table: Table, req: dict[str, Any], wait: bool = True) -> Table:
        return await self.core.alter_table(table, req, wait)

    async def get_table_statistics(self, table_name: str) -> TableStatistics:
        """Kudu's GetTableStatistics: the master's sums of the tablet leaders' last reported live rows and
        bytes on disk (reports refresh every --update_tablet_stats_interval_ms; -1 until every tablet's
        leader reported), and the table's limits (-1: none)."""
        r = await self.core.masters.call(
            "GetTableStatistics", {"name": table_name}, self.core.admin_deadline(f"statistics of table {table_name}")
        )
        return TableStatistics(
            int(r["on_disk_size"]), int(r["live_row_count"]), int(r["disk_size_limit"]), int(r["row_count_limit"])
        )

    async def list_tablet_servers(self) -> list[dict[str, Any]]:
        r = await self.core.masters.call("ListTabletServers", {}, self.core.admin_deadline("ListTabletServers"))
        return list(r.get("servers", []))

    async def list_masters(self) -> list[dict[str, Any]]:
        r = await self.core.masters.call("ListMasters", {}, self.core.admin_deadline("ListMasters"))
        return list(r.get("masters", []))

    # --- sessions and scans --------------------------------------------------------------------------

    def new_session(self, flush_mode: str = FLUSH_MANUAL, timeout_ms: int = 5000, **kw: Any) -> AsyncSession:
        s = AsyncSession(self.core, flush_mode, timeout_ms, **kw)
        self._sessions.add(s)
        return s

    def new_scanner(self, table: Table) -> AsyncScanner:
        """A scanner of ``table`` (what ``table.scanner()`` gives for a table this client opened)."""
        return AsyncScanner(self.core, table)

    def new_scan_token_builder(self, table: Table) -> AsyncScanTokenBuilder:
        """A scan token builder for ``table`` (``table.scan_token_builder()``)."""
        return AsyncScanTokenBuilder(self.core, table)

    async def deserialize_token_into_scanner(self, data: bytes, owner: Any = None) -> AsyncScanner:
        return self.scanner_from_token(data, owner)

    def scanner_from_token(self, data: bytes, owner: Any = None) -> AsyncScanner:
        """The scanner a serialized token describes: parsing only (a token carries its table's metadata and
        its tablet's replicas), so a blocking caller builds it in its own thread."""
        d = ScanToken.parse(data)
        table = Table(owner if owner is not None else self, d["table"])
        tablet = TabletLocation.from_wire(d["tablet"])
        sc = AsyncScanner(self.core, table, [tablet])
        sc.load_config(d["scan"])
        return sc

    # --- tablet RPCs with leader discovery -----------------------------------------------------------

    async def call_tablet_leader(
        self, table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        """``TabletServer/method`` on the tablet's leader, with leader discovery and retries (``ClientCore``)."""
        return await self.core.call_tablet_leader(table, tablet_id, method, req, deadline)


async def connect(  # noqa: PLR0913 - kudu-python's arguments, and a client certificate
    host: str | Sequence[str] = "127.0.0.1",
    port: int | Sequence[int] | None = DEFAULT_PORT,
    admin_timeout_ms: int | None = None,
    rpc_timeout_ms: int | None = None,
    require_authentication: bool = False,
    encryption_policy: str = ENCRYPTION_OPTIONAL,
    jwt: str | None = None,
    trusted_certificates: Any = None,
    client_certificate: Any = None,
) -> AsyncClient:
    """Connect (and check that a leader master answers) - kudu-python's ``connect`` arguments. A security
    option the client cannot honour is refused (``check_security``), never ignored."""
    check_security(encryption_policy, require_authentication, None, jwt, trusted_certificates)
    client = AsyncClient(
        ClientCore(
            master_addresses(host, port),
            admin_timeout_ms,
            rpc_timeout_ms,
            client_tls(encryption_policy, trusted_certificates, client_certificate),
            jwt=jwt,
            require_authentication=require_authentication,
        )
    )
    try:
        await client.core.masters.find_leader(client.core.admin_deadline("connecting to the leader master"))
        await client.core.authenticate()
    except KuduBadStatus:
        await client.close()
        raise
    return client
