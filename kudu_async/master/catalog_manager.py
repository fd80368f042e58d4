"""Tables and tablets: DDL on the sys catalog, and the leader's background work that carries it out.

Every change is written to the sys catalog through Raft first; the in-memory maps change only when the
entry is applied, on every master. Work that touches tservers (creating and deleting tablet replicas)
is driven by a loop on the leader that reads the catalog's states (CREATING, DELETING) and repeats its
idempotent RPCs until the tservers' reports show the result, so a new leader simply resumes it.

DDL may carry a client ``request_id`` (a string, e.g. ``"<client uuid>:<sequence>"``): its result is
written in the same catalog entry as the change, so a retry of an applied request (the reply was lost,
or the leader died before sending it) gets the original reply from whichever master leads now, instead
of ALREADY_PRESENT or NOT_FOUND or a second application. A request id reused for a different request is
refused. A write planned against a catalog that changed before it committed is refused by the state
machine (see ``sys_catalog``); DDL is then planned again on the new state.

The same loop re-replicates (Kudu's 3-4-3 scheme, policy in ``rereplication.py``): a RUNNING tablet whose
replica sits on a tserver silent for longer than ``--follower_unavailable_considered_failed_sec``, or
reports FAILED, gets a NON_VOTER on another tserver (tablet-copied by its leader), which is promoted once
running, and then the failed voter is removed; replicas left out of a config are tombstoned; the
catalog's placement (``replicas``) follows the reported configs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import math
import random
import re
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgpack
from msgspec.structs import replace

from kudu_async.common.errors import (
    KuduAborted,
    KuduAlreadyPresent,
    KuduBadStatus,
    KuduConfigurationError,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotAuthorized,
    KuduNotFound,
    KuduNotSupported,
    KuduServiceUnavailable,
)
from kudu_async.common.partition import PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.common.types import value_from_wire
from kudu_async.consensus.replica import RaftReplica
from kudu_async.master import messages as msg
from kudu_async.master import rereplication
from kudu_async.master.rereplication import ChangeConfig, ClusterView, TabletView, Tombstone
from kudu_async.master.sys_catalog import (
    Op,
    RequestRecord,
    SysCatalogStateMachine,
    TableRecord,
    TabletRecord,
    TServerState,
    TServerStateRecord,
    TskRecord,
    delete,
    encode_ops,
    put,
    put_ca,
    put_tsk,
    request,
    set_tserver_state,
)
from kudu_async.master.ts_manager import TSManager
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.messages import UNSET, to_builtins
from kudu_async.rpc.server import CallContext
from kudu_async.security.acl import Acls
from kudu_async.security.audit import audit_line
from kudu_async.security.authz_policy import (
    PolicyHolder,
    Privilege,
    TablePrivileges,
    check_ddl,
    privileges_for,
    qualified_name,
)
from kudu_async.security.ca import CA_COMMON_NAME, CertAuthority
from kudu_async.security.identity import Identity
from kudu_async.security.tokens import MAX_VERIFICATION_KEYS, TokenSigner, TokenSigningKey, TokenVerifier
from kudu_async.server.config import NodeConfig

log = logging.getLogger(__name__)

TABLE_NAME_RE = re.compile(r"^[^\x00-\x1f]{1,256}$")
MAX_TABLETS_PER_TABLE = 1000
MAX_REPLICAS = 7
RPC_RETRY_S = 2.0  # a tserver is asked again (CreateTablet, DeleteTablet) at most this often
MAX_OWNER_LENGTH = 128
MAX_TABLE_COMMENT_LENGTH = 256
PROMOTE_RETRY_S = 0.5  # a learner not caught up yet is asked about again this soon
CHANGE_CONFIG_TIMEOUT_S = 10.0  # a re-replication ChangeConfig RPC (it waits for the commit)
SETTLE_S = 10.0  # after a config change succeeded, wait this long at most for the reports to show it
TRIM_GRACE_S = 5.0  # an over-replicated tablet without a replace hint is trimmed only after this long
# A master this young may not have heard again from every tserver (heartbeat + the tservers' backoff).
REGISTRATION_GRACE_S = 10.0
MAX_DDL_PLANS = 8  # a DDL is planned again after a conflicting write at most this often
MAX_PURGES_PER_PASS = 16  # expired soft-deleted tables turned DELETING per background pass
# Longest a new token-signing key waits before it signs, for heartbeats to carry its public half to every
# tserver (shorter with a short rotation period: half of it).
TSK_PROPAGATION_S = 60.0


class CatalogConflict(KuduAborted):
    """The catalog changed between planning a write and committing it; nothing was applied."""


Plan = tuple[list[Op], dict[str, Any]]  # the catalog ops of one DDL and its reply
_D = TypeVar("_D", msg.CreateTableRequest, msg.AlterTableRequest, msg.DeleteTableRequest, msg.RecallDeletedTableRequest)
DdlRequest = msg.CreateTableRequest | msg.AlterTableRequest | msg.DeleteTableRequest | msg.RecallDeletedTableRequest


class CatalogHost(Protocol):
    """What the catalog manager uses of its master."""

    config: NodeConfig
    rpc_client: RpcClient
    ts_manager: TSManager
    token_verifier: TokenVerifier
    acls: Acls

    @property
    def catalog(self) -> SysCatalogStateMachine | None: ...

    def catalog_replica(self) -> RaftReplica | None: ...

    def check_leadership(self) -> bool: ...

    def require_leader(self) -> None: ...

    def spawn_background(self, coro: Coroutine[Any, Any, None]) -> None: ...

    def uptime_s(self) -> float: ...


class DdlAuthorizer:
    """The master's table privilege checks on DDL and catalog reads (``security/authz_policy.py``), each
    DDL decision written to the audit log (denials reach it through the RPC server's hook as well).

    Kudu's rules: creating a table needs CREATE on its name, dropping DROP, altering ALTER, renaming ALL on
    the old name and CREATE on the new one, recalling a deleted table CREATE on the name it returns under;
    reading a table's schema, locations or statistics needs METADATA (which any privilege implies), and a
    table list shows only the tables the caller holds METADATA on. Superusers and the service users bypass
    the policy; without a policy file every user the ACLs admit holds every privilege.
    """

    def __init__(self, acls: Acls, policy: PolicyHolder, audit: Callable[[dict[str, Any]], None]) -> None:
        self.acls = acls
        self.policy = policy
        self.audit = audit

    def _privileges(self, identity: Identity, table: str) -> TablePrivileges:
        return self.policy.privileges(identity, table, self.acls.bypasses_policy(identity))

    def check(self, ctx: CallContext, privilege: Privilege, table: str, action: str, audit: bool = True) -> None:
        """Refuse ``action`` on ``table`` without ``privilege`` (NOT_AUTHORIZED naming user, action and
        table); an allowed DDL is audited here, a refusal by the RPC server's denial hook."""
        identity = ctx.identity
        check_ddl(self.policy, identity, self.acls.bypasses_policy(identity), privilege, table, action)
        if audit:
            self.audit(
                audit_line(
                    identity=identity,
                    client=ctx.remote,
                    method=ctx.full_method,
                    obj=table,
                    allowed=True,
                    reason=f"{privilege} on {qualified_name(table)}",
                )
            )

    def applies_to(self, identity: Identity) -> bool:
        """Whether a policy file is in force for ``identity`` (not a superuser or server)."""
        return self.policy.policy is not None and not self.acls.bypasses_policy(identity)

    def visible(self, identity: Identity, table: str) -> bool:
        return self._privileges(identity, table).has("METADATA")

    def token_claims(self, identity: Identity, table_id: str, table: str) -> dict[str, Any]:
        """The claims of ``identity``'s authz token for one table (signed by the leader master)."""
        return privileges_for(self.policy, identity, self.acls.bypasses_policy(identity), table_id, table)


class CatalogManager:
    def __init__(self, master: CatalogHost, authz: DdlAuthorizer | None = None) -> None:
        self.master = master
        # Open (every privilege to everyone) unless the master gives its ACLs and policy.
        self.authz = authz if authz is not None else DdlAuthorizer(Acls.open(), PolicyHolder(), lambda line: None)
        self._task: asyncio.Task[None] | None = None
        self._asked: dict[tuple[str, str, str], float] = {}  # (action, tablet, server) -> last time asked
        self._wake = asyncio.Event()
        self._pass_done = asyncio.Event()  # set, and replaced, after every background pass
        self._leader_since: float | None = None  # when this master last became catalog leader
        # Re-replication: tablet -> (op, config index the reports must reach, give up waiting at). The index
        # is None while the ChangeConfig RPC is in flight; nothing else is planned for the tablet meanwhile.
        self._rerep_busy: dict[str, tuple[str, int | None, float]] = {}
        self._replace_hints: dict[str, str] = {}  # tablet -> the voter its new learner is to replace
        self._excess_since: dict[str, tuple[int, float]] = {}  # over-replicated tablet -> (config index, since)
        self._learner_since: dict[tuple[str, str], float] = {}  # (tablet, learner) -> first seen in its config
        cfg = master.config
        rotation = float(cfg.tsk_rotation_seconds)
        longest = max(cfg.authn_token_validity_seconds, cfg.authz_token_validity_seconds)
        alive = math.ceil((rotation + longest) / rotation) + 1
        if alive > MAX_VERIFICATION_KEYS:
            least = math.ceil(longest / (MAX_VERIFICATION_KEYS - 2))
            # Every node keeps at most that many verification keys: tokens of the oldest would stop verifying.
            raise KuduConfigurationError(
                f"--tsk-rotation-seconds={cfg.tsk_rotation_seconds} is too short for tokens valid "
                f"{longest}s: {alive} token-signing keys would be alive at once, at most "
                f"{MAX_VERIFICATION_KEYS} can be (set it to at least {least})"
            )
        # The keys in the catalog: every master holds them (a new leader signs with the same keys) and
        # verifies with their public halves (master.token_verifier); only the leader makes new ones.
        self.token_signer = TokenSigner(
            rotation_s=rotation,
            max_validity_s=float(longest),
            propagation_s=min(TSK_PROPAGATION_S, rotation / 2),
        )
        self._tsk_seqs: set[int] = set()  # catalog keys already handed to the signer and verifier
        # Whether unauthenticated callers may have a CSR signed: only with authentication disabled, where
        # no identity is proved and a certificate proves nothing more. Otherwise a certificate naming the
        # service user would let whoever asked authenticate as the service.
        self.sign_for_unauthenticated = False
        self._ca: CertAuthority | None = None  # the catalog's CA, parsed once

    # --- the cluster CA (IPKI) -------------------------------------------------------------------------

    def cert_authority(self) -> CertAuthority | None:
        """The cluster's CA from the catalog (any master holds it once the first leader wrote it)."""
        cat = self.master.catalog
        record = None if cat is None else cat.ca
        if record is None:
            return None
        if self._ca is None or self._ca.cert_pem != record.cert_pem:
            self._ca = CertAuthority(record.cert_pem, record.key_pem)
        return self._ca

    async def ensure_cert_authority(self, now: float, validity_s: int) -> None:
        """Leader only: create the cluster's CA on first start and store it in the catalog."""
        cat = self.master.catalog
        if cat is None or cat.ca is not None:
            return
        authority = CertAuthority.create(now, validity_s)
        try:
            await self._write([put_ca(authority.cert_pem, authority.key_pem)])
        except CatalogConflict:  # another leader's CA won the race: it is the one
            return
        log.info("cluster CA created", extra={"subject": CA_COMMON_NAME, "expires_unix": round(now + validity_s)})

    def may_sign_certificate(self, identity: Identity) -> bool:
        """Whether to sign a CSR for this caller: an authenticated one (a server's service JWT, or the
        certificate it is renewing); which users are servers (the service ACL) is the RPC layer's check
        before the handler."""
        return identity.authenticated or self.sign_for_unauthenticated

    def sign_certificate(
        self, csr_pem: bytes, identity: Identity, hosts: list[str], now: float, validity_s: int
    ) -> bytes:
        """A node's certificate for its CSR: subject the service user, SANs the node's hosts."""
        if not self.may_sign_certificate(identity):
            raise KuduNotAuthorized(
                f"{identity.describe()} may not have a certificate signed: only authenticated servers may"
            )
        authority = self.cert_authority()
        if authority is None:
            raise KuduServiceUnavailable("the cluster CA does not exist yet; ask again later")
        return authority.sign(csr_pem, self.master.acls.service_user, hosts, now, validity_s)

    # --- catalog access -------------------------------------------------------------------------------

    @property
    def tables(self) -> dict[str, TableRecord]:
        cat = self.master.catalog
        return {} if cat is None else cat.tables

    @property
    def tablets(self) -> dict[str, TabletRecord]:
        cat = self.master.catalog
        return {} if cat is None else cat.tablets

    def tserver_states(self) -> dict[str, TServerStateRecord]:
        """Tserver uuid -> its operator-set state (MAINTENANCE_MODE), as the replicated catalog holds it."""
        cat = self.master.catalog
        return {} if cat is None else dict(cat.tserver_states)

    async def change_tserver_state(self, uuid: str, state: TServerState | None, timeout_s: float) -> bool:
        """Set (or, with None, clear) a tserver's state in the catalog; False if it already was so."""
        self.master.require_leader()
        current = self.tserver_states().get(uuid)
        if (current.state if current is not None else None) == state:
            return False
        record = None if state is None else TServerStateRecord(state, time.time())
        await self._write([set_tserver_state(uuid, record)], timeout_s)
        log.info("tserver state changed", extra={"ts_uuid": uuid, "state": state or "NONE"})
        self._wake.set()
        return True

    async def _write(self, ops: list[Op], timeout_s: float = 30.0) -> None:
        """Replicate one batch; CatalogConflict (ABORTED) if it was planned on a catalog that changed."""
        self.master.require_leader()
        replica = self.master.catalog_replica()
        assert replica is not None
        result = await replica.replicate(encode_ops(ops), timeout_s)
        if isinstance(result, dict) and result.get("conflict"):
            raise CatalogConflict(f"catalog write refused: {result['conflict']}")

    async def _ddl(self, method: str, req: _D, timeout_s: float, plan: Callable[[_D], Plan]) -> dict[str, Any]:
        """Run one DDL exactly once per request id: answer a known id from the catalog, else plan the
        change on the current catalog and write it with its result; plan again if the write conflicts."""
        self.master.require_leader()
        request_id: str | None = req.request_id  # checked at decode
        digest = _request_digest(method, req) if request_id is not None else ""
        deadline = time.monotonic() + timeout_s
        ops: list[Op]
        result: dict[str, Any]
        for attempt in range(MAX_DDL_PLANS):
            if request_id is not None:
                done = self.remembered(request_id, method, digest)
                if done is not None:
                    log.info("DDL retry answered from the catalog", extra={"method": method, "request_id": request_id})
                    return done
            ops, result = plan(req)
            if request_id is not None:
                ops = [
                    *ops,
                    request(request_id, RequestRecord(method, digest, result, time.time())),
                ]
            try:
                await self._write(ops, max(0.05, deadline - time.monotonic()))
            except CatalogConflict as e:
                log.info(
                    "DDL write conflicted; planning it again",
                    extra={"method": method, "request_id": request_id, "attempt": attempt, "error": str(e)},
                )
                if time.monotonic() >= deadline:
                    raise
                continue
            log.info("DDL applied", extra={"method": method, "request_id": request_id, **result})
            self._wake.set()
            return result
        raise CatalogConflict(f"{method}: the catalog kept changing under it ({MAX_DDL_PLANS} plans); retry")

    def remembered(self, request_id: str, method: str, digest: str) -> dict[str, Any] | None:
        """The original reply to an applied request id; INVALID_ARGUMENT if the id was used for another request."""
        cat = self.master.catalog
        entry = None if cat is None else cat.requests.get(request_id)
        if entry is None:
            return None
        if entry.method != method or entry.digest != digest:
            raise KuduInvalidArgument(
                f"request_id {request_id!r} was already used for a different request ({entry.method}); "
                "a retry must repeat the original request exactly",
                {"request_id": request_id},
            )
        return dict(entry.result)

    def find_table(self, name: str | None = None, table_id: str | None = None) -> TableRecord:
        if table_id is not None:
            t = self.tables.get(table_id)
            if t is not None and t.state != "DELETED":
                return t
            raise KuduNotFound(f"table id {table_id!r} not found")
        if name is None:
            raise KuduInvalidArgument("give the table's 'name' (or 'table_id')")
        for t in self.tables.values():
            if t.name == name and t.live:
                return t
        raise KuduNotFound(f'the table does not exist: table_name: "{name}"', {"table_name": name})

    # --- DDL ------------------------------------------------------------------------------------------

    async def create_table(self, req: msg.CreateTableRequest, timeout_s: float) -> dict[str, Any]:
        return await self._ddl("CreateTable", req, timeout_s, self._plan_create_table)

    def _plan_create_table(self, req: msg.CreateTableRequest) -> Plan:
        name = req.name
        if not TABLE_NAME_RE.match(name):
            raise KuduInvalidArgument("'name' must be 1-256 characters without control characters")
        schema = Schema.from_dict(req.schema).with_column_ids()
        pschema = PartitionSchema.from_dict(schema, req.partition_schema or {})
        n = req.num_replicas
        if n < 1 or n > MAX_REPLICAS or n % 2 == 0:
            raise KuduInvalidArgument(f"'num_replicas' must be odd and 1..{MAX_REPLICAS}, got {n!r}")
        bounds = [_wire_bound(b) for b in req.range_bounds or []]
        splits = [_wire_row(s) for s in req.split_rows or []]
        pschema = pschema.with_custom_ranges(bounds)  # ranges with their own hash schema
        partitions = pschema.create_partitions(bounds, splits)
        if len(partitions) > MAX_TABLETS_PER_TABLE:
            raise KuduInvalidArgument(f"{len(partitions)} tablets exceed the limit of {MAX_TABLETS_PER_TABLE}")
        for t in self.tables.values():
            if t.name == name and t.live:
                raise KuduAlreadyPresent(
                    f"table {name} already exists with id {t.id}", {"table_id": t.id, "table_name": name}
                )
        placement = self._placement()
        self._require_live(n, placement.live, "to create a table with the requested replication factor")
        table_id = uuid.uuid4().hex
        tablets = [placement.tablet(table_id, msg.TabletPartition.of(p), n) for p in partitions]
        table = TableRecord(
            id=table_id,
            name=name,
            state="CREATING",
            schema=schema.to_dict(),
            schema_version=0,
            partition_schema=pschema.to_dict(),
            num_replicas=n,
            tablet_ids=tuple(r.id for r in tablets),
            created_at=time.time(),
            owner=_owner(req.owner),
            comment=_comment(req.comment),
        )
        cfg = self.master.config
        if cfg.enable_table_write_limit and (cfg.table_disk_size_limit >= 0 or cfg.table_row_count_limit >= 0):
            table = table.with_extra(
                disk_size_limit=cfg.table_disk_size_limit, row_count_limit=cfg.table_row_count_limit
            )
        return [put(table), *(put(r) for r in tablets)], {"table_id": table_id}

    def _placement(self) -> _Placement:
        live = self.master.ts_manager.live_tservers(time.monotonic())
        return _Placement(live, self._replica_counts(live), self._leader_counts(live), self._address)

    async def wait_ddl_done(
        self, check: Callable[[msg.IsDdlDoneRequest], dict[str, Any]], req: msg.IsDdlDoneRequest, time_left_s: float
    ) -> dict[str, Any]:
        """Answer an Is*Done call, waiting first (up to the request's ``wait_ms``, within the caller's
        deadline) for a background pass to finish the DDL: the client hears at once instead of on its next
        poll."""
        wait_ms = req.wait_ms
        loop = asyncio.get_running_loop()
        until = loop.time() + min(wait_ms / 1000.0, time_left_s)
        while True:
            reply = check(req)
            left = until - loop.time()
            if reply["done"] or left <= 0:
                return reply
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pass_done.wait(), left)

    def _notify_pass(self) -> None:
        done, self._pass_done = self._pass_done, asyncio.Event()
        done.set()

    def is_create_table_done(self, req: msg.IsDdlDoneRequest) -> dict[str, Any]:
        self.master.require_leader()
        t = self.find_table(req.name, req.table_id)
        return {"done": t.state == "RUNNING", "state": t.state, "table_id": t.id}

    async def delete_table(self, req: msg.DeleteTableRequest, timeout_s: float) -> dict[str, Any]:
        return await self._ddl("DeleteTable", req, timeout_s, self._plan_delete_table)

    def _plan_delete_table(self, req: msg.DeleteTableRequest) -> Plan:
        """Kudu's DeleteTable/SoftDeleteTable: a ``reserve_seconds`` of 0 deletes at once, a positive one
        keeps the table SOFT_DELETED (readable, writable, recallable) that long; without one the master's
        ``--default_deleted_table_reserve_seconds`` decides. A SOFT_DELETED table can only be deleted at once."""
        t = self.find_table(req.name, req.table_id)
        reserve = req.reserve_seconds
        if reserve is None:
            reserve = int(self.master.config.default_deleted_table_reserve_seconds)
        if reserve == 0:
            return [put(replace(t, state="DELETING"))], {"table_id": t.id}
        if t.state == "SOFT_DELETED":
            raise KuduInvalidArgument(
                f"soft_deleted table {t.name} should not be soft deleted again", {"table_name": t.name}
            )
        if t.state != "RUNNING":
            raise KuduIllegalState(f"table {t.name} is {t.state}; retry the soft deletion once it is RUNNING")
        soft = replace(t, state="SOFT_DELETED").with_extra(deleted_at=time.time(), reserve_seconds=reserve)
        return [put(soft)], {"table_id": t.id}

    async def recall_table(self, req: msg.RecallDeletedTableRequest, timeout_s: float) -> dict[str, Any]:
        return await self._ddl("RecallDeletedTable", req, timeout_s, self._plan_recall_table)

    def _plan_recall_table(self, req: msg.RecallDeletedTableRequest) -> Plan:
        """Make a SOFT_DELETED table RUNNING again, under a new name if one is given ("" keeps its own)."""
        t = self.tables.get(req.table_id)
        if t is None or t.state != "SOFT_DELETED":
            state = "absent" if t is None else t.state
            raise KuduNotFound(
                f"the table {req.table_id} is not soft-deleted ({state}): it can't be recalled",
                {"table_id": req.table_id},
            )
        name = req.new_table_name or t.name
        if not TABLE_NAME_RE.match(name):
            raise KuduInvalidArgument("'new_table_name' must be 1-256 characters without control characters")
        for o in self.tables.values():
            if o.name == name and o.id != t.id and o.live:
                raise KuduAlreadyPresent(f"table {name} already exists with id {o.id}", {"table_name": name})
        back = replace(t, state="RUNNING", name=name).with_extra(deleted_at=None, reserve_seconds=0)
        return [put(back)], {"table_id": t.id}

    async def alter_table(self, req: msg.AlterTableRequest, timeout_s: float) -> dict[str, Any]:
        """Rename the table, change columns, add or drop range partitions: one catalog write; the
        leader then pushes the new schema version to every tablet and creates/deletes range tablets."""
        return await self._ddl("AlterTable", req, timeout_s, self._plan_alter_table)

    def _plan_alter_table(self, req: msg.AlterTableRequest) -> Plan:
        t = self.find_table(req.name, req.table_id)
        if t.state == "SOFT_DELETED":
            raise KuduInvalidArgument(f"soft_deleted table {t.name} should not be altered", {"table_name": t.name})
        if req.disk_size_limit is not None or req.row_count_limit is not None:
            return self._plan_set_limits(t, req)
        if t.state == "CREATING":
            raise KuduIllegalState(f"table {t.name} is still being created; retry AlterTable later")
        new_name = req.new_name
        if new_name is not None:
            if not TABLE_NAME_RE.match(new_name):
                raise KuduInvalidArgument("'new_name' must be 1-256 characters without control characters")
            if any(o.name == new_name and o.id != t.id and o.live for o in self.tables.values()):
                raise KuduAlreadyPresent(f"table {new_name} already exists")
        meta: dict[str, Any] = {}  # owner / comment: catalog-only, no tablet is touched
        if req.new_owner is not UNSET:
            meta["owner"] = _owner(req.new_owner)
        if req.new_comment is not UNSET:
            meta["comment"] = _comment(req.new_comment)
        if req.num_replicas is not None and req.num_replicas != t.num_replicas:
            meta["num_replicas"] = self._new_replication_factor(req.num_replicas)
        schema = Schema.from_dict(t.schema)
        alter = _Alter(
            schema=schema,
            pschema=PartitionSchema.from_dict(schema, t.partition_schema),
            next_id=max(0 if t.next_column_id is UNSET else t.next_column_id, schema.next_column_id),
            tablet_ids=list(t.tablet_ids),
            placement=self._placement(),
        )
        for i, step in enumerate(req.alter_schema_steps or []):
            if not isinstance(step, dict) or not isinstance(step.get("type"), str):
                raise KuduInvalidArgument(f"alter_schema_steps[{i}] must be a map with a 'type'")
            if step["type"] in ("ADD_RANGE_PARTITION", "DROP_RANGE_PARTITION"):
                self._alter_range(alter, t, step, i)
            else:
                alter.column_step(step, i)
        version = t.schema_version + (1 if alter.schema_changed else 0)
        work = alter.schema_changed or alter.dropped or len(alter.tablet_ids) != len(t.tablet_ids)
        table = replace(
            t,
            **meta,
            name=new_name or t.name,
            schema=alter.schema.to_dict(),
            schema_version=version,
            partition_schema=alter.pschema.to_dict(),
            next_column_id=alter.next_id,
            tablet_ids=tuple(alter.tablet_ids),
            dropped_tablet_ids=(*t.dropped(), *alter.dropped),
            state="ALTERING" if work else t.state,
        )
        return [put(table), *(put(r) for r in alter.new_tablets)], {"table_id": t.id, "schema_version": version}

    def _new_replication_factor(self, n: int) -> int:
        """A table's new replication factor: odd, at most MAX_REPLICAS and no more than the live tablet
        servers (the master's re-replication adds or trims each tablet's voters to it afterwards)."""
        if isinstance(n, bool) or n < 1 or n > MAX_REPLICAS or n % 2 == 0:
            raise KuduInvalidArgument(f"illegal replication factor {n}: it must be odd and 1..{MAX_REPLICAS}")
        self._require_live(n, self._placement().live, "for the new replication factor")
        return n

    def _plan_set_limits(self, t: TableRecord, req: msg.AlterTableRequest) -> Plan:
        """Kudu's table limits: -1 removes one, a value >= 0 sets it; only with --enable_table_write_limit
        and never together with another alteration."""
        if not self.master.config.enable_table_write_limit:
            raise KuduNotSupported(
                "altering table limit is not supported because --enable_table_write_limit is not enabled"
            )
        if (
            req.new_name is not None
            or req.new_owner is not UNSET
            or req.new_comment is not UNSET
            or req.alter_schema_steps
            or req.num_replicas is not None
        ):
            raise KuduConfigurationError("altering table limit cannot be combined with other alterations")
        changes: dict[str, Any] = {}
        for field_name, value, what in (
            ("disk_size_limit", req.disk_size_limit, "disk size"),
            ("row_count_limit", req.row_count_limit, "row count"),
        ):
            if value is None:
                continue
            if value < -1:
                raise KuduInvalidArgument(f"{what} limit must be greater than or equal to -1")
            changes[field_name] = value
        table = t.with_extra(**changes)
        return [put(table)], {"table_id": t.id, "schema_version": t.schema_version}

    def _alter_range(self, alter: _Alter, t: TableRecord, step: dict[str, Any], i: int) -> None:
        """ADD_RANGE_PARTITION (new tablets, placed now) or DROP_RANGE_PARTITION (its tablets dropped)."""
        kind = step["type"]
        bound = _wire_bound(
            {
                "lower": step.get("lower"),
                "upper": step.get("upper"),
                "lower_bound_type": step.get("lower_bound_type", "inclusive"),
                "upper_bound_type": step.get("upper_bound_type", "exclusive"),
            }
        )
        if kind == "ADD_RANGE_PARTITION" and step.get("hash_dimensions") is not None:
            bound["hash_dimensions"] = step["hash_dimensions"]  # a range with its own hash schema
        with_bound = alter.pschema.with_custom_ranges([bound])
        [(lo, hi)] = with_bound.range_partitions([bound])
        current = {tid: self.tablets[tid] for tid in alter.tablet_ids if tid in self.tablets}
        ranges = {tid: (r.partition.range_key_start, r.partition.range_key_end) for tid, r in current.items()}
        if kind == "DROP_RANGE_PARTITION":
            same = [tid for tid, r in ranges.items() if r == (lo, hi)]
            if not same:
                raise KuduInvalidArgument(f"alter_schema_steps[{i}]: no range partition matches that bound")
            alter.tablet_ids = [tid for tid in alter.tablet_ids if tid not in same]
            alter.dropped += same
            alter.pschema = alter.pschema.without_custom_range(lo, hi)
            return
        for rlo, rhi in ranges.values():
            if (not hi or rlo < hi) and (not rhi or lo < rhi):
                raise KuduInvalidArgument(f"alter_schema_steps[{i}]: new range partition overlaps an existing one")
        n = t.num_replicas
        self._require_live(n, alter.placement.live, "for a new range partition's replicas")
        alter.pschema = with_bound
        for p in alter.pschema.partitions_for_ranges([(lo, hi)]):
            rec = alter.placement.tablet(t.id, msg.TabletPartition.of(p), n)
            alter.new_tablets.append(rec)
            alter.tablet_ids.append(rec.id)

    def is_alter_table_done(self, req: msg.IsDdlDoneRequest) -> dict[str, Any]:
        self.master.require_leader()
        t = self.find_table(req.name, req.table_id)
        return {"done": t.state == "RUNNING", "state": t.state, "schema_version": t.schema_version}

    def list_tables(self, req: msg.ListTablesRequest) -> dict[str, Any]:
        self.master.require_leader()
        name_filter = req.name_filter
        out = [
            {"name": t.name, "table_id": t.id, "state": t.state}
            for t in self.tables.values()
            if t.live
            and (t.state == "SOFT_DELETED") == req.show_soft_deleted
            and (not name_filter or name_filter in t.name)
        ]
        return {"tables": sorted(out, key=lambda t: t["name"])}

    def list_in_flight_tables(self) -> dict[str, Any]:
        """Kudu's ListInFlightTables: the tables being created or altered, and how many of their tablets
        are still being created (or still lack the new schema at their leader)."""
        self.master.require_leader()
        out = []
        for t in self.tables.values():
            if t.state not in ("CREATING", "ALTERING"):
                continue
            busy = 0
            for tid in t.tablet_ids:
                rec = self.tablets.get(tid)
                if rec is None:
                    continue
                if rec.state == "CREATING":
                    busy += 1
                elif t.state == "ALTERING":
                    leader = self.master.ts_manager.leader_of(tid)
                    have = self.master.ts_manager.tablet_replicas(tid).get(leader or "", {}).get("schema_version", -1)
                    busy += int(leader is None or have < t.schema_version)
            out.append(
                {
                    "table_id": t.id,
                    "name": t.name,
                    "state": t.state,
                    "num_tablets": len(t.tablet_ids),
                    "num_tablets_in_flight": busy,
                }
            )
        return {"tables": sorted(out, key=lambda x: x["name"])}

    def get_table_schema(self, req: msg.TableRef) -> dict[str, Any]:
        self.master.require_leader()
        t = self.find_table(req.name, req.table_id)
        return {
            "table_id": t.id,
            "name": t.name,
            "schema": t.schema,
            "schema_version": t.schema_version,
            "partition_schema": t.partition_schema,
            "num_replicas": t.num_replicas,
            "owner": t.owner,
            "comment": t.comment,
            "create_table_done": t.state == "RUNNING",
        }

    def get_table_statistics(self, req: msg.TableRef) -> msg.GetTableStatisticsResponse:
        """Kudu's GetTableStatistics: the sums of each tablet leader's last reported live row count and
        on-disk size (-1 while a tablet's leader has not reported them), and the table's limits."""
        self.master.require_leader()
        t = self.find_table(req.name, req.table_id)
        rows, size = self._table_figures(t)
        disk_limit, row_limit = t.limits()
        return msg.GetTableStatisticsResponse(
            table_id=t.id, on_disk_size=size, live_row_count=rows, disk_size_limit=disk_limit, row_count_limit=row_limit
        )

    def _table_figures(self, t: TableRecord) -> tuple[int, int]:
        """(live rows, bytes on disk) of a table from its tablet leaders' reports; -1 for a figure some
        tablet has not reported."""
        rows = size = 0
        for tid in t.tablet_ids:
            leader = self.master.ts_manager.leader_of(tid)
            rep = self.master.ts_manager.tablet_replicas(tid).get(leader or "", {})
            r, b = rep.get("live_row_count"), rep.get("on_disk_size")
            rows = -1 if rows < 0 or r is None else rows + int(r)
            size = -1 if size < 0 or b is None else size + int(b)
        return rows, size

    def write_limited_tables(self) -> list[str]:
        """Ids of the tables whose reported size or row count reached ``--table_write_limit_ratio`` of
        their limit: their tablets refuse inserts and updates (deletes still free space)."""
        cfg = self.master.config
        if not cfg.enable_table_write_limit:
            return []
        ratio = float(cfg.table_write_limit_ratio)
        out = []
        for t in self.tables.values():
            disk_limit, row_limit = t.limits()
            if not t.live or (disk_limit < 0 and row_limit < 0):
                continue
            rows, size = self._table_figures(t)
            if (disk_limit >= 0 and size >= disk_limit * ratio) or (row_limit >= 0 and rows >= row_limit * ratio):
                out.append(t.id)
        return sorted(out)

    def get_table_locations(self, req: msg.GetTableLocationsRequest) -> msg.GetTableLocationsResponse:
        """Tablets of a table whose partition-key range meets [start, end), from the caches."""
        self.master.require_leader()
        t = self.find_table(req.name, req.table_id)
        if t.state == "DELETING":
            # The tablets of a deleted table leave the catalog one by one: answering with what is left
            # would let a client take the missing ones for dropped range partitions.
            raise KuduNotFound(f"table {t.name} not found: it was deleted", {"table_name": t.name})
        start = req.partition_key_start or b""
        end = req.partition_key_end or b""
        limit = req.max_returned
        out = []
        for tid in t.tablet_ids:
            rec = self.tablets.get(tid)
            if rec is None:
                continue
            p = rec.partition
            if end and p.partition_key_start >= end:
                continue
            if p.partition_key_end and p.partition_key_end <= start:
                continue
            out.append(self.location(rec))
        out.sort(key=lambda loc: loc.partition.partition_key_start)
        return msg.GetTableLocationsResponse(table_id=t.id, tablets=out[:limit], schema_version=t.schema_version)

    def get_tablet_locations(self, req: msg.GetTabletLocationsRequest) -> msg.GetTabletLocationsResponse:
        self.master.require_leader()
        ids = req.tablet_ids
        out: list[msg.TabletLocation] = []
        missing: list[str] = []
        for tid in ids:
            rec = self.tablets.get(tid)
            if rec is None:
                missing.append(tid)
            else:
                out.append(self.location(rec))
        return msg.GetTabletLocationsResponse(tablets=out, missing=missing)

    def location(self, rec: TabletRecord) -> msg.TabletLocation:
        """Replicas as the tservers report them (the newest config), else the catalog's placement."""
        info = self.master.ts_manager.tablet_info(rec.id)
        replicas: list[msg.ReplicaLocation] = []
        if info is not None and info.get("config"):
            cfg = info["config"]
            peers = cfg.get("peers", {})
            for u in [*cfg.get("voters", []), *cfg.get("non_voters", [])]:
                role = (
                    "LEADER"
                    if u == info.get("leader_uuid")
                    else "FOLLOWER"
                    if u in cfg.get("voters", [])
                    else "LEARNER"
                )
                replicas.append(msg.ReplicaLocation(u, peers.get(u) or self._address(u), role))
        else:
            replicas = [msg.ReplicaLocation(u, a, "UNKNOWN") for u, a in rec.replicas.items()]
        return msg.TabletLocation(rec.id, rec.partition, rec.state, replicas)

    def _require_live(self, n: int, live: list[str], what: str) -> None:
        """Enough live tservers for ``n`` replicas, else INVALID_ARGUMENT; but SERVICE_UNAVAILABLE (retry)
        while a master that started moments ago has not yet heard from tservers the catalog places
        replicas on: after a restart they register again only with their next heartbeats."""
        if len(live) >= n:
            return
        details = {"live_tservers": len(live)}
        unregistered = {
            u for rec in self.tablets.values() for u in rec.replicas if self.master.ts_manager.registration(u) is None
        }
        uptime = self.master.uptime_s()
        if unregistered and uptime < REGISTRATION_GRACE_S:
            raise KuduServiceUnavailable(
                f"not enough live tablet servers {what} ({len(live)} of {n}) yet: this master started "
                f"{uptime:.1f}s ago and {len(unregistered)} tablet servers holding replicas have not registered "
                "with it again; retry",
                details,
            )
        raise KuduInvalidArgument(
            f"not enough live tablet servers {what} {n}; {len(live)} tablet servers are alive", details
        )

    def _replica_counts(self, live: list[str]) -> dict[str, int]:
        counts = {u: 0 for u in live}
        for rec in self.tablets.values():
            for u in rec.replicas:
                if u in counts:
                    counts[u] += 1
        return counts

    def _leader_counts(self, live: list[str]) -> dict[str, int]:
        """Tablet leaders per live server, as the tservers' reports show them."""
        counts = {u: 0 for u in live}
        for tid in self.tablets:
            leader = self.master.ts_manager.leader_of(tid)
            if leader is not None and leader in counts:
                counts[leader] += 1
        return counts

    def tserver_address(self, ts_uuid: str) -> str:
        """The RPC address a tserver registered with ("" if unknown)."""
        return self._address(ts_uuid)

    def _address(self, ts_uuid: str) -> str:
        reg = self.master.ts_manager.registration(ts_uuid)
        return str(reg["rpc_address"]) if reg else ""

    # --- the leader's background work ----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="catalog-manager")

    def reports_arrived(self) -> None:
        """A tserver reported replica changes: while DDL is in progress, run the next pass now (a new
        tablet's first leader makes CreateTable done) instead of at the next 0.5 s tick."""
        if any(t.state != "RUNNING" for t in self.tables.values()):
            self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):  # a pass every 0.5 s, or at once when DDL arrives
                await asyncio.wait_for(self._wake.wait(), 0.5)
            self._wake.clear()
            self.sync_tsks(time.time())
            if not self.master.check_leadership():
                self._leader_since = None
                continue
            if self._leader_since is None:
                self._leader_since = time.monotonic()
            try:
                await self.rotate_tsks(time.time())
                await self.process_once()
            except KuduBadStatus as e:
                log.info("catalog work deferred", extra={"error": str(e)})
            except Exception:
                log.exception("catalog background work failed; retrying")
            finally:
                self._notify_pass()

    # --- token-signing keys --------------------------------------------------------------------------

    def sync_tsks(self, wall_now: float) -> None:
        """Hand the catalog's new token-signing keys to the signer and their public halves to this master's
        verifier; forget expired ones."""
        cat = self.master.catalog
        if cat is not None:
            for seq, rec in cat.tsks.items():
                if seq in self._tsk_seqs or rec.expire <= wall_now:
                    continue
                key = TokenSigningKey.from_record(
                    {"seq": rec.seq, "private": rec.private, "activate": rec.activate, "expire": rec.expire}
                )
                self.token_signer.add(key)
                self.master.token_verifier.add([key.verification_key()])
                self._tsk_seqs.add(seq)
        self.token_signer.drop_expired(wall_now)
        self.master.token_verifier.drop_expired(wall_now)

    async def rotate_tsks(self, wall_now: float) -> None:
        """The leader's key rotation: when no key signs, or none waits to take over, make one, write it to
        the catalog, and only then sign with it (a key the other masters could lose never signs)."""
        self.sync_tsks(wall_now)
        if not self.token_signer.next_key_needed(wall_now):
            return
        key = self.token_signer.new_key(wall_now)
        cat = self.master.catalog
        newest = max(cat.tsks, default=-1) if cat is not None else -1
        if key.seq <= newest:  # the catalog still holds expired keys the signer has forgotten: seqs never repeat
            key = dataclasses.replace(key, seq=newest + 1)
        try:
            await self._write([put_tsk(TskRecord(key.seq, key.private_raw, key.activate_unix, key.expire_unix))])
        except CatalogConflict as e:  # another leader's key took the seq: the next pass sees it
            log.info("token-signing key not written", extra={"seq": key.seq, "error": str(e)})
            return
        log.info(
            "token-signing key made",
            extra={"seq": key.seq, "activate_unix": key.activate_unix, "expire_unix": key.expire_unix},
        )
        self.sync_tsks(wall_now)

    def tsks_newer_than(self, seq: int, wall_now: float) -> list[dict[str, Any]] | None:
        """The public halves of the live keys, for a tserver that knows keys up to ``seq`` only (None if none
        is newer)."""
        if self.token_verifier_max_seq() <= seq:
            return None
        return [k.to_record() for k in self.token_signer.verification_keys(wall_now)]

    def token_verifier_max_seq(self) -> int:
        return max(self._tsk_seqs, default=-1)

    def sign_authn_token(self, user: str, wall_now: float) -> tuple[bytes, float]:
        """An authn token for ``user`` and its expiry; SERVICE_UNAVAILABLE until the first key is written."""
        if self.token_signer.signing_key(wall_now) is None:
            raise KuduServiceUnavailable("no token-signing key is active yet on this master; retry shortly")
        validity = float(self.master.config.authn_token_validity_seconds)
        token = self.token_signer.sign("authn", {"user": user}, wall_now, validity)
        key = self.token_signer.signing_key(wall_now)
        assert key is not None
        return token, min(wall_now + validity, key.expire_unix)

    async def process_once(self) -> None:
        """One pass: create CREATING tablets, push a new schema to ALTERING tables' tablet leaders,
        delete dropped tablets and DELETING tables, and mark tables RUNNING once all of it is done."""
        now = time.monotonic()
        await self._purge_expired(time.time())
        for table in list(self.tables.values()):
            if table.state == "DELETING":
                remaining, ops = self._delete_tablets(table.tablet_ids, now)
                if not remaining:
                    ops.append(delete("table", table.id))
                    log.info("table deleted", extra={"table": table.name, "table_id": table.id})
                if ops:
                    await self._write(ops)
            elif table.state in ("CREATING", "ALTERING"):
                await self._drive_table(table.id, now)
        await self._rereplicate(now)

    async def _purge_expired(self, wall_now: float) -> None:
        """Turn SOFT_DELETED tables whose reserve time ran out DELETING (then deleted like any other), at
        most MAX_PURGES_PER_PASS per pass; the times are in the replicated catalog, so a new leader
        purges on the same schedule."""
        expired = [t for t in self.tables.values() if (at := t.purge_at()) is not None and at <= wall_now]
        for t in expired[:MAX_PURGES_PER_PASS]:
            log.info("soft-deleted table's reserve time is over: purging it", extra={"table": t.name, "table_id": t.id})
            try:
                await self._write([put(replace(t, state="DELETING"))])
            except CatalogConflict as e:  # recalled (or purged) meanwhile: the next pass sees the new state
                log.info("purge of a soft-deleted table deferred", extra={"table_id": t.id, "error": str(e)})

    async def _drive_table(self, table_id: str, now: float) -> None:
        table = self.tables.get(table_id)  # this pass's list may predate a write made since
        if table is None or table.state not in ("CREATING", "ALTERING"):
            return
        ops: list[Op] = []
        pending = False
        for tid in table.tablet_ids:
            rec = self.tablets.get(tid)
            if rec is None:
                continue
            info = self.master.ts_manager.tablet_info(tid)
            leader: str | None = info.get("leader_uuid") if info is not None else None
            if rec.state == "CREATING":
                if leader:
                    ops.append(put(replace(rec, state="RUNNING")))
                    continue
                pending = True
                self._ask_create(table, rec, now)
            elif table.state == "ALTERING":
                pending = self._push_schema(table, tid, leader, now) or pending
        remaining, drop_ops = self._delete_tablets(table.dropped(), now)
        ops += drop_ops
        if not pending and not remaining:
            ops.append(put(replace(table, state="RUNNING", dropped_tablet_ids=())))
            log.info(
                "table is RUNNING",
                extra={"table": table.name, "table_id": table.id, "schema_version": table.schema_version},
            )
        if ops:
            await self._write(ops)

    def _ask_create(self, table: TableRecord, rec: TabletRecord, now: float) -> None:
        """Ask every replica's tserver to create a CREATING tablet (until one reports itself its leader)."""
        req = {
            "tablet_id": rec.id,
            "table_id": table.id,
            "table_name": table.name,
            "schema": table.schema,
            "schema_version": table.schema_version,
            "partition": to_builtins(rec.partition),
            "partition_schema": table.partition_schema,
            "peers": rec.replicas,
        }
        if rec.first_leader in rec.replicas:
            req["first_leader"] = rec.first_leader
        for u, addr in rec.replicas.items():
            self._ask(("create", rec.id, u), now, addr, "CreateTablet", req)

    def _push_schema(self, table: TableRecord, tid: str, leader: str | None, now: float) -> bool:
        """Send an ALTERING table's schema to a tablet's leader; True while the leader lacks it."""
        version = table.schema_version
        have = self.master.ts_manager.tablet_replicas(tid).get(leader or "", {}).get("schema_version", -1)
        if leader is not None and have >= version:
            return False
        if leader is not None:
            self._ask(
                ("alter", tid, f"{leader}@{version}"),
                now,
                self._address(leader),
                "AlterSchema",
                {"tablet_id": tid, "schema": table.schema, "schema_version": version},
            )
        return True

    def _delete_tablets(self, tablet_ids: Sequence[str], now: float) -> tuple[list[str], list[Op]]:
        """Ask every server still reporting these tablets to delete them; drop the records of those gone."""
        remaining: list[str] = []
        ops: list[Op] = []
        for tid in tablet_ids:
            rec = self.tablets.get(tid)
            if rec is None:
                continue
            reported = self.master.ts_manager.tablet_replicas(tid)
            holders = {u: self._address(u) for u in reported} | dict(rec.replicas)
            still = [u for u in holders if u in reported]
            if not still and not any(self._may_hold_unreported(u, now) for u in holders):
                ops.append(delete("tablet", tid))
                continue
            remaining.append(tid)
            for u in still:
                self._ask(
                    ("delete", tid, u), now, holders[u], "DeleteTablet", {"tablet_id": tid, "delete_type": "DELETED"}
                )
        return remaining, ops

    def _may_hold_unreported(self, ts_uuid: str, now: float) -> bool:
        """Whether a tserver may hold a replica its reports do not show: it has not sent this leader a full
        report yet and is live, or has not registered with this master yet (which started less than an
        unresponsive-timeout ago). A new leader's empty directory is no proof that a tablet is gone."""
        tsm = self.master.ts_manager
        if not tsm.needs_full_report(ts_uuid):
            return False
        if tsm.registration(ts_uuid) is None:
            return self.master.uptime_s() < tsm.unresponsive_timeout_s
        return tsm.is_live(ts_uuid, now)

    def deleted_tablets_on(self, ts_uuid: str) -> list[msg.TabletToDelete]:
        """For a heartbeat answer: replicas ``ts_uuid`` reports of tablets the catalog deleted (a late
        CreateTablet, a tserver that was down while its table was deleted), to be deleted there too."""
        cat = self.master.catalog
        if cat is None:
            return []
        return [
            msg.TabletToDelete(tablet_id=tid, reason="its tablet was deleted from the catalog", delete_type="DELETED")
            for tid in sorted(self.master.ts_manager.tablets_on(ts_uuid))
            if tid in cat.deleted_tablets and tid not in cat.tablets
        ]

    def _ask(self, key: tuple[str, str, str], now: float, address: str, method: str, req: dict[str, Any]) -> bool:
        """Fire an idempotent tserver RPC at most every RPC_RETRY_S per (action, tablet, server); True if sent."""
        if not address or now - self._asked.get(key, -RPC_RETRY_S) < RPC_RETRY_S:
            return False
        self._asked[key] = now

        async def call() -> None:
            try:
                reply = await self.master.rpc_client.call(address, "TabletServer", method, req, timeout_s=10.0)
                if (
                    method == "DeleteTablet"
                    and isinstance(reply, dict)
                    and reply.get("deleted") is False
                    and key[2] in self.master.ts_manager.tablet_replicas(key[1])
                ):
                    # It had nothing to delete, yet the directory says it reports the tablet: a report was
                    # lost. A full one puts the directory right (else the deletion would wait forever).
                    self.master.ts_manager.request_full_report(key[2])
            except KuduBadStatus as e:
                log.info(
                    "tserver call for the catalog failed; will retry",
                    extra={"method": method, "tablet": key[1], "server": key[2], "error": str(e)},
                )

        self.master.spawn_background(call())
        return True

    # --- re-replication (Kudu's 3-4-3 scheme; the policy is in rereplication.py) ----------------------

    async def _rereplicate(self, now: float) -> None:
        """Plan and send the next config change of every RUNNING tablet short of healthy replicas,
        tombstone replicas no longer in their tablet's config, and keep the catalog's placement in step
        with the reported configs."""
        tsm = self.master.ts_manager
        leader_since = self._leader_since if self._leader_since is not None else now
        if len(self._asked) > 10_000:  # rate-limit keys of finished work (they name config indexes)
            self._asked = {k: t for k, t in self._asked.items() if now - t < 60.0}
        live = tsm.live_tservers(now)
        if any(tsm.needs_full_report(u) for u in live):
            return  # a new leader's directory is not trustworthy until every live tserver sent a full report
        failed_after = float(self.master.config.follower_unavailable_considered_failed_sec)

        def silent(u: str) -> float:
            s = tsm.silent_for(u, now)
            return now - leader_since if s is None else s  # never heard from: count from our leadership

        views: list[TabletView] = []
        seen: set[str] = set(live)
        ops: list[Op] = []
        for table in self.tables.values():
            if not table.live:
                continue
            for tid in table.tablet_ids:
                rec = self.tablets.get(tid)
                if rec is None or rec.state != "RUNNING":
                    continue
                view = self._tablet_view(rec, table.num_replicas, now)
                if view is None:
                    continue
                placement = {u: view.peers.get(u) or rec.replicas.get(u) or self._address(u) for u in view.members}
                if placement != rec.replicas:
                    ops.append(put(replace(rec, replicas=placement)))
                    log.info(
                        "tablet placement follows its reported config",
                        extra={"tablet": tid, "config_index": view.config_index, "replicas": sorted(placement)},
                    )
                seen |= view.members | set(view.replica_states)
                if tid not in self._rerep_busy:
                    views.append(view)
        if ops:
            await self._write(ops)
        failed = frozenset(u for u in seen if silent(u) > failed_after)
        usable = frozenset(live) - failed
        cluster = ClusterView(
            live=usable,
            failed=failed,
            addresses={u: self._address(u) for u in seen},
            load=self._replica_counts(sorted(usable)),
            fresh_excess=self._fresh_excess(views, now),
            stuck_learners=self._stuck_learners(views, now, failed_after),
            maintenance=frozenset(self.tserver_states()),
        )
        in_flight_adds = sum(1 for op, _, _ in self._rerep_busy.values() if op == rereplication.ADD_LEARNER)
        for action in rereplication.plan(views, cluster, rereplication.MAX_CONCURRENT_REREPLICATIONS, in_flight_adds):
            if isinstance(action, Tombstone):
                if self._ask(
                    ("tombstone", action.tablet_id, action.server),
                    now,
                    action.address,
                    "DeleteTablet",
                    {
                        "tablet_id": action.tablet_id,
                        "delete_type": "TOMBSTONED",
                        "cas_config_index": action.cas_config_index,
                    },
                ):
                    log.info(
                        "re-replication: tombstoning a replica that left the config",
                        extra={"tablet": action.tablet_id, "server": action.server, "reason": action.reason},
                    )
            else:
                self._change_config(action, now)

    def _fresh_excess(self, views: list[TabletView], now: float) -> frozenset[str]:
        """Tablets with more voters than their replication factor for less than TRIM_GRACE_S at their
        current config (the clock restarts when the config changes)."""
        over = {v.tablet_id: v.config_index for v in views if len(v.voters) > v.num_replicas}
        for tid in [t for t in self._excess_since if t not in over]:
            del self._excess_since[tid]
        fresh = set()
        for tid, index in over.items():
            since = self._excess_since.get(tid)
            if since is None or since[0] != index:
                since = self._excess_since[tid] = (index, now)
            if now - since[1] < TRIM_GRACE_S:
                fresh.add(tid)
        return frozenset(fresh)

    def _stuck_learners(self, views: list[TabletView], now: float, limit_s: float) -> frozenset[tuple[str, str]]:
        """Learners in their tablet's config for longer than ``limit_s`` whose replica is neither RUNNING
        nor being copied now (the leader retries a failed copy, so one that keeps failing shows up here)."""
        current = {(v.tablet_id, u): v for v in views for u in v.non_voters}
        for key in [k for k in self._learner_since if k not in current]:
            del self._learner_since[key]
        stuck = set()
        for key, view in current.items():
            since = self._learner_since.setdefault(key, now)
            state = view.replica_states.get(key[1])
            if now - since > limit_s and state not in (rereplication.RUNNING, rereplication.COPYING):
                stuck.add(key)
        return frozenset(stuck)

    def _tablet_view(self, rec: TabletRecord, num_replicas: int, now: float) -> TabletView | None:
        """The reported state of one tablet, or None while it has no reported config. The leader counts
        only if its own report says it leads in the newest term and its server is live."""
        tid = rec.id
        tsm = self.master.ts_manager
        info = tsm.tablet_info(tid)
        if info is None or not info.get("config") or not info["config"]["voters"]:
            return None
        cfg = info["config"]
        busy = self._rerep_busy.get(tid)
        if busy is not None and busy[1] is not None and (cfg["opid_index"] >= busy[1] or now > busy[2]):
            del self._rerep_busy[tid]  # the reports show the change (or we stop waiting for them)
        replicas = info["replicas"]
        leader = info.get("leader_uuid")
        mine = replicas.get(leader or "")
        if (
            mine is None
            or mine.get("role") != "LEADER"
            or mine.get("state") != "RUNNING"
            or mine.get("term") != info.get("term")
            or not tsm.is_live(leader or "", now)
        ):
            leader = None
        kept = frozenset(cfg.get("kept_non_voters") or ())
        voters, non_voters = frozenset(cfg["voters"]), frozenset(cfg["non_voters"]) - kept
        hint = self._replace_hints.get(tid)
        if hint is not None and hint not in voters:
            del self._replace_hints[tid]  # the replaced voter is gone: done
            hint = None
        return TabletView(
            tid,
            num_replicas,
            cfg["opid_index"],
            voters,
            non_voters,
            dict(cfg["peers"]),
            leader,
            {u: str(r.get("state")) for u, r in replicas.items()},
            hint,
            kept,
        )

    # --- what the auto-rebalancer reads and does (its rounds are in auto_rebalancer.py) --------------------

    def running_tablet_views(self, now: float) -> list[tuple[TableRecord, str, TabletView | None]]:
        """(table, tablet id, reported view or None) of every RUNNING tablet of every live table."""
        out: list[tuple[TableRecord, str, TabletView | None]] = []
        for table in self.tables.values():
            if not table.live:
                continue
            for tid in table.tablet_ids:
                rec = self.tablets.get(tid)
                if rec is not None and rec.state == "RUNNING":
                    out.append((table, tid, self._tablet_view(rec, table.num_replicas, now)))
        return out

    def config_change_in_flight(self, tablet_id: str) -> bool:
        """Whether a config change the master sent for this tablet is not yet in the reports."""
        return tablet_id in self._rerep_busy

    def start_replica_move(self, view: TabletView, src: str, dst: str, reason: str, now: float) -> None:
        """Move a replica the way re-replication replaces one: ``dst`` joins as a learner marked as replacing
        ``src``; once its copy runs it is promoted, and the excess voter removed is ``src`` (the trim follows
        the replace hint). ``src`` must not lead the tablet (a leader is never trimmed)."""
        if view.leader is None or view.leader == src:
            raise KuduIllegalState(f"tablet {view.tablet_id}: a replica move needs a leader other than {src}")
        self._change_config(
            ChangeConfig(
                view.tablet_id,
                rereplication.ADD_LEARNER,
                dst,
                view.config_index,
                view.leader,
                view.peers.get(view.leader) or self._address(view.leader),
                reason,
                address=self._address(dst),
                replacing=src,
            ),
            now,
        )

    def _change_config(self, action: ChangeConfig, now: float) -> None:
        """Send one planned config change to the tablet leader (rate-limited per step; at most one in
        flight per tablet); on success wait for the reports to show it before planning the next."""
        tid = action.tablet_id
        key = ("rerep", tid, f"{action.op}:{action.peer}@{action.cas_config_index}")
        # A promotion refused because the learner's log is a moment behind is worth retrying soon.
        retry_s = PROMOTE_RETRY_S if action.op == rereplication.PROMOTE else RPC_RETRY_S
        if now - self._asked.get(key, -retry_s) < retry_s:
            return
        self._asked[key] = now
        self._rerep_busy[tid] = (action.op, None, now + CHANGE_CONFIG_TIMEOUT_S + SETTLE_S)
        if action.op == rereplication.ADD_LEARNER and action.replacing:
            self._replace_hints[tid] = action.replacing
        req: dict[str, Any] = {
            "group": tid,
            "op": action.op,
            "peer": action.peer,
            "cas_config_index": action.cas_config_index,
        }
        if action.address:
            req["address"] = action.address
        log.info(
            "re-replication: asking the tablet leader to change its config",
            extra={
                "tablet": tid,
                "op": action.op,
                "peer": action.peer,
                "leader": action.leader,
                "cas_config_index": action.cas_config_index,
                "reason": action.reason,
            },
        )

        async def call() -> None:
            index: int | None = None
            try:
                resp = await self.master.rpc_client.call(
                    action.leader_address, "Consensus", "ChangeConfig", req, timeout_s=CHANGE_CONFIG_TIMEOUT_S
                )
                got = resp.get("config_index") if isinstance(resp, dict) else None
                index = got if isinstance(got, int) else None
                log.info(
                    "re-replication: config change committed",
                    extra={"tablet": tid, "op": action.op, "peer": action.peer, "config_index": index},
                )
            except KuduBadStatus as e:
                log.info(
                    "re-replication: config change refused or failed; will retry",
                    extra={"tablet": tid, "op": action.op, "peer": action.peer, "error": str(e)},
                )
            finally:
                if index is None:
                    self._rerep_busy.pop(tid, None)
                else:
                    self._rerep_busy[tid] = (action.op, index, time.monotonic() + SETTLE_S)
                self._wake.set()

        self.master.spawn_background(call())


