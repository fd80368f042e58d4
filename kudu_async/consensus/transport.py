"""Multi-Raft transport: every replica on a node shares one outbox per peer node.

Kudu sends one UpdateConsensus RPC per tablet; with hundreds of tablets per server that is hundreds of
heartbeats a second. Here all messages queued for one peer node during an event-loop turn leave in a
single ``Consensus/Batch`` call, so idle heartbeats cost one RPC per node pair per period. A peer that
fails gets exponential, jittered backoff: its outbox is dropped meanwhile (Raft retransmits what
matters), so a dead node causes neither a storm of calls nor unbounded memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument
from kudu_async.common.retry import BackoffPolicy, RandomSource
from kudu_async.consensus.raft import LEASE_TICK_LAG, MAX_TICK_CATCH_UP
from kudu_async.rpc.client import RpcClient

log = logging.getLogger(__name__)

# A message handed to the transport: a msgpack-able dict naming its Raft group.
WireMessage = dict[str, Any]

SERVICE = "Consensus"
BATCH_METHOD = "Batch"


@dataclass
class _PeerOutbox:
    address: str
    messages: list[WireMessage] = field(default_factory=list)
    bytes_estimate: int = 0
    only_heartbeats: bool = True
    in_flight: bool = False
    failures: int = 0
    retry_at: float = 0.0
    dropped: int = 0
    last_error: str = ""
    calls: int = 0  # Consensus/Batch calls made to the peer


# A peer whose call failed: its messages are dropped until the next delay has passed.
PEER_BACKOFF = BackoffPolicy(initial_s=0.05, max_s=2.0)


@dataclass(frozen=True, kw_only=True)
class TransportOptions:
    """Limits and timing of the per-peer outboxes."""

    rpc_timeout_s: float = 2.0  # one Consensus/Batch call
    max_outbox_messages: int = 10_000  # queued for one peer; more are dropped (Raft retransmits)
    max_outbox_bytes: int = 16 * 1024 * 1024
    backoff: BackoffPolicy = PEER_BACKOFF
    heartbeat_window_s: float = 0.2  # heartbeats due within one window leave together


class ConsensusTransport:
    """Sends Raft messages to peer nodes in per-node batches and dispatches received batches."""

    def __init__(
        self,
        rpc: RpcClient,
        node_uuid: str,
        options: TransportOptions = TransportOptions(),
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: RandomSource = random,
    ) -> None:
        self.rpc = rpc
        self.node_uuid = node_uuid
        self.rpc_timeout_s = options.rpc_timeout_s
        self.max_outbox_messages = options.max_outbox_messages
        self.max_outbox_bytes = options.max_outbox_bytes
        self._clock = clock
        self._rng = rng
        self._backoff = options.backoff
        self.heartbeat_window_s = options.heartbeat_window_s
        self._hb_flush_scheduled = False
        self._peers: dict[str, _PeerOutbox] = {}
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        # While a received batch from this peer is being handled, replies to it ride back in the response.
        self._capture_peer: str | None = None
        self._captured: list[WireMessage] = []
        # Batches from a peer whose handlers wait for their appends to be durable: what this node sends
        # that peer meanwhile (the acks above all) rides back in the oldest one's response.
        self._sinks: dict[str, list[list[WireMessage]]] = {}
        self.on_reply: Callable[[str, list[WireMessage]], None] | None = None
        self.on_missing: Callable[[str, list[str]], None] | None = None  # peer has no replica of these groups

    # --- sending --------------------------------------------------------------------------------------

    def send(self, peer_uuid: str, address: str, message: WireMessage, size_hint: int = 64) -> None:
        """Queue ``message`` for ``peer_uuid``; it leaves with everything else queued this loop turn."""
        if self._closed:
            return
        if peer_uuid == self._capture_peer:
            self._captured.append(message)
            return
        box = self._peers.get(peer_uuid)
        if box is None:
            box = self._peers[peer_uuid] = _PeerOutbox(address)
        box.address = address
        sinks = self._sinks.get(peer_uuid)
        if sinks:
            sinks[0].append(message)
            return
        if self._clock() < box.retry_at:
            box.dropped += 1  # peer is backing off; Raft will retry what it still needs
            return
        if len(box.messages) >= self.max_outbox_messages or box.bytes_estimate + size_hint > self.max_outbox_bytes:
            box.dropped += 1
            return
        box.messages.append(message)
        box.bytes_estimate += size_hint
        if message.get("t") != "hb":
            box.only_heartbeats = False
        loop = asyncio.get_running_loop()
        if not box.only_heartbeats:
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop.call_soon(self._flush)
        elif not self._hb_flush_scheduled:
            # Heartbeats of many groups, due on different ticks, leave together at the window's end:
            # one RPC per peer per window instead of one per tick (Kudu: multi_raft_heartbeat_window_ms).
            self._hb_flush_scheduled = True
            window = self.heartbeat_window_s
            loop.call_at((loop.time() // window + 1) * window, self._flush_heartbeats)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for peer_uuid, box in self._peers.items():
            if box.messages and not box.in_flight and not box.only_heartbeats:
                self._start_send(peer_uuid, box)

    def _flush_heartbeats(self) -> None:
        self._hb_flush_scheduled = False
        for peer_uuid, box in self._peers.items():
            if box.messages and not box.in_flight:
                self._start_send(peer_uuid, box)

    def _start_send(self, peer_uuid: str, box: _PeerOutbox) -> None:
        batch, box.messages, box.bytes_estimate = box.messages, [], 0
        box.only_heartbeats = True
        box.in_flight = True
        task = asyncio.get_running_loop().create_task(self._send_batch(peer_uuid, box, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_batch(self, peer_uuid: str, box: _PeerOutbox, batch: list[WireMessage]) -> None:
        try:
            reply = await self.rpc.call(
                box.address,
                SERVICE,
                BATCH_METHOD,
                {"from": self.node_uuid, "to": peer_uuid, "messages": batch},
                timeout_s=self.rpc_timeout_s,
            )
            replies = reply.get("messages") if isinstance(reply, dict) else None
            if replies and self.on_reply is not None:
                if not isinstance(replies, list) or not all(isinstance(m, dict) for m in replies):
                    raise KuduInvalidArgument(f"Consensus/Batch reply from {peer_uuid}: 'messages' must be maps")
                self.on_reply(peer_uuid, replies)
            missing = reply.get("missing") if isinstance(reply, dict) else None
            if missing and self.on_missing is not None:
                if not isinstance(missing, list) or not all(isinstance(g, str) for g in missing):
                    raise KuduInvalidArgument(f"Consensus/Batch reply from {peer_uuid}: 'missing' must be group ids")
                self.on_missing(peer_uuid, missing)
            box.failures = 0
            box.retry_at = 0.0
            box.calls += 1
        except KuduBadStatus as e:
            box.failures += 1
            box.retry_at = self._clock() + self._backoff.delay(box.failures - 1, self._rng)
            box.dropped += len(batch) + len(box.messages)
            box.messages, box.bytes_estimate, box.only_heartbeats = [], 0, True
            if box.failures == 1 or box.failures % 50 == 0:
                log.info(
                    "consensus peer unreachable, backing off",
                    extra={"peer": peer_uuid, "address": box.address, "error": str(e), "failures": box.failures},
                )
            box.last_error = str(e)
        finally:
            box.in_flight = False
            if box.messages and not self._closed:  # what queued while this batch was in flight
                self._start_send(peer_uuid, box)

    def begin_capture(self, peer_uuid: str) -> None:
        """Until ``end_capture``, messages to ``peer_uuid`` are kept to answer its batch with."""
        self._capture_peer = peer_uuid
        self._captured = []

    def end_capture(self) -> list[WireMessage]:
        out, self._captured, self._capture_peer = self._captured, [], None
        return out

    def open_sink(self, peer_uuid: str) -> list[WireMessage]:
        """Until :meth:`close_sink`, messages to ``peer_uuid`` collect here (behind older open sinks)."""
        sink: list[WireMessage] = []
        self._sinks.setdefault(peer_uuid, []).append(sink)
        return sink

    def close_sink(self, peer_uuid: str, sink: list[WireMessage], deliver: bool) -> list[WireMessage]:
        """The messages collected, to answer with; with ``deliver`` False (the answer will not go out:
        the call was cancelled) they are sent the usual way instead."""
        sinks = self._sinks.get(peer_uuid, [])
        for i, open_ in enumerate(sinks):
            if open_ is sink:  # by identity: two empty sinks compare equal
                del sinks[i]
                break
        if not sinks:
            self._sinks.pop(peer_uuid, None)
        if deliver or not sink:
            return sink
        box = self._peers[peer_uuid]  # a message was queued for the peer, so its outbox exists
        for m in sink:
            self.send(peer_uuid, box.address, m)
        return []

    def peer_status(self) -> dict[str, dict[str, Any]]:
        now = self._clock()
        return {
            uuid: {
                "address": b.address,
                "queued": len(b.messages),
                "consecutive_failures": b.failures,
                "backoff_remaining_ms": max(0, round((b.retry_at - now) * 1000)),
                "dropped_messages": b.dropped,
                "last_error": b.last_error,
                "calls": b.calls,
            }
            for uuid, b in self._peers.items()
        }

    async def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Ticker:
    """One node-level timer that ticks every registered Raft replica (Kudu runs one per replica).

    A callback that raises is logged, unregistered and reported to its ``on_error`` (where the replica
    marks itself FAILED); the ticker keeps ticking the rest.

    Raft's leader lease is counted in ticks, so it is only as good as the ticks keep up with real time.
    ``on_schedule()`` says whether they do right now. Late ticks are run back to back up to
    ``MAX_TICK_CATCH_UP`` of them; held up for longer (the process was stopped, or the loop starved), the
    ticker drops the missed ticks and calls ``on_jump`` first, so leases counted across the gap are voided.
    """

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self._callbacks: dict[str, Callable[[int], None]] = {}
        self._on_error: dict[str, Callable[[BaseException], None]] = {}
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0
        self.on_jump: Callable[[], None] | None = None
        self._due = -float("inf")  # when the last delivered tick was due (loop time)

    def register(
        self, key: str, callback: Callable[[int], None], on_error: Callable[[BaseException], None] | None = None
    ) -> None:
        self._callbacks[key] = callback
        if on_error is not None:
            self._on_error[key] = on_error

    def unregister(self, key: str) -> None:
        self._callbacks.pop(key, None)
        self._on_error.pop(key, None)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="raft-ticker")

    def on_schedule(self) -> bool:
        """True while tick counts lag real time by at most ``LEASE_TICK_LAG`` ticks (the leases' margin)."""
        if self._task is None:
            return False
        return asyncio.get_running_loop().time() - self._due <= LEASE_TICK_LAG * self.interval_s

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > MAX_TICK_CATCH_UP * self.interval_s:  # paused (SIGSTOP) or starved
                next_at = loop.time()
                if self.on_jump is not None:
                    self.on_jump()
            self._due = next_at
            self.ticks += 1
            ticks = self.ticks
            for key, cb in list(self._callbacks.items()):
                try:
                    cb(ticks)
                except Exception as e:
                    log.exception("raft tick failed; unregistering", extra={"replica": key})
                    self._callbacks.pop(key, None)
                    handler = self._on_error.pop(key, None)
                    if handler is not None:
                        handler(e)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
