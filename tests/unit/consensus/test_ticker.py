"""The node's Raft ticker: late ticks are caught up only a little; a longer hold-up drops them and says
so (leases counted in ticks are voided), and ``on_schedule`` tells whether ticks keep up right now."""

from __future__ import annotations

import asyncio
import time

from kudu_async.consensus.raft import LEASE_TICK_LAG, MAX_TICK_CATCH_UP
from kudu_async.consensus.transport import Ticker

INTERVAL = 0.2  # generous: a busy CI host may hold the loop tens of ms on its own


def block_the_loop(seconds: float) -> None:
    """Hold the event loop, as a stopped process or a starved loop would."""
    time.sleep(seconds)


class Ticks:
    """A ticker with one callback counting ticks, and a way to wait for the next one."""

    def __init__(self) -> None:
        self.ticker = Ticker(INTERVAL)
        self.seen: list[int] = []
        self.jumps: list[int] = []
        self._tick = asyncio.Event()
        self.ticker.on_jump = lambda: self.jumps.append(len(self.seen))
        self.ticker.register("g", self._on_tick)

    def _on_tick(self, n: int) -> None:
        self.seen.append(n)
        self._tick.set()

    async def next_tick(self) -> None:
        self._tick.clear()
        await asyncio.wait_for(self._tick.wait(), 10 * INTERVAL)


async def test_on_schedule_only_while_ticks_keep_up() -> None:
    t = Ticks()
    assert not t.ticker.on_schedule()  # not started: no ticks, no lease
    t.ticker.start()
    try:
        await t.next_tick()
        assert t.ticker.on_schedule()
        block_the_loop(INTERVAL * (LEASE_TICK_LAG + 0.5))  # the ticks lag more than a lease allows
        assert not t.ticker.on_schedule()
        await t.next_tick()
        await t.next_tick()
        assert t.ticker.on_schedule()
    finally:
        await t.ticker.stop()


async def test_a_long_hold_up_drops_the_missed_ticks_and_reports_a_jump() -> None:
    t = Ticks()
    t.ticker.start()
    try:
        await t.next_tick()
        block_the_loop(INTERVAL * (MAX_TICK_CATCH_UP + 4))  # as if the process had been stopped
        before = len(t.seen)
        await t.next_tick()
        await asyncio.sleep(INTERVAL * 0.5)
        assert t.jumps == [before]  # reported before the first tick after the gap
        assert len(t.seen) <= before + 2  # and the missed ticks are not run back to back
    finally:
        await t.ticker.stop()


async def test_a_short_delay_is_caught_up_without_a_jump() -> None:
    t = Ticks()
    t.ticker.start()
    try:
        await t.next_tick()
        block_the_loop(INTERVAL * 2.3)  # the next tick is then 1.3 ticks late, the one after 0.3
        before = len(t.seen)
        await t.next_tick()
        await asyncio.sleep(INTERVAL * 0.2)
        assert t.jumps == [] and len(t.seen) >= before + 2  # the late ticks ran back to back
    finally:
        await t.ticker.stop()
