"""Tablet replica operations shared by ``kudu tablet ...`` and ``cluster rebalance`` (Kudu keeps
these in ``tools/tool_replica_util``): find a tablet's leader, change its Raft config one server at a time,
move a replica (add learner, tablet copy, promote, remove the source) and hand leadership to a peer.

Every step talks to the tablet's leader through ``Consensus/*`` and is bounded by a deadline; a refusal
that may pass (a learner not caught up yet, a config index that moved) is retried with backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from kudu_async.client.aio import AsyncClient
from kudu_async.common.errors import (
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotTheLeader,
    KuduTimedOut,
)
from kudu_async.common.retry import BackoffPolicy, Deadline
from kudu_async.rpc.client import RpcClient

# A leadership transfer the old leader abandons (its target never caught up or never won) shows as
# "nothing happened" after one election timeout (1.5 s); wait a few of those before calling it refused.
TRANSFER_WAIT_S = 6.0
# While a new replica's copy runs, how often to try promoting it: often, since once the copy is done the
# master promotes the learner itself and may then trim a voter of the over-replicated tablet; the sooner we
# see the promotion, the sooner src is the one removed.
PROMOTE_POLL = BackoffPolicy(initial_s=0.02, max_s=0.1)


async def states(rpc: RpcClient, servers: Sequence[str], group: str, timeout_s: float) -> dict[str, Any]:
    """Each server's ``Consensus/GetState`` of ``group`` (or ``{"error": ...}`` where the call failed)."""

    async def one(addr: str) -> Any:
        try:
            return await rpc.call(addr, "Consensus", "GetState", {"group": group}, timeout_s=timeout_s)
        except KuduBadStatus as e:
            return {"error": e.to_dict()}

    return dict(zip(servers, await asyncio.gather(*(one(a) for a in servers)), strict=True))


def leader_of(states_by_addr: dict[str, Any], group: str) -> str:
    """The address of the replica leading ``group`` in the newest term (a stale leader may linger)."""
    leaders = [a for a, st in states_by_addr.items() if st.get("role") == "LEADER"]
    if not leaders:
        raise KuduIllegalState(
            f"no server in {sorted(states_by_addr)} leads {group}: "
            + "; ".join(f"{a}: {st.get('role') or st.get('error')}" for a, st in states_by_addr.items())
        )
    return max(leaders, key=lambda a: states_by_addr[a].get("term", 0))


async def ts_address(client: AsyncClient, uuid: str) -> str:
    """The RPC address of a live tablet server, from the leader master."""
    for d in await client.list_tablet_servers():
        if d["uuid"] == uuid:
            if not d.get("live"):
                raise KuduIllegalState(
                    f"tablet server {uuid} is not live (last heartbeat {d.get('last_heartbeat_age_s')} s ago)"
                )
            return str(d["rpc_address"])
    raise KuduInvalidArgument(f"the master knows no tablet server {uuid}")


async def change_config(
    rpc: RpcClient,
    leader: str,
    group: str,
    op: str,
    peer: str,
    address: str | None,
    timeout_s: float,
    cas: int | None = None,
) -> dict[str, Any]:
    """One Raft config change on the leader at ``leader``; ``cas``: refused unless the config is at that index."""
    req: dict[str, Any] = {"group": group, "op": op, "peer": peer}
    if address:
        req["address"] = address
    if cas is not None:
        req["cas_config_index"] = cas
    reply: dict[str, Any] = await rpc.call(leader, "Consensus", "ChangeConfig", req, timeout_s=timeout_s)
    return reply


async def add_replica(
    rpc: RpcClient, group: str, leader: str, peer: str, address: str, voter: bool, timeout_s: float
) -> dict[str, Any]:
    """A learner the leader has the new server copy the tablet to: for a voter one on its way to voting
    (ADD_LEARNER), then PROMOTEd once its log has caught up (the leader refuses before; the master may
    promote it first, which is fine); for a NON_VOTER one that stays a learner (ADD_NON_VOTER)."""
    deadline = Deadline(timeout_s, f"adding {peer} to {group} as a learner")
    op = "ADD_LEARNER" if voter else "ADD_NON_VOTER"
    last: BaseException | None = None
    while True:
        deadline.left(last)
        try:
            first = await change_config(rpc, leader, group, op, peer, address, deadline.rpc_timeout(10.0))
            break
        except KuduIllegalState as e:  # the previous change (or a new leader's no-op) is not committed yet
            last = e
            await deadline.backoff(e)
    if not voter:
        return first
    return await promote_when_caught_up(rpc, leader, group, peer, deadline.left())


