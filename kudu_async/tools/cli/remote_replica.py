"""``kudu remote_replica list|dump|check|delete|copy``: the replicas of one running tablet server, by its RPC
address (``host[:port]``, port 7050 by default).

``delete`` tombstones as Kudu's does (the replica's Raft metadata stays, so it never votes twice in a term);
``copy`` asks the destination to copy the tablet from the source through the tablet copy path the servers
use themselves, then waits (up to ``-timeout_ms``) until the copy runs there. ``dump`` reads the replica's
rows: READ_LATEST on a leader, at a snapshot on a follower (a follower of a tablet without a leader cannot
confirm its safe time: ``local_replica dump rowset`` reads a stopped server's files instead).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from kudu_async.client.aio import master_addresses
from kudu_async.common.errors import KuduBadStatus, KuduIllegalState, KuduNotFound, KuduNotTheLeader, KuduTimedOut
from kudu_async.common.row_conversion import ipc_to_table
from kudu_async.common.schema import Schema
from kudu_async.rpc.client import RpcClient
from kudu_async.tools.cli.framework import Context, Result, UsageError, csv_list, flag, group, verb
from kudu_async.tserver.local_replicas import partition_text

group("remote_replica", help="Operate on remote tablet replicas on a Kudu Tablet Server")

TSERVER_PORT = 7050
MAX_TERM = (1 << 63) - 1  # a forced copy outranks any term the destination's replica has
COPY_POLL_S = 0.2


def tserver_address(text: str) -> str:
    try:
        addrs = master_addresses(text, TSERVER_PORT)
    except KuduBadStatus as e:
        raise UsageError(f"{text!r}: not a tablet server address host[:port] ({e.message})") from None
    if len(addrs) != 1:
        raise UsageError(f"{text!r}: one tablet server address host[:port], not {len(addrs)}")
    return addrs[0]


async def list_replicas(rpc: RpcClient, addr: str, timeout_s: float, schema: bool = False) -> list[dict[str, Any]]:
    reply = await rpc.call(addr, "TabletServer", "ListTablets", {"need_schema_info": schema}, timeout_s=timeout_s)
    tablets: list[dict[str, Any]] = reply["tablets"]
    return tablets


async def server_status(rpc: RpcClient, addr: str, timeout_s: float) -> dict[str, Any]:
    st: dict[str, Any] = await rpc.call(addr, "Generic", "GetStatus", {}, timeout_s=timeout_s)
    if st.get("role") != "tserver":
        raise KuduIllegalState(f"{addr} is a {st.get('role')}, not a tablet server")
    return st


def _addr_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("tserver_address", help="address of a tablet server, host[:port] (port 7050 by default)")


# --- list ---------------------------------------------------------------------------------------------------


def _list_args(p: argparse.ArgumentParser) -> None:
    _addr_arg(p)
    flag(p, "include_schema", type=bool, default=True, help="whether to include the schema of each replica [true]")
    flag(p, "table_name", help="restrict output to a specific table by name")
    flag(p, "tablets", metavar="IDS", help="comma-separated tablet ids to list (default: every tablet)")


def replica_lines(r: dict[str, Any], include_schema: bool) -> list[str]:
    lines = [
        f"Tablet id: {r['tablet_id']}",
        f"State: {r.get('state')}",
        f"Last status: {r.get('error') or ''}",
    ]
    if r.get("role"):
        lines.append(f"Role: {r['role']}")
    lines += [
        f"Table name: {r.get('table_name') or ''}",
        f"Partition: {partition_text(r.get('partition'))}",
    ]
    if r.get("on_disk_size") is not None:
        lines.append(f"Estimated on disk size: {r['on_disk_size']} bytes")
    if include_schema and r.get("schema") is not None:
        lines.append(f"Schema: {Schema.from_dict(r['schema'])!r}")
    return lines


@verb("remote_replica", "list", help="List all tablet replicas on a Kudu Tablet Server", args=_list_args, masters=False)
async def remote_list(ctx: Context, a: argparse.Namespace) -> Result:
    addr = tserver_address(a.tserver_address)
    wanted = set(csv_list(a.tablets, "-tablets") or [])
    replicas = await list_replicas(ctx.rpc(), addr, ctx.timeout_s, schema=a.include_schema)
    chosen = [
        r
        for r in replicas
        if (a.table_name is None or r.get("table_name") == a.table_name) and (not wanted or r["tablet_id"] in wanted)
    ]
    text = "\n\n".join("\n".join(replica_lines(r, a.include_schema)) for r in chosen)
    return Result(data=chosen, text=text)


# --- check --------------------------------------------------------------------------------------------------


def _check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "tserver_addresses",
        nargs="+",
        help="addresses of tablet servers, host[:port] (comma-separated or several arguments)",
    )


@verb(
    "remote_replica",
    "check",
    help="Check if all tablet replicas on Kudu tablet servers are running",
    args=_check_args,
    masters=False,
)
async def remote_check(ctx: Context, a: argparse.Namespace) -> Result:
    addrs = [tserver_address(x) for arg in a.tserver_addresses for x in (csv_list(arg, "tserver_addresses") or [])]
    rpc = ctx.rpc()
    bad: list[str] = []
    for addr in addrs:
        for r in await list_replicas(rpc, addr, ctx.timeout_s):
            # A tombstone is a replica that left the tablet's config: not running is its normal state.
            if r.get("state") not in ("RUNNING", "TOMBSTONED"):
                line = f"Tablet id: {r['tablet_id']} is {r.get('state')}" + (f" on {addr}" if len(addrs) > 1 else "")
                if r.get("error"):
                    line += f": {r['error']}"
                bad.append(line)
    if bad:
        print("\n".join(bad), file=sys.stderr)
        raise KuduIllegalState("Not all tablet replicas are running")
    return Result(text="All tablet replicas are running")


# --- delete -------------------------------------------------------------------------------------------------


def _delete_args(p: argparse.ArgumentParser) -> None:
    _addr_arg(p)
    p.add_argument("tablet_id", help="tablet identifier")
    p.add_argument("reason", help="reason for deleting the replica (written to the tablet server's log)")


@verb(
    "remote_replica",
    "delete",
    help="Delete (tombstone) a tablet replica from a Kudu Tablet Server",
    args=_delete_args,
    masters=False,
)
async def remote_delete(ctx: Context, a: argparse.Namespace) -> Result:
    addr = tserver_address(a.tserver_address)
    rpc = ctx.rpc()
    mine = {r["tablet_id"]: r for r in await list_replicas(rpc, addr, ctx.timeout_s)}
    if a.tablet_id not in mine:
        raise KuduNotFound(f"tablet {a.tablet_id} has no replica on {addr}")
    if mine[a.tablet_id].get("state") == "TOMBSTONED":
        return Result(text=f"tablet {a.tablet_id} on {addr} is already tombstoned")
    await rpc.call(
        addr,
        "TabletServer",
        "DeleteTablet",
        {"tablet_id": a.tablet_id, "delete_type": "TOMBSTONED", "reason": a.reason},
        timeout_s=ctx.timeout_s,
    )
    return Result(text=f"tablet {a.tablet_id} on {addr}: tombstoned")


# --- copy ---------------------------------------------------------------------------------------------------


def _copy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_id", help="tablet identifier")
    p.add_argument("src_address", help="address of the tablet server to copy from, host[:port]")
    p.add_argument("dst_address", help="address of the tablet server to copy to, host[:port]")
    flag(p, "force_copy", type=bool, help="force the copy when the destination tablet server has this replica [false]")


@verb(
    "remote_replica",
    "copy",
    help="Copy a tablet replica from one Kudu Tablet Server to another",
    args=_copy_args,
    masters=False,
)
async def remote_copy(ctx: Context, a: argparse.Namespace) -> Result:
    src, dst = tserver_address(a.src_address), tserver_address(a.dst_address)
    rpc = ctx.rpc()
    src_status = await server_status(rpc, src, ctx.timeout_s)
    dst_status = await server_status(rpc, dst, ctx.timeout_s)
    if src_status["uuid"] == dst_status["uuid"]:
        raise UsageError(f"{src} and {dst} are the same tablet server ({src_status['uuid']})")
    at_src = {r["tablet_id"]: r for r in await list_replicas(rpc, src, ctx.timeout_s)}
    if at_src.get(a.tablet_id, {}).get("state") != "RUNNING":
        raise KuduNotFound(f"tablet {a.tablet_id} has no running replica on {src} to copy from")
    at_dst = {r["tablet_id"]: r for r in await list_replicas(rpc, dst, ctx.timeout_s)}
    present = at_dst.get(a.tablet_id, {}).get("state")
    if present == "COPYING":  # a copy is under way there already (its leader asked for it): wait for it
        state = await _wait_copied(rpc, dst, a.tablet_id, time.monotonic() + ctx.timeout_s)
        return Result(text=f"tablet {a.tablet_id} copied to {dst} by the copy under way there: {state}")
    if present not in (None, "TOMBSTONED") and not a.force_copy:
        raise KuduIllegalState(
            f"tablet {a.tablet_id} already has a replica on {dst} ({present}); -force_copy replaces it"
        )
    reply = await rpc.call(
        dst,
        "TabletServer",
        "StartTabletCopy",
        {
            "tablet_id": a.tablet_id,
            "source_uuid": src_status["uuid"],
            "source_address": src_status.get("rpc_address") or src,
            "caller_term": MAX_TERM if a.force_copy else 0,
        },
        timeout_s=ctx.timeout_s,
    )
    if not reply.get("started") and reply.get("reason") != "copy already in progress":
        raise KuduIllegalState(f"{dst} did not start the copy: {reply.get('reason')}")
    state = await _wait_copied(rpc, dst, a.tablet_id, time.monotonic() + ctx.timeout_s)
    return Result(text=f"tablet {a.tablet_id} copied from {src} to {dst}: {state}")


async def _wait_copied(rpc: RpcClient, dst: str, tablet_id: str, deadline: float) -> str:
    """Until the destination runs the copied replica; KuduIllegalState when its copy ended otherwise."""
    state = "COPYING"
    while time.monotonic() < deadline:
        await asyncio.sleep(COPY_POLL_S)
        mine = {r["tablet_id"]: r for r in await list_replicas(rpc, dst, max(0.1, deadline - time.monotonic()))}
        r = mine.get(tablet_id)
        state = "absent" if r is None else str(r.get("state"))
        if state == "RUNNING":
            return state
        if state in ("absent", "TOMBSTONED", "FAILED"):
            detail = f": {r['error']}" if r is not None and r.get("error") else ""
            raise KuduIllegalState(
                f"the copy of tablet {tablet_id} to {dst} ended with the replica {state}{detail} "
                "(the destination's log says why)"
            )
    raise KuduTimedOut(f"tablet {tablet_id} still {state} on {dst} at the -timeout_ms deadline; it may finish later")


# --- dump ---------------------------------------------------------------------------------------------------


def _dump_args(p: argparse.ArgumentParser) -> None:
    _addr_arg(p)
    p.add_argument("tablet_id", help="tablet identifier")


@verb(
    "remote_replica",
    "dump",
    help="Dump the data of a tablet replica on a Kudu Tablet Server",
    args=_dump_args,
    masters=False,
)
async def remote_dump(ctx: Context, a: argparse.Namespace) -> Result:
    addr = tserver_address(a.tserver_address)
    rpc = ctx.rpc()
    found = [r for r in await list_replicas(rpc, addr, ctx.timeout_s, schema=True) if r["tablet_id"] == a.tablet_id]
    if not found or found[0].get("schema") is None:
        raise KuduNotFound(f"cannot find a running replica of tablet {a.tablet_id} on {addr}")
    schema = Schema.from_dict(found[0]["schema"])
    types = {c.name: c.type.name for c in schema.columns}
    req: dict[str, Any] = {"tablet_id": a.tablet_id, "read_mode": "READ_LATEST"}
    try:
        reply = await rpc.call(addr, "TabletServer", "Scan", req, timeout_s=ctx.timeout_s)
    except KuduNotTheLeader:
        reply = await rpc.call(
            addr, "TabletServer", "Scan", {**req, "read_mode": "READ_AT_SNAPSHOT"}, timeout_s=ctx.timeout_s
        )
    rows = 0
    while True:
        if reply.get("data"):
            t = ipc_to_table(reply["data"])
            cols = [(n, t.column(n).to_pylist()) for n in t.column_names]
            for i in range(t.num_rows):
                print("(" + ", ".join(f"{types.get(n, '?')} {n}={col[i]!r}" for n, col in cols) + ")")
            rows += t.num_rows
        if not reply.get("has_more") or not reply.get("scanner_id"):
            break
        reply = await rpc.call(
            addr, "TabletServer", "Scan", {"scanner_id": reply["scanner_id"]}, timeout_s=ctx.timeout_s
        )
    return Result(data=rows, text="")
