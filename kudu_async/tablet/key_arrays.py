"""Encoded primary keys held as Arrow ``binary`` arrays: numpy views of them, their sort order, and
the key indexes built from them (a write batch's keys, a sorted key column, a MemRowSet's index).

Keys compare as bytes. When every key of an array has one width (keys of integer and timestamp
columns), numpy views of the data buffer compare the same way at C speed: ``S<width>`` values, or
big-endian unsigned integers for widths of 1, 2, 4 and 8 bytes (the common single-integer key),
whose stable sort is also adaptive: keys that arrive mostly in order (a bulk load, a MemRowSet's
sorted keys plus a few new ones) sort in close to linear time. Keys of varying width are searched as
NUL-padded ``S<max width>`` views plus their lengths.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kudu_async.tablet.bloom import M1, M2, M3, key_hashes, word_hash

__all__ = [
    "KeyBatch",
    "KeyIndex",
    "KeyRun",
    "KeySet",
    "PackedKeys",
    "SortedKeys",
    "binary_layout",
    "fixed_width_view",
    "key_bytes",
    "padded_keys",
    "probe_sorted",
    "sort_order",
]

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


def word_hashes(arr: pa.Array) -> np.ndarray:
    """:func:`bloom.word_hash` of every key of a ``binary`` array (uint64; null keys hash as empty),
    column-wise: the keys zero-padded to a multiple of 8 bytes, mixed one 8-byte word at a time."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets, data = binary_layout(arr)
    lens = np.diff(offsets)
    rounds = np.maximum(1, (lens + 7) // 8)
    width = 8 * int(rounds.max())
    if n * width > 8 * int(lens.sum()) + (1 << 20):  # a few long keys among short ones: per key
        return np.fromiter((word_hash(k or b"") for k in arr.to_pylist()), dtype=np.uint64, count=n)
    body = data[int(offsets[0]) : int(offsets[-1])]
    if int(lens[0]) == width and bool((lens == width).all()):  # one width, whole words: a view
        words = body.view("<u8").reshape(n, width // 8)
    else:
        padded = np.zeros((n, width), dtype=np.uint8)
        padded[np.arange(width) < lens[:, None]] = body
        words = padded.view("<u8")
    m1, m2, m3 = np.uint64(M1), np.uint64(M2), np.uint64(M3)
    with np.errstate(over="ignore"):
        h = lens.astype(np.uint64) * m1
        for j in range(width // 8):
            mixed = (h ^ words[:, j]) * m2
            mixed ^= mixed >> np.uint64(29)
            h = mixed if j == 0 else np.where(j < rounds, mixed, h)  # every key has a first word
        h ^= h >> np.uint64(30)
        h *= m2
        h ^= h >> np.uint64(27)
        h *= m3
        h ^= h >> np.uint64(31)
    return h


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
        return np.asarray(pc.sort_indices(keys).to_numpy(), dtype=np.int64)
    if keys.offset != 0:
        keys = pa.concat_arrays([keys])  # rebased to offset 0 for the view
    view, width = fixed_width_view(keys)
    if view is None:
        return np.asarray(pc.sort_indices(keys).to_numpy(), dtype=np.int64)
    if width in _INT_WIDTHS:
        values = view.view(f">u{width}").astype(f"u{width}")
        return np.argsort(values, kind="stable").astype(np.int64, copy=False)
    return np.argsort(view, kind="stable").astype(np.int64, copy=False)


class PackedKeys(Sequence[bytes]):
    """Sorted keys held packed: one ``bytes`` of their concatenation and an int64 offset per key (8
    bytes plus the key per entry, where a list holds a 33-byte object header per key as well). A
    sequence of ``bytes`` for ``bisect``; :meth:`ints` gives the big-endian integer view that
    ``searchsorted`` places a whole batch of integer keys with."""

    __slots__ = ("_data", "_ints", "_offsets")

    def __init__(self, keys: Iterable[bytes]) -> None:
        keys = list(keys)
        self._data = b"".join(keys)
        self._offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        if keys:
            np.cumsum([len(k) for k in keys], out=self._offsets[1:])
        self._ints: tuple[int, np.ndarray] | None = None  # (width, the keys as native unsigned ints)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, i: int) -> bytes: ...

    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...

    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"key {i} of {n}")
        return self._data[int(self._offsets[i]) : int(self._offsets[i + 1])]

    def __iter__(self) -> Iterator[bytes]:
        for i in range(len(self)):
            yield self[i]

    def ints(self, width: int) -> np.ndarray | None:
        """Every key as a native unsigned integer when all are ``width`` bytes (1, 2, 4 or 8), else None."""
        if self._ints is not None and self._ints[0] == width:
            return self._ints[1]
        n = len(self)
        if width not in _INT_WIDTHS or len(self._data) != n * width:
            return None
        if n and not bool((np.diff(self._offsets) == width).all()):
            return None
        vals = np.frombuffer(self._data, dtype=f">u{width}").astype(f"u{width}")
        self._ints = (width, vals)
        return vals

    def nbytes(self) -> int:
        """Bytes held (the packed keys, their offsets and an integer view if one was built)."""
        return len(self._data) + self._offsets.nbytes + (0 if self._ints is None else self._ints[1].nbytes)


SEPARATE_RUNS = 16  # runs of a KeyIndex kept unmerged while their key ranges do not meet
SCALAR_PROBES = 8  # a KeyIndex lookup of at most this many keys searches key by key
SORTED_PROBE_MIN = (32_768, 1_024)  # (sorted keys, probes) from which probing in key order pays


def probe_sorted(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.searchsorted(values, q)``, with many probes into a large array made in key order.

    numpy starts each search from the previous result while the probes ascend, so a large array is
    walked forward instead of being hit at random: for 16,667 probes (a write batch's keys) into
    250,000 / 1,000,000 sorted uint64 keys, 2.2 / 2.9 ms become 1.3 / 1.6 ms, the argsort included
    (S12 keys: 3.6 / 4.3 -> 2.4 / 3.0 ms). Below ``SORTED_PROBE_MIN`` the array stays in cache.
    """
    if len(values) < SORTED_PROBE_MIN[0] or len(q) < SORTED_PROBE_MIN[1]:
        return np.searchsorted(values, q)
    order = np.argsort(q, kind="stable")
    j = np.empty(len(q), dtype=np.intp)
    j[order] = np.searchsorted(values, q[order])
    return j


class KeyBatch:
    """The encoded keys of one write batch, in the forms the vectorised rowset probes use (each
    built on first use): key order, bloom hashes, NUL-padded fixed-width numpy views, the row locks'
    :class:`KeySet`. ``keys`` (one Python ``bytes`` per row) is made only for the paths that loop
    over keys in Python: a bulk insert of new keys never needs it."""

    def __init__(self, keys: list[bytes | None] | None = None, arr: pa.Array | None = None) -> None:
        if arr is None:
            if keys is None:
                raise ValueError("KeyBatch needs the keys as a list or an Arrow array")
            arr = pa.array(keys, pa.binary())
        elif not arr.type.equals(pa.binary()):
            arr = arr.cast(pa.binary())
        self._keys = keys
        self.n = len(arr)
        self.arr = arr
        self.valid = (
            np.ones(self.n, dtype=bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
        )
        self._offsets, self._data = binary_layout(arr)
        self.lengths = np.diff(self._offsets)
        self._order: np.ndarray | None = None
        self._sorted: list[bytes] | None = None
        self._sorted_ints: np.ndarray | None = None  # the integer keys in key order (rows_in_range)
        self._hashes: np.ndarray | None = None
        self._word_hashes: np.ndarray | None = None
        self._padded: dict[int, np.ndarray] = {}
        self._numeric: dict[int, np.ndarray] = {}
        self._bounds: tuple[bytes, bytes] | None = None
        self._key_set: KeySet | None = None
        self._int_width: int | None = -1  # -1: not computed yet

    @property
    def keys(self) -> list[bytes | None]:
        """Every row's key as ``bytes`` (None for a row without one)."""
        if self._keys is None:
            self._keys = self.arr.to_pylist()
        return self._keys

    def key(self, row: int) -> bytes | None:
        """One row's key, without making the whole list."""
        if self._keys is not None:
            return self._keys[row]
        k: bytes | None = self.arr[row].as_py()
        return k

    def int_width(self) -> int | None:
        """The width when every row has a key and all are 1, 2, 4 or 8 bytes wide (integer keys):
        then :meth:`numeric` orders them exactly as bytes."""
        if self._int_width == -1:
            w: int | None = None
            if self.n and self.valid.all():
                w = int(self.lengths[0])
                if w not in _INT_WIDTHS or not bool((self.lengths == w).all()):
                    w = None
            self._int_width = w
        return self._int_width

    def order(self) -> np.ndarray:
        """Row indices of the (non-null) keys in key order, equal keys in row order: sorted once for
        the row locks, the DiskRowSet probes and the MemRowSet's index run."""
        if self._order is None:
            if self.valid.all():
                self._order = sort_order(self.arr)
            else:
                valid_idx = np.flatnonzero(self.valid)
                self._order = valid_idx[sort_order(self.arr.take(pa.array(valid_idx)))]
        return self._order

    def rows_in_range(self, lo: bytes, hi: bytes) -> np.ndarray:
        """Row indices of the (non-null) keys with ``lo <= key <= hi``, in key order: integer keys by
        ``searchsorted`` over their sorted values, others by bisecting their sorted ``bytes``."""
        order = self.order()
        w = self.int_width()
        if w is not None and len(lo) == w and len(hi) == w:
            if self._sorted_ints is None:
                self._sorted_ints = self.numeric(w)[order]
            vals = self._sorted_ints
            a = int(np.searchsorted(vals, vals.dtype.type(int.from_bytes(lo, "big")), side="left"))
            b = int(np.searchsorted(vals, vals.dtype.type(int.from_bytes(hi, "big")), side="right"))
            return order[a : max(a, b)]
        if self._sorted is None:
            self._sorted = list(map(self.keys.__getitem__, order.tolist()))  # type: ignore[arg-type]
        a = bisect.bisect_left(self._sorted, lo)
        b = bisect.bisect_right(self._sorted, hi)
        return order[a:b]

    def hashes(self) -> np.ndarray:
        if self._hashes is None:
            if self.valid.all():
                self._hashes = key_hashes(self.keys)  # type: ignore[arg-type]
            else:
                h = np.zeros(self.n, dtype=np.uint64)
                idx = np.flatnonzero(self.valid)
                h[idx] = key_hashes(list(map(self.keys.__getitem__, idx.tolist())))  # type: ignore[arg-type]
                self._hashes = h
        return self._hashes

    def word_hashes(self) -> np.ndarray:
        """:func:`word_hashes` of every key (the hash of bloom filters written with Parquet rowsets)."""
        if self._word_hashes is None:
            self._word_hashes = word_hashes(self.arr)
        return self._word_hashes

    def padded(self, width: int) -> np.ndarray:
        """Every key NUL-padded (or truncated) to ``width`` bytes as numpy ``S<width>``."""
        out = self._padded.get(width)
        if out is None:
            if self.n and self.valid.all() and (self.lengths == width).all() and self._offsets[0] == 0:
                out = np.frombuffer(self._data, dtype=f"S{width}", count=self.n)
            else:
                out = padded_keys(self._offsets, self._data, width)
            self._padded[width] = out
        return out

    def numeric(self, width: int) -> np.ndarray:
        """Every key as a big-endian unsigned integer of ``width`` (1, 2, 4 or 8) bytes; meaningful
        only for the keys of exactly that width."""
        out = self._numeric.get(width)
        if out is None:
            out = self.padded(width).view(f">u{width}").astype(f"u{width}")
            self._numeric[width] = out
        return out

    def bounds(self) -> tuple[bytes, bytes] | None:
        """(smallest, largest) valid key, or None when there is none."""
        if self._bounds is None:
            if not self.valid.any():
                return None
            w = self.int_width()
            if w is not None:
                v = self.numeric(w)
                self._bounds = (int(v.min()).to_bytes(w, "big"), int(v.max()).to_bytes(w, "big"))
            else:
                mm = pc.min_max(self.arr)
                self._bounds = (mm["min"].as_py(), mm["max"].as_py())
        return self._bounds

    def key_set(self) -> KeySet:
        """The batch's distinct keys as row locks (see :class:`KeySet`)."""
        if self._key_set is None:
            bounds = self.bounds()
            if bounds is None:
                self._key_set = KeySet(pa.array([], pa.binary()), b"", b"", None, 0)
                return self._key_set
            w = self.int_width()
            if w is not None:
                s = self.numeric(w)[self.order()]
                count = 1 + int(np.count_nonzero(s[1:] != s[:-1]))
                self._key_set = KeySet(self.arr, bounds[0], bounds[1], s, count)
            else:
                arr = self.arr if self.valid.all() else self.arr.filter(pa.array(self.valid))
                count = pc.count_distinct(arr).as_py()
                self._key_set = KeySet(arr, bounds[0], bounds[1], None, count)
        return self._key_set


class KeySet:
    """One write's row locks: its distinct keys, tested against another write's without a Python
    object per key.

    Most writes of a tablet hold disjoint key ranges (a bulk load's batches, writers of separate
    ranges), which the bounds settle at once. Integer keys (every key 1, 2, 4 or 8 bytes) keep their
    sorted numeric values, and overlapping ranges are searched one in the other (keys of two
    different widths are never equal); any other keys are compared by Arrow's hash-based ``is_in``.
    """

    __slots__ = ("arr", "hi", "lo", "n", "sorted")

    def __init__(self, arr: pa.Array, lo: bytes, hi: bytes, sorted_values: np.ndarray | None, n: int) -> None:
        self.arr = arr  # binary, without nulls; may repeat keys
        self.lo = lo
        self.hi = hi
        self.sorted = sorted_values
        self.n = n  # distinct keys

    @staticmethod
    def of(keys: list[bytes]) -> KeySet:
        return KeyBatch(list(keys)).key_set()

    def overlaps(self, other: KeySet) -> bool:
        """Whether the two share a key."""
        if not self.n or not other.n or self.hi < other.lo or other.hi < self.lo:
            return False
        a, b = self.sorted, other.sorted
        if a is not None and b is not None:
            if a.dtype != b.dtype:
                return False
            if len(a) > len(b):
                a, b = b, a
            a = a[np.searchsorted(a, b[0]) : np.searchsorted(a, b[-1], side="right")]  # within b's range
            if not len(a):
                return False
            j = np.minimum(np.searchsorted(b, a), len(b) - 1)
            return bool((b[j] == a).any())
        small, big = (self.arr, other.arr) if len(self.arr) <= len(other.arr) else (other.arr, self.arr)
        return bool(pc.any(pc.is_in(small, value_set=big)).as_py())


class KeyView:
    """Sequence view of an Arrow binary column for ``bisect`` (one element decoded per probe)."""

    def __init__(self, arr: pa.Array) -> None:
        self._arr = arr

    def __len__(self) -> int:
        return len(self._arr)

    def __getitem__(self, i: int) -> bytes:
        key: bytes = self._arr[i].as_py()
        return key


# The numpy form of a sorted key array that searches use: (values, lengths or None, width, numeric).
_Form = tuple[np.ndarray, np.ndarray | None, int, bool]


class SortedKeys:
    """Distinct keys in byte order (a ``binary`` array) and the numpy forms that search them.

    Keys of one width get a zero-copy ``S<width>`` view at construction (a check over the offsets:
    construct it in a worker), which single-key searches use. Batches are found through a form built
    on first use: with ``numeric``, big-endian integers when every key is 1, 2, 4 or 8 bytes (a copy
    of the keys, faster to search: for short-lived indexes), else the ``S`` view; NUL-padded
    ``S<max width>`` plus lengths when widths vary, unless padding would
    take more than ~4x the keys' own memory (a few very long keys among short ones). Then a batch is
    found by a binary search in Python per key, or with ``dict_fallback`` through a dict of the keys
    built on first use (for an index probed with every key of every write, where per-key searches
    would cost far more than the dict's memory).
    """

    __slots__ = ("_by_key", "_dict_fallback", "_fixed", "_form", "_numeric", "_width", "keys")

    def __init__(self, keys: pa.Array, dict_fallback: bool = False, numeric: bool = False) -> None:
        if keys.offset != 0:
            keys = pa.concat_arrays([keys])  # numpy views start at offset 0
        self.keys: pa.Array = keys
        self._fixed, self._width = fixed_width_view(keys)
        self._form: _Form | bool | None = None  # False: no numpy form
        self._dict_fallback = dict_fallback
        self._numeric = numeric
        self._by_key: dict[bytes, int] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def _search_form(self) -> _Form | None:
        form = self._form
        if form is None:
            form = self._form = self._build_form()
        return form if isinstance(form, tuple) else None

    def _build_form(self) -> _Form | bool:
        keys = self.keys
        n = len(keys)
        if n == 0:
            return False
        view, width = self._fixed, self._width
        if view is not None:
            if self._numeric and width in _INT_WIDTHS:
                return view.view(f">u{width}").astype(f"u{width}"), None, width, True
            return view, None, width, False
        offsets, data = binary_layout(keys)
        lens = np.diff(offsets)
        width = int(lens.max())
        if width == 0 or n * width > 4 * (int(lens.sum()) + 4 * n) + (1 << 20):
            return False
        return padded_keys(offsets, data, width), lens, width, False

    def form_bytes(self) -> int:
        """Bytes of the search form built beside the keys (a copy of them as integers or padded), if any."""
        form = self._form
        if not isinstance(form, tuple):
            return 0
        # numpy's own memory (a copy, or a view of one); views of the Arrow buffer cost nothing more
        return sum(
            a.nbytes
            for a in form[:2]
            if isinstance(a, np.ndarray) and (a.base is None or isinstance(a.base, np.ndarray))
        )

    def search(self, key: bytes) -> int | None:
        """Position of ``key``, or None (cheap enough for the event loop: no form is built)."""
        if self._fixed is not None:
            if len(key) != self._width:
                return None
            j = int(self._fixed.searchsorted(key))
            return j if j < len(self._fixed) and self.keys[j].as_py() == key else None
        i = bisect.bisect_left(KeyView(self.keys), key)
        return i if i < len(self.keys) and self.keys[i].as_py() == key else None

    def bisect(self, key: bytes, right: bool = False) -> int:
        """Where ``key`` would go (after equal keys with ``right``)."""
        if self._fixed is not None and len(key) == self._width:
            return int(self._fixed.searchsorted(key, side="right" if right else "left"))
        return (bisect.bisect_right if right else bisect.bisect_left)(KeyView(self.keys), key)

    def find(self, kb: KeyBatch, rows: np.ndarray) -> np.ndarray:
        """Positions of the keys ``kb`` holds at ``rows`` (-1: absent), one ``searchsorted`` for all."""
        out = np.full(len(rows), -1, dtype=np.int64)
        n = len(self.keys)
        if not len(rows) or n == 0:
            return out
        form = self._search_form()
        if form is None and self._dict_fallback:
            if self._by_key is None:
                self._by_key = dict(zip(self.keys.to_pylist(), range(n), strict=True))
            get = self._by_key.get
            keys = kb.keys
            found = [None if keys[r] is None else get(keys[r]) for r in rows.tolist()]
            hit = np.fromiter((f is not None for f in found), dtype=bool, count=len(found))
            out[hit] = np.fromiter((f for f in found if f is not None), dtype=np.int64, count=int(hit.sum()))
            return out
        if form is None:
            for j, r in enumerate(rows.tolist()):
                k = kb.keys[r]
                p = None if k is None else self.search(k)
                if p is not None:
                    out[j] = p
            return out
        values, lens, width, numeric = form
        qlen = kb.lengths[rows]
        ok = kb.valid[rows] & ((qlen <= width) if lens is not None else (qlen == width))
        sub = np.flatnonzero(ok)
        if not len(sub):
            return out
        cand = rows[sub]
        q = (kb.numeric(width) if numeric else kb.padded(width))[cand]
        pos = probe_sorted(values, q)
        jc = np.minimum(pos, n - 1)
        eq = (pos < n) & (values[jc] == q)
        if lens is None:
            out[sub[eq]] = pos[eq]
            return out
        exact = eq & (lens[jc] == qlen[sub])
        out[sub[exact]] = pos[exact]
        for t in np.flatnonzero(eq & ~exact).tolist():  # equal up to trailing NUL bytes: search exactly
            p = self.search(kb.keys[int(cand[t])])  # type: ignore[arg-type]
            if p is not None:
                out[sub[t]] = p
        return out


class KeyRun:
    """Distinct keys in byte order with a row number each (a run of a :class:`KeyIndex`)."""

    __slots__ = ("hi", "lo", "rownums", "sorted_keys")

    def __init__(self, keys: pa.Array, rownums: np.ndarray) -> None:
        self.sorted_keys = SortedKeys(keys, dict_fallback=True, numeric=True)
        self.rownums = rownums
        self.lo: bytes = keys[0].as_py() if len(keys) else b""
        self.hi: bytes = keys[len(keys) - 1].as_py() if len(keys) else b""

    @property
    def keys(self) -> pa.Array:
        return self.sorted_keys.keys

    def __len__(self) -> int:
        return len(self.rownums)

    def bisect(self, key: bytes, right: bool = False) -> int:
        return self.sorted_keys.bisect(key, right)

    @staticmethod
    def empty() -> KeyRun:
        return KeyRun(pa.array([], pa.binary()), np.zeros(0, dtype=np.int64))

    @staticmethod
    def merged(runs: list[KeyRun]) -> KeyRun:
        """One run of all keys of ``runs`` (disjoint key sets): concatenated when their ranges follow
        each other in some order, else sorted (an adaptive sort of sorted runs for equal-width keys)."""
        runs = sorted(runs, key=lambda r: r.lo)
        keys = pa.concat_arrays([r.keys for r in runs])
        rownums = np.concatenate([r.rownums for r in runs])
        if all(a.hi < b.lo for a, b in itertools.pairwise(runs)):
            return KeyRun(keys, rownums)
        order = sort_order(keys)
        return KeyRun(keys.take(pa.array(order)), rownums[order])


class KeyIndex:
    """Encoded key -> row number without a Python object per key (a MemRowSet's index).

    Sorted runs of keys with their row numbers: each insert adds its keys as a run, and a run is
    merged into the one before it while that one is at most twice as long, so there are O(log n) runs
    and a key is merged O(log n) times. Runs whose key ranges do not meet are not merged until there
    are more than ``SEPARATE_RUNS``: a lookup skips a run outside its range for free, and inserts of
    separate ranges (a sequential load, writers of their own key ranges) then copy no key until a
    scan or flush asks for :meth:`sorted`, which merges everything into one run (near-linear: the
    sort is adaptive to the runs). A lookup probes the runs whose key range meets the batch's, each
    with the batch's keys in its range. The runs are one
    tuple replaced whole, so two readers of an index no longer written (a scan and the flush of a
    frozen MemRowSet) may merge it at once and each sees a complete index. Keys added must be new.
    """

    __slots__ = ("_n", "_runs")

    def __init__(self) -> None:
        self._runs: tuple[KeyRun, ...] = ()
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def nbytes(self) -> int:
        return sum(r.keys.nbytes + r.rownums.nbytes for r in self._runs)

    def add(self, keys: pa.Array, rownums: np.ndarray, order: np.ndarray | None = None) -> None:
        """Add new keys (a ``binary`` array without nulls, no key already here) with their row numbers;
        ``order``: their :func:`sort_order`, when the caller has it."""
        if not len(keys):
            return
        if order is None:
            order = sort_order(keys)
        rownums = np.asarray(rownums, dtype=np.int64)
        if bool((order[1:] > order[:-1]).all()):  # already in key order (a sequential load): no copy
            run = KeyRun(keys, rownums)
        else:
            run = KeyRun(keys.take(pa.array(order)), rownums[order])
        runs = [*self._runs, run]
        while (
            len(runs) >= 2
            and len(runs[-2]) <= 2 * len(runs[-1])
            and (len(runs) > SEPARATE_RUNS or not (runs[-2].hi < runs[-1].lo or runs[-1].hi < runs[-2].lo))
        ):
            b = runs.pop()
            runs.append(KeyRun.merged([runs.pop(), b]))
        self._runs = tuple(runs)
        self._n += len(keys)

    def get(self, key: bytes) -> int | None:
        for r in self._runs:
            if r.lo <= key <= r.hi:
                p = r.sorted_keys.search(key)
                if p is not None:
                    return int(r.rownums[p])
        return None

    def find(self, kb: KeyBatch, rows: np.ndarray | None = None) -> np.ndarray:
        """Row numbers of the keys ``kb`` holds at ``rows`` (default: all), -1 where absent."""
        if rows is None:
            rows = np.arange(kb.n, dtype=np.int64)
        out = np.full(len(rows), -1, dtype=np.int64)
        if len(rows) <= SCALAR_PROBES:  # a few keys: a binary search per key and run beats numpy's set-up
            for j, r in enumerate(rows.tolist()):
                k = kb.key(r)
                found = None if k is None else self.get(k)
                if found is not None:
                    out[j] = found
            return out
        bounds = kb.bounds()
        if bounds is None:
            return out
        todo = np.arange(len(rows), dtype=np.int64)
        width = kb.int_width()
        span = 0 if width is None else int.from_bytes(bounds[1], "big") - int.from_bytes(bounds[0], "big")
        for r in self._runs:
            if not len(todo):
                break
            if bounds[1] < r.lo or bounds[0] > r.hi:
                continue
            cand, rest = todo, None
            if width is not None and len(r.lo) == len(r.hi) == width:
                lo, hi = int.from_bytes(r.lo, "big"), int.from_bytes(r.hi, "big")
                narrow = 2 * (hi - lo) < span  # under half the batch's key range: probe the keys in it only
            else:
                narrow = False
            if narrow and width is not None:
                q = kb.numeric(width)[rows[todo]]
                inside = (q >= lo) & (q <= hi)
                if not inside.all():
                    cand, rest = todo[inside], todo[~inside]
                    if not len(cand):
                        continue
            p = r.sorted_keys.find(kb, rows[cand])
            hit = p >= 0
            if hit.any():
                out[cand[hit]] = r.rownums[p[hit]]
                todo = cand[~hit] if rest is None else np.concatenate([rest, cand[~hit]])
        return out

    def sorted(self) -> KeyRun:
        """Every key in one run, in key order (kept: later lookups probe one run)."""
        runs = self._runs
        if len(runs) == 1:
            return runs[0]
        if not runs:
            return KeyRun.empty()
        one = KeyRun.merged(list(runs))
        self._runs = (one,)
        return one
