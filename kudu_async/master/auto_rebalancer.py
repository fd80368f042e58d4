"""The leader master's auto-rebalancer (Kudu's ``--auto_rebalancing_enabled``): replicas moved between tablet
servers until every table, and then the cluster, is balanced.

It plans with ``common/rebalance.py``, the plan of ``kudu cluster rebalance``, from the leader's own view
(the catalog's tablets and the tservers' reports) instead of ksck's. Rounds, every
``--auto_rebalancing_interval_seconds``, only on the leader master and only while the flag is on (all three
flags are read each round, so ``kudu master set_flag`` takes effect at the next one):

1. Build the placement: the servers that take part are the live tservers not in maintenance mode, not
   quiescing and not failed; tablets of replication factor 1 are left out (moving their only replica makes
   them unavailable, as Kudu's ``move_rf1_replicas`` off). A round does nothing while any tablet in scope is
   unsettled (no leader, a learner or an extra voter, a replica not RUNNING, a voter on a dead server, a
   config change in flight): re-replication goes first, and a plan made on a changing config would be stale.
2. Plan the replica moves and take, in plan order, at most one per tablet and at most
   ``--auto_rebalancing_max_moves_per_server`` touching any one server (as source or destination).
3. Start them: a move whose source leads its tablet first hands the leadership to the voter the plan names
   (the move waits for the next round); any other goes through re-replication's own path
   (``CatalogManager.start_replica_move``: a learner marked as replacing the source, promoted once its copy
   runs, then the source removed).
4. Wait (bounded) until the reports show every started move done, then sleep until the next round. A round
   whose plan is empty counts the cluster as balanced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kudu_async.common import rebalance as rb
from kudu_async.common.errors import KuduBadStatus
from kudu_async.common.metrics import MetricEntity
from kudu_async.master.catalog_manager import CatalogManager
from kudu_async.master.rereplication import RUNNING, TabletView
from kudu_async.master.sys_catalog import TableRecord
from kudu_async.master.ts_manager import TSManager
from kudu_async.rpc.client import RpcClient
from kudu_async.server.config import NodeConfig

log = logging.getLogger(__name__)

MOVE_WAIT_POLL_S = 1.0  # Kudu's --auto_rebalancing_wait_for_replica_moves_seconds
ROUND_TIMEOUT_S = 300.0  # a round stops waiting for its moves after this long (a copy that keeps failing)
TRANSFER_TIMEOUT_S = 10.0


# --- the plan of one round (no I/O) -------------------------------------------------------------------------


@dataclass
class RoundView:
    """What a round plans on: the placement, why moving now is unsafe (empty: safe), and each tablet's view."""

    placement: rb.Placement
    problems: list[str]
    views: dict[str, TabletView] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)  # tserver uuid -> why it takes no part


def round_view(
    tablets: Iterable[tuple[TableRecord, str, TabletView | None]],
    live: Iterable[str],
    maintenance: Iterable[str],
    quiescing: Iterable[str],
    busy: Iterable[str] = (),
) -> RoundView:
    """The placement of the tablets of replication factor 2 or more, over the live servers that are neither in
    maintenance nor quiescing; with every reason a move would be unsafe now."""
    live_set, busy_set = set(live), set(busy)
    excluded = {u: "in maintenance mode" for u in maintenance if u in live_set}
    excluded.update({u: "quiescing" for u in quiescing if u in live_set and u not in excluded})
    servers = frozenset(live_set - set(excluded))
    problems: list[str] = []
    placed: list[rb.Tablet] = []
    views: dict[str, TabletView] = {}
    for table, tid, view in tablets:
        if table.num_replicas < 2:
            continue
        where = f"table {table.name} tablet {tid}"
        if view is None:
            problems.append(f"{where}: no config reported yet")
            continue
        why = _unsettled(view, live_set, tid in busy_set)
        if why:
            problems.append(f"{where}: {why}")
        views[tid] = view
        leader = view.leader if view.leader in view.voters else None
        placed.append(rb.Tablet(tid, table.name, view.voters, leader))
    return RoundView(rb.Placement(servers, tuple(placed)), problems, views, excluded)


