"""The kudu-node command line: bad input exits non-zero naming what was wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kudu_async.fs.fs_manager import FsManager

pytestmark = pytest.mark.integration


def run_node(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kudu_async.server.main", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_lists_flags() -> None:
    r = run_node("--help")
    assert r.returncode == 0 and "--master-addresses" in r.stdout and "default" in r.stdout


def test_unknown_flag_exits_nonzero_naming_it(tmp_path: Path) -> None:
    r = run_node("--role", "master", "--data-dir", str(tmp_path), "--rpc-bnid", "x")
    assert r.returncode != 0 and "--rpc-bnid" in r.stderr


def test_bad_value_exits_nonzero_naming_flag_and_value(tmp_path: Path) -> None:
    r = run_node("--role", "master", "--data-dir", str(tmp_path), "--http-bind", "127.0.0.1:notaport")
    assert r.returncode == 2 and "--http-bind" in r.stderr and "notaport" in r.stderr


def test_refuses_data_dir_of_other_role(tmp_path: Path) -> None:
    FsManager(tmp_path, "master").open_or_create()
    r = run_node(
        "--role", "tserver", "--data-dir", str(tmp_path), "--rpc-bind", "127.0.0.1:0", "--http-bind", "127.0.0.1:0"
    )
    assert r.returncode == 1 and "belongs to a master" in r.stderr


def test_refuses_damaged_instance_file(tmp_path: Path) -> None:
    (tmp_path / "instance").write_text("garbage")
    r = run_node(
        "--role", "master", "--data-dir", str(tmp_path), "--rpc-bind", "127.0.0.1:0", "--http-bind", "127.0.0.1:0"
    )
    assert r.returncode == 1 and "damaged" in r.stderr
