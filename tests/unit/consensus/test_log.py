"""The WAL: framing, recovery rules, logical truncation, group commit, GC."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kudu_async.common.errors import KuduCorruption, KuduNotFound
from kudu_async.consensus.log import Log, LogEntry, LogOptions, LogWriter


def entries(first: int, last: int, term: int = 1, size: int = 10) -> list[LogEntry]:
    return [LogEntry(term, i, 0, f"e{i}".encode().ljust(size, b".")) for i in range(first, last + 1)]


def open_log(d: Path, segment_bytes: int = 1 << 20, compression: str = "NONE") -> Log:
    """Uncompressed unless asked: the layout tests count bytes; the compressed tests below ask."""
    return Log.open(d, LogOptions(segment_bytes=segment_bytes, compression=compression))[0]


def test_entries_survive_reopen(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    wal.append(entries(1, 5))
    wal.append(entries(6, 6, term=2))
    wal.sync()
    wal.close()
    again, report = Log.open(tmp_path)
    assert report.entries == 6 and report.truncated_tail_bytes == 0
    assert again.read(1) == entries(1, 5) + entries(6, 6, term=2)
    assert (again.first_index, again.last_index, again.term_at(6)) == (1, 6, 2)


def test_frames_with_large_entries_are_the_msgpack_of_the_batch_and_read_back(tmp_path: Path) -> None:
    """Large entry data is written as is (not packed with its entry), yet a frame's payload is exactly
    ``msgpack([[term, index, kind, data], ...])``, with the CRC of it: mixed small and large
    entries (every msgpack bin size class) and string kinds read back after a reopen."""
    import msgpack

    from kudu_async.consensus import log as log_mod

    sizes = [0, 10, 300, 70_000, 16 * 1024, 5, 2_000_000, 17]
    batch = [LogEntry(3, i + 1, "w" if i % 2 else 7, bytes([i]) * n) for i, n in enumerate(sizes)]
    wal = open_log(tmp_path, segment_bytes=64 << 20)
    parts = wal._payload_parts(batch)
    assert b"".join(parts) == msgpack.packb([[e.term, e.index, e.kind, e.data] for e in batch], use_bin_type=True)
    assert any(p is e.data for p in parts for e in batch if len(e.data) >= log_mod._INLINE_DATA)  # not copied
    wal.append(batch)
    wal.append(entries(9, 10, term=3))
    wal.sync()
    wal.close()
    again, report = Log.open(tmp_path)
    assert report.entries == 10 and report.truncated_tail_bytes == 0
    assert again.read(1) == batch + entries(9, 10, term=3)


def test_segments_roll_and_reads_span_them(tmp_path: Path) -> None:
    wal = open_log(tmp_path, segment_bytes=4096)
    for i in range(1, 201):
        wal.append(entries(i, i, size=100))
    wal.sync()
    assert len(wal.segment_info()) > 3
    assert wal.read(37, 160) == entries(37, 160, size=100)
    wal.close()
    again = open_log(tmp_path, segment_bytes=4096)
    assert again.read(1) == entries(1, 200, size=100)


def test_append_at_lower_index_replaces_the_suffix_also_after_replay(tmp_path: Path) -> None:
    wal = open_log(tmp_path, segment_bytes=2048)
    for i in range(1, 41):
        wal.append(entries(i, i, size=100))
    wal.append(entries(15, 17, term=3))  # a new leader overwrote 15.. with its own entries
    wal.sync()
    expected = entries(1, 14, size=100) + entries(15, 17, term=3)
    assert wal.last_index == 17 and wal.read(1) == expected
    wal.close()
    again = open_log(tmp_path, segment_bytes=2048)
    assert again.last_index == 17 and again.read(1) == expected
    with pytest.raises(KuduNotFound):
        again.read(18, 18)


def _newest_segment(d: Path) -> Path:
    return sorted(p for p in d.iterdir() if p.name.startswith("wal-"))[-1]


def test_torn_tail_is_truncated_and_reported(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    wal.append(entries(1, 3))
    wal.append(entries(4, 6))
    wal.sync()
    wal.close()
    seg = _newest_segment(tmp_path)
    with seg.open("r+b") as fh:
        fh.truncate(seg.stat().st_size - 5)  # the last frame lost its end in a crash
    again, report = Log.open(tmp_path)
    assert report.truncated_tail_bytes > 0 and again.last_index == 3
    again.append(entries(4, 4, term=2))  # and the log is appendable again
    again.sync()
    again.close()
    assert open_log(tmp_path).read(1) == entries(1, 3) + entries(4, 4, term=2)


def test_half_written_frame_header_is_a_torn_tail(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    wal.append(entries(1, 2))
    wal.sync()
    wal.close()
    with _newest_segment(tmp_path).open("ab") as fh:
        fh.write(b"\x00\x00\x01")
    again, report = Log.open(tmp_path)
    assert report.truncated_tail_bytes == 3 and again.last_index == 2


def test_flipped_byte_in_the_middle_is_corruption_not_truncation(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    for i in range(1, 11):
        wal.append(entries(i, i, size=50))
    wal.sync()
    wal.close()
    seg = _newest_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x40
    seg.write_bytes(bytes(data))
    with pytest.raises(KuduCorruption, match="corrupt"):
        Log.open(tmp_path)
    assert seg.read_bytes() == bytes(data)  # nothing was cut off


def test_gc_drops_whole_old_segments_only(tmp_path: Path) -> None:
    wal = open_log(tmp_path, segment_bytes=2048)
    for i in range(1, 101):
        wal.append(entries(i, i, size=100))
    wal.sync()
    before = wal.segment_info()
    removed = wal.gc(retain_from_index=50)
    assert removed > 0
    assert wal.first_index <= 50 and wal.read(wal.first_index) == entries(wal.first_index, 100, size=100)
    assert len(wal.segment_info()) == len(before) - removed
    wal.close()
    again = open_log(tmp_path, segment_bytes=2048)
    assert again.first_index == wal.first_index and again.last_index == 100


async def test_writer_group_commits_concurrent_appends(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    writer = LogWriter(wal)
    await asyncio.gather(*(writer.append(entries(i, i)) for i in range(1, 201)))
    assert wal.last_index == 200
    assert writer.syncs < 200  # many appends shared an fsync
    await writer.close()
    assert open_log(tmp_path).read(1) == entries(1, 200)


async def test_writer_fails_waiters_when_disk_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = open_log(tmp_path)
    writer = LogWriter(wal)
    await writer.append(entries(1, 1))

    def broken_sync() -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(wal, "sync", broken_sync)  # the disk goes away under the writer
    with pytest.raises(Exception, match="WAL write failed"):
        await writer.append(entries(2, 2))
    with pytest.raises(Exception, match="failed"):
        await writer.append(entries(3, 3))


async def test_writer_tells_each_submit_at_completion_in_order_and_close_waits_for_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``submit``'s callback runs as its write completes (the Raft driver hears of durability without
    waiting a loop iteration for the future's callbacks), in submit order; close() finishes what is
    queued; a failed write hands its error to the callbacks of every append it leaves undone."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as ex:
        wal = open_log(tmp_path)
        writer = LogWriter(wal, ex)
        told: list[tuple[int, BaseException | None]] = []
        futs = [writer.submit(entries(i, i), lambda err, i=i: told.append((i, err))) for i in range(1, 6)]  # type: ignore[misc]
        futs[-1].add_done_callback(lambda f: told.append((-1, None)))  # a future's callbacks come after
        await writer.close()  # waits for every queued append
        assert told == [(1, None), (2, None), (3, None), (4, None), (5, None), (-1, None)]
        assert open_log(tmp_path).read(1) == entries(1, 5)

        wal2 = open_log(tmp_path / "b")
        writer2 = LogWriter(wal2, ex)

        def broken_sync() -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(wal2, "sync", broken_sync)
        errors: list[BaseException | None] = []
        failing = [writer2.submit(entries(i, i), errors.append) for i in (1, 2)]
        for f in failing:
            with pytest.raises(Exception, match="WAL write failed"):
                await f
        assert len(errors) == 2 and all(e is not None and "Input/output error" in str(e) for e in errors)
        with pytest.raises(Exception, match="failed"):
            writer2.submit(entries(3, 3))


async def test_a_failing_completion_callback_does_not_wedge_the_writer(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    writer = LogWriter(wal)

    def bad(err: BaseException | None) -> None:
        raise RuntimeError("bug in a caller")

    first = writer.submit(entries(1, 1), bad)
    second = writer.submit(entries(2, 2))
    await asyncio.gather(first, second)  # both settle, the bad callback is logged
    await writer.append(entries(3, 3))
    await writer.close()
    assert open_log(tmp_path).read(1) == entries(1, 3)


def test_a_batch_over_the_frame_limit_is_written_as_several_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery refuses frames over MAX_FRAME_BYTES as corrupt, so append never writes one: a batch
    too large for one frame goes out as several, all of it read back after a reopen."""
    from kudu_async.consensus import log as log_mod

    monkeypatch.setattr(log_mod, "MAX_FRAME_BYTES", 4096)
    wal = open_log(tmp_path)
    batch = entries(1, 40, size=300)  # ~12 kB of entries: at least three frames
    wal.append(batch)
    wal.append(entries(41, 41, size=4000))  # one entry alone near the limit
    wal.sync()
    wal.close()
    lengths = []
    for seg in sorted(tmp_path.iterdir()):
        data = seg.read_bytes()
        off = log_mod._HEADER.size
        while off < len(data):
            lengths.append(log_mod._FRAME.unpack_from(data, off)[0])
            off += log_mod._FRAME.size + lengths[-1]
    assert len(lengths) >= 4 and max(lengths) <= 4096
    again, report = Log.open(tmp_path)
    assert report.entries == 41 and report.truncated_tail_bytes == 0
    assert again.read(1) == batch + entries(41, 41, size=4000)


