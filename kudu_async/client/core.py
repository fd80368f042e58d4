"""What the parts of one client share (Kudu's ``KuduClient::Data``): the RPC client, the leader-master client
and the location cache, timeouts, request ids, the latest timestamp observed, and the calls several parts
make (tablet-leader calls with retries, DDL waits, table reloads).

The parts (sessions, scanners, table alterers) hold this core, never the ``AsyncClient`` that composes them,
so imports run one way: ``aio`` -> parts -> ``core``.

DDL requests carry a request id (client id + sequence), so a retry after a lost reply or a master failover
is answered with the first attempt's result instead of being applied twice. Write RPCs carry one too
(``WriteRequestIds``): the client id, a seq_no from a counter of their own that every retry of the RPC
reuses, and the smallest seq_no still in flight, which lets tablet servers forget older results.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from typing import Any

from kudu_async.client.authn import AuthnRpcClient, ClientCredentials, authz_token_stale
from kudu_async.client.meta_cache import MasterClient, MetaCache
from kudu_async.client.options import client_tls
from kudu_async.client.retry import WriteRequestIds
from kudu_async.client.table import Table
from kudu_async.common.errors import KuduNotAuthorized, KuduNotFound, KuduNotTheLeader, KuduTimedOut
from kudu_async.common.retry import RETRYABLE, Backoff, BackoffPolicy, Deadline, leader_hint
from kudu_async.rpc.client import RpcClient
from kudu_async.security.tls import ClientTls

DEFAULT_ADMIN_TIMEOUT_MS = 30_000
DEFAULT_RPC_TIMEOUT_MS = 10_000
DDL_WAIT_S = 1.0  # how long the master may hold one IsCreateTableDone / IsAlterTableDone call
DDL_WAIT_MARGIN_S = 0.2  # of the call's timeout, left for the answer to arrive
DDL_POLL_BACKOFF = BackoffPolicy(initial_s=0.02, max_s=0.2, multiplier=1.5, jitter=0.0)  # between early answers


class ClientCore:
    """One client's shared services; used from its event loop only."""

    def __init__(
        self,
        masters: Sequence[str],
        admin_timeout_ms: int | None = None,
        rpc_timeout_ms: int | None = None,
        tls: ClientTls | None = None,
        *,
        jwt: str | None = None,
        require_authentication: bool = False,
    ) -> None:
        """``tls``: when connections are encrypted (``client.options.client_tls``); default: the
        OPTIONAL policy, trusting no CA."""
        self.admin_timeout_ms = admin_timeout_ms or DEFAULT_ADMIN_TIMEOUT_MS
        self.rpc_timeout_ms = rpc_timeout_ms or DEFAULT_RPC_TIMEOUT_MS
        self.client_id = uuid.uuid4().hex
        self._seq = itertools.count(1)
        self.write_ids = WriteRequestIds(self.client_id)
        name = f"client-{self.client_id[:8]}"
        # A client with credentials keeps its authn token fresh on every call; one without pays nothing.
        rpc_tls = tls if tls is not None else client_tls()
        self.rpc = AuthnRpcClient(name, tls=rpc_tls) if jwt is not None else RpcClient(name, tls=rpc_tls)
        self.masters = MasterClient(self.rpc, masters, self.rpc_timeout_ms / 1000.0)
        self.credentials = ClientCredentials(
            self.rpc,
            self.masters.addresses,  # the same list: it follows the masters the leader lists
            jwt=jwt,
            require_authentication=require_authentication,
            certificate=rpc_tls.presents_certificate,
        )
        if isinstance(self.rpc, AuthnRpcClient):
            self.rpc.credentials = self.credentials
        self.meta = MetaCache(self.masters)
        self._latest_ts = 0

    def admin_deadline(self, what: str) -> Deadline:
        return Deadline(self.admin_timeout_ms / 1000.0, what)

    def request_id(self) -> str:
        """A DDL request id: the same for every attempt of one request, new for the next request."""
        return f"{self.client_id}:{next(self._seq)}"

    async def authenticate(self) -> None:
        """Get the authn token now (at connect), so a refused JWT is an error of ``connect``."""
        if self.credentials.uses_tokens:
            await self.credentials.before_call(self.admin_timeout_ms / 1000.0)

    async def close(self) -> None:
        await self.masters.close()
        await self.credentials.close()
        await self.rpc.close()

    # --- timestamps (client-propagated consistency) --------------------------------------------------

    def latest_observed_timestamp(self) -> int:
        return self._latest_ts

    def observe_timestamp(self, ts: int) -> None:
        if ts > self._latest_ts:
            self._latest_ts = ts

    # --- DDL -------------------------------------------------------------------------------------------

    async def wait_done(self, method: str, req: dict[str, Any], deadline: Deadline) -> None:
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

    async def alter_table(self, table: Table, req: dict[str, Any], wait: bool = True) -> Table:
        """Send one AlterTable (``req``: its steps), wait for it when asked, and return the table as it is now."""
        deadline = self.admin_deadline(f"AlterTable {table.name}")
        reply = await self.masters.call(
            "AlterTable", {"table_id": table.id, **req, "request_id": self.request_id()}, deadline
        )
        if wait:
            await self.wait_done("IsAlterTableDone", {"table_id": reply["table_id"]}, deadline)
        info = await self.masters.call("GetTableSchema", {"table_id": table.id}, deadline)
        self.meta.invalidate(table.id)
        return Table(table._owner, info)

    async def reload_table(self, table: Table, deadline: Deadline) -> None:
        """Refresh a table's schema (after MISMATCHED_SCHEMA) and its locations."""
        info = await self.masters.call("GetTableSchema", {"table_id": table.id}, deadline)
        table._load(info)
        self.meta.invalidate(table.id)

    # --- tablet RPCs with leader discovery -----------------------------------------------------------

    async def call_tablet_leader(
        self, table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        """``TabletServer/method`` on the tablet's leader: follows NOT_THE_LEADER hints, tries the other
        replicas, refreshes locations when none answers, backs off between rounds, all within ``deadline``.
        Raises NOT_FOUND (details TABLET_NOT_FOUND) when the tablet is no longer part of the table."""
        try:
            return await self._call_leader(table, tablet_id, method, req, deadline)
        except KuduNotAuthorized as e:
            if not authz_token_stale(e):
                raise
            # The table's authz token expired, or its signing key did: a new one from the master, then again.
            await self.reload_table(table, deadline)
            return await self._call_leader(table, tablet_id, method, req, deadline)

    async def _call_leader(
        self, table: Table, tablet_id: str, method: str, req: dict[str, Any], deadline: Deadline
    ) -> dict[str, Any]:
        if table.authz_token is not None:
            req = {**req, "authz_token": table.authz_token}
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
