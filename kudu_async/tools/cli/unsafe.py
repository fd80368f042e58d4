"""``kudu remote_replica unsafe_change_config``: recover a tablet that lost its Raft majority.

With a majority of its replicas gone for good nothing commits, not even the config change that would
replace them. This verb forces one surviving replica's config to the members named (its own uuid among
them, every one a member of its committed config): that replica writes the new config as if a new leader
had sent it, in the next term, elects itself, and the master then re-replicates the tablet back to its
replication factor. Writes the lost majority committed but the survivor never received are lost; the
replicas left out must never come back (the master deletes them if they report again).
"""

from __future__ import annotations

import argparse

from kudu_async.client.meta_cache import parse_master_addresses
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.tools.cli.framework import Context, Result, UsageError, group, verb

group("remote_replica", help="Operate on remote tablet replicas on a Kudu Tablet Server")

TSERVER_PORT = 7050  # Kudu's default tablet server RPC port, for an address given without one


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("tserver_address", help="RPC address host:port of the tablet server holding the survivor")
    p.add_argument("tablet_id", help="the tablet's id")
    p.add_argument("peer_uuids", nargs="+", help="uuids of the members to keep (this tablet server's among them)")


@verb(
    "remote_replica",
    "unsafe_change_config",
    help="Force the specified replica to adopt a new Raft config",
    args=_args,
    masters=False,
)
async def unsafe_change_config(ctx: Context, a: argparse.Namespace) -> Result:
    text = a.tserver_address if ":" in a.tserver_address else f"{a.tserver_address}:{TSERVER_PORT}"
    try:
        address = parse_master_addresses([text])[0]
    except KuduInvalidArgument as e:
        raise UsageError(f"<tserver_address>: {e.message}") from None
    if len(set(a.peer_uuids)) != len(a.peer_uuids):
        raise UsageError(f"<peer uuids>: a uuid is named twice in {a.peer_uuids}")
    reply = await ctx.rpc().call(
        address,
        "Consensus",
        "UnsafeChangeConfig",
        {"tablet_id": a.tablet_id, "peers": list(a.peer_uuids), "caller_id": "kudu-tool"},
        timeout_s=ctx.timeout_s,
    )
    text = (
        f"Tablet {a.tablet_id} on {address}: config forced to voters {', '.join(reply['voters'])}"
        + (f", non-voters {', '.join(reply['learners'])}" if reply.get("learners") else "")
        + f" (entry {reply['config_index']}, term {reply['term']}, replica now {reply['role']})."
    )
    return Result(data=reply, text=text)
