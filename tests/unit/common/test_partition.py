"""Partition schemas: validation, stable buckets, partition creation, lookup and pruning."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kudu_async.common import types as T
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.partition import (
    HashDimension,
    Partition,
    PartitionSchema,
    RangeBound,
)
from kudu_async.common.predicate import ColumnPredicate
from kudu_async.common.schema import ColumnSchema, Schema


def find_partition(partitions: Sequence[Partition], partition_key: bytes) -> Partition | None:
    """The partition holding ``partition_key`` (``partitions`` sorted by start); None in a range gap."""
    starts = [p.partition_key_start for p in partitions]
    i = bisect.bisect_right(starts, partition_key) - 1
    if i < 0:
        return None
    p = partitions[i]
    return p if p.contains(partition_key) else None


@pytest.fixture
def schema() -> Schema:
    return Schema(
        [
            ColumnSchema("k", T.INT64, nullable=False),
            ColumnSchema("s", T.STRING, nullable=False),
            ColumnSchema("v", T.DOUBLE),
        ],
        2,
    )


# --- validation -----------------------------------------------------------------------------------------


def test_hash_dimension_needs_two_buckets() -> None:
    with pytest.raises(KuduInvalidArgument, match="at least 2 buckets"):
        HashDimension(["k"], 1)


def test_hash_levels_only_on_key_columns_and_disjoint(schema: Schema) -> None:
    with pytest.raises(KuduInvalidArgument, match="hash partition column 'v' is not a primary key column"):
        PartitionSchema(schema, [HashDimension(["v"], 2)], [])
    with pytest.raises(KuduInvalidArgument, match="hash partition levels share column 'k'"):
        PartitionSchema(schema, [HashDimension(["k"], 2), HashDimension(["k", "s"], 2)], [])
    with pytest.raises(KuduInvalidArgument, match="range partition column 'v' is not a primary key column"):
        PartitionSchema(schema, [], ["v"])
    with pytest.raises(KuduInvalidArgument, match="'zz' is not in the schema"):
        PartitionSchema(schema, [HashDimension(["zz"], 2)], [])


def test_default_range_columns_are_the_key(schema: Schema) -> None:
    assert PartitionSchema(schema).range_schema.columns == ("k", "s")


def test_partition_schema_dict_roundtrip(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["k"], 3, seed=9)], ["s"])
    wire = msgpack.unpackb(msgpack.packb(ps.to_dict()))
    assert PartitionSchema.from_dict(schema, wire) == ps


# --- stable hashing -------------------------------------------------------------------------------------


def test_bucket_numbers_are_pinned(schema: Schema) -> None:
    """A change to the hash or the encoding would move rows between tablets of existing tables."""
    ps = PartitionSchema(schema, [HashDimension(["k"], 4), HashDimension(["s"], 3, seed=7)], [])
    assert [ps.hash_buckets_of({"k": k, "s": "x"})[0] for k in (0, 1, 42, -1, 2**40)] == [0, 3, 3, 0, 3]
    assert [ps.hash_buckets_of({"k": 0, "s": s})[1] for s in ("", "a", "kudu")] == [1, 1, 0]
    ps2 = PartitionSchema(schema, [HashDimension(["k", "s"], 16)], [])
    assert ps2.partition_key({"k": 1, "s": "a"}) == b"\x00\x00\x00\x08"


def test_buckets_spread_evenly(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["k"], 4)], [])
    keys = ps.partition_keys(pa.record_batch({"k": pa.array(range(8000), pa.int64()), "s": ["x"] * 8000}))
    counts = Counter(keys.to_pylist())
    assert len(counts) == 4 and min(counts.values()) > 1800


def test_seed_changes_buckets(schema: Schema) -> None:
    a = PartitionSchema(schema, [HashDimension(["k"], 8, seed=0)], [])
    b = PartitionSchema(schema, [HashDimension(["k"], 8, seed=1)], [])
    assert [a.hash_buckets_of({"k": k}) for k in range(20)] != [b.hash_buckets_of({"k": k}) for k in range(20)]


# --- partitions -----------------------------------------------------------------------------------------


def test_product_of_hash_buckets_and_ranges(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["k"], 3), HashDimension(["s"], 2)], ["k"])
    parts = ps.create_partitions([((0,), (100,)), ((200,), (300,))])
    assert len(parts) == 3 * 2 * 2
    assert [p.partition_key_start for p in parts] == sorted(p.partition_key_start for p in parts)
    p0 = parts[0]
    assert p0.hash_buckets == (0, 0)
    assert p0.partition_key_start == b"\x00\x00\x00\x00\x00\x00\x00\x00" + p0.range_key_start


def test_no_bounds_makes_one_unbounded_range(schema: Schema) -> None:
    parts = PartitionSchema(schema, [], ["k"]).create_partitions()
    assert parts == [Partition((), b"", b"", b"", b"")]


def test_unbounded_range_end_is_next_bucket(schema: Schema) -> None:
    parts = PartitionSchema(schema, [HashDimension(["k"], 2)], ["k"]).create_partitions()
    assert [(p.partition_key_start, p.partition_key_end) for p in parts] == [
        (b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x02"),
    ]


def test_split_rows_split_ranges(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], ["k"])
    parts = ps.create_partitions([], [(10,), (20,)])
    assert len(parts) == 3
    assert parts[0].range_key_end == parts[1].range_key_start == ps.encode_range_key((10,))
    with pytest.raises(KuduInvalidArgument, match="not strictly inside"):
        ps.create_partitions([((0,), (5,))], [(7,)])


def test_overlapping_ranges_rejected(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], ["k"])
    with pytest.raises(KuduInvalidArgument, match="overlap"):
        ps.create_partitions([((0,), (10,)), ((5,), (20,))])
    with pytest.raises(KuduInvalidArgument, match="overlap"):
        ps.create_partitions([((0,), None), ((5,), (20,))])
    with pytest.raises(KuduInvalidArgument, match="not below"):
        ps.create_partitions([((10,), (10,))])
    ps.create_partitions([((0,), (10,)), ((10,), (20,))])  # adjacent is fine


def test_exclusive_lower_inclusive_upper_normalised(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], ["k"])
    [p] = ps.create_partitions([RangeBound((0,), (10,), lower_inclusive=False, upper_inclusive=True)])
    keys = {k: ps.partition_key({"k": k, "s": ""}) for k in (0, 1, 10, 11)}
    assert not p.contains(keys[0]) and p.contains(keys[1]) and p.contains(keys[10]) and not p.contains(keys[11])
    [q] = ps.create_partitions([((0,), (10,), "exclusive", "inclusive")])
    assert q == p


def test_dict_bounds_and_prefix_bounds(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], ["k", "s"])
    [p] = ps.create_partitions([({"k": 1}, {"k": 2})])
    assert p.contains(ps.partition_key({"k": 1, "s": ""})) and p.contains(ps.partition_key({"k": 1, "s": "zz"}))
    assert not p.contains(ps.partition_key({"k": 2, "s": ""}))


def test_partition_dict_roundtrip(schema: Schema) -> None:
    for p in PartitionSchema(schema, [HashDimension(["k"], 2)], ["s"]).create_partitions([(("a",), ("m",))]):
        assert Partition.from_dict(msgpack.unpackb(msgpack.packb(p.to_dict()))) == p


def test_find_partition_and_gaps(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["s"], 3)], ["k"])
    parts = ps.create_partitions([((0,), (10,)), ((20,), None)])
    for k in (0, 5, 9, 20, 10**12):
        row = {"k": k, "s": "x"}
        p = find_partition(parts, ps.partition_key(row))
        assert p is not None and p.hash_buckets == ps.hash_buckets_of(row)
    assert find_partition(parts, ps.partition_key({"k": 15, "s": "x"})) is None
    assert find_partition(parts, ps.partition_key({"k": -1, "s": "x"})) is None


def test_vectorised_partition_keys_equal_scalar(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["k"], 5, seed=3), HashDimension(["s"], 2)], ["s", "k"])
    rows = [{"k": k, "s": s, "v": None} for k in (-3, 0, 7, 2**62) for s in ("", "a\x00", "zz")]
    batch, errors = schema.validate_batch_rows(pa.Table.from_pylist(rows), for_op="insert")
    assert errors == {}
    assert ps.partition_keys(batch).to_pylist() == [ps.partition_key(r) for r in rows]
    tuples = [(r["k"], r["s"], r["v"]) for r in rows]
    assert [ps.partition_key(t) for t in tuples] == [ps.partition_key(r) for r in rows]


def test_no_hash_no_range_gives_empty_partition_keys(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], [])
    assert ps.partition_keys(pa.record_batch({"k": [1, 2], "s": ["a", "b"]})).to_pylist() == [b"", b""]


# --- pruning --------------------------------------------------------------------------------------------


def test_hash_level_pruned_only_with_equality_on_all_its_columns(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["k", "s"], 4)], [])
    parts = ps.create_partitions()
    assert len(ps.prune(parts, [ColumnPredicate("k", "=", 1)])) == 4
    pruned = ps.prune(parts, [ColumnPredicate("k", "=", 1), ColumnPredicate("s", "=", "a")])
    assert [p.hash_buckets for p in pruned] == [ps.hash_buckets_of({"k": 1, "s": "a"})]
    pruned = ps.prune(parts, [ColumnPredicate("k", "IN", [1, 2]), ColumnPredicate("s", "=", "a")])
    assert {p.hash_buckets for p in pruned} == {ps.hash_buckets_of({"k": k, "s": "a"}) for k in (1, 2)}


def test_levels_pruned_independently(schema: Schema) -> None:
    ps = PartitionSchema(schema, [HashDimension(["k"], 3), HashDimension(["s"], 3)], [])
    parts = ps.create_partitions()
    pruned = ps.prune(parts, [ColumnPredicate("s", "=", "q")])
    assert len(pruned) == 3 and {p.hash_buckets[1] for p in pruned} == {ps.hash_buckets_of({"k": 0, "s": "q"})[1]}


def test_range_predicates_prune_ranges(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], ["k"])
    parts = ps.create_partitions([], [(10,), (20,), (30,)])  # (-inf,10) [10,20) [20,30) [30,inf)

    def ranges(preds: list[ColumnPredicate]) -> list[int]:
        return [parts.index(p) for p in ps.prune(parts, preds)]

    assert ranges([ColumnPredicate("k", ">=", 20)]) == [2, 3]
    assert ranges([ColumnPredicate("k", "<", 10)]) == [0]
    assert ranges([ColumnPredicate("k", "<=", 10)]) == [0, 1]
    assert ranges([ColumnPredicate("k", ">", 12), ColumnPredicate("k", "<", 25)]) == [1, 2]
    assert ranges([ColumnPredicate("k", "=", 25)]) == [2]
    assert ranges([ColumnPredicate("k", "IN", [5, 35])]) == [0, 1, 2, 3]
    assert ranges([ColumnPredicate("k", ">", 25), ColumnPredicate("k", "<", 5)]) == []
    assert ranges([ColumnPredicate("k", "IS NULL")]) == []
    assert ranges([ColumnPredicate("v", "=", 1.0)]) == [0, 1, 2, 3]


def test_range_on_second_column_needs_equality_on_first(schema: Schema) -> None:
    ps = PartitionSchema(schema, [], ["k", "s"])
    parts = ps.create_partitions([], [(1, "m"), (2, "")])
    assert len(ps.prune(parts, [ColumnPredicate("s", ">=", "z")])) == 3
    pruned = ps.prune(parts, [ColumnPredicate("k", "=", 1), ColumnPredicate("s", ">=", "z")])
    assert [parts.index(p) for p in pruned] == [1]


keys = st.integers(-50, 50)
ops = st.sampled_from(["=", "<", "<=", ">", ">=", "IN"])


@st.composite
def predicates(draw: st.DrawFn) -> list[ColumnPredicate]:
    out = []
    for _ in range(draw(st.integers(0, 3))):
        col = draw(st.sampled_from(["k", "s"]))
        op = draw(ops)
        gen: st.SearchStrategy[Any] = keys if col == "k" else st.sampled_from(["", "a", "b", "m", "z"])
        value = draw(st.lists(gen, min_size=1, max_size=3)) if op == "IN" else draw(gen)
        out.append(ColumnPredicate(col, op, value))
    return out


key_tuples = st.tuples(keys, st.sampled_from(["", "a", "m", "zz"]))


@settings(max_examples=150, deadline=None)
@given(
    predicates(),
    st.lists(st.tuples(keys, st.sampled_from(["", "a", "b", "m", "z", "zz", "m\x00"])), max_size=30),
    st.none() | key_tuples,
    st.none() | key_tuples,
)
def test_pruning_never_drops_a_matching_row(
    preds: list[ColumnPredicate],
    rows: list[tuple[int, str]],
    lower: tuple[int, str] | None,
    upper: tuple[int, str] | None,
) -> None:
    from kudu_async.common.key_encoding import encode_key

    schema = Schema([ColumnSchema("k", T.INT64, nullable=False), ColumnSchema("s", T.STRING, nullable=False)], 2)
    bounds = [
        RangeBound((-100,), (0, "m")),
        RangeBound((0, "m"), (20,), hash_dimensions=(HashDimension(["s"], 4, seed=5),)),
        RangeBound((25,), None),
    ]
    ps = PartitionSchema(schema, [HashDimension(["s"], 3)], ["k", "s"]).with_custom_ranges(bounds)
    parts = ps.create_partitions(bounds)
    lo = encode_key(schema, lower) if lower else b""
    hi = encode_key(schema, upper) if upper else b""
    kept = ps.prune(parts, preds, lower_bound_key=lo, upper_bound_key=hi)
    for k, s in rows:
        row = {"k": k, "s": s}
        pk = encode_key(schema, (k, s))
        if pk < lo or (hi and pk >= hi):
            continue
        if all(p.matches(row[p.column]) for p in preds):
            home = find_partition(parts, ps.partition_key(row))
            if home is not None:
                assert home in kept, (row, preds)


def test_primary_key_bounds_prune_ranges(schema: Schema) -> None:
    from kudu_async.common.key_encoding import encode_key

    ps = PartitionSchema(schema, [HashDimension(["s"], 2)], ["k", "s"])
    parts = ps.create_partitions([], [(10, ""), (20, "")])
    lo, hi = encode_key(schema, (12, "")), encode_key(schema, (15, "x"))
    kept = ps.prune(parts, [], lower_bound_key=lo, upper_bound_key=hi)
    assert {p.range_key_start for p in kept} == {ps.encode_range_key((10, ""))}
    assert len(kept) == 2
    assert ps.prune(parts, [], lower_bound_key=hi, upper_bound_key=lo) == []


# --- per-range hash schemas (custom range partitions) ---------------------------------------------------


def custom_table(schema: Schema) -> tuple[PartitionSchema, list[Partition]]:
    base = PartitionSchema(schema, [HashDimension(["s"], 2)], ["k"])
    bounds = [
        RangeBound((0,), (10,), hash_dimensions=(HashDimension(["s"], 5, seed=1),)),
        RangeBound((10,), (20,)),
    ]
    ps = base.with_custom_ranges(bounds)
    return ps, ps.create_partitions(bounds)


def test_custom_range_has_its_own_bucket_count(schema: Schema) -> None:
    ps, parts = custom_table(schema)
    assert len(parts) == 5 + 2
    assert sorted(p.hash_buckets[0] for p in parts if p.range_key_start == ps.encode_range_key((0,))) == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_custom_range_keys_vectorised_equal_scalar_and_land_in_their_partition(schema: Schema) -> None:
    ps, parts = custom_table(schema)
    rows: list[dict[str, Any]] = [
        {"k": k, "s": s, "v": None} for k in (0, 3, 9, 10, 15, 19) for s in ("a", "b", "c", "dd")
    ]
    batch, errors = schema.validate_batch_rows(pa.Table.from_pylist(rows), for_op="insert")
    assert errors == {}
    keys = ps.partition_keys(batch).to_pylist()
    assert keys == [ps.partition_key(r) for r in rows]
    for r, key in zip(rows, keys, strict=True):
        p = find_partition(parts, key)
        assert p is not None and p.contains(key)
        expected_buckets = 5 if r["k"] < 10 else 2
        assert p.hash_buckets[0] < expected_buckets
    low_buckets = {ps.hash_buckets_of(r)[0] for r in rows if r["k"] < 10}
    assert low_buckets - {0, 1}, "the 5-bucket range uses buckets beyond the default 2"


def test_custom_ranges_roundtrip_and_prune(schema: Schema) -> None:
    ps, parts = custom_table(schema)
    assert PartitionSchema.from_dict(schema, msgpack.unpackb(msgpack.packb(ps.to_dict()))) == ps
    kept = ps.prune(parts, [ColumnPredicate("s", "=", "a")])
    assert len(kept) == 2  # one bucket in each range
    assert all(p.contains(ps.partition_key({"k": p_k, "s": "a"})) for p, p_k in zip(kept, (0, 10), strict=True))


def test_custom_range_rules(schema: Schema) -> None:
    base = PartitionSchema(schema, [HashDimension(["s"], 2)], ["k"])
    with pytest.raises(KuduInvalidArgument, match="has 2 levels; the table has 1"):
        base.with_custom_ranges(
            [RangeBound((0,), (10,), hash_dimensions=(HashDimension(["s"], 3), HashDimension(["k"], 3)))]
        )
    with pytest.raises(KuduInvalidArgument, match="registered first"):
        base.create_partitions([RangeBound((0,), (10,), hash_dimensions=(HashDimension(["s"], 3),))])
    ps, _ = custom_table(schema)
    dropped = ps.without_custom_range(ps.encode_range_key((0,)), ps.encode_range_key((10,)))
    assert dropped.custom_ranges == ()


@pytest.mark.parametrize("shape", ["hash", "range_and_hash", "custom_ranges", "range_only"])
def test_a_lookup_prunes_to_its_one_partition_as_the_general_pruning_does(schema: Schema, shape: str) -> None:
    """Predicates pinning every partitioning column with '=' (a point lookup) take a short path: the
    partition holding the row's partition key; it agrees with the interval pruning, gaps included."""
    if shape == "hash":
        ps = PartitionSchema(schema, [HashDimension(["k"], 4), HashDimension(["s"], 3)], [])
        parts = ps.create_partitions([])
    elif shape == "custom_ranges":
        ps, parts = custom_table(schema)
    else:
        dims = [HashDimension(["s"], 3)] if shape == "range_and_hash" else []
        ps = PartitionSchema(schema, dims, ["k"])
        bounds = [RangeBound((-10,), (0,)), RangeBound((5,), (30,))]  # a gap at [0, 5) and beyond 30
        parts = ps.create_partitions(bounds)
    for k in (-11, -10, -1, 0, 3, 5, 9, 10, 19, 20, 29, 30, 99):
        for s in ("", "a", "b", "zz"):
            preds = [ColumnPredicate("k", "=", k), ColumnPredicate("s", "=", s)]
            kept = ps.prune(parts, preds)
            by_col = {p.column: [p] for p in preds}
            assert kept == ps._prune_by_intervals(parts, by_col, b"", b""), (k, s)
            assert len(kept) <= 1
            home = find_partition(
                sorted(parts, key=lambda p: p.partition_key_start), ps.partition_key({"k": k, "s": s})
            )
            assert kept == ([] if home is None else [home])
    assert ps._pinned_row({"k": [ColumnPredicate("k", "IN", [1, 2])], "s": [ColumnPredicate("s", "=", "a")]}) is None
    two = [ColumnPredicate("k", "=", 1), ColumnPredicate("k", "=", 2), ColumnPredicate("s", "=", "a")]
    assert ps.prune(parts, two) == []  # contradictory: the general path says so
