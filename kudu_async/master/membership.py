"""Masters joining and leaving a running cluster (Kudu's ``kudu master add|remove``, AddMaster and RemoveMaster).

The catalog is one Raft group and its config names the masters, so a membership change is a config change
of that group, driven by its leader.

Adding. The new master starts with an empty data directory and ``--master-addresses`` naming the existing
masters and itself. On its first start it asks the others (:meth:`MasterMembership.first_start_peers`):
when one of them already holds a catalog whose config is not the one every master of a brand-new cluster
computes from that flag, it is joining a running cluster, so it creates no catalog and waits. ``AddMaster``
(superuser, on the leader) adds it as a learner (Kudu's NON_VOTER). The leader's first append finds no
catalog there, so the leader asks it to copy one (``StartCatalogCopy``): the catalog's snapshot file, the
WAL from the compaction point on and the consensus metadata, through the tablet copy service
(``consensus.tablet_copy``). It is always a copy, so a log the leader has collected does not matter; Raft
then catches the copy up with what was written since. Once the learner holds every committed entry the
leader promotes it to voter (:meth:`MasterMembership.promote_learners`, on every tick of the leader, so a new
leader finishes an add its predecessor began).

Removing. ``RemoveMaster`` (superuser, on the leader) takes a member out of the config. Neither the leader
(Kudu refuses it too: move the leadership first) nor the only master can be removed. The leader stops
replicating to a removed master at once, so that master never hears of its removal through Raft. It
notices instead (:meth:`MasterMembership.check_removed`): a master that has known no leader for
``NO_LEADER_CHECK_S`` asks the others, and a leader whose config does not name it, seen in two checks in a
row, makes it tombstone its catalog replica and stop serving as a master (``removed_from_cluster`` in its
status; started again, it waits to be added like a new one).

Tablet servers and clients follow without a restart: the leader's heartbeat answers carry every member's
RPC address and ``ConnectToMaster`` lists every member. Operators then update ``--master-addresses`` on
every node (read at the next start) and the master lists clients are given.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Protocol

from kudu_async.common.errors import (
    KuduAlreadyPresent,
    KuduBadStatus,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotFound,
)
from kudu_async.common.retry import Backoff, BackoffPolicy
from kudu_async.consensus.raft import ConfigChangeOp
from kudu_async.consensus.raft_manager import RaftManager
from kudu_async.consensus.replica import RaftReplica, ReplicaState
from kudu_async.consensus.tablet_copy import CopyManifest, TabletCopySource, fetch_tablet_copy, link_or_copy
from kudu_async.fs.fs_manager import FsManager
from kudu_async.fs.io_util import fsync_dir
from kudu_async.master import messages as msg
from kudu_async.master import sys_catalog
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.server import CallContext
from kudu_async.server.config import NodeConfig, format_hostport, parse_hostport

log = logging.getLogger(__name__)

COPY_RETRY_S = 10.0  # the leader asks one master to copy the catalog at most this often
NO_LEADER_CHECK_S = 2.0  # a master that knew no leader this long asks the others whether it was removed
REMOVED_CONFIRMATIONS = 2  # checks in a row that must find a leader whose config lacks this master
PROMOTE_TIMEOUT_S = 10.0
PEER_STATUS_TIMEOUT_S = 2.0
PEER_BACKOFF = BackoffPolicy(initial_s=0.1, max_s=5.0)  # first start: waiting for the other masters
CATALOG_DIR = "sys-catalog"
MAX_COPY_HISTORY = 16


def normalize_address(address: str) -> str:
    """``host:port`` as the masters store it (``[v6]:port`` bracketed), so spellings compare equal."""
    return format_hostport(*parse_hostport(address))


def catalog_summary(replica: RaftReplica | None) -> dict[str, Any] | None:
    """What other masters and tools need of this master's catalog replica (None: it holds none)."""
    raft = replica.raft if replica is not None else None
    if replica is None or raft is None or replica.state is not ReplicaState.RUNNING:
        return None
    return {
        "role": raft.role.value,
        "term": raft.term,
        "leader": raft.leader,
        "voters": sorted(raft.config.voters),
        "learners": sorted(raft.config.learners),
        "config_index": raft.config_index,
        "commit_index": raft.commit,
        "applied_index": raft.applied_index,
    }