def _canonical(v: Any) -> Any:
    """The request with map keys in a fixed order, so a retry re-encoded elsewhere has the same digest."""
    if isinstance(v, dict):
        return [[str(k), _canonical(x)] for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))]
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    return v


def _request_digest(method: str, req: DdlRequest) -> str:
    """What identifies a request besides its id: the method and every field but ``request_id``."""
    body = {k: v for k, v in to_builtins(req).items() if k != "request_id"}
    packed = msgpack.packb([method, _canonical(body)], use_bin_type=True, default=repr)
    return hashlib.sha256(packed).hexdigest()[:32]


def _step_str(step: dict[str, Any], key: str, i: int) -> str:
    v = step.get(key)
    if not isinstance(v, str) or not v:
        raise KuduInvalidArgument(f"alter_schema_steps[{i}]: '{key}' must be a column name")
    return v


def _wire_row(row: Any) -> Any:
    """A bound row from the wire: a map column -> value or a list of values (tagged values decoded)."""
    if isinstance(row, dict):
        return {k: value_from_wire(v) for k, v in row.items()}
    return value_from_wire(row)


def _owner(v: Any) -> str | None:
    """Kudu: an owner is a user name of at most 128 characters (None or "" = no owner)."""
    if v is None or v == "":
        return None
    if not isinstance(v, str) or len(v) > MAX_OWNER_LENGTH:
        raise KuduInvalidArgument(f"'owner' must be a string of at most {MAX_OWNER_LENGTH} characters")
    return v


