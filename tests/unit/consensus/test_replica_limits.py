"""A one-voter replica in process: what it refuses before anything reaches its log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kudu_async.common.errors import KuduBadStatus, KuduInvalidArgument, KuduTimedOut
from kudu_async.consensus import replica as replica_mod
from kudu_async.consensus.consensus_meta import ConsensusMetadata
from kudu_async.consensus.raft import HardState
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


@contextlib.asynccontextmanager
async def one_voter(path: Path, sm: Applied) -> AsyncIterator[RaftReplica]:
    """A replica that is its group's only voter, elected leader (no peer is ever called)."""
    rpc = RpcClient("test")
    replica = RaftReplica("g", "n1", path / "g", sm, ConsensusTransport(rpc, "n1"), options=ReplicaOptions(fsync=False))
    try:
        await replica.open({"n1": "127.0.0.1:1"})
        replica.campaign()
        await replica.wait_for(lambda r: r.is_leader_ready(), 5.0)
        yield replica
    finally:
        await replica.close()
        await rpc.close()


async def test_an_entry_over_the_log_limit_is_refused_at_propose_and_the_replica_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica_mod, "MAX_ENTRY_BYTES", 1000)  # the real one is 256 MiB
    sm = Applied()
    async with one_voter(tmp_path, sm) as replica:
        with pytest.raises(KuduInvalidArgument, match="entry of 1001 bytes is over the 1000-byte limit"):
            replica.propose([b"fine", b"x" * 1001])
        assert await replica.replicate(b"after", timeout_s=5.0) >= 1
        assert sm.entries == [b"after"] and replica.state is ReplicaState.RUNNING


class Gated(Applied):
    """Applies only once the gate opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        await self.gate.wait()
        return await super().apply(index, term, payload)


async def test_replicate_many_times_out_without_cancelling_and_raises_what_failed(tmp_path: Path) -> None:
    """A timeout leaves the proposals to commit; a replica that stops fails every one still waiting, and the
    call raises that (every entry's error taken, none left unretrieved)."""
    sm = Gated()
    sm.gate.set()  # the leader's own first entry applies
    async with one_voter(tmp_path, sm) as replica:
        sm.gate.clear()
        with pytest.raises(KuduTimedOut, match=r"did not commit within 0\.2s"):
            await replica.replicate_many([b"a", b"b"], timeout_s=0.2)
        sm.gate.set()
        assert await replica.replicate_many([b"c"], timeout_s=5.0) == [4]  # after the leader's no-op and a, b
        assert await replica.replicate_many([], timeout_s=5.0) == []
        assert sm.entries == [b"a", b"b", b"c"]
        sm.gate.clear()
        call = asyncio.ensure_future(replica.replicate_many([b"d", b"e"], timeout_s=5.0))
        await asyncio.sleep(0.05)
        await replica.close()
        with pytest.raises(KuduBadStatus):
            await call
        sm.gate.set()


async def test_a_group_still_opening_after_a_restart_is_retryable_not_missing(tmp_path: Path) -> None:
    """Replicas reopen in the background after a restart while the node already serves: a call for one
    that is on disk but not open yet is SERVICE_UNAVAILABLE (retryable), not NOT_FOUND."""
    from kudu_async.common.errors import KuduNotFound, KuduServiceUnavailable
    from kudu_async.consensus.raft_manager import RaftManager

    rpc = RpcClient("test")
    manager = RaftManager("n1", tmp_path, rpc)
    try:
        manager.opening.add("g-opening")
        with pytest.raises(KuduServiceUnavailable, match="still opening") as info:
            manager.get("g-opening")
        assert info.value.details.get("retryable") is True
        with pytest.raises(KuduNotFound, match="no replica of g-missing"):
            manager.get("g-missing")
    finally:
        await rpc.close()


async def test_overlapping_consensus_metadata_saves_do_not_trip_over_each_other(tmp_path: Path) -> None:
    """close() cancels the driver, whose cmeta save runs on in its worker thread while close() saves again;
    the saves share one temp file, so they take turns and every one lands."""
    async with one_voter(tmp_path, Applied()) as replica:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(8) as pool:
            await asyncio.gather(*(loop.run_in_executor(pool, replica._write_cmeta) for _ in range(200)))
        assert ConsensusMetadata.load(replica.cmeta_path) is not None


async def test_a_consensus_metadata_record_never_overwrites_a_later_one(tmp_path: Path) -> None:
    """Records are numbered as they are taken on the loop; one whose save finishes after a later record's
    (a commit-only save in the background, then a term change awaited) is dropped, not written over it."""
    async with one_voter(tmp_path, Applied()) as replica:
        old = replica._cmeta_record()
        replica._cmeta.term += 5  # as a term change would, saved with a later record
        new = replica._cmeta_record()
        replica._write_cmeta_record(*new)
        replica._write_cmeta_record(*old)
        saved = ConsensusMetadata.load(replica.cmeta_path)
        assert saved is not None and saved.term == replica._cmeta.term


async def test_commit_only_hard_state_is_saved_in_the_background_and_close_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ready whose hard state moved only the commit index does not wait for the save's fsyncs; the save
    lands all the same, and close() returns only once it has."""
    started = asyncio.Event()
    release = asyncio.Event()
    async with one_voter(tmp_path, Applied()) as replica:
        loop = asyncio.get_running_loop()
        write = replica._write_cmeta_record

        def slow_write(seq: int, data: bytes) -> None:
            loop.call_soon_threadsafe(started.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
            write(seq, data)

        monkeypatch.setattr(replica, "_write_cmeta_record", slow_write)
        replica._commit_saved_at = 0.0  # the save interval has passed
        raft = replica.raft
        assert raft is not None
        hs = HardState(raft.term, raft.vote, raft.commit)
        await asyncio.wait_for(replica._persist_hard_state(hs), 1.0)  # returns while the save waits
        await asyncio.wait_for(started.wait(), 5.0)
        assert replica._background_save is not None and not replica._background_save.done()
        closing = asyncio.ensure_future(replica.close())
        await asyncio.sleep(0.05)
        assert not closing.done()  # close() waits for the save in flight
        release.set()
        await asyncio.wait_for(closing, 5.0)
        saved = ConsensusMetadata.load(replica.cmeta_path)
        assert saved is not None and saved.commit_index >= hs.commit
