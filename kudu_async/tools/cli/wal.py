"""``kudu wal dump <path>``: one WAL segment file, its header, entries and a summary, checksums verified.

Kudu's flags: ``-print_entries`` (``decoded``/true: entries with their operations; ``id``: one line per
entry; ``pb``: each entry's stored fields, data truncated; false: none), ``-print_meta`` (the header and a
footer-like summary; a kudu_async segment has no footer, so the summary is counted while reading) and
``-truncate_data``. A damaged frame is CORRUPTION naming the file and offset (exit 1); a torn write at the
end is reported and is not an error (a node cuts it off when it starts).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import msgpack

from kudu_async.common.errors import KuduBadStatus
from kudu_async.common.row_conversion import OpType
from kudu_async.consensus.log import LogEntry, SegmentReader
from kudu_async.consensus.raft_messages import Config, EntryKind, config_addresses
from kudu_async.tools.cli.framework import Context, Result, UsageError, flag, group, verb
from kudu_async.tserver.wire import AlterEntry, WriteEntry, WriteHeader, decode_entry, decode_entry_header

group("wal", help="Operate on WAL (write-ahead log) files")

PRINT_MODES = {
    "false": "none",
    "0": "none",
    "no": "none",
    "true": "decoded",
    "1": "decoded",
    "yes": "decoded",
    "decoded": "decoded",
    "pb": "pb",
    "id": "id",
}


def add_print_flags(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "print_entries",
        default="decoded",
        help="how to print entries: false|0|no (not at all), true|1|yes|decoded (with their operations), "
        "pb (their stored fields), id (one line each) [decoded]",
    )
    flag(p, "print_meta", type=bool, default=True, help="print the header and the summary [true]")
    flag(p, "truncate_data", type=int, default=100, help="cut data fields to this many bytes; 0: never [100]")


def print_mode(a: argparse.Namespace) -> str:
    mode = PRINT_MODES.get(str(a.print_entries).lower())
    if mode is None:
        raise UsageError(f"-print_entries: unknown value {a.print_entries!r} (false, true, decoded, pb or id)")
    if a.truncate_data < 0:
        raise UsageError("-truncate_data must be >= 0")
    return mode


def _cut(value: Any, limit: int) -> str:
    text = value.hex() if isinstance(value, bytes | bytearray | memoryview) else repr(value)
    return text if limit <= 0 or len(text) <= limit else text[:limit] + f"...<{len(text) - limit} more>"


def _write_lines(w: WriteEntry, limit: int) -> Iterator[str]:
    if w.request_id is not None:
        yield f"\tRequestId: {w.request_id.client_id} seq {w.request_id.seq_no}"
    yield f"\tSchema version: {w.schema_version}"
    names = w.op.rows.schema.names
    columns = [c.to_pylist() for c in w.op.rows.columns]
    for i, op in enumerate(w.op.op_types):
        cells = ", ".join(f"{n}={_cut(col[i], limit)}" for n, col in zip(names, columns, strict=True))
        yield f"\top {i}: {OpType(int(op)).name} ({cells})"


def describe_entry(e: LogEntry, mode: str, limit: int) -> Iterator[str]:
    """An entry's lines: ``term.index[@timestamp]\\tREPLICATE <OP>``, then its decoded operations."""
    if mode == "pb":
        yield f"Entry:\n\tterm: {e.term}\n\tindex: {e.index}\n\tkind: {e.kind}\n\tdata: {_cut(bytes(e.data), limit)}"
        return
    decoded: WriteEntry | WriteHeader | AlterEntry | None = None
    detail: list[str] = []
    if e.kind == EntryKind.NOOP:
        head = f"{e.term}.{e.index}\tREPLICATE NO_OP"
    elif e.kind == EntryKind.CONFIG:
        head = f"{e.term}.{e.index}\tREPLICATE CHANGE_CONFIG_OP"
        try:
            cfg = Config.decode(e.data)
            addrs = config_addresses(e.data)
            voters = " ".join(f"{u}({addrs.get(u, '?')})" for u in sorted(cfg.voters))
            detail.append(f"\tvoters: {voters}")
            if cfg.learners:
                detail.append(f"\tnon-voters: {' '.join(sorted(cfg.learners))}")
        except (KuduBadStatus, ValueError, msgpack.ExtraData) as err:
            detail.append(f"\tundecodable config: {err}")
    else:
        try:  # rows are decoded only to be printed
            decoded = decode_entry(e.data) if mode == "decoded" else decode_entry_header(e.data)
        except (KuduBadStatus, ValueError, TypeError, msgpack.ExtraData):
            decoded = None  # not a tablet's operation: a master's catalog entry, shown as stored
        if isinstance(decoded, WriteEntry | WriteHeader):
            head = f"{e.term}.{e.index}@{decoded.timestamp}\tREPLICATE WRITE_OP"
            if isinstance(decoded, WriteEntry):
                detail.extend(_write_lines(decoded, limit))
        elif isinstance(decoded, AlterEntry):
            head = f"{e.term}.{e.index}\tREPLICATE ALTER_SCHEMA_OP"
            detail.append(f"\tschema version {decoded.version}: {_cut(decoded.schema, limit)}")
        else:
            head = f"{e.term}.{e.index}\tREPLICATE OP ({len(e.data)} bytes)"
            try:
                detail.append(f"\t{_cut(msgpack.unpackb(e.data, raw=False), limit)}")
            except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
                detail.append(f"\t{_cut(bytes(e.data), limit)}")
    yield head
    if mode == "decoded":
        yield from detail


def dump_segment(seg: SegmentReader, mode: str, print_meta: bool, limit: int) -> Iterable[str]:
    """The lines of ``kudu wal dump``; raises KuduCorruption (after the lines before the damage)."""
    if print_meta:
        yield f"Header:\n\tpath: {seg.path}\n\tmagic: {seg.header['magic']}\n\tsequence number: {seg.seqno}"
    frames = entries = 0
    first: int | None = None
    last: int | None = None
    for frame in seg.frames():
        frames += 1
        for e in frame.entries:
            entries += 1
            first = e.index if first is None else first
            last = e.index
            if mode != "none":
                yield from describe_entry(e, mode, limit)
    if print_meta:
        yield (
            f"Footer:\n\tframes: {frames}\n\tentries: {entries}\n\tfirst index: {first}\n\tlast index: {last}"
            f"\n\tbytes: {seg.size}"
        )
    if seg.torn_tail is not None:
        off, why = seg.torn_tail
        yield (
            f"Torn tail: {seg.size - off} bytes from offset {off} ({why}): a write cut short by a crash, "
            "which the node cuts off when it starts"
        )


def _dump_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="path to a WAL segment file (<data-dir>/consensus/<tablet_id>/wal/wal-NNNNNNNNN)")
    add_print_flags(p)


@verb("wal", "dump", help="Dump a WAL (write-ahead log) file", args=_dump_args, masters=False)
async def wal_dump(ctx: Context, a: argparse.Namespace) -> Result:
    mode = print_mode(a)
    # Printed as read (a segment's entries decoded can be many): on damage, what came before it is out and
    # the CORRUPTION error follows with exit status 1.
    await asyncio.to_thread(print_lines, dump_segment(SegmentReader(a.path), mode, a.print_meta, a.truncate_data))
    return Result(text="")


def print_lines(lines: Iterable[str]) -> None:
    for line in lines:
        print(line, flush=False)
    sys.stdout.flush()
