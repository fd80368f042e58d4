"""``Consensus/UnsafeChangeConfig`` on a node's RaftManager: every check before anything changes, the forced
config in force once the call returns, and still in force after the node restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kudu_async.common.errors import KuduInvalidArgument, KuduNotFound
from kudu_async.consensus import manager_messages as cm
from kudu_async.consensus.raft_manager import RaftManager
from kudu_async.consensus.replica import ReplicaOptions
from kudu_async.rpc.client import RpcClient
from kudu_async.rpc.server import CallContext

PEERS = {"n1": "127.0.0.1:1", "n2": "127.0.0.1:2", "n3": "127.0.0.1:3"}  # n2 and n3 never answer


class Applied:
    def __init__(self) -> None:
        self.entries: list[bytes] = []

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        self.entries.append(payload)
        return index

    def durable_index(self) -> int:
        return 0

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        return None


def _ctx() -> CallContext:
    return CallContext("Consensus", "UnsafeChangeConfig", "127.0.0.1:9", "test", None, "application/msgpack")


async def _manager(root: Path, rpc: RpcClient, sm: Applied) -> RaftManager:
    async def factory(group: str, extra: dict[str, Any]) -> Applied:
        return sm

    manager = RaftManager("n1", root, rpc, options=ReplicaOptions(fsync=False))
    manager.register_kind("k", factory)
    await manager.start()
    return manager


@pytest.fixture
async def rpc() -> AsyncIterator[RpcClient]:
    client = RpcClient("test")
    yield client
    await client.close()


async def test_bad_requests_change_nothing(tmp_path: Path, rpc: RpcClient) -> None:
    manager = await _manager(tmp_path, rpc, Applied())
    try:
        replica = await manager.create_replica("g", "k", PEERS)
        assert replica.raft is not None
        before = (replica.raft.term, replica.raft.last_index, replica.raft.config)
        bad: list[tuple[dict[str, Any], type[Exception], str]] = [
            ({"peers": ["n1"], "dest_uuid": "n9"}, KuduInvalidArgument, "this server is n1"),
            ({"peers": []}, KuduInvalidArgument, "at least this server"),
            ({"peers": ["n1", "n1"]}, KuduInvalidArgument, "named twice"),
            ({"peers": ["n2"]}, KuduInvalidArgument, "must include this server"),
            ({"peers": ["n1", "n7"]}, KuduInvalidArgument, "n7 not in the committed config"),
            ({"peers": ["n1"], "tablet_id": "nope"}, KuduNotFound, "no replica of nope"),
        ]
        for fields, error, text in bad:
            req = cm.UnsafeChangeConfigRequest(**{"tablet_id": "g", **fields})
            with pytest.raises(error, match=text):
                await manager._rpc_unsafe_change_config(req, _ctx())
        assert (replica.raft.term, replica.raft.last_index, replica.raft.config) == before
    finally:
        await manager.stop()


async def test_the_survivor_leads_at_once_and_still_after_a_restart(tmp_path: Path, rpc: RpcClient) -> None:
    sm = Applied()
    manager = await _manager(tmp_path, rpc, sm)
    try:
        replica = await manager.create_replica("g", "k", PEERS)
        out = await manager._rpc_unsafe_change_config(
            cm.UnsafeChangeConfigRequest(tablet_id="g", peers=["n1"], caller_id="test"), _ctx()
        )
        assert (out.voters, out.learners, out.role) == (["n1"], [], "LEADER")
        assert out.term >= 2 and out.config_index >= 1
        assert await replica.replicate(b"after", timeout_s=5.0) >= out.config_index
    finally:
        await manager.stop()
    again = await _manager(tmp_path, rpc, sm)
    try:
        replica = again.get("g")
        assert replica.raft is not None and replica.raft.config.voters == frozenset({"n1"})
        assert replica.raft.term >= out.term
        replica.campaign()  # a lone voter wins its first election outright
        await replica.wait_for(lambda r: r.is_leader_ready(), 5.0)
        await replica.replicate(b"after restart", timeout_s=5.0)
        assert sm.entries[-2:] == [b"after", b"after restart"]
    finally:
        await again.stop()