async def demote(rpc: RpcClient, leader: str, group: str, peer: str, timeout_s: float) -> dict[str, Any]:
    """Make the voter ``peer`` a NON_VOTER that stays one (DEMOTE), retried while the previous config
    change is not committed; the leader refuses to demote itself."""
    deadline = Deadline(timeout_s, f"demotion of {peer} of {group} to NON_VOTER")
    last: BaseException | None = None
    while True:
        deadline.left(last)
        try:
            return await change_config(rpc, leader, group, "DEMOTE", peer, None, deadline.rpc_timeout(10.0))
        except KuduIllegalState as e:
            if "not committed yet" not in str(e):
                raise
            last = e
            await deadline.backoff(e)


async def promote_when_caught_up(
    rpc: RpcClient, leader: str, group: str, peer: str, timeout_s: float
) -> dict[str, Any]:
    deadline = Deadline(timeout_s, f"promotion of the new replica {peer} of {group}", policy=PROMOTE_POLL)
    last: BaseException | None = None
    while True:
        deadline.left(last)
        st = await rpc.call(leader, "Consensus", "GetState", {"group": group}, timeout_s=deadline.rpc_timeout(5.0))
        me = next((p for p in st.get("peers", []) if p["uuid"] == peer), None)
        if me is None:
            raise KuduIllegalState(f"{peer} left the config of {group} before it was promoted")
        if me["member_type"] == "VOTER":
            return {"group": group, "peer": peer, "member_type": "VOTER", "config_index": st.get("config_index")}
        try:
            return await change_config(rpc, leader, group, "PROMOTE", peer, None, deadline.rpc_timeout(10.0))
        except (KuduIllegalState, KuduTimedOut) as e:  # not caught up yet (its tablet copy is running)
            last = e
        except KuduInvalidArgument as e:  # "not a learner": the master promoted it between our two calls
            last = e
        await deadline.backoff(last)


async def transfer_leadership(
    rpc: RpcClient, leader: str, group: str, peer: str, peer_address: str, timeout_s: float
) -> dict[str, Any]:
    """Ask the leader at ``leader`` to hand ``group`` to ``peer`` and wait until ``peer``'s own state says
    it leads. Raises KuduTimedOut when it does not within ``timeout_s`` (the leader gave up: the peer did
    not catch up or did not win), or the leader's refusal (not a voter, not the leader any more)."""
    deadline = Deadline(timeout_s, f"transfer of the leadership of {group} to {peer}")
    before = await rpc.call(
        leader,
        "Consensus",
        "TransferLeadership",
        {"group": group, "peer": peer},
        timeout_s=deadline.rpc_timeout(timeout_s),
    )
    last: BaseException | None = None
    while True:
        try:
            st = await rpc.call(
                peer_address, "Consensus", "GetState", {"group": group}, timeout_s=deadline.rpc_timeout(2.0)
            )
            if st.get("role") == "LEADER":
                return {"group": group, "leader": peer, "term": st.get("term"), "previous": before}
            last = KuduIllegalState(f"{peer} is {st.get('role')} in term {st.get('term')}")
        except KuduBadStatus as e:
            last = e
        await deadline.backoff(last)


