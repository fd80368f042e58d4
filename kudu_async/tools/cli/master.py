"""``kudu master ...``: the masters of a cluster."""

from __future__ import annotations

import argparse
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.common.errors import KuduBadStatus
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    add_columns_flag,
    add_format_flag,
    columns_list,
    group,
    object_result,
    rows_result,
    verb,
)
from kudu_async.tools.cli.tserver import render_status

group("master", help="Operate on a Kudu Master")

MASTER_COLUMNS = ("uuid", "rpc-addresses", "http-addresses", "version", "seqno", "start_time", "role", "member_type")
MASTER_DEFAULT_COLUMNS = "uuid,rpc-addresses,role"


async def master_rows(client: AsyncClient, timeout_s: float) -> list[dict[str, Any]]:
    """The leader's view of the master Raft config joined with each master's own status (an unreachable master
    keeps its row, with its error)."""
    try:
        members = await client.list_masters()
    except KuduBadStatus:
        members = [{"uuid": None, "rpc_address": a, "role": "UNKNOWN"} for a in client.master_addrs]
    rows = []
    for m in members:
        row: dict[str, Any] = {
            "uuid": m.get("uuid"),
            "rpc-addresses": m["rpc_address"],
            "role": m.get("role"),
            "member_type": m.get("member_type", "VOTER"),
        }
        try:
            st = await client.rpc.call(m["rpc_address"], "Generic", "GetStatus", {}, timeout_s=min(timeout_s, 5.0))
            row.update(
                {
                    "http-addresses": st.get("http_address"),
                    "version": st.get("version"),
                    "start_time": st.get("start_time"),
                    "seqno": st.get("term"),
                }
            )
        except KuduBadStatus as e:
            row["error"] = str(e)
        rows.append(row)
    return rows


def _list_args(p: argparse.ArgumentParser) -> None:
    add_columns_flag(p, MASTER_COLUMNS, MASTER_DEFAULT_COLUMNS)


@verb("master", "list", help="List masters in a Kudu cluster", args=_list_args)
async def master_list(ctx: Context, a: argparse.Namespace) -> Result:
    columns = columns_list(a.columns, MASTER_COLUMNS)
    client = await ctx.client()
    return rows_result(await master_rows(client, ctx.timeout_s), columns, a.format)


def _status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("master_address", help="address of a Kudu Master of form 'hostname:port'")
    add_format_flag(p, "json", ("pretty", "json"))


@verb("master", "status", help="Get the status of a Kudu Master", args=_status_args, masters=False)
async def master_status(ctx: Context, a: argparse.Namespace) -> Result:
    st = await (await ctx.node_rpc()).call(a.master_address, "Generic", "GetStatus", {}, timeout_s=ctx.timeout_s)
    return object_result(st, a.format, render_status)
