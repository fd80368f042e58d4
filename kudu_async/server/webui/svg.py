"""The geometry of the pages' pictures, as plain data (rectangles and labels) that ``macros.html``'s
``picture`` draws as inline SVG; the JSON form of a page carries the same data.

Two pictures: a tablet's rowset layout (Kudu's ``/tablet-rowsetlayout-svg``: each DiskRowSet a box over
the part of the key space its keys cover, measured in data, stacked where boxes overlap, so the stack's
height at a key is how many rowsets a lookup of that key reads) and the cluster view (replicas and
leaders per tablet server, one colour per table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Distinct, colour-blind-friendly fills (Okabe-Ito, then tints); tables past the end reuse them.
PALETTE = (
    "#0072b2",
    "#e69f00",
    "#009e73",
    "#cc79a7",
    "#56b4e9",
    "#d55e00",
    "#f0e442",
    "#999999",
    "#6a9fcf",
    "#f2c46b",
    "#5cc2a0",
    "#e0a8c8",
)
LEADER_FILL = "#17283d"
COMPACT_FILL = "#d55e00"
ROWSET_FILL = "#56b4e9"


@dataclass(frozen=True, slots=True)
class RowSetBox:
    """One rowset for the layout picture: its key range as shares of the tablet's data (0..1)."""

    id: int
    lo: float
    hi: float
    rows: int
    size: int
    compacting: bool = False


def pack_levels(boxes: Sequence[RowSetBox]) -> list[int]:
    """Each box's level: the lowest whose boxes all end before it starts (so no two boxes of a level
    overlap). Sorted by start, so the levels fill from the bottom as Kudu draws them."""
    order = sorted(range(len(boxes)), key=lambda i: (boxes[i].lo, boxes[i].hi))
    ends: list[float] = []
    level = [0] * len(boxes)
    for i in order:
        b = boxes[i]
        for lv, end in enumerate(ends):
            if end < b.lo or (end == b.lo and b.hi > b.lo):
                ends[lv] = b.hi
                level[i] = lv
                break
        else:
            level[i] = len(ends)
            ends.append(b.hi)
    return level


def rowset_layout(boxes: Sequence[RowSetBox], width: int = 960, box_h: int = 22) -> dict[str, Any]:
    """The rowset layout picture of a tablet: boxes on levels over the key space, an axis below."""
    left, right, top = 10, 10, 10
    span = width - left - right
    levels = pack_levels(boxes)
    n_levels = max(levels, default=-1) + 1
    rects: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for b, lv in zip(boxes, levels, strict=True):
        x = left + b.lo * span
        w = max(2.0, (b.hi - b.lo) * span)
        y = top + (n_levels - 1 - lv) * (box_h + 4)
        tip = f"rowset {b.id}: {b.rows} rows, {b.size} bytes, keys over {100 * (b.hi - b.lo):.1f}% of the data"
        rects.append(
            {
                "x": round(x, 1),
                "y": y,
                "w": round(w, 1),
                "h": box_h,
                "fill": COMPACT_FILL if b.compacting else ROWSET_FILL,
                "stroke": "#17283d",
                "tip": tip,
            }
        )
        if w >= 28:
            texts.append({"x": round(x + w / 2, 1), "y": y + box_h - 7, "text": str(b.id), "anchor": "middle"})
    axis_y = top + max(n_levels, 1) * (box_h + 4) + 4
    rects.append({"x": left, "y": axis_y, "w": span, "h": 2, "fill": "#5b6575"})
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        texts.append(
            {
                "x": round(left + frac * span, 1),
                "y": axis_y + 18,
                "text": f"{frac * 100:.0f}%",
                "anchor": "start" if frac == 0 else "end" if frac == 1 else "middle",
                "size": 11,
                "fill": "#5b6575",
            }
        )
    return {
        "title": f"rowset layout: {len(boxes)} rowsets on {n_levels} levels over the key space (share of data)",
        "width": width,
        "height": axis_y + 28,
        "rects": rects,
        "texts": texts,
        "levels": n_levels,
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def table_colours(table_names: Sequence[str]) -> dict[str, str]:
    """One fill per table, by its place in name order (stable across pages of one cluster)."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(table_names)))}


def cluster_view(
    tservers: Sequence[Mapping[str, Any]],
    replicas: Mapping[str, Mapping[str, int]],
    leaders: Mapping[str, int],
    colours: Mapping[str, str],
    width: int = 960,
) -> dict[str, Any]:
    """Replicas per tablet server as a bar of one segment per table, and its leaders as a dark bar
    under it: the spread of replicas and of leaders at a glance.

    ``tservers``: dicts with ``uuid``, ``label`` and ``href`` (its web UI, or None); ``replicas``: uuid
    -> table name -> replica count; ``leaders``: uuid -> leader count.
    """
    label_w, top, row_h = 250, 10, 44
    span = width - label_w - 70
    most = max([sum(replicas.get(t["uuid"], {}).values()) for t in tservers] + [1])
    rects: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for i, ts in enumerate(tservers):
        uuid = ts["uuid"]
        y = top + i * row_h
        texts.append({"x": 0, "y": y + 14, "text": ts["label"], "href": ts.get("href")})
        x = float(label_w)
        total = 0
        for table, count in sorted(replicas.get(uuid, {}).items()):
            w = count / most * span
            rects.append(
                {
                    "x": round(x, 1),
                    "y": y,
                    "w": round(w, 1),
                    "h": 20,
                    "fill": colours.get(table, PALETTE[-1]),
                    "stroke": "#ffffff",
                    "tip": f"{table}: {count} replicas on {uuid}",
                }
            )
            x += w
            total += count
        texts.append({"x": round(x + 6, 1), "y": y + 15, "text": _count(total, "replica"), "size": 11})
        lead = leaders.get(uuid, 0)
        lw = lead / most * span
        rects.append(
            {"x": label_w, "y": y + 23, "w": round(lw, 1), "h": 8, "fill": LEADER_FILL, "tip": _count(lead, "leader")}
        )
        texts.append({"x": round(label_w + lw + 6, 1), "y": y + 31, "text": _count(lead, "leader"), "size": 10})
    legend_y = top + len(tservers) * row_h + 8
    x = 0
    for table, fill in sorted(colours.items()):
        step = 24 + 7 * len(table)
        if x and x + step > width:  # the legend wraps onto another line
            x, legend_y = 0, legend_y + 18
        rects.append({"x": x, "y": legend_y, "w": 12, "h": 12, "fill": fill})
        texts.append({"x": x + 16, "y": legend_y + 11, "text": table, "size": 11})
        x += step
    return {
        "title": f"replicas and leaders of {len(tservers)} tablet servers",
        "width": width,
        "height": legend_y + 24,
        "rects": rects,
        "texts": texts,
    }
