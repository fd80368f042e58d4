"""Re-replication policy (Kudu's 3-4-3 scheme): the next Raft config change each tablet needs.

Sans-IO, like ``ts_manager``: the catalog manager builds a ``TabletView`` of each RUNNING tablet (its
newest reported Raft config, a leader whose own report confirms it leads, what every tserver reports of
its replica) and a ``ClusterView`` (servers usable for new replicas, servers silent for longer than
``--follower_unavailable_considered_failed_sec``, replica counts), and ``plan`` returns at most one step
per tablet. The catalog manager sends each ``ChangeConfig`` step to the tablet's leader as
``Consensus/ChangeConfig`` with ``cas_config_index`` = the config index it was planned on, so a step
planned on a stale view is refused instead of applied twice, and repeats it (rate-limited) until the
reports show the new config.

A voter is *unhealthy* when its server counts as failed or its replica reports FAILED. Per tablet, in
this order (the first that applies is the tablet's step):

1. A NON_VOTER (learner) in the config: on a failed server (or reporting FAILED) -> REMOVE it; its
   replica reports RUNNING (the tablet copy is installed and bootstrapped) -> PROMOTE it (the leader
   refuses until the learner's log has caught up with the commit index; the master retries); a learner
   whose copy has not come up for longer than the failure timeout and is not being copied right now
   (``ClusterView.stuck_learners``: copies to its server keep failing) -> REMOVE it, so another server
   can be tried; otherwise wait for its copy. So there is never more than one learner and one change at
   a time.
2. Fewer healthy voters than the table's replication factor -> ADD_LEARNER on the live server with the
   fewest replicas that holds none of this tablet (at most ``max_concurrent`` tablets re-replicating at
   once). If the healthy voters are no majority, nothing can commit; when evicting one unhealthy voter
   would restore a majority, that REMOVE comes first (Kudu's old 3-2-3 order, only as a way out).
3. Enough healthy voters and an unhealthy one still in the config -> REMOVE it. Only after the
   promotion: the tablet never has fewer healthy voters than before.
4. More voters than the replication factor, all healthy (the failed server came back between the
   promotion and the eviction) -> trim: REMOVE the voter that was being replaced if known, else a
   non-leader voter whose replica is not RUNNING, else the one on the most loaded server. Without a
   replace hint, only once the excess has lasted a few seconds (``ClusterView.fresh_excess``): ``kudu
   tablet change_config move_replica`` promotes its new replica and then removes the one it replaces, and
   the master must not trim another voter in between.

Independently, a live server that reports a replica of the tablet which is not in its config (removed
while the server was down, or a FAILED replica that was replaced) gets ``DeleteTablet`` TOMBSTONED with
``cas_config_index`` (the tserver refuses if its replica knows a newer config).

No config change is planned for a tablet without a confirmed live leader.

A server an operator put in maintenance mode (``ClusterView.maintenance``) is never counted failed, however
long it is silent: its voters stay healthy, so none of its replicas is replaced, and no new replica is placed
on it. A replica that reports FAILED on it is still unhealthy (maintenance is about the server's absence,
not about broken replicas).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_CONCURRENT_REREPLICATIONS = 10  # tablets with a replacement in flight, per master

ADD_LEARNER = "ADD_LEARNER"
PROMOTE = "PROMOTE"
REMOVE = "REMOVE"

RUNNING = "RUNNING"
FAILED = "FAILED"
TOMBSTONED = "TOMBSTONED"
COPYING = "COPYING"


@dataclass(frozen=True)
class TabletView:
    """What the master knows of one RUNNING tablet."""

    tablet_id: str
    num_replicas: int
    config_index: int
    voters: frozenset[str]
    non_voters: frozenset[str]
    peers: Mapping[str, str]  # member uuid -> RPC address, from the config
    leader: str | None  # a live leader whose own report says it leads in the newest term
    replica_states: Mapping[str, str] = field(default_factory=dict)  # server -> state of its replica
    replace_hint: str | None = None  # the voter the current learner was added to replace, if known
    # Learners that stay learners (an operator's NON_VOTER, a demoted voter): not in ``non_voters`` (the
    # learners in flight, which the master promotes or drops), never promoted, never counted as voters.
    kept_non_voters: frozenset[str] = frozenset()

    @property
    def members(self) -> frozenset[str]:
        return self.voters | self.non_voters | self.kept_non_voters


@dataclass(frozen=True)
class ClusterView:
    """The tservers as the master sees them now."""

    live: frozenset[str]  # heard from within the unresponsive timeout and not failed: may get replicas
    failed: frozenset[str]  # silent for longer than --follower_unavailable_considered_failed_sec
    addresses: Mapping[str, str]  # registered RPC addresses
    load: Mapping[str, int]  # replicas per server (the catalog's placement)
    # Tablets over-replicated only for a moment (an operator's move: add, promote, then remove its source):
    # no trim is planned for them without a replace hint, so the operator's own removal comes first.
    fresh_excess: frozenset[str] = frozenset()
    # (tablet, server) of learners in the config for longer than the failure timeout whose replica is
    # neither RUNNING nor COPYING: their copies keep failing.
    stuck_learners: frozenset[tuple[str, str]] = frozenset()
    # Servers in maintenance mode: never failed, never a target for a new replica.
    maintenance: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ChangeConfig:
    """Ask ``leader`` (at ``leader_address``) to change the tablet's config by one server."""

    tablet_id: str
    op: str  # ADD_LEARNER, PROMOTE or REMOVE
    peer: str
    cas_config_index: int
    leader: str
    leader_address: str
    reason: str
    address: str | None = None  # the new peer's RPC address (ADD_LEARNER)
    replacing: str | None = None  # ADD_LEARNER: the voter this learner is to replace