class MembershipHost(Protocol):
    """What membership changes use of their master."""

    catalog: sys_catalog.SysCatalogStateMachine | None  # None while it holds no catalog

    @property
    def uuid(self) -> str: ...

    @property
    def rpc_address(self) -> str: ...

    @property
    def config(self) -> NodeConfig: ...

    @property
    def fs(self) -> FsManager: ...

    @property
    def raft(self) -> RaftManager: ...

    @property
    def rpc_client(self) -> RpcClient: ...

    @property
    def io_executor(self) -> Executor: ...

    def catalog_replica(self) -> RaftReplica | None: ...

    def require_leader(self) -> None: ...


class MasterMembership:
    """One master's part in adding and removing masters; see the module docstring."""

    def __init__(self, master: MembershipHost) -> None:
        self.master = master
        self.copy_source = TabletCopySource(master.fs.root / "copy-sessions", self._copy_manifest, master.io_executor)
        self.copy_history: list[dict[str, Any]] = []
        self.removed = False
        self._copying: asyncio.Task[None] | None = None
        self._copy_asked: dict[str, float] = {}
        self._promoting: asyncio.Task[None] | None = None
        self._checking: asyncio.Task[None] | None = None
        self._no_leader_since: float | None = None
        self._next_check = 0.0
        self._removed_seen = 0
        self._tasks: set[asyncio.Task[None]] = set()
        master.raft.on_peer_needs_copy = self._peer_needs_copy

    async def start(self) -> None:
        await self.copy_source.start()

    async def stop(self) -> None:
        tasks = [t for t in (*self._tasks, self._copying, self._promoting, self._checking) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.copy_source.stop()

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def status(self) -> dict[str, Any]:
        return {
            "removed_from_cluster": self.removed,
            "catalog_copying": self._copying is not None and not self._copying.done(),
            "catalog_copies": list(self.copy_history),
        }

    # --- first start ------------------------------------------------------------------------------------

    async def first_start_peers(self) -> dict[str, str] | None:
        """The initial catalog config (uuid -> address) for a master that has no catalog yet, or None when
        this master is joining a running cluster: it then waits to be added and to receive a copy.

        A master of a new cluster computes the same config as every other (all masters of
        ``--master-addresses`` as voters), so it waits for each of them to answer. It joins instead as soon
        as one of them holds a catalog that leaves it out (or holds it only as a learner), and once all have
        answered, when some catalog's config differs from the computed one."""
        m = self.master
        addrs = m.config.masters
        if len(addrs) == 1:  # a lone master is this one
            return {m.uuid: m.rpc_address}
        if m.rpc_address not in addrs:
            raise KuduIllegalState(f"this master's address {m.rpc_address} is not in --master-addresses {addrs}")
        peers = {m.uuid: m.rpc_address}
        catalogs: list[dict[str, Any]] = []
        pending = [a for a in addrs if a != m.rpc_address]
        backoff = Backoff(PEER_BACKOFF)
        while True:
            answers = await asyncio.gather(*(self._peer_status(a) for a in pending))
            for addr, st in zip(pending, answers, strict=True):
                if st is None:
                    continue
                peers[st["uuid"]] = addr
                if isinstance(st.get("catalog"), dict):
                    catalogs.append(st["catalog"])
            pending = [a for a, st in zip(pending, answers, strict=True) if st is None]
            if any(m.uuid not in c.get("voters", ()) for c in catalogs):
                self._joining(catalogs)
                return None
            if not pending:
                break
            if backoff.ceiling() >= 2.0:
                log.warning(
                    "waiting for the other masters to answer before creating the catalog", extra={"masters": pending}
                )
            await asyncio.sleep(backoff.next_delay())
        if any(set(c.get("voters", ())) != set(peers) or c.get("learners") for c in catalogs):
            self._joining(catalogs)
            return None
        return peers

    def _joining(self, catalogs: list[dict[str, Any]]) -> None:
        voters = sorted({v for c in catalogs for v in c.get("voters", ())})
        log.warning(
            "the masters already run a catalog whose config is not the one --master-addresses gives: this master "
            "joins it once added (kudu master add) and copied; until then it serves no catalog",
            extra={"uuid": self.master.uuid, "catalog_voters": voters},
        )
        return None

    async def _peer_status(self, address: str) -> dict[str, Any] | None:
        """Another master's ``GetStatus`` (None when it does not answer yet)."""
        try:
            st = await self.master.rpc_client.call(address, "Generic", "GetStatus", {}, timeout_s=PEER_STATUS_TIMEOUT_S)
        except KuduBadStatus as e:
            log.debug("master did not answer", extra={"master": address, "error": str(e)})
            return None
        if not isinstance(st, dict) or st.get("role") != "master" or not isinstance(st.get("uuid"), str):
            role = st.get("role") if isinstance(st, dict) else None
            log.warning("an address in --master-addresses is not a master", extra={"address": address, "role": role})
            return None
        return st

    # --- the leader's ticks ----------------------------------------------------------------------------

    def tick(self, leader: bool) -> None:
        """Every leadership check (a few times a second): the leader promotes caught-up learners; any other
        master looks out for its own removal."""
        if self.removed:
            return
        if leader:
            self._no_leader_since = None
            self._removed_seen = 0
            self.promote_learners()
        elif self._checking is None or self._checking.done():
            self._checking = self._spawn(self.check_removed())

    def promote_learners(self) -> None:
        """Promote one learner that holds every committed entry (one config change at a time)."""
        if self._promoting is not None and not self._promoting.done():
            return
        r = self.master.catalog_replica()
        raft = r.raft if r is not None else None
        if r is None or raft is None or not raft.is_leader:
            return
        for peer in sorted(raft.config.learners):
            ps = raft.peer_state(peer)
            if ps is not None and ps[1] >= raft.commit:
                self._promoting = self._spawn(self._promote(r, peer))
                return

    async def _promote(self, r: RaftReplica, peer: str) -> None:
        try:
            index = await r.change_config(ConfigChangeOp.PROMOTE, peer, None, PROMOTE_TIMEOUT_S)
            log.info("master promoted to voter", extra={"uuid": peer, "address": r.peers.get(peer), "index": index})
        except KuduBadStatus as e:  # another change pending, leadership lost, not caught up: the next tick retries
            log.info("promoting a master failed; retrying", extra={"uuid": peer, "error": str(e)})

    # --- noticing a removal ------------------------------------------------------------------------------

    async def check_removed(self) -> None:
        """A follower that has known no leader for a while asks the other masters who leads; a leader whose
        config leaves this master out, in two checks in a row, means it was removed: it stops serving."""
        m = self.master
        r = m.catalog_replica()
        raft = r.raft if r is not None else None
        now = time.monotonic()
        if r is None or raft is None or r.state is not ReplicaState.RUNNING or raft.leader is not None:
            self._no_leader_since = None
            self._removed_seen = 0
            return
        if self._no_leader_since is None:
            self._no_leader_since = now
        if now - self._no_leader_since < NO_LEADER_CHECK_S or now < self._next_check:
            return
        self._next_check = now + NO_LEADER_CHECK_S
        addresses = sorted(({a for u, a in r.peers.items() if u != m.uuid} | set(m.config.masters)) - {m.rpc_address})
        answers = await asyncio.gather(*(self._connect(a) for a in addresses))
        leaders = [a for a in answers if a is not None and a.get("leader") is True]
        left_out = any(
            isinstance(a.get("masters"), list)
            and a["masters"]
            and m.uuid not in {e.get("uuid") for e in a["masters"] if isinstance(e, dict)}
            for a in leaders
        )
        self._removed_seen = self._removed_seen + 1 if left_out else 0
        if self._removed_seen >= REMOVED_CONFIRMATIONS and m.catalog_replica() is r:
            await self._stop_serving(r)

    async def _connect(self, address: str) -> dict[str, Any] | None:
        try:
            out = await self.master.rpc_client.call(
                address, "Master", "ConnectToMaster", {}, timeout_s=PEER_STATUS_TIMEOUT_S
            )
        except KuduBadStatus:
            return None
        return out if isinstance(out, dict) else None

    async def _stop_serving(self, r: RaftReplica) -> None:
        m = self.master
        log.error(
            "this master was removed from the masters' Raft config: its catalog replica is tombstoned and it "
            "serves as a master no more; stop it and take it out of every node's --master-addresses",
            extra={"uuid": m.uuid, "last_voters": sorted(r.raft.config.voters) if r.raft is not None else []},
        )
        self.removed = True
        await m.raft.remove_replica(sys_catalog.GROUP, tombstone=True)
        m.catalog = None

    # --- RPC handlers (the leader) ----------------------------------------------------------------------

    def _leader_replica(self) -> RaftReplica:
        m = self.master
        m.require_leader()
        r = m.catalog_replica()
        assert r is not None and r.raft is not None  # require_leader checked it
        return r

    async def add_master(self, req: msg.AddMasterRequest, ctx: CallContext) -> msg.AddMasterResponse:
        """Add the master at ``req.rpc_address`` as a learner of the catalog (idempotent: a member already
        is answered ``already_present``)."""
        r = self._leader_replica()
        raft = r.raft
        assert raft is not None
        address = normalize_address(req.rpc_address)
        for uuid in sorted(raft.config.members):
            if r.peers.get(uuid) == address:
                kind = "VOTER" if uuid in raft.config.voters else "NON_VOTER"
                return msg.AddMasterResponse(
                    uuid=uuid,
                    rpc_address=address,
                    member_type=kind,
                    config_index=raft.config_index,
                    already_present=True,
                )
        st = await self._peer_status_or_error(address, ctx)
        uuid = st["uuid"]
        if uuid in raft.config.members:
            raise KuduAlreadyPresent(f"master {uuid} is a member already, at {r.peers.get(uuid)}, not {address}")
        if isinstance(st.get("catalog"), dict):
            raise KuduIllegalState(
                f"the master at {address} runs a catalog of its own (voters {st['catalog'].get('voters')}): a master "
                "to add starts with an empty data directory and --master-addresses naming the masters and itself"
            )
        index = await r.change_config(ConfigChangeOp.ADD_LEARNER, uuid, address, ctx.time_left(30.0))
        log.info("master added as a learner; its catalog copy follows", extra={"uuid": uuid, "address": address})
        return msg.AddMasterResponse(uuid=uuid, rpc_address=address, member_type="NON_VOTER", config_index=index)

    async def _peer_status_or_error(self, address: str, ctx: CallContext) -> dict[str, Any]:
        try:
            st = await self.master.rpc_client.call(
                address, "Generic", "GetStatus", {}, timeout_s=min(ctx.time_left(5.0), 5.0)
            )
        except KuduBadStatus as e:
            raise KuduIllegalState(
                f"the master to add does not answer at {address} ({e}): start it first, with an empty data "
                "directory and --master-addresses naming the masters and itself"
            ) from None
        if not isinstance(st, dict) or st.get("role") != "master" or not isinstance(st.get("uuid"), str):
            raise KuduInvalidArgument(f"{address} is not a master (it answers as {st.get('role')!r})")
        return st

    async def remove_master(self, req: msg.RemoveMasterRequest, ctx: CallContext) -> msg.RemoveMasterResponse:
        """Take the master at ``req.rpc_address`` out of the catalog's config (never the leader or the
        last master)."""
        r = self._leader_replica()
        raft = r.raft
        assert raft is not None
        address = normalize_address(req.rpc_address)
        members = sorted(raft.config.members)
        matching = [u for u in members if r.peers.get(u) == address]
        if len(members) == 1:
            if matching:
                raise KuduInvalidArgument(f"can't remove master {address} in a single master configuration")
            raise KuduNotFound(f"master {address} not found")
        if not matching:
            shown = ", ".join(f"{r.peers.get(u)} ({u})" for u in members)
            raise KuduNotFound(f"master {address} not found among the masters: {shown}")
        if req.master_uuid is not None:
            if req.master_uuid not in matching:
                raise KuduInvalidArgument(
                    f"mismatch in the uuid of the master {address} to remove: it is {', '.join(matching)}, "
                    f"not {req.master_uuid}",
                    {"field": "master_uuid"},
                )
            uuid = req.master_uuid
        elif len(matching) > 1:
            raise KuduInvalidArgument(
                f"several masters at {address} ({', '.join(matching)}): supply master_uuid to tell them apart"
            )
        else:
            uuid = matching[0]
        if uuid == self.master.uuid:
            raise KuduInvalidArgument(
                f"can't remove the leader master {address}: move the leadership to another master first"
            )
        index = await r.change_config(ConfigChangeOp.REMOVE, uuid, None, ctx.time_left(30.0))
        log.info("master removed from the catalog's config", extra={"uuid": uuid, "address": address, "index": index})
        return msg.RemoveMasterResponse(uuid=uuid, rpc_address=address, config_index=index)

    # --- the catalog copy: leader side ----------------------------------------------------------------------

    def _peer_needs_copy(self, group: str, peer: str, address: str) -> None:
        """The leader's catalog replica found ``peer`` without a catalog (or behind the retained log): ask
        that master to copy it from here (once per COPY_RETRY_S)."""
        if group != sys_catalog.GROUP:
            return
        now = time.monotonic()
        if now - self._copy_asked.get(peer, -COPY_RETRY_S) < COPY_RETRY_S:
            return
        self._copy_asked[peer] = now
        m = self.master
        r = m.catalog_replica()
        term = r.raft.term if r is not None and r.raft is not None else 0
        log.info("asking a master to copy the catalog from this leader", extra={"peer": peer, "address": address})

        async def ask() -> None:
            try:
                await m.rpc_client.call(
                    address,
                    "Master",
                    "StartCatalogCopy",
                    {"source_uuid": m.uuid, "source_address": m.rpc_address, "caller_term": term},
                    timeout_s=10.0,
                )
            except KuduBadStatus as e:
                log.warning("StartCatalogCopy failed; asking again later", extra={"peer": peer, "error": str(e)})

        self._spawn(ask())

    async def _copy_manifest(self, group: str, extra: dict[str, Any], session_dir: Path) -> CopyManifest:
        """A consistent image of the catalog linked into ``session_dir``: consensus metadata first (its
        compaction point C), then the snapshot file (index S >= C: the log is compacted only up to what a
        snapshot holds), then the WAL (every entry after C, as ``gc_holds`` keeps them, up to at least S:
        applied entries are durable here), so the copy replays the WAL from S on."""
        m = self.master
        r = m.catalog_replica()
        if group != sys_catalog.GROUP or r is None or r.state is not ReplicaState.RUNNING or m.catalog is None:
            raise KuduNotFound(f"no running replica of {group} on master {m.uuid} to copy from")
        snapshot = m.catalog.path
        r.gc_holds += 1
        try:
            cmeta = r.copy_metadata()
            files = await asyncio.get_running_loop().run_in_executor(
                m.io_executor, _capture_catalog, snapshot, r.wal_files, session_dir
            )
        finally:
            r.gc_holds -= 1
        total = sum(p.stat().st_size for p in files.values()) + len(cmeta)
        return CopyManifest(files=files, blobs={"consensus/cmeta": cmeta}, meta={"group": group, "bytes": total})

    # --- the catalog copy: the new master's side ----------------------------------------------------------

    async def start_catalog_copy(
        self, req: msg.StartCatalogCopyRequest, ctx: CallContext
    ) -> msg.StartCatalogCopyResponse:
        """Replace whatever catalog this master holds with a copy from the leader that asks."""
        if self._copying is not None and not self._copying.done():
            return msg.StartCatalogCopyResponse(started=False, reason="a catalog copy is in progress")
        r = self.master.catalog_replica()
        if r is not None and r.raft is not None:
            if r.raft.is_leader:
                raise KuduIllegalState("this master leads the catalog; refusing to overwrite it with a copy")
            if r.raft.term > req.caller_term:
                raise KuduIllegalState(f"this master's catalog term {r.raft.term} is newer than {req.caller_term}")
        self._copying = asyncio.get_running_loop().create_task(self._copy_in(req.source_uuid, req.source_address))
        return msg.StartCatalogCopyResponse(started=True)

    async def _copy_in(self, source_uuid: str, source_address: str) -> None:
        m = self.master
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        staging_root = m.fs.root / "copy-staging"
        staging = staging_root / f"catalog.{int(time.time() * 1000)}"
        record: dict[str, Any] = {"source": source_uuid, "started_at": time.time()}
        try:
            raft = m.raft
            if sys_catalog.GROUP in raft.replicas or sys_catalog.GROUP in raft.tombstoned:
                m.catalog = None
                await raft.remove_replica(sys_catalog.GROUP, tombstone=True)
            await loop.run_in_executor(m.io_executor, lambda: staging_root.mkdir(parents=True, exist_ok=True))
            meta = await fetch_tablet_copy(
                m.rpc_client, source_address, sys_catalog.GROUP, staging, executor=m.io_executor
            )
            target = m.fs.root / CATALOG_DIR
            await loop.run_in_executor(
                m.io_executor, _install_catalog, staging, target, raft.replica_dir(sys_catalog.GROUP)
            )
            replica = await raft.open_existing(sys_catalog.GROUP)
            if replica is None or replica.state is not ReplicaState.RUNNING or m.catalog is None:
                raise KuduIllegalState("the copied catalog did not open")
            self.removed = False
            record.update(result="OK", bytes=meta.get("bytes"), seconds=round(time.monotonic() - started, 3))
            log.info("catalog copied from the leader master", extra=record)
        except Exception as e:  # the leader asks again later; the error stays on the status page
            record.update(result=f"ERROR: {type(e).__name__}: {e}", seconds=round(time.monotonic() - started, 3))
            log.error("catalog copy failed", extra=record)
        finally:
            await loop.run_in_executor(m.io_executor, _rmtree, staging)
            self.copy_history = [*self.copy_history[-(MAX_COPY_HISTORY - 1) :], record]


def _capture_catalog(snapshot: Path, wal_files: Callable[[], list[Path]], session_dir: Path) -> dict[str, Path]:
    """Link the snapshot file, then the WAL segments, into the copy session (a worker thread)."""
    files: dict[str, Path] = {}
    if snapshot.exists():  # none before the catalog's first snapshot: then the WAL holds every entry
        dst = session_dir / CATALOG_DIR / snapshot.name
        link_or_copy(snapshot, dst)
        files[f"{CATALOG_DIR}/{snapshot.name}"] = dst
    for p in wal_files():
        dst = session_dir / "consensus" / "wal" / p.name
        link_or_copy(p, dst)
        files[f"consensus/wal/{p.name}"] = dst
    return files


def _install_catalog(staging: Path, catalog_dir: Path, consensus_dir: Path) -> None:
    """Move a verified copy into place: the snapshot first, the consensus directory last (its presence
    means "a replica is here")."""
    _rmtree(catalog_dir)
    _rmtree(consensus_dir)
    (staging / CATALOG_DIR).mkdir(parents=True, exist_ok=True)
    (staging / "consensus" / "wal").mkdir(parents=True, exist_ok=True)
    catalog_dir.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging / CATALOG_DIR, catalog_dir)
    fsync_dir(str(catalog_dir.parent))
    consensus_dir.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging / "consensus", consensus_dir)
    fsync_dir(str(consensus_dir.parent))


def _rmtree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
