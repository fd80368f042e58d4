"""A master caller for tests and scripts: finds the leader master, follows NOT_THE_LEADER hints, retries
unavailable or dead masters with jittered backoff inside one deadline, and sends DDL with a request id that
stays the same on every attempt, so a DDL retried after a leader died (or its reply was lost) is applied
exactly once.

It stands apart from the real client's ``MasterClient`` (which asks every master who leads, then calls
the leader) because stress tests need to see and count every attempt of the call itself; the retry
policy, backoff and reading of NOT_THE_LEADER hints are the shared ones of ``kudu_async.common.retry``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduNotTheLeader, KuduTimedOut
from kudu_async.common.retry import RETRYABLE, Backoff, BackoffPolicy, leader_hint
from kudu_async.rpc.client import RpcClient

DDL_METHODS = ("CreateTable", "AlterTable", "DeleteTable")


@dataclass
class MasterCallStats:
    calls: int = 0  # call() invocations
    attempts: int = 0  # RPCs sent


class LeaderMasterClient:
    """Call the leader master. ``masters`` is a list of addresses or a function returning the current one."""

    def __init__(
        self,
        rpc: RpcClient,
        masters: Sequence[str] | Callable[[], Sequence[str]],
        client_id: str | None = None,
        rpc_timeout_s: float = 5.0,
        max_backoff_s: float = 0.5,
    ) -> None:
        self.rpc = rpc
        self._masters = masters
        self.client_id = client_id or uuid.uuid4().hex
        self.rpc_timeout_s = rpc_timeout_s
        self.max_backoff_s = max_backoff_s
        self._seq = itertools.count(1)
        self.leader: str | None = None  # the address that answered last
        self.stats = MasterCallStats()

    def masters(self) -> list[str]:
        return list(self._masters() if callable(self._masters) else self._masters)

    def new_request_id(self) -> str:
        return f"{self.client_id}:{next(self._seq)}"

    async def call(self, method: str, req: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """Send ``req`` unchanged to the leader until one answers or ``timeout_s`` passes.

        Errors that a retry cannot change (INVALID_ARGUMENT, NOT_FOUND, ALREADY_PRESENT ...) are raised at
        once; at the deadline KuduTimedOut names the last error seen.
        """
        self.stats.calls += 1
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(BackoffPolicy(initial_s=0.02, max_s=self.max_backoff_s))
        last: KuduBadStatus | None = None
        hint: str | None = None
        while True:
            order = self._order(hint)
            hint = None
            for addr in order:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.stats.attempts += 1
                try:
                    reply: dict[str, Any] = await self.rpc.call(
                        addr, "Master", method, req, timeout_s=min(self.rpc_timeout_s, left)
                    )
                except RETRYABLE as e:
                    last = e
                    if self.leader == addr:
                        self.leader = None
                    if isinstance(e, KuduNotTheLeader):
                        hint = leader_hint(e, self.masters(), addr) or hint  # the next round starts there
                    continue
                self.leader = addr
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                tail = f"; last error: {last}" if last is not None else ""
                raise KuduTimedOut(
                    f"Master/{method} got no answer from a leader master within {timeout_s:g}s{tail}",
                    {"method": method},
                )
            await asyncio.sleep(min(left, backoff.next_delay()))

    async def ddl(self, method: str, req: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """A DDL call under one request id (``req['request_id']`` if set, else a new one) for all attempts."""
        if method not in DDL_METHODS:
            raise ValueError(f"{method} is not a DDL method ({', '.join(DDL_METHODS)})")
        if "request_id" not in req:
            req = {**req, "request_id": self.new_request_id()}
        return await self.call(method, req, timeout_s)

    async def wait_done(
        self, method: str, req: dict[str, Any], timeout_s: float = 60.0, poll_s: float = 0.1
    ) -> dict[str, Any]:
        """Poll IsCreateTableDone / IsAlterTableDone until ``done``; KuduTimedOut with the last state."""
        deadline = time.monotonic() + timeout_s
        while True:
            reply = await self.call(method, req, max(0.05, deadline - time.monotonic()))
            if reply.get("done"):
                return reply
            if time.monotonic() >= deadline:
                raise KuduTimedOut(f"{method} {req}: not done within {timeout_s:g}s (state {reply.get('state')})")
            await asyncio.sleep(poll_s)

    def _order(self, hint: str | None) -> list[str]:
        """The hinted leader, then the last one that answered, then the rest in the given order."""
        addrs = self.masters()
        first = [a for a in (hint, self.leader) if a is not None and a in addrs]
        return list(dict.fromkeys([*first, *addrs]))