@dataclass(frozen=True)
class Tombstone:
    """Ask ``server`` to tombstone its replica, which is not in the tablet's config."""

    tablet_id: str
    server: str
    address: str
    cas_config_index: int
    reason: str


Action = ChangeConfig | Tombstone


def plan(
    tablets: Iterable[TabletView],
    cluster: ClusterView,
    max_concurrent: int = MAX_CONCURRENT_REREPLICATIONS,
    in_flight_adds: int = 0,
) -> list[Action]:
    """The next step of every tablet that needs one (tablets in id order, so the result is deterministic).

    ``in_flight_adds``: learners added but not reported yet (they count against ``max_concurrent``).
    """
    views = sorted(tablets, key=lambda t: t.tablet_id)
    load = dict(cluster.load)
    running = in_flight_adds + sum(1 for t in views if t.non_voters)
    out: list[Action] = []
    for t in views:
        if not t.voters:
            continue  # no config reported yet
        out.extend(_tombstones(t, cluster))
        step = _config_step(t, cluster, load, add_allowed=running < max_concurrent)
        if step is None:
            continue
        out.append(step)
        if step.op == ADD_LEARNER:
            running += 1
            load[step.peer] = load.get(step.peer, 0) + 1
    return out


def unhealthy(t: TabletView, cluster: ClusterView, uuid: str) -> bool:
    if t.replica_states.get(uuid) == FAILED:
        return True
    return uuid in cluster.failed and uuid not in cluster.maintenance


def _tombstones(t: TabletView, cluster: ClusterView) -> list[Tombstone]:
    out = []
    for u, state in sorted(t.replica_states.items()):
        if u in t.members or state in (TOMBSTONED, COPYING) or u not in cluster.live:
            continue  # (a copy in progress is tombstoned once it has finished, if still not a member)
        address = cluster.addresses.get(u)
        if address:
            out.append(
                Tombstone(
                    t.tablet_id,
                    u,
                    address,
                    t.config_index,
                    f"replica in state {state} is not in the config (index {t.config_index})",
                )
            )
    return out


