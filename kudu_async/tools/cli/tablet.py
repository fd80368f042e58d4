"""``kudu tablet ...``: change one tablet's Raft config (add, remove, move a replica, change its type) and
its leadership. The replicas' servers come from the leader master's locations of the tablet; ``-servers``
names them instead for a Raft group no master knows (not a Kudu flag)."""

from __future__ import annotations

import argparse
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument
from kudu_async.common.retry import Deadline
from kudu_async.tools import replica_util
from kudu_async.tools.cli.framework import (
    Context,
    Result,
    add_format_flag,
    csv_list,
    flag,
    group,
    object_result,
    verb,
)

group("tablet", help="Operate on remote Kudu tablets")
group("tablet", "change_config", help="Change a tablet's Raft configuration")

REPLICA_TYPES = ("VOTER", "NON_VOTER")


def _common(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "servers",
        metavar="HOST:PORT[,...]",
        help="RPC addresses of the replicas' servers, for a Raft group the master does not know "
        "(not a Kudu flag) [the master's locations]",
    )
    add_format_flag(p, "pretty", ("pretty", "json"))


def _tablet_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("tablet_id", help="tablet identifier")


async def _servers(client: AsyncClient, ctx: Context, a: argparse.Namespace) -> list[str]:
    given = csv_list(a.servers, "-servers")
    if given:
        return given
    deadline = Deadline(ctx.timeout_s, f"locations of tablet {a.tablet_id}")
    reply = await client.masters.call("GetTabletLocations", {"tablet_ids": [a.tablet_id]}, deadline)
    if not reply.get("tablets"):
        raise KuduInvalidArgument(
            f"the master knows no tablet {a.tablet_id} (a Raft group that is not a table's tablet needs -servers)"
        )
    return [r["rpc_address"] for r in reply["tablets"][0]["replicas"] if r.get("rpc_address")]


