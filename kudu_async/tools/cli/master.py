"""``kudu master ...``: the masters of a cluster."""

from __future__ import annotations

import argparse
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.common.errors import KuduBadStatus
from kudu_async.tools.cli.framework import Context, Result, add_format_flag, csv_list, flag, group, rows_result, verb

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
    flag(
        p,
        "columns",
        default=MASTER_DEFAULT_COLUMNS,
        help=f"comma-separated columns to print, of {', '.join(MASTER_COLUMNS)} [{MASTER_DEFAULT_COLUMNS}]",
    )
    add_format_flag(p)


@verb("master", "list", help="List masters in a Kudu cluster", args=_list_args)
async def master_list(ctx: Context, a: argparse.Namespace) -> Result:
    columns = csv_list(a.columns, "-columns") or []
    unknown = [c for c in columns if c not in MASTER_COLUMNS]
    if unknown:
        raise ValueError(f"-columns: unknown column(s) {', '.join(unknown)}; known: {', '.join(MASTER_COLUMNS)}")
    client = await ctx.client()
    return rows_result(await master_rows(client, ctx.timeout_s), columns, a.format)
