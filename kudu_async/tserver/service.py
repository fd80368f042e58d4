"""The ``TabletServer`` RPC service: every request is validated here before any tablet sees it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kudu_async.common.errors import KuduInvalidArgument, KuduNotAuthorized, KuduServiceUnavailable
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.row_conversion import OpType
from kudu_async.rpc.messages import Method, ServiceTable, serve
from kudu_async.rpc.server import CallContext, RpcServer
from kudu_async.security.authz_policy import check_table_access, check_write
from kudu_async.security.tokens import TokenVerifier
from kudu_async.tablet.tablet import READ_AT_SNAPSHOT, READ_LATEST, ScanSpec, TabletScanner
from kudu_async.tserver import messages as m
from kudu_async.tserver.quiesce import MAX_SUCCESSOR_SILENCE_MS, Quiescer
from kudu_async.tserver.scanners import CallCost, Scanner, ScannerManager
from kudu_async.tserver.tablet_manager import TabletManager, tree_bytes
from kudu_async.tserver.tablet_replica import TabletReplica
from kudu_async.tserver.wire import decode_write_op

SERVICE = "TabletServer"


class TabletService:
    def __init__(
        self,
        manager: TabletManager,
        scanners: ScannerManager,
        clock_update: Callable[[int], Any],
        successor_silence_ms: int = MAX_SUCCESSOR_SILENCE_MS,
    ) -> None:
        self.manager = manager
        self.scanners = scanners
        self._clock_update = clock_update
        # Ids of the tables the leader master says reached a write limit (from its heartbeat answers).
        self.write_limited_tables: frozenset[str] = frozenset()
        # Set with --tserver-enforce-access-control: every write and scan shows an authz token it verifies.
        self.token_verifier: TokenVerifier | None = None
        self.quiescer = Quiescer(
            manager.node_uuid,
            lambda: [r.raft for r in manager.replicas.values() if r.raft is not None],
            lambda: len(scanners.scanners),
            max_silence_ms=successor_silence_ms,
        )

    def _claims(self, token: bytes | None, replica: TabletReplica, ctx: CallContext) -> dict[str, Any] | None:
        """The verified claims of a call's authz token when access control is enforced, else None."""
        if self.token_verifier is None:
            return None
        if token is None:
            raise KuduNotAuthorized(
                f"{ctx.identity.describe()} is not authorized on tablet {replica.tablet_id}: no authz token "
                "(ask the leader master for the table's schema)",
                {"user": ctx.identity.user, "tablet_id": replica.tablet_id},
            )
        return self.token_verifier.verify_or_retry(token, "authz", time.time()).claims

    def methods(self) -> ServiceTable:
        """The ``TabletServer`` protocol: each method with its request and response messages."""
        return {
            "CreateTablet": Method(
                m.CreateTabletRequest, m.CreateTabletResponse, self.create_tablet, requires="service"
            ),
            "DeleteTablet": Method(
                m.DeleteTabletRequest, m.DeleteTabletResponse, self.delete_tablet, requires="service"
            ),
            "Write": Method(m.WriteRequest, m.WriteResponse, self.write, requires="user"),
            "Scan": Method(m.ScanRequest, m.ScanResponse, self.scan, requires="user"),
            "ScannerKeepAlive": Method(
                m.ScannerKeepAliveRequest, m.ScannerKeepAliveResponse, self.keep_alive, requires="user"
            ),
            "SplitKeyRange": Method(
                m.SplitKeyRangeRequest, m.SplitKeyRangeResponse, self.split_key_range, requires="user"
            ),
            "Checksum": Method(m.ChecksumRequest, m.ChecksumResponse, self.checksum, requires="user"),
            "ListTablets": Method(m.ListTabletsRequest, m.ListTabletsResponse, self.list_tablets, requires="user"),
            "GetSafeTime": Method(m.GetSafeTimeRequest, m.GetSafeTimeResponse, self.get_safe_time, requires="user"),
            "StartTabletCopy": Method(
                m.StartTabletCopyRequest, m.StartTabletCopyResponse, self.start_tablet_copy, requires="service"
            ),
            "AlterSchema": Method(m.AlterSchemaRequest, m.AlterSchemaResponse, self.alter_schema, requires="service"),
            "FlushTablet": Method(m.FlushTabletRequest, m.FlushTabletResponse, self.flush_tablet, requires="superuser"),
            "GetTabletStats": Method(
                m.GetTabletStatsRequest, m.GetTabletStatsResponse, self.get_tablet_stats, requires="user"
            ),
            "Quiesce": Method(m.QuiesceRequest, m.QuiesceResponse, self.quiesce, requires="superuser"),
        }

    def register_rpc(self, server: RpcServer) -> None:
        serve(server, SERVICE, self.methods())

    async def create_tablet(self, req: m.CreateTabletRequest, ctx: CallContext) -> m.CreateTabletResponse:
        out = await self.manager.create_tablet(req)
        return m.CreateTabletResponse(tablet_id=out["tablet_id"], created=out["created"])

    async def delete_tablet(self, req: m.DeleteTabletRequest, ctx: CallContext) -> m.DeleteTabletResponse:
        self.scanners.close_tablet(req.tablet_id)
        out = await self.manager.delete_tablet(req.tablet_id, req.delete_type, req.cas_config_index, req.reason)
        return m.DeleteTabletResponse(tablet_id=out["tablet_id"], deleted=out["deleted"])

    async def write(self, req: m.WriteRequest, ctx: CallContext) -> m.WriteResponse:
        replica = self.manager.get(req.tablet_id)
        claims = self._claims(req.authz_token, replica, ctx)
        if claims is not None:
            check_write(claims, str(replica.info.get("table_id")), req.op_types)
        if self.write_limited_tables and replica.info.get("table_id") in self.write_limited_tables:
            _check_write_privileges(req.op_types)
        op = decode_write_op(req.rows, req.op_types, req.set_columns)
        if req.propagated_timestamp is not None:
            self._clock_update(req.propagated_timestamp)
        rid = None if req.request_id is None else req.request_id.to_request_id()
        res = await replica.write(op, req.schema_version, ctx.time_left(), rid)
        return m.WriteResponse(
            timestamp=res.timestamp,
            row_errors=[m.RowErrorMsg(row_index=e.row_index, code=e.code, message=e.message) for e in res.row_errors],
            inserted=res.inserted,
            updated=res.updated,
            deleted=res.deleted,
            ignored=res.ignored,
        )

    async def scan(self, req: m.ScanRequest, ctx: CallContext) -> m.ScanResponse:
        if req.scanner_id is not None:
            return await self._continue_scan(req.scanner_id, req.close, ctx)
        if req.tablet_id is None:
            raise KuduInvalidArgument("'tablet_id': missing (a new scan names its tablet)", {"field": "tablet_id"})
        replica = self.manager.get(req.tablet_id)
        spec = _scan_spec(replica, req)
        if self.quiescer.quiescing and not (spec.read_mode == READ_LATEST and _leads(replica)):
            # Another replica serves it (READ_LATEST only the leader can, so a leader not yet replaced does).
            raise KuduServiceUnavailable(
                f"tablet server {self.manager.node_uuid} is quiescing: scan another replica",
                {"error": "QUIESCING"},
            )
        claims = self._claims(req.authz_token, replica, ctx)
        if claims is not None:
            read = spec.projection if spec.projection is not None else replica.tablet.info.names
            check_table_access(
                claims, str(replica.info.get("table_id")), "SELECT", [*read, *(p.column for p in spec.predicates)]
            )
        if req.propagated_timestamp is not None:
            self._clock_update(req.propagated_timestamp)
        self.scanners.check_capacity()

        def begin(it: TabletScanner) -> tuple[Scanner, tuple[pa.RecordBatch | None, bytes, bool]]:
            """In the worker that opened the scan: its first batch too."""
            info = it.info  # the schema the scan reads with, even if an alter just landed
            names = spec.projection if spec.projection is not None else info.names
            sc = self.scanners.new(
                replica.tablet_id,
                it,
                pa.schema([info.arrow.field(n) for n in names]),
                spec.snapshot_ts,
                {
                    "projection": names,
                    "read_mode": spec.read_mode,
                    "predicates": [_pred_text(p) for p in spec.predicates],
                },
            )
            return sc, ScannerManager.pull(sc)

        cost = CallCost(ctx.start)
        sc, pulled = await replica.scan_with(spec, ctx.time_left(), begin, cost.measuring)
        sc.metrics = cost.metrics()
        return m.ScanResponse(**self.scanners.started(sc, pulled), schema_version=replica.tablet.schema_version)

    async def _continue_scan(self, scanner_id: str, close: bool, ctx: CallContext) -> m.ScanResponse:
        """The next batch of an open scanner, or its end when the caller closes it."""
        if close:
            self.scanners.close(scanner_id)
            return m.ScanResponse(scanner_id=None, has_more=False, rows=0, data=None)
        return m.ScanResponse(**await self.scanners.next_batch(self.scanners.get(scanner_id), CallCost(ctx.start)))

    async def keep_alive(self, req: m.ScannerKeepAliveRequest, ctx: CallContext) -> m.ScannerKeepAliveResponse:
        self.scanners.get(req.scanner_id)
        return m.ScannerKeepAliveResponse()

    async def split_key_range(self, req: m.SplitKeyRangeRequest, ctx: CallContext) -> m.SplitKeyRangeResponse:
        """Chunks of the tablet's key range for scan tokens of about a size (the rowsets' block index, read
        in a worker)."""
        replica = self.manager.get(req.tablet_id)
        claims = self._claims(req.authz_token, replica, ctx)
        if claims is not None:
            check_table_access(claims, str(replica.info.get("table_id")), "SELECT", req.columns or ())
        ranges = await asyncio.get_running_loop().run_in_executor(
            self.manager.executor,
            replica.tablet.split_key_range,
            req.start_primary_key or None,
            req.stop_primary_key or None,
            req.target_chunk_size_bytes,
            req.columns,
        )
        return m.SplitKeyRangeResponse(
            ranges=[
                m.KeyRangeMsg(start_primary_key=r.start, stop_primary_key=r.stop, size_bytes_estimates=r.size_bytes)
                for r in ranges
            ]
        )

    async def checksum(self, req: m.ChecksumRequest, ctx: CallContext) -> m.ChecksumResponse:
        replica = self.manager.get(req.tablet_id)
        claims = self._claims(req.authz_token, replica, ctx)
        if claims is not None:  # a checksum reads every column
            check_table_access(claims, str(replica.info.get("table_id")), "SELECT", replica.tablet.info.names)
        return m.ChecksumResponse(**await replica.checksum(req.snapshot_ts, ctx.time_left()))

    async def list_tablets(self, req: m.ListTabletsRequest, ctx: CallContext) -> m.ListTabletsResponse:
        return m.ListTabletsResponse(tablets=self.manager.list_tablets(with_schema=req.need_schema_info))

    async def get_safe_time(self, req: m.GetSafeTimeRequest, ctx: CallContext) -> m.GetSafeTimeResponse:
        replica = self.manager.get(req.tablet_id)
        index = await replica.leader_safe_index(req.timestamp, time.monotonic() + ctx.time_left())
        return m.GetSafeTimeResponse(index=index)

    async def start_tablet_copy(self, req: m.StartTabletCopyRequest, ctx: CallContext) -> m.StartTabletCopyResponse:
        out = await self.manager.start_tablet_copy(req.tablet_id, req.source_uuid, req.source_address, req.caller_term)
        return m.StartTabletCopyResponse(**out)

    async def alter_schema(self, req: m.AlterSchemaRequest, ctx: CallContext) -> m.AlterSchemaResponse:
        replica = self.manager.get(req.tablet_id)
        version = await replica.alter_schema(req.schema, req.schema_version, ctx.time_left())
        return m.AlterSchemaResponse(schema_version=version)

    async def quiesce(self, req: m.QuiesceRequest, ctx: CallContext) -> m.QuiesceResponse:
        """Kudu's ``tserver quiesce start|stop|status``."""
        if req.action == "start":
            self.quiescer.start()
        elif req.action == "stop":
            await self.quiescer.stop()
        return m.QuiesceResponse(**self.quiescer.status())

    async def flush_tablet(self, req: m.FlushTabletRequest, ctx: CallContext) -> m.FlushTabletResponse:
        """Operator/test tool: flush a tablet's memory stores now (as the maintenance manager would)."""
        replica = self.manager.get(req.tablet_id)
        await asyncio.get_running_loop().run_in_executor(self.manager.executor, replica.tablet.flush_all)
        return m.FlushTabletResponse(last_flushed_log_index=replica.tablet.earliest_needed_log_index() - 1)

    async def get_tablet_stats(self, req: m.GetTabletStatsRequest, ctx: CallContext) -> m.GetTabletStatsResponse:
        """Sizes of one replica for ``kudu table statistics``: bytes on disk (files walked in an
        executor) and in memory. Row counts come from a snapshot ``Checksum``, which is exact."""
        tablet_id = req.tablet_id
        replica = self.manager.get(tablet_id)
        wal_dir = replica.raft.dir / "wal" if replica.raft is not None else None
        data_bytes, wal_bytes = await asyncio.get_running_loop().run_in_executor(
            self.manager.executor, _sizes, self.manager.tablet_dir(tablet_id), wal_dir
        )
        st = replica.tablet.status()
        return m.GetTabletStatsResponse(
            tablet_id=tablet_id,
            on_disk_data_bytes=data_bytes,
            on_disk_wal_bytes=wal_bytes,
            memrowset_bytes=st["mrs_bytes"],
            delta_memstore_bytes=st["dms_bytes"],
            memrowset_rows=st["mrs_rows"],
            disk_rowsets=len(st["rowsets"]),
        )


