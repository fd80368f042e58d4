"""Budgeted compaction policy: which DiskRowSets to merge, and the rowset layout's height.

Kudu's model (its compaction-policy design note): a key probe consults every rowset whose key range covers
the key, so the cost of the layout is the *height* at each key, averaged over the data. Keys are measured
in data space: the CDF of the tablet's bytes, each rowset spreading its bytes evenly over its own key range.
A rowset's *width* is the share of all data between its min and max key; the average height is the sum of
the widths. Merging a set R of rowsets whose keys fall in ``[lo, hi]`` replaces them by non-overlapping
outputs covering at most ``[lo, hi]``, so it lowers the average height by at least
``sum(width(R)) - width([lo, hi])``. Among all sets whose bytes fit the budget, the policy picks the one
that lowers the height most: for every left bound (a rowset's min key) the rowsets starting at or after it
are added in order of their max key, and a 0/1 knapsack over the budget (sizes rounded up to 1/64 of it)
keeps the widest subset of each prefix; its bound on the right is the prefix's last max key.

Sorted keys never overlap: every set's widths add up to its span and no merge lowers the height, yet
each load leaves rowsets smaller than the target size a flush or compaction writes, and every scan pays
for each rowset (footer, key index, bloom filter, file handle). Kudu's small-rowset tradeoff: each rowset
of ``s`` bytes below the target ``T`` adds ``tradeoff * (1 - s / T)`` to a merge's benefit, the share of
itself the merge saves (n inputs of S bytes come out as about S / T rowsets). The tradeoff stays below the
minimum improvement, so a merge of disjoint rowsets must save more than one rowset: every such merge
lowers the rowset count, and rowsets at the target size earn nothing, so merging stops. Pure functions
over plain tuples; the result is cached per layout by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kudu_async.tablet.diskrowset import TARGET_ROWSET_BYTES

KNAPSACK_SLOTS = 64
MIN_IMPROVEMENT = 0.01  # Kudu's compaction_minimum_improvement: below it a merge is not worth its IO
# Kudu's compaction_small_rowset_tradeoff: the weight of a rowset saved against height removed.
SMALL_ROWSET_TRADEOFF = 0.009
# The tservers' default (flag compaction_small_rowset_tradeoff): off while merges read their inputs whole.
DEFAULT_SMALL_ROWSET_TRADEOFF = 0.0
# Left bounds whose knapsacks are solved together: bounds the arrays at (rowsets x START_BLOCK) floats.
START_BLOCK = 256


@dataclass(frozen=True, slots=True)
class RowSetExtent:
    """What the policy knows of one rowset: its id, key range (encoded keys) and size in bytes."""

    id: int
    min_key: bytes
    max_key: bytes
    size: int


@dataclass(frozen=True, slots=True)
class LayoutPlan:
    """The layout's average and max height, and the best merge within the budget (empty: none)."""

    average_height: float
    max_height: int
    compact_ids: tuple[int, ...]
    improvement: float  # average height removed by merging ``compact_ids``
    compact_bytes: int


def _key_points(extents: list[RowSetExtent]) -> tuple[np.ndarray, np.ndarray]:
    """Each rowset's min and max key as floats that keep the keys' byte order: the 8 bytes after the
    prefix every key of the tablet shares, read big-endian (exact for the encoded 64-bit integer keys)."""
    lo = min(e.min_key for e in extents)
    hi = max(e.max_key for e in extents)
    p = 0
    while p < min(len(lo), len(hi)) and lo[p] == hi[p]:
        p += 1

    def point(k: bytes) -> float:
        return float(int.from_bytes(k[p : p + 8].ljust(8, b"\0"), "big"))

    return (
        np.array([point(e.min_key) for e in extents], dtype=np.float64),
        np.array([point(e.max_key) for e in extents], dtype=np.float64),
    )


