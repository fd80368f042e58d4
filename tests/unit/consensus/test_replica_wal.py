"""A one-voter replica's WAL: compressed as configured, collected after the state machine is durable even
when writes have stopped, and its in-memory log bounded."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kudu_async.consensus.log_cache import ENTRY_OVERHEAD
from kudu_async.consensus.raft import RaftOptions
from kudu_async.consensus.replica import RaftReplica, ReplicaOptions
from kudu_async.consensus.transport import ConsensusTransport
from kudu_async.rpc.client import RpcClient


class Flushable:
    """Applies in memory; ``flush()`` makes everything applied so far durable."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, bytes]] = []
        self.durable = 0

    async def apply(self, index: int, term: int, payload: bytes) -> Any:
        self.entries.append((index, payload))
        return index

    def flush(self) -> None:
        self.durable = self.entries[-1][0]

    def durable_index(self) -> int:
        return self.durable

    def recall(self, entries: list[tuple[int, bytes]]) -> None:
        return None


@contextlib.asynccontextmanager
async def one_voter(path: Path, sm: Flushable, options: ReplicaOptions) -> AsyncIterator[RaftReplica]:
    rpc = RpcClient("test")
    replica = RaftReplica("g", "n1", path / "g", sm, ConsensusTransport(rpc, "n1"), options=options)
    try:
        await replica.open({"n1": "127.0.0.1:1"})
        replica.campaign()
        await replica.wait_for(lambda r: r.is_leader_ready(), 5.0)
        yield replica
    finally:
        await replica.close()
        await rpc.close()


async def _until(pred: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def test_a_flush_after_the_last_write_frees_the_wal_on_a_later_tick(tmp_path: Path) -> None:
    sm = Flushable()
    opts = ReplicaOptions(
        fsync=False, segment_bytes=4096, compression="NONE", gc_every_applied=1 << 30, gc_check_ticks=3
    )
    async with one_voter(tmp_path, sm, opts) as replica:
        for i in range(60):
            await replica.replicate(bytes([i]) * 500)
        wal = replica.wal
        assert wal is not None
        many = wal.num_segments
        assert many > 5
        sm.flush()  # no write follows
        for _ in range(2):
            replica.tick()
        await asyncio.sleep(0.05)
        assert wal.num_segments == many  # not yet: checked every third tick
        replica.tick()
        await _until(lambda: wal.num_segments == opts.min_retained_segments)
        assert await replica.replicate(b"after") == sm.entries[-1][0]


async def test_the_in_memory_log_stays_under_its_limit_and_the_wal_is_compressed(tmp_path: Path) -> None:
    sm = Flushable()
    limit = 4 * (1000 + ENTRY_OVERHEAD)
    opts = ReplicaOptions(fsync=False, compression="ZSTD", raft=RaftOptions(log_cache_bytes=limit))
    async with one_voter(tmp_path, sm, opts) as replica:
        for i in range(50):
            await replica.replicate(f"{i:04d}".encode() * 250)
            assert replica.log_cache_bytes() <= limit
        assert replica.status()["log_cache_bytes"] == replica.log_cache_bytes()
        wal = replica.wal
        assert wal is not None
        data = (replica.dir / "wal" / "wal-000000001").read_bytes()
    codecs = []
    off = 16  # past the segment header
    while off < len(data):
        (word,) = struct.unpack_from(">I", data, off)
        codecs.append(word >> 29)
        off += 12 + (word & ((1 << 29) - 1))
    assert codecs.count(3) == 50  # each write's frame ZSTD-compressed (the tiny first ones are not)
    assert len(data) < 50 * 1000 // 4


async def test_a_restarted_replica_knows_the_terms_of_entries_kept_below_its_compaction_point(
    tmp_path: Path,
) -> None:
    """Entries kept for lagging peers are not loaded at restart, but stay readable for them: the
    core's floor is the WAL's first entry, not the compaction point."""
    sm = Flushable()
    opts = ReplicaOptions(fsync=False, segment_bytes=4096, compression="NONE", gc_every_applied=10)
    async with one_voter(tmp_path, sm, opts) as replica:
        wal = replica.wal
        assert wal is not None
        flushed = False
        for i in range(30):
            await replica.replicate(bytes([i]) * 500)
            newest = wal.segment_info()[-1]
            if not flushed and i >= 10 and newest["last_index"] - newest["first_index"] == 2:
                sm.flush()  # mid-segment: the entries after it keep the segment, and those before it
                flushed = True
        assert replica.raft is not None
        compacted = replica.raft.snapshot_meta().index
        assert compacted > 1
    async with one_voter(tmp_path, sm, opts) as again:
        raft, wal = again.raft, again.wal
        assert raft is not None and wal is not None
        assert raft.snapshot_meta().index == compacted
        assert wal.first_index < compacted  # whole segments only: some entries below it stay
        assert raft.log.floor == wal.first_index
        assert raft.log.term_at(wal.first_index + 1) == wal.term_at(wal.first_index + 1)
