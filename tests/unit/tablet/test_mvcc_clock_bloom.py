"""Hybrid clock, MVCC visibility and the bloom filter."""

from __future__ import annotations

import random

import pyarrow as pa

from kudu_async.common.clock import (
    HybridClock,
    HybridClockCore,
    logical_value,
    make_timestamp,
    physical_micros,
)
from kudu_async.tablet.bloom import BloomFilter
from kudu_async.tablet.mvcc import MvccManager, MvccSnapshot


def test_timestamp_layout_is_physical_micros_shifted_by_12_bits() -> None:
    ts = make_timestamp(1_700_000_000_000_000, 5)
    assert ts == (1_700_000_000_000_000 << 12) | 5
    assert physical_micros(ts) == 1_700_000_000_000_000 and logical_value(ts) == 5


def test_clock_is_strictly_monotonic_even_when_physical_time_stalls_or_goes_back() -> None:
    c = HybridClockCore()
    a = c.now(1000)
    b = c.now(1000)
    d = c.now(900)
    assert a < b < d
    assert logical_value(b) == 1


def test_update_on_receive_moves_the_clock_past_the_observed_timestamp() -> None:
    c = HybridClockCore()
    remote = make_timestamp(5000, 7)
    c.update(remote)
    assert c.now(10) > remote


def test_wall_clock_wrapper_increases() -> None:
    c = HybridClock()
    assert c.now() < c.now()


def test_op_is_visible_only_after_commit() -> None:
    m = MvccManager()
    m.start_op(10)
    assert not m.snapshot_latest().is_visible(10)
    m.commit_op(10)
    assert m.snapshot_latest().is_visible(10)


def test_later_commit_is_visible_while_an_earlier_op_is_in_flight() -> None:
    m = MvccManager()
    m.start_op(10)
    m.start_op(20)
    m.commit_op(20)
    snap = m.snapshot_latest()
    assert snap.is_visible(20) and not snap.is_visible(10)
    assert not m.is_clean_up_to(15) and m.is_clean_up_to(9)
    mask = snap.visible_mask(pa.array([5, 10, 20, 30], pa.uint64()))
    assert mask.to_pylist() == [True, False, True, False]


def test_snapshot_at_ts_sees_exactly_timestamps_up_to_it() -> None:
    s = MvccSnapshot.at(100)
    assert s.is_visible(100) and not s.is_visible(101)


def test_aborted_op_leaves_no_trace() -> None:
    m = MvccManager()
    m.start_op(10)
    m.abort_op(10)
    assert m.in_flight() == [] and m.is_clean_up_to(10)


def test_bloom_has_no_false_negatives_and_few_false_positives() -> None:
    keys = [random.randbytes(8) for _ in range(5000)]
    bf = BloomFilter.from_bytes(BloomFilter.build(keys).to_bytes())
    assert all(bf.may_contain(k) for k in keys)
    others = [random.randbytes(9) for _ in range(5000)]
    fp = sum(bf.may_contain(k) for k in others) / len(others)
    assert fp < 0.03


def test_word_hashes_of_a_key_column_match_the_per_key_hash_and_fill_a_filter() -> None:
    import numpy as np
    import pyarrow as pa

    from kudu_async.tablet.bloom import word_hash
    from kudu_async.tablet.key_arrays import word_hashes

    rng = np.random.default_rng(3)
    keys = [b"", b"\x00", b"a" * 7, b"b" * 8, b"c" * 9, *(rng.bytes(int(n)) for n in rng.integers(0, 40, 500))]
    arr = pa.array(keys, pa.binary())
    assert word_hashes(arr).tolist() == [word_hash(k) for k in keys]
    assert word_hashes(arr.slice(3, 10)).tolist() == [word_hash(k) for k in keys[3:13]]
    long_tail = [*keys[:50], b"z" * 5000]  # a few long keys among short ones: hashed per key
    assert word_hashes(pa.array(long_tail, pa.binary())).tolist() == [word_hash(k) for k in long_tail]
    present = [i.to_bytes(8, "big") for i in range(0, 20000, 2)]
    bf = BloomFilter.from_word_hashes(word_hashes(pa.array(present, pa.binary())))
    again = BloomFilter.from_bytes(bf.to_bytes())
    assert again.words and all(again.may_contain(k) for k in present)
    absent = [i.to_bytes(8, "big") for i in range(1, 20000, 2)]
    assert sum(again.may_contain(k) for k in absent) < 0.03 * len(absent)
    probe = again.may_contain_hashes(word_hashes(pa.array(present + absent, pa.binary())))
    assert probe[: len(present)].all() and probe.tolist() == [again.may_contain(k) for k in present + absent]
