"""The async client: DDL through the leader master, tables, sessions, scanners (the real implementation;
``kudu_async.client.sync`` wraps it for kudu-python's blocking API).

DDL requests carry a request id (client id + sequence), so a retry after a lost reply or a master
failover is answered with the first attempt's result instead of being applied twice. Write RPCs carry one
too (``WriteRequestIds``): the client id, a seq_no from a counter of their own that every retry of the
RPC reuses, and the smallest seq_no still in flight, which lets tablet servers forget older results.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
import weakref
from collections.abc import Sequence
from typing import Any

from kudu_async.client.meta_cache import MasterClient, MetaCache, TabletLocation, parse_master_addresses
from kudu_async.client.retry import WriteRequestIds
from kudu_async.client.scanner import AsyncScanner, AsyncScanTokenBuilder, ScanToken
from kudu_async.client.schema_builder import Partitioning
from kudu_async.client.session import FLUSH_MANUAL, AsyncSession
from kudu_async.client.table import Table
from kudu_async.client.table_alterer import AsyncTableAlterer
from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument, KuduNotFound, KuduNotTheLeader, KuduTimedOut
from kudu_async.common.retry import RETRYABLE, Backoff, BackoffPolicy, Deadline, leader_hint
from kudu_async.common.schema import Schema
from kudu_async.rpc.client import RpcClient

DEFAULT_PORT = 7051
DEFAULT_ADMIN_TIMEOUT_MS = 30_000
DEFAULT_RPC_TIMEOUT_MS = 10_000
DDL_WAIT_S = 1.0  # how long the master may hold one IsCreateTableDone / IsAlterTableDone call
DDL_WAIT_MARGIN_S = 0.2  # of the call's timeout, left for the answer to arrive
DDL_POLL_BACKOFF = BackoffPolicy(initial_s=0.02, max_s=0.2, multiplier=1.5, jitter=0.0)  # between early answers


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
    """A connection to one cluster; safe to share between tasks of one event loop."""

    def __init__(
        self, masters: Sequence[str], admin_timeout_ms: int | None = None, rpc_timeout_ms: int | None = None
    ) -> None:
        self.admin_timeout_ms = admin_timeout_ms or DEFAULT_ADMIN_TIMEOUT_MS
        self.rpc_timeout_ms = rpc_timeout_ms or DEFAULT_RPC_TIMEOUT_MS
        self.client_id = uuid.uuid4().hex
        self._seq = itertools.count(1)
        self.write_ids = WriteRequestIds(self.client_id)
        self.rpc = RpcClient(f"client-{self.client_id[:8]}")
        self.masters = MasterClient(self.rpc, masters, self.rpc_timeout_ms / 1000.0)
        self.meta = MetaCache(self.masters)
        self._latest_ts = 0
        self._closed = False
        self._sessions: weakref.WeakSet[AsyncSession] = weakref.WeakSet()  # their flushers stop on close()

    @property
    def master_addrs(self) -> list[str]:
        return list(self.masters.addresses)

    def _admin_deadline(self, what: str) -> Deadline:
        return Deadline(self.admin_timeout_ms / 1000.0, what)

    def _request_id(self) -> str:
        return f"{self.client_id}:{next(self._seq)}"

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            timers = [t for t in (s.abandon() for s in list(self._sessions)) if t is not None]
            await asyncio.gather(*timers, return_exceptions=True)
            await self.rpc.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- timestamps (client-propagated consistency) --------------------------------------------------

    def latest_observed_timestamp(self) -> int:
        return self._latest_ts

    def observe_timestamp(self, ts: int) -> None:
        if ts > self._latest_ts:
            self._latest_ts = ts

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
            "request_id": self._request_id(),
        }
        if n_replicas is not None:
            req["num_replicas"] = n_replicas
        if owner is not None:
            req["owner"] = owner
        if comment is not None:
            req["comment"] = comment
        deadline = self._admin_deadline(f"CreateTable {table_name}")
        reply = await self.masters.call("CreateTable", req, deadline)
        if wait:
            await self._wait_done("IsCreateTableDone", {"table_id": reply["table_id"]}, deadline)
        return await self.table(table_name)

    async def _wait_done(self, method: str, req: dict[str, Any], deadline: Deadline) -> None:
        """Wait until the DDL is done. The master holds each call up to ``wait_ms`` and answers as soon as
        its background pass finishes the DDL; a call answered early but not done (a master that just
        became leader, or no time left to wait) is repeated after a pause growing from 20 ms to 200 ms."""
        loop = asyncio.get_running_loop()
        pause = Backoff(DDL_POLL_BACKOFF)
        while True:
            budget = deadline.rpc_timeout(self.masters.rpc_timeout_s) - DDL_WAIT_MARGIN_S
            wait_ms = int(max(0.0, min(DDL_WAIT_S, budget)) * 1000)
            t0 = loop.time()
            r = await self.masters.call(method, {**req, "wait_ms": wait_ms}, deadline)
            if r.get("done"):
                return
            deadline.left(KuduTimedOut(f"table still {r.get('state')}"))
            if not wait_ms or loop.time() - t0 < wait_ms / 2000:
                await asyncio.sleep(min(pause.next_delay(), max(0.0, deadline.remaining())))

    async def delete_table(self, table_name: str) -> None:
        await self.masters.call(
            "DeleteTable",
            {"name": table_name, "request_id": self._request_id()},
            self._admin_deadline(f"DeleteTable {table_name}"),
        )

    async def table_exists(self, table_name: str) -> bool:
        try:
            await self.masters.call(
                "GetTableSchema", {"name": table_name}, self._admin_deadline(f"GetTableSchema {table_name}")
            )
            return True
        except KuduNotFound:
            return False

    async def list_tables(self, match_substring: str | None = None) -> list[str]:
        req = {"name_filter": match_substring} if match_substring else {}
        r = await self.masters.call("ListTables", req, self._admin_deadline("ListTables"))
        return [t["name"] for t in r.get("tables", [])]

    async def table(self, table_name: str, owner: Any = None) -> Table:
        info = await self.masters.call(
            "GetTableSchema", {"name": table_name}, self._admin_deadline(f"GetTableSchema {table_name}")
        )
        return Table(self, owner if owner is not None else self, info)

    async def reload_table(self, table: Table, deadline: Deadline) -> None:
        """Refresh a table's schema (after MISMATCHED_SCHEMA) and its locations."""
        info = await self.masters.call("GetTableSchema", {"table_id": table.id}, deadline)
        table._load(info)
        self.meta.invalidate(table.id)

    def new_table_alterer(self, table: Table) -> AsyncTableAlterer:
        return AsyncTableAlterer(self, table)

    async def alter_table(self, table: Table, req: dict[str, Any], wait: bool = True) -> Table:
        deadline = self._admin_deadline(f"AlterTable {table.name}")
        reply = await self.masters.call(
            "AlterTable", {"table_id": table.id, **req, "request_id": self._request_id()}, deadline
        )
        if wait:
            await self._wait_done("IsAlterTableDone", {"table_id": reply["table_id"]}, deadline)
        info = await self.masters.call("GetTableSchema", {"table_id": table.id}, deadline)
        self.meta.invalidate(table.id)
        return Table(self, table._owner, info)

    async def list_tablet_servers(self) -> list[dict[str, Any]]:
        r = await self.masters.call("ListTabletServers", {}, self._admin_deadline("ListTabletServers"))
        return list(r.get("servers", []))

    async def list_masters(self) -> list[dict[str, Any]]:
        r = await self.masters.call("ListMasters", {}, self._admin_deadline("ListMasters"))
        return list(r.get("masters", []))

    # --- sessions and scans --------------------------------------------------------------------------

    def new_session(self, flush_mode: str = FLUSH_MANUAL, timeout_ms: int = 5000, **kw: Any) -> AsyncSession:
        s = AsyncSession(self, flush_mode, timeout_ms, **kw)
        self._sessions.add(s)
        return s

    def _new_scanner(self, table: Table) -> AsyncScanner:
        return AsyncScanner(self, table)

    def _new_token_builder(self, table: Table) -> AsyncScanTokenBuilder:
        return AsyncScanTokenBuilder(self, table)

    async def deserialize_token_into_scanner(self, data: bytes, owner: Any = None) -> AsyncScanner:
        return self.scanner_from_token(data, owner)

    def scanner_from_token(self, data: bytes, owner: Any = None) -> AsyncScanner:
        """The scanner a serialized token describes: parsing only (a token carries its table's metadata and
        its tablet's replicas), so a blocking caller builds it in its own thread."""
        d = ScanToken.parse(data)
        table = Table(self, owner if owner is not None else self, d["table"])
        tablet = TabletLocation.from_wire(d["tablet"])
        sc = AsyncScanner(self, table, [tablet])
        sc.load_config(d["scan"])
        return sc

    # --- tablet RPCs with leader discovery -----------------------------------------------------------

    async def call_tablet_leader(
        self, table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        """``TabletServer/method`` on the tablet's leader: follows NOT_THE_LEADER hints, tries the other
        replicas, refreshes locations when none answers, backs off between rounds, all within ``deadline``.
        Raises NOT_FOUND (details TABLET_NOT_FOUND) when the tablet is no longer part of the table."""
        last: BaseException | None = None
        refresh = False
        while True:
            deadline.left(last)
            locs = await self.meta.locations(table.id, deadline, refresh=refresh)
            refresh = False
            t = locs.by_id(tablet_id)
            if t is None:
                raise KuduNotFound(
                    f"tablet {tablet_id} is no longer part of table {table.name}", {"error": "TABLET_NOT_FOUND"}
                )
            addr = t.next_leader_guess()
            if addr is None:
                t.failed.clear()
                refresh = True
                await deadline.backoff(last)
                continue
            try:
                reply: dict[str, Any] = await self.rpc.call(
                    addr, "TabletServer", method, req, timeout_s=deadline.rpc_timeout(self.rpc_timeout_ms / 1000)
                )
                t.leader_address = addr
                t.failed.discard(addr)
                return reply
            except KuduNotTheLeader as e:
                last = e
                t.failed.add(addr)
                hint = leader_hint(e, t.addresses(), addr)
                if hint is not None:
                    t.leader_address = hint
                    t.failed.discard(hint)
                    continue  # straight to the named leader
                if t.leader_address == addr:
                    t.leader_address = None
            except KuduNotFound as e:
                if e.details.get("error") != "TABLET_NOT_FOUND":
                    raise
                last = e
                t.failed.add(addr)
                if t.leader_address == addr:
                    t.leader_address = None
            except RETRYABLE as e:
                last = e
                t.failed.add(addr)
                if t.leader_address == addr:
                    t.leader_address = None
            if not [a for a in t.addresses() if a not in t.failed]:
                t.failed.clear()
                refresh = True
            await deadline.backoff(last)


async def connect(
    host: str | Sequence[str] = "127.0.0.1",
    port: int | Sequence[int] | None = DEFAULT_PORT,
    admin_timeout_ms: int | None = None,
    rpc_timeout_ms: int | None = None,
    **_security: Any,
) -> AsyncClient:
    """Connect (and check that a leader master answers) - kudu-python's ``connect`` arguments."""
    client = AsyncClient(master_addresses(host, port), admin_timeout_ms, rpc_timeout_ms)
    try:
        await client.masters.find_leader(client._admin_deadline("connecting to the leader master"))
    except KuduBadStatus:
        await client.close()
        raise
    return client
