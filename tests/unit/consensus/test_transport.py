"""The consensus transport's reply sinks: what a node sends a peer while answering that peer's batch."""

from __future__ import annotations

import asyncio
from typing import Any

from kudu_async.consensus.transport import ConsensusTransport


class _Rpc:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def call(
        self, address: str, service: str, method: str, body: dict[str, Any], timeout_s: float = 0.0
    ) -> dict[str, Any]:
        self.calls.append(body)
        return {}


async def test_messages_for_a_peer_collect_in_its_oldest_open_sink_and_go_out_if_the_answer_cannot() -> None:
    rpc = _Rpc()
    t = ConsensusTransport(rpc, "me")  # type: ignore[arg-type]
    first, second = t.open_sink("peer"), t.open_sink("peer")
    t.send("peer", "127.0.0.1:1", {"t": "append_resp", "n": 1})
    t.send("other", "127.0.0.1:2", {"t": "append", "n": 9})  # another peer: its own call, not this sink
    assert first == [{"t": "append_resp", "n": 1}] and second == []
    assert t.close_sink("peer", second, deliver=True) == []  # by identity, though both were empty-equal once
    t.send("peer", "127.0.0.1:1", {"t": "append_resp", "n": 2})
    assert [m["n"] for m in first] == [1, 2]
    # The answer was cancelled: what collected is sent the usual way instead of being lost.
    assert t.close_sink("peer", first, deliver=False) == []
    t.send("peer", "127.0.0.1:1", {"t": "append_resp", "n": 3})  # no sink open: the outbox again
    for _ in range(20):
        await asyncio.sleep(0.01)
        if sum(len(c["messages"]) for c in rpc.calls if c["to"] == "peer") == 3:
            break
    to_peer = [m["n"] for c in rpc.calls if c["to"] == "peer" for m in c["messages"]]
    assert sorted(to_peer) == [1, 2, 3]
    assert [m["n"] for c in rpc.calls if c["to"] == "other" for m in c["messages"]] == [9]
    assert t.peer_status()["peer"]["calls"] >= 1
    await t.close()
