from pathlib import Path

import pytest

from kudu_async.common.errors import KuduCorruption, KuduIllegalState
from kudu_async.fs.fs_manager import FsManager


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
