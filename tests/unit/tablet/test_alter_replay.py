"""Bootstrap across an AlterSchema: crash images taken before, during and after it replay to the same rows.

A crash image is a copy of the tablet directory taken while the tablet is quiescent (blocks are never
changed in place and the metadata file is replaced atomically, so a copy is what a crash would leave).
Replay follows the tablet server's bootstrap: writes above the durable index through ``Tablet.open``,
then, in log order, each alter re-applied with ``alter_schema`` at its index and each later write
prepared with ``replay=True`` and applied.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kudu_async.common import types as T
from kudu_async.common.clock import ManualHybridClock
from kudu_async.common.schema import ColumnSchema, Schema
from kudu_async.fs import tablet_metadata
from kudu_async.fs.tablet_metadata import read_tablet_metadata
from kudu_async.tablet.ops import LoggedWrite, OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet

BASE = Schema(
    [
        ColumnSchema("k", T.INT64, nullable=False),
        ColumnSchema("s", T.STRING),
        ColumnSchema("x", T.INT32),
        ColumnSchema("d", T.DECIMAL, precision=9, scale=2),
    ],
    1,
)


@dataclass
class LoggedAlter:
    log_index: int
    schema: Schema
    version: int


class Log:
    """A tablet plus the WAL a tablet server would have written for it."""

    def __init__(self, tablet: Tablet, clock: ManualHybridClock) -> None:
        self.t, self.clock = tablet, clock
        self.entries: list[LoggedWrite | LoggedAlter] = []

    def write(self, ops: list[int], cols: dict[str, list], set_columns: np.ndarray | None = None) -> None:
        self.clock.advance(10)
        arrow = self.t.info.arrow
        batch = pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in arrow], schema=arrow)
        entry = LoggedWrite(len(self.entries) + 1, self.clock.now(), WriteOp(ops, batch, set_columns))
        self.entries.append(entry)
        res = self.t.write(entry.op, entry.timestamp, entry.log_index)
        assert not res.row_errors, res.row_errors

    def alter(self, schema: Schema, version: int) -> None:
        entry = LoggedAlter(len(self.entries) + 1, schema, version)
        self.entries.append(entry)
        assert self.t.alter_schema(schema, version, entry.log_index)


def bootstrap(tablet_dir: str, entries: list[LoggedWrite | LoggedAlter], clock: ManualHybridClock) -> Tablet:
    first_alter = next((i for i, e in enumerate(entries) if isinstance(e, LoggedAlter)), len(entries))
    head = [e for e in entries[:first_alter] if isinstance(e, LoggedWrite)]
    durable = read_tablet_metadata(tablet_dir).last_flushed_log_index  # the replay start
    t = Tablet.open(tablet_dir, log_ops=head, clock=clock)
    for e in entries[first_alter:]:
        if e.log_index <= durable:
            continue
        if isinstance(e, LoggedAlter):
            t.alter_schema(e.schema, e.version, e.log_index)  # False when already in the metadata
        else:
            clock.update(e.timestamp)
            t.apply_write(t.prepare_write(e.op, e.timestamp, replay=True), e.log_index)
    return t


def rows(t: Tablet) -> list[dict]:
    table = t.scan(ScanSpec(ordered=True)).to_table()
    return [] if table is None else table.to_pylist()


@pytest.mark.parametrize("flush_after_alter", [False, True])
def test_crash_images_around_alters_replay_to_the_same_rows(tmp_path: Path, flush_after_alter: bool) -> None:
    clock = ManualHybridClock(1_000_000)
    log = Log(Tablet.create(str(tmp_path / "live"), BASE, clock=clock), clock)
    images: list[tuple[str, int]] = []

    def image() -> None:
        dest = str(tmp_path / f"image{len(images)}")
        shutil.copytree(str(tmp_path / "live"), dest)
        images.append((dest, len(log.entries)))

    image()  # empty: everything replays, both alters included
    log.write(
        [OpType.INSERT] * 3,
        {"k": [1, 2, 3], "s": ["a", "b", "c"], "x": [1, 2, 3], "d": [Decimal("1.00"), None, Decimal("3.30")]},
    )
    log.t.flush_mrs()
    log.write(
        [OpType.UPDATE], {"k": [1], "s": ["a1"], "x": [None], "d": [None]}, np.array([[True, True, False, False]])
    )  # a DMS delta, only in the log
    log.write([OpType.INSERT, OpType.DELETE], {"k": [4, 3], "s": ["d", None], "x": [4, None], "d": [None, None]})
    image()  # before the first alter: old-schema writes replay against the old schema
    log.alter(
        log.t.info.schema.drop_column("x")
        .rename_column("s", "label")
        .add_column(ColumnSchema("extra", T.INT32, default=5)),
        1,
    )
    image()  # right after its commit: nothing before it is replayed
    log.write(
        [OpType.UPDATE], {"k": [2], "label": [None], "d": [None], "extra": [20]}, np.array([[True, False, False, True]])
    )  # sets the added column on an old row
    log.write(
        [OpType.INSERT, OpType.INSERT], {"k": [3, 6], "label": ["c2", "f"], "d": [None, None], "extra": [None, 6]}
    )  # re-insert of a deleted key
    if flush_after_alter:
        log.t.flush_all()
    image()
    log.alter(log.t.info.schema.rename_column("k", "key").alter_column("extra", default=9), 2)
    log.write([OpType.DELETE], {"key": [4], "label": [None], "d": [None], "extra": [None]})
    image()

    expected = rows(log.t)
    assert expected == [
        {"key": 1, "label": "a1", "d": Decimal("1.00"), "extra": 5},
        {"key": 2, "label": "b", "d": None, "extra": 20},
        {"key": 3, "label": "c2", "d": None, "extra": None},
        {"key": 6, "label": "f", "d": None, "extra": 6},
    ]
    ts = clock.now()
    want = log.t.checksum(ts)
    for path, _ in images:
        t = bootstrap(path, log.entries, clock)
        assert t.schema_version == 2, path
        assert rows(t) == expected, path
        assert t.checksum(ts) == want, path
        t.flush_all()
        t.compact_rowsets()
        assert rows(t) == expected and t.checksum(ts) == want, path
        again = bootstrap(path, log.entries, clock)  # replay after the replayed alters were committed
        assert rows(again) == expected, path


def test_crash_between_the_alters_flush_and_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush an alter starts with commits under the old schema; a crash there replays the alter."""
    import kudu_async.tablet.rowset_maintenance as maintenance_mod

    clock = ManualHybridClock(1_000_000)
    log = Log(Tablet.create(str(tmp_path / "live"), BASE, clock=clock), clock)
    log.write([OpType.INSERT] * 2, {"k": [1, 2], "s": ["a", "b"], "x": [1, 2], "d": [None, None]})
    real = tablet_metadata.write_tablet_metadata

    def crash_at_alter_commit(tablet_dir: str, meta: object, *, sync: bool = True) -> None:
        if getattr(meta, "schema_version", 0) == 1:
            shutil.copytree(tablet_dir, str(tmp_path / "image"))  # what a crash right here leaves
        real(tablet_dir, meta, sync=sync)  # type: ignore[arg-type]

    monkeypatch.setattr(maintenance_mod, "write_tablet_metadata", crash_at_alter_commit)
    log.alter(log.t.info.schema.add_column(ColumnSchema("extra", T.STRING, default="z")), 1)
    monkeypatch.setattr(maintenance_mod, "write_tablet_metadata", real)
    log.write([OpType.INSERT], {"k": [3], "s": ["c"], "x": [3], "d": [None], "extra": [None]})
    t = bootstrap(str(tmp_path / "image"), log.entries, clock)
    assert t.schema_version == 1 and rows(t) == rows(log.t)
    assert [r["extra"] for r in rows(t)] == ["z", "z", None]
