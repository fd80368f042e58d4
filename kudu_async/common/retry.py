"""Deadlines, backoff and retry policy, for every part that waits on another node.

An operation has one deadline; each attempt gets what is left of it (capped per attempt); between attempts
it sleeps an exponentially growing, jittered delay that never runs past the deadline; and it retries only
the failures its policy names. When time runs out, TIMED_OUT names the operation and the last failure
seen, so whoever reads it knows whether a leader was missing, a server unreachable or overloaded.

The delay is a pure function of the attempt number and a random source (``BackoffPolicy.delay``): sans-IO
parts driven by a clock (the consensus transport) use it directly with a seeded source; asyncio code uses
``Backoff`` (one operation's retries) or ``Deadline.backoff``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from kudu_async.common.errors import (
    KuduAborted,
    KuduBadStatus,
    KuduNetworkError,
    KuduNotFound,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTabletNotRunning,
    KuduTimedOut,
)

# --- which failures are worth another attempt ------------------------------------------------------------

# The same server may answer the next attempt: the network dropped, the call ran out of time, the server
# shed load. For calls that must go to one particular server (a tablet copy reads one source's files).
TRANSIENT: tuple[type[KuduBadStatus], ...] = (KuduNetworkError, KuduTimedOut, KuduServiceUnavailable)

# One replica or one attempt failed, another attempt (maybe at another replica or master) may succeed:
# TRANSIENT, plus a replica that is not (or no longer) the leader, a write aborted by a leadership change,
# a tablet still bootstrapping. For calls to a Raft group (tablets, the master catalog).
RETRYABLE: tuple[type[KuduBadStatus], ...] = (*TRANSIENT, KuduNotTheLeader, KuduAborted, KuduTabletNotRunning)

# RETRYABLE, plus NOT_FOUND from one replica (it does not hold the tablet yet or any more, or its scanner
# expired): for reads any replica can serve, where another replica (or fresh locations) may answer.
REPLICA_RETRYABLE: tuple[type[KuduBadStatus], ...] = (*RETRYABLE, KuduNotFound)


def leader_hint(err: KuduNotTheLeader, candidates: Collection[str], asked: str | None) -> str | None:
    """The leader a NOT_THE_LEADER answer names, when it is worth trying next: one of ``candidates`` (an
    address outside them is stale or foreign) and not the server that just said it does not lead."""
    hint = err.details.get("leader_address")
    if isinstance(hint, str) and hint and hint != asked and hint in candidates:
        return hint
    return None


# --- backoff ------------------------------------------------------------------------------------------------


class RandomSource(Protocol):
    """What backoff draws its jitter from: the ``random`` module, or a seeded ``random.Random``."""

    def uniform(self, a: float, b: float, /) -> float: ...


_MAX_EXPONENT = 64  # past this many growths every sane policy sits at its cap; keeps the power finite


@dataclass(frozen=True)
class BackoffPolicy:
    """Delays growing from ``initial_s`` by ``multiplier`` per attempt up to ``max_s``, each drawn uniformly
    from ``[ceiling * (1 - jitter), ceiling]``: jitter spreads the retries of many clients that failed at once
    (a leader died) instead of sending them back in a herd."""

    initial_s: float
    max_s: float
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (self.initial_s >= 0 and self.max_s >= 0):
            raise ValueError(f"backoff delays must be >= 0, not initial_s={self.initial_s} max_s={self.max_s}")
        if not self.multiplier >= 1.0:
            raise ValueError(f"backoff multiplier must be >= 1, not {self.multiplier}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"backoff jitter is a fraction in [0, 1], not {self.jitter}")

    def ceiling(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (0: the first) without jitter."""
        return min(self.max_s, self.initial_s * self.multiplier ** min(max(attempt, 0), _MAX_EXPONENT))

    def delay(self, attempt: int, rng: RandomSource = random) -> float:
        """The jittered delay before retry number ``attempt`` (0: the first)."""
        ceiling = self.ceiling(attempt)
        if not self.jitter:
            return ceiling
        return ceiling * rng.uniform(1.0 - self.jitter, 1.0)


# A client operation: a tablet or master that failed is usually one leader election (about a second) away
# from answering, so retries start fast and stay at most a second apart.
CLIENT_BACKOFF = BackoffPolicy(initial_s=0.01, max_s=1.0)


class Backoff:
    """The retries of one operation under a policy: each ``next_delay`` is one attempt further."""

    def __init__(self, policy: BackoffPolicy, rng: RandomSource = random) -> None:
        self.policy = policy
        self.rng = rng
        self.attempts = 0

    def ceiling(self) -> float:
        """The next delay without jitter."""
        return self.policy.ceiling(self.attempts)

    def next_delay(self) -> float:
        d = self.policy.delay(self.attempts, self.rng)
        self.attempts += 1
        return d

    def reset(self) -> None:
        self.attempts = 0

    async def sleep(self, deadline: Deadline | None = None, last_error: BaseException | None = None) -> None:
        """Sleep the next delay, cut to what is left of ``deadline`` (TIMED_OUT if nothing is left)."""
        delay = self.next_delay()
        if deadline is not None:
            delay = min(deadline.left(last_error), delay)
        await asyncio.sleep(delay)


# --- deadlines ------------------------------------------------------------------------------------------------


class Deadline:
    """The end of one operation, and its retries: ``left()`` raises TIMED_OUT naming the operation, how many
    attempts it made and the last error; ``backoff()`` sleeps between attempts, never past the end."""

    def __init__(
        self,
        timeout_s: float,
        what: str,
        *,
        policy: BackoffPolicy = CLIENT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        rng: RandomSource = random,
    ) -> None:
        self.timeout_s = timeout_s
        self.what = what
        self._clock = clock
        self.end = clock() + timeout_s
        self.attempts = 0  # attempts that failed and were retried (each backoff counts one)
        self._policy = policy
        self._rng = rng

    def remaining(self) -> float:
        return self.end - self._clock()

    def left(self, last_error: BaseException | None = None) -> float:
        """Seconds left; raises KuduTimedOut (with ``last_error`` in the message) once none are."""
        r = self.remaining()
        if r <= 0:
            raise self.timed_out(last_error)
        return r

    def timed_out(self, last_error: BaseException | None = None) -> KuduTimedOut:
        tail = f"; last error: {last_error}" if last_error is not None else ""
        return KuduTimedOut(
            f"{self.what} timed out after {self.timeout_s:g}s ({self.attempts} attempts){tail}",
            {"attempts": self.attempts},
        )

    def rpc_timeout(self, cap_s: float) -> float:
        """The timeout for one attempt: what is left, at most ``cap_s`` (at least 1 ms, so a last attempt
        still goes out and fails on its own)."""
        return max(0.001, min(cap_s, self.remaining()))

    async def backoff(self, last_error: BaseException | None = None) -> None:
        """Sleep the next jittered delay (never past the deadline); raise TIMED_OUT if none is left after."""
        self.attempts += 1  # counted first: a TIMED_OUT raised now includes this attempt
        delay = self._policy.delay(self.attempts - 1, self._rng)
        await asyncio.sleep(min(self.left(last_error), delay))
        self.left(last_error)