def _leads(replica: TabletReplica) -> bool:
    r = replica.raft
    return r is not None and r.raft is not None and r.raft.is_leader


def _scan_spec(replica: TabletReplica, req: m.ScanRequest) -> ScanSpec:
    """A new scan's request checked against the tablet's current schema (columns, predicates, read mode,
    the schema version the caller built it for) and turned into the tablet's ScanSpec."""
    info = replica.tablet.info
    least = req.min_schema_version
    if least is not None and least > replica.tablet.schema_version:
        # An alter the caller saw is not applied on this replica yet (a follower behind, or the leader
        # between commit and apply): another replica, or this one a moment later, has it.
        raise KuduServiceUnavailable(
            f"tablet {replica.tablet_id}: this replica has schema version {replica.tablet.schema_version}, "
            f"the caller knows the table at {least}: the alter is not applied here yet"
        )
    for c in req.projection or []:
        if c not in info.names:
            raise KuduInvalidArgument(f"projected column '{c}' is not in the table's schema")
    predicates = []
    for p in req.predicates or []:
        pred = ColumnPredicate.from_dict(p)
        if pred.column not in info.names:
            raise KuduInvalidArgument(f"predicate column '{pred.column}' is not in the table's schema")
        predicates.append(pred.bind(info.schema))
    if req.read_mode not in (READ_LATEST, READ_AT_SNAPSHOT):
        raise KuduInvalidArgument(f"'read_mode' must be {READ_LATEST} or {READ_AT_SNAPSHOT}, not {req.read_mode!r}")
    version = req.schema_version
    if version is not None and version != replica.tablet.schema_version:
        raise KuduInvalidArgument(
            f"tablet {replica.tablet_id} has schema version {replica.tablet.schema_version}, the scan was "
            f"built for {version}: reload the table schema",
            {"error": "MISMATCHED_SCHEMA", "schema_version": replica.tablet.schema_version},
        )
    return ScanSpec(
        projection=req.projection,
        predicates=predicates,
        lower_key=req.lower_key,
        upper_key=req.upper_key,
        resume_after_key=req.resume_after_key,
        limit=req.limit,
        read_mode=req.read_mode,
        snapshot_ts=req.snapshot_ts,
        ordered=req.ordered,
        batch_bytes=req.batch_bytes,
    )


