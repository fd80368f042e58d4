"""Recovery of a group that lost its majority by ``unsafe_change_config``, in the simulator (lossy network,
delayed disk writes, every safety property checked after every input): the forced config elects a leader
among the survivors, which goes on committing, and a member forced out that comes back cannot disrupt it.

Two forced-out members that come back together are still a majority of the old config and may elect one of
them: that is the split an operator ends by deleting their replicas (the master does so when they report);
the unit tests show the forced leader is not deposed then either. Here one comes back, as after a crash."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kudu_async.consensus.raft import Role
from tests.sim.cluster import TICK, SimNode, SimParams, Simulation, _fields


def _quiet(nodes: int) -> SimParams:
    """No random crashes, restarts, partitions, config changes or leadership moves: the test makes its own."""
    return SimParams(
        nodes=nodes, p_crash=0.0, p_restart=0.0, p_partition=0.0, p_config=0.0, p_transfer=0.0, p_step_down=0.0
    )


def _run_until(sim: Simulation, done: Callable[[], bool], ticks: int, what: str) -> None:
    for _ in range(ticks * TICK):
        sim.step_once()
        if done():
            return
    raise AssertionError(f"seed {sim.seed}: {what} not reached within {ticks} ticks")


def _proposals(sim: Simulation, p: float) -> None:
    sim.p = SimParams(**{**_fields(sim.p), "p_propose": p})


@pytest.mark.parametrize(("nodes", "survivors"), [(3, 1), (5, 2)])
@pytest.mark.parametrize("seed", range(6))
def test_forced_config_commits_and_a_returning_old_member_cannot_disrupt(seed: int, nodes: int, survivors: int) -> None:
    sim = Simulation(seed, _quiet(nodes))
    sim.faults = False  # no random crashes or partitions: this test makes its own
    _run_until(sim, lambda: sim.max_committed >= 12, 600, "12 commits")
    _proposals(sim, 0.0)

    def settled() -> bool:
        return all(n.raft is not None and len(n.sm) == sim.max_committed for n in sim.nodes.values()) and not any(
            n.writes for n in sim.nodes.values()
        )

    _run_until(sim, settled, 400, "every node applying every commit")

    ids = sim.ids
    keep, lost = ids[:survivors], ids[survivors:]
    for nid in lost:  # the majority is gone
        sim.crash(sim.nodes[nid])
    forced = sim.nodes[keep[0]]
    assert forced.raft is not None
    before_term = max(n.raft.term for n in sim.nodes.values() if n.raft is not None)
    forced.raft.unsafe_change_config(frozenset(keep))
    sim.handle(forced)
    _proposals(sim, 0.3)
    committed = sim.max_committed

    def leading() -> list[SimNode]:
        return [n for n in (sim.nodes[k] for k in keep) if n.raft is not None and n.raft.role is Role.LEADER]

    _run_until(sim, lambda: bool(leading()) and sim.max_committed >= committed + 10, 800, "commits after forcing")
    leader = leading()[0]
    assert leader.raft is not None and leader.raft.term > before_term
    assert leader.raft.config.voters == frozenset(keep)

    # One member forced out comes back (its log and config as they were): it campaigns under the old
    # config and cannot win; the survivors keep their leader and go on committing.
    back = sim.nodes[lost[0]]
    sim._start(back)
    sim.handle(back)
    term = leader.raft.term
    committed = sim.max_committed
    _run_until(sim, lambda: sim.max_committed >= committed + 20, 1500, "commits with an old member back")
    for _ in range(200 * TICK):
        sim.step_once()
    assert all(who in keep for t, who in sim.leaders.items() if t > before_term), sim.leaders
    assert back.raft is not None and back.raft.role is not Role.LEADER
    if survivors == 1:  # a lone voter loses its leadership to nobody: any change would be the old member's doing
        assert leader.raft is not None and leader.raft.is_leader and leader.raft.term == term
    sim._check_final()
