"""A new tablet's designated replica campaigns at once and, while no leader is known (its peers' replicas
may not exist yet), again after doubling pauses, a bounded number of times."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kudu_async.common.errors import KuduServiceUnavailable
from kudu_async.tserver.tablet_manager import FIRST_CAMPAIGN_TRIES, TabletManager


class FakeReplica:
    """Records campaigns; wins (a leader appears) on the ``win_on``-th one."""

    def __init__(self, win_on: int | None = None, fail: bool = False) -> None:
        self.raft = SimpleNamespace(leader=None)
        self.times: list[float] = []
        self.win_on = win_on
        self.fail = fail

    def campaign(self) -> None:
        if self.fail:
            raise KuduServiceUnavailable("replica t1 is STOPPED")
        self.times.append(asyncio.get_running_loop().time())
        if self.win_on is not None and len(self.times) >= self.win_on:
            self.raft.leader = "me"


def manager_with(replica: Any) -> TabletManager:
    tm = object.__new__(TabletManager)  # only what _first_campaign touches
    tm.raft = SimpleNamespace(replicas={"t1": replica})  # type: ignore[assignment]
    return tm


async def test_campaigns_again_with_doubling_pauses_until_a_leader_is_known() -> None:
    r = FakeReplica(win_on=3)
    manager_with(r)._first_campaign("t1", r, tries_left=5, pause_s=0.02)  # type: ignore[arg-type]
    await asyncio.sleep(0.5)
    assert len(r.times) == 3  # the third round found a leader: no more
    gaps = [b - a for a, b in zip(r.times, r.times[1:], strict=False)]
    assert gaps[0] >= 0.015 and gaps[1] >= 0.035  # 0.02 s, then 0.04 s


async def test_gives_up_after_the_last_try_and_on_a_stopped_or_replaced_replica() -> None:
    r = FakeReplica()
    manager_with(r)._first_campaign("t1", r, tries_left=3, pause_s=0.01)  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    assert len(r.times) == 3  # bounded; the election timeout takes over

    stopped = FakeReplica(fail=True)
    manager_with(stopped)._first_campaign("t1", stopped, tries_left=3, pause_s=0.01)  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert stopped.times == []

    old, new = FakeReplica(), FakeReplica()
    manager_with(new)._first_campaign("t1", old, tries_left=3, pause_s=0.01)  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert old.times == [] and new.times == []  # the tablet's replica is another object now
    assert FIRST_CAMPAIGN_TRIES >= 2
