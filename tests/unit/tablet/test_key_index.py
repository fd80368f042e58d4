"""The columnar key index of a MemRowSet and the sorted-key searches rowsets share (key_arrays)."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest

from kudu_async.tablet import key_arrays
from kudu_async.tablet.key_arrays import KeyBatch, KeyIndex, SortedKeys, probe_sorted


def _keys(rng: random.Random, n: int, width: int | None, alphabet: bytes = b"\x00\x01\x7f\x80\xff") -> list[bytes]:
    """Distinct keys: one width, or 0..6 bytes (with keys equal up to trailing NUL bytes)."""
    out: dict[bytes, None] = {}
    while len(out) < n:
        w = rng.randrange(0, 7) if width is None else width
        out[bytes(rng.choice(alphabet) for _ in range(w))] = None
    return list(out)


def _batch(keys: Sequence[bytes | None]) -> KeyBatch:
    """A batch of keys as a write would carry them (None: a row without a key)."""
    return KeyBatch(list(keys))


@pytest.mark.parametrize("sorted_probes", [False, True])
@pytest.mark.parametrize("width", [None, 1, 2, 3, 4, 8, 12])
def test_key_index_finds_what_a_dict_finds(
    width: int | None, sorted_probes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys added in batches of varied sizes (runs merged along the way) are found by batch and by
    single lookups exactly as a dict finds them, absent keys too, and ``sorted`` gives every key once
    in byte order with its row number. Again with every batch probe made in key order (the path of
    large runs and batches)."""
    if sorted_probes:
        monkeypatch.setattr(key_arrays, "SORTED_PROBE_MIN", (0, 0))
    rng = random.Random(3 + (width or 0))
    alphabet = bytes(range(256)) if width and width >= 3 else b"\x00\x01\x7f\x80\xff"
    pool = _keys(rng, min(3000, len(alphabet) ** width) if width else 3000, width, alphabet)
    rng.shuffle(pool)
    present, absent = pool[: len(pool) * 2 // 3], pool[len(pool) * 2 // 3 :]
    idx = KeyIndex()
    ref: dict[bytes, int] = {}
    pos = 0
    while pos < len(present):
        n = rng.choice([1, 3, 17, 100, 400])
        part = present[pos : pos + n]
        rownums = np.arange(10 * pos, 10 * pos + len(part), dtype=np.int64) * 3
        idx.add(pa.array(part, pa.binary()), rownums)
        ref.update(zip(part, rownums.tolist(), strict=True))
        pos += n
        if rng.random() < 0.3:  # probe between inserts: recent and old runs alike
            probe = rng.sample(pool, min(200, len(pool)))
            got = idx.find(_batch(probe)).tolist()
            assert got == [ref.get(k, -1) for k in probe]
    assert len(idx) == len(ref)
    probes: list[bytes | None] = [*present, *absent, None]  # a row without a key (an invalid row) is never found
    got = idx.find(_batch(probes)).tolist()
    assert got == [ref.get(k, -1) if k is not None else -1 for k in probes]
    sub = np.array([0, len(probes) - 2, 5], dtype=np.int64)
    assert idx.find(_batch(probes), sub).tolist() == [got[i] for i in sub.tolist()]
    for k in rng.sample(pool, min(300, len(pool))):
        assert idx.get(k) == ref.get(k)
    run = idx.sorted()
    assert run.keys.to_pylist() == sorted(ref)
    assert run.rownums.tolist() == [ref[k] for k in sorted(ref)]
    assert idx.sorted() is run
    assert idx.find(_batch(probes)).tolist() == got  # the same answers from the one merged run


def test_key_index_runs_stay_few_and_ordered_inserts_concatenate() -> None:
    """Many small inserts leave O(log n) runs beyond the separate ones; keys that arrive in order need
    no sort to merge."""
    idx = KeyIndex()
    for i in range(0, 20_000, 10):
        keys = [(k + 2**63).to_bytes(8, "big") for k in range(i, i + 10)]
        idx.add(pa.array(keys, pa.binary()), np.arange(i, i + 10, dtype=np.int64))
        assert len(idx._runs) <= key_arrays.SEPARATE_RUNS + 2 * (i // 10 + 1).bit_length()
    assert idx.get((12_345 + 2**63).to_bytes(8, "big")) == 12_345
    assert idx.sorted().rownums.tolist() == list(range(20_000))


def test_key_index_keeps_separate_ranges_apart_and_merges_overlapping_ones() -> None:
    """Two writers of their own key ranges, interleaved: their runs are not merged (no key copied)
    while there are few, and a batch probes only the runs its keys fall in; overlapping runs merge."""

    def enc(vals: range | list[int]) -> pa.Array:
        return pa.array([(v + 2**63).to_bytes(8, "big") for v in vals], pa.binary())

    idx = KeyIndex()
    for c in range(4):
        for base in (0, 1_000_000):
            lo = base + c * 1000
            idx.add(enc(range(lo, lo + 1000)), np.arange(lo, lo + 1000, dtype=np.int64))
    assert len(idx._runs) == 8
    many = list(range(10, 4000, 100))  # more keys than SCALAR_PROBES: the vectorised path, run by run
    probe = [5, 1_000_005, 3_999, 1_003_999, 4_000, 2_000_000, *many]  # spans every run; 4,000 and 2M absent
    expect = [5, 1_000_005, 3_999, 1_003_999, -1, -1, *many]
    assert len(probe) > key_arrays.SCALAR_PROBES
    assert idx.find(_batch(enc(probe).to_pylist())).tolist() == expect
    few = np.array([0, 4, 2], dtype=np.int64)  # a few rows: searched key by key, the same answers
    assert idx.find(_batch(enc(probe).to_pylist()), few).tolist() == [expect[i] for i in few.tolist()]
    idx.add(enc([500_000]), np.array([7], dtype=np.int64))  # between the writers' ranges: kept apart
    assert len(idx._runs) == 9
    one = idx.sorted()
    assert len(idx._runs) == 1 and one.rownums[:3].tolist() == [0, 1, 2] and one.rownums[4000] == 7
    overlapping = KeyIndex()
    overlapping.add(enc(range(0, 2000, 2)), np.arange(1000, dtype=np.int64))
    overlapping.add(enc(range(1, 2000, 2)), np.arange(1000, 2000, dtype=np.int64))
    assert len(overlapping._runs) == 1
    assert overlapping.sorted().rownums[:4].tolist() == [0, 1000, 1, 1001]


def test_sorted_keys_search_bisect_and_find_all_forms() -> None:
    """SortedKeys answers alike through every numpy form (integer, S<width>, padded with lengths) and
    the Python fallback for keys whose padding would be too big."""
    rng = random.Random(5)
    cases = {
        "int": sorted(_keys(rng, 500, 8, bytes(range(256)))),
        "fixed": sorted(_keys(rng, 500, 5)),
        "varied": sorted(_keys(rng, 500, None)),
        "too_big": sorted([*_keys(rng, 300, 2, bytes(range(256))), b"\x01" * 100_000]),  # one huge key: no padded form
    }
    for (name, keys), numeric in itertools.product(cases.items(), (False, True)):
        sk = SortedKeys(pa.array(keys, pa.binary()), numeric=numeric)
        probes = [*rng.sample(keys, 50), b"", b"\x00", b"\x00" * 3, b"\xff" * 9, b"\x01\x00", b"\x7f"]
        for p in probes:
            expect = keys.index(p) if p in keys else None
            assert sk.search(p) == expect, (name, p)
            lo = sum(k < p for k in keys)
            assert sk.bisect(p) == lo and sk.bisect(p, right=True) == lo + (p in keys), (name, p)
        got = sk.find(_batch(probes), np.arange(len(probes), dtype=np.int64)).tolist()
        assert got == [keys.index(p) if p in keys else -1 for p in probes], name
        assert (sk._form is False) == (name == "too_big")


def test_key_index_with_a_few_very_long_keys_uses_its_dict_fallback() -> None:
    """Keys whose padding would be too big (one 100 kB key among short ones) are still found by batch,
    through the run's dict, and absent ones are not."""
    rng = random.Random(9)
    keys = [*_keys(rng, 400, 3, bytes(range(256))), b"\x02" * 100_000]
    absent = [b"\x02" * 99_999, b"zz", b""]
    idx = KeyIndex()
    idx.add(pa.array(keys, pa.binary()), np.arange(len(keys), dtype=np.int64) + 5)
    probe = [*keys[::7], *absent, keys[-1]]
    assert idx.find(_batch(probe)).tolist() == [keys.index(k) + 5 if k in keys else -1 for k in probe]
    assert idx.sorted().sorted_keys._by_key is not None  # the fallback was taken


@pytest.mark.parametrize("dtype", ["u8", "S5"])
def test_probing_in_key_order_answers_as_searchsorted(dtype: str) -> None:
    """Large arrays and many probes (the sorted path), ties among the probes and with the array, probes
    below, between and above every key: the same positions as numpy's searchsorted."""
    rng = np.random.default_rng(7)
    if dtype == "u8":
        values = np.sort(rng.integers(0, 1 << 20, 50_000).astype(np.uint64))
        q = np.concatenate(
            [
                rng.integers(0, 1 << 20, 3_000).astype(np.uint64),
                values[::97],
                values[:5],
                np.array([0, (1 << 20) + 5], dtype=np.uint64),
            ]
        )
    else:
        values = np.sort(rng.integers(0, 256, (50_000, 5), dtype=np.uint8).view("S5").reshape(-1))
        q = np.concatenate(
            [
                rng.integers(0, 256, (3_000, 5), dtype=np.uint8).view("S5").reshape(-1),
                values[::97],
                values[:5],
                np.array([b"", b"\xff" * 5], dtype="S5"),
            ]
        )
    rng.shuffle(q)
    assert len(values) >= key_arrays.SORTED_PROBE_MIN[0] and len(q) >= key_arrays.SORTED_PROBE_MIN[1]
    assert probe_sorted(values, q).tolist() == np.searchsorted(values, q).tolist()
    assert probe_sorted(values, q[:10]).tolist() == np.searchsorted(values, q[:10]).tolist()


def test_packed_keys_read_bisect_and_view_as_integers_like_the_list_they_pack() -> None:
    rng = random.Random(5)
    varying = sorted({bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))) for _ in range(300)})
    packed = key_arrays.PackedKeys(varying)
    assert len(packed) == len(varying) and list(packed) == varying and packed[-1] == varying[-1]
    assert packed[3:7] == varying[3:7]
    for probe in [b"", b"\x00", b"\xff" * 13, *rng.sample(varying, 20), *(k + b"\x00" for k in varying[:20])]:
        assert bisect.bisect_right(packed, probe) == bisect.bisect_right(varying, probe)
        assert bisect.bisect_left(packed, probe) == bisect.bisect_left(varying, probe)
    assert packed.ints(8) is None and packed.ints(3) is None
    with pytest.raises(IndexError):
        packed[len(varying)]
    ints = [(i * 7919).to_bytes(8, "big") for i in range(100)]
    p8 = key_arrays.PackedKeys(ints)
    view = p8.ints(8)
    assert view is not None and view.tolist() == [i * 7919 for i in range(100)]
    assert p8.nbytes() == 100 * 8 + 101 * 8 + view.nbytes
    assert len(key_arrays.PackedKeys([])) == 0


@pytest.mark.parametrize("width", [1, 2, 4, 8, 5])
def test_rows_in_range_of_integer_keys_matches_bisecting_their_bytes(width: int) -> None:
    rng = random.Random(width)
    top = 256**width
    keys = [rng.randrange(top).to_bytes(width, "big") for _ in range(500)]
    keys += [keys[3], keys[7], (0).to_bytes(width, "big"), (top - 1).to_bytes(width, "big")]  # duplicates, ends
    kb = KeyBatch([*keys])
    by_bytes = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    ends = [(0).to_bytes(width, "big"), (top - 1).to_bytes(width, "big")]
    probes = ends + rng.sample(keys, 30) + [b"\x00" * (width + 1), b"\x7f"]
    for lo in probes:
        for hi in rng.sample(probes, 8):
            want = [i for i in by_bytes if lo <= keys[i] <= hi]
            assert kb.rows_in_range(lo, hi).tolist() == want, (lo, hi)
