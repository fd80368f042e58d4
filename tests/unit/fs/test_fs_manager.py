import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kudu_async.common.errors import KuduCorruption, KuduIllegalState
from kudu_async.fs.fs_manager import DataDirLock, FsManager


def test_uuid_is_created_once_and_kept(tmp_path: Path) -> None:
    first = FsManager(tmp_path, "tserver").open_or_create()
    again = FsManager(tmp_path, "tserver").open_or_create()
    assert first.uuid == again.uuid and len(first.uuid) == 32


def test_refuses_directory_of_other_role(tmp_path: Path) -> None:
    FsManager(tmp_path, "master").open_or_create()
    with pytest.raises(KuduIllegalState, match="belongs to a master"):
        FsManager(tmp_path, "tserver").open_or_create()


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"instance": {"uuid": "x"}, "crc32": 1}'])
def test_refuses_damaged_instance_file(tmp_path: Path, damage: bytes) -> None:
    fs = FsManager(tmp_path, "master")
    fs.open_or_create()
    fs.instance_path.write_bytes(damage)
    with pytest.raises(KuduCorruption, match="damaged"):
        FsManager(tmp_path, "master").open_or_create()


def test_flipped_byte_in_uuid_is_caught_by_checksum(tmp_path: Path) -> None:
    fs = FsManager(tmp_path, "master")
    meta = fs.open_or_create()
    raw = fs.instance_path.read_text()
    fs.instance_path.write_text(raw.replace(meta.uuid, ("0" if meta.uuid[0] != "0" else "1") + meta.uuid[1:]))
    with pytest.raises(KuduCorruption, match="checksum"):
        FsManager(tmp_path, "master").open_or_create()


def test_a_running_node_holds_its_directory_until_it_dies(tmp_path: Path) -> None:
    """Another process opening the directory with the lock (a second node, a tool) is refused, naming the
    holder's pid; the kernel drops the lock when the holder dies, however it dies."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from kudu_async.fs.fs_manager import FsManager\n"
            "FsManager(sys.argv[1], 'tserver').open_or_create(lock=True)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],  # this checkout's kudu_async
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(KuduIllegalState, match=rf"is in use: process {holder.pid} \(tserver\) holds"):
            DataDirLock.acquire(tmp_path, "a tool")
        assert FsManager(tmp_path, "tserver").open_or_create().uuid  # reading without the lock still works
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 5
    while True:
        try:
            lock = DataDirLock.acquire(tmp_path, "a tool")
            break
        except KuduIllegalState:
            assert time.monotonic() < deadline, "the lock outlived its holder"
            time.sleep(0.05)
    assert (tmp_path / "instance.lock").read_text().startswith(f"{os.getpid()} (a tool)")
    lock.release()
