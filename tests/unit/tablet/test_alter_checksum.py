"""AlterSchema in the storage (columns matched by id across files) and the replica checksum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kudu_async.common import types as T
from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.errors import KuduIllegalState, KuduInvalidArgument
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.fs import tablet_metadata
from kudu_async.tablet.ops import OpType, WriteOp
from kudu_async.tablet.tablet import READ_AT_SNAPSHOT, ScanSpec, Tablet

BASE = Schema(
    [
        ColumnSchema("k", T.INT64, nullable=False),
        ColumnSchema("s", T.STRING),
        ColumnSchema("x", T.INT32),
        ColumnSchema("d", T.DECIMAL, precision=9, scale=2),
    ],
    1,
)


class Writer:
    def __init__(self, tablet: Tablet, clock: ManualHybridClock) -> None:
        self.t, self.clock, self.index = tablet, clock, 0

    def write(self, ops: list[int], cols: dict[str, list], set_columns: np.ndarray | None = None) -> None:
        self.clock.advance(10)
        self.index += 1
        arrow = self.t.info.arrow
        batch = pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in arrow], schema=arrow)
        res = self.t.write(WriteOp(ops, batch, set_columns), self.clock.now(), self.index)
        assert not res.row_errors, res.row_errors

    def alter(self, schema: Schema, version: int) -> bool:
        self.index += 1
        return self.t.alter_schema(schema, version, self.index)


def rows_of(t: Tablet) -> dict[int, dict]:
    table = t.scan(ScanSpec(ordered=True)).to_table()
    return {} if table is None else {r[t.info.key_names[0]]: r for r in table.to_pylist()}


@pytest.fixture
def w(tmp_path: Path) -> Writer:
    clock = ManualHybridClock(1_000_000)
    return Writer(Tablet.create(str(tmp_path / "t"), BASE, clock=clock), clock)


def _seed(w: Writer) -> None:
    from decimal import Decimal

    w.write(
        [OpType.INSERT] * 3,
        {"k": [1, 2, 3], "s": ["a", "b", "c"], "x": [10, 20, None], "d": [Decimal("1.50"), None, Decimal("3.25")]},
    )
    w.t.flush_mrs()  # rows 1-3 in a DiskRowSet
    w.write(
        [OpType.UPDATE], {"k": [2], "s": ["b2"], "x": [21], "d": [None]}, np.array([[True, True, True, False]])
    )  # a delta on the DiskRowSet
    w.write([OpType.INSERT], {"k": [4], "s": ["d"], "x": [40], "d": [None]})  # the MemRowSet


def test_create_assigns_ids_and_persists_version(w: Writer, tmp_path: Path) -> None:
    assert [c.id for c in w.t.info.schema.columns] == [0, 1, 2, 3]
    assert w.t.schema_version == 0
    assert Schema.from_dict(BASE.to_dict()).with_column_ids().columns[3].id == 3
    renamed = w.t.info.schema.rename_column("s", "label")
    assert renamed.column("label").id == 1 and renamed == renamed.with_column_ids()


@pytest.mark.parametrize("compact", [False, True])
def test_add_drop_rename_across_files_deltas_and_memory(w: Writer, tmp_path: Path, compact: bool) -> None:
    _seed(w)
    cur = w.t.info.schema
    new = cur.drop_column("x").rename_column("s", "label").add_column(ColumnSchema("extra", T.INT32, default=7))
    assert w.alter(new, 1)
    assert not w.alter(new, 1)  # replayed: nothing happens
    assert w.t.schema_version == 1 and w.t.info.names == ["k", "label", "d", "extra"]
    got = rows_of(w.t)
    assert got[2] == {"k": 2, "label": "b2", "d": None, "extra": 7}
    assert got[4]["label"] == "d" and got[4]["extra"] == 7
    # Writes in the new shape; an UPDATE of an old row sets the added column; delete + re-insert.
    w.write(
        [OpType.UPDATE], {"k": [1], "label": [None], "d": [None], "extra": [70]}, np.array([[True, False, False, True]])
    )
    w.write([OpType.DELETE], {"k": [3], "label": [None], "d": [None], "extra": [None]})
    w.write([OpType.INSERT, OpType.INSERT], {"k": [3, 5], "label": ["c2", "e"], "d": [None, None], "extra": [None, 5]})
    if compact:
        w.t.flush_all()
        w.t.compact_rowsets()
    got = rows_of(w.t)
    assert got[1] == {"k": 1, "label": "a", "d": got[1]["d"], "extra": 70} and str(got[1]["d"]) == "1.50"
    assert got[3] == {"k": 3, "label": "c2", "d": None, "extra": None}
    assert got[5]["extra"] == 5 and len(got) == 5
    # Reopen (after a flush: no log replay here): the schema, its version and every mapping survive.
    w.t.flush_all()
    reopened = Tablet.open(str(tmp_path / "t"), clock=w.clock)
    assert reopened.schema_version == 1 and rows_of(reopened) == got


def test_replay_before_and_after_the_alter(w: Writer, tmp_path: Path) -> None:
    _seed(w)  # in memory: one DMS delta and one MemRowSet row, never flushed
    new = w.t.info.schema.add_column(ColumnSchema("extra", T.STRING))
    # A crash before the alter: old-schema writes replay against the old schema, then the alter again.
    fresh = Tablet.open(str(tmp_path / "t"), clock=w.clock)
    assert fresh.schema_version == 0 and 4 not in rows_of(fresh)  # the MemRowSet write was only in memory
    assert w.alter(new, 1)
    after = Tablet.open(str(tmp_path / "t"), clock=w.clock)
    assert after.schema_version == 1
    assert after.earliest_needed_log_index() > w.index  # nothing at or before the alter is replayed
    assert rows_of(after)[4]["extra"] is None and rows_of(after)[2]["s"] == "b2"


def test_invalid_alterations_name_the_column(w: Writer) -> None:
    cur = w.t.info.schema
    bad = [
        (Schema([*cur.columns, ColumnSchema("t", T.STRING, nullable=False)], 1), "must be nullable"),
        (
            Schema([*cur.columns[:2], ColumnSchema("x", T.INT32, nullable=False, default=1, id=2), cur.columns[3]], 1),
            "nullable",
        ),
        (Schema([ColumnSchema("k", T.INT32, nullable=False, id=0), *cur.columns[1:]], 1), "type"),
        (Schema([ColumnSchema("k2", T.INT64, nullable=False, id=9), *cur.columns[1:]], 1), "primary key"),
    ]
    for schema, msg in bad:
        with pytest.raises(KuduInvalidArgument, match=msg):
            w.alter(schema, 1)
    assert w.t.schema_version == 0


def test_write_prepared_before_an_alter_is_refused_at_apply(w: Writer) -> None:
    arrow = w.t.info.arrow
    batch = pa.RecordBatch.from_arrays(
        [pa.array([9], f.type) if f.name == "k" else pa.nulls(1, f.type) for f in arrow], schema=arrow
    )
    prepared = w.t.prepare_write(WriteOp([OpType.INSERT], batch), w.clock.now())
    assert w.alter(w.t.info.schema.add_column(ColumnSchema("y", T.INT8)), 1) is True
    with pytest.raises(KuduIllegalState, match="schema version"):
        w.t.apply_write(prepared, 99)
    assert prepared.state == "aborted" and w.t.mvcc.in_flight() == []  # locks and MVCC slot given back


def test_checksum_ignores_layout_and_sees_values(tmp_path: Path) -> None:
    def build(name: str, layout: str) -> Tablet:
        clock = ManualHybridClock(5_000_000)
        wr = Writer(Tablet.create(str(tmp_path / name), BASE, clock=clock), clock)
        keys = list(range(200))
        for part in [keys[:100], keys[100:]] if layout != "one" else [keys]:
            wr.write(
                [OpType.INSERT] * len(part),
                {
                    "k": part,
                    "s": [f"s{k}" if k % 7 else None for k in part],
                    "x": [k * 3 for k in part],
                    "d": [None] * len(part),
                },
            )
            if layout in ("flushed", "compacted"):
                wr.t.flush_mrs()
        wr.write([OpType.DELETE], {"k": [5], "s": [None], "x": [None], "d": [None]})
        if layout == "compacted":
            wr.t.flush_all()
            wr.t.compact_rowsets()
        return wr.t

    sums = {layout: build(layout, layout).checksum() for layout in ("one", "flushed", "compacted")}
    assert len({(s["rows"], s["checksum"]) for s in sums.values()}) == 1
    assert sums["one"]["rows"] == 199
    clock = ManualHybridClock(5_000_000)
    other = Writer(build("other", "one"), clock)
    other.clock = other.t.clock  # type: ignore[assignment]
    before = other.t.checksum()
    other.clock.advance(10)
    other.index = 10
    other.write([OpType.UPDATE], {"k": [7], "s": ["changed"], "x": [21], "d": [None]})
    assert other.t.checksum()["checksum"] != before["checksum"]
    # An older snapshot ignores the later write.
    assert other.t.checksum(before["snapshot_ts"]) == before
    spec_rows = other.t.scan(ScanSpec(read_mode=READ_AT_SNAPSHOT, snapshot_ts=before["snapshot_ts"])).to_table()
    assert spec_rows is not None and spec_rows.num_rows == 199


def test_stats_count_flushes_and_compactions(w: Writer) -> None:
    _seed(w)
    before = w.t.stats()
    w.t.flush_all()
    w.t.compact_rowsets()
    after = w.t.stats()
    assert after["flushes"] > before["flushes"] and after["bytes_flushed"] > before["bytes_flushed"]
    assert after["compactions"] == before["compactions"] + 1 and after["bytes_compacted"] > 0


def test_compaction_after_alter_keeps_a_reinsert_written_before_it(tmp_path: Path) -> None:
    from kudu_async.tablet.tablet import TabletOptions

    clock = ManualHybridClock(1_000_000)
    w = Writer(
        Tablet.create(str(tmp_path / "t"), BASE, clock=clock, options=TabletOptions(history_max_age_sec=1)), clock
    )
    cols: dict[str, list[Any]] = {"k": [1], "s": ["a"], "x": [1], "d": [None]}
    w.write([OpType.INSERT], cols)
    w.t.flush_mrs()
    w.write([OpType.DELETE], cols)
    clock.advance(5_000_000)  # the delete is now older than the history mark: compaction folds it away
    w.write([OpType.INSERT], {**cols, "s": ["again"]})  # a re-insert: a whole-row delta on the DiskRowSet
    assert w.alter(w.t.info.schema.add_column(ColumnSchema("extra", T.INT32, default=3)), 1)  # flushes it
    assert w.t.compact_rowsets([w.t.rowsets()[0].id])
    assert rows_of(w.t)[1] == {"k": 1, "s": "again", "x": 1, "d": None, "extra": 3}


def test_checksum_default_snapshot_on_empty_and_idle_tablets(tmp_path: Path) -> None:
    from kudu_async.tablet.tablet import TabletOptions

    clock = ManualHybridClock(1_000_000)
    t = Tablet.create(str(tmp_path / "t"), BASE, clock=clock, options=TabletOptions(history_max_age_sec=1))
    empty = t.checksum()
    assert empty["rows"] == 0 and 0 < empty["snapshot_ts"] < clock.now()
    w = Writer(t, clock)
    w.write([OpType.INSERT], {"k": [1], "s": ["a"], "x": [1], "d": [None]})
    clock.advance(10_000_000)  # the last write is now older than the history mark
    idle = t.checksum()
    assert idle["rows"] == 1 and idle["snapshot_ts"] > t.ancient_history_mark()


def test_added_column_read_default_is_fixed_when_added(tmp_path: Path) -> None:
    """Kudu's read default: rows older than an added column read the default it had when added, so a
    later default change (or whether a compaction materialised the value in between) never shows."""

    def build(name: str, compact_between: bool) -> Writer:
        clock = ManualHybridClock(1_000_000)
        wr = Writer(Tablet.create(str(tmp_path / name), BASE, clock=clock), clock)
        _seed(wr)
        assert wr.alter(wr.t.info.schema.add_column(ColumnSchema("extra", T.INT32, default=7)), 1)
        if compact_between:
            assert wr.t.compact_rowsets()  # writes extra=7 into the files
        assert wr.alter(wr.t.info.schema.alter_column("extra", default=9), 2)
        wr.write([OpType.INSERT], {"k": [10], "s": ["new"], "x": [None], "d": [None], "extra": [9]})
        return wr

    plain, compacted = build("plain", False), build("compacted", True)
    for wr in (plain, compacted):
        got = rows_of(wr.t)
        assert [got[k]["extra"] for k in (1, 2, 3, 4, 10)] == [7, 7, 7, 7, 9]
    ts = plain.clock.now()
    assert plain.t.checksum(ts) == compacted.t.checksum(ts)
    plain.t.flush_all()
    assert plain.t.compact_rowsets()
    reopened = Tablet.open(str(tmp_path / "plain"), clock=plain.clock)
    assert [rows_of(reopened)[k]["extra"] for k in (1, 4, 10)] == [7, 7, 9]


def test_dropping_then_re_adding_a_name_never_shows_the_old_data(w: Writer) -> None:
    _seed(w)
    assert w.alter(w.t.info.schema.drop_column("x"), 1)
    assert w.alter(w.t.info.schema.add_column(ColumnSchema("x", T.INT32)), 2)  # a new column (new id)
    assert w.t.info.schema.column("x").id == 4
    got = rows_of(w.t)
    assert all(r["x"] is None for r in got.values()) and got[2]["s"] == "b2"
    w.t.compact_rowsets()
    assert rows_of(w.t) == got


def test_scan_opened_before_an_alter_keeps_its_schema(w: Writer) -> None:
    _seed(w)
    w.t.flush_all()
    w.write([OpType.INSERT], {"k": [5], "s": ["e"], "x": [50], "d": [None]})
    scanner = w.t.scan(ScanSpec(ordered=True, batch_bytes=1))  # one row per batch: mostly unread yet
    first = next(scanner)
    new = w.t.info.schema.drop_column("x").rename_column("s", "label").add_column(ColumnSchema("y", T.INT8))
    assert w.alter(new, 1)
    w.t.compact_rowsets()  # the files the scan reads are retired and deleted
    rest = list(scanner)
    assert all(b.schema.names == ["k", "s", "x", "d"] for b in [first, *rest])
    assert [r["k"] for b in [first, *rest] for r in b.to_pylist()] == [1, 2, 3, 4, 5]
    assert rows_of(w.t)[5] == {"k": 5, "label": "e", "d": None, "y": None}


def test_alter_whose_commit_fails_changes_nothing(w: Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    import kudu_async.tablet.rowset_maintenance as maintenance_mod

    _seed(w)
    real = tablet_metadata.write_tablet_metadata

    def failing(tablet_dir: str, meta: object, *, sync: bool = True) -> None:
        if getattr(meta, "schema_version", 0) == 1:
            raise OSError("disk full")
        real(tablet_dir, meta, sync=sync)  # type: ignore[arg-type]

    monkeypatch.setattr(maintenance_mod, "write_tablet_metadata", failing)
    new = w.t.info.schema.add_column(ColumnSchema("extra", T.INT32))
    with pytest.raises(OSError):
        w.alter(new, 1)
    alter_index = w.index
    assert w.t.schema_version == 0 and w.t.info.names == ["k", "s", "x", "d"]
    assert w.t.earliest_needed_log_index() <= alter_index  # the alter is still to be replayed
    w.write([OpType.INSERT], {"k": [6], "s": ["f"], "x": [6], "d": [None]})  # the old schema still works
    monkeypatch.setattr(maintenance_mod, "write_tablet_metadata", real)
    assert w.alter(new, 1)
    assert rows_of(w.t)[6]["extra"] is None


def test_metadata_written_before_alter_support_loads(tmp_path: Path) -> None:
    import json

    from kudu_async.fs.tablet_metadata import TabletMetadata

    raw = {
        "tablet_id": "t",
        "schema": BASE.to_dict(),
        "rowsets": [],
        "last_flushed_log_index": 3,
        "next_rowset_id": 0,
        "version": 1,
    }
    meta = TabletMetadata.from_json(json.dumps(raw).encode())
    assert meta.schema_version == 0 and meta.added_columns == []


def test_lookup_and_key_predicates_after_renaming_the_key(w: Writer) -> None:
    from kudu_async.common.key_encoding import encode_key
    from kudu_async.common.predicate import ColumnPredicate

    _seed(w)
    w.t.flush_all()  # the update of row 2 is now in a delta file written for the old schema
    w.write(
        [OpType.UPDATE], {"k": [3], "s": ["c3"], "x": [None], "d": [None]}, np.array([[True, True, False, False]])
    )  # and one in the DeltaMemStore (flushed by the alter)
    new = (
        w.t.info.schema.rename_column("k", "id")
        .rename_column("x", "n")
        .add_column(ColumnSchema("extra", T.STRING, default="e"))
    )
    assert w.alter(new, 1)
    schema = w.t.info.schema
    assert w.t.lookup(encode_key(schema, [2])) == {"id": 2, "s": "b2", "n": 21, "d": None, "extra": "e"}
    assert w.t.lookup(encode_key(schema, [3]))["s"] == "c3"  # type: ignore[index]
    pred = ColumnPredicate("id", ">=", 3)
    got = w.t.scan(ScanSpec(predicates=[pred], ordered=True)).to_table()
    assert got is not None and got.column("id").to_pylist() == [3, 4]
    w.write(
        [OpType.UPDATE],
        {"id": [2], "s": [None], "n": [None], "d": [None], "extra": ["set"]},
        np.array([[True, False, False, False, True]]),
    )
    assert w.t.lookup(encode_key(schema, [2]))["extra"] == "set"  # type: ignore[index]


def test_checksum_covers_every_type_and_ignores_batching(tmp_path: Path) -> None:
    import datetime as dt
    from decimal import Decimal

    cols = [
        ColumnSchema("k", T.INT32, nullable=False),
        ColumnSchema("i8", T.INT8),
        ColumnSchema("i16", T.INT16),
        ColumnSchema("i64", T.INT64),
        ColumnSchema("f", T.FLOAT),
        ColumnSchema("db", T.DOUBLE),
        ColumnSchema("b", T.BOOL),
        ColumnSchema("s", T.STRING),
        ColumnSchema("bin", T.BINARY),
        ColumnSchema("ts", T.UNIXTIME_MICROS),
        ColumnSchema("dt", T.DATE),
        ColumnSchema("dec", T.DECIMAL, precision=20, scale=3),
        ColumnSchema("vc", T.VARCHAR, length=5),
    ]
    schema = Schema(cols, 1)
    n = 60
    data: dict[str, list[Any]] = {
        "k": list(range(n)),
        "i8": [i % 100 for i in range(n)],
        "i16": [i * 7 for i in range(n)],
        "i64": [i << 40 for i in range(n)],
        "f": [i / 4 for i in range(n)],
        "db": [i / 3 for i in range(n)],
        "b": [i % 2 == 0 for i in range(n)],
        "s": [("x" * (i % 5)) for i in range(n)],
        "bin": [bytes([i]) * (i % 3) for i in range(n)],
        "ts": [dt.datetime(2020, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(n)],
        "dt": [dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(n)],
        "dec": [Decimal(i) / 8 for i in range(n)],
        "vc": [str(i) for i in range(n)],
    }
    for j, name in enumerate(data):  # NULLs in every nullable column, at different rows
        if name != "k":
            data[name][(j * 11) % n] = None

    def build(name: str, layout: str, batch_bytes: int | None = None) -> dict:
        clock = ManualHybridClock(1_000_000)
        wr = Writer(Tablet.create(str(tmp_path / name), schema, clock=clock), clock)
        parts = [range(0, n, 2), range(1, n, 2)] if layout != "one" else [range(n)]
        for part in parts:
            wr.write([OpType.INSERT] * len(part), {c: [v[i] for i in part] for c, v in data.items()})
            if layout != "one":
                wr.t.flush_mrs()  # two interleaved, overlapping DiskRowSets
        if layout == "compacted":
            wr.t.compact_rowsets()
        ts = clock.now()
        out = wr.t.checksum(ts)
        if batch_bytes:  # the same rows through tiny scan batches hash the same
            wr.t.options.scan_batch_bytes = batch_bytes
            assert wr.t.checksum(ts)["checksum"] == out["checksum"]
        return out

    sums = [build("one", "one"), build("flushed", "flushed", 64), build("compacted", "compacted")]
    assert sums[0]["rows"] == n and len({s["checksum"] for s in sums}) == 1
    data["dec"][7] = Decimal("0.876")  # 7/8 + 0.001: one value differs
    assert build("changed", "one")["checksum"] != sums[0]["checksum"]


def test_more_invalid_alterations(w: Writer) -> None:
    cur = w.t.info.schema
    k, s, x, d = cur.columns
    from dataclasses import replace

    bad = [
        (Schema([k, s, x], 1).add_column(ColumnSchema("d2", T.DECIMAL, precision=9, scale=3, id=3)), "'d'.*scale"),
        (Schema([k, s, x, replace(d, precision=10)], 1), "'d'.*precision"),
        (Schema([k, replace(s, nullable=False, default="z"), x, d], 1), "'s'.*nullable"),
        (Schema([k, replace(s, nullable=False), x, d], 2), "key column 's'"),  # a value column cannot join the key
        (Schema([k, s, x, d, ColumnSchema("old", T.INT32, id=2)], 1), "unique"),
    ]
    for schema, msg in bad:
        with pytest.raises(KuduInvalidArgument, match=msg):
            w.alter(schema, 1)
    assert w.alter(cur.drop_column("x"), 1)
    with pytest.raises(KuduInvalidArgument, match="reuses the id 2"):  # a dropped id never comes back
        w.alter(Schema([*w.t.info.schema.columns, ColumnSchema("x", T.INT32, id=2)], 1), 2)
    assert w.t.schema_version == 1 and w.t.info.names == ["k", "s", "d"]


def test_stats_are_monotonic_and_count_only_work_done(w: Writer) -> None:
    assert w.t.stats() == {"flushes": 0, "bytes_flushed": 0, "compactions": 0, "bytes_compacted": 0}
    _seed(w)  # one MRS flush so far
    s1 = w.t.stats()
    assert s1["flushes"] == 1 and s1["bytes_flushed"] > 0 and s1["compactions"] == 0
    assert not w.t.flush_dms(99_999) and w.t.stats() == s1  # nothing to do: nothing counted
    drs_id = w.t.rowsets()[0].id
    assert w.t.flush_dms(drs_id)  # a DMS flush counts as a flush, with its block's bytes
    s2 = w.t.stats()
    assert s2["flushes"] == 2 and s2["bytes_flushed"] > s1["bytes_flushed"]
    w.write([OpType.UPDATE], {"k": [1], "s": ["a2"], "x": [None], "d": [None]}, np.array([[True, True, False, False]]))
    assert w.t.flush_dms(drs_id)
    assert not w.t.minor_delta_compaction(99_999)
    assert w.t.minor_delta_compaction(drs_id)  # two delta files into one
    s3 = w.t.stats()
    assert s3["flushes"] == 3 and s3["compactions"] == 1 and s3["bytes_compacted"] > 0
    assert w.t.compact_rowsets([drs_id])  # a major delta compaction of the one rowset
    w.t.flush_mrs()
    s4 = w.t.stats()
    assert s4["compactions"] == 2 and s4["bytes_compacted"] > s3["bytes_compacted"] and s4["flushes"] == 4
    assert all(s4[key] >= s3[key] for key in s4)


def test_storage_needs_column_ids_in_schemas_and_files(w: Writer, tmp_path: Path) -> None:
    """Columns are matched by id: a storage schema without ids, or a block without its id map, is an
    error that names what is missing (the tablet numbers a new table's columns when it creates it)."""
    import os

    import pyarrow.parquet as pq

    from kudu_async.common.errors import KuduCorruption
    from kudu_async.tablet.schema_info import FILE_IDS_META, SchemaInfo

    with pytest.raises(KuduInvalidArgument, match="column 'k' has no column id"):
        SchemaInfo(BASE)
    assert [c.id for c in w.t.info.schema.columns] == [0, 1, 2, 3]
    _seed(w)
    w.t.flush_all()
    block = w.t.rowsets()[0].meta.base_block
    p = w.t.bm.path(block)
    table = pq.read_table(p)
    md = dict(table.schema.metadata or {})
    del md[FILE_IDS_META]
    os.replace(p, p + ".old")
    pq.write_table(table.replace_schema_metadata(md), p)
    with pytest.raises(KuduCorruption, match="no column id map"):
        rows_of(Tablet.open(str(tmp_path / "t"), clock=w.clock))
