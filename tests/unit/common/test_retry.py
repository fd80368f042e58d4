"""Deadlines, backoff and retry policy (``kudu_async.common.retry``): deterministic, with an injected random
source and clock."""

from __future__ import annotations

import asyncio
import random

import pytest

from kudu_async.common import retry
from kudu_async.common.errors import (
    KuduAborted,
    KuduInvalidArgument,
    KuduNetworkError,
    KuduNotFound,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTabletNotRunning,
    KuduTimedOut,
)
from kudu_async.common.retry import Backoff, BackoffPolicy, Deadline, leader_hint


class FixedRandom:
    """A random source that always draws the same fraction of the interval."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def uniform(self, a: float, b: float, /) -> float:
        return a + (b - a) * self.fraction


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- policy ------------------------------------------------------------------------------------------------------


def test_delay_grows_exponentially_up_to_the_cap() -> None:
    p = BackoffPolicy(initial_s=0.1, max_s=1.0)
    assert [p.ceiling(i) for i in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert p.ceiling(10_000) == 1.0  # no overflow however many attempts


def test_jitter_draws_between_half_the_ceiling_and_the_ceiling() -> None:
    p = BackoffPolicy(initial_s=0.1, max_s=1.0)
    assert p.delay(2, FixedRandom(0.0)) == pytest.approx(0.2)
    assert p.delay(2, FixedRandom(1.0)) == pytest.approx(0.4)
    rng = random.Random(7)
    for attempt in range(20):
        d = p.delay(attempt, rng)
        assert p.ceiling(attempt) / 2 <= d <= p.ceiling(attempt)


def test_seeded_sources_give_the_same_delays() -> None:
    p = BackoffPolicy(initial_s=0.05, max_s=2.0)
    a, b = random.Random(42), random.Random(42)
    assert [p.delay(i, a) for i in range(10)] == [p.delay(i, b) for i in range(10)]


def test_a_policy_without_jitter_and_its_own_growth() -> None:
    p = BackoffPolicy(initial_s=0.02, max_s=0.2, multiplier=1.5, jitter=0.0)
    assert [p.delay(i, FixedRandom(0.0)) for i in range(3)] == pytest.approx([0.02, 0.03, 0.045])
    assert p.delay(50) == 0.2


def test_a_cap_below_the_first_delay_wins() -> None:
    assert BackoffPolicy(initial_s=1.0, max_s=0.4).ceiling(0) == 0.4


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"initial_s": -1.0, "max_s": 1.0}, "delays must be >= 0"),
        ({"initial_s": 0.1, "max_s": 1.0, "multiplier": 0.5}, "multiplier must be >= 1"),
        ({"initial_s": 0.1, "max_s": 1.0, "jitter": 1.5}, "jitter is a fraction"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(kwargs: dict[str, float], what: str) -> None:
    with pytest.raises(ValueError, match=what):
        BackoffPolicy(**kwargs)


def test_backoff_counts_attempts_and_resets() -> None:
    b = Backoff(BackoffPolicy(initial_s=0.1, max_s=1.0), FixedRandom(1.0))
    assert b.ceiling() == pytest.approx(0.1)
    assert [b.next_delay() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.4])
    assert b.attempts == 3 and b.ceiling() == pytest.approx(0.8)
    b.reset()
    assert b.next_delay() == pytest.approx(0.1)


async def test_backoff_sleep_is_cut_to_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    clock = FakeClock()
    d = Deadline(0.3, "copy", clock=clock)
    b = Backoff(BackoffPolicy(initial_s=1.0, max_s=1.0), FixedRandom(1.0))
    await b.sleep(d)
    assert slept == [pytest.approx(0.3)]
    clock.now += 1.0
    with pytest.raises(
        KuduTimedOut, match=r"copy timed out after 0.3s \(0 attempts\); last error: NETWORK_ERROR: down"
    ):
        await b.sleep(d, KuduNetworkError("down"))


# --- deadline ----------------------------------------------------------------------------------------------------


def test_deadline_follows_its_clock() -> None:
    clock = FakeClock()
    d = Deadline(2.0, "scan of tablet t", clock=clock)
    assert d.remaining() == 2.0 and d.left() == 2.0
    assert d.rpc_timeout(0.5) == 0.5
    clock.now += 1.75
    assert d.rpc_timeout(0.5) == pytest.approx(0.25)
    clock.now += 1.0
    assert d.rpc_timeout(0.5) == 0.001  # a last attempt still goes out, and fails on its own
    with pytest.raises(KuduTimedOut, match=r"scan of tablet t timed out after 2s \(0 attempts\)$"):
        d.left()


async def test_deadline_backoff_sleeps_by_its_policy_then_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)
        clock.now += s

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    d = Deadline(1.0, "write", policy=BackoffPolicy(initial_s=0.2, max_s=0.5), clock=clock, rng=FixedRandom(1.0))
    err = KuduNotTheLeader("no leader")
    with pytest.raises(KuduTimedOut) as ei:
        for _ in range(10):
            await d.backoff(err)
    assert slept == pytest.approx([0.2, 0.4, 0.4])  # the last sleep is cut to what was left
    assert d.attempts == 3 and ei.value.details == {"attempts": 3}
    assert "write timed out after 1s (3 attempts); last error: NOT_THE_LEADER: no leader" in str(ei.value)


def test_an_expired_deadline_raises_before_any_sleep() -> None:
    clock = FakeClock()
    d = Deadline(0.0, "x", clock=clock)
    with pytest.raises(KuduTimedOut, match=r"\(1 attempts\)"):
        asyncio.run(d.backoff())


# --- which failures are retried ------------------------------------------------------------------------------------


def test_transient_failures_are_a_subset_of_the_retryable_ones() -> None:
    assert set(retry.TRANSIENT) == {KuduNetworkError, KuduTimedOut, KuduServiceUnavailable}
    assert set(retry.TRANSIENT) < set(retry.RETRYABLE)
    assert {KuduNotTheLeader, KuduAborted, KuduTabletNotRunning} <= set(retry.RETRYABLE)
    assert not {KuduNotFound, KuduInvalidArgument} & set(retry.RETRYABLE)
    assert set(retry.REPLICA_RETRYABLE) == {*retry.RETRYABLE, KuduNotFound}


def test_leader_hint_is_taken_only_when_it_is_a_known_other_server() -> None:
    def nl(addr: object) -> KuduNotTheLeader:
        return KuduNotTheLeader("not the leader", {"leader_address": addr})

    known = ["a:1", "b:1", "c:1"]
    assert leader_hint(nl("b:1"), known, "a:1") == "b:1"
    assert leader_hint(nl("a:1"), known, "a:1") is None  # the server that just said no
    assert leader_hint(nl("z:9"), known, "a:1") is None  # stale or foreign
    assert leader_hint(nl(None), known, "a:1") is None
    assert leader_hint(nl(""), known, None) is None
    assert leader_hint(KuduNotTheLeader("no details"), known, None) is None
    assert leader_hint(nl("c:1"), known, None) == "c:1"


# --- a clock-driven user: the consensus transport --------------------------------------------------------------


async def test_consensus_transport_backs_off_a_dead_peer_by_the_policy_with_its_injected_sources() -> None:
    from kudu_async.consensus.transport import ConsensusTransport, TransportOptions

    class DeadPeer:
        async def call(self, *args: object, **kw: object) -> dict[str, object]:
            raise KuduNetworkError("connection refused")

    clock = FakeClock()
    t = ConsensusTransport(
        DeadPeer(),  # type: ignore[arg-type]
        "me",
        TransportOptions(backoff=BackoffPolicy(initial_s=0.1, max_s=0.3)),
        clock=clock,
        rng=FixedRandom(0.0),
    )
    policy = BackoffPolicy(initial_s=0.1, max_s=0.3)
    retry_at = []
    for failure in range(4):
        clock.now = 100.0 + failure  # past the previous retry time: the message goes out
        t.send("peer", "127.0.0.1:1", {"t": "append", "n": failure})
        for _ in range(100):
            await asyncio.sleep(0)
            st = t._peers["peer"]
            if st.failures == failure + 1 and not st.in_flight:
                break
        retry_at.append(t._peers["peer"].retry_at - clock.now)
        assert retry_at[-1] == pytest.approx(policy.delay(failure, FixedRandom(0.0)))
    assert retry_at == pytest.approx([0.05, 0.1, 0.15, 0.15])  # half of 0.1, 0.2, 0.3 (the cap), 0.3
    dropped = t._peers["peer"].dropped
    t.send("peer", "127.0.0.1:1", {"t": "append", "n": 9})  # still backing off: dropped, Raft retries
    assert t._peers["peer"].dropped == dropped + 1 and not t._peers["peer"].messages
