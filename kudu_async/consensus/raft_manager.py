"""All Raft replicas of one node: one ticker, one transport, one ``Consensus`` RPC service.

Replicas live under ``<data-dir>/consensus/<group>/``. On start the manager reopens every replica it
finds there, asking the role for the state machine of each (by the ``kind`` recorded at creation), so a
restarted node rejoins all its groups without anyone telling it again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from kudu_async.common.errors import (
    KuduAlreadyPresent,
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotFound,
    KuduServiceUnavailable,
)
from kudu_async.consensus import manager_messages as cm
from kudu_async.consensus.consensus_meta import ConsensusMetadata
from kudu_async.consensus.raft import AppendRequest, ConfigChangeOp, message_from_dict
from kudu_async.consensus.replica import RaftReplica, ReplicaOptions, ReplicaState, StateMachine
from kudu_async.consensus.transport import ConsensusTransport, Ticker
from kudu_async.fs.io_util import atomic_write_bytes
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.messages import UNSET, Method, ServiceTable, serve
from kudu_async.rpc.server import CallContext, RpcServer

log = logging.getLogger(__name__)

GROUP_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# The longest a Consensus/Batch answer waits for the acks of its appends (their WAL writes). Meanwhile the
# sender sends this node nothing else (one call in flight per peer), heartbeats included, so it stays far
# below an election timeout; acks not ready by then go out in a call of their own.
ACK_WAIT_S = 0.25
StateMachineFactory = Callable[[str, dict[str, Any]], Awaitable[StateMachine]]


def check_group_id(group: Any) -> str:
    if not isinstance(group, str) or not GROUP_ID_RE.match(group):
        raise KuduInvalidArgument(f"bad raft group id {group!r}: expected 1-128 of [A-Za-z0-9_.-]")
    return group


class RaftManager:
    def __init__(
        self,
        node_uuid: str,
        root: Path,
        rpc_client: RpcClient,
        executor: Executor | None = None,
        options: ReplicaOptions | None = None,
        tick_interval_s: float = 0.1,
        max_parallel_opens: int = 4,
    ) -> None:
        self.node_uuid = node_uuid
        self.root = root
        self.executor = executor
        self.options = options or ReplicaOptions()
        self.transport = ConsensusTransport(rpc_client, node_uuid)
        self.transport.on_reply = self._deliver_replies
        self.ticker = Ticker(tick_interval_s)
        self.ticker.on_jump = self._ticks_jumped
        self.replicas: dict[str, RaftReplica] = {}
        self._factories: dict[str, StateMachineFactory] = {}
        self.unknown_group_messages = 0
        self.max_parallel_opens = max_parallel_opens
        self.opening: set[str] = set()  # on disk, not open yet: never report those as missing
        self.reopened_at: float | None = None  # monotonic time the replicas on disk at start were all open
        self.tombstoned: set[str] = set()
        self._open_task: asyncio.Task[None] | None = None
        self.transport.on_missing = self._peer_missing_groups
        # Set by the role: a leader's peer needs a copy of (group) -> called with (group, peer, address).
        self.on_peer_needs_copy: Callable[[str, str, str], None] | None = None
        # Set by the role: a replica's role, term or leader changed -> called with (group).
        self.on_role_change: Callable[[str], None] | None = None

    def register_kind(self, kind: str, factory: StateMachineFactory) -> None:
        """How to build the state machine of replicas created with ``kind``."""
        self._factories[kind] = factory

    def methods(self) -> ServiceTable:
        """The ``Consensus`` protocol: each method with its request and response messages."""
        return {
            "Batch": Method(cm.BatchRequest, cm.BatchResponse, self._rpc_batch, requires="service"),
            "StepDown": Method(cm.StepDownRequest, cm.LeaderHint, self._rpc_step_down, requires="service"),
            "TransferLeadership": Method(
                cm.TransferLeadershipRequest, cm.LeaderHint, self._rpc_transfer, requires="service"
            ),
            "GetState": Method(cm.GetStateRequest, dict, self._rpc_get_state, requires="service"),
            "ChangeConfig": Method(
                cm.ChangeConfigRequest, cm.ChangeConfigResponse, self._rpc_change_config, requires="service"
            ),
            # An operator's last resort for a group that lost its majority (``kudu remote_replica
            # unsafe_change_config``): it may lose committed writes, so only a superuser may ask.
            "UnsafeChangeConfig": Method(
                cm.UnsafeChangeConfigRequest,
                cm.UnsafeChangeConfigResponse,
                self._rpc_unsafe_change_config,
                requires="superuser",
            ),
        }

    def register_rpc(self, server: RpcServer) -> None:
        serve(server, "Consensus", self.methods())

    async def start(self, background: bool = False) -> None:
        """Reopen every replica on disk (``max_parallel_opens`` at a time) and start ticking.

        With ``background`` the reopening runs as a task and this returns at once, so the node serves
        (and reports its replicas as bootstrapping) while hundreds of replicas replay their logs.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        dirs = sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        for d in dirs:
            if (d / TOMBSTONE_FILE).exists():
                self.tombstoned.add(d.name)
            else:
                self.opening.add(d.name)
        self.ticker.start()
        if background:
            self._open_task = asyncio.get_running_loop().create_task(self._reopen_all(dirs), name="raft-reopen")
        else:
            await self._reopen_all(dirs)

    async def _reopen_all(self, dirs: list[Path]) -> None:
        sem = asyncio.Semaphore(self.max_parallel_opens)

        async def one(d: Path) -> None:
            async with sem:
                await self.open_existing(d.name)

        await asyncio.gather(*(one(d) for d in dirs if d.name not in self.tombstoned))
        self.reopened_at = time.monotonic()
        log.info("replicas reopened", extra={"count": len(self.replicas), "tombstoned": len(self.tombstoned)})

    async def open_existing(self, group: str) -> RaftReplica | None:
        """Open a replica whose directory is on disk (at start, or after a tablet copy installed it)."""
        d = self.root / group
        self.opening.add(group)
        try:
            cm = await asyncio.get_running_loop().run_in_executor(self.executor, ConsensusMetadata.load, d / "cmeta")
            extra = dict((cm.config if cm else {}).get("extra", {}))
            return await self._open_replica(group, extra, None)
        except KuduBadStatus as e:
            log.error("replica could not be reopened; it stays FAILED", extra={"group": group, "error": str(e)})
            return self.replicas.get(group)
        finally:
            self.opening.discard(group)

    async def create_replica(
        self, group: str, kind: str, peers: dict[str, str], extra: dict[str, Any] | None = None
    ) -> RaftReplica:
        """Create a brand-new replica of ``group`` whose first config is ``peers`` (uuid -> address)."""
        check_group_id(group)
        if group in self.replicas:
            raise KuduAlreadyPresent(f"replica of {group} already exists on {self.node_uuid}")
        if kind not in self._factories:
            raise KuduInvalidArgument(f"unknown replica kind {kind!r}; this node hosts {sorted(self._factories)}")
        if self.node_uuid not in peers:
            raise KuduInvalidArgument(f"config of {group} does not include this node {self.node_uuid}")
        if group in self.tombstoned:
            # A new incarnation replaces the tombstone (Kudu keeps the tombstone's term; we start afresh).
            await self.remove_replica(group, tombstone=False)
        return await self._open_replica(group, {**(extra or {}), "kind": kind}, peers)

    async def _open_replica(self, group: str, extra: dict[str, Any], peers: dict[str, str] | None) -> RaftReplica:
        kind = extra.get("kind", "")
        factory = self._factories.get(kind)
        sm: StateMachine = _FailedStateMachine() if factory is None else await factory(group, extra)
        replica = RaftReplica(
            group, self.node_uuid, self.root / group, sm, self.transport, self.executor, self.options, extra
        )
        self.replicas[group] = replica
        self.tombstoned.discard(group)
        replica.on_peer_needs_copy = lambda peer, address: self._needs_copy(group, peer, address)
        replica.on_role_change = lambda: self._role_changed(group)
        replica.ticks_on_schedule = self.ticker.on_schedule
        if factory is None:
            replica.state = ReplicaState.FAILED
            replica.error = f"no state machine for kind {kind!r} on this node"
            return replica
        await replica.open(peers)  # on failure the replica stays listed as FAILED, with its reason

        def on_tick_error(e: BaseException) -> None:
            replica._fail(f"tick failed: {e}")

        self.ticker.register(group, replica.tick, on_tick_error)
        self._split_log_cache_budget()
        return replica

    def _split_log_cache_budget(self) -> None:
        """Each replica's in-memory log gets its own limit or an equal share of the node's, whichever is
        smaller, so their sum never exceeds the node's budget however many replicas it hosts."""
        opts = self.options
        share = min(opts.raft.log_cache_bytes, opts.global_log_cache_bytes // max(1, len(self.replicas)))
        for replica in self.replicas.values():
            if replica.raft is not None:
                replica.raft.set_log_cache_limit(share)

    def log_cache_bytes(self) -> int:
        """Bytes of log entries all replicas hold in memory."""
        return sum(r.log_cache_bytes() for r in self.replicas.values())

    def _ticks_jumped(self) -> None:
        log.warning("raft ticks were held up (process stopped or event loop starved); leader leases voided")
        for replica in self.replicas.values():
            replica.void_lease()

    def _role_changed(self, group: str) -> None:
        if self.on_role_change is not None:
            self.on_role_change(group)

    def _needs_copy(self, group: str, peer: str, address: str) -> None:
        if self.on_peer_needs_copy is not None:
            self.on_peer_needs_copy(group, peer, address)

    def _peer_missing_groups(self, peer: str, groups: list[str]) -> None:
        """A peer answered that it has no replica of these groups: their leaders here ask for a copy."""
        for group in groups:
            replica = self.replicas.get(group) if isinstance(group, str) else None
            if replica is not None:
                replica.peer_needs_copy(peer)

    def replica_dir(self, group: str) -> Path:
        return self.root / check_group_id(group)

    async def remove_replica(self, group: str, *, tombstone: bool) -> None:
        """Stop a replica and delete its files; a tombstone keeps ``cmeta`` (term and vote survive, so
        the replica can never vote twice in a term if it comes back) and marks the directory."""
        replica = self.replicas.pop(group, None)
        self.ticker.unregister(group)
        if replica is not None:
            await replica.close()
            self._split_log_cache_budget()
        d = self.replica_dir(group)
        await asyncio.get_running_loop().run_in_executor(self.executor, delete_replica_files, d, tombstone)
        if tombstone:
            self.tombstoned.add(group)
        else:
            self.tombstoned.discard(group)

    def get(self, group: Any) -> RaftReplica:
        replica = self.replicas.get(check_group_id(group))
        if replica is None:
            if group in self.opening:  # on disk, replaying its log after a restart: ask again shortly
                raise KuduServiceUnavailable(
                    f"replica of {group} on {self.node_uuid} is still opening", {"retryable": True}
                )
            raise KuduNotFound(f"no replica of {group} on {self.node_uuid}")
        return replica

    async def stop(self) -> None:
        await self.ticker.stop()
        await asyncio.gather(*(r.close() for r in self.replicas.values()), return_exceptions=True)
        await self.transport.close()

    def status(self) -> list[dict[str, Any]]:
        return [r.status() for _, r in sorted(self.replicas.items())]

    # --- RPC handlers ---------------------------------------------------------------------------------

    async def _rpc_batch(self, request: cm.BatchRequest, ctx: CallContext) -> cm.BatchResponse:
        """Step a peer's messages; answer with what this node has for the peer by then, including the
        acks of the appends received, which are owed once their entries are durable: the answer waits for
        them (up to ACK_WAIT_S), as Kudu's UpdateConsensus does, so an append costs one call, not a
        call there and another one back."""
        sender, raw_messages = request.sender, request.messages
        if request.to != self.node_uuid:
            raise KuduInvalidArgument(f"Consensus/Batch: addressed to {request.to!r}, this node is {self.node_uuid!r}")
        self.transport.begin_capture(sender)
        missing: set[str] = set()
        owed: dict[RaftReplica, int] = {}
        try:
            self._deliver(raw_messages, missing, owed, sender)
        finally:
            replies = self.transport.end_capture()
        if owed:
            sink = self.transport.open_sink(sender)
            answered = False
            try:
                wait = min(ACK_WAIT_S, max(0.0, ctx.time_left(default_s=ACK_WAIT_S, margin_s=0.1)))
                await asyncio.gather(*(r.wait_append_responses(sender, n, wait) for r, n in owed.items()))
                answered = True
            finally:  # cancelled: what collected goes out the usual way instead
                replies += self.transport.close_sink(sender, sink, deliver=answered)
        return cm.BatchResponse(messages=replies, missing=sorted(missing) if missing else UNSET)

    def _deliver_replies(self, sender: str, raw_messages: list[dict[str, Any]]) -> None:
        try:
            self._deliver(raw_messages)
        except KuduBadStatus as e:
            log.warning("bad consensus reply dropped", extra={"peer": sender, "error": str(e)})

    def _deliver(
        self,
        raw_messages: list[dict[str, Any]],
        missing: set[str] | None = None,
        owed: dict[RaftReplica, int] | None = None,
        sender: str = "",
    ) -> None:
        """Step each message into its replica. ``owed`` (for a request from ``sender``) gets, per replica
        that received appends with entries, the count of AppendResponses to ``sender`` that answers them."""
        messages = [message_from_dict(m) for m in raw_messages]  # all validated before any is stepped
        for m in messages:
            if m.dst != self.node_uuid:
                raise KuduInvalidArgument(f"raft message for {m.dst} sent to {self.node_uuid}")
        for m in messages:
            replica = self.replicas.get(m.group)
            if replica is None:
                self.unknown_group_messages += 1
                if missing is not None and m.group not in self.opening:
                    missing.add(m.group)  # no replica, or a tombstone: the leader may copy one here
                continue
            if owed is not None and type(m) is AppendRequest and m.entries and replica.state is ReplicaState.RUNNING:
                owed[replica] = owed.get(replica, replica.append_responses_sent.get(sender, 0)) + 1
            replica.receive(m)

    async def _rpc_step_down(self, request: cm.StepDownRequest, ctx: CallContext) -> cm.LeaderHint:
        replica = self.get(request.group)
        replica.step_down()
        return cm.LeaderHint(**replica.leader_hint())

    async def _rpc_transfer(self, request: cm.TransferLeadershipRequest, ctx: CallContext) -> cm.LeaderHint:
        replica = self.get(request.group)
        replica.transfer_leadership(request.peer)
        return cm.LeaderHint(**replica.leader_hint())

    async def _rpc_change_config(self, request: cm.ChangeConfigRequest, ctx: CallContext) -> cm.ChangeConfigResponse:
        """One-server config change on the leader (the master's re-replication uses it: ADD_LEARNER,
        which a tablet copy then fills, PROMOTE, REMOVE). ``cas_config_index`` guards against races."""
        replica = self.get(request.group)
        try:
            op = ConfigChangeOp(request.op)
        except ValueError:
            raise KuduInvalidArgument(f"'op' must be one of {[o.value for o in ConfigChangeOp]}") from None
        peer, address = request.peer, request.address
        adding = (ConfigChangeOp.ADD_VOTER, ConfigChangeOp.ADD_LEARNER, ConfigChangeOp.ADD_NON_VOTER)
        if op in adding and not address and peer not in replica.peers:
            raise KuduInvalidArgument(f"adding {peer} needs its 'address'")
        cas = request.cas_config_index
        raft = replica.raft
        if cas is not None and raft is not None and raft.config_index != cas:
            raise KuduIllegalState(
                f"config of {replica.group} is at index {raft.config_index}, not {cas}",
                {"config_index": raft.config_index},
            )
        remaining = ctx.remaining()
        index = await replica.change_config(op, peer, address, 30.0 if remaining is None else max(0.05, remaining))
        return cm.ChangeConfigResponse(**replica.leader_hint(), config_index=index)

    async def _rpc_unsafe_change_config(
        self, request: cm.UnsafeChangeConfigRequest, ctx: CallContext
    ) -> cm.UnsafeChangeConfigResponse:
        """Force one replica's config (see ``RaftNode.unsafe_change_config``); every check is made before
        anything changes: the replica exists here, the uuids are distinct members of its committed config
        and this server stays a voter."""
        if request.dest_uuid is not None and request.dest_uuid != self.node_uuid:
            raise KuduInvalidArgument(
                f"'dest_uuid': this server is {self.node_uuid}, not {request.dest_uuid}", {"field": "dest_uuid"}
            )
        peers = request.peers
        if not peers:
            raise KuduInvalidArgument("'peers': name at least this server's uuid", {"field": "peers"})
        if len(set(peers)) != len(peers):
            raise KuduInvalidArgument(f"'peers': a uuid is named twice in {peers}", {"field": "peers"})
        if self.node_uuid not in peers:
            raise KuduInvalidArgument(
                f"'peers' must include this server {self.node_uuid}: the replica asked becomes the new config's leader",
                {"field": "peers"},
            )
        replica = self.get(request.tablet_id)
        log.warning(
            "unsafe config change requested",
            extra={"group": request.tablet_id, "peers": peers, "caller": request.caller_id or ctx.identity.describe()},
        )
        remaining = ctx.remaining()
        out = await replica.unsafe_change_config(frozenset(peers), 10.0 if remaining is None else max(0.05, remaining))
        return cm.UnsafeChangeConfigResponse(tablet_id=request.tablet_id, **out)

    async def _rpc_get_state(self, request: cm.GetStateRequest, ctx: CallContext) -> dict[str, Any]:
        if request.group is None:
            return {"replicas": self.status()}
        return self.get(request.group).status()


TOMBSTONE_FILE = "TOMBSTONED"


def delete_replica_files(d: Path, tombstone: bool) -> None:
    if not d.exists():
        return
    if not tombstone:
        shutil.rmtree(d)
        return
    for child in d.iterdir():
        if child.name == "cmeta":
            continue
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()
    atomic_write_bytes(str(d / TOMBSTONE_FILE), b"tombstoned\n")


class _FailedStateMachine:
    """Placeholder for a replica whose kind this node cannot host; it is never opened."""

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        raise KuduInvalidArgument("replica has no state machine")

    def durable_index(self) -> int:
        return 0

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        """Never opened."""
