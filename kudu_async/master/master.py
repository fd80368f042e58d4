"""The master role: the sys catalog (tables, tablets, DDL), the tserver registry and its heartbeats.

Every tserver heartbeats every master (``Master/TSHeartbeat``). Each master keeps its own in-memory
``TSManager``: registrations and liveness on all masters, tablet reports processed by the catalog leader
only (as in Kudu, where followers answer ``leader: false`` and a new leader asks for full reports).

The cluster's CA (Kudu's IPKI) lives in the sys catalog: the first leader creates it; every master signs
its own certificate with it once it holds it, and the leader signs the CSRs tservers send with their
heartbeats. Its certificate is served at ``/ipki-ca-cert`` (PEM; also ``-pem`` and ``-der``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from kudu_async.common.errors import (
    KuduBadStatus,
    KuduConfigurationError,
    KuduInvalidArgument,
    KuduNotFound,
    KuduNotTheLeader,
    KuduTimedOut,
)
from kudu_async.consensus.replica import RaftReplica, ReplicaState
from kudu_async.fs.fs_manager import FsManager
from kudu_async.master import messages as msg
from kudu_async.master import rest_api, sys_catalog, web_pages
from kudu_async.master.auto_rebalancer import AutoRebalancer
from kudu_async.master.catalog_manager import CatalogManager, DdlAuthorizer
from kudu_async.master.membership import MasterMembership, catalog_summary
from kudu_async.master.messages import MAX_DDL_WAIT_MS
from kudu_async.master.sys_catalog import SysCatalogStateMachine
from kudu_async.master.ts_manager import TSManager
from kudu_async.rpc.messages import UNSET, Empty, Method, ServiceTable, convert, serve, to_builtins
from kudu_async.rpc.server import CallContext
from kudu_async.security.authz_policy import PolicyHolder
from kudu_async.server.admin import json_response, node_as
from kudu_async.server.config import NodeConfig, parse_hostport
from kudu_async.server.node import Node

log = logging.getLogger(__name__)

DDL_WAIT_DEFAULT_S = MAX_DDL_WAIT_MS / 1000  # an Is*Done caller without a deadline may wait this long
# Longest a catalog read waits for a heartbeat round confirming leadership (an election timeout and a half:
# by then a leader cut off from the majority has stepped down).
CATALOG_READ_CONFIRM_S = 2.0


class Master(Node):
    role = "master"

    def __init__(self, config: NodeConfig, fs: FsManager) -> None:
        super().__init__(config, fs)
        self.ts_manager = TSManager(config.tserver_unresponsive_timeout_ms / 1000.0)
        config.on_change(
            "tserver_unresponsive_timeout_ms",
            lambda ms: setattr(self.ts_manager, "unresponsive_timeout_s", ms / 1000.0),
        )
        self.catalog: SysCatalogStateMachine | None = None
        self.raft.register_kind(sys_catalog.KIND, self._open_catalog)
        catalog = self.memory.root.child("tablet-sys_catalog", kind="tablets")
        catalog.child("log_cache", gauge=self._catalog_log_bytes, kind="log caches")
        self._tasks: list[asyncio.Task[None]] = []
        self._bg: set[asyncio.Task[None]] = set()
        self._reports_term = -1  # the term in which this master last asked tservers for full reports
        self.authz_policy = PolicyHolder(config.authz_policy_file)
        self._policy_mtime_ns: int | None = None
        if config.authz_policy_file:
            try:
                self._read_policy()
            except (OSError, KuduInvalidArgument) as e:
                raise KuduConfigurationError(f"--authz-policy-file: {e}") from None
        self.catalog_manager = CatalogManager(self, DdlAuthorizer(self.acls, self.authz_policy, self.audit))
        self.catalog_manager.sign_for_unauthenticated = config.values.get("rpc_authentication") == "disabled"
        self.auto_rebalancer = AutoRebalancer(self, self.server_metrics)
        self._ipki_failures = 0
        self._unsigned_warned = False
        self.membership = MasterMembership(self)
        # Registered before the RPC port opens, so a tserver's first heartbeat never finds no method.
        serve(self.rpc_server, "Master", self.methods())
        self.membership.copy_source.register_rpc(self.rpc_server)

    def methods(self) -> ServiceTable:
        """The ``Master`` protocol: each method with its request and response messages."""
        return {
            "TSHeartbeat": Method(
                msg.TSHeartbeatRequest, msg.TSHeartbeatResponse, self._rpc_ts_heartbeat, requires="service"
            ),
            "ListTabletServers": Method(
                Empty, msg.ListTabletServersResponse, self._rpc_list_tablet_servers, requires="user"
            ),
            "ChangeTServerState": Method(
                msg.ChangeTServerStateRequest,
                msg.ChangeTServerStateResponse,
                self._rpc_change_tserver_state,
                requires="superuser",
            ),
            "UnregisterTServer": Method(
                msg.UnregisterTServerRequest,
                msg.UnregisterTServerResponse,
                self._rpc_unregister_tserver,
                requires="superuser",
            ),
            "ConnectToMaster": Method(Empty, msg.ConnectToMasterResponse, self._rpc_connect_to_master, requires="any"),
            "ListMasters": Method(Empty, msg.ListMastersResponse, self._rpc_list_masters, requires="user"),
            "CreateTable": Method(msg.CreateTableRequest, msg.TableIdResponse, self._rpc_create_table, requires="user"),
            "IsCreateTableDone": Method(
                msg.IsDdlDoneRequest, msg.IsCreateTableDoneResponse, self._rpc_is_create_table_done, requires="user"
            ),
            "AlterTable": Method(msg.AlterTableRequest, msg.AlterTableResponse, self._rpc_alter_table, requires="user"),
            "IsAlterTableDone": Method(
                msg.IsDdlDoneRequest, msg.IsAlterTableDoneResponse, self._rpc_is_alter_table_done, requires="user"
            ),
            "DeleteTable": Method(msg.DeleteTableRequest, msg.TableIdResponse, self._rpc_delete_table, requires="user"),
            "RecallDeletedTable": Method(
                msg.RecallDeletedTableRequest, msg.TableIdResponse, self._rpc_recall_deleted_table, requires="user"
            ),
            "GetTableStatistics": Method(
                msg.TableRef, msg.GetTableStatisticsResponse, self._rpc_get_table_statistics, requires="user"
            ),
            "ListTables": Method(msg.ListTablesRequest, msg.ListTablesResponse, self._rpc_list_tables, requires="user"),
            "ListInFlightTables": Method(
                Empty, msg.ListInFlightTablesResponse, self._rpc_list_in_flight_tables, requires="user"
            ),
            "GetTableSchema": Method(
                msg.TableRef, msg.GetTableSchemaResponse, self._rpc_get_table_schema, requires="user"
            ),
            "GetTableLocations": Method(
                msg.GetTableLocationsRequest,
                msg.GetTableLocationsResponse,
                self._rpc_get_table_locations,
                requires="user",
            ),
            "GetTabletLocations": Method(
                msg.GetTabletLocationsRequest,
                msg.GetTabletLocationsResponse,
                self._rpc_get_tablet_locations,
                requires="user",
            ),
            # Membership of the masters' Raft config (``kudu master add|remove``): operators only.
            "AddMaster": Method(
                msg.AddMasterRequest, msg.AddMasterResponse, self.membership.add_master, requires="superuser"
            ),
            "RemoveMaster": Method(
                msg.RemoveMasterRequest, msg.RemoveMasterResponse, self.membership.remove_master, requires="superuser"
            ),
            # The leader asks a master it added to copy the catalog from it.
            "StartCatalogCopy": Method(
                msg.StartCatalogCopyRequest,
                msg.StartCatalogCopyResponse,
                self.membership.start_catalog_copy,
                requires="service",
            ),
        }

    def _catalog_log_bytes(self) -> int:
        r = self.raft.replicas.get(sys_catalog.GROUP)
        core = None if r is None else r.raft
        return 0 if core is None else core.log.memory_bytes()

    async def _open_catalog(self, group: str, extra: dict[str, Any]) -> SysCatalogStateMachine:
        sm = SysCatalogStateMachine(self.fs.root / "sys-catalog", self.io_executor)
        await asyncio.get_running_loop().run_in_executor(self.io_executor, self._load_catalog, sm)
        self.catalog = sm
        return sm

    def _read_policy(self) -> bool:
        """Read the policy file if its modification time changed (in a worker, but for the first read);
        True when a new version was offered. A bad version keeps the last good one and is logged."""
        path = Path(self.config.authz_policy_file)
        st = path.stat()
        if st.st_mtime_ns == self._policy_mtime_ns:
            return False
        self._policy_mtime_ns = st.st_mtime_ns
        problem = self.authz_policy.offer(path.read_bytes(), st.st_mtime)
        if problem:
            log.warning("authz policy file not reloaded, the last good version stays in force: %s", problem)
        else:
            log.info("authz policy loaded", extra={"path": str(path), "grants": len(self.authz_policy.grants())})
        return True

    async def _watch_policy(self) -> None:
        """Re-read ``--authz-policy-file`` when it changes (a stat per interval, in a worker thread)."""
        loop = asyncio.get_running_loop()
        interval = self.config.authz_policy_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await loop.run_in_executor(self.io_executor, self._read_policy)
            except OSError as e:
                log.warning("authz policy file unreadable, the last good version stays in force: %s", e)

    @staticmethod
    def _load_catalog(sm: SysCatalogStateMachine) -> None:
        sm.path.parent.mkdir(parents=True, exist_ok=True)
        sm.load()

    async def on_start(self) -> None:
        await self.membership.start()

    async def on_started(self) -> None:
        if sys_catalog.GROUP not in self.raft.replicas:
            self._spawn(self._create_catalog(), "create-sys-catalog")
        self._spawn(self._watch_leadership(), "catalog-leadership")
        if self.config.authz_policy_file:
            self._spawn(self._watch_policy(), "authz-policy")
        self.catalog_manager.start()
        self.auto_rebalancer.start()

    def spawn_background(self, coro: Any) -> None:
        """Run a short background job (a tserver RPC for the catalog); cancelled on stop."""
        task = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    async def on_stop(self) -> None:
        await self.auto_rebalancer.stop()
        await self.catalog_manager.stop()
        await self.membership.stop()
        for t in [*self._tasks, *self._bg]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._bg, return_exceptions=True)
        if self.catalog is not None and self.catalog.applied_index > self.catalog.durable_index():
            await self.catalog.snapshot()

    async def _create_catalog(self) -> None:
        """First start: create the catalog group with every master of ``--master-addresses`` as a voter
        (each master of a new cluster computes the same config), unless the masters already run one that
        this master is to join (``membership.first_start_peers``)."""
        peers = await self.membership.first_start_peers()
        if peers is None or sys_catalog.GROUP in self.raft.replicas:
            return
        await self.raft.create_replica(sys_catalog.GROUP, sys_catalog.KIND, peers)
        log.info("sys catalog created", extra={"masters": sorted(peers)})

    async def _watch_leadership(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            self.membership.tick(self.check_leadership())
            try:
                await self._ipki_tick()
                self._ipki_failures = 0
            except KuduBadStatus as e:
                self._ipki_failures += 1
                if self._ipki_failures == 1:
                    log.warning("cluster CA work failed; retrying", extra={"error": str(e)})

    async def _ipki_tick(self) -> None:
        """The leader creates the cluster CA once; every master signs its own certificate with it (it holds
        the CA key through the catalog) when it has none or its own expires soon."""
        now = time.time()
        cm = self.catalog_manager
        if self.catalog is not None and self.catalog.ca is None and self.is_catalog_leader():
            await cm.ensure_cert_authority(now, self.config.ipki_ca_cert_expiration_seconds)
        authority = cm.cert_authority()
        csr = self.certificate_request(now) if authority is not None else None
        if authority is None or csr is None:
            return
        cert = authority.sign(
            csr, self.acls.service_user, self.tls_hosts, now, self.config.ipki_server_cert_expiration_seconds
        )
        self.accept_certificate(cert, authority.cert_pem)

    def check_leadership(self) -> bool:
        """Whether this master is the ready catalog leader. In each term it leads, before anything acts on
        the tserver directory (heartbeats, the catalog's background work), it asks every tserver for a full
        report (Kudu does too): what it saw in an earlier term, or as a follower, may be stale."""
        if not self.is_catalog_leader():
            return False
        replica = self.catalog_replica()
        term = replica.raft.term if replica is not None and replica.raft is not None else -1
        if term != self._reports_term:
            log.info("became catalog leader; asking tservers for full reports", extra={"term": term})
            self.ts_manager.request_full_reports()
            self._reports_term = term
        return True

    def uptime_s(self) -> float:
        return time.monotonic() - self._started_mono

    def catalog_replica(self) -> RaftReplica | None:
        return self.raft.replicas.get(sys_catalog.GROUP)

    def is_catalog_leader(self) -> bool:
        """Whether this master leads the sys catalog and has applied its own term's first entry, hence every
        entry of earlier terms: its caches hold everything any earlier leader acknowledged, and every write
        of its own is applied before it is acknowledged.

        Stable for the whole term: unlike ``RaftReplica.is_leader_ready`` it does not also ask that every
        committed entry be applied, which is false for an instant after each write commits. That flapping
        made the leader answer a tserver's heartbeat as a follower, and the tserver then took the report
        it had carried (a deleted replica, say) as delivered: the directory kept a replica that was gone.
        """
        r = self.catalog_replica()
        raft = r.raft if r is not None else None
        return (
            r is not None
            and raft is not None
            and r.state is ReplicaState.RUNNING
            and raft.is_leader
            and raft.log.term_at(raft.applied_index) == raft.term
        )

    def leader_info(self) -> dict[str, Any]:
        r = self.catalog_replica()
        if r is None or r.raft is None:
            return {"leader_uuid": None, "leader_address": None, "term": 0}
        hint = r.leader_hint()
        return {"leader_uuid": hint["leader"], "leader_address": hint["leader_address"], "term": hint["term"]}

    def masters(self) -> list[dict[str, Any]]:
        """Every member of the catalog's Raft config with its role (LEADER, FOLLOWER, LEARNER: a master
        being added) and member type; without a catalog here, ``--master-addresses`` with roles UNKNOWN."""
        r = self.catalog_replica()
        if r is None or r.raft is None:
            return [
                {"uuid": self.uuid if a == self.rpc_address else None, "rpc_address": a, "role": "UNKNOWN"}
                for a in self.config.masters
            ]
        raft = r.raft
        leader = raft.leader
        out = []
        for u in raft.config.members:
            voter = u in raft.config.voters
            out.append(
                {
                    "uuid": u,
                    "rpc_address": r.peers.get(u) or (self.rpc_address if u == self.uuid else ""),
                    "role": "LEADER" if u == leader else "FOLLOWER" if voter else "LEARNER",
                    "member_type": "VOTER" if voter else "NON_VOTER",
                }
            )
        return sorted(out, key=lambda e: e["rpc_address"])

    def require_leader(self) -> None:
        """Only the catalog leader answers clients; others say who leads."""
        if not self.is_catalog_leader():
            raise KuduNotTheLeader(f"master {self.uuid} is not the catalog leader", self.leader_info())

    async def confirm_catalog_read(self, ctx: CallContext) -> None:
        """Before a catalog read: this master must still be the leader, not one deposed by a partition
        and replaced (whose catalog may miss a rename or a drop the new leader applied). Within its lease
        (a majority acked it less than an election timeout ago, its ticks on time) it answers at once;
        otherwise a heartbeat round to a majority confirms it (Raft's read index), as a tablet leader does
        for READ_LATEST scans. A leader that cannot confirm says it is not the leader, so clients look
        elsewhere."""
        self.require_leader()
        replica = self.catalog_replica()
        assert replica is not None  # require_leader checked it
        try:
            await replica.read_index(timeout_s=min(ctx.time_left(CATALOG_READ_CONFIRM_S), CATALOG_READ_CONFIRM_S))
        except KuduTimedOut:
            raise KuduNotTheLeader(
                f"master {self.uuid} could not confirm its leadership with a majority", self.leader_info()
            ) from None
        self.require_leader()

    # --- RPC ------------------------------------------------------------------------------------------

    async def _rpc_ts_heartbeat(self, req: msg.TSHeartbeatRequest, ctx: CallContext) -> msg.TSHeartbeatResponse:
        now = time.monotonic()
        leader = self.check_leadership()
        tsm = self.ts_manager
        if req.register:
            tsm.register(req.ts, now, wall_time=time.time())
        else:
            known = tsm.registration(req.uuid)
            if known is None or convert(known, msg.TSInfo) != req.ts:
                # Unknown (this master restarted) or restarted/moved without registering: ask for a
                # registration and ignore the rest, so nothing is attributed to a stale identity.
                return msg.TSHeartbeatResponse(leader=leader, master_uuid=self.uuid, needs_reregister=True)
        tsm.heartbeat(req.uuid, now, req.num_live_tablets, req.leader_count, req.quiescing)
        if not leader:
            return msg.TSHeartbeatResponse(leader=leader, master_uuid=self.uuid)
        if req.report is not None and tsm.process_report(req.uuid, req.report, now):
            self.catalog_manager.reports_arrived()
        cert_pem, ca_pem = self._sign_for(req, ctx)
        tsks = self.catalog_manager.tsks_newer_than(req.tsk_seq, time.time())
        return msg.TSHeartbeatResponse(
            cert_pem=cert_pem,
            ca_cert_pem=ca_pem,
            leader=leader,
            master_uuid=self.uuid,
            needs_full_report=tsm.needs_full_report(req.uuid),
            tablets_to_delete=self.catalog_manager.deleted_tablets_on(req.uuid),
            write_limited_tables=self.catalog_manager.write_limited_tables()
            if self.config.enable_table_write_limit
            else UNSET,
            tsks=UNSET if tsks is None else tsks,
            master_addresses=[e["rpc_address"] for e in self.masters() if e["rpc_address"]],
        )

    def _sign_for(self, req: msg.TSHeartbeatRequest, ctx: CallContext) -> tuple[Any, Any]:
        """The tserver's certificate for the CSR of its heartbeat and the CA certificate (UNSET, UNSET
        without a CSR, or when this caller may not have one: then it keeps its self-signed one)."""
        cm = self.catalog_manager
        authority = cm.cert_authority()
        if req.csr_pem is None or authority is None:
            return UNSET, UNSET
        if not cm.may_sign_certificate(ctx.identity):
            if not self._unsigned_warned:
                self._unsigned_warned = True
                log.warning(
                    "not signing certificates for unauthenticated tservers: they keep self-signed ones "
                    "(encrypted, not proved) until they authenticate (logged once)",
                    extra={"ts": req.uuid, "caller": ctx.identity.describe()},
                )
            return UNSET, UNSET
        # The names the tserver gives others (its RPC and admin addresses' hosts), so that a client checking
        # host names against the certificate accepts it at the address the master hands out.
        hosts = {parse_hostport(req.ts.rpc_address)[0], parse_hostport(req.ts.http_address)[0], "127.0.0.1"}
        cert = cm.sign_certificate(
            req.csr_pem,
            ctx.identity,
            sorted(hosts),
            time.time(),
            self.config.ipki_server_cert_expiration_seconds,
        )
        log.info("signed a tserver certificate", extra={"ts": req.uuid, "caller": ctx.identity.describe()})
        return cert, authority.cert_pem

    async def _rpc_connect_to_master(self, req: Empty, ctx: CallContext) -> msg.ConnectToMasterResponse:
        """Leader discovery for clients and tools: any master answers with what it knows. The leader also
        gives a caller that proved who it is (a JWT or a client certificate) an authn token, which tablet
        servers verify on their own (Kudu's ConnectToMaster does the same); a caller that showed a token
        gets none: it renews with the credentials it got the first one with."""
        leader = self.is_catalog_leader()
        answer: dict[str, Any] = {"leader": leader, "uuid": self.uuid, **self.leader_info(), "masters": self.masters()}
        if leader and ctx.identity.authn in ("jwt", "cert"):
            token, expire = self.catalog_manager.sign_authn_token(ctx.identity.user, time.time())
            answer["authn_token"] = token
            answer["authn_token_expire_unix"] = expire
        return convert(answer, msg.ConnectToMasterResponse)

    # --- DDL and locations (leader only) ---------------------------------------------------------------

    async def _rpc_create_table(self, req: msg.CreateTableRequest, ctx: CallContext) -> msg.TableIdResponse:
        self.catalog_manager.authz.check(ctx, "CREATE", req.name, "create")
        if req.owner is None and ctx.identity.user:  # Kudu: a table without a given owner is its creator's
            req = msgspec.structs.replace(req, owner=ctx.identity.user)
        return convert(await self.catalog_manager.create_table(req, ctx.time_left(30.0)), msg.TableIdResponse)

    async def _rpc_is_create_table_done(
        self, req: msg.IsDdlDoneRequest, ctx: CallContext
    ) -> msg.IsCreateTableDoneResponse:
        self._check_metadata(ctx, req.name, req.table_id)
        done = await self._ddl_done(self.catalog_manager.is_create_table_done, req, ctx)
        return convert(done, msg.IsCreateTableDoneResponse)

    async def _ddl_done(
        self, check: Callable[[msg.IsDdlDoneRequest], dict[str, Any]], req: msg.IsDdlDoneRequest, ctx: CallContext
    ) -> dict[str, Any]:
        """Is*Done: the catalog's answer, held up to the request's ``wait_ms`` for the DDL to finish."""
        return await self.catalog_manager.wait_ddl_done(check, req, ctx.time_left(DDL_WAIT_DEFAULT_S))

    async def _rpc_alter_table(self, req: msg.AlterTableRequest, ctx: CallContext) -> msg.AlterTableResponse:
        authz = self.catalog_manager.authz
        name = self._table_name(ctx, req.name, req.table_id)
        if req.new_name is not None and req.new_name != name:
            authz.check(ctx, "ALL", name, "rename")
            authz.check(ctx, "CREATE", req.new_name, "rename to")
        else:
            authz.check(ctx, "ALTER", name, "alter")
        return convert(await self.catalog_manager.alter_table(req, ctx.time_left(30.0)), msg.AlterTableResponse)

    async def _rpc_is_alter_table_done(
        self, req: msg.IsDdlDoneRequest, ctx: CallContext
    ) -> msg.IsAlterTableDoneResponse:
        self._check_metadata(ctx, req.name, req.table_id)
        done = await self._ddl_done(self.catalog_manager.is_alter_table_done, req, ctx)
        return convert(done, msg.IsAlterTableDoneResponse)

    async def _rpc_delete_table(self, req: msg.DeleteTableRequest, ctx: CallContext) -> msg.TableIdResponse:
        self.catalog_manager.authz.check(ctx, "DROP", self._table_name(ctx, req.name, req.table_id), "drop")
        return convert(await self.catalog_manager.delete_table(req, ctx.time_left(30.0)), msg.TableIdResponse)

    async def _rpc_recall_deleted_table(
        self, req: msg.RecallDeletedTableRequest, ctx: CallContext
    ) -> msg.TableIdResponse:
        name = req.new_table_name or self._table_name(ctx, None, req.table_id)
        self.catalog_manager.authz.check(ctx, "CREATE", name, "recall")
        return convert(await self.catalog_manager.recall_table(req, ctx.time_left(30.0)), msg.TableIdResponse)

    async def _rpc_get_table_statistics(self, req: msg.TableRef, ctx: CallContext) -> msg.GetTableStatisticsResponse:
        await self.confirm_catalog_read(ctx)
        self._check_metadata(ctx, req.name, req.table_id)
        return self.catalog_manager.get_table_statistics(req)

    async def _rpc_list_tables(self, req: msg.ListTablesRequest, ctx: CallContext) -> msg.ListTablesResponse:
        await self.confirm_catalog_read(ctx)
        listed = self.catalog_manager.list_tables(req)
        authz = self.catalog_manager.authz
        if authz.applies_to(ctx.identity):
            listed["tables"] = [t for t in listed["tables"] if authz.visible(ctx.identity, t["name"])]
        return convert(listed, msg.ListTablesResponse)

    async def _rpc_list_in_flight_tables(self, req: Empty, ctx: CallContext) -> msg.ListInFlightTablesResponse:
        await self.confirm_catalog_read(ctx)
        listed = self.catalog_manager.list_in_flight_tables()
        authz = self.catalog_manager.authz
        if authz.applies_to(ctx.identity):
            listed["tables"] = [t for t in listed["tables"] if authz.visible(ctx.identity, t["name"])]
        return convert(listed, msg.ListInFlightTablesResponse)

    async def _rpc_get_table_schema(self, req: msg.TableRef, ctx: CallContext) -> msg.GetTableSchemaResponse:
        await self.confirm_catalog_read(ctx)
        self._check_metadata(ctx, req.name, req.table_id)
        schema = self.catalog_manager.get_table_schema(req)
        token = self._authz_token(ctx, schema["table_id"], schema["name"])
        if token is not None:
            schema = {**schema, "authz_token": token}
        return convert(schema, msg.GetTableSchemaResponse)

    def _authz_token(self, ctx: CallContext, table_id: str, name: str) -> bytes | None:
        """The caller's privileges on a table, signed for the tablet servers (Kudu's authz token); None
        while no token-signing key is active (a leader that just started)."""
        cm = self.catalog_manager
        if cm.token_signer.signing_key(time.time()) is None:
            return None
        claims = cm.authz.token_claims(ctx.identity, table_id, name)
        return cm.token_signer.sign("authz", claims, time.time(), float(self.config.authz_token_validity_seconds))

    async def _rpc_get_table_locations(
        self, req: msg.GetTableLocationsRequest, ctx: CallContext
    ) -> msg.GetTableLocationsResponse:
        await self.confirm_catalog_read(ctx)
        self._check_metadata(ctx, req.name, req.table_id)
        return self.catalog_manager.get_table_locations(req)

    async def _rpc_get_tablet_locations(
        self, req: msg.GetTabletLocationsRequest, ctx: CallContext
    ) -> msg.GetTabletLocationsResponse:
        await self.confirm_catalog_read(ctx)
        return self.catalog_manager.get_tablet_locations(req)

    def _table_name(self, ctx: CallContext, name: str | None, table_id: str | None) -> str:
        """The name privileges are checked on: the one given, else the table's by its id when a policy
        applies to the caller (else the id, as the audit log names it)."""
        if table_id is None and name is not None:
            return name
        if not self.catalog_manager.authz.applies_to(ctx.identity):
            return table_id or name or ""
        self.require_leader()
        return self.catalog_manager.find_table(name, table_id).name

    def _check_metadata(self, ctx: CallContext, name: str | None, table_id: str | None) -> None:
        """A catalog read of one table needs METADATA on it (not audited when allowed: not DDL)."""
        if self.catalog_manager.authz.applies_to(ctx.identity):
            self.catalog_manager.authz.check(
                ctx, "METADATA", self._table_name(ctx, name, table_id), "read", audit=False
            )

    async def _rpc_list_masters(self, req: Empty, ctx: CallContext) -> msg.ListMastersResponse:
        return convert({"masters": self.masters()}, msg.ListMastersResponse)

    async def _rpc_list_tablet_servers(self, req: Empty, ctx: CallContext) -> msg.ListTabletServersResponse:
        return msg.ListTabletServersResponse(servers=self.tserver_descriptors())

    def tserver_descriptors(self) -> list[dict[str, Any]]:
        """Every registered tserver with its operator-set state (NONE or MAINTENANCE_MODE)."""
        states = self.catalog_manager.tserver_states()
        out = self.ts_manager.descriptors(time.monotonic())
        for d in out:
            rec = states.get(d["uuid"])
            d["state"] = "NONE" if rec is None else rec.state
        return out

    async def _rpc_change_tserver_state(
        self, req: msg.ChangeTServerStateRequest, ctx: CallContext
    ) -> msg.ChangeTServerStateResponse:
        """Enter or exit maintenance mode, recorded in the replicated catalog (a new leader keeps it)."""
        if not req.uuid.isprintable():
            raise KuduInvalidArgument("'uuid': not a plausible tserver uuid", {"field": "uuid"})
        self.require_leader()
        entering = req.change == "ENTER_MAINTENANCE_MODE"
        known = req.uuid in self.catalog_manager.tserver_states() or self.ts_manager.registration(req.uuid) is not None
        if entering and not known and not req.allow_missing_tserver:
            raise KuduNotFound(
                f"tserver {req.uuid} has not registered with the leader master; "
                "pass allow_missing_tserver to set its state anyway"
            )
        state: sys_catalog.TServerState | None = "MAINTENANCE_MODE" if entering else None
        changed = await self.catalog_manager.change_tserver_state(req.uuid, state, ctx.time_left(30.0))
        return msg.ChangeTServerStateResponse(uuid=req.uuid, state=state or "NONE", changed=changed)

    async def _rpc_unregister_tserver(
        self, req: msg.UnregisterTServerRequest, ctx: CallContext
    ) -> msg.UnregisterTServerResponse:
        """Forget a tserver on this master (every master keeps its own registry: the tool asks each one)."""
        if not req.uuid.isprintable():
            raise KuduInvalidArgument("'uuid': not a plausible tserver uuid", {"field": "uuid"})
        self.ts_manager.unregister(req.uuid, time.monotonic(), req.force_unregister_live_tserver)
        return msg.UnregisterTServerResponse(uuid=req.uuid, unregistered=True)

    # --- admin and status -----------------------------------------------------------------------------

    def add_admin_routes(self, app: web.Application) -> None:
        web_pages.add_routes(app, self)
        app.router.add_get("/api/v1/tservers", _tservers_page)
        app.router.add_get("/api/v1/masters", _masters_page)
        app.router.add_get("/api/v1/catalog/tables", _tables_page)
        app.router.add_get("/api/v1/catalog/tables/{name}", _table_page)
        if self.config.enable_rest_api:
            rest_api.add_routes(app, self)
        for path in ("/ipki-ca-cert", "/ipki-ca-cert-pem", "/ipki-ca-cert-der"):
            app.router.add_get(path, _ipki_ca_cert_page)

    def role_status(self) -> dict[str, Any]:
        ds = self.ts_manager.descriptors(time.monotonic())
        live = sum(1 for d in ds if d["live"])
        cat = self.catalog
        return {
            "num_live_tservers": live,
            "num_dead_tservers": len(ds) - live,
            "is_leader": self.is_catalog_leader(),
            **self.leader_info(),
            # This master's web address as other masters hand it out (Kudu's /api/v1/leader).
            "http_url": f"{self.http_scheme}://{self.http_address}",
            "ddl_request_ids_remembered": 0 if cat is None else len(cat.requests),
            "catalog_writes_refused": 0 if cat is None else cat.conflicts,
            # This master's catalog replica (None: it holds none, e.g. it waits to be added), and its part in
            # master membership changes.
            "catalog": catalog_summary(self.catalog_replica()),
            **self.membership.status(),
            "auto_rebalancer": self.auto_rebalancer.status(),
        }


async def _tservers_page(request: web.Request) -> web.Response:
    """``GET /api/v1/tservers``: every registered tserver (live and dead), sorted by uuid, with its
    operator-set state (Kudu's ``/tablet-servers`` page answers the same as its JSON)."""
    master = node_as(request, Master)
    return web.json_response(master.tserver_descriptors())


async def _masters_page(request: web.Request) -> web.Response:
    """``GET /api/v1/masters``: uuid, RPC address and Raft role of every master."""
    master = node_as(request, Master)
    return web.json_response({"masters": master.masters()})


async def _tables_page(request: web.Request) -> web.Response:
    """``GET /api/v1/catalog/tables``: every table record in this master's catalog, whatever its state
    (any master; followers may lag). Kudu's ``/api/v1/tables`` is the leader's list (``rest_api.py``)."""
    master = node_as(request, Master)
    tables = [
        {
            "name": t.name,
            "table_id": t.id,
            "state": t.state,
            "num_tablets": len(t.tablet_ids),
            "num_replicas": t.num_replicas,
            "schema_version": t.schema_version,
        }
        for t in master.catalog_manager.tables.values()
    ]
    return json_response({"tables": sorted(tables, key=lambda t: t["name"])})


async def _table_page(request: web.Request) -> web.Response:
    """``GET /api/v1/catalog/tables/{name}``: the table record, and each tablet with its replicas and leader."""
    master = node_as(request, Master)
    cm = master.catalog_manager
    t = cm.find_table(request.match_info["name"])
    tablets = [to_builtins(cm.location(cm.tablets[tid])) for tid in t.tablet_ids if tid in cm.tablets]
    record = {k: v for k, v in to_builtins(t).items() if k != "tablet_ids"}
    return json_response({**record, "tablets": tablets})


async def _ipki_ca_cert_page(request: web.Request) -> web.Response:
    """``GET /ipki-ca-cert`` and ``/ipki-ca-cert-pem``: the cluster CA's certificate, PEM; ``/ipki-ca-cert-der``:
    DER. What clients pass as their trusted certificates. 503 until the first leader created the CA."""
    master = node_as(request, Master)
    authority = master.catalog_manager.cert_authority()
    if authority is None:
        return web.json_response(
            {"code": "SERVICE_UNAVAILABLE", "message": "the cluster CA does not exist yet (no leader master so far)"},
            status=503,
        )
    if request.path.endswith("-der"):
        return web.Response(body=authority.cert_der, content_type="application/pkix-cert")
    return web.Response(body=authority.cert_pem, content_type="application/x-pem-file")
