"""The ``TabletServer`` RPC service: every request is validated here before any tablet sees it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.rpc.server import CallContext, RpcServer, require_map
from kudu_async.tablet.tablet import READ_AT_SNAPSHOT, READ_LATEST, ScanSpec, TabletScanner
from kudu_async.tserver.result_tracker import parse_request_id
from kudu_async.tserver.scanners import Scanner, ScannerManager
from kudu_async.tserver.tablet_manager import TabletManager
from kudu_async.tserver.wire import decode_write_op

SERVICE = "TabletServer"
MAX_BATCH_BYTES = 16 * 1024 * 1024


class TabletService:
    def __init__(self, manager: TabletManager, scanners: ScannerManager, clock_update: Any) -> None:
        self.manager = manager
        self.scanners = scanners
        self._clock_update = clock_update

    def register_rpc(self, server: RpcServer) -> None:
        for name in (
            "CreateTablet",
            "DeleteTablet",
            "Write",
            "Scan",
            "ScannerKeepAlive",
            "Checksum",
            "ListTablets",
            "GetSafeTime",
            "StartTabletCopy",
            "AlterSchema",
            "FlushTablet",
            "GetTabletStats",
        ):
            server.register(SERVICE, name, getattr(self, f"_rpc_{name.lower()}"))

    async def _rpc_createtablet(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        return await self.manager.create_tablet(require_map(request))

    async def _rpc_deletetablet(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        cas = req.get("cas_config_index")
        if cas is not None and not isinstance(cas, int):
            raise KuduInvalidArgument("'cas_config_index' must be an integer")
        self.scanners.close_tablet(_str(req, "tablet_id"))
        return await self.manager.delete_tablet(_str(req, "tablet_id"), _str(req, "delete_type", "DELETED"), cas)

    async def _rpc_write(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        replica = self.manager.get(_str(req, "tablet_id"))
        version = _int(req, "schema_version", 0)
        request_id = parse_request_id(req.get("request_id"))  # absent: no retry protection (as before)
        op = decode_write_op(req.get("rows"), req.get("op_types"), req.get("set_columns"))
        propagated = req.get("propagated_timestamp")
        if propagated is not None:
            self._clock_update(_int(req, "propagated_timestamp"))
        res = await replica.write(op, version, ctx.time_left(), request_id)
        return {
            "timestamp": res.timestamp,
            "row_errors": [{"row_index": e.row_index, "code": e.code, "message": e.message} for e in res.row_errors],
            "inserted": res.inserted,
            "updated": res.updated,
            "deleted": res.deleted,
            "ignored": res.ignored,
        }

    async def _rpc_scan(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        scanner_id = req.get("scanner_id")
        if scanner_id is not None:
            if not isinstance(scanner_id, str):
                raise KuduInvalidArgument("'scanner_id' must be a string")
            if req.get("close"):
                self.scanners.close(scanner_id)
                return {"scanner_id": None, "has_more": False, "rows": 0, "data": None}
            return await self.scanners.next_batch(self.scanners.get(scanner_id))
        replica = self.manager.get(_str(req, "tablet_id"))
        schema = replica.tablet.info.schema
        projection = req.get("projection")
        if projection is not None and (
            not isinstance(projection, list) or not all(isinstance(c, str) for c in projection)
        ):
            raise KuduInvalidArgument("'projection' must be a list of column names")
        for c in projection or []:
            if c not in replica.tablet.info.names:
                raise KuduInvalidArgument(f"projected column '{c}' is not in the table's schema")
        preds_raw = req.get("predicates") or []
        if not isinstance(preds_raw, list) or not all(isinstance(p, dict) for p in preds_raw):
            raise KuduInvalidArgument("'predicates' must be a list of predicate maps")
        predicates = []
        for p in preds_raw:
            pred = ColumnPredicate.from_dict(p)
            if pred.column not in replica.tablet.info.names:
                raise KuduInvalidArgument(f"predicate column '{pred.column}' is not in the table's schema")
            predicates.append(pred.bind(schema))
        read_mode = _str(req, "read_mode", READ_LATEST)
        if read_mode not in (READ_LATEST, READ_AT_SNAPSHOT):
            raise KuduInvalidArgument(f"'read_mode' must be {READ_LATEST} or {READ_AT_SNAPSHOT}, not {read_mode!r}")
        version = req.get("schema_version")
        if version is not None and version != replica.tablet.schema_version:
            raise KuduInvalidArgument(
                f"tablet {replica.tablet_id} has schema version {replica.tablet.schema_version}, the scan was "
                f"built for {version}: reload the table schema",
                {"error": "MISMATCHED_SCHEMA", "schema_version": replica.tablet.schema_version},
            )
        batch_bytes = req.get("batch_bytes")
        if batch_bytes is not None and (not isinstance(batch_bytes, int) or not 1 <= batch_bytes <= MAX_BATCH_BYTES):
            raise KuduInvalidArgument(f"'batch_bytes' must be 1..{MAX_BATCH_BYTES}")
        limit = req.get("limit")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise KuduInvalidArgument("'limit' must be a non-negative integer")
        propagated = req.get("propagated_timestamp")
        if propagated is not None:
            self._clock_update(_int(req, "propagated_timestamp"))
        spec = ScanSpec(
            projection=projection,
            predicates=predicates,
            lower_key=_bytes_or_none(req, "lower_key"),
            upper_key=_bytes_or_none(req, "upper_key"),
            resume_after_key=_bytes_or_none(req, "resume_after_key"),
            limit=limit,
            read_mode=read_mode,
            snapshot_ts=_int(req, "snapshot_ts") if req.get("snapshot_ts") is not None else None,
            ordered=bool(req.get("ordered", False)),
            batch_bytes=batch_bytes,
        )
        self.scanners.check_capacity()

        def begin(it: TabletScanner) -> tuple[Scanner, tuple[pa.RecordBatch | None, bytes, bool]]:
            """In the worker that opened the scan: its first batch too."""
            info = it.info or replica.tablet.info  # the schema the scan reads with, even if an alter just landed
            names = projection if projection is not None else info.names
            sc = self.scanners.new(
                replica.tablet_id,
                it,
                pa.schema([info.arrow.field(n) for n in names]),
                spec.snapshot_ts,
                {"projection": names, "read_mode": read_mode, "predicates": [_pred_text(p) for p in predicates]},
            )
            return sc, ScannerManager.pull(sc)

        sc, pulled = await replica.scan_with(spec, ctx.time_left(), begin)
        out = self.scanners.started(sc, pulled)
        out["schema_version"] = replica.tablet.schema_version
        return out

    async def _rpc_scannerkeepalive(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        self.scanners.get(_str(require_map(request), "scanner_id"))
        return {}

    async def _rpc_checksum(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        replica = self.manager.get(_str(req, "tablet_id"))
        ts = _int(req, "snapshot_ts") if req.get("snapshot_ts") is not None else None
        return await replica.checksum(ts, ctx.time_left())

    async def _rpc_listtablets(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        return {"tablets": self.manager.list_tablets()}

    async def _rpc_getsafetime(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        replica = self.manager.get(_str(req, "tablet_id"))
        index = await replica.leader_safe_index(_int(req, "timestamp"), time.monotonic() + ctx.time_left())
        return {"index": index}

    async def _rpc_starttabletcopy(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        return await self.manager.start_tablet_copy(
            _str(req, "tablet_id"), _str(req, "source_uuid"), _str(req, "source_address"), _int(req, "caller_term", 0)
        )

    async def _rpc_alterschema(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        req = require_map(request)
        replica = self.manager.get(_str(req, "tablet_id"))
        schema = req.get("schema")
        if not isinstance(schema, dict):
            raise KuduInvalidArgument("'schema' must be a schema map")
        version = await replica.alter_schema(schema, _int(req, "schema_version"), ctx.time_left())
        return {"schema_version": version}

    async def _rpc_flushtablet(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        """Operator/test tool: flush a tablet's memory stores now (as the maintenance manager would)."""
        replica = self.manager.get(_str(require_map(request), "tablet_id"))
        await asyncio.get_running_loop().run_in_executor(self.manager.executor, replica.tablet.flush_all)
        return {"last_flushed_log_index": replica.tablet.earliest_needed_log_index() - 1}

    async def _rpc_gettabletstats(self, request: Any, ctx: CallContext) -> dict[str, Any]:
        """Sizes of one replica for ``kudu-admin table statistics``: bytes on disk (files walked in an
        executor) and in memory. Row counts come from a snapshot ``Checksum``, which is exact."""
        tablet_id = _str(require_map(request), "tablet_id")
        replica = self.manager.get(tablet_id)
        wal_dir = replica.raft.dir / "wal" if replica.raft is not None else None
        data_bytes, wal_bytes = await asyncio.get_running_loop().run_in_executor(
            self.manager.executor, _sizes, self.manager.tablet_dir(tablet_id), wal_dir
        )
        st = replica.tablet.status()
        return {
            "tablet_id": tablet_id,
            "on_disk_data_bytes": data_bytes,
            "on_disk_wal_bytes": wal_bytes,
            "memrowset_bytes": st["mrs_bytes"],
            "delta_memstore_bytes": st["dms_bytes"],
            "memrowset_rows": st["mrs_rows"],
            "disk_rowsets": len(st["rowsets"]),
        }


