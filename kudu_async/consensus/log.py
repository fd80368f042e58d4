"""The write-ahead log of one Raft replica: segmented, CRC32C-framed, group-committed.

Layout: ``<dir>/wal-<seqno:09d>`` segment files. Each starts with a header (magic + seqno) and holds
frames ``[u32 codec<<29 | length][u32 crc32c(payload)][u32 crc32c(first 8 header bytes)][payload]``; a
payload is a msgpack list of entries ``[term, index, kind, data]`` appended together, stored as is (codec
0) or compressed as ``[u32 msgpack length][compressed msgpack]`` (Kudu's ``log_compression_codec``).
Compressing the whole frame rather than each entry lets group-committed small writes share one
dictionary; a frame written by a log without compression (every length fits in 29 bits) reads as
codec 0, so old segments stay readable. Truncation is logical,
as in Kudu: an appended entry whose index is at or below the last one replaces that suffix, both now
and when the log is replayed, so the files stay append-only.

``Log`` is blocking (it writes and fsyncs) and is only ever driven from an executor thread;
``LogWriter`` is the asyncio side that batches concurrent appends into one write + one fsync.

Recovery rules: an incomplete or checksum-failing frame at the very end of the last segment is a torn
write from a crash and is cut off (logged); any damage elsewhere is corruption and ``Log.open`` raises
KuduCorruption, so the replica is marked FAILED instead of silently losing or inventing entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import os
import struct
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import msgpack
import numpy as np
import pyarrow as pa

from kudu_async.common.errors import (
    KuduAborted,
    KuduCorruption,
    KuduIllegalState,
    KuduInvalidArgument,
    KuduNotFound,
)
from kudu_async.fs.io_util import fsync_dir

log = logging.getLogger(__name__)

SEGMENT_MAGIC = b"kuduwal1"
_HEADER = struct.Struct(">8sQ")  # magic, segment seqno
_FRAME = struct.Struct(">III")  # payload length, crc32c of payload, crc32c of the first 8 bytes
_INLINE_DATA = 16 * 1024  # entry data up to this size is packed with its entry; larger is written as is
_IOV_MAX = 512
_entry_data = operator.attrgetter("data")
MAX_FRAME_BYTES = 256 * 1024 * 1024
# msgpack's framing of one entry inside a frame: array headers, term, index, kind, bin header (a string
# kind may be longer; it is counted on top).
_ENTRY_OVERHEAD = 48
MAX_ENTRY_BYTES = MAX_FRAME_BYTES - _ENTRY_OVERHEAD
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
_CODEC_SHIFT = 29  # a frame's length is at most MAX_FRAME_BYTES (2**28): the top 3 bits name its codec
_LENGTH_MASK = (1 << _CODEC_SHIFT) - 1
_RAW_SIZE = struct.Struct(">I")  # a compressed payload's msgpack length, ahead of the compressed bytes
_MIN_COMPRESS_BYTES = 64  # smaller payloads never shrink by enough to pay for the codec's framing
# Frame codec ids as stored, by the names of ``--log_compression_codec`` (pyarrow's codec behind each).
WAL_CODECS: dict[str, tuple[int, str | None]] = {
    "NONE": (0, None),
    "LZ4": (1, "lz4"),
    "SNAPPY": (2, "snappy"),
    "ZSTD": (3, "zstd"),
}
_CODEC_BY_ID: dict[int, pa.Codec | None] = {}


def _codec_for_id(codec_id: int) -> pa.Codec | None:
    """The pyarrow codec of a stored id (created once); KuduCorruption for an id no writer uses."""
    try:
        return _CODEC_BY_ID[codec_id]
    except KeyError:
        pass
    name = next((pa_name for cid, pa_name in WAL_CODECS.values() if cid == codec_id), "?")
    if name == "?":
        raise KuduCorruption(f"unknown WAL compression codec id {codec_id}")
    codec = None if name is None else pa.Codec(name)
    _CODEC_BY_ID[codec_id] = codec
    return codec


def wal_codec_id(name: str) -> int:
    """The stored id of a ``--log_compression_codec`` value; INVALID_ARGUMENT names the choices."""
    try:
        return WAL_CODECS[name.upper()][0]
    except KeyError:
        raise KuduInvalidArgument(
            f"unknown WAL compression codec {name!r}: choose one of {', '.join(WAL_CODECS)}"
        ) from None


def _bin_header(n: int) -> bytes:
    """msgpack's header of a ``bin`` of ``n`` bytes (the packer only writes whole objects)."""
    if n < 1 << 8:
        return struct.pack(">BB", 0xC4, n)
    if n < 1 << 16:
        return struct.pack(">BH", 0xC5, n)
    return struct.pack(">BI", 0xC6, n)


