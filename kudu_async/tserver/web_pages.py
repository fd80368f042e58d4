"""The tablet server's web pages at Kudu's paths: ``/tablets``, ``/tablet?id=`` (Raft state, rowsets,
memory), ``/tablet-rowsetlayout-svg?id=`` (the rowset layout picture), ``/tablet-consensus-status?id=``,
``/maintenance-manager``, ``/scans`` and ``/transactions`` (writes in flight).

Each page is HTML for a browser and its data as JSON for everyone else (``server/webui/render.py``).
The data functions take plain records (a tablet's status dict), so tests check them without a server.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web

from kudu_async.common.clock import physical_micros
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.mem_tracker import NodeMemory
from kudu_async.common.partition import PartitionSchema
from kudu_async.common.schema import Schema
from kudu_async.server.webui import pages, render, sql, svg
from kudu_async.tablet.compaction_policy import RowSetExtent, data_shares
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tserver.scanners import ScannerManager
from kudu_async.tserver.tablet_manager import TabletManager
from kudu_async.tserver.tablet_replica import TabletReplica


class WebTabletServer(Protocol):
    """What the pages read of the tablet server (``tablet_server.TabletServer``)."""

    tablets: TabletManager
    maintenance: MaintenanceManager
    scanners: ScannerManager
    memory: NodeMemory


# --- page data ----------------------------------------------------------------------------------------------


def rowset_boxes(rowsets: Sequence[Mapping[str, Any]], compacting: Sequence[int] = ()) -> list[svg.RowSetBox]:
    """The rowsets of a tablet's status (``min_key``/``max_key`` hex, ``base_bytes``, ``rows``) as boxes
    over the key space in data terms; ``compacting``: ids of the rowsets the policy would merge next."""
    extents = [
        RowSetExtent(int(r["id"]), bytes.fromhex(r["min_key"]), bytes.fromhex(r["max_key"]), int(r["base_bytes"]))
        for r in rowsets
    ]
    chosen = set(compacting)
    return [
        svg.RowSetBox(e.id, lo, hi, int(r["rows"]), e.size, e.id in chosen)
        for e, r, (lo, hi) in zip(extents, rowsets, data_shares(extents), strict=True)
    ]


def tablet_summary(status: Mapping[str, Any]) -> dict[str, Any]:
    """What ``/tablet`` shows above its tables: role, term, leader, indexes, memory, storage figures."""
    cons = status.get("consensus") or {}
    storage = status.get("storage") or {}
    return {
        "role": cons.get("role"),
        "term": cons.get("term"),
        "leader": cons.get("leader"),
        "commit_index": cons.get("commit_index"),
        "applied_index": cons.get("applied_index"),
        "memory": [
            {"what": "MemRowSet", "bytes": status.get("memrowset_bytes")},
            {"what": "Delta memstores", "bytes": status.get("delta_memstore_bytes")},
            {"what": "Raft log cache", "bytes": cons.get("log_cache_bytes")},
            {"what": "Writes pending", "bytes": status.get("pending_write_bytes")},
        ],
        "mrs_rows": storage.get("mrs_rows"),
        "rowsets": len(storage.get("rowsets", [])),
        "disk_rows": sum(int(r.get("rows", 0)) for r in storage.get("rowsets", [])),
        "average_rowset_height": storage.get("average_rowset_height"),
        "max_rowset_height": storage.get("max_rowset_height"),
    }


def transaction_rows(writes: Sequence[Mapping[str, Any]], now_unix: float) -> list[dict[str, Any]]:
    """In-flight writes with how long each has been in flight (from its hybrid timestamp's clock part)."""
    out = []
    for w in writes:
        age = max(0.0, now_unix - physical_micros(int(w["timestamp"])) / 1e6)
        out.append({**w, "in_flight_s": round(age, 6)})
    return sorted(out, key=lambda w: -w["in_flight_s"])


def partition_description(info: Mapping[str, Any], schema: Schema) -> str:
    """A replica's partition as Kudu names it (``HASH (k) PARTITION 1, RANGE (k) PARTITION ...``), from
    the table's partition schema and the tablet's partition its creation recorded."""
    partition, ps_dict = info.get("partition"), info.get("partition_schema")
    if not isinstance(partition, Mapping) or not isinstance(ps_dict, Mapping):
        return ""
    buckets = [int(b) for b in partition.get("hash_buckets", [])]
    start, end = bytes(partition.get("range_key_start", b"")), bytes(partition.get("range_key_end", b""))
    try:
        ps = PartitionSchema.from_dict(schema, ps_dict)
    except KuduInvalidArgument:  # a partition column renamed since: the recorded schema names the old one
        return f"hash buckets {buckets}, range keys [{start.hex() or '-inf'}, {end.hex() or '+inf'})"
    return sql.partition_text(ps, buckets, start, end)


def _partitions(tablets: TabletManager) -> dict[str, str]:
    """Each open replica's partition text (the schema parsed once per table and schema version)."""
    schemas: dict[tuple[str, int], Schema] = {}
    out = {}
    for tid, r in list(tablets.replicas.items()):
        key = (str(r.info.get("table_id")), r.tablet.schema_version)
        if key not in schemas:
            schemas[key] = Schema.from_dict(r.tablet.schema_dict())
        out[tid] = partition_description(r.info, schemas[key])
    return out


# --- handlers ------------------------------------------------------------------------------------------------


def add_routes(app: web.Application, ts: WebTabletServer) -> None:
    """The tablet server's pages and their places in the nav bar."""

    def replica(request: web.Request) -> TabletReplica:
        return ts.tablets.get(render.query_param(request, "id", required=True))

    async def tablets(request: web.Request) -> web.Response:
        rows = ts.tablets.list_tablets()
        states: dict[str, int] = {}
        for r in rows:
            states[r["state"]] = states.get(r["state"], 0) + 1
        context = {
            "tablets": rows,
            "states": [{"state": s, "count": n} for s, n in sorted(states.items())],
            "partitions": _partitions(ts.tablets),
        }
        return render.page(request, "tablets.html", context, "Tablets", json_body={"tablets": rows})

    async def tablet(request: web.Request) -> web.Response:
        r = replica(request)
        status = r.status()
        tracker = ts.memory.root.get_child(f"tablet-{r.tablet_id}")
        context = {
            "status": status,
            "summary": tablet_summary(status),
            "trackers": [] if tracker is None else tracker.rows(),
            "columns": pages.schema_rows(Schema.from_dict(status["schema"])),
            "partition_text": partition_description(r.info, Schema.from_dict(status["schema"])),
        }
        return render.page(request, "tablet.html", context, f"Tablet {r.tablet_id}", json_body=status)

    async def rowset_layout(request: web.Request) -> web.Response:
        r = replica(request)
        storage = r.tablet.status()
        plan = r.tablet.rowset_layout(fresh=False)
        boxes = rowset_boxes(storage["rowsets"], plan.compact_ids)
        body = {
            "tablet_id": r.tablet_id,
            "average_rowset_height": storage["average_rowset_height"],
            "max_rowset_height": storage["max_rowset_height"],
            "next_compaction": list(plan.compact_ids),
            "rowsets": [
                {**row, "data_share_lo": round(b.lo, 6), "data_share_hi": round(b.hi, 6)}
                for row, b in zip(storage["rowsets"], boxes, strict=True)
            ],
            "svg": svg.rowset_layout(boxes),
        }
        return render.page(request, "tablet_rowsetlayout.html", body, f"Rowset layout of {r.tablet_id}")

    async def consensus_status(request: web.Request) -> web.Response:
        r = replica(request)
        raft = r.raft
        status = None if raft is None else raft.status()
        body = {"tablet_id": r.tablet_id, "consensus": status}
        fields = {k: v for k, v in (status or {}).items() if k != "peers"}
        return render.page(
            request, "tablet_consensus.html", {**body, "fields": fields}, f"Consensus of {r.tablet_id}", json_body=body
        )

    async def maintenance_manager(request: web.Request) -> web.Response:
        body = {
            **ts.maintenance.status(),
            "tablet_copies": ts.tablets.copy_history,
            "copy_sessions": ts.tablets.copy_source.status(),
        }
        return render.page(request, "maintenance.html", body, "Maintenance Manager")

    async def scans(request: web.Request) -> web.Response:
        body = {
            "scanners": ts.scanners.status(),
            "recent": ts.scanners.recent_scans(),
            "expired": ts.scanners.expired,
        }
        return render.page(request, "scans.html", body, "Scans")

    async def transactions(request: web.Request) -> web.Response:
        writes: list[dict[str, Any]] = []
        for r in list(ts.tablets.replicas.values()):
            writes.extend(r.in_flight_writes())
        body = {"transactions": transaction_rows(writes, time.time())}
        return render.page(request, "transactions.html", body, "Transactions")

    routes: Sequence[render.PageRoute] = (
        ("/tablets", tablets, "Tablets"),
        ("/tablet", tablet, None),
        ("/tablet-rowsetlayout-svg", rowset_layout, None),
        ("/tablet-consensus-status", consensus_status, None),
        ("/scans", scans, "Scans"),
        ("/transactions", transactions, "Transactions"),
        ("/maintenance-manager", maintenance_manager, "Maintenance"),
    )
    render.add_pages(app, routes)
