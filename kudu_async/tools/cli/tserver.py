"""``kudu tserver ...``: the tablet servers of a cluster (list, status), planned maintenance (``state``,
``quiesce``) and forgetting a decommissioned one (``unregister``)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduIllegalState
from kudu_async.common.retry import Deadline
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    add_columns_flag,
    add_format_flag,
    columns_list,
    flag,
    group,
    object_result,
    rows_result,
    verb,
)

group("tserver", help="Operate on a Kudu Tablet Server")
group("tserver", "state", help="Operate on the state of a Kudu Tablet Server")
group("tserver", "quiesce", help="Operate on the quiescing state of a Kudu Tablet Server")

TSERVER_COLUMNS = (
    "uuid",
    "rpc-addresses",
    "http-addresses",
    "version",
    "seqno",
    "heartbeat",
    "location",
    "start_time",
    "state",
    "live",
    "replicas",
    "leaders",
)
TSERVER_DEFAULT_COLUMNS = "uuid,rpc-addresses"
STATE_CHANGES = {"enter_maintenance": "ENTER_MAINTENANCE_MODE", "exit_maintenance": "EXIT_MAINTENANCE_MODE"}


def _start_time(v: Any) -> str | None:
    if not isinstance(v, int | float):
        return None
    return dt.datetime.fromtimestamp(v, dt.UTC).strftime("%Y-%m-%d %H:%M:%S %Z")


def tserver_row(d: dict[str, Any]) -> dict[str, Any]:
    """One ListTabletServers descriptor under Kudu's column names (and ours: live, replicas, leaders)."""
    age = d.get("last_heartbeat_age_s")
    return {
        "uuid": d["uuid"],
        "rpc-addresses": d.get("rpc_address"),
        "http-addresses": d.get("http_address"),
        "version": d.get("version"),
        "seqno": d.get("last_report_seq"),
        "heartbeat": None if age is None else f"{round(age * 1000)}ms",
        "location": "<none>",
        "start_time": _start_time(d.get("start_time")),
        "state": d.get("state", "NONE"),
        "live": "LIVE" if d.get("live") else "DEAD",
        "replicas": d.get("num_replicas", 0),
        "leaders": d.get("num_leaders", 0),
    }


def _list_args(p: argparse.ArgumentParser) -> None:
    add_columns_flag(p, TSERVER_COLUMNS, TSERVER_DEFAULT_COLUMNS)


@verb("tserver", "list", help="List tablet servers in a Kudu cluster", args=_list_args)
async def tserver_list(ctx: Context, a: argparse.Namespace) -> Result:
    columns = columns_list(a.columns, TSERVER_COLUMNS)
    client = await ctx.client()
    servers = await client.list_tablet_servers()
    if a.format == "json":  # scripts get every field: Kudu's columns and the master's own names and types
        full = [{**tserver_row(d), **d} for d in servers]
        return Result(data=full, text=json.dumps(full, default=str))
    return rows_result([tserver_row(d) for d in servers], columns, a.format)


def _address_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tserver_address", help="address of a Tablet Server of form 'hostname:port'")


def _status_args(p: argparse.ArgumentParser) -> None:
    _address_args(p)
    add_format_flag(p, "json", ("pretty", "json"))


def render_status(st: dict[str, Any]) -> str:
    lines = [
        f"uuid: {st.get('uuid')}",
        f"role: {st.get('role')}",
        f"rpc address: {st.get('rpc_address')}",
        f"http address: {st.get('http_address')}",
        f"version: {st.get('version')}",
        f"start time: {_start_time(st.get('start_time_unix'))}",
        f"uptime: {st.get('uptime_s')} s",
    ]
    return "\n".join(lines)


@verb(
    "tserver",
    "status",
    help="Get the status of a Kudu Tablet Server",
    args=_status_args,
    masters=False,
)
async def tserver_status(ctx: Context, a: argparse.Namespace) -> Result:
    st = await (await ctx.node_rpc()).call(a.tserver_address, "Generic", "GetStatus", {}, timeout_s=ctx.timeout_s)
    return object_result(st, a.format, render_status)


# --- state ---------------------------------------------------------------------------------------------------


def _state_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tserver_uuid", help="UUID of a Kudu Tablet Server")
    flag(
        p,
        "allow_missing_tserver",
        type=bool,
        help="set the state of a tablet server the leader master has not heard from [false]",
    )


async def _change_state(ctx: Context, uuid: str, change: str, allow_missing: bool) -> dict[str, Any]:
    client = await ctx.client()
    req = {"uuid": uuid, "change": STATE_CHANGES[change], "allow_missing_tserver": allow_missing}
    reply: dict[str, Any] = await client.masters.call(
        "ChangeTServerState", req, Deadline(ctx.timeout_s, f"tserver state {change} {uuid}")
    )
    return reply


def _state_text(r: dict[str, Any]) -> str:
    return f"tserver {r['uuid']}: {r['state']}" + ("" if r["changed"] else " (unchanged)")