def _writev_all(fd: int, parts: list[bytes | memoryview]) -> None:
    """Write every piece in order, as few ``writev`` calls as the kernel takes (it may write part)."""
    views = [memoryview(p) for p in parts if len(p)]
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i : i + _IOV_MAX])
        while n:
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One replicated entry as the log stores it; ``kind`` and ``data`` are opaque to the log."""

    term: int
    index: int
    kind: int | str
    data: bytes


def entry_frame_bytes(e: LogEntry) -> int:
    """An upper bound of the frame an entry takes alone (what :meth:`Log.append` checks)."""
    return len(e.data) + _ENTRY_OVERHEAD + (len(e.kind) if isinstance(e.kind, str) else 0)


@dataclass
class RecoveryReport:
    """What ``Log.open`` found, for logs and the admin pages."""

    segments: int = 0
    entries: int = 0
    truncated_tail_bytes: int = 0


@dataclass
class _Segment:
    seqno: int
    path: Path
    size: int
    first_index: int = 0  # 0 while the segment holds no live entry
    last_index: int = 0


@dataclass
class LogOptions:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    fsync: bool = True
    compression: str = "LZ4"  # a WAL_CODECS name; applies to frames written from now on
    # Appends are made durable with fdatasync(2), as Kudu's by default (its env_use_fsync): an append's
    # data and the file size that reaches it are flushed, not the timestamps fsync(2) would add.
    use_fsync: bool = False


@dataclass
class _Pos:
    """Where entry ``first + i`` lives: parallel arrays keep a long log's index cheap in memory."""

    first: int = 1
    seg: array[int] = field(default_factory=lambda: array("q"))
    offset: array[int] = field(default_factory=lambda: array("q"))
    slot: array[int] = field(default_factory=lambda: array("i"))
    term: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.seg)

    def truncate_from(self, index: int) -> None:
        keep = max(0, index - self.first)
        del self.seg[keep:], self.offset[keep:], self.slot[keep:], self.term[keep:]

    def drop_before(self, index: int) -> None:
        n = max(0, min(len(self), index - self.first))
        del self.seg[:n], self.offset[:n], self.slot[:n], self.term[:n]
        self.first += n