async def _leader(client: AsyncClient, ctx: Context, a: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The address of the tablet's leader and every replica's own state of it."""
    states = await replica_util.states(client.rpc, await _servers(client, ctx, a), a.tablet_id, ctx.timeout_s)
    return replica_util.leader_of(states, a.tablet_id), states


def _said(what: str) -> Any:
    return lambda r: what


# --- change_config ----------------------------------------------------------------------------------------


def _add_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    p.add_argument("ts_uuid", help="UUID of the tablet server that should host the new replica")
    p.add_argument("replica_type", type=str.upper, choices=REPLICA_TYPES, help="new replica's type")
    _common(p)


@verb(
    "tablet",
    "change_config",
    "add_replica",
    help="Add a new replica to a tablet's Raft configuration (as a learner the leader copies the tablet to; a "
    "VOTER is promoted once it has caught up)",
    args=_add_args,
)
async def add_replica(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    leader, _ = await _leader(client, ctx, a)
    address = await replica_util.ts_address(client, a.ts_uuid)
    res = await replica_util.add_replica(
        client.rpc, a.tablet_id, leader, a.ts_uuid, address, a.replica_type == "VOTER", ctx.timeout_s
    )
    return object_result(res, a.format, _said(f"added {a.ts_uuid} to {a.tablet_id} as a {a.replica_type}"))


def _type_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    p.add_argument("ts_uuid", help="UUID of the tablet server hosting the existing replica")
    p.add_argument("replica_type", type=str.upper, choices=REPLICA_TYPES, help="existing replica's new type")
    _common(p)


@verb(
    "tablet",
    "change_config",
    "change_replica_type",
    help="Change the type of an existing replica in a tablet's Raft configuration (a NON_VOTER stays one "
    "until made a VOTER again)",
    args=_type_args,
)
async def change_replica_type(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    leader, states = await _leader(client, ctx, a)
    members = {p["uuid"]: p["member_type"] for p in states[leader].get("peers", [])}
    current = members.get(a.ts_uuid)
    if current not in REPLICA_TYPES:
        raise KuduInvalidArgument(f"{a.ts_uuid} holds no replica of {a.tablet_id} (members: {members})")
    if current == a.replica_type:
        raise KuduIllegalState(f"the replica of {a.tablet_id} on {a.ts_uuid} is already a {current}")
    if a.replica_type == "NON_VOTER":
        if states[leader].get("leader") == a.ts_uuid:
            raise KuduIllegalState(
                f"{a.ts_uuid} leads {a.tablet_id}: a leader is not demoted; move its leadership first "
                "(kudu tablet leader_step_down -new_leader_uuid=...)"
            )
        res = await replica_util.demote(client.rpc, leader, a.tablet_id, a.ts_uuid, ctx.timeout_s)
        return object_result(res, a.format, _said(f"{a.ts_uuid} is now a NON_VOTER of {a.tablet_id}"))
    res = await replica_util.promote_when_caught_up(client.rpc, leader, a.tablet_id, a.ts_uuid, ctx.timeout_s)
    return object_result(res, a.format, _said(f"{a.ts_uuid} is now a VOTER of {a.tablet_id}"))


def _remove_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    p.add_argument("ts_uuid", help="UUID of the tablet server hosting the existing replica")
    _common(p)


@verb(
    "tablet",
    "change_config",
    "remove_replica",
    help="Remove an existing replica from a tablet's Raft configuration (the master then places a new one if "
    "the tablet is under-replicated)",
    args=_remove_args,
)
async def remove_replica(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    leader, _ = await _leader(client, ctx, a)
    res = await replica_util.change_config(client.rpc, leader, a.tablet_id, "REMOVE", a.ts_uuid, None, ctx.timeout_s)
    return object_result(res, a.format, _said(f"removed {a.ts_uuid} from {a.tablet_id}"))


def _move_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    p.add_argument("from_ts_uuid", help="UUID of the tablet server to move from")
    p.add_argument("to_ts_uuid", help="UUID of the tablet server to move to")
    _common(p)


@verb(
    "tablet",
    "change_config",
    "move_replica",
    help="Move a tablet replica from one tablet server to another (add a learner, copy, promote, then remove "
    "the source; the tablet never has fewer healthy voters)",
    args=_move_args,
)
async def move_replica(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    leader, _ = await _leader(client, ctx, a)
    res = await replica_util.move_replica(client, a.tablet_id, a.from_ts_uuid, a.to_ts_uuid, leader, ctx.timeout_s)
    return object_result(
        res, a.format, _said(f"moved the replica of {a.tablet_id} from {a.from_ts_uuid} to {a.to_ts_uuid}")
    )


# --- leadership -------------------------------------------------------------------------------------------


def _step_down_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    flag(
        p,
        "abrupt",
        type=bool,
        help="step down at once (an election follows) instead of handing the leadership to a caught-up voter [false]",
    )
    flag(p, "new_leader_uuid", help="UUID of the voter the leadership goes to [the most caught-up other voter]")
    flag(p, "current_leader_uuid", help="UUID of the server leading the tablet now [found from the replicas]")
    _common(p)


@verb("tablet", "leader_step_down", help="Change the tablet's leader", args=_step_down_args)
async def leader_step_down(ctx: Context, a: argparse.Namespace) -> Result:
    if a.abrupt and a.new_leader_uuid:
        raise KuduInvalidArgument("-abrupt and -new_leader_uuid exclude each other")
    client = await ctx.client()
    leader, states = await _leader(client, ctx, a)
    st = states[leader]
    if a.current_leader_uuid and st.get("leader") != a.current_leader_uuid:
        raise KuduIllegalState(f"{a.current_leader_uuid} does not lead {a.tablet_id}: {st.get('leader')} does")
    if a.abrupt:
        res = await client.rpc.call(leader, "Consensus", "StepDown", {"group": a.tablet_id}, timeout_s=ctx.timeout_s)
        return object_result(res, a.format, _said(f"the leader of {a.tablet_id} stepped down"))
    peers = {p["uuid"]: p for p in st.get("peers", []) if p["member_type"] == "VOTER" and p["uuid"] != st["leader"]}
    target = a.new_leader_uuid or max(peers, key=lambda u: (peers[u].get("match_index") or 0, u), default=None)
    if target is None:
        raise KuduIllegalState(f"{a.tablet_id} has no other voter to hand its leadership to (try -abrupt)")
    if target not in peers:
        raise KuduInvalidArgument(f"{target} is not another voter of {a.tablet_id} (voters: {sorted(peers)})")
    address = peers[target].get("address") or await replica_util.ts_address(client, target)
    res = await replica_util.transfer_leadership(client.rpc, leader, a.tablet_id, target, address, ctx.timeout_s)
    return object_result(res, a.format, _said(f"{target} now leads {a.tablet_id}"))


def _state_args(p: argparse.ArgumentParser) -> None:
    _tablet_arg(p)
    _common(p)


def _render_states(states: dict[str, Any]) -> str:
    lines = []
    for addr, st in sorted(states.items()):
        if "error" in st:
            lines.append(f"{addr}: {st['error']}")
            continue
        voters = ",".join(p["uuid"] for p in st.get("peers", []) if p["member_type"] == "VOTER")
        lines.append(
            f"{addr}: {st.get('role')} term {st.get('term')} leader {st.get('leader')} commit {st.get('commit_index')} "
            f"voters {voters}"
        )
    return "\n".join(lines)


@verb(
    "tablet",
    "raft_state",
    help="Each replica's own view of the tablet's Raft group: role, term, leader, commit index, members "
    "(not a Kudu verb)",
    args=_state_args,
)
async def raft_state(ctx: Context, a: argparse.Namespace) -> Result:
    client = await ctx.client()
    states = await replica_util.states(client.rpc, await _servers(client, ctx, a), a.tablet_id, ctx.timeout_s)
    return object_result(states, a.format, _render_states)
