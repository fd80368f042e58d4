"""The simulator's checks are not vacuous: break one Raft rule in the core and a sweep must fail.

Each test plants one bug with monkeypatch and expects a SafetyViolation within a few hundred seeds.
"""

from __future__ import annotations

import pytest

from kudu_async.consensus.log_cache import LogCache
from tests.sim.cluster import SafetyViolation, Simulation, params_for_seed

SAFETY = ("election safety", "log matching", "leader completeness", "state machine safety", "commit safety")


def _first_violation(seeds: range) -> str | None:
    """The first *safety* violation (liveness or bookkeeping failures do not count here)."""
    for seed in seeds:
        try:
            Simulation(seed, params_for_seed(seed)).run()
        except SafetyViolation as exc:
            if str(exc).startswith(SAFETY):
                return f"seed {seed}: {exc}"
    return None


def test_sim_catches_votes_without_the_election_restriction(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every log looks equally up to date, so stale candidates win elections.
    monkeypatch.setattr(LogCache, "last_term", lambda self: 0)
    found = _first_violation(range(400))
    assert found is not None


def test_sim_catches_acks_before_the_write_is_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    # The core believes every append is durable at once, while the simulated disk still lags.
    original = LogCache.append

    def append_and_claim_durable(self: LogCache, entries: list) -> None:
        original(self, entries)
        self.stable = self.last_index()

    monkeypatch.setattr(LogCache, "append", append_and_claim_durable)
    found = _first_violation(range(400))
    assert found is not None
