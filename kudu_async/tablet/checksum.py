"""The checksum of a tablet's rows at a snapshot, the same on every replica and platform (ksck's
checksum scan)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from kudu_async.tablet.components import TabletComponents
from kudu_async.tablet.read_path import READ_AT_SNAPSHOT, ReadPath, ScanSpec


def checksum(c: TabletComponents, reads: ReadPath, snapshot_ts: int | None = None) -> dict[str, Any]:
    """Rows and a 64-bit checksum of what is visible at READ_AT_SNAPSHOT ``snapshot_ts``.

    ``snapshot_ts`` None: ``clock.now()`` when no write is in flight, else just below the oldest
    one (so this never waits on a write), reported back as ``snapshot_ts``.

    Definition (the same on every replica and platform): the rows in primary-key order (an
    ordered scan); per column, in schema order, three xxh64 streams:

    - validity: one byte per row (1 set, 0 NULL);
    - values: fixed-width types as little-endian raw values with NULL as 0 (bool one byte, dates
      int64 days, timestamps int64 micros); variable-width types (string, binary, varchar, and
      decimals as their fixed-scale text) as int64 lengths, NULL as length 0;
    - bytes: the concatenated variable-width values (empty for fixed-width types).

    An array column has the three streams of its cells (validity, int64 element counts with NULL as 0,
    no bytes) and then the three streams of its elements in row order, as a column of their type.

    The result is xxh64 over, per column, its name, NUL, Arrow type, NUL and its three digests,
    then the row count (8 bytes little-endian). Streams are fed batch by batch, so memory stays
    bounded and the result never depends on how rows are split into MemRowSet, DiskRowSets,
    deltas or scan batches.
    """
    ts = snapshot_ts
    if ts is None:
        # Not the MVCC clean point: on an idle tablet that is its last write (-1 when empty), which
        # can be older than the ancient history mark and so not a valid snapshot.
        inflight = c.mvcc.min_in_flight()
        ts = c.clock.now() if inflight is None else inflight - 1
    spec = ScanSpec(read_mode=READ_AT_SNAPSHOT, snapshot_ts=ts, ordered=True, snapshot_wait_s=0.0)
    scanner = reads.scan(spec)
    info = scanner.info
    names = list(info.names)
    streams = [[xxhash.xxh64() for _ in range(6 if pa.types.is_list(f.type) else 3)] for f in info.arrow]
    rows = 0
    for batch in scanner:
        rows += batch.num_rows
        for col, hashers in zip(batch.columns, streams, strict=True):
            for h, data in zip(hashers, _canonical_streams(col), strict=True):
                h.update(data)
    total = xxhash.xxh64()
    types = [str(f.type) for f in info.arrow]
    for name, typ, hashers in zip(names, types, streams, strict=True):
        total.update(f"{name}\0{typ}\0".encode())
        for h in hashers:
            total.update(h.digest())
    total.update(rows.to_bytes(8, "little"))
    return {"rows": rows, "checksum": total.intdigest(), "snapshot_ts": ts}


def _canonical_streams(col: pa.Array) -> tuple[bytes | memoryview, ...]:
    """(validity, values-or-lengths, var-width bytes) of one column chunk, then an array column's element
    streams; see ``Tablet.checksum``."""
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False).astype(np.uint8).tobytes()
    typ = col.type
    if pa.types.is_list(typ):
        counts = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype("<i8")
        return valid, counts.tobytes(), b"", *_canonical_streams(pc.list_flatten(col))
    if pa.types.is_decimal(typ):
        col = pc.cast(col, pa.string())
        typ = col.type
    if (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
    ):
        b = pc.fill_null(pc.cast(col, pa.large_binary()), pa.scalar(b"", pa.large_binary()))
        lengths = pc.binary_length(b).to_numpy(zero_copy_only=False).astype("<i8").tobytes()
        offsets = np.frombuffer(b.buffers()[1], dtype="<i8", count=len(b) + 1, offset=b.offset * 8)
        data = b.buffers()[2]
        # A view of just this slice's bytes: batches share one big buffer, so never copy all of it.
        body = b"" if data is None else memoryview(data)[int(offsets[0]) : int(offsets[-1])]
        return valid, lengths, body
    if pa.types.is_boolean(typ):
        flags = pc.fill_null(col, False).to_numpy(zero_copy_only=False).astype(np.uint8)
        return valid, flags.tobytes(), b""
    if pa.types.is_temporal(typ):
        # Canonical integers: days for dates (Arrow has no date32 -> int64 cast), micros for timestamps.
        as_int = (col.cast(pa.int32()) if pa.types.is_date32(typ) else col).cast(pa.int64())
    else:
        as_int = col
    vals = pc.fill_null(as_int, pa.scalar(0, as_int.type)).to_numpy(zero_copy_only=False)
    vals = np.ascontiguousarray(vals, dtype=vals.dtype.newbyteorder("<"))  # a no-op on little-endian hosts
    return valid, vals.view(np.uint8).tobytes(), b""