def _sizes(tdir: Path, wal_dir: Path | None) -> tuple[int, int]:
    """(data bytes under the tablet directory, WAL bytes)."""
    return _tree_bytes(tdir), 0 if wal_dir is None else _tree_bytes(wal_dir)


def _tree_bytes(top: Path) -> int:
    """Bytes of the files under ``top``; files and directories vanishing meanwhile (a flush, a WAL
    segment collected) are skipped, as os.walk skips directories it cannot list."""
    total = 0
    for root, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def _pred_text(p: ColumnPredicate) -> str:
    """``key >= 5``: how a predicate shows on /api/v1/scans."""
    if p.op in ("IS NULL", "IS NOT NULL"):
        return f"{p.column} {p.op}"
    return f"{p.column} {p.op} {list(p.value) if p.op == 'IN' else p.value!r}"


def _str(req: dict[str, Any], name: str, default: str | None = None) -> str:
    v = req.get(name, default)
    if not isinstance(v, str) or not v:
        raise KuduInvalidArgument(f"'{name}' must be a non-empty string")
    return v


def _int(req: dict[str, Any], name: str, default: int | None = None) -> int:
    v = req.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise KuduInvalidArgument(f"'{name}' must be a non-negative integer")
    return v


def _bytes_or_none(req: dict[str, Any], name: str) -> bytes | None:
    v = req.get(name)
    if v is None:
        return None
    if not isinstance(v, bytes | bytearray):
        raise KuduInvalidArgument(f"'{name}' must be bytes (an encoded primary key)")
    return bytes(v)