def _widths(mins: np.ndarray, maxs: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Data below each rowset's min key (``below``), at or below its max key (``upto``), as shares of
    all data, and each rowset's width (``upto - below``). A rowset whose keys map to one point is a
    point mass there."""
    total = float(sizes.sum()) or 1.0
    span = maxs - mins
    point = span <= 0
    safe = np.where(point, 1.0, span)

    def share(x: np.ndarray, inclusive: bool) -> np.ndarray:
        # share[k] = data of all rowsets at keys < x[k] (or <= when inclusive)
        frac = np.clip((x[:, None] - mins[None, :]) / safe[None, :], 0.0, 1.0)
        at = (x[:, None] >= mins[None, :]) if inclusive else (x[:, None] > mins[None, :])
        frac = np.where(point[None, :], at, frac)
        out: np.ndarray = (frac * sizes[None, :]).sum(axis=1) / total
        return out

    below, upto = share(mins, False), share(maxs, True)
    return below, upto, np.maximum(upto - below, 0.0)


def data_shares(extents: list[RowSetExtent]) -> list[tuple[float, float]]:
    """Each rowset's key range in data space: (share of the data below its min key, share at or below
    its max key). The rowset layout picture draws each rowset over this interval."""
    if not extents:
        return []
    mins, maxs = _key_points(extents)
    below, upto, _ = _widths(mins, maxs, np.array([max(1, e.size) for e in extents], dtype=np.float64))
    return list(zip(below.tolist(), upto.tolist(), strict=True))


def max_height(extents: list[RowSetExtent]) -> int:
    """Most rowsets whose (inclusive) key ranges cover one key."""
    events = sorted([(e.min_key, 0) for e in extents] + [(e.max_key, 1) for e in extents])
    live = best = 0
    for _, kind in events:
        live += 1 if kind == 0 else -1
        best = max(best, live)
    return best


def _knapsack(sizes: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best total width per capacity after each item (rows: items added in order) for slot sizes."""
    best = np.zeros(KNAPSACK_SLOTS + 1, dtype=np.float64)
    rows = np.empty((len(sizes), KNAPSACK_SLOTS + 1), dtype=np.float64)
    for j, (s, w) in enumerate(zip(sizes.tolist(), widths.tolist(), strict=True)):
        if s <= KNAPSACK_SLOTS:
            cand = best.copy()
            cand[s:] = np.maximum(best[s:], best[: len(best) - s] + w)
            best = cand
        rows[j] = best
    return rows, best


def _pick(sizes: np.ndarray, widths: np.ndarray, upto_item: int) -> list[int]:
    """The items (indices into the arrays, among the first ``upto_item + 1``) of the widest subset."""
    rows, _ = _knapsack(sizes[: upto_item + 1], widths[: upto_item + 1])
    chosen: list[int] = []
    cap = KNAPSACK_SLOTS
    for j in range(upto_item, -1, -1):
        prev = rows[j - 1][cap] if j else 0.0
        if rows[j][cap] != prev:
            chosen.append(j)
            cap -= int(sizes[j])
    return chosen[::-1]


def check_small_rowset_tradeoff(tradeoff: float, min_improvement: float = MIN_IMPROVEMENT) -> None:
    """Refuse a small-rowset weight that lets merges of disjoint rowsets pay for themselves: at or above
    the minimum improvement, two rowsets a hair under the target size would be merged, and the merge's
    outputs merged again, for ever."""
    if not 0.0 <= tradeoff < min_improvement:
        raise ValueError(
            f"compaction_small_rowset_tradeoff must be in [0, {min_improvement:g}) (below "
            f"compaction_minimum_improvement, else compactions loop), got {tradeoff!r}"
        )


def small_rowset_credit(sizes: np.ndarray, target_bytes: int, tradeoff: float) -> np.ndarray:
    """Each rowset's share of the rowsets a merge saves, weighted by ``tradeoff``: merging rowsets of
    sizes s_i into outputs of ``target_bytes`` leaves about sum(s_i) / target of them, so each input
    saves ``1 - s_i / target`` (none at or above the target)."""
    credit: np.ndarray = tradeoff * np.maximum(0.0, 1.0 - sizes / float(target_bytes))
    return credit


