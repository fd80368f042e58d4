"""A one-voter replica in process: what it refuses before anything reaches its log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.consensus import replica as replica_mod
from kudu_async.consensus.replica import RaftReplica, ReplicaOptions, ReplicaState
from kudu_async.consensus.transport import ConsensusTransport
from kudu_async.rpc.client import RpcClient


class Applied:
    """The smallest state machine: remembers what was applied."""

    def __init__(self) -> None:
        self.entries: list[bytes] = []

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        self.entries.append(payload)
        return index

    def durable_index(self) -> int:
        return 0

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        return None


async def test_an_entry_over_the_log_limit_is_refused_at_propose_and_the_replica_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_mod, "MAX_ENTRY_BYTES", 1000)  # the real one is 256 MiB
    rpc = RpcClient("test")
    sm = Applied()
    replica = RaftReplica("g", "n1", tmp_path / "g", sm, ConsensusTransport(rpc, "n1"),
                          options=ReplicaOptions(fsync=False))
    try:
        await replica.open({"n1": "127.0.0.1:1"})
        replica.campaign()
        await replica.wait_for(lambda r: r.is_leader_ready(), 5.0)
        with pytest.raises(KuduInvalidArgument, match="entry of 1001 bytes is over the 1000-byte limit"):
            replica.propose([b"fine", b"x" * 1001])
        assert await replica.replicate(b"after", timeout_s=5.0) >= 1
        assert sm.entries == [b"after"] and replica.state is ReplicaState.RUNNING
    finally:
        await replica.close()
        await rpc.close()
        await asyncio.sleep(0)
