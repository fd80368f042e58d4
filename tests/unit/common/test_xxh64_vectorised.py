"""The column-wise XXH64 used for hash partitioning equals the xxhash package's, value by value."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from kudu_async.common.partition import hash_encoded, xxh64_fixed_width


@pytest.mark.parametrize("width", range(32))
def test_every_short_width_and_seed_matches_the_reference(width: int) -> None:
    rng = random.Random(width)
    values = [bytes(rng.randrange(256) for _ in range(width)) for _ in range(300)]
    arr = pa.array(values, pa.binary())
    for seed in (0, 1, 0xFFFFFFFF, 2**64 - 1):
        expected = np.array([xxhash.xxh64_intdigest(v, seed) for v in values], dtype=np.uint64)
        got = xxh64_fixed_width(arr, seed)
        assert got is not None and (got == expected).all()
        sliced = xxh64_fixed_width(arr.slice(11, 100), seed)  # a non-zero array offset
        assert sliced is not None and (sliced == expected[11:111]).all()


def test_mixed_or_long_values_fall_back_to_the_package_with_the_same_buckets() -> None:
    mixed = pa.array([b"a", b"bc", b"", b"x" * 40], pa.binary())
    long_ = pa.array([b"y" * 32, b"z" * 32], pa.binary())
    assert xxh64_fixed_width(mixed, 7) is None and xxh64_fixed_width(long_, 7) is None
    for arr in (mixed, long_, pa.array([b"12345678"] * 5, pa.binary())):
        expected = [xxhash.xxh64_intdigest(v, 7) % 6 for v in arr.to_pylist()]
        assert hash_encoded(arr, 7, 6).tolist() == expected