@verb(
    "tserver",
    "state",
    "enter_maintenance",
    help="Begin maintenance on the Tablet Server: while in maintenance the master does not re-replicate its "
    "replicas however long it is down (a planned restart)",
    args=_state_args,
)
async def enter_maintenance(ctx: Context, a: argparse.Namespace) -> Result:
    reply = await _change_state(ctx, a.tserver_uuid, "enter_maintenance", a.allow_missing_tserver)
    return Result(data=reply, text=_state_text(reply))


def _exit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tserver_uuid", help="UUID of a Kudu Tablet Server")


@verb("tserver", "state", "exit_maintenance", help="End maintenance of the Tablet Server", args=_exit_args)
async def exit_maintenance(ctx: Context, a: argparse.Namespace) -> Result:
    reply = await _change_state(ctx, a.tserver_uuid, "exit_maintenance", False)
    return Result(data=reply, text=_state_text(reply))


# --- quiesce -------------------------------------------------------------------------------------------------


async def _quiesce(ctx: Context, address: str, action: str) -> dict[str, Any]:
    reply: dict[str, Any] = await (await ctx.node_rpc()).call(
        address, "TabletServer", "Quiesce", {"action": action}, timeout_s=ctx.timeout_s
    )
    return reply


def _quiesce_text(address: str) -> Any:
    return lambda r: (
        f"{address}: {'quiescing' if r['quiescing'] else 'not quiescing'}, {r['num_leaders']} tablet leaders, "
        f"{r['num_active_scanners']} active scanners"
    )


def _quiesce_start_args(p: argparse.ArgumentParser) -> None:
    _address_args(p)
    flag(
        p,
        "error_if_not_fully_quiesced",
        type=bool,
        help="exit 1 if the tablet server still leads tablets or serves scans when the call returns [false]",
    )
    add_format_flag(p, "pretty", ("pretty", "json"))


@verb(
    "tserver",
    "quiesce",
    "start",
    help="Start quiescing the given Tablet Server: it hands its leaderships to other replicas, stands for no "
    "election and refuses new scans",
    args=_quiesce_start_args,
    masters=False,
)
async def quiesce_start(ctx: Context, a: argparse.Namespace) -> Result:
    r = await _quiesce(ctx, a.tserver_address, "start")
    if a.error_if_not_fully_quiesced and (r["num_leaders"] or r["num_active_scanners"]):
        raise KuduIllegalState(
            f"Incomplete: Tablet server not fully quiesced: {r['num_leaders']} tablet leaders and "
            f"{r['num_active_scanners']} active scanners remain"
        )
    return object_result(r, a.format, _quiesce_text(a.tserver_address))


def _quiesce_args(p: argparse.ArgumentParser) -> None:
    _address_args(p)
    add_format_flag(p, "pretty", ("pretty", "json"))


@verb("tserver", "quiesce", "stop", help="Stop quiescing a Tablet Server", args=_quiesce_args, masters=False)
async def quiesce_stop(ctx: Context, a: argparse.Namespace) -> Result:
    return object_result(await _quiesce(ctx, a.tserver_address, "stop"), a.format, _quiesce_text(a.tserver_address))


@verb(
    "tserver",
    "quiesce",
    "status",
    help="Output information about the quiescing state of a Tablet Server",
    args=_quiesce_args,
    masters=False,
)
async def quiesce_status(ctx: Context, a: argparse.Namespace) -> Result:
    r = await _quiesce(ctx, a.tserver_address, "status")
    if a.format == "json":
        return object_result(r, "json", str)
    row = {
        "Quiescing": r["quiescing"],
        "Tablet Leaders": r["num_leaders"],
        "Active Scanners": r["num_active_scanners"],
    }
    return Result(data=r, text=rows_result([row], list(row), "pretty").text)


# --- unregister ----------------------------------------------------------------------------------------------


def _unregister_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tserver_uuid", help="UUID of a Kudu Tablet Server")
    flag(
        p,
        "force_unregister_live_tserver",
        type=bool,
        help="unregister the tablet server even if the masters hear from it (it registers again at its next "
        "heartbeat) [false]",
    )
    flag(
        p,
        "remove_tserver_state",
        type=bool,
        default=True,
        help="also drop its state (maintenance mode) from the catalog [true]",
    )


@verb(
    "tserver",
    "unregister",
    help="Unregister a tablet server from the masters' in-memory state and the catalog: the decommissioned "
    "server no longer shows as dead in ksck and listings",
    args=_unregister_args,
)
async def unregister(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    if a.remove_tserver_state:
        await _change_state(ctx, a.tserver_uuid, "exit_maintenance", False)
    errors = []
    req = {"uuid": a.tserver_uuid, "force_unregister_live_tserver": a.force_unregister_live_tserver}
    for addr in client.master_addrs:
        try:
            await client.rpc.call(addr, "Master", "UnregisterTServer", req, timeout_s=ctx.timeout_s)
        except KuduBadStatus as e:
            errors.append(f"Unable to unregister the tserver from master {addr}, status: {e}")
    if errors:
        raise KuduIllegalState("Remote error: " + " ".join(errors))
    return Result(text=f"unregistered tserver {a.tserver_uuid}")
