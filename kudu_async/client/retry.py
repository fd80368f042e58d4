"""Deadlines and jittered backoff: every client operation retries within its own timeout, never beyond.

A client operation (a write batch, a scan RPC, a DDL call) knows what it is waiting for; when the
deadline passes the TIMED_OUT error says so and carries the last failure seen, so a user reading it knows
whether the tablet had no leader, the master was unreachable, or the server was overloaded.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from kudu_async.common.errors import (
    KuduAborted,
    KuduBadStatus,
    KuduNetworkError,
    KuduNotTheLeader,
    KuduServiceUnavailable,
    KuduTabletNotRunning,
    KuduTimedOut,
)

# Failures of one server or one attempt: another attempt (maybe elsewhere) may succeed.
RETRYABLE: tuple[type[KuduBadStatus], ...] = (
    KuduNotTheLeader,
    KuduNetworkError,
    KuduTimedOut,
    KuduServiceUnavailable,
    KuduAborted,
    KuduTabletNotRunning,
)

MIN_BACKOFF_S = 0.01
MAX_BACKOFF_S = 1.0


class Deadline:
    """The end of one operation; ``left()`` raises TIMED_OUT naming the operation and the last error."""

    def __init__(self, timeout_s: float, what: str) -> None:
        self.timeout_s = timeout_s
        self.end = time.monotonic() + timeout_s
        self.what = what
        self.attempts = 0
        self._delay = MIN_BACKOFF_S

    def remaining(self) -> float:
        return self.end - time.monotonic()

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
        """The timeout for one attempt: what is left, at most ``cap_s``."""
        return max(0.001, min(cap_s, self.remaining()))

    async def backoff(self, last_error: BaseException | None = None) -> None:
        """Sleep a jittered, doubling delay (capped, and never past the deadline); raise if none is left."""
        self.attempts += 1
        left = self.left(last_error)
        delay = min(left, self._delay * random.uniform(0.5, 1.0))
        self._delay = min(MAX_BACKOFF_S, self._delay * 2)
        await asyncio.sleep(delay)
        self.left(last_error)


class WriteRequestIds:
    """Request ids of one client's Write RPCs: ``client_id``, a ``seq_no`` per RPC (every retry of the RPC
    reuses it), and ``first_incomplete_seq_no``, the smallest seq_no still in flight (tablet servers forget
    the results of anything below it). Used from the client's event loop only."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._next = 1
        self._in_flight: dict[int, None] = {}  # insertion order is seq_no order: the first is the smallest

    def begin(self) -> dict[str, Any]:
        """The id of a new Write RPC; call ``end`` with it once the RPC will not be sent again."""
        seq = self._next
        self._next += 1
        self._in_flight[seq] = None
        return {"client_id": self.client_id, "seq_no": seq, "first_incomplete_seq_no": self.first_incomplete()}

    def end(self, request_id: dict[str, Any]) -> None:
        self._in_flight.pop(request_id["seq_no"], None)

    def first_incomplete(self) -> int:
        return next(iter(self._in_flight), self._next)

    def in_flight(self) -> int:
        return len(self._in_flight)