async def move_replica(
    client: AsyncClient,
    group: str,
    src: str,
    dst: str,
    leader: str,
    timeout_s: float,
    dst_address: str | None = None,
    leader_to: str | None = None,
) -> dict[str, Any]:
    """Move ``group``'s replica from server ``src`` to ``dst``: add ``dst`` (copied, promoted), then remove
    ``src``; the tablet never has fewer healthy voters. ``leader`` is the address of the current leader.

    A leading ``src`` first hands leadership to ``leader_to`` (default: another voter), before the copy, so
    the removal is never a leader removing itself, which leaves the tablet leaderless for an election. The
    exception is a tablet whose only voter is ``src`` (replication factor 1): it removes itself right
    after ``dst``'s promotion and ``dst`` elects itself (the tablet is unavailable for an election timeout).

    ``src`` is removed right after the promotion, guarded by the promotion's config index: while the
    tablet has one voter too many the master may trim one itself. If it trims ``src``, fine; if it trims
    another voter, the move fails (ILLEGAL_STATE) instead of removing ``src`` too and going under the
    replication factor."""
    rpc = client.rpc
    st = await rpc.call(leader, "Consensus", "GetState", {"group": group}, timeout_s=timeout_s)
    members = {p["uuid"]: p["member_type"] for p in st.get("peers", [])}
    if members.get(src) != "VOTER":
        raise KuduInvalidArgument(f"{src} holds no voter replica of {group} (members: {members})")
    if dst in members and members[dst] != "NONE":
        raise KuduInvalidArgument(f"{dst} already holds a replica of {group}")
    voters_before = sum(1 for t in members.values() if t == "VOTER")
    t0 = time.monotonic()
    deadline = Deadline(timeout_s, f"moving the replica of {group} from {src} to {dst}")
    notes: list[str] = []
    handed_over = False
    if st.get("role") == "LEADER" and st.get("leader") == src:
        others = sorted(u for u, t in members.items() if t == "VOTER" and u != src)
        target = leader_to if leader_to in others else (others[0] if others else None)
        handed_over = True
        if target is None:
            notes.append(
                f"{src} is the only voter: it removes itself once {dst} is promoted, and {dst} then elects itself"
            )
        else:
            leader = await _hand_over(rpc, leader, group, target, st, deadline, notes)
    address = dst_address or await ts_address(client, dst)
    promoted = await add_replica(rpc, group, leader, dst, address, True, deadline.left())
    cas: int | None = promoted.get("config_index")
    last: BaseException | None = None
    while True:
        deadline.left(last)
        if cas is not None:
            try:
                await change_config(rpc, leader, group, "REMOVE", src, None, deadline.rpc_timeout(10.0), cas=cas)
                break
            except (KuduIllegalState, KuduNotTheLeader) as e:  # the config moved on, or the leader changed
                last = e
                cas = None
                await deadline.backoff(e)
                continue
        try:
            st = await rpc.call(leader, "Consensus", "GetState", {"group": group}, timeout_s=deadline.rpc_timeout(5.0))
            if st.get("role") != "LEADER":
                raise KuduNotTheLeader(f"{leader} no longer leads {group}")
        except (KuduNotTheLeader, KuduIllegalState, KuduTimedOut) as e:
            last = e
            leader = await _find_leader(rpc, st, group, deadline)
            continue
        voters = [p["uuid"] for p in st.get("peers", []) if p["member_type"] == "VOTER"]
        if src not in voters:
            break  # the master trimmed the over-replicated tablet first, and chose src
        if len(voters) <= voters_before:
            gone = sorted(set(members) - set(voters) - {dst})
            raise KuduIllegalState(
                f"{dst} was added to {group} but {gone or 'another voter'} was removed instead "
                f"of {src} (by the master's trimming?); {src} stays"
            )
        if st.get("leader") == src and not handed_over:  # src was elected again during the copy
            handed_over = True
            target = leader_to if leader_to is not None and leader_to in voters and leader_to != src else dst
            leader = await _hand_over(rpc, leader, group, target, st, deadline, notes)
            continue
        cas = st.get("config_index")
    out: dict[str, Any] = {
        "tablet": group,
        "moved_from": src,
        "moved_to": dst,
        "seconds": round(time.monotonic() - t0, 3),
    }
    if notes:
        out["notes"] = notes
    return out


async def _hand_over(
    rpc: RpcClient, leader: str, group: str, target: str, st: dict[str, Any], deadline: Deadline, notes: list[str]
) -> str:
    """Transfer the leadership of ``group`` to ``target`` (its address from the leader's state ``st``); the
    address of whoever leads afterwards. A failed transfer is noted, not raised: the source stays leader
    and removes itself later."""
    address = next((str(p["address"]) for p in st.get("peers", []) if p["uuid"] == target and p.get("address")), None)
    if address is None:
        notes.append(f"leadership not handed over: no address of {target} in the leader's state")
        return leader
    try:
        await transfer_leadership(rpc, leader, group, target, address, min(TRANSFER_WAIT_S, deadline.left()))
    except KuduBadStatus as e:
        notes.append(f"leadership transfer to {target} failed ({e}); the source removes itself")
        return leader
    notes.append(f"leadership handed to {target} first")
    return address


async def _find_leader(rpc: RpcClient, last_state: dict[str, Any], group: str, deadline: Deadline) -> str:
    """The current leader's address, asking the members named in ``last_state`` (with backoff)."""
    addrs = [str(p["address"]) for p in last_state.get("peers", []) if p.get("address")]
    last: BaseException | None = None
    while True:
        try:
            return leader_of(await states(rpc, addrs, group, deadline.rpc_timeout(5.0)), group)
        except KuduIllegalState as e:  # an election is under way
            last = e
        await deadline.backoff(last)
