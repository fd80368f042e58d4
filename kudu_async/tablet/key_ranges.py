"""A tablet's key range cut into chunks of about N bytes (Kudu's SplitKeyRange), from the sparse key index
the rowsets already hold: a Parquet rowset's footer names the first and last key and the size of every
block of rows; a MemRowSet's sorted keys are sampled a block's worth of rows at a time.

The cut is an estimate, as Kudu's is: a block counts whole on the side of its first key, overlapping
rowsets are added up, deleted rows and delta files are not counted. Each chunk is ``[start, stop)`` in
encoded primary keys, the form scans take as bounds; together they cover the asked range exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kudu_async.tablet.diskrowset import DiskRowSet
from kudu_async.tablet.memrowset import MemRowSet
from kudu_async.tablet.rowset_file import BLOCK_ROWS, ParquetBase


@dataclass(frozen=True)
class KeyPiece:
    """Rows between two keys (both inclusive) and the bytes they take."""

    first: bytes
    last: bytes
    nbytes: int


@dataclass(frozen=True)
class KeyRange:
    """``[start, stop)`` in encoded primary keys (``None``: unbounded) and the bytes estimated in it."""

    start: bytes | None
    stop: bytes | None
    size_bytes: int


def rowset_pieces(d: DiskRowSet, columns: Sequence[str] | None = None) -> list[KeyPiece]:
    """The blocks of a DiskRowSet's base data; a rowset without a block index is one piece."""
    if d.num_rows() == 0:
        return []
    base = d.base
    if isinstance(base, ParquetBase):
        sizes = base.block_bytes(columns)
        return [KeyPiece(f, la, int(n)) for f, la, n in zip(base.firsts, base.lasts, sizes, strict=True)]
    return [KeyPiece(d.min_key, d.max_key, d.base_bytes())]


def memrowset_pieces(mrs: MemRowSet, block_rows: int = BLOCK_ROWS) -> list[KeyPiece]:
    """A MemRowSet's keys, ``block_rows`` at a time, its memory shared out by rows."""
    view = mrs.sorted_view()
    n = len(view)
    if n == 0:
        return []
    keys = view.keys
    per_row = mrs.memory_bytes() / n
    out: list[KeyPiece] = []
    for lo in range(0, n, block_rows):
        hi = min(lo + block_rows, n)
        out.append(KeyPiece(keys[lo].as_py(), keys[hi - 1].as_py(), max(1, int(per_row * (hi - lo)))))
    return out


def split_key_range(
    pieces: Sequence[KeyPiece], start: bytes | None, stop: bytes | None, target_bytes: int
) -> list[KeyRange]:
    """``[start, stop)`` cut where the pieces before a cut add up to at least ``target_bytes``. Cuts fall
    on a piece's first key, so no block is split; a range that holds no piece is one chunk."""
    if target_bytes <= 0:
        raise ValueError(f"target chunk size must be > 0 bytes, not {target_bytes}")
    if start is not None and stop is not None and stop and start >= stop:
        return []
    inside = [p for p in pieces if (start is None or p.last >= start) and (stop is None or not stop or p.first < stop)]
    if not inside:
        return [KeyRange(start, stop, 0)]
    inside.sort(key=lambda p: p.first)
    firsts = [p.first for p in inside]
    sizes = np.fromiter((p.nbytes for p in inside), dtype=np.int64, count=len(inside))
    out: list[KeyRange] = []
    lo, acc = start, 0
    for i in range(len(inside)):
        acc += int(sizes[i])
        if acc < target_bytes or i + 1 == len(inside):
            continue
        cut = firsts[i + 1]
        if (lo is not None and cut <= lo) or (stop is not None and stop and cut >= stop):
            continue  # overlapping pieces: this key cannot bound a chunk
        out.append(KeyRange(lo, cut, acc))
        lo, acc = cut, 0
    out.append(KeyRange(lo, stop, acc))
    return out