class Log:
    """One replica's WAL directory. Not thread-safe: one executor thread at a time drives it."""

    def __init__(self, directory: Path, options: LogOptions) -> None:
        self.dir = directory
        self.options = options
        self._segments: list[_Segment] = []
        self._pos = _Pos()
        self._fh: Any = None  # the open segment being appended to
        self._read_fds: dict[int, int] = {}
        self._lock = threading.Lock()  # guards reads against concurrent GC/appends from another thread
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=False)  # the appending thread's only
        self._codec_id = wal_codec_id(options.compression)
        self._codec = _codec_for_id(self._codec_id)

    # --- opening and recovery -------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str], options: LogOptions | None = None) -> tuple[Log, RecoveryReport]:
        """Open (creating if needed) and recover the log; raises KuduCorruption on mid-log damage."""
        wal = cls(Path(directory), options or LogOptions())
        wal.dir.mkdir(parents=True, exist_ok=True)
        report = wal._recover()
        wal._open_for_append()
        return wal, report

    def _recover(self) -> RecoveryReport:
        report = RecoveryReport()
        paths = sorted(p for p in self.dir.iterdir() if p.name.startswith("wal-") and not p.name.endswith(".tmp"))
        for n, path in enumerate(paths):
            is_last = n == len(paths) - 1
            seqno = self._seqno_of(path)
            data = path.read_bytes()
            if len(data) < _HEADER.size:
                if is_last:  # crashed while creating the segment
                    log.warning("removing torn WAL segment header", extra={"segment": str(path)})
                    path.unlink()
                    fsync_dir(self.dir)
                    report.truncated_tail_bytes += len(data)
                    continue
                raise KuduCorruption(f"WAL segment {path} is too short for its header ({len(data)} bytes)")
            magic, hdr_seq = _HEADER.unpack_from(data, 0)
            if magic != SEGMENT_MAGIC or hdr_seq != seqno:
                raise KuduCorruption(f"WAL segment {path}: bad header (magic {magic!r}, seqno {hdr_seq})")
            seg = _Segment(seqno, path, len(data))
            self._segments.append(seg)
            good_end = self._replay_segment(seg, data, is_last)
            if good_end < len(data):
                report.truncated_tail_bytes += len(data) - good_end
                log.warning("truncating torn WAL tail", extra={"segment": str(path), "bytes": len(data) - good_end})
                with path.open("r+b") as fh:
                    fh.truncate(good_end)
                    fh.flush()
                    os.fsync(fh.fileno())
                seg.size = good_end
        report.segments = len(self._segments)
        report.entries = len(self._pos)
        self._refresh_segment_ranges()
        return report

    def _replay_segment(self, seg: _Segment, data: bytes, is_last: bool) -> int:
        off = _HEADER.size
        end = len(data)
        while off < end:
            torn = self._frame_problem(data, off)
            if torn is not None:
                if is_last and self._is_tail(data, off):
                    return off
                raise KuduCorruption(f"WAL segment {seg.path} is corrupt at offset {off}: {torn}")
            word = _FRAME.unpack_from(data, off)[0]
            length = word & _LENGTH_MASK
            payload = data[off + _FRAME.size : off + _FRAME.size + length]
            batch = _decode_batch(word >> _CODEC_SHIFT, payload, f"WAL segment {seg.path} offset {off}")
            self._index_batch(seg.seqno, off, batch)
            off += _FRAME.size + length
        return off

    @staticmethod
    def _frame_problem(data: bytes, off: int) -> str | None:
        if off + _FRAME.size > len(data):
            return "incomplete frame header"
        word, crc, header_crc = _FRAME.unpack_from(data, off)
        if crc32c.crc32c(data[off : off + 8]) != header_crc:
            return "frame header checksum mismatch"
        length = word & _LENGTH_MASK
        if not any(cid == word >> _CODEC_SHIFT for cid, _ in WAL_CODECS.values()):
            return f"unknown compression codec id {word >> _CODEC_SHIFT}"
        if length > MAX_FRAME_BYTES:
            return f"frame length {length} exceeds {MAX_FRAME_BYTES}"
        if off + _FRAME.size + length > len(data):
            return "incomplete frame"
        if crc32c.crc32c(data[off + _FRAME.size : off + _FRAME.size + length]) != crc:
            return "checksum mismatch"
        return None

    @classmethod
    def _is_tail(cls, data: bytes, off: int) -> bool:
        """A bad frame is a torn write only if no valid frame starts anywhere after it.

        A crash cuts the last write short; it cannot leave intact frames behind the damage. So any
        valid frame after a bad one means the damage is in the middle of the log: corruption.
        """
        last_start = len(data) - _FRAME.size
        return all(cls._frame_problem(data, start) is not None for start in range(off + 1, last_start + 1))

    def _index_batch(self, seqno: int, offset: int, batch: Sequence[Sequence[Any]]) -> None:
        for slot, e in enumerate(batch):
            term, index = int(e[0]), int(e[1])
            pos = self._pos
            if len(pos) == 0:
                pos.first = index
            elif index <= pos.first + len(pos) - 1:
                if index < pos.first:
                    raise KuduCorruption(f"WAL entry {index} precedes the log start {pos.first}")
                pos.truncate_from(index)
            elif index != pos.first + len(pos):
                raise KuduCorruption(f"WAL gap: entry {index} follows {pos.first + len(pos) - 1}")
            pos.seg.append(seqno)
            pos.offset.append(offset)
            pos.slot.append(slot)
            pos.term.append(term)

    @staticmethod
    def _seqno_of(path: Path) -> int:
        try:
            return int(path.name[4:])
        except ValueError:
            raise KuduCorruption(f"unexpected file in WAL directory: {path}") from None

    def _refresh_segment_ranges(self) -> None:
        for seg in self._segments:
            seg.first_index = seg.last_index = 0
        by_seq = {s.seqno: s for s in self._segments}
        pos = self._pos
        for i, seqno in enumerate(pos.seg):
            seg = by_seq[seqno]
            if seg.first_index == 0:
                seg.first_index = pos.first + i
            seg.last_index = pos.first + i

    def _open_for_append(self) -> None:
        if not self._segments:
            self._roll(1)
        else:
            seg = self._segments[-1]
            self._fh = seg.path.open("ab", buffering=0)

    def _roll(self, seqno: int | None = None) -> None:
        if self._fh is not None:
            if self.options.fsync:
                os.fsync(self._fh.fileno())
            self._fh.close()
        seqno = seqno if seqno is not None else self._segments[-1].seqno + 1
        path = self.dir / f"wal-{seqno:09d}"
        fh = path.open("xb", buffering=0)
        fh.write(_HEADER.pack(SEGMENT_MAGIC, seqno))
        if self.options.fsync:
            os.fsync(fh.fileno())
            fsync_dir(self.dir)
        self._segments.append(_Segment(seqno, path, _HEADER.size))
        self._fh = fh

    # --- appending ------------------------------------------------------------------------------------

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Write a batch, as one frame when it fits in ``MAX_FRAME_BYTES`` and as several otherwise (not
        yet durable: call ``sync``). Recovery refuses a longer frame, so none is ever written: an entry
        too large for a frame of its own is refused before anything of the batch is written."""
        if not entries:
            return
        for e in entries:
            if entry_frame_bytes(e) > MAX_FRAME_BYTES:
                raise KuduInvalidArgument(
                    f"WAL entry {e.index} is {len(e.data)} bytes, over the "
                    f"{MAX_ENTRY_BYTES}-byte limit of one log frame"
                )
        self._append_frames(entries)

    def _append_frames(self, entries: Sequence[LogEntry]) -> None:
        parts = self._payload_parts(entries)
        size = sum(map(len, parts))
        if size > MAX_FRAME_BYTES:  # halve until each part fits (a single entry always does, checked above)
            half = len(entries) // 2
            self._append_frames(entries[:half])
            self._append_frames(entries[half:])
            return
        codec_id, parts, size = self._compress(parts, size)
        seg = self._segments[-1]
        if seg.size > _HEADER.size and seg.size + size + _FRAME.size > self.options.segment_bytes:
            self._roll()
            seg = self._segments[-1]
        crc = 0
        for p in parts:
            crc = crc32c.crc32c(p, crc)
        head = struct.pack(">II", size | codec_id << _CODEC_SHIFT, crc)
        head += struct.pack(">I", crc32c.crc32c(head))
        offset = seg.size
        if len(parts) == 1:  # small entries: one frame, one write
            frame = head + parts[0]
            n = os.write(self._fh.fileno(), frame)
            if n < len(frame):
                _writev_all(self._fh.fileno(), [memoryview(frame)[n:]])
        else:
            _writev_all(self._fh.fileno(), [head, *parts])
        seg.size += _FRAME.size + size
        with self._lock:
            self._index_batch(seg.seqno, offset, [(e.term, e.index) for e in entries])
            self._refresh_tail_ranges(entries[0].index)

    def _compress(self, parts: list[bytes | memoryview], size: int) -> tuple[int, list[bytes | memoryview], int]:
        """(codec id, pieces, size) of the payload to store: compressed when that makes it smaller.
        Runs in the appending worker; pyarrow's codecs release the GIL while they work."""
        codec = self._codec
        if codec is None or size < _MIN_COMPRESS_BYTES:
            return 0, parts, size
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        packed: bytes = codec.compress(raw, asbytes=True)
        if len(packed) + _RAW_SIZE.size >= size:
            return 0, parts, size
        return self._codec_id, [_RAW_SIZE.pack(size), packed], len(packed) + _RAW_SIZE.size

    def _payload_parts(self, entries: Sequence[LogEntry]) -> list[bytes | memoryview]:
        """A frame's payload, ``msgpack([[term, index, kind, data], ...])``, as pieces whose
        concatenation is exactly that: entries' large data stay separate pieces (never copied; the
        frame goes out with one ``writev``)."""
        if max(map(len, map(_entry_data, entries))) < _INLINE_DATA:  # small entries: one C-level pack
            return [msgpack.packb([[e.term, e.index, e.kind, e.data] for e in entries], use_bin_type=True)]
        pk = self._packer
        pk.reset()  # nothing left over from an append that raised
        parts: list[bytes | memoryview] = []
        pk.pack_array_header(len(entries))
        pending = True
        for e in entries:
            pk.pack_array_header(4)
            pk.pack(e.term)
            pk.pack(e.index)
            pk.pack(e.kind)
            if len(e.data) < _INLINE_DATA:
                pk.pack(e.data)
                pending = True
                continue
            parts.append(pk.bytes() + _bin_header(len(e.data)))
            pk.reset()
            parts.append(e.data)
            pending = False
        if pending:
            parts.append(pk.bytes())
            pk.reset()
        return parts

    def _refresh_tail_ranges(self, from_index: int) -> None:
        # Entries at or after from_index may have moved to the newest segment; earlier segments lose them.
        last = self.last_index
        newest = self._segments[-1]
        for seg in self._segments:
            if seg.first_index and seg.last_index >= from_index and seg is not newest:
                seg.last_index = min(seg.last_index, from_index - 1)
                if seg.last_index < seg.first_index:
                    seg.first_index = seg.last_index = 0
        if newest.first_index == 0 or newest.first_index > from_index:
            newest.first_index = from_index
        newest.last_index = last

    def sync(self) -> None:
        if self.options.fsync and self._fh is not None:
            (os.fsync if self.options.use_fsync else os.fdatasync)(self._fh.fileno())

    # --- reading --------------------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        """Index of the oldest retained entry (or the next index when empty)."""
        return self._pos.first

    @property
    def last_index(self) -> int:
        """Index of the newest entry; ``first_index - 1`` when the log is empty."""
        return self._pos.first + len(self._pos) - 1

    def term_at(self, index: int) -> int:
        i = index - self._pos.first
        if not 0 <= i < len(self._pos):
            raise KuduNotFound(f"log index {index} not in [{self.first_index}, {self.last_index}]")
        return int(self._pos.term[i])

    def term_runs(self, start: int, end: int) -> tuple[list[int], list[int]]:
        """(first index, term) of each run of equal terms among entries ``start..end``: what a restarted
        replica needs to know of entries it does not load."""
        if start < self.first_index or end > self.last_index or start > end:
            raise KuduNotFound(f"log range [{start}, {end}] not in [{self.first_index}, {self.last_index}]")
        pos = self._pos
        terms = np.frombuffer(pos.term, dtype=np.int64)[start - pos.first : end - pos.first + 1]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(terms)) + 1))
        return (starts + start).tolist(), terms[starts].tolist()

    def read(self, start: int, end: int | None = None) -> list[LogEntry]:
        """Entries ``start..end`` inclusive (default: to the end). Blocking: reads segment files."""
        with self._lock:
            end = self.last_index if end is None else end
            if start > end:
                if start == self.last_index + 1:
                    return []
                raise KuduNotFound(f"empty log range [{start}, {end}]")
            if start < self.first_index or end > self.last_index:
                raise KuduNotFound(f"log range [{start}, {end}] not in [{self.first_index}, {self.last_index}]")
            out: list[LogEntry] = []
            cache: tuple[int, int, list[Any]] | None = None
            for index in range(start, end + 1):
                i = index - self._pos.first
                seqno, offset, slot = self._pos.seg[i], self._pos.offset[i], self._pos.slot[i]
                if cache is None or cache[0] != seqno or cache[1] != offset:
                    cache = (seqno, offset, self._read_batch(seqno, offset))
                e = cache[2][slot]
                out.append(LogEntry(int(e[0]), int(e[1]), e[2], e[3]))
            return out

    def read_limited(self, start: int, end: int, max_bytes: int, min_entries: int = 1) -> list[LogEntry]:
        """Entries from ``start`` up to ``end`` inclusive: at least ``min_entries``, then more while their
        data fits in ``max_bytes``; what a lagging peer is sent next. Blocking: reads segment files."""
        with self._lock:
            if start < self.first_index or start > self.last_index:
                raise KuduNotFound(f"log index {start} not in [{self.first_index}, {self.last_index}]")
            end = min(end, self.last_index)
            out: list[LogEntry] = []
            size = 0
            cache: tuple[int, int, list[Any]] | None = None
            pos = self._pos
            for index in range(start, end + 1):
                i = index - pos.first
                seqno, offset = pos.seg[i], pos.offset[i]
                if cache is None or cache[0] != seqno or cache[1] != offset:
                    cache = (seqno, offset, self._read_batch(seqno, offset))
                e = cache[2][pos.slot[i]]
                size += len(e[3]) + _ENTRY_OVERHEAD
                if len(out) >= min_entries and size > max_bytes:
                    break
                out.append(LogEntry(int(e[0]), int(e[1]), e[2], e[3]))
            return out

    def _read_batch(self, seqno: int, offset: int) -> list[Any]:
        fd = self._read_fds.get(seqno)
        if fd is None:
            seg = next(s for s in self._segments if s.seqno == seqno)
            fd = self._read_fds[seqno] = os.open(seg.path, os.O_RDONLY)
        head = os.pread(fd, _FRAME.size, offset)
        word, crc, _ = _FRAME.unpack(head)
        length = word & _LENGTH_MASK
        payload = os.pread(fd, length, offset + _FRAME.size)
        if len(payload) != length or crc32c.crc32c(payload) != crc:
            raise KuduCorruption(f"WAL segment {seqno} offset {offset}: checksum mismatch on read")
        return _decode_batch(word >> _CODEC_SHIFT, payload, f"WAL segment {seqno} offset {offset}")

    # --- garbage collection ---------------------------------------------------------------------------

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    def segment_info(self) -> list[dict[str, int]]:
        return [
            {"seqno": s.seqno, "bytes": s.size, "first_index": s.first_index, "last_index": s.last_index}
            for s in self._segments
        ]

    def gc(self, retain_from_index: int, min_segments: int = 1) -> int:
        """Delete whole segments holding only entries below ``retain_from_index``; returns how many.

        The newest segment is never deleted, nor the newest ``min_segments``.
        """
        removed = 0
        with self._lock:
            while len(self._segments) > max(1, min_segments):
                seg = self._segments[0]
                if seg.last_index and seg.last_index >= retain_from_index:
                    break
                fd = self._read_fds.pop(seg.seqno, None)
                if fd is not None:
                    os.close(fd)
                seg.path.unlink()
                self._segments.pop(0)
                if seg.last_index:
                    self._pos.drop_before(seg.last_index + 1)
                removed += 1
        if removed:
            fsync_dir(self.dir)
        return removed

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self.sync()
                self._fh.close()
                self._fh = None
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()


