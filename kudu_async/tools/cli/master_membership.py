"""``kudu master add|remove``: change which masters a running cluster has.

``add``: the new master must already run, started with an empty data directory and ``--master-addresses``
naming the existing masters and itself (it waits for this verb instead of creating a catalog). The leader
adds it as a NON_VOTER, has it copy the catalog, and promotes it to VOTER once caught up; the verb waits
(up to ``-wait_secs``, Kudu's default 64 s) until the new master is a voter whose catalog has applied
everything the leader had committed when it was promoted, then prints the masters.

``remove``: the leader takes the master out of the config (not itself, nor the last one); the removed
master notices within seconds and stops serving. Tablet servers and clients follow both changes by
themselves; operators then update ``--master-addresses`` on every node (read at the next start) and the
master lists of their clients.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.client.meta_cache import parse_master_addresses
from kudu_async.common.errors import KuduBadStatus, KuduIllegalState, KuduInvalidArgument, KuduTimedOut
from kudu_async.common.retry import Deadline
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    UsageError,
    add_format_flag,
    flag,
    group,
    progress,
    rows_result,
    verb,
)

group("master", help="Operate on a Kudu Master")

DEFAULT_WAIT_SECS = 64  # Kudu's -wait_secs of ``kudu master add``
POLL_S = 0.3
COLUMNS = ("uuid", "rpc-addresses", "role", "member_type")
FLAGS_NOTE = (
    "Update --master-addresses on every master and tablet server to {addresses} (read at their next start) "
    "and the master list your clients are given; running tablet servers and clients follow by themselves."
)


def _address(text: str) -> str:
    try:
        return parse_master_addresses([text])[0]
    except KuduInvalidArgument as e:
        raise UsageError(f"<master_address>: {e.message}") from None


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("master_address", help="RPC address host:port of the new master (already running)")
    flag(
        p,
        "wait_secs",
        type=int,
        default=DEFAULT_WAIT_SECS,
        help=f"how long to wait for the new master to become a caught-up voter [{DEFAULT_WAIT_SECS}]",
    )
    add_format_flag(p)


def _remove_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("master_address", help="RPC address host:port of the master to remove")
    flag(p, "master_uuid", default=None, help="uuid of the master, to tell apart masters sharing an address")
    add_format_flag(p)


async def _masters(client: AsyncClient) -> list[dict[str, Any]]:
    return [
        {
            "uuid": m.get("uuid"),
            "rpc-addresses": m.get("rpc_address"),
            "role": m.get("role"),
            "member_type": m.get("member_type"),
        }
        for m in await client.list_masters()
    ]


async def _status(client: AsyncClient, address: str) -> dict[str, Any]:
    st = await client.rpc.call(address, "Generic", "GetStatus", {}, timeout_s=5.0)
    if not isinstance(st, dict):
        raise KuduIllegalState(f"{address} answered GetStatus with {type(st).__name__}")
    return st


async def wait_caught_up(client: AsyncClient, uuid: str, address: str, wait_s: float) -> None:
    """Until the master ``uuid`` is a voter whose catalog applied what the leader had committed when it saw
    it promoted (bounded by ``wait_s``)."""
    end = time.monotonic() + wait_s
    target: int | None = None
    last = "not promoted yet"
    with progress(None, f"waiting for master {address} to catch up") as bar:
        while True:
            try:
                entry = next((m for m in await client.list_masters() if m.get("uuid") == uuid), None)
                if entry is None:
                    raise KuduIllegalState(f"master {uuid} at {address} left the masters' config while being added")
                if entry.get("member_type") == "NON_VOTER":
                    last = "still a NON_VOTER: its copy of the catalog is catching up"
                else:
                    if target is None:
                        leader = await client.core.masters.find_leader(Deadline(5.0, "finding the leader master"))
                        target = int((await _status(client, leader)).get("catalog", {}).get("commit_index", 0))
                    catalog = (await _status(client, address)).get("catalog") or {}
                    applied = int(catalog.get("applied_index", -1))
                    if applied >= target:
                        return
                    last = f"a voter that applied {applied} of the leader's {target} catalog entries"
            except KuduIllegalState:
                raise
            except KuduBadStatus as e:
                last = str(e)
            bar.update(1)
            if time.monotonic() >= end:
                raise KuduTimedOut(f"master {address} is not a caught-up voter after {wait_s:g}s: {last}")
            await asyncio.sleep(POLL_S)


@verb("master", "add", help="Add a new master to existing Kudu cluster", args=_add_args)
async def master_add(ctx: Context, a: argparse.Namespace) -> Result:
    address = _address(a.master_address)
    if a.wait_secs <= 0:
        raise UsageError("-wait_secs must be positive")
    client = await ctx.client()
    reply = await client.core.masters.call(
        "AddMaster", {"rpc_address": address}, client.core.admin_deadline("AddMaster")
    )
    await wait_caught_up(client, reply["uuid"], address, float(a.wait_secs))
    rows = await _masters(client)
    result = rows_result(rows, COLUMNS, a.format)
    if a.format != "json":
        what = "was a master already" if reply.get("already_present") else "added"
        every = ",".join(r["rpc-addresses"] for r in rows)
        result.text = (
            f"{result.text}\n\nMaster {address} ({reply['uuid']}) {what}.\n{FLAGS_NOTE.format(addresses=every)}"
        )
    return result


@verb("master", "remove", help="Remove a master from the Kudu cluster", args=_remove_args)
async def master_remove(ctx: Context, a: argparse.Namespace) -> Result:
    address = _address(a.master_address)
    client = await ctx.client()
    req: dict[str, Any] = {"rpc_address": address}
    if a.master_uuid:
        req["master_uuid"] = a.master_uuid
    reply = await client.core.masters.call("RemoveMaster", req, client.core.admin_deadline("RemoveMaster"))
    rows = await _masters(client)
    result = rows_result(rows, COLUMNS, a.format)
    if a.format != "json":
        every = ",".join(r["rpc-addresses"] for r in rows)
        result.text = (
            f"{result.text}\n\nMaster {address} ({reply['uuid']}) removed; it stops serving within seconds: "
            f"stop its process.\n{FLAGS_NOTE.format(addresses=every)}"
        )
    return result
