"""scripts/bench/scale.py's key orders: every key of the space exactly once, chunk by chunk."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.bench.scale import Expect, KeyGen, parse_args


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 97, 1000, 1024, 999_983, 1_000_000])
@pytest.mark.parametrize("mode", ["asc", "random"])
def test_key_order_is_a_permutation(n: int, mode: str) -> None:
    gen = KeyGen.make(n, mode)
    step = max(1, n // 7)
    keys = np.concatenate([gen.keys(lo, min(n, lo + step)) for lo in range(0, n, step)])
    assert len(keys) == n
    assert np.array_equal(np.sort(keys), np.arange(n, dtype=np.int64))
    for i in (0, n // 2, n - 1):
        assert gen.key(i) == int(keys[i])


def test_random_order_scatters_and_is_fixed() -> None:
    gen = KeyGen.make(100_000_000, "random")
    assert gen == KeyGen.make(100_000_000, "random")
    first = gen.keys(0, 100_000)
    # One 100,000-row batch touches the whole key space, not a narrow range.
    assert first.min() < 1_000_000 and first.max() > 99_000_000
    assert not np.array_equal(first, np.sort(first))


def test_key_range_and_mode_are_checked() -> None:
    with pytest.raises(ValueError, match="outside"):
        KeyGen.make(10, "asc").keys(5, 11)
    with pytest.raises(ValueError, match="'asc' or 'random'"):
        KeyGen.make(10, "sorted")


def test_expected_sums_of_a_batch() -> None:
    exp = Expect()
    keys = np.arange(2500, dtype=np.int64)
    exp.add(keys)
    assert (exp.rows, exp.sum_a) == (2500, 2 * sum(range(1000)) + sum(range(500)))
    hits = [k for k in range(2500) if k % 1000 < 100]
    assert (exp.filtered_rows, exp.filtered_key_sum) == (len(hits), sum(hits))


def test_quick_defaults() -> None:
    args = parse_args(["--quick"])
    assert (args.rows, args.chunk, args.keys) == (2_000_000, 1_000_000, "asc")
