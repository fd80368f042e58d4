"""Crash-safe files, block files and tablet metadata."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from kudu_async.common.errors import KuduCorruption, KuduNotFound
from kudu_async.fs.block_manager import BlockManager
from kudu_async.fs.io_util import atomic_write_bytes, atomic_write_with
from kudu_async.fs.tablet_metadata import (
    RowSetMetadata,
    TabletMetadata,
    metadata_path,
    read_tablet_metadata,
    write_tablet_metadata,
)


def test_atomic_write_replaces_content(tmp_path: Any) -> None:
    p = str(tmp_path / "f")
    atomic_write_bytes(p, b"old")
    atomic_write_bytes(p, b"new")
    assert Path(p).read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["f"]


def test_failed_atomic_write_keeps_the_old_file_and_no_temp(tmp_path: Any) -> None:
    p = str(tmp_path / "f")
    atomic_write_bytes(p, b"old")

    def boom(f: Any) -> None:
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write_with(p, boom)
    assert Path(p).read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def _writes(data: bytes) -> Callable[[BinaryIO], object]:
    return lambda f: f.write(data)


def test_blocks_spread_over_data_dirs_and_orphans_are_removed(tmp_path: Any) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    bm = BlockManager(dirs)
    ids = [bm.write_block(_writes(bytes([i]))) for i in range(4)]
    assert {os.path.dirname(bm.path(b)) for b in ids} == set(dirs)
    assert Path(bm.path(ids[2])).read_bytes() == b"\x02"
    removed = bm.delete_orphans({ids[0], ids[1]})
    assert sorted(removed) == sorted(ids[2:])
    assert bm.all_block_ids() == {ids[0], ids[1]}


def test_stale_temp_files_are_cleaned_on_open(tmp_path: Any) -> None:
    d = tmp_path / "a"
    d.mkdir()
    (d / "x.blk.tmp").write_bytes(b"torn")
    BlockManager([str(d)])
    assert os.listdir(d) == []


def test_tablet_metadata_round_trips(tmp_path: Any) -> None:
    rs = RowSetMetadata(3, "b1", "b2", 10, "00", "ff", 99, ["d1"])
    meta = TabletMetadata("t1", {"columns": []}, [rs], last_flushed_log_index=42, next_rowset_id=4)
    write_tablet_metadata(str(tmp_path), meta)
    back = read_tablet_metadata(str(tmp_path))
    assert back == meta
    assert back.live_blocks() == {"b1", "b2", "d1"}


def test_missing_metadata_is_not_found_and_garbage_is_corruption(tmp_path: Any) -> None:
    with pytest.raises(KuduNotFound):
        read_tablet_metadata(str(tmp_path))
    with open(metadata_path(str(tmp_path)), "wb") as f:
        f.write(b"{not json")
    with pytest.raises(KuduCorruption):
        read_tablet_metadata(str(tmp_path))
