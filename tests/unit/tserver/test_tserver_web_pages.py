"""The tablet server's page data: rowsets as boxes over the key space, in-flight writes, the tablet
summary, and the pages rendered from that data."""

from __future__ import annotations

import struct

import pytest

from kudu_async.common import types as T
from kudu_async.common.clock import make_timestamp
from kudu_async.common.partition import HashDimension, PartitionSchema
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.server.webui import render, svg
from kudu_async.tserver import web_pages as wp


def _key(n: int) -> str:
    return struct.pack(">Q", n ^ (1 << 63)).hex()


def _rowset(i: int, lo: int, hi: int, size: int) -> dict[str, object]:
    return {"id": i, "rows": size // 10, "min_key": _key(lo), "max_key": _key(hi), "base_bytes": size}


def test_rowsets_are_boxes_over_their_share_of_the_data() -> None:
    rowsets = [_rowset(1, 0, 499, 1000), _rowset(2, 500, 999, 1000), _rowset(3, 0, 999, 2000)]
    boxes = wp.rowset_boxes(rowsets, compacting=[1, 3])
    by_id = {b.id: b for b in boxes}
    assert by_id[1].lo == pytest.approx(0.0) and by_id[2].hi == pytest.approx(1.0)
    assert by_id[1].hi == pytest.approx(by_id[2].lo, abs=0.01)  # neighbours split the data
    assert by_id[3].lo == pytest.approx(0.0) and by_id[3].hi == pytest.approx(1.0)
    assert by_id[1].compacting and not by_id[2].compacting
    levels = dict(zip([b.id for b in boxes], svg.pack_levels(boxes), strict=True))
    assert levels[1] == levels[2] != levels[3]
    assert wp.rowset_boxes([]) == []


def test_a_replicas_partition_as_kudu_names_it() -> None:
    schema = Schema([ColumnSchema("k", T.INT64, nullable=False), ColumnSchema("v", T.STRING)], 1)
    ps = PartitionSchema(schema, [HashDimension(["k"], 3)], ["k"])
    lo, hi = ps.encode_range_key({"k": 0}), ps.encode_range_key({"k": 100})
    info = {
        "partition_schema": ps.to_dict(),
        "partition": {"hash_buckets": [2], "range_key_start": lo, "range_key_end": hi},
    }
    assert wp.partition_description(info, schema) == "HASH (k) PARTITION 2, RANGE (k) PARTITION 0 <= VALUES < 100"
    renamed = Schema([ColumnSchema("key", T.INT64, nullable=False), ColumnSchema("v", T.STRING)], 1)
    assert wp.partition_description(info, renamed) == f"hash buckets [2], range keys [{lo.hex()}, {hi.hex()})"
    assert wp.partition_description({}, schema) == ""


def test_in_flight_writes_longest_first() -> None:
    now = 1_700_000_100.0
    writes = [
        {"tablet_id": "a", "timestamp": make_timestamp(int((now - 0.5) * 1e6))},
        {"tablet_id": "b", "timestamp": make_timestamp(int((now - 2.0) * 1e6), 3)},
    ]
    rows = wp.transaction_rows(writes, now)
    assert [r["tablet_id"] for r in rows] == ["b", "a"]
    assert rows[0]["in_flight_s"] == pytest.approx(2.0, abs=1e-3)


STATUS = {
    "tablet_id": "tab1",
    "table_id": "tid",
    "table_name": "metrics",
    "partition": {"hash_buckets": [1], "partition_key_start": b"\x00\x01", "partition_key_end": b""},
    "state": "RUNNING",
    "error": None,
    "schema_version": 0,
    "schema": {"columns": [{"name": "key", "type": "int64", "nullable": False, "id": 0}], "num_key_columns": 1},
    "consensus": {
        "role": "LEADER",
        "term": 2,
        "leader": "u1",
        "commit_index": 9,
        "applied_index": 9,
        "log_cache_bytes": 2048,
        "peers": [{"uuid": "u1", "address": "h:1", "member_type": "VOTER", "match_index": 9, "mode": "LEADER"}],
    },
    "pending_writes": 0,
    "pending_write_bytes": 0,
    "max_applied_timestamp": 5,
    "result_tracker": {"duplicates_answered": 0},
    "memrowset_bytes": 4096,
    "delta_memstore_bytes": 0,
    "storage": {
        "mrs_rows": 3,
        "average_rowset_height": 1.5,
        "max_rowset_height": 2,
        "rowsets": [_rowset(1, 0, 9, 100)],
    },
}


def test_tablet_page_renders_raft_rowsets_and_memory() -> None:
    summary = wp.tablet_summary(STATUS)
    assert summary["role"] == "LEADER" and summary["disk_rows"] == 10 and summary["rowsets"] == 1
    assert {"what": "Raft log cache", "bytes": 2048} in summary["memory"]
    html = render.render(
        "tablet.html",
        {
            "title": "t",
            "node": {"role": "tserver", "uuid": "u1", "name": "ts-0"},
            "nav": [],
            "current_path": "/tablet",
            "version": "0",
            "rendered_at": "now",
            "css_path": "/kudu.css",
            "request_query": [("id", "tab1")],
            "raw_link": True,
            "status": STATUS,
            "summary": summary,
            "trackers": [{"id": "tablet-tab1", "current": 10, "peak": 20}],
            "columns": [
                {
                    "name": "key",
                    "id": 0,
                    "type": "int64",
                    "key": True,
                    "nullable": False,
                    "encoding": "AUTO_ENCODING",
                    "compression": "DEFAULT_COMPRESSION",
                }
            ],
            "partition_text": "p",
        },
    )
    assert 'href="/tablet-rowsetlayout-svg?id=tab1"' in html and 'href="/tablet-consensus-status?id=tab1"' in html
    assert "4 KiB" in html and "2 KiB" in html and "?raw&amp;id=tab1" in html