def _unsettled(view: TabletView, live: set[str], busy: bool) -> str:
    if busy:
        return "a config change is in flight"
    if view.leader is None:
        return "no leader"
    if view.non_voters:
        return f"a learner is being added ({', '.join(sorted(view.non_voters))})"
    if len(view.voters) != view.num_replicas:
        return f"{len(view.voters)} voters for replication factor {view.num_replicas}"
    dead = sorted(view.voters - live)
    if dead:
        return f"voter(s) on a tserver not live: {', '.join(dead)}"
    off = sorted(u for u in view.voters if view.replica_states.get(u) != RUNNING)
    if off:
        return f"replica(s) not RUNNING on {', '.join(off)}"
    return ""


def select_moves(moves: Sequence[rb.Move], max_per_server: int) -> list[rb.Move]:
    """The moves of one round: in plan order, one per tablet (a later move of a tablet waits for the next
    round's plan), at most ``max_per_server`` touching any one server."""
    busy: dict[str, int] = {}
    tablets: set[str] = set()
    out: list[rb.Move] = []
    for m in moves:
        if m.tablet_id in tablets or busy.get(m.src, 0) >= max_per_server or busy.get(m.dst, 0) >= max_per_server:
            continue
        tablets.add(m.tablet_id)
        busy[m.src] = busy.get(m.src, 0) + 1
        busy[m.dst] = busy.get(m.dst, 0) + 1
        out.append(m)
    return out


def _holds(view: TabletView | None, server: str) -> bool:
    return view is not None and server in view.members


def move_done(view: TabletView | None, m: rb.Move) -> bool:
    """Whether the reports show ``m`` carried out (destination a voter, source gone, nothing in flight)."""
    return view is not None and m.dst in view.voters and m.src not in view.members and not view.non_voters


# --- the asyncio shell -----------------------------------------------------------------------------------------


class RebalancerHost(Protocol):
    """What the auto-rebalancer reads of the master it runs in."""

    @property
    def config(self) -> NodeConfig: ...

    @property
    def catalog_manager(self) -> CatalogManager: ...

    @property
    def ts_manager(self) -> TSManager: ...

    @property
    def rpc_client(self) -> RpcClient: ...

    def check_leadership(self) -> bool: ...