# Ops that need Kudu's INSERT or UPDATE privilege, which a table at its write limit loses (DELETE keeps it).
_INSERTING = np.array([OpType.INSERT, OpType.INSERT_IGNORE, OpType.UPSERT, OpType.UPSERT_IGNORE], dtype=np.int8)
_UPDATING = np.array([OpType.UPDATE, OpType.UPDATE_IGNORE], dtype=np.int8)


def _check_write_privileges(op_types: bytes) -> None:
    """Kudu refuses a whole write with NOT_AUTHORIZED when its table reached a disk size or row count
    limit and the write inserts or updates (the master took those privileges away)."""
    kinds = np.frombuffer(op_types, dtype=np.int8)
    if np.isin(kinds, _INSERTING).any():
        raise KuduNotAuthorized("not authorized to insert: the table reached its disk size or row count limit")
    if np.isin(kinds, _UPDATING).any():
        raise KuduNotAuthorized("not authorized to update: the table reached its disk size or row count limit")


def _sizes(tdir: Path, wal_dir: Path | None) -> tuple[int, int]:
    """(data bytes under the tablet directory, WAL bytes)."""
    return tree_bytes(tdir), 0 if wal_dir is None else tree_bytes(wal_dir)


def _pred_text(p: ColumnPredicate) -> str:
    """``key >= 5``: how a predicate shows on /api/v1/scans."""
    if p.op in ("IS NULL", "IS NOT NULL"):
        return f"{p.column} {p.op}"
    return f"{p.column} {p.op} {list(p.value) if p.op == 'IN' else p.value!r}"
