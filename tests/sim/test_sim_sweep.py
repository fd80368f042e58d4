"""The CI sweep: thousands of seeded chaotic runs, each checked after every input (see cluster.py).

2,000 seeds in chunks of 100 so a failure names a small range; ``scripts/raft_sim.py`` replays a seed.
The long sweep (``-m slow``) runs 20,000 more seeds.
"""

from __future__ import annotations

import pytest

from tests.sim.cluster import SafetyViolation, Simulation, params_for_seed

CHUNK = 100
CI_SEEDS = 2000
SLOW_SEEDS = 20000


def _sweep(start: int, count: int) -> None:
    failures: list[str] = []
    for seed in range(start, start + count):
        try:
            Simulation(seed, params_for_seed(seed)).run()
        except SafetyViolation as exc:
            failures.append(f"seed {seed}: {exc} (replay: python scripts/raft_sim.py --replay {seed})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("start", range(0, CI_SEEDS, CHUNK))
def test_raft_safety_and_liveness_sweep(start: int) -> None:
    _sweep(start, CHUNK)


@pytest.mark.slow
@pytest.mark.parametrize("start", range(100_000, 100_000 + SLOW_SEEDS, 1000))
def test_raft_long_sweep(start: int) -> None:
    _sweep(start, 1000)