def test_an_entry_too_large_for_a_frame_is_refused_and_nothing_of_its_batch_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kudu_async.common.errors import KuduInvalidArgument
    from kudu_async.consensus import log as log_mod

    monkeypatch.setattr(log_mod, "MAX_FRAME_BYTES", 4096)
    wal = open_log(tmp_path)
    wal.append(entries(1, 2))
    with pytest.raises(KuduInvalidArgument, match="WAL entry 4 is 5000 bytes"):
        wal.append(entries(3, 3) + entries(4, 4, size=5000))
    assert wal.last_index == 2
    wal.append(entries(3, 4))  # the log goes on
    wal.sync()
    wal.close()
    again, report = Log.open(tmp_path)
    assert report.entries == 4 and again.read(1) == entries(1, 4)


@pytest.mark.parametrize("codec", ["LZ4", "SNAPPY", "ZSTD"])
def test_compressed_frames_read_back_after_reopen_and_are_smaller(tmp_path: Path, codec: str) -> None:
    """Compressible batches are stored compressed (flagged per frame); incompressible ones as is."""
    import os

    wal = open_log(tmp_path, compression=codec)
    wal.append(entries(1, 200, size=300))  # padded with dots: compresses well
    noise = [LogEntry(1, 201, 0, os.urandom(5000))]
    wal.append(noise)
    wal.sync()
    assert wal.read(1) == entries(1, 200, size=300) + noise
    wal.close()
    assert _newest_segment(tmp_path).stat().st_size < 200 * 300 // 4 + 5000 + 200
    again, report = Log.open(tmp_path)
    assert report.entries == 201 and again.read(150, 201) == entries(150, 200, size=300) + noise