class AutoRebalancer:
    """The rounds of the leader master's auto-rebalancer; ``status()`` for the master's status page."""

    def __init__(self, master: RebalancerHost, metrics: MetricEntity) -> None:
        self.master = master
        self.rounds = metrics.counter(
            "auto_rebalancer_rounds_completed", "Auto-rebalancer rounds that planned and waited for their moves"
        )
        self.moves_started = metrics.counter(
            "auto_rebalancer_replica_moves_scheduled", "Replica moves the auto-rebalancer started", "replicas"
        )
        self.transfers_started = metrics.counter(
            "auto_rebalancer_leader_transfers_scheduled",
            "Leaderships the auto-rebalancer moved off a replica it was to move",
            "tablets",
        )
        self.last: dict[str, Any] = {"state": "disabled"}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="auto-rebalancer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def status(self) -> dict[str, Any]:
        cfg = self.master.config
        return {
            "enabled": bool(cfg.auto_rebalancing_enabled),
            "rounds_completed": self.rounds.value,
            "replica_moves_started": self.moves_started.value,
            "leader_transfers_started": self.transfers_started.value,
            **self.last,
        }

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(float(self.master.config.auto_rebalancing_interval_seconds))
            if not self.master.config.auto_rebalancing_enabled:
                self.last = {"state": "disabled"}
                continue
            if not self.master.check_leadership():
                self.last = {"state": "not the leader master"}
                continue
            try:
                await self.round()
            except KuduBadStatus as e:
                self.last = {"state": "round failed", "error": str(e)}
                log.info("auto-rebalancing round failed; trying again next round", extra={"error": str(e)})
            except Exception:
                self.last = {"state": "round failed"}
                log.exception("auto-rebalancing round failed; trying again next round")

    def _view(self) -> RoundView | None:
        """The round's placement, or None while a live tserver's full report is awaited (the directory of a
        new leader is not to be planned on)."""
        now = time.monotonic()
        tsm, cm = self.master.ts_manager, self.master.catalog_manager
        live = tsm.live_tservers(now)
        if any(tsm.needs_full_report(u) for u in live):
            return None
        failed_after = float(self.master.config.follower_unavailable_considered_failed_sec)
        usable = [u for u in live if (tsm.silent_for(u, now) or 0.0) <= failed_after]
        tablets = cm.running_tablet_views(now)
        busy = [tid for _, tid, _ in tablets if cm.config_change_in_flight(tid)]
        return round_view(tablets, usable, cm.tserver_states(), tsm.quiescing_tservers(), busy)

    async def round(self) -> None:
        """Plan, start this round's moves, wait for them."""
        view = self._view()
        if view is None:
            self.last = {"state": "waiting for the tservers' full reports"}
            return
        if view.problems:
            self.last = {"state": "waiting for tablets to settle", "problems": view.problems[:10]}
            return
        moves = rb.plan_replica_moves(view.placement)
        if not moves:
            self.last = {"state": "balanced", "excluded_tservers": view.excluded}
            self.rounds.increment()
            return
        limit = int(self.master.config.auto_rebalancing_max_moves_per_server)
        chosen = select_moves(moves, limit)
        started: list[rb.Move] = []
        for m in chosen:
            tv = view.views[m.tablet_id]
            if tv.leader == m.src:
                await self._transfer(tv, m)
                continue
            self.master.catalog_manager.start_replica_move(
                tv, m.src, m.dst, f"auto-rebalancing: {m.reason}", time.monotonic()
            )
            self.moves_started.increment()
            started.append(m)
            log.info(
                "auto-rebalancer: moving a replica",
                extra={"tablet": m.tablet_id, "table": m.table, "from": m.src, "to": m.dst, "reason": m.reason},
            )
        self.last = {
            "state": "moving replicas",
            "planned": len(moves),
            "started": [{"tablet": m.tablet_id, "from": m.src, "to": m.dst} for m in started],
            "excluded_tservers": view.excluded,
        }
        await self._wait(started)
        self.rounds.increment()

    async def _transfer(self, tv: TabletView, m: rb.Move) -> None:
        """Hand the leadership of a tablet off the replica to move (to the voter the plan named, else any other
        voter); the move itself waits for the next round's plan."""
        to = m.leader_to or next(iter(sorted(tv.voters - {m.src})), None)
        address = tv.peers.get(m.src) or self.master.catalog_manager.tserver_address(m.src)
        if to is None or not address:
            return
        try:
            await self.master.rpc_client.call(
                address,
                "Consensus",
                "TransferLeadership",
                {"group": tv.tablet_id, "peer": to},
                timeout_s=TRANSFER_TIMEOUT_S,
            )
            self.transfers_started.increment()
            log.info(
                "auto-rebalancer: moving a leadership off a replica it is to move",
                extra={"tablet": tv.tablet_id, "from": m.src, "to": to},
            )
        except KuduBadStatus as e:
            log.info(
                "auto-rebalancer: leadership transfer refused; next round plans again",
                extra={"tablet": tv.tablet_id, "from": m.src, "to": to, "error": str(e)},
            )

    async def _wait(self, moves: list[rb.Move]) -> None:
        """Until the reports show every move done, the flag is turned off, leadership is lost, or the round's
        bound passes."""
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        pending = list(moves)
        while pending and time.monotonic() < deadline:
            await asyncio.sleep(MOVE_WAIT_POLL_S)
            if not self.master.config.auto_rebalancing_enabled or not self.master.check_leadership():
                return
            cm = self.master.catalog_manager
            views = {tid: v for _, tid, v in cm.running_tablet_views(time.monotonic())}
            pending = [
                m
                for m in pending
                if m.tablet_id in views
                and not move_done(views[m.tablet_id], m)
                # a refused or abandoned move: nothing in flight and the destination not in the config
                and (cm.config_change_in_flight(m.tablet_id) or _holds(views[m.tablet_id], m.dst))
            ]
        if pending:
            log.warning(
                "auto-rebalancer: moves not done within the round's bound; the next round plans again",
                extra={"moves": [f"{m.tablet_id}: {m.src} -> {m.dst}" for m in pending]},
            )