def _comment(v: Any) -> str | None:
    """Kudu: a table comment is at most 256 characters (--max_table_comment_length)."""
    if v is None or v == "":
        return None
    if not isinstance(v, str) or len(v) > MAX_TABLE_COMMENT_LENGTH:
        raise KuduInvalidArgument(f"'comment' must be a string of at most {MAX_TABLE_COMMENT_LENGTH} characters")
    return v


def _wire_bound(b: Any) -> Any:
    """``{"lower", "upper", "lower_bound_type", "upper_bound_type"}`` or ``[lower, upper(, types)]``."""
    if isinstance(b, dict):
        return {k: _wire_row(v) if k in ("lower", "upper") else v for k, v in b.items()}
    if isinstance(b, list) and len(b) in (2, 4):
        return [_wire_row(v) if i < 2 else v for i, v in enumerate(b)]
    raise KuduInvalidArgument(f"bad range bound {b!r}")


def _first_leader(chosen: list[str], leads: dict[str, int]) -> str:
    """The replica of a new tablet that campaigns first: the chosen server leading the fewest tablets
    (counting the ones just designated), so a new table's leaders, and the reads and writes they serve,
    start out even over the servers. Counted in ``leads``."""
    first = min(chosen, key=lambda u: (leads.get(u, 0), u))
    leads[first] = leads.get(first, 0) + 1
    return first