def test_segments_written_without_compression_still_read_with_it_on(tmp_path: Path) -> None:
    old = open_log(tmp_path, segment_bytes=4096)
    for i in range(1, 101):
        old.append(entries(i, i, size=100))
    old.sync()
    old.close()
    wal = open_log(tmp_path, segment_bytes=4096, compression="LZ4")
    wal.append(entries(101, 150, size=100))
    wal.sync()
    wal.close()
    assert open_log(tmp_path, compression="ZSTD").read(1) == entries(1, 150, size=100)


def test_a_damaged_compressed_frame_is_corruption(tmp_path: Path) -> None:
    """A compressed frame whose bytes and CRC were rewritten consistently still fails to decompress:
    CORRUPTION, as a bad checksum is."""
    import struct

    import crc32c

    wal = open_log(tmp_path, compression="LZ4")
    wal.append(entries(1, 50, size=200))
    wal.append(entries(51, 60, size=200))
    wal.sync()
    wal.close()
    seg = _newest_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    off = 16  # the segment header
    word, _, _ = struct.unpack_from(">III", data, off)
    length = word & ((1 << 29) - 1)
    assert word >> 29 == 1  # stored LZ4-compressed
    start = off + 12
    data[start + 4 : start + length] = bytes(length - 4)  # the compressed bytes zeroed
    crc = crc32c.crc32c(bytes(data[start : start + length]))
    struct.pack_into(">II", data, off, word, crc)
    struct.pack_into(">I", data, off + 8, crc32c.crc32c(bytes(data[off : off + 8])))
    seg.write_bytes(bytes(data))
    with pytest.raises(KuduCorruption, match=r"undecompressable|decompressed to"):
        Log.open(tmp_path)


def test_an_unknown_compression_codec_is_refused_by_name() -> None:
    from kudu_async.common.errors import KuduInvalidArgument
    from kudu_async.consensus.log import wal_codec_id

    assert wal_codec_id("lz4") == 1
    with pytest.raises(KuduInvalidArgument, match=r"BROTLI.*NONE, LZ4, SNAPPY, ZSTD"):
        wal_codec_id("BROTLI")


def test_term_runs_name_each_run_of_equal_terms(tmp_path: Path) -> None:
    wal = open_log(tmp_path)
    wal.append(entries(1, 4, term=1) + entries(5, 5, term=3) + entries(6, 9, term=4))
    assert wal.term_runs(1, 9) == ([1, 5, 6], [1, 3, 4])
    assert wal.term_runs(3, 7) == ([3, 5, 6], [1, 3, 4])
    assert wal.term_runs(7, 7) == ([7], [4])
    with pytest.raises(KuduNotFound):
        wal.term_runs(0, 3)


@pytest.mark.parametrize("use_fsync", [False, True])
def test_appends_are_synced_with_fdatasync_unless_fsync_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_fsync: bool
) -> None:
    wal, _ = Log.open(tmp_path / "wal", LogOptions(use_fsync=use_fsync))
    calls: list[str] = []

    def counting(name: str) -> Callable[[int], None]:
        real = getattr(os, name)

        def sync(fd: int) -> None:
            calls.append(name)
            real(fd)

        return sync

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, counting(name))
    wal.append([LogEntry(1, 1, 0, b"x")])
    wal.sync()
    assert calls == ["fsync" if use_fsync else "fdatasync"]
    wal.close()