def plan(
    extents: list[RowSetExtent],
    budget_bytes: int,
    min_improvement: float = MIN_IMPROVEMENT,
    *,
    small_rowset_tradeoff: float = 0.0,
    target_rowset_bytes: int = TARGET_ROWSET_BYTES,
) -> LayoutPlan:
    """Heights of the layout and the merge within ``budget_bytes`` that lowers the average height most,
    each rowset below ``target_rowset_bytes`` adding its :func:`small_rowset_credit` to a merge's benefit."""
    if not extents:
        return LayoutPlan(0.0, 0, (), 0.0, 0)
    if budget_bytes <= 0:
        raise ValueError(f"compaction budget must be positive, got {budget_bytes} bytes")
    if target_rowset_bytes <= 0:
        raise ValueError(f"target rowset size must be positive, got {target_rowset_bytes} bytes")
    check_small_rowset_tradeoff(small_rowset_tradeoff, min_improvement)
    mins, maxs = _key_points(extents)
    sizes = np.array([max(1, e.size) for e in extents], dtype=np.float64)
    below, upto, width = _widths(mins, maxs, sizes)
    avg = float(width.sum())
    top = max_height(extents)
    credit = small_rowset_credit(sizes, target_rowset_bytes, small_rowset_tradeoff)
    # Without overlaps no merge lowers the height: its benefit is at most the credit of its inputs.
    if top < 2 and float(credit.sum()) <= min_improvement:
        return LayoutPlan(avg, top, (), 0.0, 0)
    value = width + credit
    slot = budget_bytes / KNAPSACK_SLOTS
    slots = np.ceil(sizes / slot).astype(np.int64)
    order = np.lexsort((mins, maxs))  # every rowset by max key, ties by min key
    mins_ord, upto_ord = mins[order], upto[order]
    starts = np.unique(mins)
    best_gain, winner = min_improvement, None
    for b in range(0, len(starts), START_BLOCK):
        block = starts[b : b + START_BLOCK]
        heads = _prefix_heads(slots, value, mins, order, block)
        for i, a in enumerate(block.tolist()):
            steps = np.flatnonzero(mins_ord >= a)
            left = float(below[mins == a].min())
            gains = heads[steps, i] - (upto_ord[steps] - left)
            # The shortest prefix within a hair of the best: a rowset that adds as much span as width
            # (disjoint from the rest) and no credit only costs IO.
            j = int(np.flatnonzero(gains >= gains.max() - 1e-9)[0])
            if gains[j] > best_gain + 1e-9:
                best_gain, winner = float(gains[j]), (order[steps], j)
    if winner is None:
        return LayoutPlan(avg, top, (), 0.0, 0)
    # One rowset alone gains at most its credit, below the minimum improvement (its span covers its
    # width): any gain above that is a knapsack of two rowsets or more.
    cand, j = winner
    best_set = [int(cand[x]) for x in _pick(slots[cand], value[cand], j)]
    ids = tuple(sorted(extents[i].id for i in best_set))
    return LayoutPlan(avg, top, ids, best_gain, int(sum(extents[i].size for i in best_set)))


def _prefix_heads(
    slots: np.ndarray, values: np.ndarray, mins: np.ndarray, order: np.ndarray, block: np.ndarray
) -> np.ndarray:
    """For every left bound in ``block`` (ascending) at once: the best total value within the whole
    budget after each rowset of ``order`` is offered to the knapsacks of the bounds at or below its min
    key (rows: rowsets in ``order``, columns: bounds). The same updates, value for value, as
    :func:`_knapsack` run once per bound, in one array operation per rowset."""
    best = np.zeros((len(block), KNAPSACK_SLOTS + 1), dtype=np.float64)
    heads = np.empty((len(order), len(block)), dtype=np.float64)
    reach = np.searchsorted(block, mins[order], side="right")  # bounds [0, reach) take the rowset
    for step, (j, r) in enumerate(zip(order.tolist(), reach.tolist(), strict=True)):
        s = int(slots[j])
        if r and s <= KNAPSACK_SLOTS:
            best[:r, s:] = np.maximum(best[:r, s:], best[:r, : KNAPSACK_SLOTS + 1 - s] + values[j])
        heads[step] = best[:, KNAPSACK_SLOTS]
    return heads