_CODEC_NAMES = {cid: name for name, (cid, _) in WAL_CODECS.items()}


def wal_segment_paths(directory: str | os.PathLike[str]) -> list[Path]:
    """A WAL directory's segment files, oldest first (what ``Log.open`` reads)."""
    d = Path(directory)
    return sorted(p for p in d.iterdir() if p.name.startswith("wal-") and not p.name.endswith(".tmp"))


@dataclass(frozen=True)
class SegmentFrame:
    """One frame of a segment as stored: where it starts, its codec, its size on disk and its entries."""

    offset: int
    codec: str
    stored_bytes: int
    entries: list[LogEntry]


class SegmentReader:
    """Reads one WAL segment file on its own, for the offline tools (``kudu wal dump``, ``fs check``):
    header, then each frame with its checksums verified, in file order (entries a later frame truncates
    are still shown: the file is append-only, truncation is logical).

    Damage is KuduCorruption naming the file and the frame's offset, except at the end of the newest
    segment (``is_last``), where a frame no valid frame follows is a torn write that recovery cuts off:
    iteration stops there and :attr:`torn_tail` says where and why. The whole file is read into memory:
    a segment is at most ``--log-segment-size-mb`` plus one frame."""

    def __init__(self, path: str | os.PathLike[str], *, is_last: bool = True) -> None:
        self.path = Path(path)
        self.is_last = is_last
        try:
            self._data = self.path.read_bytes()
        except OSError as e:
            raise KuduNotFound(f"cannot read WAL segment {self.path}: {e.strerror or e}") from e
        self.size = len(self._data)
        if self.size < _HEADER.size:
            raise KuduCorruption(
                f"WAL segment {self.path} is corrupt at offset 0: {self.size} bytes, too short for its "
                f"{_HEADER.size}-byte header"
            )
        magic, self.seqno = _HEADER.unpack_from(self._data, 0)
        if magic != SEGMENT_MAGIC:
            raise KuduCorruption(f"WAL segment {self.path} is corrupt at offset 0: bad magic {magic!r}")
        if self.path.name.startswith("wal-") and self.path.name[4:].isdigit() and int(self.path.name[4:]) != self.seqno:
            raise KuduCorruption(
                f"WAL segment {self.path} is corrupt at offset 0: its header says segment {self.seqno}"
            )
        self.torn_tail: tuple[int, str] | None = None

    @property
    def header(self) -> dict[str, Any]:
        return {"magic": SEGMENT_MAGIC.decode(), "seqno": self.seqno, "header_bytes": _HEADER.size}

    def frames(self) -> Iterator[SegmentFrame]:
        data, off = self._data, _HEADER.size
        while off < len(data):
            problem = Log._frame_problem(data, off)
            if problem is not None:
                if self.is_last and Log._is_tail(data, off):
                    self.torn_tail = (off, problem)
                    return
                raise KuduCorruption(f"WAL segment {self.path} is corrupt at offset {off}: {problem}")
            word = _FRAME.unpack_from(data, off)[0]
            length, codec_id = word & _LENGTH_MASK, word >> _CODEC_SHIFT
            payload = data[off + _FRAME.size : off + _FRAME.size + length]
            batch = _decode_batch(codec_id, payload, f"WAL segment {self.path} offset {off}")
            try:
                if not isinstance(batch, list):
                    raise TypeError(f"a frame holds a list of entries, not {type(batch).__name__}")
                entries = [LogEntry(int(e[0]), int(e[1]), e[2], bytes(e[3])) for e in batch]
            except (TypeError, ValueError, IndexError, KeyError) as e:
                raise KuduCorruption(f"WAL segment {self.path} is corrupt at offset {off}: malformed entry: {e}") from e
            yield SegmentFrame(off, _CODEC_NAMES.get(codec_id, str(codec_id)), _FRAME.size + length, entries)
            off += _FRAME.size + length


