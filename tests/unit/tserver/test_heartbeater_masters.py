"""The heartbeater follows the masters the leader lists: an added master gets registration and a full
report, a removed one gets no more heartbeats; a malformed list is refused whole."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.tserver.test_heartbeater import (  # noqa: F401  (fixtures)
    FakeMaster,
    HeartbeaterFactory,
    client,
    make_hb,
    master,
    tablets,
    wait_until,
)


@pytest.fixture
async def second() -> AsyncIterator[FakeMaster]:
    m = FakeMaster("master-2")
    await m.start()
    yield m
    m.gate.set()
    await m.server.stop(1.0)


async def test_masters_added_and_removed_by_the_leader_are_followed(
    master: FakeMaster,  # noqa: F811
    second: FakeMaster,
    make_hb: HeartbeaterFactory,  # noqa: F811
) -> None:
    hb = await make_hb([master.address])
    await wait_until(lambda: len(master.requests) >= 2, what="registration with the first master")
    assert second.requests == []
    master.always = {"master_addresses": [master.address, second.address]}
    await wait_until(lambda: len(second.requests) >= 2, what="heartbeats to the added master")
    first = second.requests[0]
    assert first["register"] is True and first["report"]["full"] is True
    assert hb.master_addresses() == [master.address, second.address]
    # The leader moves: the new one lists itself alone, so the first master hears from us no more.
    master.leader = False
    second.always = {"master_addresses": [second.address]}
    await wait_until(lambda: hb.master_addresses() == [second.address], what="the first master dropped")
    n, k = len(master.requests), len(second.requests)
    await wait_until(lambda: len(second.requests) >= k + 5, what="more heartbeats to the leader")
    assert len(master.requests) <= n + 1  # at most a call that was already in flight
    assert [s["address"] for s in hb.status()] == [second.address]


async def test_a_malformed_master_list_is_refused_and_changes_nothing(
    master: FakeMaster,  # noqa: F811
    make_hb: HeartbeaterFactory,  # noqa: F811
) -> None:
    hb = await make_hb([master.address])
    master.always = {"master_addresses": ["", 5]}
    await wait_until(lambda: hb.status()[0]["consecutive_failures"] >= 1, what="the answer refused")
    assert "master_addresses" in (hb.status()[0]["last_error"] or "")
    assert hb.master_addresses() == [master.address]
