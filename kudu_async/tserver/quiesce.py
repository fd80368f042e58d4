"""Quiescing a tablet server (Kudu's ``kudu tserver quiesce``) before a planned stop.

A quiescing tserver hands each leadership it holds to an up-to-date follower (Raft leader transfer: the
leader stops taking writes, lets the follower catch up, then sends it TimeoutNow), stands for no election
(its Raft replicas keep voting), and answers new scans with SERVICE_UNAVAILABLE, which clients take as
"try another replica"; scans already open run to their end. ``stop`` undoes all of it.

The choice of successor is a pure function of the leader's view of its peers (:func:`successor`); the
:class:`Quiescer` is the thin asyncio loop that applies it to every replica until none leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from kudu_async.common.errors import KuduBadStatus
from kudu_async.consensus.raft import RaftNode

log = logging.getLogger(__name__)

# A follower not heard from for this long is no successor: it may be down, and a transfer to it would
# stall writes until the transfer times out. The tserver passes two Raft heartbeat periods instead.
MAX_SUCCESSOR_SILENCE_MS = 1000


def successor(
    peers: Sequence[Mapping[str, Any]],
    self_uuid: str,
    last_index: int,
    avoid: Iterable[str] = (),
    max_silence_ms: int = MAX_SUCCESSOR_SILENCE_MS,
) -> str | None:
    """The voter to hand leadership to: among the other voters heard from recently, the one whose log
    matches furthest (one fully caught up gets TimeoutNow at once), ties to the most recently heard.

    ``peers`` are the leader's ``RaftReplica.status()["peers"]``; ``avoid``: servers known to be quiescing
    too. None when no voter qualifies (a single-replica tablet, every follower silent)."""
    skip = set(avoid)
    best: tuple[int, int, str] | None = None
    for p in peers:
        uuid = p.get("uuid")
        match, silent = p.get("match_index"), p.get("last_contact_ms_ago")
        if (
            not isinstance(uuid, str)
            or uuid == self_uuid
            or uuid in skip
            or p.get("member_type") != "VOTER"
            or not isinstance(match, int)
            or not isinstance(silent, int)
            or silent > max_silence_ms
        ):
            continue
        key = (min(match, last_index), -silent, uuid)
        if best is None or key > best:
            best = key
    return None if best is None else best[2]


class QuiescedReplica(Protocol):
    """What the quiescer needs of a tablet replica's Raft driver."""

    @property
    def raft(self) -> RaftNode | None: ...

    def status(self) -> dict[str, Any]: ...

    def transfer_leadership(self, peer: str) -> None: ...


class Quiescer:
    """The quiescing state of one tserver and the loop that moves its leaderships away."""

    def __init__(
        self,
        uuid: str,
        replicas: Callable[[], Iterable[QuiescedReplica]],
        active_scans: Callable[[], int],
        interval_s: float = 0.2,
        max_silence_ms: int = MAX_SUCCESSOR_SILENCE_MS,
    ) -> None:
        self.uuid = uuid
        self._replicas = replicas
        self._active_scans = active_scans
        self.interval_s = interval_s
        self.max_silence_ms = max_silence_ms
        self.quiescing = False
        self.transfers_started = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._pass_done = asyncio.Event()  # set, and replaced, after every pass of the loop
        self.stuck = False  # the last pass found leaders here and no successor for any of them

    def start(self) -> bool:
        """Begin quiescing; False if it already was."""
        if self.quiescing:
            return False
        self.quiescing = True
        self.stuck = False
        log.info("tserver quiescing: moving leaderships away, refusing new scans")
        self._apply()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="quiesce")
        self._wake.set()
        return True

    async def stop(self) -> bool:
        """Stop quiescing: elections and new scans as usual again; False if it was not quiescing."""
        if not self.quiescing:
            return False
        self.quiescing = False
        self._apply()
        await self._cancel()
        log.info("tserver no longer quiescing")
        return True

    def leaders(self) -> int:
        return sum(1 for r in self._replicas() if r.raft is not None and r.raft.is_leader)

    def status(self) -> dict[str, Any]:
        return {
            "quiescing": self.quiescing,
            "num_leaders": self.leaders(),
            "num_active_scanners": self._active_scans(),
            "leader_transfers_started": self.transfers_started,
        }

    async def drain(self, timeout_s: float) -> tuple[int, int]:
        """Quiesce and wait, at most ``timeout_s``, until no replica here leads and no scan is open;
        (leaders, scanners) left. Leaders with no possible successor (their followers silent) end the wait
        for leaders early: nothing would change before the timeout."""
        self.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = (self.leaders(), self._active_scans())
            wait_s = deadline - loop.time()
            if left == (0, 0) or wait_s <= 0 or (self.stuck and left[1] == 0):
                return left
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pass_done.wait(), wait_s)

    async def close(self) -> None:
        await self._cancel()

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _apply(self) -> None:
        """Every replica's Raft node follows the quiescing state (replicas created since included)."""
        for r in self._replicas():
            if r.raft is not None:
                r.raft.quiescing = self.quiescing

    async def _run(self) -> None:
        while self.quiescing:
            try:
                self._apply()
                self._transfer_all()
            except Exception:
                log.exception("quiesce pass failed; retrying")
            self._pass_done.set()
            self._pass_done = asyncio.Event()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)

    def _transfer_all(self) -> None:
        leaders = movable = 0
        for r in self._replicas():
            node = r.raft
            if node is None or not node.is_leader:
                continue
            leaders += 1
            st = r.status()
            peer = successor(
                st.get("peers", ()), self.uuid, int(st.get("last_log_index", 0)), max_silence_ms=self.max_silence_ms
            )
            if peer is None:
                continue
            movable += 1
            try:
                r.transfer_leadership(peer)
            except KuduBadStatus as e:  # a transfer already under way, or leadership lost meanwhile
                log.debug("leader transfer not started", extra={"group": st.get("group"), "error": str(e)})
                continue
            self.transfers_started += 1
            log.info("quiescing: transferring leadership", extra={"group": st.get("group"), "to": peer})
        self.stuck = leaders > 0 and movable == 0