def _decode_batch(codec_id: int, payload: bytes, where: str) -> list[Any]:
    """A frame's entries from its stored payload; any damage the CRC missed is CORRUPTION too."""
    codec = _codec_for_id(codec_id)
    if codec is not None:
        if len(payload) < _RAW_SIZE.size:
            raise KuduCorruption(f"{where}: compressed batch of {len(payload)} bytes lacks its length")
        (raw_size,) = _RAW_SIZE.unpack_from(payload)
        if raw_size > MAX_FRAME_BYTES:
            raise KuduCorruption(f"{where}: compressed batch claims {raw_size} bytes, over {MAX_FRAME_BYTES}")
        try:
            payload = codec.decompress(memoryview(payload)[_RAW_SIZE.size :], decompressed_size=raw_size, asbytes=True)
        except (OSError, ValueError, pa.ArrowException) as e:
            raise KuduCorruption(f"{where}: undecompressable batch ({codec.name}): {e}") from e
        if len(payload) != raw_size:
            raise KuduCorruption(f"{where}: batch decompressed to {len(payload)} bytes, not {raw_size}")
    try:
        batch: list[Any] = msgpack.unpackb(payload, raw=False, use_list=True)
    except (ValueError, msgpack.ExtraData) as e:
        raise KuduCorruption(f"{where}: undecodable batch: {e}") from e
    return batch


