"""Writes racing with flushes and compactions on worker threads never lose or duplicate a row."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from kudu_async.common.clock import ManualHybridClock
from kudu_async.tablet.maintenance_manager import MaintenanceManager
from kudu_async.tablet.ops import LoggedWrite, OpType, WriteOp
from kudu_async.tablet.tablet import ScanSpec, Tablet, TabletOptions
from tests.unit.tablet.tablet_testkit import make_schema


def _scan(tablet: Tablet) -> dict[int, int]:
    t = tablet.scan(ScanSpec(projection=["key", "i32"], ordered=True)).to_table()
    return {} if t is None else dict(zip(t.column("key").to_pylist(), t.column("i32").to_pylist(), strict=True))


@pytest.mark.parametrize("seed", [7, 11, 13])
def test_random_writes_with_background_flush_and_compaction_match_a_dict(tmp_path: Any, seed: int) -> None:
    schema = make_schema()
    clock = ManualHybridClock(10**12)
    opts = TabletOptions(sync=False, target_rowset_bytes=4000, history_max_age_sec=0.0005)
    tablet = Tablet.create(str(tmp_path / "t"), schema, options=opts, clock=clock)
    mm = MaintenanceManager(
        num_threads=2, polling_interval_s=0.001, memory_threshold_bytes=20_000, history_size=100_000
    )
    mm.register(tablet)
    mm.start()
    # The manager puts memory pressure (flushes) and delta compactions before rowset compactions, so
    # while writes run it may never pick one: a helper thread races rowset compactions in as well.
    done = threading.Event()
    merged: list[bool] = []

    def compactor() -> None:
        while not done.is_set():
            merged.append(tablet.compact_rowsets())
            time.sleep(0.005)

    helper = threading.Thread(target=compactor)
    helper.start()
    rng = random.Random(seed)
    model: dict[int, int] = {}
    wal: list[LoggedWrite] = []
    arrow = schema.to_arrow()
    try:
        for step in range(400):
            keys = rng.sample(range(300), 20)
            types, vals = [], []
            for k in keys:
                v = rng.randrange(1000)
                t = rng.choice([OpType.UPDATE, OpType.DELETE, OpType.UPSERT]) if k in model else OpType.INSERT
                types.append(t)
                vals.append(v)
                if t == OpType.DELETE:
                    del model[k]
                else:
                    model[k] = v
            batch = pa.record_batch(
                [
                    pa.array(keys, pa.int64()),
                    pa.array(vals, pa.int32()),
                    pa.array([0.0] * 20),
                    pa.array(["x"] * 20),
                ],
                schema=arrow,
            )
            clock.advance(100)
            ts = clock.now()
            op = WriteOp(types, batch)
            wal.append(LoggedWrite(step + 1, ts, op))
            res = tablet.write(op, ts, step + 1)
            assert res.row_errors == []
            if step % 50 == 0:
                assert _scan(tablet) == model
    finally:
        done.set()
        helper.join()
        mm.stop()
    assert _scan(tablet) == model
    assert any(merged) or any(h["name"] == "CompactRowSetsOp" for h in mm.status()["history"])
    assert all(h["result"] != "ERROR" and not h["result"].startswith("ERROR") for h in mm.status()["history"])
    reopened = Tablet.open(str(tmp_path / "t"), log_ops=wal, options=opts, clock=clock)
    assert _scan(reopened) == model