def _config_step(t: TabletView, cluster: ClusterView, load: dict[str, int], add_allowed: bool) -> ChangeConfig | None:
    """The next config change of ``t``, sent to its leader; None while it has no healthy leader."""
    leader = t.leader
    if leader is None or leader not in t.voters or unhealthy(t, cluster, leader):
        return None
    leader_address = t.peers.get(leader) or cluster.addresses.get(leader)
    if not leader_address:
        return None
    step = _Step(t, cluster, leader, leader_address)
    if t.non_voters:  # a learner in flight: finish it (or drop it) before anything else
        return step.finish_learner(sorted(t.non_voters)[0])
    sick = sorted(v for v in t.voters if unhealthy(t, cluster, v))
    hinted = t.replace_hint if t.replace_hint in sick else None
    if len(t.voters) - len(sick) < t.num_replicas:
        return step.replace_voter(sick, hinted, load, add_allowed)
    if sick:
        return step.change(REMOVE, hinted or sick[0], "failed voter replaced: the config has enough healthy voters")
    if len(t.voters) > t.num_replicas:
        return step.trim(load)
    return None


@dataclass(frozen=True)
class _Step:
    """Planning one tablet's next config change, to be sent to its healthy leader."""

    t: TabletView
    cluster: ClusterView
    leader: str
    leader_address: str

    def change(self, op: str, peer: str, reason: str, **kw: str | None) -> ChangeConfig:
        t = self.t
        return ChangeConfig(t.tablet_id, op, peer, t.config_index, self.leader, self.leader_address, reason, **kw)

    def finish_learner(self, learner: str) -> ChangeConfig | None:
        """Promote a learner whose copy runs, remove one that failed; None while its copy is on the way."""
        t, cluster = self.t, self.cluster
        if unhealthy(t, cluster, learner):
            return self.change(REMOVE, learner, "the new non-voter's server failed")
        if (t.tablet_id, learner) in cluster.stuck_learners:
            return self.change(REMOVE, learner, "the new non-voter's tablet copy never came up")
        if t.replica_states.get(learner) == RUNNING:
            return self.change(PROMOTE, learner, "the new non-voter's copy is running")
        return None

    def replace_voter(
        self, sick: list[str], hinted: str | None, load: dict[str, int], add_allowed: bool
    ) -> ChangeConfig | None:
        """Fewer healthy voters than the replication factor: add a learner on a new server (or, without a
        healthy majority, first evict a failed voter if that restores one)."""
        t = self.t
        healthy = len(t.voters) - len(sick)
        if 2 * healthy <= len(t.voters):
            # No majority of healthy voters: nothing can commit while the config stays this size.
            if sick and 2 * healthy > len(t.voters) - 1:
                victim = hinted or sick[0]
                return self.change(
                    REMOVE, victim, "the healthy voters are no majority: evicting a failed voter first restores one"
                )
            return None
        target = _placement(t, self.cluster, load) if add_allowed else None
        if target is None:
            return None
        replacing = hinted or (sick[0] if sick else None)
        return self.change(
            ADD_LEARNER,
            target,
            f"{healthy} healthy voters of {t.num_replicas}" + (f"; replacing {replacing}" if replacing else ""),
            address=self.cluster.addresses.get(target),
            replacing=replacing,
        )

    def trim(self, load: dict[str, int]) -> ChangeConfig | None:
        """More voters than the replication factor: remove the replaced one, else (after the grace) the
        least useful follower."""
        t = self.t
        others = [v for v in t.voters if v != self.leader]
        if t.replace_hint in others:
            victim = t.replace_hint
        elif t.tablet_id in self.cluster.fresh_excess:
            return None
        else:
            victim = sorted(others, key=lambda v: (t.replica_states.get(v) == RUNNING, -load.get(v, 0), v))[0]
        return self.change(REMOVE, victim, f"{len(t.voters)} voters for replication factor {t.num_replicas}")


def _placement(t: TabletView, cluster: ClusterView, load: Mapping[str, int]) -> str | None:
    """The live server with the fewest replicas that holds no replica of ``t`` (ties: lowest uuid).

    A server still holding a stale replica of the tablet is skipped: it is tombstoned first."""
    candidates = [
        u
        for u in cluster.live
        if u not in t.members
        and t.replica_states.get(u, TOMBSTONED) == TOMBSTONED
        and u not in cluster.failed
        and u not in cluster.maintenance
        and cluster.addresses.get(u)
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda u: (load.get(u, 0), u))