# Told the outcome of an append when its write completes: None once durable, else the error.
DurableCallback = Callable[[BaseException | None], None]


class LogWriter:
    """Asyncio front of a ``Log``: concurrent appends share one write and one fsync (group commit).

    ``await append(entries)`` returns once those entries are durable. Appends are written in call
    order. At most ``max_pending_bytes`` may wait; beyond that callers wait for room (backpressure).

    No task of its own: an append made while no write runs starts one in the executor at once, and the
    write's completion (one wake-up of the loop) settles its appends and starts the next write with
    what queued meanwhile. Each loop iteration between an append and its fsync, and between the fsync
    and the Raft driver hearing of it, is latency on every commit (a follower's is on the leader's
    critical path), so ``submit`` also takes a callback run right at completion.
    """

    def __init__(self, wal: Log, executor: Executor | None = None, max_pending_bytes: int = 64 * 1024 * 1024) -> None:
        self.wal = wal
        self._executor = executor
        self._loop = asyncio.get_running_loop()
        self._pending: list[tuple[Sequence[LogEntry], asyncio.Future[None], DurableCallback | None]] = []
        self._pending_bytes = 0
        self._max_pending_bytes = max_pending_bytes
        self._room: list[asyncio.Future[None]] = []  # appenders waiting for pending bytes to drain
        self._writing = False
        self._idle: asyncio.Future[None] | None = None  # close() waiting for the last write
        self._closed = False
        self._failed: BaseException | None = None
        self._own_executor: ThreadPoolExecutor | None = None
        self.syncs = 0

    async def append(self, entries: Sequence[LogEntry]) -> None:
        """Append and wait until durable, waiting first for room if too much is pending."""
        size = sum(len(e.data) + 32 for e in entries)
        while self._pending_bytes and self._pending_bytes + size > self._max_pending_bytes:
            room = self._loop.create_future()
            self._room.append(room)
            await room
        await self.submit(entries)

    def submit(self, entries: Sequence[LogEntry], on_durable: DurableCallback | None = None) -> asyncio.Future[None]:
        """Queue an append now, in call order; the future resolves once it is durable.

        ``on_durable(error)`` (None once durable) runs at completion, before the future's callbacks. For
        a caller (the Raft driver) that must keep its appends in order and bounds its own input.
        """
        if self._failed is not None:
            raise KuduIllegalState(f"WAL {self.wal.dir} failed: {self._failed}")
        if self._closed:
            raise KuduAborted(f"WAL {self.wal.dir} is closed")
        fut: asyncio.Future[None] = self._loop.create_future()
        self._pending.append((entries, fut, on_durable))
        self._pending_bytes += sum(len(e.data) + 32 for e in entries)
        if not self._writing:
            self._start_write()
        return fut

    def _start_write(self) -> None:
        batch, self._pending = self._pending, []
        self._pending_bytes = 0
        self._writing = True
        loop = self._loop
        if self._executor is None:
            self._executor = self._own_executor = ThreadPoolExecutor(1, thread_name_prefix="wal")
        try:
            work = self._executor.submit(self._write_all, [e for e, _, _ in batch])
        except RuntimeError as e:  # the executor is shut down: the node is stopping
            self._written(batch, e)
            return

        def done(w: Future[None]) -> None:  # in the worker: one wake-up of the loop, straight to _written
            error = KuduAborted("the WAL write was cancelled") if w.cancelled() else w.exception()
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
                loop.call_soon_threadsafe(self._written, batch, error)

        work.add_done_callback(done)

    def _written(
        self,
        batch: list[tuple[Sequence[LogEntry], asyncio.Future[None], DurableCallback | None]],
        error: BaseException | None,
    ) -> None:
        self._writing = False
        if error is None:
            self.syncs += 1
            for _, fut, cb in batch:
                self._tell(cb, None)
                if not fut.done():
                    fut.set_result(None)
        else:  # an I/O failure fails every waiter and the writer for good
            log.error("WAL write failed: %s", error, extra={"wal": str(self.wal.dir)})
            self._failed = error
            failed, self._pending = [*batch, *self._pending], []
            self._pending_bytes = 0
            for _, fut, cb in failed:
                exc = KuduIllegalState(f"WAL write failed: {error}")
                self._tell(cb, exc)
                if not fut.done():
                    fut.set_exception(exc)
        room, self._room = self._room, []
        for r in room:
            if not r.done():
                r.set_result(None)
        if self._pending and self._failed is None:
            self._start_write()
        elif self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    def _tell(self, cb: DurableCallback | None, error: BaseException | None) -> None:
        """A caller's callback failing must not leave the appends after it unsettled and the writer idle."""
        if cb is None:
            return
        try:
            cb(error)
        except Exception:
            log.exception("a WAL append's completion callback failed", extra={"wal": str(self.wal.dir)})

    def _write_all(self, batches: Iterable[Sequence[LogEntry]]) -> None:
        for entries in batches:
            self.wal.append(entries)
        self.wal.sync()

    async def close(self) -> None:
        """Finish pending appends, then close the log."""
        self._closed = True
        if self._writing:
            self._idle = self._loop.create_future()
            await self._idle
        await self._loop.run_in_executor(self._executor, self.wal.close)
        if self._own_executor is not None:
            self._own_executor.shutdown(wait=False)