@dataclass
class _Placement:
    """Where new tablets' replicas go: on the live tservers holding the fewest replicas (counting the ones
    just placed), the first leader on the one leading the fewest tablets."""

    live: list[str]
    load: dict[str, int]  # replicas per live tserver
    leads: dict[str, int]  # tablet leaders per live tserver
    address: Callable[[str], str]

    def tablet(self, table_id: str, partition: msg.TabletPartition, n: int) -> TabletRecord:
        chosen = sorted(self.live, key=lambda u: (self.load[u], random.random()))[:n]  # fewest replicas first
        for u in chosen:
            self.load[u] += 1
        return TabletRecord(
            id=uuid.uuid4().hex,
            table_id=table_id,
            partition=partition,
            replicas={u: self.address(u) for u in chosen},
            state="CREATING",
            first_leader=_first_leader(chosen, self.leads),
        )


@dataclass
class _Alter:
    """An AlterTable being planned: the schema and partitioning so far, step by step."""

    schema: Schema
    pschema: PartitionSchema
    next_id: int  # the id of the next column added
    tablet_ids: list[str]
    placement: _Placement
    dropped: list[str] = field(default_factory=list)  # tablets of dropped ranges
    new_tablets: list[TabletRecord] = field(default_factory=list)  # tablets of added ranges
    schema_changed: bool = False

    def column_step(self, step: dict[str, Any], i: int) -> None:
        """ADD_COLUMN, DROP_COLUMN, RENAME_COLUMN or ALTER_COLUMN."""
        kind = step["type"]
        if kind == "ADD_COLUMN":
            if not isinstance(step.get("column"), dict):
                raise KuduInvalidArgument(f"alter_schema_steps[{i}]: ADD_COLUMN needs a 'column' map")
            col = ColumnSchema.from_dict({k: v for k, v in step["column"].items() if k != "id"})
            self.schema = self.schema.add_column(col).with_column_ids(self.next_id)
            self.next_id = self.schema.next_column_id
        elif kind == "DROP_COLUMN":
            self.schema = self.schema.drop_column(_step_str(step, "name", i))
        elif kind == "RENAME_COLUMN":
            self.schema = self.schema.rename_column(_step_str(step, "old_name", i), _step_str(step, "new_name", i))
        elif kind == "ALTER_COLUMN":
            changes = {k: value_from_wire(v) for k, v in step.items() if k not in ("type", "name")}
            self.schema = self.schema.alter_column(_step_str(step, "name", i), **changes)
        else:
            raise KuduInvalidArgument(f"alter_schema_steps[{i}]: unknown step type {kind!r}")
        self.schema_changed = True
