"""Encoded primary keys held as Arrow ``binary`` arrays: numpy views of them, and their sort order.

Keys compare as bytes. When every key of an array has one width (keys of integer and timestamp
columns), numpy views of the data buffer compare the same way at C speed: ``S<width>`` values, or
big-endian unsigned integers for widths of 1, 2, 4 and 8 bytes (the common single-integer key),
whose stable sort is also adaptive: keys that arrive mostly in order (a bulk load, a MemRowSet's
sorted keys plus a few new ones) sort in close to linear time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["binary_layout", "fixed_width_view", "key_bytes", "padded_keys", "sort_order"]

_INT_WIDTHS = (1, 2, 4, 8)


def fixed_width_view(keys: pa.Array) -> tuple[np.ndarray | None, int]:
    """A numpy ``S<width>`` view of the key column when every key has one width (int keys, ...).

    numpy compares ``S`` values with trailing NUL bytes stripped, which keeps the order of equal-width
    byte strings (NUL is the smallest byte), so ``searchsorted`` is a valid C-speed binary search.
    """
    n = len(keys)
    if n == 0 or keys.offset != 0 or keys.null_count:
        return None, 0
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1)
    widths = np.diff(offsets)
    width = int(widths[0])
    if width == 0 or not (widths == width).all():
        return None, 0
    data = keys.buffers()[2]
    return np.frombuffer(data, dtype=f"S{width}", count=n, offset=int(offsets[0])), width


def binary_layout(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64, n + 1 of them; data bytes as uint8) of a ``binary`` array, zero-copy where
    Arrow allows."""
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data


def key_bytes(arr: pa.Array) -> int:
    """Total bytes of the keys in a ``binary`` array (its offsets' span)."""
    n = len(arr)
    if n == 0:
        return 0
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    return int(offsets[-1]) - int(offsets[0])


def padded_keys(offsets: np.ndarray, data: np.ndarray, width: int) -> np.ndarray:
    """Keys as a numpy ``S<width>`` array, NUL-padded (longer keys truncated), built without per-key
    Python. Padding keeps the order of the keys up to ties between keys that differ only by trailing
    NUL bytes; callers compare lengths to tell those apart."""
    n = len(offsets) - 1
    lens = np.minimum(np.diff(offsets), width)
    out = np.zeros((n, max(1, width)), dtype=np.uint8)
    total = int(lens.sum())
    if total:
        row = np.repeat(np.arange(n), lens)
        col = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        out[row, col] = data[np.repeat(offsets[:-1], lens) + col]
    return out.view(f"S{max(1, width)}").reshape(n)


def sort_order(keys: pa.Array) -> np.ndarray:
    """Indices (int64) that put the non-null ``keys`` in byte order, equal keys in their given order.

    Equal-width keys sort as numpy views of the data buffer (a stable timsort: ~2x Arrow's sort of
    the same binary array in random order, and near-linear on mostly ordered input, which Arrow's is
    not); keys of varying width (strings) by Arrow's sort. A concatenation of slices has a non-zero
    data offset but still one width, so the view starts at the first key's offset.
    """
    n = len(keys)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    if not keys.type.equals(pa.binary()) or keys.null_count:
        return pc.sort_indices(keys).to_numpy().astype(np.int64, copy=False)
    if keys.offset != 0:
        keys = pa.concat_arrays([keys])  # rebased to offset 0 for the view
    view, width = fixed_width_view(keys)
    if view is None:
        return pc.sort_indices(keys).to_numpy().astype(np.int64, copy=False)
    if width in _INT_WIDTHS:
        values = view.view(f">u{width}").astype(f"u{width}")
        return np.argsort(values, kind="stable").astype(np.int64, copy=False)
    return np.argsort(view, kind="stable").astype(np.int64, copy=False)
